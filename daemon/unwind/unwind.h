/*
 * unwind — read the Python stacks of a live CPython 3.8-3.15 process from
 * outside, with process_vm_readv, never stopping it.
 *
 * A target is opened once (runtime located, version and layout resolved) and
 * then snapshotted any number of times.  Remote memory is untrusted: garbage
 * gives an error for that snapshot, never a crash or an unbounded loop.
 * No event loop, database or RPC code lives behind this header.
 */
#ifndef PYPROFD_UNWIND_H
#define PYPROFD_UNWIND_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum uw_status {
	UW_OK = 0,
	UW_ENOPROC,    /* no such process */
	UW_EPERM,      /* the caller may not read the process */
	UW_ENOTPYTHON, /* no CPython runtime in the process */
	UW_EVERSION,   /* a CPython this unwinder cannot read */
	UW_EGONE,      /* the process exited while being read */
	UW_ECORRUPT,   /* remote data inconsistent: bad pointer, type or length */
	UW_ENOMEM,
	UW_EIO,        /* a file of the process (maps, ELF) could not be read */
};

/* What went wrong, for a person: status plus one line without a newline. */
struct uw_error {
	enum uw_status status;
	char msg[256];
};

enum uw_frame_kind {
	UW_FRAME_PYTHON,
	UW_FRAME_NATIVE, /* C code sits between the Python frames around it */
	UW_FRAME_GC,     /* the cyclic garbage collector is running */
};

/*
 * One frame.  Strings are UTF-8 and owned by the target: they stay valid
 * until the next uw_snapshot or uw_close of that target; qualname is NULL before 3.11, file NULL and line -1 for
 * markers, line -1 also where CPython itself has no line.
 */
struct uw_frame {
	const char *function;
	const char *qualname;
	const char *file;
	int line;
	enum uw_frame_kind kind;
};

struct uw_thread {
	uint64_t thread_id;   /* threading.get_ident() */
	int64_t native_id;    /* OS thread id, -1 when it cannot be known */
	int64_t interp_id;    /* interpreter the thread belongs to */
	bool holds_gil;
	bool on_cpu;          /* running or runnable, per the kernel */
	bool truncated;       /* more frames than UW_MAX_FRAMES */
	uint32_t nframes;
	struct uw_frame *frames; /* innermost first */
};

struct uw_snapshot {
	uint32_t nthreads;
	struct uw_thread *threads;
	bool gc_running;
};

/* Bounds on what one snapshot walks; remote data past them is not trusted. */
#define UW_MAX_FRAMES 8192
#define UW_MAX_THREADS 4096
#define UW_MAX_INTERPRETERS 256

/* Flags of uw_snapshot(). */
#define UW_SNAP_NATIVE 0x1u /* insert <native> markers where the version allows */
#define UW_SNAP_GC 0x2u     /* put a <GC> frame on top of the collecting thread */

struct uw_target;

/* Open a process: finds its CPython runtime and layout. NULL and *err on failure. */
struct uw_target *uw_open(pid_t pid, struct uw_error *err);

/* Forget a target and everything it owns, strings of past snapshots included. */
void uw_close(struct uw_target *target);

pid_t uw_pid(const struct uw_target *target);

/* "3.11.7": the version the target reports itself, never a file name. */
const char *uw_version(const struct uw_target *target);

/* PY_VERSION_HEX of the target. */
uint64_t uw_version_hex(const struct uw_target *target);

/* The file the runtime was found in (libpython or the executable). */
const char *uw_runtime_file(const struct uw_target *target);

/*
 * Take one snapshot of every thread of every interpreter.  The snapshot is not
 * atomic: the target keeps running, so a thread that moves under the walk can
 * give UW_ECORRUPT; callers that want one answer retry.  0, or -1 and *err.
 */
int uw_snapshot(struct uw_target *target, unsigned flags, struct uw_snapshot *out,
                struct uw_error *err);

void uw_snapshot_release(struct uw_snapshot *snap);

/* A short, stable name of a status ("no such process", ...). */
const char *uw_status_name(enum uw_status status);

#endif
