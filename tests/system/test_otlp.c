/*
 * OTLP export end to end: the real daemon sends its history to a real
 * OpenTelemetry Collector (built from Debian's sources by make collector),
 * and what the collector's debug exporter logged is held to what
 * `pyprofd-ctl query` reads from the same history: the same totals per
 * process, exactly, through a collector down at the start, killed and
 * started again, answering 503, never answering, and the daemon killed
 * with kill -9 and started again; under [sampling] idle = drop, without
 * the samples of waiting threads.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collector.h"
#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(otlp, .init = helpers_init, .fini = helpers_fini);

/* Threads busy in functions of their own and named, so samples carry names to look for. */
static const char otlp_program[] =
	"import threading, time\n"
	"def otlp_worker_loop(n):\n"
	"    while True:\n"
	"        sum(range(2000))\n"
	"        time.sleep(0.001)\n"
	"for i in range(3):\n"
	"    threading.Thread(target=otlp_worker_loop, args=(i,), name='otlp-payments-worker-%d' % i,\n"
	"                     daemon=True).start()\n"
	"def otlp_main_idle():\n"
	"    while True:\n"
	"        time.sleep(0.01)\n"
	"otlp_main_idle()\n";

#define OTLP_TARGETS 2
#define CATCH_UP_TIMEOUT_S 90.0

struct otlp_test {
	struct daemon d;
	char dir[PATH_MAX - 64];
	char config[PATH_MAX];
	pid_t targets[OTLP_TARGETS];
	char labels[OTLP_TARGETS][64];
};

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * A config exporting to endpoint every second, with 1 s buckets flushed
 * every 2 s: an interval is sent before its last samples reach the file
 * unless the exporter waits for them.  extra appended.
 */
static void otlp_write_config(struct otlp_test *t, const char *endpoint, const char *extra)
{
	char text[2048];
	snprintf(text, sizeof text,
	         "[storage]\n"
	         "flush_interval_s = 2\n"
	         "bucket_seconds = 1\n"
	         "\n"
	         "[export.otlp]\n"
	         "endpoint = %s   # the test's collector\n"
	         "interval = 1s\n"
	         "timeout = 2s\n"
	         "compression = gzip\n"
	         "headers = X-Scope-OrgID=team-a, X-Test=yes\n"
	         "resource.deployment.environment = otlp-test\n"
	         "%s",
	         endpoint, extra ? extra : "");
	write_text_file(t->config, text);
}

static void otlp_setup(struct otlp_test *t, const char *endpoint, const char *extra)
{
	memset(t, 0, sizeof *t);
	scratch_dir(t->dir, sizeof t->dir);
	snprintf(t->config, sizeof t->config, "%s/pyprofd.conf", t->dir);
	otlp_write_config(t, endpoint, extra);
	const char *args[] = {"--config", t->config, NULL};
	daemon_start(&t->d, args);
}

/* The daemon's status, its "export" part (owned by the returned root, in *root). */
static json_t *export_status(const struct daemon *d, json_t **root)
{
	static const char *const status[] = {"status", NULL};
	*root = ctl_json(d, status);
	json_t *e = json_object_get(*root, "export");
	cr_assert_not_null(e, "status has no export part");
	return e;
}

static double jdouble(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	cr_assert(json_is_number(v), "no number at %s", key);
	return json_number_value(v);
}

/* Wait until the exporter has sent every bucket starting before `until` (unix seconds). */
static void wait_sent_until(const struct daemon *d, double until, const char *what)
{
	double deadline = wall_now() + CATCH_UP_TIMEOUT_S;
	for (;;) {
		json_t *root, *e = export_status(d, &root);
		double sent = jdouble(e, "sent_until");
		json_int_t backlog = jint(e, "backlog_samples");
		const char *err = jstr(e, "last_error");
		char last[256];
		snprintf(last, sizeof last, "%s", err);
		json_decref(root);
		if (sent >= until && backlog == 0)
			return;
		cr_assert(wall_now() < deadline,
		          "%s: the exporter did not catch up within %.0f s (sent until %.0f, wanted %.0f, "
		          "backlog %lld, last error '%s')",
		          what, CATCH_UP_TIMEOUT_S, sent, until, (long long)backlog, last);
		pause_ms(200);
	}
}

