/*
 * The history store: aggregated samples in SQLite.  Only storage/ includes
 * sqlite3.h; the daemon sees this header.
 *
 * Data model: strings, frames (function, file, line, kind) and stacks (a
 * prefix tree: parent stack + frame) are interned; samples are counts per
 * (target, time bucket, thread, stack).  A target is a process by identity
 * (pid + start time) with its uid, executable, command line, Python version
 * and labels; a session is one attach..detach of it with its rate and mode.
 *
 * Threads: a store_writer owns one connection on a thread of its own
 * (which also opens, creates and migrates the database) and takes batches
 * from any thread; queries open their own read-only connection
 * (store_reader) on whatever thread runs them.  Nothing here touches the
 * daemon's event loop, and no store_writer_* call waits on SQLite except
 * store_writer_sync and store_writer_close.
 */
#ifndef PYPROFD_STORE_H
#define PYPROFD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Labels a target or a query may carry; past this a batch or query is refused. */
#define STORE_MAX_LABELS 64

struct store_error {
	char msg[256];
};

/* ---- writing ---- */

/*
 * A batch: what the daemon aggregated since its last flush, self-contained.
 * Frames and stacks are numbered within the batch (a stack's parent is an
 * earlier stack of the same batch, or -1 for the root); the writer maps them
 * to the database's ids.  All strings are copied by store_batch_* calls.
 */
struct store_batch;

struct store_batch *store_batch_new(void);
void store_batch_free(struct store_batch *b);

struct store_target_info {
	pid_t pid;
	uint64_t start_time; /* clock ticks after boot */
	uid_t uid;
	const char *executable;
	const char *command_line;
	const char *python_version;
	size_t nlabels;
	const char *const *label_keys;
	const char *const *label_values;
};

/*
 * Declare a target (inserted or updated: labels, when it has some, replace
 * the old ones; without any it keeps them); its batch-local index, or -1.
 */
int store_batch_target(struct store_batch *b, const struct store_target_info *t);

/* A session of a target of this batch: opened at attached_at, closed when detached_at > 0. */
int store_batch_session(struct store_batch *b, int target, double attached_at, double detached_at,
                        uint32_t rate_hz, const char *mode);

/*
 * A frame; kind 0 python, 1 native, 2 gc.  function is the qualified name
 * where the interpreter has one; with file and first_line (co_firstlineno,
 * 0 unknown) it names the function.  Its batch-local index, or -1.
 */
int32_t store_batch_frame(struct store_batch *b, const char *function, const char *file,
                          int32_t line, int kind, int32_t first_line);
/*
 * A C frame (kind 4): its function (or "[+0x…]"), its module's file, its
 * address in that file (-1: unknown) and the module's GNU build id in hex
 * (NULL or "": none).  Its batch-local index, or -1.
 */
int32_t store_batch_c_frame(struct store_batch *b, const char *function, const char *file, int32_t address,
                            const char *build_id);

/* A stack: parent (-1 for the root's child) plus frame.  Its batch-local index, or -1. */
int32_t store_batch_stack(struct store_batch *b, int32_t parent, int32_t frame);

/*
 * count samples of stack in a thread of a target, in the bucket starting at
 * bucket_start, idle of them taken while the thread waited (idle <= count).
 */
int store_batch_samples(struct store_batch *b, int target, int64_t bucket_start,
                        uint32_t bucket_seconds, uint64_t thread_id, int32_t stack, uint64_t count,
                        uint64_t idle);

/* A request context's trace id and span id (OpenTelemetry's, big-endian), in bytes. */
#define STORE_TRACE_ID_LEN 16
#define STORE_SPAN_ID_LEN 8
/* A context's labels: at most this many "key=value" lines, of this many bytes in all. */
#define STORE_CONTEXT_LABELS 8
#define STORE_CONTEXT_LABELS_BYTES 1024

/*
 * A request context of this batch: the trace and span a sample ran in
 * (trace_id NULL: none; span_id NULL: none, and only with a trace;
 * trace_id 16 bytes, not all zero, span_id 8, big-endian) and its labels,
 * "key=value" lines sorted by key and joined by '\n' ("" for none; at most
 * STORE_CONTEXT_LABELS lines, STORE_CONTEXT_LABELS_BYTES bytes).  A context
 * with neither a trace nor labels is refused.  The same context declared
 * twice in a batch is one.  Its batch-local index, or -1.
 */
