/* The hash table's out-of-line half: hashing, growth, and the byte-string map. */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "hash.h"

/* The finalizer of MurmurHash3: every input bit reaches every output bit. */
static uint64_t hash_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

uint32_t hash_bytes(const void *p, size_t len)
{
	/* FNV-1a: keys are short names and ids; the mix spreads its low bits. */
	const unsigned char *s = p;
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < len; i++)
		h = (h ^ s[i]) * 0x100000001b3ULL;
	return (uint32_t)hash_mix64(h);
}

uint32_t hash_u64(uint64_t x)
{
	return (uint32_t)hash_mix64(x);
}

int hash_reserve(struct hash *h, uint32_t more)
{
	if (more > HASH_MAX_IDS - h->count)
		return -1;
	uint64_t need = (uint64_t)h->count + more;
	if (h->cap && need * 4 <= (uint64_t)h->cap * 3)
		return 0;
	uint64_t cap = h->cap ? h->cap : 16;
	while (need * 4 > cap * 3)
		cap *= 2;
	if (cap > (1ULL << 31))
		return -1;
	struct hash_slot *slots = calloc((size_t)cap, sizeof *slots);
	if (!slots)
		return -1;
	uint32_t mask = (uint32_t)cap - 1;
	for (uint32_t i = 0; i < h->cap; i++) {
		const struct hash_slot *s = &h->slots[i];
		if (!s->id)
			continue;
		uint32_t j = s->hash & mask;
		while (slots[j].id)
			j = (j + 1) & mask;
		slots[j] = *s;
	}
	free(h->slots);
	h->slots = slots;
	h->cap = (uint32_t)cap;
	return 0;
}

uint32_t hash_intern(struct hash *h, uint32_t hash, hash_equal_fn equal, const void *ctx,
                     const void *key, uint32_t id)
{
	if (hash_reserve(h, 1) != 0)
		return HASH_NONE;
	struct hash_slot *s = hash_probe(h, hash, equal, ctx, key);
	if (s->id)
		return s->id - 1;
	hash_fill(h, s, hash, id);
	return id;
}

size_t hash_memory(const struct hash *h)
{
	return (size_t)h->cap * sizeof *h->slots;
}

void hash_clear(struct hash *h)
{
	if (h->slots)
		memset(h->slots, 0, (size_t)h->cap * sizeof *h->slots);
	h->count = 0;
}

void hash_free(struct hash *h)
{
	free(h->slots);
	memset(h, 0, sizeof *h);
}

/* ---- byte-string keys ---- */

struct hash_map_key {
	const void *p;
	size_t len;
};

static bool hash_map_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct hash_map_entry *e = &((const struct hash_map *)ctx)->entries[id];
	const struct hash_map_key *k = key;
	return e->len == k->len && memcmp(e->key, k->p, k->len) == 0;
}

bool hash_map_get(const struct hash_map *m, const void *key, size_t len, int64_t *value)
{
	struct hash_map_key k = {key, len};
	uint32_t id = hash_find(&m->index, hash_bytes(key, len), hash_map_equal, m, &k);
	if (id == HASH_NONE)
		return false;
	*value = m->entries[id].value;
	return true;
}

int hash_map_put(struct hash_map *m, const void *key, size_t len, int64_t value)
{
	if (len > UINT32_MAX || m->len >= HASH_MAX_IDS || hash_reserve(&m->index, 1) != 0)
		return -1;
	struct hash_map_key k = {key, len};
	uint32_t hash = hash_bytes(key, len);
	struct hash_slot *s = hash_probe(&m->index, hash, hash_map_equal, m, &k);
	if (s->id) {
		m->entries[s->id - 1].value = value;
		return 0;
	}
	void *copy = malloc(len ? len : 1);
	if (!copy || array_reserve((void **)&m->entries, &m->cap, m->len, sizeof *m->entries, NULL)) {
		free(copy);
		return -1;
	}
	memcpy(copy, key, len);
	m->key_bytes += array_alloc_room(len ? len : 1);
	m->entries[m->len] = (struct hash_map_entry){copy, (uint32_t)len, value};
	hash_fill(&m->index, s, hash, (uint32_t)m->len++);
	return 0;
}

void hash_map_clear(struct hash_map *m)
{
	for (size_t i = 0; i < m->len; i++)
		free(m->entries[i].key);
	free(m->entries);
	hash_free(&m->index);
	memset(m, 0, sizeof *m);
}

size_t hash_map_memory(const struct hash_map *m)
{
	return hash_memory(&m->index) + m->cap * sizeof *m->entries + m->key_bytes;
}
