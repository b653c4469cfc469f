/*
 * Dumps of asyncio tasks by the daemon (pyprofd-ctl dump --async-aware)
 * and by pyprofd dump, while the loop switches between them
 * (tests/targets/task_spin.py: two tasks take turns on the loop's thread,
 * thousands of times a second, beside 200 parked ones).  A dump reads the
 * thread, then the tasks: in between the loop has switched, and the task
 * read as running was once printed with no frames.  Each dump, by the
 * daemon (pyprofd-ctl dump --async-aware) and by pyprofd dump, must show
 * the task running as the thread was read, with the thread's frames from
 * its coroutine up, and no task without frames.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(task_dumps, .init = helpers_init, .fini = helpers_fini);

/* Dumps taken by each way. */
#define DUMPS 6

static const unsigned dump_minors[] = {11, 12, 15};

ParameterizedTestParameters(task_dumps, running_task_frames)
{
	size_t n = sizeof dump_minors / sizeof dump_minors[0];
	return cr_make_param_array(struct python_param, python_params_of_minors(dump_minors, n), n, python_params_free);
}

static const char *frame_qualname(json_t *frames, size_t k)
{
	return jstr(json_array_get(frames, k), "qualname");
}

/* Whether the dump's frames hold one of the coroutine spin(): the thread runs a spinning task. */
static bool frames_in_spin(json_t *frames)
{
	for (size_t k = 0; k < json_array_size(frames); k++)
		if (frame_qualname(frames, k) && strcmp(frame_qualname(frames, k), "spin") == 0)
			return true;
	return false;
}

/*
 * One dump's tasks against its threads: every task has frames; a thread
 * in spin() has exactly one running task (unless the dump left it unread),
 * whose frames are the thread's innermost ones down to spin(); a thread
 * elsewhere has none.  The number of running tasks is added to *running.
 */
static void dump_check(json_t *dump, const char *ctx, int *running)
{
	json_t *tasks = json_object_get(dump, "tasks");
	cr_assert(json_is_array(tasks), "%s: no tasks in the dump", ctx);
	cr_expect(json_is_null(json_object_get(dump, "tasks_error")), "%s: tasks_error %s", ctx,
	          json_string_value(json_object_get(dump, "tasks_error")));
	/* Past the daemon's time for a dump (a busy host) the tasks not read yet are left out. */
	bool cut = json_is_true(json_object_get(dump, "tasks_cut"));
	size_t i;
	json_t *t;
	json_array_foreach(tasks, i, t)
		cr_expect(json_array_size(json_object_get(t, "frames")) > 0, "%s: task %s%s has no frames", ctx,
		          jstr(t, "name"), json_is_true(json_object_get(t, "running")) ? " (running)" : "");
	size_t k;
	json_t *th;
	json_array_foreach(json_object_get(dump, "threads"), k, th) {
		json_t *frames = json_object_get(th, "frames");
		json_t *run = NULL;
		int n = 0;
		json_array_foreach(tasks, i, t) {
			if (json_is_true(json_object_get(t, "running")) &&
			    jint(t, "thread_id") == jint(th, "thread_id")) {
				run = t;
				n++;
			}
		}
		*running += n;
		bool spinning = frames_in_spin(frames);
		cr_expect(n == (spinning ? 1 : 0) || (cut && n == 0), "%s: %d tasks running on a thread %s spin()",
		          ctx, n, spinning ? "in" : "not in");
		if (!run)
			continue;
		json_t *own = json_object_get(run, "frames");
		size_t m = json_array_size(own);
		cr_expect(m > 0 && strcmp(frame_qualname(own, m - 1) ? frame_qualname(own, m - 1) : "", "spin") == 0,
		          "%s: the running task %s does not start at its coroutine spin()", ctx, jstr(run, "name"));
		for (size_t f = 0; f < m && f < json_array_size(frames); f++) {
			json_t *a = json_array_get(own, f), *b = json_array_get(frames, f);
			cr_expect(strcmp(jstr(a, "qualname"), jstr(b, "qualname")) == 0 && jint(a, "line") == jint(b, "line"),
			          "%s: the running task's frame %zu is %s:%lld, its thread's %s:%lld", ctx, f,
			          jstr(a, "qualname"), (long long)jint(a, "line"), jstr(b, "qualname"),
			          (long long)jint(b, "line"));
		}
	}
}

