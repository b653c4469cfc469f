/*
 * What a request may hold and what an answer may tell, on the real daemon
 * with raw frames: every string a client sends is UTF-8 without a NUL
 * byte, every time bound finite and sane, or the request is refused
 * naming the field, and nothing of it is kept; pyprofd-ctl refuses the
 * same in the same words before it connects.  And `status` tells a user
 * other than root of its own targets, connections and queries alone.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(requests, .init = helpers_init, .fini = helpers_fini);

/* The words both the daemon and pyprofd-ctl refuse these with. */
#define NOT_UTF8_VALUE "attach.labels[0].value is not UTF-8 (byte 0xff at byte 0)"
#define NUL_IN_VALUE "attach.labels[0].value holds a NUL byte (at byte 1): strings may not"
#define OUT_OF_RANGE "a time is unix seconds from 0 (1970) to 9000000000 (2255-03-14)"

static uint64_t next_id = 1000;

/* Send req with every '~' of its frame made `to` (a NUL, which C strings cannot carry); the answer. */
static Pyprofd__Response *call_with(int fd, Pyprofd__Request *req, unsigned char to)
{
	req->id = ++next_id;
	size_t len;
	unsigned char *frame = request_frame(req, &len);
	for (size_t i = 4; i < len; i++)
		if (frame[i] == '~')
			frame[i] = to;
	cr_assert(send_all(fd, frame, len), "the daemon closed the connection");
	free(frame);
	Pyprofd__Response *r = recv_response(fd, 30.0);
	cr_assert_not_null(r, "no answer to request %llu", (unsigned long long)req->id);
	cr_assert_eq(r->id, req->id);
	return r;
}

static Pyprofd__Response *call(int fd, Pyprofd__Request *req)
{
	return call_with(fd, req, '~');
}

/* r refuses its request as a bad one, in exactly these words. */
static void expect_refusal(Pyprofd__Response *r, const char *words, const char *context)
{
	cr_assert(r->result_case == PYPROFD__RESPONSE__RESULT_ERROR, "%s: taken, not refused", context);
	cr_assert_eq(r->error->code, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "%s: code %d (%s)", context,
	             (int)r->error->code, r->error->message);
	cr_assert_str_eq(r->error->message, words, "%s", context);
	pyprofd__response__free_unpacked(r, NULL);
}

/* r answers with result case want; freed. */
static void expect_answer(Pyprofd__Response *r, Pyprofd__Response__ResultCase want, const char *context)
{
	cr_assert(r->result_case == want, "%s: %s", context,
	          r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "another answer");
	pyprofd__response__free_unpacked(r, NULL);
}

/* An attach of pid with one label. */
static Pyprofd__Response *attach_labelled(int fd, pid_t pid, const char *key, const char *value,
                                          unsigned char tilde)
{
	Pyprofd__Label label = PYPROFD__LABEL__INIT;
	Pyprofd__Label *labels[] = {&label};
	label.key = (char *)key;
	label.value = (char *)value;
	Pyprofd__AttachRequest attach = PYPROFD__ATTACH_REQUEST__INIT;
	attach.pid = pid;
	attach.rate_hz = 200;
	attach.labels = labels;
	attach.n_labels = 1;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_ATTACH;
	req.attach = &attach;
	return call_with(fd, &req, tilde);
}

/* Whether a stored process has the label key=value. */
static bool labels_have(const Pyprofd__StoredProcess *p, const char *key, const char *value)
{
	for (size_t i = 0; i < p->n_labels; i++)
		if (strcmp(p->labels[i]->key, key) == 0 && strcmp(p->labels[i]->value, value) == 0)
			return true;
	return false;
}

