/*
 * A hash map from byte-string keys to 64-bit values: the writer's interning
 * caches (string, frame, stack content to database id) and the reader's
 * stack and frame caches.  Open addressing with linear probing; keys are
 * copied; no deletion (caches are cleared whole).
 */
#include <stdlib.h>
#include <string.h>

#include "storage.h"

/* FNV-1a: keys are short (ids, names); this is fast enough and well spread. */
static uint64_t map_hash(const void *key, size_t klen)
{
	const unsigned char *p = key;
	uint64_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < klen; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

static struct store_map_slot *map_find(const struct store_map *m, uint64_t h, const void *key,
                                       size_t klen)
{
	size_t mask = m->cap - 1;
	/* The table is never more than 3/4 full, so an empty slot ends the probe. */
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		struct store_map_slot *s = &m->slots[i];
		if (!s->key || (s->hash == h && s->klen == klen && memcmp(s->key, key, klen) == 0))
			return s;
	}
}

bool store_map_get(const struct store_map *m, const void *key, size_t klen, int64_t *value)
{
	if (!m->cap)
		return false;
	const struct store_map_slot *s = map_find(m, map_hash(key, klen), key, klen);
	if (!s->key)
		return false;
	*value = s->value;
	return true;
}

/* Doubles the table (or makes the first one), moving every slot. */
static int map_grow(struct store_map *m)
{
	size_t cap = m->cap ? m->cap * 2 : 64;
	if (cap > SIZE_MAX / sizeof(struct store_map_slot))
		return -1;
	struct store_map_slot *slots = calloc(cap, sizeof *slots);
	if (!slots)
		return -1;
	struct store_map old = *m;
	m->slots = slots;
	m->cap = cap;
	for (size_t i = 0; i < old.cap; i++) {
		if (old.slots[i].key)
			*map_find(m, old.slots[i].hash, old.slots[i].key, old.slots[i].klen) = old.slots[i];
	}
	free(old.slots);
	return 0;
}

int store_map_put(struct store_map *m, const void *key, size_t klen, int64_t value)
{
	if (klen > UINT32_MAX)
		return -1;
	if ((m->len + 1) * 4 > m->cap * 3 && map_grow(m) < 0)
		return -1;
	uint64_t h = map_hash(key, klen);
	struct store_map_slot *s = map_find(m, h, key, klen);
	if (!s->key) {
		void *copy = malloc(klen ? klen : 1);
		if (!copy)
			return -1;
		memcpy(copy, key, klen);
		s->key = copy;
		s->klen = (uint32_t)klen;
		s->hash = h;
		m->len++;
	}
	s->value = value;
	return 0;
}

void store_map_clear(struct store_map *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i].key);
	free(m->slots);
	m->slots = NULL;
	m->cap = m->len = 0;
}
