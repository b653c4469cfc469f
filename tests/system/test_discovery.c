/*
 * The daemon follows processes as they come and go: Python children of an
 * attached process (fork, multiprocessing spawn and forkserver), a burst of
 * short-lived processes, processes that exit while they are judged, and
 * where systemd and container runtimes put processes (a unit's cgroup, a
 * container's cgroup with its own pid and mount namespaces), on whichever
 * cgroup layout the machine has; and the python label of a process found as
 * it starts.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleet.h"

static void discovery_fini(void);

TestSuite(discovery, .init = helpers_init, .fini = discovery_fini, .timeout = 240);

/* ---- children ---- */

static const char *const child_methods[] = {"fork", "spawn", "forkserver"};
#define NMETHODS (sizeof child_methods / sizeof child_methods[0])

/* children.py's report: the parent and its child. */
static void children_report(struct test_target *t, pid_t *parent, pid_t *child)
{
	json_t *r = test_target_wait_report(t, TARGET_READY_TIMEOUT_S);
	*parent = (pid_t)jint(r, "parent");
	*child = (pid_t)jint(r, "child");
	json_decref(r);
}

static bool in_processes(json_t *procs, pid_t pid, const char *parent_label)
{
	size_t i;
	json_t *p;
	json_array_foreach(procs, i, p) {
		if (jint(p, "pid") != pid)
			continue;
		json_t *v = json_object_get(json_object_get(p, "labels"), "parent");
		return jint(p, "samples") > 0 && v && strcmp(json_string_value(v), parent_label) == 0;
	}
	return false;
}

/*
 * A rule with children = true: the Python children of what it attaches are
 * attached with the parent's labels and parent=PID, however they were made
 * (a forkserver's worker names the process the rule matched, as the server
 * does), and their samples carry those labels in the history.  Without it, not.
 */
Test(discovery, python_children_follow_their_parent)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char script[PATH_MAX], config[PATH_MAX];
	target_script("children.py", script, sizeof script);
	struct daemon d;
	fleet_daemon(&d,
	             "[rule.kids]\nmatch.cmdline = children\\.py .* kids\nchildren = true\n"
	             "labels = service=kids\nrate = 200\n"
	             "[rule.alone]\nmatch.cmdline = children\\.py .* alone\nlabels = service=alone\n",
	             config, sizeof config);
	struct test_target parents[NMETHODS], alone;
	for (size_t m = 0; m < NMETHODS; m++) {
		const char *argv[] = {py->path, "-I", script, child_methods[m], "{report}", "kids", NULL};
		test_target_start_argv(&parents[m], argv);
	}
	const char *alone_argv[] = {py->path, "-I", script, "spawn", "{report}", "alone", NULL};
	test_target_start_argv(&alone, alone_argv);

	pid_t parent[NMETHODS], child[NMETHODS];
	char parent_label[NMETHODS][16];
	for (size_t m = 0; m < NMETHODS; m++) {
		children_report(&parents[m], &parent[m], &child[m]);
		json_t *e = entry_when(&d, child[m], fleet_sampling, "attached as its parent's child");
		cr_assert_str_eq(fleet_label(e, "service"), "kids", "%s: %s", child_methods[m], json_dumps(e, JSON_COMPACT));
		cr_assert_str_eq(fleet_label(e, "rule"), "kids");
		cr_assert_eq(jint(e, "rate_hz"), 200, "%s: the parent's rate", child_methods[m]);
		snprintf(parent_label[m], sizeof parent_label[m], "%s", fleet_label(e, "parent"));
		/* parent= names the process the rule matched, whoever made the child. */
		cr_assert_eq(atoi(parent_label[m]), parent[m], "%s: %s", child_methods[m], json_dumps(e, JSON_COMPACT));
		pid_t direct = (pid_t)jint(e, "parent");
		if (strcmp(child_methods[m], "forkserver") == 0) {
			/* The worker is the server's child, and the server the parent's. */
			json_t *server = entry_when(&d, direct, fleet_sampling, "the fork server, attached");
			cr_assert_eq(jint(server, "parent"), parent[m], "%s", json_dumps(server, JSON_COMPACT));
			cr_assert_str_eq(fleet_label(server, "service"), "kids");
			cr_assert_str_eq(fleet_label(server, "parent"), parent_label[m]);
			json_decref(server);
		} else {
			cr_assert_eq(direct, parent[m], "%s: %s", child_methods[m], json_dumps(e, JSON_COMPACT));
		}
		json_decref(e);
	}

	pid_t alone_parent, alone_child;
	children_report(&alone, &alone_parent, &alone_child);
	json_decref(entry_when(&d, alone_parent, fleet_sampling, "attached by its rule"));
	pause_ms(500);
	cr_assert(!fleet_knows(&d, alone_child), "a child was followed without children = true");

	/* The history: the children's samples under the parent's labels. */
	const char *procs[] = {"query", "--label", "service=kids", "--since", "1h", "--format", "processes", NULL};
	json_t *pl = NULL;
	bool all = false;
	for (int tries = 0; tries < 50 && !all; tries++) {
		json_decref(pl);
		pause_ms(100);
		pl = ctl_json(&d, procs);
		all = true;
		for (size_t m = 0; m < NMETHODS; m++)
			all = all && in_processes(pl, child[m], parent_label[m]);
	}
	cr_assert(all, "the children's samples are not under service=kids with their parent: %s",
	          json_dumps(pl, JSON_COMPACT));
	json_decref(pl);
	daemon_stop(&d);
}

