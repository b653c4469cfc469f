/*
 * Running real target processes and the real pyprofd binary from the tests.
 *
 * Every test that spawns anything uses helpers_init/helpers_fini as its
 * fixture: targets, their orphans and scratch directories are then gone after
 * the test however it ends, a failed assertion included.
 */
#ifndef PYPROFD_TESTS_HELPERS_H
#define PYPROFD_TESTS_HELPERS_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pythons.h"

/* Generous: a loaded 2-core machine may start interpreters slowly. */
/* The unprivileged user the permission tests run things as. */
#define NOBODY_UID 65534
#define NOBODY_GID 65534

#define TARGET_READY_TIMEOUT_S 45.0
/* Only catches a hung dump; no test asserts on how long a dump takes. */
#define DUMP_TIMEOUT_S 60.0

/* Fixture hooks: scratch area and subreaping before, kill everything after. */
void helpers_init(void);
void helpers_fini(void);

/* Where scratch areas go: $TMPDIR, else /tmp. */
const char *scratch_root(void);

/* A fresh private directory (mkdtemp) removed by helpers_fini. */
void scratch_dir(char *out, size_t len);

/* $PYPROFD_TESTS_DIR/targets/<name>; fails the test if the variable is unset. */
void target_script(const char *name, char *out, size_t len);

/* $PYPROFD_BIN; fails the test if unset. */
const char *pyprofd_bin(void);

/*
 * Starts argv[0] (looked up in PATH) with stdout and stderr appended to
 * log_path (or discarded when NULL) and returns once the exec has happened,
 * so the pid names the new program, not a copy of the test.
 */
pid_t spawn_process(char *const argv[], const char *log_path);

/*
 * The same for `py args...` (args NULL-terminated, after argv[0]): an
 * interpreter with a root runs chrooted into it (contained: in pid and mount
 * namespaces of its own, see struct python).  The pid is the interpreter's
 * as this process sees it, and a child of this process, in every case.
 */
pid_t spawn_python(const struct python *py, const char *const args[], const char *log_path);

/* A process started by target_start; files live in its own scratch dir. */
struct test_target {
	pid_t pid;
	bool reaped;
	char dir[PATH_MAX - 64]; /* room for the file names below */
	char report[PATH_MAX];
	char log[PATH_MAX];
};

/* `python -I stacks.py SCENARIO REPORT` in a new scratch dir. */
void test_target_start(struct test_target *t, const struct python *py, const char *scenario);

/*
 * `py -I tests/targets/NAME REPORT` in a new scratch dir, once it wrote its
 * first report: that report, parsed (the caller's to free).
 */
json_t *test_target_start_script(struct test_target *t, const struct python *py, const char *name);

/* `py args...`, in py's root when it has one; "{report}" in args is the report path. */
void test_target_start_python(struct test_target *t, const struct python *py,
                              const char *const args[]);

/* Any argv; "{report}" in an argument is replaced by the report path. */
void test_target_start_argv(struct test_target *t, const char *const argv[]);

/*
 * Waits for the target's report and returns it parsed.  Fails the test, with
 * the target's own output, if the target dies or the timeout passes first.
 */
json_t *test_target_wait_report(struct test_target *t, double timeout_s);

/* True once the target has exited (and it has been reaped). */
bool test_target_exited(struct test_target *t);

void test_target_kill(struct test_target *t);
/*
 * Put a target's threads (those it starts later inherit it from theirs)
 * and the calling thread before the host's other work (nice -20, as root),
 * for a test of what the sampler sees of threads that run beside it: on a
 * host busy with other work they rarely do.  The calling thread's old
 * priority, to give back with setpriority(PRIO_PROCESS, 0, old).
 */
int test_favour_over_the_host(pid_t pid);

/* What one command did. */
struct run_result {
	bool exited;    /* normal exit; else killed by a signal */
	int code;       /* exit status when exited */
	int signo;      /* terminating signal otherwise */
	bool timed_out; /* killed by the helper after the timeout */
	char *out;
	size_t out_len;
	char *err;
	size_t err_len;
};

struct run_opts {
	double timeout_s;  /* 0: DUMP_TIMEOUT_S */
	const char *bin;   /* pyprofd binary to run instead of $PYPROFD_BIN */
	bool drop_privileges;
	uid_t uid;
	gid_t gid;
};

/* Runs argv to completion (or the timeout), capturing stdout and stderr. */
void run_command(struct run_result *r, const char *const argv[], const struct run_opts *opts);

/* `pyprofd dump PID FLAGS...`; flags is NULL-terminated, opts may be NULL. */
void run_dump(struct run_result *r, pid_t pid, const char *const flags[],
              const struct run_opts *opts);

void run_result_free(struct run_result *r);

/* "exit 3" / "signal 11" / "timed out", then stderr, for failure messages. */
const char *run_describe(const struct run_result *r, char *buf, size_t len);

/* A dump that succeeded: exit 0 and a JSON object on stdout.  Fails the test otherwise. */
json_t *dump_json(pid_t pid, const char *const flags[], const char *context);

/*
 * Checks (non-fatally) the documented shape of every failure: exit status
 * `code`, nothing on stdout, exactly one stderr line starting "pyprofd: ".
 * Returns true when all hold.
 */
bool expect_clean_failure(const struct run_result *r, int code, const char *context);

/* Same shape, any status in `codes` (count n); returns the index matched or -1. */
int expect_clean_failure_among(const struct run_result *r, const int codes[], size_t n,
                               const char *context);

/* Reads/writes another process's memory; returns bytes moved or -1. */
ssize_t target_mem_read(pid_t pid, uint64_t addr, void *buf, size_t len);
ssize_t target_mem_write(pid_t pid, uint64_t addr, const void *buf, size_t len);

/* Writes text to path (created or truncated); fails the test on error. */
void write_text_file(const char *path, const char *text);

/* The whole file, malloc'd, into *len, with a NUL after it; fails the test if it cannot be read. */
char *file_bytes(const char *path, size_t *len);

/* Copies a file (mode 0755); fails the test on error. */
void copy_executable(const char *from, const char *to);
/*
 * bin when any user may reach and run it; else (a directory above it closed
 * to others, as a private home or a `mktemp -d` folder is) a copy of it in a
 * scratch directory open to all, named in copy.  For programs a test runs
 * as another user.
 */
const char *bin_for_others(const char *bin, char *copy, size_t len);

#endif
