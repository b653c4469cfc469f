/*
 * store_query_stacks: counts summed per stack, each stack then spelled out
 * root first.
 *
 * A stack of the file is spelled from the prefix tree: every stack node and
 * every frame it needs is read once (by primary key) into a per-query
 * cache, so a result of many stacks sharing prefixes costs one lookup per
 * distinct node, not one per frame of every row.  Walks up the tree stop at
 * STORE_MAX_DEPTH, so a corrupt database with a cycle in stacks gives an
 * error, not a hang.  A stack still in the writer's memory (a negative id,
 * see reader.c) is spelled from its batch.  A frame is one frame of the
 * answer by its content wherever it comes from, and with samples from
 * memory, stacks are merged by their frames: a stack counted both in the
 * file and in memory is one row.
 *
 * Split by time, a row is a (thread, stack, slot): slots start as narrow
 * as the buckets allow and widen, merging whole, while the samples span
 * more of them than the query allows; each width is a multiple of the one
 * before, so a slot of the narrower width lies in one slot of the wider.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage.h"

struct stacks_row {
	int64_t stack; /* a database id, or a pending stack (reader_pending_stack) */
	uint64_t count, idle;
	uint32_t thread; /* index into threads, with split_threads */
	uint32_t context; /* with split_contexts: 1 + index into contexts; 0: none */
	int64_t slot;    /* with time_slots: its start / the slot width */
	bool merged; /* its count is in an earlier row with the same frames (and thread) */
};

struct stacks_node {
	int64_t parent;
	size_t frame; /* index into frames */
};

struct stacks_query {
	struct store_reader *r;
	const struct store_pending *pending;
	struct stacks_row *rows;
	size_t nrows, rows_cap;
	struct hash_map node_ids, frame_ids; /* database id -> index below */
	struct hash_map pending_frames;      /* (batch, frame index) -> index below */
	struct hash_map frame_texts;         /* a frame's content -> index below */
	struct stacks_node *nodes;
	size_t nnodes, nodes_cap;
	struct store_frame *frames;
	size_t nframes, frames_cap;
	struct store_thread *threads; /* with split_threads */
	size_t nthreads, threads_cap;
	struct hash_map thread_ids;   /* (target, thread id) -> index in threads */
	struct store_context *contexts; /* with split_contexts */
	size_t ncontexts, contexts_cap;
	struct hash_map context_ids;  /* a context's content -> index in contexts */
	double first_unix, last_unix; /* the buckets with samples */
	/* With time_slots: the slots' width, and the earliest and latest bucket start seen. */
	uint64_t slot_seconds;
	int64_t min_start, max_start;
	struct arena strings; /* the frames' and threads' */
	size_t *path;            /* frame indexes of one stack, leaf first */
	struct store_frame *out; /* the same, root first, for the callback */
};

static void stacks_free(struct stacks_query *qs)
{
	free(qs->rows);
	free(qs->path);
	free(qs->out);
	free(qs->nodes);
	hash_map_clear(&qs->node_ids);
	free(qs->frames);
	free(qs->threads);
	hash_map_clear(&qs->thread_ids);
	free(qs->contexts);
	hash_map_clear(&qs->context_ids);
	arena_free(&qs->strings);
	hash_map_clear(&qs->frame_ids);
	hash_map_clear(&qs->pending_frames);
	hash_map_clear(&qs->frame_texts);
}

/*
 * The index in qs->frames of the frame with this content, added on first
 * sight (strings copied).  0, or -1 when out of memory.
 */
