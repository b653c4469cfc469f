#include "daemon.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DAEMON_START_TIMEOUT_S 20.0
#define DAEMON_ARGV_MAX 160

double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void pause_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

const char *ctl_bin(void)
{
	const char *bin = getenv("PYPROFD_CTL");
	cr_assert(bin && *bin, "PYPROFD_CTL is not set: run the suite with `make test`");
	return bin;
}

char *daemon_log(const struct daemon *d)
{
	FILE *f = fopen(d->log, "r");
	if (!f)
		return strdup("");
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	cr_assert_not_null(buf);
	size_t got;
	while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += got;
		if (cap - len < 2) {
			cap *= 2;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
	}
	fclose(f);
	buf[len] = '\0';
	return buf;
}

int daemon_connect(const struct daemon *d)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(fd >= 0, "socket: %s", strerror(errno));
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	cr_assert_lt(strlen(d->sock), sizeof addr.sun_path, "socket path too long: %s", d->sock);
	memcpy(addr.sun_path, d->sock, strlen(d->sock) + 1);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

void daemon_start(struct daemon *d, const char *const extra[])
{
	memset(d, 0, sizeof *d);
	scratch_dir(d->dir, sizeof d->dir);
	/* Others (the unprivileged user of the permission test) must reach the socket. */
	chmod(d->dir, 0755);
	snprintf(d->state, sizeof d->state, "%s/state", d->dir);
	snprintf(d->sock, sizeof d->sock, "%s/run/pyprofd.sock", d->dir);
	snprintf(d->log, sizeof d->log, "%s/daemon.log", d->dir);
	const char *argv[DAEMON_ARGV_MAX] = {pyprofd_bin(), "--state-dir", d->state, "--socket", d->sock,
	                                     "--log-level", "debug"};
	size_t n = 7;
	for (size_t i = 0; extra && extra[i]; i++) {
		cr_assert(n + 1 < DAEMON_ARGV_MAX, "too many daemon arguments");
		argv[n++] = extra[i];
	}
	argv[n] = NULL;
	d->pid = spawn_process((char *const *)argv, d->log);
	if (!daemon_wait_listening(d)) {
		char *log = daemon_log(d);
		cr_assert_fail("the daemon did not listen on %s within %.0f s:\n%s", d->sock,
		               DAEMON_START_TIMEOUT_S, log);
	}
}

bool daemon_wait_listening(struct daemon *d)
{
	double deadline = mono_now() + DAEMON_START_TIMEOUT_S;
	while (mono_now() < deadline) {
		int fd = daemon_connect(d);
		if (fd >= 0) {
			close(fd);
			return true;
		}
		int status;
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			char *log = daemon_log(d);
			cr_assert_fail("the daemon exited before listening:\n%s", log);
		}
		pause_ms(20);
	}
	return false;
}

bool daemon_alive(struct daemon *d)
{
	int status;
	return d->pid > 0 && waitpid(d->pid, &status, WNOHANG) == 0;
}

void daemon_stop(struct daemon *d)
{
	cr_assert(kill(d->pid, SIGTERM) == 0, "kill: %s", strerror(errno));
	double deadline = mono_now() + 15.0;
	int status = 0;
	pid_t r = 0;
	while (mono_now() < deadline && (r = waitpid(d->pid, &status, WNOHANG)) == 0)
		pause_ms(10);
	char *log = daemon_log(d);
	cr_assert(r == d->pid, "the daemon did not stop on SIGTERM:\n%s", log);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "the daemon did not exit cleanly (status 0x%x):\n%s", status, log);
	free(log);
	struct stat st;
	cr_assert(stat(d->sock, &st) != 0, "the daemon left its socket behind");
	d->pid = 0;
}

