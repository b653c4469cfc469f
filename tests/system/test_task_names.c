/*
 * The names of asyncio tasks in the history stay few, whatever the program
 * does (tests/targets/task_names.py): tasks it did not name (asyncio's own
 * Task-N, an int from 3.12, a str before) are named after their coroutine,
 * names it chose are kept, and past 256 names a process's names fold into
 * one, counted.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(task_names, .init = helpers_init, .fini = helpers_fini);

/* The name every name past the bound becomes. */
#define FOLDED "<task>:\u2026other"
/* Names a process may have before they fold. */
#define NAMES_MAX 256

/* One interpreter of each minor the test runs on: both readers of tasks, and both kinds of Task-N. */
static const unsigned task_minors[] = {11, 12, 15};

ParameterizedTestParameters(task_names, churn)
{
	size_t n = sizeof task_minors / sizeof task_minors[0];
	return cr_make_param_array(struct python_param, python_params_of_minors(task_minors, n), n, python_params_free);
}

/* The distinct <task>:NAME functions of pid's history, as a JSON array of strings (sorted by the table). */
static json_t *names_in_history(const struct daemon *d, pid_t pid)
{
	char p[16];
	const char *table[] = {"query", "--pid", pid_text(pid, p, sizeof p), "--format", "table", NULL};
	json_t *res = ctl_json(d, table);
	json_t *names = json_array();
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(res, "functions"), i, f) {
		const char *fn = jstr(f, "function");
		if (fn && strncmp(fn, "<task>:", 7) == 0)
			json_array_append_new(names, json_string(fn));
	}
	json_decref(res);
	return names;
}

static bool names_has(json_t *names, const char *name)
{
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n)
		if (strcmp(json_string_value(n), name) == 0)
			return true;
	return false;
}

/* The names, one line, for a message. */
static const char *names_text(json_t *names, char *buf, size_t len)
{
	size_t i, at = 0;
	json_t *n;
	buf[0] = '\0';
	json_array_foreach(names, i, n)
		if (at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", json_string_value(n));
	return buf;
}

/*
 * A service making 10,000 short-lived unnamed tasks, sampled with every
 * suspended task: its history holds a handful of task names, the unnamed
 * ones under their coroutine's, and the task the program named by its name.
 */
ParameterizedTest(struct python_param *p, task_names, churn, .timeout = 300)
{
	if (p->none)
		cr_skip_test("no Python 3.%u here", p->minor);
	char ctx[PATH_MAX + 128], py[PATH_MAX + 64], script[PATH_MAX], pid[16], go[PATH_MAX + 8];
	snprintf(ctx, sizeof ctx, "Python %s", python_describe(&p->py, py, sizeof py));
	target_script("task_names.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", "churn", NULL};
	test_target_start_python(&t, &p->py, args);
	json_decref(test_target_wait_report(&t, 60));
	struct daemon d;
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	daemon_start(&d, fast_flush);
	const char *attach[] = {"attach", pid_text(t.pid, pid, sizeof pid), "--rate", "100", "--async-mode", "all", NULL};
	ctl_ok(&d, attach);
	/* Sampled from the first task on: the service starts making them now. */
	cr_assert(unlink(t.report) == 0);
	snprintf(go, sizeof go, "%s.go", t.report);
	write_text_file(go, "");
	json_t *made = test_target_wait_report(&t, 240);
	cr_assert_eq(jint(made, "tasks"), 10000, "%s: the service did not make its tasks", ctx);
	json_decref(made);

	json_t *names = names_in_history(&d, t.pid);
	char text[8192];
	names_text(names, text, sizeof text);
	cr_expect(names_has(names, "<task>:handle_request"),
	          "%s: no unnamed task under its coroutine's name in the history: %s", ctx, text);
	cr_expect(names_has(names, "<task>:checkout"), "%s: the task named checkout lost its name: %s", ctx, text);
	cr_expect_leq(json_array_size(names), 5, "%s: %zu task names for 10,000 tasks of one kind: %s", ctx,
	              json_array_size(names), text);
	size_t i;
	json_t *n;
	json_array_foreach(names, i, n) {
		const char *name = json_string_value(n);
		cr_expect(strncmp(name, "<task>:Task-", 12) != 0 || name[12] < '0' || name[12] > '9',
		          "%s: asyncio's own name %s kept", ctx, name);
	}
	json_decref(names);
	json_t *stats = ctl_stats_of(&d, t.pid);
	cr_expect_eq(jint(stats, "task_names_folded"), 0, "%s: names folded below the bound", ctx);
	json_decref(stats);
	daemon_stop(&d);
	test_target_kill(&t);
}

/*
 * 400 tasks each named by the program: the first 256 names are kept, the
 * rest show as one folded name, and stats count the names folded.
 */
Test(task_names, bound, .timeout = 180)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = &pys[n - 1];
	cr_assert(py->minor >= 11, "the newest interpreter is older than 3.11");
	char ctx[PATH_MAX + 128], pyd[PATH_MAX + 64], script[PATH_MAX], pid[16];
	snprintf(ctx, sizeof ctx, "Python %s", python_describe(py, pyd, sizeof pyd));
	target_script("task_names.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", "many", "400", NULL};
	test_target_start_python(&t, py, args);
	json_decref(test_target_wait_report(&t, 60));
	struct daemon d;
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	daemon_start(&d, fast_flush);
	const char *attach[] = {"attach", pid_text(t.pid, pid, sizeof pid), "--rate", "100", "--async-mode", "all", NULL};
	ctl_ok(&d, attach);
	/* Until a sample read every task (one sample reads as many as its time allows). */
	json_t *names = NULL;
	for (int i = 0; i < 600; i++) {
		json_decref(names);
		names = names_in_history(&d, t.pid);
		if (names_has(names, FOLDED))
			break;
		pause_ms(100);
	}
	char text[16384];
	names_text(names, text, sizeof text);
	cr_expect(names_has(names, FOLDED), "%s: no name folded of 400: %s", ctx, text);
	cr_expect_gt(json_array_size(names), NAMES_MAX / 2, "%s: %zu task names kept of 400: %s", ctx,
	             json_array_size(names), text);
	cr_expect_leq(json_array_size(names), NAMES_MAX + 1, "%s: %zu task names, past the bound: %s", ctx,
	              json_array_size(names), text);
	json_decref(names);
	json_t *stats = ctl_stats_of(&d, t.pid);
	cr_expect_gt(jint(stats, "task_names_folded"), 0, "%s: stats count no folded name", ctx);
	json_decref(stats);
	daemon_stop(&d);
	test_target_kill(&t);
}
