/*
 * What the shot of a running thread's native stack (kshot.bpf.c) and its
 * owner in the daemon (kshot.c) share.  Fixed-width fields only, as both a
 * BPF program and the daemon read them.
 */
#ifndef PYPROFD_UNWIND_KSHOT_ABI_H
#define PYPROFD_UNWIND_KSHOT_ABI_H

#include <linux/types.h>

#include "knative_abi.h"

/* Threads watched at once, over every target: one slot, one perf event each. */
#define KSHOT_SLOTS 64
/* Python frames the shot records from the innermost out, to tie it to a walk. */
#define KSHOT_ANCHORS 4
/* A watched thread is shot every this many ns of its running: twice a sample at 100 Hz. */
#define KSHOT_PERIOD_NS 4000000u
/* An offset the version does not have. */
#define KSHOT_ABSENT 0xffffu

enum kshot_status {
	KSHOT_OK = 0,
	KSHOT_FAULT = 1,   /* a Python frame would not read: the shot ties to no walk */
	KSHOT_NO_REGS = 2, /* no user registers (a kernel thread) */
};

/* A watched thread: where its innermost Python frame is found (written by the daemon). */
struct kshot_aim {
	__u64 tstate;
	__u64 generation;     /* a new one per watch: its shots carry it */
	__u16 frame;          /* in the thread state: the innermost frame, or the cframe */
	__u16 cframe_current; /* in the cframe: the innermost frame; KSHOT_ABSENT: no cframe */
	__u16 back, instr, owner;
	__u16 pad[3];
	__u64 top; /* the stack is copied up to here (the end of the thread's last walk), 0: all it may */
};

/* A Python frame as the shot found it. */
struct kshot_anchor {
	__u64 addr;
	__u64 instr;
	__u8 owner;
	__u8 pad[7];
};

/*
 * The last shot of a watched thread, taken while it stood interrupted on
 * its CPU.  seq is odd while the program writes it.  copy holds the
 * registers, base, len and stack as the copy of a waiting thread does.
 */
struct kshot_slot {
	__u64 seq;
	__u64 taken_ns;   /* CLOCK_MONOTONIC */
	__u64 generation; /* of the watch it was taken for */
	__u32 status;     /* enum kshot_status */
	__u32 nanchors;
	struct kshot_anchor anchors[KSHOT_ANCHORS];
	struct knative_thread copy;
};

#endif
