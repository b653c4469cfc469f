/*
 * What the daemon holds over a target's life, and what it says about it:
 * out of descriptors a live process is not taken for gone; a process that
 * exited gives back its descriptors at once; max_targets fits the
 * descriptor limit; and floods of events cost a few log lines.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(lifecycle, .init = helpers_init, .fini = helpers_fini);

/* ---- requests on a connection of the test's own ---- */

/* One request and its answer; the test fails if none comes. */
static Pyprofd__Response *ask(int fd, Pyprofd__Request *req, const char *what)
{
	static uint64_t next_id = 1;
	req->id = next_id++;
	cr_assert(send_request(fd, req), "cannot send %s", what);
	Pyprofd__Response *r = recv_response(fd, 30.0);
	cr_assert(r && r->id == req->id, "no answer to %s", what);
	return r;
}

static Pyprofd__Response *ask_attach(int fd, pid_t pid, unsigned rate_hz)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__AttachRequest attach = PYPROFD__ATTACH_REQUEST__INIT;
	attach.pid = pid;
	attach.rate_hz = rate_hz;
	req.body_case = PYPROFD__REQUEST__BODY_ATTACH;
	req.attach = &attach;
	return ask(fd, &req, "attach");
}

static Pyprofd__Response *ask_detach(int fd, pid_t pid)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__DetachRequest detach = PYPROFD__DETACH_REQUEST__INIT;
	detach.pid = pid;
	req.body_case = PYPROFD__REQUEST__BODY_DETACH;
	req.detach = &detach;
	return ask(fd, &req, "detach");
}

static Pyprofd__Response *ask_dump(int fd, pid_t pid)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__DumpRequest dump = PYPROFD__DUMP_REQUEST__INIT;
	dump.pid = pid;
	req.body_case = PYPROFD__REQUEST__BODY_DUMP;
	req.dump = &dump;
	return ask(fd, &req, "dump");
}

static Pyprofd__Response *ask_list(int fd)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__ListRequest list = PYPROFD__LIST_REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_LIST;
	req.list = &list;
	Pyprofd__Response *r = ask(fd, &req, "list");
	cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_LIST, "list failed: %s",
	             r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "?");
	return r;
}

static Pyprofd__Response *ask_status(int fd)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__StatusRequest status = PYPROFD__STATUS_REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_STATUS;
	req.status = &status;
	Pyprofd__Response *r = ask(fd, &req, "status");
	cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_STATUS);
	return r;
}

static const char *error_of(const Pyprofd__Response *r)
{
	return r->result_case == PYPROFD__RESPONSE__RESULT_ERROR && r->error->message ? r->error->message
	                                                                               : "(no error)";
}

/* The list entry of pid in a list answer, or NULL. */
static const Pyprofd__Target *listed(const Pyprofd__Response *list, pid_t pid)
{
	for (size_t i = 0; i < list->list->n_targets; i++)
		if (list->list->targets[i]->pid == pid)
			return list->list->targets[i];
	return NULL;
}

/*
 * Whether each of pids (n) is sampling and gets past samples[i] within 30
 * s; samples[] takes the counts seen.  The first that does not, or 0.
 */
static pid_t sampling_on(int fd, const pid_t *pids, uint64_t *samples, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t seen = 0;
		for (int tries = 0; tries < 120 && seen <= samples[i]; tries++) {
			if (tries)
				pause_ms(250);
			Pyprofd__Response *list = ask_list(fd);
			const Pyprofd__Target *t = listed(list, pids[i]);
			seen = t && strcmp(t->state, "sampling") == 0 ? t->samples : 0;
			pyprofd__response__free_unpacked(list, NULL);
		}
		if (seen <= samples[i])
			return pids[i];
		samples[i] = seen;
	}
	return 0;
}

/* ---- out of descriptors ---- */

/* The first of these the log says, waiting for one within 30 s; NULL if none. */
static const char *log_says_first(const struct daemon *d, const char *a, const char *b)
{
	for (int i = 0; i < 120; i++) {
		char *log = daemon_log(d);
		const char *said = strstr(log, a) ? a : strstr(log, b) ? b : NULL;
		free(log);
		if (said)
			return said;
		pause_ms(250);
	}
	return NULL;
}