/*
 * Wait until the exporter says it is failing for `why` (a part of its last
 * error) with samples held back: its first round comes only once the
 * history was flushed (every 2 s here), later on a loaded host.
 */
static void wait_export_failing(const struct daemon *d, const char *why)
{
	double deadline = wall_now() + CATCH_UP_TIMEOUT_S;
	for (;;) {
		json_t *root, *e = export_status(d, &root);
		bool failing = json_is_true(json_object_get(e, "failing"));
		char last[256];
		snprintf(last, sizeof last, "%s", jstr(e, "last_error"));
		json_int_t backlog = jint(e, "backlog_samples");
		json_decref(root);
		if (failing && strstr(last, why) && backlog > 0)
			return;
		cr_assert(wall_now() < deadline,
		          "the exporter never said it failed for '%s' with a backlog within %.0f s "
		          "(failing %d, last error '%s', backlog %lld)",
		          why, CATCH_UP_TIMEOUT_S, failing, last, (long long)backlog);
		pause_ms(200);
	}
}

/* Wait until the exporter's sink exists (it sends from there on). */
static void wait_exporter_started(const struct daemon *d)
{
	double deadline = wall_now() + 30;
	for (;;) {
		json_t *root, *e = export_status(d, &root);
		double sent = jdouble(e, "sent_until");
		json_decref(root);
		if (sent > 0)
			return;
		cr_assert(wall_now() < deadline, "the exporter never started");
		pause_ms(100);
	}
}

static void otlp_targets_start(struct otlp_test *t)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX + 16];
	snprintf(script, sizeof script, "%s/otlp_target.py", t->dir);
	write_text_file(script, otlp_program);
	for (int i = 0; i < OTLP_TARGETS; i++) {
		char log[PATH_MAX + 16];
		snprintf(log, sizeof log, "%s/target%d.log", t->dir, i);
		const char *args[] = {script, NULL};
		t->targets[i] = spawn_python(&pys[i % n], args, log);
		snprintf(t->labels[i], sizeof t->labels[i], "service=otlp-svc-%d", i);
	}
}

/* Attach every target, retrying while its interpreter starts. */
static void otlp_attach(struct otlp_test *t)
{
	for (int i = 0; i < OTLP_TARGETS; i++) {
		char p[16], why[512];
		const char *attach[] = {"attach", pid_text(t->targets[i], p, sizeof p), "--rate", "200",
		                        "--label", t->labels[i], "--label", "team=profiling", NULL};
		struct run_result r;
		for (int k = 0;; k++) {
			ctl_run(&t->d, &r, attach, NULL);
			bool ok = r.exited && r.code == 0;
			run_describe(&r, why, sizeof why);
			run_result_free(&r);
			if (ok)
				break;
			cr_assert(k < 200, "attach %s: %s", p, why);
			pause_ms(50);
		}
	}
}

/* Stop the targets; returns a time after which nothing of them can be counted. */
static double otlp_targets_stop(struct otlp_test *t)
{
	for (int i = 0; i < OTLP_TARGETS; i++) {
		kill(t->targets[i], SIGKILL);
		int status;
		waitpid(t->targets[i], &status, 0);
	}
	/* The daemon notices within a second or so; a flush later it is in the history. */
	for (int i = 0; i < OTLP_TARGETS; i++)
		json_decref(entry_when(&t->d, t->targets[i], is_exited, "the target exited"));
	return ceil(wall_now()) + 1;
}

