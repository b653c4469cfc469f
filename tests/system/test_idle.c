/*
 * Idle on a busy host.  A thread that sleeps in a loop, woken while its CPU
 * is taken by others, waits in the run queue before it runs again: /proc
 * calls it running ('R') as it calls a thread on a CPU.  Judged by that, its
 * samples were kept by --no-idle as busy ones.  The kernel's look tells the
 * two apart: a thread queued with its stack as it was is a waiter woken, not
 * a busy thread, and is idle.
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(idle, .init = helpers_init, .fini = helpers_fini, .timeout = 300);

/* Sleeps in short naps forever, in a thread of its own and the main thread. */
static const char napper_program[] =
	"import json, os, sys, threading, time\n"
	"def napping():\n"
	"    while True:\n"
	"        time.sleep(0.001)\n"
	"threading.Thread(target=napping, daemon=True).start()\n"
	"with open(sys.argv[1] + '.tmp', 'w') as f:\n"
	"    json.dump({'pid': os.getpid()}, f)\n"
	"os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
	"napping()\n";

/* The samples whose innermost function is fn, from `query --format table` (with extra). */
static json_int_t idle_own(const struct daemon *d, const char *pid, const char *fn, const char *extra)
{
	const char *args[] = {"query", "--pid", pid, "--format", "table", extra, NULL};
	json_t *j = ctl_json(d, args);
	json_int_t own = 0;
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(j, "functions"), i, row) {
		const char *name = json_string_value(json_object_get(row, "function"));
		if (name && strcmp(name, fn) == 0)
			own += jint(row, "own");
	}
	json_decref(j);
	return own;
}

Test(idle, a_waiter_queued_for_a_cpu_is_idle)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = NULL;
	for (size_t i = 0; i < n; i++)
		if (!pys[i].root_len && !pys[i].contained && !pys[i].free_threaded && !pys[i].debug)
			py = &pys[i];
	cr_assert_not_null(py, "no CPython of the host's own");

	struct daemon d;
	daemon_start(&d, NULL);
	static const char *const status[] = {"status", NULL};
	json_t *st = ctl_json(&d, status);
	const char *look = json_string_value(json_object_get(json_object_get(st, "kernel"), "look"));
	bool looks = look && strcmp(look, "on") == 0;
	json_decref(st);
	if (!looks) {
		daemon_stop(&d);
		cr_skip_test("the kernel's look is off here (%s)", look ? look : "?");
	}

	/* The napper and two spinners share one CPU, the napper last in line. */
	char *const spin[] = {"taskset", "-c", "0", "sh", "-c", "while :; do :; done", NULL};
	pid_t spinners[2] = {spawn_process(spin, NULL), spawn_process(spin, NULL)};
	const char *argv[] = {"taskset", "-c", "0", "nice", "-n", "19", python_exec_path(py), "-I", "-c",
	                      napper_program, "{report}", NULL};
	struct test_target target;
	test_target_start_argv(&target, argv);
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	char p[16];
	pid_text(target.pid, p, sizeof p);
	ctl_attach_at(&d, target.pid, "100");
	pause_ms(6000);
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	for (int i = 0; i < 2; i++) {
		kill(spinners[i], SIGKILL);
		waitpid(spinners[i], NULL, 0);
	}

	json_int_t all = idle_own(&d, p, "napping", NULL), busy = idle_own(&d, p, "napping", "--no-idle");
	cr_assert_gt(all, 100, "the napper was sampled %lld times", (long long)all);
	/* A sample may catch it on its CPU, between two naps: few do. */
	cr_assert_lt(busy * 10, all, "--no-idle kept %lld of the napper's %lld samples", (long long)busy,
	             (long long)all);
	daemon_stop(&d);
	test_target_kill(&target);
}
