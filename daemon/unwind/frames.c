/*
 * Collecting one thread's frames, innermost first: heap frame objects linked
 * by f_back up to 3.10, interpreter frames in the data stack from 3.11.
 * Every list walked here comes from remote memory and is bounded.
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* All frames of one sample together; keeps a garbage sample's work bounded. */
#define FRAMES_MAX_TOTAL (1u << 18)
/* Shim frames do not count as frames, but they are bounded too. */
#define FRAMES_MAX_LINKS (2u * UW_MAX_FRAMES)
/* Bytes above a stack's top frame the next batch reads: room for new frames. */
#define FRAMES_TOP_GROW 2048u
/*
 * Most of a data-stack chunk read at once when the batch missed it: four
 * pages, which a walk of the frames on them pins one by one anyway.
 */
#define FRAMES_LIVE_READ_MAX 16384u

static int frames_push(struct walk *w, uint32_t *n, struct raw_frame f, struct uw_error *err)
{
	if (w->nraw >= FRAMES_MAX_TOTAL)
		return uw_fail(err, UW_ECORRUPT, "more than %u frames in one sample",
		               FRAMES_MAX_TOTAL);
	if (array_reserve((void **)&w->raw, &w->raw_cap, w->nraw, sizeof *w->raw, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	w->raw[w->nraw++] = f;
	(*n)++;
	return 0;
}

/* The sample's time ran out in the middle of a stack: the thread is left out. */
static int frames_cut(struct uw_error *err)
{
	return uw_fail(err, UW_ECORRUPT, "the walk ran past its time and was cut short");
}

/*
 * A generator's frame with no caller: a generator runs on its caller's
 * stack, and its link to that caller is cut when it yields.  The thread's
 * frame pointer was read while the generator ran and the frame after it
 * had yielded: alone, it is a stack the thread never had.  It is never
 * taken, not even on a last try: a loop over a generator yields every few
 * hundred nanoseconds and tears eight reads in a row often enough to show.
 * From 3.12 the eval loop entered from C leaves a shim frame below the
 * generator's, so a generator without a caller is always a torn read; up to
 * 3.11 a thread that runs one from C with no Python frame below looks the
 * same, and such a thread's samples go uncounted (torn_threads) rather
 * than risk a false one.
 */
static int frames_yielded(struct walk *w, raddr_t addr, struct uw_error *err)
{
	w->torn = true;
	return uw_fail(err, UW_ECORRUPT, "generator frame 0x%llx has no caller: it yielded while read",
	               (unsigned long long)addr);
}

/* 3.8-3.10: PyFrameObjects linked by f_back.  Innermost first onto w->raw. */
static int frames_collect_objects(struct walk *w, raddr_t addr, uint32_t *n, bool *truncated,
                                  struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;

	while (addr) {
		if (*n >= UW_MAX_FRAMES) {
			*truncated = true;
			break;
		}
		if (walk_over_time(w, 1))
			return frames_cut(err);
		const uint8_t *f = view_read(t, addr, L->frame.size, 0, err);
		if (!f)
			return -1;
		if (t->frame_type && load_u64(f, L->object.ob_type) != t->frame_type)
			return uw_fail(err, UW_ECORRUPT, "object at 0x%llx is not a frame",
			               (unsigned long long)addr);
		if (validate_watch_links(w, addr, f, true, false, err) != 0)
			return -1;
		uint32_t lasti = (uint32_t)load_i32(f, L->frame.lasti);
		int32_t lineno = load_i32(f, L->frame.lineno);
		/* 3.8-3.9 keep f_lineno current only while tracing; 3.10 whenever non-zero. */
		if (L->lasti_model == LASTI_BYTES && !load_u64(f, L->frame.trace))
			lineno = 0;
		struct raw_frame rf = {.addr = addr,
		                       .code = load_u64(f, L->frame.code),
		                       .pos = lasti | (uint64_t)(uint32_t)lineno << 32,
		                       .kind = UW_FRAME_PYTHON};
		if (frames_push(w, n, rf, err) != 0)
			return -1;
		raddr_t back = load_u64(f, L->frame.back);
		if (back == addr)
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx is its own caller",
			               (unsigned long long)addr);
		if (!back && load_u64(f, L->frame.gen))
			return frames_yielded(w, addr, err);
		/*
		 * The root: a frame without a caller and no generator's.  A spent
		 * generator's frame is one too (its link and generator cleared) and,
		 * kept for the code's next call, runs again as the next generator's
		 * at the same address: the pointers re-read unchanged and its link
		 * re-read as it yields (cleared again) would hold.  Its generator
		 * re-read, set again, does not.
		 */
		if (!back && L->frame.gen != LAYOUT_ABSENT &&
		    validate_watch(w, addr + L->frame.gen, f + L->frame.gen, 8, CHECK_LINKS, addr, err) != 0)
			return -1;
		addr = back;
	}
	return 0;
}

bool frames_called_from(struct uw_target *t, raddr_t caller, raddr_t caller_code, raddr_t callee)
{
	struct uw_error ignored;
	const struct code_info *ci = caller_code ? code_get(t, caller_code, &ignored) : NULL;
	return ci && ci->frame_bytes && caller + ci->frame_bytes == callee;
}

/*
 * 3.15: the frame at addr is the thread's anchor (the frame the marker
 * pointed at when a proven walk began), and the thread state this walk
 * read still has the marker on it with the sequence it had then: the
 * interpreter moves the marker on when it pops or suspends the marked
 * frame, so that frame stayed on the stack throughout, and its callers
 * with it, as that walk read them and the chain keeps them.  They are
 * taken from the chain, not read: a thread that calls and returns above a
 * deep base reads the frames above its anchor alone, where it read the
 * whole stack before.  1 when the walk is complete so, 0 when it goes on
 * reading, -1 on error.
 */
static int frames_take_base(struct walk *w, raddr_t addr, raddr_t code, raddr_t previous,
                            uint32_t *n, struct uw_error *err)
{
	const struct thread_cache *tc = w->tc;
	const struct uw_target *t = w->t;
	if (!tc || !tc->marker.anchor || addr != tc->marker.anchor || w->ts_marker != addr ||
	    w->ts_marker_seq != tc->marker.anchor_seq || w->marker_early || tc->truncated ||
	    tc->flags != t->opts.flags || t->opts.no_cache)
		return 0;
	/* The anchor's place in the chain (bottom first), looked for from the top. */
	uint32_t at = tc->n;
	while (at-- > 0 && tc->chain[at].addr != addr)
		;
	if (at >= tc->n || tc->chain[at].code != code || tc->chain[at].kind != UW_FRAME_PYTHON ||
	    *n + at > UW_MAX_FRAMES)
		return 0;
	/* Its link as the chain has it (a shim between, not in the chain, is not looked at). */
	if (at > 0 && tc->chain[at - 1].kind == UW_FRAME_PYTHON && tc->chain[at - 1].addr != previous)
		return 0;
	for (uint32_t i = at; i-- > 0;) {
		const struct chain_link *c = &tc->chain[i];
		struct raw_frame f = {.addr = c->addr, .code = c->code, .pos = c->pos, .kind = c->kind};
		if (frames_push(w, n, f, err) != 0)
			return -1;
	}
	return 1;
}

/* The live part of a thread's current data-stack chunk (3.11+): [start, top). */
struct frames_live {
	raddr_t top, end; /* end: end of the chunk's allocation */
};

/*
 * 3.11+: _PyInterpreterFrames linked by previous, with shim frames where C
 * entered.  A frame in the current chunk at or above the data stack's top is
 * dead: a pointer to it is the trace of a return the walk did not see whole.
 */
static int frames_collect_interp(struct walk *w, raddr_t addr, const struct frames_live *live,
                                 uint32_t *n, bool *truncated, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	uint32_t links = 0;
	bool native_pending = false, callee_inline = false;
	raddr_t called = 0; /* the innermost frame while its caller calls it (frames_being_called) */
	bool want_native = t->opts.flags & UW_SNAP_NATIVE;

	while (addr) {
		if (*n >= UW_MAX_FRAMES || ++links > FRAMES_MAX_LINKS) {
			*truncated = true;
			break;
		}
		if (walk_over_time(w, 1))
			return frames_cut(err);
		/* New frames are pushed just above the top one: read some room next time. */
		const uint8_t *f = view_read(t, addr, L->frame.size, links == 1 ? FRAMES_TOP_GROW : 0, err);
		if (!f)
			return -1;
		raddr_t previous = load_u64(f, L->frame.back);
		if (previous == addr)
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx is its own caller",
			               (unsigned long long)addr);
		/*
		 * The top moved between reading it and the pointer to the frame.
		 * The walk goes on and validate_stack judges what held: the
		 * re-read often finds the frame the thread returned into, which a
		 * fresh read would tear again.
		 */
		if (addr >= live->top && addr < live->end)
			w->suspect = true;
		uint8_t owner = f[L->frame.owner];
		bool shim = frames_is_shim(L, owner);
		if (validate_watch_links(w, addr, f, !shim, !shim && *n > 0, err) != 0)
			return -1;
		if (!previous && !shim && L->frame.owner_generator != LAYOUT_OWNER_NONE &&
		    owner == L->frame.owner_generator)
			return frames_yielded(w, addr, err);
		bool entry = L->frame.is_entry != LAYOUT_ABSENT && f[L->frame.is_entry];
		if (!previous && !frames_may_be_root(L, owner, entry)) {
			w->torn = true;
			return uw_fail(err, UW_ECORRUPT,
			               "frame 0x%llx has no caller and was not entered from C: read before its link",
			               (unsigned long long)addr);
		}
		/* A generator's frame runs in the generator, not on the data stack: nothing to check it by. */
		if (called && !shim && owner != L->frame.owner_generator &&
		    !frames_called_from(t, addr, load_u64(f, L->frame.code) & ~L->frame.code_tag_mask, called)) {
			w->torn = true;
			return uw_fail(err, UW_ECORRUPT,
			               "frame 0x%llx, being called, is linked to a frame it does not follow: a stale link",
			               (unsigned long long)called);
		}
		called = 0;
		if (shim) {
			/* The eval loop was entered from C here: C code sits below. */
			native_pending = want_native && *n > 0;
			callee_inline = false;
			addr = previous;
			continue;
		}
		/*
		 * 3.12-3.13 mark a running frame with stacktop -1 and set it when
		 * the frame calls: a caller that runs has returned from the callee
		 * the walk came from, a frame left over from an earlier call.
		 * Judged by validate_stack too.
		 */
		if (callee_inline && L->frame.stacktop != LAYOUT_ABSENT &&
		    load_i32(f, L->frame.stacktop) == -1)
			w->suspect = true;
		if (native_pending) {
			struct raw_frame marker = {.kind = UW_FRAME_NATIVE};
			if (frames_push(w, n, marker, err) != 0)
				return -1;
			native_pending = false;
			if (*n >= UW_MAX_FRAMES) {
				*truncated = true;
				break;
			}
		}
		struct raw_frame rf = {.addr = addr,
		                       .code = load_u64(f, L->frame.code) & ~L->frame.code_tag_mask,
		                       .pos = load_u64(f, L->frame.instr_ptr),
		                       .kind = UW_FRAME_PYTHON,
		                       .tlbc = frames_tlbc(L, f)};
		/*
		 * A frame without code is one the thread is entering or leaving
		 * (3.14+ clear the code of a frame they pop): between frames, the
		 * thread has no stack to take from this read.
		 */
		if (!rf.code && *n == 0 && links == 1 && previous) {
			/*
			 * The innermost frame popped between the read of the pointer to
			 * it and its own (3.14+ clear the code after the pointer moved
			 * to the caller): the thread is in the caller, where the walk
			 * goes on, and validate_stack judges what held.  On call-heavy
			 * code about one torn try in four was this one.
			 */
			w->suspect = true;
			callee_inline = false;
			addr = previous;
			continue;
		}
		if (!rf.code) {
			w->torn = true;
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx has no code: the thread is between frames",
			               (unsigned long long)addr);
		}
		if (*n == 0 && frames_being_called(L, rf.code, rf.pos, entry))
			called = addr;
		if (frames_push(w, n, rf, err) != 0)
			return -1;
		int taken = frames_take_base(w, addr, rf.code, previous, n, err);
		if (taken != 0)
			return taken < 0 ? -1 : 0;
		if (entry)
			native_pending = want_native; /* 3.11 marks the entered frame itself */
		callee_inline = !entry;
		addr = previous;
	}
	return 0;
}