/* The samples of pid in the history, over [from, until) when given. */
static json_int_t history_total(const struct daemon *d, pid_t pid, const char *from, const char *until)
{
	char p[16];
	const char *args[9] = {"--pid", pid_text(pid, p, sizeof p)};
	size_t n = 2;
	if (from) {
		args[n++] = "--from";
		args[n++] = from;
	}
	if (until) {
		args[n++] = "--until";
		args[n++] = until;
	}
	args[n] = NULL;
	return query_total(d, args, NULL);
}

/* Every target's total at the collector equals its total in the history, exactly. */
static void expect_totals_equal(struct otlp_test *t, const struct collector *c, const char *what)
{
	struct collector_totals got;
	collector_totals(c, &got);
	for (int i = 0; i < OTLP_TARGETS; i++) {
		json_int_t stored = history_total(&t->d, t->targets[i], NULL, NULL);
		uint64_t received = collector_total_of(&got, t->targets[i]);
		cr_assert_gt(stored, 0, "%s: target %d has no samples in the history", what, i);
		cr_expect_eq(received, (uint64_t)stored,
		             "%s: the collector received %llu samples of pid %d, the history holds %lld",
		             what, (unsigned long long)received, (int)t->targets[i], (long long)stored);
	}
	for (size_t i = 0; i < got.npids; i++)
		cr_expect_eq(got.with_thread[i], got.samples[i], "%s: samples of pid %d without thread.id",
		             what, (int)got.pids[i]);
}

static void otlp_teardown(struct otlp_test *t)
{
	daemon_stop(&t->d);
}

/* The daemon exporting to port (url: its endpoint), its exporter started and the targets attached. */
static void otlp_exporting_to(struct otlp_test *t, int port, char url[64])
{
	snprintf(url, 64, "http://127.0.0.1:%d", port);
	otlp_setup(t, url, NULL);
	wait_exporter_started(&t->d);
	otlp_targets_start(t);
	otlp_attach(t);
}

/* The targets killed and reaped, for a test that did not stop them on their time. */
static void otlp_targets_kill(struct otlp_test *t)
{
	for (int i = 0; i < OTLP_TARGETS; i++) {
		kill(t->targets[i], SIGKILL);
		waitpid(t->targets[i], NULL, 0);
	}
}

/*
 * What the collector receives is the history: totals per process, the
 * resource by the semantic conventions with the labels and the configured
 * extras, the functions the targets ran in the string table, one thread.id
 * per sample and the thread's name.  A backfill by hand sends the same
 * range again.
 */
Test(otlp, collector_receives_what_the_history_holds, .timeout = 300)
{
	struct collector c;
	collector_start(&c, 0);
	char url[64];
	struct otlp_test t;
	otlp_setup(&t, collector_url(&c, url, sizeof url), NULL);
	wait_exporter_started(&t.d);
	otlp_targets_start(&t);
	otlp_attach(&t);
	pause_ms(3000);
	double end = otlp_targets_stop(&t);
	wait_sent_until(&t.d, end, "after the targets exited");
	expect_totals_equal(&t, &c, "a collector up all along");

	char *log = collector_logs(&c);
	char p[16], want[128];
	snprintf(want, sizeof want, "-> process.pid: Int(%s)", pid_text(t.targets[0], p, sizeof p));
	static const char *const expected[] = {
		"-> service.name: Str(otlp-svc-0)", "-> service.name: Str(otlp-svc-1)",
		"-> process.runtime.name: Str(cpython)", "-> process.runtime.version: Str(3.",
		"-> process.executable.name: Str(python", "-> process.command_line: Str(",
		"-> host.name: Str(", "-> deployment.environment: Str(otlp-test)",
		"-> team: Str(profiling)", "otlp_worker_loop", "otlp_main_idle", "otlp_target.py",
		"-> thread.id: ", "InstrumentationScope pyprofd",
		"-> thread.name: otlp-payments-worker-0", "-> thread.name: MainThread",
	};
	cr_expect(strstr(log, want), "no resource with %s in the collector's log", want);
	for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
		cr_expect(strstr(log, expected[i]), "'%s' is not in the collector's log", expected[i]);
	free(log);

	/* A backfill by hand: the same range once more, to another run of the collector. */
	collector_stop(&c, SIGTERM);
	struct collector again;
	collector_start(&again, 0);
	char url2[64], from[32], until[32];
	snprintf(from, sizeof from, "%.0f", end - 3600);
	snprintf(until, sizeof until, "%.0f", end);
	const char *backfill[] = {"export", "--otlp", collector_url(&again, url2, sizeof url2), "--pid",
	                          pid_text(t.targets[1], p, sizeof p), "--from", from, "--until", until,
	                          NULL};
	json_t *res = ctl_json(&t.d, backfill);
	json_int_t stored = history_total(&t.d, t.targets[1], from, until);
	cr_expect_eq(jint(res, "processes"), 1);
	cr_expect_eq(jint(res, "samples"), stored);
	json_decref(res);
	struct collector_totals got;
	collector_totals(&again, &got);
	cr_expect_eq(collector_total_of(&got, t.targets[1]), (uint64_t)stored,
	             "the backfill's collector got %llu samples, the history holds %lld",
	             (unsigned long long)collector_total_of(&got, t.targets[1]), (long long)stored);
	cr_expect_eq(collector_total_of(&got, t.targets[0]), 0, "the backfill sent another process");
	collector_stop(&again, SIGTERM);
	otlp_teardown(&t);
}

