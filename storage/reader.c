/*
 * Queries over the history on a read-only connection of the caller's
 * thread, and what the writer still holds in memory.
 *
 * Which processes and samples a query selects is written once, in SQL.
 * The samples a query pins in the writer's memory are copied, at the pin,
 * into TEMP tables of the reader's connection by the very statements the
 * writer would run (STORE_SQL_*), and TEMP views show the file and that
 * copy as one set of tables: the same SELECT then answers for both.  A
 * stack of memory keeps its batch's index, as a negative id the file never
 * uses (reader_pending_stack).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "storage.h"

/* The writer's memory, as pinned: batches of STORE_MAX_PENDING_BATCHES at most. */
struct store_pending {
	struct store_writer *w;
	struct store_batch **batches;
	size_t n; /* 0: nothing waits, and queries read the file's tables alone */
};

/*
 * The TEMP copy of the writer's memory and the views over it and the file.
 * A process of memory that the file has not seen has the negative of its
 * key as id (no one could have asked for it by id); one the file has is
 * shown as the file will have it once the batches are written, labels
 * replaced by those it is declared with, sessions merged.
 */
static const char reader_temp_schema[] =
	"CREATE TEMP TABLE IF NOT EXISTS pending_targets("
	"  id INTEGER PRIMARY KEY, file_id INTEGER, pid INTEGER NOT NULL, start_time INTEGER NOT NULL,"
	"  uid INTEGER NOT NULL, executable TEXT, command_line TEXT, python_version TEXT,"
	"  first_seen REAL, last_seen REAL, labelled INTEGER NOT NULL DEFAULT 0,"
	"  UNIQUE(pid, start_time));"
	"CREATE INDEX IF NOT EXISTS temp.pending_targets_file ON pending_targets(file_id);"
	"CREATE TEMP TABLE IF NOT EXISTS pending_labels("
	"  target INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(target, key));"
	"CREATE TEMP TABLE IF NOT EXISTS pending_sessions("
	"  target INTEGER NOT NULL, attached_at REAL NOT NULL, detached_at REAL, rate_hz INTEGER NOT NULL,"
	"  mode TEXT, PRIMARY KEY(target, attached_at));"
	"CREATE TEMP TABLE IF NOT EXISTS pending_samples("
	"  target INTEGER NOT NULL, bucket_start INTEGER NOT NULL, bucket_seconds INTEGER NOT NULL,"
	"  thread_id INTEGER NOT NULL, stack INTEGER NOT NULL, count INTEGER NOT NULL,"
	"  idle INTEGER NOT NULL DEFAULT 0,"
	"  PRIMARY KEY(target, bucket_start, bucket_seconds, thread_id, stack)) WITHOUT ROWID;"
	"CREATE TEMP TABLE IF NOT EXISTS pending_threads("
	"  target INTEGER NOT NULL, thread_id INTEGER NOT NULL, native_id INTEGER NOT NULL,"
	"  name TEXT NOT NULL, PRIMARY KEY(target, thread_id)) WITHOUT ROWID;"
	"CREATE TEMP TABLE IF NOT EXISTS pending_contexts("
	"  id INTEGER PRIMARY KEY, trace_id BLOB NOT NULL, span_id BLOB NOT NULL, labels TEXT NOT NULL,"
	"  UNIQUE(trace_id, span_id, labels));"
	"CREATE TEMP TABLE IF NOT EXISTS pending_context_samples("
	"  target INTEGER NOT NULL, bucket_start INTEGER NOT NULL, bucket_seconds INTEGER NOT NULL,"
	"  thread_id INTEGER NOT NULL, stack INTEGER NOT NULL, context INTEGER NOT NULL,"
	"  count INTEGER NOT NULL, idle INTEGER NOT NULL DEFAULT 0,"
	"  PRIMARY KEY(target, bucket_start, bucket_seconds, thread_id, stack, context)) WITHOUT ROWID;"
	"CREATE TEMP VIEW IF NOT EXISTS all_targets(id, pid, uid, executable, command_line, python_version,"
	"  start_time) AS"
	"  SELECT t.id, t.pid, coalesce(p.uid, t.uid), coalesce(p.executable, t.executable),"
	"    coalesce(p.command_line, t.command_line), coalesce(p.python_version, t.python_version),"
	"    t.start_time"
	"  FROM main.targets t LEFT JOIN pending_targets p ON p.file_id = t.id"
	"  UNION ALL SELECT -id, pid, uid, executable, command_line, python_version, start_time"
	"  FROM pending_targets WHERE file_id IS NULL;"
	"CREATE TEMP VIEW IF NOT EXISTS all_labels(target, key, value) AS"
	"  SELECT target, key, value FROM main.target_labels WHERE target NOT IN"
	"    (SELECT file_id FROM pending_targets WHERE labelled AND file_id IS NOT NULL)"
	"  UNION ALL SELECT coalesce(t.file_id, -t.id), l.key, l.value"
	"  FROM pending_labels l JOIN pending_targets t ON t.id = l.target;"
	"CREATE TEMP VIEW IF NOT EXISTS all_sessions(target, attached_at, detached_at, rate_hz, mode) AS"
	"  SELECT s.target, s.attached_at, s.detached_at, s.rate_hz, s.mode FROM main.sessions s"
	"  WHERE NOT EXISTS (SELECT 1 FROM pending_sessions p JOIN pending_targets t ON t.id = p.target"
	"    WHERE t.file_id = s.target AND p.attached_at = s.attached_at)"
	"  UNION ALL SELECT coalesce(t.file_id, -t.id), p.attached_at, coalesce(p.detached_at, f.detached_at),"
	"    p.rate_hz, coalesce(p.mode, f.mode)"
	"  FROM pending_sessions p JOIN pending_targets t ON t.id = p.target"
	"  LEFT JOIN main.sessions f ON f.target = t.file_id AND f.attached_at = p.attached_at;"
	"CREATE TEMP VIEW IF NOT EXISTS all_samples(target, bucket_start, bucket_seconds, thread_id, stack,"
	"  count, idle) AS"
	"  SELECT target, bucket_start, bucket_seconds, thread_id, stack, count, idle FROM main.samples"
	"  UNION ALL SELECT coalesce(t.file_id, -t.id), s.bucket_start, s.bucket_seconds, s.thread_id,"
	"    s.stack, s.count, s.idle FROM pending_samples s JOIN pending_targets t ON t.id = s.target;"
	/* A context of memory has the negative of its id: queries match contexts by content. */
	"CREATE TEMP VIEW IF NOT EXISTS all_contexts(id, trace_id, span_id, labels) AS"
	"  SELECT id, trace_id, span_id, labels FROM main.contexts"
	"  UNION ALL SELECT -id, trace_id, span_id, labels FROM pending_contexts;"
	"CREATE TEMP VIEW IF NOT EXISTS all_context_samples(target, bucket_start, bucket_seconds,"
	"  thread_id, stack, context, count, idle) AS"
	"  SELECT target, bucket_start, bucket_seconds, thread_id, stack, context, count, idle"
	"  FROM main.context_samples"
	"  UNION ALL SELECT coalesce(t.file_id, -t.id), s.bucket_start, s.bucket_seconds, s.thread_id,"
	"    s.stack, -s.context, s.count, s.idle"
	"  FROM pending_context_samples s JOIN pending_targets t ON t.id = s.target;"
	"CREATE TEMP VIEW IF NOT EXISTS all_threads(target, thread_id, native_id, name) AS"
	"  SELECT h.target, h.thread_id, h.native_id, h.name FROM main.threads h"
	"  WHERE NOT EXISTS (SELECT 1 FROM pending_threads p JOIN pending_targets t ON t.id = p.target"
	"    WHERE t.file_id = h.target AND p.thread_id = h.thread_id)"
	"  UNION ALL SELECT coalesce(t.file_id, -t.id), p.thread_id, p.native_id,"
	"    CASE WHEN p.name = '' THEN coalesce(f.name, '') ELSE p.name END"
	"  FROM pending_threads p JOIN pending_targets t ON t.id = p.target"
	"  LEFT JOIN main.threads f ON f.target = t.file_id AND f.thread_id = p.thread_id;";

