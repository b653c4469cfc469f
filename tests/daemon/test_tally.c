/*
 * The one count of samples (daemon/tally.c): exact counts per (second,
 * thread, stack), what `top` reads of the last seconds, what the history
 * takes once and only once, and what is forgotten when.
 */
#include <criterion/criterion.h>

#include "pyprofd.h"

struct seen {
	uint64_t total;
	unsigned calls;
};

static void tally_test_visit(void *ctx, const struct tally_entry *e)
{
	struct seen *s = ctx;
	s->total += e->count;
	s->calls++;
}

static int tally_test_hand(void *ctx, const struct tally_entry *e, uint64_t count)
{
	(void)e;
	struct seen *s = ctx;
	s->total += count;
	s->calls++;
	return 0;
}

Test(tally, counts_per_second_thread_and_stack)
{
	struct tally t = {0};
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(tally_add(&t, 100 + i % 10, 7 + i % 2, 1 + i % 5, 1, 0), 0);
	/* 10 seconds x 2 threads, stacks follow i % 5: every (second, thread) pair sees 5 or fewer stacks. */
	cr_assert_leq(t.len, 10 * 5);
	struct seen all = {0}, late = {0};
	tally_visit(&t, 0, tally_test_visit, &all);
	cr_assert_eq(all.total, 1000);
	tally_visit(&t, 105, tally_test_visit, &late);
	cr_assert_eq(late.total, 500, "seconds 105..109 hold half");
	cr_assert_eq(t.unhanded, 1000);
	tally_free(&t);
}

Test(tally, hands_each_sample_on_once)
{
	struct tally t = {0};
	tally_add(&t, 1, 1, 1, 3, 0);
	tally_add(&t, 1, 1, 2, 4, 0);
	struct seen first = {0}, second = {0}, third = {0};
	cr_assert_eq(tally_hand(&t, tally_test_hand, &first), 0);
	cr_assert_eq(first.total, 7);
	cr_assert_eq(t.unhanded, 0);
	cr_assert_eq(tally_hand(&t, tally_test_hand, &second), 0);
	cr_assert_eq(second.calls, 0, "nothing new, nothing handed");
	/* More of a stack already handed: only the difference goes. */
	tally_add(&t, 1, 1, 1, 2, 0);
	tally_hand(&t, tally_test_hand, &third);
	cr_assert_eq(third.total, 2);
	cr_assert_eq(third.calls, 1);
	/* `top` still sees everything. */
	struct seen all = {0};
	tally_visit(&t, 0, tally_test_visit, &all);
	cr_assert_eq(all.total, 9);
	tally_free(&t);
}

static int tally_test_fail(void *ctx, const struct tally_entry *e, uint64_t count)
{
	(void)ctx;
	(void)e;
	(void)count;
	return -1;
}

Test(tally, a_failed_hand_counts_as_handed)
{
	struct tally t = {0};
	tally_add(&t, 1, 1, 1, 1, 0);
	cr_assert_eq(tally_hand(&t, tally_test_fail, NULL), -1);
	cr_assert_eq(t.unhanded, 0, "what failed is not handed again (it was counted as lost)");
	tally_free(&t);
}

Test(tally, prune_forgets_only_what_is_old_and_handed)
{
	struct tally t = {0};
	tally_add(&t, 10, 1, 1, 1, 0); /* old, handed below */
	tally_add(&t, 50, 1, 1, 1, 0); /* recent */
	struct seen s = {0};
	tally_hand(&t, tally_test_hand, &s);
	tally_add(&t, 11, 1, 2, 1, 0); /* old, not handed yet */
	tally_prune(&t, 40);
	cr_assert_eq(t.len, 2);
	/* The index was rebuilt: counting the survivors finds them, the pruned one is new again. */
	tally_add(&t, 50, 1, 1, 5, 0);
	tally_add(&t, 11, 1, 2, 1, 0);
	tally_add(&t, 10, 1, 1, 1, 0);
	cr_assert_eq(t.len, 3);
	struct seen all = {0};
	tally_visit(&t, 0, tally_test_visit, &all);
	cr_assert_eq(all.total, 1 + 5 + 2 + 1);
	tally_clear(&t);
	cr_assert_eq(t.len, 0);
	cr_assert_eq(t.unhanded, 0);
	tally_free(&t);
}

