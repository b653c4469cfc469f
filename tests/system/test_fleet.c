/*
 * The daemon finds its targets by itself: attach rules against real
 * processes, started after the daemon, restarted, detached and attached by
 * hand, with the kernel's process events and with /proc scans; rules from
 * the config file, SIGHUP and RPC; the budget of processes and of CPU.
 */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleet.h"

TestSuite(fleet, .init = helpers_init, .fini = helpers_fini, .timeout = 180);

/* A rule attaches what it matches, under its labels and the ones found; the rest is left alone. */
static void fleet_rule_attaches(const char *method)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	struct daemon d;
	fleet_daemon_discovering(&d, method, "200ms",
	                         "[rule.web]\n"
	                         "match.exe = python3*     # the interpreter, whatever its minor version\n"
	                         "match.cmdline = fleet-(web|api)-[0-9]+\n"
	                         "rate = 200\n"
	                         "labels = service=web, env=test\n");
	pid_t web = fleet_spawn(py, "fleet-web-1"), other = fleet_spawn(py, "fleet-other-1");
	json_t *e = entry_when(&d, web, fleet_sampling, "the matching process attached by its rule");
	cr_assert_str_eq(jstr(e, "rule"), "web");
	cr_assert_eq(jint(e, "rate_hz"), 200);
	cr_assert_str_eq(fleet_label(e, "service"), "web");
	cr_assert_str_eq(fleet_label(e, "env"), "test");
	cr_assert_str_eq(fleet_label(e, "rule"), "web");
	cr_assert_not_null(fleet_label(e, "exe"), "no exe label: %s", json_dumps(e, JSON_COMPACT));
	char version[16];
	snprintf(version, sizeof version, "%u.%u", py->major, py->minor);
	cr_assert(fleet_label(e, "python") && strncmp(fleet_label(e, "python"), version, strlen(version)) == 0,
	          "python label: %s", json_dumps(e, JSON_COMPACT));
	json_decref(e);
	/* Judged in the same round as the other: by now a wrong verdict would show. */
	pause_ms(1000);
	cr_assert(!fleet_knows(&d, other), "a process no rule matches was attached");
	static const char *const status[] = {"status", NULL};
	json_t *st = ctl_json(&d, status);
	cr_assert_str_eq(jstr(json_object_get(st, "discovery"), "method"), method);
	cr_assert_geq(jint(json_object_get(st, "discovery"), "attached"), 1);
	json_decref(st);
	fleet_kill(web);
	fleet_kill(other);
	daemon_stop(&d);
}

Test(fleet, rule_attaches_what_it_matches_netlink)
{
	fleet_rule_attaches("netlink");
}

Test(fleet, rule_attaches_what_it_matches_scan)
{
	fleet_rule_attaches("scan");
}

/*
 * A service started by a wrapper script that sets up, then execs Python: the
 * wrapper is judged first (no rule matches a shell), and the program it
 * becomes, under the same pid, is judged again and attached.  A /proc walk
 * sees no exec happen: it must notice the new program itself.
 */
static void fleet_wrapper_exec_attached(const char *method)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	struct daemon d;
	fleet_daemon_discovering(&d, method, "100ms",
	                         "[rule.web]\nmatch.exe = python3*\nmatch.cmdline = fleet-wrapped-[0-9]+\n");
	/* Long enough for a walk or two, and a judgement, to see the shell first. */
	char *const argv[] = {"/bin/sh", "-c", "sleep 0.8; exec \"$0\" -c \"$1\" \"$2\"",
	                      (char *)py->path, (char *)idle_program, "fleet-wrapped-1", NULL};
	pid_t pid = spawn_process(argv, NULL);
	json_t *e = entry_when(&d, pid, fleet_sampling, "the wrapped program attached by its rule");
	cr_assert_str_eq(jstr(e, "rule"), "web");
	json_decref(e);
	fleet_kill(pid);
	daemon_stop(&d);
}

Test(fleet, wrapper_exec_into_python_attached_netlink)
{
	fleet_wrapper_exec_attached("netlink");
}

Test(fleet, wrapper_exec_into_python_attached_scan)
{
	fleet_wrapper_exec_attached("scan");
}

