/*
 * Queries over the history on a read-only connection of the caller's thread.
 *
 * A query sums counts per stack id in SQL, then spells each stack out from
 * the prefix tree in memory: every stack node and every frame it needs is
 * read once (by primary key) into a per-query cache, so a result of many
 * stacks sharing prefixes costs one lookup per distinct node, not one per
 * frame of every row.  Walks up the tree stop at STORE_MAX_DEPTH, so a
 * corrupt database with a cycle in stacks gives an error, not a hang.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage.h"

struct store_reader {
	sqlite3 *db;
	sqlite3_stmt *node; /* a stack's parent and frame */
	sqlite3_stmt *frame; /* a frame's strings */
};

struct store_reader *store_reader_open(const char *path, struct store_error *err)
{
	struct store_reader *r = calloc(1, sizeof *r);
	if (!r) {
		store_error_text(err, "store_reader_open: out of memory");
		return NULL;
	}
	r->db = store_db_open_ro(path, err);
	if (!r->db)
		goto fail;
	if (sqlite3_prepare_v2(r->db, "SELECT parent, frame FROM stacks WHERE id = ?1", -1, &r->node,
	                       NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(r->db,
	                       "SELECT f.line, f.kind, fn.s, fl.s FROM frames f "
	                       "LEFT JOIN strings fn ON fn.id = f.function "
	                       "LEFT JOIN strings fl ON fl.id = f.file WHERE f.id = ?1",
	                       -1, &r->frame, NULL) != SQLITE_OK) {
		store_error_set(err, r->db, "store_reader_open: prepare");
		goto fail;
	}
	return r;
fail:
	store_reader_close(r);
	return NULL;
}

void store_reader_close(struct store_reader *r)
{
	if (!r)
		return;
	sqlite3_finalize(r->node);
	sqlite3_finalize(r->frame);
	sqlite3_close(r->db);
	free(r);
}

/* ---- one query's state ---- */

struct query_row {
	int64_t stack; /* a database id, or with batch an index into its stacks */
	const struct store_batch *batch;
	uint64_t count;
};

struct store_pending {
	struct store_writer *w;
	struct store_batch **batches;
	size_t n;
};

struct query_node {
	int64_t parent;
	size_t frame; /* index into frames */
};

struct query {
	struct store_reader *r;
	struct query_row *rows;
	size_t nrows, rows_cap;
	struct hash_map node_ids, frame_ids; /* database id -> index below */
	struct hash_map pending_frames;      /* (batch, frame index) -> index below */
	struct hash_map frame_texts;         /* a pending frame's content -> index below */
	struct query_node *nodes;
	size_t nnodes, nodes_cap;
	struct store_frame *frames;
	size_t nframes, frames_cap;
	size_t *path;         /* frame indexes of one stack, leaf first */
	struct store_frame *out; /* the same, root first, for the callback */
};

static void query_free(struct query *qs)
{
	for (size_t i = 0; i < qs->nframes; i++) {
		free((char *)qs->frames[i].function);
		free((char *)qs->frames[i].file);
	}
	free(qs->frames);
	free(qs->nodes);
	free(qs->rows);
	free(qs->path);
	free(qs->out);
	hash_map_clear(&qs->node_ids);
	hash_map_clear(&qs->frame_ids);
	hash_map_clear(&qs->pending_frames);
	hash_map_clear(&qs->frame_texts);
}

/* A copy of a text column, NULL for NULL; *ok cleared when out of memory. */
static char *column_dup(sqlite3_stmt *st, int col, bool *ok)
{
	const unsigned char *s = sqlite3_column_text(st, col);
	if (!s)
		return NULL;
	char *c = strdup((const char *)s);
	if (!c)
		*ok = false;
	return c;
}

/* The index of frame id in qs->frames, reading it on first use.  0, or -1 and *err. */
static int query_frame(struct query *qs, int64_t id, size_t *index, struct store_error *err)
{
	int64_t v;
	if (hash_map_get(&qs->frame_ids, &id, sizeof id, &v)) {
		*index = (size_t)v;
		return 0;
	}
	sqlite3_stmt *st = qs->r->frame;
	sqlite3_bind_int64(st, 1, id);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		if (rc == SQLITE_DONE)
			store_error_text(err, "frame %lld is missing: the database is corrupt",
			                 (long long)id);
		else
			store_error_set(err, qs->r->db, "read frame %lld", (long long)id);
		sqlite3_reset(st);
		return -1;
	}
	if (qs->nframes >= UINT32_MAX ||
	    array_reserve((void **)&qs->frames, &qs->frames_cap, qs->nframes, sizeof *qs->frames, NULL) < 0)
		goto nomem;
	bool ok = true;
	struct store_frame *f = &qs->frames[qs->nframes];
	f->line = sqlite3_column_int(st, 0);
	f->kind = sqlite3_column_int(st, 1);
	/* Frames are interned by content, so a distinct database id is a distinct frame. */
	f->id = (uint32_t)qs->nframes;
	f->function = column_dup(st, 2, &ok);
	f->file = column_dup(st, 3, &ok);
	if (!ok) {
		free((char *)f->function);
		free((char *)f->file);
		goto nomem;
	}
	sqlite3_reset(st);
	if (hash_map_put(&qs->frame_ids, &id, sizeof id, (int64_t)qs->nframes) < 0) {
		/* Counted so query_free frees its strings. */
		qs->nframes++;
		store_error_text(err, "query: out of memory");
		return -1;
	}
	*index = qs->nframes++;
	return 0;
nomem:
	sqlite3_reset(st);
	store_error_text(err, "query: out of memory");
	return -1;
}

