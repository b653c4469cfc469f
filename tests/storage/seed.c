/* The seeded history of the storage tests: see seed.h. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "seed.h"

const struct seed_frame frames[NSTACKS] = {
	{"main", "app.py", 1, 0},     {"handle", "app.py", 10, 0},
	{"query", "db.py", 20, 0},    {"render", "web.py", 30, 0},
	{"<GC>", NULL, 0, 2},         {"PyEval_EvalFrameDefault", "libpython3.12.so", 0, 1},
};
/* Stack s is frame s under stack parent[s]: they share prefixes (main;handle;...). */
const int parent[NSTACKS] = {-1, 0, 1, 1, 0, 2};

const pid_t pids[NTARGETS] = {1001, 1002, 1003};
const char *const apps[NTARGETS] = {"api", "api", "worker"};
const char *const envs[NTARGETS] = {"prod", "dev", "prod"};

/* Thread ids use all 64 bits: the store must give them back unchanged. */
uint64_t tid_of(int t, int th)
{
	return th ? 0xffff800000000000ULL + (uint64_t)t : 1000 + (uint64_t)t;
}

/* The count of a cell, 0 where there is none (a sparse history). */
uint64_t count_of(int t, int64_t k, int th, int s)
{
	if ((t + k + th + s) % 3 == 0)
		return 0;
	return 1 + (uint64_t)((t * 7 + k * 3 + th * 5 + s) % 11);
}

/* An hour boundary `days` days ago: old enough for every retention step. */
int64_t base_days_ago(int days)
{
	int64_t now = (int64_t)time(NULL);
	return (now - days * 86400) / 3600 * 3600;
}

/* Adds bucket k (of base) for every target, thread and stack to b. */
void batch_add_bucket(struct store_batch *b, const int tix[NTARGETS], int64_t base,
                      int64_t k, uint64_t *rows_out)
{
	for (int t = 0; t < NTARGETS; t++)
		for (int th = 0; th < NTHREADS; th++)
			for (int s = 0; s < NSTACKS; s++) {
				uint64_t c = count_of(t, k, th, s);
				if (!c)
					continue;
				cr_assert_eq(store_batch_samples(b, tix[t], base + k * BUCKET_S, BUCKET_S,
				                                 tid_of(t, th), s, c, 0),
				             0);
				if (rows_out)
					(*rows_out)++;
			}
}

/* A batch declaring every target, a session each, the frames and stacks. */
struct store_batch *batch_begin(int tix[NTARGETS])
{
	struct store_batch *b = store_batch_new();
	cr_assert_not_null(b);
	for (int t = 0; t < NTARGETS; t++) {
		const char *keys[] = {"app", "env"};
		const char *values[] = {apps[t], envs[t]};
		struct store_target_info info = {
			.pid = pids[t],
			.start_time = 5000 + (uint64_t)t,
			.uid = 1000,
			.executable = "/usr/bin/python3.12",
			.command_line = "python3.12 app.py",
			.python_version = "3.12.3",
			.nlabels = 2,
			.label_keys = keys,
			.label_values = values,
		};
		tix[t] = store_batch_target(b, &info);
		cr_assert_eq(tix[t], t);
		cr_assert(store_batch_session(b, tix[t], 1.7e9, 0, 100, "wall") >= 0);
	}
	for (int s = 0; s < NSTACKS; s++)
		cr_assert_eq(store_batch_frame(b, frames[s].function, frames[s].file, frames[s].line,
		                               frames[s].kind, 0),
		             s);
	for (int s = 0; s < NSTACKS; s++)
		cr_assert_eq(store_batch_stack(b, parent[s], s), s);
	return b;
}

/* Buckets [k0, k1) of base in one batch; its sample rows. */
uint64_t submit_buckets(struct store_writer *w, int64_t base, int64_t k0, int64_t k1)
{
	int tix[NTARGETS];
	struct store_batch *b = batch_begin(tix);
	uint64_t rows = 0;
	for (int64_t k = k0; k < k1; k++)
		batch_add_bucket(b, tix, base, k, &rows);
	cr_assert_eq(store_batch_sample_rows(b), rows);
	store_writer_submit(w, b);
	return rows;
}

/* What a query should select, in the seed's coordinates. */

