/*
 * End-to-end tests of `pyprofd record -- COMMAND`: the command recorded
 * from its start with the processes it starts, one profile whose stacks
 * are rooted under their process when there are several, and the
 * command's own exit status.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "pythons.h"

TestSuite(record_run, .init = helpers_init, .fini = helpers_fini);

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Spins a second in a function of its own, then exits 3: its status must be pyprofd's. */
static const char spin_code[] =
	"import sys, time\n"
	"def spin_in_here():\n"
	"    t = time.monotonic()\n"
	"    while time.monotonic() - t < 1.0:\n"
	"        pass\n"
	"def main():\n"
	"    spin_in_here()\n"
	"    sys.exit(3)\n"
	"main()\n";

/* A parent that spins beside a fork worker and a spawn worker, each in a function of its own. */
static const char workers_code[] =
	"import multiprocessing as mp, time\n"
	"def spin(seconds):\n"
	"    t = time.monotonic()\n"
	"    while time.monotonic() - t < seconds:\n"
	"        pass\n"
	"def forked_worker():\n"
	"    spin(1.0)\n"
	"def spawned_worker():\n"
	"    spin(1.0)\n"
	"def parent_own():\n"
	"    spin(0.5)\n"
	"if __name__ == '__main__':\n"
	"    a = mp.get_context('fork').Process(target=forked_worker)\n"
	"    b = mp.get_context('spawn').Process(target=spawned_worker)\n"
	"    a.start()\n"
	"    b.start()\n"
	"    parent_own()\n"
	"    a.join()\n"
	"    b.join()\n";

/* A host interpreter (not in a root) of one minor version, or NULL. */
static const struct python *host_python(struct python *pys, size_t n, unsigned minor)
{
	for (size_t i = 0; i < n; i++)
		if (pys[i].minor == minor && !pys[i].root_len && !pys[i].debug && !pys[i].free_threaded)
			return &pys[i];
	return NULL;
}

/*
 * `pyprofd record -o OUT ARGS... -- [chroot ROOT] PY CMD...`, run to its
 * end; the profile read into *profile (the caller's to free).
 */