/* A service restarted under a new pid comes back under the same labels: its history spans both. */
Test(fleet, restarted_service_keeps_its_labels_and_history)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d,
	             "[rule.svc]\nmatch.cmdline = fleet-restart-marker\nrate = 200\n"
	             "labels = service=restart-test\n",
	             config, sizeof config);
	pid_t first = fleet_spawn(py, "fleet-restart-marker");
	json_decref(entry_when(&d, first, sampled_a_while, "the first run attached"));
	fleet_kill(first);
	json_decref(entry_when(&d, first, is_exited, "the first run seen gone"));
	pid_t second = fleet_spawn(py, "fleet-restart-marker");
	json_decref(entry_when(&d, second, sampled_a_while, "the restarted run attached"));
	const char *procs[] = {"query", "--label", "service=restart-test", "--since", "1h",
	                       "--format", "processes", "--json", NULL};
	json_t *pl = ctl_json(&d, procs);
	bool saw_first = false, saw_second = false;
	size_t i;
	json_t *proc;
	json_array_foreach(pl, i, proc) {
		saw_first = saw_first || jint(proc, "pid") == first;
		saw_second = saw_second || jint(proc, "pid") == second;
		cr_assert_str_eq(json_string_value(json_object_get(json_object_get(proc, "labels"), "rule")), "svc");
		cr_assert_gt(jint(proc, "samples"), 0);
	}
	cr_assert(saw_first && saw_second, "one label, both runs: %s", json_dumps(pl, JSON_COMPACT));
	json_decref(pl);
	fleet_kill(second);
	daemon_stop(&d);
}

/* Detach by hand holds a rule-attached process; attach by hand takes it from the rules. */
Test(fleet, hand_detach_holds_and_hand_attach_wins)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.held]\nmatch.cmdline = fleet-hand-[0-9]\nrate = 200\n", config, sizeof config);
	pid_t held = fleet_spawn(py, "fleet-hand-1"), taken = fleet_spawn(py, "fleet-hand-2");
	json_decref(entry_when(&d, held, fleet_sampling, "the first attached by its rule"));
	json_decref(entry_when(&d, taken, fleet_sampling, "the second attached by its rule"));
	char p[16];
	const char *detach[] = {"detach", pid_text(held, p, sizeof p), NULL};
	ctl_ok(&d, detach);
	char q[16];
	const char *attach[] = {"attach", pid_text(taken, q, sizeof q), "--rate", "50", "--label", "owner=me", NULL};
	ctl_ok(&d, attach);
	/* Every process judged again (the rules "changed"): still as the person left them. */
	kill(d.pid, SIGHUP);
	pause_ms(1500);
	json_t *e = entry_when(&d, held, fleet_detached, "the detached process stays detached");
	json_decref(e);
	e = entry_when(&d, taken, fleet_sampling, "the hand-attached process sampling");
	cr_assert_str_eq(jstr(e, "rule"), "", "attached by hand: no rule");
	cr_assert_eq(jint(e, "rate_hz"), 50);
	cr_assert_str_eq(fleet_label(e, "owner"), "me");
	cr_assert_null(fleet_label(e, "rule"));
	json_decref(e);
	fleet_kill(held);
	fleet_kill(taken);
	daemon_stop(&d);
}

/* The daemon started again on its state directory (where added rules are kept): its `rules --json`. */
static json_t *fleet_rules_after_restart(struct daemon *d, const char *config)
{
	fleet_daemon_again(d, config);
	static const char *const list[] = {"rules", NULL};
	return ctl_json(d, list);
}

/* Rules added by RPC: checked, listed, kept across a restart, removed. */
Test(fleet, rules_by_rpc_outlive_a_restart)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.file]\nmatch.cmdline = fleet-file-rule\n", config, sizeof config);
	const char *bad_regex[] = {"rules", "add", "broken", "match.cmdline=(unclosed", NULL};
	ctl_expect_failure(&d, bad_regex, 1, NULL, "a bad regex");
	const char *unknown[] = {"rules", "add", "broken", "match.colour=blue", NULL};
	ctl_expect_failure(&d, unknown, 1, NULL, "an unknown key");
	const char *over_file[] = {"rules", "add", "file", "match.exe=x", NULL};
	ctl_expect_failure(&d, over_file, 1, NULL, "a rule of the config file");
	const char *add[] = {"rules", "add", "added", "match.cmdline=fleet-rpc-[0-9]", "labels=service=rpc", NULL};
	ctl_ok(&d, add);
	pid_t pid = fleet_spawn(py, "fleet-rpc-1");
	json_t *e = entry_when(&d, pid, fleet_sampling, "attached by the rule added by RPC");
	cr_assert_str_eq(jstr(e, "rule"), "added");
	cr_assert_str_eq(fleet_label(e, "service"), "rpc");
	json_decref(e);
	fleet_kill(pid);
	daemon_stop(&d);

	json_t *doc = fleet_rules_after_restart(&d, config), *rules = json_object_get(doc, "rules");
	cr_assert_eq(json_array_size(rules), 2, "%s", json_dumps(rules, JSON_COMPACT));
	cr_assert_str_eq(jstr(json_array_get(rules, 0), "name"), "file", "the file's rules come first");
	json_t *added = json_array_get(rules, 1);
	cr_assert_str_eq(jstr(added, "name"), "added");
	cr_assert_str_eq(jstr(added, "source"), "rpc");
	cr_assert_str_eq(jstr(json_object_get(added, "settings"), "match.cmdline"), "fleet-rpc-[0-9]");
	const char *remove[] = {"rules", "remove", "added", NULL};
	ctl_ok(&d, remove);
	const char *again[] = {"rules", "remove", "added", NULL};
	ctl_expect_failure(&d, again, 1, NULL, "a rule removed already");
	json_decref(doc);
	daemon_stop(&d);
	doc = fleet_rules_after_restart(&d, config);
	rules = json_object_get(doc, "rules");
	cr_assert_eq(json_array_size(rules), 1, "removed for good: %s", json_dumps(rules, JSON_COMPACT));
	json_decref(doc);
	daemon_stop(&d);
}