uint64_t expected(const struct expect *e, uint64_t per_stack[NSTACKS])
{
	uint64_t total = 0;
	memset(per_stack, 0, NSTACKS * sizeof *per_stack);
	for (int t = 0; t < NTARGETS; t++) {
		if (!(e->targets & (1u << t)))
			continue;
		for (int th = 0; th < NTHREADS; th++) {
			if (e->thread_t >= 0 && (t != e->thread_t || th != e->thread_th))
				continue;
			for (int64_t k = e->k0; k < e->k1; k++)
				for (int s = 0; s < NSTACKS; s++) {
					uint64_t c = count_of(t, k, th, s) * (uint64_t)e->times;
					per_stack[s] += c;
					total += c;
				}
		}
	}
	return total;
}

/* ---- reading results back ---- */


/* Which seeded stack the frames spell, or -1. */
int stack_of(const struct store_row *row)
{
	for (int s = 0; s < NSTACKS; s++) {
		uint32_t depth = 0;
		for (int at = s; at >= 0; at = parent[at])
			depth++;
		if (depth != row->depth)
			continue;
		bool same = true;
		int at = s;
		for (uint32_t i = depth; i-- > 0 && same; at = parent[at]) {
			const struct store_frame *f = &row->frames[i];
			same = strcmp(f->function, frames[at].function) == 0 &&
			       (f->file && frames[at].file ? strcmp(f->file, frames[at].file) == 0
			                                   : f->file == frames[at].file) &&
			       f->line == frames[at].line && f->kind == frames[at].kind;
		}
		if (same)
			return s;
	}
	return -1;
}

int tally_row(void *ctx, const struct store_row *row)
{
	struct tally *t = ctx;
	t->rows++;
	int s = stack_of(row);
	if (s < 0) {
		if (!t->unknown++ && row->depth)
			snprintf(t->first_unknown, sizeof t->first_unknown, "depth %u, leaf %s",
			         row->depth, row->frames[row->depth - 1].function);
		return 0;
	}
	t->per_stack[s] += row->count;
	return 0;
}

uint64_t run_query(struct store_reader *r, const struct store_query *q, struct tally *t)
{
	memset(t, 0, sizeof *t);
	uint64_t total = 0;
	struct store_error err = {{0}};
	cr_assert_eq(store_query_stacks(r, q, tally_row, t, &total, &err), 0, "query: %s", err.msg);
	cr_assert_eq(t->unknown, 0, "a stack the seed never wrote: %s", t->first_unknown);
	return total;
}

/* The query answers exactly what the seed says, stack by stack. */
void check_query(struct store_reader *r, const struct store_query *q,
                 const struct expect *e, const char *what)
{
	uint64_t want[NSTACKS];
	uint64_t want_total = expected(e, want);
	struct tally t;
	uint64_t total = run_query(r, q, &t);
	cr_expect_eq(total, want_total, "%s: total %llu, expected %llu", what,
	             (unsigned long long)total, (unsigned long long)want_total);
	for (int s = 0; s < NSTACKS; s++)
		cr_expect_eq(t.per_stack[s], want[s], "%s: stack %d has %llu, expected %llu", what, s,
		             (unsigned long long)t.per_stack[s], (unsigned long long)want[s]);
}

struct store_query range_query(int64_t base, int64_t k0, int64_t k1)
{
	return (struct store_query){.from_unix = (double)(base + k0 * BUCKET_S),
	                            .until_unix = (double)(base + k1 * BUCKET_S)};
}

/* ---- looking at the file from outside ---- */

sqlite3 *raw_open(const char *path)
{
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK, "open %s",
	             path);
	sqlite3_busy_timeout(db, 5000);
	return db;
}

int64_t raw_int(const char *path, const char *sql)
{
	sqlite3 *db = raw_open(path);
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
	             sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: %s", sql, sqlite3_errmsg(db));
	int64_t v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

void raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = raw_open(path);
	char *msg = NULL;
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql,
	             msg ? msg : "?");
	sqlite3_close(db);
}

/* PRAGMA integrity_check's first line. */
void raw_integrity(const char *path, char *out, size_t len)
{
	sqlite3 *db = raw_open(path);
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "integrity_check: %s", sqlite3_errmsg(db));
	snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	sqlite3_close(db);
}

void db_path(char *out, size_t len)
{
	char dir[PATH_MAX - 32];
	scratch_dir(dir, sizeof dir);
	snprintf(out, len, "%s/history.db", dir);
}

struct store_writer *open_writer(const char *path)
{
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	cr_assert_not_null(w, "store_writer_open: %s", err.msg);
	return w;
}

struct store_reader *open_reader(const char *path)
{
	struct store_error err = {{0}};
	struct store_reader *r = store_reader_open(path, &err);
	cr_assert_not_null(r, "store_reader_open: %s", err.msg);
	return r;
}

