/*
 * asyncio's tasks as tasks.c and tasks_sets.c share them: the bounds, the
 * entries read, and the batched reads of a level of tasks.  Internal to
 * daemon/unwind.
 */
#ifndef PYPROFD_UNWIND_TASKS_STATE_H
#define PYPROFD_UNWIND_TASKS_STATE_H

#include <string.h>

#include "unwind_internal.h"

/* Coroutines one task awaits through, at most: past it the chain is cut. */
#define TASKS_MAX_AWAIT_DEPTH 256
/* Tasks from a task to its root, at most: a loop in awaited_by stops there. */
#define TASKS_MAX_TREE_DEPTH 256
/* Candidates kept of a set of awaiting tasks, and slots of such a set read. */
#define TASKS_PARENT_CANDIDATES 4
#define TASKS_SET_MAX_SLOTS 1024u
/* Samples a task name is trusted before it is read again (its object may be freed and reused). */
#define TASKS_NAME_REFRESH 256
/* Longest task name kept. */
#define TASKS_NAME_MAX 200
/* Name objects remembered at most: past it the memory of them starts again. */
#define TASKS_NAMES_CACHED 16384u
/*
 * Distinct <task>:NAME frames a process may have, kept across the caches'
 * resets: past them names fold into TASKS_LABEL_OTHER, so names a program
 * makes up without end cannot grow the history or an export without end.
 */
#define TASKS_LABELS_MAX 256u
#define TASKS_LABEL_OTHER "<task>:\u2026other"
/* Labels remembered at most between two resets of the caches, each with its frame id. */
#define TASKS_LABELS_CACHED 4096u
/* The frames a task's coroutine frame is read with: room for the fields used. */
#define TASKS_FRAME_BYTES 96u
/* _PyStackRef tag bits (3.14+). */
#define TASKS_STACKREF_TAGS 3u

#define TASKS_NONE UINT32_MAX
/* An object's header read for its type: 16 bytes, 32 in free-threaded builds. */
#define TASKS_HEAD_MAX 32u
/* Tasks read together, and awaits asked for ahead a task. */
#define TASKS_BATCH 1024u
/*
 * Tasks read between two looks at the clock: a task of a deep chain costs
 * a few microseconds when its reads are not at hand, so a batch alone could
 * overrun the sample's bound several times over.
 */
#define TASKS_CLOCK_EVERY 64u
#define TASKS_PF_LEVELS 4

/* Callbacks of a task looked at, items of a closure or values of an instance. */
#define TASKS_MAX_CALLBACKS 8
#define TASKS_MAX_ITEMS 16
/* Slots of a set read at once, and at most. */
#define TASKS_SET_CHUNK 1024u
#define TASKS_SET_SLOTS_MAX (1u << 22)
/* Entries of a dict looked through for a name, at most. */
#define TASKS_DICT_MAX_ENTRIES (1u << 16)
/* Samples between two looks for asyncio's task sets while they are not found. */
#define TASKS_SETS_RETRY 64

struct task_entry {
	raddr_t addr;
	raddr_t waiter;         /* the future it waits on (3.11-3.13 tell its awaiting task by it) */
	raddr_t callbacks[2];   /* fut_callback0 and the fut_callbacks list */
	raddr_t parents[TASKS_PARENT_CANDIDATES]; /* awaiting tasks as read; resolved to parent */
	uint32_t parent;        /* index of the awaiting task, TASKS_NONE for a root */
	uint64_t thread_id;
	uint32_t name;          /* string id of a name the program chose; TASKS_NONE for Task-N */
	uint64_t number;        /* N of asyncio's own name Task-N */
	uint32_t marker;        /* frame id of its <task>:NAME frame (tasks_names.c) */
	raddr_t coro_frame;     /* its coroutine's frame: on its thread's stack while it runs */
	raddr_t coro_code;      /* that frame's code, which names a task the program did not name */
	raddr_t context;        /* its contextvars context (task_context), 0 when none */
	bool executing;         /* its coroutine read as running */
	bool finished;          /* its coroutine read as returned: the task is done but for asyncio's books */
	bool running;           /* its coroutine's frame found on its thread's stack */
	uint32_t slot;          /* the sample's thread it runs on, when running */
	bool thread_top;        /* the innermost task running on that thread */
	uint32_t frames_first, nframes; /* in tasks.frames: frame ids, innermost first */
	uint32_t stack;         /* the whole stack, once built */
	uint8_t built;          /* 0 not yet, 1 being built, 2 built */
};

/* A task's name object as read: a name the program chose, or asyncio's own Task-N. */
struct task_name {
	raddr_t obj;
	uint64_t gen;           /* sample it was read in */
	bool chosen;
	uint32_t str;           /* chosen: its string id */
	uint64_t number;        /* not chosen: its N */
};

