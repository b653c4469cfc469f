/*
 * Which threads ran: for every watched process, each of its tasks with the
 * times the scheduler switched away from it and whether it is on a CPU,
 * queued for one, or asleep now, looked at all at once when the daemon runs
 * the program (BPF_PROG_TEST_RUN).  Nothing of it runs on the targets or on
 * the rest of the machine.  A process is found by its id once a look; its
 * tasks are walked under RCU, with no lookup or reference of their own.
 * Built by clang for BPF (see Makefile), loaded by kstill.c; the kernel's
 * fields are found through its BTF, so only the ones read are declared.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "kstill_abi.h"
#include "ktasks.bpf.h"

/*
 * The fields read lie in four cache lines of a task (its state and CPU
 * flag, its ids, its link to the next, its switch counts and start time):
 * the look runs with the kernel's caches cold, so each line is most of
 * its cost.
 */
struct task_struct {
	unsigned int __state;
	int on_cpu;
	int pid;
	int tgid;
	unsigned long nvcsw;
	unsigned long nivcsw;
	__u64 start_time;
} __attribute__((preserve_access_index));

extern void bpf_rcu_read_lock(void) __ksym;
extern void bpf_rcu_read_unlock(void) __ksym;

/* Processes below this are looked at: set by the daemon (no argument to copy in at every look). */
__u32 kstill_nprocs;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSTILL_PROCS);
	__type(key, __u32);
	__type(value, struct kstill_proc);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSTILL_PROCS * KSTILL_TASKS);
	__type(key, __u32);
	__type(value, struct kstill_task);
} tasks SEC(".maps");

/*
 * One process's tasks into its KSTILL_TASKS entries from first: how many it
 * has, KSTILL_TASKS + 1 standing for more (a count that stops there lets
 * the verifier see the loop's states meet).
 */
static __always_inline __u32 kstill_tasks_of(struct task_struct *leader, struct kstill_proc *p, __u32 first)
{
	struct bpf_iter_task it;
	struct task_struct *task;
	__u32 n = 0;
	bpf_rcu_read_lock();
	bpf_iter_task_new(&it, leader, KTASK_ITER_PROC_THREADS);
	while ((task = bpf_iter_task_next(&it))) {
		if (n >= KSTILL_TASKS) {
			n = KSTILL_TASKS + 1;
			break;
		}
		__u32 key = first + n;
		struct kstill_task *e = bpf_map_lookup_elem(&tasks, &key);
		n++;
		if (!e)
			continue;
		int on_cpu = task->on_cpu;
		unsigned int state = task->__state;
		/*
		 * Whether the task is on a CPU is loaded before its count of
		 * switches away (see kstill.c): a full barrier keeps the loads
		 * in that order.
		 */
		__sync_fetch_and_add(&p->seq, 1);
		e->switches = task->nvcsw + task->nivcsw;
		e->tid = task->pid;
		e->start_ns = task->start_time;
		e->state = on_cpu ? KSTILL_RUNS : state == KTASK_RUNNING ? KSTILL_QUEUED : KSTILL_OFF;
	}
	bpf_iter_task_destroy(&it);
	bpf_rcu_read_unlock();
	return n;
}

SEC("syscall")
int kstill_scan(void *unused)
{
	(void)unused;
	__u32 nprocs = kstill_nprocs < KSTILL_PROCS ? kstill_nprocs : KSTILL_PROCS;
	struct bpf_iter_num procs_it;
	int *at;
	/* An iterator, not a counted loop: the verifier checks its body once, not once a process. */
	bpf_iter_num_new(&procs_it, 0, (int)nprocs);
	while ((at = bpf_iter_num_next(&procs_it))) {
		__u32 i = (__u32)*at;
		if (i >= KSTILL_PROCS)
			break;
		__u32 key = i;
		struct kstill_proc *p = bpf_map_lookup_elem(&procs, &key);
		if (!p || p->pid <= 0)
			continue;
		struct task_struct *leader = bpf_task_from_pid(p->pid);
		if (!leader) {
			p->state = KSTILL_GONE;
			continue;
		}
		if (leader->tgid != p->pid) {
			bpf_task_release(leader);
			p->state = KSTILL_GONE;
			continue;
		}
		p->start_ns = leader->start_time;
		p->ntasks = kstill_tasks_of(leader, p, i * KSTILL_TASKS);
		p->state = KSTILL_SEEN;
		bpf_task_release(leader);
	}
	bpf_iter_num_destroy(&procs_it);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
