/*
 * Threads named as Python names them (Thread.name), on every supported
 * interpreter: a target's workers (tests/targets/threadnames.py) by their
 * whole names, longer than the kernel's 15 bytes, in list, dump and the
 * history; a name past 63 bytes cut at a whole character; a thread renamed
 * after it started by its new name; a thread threading does not know by
 * the kernel's name or none.  A fork's child shows its own threads alone,
 * from its first sample.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(threads, .init = helpers_init, .fini = helpers_fini);

/* How many times a name is looked for, a tenth of a second apart: names are read again every few seconds. */
#define THREADS_TRIES 600

/* Whether a JSON array of threads (list's, dump's) holds one named `name`. */
static bool threads_have(json_t *threads, const char *name)
{
	size_t i;
	json_t *t;
	json_array_foreach(threads, i, t) {
		const char *got = json_string_value(json_object_get(t, "name"));
		if (got && strcmp(got, name) == 0)
			return true;
	}
	return false;
}

/* The threads list shows of pid (owned by *root), NULL when pid is not listed. */
static json_t *threads_listed(const struct daemon *d, pid_t pid, json_t **root)
{
	static const char *const list[] = {"list", NULL};
	*root = ctl_json(d, list);
	size_t i;
	json_t *e;
	json_array_foreach(*root, i, e)
		if (jint(e, "pid") == pid)
			return json_object_get(e, "threads");
	return NULL;
}

/* Wait until list names one of pid's threads `name`; false when it never did. */
static bool threads_wait_listed(const struct daemon *d, pid_t pid, const char *name)
{
	for (int k = 0; k < THREADS_TRIES; k++) {
		json_t *root, *threads = threads_listed(d, pid, &root);
		bool found = threads && threads_have(threads, name);
		json_decref(root);
		if (found)
			return true;
		pause_ms(100);
	}
	return false;
}

/* Wait until the history's speedscope profiles of pid hold one named `title` ("NAME (tid "); false when never. */
static bool threads_wait_stored(const struct daemon *d, const char *pid, const char *title)
{
	const char *speedscope[] = {"query", "--pid", pid, "--format", "speedscope", NULL};
	for (int k = 0; k < THREADS_TRIES; k++) {
		json_t *j = ctl_json(d, speedscope);
		bool found = false;
		size_t i;
		json_t *p;
		json_array_foreach(json_object_get(j, "profiles"), i, p) {
			const char *name = json_string_value(json_object_get(p, "name"));
			found |= name && strncmp(name, title, strlen(title)) == 0;
		}
		json_decref(j);
		if (found)
			return true;
		pause_ms(100);
	}
	return false;
}

/* The target's name of 45 characters of two bytes, as pyprofd keeps it: the first 63 bytes, whole characters. */
static void threads_long_name(char *out, size_t len)
{
	size_t o = (size_t)snprintf(out, len, "long-");
	for (int i = 0; i < 29 && o + 2 < len; i++, o += 2)
		memcpy(out + o, "\xc3\xa9", 2);
	out[o] = '\0';
}

Test(threads, named_as_python_names_them, .timeout = 900)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX], long_name[64];
	target_script("threadnames.py", script, sizeof script);
	threads_long_name(long_name, sizeof long_name);
	cr_assert_eq(strlen(long_name), 63);
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	for (size_t i = 0; i < n; i++) {
		char ctx[PATH_MAX + 64], pid[16];
		python_describe(&pys[i], ctx, sizeof ctx);
		struct test_target t;
		const char *args[] = {"-I", script, "{report}", NULL};
		test_target_start_python(&t, &pys[i], args);
		json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
		pid_text(t.pid, pid, sizeof pid);
		ctl_attach_at(&d, t.pid, "100");

		/* Whole names, past the kernel's 15 bytes; the main thread as Python calls it. */
		static const char *const whole[] = {"worker-payments-1", "worker-payments-2", "MainThread"};
		for (size_t k = 0; k < sizeof whole / sizeof *whole; k++)
			cr_expect(threads_wait_listed(&d, t.pid, whole[k]), "%s: list never named a thread %s",
			          ctx, whole[k]);
		cr_expect(threads_wait_listed(&d, t.pid, long_name),
		          "%s: list never named a thread by its first 63 bytes", ctx);
		/* Nothing cut to the kernel's 15 bytes where Python has the name. */
		json_t *root, *threads = threads_listed(&d, t.pid, &root);
		cr_expect(!threads_have(threads, "worker-payments"), "%s: a name cut as the kernel cuts it", ctx);
		json_decref(root);

		const char *dump[] = {"dump", pid, NULL};
		json_t *j = ctl_json(&d, dump);
		cr_expect(threads_have(json_object_get(j, "threads"), "worker-payments-1"),
		          "%s: dump does not name worker-payments-1", ctx);
		json_decref(j);

		cr_expect(threads_wait_stored(&d, pid, "worker-payments-1 (tid "),
		          "%s: the history never named worker-payments-1", ctx);

		/* Renamed by the program after it started: its new name, in time. */
		cr_assert_eq(kill(t.pid, SIGUSR1), 0);
		cr_expect(threads_wait_listed(&d, t.pid, "renamed-worker-payments-2"),
		          "%s: list never showed the renamed thread's new name", ctx);
		cr_expect(threads_wait_stored(&d, pid, "renamed-worker-payments-2 (tid "),
		          "%s: the history never named the renamed thread", ctx);

		const char *detach[] = {"detach", pid, NULL};
		ctl_ok(&d, detach);
		test_target_kill(&t);
	}
	daemon_stop(&d);
}

