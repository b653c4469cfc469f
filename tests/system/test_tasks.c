/*
 * `pyprofd dump --async-aware` against live asyncio programs: the task tree
 * read from outside must be the program's own view of itself exactly
 * (tests/targets/tasks.py: asyncio.all_tasks(), the coroutine chains, the
 * awaiting task by construction and, on 3.14+, capture_call_graph), on
 * every interpreter from 3.11: 3.11-3.13 through per-version layouts of
 * asyncio's C tasks, 3.14+ through the _asyncio module's debug offsets.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "fleet.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(tasks, .init = helpers_init, .fini = helpers_fini);

/* Tasks the large scenario parks on one future. */
#define TASKS_BULK "10000"

struct tasks_param {
	bool none;
	struct python py;
	char bulk[8];
	char mode[8];
};

static void tasks_free_params(struct criterion_test_params *crp)
{
	cr_free(crp->params);
}

/* Each interpreter from 3.11 with each (bulk, mode) scenario. */
static struct criterion_test_params tasks_params(const char *const scenarios[][2], size_t nscen)
{
	struct python all[PYTHONS_MAX];
	size_t n = pythons_find(all, PYTHONS_MAX), k = 0;
	struct tasks_param *p = cr_malloc(sizeof *p * (n * nscen + 1));
	if (!p)
		abort();
	for (size_t i = 0; i < n; i++) {
		if (!all[i].supported || all[i].minor < 11)
			continue;
		for (size_t j = 0; j < nscen; j++, k++) {
			memset(&p[k], 0, sizeof p[k]);
			p[k].py = all[i];
			snprintf(p[k].bulk, sizeof p[k].bulk, "%s", scenarios[j][0]);
			snprintf(p[k].mode, sizeof p[k].mode, "%s", scenarios[j][1]);
		}
	}
	if (k == 0) {
		memset(&p[0], 0, sizeof p[0]);
		p[0].none = true;
		k = 1;
	}
	return cr_make_param_array(struct tasks_param, p, k, tasks_free_params);
}

static const char *tasks_str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* The dump's task of a given id, NULL if none. */
static json_t *tasks_by_id(json_t *tasks, json_int_t id)
{
	size_t i;
	json_t *t;
	json_array_foreach(tasks, i, t)
		if (json_integer_value(json_object_get(t, "id")) == id)
			return t;
	return NULL;
}

static json_t *tasks_by_name(json_t *tasks, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(tasks, i, t)
		if (tasks_str(t, "name") && strcmp(tasks_str(t, "name"), name) == 0)
			return t;
	return NULL;
}

/* The name of the task awaiting t in the dump, NULL for a root. */
static const char *tasks_parent_name(json_t *tasks, json_t *t)
{
	json_t *by = json_object_get(t, "awaited_by");
	if (json_is_null(by))
		return NULL;
	json_t *p = tasks_by_id(tasks, json_integer_value(by));
	return p ? tasks_str(p, "name") : "(a task not in the dump)";
}

/* The program's chain [[qualname, line], ...] against the dump's frames, innermost first. */
static void tasks_check_frames(const char *ctx, const char *name, json_t *want, json_t *frames)
{
	cr_expect_eq(json_array_size(frames), json_array_size(want),
	             "%s: task %s has %zu frames in the dump, %zu in the program", ctx, name,
	             json_array_size(frames), json_array_size(want));
	for (size_t k = 0; k < json_array_size(want) && k < json_array_size(frames); k++) {
		json_t *w = json_array_get(want, k), *f = json_array_get(frames, k);
		const char *wq = json_string_value(json_array_get(w, 0));
		json_int_t wl = json_integer_value(json_array_get(w, 1));
		cr_expect(tasks_str(f, "qualname") && strcmp(tasks_str(f, "qualname"), wq) == 0 &&
		              json_integer_value(json_object_get(f, "line")) == wl,
		          "%s: task %s frame %zu is %s:%lld in the dump, %s:%lld in the program", ctx,
		          name, k, tasks_str(f, "qualname"),
		          (long long)json_integer_value(json_object_get(f, "line")), wq, (long long)wl);
	}
}

static const char *const tree_scenarios[][2] = {{"3", "spin"}, {TASKS_BULK, "park"}};

ParameterizedTestParameters(tasks, tree)
{
	return tasks_params(tree_scenarios, sizeof tree_scenarios / sizeof tree_scenarios[0]);
}