/*
 * [sampling] idle = drop: the collector gets what a query shows without a
 * flag, each process's busy samples alone, fewer than the history keeps.
 */
Test(otlp, idle_left_out_is_not_sent, .timeout = 300)
{
	struct collector c;
	collector_start(&c, 0);
	char url[64];
	struct otlp_test t;
	otlp_setup(&t, collector_url(&c, url, sizeof url), "\n[sampling]\nidle = drop\n");
	wait_exporter_started(&t.d);
	otlp_targets_start(&t);
	otlp_attach(&t);
	pause_ms(3000);
	double end = otlp_targets_stop(&t);
	wait_sent_until(&t.d, end, "after the targets exited");
	expect_totals_equal(&t, &c, "idle = drop");
	struct collector_totals got;
	collector_totals(&c, &got);
	for (int i = 0; i < OTLP_TARGETS; i++) {
		char p[16];
		const char *all[] = {"--pid", pid_text(t.targets[i], p, sizeof p), "--idle", NULL};
		json_int_t kept = query_total(&t.d, all, NULL);
		cr_expect_lt(collector_total_of(&got, t.targets[i]), (uint64_t)kept,
		             "pid %d: the collector got %llu samples, idle ones too (the history holds %lld)",
		             (int)t.targets[i], (unsigned long long)collector_total_of(&got, t.targets[i]),
		             (long long)kept);
	}
	collector_stop(&c, SIGTERM);
	otlp_teardown(&t);
}

/*
 * A process of nobody's, with its own labels and a marker in its command
 * line, attached by root's rule and sent to c until it exited; what the
 * collector logged (freed by the caller).
 */
static char *otlp_users_process_sent(struct collector *c, struct otlp_test *t, const char *own_labels,
                                     const char *marker)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	char url[64];
	otlp_setup(t, collector_url(c, url, sizeof url),
	           "[rule.users]\nmatch.uid = nobody\nmatch.cmdline = otlp-user-\nlabels = service=user-jobs\n");
	wait_exporter_started(&t->d);
	struct python pys[PYTHONS_MAX];
	const struct python *py = python_for_nobody(pys, pythons_supported(pys, PYTHONS_MAX));
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	char env[512];
	snprintf(env, sizeof env, "PYPROFD_LABELS=%s", own_labels);
	char *const argv[] = {"env", env, AS_NOBODY, (char *)py->path, "-I", "-c", (char *)idle_program,
	                      (char *)marker, NULL};
	t->targets[0] = spawn_process(argv, NULL);
	json_decref(entry_when(&t->d, t->targets[0], sampled_a_while, "attached by the users' rule"));
	kill(t->targets[0], SIGKILL);
	waitpid(t->targets[0], NULL, 0);
	json_decref(entry_when(&t->d, t->targets[0], is_exited, "the target exited"));
	wait_sent_until(&t->d, ceil(wall_now()) + 1, "after the target exited");
	char *log = collector_logs(c);
	char p[16], want[128];
	snprintf(want, sizeof want, "-> process.pid: Int(%s)", pid_text(t->targets[0], p, sizeof p));
	cr_assert(strstr(log, want), "the collector got nothing of the process:\n%s", log);
	return log;
}

