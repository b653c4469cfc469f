/*
 * The requests a target's samples ran in, from the unwinder's contexts to
 * the history's: what is asked for (a rule's or an attach's spec), and the
 * samples counted by request between two batches.
 *
 * A request is its span (trace and span ids) and its labels, interned
 * between two batches: a busy service makes a new trace every request, so
 * the table is emptied with each batch and bounded in between.  Label
 * values are bounded over the process's life instead: a label is meant to
 * split a profile (route, tenant), and one whose values never repeat (a
 * request id) would split it into nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "contexts.h"
#include "hash.h"
#include "store.h"
#include "tally.h"

bool context_spec_on(const struct context_spec *s)
{
	return s->otel || s->nlabels;
}

bool context_spec_equal(const struct context_spec *a, const struct context_spec *b)
{
	if (a->otel != b->otel || a->nlabels != b->nlabels)
		return false;
	for (uint32_t i = 0; i < a->nlabels; i++)
		if (strcmp(a->labels[i], b->labels[i]) != 0)
			return false;
	return true;
}

int context_spec_kind(struct context_spec *s, const char *value, char *why, size_t why_len)
{
	if (strcmp(value, "otel") == 0 || strcmp(value, "none") == 0) {
		s->otel = value[0] == 'o';
		return 0;
	}
	snprintf(why, why_len, "context is otel or none (not '%s')", value);
	return -1;
}

/* A ContextVar's name as Python programs write them: a letter or '_', then letters, digits, '_', '.', '-'. */
static bool context_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n >= UW_CONTEXT_NAME_LEN || (name[0] >= '0' && name[0] <= '9'))
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
		      *p == '.' || *p == '-'))
			return false;
	return true;
}

int context_spec_add_label(struct context_spec *s, const char *name, char *why, size_t why_len)
{
	if (!context_name_ok(name))
		return snprintf(why, why_len,
		                "a context label is a ContextVar's name: 1 to %u letters, digits, '_', '.' or '-', "
		                "not beginning with a digit (not '%s')",
		                UW_CONTEXT_NAME_LEN - 1, name),
		       -1;
	/* The span's own labels: a ContextVar of such a name would be taken for them. */
	if (strcmp(name, "trace_id") == 0 || strcmp(name, "span_id") == 0)
		return snprintf(why, why_len, "'%s' names the span's ids, not a context label", name), -1;
	for (uint32_t i = 0; i < s->nlabels; i++)
		if (strcmp(s->labels[i], name) == 0)
			return snprintf(why, why_len, "the context label '%s' is given twice", name), -1;
	if (s->nlabels >= UW_CONTEXT_LABELS_MAX)
		return snprintf(why, why_len, "at most %u context labels", UW_CONTEXT_LABELS_MAX), -1;
	strcpy(s->labels[s->nlabels++], name);
	return 0;
}

int context_spec_labels(struct context_spec *s, const char *list, char *why, size_t why_len)
{
	struct context_spec fresh = {.otel = s->otel};
	const char *p = list;
	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (!*p)
			break;
		const char *end = p;
		while (*end && *end != ',')
			end++;
		const char *last = end;
		while (last > p && (last[-1] == ' ' || last[-1] == '\t'))
			last--;
		char name[UW_CONTEXT_NAME_LEN + 1];
		size_t n = (size_t)(last - p);
		if (n >= sizeof name)
			n = sizeof name - 1; /* too long: refused by the check as it stands */
		memcpy(name, p, n);
		name[n] = '\0';
		if (context_spec_add_label(&fresh, name, why, why_len) != 0)
			return -1;
		p = end;
	}
	*s = fresh;
	return 0;
}

void context_spec_labels_text(const struct context_spec *s, char *out, size_t len)
{
	size_t o = 0;
	out[0] = '\0';
	for (uint32_t i = 0; i < s->nlabels && o < len; i++)
		o += (size_t)snprintf(out + o, len - o, "%s%s", i ? ", " : "", s->labels[i]);
}

void context_spec_to_options(const struct context_spec *s, struct uw_options *o)
{
	o->context_otel = s->otel;
	o->ncontext_labels = s->nlabels;
	memcpy(o->context_labels, s->labels, sizeof o->context_labels);
}

/* ---- counting ---- */

/* A request's key at most: its flag and ids, then a line per label. */
#define CONTEXTS_KEY_MAX (1 + 24 + UW_CONTEXT_LABELS_MAX * (UW_CONTEXT_NAME_LEN + UW_CONTEXT_VALUE_LEN + 2))