/*
 * The longest setting `rules add` takes is saved as a line the config reader
 * reads back, so the daemon starts again with it; one byte more is refused
 * by `rules add` itself, in one line.
 */
Test(fleet, the_longest_rule_added_by_rpc_survives_a_restart)
{
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[sampling]\ndefault_rate_hz = 10\n", config, sizeof config);
	/* "match.cmdline=" and the value fill a config file's line, 198 characters. */
	char longest[198 - sizeof "match.cmdline=" + 1 + 1], setting[256];
	memset(longest, 'x', sizeof longest - 1);
	longest[sizeof longest - 1] = '\0';
	snprintf(setting, sizeof setting, "match.cmdline=%s", longest);
	cr_assert_eq(strlen(setting), 198);
	const char *add[] = {"rules", "add", "long", setting, NULL};
	ctl_ok(&d, add);
	char over[sizeof setting + 1];
	snprintf(over, sizeof over, "%sy", setting);
	const char *add_over[] = {"rules", "add", "longer", over, NULL};
	struct run_result r;
	ctl_run(&d, &r, add_over, NULL);
	cr_assert(r.exited && r.code == 1, "one byte more: exit %d, %s", r.code, r.err);
	const char *says = "match.cmdline: KEY=VALUE is 199 characters, over the 198 of a config file's line";
	cr_assert(strstr(r.err, says) && strchr(r.err, '\n') == r.err + r.err_len - 1,
	          "one clear line, got: %s", r.err);
	run_result_free(&r);
	daemon_stop(&d);

	json_t *doc = fleet_rules_after_restart(&d, config), *rules = json_object_get(doc, "rules");
	cr_assert_eq(json_array_size(rules), 1, "%s", json_dumps(rules, JSON_COMPACT));
	json_t *kept = json_array_get(rules, 0);
	cr_assert_str_eq(jstr(kept, "name"), "long");
	cr_assert_str_eq(jstr(json_object_get(kept, "settings"), "match.cmdline"), longest);
	json_decref(doc);
	daemon_stop(&d);
}

