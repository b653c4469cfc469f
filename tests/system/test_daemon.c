/*
 * The daemon end to end: the real pyprofd on a socket in a scratch
 * directory, the real pyprofd-ctl, real Python targets of every installed
 * version, and raw frames for what a well-behaved client never sends.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(daemon, .init = helpers_init, .fini = helpers_fini);

/* Whether a dumped thread shows these functions, innermost first, at its top. */
static bool thread_shows(json_t *thread, const char *const names[])
{
	json_t *frames = json_object_get(thread, "frames");
	for (size_t i = 0; names[i]; i++) {
		json_t *f = json_array_get(frames, i);
		if (!f || strcmp(json_string_value(json_object_get(f, "function")), names[i]) != 0)
			return false;
	}
	return true;
}

/*
 * Every installed version at once: attach, list, dump, stats, top, detach,
 * and the answers match what each interpreter itself reported.
 */
Test(daemon, attach_list_dump_stats_detach, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target targets[PYTHONS_MAX];
	json_t *reports[PYTHONS_MAX];
	for (size_t i = 0; i < n; i++)
		test_target_start(&targets[i], &pys[i], "nested");
	for (size_t i = 0; i < n; i++)
		reports[i] = test_target_wait_report(&targets[i], TARGET_READY_TIMEOUT_S);

	struct daemon d;
	daemon_start(&d, NULL);
	for (size_t i = 0; i < n; i++)
		ctl_attach_at(&d, targets[i].pid, "200");

	static const char *const nested[] = {"hold", "nested_inner", "nested_middle", "nested_outer", NULL};
	for (size_t i = 0; i < n; i++) {
		pid_t pid = targets[i].pid;
		char p[16];
		json_t *e = entry_when(&d, pid, sampled_a_while, "sampled");
		cr_assert_str_eq(jstr(e, "python_version"), jstr(reports[i], "version"), "%s", pys[i].path);
		cr_expect_eq(jint(e, "rate_hz"), 200);
		cr_expect_str_eq(jstr(e, "mode"), "wall");
		cr_expect_eq(jint(e, "errors"), 0, "%s: sampling errors", pys[i].path);
		json_decref(e);

		const char *dump[] = {"dump", pid_text(pid, p, sizeof p), NULL};
		json_t *j = ctl_json(&d, dump);
		cr_assert_eq(jint(j, "pid"), pid);
		cr_assert(thread_shows(json_array_get(json_object_get(j, "threads"), 0), nested),
		          "%s: dump through the daemon: %s", pys[i].path, json_dumps(j, JSON_COMPACT));
		json_decref(j);

		/* The daemon's dump prints exactly what the one-shot command prints. */
		const char *dump_text[] = {"dump", p, NULL};
		struct run_result via_daemon, direct;
		ctl_run(&d, &via_daemon, dump_text, NULL);
		run_dump(&direct, pid, (const char *const[]){NULL}, NULL);
		cr_assert(via_daemon.exited && via_daemon.code == 0 && direct.exited && direct.code == 0);
		cr_assert_str_eq(via_daemon.out, direct.out, "%s: pyprofd-ctl dump and pyprofd dump differ",
		                 pys[i].path);
		run_result_free(&via_daemon);
		run_result_free(&direct);

		json_t *st = ctl_stats_of(&d, pid);
		cr_assert_gt(jint(st, "total_samples"), 0, "%s", pys[i].path);
		/* A parked stack is the frame cache's best case: every sample after the first hits whole. */
		cr_assert_gt(jint(st, "frame_cache_full_hits"), 0, "%s", pys[i].path);
		json_decref(st);

		const char *top[] = {"top", pid_text(pid, p, sizeof p), "--once", "--window", "5", NULL};
		json_t *t = ctl_json(&d, top);
		json_t *rows = json_object_get(t, "rows");
		bool found = false;
		size_t k;
		json_t *row;
		json_array_foreach(rows, k, row)
			found = found || (strcmp(jstr(row, "function"), "hold") == 0 && jint(row, "own") > 0);
		cr_assert(found, "%s: top shows no own time in hold(): %s", pys[i].path,
		          json_dumps(t, JSON_COMPACT));
		json_decref(t);
	}

	static const char *const status[] = {"status", NULL};
	json_t *s = ctl_json(&d, status);
	cr_assert_eq(jint(s, "targets_sampling"), (json_int_t)n);
	json_decref(s);

	for (size_t i = 0; i < n; i++) {
		char p[16];
		const char *detach[] = {"detach", pid_text(targets[i].pid, p, sizeof p), NULL};
		ctl_ok(&d, detach);
	}
	static const char *const list[] = {"list", NULL};
	json_t *before = ctl_json(&d, list);
	pause_ms(300);
	json_t *after = ctl_json(&d, list);
	size_t i;
	json_t *e;
	json_array_foreach(after, i, e) {
		cr_assert_str_eq(jstr(e, "state"), "detached");
		json_t *b = json_array_get(before, i);
		cr_assert_eq(jint(e, "samples"), jint(b, "samples"), "pid %lld sampled after detach",
		             (long long)jint(e, "pid"));
	}
	json_decref(before);
	json_decref(after);
	daemon_stop(&d);
	for (size_t k = 0; k < n; k++)
		json_decref(reports[k]);
}

