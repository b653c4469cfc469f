/*
 * The store's writer: one connection on a thread of its own, fed batches
 * through a queue.
 *
 * store_writer_submit only takes the queue's mutex, which no one holds
 * across an SQLite call, so the daemon's loop never waits on the disk.
 * Opening (creating, migrating) the database is the thread's work too: the
 * caller's thread may be an event loop, and a file that cannot be opened
 * now (no directory yet, read-only, not a database, a newer schema) must
 * not cost the batches submitted meanwhile.  Until it opens, batches wait
 * as behind a failing write, and opening is retried every STORE_RETRY_S.
 *
 * The thread writes the oldest batch in one transaction; if that fails for
 * a reason that may pass (full disk, read-only file, I/O error, a lock held
 * too long) the transaction is rolled back, the batch goes back to the head
 * of the queue and is retried every STORE_RETRY_S, while newer batches wait
 * behind it within max_pending_rows (past it the oldest are dropped and
 * counted).  A read-only file or an I/O error also closes the connection:
 * SQLite keeps a connection read-only once it opened it so, and a file
 * system remounted or a file made writable again is only seen by a new
 * open.  A batch SQLite refuses for good (a constraint, a corrupt file) is
 * dropped and counted, so one bad batch cannot stop the history.
 *
 * Interning goes through caches of content -> database id (strings, frames,
 * stacks).  A rolled-back transaction takes its new ids with it, and so
 * does retention (it deletes what no sample uses), so every cache is
 * cleared on rollback, after retention and with the connection.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage.h"

/* Seconds between retries of a failing write or open. */
#define STORE_RETRY_S 1.0
/* Defaults until store_writer_set_limits: about 64 MiB of sample rows waiting. */
#define STORE_DEFAULT_MAX_PENDING_ROWS (1u << 20)
/* Batches without rows count too: at most this many wait. */
#define STORE_MAX_PENDING_BATCHES 65536
/* Entries per interning cache; a full cache is cleared and refills from the database. */
#define STORE_CACHE_MAX (1u << 18)
/* SQLITE_MAX_PAGE_COUNT's default before 3.45: "no hard limit". */
#define STORE_NO_PAGE_LIMIT 1073741823LL

enum writer_stmt {
	ST_STR_GET,
	ST_STR_ADD,
	ST_FRAME_GET,
	ST_FRAME_ADD,
	ST_STACK_GET,
	ST_STACK_ADD,
	ST_TARGET_UPSERT,
	ST_LABELS_DEL,
	ST_LABEL_ADD,
	ST_SESSION_UPSERT,
	ST_SAMPLE_ADD,
	ST_COUNT
};

static const char *const writer_sql[ST_COUNT] = {
	[ST_STR_GET] = "SELECT id FROM strings WHERE s = ?1",
	[ST_STR_ADD] = "INSERT INTO strings(s) VALUES (?1)",
	[ST_FRAME_GET] = "SELECT id FROM frames WHERE function = ?1 AND file = ?2 AND line = ?3 "
	                 "AND kind = ?4",
	[ST_FRAME_ADD] = "INSERT INTO frames(function, file, line, kind) VALUES (?1, ?2, ?3, ?4)",
	[ST_STACK_GET] = "SELECT id FROM stacks WHERE parent = ?1 AND frame = ?2",
	[ST_STACK_ADD] = "INSERT INTO stacks(parent, frame) VALUES (?1, ?2)",
	/* What a later declaration does not say (NULL) is kept; seen times widen. */
	[ST_TARGET_UPSERT] =
		"INSERT INTO targets(pid, start_time, uid, executable, command_line, python_version, "
		"first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) "
		"ON CONFLICT(pid, start_time) DO UPDATE SET uid = excluded.uid, "
		"executable = coalesce(excluded.executable, executable), "
		"command_line = coalesce(excluded.command_line, command_line), "
		"python_version = coalesce(excluded.python_version, python_version), "
		"first_seen = min(first_seen, excluded.first_seen), "
		"last_seen = max(last_seen, excluded.last_seen) RETURNING id",
	[ST_LABELS_DEL] = "DELETE FROM target_labels WHERE target = ?1",
	[ST_LABEL_ADD] = "INSERT OR REPLACE INTO target_labels(target, key, value) VALUES (?1, ?2, ?3)",
	[ST_SESSION_UPSERT] =
		"INSERT INTO sessions(target, attached_at, detached_at, rate_hz, mode) "
		"VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(target, attached_at) DO UPDATE SET "
		"detached_at = coalesce(excluded.detached_at, detached_at), "
		"rate_hz = excluded.rate_hz, mode = coalesce(excluded.mode, mode)",
	[ST_SAMPLE_ADD] =
		"INSERT INTO samples(target, bucket_start, bucket_seconds, thread_id, stack, count) "
		"VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
		"ON CONFLICT(target, bucket_start, bucket_seconds, thread_id, stack) "
		"DO UPDATE SET count = count + excluded.count",
};