Test(tally, counts_idle_gil_and_gc_and_hands_idle_once)
{
	struct tally t = {0};
	tally_add(&t, 1, 1, 1, 2, TALLY_IDLE);
	tally_add(&t, 1, 1, 1, 3, TALLY_GIL | TALLY_GC);
	cr_assert_eq(t.len, 1);
	cr_expect_eq(t.entries[0].count, 5);
	cr_expect_eq(t.entries[0].idle, 2);
	cr_expect_eq(t.entries[0].gil, 3);
	cr_expect_eq(t.entries[0].gc, 3);
	struct seen s = {0};
	tally_hand(&t, tally_test_hand, &s);
	cr_expect_eq(t.entries[0].idle_handed, 2);
	tally_add(&t, 1, 1, 1, 1, TALLY_IDLE);
	/* What the next hand sees as idle: the difference. */
	cr_expect_eq(t.entries[0].idle - t.entries[0].idle_handed, 1);
	tally_free(&t);
}

/* A thread's hint to its last entry is only ever a shortcut: a stale one counts where the key says. */
Test(tally, a_hint_never_counts_into_another_entry)
{
	struct tally hinted = {0}, plain = {0};
	uint32_t hint[2] = {UINT32_MAX, 12345};
	for (int i = 0; i < 600; i++) {
		int64_t second = 100 + i / 50;
		uint64_t thread = 7 + i % 2;
		uint32_t stack = 1 + (i / 7) % 3;
		unsigned flags = i % 3 == 0 ? TALLY_IDLE : 0;
		cr_assert_eq(tally_add_hinted(&hinted, &hint[i % 2], second, thread, stack, 1, flags), 0);
		cr_assert_eq(tally_add(&plain, second, thread, stack, 1, flags), 0);
		cr_assert_lt(hint[i % 2], hinted.len, "the hint names the entry counted");
		if (i == 300) {
			/* Pruning and clearing move entries under the hints. */
			tally_mark_handed(&hinted);
			tally_mark_handed(&plain);
			tally_prune(&hinted, 104);
			tally_prune(&plain, 104);
		}
	}
	cr_assert_eq(hinted.len, plain.len);
	for (size_t i = 0; i < plain.len; i++) {
		const struct tally_entry *p = &plain.entries[i], *h = &hinted.entries[i];
		cr_assert(p->second == h->second && p->thread_id == h->thread_id && p->stack == h->stack &&
		          p->count == h->count && p->idle == h->idle, "entry %zu differs", i);
	}
	tally_free(&hinted);
	tally_free(&plain);
}

/*
 * A burst of distinct stacks (a target's start, a history that stalled)
 * grows a tally by megabytes; once handed on and pruned, the room goes
 * back, and the tally counts on exactly in what it kept.
 */
Test(tally, gives_back_its_room_once_drained)
{
	struct tally t = {0};
	for (uint32_t i = 0; i < 100000; i++)
		cr_assert_eq(tally_add(&t, 100 + i % 60, 1 + i % 4, 1 + i, 1, 0), 0);
	size_t burst = tally_bytes(&t);
	cr_assert_gt(burst, (size_t)100000 * sizeof(struct tally_entry));
	struct seen handed = {0};
	cr_assert_eq(tally_hand(&t, tally_test_hand, &handed), 0);
	cr_assert_eq(handed.total, 100000);
	/* A quiet second of a few stacks, then the burst's seconds pass out of `top`'s window. */
	for (uint32_t i = 0; i < 30; i++)
		cr_assert_eq(tally_add(&t, 500, 1, 1 + i % 3, 1, 0), 0);
	tally_prune(&t, 500);
	cr_assert_eq(t.len, 3);
	size_t kept = tally_bytes(&t);
	cr_assert_leq(kept, burst / 16, "%zu bytes kept of the burst's %zu", kept, burst);
	struct seen left = {0};
	tally_visit(&t, 0, tally_test_visit, &left);
	cr_assert_eq(left.total, 30);
	cr_assert_eq(tally_add(&t, 500, 1, 2, 5, 0), 0);
	cr_assert_eq(tally_add(&t, 501, 2, 9, 1, 0), 0);
	struct seen after = {0};
	tally_visit(&t, 0, tally_test_visit, &after);
	cr_assert_eq(after.total, 36);
	cr_assert_eq(after.calls, 4, "an entry counted twice: the index lost one");

	/* An epoch's end clears it: the room goes back too. */
	for (uint32_t i = 0; i < 50000; i++)
		cr_assert_eq(tally_add(&t, 600, 1, 1 + i, 1, 0), 0);
	tally_clear(&t);
	cr_assert_leq(tally_bytes(&t), kept * 2);
	cr_assert_eq(tally_add(&t, 700, 1, 1, 1, 0), 0);
	cr_assert_eq(t.len, 1);
	tally_free(&t);
}
