/*
 * The ways to prove a thread's stack beyond one read of it, as one ordered
 * table that walk_thread_stack runs through: first the provers that answer
 * without a walk, then, when a walk tears, those that can rescue it, and
 * after the walk, what each keeps for the next sample.  Each prover owns
 * its state of a thread (a struct below, in struct thread_cache) and says
 * whether it serves a target; each can be turned off, for the ablation
 * bench (uw_options.provers_off).
 *
 * The walk itself, read and proven not torn by re-reading what it relied
 * on (frames.c, validate.c), is what every prover stands in for.
 */
#ifndef PYPROFD_UNWIND_PROVE_H
#define PYPROFD_UNWIND_PROVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t raddr_t;

struct raw_frame;
struct thread_cache;
struct used_range;
struct uw_error;
struct uw_target;
struct walk;

/* 3.15's frame-cache marker (prove_marker.c). */
struct marker_state {
	/*
	 * The frame of the last full walk the marker pointed at when that walk
	 * began, with the marker's sequence then; while both stay so, that
	 * frame was never popped and everything below it is as the walk read
	 * it.  0: no anchor.
	 */
	raddr_t anchor;
	uint64_t anchor_seq;
	raddr_t wrote; /* the marker this unwinder wrote last (0: none), and the sequence then */
	uint64_t wrote_seq;
	/*
	 * The marker it wrote, seen in place, with this sequence, while the
	 * thread's innermost frame was the marked one: alive then, so until
	 * the sequence moves.  0: none.
	 */
	raddr_t vouched;
	uint64_t vouched_seq;
	bool seen; /* looked at once (a stale one is counted, then replaced) */
};

/*
 * Every read the thread's last whole walk made, and the bytes it found
 * (prove_same.c): the same bytes again make the same walk.
 */
struct same_bytes_state {
	struct used_range *reads;
	uint32_t n;
	size_t cap;
	uint8_t *bytes;
	size_t bytes_len, bytes_cap;
};

/*
 * The in-kernel reader's watch of the thread (prove_kernel.c, kread.c): its
 * slot (-1: none) and the thread id it was taken for.  A watched thread
 * that was busy last sample (its read tore, its stack changed, or the shot
 * armed for it came: it ran) has its shot armed as the next sample begins,
 * so that should the read tear, the copy is of about the moment a read
 * that holds proves; one that waits is left alone (a read of it holds),
 * and its watch ends KREAD_QUIET_NS after it was last busy.
 */
struct kernel_watch {
	int slot;
	int64_t tid;
	bool busy;
	uint32_t stack;   /* its stack last sample */
	uint64_t busy_at; /* when it was last busy (clock_mono_ns) */
	uint64_t armed;   /* its shot armed as this sample began; 0: not */
	uint64_t last;    /* when its shot was last armed */
	uint64_t shot;    /* when its last shot came, as last looked at */
};

/* A walk that tore, as the provers that may rescue it see it. */
struct torn_walk {
	uint32_t start;  /* its frames in w->raw from here */
	uint32_t n;      /* how many it read */
	bool collected;  /* it reached the thread's first frame */
	bool last;       /* the thread's last try this sample */
};

/* A walk that proved the thread's stack. */
struct proven_walk {
	const struct raw_frame *raw; /* its frames, innermost first */
	uint32_t n;
	bool parked;     /* the same frames as the last walk but for where the innermost stands */
	bool first_read; /* from the sample's batch alone: no retry, nothing returned from */
	uint32_t mark;   /* the view's reads of the thread from here */
};

/* How the thread's turn ended, after a walk. */
struct walk_end {
	uint32_t stack; /* 0: none */
	bool truncated;
	bool whole;     /* read whole, as the thread state points to it */
};

enum prover_id {
	PROVER_LOOK,          /* the kernel says the thread ran nothing since its stack was read */
	PROVER_MARKER,        /* 3.15: the frames below the marker stand while it does */
	PROVER_SAME_BYTES,    /* the walk's reads hold the bytes they held last time */
	PROVER_KERNEL_READER, /* 3.11-3.14: the kernel's copy of a thread whose reads tear */
	PROVER_COUNT,
};

struct prover {
	const char *name;
	/* Whether it can prove anything on this target (its version, its options). */
	bool (*serves)(const struct uw_target *t);
	/*
	 * Before a walk: *stack when proven without one, 1 from what was read
	 * of the thread (the after hooks see it), 2 from nothing read at all
	 * (they have nothing to learn); 0 when not proven, -1 and *err.
	 */
	int (*before)(struct walk *w, struct thread_cache *tc, raddr_t tstate, uint32_t *stack,
	              bool *truncated, struct uw_error *err);
	/* Once no prover answered: ready its part of the walk. */
	void (*prepare)(struct walk *w, struct thread_cache *tc, raddr_t tstate);
	/* A walk tore: 1 and *stack when what it holds proves one, 0 when not, -1 and *err. */
	int (*torn)(struct walk *w, struct thread_cache *tc, raddr_t tstate, const struct torn_walk *torn,
	            uint32_t *stack, bool *truncated, struct uw_error *err);
	/* A walk proved the stack: what the next sample needs of it. */
	void (*proven)(struct walk *w, struct thread_cache *tc, raddr_t tstate, const struct proven_walk *p);
	/* After the walk, whatever came of it. */
	void (*after)(struct walk *w, struct thread_cache *tc, const struct walk_end *end);
};

/* In the order tried: the cheapest proofs first. */
extern const struct prover *const provers[PROVER_COUNT];

/* Whether prover id serves t and is not turned off. */
bool prover_on(const struct uw_target *t, enum prover_id id);

/* The provers of prove_*.c. */
extern const struct prover prover_look, prover_marker, prover_same_bytes, prover_kernel_reader;

/* prove_kernel.c: as a sample begins, before any read, the shot of every watched thread. */
void kernel_arm_watched(struct uw_target *t);

/* prove_same.c: pages the thread's last whole walk read (each a pin for the kernel). */
uint32_t same_bytes_pages(const struct uw_target *t, const struct thread_cache *tc);
/* prove_same.c: the state's memory given back. */
void same_bytes_free(struct same_bytes_state *s);

#endif