void expect_written(struct store_writer *w, const char *what)
{
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_assert(!st.failing, "%s: writer failing: %s", what, st.last_error);
	cr_assert_eq(st.pending_batches, 0, "%s: %llu batches still pending", what,
	             (unsigned long long)st.pending_batches);
}

/* ---- writing and querying ---- */

/* Batches overlapping by one bucket: counts of a bucket written twice add up. */
void seed_overlapping(struct store_writer *w, int64_t base, int64_t from, int64_t to, int per)
{
	for (int64_t k0 = from; k0 < to; k0 += per) {
		int64_t k1 = k0 + per + 1 < to ? k0 + per + 1 : to;
		submit_buckets(w, base, k0, k1);
	}
}

void trace_of(int i, uint8_t out[STORE_TRACE_ID_LEN])
{
	for (int b = 0; b < STORE_TRACE_ID_LEN; b++)
		out[b] = (uint8_t)(0xa0 + b);
	out[STORE_TRACE_ID_LEN - 2] = (uint8_t)(i >> 8);
	out[STORE_TRACE_ID_LEN - 1] = (uint8_t)i;
}

void span_of(int i, int j, uint8_t out[STORE_SPAN_ID_LEN])
{
	for (int b = 0; b < STORE_SPAN_ID_LEN; b++)
		out[b] = (uint8_t)(0x50 + b);
	out[STORE_SPAN_ID_LEN - 3] = (uint8_t)j;
	out[STORE_SPAN_ID_LEN - 2] = (uint8_t)(i >> 8);
	out[STORE_SPAN_ID_LEN - 1] = (uint8_t)i;
}

struct store_batch *context_batch(int64_t bucket_start, int first, int n, size_t pad)
{
	struct store_batch *b = store_batch_new();
	const char *keys[] = {"app"}, *values[] = {"ctx"};
	struct store_target_info info = {.pid = CTX_PID, .start_time = 7, .executable = "python3",
	                                 .nlabels = 1, .label_keys = keys, .label_values = values};
	int t = store_batch_target(b, &info);
	int32_t fmain = store_batch_frame(b, "main", "shop.py", 1, 0, 1);
	int32_t fco = store_batch_frame(b, "checkout", "shop.py", 10, 0, 9);
	int32_t fcart = store_batch_frame(b, "cart", "shop.py", 20, 0, 19);
	int32_t floop = store_batch_frame(b, "loop", "shop.py", 30, 0, 29);
	int32_t root = store_batch_stack(b, -1, fmain);
	int32_t sco = store_batch_stack(b, root, fco), scart = store_batch_stack(b, root, fcart);
	int32_t sloop = store_batch_stack(b, root, floop);
	cr_assert(t >= 0 && sco >= 0 && scart >= 0 && sloop >= 0);
	char padding[512];
	cr_assert_lt(pad, sizeof padding);
	memset(padding, 'x', pad);
	padding[pad] = '\0';
	for (int i = first; i < first + n; i++) {
		uint8_t trace[STORE_TRACE_ID_LEN], s0[STORE_SPAN_ID_LEN], s1[STORE_SPAN_ID_LEN];
		trace_of(i, trace);
		span_of(i, 0, s0);
		span_of(i, 1, s1);
		char l0[600], l1[600];
		snprintf(l0, sizeof l0, "route=/checkout%s", padding);
		snprintf(l1, sizeof l1, "route=/cart%s\nuser=vip", padding);
		int32_t c0 = store_batch_context(b, trace, s0, l0), c1 = store_batch_context(b, trace, s1, l1);
		cr_assert(c0 >= 0 && c1 >= 0, "contexts of trace %d", i);
		cr_assert_eq(store_batch_context_samples(b, t, bucket_start, 10, 1, sco, c0, CTX_CHECKOUT, 0), 0);
		cr_assert_eq(store_batch_context_samples(b, t, bucket_start, 10, 1, scart, c1, CTX_CART, 1), 0);
	}
	cr_assert_eq(store_batch_samples(b, t, bucket_start, 10, 1, sco, (uint64_t)n * CTX_CHECKOUT, 0), 0);
	cr_assert_eq(store_batch_samples(b, t, bucket_start, 10, 1, scart, (uint64_t)n * CTX_CART,
	                                 (uint64_t)n), 0);
	cr_assert_eq(store_batch_samples(b, t, bucket_start, 10, 1, sloop, CTX_LOOP, 0), 0);
	return b;
}

uint64_t query_total(struct store_reader *r, const struct store_query *q)
{
	struct store_error err = {{0}};
	uint64_t total = 0;
	cr_assert_eq(store_query_stacks(r, q, NULL, NULL, &total, &err), 0, "query: %s", err.msg);
	return total;
}