struct contexts {
	struct context_spec spec;  /* the one label values are of */
	struct hash_map requests;  /* a request's key (contexts_key) to its id - 1, this batch */
	struct tally tally;        /* samples by (second, thread, stack, request id) */
	struct hash_map values;    /* "INDEX\0VALUE" of label values met, the process's life */
	uint32_t nvalues[UW_CONTEXT_LABELS_MAX];
	struct contexts_stats stats;
};

struct contexts *contexts_new(void)
{
	return calloc(1, sizeof(struct contexts));
}

void contexts_free(struct contexts *c)
{
	if (!c)
		return;
	hash_map_clear(&c->requests);
	hash_map_clear(&c->values);
	tally_free(&c->tally);
	free(c);
}

/* A label's value as kept: past the values a label may have, CONTEXTS_OTHER.  NULL when out of memory. */
static const char *contexts_value(struct contexts *c, uint32_t index, const char *value)
{
	char key[4 + UW_CONTEXT_VALUE_LEN];
	size_t vlen = strnlen(value, UW_CONTEXT_VALUE_LEN - 1);
	key[0] = (char)('0' + index);
	key[1] = '\0';
	memcpy(key + 2, value, vlen);
	int64_t seen;
	if (hash_map_get(&c->values, key, 2 + vlen, &seen))
		return value;
	if (c->nvalues[index] >= CONTEXTS_VALUES_MAX) {
		c->stats.folded++;
		return CONTEXTS_OTHER;
	}
	if (hash_map_put(&c->values, key, 2 + vlen, 1) != 0)
		return NULL;
	c->nvalues[index]++;
	return value;
}

/*
 * A request's key: 1 and its ids when it has a span (else 0), then its
 * labels as "key=value" lines sorted by key.  Its length, 0 when out of memory.
 */
static size_t contexts_key(struct contexts *c, const struct uw_context *ctx, char *out, size_t cap)
{
	size_t o = 0;
	out[o++] = ctx->has_span ? 1 : 0;
	if (ctx->has_span) {
		memcpy(out + o, ctx->trace_id, 16);
		memcpy(out + o + 16, ctx->span_id, 8);
		o += 24;
	}
	/* Sorted by key: a few labels, so a selection of the least left each time. */
	bool used[UW_CONTEXT_LABELS_MAX] = {false};
	for (uint32_t n = 0; n < ctx->nlabels; n++) {
		int best = -1;
		for (uint32_t i = 0; i < ctx->nlabels; i++) {
			uint32_t ix = ctx->labels[i].index;
			if (!used[i] && ix < c->spec.nlabels &&
			    (best < 0 || strcmp(c->spec.labels[ix], c->spec.labels[ctx->labels[best].index]) < 0))
				best = (int)i;
		}
		if (best < 0)
			break;
		used[best] = true;
		uint32_t ix = ctx->labels[best].index;
		const char *value = contexts_value(c, ix, ctx->labels[best].value);
		if (!value)
			return 0;
		int w = snprintf(out + o, cap - o, "%s%s=%s", n ? "\n" : "", c->spec.labels[ix], value);
		if (w < 0 || (size_t)w >= cap - o)
			return 0;
		o += (size_t)w;
	}
	return o;
}

int contexts_count(struct contexts *c, const struct context_spec *spec, const struct uw_context *ctx,
                   int64_t second, uint64_t thread_id, uint32_t stack, bool idle)
{
	if (!context_spec_equal(&c->spec, spec)) {
		/* Other names: the values met were of the old ones. */
		c->spec = *spec;
		hash_map_clear(&c->values);
		memset(c->nvalues, 0, sizeof c->nvalues);
	}
	char key[CONTEXTS_KEY_MAX];
	size_t len = contexts_key(c, ctx, key, sizeof key);
	if (len <= 1)
		return len ? 0 : -1; /* nothing asked for was set (a span torn, a label folded away alone) */
	int64_t id;
	if (!hash_map_get(&c->requests, key, len, &id)) {
		if (c->requests.len >= CONTEXTS_MAX) {
			c->stats.cut++;
			return -1;
		}
		id = (int64_t)c->requests.len;
		if (hash_map_put(&c->requests, key, len, id) != 0)
			return -1;
	}
	if (tally_add_in(&c->tally, NULL, second, thread_id, stack, (uint32_t)id + 1, 1, idle ? TALLY_IDLE : 0) != 0)
		return -1;
	c->stats.samples++;
	return 0;
}

