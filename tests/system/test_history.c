/*
 * History end to end: the real daemon writes what it samples to its SQLite
 * file, `pyprofd-ctl query` reads it back in every format, and what was
 * stored survives the daemon being killed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
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

TestSuite(history, .init = helpers_init, .fini = helpers_fini);

/* The stats counter of the samples a target handed to the history. */
static json_int_t history_samples(const struct daemon *d, pid_t pid)
{
	char p[16];
	const char *args[] = {"stats", pid_text(pid, p, sizeof p), NULL};
	json_t *st = ctl_json(d, args);
	json_int_t n = jint(st, "history_samples");
	json_decref(st);
	return n;
}

/* Sample a parked target for a while, then detach: nothing more is counted after. */
static json_int_t sample_then_detach(const struct daemon *d, pid_t pid, long ms)
{
	char p[16];
	const char *attach[] = {"attach", pid_text(pid, p, sizeof p), "--rate", "200", "--label",
	                        "service=history-test", NULL};
	ctl_ok(d, attach);
	pause_ms(ms);
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(d, detach);
	return history_samples(d, pid);
}

/*
 * What is stored equals what was sampled, on every version, and the query
 * answers before and after the flush alike; every format comes out.
 */
Test(history, stored_totals_equal_samples_taken, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	/* An hour between flushes: queries must include what the loop still holds. */
	static const char *const slow_flush[] = {"--flush-interval", "3600", NULL};
	struct daemon d;
	daemon_start(&d, slow_flush);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		test_target_start(&target, &pys[i], "nested");
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		json_int_t taken = sample_then_detach(&d, target.pid, 600);
		cr_assert_gt(taken, 20, "%s: few samples", pys[i].path);
		char p[16];
		const char *by_pid[] = {"--pid", pid_text(target.pid, p, sizeof p), NULL};
		cr_assert_eq(query_total(&d, by_pid, NULL), taken, "%s: stored %lld of %lld samples",
		             pys[i].path, (long long)query_total(&d, by_pid, NULL), (long long)taken);

		/* The parked stack, root first, in collapsed form. */
		const char *collapsed[] = {"query", "--pid", p, "--format", "collapsed", NULL};
		struct run_result r;
		ctl_run(&d, &r, collapsed, NULL);
		cr_assert(r.exited && r.code == 0);
		cr_assert(strstr(r.out, "nested_outer (") && strstr(r.out, ";nested_middle (") &&
		          strstr(r.out, ";nested_inner (") && strstr(r.out, ";hold ("),
		          "%s: the parked stack is not in the collapsed output:\n%s", pys[i].path, r.out);
		run_result_free(&r);
		test_target_kill(&target);
	}
	static const char *const by_label[] = {"--label", "service=history-test", "--since", "1h", NULL};
	static const char *const other_label[] = {"--label", "service=nothing", NULL};
	cr_assert_gt(query_total(&d, by_label, NULL), 0);
	cr_assert_eq(query_total(&d, other_label, NULL), 0);
	static const char *const future[] = {"--from", "4102444800", NULL}; /* 2100 */
	cr_assert_eq(query_total(&d, future, NULL), 0);

	/* Each format, to a file. */
	static const char *const formats[] = {"flamegraph", "speedscope", "pprof", "table", "collapsed"};
	for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
		char path[PATH_MAX + 32];
		snprintf(path, sizeof path, "%s/out.%s", d.dir, formats[k]);
		const char *args[] = {"query", "--format", formats[k], "-o", path, NULL};
		ctl_ok(&d, args);
		FILE *f = fopen(path, "rb");
		cr_assert_not_null(f, "%s: no output file", formats[k]);
		unsigned char head[64] = {0};
		size_t got = fread(head, 1, sizeof head - 1, f);
		fclose(f);
		cr_assert_gt(got, 2, "%s: empty output", formats[k]);
		if (strcmp(formats[k], "pprof") == 0)
			cr_assert(head[0] == 0x1f && head[1] == 0x8b, "pprof output is not gzip'd");
		if (strcmp(formats[k], "flamegraph") == 0)
			cr_assert(strstr((char *)head, "<!") || strstr((char *)head, "<html"), "not HTML: %s", head);
		if (strcmp(formats[k], "speedscope") == 0)
			cr_assert(head[0] == '{', "not JSON: %s", head);
	}
	static const char *const status[] = {"status", NULL};
	json_t *s = ctl_json(&d, status);
	json_t *h = json_object_get(s, "history");
	cr_assert(json_is_false(json_object_get(h, "failing")), "history failing: %s",
	          json_dumps(s, JSON_COMPACT));
	json_decref(s);
	daemon_stop(&d);
}

/* Another user's query sees none of root's history. */
Test(history, other_users_see_only_their_own, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct daemon d;
	daemon_start(&d, NULL);
	struct test_target target;
	test_target_start(&target, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	json_int_t taken = sample_then_detach(&d, target.pid, 400);
	static const char *const all[] = {NULL};
	cr_assert_eq(query_total(&d, all, NULL), taken);
	struct run_opts nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};
	cr_assert_eq(query_total(&d, all, &nobody), 0, "nobody read root's history");
	daemon_stop(&d);
}