struct store_writer {
	/*
	 * Held from a batch's COMMIT until it is no longer inflight, and by
	 * writer_pin: a query's snapshot and the batches it pins never overlap.
	 * Taken before lock, never on the submitting side.
	 */
	pthread_mutex_t commit_lock;
	/* Shared with the submitting threads, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t wake; /* to the writer: work, limits, stop */
	pthread_cond_t done; /* to sync: progress */
	struct store_batch *head, *tail; /* oldest first, not counting inflight */
	struct store_batch *inflight;    /* taken by the writer, being written */
	bool inflight_doomed;            /* past the bound: dropped unless this write succeeds */
	uint64_t max_pending_rows, max_db_bytes, max_file_bytes;
	bool limits_changed;
	struct store_retention_step *steps; /* a retention request, copied */
	size_t nsteps;
	bool retention_pending, retention_running;
	bool retention_yielded; /* stopped between slices for batches: write them first */
	bool retry_now;    /* sync asked for an attempt now, not at retry_at */
	double retry_at;   /* monotonic time of the next attempt while failing */
	uint64_t attempts_failed; /* writes and opens: sync waits for one */
	bool stop;
	struct store_writer_status st;

	/* The writer thread's own. */
	pthread_t thread;
	char *path;
	sqlite3 *db; /* NULL until opened, and after an error that a new open may cure */
	sqlite3_stmt *stmt[ST_COUNT];
	struct hash_map strings, frames, stacks;
	int64_t *frame_ids, *stack_ids, *target_ids; /* batch-local index -> database id */
	size_t frame_cap, stack_cap, target_cap;
};

static double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- one batch, one transaction (writer thread) ---- */

/* Steps a statement to its end (or its one row into *id), then resets it.  An SQLite code. */
static int stmt_run(sqlite3_stmt *s, int64_t *id)
{
	int rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		if (id)
			*id = sqlite3_column_int64(s, 0);
		rc = SQLITE_DONE;
	}
	int rc2 = sqlite3_reset(s);
	return rc == SQLITE_DONE ? rc2 : rc;
}

/* The id of a row by its content: cache, then SELECT, then INSERT.  An SQLite code. */
static int intern(struct store_writer *w, struct hash_map *cache, const void *key, size_t klen,
                  sqlite3_stmt *get, sqlite3_stmt *add, int64_t *id)
{
	if (hash_map_get(cache, key, klen, id))
		return SQLITE_OK;
	*id = 0;
	int rc = stmt_run(get, id);
	if (rc != SQLITE_OK)
		return rc;
	if (*id == 0) {
		rc = stmt_run(add, NULL);
		if (rc != SQLITE_OK)
			return rc;
		*id = sqlite3_last_insert_rowid(w->db);
	}
	if (cache->len >= STORE_CACHE_MAX)
		hash_map_clear(cache);
	return hash_map_put(cache, key, klen, *id) < 0 ? SQLITE_NOMEM : SQLITE_OK;
}

