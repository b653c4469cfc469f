/*
 * The proof that a stack was read whole.  The target keeps running while it
 * is read, so a walk notes the few bytes it relied on (each frame's links,
 * the pointer to the innermost frame) and validate_stack reads them again.
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* Remember that the walk used len bytes at addr (a pointer it followed). */
int validate_watch(struct walk *w, raddr_t addr, const uint8_t *seen, uint32_t len,
                          bool top, raddr_t frame, struct uw_error *err)
{
	if (array_reserve((void **)&w->checks, &w->checks_cap, w->nchecks, sizeof *w->checks, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	struct check *c = &w->checks[w->nchecks++];
	c->addr = addr;
	c->len = len;
	c->top = top;
	c->frame = frame;
	memcpy(c->expect, seen, len);
	return 0;
}

/*
 * The links of a frame (its code and its caller) as one window to re-check.
 * Frames that moved under the walk are what makes a torn stack: a caller read
 * before a return and a callee read after the next call.  A caller's
 * instruction stands still while it calls and moves while it runs, so it is
 * checked too where the layout has one (3.11+).
 */
int validate_watch_links(struct walk *w, raddr_t addr, const uint8_t *f, bool with_code,
                             bool caller, struct uw_error *err)
{
	const struct py_layout *L = &w->t->layout;
	if (caller && L->frame.instr_ptr != LAYOUT_ABSENT &&
	    validate_watch(w, addr + L->frame.instr_ptr, f + L->frame.instr_ptr, 8, false, addr, err))
		return -1;
	uint32_t lo = L->frame.back, hi = L->frame.back + 8;
	if (with_code) {
		if (L->frame.code < lo)
			lo = L->frame.code;
		if (L->frame.code + 8 > hi)
			hi = L->frame.code + 8;
	}
	if (hi - lo > sizeof ((struct check *)0)->expect) {
		/* Far apart: two windows. */
		return validate_watch(w, addr + L->frame.back, f + L->frame.back, 8, false, addr, err) ||
		       (with_code &&
		        validate_watch(w, addr + L->frame.code, f + L->frame.code, 8, false, addr, err));
	}
	return validate_watch(w, addr + lo, f + lo, hi - lo, false, addr, err);
}

/*
 * Read every checked window again, in one process_vm_readv, whose ranges the
 * kernel copies in order: the pointers to the thread's innermost frame, then
 * its frames bottom-up, then the pointers again.  A frame is published only
 * after it is written, so frames read after the pointer are at least as new
 * as it; the pointer unchanged at the end means the stack did not move in
 * between (short of unwinding below and rewinding to the very same frame).
 * If everything still holds what the walk saw, the chain of frames it
 * reported existed as such; if not, the stack moved under it.
 */
static int validate_check_cmp(const void *a, const void *b)
{
	const struct check *x = *(const struct check *const *)a, *y = *(const struct check *const *)b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Whether the bytes a batch read still hold what a check expects. */
static bool validate_holds(const struct check *c, const struct remote_range *r)
{
	return c->addr >= r->addr && c->addr + c->len <= r->addr + r->got &&
	       memcmp(r->buf + (c->addr - r->addr), c->expect, c->len) == 0;
}

static int validate_addr_cmp(const void *a, const void *b)
{
	raddr_t x = *(const raddr_t *)a, y = *(const raddr_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * Read the windows of one thread's walk again and compare.  Frames at the
 * base that are exactly as in the thread's last (validated) sample need no
 * second look: their pairs existed; the frame where that base meets the new
 * top is checked with the new part.  The frames are read in merged ranges
 * between two reads of the pointer to the innermost frame.  0 if all held, 1
 * if the stack moved under the walk, -1 if it could not be read again.
 */
int validate_stack(struct walk *w, uint32_t first, uint32_t nraw, uint32_t common,
                           struct uw_error *err)
{
	struct uw_target *t = w->t;
	/* The walk's arrays, grown to this stack once and reused by every later sample. */
	if (array_reserve((void **)&w->base, &w->base_cap, common, sizeof *w->base, NULL) ||
	    array_reserve((void **)&w->moved, &w->moved_cap, w->nchecks, sizeof *w->moved, NULL) ||
	    array_reserve((void **)&w->ranges, &w->ranges_cap, 2 * (size_t)w->nchecks, sizeof *w->ranges,
	                  NULL) ||
	    array_reserve((void **)&w->range_of, &w->range_of_cap, w->nchecks, sizeof *w->range_of, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	/* The base: every frame below the one where old and new meet. */
	raddr_t *base = w->base;
	uint32_t nbase = 0;
	for (uint32_t d = 0; d + 1 < common; d++)
		if (w->raw[first + nraw - 1 - d].addr)
			base[nbase++] = w->raw[first + nraw - 1 - d].addr;
	qsort(base, nbase, sizeof *base, validate_addr_cmp);
	const struct check **frames = w->moved;
	struct remote_range *ranges = w->ranges;
	uint32_t *range_of = w->range_of;
	int rc = 0;
	uint32_t nframes = 0;
	for (uint32_t i = 0; i < w->nchecks; i++) {
		const struct check *c = &w->checks[i];
		bool in_base = !c->top && nbase &&
		               bsearch(&c->frame, base, nbase, sizeof *base, validate_addr_cmp) != NULL;
		if (!c->top && !in_base)
			frames[nframes++] = c;
	}
	if (nframes == 0)
		goto done; /* nothing new: the stack is one already seen whole */
	qsort(frames, nframes, sizeof *frames, validate_check_cmp);

	uint32_t n = 0, ntops = 0;
	size_t total = 0;
	for (uint32_t i = 0; i < w->nchecks; i++)
		if (w->checks[i].top) {
			ranges[n++] = (struct remote_range){.addr = w->checks[i].addr, .len = w->checks[i].len};
			total += w->checks[i].len;
			ntops++;
		}
	for (uint32_t i = 0; i < nframes;) {
		raddr_t start = frames[i]->addr, end = start + frames[i]->len;
		uint32_t j = i;
		for (; j < nframes && frames[j]->addr <= end + 256; j++) {
			if (frames[j]->addr + frames[j]->len > end)
				end = frames[j]->addr + frames[j]->len;
			range_of[j] = n;
		}
		ranges[n++] = (struct remote_range){.addr = start, .len = (uint32_t)(end - start)};
		total += end - start;
		i = j;
	}
	uint32_t last_top = n;
	for (uint32_t i = 0; i < ntops; i++) {
		ranges[n++] = ranges[i];
		total += ranges[i].len;
	}
	if (total && array_reserve((void **)&w->buf, &w->buf_cap, total - 1, 1, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	size_t off = 0;
	for (uint32_t i = 0; i < n; i++) {
		ranges[i].buf = w->buf + off;
		off += ranges[i].len;
	}
	if (remote_read_batch(&t->mem, ranges, n, err) != 0) {
		rc = -1;
		goto done;
	}
	bool held = true;
	for (uint32_t i = 0, k = 0; i < w->nchecks && held; i++)
		if (w->checks[i].top) {
			held = validate_holds(&w->checks[i], &ranges[k]) &&
			       validate_holds(&w->checks[i], &ranges[last_top + k]);
			k++;
		}
	for (uint32_t i = 0; i < nframes && held; i++)
		held = validate_holds(frames[i], &ranges[range_of[i]]);
	if (!held) {
		uw_fail(err, UW_ECORRUPT, "the stack moved while it was read");
		rc = 1;
	}
done:
	return rc;
}