/* ---- bursts and processes that do not stay ---- */

static unsigned daemon_fds(const struct daemon *d)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", (int)d->pid);
	DIR *dir = opendir(path);
	cr_assert_not_null(dir, "%s: %s", path, strerror(errno));
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

static size_t daemon_targets(const struct daemon *d)
{
	static const char *const list[] = {"list", NULL};
	json_t *all = ctl_json(d, list);
	size_t n = json_array_size(all);
	json_decref(all);
	return n;
}

/* Until nothing waits to be judged (within 20 s), or the test fails. */
static void discovery_settled(const struct daemon *d)
{
	for (int i = 0; i < 200; i++) {
		if (fleet_waiting(d) == 0)
			return;
		pause_ms(100);
	}
	cr_assert_fail("processes still wait to be judged");
}

/*
 * 200 processes at once, most of them gone within a fraction of a second
 * and a quarter of them Python the rule matches: the daemon lives through it,
 * attaches every long-lived match started meanwhile, and holds nothing for
 * what is gone beyond the targets it lists.
 */
Test(discovery, a_burst_of_short_lived_processes)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.burst]\nmatch.cmdline = fleet-burst\n", config, sizeof config);
	pause_ms(500);
	unsigned fds_before = daemon_fds(&d);
	char script[PATH_MAX + 512];
	snprintf(script, sizeof script,
	         "for i in $(seq 150); do sleep 0.0$((i %% 10)) & done; "
	         "for i in $(seq 50); do %s -c 'import time; time.sleep(0.3)' fleet-burst-brief & done; wait",
	         py->path);
	char *const burst_argv[] = {"sh", "-c", script, NULL};
	pid_t burst = spawn_process(burst_argv, NULL);
	enum { LONG = 5 };
	pid_t long_lived[LONG];
	for (int i = 0; i < LONG; i++) {
		char marker[32];
		snprintf(marker, sizeof marker, "fleet-burst-long-%d", i);
		long_lived[i] = fleet_spawn(py, marker);
	}
	int status;
	cr_assert_eq(waitpid(burst, &status, 0), burst);
	for (int i = 0; i < LONG; i++)
		json_decref(entry_when(&d, long_lived[i], fleet_sampling, "attached during the burst"));
	cr_assert(daemon_alive(&d));
	discovery_settled(&d);
	/* Each target it lists holds a timer; beyond those, what it had before. */
	size_t targets = daemon_targets(&d);
	unsigned fds_after = daemon_fds(&d);
	cr_assert_leq(fds_after, fds_before + targets + 2, "%u descriptors before, %u after, %zu targets",
	              fds_before, fds_after, targets);
	static const char *const status_args[] = {"status", NULL};
	json_t *st = ctl_json(&d, status_args);
	cr_assert_eq(jint(st, "targets_sampling"), LONG, "%s", json_dumps(st, JSON_COMPACT));
	json_decref(st);
	for (int i = 0; i < LONG; i++)
		fleet_kill(long_lived[i]);
	daemon_stop(&d);
}

