/*
 * The base library alone: the hash table, the array grower and the arena.
 * Every table and array of the tree is one of these, so their edge cases
 * (growth keeping every id, colliding hashes, keys that are not strings,
 * sizes that overflow) are pinned here once.
 */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "array.h"
#include "hash.h"

/* The owner's entries: 64-bit keys in a dense array. */
struct keys {
	uint64_t *v;
	size_t n, cap;
	unsigned compared; /* how often the table asked */
};

static bool keys_equal(const void *ctx, uint32_t id, const void *key)
{
	struct keys *k = (struct keys *)ctx;
	k->compared++;
	return k->v[id] == *(const uint64_t *)key;
}

static uint32_t keys_add(struct hash *h, struct keys *k, uint64_t key, uint32_t hash)
{
	cr_assert_eq(array_reserve((void **)&k->v, &k->cap, k->n, sizeof *k->v, NULL), 0);
	k->v[k->n] = key;
	uint32_t id = hash_intern(h, hash, keys_equal, k, &key, (uint32_t)k->n);
	if (id == k->n)
		k->n++;
	return id;
}

Test(hash, ids_survive_growth)
{
	struct hash h = {0};
	struct keys k = {0};
	for (uint64_t i = 0; i < 100000; i++)
		cr_assert_eq(keys_add(&h, &k, i * 7919, hash_u64(i * 7919)), i);
	cr_assert_eq(h.count, 100000);
	cr_assert_leq((uint64_t)h.count * 4, (uint64_t)h.cap * 3, "more than 3/4 full");
	for (uint64_t i = 0; i < 100000; i++) {
		uint64_t key = i * 7919;
		cr_assert_eq(hash_find(&h, hash_u64(key), keys_equal, &k, &key), i);
	}
	uint64_t absent = 3;
	cr_assert_eq(hash_find(&h, hash_u64(absent), keys_equal, &k, &absent), HASH_NONE);
	/* Interning a present key gives its id and adds nothing. */
	cr_assert_eq(keys_add(&h, &k, 7919 * 5, hash_u64(7919 * 5)), 5);
	cr_assert_eq(k.n, 100000);
	cr_assert_eq(hash_memory(&h), (size_t)h.cap * sizeof(struct hash_slot));
	hash_free(&h);
	free(k.v);
}

Test(hash, colliding_hashes_are_told_apart_by_the_owner)
{
	struct hash h = {0};
	struct keys k = {0};
	/* Every key the same hash: the table must fall back on the owner's equality. */
	for (uint64_t i = 0; i < 300; i++)
		cr_assert_eq(keys_add(&h, &k, i, 42), i);
	for (uint64_t i = 0; i < 300; i++)
		cr_assert_eq(hash_find(&h, 42, keys_equal, &k, &i), i);
	hash_free(&h);
	free(k.v);
}

Test(hash, equality_is_asked_only_on_a_hash_match)
{
	struct hash h = {0};
	struct keys k = {0};
	for (uint64_t i = 0; i < 1000; i++)
		keys_add(&h, &k, i, hash_u64(i));
	k.compared = 0;
	uint64_t absent = 123456789;
	cr_assert_eq(hash_find(&h, hash_u64(absent), keys_equal, &k, &absent), HASH_NONE);
	cr_assert_leq(k.compared, 1, "the owner was asked %u times about a key it lacks", k.compared);
	hash_free(&h);
	free(k.v);
}

Test(hash, clear_forgets_and_keeps_room)
{
	struct hash h = {0};
	struct keys k = {0};
	for (uint64_t i = 0; i < 64; i++)
		keys_add(&h, &k, i, hash_u64(i));
	uint32_t cap = h.cap;
	hash_clear(&h);
	cr_assert_eq(h.count, 0);
	cr_assert_eq(h.cap, cap);
	uint64_t key = 7;
	cr_assert_eq(hash_find(&h, hash_u64(key), keys_equal, &k, &key), HASH_NONE);
	hash_free(&h);
	cr_assert_eq(hash_find(&h, hash_u64(key), keys_equal, &k, &key), HASH_NONE, "an empty table");
	free(k.v);
}

