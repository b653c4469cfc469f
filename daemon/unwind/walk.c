/*
 * Sampling: runtime -> interpreters -> thread states -> each thread's
 * stack, proven by the first prover that can without a walk (prove.h),
 * else read (frames.c), proven whole (validate.c) or rescued by a prover
 * when it tore, and resolved to a stack id with the base it shares with
 * last time (chain.c).
 *
 * Written once against struct py_layout.  Every remote read goes through
 * the view (one batched read per sample in steady state); every list
 * walked here comes from remote memory and is bounded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kread_abi.h"
#include "native.h"
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

/* In the order tried: the kernel's word costs no read, the marker two, equal bytes a memcmp. */
const struct prover *const provers[PROVER_COUNT] = {
	[PROVER_LOOK] = &prover_look,
	[PROVER_MARKER] = &prover_marker,
	[PROVER_SAME_BYTES] = &prover_same_bytes,
	[PROVER_KERNEL_READER] = &prover_kernel_reader,
};

bool prover_on(const struct uw_target *t, enum prover_id id)
{
	return !(t->opts.provers_off & (1u << id)) && provers[id]->serves(t);
}

int uw_provers_parse(const char *list, unsigned *off, char *why, size_t why_len)
{
	*off = 0;
	if (strcmp(list, "none") == 0)
		return 0;
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		unsigned bit = 0;
		for (unsigned i = 0; i < PROVER_COUNT && !bit; i++)
			if (strlen(provers[i]->name) == len && strncmp(p, provers[i]->name, len) == 0)
				bit = 1u << i;
		if (!bit && len == 7 && strncmp(p, "process", 7) == 0)
			bit = UW_PROVER_PROCESS_BIT;
		if (!bit) {
			snprintf(why, why_len, "no prover named \"%.*s\" (look, marker, same_bytes, "
			         "kernel_reader, process)", (int)(len > 64 ? 64 : len), p);
			return -1;
		}
		*off |= bit;
		p += len + (p[len] == ',');
	}
	return 0;
}

/* Whether prover i is in use this sample (w->provers, worked out as the sample began). */
static inline bool walk_prover_on(const struct walk *w, unsigned i)
{
	return w->provers & (1u << i);
}

/*
 * Read the thread's frames and prove them not torn (validate.c), fresh,
 * up to `attempts` times: a thread that runs moves its stack every
 * microsecond or so.  A walk that tears is first offered to the provers
 * that can rescue one (the in-kernel reader's copy, the part below 3.15's
 * marker).  If it keeps moving, *moving says so; if it keeps reading as
 * garbage, *dropped alone.
 */
static int walk_read(struct walk *w, struct thread_cache *tc, raddr_t tstate, uint32_t *stack,
                     bool *truncated, bool *dropped, bool *moving, struct uw_error *err)
{
	struct uw_target *t = w->t;
	int attempts = t->thread_attempts > 0 ? t->thread_attempts : WALK_ATTEMPTS;
	uint32_t mark = view_mark(t), start = w->nraw;
	int rc = -1;
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
		*moving = rc != 0 && w->torn;
		/* A stack exactly as last time is one already proven whole. */
		if (rc == 0 && (w->last_try || w->suspect || !(common == n && tc->n == n && n > 0))) {
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
			struct proven_walk p = {.raw = raw,
			                        .n = n,
			                        /* The same frames as the last walk but for where the innermost stands. */
			                        .parked = n > 0 && tc->n == n && common + 1 >= n,
			                        .first_read = attempt == 0 && !returned,
			                        .mark = mark};
			*stack = chain_resolve(t, tc, raw, n, common, err);
			if (*stack == INTERN_FAILED)
				return -1;
			tc->truncated = *truncated;
			tc->flags = t->opts.flags;
			for (unsigned i = 0; i < PROVER_COUNT; i++)
				if (provers[i]->proven && walk_prover_on(w, i))
					provers[i]->proven(w, tc, tstate, &p);
			break;
		}
		if (w->cut || err->status != UW_ECORRUPT || !remote_may_live(&t->mem))
			break;
		w->tore |= *moving;
		if (*moving) {
			struct torn_walk torn = {.start = start, .n = n, .collected = collected,
			                         .last = attempt + 1 == attempts};
			int taken = 0;
			for (unsigned i = 0; i < PROVER_COUNT && !taken; i++)
				if (provers[i]->torn && walk_prover_on(w, i))
					taken = provers[i]->torn(w, tc, tstate, &torn, stack, truncated, err);
			if (taken != 0) {
				rc = taken < 0 ? -1 : 0;
				*moving = false;
				break;
			}
		}
		*dropped = attempt + 1 == attempts;
	}
	return rc;
}