/* A string's id, 0 for NULL.  An SQLite code. */
static int intern_string(struct store_writer *w, const char *s, int64_t *id)
{
	*id = 0;
	if (!s)
		return SQLITE_OK;
	size_t n = strlen(s);
	if (n > INT32_MAX)
		return SQLITE_TOOBIG;
	if (sqlite3_bind_text(w->stmt[ST_STR_GET], 1, s, (int)n, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(w->stmt[ST_STR_ADD], 1, s, (int)n, SQLITE_STATIC) != SQLITE_OK)
		return sqlite3_errcode(w->db);
	return intern(w, &w->strings, s, n, w->stmt[ST_STR_GET], w->stmt[ST_STR_ADD], id);
}

static int intern_frame(struct store_writer *w, const struct batch_frame *f, int64_t *id)
{
	struct {
		int64_t function, file;
		int32_t line, kind;
	} key;
	memset(&key, 0, sizeof key);
	int rc = intern_string(w, f->function, &key.function);
	if (rc == SQLITE_OK)
		rc = intern_string(w, f->file, &key.file);
	if (rc != SQLITE_OK)
		return rc;
	key.line = f->line;
	key.kind = f->kind;
	for (int i = ST_FRAME_GET; i <= ST_FRAME_ADD; i++) {
		sqlite3_stmt *s = w->stmt[i];
		if (sqlite3_bind_int64(s, 1, key.function) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 2, key.file) != SQLITE_OK ||
		    sqlite3_bind_int(s, 3, key.line) != SQLITE_OK ||
		    sqlite3_bind_int(s, 4, key.kind) != SQLITE_OK)
			return sqlite3_errcode(w->db);
	}
	return intern(w, &w->frames, &key, sizeof key, w->stmt[ST_FRAME_GET], w->stmt[ST_FRAME_ADD],
	              id);
}

static int intern_stack(struct store_writer *w, int64_t parent, int64_t frame, int64_t *id)
{
	int64_t key[2] = {parent, frame};
	for (int i = ST_STACK_GET; i <= ST_STACK_ADD; i++) {
		if (sqlite3_bind_int64(w->stmt[i], 1, parent) != SQLITE_OK ||
		    sqlite3_bind_int64(w->stmt[i], 2, frame) != SQLITE_OK)
			return sqlite3_errcode(w->db);
	}
	return intern(w, &w->stacks, key, sizeof key, w->stmt[ST_STACK_GET], w->stmt[ST_STACK_ADD], id);
}

/* Binds text or NULL. */
static int bind_text_or_null(sqlite3_stmt *s, int i, const char *v)
{
	return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i);
}

/* Room for n batch-local ids in *ids; 0 or -1. */
static int ids_reserve(int64_t **ids, size_t *cap, size_t n)
{
	return n ? array_reserve((void **)ids, cap, n - 1, sizeof **ids, NULL) : 0;
}

static int write_targets(struct store_writer *w, const struct store_batch *b)
{
	sqlite3_stmt *up = w->stmt[ST_TARGET_UPSERT], *del = w->stmt[ST_LABELS_DEL],
		     *add = w->stmt[ST_LABEL_ADD];
	for (size_t i = 0; i < b->ntargets; i++) {
		const struct batch_target *t = &b->targets[i];
		int rc;
		if (sqlite3_bind_int64(up, 1, t->pid) != SQLITE_OK ||
		    sqlite3_bind_int64(up, 2, (int64_t)t->start_time) != SQLITE_OK ||
		    sqlite3_bind_int64(up, 3, t->uid) != SQLITE_OK ||
		    bind_text_or_null(up, 4, t->executable) != SQLITE_OK ||
		    bind_text_or_null(up, 5, t->command_line) != SQLITE_OK ||
		    bind_text_or_null(up, 6, t->python_version) != SQLITE_OK ||
		    sqlite3_bind_double(up, 7, t->seen) != SQLITE_OK)
			return sqlite3_errcode(w->db);
		int64_t id = 0;
		if ((rc = stmt_run(up, &id)) != SQLITE_OK)
			return rc;
		w->target_ids[i] = id;
		/* Declared without labels (attached again without them): it keeps the ones it has. */
		if (!t->nlabels)
			continue;
		if (sqlite3_bind_int64(del, 1, id) != SQLITE_OK)
			return sqlite3_errcode(w->db);
		if ((rc = stmt_run(del, NULL)) != SQLITE_OK)
			return rc;
		for (size_t k = 0; k < t->nlabels; k++) {
			if (sqlite3_bind_int64(add, 1, id) != SQLITE_OK ||
			    sqlite3_bind_text(add, 2, t->label_keys[k], -1, SQLITE_STATIC) != SQLITE_OK ||
			    sqlite3_bind_text(add, 3, t->label_values[k], -1, SQLITE_STATIC) != SQLITE_OK)
				return sqlite3_errcode(w->db);
			if ((rc = stmt_run(add, NULL)) != SQLITE_OK)
				return rc;
		}
	}
	return SQLITE_OK;
}

