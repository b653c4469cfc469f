/*
 * The history store on real SQLite files: what is written is what queries
 * return, filter by filter, from the file and from batches still in memory
 * alike; the schema is versioned; a store that cannot be opened yet waits
 * for it; files that are not ours to write are left byte for byte.
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

TestSuite(storage, .init = helpers_init, .fini = helpers_fini);

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
	cr_expect_eq(store_batch_frame(b, "f", "x.py", 1, 5, 0), -1, "kind 5");
	cr_expect_eq(store_batch_stack(b, -1, 0), -1, "no frame 0 yet");
	int32_t f = store_batch_frame(b, "f", "x.py", 1, 0, 0);
	cr_assert_eq(f, 0);
	cr_expect_eq(store_batch_stack(b, 0, f), -1, "no stack 0 yet");
	cr_assert_eq(store_batch_stack(b, -1, f), 0);
	cr_expect_eq(store_batch_samples(b, 0, 0, 10, 1, 0, 1, 0), -1, "no target 0 yet");
	struct store_target_info info = {.pid = 1, .start_time = 1};
	cr_assert_eq(store_batch_target(b, &info), 0);
	cr_expect_eq(store_batch_samples(b, 0, 0, 10, 1, 1, 1, 0), -1, "no stack 1");
	cr_expect_eq(store_batch_samples(b, 0, 0, 0, 1, 0, 1, 0), -1, "zero-width bucket");
	cr_expect_eq(store_batch_samples(b, 0, 0, 10, 1, 0, 1, 0), 0);
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

	cr_expect_eq(raw_int(path, "PRAGMA user_version"), 5);
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
	                          "PRAGMA user_version = 6",
	                          NULL, NULL, NULL),
	             SQLITE_OK);
	sqlite3_close(db);
	expect_refused(path, "newer", "schema version 6");

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
	                                       frames[0].kind, 0);
	int32_t fresh = store_batch_frame(b, "fresh", "new.py", 3, 0, 0);
	int32_t s0 = store_batch_stack(b, -1, main_frame);
	int32_t s1 = store_batch_stack(b, s0, fresh);
	cr_assert(s0 >= 0 && s1 >= 0);
	cr_assert_eq(store_batch_samples(b, t, base, BUCKET_S, 9, s0, 4, 0), 0);
	cr_assert_eq(store_batch_samples(b, t, base + BUCKET_S, BUCKET_S, 9, s1, 6, 0), 0);
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

/* ---- schema 2: functions by qualified name and first line, idle samples, thread names ---- */

/* What a query split by threads returned, per (thread name, leaf function, first line). */
struct split_seen {
	uint64_t total, idle;
	uint64_t main_run, worker_run, old_row;
	char labels[128];
	int64_t main_native;
};

static int split_row(void *ctx, const struct store_row *row)
{
	struct split_seen *s = ctx;
	s->total += row->count;
	s->idle += row->idle;
	const struct store_frame *leaf = &row->frames[row->depth - 1];
	if (strcmp(leaf->function, "old") == 0 && leaf->first_line == 0)
		s->old_row += row->count;
	if (!row->thread)
		return 0;
	if (strcmp(row->thread->name, "MainThread") == 0 && strcmp(leaf->function, "Runner.run") == 0 &&
	    leaf->first_line == 118) {
		s->main_run += row->count;
		s->main_native = row->thread->native_id;
		snprintf(s->labels, sizeof s->labels, "%s=%s", row->thread->nlabels ? row->thread->label_keys[0] : "",
		         row->thread->nlabels ? row->thread->label_values[0] : "");
	}
	if (strcmp(row->thread->name, "worker") == 0 && strcmp(leaf->function, "run") == 0 &&
	    leaf->first_line == 40)
		s->worker_run += row->count;
	return 0;
}