/* Dumps by the daemon, of the process it samples, and by pyprofd dump. */
ParameterizedTest(struct python_param *p, task_dumps, running_task_frames, .timeout = 240)
{
	if (p->none)
		cr_skip_test("no Python 3.%u here", p->minor);
	char ctx[PATH_MAX + 160], py[PATH_MAX + 64], script[PATH_MAX], pid[16];
	target_script("task_spin.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", NULL};
	test_target_start_python(&t, &p->py, args);
	json_decref(test_target_wait_report(&t, 60));
	struct daemon d;
	daemon_start(&d, NULL);
	const char *attach[] = {"attach", pid_text(t.pid, pid, sizeof pid), "--rate", "100", "--async-aware", NULL};
	ctl_ok(&d, attach);
	int running = 0;
	for (int i = 0; i < DUMPS; i++) {
		snprintf(ctx, sizeof ctx, "Python %s, pyprofd-ctl dump %d", python_describe(&p->py, py, sizeof py), i);
		const char *dump[] = {"dump", pid, "--async-aware", NULL};
		json_t *doc = ctl_json(&d, dump);
		dump_check(doc, ctx, &running);
		json_decref(doc);
	}
	daemon_stop(&d);
	for (int i = 0; i < DUMPS; i++) {
		snprintf(ctx, sizeof ctx, "Python %s, pyprofd dump %d", python_describe(&p->py, py, sizeof py), i);
		json_t *doc = dump_json(t.pid, (const char *const[]){"--json", "--async-aware", NULL}, ctx);
		dump_check(doc, ctx, &running);
		json_decref(doc);
	}
	/* The loop's thread runs one of the two nearly all the time: the dumps must have seen it. */
	cr_expect_gt(running, 0, "Python %s: no dump of %d showed a running task", py, 2 * DUMPS);
	test_target_kill(&t);
}

/* The task names of a dump, sorted, one a line. */
static void dump_task_names(json_t *dump, char *out, size_t len)
{
	json_t *tasks = json_object_get(dump, "tasks");
	const char *names[64];
	size_t n = 0, at = 0;
	for (size_t i = 0; i < json_array_size(tasks) && n < 64; i++)
		names[n++] = jstr(json_array_get(tasks, i), "name");
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && strcmp(names[k - 1], names[k]) > 0; k--) {
			const char *swap = names[k];
			names[k] = names[k - 1];
			names[k - 1] = swap;
		}
	out[0] = '\0';
	for (size_t i = 0; i < n && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "%s\n", names[i]);
}

/* Whether every line of some is a line of all. */
static bool names_within(const char *some, const char *all)
{
	for (const char *line = some; *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
		bool found = false;
		for (const char *a = all; *a && !found;) {
			const char *aend = strchr(a, '\n');
			size_t alen = aend ? (size_t)(aend - a) + 1 : strlen(a);
			found = alen == len && memcmp(a, line, len) == 0;
			a += alen;
		}
		if (!found)
			return false;
		line += len;
	}
	return true;
}

/*
 * pyprofd-ctl dump --async-aware: the daemon's dump has the task tree, the
 * same tasks as pyprofd dump --async-aware finds, whether the process is
 * one it samples or not; without the flag, none.
 */
Test(task_dumps, by_the_daemon, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = &pys[n - 1];
	cr_assert(py->minor >= 11, "the newest interpreter is older than 3.11");
	char ctx[PATH_MAX + 128], pyd[PATH_MAX + 64], script[PATH_MAX], pid[16];
	snprintf(ctx, sizeof ctx, "Python %s", python_describe(py, pyd, sizeof pyd));
	target_script("tasks.py", script, sizeof script);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", "3", "park", NULL};
	test_target_start_python(&t, py, args);
	json_decref(test_target_wait_report(&t, 60));
	json_t *own = dump_json(t.pid, (const char *const[]){"--json", "--async-aware", NULL}, ctx);
	static char want[4096], got[4096];
	dump_task_names(own, want, sizeof want);
	cr_assert(json_array_size(json_object_get(own, "tasks")) > 3, "%s: pyprofd dump found no tasks", ctx);
	json_decref(own);
	struct daemon d;
	daemon_start(&d, NULL);
	const char *dump[] = {"dump", pid_text(t.pid, pid, sizeof pid), "--async-aware", NULL};
	const char *plain[] = {"dump", pid, NULL};
	const char *attach[] = {"attach", pid, "--rate", "100", NULL};
	for (int attached = 0; attached <= 1; attached++) {
		if (attached)
			ctl_ok(&d, attach);
		json_t *doc = ctl_json(&d, dump);
		dump_task_names(doc, got, sizeof got);
		cr_expect(json_is_null(json_object_get(doc, "tasks_error")), "%s: tasks_error %s", ctx,
		          json_string_value(json_object_get(doc, "tasks_error")));
		/* Past the daemon's time for a dump (a busy host) the tasks not read yet are left out. */
		if (json_is_true(json_object_get(doc, "tasks_cut")))
			cr_expect(names_within(got, want), "%s, %s: the daemon's dump has tasks pyprofd dump's has not:\n%s",
			          ctx, attached ? "attached" : "not attached", got);
		else
			cr_expect_str_eq(got, want, "%s, %s: the daemon's dump has other tasks than pyprofd dump's:\n%s",
			                 ctx, attached ? "attached" : "not attached", want);
		json_decref(doc);
		doc = ctl_json(&d, plain);
		cr_expect(json_array_size(json_object_get(doc, "tasks")) == 0, "%s: tasks in a dump not asked for them",
		          ctx);
		json_decref(doc);
	}
	daemon_stop(&d);
	test_target_kill(&t);
}
