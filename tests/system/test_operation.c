/*
 * Operating the daemon: SIGHUP reloads its config, sampling modes, the warm
 * budget, systemd socket activation and notify, any user running it, the
 * setups it refuses, and the mode of its socket.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(operation, .init = helpers_init, .fini = helpers_fini);

Test(operation, sighup_reloads_config, .timeout = 120)
{
	struct daemon d;
	daemon_start(&d, NULL);
	char conf[PATH_MAX + 32];
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", d.state);
	write_text_file(conf, "[limits]\nwarm_budget_mb = 7\n");
	cr_assert(kill(d.pid, SIGHUP) == 0);
	static const char *const status[] = {"status", NULL};
	json_t *s = NULL;
	for (int i = 0; i < 100; i++) {
		json_decref(s);
		s = ctl_json(&d, status);
		if (jint(s, "warm_budget_bytes") == 7 << 20)
			break;
		pause_ms(50);
	}
	cr_assert_eq(jint(s, "warm_budget_bytes"), 7 << 20, "SIGHUP did not apply the config file");
	json_decref(s);
	s = NULL;
	write_text_file(conf, "[limits]\nwarm_budget_mb = lots\n");
	cr_assert(kill(d.pid, SIGHUP) == 0);
	/* The refusal is in status, with the file, the line and the setting, until a reload succeeds. */
	json_t *config = NULL;
	for (int i = 0; i < 100; i++) {
		json_decref(s);
		s = ctl_json(&d, status);
		config = json_object_get(s, "config");
		if (json_number_value(json_object_get(config, "reload_failed")) > 0)
			break;
		pause_ms(50);
	}
	cr_assert(json_number_value(json_object_get(config, "reload_failed")) > 0,
	          "status does not say the reload failed: %s", json_dumps(s, JSON_COMPACT));
	char want[PATH_MAX + 128];
	snprintf(want, sizeof want, "%s:2: bad or unknown setting [limits] warm_budget_mb = lots", conf);
	cr_assert(strstr(jstr(config, "reload_error"), want), "status says '%s', not '%s'",
	          jstr(config, "reload_error"), want);
	cr_assert_eq(jint(s, "warm_budget_bytes"), 7 << 20, "a bad config file changed the settings");
	json_decref(s);
	cr_assert(daemon_alive(&d));
	static const char *const text_status[] = {"status", NULL};
	struct run_result r;
	ctl_run(&d, &r, text_status, NULL);
	cr_assert(strstr(r.out, "config.reload_error: ") && strstr(r.out, want), "%s", r.out);
	run_result_free(&r);

	write_text_file(conf, "[limits]\nwarm_budget_mb = 9\n");
	cr_assert(kill(d.pid, SIGHUP) == 0);
	for (int i = 0; i < 100; i++) {
		s = ctl_json(&d, status);
		if (jint(s, "warm_budget_bytes") == 9 << 20)
			break;
		json_decref(s);
		s = NULL;
		pause_ms(50);
	}
	cr_assert_not_null(s, "the good file was not applied");
	config = json_object_get(s, "config");
	cr_assert(json_number_value(json_object_get(config, "reload_failed")) == 0 &&
	          !*jstr(config, "reload_error"), "a good reload left the failure in status: %s",
	          json_dumps(s, JSON_COMPACT));
	json_decref(s);
	daemon_stop(&d);
}

