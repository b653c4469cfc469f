/*
 * pyprofd-ctl top as an operator meets it: the live view on terminals of
 * common sizes (a pseudo-terminal of a set size), its header always in
 * sight and a long path giving way before the line number does; and top
 * over every process of a label, as a pool of workers is watched.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(top, .init = helpers_init, .fini = helpers_fini);

/* What clears the screen before each frame of the live view. */
#define TOP_FRAME_START "\033[H\033[2J"
/* Only to fail a test that would otherwise wait forever: no figure is asserted on time. */
#define TOP_PTY_GIVE_UP_S 60

/*
 * A script in a deep directory: a chain of functions down to one spinning
 * at line 2, and idle threads, more of each than a terminal has rows, so
 * both views fill the screen.
 */
#define DEEP_LEVELS 48
#define DEEP_THREADS 48
static void deep_script(const char *function, char *text, size_t len)
{
	size_t at = (size_t)snprintf(text, len,
	                             "import os, sys, threading, time\n"
	                             "def %s():\n"
	                             "    while True:\n"
	                             "        pass\n",
	                             function);
	for (int i = 0; i < DEEP_LEVELS && at < len; i++) {
		if (i + 1 < DEEP_LEVELS)
			at += (size_t)snprintf(text + at, len - at, "def level_%d():\n    level_%d()\n", i, i + 1);
		else
			at += (size_t)snprintf(text + at, len - at, "def level_%d():\n    %s()\n", i, function);
	}
	if (at < len)
		snprintf(text + at, len - at,
		         "for _ in range(%d):\n"
		         "    threading.Thread(target=time.sleep, args=(1e6,), daemon=True).start()\n"
		         "with open(sys.argv[1] + '.tmp', 'w') as f:\n"
		         "    f.write('{}')\n"
		         "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
		         "level_0()\n",
		         DEEP_THREADS);
}

/* Write the script under a path far wider than a terminal; its path into out. */
static void write_deep_script(const char *function, char *out, size_t len)
{
	char dir[PATH_MAX - 256];
	scratch_dir(dir, sizeof dir);
	static const char *const levels[] = {"a_directory_with_a_rather_long_name",
	                                     "another_level_of_packages_below_it", "pkg"};
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s", dir);
	for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
		size_t at = strlen(path);
		snprintf(path + at, sizeof path - at, "/%s", levels[i]);
		cr_assert(mkdir(path, 0755) == 0, "%s: %s", path, strerror(errno));
	}
	char text[8192];
	deep_script(function, text, sizeof text);
	cr_assert(snprintf(out, len, "%s/module.py", path) < (int)len);
	write_text_file(out, text);
}

/* A target running the deep script's spinning function, started and ready. */
static void start_deep(struct test_target *t, const struct python *py, const char *function)
{
	char script[PATH_MAX];
	write_deep_script(function, script, sizeof script);
	const char *args[] = {"-I", script, "{report}", NULL};
	test_target_start_python(t, py, args);
	json_decref(test_target_wait_report(t, TARGET_READY_TIMEOUT_S));
}

