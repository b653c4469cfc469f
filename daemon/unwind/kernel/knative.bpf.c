/*
 * The native stacks of waiting threads, copied without stopping them.  For
 * every thread asked of it, the program finds the task, and when it is off
 * its CPU copies the user registers the kernel saved as it entered (a
 * system call, a fault, an interrupt) and the top of its user stack.  The
 * switch count is loaded before and after the copy: unchanged, with the
 * task off its CPU at the first load, nothing of it ran while it was copied
 * (the argument of kstill.c).  A running thread's saved registers are of
 * some earlier entry and are never copied.
 *
 * Run on demand by the daemon (BPF_PROG_TEST_RUN) as a sleepable program,
 * since copying another task's memory may fault pages in.  Built by clang
 * for BPF (see Makefile), loaded by knative.c.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "knative_abi.h"
#include "kregs.bpf.h"
#include "ktasks.bpf.h"

struct task_struct {
	unsigned int __state;
	int on_cpu;
	int pid;
	int tgid;
	unsigned int flags;
	unsigned long nvcsw;
	unsigned long nivcsw;
	__u64 start_time;
} __attribute__((preserve_access_index));

/* PF_KTHREAD: a kernel thread has no user registers. */
#define KNATIVE_PF_KTHREAD 0x00200000u
#define KNATIVE_PAGE 4096u

__u32 knative_nthreads;
__u32 knative_mode;
/* Only its atomic add matters: the barrier between two loads. */
__u64 knative_order;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KNATIVE_THREADS);
	__type(key, __u32);
	__type(value, struct knative_thread);
} threads SEC(".maps");

static __always_inline __u64 knative_switches(struct task_struct *task)
{
	/* On a CPU is loaded before the count: a full barrier keeps the order (see kstill.c). */
	__sync_fetch_and_add(&knative_order, 1);
	return task->nvcsw + task->nivcsw;
}

/*
 * The stack from the page of sp up to the page of top (0: no end), whole
 * pages at fixed offsets (what the verifier can bound), until a page will
 * not copy or the room ends: the bytes copied.
 */
static __always_inline __u32 knative_copy_stack(struct knative_thread *e, struct task_struct *task, __u64 sp)
{
	__u64 base = sp & ~(__u64)(KNATIVE_PAGE - 1), top = e->top;
	__u32 len = 0;
	e->base = base;
#pragma unroll
	for (int page = 0; page < (int)(KNATIVE_STACK / KNATIVE_PAGE); page++) {
		if (top && base + page * KNATIVE_PAGE >= top)
			break;
		if (bpf_copy_from_user_task(e->stack + page * KNATIVE_PAGE, KNATIVE_PAGE,
		                            (const void *)(base + page * KNATIVE_PAGE), task, 0) != 0)
			break;
		len += KNATIVE_PAGE;
	}
	return len;
}

static __always_inline __u32 knative_still(struct knative_thread *e, struct task_struct *task)
{
	if (task->tgid != e->pid || (e->start_ns && task->start_time != e->start_ns))
		return KNATIVE_GONE;
	if (task->flags & KNATIVE_PF_KTHREAD)
		return KNATIVE_NO_REGS;
	return task->on_cpu ? KNATIVE_RUNS : KNATIVE_STILL;
}

static __always_inline void knative_one(struct knative_thread *e, __u32 mode)
{
	struct task_struct *task = bpf_task_from_pid(e->tid);
	if (!task) {
		if (mode == KNATIVE_LOOK)
			e->look_status = KNATIVE_GONE;
		else
			e->status = KNATIVE_GONE;
		return;
	}
	__u32 still = knative_still(e, task);
	__u64 before = knative_switches(task);
	if (mode == KNATIVE_LOOK) {
		e->look_status = still;
		e->look_switches = before;
		goto out;
	}
	e->switches = before;
	if (still != KNATIVE_STILL) {
		e->status = still;
		goto out;
	}
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs((struct task_struct *)task);
	if (!regs) {
		e->status = KNATIVE_NO_REGS;
		goto out;
	}
	kregs_save(e->regs, regs);
	e->len = knative_copy_stack(e, task, e->regs[KNATIVE_SP]);
	int on_cpu = task->on_cpu;
	__u64 after = knative_switches(task);
	e->status = !on_cpu && after == before ? KNATIVE_COPIED : KNATIVE_RUNS;
out:
	bpf_task_release(task);
}

SEC("syscall")
int knative_run(void *unused)
{
	(void)unused;
	__u32 n = knative_nthreads < KNATIVE_THREADS ? knative_nthreads : KNATIVE_THREADS;
	__u32 mode = knative_mode;
	struct bpf_iter_num it;
	int *at;
	bpf_iter_num_new(&it, 0, (int)n);
	while ((at = bpf_iter_num_next(&it))) {
		__u32 key = (__u32)*at;
		struct knative_thread *e = bpf_map_lookup_elem(&threads, &key);
		if (!e || e->tid <= 0)
			continue;
		if (mode == KNATIVE_COPY) {
			e->status = KNATIVE_UNSEEN;
			e->len = 0;
		}
		e->look_status = KNATIVE_UNSEEN;
		knative_one(e, mode);
	}
	bpf_iter_num_destroy(&it);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
