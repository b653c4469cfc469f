/*
 * A profile being recorded by `pyprofd record`: frames and stacks by their
 * content, so what was counted in different epochs of the unwinder (which
 * renumbers everything) adds up, and sample counts per (thread, stack) in a
 * tally of their own that outlives the epochs.
 * It ends as the export library's profile, which writes every format.
 */
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"

struct profile_frame_key {
	const char *function, *file, *build_id; /* build_id: "" none */
	int32_t line;
	enum uw_frame_kind kind;
	int32_t first_line;
};

static uint32_t profile_frame_hash(const struct profile_frame_key *k)
{
	return hash_bytes(k->function, strlen(k->function)) ^
	       hash_u64((uint64_t)hash_bytes(k->file, strlen(k->file)) << 32 |
	                (uint32_t)k->line) ^ ((uint32_t)k->kind | (uint32_t)k->first_line << 2);
}

static bool profile_frame_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct export_frame *f = &((const struct profile *)ctx)->frames[id];
	const struct profile_frame_key *k = key;
	return f->line == k->line && f->kind == k->kind && f->first_line == k->first_line &&
	       strcmp(f->function, k->function) == 0 && strcmp(f->file, k->file) == 0 &&
	       strcmp(f->build_id, k->build_id) == 0;
}

struct profile_stack_key {
	int32_t parent, frame;
};

static bool profile_stack_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct profile_node *n = &((const struct profile *)ctx)->nodes[id];
	const struct profile_stack_key *k = key;
	return n->parent == k->parent && n->frame == k->frame;
}

/* A frame by content: its index, or -1 if out of memory. */
static int32_t profile_frame(struct profile *p, struct profile_frame_key key)
{
	uint32_t hash = profile_frame_hash(&key);
	if (p->nframes >= INT32_MAX - 1 || hash_reserve(&p->frame_index, 1) != 0)
		return -1;
	struct hash_slot *slot = hash_probe(&p->frame_index, hash, profile_frame_equal, p, &key);
	if (slot->id)
		return (int32_t)slot->id - 1;
	char *function = strdup(key.function), *file = strdup(key.file), *build_id = strdup(key.build_id);
	if (!function || !file || !build_id ||
	    array_reserve((void **)&p->frames, &p->frames_cap, p->nframes, sizeof *p->frames, NULL)) {
		free(function);
		free(file);
		free(build_id);
		return -1;
	}
	p->frames[p->nframes] = (struct export_frame){function, file, key.line, key.kind, key.first_line, build_id};
	hash_fill(&p->frame_index, slot, hash, (uint32_t)p->nframes);
	return (int32_t)p->nframes++;
}

/* The spell sink: a frame by content. */
static int32_t profile_sink_frame(void *ctx, const struct uw_frame *f)
{
	return profile_frame(ctx, (struct profile_frame_key){.function = uw_frame_name(f),
	                                                     .file = f->file ? f->file : "",
	                                                     .line = f->line,
	                                                     .kind = f->kind,
	                                                     .first_line = f->first_line,
	                                                     .build_id = f->build_id ? f->build_id : ""});
}

/* The spell sink: a stack as its parent (-1: none) and innermost frame. */
static int32_t profile_sink_stack(void *ctx, int32_t parent, int32_t frame)
{
	struct profile *p = ctx;
	struct profile_stack_key key = {parent, frame};
	uint32_t hash = hash_u64((uint64_t)(uint32_t)parent << 32 | (uint32_t)frame);
	if (p->nnodes >= INT32_MAX - 1 || hash_reserve(&p->node_index, 1) != 0 ||
	    array_reserve((void **)&p->nodes, &p->nodes_cap, p->nnodes, sizeof *p->nodes, NULL))
		return -1;
	struct hash_slot *slot = hash_probe(&p->node_index, hash, profile_stack_equal, p, &key);
	if (slot->id)
		return (int32_t)slot->id - 1;
	uint32_t depth = parent < 0 ? 1 : p->nodes[parent].depth + 1;
	p->nodes[p->nnodes] = (struct profile_node){.parent = parent, .frame = frame, .depth = depth};
	hash_fill(&p->node_index, slot, hash, (uint32_t)p->nnodes);
	return (int32_t)p->nnodes++;
}

static const struct spell_sink profile_sink = {profile_sink_frame, profile_sink_stack};

/*
 * The frame a sample's request labels root its stack under ("route=/x
 * tenant=42", in the order they were asked for): 1 + its index, 0 for a
 * sample without labels, -1 if out of memory.
 */
static int32_t profile_labels_frame(struct profile *p, const struct uw_context *c)
{
	if (!c || !c->nlabels || !p->context_labels)
		return 0;
	char text[UW_CONTEXT_LABELS_MAX * (UW_CONTEXT_NAME_LEN + UW_CONTEXT_VALUE_LEN + 1)];
	size_t o = 0;
	text[0] = '\0';
	for (uint32_t want = 0; want < UW_CONTEXT_LABELS_MAX; want++)
		for (uint32_t i = 0; i < c->nlabels; i++)
			if (c->labels[i].index == want && o < sizeof text)
				o += (size_t)snprintf(text + o, sizeof text - o, "%s%s=%s", o ? " " : "",
				                      p->context_labels[want], c->labels[i].value);
	int32_t f = profile_frame(p, (struct profile_frame_key){.function = text, .file = "", .build_id = "",
	                                                        .line = -1, .kind = UW_FRAME_PYTHON});
	return f < 0 ? -1 : f + 1;
}

