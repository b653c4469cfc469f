/*
 * The history store on real SQLite files: what is written is what queries
 * return, filter by filter; retention keeps whole-bucket totals exact and
 * drops the oldest first, with the stacks only they used, so churning
 * stacks cannot outgrow the size cap; the schema is versioned; a store
 * that cannot be opened yet, a read-only file, an I/O error and a full disk
 * lose nothing submitted within the memory bound and recover by themselves;
 * files that are not ours to write are left byte for byte; SIGKILL at any
 * moment leaves a sound database holding every batch synced before it.
 *
 * The seeded data is a pure function of its coordinates (target, bucket,
 * thread, stack), so the expected answer of any query is computed from the
 * same loop that wrote it.  sqlite3.h is used only to look at or tamper with
 * the file from outside the store.
 */
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
#include "store.h"

TestSuite(storage, .init = helpers_init, .fini = helpers_fini);

/* ---- the seeded history ---- */

#define NTARGETS 3
#define NTHREADS 2
#define NSTACKS 6
#define BUCKET_S 10

static const struct {
	const char *function, *file;
	int line, kind;
} frames[NSTACKS] = {
	{"main", "app.py", 1, 0},     {"handle", "app.py", 10, 0},
	{"query", "db.py", 20, 0},    {"render", "web.py", 30, 0},
	{"<GC>", NULL, 0, 2},         {"PyEval_EvalFrameDefault", "libpython3.12.so", 0, 1},
};
/* Stack s is frame s under stack parent[s]: they share prefixes (main;handle;...). */
static const int parent[NSTACKS] = {-1, 0, 1, 1, 0, 2};

static const pid_t pids[NTARGETS] = {1001, 1002, 1003};
static const char *const apps[NTARGETS] = {"api", "api", "worker"};
static const char *const envs[NTARGETS] = {"prod", "dev", "prod"};

/* Thread ids use all 64 bits: the store must give them back unchanged. */
static uint64_t tid_of(int t, int th)
{
	return th ? 0xffff800000000000ULL + (uint64_t)t : 1000 + (uint64_t)t;
}

/* The count of a cell, 0 where there is none (a sparse history). */
static uint64_t count_of(int t, int64_t k, int th, int s)
{
	if ((t + k + th + s) % 3 == 0)
		return 0;
	return 1 + (uint64_t)((t * 7 + k * 3 + th * 5 + s) % 11);
}

/* An hour boundary `days` days ago: old enough for every retention step. */
static int64_t base_days_ago(int days)
{
	int64_t now = (int64_t)time(NULL);
	return (now - days * 86400) / 3600 * 3600;
}

/* Adds bucket k (of base) for every target, thread and stack to b. */
static void batch_add_bucket(struct store_batch *b, const int tix[NTARGETS], int64_t base,
                             int64_t k, uint64_t *rows_out)
{
	for (int t = 0; t < NTARGETS; t++)
		for (int th = 0; th < NTHREADS; th++)
			for (int s = 0; s < NSTACKS; s++) {
				uint64_t c = count_of(t, k, th, s);
				if (!c)
					continue;
				cr_assert_eq(store_batch_samples(b, tix[t], base + k * BUCKET_S, BUCKET_S,
				                                 tid_of(t, th), s, c),
				             0);
				if (rows_out)
					(*rows_out)++;
			}
}

/* A batch declaring every target, a session each, the frames and stacks. */
static struct store_batch *batch_begin(int tix[NTARGETS])
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
		                               frames[s].kind),
		             s);
	for (int s = 0; s < NSTACKS; s++)
		cr_assert_eq(store_batch_stack(b, parent[s], s), s);
	return b;
}

/* Buckets [k0, k1) of base in one batch; its sample rows. */
static uint64_t submit_buckets(struct store_writer *w, int64_t base, int64_t k0, int64_t k1)
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
struct expect {
	unsigned targets; /* bit t */
	int thread_t, thread_th; /* -1: every thread */
	int64_t k0, k1;          /* buckets [k0, k1) */
	int times;               /* how many times each bucket was written */
};

static uint64_t expected(const struct expect *e, uint64_t per_stack[NSTACKS])
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

struct tally {
	uint64_t per_stack[NSTACKS];
	unsigned rows, unknown;
	char first_unknown[256];
};

/* Which seeded stack the frames spell, or -1. */
static int stack_of(const struct store_row *row)
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

static int tally_row(void *ctx, const struct store_row *row)
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

static uint64_t run_query(struct store_reader *r, const struct store_query *q, struct tally *t)
{
	memset(t, 0, sizeof *t);
	uint64_t total = 0;
	struct store_error err = {{0}};
	cr_assert_eq(store_query_stacks(r, q, tally_row, t, &total, &err), 0, "query: %s", err.msg);
	cr_assert_eq(t->unknown, 0, "a stack the seed never wrote: %s", t->first_unknown);
	return total;
}

/* The query answers exactly what the seed says, stack by stack. */
static void check_query(struct store_reader *r, const struct store_query *q,
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

static struct store_query range_query(int64_t base, int64_t k0, int64_t k1)
{
	return (struct store_query){.from_unix = (double)(base + k0 * BUCKET_S),
	                            .until_unix = (double)(base + k1 * BUCKET_S)};
}

/* ---- looking at the file from outside ---- */

static sqlite3 *raw_open(const char *path)
{
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK, "open %s",
	             path);
	sqlite3_busy_timeout(db, 5000);
	return db;
}

static int64_t raw_int(const char *path, const char *sql)
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

static void raw_exec(const char *path, const char *sql)
{
	sqlite3 *db = raw_open(path);
	char *msg = NULL;
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK, "%s: %s", sql,
	             msg ? msg : "?");
	sqlite3_close(db);
}

/* PRAGMA integrity_check's first line. */
static void raw_integrity(const char *path, char *out, size_t len)
{
	sqlite3 *db = raw_open(path);
	sqlite3_stmt *st = NULL;
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "integrity_check: %s", sqlite3_errmsg(db));
	snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	sqlite3_close(db);
}

static void db_path(char *out, size_t len)
{
	char dir[PATH_MAX - 32];
	scratch_dir(dir, sizeof dir);
	snprintf(out, len, "%s/history.db", dir);
}

static struct store_writer *open_writer(const char *path)
{
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	cr_assert_not_null(w, "store_writer_open: %s", err.msg);
	return w;
}

static struct store_reader *open_reader(const char *path)
{
	struct store_error err = {{0}};
	struct store_reader *r = store_reader_open(path, &err);
	cr_assert_not_null(r, "store_reader_open: %s", err.msg);
	return r;
}

static void expect_written(struct store_writer *w, const char *what)
{
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_assert(!st.failing, "%s: writer failing: %s", what, st.last_error);
	cr_assert_eq(st.pending_batches, 0, "%s: %llu batches still pending", what,
	             (unsigned long long)st.pending_batches);
}

/* ---- writing and querying ---- */

/* Batches overlapping by one bucket: counts of a bucket written twice add up. */
static void seed_overlapping(struct store_writer *w, int64_t base, int64_t from, int64_t to, int per)
{
	for (int64_t k0 = from; k0 < to; k0 += per) {
		int64_t k1 = k0 + per + 1 < to ? k0 + per + 1 : to;
		submit_buckets(w, base, k0, k1);
	}
}