/*
 * A thread's stack, proven: by the first prover that can without a walk,
 * else read (walk_read), then what each prover keeps of it for the next
 * sample.  A thread with no stack proven has *dropped set (and *moving
 * when its reads tore rather than read as garbage); the other threads
 * stand either way.
 */
static int walk_thread_stack(struct walk *w, struct thread_cache *tc, raddr_t tstate, uint32_t *stack,
                             bool *truncated, bool *dropped, bool *moving, struct uw_error *err)
{
	struct uw_target *t = w->t;
	*dropped = *moving = false;
	w->tore = false;
	int proven = 0;
	for (unsigned i = 0; i < PROVER_COUNT && !proven; i++)
		if (provers[i]->before && walk_prover_on(w, i))
			proven = provers[i]->before(w, tc, tstate, stack, truncated, err);
	if (proven < 0 || proven == 2)
		return proven < 0 ? -1 : 0;
	if (!proven) {
		for (unsigned i = 0; i < PROVER_COUNT; i++)
			if (provers[i]->prepare && walk_prover_on(w, i))
				provers[i]->prepare(w, tc, tstate);
		uint32_t start = w->nraw;
		int rc = walk_read(w, tc, tstate, stack, truncated, dropped, moving, err);
		view_retry_end(t);
		w->nraw = start;
		w->last_try = false;
		w->tc = NULL;
		if (rc != 0 && !*dropped)
			return rc;
	}
	/* Only a stack read whole, as the thread state points to it, is one to keep. */
	struct walk_end end = {.stack = *stack,
	                       .truncated = *truncated,
	                       .whole = !*dropped && (!w->top_known || (tc->n ? tc->chain[tc->n - 1].addr == w->top
	                                                                      : w->top == 0))};
	for (unsigned i = 0; i < PROVER_COUNT; i++)
		if (provers[i]->after && walk_prover_on(w, i))
			provers[i]->after(w, tc, &end);
	return 0;
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
	int64_t native_id;
	if (L->tstate.native_thread_id != LAYOUT_ABSENT) {
		native_id = (int64_t)load_u64(ts, L->tstate.native_thread_id);
	} else if ((native_id = threads_native_tid(t, thread_id)) == 0) {
		return 0; /* it ran here no more: a state the fork's child has not cleared yet */
	}
	if (native_id <= 0 || native_id > INT32_MAX)
		native_id = -1;
	/* Another process's thread: its parent's, copied by a fork the child has not cleared yet. */
	if (!threads_own(t, tc, native_id))
		return 0;
	bool holds_gil = iv->gil_holder && iv->gil_holder == tstate;
	bool need_cpu = t->opts.mode == UW_MODE_CPU || t->opts.want_on_cpu;
	char state = need_cpu ? threads_kernel_state(t, tc, native_id) : '?';
	bool on_cpu = state == 'R';
	if ((t->opts.mode == UW_MODE_CPU && !on_cpu) || (t->opts.mode == UW_MODE_GIL && !holds_gil))
		return 0;
	if (t->opts.mode == UW_MODE_EXCEPTION) {
		uint32_t items;
		bool handling = exception_handling(t, tstate, &items);
		/* Each item of a long chain is a read, as a frame is: the clock counts them alike. */
		if (walk_over_time(w, items) || !handling)
			return 0;
	}

	uint32_t stack = 0;
	bool truncated = false, dropped = false;
	/* Filled by uw_fail before it is read: clearing its 256-byte message each thread showed in a steady sample. */
	struct uw_error thread_err;
	thread_err.status = UW_OK;
	thread_err.msg[0] = '\0';
	bool moving = false;
	w->native_id = native_id;
	w->top_known = L->tstate.frame != LAYOUT_ABSENT;
	w->top = w->top_known ? load_u64(ts, L->tstate.frame) : 0;
	struct context_seen ctx_seen;
	context_before(t, tc, tstate, &ctx_seen);
	/* What the walk reads is this thread's alone, unless another's reads share its pages. */
	t->view_owner = tstate;
	uint32_t from = view_mark(t);
	int walked = walk_thread_stack(w, tc, tstate, &stack, &truncated, &dropped, &moving, &thread_err);
	tc->used_from = from;
	tc->used_n = view_mark(t) - from;
	t->view_owner = 0;
	if (walked != 0) {
		*err = thread_err;
		return -1;
	}
	if (dropped && !moving) {
		/* Read as garbage every time: no thread to show, and the caller is told why. */
		w->out->dropped_threads++;
		w->out->drop_reason = thread_err;
		return 0;
	}
	/*
	 * Moving through every read, with nothing proven: counted as a thread
	 * that ran something, under a frame that says so.  Left out, its
	 * samples would shift the profile's shares to the threads that stand.
	 */
	if (dropped) {
		t->stats.torn_threads++;
		if ((stack = intern_stack(&t->intern, 0, t->moving_frame)) == INTERN_FAILED)
			return uw_fail(err, UW_ENOMEM, "out of memory interning frames");
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
	threads_name(t, tc, native_id, thread_id, th->name);
	th->context = context_of_thread(t, tc, tstate, thread_id, &ctx_seen);
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

/*
 * The threads' contexts copied into the sample's own room: the reader's
 * are written again by the next sample, and a caller may hold two samples
 * (pyprofd record counts a read once the next one's time is known).  One
 * that finds no room is left out.
 */
static void walk_own_contexts(struct uw_sample *s)
{
	uint32_t with = 0;
	for (uint32_t i = 0; i < s->nthreads; i++)
		with += s->threads[i].context != NULL;
	if (with && array_reserve((void **)&s->contexts, &s->contexts_cap, with - 1, sizeof *s->contexts, NULL) != 0)
		with = 0;
	uint32_t k = 0;
	for (uint32_t i = 0; i < s->nthreads; i++) {
		if (!s->threads[i].context)
			continue;
		if (k < with) {
			s->contexts[k] = *s->threads[i].context;
			s->threads[i].context = &s->contexts[k++];
		} else {
			s->threads[i].context = NULL;
		}
	}
}

int uw_sample(struct uw_target *t, struct uw_sample *s, struct uw_error *err)
{
	struct uw_error local_err;
	if (!err)
		err = &local_err;
	s->nthreads = 0;
	s->gc_running = false;
	s->cut = false;
	/* What the tasks reader tells, reset for a sample that reads no tasks too: still_keep looks at it. */
	s->tasks_cut = false;
	s->tasks_moved = 0;
	s->tasks_error.status = UW_OK;
	s->tasks_error.msg[0] = '\0';
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
	bool process_proof = !(t->opts.provers_off & UW_PROVER_PROCESS_BIT);
	if (process_proof && still_sample(t, s)) {
		walk_trim(t);
		walk_own_contexts(s);
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
	w->deadline_ns = 0;
	if (t->opts.max_sample_ns) {
		/* Never sooner than a quarter of the bound: a stray slow tail must not starve every walk. */
		uint64_t room = t->opts.max_sample_ns, tail = t->cut_tail_ns;
		room = tail < room - room / 4 ? room - tail : room / 4;
		w->started_ns = clock_mono_ns();
		w->deadline_ns = w->started_ns + room;
	}
	/* Before the memory is read: the kernel's proofs must come first (see still.c, threads_still_begin). */
	if (process_proof)
		still_arm(t);
	threads_still_begin(t);
	native_sample_begin(t);
	/* Which provers serve, once a sample rather than at each hook of each thread. */
	w->provers = 0;
	for (unsigned i = 0; i < PROVER_COUNT; i++)
		w->provers |= (unsigned)prover_on(t, i) << i;
	if (walk_prover_on(w, PROVER_KERNEL_READER))
		kernel_arm_watched(t);
	if (view_begin(t, tasks, ntasks, err) == 0)
		rc = walk_interpreters(w, err);
	/* asyncio's tasks, read once the threads are: a running task's frames are its thread's. */
	if (rc == 0 && !w->cut && tasks_wanted(t))
		rc = tasks_sample(w, err);
	view_end(t, rc == 0);
	/* The C frames last: their copy must come after the walk it is held to. */
	if (rc == 0 && !w->cut)
		rc = native_sample_end(t, s, err);
	s->cut = w->cut;
	if (w->deadline_ns && (w->cut || s->tasks_cut)) {
		/*
		 * Cut, the sample took what it was given and its tail: half of
		 * what it took past seven eighths of the bound (or left of it)
		 * moves the next deadline, a step at most a quarter of the bound,
		 * so a preempted sample moves it little and a steady tail is soon
		 * taken in.  Aimed below the bound, as half the samples land past
		 * where they aim.
		 */
		int64_t bound = (int64_t)t->opts.max_sample_ns;
		int64_t excess = (int64_t)(clock_mono_ns() - w->started_ns) - (bound - bound / 8);
		if (excess > bound / 4)
			excess = bound / 4;
		if (excess < -bound / 4)
			excess = -bound / 4;
		int64_t tail = (int64_t)t->cut_tail_ns + excess / 2;
		t->cut_tail_ns = tail < 0 ? 0 : tail > bound - bound / 4 ? (uint64_t)(bound - bound / 4) : (uint64_t)tail;
	}
done:
	if (rc == 0 && s->cut) {
		/* The threads not reached are not gone: their caches stay for the next walk. */
		t->stats.walks_cut++;
	} else if (rc == 0) {
		threads_sweep(t);
		if (process_proof)
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
	if (rc == 0)
		walk_own_contexts(s);
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
	free(s->contexts);
	memset(s, 0, sizeof *s);
}