void ctl_run(const struct daemon *d, struct run_result *r, const char *const args[],
             const struct run_opts *opts)
{
	char copy[PATH_MAX];
	const char *bin = opts && opts->drop_privileges ? bin_for_others(ctl_bin(), copy, sizeof copy)
	                                                : ctl_bin();
	const char *argv[DAEMON_ARGV_MAX] = {bin, "--socket", d->sock};
	size_t n = 3;
	for (size_t i = 0; args[i]; i++) {
		cr_assert(n + 1 < DAEMON_ARGV_MAX, "too many arguments");
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	run_command(r, argv, opts);
}

json_t *ctl_json(const struct daemon *d, const char *const args[])
{
	const char *argv[DAEMON_ARGV_MAX] = {"--json"};
	size_t n = 1;
	for (size_t i = 0; args[i]; i++) {
		cr_assert(n + 1 < DAEMON_ARGV_MAX, "too many arguments");
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	struct run_result r;
	ctl_run(d, &r, argv, NULL);
	char why[512];
	cr_assert(r.exited && r.code == 0, "pyprofd-ctl %s: %s", args[0], run_describe(&r, why, sizeof why));
	json_error_t jerr;
	json_t *j = json_loadb(r.out, r.out_len, 0, &jerr);
	cr_assert_not_null(j, "pyprofd-ctl %s --json printed no JSON (%s): %s", args[0], jerr.text, r.out);
	run_result_free(&r);
	return j;
}

bool send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t put = send(fd, p, len, MSG_NOSIGNAL);
		if (put < 0 && errno == EINTR)
			continue;
		if (put <= 0)
			return false;
		p += put;
		len -= (size_t)put;
	}
	return true;
}

unsigned char *request_frame(Pyprofd__Request *req, size_t *frame_len)
{
	if (!req->version)
		req->version = PYPROFD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
	size_t len = pyprofd__request__get_packed_size(req);
	unsigned char *buf = malloc(len + 4);
	cr_assert_not_null(buf);
	buf[0] = (unsigned char)(len >> 24);
	buf[1] = (unsigned char)(len >> 16);
	buf[2] = (unsigned char)(len >> 8);
	buf[3] = (unsigned char)len;
	pyprofd__request__pack(req, buf + 4);
	*frame_len = len + 4;
	return buf;
}

bool send_request(int fd, Pyprofd__Request *req)
{
	size_t len;
	unsigned char *buf = request_frame(req, &len);
	bool ok = send_all(fd, buf, len);
	free(buf);
	return ok;
}

