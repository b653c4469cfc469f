/*
 * Background jobs (daemon/jobs.c) on a real libev loop and real threads:
 * every part reaches the sink in order and the answer ends once; a client
 * that takes nothing holds its job's thread at the queue's bound, not the
 * daemon's memory; a client that leaves cancels its job, whose thread then
 * ends; the daemon's stop cancels and joins every job; the counts by type
 * and user are what the limits of queries and backfills are judged by.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "helpers.h"
#include "pyprofd.h"

TestSuite(jobs, .init = helpers_init, .fini = helpers_fini);

/* Parts of this many bytes of payload: a few make the queue's bound. */
#define PART_BYTES (256u * 1024u)

/* The sink: one client, whose room the test sets. */
struct sink {
	enum job_room room;
	unsigned parts, done_calls;
	bool ok;
	size_t bytes;
	uint64_t last_id; /* parts come in the order they were emitted */
	bool out_of_order;
};

static enum job_room sink_room(void *ctx, uint64_t client_serial)
{
	struct sink *k = ctx;
	cr_assert_eq(client_serial, 7);
	return k->room;
}

static void sink_part(void *ctx, uint64_t client_serial, const uint8_t *bytes, size_t len)
{
	struct sink *k = ctx;
	cr_assert_eq(client_serial, 7);
	Pyprofd__Response *r = pyprofd__response__unpack(NULL, len - 4, bytes + 4);
	cr_assert_not_null(r, "a part is one framed response");
	if (r->id != k->last_id + 1)
		k->out_of_order = true;
	k->last_id = r->id;
	pyprofd__response__free_unpacked(r, NULL);
	k->parts++;
	k->bytes += len;
}

static void sink_done(void *ctx, uint64_t client_serial, bool ok)
{
	struct sink *k = ctx;
	cr_assert_eq(client_serial, 7);
	k->done_calls++;
	k->ok = ok;
}

static const struct job_sink test_sink = {sink_room, sink_part, sink_done};

/* A job that emits `parts` responses of PART_BYTES each, numbered from 1. */
struct emitter {
	unsigned parts;
	unsigned emitted; /* by the thread: read atomically while it runs */
	bool cancelled;   /* the thread saw job_cancelled */
	bool *freed;
};

static int emitter_run(struct job *j, void *data)
{
	struct emitter *e = data;
	char *text = malloc(PART_BYTES);
	cr_assert_not_null(text);
	memset(text, 'x', PART_BYTES - 1);
	text[PART_BYTES - 1] = '\0';
	for (unsigned i = 0; i < e->parts; i++) {
		Pyprofd__Response resp = PYPROFD__RESPONSE__INIT;
		Pyprofd__Error err = PYPROFD__ERROR__INIT;
		wire_error(&resp, &err, i + 1, PYPROFD__ERROR_CODE__ERROR_INTERNAL, text);
		if (job_emit(j, &resp) != 0)
			break;
		__atomic_add_fetch(&e->emitted, 1, __ATOMIC_SEQ_CST);
	}
	e->cancelled = job_cancelled(j);
	free(text);
	return 0;
}

static void emitter_free(void *data)
{
	struct emitter *e = data;
	*e->freed = true;
}

static const struct job_type emitter_type = {"test-emitter", emitter_run, emitter_free};
static const struct job_type other_type = {"test-other", emitter_run, emitter_free};

static void nap_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* The loop turned for `seconds`, handing on what the jobs queue meanwhile. */
static void run_for(struct ev_loop *loop, double seconds)
{
	double until = clock_mono_s() + seconds;
	while (clock_mono_s() < until) {
		ev_run(loop, EVRUN_NOWAIT);
		nap_ms(5);
	}
}

/* The loop turned until the job list is empty, or `seconds` pass. */
static void run_until_idle(struct ev_loop *loop, struct jobs *js, double seconds)
{
	double until = clock_mono_s() + seconds;
	while (js->running && clock_mono_s() < until) {
		ev_run(loop, EVRUN_NOWAIT);
		nap_ms(1);
	}
}

/* A loop, its jobs, and the one client they answer. */
struct fixture {
	struct ev_loop *loop;
	struct jobs js;
	struct sink k;
};

static void fixture_open(struct fixture *f, enum job_room room)
{
	f->loop = ev_loop_new(EVFLAG_AUTO);
	cr_assert_not_null(f->loop);
	f->k = (struct sink){.room = room};
	cr_assert_eq(jobs_init(&f->js, f->loop, &test_sink, &f->k), 0);
}

/* The emitter as a job of this type, for this user. */
static void fixture_start(struct fixture *f, const struct job_type *type, struct emitter *e,
                          uid_t uid)
{
	char why[128];
	cr_assert_eq(jobs_start(&f->js, type, e, 7, uid, why, sizeof why), 0, "%s", why);
}

static void fixture_close(struct fixture *f)
{
	jobs_finish(&f->js);
	ev_loop_destroy(f->loop);
}

