/*
 * fleet_log — what the fleet says of its attaches: a line each while they
 * are few, counts per rule past that, and a line per rule once a walk of
 * every process (at start, after the rules changed) has been judged.
 */
#ifndef PYPROFD_FLEET_LOG_H
#define PYPROFD_FLEET_LOG_H

#include <stdbool.h>

struct rules;
struct fleet_log;

struct fleet_log *fleet_log_new(void);
/* Says what it still holds, then frees it. */
void fleet_log_free(struct fleet_log *l);
/*
 * One attach under rule (child: as a child of what it attached): its line
 * while few were written this minute, else counted under the rule.
 */
void fleet_log_attach(struct fleet_log *l, const char *rule, bool child, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Once a second: the counts of a minute that is over, a line per rule. */
void fleet_log_tick(struct fleet_log *l);

/* A walk of every process begins: what each rule has once it is judged is counted (when: "at start"). */
void fleet_log_walk_begin(struct fleet_log *l, const struct rules *rules, const char *when);
/* A process the walk found under rule, attached now or already. */
void fleet_log_walk_found(struct fleet_log *l, const char *rule, bool child);
/* Every process of the walk judged: a line per rule.  Nothing when no walk is counted. */
void fleet_log_walk_end(struct fleet_log *l);
bool fleet_log_walking(const struct fleet_log *l);

#endif
