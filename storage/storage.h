/*
 * storage/'s one internal header: what its files share.  store.h is the
 * public face; only files of storage/ include this one (and sqlite3.h).
 */
#ifndef PYPROFD_STORAGE_H
#define PYPROFD_STORAGE_H

#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grow.h"
#include "hash.h"
#include "store.h"

/* The schema version this code writes; user_version past it is refused. */
#define STORE_SCHEMA_VERSION 1

/* Stacks deeper than this are corrupt (the unwinder stops at 8192 frames). */
#define STORE_MAX_DEPTH 8192

/* Labels a target or a query may carry; past this a batch or query is refused. */
#define STORE_MAX_LABELS 64

/* How long a connection waits on another's lock before SQLITE_BUSY. */
#define STORE_BUSY_TIMEOUT_MS 5000

/* ---- schema.c: connections, pragmas, migrations, errors ---- */

/* "what: sqlite's message" into err (which may be NULL). */
void store_error_set(struct store_error *err, sqlite3 *db, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Plain text into err, no SQLite message. */
void store_error_text(struct store_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Runs SQL without results; 0, or -1 and *err. */
int store_exec(sqlite3 *db, const char *sql, struct store_error *err);

/* One integer from a one-row statement (a PRAGMA); 0, or -1 and *err. */
int store_query_int(sqlite3 *db, const char *sql, int64_t *out, struct store_error *err);

/*
 * The writer's connection: created if missing, WAL, synchronous=NORMAL,
 * incremental auto-vacuum, migrated to STORE_SCHEMA_VERSION.  NULL and *err
 * ("cannot open PATH: why").  A file that is read-only, not a database, of
 * a newer schema or someone else's database (tables, no version) is refused
 * before anything is written to it.
 */
sqlite3 *store_db_open_rw(const char *path, struct store_error *err);

/* A read-only, query_only connection to an existing store.  NULL and *err. */
sqlite3 *store_db_open_ro(const char *path, struct store_error *err);

/* Bytes the database's pages hold (page_count * page_size), or 0 on error. */
uint64_t store_db_bytes(sqlite3 *db);

/* ---- batch.c: the batch's representation, read by the writer ---- */

struct batch_target {
	int64_t pid;
	uint64_t start_time;
	int64_t uid;
	char *executable, *command_line, *python_version; /* may be NULL */
	double seen;                                     /* wall clock when declared */
	size_t nlabels;
	char **label_keys, **label_values;
};

struct batch_session {
	int target;
	double attached_at, detached_at;
	uint32_t rate_hz;
	char *mode;
};

struct batch_frame {
	char *function, *file; /* may be NULL */
	int32_t line;
	int kind;
};

struct batch_stack {
	int32_t parent, frame;
};

struct batch_sample {
	int target;
	int32_t stack;
	uint32_t bucket_seconds;
	int64_t bucket_start;
	uint64_t thread_id;
	uint64_t count;
};

struct store_batch {
	struct batch_target *targets;
	size_t ntargets, targets_cap;
	struct batch_session *sessions;
	size_t nsessions, sessions_cap;
	struct batch_frame *frames;
	size_t nframes, frames_cap;
	struct batch_stack *stacks;
	size_t nstacks, stacks_cap;
	struct batch_sample *samples;
	size_t nsamples, samples_cap;
	struct store_batch *next; /* the writer's queue */
	/* Under the writer's lock: pins held by queries, and whether the writer let go of it. */
	unsigned pins;
	bool released;
};

/* ---- writer.c: what queries see of the writer's memory ---- */

/*
 * Pins the batches the writer holds (waiting or being written) at one
 * moment, and calls begin(ctx) at that moment too, with no commit between:
 * a read transaction begun there sees exactly the batches not pinned.
 * *out (malloc'd, may be NULL with *n 0) to be given back to writer_unpin.
 * 0, or -1 (begin's result, or out of memory).
 */
int writer_pin(struct store_writer *w, int (*begin)(void *ctx), void *ctx,
               struct store_batch ***out, size_t *n);
void writer_unpin(struct store_writer *w, struct store_batch **batches, size_t n);

/* ---- retention.c: runs inside the writer's thread ---- */

/*
 * Merges and size cap on the writer's connection; now is the wall clock.
 * Merges go an hour of buckets per transaction, and between two of them
 * yield (when not NULL) is asked whether others wait for the connection: if
 * so the run stops there and returns 1, and running it again goes on where
 * it stopped (what was merged is merged).  0 when done, or -1 and *err.
 */
int store_retention_run(sqlite3 *db, const struct store_retention_step *steps, size_t nsteps,
                        double now, uint64_t max_db_bytes, bool (*yield)(void *ctx),
                        void *yield_ctx, struct store_error *err);

#endif