/* A setting that takes one of a few forms says which, in the file and as a flag. */
Test(operation, config_errors_list_what_a_setting_takes)
{
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	static const struct {
		const char *text, *flag, *says;
	} bad[] = {
		{"[daemon]\nlog_level = loud\n", NULL, "[daemon] log_level must be one of error, warn, info, debug, not 'loud'"},
		{NULL, "--log-level=loud", "--log-level must be one of error, warn, info, debug, not 'loud'"},
		{"[export.otlp]\nendpoint = collector:4318\n", NULL,
		 "[export.otlp] endpoint must be an http:// or https:// URL with a host"},
		{"[discovery]\nmethod = ebpf\n", NULL, "[discovery] method must be one of auto, netlink, scan, not 'ebpf'"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char path[PATH_MAX], state[PATH_MAX];
		snprintf(path, sizeof path, "%s/bad%zu.conf", dir, i);
		snprintf(state, sizeof state, "%s/state%zu", dir, i);
		write_text_file(path, bad[i].text ? bad[i].text : "");
		const char *argv[] = {pyprofd_bin(), "--state-dir", state, "--config", path, bad[i].flag, NULL};
		struct run_result r;
		run_command(&r, argv, NULL);
		cr_expect(r.exited && r.code == 2, "%s: the daemon did not refuse it (%d)", bad[i].says, r.code);
		cr_expect(strstr(r.err, bad[i].says), "stderr does not say '%s': %s", bad[i].says, r.err);
		run_result_free(&r);
	}
	/* A format mistyped is told the formats there are, before anything connects. */
	const char *query[] = {ctl_bin(), "query", "--format", "flamgraph", NULL};
	struct run_result r;
	run_command(&r, query, NULL);
	const char *says = "unknown format 'flamgraph': query writes collapsed, flamegraph, heatmap, "
	                   "speedscope, pprof, gecko, json, table, processes or traces";
	cr_expect(r.exited && r.code == 2 && strstr(r.err, says), "query --format flamgraph: %d %s", r.code,
	          r.err);
	run_result_free(&r);
}

/* Whether top (last few seconds) shows `function` at all. */
static bool top_shows(const struct daemon *d, pid_t pid, const char *function)
{
	char p[16];
	const char *top[] = {"top", pid_text(pid, p, sizeof p), "--once", "--window", "1", NULL};
	json_t *t = ctl_json(d, top);
	bool found = false;
	size_t k;
	json_t *row;
	json_array_foreach(json_object_get(t, "rows"), k, row)
		found = found || strcmp(jstr(row, "function"), function) == 0;
	json_decref(t);
	return found;
}

/*
 * The modes pick threads: wall every thread, cpu the one the kernel runs,
 * gil the one holding the GIL.  A spinning thread beside a sleeping one
 * tells them apart.
 */
Test(operation, sampling_modes, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct daemon d;
	daemon_start(&d, NULL);
	static const char *const modes[] = {"wall", "cpu", "gil"};
	for (size_t m = 0; m < 3; m++) {
		struct test_target target;
		test_target_start(&target, &pys[n - 1], "spin");
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		char p[16];
		const char *args[] = {"attach", pid_text(target.pid, p, sizeof p), "--rate", "200",
		                      "--mode", modes[m], NULL};
		ctl_ok(&d, args);
		json_t *e = entry_when(&d, target.pid, sampled_a_while, "sampled");
		cr_assert_str_eq(jstr(e, "mode"), modes[m]);
		json_decref(e);
		cr_assert(top_shows(&d, target.pid, "spin_forever"), "mode %s misses the spinning thread",
		          modes[m]);
		bool sleeper = top_shows(&d, target.pid, "hold");
		cr_assert(m == 0 ? sleeper : !sleeper, "mode %s %s the sleeping thread", modes[m],
		          sleeper ? "samples" : "misses");
		test_target_kill(&target);
	}
	daemon_stop(&d);
}

/*
 * top's header, samples in so many seconds: as many as the rate gives over
 * that time (threads x rate x seconds), never the second under way on top
 * of the window asked, nor the last session's samples after a warm
 * re-attach.
 */
static void expect_top_at_rate(const struct daemon *d, pid_t pid, double rate, double unsampled_s,
                               const char *when)
{
	char p[16];
	const char *top[] = {"top", pid_text(pid, p, sizeof p), "--once", "--window", "3", NULL};
	json_t *t = ctl_json(d, top);
	double span = json_number_value(json_object_get(t, "window_s"));
	size_t threads = json_array_size(json_object_get(t, "threads"));
	double samples = (double)jint(t, "samples"), expected = rate * span * (double)threads;
	cr_assert(threads > 0 && span > 0 && span < 4.0, "%s: %s", when, json_dumps(t, JSON_COMPACT));
	/*
	 * A tick or two either way per thread: the loop's first and last of the
	 * span; and none in the part of its first second before sampling began.
	 * Below, a loaded host's missed ticks (a fifth of them beside two CPU
	 * hogs); a window counted a third short or more still falls under it.
	 */
	double least = rate * (span - unsampled_s) * (double)threads;
	cr_assert(samples <= expected * 1.05 + 2.0 * (double)threads &&
	          samples >= least * 0.7 - 2.0 * (double)threads,
	          "%s: top counts %.0f samples of %zu threads in %.2f s at %.0f Hz (%.0f expected)", when,
	          samples, threads, span, rate, expected);
	json_decref(t);
}

Test(operation, top_counts_the_time_it_says, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target target;
	test_target_start(&target, &pys[n - 1], "spin");
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	struct daemon d;
	daemon_start(&d, NULL);
	char p[16];
	pid_text(target.pid, p, sizeof p);
	ctl_attach_at(&d, target.pid, "200");
	pause_ms(4500);
	expect_top_at_rate(&d, target.pid, 200, 0, "a whole window");
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	/* Seconds without samples, then a session shorter than the window: the span is the session's. */
	pause_ms(2000);
	ctl_attach_at(&d, target.pid, "200");
	pause_ms(1200);
	expect_top_at_rate(&d, target.pid, 200, 1, "1.2 s after a warm re-attach");
	test_target_kill(&target);
	daemon_stop(&d);
}

/* Past the warm budget, a detached target's state is dropped: the next attach starts cold. */
Test(operation, warm_budget, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target target;
	test_target_start(&target, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	static const char *const no_budget[] = {"--warm-budget", "0", NULL};
	struct daemon d;
	daemon_start(&d, no_budget);
	char p[16];
	pid_text(target.pid, p, sizeof p);
	ctl_attach_at(&d, target.pid, "200");
	json_decref(entry_when(&d, target.pid, sampled_a_while, "sampled"));
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);
	static const char *const list[] = {"list", NULL};
	json_t *all = ctl_json(&d, list);
	cr_assert_eq(json_array_size(all), 0, "a detached target outlived a zero budget: %s",
	             json_dumps(all, JSON_COMPACT));
	json_decref(all);
	const char *again[] = {"attach", p, NULL};
	json_t *a = ctl_json(&d, again);
	cr_assert(json_is_false(json_object_get(a, "warm")));
	json_decref(a);
	daemon_stop(&d);
}

/* Under systemd: the socket comes from LISTEN_FDS, readiness and status go to NOTIFY_SOCKET. */
Test(operation, systemd_socket_and_notify, .timeout = 120)
{
	char dir[PATH_MAX - 64], sock[PATH_MAX], notify[PATH_MAX], state[PATH_MAX], log[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(sock, sizeof sock, "%s/pyprofd.sock", dir);
	snprintf(notify, sizeof notify, "%s/notify", dir);
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(log, sizeof log, "%s/daemon.log", dir);
	int nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	cr_assert_lt(strlen(notify), sizeof addr.sun_path);
	memcpy(addr.sun_path, notify, strlen(notify) + 1);
	cr_assert(nfd >= 0 && bind(nfd, (struct sockaddr *)&addr, sizeof addr) == 0, "notify socket: %s",
	          strerror(errno));

	/* systemd-socket-activate listens, then execs the daemon with the socket as fd 3. */
	setenv("NOTIFY_SOCKET", notify, 1);
	/* It passes on only the variables it is told to. */
	char *const argv[] = {"systemd-socket-activate", "-E", "NOTIFY_SOCKET", "-l", sock, (char *)pyprofd_bin(),
	                      "--state-dir", state, NULL};
	pid_t pid = spawn_process(argv, log);
	unsetenv("NOTIFY_SOCKET");
	struct daemon d = {.pid = pid};
	snprintf(d.sock, sizeof d.sock, "%s", sock);
	snprintf(d.log, sizeof d.log, "%s", log);
	snprintf(d.state, sizeof d.state, "%s", state);
	cr_assert(daemon_wait_listening(&d), "nothing listens on %s", sock);
	static const char *const status[] = {"status", NULL};
	json_t *s = ctl_json(&d, status);
	cr_assert_str_eq(jstr(s, "socket"), "(from systemd)", "the daemon made its own socket");
	json_decref(s);

	char got[4096] = "";
	size_t len = 0;
	for (int i = 0; i < 100 && !(strstr(got, "READY=1") && strstr(got, "STATUS=")); i++) {
		char buf[1024];
		ssize_t r = recv(nfd, buf, sizeof buf - 1, MSG_DONTWAIT);
		if (r > 0 && len + (size_t)r + 2 < sizeof got) {
			memcpy(got + len, buf, (size_t)r);
			len += (size_t)r;
			got[len++] = '\n';
			got[len] = '\0';
		} else {
			pause_ms(20);
		}
	}
	cr_assert(strstr(got, "READY=1") && strstr(got, "STATUS=sampling"),
	          "no readiness or status sent to NOTIFY_SOCKET: %s", got);
	cr_assert(kill(pid, SIGTERM) == 0);
	int wstatus;
	cr_assert_eq(waitpid(pid, &wstatus, 0), pid);
	cr_assert(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0, "status 0x%x", wstatus);
	char buf[1024];
	ssize_t r = recv(nfd, buf, sizeof buf - 1, MSG_DONTWAIT);
	for (; r > 0; r = recv(nfd, buf, sizeof buf - 1, MSG_DONTWAIT)) {
		buf[r] = '\0';
		if (strstr(buf, "STOPPING=1"))
			break;
	}
	cr_assert(r > 0, "no STOPPING=1 on shutdown");
	close(nfd);
}

/* The daemon run by a plain user, on its own state directory, profiles that user's processes. */
Test(operation, runs_as_any_user, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = nobody_daemon_setup(pys);
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	struct daemon d;
	nobody_daemon_start(&d, dir, NULL);
	struct stat st;
	cr_assert(stat(d.state, &st) == 0 && st.st_uid == NOBODY_UID && (st.st_mode & 0777) == 0700,
	          "the state directory is not nobody's alone");

	struct test_target own, roots;
	const char *as_nobody[] = {AS_NOBODY, py->path, "-I", "-c", idle_program, NULL};
	test_target_start_argv(&own, as_nobody);
	test_target_start(&roots, py, "nested");
	json_decref(test_target_wait_report(&roots, TARGET_READY_TIMEOUT_S));

	char op[16], rp[16];
	pid_text(own.pid, op, sizeof op);
	pid_text(roots.pid, rp, sizeof rp);
	attach_as_nobody(&d, own.pid, "nobody's daemon attaching to nobody's process");
	json_decref(entry_when(&d, own.pid, sampled_a_while, "sampled"));

	/* Nor may it load the kernel's aids: status says which right they lack. */
	static const char *const status_args[] = {"status", NULL};
	json_t *s = ctl_json(&d, status_args);
	const char *reader = jstr(json_object_get(s, "kernel"), "reader");
	cr_expect(strstr(reader, "CAP_BPF"), "nobody's daemon: kernel.reader is '%s'", reader);
	json_decref(s);

	/* Root may ask, but a daemon without the rights cannot read root's process: it says so. */
	const char *attach_roots[] = {"attach", rp, NULL};
	ctl_expect_failure(&d, attach_roots, 4, NULL, "a user's daemon asked for root's process");
	cr_assert(kill(d.pid, SIGTERM) == 0);
	int status;
	cr_assert_eq(waitpid(d.pid, &status, 0), d.pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status 0x%x", status);
}

/* Bad flags, a missing config file, a taken socket, a state directory others may write: refused clearly. */
Test(operation, refuses_bad_setups, .timeout = 120)
{
	char dir[PATH_MAX - 64], conf[PATH_MAX], open_dir[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/missing.conf", dir);
	snprintf(open_dir, sizeof open_dir, "%s/open", dir);
	const char *bad_number[] = {pyprofd_bin(), "--state-dir", dir, "--max-connections", "nope", NULL};
	const char *bad_flag[] = {pyprofd_bin(), "--state-dir", dir, "--frobnicate", NULL};
	const char *no_config[] = {pyprofd_bin(), "--state-dir", dir, "--config", conf, NULL};
	const char *const *usage_errors[] = {bad_number, bad_flag, no_config};
	for (size_t i = 0; i < 3; i++) {
		struct run_result r;
		run_command(&r, usage_errors[i], NULL);
		char why[512];
		cr_assert(r.exited && r.code == 2 && r.err_len > 0 && strchr(r.err, '\n') == r.err + r.err_len - 1,
		          "%s %s: expected exit 2 and one line, got %s", usage_errors[i][3],
		          usage_errors[i][4] ? usage_errors[i][4] : "", run_describe(&r, why, sizeof why));
		run_result_free(&r);
	}

	cr_assert(mkdir(open_dir, 0777) == 0 && chmod(open_dir, 0777) == 0);
	const char *open_state[] = {pyprofd_bin(), "--state-dir", open_dir, NULL};
	struct run_result r;
	run_command(&r, open_state, NULL);
	cr_assert(r.exited && r.code == 1 && strstr(r.err, "writable"),
	          "a world-writable state directory was accepted: %s", r.err);
	run_result_free(&r);

	struct daemon d;
	daemon_start(&d, NULL);
	const char *second[] = {pyprofd_bin(), "--state-dir", d.state, "--socket", d.sock, NULL};
	run_command(&r, second, NULL);
	cr_assert(r.exited && r.code == 1 && strstr(r.err, "another daemon"),
	          "a second daemon took the socket: %s", r.err);
	run_result_free(&r);
	cr_assert(daemon_serves(&d), "the first daemon stopped serving");
	daemon_stop(&d);
}

/*
 * Every setting the example config shows, at the value it shows, is one the
 * daemon takes: the documented keys and ranges cannot drift from the parser.
 */
Test(operation, example_config_is_accepted, .timeout = 120)
{
	char example[PATH_MAX], dir[PATH_MAX - 64], conf[PATH_MAX];
	snprintf(example, sizeof example, "%s/../systemd/pyprofd.conf.example", getenv("PYPROFD_TESTS_DIR"));
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", dir);
	FILE *in = fopen(example, "r"), *out = fopen(conf, "w");
	cr_assert(in && out, "%s: %s", example, strerror(errno));
	char line[1024];
	int settings = 0;
	while (fgets(line, sizeof line, in)) {
		char key[64];
		/* Where it lives is the test's to say; every other commented setting is switched on. */
		bool setting = sscanf(line, "#%63[a-z_.] = ", key) == 1 && strstr(line, " = ");
		if (setting && strcmp(key, "state_dir") != 0 && strcmp(key, "socket") != 0) {
			fputs(line + 1, out);
			settings++;
		} else if (line[0] == '[' || strncmp(line, "#[", 2) == 0) {
			/* The example rule's header is commented out with its settings. */
			fputs(line + (line[0] == '#'), out);
		}
	}
	fclose(in);
	fclose(out);
	cr_assert_geq(settings, 19, "only %d settings found in %s", settings, example);
	const char *extra[] = {"--config", conf, NULL};
	struct daemon d;
	daemon_start(&d, extra);
	cr_assert(daemon_serves(&d));
	daemon_stop(&d);
}

/* The socket is born with its mode: every local user may reach root's, only its owner another's. */
Test(operation, socket_mode, .timeout = 120)
{
	struct daemon d;
	daemon_start(&d, NULL);
	struct stat st;
	cr_assert_eq(stat(d.sock, &st), 0, "%s: %s", d.sock, strerror(errno));
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 07777, 0666, "root's socket has mode %o", st.st_mode & 07777);
	daemon_stop(&d);

	struct python pys[PYTHONS_MAX];
	nobody_daemon_setup(pys);
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	nobody_daemon_start(&d, dir, NULL);
	cr_assert_eq(stat(d.sock, &st), 0, "%s: %s", d.sock, strerror(errno));
	cr_assert_eq(st.st_mode & 07777, 0600, "another user's socket has mode %o",
	             st.st_mode & 07777);
	cr_assert_eq(st.st_uid, NOBODY_UID);
	daemon_stop(&d);
}

/* pyprofd --state-dir STATE is refused: exit 1, one line naming component and saying why; STATE not made. */
static void expect_state_dir_refused(const char *state, const char *component, const char *why)
{
	const char *argv[] = {pyprofd_bin(), "--state-dir", state, NULL};
	struct run_result r;
	run_command(&r, argv, NULL);
	char desc[512], named[PATH_MAX + 8];
	cr_assert(r.exited && r.code == 1 && r.err_len > 0 && strchr(r.err, '\n') == r.err + r.err_len - 1,
	          "%s: expected exit 1 and one line, got %s", state, run_describe(&r, desc, sizeof desc));
	snprintf(named, sizeof named, ": %s ", component);
	cr_assert(strstr(r.err, named) && strstr(r.err, why),
	          "%s: the error does not name %s and say \"%s\": %s", state, component, why, r.err);
	run_result_free(&r);
	struct stat st;
	cr_assert(stat(state, &st) != 0, "%s was made", state);
}

/* The daemon takes STATE (its socket in it): it serves, and stops cleanly. */
static void expect_state_dir_taken(const char *dir, const char *state)
{
	struct daemon d = {0};
	snprintf(d.dir, sizeof d.dir, "%s", dir);
	snprintf(d.state, sizeof d.state, "%s", state);
	snprintf(d.sock, sizeof d.sock, "%s/pyprofd.sock", state);
	snprintf(d.log, sizeof d.log, "%s/taken.log", dir);
	const char *argv[] = {pyprofd_bin(), "--state-dir", state, NULL};
	d.pid = spawn_process((char *const *)argv, d.log);
	cr_assert(daemon_wait_listening(&d) && daemon_serves(&d), "%s was not taken", state);
	daemon_stop(&d);
}

/*
 * A state directory another user could point elsewhere is refused, naming
 * the component: a symbolic link of nobody's on the way, a directory of
 * nobody's, a directory others may write.  A link of root's is followed,
 * and a sticky directory others may write (as /tmp) is on the way to one.
 */
Test(operation, refuses_state_dirs_others_could_repoint, .timeout = 120)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it gives files to nobody)");
	char dir[PATH_MAX - 64], real[PATH_MAX], link[PATH_MAX], other[PATH_MAX], state[PATH_MAX + 16];
	scratch_dir(dir, sizeof dir);
	cr_assert(chmod(dir, 0755) == 0);

	snprintf(real, sizeof real, "%s/real", dir);
	snprintf(link, sizeof link, "%s/link", dir);
	cr_assert(mkdir(real, 0755) == 0 && symlink(real, link) == 0);
	cr_assert(lchown(link, NOBODY_UID, NOBODY_GID) == 0, "lchown: %s", strerror(errno));
	snprintf(state, sizeof state, "%s/state", link);
	expect_state_dir_refused(state, link, "is a symbolic link owned by uid 65534");
	cr_assert(lchown(link, 0, 0) == 0);
	expect_state_dir_taken(dir, state);

	snprintf(other, sizeof other, "%s/nobodys", dir);
	cr_assert(mkdir(other, 0755) == 0 && chown(other, NOBODY_UID, NOBODY_GID) == 0);
	snprintf(state, sizeof state, "%s/state", other);
	expect_state_dir_refused(state, other, "is owned by uid 65534");

	snprintf(other, sizeof other, "%s/open", dir);
	cr_assert(mkdir(other, 0755) == 0 && chmod(other, 0777) == 0);
	snprintf(state, sizeof state, "%s/state", other);
	expect_state_dir_refused(state, other, "is writable by others");
	cr_assert(chmod(other, 01777) == 0);
	expect_state_dir_taken(dir, state);
}

/* pyprofd with extra arguments is refused: exit 1, one line saying why; nothing of it left listening. */
static void expect_start_refused(const char *const extra[], const char *why, const char *context)
{
	const char *argv[12] = {pyprofd_bin()};
	size_t n = 1;
	for (size_t i = 0; extra[i] && n + 1 < sizeof argv / sizeof *argv; i++)
		argv[n++] = extra[i];
	struct run_result r;
	run_command(&r, argv, NULL);
	char desc[512];
	cr_assert(r.exited && r.code == 1 && r.err_len > 0 && strchr(r.err, '\n') == r.err + r.err_len - 1,
	          "%s: expected exit 1 and one line, got %s", context, run_describe(&r, desc, sizeof desc));
	cr_assert(strstr(r.err, why), "%s: the error does not say \"%s\": %s", context, why, r.err);
	run_result_free(&r);
}

/*
 * Where the socket goes and the history the daemon writes are no other
 * user's either: a socket directory of nobody's, or a history file of
 * nobody's (or one others may write) in a state directory of root's, is
 * refused at start, the way a state directory of nobody's is.
 */
Test(operation, refuses_socket_dirs_and_histories_of_others, .timeout = 120)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it gives files to nobody)");
	char dir[PATH_MAX - 64], state[PATH_MAX], other[PATH_MAX], sock[PATH_MAX + 16], db[PATH_MAX + 16];
	scratch_dir(dir, sizeof dir);
	cr_assert(chmod(dir, 0755) == 0);
	snprintf(state, sizeof state, "%s/state", dir);
	cr_assert(mkdir(state, 0700) == 0);

	snprintf(other, sizeof other, "%s/nobodys", dir);
	cr_assert(mkdir(other, 0755) == 0 && chown(other, NOBODY_UID, NOBODY_GID) == 0);
	snprintf(sock, sizeof sock, "%s/pyprofd.sock", other);
	const char *socket_of_nobody[] = {"--state-dir", state, "--socket", sock, NULL};
	expect_start_refused(socket_of_nobody, "socket directory", "a socket in nobody's directory");
	expect_start_refused(socket_of_nobody, "is owned by uid 65534", "a socket in nobody's directory");
	struct stat st;
	cr_assert(stat(sock, &st) != 0, "a socket was made in nobody's directory");

	snprintf(db, sizeof db, "%s/pyprofd.db", state);
	write_text_file(db, "");
	cr_assert(chown(db, NOBODY_UID, NOBODY_GID) == 0);
	const char *history_of_nobody[] = {"--state-dir", state, NULL};
	expect_start_refused(history_of_nobody, "pyprofd.db must be a regular file of uid 0", "nobody's history");
	cr_assert(chown(db, 0, 0) == 0 && chmod(db, 0666) == 0);
	expect_start_refused(history_of_nobody, "writable by its owner alone", "a history others may write");
}