/*
 * A plain user's process attached by root's rule, claiming in its
 * environment the service and container of another: the collector gets
 * the service the rule gave and no container, and the claims as the
 * process's own attributes, under "self.".
 */
Test(otlp, a_users_claims_reach_the_collector_as_its_own_alone, .timeout = 300)
{
	struct collector c;
	collector_start(&c, 0);
	struct otlp_test t;
	char *log = otlp_users_process_sent(&c, &t, "service=payments,container=0123456789abcdef0123,team=core",
	                                    "otlp-user-claims");
	cr_expect(strstr(log, "-> service.name: Str(user-jobs)"), "not the rule's service:\n%s", log);
	cr_expect(!strstr(log, "-> service.name: Str(payments)"), "it passed for payments:\n%s", log);
	cr_expect(!strstr(log, "-> container.id: Str(0123456789abcdef0123)"), "it passed for a container");
	cr_expect(!strstr(log, "-> service: Str(payments)"), "its claim went out as the service label");
	cr_expect(strstr(log, "-> self.service: Str(payments)"), "its own label is not sent under self.");
	cr_expect(strstr(log, "-> self.container: Str(0123456789abcdef0123)"));
	cr_expect(strstr(log, "-> self.team: Str(core)"));
	free(log);
	collector_stop(&c, SIGTERM);
	otlp_teardown(&t);
}

/*
 * A plain user's process whose command line and own labels hold bytes
 * that are not UTF-8: the collector takes its profiles, with those bytes
 * of the command line replaced (U+FFFD) and those labels left out.
 */
Test(otlp, a_users_bytes_that_are_not_utf8_reach_the_collector_replaced, .timeout = 300)
{
	struct collector c;
	collector_start(&c, 0);
	struct otlp_test t;
	char *log = otlp_users_process_sent(&c, &t, "good=yes,bad=\xff\xfe", "otlp-user-\xff\xfe-end");
	cr_expect(strstr(log, "otlp-user-\xef\xbf\xbd\xef\xbf\xbd-end"), "the command line replaced:\n%s", log);
	cr_expect(!strstr(log, "\xff\xfe"), "bytes that are not UTF-8 reached the collector");
	cr_expect(strstr(log, "-> self.good: Str(yes)"));
	cr_expect(!strstr(log, "self.bad"), "a label that is not UTF-8 reached the collector");
	free(log);
	collector_stop(&c, SIGTERM);
	otlp_teardown(&t);
}

/*
 * A collector down when the daemon starts, then up, then killed mid-run
 * and started again: every sample arrives once.
 */
Test(otlp, collector_down_at_start_then_killed_and_restarted, .timeout = 300)
{
	collector_require();
	int port = free_port();
	char url[64];
	struct otlp_test t;
	otlp_exporting_to(&t, port, url);
	/* Nothing listens: the export fails to connect, and holds the samples back. */
	wait_export_failing(&t.d, "onnect");

	struct collector c;
	collector_start(&c, port);
	wait_sent_until(&t.d, ceil(wall_now()), "the collector came up");
	/* Killed right after a round went through: the next is a second away. */
	json_t *root, *e;
	double last = 0;
	for (int i = 0; i < 100; i++) {
		e = export_status(&t.d, &root);
		double s = jdouble(e, "last_success");
		json_decref(root);
		if (last && s > last)
			break;
		last = s;
		pause_ms(50);
	}
	collector_stop(&c, SIGKILL);
	pause_ms(3000);
	collector_restart(&c);
	double end = otlp_targets_stop(&t);
	wait_sent_until(&t.d, end, "the collector came back");
	expect_totals_equal(&t, &c, "down at start, killed and restarted");
	collector_stop(&c, SIGTERM);
	otlp_teardown(&t);
}