Test(storage, write_then_query_every_filter, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1), n = 60;
	struct store_writer *w = open_writer(path);
	/* Written once: buckets [0, 30); twice (overlapping batches): 30..60 in batches of 5+1. */
	submit_buckets(w, base, 0, 30);
	seed_overlapping(w, base, 30, n, 5);
	store_writer_sync(w);
	expect_written(w, "seed");
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_expect_gt(st.rows_written, 0);
	cr_expect_gt(st.db_bytes, 0);

	struct store_reader *r = open_reader(path);
	/* Buckets 30, 35, 40, 45, 50, 55 sit on two batches' edge: written twice. */
	struct expect once = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 30, .times = 1};
	struct store_query q = range_query(base, 0, 30);
	check_query(r, &q, &once, "first 30 buckets");

	struct expect e = {.targets = 7, .thread_t = -1, .k0 = 31, .k1 = 35, .times = 1};
	q = range_query(base, 31, 35);
	check_query(r, &q, &e, "between batch edges");
	e = (struct expect){.targets = 7, .thread_t = -1, .k0 = 35, .k1 = 36, .times = 2};
	q = range_query(base, 35, 36);
	check_query(r, &q, &e, "bucket written by two batches");

	/* Range edges: from is inclusive, until exclusive, on bucket starts. */
	e = (struct expect){.targets = 7, .thread_t = -1, .k0 = 10, .k1 = 20, .times = 1};
	q = range_query(base, 10, 20);
	check_query(r, &q, &e, "[10, 20)");
	q.from_unix -= 0.5;
	check_query(r, &q, &e, "[10 - 0.5 s, 20)");
	q.from_unix += 0.5;
	q.until_unix += 0.5;
	e.k1 = 21;
	check_query(r, &q, &e, "[10, 20 + 0.5 s)");
	q = range_query(base, 10, 10);
	e.k1 = 10;
	check_query(r, &q, &e, "empty range");
	q = (struct store_query){.from_unix = (double)(base - 86400), .until_unix = (double)base};
	check_query(r, &q, &e, "before everything");
	/* until 0 is now: everything written is in the past. */
	q = (struct store_query){.from_unix = 0, .until_unix = 0};
	struct tally t;
	uint64_t all = run_query(r, &q, &t);
	uint64_t want[NSTACKS];
	e = (struct expect){.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 60, .times = 1};
	uint64_t want_all = expected(&e, want);
	e.k0 = 35;
	for (; e.k0 < n; e.k0 += 5) {
		e.k1 = e.k0 + 1;
		want_all += expected(&e, want);
	}
	cr_expect_eq(all, want_all, "everything: %llu, expected %llu", (unsigned long long)all,
	             (unsigned long long)want_all);
	cr_expect_eq(t.rows, NSTACKS, "one row per distinct stack, got %u", t.rows);

	/* By pid, by target id, by labels, by thread: over the buckets written once. */
	q = range_query(base, 0, 30);
	q.pid = 1002;
	once.targets = 1u << 1;
	check_query(r, &q, &once, "pid 1002");
	q.pid = 4242;
	once.targets = 0;
	check_query(r, &q, &once, "a pid never seen");

	q = range_query(base, 0, 30);
	q.target_id = raw_int(path, "SELECT id FROM targets WHERE pid = 1003");
	once.targets = 1u << 2;
	check_query(r, &q, &once, "target id of pid 1003");
	q.pid = 1001; /* both must hold */
	once.targets = 0;
	check_query(r, &q, &once, "target id of 1003 with pid 1001");

	const char *k1[] = {"app"}, *v1[] = {"api"};
	q = range_query(base, 0, 30);
	q.nlabels = 1;
	q.label_keys = k1;
	q.label_values = v1;
	once.targets = 3;
	check_query(r, &q, &once, "app=api");
	const char *k2[] = {"app", "env"}, *v2[] = {"api", "prod"};
	q.nlabels = 2;
	q.label_keys = k2;
	q.label_values = v2;
	once.targets = 1;
	check_query(r, &q, &once, "app=api env=prod");
	const char *v3[] = {"api", "staging"};
	q.label_values = v3;
	once.targets = 0;
	check_query(r, &q, &once, "app=api env=staging");

	q = range_query(base, 0, 30);
	q.by_thread = true;
	q.thread_id = tid_of(1, 1);
	once = (struct expect){.targets = 7, .thread_t = 1, .thread_th = 1, .k0 = 0, .k1 = 30,
	                       .times = 1};
	check_query(r, &q, &once, "thread with the high bit set");
	q.thread_id = tid_of(2, 0);
	q.pid = 1003;
	once.thread_t = 2;
	once.thread_th = 0;
	check_query(r, &q, &once, "thread of pid 1003");

	/* Targets, labels and sessions landed once each, whatever the batches repeated. */
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM targets"), NTARGETS);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM target_labels"), 2 * NTARGETS);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM sessions"), NTARGETS);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM stacks"), NSTACKS);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM frames"), NSTACKS);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM frames WHERE file = 0"), 1);

	store_reader_close(r);
	store_writer_close(w);
}

/* A batch refuses indexes that are not in it, so the writer never meets one. */
Test(storage, batch_refuses_dangling_indexes)
{
	struct store_batch *b = store_batch_new();
	cr_assert_not_null(b);
	cr_expect_eq(store_batch_frame(b, "f", "x.py", 1, 3), -1, "kind 3");
	cr_expect_eq(store_batch_stack(b, -1, 0), -1, "no frame 0 yet");
	int32_t f = store_batch_frame(b, "f", "x.py", 1, 0);
	cr_assert_eq(f, 0);
	cr_expect_eq(store_batch_stack(b, 0, f), -1, "no stack 0 yet");
	cr_assert_eq(store_batch_stack(b, -1, f), 0);
	cr_expect_eq(store_batch_samples(b, 0, 0, 10, 1, 0, 1), -1, "no target 0 yet");
	struct store_target_info info = {.pid = 1, .start_time = 1};
	cr_assert_eq(store_batch_target(b, &info), 0);
	cr_expect_eq(store_batch_samples(b, 0, 0, 10, 1, 1, 1), -1, "no stack 1");
	cr_expect_eq(store_batch_samples(b, 0, 0, 0, 1, 0, 1), -1, "zero-width bucket");
	cr_expect_eq(store_batch_samples(b, 0, 0, 10, 1, 0, 1), 0);
	cr_expect_eq(store_batch_session(b, 1, 1, 0, 100, "wall"), -1, "no target 1");
	cr_expect_eq(store_batch_sample_rows(b), 1);
	store_batch_free(b);
}

/* ---- schema ---- */

Test(storage, schema_reopen_keeps_data_and_refuses_newer, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base, 0, 10);
	store_writer_close(w); /* close writes what is pending */

	cr_expect_eq(raw_int(path, "PRAGMA user_version"), 1);
	cr_expect_eq(raw_int(path, "PRAGMA auto_vacuum"), 2, "incremental auto-vacuum");
	char mode[32];
	{
		sqlite3 *db = raw_open(path);
		sqlite3_stmt *st = NULL;
		cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
		cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
		snprintf(mode, sizeof mode, "%s", (const char *)sqlite3_column_text(st, 0));
		sqlite3_finalize(st);
		sqlite3_close(db);
	}
	cr_expect_str_eq(mode, "wal");

	w = open_writer(path);
	submit_buckets(w, base, 10, 20);
	store_writer_sync(w);
	expect_written(w, "reopened");
	store_writer_close(w);

	struct store_reader *r = open_reader(path);
	struct store_query q = range_query(base, 0, 20);
	struct expect e = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 20, .times = 1};
	check_query(r, &q, &e, "both sessions of the writer");
	store_reader_close(r);

	raw_exec(path, "PRAGMA user_version = 99");
	w = open_writer(path);
	store_writer_sync(w);
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_expect(st.failing && !st.open, "a newer schema is opened for writing");
	cr_expect(strstr(st.last_error, "newer") && strstr(st.last_error, "99"), "error: %s",
	          st.last_error);
	store_writer_close(w);
	struct store_error err = {{0}};
	cr_expect_null(store_reader_open(path, &err), "a newer schema is opened for reading");
	cr_expect(strstr(err.msg, "newer"), "error: %s", err.msg);
	/* Refusing did not touch it. */
	cr_expect_eq(raw_int(path, "PRAGMA user_version"), 99);

	char missing[PATH_MAX + 8];
	snprintf(missing, sizeof missing, "%s.none", path);
	memset(&err, 0, sizeof err);
	cr_expect_null(store_reader_open(missing, &err));
	cr_expect(err.msg[0], "an error message for a missing file");
}

/* ---- opening, on the writer's thread ---- */

/* The whole file, malloc'd, into *len; fails the test if it cannot be read. */
static char *file_bytes(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "open %s: %s", path, strerror(errno));
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	cr_assert(!ferror(f), "read %s", path);
	fclose(f);
	*len = n;
	return buf;
}

static void expect_not_open(struct store_writer *w, const char *path, const char *why,
                            const char *what)
{
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_expect(st.failing, "%s: the writer does not say it is failing", what);
	cr_expect(!st.open, "%s: the writer says the database is open", what);
	cr_expect(strstr(st.last_error, "cannot open") && strstr(st.last_error, path) &&
	                  strstr(st.last_error, why),
	          "%s: last error \"%s\" does not say \"cannot open\", the path and \"%s\"", what,
	          st.last_error, why);
}

/*
 * Until its directory exists, the store cannot be opened: batches wait
 * (within their bound, oldest dropped first), sync does not hang, the
 * status names the file; once the directory appears everything waiting is
 * written, without the caller opening anything again.
 */