/*
 * Every stack of a collapsed history pairs caller_N with callee_N of the
 * same source (a sample between the two calls, or proven only up to the
 * caller, ends at the caller); returns
 * how many distinct pairs it holds (of count).
 */
static unsigned collapsed_pairs_intact(const char *text, unsigned count, const char *context)
{
	bool *seen = calloc(count, sizeof *seen);
	cr_assert_not_null(seen);
	unsigned distinct = 0;
	for (const char *p = strstr(text, "caller_"); p; p = strstr(p + 1, "caller_")) {
		unsigned n, file_n, callee_n, callee_file_n;
		cr_assert(sscanf(p, "caller_%u (<pair %u>", &n, &file_n) == 2 && n == file_n && n < count,
		          "%s: a caller in a source not its own: %.200s", context, p);
		const char *end = p + strcspn(p, ";\n");
		if (*end == ';')
			cr_assert(sscanf(end, ";callee_%u (<pair %u>", &callee_n, &callee_file_n) == 2 &&
			                  callee_n == n && callee_file_n == n,
			          "%s: caller_%u calls another: %.200s", context, n, p);
		distinct += !seen[n];
		seen[n] = true;
	}
	/* And no callee stands under anything but a caller. */
	for (const char *p = strstr(text, "callee_"); p; p = strstr(p + 1, "callee_")) {
		const char *frame = p - 1;
		while (frame > text && frame[-1] != ';' && frame[-1] != '\n')
			frame--;
		cr_assert(p > text && p[-1] == ';' && frame < p - 1 && strncmp(frame, "caller_", 7) == 0,
		          "%s: a callee under another frame: %.200s", context, frame);
	}
	free(seen);
	return distinct;
}