/* The node of stack id, reading it (and its frame) on first use.  0, or -1 and *err. */
static int query_node(struct query *qs, int64_t id, const struct query_node **node,
                      struct store_error *err)
{
	int64_t v;
	if (hash_map_get(&qs->node_ids, &id, sizeof id, &v)) {
		*node = &qs->nodes[v];
		return 0;
	}
	sqlite3_stmt *st = qs->r->node;
	sqlite3_bind_int64(st, 1, id);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		if (rc == SQLITE_DONE)
			store_error_text(err, "stack %lld is missing: the database is corrupt",
			                 (long long)id);
		else
			store_error_set(err, qs->r->db, "read stack %lld", (long long)id);
		sqlite3_reset(st);
		return -1;
	}
	int64_t parent = sqlite3_column_int64(st, 0), frame = sqlite3_column_int64(st, 1);
	sqlite3_reset(st);
	size_t fi;
	if (query_frame(qs, frame, &fi, err) < 0)
		return -1;
	if (array_reserve((void **)&qs->nodes, &qs->nodes_cap, qs->nnodes, sizeof *qs->nodes, NULL) < 0 ||
	    hash_map_put(&qs->node_ids, &id, sizeof id, (int64_t)qs->nnodes) < 0) {
		store_error_text(err, "query: out of memory");
		return -1;
	}
	qs->nodes[qs->nnodes] = (struct query_node){.parent = parent, .frame = fi};
	*node = &qs->nodes[qs->nnodes++];
	return 0;
}

/* Spells out stack id root first into qs->out; its depth, or -1 and *err. */
static int64_t query_spell(struct query *qs, int64_t id, struct store_error *err)
{
	size_t depth = 0;
	int64_t at = id;
	while (at != 0) {
		if (depth >= STORE_MAX_DEPTH) {
			store_error_text(err,
			                 "stack %lld is deeper than %d frames: the stacks table has a cycle "
			                 "or is corrupt",
			                 (long long)id, STORE_MAX_DEPTH);
			return -1;
		}
		const struct query_node *n;
		if (query_node(qs, at, &n, err) < 0)
			return -1;
		qs->path[depth++] = n->frame;
		at = n->parent;
	}
	for (size_t i = 0; i < depth; i++)
		qs->out[i] = qs->frames[qs->path[depth - 1 - i]];
	return (int64_t)depth;
}

/* The uid's parameter: past every label's (6 + 2 * STORE_MAX_LABELS). */
#define QUERY_UID_PARAM "999"

/* ---- samples still in the writer's memory ---- */