/* Twenty processes at once, each sampled at its rate, none failing. */
Test(daemon, twenty_targets, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	enum { N = 20 };
	struct test_target targets[N];
	for (size_t i = 0; i < N; i++)
		test_target_start(&targets[i], &pys[i % n], "nested");
	for (size_t i = 0; i < N; i++)
		json_decref(test_target_wait_report(&targets[i], TARGET_READY_TIMEOUT_S));
	struct daemon d;
	daemon_start(&d, NULL);
	for (size_t i = 0; i < N; i++)
		ctl_attach_at(&d, targets[i].pid, "100");
	for (size_t i = 0; i < N; i++) {
		json_t *e = entry_when(&d, targets[i].pid, sampled_a_while, "sampled");
		cr_expect_eq(jint(e, "errors"), 0, "pid %d: sampling errors", (int)targets[i].pid);
		json_decref(e);
	}
	static const char *const status[] = {"status", NULL};
	json_t *s = ctl_json(&d, status);
	cr_assert_eq(jint(s, "targets_sampling"), N);
	/*
	 * Twenty targets at one rate fall due together: their ticks share
	 * wakeups (a timer each woke the daemon once per tick), several to a
	 * wakeup even when samples are slow enough to fill a few slots.
	 */
	json_t *sched = json_object_get(s, "schedule");
	cr_assert(json_is_object(sched), "status has no schedule");
	json_int_t ticks = jint(sched, "ticks"), wakeups = jint(sched, "wakeups");
	cr_assert_gt(wakeups, 0);
	cr_assert_geq(ticks, 2 * wakeups, "%lld ticks in %lld wakeups: not shared", (long long)ticks,
	              (long long)wakeups);
	cr_assert_gt(json_real_value(json_object_get(sched, "lateness_us_p99")), 0,
	             "how late samples start is reported");
	json_decref(s);
	for (size_t i = 0; i < N; i++) {
		json_t *st = ctl_stats_of(&d, targets[i].pid);
		/* Blocked targets, 100 Hz: the timer must have kept close to its rate. */
		double rate = json_real_value(json_object_get(st, "achieved_rate_hz"));
		cr_expect(rate > 50 && rate < 150, "pid %d: %.1f Hz achieved for 100 asked",
		          (int)targets[i].pid, rate);
		json_decref(st);
	}
	daemon_stop(&d);
}

/*
 * Detach keeps the caches; attaching again starts warm: the code objects a
 * busy target runs are found in the cache, not decoded again.
 */