int32_t store_batch_context(struct store_batch *b, const uint8_t *trace_id, const uint8_t *span_id,
                            const char *labels);

/*
 * count samples (idle of them waiting) of a stack in a thread, taken inside
 * a context of this batch.  They are ALSO counted by store_batch_samples as
 * always: context rows are a second, finer view of samples the history
 * already holds, so queries without a context filter never read them.
 * Retention deletes them once their bucket is as old as the first step's
 * age, and before any other sample under the size cap.  0, or -1.
 */
int store_batch_context_samples(struct store_batch *b, int target, int64_t bucket_start,
                                uint32_t bucket_seconds, uint64_t thread_id, int32_t stack,
                                int32_t context, uint64_t count, uint64_t idle);

/*
 * A thread of a target of this batch: its kernel id (-1 unknown) and name
 * ("" unknown: an earlier name is kept).  0, or -1.
 */
int store_batch_thread(struct store_batch *b, int target, uint64_t thread_id, int64_t native_id,
                       const char *name);

/* Sample rows in the batch, context rows included (for bounds on what waits in memory). */
uint64_t store_batch_sample_rows(const struct store_batch *b);

struct store_writer;

/*
 * Start the writer of the database at path: allocates and starts its
 * thread, nothing more.  NULL and *err only when out of memory or when the
 * thread cannot start; whether the file can be opened is the thread's
 * business and shows in store_writer_status.
 *
 * The thread opens (creates, migrates) the database at once: WAL mode, the
 * schema version in PRAGMA user_version.  While it cannot (no directory, a
 * read-only file or file system, a file that is not a database, a schema
 * of a newer pyprofd, a database of someone else), the status is failing
 * and not open with last_error "cannot open PATH: why", submitted batches
 * wait as behind a failing write, and opening is retried every second: the
 * caller never retries.  A file the writer refuses is never written to, so
 * a newer schema or a foreign file stays as it was until the operator acts.
 *
 * A file deleted or replaced at its name under the writer (or its -wal,
 * its -shm) is noticed within a second and before a commit counts: the
 * writer lets go of it and opens the name again at once, and the batches
 * committed to the old file since are written again to the new one.
 */
struct store_writer *store_writer_open(const char *path, struct store_error *err);

/*
 * As store_writer_open, for the file name in the directory open at dirfd
 * (the writer keeps a duplicate for its life): the database, its -wal and
 * its -shm are reached through that descriptor, never by the directory's
 * path, so whoever renames a directory above it cannot point the writer
 * elsewhere.  path names the file in messages and the status.
 */
struct store_writer *store_writer_open_at(int dirfd, const char *name, const char *path,
                                          struct store_error *err);

/*
 * Hand a batch to the writer (which takes ownership); it is written in one
 * transaction.  Never blocks on SQLite.  While the database cannot be
 * opened or writes fail (full disk, read-only file, I/O error), batches
 * wait in memory up to max_pending_rows sample rows, oldest dropped first
 * past that (counted in dropped_rows), and are retried every second.  A
 * write failing on a read-only file or an I/O error also closes the
 * connection, so the retry opens the file again and sees it writable once
 * it is (chmod, a remount).
 */
void store_writer_submit(struct store_writer *w, struct store_batch *b);

struct store_writer_status {
	uint64_t batches_written, rows_written;
	uint64_t pending_batches, pending_rows; /* waiting in memory */
	uint64_t dropped_rows;                   /* lost past the memory bound */
	bool open;    /* false until the first open, and after an error that closed it */
	bool failing; /* the last open or write failed (with open false: opening fails) */
	char last_error[256]; /* why, when failing; kept after recovery */
	uint64_t db_bytes;    /* as of the last open, write or retention */
	/* Times the file, its -wal or its -shm was found deleted or replaced at its name, and the last. */
	uint64_t file_changes;
	char file_change[256];
	/* The writer's caches of database ids by content (strings, frames, stacks), and their bound. */
	uint64_t cache_bytes, cache_budget_bytes;
	/* SQLite's cache of pages of the writer's connection, and its bound. */
	uint64_t page_cache_bytes, page_cache_budget_bytes;
};
void store_writer_status(struct store_writer *w, struct store_writer_status *out);

