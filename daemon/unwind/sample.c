/*
 * Sampling: runtime → interpreters → thread states → frames → stack ids.
 *
 * Written once against struct py_layout; the two frame models (heap frame
 * objects up to 3.10, interpreter frames from 3.11) differ only in how a
 * frame names its code and instruction.  Every remote read goes through the
 * view (one batched read per sample in steady state), and every thread keeps
 * the chain it had last time, so a sample decodes only the frames that
 * changed: the unchanged base of the stack reuses its stack-prefix id.
 * Every list walked here comes from remote memory and is bounded.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unwind_internal.h"

/* All frames of one sample together; keeps a garbage sample's work bounded. */
#define SAMPLE_MAX_TOTAL_FRAMES (1u << 18)
/* Shim frames do not count as frames, but they are bounded too. */
#define SAMPLE_MAX_LINKS (2u * UW_MAX_FRAMES)
/* Bytes above a stack's top frame the next batch reads: room for new frames. */
#define SAMPLE_TOP_GROW 2048u
/* Bytes of struct pthread searched for the kernel thread id (3.8-3.10). */
#define PTHREAD_SCAN_BYTES 1024
/* Where glibc on x86-64 keeps `tid` in struct pthread: tried first. */
#define PTHREAD_TID_GLIBC_X86_64 720

/* Reads of a thread whose stack keeps moving, before it is left out. */
#define SAMPLE_ATTEMPTS 3
#define UW_SNAPSHOT_THREAD_ATTEMPTS 12

/* A few bytes the walk relied on, read again to prove they did not move. */
struct check {
	raddr_t addr;
	raddr_t frame;   /* the frame whose links these are; 0 for a top pointer */
	uint32_t len;
	bool top;        /* a thread's pointer to its innermost frame */
	uint8_t expect[24];
};

/* One frame as read, before it is decoded. */
struct raw_frame {
	raddr_t addr;
	raddr_t code;
	uint64_t pos;
	uint32_t kind;
};

/* A sample under way; kept by the target so its arrays are reused, not reallocated. */
struct walk {
	struct uw_target *t;
	struct uw_sample *out;
	struct raw_frame *raw; /* the frames of the thread being read, innermost first */
	uint32_t nraw;
	size_t raw_cap;
	struct check *checks;
	uint32_t nchecks;
	size_t checks_cap;
	bool torn; /* the walk failed on values read at different moments, not on garbage */
};

