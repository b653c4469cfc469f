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
 * The file can be deleted or replaced at its name under the connection,
 * which would then go on committing into a file no one reads again (and
 * that a restart loses).  So the writer compares the file, its -wal and its
 * -shm with their names (place.c) before each piece of work, at least every
 * STORE_CHECK_S when idle, and after each commit before it counts the batch
 * written.  When they differ it lets go of the connection (without deleting
 * anything at the names: they may be someone else's now), removes its own
 * -wal and -shm if the database is gone from under them, and opens again at
 * once: a new database where none is, the file found there if it is a
 * pyprofd history, and none if it is not (then batches wait, within their
 * bound, as behind any file that cannot be opened).  The batch whose commit
 * went to the old file waits again at the head of the queue, so the file at
 * the name gets everything committed after it was put there.
 *
 * Interning goes through caches of content -> database id (strings, frames,
 * stacks).  A rolled-back transaction takes its new ids with it, and so
 * does retention (it deletes what no sample uses), so every cache is
 * cleared on rollback, after retention and with the connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "storage.h"

/* Seconds between retries of a failing write or open. */
#define STORE_RETRY_S 1.0
/* Seconds at most between two comparisons of the open file with its name. */
#define STORE_CHECK_S 1.0
/* Defaults until store_writer_set_limits: about 64 MiB of sample rows waiting. */
#define STORE_DEFAULT_MAX_PENDING_ROWS (1u << 20)
/* Batches without rows count too: at most this many wait. */
#define STORE_MAX_PENDING_BATCHES 65536

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
	size_t cache_budget; /* of the inserter's caches, handed to it with each batch */
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

	/* Set at open, then read only. */
	char *path; /* for messages; and the way to the file when no directory was given */
	char *name; /* the file's name in its directory */
	int dirfd;  /* the directory given to store_writer_open_at (a duplicate), else -1 */

	/* The writer thread's own. */
	pthread_t thread;
	struct inserter ins;       /* its connection: NULL until opened */
	struct store_place place;  /* dirfd: the given one, or opened with each connection (-1 between) */
	struct store_ids ids;      /* what the connection opened */
};

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
	uint64_t rows = store_batch_sample_rows(b);
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
			w->st.pending_rows -= store_batch_sample_rows(w->inflight);
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
	w->st.pending_rows += store_batch_sample_rows(b);
	queue_enforce_bounds(w);
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

/* Closes the connection, and the directory opened with it.  Writer thread, either lock or none. */
static void writer_disconnect(struct store_writer *w)
{
	insert_close(&w->ins);
	if (w->dirfd < 0 && w->place.dirfd >= 0) {
		close(w->place.dirfd);
		w->place.dirfd = -1;
	}
}

/*
 * The file, its -wal or its -shm is no longer the connection's: closes it
 * without a word to the names.  If the database itself is still there,
 * what the -wal holds is checkpointed into it first; if it is gone, its
 * -wal and -shm are removed when still at their names, or SQLite would
 * take them for those of the next file there.  They are compared while the
 * connection still holds them open, so their inode numbers cannot have
 * gone to new files meanwhile.
 */
