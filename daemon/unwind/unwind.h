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
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind_words.h"

/* What went wrong, for a person: status plus one line without a newline. */
struct uw_error {
	enum uw_status status;
	char msg[256];
};

/*
 * One frame.  Strings are UTF-8 and owned by the target: they stay valid
 * while the epoch that produced them lasts (until the caches are reset, see
 * uw_sample) and at most until uw_close.  qualname is NULL before 3.11, file
 * NULL and line -1 for markers, line -1 also where CPython has no line.
 * first_line is the code object's co_firstlineno (0 for markers): with the
 * qualified name and the file it tells one function from another.
 */
/*
 * A frame.  A C frame's line is its address in its module's file (file):
 * where its function begins when the module names it, the code address
 * itself when not (its function then "[+0x…]"), -1 past what an int holds;
 * build_id is the module's GNU build id in hex, NULL when it has none.
 */
struct uw_frame {
	const char *function;
	const char *qualname;
	const char *file;
	int line;
	enum uw_frame_kind kind;
	int first_line;
	const char *build_id;
};

/* What a frame is called wherever it is shown: its qualified name, or co_name before 3.11. */
static inline const char *uw_frame_name(const struct uw_frame *f)
{
	return f->qualname ? f->qualname : f->function;
}

/*
 * Bytes of a thread's name, its NUL included: room for the names programs
 * give their threads (Thread.name), cut at a whole UTF-8 character; the
 * kernel's hold 16.
 */
#define UW_THREAD_NAME_LEN 64

struct uw_thread {
	uint64_t thread_id;   /* threading.get_ident() */
	int64_t native_id;    /* OS thread id, -1 when it cannot be known */
	int64_t interp_id;    /* interpreter the thread belongs to */
	char name[UW_THREAD_NAME_LEN]; /* see uw_sample_thread */
	bool holds_gil;
	bool on_cpu;          /* running or runnable, per the kernel */
	bool idle;            /* see uw_sample_thread */
	bool truncated;       /* more frames than UW_MAX_FRAMES */
	bool unreadable;      /* its stack moved under every read: no frames shown */
	uint32_t nframes;
	struct uw_frame *frames; /* innermost first */
};

/*
 * One asyncio task of a snapshot taken with UW_SNAP_TASKS.  frames are the
 * task's own coroutine frames, innermost first: the awaits it is parked in,
 * or for the task the loop runs, its thread's frames down to the task's
 * coroutine.  awaited_by is the id of the task awaiting this one (0: a root).
 */
struct uw_task {
	uint64_t id;        /* the task object's address in the target */
	const char *name;   /* Task.get_name() */
	uint64_t thread_id; /* the thread whose loop it belongs to; 0 unknown */
	uint64_t awaited_by;
	bool running;       /* the task its loop runs now */
	uint32_t nframes;
	struct uw_frame *frames;
};

struct uw_snapshot {
	uint32_t nthreads;
	struct uw_thread *threads;
	bool gc_running;
	/* With UW_SNAP_TASKS: asyncio's pending tasks (done ones are left out, as all_tasks() does). */
	uint32_t ntasks;
	struct uw_task *tasks;
	bool tasks_cut;          /* more than max_tasks: those past it were not read */
	struct uw_error tasks_error; /* status UW_OK, or why the tasks could not be read */
};

/* Bounds on what one snapshot walks; remote data past them is not trusted. */
#define UW_MAX_THREADS 4096
#define UW_MAX_INTERPRETERS 256
/*
 * A sample's working arrays keep their room, so a steady sample allocates
 * nothing.  Room past UW_SCRATCH_KEEP_BYTES (one stack thousands of frames
 * deep, or a read that walked a torn chain to the frame bound) is given back
 * every UW_SCRATCH_TRIM_SAMPLES samples: a target whose samples need it
 * takes it again at once, any other does not hold it for good.
 */
#define UW_SCRATCH_KEEP_BYTES (256u << 10)
#define UW_SCRATCH_TRIM_SAMPLES 256u

/* Flags of uw_snapshot(). */
#define UW_SNAP_NATIVE 0x1u /* insert <native> markers where the version allows */
#define UW_SNAP_GC 0x2u     /* put a <GC> frame on top of the collecting thread */
#define UW_SNAP_TASKS 0x4u  /* read asyncio's task tree too (uw_snapshot.tasks) */

struct uw_target;

