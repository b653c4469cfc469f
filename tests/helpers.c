#include "helpers.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TARGET_ARGV_MAX 16
#define LOG_TAIL 3000

const char *scratch_root(void)
{
	const char *tmp = getenv("TMPDIR");
	return tmp && *tmp ? tmp : "/tmp";
}

/*
 * The scratch area is named after the test's own process, so the fixture and
 * the test body agree on it without sharing any variable.
 */
static void scratch_base(char *out, size_t len)
{
	snprintf(out, len, "%s/pyprofd-tests.%d", scratch_root(), (int)getpid());
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static void remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Kills every direct child once; returns how many there were. */
static int kill_children(void)
{
	DIR *proc = opendir("/proc");
	if (!proc)
		return 0;
	int found = 0;
	pid_t self = getpid();
	struct dirent *de;
	while ((de = readdir(proc))) {
		char path[300], buf[512];
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = '\0';
		/* The command name may hold anything, ')' included: parse after the last one. */
		char *rp = strrchr(buf, ')');
		char state;
		int ppid;
		if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == self) {
			kill((pid_t)atoi(de->d_name), SIGKILL);
			found++;
		}
	}
	closedir(proc);
	return found;
}

/*
 * A test process killed from outside (the runner interrupted, say) never ran
 * its fini; its targets died with it but its scratch area stayed.
 */
static void sweep_stale_scratch(void)
{
	DIR *d = opendir(scratch_root());
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		int pid;
		char path[PATH_MAX], tail;
		struct stat st;
		if (sscanf(de->d_name, "pyprofd-tests.%d%c", &pid, &tail) != 1 || pid <= 0)
			continue;
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof path, "%s/%s", scratch_root(), de->d_name);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
			remove_tree(path);
	}
	closedir(d);
}

void helpers_init(void)
{
	sweep_stale_scratch();
	/*
	 * Targets fork helpers of their own; as subreaper this process inherits
	 * them when a target dies, so helpers_fini can reap them too.
	 */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	char base[PATH_MAX];
	scratch_base(base, sizeof base);
	remove_tree(base); /* left by an earlier process with this pid */
	cr_assert(mkdir(base, 0755) == 0, "mkdir %s: %s", base, strerror(errno));
	/* mkdir obeys the umask; the permission test needs others to traverse. */
	chmod(base, 0755);
}

void helpers_fini(void)
{
	double deadline = now_s() + 10.0;
	for (;;) {
		int killed = kill_children();
		int status;
		pid_t r;
		while ((r = waitpid(-1, &status, WNOHANG)) > 0)
			;
		if ((r < 0 && errno == ECHILD) || now_s() > deadline)
			break;
		if (!killed && r == 0)
			sleep_ms(5); /* a child between fork and its entry in /proc */
		else
			sleep_ms(1);
	}
	char base[PATH_MAX];
	scratch_base(base, sizeof base);
	remove_tree(base);
}

void scratch_dir(char *out, size_t len)
{
	char base[PATH_MAX];
	struct stat st;
	scratch_base(base, sizeof base);
	cr_assert(stat(base, &st) == 0, "no scratch area %s: the test needs the helpers fixture",
	          base);
	int n = snprintf(out, len, "%s/XXXXXX", base);
	cr_assert(n > 0 && (size_t)n < len, "scratch path too long");
	cr_assert(mkdtemp(out) != NULL, "mkdtemp %s: %s", out, strerror(errno));
}

const char *pyprofd_bin(void)
{
	const char *bin = getenv("PYPROFD_BIN");
	cr_assert(bin && *bin, "PYPROFD_BIN is not set: run the suite with `make test`");
	return bin;
}

void target_script(const char *name, char *out, size_t len)
{
	const char *dir = getenv("PYPROFD_TESTS_DIR");
	cr_assert(dir && *dir, "PYPROFD_TESTS_DIR is not set: run the suite with `make test`");
	int n = snprintf(out, len, "%s/targets/%s", dir, name);
	cr_assert(n > 0 && (size_t)n < len, "target path too long");
	cr_assert(access(out, R_OK) == 0, "cannot read %s: %s", out, strerror(errno));
}

/* In a forked child: report errno through the pipe and die. */
_Noreturn static void child_fail(int fd)
{
	int e = errno;
	ssize_t w = write(fd, &e, sizeof e);
	(void)w;
	_exit(127);
}

