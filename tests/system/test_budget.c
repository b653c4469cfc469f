/*
 * What one user's processes may cost the daemon.  A process that makes
 * itself costly to read (tests/targets/hostile.py: thousands of sound-looking
 * thread states, each with a deep stack), attached by its own unprivileged
 * user at a high rate: its walks are cut short at the per-sample bound, and
 * its user's targets are lowered to that user's share of a core while root's
 * keep their rates; the user's rates come back once the process is gone.
 * Nor do its thousands of thread states take the daemon's descriptors.
 * Making itself not dumpable, under a rule of root's, changes none of it.
 * Nor may one user take every target slot: root and its rules keep theirs.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleet.h"

TestSuite(budget, .init = helpers_init, .fini = helpers_fini, .timeout = 300);

static const struct run_opts as_nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};

static const char *budget_lowered_by(json_t *e)
{
	const char *by = json_string_value(json_object_get(e, "rate_lowered_by"));
	return by ? by : "";
}

static bool budget_sampling(json_t *e)
{
	return strcmp(json_string_value(json_object_get(e, "state")), "sampling") == 0;
}

static bool budget_held_to_share(json_t *e)
{
	return budget_sampling(e) && strcmp(budget_lowered_by(e), "uid_cpu_percent") == 0 &&
	       jint(e, "effective_rate_hz") < jint(e, "rate_hz");
}

static bool budget_at_asked_rate(json_t *e)
{
	return budget_sampling(e) && !*budget_lowered_by(e) &&
	       jint(e, "effective_rate_hz") == jint(e, "rate_hz");
}

/* `pyprofd-ctl status --json` as who sees it: its budget.users. */
static json_t *budget_users_seen_by(const struct daemon *d, const struct run_opts *who)
{
	static const char *const status[] = {"--json", "status", NULL};
	struct run_result r;
	char why[512];
	ctl_run(d, &r, status, who);
	cr_assert(r.exited && r.code == 0, "status: %s", run_describe(&r, why, sizeof why));
	json_t *doc = json_loadb(r.out, r.out_len, 0, NULL);
	cr_assert_not_null(doc, "status printed no JSON: %s", r.out);
	run_result_free(&r);
	json_t *users = json_object_get(json_object_get(doc, "budget"), "users");
	cr_assert(json_is_array(users), "no budget.users in status");
	json_incref(users);
	json_decref(doc);
	return users;
}

Test(budget, a_hostile_user_is_held_to_its_share)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	char script[PATH_MAX], copy[PATH_MAX];
	target_script("hostile.py", script, sizeof script);
	const char *hostile_argv[] = {AS_NOBODY, py->path, "-I", bin_for_others(script, copy, sizeof copy),
	                              "many-threads", NULL};
	const char *nobody_idle[] = {AS_NOBODY, py->path, "-I", "-c", idle_program, NULL};
	const char *root_idle[] = {py->path, "-I", "-c", idle_program, NULL};
	struct test_target hostile, benign, roots;
	test_target_start_argv(&hostile, hostile_argv);
	test_target_start_argv(&benign, nobody_idle);
	test_target_start_argv(&roots, root_idle);

	char dir[PATH_MAX - 32], config[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(config, sizeof config, "%s/pyprofd.conf", dir);
	write_text_file(config, "[limits]\nuid_cpu_percent = 5\nmax_sample_time = 2ms\n");
	const char *extra[] = {"--config", config, NULL};
	struct daemon d;
	daemon_start(&d, extra);

	attach_as_nobody(&d, benign.pid, "nobody's own idle process");
	char p[16];
	const char *attach_hostile[] = {"attach", pid_text(hostile.pid, p, sizeof p), "--rate", "1000", NULL};
	attach_as_nobody_argv(&d, attach_hostile, "nobody attaching its own hostile process");
	ctl_attach_at(&d, roots.pid, "500");

	/* Over its share: every one of nobody's targets is lowered, root's is not. */
	json_decref(entry_when(&d, hostile.pid, budget_held_to_share, "lowered to its user's share"));
	json_decref(entry_when(&d, benign.pid, budget_held_to_share, "lowered with its user's other target"));
	json_t *e = entry_when(&d, roots.pid, budget_sampling, "sampling");
	cr_assert(budget_at_asked_rate(e), "root's target was lowered: %s", json_dumps(e, JSON_COMPACT));
	json_decref(e);

	/* The walks of the hostile process are cut at the bound, and counted. */
	json_t *stats = ctl_stats_of(&d, hostile.pid);
	cr_assert_gt(jint(stats, "walks_cut"), 0, "no walk was cut short: %s", json_dumps(stats, JSON_COMPACT));
	json_decref(stats);

	/* Root sees nobody over its share; nobody sees itself alone. */
	json_t *users = budget_users_seen_by(&d, NULL);
	bool over = false;
	size_t i;
	json_t *u;
	json_array_foreach(users, i, u) over = over || (jint(u, "uid") == NOBODY_UID &&
	                                               json_is_true(json_object_get(u, "over")));
	cr_assert(over, "status does not show uid %d over its share: %s", NOBODY_UID,
	          json_dumps(users, JSON_COMPACT));
	json_decref(users);
	users = budget_users_seen_by(&d, &as_nobody);
	json_array_foreach(users, i, u) cr_assert_eq(jint(u, "uid"), NOBODY_UID, "nobody sees another user");
	json_decref(users);

	/* Gone, it costs nothing: the user's other target comes back to its rate. */
	test_target_kill(&hostile);
	json_decref(entry_when(&d, benign.pid, budget_at_asked_rate, "back at its asked rate"));
	e = entry_when(&d, roots.pid, budget_sampling, "sampling");
	cr_assert(budget_at_asked_rate(e), "root's target was lowered: %s", json_dumps(e, JSON_COMPACT));
	json_decref(e);
	daemon_stop(&d);
}

