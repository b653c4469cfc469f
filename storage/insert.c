/*
 * One batch's rows into the file, on the writer's connection: the
 * statements, and the caches of content -> database id through which
 * strings, frames and stacks are interned.
 *
 * A rolled-back transaction takes its new ids with it, and so does
 * retention (it deletes what no sample uses), so the caches are cleared on
 * rollback, after retention (insert_forget_ids) and with the connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"

/* SQLITE_MAX_PAGE_COUNT's default before 3.45: "no hard limit". */
#define INSERT_NO_PAGE_LIMIT 1073741823LL

enum insert_stmt {
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
	ST_THREAD_UPSERT,
	ST_CONTEXT_GET,
	ST_CONTEXT_ADD,
	ST_CONTEXT_SAMPLE_ADD,
	ST_COUNT
};
_Static_assert(ST_COUNT == INSERT_STATEMENTS, "struct inserter has a slot for each statement");

static const char *const insert_sql[ST_COUNT] = {
	[ST_STR_GET] = "SELECT id FROM strings WHERE s = ?1",
	[ST_STR_ADD] = "INSERT INTO strings(s) VALUES (?1)",
	[ST_FRAME_GET] = "SELECT id FROM frames WHERE function = ?1 AND file = ?2 AND line = ?3 "
	                 "AND kind = ?4 AND first_line = ?5 AND build_id = ?6",
	[ST_FRAME_ADD] = "INSERT INTO frames(function, file, line, kind, first_line, build_id) "
	                 "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[ST_STACK_GET] = "SELECT id FROM stacks WHERE parent = ?1 AND frame = ?2",
	[ST_STACK_ADD] = "INSERT INTO stacks(parent, frame) VALUES (?1, ?2)",
	[ST_TARGET_UPSERT] = STORE_SQL_TARGET_UPSERT("targets"),
	[ST_LABELS_DEL] = STORE_SQL_LABELS_DEL("target_labels"),
	[ST_LABEL_ADD] = STORE_SQL_LABEL_ADD("target_labels"),
	[ST_SESSION_UPSERT] = STORE_SQL_SESSION_UPSERT("sessions"),
	[ST_SAMPLE_ADD] = STORE_SQL_SAMPLE_ADD("samples"),
	[ST_THREAD_UPSERT] = STORE_SQL_THREAD_UPSERT("threads"),
	[ST_CONTEXT_GET] = "SELECT id FROM contexts WHERE trace_id = ?1 AND span_id = ?2 AND labels = ?3",
	[ST_CONTEXT_ADD] = "INSERT INTO contexts(trace_id, span_id, labels) VALUES (?1, ?2, ?3)",
	[ST_CONTEXT_SAMPLE_ADD] = STORE_SQL_CONTEXT_SAMPLE_ADD("context_samples"),
};

/* Steps a statement to its end (or its one row into *id), then resets it.  An SQLite code. */
int insert_step(sqlite3_stmt *s, int64_t *id)
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

static void insert_cache_clear(struct insert_cache *c)
{
	hash_map_clear(&c->now);
	hash_map_clear(&c->old);
}

static size_t insert_cache_memory(const struct insert_cache *c)
{
	return hash_map_memory(&c->now) + hash_map_memory(&c->old);
}

size_t insert_cache_bytes(const struct inserter *ins)
{
	return insert_cache_memory(&ins->strings) + insert_cache_memory(&ins->frames) +
	       insert_cache_memory(&ins->stacks) + insert_cache_memory(&ins->contexts);
}

/* The id cached for key, moved to the new generation when the old one had it. */
static bool insert_cache_get(struct insert_cache *c, const void *key, size_t klen, int64_t *id)
{
	if (hash_map_get(&c->now, key, klen, id))
		return true;
	/* A failed move costs the entry, never the answer: it is looked up again next time. */
	if (hash_map_get(&c->old, key, klen, id)) {
		(void)hash_map_put(&c->now, key, klen, *id);
		return true;
	}
	return false;
}

/*
 * Remember key's id; a new generation starts past a quarter of budget
 * bytes (see struct insert_cache).  0, or -1 when out of memory.
 */
static int insert_cache_put(struct insert_cache *c, size_t budget, const void *key, size_t klen,
                            int64_t id)
{
	if (hash_map_put(&c->now, key, klen, id) < 0)
		return -1;
	if (hash_map_memory(&c->now) > budget / 4) {
		hash_map_clear(&c->old);
		c->old = c->now;
		memset(&c->now, 0, sizeof c->now);
	}
	return 0;
}

