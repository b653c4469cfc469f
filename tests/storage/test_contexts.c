/*
 * Request contexts on real SQLite files: written and read back, filters
 * that select exactly the context rows, the list of traces, stacks split
 * by context, batches still in the writer's memory, bad contexts refused
 * and a version 3 history migrated with its rows.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "seed.h"

TestSuite(contexts, .init = helpers_init, .fini = helpers_fini);

/* The range of the seeded buckets. */
static struct store_query ctx_range(int64_t b0)
{
	return (struct store_query){.from_unix = (double)b0, .until_unix = (double)b0 + 100000};
}

struct traces_seen {
	int n;
	uint8_t ids[8][STORE_TRACE_ID_LEN];
	uint64_t samples[8];
	double first[8], last[8];
	size_t nspans[8];
	uint64_t span_samples[8][2], spans_found[8];
	uint8_t span0[8][STORE_SPAN_ID_LEN];
};

static int trace_row(void *ctx, const struct store_trace *t)
{
	struct traces_seen *s = ctx;
	cr_assert_lt(s->n, 8);
	memcpy(s->ids[s->n], t->trace_id, STORE_TRACE_ID_LEN);
	s->samples[s->n] = t->samples;
	s->first[s->n] = t->first_unix;
	s->last[s->n] = t->last_unix;
	s->nspans[s->n] = t->nspans;
	s->spans_found[s->n] = t->spans_found;
	for (size_t i = 0; i < t->nspans && i < 2; i++)
		s->span_samples[s->n][i] = t->spans[i].samples;
	if (t->nspans)
		memcpy(s->span0[s->n], t->spans[0].span_id, STORE_SPAN_ID_LEN);
	s->n++;
	return 0;
}

static struct traces_seen traces(struct store_reader *r, const struct store_query *q, uint32_t limit,
                                 uint32_t spans)
{
	struct traces_seen s = {0};
	struct store_error err = {{0}};
	cr_assert_eq(store_query_traces(r, q, limit, spans, trace_row, &s, &err), 0, "traces: %s", err.msg);
	return s;
}

/* Split by context: the sum of rows in none, and of rows of trace i's span j and labels. */
struct split_sums {
	uint64_t all, none, of_span;
	int trace, span;
	const char *labels;
	bool labels_seen;
};

static int split_row(void *ctx, const struct store_row *row)
{
	struct split_sums *s = ctx;
	s->all += row->count;
	if (!row->context) {
		s->none += row->count;
		cr_expect_str_eq(row->frames[row->depth - 1].function, "loop", "only loop runs in no context");
		return 0;
	}
	uint8_t trace[STORE_TRACE_ID_LEN], span[STORE_SPAN_ID_LEN];
	trace_of(s->trace, trace);
	span_of(s->trace, s->span, span);
	if (row->context->has_trace && row->context->has_span &&
	    memcmp(row->context->trace_id, trace, sizeof trace) == 0 &&
	    memcmp(row->context->span_id, span, sizeof span) == 0) {
		s->of_span += row->count;
		s->labels_seen = strcmp(row->context->labels, s->labels) == 0;
	}
	return 0;
}

static struct split_sums split(struct store_reader *r, struct store_query q, int trace, int span,
                               const char *labels)
{
	struct split_sums s = {.trace = trace, .span = span, .labels = labels};
	struct store_error err = {{0}};
	q.split_contexts = true;
	uint64_t total = 0;
	cr_assert_eq(store_query_stacks(r, &q, split_row, &s, &total, &err), 0, "split: %s", err.msg);
	cr_expect_eq(total, s.all);
	return s;
}

