/*
 * The hash table of the tree: an index of the caller's dense ids by key.
 *
 * Every table here maps a key to an entry of an array its owner keeps
 * anyway (interned strings, code objects, counts, function rows), so the
 * table holds no keys or values: a slot is an id and 32 bits of its key's
 * hash.  The owner hashes its keys (hash_bytes, hash_u64 below) and says how
 * an entry is compared with a key; growth rehashes from the stored hashes,
 * without asking.  Open addressing with linear probing, at most 3/4 full,
 * doubling; ids go up to HASH_MAX_IDS.  No deletion: owners clear or rebuild.
 *
 * hash_map, at the end, is the one ready-made map on it: byte-string keys,
 * copied, to 64-bit values.
 */
#ifndef PYPROFD_HASH_H
#define PYPROFD_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HASH_NONE UINT32_MAX
#define HASH_MAX_IDS (UINT32_MAX - 1)

struct hash_slot {
	uint32_t hash;
	uint32_t id; /* the entry's id + 1; 0: empty */
};

struct hash {
	struct hash_slot *slots;
	uint32_t cap; /* 0 or a power of two */
	uint32_t count;
};

/* Whether entry `id` of the owner's array (seen through ctx) has `key`. */
typedef bool (*hash_equal_fn)(const void *ctx, uint32_t id, const void *key);

uint32_t hash_bytes(const void *p, size_t len);
uint32_t hash_u64(uint64_t x);

/* Make room for `more` ids beyond those held.  0, or -1 when out of memory. */
int hash_reserve(struct hash *h, uint32_t more);

/*
 * The slot of key: the one holding its id, or the empty one where it goes
 * (then claim it with hash_fill).  Room for one more id must have been made
 * (hash_reserve) when the key may be new.
 */
static inline struct hash_slot *hash_probe(const struct hash *h, uint32_t hash, hash_equal_fn equal,
                                           const void *ctx, const void *key)
{
	uint32_t mask = h->cap - 1;
	for (uint32_t i = hash & mask;; i = (i + 1) & mask) {
		struct hash_slot *s = &h->slots[i];
		if (!s->id || (s->hash == hash && equal(ctx, s->id - 1, key)))
			return s;
	}
}

/* The id of key, or HASH_NONE. */
static inline uint32_t hash_find(const struct hash *h, uint32_t hash, hash_equal_fn equal,
                                 const void *ctx, const void *key)
{
	if (!h->cap)
		return HASH_NONE;
	const struct hash_slot *s = hash_probe(h, hash, equal, ctx, key);
	return s->id ? s->id - 1 : HASH_NONE;
}

/* Claim the empty slot hash_probe gave for a new id. */
static inline void hash_fill(struct hash *h, struct hash_slot *slot, uint32_t hash, uint32_t id)
{
	slot->hash = hash;
	slot->id = id + 1;
	h->count++;
}

/* Find key, or add it as `id`.  The id it has, or HASH_NONE when out of memory. */
uint32_t hash_intern(struct hash *h, uint32_t hash, hash_equal_fn equal, const void *ctx,
                     const void *key, uint32_t id);

/* Bytes the table holds, for the owner's memory budget. */
size_t hash_memory(const struct hash *h);

/* Forget every id, keeping the room. */
void hash_clear(struct hash *h);
void hash_free(struct hash *h);

/* ---- byte-string keys to 64-bit values ---- */

struct hash_map_entry {
	void *key;
	uint32_t len;
	int64_t value;
};

struct hash_map {
	struct hash index;
	struct hash_map_entry *entries;
	size_t len, cap;
	size_t key_bytes; /* the copies of the keys, as allocated */
};

/* True and *value when key is present. */
bool hash_map_get(const struct hash_map *m, const void *key, size_t len, int64_t *value);
/* Insert or overwrite (the key is copied); 0, or -1 when out of memory. */
int hash_map_put(struct hash_map *m, const void *key, size_t len, int64_t value);
/* Empty it, keeping nothing allocated. */
void hash_map_clear(struct hash_map *m);
/* Bytes it holds (index, entries, keys), for the owner's memory bound. */
size_t hash_map_memory(const struct hash_map *m);

#endif