/*
 * A program that spoils what threading tells of its threads: a name that is
 * no str, an object that is no Thread under a live thread's ident, a key no
 * thread has.  Its good thread is named still.
 */
static const char spoilt_program[] =
	"import json, os, sys, threading, time\n"
	"def work():\n"
	"    while True:\n"
	"        time.sleep(0.01)\n"
	"threads = [threading.Thread(target=work, name=n, daemon=True)\n"
	"           for n in ('good-name-thread', 'bad-name-thread', 'swapped-thread')]\n"
	"for t in threads:\n"
	"    t.start()\n"
	"threads[1]._name = 12345\n"
	"threading._active[threads[2].ident] = object()\n"
	"threading._active[1] = 'not a thread'\n"
	"with open(sys.argv[1] + '.tmp', 'w') as f:\n"
	"    json.dump({'pid': os.getpid()}, f)\n"
	"os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
	"while True:\n"
	"    time.sleep(0.05)\n";

Test(threads, what_threading_holds_spoilt_names_no_thread, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		char ctx[PATH_MAX + 64], pid[16], why[1024];
		python_describe(&pys[i], ctx, sizeof ctx);
		struct test_target t;
		const char *args[] = {"-I", "-c", spoilt_program, "{report}", NULL};
		test_target_start_python(&t, &pys[i], args);
		json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
		pid_text(t.pid, pid, sizeof pid);
		const char *argv[] = {pyprofd_bin(), "dump", pid, "--json", NULL};
		struct run_result r;
		run_command(&r, argv, NULL);
		cr_assert(r.exited && r.code == 0, "%s: dump: %s", ctx, run_describe(&r, why, sizeof why));
		json_t *j = json_loads(r.out, 0, NULL);
		cr_assert_not_null(j, "%s: dump --json is not JSON:\n%s", ctx, r.out);
		json_t *threads = json_object_get(j, "threads");
		cr_expect_eq(json_array_size(threads), 4, "%s: %zu threads", ctx, json_array_size(threads));
		cr_expect(threads_have(threads, "good-name-thread"), "%s: the good thread is not named:\n%s", ctx,
		          r.out);
		cr_expect(!threads_have(threads, "12345") && !threads_have(threads, "not a thread"),
		          "%s: a name from what is no name:\n%s", ctx, r.out);
		/* The kernel's names are all the spoilt ones may have (3.14+ set them), or none. */
		size_t k;
		json_t *th;
		json_array_foreach(threads, k, th) {
			const char *name = json_string_value(json_object_get(th, "name"));
			cr_expect(!name || (strcmp(name, "") == 0 || strcmp(name, "MainThread") == 0 ||
			                   strcmp(name, "good-name-thread") == 0 || strcmp(name, "bad-name-thread") == 0 ||
			                   strcmp(name, "swapped-thread") == 0),
			          "%s: a thread named %s", ctx, name ? name : "(none)");
		}
		json_decref(j);
		run_result_free(&r);
		test_target_kill(&t);
	}
}

/* One interpreter of each reader of thread ids: pthread descriptors (3.8), the thread state's (3.12, 3.15). */
static const unsigned fork_minors[] = {8, 12, 15};

ParameterizedTestParameters(threads, fork_child_shows_its_own_alone)
{
	size_t n = sizeof fork_minors / sizeof fork_minors[0];
	return cr_make_param_array(struct python_param, python_params_of_minors(fork_minors, n), n, python_params_free);
}

/* The pid (as this process sees it) of the first child of pid; -1 when it has none yet. */
static pid_t threads_first_child(pid_t pid)
{
	char path[64], buf[64];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int child = -1;
	if (!fgets(buf, sizeof buf, f) || sscanf(buf, "%d", &child) != 1)
		child = -1;
	fclose(f);
	return child;
}

/*
 * A fork's child sampled while its memory still holds its parent's
 * thread states (the window os.fork closes at once, held open seconds by
 * the target): none of the parent's threads in its history, and its own
 * work once it ran.
 */
ParameterizedTest(struct python_param *p, threads, fork_child_shows_its_own_alone, .timeout = 120)
{
	if (p->none)
		cr_skip_test("no Python 3.%u here", p->minor);
	char ctx[PATH_MAX + 64], script[PATH_MAX], pid[16];
	python_describe(&p->py, ctx, sizeof ctx);
	target_script("fork_window.py", script, sizeof script);
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	struct test_target t;
	const char *args[] = {"-I", script, "{report}", "2", "2", NULL};
	test_target_start_python(&t, &p->py, args);
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	pid_t child = threads_first_child(t.pid);
	cr_assert_gt(child, 0, "%s: the target's child is not to be found", ctx);
	ctl_attach_at(&d, child, "100");
	pid_text(child, pid, sizeof pid);

	const char *collapsed[] = {"query", "--pid", pid, "--format", "collapsed", NULL};
	struct run_result r = {0};
	/* Until the child ended and its history holds its work: a busy host runs it late. */
	for (int k = 0; k < 200; k++) {
		run_result_free(&r);
		ctl_run(&d, &r, collapsed, NULL);
		if (r.out && strstr(r.out, "child_spin") && kill(child, 0) != 0)
			break;
		pause_ms(100);
	}
	const char *text = r.out ? r.out : "";
	cr_expect(strstr(text, "child_spin"), "%s: the child's own work is not in its history:\n%s", ctx, text);
	cr_expect(!strstr(text, "parent_worker_spin"), "%s: the parent's threads in the child's history:\n%s", ctx,
	          text);
	run_result_free(&r);
	test_target_kill(&t);
	daemon_stop(&d);
}