/*
 * kill -9 at any moment: restarted on the same state directory, the daemon
 * still has every sample older than one flush interval.
 */
Test(history, survives_kill_9, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target target;
	test_target_start(&target, &pys[n - 1], "threads20");
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	char p[16];
	const char *attach[] = {"attach", pid_text(target.pid, p, sizeof p), "--rate", "500", NULL};
	ctl_ok(&d, attach);
	pause_ms(2500);
	/* What was counted up to a moment more than a flush interval before the kill. */
	json_int_t counted = history_samples(&d, target.pid);
	pause_ms(1500 + rand() % 1000);
	cr_assert(kill(d.pid, SIGKILL) == 0);
	int status;
	waitpid(d.pid, &status, 0);

	/* Same state directory, a new daemon. */
	const char *argv[] = {pyprofd_bin(), "--state-dir", d.state, "--socket", d.sock, NULL};
	unlink(d.sock);
	d.pid = spawn_process((char *const *)argv, d.log);
	cr_assert(daemon_wait_listening(&d) && daemon_serves(&d), "the daemon did not come back");
	const char *by_pid[] = {"--pid", p, NULL};
	json_int_t stored = query_total(&d, by_pid, NULL);
	cr_assert_geq(stored, counted, "only %lld of the %lld samples counted a flush before the kill survived",
	              (long long)stored, (long long)counted);
	static const char *const statusq[] = {"status", NULL};
	json_t *s = ctl_json(&d, statusq);
	cr_assert(json_is_false(json_object_get(json_object_get(s, "history"), "failing")));
	json_decref(s);
	daemon_stop(&d);
}

static void write_state_config(const struct daemon *d, const char *text)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/pyprofd.conf", d->state);
	write_text_file(path, text);
}

/* The history's health as status reports it. */
static bool history_failing(const struct daemon *d, json_int_t *pending)
{
	static const char *const status[] = {"status", NULL};
	json_t *s = ctl_json(d, status);
	json_t *h = json_object_get(s, "history");
	bool failing = json_is_true(json_object_get(h, "failing"));
	if (pending)
		*pending = json_integer_value(json_object_get(h, "pending_rows"));
	json_decref(s);
	return failing;
}

/*
 * A full disk: writes fail, the daemon says so (log and status), keeps
 * sampling into memory, loses nothing stored, and catches up when there is
 * room again.
 */
Test(history, full_disk_then_recovery, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	/* A busy target whose stacks keep changing: its history keeps needing new pages. */
	char script[PATH_MAX];
	target_script("callgraph.py", script, sizeof script);
	const char *args[] = {"-I", script, "{report}", NULL};
	struct test_target target;
	test_target_start_python(&target, &pys[n - 1], args);
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	char p[16];
	const char *attach[] = {"attach", pid_text(target.pid, p, sizeof p), "--rate", "500", NULL};
	ctl_ok(&d, attach);
	pause_ms(1500);
	/* A file limit of one page: the file cannot grow at all. */
	write_state_config(&d, "[storage]\nmax_file_kb = 1\n");
	cr_assert(kill(d.pid, SIGHUP) == 0);
	json_int_t pending = 0;
	bool failed = false;
	/* Writes fail once the free pages the file already has are used up: seconds, or more under load. */
	for (int i = 0; i < 600 && !failed; i++) {
		failed = history_failing(&d, &pending);
		pause_ms(100);
	}
	cr_assert(failed, "the history never reported failing writes");
	cr_assert(daemon_alive(&d) && daemon_serves(&d));
	/* The log speaks at the next flush. */
	char *log = NULL;
	for (int i = 0; i < 50; i++) {
		free(log);
		log = daemon_log(&d);
		if (strstr(log, "history: writing"))
			break;
		pause_ms(100);
	}
	cr_assert_not_null(strstr(log, "history: writing"), "no log line for the failing writes:\n%s", log);
	free(log);

	/* Still full: a query counts what waits in memory too. */
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	json_int_t taken = history_samples(&d, target.pid);
	const char *by_pid[] = {"--pid", p, NULL};
	cr_assert(history_failing(&d, &pending) && pending > 0, "the disk is no longer full");
	cr_assert_eq(query_total(&d, by_pid, NULL), taken,
	             "a query during the outage misses what waits in memory");

	/* Room again: everything counted meanwhile is written, and counted once. */
	write_state_config(&d, "[storage]\nmax_file_kb = 0\n");
	cr_assert(kill(d.pid, SIGHUP) == 0);
	for (int i = 0; i < 200 && history_failing(&d, NULL); i++)
		pause_ms(100);
	cr_assert(!history_failing(&d, NULL), "the history did not recover");
	cr_assert_eq(query_total(&d, by_pid, NULL), taken, "samples were lost to the full disk");
	daemon_stop(&d);
}