/* Remember that the walk used len bytes at addr (a pointer it followed). */
static int check_add_kind(struct walk *w, raddr_t addr, const uint8_t *seen, uint32_t len,
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
static int check_frame_links(struct walk *w, raddr_t addr, const uint8_t *f, bool with_code,
                             bool caller, struct uw_error *err)
{
	const struct py_layout *L = &w->t->layout;
	if (caller && L->frame.instr_ptr != LAYOUT_ABSENT &&
	    check_add_kind(w, addr + L->frame.instr_ptr, f + L->frame.instr_ptr, 8, false, addr, err))
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
		return check_add_kind(w, addr + L->frame.back, f + L->frame.back, 8, false, addr, err) ||
		       (with_code &&
		        check_add_kind(w, addr + L->frame.code, f + L->frame.code, 8, false, addr, err));
	}
	return check_add_kind(w, addr + lo, f + lo, hi - lo, false, addr, err);
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
static int check_cmp(const void *a, const void *b)
{
	const struct check *x = *(const struct check *const *)a, *y = *(const struct check *const *)b;
	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Whether the bytes a batch read still hold what a check expects. */
static bool check_holds(const struct check *c, const struct remote_range *r)
{
	return c->addr >= r->addr && c->addr + c->len <= r->addr + r->got &&
	       memcmp(r->buf + (c->addr - r->addr), c->expect, c->len) == 0;
}

static int addr_cmp(const void *a, const void *b)
{
	raddr_t x = *(const raddr_t *)a, y = *(const raddr_t *)b;
	return x < y ? -1 : x > y;
}

/* How many frames, from the bottom, a chain shares with the thread's last sample. */
static uint32_t chain_common(const struct uw_target *t, const struct thread_cache *tc,
                             const struct raw_frame *raw, uint32_t n)
{
	uint32_t common = 0;
	if (t->opts.no_cache)
		return 0;
	while (common < n && common < tc->n) {
		const struct raw_frame *r = &raw[n - 1 - common];
		const struct chain_link *c = &tc->chain[common];
		if (r->addr != c->addr || r->code != c->code || r->pos != c->pos || r->kind != c->kind)
			break;
		common++;
	}
	return common;
}

/*
 * Read the windows of one thread's walk again and compare.  Frames at the
 * base that are exactly as in the thread's last (validated) sample need no
 * second look: their pairs existed; the frame where that base meets the new
 * top is checked with the new part.  The frames are read in merged ranges
 * between two reads of the pointer to the innermost frame.  0 if all held, 1
 * if the stack moved under the walk, -1 if it could not be read again.
 */
static int thread_validate(struct walk *w, uint32_t first, uint32_t nraw, uint32_t common,
                           struct uw_error *err)
{
	struct uw_target *t = w->t;
	/* The base: every frame below the one where old and new meet. */
	raddr_t *base = malloc((common ? common : 1) * sizeof *base);
	uint32_t nbase = 0;
	if (!base)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t d = 0; d + 1 < common; d++)
		if (w->raw[first + nraw - 1 - d].addr)
			base[nbase++] = w->raw[first + nraw - 1 - d].addr;
	qsort(base, nbase, sizeof *base, addr_cmp);
	const struct check **frames = malloc((w->nchecks ? w->nchecks : 1) * sizeof *frames);
	struct remote_range *ranges = malloc((2 * w->nchecks + 1) * sizeof *ranges);
	uint32_t *range_of = malloc((w->nchecks ? w->nchecks : 1) * sizeof *range_of);
	uint8_t *buf = NULL;
	int rc = 0;
	if (!frames || !ranges || !range_of) {
		rc = uw_fail(err, UW_ENOMEM, "out of memory");
		goto done;
	}
	uint32_t nframes = 0;
	for (uint32_t i = 0; i < w->nchecks; i++) {
		const struct check *c = &w->checks[i];
		bool in_base = !c->top && nbase &&
		               bsearch(&c->frame, base, nbase, sizeof *base, addr_cmp) != NULL;
		if (!c->top && !in_base)
			frames[nframes++] = c;
	}
	if (nframes == 0)
		goto done; /* nothing new: the stack is one already seen whole */
	qsort(frames, nframes, sizeof *frames, check_cmp);

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
	buf = malloc(total ? total : 1);
	if (!buf) {
		rc = uw_fail(err, UW_ENOMEM, "out of memory");
		goto done;
	}
	size_t off = 0;
	for (uint32_t i = 0; i < n; i++) {
		ranges[i].buf = buf + off;
		off += ranges[i].len;
	}
	if (remote_read_batch(&t->mem, ranges, n, err) != 0) {
		rc = -1;
		goto done;
	}
	bool held = true;
	for (uint32_t i = 0, k = 0; i < w->nchecks && held; i++)
		if (w->checks[i].top) {
			held = check_holds(&w->checks[i], &ranges[k]) &&
			       check_holds(&w->checks[i], &ranges[last_top + k]);
			k++;
		}
	for (uint32_t i = 0; i < nframes && held; i++)
		held = check_holds(frames[i], &ranges[range_of[i]]);
	if (!held) {
		uw_fail(err, UW_ECORRUPT, "the stack moved while it was read");
		rc = 1;
	}
done:
	free(base);
	free(frames);
	free(ranges);
	free(range_of);
	free(buf);
	return rc;
}

/* -------- thread caches -------- */

static void thread_cache_clear(struct thread_cache *tc)
{
	if (tc->stat_fd >= 0)
		close(tc->stat_fd);
	free(tc->chain);
}

void threads_free(struct uw_target *t)
{
	for (uint32_t i = 0; i < t->nthreads; i++)
		thread_cache_clear(&t->threads[i]);
	free(t->threads);
	t->threads = NULL;
	t->nthreads = t->threads_cap = 0;
}

/* Threads are met in the same order every sample, so `hint` nearly always hits. */
static struct thread_cache *threads_lookup(struct uw_target *t, raddr_t tstate, uint32_t hint,
                                           struct uw_error *err)
{
	if (hint < t->nthreads && t->threads[hint].tstate == tstate)
		return &t->threads[hint];
	for (uint32_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].tstate == tstate)
			return &t->threads[i];
	if (array_reserve((void **)&t->threads, &t->threads_cap, t->nthreads, sizeof *t->threads, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	struct thread_cache *tc = &t->threads[t->nthreads++];
	*tc = (struct thread_cache){.tstate = tstate, .stat_fd = -1, .stat_tid = -1};
	return tc;
}

/* Forget the threads that were not in this sample: they ended. */
static void threads_sweep(struct uw_target *t)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < t->nthreads; i++) {
		if (t->threads[i].seen == t->sample_gen)
			t->threads[k++] = t->threads[i];
		else
			thread_cache_clear(&t->threads[i]);
	}
	t->nthreads = k;
}

static size_t threads_bytes(const struct uw_target *t)
{
	size_t bytes = t->threads_cap * sizeof *t->threads;
	for (uint32_t i = 0; i < t->nthreads; i++)
		bytes += t->threads[i].cap * sizeof *t->threads[i].chain;
	return bytes;
}

