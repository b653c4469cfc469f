/*
 * What the fleet says of its attaches.
 *
 * A pool of a hundred workers would fill the log, and the log's own limit
 * on repeats (log.c) would sum them up as "N more like this" with the last
 * line alone, which names no rule.  So the fleet limits its attach lines
 * itself, as the log does (FLEET_LOG_BURST a minute), and counts the rest
 * per rule: at the end of the minute, or when the daemon stops, one line
 * per rule says how many processes and children were attached unsaid.
 *
 * A walk of every process (at start, when the rules change) finds what
 * runs already; once all it found is judged, one line per rule says what
 * the rule has, so a restart that lost a pool shows in the log.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fleet_log.h"
#include "log.h"
#include "pyprofd.h"

#define FLEET_LOG_BURST 5
#define FLEET_LOG_WINDOW_S 60.0
/* Rules counted at once; attaches under more are counted together. */
#define FLEET_LOG_RULES_MAX 256

/* What one rule attached (or has), processes it matched and their children. */
struct fleet_log_count {
	char *rule;
	bool children; /* the rule follows children (walk counts only) */
	uint64_t processes, kids;
};

struct fleet_log_counts {
	struct fleet_log_count *v;
	size_t n;
	uint64_t elsewhere; /* under rules past FLEET_LOG_RULES_MAX, or out of memory */
};

struct fleet_log {
	double window_start; /* CLOCK_MONOTONIC seconds */
	unsigned written;    /* attach lines written in the window */
	struct fleet_log_counts held;
	bool walking;
	const char *walk_when;
	struct fleet_log_counts walk;
};

static void fleet_log_counts_clear(struct fleet_log_counts *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].rule);
	free(c->v);
	*c = (struct fleet_log_counts){0};
}

/* The count of rule, found or made; NULL past the bound or out of memory. */
static struct fleet_log_count *fleet_log_count_of(struct fleet_log_counts *c, const char *rule)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->v[i].rule, rule) == 0)
			return &c->v[i];
	if (c->n == FLEET_LOG_RULES_MAX)
		return NULL;
	struct fleet_log_count *grown = realloc(c->v, (c->n + 1) * sizeof *c->v);
	if (!grown)
		return NULL;
	c->v = grown;
	char *name = strdup(rule);
	if (!name)
		return NULL;
	c->v[c->n] = (struct fleet_log_count){.rule = name};
	return &c->v[c->n++];
}

static void fleet_log_count_add(struct fleet_log_counts *c, const char *rule, bool child)
{
	struct fleet_log_count *n = fleet_log_count_of(c, rule);
	if (!n)
		c->elsewhere++;
	else if (child)
		n->kids++;
	else
		n->processes++;
}

/* "1 process", "6 children", with more when asked ("37 more children"). */
static const char *fleet_log_amount(char *buf, size_t len, uint64_t n, const char *more, bool child)
{
	snprintf(buf, len, "%llu %s%s", (unsigned long long)n, more,
	         child ? (n == 1 ? "child" : "children") : (n == 1 ? "process" : "processes"));
	return buf;
}

/* The attaches held back this window, a line per rule; the next window begins. */
static void fleet_log_window_close(struct fleet_log *l, double now)
{
	for (size_t i = 0; i < l->held.n; i++) {
		const struct fleet_log_count *c = &l->held.v[i];
		char a[48], b[48];
		if (c->processes && c->kids)
			log_always(LOG_LEVEL_INFO, "rule %s: %s and %s attached (not logged one by one)", c->rule,
			           fleet_log_amount(a, sizeof a, c->processes, "more ", false),
			           fleet_log_amount(b, sizeof b, c->kids, "more ", true));
		else if (c->processes || c->kids)
			log_always(LOG_LEVEL_INFO, "rule %s: %s attached (not logged one by one)", c->rule,
			           fleet_log_amount(a, sizeof a, c->processes ? c->processes : c->kids, "more ",
			                            !c->processes));
	}
	if (l->held.elsewhere)
		log_always(LOG_LEVEL_INFO, "%llu more processes attached under other rules (not logged one by one)",
		           (unsigned long long)l->held.elsewhere);
	fleet_log_counts_clear(&l->held);
	l->window_start = now;
	l->written = 0;
}

struct fleet_log *fleet_log_new(void)
{
	struct fleet_log *l = calloc(1, sizeof *l);
	if (l)
		l->window_start = clock_mono_s();
	return l;
}

void fleet_log_free(struct fleet_log *l)
{
	if (!l)
		return;
	fleet_log_window_close(l, clock_mono_s());
	fleet_log_counts_clear(&l->walk);
	free(l);
}

void fleet_log_attach(struct fleet_log *l, const char *rule, bool child, const char *fmt, ...)
{
	double now = clock_mono_s();
	if (now - l->window_start >= FLEET_LOG_WINDOW_S)
		fleet_log_window_close(l, now);
	if (l->written < FLEET_LOG_BURST) {
		l->written++;
		char line[1024];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(line, sizeof line, fmt, ap);
		va_end(ap);
		log_always(LOG_LEVEL_INFO, "%s", line);
		return;
	}
	fleet_log_count_add(&l->held, rule, child);
}

void fleet_log_tick(struct fleet_log *l)
{
	double now = clock_mono_s();
	if (now - l->window_start >= FLEET_LOG_WINDOW_S)
		fleet_log_window_close(l, now);
}

void fleet_log_walk_begin(struct fleet_log *l, const struct rules *rules, const char *when)
{
	fleet_log_counts_clear(&l->walk);
	l->walking = true;
	l->walk_when = when;
	/* Every rule that attaches has its line, one that found nothing too. */
	for (size_t i = 0; i < rules->n; i++) {
		if (rules->v[i].exclude)
			continue;
		struct fleet_log_count *c = fleet_log_count_of(&l->walk, rules->v[i].name);
		if (c)
			c->children = rules->v[i].children;
	}
}

void fleet_log_walk_found(struct fleet_log *l, const char *rule, bool child)
{
	if (l->walking && rule && *rule)
		fleet_log_count_add(&l->walk, rule, child);
}

void fleet_log_walk_end(struct fleet_log *l)
{
	if (!l->walking)
		return;
	l->walking = false;
	for (size_t i = 0; i < l->walk.n; i++) {
		const struct fleet_log_count *c = &l->walk.v[i];
		char a[48], b[48];
		if (!c->processes && !c->kids)
			log_always(LOG_LEVEL_INFO, "rule %s: found no process %s", c->rule, l->walk_when);
		else if (c->children || c->kids)
			log_always(LOG_LEVEL_INFO, "rule %s: found %s and %s %s", c->rule,
			           fleet_log_amount(a, sizeof a, c->processes, "", false),
			           fleet_log_amount(b, sizeof b, c->kids, "", true), l->walk_when);
		else
			log_always(LOG_LEVEL_INFO, "rule %s: found %s %s", c->rule,
			           fleet_log_amount(a, sizeof a, c->processes, "", false), l->walk_when);
	}
	fleet_log_counts_clear(&l->walk);
}

bool fleet_log_walking(const struct fleet_log *l)
{
	return l->walking;
}