Test(requests, strings_are_utf8_without_nul, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	cr_assert_gt(pythons_supported(pys, PYTHONS_MAX), 0, "no CPython found");
	struct test_target t;
	test_target_start(&t, &pys[0], "nested");
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	int fd = daemon_connect(&d);
	cr_assert(fd >= 0);

	/* Labels: bytes that are not UTF-8, a NUL in a value, a NUL in a key. */
	expect_refusal(attach_labelled(fd, t.pid, "service", "\xff\xfe", '~'), NOT_UTF8_VALUE,
	               "a value of \\xff\\xfe");
	expect_refusal(attach_labelled(fd, t.pid, "service", "a~b", 0), NUL_IN_VALUE, "a value a\\0b");
	expect_refusal(attach_labelled(fd, t.pid, "serv~ce", "x", 0),
	               "attach.labels[0].key holds a NUL byte (at byte 4): strings may not", "a key serv\\0ce");

	/* A rule's settings and a query's selection alike. */
	Pyprofd__RuleSetting exe = PYPROFD__RULE_SETTING__INIT, labels = PYPROFD__RULE_SETTING__INIT;
	Pyprofd__RuleSetting *settings[] = {&exe, &labels};
	exe.key = "match.exe";
	exe.value = "python3*";
	labels.key = "labels";
	labels.value = "service=\xc0\xaf";
	Pyprofd__RulesRequest rules = PYPROFD__RULES_REQUEST__INIT;
	rules.action = PYPROFD__RULES_ACTION__RULES_ADD;
	rules.name = "hostile";
	rules.settings = settings;
	rules.n_settings = 2;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_RULES;
	req.rules = &rules;
	expect_refusal(call(fd, &req), "rules.settings[1].value is not UTF-8 (byte 0xc0 at byte 8)",
	               "a rule's labels with an overlong '/'");
	labels.value = "service=a~b";
	expect_refusal(call_with(fd, &req, 0),
	               "rules.settings[1].value holds a NUL byte (at byte 9): strings may not",
	               "a rule's labels with a NUL");
	Pyprofd__Label sel = PYPROFD__LABEL__INIT;
	Pyprofd__Label *sels[] = {&sel};
	sel.key = "service";
	sel.value = "\xed\xa0\x80"; /* a surrogate */
	Pyprofd__QueryRequest query = PYPROFD__QUERY_REQUEST__INIT;
	query.labels = sels;
	query.n_labels = 1;
	query.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &query;
	expect_refusal(call(fd, &req), "query.labels[0].value is not UTF-8 (byte 0xed at byte 0)",
	               "a query selecting a surrogate");

	/* Nothing of them was kept: no rule, and the process stored under its good label alone. */
	Pyprofd__RulesRequest list_rules = PYPROFD__RULES_REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_RULES;
	req.rules = &list_rules;
	Pyprofd__Response *r = call(fd, &req);
	cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_RULES);
	cr_assert_eq(r->rules->n_rules, 0, "a refused rule was kept");
	pyprofd__response__free_unpacked(r, NULL);
	static const char *const list[] = {"list", NULL};
	json_t *targets = ctl_json(&d, list);
	cr_assert_eq(json_array_size(targets), 0, "a refused attach attached: %s",
	             json_dumps(targets, JSON_COMPACT));
	json_decref(targets);
	expect_answer(attach_labelled(fd, t.pid, "service", "good", '~'), PYPROFD__RESPONSE__RESULT_ATTACH,
	              "an attach with a good label");
	json_decref(entry_when(&d, t.pid, sampled_a_while, "sampled"));
	pause_ms(1500); /* a flush: the labels are in the file, not in memory alone */
	query.n_labels = 0;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &query;
	r = call(fd, &req);
	cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_QUERY, "%s",
	             r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "?");
	cr_assert_eq(r->query->n_processes, 1);
	const Pyprofd__StoredProcess *p = r->query->processes[0];
	cr_assert_eq(p->pid, t.pid);
	cr_assert(labels_have(p, "service", "good"), "the good label was not stored");
	for (size_t i = 0; i < p->n_labels; i++) {
		const char *k = p->labels[i]->key, *v = p->labels[i]->value;
		cr_assert(check_utf8_prefix((const uint8_t *)k, strlen(k)) == strlen(k) &&
		          check_utf8_prefix((const uint8_t *)v, strlen(v)) == strlen(v),
		          "a label that is not UTF-8 was stored: %s=%s", k, v);
		cr_assert(strcmp(v, "a") != 0 && strcmp(k, "serv") != 0, "a label cut at its NUL was stored: %s=%s",
		          k, v);
	}
	pyprofd__response__free_unpacked(r, NULL);
	close(fd);
	daemon_stop(&d);
	test_target_kill(&t);
}