/* diff: two ranges side by side, shares compared; a steady target does not change. */
Test(history, diff_of_two_ranges, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target target;
	test_target_start(&target, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	char dir[PATH_MAX - 64], conf[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", dir);
	write_text_file(conf, "[storage]\nbucket_seconds = 1\nflush_interval_s = 1\n");
	const char *extra[] = {"--config", conf, NULL};
	struct daemon d;
	daemon_start(&d, extra);
	char p[16];
	const char *attach[] = {"attach", pid_text(target.pid, p, sizeof p), "--rate", "200", NULL};
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	long t0 = (long)ts.tv_sec;
	ctl_ok(&d, attach);
	pause_ms(2600);
	clock_gettime(CLOCK_REALTIME, &ts);
	long t1 = (long)ts.tv_sec;
	pause_ms(2600);
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);

	char base[64], compare[64];
	snprintf(base, sizeof base, "%ld..%ld", t0 - 1, t1);
	snprintf(compare, sizeof compare, "%ld..now", t1);
	const char *args[] = {"diff", "--pid", p, "--base", base, "--compare", compare, NULL};
	json_t *j = ctl_json(&d, args);
	json_int_t b = jint(j, "base_samples"), c = jint(j, "compare_samples");
	cr_assert_gt(b, 0, "no samples in the base range");
	cr_assert_gt(c, 0, "no samples in the compared range");
	const char *by_pid[] = {"--pid", p, NULL};
	cr_assert_eq(b + c, query_total(&d, by_pid, NULL), "the two ranges do not add up to the whole");
	bool found = false;
	size_t i;
	json_t *row;
	json_array_foreach(json_object_get(j, "functions"), i, row) {
		if (strcmp(json_string_value(json_object_get(row, "function")), "hold") != 0)
			continue;
		found = true;
		double change = json_real_value(json_object_get(row, "own_percent_change"));
		cr_assert(change > -1 && change < 1, "a parked thread's share changed by %.2f points", change);
		/* Each side counts as a function table of its range alone would. */
		char b_from[32], b_until[32];
		snprintf(b_from, sizeof b_from, "%ld", t0 - 1);
		snprintf(b_until, sizeof b_until, "%ld", t1);
		const char *base_table[] = {"query", "--pid", p, "--from", b_from, "--until", b_until,
		                            "--format", "table", "--json", NULL};
		json_t *bt = ctl_json(&d, base_table);
		json_t *first = json_array_get(json_object_get(bt, "functions"), 0);
		cr_assert_str_eq(json_string_value(json_object_get(first, "function")), "hold");
		cr_assert_eq(jint(first, "own"), jint(row, "base_own"));
		cr_assert_eq(jint(first, "total"), jint(row, "base_total"));
		cr_assert_eq(jint(bt, "samples"), b);
		json_decref(bt);
	}
	cr_assert(found, "hold() is not in the comparison: %s", json_dumps(j, JSON_COMPACT));
	json_decref(j);
	daemon_stop(&d);
}

/* One function's counts, as the test works them out from the stacks. */
struct fn_count {
	char key[512]; /* "function\x1ffile" */
	json_int_t own, total;
	size_t seen; /* the stack (+1) that last counted its total */
};

/* The function table worked out from a query's stacks (--format json): the daemon's must equal it. */
static size_t functions_from_stacks(json_t *profile, struct fn_count *fns, size_t cap,
                                    json_int_t *samples)
{
	json_t *frames = json_object_get(profile, "frames");
	size_t n = 0, si;
	json_t *st;
	*samples = 0;
	json_array_foreach(json_object_get(profile, "stacks"), si, st) {
		json_int_t count = jint(st, "count");
		json_t *ids = json_object_get(st, "frames");
		*samples += count;
		for (size_t d = 0; d < json_array_size(ids); d++) {
			json_t *f = json_array_get(frames, (size_t)json_integer_value(json_array_get(ids, d)));
			char key[512];
			snprintf(key, sizeof key, "%s\x1f%s", json_string_value(json_object_get(f, "function")),
			         json_string_value(json_object_get(f, "file")));
			size_t k = 0;
			while (k < n && strcmp(fns[k].key, key) != 0)
				k++;
			if (k == n) {
				cr_assert_lt(n, cap, "more functions than the test expects");
				memset(&fns[n], 0, sizeof fns[n]);
				snprintf(fns[n++].key, sizeof fns[k].key, "%s", key);
			}
			if (d + 1 == json_array_size(ids))
				fns[k].own += count;
			if (fns[k].seen != si + 1) {
				fns[k].seen = si + 1;
				fns[k].total += count;
			}
		}
	}
	return n;
}

/*
 * The function table is counted by the daemon: it equals the one worked out
 * from the same range's stacks, recursion counts once per stack, rows come
 * by own then total, and --limit keeps the first rows and says how many
 * there were.
 */
Test(history, function_table_counted_by_daemon, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target deep, many;
	test_target_start(&deep, &pys[n - 1], "recursion");
	test_target_start(&many, &pys[0], "threads20");
	json_decref(test_target_wait_report(&deep, TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&many, TARGET_READY_TIMEOUT_S));
	struct daemon d;
	daemon_start(&d, NULL);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char from[32], until[32], p1[16], p2[16];
	/* Ranges select whole buckets by their start: from reaches back past the current one. */
	snprintf(from, sizeof from, "%ld", (long)ts.tv_sec - 60);
	pid_text(deep.pid, p1, sizeof p1);
	pid_text(many.pid, p2, sizeof p2);
	const char *a1[] = {"attach", p1, "--rate", "200", "--label", "service=fn-test", NULL};
	const char *a2[] = {"attach", p2, "--rate", "200", "--label", "service=fn-test", NULL};
	ctl_ok(&d, a1);
	ctl_ok(&d, a2);
	pause_ms(1500);
	const char *d1[] = {"detach", p1, NULL}, *d2[] = {"detach", p2, NULL};
	ctl_ok(&d, d1);
	ctl_ok(&d, d2);
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(until, sizeof until, "%ld", (long)ts.tv_sec + 2);

	const char *stacks[] = {"query", "--label", "service=fn-test", "--from", from, "--until", until,
	                        "--format", "json", NULL};
	json_t *profile = ctl_json(&d, stacks);
	static struct fn_count want[4096];
	json_int_t samples;
	size_t nwant = functions_from_stacks(profile, want, 4096, &samples);
	json_decref(profile);
	cr_assert_gt(samples, 100, "few samples");
	cr_assert_gt(nwant, 20, "the 20 workers' functions are missing");

	const char *table[] = {"query", "--label", "service=fn-test", "--from", from, "--until", until,
	                       "--format", "table", "--json", NULL};
	json_t *t = ctl_json(&d, table);
	cr_assert_eq(jint(t, "samples"), samples);
	cr_assert_eq(jint(t, "functions_found"), (json_int_t)nwant);
	json_t *rows = json_object_get(t, "functions");
	cr_assert_eq(json_array_size(rows), nwant);
	json_int_t own_sum = 0, prev_own = -1, prev_total = -1;
	bool recursion_seen = false;
	size_t i;
	json_t *row;
	json_array_foreach(rows, i, row) {
		char key[512];
		const char *fn = json_string_value(json_object_get(row, "function"));
		snprintf(key, sizeof key, "%s\x1f%s", fn, json_string_value(json_object_get(row, "file")));
		size_t k = 0;
		while (k < nwant && strcmp(want[k].key, key) != 0)
			k++;
		cr_assert_lt(k, nwant, "the daemon counted %s, which no stack has", fn);
		cr_assert_eq(jint(row, "own"), want[k].own, "%s: own", fn);
		cr_assert_eq(jint(row, "total"), want[k].total, "%s: total", fn);
		own_sum += jint(row, "own");
		if (prev_own >= 0)
			cr_assert(jint(row, "own") < prev_own ||
			                  (jint(row, "own") == prev_own && jint(row, "total") <= prev_total),
			          "row %zu (%s) is out of order", i, fn);
		prev_own = jint(row, "own");
		prev_total = jint(row, "total");
		if (strcmp(fn, "recurse") == 0) {
			recursion_seen = true;
			cr_assert_leq(jint(row, "total"), samples, "recursion counted more than once per stack");
		}
	}
	cr_assert(recursion_seen, "recurse() is not in the table");
	cr_assert_eq(own_sum, samples, "every sample has one innermost function");

	const char *top3[] = {"query", "--label", "service=fn-test", "--from", from, "--until", until,
	                      "--format", "table", "--limit", "3", "--json", NULL};
	json_t *t3 = ctl_json(&d, top3);
	cr_assert_eq(json_array_size(json_object_get(t3, "functions")), 3);
	cr_assert_eq(jint(t3, "functions_found"), (json_int_t)nwant);
	for (size_t k = 0; k < 3; k++)
		cr_assert(json_equal(json_array_get(json_object_get(t3, "functions"), k), json_array_get(rows, k)),
		          "row %zu differs under --limit", k);
	json_decref(t3);
	json_decref(t);

	const char *text[] = {"query", "--label", "service=fn-test", "--from", from, "--until", until,
	                      "--format", "table", "--limit", "5", NULL};
	struct run_result r;
	ctl_run(&d, &r, text, NULL);
	cr_assert(r.exited && r.code == 0);
	char more[64];
	snprintf(more, sizeof more, "(%zu more functions", nwant - 5);
	/* Both were sampled at 200 Hz in wall mode: their stored sessions say so. */
	cr_assert(strstr(r.out, "service=fn-test: wall, ") && strstr(r.out, " samples at 200 Hz, ") &&
	                  strstr(r.out, "own%") && strstr(r.out, more),
	          "%s", r.out);
	run_result_free(&r);

	/* Which processes the range has, and a target id selects one of them. */
	const char *procs[] = {"query", "--label", "service=fn-test", "--from", from, "--until", until,
	                       "--format", "processes", "--json", NULL};
	json_t *pl = ctl_json(&d, procs);
	cr_assert_eq(json_array_size(pl), 2, "%s", json_dumps(pl, JSON_COMPACT));
	json_int_t proc_sum = 0;
	json_t *proc;
	json_array_foreach(pl, i, proc) {
		json_int_t pid = jint(proc, "pid");
		cr_assert(pid == deep.pid || pid == many.pid, "pid %lld was not attached", (long long)pid);
		cr_assert_str_eq(json_string_value(json_object_get(json_object_get(proc, "labels"), "service")),
		                 "fn-test");
		cr_assert_lt(json_real_value(json_object_get(proc, "first")),
		             json_real_value(json_object_get(proc, "last")));
		proc_sum += jint(proc, "samples");
		char id[32];
		snprintf(id, sizeof id, "%lld", (long long)jint(proc, "target_id"));
		const char *by_target[] = {"--target", id, "--from", from, "--until", until, NULL};
		cr_assert_eq(query_total(&d, by_target, NULL), jint(proc, "samples"), "target %s", id);
	}
	cr_assert_eq(proc_sum, samples);
	json_decref(pl);

	/* Sampled at another rate too: the range no longer has one rate, and exports say so. */
	const char *again[] = {"attach", p2, "--rate", "50", NULL};
	ctl_ok(&d, again);
	pause_ms(300);
	ctl_ok(&d, d2);
	snprintf(until, sizeof until, "%ld", (long)time(NULL) + 2);
	ctl_run(&d, &r, stacks, NULL);
	cr_assert(r.exited && r.code == 0);
	json_t *mixed = json_loads(r.out, 0, NULL);
	cr_assert_not_null(mixed);
	cr_assert(strstr(r.err, "different rates"), "no warning of mixed rates: %s", r.err);
	json_decref(mixed);
	run_result_free(&r);
	daemon_stop(&d);
	test_target_kill(&deep);
	test_target_kill(&many);
}

static json_t *daemon_history_status(const struct daemon *d)
{
	static const char *const status[] = {"status", NULL};
	json_t *s = ctl_json(d, status);
	json_t *h = json_incref(json_object_get(s, "history"));
	json_decref(s);
	return h;
}

/*
 * A database the daemon may not write: it starts anyway, samples into
 * memory, says so in status and in its log, and once the file is writable
 * again writes everything it kept: the stored total is exact.
 */
Test(history, read_only_database_waits_and_recovers, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = nobody_daemon_setup(pys);
	char dir[PATH_MAX - 64], db[PATH_MAX + 16], p[16];
	scratch_dir(dir, sizeof dir);
	static const char *const flags[] = {"--flush-interval", "1", "--log-level", "info", NULL};
	struct test_target own;
	const char *as_nobody[] = {AS_NOBODY, py->path, "-I", "-c", idle_program, NULL};
	test_target_start_argv(&own, as_nobody);
	pid_text(own.pid, p, sizeof p);

	/* A first run stores some samples, and leaves the file. */
	struct daemon d;
	nobody_daemon_start(&d, dir, flags);
	attach_as_nobody(&d, own.pid, "first run");
	pause_ms(1200);
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	json_int_t first = history_samples(&d, own.pid);
	daemon_stop(&d);
	cr_assert_gt(first, 0);
	snprintf(db, sizeof db, "%s/pyprofd.db", d.state);
	cr_assert(chmod(db, 0444) == 0, "%s: %s", db, strerror(errno));

	/* The second run cannot write it. */
	nobody_daemon_start(&d, dir, flags);
	attach_as_nobody(&d, own.pid, "second run");
	pause_ms(2500);
	json_t *h = daemon_history_status(&d);
	cr_assert(json_is_true(json_object_get(h, "failing")), "a read-only file is not failing: %s",
	          json_dumps(h, JSON_COMPACT));
	cr_assert(strstr(json_string_value(json_object_get(h, "error")), "readonly"),
	          "the error does not say why: %s", json_dumps(h, JSON_COMPACT));
	cr_assert_gt(jint(h, "pending_rows"), 0, "no samples wait in memory");
	cr_assert_eq(jint(h, "dropped_rows"), 0);
	json_decref(h);
	char *log = daemon_log(&d);
	cr_assert(strstr(log, "readonly") && strstr(log, "samples wait in memory"),
	          "the log does not say it: %s", log);
	free(log);

	/* Writable again: everything kept in memory reaches the file. */
	cr_assert(chmod(db, 0644) == 0);
	bool recovered = false;
	for (int i = 0; i < 100 && !recovered; i++) {
		pause_ms(100);
		h = daemon_history_status(&d);
		recovered = json_is_false(json_object_get(h, "failing")) && jint(h, "pending_rows") == 0;
		json_decref(h);
	}
	cr_assert(recovered, "the daemon did not write again once the file was writable");
	ctl_ok(&d, detach);
	json_int_t second = history_samples(&d, own.pid);
	cr_assert_gt(second, 0);
	const char *by_pid[] = {"--pid", p, NULL};
	cr_assert_eq(query_total(&d, by_pid, NULL), first + second,
	             "stored %lld samples of %lld + %lld", (long long)query_total(&d, by_pid, NULL),
	             (long long)first, (long long)second);
	/* The log says so at the next flush. */
	bool said = false;
	for (int i = 0; i < 50 && !said; i++) {
		log = daemon_log(&d);
		said = strstr(log, " again (0 rows dropped meanwhile)") != NULL;
		if (!said) {
			free(log);
			pause_ms(100);
		}
	}
	cr_assert(said, "the log does not say it recovered: %s", log);
	free(log);
	daemon_stop(&d);
	test_target_kill(&own);
}

/* Query requests the daemon cannot answer are refused one by one; the connection goes on. */
Test(history, query_refuses_bad_requests, .timeout = 60)
{
	struct daemon d;
	daemon_start(&d, NULL);
	int fd = daemon_connect(&d);
	Pyprofd__Label label = PYPROFD__LABEL__INIT, *many[65];
	label.key = "k";
	label.value = "v";
	for (size_t i = 0; i < 65; i++)
		many[i] = &label;
	for (int bad = 0; bad < 5; bad++) {
		Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
		switch (bad) {
		case 0:
			q.aggregate = 99; /* a kind this daemon does not know */
			break;
		case 1:
			q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_DIFF;
			q.base_from_unix = 2000;
			q.base_until_unix = 1000;
			break;
		case 2:
			q.from_unix = 2000;
			q.until_unix = 1000;
			break;
		case 3:
			q.labels = many;
			q.n_labels = 65;
			break;
		case 4:
			q.pid = -1;
			break;
		}
		Pyprofd__Request req = PYPROFD__REQUEST__INIT;
		req.id = 100 + (uint64_t)bad;
		req.body_case = PYPROFD__REQUEST__BODY_QUERY;
		req.query = &q;
		cr_assert(send_request(fd, &req));
		Pyprofd__Response *r = recv_response(fd, 10.0);
		cr_assert_not_null(r, "case %d: no answer", bad);
		cr_assert_eq(r->id, 100 + (uint64_t)bad);
		cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_ERROR, "case %d answered", bad);
		cr_assert_eq(r->error->code, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "case %d: code %d", bad,
		             r->error->code);
		pyprofd__response__free_unpacked(r, NULL);
	}
	/* And a good one still works on the same connection. */
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_FUNCTIONS;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.id = 7;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	cr_assert(send_request(fd, &req));
	Pyprofd__Response *r = recv_response(fd, 10.0);
	if (!r) {
		char *log = daemon_log(&d);
		cr_assert_fail("no answer to a good query; daemon log:\n%s", log);
	}
	cr_assert(r && r->id == 7 && r->result_case == PYPROFD__RESPONSE__RESULT_QUERY, "%s",
	          r && r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "no answer");
	cr_assert_eq(r->query->total, 0);
	pyprofd__response__free_unpacked(r, NULL);
	close(fd);
	daemon_stop(&d);
}