/* The index of a pending batch's frame in qs->frames, by content.  0, or -1 (out of memory). */
static int pending_frame(struct query *qs, const struct store_batch *b, int32_t frame, size_t *index)
{
	struct {
		const struct store_batch *b;
		int64_t frame; /* 64 bits: no padding in a key that is hashed as bytes */
	} key = {b, frame};
	int64_t v;
	if (hash_map_get(&qs->pending_frames, &key, sizeof key, &v)) {
		*index = (size_t)v;
		return 0;
	}
	const struct batch_frame *f = &b->frames[frame];
	const char *fn = f->function ? f->function : "", *file = f->file ? f->file : "";
	size_t lf = strlen(fn), ll = strlen(file), len = 2 * sizeof(int32_t) + lf + ll + 2;
	char *text = malloc(len);
	if (!text)
		return -1;
	/* Equal frames of different batches are one frame of the answer. */
	int32_t head[2] = {f->kind, f->line};
	memcpy(text, head, sizeof head);
	memcpy(text + sizeof head, fn, lf + 1);
	memcpy(text + sizeof head + lf + 1, file, ll + 1);
	if (hash_map_get(&qs->frame_texts, text, len, &v)) {
		free(text);
		*index = (size_t)v;
		return hash_map_put(&qs->pending_frames, &key, sizeof key, v);
	}
	if (qs->nframes >= UINT32_MAX ||
	    array_reserve((void **)&qs->frames, &qs->frames_cap, qs->nframes, sizeof *qs->frames, NULL) < 0) {
		free(text);
		return -1;
	}
	struct store_frame *out = &qs->frames[qs->nframes];
	out->function = f->function ? strdup(f->function) : NULL;
	out->file = f->file ? strdup(f->file) : NULL;
	out->line = f->line;
	out->kind = f->kind;
	out->id = (uint32_t)qs->nframes;
	int rc = (f->function && !out->function) || (f->file && !out->file) ? -1 : 0;
	/* Counted either way, so query_free frees what was copied. */
	*index = qs->nframes++;
	if (rc == 0)
		rc = hash_map_put(&qs->frame_texts, text, len, (int64_t)*index);
	if (rc == 0)
		rc = hash_map_put(&qs->pending_frames, &key, sizeof key, (int64_t)*index);
	free(text);
	return rc;
}

/* Spells out a pending batch's stack root first into qs->out; its depth, or -1 and *err. */
static int64_t pending_spell(struct query *qs, const struct store_batch *b, int32_t stack,
                             struct store_error *err)
{
	size_t depth = 0;
	/* A batch's parents come before their children (checked as it was built): no cycle. */
	for (int32_t at = stack; at >= 0 && (size_t)at < b->nstacks; at = b->stacks[at].parent) {
		if (depth >= STORE_MAX_DEPTH) {
			store_error_text(err, "a waiting stack is deeper than %d frames", STORE_MAX_DEPTH);
			return -1;
		}
		if (pending_frame(qs, b, b->stacks[at].frame, &qs->path[depth]) < 0) {
			store_error_text(err, "query: out of memory");
			return -1;
		}
		depth++;
	}
	for (size_t i = 0; i < depth; i++)
		qs->out[i] = qs->frames[qs->path[depth - 1 - i]];
	return (int64_t)depth;
}

/*
 * One integer of a lookup: *out gets the first row's first column, or 0
 * when there is no row.  0, or -1 and *err if the file could not be read.
 */
static int lookup(sqlite3 *db, sqlite3_stmt *st, int64_t *out, struct store_error *err)
{
	int rc = sqlite3_step(st);
	*out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		store_error_set(err, db, "query: look up a waiting process");
	sqlite3_finalize(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : -1;
}

/* The id the file gave a process, 0 if it has none yet.  0, or -1 and *err. */
static int stored_target_id(sqlite3 *db, const struct batch_target *t, int64_t *id,
                            struct store_error *err)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT id FROM targets WHERE pid = ?1 AND start_time = ?2", -1,
	                       &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 1, t->pid) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 2, (int64_t)t->start_time) != SQLITE_OK) {
		store_error_set(err, db, "query: look up a waiting process");
		sqlite3_finalize(st);
		return -1;
	}
	return lookup(db, st, id, err);
}

/* Whether the file holds this label for the process with this id (*found 1 or 0).  0, or -1 and *err. */
static int stored_label(sqlite3 *db, int64_t id, const char *key, const char *value,
                        int64_t *found, struct store_error *err)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT 1 FROM target_labels WHERE target = ?1 AND key = ?2 AND value = ?3",
	                       -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 1, id) != SQLITE_OK ||
	    sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_bind_text(st, 3, value, -1, SQLITE_STATIC) != SQLITE_OK) {
		store_error_set(err, db, "query: look up a waiting process");
		sqlite3_finalize(st);
		return -1;
	}
	return lookup(db, st, found, err);
}