/* The kernel's state letter of a thread, through a descriptor kept open. */
static char thread_state(struct uw_target *t, struct thread_cache *tc, int64_t tid)
{
	if (tid <= 0)
		return '?';
	if (tc->stat_tid != tid && tc->stat_fd >= 0) {
		close(tc->stat_fd);
		tc->stat_fd = -1;
	}
	if (tc->stat_fd < 0) {
		char path[96];
		snprintf(path, sizeof path, "/proc/%d/task/%lld/stat", (int)t->pid, (long long)tid);
		tc->stat_fd = open(path, O_RDONLY | O_CLOEXEC);
		tc->stat_tid = tid;
		if (tc->stat_fd < 0)
			return '?';
	}
	char buf[512];
	ssize_t n = pread(tc->stat_fd, buf, sizeof buf - 1, 0);
	if (n <= 0) {
		close(tc->stat_fd);
		tc->stat_fd = -1;
		return '?';
	}
	buf[n] = '\0';
	/* The state follows the command name, which may itself hold ") ". */
	char *close_paren = strrchr(buf, ')');
	return close_paren && close_paren[1] == ' ' && close_paren[2] ? close_paren[2] : '?';
}

/* -------- native thread ids, 3.8-3.10 -------- */

static bool tid_is_task(int32_t tid, const pid_t *tasks, int ntasks)
{
	for (int i = 0; i < ntasks; i++)
		if (tid > 0 && tid == tasks[i])
			return true;
	return false;
}

/* Learnt once per target: the first place in the descriptor holding one of the process's tids. */
static int pthread_tid_offset_find(const uint8_t *buf, size_t len, const pid_t *tasks, int ntasks)
{
	if (PTHREAD_TID_GLIBC_X86_64 + 4 <= len &&
	    tid_is_task(load_i32(buf, PTHREAD_TID_GLIBC_X86_64), tasks, ntasks))
		return PTHREAD_TID_GLIBC_X86_64;
	for (size_t off = 0; off + 4 <= len; off += 4)
		if (tid_is_task(load_i32(buf, (uint32_t)off), tasks, ntasks))
			return (int)off;
	return -1;
}

/* glibc and musl: pthread_t is the address of the thread's descriptor, which holds the tid. */
static int64_t pthread_tid(struct walk *w, uint64_t pthread)
{
	struct uw_target *t = w->t;
	if (t->pthread_tid_offset < 0) {
		uint8_t buf[PTHREAD_SCAN_BYTES];
		pid_t *tasks = malloc(UW_MAX_THREADS * sizeof *tasks);
		int ntasks = tasks ? proc_tasks(t->pid, tasks, UW_MAX_THREADS) : -1;
		if (ntasks > 0 && remote_read(&t->mem, pthread, buf, sizeof buf, NULL) == 0)
			t->pthread_tid_offset = pthread_tid_offset_find(buf, sizeof buf, tasks, ntasks);
		free(tasks);
		if (t->pthread_tid_offset < 0)
			return -1;
	}
	const uint8_t *p = view_read(t, pthread + (uint32_t)t->pthread_tid_offset, 4, 0, NULL);
	int32_t tid = p ? load_i32(p, 0) : -1;
	return tid > 0 ? tid : -1;
}

/* -------- frames -------- */