/* Bad rules are refused, naming the file and the line; a reload keeps the rules that run. */
Test(fleet, bad_rules_name_file_and_line_and_keep_the_running_ones)
{
	static const struct {
		const char *text;
		unsigned line;
		const char *says;
	} bad[] = {
		{"[rule.a]\nmatch.exe = python*\nmatch.colour = blue\n", 3, "unknown setting"},
		{"[rule.a]\nmatch.cmdline = (unclosed\n", 2, "regular expression"},
		{"[rule.a]\n\nmatch.exe = [python\n", 3, "glob"},
		{"[rule.a]\nmatch.python = >=three\n", 2, "version"},
		{"[rule.a]\nmatch.exe = x\nasync = maybe\n", 3, "async is true or false"},
		{"[rule.a]\nmatch.exe = x\nasync_mode = some\n", 3, "async_mode is off, running or all"},
		{"[rule.a]\nmatch.exe = x\nmode = panic\n", 3, "wall, cpu, gil or exception"},
		{"[discovery]\nscan_interval = 5 fortnights\n", 2, "scan_interval"},
		{"[rule.a]\nrate = 100\n", 2, "matches nothing"},
		{"[rule.a]\nmatch.exe = x\n[rule.a]\nmatch.exe = y\n", 4, "already defined"},
		{"[limits]\nmax_targets = 3\n[rule.empty]\n\n[rule.b]\nmatch.exe = z\n", 3, "no settings"},
		{"[rule.a]\nmatch.exe = python   # a comment\nmode = sideways\n", 3, "mode"},
	};
	char dir[PATH_MAX - 32], path[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/bad.conf", dir);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		write_text_file(path, bad[i].text);
		char state[PATH_MAX];
		snprintf(state, sizeof state, "%s/state", dir);
		const char *argv[] = {pyprofd_bin(), "--state-dir", state, "--config", path, NULL};
		struct run_result r;
		/* A daemon that starts instead of refusing is stopped by the timeout, and fails here. */
		struct run_opts quick = {.timeout_s = 10};
		run_command(&r, argv, &quick);
		char where[PATH_MAX + 16];
		snprintf(where, sizeof where, "%s:%u:", path, bad[i].line);
		cr_assert(r.exited && r.code == 2, "%s: exit %d", bad[i].text, r.code);
		cr_assert(strstr(r.err, where) && strstr(r.err, bad[i].says), "%s: wanted %s ... %s, got %s",
		          bad[i].text, where, bad[i].says, r.err);
		run_result_free(&r);
	}

	/* Running with a good file, then a bad one comes: the good rules stay. */
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.good]\nmatch.cmdline = fleet-good\n", config, sizeof config);
	write_text_file(config, "[rule.good]\nmatch.cmdline = fleet-good\n[rule.worse]\nmatch.cmdline = (\n");
	kill(d.pid, SIGHUP);
	static const char *const list[] = {"rules", NULL};
	json_t *rules = NULL;
	for (int i = 0; i < 50; i++) {
		pause_ms(100);
		char *log = daemon_log(&d);
		bool said = strstr(log, "not reloaded") != NULL;
		free(log);
		if (said)
			break;
	}
	json_t *doc = ctl_json(&d, list);
	rules = json_object_get(doc, "rules");
	cr_assert_eq(json_array_size(rules), 1, "%s", json_dumps(rules, JSON_COMPACT));
	cr_assert_str_eq(jstr(json_array_get(rules, 0), "name"), "good");
	json_decref(doc);
	char *log = daemon_log(&d);
	cr_assert(strstr(log, "pyprofd.conf:4:"), "the reload's error names file and line:\n%s", log);
	free(log);
	daemon_stop(&d);
}

/* Past max_targets, matching processes wait for room and get it when a target exits. */
Test(fleet, max_targets_makes_processes_wait_for_room)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[limits]\nmax_targets = 2\n[rule.room]\nmatch.cmdline = fleet-room-[0-9]\n", config,
	             sizeof config);
	pid_t a = fleet_spawn(py, "fleet-room-1"), b = fleet_spawn(py, "fleet-room-2");
	json_decref(entry_when(&d, a, fleet_sampling, "the first within the limit"));
	json_decref(entry_when(&d, b, fleet_sampling, "the second within the limit"));
	pid_t c = fleet_spawn(py, "fleet-room-3");
	static const char *const status[] = {"status", NULL};
	bool waits = false;
	for (int i = 0; i < 100 && !waits; i++) {
		pause_ms(100);
		json_t *st = ctl_json(&d, status);
		waits = jint(json_object_get(st, "discovery"), "waiting") == 1;
		json_decref(st);
	}
	cr_assert(waits, "the third process does not wait for room");
	cr_assert(!fleet_knows(&d, c), "attached past max_targets");
	fleet_kill(a);
	json_decref(entry_when(&d, c, fleet_sampling, "the third attached once there was room"));
	fleet_kill(b);
	fleet_kill(c);
	daemon_stop(&d);
}

/* Over its CPU budget the daemon lowers rule-attached targets' rates, never below min_rate_hz. */
Test(fleet, cpu_budget_lowers_rule_rates)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d,
	             "[limits]\ncpu_percent = 0.5\nmin_rate_hz = 7\n"
	             "[rule.hot]\nmatch.cmdline = fleet-hot-[0-9]\nrate = 1000\n",
	             config, sizeof config);
	enum { N = 4 };
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		char marker[32];
		snprintf(marker, sizeof marker, "fleet-hot-%d", i);
		pids[i] = fleet_spawn(py, marker);
	}
	for (int i = 0; i < N; i++)
		json_decref(entry_when(&d, pids[i], fleet_sampling, "attached by its rule"));
	static const char *const status[] = {"status", NULL};
	bool over = false;
	for (int i = 0; i < 150 && !over; i++) {
		pause_ms(100);
		json_t *st = ctl_json(&d, status);
		json_t *budget = json_object_get(st, "budget");
		over = json_is_true(json_object_get(budget, "over")) &&
		       json_real_value(json_object_get(budget, "factor")) < 0.5;
		json_decref(st);
	}
	cr_assert(over, "4 targets at 1000 Hz do not put the daemon over 0.5%% of a core");
	static const char *const list[] = {"list", NULL};
	json_t *all = ctl_json(&d, list);
	size_t i;
	json_t *e;
	json_array_foreach(all, i, e) {
		cr_assert_eq(jint(e, "rate_hz"), 1000, "the asked rate is kept");
		cr_assert_lt(jint(e, "effective_rate_hz"), 1000);
		cr_assert_geq(jint(e, "effective_rate_hz"), 7);
	}
	json_decref(all);
	for (int k = 0; k < N; k++)
		fleet_kill(pids[k]);
	daemon_stop(&d);
}