static int stacks_frame_index(struct stacks_query *qs, int32_t line, int kind, int32_t first_line,
                              const char *function, const char *file, const char *build_id, size_t *index)
{
	const char *fn = function ? function : "", *fl = file ? file : "", *bi = build_id ? build_id : "";
	size_t lf = strlen(fn), ll = strlen(fl), lb = strlen(bi);
	int32_t head[3] = {kind, line, first_line};
	size_t len = sizeof head + lf + ll + lb + 3;
	/* NULL and "" are one name: no frame of either source tells them apart. */
	char *text = malloc(len);
	if (!text)
		return -1;
	memcpy(text, head, sizeof head);
	memcpy(text + sizeof head, fn, lf + 1);
	memcpy(text + sizeof head + lf + 1, fl, ll + 1);
	memcpy(text + sizeof head + lf + ll + 2, bi, lb + 1);
	int64_t v;
	if (hash_map_get(&qs->frame_texts, text, len, &v)) {
		free(text);
		*index = (size_t)v;
		return 0;
	}
	if (qs->nframes >= UINT32_MAX ||
	    array_reserve((void **)&qs->frames, &qs->frames_cap, qs->nframes, sizeof *qs->frames, NULL) < 0) {
		free(text);
		return -1;
	}
	struct store_frame *f = &qs->frames[qs->nframes];
	f->function = arena_strdup(&qs->strings, function);
	f->file = arena_strdup(&qs->strings, file);
	f->build_id = arena_strdup(&qs->strings, bi);
	f->line = line;
	f->kind = kind;
	f->first_line = first_line;
	f->id = (uint32_t)qs->nframes;
	int rc = (function && !f->function) || (file && !f->file) || !f->build_id ? -1 : 0;
	*index = qs->nframes++;
	if (rc == 0)
		rc = hash_map_put(&qs->frame_texts, text, len, (int64_t)*index);
	free(text);
	return rc;
}

/*
 * The file's row id, from the ids already read (1, *seen set) or by stepping
 * st (bound to id) to its one row (0, the caller resets st); or -1 and *err:
 * a missing row is a corrupt file.
 */
static int stacks_lookup(struct stacks_query *qs, const struct hash_map *read, sqlite3_stmt *st,
                         int64_t id, const char *what, int64_t *seen, struct store_error *err)
{
	if (hash_map_get(read, &id, sizeof id, seen))
		return 1;
	sqlite3_bind_int64(st, 1, id);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		return 0;
	if (rc == SQLITE_DONE)
		store_error_text(err, "%s %lld is missing: the database is corrupt", what, (long long)id);
	else
		store_error_set(err, qs->r->db, "read %s %lld", what, (long long)id);
	sqlite3_reset(st);
	return -1;
}

/* The index of the file's frame id in qs->frames, reading it on first use.  0, or -1 and *err. */
static int stacks_file_frame(struct stacks_query *qs, int64_t id, size_t *index, struct store_error *err)
{
	int64_t seen = 0;
	sqlite3_stmt *st = qs->r->frame;
	int found = stacks_lookup(qs, &qs->frame_ids, st, id, "frame", &seen, err);
	if (found != 0) {
		if (found > 0)
			*index = (size_t)seen;
		return found < 0 ? -1 : 0;
	}
	int rc = stacks_frame_index(qs, sqlite3_column_int(st, 0), sqlite3_column_int(st, 1),
	                        sqlite3_column_int(st, 4), (const char *)sqlite3_column_text(st, 2),
	                        (const char *)sqlite3_column_text(st, 3), (const char *)sqlite3_column_text(st, 5),
	                        index);
	sqlite3_reset(st);
	if (rc < 0 || hash_map_put(&qs->frame_ids, &id, sizeof id, (int64_t)*index) < 0) {
		store_error_text(err, "query: out of memory");
		return -1;
	}
	return 0;
}

/* The node of the file's stack id, reading it (and its frame) on first use.  0, or -1 and *err. */
static int stacks_file_node(struct stacks_query *qs, int64_t id, const struct stacks_node **node,
                            struct store_error *err)
{
	int64_t seen = 0;
	sqlite3_stmt *st = qs->r->node;
	int found = stacks_lookup(qs, &qs->node_ids, st, id, "stack", &seen, err);
	if (found != 0) {
		if (found > 0)
			*node = &qs->nodes[seen];
		return found < 0 ? -1 : 0;
	}
	int64_t parent = sqlite3_column_int64(st, 0), frame = sqlite3_column_int64(st, 1);
	sqlite3_reset(st);
	size_t fi;
	if (stacks_file_frame(qs, frame, &fi, err) < 0)
		return -1;
	if (array_reserve((void **)&qs->nodes, &qs->nodes_cap, qs->nnodes, sizeof *qs->nodes, NULL) < 0 ||
	    hash_map_put(&qs->node_ids, &id, sizeof id, (int64_t)qs->nnodes) < 0) {
		store_error_text(err, "query: out of memory");
		return -1;
	}
	qs->nodes[qs->nnodes] = (struct stacks_node){.parent = parent, .frame = fi};
	*node = &qs->nodes[qs->nnodes++];
	return 0;
}

