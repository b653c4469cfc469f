/*
 * Retention, on the writer's connection and thread: merge old buckets into
 * coarser ones, then keep the file under its size cap.
 *
 * Context rows (the samples again, split by request context) are never
 * merged: a trace is of interest for a while, and its rows would keep the
 * history growing with the number of traces.  They are deleted once their
 * bucket is as old as the first step's age, before the merges, so a query
 * never meets a coarse sample beside fine context rows of it; under the
 * size cap they go first, before any sample.
 *
 * Merging adds the counts of every fine row into the row of the coarse
 * bucket that contains its start (bucket_start rounded down to the step's
 * width), per (target, thread, stack), and deletes the fine rows, an hour
 * of buckets per transaction, oldest first, so a backlog (a daemon down for
 * days, a new step) holds the writer a slice at a time: between slices the
 * writer may write the batches that came meanwhile.  Only whole coarse buckets are merged (those ending
 * before now - older_than), so a coarse bucket never sits beside fine rows
 * of its own span, and the sum over any range of whole coarse buckets is
 * what it was before.
 *
 * The cap drops whole buckets, oldest first, together with what only they
 * used: stacks no remaining sample reaches, then frames no stack uses, then
 * strings no frame names.  Without that, a workload whose stacks churn (new
 * code paths, new files, generated names) grows the interned tables past
 * any cap while the cap drops every sample.  Since the interned rows freed
 * are only known once collected, the cap works in rounds: each drops the
 * share of sample rows that the excess is of the pages in use, collects
 * the orphans and measures again.  Then PRAGMA incremental_vacuum gives the
 * freed pages back to the file system (the store is created with
 * auto_vacuum = INCREMENTAL: it costs in proportion to the pages freed,
 * where VACUUM rewrites the whole file and needs as much free space again)
 * and a checkpoint truncates the WAL.  Pages freed by merges stay on the
 * free list, where the next batches reuse them.
 */
#include <math.h>
#include <stdio.h>

#include "storage.h"

/* Bounds the cap's rounds; each drops at least one bucket start, usually all it needs at once. */
#define STORE_MAX_CAP_ROUNDS 64

/* Bucket time merged per transaction: a slice's rows, not the whole backlog's, hold the writer. */
#define STORE_MERGE_SLICE_S 3600

static const char merge_sql[] =
	"INSERT INTO samples(target, bucket_start, bucket_seconds, thread_id, stack, count, idle) "
	"SELECT target, (bucket_start / ?2) * ?2, ?2, thread_id, stack, sum(count), sum(idle) "
	"FROM samples WHERE bucket_start >= ?3 AND bucket_start < ?1 AND bucket_seconds < ?2 "
	"GROUP BY target, (bucket_start / ?2) * ?2, thread_id, stack "
	"ON CONFLICT(target, bucket_start, bucket_seconds, thread_id, stack) "
	"DO UPDATE SET count = count + excluded.count, idle = idle + excluded.idle";
static const char merged_sql[] =
	"DELETE FROM samples WHERE bucket_start >= ?3 AND bucket_start < ?1 AND bucket_seconds < ?2";
/* The oldest bucket still to merge at or past ?3. */
static const char oldest_sql[] =
	"SELECT min(bucket_start) FROM samples "
	"WHERE bucket_start >= ?3 AND bucket_start < ?1 AND bucket_seconds < ?2";

/* Runs a statement with (end, width, start) bound; *first gets a row's integer.  0, or -1 and *err. */
static int run_bound(sqlite3 *db, const char *sql, int64_t end, int64_t width, int64_t start,
                     int64_t *first, struct store_error *err)
{
	sqlite3_stmt *st = NULL;
	int rc = SQLITE_ERROR;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_bind_int64(st, 1, end) == SQLITE_OK && sqlite3_bind_int64(st, 2, width) == SQLITE_OK &&
	    sqlite3_bind_int64(st, 3, start) == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc == SQLITE_ROW && first)
		*first = sqlite3_column_type(st, 0) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 0);
	if (rc != SQLITE_DONE && !(rc == SQLITE_ROW && first)) {
		store_error_set(err, db, "retention %.30s", sql);
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_finalize(st);
	return 0;
}