/* The node of stack `node` rooted under frame `root` instead: its frames again, from the root. */
static int32_t profile_reroot(struct profile *p, int32_t node, int32_t root)
{
	uint32_t depth = node >= 0 ? p->nodes[node].depth : 0;
	int32_t *frames = malloc((depth ? depth : 1) * sizeof *frames);
	if (!frames)
		return -1;
	uint32_t d = depth;
	for (int32_t at = node; at >= 0 && d > 0; at = p->nodes[at].parent)
		frames[--d] = p->nodes[at].frame;
	int32_t at = profile_sink_stack(p, -1, root);
	for (uint32_t i = 0; at >= 0 && i < depth; i++)
		at = profile_sink_stack(p, at, frames[i]);
	free(frames);
	return at;
}

void profile_init(struct profile *p)
{
	memset(p, 0, sizeof *p);
	spell_init(&p->spell, &profile_sink, p);
}

void profile_free(struct profile *p)
{
	tally_free(&p->tally);
	tally_free(&p->totals);
	thread_table_free(&p->threads);
	spell_free(&p->spell);
	for (size_t i = 0; i < p->nframes; i++) {
		free((char *)p->frames[i].function);
		free((char *)p->frames[i].file);
		free((char *)p->frames[i].build_id);
	}
	free(p->frames);
	hash_free(&p->frame_index);
	free(p->nodes);
	hash_free(&p->node_index);
	memset(p, 0, sizeof *p);
}

int profile_count(struct profile *p, const struct uw_sample *s, uint64_t count)
{
	for (uint32_t i = 0; i < s->nthreads; i++) {
		const struct uw_sample_thread *th = &s->threads[i];
		/* No Python frames, or a stack that would not hold still: nothing to count. */
		if (!th->stack)
			continue;
		int32_t labels = profile_labels_frame(p, th->context);
		if (labels < 0 || tally_add_in(&p->tally, NULL, 0, th->thread_id, th->stack, (uint32_t)labels, count,
		                               th->idle ? TALLY_IDLE : 0) != 0)
			return -1;
		thread_table_note(&p->threads, i, th, 0);
	}
	return 0;
}

/* One tally entry into the profile's samples, its idle ones apart. */
static int profile_settle_entry(void *ctx, const struct tally_entry *e, uint64_t count)
{
	struct profile *p = ctx;
	int32_t stack = spell_stack(&p->spell, p->settling, e->stack);
	if (stack >= 0 && e->context)
		stack = profile_reroot(p, stack, (int32_t)e->context - 1);
	if (stack < 0)
		return -1;
	uint64_t idle = e->idle - e->idle_handed;
	return tally_add(&p->totals, 0, e->thread_id, (uint32_t)stack, count - idle, 0) ||
	               (idle && tally_add(&p->totals, 0, e->thread_id, (uint32_t)stack, idle, TALLY_IDLE))
	           ? -1
	           : 0;
}

int profile_settle(struct profile *p, const struct uw_target *uw)
{
	p->settling = uw;
	int rc = tally_hand(&p->tally, profile_settle_entry, p);
	tally_clear(&p->tally);
	/* The next epoch numbers its ids afresh. */
	spell_forget(&p->spell);
	return rc;
}

void profile_free_export(struct export_profile *out)
{
	for (uint32_t i = 0; i < out->nstacks; i++)
		free((uint32_t *)out->stacks[i].frames);
	free((struct export_stack *)out->stacks);
	free((struct export_thread *)out->threads);
	memset(out, 0, sizeof *out);
}

/* 1 + the index of a thread in the export's threads, 0 if it has none. */
static uint32_t profile_thread_index(const struct profile *p, uint64_t thread_id)
{
	const struct target_thread *t = thread_table_find(&p->threads, thread_id);
	return t ? (uint32_t)(t - p->threads.v) + 1 : 0;
}

int profile_export(const struct profile *p, pid_t pid, uint64_t start_time, bool no_idle,
                   struct export_profile *out)
{
	memset(out, 0, sizeof *out);
	size_t n = p->totals.len;
	struct export_stack *stacks = calloc(n ? n : 1, sizeof *stacks);
	struct export_thread *threads = calloc(p->threads.n ? p->threads.n : 1, sizeof *threads);
	if (!stacks || !threads) {
		free(stacks);
		free(threads);
		return -1;
	}
	for (size_t i = 0; i < p->threads.n; i++) {
		const struct target_thread *t = &p->threads.v[i];
		threads[i] = (struct export_thread){.thread_id = t->thread_id, .native_id = t->native_id,
		                                    .name = t->name, .pid = pid, .start_time = start_time};
	}
	out->frames = p->frames;
	out->nframes = (uint32_t)p->nframes;
	out->stacks = stacks;
	out->threads = threads;
	out->nthreads = (uint32_t)p->threads.n;
	for (size_t i = 0; i < n; i++) {
		const struct tally_entry *s = &p->totals.entries[i];
		uint64_t count = no_idle ? s->count - s->idle : s->count;
		if (!count)
			continue;
		uint32_t depth = p->nodes[s->stack].depth;
		uint32_t *frames = malloc(depth * sizeof *frames);
		if (!frames) {
			profile_free_export(out);
			return -1;
		}
		/* Root first: filled from the innermost frame back. */
		uint32_t d = depth;
		for (int32_t at = (int32_t)s->stack; at >= 0 && d > 0; at = p->nodes[at].parent)
			frames[--d] = (uint32_t)p->nodes[at].frame;
		stacks[out->nstacks++] = (struct export_stack){.frames = frames,
		                                               .depth = depth,
		                                               .count = count,
		                                               .idle = no_idle ? 0 : s->idle,
		                                               .thread_id = s->thread_id,
		                                               .thread = profile_thread_index(p, s->thread_id)};
	}
	return 0;
}
