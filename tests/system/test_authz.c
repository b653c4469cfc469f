/*
 * Who may act on a process through root's daemon: exactly whom the kernel
 * would let trace it.  A user's processes that run with privileges (a
 * setuid-root interpreter, one with file capabilities, one with another
 * group's ids, one that made itself undumpable) are root's alone, live and
 * in the history, and a process that gains privileges after it was attached
 * becomes root's alone from then on.  One that merely exits stays its user's.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include "daemon.h"
#include "fleet.h"
#include "helpers.h"

TestSuite(authz, .init = helpers_init, .fini = helpers_fini);

/* Debian's static interpreter: a copy of it runs anywhere, setuid too (no $ORIGIN to drop). */
#define STATIC_PYTHON "/usr/bin/python3.11"
#define OTHER_GID "100"

static const struct run_opts as_nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};

/* A copy of the static interpreter at dir/name with mode; setcap'd when caps is given. */
static void interpreter_copy(const char *dir, const char *name, mode_t mode, const char *caps,
                             char *out, size_t len)
{
	snprintf(out, len, "%s/%s", dir, name);
	copy_executable(STATIC_PYTHON, out);
	cr_assert(chown(out, 0, 0) == 0 && chmod(out, mode) == 0, "%s: %s", out, strerror(errno));
	if (caps) {
		struct run_result r;
		const char *setcap[] = {"setcap", caps, out, NULL};
		run_command(&r, setcap, NULL);
		char why[512];
		cr_assert(r.exited && r.code == 0, "setcap: %s", run_describe(&r, why, sizeof why));
		run_result_free(&r);
	}
}

/* `setpriv` to nobody with gid, then the interpreter idling (it finds its library by PYTHONHOME). */
static void start_as_nobody(struct test_target *t, const char *interpreter, const char *gid,
                            const char *program)
{
	char regid[32];
	snprintf(regid, sizeof regid, "--regid=%s", gid);
	const char *argv[] = {"setpriv", "--reuid=65534", regid, "--clear-groups", "env", "PYTHONHOME=/usr",
	                      interpreter, "-c", program, NULL};
	test_target_start_argv(t, argv);
}

/* The line of /proc/PID/status that starts with key, once the process runs `exe`. */
static void status_line(pid_t pid, const char *exe, const char *key, char *out, size_t len)
{
	char path[64], link[PATH_MAX];
	snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
	for (int i = 0; i < 200; i++) {
		ssize_t n = readlink(path, link, sizeof link - 1);
		link[n > 0 ? n : 0] = '\0';
		if (strcmp(link, exe) == 0)
			break;
		pause_ms(25);
	}
	cr_assert_str_eq(link, exe, "the process never ran %s", exe);
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	out[0] = '\0';
	char line[512];
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, strlen(key)) == 0)
			snprintf(out, len, "%s", line);
	fclose(f);
	cr_assert(out[0], "no %s line for pid %d", key, (int)pid);
}

/* Samples of pid in the history as this user sees them (`query --format table --json`). */
static json_int_t samples_seen_by(const struct daemon *d, pid_t pid, const struct run_opts *who)
{
	char p[16], why[512];
	const char *args[] = {"--json", "query", "--pid", pid_text(pid, p, sizeof p), "--format", "table", NULL};
	struct run_result r;
	ctl_run(d, &r, args, who);
	cr_assert(r.exited && r.code == 0, "query: %s", run_describe(&r, why, sizeof why));
	json_t *j = json_loads(r.out, 0, NULL);
	cr_assert_not_null(j, "query printed no JSON: %s", r.out);
	json_int_t n = jint(j, "samples");
	json_decref(j);
	run_result_free(&r);
	return n;
}

/* nobody may not attach or dump pid, nor, once the daemon knows it, read its stats or detach it. */
static void nobody_is_refused(const struct daemon *d, pid_t pid, bool known, const char *what)
{
	char p[16], context[128];
	pid_text(pid, p, sizeof p);
	const char *const verbs[] = {"attach", "dump", "stats", "detach"};
	for (size_t i = 0; i < (known ? 4u : 2u); i++) {
		const char *args[] = {verbs[i], p, NULL};
		snprintf(context, sizeof context, "nobody's %s of %s", verbs[i], what);
		ctl_expect_failure(d, args, 4, &as_nobody, context);
	}
}

