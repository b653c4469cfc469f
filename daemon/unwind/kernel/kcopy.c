/*
 * The kernel's copy of a process as it falls quiet: the owner of
 * kcopy.bpf.c.
 *
 * A service's threads run in short bursts and sleep between them.  The
 * look (kstill.c) proves a process ran nothing since a sample only when no
 * thread of it ran at all; a thread that ran a burst and went back to sleep
 * before the next sample leaves its stack where the burst left it, which
 * only a read of the process's memory tells, pinning a page for each
 * interpreter, thread state and innermost frame.  But the burst's end is a
 * moment the kernel sees: the thread is switched away from its CPU.  Then,
 * in the process's own context, a BPF program copies the bytes the next
 * sample will read (the sample's batched read, planned from the last one:
 * view.c), with faults off and nothing pinned.
 *
 * The argument.  At each switch away of a watched task the program
 * records the task's count of switches away (which already counts this
 * one) and the time; then, if no other task of the process is on a CPU or
 * queued for one, it copies, stamping the copy with the same time, begun,
 * and the count of the process's tasks.  The daemon records a task once
 * itself before it watches it: the count the look saw, and a time after
 * the look.  At the sample, the look sees each task off its CPU, then
 * loads its count (kstill.c), and the copy is taken only if the look lists
 * as many tasks as the copy counted, every one watched, each record holding
 * the look's count and a time before begun (the taker's: begun itself).
 *
 * Suppose a task ran an instruction of its own after begun.  To run it was
 * switched to, and by the look it was off its CPU again: switched away in
 * between, which the program recorded, with a time after begun, and
 * counted: its record is newer than begun, or the look's count is more
 * than the record holds.  A task that ends takes its event with it before
 * its last switch away: then it is missing from the look, so the look
 * counts fewer tasks than the copy did, or a task made since stands in
 * its place, watched only from the look on, its record newer than begun
 * (a zombie left behind counts its last switch away).  So from begun to
 * the look nothing of the process ran.  And every task's last instruction
 * came before its record was stamped (the scheduler's locks between), so
 * before begun: what it wrote is in the copy.  The copy is the process's
 * memory at the look, but for what other processes write into it: the
 * daemon's own frame-cache marker is written after a sample, so a copy
 * begun before the last write returned is not taken; another profiler's
 * marker is not a stack (still.c says the same of a kept sample).  A copy
 * is of a plan (its generation): only the sample whose batch is that plan
 * takes it.
 *
 * What it costs: the targets pay it, at each switch away a record and a
 * look at their other tasks, and at some a copy of a few kilobytes (only
 * the last before a sample is taken: view.c says when they are made); the
 * daemon opens an event and a link for each task once, keeps one
 * descriptor a task, and reads the copies and records from maps mapped
 * into it, with no system call.
 */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kcopy_abi.h"
#include "kcopy.skel.h"
#include "kernel.h"

/* A watched task: its link holds the event that runs the program at its switches away. */
struct kcopy_watch {
	pid_t tid;
	uint64_t start_ns;
	int link_fd;    /* -1: the task could not be watched */
	uint32_t index; /* of its record in the slot (KCOPY_SHARED: none) */
};

struct kcopy {
	struct kcopy_bpf *skel;
	int prog_fd;
	struct kcopy_plan *plans;  /* mapped: the daemon writes them */
	struct kcopy_task *tasks;  /* mapped: the daemon writes one before the program does */
	const uint8_t *slots;      /* mapped read-only */
	size_t plans_len, tasks_len, slots_len, slot_stride;
	uint64_t generation;
	uint32_t nwatches;         /* over every slot, at most KCOPY_WATCHES */
	uint32_t nused;            /* slots in use: with all KCOPY_SLOTS, a claim is refused unsearched */
	bool used[KCOPY_SLOTS];
	bool whole[KCOPY_SLOTS];   /* every task the last look listed is watched, in its order */
	uint64_t unwatched;        /* watches given back so far */
	uint64_t tried[KCOPY_SLOTS]; /* unwatched when a slot's tasks were last tried */
	uint32_t nwatched[KCOPY_SLOTS];
	struct kcopy_watch watched[KCOPY_SLOTS][KCOPY_TASKS];
};

_Static_assert(UW_KREADER_DESCRIPTORS >= 8u + 2u * 64u + KCOPY_WATCHES,
               "a watched task holds one descriptor");
_Static_assert((KCOPY_BYTES & (KCOPY_BYTES - 1)) == 0, "the program masks offsets by it");
_Static_assert(sizeof(struct kcopy_plan) % 8 == 0 && sizeof(struct kcopy_task) % 8 == 0,
               "an mmapable array's values lie at their size rounded up to 8");

