/*
 * History: every sample a target takes lands, aggregated, in the store.
 *
 * On the loop, each target counts its samples by (time bucket, thread,
 * stack id) in a small hash table.  Every flush interval — and whenever the
 * stack ids are about to lose their meaning (the unwinder's caches reset,
 * the target detaches, exits or is dropped) — those counts are spelled out
 * into a self-contained store batch (frames and stacks by content) and
 * handed to the store's writer thread, which never makes the loop wait.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"
#include "store.h"

/* ---- a target's counts since its last flush ---- */

static uint64_t pending_hash(int64_t bucket, uint64_t thread, uint32_t stack)
{
	uint64_t h = (uint64_t)bucket * 0x9E3779B97F4A7C15ull ^ thread * 0xC2B2AE3D27D4EB4Full ^ stack;
	h ^= h >> 29;
	h *= 0xBF58476D1CE4E5B9ull;
	return h ^ (h >> 32);
}

static int pending_grow(struct pending *p)
{
	uint32_t cap = p->cap ? p->cap * 2 : 256;
	struct pending_entry *v = calloc(cap, sizeof *v);
	if (!v)
		return -1;
	for (uint32_t i = 0; i < p->cap; i++) {
		const struct pending_entry *e = &p->v[i];
		if (!e->count)
			continue;
		uint32_t j = (uint32_t)pending_hash(e->bucket, e->thread_id, e->stack) & (cap - 1);
		while (v[j].count)
			j = (j + 1) & (cap - 1);
		v[j] = *e;
	}
	free(p->v);
	p->v = v;
	p->cap = cap;
	return 0;
}

int pending_add(struct pending *p, int64_t bucket, uint64_t thread_id, uint32_t stack)
{
	if ((p->used + 1) * 4 > p->cap * 3 && pending_grow(p) != 0)
		return -1;
	uint32_t j = (uint32_t)pending_hash(bucket, thread_id, stack) & (p->cap - 1);
	while (p->v[j].count &&
	       (p->v[j].bucket != bucket || p->v[j].thread_id != thread_id || p->v[j].stack != stack))
		j = (j + 1) & (p->cap - 1);
	if (!p->v[j].count) {
		p->v[j] = (struct pending_entry){.bucket = bucket, .thread_id = thread_id, .stack = stack};
		p->used++;
	}
	p->v[j].count++;
	p->samples++;
	return 0;
}

static void pending_clear(struct pending *p)
{
	if (p->v)
		memset(p->v, 0, p->cap * sizeof *p->v);
	p->used = 0;
	p->samples = 0;
}

void pending_free(struct pending *p)
{
	free(p->v);
	memset(p, 0, sizeof *p);
}

/* ---- spelling stack ids out into a batch ---- */

/* uw id -> batch index, open addressing; 0 keys are never stored (id 0 is the root). */
struct id_map {
	uint32_t *keys;
	int32_t *values;
	uint32_t used, cap;
};

static int32_t *id_map_slot(struct id_map *m, uint32_t key)
{
	if ((m->used + 1) * 2 > m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 256;
		uint32_t *keys = calloc(cap, sizeof *keys);
		int32_t *values = calloc(cap, sizeof *values);
		if (!keys || !values) {
			free(keys);
			free(values);
			return NULL;
		}
		for (uint32_t i = 0; i < m->cap; i++) {
			if (!m->keys[i])
				continue;
			uint32_t j = (m->keys[i] * 2654435761u) & (cap - 1);
			while (keys[j])
				j = (j + 1) & (cap - 1);
			keys[j] = m->keys[i];
			values[j] = m->values[i];
		}
		free(m->keys);
		free(m->values);
		m->keys = keys;
		m->values = values;
		m->cap = cap;
	}
	uint32_t j = (key * 2654435761u) & (m->cap - 1);
	while (m->keys[j] && m->keys[j] != key)
		j = (j + 1) & (m->cap - 1);
	if (!m->keys[j]) {
		m->keys[j] = key;
		m->values[j] = -1;
		m->used++;
	}
	return &m->values[j];
}

static void id_map_free(struct id_map *m)
{
	free(m->keys);
	free(m->values);
}

struct spell {
	const struct uw_target *uw;
	struct store_batch *batch;
	struct id_map frames, stacks;
	uint32_t chain[UW_MAX_FRAMES];
};

