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
                   enum check_role role, raddr_t frame, struct uw_error *err)
{
	if (array_reserve((void **)&w->checks, &w->checks_cap, w->nchecks, sizeof *w->checks, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	struct check *c = &w->checks[w->nchecks++];
	c->addr = addr;
	c->len = len;
	c->role = (uint8_t)role;
	c->frame = frame;
	c->in_base = c->reread = c->changed = false;
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
	    validate_watch(w, addr + L->frame.instr_ptr, f + L->frame.instr_ptr, 8, CHECK_LINKS, addr, err))
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
		return validate_watch(w, addr + L->frame.back, f + L->frame.back, 8, CHECK_LINKS, addr, err) ||
		       (with_code &&
		        validate_watch(w, addr + L->frame.code, f + L->frame.code, 8, CHECK_LINKS, addr, err));
	}
	return validate_watch(w, addr + lo, f + lo, hi - lo, CHECK_LINKS, addr, err);
}

/*
 * Read checked windows again, in one process_vm_readv, whose ranges the
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

/* One re-read: its ranges (the pointers, the frames' windows, the pointers again). */
struct reread {
	struct remote_range *ranges;
	uint32_t ntops;    /* ranges [0, ntops) and [after, after + ntops) are the pointers */
	uint32_t after;
	bool held;         /* the pointers and the windows all as the walk saw them */
};

/* Code objects whose headers one re-read takes along, at most. */
#define VALIDATE_CODES_MAX 8

/*
 * The headers of the code objects of the frames new since the last walk
 * (raw[0, fresh)), which chain_resolve checks next, one read each: taken
 * along at the end of the re-read instead, after the pointers' second
 * read, where they change nothing of its proof.  Appended to ranges from
 * n; their count.
 */
static uint32_t validate_codes_along(struct walk *w, const struct raw_frame *raw, uint32_t fresh,
                                     struct remote_range *ranges, uint32_t n)
{
	struct uw_target *t = w->t;
	uint32_t len = t->layout.code.size, added = 0, room = view_keep_room(t);
	/* No more than the view keeps: a header read and dropped would be read again. */
	if (room > VALIDATE_CODES_MAX)
		room = VALIDATE_CODES_MAX;
	for (uint32_t i = 0; i < fresh && added < room; i++) {
		raddr_t code = raw[i].code;
		if (raw[i].kind != UW_FRAME_PYTHON || !code || code_checked(t, code))
			continue;
		bool twice = false;
		for (uint32_t k = 0; k < added && !twice; k++)
			twice = ranges[n + k].addr == code;
		uint8_t *buf = twice ? NULL : view_room_for(t, code, len);
		if (buf)
			ranges[n + added++] = (struct remote_range){.addr = code, .len = len, .buf = buf};
	}
	return added;
}

/* How far past the pointer to the innermost frame the marker may lie for one range to hold both. */
#define VALIDATE_MARKER_SPAN 64
/* How far a frame's links range is stretched to take its instruction too, rather than a range of its own. */
#define VALIDATE_INSTR_STRETCH 256

/*
 * Read again the thread's pointers and the windows of the frames not in
 * the base (and, after them, the code headers of validate_codes_along).
 * Each window read notes its range and whether it changed.
 */
static int validate_reread(struct walk *w, raddr_t top, const struct raw_frame *raw, uint32_t fresh,
                           struct reread *rr, struct uw_error *err)
{
	const struct py_layout *L = &w->t->layout;
	struct check **frames = w->moved;
	struct remote_range *ranges = w->ranges;
	uint32_t nframes = 0;
	for (uint32_t i = 0; i < w->nchecks; i++) {
		struct check *c = &w->checks[i];
		c->reread = c->changed = false;
		if (c->role == CHECK_LINKS && !c->in_base)
			frames[nframes++] = c;
	}
	*rr = (struct reread){.ranges = ranges, .held = true};
	if (nframes == 0)
		return 0; /* nothing new: the stack is one already seen whole */
	qsort(frames, nframes, sizeof *frames, validate_check_cmp);