/* Whether s is UTF-8 through and through. */
static bool all_utf8(const char *s)
{
	return check_utf8_prefix((const uint8_t *)s, strlen(s)) == strlen(s);
}

/* A process's strings as an answer gives them: UTF-8 all, its own labels those that were. */
static void expect_utf8_process(const char *exe, const char *line, Pyprofd__Label **labels, size_t n,
                                const char *where)
{
	cr_assert(all_utf8(exe), "%s: the executable is not UTF-8: %s", where, exe);
	cr_assert(all_utf8(line), "%s: the command line is not UTF-8: %s", where, line);
	cr_assert(strstr(exe, "python-\xef\xbf\xbd\xef\xbf\xbd"), "%s: the executable: %s", where, exe);
	cr_assert(strstr(line, "utf8-marker-\xef\xbf\xbd\xef\xbf\xbd-end"), "%s: the command line: %s", where, line);
	bool good = false;
	for (size_t i = 0; i < n; i++) {
		const char *k = labels[i]->key, *v = labels[i]->value;
		cr_assert(all_utf8(k) && all_utf8(v), "%s: a label that is not UTF-8: %s=%s", where, k, v);
		cr_assert(strncmp(k, "self.bad", 8) != 0 && strcmp(v, "bad") != 0, "%s: %s=%s", where, k, v);
		good = good || (strcmp(k, "self.good") == 0 && strcmp(v, "yes") == 0);
	}
	cr_assert(good, "%s: its good label of its own was lost", where);
}

/*
 * A thread that names itself with bytes that are not UTF-8 (its comm),
 * beside the idler.  Started below threading, which then knows no name of
 * it: its name is the kernel's.
 */
static const char named_thread_program[] =
	"import _thread, threading, time\n"
	"def named():\n"
	"    open('/proc/self/task/%d/comm' % threading.get_native_id(), 'wb').write(b'thr-\\xff\\xfe')\n"
	"    time.sleep(3600)\n"
	"_thread.start_new_thread(named, ())\n";

/*
 * A plain user's process whose executable, command line, own labels and a
 * thread's name hold bytes that are not UTF-8: list and the history give
 * its names with those bytes replaced (U+FFFD) and its labels that are not
 * UTF-8 left out, said once in the log.
 */
Test(requests, a_process_names_itself_in_utf8_alone, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	char dir[PATH_MAX - 64], exe[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	cr_assert(chmod(dir, 0755) == 0);
	snprintf(exe, sizeof exe, "%s/python-\xff\xfe", dir);
	/* Debian's static interpreter: a copy runs anywhere, finding its library by PYTHONHOME. */
	copy_executable("/usr/bin/python3.11", exe);
	char program[1024];
	snprintf(program, sizeof program, "%s%s", named_thread_program, idle_program);
	const char *argv[] = {"env", "PYTHONHOME=/usr", "PYPROFD_LABELS=good=yes,bad=\xff\xfe,\xc0\xaf=bad",
	                      AS_NOBODY, exe, "-c", program, "utf8-marker-\xff\xfe-end", NULL};
	struct test_target t;
	test_target_start_argv(&t, argv);
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	attach_as_nobody(&d, t.pid, "nobody attaching its own process");
	json_decref(entry_when(&d, t.pid, sampled_a_while, "sampled"));

	int fd = daemon_connect(&d);
	cr_assert(fd >= 0);
	Pyprofd__ListRequest list = PYPROFD__LIST_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_LIST;
	req.list = &list;
	/* Until the thread that names itself is listed by its name: names are read again now and then. */
	bool named = false;
	for (int tries = 0; tries < 300 && !named; tries++) {
		Pyprofd__Response *r = call(fd, &req);
		cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_LIST);
		cr_assert_eq(r->list->n_targets, 1);
		const Pyprofd__Target *target = r->list->targets[0];
		expect_utf8_process(target->executable, target->command_line, target->labels, target->n_labels,
		                    "list");
		for (size_t i = 0; i < target->n_threads; i++) {
			cr_assert(all_utf8(target->threads[i]->name), "list: a thread's name is not UTF-8: %s",
			          target->threads[i]->name);
			named = named || strstr(target->threads[i]->name, "thr-\xef\xbf\xbd");
		}
		pyprofd__response__free_unpacked(r, NULL);
		if (!named)
			pause_ms(100);
	}
	cr_assert(named, "list: the thread that named itself is not there by its name");

	pause_ms(1500); /* a flush: the names are in the file, not in memory alone */
	Pyprofd__QueryRequest query = PYPROFD__QUERY_REQUEST__INIT;
	query.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &query;
	Pyprofd__Response *r = call(fd, &req);
	cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_QUERY, "%s",
	             r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "?");
	cr_assert_eq(r->query->n_processes, 1);
	const Pyprofd__StoredProcess *p = r->query->processes[0];
	cr_assert_eq(p->pid, t.pid);
	expect_utf8_process(p->executable, p->command_line, p->labels, p->n_labels, "query");
	pyprofd__response__free_unpacked(r, NULL);
	close(fd);
	daemon_stop(&d);
	char *log = daemon_log(&d);
	char said[128];
	snprintf(said, sizeof said, "pid %d: 2 of its own labels (PYPROFD_LABELS) left out", (int)t.pid);
	const char *first = strstr(log, said);
	cr_assert(first && !strstr(first + 1, said), "not said once: %s\n%s", said, log);
	free(log);
	test_target_kill(&t);
}