Test(jobs, every_part_reaches_the_client_in_order_then_the_end_once)
{
	struct fixture f;
	fixture_open(&f, JOB_CLIENT_READY);
	bool freed = false;
	struct emitter e = {.parts = 20, .freed = &freed};
	fixture_start(&f, &emitter_type, &e, 1000);
	run_until_idle(f.loop, &f.js, 30);
	cr_assert_null(f.js.running, "the job was collected");
	cr_expect_eq(f.k.parts, 20);
	cr_expect(!f.k.out_of_order);
	cr_expect_eq(f.k.done_calls, 1);
	cr_expect(f.k.ok);
	cr_expect(freed, "its data was let go on the loop");
	cr_expect(!e.cancelled);
	fixture_close(&f);
}

Test(jobs, a_client_that_takes_nothing_holds_the_thread_at_the_bound)
{
	struct fixture f;
	fixture_open(&f, JOB_CLIENT_FULL);
	bool freed = false;
	struct emitter e = {.parts = 64, .freed = &freed}; /* 16 MiB, far past the bound */
	fixture_start(&f, &emitter_type, &e, 1000);
	/* The queue holds 2 MiB: eight parts, and the ninth waits for room. */
	double until = clock_mono_s() + 30;
	while (__atomic_load_n(&e.emitted, __ATOMIC_SEQ_CST) < 8 && clock_mono_s() < until)
		run_for(f.loop, 0.05);
	run_for(f.loop, 0.5);
	unsigned ahead = __atomic_load_n(&e.emitted, __ATOMIC_SEQ_CST);
	cr_expect_eq(f.k.parts, 0, "a full client is handed nothing");
	cr_expect_geq(ahead, 8, "the thread filled the queue");
	cr_expect_lt(ahead, 16, "the thread ran %u parts ahead of a client that reads none", ahead);
	/* Room again: the rest comes. */
	f.k.room = JOB_CLIENT_READY;
	jobs_pump(&f.js);
	run_until_idle(f.loop, &f.js, 30);
	cr_expect_eq(f.k.parts, 64);
	cr_expect(!f.k.out_of_order);
	cr_expect_eq(f.k.done_calls, 1);
	fixture_close(&f);
}

Test(jobs, a_client_that_leaves_cancels_its_job)
{
	struct fixture f;
	fixture_open(&f, JOB_CLIENT_FULL);
	bool freed = false;
	struct emitter e = {.parts = 64, .freed = &freed};
	fixture_start(&f, &emitter_type, &e, 1000);
	run_for(f.loop, 0.2);
	f.k.room = JOB_CLIENT_GONE;
	jobs_pump(&f.js);
	run_until_idle(f.loop, &f.js, 30);
	cr_assert_null(f.js.running, "the cancelled job's thread ended and was joined");
	cr_expect(e.cancelled, "the thread learnt it was cancelled");
	cr_expect_lt(e.emitted, 64);
	cr_expect_eq(f.k.parts, 0);
	cr_expect_eq(f.k.done_calls, 0, "a client that left is told nothing");
	cr_expect(freed);
	fixture_close(&f);
}

Test(jobs, stopping_cancels_and_joins_every_job)
{
	struct fixture f;
	fixture_open(&f, JOB_CLIENT_FULL);
	bool freed[3] = {false};
	struct emitter e[3] = {{.parts = 64, .freed = &freed[0]},
	                       {.parts = 64, .freed = &freed[1]},
	                       {.parts = 64, .freed = &freed[2]}};
	for (int i = 0; i < 3; i++)
		fixture_start(&f, &emitter_type, &e[i], 1000);
	run_for(f.loop, 0.2);
	fixture_close(&f); /* every thread waits for room no client will make */
	for (int i = 0; i < 3; i++) {
		cr_expect(freed[i]);
		cr_expect(e[i].cancelled);
	}
	cr_expect_eq(f.k.done_calls, 0);
}

Test(jobs, counts_by_type_and_user)
{
	struct fixture f;
	fixture_open(&f, JOB_CLIENT_FULL);
	bool freed[4] = {false};
	struct emitter e[4];
	const uid_t uids[4] = {0, 1000, 1000, 1001};
	for (int i = 0; i < 4; i++) {
		e[i] = (struct emitter){.parts = 64, .freed = &freed[i]};
		fixture_start(&f, i == 3 ? &other_type : &emitter_type, &e[i], uids[i]);
	}
	struct jobs_count n = jobs_count(&f.js, &emitter_type, 1000);
	cr_expect_eq(n.all, 3);
	cr_expect_eq(n.of_uid, 2);
	cr_expect_eq(n.not_root, 2);
	n = jobs_count(&f.js, &other_type, 1001);
	cr_expect_eq(n.all, 1);
	cr_expect_eq(n.of_uid, 1);
	fixture_close(&f);
}