/* In a forked child: die with the parent, which must still be `parent`. */
static void child_tie_to_parent(pid_t parent, int fd)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		child_fail(fd);
	if (getppid() != parent)
		_exit(127);
}

/* Parent side of the exec handshake: 0 once the child has exec'd, else its errno. */
static int wait_exec(int fd)
{
	int e = 0;
	ssize_t n;
	do
		n = read(fd, &e, sizeof e);
	while (n < 0 && errno == EINTR);
	close(fd);
	return n == (ssize_t)sizeof e ? e : 0;
}

/*
 * In the child of spawn: put a contained interpreter into a pid namespace of
 * its own.  The interpreter is a second child made with CLONE_PARENT, so it
 * is the test's own child (waited for, killed by the fixture) and its pid as
 * the test sees it is the host's; this first child writes that pid to fd and
 * leaves.  Returns in the interpreter's process.
 */
static void spawn_contain(int sync_fd, int pid_fd)
{
	if (unshare(CLONE_NEWPID) != 0)
		child_fail(sync_fd);
	/* Like fork, but a sibling: nothing of glibc's runs in it but system calls before exec. */
	pid_t inner = (pid_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
	if (inner < 0)
		child_fail(sync_fd);
	if (inner > 0) {
		ssize_t w = write(pid_fd, &inner, sizeof inner);
		_exit(w == (ssize_t)sizeof inner ? 0 : 127);
	}
	/* Its parent is outside its namespace (getppid() is 0): nothing to compare against. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		child_fail(sync_fd);
}

/* spawn_process, and spawn_python when py is set. */
static pid_t spawn(char *const argv[], const char *log_path, const struct python *py)
{
	int sync[2], pids[2] = {-1, -1};
	bool contained = py && py->root_len && py->contained;
	cr_assert(pipe2(sync, O_CLOEXEC) == 0 && (!contained || pipe2(pids, O_CLOEXEC) == 0),
	          "pipe: %s", strerror(errno));
	pid_t parent = getpid();
	pid_t pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(sync[0]);
		child_tie_to_parent(parent, sync[1]);
		int in = open("/dev/null", O_RDONLY);
		int out = log_path ? open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644)
		                   : open("/dev/null", O_WRONLY);
		if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
			child_fail(sync[1]);
		if (contained)
			spawn_contain(sync[1], pids[1]);
		if (py && python_enter_root(py) != 0)
			child_fail(sync[1]);
		execvp(argv[0], argv);
		child_fail(sync[1]);
	}
	close(sync[1]);
	if (contained) {
		close(pids[1]);
		pid_t inner = -1;
		ssize_t n;
		do
			n = read(pids[0], &inner, sizeof inner);
		while (n < 0 && errno == EINTR);
		close(pids[0]);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		if (n == (ssize_t)sizeof inner)
			pid = inner;
	}
	int e = wait_exec(sync[0]);
	if (e) {
		waitpid(pid, NULL, 0);
		cr_assert_fail("cannot start %s: %s", argv[0], strerror(e));
	}
	return pid;
}

pid_t spawn_process(char *const argv[], const char *log_path)
{
	return spawn(argv, log_path, NULL);
}

pid_t spawn_python(const struct python *py, const char *const args[], const char *log_path)
{
	char *argv[TARGET_ARGV_MAX + 2];
	size_t n = 0;
	argv[n++] = (char *)python_exec_path(py);
	for (; args[n - 1]; n++) {
		cr_assert(n <= TARGET_ARGV_MAX, "too many arguments");
		argv[n] = (char *)args[n - 1];
	}
	argv[n] = NULL;
	return spawn(argv, log_path, py);
}

static void target_paths(struct test_target *t)
{
	memset(t, 0, sizeof *t);
	scratch_dir(t->dir, sizeof t->dir);
	snprintf(t->report, sizeof t->report, "%s/report.json", t->dir);
	snprintf(t->log, sizeof t->log, "%s/target.log", t->dir);
}

/* argv with "{report}" replaced by the target's report path. */
static void target_argv(const struct test_target *t, const char *const argv[],
                        const char *out[TARGET_ARGV_MAX + 1])
{
	size_t n = 0;
	for (; argv[n]; n++) {
		cr_assert(n < TARGET_ARGV_MAX, "too many target arguments");
		out[n] = strcmp(argv[n], "{report}") == 0 ? t->report : argv[n];
	}
	out[n] = NULL;
}

