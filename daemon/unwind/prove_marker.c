/*
 * 3.15's frame-cache marker as a prover (prove.h).  PyThreadState's
 * last_profiled_frame names a frame whose callers have not moved since it
 * was set, and the interpreter hands it to the caller of that frame when it
 * pops it, bumping last_profiled_frame_seq.  So a marker that stands proves
 * the frames below it as a walk read them (marker_honour); a marker moved
 * up to where the thread runs proves, while the thread moves above it, the
 * frames from there down (marker_partial); and this unwinder writes it,
 * the one write it makes into a target, only where that pays.
 */
#include <string.h>

#include "unwind_internal.h"

/* Frames above the marker's that leave it where it is: a call or two of code that calls and returns. */
#define MARKER_NEAR 3
/* Writes of a moving thread's marker in one sample: each try after one may take its part. */
#define MARKER_WRITES 2
/* Samples the marker is left alone after another profiler was seen writing it. */
#define MARKER_QUIET 1000

/*
 * 3.15: a thread whose marker still points at the frame it was anchored at,
 * with the same sequence, never popped that frame since the walk that
 * anchored it: the frames below are as that walk read them, and only the
 * anchored frame, still innermost, may have moved on.  Reads the thread
 * state and that one frame.  1 when the stack is known so, 0 when the
 * frames must be walked, -1 on error.
 */
static int marker_honour(struct walk *w, struct thread_cache *tc, raddr_t tstate,
                         uint32_t *stack, bool *truncated, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	if (!tc->marker.anchor || !tc->n || tc->chain[tc->n - 1].addr != tc->marker.anchor ||
	    tc->flags != t->opts.flags)
		return 0;
	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, err);
	if (!ts)
		return -1;
	if (load_u64(ts, L->tstate.frame) != tc->marker.anchor ||
	    load_u64(ts, L->tstate.marker_frame) != tc->marker.anchor ||
	    load_u64(ts, L->tstate.marker_seq) != tc->marker.anchor_seq)
		return 0;
	const uint8_t *f = view_read(t, tc->marker.anchor, L->frame.size, 0, err);
	if (!f)
		return -1;
	struct chain_link *top = &tc->chain[tc->n - 1];
	raddr_t code = load_u64(f, L->frame.code) & ~L->frame.code_tag_mask;
	uint64_t pos = load_u64(f, L->frame.instr_ptr);
	/* The frame in place is the one anchored: the same code, the same caller. */
	raddr_t caller = tc->n > 1 ? tc->chain[tc->n - 2].addr : 0;
	if (code != top->code || (caller && load_u64(f, L->frame.back) != caller))
		return 0;
	if (pos != top->pos) {
		struct code_info *ci = code_get(t, code, err);
		if (!ci)
			return -1;
		uint64_t own = pos;
		struct uw_error unmapped;
		if (code_tlbc_pos(t, ci, frames_tlbc(L, f), &own, &unmapped) != 0)
			return 0; /* the walk reads it again and says what it finds */
		if (own + 2 < ci->bytecode || own > ci->bytecode + ci->bytecode_len)
			return 0; /* not an instruction of its code: let the walk judge it */
		uint32_t frame = code_frame_at(t, ci, own);
		uint32_t parent = tc->n > 1 ? tc->chain[tc->n - 2].stack : 0;
		uint32_t st = frame == INTERN_FAILED ? INTERN_FAILED : intern_stack(&t->intern, parent, frame);
		if (st == INTERN_FAILED)
			return uw_fail(err, UW_ENOMEM, "out of memory interning frames");
		top->pos = pos;
		top->stack = st;
		t->stats.frame_cache_partial_hits++;
	} else {
		t->stats.frame_cache_full_hits++;
	}
	t->stats.frames_from_cache += tc->n - 1;
	t->stats.frames_from_memory++;
	t->stats.marker_honoured++;
	t->stats.steady_hits++;
	*stack = top->stack;
	*truncated = tc->truncated;
	return 1;
}

/* Where the frame at addr is among n frames read innermost first: how many lie above it (n: absent). */
static uint32_t marker_frame_index(const struct raw_frame *raw, uint32_t n, raddr_t addr)
{
	uint32_t i = 0;
	while (addr && i < n && (raw[i].kind != UW_FRAME_PYTHON || raw[i].addr != addr))
		i++;
	return addr ? i : n;
}

/*
 * Point a thread's marker at frame (the one write into a target, and only
 * with its layout and version validated at uw_open), unless writes are off
 * or paused for another profiler.  seq: the marker's sequence last read.
 */