/* The file's stack id into qs->path, leaf first; its depth, or -1 and *err. */
static int64_t stacks_file_path(struct stacks_query *qs, int64_t id, struct store_error *err)
{
	size_t depth = 0;
	for (int64_t at = id; at != 0;) {
		if (depth >= STORE_MAX_DEPTH) {
			store_error_text(err,
			                 "stack %lld is deeper than %d frames: the stacks table has a cycle "
			                 "or is corrupt",
			                 (long long)id, STORE_MAX_DEPTH);
			return -1;
		}
		const struct stacks_node *n;
		if (stacks_file_node(qs, at, &n, err) < 0)
			return -1;
		qs->path[depth++] = n->frame;
		at = n->parent;
	}
	return (int64_t)depth;
}

/* The index of a pending batch's frame in qs->frames.  0, or -1 (out of memory). */
static int stacks_pending_frame(struct stacks_query *qs, const struct store_batch *b, int32_t frame,
                                size_t *index)
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
	if (stacks_frame_index(qs, f->line, f->kind, f->first_line, f->function, f->file, f->build_id, index) < 0)
		return -1;
	return hash_map_put(&qs->pending_frames, &key, sizeof key, (int64_t)*index);
}

/* A pending stack into qs->path, leaf first; its depth, or -1 and *err. */
static int64_t stacks_pending_path(struct stacks_query *qs, int64_t value, struct store_error *err)
{
	const struct store_batch *b;
	int32_t stack;
	if (reader_pending_stack_find(qs->pending, value, &b, &stack) < 0) {
		store_error_text(err, "a waiting stack is not in memory");
		return -1;
	}
	size_t depth = 0;
	/* A batch's parents come before their children (checked as it was built): no cycle. */
	for (int32_t at = stack; at >= 0 && (size_t)at < b->nstacks; at = b->stacks[at].parent) {
		if (depth >= STORE_MAX_DEPTH) {
			store_error_text(err, "a waiting stack is deeper than %d frames", STORE_MAX_DEPTH);
			return -1;
		}
		if (stacks_pending_frame(qs, b, b->stacks[at].frame, &qs->path[depth]) < 0) {
			store_error_text(err, "query: out of memory");
			return -1;
		}
		depth++;
	}
	return (int64_t)depth;
}

static int64_t stacks_path(struct stacks_query *qs, int64_t stack, struct store_error *err)
{
	return stack < 0 ? stacks_pending_path(qs, stack, err) : stacks_file_path(qs, stack, err);
}

/* The index in qs->threads of a (target, thread), its name and labels read on first sight.  0, or -1 and *err. */
static int stacks_thread(struct stacks_query *qs, const struct store_query *q, int64_t target,
                         uint64_t thread_id, uint32_t *index, struct store_error *err)
{
	int64_t key[2] = {target, (int64_t)thread_id}, v;
	if (hash_map_get(&qs->thread_ids, key, sizeof key, &v)) {
		*index = (uint32_t)v;
		return 0;
	}
	if (qs->nthreads >= UINT32_MAX ||
	    array_reserve((void **)&qs->threads, &qs->threads_cap, qs->nthreads, sizeof *qs->threads,
	                  NULL) < 0) {
		store_error_text(err, "query: out of memory");
		return -1;
	}
	struct store_thread *t = &qs->threads[qs->nthreads];
	if (reader_thread_info(qs->r, q, target, thread_id, t, &qs->strings, err) < 0)
		return -1;
	t->id = (uint32_t)qs->nthreads;
	*index = (uint32_t)qs->nthreads++;
	if (hash_map_put(&qs->thread_ids, key, sizeof key, (int64_t)*index) < 0) {
		store_error_text(err, "query: out of memory");
		return -1;
	}
	return 0;
}

/*
 * A row's context (columns 7, 8, 9: trace, span, labels; NULL for samples
 * in none) as 1 + its index in qs->contexts, added on first sight; 0 for
 * none.  Contexts are one by content, whether from the file or memory.
 * 0, or -1 when out of memory.
 */
