/*
 * Retention, on the writer's connection and thread: merge old buckets into
 * coarser ones, then keep the file under its size cap.
 *
 * Merging adds the counts of every fine row into the row of the coarse
 * bucket that contains its start (bucket_start rounded down to the step's
 * width), per (target, thread, stack), and deletes the fine rows, in one
 * transaction per step.  Only whole coarse buckets are merged (those ending
 * before now - older_than), so a coarse bucket never sits beside fine rows
 * of its own span, and the sum over any range of whole coarse buckets is
 * what it was before.
 *
 * The cap drops whole buckets, oldest first, until the pages in use fit,
 * then PRAGMA incremental_vacuum gives the freed pages back to the file
 * system (the store is created with auto_vacuum = INCREMENTAL: it costs in
 * proportion to the pages freed, where VACUUM rewrites the whole file and
 * needs as much free space again) and a checkpoint truncates the WAL.
 * Interned strings, frames and stacks are kept: later samples reuse them,
 * and they are small next to samples.
 */
#include <math.h>
#include <stdio.h>

#include "storage.h"

/* Bounds the cap's loop: each turn drops one bucket start. */
#define STORE_MAX_DROP_TURNS 1000000

static const char merge_sql[] =
	"INSERT INTO samples(target, bucket_start, bucket_seconds, thread_id, stack, count) "
	"SELECT target, (bucket_start / ?2) * ?2, ?2, thread_id, stack, sum(count) FROM samples "
	"WHERE bucket_start < ?1 AND bucket_seconds < ?2 "
	"GROUP BY target, (bucket_start / ?2) * ?2, thread_id, stack "
	"ON CONFLICT(target, bucket_start, bucket_seconds, thread_id, stack) "
	"DO UPDATE SET count = count + excluded.count";
static const char merged_sql[] = "DELETE FROM samples WHERE bucket_start < ?1 AND bucket_seconds < ?2";

/* Runs a statement with (cut, width) bound.  0, or -1 and *err. */
static int run_bound(sqlite3 *db, const char *sql, int64_t cut, int64_t width,
                     struct store_error *err)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 1, cut) != SQLITE_OK || sqlite3_bind_int64(st, 2, width) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_DONE) {
		store_error_set(err, db, "retention %.30s", sql);
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_finalize(st);
	return 0;
}

/* One step: every whole coarse bucket older than its age merged.  0, or -1 and *err. */
static int retention_merge(sqlite3 *db, const struct store_retention_step *s, double now,
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
	/* Rounding down by division: bucket starts are seconds after 1970, never negative. */
	if (cut <= 0)
		return 0;
	if (store_exec(db, "BEGIN IMMEDIATE", err) < 0)
		return -1;
	if (run_bound(db, merge_sql, cut, width, err) < 0 ||
	    run_bound(db, merged_sql, cut, width, err) < 0 || store_exec(db, "COMMIT", err) < 0) {
		store_exec(db, "ROLLBACK", NULL);
		return -1;
	}
	return 0;
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

/* Drops the oldest buckets while the data pages pass max_bytes.  0, or -1 and *err. */
static int retention_cap(sqlite3 *db, uint64_t max_bytes, struct store_error *err)
{
	uint64_t used;
	if (used_bytes(db, &used, err) < 0)
		return -1;
	if (used <= max_bytes)
		return 0;
	sqlite3_stmt *oldest = NULL, *drop = NULL;
	if (sqlite3_prepare_v2(db, "SELECT min(bucket_start) FROM samples", -1, &oldest, NULL) !=
	            SQLITE_OK ||
	    sqlite3_prepare_v2(db, "DELETE FROM samples WHERE bucket_start <= ?1", -1, &drop, NULL) !=
	            SQLITE_OK) {
		store_error_set(err, db, "retention: prepare");
		goto fail;
	}
	if (store_exec(db, "BEGIN IMMEDIATE", err) < 0)
		goto fail;
	for (int turn = 0; turn < STORE_MAX_DROP_TURNS && used > max_bytes; turn++) {
		if (sqlite3_step(oldest) != SQLITE_ROW) {
			store_error_set(err, db, "retention: oldest bucket");
			goto rollback;
		}
		bool empty = sqlite3_column_type(oldest, 0) == SQLITE_NULL;
		int64_t start = sqlite3_column_int64(oldest, 0);
		sqlite3_reset(oldest);
		if (empty)
			break; /* no samples left: the rest is interned data */
		if (sqlite3_bind_int64(drop, 1, start) != SQLITE_OK || sqlite3_step(drop) != SQLITE_DONE) {
			store_error_set(err, db, "retention: drop bucket %lld", (long long)start);
			goto rollback;
		}
		sqlite3_reset(drop);
		if (used_bytes(db, &used, err) < 0)
			goto rollback;
	}
	if (store_exec(db, "COMMIT", err) < 0)
		goto rollback;
	sqlite3_finalize(oldest);
	sqlite3_finalize(drop);
	/* Runs the vacuum to its end: a PRAGMA with rows would otherwise free one page per step. */
	if (store_exec(db, "PRAGMA incremental_vacuum", err) < 0)
		return -1;
	/* Best effort: a reader in the WAL keeps it from shrinking now; the next checkpoint will. */
	sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	return 0;
rollback:
	store_exec(db, "ROLLBACK", NULL);
fail:
	sqlite3_finalize(oldest);
	sqlite3_finalize(drop);
	return -1;
}

int store_retention_run(sqlite3 *db, const struct store_retention_step *steps, size_t nsteps,
                        double now, uint64_t max_db_bytes, struct store_error *err)
{
	for (size_t i = 0; i < nsteps; i++) {
		if (retention_merge(db, &steps[i], now, err) < 0)
			return -1;
	}
	if (max_db_bytes && retention_cap(db, max_db_bytes, err) < 0)
		return -1;
	return 0;
}