Test(contexts, contexts_are_filtered_listed_and_split, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t b0 = ((int64_t)time(NULL) - 600) / 10 * 10;
	struct store_writer *w = open_writer(path);
	/* Traces 0..2 in the first bucket, 1..3 in the second. */
	store_writer_submit(w, context_batch(b0, 0, 3, 0));
	store_writer_submit(w, context_batch(b0 + 10, 1, 3, 0));
	store_writer_sync(w);
	expect_written(w, "contexts");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM contexts"), 8, "two spans of four traces");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM context_samples"), 12);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM contexts WHERE length(trace_id) != 16 "
	                           "OR length(span_id) != 8"), 0);
	struct store_reader *r = open_reader(path);
	struct store_query q = ctx_range(b0);
	const uint64_t per_trace = CTX_CHECKOUT + CTX_CART, per_bucket = 3 * per_trace + CTX_LOOP;
	cr_expect_eq(query_total(r, &q), 2 * per_bucket, "context rows are never counted twice");

	uint8_t t1[STORE_TRACE_ID_LEN], t0[STORE_TRACE_ID_LEN], t9[STORE_TRACE_ID_LEN];
	uint8_t s10[STORE_SPAN_ID_LEN];
	trace_of(1, t1);
	trace_of(0, t0);
	trace_of(9, t9);
	span_of(1, 0, s10);
	q.trace_id = t1;
	cr_expect_eq(query_total(r, &q), 2 * per_trace, "trace 1, in both buckets");
	q.no_idle = true;
	cr_expect_eq(query_total(r, &q), 2 * per_trace - 2, "trace 1 without its waiting samples");
	q.no_idle = false;
	q.span_id = s10;
	cr_expect_eq(query_total(r, &q), 2 * CTX_CHECKOUT, "trace 1, span 0");
	q.trace_id = t9;
	cr_expect_eq(query_total(r, &q), 0, "an unknown trace");
	q = ctx_range(b0);
	const char *checkout[] = {"route=/checkout"}, *cart_vip[] = {"route=/cart", "user=vip"},
		   *cart_nobody[] = {"route=/cart", "user=nobody"}, *partial[] = {"route=/check"},
		   *vip[] = {"user=vip"};
	q.context_labels = checkout;
	q.ncontext_labels = 1;
	cr_expect_eq(query_total(r, &q), 6 * CTX_CHECKOUT, "route=/checkout");
	q.context_labels = cart_vip;
	q.ncontext_labels = 2;
	cr_expect_eq(query_total(r, &q), 6 * CTX_CART, "both labels");
	q.context_labels = cart_nobody;
	cr_expect_eq(query_total(r, &q), 0, "one label of two");
	q.context_labels = partial;
	q.ncontext_labels = 1;
	cr_expect_eq(query_total(r, &q), 0, "a label matches whole");
	q.context_labels = vip;
	q.trace_id = t0;
	cr_expect_eq(query_total(r, &q), CTX_CART, "a trace and a label");
	const char *bad[] = {"no equals sign"};
	q.context_labels = bad;
	struct store_error err = {{0}};
	uint64_t total;
	cr_expect_eq(store_query_stacks(r, &q, NULL, NULL, &total, &err), -1);
	cr_expect(strstr(err.msg, "KEY=VALUE"), "%s", err.msg);

	/* The traces: most samples first, ties by id; first and last buckets; spans. */
	q = ctx_range(b0);
	struct traces_seen ts = traces(r, &q, 0, 10);
	cr_assert_eq(ts.n, 4);
	cr_expect_eq(memcmp(ts.ids[0], t1, sizeof t1), 0, "trace 1 first");
	cr_expect_eq(ts.samples[0], 2 * per_trace);
	cr_expect_eq(ts.samples[2], per_trace);
	cr_expect_eq(ts.first[0], (double)b0);
	cr_expect_eq(ts.last[0], (double)b0 + 20);
	cr_expect_eq(ts.first[3], (double)b0 + 10, "trace 3 is in the second bucket alone");
	cr_expect_eq(ts.nspans[0], 2);
	cr_expect_eq(ts.span_samples[0][0], 2 * CTX_CHECKOUT);
	cr_expect_eq(ts.span_samples[0][1], 2 * CTX_CART);
	cr_expect_eq(memcmp(ts.span0[0], s10, sizeof s10), 0);
	ts = traces(r, &q, 2, 1);
	cr_expect_eq(ts.n, 2, "limit");
	cr_expect_eq(ts.nspans[0], 1);
	cr_expect_eq(ts.spans_found[0], 2);
	q.context_labels = checkout;
	q.ncontext_labels = 1;
	ts = traces(r, &q, 0, 10);
	cr_expect_eq(ts.samples[0], 2 * CTX_CHECKOUT, "the traces of a filter count its samples alone");

	/* Split: every sample once, those in no context as rows of their own. */
	q = ctx_range(b0);
	struct split_sums ss = split(r, q, 1, 0, "route=/checkout");
	cr_expect_eq(ss.all, 2 * per_bucket);
	cr_expect_eq(ss.none, 2 * CTX_LOOP);
	cr_expect_eq(ss.of_span, 2 * CTX_CHECKOUT);
	cr_expect(ss.labels_seen, "a row carries its context's labels");
	q.trace_id = t1;
	ss = split(r, q, 1, 1, "route=/cart\nuser=vip");
	cr_expect_eq(ss.all, 2 * per_trace, "split and filtered");
	cr_expect_eq(ss.none, 0);
	cr_expect_eq(ss.of_span, 2 * CTX_CART);
	cr_expect(ss.labels_seen);

	/* Batches the writer cannot write yet are counted from its memory, once. */
	store_writer_set_limits(w, UINT64_MAX, 0);
	store_writer_set_file_limit(w, 1);
	struct store_writer_status st = {0};
	uint64_t m = 0;
	for (; m < 2000 && !st.failing; m++) {
		store_writer_submit(w, context_batch(b0 + 20 + 10 * (int64_t)m, 3, 2, 0));
		store_writer_flush(w);
		store_writer_status(w, &st);
	}
	cr_assert(st.failing && st.pending_rows > 0, "the file never filled");
	uint8_t t3[STORE_TRACE_ID_LEN];
	trace_of(3, t3);
	q = ctx_range(b0);
	q.trace_id = t3;
	uint64_t want = (1 + m) * per_trace;
	cr_expect_lt(query_total(r, &q), want, "nothing waits in memory");
	struct store_pending *p = store_reader_pin(r, w, &err);
	cr_assert_not_null(p, "%s", err.msg);
	q.pending = p;
	cr_expect_eq(query_total(r, &q), want, "file and memory");
	struct store_query all = ctx_range(b0);
	all.pending = p;
	ts = traces(r, &all, 0, 10);
	cr_assert_eq(ts.n, 5, "trace 4 is in memory alone");
	int at3 = -1;
	for (int i = 0; i < ts.n; i++)
		if (memcmp(ts.ids[i], t3, sizeof t3) == 0)
			at3 = i;
	cr_assert_geq(at3, 0);
	cr_expect_eq(ts.samples[at3], want, "trace 3 is one trace across file and memory");
	cr_expect_eq(ts.span_samples[at3][0], (1 + m) * CTX_CHECKOUT);
	ss = split(r, all, 3, 0, "route=/checkout");
	cr_expect_eq(ss.all, 2 * per_bucket + m * (2 * per_trace + CTX_LOOP));
	cr_expect_eq(ss.none, (2 + m) * CTX_LOOP);
	cr_expect_eq(ss.of_span, (1 + m) * CTX_CHECKOUT, "one context across file and memory");
	store_reader_unpin(r, p);
	store_writer_set_file_limit(w, 0);
	store_writer_sync(w);
	expect_written(w, "after the outage");
	q.pending = NULL;
	cr_expect_eq(query_total(r, &q), want, "written once");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM contexts"), 10);
	store_reader_close(r);
	store_writer_close(w);
}

