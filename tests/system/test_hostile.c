/*
 * A local user against the daemon: the socket is open to every user, so
 * no one of them may take all its connections, stall it with half-sent
 * requests, grow it by not reading answers, hold every query thread, or
 * make it spin when descriptors run out.  Each test drives the real daemon
 * the way such a user would, with raw connections from a process of that
 * user, and checks what root (and other users) still get.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(hostile, .init = helpers_init, .fini = helpers_fini);

#define MiB (1024u * 1024u)
/* What the daemon may queue for one client: its high-water mark, one response past it, a query's parts. */
#define CLIENT_QUEUE_BOUND (8u * MiB)

/* ---- a process of another user, on raw connections ---- */

/*
 * A child that runs body as uid/gid.  It reports integers through a pipe
 * and waits for the go-ahead (a byte from the parent) at the points body
 * chooses: it must hold its connections while the parent looks.
 */
struct other_user {
	pid_t pid;
	int reports; /* parent reads */
	int go;      /* parent writes */
};

typedef void (*other_user_body)(const struct daemon *d, int report, int go);

static void other_user_start(struct other_user *u, const struct daemon *d, uid_t uid, gid_t gid,
                             other_user_body body)
{
	int to_parent[2], to_child[2];
	cr_assert(pipe(to_parent) == 0 && pipe(to_child) == 0);
	u->pid = fork();
	cr_assert(u->pid >= 0);
	if (u->pid == 0) {
		close(to_parent[0]);
		close(to_child[1]);
		if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
			_exit(111);
		body(d, to_parent[1], to_child[0]);
		_exit(0);
	}
	close(to_parent[1]);
	close(to_child[0]);
	u->reports = to_parent[0];
	u->go = to_child[1];
}

/* The next integer the child reports; the test fails if it died instead. */
static long other_user_report(struct other_user *u, const char *what)
{
	long v;
	ssize_t got = read(u->reports, &v, sizeof v);
	cr_assert_eq(got, (ssize_t)sizeof v, "the other user's process reported no %s", what);
	return v;
}

static void other_user_go(struct other_user *u)
{
	char go = 1;
	cr_assert_eq(write(u->go, &go, 1), 1);
}

static void other_user_finish(struct other_user *u)
{
	close(u->go);
	close(u->reports);
	int status;
	waitpid(u->pid, &status, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "the other user's process failed (status 0x%x)", status);
}

/* In the child: no test assertions, only what it reports. */
static void child_report(int report, long v)
{
	if (write(report, &v, sizeof v) != (ssize_t)sizeof v)
		_exit(112);
}

static void child_wait_go(int go)
{
	char c;
	if (read(go, &c, 1) != 1)
		_exit(113);
}

static int child_connect(const struct daemon *d)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	size_t len = strlen(d->sock);
	if (len >= sizeof addr.sun_path)
		_exit(117);
	memcpy(addr.sun_path, d->sock, len + 1);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
		_exit(114);
	return fd;
}

/* One response within timeout_s, NULL if none came (or the connection closed). */
static Pyprofd__Response *child_recv(int fd, double timeout_s)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (poll(&p, 1, (int)(timeout_s * 1000)) != 1)
		return NULL;
	unsigned char head[4];
	if (recv(fd, head, 4, MSG_WAITALL) != 4)
		return NULL;
	uint32_t len = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
	unsigned char *buf = len <= 64 * MiB ? malloc(len ? len : 1) : NULL;
	if (!buf || recv(fd, buf, len, MSG_WAITALL) != (ssize_t)len) {
		free(buf);
		return NULL;
	}
	Pyprofd__Response *r = pyprofd__response__unpack(NULL, len, buf);
	free(buf);
	return r;
}

/* Whether the response is an error whose message holds `words`. */
static bool is_error_saying(const Pyprofd__Response *r, Pyprofd__ErrorCode code, const char *words)
{
	return r && r->result_case == PYPROFD__RESPONSE__RESULT_ERROR && r->error->code == code &&
	       r->error->message && strstr(r->error->message, words);
}

/* ---- the daemon's own figures ---- */

static Pyprofd__Response *status_now(const struct daemon *d)
{
	int fd = daemon_connect(d);
	cr_assert(fd >= 0, "root cannot connect to the daemon");
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__StatusRequest status = PYPROFD__STATUS_REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_STATUS;
	req.status = &status;
	cr_assert(send_request(fd, &req));
	Pyprofd__Response *r = recv_response(fd, 10.0);
	close(fd);
	cr_assert(r && r->result_case == PYPROFD__RESPONSE__RESULT_STATUS,
	          "root's status request was not answered: %s",
	          r && r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "no answer");
	return r;
}

