/*
 * The sampling schedule (daemon/schedule.c): ticks due at one moment share
 * a wakeup, every entry keeps its rate, a tick the loop could not reach in
 * time is skipped and counted, slots stay within their budget.  Counts come
 * from the schedule's own counters and are compared loosely: nothing here
 * depends on how fast the machine is.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <time.h>

#include "clock.h"
#include "helpers.h"
#include "pyprofd.h"

TestSuite(schedule, .init = helpers_init, .fini = helpers_fini);

struct test_entry {
	struct schedule_entry e;
	struct schedule *s;
	struct test_entry *remove_on_fire; /* removed from the schedule by this one's first tick */
	double stall_s;                    /* spent in its tick, once, at its third */
};

static void test_entry_fire(struct schedule_entry *e, double now, double late_s)
{
	cr_assert_leq(now, clock_mono_s());
	struct test_entry *te = (struct test_entry *)e;
	cr_assert_geq(late_s, 0);
	if (te->remove_on_fire) {
		schedule_remove(te->s, &te->remove_on_fire->e);
		te->remove_on_fire = NULL;
	}
	if (te->stall_s > 0 && e->fired == 3) {
		struct timespec ts = {0, (long)(te->stall_s * 1e9)};
		nanosleep(&ts, NULL);
	}
}

static void test_loop_stop(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void test_run_loop(struct ev_loop *loop, double seconds)
{
	ev_timer stop;
	ev_timer_init(&stop, test_loop_stop, seconds, 0);
	ev_timer_start(loop, &stop);
	ev_run(loop, 0);
	ev_timer_stop(loop, &stop);
}

static void test_entry_add(struct schedule *s, struct test_entry *te, double hz, double cost_s)
{
	schedule_entry_init(&te->e, test_entry_fire, cost_s);
	te->s = s;
	cr_assert_eq(schedule_add(s, &te->e, 1.0 / hz), 0);
}

/* Every tick of the run was taken or counted as missed: the rate held (loosely). */
static void assert_rate(const struct test_entry *te, double hz, double seconds, const char *what)
{
	double ticks = (double)(te->e.fired + te->e.missed);
	cr_assert(ticks >= hz * seconds * 0.8 - 3 && ticks <= hz * seconds * 1.1 + 2,
	          "%s: %.0f ticks (%llu taken, %llu missed) in %.2f s at %.0f Hz", what, ticks,
	          (unsigned long long)te->e.fired, (unsigned long long)te->e.missed, seconds, hz);
}

Test(schedule, ticks_due_together_share_a_wakeup, .timeout = 60)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct schedule s;
	cr_assert_eq(schedule_init(&s, loop), 0);
	struct test_entry fast[4] = {0}, slow[2] = {0};
	for (int i = 0; i < 4; i++)
		test_entry_add(&s, &fast[i], 100, 1e-5);
	for (int i = 0; i < 2; i++)
		test_entry_add(&s, &slow[i], 50, 1e-5);
	/* Cheap ticks fit one slot: every entry of a rate takes the same phase. */
	for (int i = 1; i < 4; i++)
		cr_assert_eq(fast[i].e.phase, fast[0].e.phase);
	cr_assert_eq(slow[1].e.phase, slow[0].e.phase);

	double start = clock_mono_s();
	test_run_loop(loop, 1.0);
	double seconds = clock_mono_s() - start;

	uint64_t fired = 0;
	for (int i = 0; i < 4; i++) {
		assert_rate(&fast[i], 100, seconds, "a 100 Hz entry");
		fired += fast[i].e.fired;
	}
	for (int i = 0; i < 2; i++) {
		assert_rate(&slow[i], 50, seconds, "a 50 Hz entry");
		fired += slow[i].e.fired;
	}
	cr_assert_eq(s.ticks, fired);
	/*
	 * A timer each would wake once per tick (about 500 wakeups); shared,
	 * the 50 Hz ticks fall on every other 100 Hz wakeup: about 100, five
	 * ticks each.  A loop that falls behind only shares more.
	 */
	cr_assert_gt(s.wakeups, 0);
	cr_assert_geq(s.ticks, 3 * s.wakeups, "%llu ticks in %llu wakeups: not shared",
	              (unsigned long long)s.ticks, (unsigned long long)s.wakeups);
	double p50, p99;
	schedule_lateness(&s, &p50, &p99);
	cr_assert(p99 >= p50 && p50 >= 0, "lateness is measured");
	schedule_free(&s);
	ev_loop_destroy(loop);
}