/* ---- the database deleted or replaced under the daemon ---- */

/* Polls the history's status until pred holds (within 15 s); the status (owned) or the test fails. */
static json_t *history_when(const struct daemon *d, bool (*pred)(json_t *h), const char *what)
{
	json_t *h = NULL;
	for (int i = 0; i < 150; i++) {
		json_decref(h);
		h = daemon_history_status(d);
		if (pred(h))
			return h;
		pause_ms(100);
	}
	cr_assert_fail("the history never %s: %s", what, json_dumps(h, JSON_COMPACT));
	return NULL;
}

static bool history_has_rows(json_t *h)
{
	return jint(h, "rows_written") > 0;
}

static bool history_noticed(json_t *h)
{
	return jint(h, "file_changes") > 0;
}

static bool history_recovered(json_t *h)
{
	return jint(h, "file_changes") > 0 && json_is_false(json_object_get(h, "failing")) &&
	       json_is_true(json_object_get(h, "open")) && jint(h, "pending_rows") == 0;
}

/* How many lines of the daemon's log hold text, once at least one does (within 5 s). */
static int log_lines_with(const struct daemon *d, const char *text)
{
	int n = 0;
	for (int i = 0; i < 50 && n == 0; i++) {
		char *log = daemon_log(d);
		for (char *at = log; (at = strstr(at, text)); at += strlen(text))
			n++;
		free(log);
		if (n == 0)
			pause_ms(100);
	}
	return n;
}