Test(storage, open_waits_for_its_directory, .timeout = 60)
{
	char dir[PATH_MAX - 64], state[PATH_MAX - 32], path[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(state, sizeof state, "%s/state", dir);
	snprintf(path, sizeof path, "%s/history.db", state);
	/* First the directory is a file... */
	FILE *f = fopen(state, "w");
	cr_assert_not_null(f);
	fclose(f);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	uint64_t per = 24 * 10; /* 24 rows a bucket, whatever the bucket */
	store_writer_set_limits(w, 3 * per, 0);
	int nbatches = 5;
	for (int i = 0; i < nbatches; i++)
		cr_assert_eq(submit_buckets(w, base, 10 * i, 10 * i + 10), per);
	store_writer_sync(w);
	expect_not_open(w, path, "unable to open", "the directory is a file");
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_expect_eq(st.pending_rows, 3 * per, "pending %llu rows", (unsigned long long)st.pending_rows);
	cr_expect_eq(st.dropped_rows, 2 * per, "dropped %llu rows", (unsigned long long)st.dropped_rows);
	cr_expect_eq(st.rows_written, 0);

	/* ...then missing: retries (on the writer's schedule) go on failing and lose nothing more. */
	cr_assert_eq(unlink(state), 0);
	usleep(1200 * 1000);
	store_writer_sync(w);
	expect_not_open(w, path, "unable to open", "the directory is missing");
	store_writer_status(w, &st);
	cr_expect_eq(st.pending_rows, 3 * per);
	cr_expect_eq(st.dropped_rows, 2 * per);

	/* The directory appears: the writer opens the store by itself, within a retry. */
	cr_assert_eq(mkdir(state, 0700), 0);
	for (int i = 0; i < 50; i++) {
		store_writer_status(w, &st);
		if (!st.pending_rows)
			break;
		usleep(100 * 1000);
	}
	store_writer_status(w, &st);
	cr_expect(st.open && !st.failing, "not open after the directory appeared: %s", st.last_error);
	cr_expect_eq(st.pending_rows, 0, "still pending: %llu rows", (unsigned long long)st.pending_rows);
	cr_expect_eq(st.rows_written, 3 * per);
	cr_expect_eq(st.dropped_rows, 2 * per);

	struct store_reader *r = open_reader(path);
	struct expect e = {.targets = 0, .thread_t = -1, .k0 = 0, .k1 = 20, .times = 1};
	struct store_query q = range_query(base, 0, 20);
	check_query(r, &q, &e, "the two oldest batches, dropped past the bound");
	e = (struct expect){.targets = 7, .thread_t = -1, .k0 = 20, .k1 = 50, .times = 1};
	q = range_query(base, 20, 50);
	check_query(r, &q, &e, "the three batches that waited");
	store_reader_close(r);
	store_writer_close(w);
}

/*
 * Files the writer must not take: it says why, keeps the batches, never
 * writes to the file (byte for byte the same after retries and a close).
 */
static void expect_refused(const char *path, const char *why, const char *what)
{
	size_t len_before, len_after;
	char *before = file_bytes(path, &len_before);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	uint64_t per = submit_buckets(w, base, 0, 10);
	store_writer_sync(w);
	expect_not_open(w, path, why, what);
	/* sync asks for another attempt now: a retry refuses the same way. */
	store_writer_sync(w);
	expect_not_open(w, path, why, what);
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_expect_eq(st.pending_rows, per, "%s: %llu rows pending", what,
	             (unsigned long long)st.pending_rows);
	cr_expect_eq(st.rows_written, 0, "%s", what);
	store_writer_close(w);
	char *after = file_bytes(path, &len_after);
	cr_expect(len_before == len_after && memcmp(before, after, len_before) == 0,
	          "%s: the file changed (%zu bytes, then %zu)", what, len_before, len_after);
	free(before);
	free(after);
}

Test(storage, refuses_files_it_must_not_write, .timeout = 60)
{
	char dir[PATH_MAX - 64], path[PATH_MAX];
	scratch_dir(dir, sizeof dir);

	/* Not a database at all. */
	snprintf(path, sizeof path, "%s/text.db", dir);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	for (int i = 0; i < 200; i++)
		fprintf(f, "line %d of a file that is not a database\n", i);
	fclose(f);
	expect_refused(path, "not a database", "a text file");

	/* A history of a newer pyprofd, in rollback-journal mode: switching it to WAL would write. */
	snprintf(path, sizeof path, "%s/future.db", dir);
	sqlite3 *db = NULL;
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db,
	                          "CREATE TABLE samples(x); INSERT INTO samples VALUES (1); "
	                          "PRAGMA user_version = 2",
	                          NULL, NULL, NULL),
	             SQLITE_OK);
	sqlite3_close(db);
	expect_refused(path, "newer", "schema version 2");

	/* Someone else's database: tables, no schema version. */
	snprintf(path, sizeof path, "%s/foreign.db", dir);
	cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "CREATE TABLE notes(x); INSERT INTO notes VALUES ('mine')", NULL,
	                          NULL, NULL),
	             SQLITE_OK);
	sqlite3_close(db);
	expect_refused(path, "not a pyprofd history", "a foreign database");
}

/* A cycle in the prefix tree (a corrupt file) gives an error, not a hang. */
Test(storage, query_survives_a_cycle_in_stacks, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base, 0, 2);
	store_writer_close(w);
	/* main's parent becomes main;handle: every stack now loops. */
	raw_exec(path, "UPDATE stacks SET parent = (SELECT max(id) FROM stacks WHERE parent != 0 "
	               "AND frame = (SELECT id FROM frames WHERE line = 10)) WHERE parent = 0");
	struct store_reader *r = open_reader(path);
	struct store_query q = range_query(base, 0, 2);
	struct store_error err = {{0}};
	struct tally t;
	memset(&t, 0, sizeof t);
	uint64_t total = 0;
	cr_expect_eq(store_query_stacks(r, &q, tally_row, &t, &total, &err), -1);
	cr_expect(strstr(err.msg, "cycle"), "error: %s", err.msg);
	store_reader_close(r);
}

/* ---- retention ---- */

/* Per (target, thread, stack) over each whole coarse bucket, the store agrees with the seed. */
static void check_coarse(struct store_reader *r, int64_t base, int64_t nbuckets, int64_t width_k,
                         const char *what)
{
	for (int64_t k0 = 0; k0 < nbuckets; k0 += width_k)
		for (int t = 0; t < NTARGETS; t++)
			for (int th = 0; th < NTHREADS; th++) {
				struct store_query q = range_query(base, k0, k0 + width_k);
				q.pid = pids[t];
				q.by_thread = true;
				q.thread_id = tid_of(t, th);
				struct expect e = {.targets = 1u << t, .thread_t = t, .thread_th = th,
				                   .k0 = k0, .k1 = k0 + width_k, .times = 1};
				char ctx[128];
				snprintf(ctx, sizeof ctx, "%s: buckets [%lld, %lld) target %d thread %d", what,
				         (long long)k0, (long long)(k0 + width_k), t, th);
				check_query(r, &q, &e, ctx);
			}
}

Test(storage, retention_merges_keep_whole_bucket_totals, .timeout = 180)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	/* Two hours of 10 s buckets, three days old, plus a bucket of a minute ago. */
	int64_t base = base_days_ago(3), n = 720;
	int64_t recent = ((int64_t)time(NULL) - 60) / BUCKET_S * BUCKET_S;
	struct store_writer *w = open_writer(path);
	for (int64_t k = 0; k < n; k += 60)
		submit_buckets(w, base, k, k + 60);
	submit_buckets(w, recent, 0, 1);
	store_writer_sync(w);
	expect_written(w, "seed");
	struct store_reader *r = open_reader(path);
	check_coarse(r, base, n, 6, "before");
	int64_t rows_before = raw_int(path, "SELECT count(*) FROM samples");

	/* Older than an hour into minutes. */
	const struct store_retention_step minutes[] = {{3600, 60}};
	store_writer_retention(w, minutes, 1);
	store_writer_sync(w);
	expect_written(w, "minutes");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM samples WHERE bucket_start < "
	                           "strftime('%s','now') - 3600 AND bucket_seconds != 60"),
	             0, "every old bucket is a minute wide");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM samples WHERE bucket_start % 60 != 0 "
	                           "AND bucket_seconds = 60"),
	             0, "minute buckets start on minutes");
	cr_expect_gt(raw_int(path, "SELECT count(*) FROM samples WHERE bucket_seconds = 10"), 0,
	             "the recent bucket is left alone");
	cr_expect_lt(raw_int(path, "SELECT count(*) FROM samples"), rows_before);
	check_coarse(r, base, n, 6, "minutes");

	/* Then older than a day into hours, and the minutes rule again (a no-op now). */
	const struct store_retention_step hours[] = {{3600, 60}, {86400, 3600}};
	store_writer_retention(w, hours, 2);
	store_writer_sync(w);
	expect_written(w, "hours");
	cr_expect_eq(raw_int(path, "SELECT count(DISTINCT bucket_start) FROM samples WHERE "
	                           "bucket_seconds = 3600"),
	             2);
	check_coarse(r, base, n, 360, "hours");
	struct store_query q = range_query(recent, 0, 1);
	struct expect e = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 1, .times = 1};
	check_query(r, &q, &e, "recent bucket");
	store_reader_close(r);
	store_writer_close(w);

	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}

