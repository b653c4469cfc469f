/*
 * Retention on real SQLite files: merges keep whole-bucket totals exact, the
 * size cap drops the oldest first with the stacks only they used (so
 * churning stacks cannot outgrow it), pinned queries count every batch once
 * and labels outlive a declaration without them.
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
#include "seed.h"

TestSuite(retention, .init = helpers_init, .fini = helpers_fini);

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

Test(retention, retention_merges_keep_whole_bucket_totals, .timeout = 180)
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
Test(retention, retention_backlog_merges_in_slices_around_batches, .timeout = 180)
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
Test(retention, size_cap_forgets_processes_without_samples, .timeout = 60)
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
Test(retention, pinned_queries_count_every_batch_once, .timeout = 120)
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
Test(retention, labels_survive_a_declaration_without_them, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	int64_t base = base_days_ago(1);
	submit_buckets(w, base, 0, 1);
	struct store_batch *b = store_batch_new();
	struct store_target_info bare = {.pid = pids[0], .start_time = 5000, .uid = 1000};
	int t = store_batch_target(b, &bare);
	int32_t f = store_batch_frame(b, "later", "app.py", 1, 0, 0);
	int32_t st = store_batch_stack(b, -1, f);
	cr_assert(t >= 0 && st >= 0);
	cr_assert_eq(store_batch_samples(b, t, base + BUCKET_S, BUCKET_S, 1, st, 5, 0), 0);
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
		st = store_batch_stack(b, -1, store_batch_frame(b, "later", "app.py", 1, 0, 0));
		/* Many threads: rows enough to need new pages soon. */
		for (uint64_t th = 0; th < 200; th++)
			cr_assert_eq(store_batch_samples(b, t, base + k * BUCKET_S, BUCKET_S, th, st, 1, 0), 0);
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

Test(retention, retention_size_cap_drops_oldest_first, .timeout = 180)
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
	int32_t root_frame = store_batch_frame(b, "main", "app.py", 1, 0, 0);
	int32_t root = store_batch_stack(b, -1, root_frame);
	cr_assert(root_frame >= 0 && root >= 0);
	char file[64];
	snprintf(file, sizeof file, "generated/batch_%d.py", i);
	for (int l = 0; l < CHURN_LEAVES; l++) {
		int32_t at = root;
		for (int d = 0; d < CHURN_DEPTH; d++) {
			char fn[64];
			snprintf(fn, sizeof fn, "churn_b%d_l%d_d%d", i, l, d);
			int32_t f = store_batch_frame(b, fn, file, d + 1, 0, 0);
			cr_assert_geq(f, 0);
			at = store_batch_stack(b, at, f);
			cr_assert_geq(at, 0);
		}
		for (int64_t k = 0; k < CHURN_BUCKETS; k++)
			for (int th = 0; th < 2; th++)
				cr_assert_eq(store_batch_samples(b, t, base + (i * CHURN_BUCKETS + k) * BUCKET_S,
				                                 BUCKET_S, (uint64_t)th + 1, at,
				                                 churn_count(i, l, i * CHURN_BUCKETS + k, th), 0),
				             0);
	}
	for (int64_t k = 0; k < CHURN_BUCKETS; k++)
		cr_assert_eq(store_batch_samples(b, t, base + (i * CHURN_BUCKETS + k) * BUCKET_S, BUCKET_S,
		                                 1, root, 1, 0),
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

Test(retention, size_cap_drops_churning_stacks_with_their_samples, .timeout = 180)
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
		/* Buckets go whole, not batches: the oldest batch left may have lost its first buckets. */
		int64_t from = 0;
		if (i == first)
			from = CHURN_BUCKETS - (int64_t)t.root;
		cr_expect(t.root == CHURN_BUCKETS || (i == first && t.root > 0 && t.root < CHURN_BUCKETS),
		          "batch %d: root count %llu", i, (unsigned long long)t.root);
		for (int l = 0; l < CHURN_LEAVES; l++) {
			uint64_t want = 0;
			for (int64_t k = from; k < CHURN_BUCKETS; k++)
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

/*
 * Context rows are never merged: once their bucket is as old as the first
 * step's age they are deleted, with the contexts no row uses, and the
 * samples they repeated stay counted in the samples alone.
 */
Test(retention, context_rows_go_at_the_first_steps_age, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t now = (int64_t)time(NULL);
	int64_t old = (now - 7200) / 60 * 60, recent = (now - 60) / 10 * 10;
	struct store_writer *w = open_writer(path);
	store_writer_submit(w, context_batch(old, 0, 3, 0));
	store_writer_submit(w, context_batch(recent, 3, 2, 0));
	store_writer_sync(w);
	expect_written(w, "contexts");
	cr_assert_eq(raw_int(path, "SELECT count(*) FROM contexts"), 10);
	struct store_reader *r = open_reader(path);
	struct store_query q = {.from_unix = (double)old, .until_unix = (double)now + 10};
	uint64_t total = query_total(r, &q);

	const struct store_retention_step steps[] = {{3600, 60}, {86400, 3600}};
	store_writer_retention(w, steps, 2);
	store_writer_sync(w);
	expect_written(w, "retention");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM context_samples WHERE bucket_start < strftime('%s','now') - 3600"),
	             0, "old context rows deleted");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM context_samples"), 4, "recent ones kept");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM contexts"), 4, "contexts no row uses deleted");
	cr_expect_eq(query_total(r, &q), total, "every sample still counted once");
	uint8_t t0[STORE_TRACE_ID_LEN], t3[STORE_TRACE_ID_LEN];
	trace_of(0, t0);
	trace_of(3, t3);
	q.trace_id = t0;
	cr_expect_eq(query_total(r, &q), 0, "an old trace is gone");
	q.trace_id = t3;
	cr_expect_eq(query_total(r, &q), CTX_CHECKOUT + CTX_CART, "a recent trace is kept");
	store_reader_close(r);
	store_writer_close(w);
}

