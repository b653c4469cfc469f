/*
 * The sampling schedule: every target's ticks, on one timer.
 *
 * A timer per target woke the daemon once per tick of every target: ten
 * targets at 100 Hz were a thousand wakeups a second, each an epoll_wait
 * and a read of a timerfd around a sample of tens of microseconds, and the
 * wakeups cost the daemon about as much as the reads of the targets did.
 * Here ticks due at the same moment share one wakeup:
 *
 *  - Every tick of an entry lies on a grid common to all entries of its
 *    interval: origin + phase + k * interval, k counting up from the
 *    schedule's origin.  Entries at one rate therefore fall due at exactly
 *    the same moments, whenever each was started, and one wakeup samples
 *    them back to back.
 *
 *  - Lateness is bounded by a slot's budget.  A phase is one of the slots
 *    (SCHEDULE_SLOT_S wide) the interval divides into; an entry takes the
 *    first slot whose entries' recent cost per tick, with its own, stays
 *    within SCHEDULE_SLOT_BUDGET_S, so the last sample of a wakeup starts at
 *    most about that late (and the slot is shared as far as the budget
 *    allows).  Costs change (a target's first samples decode everything,
 *    a stack deepens), so once a second the entries are placed again: into
 *    an earlier slot that now has room, or out of one now over its budget.
 *    Within a wakeup the order turns by one each time, so no target is
 *    always the last one.
 *
 *  - Never bunched: a tick the loop could not reach before the next one of
 *    the same entry was due is skipped and counted (missed), not run late
 *    in a burst: a wakeup whole intervals late samples for the latest tick
 *    passed, and its lateness is counted from that one, so lateness stays
 *    under an interval and what lies beyond shows as missed ticks.  The
 *    grid is kept, so the rate over a while stays the one asked.
 *
 *  - One timerfd, armed at the earliest due tick (absolute): epoll waits in
 *    whole milliseconds, the kernel's high-resolution timer does not.
 *    Arming it clears its count of expirations, so a wakeup costs the wait
 *    and one timerfd_settime, and never a read.
 *
 * The entries sit in a binary min-heap by due time; a wakeup takes every
 * entry due by then (and those due within SCHEDULE_EARLY_S after, which
 * would otherwise cost a wakeup of their own microseconds later).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "array.h"
#include "clock.h"
#include "log.h"
#include "schedule.h"

static bool schedule_before(const struct schedule_entry *a, const struct schedule_entry *b)
{
	return a->due < b->due;
}

static void schedule_place(struct schedule *s, size_t i, struct schedule_entry *e)
{
	s->heap[i] = e;
	e->at = i;
}

static void schedule_sift_up(struct schedule *s, size_t i)
{
	struct schedule_entry *e = s->heap[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!schedule_before(e, s->heap[parent]))
			break;
		schedule_place(s, i, s->heap[parent]);
		i = parent;
	}
	schedule_place(s, i, e);
}

static void schedule_sift_down(struct schedule *s, size_t i)
{
	struct schedule_entry *e = s->heap[i];
	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= s->n)
			break;
		if (child + 1 < s->n && schedule_before(s->heap[child + 1], s->heap[child]))
			child++;
		if (!schedule_before(s->heap[child], e))
			break;
		schedule_place(s, i, s->heap[child]);
		i = child;
	}
	schedule_place(s, i, e);
}

static void schedule_heap_remove(struct schedule *s, struct schedule_entry *e)
{
	size_t i = e->at;
	struct schedule_entry *last = s->heap[--s->n];
	e->at = SCHEDULE_OFF;
	if (last == e)
		return;
	schedule_place(s, i, last);
	schedule_sift_down(s, i);
	schedule_sift_up(s, last->at);
}

/* The timer at the earliest due tick, or off when nothing is scheduled. */
static void schedule_arm(struct schedule *s)
{
	struct itimerspec spec = {0};
	if (s->n) {
		double due = s->heap[0]->due;
		/* 0 would disarm it: a tick due at once fires a nanosecond from now. */
		if (due <= 0)
			due = 1e-9;
		spec.it_value.tv_sec = (time_t)due;
		spec.it_value.tv_nsec = (long)((due - (double)spec.it_value.tv_sec) * 1e9);
		if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0)
			spec.it_value.tv_nsec = 1;
	}
	if (timerfd_settime(s->fd, TFD_TIMER_ABSTIME, &spec, NULL) != 0)
		log_error("schedule: timerfd_settime: %s", strerror(errno));
}

