/*
 * What sampling may cost, and the rates that keep it there.
 *
 * Two budgets, one mechanism.  The daemon's own CPU ([limits] cpu_percent,
 * measured with getrusage) covers the targets the rules attached: while it
 * is over, their rates are lowered, never below min_rate_hz.  Each user's
 * share ([limits] uid_cpu_percent) covers that user's targets, however they
 * were attached: the time spent sampling them (target_sample counts it) is
 * charged to their real uid (even when the process made itself root's alone
 * to read), and while a uid other than root takes more than its
 * share, its targets' rates are lowered, down to 1 Hz, so that one user's
 * hostile process cannot take the daemon from everyone else.
 *
 * A gauge turns a measured share of a core into a factor on the asked
 * rates: down at once by as much as the measure says (to a quarter at most
 * per step), up by a fifth a step once under 90 % of the budget, so the
 * rates do not swing about it, and by up to double while far under (the
 * hostile process has gone: its user's other targets come back within
 * seconds).  A target samples at its asked rate times the smallest factor
 * that covers it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"

/* Users followed at most: past them a new user is not budgeted (said once). */
#define BUDGET_USERS_MAX 4096
/* A step lowers a factor to no less than this share of what it was. */
#define BUDGET_STEP_DOWN_MAX 0.25
/* Up by at most this much a step, once under BUDGET_UP_BELOW of the budget; by FAR below FAR_BELOW. */
#define BUDGET_STEP_UP_MAX 1.2
#define BUDGET_STEP_UP_FAR 2.0
#define BUDGET_UP_BELOW 0.9
#define BUDGET_FAR_BELOW 0.25
#define BUDGET_FACTOR_MIN 1e-4

void budget_init(struct budget *b, struct server *s)
{
	memset(b, 0, sizeof *b);
	b->server = s;
	b->daemon.factor = 1.0;
	b->cpu_seconds_then = usage_cpu_seconds();
	b->wall_then = ev_time();
}

void budget_free(struct budget *b)
{
	free(b->users);
	b->users = NULL;
	b->nusers = b->users_cap = 0;
}

/* One measure of a share of a core into the gauge; whether its factor moved. */
static bool budget_gauge_steer(struct budget_gauge *g, double percent, double budget)
{
	double before = g->factor;
	g->recent = g->recent > 0 ? 0.5 * g->recent + 0.5 * percent : percent;
	if (budget <= 0)
		g->factor = 1.0;
	else if (g->recent > budget)
		g->factor *= fmax(budget / g->recent, BUDGET_STEP_DOWN_MAX);
	else if (g->recent < BUDGET_UP_BELOW * budget && g->factor < 1.0)
		g->factor = fmin(1.0, g->factor * fmin(BUDGET_UP_BELOW * budget / fmax(g->recent, 1e-3),
		                                       g->recent < BUDGET_FAR_BELOW * budget ? BUDGET_STEP_UP_FAR
		                                                                             : BUDGET_STEP_UP_MAX));
	g->factor = fmax(g->factor, BUDGET_FACTOR_MIN);
	g->over = g->factor < 1.0;
	return g->factor != before;
}

static struct budget_user *budget_user_find(const struct budget *b, uid_t uid)
{
	for (size_t i = 0; i < b->nusers; i++)
		if (b->users[i].uid == uid)
			return &b->users[i];
	return NULL;
}

static struct budget_user *budget_user_get(struct budget *b, uid_t uid)
{
	struct budget_user *u = budget_user_find(b, uid);
	if (u)
		return u;
	if (b->nusers == BUDGET_USERS_MAX ||
	    array_reserve((void **)&b->users, &b->users_cap, b->nusers, sizeof *b->users, NULL) != 0) {
		if (!b->users_warned)
			log_warn("budget: cannot follow the CPU of uid %d (%zu users followed already)", (int)uid,
			         b->nusers);
		b->users_warned = true;
		return NULL;
	}
	u = &b->users[b->nusers++];
	*u = (struct budget_user){.uid = uid, .gauge = {.factor = 1.0}};
	return u;
}

