/*
 * What export sinks were sent, on real SQLite files: a sink starts where
 * it is declared, what is due is what no cursor passed, a target marked
 * alone moves ahead of its sink, the cursors outlive the writer, retention
 * merges nothing a sink has still to send, and a history of schema 1 is
 * migrated with its samples kept.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "seed.h"

TestSuite(sinks, .init = helpers_init, .fini = helpers_fini);

struct due_seen {
	size_t n;
	struct store_sink_due v[NTARGETS];
};

static int due_keep(void *ctx, const struct store_sink_due *d)
{
	struct due_seen *s = ctx;
	cr_assert_lt(s->n, NTARGETS, "more targets due than there are");
	s->v[s->n++] = *d;
	return 0;
}

/* Every sample of buckets [k0, k1) of the seed, all targets and threads. */
static uint64_t seed_samples(int64_t k0, int64_t k1, int target)
{
	uint64_t n = 0;
	for (int64_t k = k0; k < k1; k++)
		for (int t = 0; t < NTARGETS; t++)
			for (int th = 0; th < NTHREADS; th++)
				for (int s = 0; s < NSTACKS; s++)
					if (target < 0 || target == t)
						n += count_of(t, k, th, s);
	return n;
}

static struct store_sinks *open_sinks(struct store_writer *w)
{
	struct store_error err = {{0}};
	struct store_sinks *x = store_sinks_open(w, &err);
	cr_assert_not_null(x, "store_sinks_open: %s", err.msg);
	return x;
}

Test(sinks, cursors_select_what_was_not_sent, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base, 0, 30);
	store_writer_sync(w);
	expect_written(w, "seed");
	struct store_sinks *x = open_sinks(w);
	struct store_error err = {{0}};

	/* Declared at bucket 10: the ten before are not its to send. */
	int64_t sink, sent;
	cr_assert_eq(store_sink_get(x, "http://a:4318", base + 10 * BUCKET_S, 1000, &sink, &sent, &err), 0,
	             "%s", err.msg);
	cr_expect_eq(sent, base + 10 * BUCKET_S);
	/* Declared again, it keeps its cursor. */
	int64_t again, sent_again;
	cr_assert_eq(store_sink_get(x, "http://a:4318", base + 25 * BUCKET_S, 2000, &again,
	                               &sent_again, &err), 0);
	cr_expect_eq(again, sink);
	cr_expect_eq(sent_again, sent);

	struct due_seen due = {0};
	uint64_t samples = 0;
	cr_assert_eq(store_sink_due(x, sink, base + 20 * BUCKET_S, due_keep, &due, &samples, &err), 0,
	             "%s", err.msg);
	cr_expect_eq(due.n, NTARGETS);
	cr_expect_eq(samples, seed_samples(10, 20, -1));
	for (size_t i = 0; i < due.n; i++) {
		cr_expect_eq(due.v[i].from, base + 10 * BUCKET_S);
		cr_expect_eq(due.v[i].pid, pids[i]);
	}

	/* Target 0 goes on alone; the others wait at the sink's cursor. */
	cr_assert_eq(store_sink_mark(x, sink, due.v[0].target_id, base + 20 * BUCKET_S, &err), 0);
	memset(&due, 0, sizeof due);
	cr_assert_eq(store_sink_due(x, sink, base + 30 * BUCKET_S, due_keep, &due, &samples, &err), 0);
	cr_expect_eq(due.n, NTARGETS);
	cr_expect_eq(due.v[0].from, base + 20 * BUCKET_S);
	cr_expect_eq(due.v[0].samples, seed_samples(20, 30, 0));
	cr_expect_eq(due.v[1].from, base + 10 * BUCKET_S);
	cr_expect_eq(samples, seed_samples(20, 30, 0) + seed_samples(10, 30, 1) + seed_samples(10, 30, 2));

	/* The sink passes everything: nothing is due, and that outlives the connection and the writer. */
	cr_assert_eq(store_sink_advance(x, sink, base + 30 * BUCKET_S, &err), 0, "%s", err.msg);
	store_sinks_close(x);
	store_writer_close(w);
	w = open_writer(path);
	store_writer_sync(w);
	x = open_sinks(w);
	cr_assert_eq(store_sink_get(x, "http://a:4318", base, 3000, &sink, &sent, &err), 0);
	cr_expect_eq(sent, base + 30 * BUCKET_S);
	cr_assert_eq(store_sink_due(x, sink, base + 40 * BUCKET_S, NULL, NULL, &samples, &err), 0);
	cr_expect_eq(samples, 0);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM export_sent"), 0,
	             "the target's row stays once the sink passed it");
	/* Another sink is another cursor. */
	int64_t other;
	cr_assert_eq(store_sink_get(x, "http://b:4318", base, 3000, &other, &sent, &err), 0);
	cr_expect_neq(other, sink);
	cr_assert_eq(store_sink_due(x, other, base + 30 * BUCKET_S, NULL, NULL, &samples, &err), 0);
	cr_expect_eq(samples, seed_samples(0, 30, -1));
	store_sinks_close(x);
	store_writer_close(w);
}

