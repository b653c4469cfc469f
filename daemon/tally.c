/*
 * The one count of samples: how many times each stack id was seen, per
 * second and thread.  A target's tally serves `top` (the last seconds) and
 * the history (what was not handed on yet); `pyprofd record` keeps one for
 * its whole run.  Counting a sample is one hash probe per thread.
 *
 * Stack ids belong to the unwinder's epoch: when it ends, the owner spells
 * out (or hands on) what it needs and clears the tally.
 */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "hash.h"
#include "tally.h"

struct tally_key {
	int64_t second;
	uint64_t thread_id;
	uint32_t stack;
	uint32_t context;
};

static uint32_t tally_hash(const struct tally_key *k)
{
	return hash_u64((uint64_t)k->second * 0x9E3779B97F4A7C15ull ^ hash_u64(k->thread_id) ^
	                (uint64_t)k->stack << 17 ^ (uint64_t)k->context << 41);
}

static bool tally_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tally_entry *e = &((const struct tally *)ctx)->entries[id];
	const struct tally_key *k = key;
	return e->stack == k->stack && e->thread_id == k->thread_id && e->second == k->second &&
	       e->context == k->context;
}

int tally_add(struct tally *t, int64_t second, uint64_t thread_id, uint32_t stack, uint64_t count,
              unsigned flags)
{
	return tally_add_hinted(t, NULL, second, thread_id, stack, count, flags);
}

int tally_add_hinted(struct tally *t, uint32_t *hint, int64_t second, uint64_t thread_id,
                     uint32_t stack, uint64_t count, unsigned flags)
{
	return tally_add_in(t, hint, second, thread_id, stack, 0, count, flags);
}

int tally_add_in(struct tally *t, uint32_t *hint, int64_t second, uint64_t thread_id, uint32_t stack,
                 uint32_t context, uint64_t count, unsigned flags)
{
	struct tally_entry *e = NULL;
	/* A thread's stack mostly stays within a second: its last entry, checked, spares the probe. */
	if (hint && *hint < t->len) {
		e = &t->entries[*hint];
		if (e->stack != stack || e->thread_id != thread_id || e->second != second || e->context != context)
			e = NULL;
	}
	if (!e) {
		struct tally_key key = {second, thread_id, stack, context};
		uint32_t hash = tally_hash(&key);
		if (t->len >= TALLY_MAX_ENTRIES || hash_reserve(&t->index, 1) != 0)
			return -1;
		struct hash_slot *slot = hash_probe(&t->index, hash, tally_equal, t, &key);
		if (!slot->id) {
			if (array_reserve((void **)&t->entries, &t->cap, t->len, sizeof *t->entries, NULL) != 0)
				return -1;
			t->entries[t->len] = (struct tally_entry){.second = second, .thread_id = thread_id,
			                                          .stack = stack, .context = context};
			hash_fill(&t->index, slot, hash, (uint32_t)t->len++);
		}
		e = &t->entries[slot->id - 1];
		if (hint)
			*hint = slot->id - 1;
	}
	e->count += count;
	e->idle += flags & TALLY_IDLE ? count : 0;
	e->gil += flags & TALLY_GIL ? count : 0;
	e->gc += flags & TALLY_GC ? count : 0;
	t->unhanded += count;
	return 0;
}

void tally_visit(const struct tally *t, int64_t since,
                 void (*fn)(void *ctx, const struct tally_entry *e), void *ctx)
{
	for (size_t i = 0; i < t->len; i++)
		if (t->entries[i].second >= since)
			fn(ctx, &t->entries[i]);
}

int tally_hand(struct tally *t, int (*fn)(void *ctx, const struct tally_entry *e, uint64_t count),
               void *ctx)
{
	int rc = 0;
	for (size_t i = 0; i < t->len && rc == 0; i++) {
		struct tally_entry *e = &t->entries[i];
		if (e->handed == e->count)
			continue;
		rc = fn(ctx, e, e->count - e->handed);
	}
	tally_mark_handed(t);
	return rc;
}

void tally_mark_handed(struct tally *t)
{
	for (size_t i = 0; i < t->len; i++) {
		t->entries[i].handed = t->entries[i].count;
		t->entries[i].idle_handed = t->entries[i].idle;
	}
	t->unhanded = 0;
}

/* The index over the entries held, rebuilt in room for them (they moved, or the room shrank). */
static void tally_reindex(struct tally *t, bool shrink)
{
	struct hash fresh = {0};
	if (shrink && hash_reserve(&fresh, (uint32_t)t->len) == 0) {
		hash_free(&t->index);
		t->index = fresh;
	} else {
		/* The room it has fits the entries kept: they are never more than it held. */
		hash_clear(&t->index);
	}
	for (size_t i = 0; i < t->len; i++) {
		const struct tally_entry *e = &t->entries[i];
		struct tally_key key = {e->second, e->thread_id, e->stack, e->context};
		uint32_t hash = tally_hash(&key);
		hash_fill(&t->index, hash_probe(&t->index, hash, tally_equal, t, &key), hash, (uint32_t)i);
	}
}

/*
 * A tally holds the seconds `top` looks at, and keeps the room of its
 * largest: a burst of new stacks (a target's start, an epoch's end, a
 * stalled history) would then hold megabytes per target for good.  Once
 * the entries drained to a quarter of the room, the room goes down to
 * twice them (and never below TALLY_KEEP_ENTRIES).
 */
static size_t tally_room_wanted(const struct tally *t)
{
	return t->len * 2 > TALLY_KEEP_ENTRIES ? t->len * 2 : TALLY_KEEP_ENTRIES;
}

static bool tally_shrink_due(const struct tally *t)
{
	return t->cap > tally_room_wanted(t) * 2;
}

/* Gives back the room tally_shrink_due finds idle; the index follows.  A failure keeps the room. */
static void tally_shrink(struct tally *t)
{
	size_t want = tally_room_wanted(t);
	struct tally_entry *smaller = realloc(t->entries, want * sizeof *t->entries);
	if (smaller) {
		t->entries = smaller;
		t->cap = want;
	}
	tally_reindex(t, true);
}

void tally_prune(struct tally *t, int64_t before)
{
	size_t kept = 0;
	for (size_t i = 0; i < t->len; i++) {
		const struct tally_entry *e = &t->entries[i];
		if (e->second >= before || e->handed != e->count)
			t->entries[kept++] = *e;
	}
	bool moved = kept != t->len;
	t->len = kept;
	if (tally_shrink_due(t))
		tally_shrink(t);
	else if (moved)
		tally_reindex(t, false);
}

void tally_clear(struct tally *t)
{
	t->len = 0;
	t->unhanded = 0;
	if (tally_shrink_due(t))
		tally_shrink(t);
	else
		hash_clear(&t->index);
}

size_t tally_bytes(const struct tally *t)
{
	return t->cap * sizeof *t->entries + hash_memory(&t->index);
}

void tally_free(struct tally *t)
{
	free(t->entries);
	hash_free(&t->index);
	memset(t, 0, sizeof *t);
}
