/*
 * schedule — every target's ticks on one timer: ticks due at one moment
 * share a wakeup, each entry on a grid of its interval (schedule.c says
 * how entries are placed and what a slot may cost).
 */
#ifndef PYPROFD_SCHEDULE_H
#define PYPROFD_SCHEDULE_H

#include <ev.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "timing.h"

/* One thing sampled on the schedule (a target): its grid and what its ticks cost. */
struct schedule_entry {
	double interval; /* seconds between ticks */
	double phase;    /* its slot on the grid of its interval */
	uint64_t tick;   /* the next tick's index on that grid */
	double due;      /* CLOCK_MONOTONIC seconds of the next tick */
	double cost_s;   /* what one tick costs, smoothed: weighed against a slot's budget */
	size_t at;       /* index in the heap, or SCHEDULE_OFF / SCHEDULE_FIRING */
	uint64_t fired, missed; /* ticks run; ticks skipped because the loop was behind */
	/* The tick, started at now (CLOCK_MONOTONIC), late_s after it was due; may remove or re-add the entry. */
	void (*fire)(struct schedule_entry *e, double now, double late_s);
};
#define SCHEDULE_OFF ((size_t)-1)
#define SCHEDULE_FIRING ((size_t)-2)
/* Grid slots an interval divides into, each a possible phase. */
#define SCHEDULE_SLOT_S 0.001
#define SCHEDULE_SLOTS_MAX 1000
/* The sampling one wakeup of a slot may take: bounds the lateness of its last tick. */
#define SCHEDULE_SLOT_BUDGET_S 0.0008
/* How often entries are placed again by what their ticks cost now. */
#define SCHEDULE_BALANCE_S 1.0
/* A tick due this soon after a wakeup is taken with it. */
#define SCHEDULE_EARLY_S 0.0002
/*
 * Whether sampling keeps its grid, judged each second over the last
 * SCHEDULE_KEEP_WINDOW seconds: behind while more than SCHEDULE_BEHIND_MISSED
 * of the ticks due were missed, or more than 1 % of the ticks taken started
 * over SCHEDULE_BEHIND_LATE_S late (their p99 past it); back on it once both
 * shares are under half their bound.
 */
#define SCHEDULE_KEEP_WINDOW 10
#define SCHEDULE_BEHIND_MISSED 0.05
#define SCHEDULE_BEHIND_LATE_S 0.010
/* An entry's first ticks are left out of the judgment (see schedule_count_missed). */
#define SCHEDULE_WARM_TICKS 20
/* Ticks due in the window below which nothing is judged. */
#define SCHEDULE_KEEP_MIN_TICKS 50
struct schedule_keep {
	/* The schedule's counts, a second apart. */
	uint64_t ticks[SCHEDULE_KEEP_WINDOW], missed[SCHEDULE_KEEP_WINDOW], late[SCHEDULE_KEEP_WINDOW];
	size_t at, filled;
	bool behind;
	double since_unix;      /* when the episode under way (or the last) began; 0: none yet */
	uint64_t episodes;
	uint64_t missed_before; /* the schedule's missed ticks when the episode began */
	uint64_t warm_ticks, warm_missed, warm_late; /* of entries past their first ticks */
	double missed_share;    /* of the ticks due over the window */
};
/* Every entry's ticks on one timer: ticks due at one moment share a wakeup (see schedule.c). */
struct schedule {
	struct ev_loop *loop;
	int fd; /* timerfd, armed at the earliest due tick */
	ev_io watcher;
	double origin; /* CLOCK_MONOTONIC seconds every grid starts from */
	struct schedule_entry **heap; /* by due time */
	size_t n, cap;
	struct schedule_entry **batch; /* the wakeup under way */
	size_t nbatch, batch_cap;
	bool running;
	double balanced; /* when entries were last placed again */
	uint64_t moves;  /* entries placed in another slot by the balance */
	uint64_t wakeups; /* with at least one tick */
	uint64_t ticks, missed;
	struct timing *lateness_us; /* of every tick, all entries */
	struct schedule_keep keep;
	/* Called as a wakeup with ticks begins, before any of them (NULL: none). */
	void (*before_ticks)(void *ctx);
	void *before_ctx;
};
/* 0, or -1 with errno. */
int schedule_init(struct schedule *s, struct ev_loop *loop);
void schedule_free(struct schedule *s); /* its entries are left off */
void schedule_entry_init(struct schedule_entry *e,
                         void (*fire)(struct schedule_entry *, double, double), double default_cost_s);
/* Tick every interval seconds from the next tick of its grid on (again, when scheduled); 0 or -1. */
int schedule_add(struct schedule *s, struct schedule_entry *e, double interval);
/* No more ticks (nothing if it has none). */
void schedule_remove(struct schedule *s, struct schedule_entry *e);
/* Judge whether sampling keeps its grid (once a second); the log says when that changes. */
void schedule_judge(struct schedule *s, double now_unix);
/* Lateness of the last TIMING_KEEP ticks of every entry. */
void schedule_lateness(const struct schedule *s, double *p50_us, double *p99_us);

#endif