static bool fleet_first_rule(json_t *e)
{
	return fleet_sampling(e) && jint(e, "rate_hz") == 150 && fleet_label(e, "service") &&
	       strcmp(fleet_label(e, "service"), "first") == 0;
}

static bool fleet_second_rule(json_t *e)
{
	return fleet_sampling(e) && jint(e, "rate_hz") == 75 && fleet_label(e, "service") &&
	       strcmp(fleet_label(e, "service"), "second") == 0;
}

static bool fleet_by_rpc_rule(json_t *e)
{
	return fleet_sampling(e) && strcmp(jstr(e, "rule"), "live") == 0 && fleet_label(e, "service") &&
	       strcmp(fleet_label(e, "service"), "rpc") == 0;
}

/* SIGHUP with this config text, once the daemon has said it reloaded it. */
static void fleet_reload(const struct daemon *d, const char *config, const char *text)
{
	char *before = daemon_log(d);
	size_t seen = strlen(before);
	free(before);
	write_text_file(config, text);
	kill(d->pid, SIGHUP);
	for (int i = 0; i < 100; i++) {
		char *log = daemon_log(d);
		bool done = strlen(log) > seen && strstr(log + seen, "configuration reloaded");
		free(log);
		if (done)
			return;
		pause_ms(50);
	}
	cr_assert_fail("the daemon did not reload %s", config);
}

/*
 * Rules changed while processes run: a new rule (SIGHUP or RPC) claims the
 * running processes it matches, a changed one re-rates and relabels them,
 * and one that goes detaches them.
 */
Test(fleet, rules_changed_by_sighup_and_rpc_apply_to_running_processes)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	static const char nothing[] = "[rule.other]\nmatch.cmdline = fleet-nothing-runs-this\n";
	struct daemon d;
	fleet_daemon(&d, nothing, config, sizeof config);
	pid_t a = fleet_spawn(py, "fleet-reload-1"), b = fleet_spawn(py, "fleet-reload-2");
	pause_ms(1000);
	cr_assert(!fleet_knows(&d, a) && !fleet_knows(&d, b), "attached with no rule for them");

	fleet_reload(&d, config,
	             "[rule.other]\nmatch.cmdline = fleet-nothing-runs-this\n"
	             "[rule.reload]\nmatch.cmdline = fleet-reload-1\nrate = 150\nlabels = service=first\n");
	json_decref(entry_when(&d, a, fleet_first_rule, "attached by the rule SIGHUP brought"));
	cr_assert(!fleet_knows(&d, b), "a process the new rule does not match was attached");
	fleet_reload(&d, config,
	             "[rule.reload]\nmatch.cmdline = fleet-reload-1\nrate = 75\nlabels = service=second\n");
	json_decref(entry_when(&d, a, fleet_second_rule, "re-rated and relabelled by the changed rule"));
	fleet_reload(&d, config, nothing);
	json_decref(entry_when(&d, a, fleet_detached, "detached once its rule went"));

	const char *add[] = {"rules", "add", "live", "match.cmdline=fleet-reload-2", "labels=service=rpc", NULL};
	ctl_ok(&d, add);
	json_decref(entry_when(&d, b, fleet_by_rpc_rule, "attached by the rule RPC added"));
	const char *remove[] = {"rules", "remove", "live", NULL};
	ctl_ok(&d, remove);
	json_decref(entry_when(&d, b, fleet_detached, "detached once the rule RPC added went"));
	json_t *e = entry_when(&d, a, fleet_detached, "still detached");
	json_decref(e);
	fleet_kill(a);
	fleet_kill(b);
	daemon_stop(&d);
}

/*
 * A service labels itself (PYPROFD_LABELS): its own labels are kept under
 * "self.", beside a rule's and a person's, never in their place.
 */
