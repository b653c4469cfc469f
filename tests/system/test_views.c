/*
 * What users see, end to end with the real daemon and real interpreters: a
 * method and a function of one short name are two rows in every view
 * (table, top, diff, collapsed, pprof), threads are named and idle ones can
 * be left out, list and query count alike, and the CLI answers --version,
 * lists its commands and warns of a selection that matches nothing.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(views, .init = helpers_init, .fini = helpers_fini);

/* Samples of the views target before looking: enough for every thread at 200 Hz. */
#define VIEWS_SAMPLE_MS 2500

/* One query or top row as the test wants it. */
static json_t *find_row(json_t *rows, const char *function, json_int_t first_line)
{
	size_t i;
	json_t *row;
	json_array_foreach(rows, i, row) {
		if (strcmp(json_string_value(json_object_get(row, "function")), function) == 0 &&
		    (first_line < 0 || jint(row, "first_line") == first_line))
			return row;
	}
	return NULL;
}

/* The views target and a daemon sampling it at 200 Hz with a label for a while. */
struct views {
	struct daemon d;
	struct test_target t;
	json_t *report;
	char pid[16];
	bool qualnames; /* 3.11+ */
	json_int_t run_line, method_line;
};

static void views_start(struct views *v, const struct python *py)
{
	test_target_start(&v->t, py, "views");
	v->report = test_target_wait_report(&v->t, TARGET_READY_TIMEOUT_S);
	const char *version = json_string_value(json_object_get(v->report, "version"));
	int major = 0, minor = 0;
	cr_assert(version && sscanf(version, "%d.%d", &major, &minor) == 2, "no version reported");
	v->qualnames = major > 3 || minor >= 11;
	v->run_line = jint(v->report, "run_line");
	v->method_line = jint(v->report, "method_line");
	daemon_start(&v->d, NULL);
	pid_text(v->t.pid, v->pid, sizeof v->pid);
	const char *attach[] = {"attach", v->pid, "--rate", "200", "--label", "service=views", NULL};
	ctl_ok(&v->d, attach);
	pause_ms(VIEWS_SAMPLE_MS);
}

static void views_stop(struct views *v)
{
	daemon_stop(&v->d);
	test_target_kill(&v->t);
	json_decref(v->report);
}

/* pyprofd-ctl ARGS, which must succeed; its output (malloc'd). */
static char *ctl_out(const struct daemon *d, const char *const args[], char **err)
{
	struct run_result r;
	ctl_run(d, &r, args, NULL);
	char why[1024];
	cr_assert(r.exited && r.code == 0, "pyprofd-ctl %s: %s", args[0], run_describe(&r, why, sizeof why));
	char *out = strdup(r.out ? r.out : "");
	if (err)
		*err = strdup(r.err ? r.err : "");
	run_result_free(&r);
	return out;
}

/* The rows of a function table (query --format table, top) that must hold both runs. */
static void expect_two_runs(const struct views *v, json_t *rows, const char *what)
{
	const char *method = v->qualnames ? "Runner.run" : "run";
	json_t *f = find_row(rows, "run", v->run_line), *m = find_row(rows, method, v->method_line);
	cr_expect(f && jint(f, "own") > 0, "%s: no row for the function run (line %lld)", what,
	          (long long)v->run_line);
	cr_expect(m && jint(m, "own") > 0, "%s: no row for the method %s (line %lld)", what, method,
	          (long long)v->method_line);
	cr_expect(f != m, "%s: the function and the method are one row", what);
}

/* The interpreters the views tests run on: the oldest (co_name only) and the newest. */
static size_t views_pythons(struct python pys[PYTHONS_MAX], const struct python *out[2])
{
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	cr_assert_gt(n, 0, "no supported interpreter found");
	out[0] = &pys[0];
	out[1] = &pys[n - 1];
	return n > 1 ? 2 : 1;
}