/*
 * A backlog of many hours merges an hour per transaction, and batches that
 * come meanwhile are written between slices (the merge stops for them and
 * goes on where it stopped): at the end nothing old is left fine, every
 * whole coarse bucket holds the totals it had, and every batch is there.
 */
Test(storage, retention_backlog_merges_in_slices_around_batches, .timeout = 180)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	/* Twelve hours of 10 s buckets, three days old: twelve slices for the minutes step. */
	int64_t base = base_days_ago(3), n = 12 * 360;
	struct store_writer *w = open_writer(path);
	for (int64_t k = 0; k < n; k += 360)
		submit_buckets(w, base, k, k + 360);
	store_writer_sync(w);
	expect_written(w, "seed");
	int64_t recent = ((int64_t)time(NULL) - 600) / BUCKET_S * BUCKET_S;

	const struct store_retention_step minutes[] = {{3600, 60}};
	store_writer_retention(w, minutes, 1);
	/* Batches while the merge runs: each flush waits for its batch, not for the merge. */
	for (int64_t k = 0; k < 30; k++) {
		submit_buckets(w, recent, k, k + 1);
		store_writer_flush(w);
	}
	store_writer_sync(w);
	expect_written(w, "merge");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM samples WHERE bucket_start < "
	                           "strftime('%s','now') - 3600 AND bucket_seconds != 60"),
	             0, "fine buckets older than an hour are left");
	struct store_reader *r = open_reader(path);
	check_coarse(r, base, n, 6, "merged");
	struct store_query q = range_query(recent, 0, 30);
	struct expect e = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 30, .times = 1};
	check_query(r, &q, &e, "batches written during the merge");
	store_reader_close(r);
	store_writer_close(w);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}

/*
 * Processes the cap left without samples go with their labels and sessions
 * once unseen for a day; one seen since stays (its samples may be on their
 * way), so a fleet's churn of short-lived processes does not grow the file.
 */
Test(storage, size_cap_forgets_processes_without_samples, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base_days_ago(3), 0, 60);
	store_writer_sync(w);
	expect_written(w, "seed");
	char sql[256];
	snprintf(sql, sizeof sql, "UPDATE targets SET last_seen = last_seen - 2 * 86400 WHERE pid = %d",
	         (int)pids[0]);
	raw_exec(path, sql);

	/* A cap below anything: every sample goes. */
	store_writer_set_limits(w, 1u << 20, 1);
	store_writer_retention(w, NULL, 0);
	store_writer_sync(w);
	store_writer_close(w);
	cr_assert_eq(raw_int(path, "SELECT count(*) FROM samples"), 0);
	snprintf(sql, sizeof sql, "SELECT count(*) FROM targets WHERE pid = %d", (int)pids[0]);
	cr_expect_eq(raw_int(path, sql), 0, "a process unseen for two days and without samples stays");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM targets"), NTARGETS - 1,
	             "processes seen today went");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM target_labels WHERE target NOT IN "
	                           "(SELECT id FROM targets)"),
	             0, "labels of a forgotten process stay");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM sessions WHERE target NOT IN "
	                           "(SELECT id FROM targets)"),
	             0, "sessions of a forgotten process stay");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM sessions"), NTARGETS - 1);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}

/* The total of a query on a pinned reader: the file's samples and the writer's memory. */
static uint64_t pinned_total(struct store_reader *r, struct store_writer *w, struct store_query q)
{
	struct store_error err = {{0}};
	struct store_pending *p = store_reader_pin(r, w, &err);
	cr_assert_not_null(p, "pin: %s", err.msg);
	q.pending = p;
	uint64_t total = 0;
	cr_assert_eq(store_query_stacks(r, &q, NULL, NULL, &total, &err), 0, "query: %s", err.msg);
	store_reader_unpin(r, p);
	return total;
}

/*
 * A query pinned to the writer counts every sample submitted before it
 * once: written, being written or waiting, while batches stream in and
 * while the file cannot grow; the same totals come back once all is written.
 */
Test(storage, pinned_queries_count_every_batch_once, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	store_writer_set_limits(w, UINT64_MAX, 0);
	submit_buckets(w, base, 0, 1);
	store_writer_sync(w);
	expect_written(w, "seed");
	struct store_reader *r = open_reader(path);
	uint64_t per_stack[NSTACKS];

	/* Streaming: each query right after a submit, the writer busy behind it. */
	for (int64_t k = 1; k < 40; k++) {
		submit_buckets(w, base, k, k + 1);
		struct expect e = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = k + 1, .times = 1};
		cr_assert_eq(pinned_total(r, w, range_query(base, 0, 1000)), expected(&e, per_stack),
		             "after bucket %lld", (long long)k);
	}
	store_writer_sync(w);

	/* The file may not grow: batches wait in memory, and still count. */
	store_writer_set_file_limit(w, 1);
	int64_t k = 40;
	struct store_writer_status st = {0};
	for (; k < 2000 && !st.failing; k++) {
		submit_buckets(w, base, k, k + 1);
		store_writer_flush(w);
		store_writer_status(w, &st);
	}
	cr_assert(st.failing && st.pending_rows > 0, "the file never filled");
	struct expect all = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = k, .times = 1};
	uint64_t want = expected(&all, per_stack);
	cr_assert_eq(pinned_total(r, w, range_query(base, 0, 2000)), want, "during the outage");
	struct store_query unpinned = range_query(base, 0, 2000);
	uint64_t in_file = 0;
	struct store_error err = {{0}};
	cr_assert_eq(store_query_stacks(r, &unpinned, NULL, NULL, &in_file, &err), 0, "%s", err.msg);
	cr_assert_lt(in_file, want, "nothing waited in memory");

	store_writer_set_file_limit(w, 0);
	store_writer_sync(w);
	expect_written(w, "after the outage");
	cr_assert_eq(store_query_stacks(r, &unpinned, NULL, NULL, &in_file, &err), 0, "%s", err.msg);
	cr_assert_eq(in_file, want, "written once the file could grow");
	cr_assert_eq(pinned_total(r, w, range_query(base, 0, 2000)), want, "counted twice");
	store_reader_close(r);
	store_writer_close(w);
}

/*
 * A process declared again without labels (attached again without them, or
 * after the daemon forgot it) keeps its labels, and a label still selects
 * all its history; declared with other labels, those replace them.
 */
Test(storage, labels_survive_a_declaration_without_them, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	int64_t base = base_days_ago(1);
	submit_buckets(w, base, 0, 1);
	struct store_batch *b = store_batch_new();
	struct store_target_info bare = {.pid = pids[0], .start_time = 5000, .uid = 1000};
	int t = store_batch_target(b, &bare);
	int32_t f = store_batch_frame(b, "later", "app.py", 1, 0);
	int32_t st = store_batch_stack(b, -1, f);
	cr_assert(t >= 0 && st >= 0);
	cr_assert_eq(store_batch_samples(b, t, base + BUCKET_S, BUCKET_S, 1, st, 5), 0);
	store_writer_submit(w, b);
	store_writer_sync(w);
	expect_written(w, "bare");
	struct store_reader *r = open_reader(path);
	const char *key = "app", *value = apps[0];
	struct store_query q = {.nlabels = 1, .label_keys = &key, .label_values = &value,
	                        .from_unix = (double)(base + BUCKET_S),
	                        .until_unix = (double)(base + 2 * BUCKET_S)};
	uint64_t total = 0;
	struct store_error err = {{0}};
	cr_assert_eq(store_query_stacks(r, &q, NULL, NULL, &total, &err), 0, "%s", err.msg);
	cr_assert_eq(total, 5, "the samples declared without labels are not under the old label");

	/* The same for samples that wait in memory: the file cannot grow, a pinned query finds them. */
	store_writer_set_file_limit(w, 1);
	struct store_writer_status ws = {0};
	uint64_t waiting = 0;
	for (int64_t k = 2; k < 2000 && !ws.failing; k++) {
		b = store_batch_new();
		t = store_batch_target(b, &bare);
		st = store_batch_stack(b, -1, store_batch_frame(b, "later", "app.py", 1, 0));
		/* Many threads: rows enough to need new pages soon. */
		for (uint64_t th = 0; th < 200; th++)
			cr_assert_eq(store_batch_samples(b, t, base + k * BUCKET_S, BUCKET_S, th, st, 1), 0);
		store_writer_submit(w, b);
		store_writer_flush(w);
		store_writer_status(w, &ws);
		waiting = ws.pending_rows;
	}
	cr_assert(ws.failing && waiting > 0, "the file never filled");
	q.until_unix = (double)(base + 2000 * BUCKET_S);
	uint64_t in_file = 0;
	cr_assert_eq(store_query_stacks(r, &q, NULL, NULL, &in_file, &err), 0, "%s", err.msg);
	struct store_pending *pin = store_reader_pin(r, w, &err);
	cr_assert_not_null(pin, "%s", err.msg);
	q.pending = pin;
	cr_assert_eq(store_query_stacks(r, &q, NULL, NULL, &total, &err), 0, "%s", err.msg);
	store_reader_unpin(r, pin);
	q.pending = NULL;
	cr_assert_eq(total, in_file + waiting, "waiting samples declared without labels are not under the old label");
	store_writer_set_file_limit(w, 0);
	store_writer_sync(w);

	const char *other_key = "app", *other_value = "renamed";
	struct store_target_info relabelled = bare;
	relabelled.nlabels = 1;
	relabelled.label_keys = &other_key;
	relabelled.label_values = &other_value;
	b = store_batch_new();
	cr_assert_eq(store_batch_target(b, &relabelled), 0);
	store_writer_submit(w, b);
	store_writer_sync(w);
	cr_assert_eq(store_query_stacks(r, &q, NULL, NULL, &total, &err), 0, "%s", err.msg);
	cr_assert_eq(total, 0, "labels given again did not replace the old ones");
	store_reader_close(r);
	store_writer_close(w);
}

