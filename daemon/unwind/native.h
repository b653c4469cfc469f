/*
 * The C frames of a thread, unwound from a copy of its registers and stack
 * (native.c).  Internal to daemon/unwind.
 */
#ifndef PYPROFD_UNWIND_NATIVE_H
#define PYPROFD_UNWIND_NATIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kernel/knative_abi.h"
#include "unwind.h"

struct uw_target;
struct native_symbols;
struct Dwfl_Module;

/* The copier every target of a program shares: the kernel's program, and the modules' symbols. */
struct uw_native {
	struct knative *kn;
	struct kshot *shots;       /* of running threads; NULL when the kernel refused it (shots_err says why) */
	struct uw_error shots_err;
	struct native_symbols *tables; /* native_symbols.c, by build id */
};

/*
 * native_symbols.c: a module's functions by address, built once a build id
 * and kept with the copier; NULL when out of memory.
 */
const struct native_symbols *native_symbols_of(struct uw_native *native, struct Dwfl_Module *mod);
/* The function holding the file address at (one of the module's), and where it begins; NULL when none does. */
const char *native_symbols_find(const struct native_symbols *symbols, uint64_t at, uint64_t *start);
void native_symbols_free(struct uw_native *native);

/* Bytes of a build id kept: a GNU build id is 20 (SHA-1), some linkers' 16 or 8. */
#define NATIVE_BUILD_ID_MAX 64
/* C frames one thread's walk gives at most. */
#define NATIVE_MAX_FRAMES 256u

/* One C frame: its interned frame, and whether it is the interpreter's evaluation loop. */
struct native_frame {
	uint32_t frame;
	bool eval;
	uint64_t sp; /* its stack pointer: its locals lie from here to its caller's */
};

/*
 * How a walk ended: at the thread's first frame (its start, whose caller
 * the CFI leaves undefined), or short of it, with a <native> marker
 * standing for the rest.
 */
enum native_end {
	NATIVE_WHOLE,
	NATIVE_NO_CFI,     /* a frame whose code has no CFI: its caller would be a guess */
	NATIVE_STACK_CUT,  /* the walk needed stack past the copy */
	NATIVE_UNWOUND,    /* the CFI could not be followed (bad data, no module at the address) */
	NATIVE_TOO_DEEP,   /* NATIVE_MAX_FRAMES frames */
};

/*
 * The C frames of a copied thread (status KNATIVE_COPIED), innermost first:
 * *n of them into out (room for NATIVE_MAX_FRAMES), and of a whole walk
 * where its stack ended (*top, the end of the outermost frame's words, 0
 * otherwise): the thread's next copies need go no further.  0, or -1 and
 * *err (out of memory, a process whose modules cannot be listed).
 */
int native_walk(struct uw_target *t, const struct knative_thread *copy, struct native_frame *out,
                uint32_t *n, enum native_end *end, uint64_t *top, struct uw_error *err);
struct thread_cache;
/*
 * From 3.12, which C frames run the eval loop, found by where each keeps
 * its entry frame (the shim of a segment of Python frames): c's eval flags
 * set, true; false when the thread's chain (tc) and the copy do not agree,
 * and no frame is marked.  A walk cut short (end) finds the loops its copy
 * holds, the inner ones.  Before 3.12 the symbols say (native_walk).
 */
bool native_find_evals(struct uw_target *t, const struct thread_cache *tc, const struct knative_thread *copy,
                       struct native_frame *c, uint32_t nc, enum native_end end);
/*
 * A thread's frames with its C frames in place: py, its frame ids as read
 * (innermost first, with <native> markers where C entered the eval loop,
 * 3.11+), and c, its walk.  Each eval loop of c stands for its segment of
 * Python frames; where the two do not pair up, py is given as read.  Into
 * out (room for npy + nc + 1), starts a scratch of npy: the frames given.
 */
uint32_t native_splice(const struct uw_target *t, const uint32_t *py, uint32_t npy, const struct native_frame *c,
                       uint32_t nc, enum native_end end, uint32_t *starts, uint32_t *out);
/*
 * A sample's C frames (with UW_SNAP_NATIVE and a copier).  Before any
 * memory is read, the kernel looks at the switch counts of the threads the
 * last sample met (native_sample_begin); after the walk, the threads that
 * were off their CPU then are copied, and the ones whose count held have
 * their stack replaced with the one spliced with their C frames
 * (native_sample_end).  A thread that did not run since its last copy
 * keeps its spliced stack, uncopied.  -1 and *err only when out of memory.
 */
void native_sample_begin(struct uw_target *t);
/* A thread's cache going (or the copier changing): its shot's watch given back. */
void native_forget(struct uw_target *t, struct thread_cache *tc);
int native_sample_end(struct uw_target *t, struct uw_sample *s, struct uw_error *err);
/*
 * Working room kept with the target: n frame ids, and NATIVE_MAX_FRAMES
 * C frames (*frames); valid until the next call.  NULL and *err.
 */
uint32_t *native_room(struct uw_target *t, size_t n, struct native_frame **frames, struct uw_error *err);
/* The target's unwinder and its modules' symbols, freed (uw_close). */
void native_free(struct uw_target *t);

/* The kernel's copier of the target's options (uw_options.native), NULL when none. */
struct knative *native_copier(const struct uw_native *native);

#endif