Test(views, a_method_and_a_function_of_one_name_are_two_rows, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	const struct python *use[2];
	size_t n = views_pythons(pys, use);
	for (size_t k = 0; k < n; k++) {
		struct views v = {0};
		views_start(&v, use[k]);
		cr_log_info("%s", use[k]->path);

		const char *table[] = {"query", "--pid", v.pid, "--format", "table", NULL};
		json_t *j = ctl_json(&v.d, table);
		expect_two_runs(&v, json_object_get(j, "functions"), "query --format table");
		json_decref(j);

		const char *top[] = {"top", v.pid, "--once", "--window", "30", NULL};
		j = ctl_json(&v.d, top);
		expect_two_runs(&v, json_object_get(j, "rows"), "top");
		json_decref(j);

		const char *diff[] = {"diff", "--pid", v.pid, "--base", "-1h..-2s", "--compare", "-2s..now",
		                      NULL};
		j = ctl_json(&v.d, diff);
		json_t *rows = json_object_get(j, "functions");
		json_t *f = find_row(rows, "run", v.run_line),
		       *m = find_row(rows, v.qualnames ? "Runner.run" : "run", v.method_line);
		cr_expect(f && m && f != m, "diff: the function and the method are not two rows");
		json_decref(j);

		/* Collapsed stacks name the method by its qualified name where there is one. */
		const char *collapsed[] = {"query", "--pid", v.pid, NULL};
		char *out = ctl_out(&v.d, collapsed, NULL);
		char want[128];
		snprintf(want, sizeof want, ";%s (", v.qualnames ? "Runner.run" : "run");
		cr_expect(strstr(out, want), "collapsed lacks %s:\n%.2000s", want, out);
		free(out);
		views_stop(&v);
	}
}

/* `go tool pprof FLAG FILE`'s output. */
static char *go_pprof(const char *flag, const char *file)
{
	cr_assert(access("/usr/bin/go", X_OK) == 0,
	          "go is not installed: make deps installs golang-go for `go tool pprof`");
	char home[PATH_MAX], cache[PATH_MAX + 16], gohome[PATH_MAX + 16];
	scratch_dir(home, sizeof home);
	snprintf(cache, sizeof cache, "GOCACHE=%s/cache", home);
	snprintf(gohome, sizeof gohome, "HOME=%s", home);
	const char *argv[] = {"/usr/bin/env", gohome, cache, "/usr/bin/go", "tool", "pprof", flag, file,
	                      NULL};
	struct run_result r;
	struct run_opts opts = {.timeout_s = 120};
	run_command(&r, argv, &opts);
	char why[2048];
	cr_assert(r.exited && r.code == 0, "go tool pprof %s: %s", flag, run_describe(&r, why, sizeof why));
	char *out = strdup(r.out ? r.out : "");
	run_result_free(&r);
	return out;
}

Test(views, pprof_of_the_history_as_go_tool_pprof_shows_it, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	const struct python *use[2];
	size_t n = views_pythons(pys, use);
	struct views v = {0};
	views_start(&v, use[n - 1]);
	char dir[PATH_MAX], path[PATH_MAX + 32];
	scratch_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/views.pb.gz", dir);
	/* No --since: the profile covers its samples, not 1970 to now. */
	const char *q[] = {"query", "--label", "service=views", "--format", "pprof", "-o", path, NULL};
	free(ctl_out(&v.d, q, NULL));
	char *top = go_pprof("-top", path);
	cr_expect(strstr(top, " <module>\n"), "-top lacks <module>:\n%s", top);
	cr_expect_null(strstr(top, "<unknown>"), "-top simplified a name away:\n%s", top);
	cr_expect(strstr(top, v.qualnames ? " Runner.run\n" : " run\n"), "-top lacks the method:\n%s", top);
	cr_expect(strstr(top, "Type: wall"), "-top's type is not the mode:\n%s", top);
	cr_expect_null(strstr(top, "hrs"), "-top's duration is not the samples' range:\n%s", top);
	free(top);
	char *tags = go_pprof("-tags", path);
	char main_thread[64];
	snprintf(main_thread, sizeof main_thread, "MainThread (tid %d)", (int)v.t.pid);
	cr_expect(strstr(tags, main_thread), "-tags lacks %s:\n%s", main_thread, tags);
	cr_expect(strstr(tags, "thread.id:"), "-tags lacks thread.id:\n%s", tags);
	cr_expect(strstr(tags, "service:") && strstr(tags, ": views"), "-tags lacks the label:\n%s", tags);
	cr_expect(strstr(tags, "napper (tid "), "-tags lacks the named thread:\n%s", tags);
	free(tags);
	views_stop(&v);
}

