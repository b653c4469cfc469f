/*
 * A batch: what the daemon aggregated between two flushes, self-contained
 * and checked as it is built (a stack's parent and frame, a sample's target
 * and stack must already be in the batch), so the writer maps it to the
 * database in one pass and never meets a dangling index.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "storage.h"

struct store_batch *store_batch_new(void)
{
	return calloc(1, sizeof(struct store_batch));
}

/* The strings a target owns; it may be half built. */
static void batch_target_clear(struct batch_target *t)
{
	free(t->executable);
	free(t->command_line);
	free(t->python_version);
	labels_free(&t->labels);
}

void store_batch_free(struct store_batch *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->ntargets; i++)
		batch_target_clear(&b->targets[i]);
	free(b->targets);
	for (size_t i = 0; i < b->nsessions; i++)
		free(b->sessions[i].mode);
	free(b->sessions);
	for (size_t i = 0; i < b->nframes; i++) {
		free(b->frames[i].function);
		free(b->frames[i].file);
		free(b->frames[i].build_id);
	}
	free(b->frames);
	for (size_t i = 0; i < b->nthreads; i++)
		free(b->threads[i].name);
	free(b->threads);
	free(b->stacks);
	free(b->samples);
	for (size_t i = 0; i < b->ncontexts; i++)
		free(b->contexts[i].labels);
	free(b->contexts);
	hash_map_clear(&b->context_index);
	free(b->context_samples);
	free(b);
}

/* Room for one more element in *arr; 0, or -1 when out of memory or past INT32_MAX (batch indexes are int32). */
static int batch_reserve(void **arr, size_t *cap, size_t len, size_t elem)
{
	if (len >= INT32_MAX)
		return -1;
	return array_reserve(arr, cap, len, elem, NULL);
}

/* A copy of s, NULL for NULL; *ok cleared when the copy fails. */
static char *batch_strdup(const char *s, bool *ok)
{
	if (!s)
		return NULL;
	char *c = strdup(s);
	if (!c)
		*ok = false;
	return c;
}

int store_batch_target(struct store_batch *b, const struct store_target_info *t)
{
	if (!b || !t || t->nlabels > STORE_MAX_LABELS ||
	    (t->nlabels && (!t->label_keys || !t->label_values)))
		return -1;
	for (size_t k = 0; k < t->nlabels; k++) {
		if (!t->label_keys[k] || !t->label_values[k])
			return -1;
	}
	if (batch_reserve((void **)&b->targets, &b->targets_cap, b->ntargets, sizeof *b->targets) < 0)
		return -1;
	struct batch_target *bt = &b->targets[b->ntargets];
	memset(bt, 0, sizeof *bt);
	bool ok = true;
	bt->pid = t->pid;
	bt->start_time = t->start_time;
	bt->uid = t->uid;
	bt->seen = clock_wall_s();
	bt->executable = batch_strdup(t->executable, &ok);
	bt->command_line = batch_strdup(t->command_line, &ok);
	bt->python_version = batch_strdup(t->python_version, &ok);
	for (size_t k = 0; ok && k < t->nlabels; k++)
		ok = labels_add(&bt->labels, t->label_keys[k], t->label_values[k]) == 0;
	if (!ok) {
		batch_target_clear(bt);
		return -1;
	}
	return (int)b->ntargets++;
}

int store_batch_session(struct store_batch *b, int target, double attached_at, double detached_at,
                        uint32_t rate_hz, const char *mode)
{
	if (!b || target < 0 || (size_t)target >= b->ntargets)
		return -1;
	if (batch_reserve((void **)&b->sessions, &b->sessions_cap, b->nsessions,
	                  sizeof *b->sessions) < 0)
		return -1;
	bool ok = true;
	struct batch_session *s = &b->sessions[b->nsessions];
	s->target = target;
	s->attached_at = attached_at;
	s->detached_at = detached_at;
	s->rate_hz = rate_hz;
	s->mode = batch_strdup(mode, &ok);
	if (!ok)
		return -1;
	return (int)b->nsessions++;
}

