/*
 * An arena: many small allocations freed together.  A response is built as
 * a tree of protobuf-c messages; they all come from one arena and go with it
 * once the response is packed.
 */
#ifndef PYPROFD_ARENA_H
#define PYPROFD_ARENA_H

#include <stddef.h>

struct arena {
	struct arena_block *blocks;
};

void *arena_alloc(struct arena *a, size_t size); /* zeroed; NULL if out of memory */
char *arena_strdup(struct arena *a, const char *s); /* NULL stays NULL */
void *arena_dup(struct arena *a, const void *src, size_t size); /* NULL if out of memory */
/* A protobuf-c message, initialised: ARENA_MESSAGE(a, Pyprofd__Frame, PYPROFD__FRAME__INIT). */
#define ARENA_MESSAGE(a, type, init) ((type *)arena_dup((a), &(type)init, sizeof(type)))
void arena_free(struct arena *a);
/* Bytes its blocks hold, used or not. */
size_t arena_bytes(const struct arena *a);
/* Free everything allocated, keeping the largest block: an arena reused this way stops allocating. */
void arena_clear(struct arena *a);

#endif