/*
 * Out of descriptors, every look at /proc fails with EMFILE: the daemon
 * used to take that for the process being gone, so live targets were
 * declared exited for good and attach or dump of a live pid answered "no
 * such process".  Now a target that could not be looked at stays as it
 * was and keeps sampling (reading memory takes no descriptor); a request
 * that cannot look says why; and once descriptors are back everything
 * works.
 */
Test(lifecycle, out_of_descriptors_live_targets_stay, .timeout = 240)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target sampled[2], other;
	test_target_start(&sampled[0], &pys[0], "nested");
	test_target_start(&sampled[1], &pys[n - 1], "nested");
	test_target_start(&other, &pys[0], "nested");
	json_decref(test_target_wait_report(&sampled[0], TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&sampled[1], TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&other, TARGET_READY_TIMEOUT_S));

	struct daemon d;
	daemon_start(&d, NULL);
	for (int i = 0; i < 2; i++) {
		ctl_attach_at(&d, sampled[i].pid, "100");
		json_decref(entry_when(&d, sampled[i].pid, sampled_a_while, "sampled"));
	}
	/* Taken before the descriptors run out: no new connection is accepted then. */
	int fd = daemon_connect(&d);
	cr_assert(fd >= 0);
	pyprofd__response__free_unpacked(ask_list(fd), NULL);

	struct rlimit before, starved;
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, NULL, &before) == 0, "prlimit: %s", strerror(errno));
	starved = (struct rlimit){3, before.rlim_max}; /* stdin, stdout and stderr: no descriptor more */
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, &starved, NULL) == 0, "prlimit: %s", strerror(errno));

	/* Housekeeping looks at every target once a second: wait until it has looked and failed. */
	const char *said = log_says_first(&d, "cannot tell whether the process still runs", "the process exited");
	char *log = daemon_log(&d);
	cr_assert(said && strcmp(said, "the process exited") != 0,
	          "out of descriptors, a live target was %s:\n%s", said ? "declared exited" : "never looked at", log);
	free(log);

	pid_t pids[2] = {sampled[0].pid, sampled[1].pid};
	uint64_t samples[2] = {0, 0};
	pid_t stopped = sampling_on(fd, pids, samples, 2);
	cr_assert_eq(stopped, 0, "pid %d does not sample out of descriptors", (int)stopped);

	/* A live process the daemon cannot look at: not "no such process", but why. */
	Pyprofd__Response *attach = ask_attach(fd, other.pid, 100);
	cr_assert_eq(attach->result_case, PYPROFD__RESPONSE__RESULT_ERROR, "an attach worked with no descriptor");
	cr_assert_neq(attach->error->code, PYPROFD__ERROR_CODE__ERROR_NO_PROCESS,
	              "a live process was said not to exist: %s", error_of(attach));
	cr_assert(strstr(error_of(attach), "Too many open files"), "the attach's error does not say why: %s",
	          error_of(attach));
	pyprofd__response__free_unpacked(attach, NULL);
	Pyprofd__Response *dump = ask_dump(fd, other.pid);
	cr_assert_eq(dump->result_case, PYPROFD__RESPONSE__RESULT_ERROR);
	cr_assert_neq(dump->error->code, PYPROFD__ERROR_CODE__ERROR_NO_PROCESS,
	              "a live process was said not to exist: %s", error_of(dump));
	cr_assert(strstr(error_of(dump), "Too many open files"), "the dump's error does not say why: %s",
	          error_of(dump));
	pyprofd__response__free_unpacked(dump, NULL);

	/* Sampling went on meanwhile: reading memory takes no descriptor. */
	stopped = sampling_on(fd, pids, samples, 2);
	cr_assert_eq(stopped, 0, "pid %d stopped sampling out of descriptors", (int)stopped);

	/* Descriptors are back: the same requests work, the targets sample on. */
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, &before, NULL) == 0, "prlimit: %s", strerror(errno));
	attach = ask_attach(fd, other.pid, 100);
	cr_assert_eq(attach->result_case, PYPROFD__RESPONSE__RESULT_ATTACH, "attach after: %s", error_of(attach));
	pyprofd__response__free_unpacked(attach, NULL);
	dump = ask_dump(fd, sampled[0].pid);
	cr_assert_eq(dump->result_case, PYPROFD__RESPONSE__RESULT_DUMP, "dump after: %s", error_of(dump));
	pyprofd__response__free_unpacked(dump, NULL);
	stopped = sampling_on(fd, pids, samples, 2);
	cr_assert_eq(stopped, 0, "pid %d stopped sampling after descriptors came back", (int)stopped);
	close(fd);
	json_decref(entry_when(&d, other.pid, sampled_a_while, "sampled"));
	daemon_stop(&d);
}