static bool discovery_not_sampling(json_t *e)
{
	return strcmp(json_string_value(json_object_get(e, "state")), "sampling") != 0;
}

/*
 * Processes the rule matches that exit at every moment of being judged:
 * before it, while their runtime is looked for, just after the attach.
 * None is left sampling or waiting, and the daemon says nothing worse than
 * info about them.
 */
Test(discovery, targets_that_exit_during_discovery)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.brief]\nmatch.cmdline = fleet-brief\n", config, sizeof config);
	enum { N = 30 };
	pid_t pids[N];
	for (int i = 0; i < N; i++) {
		/* Gone at once, or after up to 0.3 s: spread over the judging and the retries. */
		char program[128];
		snprintf(program, sizeof program, "import time; time.sleep(%d / 100)", i);
		char *const argv[] = {(char *)py->path, "-c", i % 5 ? program : "pass", "fleet-brief", NULL};
		pids[i] = spawn_process(argv, NULL);
		pause_ms(10);
	}
	for (int i = 0; i < N; i++)
		waitpid(pids[i], NULL, 0);
	discovery_settled(&d);
	/*
	 * Until none of them is listed sampling, all at once: one the daemon
	 * never attached is not listed, and waiting for each in turn cost
	 * seconds apiece for those.
	 */
	static const char *const list[] = {"list", NULL};
	pid_t still = 0;
	for (int tries = 0; tries < 300; tries++) {
		still = 0;
		json_t *all = ctl_json(&d, list);
		size_t i;
		json_t *e;
		json_array_foreach(all, i, e)
			for (int k = 0; k < N && !still; k++)
				if (jint(e, "pid") == pids[k] && !discovery_not_sampling(e))
					still = pids[k];
		json_decref(all);
		if (!still)
			break;
		pause_ms(100);
	}
	cr_assert_eq(still, 0, "pid %d still sampling 30 s after it exited", (int)still);
	cr_assert(daemon_alive(&d));
	/* Of the races above; a busy host may make the daemon fall behind its grid, and says so. */
	char *log = daemon_log(&d);
	for (char *line = strstr(log, "pyprofd warn: sampling falls behind"); line;
	     line = strstr(line, "pyprofd warn: sampling falls behind"))
		memcpy(line, "pyprofd note", strlen("pyprofd note"));
	cr_assert(!strstr(log, "pyprofd error: ") && !strstr(log, "pyprofd warn: "), "the daemon complained:\n%s",
	          log);
	free(log);
	daemon_stop(&d);
}

/* ---- where systemd and container runtimes put processes ---- */

/* The cgroup hierarchies a test may make cgroups in, each read as the daemon reads /proc/PID/cgroup. */
static const struct cgroup_layout {
	const char *mount;
	long magic;
	const char *what;
} cgroup_layouts[] = {
	{"/sys/fs/cgroup/systemd", CGROUP_SUPER_MAGIC, "cgroup v1, the name=systemd hierarchy"},
	{"/sys/fs/cgroup/unified", CGROUP2_SUPER_MAGIC, "cgroup v2 beside v1"},
	{"/sys/fs/cgroup", CGROUP2_SUPER_MAGIC, "cgroup v2 alone"},
};
#define NLAYOUTS (sizeof cgroup_layouts / sizeof cgroup_layouts[0])