/* How many times needle occurs in s. */
static size_t occurrences(const char *s, const char *needle)
{
	size_t n = 0;
	for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/*
 * `pyprofd-ctl top ARGS` on a terminal of rows x cols: for each step, once
 * a whole frame (one followed by the next) drawn since the last key shows
 * step's until, its key is pressed; the last key is q.  What it wrote
 * (malloc'd).
 */
struct top_step {
	const char *until;
	char key;
};
static char *top_steps_on_a_terminal(const struct daemon *d, const char *const args[], unsigned short rows,
                                     unsigned short cols, const struct top_step *steps, size_t nsteps)
{
	const char *argv[16] = {ctl_bin(), "--socket", d->sock, "top"};
	size_t n = 4;
	for (size_t i = 0; args[i] && n + 1 < sizeof argv / sizeof argv[0]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	struct winsize ws = {.ws_row = rows, .ws_col = cols};
	int master;
	pid_t pid = forkpty(&master, NULL, NULL, &ws);
	cr_assert(pid >= 0, "forkpty: %s", strerror(errno));
	if (pid == 0) {
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	size_t len = 0, cap = 1 << 16, step = 0, since = 0;
	char *out = malloc(cap);
	cr_assert_not_null(out);
	out[0] = '\0';
	time_t give_up = time(NULL) + TOP_PTY_GIVE_UP_S;
	for (;;) {
		struct pollfd pfd = {.fd = master, .events = POLLIN};
		int ready = poll(&pfd, 1, 200);
		if (ready > 0) {
			if (len + 4096 + 1 > cap) {
				cap *= 2;
				out = realloc(out, cap);
				cr_assert_not_null(out);
			}
			ssize_t got = read(master, out + len, 4096);
			if (got <= 0) /* EIO: the program ended and the terminal closed */
				break;
			len += (size_t)got;
			out[len] = '\0';
		}
		if (step < nsteps) {
			/* A whole frame is one the next has started after; the first after a key may predate it. */
			const char *from = out + since, *last = NULL;
			for (const char *p = strstr(from, TOP_FRAME_START); p; p = strstr(p + 1, TOP_FRAME_START))
				last = p;
			const char *hit = strstr(from, steps[step].until);
			if (hit && last && hit < last && occurrences(from, TOP_FRAME_START) >= 3) {
				cr_assert(write(master, &steps[step].key, 1) == 1);
				since = len;
				step++;
			}
		}
		cr_assert(time(NULL) < give_up, "top never showed '%s' in a whole frame:\n%s",
		          step < nsteps ? steps[step].until : "its end", out);
	}
	close(master);
	int status;
	cr_assert(waitpid(pid, &status, 0) == pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "top ended with %d:\n%s", status, out);
	return out;
}

/* The same until a whole frame shows `until`; then q. */
static char *top_on_a_terminal(const struct daemon *d, const char *const args[], unsigned short rows,
                               unsigned short cols, const char *until)
{
	const struct top_step q = {until, 'q'};
	return top_steps_on_a_terminal(d, args, rows, cols, &q, 1);
}

/* Columns a line takes: UTF-8 characters, the terminal's \r left out. */
static size_t line_columns(const char *line, size_t len)
{
	size_t w = 0;
	for (size_t i = 0; i < len; i++)
		w += line[i] != '\r' && ((unsigned char)line[i] & 0xc0) != 0x80;
	return w;
}

/*
 * Every whole frame fits the terminal: its first line is the header, it
 * has fewer newlines than rows (one more and the header scrolls off), no
 * line is wider than cols.
 */
static void expect_frames_fit(const char *out, unsigned short rows, unsigned short cols, const char *header)
{
	size_t frames = 0;
	for (const char *f = strstr(out, TOP_FRAME_START); f; f = strstr(f + 1, TOP_FRAME_START)) {
		const char *body = f + strlen(TOP_FRAME_START);
		const char *end = strstr(body, TOP_FRAME_START);
		if (!end)
			break; /* the last frame: cut by q */
		frames++;
		cr_assert(strncmp(body, header, strlen(header)) == 0, "%ux%u: a frame starts '%.40s'", rows, cols,
		          body);
		size_t lines = 0;
		for (const char *l = body; l < end;) {
			const char *nl = memchr(l, '\n', (size_t)(end - l));
			const char *stop = nl ? nl : end;
			cr_assert_leq(line_columns(l, (size_t)(stop - l)), cols, "%ux%u: a line is too wide: %.*s",
			              rows, cols, (int)(stop - l), l);
			if (!nl)
				break;
			lines++;
			l = nl + 1;
		}
		cr_assert_lt(lines, rows, "%ux%u: a frame of %zu lines scrolls its header off:\n%.*s", rows, cols,
		             lines, (int)(end - body), body);
	}
	cr_assert_geq(frames, 2, "%ux%u: fewer than two whole frames:\n%s", rows, cols, out);
}

/*
 * The function view and the thread view at 24, 30 and 40 rows by 80
 * columns: the header stays, and the spinning function's row ends with its
 * file's name and line though the path is wider than the terminal.
 */
Test(top, the_live_view_fits_the_terminal, .timeout = 240)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target t;
	start_deep(&t, &pys[n - 1], "spin_in_a_deep_file");
	struct daemon d;
	daemon_start(&d, NULL);
	ctl_attach_at(&d, t.pid, "100");
	char pid[16], header[32];
	pid_text(t.pid, pid, sizeof pid);
	snprintf(header, sizeof header, "PID %s  ", pid);

	static const unsigned short heights[] = {24, 30, 40};
	for (size_t i = 0; i < sizeof heights / sizeof heights[0]; i++) {
		const char *functions[] = {pid, "--window", "2", NULL};
		char *out = top_on_a_terminal(&d, functions, heights[i], 80, "/pkg/module.py:2)");
		expect_frames_fit(out, heights[i], 80, header);
		cr_assert(strstr(out, "spin_in_a_deep_file (\u2026/") && strstr(out, "/pkg/module.py:2)"),
		          "the long path did not give way to the line number:\n%s", out);
		free(out);
		const char *threads[] = {pid, "--threads", "--window", "2", NULL};
		out = top_on_a_terminal(&d, threads, heights[i], 80, "%Idle");
		expect_frames_fit(out, heights[i], 80, header);
		free(out);
	}
	test_target_kill(&t);
	daemon_stop(&d);
}

/* Whether a top answer's rows hold the function with some own samples. */
static bool top_has_own(json_t *top, const char *function)
{
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(top, "rows"), i, row) {
		if (strcmp(jstr(row, "function"), function) == 0 && jint(row, "own") > 0)
			return true;
	}
	return false;
}

/*
 * top --label counts every process with the label together (a pool of
 * two workers and a third process of another service left out), by
 * function and by thread; a pid and labels together are refused.
 */
Test(top, a_label_selects_a_pool, .timeout = 240)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target w1, w2, other;
	start_deep(&w1, &pys[n - 1], "first_worker");
	start_deep(&w2, &pys[0], "second_worker");
	start_deep(&other, &pys[n - 1], "another_service");
	struct daemon d;
	daemon_start(&d, NULL);
	char p1[16], p2[16], p3[16];
	const char *a1[] = {"attach", pid_text(w1.pid, p1, sizeof p1), "--label", "service=pool", NULL};
	const char *a2[] = {"attach", pid_text(w2.pid, p2, sizeof p2), "--label", "service=pool", NULL};
	const char *a3[] = {"attach", pid_text(other.pid, p3, sizeof p3), "--label", "service=other", NULL};
	ctl_ok(&d, a1);
	ctl_ok(&d, a2);
	ctl_ok(&d, a3);

	const char *pool[] = {"top", "--label", "service=pool", "--window", "5", NULL};
	json_t *top = NULL;
	for (int tries = 0; tries < 100; tries++) {
		json_decref(top);
		top = ctl_json(&d, pool);
		if (top_has_own(top, "first_worker") && top_has_own(top, "second_worker"))
			break;
		pause_ms(100);
	}
	cr_assert(top_has_own(top, "first_worker") && top_has_own(top, "second_worker"),
	          "top --label misses a worker: %s", json_dumps(top, JSON_COMPACT));
	cr_assert(!top_has_own(top, "another_service"), "another label's process was counted: %s",
	          json_dumps(top, JSON_COMPACT));
	cr_assert_eq(jint(top, "processes"), 2);
	cr_assert(json_is_null(json_object_get(top, "pid")));
	/* Each thread says its process: the two main threads are two rows. */
	size_t i, mains = 0;
	json_t *th;
	json_array_foreach(json_object_get(top, "threads"), i, th)
		mains += jint(th, "pid") == w1.pid || jint(th, "pid") == w2.pid;
	cr_assert_geq(mains, 2, "%s", json_dumps(top, JSON_COMPACT));
	json_decref(top);

	/* As a table: the header names the pool. */
	const char *table[] = {"top", "--label", "service=pool", "--window", "5", "--once", NULL};
	struct run_result r;
	ctl_run(&d, &r, table, NULL);
	cr_assert(r.exited && r.code == 0 && strncmp(r.out, "service=pool  2 processes  ", 27) == 0,
	          "%s", r.out);
	run_result_free(&r);

	const char *both[] = {"top", p1, "--label", "service=pool", NULL};
	ctl_expect_failure(&d, both, 2, NULL, "a pid and a label");
	test_target_kill(&w1);
	test_target_kill(&w2);
	test_target_kill(&other);
	daemon_stop(&d);
}

/*
 * Under [sampling] idle = drop the live view says the idle samples were
 * left out, and i takes them in from there, then leaves them out again:
 * the key turns from what the daemon did, not from the command line.
 */
Test(top, the_i_key_turns_from_the_daemons_default, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target t;
	start_deep(&t, &pys[n - 1], "spin_beside_sleepers");
	char dir[PATH_MAX - 64], conf[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", dir);
	write_text_file(conf, "[sampling]\nidle = drop\n");
	const char *extra[] = {"--config", conf, NULL};
	struct daemon d;
	daemon_start(&d, extra);
	ctl_attach_at(&d, t.pid, "100");
	char pid[16];
	pid_text(t.pid, pid, sizeof pid);
	/* Kept, the header's idle share is followed by the sort; left out, by "(left out)". */
	static const struct top_step steps[] = {
		{"(left out)  sort: own", 'i'}, {"%  sort: own", 'i'}, {"(left out)  sort: own", 'q'}};
	const char *args[] = {pid, "--window", "2", NULL};
	free(top_steps_on_a_terminal(&d, args, 30, 100, steps, sizeof steps / sizeof steps[0]));
	test_target_kill(&t);
	daemon_stop(&d);
}
