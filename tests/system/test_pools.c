/*
 * A service's pool of worker processes across a restart of the daemon (an
 * upgrade, `systemctl restart pyprofd`): the walk at start finds the pool
 * where it runs, and every process the rule had is attached again, the
 * children as children of the process the rule matched, as when they were
 * followed live, with the same labels; the log says what each rule found.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.h"

TestSuite(pools, .init = helpers_init, .fini = helpers_fini, .timeout = 240);

#define POOL_WORKERS 6
/* Processes of one pool at most: its workers, a forkserver, a resource tracker. */
#define POOL_PROCESSES_MAX 32
/* Processes on the host a walk of /proc looks at, at most. */
#define POOL_HOST_MAX 65536

/* An interpreter major.minor of the host's own (rooted: in a root of its own), or NULL. */
static const struct python *pool_python(struct python pys[PYTHONS_MAX], unsigned minor, bool rooted)
{
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++)
		if (pys[i].major == 3 && pys[i].minor == minor && (pys[i].root_len != 0) == rooted &&
		    !pys[i].debug && !pys[i].free_threaded && !pys[i].contained)
			return &pys[i];
	return NULL;
}

/* The parent of pid from /proc/PID/stat; 0 when gone. */
static pid_t pool_ppid(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t len = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* The command name may hold anything: the fields follow its last ')'. */
	char *close = strrchr(buf, ')');
	int ppid = 0;
	if (!close || sscanf(close + 1, " %*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* The processes below root now (its children, theirs, ...), by their parents in /proc. */
static size_t pool_descendants(pid_t root, pid_t out[POOL_PROCESSES_MAX])
{
	pid_t *pids = calloc(POOL_HOST_MAX, sizeof *pids), *parents = calloc(POOL_HOST_MAX, sizeof *parents);
	cr_assert(pids && parents);
	size_t nhost = 0, n = 0;
	DIR *dir = opendir("/proc");
	cr_assert_not_null(dir);
	struct dirent *e;
	while ((e = readdir(dir)) && nhost < POOL_HOST_MAX) {
		pid_t pid = (pid_t)atoi(e->d_name);
		if (pid > 0) {
			pids[nhost] = pid;
			parents[nhost++] = pool_ppid(pid);
		}
	}
	closedir(dir);
	/* A level of the tree per pass; a pool is a few levels deep. */
	for (int pass = 0; pass < 8; pass++)
		for (size_t i = 0; i < nhost; i++) {
			bool below = parents[i] == root, known = false;
			for (size_t j = 0; j < n; j++) {
				below = below || parents[i] == out[j];
				known = known || pids[i] == out[j];
			}
			if (below && !known) {
				cr_assert_lt(n, POOL_PROCESSES_MAX, "more processes in the pool than expected");
				out[n++] = pids[i];
			}
		}
	free(pids);
	free(parents);
	return n;
}

static json_t *pool_entry(json_t *list, pid_t pid)
{
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e) if (jint(e, "pid") == pid) return e;
	return NULL;
}

/* Whether every process of the pool samples under the rule, each child with parent=service. */
static bool pool_attached(json_t *list, pid_t service, const pid_t *kids, size_t n, char *why, size_t len)
{
	char service_text[16];
	snprintf(service_text, sizeof service_text, "%d", (int)service);
	json_t *e = pool_entry(list, service);
	if (!e || !fleet_sampling(e) || strcmp(jstr(e, "rule"), "pool") != 0 || fleet_label(e, "parent")) {
		snprintf(why, len, "the service %d is not attached by its rule", (int)service);
		return false;
	}
	for (size_t i = 0; i < n; i++) {
		e = pool_entry(list, kids[i]);
		const char *parent = e ? fleet_label(e, "parent") : NULL;
		if (!e || !fleet_sampling(e) || !parent || strcmp(parent, service_text) != 0 ||
		    strcmp(jstr(e, "rule"), "pool") != 0 || strcmp(fleet_label(e, "service"), "pool") != 0) {
			char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
			snprintf(why, len, "pid %d (of %d's pool) is not attached as its child: %s", (int)kids[i],
			         (int)service, text ? text : "not listed");
			free(text);
			return false;
		}
	}
	return true;
}

/* `list` once the whole pool is attached as pool_attached says, within `within` s; else the test fails. */
static json_t *pool_wait_attached(const struct daemon *d, pid_t service, const pid_t *kids, size_t n,
                                  double within, const char *when)
{
	static const char *const list[] = {"list", NULL};
	double deadline = mono_now() + within;
	char why[1024] = "";
	for (;;) {
		json_t *all = ctl_json(d, list);
		if (pool_attached(all, service, kids, n, why, sizeof why))
			return all;
		json_decref(all);
		if (mono_now() > deadline)
			break;
		pause_ms(50);
	}
	char *log = daemon_log(d);
	cr_assert_fail("%s: %s; daemon log:\n%s", when, why, log);
	return NULL;
}

/* How many lines of the log hold `a` and `b`. */
static size_t pool_log_lines(const char *log, const char *a, const char *b)
{
	size_t n = 0;
	for (const char *line = log; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *hit = memmem(line, len, a, strlen(a));
		n += hit && (!b || memmem(line, len, b, strlen(b)));
		line = end ? end + 1 : NULL;
	}
	return n;
}

/* The count in the log's line "rule pool: N more children attached (not logged one by one)", or 0. */
static unsigned long pool_log_unsaid(const char *log)
{
	const char *hit = strstr(log, "rule pool: ");
	unsigned long n = 0, more = 0;
	for (; hit; hit = strstr(hit + 1, "rule pool: "))
		if (sscanf(hit, "rule pool: %lu more children attached (not logged one by one)", &more) == 1)
			n += more;
	return n;
}

/*
 * The service's pool (made by `method`) followed live, the daemon stopped
 * and started again on its state directory: within 5 s every worker, and
 * whatever else of the pool the rule followed (a forkserver, a resource
 * tracker), is attached again as the service's child, with the labels it
 * had; the log says what the rule found, and every attach is in the log,
 * one by one or counted.
 */
static void pool_survives_a_restart(const struct python *py, const char *method, const char *discovery)
{
	char script[PATH_MAX], config[PATH_MAX], buf[128], marker[64], rule[256];
	target_script("pool.py", script, sizeof script);
	/* Tests run side by side: each rule matches its own service alone. */
	snprintf(marker, sizeof marker, "pool-restart-%s-3.%u-%s", method, py->minor, discovery);
	snprintf(rule, sizeof rule,
	         "[discovery]\nmethod = %s\nscan_interval = 200ms\n"
	         "[rule.pool]\nmatch.cmdline = pool\\.py .* %s$\nchildren = true\nlabels = service=pool\n",
	         discovery, marker);
	struct daemon d;
	fleet_daemon(&d, rule, config, sizeof config);
	struct test_target service_target;
	char workers_text[8];
	snprintf(workers_text, sizeof workers_text, "%d", POOL_WORKERS);
	const char *args[] = {"-I", script, method, "{report}", workers_text, marker, NULL};
	test_target_start_python(&service_target, py, args);
	json_t *report = test_target_wait_report(&service_target, TARGET_READY_TIMEOUT_S);
	pid_t service = (pid_t)jint(report, "service");
	json_t *workers = json_object_get(report, "workers");
	cr_assert_eq(json_array_size(workers), POOL_WORKERS);

	pid_t kids[POOL_PROCESSES_MAX];
	size_t nkids = pool_descendants(service, kids);
	for (size_t i = 0; i < POOL_WORKERS; i++) {
		pid_t worker = (pid_t)json_integer_value(json_array_get(workers, i));
		bool found = false;
		for (size_t j = 0; j < nkids; j++)
			found = found || kids[j] == worker;
		cr_assert(found, "%s: worker %d is not below the service %d", method, (int)worker, (int)service);
	}
	json_t *live = pool_wait_attached(&d, service, kids, nkids, 60.0, "followed live");
	daemon_stop(&d);

	fleet_daemon_again(&d, config);
	json_t *again = pool_wait_attached(&d, service, kids, nkids, 5.0, "after the daemon's restart");
	for (size_t i = 0; i < nkids; i++) {
		json_t *before = json_object_get(pool_entry(live, kids[i]), "labels");
		json_t *after = json_object_get(pool_entry(again, kids[i]), "labels");
		cr_assert(json_equal(before, after), "%s: pid %d had %s, has %s after the restart", method,
		          (int)kids[i], json_dumps(before, JSON_COMPACT), json_dumps(after, JSON_COMPACT));
	}
	snprintf(buf, sizeof buf, "rule pool: found 1 process and %zu children at start", nkids);
	char *log = NULL;
	for (int tries = 0; tries < 100; tries++) {
		free(log);
		log = daemon_log(&d);
		if (strstr(log, buf))
			break;
		pause_ms(50);
	}
	cr_assert(strstr(log, buf), "%s: no \"%s\" in the log:\n%s", method, buf, log);
	free(log);
	daemon_stop(&d);

	/* Stopped, the daemon has said every attach: each one's line, or its rule's count of the rest. */
	log = daemon_log(&d);
	snprintf(buf, sizeof buf, "(rule pool)");
	size_t said = pool_log_lines(log, ": attached (", "as a child of pid ");
	cr_assert_eq(pool_log_lines(log, ": attached (", "by rule pool"), 1, "%s", log);
	cr_assert_eq(said + pool_log_unsaid(log), nkids, "%s: %zu children said one by one, %lu counted:\n%s",
	             method, said, pool_log_unsaid(log), log);
	cr_assert_eq(pool_log_lines(log, "as a child of pid ", buf), said, "a child's line names its rule:\n%s", log);
	free(log);
	json_decref(live);
	json_decref(again);
	json_decref(report);
}

static void pool_on(unsigned minor, bool rooted, const char *method, const char *discovery)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = pool_python(pys, minor, rooted);
	if (!py)
		cr_skip("no CPython 3.%u%s", minor, rooted ? " in a root of its own" : " of the host's");
	pool_survives_a_restart(py, method, discovery);
}

Test(pools, fork_pool_survives_a_restart_3_8)
{
	pool_on(8, false, "fork", "netlink");
}

Test(pools, spawn_pool_survives_a_restart_3_8)
{
	pool_on(8, false, "spawn", "netlink");
}

Test(pools, forkserver_pool_survives_a_restart_3_8)
{
	pool_on(8, false, "forkserver", "netlink");
}

Test(pools, fork_pool_survives_a_restart_3_12)
{
	pool_on(12, false, "fork", "netlink");
}

Test(pools, spawn_pool_survives_a_restart_3_12)
{
	pool_on(12, false, "spawn", "netlink");
}

Test(pools, forkserver_pool_survives_a_restart_3_12)
{
	pool_on(12, false, "forkserver", "netlink");
}

Test(pools, fork_pool_survives_a_restart_3_15)
{
	pool_on(15, true, "fork", "netlink");
}

Test(pools, spawn_pool_survives_a_restart_3_15)
{
	pool_on(15, true, "spawn", "netlink");
}

Test(pools, forkserver_pool_survives_a_restart_3_15)
{
	pool_on(15, true, "forkserver", "netlink");
}

/* Found by walks of /proc, where the kernel's process events cannot be had. */
Test(pools, forkserver_pool_survives_a_restart_found_by_scans)
{
	pool_on(12, false, "forkserver", "scan");
}