/* The cgroups a test made, deepest last: removed once their processes are gone. */
#define CGROUPS_MADE_MAX 32
static char cgroups_made[CGROUPS_MADE_MAX][PATH_MAX];
static size_t ncgroups_made;

static void discovery_fini(void)
{
	helpers_fini(); /* every process gone first: a cgroup with one cannot be removed */
	while (ncgroups_made)
		rmdir(cgroups_made[--ncgroups_made]);
}

/* mount/pyprofd-test-PID/REL, made (each level recorded); false if this hierarchy is not writable. */
static bool cgroup_make(const struct cgroup_layout *l, const char *rel, char *out, size_t len)
{
	struct statfs fs;
	if (statfs(l->mount, &fs) != 0 || (long)fs.f_type != l->magic)
		return false;
	snprintf(out, len, "%s/pyprofd-test-%d/%s", l->mount, (int)getpid(), rel);
	for (char *slash = out + strlen(l->mount) + 1;; slash++) {
		slash = strchr(slash, '/');
		if (slash)
			*slash = '\0';
		if (mkdir(out, 0755) == 0) {
			cr_assert_lt(ncgroups_made, CGROUPS_MADE_MAX);
			snprintf(cgroups_made[ncgroups_made++], PATH_MAX, "%s", out);
		} else if (errno != EEXIST) {
			if (slash)
				*slash = '/';
			return false;
		}
		if (!slash)
			return true;
		*slash = '/';
	}
}

/* argv run with its first process moved into the cgroup at dir before it runs anything. */
static pid_t cgroup_spawn(const char *dir, char *const argv[])
{
	char *full[32] = {"sh", "-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\"", (char *)dir};
	size_t n = 4;
	for (size_t i = 0; argv[i]; i++) {
		cr_assert_lt(n + 1, sizeof full / sizeof full[0]);
		full[n++] = argv[i];
	}
	full[n] = NULL;
	return spawn_process(full, NULL);
}

/* A process in a fresh cgroup named as systemd names a service's is matched by match.unit and labelled unit=. */
Test(discovery, a_systemd_unit_is_found_in_the_cgroup)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it makes cgroups)");
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX];
	struct daemon d;
	fleet_daemon(&d, "[rule.api]\nmatch.unit = api.service\nlabels = service=api\n", config, sizeof config);
	size_t tried = 0;
	for (size_t l = 0; l < NLAYOUTS; l++) {
		char dir[PATH_MAX];
		if (!cgroup_make(&cgroup_layouts[l], "system.slice/api.service", dir, sizeof dir))
			continue;
		tried++;
		char marker[32];
		snprintf(marker, sizeof marker, "fleet-unit-%zu", l);
		char *const argv[] = {(char *)py->path, "-c", (char *)idle_program, marker, NULL};
		pid_t in_unit = cgroup_spawn(dir, argv);
		json_t *e = entry_when(&d, in_unit, fleet_sampling, cgroup_layouts[l].what);
		cr_assert_str_eq(fleet_label(e, "unit"), "api.service", "%s: %s", cgroup_layouts[l].what,
		                 json_dumps(e, JSON_COMPACT));
		cr_assert_str_eq(jstr(e, "rule"), "api");
		cr_assert_str_eq(fleet_label(e, "service"), "api");
		json_decref(e);
		fleet_kill(in_unit);
	}
	if (!tried)
		cr_skip_test("no writable cgroup hierarchy (%s, %s or %s)", cgroup_layouts[0].mount,
		             cgroup_layouts[1].mount, cgroup_layouts[2].mount);
	/* The same program outside the unit is not matched. */
	pid_t outside = fleet_spawn(py, "fleet-unit-outside");
	pause_ms(1000);
	cr_assert(!fleet_knows(&d, outside), "a process outside api.service was matched by match.unit");
	fleet_kill(outside);
	daemon_stop(&d);
}