Test(storage, schema_1_migrates_keeping_its_rows)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	/* A history as schema 1 wrote it: a frame by co_name, no first line, no idle counts. */
	sqlite3 *made = NULL;
	cr_assert_eq(sqlite3_open(path, &made), SQLITE_OK);
	sqlite3_close(made);
	raw_exec(path,
	         "CREATE TABLE strings(id INTEGER PRIMARY KEY, s TEXT NOT NULL UNIQUE);"
	         "CREATE TABLE frames(id INTEGER PRIMARY KEY, function INTEGER NOT NULL, file INTEGER NOT NULL,"
	         "  line INTEGER NOT NULL, kind INTEGER NOT NULL, UNIQUE(function, file, line, kind));"
	         "CREATE TABLE stacks(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, frame INTEGER NOT NULL,"
	         "  UNIQUE(parent, frame));"
	         "CREATE TABLE targets(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_time INTEGER NOT NULL,"
	         "  uid INTEGER NOT NULL, executable TEXT, command_line TEXT, python_version TEXT,"
	         "  first_seen REAL NOT NULL, last_seen REAL NOT NULL, UNIQUE(pid, start_time));"
	         "CREATE TABLE target_labels(target INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
	         "  PRIMARY KEY(target, key)) WITHOUT ROWID;"
	         "CREATE INDEX target_labels_kv ON target_labels(key, value, target);"
	         "CREATE TABLE sessions(id INTEGER PRIMARY KEY, target INTEGER NOT NULL, attached_at REAL NOT NULL,"
	         "  detached_at REAL, rate_hz INTEGER NOT NULL, mode TEXT, UNIQUE(target, attached_at));"
	         "CREATE TABLE samples(target INTEGER NOT NULL, bucket_start INTEGER NOT NULL,"
	         "  bucket_seconds INTEGER NOT NULL, thread_id INTEGER NOT NULL, stack INTEGER NOT NULL,"
	         "  count INTEGER NOT NULL,"
	         "  PRIMARY KEY(target, bucket_start, bucket_seconds, thread_id, stack)) WITHOUT ROWID;"
	         "CREATE INDEX samples_bucket ON samples(bucket_start);"
	         "INSERT INTO strings VALUES (1, 'old'), (2, 'app.py');"
	         "INSERT INTO frames VALUES (7, 1, 2, 3, 0);"
	         "INSERT INTO stacks VALUES (9, 0, 7);"
	         "INSERT INTO targets VALUES (1, 4242, 1, 0, NULL, NULL, '3.10.0', 1000, 1000);"
	         "INSERT INTO target_labels VALUES (1, 'service', 'api');"
	         "INSERT INTO samples VALUES (1, 1000, 10, 5, 9, 6);"
	         "PRAGMA user_version = 1;");
	struct store_writer *w = open_writer(path);

	/* New rows beside the old: one process, two threads, a method and a function both run. */
	struct store_batch *b = store_batch_new();
	const char *keys[] = {"service"}, *values[] = {"api"};
	struct store_target_info info = {.pid = 4242, .start_time = 1, .nlabels = 1,
	                                 .label_keys = keys, .label_values = values};
	int t = store_batch_target(b, &info);
	int32_t mod = store_batch_frame(b, "<module>", "app.py", 9, 0, 1);
	int32_t method = store_batch_frame(b, "Runner.run", "runners.py", 120, 0, 118);
	int32_t function = store_batch_frame(b, "run", "runners.py", 44, 0, 40);
	int32_t root = store_batch_stack(b, -1, mod);
	int32_t s_method = store_batch_stack(b, root, method), s_function = store_batch_stack(b, root, function);
	cr_assert(t >= 0 && s_method >= 0 && s_function >= 0);
	cr_assert_eq(store_batch_samples(b, t, 2000, 10, 1, s_method, 4, 0), 0);
	cr_assert_eq(store_batch_samples(b, t, 2000, 10, 2, s_function, 5, 3), 0);
	cr_assert_eq(store_batch_samples(b, t, 2000, 10, 2, s_function, 5, 6), -1, "more idle than samples");
	cr_assert_eq(store_batch_thread(b, t, 1, 4242, "MainThread"), 0);
	cr_assert_eq(store_batch_thread(b, t, 2, 4243, "worker"), 0);
	store_writer_submit(w, b);
	store_writer_sync(w);
	expect_written(w, "schema 2 rows");
	/* A later batch without a name keeps the one the thread had. */
	b = store_batch_new();
	t = store_batch_target(b, &info);
	cr_assert_eq(store_batch_thread(b, t, 2, 4243, ""), 0);
	store_writer_submit(w, b);
	store_writer_sync(w);
	store_writer_close(w);
	cr_expect_eq(raw_int(path, "PRAGMA user_version"), 5);
	cr_expect_eq(raw_int(path, "SELECT first_line FROM frames WHERE id = 7"), 0, "the old frame kept its id");
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM threads WHERE name = 'worker'"), 1);

	struct store_reader *r = open_reader(path);
	struct store_query q = {.until_unix = 3000, .split_threads = true};
	struct split_seen seen = {0};
	struct store_error err = {{0}};
	uint64_t total = 0;
	cr_assert_eq(store_query_stacks(r, &q, split_row, &seen, &total, &err), 0, "%s", err.msg);
	cr_expect_eq(total, 15);
	cr_expect_eq(seen.old_row, 6, "the row schema 1 wrote is still found, by its name");
	cr_expect_eq(seen.main_run, 4);
	cr_expect_eq(seen.worker_run, 5);
	cr_expect_eq(seen.idle, 3);
	cr_expect_eq(seen.main_native, 4242);
	cr_expect_str_eq(seen.labels, "service=api");

	/* Without the waiting samples. */
	q.no_idle = true;
	memset(&seen, 0, sizeof seen);
	cr_assert_eq(store_query_stacks(r, &q, split_row, &seen, &total, &err), 0, "%s", err.msg);
	cr_expect_eq(total, 12);
	cr_expect_eq(seen.worker_run, 2);
	cr_expect_eq(seen.idle, 0);
	store_reader_close(r);
}