Test(fleet, processes_label_themselves_from_their_environment)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.env]\nmatch.cmdline = fleet-env-1\nlabels = service=from-rule, team=rule-team\n",
	             config, sizeof config);
	char *const labelled[] = {"env", "PYPROFD_LABELS=team=core, tier=1,not-a-label,=nokey", (char *)py->path,
	                          "-c", (char *)idle_program, "fleet-env-1", NULL};
	pid_t ruled = spawn_process(labelled, NULL);
	json_t *e = entry_when(&d, ruled, fleet_sampling, "attached by its rule");
	cr_assert_str_eq(fleet_label(e, "service"), "from-rule");
	cr_assert_str_eq(fleet_label(e, "team"), "rule-team", "the process's own label took the rule's");
	cr_assert_str_eq(fleet_label(e, "self.team"), "core");
	cr_assert_str_eq(fleet_label(e, "self.tier"), "1");
	cr_assert_null(fleet_label(e, "tier"));
	cr_assert_null(fleet_label(e, "self.not-a-label"));
	cr_assert_null(fleet_label(e, "self."));
	json_decref(e);

	char *const by_hand[] = {"env", "PYPROFD_LABELS=team=core,tier=1", (char *)py->path, "-c",
	                         (char *)idle_program, "fleet-env-2", NULL};
	pid_t hand = spawn_process(by_hand, NULL);
	char p[16];
	const char *own_key[] = {"attach", pid_text(hand, p, sizeof p), "--label", "self.tier=9", NULL};
	ctl_expect_failure(&d, own_key, 1, NULL, "a label under the process's own prefix, given at attach");
	const char *attach[] = {"attach", pid_text(hand, p, sizeof p), "--label", "tier=9", NULL};
	for (int i = 0; i < 100; i++) {
		struct run_result r;
		ctl_run(&d, &r, attach, NULL);
		bool ok = r.exited && r.code == 0;
		run_result_free(&r);
		if (ok)
			break;
		pause_ms(100); /* until its interpreter has started */
	}
	e = entry_when(&d, hand, fleet_sampling, "attached by hand");
	cr_assert_str_eq(fleet_label(e, "self.team"), "core");
	cr_assert_str_eq(fleet_label(e, "tier"), "9");
	cr_assert_str_eq(fleet_label(e, "self.tier"), "1");
	cr_assert_null(fleet_label(e, "team"));
	json_decref(e);
	fleet_kill(ruled);
	fleet_kill(hand);
	daemon_stop(&d);
}

/* The pids of the processes a query by one label finds (`query --format processes`). */
static bool query_finds(const struct daemon *d, const char *label, pid_t pid, const struct run_opts *who)
{
	const char *args[] = {"query", "--label", label, "--since", "1h", "--format", "processes", "--json", NULL};
	struct run_result r;
	ctl_run(d, &r, args, who);
	char why[512];
	cr_assert(r.exited && r.code == 0, "query --label %s: %s", label, run_describe(&r, why, sizeof why));
	json_t *list = json_loadb(r.out, r.out_len, 0, NULL);
	cr_assert(json_is_array(list), "query --label %s printed no list: %s", label, r.out);
	run_result_free(&r);
	bool found = false;
	size_t i;
	json_t *proc;
	json_array_foreach(list, i, proc)
		found = found || jint(proc, "pid") == pid;
	json_decref(list);
	return found;
}

/*
 * A plain user's process that claims to be root's payments service (its
 * service, unit, container, program and pid) keeps what the daemon found
 * and root's rule gave: root's `query --label service=payments` finds the
 * real service alone, and the claims are the process's own, under "self.".
 */