static int write_sessions(struct store_writer *w, const struct store_batch *b)
{
	sqlite3_stmt *s = w->stmt[ST_SESSION_UPSERT];
	for (size_t i = 0; i < b->nsessions; i++) {
		const struct batch_session *ss = &b->sessions[i];
		if (sqlite3_bind_int64(s, 1, w->target_ids[ss->target]) != SQLITE_OK ||
		    sqlite3_bind_double(s, 2, ss->attached_at) != SQLITE_OK ||
		    (ss->detached_at > 0 ? sqlite3_bind_double(s, 3, ss->detached_at)
		                         : sqlite3_bind_null(s, 3)) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 4, ss->rate_hz) != SQLITE_OK ||
		    bind_text_or_null(s, 5, ss->mode) != SQLITE_OK)
			return sqlite3_errcode(w->db);
		int rc = stmt_run(s, NULL);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

static int write_samples(struct store_writer *w, const struct store_batch *b)
{
	sqlite3_stmt *s = w->stmt[ST_SAMPLE_ADD];
	for (size_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *x = &b->samples[i];
		/* Thread ids keep their 64 bits as SQLite's signed integer; the reader casts back. */
		if (sqlite3_bind_int64(s, 1, w->target_ids[x->target]) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 2, x->bucket_start) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 3, x->bucket_seconds) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 4, (int64_t)x->thread_id) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 5, w->stack_ids[x->stack]) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 6, (int64_t)x->count) != SQLITE_OK)
			return sqlite3_errcode(w->db);
		int rc = stmt_run(s, NULL);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

/* The body of the transaction; an SQLite code. */
static int write_contents(struct store_writer *w, const struct store_batch *b)
{
	if (ids_reserve(&w->target_ids, &w->target_cap, b->ntargets) < 0 ||
	    ids_reserve(&w->frame_ids, &w->frame_cap, b->nframes) < 0 ||
	    ids_reserve(&w->stack_ids, &w->stack_cap, b->nstacks) < 0)
		return SQLITE_NOMEM;
	int rc = write_targets(w, b);
	if (rc == SQLITE_OK)
		rc = write_sessions(w, b);
	for (size_t i = 0; rc == SQLITE_OK && i < b->nframes; i++)
		rc = intern_frame(w, &b->frames[i], &w->frame_ids[i]);
	/* A parent always comes earlier in the batch (store_batch_stack checks), so one pass maps all. */
	for (size_t i = 0; rc == SQLITE_OK && i < b->nstacks; i++) {
		const struct batch_stack *s = &b->stacks[i];
		rc = intern_stack(w, s->parent < 0 ? 0 : w->stack_ids[s->parent], w->frame_ids[s->frame],
		                  &w->stack_ids[i]);
	}
	if (rc == SQLITE_OK)
		rc = write_samples(w, b);
	return rc;
}

/* Ids that may no longer exist (a rollback, retention, another connection): forget them all. */
static void writer_forget_ids(struct store_writer *w)
{
	hash_map_clear(&w->strings);
	hash_map_clear(&w->frames);
	hash_map_clear(&w->stacks);
}

/* Applies a changed hard limit on the file (PRAGMA max_page_count, per connection). */
static int writer_apply_file_limit(struct store_writer *w, uint64_t max_file_bytes,
                                   struct store_error *err)
{
	int64_t page_size;
	if (store_query_int(w->db, "PRAGMA page_size", &page_size, err) < 0 || page_size <= 0)
		return -1;
	long long pages = STORE_NO_PAGE_LIMIT;
	if (max_file_bytes && max_file_bytes / (uint64_t)page_size < (uint64_t)STORE_NO_PAGE_LIMIT)
		pages = (long long)(max_file_bytes / (uint64_t)page_size);
	if (pages < 1)
		pages = 1;
	char sql[64];
	snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", pages);
	int64_t got;
	return store_query_int(w->db, sql, &got, err);
}

/*
 * One batch in one transaction.  An SQLite code; the message in *err.  On
 * SQLITE_OK, commit_lock is held.
 */