Test(contexts, batch_refuses_bad_contexts)
{
	struct store_batch *b = context_batch(1000, 0, 1, 0);
	uint8_t trace[STORE_TRACE_ID_LEN], span[STORE_SPAN_ID_LEN], zero[STORE_TRACE_ID_LEN] = {0};
	trace_of(0, trace);
	span_of(0, 0, span);
	cr_expect_eq(store_batch_context(b, trace, span, "route=/checkout"), 0, "declared twice is one");
	cr_expect_eq(store_batch_context(b, zero, span, ""), -1, "an all-zero trace");
	cr_expect_eq(store_batch_context(b, NULL, span, "a=b"), -1, "a span without a trace");
	cr_expect_eq(store_batch_context(b, NULL, NULL, ""), -1, "no context at all");
	cr_expect_eq(store_batch_context(b, trace, NULL, NULL), -1, "NULL labels");
	cr_expect_eq(store_batch_context(b, trace, NULL, "b=1\na=2"), -1, "unsorted");
	cr_expect_eq(store_batch_context(b, trace, NULL, "a=1\na=2"), -1, "a key twice");
	cr_expect_eq(store_batch_context(b, trace, NULL, "novalue"), -1, "no '='");
	cr_expect_eq(store_batch_context(b, trace, NULL, "=v"), -1, "no key");
	cr_expect_eq(store_batch_context(b, trace, NULL, "a=1\n"), -1, "an empty line");
	cr_expect_eq(store_batch_context(b, trace, NULL, "a=1\nb=2\nc=3\nd=4\ne=5\nf=6\ng=7\nh=8\ni=9"), -1,
	             "nine labels");
	cr_expect_geq(store_batch_context(b, trace, NULL, "a=1\nb=2\nc=3\nd=4\ne=5\nf=6\ng=7\nh=8"), 0,
	              "eight labels");
	cr_expect_geq(store_batch_context(b, NULL, NULL, "user=vip"), 0, "labels without a trace");
	int32_t c = store_batch_context(b, trace, NULL, "");
	cr_assert_geq(c, 0, "a trace without a span");
	cr_expect_eq(store_batch_context_samples(b, 0, 1000, 10, 1, 0, c + 100, 1, 0), -1,
	             "a context out of range");
	cr_expect_eq(store_batch_context_samples(b, 0, 1000, 10, 1, 0, -1, 1, 0), -1, "a negative context");
	cr_expect_eq(store_batch_context_samples(b, 5, 1000, 10, 1, 0, c, 1, 0), -1, "a target out of range");
	cr_expect_eq(store_batch_context_samples(b, 0, 1000, 10, 1, 99, c, 1, 0), -1, "a stack out of range");
	cr_expect_eq(store_batch_context_samples(b, 0, 1000, 10, 1, 0, c, 1, 2), -1, "more idle than samples");
	cr_expect_eq(store_batch_context_samples(b, 0, 1000, 0, 1, 0, c, 1, 0), -1, "a bucket of no width");
	cr_expect_eq(store_batch_context_samples(b, 0, 1000, 10, 1, 0, c, 1, 0), 0);
	store_batch_free(b);
}