/* The entry's tick k on its grid. */
static double schedule_tick_time(const struct schedule *s, const struct schedule_entry *e, uint64_t k)
{
	return s->origin + e->phase + (double)k * e->interval;
}

/* The first tick of the entry's grid at or after `when`. */
static uint64_t schedule_tick_after(const struct schedule *s, const struct schedule_entry *e,
                                    double when)
{
	double k = ceil((when - s->origin - e->phase) / e->interval);
	return k > 0 ? (uint64_t)k : 0;
}

/*
 * The phase that shares a wakeup with as many entries of the same interval
 * as the slot budget allows: the first slot whose cost per tick, with this
 * entry's, stays within it; the least loaded one when none does.
 */
static double schedule_pick_phase(const struct schedule *s, const struct schedule_entry *e)
{
	size_t nslots = (size_t)(e->interval / SCHEDULE_SLOT_S);
	if (nslots <= 1)
		return 0;
	if (nslots > SCHEDULE_SLOTS_MAX)
		nslots = SCHEDULE_SLOTS_MAX;
	double load[SCHEDULE_SLOTS_MAX] = {0};
	/* Entries of the same interval only: others meet these slots now and then, not every tick. */
	for (size_t i = 0; i < s->n; i++) {
		const struct schedule_entry *o = s->heap[i];
		if (o != e && o->interval == e->interval) {
			size_t slot = (size_t)(o->phase / SCHEDULE_SLOT_S + 0.5);
			if (slot < nslots)
				load[slot] += o->cost_s;
		}
	}
	size_t best = 0;
	for (size_t slot = 0; slot < nslots; slot++) {
		if (load[slot] + e->cost_s <= SCHEDULE_SLOT_BUDGET_S)
			return (double)slot * SCHEDULE_SLOT_S;
		if (load[slot] < load[best])
			best = slot;
	}
	return (double)best * SCHEDULE_SLOT_S;
}

static void schedule_on_timer(struct ev_loop *loop, ev_io *w, int revents);

int schedule_init(struct schedule *s, struct ev_loop *loop)
{
	memset(s, 0, sizeof *s);
	s->loop = loop;
	s->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (s->fd < 0)
		return -1;
	s->lateness_us = calloc(1, sizeof *s->lateness_us);
	if (!s->lateness_us) {
		close(s->fd);
		s->fd = -1;
		errno = ENOMEM;
		return -1;
	}
	/* A whole second: the grid of every rate that divides a second starts on a second. */
	s->origin = floor(clock_mono_s());
	ev_io_init(&s->watcher, schedule_on_timer, s->fd, EV_READ);
	s->watcher.data = s;
	ev_io_start(loop, &s->watcher);
	return 0;
}

void schedule_free(struct schedule *s)
{
	if (s->fd >= 0) {
		ev_io_stop(s->loop, &s->watcher);
		close(s->fd);
	}
	for (size_t i = 0; i < s->n; i++)
		s->heap[i]->at = SCHEDULE_OFF;
	free(s->heap);
	free(s->batch);
	free(s->lateness_us);
	memset(s, 0, sizeof *s);
	s->fd = -1;
}

void schedule_entry_init(struct schedule_entry *e,
                         void (*fire)(struct schedule_entry *, double, double), double default_cost_s)
{
	memset(e, 0, sizeof *e);
	e->at = SCHEDULE_OFF;
	e->fire = fire;
	e->cost_s = default_cost_s;
}