/*
 * Under the size cap context rows go first, oldest first: while they are
 * enough to fit, no sample is dropped, however many traces there were.
 */
Test(retention, size_cap_drops_context_rows_first, .timeout = 180)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t b0 = ((int64_t)time(NULL) - 3000) / 10 * 10;
	struct store_writer *w = open_writer(path);
	/* Many traces with long labels: contexts make most of the file. */
	for (int k = 0; k < 200; k++)
		store_writer_submit(w, context_batch(b0 + 10 * k, 100 * k, 100, 200));
	store_writer_sync(w);
	expect_written(w, "seed");
	int64_t samples = raw_int(path, "SELECT count(*) FROM samples");
	int64_t rows = raw_int(path, "SELECT count(*) FROM context_samples");
	struct store_writer_status st;
	store_writer_status(w, &st);
	uint64_t cap = st.db_bytes * 6 / 10;
	cr_assert_gt(st.db_bytes, 4 << 20, "seed too small: %llu bytes", (unsigned long long)st.db_bytes);
	store_writer_set_limits(w, 1u << 20, cap);
	store_writer_retention(w, NULL, 0);
	store_writer_sync(w);
	expect_written(w, "cap");
	store_writer_status(w, &st);
	cr_expect_leq(st.db_bytes, cap, "database %llu bytes, cap %llu", (unsigned long long)st.db_bytes,
	              (unsigned long long)cap);
	int64_t left = raw_int(path, "SELECT count(*) FROM context_samples");
	cr_expect_lt(left, rows, "no context row dropped");
	cr_expect_gt(left, 0, "every context row dropped: more than needed");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM samples"), samples, "samples dropped first");
	char sql[160];
	snprintf(sql, sizeof sql, "SELECT min(bucket_start) > %lld FROM context_samples", (long long)b0);
	cr_expect_eq(raw_int(path, sql), 1, "oldest first");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM contexts WHERE id NOT IN "
	                           "(SELECT context FROM context_samples)"),
	             0, "contexts no row uses are deleted");
	store_writer_close(w);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}
