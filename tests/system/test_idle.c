/*
 * Idle on a busy host.  A thread that sleeps in a loop, woken while its CPU
 * is taken by others, waits in the run queue before it runs again: /proc
 * calls it running ('R') as it calls a thread on a CPU.  Judged by that, its
 * samples were kept by --no-idle as busy ones.  The kernel's look tells the
 * two apart: a thread queued with its stack as it was is a waiter woken, not
 * a busy thread, and is idle.
 *
 * And a daemon whose [sampling] idle = drop leaves the waiters out of every
 * view a request does not say otherwise of, and keeps them when it does.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <signal.h>
#include <stdlib.h>
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

/* A thread sleeping and the main thread spinning, each in a function of its own. */
static const char sleeper_program[] =
	"import json, os, sys, threading, time\n"
	"def sleeper():\n"
	"    while True:\n"
	"        time.sleep(60)\n"
	"def spinner():\n"
	"    while True:\n"
	"        pass\n"
	"threading.Thread(target=sleeper, daemon=True).start()\n"
	"with open(sys.argv[1] + '.tmp', 'w') as f:\n"
	"    json.dump({'pid': os.getpid()}, f)\n"
	"os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
	"spinner()\n";

/* Both ways of reading a thread's stack (3.8's frame objects, 3.11+'s frames), and 3.15's cache. */
static const unsigned drop_minors[] = {8, 12, 15};

ParameterizedTestParameters(idle, drop_by_default)
{
	size_t n = sizeof drop_minors / sizeof drop_minors[0];
	return cr_make_param_array(struct python_param, python_params_of_minors(drop_minors, n), n,
	                           python_params_free);
}

/* The samples of `query --pid PID` (collapsed, the default format) whose stack holds fn. */
static long long collapsed_with(const struct daemon *d, const char *pid, const char *fn, const char *extra)
{
	const char *args[] = {"query", "--pid", pid, extra, NULL};
	struct run_result r;
	ctl_run(d, &r, args, NULL);
	cr_assert(r.exited && r.code == 0, "query failed: %s", r.err);
	long long n = 0;
	for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
		const char *count = strrchr(line, ' ');
		if (count && strstr(line, fn))
			n += atoll(count + 1);
	}
	run_result_free(&r);
	return n;
}

/* The own samples of fn in `top PID --window 5 --json` (with extra); whether idle was left out. */
static json_int_t top_own(const struct daemon *d, const char *pid, const char *fn, const char *extra,
                          bool *left_out)
{
	const char *args[] = {"top", pid, "--window", "5", extra, NULL};
	json_t *j = ctl_json(d, args);
	*left_out = json_is_true(json_object_get(j, "idle_left_out"));
	json_int_t own = 0;
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(j, "rows"), i, row) {
		const char *name = json_string_value(json_object_get(row, "function"));
		if (name && strcmp(name, fn) == 0)
			own += jint(row, "own");
	}
	json_decref(j);
	return own;
}

/*
 * idle = drop: query and top without a flag leave the sleeping thread out,
 * --idle takes it in, and the spinning thread stays either way.  (Nearly
 * out: a sample may catch the sleeper between two sleeps.)  A reload to
 * keep brings back what the history kept.
 */
ParameterizedTest(struct python_param *p, idle, drop_by_default, .timeout = 120)
{
	if (p->none)
		cr_skip_test("no Python 3.%u here", p->minor);
	char desc[PATH_MAX + 64], conf[PATH_MAX], dir[PATH_MAX - 64], pid[16];
	python_describe(&p->py, desc, sizeof desc);
	struct test_target t;
	const char *args[] = {"-I", "-c", sleeper_program, "{report}", NULL};
	test_target_start_python(&t, &p->py, args);
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", dir);
	write_text_file(conf, "[sampling]\nidle = drop\n");
	const char *extra[] = {"--config", conf, NULL};
	struct daemon d;
	daemon_start(&d, extra);
	static const char *const status[] = {"status", NULL};
	json_t *st = ctl_json(&d, status);
	cr_assert_str_eq(jstr(json_object_get(st, "sampling"), "idle"), "drop");
	json_decref(st);
	ctl_attach_at(&d, t.pid, "100");
	pid_text(t.pid, pid, sizeof pid);
	pause_ms(3000);

	bool left_out, kept_out;
	json_int_t top_dropped = top_own(&d, pid, "sleeper", NULL, &left_out);
	json_int_t top_kept = top_own(&d, pid, "sleeper", "--idle", &kept_out);
	json_int_t top_spin = top_own(&d, pid, "spinner", NULL, &left_out);
	cr_assert(left_out && !kept_out, "%s: top says idle left out %d, with --idle %d", desc, left_out,
	          kept_out);
	cr_assert_gt(top_kept, 50, "%s: top --idle saw the sleeper %lld times", desc, (long long)top_kept);
	cr_assert_leq(top_dropped * 10, top_kept, "%s: top kept %lld of the sleeper's %lld samples", desc,
	              (long long)top_dropped, (long long)top_kept);
	cr_assert_gt(top_spin, 50, "%s: top saw the spinner %lld times", desc, (long long)top_spin);
	/* The table says what the daemon did, not what the command line asked. */
	const char *once[] = {"top", pid, "--once", NULL}, *once_idle[] = {"top", pid, "--once", "--idle", NULL};
	struct run_result r;
	ctl_run(&d, &r, once, NULL);
	cr_assert(r.exited && r.code == 0 && strstr(r.out, "(left out)"), "%s: %s", desc, r.out);
	run_result_free(&r);
	ctl_run(&d, &r, once_idle, NULL);
	cr_assert(r.exited && r.code == 0 && !strstr(r.out, "(left out)"), "%s: %s", desc, r.out);
	run_result_free(&r);

	const char *detach[] = {"detach", pid, NULL};
	ctl_ok(&d, detach);
	long long kept = collapsed_with(&d, pid, "sleeper", "--idle");
	long long dropped = collapsed_with(&d, pid, "sleeper", NULL);
	long long spin = collapsed_with(&d, pid, "spinner", NULL);
	cr_assert_gt(kept, 100, "%s: query --idle holds %lld samples of the sleeper", desc, kept);
	cr_assert_leq(dropped * 10, kept, "%s: query kept %lld of the sleeper's %lld samples", desc, dropped,
	              kept);
	cr_assert_gt(spin, 100, "%s: query holds %lld samples of the spinner", desc, spin);
	cr_assert_eq(collapsed_with(&d, pid, "sleeper", "--no-idle"), dropped, "%s: --no-idle and the default differ",
	             desc);

	/* A reload to keep shows what the history kept all along. */
	write_text_file(conf, "[sampling]\nidle = keep\n");
	cr_assert(kill(d.pid, SIGHUP) == 0);
	for (int tries = 0;; tries++) {
		st = ctl_json(&d, status);
		bool keep = strcmp(jstr(json_object_get(st, "sampling"), "idle"), "keep") == 0;
		json_decref(st);
		if (keep)
			break;
		cr_assert_lt(tries, 100, "%s: SIGHUP did not apply idle = keep", desc);
		pause_ms(100);
	}
	cr_assert_eq(collapsed_with(&d, pid, "sleeper", NULL), kept, "%s: after the reload", desc);
	daemon_stop(&d);
	test_target_kill(&t);
}