int schedule_add(struct schedule *s, struct schedule_entry *e, double interval)
{
	if (e->at != SCHEDULE_OFF)
		schedule_remove(s, e);
	if (!(interval > 0))
		return -1;
	if (array_reserve((void **)&s->heap, &s->cap, s->n, sizeof *s->heap, NULL) != 0)
		return -1;
	e->interval = interval;
	e->phase = schedule_pick_phase(s, e);
	/* The first tick is the grid's next one: never sooner than a tick from now. */
	e->tick = schedule_tick_after(s, e, clock_mono_s() + interval);
	e->due = schedule_tick_time(s, e, e->tick);
	e->at = s->n++;
	s->heap[e->at] = e;
	schedule_sift_up(s, e->at);
	if (s->heap[0] == e && !s->running)
		schedule_arm(s);
	return 0;
}

void schedule_remove(struct schedule *s, struct schedule_entry *e)
{
	if (e->at == SCHEDULE_OFF)
		return;
	if (e->at == SCHEDULE_FIRING) {
		/* In the wakeup under way: it is not put back. */
		for (size_t i = 0; i < s->nbatch; i++)
			if (s->batch[i] == e)
				s->batch[i] = NULL;
		e->at = SCHEDULE_OFF;
		return;
	}
	bool was_first = e->at == 0;
	schedule_heap_remove(s, e);
	if (was_first && !s->running)
		schedule_arm(s);
}

/*
 * Missed ticks of an entry past its first ones count against the grid: a
 * target's first samples decode its code and read its files, and a process
 * that exits may leave a tick or two; neither is the daemon falling behind.
 */
static void schedule_count_missed(struct schedule *s, const struct schedule_entry *e, uint64_t n)
{
	if (e->fired >= SCHEDULE_WARM_TICKS)
		s->keep.warm_missed += n;
}

/* After its tick: the entry's next one on its grid, skipping (and counting) those already past. */
static void schedule_next(struct schedule *s, struct schedule_entry *e, double now)
{
	uint64_t next = e->tick + 1;
	if (schedule_tick_time(s, e, next) <= now) {
		uint64_t caught = schedule_tick_after(s, e, now);
		if (caught <= next)
			caught = next + 1;
		e->missed += caught - next;
		s->missed += caught - next;
		schedule_count_missed(s, e, caught - next);
		next = caught;
	}
	e->tick = next;
	e->due = schedule_tick_time(s, e, next);
	if (array_reserve((void **)&s->heap, &s->cap, s->n, sizeof *s->heap, NULL) != 0) {
		e->at = SCHEDULE_OFF; /* cannot happen: its slot was freed when it was taken out */
		return;
	}
	e->at = s->n++;
	s->heap[e->at] = e;
	schedule_sift_up(s, e->at);
}

/* Moves e to the slot's phase: its next tick at least half an interval after its last. */
static void schedule_move(struct schedule *s, struct schedule_entry *e, size_t slot, double now)
{
	double last = e->due - e->interval;
	schedule_heap_remove(s, e);
	e->phase = (double)slot * SCHEDULE_SLOT_S;
	double from = last + e->interval / 2;
	e->tick = schedule_tick_after(s, e, from > now ? from : now);
	e->due = schedule_tick_time(s, e, e->tick);
	/* Its room in the heap was just given back. */
	e->at = s->n++;
	s->heap[e->at] = e;
	schedule_sift_up(s, e->at);
	s->moves++;
}

/*
 * Every entry of one interval into the first slot with room for it, if
 * that is earlier than its own or its own is over the budget: wakeups are
 * shared as far as the budget allows, and no slot stays over it while
 * another has room.
 */
