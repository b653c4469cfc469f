/*
 * The sample's view of remote memory.
 *
 * Consecutive samples of a process read nearly the same addresses: the same
 * thread states, the same frames at the base of each stack, the same code
 * object headers.  So every read a sample makes is remembered, and the next
 * sample starts by reading all of them again in one batched process_vm_readv
 * (merged into few ranges, the top of each stack read with some room to
 * grow).  The walk then finds almost everything in that batch — the data
 * is fresh, only the choice of addresses came from the past — and anything
 * the batch missed is read on its own.  Whether what was read hangs together
 * is sample.c's to prove.
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* Ranges closer than this are read as one. */
#define VIEW_MERGE_GAP 256u
/* Bounds on what one batch may read: a garbage stack must not make it huge. */
#define VIEW_PREFETCH_MAX_BYTES (8u << 20)
#define VIEW_PREFETCH_MAX_RANGES 4096u
#define VIEW_USED_MAX 65536u

static int used_cmp(const void *a, const void *b)
{
	const struct used_range *x = a, *y = b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Issue the planned batch. */
static int view_fetch(struct uw_target *t, struct uw_error *err)
{
	if (t->opts.no_cache || t->nprefetch == 0)
		return 0;
	size_t total = 0;
	for (uint32_t i = 0; i < t->nprefetch; i++)
		total += t->prefetch[i].len;
	if (total > t->prefetch_buf_cap) {
		uint8_t *buf = realloc(t->prefetch_buf, total);
		if (!buf)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		t->prefetch_buf = buf;
		t->prefetch_buf_cap = total;
	}
	size_t off = 0;
	for (uint32_t i = 0; i < t->nprefetch; i++) {
		t->prefetch[i].buf = t->prefetch_buf + off;
		off += t->prefetch[i].len;
	}
	return remote_read_batch(&t->mem, t->prefetch, t->nprefetch, err);
}

int view_begin(struct uw_target *t, struct uw_error *err)
{
	t->nused = 0;
	return view_fetch(t, err);
}

static void view_remember(struct uw_target *t, raddr_t addr, uint32_t len, uint32_t grow)
{
	if (t->opts.no_cache || t->nused >= VIEW_USED_MAX)
		return;
	if (array_reserve((void **)&t->used, &t->used_cap, t->nused, sizeof *t->used, NULL))
		return; /* only an optimisation is lost */
	t->used[t->nused++] = (struct used_range){addr, len, grow};
}

/* The prefetched range holding [addr, addr+len), or NULL. */
static const struct remote_range *view_find(const struct uw_target *t, raddr_t addr, uint32_t len)
{
	uint32_t lo = 0, hi = t->nprefetch;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (t->prefetch[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct remote_range *r = &t->prefetch[lo - 1];
	if (addr + len < addr || addr + len > r->addr + r->got)
		return NULL;
	return r;
}

const uint8_t *view_read(struct uw_target *t, raddr_t addr, uint32_t len, uint32_t grow,
                         struct uw_error *err)
{
	view_remember(t, addr, len, grow);
	if (!t->opts.no_cache) {
		const struct remote_range *r = view_find(t, addr, len);
		if (r) {
			t->stats.prefetch_hits++;
			return r->buf + (addr - r->addr);
		}
		t->stats.prefetch_misses++;
	}
	if (array_reserve((void **)&t->scratch, &t->scratch_cap, t->nscratch, sizeof *t->scratch, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	if (remote_read(&t->mem, addr, buf, len, err) != 0) {
		free(buf);
		return NULL;
	}
	t->scratch[t->nscratch++] = buf;
	return buf;
}

/* Turn this sample's reads into the next sample's batch. */
static void view_plan(struct uw_target *t)
{
	qsort(t->used, t->nused, sizeof *t->used, used_cmp);
	uint32_t n = 0;
	size_t total = 0;
	for (uint32_t i = 0; i < t->nused;) {
		raddr_t start = t->used[i].addr;
		raddr_t end = start + t->used[i].len + t->used[i].grow;
		for (i++; i < t->nused && t->used[i].addr <= end + VIEW_MERGE_GAP; i++) {
			raddr_t e = t->used[i].addr + t->used[i].len + t->used[i].grow;
			if (e > end)
				end = e;
		}
		if (end - start > VIEW_PREFETCH_MAX_BYTES || total + (end - start) > VIEW_PREFETCH_MAX_BYTES ||
		    n >= VIEW_PREFETCH_MAX_RANGES)
			break;
		if (array_reserve((void **)&t->prefetch, &t->prefetch_cap, n, sizeof *t->prefetch, NULL))
			break;
		t->prefetch[n++] = (struct remote_range){.addr = start, .len = (uint32_t)(end - start)};
		total += end - start;
	}
	t->nprefetch = n;
}

int view_refresh(struct uw_target *t, struct uw_error *err)
{
	if (t->opts.no_cache)
		return 0;
	view_plan(t);
	return view_fetch(t, err);
}

void view_end(struct uw_target *t, bool plan_next)
{
	for (uint32_t i = 0; i < t->nscratch; i++)
		free(t->scratch[i]);
	t->nscratch = 0;
	/* A failed sample keeps the last plan: its reads were cut short. */
	if (t->opts.no_cache)
		t->nprefetch = 0;
	else if (plan_next)
		view_plan(t);
	t->nused = 0;
}

void view_free(struct uw_target *t)
{
	view_end(t, false);
	free(t->scratch);
	free(t->prefetch);
	free(t->prefetch_buf);
	free(t->used);
	t->scratch = NULL;
	t->prefetch = NULL;
	t->prefetch_buf = NULL;
	t->used = NULL;
	t->scratch_cap = t->prefetch_cap = t->used_cap = 0;
	t->prefetch_buf_cap = 0;
}
