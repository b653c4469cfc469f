/*
 * 3.11-3.14 as root: the in-kernel reader as a prover (prove.h).  A thread
 * whose reads tear is watched (kread.c) and shot as it runs; the kernel's
 * copy of its frames, taken while it stood interrupted, is its stack when
 * every read tears.
 */
#include <errno.h>
#include <time.h>

#include "kread_abi.h"
#include "unwind_internal.h"

/*
 * 3.11-3.14: a thread whose stack moved under a read, watched by the
 * in-kernel reader, its shot armed at `armed`: the stack the kernel copied
 * while the thread stood interrupted, made into frames as
 * frames_collect_interp makes a read's.  The copy is whole by how it was
 * taken, so nothing is re-read; its code objects are decoded as any
 * walk's.  1 and *stack when taken, 0 when there is none (yet), -1 out of
 * memory.
 */
static int kernel_stack(struct walk *w, struct thread_cache *tc, uint32_t start, uint64_t armed,
                        uint32_t *stack, bool *truncated, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	uint32_t kn = 0;
	const struct kread_frame *kf = kread_take(t->opts.kreader, tc->kernel.slot, tc->tstate, armed, &kn);
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
		                              .kind = UW_FRAME_PYTHON, .tlbc = f->tlbc};
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

/*
 * A read of the thread tore, unwatched: it is watched from now on (if it
 * can be) and its shot armed.  The time armed, or 0.
 */
static uint64_t kernel_arm(struct walk *w, struct thread_cache *tc)
{
	struct uw_target *t = w->t;
	if (tc->kernel.slot >= 0 && tc->kernel.tid != w->native_id)
		threads_unwatch(t, tc); /* another thread under this state */
	if (tc->kernel.slot < 0) {
		int64_t tid = w->native_id > 0 ? threads_proc_tid(t, w->native_id) : -1;
		if (tid <= 0 || tid > INT32_MAX)
			return 0;
		tc->kernel.slot = kread_watch(t->opts.kreader, (pid_t)tid, tc->tstate, &t->layout, t->opts.kreader_uid);
		if (tc->kernel.slot < 0) {
			t->stats.kernel_watch_failures++;
			return 0;
		}
		tc->kernel.tid = w->native_id;
		t->stats.kernel_watches++;
	}
	uint64_t now = clock_mono_ns();
	tc->kernel.busy_at = now;
	if (now - tc->kernel.last < KREAD_ARM_GAP_NS)
		return 0;
	uint64_t armed = kread_arm(t->opts.kreader, tc->kernel.slot);
	tc->kernel.last = armed ? armed : tc->kernel.last;
	return armed;
}

/*
 * Every read of the thread tore: the shot comes KREAD_SHOT_NS of its
 * running after it was armed, which the reads may not have lasted.
 * Waited for up to KREAD_WAIT_NS (a thread that stopped running has a
 * stack a read would have proven).  As kernel_stack.
 */
static int kernel_wait(struct walk *w, struct thread_cache *tc, uint32_t start, uint64_t armed,
                       uint32_t *stack, bool *truncated, struct uw_error *err)
{
	for (unsigned spins = 0; spins < KREAD_WAIT_NS / 100u; spins++) {
		int taken = kernel_stack(w, tc, start, armed, stack, truncated, err);
		if (taken != 0 || clock_mono_ns() - armed > KREAD_WAIT_NS)
			return taken;
		for (volatile int i = 0; i < 64; i++)
			;
	}
	return 0;
}


/* As a sample begins, before any read: the shot of every watched thread (see struct kernel_watch). */
void kernel_arm_watched(struct uw_target *t)
{
	/*
	 * Paced: until every watched thread may be shot again.  A thread that
	 * waits is shot no more once its last shot is past (below), so it
	 * holds a sample back once at most.
	 */
	uint64_t now = clock_mono_ns(), due = 0;
	for (uint32_t i = 0; t->opts.kernel_pace && i < t->nthreads; i++) {
		const struct thread_cache *tc = &t->threads[i];
		if (tc->kernel.slot >= 0 && tc->kernel.last + KREAD_ARM_GAP_NS > due)
			due = tc->kernel.last + KREAD_ARM_GAP_NS;
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
		tc->kernel.armed = 0;
		if (tc->kernel.slot < 0)
			continue;
		/* A shot came since the last look: the thread ran, whatever its stack shows. */
		uint64_t shot = kread_shot_at(t->opts.kreader, tc->kernel.slot);
		bool busy = tc->kernel.busy || shot > tc->kernel.shot;
		tc->kernel.shot = shot;
		if (busy)
			tc->kernel.busy_at = now;
		tc->kernel.busy = false; /* until its walk finds it busy again (kernel_after) */
		if (!busy || now - tc->kernel.last < KREAD_ARM_GAP_NS)
			continue;
		tc->kernel.armed = kread_arm(t->opts.kreader, tc->kernel.slot);
		tc->kernel.last = tc->kernel.armed ? tc->kernel.armed : tc->kernel.last;
	}
}

/*
 * After a watched thread's walk: whether it is busy (struct kernel_watch),
 * and its watch ended once it has not been for KREAD_QUIET_NS: a watch
 * keeps a slot and a perf event.
 */
static void kernel_after(struct walk *w, struct thread_cache *tc, const struct walk_end *end)
{
	uint32_t stack = end->stack;
	if (tc->kernel.slot < 0)
		return;
	uint64_t now = clock_mono_ns();
	tc->kernel.busy = w->tore || stack != tc->kernel.stack;
	tc->kernel.stack = stack;
	if (tc->kernel.busy)
		tc->kernel.busy_at = now;
	else if (now - tc->kernel.busy_at > KREAD_QUIET_NS)
		threads_unwatch(w->t, tc);
}


/* With an in-kernel reader, on frames on the data stack (3.11+); 3.15's marker stands in for it. */
static bool kernel_serves(const struct uw_target *t)
{
	return t->opts.kreader && t->layout.frame_model == FRAME_MODEL_INTERP && !prover_marker.serves(t);
}

static void kernel_prepare(struct walk *w, struct thread_cache *tc, raddr_t tstate)
{
	(void)tstate;
	w->kernel_armed = tc->kernel.armed;
	w->kernel_waited = false;
}

/*
 * The shot armed as the sample began is waited for, once: it comes about
 * when a read that holds proves its stack.  One armed now would come a
 * read and an arming later, the later in the code that follows: it only
 * starts the watch, for the next samples.
 */
static int kernel_torn(struct walk *w, struct thread_cache *tc, raddr_t tstate, const struct torn_walk *torn,
                       uint32_t *stack, bool *truncated, struct uw_error *err)
{
	(void)tstate;
	if (w->kernel_waited)
		return 0;
	if (!w->kernel_armed) {
		kernel_arm(w, tc);
		return 0;
	}
	w->kernel_waited = true;
	return kernel_wait(w, tc, torn->start, w->kernel_armed, stack, truncated, err);
}

const struct prover prover_kernel_reader = {
	.name = "kernel_reader",
	.serves = kernel_serves,
	.prepare = kernel_prepare,
	.torn = kernel_torn,
	.after = kernel_after,
};
