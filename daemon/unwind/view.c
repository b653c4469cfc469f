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
 * is validate.c's to prove.
 *
 * A read made by one thread's walk is tagged with its thread state, and a
 * range of the batch holding only such reads of one thread with it too:
 * when the kernel proves that thread ran nothing since (threads_still_*),
 * its walk is not made, and its ranges are left out of the batch's read
 * (counted as made, so the plan stands for when it runs again).
 *
 * The plan is given to the kernel too, which copies it as the process
 * falls quiet (kcopy.c): when the look proves nothing ran since, the batch
 * is that copy, and nothing is read.
 */
#include <stdlib.h>
#include <string.h>

#include "kcopy_abi.h"
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

/* Room for a planned batch's bytes, each range given its place in it. */
static int batch_room(struct view_batch *b, struct uw_error *err)
{
	size_t total = 0;
	for (uint32_t i = 0; i < b->n; i++)
		total += b->ranges[i].len;
	if (total > b->buf_cap) {
		uint8_t *buf = realloc(b->buf, total);
		if (!buf)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		b->buf = buf;
		b->buf_cap = total;
	}
	size_t off = 0;
	for (uint32_t i = 0; i < b->n; i++) {
		b->ranges[i].buf = b->buf + off;
		off += b->ranges[i].len;
	}
	return 0;
}

/* Read a planned batch. */
static int batch_fetch(struct uw_target *t, struct view_batch *b, struct uw_error *err)
{
	if (batch_room(b, err) != 0)
		return -1;
	return remote_read_batch(&t->mem, b->ranges, b->n, err);
}

/*
 * Reads come in the walk's order, a few ascending runs (the process's
 * structures, then each thread's): a sample's few dozen are sorted in place
 * in a fraction of qsort's time, which a replan of every third sample
 * paid.  Many (a deep stack's frames read downwards, a forest of asyncio
 * tasks, tens of thousands) go to a radix sort on the address: qsort's
 * calls through a pointer took a third of the daemon's time on a sample of
 * 4,096 tasks.
 */
#define VIEW_USED_INSERTION_MAX 64u
/* Bits of an address sorted by in one pass: six cover 64; a pass whose digit all share is skipped. */
#define VIEW_RADIX_BITS 11u

static void used_radix(struct used_range *used, struct used_range *tmp, uint32_t n)
{
	struct used_range *from = used, *to = tmp;
	for (unsigned shift = 0; shift < 64; shift += VIEW_RADIX_BITS) {
		uint32_t count[1u << VIEW_RADIX_BITS] = {0};
		const uint64_t mask = (1u << VIEW_RADIX_BITS) - 1;
		for (uint32_t i = 0; i < n; i++)
			count[(from[i].addr >> shift) & mask]++;
		if (count[(from[0].addr >> shift) & mask] == n)
			continue;
		uint32_t at = 0;
		for (uint32_t d = 0; d <= mask; d++) {
			uint32_t c = count[d];
			count[d] = at;
			at += c;
		}
		for (uint32_t i = 0; i < n; i++)
			to[count[(from[i].addr >> shift) & mask]++] = from[i];
		struct used_range *swap = from;
		from = to;
		to = swap;
	}
	if (from != used)
		memcpy(used, from, n * sizeof *used);
}

static void used_sort(struct view_batch *b, struct used_range *used, uint32_t nused)
{
	if (nused > VIEW_USED_INSERTION_MAX) {
		if (array_reserve((void **)&b->sort_tmp, &b->sort_tmp_cap, nused - 1, sizeof *b->sort_tmp, NULL))
			qsort(used, nused, sizeof *used, used_cmp);
		else
			used_radix(used, b->sort_tmp, nused);
		return;
	}
	for (uint32_t i = 1; i < nused; i++) {
		struct used_range r = used[i];
		uint32_t j = i;
		for (; j > 0 && used[j - 1].addr > r.addr; j--)
			used[j] = used[j - 1];
		used[j] = r;
	}
}