/* ---- short-lived targets ---- */

#define SHORT_LIVED 200
#define SHORT_LIVED_BATCH 10

/* The descriptors a process has open. */
static int fds_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	cr_assert_not_null(d, "%s: %s", path, strerror(errno));
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* A Python process that waits to be killed. */
static pid_t start_short_lived(const struct python *py)
{
	char *argv[] = {(char *)py->path, "-I", "-S", "-c", "import time\nwhile True: time.sleep(1)", NULL};
	return spawn_process(argv, NULL);
}

/* Attach pid once its interpreter runs. */
static void attach_when_started(int fd, pid_t pid)
{
	for (int i = 0; i < 1000; i++) {
		Pyprofd__Response *r = ask_attach(fd, pid, 100);
		bool ok = r->result_case == PYPROFD__RESPONSE__RESULT_ATTACH;
		bool starting = r->result_case == PYPROFD__RESPONSE__RESULT_ERROR &&
		                (r->error->code == PYPROFD__ERROR_CODE__ERROR_NOT_PYTHON ||
		                 r->error->code == PYPROFD__ERROR_CODE__ERROR_CORRUPT);
		cr_assert(ok || starting, "attach of pid %d: %s", (int)pid, error_of(r));
		pyprofd__response__free_unpacked(r, NULL);
		if (ok)
			return;
		pause_ms(10); /* its interpreter is not up yet */
	}
	cr_assert_fail("pid %d never became attachable", (int)pid);
}

/*
 * Processes that come and go: an exited target used to keep its timer's
 * descriptor (and 64 KiB of timings) until max_targets or ten minutes
 * dropped it, so a thousand short-lived processes took the daemon from 13
 * to 900 descriptors.  Now an exit gives them back at once, and the entry
 * stays listed.
 */
Test(lifecycle, exited_targets_give_back_descriptors, .timeout = 600)
{
	struct python pys[PYTHONS_MAX];
	pythons_supported(pys, PYTHONS_MAX);
	struct daemon d;
	daemon_start(&d, NULL);
	int fd = daemon_connect(&d);
	cr_assert(fd >= 0);

	/* One first, so whatever the daemon opens once (its database, ...) is open before counting. */
	pid_t first = start_short_lived(&pys[0]);
	attach_when_started(fd, first);
	kill(first, SIGKILL);
	waitpid(first, NULL, 0);
	json_decref(entry_when(&d, first, is_exited, "exited"));
	int baseline = fds_of(d.pid);

	for (int done = 0; done < SHORT_LIVED; done += SHORT_LIVED_BATCH) {
		pid_t batch[SHORT_LIVED_BATCH];
		for (int i = 0; i < SHORT_LIVED_BATCH; i++)
			batch[i] = start_short_lived(&pys[0]);
		for (int i = 0; i < SHORT_LIVED_BATCH; i++)
			attach_when_started(fd, batch[i]);
		for (int i = 0; i < SHORT_LIVED_BATCH; i++) {
			kill(batch[i], SIGKILL);
			waitpid(batch[i], NULL, 0);
		}
	}
	/* Every exit noticed (the next sample of each fails), every entry kept. */
	Pyprofd__Response *st = NULL;
	for (int i = 0; i < 120; i++) {
		if (st)
			pyprofd__response__free_unpacked(st, NULL);
		st = ask_status(fd);
		if (st->status->targets_sampling == 0)
			break;
		pause_ms(250);
	}
	cr_assert_eq(st->status->targets_sampling, 0, "%u targets still sampling after their processes died",
	             st->status->targets_sampling);
	cr_assert_eq(st->status->targets_exited, SHORT_LIVED + 1, "%u exited targets listed, not %d",
	             st->status->targets_exited, SHORT_LIVED + 1);
	pyprofd__response__free_unpacked(st, NULL);
	int after = fds_of(d.pid);
	cr_assert_leq(after, baseline + 3, "%d short-lived targets took the daemon from %d to %d descriptors",
	              SHORT_LIVED, baseline, after);
	close(fd);
	daemon_stop(&d);
}