Test(authz, privileged_processes_are_roots_alone, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it makes setuid and setcap programs)");
	if (access(STATIC_PYTHON, X_OK) != 0)
		cr_skip_test("no %s to copy", STATIC_PYTHON);
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	cr_assert(chmod(dir, 0755) == 0);
	char plain[PATH_MAX], setuid_root[PATH_MAX], with_caps[PATH_MAX];
	interpreter_copy(dir, "plain", 0755, NULL, plain, sizeof plain);
	interpreter_copy(dir, "setuid", 04755, NULL, setuid_root, sizeof setuid_root);
	interpreter_copy(dir, "caps", 0755, "cap_net_bind_service+ep", with_caps, sizeof with_caps);

	struct test_target own, suid, capped, other_group;
	start_as_nobody(&own, plain, "65534", idle_program);
	start_as_nobody(&suid, setuid_root, "65534", idle_program);
	start_as_nobody(&capped, with_caps, "65534", idle_program);
	start_as_nobody(&other_group, plain, OTHER_GID, idle_program);
	/* Each is what it should be, or the refusals below would prove nothing. */
	char line[512];
	status_line(suid.pid, setuid_root, "Uid:", line, sizeof line);
	cr_assert_str_eq(line, "Uid:\t65534\t0\t0\t0\n", "the setuid copy does not run as root");
	status_line(capped.pid, with_caps, "CapPrm:", line, sizeof line);
	cr_assert(strcmp(line, "CapPrm:\t0000000000000000\n") != 0, "the setcap copy has no capabilities");
	status_line(other_group.pid, plain, "Gid:", line, sizeof line);
	cr_assert_str_eq(line, "Gid:\t" OTHER_GID "\t" OTHER_GID "\t" OTHER_GID "\t" OTHER_GID "\n");
	status_line(own.pid, plain, "Uid:", line, sizeof line);
	cr_assert_str_eq(line, "Uid:\t65534\t65534\t65534\t65534\n");

	struct daemon d;
	struct run_result r;
	daemon_start(&d, NULL);
	/* Its own plain process: nobody may. */
	attach_as_nobody(&d, own.pid, "nobody attaching to its own process");
	char own_pid[16], why[512];
	const char *dump_own[] = {"dump", pid_text(own.pid, own_pid, sizeof own_pid), NULL};
	ctl_run(&d, &r, dump_own, &as_nobody);
	cr_assert(r.exited && r.code == 0 && strstr(r.out, "Thread "), "nobody's dump of its own process: %s",
	          run_describe(&r, why, sizeof why));
	run_result_free(&r);
	nobody_is_refused(&d, suid.pid, false, "a setuid-root interpreter it started");
	nobody_is_refused(&d, capped.pid, false, "an interpreter with file capabilities it started");
	nobody_is_refused(&d, other_group.pid, false, "its process with another group's ids");

	/* Root may; nobody then neither sees it in the list nor in the history. */
	ctl_attach_at(&d, suid.pid, "200");
	json_decref(entry_when(&d, suid.pid, sampled_a_while, "sampled"));
	nobody_is_refused(&d, suid.pid, true, "a setuid-root interpreter root attached");
	const char *list[] = {"--json", "list", NULL};
	ctl_run(&d, &r, list, &as_nobody);
	json_t *seen = json_loads(r.out, 0, NULL);
	cr_assert(json_is_array(seen) && json_array_size(seen) == 1 &&
	          jint(json_array_get(seen, 0), "pid") == own.pid,
	          "nobody must see its own plain process alone: %s", r.out);
	json_decref(seen);
	run_result_free(&r);
	cr_assert_gt(samples_seen_by(&d, suid.pid, NULL), 0, "root sees no history of the process");
	cr_assert_eq(samples_seen_by(&d, suid.pid, &as_nobody), 0,
	             "nobody sees the history of a process it may not trace");
	cr_assert_gt(samples_seen_by(&d, own.pid, &as_nobody), 0, "nobody sees no history of its own process");
	daemon_stop(&d);
	test_target_kill(&own);
	test_target_kill(&suid);
	test_target_kill(&capped);
	test_target_kill(&other_group);
}