Test(storage, retention_size_cap_drops_oldest_first, .timeout = 180)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(2), n = 3000;
	struct store_writer *w = open_writer(path);
	for (int64_t k = 0; k < n; k += 100)
		submit_buckets(w, base, k, k + 100);
	store_writer_sync(w);
	expect_written(w, "seed");
	struct store_writer_status st;
	store_writer_status(w, &st);
	uint64_t full = st.db_bytes, cap = full / 2;
	cr_assert_gt(full, 1 << 20, "seed too small to measure: %llu bytes",
	             (unsigned long long)full);

	store_writer_set_limits(w, 1u << 20, cap);
	store_writer_retention(w, NULL, 0);
	store_writer_sync(w);
	expect_written(w, "cap");
	store_writer_status(w, &st);
	cr_expect_leq(st.db_bytes, cap, "database %llu bytes, cap %llu",
	              (unsigned long long)st.db_bytes, (unsigned long long)cap);
	cr_expect_gt(st.db_bytes, cap / 4, "dropped far more than needed: %llu bytes",
	             (unsigned long long)st.db_bytes);
	store_writer_close(w); /* checkpoints: the file itself shrinks */
	struct stat sb;
	cr_assert_eq(stat(path, &sb), 0);
	cr_expect_leq((uint64_t)sb.st_size, cap, "file %lld bytes, cap %llu",
	              (long long)sb.st_size, (unsigned long long)cap);

	/* Oldest first: buckets before some k are gone, every one from k on is whole. */
	struct store_reader *r = open_reader(path);
	int64_t first = -1;
	for (int64_t k = 0; k < n; k++) {
		struct store_query q = range_query(base, k, k + 1);
		struct tally t;
		uint64_t total = run_query(r, &q, &t);
		if (first < 0 && total)
			first = k;
		if (first >= 0) {
			struct expect e = {.targets = 7, .thread_t = -1, .k0 = k, .k1 = k + 1, .times = 1};
			check_query(r, &q, &e, "a bucket after the cut");
		}
	}
	cr_expect_gt(first, 0, "nothing dropped");
	cr_expect_lt(first, n - 1, "everything dropped");
	store_reader_close(r);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}

/*
 * A workload whose stacks churn: every batch brings stacks, frames and
 * strings no other batch has (a deep chain per leaf, under one root frame
 * all batches share).  The cap must drop them with the samples that used
 * them, or they fill the file while every sample goes.
 */
#define CHURN_LEAVES 8
#define CHURN_DEPTH 12
#define CHURN_BUCKETS 2
#define CHURN_PID 4242

static uint64_t churn_count(int batch, int leaf, int64_t k, int th)
{
	return 1 + (uint64_t)((batch * 31 + leaf * 7 + (int)k * 3 + th) % 13);
}

/* Batch i: buckets [i * CHURN_BUCKETS, +CHURN_BUCKETS), two threads, one sample row per leaf and on the root. */
static struct store_batch *churn_batch(int i, int64_t base)
{
	struct store_batch *b = store_batch_new();
	cr_assert_not_null(b);
	struct store_target_info info = {.pid = CHURN_PID, .start_time = 1, .uid = 0};
	int t = store_batch_target(b, &info);
	cr_assert_eq(t, 0);
	int32_t root_frame = store_batch_frame(b, "main", "app.py", 1, 0);
	int32_t root = store_batch_stack(b, -1, root_frame);
	cr_assert(root_frame >= 0 && root >= 0);
	char file[64];
	snprintf(file, sizeof file, "generated/batch_%d.py", i);
	for (int l = 0; l < CHURN_LEAVES; l++) {
		int32_t at = root;
		for (int d = 0; d < CHURN_DEPTH; d++) {
			char fn[64];
			snprintf(fn, sizeof fn, "churn_b%d_l%d_d%d", i, l, d);
			int32_t f = store_batch_frame(b, fn, file, d + 1, 0);
			cr_assert_geq(f, 0);
			at = store_batch_stack(b, at, f);
			cr_assert_geq(at, 0);
		}
		for (int64_t k = 0; k < CHURN_BUCKETS; k++)
			for (int th = 0; th < 2; th++)
				cr_assert_eq(store_batch_samples(b, t, base + (i * CHURN_BUCKETS + k) * BUCKET_S,
				                                 BUCKET_S, (uint64_t)th + 1, at,
				                                 churn_count(i, l, i * CHURN_BUCKETS + k, th)),
				             0);
	}
	for (int64_t k = 0; k < CHURN_BUCKETS; k++)
		cr_assert_eq(store_batch_samples(b, t, base + (i * CHURN_BUCKETS + k) * BUCKET_S, BUCKET_S,
		                                 1, root, 1),
		             0);
	return b;
}

/* What a query over one churn batch's buckets returned, leaf by leaf. */
struct churn_tally {
	int batch;
	uint64_t leaf[CHURN_LEAVES], root, total;
	unsigned foreign;
	char first_foreign[128];
};

static int churn_row(void *ctx, const struct store_row *row)
{
	struct churn_tally *t = ctx;
	t->total += row->count;
	int b, l, d;
	const struct store_frame *leaf = row->depth ? &row->frames[row->depth - 1] : NULL;
	bool rooted = row->depth && strcmp(row->frames[0].function, "main") == 0;
	if (rooted && row->depth == 1) {
		t->root += row->count;
	} else if (rooted && row->depth == CHURN_DEPTH + 1 &&
	           sscanf(leaf->function, "churn_b%d_l%d_d%d", &b, &l, &d) == 3 && b == t->batch &&
	           l >= 0 && l < CHURN_LEAVES && d == CHURN_DEPTH - 1) {
		t->leaf[l] += row->count;
	} else if (!t->foreign++) {
		snprintf(t->first_foreign, sizeof t->first_foreign, "depth %u, leaf %s", row->depth,
		         leaf ? leaf->function : "-");
	}
	return 0;
}

/* Rows of stacks, frames and strings nothing reaches any more. */
static int64_t orphans(const char *path, const char *table)
{
	if (strcmp(table, "stacks") == 0)
		return raw_int(path, "WITH RECURSIVE live(id) AS (SELECT stack FROM samples UNION "
		                     "SELECT parent FROM stacks JOIN live ON stacks.id = live.id "
		                     "WHERE parent != 0) "
		                     "SELECT count(*) FROM stacks WHERE id NOT IN (SELECT id FROM live)");
	if (strcmp(table, "frames") == 0)
		return raw_int(path, "SELECT count(*) FROM frames WHERE id NOT IN "
		                     "(SELECT frame FROM stacks)");
	return raw_int(path, "SELECT count(*) FROM strings WHERE id NOT IN "
	                     "(SELECT function FROM frames UNION SELECT file FROM frames)");
}

