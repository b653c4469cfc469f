/*
 * libFuzzer harness for the daemon's side of the wire: the input is what a
 * client sends (framing and protobuf alike), fed through a socketpair to a
 * real server_client on a real libev loop, which answers it through
 * rpc_dispatch.  Queries read a real history: a small SQLite file with
 * samples, written once at the start through the daemon's own writer, so
 * the query planner, the reader and the answer's parts are fuzzed too.
 * Besides the sanitizers' checks it aborts if a client is left half-freed,
 * a query is left running or a response is not a well-formed frame.  The
 * check every request passes (check.c) also reads the whole input as one
 * request, well-formed or not, and must agree with protobuf-c's decoding
 * of it.
 * `make fuzz` builds and runs it.
 *
 * Requests name pids: an attach or dump may open a real process of this
 * machine.  That only reads it, as the daemon would.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "pyprofd.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * The history the queries read: three processes with labels and sessions,
 * a small tree of stacks, and samples in the last hour and a day ago, so
 * ranges, labels, pids, threads and every aggregate find rows.
 */
static int fuzz_history_seed(struct history *h)
{
	static const struct {
		const char *function, *file;
		int line, kind;
		int parent;
	} stacks[] = {
		{"<module>", "app.py", 1, 0, -1}, {"serve", "app.py", 10, 0, 0},
		{"handle", "web.py", 20, 0, 1},   {"query", "db.py", 30, 0, 2},
		{"render", "web.py", 40, 0, 2},   {"<native>", NULL, 0, 1, 3},
		{"<GC>", NULL, 0, 2, 1},          {"work", "worker.py", 5, 0, 0},
	};
	static const char *const apps[] = {"api", "api", "worker"};
	const int n = (int)(sizeof stacks / sizeof stacks[0]);
	struct store_batch *b = store_batch_new();
	if (!b)
		return -1;
	int64_t now = (int64_t)time(NULL) / 10 * 10;
	for (int t = 0; t < 3; t++) {
		const char *keys[] = {"app", "env"};
		const char *values[] = {apps[t], t == 1 ? "dev" : "prod"};
		struct store_target_info info = {
			.pid = 1000 + t,
			.start_time = 5000 + (uint64_t)t,
			.uid = t == 2 ? 65534 : 0,
			.executable = "/usr/bin/python3.12",
			.command_line = "python3.12 app.py",
			.python_version = "3.12.3",
			.nlabels = 2,
			.label_keys = keys,
			.label_values = values,
		};
		if (store_batch_target(b, &info) != t ||
		    store_batch_session(b, t, (double)(now - 90000), t == 1 ? (double)now : 0, 100,
		                        t == 2 ? "cpu" : "wall") < 0)
			goto fail;
	}
	for (int i = 0; i < n; i++) {
		const char *function = stacks[i].function, *file = stacks[i].file;
		if (store_batch_frame(b, function, file, stacks[i].line, stacks[i].kind, stacks[i].line) != i ||
		    store_batch_stack(b, stacks[i].parent, i) != i)
			goto fail;
	}
	for (int t = 0; t < 3; t++)
		for (int k = 0; k < 12; k++)
			for (int i = 0; i < n; i++) {
				int64_t bucket = k < 6 ? now - 600 * k : now - 86400 - 600 * k;
				uint64_t thread = t == 0 && i % 2 ? 0xffff800000000000ull : 1000u + (unsigned)t;
				if ((t + k + i) % 3 && store_batch_samples(b, t, bucket, 10, thread, i,
				                                           1 + (uint64_t)(t + k + i) % 7, (uint64_t)k % 2) != 0)
					goto fail;
			}
	history_submit(h, b);
	store_writer_sync(h->writer);
	struct store_writer_status st;
	store_writer_status(h->writer, &st);
	if (st.rows_written)
		return 0;
	fprintf(stderr, "fuzz_rpc: the history was not written: %s\n", st.failing ? st.last_error : "");
	return -1;
fail:
	store_batch_free(b);
	return -1;
}

/* Turns of the loop per input; a turn waits at most FUZZ_TURN_S while a query runs. */
#define FUZZ_TURNS 256
#define FUZZ_TURN_S 0.05
/*
 * Turns a gone client's query gets to end: a minute, not FUZZ_TURNS' 12.8 s.
 * A query's thread on a loaded host (a niced fuzzer beside a test suite) once
 * took longer than that, and the harness aborted on time, not on a defect:
 * the input ran clean in 24 ms alone.
 */
