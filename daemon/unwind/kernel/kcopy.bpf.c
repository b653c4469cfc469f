/*
 * The kernel's copy of a process as it falls quiet: at each switch away of
 * a watched task of a target from its CPU, the task's count of switches
 * away and the time are recorded, and the bytes the daemon's next sample
 * will read (its plan) are copied from the process's memory, here, in the
 * process's own context, with faults off: nothing is pinned, no system call
 * is made.  The daemon takes the copy only when its look (kstill) proves
 * that no task ran after the copy began (kcopy.c).  It runs on a software
 * event of each watched task (PERF_COUNT_SW_CONTEXT_SWITCHES, every switch
 * away), so it costs the rest of the machine nothing, and it reads nothing
 * of the kernel's but the switching task's own counts.  Built by clang for
 * BPF (see Makefile), loaded by kcopy.c; the kernel's fields are found
 * through its BTF.
 */
#include <stdbool.h>

#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#include "kcopy_abi.h"
#include "ktasks.bpf.h"

struct task_struct {
	unsigned int __state;
	struct task_struct *group_leader;
	int on_cpu;
	unsigned long nvcsw;
	unsigned long nivcsw;
} __attribute__((preserve_access_index));

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KCOPY_SLOTS);
	__type(key, __u32);
	__type(value, struct kcopy_plan);
} plans SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KCOPY_SLOTS * KCOPY_TASKS);
	__type(key, __u32);
	__type(value, struct kcopy_task);
} tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KCOPY_SLOTS);
	__type(key, __u32);
	__type(value, struct kcopy_slot);
} slots SEC(".maps");

/*
 * The process's tasks, when no other than this one is on a CPU or queued
 * for one, else 0: one that is runs on after this one, and a copy now
 * would be of a moment already past by the next sample (it would not be
 * taken, so it is not made).  The count goes with the copy: a task that
 * ends, as it may unwatched, is missing from the look (kcopy.c).
 */
static __always_inline __u32 kcopy_quiet_tasks(struct task_struct *me)
{
	struct task_struct *leader = bpf_task_acquire(me->group_leader);
	if (!leader)
		return 0;
	struct bpf_iter_task it;
	struct task_struct *task;
	__u32 n = 0;
	/* From the leader: from another task the kernel lists only those after it. */
	bpf_iter_task_new(&it, leader, KTASK_ITER_PROC_THREADS);
	while ((task = bpf_iter_task_next(&it))) {
		if (++n > KCOPY_TASKS || (task != me && (task->on_cpu || task->__state == KTASK_RUNNING))) {
			n = 0;
			break;
		}
	}
	bpf_iter_task_destroy(&it);
	bpf_task_release(leader);
	return n;
}

/*
 * Whether the task at index owner of slot key was not switched away since
 * the last sample's look (a torn load of its record only copies a stack
 * that was not needed, or leaves one to be read).
 */
static __always_inline bool kcopy_still_since(__u32 key, __u32 owner, __u64 since_ns)
{
	if (owner >= KCOPY_TASKS)
		return false;
	__u32 record = key * KCOPY_TASKS + owner;
	const struct kcopy_task *t = bpf_map_lookup_elem(&tasks, &record);
	return t && *(volatile __u64 *)&t->at_ns < since_ns;
}

/* The plan's ranges into s->bytes (but the stacks of tasks that did not run since the last look): the status they leave. */
static __always_inline __u32 kcopy_ranges(struct kcopy_slot *s, const struct kcopy_plan *plan, __u32 key)
{
	__u32 n = plan->nranges, bytes = 0;
	__u64 since_ns = *(volatile __u64 *)&plan->since_ns;
	for (__u32 i = 0; i < KCOPY_RANGES; i++) {
		if (i >= n)
			break;
		const struct kcopy_range *r = &plan->ranges[i];
		__u32 len = r->len, off = r->off & (KCOPY_BYTES - 1);
		if (len > KCOPY_BYTES || off + len > KCOPY_BYTES)
			return KCOPY_PLAN;
		/* Its thread is proven at the next sample, its stack not read: not copied either. */
		if (kcopy_still_since(key, r->owner, since_ns)) {
			s->got[i] = 0;
			continue;
		}
		/* Faults are off: a page not resident fails this range alone, which the sample then reads. */
		s->got[i] = bpf_probe_read_user(&s->bytes[off], len, (const void *)r->addr) == 0 ? len : 0;
		bytes += len;
	}
	s->copies++;
	s->copied_bytes += bytes;
	return KCOPY_OK;
}

SEC("perf_event")
int kcopy_switch(struct bpf_perf_event_data *ctx)
{
	__u32 record = (__u32)bpf_get_attach_cookie(ctx), key = record / KCOPY_TASKS;
	struct kcopy_task *me = bpf_map_lookup_elem(&tasks, &record);
	struct kcopy_plan *plan = bpf_map_lookup_elem(&plans, &key);
	struct kcopy_slot *s = bpf_map_lookup_elem(&slots, &key);
	/* 0: no sample of the event is written anywhere. */
	if (!me || !plan || !s)
		return 0;
	/*
	 * The switch away is already counted (__schedule counts it before it
	 * switches), and the task runs nothing of its own from here on.
	 */
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 now = bpf_ktime_get_ns();
	__sync_fetch_and_add(&me->seq, 1);
	me->switches = task->nvcsw + task->nivcsw;
	me->at_ns = now;
	__sync_fetch_and_add(&me->seq, 1);

	__u64 plan_seq = *(volatile __u64 *)&plan->seq;
	__u64 generation = *(volatile __u64 *)&plan->generation;
	__u32 ntasks;
	if ((plan_seq & 1) || generation == 0 || !(ntasks = kcopy_quiet_tasks(task)))
		return 0;
	__sync_fetch_and_add(&s->quiet, 1);
	if (now < *(volatile __u64 *)&plan->from_ns)
		return 0;
	/* One writer at a time: a task switching away on another CPU at once leaves the copy to this one. */
	if (__sync_val_compare_and_swap(&s->busy, 0, 1) != 0)
		return 0;
	__sync_fetch_and_add(&s->seq, 1);
	__u32 status = kcopy_ranges(s, plan, key);
	if (status == KCOPY_OK && *(volatile __u64 *)&plan->seq != plan_seq)
		status = KCOPY_TORN;
	s->status = status;
	s->taker = record % KCOPY_TASKS;
	s->ntasks = ntasks;
	s->generation = status == KCOPY_OK ? generation : 0;
	s->begun_ns = now;
	__sync_fetch_and_add(&s->seq, 1);
	__sync_lock_test_and_set(&s->busy, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