/* A function's own samples in a table of rows, 0 when it is not there. */
static json_int_t own_of(json_t *rows, const char *function)
{
	json_t *row = find_row(rows, function, -1);
	return row ? jint(row, "own") : 0;
}

Test(views, idle_threads_are_told_and_can_be_left_out, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	const struct python *use[2];
	size_t n = views_pythons(pys, use);
	for (size_t k = 0; k < n; k++) {
		struct views v = {0};
		views_start(&v, use[k]);
		cr_log_info("%s", use[k]->path);
		const char *wait_fn = v.qualnames ? "Condition.wait" : "wait";

		const char *all[] = {"query", "--pid", v.pid, "--format", "table", NULL};
		json_t *j = ctl_json(&v.d, all);
		cr_expect_gt(own_of(json_object_get(j, "functions"), "nap"), 0, "the napper is not sampled");
		cr_expect_gt(own_of(json_object_get(j, "functions"), wait_fn), 0, "the waiter is not sampled");
		json_int_t samples = jint(j, "samples");
		json_decref(j);

		const char *busy[] = {"query", "--pid", v.pid, "--format", "table", "--no-idle", NULL};
		j = ctl_json(&v.d, busy);
		json_t *rows = json_object_get(j, "functions");
		cr_expect_eq(own_of(rows, "nap"), 0, "--no-idle kept the sleeping thread");
		cr_expect_eq(own_of(rows, wait_fn), 0, "--no-idle kept the waiting thread");
		cr_expect_gt(own_of(rows, "run"), 0, "--no-idle left the running thread out");
		cr_expect_lt(jint(j, "samples"), samples);
		json_decref(j);

		const char *top[] = {"top", v.pid, "--once", "--window", "30", NULL};
		j = ctl_json(&v.d, top);
		cr_expect_gt(jint(j, "idle_samples"), 0);
		cr_expect_gt(jint(j, "gil_samples"), 0);
		cr_expect_lt(jint(j, "idle_samples"), jint(j, "samples"));
		json_t *threads = json_object_get(j, "threads");
		cr_expect_eq(json_array_size(threads), 3, "top shows %zu threads", json_array_size(threads));
		bool main_named = false, napper_named = false;
		size_t i;
		json_t *t;
		json_array_foreach(threads, i, t) {
			const char *name = json_string_value(json_object_get(t, "name"));
			main_named |= name && strcmp(name, "MainThread") == 0 && jint(t, "idle") < jint(t, "samples");
			napper_named |= name && strcmp(name, "napper") == 0 && jint(t, "idle") == jint(t, "samples");
		}
		cr_expect(main_named, "top's threads lack a busy MainThread");
		cr_expect(napper_named, "top's threads lack an idle napper");
		json_decref(j);

		const char *quiet[] = {"top", v.pid, "--once", "--window", "30", "--no-idle", NULL};
		j = ctl_json(&v.d, quiet);
		cr_expect_eq(jint(j, "idle_samples"), 0);
		cr_expect_eq(own_of(json_object_get(j, "rows"), "nap"), 0, "top --no-idle kept the napper");
		json_decref(j);

		const char *named[] = {"top", v.pid, "--once", "--window", "30", "--sort", "name", NULL};
		j = ctl_json(&v.d, named);
		rows = json_object_get(j, "rows");
		for (size_t r = 1; r < json_array_size(rows); r++)
			cr_expect_leq(strcmp(json_string_value(json_object_get(json_array_get(rows, r - 1), "function")),
			                     json_string_value(json_object_get(json_array_get(rows, r), "function"))),
			              0, "--sort name: row %zu out of order", r);
		json_decref(j);

		/* A speedscope profile per thread, named after it. */
		const char *speedscope[] = {"query", "--pid", v.pid, "--format", "speedscope", NULL};
		j = ctl_json(&v.d, speedscope);
		json_t *profiles = json_object_get(j, "profiles");
		cr_expect_eq(json_array_size(profiles), 3, "%zu speedscope profiles", json_array_size(profiles));
		bool main_profile = false;
		json_array_foreach(profiles, i, t)
			main_profile |= strncmp(json_string_value(json_object_get(t, "name")), "MainThread (tid ", 16) == 0;
		cr_expect(main_profile, "no speedscope profile named after the main thread");
		json_decref(j);

		/* The main thread in list and dump. */
		const char *list[] = {"list", NULL};
		j = ctl_json(&v.d, list);
		bool listed = false;
		json_array_foreach(json_object_get(json_array_get(j, 0), "threads"), i, t)
			listed |= json_is_string(json_object_get(t, "name")) &&
			          strcmp(json_string_value(json_object_get(t, "name")), "MainThread") == 0;
		cr_expect(listed, "list does not name the main thread");
		json_decref(j);
		const char *dump[] = {"dump", v.pid, NULL};
		char *out = ctl_out(&v.d, dump, NULL);
		cr_expect(strstr(out, "\"MainThread\""), "dump does not name the main thread:\n%s", out);
		cr_expect(strstr(out, "[idle]"), "dump shows no idle thread:\n%s", out);
		free(out);
		views_stop(&v);
	}
}