static bool marker_write(struct uw_target *t, struct thread_cache *tc, raddr_t tstate,
                         raddr_t frame, uint64_t seq)
{
	if (t->opts.no_write || t->sample_gen < t->marker_quiet_until)
		return false;
	struct uw_error werr = {0};
	if (remote_write(&t->mem, tstate + t->layout.tstate.marker_frame, &frame, sizeof frame, &werr) != 0)
		return false;
	t->stats.marker_written++;
	tc->marker.wrote = frame;
	tc->marker.wrote_seq = seq;
	return true;
}

/*
 * Whether a marker found changed from the one this unwinder wrote (frame),
 * its sequence still the one read before the write (seq), reads so again:
 * another profiler's write.  The interpreter sets the marker a moment
 * before it bumps the sequence, and a read that falls between the two
 * looks the same once.
 */
static bool marker_foreign(struct uw_target *t, raddr_t tstate, raddr_t frame, uint64_t seq)
{
	const struct py_layout *L = &t->layout;
	uint8_t now[16];
	if (L->tstate.marker_seq != L->tstate.marker_frame + 8)
		return true;
	if (remote_read(&t->mem, tstate + L->tstate.marker_frame, now, sizeof now, NULL) != 0)
		return false;
	return load_u64(now, 0) != frame && load_u64(now, 8) == seq;
}

/*
 * 3.15, after a thread's frames were walked and proven: anchor on the frame
 * the marker pointed at when the walk began, wherever it is in the stack
 * (marker_honour takes the anchor when it is still the innermost), and
 * point the marker at the innermost frame where that is worth a write
 * (parked: the same frames as the last walk).  A marker that changed to
 * something else while its sequence stood was written by another profiler:
 * this one stops writing for a while, so the two do not overwrite each other
 * at every sample, and stays exact either way since it anchors only on what
 * a proven walk saw.
 */
static void marker_proven(struct walk *w, struct thread_cache *tc, raddr_t tstate,
                          const struct proven_walk *p)
{
	const struct raw_frame *raw = p->raw;
	uint32_t n = p->n;
	bool parked = p->parked;
	struct uw_target *t = w->t;
	raddr_t cur = w->ts_current, mk = w->ts_marker;
	uint64_t seq = w->ts_marker_seq;
	/* Moved up before the walk, after the batch read it: nothing here is the marker now. */
	if (w->marker_early) {
		tc->marker.anchor = 0;
		return;
	}
	bool top_is_frame = n > 0 && raw[0].addr == cur && cur != 0;
	uint32_t above = marker_frame_index(raw, n, mk);
	bool in_chain = above < n;
	bool first = !tc->marker.seen;

	tc->marker.anchor = in_chain ? mk : 0;
	tc->marker.anchor_seq = seq;
	if (!tc->marker.seen) {
		tc->marker.seen = true;
		if (mk && mk != cur)
			t->stats.marker_cleared++;
	} else if (tc->marker.wrote && mk != tc->marker.wrote && seq == tc->marker.wrote_seq &&
	           marker_foreign(t, tstate, tc->marker.wrote, tc->marker.wrote_seq)) {
		t->stats.marker_foreign++;
		t->marker_quiet_until = t->sample_gen + MARKER_QUIET;
		tc->marker.wrote = 0;
	}
	/*
	 * Written where the marker is not in the stack, lies deep below its
	 * innermost frame, or that frame stayed since the last walk.  Code that
	 * calls and returns just above a frame the marker fell back to keeps it
	 * there, where it proves the most: a write would move it to a frame
	 * about to return.
	 */
	bool near = in_chain && above <= MARKER_NEAR;
	if (top_is_frame && mk != cur && !(near && !parked && !first))
		marker_write(t, tc, tstate, cur, seq);
}

/*
 * Whether the marker's frame mk was alive when the marker was set to it,
 * which a partial read rests on.  The interpreter sets it only to the
 * caller of a frame it pops, alive then; a proven walk that found it in
 * place (the anchor) saw it alive.  A write sets it to a frame a walk read
 * a while before, which may have returned since: the marker this unwinder
 * wrote, still there, is trusted only once it was seen with the thread's
 * innermost frame the marked one (vouched), and none is while another
 * profiler is seen writing it (a write changes the marker and leaves its
 * sequence).
 */
static bool marker_set_live(const struct uw_target *t, const struct thread_cache *tc, raddr_t mk,
                            uint64_t seq)
{
	if (t->sample_gen < t->marker_quiet_until)
		return false;
	return mk != tc->marker.wrote || (tc->marker.anchor == mk && tc->marker.anchor_seq == seq) ||
	       (tc->marker.vouched == mk && tc->marker.vouched_seq == seq);
}