/* A daemon flushing every second, sampling a parked target at 200 Hz, with rows in its file. */
static void history_episode_start(struct daemon *d, struct test_target *t, char *p, size_t plen)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	test_target_start(t, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(t, TARGET_READY_TIMEOUT_S));
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	daemon_start(d, fast_flush);
	const char *attach[] = {"attach", pid_text(t->pid, p, plen), "--rate", "200", NULL};
	ctl_ok(d, attach);
	json_decref(history_when(d, history_has_rows, "wrote a row"));
}

/*
 * The samples of pid stored, against those the target counted: at least
 * every one counted since `since` (each counted after the file went is
 * written to the file now at the path), and none twice.
 */
static json_int_t expect_stored_since(const struct daemon *d, const char *p, pid_t pid,
                                      json_int_t since, const char *what)
{
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(d, detach);
	json_int_t taken = history_samples(d, pid);
	const char *by_pid[] = {"--pid", p, NULL};
	json_int_t stored = query_total(d, by_pid, NULL);
	cr_assert_gt(taken - since, 0, "%s: no samples after the file went", what);
	cr_assert(stored >= taken - since && stored <= taken,
	          "%s: %lld samples stored; %lld were counted, %lld of them once the file had gone",
	          what, (long long)stored, (long long)taken, (long long)(taken - since));
	return stored;
}