static int stacks_context(struct stacks_query *qs, sqlite3_stmt *st, uint32_t *index)
{
	*index = 0;
	if (sqlite3_column_type(st, 9) == SQLITE_NULL)
		return 0;
	const void *trace = sqlite3_column_blob(st, 7), *span = sqlite3_column_blob(st, 8);
	int tl = sqlite3_column_bytes(st, 7), sl = sqlite3_column_bytes(st, 8);
	const char *labels = (const char *)sqlite3_column_text(st, 9);
	struct store_context c = {.has_trace = trace && tl == STORE_TRACE_ID_LEN,
	                          .has_span = span && sl == STORE_SPAN_ID_LEN};
	if (c.has_trace)
		memcpy(c.trace_id, trace, sizeof c.trace_id);
	if (c.has_span)
		memcpy(c.span_id, span, sizeof c.span_id);
	size_t ll = labels ? strlen(labels) : 0;
	if (ll > STORE_CONTEXT_LABELS_BYTES)
		ll = STORE_CONTEXT_LABELS_BYTES;
	char key[2 + STORE_TRACE_ID_LEN + STORE_SPAN_ID_LEN + STORE_CONTEXT_LABELS_BYTES];
	key[0] = (char)c.has_trace;
	key[1] = (char)c.has_span;
	memcpy(key + 2, c.trace_id, sizeof c.trace_id);
	memcpy(key + 2 + sizeof c.trace_id, c.span_id, sizeof c.span_id);
	if (ll)
		memcpy(key + 2 + sizeof c.trace_id + sizeof c.span_id, labels, ll);
	size_t klen = 2 + sizeof c.trace_id + sizeof c.span_id + ll;
	int64_t v;
	if (hash_map_get(&qs->context_ids, key, klen, &v)) {
		*index = (uint32_t)v + 1;
		return 0;
	}
	if (qs->ncontexts >= UINT32_MAX - 1 ||
	    array_reserve((void **)&qs->contexts, &qs->contexts_cap, qs->ncontexts, sizeof *qs->contexts,
	                  NULL) < 0 ||
	    !(c.labels = arena_strdup(&qs->strings, labels ? labels : "")) ||
	    hash_map_put(&qs->context_ids, key, klen, (int64_t)qs->ncontexts) < 0)
		return -1;
	c.id = (uint32_t)qs->ncontexts;
	qs->contexts[qs->ncontexts++] = c;
	*index = c.id + 1;
	return 0;
}

/* The slot widths a query may take: each a multiple of the one before. */
static const uint64_t stacks_slot_widths[] = {
	1, 2, 10, 20, 60, 120, 600, 1200, 3600, 7200, 21600, 43200, 86400,
};
/* Past a day, widths double up to this (about 88 years: no range a request may name needs more). */
#define STACKS_SLOT_WIDEST (UINT64_C(86400) << 15)

static uint64_t stacks_slot_width_next(uint64_t w)
{
	for (size_t i = 0; i < sizeof stacks_slot_widths / sizeof stacks_slot_widths[0]; i++)
		if (stacks_slot_widths[i] > w)
			return stacks_slot_widths[i];
	return w < STACKS_SLOT_WIDEST ? w * 2 : w;
}

/* The slot of a bucket start (floor, for starts before 1970 too). */
static int64_t stacks_slot_of(int64_t start, uint64_t width)
{
	int64_t w = (int64_t)width, s = start / w;
	return s * w > start ? s - 1 : s;
}

/*
 * Widen the slots until one is at least bucket_seconds wide and the
 * buckets seen span at most q->time_slots of them, merging the rows that
 * come to share a slot.  0, or -1 when out of memory.
 */
static int stacks_widen(struct stacks_query *qs, const struct store_query *q, uint64_t bucket_seconds,
                        struct hash_map *index)
{
	uint64_t w = qs->slot_seconds;
	while (w < STACKS_SLOT_WIDEST &&
	       (w < bucket_seconds ||
	        (uint64_t)(stacks_slot_of(qs->max_start, w) - stacks_slot_of(qs->min_start, w)) >=
	                q->time_slots))
		w = stacks_slot_width_next(w);
	if (w == qs->slot_seconds)
		return 0;
	uint64_t old = qs->slot_seconds;
	qs->slot_seconds = w;
	hash_map_clear(index);
	size_t kept = 0;
	for (size_t i = 0; i < qs->nrows; i++) {
		struct stacks_row r = qs->rows[i];
		r.slot = stacks_slot_of(r.slot * (int64_t)old, w);
		int64_t key[4] = {r.stack, r.thread, r.slot, r.context}, at;
		if (hash_map_get(index, key, sizeof key, &at)) {
			qs->rows[at].count += r.count;
			qs->rows[at].idle += r.idle;
			continue;
		}
		if (hash_map_put(index, key, sizeof key, (int64_t)kept) < 0)
			return -1;
		qs->rows[kept++] = r;
	}
	qs->nrows = kept;
	return 0;
}

