/*
 * What the daemon holds over a target's life, and what it says about it:
 * out of descriptors a live process is not taken for gone.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(lifecycle, .init = helpers_init, .fini = helpers_fini);

/* ---- requests on a connection of the test's own ---- */

/* One request and its answer; the test fails if none comes. */
static Pyprofd__Response *ask(int fd, Pyprofd__Request *req, const char *what)
{
	static uint64_t next_id = 1;
	req->id = next_id++;
	cr_assert(send_request(fd, req), "cannot send %s", what);
	Pyprofd__Response *r = recv_response(fd, 30.0);
	cr_assert(r && r->id == req->id, "no answer to %s", what);
	return r;
}

static Pyprofd__Response *ask_attach(int fd, pid_t pid, unsigned rate_hz)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__AttachRequest attach = PYPROFD__ATTACH_REQUEST__INIT;
	attach.pid = pid;
	attach.rate_hz = rate_hz;
	req.body_case = PYPROFD__REQUEST__BODY_ATTACH;
	req.attach = &attach;
	return ask(fd, &req, "attach");
}

static Pyprofd__Response *ask_dump(int fd, pid_t pid)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__DumpRequest dump = PYPROFD__DUMP_REQUEST__INIT;
	dump.pid = pid;
	req.body_case = PYPROFD__REQUEST__BODY_DUMP;
	req.dump = &dump;
	return ask(fd, &req, "dump");
}

static Pyprofd__Response *ask_list(int fd)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__ListRequest list = PYPROFD__LIST_REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_LIST;
	req.list = &list;
	Pyprofd__Response *r = ask(fd, &req, "list");
	cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_LIST, "list failed: %s",
	             r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "?");
	return r;
}

static const char *error_of(const Pyprofd__Response *r)
{
	return r->result_case == PYPROFD__RESPONSE__RESULT_ERROR && r->error->message ? r->error->message
	                                                                               : "(no error)";
}

/* The list entry of pid in a list answer, or NULL. */
static const Pyprofd__Target *listed(const Pyprofd__Response *list, pid_t pid)
{
	for (size_t i = 0; i < list->list->n_targets; i++)
		if (list->list->targets[i]->pid == pid)
			return list->list->targets[i];
	return NULL;
}

/*
 * Whether each of pids (n) is sampling and gets past samples[i] within 30
 * s; samples[] takes the counts seen.  The first that does not, or 0.
 */
static pid_t sampling_on(int fd, const pid_t *pids, uint64_t *samples, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t seen = 0;
		for (int tries = 0; tries < 120 && seen <= samples[i]; tries++) {
			if (tries)
				pause_ms(250);
			Pyprofd__Response *list = ask_list(fd);
			const Pyprofd__Target *t = listed(list, pids[i]);
			seen = t && strcmp(t->state, "sampling") == 0 ? t->samples : 0;
			pyprofd__response__free_unpacked(list, NULL);
		}
		if (seen <= samples[i])
			return pids[i];
		samples[i] = seen;
	}
	return 0;
}

/* ---- out of descriptors ---- */

/* The first of these the log says, waiting for one within 30 s; NULL if none. */
static const char *log_says_first(const struct daemon *d, const char *a, const char *b)
{
	for (int i = 0; i < 120; i++) {
		char *log = daemon_log(d);
		const char *said = strstr(log, a) ? a : strstr(log, b) ? b : NULL;
		free(log);
		if (said)
			return said;
		pause_ms(250);
	}
	return NULL;
}

/*
 * Out of descriptors, every look at /proc fails with EMFILE: the daemon
 * used to take that for the process being gone, so live targets were
 * declared exited for good and attach or dump of a live pid answered "no
 * such process".  Now a target that could not be looked at stays as it
 * was and keeps sampling (reading memory takes no descriptor); a request
 * that cannot look says why; and once descriptors are back everything
 * works.
 */