/*
 * The in-kernel reader: a BPF program that copies a thread's Python frames
 * while the thread stands interrupted on its CPU.  A thread whose stack
 * moves under a read from outside (code that calls and returns faster than
 * a read, 3.11-3.14) is watched from then on: as each sample begins while
 * it runs, a timer of its CPU time is armed for one shot 10 µs of its
 * running later; the shot stands it still while its frames are copied, so
 * the read under way holds, or the sample takes the copy.  Nothing runs on
 * a watched thread that waits, nor ever on the rest of the machine.  One
 * reader serves every target of a process.  Needs root (CAP_BPF and
 * CAP_PERFMON).
 */
struct uw_kreader;
/* NULL and *err when the kernel refuses it. */
struct uw_kreader *uw_kreader_open(struct uw_error *err);
/* Descriptors a reader holds at most: its maps, programs and BTF, two per watched thread, one per copied task. */
#define UW_KREADER_DESCRIPTORS (12u + 2u * 64u + 128u)
/* Close every target using it first. */
void uw_kreader_close(struct uw_kreader *kr);
/*
 * The reader also looks, for every target at once, at which threads ran
 * since their stacks were read (kstill.c): a thread that did not has the
 * stack read then, and a sample pins none of its frames' pages.  A daemon
 * looks as each wakeup begins, before its targets are sampled; a target
 * sampled with no look since its last sample looks itself.  One system
 * call, about 1 µs and a few tens of ns a task (Linux 6.7 or later).
 */
void uw_kreader_look(struct uw_kreader *kr);
/* Why the kernel refused the look (its program needs the task iterator of Linux 6.7), NULL when it did not. */
const char *uw_kreader_look_refused(const struct uw_kreader *kr);
/*
 * Why the kernel refused its copy of a process as it falls quiet (kcopy.c;
 * taken only on the look's word, so refused with it), NULL when it did not.
 */
const char *uw_kreader_copy_refused(const struct uw_kreader *kr);
/* No copies from now on (before any target is sampled with the reader): the targets pay nothing for them. */
void uw_kreader_copy_off(struct uw_kreader *kr);
/*
 * The reader and its two parts as people are told of them: "on", or why
 * not.  without: why there is no reader (NULL: kr), as the caller knows it
 * (the kernel's refusal, or the setting that kept it unloaded).
 */
struct uw_kreader_state {
	const char *reader, *look, *copy;
};
/*
 * The kernel's copier of waiting threads' registers and stacks, for their C
 * frames (uw_options.native): a BPF program the daemon runs on demand,
 * nothing on the targets.  Needs root (CAP_BPF and CAP_PERFMON) and Linux
 * 6.7.  NULL and *err when the kernel refuses it.
 */
struct uw_native;
/*
 * With shots, threads running at a sample are shot instead (a perf event's
 * program in the thread's own context, as the in-kernel reader's): they
 * take UW_NATIVE_SHOT_DESCRIPTORS more.
 */
struct uw_native *uw_native_open(bool shots, struct uw_error *err);
void uw_native_close(struct uw_native *native);
/* Why running threads are not shot (the kernel refused, or not asked), or NULL when they are. */
const char *uw_native_shots_refused(const struct uw_native *native);
/* Descriptors the shots hold at most: their program, maps and BTF, two per thread watched. */
#define UW_NATIVE_SHOT_DESCRIPTORS (8u + 2u * 64u)

struct uw_kreader_state uw_kreader_state(const struct uw_kreader *kr, const char *without);

/*
 * A budget of the /proc descriptors targets keep open between samples (a
 * thread's stat, schedstat and wchan files, a process's task directory),
 * shared by every target given it: many targets' threads never take the
 * descriptors a daemon's clients and database need.  Past it a file is
 * opened for each read and closed again.  The caller owns it, sets limit,
 * and keeps it alive while a target uses it; used is the targets'.
 */
struct uw_fd_budget {
	unsigned limit;
	unsigned used;
};

/* Tasks one sample reads at most unless told (uw_options.max_tasks). */
#define UW_MAX_TASKS_DEFAULT 4096u
/* The most it may be told: a dump of a program with many tasks. */
#define UW_MAX_TASKS 1000000u

/*
 * What a thread's (or task's) contextvars context said when it was
 * sampled.  Ids are big-endian, as W3C trace context writes them; a span
 * is only given when both ids are valid (not zero).  A label is given when
 * the ContextVar is set to a str or an int (written in decimal); label i
 * is context_labels[labels[i].index] of the options.
 */