/*
 * A collector answering 503 gets the requests again and again, later and
 * later; status says why; moved to a working one by SIGHUP, the daemon
 * sends it everything the first refused.
 */
Test(otlp, collector_answering_503_then_another_by_reload, .timeout = 300)
{
	collector_require();
	struct fake_collector bad;
	fake_collector_start(&bad, 503);
	char url[64];
	struct otlp_test t;
	otlp_exporting_to(&t, bad.port, url);
	pause_ms(4000);
	json_t *root, *e = export_status(&t.d, &root);
	cr_expect(json_is_true(json_object_get(e, "failing")));
	cr_expect(strstr(jstr(e, "last_error"), "HTTP 503"), "last error: %s", jstr(e, "last_error"));
	cr_expect_gt(jint(e, "requests_failed"), 0);
	cr_expect_gt(jint(e, "backlog_samples"), 0);
	json_decref(root);
	cr_expect_gt(bad.requests, 0, "the 503 server heard nothing");

	/* The sink is the endpoint: a new endpoint would start from now, so the same one comes back. */
	fake_collector_stop(&bad);
	struct collector c;
	collector_start(&c, bad.port);
	otlp_write_config(&t, url, "resource.region = moved\n");
	kill(t.d.pid, SIGHUP);
	double end = otlp_targets_stop(&t);
	wait_sent_until(&t.d, end, "after the reload");
	expect_totals_equal(&t, &c, "503 then a working collector");
	char *log = collector_logs(&c);
	cr_expect(strstr(log, "-> region: Str(moved)"), "the reloaded resource attribute is not sent");
	free(log);
	collector_stop(&c, SIGTERM);
	otlp_teardown(&t);
}

/*
 * A collector answering 429 with Retry-After: 60 is asked nothing more for
 * that minute, where the exporter's own backoff (1, 2, 4 s ...) would have
 * asked it again within seconds; the log says when it tries again.
 */
Test(otlp, collector_asking_to_wait_is_left_alone, .timeout = 120)
{
	struct fake_collector busy;
	fake_collector_start_asking(&busy, 429, 60);
	char url[64];
	struct otlp_test t;
	otlp_exporting_to(&t, busy.port, url);
	for (int i = 0; i < 600 && busy.requests == 0; i++)
		pause_ms(100);
	cr_assert_gt(busy.requests, 0, "the collector heard nothing");
	/* Six seconds: the backoff alone (1, 2 s ...) would have tried twice more by now. */
	pause_ms(6000);
	cr_expect_eq(busy.requests, 1, "%d requests to a collector that asked to wait a minute", busy.requests);
	json_t *root, *e = export_status(&t.d, &root);
	cr_expect(strstr(jstr(e, "last_error"), "HTTP 429"), "last error: %s", jstr(e, "last_error"));
	json_decref(root);
	char *log = daemon_log(&t.d);
	cr_expect(strstr(log, "trying again in 60 s"), "the log does not say the wait: %s", log);
	free(log);
	otlp_teardown(&t);
	fake_collector_stop(&busy);
	otlp_targets_kill(&t);
}

/*
 * A collector that takes requests and never answers: each times out, the
 * daemon serves and samples on, and stops cleanly with a request hanging.
 */