/*
 * A user's process attached by root's rule that makes itself not dumpable
 * is root's alone to read, yet it still spends its user's share: without
 * that, uid 0 was never budgeted and the process escaped every bound.
 */
Test(budget, a_users_undumpable_process_spends_that_users_share)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	char script[PATH_MAX], copy[PATH_MAX];
	target_script("hostile.py", script, sizeof script);
	const char *hostile_argv[] = {AS_NOBODY, py->path, "-I", bin_for_others(script, copy, sizeof copy),
	                              "many-threads-undumpable", NULL};
	struct test_target hostile;
	test_target_start_argv(&hostile, hostile_argv);

	char dir[PATH_MAX - 32], config[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(config, sizeof config, "%s/pyprofd.conf", dir);
	/* No daemon-wide budget: what lowers the target is its user's share or nothing. */
	write_text_file(config, "[limits]\nuid_cpu_percent = 5\nmax_sample_time = 2ms\ncpu_percent = 0\n\n"
	                        "[discovery]\nmethod = scan\nscan_interval = 1s\n\n"
	                        "[rule.costly]\nmatch.cmdline = many-threads-undumpable\nrate = 1000\n");
	const char *extra[] = {"--config", config, NULL};
	struct daemon d;
	daemon_start(&d, extra);

	json_t *e = entry_when(&d, hostile.pid, budget_held_to_share, "lowered to its user's share");
	cr_assert_eq(jint(e, "uid"), 0, "a process that is not dumpable is not root's alone to read: %s",
	             json_dumps(e, JSON_COMPACT));
	json_decref(e);

	/* Its user's budget holds it, as root and the user itself see. */
	const struct run_opts *seers[] = {NULL, &as_nobody};
	for (size_t k = 0; k < 2; k++) {
		json_t *users = budget_users_seen_by(&d, seers[k]);
		bool over = false;
		size_t i;
		json_t *u;
		json_array_foreach(users, i, u) over = over || (jint(u, "uid") == NOBODY_UID &&
		                                               json_is_true(json_object_get(u, "over")));
		cr_assert(over, "status as %s does not show uid %d over its share: %s", k ? "nobody" : "root",
		          NOBODY_UID, json_dumps(users, JSON_COMPACT));
		json_decref(users);
	}
	test_target_kill(&hostile);
	daemon_stop(&d);
}