/* A batch being made: rows merged by (bucket, thread, stack, request), requests given batch indices. */
struct contexts_batch {
	struct contexts *c;
	struct store_batch *b;
	int target;
	unsigned width;
	int32_t (*batch_stack)(void *ctx, uint32_t stack);
	void *batch_stack_ctx;
	int32_t *declared; /* a request id's index in the batch, -1 before */
	struct contexts_row {
		int64_t bucket;
		uint64_t thread_id;
		int32_t stack, request;
		uint64_t count, idle;
	} *rows;
	size_t nrows, rows_cap;
	struct hash index;
};

static bool contexts_row_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct contexts_row *r = &((const struct contexts_batch *)ctx)->rows[id], *k = key;
	return r->stack == k->stack && r->request == k->request && r->thread_id == k->thread_id &&
	       r->bucket == k->bucket;
}

/* The batch's index of request id (1-based), declared at first use.  -1 when it fails. */
static int32_t contexts_declare(struct contexts_batch *cb, uint32_t id)
{
	if (cb->declared[id - 1] >= 0)
		return cb->declared[id - 1];
	/* Ids are given in the order requests are met, as the map keeps its entries. */
	const struct hash_map_entry *e = &cb->c->requests.entries[id - 1];
	if (e->value != (int64_t)(id - 1))
		return -1;
	const uint8_t *k = e->key;
	bool span = k[0] == 1;
	size_t at = span ? 25 : 1;
	char labels[CONTEXTS_KEY_MAX];
	size_t n = e->len - at < sizeof labels - 1 ? e->len - at : sizeof labels - 1;
	memcpy(labels, k + at, n);
	labels[n] = '\0';
	return cb->declared[id - 1] = store_batch_context(cb->b, span ? k + 1 : NULL, span ? k + 17 : NULL, labels);
}

static int contexts_row_add(void *ctx, const struct tally_entry *e, uint64_t count)
{
	struct contexts_batch *cb = ctx;
	int32_t stack = cb->batch_stack(cb->batch_stack_ctx, e->stack);
	int32_t request = e->context ? contexts_declare(cb, e->context) : -1;
	if (stack < 0 || request < 0)
		return -1;
	struct contexts_row key = {.bucket = e->second - ((e->second % cb->width) + cb->width) % cb->width,
	                           .thread_id = e->thread_id, .stack = stack, .request = request};
	uint32_t hash = hash_u64((uint64_t)key.bucket ^ hash_u64(key.thread_id) ^ (uint64_t)stack << 20 ^
	                         (uint64_t)request << 40);
	if (hash_reserve(&cb->index, 1) != 0 ||
	    array_reserve((void **)&cb->rows, &cb->rows_cap, cb->nrows, sizeof *cb->rows, NULL) != 0)
		return -1;
	struct hash_slot *slot = hash_probe(&cb->index, hash, contexts_row_equal, cb, &key);
	if (!slot->id) {
		cb->rows[cb->nrows] = key;
		hash_fill(&cb->index, slot, hash, (uint32_t)cb->nrows++);
	}
	cb->rows[slot->id - 1].count += count;
	cb->rows[slot->id - 1].idle += e->idle - e->idle_handed;
	return 0;
}

int contexts_batch(struct contexts *c, struct store_batch *b, int target, unsigned width,
                   int32_t (*batch_stack)(void *ctx, uint32_t stack), void *batch_stack_ctx)
{
	if (!c->tally.unhanded) {
		contexts_drop(c);
		return 0;
	}
	struct contexts_batch cb = {.c = c, .b = b, .target = target, .width = width ? width : 10,
	                            .batch_stack = batch_stack, .batch_stack_ctx = batch_stack_ctx};
	int rc = -1;
	if ((cb.declared = malloc(c->requests.len * sizeof *cb.declared))) {
		memset(cb.declared, 0xff, c->requests.len * sizeof *cb.declared);
		rc = tally_hand(&c->tally, contexts_row_add, &cb);
		for (size_t i = 0; rc == 0 && i < cb.nrows; i++)
			rc = store_batch_context_samples(b, target, cb.rows[i].bucket, cb.width, cb.rows[i].thread_id,
			                                 cb.rows[i].stack, cb.rows[i].request, cb.rows[i].count,
			                                 cb.rows[i].idle) < 0
			         ? -1
			         : 0;
	}
	free(cb.declared);
	free(cb.rows);
	hash_free(&cb.index);
	contexts_drop(c);
	return rc;
}

void contexts_drop(struct contexts *c)
{
	tally_clear(&c->tally);
	hash_map_clear(&c->requests);
}

void contexts_stats(const struct contexts *c, struct contexts_stats *out)
{
	*out = c->stats;
}

size_t contexts_bytes(const struct contexts *c)
{
	return sizeof *c + tally_bytes(&c->tally) + hash_map_memory(&c->requests) + hash_map_memory(&c->values);
}