Test(hash, hashes_spread)
{
	/* Neighbouring integers and strings differing in one byte land far apart. */
	cr_assert_neq(hash_u64(1) & 1023, hash_u64(2) & 1023);
	cr_assert_neq(hash_bytes("ab", 2) & 1023, hash_bytes("ac", 2) & 1023);
	cr_assert_eq(hash_bytes("same", 4), hash_bytes("same", 4));
}

Test(hash_map, bytes_keys_to_values)
{
	struct hash_map m = {0};
	const char with_nul[] = {'a', 0, 'b'};
	cr_assert_eq(hash_map_put(&m, "a", 1, 1), 0);
	cr_assert_eq(hash_map_put(&m, with_nul, sizeof with_nul, 2), 0);
	cr_assert_eq(hash_map_put(&m, "", 0, 3), 0);
	int64_t v;
	cr_assert(hash_map_get(&m, "a", 1, &v) && v == 1);
	cr_assert(hash_map_get(&m, with_nul, sizeof with_nul, &v) && v == 2);
	cr_assert(hash_map_get(&m, "", 0, &v) && v == 3);
	cr_assert_not(hash_map_get(&m, "a", 2, &v), "a key is its bytes and its length");
	cr_assert_eq(hash_map_put(&m, "a", 1, 10), 0);
	cr_assert(hash_map_get(&m, "a", 1, &v) && v == 10, "put overwrites");
	cr_assert_eq(m.len, 3);
	char key[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "key %d", i);
		cr_assert_eq(hash_map_put(&m, key, strlen(key), i), 0);
	}
	for (int i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "key %d", i);
		cr_assert(hash_map_get(&m, key, strlen(key), &v) && v == i);
	}
	hash_map_clear(&m);
	cr_assert_not(hash_map_get(&m, "a", 1, &v));
	cr_assert_eq(hash_map_put(&m, "b", 1, 5), 0, "usable again after a clear");
	hash_map_clear(&m);
}

Test(grow, doubles_and_counts_bytes)
{
	uint32_t *v = NULL;
	size_t cap = 0, bytes = 0;
	cr_assert_eq(array_reserve((void **)&v, &cap, 0, sizeof *v, &bytes), 0);
	cr_assert_eq(cap, 16);
	cr_assert_eq(bytes, 16 * sizeof *v);
	cr_assert_eq(array_reserve((void **)&v, &cap, 15, sizeof *v, &bytes), 0);
	cr_assert_eq(cap, 16, "index 15 fits already");
	cr_assert_eq(array_reserve((void **)&v, &cap, 1000, sizeof *v, &bytes), 0);
	cr_assert_eq(cap, 1024);
	cr_assert_eq(bytes, 1024 * sizeof *v);
	v[1000] = 7;
	free(v);
}

Test(grow, refuses_what_size_t_cannot_hold)
{
	char *v = NULL;
	size_t cap = 0;
	cr_assert_eq(array_reserve((void **)&v, &cap, SIZE_MAX / 2 + 1, 1, NULL), -1);
	cr_assert_eq(array_reserve((void **)&v, &cap, SIZE_MAX / 64, 128, NULL), -1);
	cr_assert_null(v);
	cr_assert_eq(cap, 0);
}

Test(arena, allocations_are_zeroed_aligned_and_freed_together)
{
	struct arena a = {0};
	for (int i = 0; i < 10000; i++) {
		unsigned char *p = arena_alloc(&a, (size_t)(i % 97) + 1);
		cr_assert_not_null(p);
		cr_assert_eq((uintptr_t)p % _Alignof(max_align_t), 0);
		for (int k = 0; k < i % 97 + 1; k++)
			cr_assert_eq(p[k], 0);
		memset(p, 0xff, (size_t)(i % 97) + 1);
	}
	/* Larger than a block: a block of its own. */
	cr_assert_not_null(arena_alloc(&a, 1 << 20));
	cr_assert_str_eq(arena_strdup(&a, "name"), "name");
	cr_assert_null(arena_strdup(&a, NULL));
	arena_free(&a);
	cr_assert_null(a.blocks);
}