/* A query of functions over [from, until), and for a diff the base range too. */
static Pyprofd__Response *query_range(int fd, double from, double until, bool diff, double base_from,
                                      double base_until)
{
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	q.aggregate = diff ? PYPROFD__QUERY_AGGREGATE__QUERY_DIFF : PYPROFD__QUERY_AGGREGATE__QUERY_FUNCTIONS;
	q.from_unix = from;
	q.until_unix = until;
	q.base_from_unix = base_from;
	q.base_until_unix = base_until;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	return call(fd, &req);
}

Test(requests, time_bounds_are_finite_and_sane, .timeout = 120)
{
	struct daemon d;
	daemon_start(&d, NULL);
	int fd = daemon_connect(&d);
	cr_assert(fd >= 0);
	double now = (double)time(NULL);
	static const struct {
		double from, until;
		bool diff;
		double base_from, base_until;
		const char *why;
	} bad[] = {
		{0, INFINITY, false, 0, 0, "query.until_unix is infinite"},
		{0, 1e300, false, 0, 0, "query.until_unix is 1e+300: " OUT_OF_RANGE},
		{0, 9.3e18, false, 0, 0, "query.until_unix is 9.3e+18: " OUT_OF_RANGE},
		{1e300, 0, false, 0, 0, "query.from_unix is 1e+300: " OUT_OF_RANGE},
		{-1, 0, false, 0, 0, "query.from_unix is -1: " OUT_OF_RANGE},
		{NAN, 0, false, 0, 0, "query.from_unix is not a number"},
		{2000, 1000, false, 0, 0, "query.until_unix (1000.000) is before query.from_unix (2000.000)"},
		{0, 0, true, 0, INFINITY, "query.base_until_unix is infinite"},
		{0, 0, true, 9.3e18, 0, "query.base_from_unix is 9.3e+18: " OUT_OF_RANGE},
		{0, 0, true, 2000, 1000, "query.base_until_unix (1000.000) is before query.base_from_unix (2000.000)"},
		{0, 1e10, true, 0, 0, "query.until_unix is 1e+10: " OUT_OF_RANGE},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char context[64];
		snprintf(context, sizeof context, "bad range %zu", i);
		expect_refusal(query_range(fd, bad[i].from, bad[i].until, bad[i].diff, bad[i].base_from,
		                           bad[i].base_until),
		               bad[i].why, context);
	}
	/* Good ones still work, on the same connection: open, the last hour, to the last time there is. */
	expect_answer(query_range(fd, 0, 0, false, 0, 0), PYPROFD__RESPONSE__RESULT_QUERY, "everything");
	expect_answer(query_range(fd, now - 3600, now, false, 0, 0), PYPROFD__RESPONSE__RESULT_QUERY,
	              "the last hour");
	expect_answer(query_range(fd, 0, CHECK_UNIX_MAX, false, 0, 0), PYPROFD__RESPONSE__RESULT_QUERY,
	              "up to the last time a request may name");
	expect_answer(query_range(fd, now - 60, 0, true, now - 120, now - 60), PYPROFD__RESPONSE__RESULT_QUERY,
	              "a diff of two minutes");
	close(fd);
	daemon_stop(&d);
}