Test(fleet, a_users_process_cannot_pass_for_another_service)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d,
	             "[rule.payments]\nmatch.uid = 0\nmatch.cmdline = fleet-claim-payments\nlabels = service=payments\n"
	             "[rule.users]\nmatch.uid = nobody\nmatch.cmdline = fleet-claim-user\nlabels = service=user-jobs\n",
	             config, sizeof config);
	char *const real[] = {(char *)py->path, "-I", "-c", (char *)idle_program, "fleet-claim-payments", NULL};
	pid_t payments = spawn_process(real, NULL);
	char *const claiming[] = {"env",
	                          "PYPROFD_LABELS=service=payments,unit=payments.service,"
	                          "container=0123456789abcdef0123,exe=payments,python=9.9,pid=1,rule=payments,"
	                          "team=core",
	                          AS_NOBODY, (char *)py->path, "-I", "-c", (char *)idle_program, "fleet-claim-user", NULL};
	pid_t user = spawn_process(claiming, NULL);
	json_t *e = fleet_entry_by_marker(&d, "fleet-claim-user", "attached by the users' rule");
	pid_t claimer = (pid_t)jint(e, "pid");
	cr_assert_eq(claimer, user, "env and setpriv run the interpreter in their own process");
	cr_assert_eq(jint(e, "uid"), NOBODY_UID);
	cr_assert_str_eq(fleet_label(e, "service"), "user-jobs", "the process's claim took the rule's service");
	cr_assert_str_eq(fleet_label(e, "rule"), "users");
	const char *unit = fleet_label(e, "unit"), *container = fleet_label(e, "container");
	cr_assert(!unit || strcmp(unit, "payments.service") != 0, "it passed for the unit payments.service");
	cr_assert(!container || strcmp(container, "0123456789abcdef0123") != 0, "it passed for a container");
	cr_assert(strncmp(fleet_label(e, "exe"), "python", 6) == 0, "exe: %s", fleet_label(e, "exe"));
	cr_assert(strcmp(fleet_label(e, "python"), "9.9") != 0, "it passed for another runtime");
	cr_assert_null(fleet_label(e, "pid"));
	cr_assert_str_eq(fleet_label(e, "self.service"), "payments");
	cr_assert_str_eq(fleet_label(e, "self.unit"), "payments.service");
	cr_assert_str_eq(fleet_label(e, "self.container"), "0123456789abcdef0123");
	cr_assert_str_eq(fleet_label(e, "self.team"), "core");
	json_decref(e);
	json_decref(entry_when(&d, claimer, sampled_a_while, "the claiming process sampled"));
	json_decref(entry_when(&d, payments, sampled_a_while, "the real service sampled"));

	cr_assert(query_finds(&d, "service=payments", payments, NULL), "root's query lost its service");
	cr_assert(!query_finds(&d, "service=payments", claimer, NULL),
	          "root's query by service=payments found nobody's process");
	cr_assert(query_finds(&d, "self.service=payments", claimer, NULL), "its own labels are not queryable");
	static const struct run_opts as_nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};
	cr_assert(query_finds(&d, "self.team=core", claimer, &as_nobody), "its user cannot find it by its own label");

	/* Nor by naming its process by hand: what a user names it is its own claim too. */
	char *const by_hand[] = {AS_NOBODY, (char *)py->path, "-I", "-c", (char *)idle_program, "fleet-claim-hand", NULL};
	pid_t hand = spawn_process(by_hand, NULL);
	char p[16];
	const char *attach[] = {"attach", pid_text(hand, p, sizeof p), "--label", "service=payments", NULL};
	attach_as_nobody_argv(&d, attach, "nobody attaching its own process with a label");
	e = entry_when(&d, hand, sampled_a_while, "nobody's hand-attached process sampled");
	const char *service = fleet_label(e, "service");
	cr_assert(!service || strcmp(service, "payments") != 0, "nobody's attach named its process service=payments");
	cr_assert_str_eq(fleet_label(e, "self.service"), "payments", "nobody's attach label is not its own claim");
	json_decref(e);
	cr_assert(!query_finds(&d, "service=payments", hand, NULL),
	          "root's query by service=payments found the process nobody attached with that label");
	fleet_kill(hand);
	fleet_kill(user);
	fleet_kill(payments);
	daemon_stop(&d);
}

/* How many lines of text hold needle. */
static unsigned lines_holding(const char *text, const char *needle)
{
	unsigned n = 0;
	for (const char *at = text; (at = strstr(at, needle)); at += strlen(needle))
		n++;
	return n;
}

/*
 * A process that gives itself 63 labels is stored like any other: it keeps
 * 16 of them, and the log says once what was left out.
 */
Test(fleet, a_process_with_too_many_labels_of_its_own_is_stored)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d,
	             "[storage]\nflush_interval_s = 1\n"
	             "[rule.many]\nmatch.cmdline = fleet-many-labels\nlabels = service=many\n",
	             config, sizeof config);
	char env[4096] = "PYPROFD_LABELS=";
	for (int i = 0; i < 63; i++)
		snprintf(env + strlen(env), sizeof env - strlen(env), "%sk%d=v%d", i ? "," : "", i, i);
	char *const labelled[] = {"env", env, (char *)py->path, "-c", (char *)idle_program, "fleet-many-labels", NULL};
	pid_t pid = spawn_process(labelled, NULL);
	json_t *e = entry_when(&d, pid, fleet_sampling, "attached by its rule");
	json_t *labels = json_object_get(e, "labels");
	cr_assert_str_eq(fleet_label(e, "service"), "many");
	cr_assert_str_eq(fleet_label(e, "rule"), "many");
	cr_assert_str_eq(fleet_label(e, "self.k15"), "v15", "the first 16 of its own are kept");
	cr_assert_null(fleet_label(e, "self.k16"), "past 16 of its own: %s", json_dumps(labels, JSON_COMPACT));
	cr_assert_leq(json_object_size(labels), 64);
	json_decref(e);

	json_decref(entry_when(&d, pid, sampled_a_while, "sampled a while"));
	fleet_kill(pid);
	daemon_stop(&d);
	char *log = daemon_log(&d);
	cr_assert_eq(lines_holding(log, "out of memory"), 0, "%s", log);
	cr_assert_eq(lines_holding(log, "47 of its own labels (PYPROFD_LABELS) left out"), 1, "%s", log);
	free(log);

	/* Started again: what a query finds now is what the file holds. */
	char state[PATH_MAX];
	snprintf(state, sizeof state, "%s", d.state);
	const char *extra[] = {"--config", config, "--state-dir", state, NULL};
	daemon_start(&d, extra);
	char p[16];
	const char *by_pid[] = {"--pid", pid_text(pid, p, sizeof p), NULL};
	cr_assert_gt(query_total(&d, by_pid, NULL), 0, "its samples never reached the file");
	daemon_stop(&d);
}