Test(daemon, reattach_is_warm, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = &pys[n - 1];
	struct test_target target;
	json_decref(test_target_start_script(&target, py, "callgraph.py"));
	struct daemon d;
	daemon_start(&d, NULL);
	char p[16];
	pid_text(target.pid, p, sizeof p);
	ctl_attach_at(&d, target.pid, "200");
	json_decref(entry_when(&d, target.pid, sampled_a_while, "sampled"));
	/* Warm up until the target's code objects have all been met: no new miss for 1.5 s. */
	json_int_t seen = -1;
	for (int stable = 0, i = 0; stable < 5 && i < 100; i++) {
		json_t *st = ctl_stats_of(&d, target.pid);
		json_int_t now = jint(st, "code_object_cache_misses");
		stable = now == seen ? stable + 1 : 0;
		seen = now;
		json_decref(st);
		pause_ms(300);
	}
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	json_t *before = ctl_stats_of(&d, target.pid);

	const char *again[] = {"attach", p, "--rate", "200", NULL};
	json_t *a = ctl_json(&d, again);
	cr_assert(json_is_true(json_object_get(a, "warm")), "re-attach was not warm: %s",
	          json_dumps(a, JSON_COMPACT));
	cr_assert_eq(jint(a, "sessions"), 2);
	json_decref(a);
	json_t *after = NULL;
	for (int i = 0; i < 300; i++) {
		json_decref(after);
		after = ctl_stats_of(&d, target.pid);
		if (jint(after, "total_samples") >= jint(before, "total_samples") + 200)
			break;
		pause_ms(50);
	}
	cr_assert_gt(jint(after, "total_samples"), jint(before, "total_samples"));
	json_int_t hits = jint(after, "code_object_cache_hits") - jint(before, "code_object_cache_hits");
	json_int_t misses =
		jint(after, "code_object_cache_misses") - jint(before, "code_object_cache_misses");
	cr_assert_gt(hits, 0, "no code object cache hits after re-attaching (%s)", py->path);
	/* A rarely run function may be met for the first time; nearly all must hit. */
	cr_assert_leq(misses * 20, hits, "%lld code objects decoded again for %lld found warm (%s)",
	              (long long)misses, (long long)hits, py->path);
	cr_assert_eq(jint(after, "cache_resets"), 0);
	json_decref(before);
	json_decref(after);
	daemon_stop(&d);
}

/* A target killed while sampled is marked exited, logged once, and nothing else stops. */
Test(daemon, target_killed_while_sampled, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target doomed, other;
	test_target_start(&doomed, &pys[0], "threads20");
	test_target_start(&other, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(&doomed, TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&other, TARGET_READY_TIMEOUT_S));
	struct daemon d;
	daemon_start(&d, NULL);
	ctl_attach_at(&d, doomed.pid, "500");
	ctl_attach_at(&d, other.pid, "100");
	json_decref(entry_when(&d, doomed.pid, sampled_a_while, "sampled"));
	test_target_kill(&doomed);
	json_decref(entry_when(&d, doomed.pid, is_exited, "exited"));

	json_t *e = entry_when(&d, other.pid, sampled_a_while, "sampled");
	json_int_t samples = jint(e, "samples");
	json_decref(e);
	pause_ms(500);
	e = entry_when(&d, other.pid, sampled_a_while, "sampled");
	cr_assert_gt(jint(e, "samples"), samples, "the other target stopped being sampled");
	json_decref(e);
	cr_assert(daemon_alive(&d) && daemon_serves(&d));

	char p[16];
	const char *stats[] = {"detach", pid_text(doomed.pid, p, sizeof p), NULL};
	ctl_expect_failure(&d, stats, 7, NULL, "detach of an exited target");

	char *log = daemon_log(&d);
	char needle[64];
	snprintf(needle, sizeof needle, "pid %d: the process exited", (int)doomed.pid);
	char *first = strstr(log, needle);
	cr_assert_not_null(first, "no log line for the exit:\n%s", log);
	cr_assert_null(strstr(first + 1, needle), "the exit was logged more than once:\n%s", log);
	free(log);
	daemon_stop(&d);
}

/* Make the next fork get `pid` (root only); false if the kernel will not. */
static bool next_pid_is(pid_t pid)
{
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[16];
	int len = snprintf(buf, sizeof buf, "%d", (int)pid - 1);
	bool ok = write(fd, buf, (size_t)len) == len;
	close(fd);
	return ok;
}

/* A target started at exactly `pid`, or false after many tries (other processes fork too). */
static bool start_at_pid(struct test_target *t, const struct python *py, pid_t pid)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		if (!next_pid_is(pid))
			return false;
		test_target_start(t, py, "nested");
		if (t->pid == pid)
			return true;
		test_target_kill(t);
	}
	return false;
}

/*
 * A pid reused by a new process is a new target: never its predecessor's
 * warm state, whether the old one was seen exiting or not.
 */