/* Whether fd has something to read (data or EOF) before the deadline. */
static bool readable_before(int fd, double deadline)
{
	for (;;) {
		double left = deadline - mono_now();
		if (left <= 0)
			return false;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int n = poll(&pfd, 1, (int)(left * 1000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		return n > 0;
	}
}

/* Read exactly len bytes before the deadline; false on EOF, error or timeout. */
static bool recv_exact(int fd, void *buf, size_t len, double deadline)
{
	char *p = buf;
	while (len > 0) {
		if (!readable_before(fd, deadline))
			return false;
		ssize_t got = recv(fd, p, len, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return false;
		p += got;
		len -= (size_t)got;
	}
	return true;
}

Pyprofd__Response *recv_response(int fd, double timeout_s)
{
	double deadline = mono_now() + timeout_s;
	unsigned char hdr[4];
	if (!recv_exact(fd, hdr, 4, deadline))
		return NULL;
	uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	cr_assert_leq(len, 64u << 20, "the daemon sent a frame of %u bytes", len);
	unsigned char *buf = malloc(len ? len : 1);
	cr_assert_not_null(buf);
	if (!recv_exact(fd, buf, len, deadline)) {
		free(buf);
		return NULL;
	}
	Pyprofd__Response *resp = pyprofd__response__unpack(NULL, len, buf);
	free(buf);
	cr_assert_not_null(resp, "the daemon sent a frame that is not a Response");
	return resp;
}

bool connection_closed(int fd, double timeout_s)
{
	double deadline = mono_now() + timeout_s;
	char buf[4096];
	for (;;) {
		if (!readable_before(fd, deadline))
			return false;
		ssize_t got = recv(fd, buf, sizeof buf, 0);
		if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
			return true;
		/* Responses still in flight (an error reply) are read past. */
	}
}

bool daemon_serves(const struct daemon *d)
{
	int fd = daemon_connect(d);
	if (fd < 0)
		return false;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__StatusRequest status = PYPROFD__STATUS_REQUEST__INIT;
	req.id = 7;
	req.body_case = PYPROFD__REQUEST__BODY_STATUS;
	req.status = &status;
	bool ok = send_request(fd, &req);
	Pyprofd__Response *resp = ok ? recv_response(fd, 10.0) : NULL;
	ok = resp && resp->id == 7 && resp->result_case == PYPROFD__RESPONSE__RESULT_STATUS;
	if (resp)
		pyprofd__response__free_unpacked(resp, NULL);
	close(fd);
	return ok;
}

json_t *wait_target(const struct daemon *d, pid_t pid, bool (*pred)(json_t *entry), double timeout_s)
{
	double deadline = mono_now() + timeout_s;
	for (;;) {
		static const char *const list[] = {"list", NULL};
		json_t *all = ctl_json(d, list);
		size_t i;
		json_t *entry;
		json_array_foreach(all, i, entry) {
			if (json_integer_value(json_object_get(entry, "pid")) == pid && pred(entry)) {
				json_incref(entry);
				json_decref(all);
				return entry;
			}
		}
		json_decref(all);
		if (mono_now() > deadline)
			return NULL;
		pause_ms(50);
	}
}

json_int_t jint(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	cr_assert(json_is_integer(v), "no integer \"%s\" in %s", key, json_dumps(obj, JSON_COMPACT));
	return json_integer_value(v);
}

const char *pid_text(pid_t pid, char *buf, size_t len)
{
	snprintf(buf, len, "%d", (int)pid);
	return buf;
}

void ctl_ok(const struct daemon *d, const char *const args[])
{
	struct run_result r;
	ctl_run(d, &r, args, NULL);
	char why[512];
	cr_assert(r.exited && r.code == 0, "pyprofd-ctl %s: %s", args[0], run_describe(&r, why, sizeof why));
	run_result_free(&r);
}

/* ---- the user nobody ---- */

/* A program that idles in a function of its own, for nobody to run. */
const char idle_program[] =
	"import time\ndef idle():\n    while True:\n        time.sleep(0.01)\nidle()\n";

/* nobody attaches to its own process pid, retrying while its interpreter starts. */
void attach_as_nobody(const struct daemon *d, pid_t pid, const char *context)
{
	char p[16];
	const char *attach_own[] = {"attach", pid_text(pid, p, sizeof p), "--rate", "100", NULL};
	attach_as_nobody_argv(d, attach_own, context);
}

/* An attach that must succeed once the target's interpreter has started (10 s at most). */
static void ctl_attach_started(const struct daemon *d, const char *const attach[], const struct run_opts *opts,
                               const char *context)
{
	char why[512];
	struct run_result r;
	for (int i = 0; i < 100; i++) {
		ctl_run(d, &r, attach, opts);
		if (r.exited && r.code == 0)
			break;
		/* Until the interpreter has started, it is not yet a Python process. */
		run_result_free(&r);
		pause_ms(100);
	}
	cr_assert(r.exited && r.code == 0, "%s: %s", context, run_describe(&r, why, sizeof why));
	run_result_free(&r);
}

void attach_as_nobody_argv(const struct daemon *d, const char *const attach[], const char *context)
{
	struct run_opts nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID};
	ctl_attach_started(d, attach, &nobody, context);
}

/*
 * An interpreter the unprivileged user may run, or NULL.  Asked a few
 * times: another test's targets of that user (thousands of threads, a
 * hostile one) may leave it no room to start a process for a moment.
 */
const struct python *python_for_nobody(const struct python *pys, size_t n)
{
	char why[512] = "";
	for (int round = 0; round < 5; round++) {
		if (round)
			pause_ms(500);
		for (size_t i = 0; i < n; i++) {
			/* Only root may enter a root. */
			if (pys[i].root_len)
				continue;
			struct run_result r;
			const char *argv[] = {AS_NOBODY, pys[i].path, "-I", "-c", "pass", NULL};
			run_command(&r, argv, NULL);
			bool ok = r.exited && r.code == 0;
			if (!ok)
				run_describe(&r, why, sizeof why);
			run_result_free(&r);
			if (ok)
				return &pys[i];
		}
	}
	fprintf(stderr, "no interpreter ran as nobody; the last said: %s\n", why);
	return NULL;
}

/* Yama may forbid reading a process that is not one's child; then only root can profile. */
bool yama_restricts_ptrace(void)
{
	FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
	int scope = 0;
	if (f) {
		if (fscanf(f, "%d", &scope) != 1)
			scope = 0;
		fclose(f);
	}
	return scope > 0;
}

const struct python *nobody_daemon_setup(struct python pys[PYTHONS_MAX])
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it runs the daemon as nobody)");
	if (yama_restricts_ptrace())
		cr_skip_test("Yama ptrace_scope > 0: a user's daemon may read only its own children");
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	return py;
}