struct kcopy *kcopy_open(struct uw_error *err)
{
	struct kcopy *kc = calloc(1, sizeof *kc);
	if (!kc) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	kc->skel = kcopy_bpf__open();
	if (kernel_load(kc->skel ? kc->skel->skeleton : NULL, "the copy of a process as it falls quiet",
	                NULL, err) != 0) {
		kcopy_close(kc);
		return NULL;
	}
	kc->prog_fd = bpf_program__fd(kc->skel->progs.kcopy_switch);
	kc->slot_stride = (sizeof(struct kcopy_slot) + 7) & ~(size_t)7;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t plans_len = (sizeof(struct kcopy_plan) * KCOPY_SLOTS + page - 1) / page * page;
	size_t tasks_len = (sizeof(struct kcopy_task) * KCOPY_SLOTS * KCOPY_TASKS + page - 1) / page * page;
	size_t slots_len = (kc->slot_stride * KCOPY_SLOTS + page - 1) / page * page;
	kc->plans = kernel_map_mmap(kc->skel->maps.plans, plans_len, PROT_READ | PROT_WRITE);
	kc->plans_len = kc->plans ? plans_len : 0;
	kc->tasks = kernel_map_mmap(kc->skel->maps.tasks, tasks_len, PROT_READ | PROT_WRITE);
	kc->tasks_len = kc->tasks ? tasks_len : 0;
	kc->slots = kernel_map_mmap(kc->skel->maps.slots, slots_len, PROT_READ);
	kc->slots_len = kc->slots ? slots_len : 0;
	if (!kc->plans || !kc->tasks || !kc->slots) {
		uw_fail(err, UW_EIO, "mapping the copies of processes: %s", strerror(errno));
		kcopy_close(kc);
		return NULL;
	}
	return kc;
}

static void kcopy_unwatch(struct kcopy *kc, struct kcopy_watch *w)
{
	if (w->link_fd < 0)
		return;
	/* The link holds the event: closing it stops the program and frees the event. */
	close(w->link_fd);
	w->link_fd = -1;
	kc->nwatches--;
	kc->unwatched++;
}

void kcopy_close(struct kcopy *kc)
{
	if (!kc)
		return;
	for (int i = 0; i < KCOPY_SLOTS; i++)
		if (kc->used[i])
			kcopy_release(kc, i);
	if (kc->plans_len)
		munmap(kc->plans, kc->plans_len);
	if (kc->tasks_len)
		munmap(kc->tasks, kc->tasks_len);
	if (kc->slots_len)
		munmap((void *)kc->slots, kc->slots_len);
	if (kc->skel)
		kcopy_bpf__destroy(kc->skel);
	free(kc);
}

/* Rewrite a slot's plan under its sequence count: the program copies none of a plan half written. */
static void kcopy_write_plan(struct kcopy_plan *p, uint64_t generation, const struct remote_range *ranges,
                             const uint32_t *lens, const uint32_t *owners, uint32_t n)
{
	__atomic_fetch_add(&p->seq, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&p->generation, generation, __ATOMIC_RELAXED);
	uint32_t off = 0;
	for (uint32_t i = 0; i < n; i++) {
		p->ranges[i] = (struct kcopy_range){.addr = ranges[i].addr, .len = lens[i], .off = off,
		                                    .owner = owners[i]};
		off += lens[i];
	}
	p->nranges = n;
	__atomic_fetch_add(&p->seq, 1, __ATOMIC_SEQ_CST);
}

int kcopy_claim(struct kcopy *kc)
{
	if (!kc || kc->nused == KCOPY_SLOTS)
		return -1;
	for (int i = 0; i < KCOPY_SLOTS; i++)
		if (!kc->used[i]) {
			kc->used[i] = true;
			kc->nused++;
			kc->nwatched[i] = 0;
			kc->whole[i] = false;
			kcopy_write_plan(&kc->plans[i], 0, NULL, NULL, NULL, 0);
			return i;
		}
	return -1;
}

void kcopy_release(struct kcopy *kc, int slot)
{
	if (!kc || slot < 0 || slot >= KCOPY_SLOTS || !kc->used[slot])
		return;
	for (uint32_t i = 0; i < kc->nwatched[slot]; i++)
		kcopy_unwatch(kc, &kc->watched[slot][i]);
	kc->nwatched[slot] = 0;
	kc->whole[slot] = false;
	kcopy_write_plan(&kc->plans[slot], 0, NULL, NULL, NULL, 0);
	kc->used[slot] = false;
	kc->nused--;
}