/* Merges [start, end) of one step in one transaction.  0, or -1 and *err. */
static int merge_slice(sqlite3 *db, int64_t start, int64_t end, int64_t width,
                       struct store_error *err)
{
	if (store_exec(db, "BEGIN IMMEDIATE", err) < 0)
		return -1;
	if (run_bound(db, merge_sql, end, width, start, NULL, err) < 0 ||
	    run_bound(db, merged_sql, end, width, start, NULL, err) < 0 ||
	    store_exec(db, "COMMIT", err) < 0) {
		store_exec(db, "ROLLBACK", NULL);
		return -1;
	}
	return 0;
}

/*
 * One step: every whole coarse bucket older than its age merged, oldest
 * first, a slice per transaction.  0 when done, 1 when yield asked to stop
 * between slices, or -1 and *err.
 */
static int retention_merge(sqlite3 *db, const struct store_retention_step *s, double now,
                           int64_t horizon, bool (*yield)(void *ctx), void *yield_ctx,
                           struct store_error *err)
{
	if (s->bucket_seconds == 0 || !(s->older_than_s >= 0)) {
		store_error_text(err, "retention step: width %u, age %g: invalid", s->bucket_seconds,
		                 s->older_than_s);
		return -1;
	}
	int64_t width = s->bucket_seconds;
	double edge = floor((now - s->older_than_s) / (double)width);
	if (!(edge > -9e15 && edge < 9e15 / (double)width))
		return 0; /* nothing that old or new can exist */
	int64_t cut = (int64_t)edge * width;
	/* What an export sink has still to send stays as it was sent from: whole fine buckets. */
	if (horizon >= 0 && cut > horizon / width * width)
		cut = horizon / width * width;
	/* Rounding down by division: bucket starts are seconds after 1970, never negative. */
	if (cut <= 0)
		return 0;
	/* Whole coarse buckets per slice, at least one, about an hour of them. */
	int64_t slice = width * (width >= STORE_MERGE_SLICE_S ? 1 : STORE_MERGE_SLICE_S / width);
	int64_t from = 0;
	/*
	 * Each slice merges and deletes every fine row of its span, so the next
	 * oldest lies past it: at most one slice per coarse span up to the cut.
	 */
	for (;;) {
		int64_t oldest;
		if (run_bound(db, oldest_sql, cut, width, from, &oldest, err) < 0)
			return -1;
		if (oldest < 0)
			return 0;
		int64_t start = (oldest / width) * width;
		int64_t end = start + slice < cut ? start + slice : cut;
		if (merge_slice(db, start, end, width, err) < 0)
			return -1;
		from = end;
		if (from < cut && yield && yield(yield_ctx))
			return 1;
	}
}

/* Bytes in pages that hold data (the file minus its free list). */
static int used_bytes(sqlite3 *db, uint64_t *out, struct store_error *err)
{
	int64_t pages, freelist, size;
	if (store_query_int(db, "PRAGMA page_count", &pages, err) < 0 ||
	    store_query_int(db, "PRAGMA freelist_count", &freelist, err) < 0 ||
	    store_query_int(db, "PRAGMA page_size", &size, err) < 0)
		return -1;
	*out = (uint64_t)(pages - freelist) * (uint64_t)size;
	return 0;
}

/*
 * The interned rows no sample needs any more.  A stack is live if a sample
 * names it or it is an ancestor of a live stack: one recursive walk up from
 * the samples' stacks (UNION keeps each id once, so the walk ends after at
 * most one step per stack, a cycle in a corrupt file included).  Frames are
 * the only table that names strings: targets, labels and sessions keep
 * their text inline.  A process no sample is left of goes too, with its
 * labels and sessions, once it has not been seen for a day (one seen since
 * may still have samples on their way).  0, or -1 and *err.
 */