/* ---- max_targets and RLIMIT_NOFILE ---- */

/* n targets of the scenario, started and parked. */
static void start_parked(struct test_target *t, int n, const struct python *py, const char *scenario)
{
	for (int i = 0; i < n; i++)
		test_target_start(&t[i], py, scenario);
	for (int i = 0; i < n; i++)
		json_decref(test_target_wait_report(&t[i], TARGET_READY_TIMEOUT_S));
}

/* A config file holding text, in a scratch directory of its own (dir, when asked, is that). */
static void scratch_conf(char *conf, size_t len, char *dir, size_t dir_len, const char *text)
{
	scratch_dir(dir, dir_len);
	snprintf(conf, len, "%s/pyprofd.conf", dir);
	write_text_file(conf, text);
}

/* The limits a daemon started from now on inherits (and this process keeps). */
static void with_nofile(rlim_t soft, rlim_t hard)
{
	struct rlimit rl = {soft, hard};
	cr_assert(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
}

/*
 * A max_targets the descriptor limit cannot hold used to be taken as it
 * was, to be found out when descriptors ran out.  Now the daemon raises its
 * soft limit to the hard one, lowers max_targets to what fits next to its
 * clients, socket and database (and says so), and refuses to start when
 * not even one target fits.
 */
Test(lifecycle, max_targets_fits_the_descriptor_limit, .timeout = 240)
{
	struct python pys[PYTHONS_MAX];
	pythons_supported(pys, PYTHONS_MAX);
	enum { TARGETS = 4 };
	struct test_target t[TARGETS];
	start_parked(t, TARGETS, &pys[0], "nested");

	/*
	 * With [limits] max_connections = 8 the daemon keeps 42 descriptors
	 * for all but its targets, 2 for each: a hard limit of 48 holds 3.  The
	 * soft limit of 20 would not even hold the rest.  The in-kernel reader
	 * would keep UW_KREADER_DESCRIPTORS more: off here, and on below.
	 */
	char dir[PATH_MAX - 64], conf[PATH_MAX];
	scratch_conf(conf, sizeof conf, dir, sizeof dir,
	             "[limits]\nmax_connections = 8\nmax_targets = 4096\n[sampling]\nkernel_reader = false\n");
	const char *extra[] = {"--config", conf, NULL};
	/* For good: raising a hard limit again takes CAP_SYS_RESOURCE; this process ends with the test. */
	with_nofile(20, 48);
	struct daemon d;
	daemon_start(&d, extra);

	struct rlimit now;
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, NULL, &now) == 0);
	cr_assert_eq(now.rlim_cur, 48, "the daemon's soft limit was left at %llu (hard 48)",
	             (unsigned long long)now.rlim_cur);
	char *log = daemon_log(&d);
	cr_assert(strstr(log, "max_targets lowered from 4096 to 3"), "no word of max_targets:\n%s", log);
	free(log);
	char p[16];
	for (int i = 0; i < TARGETS - 1; i++)
		ctl_attach_at(&d, t[i].pid, "100");
	const char *one_more[] = {"attach", pid_text(t[TARGETS - 1].pid, p, sizeof p), NULL};
	struct run_result r;
	ctl_run(&d, &r, one_more, NULL);
	char why[512];
	cr_assert(r.exited && r.code != 0 && strstr(r.err, "maximum of 3"),
	          "a target past what the descriptors hold was attached: %s", run_describe(&r, why, sizeof why));
	run_result_free(&r);
	daemon_stop(&d);

	char state[PATH_MAX], sock[PATH_MAX];
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(sock, sizeof sock, "%s/pyprofd.sock", dir);
	const char *argv[] = {pyprofd_bin(), "--state-dir", state, "--socket", sock, "--config", conf, NULL};
	struct run_opts opts = {.timeout_s = 10};

	/* The in-kernel reader's descriptors count too: 48 held 3 targets without it, none with it. */
	write_text_file(conf, "[limits]\nmax_connections = 8\nmax_targets = 4096\n");
	run_command(&r, argv, &opts);
	cr_assert(r.exited && r.code == 2 && strstr(r.err, "RLIMIT_NOFILE") && strstr(r.err, "kernel_reader"),
	          "the in-kernel reader's descriptors were not counted: %s", run_describe(&r, why, sizeof why));
	run_result_free(&r);
	write_text_file(conf, "[limits]\nmax_connections = 8\nmax_targets = 4096\n"
	                      "[sampling]\nkernel_reader = false\n");

	/* A hard limit of 40 holds not even one next to 8 connections: the daemon will not start. */
	with_nofile(40, 40);
	run_command(&r, argv, &opts);
	cr_assert(r.exited && r.code == 2 && strstr(r.err, "RLIMIT_NOFILE") && strstr(r.err, "max_connections"),
	          "the daemon started where no target fits: %s", run_describe(&r, why, sizeof why));
	run_result_free(&r);
}