/* How often words occur in text. */
static size_t count_lines_with(const char *text, const char *words)
{
	size_t n = 0;
	for (const char *at = text; (at = strstr(at, words)) != NULL; at += strlen(words))
		n++;
	return n;
}

/* ---- one user's connections ---- */

#define HOG_CONNECTIONS 64
/* What one user other than root may hold by default. */
#define HOG_SHARE 16

/*
 * nobody opens HOG_CONNECTIONS connections and sends two bytes of a frame
 * on each: it reports how many were taken (not refused); after the
 * go-ahead, how many of those the daemon then closed with the error that
 * says a request must arrive whole.
 */
static void hog_connections(const struct daemon *d, int report, int go)
{
	int fds[HOG_CONNECTIONS];
	for (int i = 0; i < HOG_CONNECTIONS; i++) {
		fds[i] = child_connect(d);
		/*
		 * A connection past the share may be refused and closed before
		 * these bytes go: the refusal still waits to be read.
		 */
		if (send(fds[i], "\0\0", 2, MSG_NOSIGNAL) != 2 && errno != EPIPE && errno != ECONNRESET)
			_exit(115);
	}
	/* Refusals come at accept; a loaded machine may take a moment to get to them all. */
	long refused = 0;
	for (int round = 0; round < 50 && refused < HOG_CONNECTIONS - HOG_SHARE; round++) {
		for (int i = 0; i < HOG_CONNECTIONS; i++) {
			if (fds[i] < 0)
				continue;
			Pyprofd__Response *r = child_recv(fds[i], 0.0);
			if (!r)
				continue;
			bool refusal = is_error_saying(r, PYPROFD__ERROR_CODE__ERROR_LIMIT, "from this user");
			pyprofd__response__free_unpacked(r, NULL);
			if (!refusal)
				_exit(118); /* an answer to half a request: nothing should come before the timeout */
			close(fds[i]);
			fds[i] = -1;
			refused++;
		}
		usleep(100 * 1000);
	}
	long taken = HOG_CONNECTIONS - refused;
	child_report(report, taken);
	child_wait_go(go);
	long timed_out = 0;
	for (int i = 0; i < HOG_CONNECTIONS; i++) {
		if (fds[i] < 0)
			continue;
		Pyprofd__Response *r = child_recv(fds[i], 20.0);
		timed_out += is_error_saying(r, PYPROFD__ERROR_CODE__ERROR_LIMIT, "arrive whole") &&
		             child_recv(fds[i], 5.0) == NULL; /* and then closed */
		if (r)
			pyprofd__response__free_unpacked(r, NULL);
		close(fds[i]);
	}
	child_report(report, timed_out);
}

/*
 * 64 connections of one user, each stalled in its first frame, used to
 * take every connection the daemon had, root's included, for good.  Now one
 * user gets its share, root and the other users get in, and the stalled
 * connections are closed when their request does not arrive in time; a
 * connection that keeps asking is served past the idle timeout.
 */