static int raw_push(struct walk *w, uint32_t *n, struct raw_frame f, struct uw_error *err)
{
	if (w->nraw >= SAMPLE_MAX_TOTAL_FRAMES)
		return uw_fail(err, UW_ECORRUPT, "more than %u frames in one sample",
		               SAMPLE_MAX_TOTAL_FRAMES);
	if (array_reserve((void **)&w->raw, &w->raw_cap, w->nraw, sizeof *w->raw, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	w->raw[w->nraw++] = f;
	(*n)++;
	return 0;
}

/* 3.8-3.10: PyFrameObjects linked by f_back.  Innermost first onto w->raw. */
static int collect_frame_objects(struct walk *w, raddr_t addr, uint32_t *n, bool *truncated,
                                 struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;

	while (addr) {
		if (*n >= UW_MAX_FRAMES) {
			*truncated = true;
			break;
		}
		const uint8_t *f = view_read(t, addr, L->frame.size, 0, err);
		if (!f)
			return -1;
		if (t->frame_type && load_u64(f, L->object.ob_type) != t->frame_type)
			return uw_fail(err, UW_ECORRUPT, "object at 0x%llx is not a frame",
			               (unsigned long long)addr);
		if (check_frame_links(w, addr, f, true, false, err) != 0)
			return -1;
		uint32_t lasti = (uint32_t)load_i32(f, L->frame.lasti);
		int32_t lineno = load_i32(f, L->frame.lineno);
		/* 3.8-3.9 keep f_lineno current only while tracing; 3.10 whenever non-zero. */
		if (L->lasti_model == LASTI_BYTES && !load_u64(f, L->frame.trace))
			lineno = 0;
		struct raw_frame rf = {.addr = addr,
		                       .code = load_u64(f, L->frame.code),
		                       .pos = lasti | (uint64_t)(uint32_t)lineno << 32,
		                       .kind = UW_FRAME_PYTHON};
		if (raw_push(w, n, rf, err) != 0)
			return -1;
		raddr_t back = load_u64(f, L->frame.back);
		if (back == addr)
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx is its own caller",
			               (unsigned long long)addr);
		addr = back;
	}
	return 0;
}

/* The live part of a thread's current data-stack chunk (3.11+): [start, top). */
struct live_stack {
	raddr_t top, end; /* end: end of the chunk's allocation */
};

/*
 * 3.11+: _PyInterpreterFrames linked by previous, with shim frames where C
 * entered.  A frame in the current chunk at or above the data stack's top is
 * dead: a pointer to it is the trace of a return the walk did not see whole.
 */
static int collect_interp_frames(struct walk *w, raddr_t addr, const struct live_stack *live,
                                 uint32_t *n, bool *truncated, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	uint32_t links = 0;
	bool native_pending = false, callee_inline = false;
	bool want_native = t->opts.flags & UW_SNAP_NATIVE;

	while (addr) {
		if (*n >= UW_MAX_FRAMES || ++links > SAMPLE_MAX_LINKS) {
			*truncated = true;
			break;
		}
		/* New frames are pushed just above the top one: read some room next time. */
		const uint8_t *f = view_read(t, addr, L->frame.size, links == 1 ? SAMPLE_TOP_GROW : 0, err);
		if (!f)
			return -1;
		raddr_t previous = load_u64(f, L->frame.back);
		if (previous == addr)
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx is its own caller",
			               (unsigned long long)addr);
		if (addr >= live->top && addr < live->end) {
			w->torn = true; /* the top moved between reading it and the pointer to the frame */
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx is above its data stack's top",
			               (unsigned long long)addr);
		}
		uint8_t owner = f[L->frame.owner];
		bool shim = (L->frame.owner_cstack != LAYOUT_OWNER_NONE && owner == L->frame.owner_cstack) ||
		            (L->frame.owner_interpreter != LAYOUT_OWNER_NONE &&
		             owner == L->frame.owner_interpreter);
		if (check_frame_links(w, addr, f, !shim, !shim && *n > 0, err) != 0)
			return -1;
		if (shim) {
			/* The eval loop was entered from C here: C code sits below. */
			native_pending = want_native && *n > 0;
			callee_inline = false;
			addr = previous;
			continue;
		}
		/*
		 * 3.12-3.13 mark a running frame with stacktop -1 and set it when
		 * the frame calls: a caller that runs has returned from the callee
		 * the walk came from, a frame left over from an earlier call.
		 */
		if (callee_inline && L->frame.stacktop != LAYOUT_ABSENT &&
		    load_i32(f, L->frame.stacktop) == -1) {
			w->torn = true;
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx runs above its callee",
			               (unsigned long long)addr);
		}
		if (native_pending) {
			struct raw_frame marker = {.kind = UW_FRAME_NATIVE};
			if (raw_push(w, n, marker, err) != 0)
				return -1;
			native_pending = false;
			if (*n >= UW_MAX_FRAMES) {
				*truncated = true;
				break;
			}
		}
		struct raw_frame rf = {.addr = addr,
		                       .code = load_u64(f, L->frame.code) & ~L->frame.code_tag_mask,
		                       .pos = load_u64(f, L->frame.instr_ptr),
		                       .kind = UW_FRAME_PYTHON};
		if (raw_push(w, n, rf, err) != 0)
			return -1;
		bool entered = L->frame.is_entry != LAYOUT_ABSENT && f[L->frame.is_entry];
		if (entered)
			native_pending = want_native; /* 3.11 marks the entered frame itself */
		callee_inline = !entered;
		addr = previous;
	}
	return 0;
}

/*
 * The stack id of a chain read innermost first.  The base the chain shares
 * with the thread's previous sample (same frames at the same addresses, same
 * code, same instruction: `common` frames, from chain_common) keeps its ids;
 * only the rest is decoded.
 */