#define FUZZ_DRAIN_TURNS 1200

/* The harness: one server for every input, the history it reads, the answers taken back. */
struct fuzz {
	struct server server;
	ev_timer turn; /* a loop turn that waits for a query's thread ends by then */
	char dir[sizeof "/tmp/pyprofd-fuzz-rpc.XXXXXX"];
	char rules_path[sizeof "/tmp/pyprofd-fuzz-rpc.XXXXXX/rules.conf"];
	unsigned char out[1 << 20];
	size_t out_len;
};

static struct fuzz fuzz = {.dir = "/tmp/pyprofd-fuzz-rpc.XXXXXX"};

static void fuzz_on_turn(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents;
}

/* Rules an input added are its own: the next one starts without them, and without discovery. */
static void fuzz_forget_rules(struct server *s)
{
	while (s->config.rules.n)
		rules_remove_at(&s->config.rules, s->config.rules.n - 1);
	fleet_free(&s->fleet);
	if (fleet_init(&s->fleet, s) != 0)
		abort();
	unlink(fuzz.rules_path);
}

/* At exit: the query threads and the writer stopped, the history's files gone. */
static void fuzz_cleanup(void)
{
	struct server *s = &fuzz.server;
	while (s->clients)
		server_client_free(s->clients);
	jobs_finish(&s->jobs);
	history_close(&s->history);
	fleet_free(&s->fleet);
	budget_free(&s->budget);
	schedule_free(&s->schedule);
	rules_free(&s->config.rules);
	unlink(fuzz.rules_path);
	static const char *const files[] = {"pyprofd.db", "pyprofd.db-wal", "pyprofd.db-shm"};
	char path[sizeof fuzz.dir + 32];
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", fuzz.dir, files[i]);
		unlink(path);
	}
	close(s->state_fd);
	rmdir(fuzz.dir);
}