/* Merge reads (sorted here) into a batch's ranges, within the batch bounds. */
static void batch_plan(struct view_batch *b, struct used_range *used, uint32_t nused)
{
	used_sort(b, used, nused);
	uint32_t n = 0;
	size_t total = 0;
	for (uint32_t i = 0; i < nused;) {
		raddr_t start = used[i].addr;
		raddr_t end = start + used[i].len + used[i].grow, used_end = start + used[i].len;
		raddr_t owner = used[i].owner;
		for (i++; i < nused && used[i].addr <= end + VIEW_MERGE_GAP; i++) {
			raddr_t e = used[i].addr + used[i].len + used[i].grow;
			if (e > end)
				end = e;
			if (used[i].addr + used[i].len > used_end)
				used_end = used[i].addr + used[i].len;
			if (used[i].owner != owner)
				owner = 0;
		}
		if (end - start > VIEW_PREFETCH_MAX_BYTES || total + (end - start) > VIEW_PREFETCH_MAX_BYTES ||
		    n >= VIEW_PREFETCH_MAX_RANGES)
			break;
		if (array_reserve((void **)&b->ranges, &b->cap, n, sizeof *b->ranges, NULL) ||
		    array_reserve((void **)&b->owners, &b->owners_cap, n, sizeof *b->owners, NULL) ||
		    array_reserve((void **)&b->used_lens, &b->used_lens_cap, n, sizeof *b->used_lens, NULL))
			break;
		b->ranges[n] = (struct remote_range){.addr = start, .len = (uint32_t)(end - start)};
		b->used_lens[n] = (uint32_t)(used_end - start);
		b->owners[n++] = owner;
		total += end - start;
	}
	b->n = n;
}