/* The current chunk of a thread's data stack and its top (3.11+), checked later. */
static int frames_live_stack(struct walk *w, const uint8_t *ts,
                             struct frames_live *live, struct uw_error *err)
{
	const struct py_layout *L = &w->t->layout;
	uint32_t off = L->tstate.datastack_chunk;
	if (off == LAYOUT_ABSENT)
		return 0;
	/* datastack_top follows datastack_chunk in PyThreadState (3.11 through 3.15). */
	raddr_t chunk = load_u64(ts, off), top = load_u64(ts, off + 8);
	if (!chunk)
		return 0;
	/*
	 * The batch did not plan the whole live part of this chunk: the stack
	 * grew or moved since the last samples (a thread woke up).  That part
	 * is read at once, header and frames, and the frames are found in it
	 * (view.c keeps the miss), not read one syscall each.  Whatever fails
	 * here is read as before.
	 */
	const uint8_t *hdr = NULL;
	if (top > chunk + 16 && top - chunk <= FRAMES_LIVE_READ_MAX &&
	    !view_batch_bytes(w->t, chunk, (uint32_t)(top - chunk))) {
		struct uw_error ignored;
		hdr = view_read(w->t, chunk, (uint32_t)(top - chunk), 0, &ignored);
	}
	/* _PyStackChunk: previous, size (of the allocation), top, data[]. */
	if (!hdr)
		hdr = view_read(w->t, chunk, 16, 0, err);
	if (!hdr)
		return -1;
	uint64_t size = load_u64(hdr, 8);
	if (size > (1u << 30) || top < chunk || top > chunk + size)
		return uw_fail(err, UW_ECORRUPT, "data stack top 0x%llx outside its chunk",
		               (unsigned long long)top);
	*live = (struct frames_live){.top = top, .end = chunk + size};
	return 0;
}