struct uw_context {
	bool has_span;
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint32_t nlabels;
	struct {
		uint32_t index;
		char value[UW_CONTEXT_VALUE_LEN];
	} labels[UW_CONTEXT_LABELS_MAX];
};

/* How a target samples; uw_configure() may change it between samples. */
struct uw_options {
	unsigned flags;          /* UW_SNAP_* */
	enum uw_mode mode;
	bool no_cache;           /* every cache off: each sample reads and decodes everything */
	/*
	 * Never write into the target.  By default the one write there is is
	 * 3.15's frame-cache marker (PyThreadState.last_profiled_frame), set to
	 * a thread's innermost frame when it differs, so the interpreter can
	 * say which frames stayed; without it a 3.15 stack is proven the way
	 * older versions' are.
	 */
	bool no_write;
	bool want_on_cpu;        /* report on_cpu in wall/gil mode too (one /proc read a thread) */
	bool want_idle;          /* tell idle threads (a /proc read now and then per waiting thread) */
	size_t cache_budget;     /* bytes the caches and interned ids never exceed: past
	                            half of it, they are all reset (a new epoch) */
	/*
	 * A sample's walk that takes longer than this is cut short (0: never):
	 * the threads read whole by then are kept, the rest left out, and the
	 * sample says so (uw_sample.cut, uw_stats.walks_cut).  What the caches
	 * learnt is kept, so a cold sample that is cut warms the next.
	 */
	uint64_t max_sample_ns;
	enum uw_async_mode async_mode;
	uint32_t max_tasks;      /* 0: UW_MAX_TASKS_DEFAULT */
	struct uw_kreader *kreader; /* NULL: none; it must outlive the target */
	uint32_t kreader_uid;       /* whose share of the reader's slots its watches take (0: root's) */
	struct uw_fd_budget *fd_budget; /* NULL: a target's own bound (256) alone */
	/*
	 * With UW_SNAP_NATIVE, a snapshot's waiting threads show their C frames
	 * (kind UW_FRAME_C) between and below their Python frames, copied by
	 * this (uw_native_open; it must outlive the target).  NULL: markers.
	 */
	struct uw_native *native;
	/*
	 * For samplers faster than a thread may be shot (back to back, or past
	 * 2 kHz): a sample waits, before it reads, until every watched thread
	 * may be shot again, so each of its samples is; without it, the
	 * samples between two shots read such threads as without the reader.
	 * Never for an event loop's sampler: it blocks the caller up to 500 µs.
	 */
	bool kernel_pace;
	/*
	 * Provers turned off, for measuring what each buys (bench/ablation.py):
	 * the bits uw_provers_parse makes of a list of names.
	 * Stacks stay exact without any; they cost more to prove.
	 */
	unsigned provers_off;
	/*
	 * The request each thread serves (context.c): OpenTelemetry's current
	 * span (context_otel) and the values of the ContextVars named in
	 * context_labels, read from the thread's contextvars context (an
	 * asyncio task's own, for a task's stack).  Off, nothing is read.
	 */
	bool context_otel;
	uint32_t ncontext_labels;
	char context_labels[UW_CONTEXT_LABELS_MAX][UW_CONTEXT_NAME_LEN];
	/*
	 * Called once at the end of an epoch, before every id is forgotten:
	 * stack and frame ids of the ending epoch are still valid during the
	 * call, so whoever counted them spells them out there.
	 */
	void (*on_epoch_end)(void *ctx, const struct uw_target *target);
	void *epoch_ctx;
};

/*
 * Names of the provers (look, marker, same_bytes, kernel_reader, and
 * process: the kernel's word that no thread of the process ran since the
 * sample kept), comma-separated, into provers_off bits; "none" is 0.  0,
 * or -1 with why the first unknown one is not a prover.
 */
int uw_provers_parse(const char *list, unsigned *off, char *why, size_t why_len);
/* The process-wide proof (still.c) in provers_off; the thread provers take the bits below. */
#define UW_PROVER_PROCESS_BIT (1u << 8)

/*
 * A target's caches at most, unless told: room for the code of a large
 * service (tens of thousands of code objects and frames) within what a
 * daemon of many targets may spend on each.
 */