/* A record's count and time, read whole; false while it is being written. */
static bool kcopy_record(const struct kcopy_task *r, uint64_t *switches, uint64_t *at_ns)
{
	uint64_t seq = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
	*switches = __atomic_load_n(&r->switches, __ATOMIC_RELAXED);
	*at_ns = __atomic_load_n(&r->at_ns, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return !(seq & 1) && __atomic_load_n(&r->seq, __ATOMIC_RELAXED) == seq;
}

/*
 * Watch task (as the look saw it) at the slot's record index: its record
 * written first, from the look (the program writes none until the link
 * exists), then the event that runs the program at each switch away.  The
 * link's descriptor, or -1.
 */
static int kcopy_attach(struct kcopy *kc, int slot, uint32_t index, const struct kstill_task *task)
{
	struct kcopy_task *r = &kc->tasks[(size_t)slot * KCOPY_TASKS + index];
	__atomic_fetch_add(&r->seq, 1, __ATOMIC_SEQ_CST);
	r->switches = task->switches;
	/* After the look: a copy begun before it proves nothing of this task. */
	r->at_ns = clock_mono_ns();
	__atomic_fetch_add(&r->seq, 1, __ATOMIC_SEQ_CST);
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof attr,
		.config = PERF_COUNT_SW_CONTEXT_SWITCHES,
		.sample_period = 1,
		.disabled = 1,
	};
	int fd = (int)syscall(__NR_perf_event_open, &attr, task->tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0)
		return -1;
	LIBBPF_OPTS(bpf_link_create_opts, opts,
	            .perf_event.bpf_cookie = (uint64_t)slot * KCOPY_TASKS + index);
	int link = bpf_link_create(kc->prog_fd, fd, BPF_PERF_EVENT, &opts);
	if (link >= 0 && ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
		close(link);
		link = -1;
	}
	/* The link holds the event from now on. */
	close(fd);
	return link;
}

uint32_t kcopy_follow(struct kcopy *kc, int slot, const struct kstill_task *tasks, uint32_t n)
{
	if (!kc || slot < 0 || slot >= KCOPY_SLOTS || !kc->used[slot])
		return 0;
	struct kcopy_watch *w = kc->watched[slot];
	uint32_t nw = kc->nwatched[slot];
	/*
	 * The same tasks as at the last sample, in the kernel's order: nearly
	 * always.  One that could not be watched is tried again only once a
	 * watch was given back (room, or a descriptor), not at every sample.
	 */
	if (n == nw && (kc->whole[slot] || kc->tried[slot] == kc->unwatched)) {
		uint32_t i = 0;
		while (i < n && w[i].tid == tasks[i].tid && w[i].start_ns == tasks[i].start_ns)
			i++;
		if (i == n)
			return 0;
	}
	/* A process of more tasks is not copied. */
	if (n > KCOPY_TASKS)
		n = 0;
	/* Each task of the look: its watch kept, or a new one at a free record index. */
	int found[KCOPY_TASKS];
	bool kept[KCOPY_TASKS] = {false};
	uint32_t taken = 0; /* record indices in use, a bit each */
	/* Bounded: KCOPY_TASKS squared at most, once a change of the process's tasks. */
	for (uint32_t i = 0; i < n; i++) {
		found[i] = -1;
		for (uint32_t j = 0; j < nw && found[i] < 0; j++)
			if (!kept[j] && w[j].link_fd >= 0 && w[j].tid == tasks[i].tid &&
			    w[j].start_ns == tasks[i].start_ns) {
				kept[j] = true;
				taken |= 1u << w[j].index;
				found[i] = (int)j;
			}
	}
	for (uint32_t j = 0; j < nw; j++)
		if (!kept[j])
			kcopy_unwatch(kc, &w[j]);
	kc->tried[slot] = kc->unwatched;
	struct kcopy_watch next[KCOPY_TASKS];
	uint32_t failed = 0;
	bool whole = n > 0;
	for (uint32_t i = 0; i < n; i++) {
		if (found[i] >= 0) {
			next[i] = w[found[i]];
			continue;
		}
		uint32_t index = 0;
		while (index < KCOPY_TASKS && (taken >> index & 1u))
			index++;
		int link = index < KCOPY_TASKS && kc->nwatches < KCOPY_WATCHES
		               ? kcopy_attach(kc, slot, index, &tasks[i])
		               : -1;
		/* Kept unwatched, so that the next sample knows the process: it could run unrecorded, so no copy is taken. */
		next[i] = (struct kcopy_watch){.tid = tasks[i].tid, .start_ns = tasks[i].start_ns,
		                               .link_fd = link, .index = KCOPY_SHARED};
		if (link < 0) {
			whole = false;
			failed++;
			continue;
		}
		kc->nwatches++;
		taken |= 1u << index;
		next[i].index = index;
	}
	memcpy(w, next, n * sizeof *next);
	kc->nwatched[slot] = n;
	kc->whole[slot] = whole;
	return failed;
}

