/*
 * Strings, frames and stack prefixes of one target, as small integer ids.
 *
 * A sample names each thread's stack by one id: a node of a prefix tree
 * whose edges are frame ids.  Consumers count ids and resolve them to text
 * only when they need text, so the hot path never hashes a string twice.
 * Ids are dense and stable until intern_reset(); id 0 is "none" everywhere
 * (the empty string, no frame, the empty stack).
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

struct str_key {
	const char *s;
	size_t len;
};

static bool intern_str_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct intern *in = ctx;
	const struct str_key *k = key;
	return in->str_len[id] == k->len && memcmp(in->strs[id], k->s, k->len) == 0;
}

static bool intern_frame_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct intern *in = ctx;
	return memcmp(&in->frame_keys[id], key, sizeof(struct frame_key)) == 0;
}

static uint32_t intern_frame_hash(const struct frame_key *k)
{
	return hash_u64(((uint64_t)k->function << 32 | k->file) ^
	                hash_u64((uint64_t)k->qualname << 32 | (uint32_t)k->line) ^
	                ((uint64_t)(uint32_t)k->first_line << 8 | k->kind));
}

static bool intern_stack_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct intern *in = ctx;
	const struct stack_node *k = key;
	return in->stacks[id].parent == k->parent && in->stacks[id].frame == k->frame;
}

int intern_init(struct intern *in)
{
	memset(in, 0, sizeof *in);
	/* Id 0 of each table is the "none" entry. */
	if (intern_string(in, "", 0) != 0)
		return -1;
	struct frame_key none = {0};
	if (array_reserve((void **)&in->frame_keys, &in->frames_cap, 0, sizeof none, &in->bytes) ||
	    array_reserve((void **)&in->frames, &in->frames_view_cap, 0, sizeof *in->frames,
	                  &in->bytes))
		return -1;
	in->frame_keys[0] = none;
	in->frames[0] = (struct uw_frame){.function = "", .file = NULL, .line = -1};
	in->nframes = 1;
	if (array_reserve((void **)&in->stacks, &in->stacks_cap, 0, sizeof *in->stacks, &in->bytes))
		return -1;
	in->stacks[0] = (struct stack_node){0};
	in->nstacks = 1;
	return 0;
}

void intern_free(struct intern *in)
{
	for (uint32_t i = 0; i < in->nstrs; i++)
		free(in->strs[i]);
	free(in->strs);
	free(in->str_len);
	hash_free(&in->str_index);
	free(in->frame_keys);
	free(in->frames);
	hash_free(&in->frame_index);
	free(in->stacks);
	hash_free(&in->stack_index);
	memset(in, 0, sizeof *in);
}

int intern_reset(struct intern *in)
{
	intern_free(in);
	return intern_init(in);
}

size_t intern_bytes(const struct intern *in)
{
	return in->bytes + hash_memory(&in->str_index) + hash_memory(&in->frame_index) +
	       hash_memory(&in->stack_index);
}

/*
 * key's slot in index, a taken one when key is interned already; NULL when
 * there is no room for one more of the count ids it holds.
 */
static struct hash_slot *intern_slot(struct hash *index, uint32_t hash, hash_equal_fn equal,
                                     const struct intern *in, const void *key, uint32_t count)
{
	if (hash_reserve(index, 1) != 0)
		return NULL;
	struct hash_slot *slot = hash_probe(index, hash, equal, in, key);
	return slot->id || count < INTERN_MAX_IDS ? slot : NULL;
}

uint32_t intern_string(struct intern *in, const char *s, size_t len)
{
	struct str_key key = {s, len};
	uint32_t hash = hash_bytes(s, len);
	struct hash_slot *slot =
		intern_slot(&in->str_index, hash, intern_str_equal, in, &key, in->nstrs);
	if (!slot || slot->id)
		return slot ? slot->id - 1 : INTERN_FAILED;
	if (array_reserve((void **)&in->strs, &in->strs_cap, in->nstrs, sizeof *in->strs, &in->bytes) ||
	    array_reserve((void **)&in->str_len, &in->str_len_cap, in->nstrs, sizeof *in->str_len,
	                  &in->bytes))
		return INTERN_FAILED;
	char *copy = malloc(len + 1);
	if (!copy)
		return INTERN_FAILED;
	memcpy(copy, s, len);
	copy[len] = '\0';
	in->bytes += array_alloc_room(len + 1);
	uint32_t id = in->nstrs++;
	in->strs[id] = copy;
	in->str_len[id] = len;
	hash_fill(&in->str_index, slot, hash, id);
	return id;
}

uint32_t intern_frame(struct intern *in, const struct frame_key *key)
{
	uint32_t hash = intern_frame_hash(key);
	struct hash_slot *slot =
		intern_slot(&in->frame_index, hash, intern_frame_equal, in, key, in->nframes);
	if (!slot || slot->id)
		return slot ? slot->id - 1 : INTERN_FAILED;
	if (array_reserve((void **)&in->frame_keys, &in->frames_cap, in->nframes,
	                  sizeof *in->frame_keys, &in->bytes) ||
	    array_reserve((void **)&in->frames, &in->frames_view_cap, in->nframes,
	                  sizeof *in->frames, &in->bytes))
		return INTERN_FAILED;
	uint32_t id = in->nframes++;
	in->frame_keys[id] = *key;
	in->frames[id] = (struct uw_frame){
		.function = in->strs[key->function],
		.qualname = key->qualname ? in->strs[key->qualname] : NULL,
		.file = key->file ? in->strs[key->file] : NULL,
		.line = key->line,
		.kind = (enum uw_frame_kind)key->kind,
		.first_line = key->first_line,
		.build_id = key->build_id ? in->strs[key->build_id] : NULL,
	};
	hash_fill(&in->frame_index, slot, hash, id);
	return id;
}

uint32_t intern_stack(struct intern *in, uint32_t parent, uint32_t frame)
{
	struct stack_node key = {.parent = parent, .frame = frame};
	uint32_t hash = hash_u64((uint64_t)parent << 32 | frame);
	struct hash_slot *slot =
		intern_slot(&in->stack_index, hash, intern_stack_equal, in, &key, in->nstacks);
	if (!slot || slot->id)
		return slot ? slot->id - 1 : INTERN_FAILED;
	if (array_reserve((void **)&in->stacks, &in->stacks_cap, in->nstacks, sizeof *in->stacks,
	                  &in->bytes))
		return INTERN_FAILED;
	uint32_t id = in->nstacks++;
	key.depth = in->stacks[parent].depth + 1;
	in->stacks[id] = key;
	hash_fill(&in->stack_index, slot, hash, id);
	return id;
}

/* ---- the prefix tree and frames as callers read them ---- */

uint32_t uw_stack_frame(const struct uw_target *t, uint32_t stack)
{
	return stack < t->intern.nstacks ? t->intern.stacks[stack].frame : 0;
}

uint32_t uw_stack_parent(const struct uw_target *t, uint32_t stack)
{
	return stack < t->intern.nstacks ? t->intern.stacks[stack].parent : 0;
}

uint32_t uw_stack_depth(const struct uw_target *t, uint32_t stack)
{
	return stack < t->intern.nstacks ? t->intern.stacks[stack].depth : 0;
}

const struct uw_frame *uw_frame_get(const struct uw_target *t, uint32_t frame)
{
	return frame < t->intern.nframes ? &t->intern.frames[frame] : &t->intern.frames[0];
}