Test(daemon, pid_reuse, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = &pys[n - 1];
	struct daemon d;
	daemon_start(&d, NULL);
	char p[16];

	/* Detached (warm), then killed and replaced before the daemon looks. */
	struct test_target first, second;
	test_target_start(&first, py, "nested");
	json_decref(test_target_wait_report(&first, TARGET_READY_TIMEOUT_S));
	pid_t pid = first.pid;
	pid_text(pid, p, sizeof p);
	ctl_attach_at(&d, pid, "200");
	json_t *e = entry_when(&d, pid, sampled_a_while, "sampled");
	json_int_t old_start = jint(e, "start_time");
	json_decref(e);
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	test_target_kill(&first);
	if (!start_at_pid(&second, py, pid))
		cr_skip_test("cannot make the kernel reuse pid %d here (needs root and ns_last_pid)", (int)pid);
	json_decref(test_target_wait_report(&second, TARGET_READY_TIMEOUT_S));
	const char *again[] = {"attach", p, "--rate", "200", NULL};
	json_t *a = ctl_json(&d, again);
	cr_assert(json_is_false(json_object_get(a, "warm")), "a new process got the old one's state");
	cr_assert_neq(jint(a, "start_time"), old_start);
	cr_assert_eq(jint(a, "sessions"), 1);
	json_decref(a);
	e = entry_when(&d, pid, sampled_a_while, "sampled");
	cr_assert_eq(jint(e, "errors"), 0);
	json_decref(e);

	/* Sampling, killed: marked exited; a new process at the pid attaches afresh. */
	json_t *st = ctl_stats_of(&d, pid);
	json_decref(st);
	test_target_kill(&second);
	json_decref(entry_when(&d, pid, is_exited, "exited"));
	struct test_target third;
	cr_assert(start_at_pid(&third, py, pid), "could not reuse pid %d a second time", (int)pid);
	json_decref(test_target_wait_report(&third, TARGET_READY_TIMEOUT_S));
	a = ctl_json(&d, again);
	cr_assert(json_is_false(json_object_get(a, "warm")));
	cr_assert_str_eq(jstr(a, "state"), "sampling");
	json_decref(a);
	static const char *const list[] = {"list", NULL};
	json_t *all = ctl_json(&d, list);
	size_t i, same_pid = 0;
	json_array_foreach(all, i, e)
		same_pid += jint(e, "pid") == pid;
	cr_assert_eq(same_pid, 1, "two entries for pid %d: %s", (int)pid, json_dumps(all, JSON_COMPACT));
	json_decref(all);
	daemon_stop(&d);
}

/* A raw frame: 4-byte big-endian length, then payload. */
static bool send_frame(int fd, uint32_t len, const void *payload, size_t payload_len)
{
	/* One write: the daemon may close on the header alone, before a second write. */
	unsigned char buf[4 + 256];
	cr_assert_leq(payload_len, sizeof buf - 4);
	buf[0] = (unsigned char)(len >> 24);
	buf[1] = (unsigned char)(len >> 16);
	buf[2] = (unsigned char)(len >> 8);
	buf[3] = (unsigned char)len;
	if (payload_len)
		memcpy(buf + 4, payload, payload_len);
	return send_all(fd, buf, 4 + payload_len);
}

static Pyprofd__Response *status_call(int fd, uint64_t id)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__StatusRequest status = PYPROFD__STATUS_REQUEST__INIT;
	req.id = id;
	req.body_case = PYPROFD__REQUEST__BODY_STATUS;
	req.status = &status;
	cr_assert(send_request(fd, &req));
	return recv_response(fd, 10.0);
}

static void expect_error(Pyprofd__Response *resp, Pyprofd__ErrorCode code, const char *context)
{
	cr_assert_not_null(resp, "%s: no response", context);
	cr_assert_eq(resp->result_case, PYPROFD__RESPONSE__RESULT_ERROR, "%s: not an error", context);
	cr_assert_eq(resp->error->code, code, "%s: error code %d (%s)", context, (int)resp->error->code,
	             resp->error->message);
	cr_assert(resp->error->message && *resp->error->message, "%s: an error without a message", context);
	pyprofd__response__free_unpacked(resp, NULL);
}

/*
 * Bad frames of every kind, while a well-behaved client keeps its own
 * connection: the daemon answers or closes the bad one and serves the good.
 */