static int writer_write(struct store_writer *w, const struct store_batch *b, struct store_error *err)
{
	int rc = sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		store_error_set(err, w->db, "begin");
		return rc;
	}
	rc = write_contents(w, b);
	if (rc == SQLITE_OK) {
		/* Held on return: the caller books the batch written before a query may pin. */
		pthread_mutex_lock(&w->commit_lock);
		rc = sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL);
		if (rc == SQLITE_OK)
			return SQLITE_OK;
		pthread_mutex_unlock(&w->commit_lock);
		store_error_set(err, w->db, "commit");
	} else if (rc == SQLITE_NOMEM) {
		store_error_text(err, "write batch: out of memory");
	} else {
		store_error_set(err, w->db, "write batch");
	}
	/* A failed COMMIT may leave the transaction open; ROLLBACK ends it either way. */
	if (!sqlite3_get_autocommit(w->db))
		sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
	writer_forget_ids(w);
	return rc;
}

/* Failures that may pass by themselves: the batch is kept and retried. */
static bool transient(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_FULL:
	case SQLITE_READONLY:
	case SQLITE_IOERR:
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
	case SQLITE_CANTOPEN:
	case SQLITE_NOMEM:
	case SQLITE_PROTOCOL:
	case SQLITE_INTERRUPT:
		return true;
	default:
		return false;
	}
}

/*
 * Failures that the connection itself may keep: a read-only connection
 * stays read-only after the file becomes writable, and after an I/O error
 * the file system may have been remounted.  The connection is closed and
 * the next retry opens the file again.
 */
static bool needs_reopen(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_READONLY:
	case SQLITE_IOERR:
	case SQLITE_CANTOPEN:
		return true;
	default:
		return false;
	}
}

/* Closes the connection (writer thread). */
static void writer_disconnect(struct store_writer *w)
{
	for (int i = 0; i < ST_COUNT; i++) {
		sqlite3_finalize(w->stmt[i]);
		w->stmt[i] = NULL;
	}
	if (w->db && sqlite3_close(w->db) != SQLITE_OK)
		sqlite3_close_v2(w->db);
	w->db = NULL;
	writer_forget_ids(w);
}

/* ---- the queue ---- */

/* The writer is done with a batch: freed, unless a query still has it pinned.  Under lock. */
static void batch_release(struct store_batch *b)
{
	if (b->pins) {
		b->released = true;
		return;
	}
	store_batch_free(b);
}

/* Drops the oldest waiting batch (never the one being written).  Under lock. */
static void queue_drop_oldest(struct store_writer *w)
{
	struct store_batch *b = w->head;
	w->head = b->next;
	if (!w->head)
		w->tail = NULL;
	uint64_t rows = b->nsamples;
	w->st.pending_batches--;
	w->st.pending_rows -= rows;
	w->st.dropped_rows += rows;
	batch_release(b);
}

/*
 * Drops oldest batches while the memory bounds are passed.  The batch being
 * written is the oldest: it goes first, but only once its write is over (it
 * is then freed if the write failed, kept as written if it succeeded).
 * Under lock.
 */
static void queue_enforce_bounds(struct store_writer *w)
{
	while (w->st.pending_rows > w->max_pending_rows ||
	       w->st.pending_batches > STORE_MAX_PENDING_BATCHES) {
		if (w->inflight && !w->inflight_doomed) {
			w->inflight_doomed = true;
			w->st.pending_batches--;
			w->st.pending_rows -= w->inflight->nsamples;
		} else if (w->head) {
			queue_drop_oldest(w);
		} else {
			break;
		}
	}
}