/* 64 hexadecimal digits, as a container runtime names a container. */
static void container_id(char out[65], unsigned seed)
{
	srand(seed ^ (unsigned)getpid());
	for (int i = 0; i < 64; i++)
		out[i] = "0123456789abcdef"[rand() % 16];
	out[64] = '\0';
}

/* Debian's static interpreter: a copy of it runs from a file system of its own. */
#define STATIC_PYTHON "/usr/bin/python3.11"

/*
 * Processes in their own pid and mount namespaces (unshare), in cgroups
 * named as docker names them (systemd's driver: docker-ID.scope; its own:
 * /docker/ID): matched by match.container (an id prefix, or any), labelled
 * container=ID, and read through /proc/PID/root (with the static
 * interpreter, run from a tmpfs only the namespace sees).
 */
Test(discovery, containers_are_found_in_the_cgroup)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it makes cgroups and namespaces)");
	if (access("/usr/bin/unshare", X_OK) != 0)
		cr_skip_test("no unshare (util-linux)");
	const struct cgroup_layout *layout = NULL;
	char id[2][65], dir[2][PATH_MAX], rel[2][PATH_MAX];
	container_id(id[0], 1);
	container_id(id[1], 2);
	snprintf(rel[0], sizeof rel[0], "system.slice/docker-%s.scope", id[0]);
	snprintf(rel[1], sizeof rel[1], "docker/%s", id[1]);
	for (size_t l = 0; l < NLAYOUTS && !layout; l++)
		if (cgroup_make(&cgroup_layouts[l], rel[0], dir[0], sizeof dir[0]) &&
		    cgroup_make(&cgroup_layouts[l], rel[1], dir[1], sizeof dir[1]))
			layout = &cgroup_layouts[l];
	if (!layout)
		cr_skip_test("no writable cgroup hierarchy (%s, %s or %s)", cgroup_layouts[0].mount,
		             cgroup_layouts[1].mount, cgroup_layouts[2].mount);
	struct python pys[PYTHONS_MAX];
	const struct python *py = fleet_python(pys);
	char config[PATH_MAX], text[512];
	snprintf(text, sizeof text,
	         "[rule.one]\nmatch.container = %.12s\nlabels = which=one\n"
	         "[rule.any]\nmatch.container = *\nlabels = which=any\n",
	         id[0]);
	struct daemon d;
	fleet_daemon(&d, text, config, sizeof config);

	char root_fs[PATH_MAX - 64], program[4 * PATH_MAX];
	scratch_dir(root_fs, sizeof root_fs);
	bool own_fs = access(STATIC_PYTHON, X_OK) == 0;
	for (int c = 0; c < 2; c++) {
		char marker[32];
		snprintf(marker, sizeof marker, "fleet-container-%d", c);
		if (own_fs)
			snprintf(program, sizeof program,
			         "mount -t tmpfs none '%s' && cp %s '%s/python' && exec '%s/python' -c '%s' %s", root_fs,
			         STATIC_PYTHON, root_fs, root_fs, idle_program, marker);
		else
			snprintf(program, sizeof program, "exec '%s' -c '%s' %s", py->path, idle_program, marker);
		char *const argv[] = {"unshare", "--pid", "--mount", "--fork", "sh", "-c", program, NULL};
		cgroup_spawn(dir[c], argv);
	}
	for (int c = 0; c < 2; c++) {
		char marker[32];
		snprintf(marker, sizeof marker, "fleet-container-%d", c);
		json_t *e = fleet_entry_by_marker(&d, marker, "attached in its container");
		cr_assert_str_eq(fleet_label(e, "container"), id[c], "%s: %s", layout->what, json_dumps(e, JSON_COMPACT));
		cr_assert_str_eq(fleet_label(e, "which"), c == 0 ? "one" : "any");
		json_decref(e);
	}
	char host_copy[PATH_MAX];
	snprintf(host_copy, sizeof host_copy, "%s/python", root_fs);
	cr_assert(!own_fs || access(host_copy, F_OK) != 0, "the namespace's tmpfs is seen from the host");
	pid_t outside = fleet_spawn(py, "fleet-container-outside");
	pause_ms(1000);
	cr_assert(!fleet_knows(&d, outside), "a process outside any container was matched");
	fleet_kill(outside);
	daemon_stop(&d);
}