/* What the writer's caches of ids hold at most, unless told otherwise. */
#define STORE_CACHE_BUDGET_DEFAULT ((size_t)8 << 20)
/*
 * Bound the writer's caches of database ids to bytes (0: the default), from
 * its next batch on.  A smaller cache costs lookups in the file, never rows.
 */
void store_writer_set_cache_budget(struct store_writer *w, size_t bytes);

void store_writer_set_limits(struct store_writer *w, uint64_t max_pending_rows, uint64_t max_db_bytes);

/*
 * A hard limit on the database file (PRAGMA max_page_count on the writer's
 * connection; 0: none, the default).  Writes that would pass it fail as on a
 * full disk: batches wait and are retried.  For a store on a shared file
 * system, and for tests of the full-disk path without a full disk.
 */
void store_writer_set_file_limit(struct store_writer *w, uint64_t max_file_bytes);

/*
 * Wait until the database is open and everything submitted so far is
 * written, or until one more attempt (to open the database, or to write)
 * has failed.  It asks for that attempt now rather than at the next retry,
 * so it returns within one attempt's time even while the database cannot
 * be opened, and the status then says how that attempt went.  For shutdown
 * and tests.
 */
void store_writer_sync(struct store_writer *w);

/*
 * As store_writer_sync, but for the batches alone: a retention run under way
 * is not waited for (it lets waiting batches through between its slices).
 * What a query waits for before it reads.
 */
void store_writer_flush(struct store_writer *w);

/*
 * Write what is pending, stop the thread, close.  What waits gets one last
 * attempt (opening the database first if needed); what fails it is dropped.
 */
void store_writer_close(struct store_writer *w);

/* ---- retention ---- */

/*
 * Merge buckets older than each step's age into that step's width (e.g. 10 s
 * buckets older than 1 h into 1 min, older than 1 day into 1 h), keeping the
 * totals of every (target, thread, stack) over any range of whole merged
 * buckets exact.  Then, past max_db_bytes (0: no cap), drop the oldest
 * buckets, with the stacks, frames and strings only they used, until the
 * pages in use fit, and give the freed pages back to the file system.
 * Runs on the writer's thread, between batches; while the database is not
 * open it waits for the open.  Only this call enforces max_db_bytes: between
 * two calls the file grows by what is written meanwhile.
 */
struct store_retention_step {
	double older_than_s;
	uint32_t bucket_seconds;
};
void store_writer_retention(struct store_writer *w, const struct store_retention_step *steps,
                            size_t nsteps);

/* ---- reading ---- */

struct store_reader;

/* A read-only connection for the calling thread.  NULL and *err. */
struct store_reader *store_reader_open(const char *path, struct store_error *err);
/*
 * The same, to the file w writes, reached as w reaches it.  While w cannot
 * open its file (another file at its name, a directory gone), the reader
 * stands on an empty history and answers from what w pins of its memory.
 */
struct store_reader *store_reader_open_writer(struct store_writer *w, struct store_error *err);
/* Why r answers from the writer's memory alone; NULL when the file answers too. */
const char *store_reader_partial(const struct store_reader *r);
void store_reader_close(struct store_reader *r);

struct store_query {
	pid_t pid;                /* 0: any */
	int64_t target_id;        /* 0: any */
	size_t nlabels;           /* every one must match */
	const char *const *label_keys;
	const char *const *label_values;
	double from_unix, until_unix; /* [from, until) by bucket start; until 0: now */
	bool by_thread;
	uint64_t thread_id;       /* with by_thread */
	bool split_threads;       /* a row per (process, thread, stack), not per stack */
	/*
	 * 0, or a row per time slot too: at most this many slots over the
	 * samples, all of one width, the narrowest of 1, 2, 10, 20, 60, 120,
	 * 600, 1200 s, 1, 2, 6, 12 h, a day and its doublings that is as wide
	 * as the widest bucket among them.  Slots start at multiples of their
	 * width; a bucket counts in the slot its start is in.
	 */
	uint32_t time_slots;
	bool no_idle;             /* leave out the samples of threads that waited */
	bool by_uid;              /* only processes this uid owned */
	uid_t uid;
	/* Also the samples that wait in the writer's memory, pinned with store_reader_pin. */
	const struct store_pending *pending;
	/*
	 * The request context's filter: with any set, only samples taken in a
	 * context that matches all of them (from the context rows, so samples
	 * whose context rows retention deleted are not counted).  trace_id 16
	 * bytes, span_id 8, NULL: any; each of context_labels a "key=value"
	 * line that must be one of the context's labels (at most
	 * STORE_CONTEXT_LABELS).
	 */
	const uint8_t *trace_id, *span_id;
	size_t ncontext_labels;
	const char *const *context_labels;
	/* Stacks: a row per context too (store_row.context); samples in none stay rows of their own. */
	bool split_contexts;
};