Test(contexts, schema_3_migrates_keeping_its_rows, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base, 0, 10);
	store_writer_close(w);
	/* As pyprofd left it before contexts: version 3. */
	raw_exec(path, "DROP TABLE context_samples; DROP TABLE contexts; PRAGMA user_version = 3");
	int64_t rows = raw_int(path, "SELECT count(*) FROM samples");
	w = open_writer(path);
	store_writer_sync(w);
	expect_written(w, "reopened");
	cr_expect_eq(raw_int(path, "PRAGMA user_version"), 5);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM samples"), rows);
	struct store_reader *r = open_reader(path);
	struct store_query q = range_query(base, 0, 10);
	struct expect e = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 10, .times = 1};
	check_query(r, &q, &e, "after the migration");
	int64_t b0 = ((int64_t)time(NULL) - 600) / 10 * 10;
	store_writer_submit(w, context_batch(b0, 0, 1, 0));
	store_writer_sync(w);
	expect_written(w, "contexts after the migration");
	uint8_t t0[STORE_TRACE_ID_LEN];
	trace_of(0, t0);
	q = ctx_range(b0);
	q.trace_id = t0;
	cr_expect_eq(query_total(r, &q), CTX_CHECKOUT + CTX_CART);
	store_reader_close(r);
	store_writer_close(w);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}
