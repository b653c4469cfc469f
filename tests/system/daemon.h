/*
 * The real daemon under test: started in a scratch directory of its own,
 * driven with the real pyprofd-ctl or with raw frames on its socket.
 */
#ifndef PYPROFD_TESTS_DAEMON_H
#define PYPROFD_TESTS_DAEMON_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "helpers.h"
#include "pyprofd.pb-c.h"

struct daemon {
	pid_t pid;
	char dir[PATH_MAX - 64];
	char state[PATH_MAX];
	char sock[PATH_MAX]; /* in a directory others may reach: the permission tests need it */
	char log[PATH_MAX];
};

/* Start `pyprofd --state-dir DIR/state --socket DIR/run/pyprofd.sock EXTRA...`; returns once it listens. */
void daemon_start(struct daemon *d, const char *const extra[]);

/* Wait for d->pid to listen on d->sock; false after the start timeout (fails if it exits). */
bool daemon_wait_listening(struct daemon *d);

/* SIGTERM; the daemon must exit 0 within a few seconds. */
void daemon_stop(struct daemon *d);

/* True while the daemon process lives. */
bool daemon_alive(struct daemon *d);

/* The daemon's log so far (malloc'd, NUL-terminated). */
char *daemon_log(const struct daemon *d);

/* $PYPROFD_CTL; fails the test if unset. */
const char *ctl_bin(void);

/* `pyprofd-ctl --socket SOCK ARGS...` (args NULL-terminated). */
void ctl_run(const struct daemon *d, struct run_result *r, const char *const args[],
             const struct run_opts *opts);

/* The same with --json; the command must succeed and print JSON, returned parsed. */
json_t *ctl_json(const struct daemon *d, const char *const args[]);
/* The samples `query ARGS... --format json` returns (as opts says), summed; ARGS end with NULL. */
json_int_t query_total(const struct daemon *d, const char *const args[], const struct run_opts *opts);

/* A raw connection to the daemon's socket. */
int daemon_connect(const struct daemon *d);

/* Write all of buf; false if the daemon closed the connection. */
bool send_all(int fd, const void *buf, size_t len);

/* Send one request (version filled in when 0) framed. */
bool send_request(int fd, Pyprofd__Request *req);

/* The frame send_request sends (malloc'd, *len bytes), for a test to alter before sending. */
unsigned char *request_frame(Pyprofd__Request *req, size_t *len);

/*
 * Read one framed response within timeout_s: NULL if the connection closed
 * (or timed out) first.  Free with pyprofd__response__free_unpacked.
 */
Pyprofd__Response *recv_response(int fd, double timeout_s);

/* Whether the peer closed the connection within timeout_s (EOF or reset). */
bool connection_closed(int fd, double timeout_s);

/* A status request on a fresh connection answers: the daemon still serves. */
bool daemon_serves(const struct daemon *d);

/* Poll the target's list entry until pred holds or timeout; the entry (owned) or NULL. */
json_t *wait_target(const struct daemon *d, pid_t pid, bool (*pred)(json_t *entry), double timeout_s);

/* Small things every daemon test needs. */
void pause_ms(long ms);
/* CLOCK_MONOTONIC in seconds. */
double mono_now(void);
/* The integer at key; fails the test when there is none. */
json_int_t jint(json_t *obj, const char *key);
const char *pid_text(pid_t pid, char *buf, size_t len);
/* `pyprofd-ctl ARGS` must succeed. */
void ctl_ok(const struct daemon *d, const char *const args[]);

/* ---- the user nobody ---- */

/* The start of an argv that runs the rest as the user nobody. */
#define AS_NOBODY "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"

/* A program that idles in a function of its own, for nobody to run. */
extern const char idle_program[];

/* nobody attaches to its own process pid, retrying while its interpreter starts. */
void attach_as_nobody(const struct daemon *d, pid_t pid, const char *context);
/* The same with an attach of its own ({"attach", PID, options..., NULL}). */
void attach_as_nobody_argv(const struct daemon *d, const char *const attach[], const char *context);

/* An interpreter the unprivileged user may run, or NULL. */
const struct python *python_for_nobody(const struct python *pys, size_t n);

/* Yama may forbid reading a process that is not one's child; then only root can profile. */
bool yama_restricts_ptrace(void);

/*
 * For a test of the daemon run by nobody: fails unless root, skips when
 * Yama forbids it, and returns an interpreter nobody may run (of pys).
 */
const struct python *nobody_daemon_setup(struct python pys[PYTHONS_MAX]);

/*
 * Start `pyprofd --state-dir DIR/state EXTRA...` as nobody (root ignores file
 * modes, nobody does not), socket in the state directory; returns once it listens.
 */
void nobody_daemon_start(struct daemon *d, const char *dir, const char *const extra[]);

/* A string member of a JSON object, which must be there. */
const char *jstr(json_t *obj, const char *key);
/* `pyprofd-ctl ARGS` must fail with `code` and one stderr line. */
void ctl_expect_failure(const struct daemon *d, const char *const args[], int code,
                        const struct run_opts *opts, const char *context);
/* `pyprofd-ctl attach PID --rate RATE`, which must succeed. */
void ctl_attach_at(const struct daemon *d, pid_t pid, const char *rate);
/* `pyprofd-ctl stats PID --json`. */
json_t *ctl_stats_of(const struct daemon *d, pid_t pid);
/* The list entry of pid once pred holds (within 30 s), or the test fails. */
json_t *entry_when(const struct daemon *d, pid_t pid, bool (*pred)(json_t *), const char *what);
/* Predicates of wait_target and entry_when. */
bool sampled_a_while(json_t *e);
bool is_exited(json_t *e);

#endif