static void writer_let_go(struct store_writer *w)
{
	bool unmoved = place_db_unmoved(&w->place, &w->ids);
	if (unmoved)
		sqlite3_wal_checkpoint_v2(w->ins.db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	else
		place_remove_leftovers(&w->place, &w->ids);
	/* SQLite deletes the -wal and -shm by name at close: they may be another database's now. */
	int persist = 1;
	sqlite3_file_control(w->ins.db, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
	writer_disconnect(w);
}

/* Books a file found changed under the connection, which is closed: opened again at once.  Under lock. */
static void writer_book_change(struct store_writer *w, const char *why)
{
	w->st.open = false;
	w->st.failing = true;
	w->st.file_changes++;
	snprintf(w->st.file_change, sizeof w->st.file_change, "%s", why);
	snprintf(w->st.last_error, sizeof w->st.last_error, "%s", why);
	w->retry_now = true;
	pthread_cond_broadcast(&w->done);
}

/*
 * Compares the file with its name, and lets go of it if it changed.
 * Called and returns under lock; true if the connection was closed.
 */
static bool writer_check_file(struct store_writer *w)
{
	pthread_mutex_unlock(&w->lock);
	char why[256];
	bool moved = place_check(&w->place, &w->ids, why, sizeof why) == 1;
	if (moved)
		writer_let_go(w);
	pthread_mutex_lock(&w->lock);
	if (moved)
		writer_book_change(w, why);
	return moved;
}

/* What SQLite's page cache of the writer's connection holds at most (PRAGMA cache_size). */
static size_t writer_page_cache_bound(void)
{
	return (size_t)atoi(STORE_WRITER_CACHE_KIB) << 10;
}

/* What the writer's caches hold (its ids by content and SQLite's pages), for the status.  Under lock. */
static void writer_book_caches(struct store_writer *w)
{
	int used = 0, highest = 0; /* bytes */
	if (w->ins.db)
		sqlite3_db_status(w->ins.db, SQLITE_DBSTATUS_CACHE_USED, &used, &highest, 0);
	w->st.cache_bytes = insert_cache_bytes(&w->ins);
	w->st.cache_budget_bytes = w->cache_budget ? w->cache_budget : STORE_CACHE_BUDGET_DEFAULT;
	w->st.page_cache_bytes = (uint64_t)(used > 0 ? used : 0);
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
	w->ins.cache_budget = w->cache_budget;
	pthread_mutex_unlock(&w->lock);

	struct store_error err = {{0}};
	int rc = SQLITE_OK;
	if (file_limit && insert_file_limit(&w->ins, max_file, &err) < 0)
		rc = SQLITE_ERROR;
	if (rc == SQLITE_OK)
		rc = insert_batch(&w->ins, b, &err);
	/*
	 * Committed and booked written under commit_lock: a query pins either
	 * the batch or a snapshot that holds it, never both, never neither.
	 */
	pthread_mutex_lock(&w->commit_lock);
	if (rc == SQLITE_OK)
		rc = insert_commit(&w->ins, &err);
	uint64_t bytes = store_db_bytes(w->ins.db);
	/* A commit counts once the file it went to is known to be still at the name. */
	char why[256];
	bool moved = rc == SQLITE_OK && place_check(&w->place, &w->ids, why, sizeof why) == 1;
	bool reopen = rc != SQLITE_OK && needs_reopen(rc);
	if (moved)
		writer_let_go(w);
	else if (reopen)
		writer_disconnect(w);

	pthread_mutex_lock(&w->lock);
	if (reopen)
		w->st.open = false;
	if (moved)
		writer_book_change(w, why);
	bool doomed = w->inflight_doomed;
	w->inflight = NULL;
	pthread_mutex_unlock(&w->commit_lock);
	w->inflight_doomed = false;
	if (bytes && !moved)
		w->st.db_bytes = bytes;
	if (moved) {
		/* Written to a file that is gone: it waits again, first, for the file at the name. */
		if (doomed) {
			w->st.dropped_rows += store_batch_sample_rows(b);
			batch_release(b);
		} else {
			b->next = w->head;
			w->head = b;
			if (!w->tail)
				w->tail = b;
			queue_enforce_bounds(w);
		}
	} else if (rc == SQLITE_OK) {
		w->st.batches_written++;
		w->st.rows_written += store_batch_sample_rows(b);
		if (!doomed) {
			w->st.pending_batches--;
			w->st.pending_rows -= store_batch_sample_rows(b);
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
			w->st.dropped_rows += store_batch_sample_rows(b);
			batch_release(b);
		} else if (transient(rc)) {
			/* Back at the head: order is kept, and it is the oldest if the bound bites. */
			b->next = w->head;
			w->head = b;
			if (!w->tail)
				w->tail = b;
			queue_enforce_bounds(w);
			w->retry_at = clock_mono_s() + STORE_RETRY_S;
		} else {
			w->st.pending_batches--;
			w->st.pending_rows -= store_batch_sample_rows(b);
			w->st.dropped_rows += store_batch_sample_rows(b);
			batch_release(b);
		}
	}
	writer_book_caches(w);
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
	int rc = store_retention_run(w->ins.db, steps, nsteps, clock_wall_s(), max_db_bytes,
	                             retention_should_yield, w, &err);
	/* The cap deletes strings, frames and stacks no sample uses: a cached id may name a gone row. */
	insert_forget_ids(&w->ins);
	uint64_t bytes = store_db_bytes(w->ins.db);

	pthread_mutex_lock(&w->lock);
	w->retention_running = false;
	writer_book_caches(w);
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
	if (w->dirfd < 0)
		w->place.dirfd = place_open_dir(w->path, &err);
	/* last: the ids of the connection before, whose -wal a database still there must keep. */
	struct store_ids last = w->ids;
	if (w->place.dirfd >= 0 && insert_open(&w->ins, &w->place, &last, &w->ids, max_file, &err) == 0)
		bytes = store_db_bytes(w->ins.db);
	else
		writer_disconnect(w);

	pthread_mutex_lock(&w->lock);
	if (w->ins.db) {
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
		w->retry_at = clock_mono_s() + STORE_RETRY_S;
	}
	pthread_cond_broadcast(&w->done);
}

/* Sleeps until the monotonic time until (at most STORE_RETRY_S from now) or a wake-up.  Under lock. */
static void writer_wait(struct store_writer *w, double now, double until)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	double wait = until - now;
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
		double now = clock_mono_s();
		bool due = !w->st.failing || w->retry_now || w->stop || now >= w->retry_at;
		if (!w->ins.db) {
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
				if (!w->ins.db && w->stop) {
					while (w->head)
						queue_drop_oldest(w);
				}
			} else {
				writer_wait(w, now, w->retry_at);
			}
			continue;
		}
		/* Before any work, and at least every STORE_CHECK_S: is the file still at its name? */
		if (writer_check_file(w))
			continue;
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
		writer_wait(w, now, w->head && w->retry_at < now + STORE_CHECK_S ? w->retry_at
		                                                                 : now + STORE_CHECK_S);
	}
	pthread_cond_broadcast(&w->done);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* ---- lifecycle ---- */

