/*
 * The unwinder's internal interfaces, grouped by the file that owns them.
 * Nothing outside daemon/unwind includes this.
 */
#ifndef PYPROFD_UNWIND_INTERNAL_H
#define PYPROFD_UNWIND_INTERNAL_H

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

#include "arena.h"
#include "array.h"
#include "clock.h"
#include "hash.h"
#include "kstill_abi.h"
#include "layout.h"
#include "linetable.h"
#include "unwind.h"

/* An address in the target's address space: never dereferenced here. */
typedef uint64_t raddr_t;

/* error.c */
/* Set *err (if not NULL) and return -1, so failures read `return uw_fail(...)`. */
int uw_fail(struct uw_error *err, enum uw_status status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* remote.c */
/* A piece of a memory image: what addr..addr+len holds. */
struct remote_segment {
	raddr_t addr;
	const uint8_t *bytes;
	size_t len;
};

/*
 * Memory to read instead of a process's: the unwinder's walk and decoders
 * run on crafted bytes (tests, fuzzing); a read outside the segments fails
 * as a stale pointer does.
 */
struct remote_image {
	const struct remote_segment *segments;
	size_t n;
};

/* The target's memory, and a count of what reading it cost. */
struct remote {
	pid_t pid;
	const struct remote_image *image; /* when set, read instead of the process */
	uint64_t calls;
	uint64_t bytes;
	uint64_t pages;  /* pages the reads touched (the kernel pins each) */
	uint64_t read_ns; /* time in process_vm_readv */
	uint64_t writes;
	uint64_t wrote_ns; /* when a write last returned (unwind_now_ns): a copy begun before may be stale */
};

/*
 * Whether the memory may still be there: false only when the process is
 * known to be gone (an image always is there).
 */
bool remote_alive(const struct remote *r);
/* The same by kill(2) alone, for a retry of a torn read: a zombie passes (its next read fails as gone). */
bool remote_may_live(const struct remote *r);

/*
 * Read exactly len bytes at addr.  A short read or EFAULT is UW_ECORRUPT
 * (a stale or garbage pointer), ESRCH UW_EGONE, EPERM UW_EPERM.
 */
int remote_read(struct remote *r, raddr_t addr, void *buf, size_t len, struct uw_error *err);
/* Pages a read of len bytes at addr touches: the kernel pins each one. */
uint64_t remote_pages(raddr_t addr, size_t len);

/*
 * Write len bytes at addr (process_vm_writev).  The one caller writes the
 * frame-cache marker of a validated 3.15 layout; an image is never written.
 */
int remote_write(struct remote *r, raddr_t addr, const void *buf, size_t len, struct uw_error *err);

/* One range of a batched read; `got` is how many bytes from addr arrived. */
struct remote_range {
	raddr_t addr;
	uint32_t len;
	uint32_t got;
	uint8_t *buf;
	bool skip; /* not read this time (view.c: a thread proven still): got stays 0 */
};

/*
 * Read many ranges in as few process_vm_readv calls as the kernel allows
 * (IOV_MAX ranges a call).  A range that faults is left short (`got`) and the
 * rest are still read.  -1 only when the process is gone or unreadable.
 */
int remote_read_batch(struct remote *r, struct remote_range *ranges, uint32_t n,
                      struct uw_error *err);

/* Little-endian field loads from a local copy of a remote struct. */
static inline uint64_t load_u64(const uint8_t *base, uint32_t off)
{
	uint64_t v;
	__builtin_memcpy(&v, base + off, sizeof v);
	return v;
}

static inline int32_t load_i32(const uint8_t *base, uint32_t off)
{
	int32_t v;
	__builtin_memcpy(&v, base + off, sizeof v);
	return v;
}

static inline uint32_t load_u32(const uint8_t *base, uint32_t off)
{
	uint32_t v;
	__builtin_memcpy(&v, base + off, sizeof v);
	return v;
}

/* proc.c */
struct proc_map {
	uint64_t start, end, offset;
	dev_t dev;      /* of the file mapped, as the kernel lists it */
	uint64_t inode;
	char perms[5];
	char *path; /* NULL for anonymous mappings */
};

struct proc_maps {
	struct proc_map *maps;
	size_t count;
};

/* Whether n more /proc files may be kept open: the target's bound and the shared budget. */
bool proc_fds_room(const struct uw_target *t, unsigned n);
/* n files kept open (n < 0: closed), counted against both. */
void proc_fds_add(struct uw_target *t, int n);

/* Parse /proc/PID/maps (bounded). 0, or -1 and *err. */
int proc_maps_read(pid_t pid, struct proc_maps *out, struct uw_error *err);
void proc_maps_free(struct proc_maps *maps);

/*
 * Open the file a mapping of process pid maps (whatever root or mount
 * namespace it runs in), checked to be that file.  A descriptor, or -1 and *err.
 */
int proc_map_open(pid_t pid, const struct proc_map *m, struct uw_error *err);

/* The kernel's one-letter state of a thread ('R', 'S', ...); '?' if unknown. */
char proc_thread_state(pid_t pid, pid_t tid);

/*
 * The thread ids of a process (bounded by max), as this /proc numbers them,
 * and with own_tids each as its own pid namespace does.  Count, or -1 with errno.
 */
int proc_tasks(pid_t pid, pid_t *tids, pid_t *own_tids, int max);

/* Bytes of a thread's schedstat line kept (three decimal numbers). */
#define PROC_SCHED_LINE 64
/* A thread's schedstat line, read again through its descriptor: its length, 0 if unread. */
uint32_t proc_sched_line(int fd, char line[PROC_SCHED_LINE]);
/*
 * Whether a schedstat line can prove a thread still: it counts the times
 * the thread was put on a CPU (a kernel without CONFIG_SCHED_INFO reads
 * "0 0 0").  Only lines that do are kept to compare later ones with.
 */
bool proc_sched_line_counts(const char *line, uint32_t len);

/*
 * Whether the process lives in a pid namespace below this /proc's (a
 * container): then the thread ids it keeps in its memory are not /proc's.
 */
bool proc_pid_namespace_nested(pid_t pid);

/*
 * Whether a process still runs (a zombie is gone), or could not be looked
 * at (out of descriptors, ...): then nothing is known of it.
 */
enum proc_life { PROC_LIVES, PROC_GONE, PROC_UNSEEN };
enum proc_life proc_life(pid_t pid);

/* elf.c */
/* A symbol to look up; a name ending in '.' matches any suffix (local statics). */
struct elf_symbol {
	const char *name;
	uint64_t value; /* st_value, unrelocated */
	uint64_t size;
	bool found;     /* defined in this file */
	bool spare;     /* wanted only if met: the walk stops once every other one is found */
};

struct elf_facts {
	uint64_t first_load_vaddr;   /* page-aligned p_vaddr of the PT_LOAD at offset 0 */
	uint64_t pyruntime_section;  /* sh_addr of .PyRuntime, 0 if none */
	uint64_t asyncio_debug_section; /* sh_addr of .AsyncioDebug (3.14+ _asyncio), 0 if none */
	bool is_elf;
};

/* Look the symbols up in .dynsym and .symtab of the file open at fd. 0, or -1 and *err. */
int elf_lookup(int fd, struct elf_symbol *syms, size_t nsyms, struct elf_facts *facts,
               struct uw_error *err);

/* pystr.c */
/*
 * Convert `count` code points of UCS kind 1, 2 or 4 to NUL-terminated UTF-8.
 * Surrogates and values past U+10FFFF become U+FFFD.  Returns the malloc'd
 * string, NULL on allocation failure.
 */
char *pystr_to_utf8(const uint8_t *data, size_t count, unsigned kind);

/* intern.c */
#define INTERN_FAILED UINT32_MAX
#define INTERN_MAX_IDS (1u << 28)

struct frame_key {
	uint32_t function, qualname, file; /* string ids; 0 is none */
	int32_t line;
	uint32_t kind;                     /* enum uw_frame_kind */
	int32_t first_line;                /* co_firstlineno; 0 for markers */
	uint32_t waits;                    /* a known wait of the standard library (code_known_wait) */
};

struct stack_node {
	uint32_t parent, frame, depth;
};

struct intern {
	char **strs;
	size_t *str_len;
	uint32_t nstrs;
	size_t strs_cap, str_len_cap;
	struct hash str_index;

	struct frame_key *frame_keys;
	struct uw_frame *frames; /* the same frames, spelled out for callers */
	uint32_t nframes;
	size_t frames_cap, frames_view_cap;
	struct hash frame_index;

	struct stack_node *stacks;
	uint32_t nstacks;
	size_t stacks_cap;
	struct hash stack_index;

	size_t bytes; /* memory held by the arrays and strings; intern_bytes() adds the indexes */
};

int intern_init(struct intern *in);
void intern_free(struct intern *in);
int intern_reset(struct intern *in);
/* Each returns the id, or INTERN_FAILED when out of memory or ids. */
uint32_t intern_string(struct intern *in, const char *s, size_t len);
uint32_t intern_frame(struct intern *in, const struct frame_key *key);
uint32_t intern_stack(struct intern *in, uint32_t parent, uint32_t frame);
/* Memory held, for the cache budget. */
size_t intern_bytes(const struct intern *in);

/* code.c */
#define CODE_LINE_SLOTS 8

/* What the unwinder keeps of one code object. */
struct code_info {
	raddr_t addr;
	uint8_t *header;          /* the layout.code.size bytes it was decoded from */
	uint32_t name, qualname, file; /* string ids */
	int firstlineno;
	bool waits;               /* code_known_wait */
	raddr_t bytecode;         /* first instruction, 3.11+ */
	uint64_t bytecode_len;    /* bytes of bytecode from there, 3.11+ */
	uint64_t frame_bytes;     /* what a frame of it takes on the data stack, 3.11-3.12; 0 unknown */
	struct line_table lines;
	uint64_t checked_gen;     /* sample it was last validated in */
	size_t bytes;             /* memory held */
	/* (instruction position → frame id), direct-mapped: a hot loop hits here. */
	uint64_t slot_pos[CODE_LINE_SLOTS];
	uint32_t slot_frame[CODE_LINE_SLOTS];
};

/* Code objects by remote address: a dense array and its index. */
struct code_cache {
	struct code_info **codes;
	uint32_t count;
	size_t cap;
	struct hash index;
	size_t bytes;
};

void code_cache_init(struct code_cache *cache);
void code_cache_free(struct code_cache *cache);

/* chain.c, threads.c */
/* What the previous sample saw of one thread: its chain, outermost first. */
struct chain_link {
	raddr_t addr;  /* frame address; 0 for a marker */
	raddr_t code;
	uint64_t pos;  /* instruction position (and traced line, 3.8-3.10) */
	uint32_t kind; /* enum uw_frame_kind */
	uint32_t stack;
};

/*
 * /proc files a target keeps open at most (stat_fds): past them a thread's
 * is opened for each read.  A runtime that lists thousands of thread states
 * (a hostile one copies its own) must not take the daemon's descriptors.
 */
#define THREADS_STAT_FDS_MAX 256

/*
 * A thread's /proc/PID/task/TID/schedstat and wchan, kept open for the
 * kernel's proofs that it stood still (opened by proc.c, used by threads.c and
 * still.c); -1 when not.
 * They stay on the task they were opened for: once it exits they read
 * nothing, even if its tid is given to another.
 */
struct sched_files {
	int sched_fd, wchan_fd;
};
#define SCHED_FILES_NONE ((struct sched_files){.sched_fd = -1, .wchan_fd = -1})

/* Open both for task proc_tid (the id /proc gives it), unless open; false when they cannot be. */
bool sched_files_open(struct uw_target *t, struct sched_files *f, int64_t proc_tid);
void sched_files_close(struct uw_target *t, struct sched_files *f);
/* Whether the kernel shows the task asleep off every run queue now (its wchan names a function). */
bool sched_files_off(const struct sched_files *f);

/*
 * What proves that a thread ran no instruction since its stack was read
 * (threads.c; the argument is above threads_still_begin).
 */
struct thread_still {
	struct sched_files files;
	int64_t tid;            /* the thread they are of */
	bool want;              /* worth proving: a deep stack, its tid known */
	/* Samples left before looking again at a thread last seen on a CPU, and the next such wait. */
	uint32_t skip, backoff;
	/* This sample's pre-read: the stack below stood still since it was read. */
	bool holds;
	/*
	 * The kernel's look at the thread (kstill.c, through still.c's watch of
	 * the process's tasks): what the look before this sample's read saw
	 * when it was off its CPU (armed_*), then what the look before the
	 * proven stack's read saw (looked: the proof is the look's, not /proc's).
	 */
	bool looked, armed_looked;
	bool told;              /* this sample's look told of it: /proc's proof is not wanted */
	bool deep;              /* its walk reads THREADS_STILL_MIN_PAGES pages or more: /proc's proof pays */
	uint64_t armed_switches, armed_start;
	uint64_t switches, start_ns;
	int64_t proc_tid, proc_tid_of; /* /proc's id of the thread the process knows as proc_tid_of */
	uint32_t look_hint;     /* where the look told of it last (still_task_seen) */
	/* This sample's pre-read: run was read before the thread was seen off every run queue. */
	bool armed;
	char armed_run[PROC_SCHED_LINE];
	uint32_t armed_len;
	/* The stack proven, read after the thread was seen off with run as it was then. */
	bool valid;
	char run[PROC_SCHED_LINE];
	uint32_t run_len;
	uint32_t stack;
	bool truncated;
	raddr_t top;            /* its innermost frame, as the thread state pointed to it */
	unsigned flags;
};

struct thread_cache {
	raddr_t tstate;
	uint64_t seen;       /* sample number it was last seen in */
	int stat_fd;         /* /proc/PID/task/TID/stat, kept open; -1 (-2: no such task) */
	int64_t stat_tid;
	uint32_t prev_stack; /* the stack it had last sample (idle: it ran since, when it differs) */
	bool prev_waits;     /* its innermost frame is a known wait (code_known_wait) */
	uint32_t idle_stack; /* the stack the kernel's state was last read at, and the verdict */
	uint64_t idle_gen;
	bool idle_verdict;
	int64_t name_tid;    /* the tid name is of; 0 before the first read */
	uint64_t name_gen;   /* sample it was read in */
	char name[UW_THREAD_NAME_LEN];
	uint32_t n;
	size_t cap;
	struct chain_link *chain;
	bool truncated;      /* the chain stopped at UW_MAX_FRAMES */
	/*
	 * 3.15's marker.  anchor: the frame of the last full walk the marker
	 * pointed at when that walk began, with the marker's sequence then;
	 * while both stay so, that frame was never popped and everything
	 * below it is as the walk read it.  0: no anchor.
	 */
	raddr_t anchor;
	uint64_t anchor_seq;
	raddr_t wrote;       /* the marker this unwinder wrote last (0: none), and the sequence then */
	uint64_t wrote_seq;
	/*
	 * The marker it wrote, seen in place, with this sequence, while the
	 * thread's innermost frame was the marked one: alive then, so until
	 * the sequence moves (walk_marker_set_live).  0: none.
	 */
	raddr_t vouched;
	uint64_t vouched_seq;
	bool marker_seen;    /* its marker was looked at once (a stale one is counted, then replaced) */
	/*
	 * Every read its last whole walk made, and the bytes it found: the
	 * same bytes again make the same walk, so the stack is as it was.
	 */
	struct used_range *reads;
	uint32_t nreads;
	unsigned flags;      /* the options' flags the chain was read with (native markers change it) */
	size_t reads_cap;
	uint8_t *read_bytes;
	size_t read_bytes_len, read_bytes_cap;
	/* The kernel's word that the thread stood still (threads_still_*). */
	struct thread_still still;
	/* Where this sample's reads of its stack walk lie in the view's list, for the next plan (view_reads_carry). */
	uint32_t used_from, used_n;
	/*
	 * The in-kernel reader's watch of this thread (kread.c): its slot (-1:
	 * none) and the thread id it was taken for.  A watched thread that was
	 * busy last sample (its read tore, its stack changed, or the shot armed
	 * for it came: it ran) has its shot armed as the next sample begins, so that should
	 * the read tear, the copy is of about the moment a read that holds
	 * proves; one that waits is left alone (a read of it holds), and its
	 * watch ends KREAD_QUIET_NS after it was last busy.
	 */
	int kslot;
	int64_t ktid;
	bool kbusy;
	uint32_t kstack;   /* its stack last sample */
	uint64_t kbusy_at; /* when it was last busy (unwind_now_ns) */
	uint64_t karmed;   /* its shot armed as this sample began; 0: not */
	uint64_t klast;    /* when its shot was last armed */
	uint64_t kshot;    /* when its last shot came, as last looked at */
};

/* Ranges read together in one batch, sorted by address, and their bytes. */
struct view_batch {
	struct remote_range *ranges;
	raddr_t *owners; /* each range's: one thread's alone (used_range.owner), or 0 */
	size_t owners_cap;
	uint32_t *used_lens; /* each range's bytes the reads used, from its start: the rest is room to grow */
	size_t used_lens_cap;
	uint32_t n;
	uint32_t last; /* the range the last lookup found (view.c's batch_find_near) */
	size_t cap;
	uint8_t *buf;
	size_t buf_cap;
};

/* Reads the batch missed that a sample keeps to look in again (see struct uw_target). */
#define VIEW_MISSED_KEPT 8

/* A read this sample needed, remembered to batch it into the next one. */
struct used_range {
	raddr_t addr;
	uint32_t len;
	uint32_t grow;  /* bytes past the end worth reading too (a stack's top) */
	raddr_t owner;  /* the thread state whose stack walk read it; 0: the sample's own */
};

/* walk.c: an interpreter's GIL pointer (3.12+), read once: see walk_gil_ptr. */
struct walk_gil_ptr {
	raddr_t interp;
	int64_t id;
	raddr_t gil;
};
#define WALK_GIL_PTRS 8

/* still.c: the kernel's word that no thread of the process ran since a sample (see still.c). */
/* A task as the look that armed the proof saw it (kstill.c). */
struct still_seen {
	pid_t tid;
	uint64_t switches, start_ns;
};
/* Tasks a process may have for the proof: each costs a /proc read a sample (the kernel's look: KSTILL_TASKS). */
#define STILL_TASKS_MAX 8
/* Most samples between two armings of a process that was not still. */
#define STILL_BACKOFF_MAX 64
/*
 * Samples an arming must answer to be tried again at once when the process
 * runs: an arming reads /proc about as much as a sample of a few threads
 * reads their memory, so fewer and the next one waits (a service whose
 * threads each wake every few samples is not worth it).
 */
#define STILL_PROOFS_WORTH 2
struct still_task {
	pid_t tid;
	struct sched_files files;
	uint32_t run_len;       /* its schedstat line when armed */
	char run[PROC_SCHED_LINE];
};
struct process_still {
	DIR *task_dir;          /* /proc/PID/task, kept open; NULL */
	struct still_task tasks[STILL_TASKS_MAX]; /* sorted by tid */
	uint32_t ntasks;
	bool armed;             /* this sample: every task listed, off its run queues, its run read */
	bool valid;             /* kept is the process's sample until a task runs */
	uint32_t skip, backoff; /* samples before the next arming, and the next such wait */
	uint64_t proofs;        /* samples answered from kept */
	uint64_t epoch;         /* kept's ids are of this epoch */
	struct uw_options opts; /* and answer these options */
	uint64_t kept_frames, kept_stacks; /* its frames and stacks, for the counters */
	struct uw_sample kept;
	/* The kernel's look at the process (kstill.c): its number there (-1: not watched), and what armed the proof. */
	int look_proc;
	uint64_t look_start;    /* when the process the look found began (0: not yet found): another pid's is not it */
	bool by_look;           /* the kept sample was proven by the look, not /proc */
	/* The kernel's copy of the process as it falls quiet (kcopy.c): its slot (-1: none), and the plan copied. */
	int copy_slot;
	uint64_t copy_generation;
	/* When copies are made (view_copy_window): the last sample's time, and averages over samples. */
	uint64_t copy_sampled_ns, copy_interval_ns, copy_quiet_seen, copy_quiet_x256;
	/*
	 * Whether they pay (view_copy_pays): the look's switches away between
	 * samples, averaged, times 256; their sum and task count at the last
	 * sample; and when copies were last stopped for it (0: they run).
	 */
	uint64_t copy_switches_x256, copy_switches_seen, copy_paused_ns;
	uint32_t copy_tasks_seen;
	uint32_t nlooked;
	struct still_seen looked[KSTILL_TASKS];
};
/*
 * As a sample begins: the kernel's look (kstill.c) it takes its proofs
 * from, one taken since the target's last sample, so after every read that
 * sample made.  NULL when there is no reader, the kernel refused the look,
 * or the caches are off.
 */
struct kstill *still_look(struct uw_target *t);
/* Before a sample: true and *s when no task ran since the sample kept (no memory is read). */
bool still_sample(struct uw_target *t, struct uw_sample *s);
/* Before the memory read of a sample still_sample did not answer: the proof's first half. */
void still_arm(struct uw_target *t);
/* After a sample read whole (not cut): keep it, if armed. */
void still_keep(struct uw_target *t, const struct uw_sample *s);
void still_free(struct uw_target *t);
/*
 * What this sample's look saw of the process's task tid (as /proc names
 * it), NULL if it did not see it; *hint: where to look first, and where it
 * was found.
 */
const struct kstill_task *still_task_seen(struct uw_target *t, pid_t tid, uint32_t *hint);
/* Every task this sample's look saw of the process (*n), NULL when it saw none. */
const struct kstill_task *still_tasks(struct uw_target *t, uint32_t *n);

/* open.c — the opened process; owns everything above. */
struct uw_target {
	pid_t pid;
	struct remote mem;
	struct py_layout layout;
	uint64_t version_hex;
	char version[32];
	char *runtime_file;
	raddr_t runtime;      /* &_PyRuntime in the target */
	raddr_t code_type;    /* &PyCode_Type */
	raddr_t unicode_type; /* &PyUnicode_Type */
	raddr_t bytes_type;   /* &PyBytes_Type */
	raddr_t frame_type;   /* &PyFrame_Type, to check heap frames (3.8-3.10) */
	bool pid_namespace_nested; /* the thread ids in its memory are its namespace's */
	int pthread_tid_offset; /* 3.8-3.10: where struct pthread keeps the tid; -1 unknown */
	int pthread_tid_searches; /* looks for it so far */

	struct uw_options opts;
	int thread_attempts; /* reads of a moving thread before it is left out */
	uint64_t marker_quiet_until; /* sample before which the marker is not written: another profiler writes it */
	struct uw_stats stats;
	uint64_t sample_gen;  /* number of the sample under way */
	uint64_t epoch;

	struct code_cache codes;
	struct intern intern;
	uint32_t native_frame, gc_frame, moving_frame; /* frame ids of the markers, this epoch */

	struct thread_cache *threads;
	uint32_t nthreads;
	size_t threads_cap;
	uint32_t stat_fds; /* threads' /proc files kept open (threads.c bounds them) */
	struct walk *walk; /* walk.c's working arrays, reused */
	struct process_still still;
	uint64_t kstill_looked; /* the kernel's look (kstill.c) this target's last sample took its proofs from */
	struct kstill *look;    /* this sample's look (still_look), NULL: none */
	raddr_t view_owner;     /* the thread state whose walk the reads being made are of (0: none) */

	/* The batched read of this sample, planned from the reads of the last. */
	struct view_batch batch;
	/* A thread read again after a torn read: looked at before the batch. */
	struct view_batch retry;
	bool retrying;
	struct used_range *used;
	uint32_t nused;
	size_t used_cap;
	struct used_range *retry_used; /* a retry's plan, reused */
	size_t retry_used_cap;
	/* The reads the batch was planned from, in the order made: the same again keep the plan. */
	struct used_range *planned;
	uint32_t nplanned;
	size_t planned_cap;
	/* Reads the prefetch missed, for the sample's length. */
	struct arena scratch;
	/*
	 * The first of them, looked in by later reads of the same sample: a
	 * stack that moved is read where the batch missed it once, not frame
	 * by frame (view.c).
	 */
	struct remote_range missed[VIEW_MISSED_KEPT];
	uint32_t nmissed;
	struct tasks *tasks; /* tasks.c: asyncio's tasks, NULL until asked for */
	struct walk_gil_ptr gil_ptrs[WALK_GIL_PTRS]; /* the first interpreters' */
	raddr_t none_object; /* exception.c: &_Py_NoneStruct, 0 until looked up */
	bool none_looked;
};

/* open.c */
/* Where an image's runtime and types are, as uw_open finds them in a process. */
struct uw_image_target {
	const struct remote_image *image;
	unsigned minor; /* the layout when the runtime has no _Py_DebugOffsets */
	raddr_t runtime, code_type, unicode_type, bytes_type, frame_type;
};
/* A target reading a memory image, as uw_open does a process; NULL and *err. */
struct uw_target *uw_open_image(const struct uw_image_target *it, struct uw_error *err);

/* code.c */
/*
 * The decoded code object at addr, validated against the target this
 * sample: a freed and reused address is decoded again.  NULL and *err.
 */
struct code_info *code_get(struct uw_target *t, raddr_t addr, struct uw_error *err);

/* Whether code_get of addr would answer from the cache, its header checked this sample already. */
bool code_checked(const struct uw_target *t, raddr_t addr);

/* The frame id of the instruction at pos in ci (pos as struct chain_link). */
uint32_t code_frame_at(struct uw_target *t, struct code_info *ci, uint64_t pos);

/*
 * Whether a function (co_name in a file) is one of the standard library's
 * waits: innermost, without the GIL, it sits in a blocking call.
 */
bool code_known_wait(const char *name, const char *file);

/* Read a str object into a string id (bounded length). INTERN_FAILED and *err. */
uint32_t pyobj_read_str(struct uw_target *t, raddr_t addr, struct uw_error *err);

/* view.c */
/*
 * len bytes at addr, from the sample's batched read when it holds them, else
 * read now.  The pointer lives until the sample ends.  NULL and *err.
 * `grow` asks the next sample's batch to read that much past the end too.
 */
const uint8_t *view_read(struct uw_target *t, raddr_t addr, uint32_t len, uint32_t grow,
                         struct uw_error *err);
/*
 * As a sample begins, on its look's word (the process's tasks, n of them:
 * still_tasks): whether the kernel copies the process, and when, before
 * the next one (view.c).
 */
void view_copy_window(struct uw_target *t, const struct kstill_task *tasks, uint32_t n);
/*
 * Start a sample: issue the batched read planned by the last one, or take
 * the kernel's copy of it when this sample's look (the process's tasks, n
 * of them: still_tasks) proves it the process's memory now.
 */
int view_begin(struct uw_target *t, const struct kstill_task *tasks, uint32_t n, struct uw_error *err);
/*
 * Read again, in one batch of their own, the reads made since `mark` (the
 * count of reads when one thread's walk began): after a torn read, a fresh
 * copy of that stack beats a walk frame by frame.  Later reads look in it
 * first, until view_retry_end().  Pointers from earlier retries are invalid.
 */
/*
 * A thread proven still makes the reads its last walk made, as far as the
 * plan the batch came from holds them (*from, *n: where they lie there, and
 * where they lie now): the next plan is this one again.
 */
void view_reads_carry(struct uw_target *t, raddr_t owner, uint32_t *from, uint32_t *n);
uint32_t view_mark(const struct uw_target *t);
/*
 * Room for bytes another read of this sample brings in (validate.c's
 * re-read), to be handed to view_keep once read: later reads of them find
 * them as a miss's, no read of their own.  NULL when they are at hand
 * already or the view would not keep them (a retry, or its caches off, or
 * no room: view_keep_room says how many more it keeps).
 */
uint32_t view_keep_room(const struct uw_target *t);
uint8_t *view_room_for(struct uw_target *t, raddr_t addr, uint32_t len);
void view_keep(struct uw_target *t, const struct remote_range *r);
/* The bytes at addr in this sample's batch, or NULL (nothing read, nothing remembered). */
const uint8_t *view_batch_bytes(const struct uw_target *t, raddr_t addr, uint32_t len);
/* The reads made since mark (*n of them), valid until the next read. */
const struct used_range *view_reads(const struct uw_target *t, uint32_t mark, uint32_t *n);
/* Count reads as made again (their bytes were found in the batch), for the next plan. */
void view_reads_again(struct uw_target *t, const struct used_range *reads, uint32_t n);
int view_retry(struct uw_target *t, uint32_t mark, struct uw_error *err);
void view_retry_end(struct uw_target *t);
/* End a sample: plan the next batch from what this one read; free scratch. */
void view_end(struct uw_target *t, bool plan_next);
void view_free(struct uw_target *t);
/* Bytes the view's working arrays hold between samples; and giving them back, plan kept. */
size_t view_room(const struct uw_target *t);
void view_trim(struct uw_target *t);

/* walk.c */
/* What a check's bytes are to the thread's stack. */
enum check_role {
	CHECK_LINKS,   /* a frame's links (code, caller, a caller's instruction) */
	CHECK_CURRENT, /* the pointer to the thread's innermost frame */
	CHECK_PATH,    /* a pointer on the way to that one (3.11-3.12's cframe) */
	CHECK_BOUND,   /* the data stack's top: it moves with the innermost frame */
};

/* A few bytes the walk relied on, read again to prove they did not move. */
struct check {
	raddr_t addr;
	raddr_t frame; /* the frame whose links these are; 0 for the thread's pointers */
	uint32_t len;
	uint32_t range; /* validate_stack: the re-read range that holds it */
	uint8_t role;   /* enum check_role */
	bool in_base;   /* validate_stack: a frame's as in the last sample, not read again */
	bool reread;    /* validate_stack: read again */
	bool changed;   /* validate_stack: read again, and not as the walk saw it */
	uint8_t expect[24];
};

/* One frame as read, before it is decoded. */
struct raw_frame {
	raddr_t addr;
	raddr_t code;
	uint64_t pos;
	uint32_t kind;
};

/*
 * A sample under way; kept by the target so its arrays are reused, not
 * reallocated: a steady sample allocates nothing.
 */
struct walk {
	struct uw_target *t;
	struct uw_sample *out;
	struct raw_frame *raw; /* the frames of the thread being read, innermost first */
	uint32_t nraw;
	size_t raw_cap;
	struct check *checks;
	uint32_t nchecks;
	size_t checks_cap;
	bool torn; /* the walk failed on values read at different moments, not on garbage */
	bool tore; /* the thread's stack moved under a read this sample (walk_thread_stack) */
	int64_t native_id; /* the kernel's id of the thread being read, as its process knows it; -1 unknown */
	bool last_try; /* the last read of a thread that keeps moving: validate_stack judges it */
	bool suspect;  /* the walk saw signs of a torn read: validate_stack judges what held */
	/* 3.15: what frames_collect read of the thread state, in the copy the walk used. */
	raddr_t ts_current, ts_marker;
	uint64_t ts_marker_seq;
	/*
	 * 3.15: the frame the marker was moved up to before this thread's first
	 * try, after the batch read it (walk_marker_early): ts_marker of that
	 * try is older than the write.  0: none.
	 */
	raddr_t marker_early;
	/*
	 * The thread being walked (walk_thread_stack), whose proven frames
	 * below its anchor the walk takes rather than reads (3.15,
	 * frames_take_base).  NULL: every frame is read.
	 */
	const struct thread_cache *tc;
	/*
	 * 3.15: the marker, its sequence and the innermost frame as
	 * validate_stack's re-read found them, the marker read at both its ends
	 * (reread_marker_at: where it lies; 0 when the layout has none), and
	 * whether it stood through it.  A stack that moved under that re-read
	 * is taken up to a marker proven by it, the moment the other stacks of
	 * the same sample are proven at, rather than by reads that follow: the
	 * later a part is proven, the more often the code after it has it.
	 */
	raddr_t reread_marker_at;
	bool reread_marker_read;
	raddr_t reread_current, reread_marker;
	uint64_t reread_marker_seq;
	raddr_t reread_top;       /* the walk's innermost frame, its instruction read in the middle */
	uint64_t reread_top_pos;
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: no bound on this sample */
	bool cut;             /* the deadline passed: the walk stops where it is */
	uint32_t until_clock; /* frames walked before the clock is looked at again */
	/* validate.c's working arrays. */
	raddr_t *base;
	size_t base_cap;
	struct check **moved;
	size_t moved_cap;
	struct remote_range *ranges;
	size_t ranges_cap;
	uint8_t *buf;
	size_t buf_cap;
};

/* Memory the caches and ids hold, for the budget. */
size_t walk_cache_bytes(const struct uw_target *t);
/* Frames walked between two looks at the clock: a look costs about what a frame does. */
#define WALK_CLOCK_EVERY 256
/*
 * Whether the sample ran past its deadline (w->cut from then on); frames
 * say how much was walked since the last call, so the clock is read only
 * every few hundred frames.  Inline: walk.c and frames.c both ask it, and
 * neither is the other's helper.
 */
static inline bool walk_over_time(struct walk *w, uint32_t frames)
{
	if (w->cut)
		return true;
	if (!w->deadline_ns)
		return false;
	if (frames < w->until_clock) {
		w->until_clock -= frames;
		return false;
	}
	w->until_clock = WALK_CLOCK_EVERY;
	w->cut = clock_mono_ns() > w->deadline_ns;
	return w->cut;
}
/* The arrays a sample works in, kept between samples. */
void walk_free(struct uw_target *t);
/* Bytes they hold. */
size_t walk_room(const struct uw_target *t);

/* frames.c */
/* 3.11+: a frame owned by C (or by the interpreter, 3.14+): the eval loop was entered from C there. */
static inline bool frames_is_shim(const struct py_layout *L, uint8_t owner)
{
	return (L->frame.owner_cstack != LAYOUT_OWNER_NONE && owner == L->frame.owner_cstack) ||
	       (L->frame.owner_interpreter != LAYOUT_OWNER_NONE && owner == L->frame.owner_interpreter);
}
/*
 * 3.11+: whether a frame without a caller can be where a thread's stack
 * begins.  Every stack begins where C entered the eval loop: 3.11 marks
 * that frame is_entry, 3.12+ push a shim frame below it.  A Python frame
 * with no caller and no such mark was read before its link was written
 * (frames_being_called): alone, it is a stack the thread never had (a lone
 * <genexpr> on 3.11, about 1 run in 5 of the impossible-callers test).
 */
static inline bool frames_may_be_root(const struct py_layout *L, uint8_t owner, bool entry)
{
	if (frames_is_shim(L, owner))
		return true;
	if (L->frame.is_entry != LAYOUT_ABSENT)
		return entry;
	return L->frame.owner_cstack == LAYOUT_OWNER_NONE && L->frame.owner_interpreter == LAYOUT_OWNER_NONE;
}
/*
 * 3.11-3.12: whether a thread's innermost frame is one its caller may still
 * be calling: it has not run its first instruction (it points at the one
 * before), and it was not entered from C (3.11 marks those; 3.12 links
 * them through a shim).  An inline call stores the pointer to the new
 * frame before the new frame's link back (GCC orders the two so: seen in
 * the eval loops of 3.11.7 and 3.12.1), and until then the link is what
 * the data stack held there: a stale frame, or none (a lone <genexpr> on
 * 3.11, about 1 run in 5 of the impossible-callers test; or a caller of
 * another thread's).  Its caller is the frame that ends where it begins
 * (frames_called_from), which no stale link points to but by chance of the
 * same place.  (3.13+ point at the first instruction until it is done, and
 * a thread waits there for the GIL: no mark of a call under way.)
 */
static inline bool frames_being_called(const struct py_layout *L, raddr_t code, uint64_t pos, bool entry)
{
	bool inline_call = L->frame.is_entry != LAYOUT_ABSENT ? !entry : L->minor == 12;
	return inline_call && L->code.code_adaptive != LAYOUT_ABSENT && code &&
	       pos + 2 == code + L->code.code_adaptive;
}
/* Whether the frame at caller, of code caller_code, ends on the data stack where callee begins. */
bool frames_called_from(struct uw_target *t, raddr_t caller, raddr_t caller_code, raddr_t callee);
/* Read one thread's innermost-frame pointer and its frames onto w->raw (*n of them), with checks. */
int frames_collect(struct walk *w, raddr_t tstate, uint32_t *n, bool *truncated,
                   struct uw_error *err);

/* validate.c */
/* Remember that the walk used len bytes at addr (seen: what it read there). */
int validate_watch(struct walk *w, raddr_t addr, const uint8_t *seen, uint32_t len,
                   enum check_role role, raddr_t frame, struct uw_error *err);
/* The links of frame f at addr (its code and its caller) as windows to check. */
int validate_watch_links(struct walk *w, raddr_t addr, const uint8_t *f, bool with_code,
                         bool caller, struct uw_error *err);
/*
 * Read the windows of one thread's walk again and compare: 0 if all held,
 * 1 if the stack moved under the walk, -1 if it could not be read again.
 * 2 if the thread returned into a frame of the walk and a re-read of the
 * frames from there down proved that stack: *returned innermost frames are
 * left out, and the frame returned into has the instruction read then.
 */
int validate_stack(struct walk *w, uint32_t first, uint32_t nraw, uint32_t common,
                   uint32_t *returned, struct uw_error *err);

/*
 * 3.15, after validate_stack found the stack moved: whether the re-read,
 * with the marker standing through it, proved the frames from the walk's
 * at-th down, and *pos the marked frame's instruction then.
 */
bool validate_below_marker(const struct walk *w, uint32_t first, uint32_t nraw, uint32_t at,
                           uint64_t *pos);

/* chain.c */
/* How many frames, from the bottom, a chain shares with the thread's last sample. */
uint32_t chain_common(const struct uw_target *t, const struct thread_cache *tc,
                      const struct raw_frame *raw, uint32_t n);
/* The stack id of a chain read innermost first; INTERN_FAILED and *err. */
uint32_t chain_resolve(struct uw_target *t, struct thread_cache *tc, const struct raw_frame *raw,
                       uint32_t n, uint32_t common, struct uw_error *err);

/* exception.c */
/* Whether the thread at tstate handles an exception (UW_MODE_EXCEPTION); false if unknown. */
bool exception_handling(struct uw_target *t, raddr_t tstate);

/* tasks.c */
/* Whether a sample reads the tasks (async mode, or a snapshot's UW_SNAP_TASKS). */
bool tasks_wanted(const struct uw_target *t);
/*
 * Read the asyncio tasks after the threads: the sample's stacks become task
 * stacks as the async mode says.  A program whose tasks cannot be read keeps
 * its threads' stacks (sample.tasks_error says why); -1 only out of memory.
 */
int tasks_sample(struct walk *w, struct uw_error *err);
/* The last sample's tasks, spelled out into a snapshot. */
int tasks_snapshot(struct uw_target *t, struct uw_snapshot *out, struct uw_error *err);
void tasks_free(struct uw_target *t);

/* kstill.c: the kernel's word on which threads ran (see kstill.c) */
struct kstill;
/* NULL and *err when the kernel refuses its program. */
struct bpf_map;
/* A BPF array made with BPF_F_MMAPABLE, len bytes of it mapped with prot (MAP_SHARED), or NULL. */
void *kernel_map_mmap(const struct bpf_map *map, size_t len, int prot);
struct kstill *kstill_open(struct uw_error *err);
void kstill_close(struct kstill *ks);
/* Look at process pid (as /proc names it) from the next look on: its number in the look, or -1. */
int kstill_watch(struct kstill *ks, pid_t pid);
void kstill_unwatch(struct kstill *ks, int proc);
/* Look at every watched process now; false when the kernel would not run the program. */
bool kstill_look(struct kstill *ks);
/* Looks taken so far: the number of the last. */
uint64_t kstill_looks(const struct kstill *ks);
/*
 * The tasks the last look saw of a watched process, in the kernel's order:
 * *ntasks of them, KSTILL_TASKS + 1 when more than KSTILL_TASKS (the first
 * KSTILL_TASKS told), and when the process began.  NULL when it was not
 * seen (gone, not looked at yet).
 */
const struct kstill_task *kstill_seen(const struct kstill *ks, int proc, uint32_t *ntasks,
                                     uint64_t *start_ns);

/* kcopy.c: the kernel's copy of a process as it falls quiet (see kcopy.c) */
struct kcopy;
struct kcopy *kcopy_open(struct uw_error *err);
void kcopy_close(struct kcopy *kc);
/* A slot for a process, or -1 (none free, or no copier). */
int kcopy_claim(struct kcopy *kc);
void kcopy_release(struct kcopy *kc, int slot);
/*
 * Watch the process's tasks as this sample's look lists them (n of them):
 * the ones that end are let go.  The tasks that could not be watched now
 * (no room, or the kernel refused), which leave the process uncopied.
 */
uint32_t kcopy_follow(struct kcopy *kc, int slot, const struct kstill_task *tasks, uint32_t n);
/*
 * Copy these ranges (a sample's batch plan), each as far as its reads used
 * (used_lens: the room to grow is left to a read), from now on: the plan's
 * generation, 0 when it is not copied.  owners: the task id (as /proc names
 * it) of the thread whose stack each holds, or 0.
 */
uint64_t kcopy_plan(struct kcopy *kc, int slot, const struct remote_range *ranges, const uint32_t *used_lens,
                    const pid_t *owners, uint32_t n);
/* The times a switch away left the slot's process quiet, so far (a copy may be made at each). */
uint64_t kcopy_quiet(const struct kcopy *kc, int slot);
/*
 * Copies of the slot's process are made from from_ns on (CLOCK_MONOTONIC),
 * none before, and hold the stack of a thread only if it was switched away
 * since since_ns (a sample's look).
 */
void kcopy_window(struct kcopy *kc, int slot, uint64_t since_ns, uint64_t from_ns);
/*
 * Fill the ranges (the plan of that generation, their buffers given) from
 * the slot's copy, each as far as the plan copied it (got), when it was taken after after_ns and the look (tasks, n)
 * proves nothing of the process ran since: true then, else false and the
 * ranges are to be read.
 */
bool kcopy_take(struct kcopy *kc, int slot, uint64_t generation, uint64_t after_ns,
                const struct kstill_task *tasks, uint32_t n, struct remote_range *ranges, uint32_t nranges);

/* kread.c: the in-kernel reader (struct uw_kreader, unwind.h) */
/* The reader's copier of processes as they fall quiet, NULL when the kernel refused it. */
struct kcopy *kread_copier(const struct uw_kreader *kr);
/* The reader's look at which threads ran, NULL when the kernel refused it. */
struct kstill *kread_still(const struct uw_kreader *kr);
struct kread_frame;
/*
 * Watch a thread (tid as /proc names it) of a 3.11+ layout: its slot, or -1
 * (no slot free, a layout the program cannot walk, the kernel refused).
 */
int kread_watch(struct uw_kreader *kr, pid_t tid, raddr_t tstate, const struct py_layout *L);
void kread_unwatch(struct uw_kreader *kr, int slot);
/* Arm the watched thread's one shot: the time armed, or 0 when it could not be. */
uint64_t kread_arm(struct uw_kreader *kr, int slot);
/* When the watched thread's last shot came (unwind_now_ns), 0 never: it ran then. */
uint64_t kread_shot_at(const struct uw_kreader *kr, int slot);
/*
 * The snapshot the kernel took of a watched thread, innermost first, when
 * whole, of that thread state and taken at since_ns or after: *n frames,
 * valid until the next call.  NULL when there is none (yet).
 */
const struct kread_frame *kread_take(struct uw_kreader *kr, int slot, raddr_t tstate,
                                     uint64_t since_ns, uint32_t *n);
/* How long a sample waits for the shot after its last read of a thread tore. */
#define KREAD_WAIT_NS 100000u
/*
 * Least time between two shots of a thread.  Arming one costs the kernel an
 * interrupt of the thread's CPU, and the shot another: tens of µs of the
 * thread's time in a virtual machine (23 µs of the daemon's for the arm,
 * about 40 µs of the thread's for both, measured).  Sampling at 1 kHz arms
 * every sample; back to back, one in many, and the samples between take
 * what a read proves.
 */
#define KREAD_ARM_GAP_NS 500000u
/* How long a watched thread goes without being busy (see struct thread_cache) before the watch ends. */
#define KREAD_QUIET_NS 5000000000u

/* threads.c */
void threads_free(struct uw_target *t);
/* The id /proc gives the thread the process knows as tid (another in a pid namespace); -1 none. */
int64_t threads_proc_tid(struct uw_target *t, int64_t tid);
/* End the thread's watch by the in-kernel reader, if any. */
void threads_unwatch(struct uw_target *t, struct thread_cache *tc);
/* The cache of a thread state; threads come in the same order every sample, so hint nearly always hits. */
struct thread_cache *threads_lookup(struct uw_target *t, raddr_t tstate, uint32_t hint,
                                    struct uw_error *err);
/* Forget the threads that were not in this sample: they ended. */
void threads_sweep(struct uw_target *t);
size_t threads_bytes(const struct uw_target *t);
/* The kernel's state letter of a thread ('R', 'S', ...; '?' unknown). */
char threads_kernel_state(struct uw_target *t, struct thread_cache *tc, int64_t tid);
/* Samples between two reads of a thread's name. */
#define THREADS_NAME_REFRESH 500
/* The thread's name into out, read again when due (see uw_sample_thread.name). */
void threads_name(struct uw_target *t, struct thread_cache *tc, int64_t tid,
                  char out[UW_THREAD_NAME_LEN]);
/*
 * Samples an idle verdict holds for a thread whose stack stays as it was:
 * half a second at 100 Hz.  A waiting thread that starts running Python
 * changes its stack and counts as busy at once; only one that goes on in C
 * without the GIL at the very same line waits that long to be seen so.
 */
#define THREADS_IDLE_REFRESH 50
/*
 * Whether a thread waits (uw_sample_thread.idle), its stack known: state is
 * its kernel state when the sample read it already, else '?'.
 */
bool threads_idle(struct uw_target *t, struct thread_cache *tc, int64_t tid, bool holds_gil,
                  char state, uint32_t stack);
/* The kernel's id of a thread from its pthread_t (3.8-3.10); -1 unknown. */
int64_t threads_native_tid(struct uw_target *t, uint64_t pthread);
/*
 * Pages a thread's walk reads before the kernel's proof pays: a sample it
 * proves reads schedstat, about what three or four pages pinned cost (the
 * wchan read that arms it again after the thread ran costs twice that).
 */
#define THREADS_STILL_MIN_PAGES 4
/* Most samples a thread seen on a CPU goes without a look at its wchan: busy threads pay little for it. */
#define THREADS_STILL_BACKOFF_MAX 32
/* Before a sample's memory is read: whether each thread worth it stood still since last read. */
/* End the thread's proof: its /proc files closed, the look's word on it forgotten. */
void threads_still_end(struct uw_target *t, struct thread_cache *tc);
void threads_still_begin(struct uw_target *t);
/*
 * The stack a thread had when it was last read, when the kernel proves it
 * ran nothing since (tid its thread id this sample, top its innermost frame
 * pointer): true and *stack, *truncated.
 */
bool threads_still_stack(struct uw_target *t, struct thread_cache *tc, int64_t tid, raddr_t top,
                         uint32_t *stack, bool *truncated);
/* After a whole walk of a thread (pages: what it read): keep its stack for the proof. */
void threads_still_after(struct uw_target *t, struct thread_cache *tc, int64_t tid, raddr_t top,
                         uint32_t stack, bool truncated, uint32_t pages);

#endif