Test(storage, size_cap_drops_churning_stacks_with_their_samples, .timeout = 180)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(2);
	/*
	 * The cap is checked after a retention run, as the daemon runs it.  The
	 * main file is measured after the run's checkpoint: it may pass the cap
	 * only by what SQLite could not yet give back (nothing, with no reader).
	 */
	const uint64_t cap = 256 * 1024, margin = 0;
	const int nbatches = 150;
	struct store_writer *w = open_writer(path);
	store_writer_set_limits(w, 1u << 20, cap);
	uint64_t most = 0;
	for (int i = 0; i < nbatches; i++) {
		store_writer_submit(w, churn_batch(i, base));
		store_writer_sync(w);
		store_writer_retention(w, NULL, 0);
		store_writer_sync(w);
		expect_written(w, "churn");
		struct store_writer_status st;
		store_writer_status(w, &st);
		cr_assert_leq(st.db_bytes, cap, "batch %d: database %llu bytes, cap %llu", i,
		              (unsigned long long)st.db_bytes, (unsigned long long)cap);
		struct stat sb;
		cr_assert_eq(stat(path, &sb), 0);
		cr_assert_leq((uint64_t)sb.st_size, cap + margin, "batch %d: file %lld bytes, cap %llu", i,
		              (long long)sb.st_size, (unsigned long long)cap);
		if ((uint64_t)sb.st_size > most)
			most = (uint64_t)sb.st_size;
	}
	store_writer_close(w);
	cr_log_info("largest file %llu bytes under a cap of %llu", (unsigned long long)most,
	            (unsigned long long)cap);

	cr_expect_eq(orphans(path, "stacks"), 0, "stacks no sample reaches");
	cr_expect_eq(orphans(path, "frames"), 0, "frames no stack uses");
	cr_expect_eq(orphans(path, "strings"), 0, "strings no frame uses");

	/* Oldest batches gone, whole; every remaining one exact, leaf by leaf, with its own frames. */
	struct store_reader *r = open_reader(path);
	int first = -1;
	for (int i = 0; i < nbatches; i++) {
		struct churn_tally t = {.batch = i};
		struct store_query q = range_query(base, (int64_t)i * CHURN_BUCKETS,
		                                   (int64_t)(i + 1) * CHURN_BUCKETS);
		struct store_error err = {{0}};
		cr_assert_eq(store_query_stacks(r, &q, churn_row, &t, NULL, &err), 0, "query: %s", err.msg);
		cr_assert_eq(t.foreign, 0, "batch %d: a stack it never wrote: %s", i, t.first_foreign);
		if (first < 0 && t.total)
			first = i;
		if (first < 0)
			continue;
		cr_expect_eq(t.root, CHURN_BUCKETS, "batch %d: root count %llu", i,
		             (unsigned long long)t.root);
		for (int l = 0; l < CHURN_LEAVES; l++) {
			uint64_t want = 0;
			for (int64_t k = 0; k < CHURN_BUCKETS; k++)
				for (int th = 0; th < 2; th++)
					want += churn_count(i, l, (int64_t)i * CHURN_BUCKETS + k, th);
			cr_expect_eq(t.leaf[l], want, "batch %d leaf %d: %llu, expected %llu", i, l,
			             (unsigned long long)t.leaf[l], (unsigned long long)want);
		}
	}
	store_reader_close(r);
	cr_expect_gt(first, 0, "nothing dropped");
	cr_expect_leq(first, nbatches - 4, "the cap kept only %d batches", nbatches - first);
	/* What remains is what the remaining batches need: their chains and the shared root. */
	int64_t kept = nbatches - first;
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM stacks"), kept * CHURN_LEAVES * CHURN_DEPTH + 1);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM frames"), kept * CHURN_LEAVES * CHURN_DEPTH + 1);
	/* Per batch a name per frame and its file; then main and app.py. */
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM strings"),
	             kept * (CHURN_LEAVES * CHURN_DEPTH + 1) + 2);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}

/* ---- a full disk ---- */

Test(storage, full_disk_keeps_batches_and_recovers, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	uint64_t per = submit_buckets(w, base, 0, 50);
	store_writer_sync(w);
	expect_written(w, "before the disk fills");
	struct store_reader *r = open_reader(path);
	struct store_query all = range_query(base, 0, 10000);
	struct expect before = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 50, .times = 1};
	check_query(r, &all, &before, "before");

	/* The file may not grow: every batch of new buckets fails with SQLITE_FULL. */
	struct store_writer_status st;
	store_writer_status(w, &st);
	store_writer_set_file_limit(w, st.db_bytes);
	store_writer_set_limits(w, 3 * per, 0);
	int nfull = 6;
	for (int i = 0; i < nfull; i++)
		cr_assert_eq(submit_buckets(w, base, 50 + 50 * i, 100 + 50 * i), per);
	store_writer_sync(w);
	store_writer_status(w, &st);
	cr_expect(st.failing, "the writer does not say it is failing");
	cr_expect(strstr(st.last_error, "full"), "last error: %s", st.last_error);
	cr_expect_leq(st.pending_rows, 3 * per, "pending %llu rows past the bound %llu",
	              (unsigned long long)st.pending_rows, (unsigned long long)(3 * per));
	cr_expect_eq(st.pending_rows + st.dropped_rows, (uint64_t)nfull * per);
	cr_expect_eq(st.pending_rows, 3 * per, "the bound is kept full, not emptier");
	check_query(r, &all, &before, "while the disk is full");
	/* Retries go on failing, and still lose nothing. */
	usleep(1500 * 1000);
	store_writer_sync(w);
	store_writer_status(w, &st);
	cr_expect(st.failing);
	check_query(r, &all, &before, "after retries on a full disk");

	store_writer_set_file_limit(w, 0);
	store_writer_sync(w);
	store_writer_status(w, &st);
	cr_expect(!st.failing, "still failing after room was made: %s", st.last_error);
	cr_expect_eq(st.pending_rows, 0);
	uint64_t dropped_batches = st.dropped_rows / per;
	cr_expect_eq(dropped_batches, (uint64_t)nfull - 3);
	/* The dropped batches are the oldest; the kept ones are whole. */
	for (int i = 0; i < nfull; i++) {
		struct store_query q = range_query(base, 50 + 50 * i, 100 + 50 * i);
		struct expect e = {.targets = 7, .thread_t = -1, .k0 = 50 + 50 * i, .k1 = 100 + 50 * i,
		                   .times = 1};
		if ((uint64_t)i < dropped_batches)
			e.targets = 0;
		char what[64];
		snprintf(what, sizeof what, "batch %d after recovery", i);
		check_query(r, &q, &e, what);
	}
	check_query(r, &(struct store_query){.from_unix = (double)base,
	                                     .until_unix = (double)(base + 50 * BUCKET_S)},
	            &before, "the first batch after recovery");
	store_reader_close(r);
	store_writer_close(w);
}

/* ---- a read-only file, an I/O error ---- */

/*
 * What a forked child checks cannot go through Criterion's assertions: it
 * writes why it failed to fd and exits 1, and the parent asserts on that.
 */
__attribute__((format(printf, 2, 3), noreturn)) static void storage_child_fail(int fd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n > 0 && write(fd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1) < 0)
		_exit(2);
	_exit(1);
}

#define CHILD_CHECK(fd, cond, ...)                                                                 \
	do {                                                                                       \
		if (!(cond))                                                                       \
			storage_child_fail(fd, __VA_ARGS__);                                               \
	} while (0)

/* Runs body in a child; its verdict becomes the test's. */
static void run_child(void (*body)(int fd, const char *path), const char *path)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		body(p[1], path);
		_exit(0);
	}
	close(p[1]);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	char msg[1024] = "";
	ssize_t got = read(p[0], msg, sizeof msg - 1);
	close(p[0]);
	msg[got > 0 ? got : 0] = '\0';
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child (status %#x): %s", status,
	          msg[0] ? msg : "no message");
}

/* The total the store has over buckets [k0, k1) of base, or -1 (for children). */
static int64_t store_total(const char *path, int64_t base, int64_t k0, int64_t k1)
{
	struct store_error err = {{0}};
	struct store_reader *r = store_reader_open(path, &err);
	if (!r)
		return -1;
	struct store_query q = range_query(base, k0, k1);
	uint64_t total = 0;
	int rc = store_query_stacks(r, &q, NULL, NULL, &total, &err);
	store_reader_close(r);
	return rc < 0 ? -1 : (int64_t)total;
}

static int64_t seed_total(int64_t k0, int64_t k1)
{
	uint64_t per_stack[NSTACKS];
	struct expect e = {.targets = 7, .thread_t = -1, .k0 = k0, .k1 = k1, .times = 1};
	return (int64_t)expected(&e, per_stack);
}

/* Status checks of a child: failing or not, open or not, an error naming the file. */
static void child_expect_status(int fd, struct store_writer *w, bool failing, bool open,
                                uint64_t pending_rows, const char *why, const char *path,
                                const char *what)
{
	struct store_writer_status st;
	store_writer_status(w, &st);
	CHILD_CHECK(fd, st.failing == failing && st.open == open,
	            "%s: failing %d open %d, expected %d %d (last error: %s)", what, st.failing,
	            st.open, failing, open, st.last_error);
	CHILD_CHECK(fd, st.pending_rows == pending_rows, "%s: %llu rows pending, expected %llu", what,
	            (unsigned long long)st.pending_rows, (unsigned long long)pending_rows);
	CHILD_CHECK(fd, st.dropped_rows == 0, "%s: %llu rows dropped", what,
	            (unsigned long long)st.dropped_rows);
	if (why)
		CHILD_CHECK(fd, strstr(st.last_error, why) && strstr(st.last_error, path),
		            "%s: last error \"%s\" does not name \"%s\" and the file", what, st.last_error,
		            why);
}