void store_writer_submit(struct store_writer *w, struct store_batch *b)
{
	if (!b)
		return;
	b->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (w->tail)
		w->tail->next = b;
	else
		w->head = b;
	w->tail = b;
	w->st.pending_batches++;
	w->st.pending_rows += b->nsamples;
	queue_enforce_bounds(w);
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

/* Writes the batch taken from the queue's head and books the outcome.  Called and returns under lock. */
static void writer_take_and_write(struct store_writer *w)
{
	struct store_batch *b = w->head;
	w->head = b->next;
	if (!w->head)
		w->tail = NULL;
	w->inflight = b;
	bool file_limit = w->limits_changed;
	uint64_t max_file = w->max_file_bytes;
	w->limits_changed = false;
	w->retry_now = false;
	pthread_mutex_unlock(&w->lock);

	struct store_error err = {{0}};
	int rc = SQLITE_OK;
	if (file_limit && writer_apply_file_limit(w, max_file, &err) < 0)
		rc = SQLITE_ERROR;
	if (rc == SQLITE_OK)
		rc = writer_write(w, b, &err);
	uint64_t bytes = store_db_bytes(w->db);
	bool reopen = rc != SQLITE_OK && needs_reopen(rc);
	if (reopen)
		writer_disconnect(w);

	pthread_mutex_lock(&w->lock);
	if (reopen)
		w->st.open = false;
	bool doomed = w->inflight_doomed;
	w->inflight = NULL;
	if (rc == SQLITE_OK)
		pthread_mutex_unlock(&w->commit_lock);
	w->inflight_doomed = false;
	if (bytes)
		w->st.db_bytes = bytes;
	if (rc == SQLITE_OK) {
		w->st.batches_written++;
		w->st.rows_written += b->nsamples;
		if (!doomed) {
			w->st.pending_batches--;
			w->st.pending_rows -= b->nsamples;
		}
		w->st.failing = false;
		batch_release(b);
	} else {
		w->st.failing = true;
		snprintf(w->st.last_error, sizeof w->st.last_error, "%s", err.msg);
		w->attempts_failed++;
		if (file_limit && rc == SQLITE_ERROR)
			w->limits_changed = true;
		if (doomed) {
			w->st.dropped_rows += b->nsamples;
			batch_release(b);
		} else if (transient(rc)) {
			/* Back at the head: order is kept, and it is the oldest if the bound bites. */
			b->next = w->head;
			w->head = b;
			if (!w->tail)
				w->tail = b;
			queue_enforce_bounds(w);
			w->retry_at = mono_now() + STORE_RETRY_S;
		} else {
			w->st.pending_batches--;
			w->st.pending_rows -= b->nsamples;
			w->st.dropped_rows += b->nsamples;
			batch_release(b);
		}
	}
	pthread_cond_broadcast(&w->done);
}

/* Between two merge slices: batches wait (they are what queries wait for). */
static bool retention_should_yield(void *ctx)
{
	struct store_writer *w = ctx;
	pthread_mutex_lock(&w->lock);
	bool waiting = w->head != NULL && !w->st.failing;
	pthread_mutex_unlock(&w->lock);
	return waiting;
}

/* Runs a retention request.  Called and returns under lock. */
static void writer_run_retention(struct store_writer *w)
{
	struct store_retention_step *steps = w->steps;
	size_t nsteps = w->nsteps;
	uint64_t max_db_bytes = w->max_db_bytes;
	w->steps = NULL;
	w->nsteps = 0;
	w->retention_pending = false;
	w->retention_yielded = false;
	w->retention_running = true;
	pthread_mutex_unlock(&w->lock);

	struct store_error err = {{0}};
	int rc = store_retention_run(w->db, steps, nsteps, wall_now(), max_db_bytes,
	                             retention_should_yield, w, &err);
	/* The cap deletes strings, frames and stacks no sample uses: a cached id may name a gone row. */
	writer_forget_ids(w);
	uint64_t bytes = store_db_bytes(w->db);

	pthread_mutex_lock(&w->lock);
	w->retention_running = false;
	if (rc == 1 && !w->retention_pending) {
		/* Stopped for batches: the same request goes on after them, unless a newer one came. */
		w->steps = steps;
		w->nsteps = nsteps;
		w->retention_pending = true;
		w->retention_yielded = true;
		steps = NULL;
	}
	free(steps);
	if (bytes)
		w->st.db_bytes = bytes;
	if (rc < 0)
		snprintf(w->st.last_error, sizeof w->st.last_error, "retention: %.240s", err.msg);
	else if (w->st.failing)
		w->retry_now = true; /* space was freed: a waiting batch may fit now */
	pthread_cond_broadcast(&w->done);
}

/*
 * Opens the database and prepares the statements, and books the outcome.
 * Called and returns under lock.
 */
static void writer_connect(struct store_writer *w)
{
	uint64_t max_file = w->max_file_bytes;
	/* max_page_count belongs to the connection: a new one gets the limit here. */
	w->limits_changed = false;
	w->retry_now = false;
	pthread_mutex_unlock(&w->lock);

	struct store_error err = {{0}};
	uint64_t bytes = 0;
	w->db = store_db_open_rw(w->path, &err);
	for (int i = 0; w->db && i < ST_COUNT; i++) {
		if (sqlite3_prepare_v3(w->db, writer_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &w->stmt[i],
		                       NULL) != SQLITE_OK) {
			store_error_set(&err, w->db, "cannot prepare on %.120s: %.40s", w->path, writer_sql[i]);
			writer_disconnect(w);
		}
	}
	if (w->db && max_file && writer_apply_file_limit(w, max_file, &err) < 0)
		writer_disconnect(w);
	if (w->db)
		bytes = store_db_bytes(w->db);

	pthread_mutex_lock(&w->lock);
	if (w->db) {
		w->st.open = true;
		if (bytes)
			w->st.db_bytes = bytes;
		/* Waiting batches go now; the writer is failing until they are written. */
		if (w->head)
			w->retry_now = true;
		else
			w->st.failing = false;
	} else {
		w->st.open = false;
		w->st.failing = true;
		snprintf(w->st.last_error, sizeof w->st.last_error, "%s", err.msg);
		w->attempts_failed++;
		w->retry_at = mono_now() + STORE_RETRY_S;
	}
	pthread_cond_broadcast(&w->done);
}

/* Sleeps until the next retry (at most STORE_RETRY_S) or a wake-up.  Under lock. */
static void writer_wait_retry(struct store_writer *w, double now)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	double wait = w->retry_at - now;
	if (wait > STORE_RETRY_S)
		wait = STORE_RETRY_S;
	if (wait < 0)
		wait = 0;
	ts.tv_sec += (time_t)wait;
	ts.tv_nsec += (long)((wait - floor(wait)) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&w->wake, &w->lock, &ts);
}