/*
 * The marker as validate_stack's re-read found it, when it is one to take
 * the part from: in the walk's chain (near its top unless this is the last
 * try) and alive when it was read.  This unwinder's own, with the thread
 * in that very frame in the same read, is vouched for there, as a look
 * would (marker_move_up).  A marker found changed with its sequence
 * standing is left to the looks, which tell another profiler's write.
 */
static bool marker_reread(struct walk *w, struct thread_cache *tc, uint32_t walked, bool near,
                          uint32_t start, raddr_t *mk, uint64_t *seq, uint32_t *at)
{
	raddr_t found = w->reread_marker;
	uint64_t found_seq = w->reread_marker_seq;
	if (!found)
		return false;
	uint32_t index = marker_frame_index(w->raw + start, walked, found);
	if (index == walked || (near && index > MARKER_NEAR))
		return false;
	if (tc->marker.wrote && found != tc->marker.wrote && found_seq == tc->marker.wrote_seq)
		return false;
	if (found == tc->marker.wrote && w->reread_current == found) {
		tc->marker.vouched = found;
		tc->marker.vouched_seq = found_seq;
	}
	if (!marker_set_live(w->t, tc, found, found_seq))
		return false;
	*mk = found;
	*seq = found_seq;
	*at = index;
	return true;
}

/* Looks at a marker just written, for the thread in the marked frame or the marker handed down. */
#define MARKER_LOOKS 3

/*
 * The marker moved up to the frame the thread was in (w->ts_current),
 * unless it is there already, and looked at again a moment later, with the
 * thread's innermost frame in the same read: *mk and *seq as found.  A
 * marker the frames returned from since handed down is the interpreter's;
 * one still as written, with the thread in that very frame, was written on
 * a frame alive then, and stays so while its sequence does (a pop of the
 * marked frame moves both): it is vouched for.  A few looks, a
 * microsecond apart, for either.  False when it could not be written or
 * read.
 */
static bool marker_move_up(struct walk *w, struct thread_cache *tc, raddr_t tstate, bool *wrote,
                           raddr_t *mk, uint64_t *seq)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	raddr_t frame = w->ts_current;
	uint64_t seq_before = *seq;
	*wrote = false;
	if (!frame || L->tstate.frame == LAYOUT_ABSENT || L->tstate.frame >= L->tstate.marker_frame)
		return false;
	if (frame == w->marker_early) {
		/* Written before this try's walk: looked at now. */
	} else if (frame != *mk) {
		if (!marker_write(t, tc, tstate, frame, *seq))
			return false;
		*wrote = true;
	} else if (frame != tc->marker.wrote) {
		return false; /* not this unwinder's: set_live judged it already */
	}
	/* current_frame and the marker lie a few words apart (3.15): one read a look. */
	uint8_t now[64];
	uint32_t span = L->tstate.marker_seq + 8 - L->tstate.frame;
	if (span > sizeof now)
		return false;
	for (int look = 0; look < MARKER_LOOKS; look++) {
		if (remote_read(&t->mem, tstate + L->tstate.frame, now, span, NULL) != 0)
			return false;
		raddr_t current = load_u64(now, 0);
		*mk = load_u64(now, L->tstate.marker_frame - L->tstate.frame);
		*seq = load_u64(now, L->tstate.marker_seq - L->tstate.frame);
		if (*mk != frame && *wrote && *seq == seq_before &&
		    marker_foreign(t, tstate, frame, seq_before)) {
			/* Changed with no frame popped since it was written: another profiler writes it. */
			t->stats.marker_foreign++;
			t->marker_quiet_until = t->sample_gen + MARKER_QUIET;
			tc->marker.wrote = 0;
			return false;
		}
		if (*mk != frame)
			return true; /* handed down by the interpreter */
		if (current == frame) {
			tc->marker.vouched = frame;
			tc->marker.vouched_seq = *seq;
			return true;
		}
	}
	return true;
}

/*
 * Frames of a part read apart that one range takes together, and the bytes
 * between them it reads for nothing: the kernel pins the pages of each range
 * on its own, and a data stack's frames lie a few hundred bytes apart.
 */
#define MARKER_PART_GAP 512u

/*
 * 3.15: a thread whose stack moved through a walk, above the frame its
 * marker points at.  That frame's callers stand still while it lives, and
 * it lives while the marker points at it with the same sequence: read
 * between two reads of the marker that find it so, the frames from there
 * down (found at the addresses the walk followed, each linked to the next)
 * are the thread's, at one moment, the marked frame at the instruction it
 * held then.  Its stack this sample is that part, in w->raw from start (*n
 * frames): the innermost frame that held, as CPython's own sampler takes.  `near`: only a marker a few frames
 * below the walk's innermost, where it says most; one that is not near, or
 * that cannot be vouched for, is moved up first (marker_move_up,
 * counted in *writes).  1 when so, 0 when not provable (a read that fails
 * too: the next try reads the process again and reports what it finds), -1
 * out of memory.
 */