static int collect_orphans(sqlite3 *db, struct store_error *err)
{
	static const char *const sql[] = {
		"DELETE FROM contexts WHERE id NOT IN (SELECT context FROM context_samples)",
		"WITH RECURSIVE live(id) AS ("
		"SELECT stack FROM samples UNION SELECT stack FROM context_samples UNION "
		"SELECT stacks.parent FROM stacks JOIN live ON stacks.id = live.id "
		"WHERE stacks.parent != 0) "
		"DELETE FROM stacks WHERE id NOT IN (SELECT id FROM live)",
		"DELETE FROM frames WHERE id NOT IN (SELECT frame FROM stacks)",
		"DELETE FROM strings WHERE id NOT IN (SELECT function FROM frames UNION "
		"SELECT file FROM frames UNION SELECT build_id FROM frames)",
		"DROP TABLE IF EXISTS temp.gone",
		"CREATE TEMP TABLE gone AS SELECT id FROM targets "
		"WHERE last_seen < unixepoch() - 86400 AND id NOT IN (SELECT DISTINCT target FROM samples)",
		"DELETE FROM target_labels WHERE target IN (SELECT id FROM gone)",
		"DELETE FROM threads WHERE target IN (SELECT id FROM gone)",
		"DELETE FROM sessions WHERE target IN (SELECT id FROM gone)",
		"DELETE FROM targets WHERE id IN (SELECT id FROM gone)",
		"DROP TABLE gone",
	};
	for (size_t i = 0; i < sizeof sql / sizeof *sql; i++) {
		if (store_exec(db, sql[i], err) < 0)
			return -1;
	}
	return 0;
}

/*
 * The newest bucket start such that dropping it and every older one drops
 * at least want sample rows (the newest of all if there are fewer rows);
 * *none when there are no samples.  Walks bucket starts oldest first, at
 * most one step per bucket start.  0, or -1 and *err.
 */
static int drop_cut(sqlite3 *db, const char *table, uint64_t want, int64_t *cut, bool *none,
                    struct store_error *err)
{
	sqlite3_stmt *st = NULL;
	char sql[128];
	snprintf(sql, sizeof sql,
	         "SELECT bucket_start, count(*) FROM %s GROUP BY bucket_start ORDER BY bucket_start", table);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		store_error_set(err, db, "retention: prepare");
		return -1;
	}
	uint64_t rows = 0;
	int rc = SQLITE_DONE;
	*none = true;
	while (rows < want && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		*none = false;
		*cut = sqlite3_column_int64(st, 0);
		rows += (uint64_t)sqlite3_column_int64(st, 1);
	}
	if (rows < want && rc != SQLITE_DONE) {
		store_error_set(err, db, "retention: bucket starts");
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_finalize(st);
	return 0;
}

/*
 * Drops the oldest buckets, and what only they used, while the data pages
 * pass max_bytes.  0, or -1 and *err.
 */