Test(sinks, retention_keeps_what_a_sink_has_to_send, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	/* Two hours of 10 s buckets, three days old: old enough to merge into minutes. */
	int64_t base = base_days_ago(3);
	base -= base % 3600;
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base, 0, 720);
	store_writer_sync(w);
	struct store_sinks *x = open_sinks(w);
	struct store_error err = {{0}};
	int64_t sink, sent;
	/* Active now, sent up to the middle of a minute in the first hour. */
	int64_t cursor = base + 183 * BUCKET_S;
	cr_assert_eq(store_sink_get(x, "http://a:4318", cursor, (double)time(NULL), &sink, &sent, &err),
	             0);
	struct store_retention_step step = {3600, 60};
	store_writer_retention(w, &step, 1);
	store_writer_sync(w);
	int64_t edge = cursor / 60 * 60;
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM samples WHERE bucket_start >= %lld AND bucket_seconds = 60",
	         (long long)edge);
	cr_expect_eq(raw_int(path, sql), 0, "buckets a sink has still to send were merged");
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM samples WHERE bucket_start < %lld AND bucket_seconds = 10",
	         (long long)edge);
	cr_expect_eq(raw_int(path, sql), 0, "buckets every sink was sent were not merged");
	/* What is due is still exactly the seed's. */
	uint64_t samples = 0;
	cr_assert_eq(store_sink_due(x, sink, base + 720 * BUCKET_S, NULL, NULL, &samples, &err), 0);
	cr_expect_eq(samples, seed_samples(183, 720, -1));

	/* A sink not exported to for more than a day holds nothing back. */
	raw_exec(path, "UPDATE export_sinks SET active_at = 0");
	store_writer_retention(w, &step, 1);
	store_writer_sync(w);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM samples WHERE bucket_seconds = 10"), 0,
	             "an idle sink still holds retention back");
	store_sinks_close(x);
	store_writer_close(w);
}

Test(sinks, schema_2_is_migrated_with_its_samples, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base, 0, 10);
	store_writer_close(w);
	/* As a pyprofd before the exporter left it: version 2, no export tables. */
	raw_exec(path, "DROP TABLE export_sinks; DROP TABLE export_sent; DROP TABLE context_samples; "
	               "DROP TABLE contexts; PRAGMA user_version = 2");
	w = open_writer(path);
	store_writer_sync(w);
	expect_written(w, "reopened");
	cr_expect_eq(raw_int(path, "PRAGMA user_version"), 5);
	cr_expect_eq(raw_int(path, "SELECT count(*) FROM export_sinks"), 0);
	struct store_reader *r = open_reader(path);
	struct store_query q = range_query(base, 0, 10);
	struct expect e = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 10, .times = 1};
	check_query(r, &q, &e, "after the migration");
	store_reader_close(r);
	store_writer_close(w);
}