/* The range of a batch holding [addr, addr+len), or NULL. */
static const struct remote_range *batch_find(const struct view_batch *b, raddr_t addr, uint32_t len)
{
	uint32_t lo = 0, hi = b->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (b->ranges[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct remote_range *r = &b->ranges[lo - 1];
	if (addr + len < addr || addr + len > r->addr + r->got)
		return NULL;
	return r;
}

/* Whether range r of a batch holds [addr, addr+len). */
static bool batch_holds(const struct remote_range *r, raddr_t addr, uint32_t len)
{
	return addr >= r->addr && addr + len >= addr && addr + len <= r->addr + r->got;
}

/*
 * batch_find, trying first the range the last lookup found and the one
 * after it: a sample reads several fields of one struct in a row, and its
 * structs in the order of the plan (sorted by address) more often than not.
 * Ranges never overlap, so a range that holds the bytes is the one the
 * search would find.
 */
static const struct remote_range *batch_find_near(struct view_batch *b, raddr_t addr, uint32_t len)
{
	if (b->last < b->n) {
		if (batch_holds(&b->ranges[b->last], addr, len))
			return &b->ranges[b->last];
		uint32_t next = b->last + 1 < b->n ? b->last + 1 : 0;
		if (batch_holds(&b->ranges[next], addr, len)) {
			b->last = next;
			return &b->ranges[next];
		}
	}
	const struct remote_range *r = batch_find(b, addr, len);
	if (r)
		b->last = (uint32_t)(r - b->ranges);
	return r;
}

static void batch_free(struct view_batch *b)
{
	free(b->sort_tmp);
	free(b->ranges);
	free(b->owners);
	free(b->used_lens);
	free(b->buf);
	memset(b, 0, sizeof *b);
}

/* The thread of tstate, NULL if there is none (hint: where to look first). */
static const struct thread_cache *view_owner(const struct uw_target *t, raddr_t tstate, uint32_t *hint)
{
	for (uint32_t k = 0; k < t->nthreads; k++) {
		uint32_t i = (*hint + k) % t->nthreads;
		if (t->threads[i].tstate == tstate) {
			*hint = i + 1;
			return &t->threads[i];
		}
	}
	return NULL;
}

/* Whether the thread of tstate is proven to have run nothing since its last walk (hint: where to look first). */
static bool view_owner_still(const struct uw_target *t, raddr_t tstate, uint32_t *hint)
{
	const struct thread_cache *tc = view_owner(t, tstate, hint);
	return tc && tc->still.holds;
}

/* The batch's plan, for the kernel to copy at the process's next fall into quiet (kcopy.c). */
static void view_copy_plan(struct uw_target *t)
{
	struct process_still *ps = &t->still;
	if (ps->copy_slot < 0)
		return;
	/*
	 * Each range of one thread's stack by its task, as the look knows it:
	 * the kernel copies it only after the thread ran.  A plan of more
	 * ranges than a copy holds is none.
	 */
	pid_t owners[KCOPY_RANGES];
	uint32_t n = t->batch.n <= KCOPY_RANGES ? t->batch.n : 0, hint = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct thread_cache *tc = t->batch.owners[i] ? view_owner(t, t->batch.owners[i], &hint) : NULL;
		owners[i] = tc && tc->still.proc_tid_of > 0 && tc->still.proc_tid > 0 ? (pid_t)tc->still.proc_tid : 0;
	}
	ps->copy_generation = kcopy_plan(kread_copier(t->opts.kreader), ps->copy_slot, t->batch.ranges,
	                                 t->batch.used_lens, owners, n);
}

/*
 * Quiet moments a sample's copy window holds, on average, times 256.  Only
 * the last copy before a sample is taken, and a copy costs the target
 * about a sixth of what the read it saves costs the daemon (a few
 * kilobytes, their cache lines cold, against pinning their pages): so
 * copies are made only in the stretch before the next sample that holds
 * about two of the process's quiet moments (e^-2 of samples find none in
 * it, and are read), not at every one since the last sample.
 */
#define VIEW_COPY_QUIET_X256 512u

/*
 * Whether the process's copies pay.  They cost it at every switch away of
 * every task (the record, the look at the others) and at each copy, and
 * spare the daemon one read a sample: on 3.15 (bench/daemon.py) about
 * 1 us a switch and 3 us of copies a sample in the targets, against about
 * 4.5 us of reading spared, about even for a service's four threads that
 * each wake every 20 ms, sampled at 100 Hz (two or three switches a
 * sample).  A process whose tasks switch away more than eight times
 * between samples pays two or three times what it spares, and more as it
 * switches more (two threads handing a token back and forth do it
 * thousands of times), whatever the rate: its copies stop, its watches
 * closed, until the look (which counts the switches, the process paying
 * nothing for it) has seen fewer than four a sample for a while.
 */
#define VIEW_COPY_PAUSE_SWITCHES_X256 (8u * 256u)
#define VIEW_COPY_RESUME_SWITCHES_X256 (4u * 256u)
#define VIEW_COPY_PAUSED_NS (10ull * 1000000000ull)

static bool view_copy_pays(struct uw_target *t, struct kcopy *kc, const struct kstill_task *tasks, uint32_t n,
                           uint64_t now)
{
	struct process_still *ps = &t->still;
	if (tasks) {
		uint32_t listed = n < KSTILL_TASKS ? n : KSTILL_TASKS;
		uint64_t sum = 0;
		for (uint32_t i = 0; i < listed; i++)
			sum += tasks[i].switches;
		/*
		 * Over about the last eight samples, each counted as at most four
		 * times the bound: one long gap (the first sample's decoding) stops
		 * nothing, three busy ones in a row do.  A change of tasks is no
		 * measure.
		 */
		if (ps->copy_tasks_seen && n == ps->copy_tasks_seen && sum >= ps->copy_switches_seen) {
			uint64_t seen = sum - ps->copy_switches_seen, most = 4 * VIEW_COPY_PAUSE_SWITCHES_X256;
			seen = seen < most / 256u ? seen * 256u : most;
			ps->copy_switches_x256 = (7 * ps->copy_switches_x256 + seen) / 8;
		}
		ps->copy_tasks_seen = n;
		ps->copy_switches_seen = sum;
	}
	if (!ps->copy_paused_ns && ps->copy_switches_x256 > VIEW_COPY_PAUSE_SWITCHES_X256) {
		kcopy_release(kc, ps->copy_slot);
		ps->copy_slot = -1;
		ps->copy_generation = 0;
		ps->copy_sampled_ns = 0; /* the next slot's counts are its own */
		ps->copy_paused_ns = now ? now : 1;
		t->stats.kernel_copy_pauses++;
	} else if (ps->copy_paused_ns && ps->copy_switches_x256 < VIEW_COPY_RESUME_SWITCHES_X256 &&
	           now - ps->copy_paused_ns >= VIEW_COPY_PAUSED_NS) {
		ps->copy_paused_ns = 0;
	}
	return !ps->copy_paused_ns;
}

void view_copy_window(struct uw_target *t, const struct kstill_task *tasks, uint32_t n)
{
	struct process_still *ps = &t->still;
	struct kcopy *kc = kread_copier(t->opts.kreader);
	if (!kc)
		return;
	uint64_t now = clock_mono_ns();
	if (!view_copy_pays(t, kc, tasks, n, now) || ps->copy_slot < 0)
		return;
	uint64_t quiet = kcopy_quiet(kc, ps->copy_slot);
	if (ps->copy_sampled_ns && now > ps->copy_sampled_ns) {
		/* Averages over about the last eight samples: the time between them, and the quiet moments in it. */
		uint64_t gap = now - ps->copy_sampled_ns, seen = (quiet - ps->copy_quiet_seen) * 256u;
		ps->copy_interval_ns = ps->copy_interval_ns ? (7 * ps->copy_interval_ns + gap) / 8 : gap;
		ps->copy_quiet_x256 = (7 * ps->copy_quiet_x256 + seen) / 8;
	}
	ps->copy_sampled_ns = now;
	ps->copy_quiet_seen = quiet;
	uint64_t interval = ps->copy_interval_ns, window = interval;
	if (ps->copy_quiet_x256 > VIEW_COPY_QUIET_X256)
		window = interval * VIEW_COPY_QUIET_X256 / ps->copy_quiet_x256;
	kcopy_window(kc, ps->copy_slot, now, now + interval - window);
}

/*
 * The batch from the kernel's copy of the process, taken as it last fell
 * quiet, when this sample's look proves nothing of it ran since (kcopy.c):
 * not a page pinned.  The tasks it copies at are the look's from now on.
 */
static bool view_from_copy(struct uw_target *t, const struct kstill_task *tasks, uint32_t n,
                           struct uw_error *err)
{
	struct process_still *ps = &t->still;
	struct kcopy *kc = kread_copier(t->opts.kreader);
	if (!kc || !tasks || ps->copy_paused_ns)
		return false;
	/*
	 * Copied once the look knows its tasks, the batch's plan given as the
	 * slot is claimed (later plans as they are made); a process past the
	 * copier's room asks at every sample.
	 */
	bool claimed = ps->copy_slot < 0;
	if (claimed && (ps->copy_slot = kcopy_claim(kc)) < 0)
		return false;
	t->stats.kernel_copy_watch_failures += kcopy_follow(kc, ps->copy_slot, tasks, n);
	if (claimed)
		view_copy_plan(t);
	if (!ps->copy_generation || batch_room(&t->batch, err) != 0 ||
	    !kcopy_take(kc, ps->copy_slot, ps->copy_generation, t->mem.wrote_ns, tasks, n, t->batch.ranges,
	                t->batch.n))
		return false;
	t->stats.kernel_copies++;
	return true;
}

int view_begin(struct uw_target *t, const struct kstill_task *tasks, uint32_t n, struct uw_error *err)
{
	t->nused = 0;
	t->nmissed = 0;
	if (t->opts.no_cache || t->batch.n == 0)
		return 0;
	if (view_from_copy(t, tasks, n, err)) {
		for (uint32_t i = 0; i < t->batch.n; i++)
			t->batch.ranges[i].skip = false;
		return 0;
	}
	bool any = false;
	for (uint32_t i = 0; i < t->nthreads && !any; i++)
		any = t->threads[i].still.holds;
	uint32_t hint = 0;
	for (uint32_t i = 0; i < t->batch.n; i++) {
		raddr_t owner = t->batch.owners[i];
		t->batch.ranges[i].skip = any && owner && view_owner_still(t, owner, &hint);
	}
	return batch_fetch(t, &t->batch, err);
}

static void view_remember(struct uw_target *t, raddr_t addr, uint32_t len, uint32_t grow)
{
	if (t->opts.no_cache || t->nused >= VIEW_USED_MAX)
		return;
	if (array_reserve((void **)&t->used, &t->used_cap, t->nused, sizeof *t->used, NULL))
		return; /* only an optimisation is lost */
	t->used[t->nused++] = (struct used_range){addr, len, grow, t->view_owner};
}

/* The range read this sample after the batch that holds [addr, addr+len), or NULL. */
static const struct remote_range *view_missed_find(const struct uw_target *t, raddr_t addr, uint32_t len)
{
	for (uint32_t i = 0; i < t->nmissed; i++)
		if (batch_holds(&t->missed[i], addr, len))
			return &t->missed[i];
	return NULL;
}

/* -------- reads ahead -------- */

/* Ranges one sample may ask for ahead: a garbage task list must not make it huge. */
#define VIEW_AHEAD_MAX_RANGES (64u * 1024)

static bool ahead_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct view_ahead *a = ctx;
	return a->ranges[id].addr == *(const raddr_t *)key;
}