uint64_t kcopy_plan(struct kcopy *kc, int slot, const struct remote_range *ranges, const uint32_t *used_lens,
                    const pid_t *owners, uint32_t n)
{
	if (!kc || slot < 0 || slot >= KCOPY_SLOTS || !kc->used[slot])
		return 0;
	uint64_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += used_lens[i] <= ranges[i].len ? used_lens[i] : UINT32_MAX;
	/* A plan past the room is not copied: the sample reads it. */
	uint64_t generation = n && n <= KCOPY_RANGES && total <= KCOPY_BYTES ? ++kc->generation : 0;
	if (!generation) {
		kcopy_write_plan(&kc->plans[slot], 0, NULL, NULL, NULL, 0);
		return 0;
	}
	/* Each range of one thread's stack by the index of its task's record: its runs decide its copies. */
	uint32_t index[KCOPY_RANGES];
	const struct kcopy_watch *w = kc->watched[slot];
	for (uint32_t i = 0; i < n; i++) {
		index[i] = KCOPY_SHARED;
		for (uint32_t j = 0; owners[i] > 0 && j < kc->nwatched[slot] && index[i] == KCOPY_SHARED; j++)
			if (w[j].tid == owners[i])
				index[i] = w[j].index;
	}
	kcopy_write_plan(&kc->plans[slot], generation, ranges, used_lens, index, n);
	return generation;
}

uint64_t kcopy_quiet(const struct kcopy *kc, int slot)
{
	if (!kc || slot < 0 || slot >= KCOPY_SLOTS || !kc->used[slot])
		return 0;
	const struct kcopy_slot *s = (const void *)(kc->slots + (size_t)slot * kc->slot_stride);
	return __atomic_load_n(&s->quiet, __ATOMIC_RELAXED);
}

void kcopy_window(struct kcopy *kc, int slot, uint64_t since_ns, uint64_t from_ns)
{
	if (!kc || slot < 0 || slot >= KCOPY_SLOTS || !kc->used[slot])
		return;
	__atomic_store_n(&kc->plans[slot].since_ns, since_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&kc->plans[slot].from_ns, from_ns, __ATOMIC_RELAXED);
}

bool kcopy_take(struct kcopy *kc, int slot, uint64_t generation, uint64_t after_ns,
                const struct kstill_task *tasks, uint32_t n, struct remote_range *ranges, uint32_t nranges)
{
	if (!kc || slot < 0 || slot >= KCOPY_SLOTS || !kc->used[slot] || !kc->whole[slot] || !generation ||
	    n != kc->nwatched[slot] || nranges > KCOPY_RANGES)
		return false;
	const struct kcopy_slot *s = (const void *)(kc->slots + (size_t)slot * kc->slot_stride);
	uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
	if (seq & 1)
		return false; /* being written: a task of the process is switching away right now */
	uint64_t begun = s->begun_ns;
	uint32_t taker = s->taker;
	if (s->status != KCOPY_OK || s->generation != generation || begun <= after_ns || s->ntasks != n)
		return false;
	/* Every task off its CPU, with the count its record holds, recorded before the copy began. */
	const struct kcopy_watch *w = kc->watched[slot];
	for (uint32_t i = 0; i < n; i++) {
		uint64_t switches, at_ns;
		if (tasks[i].state == KSTILL_RUNS || w[i].tid != tasks[i].tid ||
		    !kcopy_record(&kc->tasks[(size_t)slot * KCOPY_TASKS + w[i].index], &switches, &at_ns) ||
		    switches != tasks[i].switches || (w[i].index == taker ? at_ns != begun : at_ns >= begun))
			return false;
	}
	/* Each range as far as the plan copied it, from its start: the room to grow is read if reached. */
	const struct kcopy_plan *plan = &kc->plans[slot];
	if (plan->nranges != nranges)
		return false;
	for (uint32_t i = 0; i < nranges; i++) {
		const struct kcopy_range *r = &plan->ranges[i];
		if (r->addr != ranges[i].addr || r->len > ranges[i].len || r->off + (uint64_t)r->len > KCOPY_BYTES)
			return false;
		ranges[i].got = s->got[i] == r->len ? r->len : 0;
		memcpy(ranges[i].buf, s->bytes + r->off, ranges[i].got);
	}
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == seq;
}
