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
#include <sys/types.h>

#include "arena.h"
#include "array.h"
#include "hash.h"
#include "labels.h"
#include "store.h"

/* The schema version this code writes; user_version past it is refused. */
#define STORE_SCHEMA_VERSION 5

/* Stacks deeper than this are corrupt (the unwinder stops at 8192 frames). */
#define STORE_MAX_DEPTH 8192

/* How long a connection waits on another's lock before SQLITE_BUSY. */
#define STORE_BUSY_TIMEOUT_MS 5000
/* The writer connection's page cache, in KiB (a string for its PRAGMA): schema.c says why. */
#define STORE_WRITER_CACHE_KIB "512"

/* ---- error.c: the store's error messages ---- */

/* "what: sqlite's message" into err (which may be NULL). */
void store_error_set(struct store_error *err, sqlite3 *db, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Plain text into err, no SQLite message. */
void store_error_text(struct store_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ---- schema.c: connections, pragmas, migrations ---- */

/* Runs SQL without results; 0, or -1 and *err. */
int store_exec(sqlite3 *db, const char *sql, struct store_error *err);

/* One integer from a one-row statement (a PRAGMA); 0, or -1 and *err. */
int store_query_int(sqlite3 *db, const char *sql, int64_t *out, struct store_error *err);

/* ---- place.c: where the file is, and whether it is still there ---- */

/* A database: a name in a directory open at dirfd (O_PATH), and its path for messages. */
struct store_place {
	int dirfd;
	const char *name;
	const char *path;
};

/* A file by device and inode; not known when nothing was at its name. */
struct store_file_id {
	bool known, regular;
	dev_t dev;
	ino_t ino;
};

/* The database, its -wal and its -shm as a connection uses them. */
struct store_ids {
	struct store_file_id db, wal, shm;
};

/*
 * The VFS every connection of the store opens with: the unix one, taking
 * names as given rather than resolving their symbolic links, so a name
 * through /proc/self/fd/N stays relative to that descriptor.  NULL if it
 * could not be registered.
 */
const char *place_vfs_name(void);
/* p's file as the VFS is to open it, through p's directory descriptor.  0, or -1 if too long. */
int place_proc_path(const struct store_place *p, char *buf, size_t len);
/* The directory of path, opened O_PATH.  The descriptor, or -1 and *err ("cannot open PATH: ..."). */
int place_open_dir(const char *path, struct store_error *err);
/* The last component of path, or NULL when it names no file ("", ".", "..", a trailing slash). */
const char *place_base_name(const char *path);

/*
 * Before a connection opens p: refuses what is not a regular file; for a
 * writer (create), refuses a -wal that is not the database's, which SQLite
 * would apply to it (one beside a missing database, the -wal last used
 * beside another database, another -wal beside the database last used),
 * and creates the file when missing.  last:
 * the ids of the writer's previous connection, or NULL.  0, or -1 and *err.
 */
int place_prepare(const struct store_place *p, const struct store_ids *last, bool create,
                  struct store_error *err);
/*
 * After an open: the connection's file is the one at p's name (SQLite's
 * own record of the inode it opened, against the name's), and the ids of
 * it and of its -wal and -shm into *ids.  0, or -1 and *err.
 */
int place_verify(const struct store_place *p, sqlite3 *db, struct store_ids *ids,
                 struct store_error *err);
/*
 * Whether the files at p's names are still ids' (device and inode): 0 yes,
 * 1 no (why says which was deleted or replaced), -1 the names could not be
 * looked at (errno).
 */
int place_check(const struct store_place *p, const struct store_ids *ids, char *why, size_t len);
/* Whether the database at p's name is still ids'. */
bool place_db_unmoved(const struct store_place *p, const struct store_ids *ids);
/*
 * For a connection to a database no longer at p's name, before it is
 * closed: its -wal and -shm, if still at their names, would be taken for
 * those of the next file there; removed (only if they are still ids').
 */
void place_remove_leftovers(const struct store_place *p, const struct store_ids *ids);

/* ---- schema.c (continued) ---- */

/*
 * The writer's connection to p: created if missing, WAL, synchronous=NORMAL,
 * incremental auto-vacuum, migrated to STORE_SCHEMA_VERSION; the ids of
 * what it opened into *ids.  NULL and *err ("cannot open PATH: why").  A
 * file that is not a regular file, read-only, not a database, of a newer
 * schema or someone else's database (tables, no version) is refused before
 * anything is written to it.  last as for place_prepare.
 */
sqlite3 *store_db_open_rw(const struct store_place *p, const struct store_ids *last,
                          struct store_ids *ids, struct store_error *err);

/* A connection to p opened with flags (SQLITE_OPEN_*), busy timeout set.  NULL and *err. */
sqlite3 *store_db_connect(const struct store_place *p, int flags, struct store_error *err);
sqlite3 *store_db_open_memory(struct store_error *err);

/* A read-only connection to an existing store at p (TEMP tables in memory).  NULL and *err. */
sqlite3 *store_db_open_ro(const struct store_place *p, struct store_error *err);

/* Bytes the database's pages hold (page_count * page_size), or 0 on error. */
uint64_t store_db_bytes(sqlite3 *db);

/* ---- batch.c: the batch's representation, read by the writer ---- */

struct batch_target {
	int64_t pid;
	uint64_t start_time;
	int64_t uid;
	char *executable, *command_line, *python_version; /* may be NULL */
	double seen;                                     /* wall clock when declared */
	struct labels labels;
};

struct batch_session {
	int target;
	double attached_at, detached_at;
	uint32_t rate_hz;
	char *mode;
};

struct batch_frame {
	char *function, *file, *build_id; /* may be NULL */
	int32_t line;
	int kind;
	int32_t first_line;
};

struct batch_thread {
	int target;
	uint64_t thread_id;
	int64_t native_id;
	char *name;
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
	uint64_t idle; /* of count */
};

/* A request context; a key of zero bytes (has_trace, has_span false) is none. */
struct batch_context {
	bool has_trace, has_span;
	uint8_t trace_id[STORE_TRACE_ID_LEN], span_id[STORE_SPAN_ID_LEN];
	char *labels; /* "key=value" lines, sorted, joined by '\n'; "" for none */
};

/* Samples also counted in a batch_sample, taken inside a context. */
struct batch_context_sample {
	struct batch_sample s;
	int32_t context;
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
	struct batch_thread *threads;
	size_t nthreads, threads_cap;
	struct batch_context *contexts;
	size_t ncontexts, contexts_cap;
	struct hash_map context_index; /* a context's content -> its index */
	struct batch_context_sample *context_samples;
	size_t ncontext_samples, context_samples_cap;
	struct store_batch *next; /* the writer's queue */
	/* Under the writer's lock: pins held by queries, and whether the writer let go of it. */
	unsigned pins;
	bool released;
};

/*
 * How a declaration joins what a table already holds, for the file's
 * tables (insert.c) and the reader's copy of the writer's memory
 * (reader.c) alike: what a later declaration does not say (NULL) is kept,
 * seen times widen, labels given replace the old ones, counts add up.
 */
#define STORE_SQL_TARGET_UPSERT(table)                                                      \
	"INSERT INTO " table "(pid, start_time, uid, executable, command_line, python_version, " \
	"first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) "                      \
	"ON CONFLICT(pid, start_time) DO UPDATE SET uid = excluded.uid, "                       \
	"executable = coalesce(excluded.executable, executable), "                              \
	"command_line = coalesce(excluded.command_line, command_line), "                        \
	"python_version = coalesce(excluded.python_version, python_version), "                  \
	"first_seen = min(first_seen, excluded.first_seen), "                                   \
	"last_seen = max(last_seen, excluded.last_seen) RETURNING id"
#define STORE_SQL_LABELS_DEL(table) "DELETE FROM " table " WHERE target = ?1"
#define STORE_SQL_LABEL_ADD(table) \
	"INSERT OR REPLACE INTO " table "(target, key, value) VALUES (?1, ?2, ?3)"
#define STORE_SQL_SESSION_UPSERT(table)                                                 \
	"INSERT INTO " table "(target, attached_at, detached_at, rate_hz, mode) "           \
	"VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(target, attached_at) DO UPDATE SET "       \
	"detached_at = coalesce(excluded.detached_at, detached_at), "                       \
	"rate_hz = excluded.rate_hz, mode = coalesce(excluded.mode, mode)"
#define STORE_SQL_SAMPLE_ADD(table)                                                 \
	"INSERT INTO " table "(target, bucket_start, bucket_seconds, thread_id, stack, count, idle) " \
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "                                            \
	"ON CONFLICT(target, bucket_start, bucket_seconds, thread_id, stack) "           \
	"DO UPDATE SET count = count + excluded.count, idle = idle + excluded.idle"
#define STORE_SQL_CONTEXT_SAMPLE_ADD(table)                                                  \
	"INSERT INTO " table "(target, bucket_start, bucket_seconds, thread_id, stack, count, idle, " \
	"context) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "                                        \
	"ON CONFLICT(target, bucket_start, bucket_seconds, thread_id, stack, context) "           \
	"DO UPDATE SET count = count + excluded.count, idle = idle + excluded.idle"
#define STORE_SQL_THREAD_UPSERT(table)                                                  \
	"INSERT INTO " table "(target, thread_id, native_id, name) VALUES (?1, ?2, ?3, ?4) " \
	"ON CONFLICT(target, thread_id) DO UPDATE SET native_id = excluded.native_id, "   \
	"name = CASE WHEN excluded.name = '' THEN name ELSE excluded.name END"

/* ---- insert.c: one batch's rows, on the writer's connection (writer thread) ---- */

#define INSERT_STATEMENTS 15

/*
 * Content -> database id, in two generations: lookups try the new one, then
 * the old (moving what they find to the new); a new generation starts when
 * the new one holds a quarter of the cache's bytes, and the old one goes.
 * A hash table that doubles at most doubles a generation, so the two never
 * hold more than the bytes given, and the ids in use live on through turns.
 */
struct insert_cache {
	struct hash_map now, old;
};

struct inserter {
	sqlite3 *db; /* NULL until opened, and after an error that a new open may cure */
	sqlite3_stmt *stmt[INSERT_STATEMENTS];
	struct insert_cache strings, frames, stacks, contexts;
	size_t cache_budget; /* bytes of the three caches together; 0: STORE_CACHE_BUDGET_DEFAULT */
	int64_t *frame_ids, *stack_ids, *target_ids, *context_ids; /* batch-local index -> database id */
	size_t frame_cap, stack_cap, target_cap, context_cap;
};

/* Opens the file for writing (store_db_open_rw, last and ids as there) and prepares.  0, or -1 and *err. */
int insert_open(struct inserter *ins, const struct store_place *p, const struct store_ids *last,
                struct store_ids *ids, uint64_t max_file_bytes, struct store_error *err);
/* Closes the connection, keeping the room of the id arrays; insert_free gives it back too. */
void insert_close(struct inserter *ins);
void insert_free(struct inserter *ins);

/*
 * A batch's rows in a transaction begun here and left open on success, for
 * insert_commit.  An SQLite code; on failure, the message in *err and the
 * transaction rolled back.
 */
int insert_batch(struct inserter *ins, const struct store_batch *b, struct store_error *err);
/* An SQLite code; on failure, the message in *err and the transaction rolled back. */
int insert_commit(struct inserter *ins, struct store_error *err);

/* Steps a statement to its end (or its one row into *id), then resets it.  An SQLite code. */
int insert_step(sqlite3_stmt *s, int64_t *id);

/* A declaration's parameters for the STORE_SQL_* statements above, with the ids given.  An SQLite code. */
int insert_bind_target(sqlite3_stmt *s, const struct batch_target *t);
int insert_bind_session(sqlite3_stmt *s, int64_t target, const struct batch_session *ss);
int insert_bind_sample(sqlite3_stmt *s, int64_t target, int64_t stack, const struct batch_sample *x);
int insert_bind_thread(sqlite3_stmt *s, int64_t target, const struct batch_thread *x);
/* A context's trace, span and labels as ?1, ?2, ?3 (zero-length blobs for none). */
int insert_bind_context(sqlite3_stmt *s, const struct batch_context *c);
/* A context row: the sample's parameters, and the context's id as ?8. */
int insert_bind_context_sample(sqlite3_stmt *s, int64_t target, int64_t stack, int64_t context,
                               const struct batch_context_sample *x);
/* A declaration's labels, replacing the target's, through the LABELS_DEL and LABEL_ADD statements. */
int insert_labels(sqlite3_stmt *del, sqlite3_stmt *add, int64_t target, const struct batch_target *t);

/* Cached ids may name rows gone (retention deleted them): forget them all. */
void insert_forget_ids(struct inserter *ins);
/* Bytes the caches of ids hold now. */
size_t insert_cache_bytes(const struct inserter *ins);

/* A hard limit on the file (PRAGMA max_page_count, per connection).  0, or -1 and *err. */
int insert_file_limit(struct inserter *ins, uint64_t max_file_bytes, struct store_error *err);

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

/*
 * Where w's file is, for a reader: true with the directory w holds for its
 * life (store_writer_open_at); false when w opens its file by path (p->path).
 */
bool writer_place(struct store_writer *w, struct store_place *p);

/* ---- reader.c: the reader's connection, the writer's memory copied, the selection ---- */

struct store_reader {
	int dirfd; /* its own when opened by path, else -1 (the writer's is used) */
	sqlite3 *db;
	char partial[448]; /* why the file is not read (db is empty, in memory); "" when it is */
	sqlite3_stmt *node;  /* a stack's parent and frame */
	sqlite3_stmt *frame; /* a frame's strings */
};

/*
 * A thread's process and name for a query's rows, read once per (target,
 * thread) of the query (stacks.c): the threads and labels tables of the
 * file and the writer's memory.  0, or -1 and *err.
 */
int reader_thread_info(struct store_reader *r, const struct store_query *q, int64_t target,
                       uint64_t thread_id, struct store_thread *out, struct arena *a,
                       struct store_error *err);

/* The tables a query reads: the file's, or views over the file and the memory q pinned. */
struct reader_tables {
	const char *samples, *targets, *labels, *sessions, *threads, *contexts, *context_samples;
};
/* q NULL: the file's alone. */
const struct reader_tables *reader_tables(const struct store_query *q);

/* A query the SQL can be built for.  0, or -1 and *err. */
int reader_check(const struct store_query *q, struct store_error *err);

/* Whether q selects by request context (trace, span or context labels). */
bool reader_by_context(const struct store_query *q);

/*
 * What a query reads samples from, as a FROM item into buf: the samples
 * table (or view) without a context filter; with one, the context rows
 * joined to their contexts and filtered (its ? numbers bound by
 * reader_bind), with the context's trace_id, span_id and labels as
 * columns too.  all: the context rows even without a filter.  NULL if buf
 * is too small.
 */
const char *reader_samples(const struct store_query *q, bool all, char *buf, size_t len);

/*
 * The conditions on a table's target column that select q's processes,
 * appended to buf from n on (its ? numbers fixed by position, bound by
 * reader_bind).  The new length; len or more if it did not fit.
 */
size_t reader_select_targets(const struct store_query *q, const struct reader_tables *tables,
                             char *buf, size_t len, size_t n);

/*
 * The statement of a query: head (its SELECT, FROM and first conditions),
 * then the thread's condition on thread_column when q asks for one (NULL:
 * none), q's selection of processes, and tail; prepared and bound.  0, or -1
 * and *err (what names the query).
 */
int reader_prepare(struct store_reader *r, const struct store_query *q, const char *head,
                   const char *thread_column, const char *tail, const char *what,
                   sqlite3_stmt **out, struct store_error *err);

/* The parameters of the context filter: past every other. */
#define READER_TRACE_PARAM 1000
#define READER_SPAN_PARAM 1001
#define READER_CONTEXT_LABEL_PARAM 1010

/* Binds q's parameters (?1 and ?2 are from and until); an SQLite result code. */
int reader_bind(sqlite3_stmt *st, const struct store_query *q);

/* The batch and batch-local stack of a stack id of memory (negative).  0, or -1 if p has none. */
int reader_pending_stack_find(const struct store_pending *p, int64_t value,
                              const struct store_batch **batch, int32_t *stack);

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

/* ---- sinks.c: what each sink (an OTLP endpoint) was sent ---- */

/* Sinks not exported to for this long hold retention back no more. */
#define STORE_EXPORT_IDLE_S 86400

/*
 * The first bucket start some active sink has yet to send (retention merges
 * nothing from there on), or -1 when no sink holds it back.  0, or -1 and *err.
 */
int sinks_horizon(sqlite3 *db, double now, int64_t *horizon, struct store_error *err);

#endif