	uint32_t n = 0;
	size_t total = 0;
	/*
	 * 3.15: the marker and its sequence lie a few words after the pointer
	 * to the innermost frame: its range stretches over them, so both ends
	 * of the re-read tell where the marker stood too (marker_partial, prove_marker.c).
	 */
	uint32_t marker_range = UINT32_MAX;
	for (uint32_t i = 0; i < w->nchecks; i++)
		if (w->checks[i].role != CHECK_LINKS) {
			const struct check *c = &w->checks[i];
			uint32_t len = c->len;
			if (c->role == CHECK_CURRENT && w->reread_marker_at > c->addr &&
			    w->reread_marker_at + 16 - c->addr <= VALIDATE_MARKER_SPAN) {
				marker_range = n;
				len = (uint32_t)(w->reread_marker_at + 16 - c->addr);
			}
			ranges[n++] = (struct remote_range){.addr = c->addr, .len = len};
			total += len;
		}
	rr->ntops = n;
	for (uint32_t i = 0; i < nframes;) {
		raddr_t start = frames[i]->addr, end = start + frames[i]->len;
		uint32_t j = i;
		for (; j < nframes && frames[j]->addr <= end + 256; j++) {
			if (frames[j]->addr + frames[j]->len > end)
				end = frames[j]->addr + frames[j]->len;
			frames[j]->range = n;
			frames[j]->reread = true;
		}
		ranges[n++] = (struct remote_range){.addr = start, .len = (uint32_t)(end - start)};
		total += end - start;
		i = j;
	}
	/*
	 * And where the walk's innermost frame stands, should the marker be on
	 * it: in the range of its links when one was read, else on its own.
	 */
	raddr_t top_at = 0;
	if (marker_range != UINT32_MAX && top && L->frame.instr_ptr != LAYOUT_ABSENT) {
		top_at = top + L->frame.instr_ptr;
		bool within = false;
		for (uint32_t i = rr->ntops; i < n && !within; i++)
			if (ranges[i].addr <= top && top < ranges[i].addr + ranges[i].len &&
			    top_at + 8 - ranges[i].addr <= ranges[i].len + VALIDATE_INSTR_STRETCH) {
				if (top_at + 8 > ranges[i].addr + ranges[i].len) {
					total += top_at + 8 - (ranges[i].addr + ranges[i].len);
					ranges[i].len = (uint32_t)(top_at + 8 - ranges[i].addr);
				}
				within = true;
			}
		if (!within) {
			ranges[n++] = (struct remote_range){.addr = top_at, .len = 8};
			total += 8;
		}
	}
	rr->after = n;
	for (uint32_t i = 0; i < rr->ntops; i++) {
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
	uint32_t codes = validate_codes_along(w, raw, fresh, ranges, n);
	if (remote_read_batch(&w->t->mem, ranges, n + codes, err) != 0)
		return -1;
	for (uint32_t i = n; i < n + codes; i++)
		view_keep(w->t, &ranges[i]);
	raddr_t current = 0;
	for (uint32_t i = 0, k = 0; i < w->nchecks; i++)
		if (w->checks[i].role != CHECK_LINKS) {
			rr->held = rr->held && validate_holds(&w->checks[i], &ranges[k]) &&
			           validate_holds(&w->checks[i], &ranges[rr->after + k]);
			if (w->checks[i].role == CHECK_CURRENT && ranges[k].got >= 8)
				current = load_u64(ranges[k].buf, 0);
			k++;
		}
	/* The marker stood through the re-read: what a part below it rests on. */
	if (marker_range != UINT32_MAX) {
		const struct remote_range *first = &ranges[marker_range];
		const struct remote_range *last = &ranges[rr->after + marker_range];
		uint32_t at = (uint32_t)(w->reread_marker_at - first->addr);
		if (first->got == first->len && last->got == last->len &&
		    memcmp(first->buf + at, last->buf + at, 16) == 0) {
			w->reread_marker_read = true;
			w->reread_current = current;
			w->reread_marker = load_u64(first->buf, at);
			w->reread_marker_seq = load_u64(first->buf, at + 8);
			w->reread_top = 0;
			for (uint32_t i = rr->ntops; top_at && i < rr->after && !w->reread_top; i++)
				if (ranges[i].addr <= top_at && top_at + 8 <= ranges[i].addr + ranges[i].got) {
					w->reread_top = top;
					w->reread_top_pos = load_u64(ranges[i].buf, (uint32_t)(top_at - ranges[i].addr));
				}
		}
	}
	for (uint32_t i = 0; i < nframes; i++) {
		frames[i]->changed = !validate_holds(frames[i], &ranges[frames[i]->range]);
		rr->held = rr->held && !frames[i]->changed;
	}
	return 0;
}

/*
 * Where the thread's pointers stood through a re-read: the innermost frame
 * when they read the same at both ends (and the way to them as the walk
 * found it), 0 otherwise.
 */
static raddr_t validate_stood(const struct walk *w, const struct reread *rr)
{
	raddr_t current = 0;
	for (uint32_t i = 0, k = 0; i < w->nchecks; i++) {
		const struct check *c = &w->checks[i];
		if (c->role == CHECK_LINKS)
			continue;
		const struct remote_range *before = &rr->ranges[k], *after = &rr->ranges[rr->after + k];
		k++;
		if (before->got < c->len || after->got < c->len ||
		    memcmp(before->buf, after->buf, c->len) != 0 ||
		    (c->role == CHECK_PATH && memcmp(before->buf, c->expect, c->len) != 0))
			return 0;
		if (c->role == CHECK_CURRENT)
			current = load_u64(before->buf, 0);
	}
	return current;
}

/*
 * The instruction a re-read found for a caller's frame (its check instr):
 * false when none was read again (a base frame's) or the read fell short.
 */
static bool validate_reread_instr(const struct remote_range *ranges, const struct check *instr,
                                  uint64_t *pos)
{
	const struct remote_range *r = instr && instr->reread ? &ranges[instr->range] : NULL;
	if (!r || instr->addr + 8 > r->addr + r->got)
		return false;
	*pos = load_u64(r->buf, (uint32_t)(instr->addr - r->addr));
	return true;
}

/*
 * Whether the walk's frame at addr and those below it read in the re-read
 * as the walk saw them, but for addr's own instruction, which may have
 * moved on (the thread stands in that frame): *instr is its check, NULL
 * when the walk kept none (the frame was its innermost).
 */
static bool validate_held_from(const struct walk *w, raddr_t addr, const struct check **instr)
{
	const struct py_layout *L = &w->t->layout;
	/* Checks are in walk order, innermost first: from the frame's first on, its own and below. */
	uint32_t from = 0;
	while (from < w->nchecks &&
	       (w->checks[from].role != CHECK_LINKS || w->checks[from].frame != addr))
		from++;
	*instr = NULL;
	for (uint32_t i = from; i < w->nchecks; i++) {
		const struct check *c = &w->checks[i];
		if (c->role != CHECK_LINKS)
			continue;
		if (c->frame == addr && c->addr == addr + L->frame.instr_ptr)
			*instr = c;
		else if (c->changed)
			return false;
	}
	return true;
}

/*
 * A thread whose stack moved under the re-read, but which stood in one
 * frame of the walk's chain through all of it (its pointers the same at
 * both ends), had then the stack from that frame down if those frames
 * still held what the walk saw: the proof of a stack that held whole, for
 * the part the thread had not returned from, a few microseconds after the
 * walk.  The frame it stood in is its innermost, at the instruction the
 * re-read found.  Returns how many innermost frames of the walk the thread
 * had returned from, or -1 when the re-read proves no part of the stack.
 */
static int64_t validate_stood_in(struct walk *w, uint32_t first, uint32_t nraw,
                                 const struct reread *rr)
{
	const struct py_layout *L = &w->t->layout;
	raddr_t current = validate_stood(w, rr);
	uint32_t returned = 1;
	while (returned < nraw && (w->raw[first + returned].addr != current || !current))
		returned++;
	/* 3.8-3.10: a caller's instruction is not among the bytes read again. */
	if (returned >= nraw || L->frame.instr_ptr == LAYOUT_ABSENT)
		return -1;
	const struct check *instr;
	if (!validate_held_from(w, current, &instr) ||
	    !validate_reread_instr(rr->ranges, instr, &w->raw[first + returned].pos))
		return -1;
	return returned;
}

/*
 * Read the windows of one thread's walk again and compare.  Frames at the
 * base that are exactly as in the thread's last (validated) sample need no
 * second look: their pairs existed; the frame where that base meets the new
 * top is checked with the new part.  0 if all held, 1 if the stack moved
 * under the walk, 2 if the part the thread stood in was proven
 * (validate_stood_in), -1 if it could not be read again.
 */
int validate_stack(struct walk *w, uint32_t first, uint32_t nraw, uint32_t common,
                   uint32_t *returned, struct uw_error *err)
{
	/* The walk's arrays, grown to this stack once and reused by every later sample. */
	if (array_reserve((void **)&w->base, &w->base_cap, common, sizeof *w->base, NULL) ||
	    array_reserve((void **)&w->moved, &w->moved_cap, w->nchecks, sizeof *w->moved, NULL) ||
	    array_reserve((void **)&w->ranges, &w->ranges_cap, 2 * (size_t)w->nchecks + 1 + VALIDATE_CODES_MAX,
	                  sizeof *w->ranges, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	/* The base: every frame below the one where old and new meet. */
	raddr_t *base = w->base;
	uint32_t nbase = 0;
	for (uint32_t d = 0; d + 1 < common; d++)
		if (w->raw[first + nraw - 1 - d].addr)
			base[nbase++] = w->raw[first + nraw - 1 - d].addr;
	qsort(base, nbase, sizeof *base, validate_addr_cmp);
	for (uint32_t i = 0; i < w->nchecks; i++) {
		struct check *c = &w->checks[i];
		c->in_base = c->role == CHECK_LINKS && nbase &&
		             bsearch(&c->frame, base, nbase, sizeof *base, validate_addr_cmp) != NULL;
	}
	struct reread rr;
	raddr_t top = nraw && w->raw[first].kind == UW_FRAME_PYTHON ? w->raw[first].addr : 0;
	/* A walk that kept no frame has no array yet: no offset onto a null pointer. */
	const struct raw_frame *frames = w->raw ? w->raw + first : NULL;
	if (validate_reread(w, top, frames, nraw - common, &rr, err) != 0)
		return -1;
	if (rr.held)
		return 0;
	int64_t back = validate_stood_in(w, first, nraw, &rr);
	if (back < 0) {
		uw_fail(err, UW_ECORRUPT, "the stack moved while it was read");
		return 1;
	}
	*returned = (uint32_t)back;
	return 2;
}

/*
 * 3.15: the frames of the walk from the marked one (index at) down, as a
 * re-read that found the marker the same at both its ends read them: the
 * marked frame alive through it, the frames below it could not change, and
 * those the re-read took again (the rest are the last sample's, proven
 * then) must read as the walk saw them.  The marked frame is where the
 * re-read found its instruction: read as a caller's, or on its own when it
 * is the walk's innermost (reread_top); a marked frame of the base had
 * its instruction read by no re-read, and proves nothing here.
 */
bool validate_below_marker(const struct walk *w, uint32_t first, uint32_t nraw, uint32_t at,
                           uint64_t *pos)
{
	const struct py_layout *L = &w->t->layout;
	if (!w->reread_marker_read || at >= nraw || L->frame.instr_ptr == LAYOUT_ABSENT)
		return false;
	raddr_t marked = w->raw[first + at].addr;
	const struct check *instr;
	if (!validate_held_from(w, marked, &instr))
		return false;
	if (!instr && marked == w->reread_top) {
		*pos = w->reread_top_pos; /* innermost in the walk: read on its own */
		return true;
	}
	return validate_reread_instr(w->ranges, instr, pos);
}