/* The range read ahead at exactly addr holding len bytes, or NULL. */
static const struct remote_range *ahead_find(const struct uw_target *t, raddr_t addr, uint32_t len)
{
	const struct view_ahead *a = &t->ahead;
	if (!a->nread || t->retrying)
		return NULL;
	uint32_t id = hash_find(&a->index, hash_u64(addr), ahead_equal, a, &addr);
	if (id == HASH_NONE || id >= a->nread || a->ranges[id].got < len)
		return NULL;
	return &a->ranges[id];
}

int view_ahead(struct uw_target *t, raddr_t addr, uint32_t len, struct uw_error *err)
{
	struct view_ahead *a = &t->ahead;
	if (addr < 4096 || !len || a->n >= VIEW_AHEAD_MAX_RANGES || view_at_hand(t, addr, len))
		return 0;
	uint32_t h = hash_u64(addr);
	if (hash_find(&a->index, h, ahead_equal, a, &addr) != HASH_NONE)
		return 0;
	uint8_t *buf = NULL;
	if (array_reserve((void **)&a->ranges, &a->cap, a->n, sizeof *a->ranges, NULL) ||
	    hash_reserve(&a->index, 1) != 0 || !(buf = arena_alloc(&a->bytes, len)))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	a->ranges[a->n] = (struct remote_range){.addr = addr, .len = len, .buf = buf};
	hash_fill(&a->index, hash_probe(&a->index, h, ahead_equal, a, &addr), h, a->n);
	a->n++;
	return 0;
}

