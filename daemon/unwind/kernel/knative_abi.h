/*
 * What the kernel's copy of waiting threads' native stacks (knative.bpf.c)
 * and its owner in the daemon (knative.c) share.  Fixed-width fields only,
 * as both a BPF program and the daemon read them.
 */
#ifndef PYPROFD_UNWIND_KNATIVE_ABI_H
#define PYPROFD_UNWIND_KNATIVE_ABI_H

#include <linux/types.h>

/* Threads one run of the program answers for. */
#define KNATIVE_THREADS 64
/*
 * Bytes of a thread's stack copied from the page of its stack pointer up.  A waiting
 * thread's C frames from its system call down to its start take a few KiB
 * on 3.11 and later; before 3.11 every Python call is a C call too, and a
 * stack deeper than this ends in a mark.
 */
#define KNATIVE_STACK (32u << 10)

enum knative_mode {
	KNATIVE_COPY = 0, /* the registers and the stack, with the proof below */
	KNATIVE_LOOK = 1, /* the switch count alone: did the thread run since a copy */
};

enum knative_status {
	KNATIVE_UNSEEN = 0,
	KNATIVE_GONE = 1,    /* no such thread, another with its id, or not of that process */
	KNATIVE_RUNS = 2,    /* on a CPU, or it ran while being copied: nothing of it is proven */
	KNATIVE_COPIED = 3,  /* off its CPU from before the copy to after it: regs and stack hold */
	KNATIVE_STILL = 4,   /* (a look) off its CPU now, switches counted */
	KNATIVE_NO_REGS = 5, /* a thread with no user registers (a kernel thread) */
};

/* The x86-64 registers a CFI walk starts from, in this order. */
enum knative_reg {
	KNATIVE_IP, KNATIVE_SP, KNATIVE_BP, KNATIVE_BX,
	KNATIVE_R12, KNATIVE_R13, KNATIVE_R14, KNATIVE_R15,
	KNATIVE_NREGS,
};

/* One thread: the daemon writes pid, tid, start_ns and top; the program the rest. */
struct knative_thread {
	__s32 pid;         /* the process it must belong to */
	__s32 tid;         /* as the daemon's pid namespace numbers it */
	__u64 start_ns;    /* when the task began (0: any): an id given to another reads another */
	__u64 top;         /* the stack is copied up to here (the end of its last walk), 0: all it may */
	__u32 status;      /* enum knative_status, of the last copy */
	__u32 len;         /* bytes of stack copied from base, whole pages */
	__u64 switches;    /* times the scheduler switched away from it (nvcsw + nivcsw), at the copy */
	__u32 look_status; /* of the last look: KNATIVE_STILL, else why not */
	__u32 pad;
	__u64 look_switches;
	__u64 regs[KNATIVE_NREGS];
	__u64 base;        /* the address of stack[0]: the page of the stack pointer */
	__u8 stack[KNATIVE_STACK];
};

#endif