Test(views, list_and_query_count_a_short_life_alike, .timeout = 300)
{
	struct python py;
	cr_assert_gt(pythons_supported(&py, 1), 0, "no supported interpreter found");
	struct daemon d;
	daemon_start(&d, NULL);
	/* Busy for a while, then gone: the last ticks find no Python stack. */
	struct test_target t;
	test_target_start_argv(&t, (const char *const[]){
		py.path, "-I", "-c",
		"import sys, time\n"
		"open(sys.argv[1] + '.tmp', 'w').write('{}')\n"
		"import os; os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
		"end = time.time() + 1.5\n"
		"while time.time() < end: sum(range(1000))\n",
		"{report}", NULL});
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	char p[16];
	const char *attach[] = {"attach", pid_text(t.pid, p, sizeof p), "--rate", "200", NULL};
	ctl_ok(&d, attach);
	for (int i = 0; i < 100 && !test_target_exited(&t); i++)
		pause_ms(100);
	cr_assert(test_target_exited(&t), "the target did not end");
	json_t *entry = NULL;
	for (int i = 0; i < 50; i++) {
		const char *list[] = {"list", NULL};
		json_t *j = ctl_json(&d, list);
		json_t *e = json_array_get(j, 0);
		if (e && strcmp(json_string_value(json_object_get(e, "state")), "exited") == 0) {
			entry = json_incref(e);
			json_decref(j);
			break;
		}
		json_decref(j);
		pause_ms(100);
	}
	cr_assert_not_null(entry, "the target is not listed as exited");
	const char *q[] = {"query", "--pid", p, "--format", "table", NULL};
	json_t *table = ctl_json(&d, q);
	cr_expect_gt(jint(entry, "thread_samples"), 0);
	cr_expect_eq(jint(entry, "thread_samples"), jint(table, "samples"),
	             "list counts %lld samples, query %lld", (long long)jint(entry, "thread_samples"),
	             (long long)jint(table, "samples"));
	/* The text form shows that count under SAMPLES. */
	const char *list_text[] = {"list", NULL};
	char *out = ctl_out(&d, list_text, NULL);
	char want[32];
	snprintf(want, sizeof want, " %lld ", (long long)jint(table, "samples"));
	cr_expect(strstr(out, want), "list does not show %s:\n%s", want, out);
	free(out);
	json_decref(table);
	json_decref(entry);
	daemon_stop(&d);
	test_target_kill(&t);
}