/*
 * Whether a pending batch's target is one q selects: 1 or 0, or -1 and
 * *err.  Its id, and its labels when the batch declares none (the file keeps
 * them then), come from the file: a process the file has not seen yet has no
 * id anyone could ask for.
 */
static int pending_target_selected(struct query *qs, const struct store_query *q,
                                   const struct batch_target *t, struct store_error *err)
{
	if ((q->pid && t->pid != q->pid) || (q->by_uid && t->uid != (int64_t)q->uid))
		return 0;
	sqlite3 *db = qs->r->db;
	int64_t id = 0;
	if ((q->target_id || (q->nlabels && !t->nlabels)) && stored_target_id(db, t, &id, err) < 0)
		return -1;
	if (q->target_id && id != q->target_id)
		return 0;
	for (size_t i = 0; i < q->nlabels; i++) {
		int64_t found = 0;
		for (size_t k = 0; k < t->nlabels && !found; k++)
			found = strcmp(t->label_keys[k], q->label_keys[i]) == 0 &&
			        strcmp(t->label_values[k], q->label_values[i]) == 0;
		if (!t->nlabels && id &&
		    stored_label(db, id, q->label_keys[i], q->label_values[i], &found, err) < 0)
			return -1;
		if (!found)
			return 0;
	}
	return 1;
}

/* The pending samples q selects, summed per (batch, stack) into qs->rows.  0, or -1 and *err. */
static int pending_collect(struct query *qs, const struct store_query *q, double until,
                           uint64_t *total, struct store_error *err)
{
	const struct store_pending *p = q->pending;
	struct hash_map index = {0};
	for (size_t i = 0; i < p->n; i++) {
		const struct store_batch *b = p->batches[i];
		/* Per target of the batch: 1 selected, 2 not, 0 not decided yet. */
		unsigned char *selected = calloc(b->ntargets ? b->ntargets : 1, 1);
		if (!selected)
			goto nomem;
		for (size_t k = 0; k < b->nsamples; k++) {
			const struct batch_sample *sm = &b->samples[k];
			if ((double)sm->bucket_start < q->from_unix || (double)sm->bucket_start >= until ||
			    (q->by_thread && sm->thread_id != q->thread_id))
				continue;
			if (!selected[sm->target]) {
				int sel = pending_target_selected(qs, q, &b->targets[sm->target], err);
				if (sel < 0) {
					free(selected);
					hash_map_clear(&index);
					return -1;
				}
				selected[sm->target] = sel ? 1 : 2;
			}
			if (selected[sm->target] != 1)
				continue;
			struct {
				const struct store_batch *b;
				int64_t stack;
			} key = {b, sm->stack};
			int64_t at;
			*total += sm->count;
			if (hash_map_get(&index, &key, sizeof key, &at)) {
				qs->rows[at].count += sm->count;
				continue;
			}
			if (array_reserve((void **)&qs->rows, &qs->rows_cap, qs->nrows, sizeof *qs->rows, NULL) < 0 ||
			    hash_map_put(&index, &key, sizeof key, (int64_t)qs->nrows) < 0) {
				free(selected);
				goto nomem;
			}
			qs->rows[qs->nrows++] =
				(struct query_row){.stack = sm->stack, .batch = b, .count = sm->count};
		}
		free(selected);
	}
	hash_map_clear(&index);
	return 0;
nomem:
	hash_map_clear(&index);
	store_error_text(err, "query: out of memory");
	return -1;
}

static int pin_begin(void *ctx)
{
	struct store_reader *r = ctx;
	/* BEGIN alone takes no snapshot: the first read does. */
	return sqlite3_exec(r->db, "BEGIN; SELECT 1 FROM samples LIMIT 1", NULL, NULL, NULL) == SQLITE_OK
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
	if (writer_pin(w, pin_begin, r, &p->batches, &p->n) < 0) {
		store_error_set(err, r->db, "pin the writer's batches");
		if (!sqlite3_get_autocommit(r->db))
			sqlite3_exec(r->db, "ROLLBACK", NULL, NULL, NULL);
		writer_unpin(w, p->batches, p->n);
		free(p);
		return NULL;
	}
	return p;
}

