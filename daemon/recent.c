/*
 * What a target sampled lately: counts by stack id for each of the last
 * RECENT_SECONDS seconds, in a ring.  `pyprofd-ctl top` reads it; it is small
 * and forgets on its own, so the loop never has to prune it.
 */
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"

/* One second's counts: open addressing on the stack id (0 marks a free slot). */
struct recent_second {
	int64_t second;
	uint32_t *stacks;
	uint64_t *counts;
	uint32_t used, cap; /* cap a power of two */
};

struct recent {
	struct recent_second seconds[RECENT_SECONDS];
};

struct recent *recent_new(void)
{
	struct recent *r = calloc(1, sizeof *r);
	if (r)
		for (size_t i = 0; i < RECENT_SECONDS; i++)
			r->seconds[i].second = -1;
	return r;
}

static void second_reset(struct recent_second *s, int64_t second)
{
	s->second = second;
	s->used = 0;
	if (s->stacks)
		memset(s->stacks, 0, s->cap * sizeof *s->stacks);
}

void recent_clear(struct recent *r)
{
	for (size_t i = 0; i < RECENT_SECONDS; i++)
		second_reset(&r->seconds[i], -1);
}

void recent_free(struct recent *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < RECENT_SECONDS; i++) {
		free(r->seconds[i].stacks);
		free(r->seconds[i].counts);
	}
	free(r);
}

static uint32_t slot_of(uint32_t stack, uint32_t cap)
{
	return (stack * 2654435761u) & (cap - 1);
}

static int second_grow(struct recent_second *s)
{
	uint32_t cap = s->cap ? s->cap * 2 : 64;
	uint32_t *stacks = calloc(cap, sizeof *stacks);
	uint64_t *counts = calloc(cap, sizeof *counts);
	if (!stacks || !counts) {
		free(stacks);
		free(counts);
		return -1;
	}
	for (uint32_t i = 0; i < s->cap; i++) {
		if (!s->stacks[i])
			continue;
		uint32_t j = slot_of(s->stacks[i], cap);
		while (stacks[j])
			j = (j + 1) & (cap - 1);
		stacks[j] = s->stacks[i];
		counts[j] = s->counts[i];
	}
	free(s->stacks);
	free(s->counts);
	s->stacks = stacks;
	s->counts = counts;
	s->cap = cap;
	return 0;
}

int recent_add(struct recent *r, int64_t second, uint32_t stack, uint64_t count)
{
	if (stack == 0 || second < 0)
		return 0; /* an empty stack has no function to count */
	struct recent_second *s = &r->seconds[second % RECENT_SECONDS];
	if (s->second != second)
		second_reset(s, second);
	if ((s->used + 1) * 4 > s->cap * 3 && second_grow(s) != 0)
		return -1;
	uint32_t j = slot_of(stack, s->cap);
	while (s->stacks[j] && s->stacks[j] != stack)
		j = (j + 1) & (s->cap - 1);
	if (!s->stacks[j]) {
		s->stacks[j] = stack;
		s->counts[j] = 0;
		s->used++;
	}
	s->counts[j] += count;
	return 0;
}

void recent_visit(const struct recent *r, int64_t since,
                  void (*fn)(void *ctx, uint32_t stack, uint64_t count), void *ctx)
{
	for (size_t i = 0; i < RECENT_SECONDS; i++) {
		const struct recent_second *s = &r->seconds[i];
		if (s->second < 0 || s->second < since)
			continue;
		for (uint32_t j = 0; j < s->cap; j++)
			if (s->stacks[j])
				fn(ctx, s->stacks[j], s->counts[j]);
	}
}