#define UW_DEFAULT_CACHE_BUDGET (16u << 20)

/* Who a process is, by /proc: what the kernel's own access checks look at. */
struct uw_process_identity {
	uint64_t start_time; /* clock ticks after boot: with the pid, the process's identity */
	uid_t uid[4];        /* real, effective, saved, filesystem */
	gid_t gid[4];
	uint64_t cap_permitted; /* the capability bits it may take up */
	bool dumpable;       /* its user may trace it: not set[ug]id, file caps, nor prctl undumpable */
	bool exiting;        /* a zombie, or its memory already gone: dumpable tells nothing then */
	char state;          /* 'R', 'S', 'Z', ... */
	pid_t ppid;          /* its parent */
};

/*
 * 0, or -1 and *err: UW_ENOPROC only when there is no such process,
 * UW_EPERM when /proc refuses, UW_EIO when it could not be looked at (out
 * of descriptors or memory: nothing is known of the process then).
 */
int uw_process_identity(pid_t pid, struct uw_process_identity *out, struct uw_error *err);

/*
 * The start time and state alone, as uw_process_identity gives them (the
 * rest of *out zeroed), from one file of /proc instead of two: what tells a
 * process from one given its pid after it, when its owner is not asked.
 */
int uw_process_started(pid_t pid, struct uw_process_identity *out, struct uw_error *err);

/*
 * What stands between this process and reading another's memory, and what
 * would let it, for a person: root, CAP_SYS_PTRACE, or Yama's ptrace_scope.
 */
struct uw_access_facts {
	bool root;            /* this process's effective uid is 0 */
	bool cap_sys_ptrace;  /* it has CAP_SYS_PTRACE in its effective set */
	int ptrace_scope;     /* Yama's, -1 without Yama */
	bool same_user;       /* the target's uids are all this process's, its gids its groups */
	bool target_dumpable; /* not setuid, file capabilities or prctl-undumpable */
};
/* The facts of pid as this process sees them now. */
void uw_access_facts(pid_t pid, struct uw_access_facts *out);
/* The remedy for the facts, one clause without a newline. */
void uw_access_remedy(const struct uw_access_facts *f, char *buf, size_t len);
/* A permission error (UW_EPERM) about pid gets its remedy appended; others are left alone. */
void uw_error_add_remedy(struct uw_error *err, pid_t pid);

/* A small /proc/PID/NAME file whole into buf (NUL-terminated): its length, or -1 with errno. */
ssize_t uw_proc_read(pid_t pid, const char *name, char *buf, size_t cap);

/* Open a process: finds its CPython runtime and layout. NULL and *err on failure. */
struct uw_target *uw_open(pid_t pid, struct uw_error *err);

/* Forget a target and everything it owns, strings of past snapshots included. */
void uw_close(struct uw_target *target);

void uw_configure(struct uw_target *target, const struct uw_options *options);
/* The options in force. */
void uw_options_get(const struct uw_target *target, struct uw_options *out);

pid_t uw_pid(const struct uw_target *target);

/* "3.11.7": the version the target reports itself, never a file name. */
const char *uw_version(const struct uw_target *target);

/* PY_VERSION_HEX of the target. */
uint64_t uw_version_hex(const struct uw_target *target);

/*
 * OpenTelemetry's process context (OTEP 4719), when the process publishes
 * one: its payload (a protobuf Resource) copied into buf when published
 * anew since the last call, consistent (its publication time the same
 * after the read).  1 and *len, 0 when nothing new, -1 and *err.
 */
int uw_process_context(struct uw_target *target, uint8_t *buf, size_t cap, size_t *len, struct uw_error *err);
/*
 * The process context's threadlocal.attribute_key_map: the process
 * publishes OTEP 4947's thread records, and names[i] is key index i.
 * From now on a thread's record, found through its thread-local
 * otel_thread_ctx_v1, gives its span and labels in place of the ContextVars'.
 * Whether that variable was found now (if not, it is looked for again, spaced).
 */
bool uw_thread_context_keys(struct uw_target *target, const char *const *names, uint32_t n);

/* The file the runtime was found in (libpython or the executable). */
const char *uw_runtime_file(const struct uw_target *target);

/*
 * A sample: every selected thread's stack as one id of the target's stack
 * prefix tree.  Ids stay valid while `epoch` is unchanged; a new epoch means
 * the caches hit their budget and every id was forgotten.
 */