static int32_t spell_frame(struct spell *sp, uint32_t frame)
{
	int32_t *slot = id_map_slot(&sp->frames, frame + 1);
	if (!slot)
		return -1;
	if (*slot < 0) {
		const struct uw_frame *f = uw_frame_get(sp->uw, frame);
		if (!f)
			return -1;
		*slot = store_batch_frame(sp->batch, f->function ? f->function : "", f->file ? f->file : "",
		                          f->line, (int)f->kind);
	}
	return *slot;
}

/* The batch index of a stack id, its unspelled ancestors added root first. */
static int32_t spell_stack(struct spell *sp, uint32_t stack)
{
	uint32_t n = 0;
	int32_t parent = -1;
	/* Up to the first ancestor already in the batch (or the root)... */
	for (uint32_t s = stack; s && n < UW_MAX_FRAMES; s = uw_stack_parent(sp->uw, s)) {
		int32_t *slot = id_map_slot(&sp->stacks, s);
		if (!slot)
			return -1;
		if (*slot >= 0) {
			parent = *slot;
			break;
		}
		sp->chain[n++] = s;
	}
	/* ...then down again, adding each. */
	while (n > 0) {
		uint32_t s = sp->chain[--n];
		int32_t frame = spell_frame(sp, uw_stack_frame(sp->uw, s));
		if (frame < 0)
			return -1;
		parent = store_batch_stack(sp->batch, parent, frame);
		int32_t *slot = id_map_slot(&sp->stacks, s);
		if (parent < 0 || !slot)
			return -1;
		*slot = parent;
	}
	return parent;
}

/* The target's pending counts as one batch; NULL if out of memory. */
static struct store_batch *history_batch(struct history *h, struct target *t)
{
	struct store_batch *b = store_batch_new();
	if (!b)
		return NULL;
	struct store_target_info info = {
		.pid = t->pid,
		.start_time = t->start_time,
		.uid = t->uid,
		.executable = t->executable,
		.command_line = t->command_line,
		.python_version = t->python_version,
		.nlabels = t->params.nlabels,
		.label_keys = (const char *const *)t->params.label_keys,
		.label_values = (const char *const *)t->params.label_values,
	};
	int target = store_batch_target(b, &info);
	double detached_at = t->state == TARGET_SAMPLING ? 0 : t->session_end;
	if (target < 0 || (t->sessions && store_batch_session(b, target, t->attached_at, detached_at,
	                                                      t->params.rate_hz,
	                                                      vocab_mode_name(t->params.mode)) < 0)) {
		store_batch_free(b);
		return NULL;
	}
	struct spell *sp = calloc(1, sizeof *sp);
	if (!sp) {
		store_batch_free(b);
		return NULL;
	}
	sp->uw = t->uw;
	sp->batch = b;
	bool ok = true;
	for (uint32_t i = 0; ok && i < t->pending.cap; i++) {
		const struct pending_entry *e = &t->pending.v[i];
		if (!e->count)
			continue;
		int32_t stack = spell_stack(sp, e->stack);
		ok = stack >= 0 && store_batch_samples(b, target, e->bucket, h->bucket_seconds, e->thread_id,
		                                       stack, e->count) >= 0;
	}
	id_map_free(&sp->frames);
	id_map_free(&sp->stacks);
	free(sp);
	if (!ok) {
		store_batch_free(b);
		return NULL;
	}
	return b;
}

/* ---- the history object ---- */

static void on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents);

/* The configuration's bounds on the writer: memory while writes fail, the size cap, the file limit. */
static void history_limits(struct history *h, const struct config *c)
{
	store_writer_set_limits(h->writer, c->max_pending_rows, c->max_db_bytes);
	store_writer_set_file_limit(h->writer, c->max_file_bytes);
}

int history_open(struct history *h, struct server *s)
{
	memset(h, 0, sizeof *h);
	h->server = s;
	h->bucket_seconds = s->config.bucket_seconds;
	size_t len = strlen(s->config.state_dir) + sizeof "/pyprofd.db";
	h->path = malloc(len);
	if (!h->path)
		return -1;
	snprintf(h->path, len, "%s/pyprofd.db", s->config.state_dir);
	/* The writer's thread opens the file, and retries while it cannot: the loop never waits on it. */
	struct store_error err = {{0}};
	h->writer = store_writer_open(h->path, &err);
	if (!h->writer) {
		log_error("history: %s", err.msg);
		free(h->path);
		h->path = NULL;
		return -1;
	}
	history_limits(h, &s->config);
	ev_timer_init(&h->flush_timer, on_flush_timer, s->config.flush_interval_s, s->config.flush_interval_s);
	h->flush_timer.data = h;
	ev_timer_start(s->loop, &h->flush_timer);
	return 0;
}