static void record_command(struct run_result *r, const struct python *py, const char *const args[],
                           const char *const cmd[], char **profile)
{
	char dir[PATH_MAX], out[PATH_MAX + 32], root[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(out, sizeof out, "%s/out.txt", dir);
	const char *argv[32] = {pyprofd_bin(), "record", "-o", out};
	size_t n = 4;
	for (size_t i = 0; args && args[i] && n + 1 < COUNT(argv); i++)
		argv[n++] = args[i];
	argv[n++] = "--";
	/* An interpreter of the Debian root runs chrooted into it, as a user would run it there. */
	if (py && py->root_len) {
		argv[n++] = "chroot";
		argv[n++] = python_root(py, root, sizeof root);
	}
	if (py)
		argv[n++] = python_exec_path(py);
	for (size_t i = 0; cmd[i] && n + 1 < COUNT(argv); i++)
		argv[n++] = cmd[i];
	argv[n] = NULL;
	struct run_opts opts = {.timeout_s = 60};
	run_command(r, argv, &opts);
	size_t len;
	*profile = access(out, F_OK) == 0 ? file_bytes(out, &len) : strdup("");
}

/* The collapsed line with the most samples, into line (count cut off); its count. */
static long long heaviest(const char *profile, char *line, size_t len)
{
	long long best = -1;
	line[0] = '\0';
	for (const char *l = profile; *l;) {
		size_t n = strcspn(l, "\n");
		const char *space = memrchr(l, ' ', n);
		long long count = space ? atoll(space + 1) : 0;
		if (space && count > best) {
			best = count;
			snprintf(line, len, "%.*s", (int)(space - l), l);
		}
		l += n + (l[n] == '\n');
	}
	return best;
}

/* The line holding `function (`, into line; false when none does. */
static bool line_of(const char *profile, const char *function, char *line, size_t len)
{
	char want[128];
	snprintf(want, sizeof want, "%s (", function);
	for (const char *l = profile; *l;) {
		size_t n = strcspn(l, "\n");
		const char *hit = strstr(l, want);
		if (hit && hit < l + n) {
			snprintf(line, len, "%.*s", (int)n, l);
			return true;
		}
		l += n + (l[n] == '\n');
	}
	return false;
}

static const unsigned run_minors[] = {8, 12, 15};

ParameterizedTestParameters(record_run, from_the_start)
{
	size_t n = COUNT(run_minors);
	return cr_make_param_array(struct python_param, python_params_of_minors(run_minors, n), n,
	                           python_params_free);
}

/*
 * A command recorded from its start: the function it spends its second in
 * has most samples, no process root is added for a single process, and
 * pyprofd exits with the command's own status.
 */
ParameterizedTest(struct python_param *p, record_run, from_the_start, .timeout = 120)
{
	if (p->none)
		cr_skip_test("no Python 3.%u here", p->minor);
	if (p->py.root_len && geteuid() != 0)
		cr_skip_test("the Debian root's interpreters need root to chroot");
	char ctx[PATH_MAX + 64], line[8192], why[512];
	python_describe(&p->py, ctx, sizeof ctx);
	const char *cmd[] = {"-c", spin_code, NULL};
	struct run_result r;
	char *profile;
	record_command(&r, &p->py, NULL, cmd, &profile);
	cr_assert(r.exited && r.code == 3, "%s: exit 3 expected: %s", ctx, run_describe(&r, why, sizeof why));
	long long count = heaviest(profile, line, sizeof line);
	cr_assert(strstr(line, "spin_in_here (") && count >= 30,
	          "%s: the heaviest stack is not spin_in_here's (%lld): %s\n%s", ctx, count, line, profile);
	cr_assert_null(strstr(profile, "process "), "%s: one process got a root: %s", ctx, profile);
	free(profile);
	run_result_free(&r);
}

/*
 * multiprocessing's fork and spawn workers are recorded beside their
 * parent, each function under its own process's root; with --per-thread
 * every main thread is its own process's (tid = pid), from a fork's first
 * sample on, never its parent's.
 */
Test(record_run, workers_under_their_processes, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = host_python(pys, n, 12);
	if (!py)
		cr_skip_test("no CPython 3.12 here");
	char dir[PATH_MAX], script[PATH_MAX + 32], why[512];
	scratch_dir(dir, sizeof dir);
	snprintf(script, sizeof script, "%s/workers.py", dir);
	write_text_file(script, workers_code);
	const char *args[] = {"--per-thread", "--stats-json", NULL};
	const char *cmd[] = {script, NULL};
	struct run_result r;
	char *profile;
	record_command(&r, py, args, cmd, &profile);
	cr_assert(r.exited && r.code == 0, "%s", run_describe(&r, why, sizeof why));
	/* The parent, both workers and spawn's resource tracker, counted in the stats. */
	const char *stats = strstr(r.err, "\"processes\":");
	cr_assert(stats && atoi(stats + strlen("\"processes\":")) >= 3, "processes in the stats: %s", r.err);
	static const char *const functions[] = {"parent_own", "forked_worker", "spawned_worker"};
	int roots[COUNT(functions)];
	for (size_t i = 0; i < COUNT(functions); i++) {
		char line[8192];
		cr_assert(line_of(profile, functions[i], line, sizeof line), "no %s in:\n%s", functions[i],
		          profile);
		const char *root = strstr(line, ";process ");
		cr_assert_not_null(root, "%s is under no process: %s", functions[i], line);
		roots[i] = atoi(root + strlen(";process "));
		for (size_t k = 0; k < i; k++)
			cr_assert_neq(roots[i], roots[k], "%s and %s share process %d", functions[i],
			              functions[k], roots[i]);
	}
	/* "MainThread (tid N);process P (...)": N is P, whichever process. */
	for (const char *l = profile; *l;) {
		size_t len = strcspn(l, "\n");
		int tid, pid;
		if (sscanf(l, "MainThread (tid %d);process %d (", &tid, &pid) == 2)
			cr_assert_eq(tid, pid, "a main thread under another process: %.*s", (int)len, l);
		l += len + (l[len] == '\n');
	}
	free(profile);
	run_result_free(&r);
}

/* A shell that runs Python: the shell is not Python, its child is recorded all the same. */
Test(record_run, a_shell_s_python_child, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = host_python(pys, n, 12);
	if (!py)
		cr_skip_test("no CPython 3.12 here");
	char dir[PATH_MAX], script[PATH_MAX + 32], shell[2 * PATH_MAX + 64], why[512], line[8192];
	scratch_dir(dir, sizeof dir);
	snprintf(script, sizeof script, "%s/spin.py", dir);
	write_text_file(script, spin_code);
	/* "; true" keeps the shell from exec'ing python in its own place. */
	snprintf(shell, sizeof shell, "'%s' '%s'; true", python_exec_path(py), script);
	const char *cmd[] = {"/bin/sh", "-c", shell, NULL};
	struct run_result r;
	char *profile;
	record_command(&r, NULL, NULL, cmd, &profile);
	cr_assert(r.exited && r.code == 0, "%s", run_describe(&r, why, sizeof why));
	cr_assert(line_of(profile, "spin_in_here", line, sizeof line), "no spin_in_here in:\n%s", profile);
	free(profile);
	run_result_free(&r);
}

/* SIGTERM to pyprofd goes on to the command; the profile is written once it exited. */
Test(record_run, a_stop_signal_is_sent_on, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = host_python(pys, n, 12);
	if (!py)
		cr_skip_test("no CPython 3.12 here");
	char dir[PATH_MAX], out[PATH_MAX + 32], log[PATH_MAX + 32], napping[PATH_MAX + 32], line[8192];
	char code[PATH_MAX + 256];
	scratch_dir(dir, sizeof dir);
	snprintf(out, sizeof out, "%s/out.txt", dir);
	snprintf(log, sizeof log, "%s/log.txt", dir);
	snprintf(napping, sizeof napping, "%s/napping", dir);
	snprintf(code, sizeof code,
	         "import time\ndef napping():\n    open('%s', 'w').close()\n    time.sleep(60)\nnapping()\n",
	         napping);
	char *argv[] = {(char *)pyprofd_bin(), "record", "-o", out, "--", (char *)python_exec_path(py), "-c",
	                code, NULL};
	pid_t pid = spawn_process(argv, log);
	/* The command in napping() (a slow host may take long to start it), and sampled there a while. */
	for (int i = 0; i < 600 && access(napping, F_OK) != 0; i++)
		usleep(50000);
	cr_assert_eq(access(napping, F_OK), 0, "the command never reached napping()");
	usleep(500000);
	cr_assert_eq(kill(pid, SIGTERM), 0);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "status %#x", status);
	size_t len;
	char *profile = file_bytes(out, &len);
	cr_assert(line_of(profile, "napping", line, sizeof line), "no napping in:\n%s", profile);
	free(profile);
}

/* Bad command lines: one line on stderr, nothing on stdout, and the status the usage tells. */
Test(record_run, bad_command_lines, .timeout = 60)
{
	static const struct {
		const char *argv[6];
		int code;
		const char *says;
	} cases[] = {
		{{"record", "--", NULL}, 2, "no command after --"},
		{{"record", NULL}, 2, "a PID or -- COMMAND"},
		{{"record", "1", "--", "true", NULL}, 2, "not both"},
		{{"record", "--", "/nonexistent/pyprofd-command", NULL}, 127, "No such file"},
	};
	for (size_t i = 0; i < COUNT(cases); i++) {
		const char *argv[8] = {pyprofd_bin()};
		for (size_t k = 0; cases[i].argv[k]; k++)
			argv[k + 1] = cases[i].argv[k];
		struct run_result r;
		run_command(&r, argv, NULL);
		cr_assert(expect_clean_failure(&r, cases[i].code, cases[i].argv[1] ? cases[i].argv[1] : "record"));
		cr_assert_not_null(strstr(r.err, cases[i].says), "case %zu: %s", i, r.err);
		run_result_free(&r);
	}
}