/* The daemon's descriptors open on files of its targets' threads (/proc/PID/task/...). */
static int task_files_open(pid_t daemon_pid)
{
	char dir[64];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)daemon_pid);
	DIR *d = opendir(dir);
	cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
	int n = 0;
	const struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char link[PATH_MAX + 64], target[PATH_MAX];
		snprintf(link, sizeof link, "%s/%s", dir, de->d_name);
		ssize_t len = readlink(link, target, sizeof target - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		n += strncmp(target, "/proc/", 6) == 0 && strstr(target, "/task/") != NULL;
	}
	closedir(d);
	return n;
}

/*
 * The /proc files targets keep open between samples (a thread's stat file
 * in cpu mode, its schedstat and wchan for a proof) used to be bounded per
 * target only (256), outside the descriptor budget: two targets of twenty
 * threads took the descriptors the daemon's clients needed.  Now they share
 * what the limit leaves once max_targets is provided for, and past it a
 * file is opened for each read: the targets are sampled and clients served.
 */
Test(lifecycle, targets_files_fit_the_descriptor_limit, .timeout = 240)
{
	struct python pys[PYTHONS_MAX];
	pythons_supported(pys, PYTHONS_MAX);
	enum { TARGETS = 2 };
	struct test_target t[TARGETS];
	start_parked(t, TARGETS, &pys[0], "threads20");

	/* 42 for all but the targets (as above), 2 for each: 48 leave 4 for their files. */
	char dir[PATH_MAX - 64], conf[PATH_MAX];
	scratch_conf(conf, sizeof conf, dir, sizeof dir,
	             "[limits]\nmax_connections = 8\nmax_targets = 2\n[sampling]\nkernel_reader = false\n");
	const char *extra[] = {"--config", conf, NULL};
	with_nofile(48, 48);
	struct daemon d;
	daemon_start(&d, extra);
	char p[16];
	for (int i = 0; i < TARGETS; i++) {
		/* cpu mode reads every thread's state from /proc at every sample. */
		const char *attach[] = {"attach", pid_text(t[i].pid, p, sizeof p), "--rate", "100", "--mode",
		                        "cpu", NULL};
		ctl_ok(&d, attach);
	}
	for (int i = 0; i < TARGETS; i++)
		json_decref(entry_when(&d, t[i].pid, sampled_a_while, "sampled"));
	int kept = task_files_open(d.pid);
	cr_assert_leq(kept, 4, "the targets keep %d /proc files open, past the 4 the limit leaves", kept);
	/* Every client served: each ctl call is a connection of its own. */
	static const char *const status[] = {"status", NULL};
	for (int i = 0; i < 10; i++)
		json_decref(ctl_json(&d, status));
	json_t *before = ctl_json(&d, (const char *[]){"list", NULL});
	pause_ms(1000);
	json_t *after = ctl_json(&d, (const char *[]){"list", NULL});
	for (size_t i = 0; i < json_array_size(after); i++)
		cr_assert_gt(jint(json_array_get(after, i), "samples"), jint(json_array_get(before, i), "samples"),
		             "a target was not sampled past the limit");
	json_decref(before);
	json_decref(after);
	daemon_stop(&d);
	for (int i = 0; i < TARGETS; i++)
		test_target_kill(&t[i]);
}

/* ---- floods in the log ---- */

/* Lines of one format the log writes a minute before it holds the rest back (daemon/log.c). */
#define LOG_BURST 5

/* How often words occur in text. */
static size_t count_of(const char *text, const char *words)
{
	size_t n = 0;
	for (const char *at = text; (at = strstr(at, words)) != NULL; at += strlen(words))
		n++;
	return n;
}

/*
 * The lines saying "N more like this ..., the last: ..." whose last line
 * holds `words`: the sum of their N.
 */