/*
 * The writer's memory stops growing with the file.  SQLite's default page
 * cache (2000 KiB) filled at the pace the file grew, so a daemon's RSS crept
 * for hours before it levelled.  Writing a file many times the writer's
 * cache must leave SQLite's memory in this process (the writer's
 * connection alone) under 1 MiB.
 */
Test(storage, writer_memory_is_bounded_as_the_file_grows, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	int64_t base = base_days_ago(2);
	for (int64_t k = 0; k < 6000; k += 500) {
		submit_buckets(w, base, k, k + 500);
		store_writer_sync(w);
	}
	expect_written(w, "12 batches");
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_assert_gt(st.db_bytes, 4u << 20, "the file is only %llu bytes: nothing to bound",
	             (unsigned long long)st.db_bytes);
	long long used = (long long)sqlite3_memory_used();
	cr_assert_lt(used, 1 << 20, "SQLite holds %lld bytes for a %llu-byte file", used,
	             (unsigned long long)st.db_bytes);
	store_writer_close(w);
}

/* Counts per (stack, slot from the base's), and what every row said of its slot. */
struct slot_tally {
	int64_t base;
	uint32_t width; /* every row's slot_seconds: they must agree */
	uint64_t count[NSTACKS][16];
	unsigned rows, bad;
};

static int slot_row(void *ctx, const struct store_row *row)
{
	struct slot_tally *t = ctx;
	int s = stack_of(row);
	if (t->rows++ == 0)
		t->width = row->slot_seconds;
	int64_t k = row->slot_seconds ? row->slot_start / row->slot_seconds - t->base / row->slot_seconds : -1;
	if (s < 0 || row->slot_seconds != t->width || !row->slot_seconds ||
	    row->slot_start % row->slot_seconds || k < 0 || k >= 16)
		t->bad++;
	else
		t->count[s][k] += row->count;
	return 0;
}