static void *writer_main(void *arg)
{
	struct store_writer *w = arg;
	pthread_mutex_lock(&w->lock);
	for (;;) {
		double now = mono_now();
		bool due = !w->st.failing || w->retry_now || w->stop || now >= w->retry_at;
		if (!w->db) {
			/* Closing with nothing to write: no reason to touch the file. */
			if (w->stop && !w->head)
				break;
			/*
			 * Opened at once, then on the retry schedule even with nothing
			 * to write, so the status tells the truth before the first batch.
			 */
			if (due) {
				writer_connect(w);
				/* Closing: that was the last attempt; what waits is given up and counted. */
				if (!w->db && w->stop) {
					while (w->head)
						queue_drop_oldest(w);
				}
			} else {
				writer_wait_retry(w, now);
			}
			continue;
		}
		/*
		 * Retention first: while the disk is full, dropping old buckets is
		 * what lets the waiting batches in.
		 */
		if (w->retention_pending && !(w->retention_yielded && w->head && due)) {
			writer_run_retention(w);
			continue;
		}
		if (w->head && due) {
			bool stopping = w->stop;
			writer_take_and_write(w);
			/* Closing: one last attempt each; what still fails is given up and counted. */
			if (stopping && w->st.failing) {
				while (w->head)
					queue_drop_oldest(w);
			}
			continue;
		}
		if (w->stop && !w->head)
			break;
		if (w->head)
			writer_wait_retry(w, now);
		else
			pthread_cond_wait(&w->wake, &w->lock);
	}
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* ---- lifecycle ---- */

static void writer_free(struct store_writer *w)
{
	writer_disconnect(w);
	while (w->head) {
		struct store_batch *b = w->head;
		w->head = b->next;
		store_batch_free(b);
	}
	free(w->steps);
	free(w->frame_ids);
	free(w->stack_ids);
	free(w->target_ids);
	free(w->path);
	pthread_cond_destroy(&w->done);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->commit_lock);
	free(w);
}

struct store_writer *store_writer_open(const char *path, struct store_error *err)
{
	struct store_writer *w = calloc(1, sizeof *w);
	if (!w) {
		store_error_text(err, "store_writer_open: out of memory");
		return NULL;
	}
	w->max_pending_rows = STORE_DEFAULT_MAX_PENDING_ROWS;
	pthread_mutex_init(&w->commit_lock, NULL);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	pthread_cond_init(&w->done, NULL);
	w->path = strdup(path);
	if (!w->path) {
		store_error_text(err, "store_writer_open: out of memory");
		goto fail;
	}
	/* The thread opens the file: whatever it finds there is told by store_writer_status. */
	int e = pthread_create(&w->thread, NULL, writer_main, w);
	if (e) {
		store_error_text(err, "store_writer_open: thread: %s", strerror(e));
		goto fail;
	}
	return w;
fail:
	writer_free(w);
	return NULL;
}