struct uw_sample_thread {
	uint64_t thread_id;
	int64_t native_id;
	int64_t interp_id;
	/*
	 * The thread's name: Python's (Thread.name, from threading._active),
	 * looked up when the thread is first seen and again every few seconds;
	 * where threading does not know the thread, the kernel's
	 * (/proc/PID/task/TID/comm, which 3.14+ sets from Thread.name, cut to
	 * 15 bytes), read when first seen and every few hundred samples:
	 * "MainThread" for the process's first thread and "" for another when
	 * the name is only the program's.
	 */
	char name[UW_THREAD_NAME_LEN];
	bool holds_gil;
	bool on_cpu;
	/*
	 * With want_idle: the thread waits rather than runs Python.  It does
	 * not hold the GIL, and its innermost frame is one of the standard
	 * library's known waits (Condition.wait, a selector's select, socket
	 * accept and reads, a child's wait, ...), or its stack stayed as it was
	 * and the kernel has it off CPU (sleeping, blocked in I/O).  A stack
	 * that changed since the last sample ran Python: not idle.
	 */
	bool idle;
	bool truncated;
	bool moving;    /* its stack moved under every read: stack is 0, not a real stack */
	bool task;      /* an asyncio task's stack (async mode), not the thread's own */
	uint32_t stack; /* 0 is the empty stack */
	/*
	 * With context_otel or context_labels: the span and labels it ran
	 * under, NULL when none (or when it could not be proven the stack's).
	 * Owned by the sample (its contexts).
	 */
	const struct uw_context *context;
};

struct uw_sample {
	uint64_t epoch;
	bool gc_running;
	/* Threads left out: their stack read as garbage every time (drop_reason says how). */
	uint32_t dropped_threads;
	struct uw_error drop_reason;
	bool cut; /* the walk ran past max_sample_ns: threads after the cut are left out */
	/* Async mode: tasks read, whether some were left unread (max_tasks), why none could be. */
	uint32_t tasks;
	bool tasks_cut;
	struct uw_error tasks_error;
	/* Tasks read running that their thread's stack, read just before, did not show: left out. */
	uint32_t tasks_moved;
	uint32_t nthreads;
	struct uw_sample_thread *threads;
	size_t cap; /* owned by the sample; reused across calls */
	struct uw_context *contexts; /* the threads' contexts point here */
	size_t contexts_cap;
};

/*
 * Take one sample.  The target keeps running: a thread that moves under the
 * read can give UW_ECORRUPT for that sample.  0, or -1 and *err.
 */
int uw_sample(struct uw_target *target, struct uw_sample *sample, struct uw_error *err);

void uw_sample_free(struct uw_sample *sample);

/* A stack id's innermost frame id and its parent stack id (0 at the root). */
uint32_t uw_stack_frame(const struct uw_target *target, uint32_t stack);
uint32_t uw_stack_parent(const struct uw_target *target, uint32_t stack);
uint32_t uw_stack_depth(const struct uw_target *target, uint32_t stack);

/* A frame id's frame; valid in the epoch that produced the id. */
const struct uw_frame *uw_frame_get(const struct uw_target *target, uint32_t frame);