/* Each cache's share of the writer's budget. */
static size_t insert_cache_share(const struct inserter *ins)
{
	return (ins->cache_budget ? ins->cache_budget : STORE_CACHE_BUDGET_DEFAULT) / 4;
}

/*
 * The id of a row by its content: cache, then SELECT, then INSERT.  A miss
 * costs the SELECT, never a second row.  An SQLite code.
 */
static int insert_interned(struct inserter *ins, struct insert_cache *cache, const void *key,
                           size_t klen, sqlite3_stmt *get, sqlite3_stmt *add, int64_t *id)
{
	if (insert_cache_get(cache, key, klen, id))
		return SQLITE_OK;
	*id = 0;
	int rc = insert_step(get, id);
	if (rc != SQLITE_OK)
		return rc;
	if (*id == 0) {
		rc = insert_step(add, NULL);
		if (rc != SQLITE_OK)
			return rc;
		*id = sqlite3_last_insert_rowid(ins->db);
	}
	return insert_cache_put(cache, insert_cache_share(ins), key, klen, *id) < 0 ? SQLITE_NOMEM
	                                                                           : SQLITE_OK;
}

/* A string's id, 0 for NULL.  An SQLite code. */
static int insert_string(struct inserter *ins, const char *s, int64_t *id)
{
	*id = 0;
	if (!s)
		return SQLITE_OK;
	size_t n = strlen(s);
	if (n > INT32_MAX)
		return SQLITE_TOOBIG;
	if (sqlite3_bind_text(ins->stmt[ST_STR_GET], 1, s, (int)n, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(ins->stmt[ST_STR_ADD], 1, s, (int)n, SQLITE_STATIC) != SQLITE_OK)
		return sqlite3_errcode(ins->db);
	return insert_interned(ins, &ins->strings, s, n, ins->stmt[ST_STR_GET], ins->stmt[ST_STR_ADD], id);
}

static int insert_frame(struct inserter *ins, const struct batch_frame *f, int64_t *id)
{
	struct {
		int64_t function, file, build_id;
		int32_t line, kind, first_line, pad;
	} key;
	memset(&key, 0, sizeof key);
	int rc = insert_string(ins, f->function, &key.function);
	if (rc == SQLITE_OK)
		rc = insert_string(ins, f->file, &key.file);
	/* No build id is string 0, as no file is "" (interned like any). */
	if (rc == SQLITE_OK && f->build_id && *f->build_id)
		rc = insert_string(ins, f->build_id, &key.build_id);
	if (rc != SQLITE_OK)
		return rc;
	key.line = f->line;
	key.kind = f->kind;
	key.first_line = f->first_line;
	for (int i = ST_FRAME_GET; i <= ST_FRAME_ADD; i++) {
		sqlite3_stmt *s = ins->stmt[i];
		if (sqlite3_bind_int64(s, 1, key.function) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 2, key.file) != SQLITE_OK ||
		    sqlite3_bind_int(s, 3, key.line) != SQLITE_OK ||
		    sqlite3_bind_int(s, 4, key.kind) != SQLITE_OK ||
		    sqlite3_bind_int(s, 5, key.first_line) != SQLITE_OK ||
		    sqlite3_bind_int64(s, 6, key.build_id) != SQLITE_OK)
			return sqlite3_errcode(ins->db);
	}
	return insert_interned(ins, &ins->frames, &key, sizeof key, ins->stmt[ST_FRAME_GET], ins->stmt[ST_FRAME_ADD],
	              id);
}

static int insert_stack(struct inserter *ins, int64_t parent, int64_t frame, int64_t *id)
{
	int64_t key[2] = {parent, frame};
	for (int i = ST_STACK_GET; i <= ST_STACK_ADD; i++) {
		if (sqlite3_bind_int64(ins->stmt[i], 1, parent) != SQLITE_OK ||
		    sqlite3_bind_int64(ins->stmt[i], 2, frame) != SQLITE_OK)
			return sqlite3_errcode(ins->db);
	}
	return insert_interned(ins, &ins->stacks, key, sizeof key, ins->stmt[ST_STACK_GET], ins->stmt[ST_STACK_ADD], id);
}