Test(views, cli_versions_commands_and_unmatched_selections, .timeout = 120)
{
	const char *progs[][2] = {{pyprofd_bin(), "pyprofd "}, {ctl_bin(), "pyprofd-ctl "}};
	for (size_t i = 0; i < 2; i++) {
		struct run_result r;
		run_command(&r, (const char *const[]){progs[i][0], "--version", NULL}, NULL);
		cr_expect(r.exited && r.code == 0 && strncmp(r.out, progs[i][1], strlen(progs[i][1])) == 0,
		          "%s --version: %s", progs[i][0], r.out);
		run_result_free(&r);
	}
	struct run_result r;
	run_command(&r, (const char *const[]){ctl_bin(), "--help", NULL}, NULL);
	static const char *const commands[] = {"attach", "detach", "list", "dump", "stats", "status",
	                                       "top", "query", "diff", "rules"};
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		char want[32];
		snprintf(want, sizeof want, "\n  %s ", commands[i]);
		cr_expect(strstr(r.out, want), "--help does not list %s", commands[i]);
	}
	run_result_free(&r);

	struct python py;
	cr_assert_gt(pythons_supported(&py, 1), 0, "no supported interpreter found");
	struct views v = {0};
	views_start(&v, &py);
	char *err;
	const char *typo[] = {"query", "--label", "service=vews", NULL};
	free(ctl_out(&v.d, typo, &err));
	cr_expect(strstr(err, "warning") && strstr(err, "--label service=vews"),
	          "no warning for a label nothing matched: %s", err);
	free(err);
	const char *gone[] = {"query", "--pid", "999999999", "--format", "table", NULL};
	free(ctl_out(&v.d, gone, &err));
	cr_expect(strstr(err, "warning") && strstr(err, "--pid 999999999"),
	          "no warning for a pid nothing matched: %s", err);
	free(err);
	const char *fine[] = {"query", "--label", "service=views", "--since", "1s", NULL};
	free(ctl_out(&v.d, fine, &err));
	cr_expect_eq(err[0], '\0', "a warning for a label that matches: %s", err);
	free(err);
	/* Matched once, empty now: an empty range is no mistake. */
	const char *old[] = {"query", "--label", "service=views", "--from", "1000", "--until", "2000", NULL};
	free(ctl_out(&v.d, old, &err));
	cr_expect_eq(err[0], '\0', "a warning for an empty range of a label that matched: %s", err);
	free(err);
	views_stop(&v);
}

Test(views, record_writes_threads_in_every_format, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	const struct python *use[2];
	size_t n = views_pythons(pys, use);
	struct test_target t;
	test_target_start(&t, use[n - 1], "views");
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	char p[16];
	pid_text(t.pid, p, sizeof p);
	static const char *const formats[][4] = {
		{"--format", "gecko", NULL, NULL},
		{"--per-thread", NULL, NULL, NULL},
		{"--per-thread", "--no-idle", NULL, NULL},
	};
	for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
		const char *argv[16] = {pyprofd_bin(), "record", p, "--duration", "1", "--rate", "100"};
		size_t k = 7;
		for (size_t i = 0; formats[f][i]; i++)
			argv[k++] = formats[f][i];
		argv[k] = NULL;
		struct run_result r;
		run_command(&r, argv, NULL);
		char why[1024];
		cr_assert(r.exited && r.code == 0, "record %s: %s", formats[f][0], run_describe(&r, why, sizeof why));
		if (f == 0) {
			json_t *doc = json_loads(r.out, 0, NULL);
			cr_assert_not_null(doc, "gecko is not JSON");
			json_t *threads = json_object_get(doc, "threads");
			cr_expect_eq(json_array_size(threads), 3, "%zu tracks", json_array_size(threads));
			cr_expect_eq(json_integer_value(json_object_get(json_object_get(doc, "meta"), "version")), 29);
			json_decref(doc);
		} else {
			char root[64];
			snprintf(root, sizeof root, "MainThread (tid %d);", (int)t.pid);
			cr_expect(strstr(r.out, root), "collapsed --per-thread lacks %s:\n%.2000s", root, r.out);
			bool napping = strstr(r.out, "nap (") != NULL;
			cr_expect(f == 1 ? napping : !napping, "%s: the sleeping thread is %s", formats[f][1] ? formats[f][1] : "",
			          napping ? "there" : "missing");
		}
		run_result_free(&r);
	}
	test_target_kill(&t);
}
