/* The arena's blocks: each a bump allocator, freed all at once. */
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define ARENA_BLOCK 16384u

struct arena_block {
	struct arena_block *next;
	size_t used, size;
	max_align_t data[];
};

void *arena_alloc(struct arena *a, size_t size)
{
	size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
	struct arena_block *b = a->blocks;
	if (!b || b->size - b->used < size) {
		size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
		b = malloc(sizeof *b + cap);
		if (!b)
			return NULL;
		b->size = cap;
		b->used = 0;
		b->next = a->blocks;
		a->blocks = b;
	}
	void *p = (char *)b->data + b->used;
	b->used += size;
	memset(p, 0, size);
	return p;
}

char *arena_strdup(struct arena *a, const char *s)
{
	if (!s)
		return NULL;
	size_t len = strlen(s) + 1;
	char *copy = arena_alloc(a, len);
	if (copy)
		memcpy(copy, s, len);
	return copy;
}

void *arena_dup(struct arena *a, const void *src, size_t size)
{
	void *copy = arena_alloc(a, size);
	if (copy)
		memcpy(copy, src, size);
	return copy;
}

void arena_free(struct arena *a)
{
	while (a->blocks) {
		struct arena_block *next = a->blocks->next;
		free(a->blocks);
		a->blocks = next;
	}
}

size_t arena_bytes(const struct arena *a)
{
	size_t total = 0;
	for (const struct arena_block *b = a->blocks; b; b = b->next)
		total += sizeof *b + b->size;
	return total;
}

void arena_clear(struct arena *a)
{
	struct arena_block *keep = NULL;
	while (a->blocks) {
		struct arena_block *b = a->blocks;
		a->blocks = b->next;
		if (!keep || b->size > keep->size) {
			free(keep);
			keep = b;
		} else {
			free(b);
		}
	}
	if (keep) {
		keep->used = 0;
		keep->next = NULL;
	}
	a->blocks = keep;
}
