/*
 * Every version: the proof by equal bytes (prove.h).  A thread whose walk
 * would read, in this sample's batch, exactly the bytes its last whole walk
 * read (thread state, frames, code headers) would make that same walk, so
 * its stack is the one that walk proved.  One memcmp a read, no walk.
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* A thread's reads kept for the proof by equal bytes: more is walked instead. */
#define SAME_BYTES_MAX (256u << 10)

/* The stack the last walk proved, its reads counted for the next plan as if made. */
static int same_bytes_before(struct walk *w, struct thread_cache *tc, raddr_t tstate, uint32_t *stack,
                             bool *truncated, struct uw_error *err)
{
	(void)tstate;
	(void)err;
	struct uw_target *t = w->t;
	if (!tc->same.n || t->opts.no_cache || tc->flags != t->opts.flags)
		return 0;
	const uint8_t *expect = tc->same.bytes;
	for (uint32_t i = 0; i < tc->same.n; i++) {
		const uint8_t *now = view_batch_bytes(t, tc->same.reads[i].addr, tc->same.reads[i].len);
		if (!now || memcmp(now, expect, tc->same.reads[i].len) != 0)
			return 0;
		expect += tc->same.reads[i].len;
	}
	view_reads_again(t, tc->same.reads, tc->same.n);
	*stack = tc->n ? tc->chain[tc->n - 1].stack : 0;
	*truncated = tc->truncated;
	if (tc->n)
		t->stats.frame_cache_full_hits++;
	t->stats.frames_from_cache += tc->n;
	t->stats.steady_hits++;
	return 1;
}

/* After a whole walk from the batch alone: keep its reads and their bytes for same_bytes_before. */
static void same_bytes_proven(struct walk *w, struct thread_cache *tc, raddr_t tstate,
                              const struct proven_walk *p)
{
	(void)tstate;
	struct uw_target *t = w->t;
	uint32_t mark = p->mark;
	if (!p->first_read)
		return;
	uint32_t n;
	const struct used_range *reads = view_reads(t, mark, &n);
	size_t total = 0;
	tc->same.n = 0;
	for (uint32_t i = 0; i < n; i++) {
		total += reads[i].len;
		if (total > SAME_BYTES_MAX || !view_batch_bytes(t, reads[i].addr, reads[i].len))
			return;
	}
	if (!n || array_reserve((void **)&tc->same.reads, &tc->same.cap, n - 1, sizeof *tc->same.reads, NULL) ||
	    (total && array_reserve((void **)&tc->same.bytes, &tc->same.bytes_cap, total - 1, 1, NULL)))
		return;
	memcpy(tc->same.reads, reads, n * sizeof *reads);
	uint8_t *out = tc->same.bytes;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(out, view_batch_bytes(t, reads[i].addr, reads[i].len), reads[i].len);
		out += reads[i].len;
	}
	tc->same.bytes_len = total;
	tc->same.n = n;
}


/*
 * Pages a thread's last whole walk read (each a pin for the kernel): what
 * walking it again costs.  Heap frames (3.8-3.10) are a page each when its
 * reads were not kept.
 */
uint32_t same_bytes_pages(const struct uw_target *t, const struct thread_cache *tc)
{
	if (!tc->same.n)
		return t->layout.frame_model == FRAME_MODEL_OBJECT ? tc->n : 0;
	uint64_t pages = 0;
	raddr_t last_page = 0;
	for (uint32_t i = 0; i < tc->same.n; i++) {
		raddr_t addr = tc->same.reads[i].addr;
		uint32_t len = tc->same.reads[i].len;
		if (!len)
			continue;
		/* Reads in walk order: one that starts on the page the last ended on is not another pin. */
		pages += remote_pages(addr, len) - (pages && addr >> 12 == last_page);
		last_page = (addr + len - 1) >> 12;
	}
	return pages < UINT32_MAX ? (uint32_t)pages : UINT32_MAX;
}


void same_bytes_free(struct same_bytes_state *s)
{
	free(s->reads);
	free(s->bytes);
	memset(s, 0, sizeof *s);
}

static bool same_bytes_serves(const struct uw_target *t)
{
	return !t->opts.no_cache;
}

/* What the last walk read is forgotten until this one proves its own. */
static void same_bytes_prepare(struct walk *w, struct thread_cache *tc, raddr_t tstate)
{
	(void)w;
	(void)tstate;
	tc->same.n = 0;
}

const struct prover prover_same_bytes = {
	.name = "same_bytes",
	.serves = same_bytes_serves,
	.before = same_bytes_before,
	.prepare = same_bytes_prepare,
	.proven = same_bytes_proven,
};