/*
 * A query split by time: the narrowest width that fits the samples in the
 * slots asked for, every sample in the slot its bucket starts in, and no
 * slot narrower than a bucket.
 */
Test(storage, query_by_time_slots, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	int64_t base = base_days_ago(1);
	/* 12 buckets of 10 s: 2 minutes. */
	submit_buckets(w, base, 0, 12);
	store_writer_sync(w);
	expect_written(w, "two minutes");
	struct store_reader *r = open_reader(path);
	struct store_query q = range_query(base, 0, 12);
	struct store_error err = {{0}};
	uint64_t total;
	static const struct {
		uint32_t slots, width;
	} cases[] = {
		{12, 10}, /* a slot per bucket */
		{11, 20}, /* 6 slots of 20 s */
		{4, 60},  /* 2 minutes: 2 slots of a minute, not 3 of 40 s */
		{1, 120}, /* one */
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		q.time_slots = cases[c].slots;
		struct slot_tally t = {.base = base};
		cr_assert_eq(store_query_stacks(r, &q, slot_row, &t, &total, &err), 0, "%s", err.msg);
		cr_expect_eq(t.bad, 0, "%u slots: %u rows out of their slots", cases[c].slots, t.bad);
		cr_expect_eq(t.width, cases[c].width, "%u slots", cases[c].slots);
		for (int s = 0; s < NSTACKS; s++)
			for (int64_t k = 0; k < 12; k++) {
				uint64_t want = 0;
				for (int64_t b = 0; b < 12; b++)
					if (b * BUCKET_S / cases[c].width == k)
						for (int tg = 0; tg < NTARGETS; tg++)
							for (int th = 0; th < NTHREADS; th++)
								want += count_of(tg, b, th, s);
				cr_expect_eq(t.count[s][k], want, "%u slots: stack %d, slot %lld",
				             cases[c].slots, s, (long long)k);
			}
	}
	/* Without slots, a row per stack as before, and no slot said. */
	q.time_slots = 0;
	struct slot_tally t = {.base = base};
	cr_assert_eq(store_query_stacks(r, &q, slot_row, &t, &total, &err), 0, "%s", err.msg);
	cr_expect_eq(t.rows, NSTACKS);
	cr_expect_eq(t.width, 0);
	store_reader_close(r);

	/* An hour merged into one bucket (as retention does): no slot is narrower than it. */
	struct store_batch *b = store_batch_new();
	struct store_target_info info = {.pid = 77, .start_time = 1};
	int tg = store_batch_target(b, &info);
	int32_t f = store_batch_frame(b, "old", "old.py", 1, 0, 1);
	int32_t st = store_batch_stack(b, -1, f);
	cr_assert_eq(store_batch_samples(b, tg, base - 3600, 3600, 1, st, 5, 0), 0);
	store_writer_submit(w, b);
	store_writer_sync(w);
	store_writer_close(w);
	r = open_reader(path);
	q = range_query(base, -360, 12);
	q.time_slots = 240;
	struct slot_tally wide = {.base = base - 3600};
	cr_assert_eq(store_query_stacks(r, &q, slot_row, &wide, &total, &err), 0, "%s", err.msg);
	cr_expect_eq(wide.width, 3600);
	store_reader_close(r);
}

/* One batch of `per` two-frame stacks, each under main with a handler of its own numbered from first. */
static uint64_t submit_handlers(struct store_writer *w, int64_t bucket, int first, int per)
{
	struct store_batch *b = store_batch_new();
	struct store_target_info info = {.pid = 4242, .start_time = 9000, .executable = "/usr/bin/python3"};
	int t = store_batch_target(b, &info);
	int32_t main_frame = store_batch_frame(b, "main", "app.py", 1, 0, 1);
	int32_t root = store_batch_stack(b, -1, main_frame);
	cr_assert(t >= 0 && main_frame >= 0 && root >= 0);
	uint64_t total = 0;
	for (int i = first; i < first + per; i++) {
		char function[32], file[32];
		snprintf(function, sizeof function, "handler_%d", i);
		snprintf(file, sizeof file, "handlers/mod_%d.py", i % 97);
		int32_t f = store_batch_frame(b, function, file, 10 + i % 50, 0, 10);
		int32_t s = store_batch_stack(b, root, f);
		cr_assert(f >= 0 && s >= 0);
		cr_assert_eq(store_batch_samples(b, t, bucket, BUCKET_S, 1, s, 1 + i % 3, 0), 0);
		total += 1 + i % 3;
	}
	store_writer_submit(w, b);
	return total;
}