/* As nobody (root writes any file): a 0444 store waits, then recovers once it is 0644. */
static void read_only_child(int fd, const char *path)
{
	if (setgroups(0, NULL) != 0 || setgid(NOBODY_GID) != 0 || setuid(NOBODY_UID) != 0)
		storage_child_fail(fd, "cannot become nobody: %s", strerror(errno));
	int64_t base = base_days_ago(1);
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	CHILD_CHECK(fd, w, "store_writer_open: %s", err.msg);
	submit_buckets(w, base, 0, 10);
	store_writer_sync(w);
	child_expect_status(fd, w, false, true, 0, NULL, path, "before chmod");
	store_writer_close(w);

	CHILD_CHECK(fd, chmod(path, 0444) == 0, "chmod 0444: %s", strerror(errno));
	w = store_writer_open(path, &err);
	CHILD_CHECK(fd, w, "store_writer_open: %s", err.msg);
	uint64_t per = submit_buckets(w, base, 10, 20);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, "readonly", path, "read-only file");
	/* Retries on the writer's schedule keep failing, and keep the rows. */
	usleep(1200 * 1000);
	per += submit_buckets(w, base, 20, 30);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, "readonly", path, "read-only file, retried");

	CHILD_CHECK(fd, chmod(path, 0644) == 0, "chmod 0644: %s", strerror(errno));
	struct store_writer_status st;
	for (int i = 0; i < 50; i++) {
		store_writer_status(w, &st);
		if (!st.pending_rows)
			break;
		usleep(100 * 1000);
	}
	child_expect_status(fd, w, false, true, 0, NULL, path, "writable again");
	store_writer_close(w);
	int64_t total = store_total(path, base, 0, 30), want = seed_total(0, 30);
	CHILD_CHECK(fd, total == want, "after recovery: total %lld, expected %lld", (long long)total,
	            (long long)want);
}

Test(storage, read_only_file_waits_and_recovers, .timeout = 60)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it writes the store as nobody)");
	char dir[PATH_MAX - 64], path[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	cr_assert(chown(dir, NOBODY_UID, NOBODY_GID) == 0 && chmod(dir, 0755) == 0);
	snprintf(path, sizeof path, "%s/history.db", dir);
	run_child(read_only_child, path);
}

/*
 * An I/O error in the middle of a write (the file size limit of the
 * process: every write fails with EFBIG, which SQLite reports as a disk I/O
 * error) closes the connection; once writes work again the writer opens the
 * file anew by itself and writes what waited.
 */
static void io_error_child(int fd, const char *path)
{
	int64_t base = base_days_ago(1);
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	CHILD_CHECK(fd, w, "store_writer_open: %s", err.msg);
	submit_buckets(w, base, 0, 10);
	store_writer_sync(w);
	child_expect_status(fd, w, false, true, 0, NULL, path, "before the error");

	struct rlimit lim;
	CHILD_CHECK(fd, getrlimit(RLIMIT_FSIZE, &lim) == 0, "getrlimit");
	rlim_t soft = lim.rlim_cur;
	signal(SIGXFSZ, SIG_IGN);
	lim.rlim_cur = 0;
	CHILD_CHECK(fd, setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
	uint64_t per = submit_buckets(w, base, 10, 20);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, "I/O error", "", "writes fail");
	/* Retries open the file again; while writes fail, they fail and keep the rows. */
	usleep(1200 * 1000);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, NULL, path, "writes still fail");

	lim.rlim_cur = soft;
	CHILD_CHECK(fd, setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
	struct store_writer_status st;
	for (int i = 0; i < 50; i++) {
		store_writer_status(w, &st);
		if (!st.pending_rows)
			break;
		usleep(100 * 1000);
	}
	child_expect_status(fd, w, false, true, 0, NULL, path, "writes work again");
	store_writer_close(w);
	int64_t total = store_total(path, base, 0, 20), want = seed_total(0, 20);
	CHILD_CHECK(fd, total == want, "after recovery: total %lld, expected %lld", (long long)total,
	            (long long)want);
}

Test(storage, io_error_reopens_and_recovers, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	run_child(io_error_child, path);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}

/* ---- crash durability ---- */

#define CRASH_BUCKETS 20 /* per batch: about 700 rows */

/* The child: batch after batch from index `from`, reporting each one synced on fd. */
static void crash_child(const char *path, int64_t base, int64_t from, int fd)
{
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	if (!w)
		_exit(2);
	for (int64_t i = from;; i++) {
		int tix[NTARGETS];
		struct store_batch *b = batch_begin(tix);
		for (int64_t k = i * CRASH_BUCKETS; k < (i + 1) * CRASH_BUCKETS; k++)
			batch_add_bucket(b, tix, base, k, NULL);
		store_writer_submit(w, b);
		store_writer_sync(w);
		struct store_writer_status st;
		store_writer_status(w, &st);
		if (st.failing)
			_exit(4);
		if (write(fd, &i, sizeof i) != sizeof i)
			_exit(5);
	}
}

Test(storage, sigkill_keeps_every_synced_batch, .timeout = 300)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
	srand(seed);
	cr_log_info("seed %u", seed);
	int64_t next = 0;
	enum { MAX_BATCHES = 1 << 15 };
	bool *synced = calloc(MAX_BATCHES, sizeof *synced);
	cr_assert_not_null(synced);
	int rounds = 8;
	for (int round = 0; round < rounds; round++) {
		int p[2];
		cr_assert_eq(pipe(p), 0);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(p[0]);
			crash_child(path, base, next, p[1]);
			_exit(1);
		}
		close(p[1]);
		/* 20 to 400 ms: mostly mid-transaction, since the child is always writing. */
		usleep((useconds_t)(20000 + rand() % 380000));
		kill(pid, SIGKILL);
		int status;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFSIGNALED(status), "child ended on its own: status %d", status);
		int64_t i, last = next - 1;
		ssize_t got;
		while ((got = read(p[0], &i, sizeof i)) == sizeof i) {
			cr_assert(i >= next && i < MAX_BATCHES);
			synced[i] = true;
			last = i;
		}
		close(p[0]);

		char ok[64];
		raw_integrity(path, ok, sizeof ok);
		cr_assert_str_eq(ok, "ok", "round %d: integrity_check", round);
		struct store_error err = {{0}};
		struct store_reader *r = store_reader_open(path, &err);
		/* Killed while it created the schema: nothing to read yet, and the next child migrates. */
		if (!r && last < 0 && strstr(err.msg, "no schema"))
			continue;
		cr_assert_not_null(r, "round %d: store_reader_open: %s", round, err.msg);
		/* Every synced batch whole; the one in flight whole or absent. */
		for (int64_t b = 0; b <= last + 1; b++) {
			struct store_query q =
				range_query(base, b * CRASH_BUCKETS, (b + 1) * CRASH_BUCKETS);
			struct expect e = {.targets = 7, .thread_t = -1, .k0 = b * CRASH_BUCKETS,
			                   .k1 = (b + 1) * CRASH_BUCKETS, .times = 1};
			uint64_t want[NSTACKS];
			uint64_t want_total = expected(&e, want);
			struct tally t;
			uint64_t total = run_query(r, &q, &t);
			if (b < MAX_BATCHES && synced[b])
				cr_assert_eq(total, want_total, "round %d: synced batch %lld has %llu of %llu",
				             round, (long long)b, (unsigned long long)total,
				             (unsigned long long)want_total);
			else
				cr_assert(total == 0 || total == want_total,
				          "round %d: batch %lld is partial: %llu of %llu", round, (long long)b,
				          (unsigned long long)total, (unsigned long long)want_total);
		}
		store_reader_close(r);
		/* The next child starts past anything the killed one may have committed. */
		next = last + 2;
		cr_assert_lt(next + 200, MAX_BATCHES);
	}
	cr_log_info("synced %lld batches over %d kills", (long long)next, rounds);
	free(synced);
}

/* ---- the writer's memory answers as the file will ---- */

/* An answer as text, comparable across sources: sorted rows, then the total. */
struct answer {
	char **lines;
	size_t n, cap;
};

static void answer_add(struct answer *a, const char *line)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 64;
		a->lines = realloc(a->lines, a->cap * sizeof *a->lines);
		cr_assert_not_null(a->lines);
	}
	a->lines[a->n] = strdup(line);
	cr_assert_not_null(a->lines[a->n]);
	a->n++;
}