int view_ahead_read(struct uw_target *t, struct uw_error *err)
{
	struct view_ahead *a = &t->ahead;
	uint32_t from = a->nread;
	if (from >= a->n)
		return 0;
	a->nread = a->n;
	return remote_read_batch(&t->mem, a->ranges + from, a->n - from, err);
}

void view_ahead_clear(struct uw_target *t)
{
	struct view_ahead *a = &t->ahead;
	a->n = a->nread = 0;
	hash_clear(&a->index);
	arena_clear(&a->bytes);
}

static void ahead_free(struct view_ahead *a)
{
	free(a->ranges);
	hash_free(&a->index);
	arena_free(&a->bytes);
	memset(a, 0, sizeof *a);
}

/* -------- reads -------- */

const uint8_t *view_at_hand(const struct uw_target *t, raddr_t addr, uint32_t len)
{
	const struct remote_range *r = NULL;
	if (!t->opts.no_cache && !t->retrying) {
		r = batch_find(&t->batch, addr, len);
		if (!r)
			r = view_missed_find(t, addr, len);
	}
	if (!r)
		r = ahead_find(t, addr, len);
	return r ? r->buf + (addr - r->addr) : NULL;
}

const uint8_t *view_read(struct uw_target *t, raddr_t addr, uint32_t len, uint32_t grow,
                         struct uw_error *err)
{
	view_remember(t, addr, len, grow);
	const struct remote_range *r = NULL;
	if (!t->opts.no_cache) {
		/* A retry's fresh copy first; the sample's batch still serves the rest. */
		r = t->retrying ? batch_find(&t->retry, addr, len) : NULL;
		if (!r)
			r = batch_find_near(&t->batch, addr, len);
		/* Bytes read this sample after the batch; never in a retry, which wants fresh ones. */
		if (!r && !t->retrying)
			r = view_missed_find(t, addr, len);
	}
	if (!r)
		r = ahead_find(t, addr, len);
	if (r) {
		t->stats.prefetch_hits++;
		return r->buf + (addr - r->addr);
	}
	if (!t->opts.no_cache)
		t->stats.prefetch_misses++;
	uint8_t *buf = arena_alloc(&t->scratch, len ? len : 1);
	if (!buf) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	if (remote_read(&t->mem, addr, buf, len, err) != 0)
		return NULL;
	if (!t->opts.no_cache && !t->retrying && t->nmissed < VIEW_MISSED_KEPT)
		t->missed[t->nmissed++] = (struct remote_range){.addr = addr, .len = len, .got = len, .buf = buf};
	return buf;
}

