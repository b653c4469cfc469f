/*
 * pyprofd-ctl query's request-context options, run as the real program:
 * bad ids and labels are refused as usage errors (status 2) naming what is
 * wrong, before any daemon is asked (the socket named does not exist).
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(query_options, .init = helpers_init, .fini = helpers_fini);

/* pyprofd-ctl query ARGS... --socket NOWHERE: its status and stderr. */
static int query(char *err, size_t len, const char *a, const char *b, const char *c)
{
	const char *bin = getenv("PYPROFD_CTL");
	cr_assert(bin && *bin, "PYPROFD_CTL is not set: run the suite with `make test`");
	const char *argv[] = {bin, "query", "--socket", "/nonexistent/pyprofd.sock", a, b, c, NULL};
	struct run_result r;
	run_command(&r, argv, NULL);
	cr_assert(r.exited, "pyprofd-ctl did not exit");
	snprintf(err, len, "%s", r.err ? r.err : "");
	int code = r.code;
	run_result_free(&r);
	return code;
}

Test(query_options, bad_context_options_are_usage_errors)
{
	static const struct {
		const char *a, *b, *c, *why;
	} bad[] = {
		{"--trace", "zz", NULL, "--trace takes 32 hex digits, not 'zz'"},
		{"--trace", "0af7651916cd43dd8448eb211c80319", NULL, "--trace takes 32 hex digits"},
		{"--trace", "0af7651916cd43dd8448eb211c80319cz", NULL, "--trace takes 32 hex digits"},
		{"--trace", "00000000000000000000000000000000", NULL, "query.trace_id is all zero"},
		{"--span", "b7ad6b716920333g", NULL, "--span takes 16 hex digits, not 'b7ad6b716920333g'"},
		{"--span", "b7ad6b71692033310", NULL, "--span takes 16 hex digits"},
		{"--context", "route", NULL, "--context takes KEY=VALUE, not 'route'"},
		{"--context", "=x", NULL, "--context takes KEY=VALUE"},
		{"--context", "route=a\nb", NULL, "query.context_labels[0]: its value must have no line break"},
		{"--context", "route=0123456789012345678901234567890123456789012345678901234567890123", NULL,
		 "query.context_labels[0]: its value must be at most 63 bytes"},
		{"--format", "processes", "--limit=3", "--limit goes with --format table or traces"},
	};
	char err[1024];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int code = query(err, sizeof err, bad[i].a, bad[i].b, bad[i].c);
		cr_expect_eq(code, 2, "bad[%zu]: status %d: %s", i, code, err);
		cr_expect(strstr(err, bad[i].why), "bad[%zu]: %s", i, err);
	}
	/* Nine context labels are one too many, in the daemon's own words. */
	const char *bin = getenv("PYPROFD_CTL");
	const char *argv[24] = {bin, "query", "--socket", "/nonexistent/pyprofd.sock"};
	size_t n = 4;
	static const char *const nine[] = {"a=1", "b=1", "c=1", "d=1", "e=1", "f=1", "g=1", "h=1", "i=1"};
	for (size_t i = 0; i < 9; i++) {
		argv[n++] = "--context";
		argv[n++] = nine[i];
	}
	struct run_result r;
	run_command(&r, argv, NULL);
	cr_expect(r.exited && r.code == 2, "nine labels: status %d", r.code);
	cr_expect(r.err && strstr(r.err, "query.context_labels has 9 labels: at most 8"), "%s", r.err);
	run_result_free(&r);
}

/* Good ids and labels pass every check: the program goes on to connect, and finds no daemon. */
Test(query_options, good_context_options_reach_the_daemon)
{
	char err[1024];
	int code = query(err, sizeof err, "--trace", "0AF7651916CD43DD8448EB211C80319C", "--format=traces");
	cr_expect_eq(code, 10, "status %d: %s", code, err);
	cr_expect(strstr(err, "the daemon is not running"), "%s", err);
	code = query(err, sizeof err, "--span", "b7ad6b7169203331", "--context=route=/checkout");
	cr_expect_eq(code, 10, "status %d: %s", code, err);
	code = query(err, sizeof err, "--format", "traces", "--limit=5");
	cr_expect_eq(code, 10, "status %d: %s", code, err);
}