/* Descriptors of the daemon's process. */
static unsigned budget_daemon_fds(const struct daemon *d)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)d->pid);
	DIR *dir = opendir(path);
	cr_assert_not_null(dir);
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/*
 * A runtime listing thousands of thread states, sampled in cpu mode (each
 * thread's kernel state is read through a file kept open): the daemon keeps
 * a bounded number of those files, not one per state.
 */
Test(budget, thousands_of_thread_states_take_few_descriptors)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char script[PATH_MAX];
	target_script("hostile.py", script, sizeof script);
	const char *argv[] = {py->path, "-I", script, "many-threads", "{report}", NULL};
	struct test_target hostile;
	test_target_start_argv(&hostile, argv);
	json_decref(test_target_wait_report(&hostile, TARGET_READY_TIMEOUT_S));
	struct daemon d;
	daemon_start(&d, NULL);
	unsigned before = budget_daemon_fds(&d);
	char p[16];
	const char *attach[] = {"attach", pid_text(hostile.pid, p, sizeof p), "--mode", "cpu", "--rate", "200", NULL};
	ctl_ok(&d, attach);
	/* Every state met at least once: a few thousand thread samples. */
	for (int i = 0; i < 300; i++) {
		json_t *stats = ctl_stats_of(&d, hostile.pid);
		json_int_t threads = jint(stats, "thread_samples");
		json_decref(stats);
		if (threads >= 8000)
			break;
		pause_ms(100);
	}
	unsigned during = budget_daemon_fds(&d);
	cr_assert_leq(during, before + 256 + 16, "%u descriptors before, %u while sampling 4000 thread states", before,
	              during);
	cr_assert(daemon_alive(&d));
	daemon_stop(&d);
}

/*
 * nobody attaching its own sleeping processes until refused: refused at its
 * share of max_targets (8 here: 2 each), with the limit named, and root can
 * still attach by hand and by its rule.  Without a share the user filled
 * max_targets and root was refused.
 */
#define BUDGET_SLOTS 8
Test(budget, a_user_holds_its_share_of_the_targets_alone)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	struct daemon d;
	fleet_daemon_discovering(&d, "netlink", "1s",
	                         "[limits]\nmax_targets = 8\n\n[rule.roots]\nmatch.cmdline = budget-roots-service\n");

	const char *idle[] = {AS_NOBODY, py->path, "-I", "-c", idle_program, NULL};
	struct test_target own[BUDGET_SLOTS];
	for (int i = 0; i < BUDGET_SLOTS; i++)
		test_target_start_argv(&own[i], idle);
	attach_as_nobody(&d, own[0].pid, "nobody's first process");
	int attached = 1;
	char refusal[512] = "";
	for (int i = 1; i < BUDGET_SLOTS && !refusal[0]; i++) {
		char p[16];
		const char *attach[] = {"attach", pid_text(own[i].pid, p, sizeof p), NULL};
		struct run_result r;
		ctl_run(&d, &r, attach, &as_nobody);
		if (r.exited && r.code == 0)
			attached++;
		else
			snprintf(refusal, sizeof refusal, "%s", r.err ? r.err : "");
		run_result_free(&r);
	}
	cr_assert(refusal[0], "nobody attached all %d of its processes, max_targets", attached);
	cr_assert_eq(attached, BUDGET_SLOTS / 4, "nobody attached %d processes, not its share", attached);
	const char *newline = strchr(refusal, '\n');
	cr_assert(strstr(refusal, "max_targets_per_uid") && (!newline || !newline[1]),
	          "the refusal does not name the limit in one line: %s", refusal);

	/* Root's own, by hand and by its rule. */
	const char *root_idle[] = {py->path, "-I", "-c", idle_program, NULL};
	struct test_target roots;
	test_target_start_argv(&roots, root_idle);
	ctl_attach_at(&d, roots.pid, "100");
	pid_t service = fleet_spawn(fleet_python(pys), "budget-roots-service");
	json_decref(fleet_entry_by_marker(&d, "budget-roots-service", "root's service, attached by its rule"));
	json_decref(entry_when(&d, roots.pid, sampled_a_while, "sampled"));

	fleet_kill(service);
	test_target_kill(&roots);
	for (int i = 0; i < BUDGET_SLOTS; i++)
		test_target_kill(&own[i]);
	daemon_stop(&d);
}