/* A <task>:NAME frame of this epoch, by what it names (tasks_names.c's keys). */
struct task_label {
	uint64_t key;
	uint32_t marker;
};

struct tasks {
	bool looked;            /* the runtime's asyncio was looked for */
	bool usable;
	struct uw_error why;    /* when not usable */
	struct asyncio_layout L;

	uint64_t epoch;         /* of the names and labels below */
	struct task_name *names;
	uint32_t nnames;
	size_t names_cap;
	struct hash names_index;
	struct task_label *labels;
	uint32_t nlabels;
	size_t labels_cap;
	struct hash labels_index;
	/* The texts of the <task>:NAME frames made so far, up to TASKS_LABELS_MAX: they outlive epochs. */
	struct hash_map labels_made;
	/* Frames' addresses of the tasks' coroutines, to find the running ones on their threads' stacks. */
	struct hash coro_index;

	struct task_entry *v;
	uint32_t n;
	size_t cap;
	struct hash index;      /* task address → entry */
	uint32_t *frames;
	uint32_t nframes;
	size_t frames_cap;
	struct raw_frame *raw;  /* one task's coroutine frames as read */
	size_t raw_cap;
	bool cut;

	/* 3.11-3.13: the sets of tasks, and the types callbacks are told apart by. */
	raddr_t function_type, tuple_type, method_type, set_type;
	raddr_t task_sets[2];   /* the WeakSet of tasks, and the set of eager tasks (3.12+) */
	uint64_t sets_looked;   /* sample they were last looked for in */
	struct hash waiters;    /* future waited on → entry */

	raddr_t *batch;         /* the tasks of the batch being read */
	uint32_t nbatch;
	size_t batch_cap;
	raddr_t *frontier, *next_frontier; /* coroutines of the level being read */
	size_t frontier_cap, next_frontier_cap;
};

/* Bytes of an object's header up to its type (tasks_usable checks they fit TASKS_HEAD_MAX). */
static inline uint32_t tasks_head_len(const struct uw_target *t)
{
	return t->layout.object.ob_type + 8;
}

/* tasks_read.c: the sample's clock, one task read, where an entry is, a coroutine's awaited objects. */
bool tasks_over_time(const struct walk *w);
/* The same, looked at once every TASKS_CLOCK_EVERY tasks (i counts them). */
bool tasks_over_time_at(const struct walk *w, uint32_t i);
/* A frame id onto the frames of the tasks (ts->frames). */
int tasks_push_frame(struct tasks *ts, uint32_t frame, struct uw_error *err);
int tasks_read_one(struct uw_target *t, struct tasks *ts, raddr_t addr, uint64_t thread_id, raddr_t *next,
                   struct uw_error *err);
uint32_t tasks_find(const struct tasks *ts, raddr_t addr);
bool tasks_stack_top(const struct asyncio_layout *L, raddr_t frame, const uint8_t *f, raddr_t *addr,
                     uint32_t *len);
void tasks_stack_objects(const uint8_t *b, uint32_t len, raddr_t out[2]);
/* A level of tasks asked for ahead through the view, or a read through it. */
int tasks_prefetch(struct uw_target *t, struct tasks *ts, bool read_tasks, struct uw_error *err);
int tasks_batch_add(struct tasks *ts, raddr_t task, struct uw_error *err);

/* Bytes of a task's objects through the sample's view (0, or -1 and *err): what every tasks file reads with. */
static inline int tasks_read(struct uw_target *t, raddr_t addr, void *buf, size_t len, struct uw_error *err)
{
	const uint8_t *p = view_read(t, addr, (uint32_t)len, 0, err);
	if (!p)
		return -1;
	memcpy(buf, p, len);
	return 0;
}

/* tasks_names.c: what a task is called, and its <task>:NAME frame within the bound. */
int tasks_name_read(struct uw_target *t, struct tasks *ts, raddr_t obj, struct task_name *out,
                    struct uw_error *err);
int tasks_label(struct uw_target *t, struct tasks *ts, struct task_entry *e, struct uw_error *err);
void tasks_names_new_epoch(struct tasks *ts, uint64_t epoch);
void tasks_names_free(struct tasks *ts);
/* The name Task.get_name() gives, for a dump: its string id. */
uint32_t tasks_display_name(struct uw_target *t, const struct task_entry *e);

/* tasks_sets.c (3.11-3.13): the task sets, and each task's awaiting one told by its callbacks. */
int tasks_read_sets(struct walk *w, struct tasks *ts, uint32_t max, struct uw_error *err);
int tasks_link_callbacks(const struct walk *w, struct tasks *ts, struct uw_error *err);
uint32_t tasks_parent_of(struct uw_target *t, const struct tasks *ts, uint32_t i);

#endif
