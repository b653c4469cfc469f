/*
 * tally — sample counts by (second, thread, stack id), the one count of
 * samples: `top` reads the last seconds of a target's, the history takes
 * what was not handed on yet, `pyprofd record` keeps one for its run.
 */
#ifndef PYPROFD_TALLY_H
#define PYPROFD_TALLY_H

#include <stddef.h>
#include <stdint.h>

#include "hash.h"

struct tally_entry {
	int64_t second;
	uint64_t thread_id;
	uint32_t stack;
	uint32_t context; /* the owner's id of the request it ran in (tally_add_in); 0: none */
	uint64_t count;  /* samples */
	uint64_t handed; /* of which handed on already */
	/* Of count, the samples with each TALLY_* flag; idle_handed of idle handed on already. */
	uint64_t idle, gil, gc, idle_handed;
};
/* What else a sample was: its thread waited, held the GIL, or the collector ran in it. */
#define TALLY_IDLE 0x1u
#define TALLY_GIL 0x2u
#define TALLY_GC 0x4u
struct tally {
	struct tally_entry *entries;
	size_t len, cap;
	struct hash index;
	uint64_t unhanded; /* samples not handed on yet */
};
/* Entries a tally holds at most: past them, counting fails (a bound, not a target). */
#define TALLY_MAX_ENTRIES (1u << 24)
/* Count samples, each with flags (TALLY_*); -1 if out of memory or entries. */
int tally_add(struct tally *t, int64_t second, uint64_t thread_id, uint32_t stack, uint64_t count,
              unsigned flags);
/* The same, *hint the entry this thread's count went to last (kept by the caller; any value at first). */
int tally_add_hinted(struct tally *t, uint32_t *hint, int64_t second, uint64_t thread_id,
                     uint32_t stack, uint64_t count, unsigned flags);
/* The same, counted apart by the owner's context id too. */
int tally_add_in(struct tally *t, uint32_t *hint, int64_t second, uint64_t thread_id, uint32_t stack,
                 uint32_t context, uint64_t count, unsigned flags);
/* Calls fn for every entry of a second from `since` on. */
void tally_visit(const struct tally *t, int64_t since,
                 void (*fn)(void *ctx, const struct tally_entry *e), void *ctx);
/*
 * Hand on what was counted since the last time: fn gets each entry with
 * the count not handed yet (of which e->idle - e->idle_handed idle), until
 * it returns non-zero (that value is returned).  Everything counts as
 * handed afterwards, failed or not.
 */
int tally_hand(struct tally *t, int (*fn)(void *ctx, const struct tally_entry *e, uint64_t count),
               void *ctx);
void tally_mark_handed(struct tally *t);
/* Room a tally keeps however few its entries: a few seconds of a busy target's stacks. */
#define TALLY_KEEP_ENTRIES 1024
/* Forget the entries of seconds before `before` that were handed on (and room left idle). */
void tally_prune(struct tally *t, int64_t before);
void tally_clear(struct tally *t);
/* Bytes it holds. */
size_t tally_bytes(const struct tally *t);
void tally_free(struct tally *t);

#endif