/*
 * The writer's caches of ids by content stay within their bytes however
 * many distinct names, frames and stacks come, and what they let go is
 * found in the file again: a second pass over the same stacks, long gone
 * from the caches, adds samples and not a row of strings, frames or stacks.
 */
Test(storage, writer_caches_stay_within_their_budget, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	const size_t budget = 64 << 10;
	store_writer_set_cache_budget(w, budget);
	enum { BATCHES = 40, PER = 200 };
	int64_t base = base_days_ago(0);
	uint64_t total = 0, peak = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int k = 0; k < BATCHES; k++) {
			total += submit_handlers(w, base + pass * BUCKET_S, k * PER, PER);
			store_writer_sync(w);
			struct store_writer_status st;
			store_writer_status(w, &st);
			cr_assert_leq(st.cache_bytes, budget, "pass %d, batch %d: the caches hold %llu bytes",
			              pass, k, (unsigned long long)st.cache_bytes);
			cr_assert_eq(st.cache_budget_bytes, budget);
			peak = st.cache_bytes > peak ? st.cache_bytes : peak;
		}
		expect_written(w, "handlers");
	}
	cr_assert_gt(peak, budget / 4, "the caches were never used: %llu bytes", (unsigned long long)peak);
	cr_assert_eq(raw_int(path, "SELECT count(*) FROM stacks"), 1 + BATCHES * PER);
	cr_assert_eq(raw_int(path, "SELECT count(*) FROM frames"), 1 + BATCHES * PER);
	/* main, app.py, every handler and its 97 modules. */
	cr_assert_eq(raw_int(path, "SELECT count(*) FROM strings"), 2 + BATCHES * PER + 97);
	cr_assert_eq(raw_int(path, "SELECT count(*) FROM (SELECT DISTINCT parent, frame FROM stacks)"),
	             1 + BATCHES * PER);
	cr_assert_eq(raw_int(path, "SELECT sum(count) FROM samples"), (int64_t)total);
	store_writer_close(w);
}

/* ---- schema 5: C frames with their module's build id ---- */

struct c_seen {
	uint64_t old_build, new_build, python;
	int32_t address;
};

static int c_row(void *ctx, const struct store_row *row)
{
	struct c_seen *s = ctx;
	const struct store_frame *leaf = &row->frames[row->depth - 1];
	if (leaf->kind != 4) {
		s->python += row->count;
		cr_expect(!leaf->build_id || !*leaf->build_id, "a Python frame with a build id");
		return 0;
	}
	cr_expect_str_eq(leaf->function, "deflate");
	s->address = leaf->line;
	if (strcmp(leaf->build_id, "aa11") == 0)
		s->old_build += row->count;
	else if (strcmp(leaf->build_id, "bb22") == 0)
		s->new_build += row->count;
	return 0;
}

/* What a query of the whole history found, by c_row. */
static struct c_seen c_query(const char *path)
{
	struct store_reader *r = open_reader(path);
	struct store_query q = {.until_unix = 3000};
	struct c_seen seen = {0};
	struct store_error err = {{0}};
	uint64_t total = 0;
	cr_assert_eq(store_query_stacks(r, &q, c_row, &seen, &total, &err), 0, "%s", err.msg);
	store_reader_close(r);
	return seen;
}

