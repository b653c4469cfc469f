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

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static uint64_t hash_bytes(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
	return mix64(h);
}

typedef bool (*id_eq_fn)(const struct intern *in, uint32_t id, const void *key);

static uint32_t *index_find(struct id_index *ix, uint64_t hash, const struct intern *in,
                            id_eq_fn eq, const void *key)
{
	uint32_t mask = ix->cap - 1;
	for (uint32_t i = (uint32_t)hash & mask;; i = (i + 1) & mask) {
		uint32_t *slot = &ix->slots[i];
		if (*slot == 0 || eq(in, *slot - 1, key))
			return slot;
	}
}

/* Grow so one more id fits under a 70% load; rehash with the caller's hash. */
static int index_reserve(struct id_index *ix, uint32_t count, struct intern *in,
                         uint64_t (*hash_of)(const struct intern *, uint32_t))
{
	if (ix->cap && (uint64_t)(count + 1) * 10 < (uint64_t)ix->cap * 7)
		return 0;
	uint32_t ncap = ix->cap ? ix->cap * 2 : 1024;
	uint32_t *nslots = calloc(ncap, sizeof *nslots);
	if (!nslots)
		return -1;
	for (uint32_t i = 0; i < ix->cap; i++) {
		uint32_t v = ix->slots[i];
		if (!v)
			continue;
		uint32_t j = (uint32_t)hash_of(in, v - 1) & (ncap - 1);
		while (nslots[j])
			j = (j + 1) & (ncap - 1);
		nslots[j] = v;
	}
	in->bytes += (size_t)(ncap - ix->cap) * sizeof *nslots;
	free(ix->slots);
	ix->slots = nslots;
	ix->cap = ncap;
	return 0;
}

struct str_key {
	const char *s;
	size_t len;
};

static bool str_eq(const struct intern *in, uint32_t id, const void *key)
{
	const struct str_key *k = key;
	return in->str_len[id] == k->len && memcmp(in->strs[id], k->s, k->len) == 0;
}

static uint64_t str_hash_of(const struct intern *in, uint32_t id)
{
	return hash_bytes(in->strs[id], in->str_len[id]);
}

static bool frame_eq(const struct intern *in, uint32_t id, const void *key)
{
	return memcmp(&in->frame_keys[id], key, sizeof(struct frame_key)) == 0;
}

static uint64_t frame_key_hash(const struct frame_key *k)
{
	return mix64(((uint64_t)k->function << 32 | k->file) ^
	             mix64((uint64_t)k->qualname << 32 | (uint32_t)k->line) ^ k->kind);
}

static uint64_t frame_hash_of(const struct intern *in, uint32_t id)
{
	return frame_key_hash(&in->frame_keys[id]);
}

static bool stack_eq(const struct intern *in, uint32_t id, const void *key)
{
	const struct stack_node *k = key;
	return in->stacks[id].parent == k->parent && in->stacks[id].frame == k->frame;
}

static uint64_t stack_key_hash(uint32_t parent, uint32_t frame)
{
	return mix64((uint64_t)parent << 32 | frame);
}

static uint64_t stack_hash_of(const struct intern *in, uint32_t id)
{
	return stack_key_hash(in->stacks[id].parent, in->stacks[id].frame);
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
	free(in->str_index.slots);
	free(in->frame_keys);
	free(in->frames);
	free(in->frame_index.slots);
	free(in->stacks);
	free(in->stack_index.slots);
	memset(in, 0, sizeof *in);
}

int intern_reset(struct intern *in)
{
	intern_free(in);
	return intern_init(in);
}

uint32_t intern_string(struct intern *in, const char *s, size_t len)
{
	struct str_key key = {s, len};
	uint64_t h = hash_bytes(s, len);
	if (index_reserve(&in->str_index, in->nstrs, in, str_hash_of) != 0)
		return INTERN_FAILED;
	uint32_t *slot = index_find(&in->str_index, h, in, str_eq, &key);
	if (*slot)
		return *slot - 1;
	if (in->nstrs >= INTERN_MAX_IDS ||
	    array_reserve((void **)&in->strs, &in->strs_cap, in->nstrs, sizeof *in->strs, &in->bytes) ||
	    array_reserve((void **)&in->str_len, &in->str_len_cap, in->nstrs, sizeof *in->str_len,
	                  &in->bytes))
		return INTERN_FAILED;
	char *copy = malloc(len + 1);
	if (!copy)
		return INTERN_FAILED;
	memcpy(copy, s, len);
	copy[len] = '\0';
	in->bytes += len + 1;
	uint32_t id = in->nstrs++;
	in->strs[id] = copy;
	in->str_len[id] = len;
	*slot = id + 1;
	return id;
}

uint32_t intern_frame(struct intern *in, const struct frame_key *key)
{
	if (index_reserve(&in->frame_index, in->nframes, in, frame_hash_of) != 0)
		return INTERN_FAILED;
	uint32_t *slot = index_find(&in->frame_index, frame_key_hash(key), in, frame_eq, key);
	if (*slot)
		return *slot - 1;
	if (in->nframes >= INTERN_MAX_IDS ||
	    array_reserve((void **)&in->frame_keys, &in->frames_cap, in->nframes,
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
	};
	*slot = id + 1;
	return id;
}

uint32_t intern_stack(struct intern *in, uint32_t parent, uint32_t frame)
{
	struct stack_node key = {.parent = parent, .frame = frame};
	if (index_reserve(&in->stack_index, in->nstacks, in, stack_hash_of) != 0)
		return INTERN_FAILED;
	uint32_t *slot = index_find(&in->stack_index, stack_key_hash(parent, frame), in, stack_eq, &key);
	if (*slot)
		return *slot - 1;
	if (in->nstacks >= INTERN_MAX_IDS ||
	    array_reserve((void **)&in->stacks, &in->stacks_cap, in->nstacks, sizeof *in->stacks,
	                  &in->bytes))
		return INTERN_FAILED;
	uint32_t id = in->nstacks++;
	key.depth = in->stacks[parent].depth + 1;
	in->stacks[id] = key;
	*slot = id + 1;
	return id;
}