static const struct reader_tables reader_file_tables = {
	.samples = "main.samples", .targets = "main.targets",
	.labels = "main.target_labels", .sessions = "main.sessions", .threads = "main.threads",
	.contexts = "main.contexts", .context_samples = "main.context_samples",
};
static const struct reader_tables reader_all_tables = {
	.samples = "temp.all_samples", .targets = "temp.all_targets",
	.labels = "temp.all_labels", .sessions = "temp.all_sessions", .threads = "temp.all_threads",
	.contexts = "temp.all_contexts", .context_samples = "temp.all_context_samples",
};

const struct reader_tables *reader_tables(const struct store_query *q)
{
	return q && q->pending && q->pending->n ? &reader_all_tables : &reader_file_tables;
}

bool reader_by_context(const struct store_query *q)
{
	return q->trace_id || q->span_id || q->ncontext_labels;
}

const char *reader_samples(const struct store_query *q, bool all, char *buf, size_t len)
{
	const struct reader_tables *t = reader_tables(q);
	if (!all && !reader_by_context(q))
		return t->samples;
	size_t n = (size_t)snprintf(
		buf, len,
		"(SELECT cs.target AS target, cs.bucket_start AS bucket_start, "
		"cs.bucket_seconds AS bucket_seconds, cs.thread_id AS thread_id, cs.stack AS stack, "
		"cs.count AS count, cs.idle AS idle, c.trace_id AS trace_id, c.span_id AS span_id, "
		"c.labels AS labels FROM %s cs JOIN %s c ON c.id = cs.context WHERE 1",
		t->context_samples, t->contexts);
	if (q->trace_id && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND c.trace_id = ?%d", READER_TRACE_PARAM);
	if (q->span_id && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND c.span_id = ?%d", READER_SPAN_PARAM);
	/* Labels are '\n'-joined lines: a line of the filter is a whole line of them. */
	for (size_t i = 0; i < q->ncontext_labels && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n,
		                      " AND instr(char(10) || c.labels || char(10), "
		                      "char(10) || ?%d || char(10)) > 0",
		                      READER_CONTEXT_LABEL_PARAM + (int)i);
	if (n < len)
		n += (size_t)snprintf(buf + n, len - n, ")");
	return n < len ? buf : NULL;
}

/*
 * A reader of p; dirfd_owned: p's directory descriptor is the reader's,
 * closed with it.  p NULL: of an empty history in memory.
 */
static struct store_reader *reader_open(const struct store_place *p, bool dirfd_owned,
                                        struct store_error *err)
{
	struct store_reader *r = calloc(1, sizeof *r);
	if (!r) {
		if (p && dirfd_owned)
			close(p->dirfd);
		store_error_text(err, "store_reader_open: out of memory");
		return NULL;
	}
	r->dirfd = p && dirfd_owned ? p->dirfd : -1;
	r->db = p ? store_db_open_ro(p, err) : store_db_open_memory(err);
	if (!r->db || store_exec(r->db, reader_temp_schema, err) < 0)
		goto fail;
	if (sqlite3_prepare_v2(r->db, "SELECT parent, frame FROM main.stacks WHERE id = ?1", -1, &r->node,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(r->db,
	                       "SELECT f.line, f.kind, fn.s, fl.s, f.first_line, b.s FROM main.frames f "
	                       "LEFT JOIN main.strings fn ON fn.id = f.function "
	                       "LEFT JOIN main.strings fl ON fl.id = f.file "
	                       "LEFT JOIN main.strings b ON b.id = f.build_id WHERE f.id = ?1",
	                       -1, &r->frame, NULL) != SQLITE_OK) {
		store_error_set(err, r->db, "store_reader_open: prepare");
		goto fail;
	}
	return r;
fail:
	store_reader_close(r);
	return NULL;
}

struct store_reader *store_reader_open(const char *path, struct store_error *err)
{
	int dirfd = place_open_dir(path, err);
	if (dirfd < 0)
		return NULL;
	struct store_place p = {dirfd, place_base_name(path), path};
	return reader_open(&p, true, err);
}

struct store_reader *store_reader_open_writer(struct store_writer *w, struct store_error *err)
{
	struct store_place p;
	struct store_reader *r = writer_place(w, &p) ? reader_open(&p, false, err)
	                                             : store_reader_open(p.path, err);
	struct store_writer_status st;
	store_writer_status(w, &st);
	/* A file the writer cannot open either is not coming back for this query. */
	if (r || st.open || !st.failing)
		return r;
	char why[sizeof st.last_error];
	snprintf(why, sizeof why, "%s", st.last_error[0] ? st.last_error : st.file_change);
	if (!(r = reader_open(NULL, false, err)))
		return NULL;
	snprintf(r->partial, sizeof r->partial,
	         "the history file cannot be read (%s): the answer holds only the samples the daemon "
	         "keeps in memory",
	         why);
	return r;
}

const char *store_reader_partial(const struct store_reader *r)
{
	return r->partial[0] ? r->partial : NULL;
}

void store_reader_close(struct store_reader *r)
{
	if (!r)
		return;
	sqlite3_finalize(r->node);
	sqlite3_finalize(r->frame);
	sqlite3_close(r->db);
	if (r->dirfd >= 0)
		close(r->dirfd);
	free(r);
}

/* ---- the writer's memory, copied ---- */

/* Batch index and stack index in one negative id: the file's stack ids are 0 and up. */
static int64_t reader_pending_stack(size_t batch, int32_t stack)
{
	return -1 - (int64_t)(((uint64_t)batch << 32) | (uint32_t)stack);
}

int reader_pending_stack_find(const struct store_pending *p, int64_t value,
                              const struct store_batch **batch, int32_t *stack)
{
	if (!p || value >= 0)
		return -1;
	uint64_t v = (uint64_t)(-1 - value);
	size_t b = (size_t)(v >> 32);
	if (b >= p->n)
		return -1;
	*batch = p->batches[b];
	*stack = (int32_t)(uint32_t)v;
	return 0;
}

enum reader_copy_stmt {
	COPY_TARGET,
	COPY_LABELS_DEL,
	COPY_LABEL_ADD,
	COPY_LABELLED,
	COPY_SESSION,
	COPY_SAMPLE,
	COPY_THREAD,
	COPY_CONTEXT,
	COPY_CONTEXT_SAMPLE,
	COPY_COUNT
};

static const char *const reader_copy_sql[COPY_COUNT] = {
	[COPY_TARGET] = STORE_SQL_TARGET_UPSERT("temp.pending_targets"),
	[COPY_LABELS_DEL] = STORE_SQL_LABELS_DEL("temp.pending_labels"),
	[COPY_LABEL_ADD] = STORE_SQL_LABEL_ADD("temp.pending_labels"),
	[COPY_LABELLED] = "UPDATE temp.pending_targets SET labelled = 1 WHERE id = ?1",
	[COPY_SESSION] = STORE_SQL_SESSION_UPSERT("temp.pending_sessions"),
	[COPY_SAMPLE] = STORE_SQL_SAMPLE_ADD("temp.pending_samples"),
	[COPY_THREAD] = STORE_SQL_THREAD_UPSERT("temp.pending_threads"),
	/* The file's writer interns through a cache; here an upsert gives the id at once. */
	[COPY_CONTEXT] = "INSERT INTO temp.pending_contexts(trace_id, span_id, labels) VALUES (?1, ?2, ?3) "
	                 "ON CONFLICT(trace_id, span_id, labels) DO UPDATE SET labels = excluded.labels "
	                 "RETURNING id",
	[COPY_CONTEXT_SAMPLE] = STORE_SQL_CONTEXT_SAMPLE_ADD("temp.pending_context_samples"),
};

/* A batch's contexts and context rows into the TEMP tables (ids: its targets'); an SQLite code. */
static int reader_copy_contexts(sqlite3_stmt *const *st, const struct store_batch *b, size_t index,
                                const int64_t *ids, int64_t *contexts)
{
	int rc = SQLITE_OK;
	for (size_t i = 0; rc == SQLITE_OK && i < b->ncontexts; i++)
		if ((rc = insert_bind_context(st[COPY_CONTEXT], &b->contexts[i])) == SQLITE_OK)
			rc = insert_step(st[COPY_CONTEXT], &contexts[i]);
	for (size_t i = 0; rc == SQLITE_OK && i < b->ncontext_samples; i++) {
		const struct batch_context_sample *x = &b->context_samples[i];
		if ((rc = insert_bind_context_sample(st[COPY_CONTEXT_SAMPLE], ids[x->s.target],
		                                     reader_pending_stack(index, x->s.stack),
		                                     contexts[x->context], x)) == SQLITE_OK)
			rc = insert_step(st[COPY_CONTEXT_SAMPLE], NULL);
	}
	return rc;
}

/* One batch into the TEMP tables; an SQLite code. */
static int reader_copy_batch(sqlite3_stmt *const *st, const struct store_batch *b, size_t index,
                             int64_t *ids)
{
	int rc = SQLITE_OK;
	for (size_t i = 0; rc == SQLITE_OK && i < b->ntargets; i++) {
		const struct batch_target *t = &b->targets[i];
		if ((rc = insert_bind_target(st[COPY_TARGET], t)) == SQLITE_OK &&
		    (rc = insert_step(st[COPY_TARGET], &ids[i])) == SQLITE_OK &&
		    (rc = insert_labels(st[COPY_LABELS_DEL], st[COPY_LABEL_ADD], ids[i], t)) == SQLITE_OK &&
		    t->labels.n && (rc = sqlite3_bind_int64(st[COPY_LABELLED], 1, ids[i])) == SQLITE_OK)
			rc = insert_step(st[COPY_LABELLED], NULL);
	}
	for (size_t i = 0; rc == SQLITE_OK && i < b->nsessions; i++) {
		const struct batch_session *s = &b->sessions[i];
		if ((rc = insert_bind_session(st[COPY_SESSION], ids[s->target], s)) == SQLITE_OK)
			rc = insert_step(st[COPY_SESSION], NULL);
	}
	for (size_t i = 0; rc == SQLITE_OK && i < b->nsamples; i++) {
		const struct batch_sample *x = &b->samples[i];
		if ((rc = insert_bind_sample(st[COPY_SAMPLE], ids[x->target],
		                             reader_pending_stack(index, x->stack), x)) == SQLITE_OK)
			rc = insert_step(st[COPY_SAMPLE], NULL);
	}
	for (size_t i = 0; rc == SQLITE_OK && i < b->nthreads; i++) {
		const struct batch_thread *x = &b->threads[i];
		if ((rc = insert_bind_thread(st[COPY_THREAD], ids[x->target], x)) == SQLITE_OK)
			rc = insert_step(st[COPY_THREAD], NULL);
	}
	return rc;
}

/*
 * The pinned batches into the TEMP tables, in the order the writer writes
 * them, inside the pin's read transaction: the file ids of known processes
 * come from the same snapshot.  0, or -1 and *err.
 */
static int reader_copy_pending(struct store_reader *r, struct store_pending *p, struct store_error *err)
{
	if (!p->n)
		return 0;
	sqlite3_stmt *st[COPY_COUNT] = {0};
	int64_t *ids = NULL, *contexts = NULL;
	size_t ids_cap = 0, contexts_cap = 0;
	int rc = SQLITE_OK;
	for (int i = 0; rc == SQLITE_OK && i < COPY_COUNT; i++)
		rc = sqlite3_prepare_v2(r->db, reader_copy_sql[i], -1, &st[i], NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < p->n; i++) {
		const struct store_batch *b = p->batches[i];
		if (b->ntargets && array_reserve((void **)&ids, &ids_cap, b->ntargets - 1, sizeof *ids, NULL) < 0)
			rc = SQLITE_NOMEM;
		else if (b->ncontexts && array_reserve((void **)&contexts, &contexts_cap, b->ncontexts - 1,
		                                       sizeof *contexts, NULL) < 0)
			rc = SQLITE_NOMEM;
		else if ((rc = reader_copy_batch(st, b, i, ids)) == SQLITE_OK)
			rc = reader_copy_contexts(st, b, i, ids, contexts);
	}
	for (int i = 0; i < COPY_COUNT; i++)
		sqlite3_finalize(st[i]);
	free(ids);
	free(contexts);
	if (rc != SQLITE_OK) {
		store_error_set(err, r->db, "copy the writer's batches");
		return -1;
	}
	if (store_exec(r->db,
	               "UPDATE temp.pending_targets SET file_id = (SELECT t.id FROM main.targets t "
	               "WHERE t.pid = pending_targets.pid AND t.start_time = pending_targets.start_time)",
	               err) < 0)
		return -1;
	return 0;
}

static int reader_pin_begin(void *ctx)
{
	struct store_reader *r = ctx;
	/* BEGIN alone takes no snapshot: the first read does. */
	return sqlite3_exec(r->db, "BEGIN; SELECT 1 FROM main.samples LIMIT 1", NULL, NULL, NULL) ==
	                       SQLITE_OK
	               ? 0
	               : -1;
}

struct store_pending *store_reader_pin(struct store_reader *r, struct store_writer *w,
                                       struct store_error *err)
{
	struct store_pending *p = calloc(1, sizeof *p);
	if (!p) {
		store_error_text(err, "pin: out of memory");
		return NULL;
	}
	p->w = w;
	if (writer_pin(w, reader_pin_begin, r, &p->batches, &p->n) < 0) {
		store_error_set(err, r->db, "pin the writer's batches");
		goto fail;
	}
	if (reader_copy_pending(r, p, err) < 0)
		goto fail;
	return p;
fail:
	if (!sqlite3_get_autocommit(r->db))
		sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
	writer_unpin(w, p->batches, p->n);
	free(p);
	return NULL;
}

void store_reader_unpin(struct store_reader *r, struct store_pending *p)
{
	if (!p)
		return;
	/* The read transaction wrote nothing but the copy: rolled back, the copy goes with it. */
	if (!sqlite3_get_autocommit(r->db))
		sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
	writer_unpin(p->w, p->batches, p->n);
	free(p);
}

/* ---- the selection: written once, for the file and for the file with memory ---- */

int reader_check(const struct store_query *q, struct store_error *err)
{
	if (q->nlabels > STORE_MAX_LABELS || (q->nlabels && (!q->label_keys || !q->label_values))) {
		store_error_text(err, "query: labels must be at most %d key/value pairs",
		                 STORE_MAX_LABELS);
		return -1;
	}
	if (q->ncontext_labels > STORE_CONTEXT_LABELS || (q->ncontext_labels && !q->context_labels)) {
		store_error_text(err, "query: context labels must be at most %d", STORE_CONTEXT_LABELS);
		return -1;
	}
	for (size_t i = 0; i < q->ncontext_labels; i++) {
		const char *l = q->context_labels[i];
		size_t key = l ? strcspn(l, "=\n") : 0;
		if (!l || key == 0 || l[key] != '=' || strchr(l, '\n') ||
		    strlen(l) > STORE_CONTEXT_LABELS_BYTES) {
			store_error_text(err, "query: a context label must be KEY=VALUE on one line");
			return -1;
		}
	}
	return 0;
}

/* The uid's parameter: past every label's (6 + 2 * STORE_MAX_LABELS). */
#define READER_UID_PARAM "999"

size_t reader_select_targets(const struct store_query *q, const struct reader_tables *tables,
                             char *buf, size_t len, size_t n)
{
	if (q->target_id && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND target = ?3");
	if (q->pid && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND target IN (SELECT id FROM %s WHERE pid = ?4)",
		                      tables->targets);
	if (q->by_uid && n < len)
		n += (size_t)snprintf(buf + n, len - n,
		                      " AND target IN (SELECT id FROM %s WHERE uid = ?" READER_UID_PARAM ")",
		                      tables->targets);
	for (size_t i = 0; i < q->nlabels && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n,
		                      " AND target IN (SELECT target FROM %s WHERE key = ?%zu AND value = ?%zu)",
		                      tables->labels, 6 + 2 * i, 7 + 2 * i);
	/*
	 * Samples are keyed by (target, bucket_start, ...): naming the targets
	 * lets SQLite seek each one's range of buckets, where the bucket index
	 * alone costs a key lookup per row (2.3 times slower over a day).
	 */
	if (!q->target_id && !q->pid && !q->by_uid && !q->nlabels && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND target IN (SELECT id FROM %s)", tables->targets);
	return n;
}

static double reader_until(const struct store_query *q)
{
	if (q->until_unix != 0)
		return q->until_unix;
	return clock_wall_s();
}

int reader_bind(sqlite3_stmt *st, const struct store_query *q)
{
	int rc = sqlite3_bind_double(st, 1, q->from_unix);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_double(st, 2, reader_until(q));
	if (rc == SQLITE_OK && q->target_id)
		rc = sqlite3_bind_int64(st, 3, q->target_id);
	if (rc == SQLITE_OK && q->pid)
		rc = sqlite3_bind_int64(st, 4, q->pid);
	if (rc == SQLITE_OK && q->by_thread && sqlite3_bind_parameter_index(st, "?5"))
		rc = sqlite3_bind_int64(st, 5, (int64_t)q->thread_id);
	if (rc == SQLITE_OK && q->by_uid)
		rc = sqlite3_bind_int64(st, atoi(READER_UID_PARAM), (int64_t)q->uid);
	for (size_t i = 0; rc == SQLITE_OK && i < q->nlabels; i++) {
		rc = sqlite3_bind_text(st, (int)(6 + 2 * i), q->label_keys[i], -1, SQLITE_STATIC);
		if (rc == SQLITE_OK)
			rc = sqlite3_bind_text(st, (int)(7 + 2 * i), q->label_values[i], -1, SQLITE_STATIC);
	}
	/* Only a statement that reads context rows has these. */
	if (rc == SQLITE_OK && q->trace_id && sqlite3_bind_parameter_index(st, "?1000"))
		rc = sqlite3_bind_blob(st, READER_TRACE_PARAM, q->trace_id, STORE_TRACE_ID_LEN, SQLITE_STATIC);
	if (rc == SQLITE_OK && q->span_id && sqlite3_bind_parameter_index(st, "?1001"))
		rc = sqlite3_bind_blob(st, READER_SPAN_PARAM, q->span_id, STORE_SPAN_ID_LEN, SQLITE_STATIC);
	for (size_t i = 0; rc == SQLITE_OK && i < q->ncontext_labels; i++) {
		int at = READER_CONTEXT_LABEL_PARAM + (int)i;
		char name[16];
		snprintf(name, sizeof name, "?%d", at);
		if (sqlite3_bind_parameter_index(st, name))
			rc = sqlite3_bind_text(st, at, q->context_labels[i], -1, SQLITE_STATIC);
	}
	return rc;
}

/*
 * The statement of a query: head (its SELECT, FROM and first conditions),
 * then the thread's condition on thread_column when q asks for one (NULL:
 * the head has no thread), q's selection of processes, and tail.  Prepared
 * and bound.  0, or -1 and *err (what names the query).
 */
int reader_prepare(struct store_reader *r, const struct store_query *q, const char *head,
                   const char *thread_column, const char *tail, const char *what,
                   sqlite3_stmt **out, struct store_error *err)
{
	*out = NULL;
	char sql[8192];
	size_t n = (size_t)snprintf(sql, sizeof sql, "%s", head);
	if (q->by_thread && thread_column && n < sizeof sql)
		n += (size_t)snprintf(sql + n, sizeof sql - n, " AND %s = ?5", thread_column);
	n = reader_select_targets(q, reader_tables(q), sql, sizeof sql, n);
	if (n < sizeof sql)
		n += (size_t)snprintf(sql + n, sizeof sql - n, "%s", tail);
	if (n >= sizeof sql) {
		store_error_text(err, "%s: too long", what);
		return -1;
	}
	if (sqlite3_prepare_v2(r->db, sql, -1, out, NULL) != SQLITE_OK || reader_bind(*out, q) != SQLITE_OK) {
		store_error_set(err, r->db, "%s", what);
		sqlite3_finalize(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

/* ---- processes and how they were sampled ---- */

int store_query_sampling(struct store_reader *r, const struct store_query *q, uint32_t *rate_hz,
                         char *mode, size_t mode_len, struct store_error *err)
{
	*rate_hz = 0;
	if (mode_len)
		mode[0] = '\0';
	if (reader_check(q, err) < 0)
		return -1;
	/* Sessions that overlap the range; two distinct settings are enough to know they differ. */
	char head[256];
	snprintf(head, sizeof head,
	         "SELECT DISTINCT rate_hz, mode FROM %s "
	         "WHERE (detached_at IS NULL OR detached_at >= ?1) AND attached_at < ?2",
	         reader_tables(q)->sessions);
	sqlite3_stmt *st;
	if (reader_prepare(r, q, head, NULL, " LIMIT 2", "query sampling", &st, err) < 0)
		return -1;
	int64_t rate = 0;
	char first_mode[16] = "";
	int rows = 0, rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && rows < 2) {
		rate = sqlite3_column_int64(st, 0);
		const unsigned char *m = sqlite3_column_text(st, 1);
		snprintf(first_mode, sizeof first_mode, "%s", m ? (const char *)m : "");
		rows++;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		store_error_set(err, r->db, "query sampling");
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_finalize(st);
	if (rows == 1 && rate > 0 && rate <= UINT32_MAX) {
		*rate_hz = (uint32_t)rate;
		if (mode_len)
			snprintf(mode, mode_len, "%s", first_mode);
	}
	return 0;
}

/* A copy of a text column, NULL for NULL; *ok cleared when out of memory. */
static char *reader_column_dup(sqlite3_stmt *st, int col, bool *ok)
{
	const unsigned char *s = sqlite3_column_text(st, col);
	if (!s)
		return NULL;
	char *c = strdup((const char *)s);
	if (!c)
		*ok = false;
	return c;
}

/* The labels of one target into p, copied (a row's text dies with the next step). */
static int reader_process_labels(sqlite3_stmt *st, int64_t target, char **keys, char **values,
                          struct store_process *p)
{
	sqlite3_reset(st);
	if (sqlite3_bind_int64(st, 1, target) != SQLITE_OK)
		return -1;
	int rc = SQLITE_DONE;
	bool ok = true;
	p->nlabels = 0;
	while (p->nlabels < STORE_MAX_LABELS && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		keys[p->nlabels] = reader_column_dup(st, 0, &ok);
		values[p->nlabels] = reader_column_dup(st, 1, &ok);
		p->nlabels++;
		if (!ok || !keys[p->nlabels - 1] || !values[p->nlabels - 1])
			return -1;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return -1;
	p->label_keys = (const char *const *)keys;
	p->label_values = (const char *const *)values;
	return 0;
}

static void reader_process_labels_free(char **keys, char **values, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(keys[i]);
		free(values[i]);
	}
}

int store_query_processes(struct store_reader *r, const struct store_query *q,
                          int (*fn)(void *ctx, const struct store_process *p), void *ctx,
                          struct store_error *err)
{
	if (reader_check(q, err) < 0)
		return -1;
	const struct reader_tables *tables = reader_tables(q);
	char head[4096], buf[2048];
	const char *src = reader_samples(q, false, buf, sizeof buf);
	if (!src) {
		store_error_text(err, "query processes: too long");
		return -1;
	}
	snprintf(head, sizeof head,
	         "SELECT t.id, t.pid, t.uid, t.executable, t.command_line, t.python_version, "
	         "min(s.bucket_start), max(s.bucket_start + s.bucket_seconds), sum(s.count) "
	         "FROM %s s JOIN %s t ON t.id = s.target "
	         "WHERE s.bucket_start >= ?1 AND s.bucket_start < ?2",
	         src, tables->targets);
	sqlite3_stmt *st = NULL, *labels = NULL;
	int ret = -1, rc;
	bool own = sqlite3_get_autocommit(r->db);
	if (own && store_exec(r->db, "BEGIN", err) < 0)
		return -1;
	char labels_sql[128];
	snprintf(labels_sql, sizeof labels_sql, "SELECT key, value FROM %s WHERE target = ?1 ORDER BY key",
	         tables->labels);
	if (reader_prepare(r, q, head, "s.thread_id", " GROUP BY t.id ORDER BY 7, 1", "query processes",
	                   &st, err) < 0)
		goto out;
	if (sqlite3_prepare_v2(r->db, labels_sql, -1, &labels, NULL) != SQLITE_OK) {
		store_error_set(err, r->db, "query processes: labels");
		goto out;
	}
	char *keys[STORE_MAX_LABELS], *values[STORE_MAX_LABELS];
	/* One row per stored process: bounded by the targets table. */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t samples = sqlite3_column_int64(st, 8);
		struct store_process p = {
			/* A process only memory has seen has no id yet: 0. */
			.target_id = sqlite3_column_int64(st, 0) > 0 ? sqlite3_column_int64(st, 0) : 0,
			.pid = (pid_t)sqlite3_column_int64(st, 1),
			.uid = (uid_t)sqlite3_column_int64(st, 2),
			.executable = (const char *)sqlite3_column_text(st, 3),
			.command_line = (const char *)sqlite3_column_text(st, 4),
			.python_version = (const char *)sqlite3_column_text(st, 5),
			.first_unix = sqlite3_column_double(st, 6),
			.last_unix = sqlite3_column_double(st, 7),
			.samples = samples > 0 ? (uint64_t)samples : 0,
		};
		int got = reader_process_labels(labels, sqlite3_column_int64(st, 0), keys, values, &p);
		int stop = got == 0 ? fn(ctx, &p) : 0;
		reader_process_labels_free(keys, values, p.nlabels);
		if (got < 0) {
			store_error_set(err, r->db, "query processes: labels");
			goto out;
		}
		if (stop) {
			store_error_text(err, "query: stopped by its callback");
			goto out;
		}
	}
	if (rc != SQLITE_DONE) {
		store_error_set(err, r->db, "query processes");
		goto out;
	}
	ret = 0;
out:
	sqlite3_finalize(st);
	sqlite3_finalize(labels);
	if (own)
		store_exec(r->db, "COMMIT", NULL);
	return ret;
}

/* ---- a thread's name and its process's labels ---- */

int reader_thread_info(struct store_reader *r, const struct store_query *q, int64_t target,
                       uint64_t thread_id, struct store_thread *out, struct arena *a,
                       struct store_error *err)
{
	const struct reader_tables *tables = reader_tables(q);
	char sql[512];
	snprintf(sql, sizeof sql,
	         "SELECT t.pid, h.native_id, h.name, t.start_time FROM %s t LEFT JOIN %s h "
	         "ON h.target = t.id AND h.thread_id = ?2 WHERE t.id = ?1",
	         tables->targets, tables->threads);
	sqlite3_stmt *st = NULL, *labels = NULL;
	*out = (struct store_thread){.target_id = target > 0 ? target : 0, .thread_id = thread_id,
	                             .native_id = -1, .name = ""};
	int ret = -1, rc;
	if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 1, target) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 2, (int64_t)thread_id) != SQLITE_OK)
		goto fail;
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		out->pid = (pid_t)sqlite3_column_int64(st, 0);
		if (sqlite3_column_type(st, 1) != SQLITE_NULL)
			out->native_id = sqlite3_column_int64(st, 1);
		const unsigned char *name = sqlite3_column_text(st, 2);
		if (name && !(out->name = arena_strdup(a, (const char *)name)))
			goto nomem;
		int64_t start = sqlite3_column_int64(st, 3);
		out->start_time = start > 0 ? (uint64_t)start : 0;
	} else if (rc != SQLITE_DONE) {
		goto fail;
	}
	snprintf(sql, sizeof sql, "SELECT key, value FROM %s WHERE target = ?1 ORDER BY key",
	         tables->labels);
	if (sqlite3_prepare_v2(r->db, sql, -1, &labels, NULL) != SQLITE_OK ||
	    sqlite3_bind_int64(labels, 1, target) != SQLITE_OK)
		goto fail;
	const char **keys = arena_alloc(a, STORE_MAX_LABELS * sizeof *keys);
	const char **values = arena_alloc(a, STORE_MAX_LABELS * sizeof *values);
	if (!keys || !values)
		goto nomem;
	while (out->nlabels < STORE_MAX_LABELS && (rc = sqlite3_step(labels)) == SQLITE_ROW) {
		const unsigned char *k = sqlite3_column_text(labels, 0), *v = sqlite3_column_text(labels, 1);
		keys[out->nlabels] = arena_strdup(a, k ? (const char *)k : "");
		values[out->nlabels] = arena_strdup(a, v ? (const char *)v : "");
		if (!keys[out->nlabels] || !values[out->nlabels])
			goto nomem;
		out->nlabels++;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		goto fail;
	out->label_keys = keys;
	out->label_values = values;
	ret = 0;
	goto out;
nomem:
	store_error_text(err, "query: out of memory");
	goto out;
fail:
	store_error_set(err, r->db, "query: a thread's name and labels");
out:
	sqlite3_finalize(st);
	sqlite3_finalize(labels);
	return ret;
}