/* pyprofd-ctl ARGS must fail as a usage error saying `words`, with no daemon to ask. */
static void ctl_refuses(const struct daemon *nowhere, const char *const args[], const char *words)
{
	struct run_result r;
	ctl_run(nowhere, &r, args, NULL);
	char why[512];
	cr_assert(r.exited && r.code == 2, "pyprofd-ctl %s: expected a usage error (2), got %s", args[0],
	          run_describe(&r, why, sizeof why));
	cr_assert(strstr(r.err, words), "pyprofd-ctl %s: expected \"%s\" in: %s", args[0], words, r.err);
	run_result_free(&r);
}

/*
 * The same refusals from pyprofd-ctl, before it connects: there is no
 * daemon here, so an answer other than a usage error would mean it tried.
 */
Test(requests, ctl_refuses_before_sending, .timeout = 60)
{
	struct daemon nowhere = {0};
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	snprintf(nowhere.sock, sizeof nowhere.sock, "%s/none.sock", dir);
	const char *label[] = {"attach", "1", "--label", "service=\xff\xfe", NULL};
	ctl_refuses(&nowhere, label, NOT_UTF8_VALUE);
	const char *rule[] = {"rules", "add", "web", "labels=service=\xc0\xaf", NULL};
	ctl_refuses(&nowhere, rule, "rules.settings[0].value is not UTF-8 (byte 0xc0 at byte 8)");
	const char *select[] = {"query", "--label", "\xff=x", NULL};
	ctl_refuses(&nowhere, select, "query.labels[0].key is not UTF-8 (byte 0xff at byte 0)");
	const char *until_inf[] = {"query", "--until", "inf", NULL};
	ctl_refuses(&nowhere, until_inf, "query.until_unix is infinite");
	const char *from_far[] = {"query", "--from", "1e300", NULL};
	ctl_refuses(&nowhere, from_far, "query.from_unix is 1e+300: " OUT_OF_RANGE);
	const char *base_inf[] = {"diff", "--base", "0..inf", "--compare", "-1h..now", NULL};
	ctl_refuses(&nowhere, base_inf, "query.base_until_unix is infinite");
	/* A good request goes on to connect, and finds no daemon. */
	const char *good[] = {"query", "--from", "0", NULL};
	struct run_result r;
	ctl_run(&nowhere, &r, good, NULL);
	cr_assert(r.exited && r.code == 10, "a good query should fail only for want of a daemon: %s", r.err);
	run_result_free(&r);
}

/* `pyprofd-ctl --json status` as this user (NULL: root). */
static json_t *status_as(const struct daemon *d, const struct run_opts *who)
{
	static const char *const args[] = {"--json", "status", NULL};
	struct run_result r;
	ctl_run(d, &r, args, who);
	char why[512];
	cr_assert(r.exited && r.code == 0, "status: %s", run_describe(&r, why, sizeof why));
	json_t *j = json_loads(r.out, 0, NULL);
	cr_assert_not_null(j, "status printed no JSON: %s", r.out);
	run_result_free(&r);
	return j;
}

static json_int_t jint_in(json_t *obj, const char *group, const char *key)
{
	return jint(json_object_get(obj, group), key);
}

/* The counts of a status: sampling, detached, exited, connections. */
static void expect_counts(json_t *st, json_int_t sampling, json_int_t detached, json_int_t exited,
                          const char *who)
{
	char *text = json_dumps(st, JSON_COMPACT);
	cr_assert(jint(st, "targets_sampling") == sampling && jint(st, "targets_detached") == detached &&
	          jint(st, "targets_exited") == exited,
	          "%s should see %lld sampling, %lld detached, %lld exited: %s", who, (long long)sampling,
	          (long long)detached, (long long)exited, text);
	free(text);
}