/* A server without a socket or signals: what a connection and a query need. */
static struct server *fuzz_server(void)
{
	static const struct job_sink sink = {
		server_client_answer_room, server_client_answer_part, server_client_answer_done};
	struct server *s = &fuzz.server;
	if (s->loop)
		return s;
	s->loop = ev_loop_new(EVFLAG_AUTO);
	s->listen_fd = -1;
	s->config = (struct config){
		.log_level = LOG_LEVEL_ERROR,
		.max_connections = 4,
		.max_message_bytes = 1u << 16,
		.max_pending_requests = 4,
		.max_targets = 4,
		.warm_budget_bytes = 1u << 20,
		.default_rate_hz = 100,
		.max_rate_hz = 1000,
		.top_window_s = 1,
		.bucket_seconds = 10,
		.max_pending_rows = 1u << 16,
		.state_dir = fuzz.dir,
		.rules_path = fuzz.rules_path,
		/* Fuzzed attaches and rules reach any process of the machine: read them, never write. */
		.no_write = true,
	};
	log_init(LOG_LEVEL_ERROR);
	/* A harness whose queries found no history would fuzz none of them: stop at once. */
	s->state_fd = -1;
	if (mkdtemp(fuzz.dir)) {
		snprintf(fuzz.rules_path, sizeof fuzz.rules_path, "%s/rules.conf", fuzz.dir);
		s->state_fd = open(fuzz.dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	/* Attaches and rules schedule samples on it: a schedule never set up armed descriptor 0. */
	if (!s->loop || s->state_fd < 0 || schedule_init(&s->schedule, s->loop) != 0 ||
	    history_open(&s->history, &s->config, s->state_fd) != 0 ||
	    fuzz_history_seed(&s->history) != 0 || jobs_init(&s->jobs, s->loop, &sink, s) != 0 ||
	    fleet_init(&s->fleet, s) != 0) {
		fprintf(stderr, "fuzz_rpc: cannot set up a history in %s\n", fuzz.dir);
		abort();
	}
	budget_init(&s->budget, s); /* status and attach ask it */
	atexit(fuzz_cleanup);
	ev_timer_init(&fuzz.turn, fuzz_on_turn, FUZZ_TURN_S, FUZZ_TURN_S);
	return s;
}

/* What the daemon wrote so far, kept up to the buffer's size (the rest is read and dropped). */
static void fuzz_take_responses(int fd)
{
	unsigned char spill[4096];
	for (;;) {
		bool room = fuzz.out_len < sizeof fuzz.out;
		ssize_t got = room ? read(fd, fuzz.out + fuzz.out_len, sizeof fuzz.out - fuzz.out_len)
		                   : read(fd, spill, sizeof spill);
		if (got <= 0)
			return;
		if (room)
			fuzz.out_len += (size_t)got;
	}
}

/* Every response frame the daemon wrote must be a length and a Response. */
static void check_responses(void)
{
	const unsigned char *buf = fuzz.out;
	size_t len = fuzz.out_len;
	for (size_t off = 0; off + 4 <= len;) {
		uint32_t n = (uint32_t)buf[off] << 24 | (uint32_t)buf[off + 1] << 16 |
		             (uint32_t)buf[off + 2] << 8 | buf[off + 3];
		if (off + 4 + n > len)
			break; /* cut by the buffer, not by the daemon */
		Pyprofd__Response *r = pyprofd__response__unpack(NULL, n, buf + off + 4);
		if (!r)
			abort();
		pyprofd__response__free_unpacked(r, NULL);
		off += 4 + (size_t)n;
	}
}

/*
 * Bytes as one request: the check walks bytes of any shape safely, and
 * what it passes decodes to a request whose strings pass too once encoded
 * again (it read every string protobuf-c would keep).
 */
static void check_agrees(const uint8_t *data, size_t size)
{
	static uint8_t again[1 << 20];
	char why[256];
	int passed = check_strings(&pyprofd__request__descriptor, data, size, why, sizeof why);
	Pyprofd__Request *req = pyprofd__request__unpack(NULL, size, data);
	if (!req)
		return;
	(void)check_request(req, data, size, why, sizeof why);
	size_t len = pyprofd__request__get_packed_size(req);
	if (passed == 0 && len <= sizeof again) {
		pyprofd__request__pack(req, again);
		if (check_strings(&pyprofd__request__descriptor, again, len, why, sizeof why) != 0)
			abort();
	}
	pyprofd__request__free_unpacked(req, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Each frame's payload as the daemon will see it, and the whole input unframed. */
	check_agrees(data, size);
	for (size_t at = 0; size - at >= WIRE_HEADER_BYTES;) {
		uint32_t len = wire_frame_length(data + at);
		if (len > size - at - WIRE_HEADER_BYTES)
			break;
		check_agrees(data + at + WIRE_HEADER_BYTES, len);
		at += WIRE_HEADER_BYTES + (size_t)len;
	}
	struct server *s = fuzz_server();
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
		return 0;
	server_client_accept(s, sv[0]);
	size_t off = 0;
	while (off < size) {
		ssize_t put = write(sv[1], data + off, size - off);
		if (put <= 0)
			break;
		off += (size_t)put;
	}
	shutdown(sv[1], SHUT_WR);
	/* While a query runs its thread wakes the loop; the timer bounds a turn that waits. */
	fuzz.out_len = 0;
	ev_timer_again(s->loop, &fuzz.turn);
	for (int i = 0; i < FUZZ_TURNS && (s->clients || s->jobs.running); i++) {
		ev_run(s->loop, s->jobs.running ? EVRUN_ONCE : EVRUN_NOWAIT);
		fuzz_take_responses(sv[1]);
	}
	ev_timer_stop(s->loop, &fuzz.turn);
	check_responses();
	while (s->clients)
		server_client_free(s->clients);
	if (s->nclients != 0)
		abort();
	/* A query of a client that is gone ends at its next part: none may be left behind. */
	for (int i = 0; i < FUZZ_DRAIN_TURNS && s->jobs.running; i++) {
		ev_timer_again(s->loop, &fuzz.turn);
		ev_run(s->loop, EVRUN_ONCE);
		ev_timer_stop(s->loop, &fuzz.turn);
	}
	if (s->jobs.running != 0)
		abort();
	targets_free(&s->targets);
	fuzz_forget_rules(s);
	close(sv[1]);
	return 0;
}