/* The interpreter's own version, as platform.python_version() says it, into buf. */
static void python_says_version(const struct python *py, char *buf, size_t len)
{
	const char *argv[] = {py->path, "-c", "import platform; print(platform.python_version())", NULL};
	struct run_result r;
	run_command(&r, argv, NULL);
	cr_assert(r.exited && r.code == 0 && r.out_len > 1, "%s: %s", py->path, r.err);
	snprintf(buf, len, "%.*s", (int)(r.out_len - 1), r.out);
	run_result_free(&r);
}

/*
 * The python label and python_version are major.minor.micro on every
 * version, from the first moment: a rule attaches each process as it
 * starts, before 3.8 to 3.10 have written their version, and the label
 * never changes while it runs, in the list or in the history.
 */
Test(discovery, the_python_label_is_the_whole_version_from_the_start)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char marker[64], rules[160];
	snprintf(marker, sizeof marker, "label-form-%d", (int)getpid());
	snprintf(rules, sizeof rules, "[rule.form]\nmatch.cmdline = %s\n", marker);
	struct daemon d;
	char config[PATH_MAX];
	fleet_daemon(&d, rules, config, sizeof config);
	size_t tried = 0;
	for (size_t i = 0; i < n; i++) {
		/* The host's interpreters: each asked its version directly. */
		if (pys[i].root_len || pys[i].debug || pys[i].free_threaded)
			continue;
		char want[32];
		python_says_version(&pys[i], want, sizeof want);
		pid_t pid = fleet_spawn(&pys[i], marker);
		json_t *first = entry_when(&d, pid, fleet_sampling, "attached by the rule as it started");
		cr_assert_str_eq(fleet_label(first, "python"), want, "%s: the label at attach", pys[i].path);
		cr_assert_str_eq(jstr(first, "python_version"), want, "%s", pys[i].path);
		json_decref(first);
		/* A while later, and in the history: the same. */
		json_t *later = NULL;
		for (int tries = 0; tries < 50; tries++) {
			json_decref(later);
			later = wait_target(&d, pid, fleet_sampling, 10);
			if (jint(later, "samples") >= 100)
				break;
			pause_ms(100);
		}
		cr_assert_str_eq(fleet_label(later, "python"), want, "%s: the label changed", pys[i].path);
		json_decref(later);
		char p[16];
		const char *procs[] = {"query", "--pid", pid_text(pid, p, sizeof p), "--format", "processes", NULL};
		json_t *stored = NULL;
		for (int tries = 0; tries < 100 && json_array_size(stored) == 0; tries++) {
			json_decref(stored);
			pause_ms(100);
			stored = ctl_json(&d, procs);
		}
		cr_assert_eq(json_array_size(stored), 1, "%s: %s", pys[i].path, json_dumps(stored, JSON_COMPACT));
		json_t *sp = json_array_get(stored, 0);
		cr_assert_str_eq(jstr(sp, "python_version"), want, "%s: the history's", pys[i].path);
		cr_assert_str_eq(fleet_label(sp, "python"), want, "%s: the history's label", pys[i].path);
		json_decref(stored);
		fleet_kill(pid);
		tried++;
	}
	cr_assert_geq(tried, 1, "no interpreter of the host's to try");
	daemon_stop(&d);
}