/* The member key of status's JSON member group, which must be there. */
static json_int_t status_figure(json_t *status, const char *group, const char *key)
{
	return jint(group ? json_object_get(status, group) : status, key);
}

/*
 * A target meeting new stacks all the time, under a cache budget of 1 MiB:
 * the unwinder's caches and the history writer's stay within their bounds
 * in `status` as the caches are forgotten again and again, and the history
 * still holds every sample, each caller with its own callee, on heap
 * frames (3.8-3.10) and on the interpreter's data stack (3.11+) alike.
 */
Test(operation, caches_stay_within_their_budgets, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *picked[2] = {NULL, NULL};
	for (size_t i = 0; i < n; i++)
		if (!picked[pys[i].minor < 11])
			picked[pys[i].minor < 11] = &pys[i];
	static const char *const small[] = {"--cache-budget", "1", NULL};
	static const char *const status[] = {"status", NULL};
	enum { PAIRS = 3000 };
	struct daemon d;
	daemon_start(&d, small);
	char script[PATH_MAX];
	target_script("new_stacks.py", script, sizeof script);
	for (int k = 0; k < 2; k++) {
		if (!picked[k])
			continue;
		char what[PATH_MAX + 64], p[16], pairs[16];
		python_describe(picked[k], what, sizeof what);
		snprintf(pairs, sizeof pairs, "%d", PAIRS);
		const char *args[] = {"-I", script, pairs, "{report}", NULL};
		struct test_target target;
		test_target_start_python(&target, picked[k], args);
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		pid_text(target.pid, p, sizeof p);
		ctl_attach_at(&d, target.pid, "500");
		json_int_t resets = 0, peak = 0;
		for (int i = 0; i < 120 && resets < 3; i++) {
			pause_ms(500);
			json_t *s = ctl_json(&d, status);
			json_int_t cache = status_figure(s, NULL, "cache_bytes");
			cr_assert_eq(status_figure(s, NULL, "cache_budget_bytes"), 1 << 20);
			cr_assert_leq(cache, 1 << 20, "%s: the caches hold %lld bytes", what, (long long)cache);
			cr_assert_leq(status_figure(s, "history", "cache_bytes"),
			              status_figure(s, "history", "cache_budget_bytes"), "%s", what);
			cr_assert_gt(status_figure(s, NULL, "count_bytes"), 0, "%s", what);
			peak = cache > peak ? cache : peak;
			json_decref(s);
			json_t *st = ctl_stats_of(&d, target.pid);
			resets = jint(st, "cache_resets");
			json_decref(st);
		}
		cr_assert_geq(resets, 3, "%s: the caches were reset %lld times", what, (long long)resets);
		cr_assert_gt(peak, 0, "%s", what);
		const char *detach[] = {"detach", p, NULL};
		ctl_ok(&d, detach);
		json_t *st = ctl_stats_of(&d, target.pid);
		json_int_t taken = jint(st, "history_samples");
		json_decref(st);
		const char *by_pid[] = {"--pid", p, NULL};
		cr_assert_eq(query_total(&d, by_pid, NULL), taken, "%s: stored %lld of %lld samples", what,
		             (long long)query_total(&d, by_pid, NULL), (long long)taken);
		const char *collapsed[] = {"query", "--pid", p, "--format", "collapsed", NULL};
		struct run_result r;
		ctl_run(&d, &r, collapsed, NULL);
		cr_assert(r.exited && r.code == 0, "%s: query failed: %s", what, r.err);
		unsigned distinct = collapsed_pairs_intact(r.out, PAIRS, what);
		cr_assert_gt(distinct, 500, "%s: %u distinct pairs in the history", what, distinct);
		run_result_free(&r);
		test_target_kill(&target);
	}
	daemon_stop(&d);
}