ParameterizedTest(struct tasks_param *p, tasks, tree, .timeout = 120)
{
	if (p->none) {
		struct python unused[1];
		pythons_supported(unused, 1);
		cr_skip_test("no interpreter from 3.11 on");
	}
	char ctx[PATH_MAX + 128], py[PATH_MAX + 64], script[PATH_MAX];
	snprintf(ctx, sizeof ctx, "Python %s, %s tasks, %s", python_describe(&p->py, py, sizeof py),
	         p->bulk, p->mode);
	target_script("tasks.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", p->bulk, p->mode, NULL};
	test_target_start_python(&t, &p->py, args);
	json_t *report = test_target_wait_report(&t, 60);
	json_t *dump = dump_json(t.pid, (const char *const[]){"--json", "--async-aware", NULL}, ctx);
	json_t *tasks = json_object_get(dump, "tasks");
	cr_assert(json_is_array(tasks), "%s: the dump has no tasks array", ctx);

	{
		json_t *want = json_object_get(report, "tasks");
		cr_expect(json_is_null(json_object_get(dump, "tasks_error")), "%s: tasks_error %s", ctx,
		          tasks_str(dump, "tasks_error"));
		cr_expect(!json_is_true(json_object_get(dump, "tasks_cut")), "%s: tasks cut", ctx);
		cr_expect_eq(json_array_size(tasks), json_array_size(want),
		             "%s: %zu tasks in the dump, asyncio.all_tasks() has %zu", ctx,
		             json_array_size(tasks), json_array_size(want));
		size_t i;
		json_t *w;
		json_array_foreach(want, i, w) {
			const char *name = tasks_str(w, "name");
			json_t *got = tasks_by_name(tasks, name);
			cr_assert(got, "%s: task %s is not in the dump", ctx, name);
			tasks_check_frames(ctx, name, json_object_get(w, "frames"), json_object_get(got, "frames"));
			const char *parent = tasks_parent_name(tasks, got);
			const char *expected = tasks_str(w, "expected_by");
			cr_expect((!parent && !expected) || (parent && expected && strcmp(parent, expected) == 0),
			          "%s: task %s is awaited by %s in the dump, by %s in the program", ctx, name,
			          parent ? parent : "nothing", expected ? expected : "nothing");
			json_t *graph = json_object_get(w, "call_graph_awaited_by");
			if (json_is_array(graph)) {
				bool found = json_array_size(graph) == 0 && !parent;
				for (size_t k = 0; k < json_array_size(graph) && parent; k++)
					found |= strcmp(json_string_value(json_array_get(graph, k)), parent) == 0;
				cr_expect(found, "%s: task %s: capture_call_graph disagrees with the dump's %s",
				          ctx, name, parent ? parent : "root");
			}
			/* Task.get_stack() gives the outermost coroutine frame of a parked task. */
			json_t *outer = json_object_get(w, "stack_outer"), *frames = json_object_get(got, "frames");
			if (strcmp(name, "main") != 0 && json_array_size(outer) == 1 && json_array_size(frames) > 0) {
				json_t *o = json_array_get(outer, 0), *f = json_array_get(frames, json_array_size(frames) - 1);
				cr_expect(strcmp(tasks_str(f, "qualname"), json_string_value(json_array_get(o, 0))) == 0 &&
				              json_integer_value(json_object_get(f, "line")) ==
				                  json_integer_value(json_array_get(o, 1)),
				          "%s: task %s: its outermost frame is not Task.get_stack()'s", ctx, name);
			}
		}
		json_t *main_task = tasks_by_name(tasks, "main");
		cr_expect(main_task && json_is_true(json_object_get(main_task, "running")) == (strcmp(p->mode, "spin") == 0),
		          "%s: the main task is %s", ctx, strcmp(p->mode, "spin") == 0 ? "not running" : "running");
	}
	json_decref(dump);
	json_decref(report);
	test_target_kill(&t);
}

/* Whether some line of collapsed stacks holds every piece, in order. */
static bool tasks_line_has(const char *text, const char *const pieces[])
{
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char *copy = strndup(line, len);
		const char *at = copy;
		for (size_t k = 0; at && pieces[k]; k++)
			if ((at = strstr(at, pieces[k])))
				at += strlen(pieces[k]);
		free(copy);
		if (at)
			return true;
		line = end ? end + 1 : NULL;
	}
	return false;
}