Test(daemon, malformed_frames, .timeout = 300)
{
	struct daemon d;
	daemon_start(&d, NULL);
	int good = daemon_connect(&d);
	cr_assert(good >= 0);
	uint64_t id = 100;
	Pyprofd__Response *r = status_call(good, ++id);
	cr_assert(r && r->result_case == PYPROFD__RESPONSE__RESULT_STATUS);
	pyprofd__response__free_unpacked(r, NULL);

	/* Truncated: a length promising more than ever comes, then the client leaves. */
	int fd = daemon_connect(&d);
	unsigned char some[10] = {0x10, 0x01};
	cr_assert(send_frame(fd, 100, some, sizeof some));
	close(fd);

	/* 0xFFFFFFFF: refused before anything is allocated, with an error, then closed. */
	fd = daemon_connect(&d);
	/* The daemon may refuse and close before all of it is written; the refusal is what counts. */
	send_frame(fd, 0xFFFFFFFFu, some, sizeof some);
	expect_error(recv_response(fd, 10.0), PYPROFD__ERROR_CODE__ERROR_LIMIT, "length 0xFFFFFFFF");
	cr_assert(connection_closed(fd, 10.0), "an oversized frame left the connection open");
	close(fd);

	/* Random bytes: whatever they say, an answer or a close, never a hang or a crash. */
	srand(12345);
	for (int round = 0; round < 20; round++) {
		fd = daemon_connect(&d);
		unsigned char noise[256];
		for (size_t i = 0; i < sizeof noise; i++)
			noise[i] = (unsigned char)rand();
		send_all(fd, noise, sizeof noise);
		shutdown(fd, SHUT_WR);
		cr_assert(connection_closed(fd, 10.0), "random bytes (round %d) hung the connection", round);
		close(fd);
	}

	/* A sound frame of garbage: an error, and the same connection goes on working. */
	fd = daemon_connect(&d);
	unsigned char garbage[32];
	memset(garbage, 0xff, sizeof garbage);
	cr_assert(send_frame(fd, sizeof garbage, garbage, sizeof garbage));
	expect_error(recv_response(fd, 10.0), PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "garbage protobuf");
	r = status_call(fd, ++id);
	cr_assert(r && r->id == id && r->result_case == PYPROFD__RESPONSE__RESULT_STATUS,
	          "the connection stopped working after a garbage frame");
	pyprofd__response__free_unpacked(r, NULL);

	/* An empty frame is an empty request: no protocol version. */
	cr_assert(send_frame(fd, 0, NULL, 0));
	expect_error(recv_response(fd, 10.0), PYPROFD__ERROR_CODE__ERROR_PROTOCOL, "empty frame");
	/* A future protocol version. */
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__ListRequest list = PYPROFD__LIST_REQUEST__INIT;
	req.version = 99;
	req.id = ++id;
	req.body_case = PYPROFD__REQUEST__BODY_LIST;
	req.list = &list;
	cr_assert(send_request(fd, &req));
	r = recv_response(fd, 10.0);
	cr_assert(r && r->id == id);
	expect_error(r, PYPROFD__ERROR_CODE__ERROR_PROTOCOL, "version 99");
	/* A request with no body. */
	Pyprofd__Request empty = PYPROFD__REQUEST__INIT;
	empty.id = ++id;
	cr_assert(send_request(fd, &empty));
	expect_error(recv_response(fd, 10.0), PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "no body");
	close(fd);

	/* The patient client was served all along. */
	r = status_call(good, ++id);
	cr_assert(r && r->id == id && r->result_case == PYPROFD__RESPONSE__RESULT_STATUS,
	          "the well-behaved client lost its connection");
	pyprofd__response__free_unpacked(r, NULL);
	close(good);
	cr_assert(daemon_alive(&d) && daemon_serves(&d));
	daemon_stop(&d);
}