static void writer_free(struct store_writer *w)
{
	insert_free(&w->ins);
	if (w->dirfd >= 0)
		close(w->dirfd);
	else if (w->place.dirfd >= 0)
		close(w->place.dirfd);
	free(w->steps);
	free(w->path);
	free(w->name);
	while (w->head) {
		struct store_batch *b = w->head;
		w->head = b->next;
		store_batch_free(b);
	}
	pthread_cond_destroy(&w->done);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	pthread_mutex_destroy(&w->commit_lock);
	free(w);
}

/* The writer of name in dirfd (a duplicate is taken), or of path alone when dirfd is -1. */
static struct store_writer *writer_open(int dirfd, const char *name, const char *path,
                                        struct store_error *err)
{
	struct store_writer *w = calloc(1, sizeof *w);
	if (!w) {
		store_error_text(err, "store_writer_open: out of memory");
		return NULL;
	}
	w->max_pending_rows = STORE_DEFAULT_MAX_PENDING_ROWS;
	w->st.cache_budget_bytes = STORE_CACHE_BUDGET_DEFAULT;
	w->st.page_cache_budget_bytes = writer_page_cache_bound();
	w->dirfd = w->place.dirfd = -1;
	pthread_mutex_init(&w->commit_lock, NULL);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	pthread_cond_init(&w->done, NULL);
	if (!name) {
		store_error_text(err, "cannot open %s: not a file name", path);
		goto fail;
	}
	w->path = strdup(path);
	w->name = strdup(name);
	if (!w->path || !w->name) {
		store_error_text(err, "store_writer_open: out of memory");
		goto fail;
	}
	if (dirfd >= 0 && (w->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0)) < 0) {
		store_error_text(err, "store_writer_open: %s", strerror(errno));
		goto fail;
	}
	w->place = (struct store_place){w->dirfd, w->name, w->path};
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

struct store_writer *store_writer_open(const char *path, struct store_error *err)
{
	return writer_open(-1, place_base_name(path), path, err);
}

struct store_writer *store_writer_open_at(int dirfd, const char *name, const char *path,
                                          struct store_error *err)
{
	if (dirfd < 0 || strchr(name, '/')) {
		store_error_text(err, "store_writer_open_at: %s is not a name in a directory", name);
		return NULL;
	}
	return writer_open(dirfd, name, path, err);
}

bool writer_place(struct store_writer *w, struct store_place *p)
{
	*p = (struct store_place){w->dirfd, w->name, w->path};
	return w->dirfd >= 0;
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

void store_writer_set_cache_budget(struct store_writer *w, size_t bytes)
{
	pthread_mutex_lock(&w->lock);
	w->cache_budget = bytes;
	w->st.cache_budget_bytes = bytes ? bytes : STORE_CACHE_BUDGET_DEFAULT;
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

/*
 * Wakes the writer now rather than at its next retry (the caller wants an
 * answer) and waits until the queue is written, and the retention pass too
 * when with_retention, or an attempt fails.  Not open counts as work: right
 * after store_writer_open, the status then tells the truth.
 */
static void writer_wait_idle(struct store_writer *w, bool with_retention)
{
	pthread_mutex_lock(&w->lock);
	uint64_t failed = w->attempts_failed;
	w->retry_now = true;
	pthread_cond_signal(&w->wake);
	while ((w->head || w->inflight || !w->st.open ||
	        (with_retention && (w->retention_pending || w->retention_running))) &&
	       w->attempts_failed == failed)
		pthread_cond_wait(&w->done, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

void store_writer_sync(struct store_writer *w)
{
	writer_wait_idle(w, true);
}

void store_writer_flush(struct store_writer *w)
{
	writer_wait_idle(w, false);
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
	if (w->ins.db)
		sqlite3_wal_checkpoint_v2(w->ins.db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
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