static int32_t batch_frame(struct store_batch *b, const char *function, const char *file, int32_t line, int kind,
                           int32_t first_line, const char *build_id)
{
	if (!b || kind < 0 || kind > 4) /* python, native, gc, moving, c (base/unwind_words.h) */
		return -1;
	if (batch_reserve((void **)&b->frames, &b->frames_cap, b->nframes, sizeof *b->frames) < 0)
		return -1;
	bool ok = true;
	struct batch_frame *f = &b->frames[b->nframes];
	f->function = batch_strdup(function, &ok);
	f->file = batch_strdup(file, &ok);
	f->build_id = batch_strdup(build_id, &ok);
	f->line = line;
	f->kind = kind;
	f->first_line = first_line;
	if (!ok) {
		free(f->function);
		free(f->file);
		free(f->build_id);
		return -1;
	}
	return (int32_t)b->nframes++;
}

int32_t store_batch_frame(struct store_batch *b, const char *function, const char *file,
                          int32_t line, int kind, int32_t first_line)
{
	return batch_frame(b, function, file, line, kind, first_line, NULL);
}

int32_t store_batch_c_frame(struct store_batch *b, const char *function, const char *file, int32_t address,
                            const char *build_id)
{
	return batch_frame(b, function, file, address, 4, 0, build_id);
}

int32_t store_batch_stack(struct store_batch *b, int32_t parent, int32_t frame)
{
	if (!b || parent < -1 || (parent >= 0 && (size_t)parent >= b->nstacks) || frame < 0 ||
	    (size_t)frame >= b->nframes)
		return -1;
	if (batch_reserve((void **)&b->stacks, &b->stacks_cap, b->nstacks, sizeof *b->stacks) < 0)
		return -1;
	b->stacks[b->nstacks] = (struct batch_stack){.parent = parent, .frame = frame};
	return (int32_t)b->nstacks++;
}

int store_batch_samples(struct store_batch *b, int target, int64_t bucket_start,
                        uint32_t bucket_seconds, uint64_t thread_id, int32_t stack, uint64_t count,
                        uint64_t idle)
{
	/* Counts are stored as SQLite's signed 64-bit integers. */
	if (!b || target < 0 || (size_t)target >= b->ntargets || stack < 0 ||
	    (size_t)stack >= b->nstacks || bucket_seconds == 0 || count > INT64_MAX || idle > count)
		return -1;
	if (batch_reserve((void **)&b->samples, &b->samples_cap, b->nsamples, sizeof *b->samples) < 0)
		return -1;
	b->samples[b->nsamples++] = (struct batch_sample){
		.target = target,
		.stack = stack,
		.bucket_seconds = bucket_seconds,
		.bucket_start = bucket_start,
		.thread_id = thread_id,
		.count = count,
		.idle = idle,
	};
	return 0;
}

int store_batch_thread(struct store_batch *b, int target, uint64_t thread_id, int64_t native_id,
                       const char *name)
{
	if (!b || target < 0 || (size_t)target >= b->ntargets || !name)
		return -1;
	if (batch_reserve((void **)&b->threads, &b->threads_cap, b->nthreads, sizeof *b->threads) < 0)
		return -1;
	bool ok = true;
	struct batch_thread *t = &b->threads[b->nthreads];
	*t = (struct batch_thread){.target = target, .thread_id = thread_id,
	                           .native_id = native_id > 0 ? native_id : -1,
	                           .name = batch_strdup(name, &ok)};
	if (!ok)
		return -1;
	b->nthreads++;
	return 0;
}

/*
 * Whether labels are "key=value" lines sorted by key, each with a key,
 * within the bounds: one spelling per set of labels, so equal contexts are
 * one row and a filter's line matches a line exactly.
 */
