/*
 * Every version: the kernel's look as a prover (prove.h).  A thread the
 * kernel says ran no instruction since its stack was read whole (its
 * scheduler counts, read through /proc or by the in-kernel look, kstill.c)
 * has that stack still: nothing of its memory is read (threads.c owns the
 * per-thread state, struct thread_still).
 */
#include "unwind_internal.h"

/*
 * 3.15's marker proves the rest for less: there only the in-kernel look is
 * worth it.  3.11-3.12 keep the innermost frame behind cframe, with no
 * pointer in the thread state to check the proof against: none taken then.
 */
static bool look_serves(const struct uw_target *t)
{
	return !t->layout.tstate.marker || kread_still(t->opts.kreader);
}

static int look_before(struct walk *w, struct thread_cache *tc, raddr_t tstate, uint32_t *stack,
                       bool *truncated, struct uw_error *err)
{
	(void)err;
	struct uw_target *t = w->t;
	if (!threads_still_stack(t, tc, w->native_id, w->top, stack, truncated))
		return 0;
	/* Its reads count for the next plan as if made: the batch keeps them, to skip or read. */
	view_reads_carry(t, tstate, &tc->used_from, &tc->used_n);
	t->stats.still_proven++;
	t->stats.steady_hits++;
	t->stats.frame_cache_full_hits += tc->n > 0;
	t->stats.frames_from_cache += tc->n;
	return 2;
}

/* Only a stack read whole counts for the proof; the pages matter to /proc's alone. */
static void look_after(struct walk *w, struct thread_cache *tc, const struct walk_end *end)
{
	struct uw_target *t = w->t;
	threads_still_after(t, tc, end->whole ? w->native_id : -1, w->top, end->stack, end->truncated,
	                    tc->still.told ? THREADS_STILL_MIN_PAGES : same_bytes_pages(t, tc));
}

const struct prover prover_look = {
	.name = "look",
	.serves = look_serves,
	.before = look_before,
	.after = look_after,
};