/*
 * What stacks are summed from, a FROM item into buf: reader_samples; split
 * by contexts without a filter, the context rows and, per sample row, what
 * its context rows do not hold (samples in no context), as rows of no
 * context.  NULL if buf is too small.
 */
static const char *stacks_source(const struct store_query *q, char *buf, size_t len)
{
	if (!q->split_contexts || reader_by_context(q))
		return reader_samples(q, q->split_contexts, buf, len);
	char ctx[1024];
	if (!reader_samples(q, true, ctx, sizeof ctx))
		return NULL;
	const struct reader_tables *t = reader_tables(q);
	/*
	 * What a sample row's context rows hold is looked up per row by their
	 * key (the context rows' primary key leads with it): a join to their
	 * sums grouped over the whole table would read every context row for
	 * a query of one thread.
	 */
	static const char cs_of_s[] =
		"WHERE c.target = s.target AND c.bucket_start = s.bucket_start AND "
		"c.bucket_seconds = s.bucket_seconds AND c.thread_id = s.thread_id AND c.stack = s.stack";
	int n = snprintf(
		buf, len,
		"(SELECT target, bucket_start, bucket_seconds, thread_id, stack, count, idle, trace_id, "
		"span_id, labels FROM %s UNION ALL "
		"SELECT s.target, s.bucket_start, s.bucket_seconds, s.thread_id, s.stack, "
		"s.count - coalesce((SELECT sum(c.count) FROM %s c %s), 0), "
		"s.idle - coalesce((SELECT sum(c.idle) FROM %s c %s), 0), NULL, NULL, NULL FROM %s s)",
		ctx, t->context_samples, cs_of_s, t->context_samples, cs_of_s, t->samples);
	return n >= 0 && (size_t)n < len ? buf : NULL;
}

/* Sums per stack (per thread and stack when split, and per slot) into qs->rows and *total.  0, or -1 and *err. */
static int stacks_collect(struct stacks_query *qs, const struct store_query *q, uint64_t *total,
                          struct store_error *err)
{
	sqlite3 *db = qs->r->db;
	char head[8192], buf[4096];
	const char *src = stacks_source(q, buf, sizeof buf);
	if (!src) {
		store_error_text(err, "query: too long");
		return -1;
	}
	snprintf(head, sizeof head,
	         "SELECT stack, count, idle, target, thread_id, bucket_start, bucket_seconds%s FROM %s "
	         "WHERE bucket_start >= ?1 AND bucket_start < ?2",
	         q->split_contexts ? ", trace_id, span_id, labels" : "", src);
	sqlite3_stmt *st;
	if (reader_prepare(qs->r, q, head, "thread_id", "", "query", &st, err) < 0)
		return -1;
	int rc;
	uint64_t sum = 0;
	/*
	 * Summed per stack here, not by GROUP BY: SQLite would sort every row
	 * into a temporary b-tree first, which costs twice the scan itself.
	 * The sample rows are bounded by the table, the distinct stacks by the
	 * stacks table.
	 */
	struct hash_map index = {0}; /* (stack, thread, slot) -> row */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t stack = sqlite3_column_int64(st, 0), count = sqlite3_column_int64(st, 1);
		int64_t idle = sqlite3_column_int64(st, 2);
		uint64_t c = count > 0 ? (uint64_t)count : 0, w = idle > 0 ? (uint64_t)idle : 0;
		if (w > c)
			w = c;
		if (q->no_idle) {
			c -= w;
			w = 0;
		}
		if (!c)
			continue;
		int64_t start = sqlite3_column_int64(st, 5), width = sqlite3_column_int64(st, 6);
		bool first = sum == 0;
		if (sum == 0 || (double)start < qs->first_unix)
			qs->first_unix = (double)start;
		if (sum == 0 || (double)(start + width) > qs->last_unix)
			qs->last_unix = (double)(start + width);
		sum += c;
		uint32_t thread = 0;
		if (q->split_threads &&
		    stacks_thread(qs, q, sqlite3_column_int64(st, 3), (uint64_t)sqlite3_column_int64(st, 4),
		                  &thread, err) < 0)
			goto fail;
		int64_t slot = 0;
		if (q->time_slots) {
			if (first) {
				qs->min_start = qs->max_start = start;
				qs->slot_seconds = 1;
			}
			qs->min_start = start < qs->min_start ? start : qs->min_start;
			qs->max_start = start > qs->max_start ? start : qs->max_start;
			if (stacks_widen(qs, q, width > 0 ? (uint64_t)width : 1, &index) < 0) {
				store_error_text(err, "query: out of memory");
				goto fail;
			}
			slot = stacks_slot_of(start, qs->slot_seconds);
		}
		uint32_t context = 0;
		if (q->split_contexts && stacks_context(qs, st, &context) < 0) {
			store_error_text(err, "query: out of memory");
			goto fail;
		}
		int64_t key[4] = {stack, thread, slot, context}, at;
		if (hash_map_get(&index, key, sizeof key, &at)) {
			qs->rows[at].count += c;
			qs->rows[at].idle += w;
			continue;
		}
		if (array_reserve((void **)&qs->rows, &qs->rows_cap, qs->nrows, sizeof *qs->rows, NULL) < 0 ||
		    hash_map_put(&index, key, sizeof key, (int64_t)qs->nrows) < 0) {
			store_error_text(err, "query: out of memory");
			goto fail;
		}
		qs->rows[qs->nrows++] = (struct stacks_row){.stack = stack, .count = c, .idle = w,
		                                            .thread = thread, .slot = slot,
		                                            .context = context};
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
fail:
	hash_map_clear(&index);
	sqlite3_finalize(st);
	return -1;
}

