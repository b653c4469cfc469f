/*
 * What the fleet says of its attaches (daemon/fleet_log.c): a line each
 * while few, the rest counted per rule and said when the minute is over or
 * the daemon stops, and what each rule found by the walk at start.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet_log.h"
#include "log.h"
#include "pyprofd.h"

/* stderr into a file of its own while a test writes the log. */
struct captured {
	FILE *file;
	int saved;
};

static void capture_begin(struct captured *c)
{
	fflush(stderr);
	c->file = tmpfile();
	cr_assert_not_null(c->file);
	c->saved = dup(STDERR_FILENO);
	cr_assert(c->saved >= 0 && dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

/* What was written meanwhile (the caller's to free). */
static char *capture_end(struct captured *c)
{
	fflush(stderr);
	dup2(c->saved, STDERR_FILENO);
	close(c->saved);
	long len = ftell(c->file);
	cr_assert_geq(len, 0);
	char *text = calloc(1, (size_t)len + 1);
	cr_assert_not_null(text);
	rewind(c->file);
	cr_assert_eq(fread(text, 1, (size_t)len, c->file), (size_t)len);
	fclose(c->file);
	return text;
}

static size_t occurrences(const char *text, const char *words)
{
	size_t n = 0;
	for (const char *at = text; (at = strstr(at, words)) != NULL; at += strlen(words))
		n++;
	return n;
}

Test(fleet_log, past_five_a_minute_attaches_are_counted_per_rule)
{
	log_init(LOG_LEVEL_INFO);
	struct captured c;
	capture_begin(&c);
	struct fleet_log *l = fleet_log_new();
	cr_assert_not_null(l);
	fleet_log_attach(l, "web", false, "pid %d: attached by rule web", 100);
	for (int i = 0; i < 40; i++)
		fleet_log_attach(l, "web", true, "pid %d: attached as a child of pid 100 (rule web)", 101 + i);
	for (int i = 0; i < 3; i++)
		fleet_log_attach(l, "api", false, "pid %d: attached by rule api", 200 + i);
	fleet_log_tick(l); /* the minute is not over: nothing yet */
	char *before = capture_end(&c);
	cr_assert_eq(occurrences(before, ": attached "), 5, "%s", before);
	cr_assert_eq(occurrences(before, "not logged one by one"), 0, "%s", before);
	free(before);

	capture_begin(&c);
	fleet_log_free(l); /* the daemon stops: what was held is said */
	char *after = capture_end(&c);
	cr_assert(strstr(after, "rule web: 36 more children attached (not logged one by one)"), "%s", after);
	cr_assert(strstr(after, "rule api: 3 more processes attached (not logged one by one)"), "%s", after);
	free(after);
}

Test(fleet_log, each_rule_says_what_the_walk_found)
{
	log_init(LOG_LEVEL_INFO);
	struct rules rules = {0};
	const char *names[] = {"web", "batch", "none", "skip"};
	for (size_t i = 0; i < 4; i++) {
		struct rule r;
		rule_init(&r);
		r.name = strdup(names[i]);
		r.children = i == 0;
		r.exclude = i == 3;
		cr_assert_eq(rules_append(&rules, &r), 0);
	}
	struct fleet_log *l = fleet_log_new();
	fleet_log_walk_begin(l, &rules, "at start");
	cr_assert(fleet_log_walking(l));
	fleet_log_walk_found(l, "web", false);
	for (int i = 0; i < 6; i++)
		fleet_log_walk_found(l, "web", true);
	fleet_log_walk_found(l, "batch", false);
	fleet_log_walk_found(l, "batch", false);
	struct captured c;
	capture_begin(&c);
	fleet_log_walk_end(l);
	fleet_log_walk_end(l); /* said once */
	char *said = capture_end(&c);
	cr_assert(!fleet_log_walking(l));
	cr_assert_eq(occurrences(said, "rule web: found 1 process and 6 children at start"), 1, "%s", said);
	cr_assert_eq(occurrences(said, "rule batch: found 2 processes at start"), 1, "%s", said);
	cr_assert_eq(occurrences(said, "rule none: found no process at start"), 1, "%s", said);
	cr_assert_eq(occurrences(said, "rule skip"), 0, "an exclude rule attaches nothing: %s", said);
	free(said);
	fleet_log_free(l);
	rules_free(&rules);
}