/*
 * The database deleted while the daemon samples (alone, leaving its -wal
 * and -shm behind, or with them): status and the log say so once, a new
 * database is made at the path at once, and it holds every sample counted
 * since, so a restart finds them.  The -wal left behind is not taken for
 * the new file's.
 */
Test(history, database_deleted_while_sampling, .timeout = 300)
{
	for (int with_wal = 0; with_wal < 2; with_wal++) {
		const char *what = with_wal ? "deleted with its -wal and -shm" : "deleted alone";
		struct daemon d;
		struct test_target target;
		char p[16], db[PATH_MAX + 16], side[PATH_MAX + 32];
		history_episode_start(&d, &target, p, sizeof p);
		snprintf(db, sizeof db, "%s/pyprofd.db", d.state);
		cr_assert(unlink(db) == 0, "%s: %s", db, strerror(errno));
		for (int k = 0; with_wal && k < 2; k++) {
			snprintf(side, sizeof side, "%s%s", db, k ? "-shm" : "-wal");
			cr_assert(unlink(side) == 0, "%s: %s", side, strerror(errno));
		}
		json_int_t since = history_samples(&d, target.pid);
		pause_ms(1500);

		json_t *h = history_when(&d, history_recovered, "made a new database");
		cr_assert(strstr(jstr(h, "file_change"), "deleted"), "%s: status says %s", what,
		          json_dumps(h, JSON_COMPACT));
		json_decref(h);
		struct stat st;
		cr_assert(stat(db, &st) == 0 && S_ISREG(st.st_mode), "%s: no new database at %s", what, db);
		cr_assert_eq(log_lines_with(&d, "was deleted under the daemon"), 1,
		             "%s: not one log line for the episode", what);
		json_int_t stored = expect_stored_since(&d, p, target.pid, since, what);

		/* What the new file holds is on disk: a restart has it all. */
		daemon_stop(&d);
		const char *argv[] = {pyprofd_bin(), "--state-dir", d.state, "--socket", d.sock, NULL};
		d.pid = spawn_process((char *const *)argv, d.log);
		cr_assert(daemon_wait_listening(&d) && daemon_serves(&d), "the daemon did not come back");
		const char *by_pid[] = {"--pid", p, NULL};
		cr_assert_eq(query_total(&d, by_pid, NULL), stored, "%s: samples lost at the restart", what);
		daemon_stop(&d);
		test_target_kill(&target);
	}
}