static unsigned long long held_back(const char *log, const char *words)
{
	unsigned long long sum = 0;
	for (const char *line = log; *line;) {
		const char *eol = strchr(line, '\n');
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		const char *more = memmem(line, len, " more like this in ", 19);
		const char *last = more ? memmem(more, len - (size_t)(more - line), ", the last: ", 12) : NULL;
		if (last && memmem(last, len - (size_t)(last - line), words, strlen(words))) {
			const char *digits = more;
			while (digits > line && digits[-1] >= '0' && digits[-1] <= '9')
				digits--;
			sum += strtoull(digits, NULL, 10);
		}
		line += len + (eol != NULL);
	}
	return sum;
}

/*
 * Every attach, detach and refused connection used to be logged: a user
 * could fill the journal.  Now past a few lines of one kind a minute the
 * rest are counted, and said as "N more like this": none is lost from the
 * count, and the log stays a few lines long.
 */
Test(lifecycle, floods_cost_a_few_log_lines, .timeout = 240)
{
	struct python pys[PYTHONS_MAX];
	pythons_supported(pys, PYTHONS_MAX);
	struct test_target t;
	test_target_start(&t, &pys[0], "nested");
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));

	char dir[PATH_MAX - 64], conf[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", dir);
	write_text_file(conf, "[limits]\nmax_connections = 4\n");
	const char *extra[] = {"--config", conf, NULL};
	struct daemon d;
	daemon_start(&d, extra);

	enum { CYCLES = 200, REFUSED = 100 };
	int fd = daemon_connect(&d);
	cr_assert(fd >= 0);
	for (int i = 0; i < CYCLES; i++) {
		Pyprofd__Response *r = ask_attach(fd, t.pid, 100);
		cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_ATTACH, "attach %d: %s", i, error_of(r));
		pyprofd__response__free_unpacked(r, NULL);
		r = ask_detach(fd, t.pid);
		cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_DETACH, "detach %d: %s", i, error_of(r));
		pyprofd__response__free_unpacked(r, NULL);
	}
	/* Every connection the daemon allows taken: each one more is refused. */
	int held[3];
	for (int i = 0; i < 3; i++) {
		held[i] = daemon_connect(&d);
		cr_assert(held[i] >= 0);
		pyprofd__response__free_unpacked(ask_status(held[i]), NULL);
	}
	for (int i = 0; i < REFUSED; i++) {
		int extra_fd = daemon_connect(&d);
		cr_assert(extra_fd >= 0);
		Pyprofd__Response *r = recv_response(extra_fd, 30.0);
		cr_assert(r && r->result_case == PYPROFD__RESPONSE__RESULT_ERROR &&
		          r->error->code == PYPROFD__ERROR_CODE__ERROR_LIMIT,
		          "connection %d past the limit was not refused", i);
		pyprofd__response__free_unpacked(r, NULL);
		close(extra_fd);
	}
	for (int i = 0; i < 3; i++)
		close(held[i]);
	close(fd);
	/* What was held back is told at the end of its minute, or when the daemon stops. */
	daemon_stop(&d);

	char *log = daemon_log(&d);
	struct {
		const char *words;
		unsigned long long events;
	} kinds[] = {{": attached (Python", CYCLES}, {": detached after", CYCLES}, {"refused a client", REFUSED}};
	for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
		unsigned long long lines = count_of(log, kinds[k].words);
		unsigned long long more = held_back(log, kinds[k].words);
		/* A summary's "the last:" repeats the words: its line counts among them. */
		size_t summaries = 0;
		for (const char *at = log; (at = strstr(at, " more like this in ")) != NULL; at++) {
			const char *eol = strchr(at, '\n');
			const char *w = strstr(at, kinds[k].words);
			summaries += w && (!eol || w < eol);
		}
		/* A burst a minute, each minute that held some back summed up in one line. */
		cr_assert(more > 0 && lines - summaries <= LOG_BURST * (summaries + 1),
		          "%llu lines of \"%s\" (%zu of them summaries) for %llu events:\n%s", lines,
		          kinds[k].words, summaries, kinds[k].events, log);
		cr_assert_eq(lines - summaries + more, kinds[k].events,
		             "\"%s\": %llu lines and %llu more like them, for %llu events:\n%s", kinds[k].words,
		             lines - summaries, more, kinds[k].events, log);
	}
	free(log);
	test_target_kill(&t);
}
