/*
 * What the in-kernel reader (kread.bpf.c) and its owner in the daemon
 * (kread.c) share: the maps' values.  Fixed-width fields only, as both a BPF
 * program and the daemon read them.
 */
#ifndef PYPROFD_UNWIND_KREAD_ABI_H
#define PYPROFD_UNWIND_KREAD_ABI_H

#include <linux/types.h>

/* Threads watched at once, over every target: one slot each. */
#define KREAD_SLOTS 64
/* Frames one snapshot holds: a deeper stack is reported as such, not cut. */
#define KREAD_MAX_FRAMES 256
/* A frame's fields all lie in its first bytes: that many are copied per frame at most. */
#define KREAD_FRAME_BYTES 128
/* The shot after a tear, in ns of the thread's running: the least a task-clock timer takes. */
#define KREAD_SHOT_NS 10000u
/* An offset the version does not have. */
#define KREAD_ABSENT 0xffffu

enum kread_status {
	KREAD_OK = 0,
	KREAD_FAULT = 1, /* a read faulted (a page not resident, or garbage) */
	KREAD_DEEP = 2,  /* more frames than KREAD_MAX_FRAMES */
};

/* A watched thread: where its frames are and how they are laid out (written by the daemon). */
struct kread_watch {
	__u64 tstate;
	__u64 code_tag_mask;    /* low bits of the code word that are not the pointer (3.14+) */
	__u64 generation;       /* a new one per watch: its snapshots carry it */
	__u16 frame;            /* in the thread state: the innermost frame, or the cframe */
	__u16 cframe_current;   /* in the cframe: the innermost frame; KREAD_ABSENT: no cframe */
	__u16 back, code, instr, owner;
	__u16 is_entry;         /* KREAD_ABSENT but in 3.11 */
	__u16 frame_size;       /* bytes copied of each frame: every field above */
	__u16 tlbc;             /* the thread's bytecode copy (free-threaded builds); KREAD_ABSENT: none */
	__u16 pad[3];
};

struct kread_frame {
	__u64 addr;
	__u64 code;  /* tag bits cleared */
	__u64 instr;
	__u8 owner;
	__u8 entry;
	__u8 pad[2];
	__u32 tlbc;  /* free-threaded builds: the copy of the bytecode instr lies in (0: the code's own) */
};

/*
 * The last snapshot of a watched thread, taken while the thread stood
 * interrupted on its CPU.  seq is odd while the program writes it.
 */
struct kread_slot {
	__u64 seq;
	__u64 taken_ns;    /* CLOCK_MONOTONIC */
	__u64 generation;  /* of the watch it was taken for */
	__u64 tstate;
	__u32 n;
	__u32 status;      /* enum kread_status */
	struct kread_frame frames[KREAD_MAX_FRAMES];
};

#endif