/* The task stacks a recording of tasks.py must hold, root first as collapsed stacks are. */
static void tasks_check_collapsed(const char *ctx, const char *out, bool all)
{
	static const char *const running[] = {"<task>:main;main (", ";spin (", NULL};
	static const char *const tg[] = {"<task>:tg-parent;tg_parent (", "TaskGroup.__aexit__ (",
	                                 ";<task>:tg-child-1;middle (", ";inner (", ";leaf (", NULL};
	static const char *const nest[] = {"<task>:nest-0;nest (", ";<task>:nest-1;nest (",
	                                   ";<task>:nest-2;nest (", ";middle (", NULL};
	static const char *const shield[] = {"<task>:shield-parent;shield_parent (", ";<task>:shielded;",
	                                     NULL};
	cr_expect(tasks_line_has(out, running), "%s: no stack of the running task:\n%s", ctx, out);
	cr_expect(tasks_line_has(out, tg) == all, "%s: the TaskGroup child's stack is %s:\n%s", ctx,
	          all ? "missing" : "there (only the running task was asked for)", out);
	cr_expect(tasks_line_has(out, nest) == all, "%s: nested tasks' stack %s", ctx, all ? "missing" : "there");
	cr_expect(tasks_line_has(out, shield) == all, "%s: shielded task's stack %s", ctx, all ? "missing" : "there");
}

static const char *const record_scenarios[][2] = {{"3", "spin"}};

ParameterizedTestParameters(tasks, record)
{
	return tasks_params(record_scenarios, 1);
}

/* pyprofd record: --async-aware samples the running task's stack, --async-mode all every task's. */
ParameterizedTest(struct tasks_param *p, tasks, record, .timeout = 120)
{
	if (p->none)
		cr_skip_test("no interpreter from 3.11 on");
	char ctx[PATH_MAX + 128], py[PATH_MAX + 64], script[PATH_MAX], pid[16];
	snprintf(ctx, sizeof ctx, "Python %s", python_describe(&p->py, py, sizeof py));
	target_script("tasks.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", p->bulk, p->mode, NULL};
	test_target_start_python(&t, &p->py, args);
	json_decref(test_target_wait_report(&t, 60));
	snprintf(pid, sizeof pid, "%d", (int)t.pid);
	for (int all = 0; all <= 1; all++) {
		const char *argv[] = {pyprofd_bin(), "record", pid, "--duration", "0.5", "--rate", "100",
		                      all ? "--async-mode" : "--async-aware", all ? "all" : NULL, NULL};
		struct run_result r;
		run_command(&r, argv, NULL);
		char why[1024];
		cr_assert(r.exited && r.code == 0, "%s: record: %s", ctx, run_describe(&r, why, sizeof why));
		tasks_check_collapsed(ctx, r.out, all);
		run_result_free(&r);
	}
	test_target_kill(&t);
}

/* Attached by hand and by a rule (async = true, async_mode = all), the history keeps task stacks. */
Test(tasks, attach_and_rule, .timeout = 180)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = &pys[n - 1];
	cr_assert(py->minor >= 11, "the newest interpreter is older than 3.11");
	char ctx[PATH_MAX + 128], pyd[PATH_MAX + 64], script[PATH_MAX], p[16];
	snprintf(ctx, sizeof ctx, "Python %s", python_describe(py, pyd, sizeof pyd));
	target_script("tasks.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", "3", "spin", NULL};
	test_target_start_python(&t, py, args);
	json_decref(test_target_wait_report(&t, 60));
	struct daemon d;
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	daemon_start(&d, fast_flush);
	const char *attach[] = {"attach", pid_text(t.pid, p, sizeof p), "--rate", "100", "--async-mode", "all", NULL};
	json_t *target = ctl_json(&d, attach);
	cr_expect_str_eq(json_string_value(json_object_get(target, "async_mode")),
	                 "all", "%s: the target's async mode", ctx);
	json_decref(target);
	pause_ms(1500);
	const char *collapsed[] = {"query", "--pid", p, "--format", "collapsed", NULL};
	struct run_result r;
	ctl_run(&d, &r, collapsed, NULL);
	cr_assert(r.exited && r.code == 0);
	tasks_check_collapsed(ctx, r.out, true);
	run_result_free(&r);
	daemon_stop(&d);

	/* A rule's async settings, for the same process found by the daemon's discovery. */
	char config[PATH_MAX];
	fleet_daemon(&d, "[rule.tasks]\nmatch.cmdline = tasks\\.py\nrate = 100\nasync = true\nasync_mode = all\n",
	             config, sizeof config);
	json_t *e = wait_target(&d, t.pid, fleet_sampling, 30);
	cr_assert(e, "%s: the rule did not attach the asyncio program", ctx);
	cr_expect_str_eq(json_string_value(json_object_get(e, "async_mode")), "all",
	                 "%s: the rule's async mode", ctx);
	json_decref(e);
	pause_ms(1500);
	ctl_run(&d, &r, collapsed, NULL);
	cr_assert(r.exited && r.code == 0);
	tasks_check_collapsed(ctx, r.out, true);
	run_result_free(&r);
	daemon_stop(&d);
	test_target_kill(&t);
}