/*
 * What the writer still holds in memory (waiting for a write, or being
 * written), pinned at the moment r's read transaction begins: queries on r
 * with q->pending set count every sample once, in the file or in memory,
 * whether the writer writes it meanwhile or not.  Until store_reader_unpin,
 * r's queries read that one snapshot.  w must outlive the pin.  NULL and *err.
 */
struct store_pending;
struct store_pending *store_reader_pin(struct store_reader *r, struct store_writer *w,
                                       struct store_error *err);
void store_reader_unpin(struct store_reader *r, struct store_pending *p);

/* One aggregated stack of a query's result: frames root first. */
struct store_frame {
	const char *function, *file;
	int32_t line;         /* a C frame's: its address in its module's file */
	int kind;
	int32_t first_line; /* 0: unknown */
	/* Within one store_query_stacks call: 0, 1, 2... in order of first appearance, equal for equal frames. */
	uint32_t id;
	const char *build_id; /* a C frame's module's, in hex; "" (or NULL) none */
};
/* A request context of a query split by contexts. */
struct store_context {
	bool has_trace, has_span;
	uint8_t trace_id[STORE_TRACE_ID_LEN], span_id[STORE_SPAN_ID_LEN];
	const char *labels; /* "key=value" lines sorted by key, joined by '\n'; "": none */
	/* Within one store_query_stacks call: 0, 1, 2... in order of first appearance. */
	uint32_t id;
};

/* A thread of a query split by threads, with its process's labels. */
struct store_thread {
	int64_t target_id; /* 0: a process only the writer's memory has seen yet */
	pid_t pid;
	uint64_t thread_id;
	int64_t native_id; /* -1: unknown */
	const char *name;  /* "": unknown */
	uint64_t start_time; /* its process's, clock ticks after boot (/proc/PID/stat); 0: unknown */
	size_t nlabels;
	const char *const *label_keys, *const *label_values;
	/* Within one store_query_stacks call: 0, 1, 2... in order of first appearance. */
	uint32_t id;
};
struct store_row {
	const struct store_frame *frames;
	uint32_t depth;
	uint64_t count;
	uint64_t idle;        /* of count, samples of a waiting thread (0 with no_idle) */
	const struct store_thread *thread; /* with split_threads; else NULL */
	const struct store_context *context; /* with split_contexts: NULL for samples in none */
	int64_t slot_start;    /* with time_slots: the start of its slot, unix seconds */
	uint32_t slot_seconds; /* with time_slots: the width of every slot of the answer; else 0 */
	uint64_t query_total; /* the sum over every row of the query, known from the first */
	/* The start of the first bucket and the end of the last with samples, known from the first. */
	double first_unix, last_unix;
};

/*
 * Run a query: fn is called once per distinct stack with its summed count
 * (frames valid during the call), in no particular order; it returns 0 to go
 * on, anything else stops the query (which then returns -1).  0, or -1 and
 * *err.  *total receives the sum of the counts (fn may be NULL for it alone).
 * Stacks deeper than 8192 frames (only a corrupt database has them) fail the
 * query.
 */
int store_query_stacks(struct store_reader *r, const struct store_query *q,
                       int (*fn)(void *ctx, const struct store_row *row), void *ctx,
                       uint64_t *total, struct store_error *err);

/* A span of a trace, and the samples taken in it. */
struct store_span {
	uint8_t span_id[STORE_SPAN_ID_LEN];
	uint64_t samples;
};
/* A trace a query's range has samples in. */
struct store_trace {
	uint8_t trace_id[STORE_TRACE_ID_LEN];
	uint64_t samples;
	double first_unix, last_unix; /* its first bucket's start, its last bucket's end */
	size_t nspans;                /* the spans with the most samples, most first */
	const struct store_span *spans;
	uint64_t spans_found;         /* spans before the cut to max_spans */
};