/* What nobody must not see of the daemon as a whole: every such figure 0. */
static void expect_nothing_of_others(json_t *st)
{
	char *text = json_dumps(st, JSON_COMPACT);
	cr_assert(json_is_true(json_object_get(st, "own_only")), "not marked as nobody's own: %s", text);
	cr_assert(jint(st, "rss_bytes") == 0 && json_real_value(json_object_get(st, "cpu_percent")) == 0 &&
	          jint(st, "connections_refused") == 0 && jint(st, "queued_bytes") == 0 &&
	          jint_in(st, "history", "rows_written") == 0 && jint_in(st, "history", "bytes") == 0 &&
	          jint_in(st, "history", "pending_rows") == 0 && jint_in(st, "discovery", "judged") == 0,
	          "figures of the whole daemon shown to nobody: %s", text);
	free(text);
}

Test(requests, status_shows_a_user_its_own, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it asks as nobody too)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	static const struct run_opts nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};

	/* Root's targets: one sampling, one detached, one exited. */
	struct test_target sampling, detached, exited, own;
	test_target_start(&sampling, py, "nested");
	test_target_start(&detached, py, "nested");
	test_target_start(&exited, py, "nested");
	json_decref(test_target_wait_report(&sampling, TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&detached, TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&exited, TARGET_READY_TIMEOUT_S));
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	ctl_attach_at(&d, sampling.pid, "100");
	ctl_attach_at(&d, detached.pid, "100");
	ctl_attach_at(&d, exited.pid, "100");
	json_decref(entry_when(&d, detached.pid, sampled_a_while, "sampled"));
	char p[16];
	const char *detach[] = {"detach", pid_text(detached.pid, p, sizeof p), NULL};
	ctl_ok(&d, detach);
	test_target_kill(&exited);
	json_decref(entry_when(&d, exited.pid, is_exited, "exited"));
	pause_ms(1500); /* a flush: root's status counts rows written */
	/* Root holds a connection of its own while nobody asks. */
	int roots = daemon_connect(&d);
	cr_assert(roots >= 0);

	json_t *st = status_as(&d, &nobody);
	expect_counts(st, 0, 0, 0, "nobody, with root's targets alone");
	cr_assert_eq(jint(st, "connections"), 1, "nobody sees connections not its own");
	expect_nothing_of_others(st);
	json_decref(st);

	/* Its own process it sees, and still nothing of root's. */
	const char *as_nobody[] = {AS_NOBODY, py->path, "-I", "-c", idle_program, NULL};
	test_target_start_argv(&own, as_nobody);
	attach_as_nobody(&d, own.pid, "nobody attaching to its own process");
	st = status_as(&d, &nobody);
	expect_counts(st, 1, 0, 0, "nobody, with a target of its own");
	cr_assert_eq(jint(st, "connections"), 1);
	expect_nothing_of_others(st);
	json_decref(st);

	/* Root sees everything. */
	st = status_as(&d, NULL);
	char *text = json_dumps(st, JSON_COMPACT);
	expect_counts(st, 2, 1, 1, "root");
	cr_assert(json_is_false(json_object_get(st, "own_only")), "%s", text);
	cr_assert(jint(st, "connections") >= 2 && jint(st, "rss_bytes") > 0 &&
	          jint_in(st, "history", "rows_written") > 0,
	          "root must see the whole daemon: %s", text);
	free(text);
	json_decref(st);
	close(roots);
	daemon_stop(&d);
	test_target_kill(&sampling);
	test_target_kill(&detached);
	test_target_kill(&own);

	/* So does the user a daemon runs as: all of it is that user's. */
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	struct daemon mine;
	nobody_daemon_start(&mine, dir, NULL);
	st = status_as(&mine, &nobody);
	text = json_dumps(st, JSON_COMPACT);
	cr_assert(json_is_false(json_object_get(st, "own_only")) && jint(st, "rss_bytes") > 0,
	          "nobody's own daemon tells nobody only part of itself: %s", text);
	free(text);
	json_decref(st);
	daemon_stop(&mine);
}