void history_configure(struct history *h, const struct config *c)
{
	if (h->writer)
		history_limits(h, c);
	/* An active watcher's repeat may change; ev_timer_again restarts it with the new one. */
	h->flush_timer.repeat = c->flush_interval_s;
	ev_timer_again(h->server->loop, &h->flush_timer);
}

void history_flush_target(struct history *h, struct target *t)
{
	if (!t->pending.used || !t->uw)
		return;
	if (!h->path) {
		/* No history (closed, or a daemon built without one): nothing to keep them for. */
		pending_clear(&t->pending);
		return;
	}
	struct store_batch *b = history_batch(h, t);
	if (!b) {
		log_warn("pid %d: out of memory writing %llu samples to the history", (int)t->pid,
		         (unsigned long long)t->pending.samples);
		h->lost_samples += t->pending.samples;
	} else {
		store_writer_submit(h->writer, b);
	}
	pending_clear(&t->pending);
}

void history_flush_all(struct history *h)
{
	struct targets *ts = &h->server->targets;
	for (size_t i = 0; i < ts->n; i++)
		history_flush_target(h, ts->v[i]);
}

/*
 * Old buckets merge into coarser ones ([storage] retention) every 60 flush
 * intervals, and the size cap is enforced then too, or at once when the file
 * is past it.  From the flush timer only: a query's flush must not start a
 * long merge that the query would then wait for.
 */
static void history_retention(struct history *h, const struct store_writer_status *st)
{
	const struct config *c = &h->server->config;
	bool over_cap = c->max_db_bytes && st->open && st->db_bytes > c->max_db_bytes;
	if ((c->nretention || c->max_db_bytes) && (h->flushes++ % 60 == 0 || over_cap)) {
		struct store_retention_step steps[CONFIG_RETENTION_MAX];
		for (unsigned i = 0; i < c->nretention; i++)
			steps[i] = (struct store_retention_step){c->retention_age_s[i], c->retention_bucket_s[i]};
		store_writer_retention(h->writer, steps, c->nretention);
	}
}

/*
 * Say once when the database cannot be opened or written (full disk,
 * read-only file, I/O errors) and once when it recovers.
 */
static void history_watch(struct history *h, const struct store_writer_status *st)
{
	unsigned long long rows = st->pending_rows;
	if (st->failing && !h->write_failing && !st->open)
		/* The message of a failed open names the file already. */
		log_error("history: %s; samples wait in memory (%llu rows)", st->last_error, rows);
	else if (st->failing && !h->write_failing)
		log_error("history: writing %s fails: %s; samples wait in memory (%llu rows)", h->path,
		          st->last_error, rows);
	else if (!st->failing && h->write_failing)
		log_info("history: writing %s again (%llu rows dropped meanwhile)", h->path,
		         (unsigned long long)st->dropped_rows);
	h->write_failing = st->failing;
}

static void on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	struct history *h = w->data;
	history_flush_all(h);
	struct store_writer_status st;
	store_writer_status(h->writer, &st);
	history_retention(h, &st);
	history_watch(h, &st);
}

void history_sync(struct history *h)
{
	if (h->writer)
		store_writer_flush(h->writer);
}

void history_close(struct history *h)
{
	ev_timer_stop(h->server->loop, &h->flush_timer);
	history_flush_all(h);
	if (h->writer) {
		store_writer_close(h->writer);
		h->writer = NULL;
	}
	free(h->path);
	h->path = NULL;
}

void history_status(struct history *h, Pyprofd__StatusResult *out, struct arena *a)
{
	out->history_file = h->path;
	out->history_lost_samples = h->lost_samples;
	if (!h->writer)
		return;
	struct store_writer_status st;
	store_writer_status(h->writer, &st);
	out->history_failing = st.failing;
	out->history_open = st.open;
	out->history_error = st.failing ? arena_strdup(a, st.last_error) : (char *)"";
	out->history_pending_rows = st.pending_rows;
	out->history_rows_written = st.rows_written;
	out->history_dropped_rows = st.dropped_rows;
	out->history_bytes = st.db_bytes;
	if (!out->history_error)
		out->history_error = (char *)"";
}