static int answer_stack(void *ctx, const struct store_row *row)
{
	char line[4096];
	int n = snprintf(line, sizeof line, "%llu", (unsigned long long)row->count);
	for (uint32_t i = 0; i < row->depth && n < (int)sizeof line - 512; i++)
		n += snprintf(line + n, sizeof line - (size_t)n, " %s@%s:%d/%d", row->frames[i].function,
		              row->frames[i].file ? row->frames[i].file : "-", row->frames[i].line,
		              row->frames[i].kind);
	answer_add(ctx, line);
	return 0;
}

static int answer_process(void *ctx, const struct store_process *p)
{
	char line[4096];
	int n = snprintf(line, sizeof line, "pid %d uid %u %s [%s] %s %.0f..%.0f %llu", (int)p->pid,
	                 (unsigned)p->uid, p->executable ? p->executable : "-",
	                 p->command_line ? p->command_line : "-",
	                 p->python_version ? p->python_version : "-", p->first_unix, p->last_unix,
	                 (unsigned long long)p->samples);
	for (size_t i = 0; i < p->nlabels && n < (int)sizeof line - 512; i++)
		n += snprintf(line + n, sizeof line - (size_t)n, " %s=%s", p->label_keys[i], p->label_values[i]);
	answer_add(ctx, line);
	return 0;
}

static int answer_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every kind of answer to q, as one text. */
static char *answer_text(struct store_reader *r, const struct store_query *q)
{
	struct answer a = {0};
	struct store_error err = {{0}};
	uint64_t total = 0;
	cr_assert_eq(store_query_stacks(r, q, answer_stack, &a, &total, &err), 0, "stacks: %s", err.msg);
	if (a.n)
		qsort(a.lines, a.n, sizeof *a.lines, answer_cmp);
	char line[128];
	snprintf(line, sizeof line, "total %llu", (unsigned long long)total);
	answer_add(&a, line);
	/* Processes come in the store's order: by first sample, then id. */
	cr_assert_eq(store_query_processes(r, q, answer_process, &a, &err), 0, "processes: %s", err.msg);
	uint32_t rate = 0;
	char mode[16];
	cr_assert_eq(store_query_sampling(r, q, &rate, mode, sizeof mode, &err), 0, "sampling: %s", err.msg);
	snprintf(line, sizeof line, "sampling %u %s", rate, mode);
	answer_add(&a, line);
	size_t len = 1;
	for (size_t i = 0; i < a.n; i++)
		len += strlen(a.lines[i]) + 1;
	char *text = malloc(len);
	cr_assert_not_null(text);
	text[0] = '\0';
	for (size_t i = 0; i < a.n; i++) {
		strcat(text, a.lines[i]);
		strcat(text, "\n");
		free(a.lines[i]);
	}
	free(a.lines);
	return text;
}

/* A process the file has not seen, with a frame the file has not seen, in buckets the file has. */
static void submit_newcomer(struct store_writer *w, int64_t base)
{
	struct store_batch *b = store_batch_new();
	const char *key = "app", *value = "newcomer";
	struct store_target_info info = {.pid = 2001, .start_time = 7000, .uid = 1001,
	                                 .executable = "/usr/bin/python3.13", .nlabels = 1,
	                                 .label_keys = &key, .label_values = &value};
	int t = store_batch_target(b, &info);
	cr_assert(t >= 0 && store_batch_session(b, t, 1.7e9 + 5, 0, 250, "cpu") >= 0);
	int32_t main_frame = store_batch_frame(b, frames[0].function, frames[0].file, frames[0].line,
	                                       frames[0].kind);
	int32_t fresh = store_batch_frame(b, "fresh", "new.py", 3, 0);
	int32_t s0 = store_batch_stack(b, -1, main_frame);
	int32_t s1 = store_batch_stack(b, s0, fresh);
	cr_assert(s0 >= 0 && s1 >= 0);
	cr_assert_eq(store_batch_samples(b, t, base, BUCKET_S, 9, s0, 4), 0);
	cr_assert_eq(store_batch_samples(b, t, base + BUCKET_S, BUCKET_S, 9, s1, 6), 0);
	store_writer_submit(w, b);
}

/* A known process declared again with other labels, and its session closed. */
static void submit_relabel(struct store_writer *w)
{
	struct store_batch *b = store_batch_new();
	const char *keys[] = {"app", "tier"}, *values[] = {"renamed", "gold"};
	struct store_target_info info = {.pid = pids[2], .start_time = 5002, .uid = 1000, .nlabels = 2,
	                                 .label_keys = keys, .label_values = values};
	int t = store_batch_target(b, &info);
	cr_assert(t >= 0 && store_batch_session(b, t, 1.7e9, 1.7e9 + 50, 100, NULL) >= 0);
	store_writer_submit(w, b);
}

/*
 * Whatever the query, the samples a pinned query finds in the writer's
 * memory give the answer the file gives once they are written: the same
 * stacks with the same counts (one row per stack, not one per source), the
 * same processes with the labels and programs they are declared with, the
 * same sampling.  Asked while the file cannot grow, then after.
 */
Test(storage, memory_and_file_answer_alike, .timeout = 180)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	store_writer_set_limits(w, UINT64_MAX, 0);
	submit_buckets(w, base, 0, 6);
	store_writer_sync(w);
	expect_written(w, "seed");

	store_writer_set_file_limit(w, 1);
	struct store_writer_status st = {0};
	int64_t k = 3; /* overlapping the file's buckets: counts of both add up */
	for (; k < 3000 && !st.failing; k++) {
		submit_buckets(w, base, k, k + 1);
		store_writer_flush(w);
		store_writer_status(w, &st);
	}
	cr_assert(st.failing, "the file never filled");
	submit_newcomer(w, base);
	submit_relabel(w);
	store_writer_status(w, &st);
	cr_assert_geq(st.pending_batches, 3, "too little waits in memory");

	const char *app = "app", *api = "api", *renamed = "renamed", *worker = "worker",
		   *newcomer = "newcomer", *env = "env", *prod = "prod";
	const char *two_keys[] = {"app", "env"}, *two_values[] = {"api", "prod"};
	struct store_query all = range_query(base, 0, k + 1);
	struct store_query queries[] = {
		all,
		{.pid = pids[0]},
		{.pid = 2001},
		{.nlabels = 1, .label_keys = &app, .label_values = &api},
		{.nlabels = 1, .label_keys = &app, .label_values = &renamed},
		{.nlabels = 1, .label_keys = &app, .label_values = &worker},
		{.nlabels = 1, .label_keys = &app, .label_values = &newcomer},
		{.nlabels = 1, .label_keys = &env, .label_values = &prod},
		{.nlabels = 2, .label_keys = two_keys, .label_values = two_values},
		{.by_thread = true, .thread_id = tid_of(1, 1)},
		{.by_uid = true, .uid = 1001},
		{.target_id = 1},
		{.pid = pids[1], .by_thread = true, .thread_id = tid_of(1, 0)},
	};
	size_t nq = sizeof queries / sizeof queries[0];
	for (size_t i = 1; i < nq; i++) {
		queries[i].from_unix = all.from_unix;
		queries[i].until_unix = all.until_unix;
	}
	/* Only the middle of the range: buckets of the file and of memory both. */
	queries[0].from_unix = (double)(base + 2 * BUCKET_S);

	struct store_reader *r = open_reader(path);
	struct store_error err = {{0}};
	char *during[sizeof queries / sizeof queries[0]];
	struct store_pending *pin = store_reader_pin(r, w, &err);
	cr_assert_not_null(pin, "pin: %s", err.msg);
	for (size_t i = 0; i < nq; i++) {
		queries[i].pending = pin;
		during[i] = answer_text(r, &queries[i]);
		queries[i].pending = NULL;
	}
	store_reader_unpin(r, pin);
	/* Declared with other labels in memory: the old label no longer selects it, the new one does. */
	cr_assert_eq(strncmp(during[5], "total 0\n", 8), 0, "app=worker still selects:\n%s", during[5]);
	cr_assert_null(strstr(during[4], "total 0\n"), "app=renamed selects nothing");
	char *file_only = answer_text(r, &queries[0]);
	cr_assert_str_neq(file_only, during[0], "memory added nothing to the answer");
	free(file_only);

	store_writer_set_file_limit(w, 0);
	store_writer_sync(w);
	expect_written(w, "after the outage");
	for (size_t i = 0; i < nq; i++) {
		char *after = answer_text(r, &queries[i]);
		cr_assert_str_eq(during[i], after, "query %zu: from memory\n%s\nfrom the file\n%s", i,
		                 during[i], after);
		cr_assert_neq(strlen(after), 0);
		free(after);
		free(during[i]);
	}
	store_reader_close(r);
	store_writer_close(w);
}