/* Our tree as CPython's sampler prints it: one "<task>:NAME|qualname:line|..." per leaf task, root first. */
static void tasks_leaf_chains(json_t *tasks, char *out, size_t len)
{
	size_t i, at = 0;
	json_t *t;
	out[0] = '\0';
	json_array_foreach(tasks, i, t) {
		size_t k;
		json_t *o;
		bool awaited = false;
		json_array_foreach(tasks, k, o)
			awaited |= json_integer_value(json_object_get(o, "awaited_by")) ==
			           json_integer_value(json_object_get(t, "id"));
		if (awaited)
			continue;
		/* From the leaf up to its root, then written root first. */
		json_t *path[64];
		size_t n = 0;
		for (json_t *c = t; c && n < 64; c = tasks_by_id(tasks, json_integer_value(json_object_get(c, "awaited_by"))))
			path[n++] = c;
		char line[4096];
		size_t l = 0;
		while (n-- > 0) {
			json_t *frames = json_object_get(path[n], "frames");
			l += (size_t)snprintf(line + l, sizeof line - l, "<task>:%s|", tasks_str(path[n], "name"));
			for (size_t f = json_array_size(frames); f-- > 0 && l < sizeof line;) {
				json_t *fr = json_array_get(frames, f);
				l += (size_t)snprintf(line + l, sizeof line - l, "%s:%lld|", tasks_str(fr, "qualname"),
				                      (long long)json_integer_value(json_object_get(fr, "line")));
			}
		}
		at += (size_t)snprintf(out + at, len - at, "%s\n", line);
	}
}

/* CPython's `profiling.sampling dump --async-aware` text, the same way: one line per block. */
static void tasks_cpython_chains(const char *text, char *out, size_t len)
{
	size_t at = 0, l = 0;
	char line[4096] = "";
	const char *p = text;
	while (p && *p) {
		const char *end = strchr(p, '\n');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char buf[1024];
		snprintf(buf, sizeof buf, "%.*s", (int)n, p);
		char name[512], file[512];
		int lineno;
		if (sscanf(buf, "  File \"<task>\", in %511[^\n]", name) == 1) {
			l += (size_t)snprintf(line + l, sizeof line - l, "<task>:%s|", name);
		} else if (sscanf(buf, "  File \"%511[^\"]\", line %d, in %511[^\n]", file, &lineno, name) == 3) {
			l += (size_t)snprintf(line + l, sizeof line - l, "%s:%d|", name, lineno);
		} else if (buf[0] == '\0' && l) {
			at += (size_t)snprintf(out + at, len - at, "%s\n", line);
			l = 0;
		}
		p = end ? end + 1 : NULL;
	}
	if (l)
		snprintf(out + at, len - at, "%s\n", line);
}

static int tasks_line_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of text, sorted, joined again: the two sides list their blocks in their own orders. */
static void tasks_sort_lines(char *text)
{
	char *lines[512];
	size_t n = 0;
	for (char *s = strtok(text, "\n"); s && n < 512; s = strtok(NULL, "\n"))
		lines[n++] = strdup(s);
	qsort(lines, n, sizeof *lines, tasks_line_cmp);
	text[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		strcat(text, lines[i]);
		strcat(text, "\n");
		free(lines[i]);
	}
}