/* Another uid acts only on its own processes: SO_PEERCRED against each process's owner. */
Test(daemon, unprivileged_user, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it starts processes as nobody)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");

	struct test_target root_target, own_target;
	test_target_start(&root_target, py, "nested");
	json_decref(test_target_wait_report(&root_target, TARGET_READY_TIMEOUT_S));
	const char *as_nobody[] = {AS_NOBODY, py->path, "-I", "-c", idle_program, NULL};
	test_target_start_argv(&own_target, as_nobody);

	struct daemon d;
	daemon_start(&d, NULL);
	ctl_attach_at(&d, root_target.pid, "100");
	struct run_opts nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};
	char rp[16], op[16];
	pid_text(root_target.pid, rp, sizeof rp);
	pid_text(own_target.pid, op, sizeof op);

	const char *attach_root[] = {"attach", rp, NULL};
	const char *dump_root[] = {"dump", rp, NULL};
	const char *stats_root[] = {"stats", rp, NULL};
	const char *detach_root[] = {"detach", rp, NULL};
	ctl_expect_failure(&d, attach_root, 4, &nobody, "nobody attaching to root's process");
	ctl_expect_failure(&d, dump_root, 4, &nobody, "nobody dumping root's process");
	ctl_expect_failure(&d, stats_root, 4, &nobody, "nobody reading root's stats");
	ctl_expect_failure(&d, detach_root, 4, &nobody, "nobody detaching root's process");

	/* Its own process: attach, see it sampled, dump it, detach it. */
	attach_as_nobody(&d, own_target.pid, "nobody attaching to its own process");
	struct run_result r;
	char why[512];
	json_decref(entry_when(&d, own_target.pid, sampled_a_while, "sampled"));
	const char *list_args[] = {"--json", "list", NULL};
	ctl_run(&d, &r, list_args, &nobody);
	cr_assert(r.exited && r.code == 0, "nobody listing: %s", run_describe(&r, why, sizeof why));
	json_t *mine = json_loads(r.out, 0, NULL);
	cr_assert(json_is_array(mine) && json_array_size(mine) == 1 &&
	          jint(json_array_get(mine, 0), "pid") == own_target.pid,
	          "nobody must see its own process alone: %s", r.out);
	json_decref(mine);
	run_result_free(&r);
	const char *dump_own[] = {"dump", op, NULL};
	ctl_run(&d, &r, dump_own, &nobody);
	cr_assert(r.exited && r.code == 0 && strstr(r.out, "idle"), "nobody dumping its own process: %s\n%s",
	          run_describe(&r, why, sizeof why), r.out);
	run_result_free(&r);
	const char *detach_own[] = {"detach", op, NULL};
	ctl_run(&d, &r, detach_own, &nobody);
	cr_assert(r.exited && r.code == 0, "nobody detaching its own process: %s",
	          run_describe(&r, why, sizeof why));
	run_result_free(&r);

	/* Root sees both. */
	static const char *const list[] = {"list", NULL};
	json_t *all = ctl_json(&d, list);
	cr_assert_eq(json_array_size(all), 2);
	json_decref(all);
	daemon_stop(&d);
}

/* Clear errors: no daemon, no process, not Python, not attached. */
Test(daemon, clear_errors, .timeout = 300)
{
	struct daemon d;
	daemon_start(&d, NULL);
	const char *attach_word[] = {"attach", "twelve", NULL};
	ctl_expect_failure(&d, attach_word, 2, NULL, "a pid that is not a number");
	const char *attach_none[] = {"attach", "999999999", NULL};
	ctl_expect_failure(&d, attach_none, 3, NULL, "a pid that cannot exist");
	char p[16];
	pid_t gone = fork();
	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	const char *attach_gone[] = {"attach", pid_text(gone, p, sizeof p), NULL};
	ctl_expect_failure(&d, attach_gone, 3, NULL, "a process that exited");
	const char *detach_self[] = {"detach", pid_text(getpid(), p, sizeof p), NULL};
	ctl_expect_failure(&d, detach_self, 9, NULL, "a process never attached");
	const char *attach_self[] = {"attach", pid_text(getpid(), p, sizeof p), NULL};
	ctl_expect_failure(&d, attach_self, 5, NULL, "a process that is not Python");
	/* The daemon itself: not Python, and said so by name. */
	const char *attach_daemon[] = {"attach", pid_text(d.pid, p, sizeof p), NULL};
	struct run_result r;
	ctl_run(&d, &r, attach_daemon, NULL);
	cr_assert(r.exited && r.code == 5 && r.err && strstr(r.err, "it is this pyprofd"),
	          "attaching the daemon to itself: exit %d: %s", r.code, r.err ? r.err : "");
	run_result_free(&r);
	const char *too_fast[] = {"attach", pid_text(getpid(), p, sizeof p), "--rate", "1000000", NULL};
	ctl_expect_failure(&d, too_fast, 1, NULL, "a rate above the maximum");
	daemon_stop(&d);
	static const char *const status[] = {"status", NULL};
	ctl_expect_failure(&d, status, 10, NULL, "no daemon running");
}