void store_writer_status(struct store_writer *w, struct store_writer_status *out)
{
	pthread_mutex_lock(&w->lock);
	*out = w->st;
	pthread_mutex_unlock(&w->lock);
}

void store_writer_set_limits(struct store_writer *w, uint64_t max_pending_rows,
                             uint64_t max_db_bytes)
{
	pthread_mutex_lock(&w->lock);
	w->max_pending_rows = max_pending_rows;
	w->max_db_bytes = max_db_bytes;
	queue_enforce_bounds(w);
	pthread_mutex_unlock(&w->lock);
}

void store_writer_set_file_limit(struct store_writer *w, uint64_t max_file_bytes)
{
	pthread_mutex_lock(&w->lock);
	w->max_file_bytes = max_file_bytes;
	w->limits_changed = true;
	w->retry_now = true; /* a raised limit may let the waiting batches in */
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void store_writer_sync(struct store_writer *w)
{
	pthread_mutex_lock(&w->lock);
	uint64_t failed = w->attempts_failed;
	/* Try now rather than at the next retry: the caller wants an answer. */
	w->retry_now = true;
	pthread_cond_signal(&w->wake);
	/* Not open counts as work: right after store_writer_open, the status then tells the truth. */
	while ((w->head || w->inflight || w->retention_pending || w->retention_running ||
	        !w->st.open) &&
	       w->attempts_failed == failed)
		pthread_cond_wait(&w->done, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

void store_writer_flush(struct store_writer *w)
{
	pthread_mutex_lock(&w->lock);
	uint64_t failed = w->attempts_failed;
	w->retry_now = true;
	pthread_cond_signal(&w->wake);
	while ((w->head || w->inflight || !w->st.open) && w->attempts_failed == failed)
		pthread_cond_wait(&w->done, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

void store_writer_retention(struct store_writer *w, const struct store_retention_step *steps,
                            size_t nsteps)
{
	struct store_retention_step *copy = NULL;
	if (nsteps) {
		copy = calloc(nsteps, sizeof *copy);
		if (!copy) {
			pthread_mutex_lock(&w->lock);
			snprintf(w->st.last_error, sizeof w->st.last_error, "retention: out of memory");
			pthread_mutex_unlock(&w->lock);
			return;
		}
		memcpy(copy, steps, nsteps * sizeof *copy);
	}
	pthread_mutex_lock(&w->lock);
	/* A request not yet started is replaced: the newest steps are what the operator wants. */
	free(w->steps);
	w->steps = copy;
	w->nsteps = nsteps;
	w->retention_pending = true;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void store_writer_close(struct store_writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	/* A clean close leaves no WAL behind; failure here only means a larger -wal file. */
	if (w->db)
		sqlite3_wal_checkpoint_v2(w->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
	writer_free(w);
}

int writer_pin(struct store_writer *w, int (*begin)(void *ctx), void *ctx,
               struct store_batch ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&w->commit_lock);
	int rc = begin(ctx);
	pthread_mutex_lock(&w->lock);
	size_t count = (w->inflight && !w->inflight_doomed) + (size_t)w->st.pending_batches;
	struct store_batch **v = rc == 0 && count ? calloc(count, sizeof *v) : NULL;
	if (rc == 0 && count && !v)
		rc = -1;
	/* The queue holds at most STORE_MAX_PENDING_BATCHES, which bounds this walk. */
	if (rc == 0 && w->inflight && !w->inflight_doomed && *n < count)
		v[(*n)++] = w->inflight;
	for (struct store_batch *b = w->head; rc == 0 && b && *n < count; b = b->next)
		v[(*n)++] = b;
	for (size_t i = 0; i < *n; i++)
		v[i]->pins++;
	pthread_mutex_unlock(&w->lock);
	pthread_mutex_unlock(&w->commit_lock);
	*out = v;
	return rc;
}

void writer_unpin(struct store_writer *w, struct store_batch **batches, size_t n)
{
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < n; i++)
		if (--batches[i]->pins == 0 && batches[i]->released)
			store_batch_free(batches[i]);
	pthread_mutex_unlock(&w->lock);
	free(batches);
}