static uint32_t chain_resolve(struct uw_target *t, struct thread_cache *tc,
                              const struct raw_frame *raw, uint32_t n, uint32_t common,
                              struct uw_error *err)
{
	if (n > 0 && array_reserve((void **)&tc->chain, &tc->cap, n - 1, sizeof *tc->chain, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return INTERN_FAILED;
	}
	if (n > 0) {
		if (common == n && tc->n == n)
			t->stats.frame_cache_full_hits++;
		else if (common > 0)
			t->stats.frame_cache_partial_hits++;
		else
			t->stats.frame_cache_misses++;
	}
	t->stats.frames_from_cache += common;
	t->stats.frames_from_memory += n - common;

	uint32_t stack = common ? tc->chain[common - 1].stack : 0;
	tc->n = common; /* until the rest is decoded, only the shared base is valid */
	for (uint32_t d = common; d < n; d++) {
		const struct raw_frame *r = &raw[n - 1 - d];
		uint32_t frame;
		if (r->kind == UW_FRAME_NATIVE) {
			frame = t->native_frame;
		} else {
			struct code_info *ci = code_get(t, r->code, err);
			if (!ci)
				return INTERN_FAILED;
			/*
			 * A frame caught while being set up (or torn down) can show one
			 * code and another's instruction: its instruction must be in its
			 * code.  (Free-threaded builds run per-thread copies of the
			 * bytecode, which this unwinder does not follow yet.)
			 */
			if (t->layout.lasti_model == LASTI_INSTR_PTR && !t->layout.free_threaded &&
			    (r->pos + 2 < ci->bytecode || r->pos > ci->bytecode + ci->bytecode_len)) {
				uw_fail(err, UW_ECORRUPT, "frame 0x%llx: instruction outside its code",
				        (unsigned long long)r->addr);
				return INTERN_FAILED;
			}
			frame = code_frame_at(t, ci, r->pos);
		}
		if (frame == INTERN_FAILED || (stack = intern_stack(&t->intern, stack, frame)) == INTERN_FAILED) {
			uw_fail(err, UW_ENOMEM, "out of memory interning frames");
			return INTERN_FAILED;
		}
		tc->chain[d] = (struct chain_link){
			.addr = r->addr, .code = r->code, .pos = r->pos, .kind = r->kind, .stack = stack};
		tc->n = d + 1;
	}
	return stack;
}

/* -------- threads and interpreters -------- */

static struct uw_sample_thread *sample_add_thread(struct walk *w, struct uw_error *err)
{
	struct uw_sample *s = w->out;
	if (s->nthreads >= UW_MAX_THREADS) {
		uw_fail(err, UW_ECORRUPT, "more than %u threads", UW_MAX_THREADS);
		return NULL;
	}
	if (array_reserve((void **)&s->threads, &s->cap, s->nthreads, sizeof *s->threads, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	struct uw_sample_thread *th = &s->threads[s->nthreads++];
	memset(th, 0, sizeof *th);
	return th;
}

struct interp_view {
	raddr_t addr;
	int64_t id;
	raddr_t gil_holder;
	bool gc_running;
};

/* The current chunk of a thread's data stack and its top (3.11+), checked later. */
static int thread_live_stack(struct walk *w, const uint8_t *ts,
                             struct live_stack *live, struct uw_error *err)
{
	const struct py_layout *L = &w->t->layout;
	uint32_t off = L->tstate.datastack_chunk;
	if (off == LAYOUT_ABSENT)
		return 0;
	/* datastack_top follows datastack_chunk in PyThreadState (3.11 through 3.15). */
	raddr_t chunk = load_u64(ts, off), top = load_u64(ts, off + 8);
	if (!chunk)
		return 0;
	/* _PyStackChunk: previous, size (of the allocation), top, data[]. */
	const uint8_t *hdr = view_read(w->t, chunk, 16, 0, err);
	if (!hdr)
		return -1;
	uint64_t size = load_u64(hdr, 8);
	if (size > (1u << 30) || top < chunk || top > chunk + size)
		return uw_fail(err, UW_ECORRUPT, "data stack top 0x%llx outside its chunk",
		               (unsigned long long)top);
	*live = (struct live_stack){.top = top, .end = chunk + size};
	return 0;
}

/* Read one thread's innermost-frame pointer and its frames onto w->raw, with checks. */
static int thread_collect(struct walk *w, raddr_t tstate, uint32_t *n, bool *truncated,
                          struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, err);
	if (!ts)
		return -1;
	raddr_t frame;
	if (L->tstate.cframe != LAYOUT_ABSENT) {
		raddr_t cframe = load_u64(ts, L->tstate.cframe);
		if (check_add_kind(w, tstate + L->tstate.cframe, ts + L->tstate.cframe, 8, true, 0, err) != 0)
			return -1;
		frame = 0;
		if (cframe) {
			raddr_t at = cframe + L->tstate.cframe_current_frame;
			const uint8_t *cf = view_read(t, at, 8, 0, err);
			if (!cf || check_add_kind(w, at, cf, 8, true, 0, err) != 0)
				return -1;
			frame = load_u64(cf, 0);
		}
	} else {
		frame = load_u64(ts, L->tstate.frame);
		if (check_add_kind(w, tstate + L->tstate.frame, ts + L->tstate.frame, 8, true, 0, err) != 0)
			return -1;
	}
	if (L->frame_model == FRAME_MODEL_OBJECT)
		return collect_frame_objects(w, frame, n, truncated, err);
	struct live_stack live = {0};
	if (frame && thread_live_stack(w, ts, &live, err) != 0)
		return -1;
	return collect_interp_frames(w, frame, &live, n, truncated, err);
}

/*
 * A thread's stack, read and proven not torn.  A thread that runs moves its
 * stack every microsecond or so: when the proof fails it is read again,
 * fresh, a few times.  If it keeps moving, *moving says so and the thread
 * has no stack this sample; if it keeps reading as garbage, *dropped alone.
 * Either way the other threads stand.
 */
static int thread_stack(struct walk *w, struct thread_cache *tc, raddr_t tstate, bool may_move,
                        uint32_t *stack, bool *truncated, bool *dropped, bool *moving,
                        struct uw_error *err)
{
	struct uw_target *t = w->t;
	int attempts = t->thread_attempts > 0 ? t->thread_attempts : SAMPLE_ATTEMPTS;
	uint32_t mark = view_mark(t), start = w->nraw;
	int rc = -1;
	*dropped = false;
	for (int attempt = 0; attempt < attempts; attempt++) {
		uint32_t n = 0;
		w->nraw = start;
		w->nchecks = 0;
		*truncated = false;
		/* The batch's copy of this stack is what just failed: take a fresh one. */
		if (attempt > 0) {
			t->stats.torn_retries++;
			if ((rc = view_retry(t, mark, err)) != 0)
				break;
		}
		w->torn = false;
		rc = thread_collect(w, tstate, &n, truncated, err);
		uint32_t common = rc == 0 ? chain_common(t, tc, w->raw + start, n) : 0;
		/* A stack exactly as last time is one already proven whole. */
		*moving = rc != 0 && w->torn;
		if (rc == 0 && may_move && !(common == n && tc->n == n && n > 0)) {
			t->stats.stack_rereads++;
			rc = thread_validate(w, start, n, common, err);
			*moving = rc == 1;
		}
		if (rc == 0) {
			*stack = chain_resolve(t, tc, w->raw + start, n, common, err);
			rc = *stack == INTERN_FAILED ? -1 : 0;
			break;
		}
		if (err->status != UW_ECORRUPT || !proc_alive(t->pid))
			break;
		*dropped = attempt + 1 == attempts;
	}
	view_retry_end(t);
	w->nraw = start;
	return *dropped ? 0 : rc;
}

/* One thread state: its identity, flags and (if the mode selects it) its stack. */
static int sample_thread(struct walk *w, const struct interp_view *iv, raddr_t tstate,
                         uint32_t ordinal, raddr_t *next, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;

	const uint8_t *ts = view_read(t, tstate, L->tstate.size, 0, err);
	if (!ts)
		return -1;
	if (load_u64(ts, L->tstate.interp) != iv->addr)
		return uw_fail(err, UW_ECORRUPT, "thread state 0x%llx is not of its interpreter",
		               (unsigned long long)tstate);
	*next = load_u64(ts, L->tstate.next);
	if (*next == tstate)
		return uw_fail(err, UW_ECORRUPT, "thread state 0x%llx links to itself",
		               (unsigned long long)tstate);

	struct thread_cache *tc = threads_lookup(t, tstate, ordinal, err);
	if (!tc)
		return -1;
	tc->seen = t->sample_gen;

	uint64_t thread_id = load_u64(ts, L->tstate.thread_id);
	int64_t native_id = L->tstate.native_thread_id != LAYOUT_ABSENT
	                        ? (int64_t)load_u64(ts, L->tstate.native_thread_id)
	                        : pthread_tid(w, thread_id);
	if (native_id <= 0 || native_id > INT32_MAX)
		native_id = -1;
	bool holds_gil = iv->gil_holder && iv->gil_holder == tstate;
	bool need_cpu = t->opts.mode == UW_MODE_CPU || t->opts.want_on_cpu;
	bool on_cpu = need_cpu && thread_state(t, tc, native_id) == 'R';
	if ((t->opts.mode == UW_MODE_CPU && !on_cpu) || (t->opts.mode == UW_MODE_GIL && !holds_gil))
		return 0;

	uint32_t stack = 0;
	bool truncated = false, dropped = false;
	struct uw_error thread_err = {0};
	/*
	 * Every thread is checked, GIL or not: a thread waiting for the GIL has
	 * been seen to publish a frame pointer that lags its frames.
	 */
	bool may_move = true, moving = false;
	if (thread_stack(w, tc, tstate, may_move, &stack, &truncated, &dropped, &moving,
	                 &thread_err) != 0) {
		*err = thread_err;
		return -1;
	}
	if (dropped && !moving) {
		/* Read as garbage every time: no thread to show, and the caller is told why. */
		w->out->dropped_threads++;
		w->out->drop_reason = thread_err;
		return 0;
	}
	if (dropped) {
		t->stats.torn_threads++;
		stack = 0;
	}
	if ((t->opts.flags & UW_SNAP_GC) && iv->gc_running && holds_gil &&
	    (stack = intern_stack(&t->intern, stack, t->gc_frame)) == INTERN_FAILED)
		return uw_fail(err, UW_ENOMEM, "out of memory interning frames");

	struct uw_sample_thread *th = sample_add_thread(w, err);
	if (!th)
		return -1;
	*th = (struct uw_sample_thread){.thread_id = thread_id,
	                                .native_id = native_id,
	                                .interp_id = iv->id,
	                                .holds_gil = holds_gil,
	                                .on_cpu = on_cpu,
	                                .truncated = truncated,
	                                .moving = moving && dropped,
	                                .stack = stack};
	t->stats.thread_samples++;
	return 0;
}

/* The GIL holder, from the lock struct at gil. */
static int gil_holder_at(struct uw_target *t, raddr_t gil, raddr_t *holder, struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	uint32_t len = (L->gil.last_holder > L->gil.locked ? L->gil.last_holder : L->gil.locked) + 8;
	*holder = 0;
	if (!gil)
		return 0;
	const uint8_t *g = view_read(t, gil, len, 0, err);
	if (!g)
		return -1;
	*holder = load_i32(g, L->gil.locked) ? load_u64(g, L->gil.last_holder) : 0;
	return 0;
}

static int sample_walk(struct walk *w, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	struct uw_sample *out = w->out;

	const uint8_t *rt = view_read(t, t->runtime, L->runtime.size, 0, err);
	if (!rt)
		return -1;
	raddr_t runtime_gil_holder = 0;
	if (L->runtime.gil != LAYOUT_ABSENT && load_i32(rt, L->runtime.gil + L->gil.locked))
		runtime_gil_holder = load_u64(rt, L->runtime.gil + L->gil.last_holder);
	bool runtime_gc = L->runtime.gc_collecting != LAYOUT_ABSENT &&
	                  load_i32(rt, L->runtime.gc_collecting) != 0;

	raddr_t interp = load_u64(rt, L->runtime.interpreters_head);
	uint32_t ordinal = 0;
	for (unsigned ni = 0; interp; ni++) {
		if (ni >= UW_MAX_INTERPRETERS)
			return uw_fail(err, UW_ECORRUPT, "more than %u interpreters", UW_MAX_INTERPRETERS);
		const uint8_t *is = view_read(t, interp, L->interp.size, 0, err);
		if (!is)
			return -1;
		struct interp_view iv = {
			.addr = interp,
			.id = (int64_t)load_u64(is, L->interp.id),
			.gil_holder = runtime_gil_holder,
			.gc_running = runtime_gc || (L->interp.gc_collecting != LAYOUT_ABSENT &&
			                             load_i32(is, L->interp.gc_collecting) != 0),
		};
		out->gc_running |= iv.gc_running;
		raddr_t next_interp = load_u64(is, L->interp.next);
		raddr_t tstate = load_u64(is, L->interp.threads_head);
		if (L->interp.gil_ptr != LAYOUT_ABSENT &&
		    gil_holder_at(t, load_u64(is, L->interp.gil_ptr), &iv.gil_holder, err) != 0)
			return -1;

		uint32_t first = out->nthreads;
		for (uint32_t k = 0; tstate; k++) {
			if (k >= UW_MAX_THREADS)
				return uw_fail(err, UW_ECORRUPT, "more than %u threads", UW_MAX_THREADS);
			raddr_t next = 0;
			if (sample_thread(w, &iv, tstate, ordinal++, &next, err) != 0)
				return -1;
			tstate = next;
		}
		/* Thread states are pushed at the head: list them oldest (main) first. */
		for (uint32_t a = first, b = out->nthreads; a + 1 < b; a++, b--) {
			struct uw_sample_thread tmp = out->threads[a];
			out->threads[a] = out->threads[b - 1];
			out->threads[b - 1] = tmp;
		}
		if (next_interp == interp)
			return uw_fail(err, UW_ECORRUPT, "interpreter 0x%llx links to itself",
			               (unsigned long long)interp);
		interp = next_interp;
	}
	return 0;
}

/* -------- the public face -------- */

static size_t target_cache_bytes(const struct uw_target *t)
{
	return intern_bytes(&t->intern) + t->codes.bytes + threads_bytes(t);
}

/* Forget every id and cache: the budget was reached (or the options changed). */
static int target_reset_caches(struct uw_target *t, struct uw_error *err)
{
	code_cache_free(&t->codes);
	threads_free(t);
	t->epoch++;
	t->stats.cache_resets++;
	if (intern_reset(&t->intern) != 0)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	t->native_frame = t->gc_frame = 0;
	return 0;
}

/* The marker frames of this epoch. */
static int target_intern_markers(struct uw_target *t, struct uw_error *err)
{
	if (t->native_frame && t->gc_frame)
		return 0;
	struct frame_key native = {.line = -1, .kind = UW_FRAME_NATIVE};
	struct frame_key gc = {.line = -1, .kind = UW_FRAME_GC};
	native.function = native.qualname = intern_string(&t->intern, "<native>", 8);
	gc.function = gc.qualname = intern_string(&t->intern, "<GC>", 4);
	if (native.function == INTERN_FAILED || gc.function == INTERN_FAILED ||
	    (t->native_frame = intern_frame(&t->intern, &native)) == INTERN_FAILED ||
	    (t->gc_frame = intern_frame(&t->intern, &gc)) == INTERN_FAILED) {
		t->native_frame = t->gc_frame = 0;
		return uw_fail(err, UW_ENOMEM, "out of memory");
	}
	return 0;
}

/*
 * Reset at half the budget: one sample grows the caches by a few entries, but
 * a hash table that doubles can add as much again as it held, and the budget
 * is a bound, not a target.
 */
static bool target_reset_due(const struct uw_target *t)
{
	return target_cache_bytes(t) > t->opts.cache_budget / 2;
}

int uw_sample(struct uw_target *t, struct uw_sample *s, struct uw_error *err)
{
	struct uw_error local_err;
	if (!err)
		err = &local_err;
	s->nthreads = 0;
	s->gc_running = false;
	t->sample_gen++;
	t->stats.samples++;

	int rc = -1;
	if (target_reset_due(t)) {
		if (t->opts.on_epoch_end)
			t->opts.on_epoch_end(t->opts.epoch_ctx, t);
		if (target_reset_caches(t, err) != 0)
			goto done;
	}
	if (target_intern_markers(t, err) != 0)
		goto done;
	s->epoch = t->epoch;
	if (!t->walk && !(t->walk = calloc(1, sizeof *t->walk))) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		goto done;
	}
	struct walk *w = t->walk;
	w->t = t;
	w->out = s;
	w->nraw = w->nchecks = 0;
	s->dropped_threads = 0;
	if (view_begin(t, err) == 0)
		rc = sample_walk(w, err);
	view_end(t, rc == 0);
done:
	if (rc == 0) {
		threads_sweep(t);
	} else {
		s->nthreads = 0;
		/* Garbage read from a dying process is the death, not corruption. */
		if (err->status == UW_ECORRUPT && !proc_alive(t->pid))
			uw_fail(err, UW_EGONE, "process %d exited", (int)t->pid);
		if (err->status <= UW_EIO)
			t->stats.errors[err->status]++;
	}
	t->stats.readv_calls = t->mem.calls;
	t->stats.bytes_read = t->mem.bytes;
	t->stats.cache_bytes = target_cache_bytes(t);
	return rc;
}

void sample_scratch_free(struct uw_target *t)
{
	if (!t->walk)
		return;
	free(t->walk->raw);
	free(t->walk->checks);
	free(t->walk);
	t->walk = NULL;
}

void uw_sample_free(struct uw_sample *s)
{
	free(s->threads);
	memset(s, 0, sizeof *s);
}

uint32_t uw_stack_frame(const struct uw_target *t, uint32_t stack)
{
	return stack < t->intern.nstacks ? t->intern.stacks[stack].frame : 0;
}

uint32_t uw_stack_parent(const struct uw_target *t, uint32_t stack)
{
	return stack < t->intern.nstacks ? t->intern.stacks[stack].parent : 0;
}

uint32_t uw_stack_depth(const struct uw_target *t, uint32_t stack)
{
	return stack < t->intern.nstacks ? t->intern.stacks[stack].depth : 0;
}

const struct uw_frame *uw_frame_get(const struct uw_target *t, uint32_t frame)
{
	return frame < t->intern.nframes ? &t->intern.frames[frame] : &t->intern.frames[0];
}

int uw_snapshot(struct uw_target *t, unsigned flags, struct uw_snapshot *out,
                struct uw_error *err)
{
	memset(out, 0, sizeof *out);
	struct uw_options saved = t->opts;
	t->opts.flags |= flags;
	t->opts.mode = UW_MODE_WALL;
	t->opts.want_on_cpu = true;
	/* A dump wants every thread: give a moving one more chances. */
	t->thread_attempts = UW_SNAPSHOT_THREAD_ATTEMPTS;
	struct uw_sample s = {0};
	int rc = uw_sample(t, &s, err);
	t->opts = saved;
	t->thread_attempts = 0;
	/* A thread read as garbage makes the snapshot fail; one that kept moving is shown as such. */
	if (rc == 0 && s.dropped_threads) {
		if (err)
			*err = s.drop_reason;
		rc = -1;
	}
	if (rc != 0) {
		uw_sample_free(&s);
		return -1;
	}
	out->gc_running = s.gc_running;
	out->threads = calloc(s.nthreads ? s.nthreads : 1, sizeof *out->threads);
	if (!out->threads) {
		uw_sample_free(&s);
		return uw_fail(err, UW_ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < s.nthreads; i++) {
		const struct uw_sample_thread *st = &s.threads[i];
		struct uw_thread *th = &out->threads[out->nthreads++];
		*th = (struct uw_thread){.thread_id = st->thread_id,
		                         .native_id = st->native_id,
		                         .interp_id = st->interp_id,
		                         .holds_gil = st->holds_gil,
		                         .on_cpu = st->on_cpu,
		                         .truncated = st->truncated,
		                         .unreadable = st->moving};
		uint32_t depth = uw_stack_depth(t, st->stack);
		th->frames = calloc(depth ? depth : 1, sizeof *th->frames);
		if (!th->frames) {
			uw_sample_free(&s);
			uw_snapshot_release(out);
			return uw_fail(err, UW_ENOMEM, "out of memory");
		}
		for (uint32_t stack = st->stack; stack && th->nframes < depth;
		     stack = uw_stack_parent(t, stack))
			th->frames[th->nframes++] = *uw_frame_get(t, uw_stack_frame(t, stack));
	}
	uw_sample_free(&s);
	return 0;
}

void uw_snapshot_release(struct uw_snapshot *snap)
{
	for (uint32_t i = 0; i < snap->nthreads; i++)
		free(snap->threads[i].frames);
	free(snap->threads);
	memset(snap, 0, sizeof *snap);
}