/* Times text appears in the daemon's log. */
static int operation_log_count(const struct daemon *d, const char *text)
{
	char *log = daemon_log(d);
	int n = 0;
	for (const char *at = log; (at = strstr(at, text)); at += strlen(text))
		n++;
	free(log);
	return n;
}

/* status --json's schedule.behind, with the share missed. */
static bool operation_behind(const struct daemon *d, double *missed_percent)
{
	static const char *const status[] = {"status", NULL};
	json_t *s = ctl_json(d, status);
	json_t *schedule = json_object_get(s, "schedule");
	bool behind = json_is_true(json_object_get(schedule, "behind"));
	*missed_percent = json_number_value(json_object_get(schedule, "missed_percent"));
	json_decref(s);
	return behind;
}

/*
 * A daemon kept from its CPU (stopped for 3 s, as a starved one is) says it
 * falls behind: status and one log line while its ticks are missed, and
 * once more when it keeps its grid again.  It runs at the priority its unit
 * gives it (Nice=-10), which keeps it on its grid on a busy host.
 */
Test(operation, falling_behind_is_flagged, .timeout = 180)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target target;
	test_target_start(&target, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	struct daemon d;
	daemon_start(&d, NULL);
	cr_assert(setpriority(PRIO_PROCESS, (id_t)d.pid, -10) == 0, "setpriority: %s", strerror(errno));
	/* At 10 Hz a tick is missed only past 100 ms late: a busy host alone misses none. */
	ctl_attach_at(&d, target.pid, "10");
	/* Past its first ticks, which are never judged. */
	pause_ms(4000);
	double missed;
	for (int i = 0; i < 60 && operation_behind(&d, &missed); i++)
		pause_ms(500);
	int before = operation_log_count(&d, "sampling falls behind its grid");

	cr_assert(kill(d.pid, SIGSTOP) == 0);
	pause_ms(3000);
	cr_assert(kill(d.pid, SIGCONT) == 0);
	bool behind = false;
	for (int i = 0; i < 20 && !(behind = operation_behind(&d, &missed)); i++)
		pause_ms(250);
	cr_assert(behind, "status does not say the daemon fell behind (%.1f %% missed)", missed);
	cr_assert_gt(missed, 5.0, "%.1f %% of the ticks missed", missed);
	cr_assert_leq(operation_log_count(&d, "sampling falls behind its grid"), before + 1,
	              "more than one log line for one episode");
	cr_assert_geq(operation_log_count(&d, "sampling falls behind its grid"), 1, "no log line for it");

	/* Ten seconds on the grid again end the episode. */
	for (int i = 0; i < 240 && operation_behind(&d, &missed); i++)
		pause_ms(250);
	cr_assert(!operation_behind(&d, &missed), "still behind 60 s after (%.1f %% missed)", missed);
	cr_assert_geq(operation_log_count(&d, "keeps its grid again"), 1, "the end of the episode is not logged");
	daemon_stop(&d);
	test_target_kill(&target);
}