static int marker_partial(struct walk *w, struct thread_cache *tc, raddr_t tstate,
                          uint32_t start, uint32_t *n, bool near, unsigned *writes,
                          struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	raddr_t mk = w->ts_marker;
	uint64_t seq = w->ts_marker_seq;
	uint32_t walked = *n, at = marker_frame_index(w->raw + start, walked, mk);
	/* The marker's sequence follows it in PyThreadState (3.15). */
	if (L->tstate.marker_seq != L->tstate.marker_frame + 8)
		return 0;
	bool from_reread = w->reread_marker_read &&
	                   marker_reread(w, tc, walked, near, start, &mk, &seq, &at);
	if (from_reread) {
		/* Alive as the re-read found it: no look needed. */
	} else if (!mk || at == walked || (near && at > MARKER_NEAR) ||
	           !marker_set_live(t, tc, mk, seq)) {
		/*
		 * Far below where the thread moves (where the code it ran last
		 * left it), or not to be vouched for: written where the thread
		 * was, the frames it returns from hand the marker down to the one
		 * it keeps calling from, alive when handed, and a look a moment
		 * later finds it there.
		 */
		bool wrote;
		if (*writes >= MARKER_WRITES || !marker_move_up(w, tc, tstate, &wrote, &mk, &seq))
			return 0;
		*writes += wrote;
		at = marker_frame_index(w->raw + start, walked, mk);
		if (!mk || at == walked || (near && at > MARKER_NEAR) ||
		    !marker_set_live(t, tc, mk, seq))
			return 0;
	}
	uint32_t part = walked - at;
	const struct raw_frame *walk = w->raw + start + at;
	for (uint32_t i = 0; i < part; i++)
		if (walk[i].kind != UW_FRAME_PYTHON)
			return 0; /* C between two frames: links the walk did not keep */
	uint64_t pos;
	if (from_reread && validate_below_marker(w, start, walked, at, &pos)) {
		/* The re-read proved the part itself: its frames, in w->raw from start. */
		struct raw_frame *out = w->raw + start;
		memmove(out, out + at, part * sizeof *out);
		out[0].pos = pos;
		*n = part;
		t->stats.marker_partial++;
		t->stats.marker_partial_reread++;
		return 1;
	}
	if (array_reserve((void **)&w->ranges, &w->ranges_cap, part + 2, sizeof *w->ranges, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	/* The marker, the frames outermost first (nearby ones in one range), the marker again. */
	struct remote_range *r = w->ranges;
	uint32_t nr = 1;
	r[0] = (struct remote_range){.addr = tstate + L->tstate.marker_frame, .len = 16};
	size_t total = 32;
	for (uint32_t i = part; i-- > 0;) {
		raddr_t addr = walk[i].addr;
		struct remote_range *last = &r[nr - 1];
		if (nr > 1 && addr >= last->addr && addr - last->addr <= last->len + MARKER_PART_GAP) {
			uint32_t end = (uint32_t)(addr - last->addr) + L->frame.size;
			if (end > last->len) {
				total += end - last->len;
				last->len = end;
			}
			continue;
		}
		r[nr++] = (struct remote_range){.addr = addr, .len = L->frame.size};
		total += L->frame.size;
	}
	r[nr++] = (struct remote_range){.addr = r[0].addr, .len = 16};
	if (array_reserve((void **)&w->buf, &w->buf_cap, total, 1, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	size_t off = 0;
	for (uint32_t i = 0; i < nr; i++) {
		r[i].buf = w->buf + off;
		off += r[i].len;
	}
	struct uw_error unread;
	if (remote_read_batch(&t->mem, r, nr, &unread) != 0)
		return 0;
	for (uint32_t i = 0; i < nr; i++)
		if (r[i].got != r[i].len)
			return 0;
	if (load_u64(r[0].buf, 0) != mk || load_u64(r[0].buf, 8) != seq ||
	    memcmp(r[0].buf, r[nr - 1].buf, 16) != 0)
		return 0;
	/* The part, innermost first, in w->raw from start: decoded in place. */
	struct raw_frame *out = w->raw + start;
	memmove(out, out + at, part * sizeof *out);
	uint32_t k = 1;
	for (uint32_t i = part; i-- > 0;) {
		raddr_t addr = out[i].addr;
		while (k < nr - 1 && !(addr >= r[k].addr && addr - r[k].addr + L->frame.size <= r[k].len))
			k++;
		if (k == nr - 1)
			return 0;
		const uint8_t *f = r[k].buf + (addr - r[k].addr);
		raddr_t code = load_u64(f, L->frame.code) & ~L->frame.code_tag_mask;
		raddr_t below = i + 1 < part ? out[i + 1].addr : 0;
		if (!code || (below && load_u64(f, L->frame.back) != below))
			return 0;
		out[i] = (struct raw_frame){.addr = addr,
		                            .code = code,
		                            .pos = load_u64(f, L->frame.instr_ptr),
		                            .kind = UW_FRAME_PYTHON,
		                            .tlbc = frames_tlbc(L, f)};
	}
	*n = part;
	t->stats.marker_partial++;
	return 1;
}

/*
 * 3.15: a thread whose stack changed since the last sample, with its
 * marker neither on its innermost frame nor among the frames just below
 * it last time (where code that calls and returns keeps it), is moved up
 * to that frame before its walk, not after: should the walk tear, the
 * frames the thread returned from meanwhile have handed the marker down to
 * the one it keeps calling from, so the part proven is where the thread
 * stood as the sample began, not a walk later.  The thread state is the
 * batch's copy, read before the write.  True when written.
 */
static bool marker_early(struct walk *w, struct thread_cache *tc, raddr_t tstate)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	if (L->tstate.frame == LAYOUT_ABSENT)
		return false;
	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, NULL);
	if (!ts)
		return false;
	raddr_t cur = load_u64(ts, L->tstate.frame), mk = load_u64(ts, L->tstate.marker_frame);
	if (!cur || mk == cur || !tc->marker.seen)
		return false;
	for (uint32_t i = 0; i < tc->n && i <= MARKER_NEAR; i++)
		if (tc->chain[tc->n - 1 - i].addr == mk)
			return false;
	if (!marker_write(t, tc, tstate, cur, load_u64(ts, L->tstate.marker_seq)))
		return false;
	w->marker_early = cur;
	return true;
}


/* The marker proves stacks (never with the caches off, which it is one of). */
static bool marker_serves(const struct uw_target *t)
{
	return t->layout.tstate.marker && !t->opts.no_cache;
}

static int marker_before(struct walk *w, struct thread_cache *tc, raddr_t tstate, uint32_t *stack,
                         bool *truncated, struct uw_error *err)
{
	return marker_honour(w, tc, tstate, stack, truncated, err);
}

/*
 * The walk may take the frames below the anchor as proven
 * (frames_take_base), and the marker moves up first.
 */
static void marker_prepare(struct walk *w, struct thread_cache *tc, raddr_t tstate)
{
	w->marker_writes = 0;
	w->marker_early = 0;
	if (marker_early(w, tc, tstate))
		w->marker_writes++;
	w->tc = tc;
}

/*
 * Moving above a frame the marker proves alive: that part, now, rather
 * than a whole stack some reads later (the later, the more its samples
 * fall in the code that follows).  A marker deep below is moved up to
 * where the thread was, once: the frames it returns from hand it down to
 * the one the thread keeps calling from.  A walk that broke off before the
 * first frame moves the marker up to where the thread was, for the next.
 */
static int marker_torn(struct walk *w, struct thread_cache *tc, raddr_t tstate, const struct torn_walk *torn,
                       uint32_t *stack, bool *truncated, struct uw_error *err)
{
	struct uw_target *t = w->t;
	if (w->cut)
		return 0;
	if (!torn->collected) {
		if (w->marker_writes < MARKER_WRITES && w->ts_current && w->ts_current != w->ts_marker &&
		    w->ts_current != w->marker_early &&
		    marker_write(t, tc, tstate, w->ts_current, w->ts_marker_seq))
			w->marker_writes++;
		return 0;
	}
	uint32_t n = torn->n;
	int part = marker_partial(w, tc, tstate, torn->start, &n, !torn->last, &w->marker_writes, err);
	if (part <= 0)
		return part;
	const struct raw_frame *raw = w->raw + torn->start;
	*stack = chain_resolve(t, tc, raw, n, chain_common(t, tc, raw, n), err);
	if (*stack == INTERN_FAILED)
		return -1;
	tc->truncated = *truncated;
	tc->flags = t->opts.flags;
	return 1;
}

const struct prover prover_marker = {
	.name = "marker",
	.serves = marker_serves,
	.before = marker_before,
	.prepare = marker_prepare,
	.torn = marker_torn,
	.proven = marker_proven,
};
