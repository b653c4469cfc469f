/*
 * History queries with a request context (daemon/query.c) as the daemon
 * runs them: queries_start on a real libev loop and the jobs' threads, a
 * real history file written by the store's writer, and the answer's parts
 * decoded as a client reads them.  A trace filter selects its samples, the
 * traces are listed with their spans, stacks split by context carry them,
 * and bad ids are refused before a job starts.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "helpers.h"
#include "pyprofd.h"
#include "store.h"

TestSuite(queries, .init = helpers_init, .fini = helpers_fini);

/* Every part of one answer, decoded. */
struct answer {
	Pyprofd__Response *parts[64];
	unsigned n;
	bool done, ok;
};

static enum job_room answer_room(void *ctx, uint64_t client_serial)
{
	(void)ctx;
	(void)client_serial;
	return JOB_CLIENT_READY;
}

static void answer_part(void *ctx, uint64_t client_serial, const uint8_t *bytes, size_t len)
{
	struct answer *a = ctx;
	(void)client_serial;
	cr_assert_lt(a->n, 64);
	a->parts[a->n] = pyprofd__response__unpack(NULL, len - 4, bytes + 4);
	cr_assert_not_null(a->parts[a->n], "a part is one framed response");
	a->n++;
}

static void answer_done(void *ctx, uint64_t client_serial, bool ok)
{
	struct answer *a = ctx;
	(void)client_serial;
	a->done = true;
	a->ok = ok;
}

static const struct job_sink answer_sink = {answer_room, answer_part, answer_done};

static void answer_free(struct answer *a)
{
	for (unsigned i = 0; i < a->n; i++)
		pyprofd__response__free_unpacked(a->parts[i], NULL);
	*a = (struct answer){0};
}

static const uint8_t trace_a[16] = {0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd,
                                    0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c};
static const uint8_t trace_b[16] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                    0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01};
static const uint8_t span_a[8] = {0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31};

/*
 * One bucket: checkout 6 samples in trace a's span ("route=/checkout"),
 * cart 3 in trace b (no span), loop 2 in no context.
 */
static void seed(struct store_writer *w, int64_t bucket)
{
	struct store_batch *b = store_batch_new();
	struct store_target_info info = {.pid = 4242, .start_time = 3, .executable = "python3"};
	int t = store_batch_target(b, &info);
	int32_t fm = store_batch_frame(b, "main", "shop.py", 1, 0, 1);
	int32_t fc = store_batch_frame(b, "checkout", "shop.py", 10, 0, 9);
	int32_t fk = store_batch_frame(b, "cart", "shop.py", 20, 0, 19);
	int32_t fl = store_batch_frame(b, "loop", "shop.py", 30, 0, 29);
	int32_t r = store_batch_stack(b, -1, fm);
	int32_t sc = store_batch_stack(b, r, fc), sk = store_batch_stack(b, r, fk), sl = store_batch_stack(b, r, fl);
	int32_t ca = store_batch_context(b, trace_a, span_a, "route=/checkout");
	int32_t cb = store_batch_context(b, trace_b, NULL, "");
	cr_assert(t >= 0 && sc >= 0 && sk >= 0 && sl >= 0 && ca >= 0 && cb >= 0);
	cr_assert_eq(store_batch_samples(b, t, bucket, 10, 1, sc, 6, 0), 0);
	cr_assert_eq(store_batch_samples(b, t, bucket, 10, 1, sk, 3, 0), 0);
	cr_assert_eq(store_batch_samples(b, t, bucket, 10, 1, sl, 2, 0), 0);
	cr_assert_eq(store_batch_context_samples(b, t, bucket, 10, 1, sc, ca, 6, 0), 0);
	cr_assert_eq(store_batch_context_samples(b, t, bucket, 10, 1, sk, cb, 3, 0), 0);
	store_writer_submit(w, b);
}

struct fixture {
	struct ev_loop *loop;
	struct jobs js;
	struct answer a;
	struct store_writer *w;
	int64_t bucket;
};

static void fixture_open(struct fixture *f)
{
	char dir[PATH_MAX], path[PATH_MAX + 16];
	scratch_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/history.db", dir);
	struct store_error err = {{0}};
	f->w = store_writer_open(path, &err);
	cr_assert_not_null(f->w, "%s", err.msg);
	f->bucket = ((int64_t)time(NULL) - 120) / 10 * 10;
	seed(f->w, f->bucket);
	store_writer_sync(f->w);
	f->loop = ev_loop_new(EVFLAG_AUTO);
	cr_assert_not_null(f->loop);
	f->a = (struct answer){0};
	cr_assert_eq(jobs_init(&f->js, f->loop, &answer_sink, &f->a), 0);
}

static void fixture_close(struct fixture *f)
{
	jobs_finish(&f->js);
	ev_loop_destroy(f->loop);
	store_writer_close(f->w);
	answer_free(&f->a);
}

