/*
 * Dumps of asyncio tasks by the daemon (pyprofd-ctl dump --async-aware)
 * and by pyprofd dump.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(task_dumps, .init = helpers_init, .fini = helpers_fini);

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