static bool batch_context_labels_ok(const char *labels)
{
	size_t len = strnlen(labels, STORE_CONTEXT_LABELS_BYTES + 1);
	if (len > STORE_CONTEXT_LABELS_BYTES)
		return false;
	if (len == 0)
		return true;
	const char *line = labels, *prev = NULL;
	size_t prev_key = 0;
	for (int n = 0;; n++) {
		if (n >= STORE_CONTEXT_LABELS)
			return false;
		size_t l = strcspn(line, "\n"), key = strcspn(line, "=\n");
		if (key == 0 || key >= l)
			return false;
		/* Sorted by key, each key once. */
		if (prev) {
			int c = memcmp(prev, line, prev_key < key ? prev_key : key);
			if (c > 0 || (c == 0 && prev_key >= key))
				return false;
		}
		prev = line;
		prev_key = key;
		if (!line[l])
			return true;
		line += l + 1;
	}
}

int32_t store_batch_context(struct store_batch *b, const uint8_t *trace_id, const uint8_t *span_id,
                            const char *labels)
{
	static const uint8_t zero[STORE_TRACE_ID_LEN];
	if (!b || !labels || (span_id && !trace_id) ||
	    (trace_id && memcmp(trace_id, zero, STORE_TRACE_ID_LEN) == 0) ||
	    (!trace_id && !labels[0]) || !batch_context_labels_ok(labels))
		return -1;
	struct batch_context c = {.has_trace = trace_id != NULL, .has_span = span_id != NULL};
	if (trace_id)
		memcpy(c.trace_id, trace_id, sizeof c.trace_id);
	if (span_id)
		memcpy(c.span_id, span_id, sizeof c.span_id);
	/* The key: which ids there are, the ids, the labels. */
	size_t ll = strlen(labels);
	char key[2 + STORE_TRACE_ID_LEN + STORE_SPAN_ID_LEN + STORE_CONTEXT_LABELS_BYTES];
	key[0] = (char)c.has_trace;
	key[1] = (char)c.has_span;
	memcpy(key + 2, c.trace_id, sizeof c.trace_id);
	memcpy(key + 2 + sizeof c.trace_id, c.span_id, sizeof c.span_id);
	memcpy(key + 2 + sizeof c.trace_id + sizeof c.span_id, labels, ll);
	size_t klen = 2 + sizeof c.trace_id + sizeof c.span_id + ll;
	int64_t at;
	if (hash_map_get(&b->context_index, key, klen, &at))
		return (int32_t)at;
	if (batch_reserve((void **)&b->contexts, &b->contexts_cap, b->ncontexts, sizeof *b->contexts) < 0 ||
	    !(c.labels = strdup(labels)))
		return -1;
	if (hash_map_put(&b->context_index, key, klen, (int64_t)b->ncontexts) < 0) {
		free(c.labels);
		return -1;
	}
	b->contexts[b->ncontexts] = c;
	return (int32_t)b->ncontexts++;
}

int store_batch_context_samples(struct store_batch *b, int target, int64_t bucket_start,
                                uint32_t bucket_seconds, uint64_t thread_id, int32_t stack,
                                int32_t context, uint64_t count, uint64_t idle)
{
	if (!b || target < 0 || (size_t)target >= b->ntargets || stack < 0 ||
	    (size_t)stack >= b->nstacks || context < 0 || (size_t)context >= b->ncontexts ||
	    bucket_seconds == 0 || count > INT64_MAX || idle > count)
		return -1;
	if (batch_reserve((void **)&b->context_samples, &b->context_samples_cap, b->ncontext_samples,
	                  sizeof *b->context_samples) < 0)
		return -1;
	b->context_samples[b->ncontext_samples++] = (struct batch_context_sample){
		.s = {.target = target, .stack = stack, .bucket_seconds = bucket_seconds,
		      .bucket_start = bucket_start, .thread_id = thread_id, .count = count, .idle = idle},
		.context = context,
	};
	return 0;
}

uint64_t store_batch_sample_rows(const struct store_batch *b)
{
	return b ? b->nsamples + b->ncontext_samples : 0;
}