/* Traces a query lists at most (limit 0 is this many too), and spans per trace. */
#define STORE_TRACES_MAX 10000
#define STORE_TRACE_SPANS_MAX 100

/*
 * The traces with the most samples among q's selection (its context filter
 * too), at most limit (0: STORE_TRACES_MAX), most samples first, each with
 * its max_spans spans of most samples (at most STORE_TRACE_SPANS_MAX; spans
 * valid during the call).  Samples come from the context rows alone, so
 * only traces younger than the first retention step's age are known.  fn
 * as for store_query_stacks.  0, or -1 and *err.
 */
int store_query_traces(struct store_reader *r, const struct store_query *q, uint32_t limit,
                       uint32_t max_spans, int (*fn)(void *ctx, const struct store_trace *t),
                       void *ctx, struct store_error *err);

/* A process a query's range has samples of. */
struct store_process {
	int64_t target_id;
	pid_t pid;
	uid_t uid;
	const char *executable, *command_line, *python_version; /* NULL: unknown */
	size_t nlabels;
	const char *const *label_keys, *const *label_values;
	double first_unix, last_unix; /* its first bucket's start, its last bucket's end */
	uint64_t samples;
};

/*
 * The processes q selects that have samples in its range, by their first
 * sample; fn as for store_query_stacks (strings valid during the call).
 */
int store_query_processes(struct store_reader *r, const struct store_query *q,
                          int (*fn)(void *ctx, const struct store_process *p), void *ctx,
                          struct store_error *err);

/*
 * How q's processes were sampled over its range: the rate and mode of their
 * sessions if all that overlap the range agree, else (none, or several)
 * *rate_hz 0 and mode "".  0, or -1 and *err.
 */
int store_query_sampling(struct store_reader *r, const struct store_query *q, uint32_t *rate_hz,
                         char *mode, size_t mode_len, struct store_error *err);

/* ---- sinks: what was sent where (sinks.c) ---- */

/*
 * The OTLP sender's connection to the file w writes, reached as w reaches it,
 * for what each sink (an OTLP endpoint, by name) was sent.  It writes only
 * the export tables; samples are read through a store_reader.  The schema
 * must be this build's (w migrates it once open).  NULL and *err.
 */
struct store_sinks;
struct store_sinks *store_sinks_open(struct store_writer *w, struct store_error *err);
void store_sinks_close(struct store_sinks *x);

/*
 * The sink of this name, created when new with everything before `start`
 * taken as sent (a sender starts from now, not from the whole history),
 * marked active at `now`.  Its id and the first bucket start it has not
 * sent for every target.  0, or -1 and *err.
 */
int store_sink_get(struct store_sinks *x, const char *name, int64_t start, double now,
                   int64_t *sink, int64_t *sent_until, struct store_error *err);

/* A target with samples a sink has not been sent, in buckets starting in [from, until). */
struct store_sink_due {
	int64_t target_id;
	pid_t pid;
	int64_t from;
	uint64_t samples;
};
/*
 * The targets with samples not yet sent to sink in buckets starting before
 * until, by target id; fn as for store_query_stacks.  *samples (may be
 * NULL) gets their sum.  0, or -1 and *err.
 */
int store_sink_due(struct store_sinks *x, int64_t sink, int64_t until,
                   int (*fn)(void *ctx, const struct store_sink_due *d), void *ctx,
                   uint64_t *samples, struct store_error *err);

/* A target's samples in buckets starting before until are sent to sink.  0, or -1 and *err. */
int store_sink_mark(struct store_sinks *x, int64_t sink, int64_t target_id, int64_t until,
                    struct store_error *err);
/* Every target's are: the sink's sent_until moves to until.  0, or -1 and *err. */
int store_sink_advance(struct store_sinks *x, int64_t sink, int64_t until,
                       struct store_error *err);

/*
 * The threads with samples of a target in buckets starting in [from, until),
 * ascending, into *ids (malloc'd, *n of them).  0, or -1 and *err.
 */
int store_query_threads(struct store_reader *r, int64_t target_id, int64_t from, int64_t until,
                        uint64_t **ids, size_t *n, struct store_error *err);

#endif