/* match.exe globs the name a program was started by, a symlink's included, as well as the file it runs. */
Test(fleet, executables_match_by_their_symlink_name)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char dir[PATH_MAX - 64], link[PATH_MAX], real[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(link, sizeof link, "%s/fleet-svc-python", dir);
	cr_assert(realpath(py->path, real), "%s", py->path);
	cr_assert(symlink(real, link) == 0);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.link]\nmatch.exe = fleet-svc-*\n", config, sizeof config);
	char *const by_link[] = {link, "-c", (char *)idle_program, "fleet-link-a", NULL};
	pid_t linked = spawn_process(by_link, NULL);
	pid_t plain = fleet_spawn(py, "fleet-link-b");
	json_t *e = entry_when(&d, linked, fleet_sampling, "attached by the name it was started by");
	cr_assert_str_eq(jstr(e, "rule"), "link");
	const char *base = strrchr(real, '/') + 1;
	cr_assert_str_eq(fleet_label(e, "exe"), base, "the exe label is the file run: %s", json_dumps(e, JSON_COMPACT));
	json_decref(e);
	pause_ms(500);
	cr_assert(!fleet_knows(&d, plain), "the same interpreter by its own name was attached");
	fleet_kill(linked);
	fleet_kill(plain);
	daemon_stop(&d);
}

/* match.uid by user name: another user's process (runuser) is attached, root's alike is not. */
Test(fleet, users_match_by_uid)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it starts a process as another user)");
	if (access("/usr/sbin/runuser", X_OK) != 0 && access("/sbin/runuser", X_OK) != 0)
		cr_skip_test("no runuser (util-linux)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	/*
	 * runuser gives nobody its own groups and session: an interpreter it may
	 * reach as itself.  The system's own comes last: with one interpreter a
	 * version (make sanitize), a 3.11 under root's home may stand for
	 * Debian's, and nobody cannot reach into root's home.
	 */
	const char *path = NULL;
	char why[512] = "";
	for (size_t i = 0; i <= n && !path; i++) {
		const char *candidate = i < n ? pys[i].path : "/usr/bin/python3";
		if (i < n && pys[i].root_len)
			continue; /* only root may enter a root */
		const char *argv[] = {"runuser", "-u", "nobody", "--", candidate, "-I", "-c", "pass", NULL};
		struct run_result r;
		run_command(&r, argv, NULL);
		if (r.exited && r.code == 0)
			path = candidate;
		else
			run_describe(&r, why, sizeof why);
		run_result_free(&r);
	}
	cr_assert_not_null(path, "no interpreter found that the user nobody may run; the last said: %s", why);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.users]\nmatch.uid = nobody\nmatch.cmdline = fleet-uid-marker\n", config,
	             sizeof config);
	char *const as_nobody[] = {"runuser", "-u", "nobody", "--", (char *)path, "-I", "-c",
	                           (char *)idle_program, "fleet-uid-marker-nobody", NULL};
	pid_t runuser = spawn_process(as_nobody, NULL);
	char *const as_root[] = {(char *)path, "-I", "-c", (char *)idle_program, "fleet-uid-marker-root", NULL};
	pid_t root = spawn_process(as_root, NULL);
	json_t *e = fleet_entry_by_marker(&d, "fleet-uid-marker-nobody", "attached by its user");
	cr_assert_eq(jint(e, "uid"), NOBODY_UID);
	cr_assert_str_eq(jstr(e, "rule"), "users");
	json_decref(e);
	pause_ms(500);
	cr_assert(!fleet_knows(&d, root), "root's process was attached by a rule for nobody");
	fleet_kill(root);
	fleet_kill(runuser);
	daemon_stop(&d);
}