void nobody_daemon_start(struct daemon *d, const char *dir, const char *const extra[])
{
	memset(d, 0, sizeof *d);
	snprintf(d->dir, sizeof d->dir, "%s", dir);
	cr_assert(chown(d->dir, NOBODY_UID, NOBODY_GID) == 0 && chmod(d->dir, 0755) == 0);
	snprintf(d->state, sizeof d->state, "%s/state", dir);
	snprintf(d->sock, sizeof d->sock, "%s/state/pyprofd.sock", dir);
	snprintf(d->log, sizeof d->log, "%s/daemon.log", dir);
	char bin[PATH_MAX];
	char *argv[32] = {AS_NOBODY, (char *)bin_for_others(pyprofd_bin(), bin, sizeof bin),
	                  "--state-dir", d->state};
	size_t n = 7;
	for (size_t i = 0; extra && extra[i] && n < 31; i++)
		argv[n++] = (char *)extra[i];
	argv[n] = NULL;
	d->pid = spawn_process(argv, d->log);
	cr_assert(daemon_wait_listening(d), "the daemon run by nobody does not listen on %s", d->sock);
}

/* ---- what the daemon suites share ---- */

const char *jstr(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	cr_assert(json_is_string(v), "no string \"%s\" in %s", key, json_dumps(obj, JSON_COMPACT));
	return json_string_value(v);
}

/* `pyprofd-ctl ARGS` must fail with `code` and one stderr line. */
void ctl_expect_failure(const struct daemon *d, const char *const args[], int code,
                        const struct run_opts *opts, const char *context)
{
	struct run_result r;
	ctl_run(d, &r, args, opts);
	char why[512];
	cr_assert(r.exited && r.code == code, "%s: pyprofd-ctl %s: expected exit %d, got %s", context,
	          args[0], code, run_describe(&r, why, sizeof why));
	cr_assert(r.err_len > 0 && strchr(r.err, '\n') == r.err + r.err_len - 1,
	          "%s: expected one error line, got: %s", context, r.err);
	run_result_free(&r);
}

/* `pyprofd-ctl attach PID --rate RATE`, which must succeed. */
void ctl_attach_at(const struct daemon *d, pid_t pid, const char *rate)
{
	char p[16];
	const char *args[] = {"attach", pid_text(pid, p, sizeof p), "--rate", rate, NULL};
	/* A target just started may not have its runtime yet: on a busy host, for a while. */
	ctl_attach_started(d, args, NULL, "pyprofd-ctl attach");
}

/* `pyprofd-ctl stats PID --json`. */
json_t *ctl_stats_of(const struct daemon *d, pid_t pid)
{
	char p[16];
	const char *args[] = {"stats", pid_text(pid, p, sizeof p), NULL};
	return ctl_json(d, args);
}

/* The list entry of pid once pred holds (within 30 s), or the test fails. */
json_t *entry_when(const struct daemon *d, pid_t pid, bool (*pred)(json_t *), const char *what)
{
	json_t *e = wait_target(d, pid, pred, 30.0);
	if (!e) {
		char *log = daemon_log(d);
		cr_assert_fail("pid %d never became %s; daemon log:\n%s", (int)pid, what, log);
	}
	return e;
}

/* Predicates of wait_target and entry_when. */
bool sampled_a_while(json_t *e)
{
	return strcmp(json_string_value(json_object_get(e, "state")), "sampling") == 0 &&
	       json_integer_value(json_object_get(e, "samples")) >= 30;
}

bool is_exited(json_t *e)
{
	return strcmp(json_string_value(json_object_get(e, "state")), "exited") == 0;
}

/* The samples a query returns, summed from its JSON export. */
json_int_t query_total(const struct daemon *d, const char *const args[],
                              const struct run_opts *opts)
{
	const char *argv[16] = {"query", "--format", "json"};
	size_t n = 3;
	for (size_t i = 0; args[i]; i++) {
		cr_assert(n < sizeof argv / sizeof *argv - 1, "too many query arguments");
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	struct run_result r;
	ctl_run(d, &r, argv, opts);
	char why[512];
	cr_assert(r.exited && r.code == 0, "pyprofd-ctl query: %s", run_describe(&r, why, sizeof why));
	json_t *j = json_loads(r.out, 0, NULL);
	cr_assert_not_null(j, "query --format json printed no JSON: %s", r.out);
	json_int_t total = 0;
	size_t i;
	json_t *s;
	json_array_foreach(json_object_get(j, "stacks"), i, s)
		total += jint(s, "count");
	json_decref(j);
	run_result_free(&r);
	return total;
}