int insert_bind_context(sqlite3_stmt *s, const struct batch_context *c)
{
	/* A zero-length blob, not NULL, for none: UNIQUE treats NULLs as distinct. */
	int rc = sqlite3_bind_blob(s, 1, c->trace_id, c->has_trace ? STORE_TRACE_ID_LEN : 0, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_blob(s, 2, c->span_id, c->has_span ? STORE_SPAN_ID_LEN : 0, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(s, 3, c->labels, -1, SQLITE_STATIC);
	return rc;
}

/* A context's id: cache, then SELECT, then INSERT.  An SQLite code. */
static int insert_context(struct inserter *ins, const struct batch_context *c, int64_t *id)
{
	char key[2 + STORE_TRACE_ID_LEN + STORE_SPAN_ID_LEN + STORE_CONTEXT_LABELS_BYTES];
	size_t ll = strlen(c->labels);
	if (ll > STORE_CONTEXT_LABELS_BYTES)
		return SQLITE_TOOBIG;
	key[0] = (char)c->has_trace;
	key[1] = (char)c->has_span;
	memcpy(key + 2, c->trace_id, STORE_TRACE_ID_LEN);
	memcpy(key + 2 + STORE_TRACE_ID_LEN, c->span_id, STORE_SPAN_ID_LEN);
	memcpy(key + 2 + STORE_TRACE_ID_LEN + STORE_SPAN_ID_LEN, c->labels, ll);
	for (int i = ST_CONTEXT_GET; i <= ST_CONTEXT_ADD; i++)
		if (insert_bind_context(ins->stmt[i], c) != SQLITE_OK)
			return sqlite3_errcode(ins->db);
	return insert_interned(ins, &ins->contexts, key, 2 + STORE_TRACE_ID_LEN + STORE_SPAN_ID_LEN + ll,
	                       ins->stmt[ST_CONTEXT_GET], ins->stmt[ST_CONTEXT_ADD], id);
}

int insert_bind_context_sample(sqlite3_stmt *s, int64_t target, int64_t stack, int64_t context,
                               const struct batch_context_sample *x)
{
	int rc = insert_bind_sample(s, target, stack, &x->s);
	return rc == SQLITE_OK ? sqlite3_bind_int64(s, 8, context) : rc;
}

static int insert_bind_text(sqlite3_stmt *s, int i, const char *v)
{
	return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i);
}

int insert_bind_target(sqlite3_stmt *s, const struct batch_target *t)
{
	int rc = sqlite3_bind_int64(s, 1, t->pid);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 2, (int64_t)t->start_time);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 3, t->uid);
	if (rc == SQLITE_OK)
		rc = insert_bind_text(s, 4, t->executable);
	if (rc == SQLITE_OK)
		rc = insert_bind_text(s, 5, t->command_line);
	if (rc == SQLITE_OK)
		rc = insert_bind_text(s, 6, t->python_version);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_double(s, 7, t->seen);
	return rc;
}

int insert_bind_session(sqlite3_stmt *s, int64_t target, const struct batch_session *ss)
{
	int rc = sqlite3_bind_int64(s, 1, target);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_double(s, 2, ss->attached_at);
	if (rc == SQLITE_OK)
		rc = ss->detached_at > 0 ? sqlite3_bind_double(s, 3, ss->detached_at) : sqlite3_bind_null(s, 3);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 4, ss->rate_hz);
	if (rc == SQLITE_OK)
		rc = insert_bind_text(s, 5, ss->mode);
	return rc;
}

int insert_bind_sample(sqlite3_stmt *s, int64_t target, int64_t stack, const struct batch_sample *x)
{
	/* Thread ids keep their 64 bits as SQLite's signed integer; the reader casts back. */
	int rc = sqlite3_bind_int64(s, 1, target);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 2, x->bucket_start);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 3, x->bucket_seconds);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 4, (int64_t)x->thread_id);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 5, stack);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 6, (int64_t)x->count);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 7, (int64_t)x->idle);
	return rc;
}

int insert_bind_thread(sqlite3_stmt *s, int64_t target, const struct batch_thread *x)
{
	int rc = sqlite3_bind_int64(s, 1, target);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 2, (int64_t)x->thread_id);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_int64(s, 3, x->native_id);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(s, 4, x->name, -1, SQLITE_STATIC);
	return rc;
}