static void schedule_balance_interval(struct schedule *s, double interval, double now)
{
	size_t nslots = (size_t)(interval / SCHEDULE_SLOT_S);
	if (nslots <= 1)
		return;
	if (nslots > SCHEDULE_SLOTS_MAX)
		nslots = SCHEDULE_SLOTS_MAX;
	double load[SCHEDULE_SLOTS_MAX] = {0};
	for (size_t i = 0; i < s->n; i++) {
		const struct schedule_entry *e = s->heap[i];
		size_t slot = (size_t)(e->phase / SCHEDULE_SLOT_S + 0.5);
		if (e->interval == interval && slot < nslots)
			load[slot] += e->cost_s;
	}
	/* Moving reorders the heap: the entries to look at are taken first. */
	struct schedule_entry **mine = s->batch;
	size_t n = 0;
	for (size_t i = 0; i < s->n && n < s->batch_cap; i++)
		if (s->heap[i]->interval == interval)
			mine[n++] = s->heap[i];
	for (size_t i = 0; i < n; i++) {
		struct schedule_entry *e = mine[i];
		size_t own = (size_t)(e->phase / SCHEDULE_SLOT_S + 0.5);
		if (own >= nslots)
			continue;
		bool over = load[own] > SCHEDULE_SLOT_BUDGET_S;
		for (size_t slot = 0; slot < nslots; slot++) {
			if (slot == own || (slot > own && !over))
				continue;
			if (load[slot] + e->cost_s <= SCHEDULE_SLOT_BUDGET_S) {
				load[own] -= e->cost_s;
				load[slot] += e->cost_s;
				schedule_move(s, e, slot, now);
				break;
			}
			if (slot > own && !over)
				break;
		}
	}
}

/* Place every entry again by the costs as they are now (once a second). */
static void schedule_balance(struct schedule *s, double now)
{
	if (array_reserve((void **)&s->batch, &s->batch_cap, s->n ? s->n - 1 : 0, sizeof *s->batch,
	                  NULL) != 0)
		return;
	/* A few distinct intervals at most in practice; each is balanced on its own. */
	double done[8];
	size_t ndone = 0;
	for (size_t i = 0; i < s->n && ndone < sizeof done / sizeof done[0]; i++) {
		double interval = s->heap[i]->interval;
		bool seen = false;
		for (size_t k = 0; k < ndone && !seen; k++)
			seen = done[k] == interval;
		if (seen)
			continue;
		done[ndone++] = interval;
		schedule_balance_interval(s, interval, now);
	}
}

static void schedule_on_timer(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	struct schedule *s = w->data;
	double now = clock_mono_s();
	/* Everything due, and what falls due so soon after that a wakeup of its own would cost more. */
	s->nbatch = 0;
	while (s->n && s->heap[0]->due <= now + SCHEDULE_EARLY_S) {
		struct schedule_entry *e = s->heap[0];
		/* Early by a quarter of its interval at most: a fast entry never runs ahead of its rate. */
		if (e->due > now + e->interval / 4)
			break;
		if (array_reserve((void **)&s->batch, &s->batch_cap, s->nbatch, sizeof *s->batch, NULL) != 0)
			break; /* the rest wait for the next wakeup */
		schedule_heap_remove(s, e);
		e->at = SCHEDULE_FIRING;
		s->batch[s->nbatch++] = e;
	}
	if (s->nbatch) {
		s->wakeups++;
		if (s->before_ticks)
			s->before_ticks(s->before_ctx);
	}
	s->running = true;
	size_t first = s->nbatch ? (size_t)(s->wakeups % s->nbatch) : 0;
	for (size_t i = 0; i < s->nbatch; i++) {
		struct schedule_entry *e = s->batch[(first + i) % s->nbatch];
		if (!e)
			continue; /* removed by an earlier entry's tick */
		/* Whole intervals behind: the ticks passed are skipped and counted, the latest one taken. */
		if (now - e->due >= e->interval) {
			uint64_t latest = schedule_tick_after(s, e, now);
			if (schedule_tick_time(s, e, latest) > now && latest > e->tick)
				latest--;
			if (latest > e->tick) {
				e->missed += latest - e->tick;
				s->missed += latest - e->tick;
				schedule_count_missed(s, e, latest - e->tick);
				e->tick = latest;
				e->due = schedule_tick_time(s, e, latest);
			}
		}
		double late = now - e->due;
		if (late < 0)
			late = 0;
		timing_add(s->lateness_us, late * 1e6);
		if (e->fired >= SCHEDULE_WARM_TICKS) {
			s->keep.warm_ticks++;
			s->keep.warm_late += late > SCHEDULE_BEHIND_LATE_S;
		}
		s->ticks++;
		e->fired++;
		e->fire(e, now, late);
		double after = clock_mono_s();
		/*
		 * The entry's cost per tick, smoothed: the slot budget weighs it
		 * (see schedule_pick_phase).  A tick the kernel preempted takes
		 * far longer than its work; clamped, one such outlier moves the
		 * estimate little, and a real change still shows within a second.
		 */
		double cost = after - now, cap = 4 * e->cost_s + 0.00001;
		e->cost_s += ((cost < cap ? cost : cap) - e->cost_s) / 16;
		now = after;
		if (e->at == SCHEDULE_FIRING) {
			schedule_next(s, e, now);
			s->batch[(first + i) % s->nbatch] = NULL;
		}
	}
	s->nbatch = 0;
	s->running = false;
	if (now - s->balanced >= SCHEDULE_BALANCE_S) {
		s->balanced = now;
		schedule_balance(s, now);
	}
	/* Arming clears the timer's count of expirations: no read needed. */
	schedule_arm(s);
}