Test(hostile, one_user_cannot_lock_out_the_rest, .timeout = 180)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as other users)");
	char dir[PATH_MAX - 64], conf[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", dir);
	write_text_file(conf, "[limits]\nrequest_timeout_s = 10\nidle_timeout_s = 12\n");
	const char *extra[] = {"--config", conf, NULL};
	struct daemon d;
	daemon_start(&d, extra);

	struct other_user hog;
	other_user_start(&hog, &d, NOBODY_UID, NOBODY_GID, hog_connections);
	long taken = other_user_report(&hog, "count of connections taken");
	cr_assert_eq(taken, HOG_SHARE, "one user holds %ld connections; its share is %d", taken, HOG_SHARE);

	/* While nobody holds its share: root, and another user, are served. */
	Pyprofd__Response *st = status_now(&d);
	cr_assert_geq(st->status->connections_refused, HOG_CONNECTIONS - HOG_SHARE);
	pyprofd__response__free_unpacked(st, NULL);
	struct run_opts daemon_user = {.drop_privileges = true, .uid = 1, .gid = 1};
	const char *status_args[] = {"status", NULL};
	struct run_result r;
	char why[512];
	ctl_run(&d, &r, status_args, &daemon_user);
	cr_assert(r.exited && r.code == 0, "another user is locked out: %s",
	          run_describe(&r, why, sizeof why));
	run_result_free(&r);

	/* An idle connection is closed; one that keeps asking is not. */
	int idle = daemon_connect(&d), busy = daemon_connect(&d);
	cr_assert(idle >= 0 && busy >= 0);
	other_user_go(&hog);
	for (int i = 0; i < 15; i++) {
		Pyprofd__Request req = PYPROFD__REQUEST__INIT;
		Pyprofd__StatusRequest status = PYPROFD__STATUS_REQUEST__INIT;
		req.id = 100 + (uint64_t)i;
		req.body_case = PYPROFD__REQUEST__BODY_STATUS;
		req.status = &status;
		cr_assert(send_request(busy, &req), "a busy connection was closed after %d s", i);
		Pyprofd__Response *answer = recv_response(busy, 10.0);
		cr_assert(answer && answer->id == req.id, "a busy connection went unanswered after %d s", i);
		pyprofd__response__free_unpacked(answer, NULL);
		pause_ms(1000);
	}
	cr_assert(connection_closed(idle, 20.0), "an idle connection was kept past the idle timeout");
	close(idle);
	close(busy);

	long timed_out = other_user_report(&hog, "count of stalled connections closed");
	cr_assert_eq(timed_out, taken, "%ld of %ld stalled connections were closed with an error", timed_out,
	             taken);
	other_user_finish(&hog);
	st = status_now(&d);
	cr_assert_geq(st->status->connections_timed_out, (uint64_t)taken + 1);
	pyprofd__response__free_unpacked(st, NULL);
	char *log = daemon_log(&d);
	size_t said = count_lines_with(log, "refused a client");
	/* A burst of the log's, and perhaps the line that sums up the rest (tests/system/test_lifecycle.c). */
	cr_assert(said >= 1 && said <= 5 + 1, "%zu lines for the refusals of one flood:\n%s", said, log);
	free(log);
	daemon_stop(&d);
}

/* ---- answers nobody reads ---- */

/* The source of tests/targets/wide.py, to run with -c by a user who may not read the file. */
static char *wide_program(void)
{
	char path[PATH_MAX];
	target_script("wide.py", path, sizeof path);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	char *text = calloc(1, 64 * 1024);
	cr_assert_not_null(text);
	size_t n = fread(text, 1, 64 * 1024 - 1, f);
	fclose(f);
	cr_assert(n > 0 && n < 64 * 1024 - 1);
	return text;
}

static void send_query(int fd, pid_t pid, uint64_t id)
{
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	q.pid = pid;
	q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_STACKS;
	req.id = id;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	cr_assert(send_request(fd, &req), "cannot send a query");
}

/* Poll status until what is queued for clients stands still; the largest queue seen. */
static uint64_t queued_when_settled(const struct daemon *d, uint64_t *running)
{
	uint64_t most = 0, last = UINT64_MAX;
	int still = 0;
	for (int i = 0; i < 120 && still < 4; i++) {
		Pyprofd__Response *st = status_now(d);
		uint64_t q = st->status->queued_bytes;
		*running = st->status->queries_running;
		pyprofd__response__free_unpacked(st, NULL);
		still = q == last ? still + 1 : 0;
		last = q;
		if (q > most)
			most = q;
		pause_ms(250);
	}
	return most;
}

static pid_t query_pid; /* the target nobody's queries ask about, set before the child forks */

/*
 * nobody asks three queries of its own process on three connections and
 * reads one response of each: two run (a part with more to come), the third
 * is refused; it holds them until the go-ahead.
 */
static void hold_three_queries(const struct daemon *d, int report, int go)
{
	int fds[3];
	for (int i = 0; i < 3; i++) {
		fds[i] = child_connect(d);
		Pyprofd__Request req = PYPROFD__REQUEST__INIT;
		Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
		q.pid = query_pid;
		q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_STACKS;
		req.id = 1;
		req.body_case = PYPROFD__REQUEST__BODY_QUERY;
		req.query = &q;
		if (!send_request(fds[i], &req))
			_exit(116);
		/* One at a time, so which one is refused is known. */
		Pyprofd__Response *r = child_recv(fds[i], 30.0);
		long outcome = !r ? 0
		               : is_error_saying(r, PYPROFD__ERROR_CODE__ERROR_LIMIT, "this user") ? 2
		               : r->result_case == PYPROFD__RESPONSE__RESULT_QUERY && r->more    ? 1
		                                                                                  : 3;
		if (r)
			pyprofd__response__free_unpacked(r, NULL);
		child_report(report, outcome);
	}
	child_wait_go(go);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
}

/*
 * An answer of more than ten megabytes to a client that does not read it:
 * the daemon queues a few megabytes and holds the query's thread, rather
 * than building the answer whole; a client that sends query after query
 * without reading grows nothing; one user cannot take every query thread;
 * a client that leaves frees its query.
 */
