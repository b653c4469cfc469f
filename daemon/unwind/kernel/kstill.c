/*
 * The kernel's word on which threads ran: the owner of kstill.bpf.c.
 *
 * A thread whose innermost frame was read while it slept, and which was
 * never put on a CPU since, has that frame now: a sample may take its stack
 * as read then and pin none of its pages.  The kernel knows both facts for
 * every task; a BPF program run on demand (BPF_PROG_TEST_RUN) copies them
 * for every task of every watched process into maps mapped into the daemon,
 * one system call for all of them.  The daemon takes one such look as a
 * wakeup begins, before any of its targets is read, and a target sampled
 * with no look since its last sample takes one itself.
 *
 * The argument, for one thread (looks L1 < L2 in time):
 *
 *   L1. the thread is seen off its CPU, then its count of switches away
 *       (nvcsw + nivcsw) is loaded: c
 *   R.  its stack is read, whole                (after L1, before L2)
 *   L2. it is seen off its CPU, then its count loads as c, and the task is
 *       the same one
 *
 * The scheduler adds one to a task's count each time it switches away from
 * it (__schedule), and never takes one off; the task runs only between
 * being switched to and switched away.  Suppose it ran an instruction after
 * L1 loaded its count.  It was on a CPU then, and off it at L2's first
 * load: it was switched away in between, after L1's count was loaded, so
 * L2's count is more than c.  (Had it run only before L1's count was
 * loaded, it was off its CPU again by then, and R is after.)  So nothing of
 * the thread ran from L1 to L2: the stack read at R is its stack at L2.
 * Only the thread itself moves its frames (see threads.c).  A task is
 * matched by its id and the time it began, so an id given to another task
 * proves nothing; a process is found by its id only if that is a process's,
 * not a thread's, and only by a daemon in the initial pid namespace, whose
 * ids the program's lookup takes.  A kernel without the program's kfuncs
 * (the task iterator: Linux 6.7) or its BTF refuses it: then the proofs are
 * /proc's, as before (threads.c, still.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kstill.skel.h"
#include "kernel.h"

struct kstill {
	struct kstill_bpf *skel;
	int prog_fd;
	struct kstill_proc *procs; /* the maps, mapped: the daemon writes a process's pid */
	const struct kstill_task *tasks;
	size_t procs_len, tasks_len;
	uint32_t nprocs;           /* processes in use lie below this */
	uint32_t nwatched;         /* entries in use: with all KSTILL_PROCS, a watch is refused unsearched */
	uint64_t looks;            /* looks taken: a look's number */
};

/*
 * The kernel's own number of the initial pid namespace (PROC_PID_INIT_INO):
 * the program finds tasks by the ids that namespace gives them.
 */
#define KSTILL_INIT_PID_NS_INO 0xeffffffcu

struct kstill *kstill_open(struct uw_error *err)
{
	/*
	 * A daemon in a pid namespace of its own numbers processes otherwise:
	 * the look would find another process by a target's id.
	 */
	struct stat ns;
	if (stat("/proc/self/ns/pid", &ns) != 0 || ns.st_ino != KSTILL_INIT_PID_NS_INO) {
		uw_fail(err, UW_EPERM, "no look at which threads ran: the daemon is not in the initial pid namespace");
		return NULL;
	}
	struct kstill *ks = calloc(1, sizeof *ks);
	if (!ks) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	ks->skel = kstill_bpf__open();
	if (kernel_load(ks->skel ? ks->skel->skeleton : NULL, "the look at which threads ran",
	                "it needs Linux 6.7", err) != 0) {
		kstill_close(ks);
		return NULL;
	}
	ks->prog_fd = bpf_program__fd(ks->skel->progs.kstill_scan);
	/* An mmapable array's values lie at a stride of their size rounded up to 8: theirs are multiples. */
	_Static_assert(sizeof(struct kstill_proc) % 8 == 0 && sizeof(struct kstill_task) % 8 == 0,
	               "the maps' values lie at their own size");
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t procs_len = (sizeof(struct kstill_proc) * KSTILL_PROCS + page - 1) / page * page;
	size_t tasks_len = (sizeof(struct kstill_task) * KSTILL_PROCS * KSTILL_TASKS + page - 1) / page * page;
	ks->procs = kernel_map_mmap(ks->skel->maps.procs, procs_len, PROT_READ | PROT_WRITE);
	ks->procs_len = ks->procs ? procs_len : 0;
	ks->tasks = kernel_map_mmap(ks->skel->maps.tasks, tasks_len, PROT_READ);
	ks->tasks_len = ks->tasks ? tasks_len : 0;
	if (!ks->procs || !ks->tasks) {
		uw_fail(err, UW_EIO, "mapping the looks at which threads ran: %s", strerror(errno));
		kstill_close(ks);
		return NULL;
	}
	return ks;
}

void kstill_close(struct kstill *ks)
{
	if (!ks)
		return;
	if (ks->procs_len)
		munmap(ks->procs, ks->procs_len);
	if (ks->tasks_len)
		munmap((void *)ks->tasks, ks->tasks_len);
	if (ks->skel)
		kstill_bpf__destroy(ks->skel);
	free(ks);
}

int kstill_watch(struct kstill *ks, pid_t pid)
{
	/* A target past the room asks at every sample: it must not search a full table each time. */
	if (!ks || pid <= 0 || ks->nwatched == KSTILL_PROCS)
		return -1;
	/* Bounded by KSTILL_PROCS: the first free entry, else one more. */
	uint32_t at = 0;
	while (at < ks->nprocs && ks->procs[at].pid != 0)
		at++;
	if (at == KSTILL_PROCS)
		return -1;
	if (at == ks->nprocs)
		ks->nprocs++;
	/* Unseen until the next look fills it in. */
	ks->procs[at] = (struct kstill_proc){.pid = pid};
	ks->nwatched++;
	return (int)at;
}

void kstill_unwatch(struct kstill *ks, int proc)
{
	if (!ks || proc < 0 || (uint32_t)proc >= ks->nprocs || ks->procs[proc].pid == 0)
		return;
	ks->procs[proc] = (struct kstill_proc){0};
	ks->nwatched--;
	/* Free entries at the top are given back, so a look goes no further than the processes watched. */
	while (ks->nprocs && ks->procs[ks->nprocs - 1].pid == 0)
		ks->nprocs--;
}

bool kstill_look(struct kstill *ks)
{
	if (!ks)
		return false;
	ks->skel->bss->kstill_nprocs = ks->nprocs;
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	if (bpf_prog_test_run_opts(ks->prog_fd, &opts) != 0)
		return false;
	ks->looks++;
	return true;
}

uint64_t kstill_looks(const struct kstill *ks)
{
	return ks ? ks->looks : 0;
}

const struct kstill_task *kstill_seen(const struct kstill *ks, int proc, uint32_t *ntasks,
                                      uint64_t *start_ns)
{
	*ntasks = 0;
	*start_ns = 0;
	if (!ks || proc < 0 || (uint32_t)proc >= ks->nprocs)
		return NULL;
	/* The program ran to its end before the look returned: plain loads see what it wrote. */
	const struct kstill_proc *p = &ks->procs[proc];
	if (p->state != KSTILL_SEEN)
		return NULL;
	*ntasks = p->ntasks;
	*start_ns = p->start_ns;
	return ks->tasks + (size_t)proc * KSTILL_TASKS;
}