/*
 * The database replaced by a file that is not one: never written (byte for
 * byte the same), said in status and once in the log, samples kept in
 * memory; once the operator takes it away a new database gets them all.
 */
Test(history, database_replaced_by_a_foreign_file, .timeout = 300)
{
	struct daemon d;
	struct test_target target;
	char p[16], db[PATH_MAX + 16], tmp[PATH_MAX + 16], side[PATH_MAX + 32];
	history_episode_start(&d, &target, p, sizeof p);
	snprintf(db, sizeof db, "%s/pyprofd.db", d.state);
	snprintf(tmp, sizeof tmp, "%s/notes.txt", d.state);
	char text[8192] = "";
	for (int i = 0; i < 100; i++)
		snprintf(text + strlen(text), sizeof text - strlen(text), "line %d of notes, not a database\n", i);
	write_text_file(tmp, text);
	cr_assert(rename(tmp, db) == 0, "rename: %s", strerror(errno));
	json_int_t since = history_samples(&d, target.pid);

	json_t *h = history_when(&d, history_noticed, "noticed the file was replaced");
	json_decref(h);
	/* Several retries of opening it, each refused. */
	pause_ms(2500);
	h = daemon_history_status(&d);
	cr_assert(json_is_true(json_object_get(h, "failing")) && json_is_false(json_object_get(h, "open")),
	          "the foreign file is taken: %s", json_dumps(h, JSON_COMPACT));
	cr_assert(strstr(jstr(h, "file_change"), "replaced") && strstr(jstr(h, "error"), "not a database"),
	          "status does not say what happened: %s", json_dumps(h, JSON_COMPACT));
	cr_assert_gt(jint(h, "pending_rows"), 0, "no samples wait in memory");
	cr_assert_eq(jint(h, "dropped_rows"), 0);
	json_decref(h);
	cr_assert_eq(log_lines_with(&d, "was replaced by another file"), 1, "not one log line for the episode");
	/* Queries answer from what the daemon keeps in memory, and say that is all they hold. */
	const char *const by_pid[] = {"query", "--format", "json", "--pid", p, NULL};
	struct run_result r;
	ctl_run(&d, &r, by_pid, NULL);
	char why[512];
	cr_assert(r.exited && r.code == 0, "a query fails while the file is foreign: %s",
	          run_describe(&r, why, sizeof why));
	cr_assert(strstr(r.err, "cannot be read") && strstr(r.err, "in memory"),
	          "the query does not say it answers from memory alone: %s", r.err);
	json_t *answer = json_loads(r.out, 0, NULL);
	cr_assert_not_null(answer, "no JSON: %s", r.out);
	json_int_t from_memory = 0;
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(answer, "stacks"), i, s)
		from_memory += jint(s, "count");
	cr_assert_gt(from_memory, 0, "the samples kept in memory are not in the answer: %s", r.out);
	json_decref(answer);
	run_result_free(&r);
	const char *const table[] = {"query", "--format", "table", "--pid", p, NULL};
	ctl_run(&d, &r, table, NULL);
	cr_assert(r.exited && r.code == 0 && strstr(r.out, "nested_inner"), "a table fails while the file is foreign: %s",
	          run_describe(&r, why, sizeof why));
	run_result_free(&r);
	size_t len;
	char *bytes = file_bytes(db, &len);
	cr_assert(len == strlen(text) && memcmp(bytes, text, len) == 0, "the foreign file was written to");
	free(bytes);
	/* The old database's -wal and -shm are gone: they would be taken for the next file's. */
	for (int k = 0; k < 2; k++) {
		struct stat st;
		snprintf(side, sizeof side, "%s%s", db, k ? "-shm" : "-wal");
		cr_assert(lstat(side, &st) != 0 && errno == ENOENT, "%s is still there", side);
	}

	/* The operator takes it away: a new database, with everything kept. */
	cr_assert(rename(db, tmp) == 0);
	json_decref(history_when(&d, history_recovered, "made a new database"));
	expect_stored_since(&d, p, target.pid, since, "after a foreign file");
	bytes = file_bytes(tmp, &len);
	cr_assert(len == strlen(text) && memcmp(bytes, text, len) == 0, "the foreign file was written to");
	free(bytes);
	daemon_stop(&d);
	test_target_kill(&target);
}