/* On 3.15, CPython's own sampler reads the same tree from the same process. */
Test(tasks, same_as_cpython_sampler, .timeout = 120)
{
	struct python all[PYTHONS_MAX];
	size_t n = pythons_find(all, PYTHONS_MAX);
	const struct python *py = NULL;
	for (size_t i = 0; i < n && !py; i++)
		if (all[i].minor == 15 && !all[i].debug && all[i].root_len && !all[i].contained)
			py = &all[i];
	if (!py)
		cr_skip_test("no Python 3.15 in a root (make pythons)");
	char root[PATH_MAX], loader[PATH_MAX + 64], libs[2 * PATH_MAX + 64], home[PATH_MAX + 8];
	python_root(py, root, sizeof root);
	snprintf(loader, sizeof loader, "%s/lib64/ld-linux-x86-64.so.2", root);
	snprintf(libs, sizeof libs, "%s/lib/x86_64-linux-gnu:%s/usr/lib/x86_64-linux-gnu", root, root);
	snprintf(home, sizeof home, "%s/usr", root);
	char script[PATH_MAX], pid[16];
	target_script("tasks.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", "2", "park", NULL};
	test_target_start_python(&t, py, args);
	json_decref(test_target_wait_report(&t, 60));
	snprintf(pid, sizeof pid, "%d", (int)t.pid);
	json_t *dump = dump_json(t.pid, (const char *const[]){"--json", "--async-aware", NULL}, "3.15");
	/* The root's interpreter run on this host through the root's own loader and libraries. */
	setenv("PYTHONHOME", home, 1);
	const char *argv[] = {loader, "--library-path", libs, py->path, "-m", "profiling.sampling",
	                      "dump", "--async-aware", "--async-mode", "all", pid, NULL};
	struct run_result r;
	run_command(&r, argv, NULL);
	unsetenv("PYTHONHOME");
	char why[1024];
	cr_assert(r.exited && r.code == 0, "CPython's sampler: %s", run_describe(&r, why, sizeof why));
	static char ours[1 << 16], theirs[1 << 16];
	tasks_leaf_chains(json_object_get(dump, "tasks"), ours, sizeof ours);
	tasks_cpython_chains(r.out, theirs, sizeof theirs);
	tasks_sort_lines(ours);
	tasks_sort_lines(theirs);
	size_t leaves = 0;
	for (const char *c = theirs; (c = strchr(c, '\n')); c++)
		leaves++;
	/* Twelve leaf tasks park in tasks.py with two bulk tasks. */
	cr_assert_eq(leaves, 12, "CPython's sampler printed %zu task stacks:\n%s", leaves, r.out);
	cr_expect_str_eq(ours, theirs, "the task stacks differ from CPython's sampler's:\nours:\n%s\ntheirs:\n%s",
	                 ours, theirs);
	run_result_free(&r);
	json_decref(dump);
	test_target_kill(&t);
}

/*
 * A chain of 5,000 tasks, each awaiting the next (tests/targets/task_chain.py),
 * sampled under a per-sample bound far below what reading them takes: the
 * reader looks at its clock every TASKS_CLOCK_EVERY tasks and stops there,
 * saying the sample was cut.  It once read a batch of 1,024 (and on
 * 3.11-3.13 linked every task it had read) before it looked: a sample of
 * such a chain took 15 ms against a bound of 5.
 */
static void tasks_chain_within_bound(const struct python *py)
{
	char ctx[PATH_MAX + 128], pyd[PATH_MAX + 64], script[PATH_MAX], config[PATH_MAX], dir[PATH_MAX - 32], p[16];
	snprintf(ctx, sizeof ctx, "Python %s", python_describe(py, pyd, sizeof pyd));
	target_script("task_chain.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", "5000", NULL};
	test_target_start_python(&t, py, args);
	json_decref(test_target_wait_report(&t, 120));
	scratch_dir(dir, sizeof dir);
	snprintf(config, sizeof config, "%s/pyprofd.conf", dir);
	write_text_file(config, "[limits]\nmax_sample_time = 0.1ms\n");
	const char *extra[] = {"--config", config, NULL};
	struct daemon d;
	daemon_start(&d, extra);
	const char *attach[] = {"attach", pid_text(t.pid, p, sizeof p), "--rate", "100", "--async-mode", "all", NULL};
	ctl_ok(&d, attach);
	/* Samples that read the tasks: those the kernel did not prove still (the loop spins). */
	json_int_t read = 0, tasks = 0, cut = 0;
	for (int i = 0; i < 600 && read < 30; i++) {
		json_t *stats = ctl_stats_of(&d, t.pid);
		read = jint(stats, "total_samples") - jint(stats, "process_still");
		tasks = jint(stats, "tasks_read");
		cut = jint(stats, "tasks_cut");
		json_decref(stats);
		pause_ms(100);
	}
	cr_assert_geq(read, 30, "%s: %lld samples read the tasks in a minute", ctx, (long long)read);
	cr_assert_gt(cut, 0, "%s: no sample of a 5,000-task chain was cut at the bound", ctx);
	cr_assert_lt(tasks / read, 512, "%s: %lld tasks a sample under a bound of 0.1 ms: the reader did not stop at it",
	             ctx, (long long)(tasks / read));
	daemon_stop(&d);
	test_target_kill(&t);
}

/* Both readers: asyncio's task sets (3.11-3.13) and the task lists (3.14+), the newest of each. */
Test(tasks, deep_chain_stops_at_the_sample_bound, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *sets = NULL, *lists = NULL;
	for (size_t i = 0; i < n; i++) {
		if (pys[i].minor >= 11 && pys[i].minor <= 13)
			sets = &pys[i];
		if (pys[i].minor >= 14)
			lists = &pys[i];
	}
	cr_assert(sets || lists, "no interpreter from 3.11");
	if (sets)
		tasks_chain_within_bound(sets);
	if (lists)
		tasks_chain_within_bound(lists);
}