Test(schedule, a_stalled_tick_skips_the_ticks_it_missed, .timeout = 60)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct schedule s;
	cr_assert_eq(schedule_init(&s, loop), 0);
	/* The slow one holds the loop for 55 ms in its third tick, the fast one waits. */
	struct test_entry fast = {0}, slow = {.stall_s = 0.055};
	test_entry_add(&s, &fast, 100, 1e-5);
	test_entry_add(&s, &slow, 20, 1e-5);
	double start = clock_mono_s();
	test_run_loop(loop, 0.6);
	double seconds = clock_mono_s() - start;
	/* 55 ms at 100 Hz passes at least 4 ticks: skipped and counted, not run in a burst after. */
	cr_assert_geq(fast.e.missed, 4, "%llu missed", (unsigned long long)fast.e.missed);
	cr_assert_eq(s.missed, fast.e.missed + slow.e.missed);
	assert_rate(&fast, 100, seconds, "the entry held up");
	assert_rate(&slow, 20, seconds, "the entry that stalled");
	/* A sample is late from the latest tick passed: never by a whole interval, whatever the stall. */
	double p50, p99;
	schedule_lateness(&s, &p50, &p99);
	cr_assert_lt(p99, 1e6 / 100, "lateness p99 %.0f us: counted from a tick that was skipped", p99);
	schedule_free(&s);
	ev_loop_destroy(loop);
}

Test(schedule, a_removed_entry_ticks_no_more, .timeout = 60)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct schedule s;
	cr_assert_eq(schedule_init(&s, loop), 0);
	struct test_entry a = {0}, b = {0}, c = {0};
	test_entry_add(&s, &a, 100, 1e-5);
	test_entry_add(&s, &b, 100, 1e-5);
	test_entry_add(&s, &c, 100, 1e-5);
	/* Due in the same wakeup: whichever comes first, the other two go without another tick. */
	a.remove_on_fire = &b;
	b.remove_on_fire = &c;
	c.remove_on_fire = &a;
	test_run_loop(loop, 0.3);
	unsigned ticking = (a.e.at != SCHEDULE_OFF) + (b.e.at != SCHEDULE_OFF) + (c.e.at != SCHEDULE_OFF);
	cr_assert_eq(ticking, 1, "one entry left on the schedule, not %u", ticking);
	cr_assert_eq(s.n, 1);
	uint64_t once = (a.e.fired == 1) + (b.e.fired == 1) + (c.e.fired == 1);
	cr_assert_geq(once, 1, "a removed entry ticked again");
	uint64_t never = (a.e.fired == 0) + (b.e.fired == 0) + (c.e.fired == 0);
	cr_assert_eq(once + never, 2, "the two removed: one tick at most, none after removal");
	schedule_remove(&s, &a.e);
	schedule_remove(&s, &b.e);
	schedule_remove(&s, &c.e);
	cr_assert_eq(s.n, 0);
	schedule_free(&s);
	ev_loop_destroy(loop);
}

Test(schedule, a_slot_holds_what_its_budget_allows)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct schedule s;
	cr_assert_eq(schedule_init(&s, loop), 0);
	/* Each over half the budget: one a slot. */
	struct test_entry big[4] = {0};
	for (int i = 0; i < 4; i++)
		test_entry_add(&s, &big[i], 100, SCHEDULE_SLOT_BUDGET_S * 0.6);
	for (int i = 0; i < 4; i++)
		for (int k = 0; k < i; k++)
			cr_assert_neq(big[i].e.phase, big[k].e.phase, "two costly entries share a slot");
	/* Cheap ones fill the first slot with room. */
	struct test_entry small[3] = {0};
	for (int i = 0; i < 3; i++)
		test_entry_add(&s, &small[i], 100, SCHEDULE_SLOT_BUDGET_S * 0.1);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(small[i].e.phase, big[0].e.phase);
	schedule_free(&s);
	ev_loop_destroy(loop);
}

Test(schedule, entries_spread_by_their_first_cost_gather_once_cheap, .timeout = 60)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct schedule s;
	cr_assert_eq(schedule_init(&s, loop), 0);
	/* A target's first samples decode everything: placed apart at first. */
	struct test_entry te[4] = {0};
	for (int i = 0; i < 4; i++)
		test_entry_add(&s, &te[i], 100, SCHEDULE_SLOT_BUDGET_S * 0.9);
	cr_assert_neq(te[1].e.phase, te[0].e.phase);
	/* Their ticks cost next to nothing: the balance brings them into one slot. */
	test_run_loop(loop, 2.5);
	for (int i = 1; i < 4; i++)
		cr_assert_eq(te[i].e.phase, te[0].e.phase, "entry %d stayed in its own slot", i);
	cr_assert_geq(s.moves, 3);
	schedule_free(&s);
	ev_loop_destroy(loop);
}