/*
 * With samples from memory, a stack may be a row of the file and a row of
 * a batch: rows with the same frames become one, the first, holding the
 * sum (the others marked merged).  0, or -1 and *err.
 */
static int stacks_merge_equal(struct stacks_query *qs, struct store_error *err)
{
	struct hash_map seen = {0}; /* frame indexes, leaf first -> row */
	int ret = 0;
	for (size_t i = 0; i < qs->nrows && ret == 0; i++) {
		int64_t depth = stacks_path(qs, qs->rows[i].stack, err);
		if (depth < 0) {
			ret = -1;
			continue;
		}
		/* The frames, then the thread, the slot and the context: the empty stack is a key too. */
		qs->path[depth] = qs->rows[i].thread;
		qs->path[depth + 1] = (size_t)qs->rows[i].slot;
		qs->path[depth + 2] = qs->rows[i].context;
		const void *key = qs->path;
		size_t len = ((size_t)depth + 3) * sizeof *qs->path;
		int64_t first;
		if (hash_map_get(&seen, key, len, &first)) {
			qs->rows[first].count += qs->rows[i].count;
			qs->rows[first].idle += qs->rows[i].idle;
			qs->rows[i].merged = true;
		} else if (hash_map_put(&seen, key, len, (int64_t)i) < 0) {
			store_error_text(err, "query: out of memory");
			ret = -1;
		}
	}
	hash_map_clear(&seen);
	return ret;
}

int store_query_stacks(struct store_reader *r, const struct store_query *q,
                       int (*fn)(void *ctx, const struct store_row *row), void *ctx,
                       uint64_t *total, struct store_error *err)
{
	if (total)
		*total = 0;
	if (reader_check(q, err) < 0)
		return -1;
	struct stacks_query qs = {.r = r, .pending = q->pending};
	uint64_t sum = 0;
	int ret = -1;
	qs.path = calloc(STORE_MAX_DEPTH + 3, sizeof *qs.path);
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
	if (stacks_collect(&qs, q, &sum, err) < 0)
		goto end;
	if (reader_tables(q) != reader_tables(NULL) && stacks_merge_equal(&qs, err) < 0)
		goto end;
	if (total)
		*total = sum;
	for (size_t i = 0; i < qs.nrows; i++) {
		if (qs.rows[i].merged)
			continue;
		int64_t depth = stacks_path(&qs, qs.rows[i].stack, err);
		if (depth < 0)
			goto end;
		for (int64_t k = 0; k < depth; k++)
			qs.out[k] = qs.frames[qs.path[depth - 1 - k]];
		struct store_row row = {.frames = qs.out, .depth = (uint32_t)depth,
		                        .count = qs.rows[i].count, .idle = qs.rows[i].idle,
		                        .thread = q->split_threads ? &qs.threads[qs.rows[i].thread] : NULL,
		                        .context = qs.rows[i].context ? &qs.contexts[qs.rows[i].context - 1]
		                                                      : NULL,
		                        .slot_start = qs.rows[i].slot * (int64_t)qs.slot_seconds,
		                        .slot_seconds = (uint32_t)qs.slot_seconds,
		                        .query_total = sum, .first_unix = qs.first_unix,
		                        .last_unix = qs.last_unix};
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
	stacks_free(&qs);
	return ret;
}