/* What sampling cost and how well the caches did, since uw_open. */
struct uw_stats {
	uint64_t samples;
	uint64_t thread_samples;
	uint64_t frame_cache_full_hits;    /* a thread's stack entirely as last time */
	uint64_t frame_cache_partial_hits; /* its base reused, a new top decoded */
	uint64_t frame_cache_misses;       /* nothing reused */
	uint64_t frames_from_cache;
	uint64_t frames_from_memory;
	uint64_t readv_calls;
	uint64_t bytes_read;
	uint64_t prefetch_hits;            /* reads served by the sample's batched read */
	uint64_t prefetch_misses;          /* reads that needed a call of their own */
	uint64_t plans_kept;               /* samples that read as the last did: its batch plan stands */
	uint64_t code_cache_hits;
	uint64_t code_cache_misses;
	uint64_t stale_invalidations;      /* cached code objects found replaced */
	uint64_t stack_rereads;            /* changed stacks the batch could not prove whole: read again to check */
	uint64_t torn_retries;             /* thread reads redone: the stack moved under them */
	uint64_t torn_threads;             /* thread samples of a lone <moving> frame: it moved through every read */
	uint64_t torn_returned;            /* thread samples proven where the thread returned to while its stack was read */
	uint64_t pages_read;               /* pages the reads touched (the kernel pins each) */
	uint64_t read_ns;                  /* time spent in process_vm_readv, the kernel's reading */
	uint64_t steady_hits;              /* thread samples proven unchanged without walking their frames */
	uint64_t marker_honoured;          /* 3.15: thread samples whose frames below the marker were taken as they were */
	uint64_t marker_written;           /* 3.15: writes of the marker (process_vm_writev) */
	uint64_t marker_cleared;           /* 3.15: markers found set by an earlier or other profiler, first sight */
	uint64_t marker_partial;           /* 3.15: thread samples proven up to the marker's frame, moving above it (ending at that frame) */
	uint64_t marker_partial_reread;    /* 3.15: of those, proven by the walk's own re-read, no read after it */
	uint64_t marker_foreign;           /* 3.15: markers another profiler wrote over ours (writing pauses) */
	uint64_t still_proven;             /* thread samples the kernel proved ran nothing since their stack was read (3.15: with the reader's look) */
	uint64_t kernel_stacks;            /* 3.11-3.14: thread samples whose stack the in-kernel reader copied */
	uint64_t kernel_watches;           /* threads the in-kernel reader was set to watch */
	uint64_t kernel_paced;             /* samples that waited for a shot (kernel_pace) */
	uint64_t kernel_paced_ns;          /* the time they waited, not the sampler's work */
	uint64_t kernel_watch_failures;    /* threads that tore but could not be watched: no slot free, or the kernel refused */
	uint64_t kernel_copies;            /* samples whose batched read was the kernel's copy of the process as it fell quiet: no page pinned */
	uint64_t kernel_copy_watch_failures; /* tasks the kernel's copy could not watch (no room, or the kernel refused): their process is not copied */
	uint64_t kernel_copy_pauses;       /* times the kernel's copies of the process stopped: its tasks switched away too often between samples for them to pay */
	uint64_t process_still;            /* samples the kernel proved no thread of the process ran since one read whole: no memory read */
	uint64_t context_reads;            /* request contexts read (threads', parked tasks'), through the sample's batch */
	uint64_t context_torn;             /* contexts that moved while read, or read as garbage: none that sample */
	uint64_t context_kept;             /* thread samples whose context stood: the kernel proved the thread ran nothing since */
	uint64_t native_copied;            /* --native: thread samples whose C frames the kernel copied and were unwound */
	uint64_t native_kept;              /* --native: thread samples that kept their C frames: the thread ran nothing since its copy */
	uint64_t native_ran;               /* --native: thread samples left with marks: the thread ran between the look and the copy */
	uint64_t native_shot;              /* --native: thread samples whose C frames were shot as the thread ran (kshot.c) */
	uint64_t native_shot_late;         /* --native: thread samples left with marks: it ran, and no shot came since its last one taken */
	uint64_t native_shot_missed;       /* --native: thread samples left with marks: the shot's Python frames were not the walk's */
	uint64_t native_unwalked;          /* --native: thread samples left with marks: the process's modules could not be listed */
	uint64_t native_libdwfl_walks;     /* --native: walks handed to libdwfl: a frame's CFI was an expression or a signal frame's */
	uint64_t cache_resets;             /* budget reached: everything forgotten */
	uint64_t walks_cut;                /* samples cut short at max_sample_ns */
	uint64_t tasks_read;               /* asyncio tasks read (async mode) */
	uint64_t tasks_cut;                /* samples that left tasks unread past max_tasks */
	uint64_t tasks_moved;              /* tasks that began running after their thread was read: left out of that sample */
	uint64_t task_names_folded;        /* task names past the bound of names a process may have, met (again after a cache reset) */
	uint64_t cache_bytes;              /* now */
	uint64_t scratch_bytes;            /* now: the room the working arrays keep between samples */
	uint64_t errors[UW_EIO + 1];       /* failed samples by status */
};

void uw_stats(const struct uw_target *target, struct uw_stats *out);

/*
 * Take one snapshot with frames spelled out (for dumps).  Built on
 * uw_sample with the target's options plus `flags`.  0, or -1 and *err.
 */
int uw_snapshot(struct uw_target *target, unsigned flags, struct uw_snapshot *out,
                struct uw_error *err);

void uw_snapshot_release(struct uw_snapshot *snap);

#endif
