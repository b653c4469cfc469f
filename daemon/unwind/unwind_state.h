/*
 * What the unwinder keeps of a target between samples: interned ids
 * (intern.c), code objects (code.c), each thread's chain and proofs
 * (chain.c, threads.c, prove.h), the process's stillness (still.c) and the
 * opened target that owns them all (open.c).  Internal to daemon/unwind,
 * through unwind_internal.h.
 */
#ifndef PYPROFD_UNWIND_STATE_H
#define PYPROFD_UNWIND_STATE_H

#include <time.h>

#include "arena.h"
#include "array.h"
#include "clock.h"
#include "hash.h"
#include "linetable.h"
#include "unwind_memory.h"

/* intern.c */
#define INTERN_FAILED UINT32_MAX
#define INTERN_MAX_IDS (1u << 28)

struct frame_key {
	uint32_t function, qualname, file; /* string ids; 0 is none */
	int32_t line;
	uint32_t kind;                     /* enum uw_frame_kind */
	int32_t first_line;                /* co_firstlineno; 0 for markers */
	uint32_t waits;                    /* a known wait of the standard library (code_known_wait) */
	uint32_t build_id;                 /* a C frame's module's GNU build id, in hex (string id); 0 none */
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
#define CODE_TLBC_SLOTS 8

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
	/*
	 * Free-threaded builds: where threads' copies of the bytecode begin, as
	 * read in sample `gen` (direct-mapped by copy index): the deep stacks
	 * of many threads read each once a sample, not once a frame.
	 */
	struct {
		uint32_t index;
		uint64_t gen;
		raddr_t copy;
	} tlbc[CODE_TLBC_SLOTS];
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

/* Where a thread's Python name was found: its pointer's address, and the str (pynames.c). */
struct pyname_seen {
	raddr_t slot, name;
};

struct thread_cache {
	raddr_t tstate;
	uint64_t seen;       /* sample number it was last seen in */
	int stat_fd;         /* /proc/PID/task/TID/stat, kept open; -1 (-2: no such task) */
	int64_t stat_tid;
	int64_t own_tid;     /* the tid proven a task of this process; 0 before */
	uint32_t prev_stack; /* the stack it had last sample (idle: it ran since, when it differs) */
	bool prev_waits;     /* its innermost frame is a known wait (code_known_wait) */
	uint32_t idle_stack; /* the stack the kernel's state was last read at, and the verdict */
	uint64_t idle_gen;
	bool idle_verdict;
	int64_t name_tid;    /* the tid name is of; 0 before the first read */
	uint64_t name_gen;   /* sample it was read in */
	char name[UW_THREAD_NAME_LEN]; /* the kernel's */
	uint64_t pyname_ident; /* the thread ident pyname is of; 0 before the first look */
	int64_t pyname_tid;    /* and its kernel id: a new thread may reuse an ident */
	uint64_t pyname_ns;    /* when it was looked up */
	uint64_t pyname_wait_ns; /* before the next look */
	uint64_t pyname_full_ns; /* when it was last looked up whole, not only checked where it was */
	struct pyname_seen pyname_seen;
	bool pyname_found;
	char pyname[UW_THREAD_NAME_LEN]; /* Thread.name (pynames.c) */
	uint32_t n;
	size_t cap;
	struct chain_link *chain;
	bool truncated;      /* the chain stopped at UW_MAX_FRAMES */
	unsigned flags;      /* the options' flags the chain was read with (native markers change it) */
	/* Each prover's state of the thread (prove.h). */
	struct marker_state marker;
	struct same_bytes_state same;
	struct kernel_watch kernel;
	/* The kernel's word that the thread stood still (threads_still_*). */
	struct thread_still still;
	/* Where this sample's reads of its stack walk lie in the view's list, for the next plan (view_reads_carry). */
	uint32_t used_from, used_n;
	/* context.c: what the thread's context said this sample (NULL until one is read). */
	struct uw_context *ctx;
	bool ctx_moved;         /* it moved under the last read: read just before the stack next time */
	/*
	 * native.c: the thread's C frames.  At this sample's look it was off
	 * its CPU (looked) with look_switches switches; its Python stack
	 * py_stack was spliced with the copy taken at copy_switches into
	 * stack, of epoch epoch.
	 */
	struct {
		bool looked;
		uint64_t look_switches, copy_switches, epoch;
		uint32_t py_stack, stack;
		/* On its CPU at a look: its shots' watch (kshot.c; slot -1 none), and when the last one taken was. */
		int shot_slot;
		uint64_t shot_generation, shot_taken;
		/* Where its stack ended at its last whole walk: its copies need go no further (0: unknown). */
		uint64_t top;
	} native;
	bool ctx_proven;        /* ctx is proven as of the last sample that read it (and the names of ctx_gen) */
	uint64_t ctx_gen;
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
	struct used_range *sort_tmp; /* room to sort a plan's reads in (view.c's used_radix) */
	size_t sort_tmp_cap;
};

/*
 * Reads a reader asked for before it needed them (view_ahead: the task
 * reader, a level of tasks at a time), made in one batch and found by
 * address.  Their bytes live until the reads ahead are cleared.
 */
struct view_ahead {
	struct remote_range *ranges;
	uint32_t n, nread;  /* asked, and read */
	size_t cap;
	struct hash index;  /* address → range */
	struct arena bytes;
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
	struct uw_context *kept_contexts; /* its threads' contexts, copied (the reader's change each sample) */
	size_t kept_contexts_cap;
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

/* pynames.c: where the threads' Python names are found. */
struct pynames {
	raddr_t active;       /* threading._active, 0 until found */
	uint64_t looked_ns;   /* when threading was last looked for */
	uint64_t retry_ns;    /* and how long after that it is looked for again */
	raddr_t name_key;     /* the str "_name" as the program interned it, 0 until met */
	uint64_t budget_gen;  /* the sample budget and now_ns are of */
	uint32_t budget;      /* lookups left in it */
	uint64_t now_ns;      /* its time, read once */
};

/* context.c: HAMT node types met, and ContextVars met with what their names are wanted as. */
#define CONTEXT_NODE_TYPES 4u
#define CONTEXT_VARS_KEPT 512u
struct context_node_type {
	raddr_t type;
	uint8_t kind;
};
struct context_var_seen {
	raddr_t var, name;
	int want;
};
/* The parked tasks' contexts read this sample, each once: their pointer and HAMT, and what they said. */
#define CONTEXT_TASKS_KEPT 1024u
struct context_task {
	raddr_t ctx, vars;
	bool found;
	struct uw_context value;
};
struct context_state {
	struct context_node_type types[CONTEXT_NODE_TYPES];
	uint32_t ntypes;
	struct context_var_seen *vars; /* CONTEXT_VARS_KEPT, by address; NULL until a var is met */
	raddr_t context_key; /* the str "_context" as the program interned it, 0 until met */
	struct context_task *tasks; /* CONTEXT_TASKS_KEPT, NULL until a task's context is read */
	uint32_t ntasks;            /* of them read in sample tasks_gen */
	uint64_t tasks_gen;
	struct pyobj_notes *proof;   /* NULL until a thread's context is read */
	bool span_from_record; /* the thread's OTEP record gave its span: the SDK's ContextVar is not read */
	uint64_t gen;        /* bumped when the options' names change */
};

/* otel.c: what the process publishes for outside readers (OTEP 4719, 4947). */
#define OTEL_KEYS_MAX 256u
struct otel_state {
	raddr_t process_map;   /* the OTEL_CTX mapping, 0 until found */
	uint64_t published_at; /* of the payload last handed out */
	bool keys_known;       /* the daemon gave the key map: the process publishes thread records */
	char (*keys)[UW_CONTEXT_NAME_LEN]; /* OTEL_KEYS_MAX attribute names by key index; NULL until given */
	uint32_t nkeys;
	int16_t key_label[OTEL_KEYS_MAX]; /* a key's label index in the options, -1 for none */
	enum { OTEL_TLS_UNKNOWN, OTEL_TLS_STATIC, OTEL_TLS_DYNAMIC } tls;
	int64_t tp_offset;          /* static: the variable at the thread pointer plus this */
	uint64_t modid, mod_offset; /* dynamic: the module's block in the thread's DTV, and the offset in it */
	uint64_t tls_looked_ns, tls_retry_ns;
};

/*
 * pyobj.c: reads noted to be made again after (a context's proof): every
 * range and the bytes it held, within bounds (past them, overflow).
 */
#define PYOBJ_NOTES_RANGES 256u
#define PYOBJ_NOTES_BYTES 8192u
/* Notes read first as well (pyobj_notes_hold), and their bytes each, at most. */
#define PYOBJ_NOTES_LEAD 4u
#define PYOBJ_NOTES_LEAD_BYTES 16u
struct pyobj_notes {
	uint32_t n, used;
	bool overflow;
	struct {
		raddr_t addr;
		uint32_t len, at;
	} ranges[PYOBJ_NOTES_RANGES];
	uint8_t bytes[PYOBJ_NOTES_BYTES];
	uint8_t again[PYOBJ_NOTES_BYTES];
};

/* pyobj.c: the runtime's types its reads check objects against, 0 when not found. */
struct pyobj_types {
	raddr_t dict, long_, tuple, contextvar;
	bool looked;
};

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
	/*
	 * What a sample cut at its deadline goes on to take (what was under
	 * way, the stacks of the threads or tasks kept), learnt from the last
	 * cut ones: the next deadline comes that much sooner, so the sample as
	 * a whole keeps max_sample_ns.
	 */
	uint64_t cut_tail_ns;
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
	struct view_ahead ahead;
	struct tasks *tasks; /* tasks.c: asyncio's tasks, NULL until asked for */
	struct walk_gil_ptr gil_ptrs[WALK_GIL_PTRS]; /* the first interpreters' */
	struct pynames names;
	struct pyobj_types objtypes;
	bool pyobj_batched; /* pyobj_read through the sample's view (a context's reads), not on its own */
	struct pyobj_notes *notes; /* pyobj_read notes its reads here; NULL: not noting */
	struct context_state contexts;
	struct otel_state otel;
	struct native_state *native; /* C frames' walker and modules (native.c), NULL until a walk */
	raddr_t none_object; /* exception.c: &_Py_NoneStruct, 0 until looked up */
	bool none_looked;
};

/* open.c */
/* Where an image's runtime and types are, as uw_open finds them in a process. */
struct uw_image_target {
	const struct remote_image *image;
	unsigned minor; /* the layout when the runtime has no _Py_DebugOffsets */
	raddr_t runtime, code_type, unicode_type, bytes_type, frame_type;
	/* The types request contexts are read through (pyobj.c); 0: none, and no context is read. */
	raddr_t dict_type, long_type, tuple_type, contextvar_type;
	/* Nonzero: the image publishes OTEP 4947's thread records, each thread's at its thread_id plus this. */
	int64_t otel_tp_offset;
};
/* A target reading a memory image, as uw_open does a process; NULL and *err. */
struct uw_target *uw_open_image(const struct uw_image_target *it, struct uw_error *err);

/* proc.c */
/*
 * The addresses of syms in the runtime's file as the process maps it now
 * (for what is looked up after the open, once); true when every one was found.
 */
bool proc_runtime_symbols(struct uw_target *t, struct elf_symbol *syms, size_t n, raddr_t *addrs);

#endif