/* Once the kernel gives /proc/PID/status to uid:gid (root's when the process is not dumpable). */
static void status_owned_by(pid_t pid, uid_t uid, gid_t gid, const char *what)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	struct stat st = {0};
	for (int i = 0; i < 400; i++) {
		cr_assert(stat(path, &st) == 0, "%s: %s", path, strerror(errno));
		if (st.st_uid == uid && st.st_gid == gid)
			return;
		pause_ms(25);
	}
	cr_assert_fail("%s: /proc/%d/status is %d:%d, not %d:%d", what, (int)pid, (int)st.st_uid,
	               (int)st.st_gid, (int)uid, (int)gid);
}

/*
 * What the ids alone do not show: a process of nobody's that made itself
 * undumpable (as ssh-agent does), and one whose gids are two groups' yet
 * dumpable (root dropped to them and said so with prctl).  The kernel lets
 * nobody trace neither; neither may nobody through the daemon.
 */
Test(authz, undumpable_or_two_groups_is_roots_alone, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it sets a process's ids)");
	if (access(STATIC_PYTHON, X_OK) != 0)
		cr_skip_test("no %s to copy", STATIC_PYTHON);
	char dir[PATH_MAX - 64], plain[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	cr_assert(chmod(dir, 0755) == 0);
	interpreter_copy(dir, "plain", 0755, NULL, plain, sizeof plain);
	/* PR_SET_DUMPABLE is 4. */
	char undumpable_program[512], two_groups_program[1024];
	snprintf(undumpable_program, sizeof undumpable_program,
	         "import ctypes\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n%s", idle_program);
	snprintf(two_groups_program, sizeof two_groups_program,
	         "import ctypes, os\nlibc = ctypes.CDLL(None)\nos.setgroups([])\n"
	         "os.setresgid(65534, " OTHER_GID ", 65534)\nos.setresuid(65534, 65534, 65534)\n"
	         "libc.prctl(4, 1, 0, 0, 0)\n%s",
	         idle_program);

	struct test_target own, undumpable, two_groups;
	start_as_nobody(&own, plain, "65534", idle_program);
	start_as_nobody(&undumpable, plain, "65534", undumpable_program);
	const char *as_root[] = {"env", "PYTHONHOME=/usr", plain, "-c", two_groups_program, NULL};
	test_target_start_argv(&two_groups, as_root);
	/* Each is what it should be, or the refusals below would prove nothing. */
	char line[512];
	status_line(undumpable.pid, plain, "Uid:", line, sizeof line);
	cr_assert_str_eq(line, "Uid:\t65534\t65534\t65534\t65534\n");
	status_owned_by(undumpable.pid, 0, 0, "the process that made itself undumpable");
	status_line(undumpable.pid, plain, "CapPrm:", line, sizeof line);
	cr_assert_str_eq(line, "CapPrm:\t0000000000000000\n");
	status_owned_by(two_groups.pid, 65534, atoi(OTHER_GID), "the dumpable process of two groups");
	status_line(two_groups.pid, plain, "Uid:", line, sizeof line);
	cr_assert_str_eq(line, "Uid:\t65534\t65534\t65534\t65534\n");
	status_line(two_groups.pid, plain, "Gid:", line, sizeof line);
	cr_assert_str_eq(line, "Gid:\t65534\t" OTHER_GID "\t65534\t" OTHER_GID "\n");
	status_line(two_groups.pid, plain, "CapPrm:", line, sizeof line);
	cr_assert_str_eq(line, "CapPrm:\t0000000000000000\n");

	struct daemon d;
	daemon_start(&d, NULL);
	attach_as_nobody(&d, own.pid, "nobody attaching to its own process");
	nobody_is_refused(&d, undumpable.pid, false, "its process that made itself undumpable");
	nobody_is_refused(&d, two_groups.pid, false, "its process of two groups");
	ctl_attach_at(&d, undumpable.pid, "200");
	ctl_attach_at(&d, two_groups.pid, "200");
	nobody_is_refused(&d, undumpable.pid, true, "its undumpable process root attached");
	nobody_is_refused(&d, two_groups.pid, true, "its process of two groups root attached");
	daemon_stop(&d);
	test_target_kill(&own);
	test_target_kill(&undumpable);
	test_target_kill(&two_groups);
}

/* Whether nobody's `list` shows pid. */
static bool nobody_lists(const struct daemon *d, pid_t pid)
{
	const char *list[] = {"--json", "list", NULL};
	struct run_result r;
	ctl_run(d, &r, list, &as_nobody);
	json_t *seen = json_loads(r.out, 0, NULL);
	cr_assert(r.exited && r.code == 0 && json_is_array(seen), "nobody's list: %s", r.out);
	bool found = false;
	for (size_t i = 0; i < json_array_size(seen); i++)
		found |= jint(json_array_get(seen, i), "pid") == pid;
	json_decref(seen);
	run_result_free(&r);
	return found;
}

/* A program that idles until flag exists, then becomes the setuid interpreter running next. */
static void gain_then(char *out, size_t len, const char *flag, const char *setuid, const char *next)
{
	snprintf(out, len,
	         "import os, time\n"
	         "while not os.path.exists('%s'):\n"
	         "    time.sleep(0.01)\n"
	         "os.execv('%s', ['%s', '%s'])\n",
	         flag, setuid, setuid, next);
}

/*
 * Exec of a setuid program keeps the pid and the start time: a process
 * nobody attached as its own is root's alone once it has made that exec.
 * Housekeeping finds it within a second (`list` looks no further than
 * what it found); a request about the process looks for itself.  And it
 * stays root's: dropping the privileges later does not give it back.
 */
Test(authz, gaining_privileges_ends_the_users_access, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it makes a setuid program)");
	if (access(STATIC_PYTHON, X_OK) != 0)
		cr_skip_test("no %s to copy", STATIC_PYTHON);
	char dir[PATH_MAX - 64], plain[PATH_MAX], setuid_root[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	cr_assert(chmod(dir, 0777) == 0);
	interpreter_copy(dir, "plain", 0755, NULL, plain, sizeof plain);
	interpreter_copy(dir, "setuid", 04755, NULL, setuid_root, sizeof setuid_root);
	char gain[PATH_MAX + 8], drop[PATH_MAX + 8], idle[PATH_MAX + 8], dropper[PATH_MAX + 16];
	snprintf(gain, sizeof gain, "%s/gain-now", dir);
	snprintf(drop, sizeof drop, "%s/drop-now", dir);
	snprintf(idle, sizeof idle, "%s/idle.py", dir);
	snprintf(dropper, sizeof dropper, "%s/dropper.py", dir);
	write_text_file(idle, idle_program);
	/* As setuid root: once told, nobody's for good again, and dumpable (exec of a plain program). */
	char program[4 * PATH_MAX + 256];
	snprintf(program, sizeof program,
	         "import os, time\n"
	         "while not os.path.exists('%s'):\n"
	         "    time.sleep(0.01)\n"
	         "os.setresuid(65534, 65534, 65534)\n"
	         "os.execv('%s', ['%s', '%s'])\n",
	         drop, plain, plain, idle);
	write_text_file(dropper, program);
	char asked_program[4 * PATH_MAX + 256], watched_program[4 * PATH_MAX + 256];
	gain_then(asked_program, sizeof asked_program, gain, setuid_root, idle);
	gain_then(watched_program, sizeof watched_program, gain, setuid_root, dropper);

	/* One is watched through `list` alone, the other asked about at once. */
	struct test_target watched, asked;
	start_as_nobody(&watched, plain, "65534", watched_program);
	start_as_nobody(&asked, plain, "65534", asked_program);
	struct daemon d;
	daemon_start(&d, NULL);
	attach_as_nobody(&d, watched.pid, "nobody attaching to its own process");
	attach_as_nobody(&d, asked.pid, "nobody attaching to its own process");
	char p[16];
	pid_text(asked.pid, p, sizeof p);
	const char *stats[] = {"stats", p, NULL};
	struct run_result r;
	ctl_run(&d, &r, stats, &as_nobody);
	cr_assert(r.exited && r.code == 0, "nobody reading its own process's stats");
	run_result_free(&r);
	cr_assert(nobody_lists(&d, watched.pid), "nobody does not see its own process");

	write_text_file(gain, "");
	char line[512];
	status_line(asked.pid, setuid_root, "Uid:", line, sizeof line);
	cr_assert_str_eq(line, "Uid:\t65534\t0\t0\t0\n", "the process did not become setuid root");
	ctl_expect_failure(&d, stats, 4, &as_nobody, "nobody's stats right after it became setuid root");
	nobody_is_refused(&d, asked.pid, true, "its process after it became setuid root");

	status_line(watched.pid, setuid_root, "Uid:", line, sizeof line);
	cr_assert_str_eq(line, "Uid:\t65534\t0\t0\t0\n", "the process did not become setuid root");
	/* The daemon looks once a second. */
	bool listed = true;
	for (int i = 0; i < 50 && listed; i++) {
		listed = nobody_lists(&d, watched.pid);
		if (listed)
			pause_ms(200);
	}
	cr_assert_not(listed, "nobody still sees a process that became setuid root");
	nobody_is_refused(&d, watched.pid, true, "its process after it became setuid root");
	char *log = daemon_log(&d);
	char logged[128];
	snprintf(logged, sizeof logged, "pid %d: no longer traceable by uid 65534", (int)watched.pid);
	cr_assert(strstr(log, logged), "the change was not logged:\n%s", log);
	free(log);

	/* The kernel would let nobody trace it again; the daemon keeps it root's. */
	write_text_file(drop, "");
	status_line(watched.pid, plain, "Uid:", line, sizeof line);
	cr_assert_str_eq(line, "Uid:\t65534\t65534\t65534\t65534\n", "the process did not drop root");
	status_owned_by(watched.pid, 65534, 65534, "the process that dropped root");
	nobody_is_refused(&d, watched.pid, true, "its process that was setuid root while profiled");
	cr_assert_not(nobody_lists(&d, watched.pid), "nobody sees a process that was root's");
	daemon_stop(&d);
	test_target_kill(&watched);
	test_target_kill(&asked);
}

/* Whether pid is a zombie: killed, not yet reaped. */
static bool authz_is_zombie(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && paren[2] == 'Z';
}

/*
 * A process that exits has no memory left, and the kernel gives its /proc
 * files to root: the daemon, told of the exit by the process events while
 * a rule is configured, took that for privileges gained and made the
 * user's dying processes root's, gone from its `list` and its history.
 */
#define AUTHZ_DYING 4
Test(authz, a_users_process_that_exits_stays_its_own, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	struct daemon d;
	fleet_daemon_discovering(&d, "netlink", "1s", "[rule.barrier]\nmatch.cmdline = authz-exit-barrier\n");

	const char *idle[] = {AS_NOBODY, py->path, "-I", "-c", idle_program, NULL};
	struct test_target dying[AUTHZ_DYING];
	for (int i = 0; i < AUTHZ_DYING; i++) {
		test_target_start_argv(&dying[i], idle);
		attach_as_nobody(&d, dying[i].pid, "nobody's own idle process");
	}
	for (int i = 0; i < AUTHZ_DYING; i++)
		json_decref(entry_when(&d, dying[i].pid, sampled_a_while, "sampled"));

	/* Killed and left unreaped: the daemon hears of each exit while the process is a zombie. */
	for (int i = 0; i < AUTHZ_DYING; i++)
		cr_assert(kill(dying[i].pid, SIGKILL) == 0);
	for (int i = 0; i < AUTHZ_DYING; i++) {
		int tries = 0;
		while (!authz_is_zombie(dying[i].pid) && tries++ < 300)
			pause_ms(100);
		cr_assert(authz_is_zombie(dying[i].pid), "pid %d did not die", (int)dying[i].pid);
	}
	/* The events come in order: once the barrier's exec is handled, so were the exits. */
	pid_t barrier = fleet_spawn(fleet_python(pys), "authz-exit-barrier");
	json_decref(fleet_entry_by_marker(&d, "authz-exit-barrier", "the barrier process"));
	for (int i = 0; i < AUTHZ_DYING; i++) {
		test_target_kill(&dying[i]);
		json_t *e = entry_when(&d, dying[i].pid, is_exited, "exited");
		cr_assert_eq(jint(e, "uid"), NOBODY_UID, "pid %d became another user's as it died: %s",
		             (int)dying[i].pid, json_dumps(e, JSON_COMPACT));
		json_decref(e);
		cr_assert(nobody_lists(&d, dying[i].pid), "nobody no longer lists its own pid %d",
		          (int)dying[i].pid);
		/* Its samples reach the history once the writer has them. */
		json_int_t seen = 0;
		for (int tries = 0; tries < 300 && !(seen = samples_seen_by(&d, dying[i].pid, &as_nobody)); tries++)
			pause_ms(100);
		cr_assert_gt(seen, 0, "nobody sees no history of its own pid %d", (int)dying[i].pid);
	}
	char *log = daemon_log(&d);
	cr_assert_null(strstr(log, "gained privileges"), "a dying process was taken for one that gained "
	               "privileges:\n%s", log);
	free(log);
	fleet_kill(barrier);
	daemon_stop(&d);
}