void store_reader_unpin(struct store_reader *r, struct store_pending *p)
{
	if (!p)
		return;
	if (!sqlite3_get_autocommit(r->db))
		sqlite3_exec(r->db, "COMMIT", NULL, NULL, NULL);
	writer_unpin(p->w, p->batches, p->n);
	free(p);
}

/* A query the SQL below can be built for.  0, or -1 and *err. */
static int query_check(const struct store_query *q, struct store_error *err)
{
	if (q->nlabels > STORE_MAX_LABELS || (q->nlabels && (!q->label_keys || !q->label_values))) {
		store_error_text(err, "query: labels must be at most %d key/value pairs",
		                 STORE_MAX_LABELS);
		return -1;
	}
	return 0;
}

/*
 * The conditions on a table's target column that select q's processes, into
 * buf from n on (its ? numbers fixed by position, bound by query_bind_targets).
 * The new length; len or more if it did not fit.
 */
static size_t query_sql_targets(const struct store_query *q, char *buf, size_t len, size_t n)
{
	if (q->target_id && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND target = ?3");
	if (q->pid && n < len)
		n += (size_t)snprintf(buf + n, len - n,
		                      " AND target IN (SELECT id FROM targets WHERE pid = ?4)");
	if (q->by_uid && n < len)
		n += (size_t)snprintf(buf + n, len - n,
		                      " AND target IN (SELECT id FROM targets WHERE uid = ?" QUERY_UID_PARAM ")");
	for (size_t i = 0; i < q->nlabels && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n,
		                      " AND target IN (SELECT target FROM target_labels "
		                      "WHERE key = ?%zu AND value = ?%zu)",
		                      6 + 2 * i, 7 + 2 * i);
	/*
	 * Samples are keyed by (target, bucket_start, ...): naming the targets
	 * lets SQLite seek each one's range of buckets, where the bucket index
	 * alone costs a key lookup per row (2.3 times slower over a day).
	 */
	if (!q->target_id && !q->pid && !q->by_uid && !q->nlabels && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND target IN (SELECT id FROM targets)");
	return n;
}

/* The SELECT for q into buf (its ? numbers fixed by position).  0, or -1 and *err. */
static int query_sql(const struct store_query *q, char *buf, size_t len, struct store_error *err)
{
	size_t n = (size_t)snprintf(buf, len,
	                            "SELECT stack, count FROM samples "
	                            "WHERE bucket_start >= ?1 AND bucket_start < ?2");
	if (q->by_thread && n < len)
		n += (size_t)snprintf(buf + n, len - n, " AND thread_id = ?5");
	n = query_sql_targets(q, buf, len, n);
	if (n >= len) {
		store_error_text(err, "query: too long");
		return -1;
	}
	return 0;
}

/* Binds q's parameters (?1 and ?2 are from and until); an SQLite result code. */
static int query_bind(sqlite3_stmt *st, const struct store_query *q, double until)
{
	int rc = sqlite3_bind_double(st, 1, q->from_unix);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_double(st, 2, until);
	if (rc == SQLITE_OK && q->target_id)
		rc = sqlite3_bind_int64(st, 3, q->target_id);
	if (rc == SQLITE_OK && q->pid)
		rc = sqlite3_bind_int64(st, 4, q->pid);
	if (rc == SQLITE_OK && q->by_thread && sqlite3_bind_parameter_index(st, "?5"))
		rc = sqlite3_bind_int64(st, 5, (int64_t)q->thread_id);
	if (rc == SQLITE_OK && q->by_uid)
		rc = sqlite3_bind_int64(st, atoi(QUERY_UID_PARAM), (int64_t)q->uid);
	for (size_t i = 0; rc == SQLITE_OK && i < q->nlabels; i++) {
		rc = sqlite3_bind_text(st, (int)(6 + 2 * i), q->label_keys[i], -1, SQLITE_STATIC);
		if (rc == SQLITE_OK)
			rc = sqlite3_bind_text(st, (int)(7 + 2 * i), q->label_values[i], -1, SQLITE_STATIC);
	}
	return rc;
}

static double query_until(const struct store_query *q)
{
	if (q->until_unix != 0)
		return q->until_unix;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sums per stack into qs->rows and *total.  0, or -1 and *err. */
static int query_collect(struct query *qs, const struct store_query *q, uint64_t *total,
                         struct store_error *err)
{
	sqlite3 *db = qs->r->db;
	char sql[8192];
	if (query_sql(q, sql, sizeof sql, err) < 0)
		return -1;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		store_error_set(err, db, "query: prepare");
		return -1;
	}
	if (query_bind(st, q, query_until(q)) != SQLITE_OK) {
		store_error_set(err, db, "query: bind");
		sqlite3_finalize(st);
		return -1;
	}
	int rc;
	uint64_t sum = 0;
	/*
	 * Summed per stack here, not by GROUP BY: SQLite would sort every row
	 * into a temporary b-tree first, which costs twice the scan itself.
	 * The sample rows are bounded by the table, the distinct stacks by the
	 * stacks table.
	 */
	struct hash_map index = {0}; /* stack id -> row */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t stack = sqlite3_column_int64(st, 0), count = sqlite3_column_int64(st, 1);
		uint64_t c = count > 0 ? (uint64_t)count : 0;
		int64_t at;
		sum += c;
		if (hash_map_get(&index, &stack, sizeof stack, &at)) {
			qs->rows[at].count += c;
			continue;
		}
		if (array_reserve((void **)&qs->rows, &qs->rows_cap, qs->nrows, sizeof *qs->rows, NULL) < 0 ||
		    hash_map_put(&index, &stack, sizeof stack, (int64_t)qs->nrows) < 0) {
			store_error_text(err, "query: out of memory");
			hash_map_clear(&index);
			sqlite3_finalize(st);
			return -1;
		}
		qs->rows[qs->nrows++] = (struct query_row){.stack = stack, .count = c};
	}
	hash_map_clear(&index);
	if (rc != SQLITE_DONE) {
		store_error_set(err, db, "query");
		sqlite3_finalize(st);
		return -1;
	}
	sqlite3_finalize(st);
	*total = sum;
	return 0;
}

int store_query_stacks(struct store_reader *r, const struct store_query *q,
                       int (*fn)(void *ctx, const struct store_row *row), void *ctx,
                       uint64_t *total, struct store_error *err)
{
	if (total)
		*total = 0;
	if (query_check(q, err) < 0)
		return -1;
	struct query qs = {.r = r};
	uint64_t sum = 0;
	int ret = -1;
	qs.path = calloc(STORE_MAX_DEPTH, sizeof *qs.path);
	qs.out = calloc(STORE_MAX_DEPTH, sizeof *qs.out);
	if (!qs.path || !qs.out) {
		store_error_text(err, "query: out of memory");
		goto out;
	}
	/*
	 * A read transaction around both phases: stacks are read from the
	 * snapshot that was summed.  A pinned reader is in one already.
	 */
	bool own = sqlite3_get_autocommit(r->db);
	if (own && store_exec(r->db, "BEGIN", err) < 0)
		goto out;
	if (query_collect(&qs, q, &sum, err) < 0 ||
	    (q->pending && pending_collect(&qs, q, query_until(q), &sum, err) < 0))
		goto end;
	if (total)
		*total = sum;
	for (size_t i = 0; i < qs.nrows; i++) {
		int64_t depth = qs.rows[i].batch ? pending_spell(&qs, qs.rows[i].batch, (int32_t)qs.rows[i].stack, err)
		                                 : query_spell(&qs, qs.rows[i].stack, err);
		if (depth < 0)
			goto end;
		struct store_row row = {.frames = qs.out, .depth = (uint32_t)depth,
		                        .count = qs.rows[i].count, .query_total = sum};
		if (fn && fn(ctx, &row) != 0) {
			store_error_text(err, "query: stopped by its callback");
			goto end;
		}
	}
	ret = 0;
end:
	if (own)
		store_exec(r->db, "COMMIT", NULL);
out:
	query_free(&qs);
	return ret;
}

int store_query_sampling(struct store_reader *r, const struct store_query *q, uint32_t *rate_hz,
                         char *mode, size_t mode_len, struct store_error *err)
{
	*rate_hz = 0;
	if (mode_len)
		mode[0] = '\0';
	if (query_check(q, err) < 0)
		return -1;
	/* Sessions that overlap the range; two distinct settings are enough to know they differ. */
	char sql[8192];
	size_t n = (size_t)snprintf(sql, sizeof sql,
	                            "SELECT DISTINCT rate_hz, mode FROM sessions "
	                            "WHERE (detached_at IS NULL OR detached_at >= ?1) AND attached_at < ?2");
	n = query_sql_targets(q, sql, sizeof sql, n);
	if (n + sizeof " LIMIT 2" > sizeof sql) {
		store_error_text(err, "query: too long");
		return -1;
	}
	strcat(sql, " LIMIT 2");
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK ||
	    query_bind(st, q, query_until(q)) != SQLITE_OK) {
		store_error_set(err, r->db, "query sampling");
		sqlite3_finalize(st);
		return -1;
	}
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

/* The labels of one target into p, copied (a row's text dies with the next step). */
static int process_labels(sqlite3_stmt *st, int64_t target, char **keys, char **values,
                          struct store_process *p)
{
	sqlite3_reset(st);
	if (sqlite3_bind_int64(st, 1, target) != SQLITE_OK)
		return -1;
	int rc = SQLITE_DONE;
	bool ok = true;
	p->nlabels = 0;
	while (p->nlabels < STORE_MAX_LABELS && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		keys[p->nlabels] = column_dup(st, 0, &ok);
		values[p->nlabels] = column_dup(st, 1, &ok);
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

static void process_labels_free(char **keys, char **values, size_t n)
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
	if (query_check(q, err) < 0)
		return -1;
	char sql[8192];
	size_t n = (size_t)snprintf(sql, sizeof sql,
	                            "SELECT t.id, t.pid, t.uid, t.executable, t.command_line, "
	                            "t.python_version, min(s.bucket_start), "
	                            "max(s.bucket_start + s.bucket_seconds), sum(s.count) "
	                            "FROM samples s JOIN targets t ON t.id = s.target "
	                            "WHERE s.bucket_start >= ?1 AND s.bucket_start < ?2");
	if (q->by_thread && n < sizeof sql)
		n += (size_t)snprintf(sql + n, sizeof sql - n, " AND s.thread_id = ?5");
	n = query_sql_targets(q, sql, sizeof sql, n);
	if (n < sizeof sql)
		n += (size_t)snprintf(sql + n, sizeof sql - n, " GROUP BY t.id ORDER BY 7, 1");
	if (n >= sizeof sql) {
		store_error_text(err, "query: too long");
		return -1;
	}
	sqlite3_stmt *st = NULL, *labels = NULL;
	int ret = -1, rc;
	bool own = sqlite3_get_autocommit(r->db);
	if (own && store_exec(r->db, "BEGIN", err) < 0)
		return -1;
	if (sqlite3_prepare_v2(r->db, sql, -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(r->db, "SELECT key, value FROM target_labels WHERE target = ?1 ORDER BY key",
	                       -1, &labels, NULL) != SQLITE_OK ||
	    query_bind(st, q, query_until(q)) != SQLITE_OK) {
		store_error_set(err, r->db, "query processes");
		goto out;
	}
	char *keys[STORE_MAX_LABELS], *values[STORE_MAX_LABELS];
	/* One row per stored process: bounded by the targets table. */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t samples = sqlite3_column_int64(st, 8);
		struct store_process p = {
			.target_id = sqlite3_column_int64(st, 0),
			.pid = (pid_t)sqlite3_column_int64(st, 1),
			.uid = (uid_t)sqlite3_column_int64(st, 2),
			.executable = (const char *)sqlite3_column_text(st, 3),
			.command_line = (const char *)sqlite3_column_text(st, 4),
			.python_version = (const char *)sqlite3_column_text(st, 5),
			.first_unix = sqlite3_column_double(st, 6),
			.last_unix = sqlite3_column_double(st, 7),
			.samples = samples > 0 ? (uint64_t)samples : 0,
		};
		int got = process_labels(labels, p.target_id, keys, values, &p);
		int stop = got == 0 ? fn(ctx, &p) : 0;
		process_labels_free(keys, values, p.nlabels);
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