/*
 * A C frame keeps its address (as its line) and its module's build id; two
 * builds of a library at one path (an upgrade under a running fleet) are
 * two frames, each row counted under its own.  A history of schema 4
 * migrates with its frames' ids.
 */
Test(storage, c_frames_keep_their_build_id_across_a_migration)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	struct store_batch *b = store_batch_new();
	struct store_target_info info = {.pid = 4242, .start_time = 1};
	int t = store_batch_target(b, &info);
	int32_t py = store_batch_frame(b, "run", "app.py", 37, 0, 35);
	int32_t old_build = store_batch_c_frame(b, "deflate", "/usr/lib/libz.so.1", 0x6100, "aa11");
	int32_t new_build = store_batch_c_frame(b, "deflate", "/usr/lib/libz.so.1", 0x6100, "bb22");
	int32_t root = store_batch_stack(b, -1, py);
	int32_t s_old = store_batch_stack(b, root, old_build), s_new = store_batch_stack(b, root, new_build);
	cr_assert(t >= 0 && old_build >= 0 && new_build >= 0 && old_build != new_build && s_old >= 0 && s_new >= 0);
	cr_assert_eq(store_batch_samples(b, t, 2000, 10, 1, s_old, 3, 0), 0);
	cr_assert_eq(store_batch_samples(b, t, 2000, 10, 1, s_new, 4, 0), 0);
	cr_assert_eq(store_batch_samples(b, t, 2000, 10, 1, root, 2, 0), 0);
	store_writer_submit(w, b);
	store_writer_sync(w);
	expect_written(w, "C frames");
	store_writer_close(w);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM frames WHERE kind = 4"), 2, "two builds, two frames");

	struct c_seen seen = c_query(path);
	cr_expect_eq(seen.old_build, 3);
	cr_expect_eq(seen.new_build, 4);
	cr_expect_eq(seen.python, 2);
	cr_expect_eq(seen.address, 0x6100);
}

Test(storage, schema_4_migrates_its_frames_under_their_ids)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	struct store_writer *w = open_writer(path);
	struct store_batch *b = store_batch_new();
	struct store_target_info info = {.pid = 4242, .start_time = 1};
	int t = store_batch_target(b, &info);
	int32_t f = store_batch_frame(b, "run", "app.py", 37, 0, 35);
	int32_t s = store_batch_stack(b, -1, f);
	cr_assert_eq(store_batch_samples(b, t, 2000, 10, 1, s, 3, 0), 0);
	store_writer_submit(w, b);
	store_writer_sync(w);
	expect_written(w, "a frame");
	store_writer_close(w);
	/* Back to schema 4's frames, as a history of the last release has it. */
	int64_t id = raw_int(path, "SELECT id FROM frames");
	raw_exec(path, "CREATE TABLE frames_v4(id INTEGER PRIMARY KEY, function INTEGER NOT NULL,"
	               "  file INTEGER NOT NULL, line INTEGER NOT NULL, kind INTEGER NOT NULL,"
	               "  first_line INTEGER NOT NULL DEFAULT 0, UNIQUE(function, file, line, kind, first_line));"
	               "INSERT INTO frames_v4 SELECT id, function, file, line, kind, first_line FROM frames;"
	               "DROP TABLE frames; ALTER TABLE frames_v4 RENAME TO frames; PRAGMA user_version = 4;");
	/* The writer migrates as it opens the file, in its own thread: a batch written proves it did. */
	w = open_writer(path);
	store_writer_submit(w, store_batch_new());
	store_writer_sync(w);
	expect_written(w, "nothing, after the migration");
	store_writer_close(w);
	cr_expect_eq(raw_int(path, "PRAGMA user_version"), 5);
	cr_expect_eq(raw_int(path, "SELECT id FROM frames"), id, "the frame kept its id");
	cr_expect_eq(raw_int(path, "SELECT build_id FROM frames"), 0, "no build id");
	cr_expect_eq(c_query(path).python, 3, "its samples are still found");
}