Test(hostile, unread_answers_stay_bounded, .timeout = 300)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = python_for_nobody(pys, n);
	cr_assert_not_null(py, "no interpreter found that the user nobody may run");
	char *program = wide_program();
	const char *argv[] = {AS_NOBODY, py->path, "-I", "-c", program, NULL};
	struct test_target wide;
	test_target_start_argv(&wide, argv);
	free(program);

	struct daemon d;
	daemon_start(&d, NULL);
	char p[16];
	pid_text(wide.pid, p, sizeof p);
	/* Root samples nobody's process: its history is nobody's to query. */
	const char *attach[] = {"attach", p, "--rate", "1000", NULL};
	struct run_result r;
	for (int i = 0; i < 100; i++) {
		ctl_run(&d, &r, attach, NULL);
		bool ok = r.exited && r.code == 0;
		run_result_free(&r);
		if (ok)
			break;
		pause_ms(100); /* until its interpreter has started */
	}
	for (int i = 0; i < 120; i++) {
		json_t *stats = ctl_stats_of(&d, wide.pid);
		json_int_t samples = jint(json_object_get(stats, "target"), "samples");
		json_decref(stats);
		if (samples >= 5000)
			break;
		pause_ms(250);
	}
	const char *detach[] = {"detach", p, NULL};
	ctl_ok(&d, detach);

	/* One answer, read a part and then not at all: a few megabytes wait, the rest is not made yet. */
	int slow = daemon_connect(&d);
	cr_assert(slow >= 0);
	send_query(slow, wide.pid, 1);
	Pyprofd__Response *first = recv_response(slow, 60.0);
	cr_assert(first && first->result_case == PYPROFD__RESPONSE__RESULT_QUERY && first->more,
	          "the answer did not come in parts");
	uint64_t total = first->query->total, counted = 0, bytes = pyprofd__response__get_packed_size(first);
	size_t nframes = first->query->n_frames;
	for (size_t i = 0; i < first->query->n_stacks; i++)
		counted += first->query->stacks[i]->count;
	pyprofd__response__free_unpacked(first, NULL);
	uint64_t running;
	uint64_t most = queued_when_settled(&d, &running);
	cr_assert_leq(most, CLIENT_QUEUE_BOUND, "%llu bytes were queued for a client that does not read",
	              (unsigned long long)most);
	cr_assert_eq(running, 1, "the query was not held while its client did not read (it ran to its end)");

	/* Read the rest: the answer is whole, and larger than all the daemon held for it at once. */
	for (bool more = true; more;) {
		Pyprofd__Response *part = recv_response(slow, 60.0);
		cr_assert(part && part->result_case == PYPROFD__RESPONSE__RESULT_QUERY && part->id == 1,
		          "the answer broke off after %llu bytes", (unsigned long long)bytes);
		bytes += pyprofd__response__get_packed_size(part);
		nframes += part->query->n_frames;
		for (size_t i = 0; i < part->query->n_stacks; i++)
			counted += part->query->stacks[i]->count;
		more = part->more;
		pyprofd__response__free_unpacked(part, NULL);
	}
	cr_assert_geq(bytes, 10u * MiB, "the answer (%llu bytes, %zu frames) is too small to test the bound",
	              (unsigned long long)bytes, nframes);
	cr_assert_eq(counted, total, "the parts count %llu samples, the answer says %llu",
	             (unsigned long long)counted, (unsigned long long)total);
	close(slow);

	/* Query after query, none read: the queue stays bounded. */
	int flood = daemon_connect(&d);
	cr_assert(flood >= 0);
	for (uint64_t id = 1; id <= 20; id++)
		send_query(flood, wide.pid, id);
	most = queued_when_settled(&d, &running);
	Pyprofd__Response *st = status_now(&d);
	cr_assert_leq(most, CLIENT_QUEUE_BOUND,
	              "%llu bytes were queued for a client sending queries it does not read (rss %llu)",
	              (unsigned long long)most, (unsigned long long)st->status->rss_bytes);
	pyprofd__response__free_unpacked(st, NULL);
	/* It leaves: its held query ends. */
	close(flood);
	for (int i = 0; i < 40 && running; i++) {
		pause_ms(250);
		st = status_now(&d);
		running = st->status->queries_running;
		pyprofd__response__free_unpacked(st, NULL);
	}
	cr_assert_eq(running, 0, "a query of a client that left still runs");

	/* nobody holds two queries, the most one user may; root still gets an answer. */
	query_pid = wide.pid;
	struct other_user holder;
	other_user_start(&holder, &d, NOBODY_UID, NOBODY_GID, hold_three_queries);
	long outcome[3];
	for (int i = 0; i < 3; i++)
		outcome[i] = other_user_report(&holder, "query outcome");
	cr_assert(outcome[0] == 1 && outcome[1] == 1, "nobody's first two queries did not run (%ld, %ld)",
	          outcome[0], outcome[1]);
	cr_assert_eq(outcome[2], 2, "nobody's third query at once was not refused (outcome %ld)", outcome[2]);
	const char *functions[] = {"query", "--pid", p, "--format", "table", "--limit", "3", NULL};
	ctl_ok(&d, functions);
	other_user_go(&holder);
	other_user_finish(&holder);

	cr_assert(daemon_alive(&d) && daemon_serves(&d));
	daemon_stop(&d);
	test_target_kill(&wide);
}