void budget_apply(struct budget *b, struct target *t)
{
	if (t->state != TARGET_SAMPLING)
		return;
	const struct config *c = &b->server->config;
	unsigned asked = t->params.rate_hz, floor_hz = 1;
	double factor = 1.0;
	const char *by = NULL;
	if (t->rule && b->daemon.factor < 1.0 && asked > c->min_rate_hz) {
		factor = b->daemon.factor;
		floor_hz = c->min_rate_hz;
		by = "cpu_percent";
	}
	const struct budget_user *u = t->charged_uid != 0 ? budget_user_find(b, t->charged_uid) : NULL;
	if (u && u->gauge.factor < factor) {
		factor = u->gauge.factor;
		floor_hz = 1;
		by = "uid_cpu_percent";
	}
	double hz = fmax(round(asked * factor), floor_hz);
	unsigned rate = hz < asked ? (unsigned)hz : asked;
	t->rate_lowered_by = rate < asked ? by : NULL;
	/* Small moves are not worth a new schedule; back to the asked rate always is. */
	if (rate == asked || fabs((double)rate - t->effective_rate_hz) >= 0.05 * t->effective_rate_hz)
		target_set_rate(t, rate);
}

void budget_tick(struct budget *b)
{
	struct server *s = b->server;
	double cpu = usage_cpu_seconds(), wall = ev_time();
	double dt = wall - b->wall_then;
	if (dt < 0.5)
		return;
	double percent = 100.0 * (cpu - b->cpu_seconds_then) / dt;
	b->cpu_seconds_then = cpu;
	b->wall_then = wall;
	bool was_over = b->daemon.over;
	bool moved = budget_gauge_steer(&b->daemon, percent, s->config.cpu_percent);
	if (b->daemon.over != was_over)
		log_info(b->daemon.over ? "over the CPU budget (%.1f%% of %.1f%%): lowering the rates of "
		                          "rule-attached targets"
		                        : "within the CPU budget (%.1f%% of %.1f%%): rule-attached targets at "
		                          "their rates",
		         b->daemon.recent, s->config.cpu_percent);

	/* What each user's targets cost since the last tick. */
	for (size_t i = 0; i < b->nusers; i++)
		b->users[i].spent_s = 0;
	for (size_t i = 0; i < s->targets.n; i++) {
		struct target *t = s->targets.v[i];
		struct budget_user *u =
			t->charged_uid != 0 && t->sample_seconds > 0 ? budget_user_get(b, t->charged_uid) : NULL;
		if (u)
			u->spent_s += t->sample_seconds;
		t->sample_seconds = 0;
	}
	for (size_t i = 0; i < b->nusers;) {
		struct budget_user *u = &b->users[i];
		was_over = u->gauge.over;
		moved |= budget_gauge_steer(&u->gauge, 100.0 * u->spent_s / dt, s->config.uid_cpu_percent);
		if (u->gauge.over != was_over)
			log_info(u->gauge.over ? "uid %d: its targets take %.1f%% of a core to sample, over its "
			                         "share of %.1f%%: lowering their rates"
			                       : "uid %d: within its share (%.1f%% of %.1f%%): its targets at "
			                         "their rates",
			         (int)u->uid, u->gauge.recent, s->config.uid_cpu_percent);
		/* A user who costs nothing any more is forgotten. */
		if (!u->gauge.over && u->gauge.recent < 0.01)
			b->users[i] = b->users[--b->nusers];
		else
			i++;
	}
	if (moved)
		for (size_t i = 0; i < s->targets.n; i++)
			budget_apply(b, s->targets.v[i]);
}

void budget_configure(struct budget *b)
{
	struct server *s = b->server;
	for (size_t i = 0; i < s->targets.n; i++) {
		target_set_max_sample(s->targets.v[i], s->config.max_sample_ns);
		budget_apply(b, s->targets.v[i]);
	}
}

void budget_status(const struct budget *b, uid_t peer, Pyprofd__StatusResult *out, struct arena *a)
{
	const struct config *c = &b->server->config;
	out->cpu_budget_percent = c->cpu_percent;
	out->cpu_recent_percent = b->daemon.recent;
	out->budget_factor = b->daemon.factor;
	out->over_budget = b->daemon.over;
	out->uid_cpu_budget_percent = c->uid_cpu_percent;
	/* Root sees every user; another user itself alone. */
	size_t n = 0;
	for (size_t i = 0; i < b->nusers; i++)
		n += peer == 0 || b->users[i].uid == peer;
	if (!n || !(out->user_budgets = arena_alloc(a, n * sizeof *out->user_budgets)))
		return;
	for (size_t i = 0; i < b->nusers; i++) {
		const struct budget_user *u = &b->users[i];
		if (peer != 0 && u->uid != peer)
			continue;
		Pyprofd__UserBudget *ub = ARENA_MESSAGE(a, Pyprofd__UserBudget, PYPROFD__USER_BUDGET__INIT);
		if (!ub)
			return;
		ub->uid = u->uid;
		ub->recent_percent = u->gauge.recent;
		ub->factor = u->gauge.factor;
		ub->over = u->gauge.over;
		out->user_budgets[out->n_user_budgets++] = ub;
	}
}
