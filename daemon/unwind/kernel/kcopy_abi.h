/*
 * What the kernel's copy of a process as it falls quiet (kcopy.bpf.c) and
 * its owner in the daemon (kcopy.c) share.  Fixed-width fields only, as
 * both a BPF program and the daemon read them.
 */
#ifndef PYPROFD_UNWIND_KCOPY_ABI_H
#define PYPROFD_UNWIND_KCOPY_ABI_H

#include <linux/types.h>

/* Processes copied at once, over every target: one slot each. */
#define KCOPY_SLOTS 64
/* Tasks of a copied process, each with its own record: a process of more is not copied. */
#define KCOPY_TASKS 16
/* Tasks watched at once, over every slot: a descriptor each. */
#define KCOPY_WATCHES 128
/* Ranges of a plan, and the bytes they hold (a power of two: the program masks offsets by it). */
#define KCOPY_RANGES 64
#define KCOPY_BYTES 8192u

enum kcopy_status {
	KCOPY_NONE = 0,  /* nothing copied yet */
	KCOPY_OK = 1,
	KCOPY_PLAN = 2,  /* a plan the program cannot follow (a range past the room) */
	KCOPY_TORN = 3,  /* the plan was rewritten while it was copied */
};

/* A range's owner when no one thread's walk alone reads it. */
#define KCOPY_SHARED 0xffffffffu

struct kcopy_range {
	__u64 addr;
	__u32 len;
	__u32 off;   /* in the slot's bytes */
	__u32 owner; /* the index of the task whose stack it holds, or KCOPY_SHARED */
	__u32 pad;
};

/*
 * What to copy of a process: the daemon's next batched read.  seq is odd
 * while the daemon writes it, but for from_ns and since_ns, each written
 * alone at each sample: copies are made from from_ns on (only the last
 * before a sample is taken, so those long before it are not made), and a
 * task's stack only if it was switched away since since_ns (the sample's
 * look: one that was not is proven by the next look, its stack not read).
 */
struct kcopy_plan {
	__u64 seq;
	__u64 generation; /* 0: nothing to copy */
	__u64 from_ns;    /* CLOCK_MONOTONIC */
	__u64 since_ns;
	__u32 nranges;
	__u32 pad;
	struct kcopy_range ranges[KCOPY_RANGES];
};

/*
 * A watched task's last switch away from its CPU (by slot * KCOPY_TASKS +
 * its index): its count of switches away then, and when.  Written by the
 * program at each switch away, and by the daemon once, before the task is
 * watched, from the look.  seq is odd while either writes it.
 */
struct kcopy_task {
	__u64 seq;
	__u64 switches; /* nvcsw + nivcsw */
	__u64 at_ns;    /* CLOCK_MONOTONIC */
};

/* The last copy of a process, taken as one of its tasks was switched away.  seq is odd while written. */
struct kcopy_slot {
	__u64 seq;
	__u64 busy;       /* a program writes it: another switching away at once leaves it be */
	__u32 status;     /* enum kcopy_status */
	__u32 taker;      /* the index of the task it was taken at */
	__u32 ntasks;     /* the process's tasks as it began */
	__u32 pad;
	__u64 generation; /* of the plan copied */
	__u64 begun_ns;   /* as the copy began: the taker's at_ns */
	__u64 quiet;      /* switches away that left the process quiet, copied or not */
	__u64 copies;     /* copies made, and their bytes: what the targets paid */
	__u64 copied_bytes;
	/* Each range's bytes copied: all, or none when a page was not resident (the sample reads it). */
	__u32 got[KCOPY_RANGES];
	/* Twice the room a plan may fill: an offset masked to KCOPY_BYTES, plus a length up to it, stays inside. */
	__u8 bytes[2 * KCOPY_BYTES];
};

#endif