/* ---- out of descriptors ---- */

/* The daemon's CPU time so far, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
	char path[64], buf[2048];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *after = strrchr(buf, ')');
	cr_assert_not_null(after);
	unsigned long utime, stime;
	cr_assert_eq(sscanf(after + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime), 2);
	return (long)(utime + stime);
}

/* The log's warnings alone: the thousands of debug lines would hide them in a failure. */
static char *warnings_of(const char *log)
{
	size_t len = strlen(log);
	char *out = malloc(len + 1), *end = out;
	cr_assert_not_null(out);
	for (const char *line = log; *line;) {
		const char *eol = strchr(line, '\n');
		size_t n = eol ? (size_t)(eol - line) + 1 : strlen(line);
		if (memmem(line, n, " warn: ", 7)) {
			memcpy(end, line, n);
			end += n;
		}
		line += n;
	}
	*end = '\0';
	return out;
}

/*
 * With its descriptors used up, accept fails at once and the socket stays
 * readable: the daemon used to spin on it and log every failure.  Now it
 * rests, logs the episode once, and serves again once descriptors free up.
 */
/* The timeout guards a hang: under ASan beside the rest of the suite it once ran past 120 s. */
Test(hostile, out_of_descriptors_rests, .timeout = 300)
{
	struct daemon d;
	daemon_start(&d, NULL);
	/* Room for what it has open and a few clients, no more. */
	int open_now = 0;
	char fddir[64];
	snprintf(fddir, sizeof fddir, "/proc/%d/fd", (int)d.pid);
	for (int i = 0; i < 4096; i++) {
		char path[96];
		snprintf(path, sizeof path, "%s/%d", fddir, i);
		open_now += access(path, F_OK) == 0;
	}
	struct rlimit few = {(rlim_t)open_now + 4, (rlim_t)open_now + 4};
	cr_assert(prlimit(d.pid, RLIMIT_NOFILE, &few, NULL) == 0, "prlimit: %s", strerror(errno));

	enum { CLIENTS = 40 };
	int fds[CLIENTS];
	for (int i = 0; i < CLIENTS; i++) {
		fds[i] = daemon_connect(&d);
		cr_assert(fds[i] >= 0, "connection %d was not queued", i);
	}
	pause_ms(500);
	long before = cpu_ticks(d.pid);
	pause_ms(3000);
	long spent = cpu_ticks(d.pid) - before;
	long hz = sysconf(_SC_CLK_TCK);
	cr_assert_lt(spent, hz, "out of descriptors, the daemon used %.2f s of CPU in 3 s",
	             (double)spent / (double)hz);
	char *log = daemon_log(&d);
	char *warnings = warnings_of(log);
	free(log);
	size_t said = count_lines_with(warnings, "cannot accept");
	cr_assert_eq(said, 1, "the episode was logged %zu times:\n%s", said, warnings);
	free(warnings);

	/* The clients leave: descriptors free up and the daemon serves again. */
	for (int i = 0; i < CLIENTS; i++)
		close(fds[i]);
	bool serves = false;
	for (int i = 0; i < 40 && !serves; i++) {
		pause_ms(250);
		serves = daemon_serves(&d);
	}
	cr_assert(serves, "the daemon did not serve again once descriptors were free");
	/* The end is told once the queue is seen empty, which takes a spare descriptor. */
	bool ended = false;
	for (int i = 0; i < 40 && !ended; i++) {
		log = daemon_log(&d);
		ended = strstr(log, "accepting connections again") != NULL;
		if (!ended && i < 39)
			free(log), pause_ms(250);
	}
	warnings = warnings_of(log);
	free(log);
	cr_assert(ended, "the episode's end was not logged:\n%s", warnings);
	free(warnings);
	daemon_stop(&d);
}