/* SIGHUP reads the config file again; a bad file keeps the old settings and the daemon. */

/* The pids of a list answer, in a set small enough to test membership by hand. */
static bool list_has(json_t *list, pid_t pid)
{
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e) {
		if (jint(e, "pid") == pid)
			return true;
	}
	return false;
}

/* `list ARGS...` holds exactly the targets whose bit is set in `want` (bit i: targets[i]). */
static void expect_listed(const struct daemon *d, const char *const args[], const pid_t *pids, size_t n,
                          unsigned want, const char *what)
{
	json_t *list = ctl_json(d, args);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(list_has(list, pids[i]), (want >> i) & 1, "%s: target %zu (pid %d) %s: %s", what, i,
		             (int)pids[i], (want >> i) & 1 ? "missing" : "listed",
		             json_dumps(list, JSON_COMPACT));
	cr_assert_eq(json_array_size(list), (size_t)__builtin_popcount(want), "%s: %s", what,
	             json_dumps(list, JSON_COMPACT));
	json_decref(list);
}

/* list --state and --label keep the targets in that state, with every label given. */
Test(daemon, list_filters_by_state_and_labels, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target t[3];
	pid_t pids[3];
	static const char *const labels[3][2] = {
		{"service=api", "env=prod"}, {"service=api", "env=dev"}, {"service=batch", "env=prod"}};
	struct daemon d;
	daemon_start(&d, NULL);
	for (size_t i = 0; i < 3; i++) {
		test_target_start(&t[i], &pys[n - 1], "nested");
		json_decref(test_target_wait_report(&t[i], TARGET_READY_TIMEOUT_S));
		pids[i] = t[i].pid;
		char p[16];
		const char *attach[] = {"attach", pid_text(pids[i], p, sizeof p), "--label", labels[i][0],
		                        "--label", labels[i][1], NULL};
		ctl_ok(&d, attach);
	}
	char p[16];
	const char *detach[] = {"detach", pid_text(pids[1], p, sizeof p), NULL};
	ctl_ok(&d, detach);
	test_target_kill(&t[2]);
	json_decref(entry_when(&d, pids[2], is_exited, "exited"));

	const char *sampling[] = {"list", "--state", "sampling", NULL};
	expect_listed(&d, sampling, pids, 3, 1u, "--state sampling");
	const char *detached[] = {"list", "--state", "detached", NULL};
	expect_listed(&d, detached, pids, 3, 2u, "--state detached");
	const char *exited[] = {"list", "--state", "exited", NULL};
	expect_listed(&d, exited, pids, 3, 4u, "--state exited");
	const char *api[] = {"list", "--label", "service=api", NULL};
	expect_listed(&d, api, pids, 3, 3u, "--label service=api");
	const char *api_dev[] = {"list", "--label", "service=api", "--label", "env=dev", NULL};
	expect_listed(&d, api_dev, pids, 3, 2u, "--label service=api --label env=dev");
	const char *prod_exited[] = {"list", "--label", "env=prod", "--state", "exited", NULL};
	expect_listed(&d, prod_exited, pids, 3, 4u, "--label env=prod --state exited");
	const char *none[] = {"list", "--label", "service=nothing", NULL};
	expect_listed(&d, none, pids, 3, 0u, "--label service=nothing");
	const char *all[] = {"list", NULL};
	expect_listed(&d, all, pids, 3, 7u, "no filter");

	/* The table too; and a state that is none is refused with the states there are. */
	const char *text[] = {"list", "--state", "detached", NULL};
	struct run_result r;
	ctl_run(&d, &r, text, NULL);
	char want[32];
	snprintf(want, sizeof want, "%d  detached ", (int)pids[1]);
	const char *row = strchr(r.out, '\n');
	cr_assert(r.exited && r.code == 0 && row && strstr(row, want) &&
	          strchr(row + 1, '\n') == r.out + r.out_len - 1, "the header and one row: %s", r.out);
	run_result_free(&r);
	const char *bogus[] = {"list", "--state", "waiting", NULL};
	ctl_run(&d, &r, bogus, NULL);
	cr_assert(r.exited && r.code == 2 && strstr(r.err, "sampling, detached or exited"), "%d %s", r.code,
	          r.err);
	run_result_free(&r);
	test_target_kill(&t[0]);
	test_target_kill(&t[1]);
	daemon_stop(&d);
}