int insert_labels(sqlite3_stmt *del, sqlite3_stmt *add, int64_t target, const struct batch_target *t)
{
	/* Declared without labels (attached again without them): it keeps the ones it has. */
	if (!t->labels.n)
		return SQLITE_OK;
	int rc = sqlite3_bind_int64(del, 1, target);
	if (rc != SQLITE_OK || (rc = insert_step(del, NULL)) != SQLITE_OK)
		return rc;
	for (size_t k = 0; k < t->labels.n; k++) {
		if ((rc = sqlite3_bind_int64(add, 1, target)) != SQLITE_OK ||
		    (rc = sqlite3_bind_text(add, 2, t->labels.keys[k], -1, SQLITE_STATIC)) != SQLITE_OK ||
		    (rc = sqlite3_bind_text(add, 3, t->labels.values[k], -1, SQLITE_STATIC)) != SQLITE_OK ||
		    (rc = insert_step(add, NULL)) != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

/* Room for n batch-local ids in *ids; 0 or -1. */
static int insert_reserve_ids(int64_t **ids, size_t *cap, size_t n)
{
	return n ? array_reserve((void **)ids, cap, n - 1, sizeof **ids, NULL) : 0;
}

static int insert_targets(struct inserter *ins, const struct store_batch *b)
{
	sqlite3_stmt *up = ins->stmt[ST_TARGET_UPSERT], *del = ins->stmt[ST_LABELS_DEL],
		     *add = ins->stmt[ST_LABEL_ADD];
	for (size_t i = 0; i < b->ntargets; i++) {
		const struct batch_target *t = &b->targets[i];
		int rc;
		if (insert_bind_target(up, t) != SQLITE_OK)
			return sqlite3_errcode(ins->db);
		int64_t id = 0;
		if ((rc = insert_step(up, &id)) != SQLITE_OK)
			return rc;
		ins->target_ids[i] = id;
		if ((rc = insert_labels(del, add, id, t)) != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

/* Steps s once its binding (bind_rc) went through; an SQLite code. */
static int insert_row(sqlite3_stmt *s, int bind_rc)
{
	return bind_rc == SQLITE_OK ? insert_step(s, NULL) : bind_rc;
}

/* The body of the transaction; an SQLite code. */
static int insert_contents(struct inserter *ins, const struct store_batch *b)
{
	if (insert_reserve_ids(&ins->target_ids, &ins->target_cap, b->ntargets) < 0 ||
	    insert_reserve_ids(&ins->frame_ids, &ins->frame_cap, b->nframes) < 0 ||
	    insert_reserve_ids(&ins->stack_ids, &ins->stack_cap, b->nstacks) < 0 ||
	    insert_reserve_ids(&ins->context_ids, &ins->context_cap, b->ncontexts) < 0)
		return SQLITE_NOMEM;
	int rc = insert_targets(ins, b);
	sqlite3_stmt *session = ins->stmt[ST_SESSION_UPSERT], *sample = ins->stmt[ST_SAMPLE_ADD];
	for (size_t i = 0; rc == SQLITE_OK && i < b->nsessions; i++) {
		const struct batch_session *ss = &b->sessions[i];
		rc = insert_row(session, insert_bind_session(session, ins->target_ids[ss->target], ss));
	}
	for (size_t i = 0; rc == SQLITE_OK && i < b->nframes; i++)
		rc = insert_frame(ins, &b->frames[i], &ins->frame_ids[i]);
	/* A parent always comes earlier in the batch (store_batch_stack checks), so one pass maps all. */
	for (size_t i = 0; rc == SQLITE_OK && i < b->nstacks; i++) {
		const struct batch_stack *s = &b->stacks[i];
		rc = insert_stack(ins, s->parent < 0 ? 0 : ins->stack_ids[s->parent], ins->frame_ids[s->frame],
		                  &ins->stack_ids[i]);
	}
	for (size_t i = 0; rc == SQLITE_OK && i < b->nsamples; i++) {
		const struct batch_sample *x = &b->samples[i];
		rc = insert_row(sample, insert_bind_sample(sample, ins->target_ids[x->target],
		                                           ins->stack_ids[x->stack], x));
	}
	sqlite3_stmt *thread = ins->stmt[ST_THREAD_UPSERT];
	for (size_t i = 0; rc == SQLITE_OK && i < b->nthreads; i++) {
		const struct batch_thread *x = &b->threads[i];
		rc = insert_row(thread, insert_bind_thread(thread, ins->target_ids[x->target], x));
	}
	for (size_t i = 0; rc == SQLITE_OK && i < b->ncontexts; i++)
		rc = insert_context(ins, &b->contexts[i], &ins->context_ids[i]);
	sqlite3_stmt *cs = ins->stmt[ST_CONTEXT_SAMPLE_ADD];
	for (size_t i = 0; rc == SQLITE_OK && i < b->ncontext_samples; i++) {
		const struct batch_context_sample *x = &b->context_samples[i];
		rc = insert_row(cs, insert_bind_context_sample(cs, ins->target_ids[x->s.target],
		                                               ins->stack_ids[x->s.stack],
		                                               ins->context_ids[x->context], x));
	}
	return rc;
}

/* Ids that may no longer exist (a rollback, retention, another connection): forget them all. */
void insert_forget_ids(struct inserter *ins)
{
	insert_cache_clear(&ins->strings);
	insert_cache_clear(&ins->frames);
	insert_cache_clear(&ins->stacks);
	insert_cache_clear(&ins->contexts);
}

/* Applies a changed hard limit on the file (PRAGMA max_page_count, per connection). */
int insert_file_limit(struct inserter *ins, uint64_t max_file_bytes,
                                   struct store_error *err)
{
	int64_t page_size;
	if (store_query_int(ins->db, "PRAGMA page_size", &page_size, err) < 0 || page_size <= 0)
		return -1;
	long long pages = INSERT_NO_PAGE_LIMIT;
	if (max_file_bytes && max_file_bytes / (uint64_t)page_size < (uint64_t)INSERT_NO_PAGE_LIMIT)
		pages = (long long)(max_file_bytes / (uint64_t)page_size);
	if (pages < 1)
		pages = 1;
	char sql[64];
	snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", pages);
	int64_t got;
	return store_query_int(ins->db, sql, &got, err);
}

int insert_open(struct inserter *ins, const struct store_place *p, const struct store_ids *last,
                struct store_ids *ids, uint64_t max_file_bytes, struct store_error *err)
{
	memset(ins->stmt, 0, sizeof ins->stmt);
	ins->db = store_db_open_rw(p, last, ids, err);
	if (!ins->db)
		return -1;
	for (int i = 0; i < ST_COUNT; i++) {
		if (sqlite3_prepare_v3(ins->db, insert_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &ins->stmt[i],
		                       NULL) != SQLITE_OK) {
			store_error_set(err, ins->db, "cannot prepare on %.120s: %.40s", p->path, insert_sql[i]);
			insert_close(ins);
			return -1;
		}
	}
	if (max_file_bytes && insert_file_limit(ins, max_file_bytes, err) < 0) {
		insert_close(ins);
		return -1;
	}
	return 0;
}

void insert_close(struct inserter *ins)
{
	for (int i = 0; i < ST_COUNT; i++) {
		sqlite3_finalize(ins->stmt[i]);
		ins->stmt[i] = NULL;
	}
	if (ins->db && sqlite3_close(ins->db) != SQLITE_OK)
		sqlite3_close_v2(ins->db);
	ins->db = NULL;
	insert_forget_ids(ins);
}

void insert_free(struct inserter *ins)
{
	insert_close(ins);
	free(ins->frame_ids);
	free(ins->stack_ids);
	free(ins->target_ids);
	free(ins->context_ids);
}

/* Ends a failed transaction: its new ids are gone with it. */
static void insert_rollback(struct inserter *ins)
{
	/* A failed COMMIT may leave the transaction open; ROLLBACK ends it either way. */
	if (!sqlite3_get_autocommit(ins->db))
		sqlite3_exec(ins->db, "ROLLBACK", NULL, NULL, NULL);
	insert_forget_ids(ins);
}

int insert_batch(struct inserter *ins, const struct store_batch *b, struct store_error *err)
{
	int rc = sqlite3_exec(ins->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		store_error_set(err, ins->db, "begin");
		return rc;
	}
	rc = insert_contents(ins, b);
	if (rc == SQLITE_OK)
		return SQLITE_OK;
	if (rc == SQLITE_NOMEM)
		store_error_text(err, "write batch: out of memory");
	else
		store_error_set(err, ins->db, "write batch");
	insert_rollback(ins);
	return rc;
}

int insert_commit(struct inserter *ins, struct store_error *err)
{
	int rc = sqlite3_exec(ins->db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		store_error_set(err, ins->db, "commit");
		insert_rollback(ins);
	}
	return rc;
}