void schedule_lateness(const struct schedule *s, double *p50_us, double *p99_us)
{
	*p50_us = s->lateness_us ? timing_percentile(s->lateness_us, 50) : 0;
	*p99_us = s->lateness_us ? timing_percentile(s->lateness_us, 99) : 0;
}

void schedule_judge(struct schedule *s, double now_unix)
{
	struct schedule_keep *k = &s->keep;
	k->ticks[k->at] = k->warm_ticks;
	k->missed[k->at] = k->warm_missed;
	k->late[k->at] = k->warm_late;
	size_t oldest = k->filled < SCHEDULE_KEEP_WINDOW ? 0 : (k->at + 1) % SCHEDULE_KEEP_WINDOW;
	size_t newest = k->at;
	k->at = (k->at + 1) % SCHEDULE_KEEP_WINDOW;
	if (k->filled < SCHEDULE_KEEP_WINDOW)
		k->filled++;
	uint64_t ticks = k->ticks[newest] - k->ticks[oldest], missed = k->missed[newest] - k->missed[oldest];
	uint64_t late = k->late[newest] - k->late[oldest];
	k->missed_share = ticks + missed ? (double)missed / (double)(ticks + missed) : 0;
	/* More than 1 % of the window's ticks late past the bound: its lateness p99 is past it. */
	double late_share = ticks ? (double)late / (double)ticks : 0;
	/* A few ticks in the window tell nothing of the grid. */
	bool enough = ticks + missed >= SCHEDULE_KEEP_MIN_TICKS;
	bool behind = enough && (k->missed_share > SCHEDULE_BEHIND_MISSED || late_share > 0.01);
	/* Back on the grid only well inside the bounds: near one, episodes would come and go each second. */
	if (k->behind && !behind)
		behind = enough && (k->missed_share > SCHEDULE_BEHIND_MISSED / 2 || late_share > 0.005);
	if (behind == k->behind)
		return;
	k->behind = behind;
	if (behind) {
		k->episodes++;
		k->since_unix = now_unix;
		k->missed_before = s->missed;
		log_warn("sampling falls behind its grid: %.0f %% of the ticks due in the last %d s were "
		         "missed, %.0f %% of those taken started over %.0f ms late; the daemon is short of "
		         "CPU (its unit's Nice=, [limits] cpu_percent, fewer targets or lower rates)",
		         k->missed_share * 100, SCHEDULE_KEEP_WINDOW, late_share * 100,
		         SCHEDULE_BEHIND_LATE_S * 1000);
	} else {
		log_info("sampling keeps its grid again, after %.0f s behind (%llu ticks missed meanwhile)",
		         now_unix - k->since_unix, (unsigned long long)(s->missed - k->missed_before));
	}
}