Test(otlp, collector_never_answering_costs_the_loop_nothing, .timeout = 120)
{
	struct fake_collector slow;
	fake_collector_start(&slow, 0);
	char url[64];
	struct otlp_test t;
	otlp_exporting_to(&t, slow.port, url);
	char p[16];
	pid_text(t.targets[0], p, sizeof p);
	json_t *before = ctl_stats_of(&t.d, t.targets[0]);
	pause_ms(4000);
	json_t *after = ctl_stats_of(&t.d, t.targets[0]);
	cr_expect_gt(jint(after, "total_samples"), jint(before, "total_samples"),
	             "sampling stopped while a request hung");
	json_decref(before);
	json_decref(after);
	cr_expect(daemon_serves(&t.d));
	json_t *root, *e = export_status(&t.d, &root);
	cr_expect(strstr(jstr(e, "last_error"), "imeout") || strstr(jstr(e, "last_error"), "timed out"),
	          "last error: %s", jstr(e, "last_error"));
	json_decref(root);
	cr_expect_gt(slow.requests, 0, "the silent server heard nothing");
	/* A request that would hang a minute, and the daemon stopped meanwhile: it exits within seconds. */
	int before_reload = slow.requests;
	otlp_write_config(&t, url, "timeout = 60s\n");
	kill(t.d.pid, SIGHUP);
	for (int i = 0; i < 200 && slow.requests == before_reload; i++)
		pause_ms(50);
	cr_expect_gt(slow.requests, before_reload, "no request after the reload");
	otlp_teardown(&t);
	fake_collector_stop(&slow);
	otlp_targets_kill(&t);
}

/* The daemon killed with kill -9 mid-run and started again: every sample arrives once. */
Test(otlp, daemon_kill_9_sends_each_interval_once, .timeout = 300)
{
	struct collector c;
	collector_start(&c, 0);
	char url[64];
	struct otlp_test t;
	otlp_setup(&t, collector_url(&c, url, sizeof url), NULL);
	wait_exporter_started(&t.d);
	otlp_targets_start(&t);
	otlp_attach(&t);
	pause_ms(2500 + rand() % 1000);
	cr_assert(kill(t.d.pid, SIGKILL) == 0);
	waitpid(t.d.pid, NULL, 0);
	const char *argv[] = {pyprofd_bin(), "--state-dir", t.d.state, "--socket", t.d.sock,
	                      "--config", t.config, "--log-level", "debug", NULL};
	unlink(t.d.sock);
	t.d.pid = spawn_process((char *const *)argv, t.d.log);
	cr_assert(daemon_wait_listening(&t.d), "the daemon did not come back");
	otlp_attach(&t);
	pause_ms(2000);
	double end = otlp_targets_stop(&t);
	wait_sent_until(&t.d, end, "after the restart");
	expect_totals_equal(&t, &c, "the daemon killed and restarted");
	collector_stop(&c, SIGTERM);
	otlp_teardown(&t);
}

/* Bad [export.otlp] settings are refused naming the file and line; nothing starts. */
Test(otlp, bad_settings_are_refused_with_file_and_line)
{
	static const char *const bad[][2] = {
		{"compression = brotli\n", "compression must be gzip or none, not 'brotli'"},
		{"endpoint = ftp://collector:21\n",
		 "endpoint must be an http:// or https:// URL with a host, e.g. http://collector:4318, not 'ftp://collector:21'"},
		{"interval = 0s\n", "interval = 0s"},
		{"headers = Content-Type=text/plain\n", "headers = Content-Type=text/plain"},
		{"timeout = soon\n", "timeout = soon"},
		{"colour = blue\n", "colour = blue"},
	};
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char path[PATH_MAX], state[PATH_MAX], text[256];
		snprintf(path, sizeof path, "%s/bad%zu.conf", dir, i);
		snprintf(state, sizeof state, "%s/state%zu", dir, i);
		snprintf(text, sizeof text, "[storage]\nflush_interval_s = 2\n\n[export.otlp]\n%s", bad[i][0]);
		write_text_file(path, text);
		const char *argv[] = {pyprofd_bin(), "--state-dir", state, "--config", path, NULL};
		struct run_result r;
		run_command(&r, argv, NULL);
		char want[PATH_MAX + 300];
		/* What a setting takes is said where there are a few forms; else that it is bad. */
		if (strstr(bad[i][1], " must be "))
			snprintf(want, sizeof want, "%s:5: [export.otlp] %s", path, bad[i][1]);
		else
			snprintf(want, sizeof want, "%s:5: bad or unknown setting [export.otlp] %s", path, bad[i][1]);
		cr_expect(r.exited && r.code == 2, "%s: the daemon did not refuse it (%d)", bad[i][1], r.code);
		cr_expect(strstr(r.err, want), "%s: stderr does not say '%s': %s", bad[i][1], want, r.err);
		run_result_free(&r);
	}
}