void test_target_start(struct test_target *t, const struct python *py, const char *scenario)
{
	char script[PATH_MAX];
	target_script("stacks.py", script, sizeof script);
	/* -I: no PYTHON* variables or user site of the developer leak in. */
	const char *args[] = {"-I", script, scenario, "{report}", NULL};
	test_target_start_python(t, py, args);
}

json_t *test_target_start_script(struct test_target *t, const struct python *py, const char *name)
{
	char script[PATH_MAX];
	target_script(name, script, sizeof script);
	const char *args[] = {"-I", script, "{report}", NULL};
	test_target_start_python(t, py, args);
	return test_target_wait_report(t, TARGET_READY_TIMEOUT_S);
}

void test_target_start_python(struct test_target *t, const struct python *py,
                              const char *const args[])
{
	const char *copy[TARGET_ARGV_MAX + 1];
	target_paths(t);
	target_argv(t, args, copy);
	t->pid = spawn_python(py, copy, t->log);
}

void test_target_start_argv(struct test_target *t, const char *const argv[])
{
	const char *copy[TARGET_ARGV_MAX + 1];
	target_paths(t);
	target_argv(t, argv, copy);
	t->pid = spawn_process((char *const *)copy, t->log);
}

/* The end of the target's output: why it never became ready is usually there. */
static void log_tail(const char *path, char *out, size_t len)
{
	out[0] = '\0';
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	if (fseek(f, 0, SEEK_END) == 0) {
		long size = ftell(f);
		if (size > (long)len - 1)
			fseek(f, size - (long)len + 1, SEEK_SET);
		else
			fseek(f, 0, SEEK_SET);
	}
	size_t n = fread(out, 1, len - 1, f);
	out[n] = '\0';
	fclose(f);
}

static const char *describe_wait_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "wait status %#x", status);
	return buf;
}

json_t *test_target_wait_report(struct test_target *t, double timeout_s)
{
	double deadline = now_s() + timeout_s;
	char tail[LOG_TAIL], how[64];
	for (;;) {
		if (access(t->report, F_OK) == 0) {
			json_error_t jerr;
			json_t *report = json_load_file(t->report, 0, &jerr);
			cr_assert(report && json_is_object(report), "target report %s unreadable: %s",
			          t->report, jerr.text);
			return report;
		}
		int status;
		if (!t->reaped && waitpid(t->pid, &status, WNOHANG) == t->pid) {
			t->reaped = true;
			log_tail(t->log, tail, sizeof tail);
			cr_assert_fail("target %d %s before reporting; its output:\n%s", (int)t->pid,
			               describe_wait_status(status, how, sizeof how), tail);
		}
		if (now_s() > deadline) {
			log_tail(t->log, tail, sizeof tail);
			cr_assert_fail("target %d not ready after %.0f s; its output:\n%s", (int)t->pid,
			               timeout_s, tail);
		}
		sleep_ms(20);
	}
}

bool test_target_exited(struct test_target *t)
{
	if (!t->reaped && waitpid(t->pid, NULL, WNOHANG) == t->pid)
		t->reaped = true;
	return t->reaped;
}

void test_target_kill(struct test_target *t)
{
	if (t->reaped || t->pid <= 0)
		return;
	kill(t->pid, SIGKILL);
	while (waitpid(t->pid, NULL, 0) < 0 && errno == EINTR)
		;
	t->reaped = true;
}

struct buffer {
	char *data;
	size_t len, cap;
};

/* Reads what is there; false at end of file. */
static bool buffer_read(struct buffer *b, int fd)
{
	if (b->cap - b->len < 4096) {
		b->cap = b->cap ? b->cap * 2 : 8192;
		b->data = realloc(b->data, b->cap);
		cr_assert(b->data, "out of memory");
	}
	ssize_t n = read(fd, b->data + b->len, b->cap - b->len - 1);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	b->len += (size_t)n;
	return true;
}

static char *buffer_finish(struct buffer *b, size_t *len)
{
	if (!b->data) {
		b->data = malloc(1);
		cr_assert(b->data, "out of memory");
	}
	b->data[b->len] = '\0';
	*len = b->len;
	return b->data;
}

