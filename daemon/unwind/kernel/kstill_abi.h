/*
 * What the kernel's look at which threads ran (kstill.bpf.c) and its owner
 * in the daemon (kstill.c) share.  Fixed-width fields only, as both a BPF
 * program and the daemon read them.
 */
#ifndef PYPROFD_UNWIND_KSTILL_ABI_H
#define PYPROFD_UNWIND_KSTILL_ABI_H

#include <linux/types.h>

/* Processes looked at, over every target. */
#define KSTILL_PROCS 256
/*
 * Tasks of one process a look tells of: a process of more is told by count
 * alone.  A thread pool of a few hundred, mostly asleep, is where a proof
 * that a thread ran nothing saves the most pages.
 */
#define KSTILL_TASKS 256

enum kstill_state {
	KSTILL_UNSEEN = 0, /* not looked at yet */
	KSTILL_GONE = 1,   /* no such process (or the id is a thread's) */
	KSTILL_RUNS = 2,   /* a task on a CPU */
	KSTILL_OFF = 3,    /* a task asleep */
	KSTILL_SEEN = 4,   /* a process looked at: its tasks follow */
	KSTILL_QUEUED = 5, /* a task runnable, waiting for a CPU */
};

/* pid is written by the daemon; the rest by the program at each look. */
struct kstill_proc {
	__s32 pid;         /* as the daemon's pid namespace numbers it; 0: none */
	__u32 state;       /* KSTILL_SEEN or KSTILL_GONE */
	__u32 ntasks;      /* the tasks it has, KSTILL_TASKS of them told in its tasks */
	__u32 pad;
	__u64 start_ns;    /* when it began: a pid given to another process reads another */
	__u64 seq;         /* orders the loads of one look */
};

/* One task of a process looked at, in the order the kernel lists them (by process i at i * KSTILL_TASKS). */
struct kstill_task {
	__s32 tid;
	__u32 state;       /* KSTILL_RUNS, KSTILL_QUEUED or KSTILL_OFF */
	__u64 switches;    /* times the scheduler switched away from the task (nvcsw + nivcsw) */
	__u64 start_ns;    /* when the task began: a tid given to another reads another */
};

#endif