/* Read one thread's innermost-frame pointer and its frames onto w->raw, with checks. */
int frames_collect(struct walk *w, raddr_t tstate, uint32_t *n, bool *truncated,
                   struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, err);
	if (!ts)
		return -1;
	raddr_t frame;
	if (L->tstate.cframe != LAYOUT_ABSENT) {
		raddr_t cframe = load_u64(ts, L->tstate.cframe);
		if (validate_watch(w, tstate + L->tstate.cframe, ts + L->tstate.cframe, 8, CHECK_PATH, 0, err) != 0)
			return -1;
		frame = 0;
		if (cframe) {
			raddr_t at = cframe + L->tstate.cframe_current_frame;
			const uint8_t *cf = view_read(t, at, 8, 0, err);
			if (!cf || validate_watch(w, at, cf, 8, CHECK_CURRENT, 0, err) != 0)
				return -1;
			frame = load_u64(cf, 0);
		}
	} else {
		frame = load_u64(ts, L->tstate.frame);
		if (validate_watch(w, tstate + L->tstate.frame, ts + L->tstate.frame, 8, CHECK_CURRENT, 0, err) != 0)
			return -1;
	}
	w->ts_current = frame;
	if (L->tstate.marker) {
		w->ts_marker = load_u64(ts, L->tstate.marker_frame);
		w->ts_marker_seq = load_u64(ts, L->tstate.marker_seq);
		/* Its sequence follows it (3.15): both in one range of the re-read. */
		if (L->tstate.marker_seq == L->tstate.marker_frame + 8)
			w->reread_marker_at = tstate + L->tstate.marker_frame;
	}
	if (L->frame_model == FRAME_MODEL_OBJECT)
		return frames_collect_objects(w, frame, n, truncated, err);
	struct frames_live live = {0};
	if (frame && frames_live_stack(w, ts, &live, err) != 0)
		return -1;
	if (live.end) {
		/* The data stack's top, read again with the rest: below it a frame is alive. */
		uint32_t off = L->tstate.datastack_chunk + 8;
		if (validate_watch(w, tstate + off, ts + off, 8, CHECK_BOUND, 0, err) != 0)
			return -1;
	}
	return frames_collect_interp(w, frame, &live, n, truncated, err);
}