void run_command(struct run_result *r, const char *const argv[], const struct run_opts *opts)
{
	static const struct run_opts defaults = {0};
	if (!opts)
		opts = &defaults;
	double timeout = opts->timeout_s > 0 ? opts->timeout_s : DUMP_TIMEOUT_S;
	int out[2], err[2], sync[2];
	cr_assert(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0 &&
	                  pipe2(sync, O_CLOEXEC) == 0,
	          "pipe: %s", strerror(errno));
	pid_t parent = getpid();
	pid_t pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		if (in < 0 || dup2(in, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)
			child_fail(sync[1]);
		if (opts->drop_privileges &&
		    (setgroups(0, NULL) != 0 || setgid(opts->gid) != 0 || setuid(opts->uid) != 0))
			child_fail(sync[1]);
		/* After setuid: changing credentials clears the parent-death signal. */
		child_tie_to_parent(parent, sync[1]);
		execvp(argv[0], (char *const *)argv);
		child_fail(sync[1]);
	}
	close(out[1]);
	close(err[1]);
	close(sync[1]);
	int e = wait_exec(sync[0]);
	if (e) {
		close(out[0]);
		close(err[0]);
		waitpid(pid, NULL, 0);
		cr_assert_fail("cannot run %s: %s", argv[0], strerror(e));
	}

	memset(r, 0, sizeof *r);
	struct buffer bo = {0}, be = {0};
	struct pollfd fds[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
	double deadline = now_s() + timeout;
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		double left = deadline - now_s();
		if (left <= 0 && !r->timed_out) {
			r->timed_out = true;
			kill(pid, SIGKILL);
		}
		int ms = r->timed_out ? 1000 : (int)(left * 1000) + 1;
		int n = poll(fds, 2, ms);
		if (n < 0 && errno != EINTR)
			break;
		for (int i = 0; i < 2 && n > 0; i++) {
			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			if (!buffer_read(i == 0 ? &bo : &be, fds[i].fd)) {
				close(fds[i].fd);
				fds[i].fd = -1;
			}
		}
		if (n == 0 && r->timed_out)
			break; /* a grandchild holds the pipes; the child itself is dead */
	}
	for (int i = 0; i < 2; i++)
		if (fds[i].fd >= 0)
			close(fds[i].fd);
	int status;
	while (waitpid(pid, &status, 0) < 0) {
		cr_assert(errno == EINTR, "waitpid: %s", strerror(errno));
	}
	r->exited = WIFEXITED(status);
	r->code = r->exited ? WEXITSTATUS(status) : -1;
	r->signo = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	r->out = buffer_finish(&bo, &r->out_len);
	r->err = buffer_finish(&be, &r->err_len);
}

void run_dump(struct run_result *r, pid_t pid, const char *const flags[],
              const struct run_opts *opts)
{
	const char *argv[16];
	char pidstr[24];
	size_t n = 0;
	snprintf(pidstr, sizeof pidstr, "%d", (int)pid);
	argv[n++] = opts && opts->bin ? opts->bin : pyprofd_bin();
	argv[n++] = "dump";
	argv[n++] = pidstr;
	for (size_t i = 0; flags && flags[i]; i++) {
		cr_assert(n < sizeof argv / sizeof argv[0] - 1, "too many dump flags");
		argv[n++] = flags[i];
	}
	argv[n] = NULL;
	run_command(r, argv, opts);
}

