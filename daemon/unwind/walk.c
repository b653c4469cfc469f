/*
 * Sampling: runtime -> interpreters -> thread states -> each thread's
 * stack, read (frames.c), proven whole (validate.c) and resolved to a
 * stack id with the base it shares with last time (chain.c).
 *
 * Written once against struct py_layout.  Every remote read goes through
 * the view (one batched read per sample in steady state); every list
 * walked here comes from remote memory and is bounded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kread_abi.h"
#include "unwind_internal.h"

/*
 * Walks of a thread whose stack keeps moving before it is left out of the
 * sample: code that calls and returns every few hundred nanoseconds tears
 * most reads, and each walk costs a batched read of its own.
 */
#define WALK_ATTEMPTS 8
/*
 * What a thread's state and its proofs count for against WALK_CLOCK_EVERY:
 * a look at the clock for every thread cost a steady sample of a few
 * threads as much as reading one of them.
 */
#define WALK_CLOCK_THREAD 16

static struct uw_sample_thread *walk_add_thread(struct walk *w, struct uw_error *err)
{
	struct uw_sample *s = w->out;
	if (s->nthreads >= UW_MAX_THREADS) {
		uw_fail(err, UW_ECORRUPT, "more than %u threads", UW_MAX_THREADS);
		return NULL;
	}
	if (array_reserve((void **)&s->threads, &s->cap, s->nthreads, sizeof *s->threads, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	/* Not cleared: the one caller assigns the whole entry. */
	return &s->threads[s->nthreads++];
}

struct walk_interp {
	raddr_t addr;
	int64_t id;
	raddr_t gil_holder;
	bool gc_running;
};

/* Frames above the marker's that leave it where it is: a call or two of code that calls and returns. */
#define WALK_MARKER_NEAR 3
/* Writes of a moving thread's marker in one sample: each try after one may take its part. */
#define WALK_MARKER_WRITES 2
/* Samples the marker is left alone after another profiler was seen writing it. */
#define WALK_MARKER_QUIET 1000

/*
 * 3.15: a thread whose marker still points at the frame it was anchored at,
 * with the same sequence, never popped that frame since the walk that
 * anchored it: the frames below are as that walk read them, and only the
 * anchored frame, still innermost, may have moved on.  Reads the thread
 * state and that one frame.  1 when the stack is known so, 0 when the
 * frames must be walked, -1 on error.
 */
static int walk_marker_honour(struct walk *w, struct thread_cache *tc, raddr_t tstate,
                              uint32_t *stack, bool *truncated, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	if (!tc->anchor || !tc->n || tc->chain[tc->n - 1].addr != tc->anchor ||
	    tc->flags != t->opts.flags)
		return 0;
	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, err);
	if (!ts)
		return -1;
	if (load_u64(ts, L->tstate.frame) != tc->anchor ||
	    load_u64(ts, L->tstate.marker_frame) != tc->anchor ||
	    load_u64(ts, L->tstate.marker_seq) != tc->anchor_seq)
		return 0;
	const uint8_t *f = view_read(t, tc->anchor, L->frame.size, 0, err);
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
		if (!L->free_threaded && (pos + 2 < ci->bytecode || pos > ci->bytecode + ci->bytecode_len))
			return 0; /* not an instruction of its code: let the walk judge it */
		uint32_t frame = code_frame_at(t, ci, pos);
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
static uint32_t walk_frame_index(const struct raw_frame *raw, uint32_t n, raddr_t addr)
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
static bool walk_marker_write(struct uw_target *t, struct thread_cache *tc, raddr_t tstate,
                              raddr_t frame, uint64_t seq)
{
	if (t->opts.no_write || t->sample_gen < t->marker_quiet_until)
		return false;
	struct uw_error werr = {0};
	if (remote_write(&t->mem, tstate + t->layout.tstate.marker_frame, &frame, sizeof frame, &werr) != 0)
		return false;
	t->stats.marker_written++;
	tc->wrote = frame;
	tc->wrote_seq = seq;
	return true;
}

/*
 * Whether a marker found changed from the one this unwinder wrote (frame),
 * its sequence still the one read before the write (seq), reads so again:
 * another profiler's write.  The interpreter sets the marker a moment
 * before it bumps the sequence, and a read that falls between the two
 * looks the same once.
 */
static bool walk_marker_foreign(struct uw_target *t, raddr_t tstate, raddr_t frame, uint64_t seq)
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
 * (walk_marker_honour takes the anchor when it is still the innermost), and
 * point the marker at the innermost frame where that is worth a write
 * (parked: the same frames as the last walk).  A marker that changed to
 * something else while its sequence stood was written by another profiler:
 * this one stops writing for a while, so the two do not overwrite each other
 * at every sample, and stays exact either way since it anchors only on what
 * a proven walk saw.
 */
static void walk_marker_after(struct walk *w, struct thread_cache *tc, raddr_t tstate,
                              const struct raw_frame *raw, uint32_t n, bool parked)
{
	struct uw_target *t = w->t;
	raddr_t cur = w->ts_current, mk = w->ts_marker;
	uint64_t seq = w->ts_marker_seq;
	/* Moved up before the walk, after the batch read it: nothing here is the marker now. */
	if (w->marker_early) {
		tc->anchor = 0;
		return;
	}
	bool top_is_frame = n > 0 && raw[0].addr == cur && cur != 0;
	uint32_t above = walk_frame_index(raw, n, mk);
	bool in_chain = above < n;
	bool first = !tc->marker_seen;

	tc->anchor = in_chain ? mk : 0;
	tc->anchor_seq = seq;
	if (!tc->marker_seen) {
		tc->marker_seen = true;
		if (mk && mk != cur)
			t->stats.marker_cleared++;
	} else if (tc->wrote && mk != tc->wrote && seq == tc->wrote_seq &&
	           walk_marker_foreign(t, tstate, tc->wrote, tc->wrote_seq)) {
		t->stats.marker_foreign++;
		t->marker_quiet_until = t->sample_gen + WALK_MARKER_QUIET;
		tc->wrote = 0;
	}
	/*
	 * Written where the marker is not in the stack, lies deep below its
	 * innermost frame, or that frame stayed since the last walk.  Code that
	 * calls and returns just above a frame the marker fell back to keeps it
	 * there, where it proves the most: a write would move it to a frame
	 * about to return.
	 */
	bool near = in_chain && above <= WALK_MARKER_NEAR;
	if (top_is_frame && mk != cur && !(near && !parked && !first))
		walk_marker_write(t, tc, tstate, cur, seq);
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
static bool walk_marker_set_live(const struct uw_target *t, const struct thread_cache *tc, raddr_t mk,
                                 uint64_t seq)
{
	if (t->sample_gen < t->marker_quiet_until)
		return false;
	return mk != tc->wrote || (tc->anchor == mk && tc->anchor_seq == seq) ||
	       (tc->vouched == mk && tc->vouched_seq == seq);
}

/*
 * The marker as validate_stack's re-read found it, when it is one to take
 * the part from: in the walk's chain (near its top unless this is the last
 * try) and alive when it was read.  This unwinder's own, with the thread
 * in that very frame in the same read, is vouched for there, as a look
 * would (walk_marker_move_up).  A marker found changed with its sequence
 * standing is left to the looks, which tell another profiler's write.
 */
static bool walk_marker_reread(struct walk *w, struct thread_cache *tc, uint32_t walked, bool near,
                               uint32_t start, raddr_t *mk, uint64_t *seq, uint32_t *at)
{
	raddr_t found = w->reread_marker;
	uint64_t found_seq = w->reread_marker_seq;
	if (!found)
		return false;
	uint32_t index = walk_frame_index(w->raw + start, walked, found);
	if (index == walked || (near && index > WALK_MARKER_NEAR))
		return false;
	if (tc->wrote && found != tc->wrote && found_seq == tc->wrote_seq)
		return false;
	if (found == tc->wrote && w->reread_current == found) {
		tc->vouched = found;
		tc->vouched_seq = found_seq;
	}
	if (!walk_marker_set_live(w->t, tc, found, found_seq))
		return false;
	*mk = found;
	*seq = found_seq;
	*at = index;
	return true;
}

/* Looks at a marker just written, for the thread in the marked frame or the marker handed down. */
#define WALK_MARKER_LOOKS 3

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
static bool walk_marker_move_up(struct walk *w, struct thread_cache *tc, raddr_t tstate, bool *wrote,
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
		if (!walk_marker_write(t, tc, tstate, frame, *seq))
			return false;
		*wrote = true;
	} else if (frame != tc->wrote) {
		return false; /* not this unwinder's: set_live judged it already */
	}
	/* current_frame and the marker lie a few words apart (3.15): one read a look. */
	uint8_t now[64];
	uint32_t span = L->tstate.marker_seq + 8 - L->tstate.frame;
	if (span > sizeof now)
		return false;
	for (int look = 0; look < WALK_MARKER_LOOKS; look++) {
		if (remote_read(&t->mem, tstate + L->tstate.frame, now, span, NULL) != 0)
			return false;
		raddr_t current = load_u64(now, 0);
		*mk = load_u64(now, L->tstate.marker_frame - L->tstate.frame);
		*seq = load_u64(now, L->tstate.marker_seq - L->tstate.frame);
		if (*mk != frame && *wrote && *seq == seq_before &&
		    walk_marker_foreign(t, tstate, frame, seq_before)) {
			/* Changed with no frame popped since it was written: another profiler writes it. */
			t->stats.marker_foreign++;
			t->marker_quiet_until = t->sample_gen + WALK_MARKER_QUIET;
			tc->wrote = 0;
			return false;
		}
		if (*mk != frame)
			return true; /* handed down by the interpreter */
		if (current == frame) {
			tc->vouched = frame;
			tc->vouched_seq = *seq;
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
#define WALK_PART_GAP 512u

/*
 * 3.15: a thread whose stack moved through a walk, above the frame its
 * marker points at.  That frame's callers stand still while it lives, and
 * it lives while the marker points at it with the same sequence: read
 * between two reads of the marker that find it so, the frames from there
 * down (found at the addresses the walk followed, each linked to the next)
 * are the thread's, at one moment, the marked frame at the instruction it
 * held then.  Its stack this sample is that part with a <moving> frame on
 * top, in w->raw from start (*n frames).  `near`: only a marker a few frames
 * below the walk's innermost, where it says most; one that is not near, or
 * that cannot be vouched for, is moved up first (walk_marker_move_up,
 * counted in *writes).  1 when so, 0 when not provable (a read that fails
 * too: the next try reads the process again and reports what it finds), -1
 * out of memory.
 */
static int walk_marker_partial(struct walk *w, struct thread_cache *tc, raddr_t tstate,
                               uint32_t start, uint32_t *n, bool near, unsigned *writes,
                               struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	raddr_t mk = w->ts_marker;
	uint64_t seq = w->ts_marker_seq;
	uint32_t walked = *n, at = walk_frame_index(w->raw + start, walked, mk);
	/* The marker's sequence follows it in PyThreadState (3.15). */
	if (L->tstate.marker_seq != L->tstate.marker_frame + 8)
		return 0;
	bool from_reread = w->reread_marker_read &&
	                   walk_marker_reread(w, tc, walked, near, start, &mk, &seq, &at);
	if (from_reread) {
		/* Alive as the re-read found it: no look needed. */
	} else if (!mk || at == walked || (near && at > WALK_MARKER_NEAR) ||
	           !walk_marker_set_live(t, tc, mk, seq)) {
		/*
		 * Far below where the thread moves (where the code it ran last
		 * left it), or not to be vouched for: written where the thread
		 * was, the frames it returns from hand the marker down to the one
		 * it keeps calling from, alive when handed, and a look a moment
		 * later finds it there.
		 */
		bool wrote;
		if (*writes >= WALK_MARKER_WRITES || !walk_marker_move_up(w, tc, tstate, &wrote, &mk, &seq))
			return 0;
		*writes += wrote;
		at = walk_frame_index(w->raw + start, walked, mk);
		if (!mk || at == walked || (near && at > WALK_MARKER_NEAR) ||
		    !walk_marker_set_live(t, tc, mk, seq))
			return 0;
	}
	uint32_t part = walked - at;
	const struct raw_frame *walk = w->raw + start + at;
	for (uint32_t i = 0; i < part; i++)
		if (walk[i].kind != UW_FRAME_PYTHON)
			return 0; /* C between two frames: links the walk did not keep */
	uint64_t pos;
	if (from_reread && validate_below_marker(w, start, walked, at, &pos)) {
		/* The re-read proved the part itself: behind a <moving> frame, in w->raw from start. */
		if (array_reserve((void **)&w->raw, &w->raw_cap, (size_t)start + part + 1, sizeof *w->raw, NULL))
			return uw_fail(err, UW_ENOMEM, "out of memory");
		struct raw_frame *out = w->raw + start;
		memmove(out + 1, out + at, part * sizeof *out);
		out[1].pos = pos;
		out[0] = (struct raw_frame){.kind = UW_FRAME_MOVING};
		*n = part + 1;
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
		if (nr > 1 && addr >= last->addr && addr - last->addr <= last->len + WALK_PART_GAP) {
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
	/* The part, innermost first, behind a <moving> frame, in w->raw from start: decoded in place. */
	if (array_reserve((void **)&w->raw, &w->raw_cap, (size_t)start + part + 1, sizeof *w->raw, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	struct raw_frame *out = w->raw + start;
	memmove(out + 1, out + at, part * sizeof *out);
	uint32_t k = 1;
	for (uint32_t i = part; i-- > 0;) {
		raddr_t addr = out[i + 1].addr;
		while (k < nr - 1 && !(addr >= r[k].addr && addr - r[k].addr + L->frame.size <= r[k].len))
			k++;
		if (k == nr - 1)
			return 0;
		const uint8_t *f = r[k].buf + (addr - r[k].addr);
		raddr_t code = load_u64(f, L->frame.code) & ~L->frame.code_tag_mask;
		raddr_t below = i + 1 < part ? out[i + 2].addr : 0;
		if (!code || (below && load_u64(f, L->frame.back) != below))
			return 0;
		out[i + 1] = (struct raw_frame){.addr = addr,
		                                .code = code,
		                                .pos = load_u64(f, L->frame.instr_ptr),
		                                .kind = UW_FRAME_PYTHON};
	}
	out[0] = (struct raw_frame){.kind = UW_FRAME_MOVING};
	*n = part + 1;
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
static bool walk_marker_early(struct walk *w, struct thread_cache *tc, raddr_t tstate)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	if (L->tstate.frame == LAYOUT_ABSENT)
		return false;
	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, NULL);
	if (!ts)
		return false;
	raddr_t cur = load_u64(ts, L->tstate.frame), mk = load_u64(ts, L->tstate.marker_frame);
	if (!cur || mk == cur || !tc->marker_seen)
		return false;
	for (uint32_t i = 0; i < tc->n && i <= WALK_MARKER_NEAR; i++)
		if (tc->chain[tc->n - 1 - i].addr == mk)
			return false;
	if (!walk_marker_write(t, tc, tstate, cur, load_u64(ts, L->tstate.marker_seq)))
		return false;
	w->marker_early = cur;
	return true;
}

/* A thread's reads kept for the proof by equal bytes: more is walked instead. */
#define WALK_PROOF_MAX_BYTES (256u << 10)

/*
 * Every version: a thread whose walk reads, in this sample's batch, exactly
 * the bytes its last whole walk read (thread state, frames, code headers)
 * would make that same walk, so its stack is the one that walk proved; the
 * reads count for the next plan as if made.  One memcmp a read, no walk.
 */
static bool walk_same_bytes(struct walk *w, struct thread_cache *tc, uint32_t *stack, bool *truncated)
{
	struct uw_target *t = w->t;
	if (!tc->nreads || t->opts.no_cache || tc->flags != t->opts.flags)
		return false;
	const uint8_t *expect = tc->read_bytes;
	for (uint32_t i = 0; i < tc->nreads; i++) {
		const uint8_t *now = view_batch_bytes(t, tc->reads[i].addr, tc->reads[i].len);
		if (!now || memcmp(now, expect, tc->reads[i].len) != 0)
			return false;
		expect += tc->reads[i].len;
	}
	view_reads_again(t, tc->reads, tc->nreads);
	*stack = tc->n ? tc->chain[tc->n - 1].stack : 0;
	*truncated = tc->truncated;
	if (tc->n)
		t->stats.frame_cache_full_hits++;
	t->stats.frames_from_cache += tc->n;
	t->stats.steady_hits++;
	return true;
}

/* After a whole walk from the batch alone: keep its reads and their bytes for walk_same_bytes. */
static void walk_keep_reads(struct walk *w, struct thread_cache *tc, uint32_t mark)
{
	struct uw_target *t = w->t;
	uint32_t n;
	const struct used_range *reads = view_reads(t, mark, &n);
	size_t total = 0;
	tc->nreads = 0;
	for (uint32_t i = 0; i < n; i++) {
		total += reads[i].len;
		if (total > WALK_PROOF_MAX_BYTES || !view_batch_bytes(t, reads[i].addr, reads[i].len))
			return;
	}
	if (!n || array_reserve((void **)&tc->reads, &tc->reads_cap, n - 1, sizeof *tc->reads, NULL) ||
	    (total && array_reserve((void **)&tc->read_bytes, &tc->read_bytes_cap, total - 1, 1, NULL)))
		return;
	memcpy(tc->reads, reads, n * sizeof *reads);
	uint8_t *out = tc->read_bytes;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(out, view_batch_bytes(t, reads[i].addr, reads[i].len), reads[i].len);
		out += reads[i].len;
	}
	tc->read_bytes_len = total;
	tc->nreads = n;
}

/*
 * 3.11-3.14: a thread whose stack moved under a read, watched by the
 * in-kernel reader, its shot armed at `armed`: the stack the kernel copied
 * while the thread stood interrupted, made into frames as
 * frames_collect_interp makes a read's.  The copy is whole by how it was
 * taken, so nothing is re-read; its code objects are decoded as any
 * walk's.  1 and *stack when taken, 0 when there is none (yet), -1 out of
 * memory.
 */
static int walk_kernel_stack(struct walk *w, struct thread_cache *tc, uint32_t start, uint64_t armed,
                             uint32_t *stack, bool *truncated, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	uint32_t kn = 0;
	const struct kread_frame *kf = kread_take(t->opts.kreader, tc->kslot, tc->tstate, armed, &kn);
	if (!kf)
		return 0;
	if (array_reserve((void **)&w->raw, &w->raw_cap, (size_t)start + 2 * kn, sizeof *w->raw, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	struct raw_frame *out = w->raw + start;
	uint32_t n = 0;
	bool want_native = t->opts.flags & UW_SNAP_NATIVE, native_pending = false;
	for (uint32_t i = 0; i < kn; i++) {
		const struct kread_frame *f = &kf[i];
		if (frames_is_shim(L, f->owner)) {
			native_pending = want_native && n > 0;
			continue;
		}
		/*
		 * A generator's frame with no caller: one the thread runs from C, as
		 * a read sees it too.  A frame shot before it was linked: as a read.
		 */
		if (i + 1 == kn && ((L->frame.owner_generator != LAYOUT_OWNER_NONE &&
		                     f->owner == L->frame.owner_generator) ||
		                    !frames_may_be_root(L, f->owner, f->entry)))
			return 0;
		if (!f->code) {
			/* Popped as the thread stood (3.14+ clear the code): it is in the caller. */
			if (n == 0 && i + 1 < kn)
				continue;
			return 0;
		}
		/* Being called: taken when it follows the frame it links to, as a read. */
		if (n == 0 && frames_being_called(L, f->code, f->instr, f->entry) &&
		    (i + 1 == kn || (!frames_is_shim(L, kf[i + 1].owner) &&
		                     kf[i + 1].owner != L->frame.owner_generator &&
		                     !frames_called_from(t, kf[i + 1].addr, kf[i + 1].code, f->addr))))
			return 0;
		if (native_pending) {
			out[n++] = (struct raw_frame){.kind = UW_FRAME_NATIVE};
			native_pending = false;
		}
		out[n++] = (struct raw_frame){.addr = f->addr, .code = f->code, .pos = f->instr,
		                              .kind = UW_FRAME_PYTHON};
		if (L->frame.is_entry != LAYOUT_ABSENT && f->entry)
			native_pending = want_native;
	}
	struct uw_error bad;
	uint32_t got = chain_resolve(t, tc, out, n, chain_common(t, tc, out, n), &bad);
	if (got == INTERN_FAILED) {
		/* Its code unreadable, or an instruction outside it: not a stack to show. */
		if (bad.status == UW_ENOMEM)
			return uw_fail(err, UW_ENOMEM, "%s", bad.msg);
		tc->n = 0;
		return 0;
	}
	*stack = got;
	*truncated = false;
	tc->truncated = false;
	tc->flags = t->opts.flags;
	t->stats.kernel_stacks++;
	return 1;
}

/* A read of the thread tore, unwatched: it is watched from now on (if it can be) and its shot armed.  The time armed, or 0. */
static uint64_t walk_kernel_arm(struct walk *w, struct thread_cache *tc)
{
	struct uw_target *t = w->t;
	if (tc->kslot >= 0 && tc->ktid != w->native_id)
		threads_unwatch(t, tc); /* another thread under this state */
	if (tc->kslot < 0) {
		int64_t tid = w->native_id > 0 ? threads_proc_tid(t, w->native_id) : -1;
		if (tid <= 0 || tid > INT32_MAX)
			return 0;
		tc->kslot = kread_watch(t->opts.kreader, (pid_t)tid, tc->tstate, &t->layout);
		if (tc->kslot < 0) {
			t->stats.kernel_watch_failures++;
			return 0;
		}
		tc->ktid = w->native_id;
		t->stats.kernel_watches++;
	}
	uint64_t now = clock_mono_ns();
	tc->kbusy_at = now;
	if (now - tc->klast < KREAD_ARM_GAP_NS)
		return 0;
	uint64_t armed = kread_arm(t->opts.kreader, tc->kslot);
	tc->klast = armed ? armed : tc->klast;
	return armed;
}

/*
 * Every read of the thread tore: the shot comes KREAD_SHOT_NS of its
 * running after it was armed, which the reads may not have lasted.
 * Waited for up to KREAD_WAIT_NS (a thread that stopped running has a
 * stack a read would have proven).  As walk_kernel_stack.
 */
static int walk_kernel_wait(struct walk *w, struct thread_cache *tc, uint32_t start, uint64_t armed,
                            uint32_t *stack, bool *truncated, struct uw_error *err)
{
	for (unsigned spins = 0; spins < KREAD_WAIT_NS / 100u; spins++) {
		int taken = walk_kernel_stack(w, tc, start, armed, stack, truncated, err);
		if (taken != 0 || clock_mono_ns() - armed > KREAD_WAIT_NS)
			return taken;
		for (volatile int i = 0; i < 64; i++)
			;
	}
	return 0;
}

/* 3.15's marker proves stacks (never with the caches off, which it is one of). */
static bool walk_marker_proves(const struct uw_target *t)
{
	return t->layout.tstate.marker && !t->opts.no_cache;
}

/* 3.11-3.14 with an in-kernel reader: a thread that tears gets the kernel's copy (the marker's stand in for it). */
static bool walk_kernel_copies(const struct uw_target *t)
{
	return t->opts.kreader && !walk_marker_proves(t) && t->layout.frame_model == FRAME_MODEL_INTERP;
}

/*
 * A thread's stack, read and proven not torn.  A thread that runs moves its
 * stack every microsecond or so: when the proof fails it is read again,
 * fresh, a few times.  If it keeps moving, *moving says so and the thread
 * has no stack this sample; if it keeps reading as garbage, *dropped alone.
 * Either way the other threads stand.
 */
static int walk_thread_stack(struct walk *w, struct thread_cache *tc, raddr_t tstate, bool may_move,
                        uint32_t *stack, bool *truncated, bool *dropped, bool *moving,
                        struct uw_error *err)
{
	struct uw_target *t = w->t;
	int attempts = t->thread_attempts > 0 ? t->thread_attempts : WALK_ATTEMPTS;
	uint32_t mark = view_mark(t), start = w->nraw;
	int rc = -1;
	*dropped = false;
	*moving = false;
	w->tore = false;
	bool marker = walk_marker_proves(t);
	bool kernel = walk_kernel_copies(t);
	uint64_t armed = kernel ? tc->karmed : 0;
	bool waited = false;
	unsigned writes = 0;
	if (marker) {
		int honoured = walk_marker_honour(w, tc, tstate, stack, truncated, err);
		if (honoured != 0)
			return honoured < 0 ? -1 : 0;
	}
	if (walk_same_bytes(w, tc, stack, truncated))
		return 0;
	tc->nreads = 0;
	w->marker_early = 0;
	if (marker && walk_marker_early(w, tc, tstate))
		writes++;
	w->tc = marker ? tc : NULL;
	for (int attempt = 0; attempt < attempts; attempt++) {
		uint32_t n = 0;
		w->nraw = start;
		w->nchecks = 0;
		*truncated = false;
		/* The batch's copy of this stack is what just failed: take a fresh one. */
		if (attempt > 0) {
			w->marker_early = 0; /* the fresh copy reads the marker as it is now */
			t->stats.torn_retries++;
			if ((rc = view_retry(t, mark, err)) != 0)
				break;
		}
		w->torn = w->suspect = false;
		w->reread_marker_read = false;
		w->last_try = attempt > 0 && attempt + 1 == attempts && t->thread_attempts == 0;
		rc = frames_collect(w, tstate, &n, truncated, err);
		bool collected = rc == 0; /* the walk reached the thread's first frame */
		/* A thread without frames may leave the array unallocated: no pointer arithmetic on NULL. */
		const struct raw_frame *raw = w->raw ? w->raw + start : NULL;
		uint32_t common = rc == 0 ? chain_common(t, tc, raw, n) : 0;
		uint32_t returned = 0;
		/* A stack exactly as last time is one already proven whole. */
		*moving = rc != 0 && w->torn;
		if (rc == 0 && may_move &&
		    (w->last_try || w->suspect || !(common == n && tc->n == n && n > 0))) {
			t->stats.stack_rereads++;
			rc = validate_stack(w, start, n, common, &returned, err);
			*moving = rc == 1;
		}
		if (rc == 2) {
			/* Proven where the thread stood during the re-read: the frames it returned from are gone. */
			raw += returned;
			n -= returned;
			common = chain_common(t, tc, raw, n);
			t->stats.torn_returned++;
			rc = 0;
		}
		if (rc == 0) {
			/* The same frames as the last walk but for where the innermost stands. */
			bool parked = n > 0 && tc->n == n && common + 1 >= n;
			*stack = chain_resolve(t, tc, raw, n, common, err);
			rc = *stack == INTERN_FAILED ? -1 : 0;
			tc->truncated = *truncated;
			tc->flags = t->opts.flags;
			if (rc == 0 && marker)
				walk_marker_after(w, tc, tstate, raw, n, parked);
			/* A walk of one read, whose stack the last one proved or this one did. */
			if (rc == 0 && attempt == 0 && !returned)
				walk_keep_reads(w, tc, mark);
			break;
		}
		if (w->cut || err->status != UW_ECORRUPT || !remote_may_live(&t->mem))
			break;
		w->tore |= *moving;
		/*
		 * The shot armed as the sample began is waited for, once: it comes
		 * about when a read that holds proves its stack.  One armed now
		 * would come a read and an arming later, the later in the code
		 * that follows: it only starts the watch, for the next samples.
		 */
		if (*moving && kernel && !armed && !waited)
			walk_kernel_arm(w, tc);
		if (*moving && armed && !waited) {
			waited = true;
			int taken = walk_kernel_wait(w, tc, start, armed, stack, truncated, err);
			if (taken != 0) {
				rc = taken < 0 ? -1 : 0;
				*moving = false;
				break;
			}
		}
		/*
		 * 3.15: moving above a frame the marker proves alive: that part,
		 * now, rather than a whole stack some reads later (the later, the
		 * more its samples fall in the code that follows).  A marker deep
		 * below is moved up to where the thread was, once: the frames it
		 * returns from hand it down to the one the thread keeps calling
		 * from.
		 */
		if (*moving && marker && collected && !w->cut) {
			bool last = attempt + 1 == attempts;
			int part = walk_marker_partial(w, tc, tstate, start, &n, !last, &writes, err);
			if (part < 0)
				break;
			if (part > 0) {
				raw = w->raw + start;
				*stack = chain_resolve(t, tc, raw, n, chain_common(t, tc, raw, n), err);
				rc = *stack == INTERN_FAILED ? -1 : 0;
				tc->truncated = *truncated;
				tc->flags = t->opts.flags;
				*moving = false;
				break;
			}
		} else if (*moving && marker && !w->cut && writes < WALK_MARKER_WRITES && w->ts_current &&
		           w->ts_current != w->ts_marker && w->ts_current != w->marker_early &&
		           walk_marker_write(t, tc, tstate, w->ts_current, w->ts_marker_seq)) {
			/* A walk that broke off: the marker moved up to where the thread was, for the next. */
			writes++;
		}
		*dropped = attempt + 1 == attempts;
	}
	view_retry_end(t);
	w->nraw = start;
	w->last_try = false;
	w->tc = NULL;
	return *dropped ? 0 : rc;
}

/*
 * Pages a thread's last whole walk read (each a pin for the kernel): what
 * walking it again costs.  Heap frames (3.8-3.10) are a page each when its
 * reads were not kept.
 */
static uint32_t walk_read_pages(const struct uw_target *t, const struct thread_cache *tc)
{
	if (!tc->nreads)
		return t->layout.frame_model == FRAME_MODEL_OBJECT ? tc->n : 0;
	uint64_t pages = 0;
	raddr_t last_page = 0;
	for (uint32_t i = 0; i < tc->nreads; i++) {
		raddr_t addr = tc->reads[i].addr;
		uint32_t len = tc->reads[i].len;
		if (!len)
			continue;
		/* Reads in walk order: one that starts on the page the last ended on is not another pin. */
		pages += remote_pages(addr, len) - (pages && addr >> 12 == last_page);
		last_page = (addr + len - 1) >> 12;
	}
	return pages < UINT32_MAX ? (uint32_t)pages : UINT32_MAX;
}

/* As a sample begins, before any read: the shot of every watched thread (see struct thread_cache). */
static void walk_kernel_arm_watched(struct uw_target *t)
{
	/*
	 * Paced: until every watched thread may be shot again.  A thread that
	 * waits is shot no more once its last shot is past (below), so it
	 * holds a sample back once at most.
	 */
	uint64_t now = clock_mono_ns(), due = 0;
	for (uint32_t i = 0; t->opts.kernel_pace && i < t->nthreads; i++) {
		const struct thread_cache *tc = &t->threads[i];
		if (tc->kslot >= 0 && tc->klast + KREAD_ARM_GAP_NS > due)
			due = tc->klast + KREAD_ARM_GAP_NS;
	}
	if (due > now) {
		struct timespec at = {.tv_sec = (time_t)(due / 1000000000u), .tv_nsec = (long)(due % 1000000000u)};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
			;
		t->stats.kernel_paced++;
		uint64_t woke = clock_mono_ns();
		t->stats.kernel_paced_ns += woke - now;
		now = woke;
	}
	for (uint32_t i = 0; i < t->nthreads; i++) {
		struct thread_cache *tc = &t->threads[i];
		tc->karmed = 0;
		if (tc->kslot < 0)
			continue;
		/* A shot came since the last look: the thread ran, whatever its stack shows. */
		uint64_t shot = kread_shot_at(t->opts.kreader, tc->kslot);
		bool busy = tc->kbusy || shot > tc->kshot;
		tc->kshot = shot;
		if (busy)
			tc->kbusy_at = now;
		tc->kbusy = false; /* until its walk finds it busy again (walk_kernel_settle) */
		if (!busy || now - tc->klast < KREAD_ARM_GAP_NS)
			continue;
		tc->karmed = kread_arm(t->opts.kreader, tc->kslot);
		tc->klast = tc->karmed ? tc->karmed : tc->klast;
	}
}

/*
 * After a watched thread's walk: whether it is busy (struct thread_cache),
 * and its watch ended once it has not been for KREAD_QUIET_NS: a watch
 * keeps a slot and a perf event.
 */
static void walk_kernel_settle(struct walk *w, struct thread_cache *tc, uint32_t stack)
{
	if (tc->kslot < 0)
		return;
	uint64_t now = clock_mono_ns();
	tc->kbusy = w->tore || stack != tc->kstack;
	tc->kstack = stack;
	if (tc->kbusy)
		tc->kbusy_at = now;
	else if (now - tc->kbusy_at > KREAD_QUIET_NS)
		threads_unwatch(w->t, tc);
}

/* One thread state: its identity, flags and (if the mode selects it) its stack. */
static int walk_thread(struct walk *w, const struct walk_interp *iv, raddr_t tstate,
                         uint32_t ordinal, raddr_t *next, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;

	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, err);
	if (!ts)
		return -1;
	if (load_u64(ts, L->tstate.interp) != iv->addr)
		return uw_fail(err, UW_ECORRUPT, "thread state 0x%llx is not of its interpreter",
		               (unsigned long long)tstate);
	*next = load_u64(ts, L->tstate.next);
	if (*next == tstate)
		return uw_fail(err, UW_ECORRUPT, "thread state 0x%llx links to itself",
		               (unsigned long long)tstate);

	struct thread_cache *tc = threads_lookup(t, tstate, ordinal, err);
	if (!tc)
		return -1;
	/* Met before in this walk: the list loops, through however many states. */
	if (tc->seen == t->sample_gen)
		return uw_fail(err, UW_ECORRUPT, "thread state 0x%llx comes twice: the thread list loops",
		               (unsigned long long)tstate);
	tc->seen = t->sample_gen;

	uint64_t thread_id = load_u64(ts, L->tstate.thread_id);
	int64_t native_id = L->tstate.native_thread_id != LAYOUT_ABSENT
	                        ? (int64_t)load_u64(ts, L->tstate.native_thread_id)
	                        : threads_native_tid(t, thread_id);
	if (native_id <= 0 || native_id > INT32_MAX)
		native_id = -1;
	bool holds_gil = iv->gil_holder && iv->gil_holder == tstate;
	bool need_cpu = t->opts.mode == UW_MODE_CPU || t->opts.want_on_cpu;
	char state = need_cpu ? threads_kernel_state(t, tc, native_id) : '?';
	bool on_cpu = state == 'R';
	if ((t->opts.mode == UW_MODE_CPU && !on_cpu) || (t->opts.mode == UW_MODE_GIL && !holds_gil) ||
	    (t->opts.mode == UW_MODE_EXCEPTION && !exception_handling(t, tstate)))
		return 0;

	uint32_t stack = 0;
	bool truncated = false, dropped = false;
	/* Filled by uw_fail before it is read: clearing its 256-byte message each thread showed in a steady sample. */
	struct uw_error thread_err;
	thread_err.status = UW_OK;
	thread_err.msg[0] = '\0';
	/*
	 * Every thread is checked, GIL or not: a thread waiting for the GIL has
	 * been seen to publish a frame pointer that lags its frames.
	 */
	bool may_move = true, moving = false;
	/*
	 * The kernel may prove the thread ran nothing since its stack was read
	 * (threads_still_begin): on 3.15 only its look is worth it, the marker
	 * proving the rest for less.  3.11-3.12 keep the innermost frame behind
	 * cframe: no pointer to check there.
	 */
	bool provable = !L->tstate.marker || kread_still(t->opts.kreader);
	bool top_known = L->tstate.frame != LAYOUT_ABSENT;
	raddr_t top = provable && top_known ? load_u64(ts, L->tstate.frame) : 0;
	if (provable && threads_still_stack(t, tc, native_id, top, &stack, &truncated)) {
		/* Its reads count for the next plan as if made: the batch keeps them, to skip or read. */
		view_reads_carry(t, tstate, &tc->used_from, &tc->used_n);
		t->stats.still_proven++;
		t->stats.steady_hits++;
		t->stats.frame_cache_full_hits += tc->n > 0;
		t->stats.frames_from_cache += tc->n;
	} else {
		w->native_id = native_id;
		/* What the walk reads is this thread's alone, unless another's reads share its pages. */
		t->view_owner = tstate;
		tc->used_from = view_mark(t);
		int walked = walk_thread_stack(w, tc, tstate, may_move, &stack, &truncated, &dropped,
		                               &moving, &thread_err);
		tc->used_n = view_mark(t) - tc->used_from;
		t->view_owner = 0;
		if (walked != 0) {
			*err = thread_err;
			return -1;
		}
		walk_kernel_settle(w, tc, stack);
		/* Only a stack read whole, as the thread state points to it, is one to keep. */
		bool whole = !dropped &&
		             (!top_known || (tc->n ? tc->chain[tc->n - 1].addr == top : top == 0));
		/* The pages matter to /proc's proof alone: not counted for a thread the look tells of. */
		if (provable)
			threads_still_after(t, tc, whole ? native_id : -1, top, stack, truncated,
			                    tc->still.told ? THREADS_STILL_MIN_PAGES : walk_read_pages(t, tc));
	}
	if (dropped && !moving) {
		/* Read as garbage every time: no thread to show, and the caller is told why. */
		w->out->dropped_threads++;
		w->out->drop_reason = thread_err;
		return 0;
	}
	if (dropped) {
		t->stats.torn_threads++;
		stack = 0;
	}
	if ((t->opts.flags & UW_SNAP_GC) && iv->gc_running && holds_gil &&
	    (stack = intern_stack(&t->intern, stack, t->gc_frame)) == INTERN_FAILED)
		return uw_fail(err, UW_ENOMEM, "out of memory interning frames");

	struct uw_sample_thread *th = walk_add_thread(w, err);
	if (!th)
		return -1;
	*th = (struct uw_sample_thread){.thread_id = thread_id,
	                                .native_id = native_id,
	                                .interp_id = iv->id,
	                                .holds_gil = holds_gil,
	                                .on_cpu = on_cpu,
	                                .truncated = truncated,
	                                .moving = moving && dropped,
	                                .stack = stack};
	th->idle = t->opts.want_idle && threads_idle(t, tc, native_id, holds_gil, state, stack);
	threads_name(t, tc, native_id, th->name);
	t->stats.thread_samples++;
	return 0;
}

/*
 * One field of a remote struct, read on its own: a sample reads the bytes
 * it uses, not whole structs, since every page a read touches costs the
 * kernel a pin (a whole PyInterpreterState spans three).  Reads of nearby
 * fields still merge into one range of the batch.
 */
static const uint8_t *walk_field(struct uw_target *t, raddr_t base, uint32_t off, uint32_t width,
                                 struct uw_error *err)
{
	return view_read(t, base + off, width, 0, err);
}

/* The GIL holder, from the lock struct at gil: its two fields only. */
static int walk_gil_holder(struct uw_target *t, raddr_t gil, raddr_t *holder, struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	uint32_t lo = L->gil.last_holder < L->gil.locked ? L->gil.last_holder : L->gil.locked;
	uint32_t holder_end = L->gil.last_holder + 8, locked_end = L->gil.locked + 4;
	uint32_t hi = holder_end > locked_end ? holder_end : locked_end;
	*holder = 0;
	if (!gil)
		return 0;
	const uint8_t *g = walk_field(t, gil, lo, hi - lo, err);
	if (!g)
		return -1;
	*holder = load_i32(g, L->gil.locked - lo) ? load_u64(g, L->gil.last_holder - lo) : 0;
	return 0;
}

/*
 * 3.12+: where an interpreter's GIL is (ceval.gil).  CPython sets it as the
 * interpreter starts and never moves it, so it is read once per interpreter,
 * known by its address and its id (ids are never reused): the pointer sits
 * on a page of its own, far from the fields a sample reads.
 */
static int walk_gil_ptr(struct uw_target *t, unsigned ordinal, raddr_t interp, int64_t id,
                        raddr_t *gil, struct uw_error *err)
{
	struct walk_gil_ptr *kept = ordinal < WALK_GIL_PTRS ? &t->gil_ptrs[ordinal] : NULL;
	if (kept && kept->gil && kept->interp == interp && kept->id == id && !t->opts.no_cache) {
		*gil = kept->gil;
		return 0;
	}
	const uint8_t *p = walk_field(t, interp, t->layout.interp.gil_ptr, 8, err);
	if (!p)
		return -1;
	*gil = load_u64(p, 0);
	/* Not yet set (an interpreter starting): read again next time. */
	if (kept && *gil)
		*kept = (struct walk_gil_ptr){.interp = interp, .id = id, .gil = *gil};
	return 0;
}

/* Bytes one read of an interpreter's links may span: every layout keeps them within a few words. */
#define WALK_LINKS_SPAN 256

/*
 * An interpreter's next, id and threads head: one read when they lie
 * together, as in every CPython (three lookups of the view each sample
 * were a tenth of a steady one's own work).
 */
static int walk_interp_links(struct uw_target *t, raddr_t interp, const uint8_t **next,
                             const uint8_t **id, const uint8_t **head, struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	uint32_t offs[3] = {L->interp.next, L->interp.id, L->interp.threads_head};
	uint32_t lo = offs[0], hi = offs[0];
	for (int i = 1; i < 3; i++) {
		lo = offs[i] < lo ? offs[i] : lo;
		hi = offs[i] > hi ? offs[i] : hi;
	}
	if (hi - lo <= WALK_LINKS_SPAN) {
		const uint8_t *f = walk_field(t, interp, lo, hi - lo + 8, err);
		if (!f)
			return -1;
		*next = f + (offs[0] - lo);
		*id = f + (offs[1] - lo);
		*head = f + (offs[2] - lo);
		return 0;
	}
	if (!(*next = walk_field(t, interp, offs[0], 8, err)) ||
	    !(*id = walk_field(t, interp, offs[1], 8, err)) ||
	    !(*head = walk_field(t, interp, offs[2], 8, err)))
		return -1;
	return 0;
}

static int walk_interpreters(struct walk *w, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	struct uw_sample *out = w->out;
	const uint8_t *f;

	raddr_t runtime_gil_holder = 0;
	if (L->runtime.gil != LAYOUT_ABSENT &&
	    walk_gil_holder(t, t->runtime + L->runtime.gil, &runtime_gil_holder, err) != 0)
		return -1;
	bool runtime_gc = false;
	if (L->runtime.gc_collecting != LAYOUT_ABSENT) {
		if (!(f = walk_field(t, t->runtime, L->runtime.gc_collecting, 4, err)))
			return -1;
		runtime_gc = load_i32(f, 0) != 0;
	}
	if (!(f = walk_field(t, t->runtime, L->runtime.interpreters_head, 8, err)))
		return -1;
	raddr_t interp = load_u64(f, 0);
	uint32_t ordinal = 0;
	for (unsigned ni = 0; interp; ni++) {
		if (ni >= UW_MAX_INTERPRETERS)
			return uw_fail(err, UW_ECORRUPT, "more than %u interpreters", UW_MAX_INTERPRETERS);
		const uint8_t *next_f, *id_f, *head_f;
		if (walk_interp_links(t, interp, &next_f, &id_f, &head_f, err) != 0)
			return -1;
		struct walk_interp iv = {
			.addr = interp,
			.id = (int64_t)load_u64(id_f, 0),
			.gil_holder = runtime_gil_holder,
			.gc_running = runtime_gc,
		};
		if (L->interp.gc_collecting != LAYOUT_ABSENT) {
			if (!(f = walk_field(t, interp, L->interp.gc_collecting, 4, err)))
				return -1;
			iv.gc_running |= load_i32(f, 0) != 0;
		}
		out->gc_running |= iv.gc_running;
		raddr_t next_interp = load_u64(next_f, 0);
		raddr_t tstate = load_u64(head_f, 0);
		raddr_t gil = 0;
		if (L->interp.gil_ptr != LAYOUT_ABSENT &&
		    (walk_gil_ptr(t, ni, interp, iv.id, &gil, err) != 0 ||
		     walk_gil_holder(t, gil, &iv.gil_holder, err) != 0))
			return -1;
		uint32_t first = out->nthreads;
		for (uint32_t k = 0; tstate; k++) {
			if (k >= UW_MAX_THREADS)
				return uw_fail(err, UW_ECORRUPT, "more than %u threads", UW_MAX_THREADS);
			raddr_t next = 0;
			/* Past the deadline the walk stops: the threads read whole so far stand. */
			if (walk_over_time(w, WALK_CLOCK_THREAD))
				break;
			if (walk_thread(w, &iv, tstate, ordinal++, &next, err) != 0) {
				if (!w->cut)
					return -1;
				break;
			}
			tstate = next;
		}
		/* Thread states are pushed at the head: list them oldest (main) first. */
		for (uint32_t a = first, b = out->nthreads; a + 1 < b; a++, b--) {
			struct uw_sample_thread tmp = out->threads[a];
			out->threads[a] = out->threads[b - 1];
			out->threads[b - 1] = tmp;
		}
		if (w->cut)
			return 0;
		if (next_interp == interp)
			return uw_fail(err, UW_ECORRUPT, "interpreter 0x%llx links to itself",
			               (unsigned long long)interp);
		interp = next_interp;
	}
	return 0;
}

size_t walk_cache_bytes(const struct uw_target *t)
{
	return intern_bytes(&t->intern) + t->codes.bytes + threads_bytes(t);
}

/* Forget every id and cache: the budget was reached (or the options changed). */
static int walk_reset_caches(struct uw_target *t, struct uw_error *err)
{
	code_cache_free(&t->codes);
	threads_free(t);
	t->epoch++;
	t->stats.cache_resets++;
	if (intern_reset(&t->intern) != 0)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	t->native_frame = t->gc_frame = t->moving_frame = 0;
	return 0;
}

/* The marker frames of this epoch. */
static int walk_intern_markers(struct uw_target *t, struct uw_error *err)
{
	if (t->native_frame && t->gc_frame && t->moving_frame)
		return 0;
	struct frame_key native = {.line = -1, .kind = UW_FRAME_NATIVE};
	struct frame_key gc = {.line = -1, .kind = UW_FRAME_GC};
	struct frame_key moving = {.line = -1, .kind = UW_FRAME_MOVING};
	native.function = native.qualname = intern_string(&t->intern, "<native>", 8);
	gc.function = gc.qualname = intern_string(&t->intern, "<GC>", 4);
	moving.function = moving.qualname = intern_string(&t->intern, "<moving>", 8);
	if (native.function == INTERN_FAILED || gc.function == INTERN_FAILED ||
	    moving.function == INTERN_FAILED ||
	    (t->native_frame = intern_frame(&t->intern, &native)) == INTERN_FAILED ||
	    (t->gc_frame = intern_frame(&t->intern, &gc)) == INTERN_FAILED ||
	    (t->moving_frame = intern_frame(&t->intern, &moving)) == INTERN_FAILED) {
		t->native_frame = t->gc_frame = t->moving_frame = 0;
		return uw_fail(err, UW_ENOMEM, "out of memory");
	}
	return 0;
}

/*
 * Reset at half the budget: one sample grows the caches by a few entries, but
 * a hash table that doubles can add as much again as it held, and the budget
 * is a bound, not a target.
 */
static bool walk_reset_due(const struct uw_target *t)
{
	/*
	 * The figure the last sample ended with: a steady sample does not count
	 * every thread's cache twice, and growth since (a snapshot's) is seen at
	 * the end of this one, still far inside the budget.
	 */
	return t->stats.cache_bytes > t->opts.cache_budget / 2;
}

size_t walk_room(const struct uw_target *t)
{
	const struct walk *w = t->walk;
	if (!w)
		return 0;
	return sizeof *w + w->raw_cap * sizeof *w->raw + w->checks_cap * sizeof *w->checks +
	       w->base_cap * sizeof *w->base + w->moved_cap * sizeof *w->moved +
	       w->ranges_cap * sizeof *w->ranges + w->buf_cap;
}

/*
 * The working arrays keep the room of the largest sample, so a steady one
 * allocates nothing.  But one sample that needed far more (a recursion
 * thousands deep, or a read of a stack that moved under it and walked a
 * chain of freed frames to UW_MAX_FRAMES) grew them by megabytes, which a
 * daemon kept for the target's life: its RSS crept as, one by one, its
 * targets met such a sample.  Now and then room past the bound is given
 * back; a target whose samples need it takes it again at the next sample.
 */
static void walk_trim(struct uw_target *t)
{
	if (t->stats.samples % UW_SCRATCH_TRIM_SAMPLES != 0 ||
	    walk_room(t) + view_room(t) <= UW_SCRATCH_KEEP_BYTES)
		return;
	walk_free(t);
	view_trim(t);
	t->stats.scratch_bytes = walk_room(t) + view_room(t);
}

int uw_sample(struct uw_target *t, struct uw_sample *s, struct uw_error *err)
{
	struct uw_error local_err;
	if (!err)
		err = &local_err;
	s->nthreads = 0;
	s->gc_running = false;
	s->cut = false;
	t->sample_gen++;
	t->stats.samples++;

	int rc = -1;
	if (walk_reset_due(t)) {
		if (t->opts.on_epoch_end)
			t->opts.on_epoch_end(t->opts.epoch_ctx, t);
		if (walk_reset_caches(t, err) != 0)
			goto done;
	}
	if (walk_intern_markers(t, err) != 0)
		goto done;
	s->epoch = t->epoch;
	t->look = still_look(t);
	/* The look's tasks of the process, for the kernel's copies of it (view.c). */
	uint32_t ntasks;
	const struct kstill_task *tasks = still_tasks(t, &ntasks);
	view_copy_window(t, tasks, ntasks);
	/*
	 * Nothing of the process ran since the sample kept: that is this one,
	 * no memory read and no cache grown, so the figures at the end stand as
	 * the last walk left them (working them out again walked every thread's
	 * cache, cold by now, at each such sample).
	 */
	if (still_sample(t, s)) {
		walk_trim(t);
		return 0;
	}
	if (!t->walk && !(t->walk = calloc(1, sizeof *t->walk))) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		goto done;
	}
	struct walk *w = t->walk;
	w->t = t;
	w->out = s;
	w->nraw = w->nchecks = 0;
	s->dropped_threads = 0;
	w->cut = false;
	/* The clock was just read for the deadline. */
	w->until_clock = WALK_CLOCK_EVERY;
	w->deadline_ns = t->opts.max_sample_ns ? clock_mono_ns() + t->opts.max_sample_ns : 0;
	/* Before the memory is read: the kernel's proofs must come first (see still.c, threads_still_begin). */
	still_arm(t);
	threads_still_begin(t);
	if (walk_kernel_copies(t))
		walk_kernel_arm_watched(t);
	if (view_begin(t, tasks, ntasks, err) == 0)
		rc = walk_interpreters(w, err);
	/* asyncio's tasks, read once the threads are: a running task's frames are its thread's. */
	if (rc == 0 && !w->cut && tasks_wanted(t))
		rc = tasks_sample(w, err);
	view_end(t, rc == 0);
	s->cut = w->cut;
done:
	if (rc == 0 && s->cut) {
		/* The threads not reached are not gone: their caches stay for the next walk. */
		t->stats.walks_cut++;
	} else if (rc == 0) {
		threads_sweep(t);
		still_keep(t, s);
	} else {
		s->nthreads = 0;
		/* Garbage read from a dying process is the death, not corruption. */
		if (err->status == UW_ECORRUPT && !remote_alive(&t->mem))
			uw_fail(err, UW_EGONE, "process %d exited", (int)t->pid);
		if (err->status <= UW_EIO)
			t->stats.errors[err->status]++;
	}
	walk_trim(t);
	t->stats.readv_calls = t->mem.calls;
	t->stats.bytes_read = t->mem.bytes;
	t->stats.pages_read = t->mem.pages;
	t->stats.read_ns = t->mem.read_ns;
	t->stats.cache_bytes = walk_cache_bytes(t);
	t->stats.scratch_bytes = walk_room(t) + view_room(t);
	return rc;
}

void walk_free(struct uw_target *t)
{
	if (!t->walk)
		return;
	struct walk *w = t->walk;
	free(w->raw);
	free(w->checks);
	free(w->base);
	free(w->moved);
	free(w->ranges);
	free(w->buf);
	free(w);
	t->walk = NULL;
}

void uw_sample_free(struct uw_sample *s)
{
	free(s->threads);
	memset(s, 0, sizeof *s);
}