Test(lifecycle, out_of_descriptors_live_targets_stay, .timeout = 240)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target sampled[2], other;
	test_target_start(&sampled[0], &pys[0], "nested");
	test_target_start(&sampled[1], &pys[n - 1], "nested");
	test_target_start(&other, &pys[0], "nested");
	json_decref(test_target_wait_report(&sampled[0], TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&sampled[1], TARGET_READY_TIMEOUT_S));
	json_decref(test_target_wait_report(&other, TARGET_READY_TIMEOUT_S));

	struct daemon d;
	daemon_start(&d, NULL);
	for (int i = 0; i < 2; i++) {
		ctl_attach_at(&d, sampled[i].pid, "100");
		json_decref(entry_when(&d, sampled[i].pid, sampled_a_while, "sampled"));
	}
	/* Taken before the descriptors run out: no new connection is accepted then. */
	int fd = daemon_connect(&d);
	cr_assert(fd >= 0);
	pyprofd__response__free_unpacked(ask_list(fd), NULL);

	struct rlimit before, starved;
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, NULL, &before) == 0, "prlimit: %s", strerror(errno));
	starved = (struct rlimit){3, before.rlim_max}; /* stdin, stdout and stderr: no descriptor more */
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, &starved, NULL) == 0, "prlimit: %s", strerror(errno));

	/* Housekeeping looks at every target once a second: wait until it has looked and failed. */
	const char *said = log_says_first(&d, "cannot tell whether the process still runs", "the process exited");
	char *log = daemon_log(&d);
	cr_assert(said && strcmp(said, "the process exited") != 0,
	          "out of descriptors, a live target was %s:\n%s", said ? "declared exited" : "never looked at", log);
	free(log);

	pid_t pids[2] = {sampled[0].pid, sampled[1].pid};
	uint64_t samples[2] = {0, 0};
	pid_t stopped = sampling_on(fd, pids, samples, 2);
	cr_assert_eq(stopped, 0, "pid %d does not sample out of descriptors", (int)stopped);

	/* A live process the daemon cannot look at: not "no such process", but why. */
	Pyprofd__Response *attach = ask_attach(fd, other.pid, 100);
	cr_assert_eq(attach->result_case, PYPROFD__RESPONSE__RESULT_ERROR, "an attach worked with no descriptor");
	cr_assert_neq(attach->error->code, PYPROFD__ERROR_CODE__ERROR_NO_PROCESS,
	              "a live process was said not to exist: %s", error_of(attach));
	cr_assert(strstr(error_of(attach), "Too many open files"), "the attach's error does not say why: %s",
	          error_of(attach));
	pyprofd__response__free_unpacked(attach, NULL);
	Pyprofd__Response *dump = ask_dump(fd, other.pid);
	cr_assert_eq(dump->result_case, PYPROFD__RESPONSE__RESULT_ERROR);
	cr_assert_neq(dump->error->code, PYPROFD__ERROR_CODE__ERROR_NO_PROCESS,
	              "a live process was said not to exist: %s", error_of(dump));
	cr_assert(strstr(error_of(dump), "Too many open files"), "the dump's error does not say why: %s",
	          error_of(dump));
	pyprofd__response__free_unpacked(dump, NULL);

	/* Sampling went on meanwhile: reading memory takes no descriptor. */
	stopped = sampling_on(fd, pids, samples, 2);
	cr_assert_eq(stopped, 0, "pid %d stopped sampling out of descriptors", (int)stopped);

	/* Descriptors are back: the same requests work, the targets sample on. */
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, &before, NULL) == 0, "prlimit: %s", strerror(errno));
	attach = ask_attach(fd, other.pid, 100);
	cr_assert_eq(attach->result_case, PYPROFD__RESPONSE__RESULT_ATTACH, "attach after: %s", error_of(attach));
	pyprofd__response__free_unpacked(attach, NULL);
	dump = ask_dump(fd, sampled[0].pid);
	cr_assert_eq(dump->result_case, PYPROFD__RESPONSE__RESULT_DUMP, "dump after: %s", error_of(dump));
	pyprofd__response__free_unpacked(dump, NULL);
	stopped = sampling_on(fd, pids, samples, 2);
	cr_assert_eq(stopped, 0, "pid %d stopped sampling after descriptors came back", (int)stopped);
	close(fd);
	json_decref(entry_when(&d, other.pid, sampled_a_while, "sampled"));
	daemon_stop(&d);
}