uint32_t view_keep_room(const struct uw_target *t)
{
	return t->opts.no_cache || t->retrying ? 0 : VIEW_MISSED_KEPT - t->nmissed;
}

uint8_t *view_room_for(struct uw_target *t, raddr_t addr, uint32_t len)
{
	/* Already at hand: nothing to read. */
	if (!view_keep_room(t) || !len || view_at_hand(t, addr, len))
		return NULL;
	return arena_alloc(&t->scratch, len);
}

void view_keep(struct uw_target *t, const struct remote_range *r)
{
	if (!view_keep_room(t) || r->got < r->len)
		return;
	t->missed[t->nmissed++] = *r;
}

const uint8_t *view_batch_bytes(const struct uw_target *t, raddr_t addr, uint32_t len)
{
	if (t->opts.no_cache || t->retrying)
		return NULL;
	const struct remote_range *r = batch_find(&t->batch, addr, len);
	return r ? r->buf + (addr - r->addr) : NULL;
}

const struct used_range *view_reads(const struct uw_target *t, uint32_t mark, uint32_t *n)
{
	*n = mark <= t->nused ? t->nused - mark : 0;
	return t->used + mark;
}

void view_reads_again(struct uw_target *t, const struct used_range *reads, uint32_t n)
{
	if (t->opts.no_cache || t->nused + (uint64_t)n > VIEW_USED_MAX ||
	    (n && array_reserve((void **)&t->used, &t->used_cap, t->nused + n - 1, sizeof *t->used, NULL)))
		return; /* only an optimisation is lost */
	memcpy(t->used + t->nused, reads, n * sizeof *reads);
	t->nused += n;
}

void view_reads_carry(struct uw_target *t, raddr_t owner, uint32_t *from, uint32_t *n)
{
	uint32_t was = *from, count = *n;
	*from = t->nused;
	*n = 0;
	/* Only reads the plan holds as that thread's, where the walk left them. */
	if (t->opts.no_cache || was > t->nplanned || count > t->nplanned - was)
		return;
	for (uint32_t i = 0; i < count; i++)
		if (t->planned[was + i].owner != owner)
			return;
	view_reads_again(t, t->planned + was, count);
	*n = t->nused - *from;
}

uint32_t view_mark(const struct uw_target *t)
{
	return t->nused;
}