/* Runs q to its answer's end: the first part, checked to be a query result. */
static const Pyprofd__QueryResult *run(struct fixture *f, const Pyprofd__QueryRequest *q)
{
	answer_free(&f->a);
	struct query_origin o = {.client_serial = 7, .request_id = 1, .uid = 0, .writer = f->w};
	char why[256] = "";
	cr_assert_eq(queries_start(&f->js, &o, q, why, sizeof why), PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED,
	             "%s", why);
	double until = clock_mono_s() + 30;
	while (!f->a.done && clock_mono_s() < until) {
		ev_run(f->loop, EVRUN_NOWAIT);
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
	cr_assert(f->a.done && f->a.ok && f->a.n > 0, "no whole answer");
	const Pyprofd__Response *r = f->a.parts[0];
	cr_assert_eq(r->result_case, PYPROFD__RESPONSE__RESULT_QUERY, "%s",
	             r->result_case == PYPROFD__RESPONSE__RESULT_ERROR ? r->error->message : "not a query");
	return r->query;
}

Test(queries, a_trace_selects_lists_and_splits, .timeout = 60)
{
	struct fixture f;
	fixture_open(&f);
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	cr_expect_eq(run(&f, &q)->total, 11, "no filter: every sample");

	q.trace_id = (ProtobufCBinaryData){16, (uint8_t *)trace_a};
	const Pyprofd__QueryResult *r = run(&f, &q);
	cr_expect_eq(r->total, 6, "trace a");
	cr_assert_eq(r->n_stacks, 1);
	cr_expect_str_eq(r->frames[r->stacks[0]->frames[1]]->function, "checkout");
	q.span_id = (ProtobufCBinaryData){8, (uint8_t *)span_a};
	cr_expect_eq(run(&f, &q)->total, 6, "trace a, span a");
	q.trace_id.len = q.span_id.len = 0;
	Pyprofd__Label route = PYPROFD__LABEL__INIT, *labels[] = {&route};
	route.key = "route";
	route.value = "/checkout";
	q.context_labels = labels;
	q.n_context_labels = 1;
	cr_expect_eq(run(&f, &q)->total, 6, "route=/checkout");
	route.value = "/cart";
	cr_expect_eq(run(&f, &q)->total, 0, "no context has route=/cart");
	q.n_context_labels = 0;

	/* The traces, most samples first, with their spans. */
	q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_TRACES;
	r = run(&f, &q);
	cr_assert_eq(r->n_traces, 2);
	cr_expect_eq(r->traces[0]->trace_id.len, 16);
	cr_expect_eq(memcmp(r->traces[0]->trace_id.data, trace_a, 16), 0);
	cr_expect_eq(r->traces[0]->samples, 6);
	cr_expect_eq(r->traces[0]->first_unix, (double)f.bucket);
	cr_expect_eq(r->traces[0]->last_unix, (double)f.bucket + 10);
	cr_assert_eq(r->traces[0]->n_spans, 1);
	cr_expect_eq(memcmp(r->traces[0]->spans[0]->span_id.data, span_a, 8), 0);
	cr_expect_eq(r->traces[0]->spans[0]->samples, 6);
	cr_expect_eq(r->traces[1]->samples, 3);
	cr_expect_eq(r->traces[1]->n_spans, 0, "trace b ran in no span");
	q.limit = 1;
	cr_expect_eq(run(&f, &q)->n_traces, 1, "limit");
	q.limit = 0;

	/* Split by context: each stack with its context; the loop in none. */
	q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_STACKS;
	q.split_contexts = true;
	r = run(&f, &q);
	cr_expect_eq(r->total, 11);
	cr_assert_eq(r->n_contexts, 2);
	uint64_t in_a = 0, none = 0;
	for (size_t i = 0; i < r->n_stacks; i++) {
		const Pyprofd__QueryStack *s = r->stacks[i];
		cr_assert_leq(s->context, r->n_contexts);
		if (!s->context) {
			none += s->count;
			continue;
		}
		const Pyprofd__QueryContext *c = r->contexts[s->context - 1];
		if (c->trace_id.len == 16 && memcmp(c->trace_id.data, trace_a, 16) == 0) {
			in_a += s->count;
			cr_expect_eq(c->span_id.len, 8);
			cr_assert_eq(c->n_labels, 1);
			cr_expect_str_eq(c->labels[0]->key, "route");
			cr_expect_str_eq(c->labels[0]->value, "/checkout");
		}
	}
	cr_expect_eq(in_a, 6);
	cr_expect_eq(none, 2);
	fixture_close(&f);
}

Test(queries, bad_ids_are_refused_before_a_job_starts)
{
	struct jobs js = {0};
	struct query_origin o = {.client_serial = 7, .request_id = 1};
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	uint8_t bytes[17] = {1};
	char why[256] = "";
	q.trace_id = (ProtobufCBinaryData){15, bytes};
	cr_expect_eq(queries_start(&js, &o, &q, why, sizeof why), PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST);
	cr_expect(strstr(why, "trace id is 16 bytes"), "%s", why);
	q.trace_id.len = 0;
	q.span_id = (ProtobufCBinaryData){9, bytes};
	cr_expect_eq(queries_start(&js, &o, &q, why, sizeof why), PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST);
	q.span_id.len = 0;
	Pyprofd__Label l = PYPROFD__LABEL__INIT, *many[9];
	l.key = "k";
	l.value = "v";
	for (int i = 0; i < 9; i++)
		many[i] = &l;
	q.context_labels = many;
	q.n_context_labels = 9;
	cr_expect_eq(queries_start(&js, &o, &q, why, sizeof why), PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST);
	cr_expect(strstr(why, "at most 8 context labels"), "%s", why);
}
