/*
 * Request contexts in queries: the list of traces (the context rows as a
 * source of samples, filtered by trace, span and labels, are reader.c's).
 *
 * Context rows count again samples the samples table holds, so a query
 * reads them only when it filters or splits by context; without, its SQL
 * is what it was before contexts existed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"

/* The parameter of the trace whose spans are read. */
#define CONTEXTS_TRACE_PARAM 1100

/* A trace's spans of most samples into t (spans of max_spans room).  0, or -1 and *err. */
static int contexts_spans(struct store_reader *r, const struct store_query *q, const char *src,
                          uint32_t max_spans, struct store_trace *t, struct store_span *spans,
                          struct store_error *err)
{
	char head[4096];
	int n = snprintf(head, sizeof head,
	                 "SELECT span_id, sum(%s) AS n, count(*) OVER () FROM %s "
	                 "WHERE bucket_start >= ?1 AND bucket_start < ?2 AND trace_id = ?%d "
	                 "AND length(span_id) = %d",
	                 q->no_idle ? "count - idle" : "count", src, CONTEXTS_TRACE_PARAM,
	                 STORE_SPAN_ID_LEN);
	char tail[96];
	snprintf(tail, sizeof tail, " GROUP BY span_id HAVING n > 0 ORDER BY n DESC, span_id LIMIT %u",
	         max_spans);
	if (n < 0 || (size_t)n >= sizeof head) {
		store_error_text(err, "query traces: too long");
		return -1;
	}
	sqlite3_stmt *st;
	if (reader_prepare(r, q, head, "thread_id", tail, "query spans", &st, err) < 0)
		return -1;
	if (sqlite3_bind_blob(st, CONTEXTS_TRACE_PARAM, t->trace_id, STORE_TRACE_ID_LEN, SQLITE_STATIC) !=
	    SQLITE_OK) {
		store_error_set(err, r->db, "query spans");
		sqlite3_finalize(st);
		return -1;
	}
	int rc;
	t->nspans = 0;
	t->spans_found = 0;
	while (t->nspans < max_spans && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_span *s = &spans[t->nspans++];
		const void *id = sqlite3_column_blob(st, 0);
		memset(s->span_id, 0, sizeof s->span_id);
		if (id && sqlite3_column_bytes(st, 0) == STORE_SPAN_ID_LEN)
			memcpy(s->span_id, id, sizeof s->span_id);
		int64_t c = sqlite3_column_int64(st, 1), found = sqlite3_column_int64(st, 2);
		s->samples = c > 0 ? (uint64_t)c : 0;
		t->spans_found = found > 0 ? (uint64_t)found : 0;
	}
	if (t->nspans < max_spans && rc != SQLITE_DONE) {
		store_error_set(err, r->db, "query spans");
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_finalize(st);
	t->spans = spans;
	return 0;
}

int store_query_traces(struct store_reader *r, const struct store_query *q, uint32_t limit,
                       uint32_t max_spans, int (*fn)(void *ctx, const struct store_trace *t),
                       void *ctx, struct store_error *err)
{
	if (reader_check(q, err) < 0)
		return -1;
	if (limit == 0 || limit > STORE_TRACES_MAX)
		limit = STORE_TRACES_MAX;
	if (max_spans > STORE_TRACE_SPANS_MAX)
		max_spans = STORE_TRACE_SPANS_MAX;
	char src[2048], head[4096];
	if (!reader_samples(q, true, src, sizeof src)) {
		store_error_text(err, "query traces: too long");
		return -1;
	}
	snprintf(head, sizeof head,
	         "SELECT trace_id, sum(%s) AS n, min(bucket_start), max(bucket_start + bucket_seconds) "
	         "FROM %s WHERE bucket_start >= ?1 AND bucket_start < ?2 AND length(trace_id) = %d",
	         q->no_idle ? "count - idle" : "count", src, STORE_TRACE_ID_LEN);
	char tail[96];
	snprintf(tail, sizeof tail, " GROUP BY trace_id HAVING n > 0 ORDER BY n DESC, trace_id LIMIT %u",
	         limit);
	struct store_span *spans = calloc(max_spans ? max_spans : 1, sizeof *spans);
	if (!spans) {
		store_error_text(err, "query traces: out of memory");
		return -1;
	}
	sqlite3_stmt *st = NULL;
	int ret = -1, rc = SQLITE_DONE;
	/* One snapshot for the traces and their spans; a pinned reader is in one already. */
	bool own = sqlite3_get_autocommit(r->db);
	if (own && store_exec(r->db, "BEGIN", err) < 0)
		goto out;
	if (reader_prepare(r, q, head, "thread_id", tail, "query traces", &st, err) < 0)
		goto out;
	/* At most limit rows (the LIMIT), each with at most max_spans spans. */
	for (uint32_t i = 0; i < limit && (rc = sqlite3_step(st)) == SQLITE_ROW; i++) {
		struct store_trace t = {0};
		const void *id = sqlite3_column_blob(st, 0);
		if (id)
			memcpy(t.trace_id, id, sizeof t.trace_id);
		int64_t c = sqlite3_column_int64(st, 1);
		t.samples = c > 0 ? (uint64_t)c : 0;
		t.first_unix = sqlite3_column_double(st, 2);
		t.last_unix = sqlite3_column_double(st, 3);
		t.spans = spans;
		if (max_spans && contexts_spans(r, q, src, max_spans, &t, spans, err) < 0)
			goto out;
		if (fn(ctx, &t) != 0) {
			store_error_text(err, "query: stopped by its callback");
			goto out;
		}
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		store_error_set(err, r->db, "query traces");
		goto out;
	}
	ret = 0;
out:
	sqlite3_finalize(st);
	if (own)
		store_exec(r->db, "COMMIT", NULL);
	free(spans);
	return ret;
}