int view_retry(struct uw_target *t, uint32_t mark, struct uw_error *err)
{
	if (t->opts.no_cache || mark > t->nused)
		return 0;
	/* The reads since the mark, copied: the main list keeps its order for the next plan. */
	uint32_t n = t->nused - mark;
	if (n && array_reserve((void **)&t->retry_used, &t->retry_used_cap, n - 1,
	                       sizeof *t->retry_used, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	memcpy(t->retry_used, t->used + mark, n * sizeof *t->retry_used);
	batch_plan(&t->retry, t->retry_used, n);
	t->retrying = true;
	/* What the failed try read is as stale as it: later reads of this sample read afresh. */
	t->nmissed = 0;
	return batch_fetch(t, &t->retry, err);
}

void view_retry_end(struct uw_target *t)
{
	t->retrying = false;
}

/*
 * A steady sample makes the very reads the last one did, in the same order:
 * then the plan stands, and the sort and merge are not done again (on a deep
 * stack they cost as much as the rest of the sample).
 */
static void view_replan(struct uw_target *t)
{
	if (t->nused == t->nplanned && t->batch.n &&
	    memcmp(t->used, t->planned, t->nused * sizeof *t->used) == 0) {
		t->stats.plans_kept++;
		return;
	}
	t->nplanned = 0;
	if (t->nused && !array_reserve((void **)&t->planned, &t->planned_cap, t->nused - 1,
	                               sizeof *t->planned, NULL)) {
		memcpy(t->planned, t->used, t->nused * sizeof *t->used);
		t->nplanned = t->nused;
	}
	batch_plan(&t->batch, t->used, t->nused);
	view_copy_plan(t);
}

void view_end(struct uw_target *t, bool plan_next)
{
	arena_clear(&t->scratch);
	view_ahead_clear(t);
	t->nmissed = 0;
	t->retrying = false;
	/* A failed sample keeps the last plan: its reads were cut short. */
	if (t->opts.no_cache)
		t->batch.n = 0;
	else if (plan_next)
		view_replan(t);
	t->nused = 0;
}

size_t view_room(const struct uw_target *t)
{
	return t->used_cap * sizeof *t->used + t->retry_used_cap * sizeof *t->retry_used +
	       t->planned_cap * sizeof *t->planned +
	       t->batch.cap * sizeof *t->batch.ranges + t->batch.buf_cap +
	       (t->batch.sort_tmp_cap + t->retry.sort_tmp_cap) * sizeof *t->batch.sort_tmp +
	       t->retry.cap * sizeof *t->retry.ranges + t->retry.buf_cap + arena_bytes(&t->scratch) +
	       t->ahead.cap * sizeof *t->ahead.ranges + t->ahead.index.cap * sizeof *t->ahead.index.slots +
	       arena_bytes(&t->ahead.bytes);
}

void view_trim(struct uw_target *t)
{
	/* Between samples only the plan of the next batch is live: its ranges, shrunk to fit. */
	if (t->batch.n == 0) {
		batch_free(&t->batch);
	} else if (t->batch.n < t->batch.cap) {
		struct remote_range *r = realloc(t->batch.ranges, t->batch.n * sizeof *r);
		if (r) {
			t->batch.ranges = r;
			t->batch.cap = t->batch.n;
		}
	}
	free(t->batch.buf);
	t->batch.buf = NULL;
	t->batch.buf_cap = 0;
	free(t->batch.sort_tmp);
	t->batch.sort_tmp = NULL;
	t->batch.sort_tmp_cap = 0;
	batch_free(&t->retry);
	arena_free(&t->scratch);
	ahead_free(&t->ahead);
	free(t->used);
	free(t->retry_used);
	t->used = t->retry_used = NULL;
	t->used_cap = t->retry_used_cap = 0;
	/* The plan kept is rebuilt, sorted, by the next sample. */
	free(t->planned);
	t->planned = NULL;
	t->nplanned = 0;
	t->planned_cap = 0;
}

void view_free(struct uw_target *t)
{
	view_end(t, false);
	arena_free(&t->scratch);
	free(t->used);
	free(t->retry_used);
	batch_free(&t->batch);
	batch_free(&t->retry);
	ahead_free(&t->ahead);
	free(t->planned);
	t->planned = NULL;
	t->nplanned = 0;
	t->planned_cap = 0;
	t->used = t->retry_used = NULL;
	t->used_cap = t->retry_used_cap = 0;
}