/*
 * The database replaced by another pyprofd history: the daemon takes it,
 * writes there what it counted since, and what that history held stays.
 */
Test(history, database_replaced_by_another_history, .timeout = 300)
{
	/* Another daemon's history, of another process. */
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target other;
	test_target_start(&other, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(&other, TARGET_READY_TIMEOUT_S));
	struct daemon b;
	daemon_start(&b, NULL);
	char op[16];
	json_int_t other_taken = sample_then_detach(&b, other.pid, 600);
	cr_assert_gt(other_taken, 0);
	daemon_stop(&b);

	struct daemon d;
	struct test_target target;
	char p[16], db[PATH_MAX + 16], theirs[PATH_MAX + 16];
	history_episode_start(&d, &target, p, sizeof p);
	snprintf(db, sizeof db, "%s/pyprofd.db", d.state);
	snprintf(theirs, sizeof theirs, "%s/pyprofd.db", b.state);
	cr_assert(rename(theirs, db) == 0, "rename: %s", strerror(errno));
	json_int_t since = history_samples(&d, target.pid);

	json_t *h = history_when(&d, history_recovered, "took the other history");
	cr_assert(strstr(jstr(h, "file_change"), "replaced"), "status says %s", json_dumps(h, JSON_COMPACT));
	json_decref(h);
	cr_assert_eq(log_lines_with(&d, "was replaced by another file"), 1, "not one log line for the episode");
	expect_stored_since(&d, p, target.pid, since, "after another history");
	const char *theirs_by_pid[] = {"--pid", pid_text(other.pid, op, sizeof op), NULL};
	cr_assert_eq(query_total(&d, theirs_by_pid, NULL), other_taken, "the other history lost samples");
	daemon_stop(&d);
	test_target_kill(&target);
	test_target_kill(&other);
}

/*
 * The state directory moved under the daemon, and another put at its
 * path: the daemon goes on with the files of the directory it checked (it
 * holds it open), and never touches the one now at the path.
 */
Test(history, state_dir_moved_keeps_its_file, .timeout = 300)
{
	struct daemon d;
	struct test_target target;
	char p[16], moved[PATH_MAX + 16], decoy_db[PATH_MAX + 16];
	history_episode_start(&d, &target, p, sizeof p);
	snprintf(moved, sizeof moved, "%s/moved", d.dir);
	cr_assert(rename(d.state, moved) == 0, "rename: %s", strerror(errno));
	cr_assert(mkdir(d.state, 0700) == 0);
	pause_ms(2500);

	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	json_int_t taken = history_samples(&d, target.pid);
	const char *by_pid[] = {"--pid", p, NULL};
	cr_assert_eq(query_total(&d, by_pid, NULL), taken, "the daemon lost its file when its directory moved");
	json_t *h = daemon_history_status(&d);
	cr_assert(json_is_false(json_object_get(h, "failing")) && jint(h, "file_changes") == 0,
	          "the daemon took the move for a change of file: %s", json_dumps(h, JSON_COMPACT));
	json_decref(h);
	snprintf(decoy_db, sizeof decoy_db, "%s/pyprofd.db", d.state);
	struct stat st;
	cr_assert(stat(decoy_db, &st) != 0, "the daemon made a database in the directory now at its path");
	daemon_stop(&d);
	test_target_kill(&target);
}