/*
 * pyprofd-ctl export: bad use is refused before it connects, another user
 * than root is refused by the daemon, and a collector that is not there
 * fails the backfill with why.
 */
Test(otlp, backfill_refuses_bad_use_and_reports_failure, .timeout = 120)
{
	struct daemon d;
	daemon_start(&d, NULL);
	const char *no_url[] = {"export", "--since", "1h", NULL};
	ctl_expect_failure(&d, no_url, 2, NULL, "without --otlp");
	const char *no_range[] = {"export", "--otlp", "http://127.0.0.1:9", NULL};
	ctl_expect_failure(&d, no_range, 2, NULL, "without a range");
	const char *ftp[] = {"export", "--otlp", "ftp://127.0.0.1:9", "--since", "1h", NULL};
	ctl_expect_failure(&d, ftp, 2, NULL, "not http");
	/* More labels than the history keeps: a bad request, said before any job reads the history. */
	const char *many[5 + 65 + 1] = {"export", "--otlp", "http://127.0.0.1:9", "--since", "1h"};
	char label_text[65][24];
	for (int i = 0; i < 65; i++) {
		snprintf(label_text[i], sizeof label_text[i], "--label=k%d=v", i);
		many[5 + i] = label_text[i];
	}
	struct run_result many_r;
	ctl_run(&d, &many_r, many, NULL);
	cr_assert(many_r.exited && many_r.code != 0, "an export with 65 labels succeeded");
	cr_assert(strstr(many_r.err, "at most 64 labels") && !strstr(many_r.err, "reading the history"),
	          "65 labels were not refused as a bad request: %s", many_r.err);
	run_result_free(&many_r);
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", free_port());
	const char *nowhere[] = {"export", "--otlp", url, "--since", "1h", NULL};
	struct run_opts nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};
	ctl_expect_failure(&d, nowhere, 4, &nobody, "another user");

	/* Something to send, and nothing listening. */
	struct python pys[PYTHONS_MAX];
	pythons_supported(pys, PYTHONS_MAX);
	char dir[PATH_MAX - 64], script[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(script, sizeof script, "%s/idle.py", dir);
	write_text_file(script, idle_program);
	const char *args[] = {script, NULL};
	pid_t pid = spawn_python(&pys[0], args, NULL);
	char p[16];
	const char *attach[] = {"attach", pid_text(pid, p, sizeof p), "--rate", "200", NULL};
	struct run_result r;
	for (int k = 0;; k++) {
		ctl_run(&d, &r, attach, NULL);
		bool ok = r.exited && r.code == 0;
		run_result_free(&r);
		if (ok)
			break;
		cr_assert(k < 200, "attach failed");
		pause_ms(50);
	}
	pause_ms(1500);
	ctl_run(&d, &r, nowhere, NULL);
	cr_expect(r.exited && r.code == 1, "a backfill to nowhere: exit %d", r.code);
	cr_expect(strstr(r.err, "onnect") && strstr(r.err, url), "stderr: %s", r.err);
	run_result_free(&r);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	daemon_stop(&d);
}