void run_result_free(struct run_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

const char *run_describe(const struct run_result *r, char *buf, size_t len)
{
	char how[64];
	if (r->timed_out)
		snprintf(how, sizeof how, "hung (killed after the timeout)");
	else if (r->exited)
		snprintf(how, sizeof how, "exit status %d", r->code);
	else
		snprintf(how, sizeof how, "killed by signal %d (%s)", r->signo, strsignal(r->signo));
	snprintf(buf, len, "%s; stderr: \"%.*s\"; stdout: %zu bytes \"%.*s\"", how,
	         (int)(r->err_len > 600 ? 600 : r->err_len), r->err ? r->err : "", r->out_len,
	         (int)(r->out_len > 200 ? 200 : r->out_len), r->out ? r->out : "");
	return buf;
}

json_t *dump_json(pid_t pid, const char *const flags[], const char *context)
{
	struct run_result r;
	char why[1024];
	run_dump(&r, pid, flags, NULL);
	cr_assert(r.exited && !r.timed_out && r.code == 0, "%s: dump failed: %s", context,
	          run_describe(&r, why, sizeof why));
	json_error_t jerr;
	json_t *doc = json_loadb(r.out, r.out_len, 0, &jerr);
	if (!doc || !json_is_object(doc)) {
		json_decref(doc);
		cr_assert_fail("%s: dump stdout is not a JSON object (%s at %d:%d): %.300s", context,
		               jerr.text, jerr.line, jerr.column, r.out);
	}
	run_result_free(&r);
	return doc;
}

/* The one-line, prefixed stderr every failure must have. */
static bool one_error_line(const struct run_result *r)
{
	static const char prefix[] = "pyprofd: ";
	if (r->err_len <= sizeof prefix - 1 || memcmp(r->err, prefix, sizeof prefix - 1) != 0)
		return false;
	const char *nl = memchr(r->err, '\n', r->err_len);
	return nl == r->err + r->err_len - 1 && !memchr(r->err, '\0', r->err_len);
}

int expect_clean_failure_among(const struct run_result *r, const int codes[], size_t n,
                               const char *context)
{
	char why[1024];
	run_describe(r, why, sizeof why);
	int match = -1;
	if (r->exited && !r->timed_out)
		for (size_t i = 0; i < n; i++)
			if (r->code == codes[i])
				match = (int)i;
	cr_expect(match >= 0, "%s: unexpected outcome: %s", context, why);
	bool clean = r->out_len == 0 && one_error_line(r);
	if (r->exited && r->code != 0)
		cr_expect(clean,
		          "%s: a failure must print nothing on stdout and exactly one stderr line "
		          "starting \"pyprofd: \"; got %s",
		          context, why);
	return clean ? match : -1;
}

bool expect_clean_failure(const struct run_result *r, int code, const char *context)
{
	return expect_clean_failure_among(r, &code, 1, context) == 0;
}

ssize_t target_mem_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = {.iov_base = buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	return process_vm_readv(pid, &local, 1, &remote, 1, 0);
}

ssize_t target_mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec local = {.iov_base = (void *)buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	return process_vm_writev(pid, &local, 1, &remote, 1, 0);
}

void write_text_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert(fputs(text, f) >= 0 && fclose(f) == 0, "%s: %s", path, strerror(errno));
}

/* The whole file, malloc'd, into *len; fails the test if it cannot be read. */
char *file_bytes(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	cr_assert(!ferror(f), "read %s", path);
	fclose(f);
	buf[n] = '\0'; /* the last read returned nothing, so n < cap */
	*len = n;
	return buf;
}

void copy_executable(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	cr_assert(in >= 0, "open %s: %s", from, strerror(errno));
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	cr_assert(out >= 0, "create %s: %s", to, strerror(errno));
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof buf)) > 0) {
		for (ssize_t done = 0; done < n;) {
			ssize_t w = write(out, buf + done, (size_t)(n - done));
			cr_assert(w > 0, "write %s: %s", to, strerror(errno));
			done += w;
		}
	}
	cr_assert(n == 0, "read %s: %s", from, strerror(errno));
	cr_assert(fchmod(out, 0755) == 0, "chmod %s: %s", to, strerror(errno));
	close(in);
	cr_assert(close(out) == 0, "close %s: %s", to, strerror(errno));
}

/* Whether others may search every directory down to path and run path itself. */
static bool helpers_open_to_others(const char *path)
{
	char real[PATH_MAX];
	if (!realpath(path, real))
		return false;
	struct stat st;
	if (stat(real, &st) != 0 || !(st.st_mode & S_IXOTH))
		return false;
	for (char *slash = strrchr(real, '/'); slash && slash > real; slash = strrchr(real, '/')) {
		*slash = '\0';
		if (stat(real, &st) != 0 || !(st.st_mode & S_IXOTH))
			return false;
	}
	return true;
}

const char *bin_for_others(const char *bin, char *copy, size_t len)
{
	if (helpers_open_to_others(bin))
		return bin;
	char dir[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	cr_assert(chmod(dir, 0755) == 0, "chmod %s: %s", dir, strerror(errno));
	const char *name = strrchr(bin, '/');
	int n = snprintf(copy, len, "%s/%s", dir, name ? name + 1 : bin);
	cr_assert(n > 0 && (size_t)n < len, "path too long");
	copy_executable(bin, copy);
	return copy;
}

int test_favour_over_the_host(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	for (struct dirent *e; d && (e = readdir(d));)
		if (e->d_name[0] != '.')
			setpriority(PRIO_PROCESS, (id_t)atoi(e->d_name), -20);
	if (d)
		closedir(d);
	errno = 0;
	int mine = getpriority(PRIO_PROCESS, 0);
	if (errno != 0)
		mine = 0;
	setpriority(PRIO_PROCESS, 0, -20);
	return mine;
}