static int retention_cap(sqlite3 *db, uint64_t max_bytes, struct store_error *err)
{
	uint64_t used;
	if (used_bytes(db, &used, err) < 0)
		return -1;
	if (used <= max_bytes)
		return 0;
	/* Context rows first: they only repeat samples at a finer grain. */
	sqlite3_stmt *drop[2] = {NULL, NULL};
	static const char *const tables[2] = {"context_samples", "samples"};
	if (sqlite3_prepare_v2(db, "DELETE FROM context_samples WHERE bucket_start <= ?1", -1, &drop[0],
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, "DELETE FROM samples WHERE bucket_start <= ?1", -1, &drop[1], NULL) !=
	            SQLITE_OK) {
		store_error_set(err, db, "retention: prepare");
		goto fail;
	}
	if (store_exec(db, "BEGIN IMMEDIATE", err) < 0)
		goto fail;
	/*
	 * Pages free only when emptied: a round whose rows freed none makes the
	 * next one drop twice as many, so a small excess cannot stall the cap.
	 */
	uint64_t at_least = 1;
	int which = 0;
	for (int round = 0; round < STORE_MAX_CAP_ROUNDS && used > max_bytes; round++) {
		int64_t rows;
		char count[64];
		snprintf(count, sizeof count, "SELECT count(*) FROM %s", tables[which]);
		if (store_query_int(db, count, &rows, err) < 0)
			goto rollback;
		if (rows <= 0 && which == 0) {
			/* No context rows left: samples from now on, counted afresh. */
			which = 1;
			at_least = 1;
			round--;
			continue;
		}
		if (rows <= 0)
			break; /* no samples left: what remains is targets and sessions */
		/* The excess's share of the pages, in rows: interned rows go with them. */
		uint64_t want = (uint64_t)ceil((double)rows * (double)(used - max_bytes) / (double)used);
		if (want < at_least)
			want = at_least;
		int64_t cut = 0;
		bool none;
		if (drop_cut(db, tables[which], want, &cut, &none, err) < 0)
			goto rollback;
		if (none)
			break;
		if (sqlite3_bind_int64(drop[which], 1, cut) != SQLITE_OK ||
		    sqlite3_step(drop[which]) != SQLITE_DONE) {
			store_error_set(err, db, "retention: drop %s up to %lld", tables[which], (long long)cut);
			goto rollback;
		}
		sqlite3_reset(drop[which]);
		uint64_t before = used;
		if (collect_orphans(db, err) < 0 || used_bytes(db, &used, err) < 0)
			goto rollback;
		if (used >= before && want <= UINT64_MAX / 2)
			at_least = want * 2;
	}
	if (store_exec(db, "COMMIT", err) < 0)
		goto rollback;
	sqlite3_finalize(drop[0]);
	sqlite3_finalize(drop[1]);
	/* Runs the vacuum to its end: a PRAGMA with rows would otherwise free one page per step. */
	if (store_exec(db, "PRAGMA incremental_vacuum", err) < 0)
		return -1;
	/* Best effort: a reader in the WAL keeps it from shrinking now; the next checkpoint will. */
	sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	return 0;
rollback:
	store_exec(db, "ROLLBACK", NULL);
fail:
	sqlite3_finalize(drop[0]);
	sqlite3_finalize(drop[1]);
	return -1;
}

/*
 * Context rows whose bucket is older than the first step's age (held back,
 * as merges are, by what a sink has still to send), and the contexts no row
 * uses any more, in one transaction.  0, or -1 and *err.
 */
static int retention_contexts(sqlite3 *db, const struct store_retention_step *s, double now,
                              int64_t horizon, struct store_error *err)
{
	double edge = floor(now - s->older_than_s);
	if (!(s->older_than_s >= 0) || !(edge > -9e15 && edge < 9e15))
		return 0;
	int64_t cut = (int64_t)edge;
	if (horizon >= 0 && cut > horizon)
		cut = horizon;
	char sql[128];
	snprintf(sql, sizeof sql, "DELETE FROM context_samples WHERE bucket_start < %lld",
	         (long long)cut);
	if (store_exec(db, "BEGIN IMMEDIATE", err) < 0)
		return -1;
	if (store_exec(db, sql, err) < 0 ||
	    store_exec(db, "DELETE FROM contexts WHERE id NOT IN (SELECT context FROM context_samples)",
	               err) < 0 ||
	    store_exec(db, "COMMIT", err) < 0) {
		store_exec(db, "ROLLBACK", NULL);
		return -1;
	}
	return 0;
}

int store_retention_run(sqlite3 *db, const struct store_retention_step *steps, size_t nsteps,
                        double now, uint64_t max_db_bytes, bool (*yield)(void *ctx),
                        void *yield_ctx, struct store_error *err)
{
	int64_t horizon;
	if (nsteps && sinks_horizon(db, now, &horizon, err) < 0)
		return -1;
	if (nsteps && retention_contexts(db, &steps[0], now, horizon, err) < 0)
		return -1;
	for (size_t i = 0; i < nsteps; i++) {
		int rc = retention_merge(db, &steps[i], now, horizon, yield, yield_ctx, err);
		if (rc != 0)
			return rc;
	}
	if (max_db_bytes && retention_cap(db, max_db_bytes, err) < 0)
		return -1;
	return 0;
}
