/*
 * asyncio's tasks: which coroutine awaits which, and where each task is
 * parked.  A thread running an event loop shows only the loop; the tasks
 * are C objects of the _asyncio module (TaskObj), each running a coroutine
 * whose frame lives in the coroutine object and whose awaited coroutine sits
 * on top of that frame's value stack.
 *
 * 3.14+ keep every task on a list of its thread (and of the interpreter for
 * the tasks of threads that ended), and record in each task the task
 * awaiting it (awaited_by); the _asyncio module publishes the offsets of
 * both (.AsyncioDebug).  3.11-3.13 keep the tasks in asyncio.tasks' WeakSet
 * (and set of eager tasks), found through sys.modules, and record no
 * awaiting task: it is told by the callback the awaiting side left on the
 * task it awaits (tasks_parent_of).  The layouts are per-version tables
 * (layout.c), checked against the real interpreters by the tests.
 *
 * Everything read here is remote and bounded: tasks (max_tasks), coroutine
 * chains, sets and names.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
/* The frames a task's coroutine frame is read with: room for the fields used. */
#define TASKS_FRAME_BYTES 96u
/* Bytes of a PySetObject read (3.14+: used 24, mask 32, table 40). */
#define TASKS_SET_MASK 32
#define TASKS_SET_TABLE 40
/* _PyStackRef tag bits (3.14+). */
#define TASKS_STACKREF_TAGS 3u

#define TASKS_NONE UINT32_MAX
/* Tasks read together, ranges a batch may ask for, and awaits prefetched a task. */
#define TASKS_BATCH 1024u
#define TASKS_PF_MAX (16u * TASKS_BATCH)
#define TASKS_PF_LEVELS 4

/* FutureObj (every version): the first callback, and the list of the others. */
#define TASKS_FUT_CALLBACK0 24
#define TASKS_FUT_CALLBACKS 40
/* PyListObject and PyTupleObject: size and items (3.11-3.13). */
#define TASKS_VAR_SIZE 16
#define TASKS_LIST_ITEMS 24
#define TASKS_TUPLE_ITEMS 24
/* PyFunctionObject.func_closure, PyMethodObject.im_self, PyCellObject.ob_ref (3.11-3.13). */
#define TASKS_FUNC_CLOSURE 72
#define TASKS_METHOD_SELF 24
#define TASKS_CELL_REF 16
/* PyWeakReference.wr_object; PyTypeObject.tp_basicsize. */
#define TASKS_WEAKREF_OBJECT 16
#define TASKS_TYPE_BASICSIZE 32
/* PyModuleObject.md_dict. */
#define TASKS_MODULE_DICT 16
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
	uint32_t name;          /* string id */
	uint32_t marker;        /* frame id of <task>:NAME */
	raddr_t running_frame;  /* its coroutine's frame, when the coroutine runs */
	bool running;
	uint32_t frames_first, nframes; /* in tasks.frames: frame ids, innermost first */
	uint32_t stack;         /* the whole stack, once built */
	uint8_t built;          /* 0 not yet, 1 being built, 2 built */
};

struct task_name {
	raddr_t obj;
	uint32_t str, marker;
	uint64_t gen;
};

struct tasks {
	bool looked;            /* the runtime's asyncio was looked for */
	bool usable;
	struct uw_error why;    /* when not usable */
	struct asyncio_layout L;

	uint64_t epoch;         /* of the names below */
	struct task_name *names;
	uint32_t nnames;
	size_t names_cap;
	struct hash names_index;

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

	/* Reads of a batch of tasks made together (tasks_pf_*). */
	struct remote_range *pf;
	uint32_t *pf_off;       /* where each range's bytes are in pf_buf */
	uint32_t npf;
	size_t pf_cap, pf_off_cap;
	uint8_t *pf_buf;
	size_t pf_used, pf_buf_cap;
	struct hash pf_index;   /* address → range */
	raddr_t *batch;         /* the tasks of the batch being read */
	uint32_t nbatch;
	size_t batch_cap;
	raddr_t *frontier, *next_frontier; /* coroutines of the level being read */
	size_t frontier_cap, next_frontier_cap;
};

/*
 * Whether the sample's time ran out: tasks past it are left unread (the
 * sample says so as tasks_cut) while the threads read stand, so the walk
 * itself is not marked cut.  Looked at once a batch of tasks.
 */
static bool tasks_over_time(const struct walk *w)
{
	return w->deadline_ns && clock_mono_ns() > w->deadline_ns;
}

bool tasks_wanted(const struct uw_target *t)
{
	return t->opts.async_mode != UW_ASYNC_OFF || (t->opts.flags & UW_SNAP_TASKS);
}

void tasks_free(struct uw_target *t)
{
	struct tasks *ts = t->tasks;
	if (!ts)
		return;
	free(ts->names);
	hash_free(&ts->names_index);
	free(ts->v);
	hash_free(&ts->index);
	free(ts->frames);
	free(ts->raw);
	hash_free(&ts->waiters);
	free(ts->pf);
	free(ts->pf_off);
	free(ts->pf_buf);
	hash_free(&ts->pf_index);
	free(ts->batch);
	free(ts->frontier);
	free(ts->next_frontier);
	free(ts);
	t->tasks = NULL;
}

/* -------- finding asyncio in the process -------- */

/*
 * The _asyncio module's debug offsets (3.14+): in the executable or
 * libpython when the module is built in, else in its own extension file.
 * 1 found, 0 not there (yet: the program may import asyncio later), -1 *err.
 */
static int tasks_find_debug_offsets(struct uw_target *t, struct tasks *ts, struct uw_error *err)
{
	struct proc_maps maps;
	if (t->pid <= 0)
		return 0;
	if (proc_maps_read(t->pid, &maps, err) != 0)
		return -1;
	int found = 0;
	for (size_t i = 0; i < maps.count && !found; i++) {
		const struct proc_map *m = &maps.maps[i];
		if (!m->path || m->offset != 0)
			continue;
		const char *base = strrchr(m->path, '/');
		base = base ? base + 1 : m->path;
		bool candidate = strcmp(m->path, t->runtime_file) == 0 || strncmp(base, "_asyncio.", 9) == 0;
		if (!candidate)
			continue;
		int fd = proc_map_open(t->pid, m, err);
		if (fd < 0)
			continue;
		struct elf_symbol none = {.name = "_AsyncioDebug"};
		struct elf_facts facts;
		int rc = elf_lookup(fd, &none, 1, &facts, err);
		close(fd);
		uint64_t at = none.found ? none.value : facts.asyncio_debug_section;
		if (rc != 0 || !at)
			continue;
		uint8_t raw[LAYOUT_ASYNCIO_DEBUG_SIZE];
		raddr_t addr = m->start - facts.first_load_vaddr + at;
		if (remote_read(&t->mem, addr, raw, sizeof raw, err) != 0 ||
		    layout_asyncio_from_debug(raw, sizeof raw, &ts->L) != 0) {
			proc_maps_free(&maps);
			return uw_fail(err, UW_ECORRUPT, "unreadable asyncio debug offsets in %s", m->path);
		}
		found = 1;
	}
	proc_maps_free(&maps);
	return found;
}

/*
 * 3.11-3.13: the types a task's callbacks are told apart by, from the
 * runtime's own symbols.  0, or -1 and *err.
 */
static int tasks_find_types(struct uw_target *t, struct tasks *ts, struct uw_error *err)
{
	struct proc_maps maps;
	if (t->pid <= 0)
		return uw_fail(err, UW_EVERSION, "no process to look the types up in");
	if (proc_maps_read(t->pid, &maps, err) != 0)
		return -1;
	int rc = uw_fail(err, UW_ENOTPYTHON, "the runtime's types were not found");
	for (size_t i = 0; i < maps.count; i++) {
		const struct proc_map *m = &maps.maps[i];
		if (!m->path || m->offset != 0 || strcmp(m->path, t->runtime_file) != 0)
			continue;
		int fd = proc_map_open(t->pid, m, err);
		if (fd < 0)
			break;
		struct elf_symbol syms[4] = {{.name = "PyFunction_Type"}, {.name = "PyTuple_Type"},
		                             {.name = "PyMethod_Type"}, {.name = "PySet_Type"}};
		struct elf_facts facts;
		int lr = elf_lookup(fd, syms, 4, &facts, err);
		close(fd);
		if (lr == 0 && syms[0].found && syms[1].found && syms[2].found && syms[3].found) {
			uint64_t bias = m->start - facts.first_load_vaddr;
			ts->function_type = bias + syms[0].value;
			ts->tuple_type = bias + syms[1].value;
			ts->method_type = bias + syms[2].value;
			ts->set_type = bias + syms[3].value;
			rc = 0;
		}
		break;
	}
	proc_maps_free(&maps);
	return rc;
}

/* Whether the tasks can be read at all; ts->why says why not. */
static bool tasks_usable(struct uw_target *t, struct tasks *ts)
{
	if (ts->usable)
		return true;
	const struct asyncio_layout *L = layout_asyncio_for_minor(t->layout.minor);
	ts->why = (struct uw_error){0};
	if (!L || t->layout.frame_model != FRAME_MODEL_INTERP) {
		uw_fail(&ts->why, UW_EVERSION, "asyncio tasks are read from Python 3.11 on, not %s",
		        t->version);
		return false;
	}
	if (t->layout.free_threaded) {
		uw_fail(&ts->why, UW_EVERSION, "asyncio tasks of free-threaded builds are not read");
		return false;
	}
	ts->L = *L;
	if (L->minor < 14) {
		if (tasks_find_types(t, ts, &ts->why) != 0)
			return false;
		ts->usable = true;
		return true;
	}
	/* Until asyncio is imported there is nothing to find: look again at each sample. */
	int found = tasks_find_debug_offsets(t, ts, &ts->why);
	if (found <= 0) {
		if (found == 0)
			uw_fail(&ts->why, UW_OK, "no asyncio in the process (the _asyncio module is not loaded)");
		return false;
	}
	ts->usable = true;
	return true;
}

/* -------- batched reads -------- */

/*
 * A task costs a handful of small reads (the task, its coroutine, the
 * awaited object on the coroutine's stack, that object's type), and
 * thousands of tasks as many system calls.  So they are read a level at a
 * time for a batch of tasks, in as few process_vm_readv calls as the kernel
 * allows (remote_read_batch), and the readers below find their bytes here;
 * what was not prefetched (a deeper await, a name) is read on its own.
 */
static bool tasks_pf_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tasks *ts = ctx;
	return ts->pf[id].addr == *(const raddr_t *)key;
}

static void tasks_pf_reset(struct tasks *ts)
{
	ts->npf = 0;
	ts->pf_used = 0;
	hash_clear(&ts->pf_index);
}

/* Ask for len bytes at addr in the next tasks_pf_read; 0, or -1 out of memory. */
static int tasks_pf_add(struct tasks *ts, raddr_t addr, uint32_t len)
{
	if (addr < 4096 || (addr & 7) || ts->npf >= TASKS_PF_MAX)
		return 0;
	uint32_t h = hash_u64(addr);
	if (hash_find(&ts->pf_index, h, tasks_pf_equal, ts, &addr) != HASH_NONE)
		return 0;
	if (array_reserve((void **)&ts->pf, &ts->pf_cap, ts->npf, sizeof *ts->pf, NULL) ||
	    array_reserve((void **)&ts->pf_off, &ts->pf_off_cap, ts->npf, sizeof *ts->pf_off, NULL) ||
	    array_reserve((void **)&ts->pf_buf, &ts->pf_buf_cap, ts->pf_used + len, 1, NULL) ||
	    hash_reserve(&ts->pf_index, 1) != 0)
		return -1;
	ts->pf[ts->npf] = (struct remote_range){.addr = addr, .len = len};
	ts->pf_off[ts->npf] = ts->pf_used;
	ts->pf_used += len;
	hash_fill(&ts->pf_index, hash_probe(&ts->pf_index, h, tasks_pf_equal, ts, &addr), h, ts->npf);
	ts->npf++;
	return 0;
}

/* Read the ranges asked for since `from`, in one batch. */
static int tasks_pf_read(struct uw_target *t, struct tasks *ts, uint32_t from, struct uw_error *err)
{
	for (uint32_t i = from; i < ts->npf; i++)
		ts->pf[i].buf = ts->pf_buf + ts->pf_off[i];
	if (from >= ts->npf)
		return 0;
	return remote_read_batch(&t->mem, ts->pf + from, ts->npf - from, err);
}

/* The bytes at addr, from the batch when it holds them whole, else read now. */
static const uint8_t *tasks_pf_get(const struct tasks *ts, raddr_t addr, uint32_t len)
{
	uint32_t id = hash_find(&ts->pf_index, hash_u64(addr), tasks_pf_equal, ts, &addr);
	if (id == HASH_NONE || ts->pf[id].got < len)
		return NULL;
	return ts->pf_buf + ts->pf_off[id];
}

static int tasks_read(struct uw_target *t, const struct tasks *ts, raddr_t addr, void *buf,
                      size_t len, struct uw_error *err)
{
	const uint8_t *p = tasks_pf_get(ts, addr, (uint32_t)len);
	if (p) {
		memcpy(buf, p, len);
		return 0;
	}
	return remote_read(&t->mem, addr, buf, len, err);
}

/* -------- names -------- */

static bool tasks_name_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tasks *ts = ctx;
	return ts->names[id].obj == *(const raddr_t *)key;
}

/* The value of a small non-negative int object (a task named "Task-N" by number from 3.12). */
static int tasks_read_small_int(struct uw_target *t, const struct asyncio_layout *L, raddr_t obj,
                                uint64_t *value, struct uw_error *err)
{
	uint8_t b[40];
	if (remote_read(&t->mem, obj, b, L->long_digit + 8, err) != 0)
		return -1;
	uint64_t size = load_u64(b, L->long_size);
	uint64_t ndigits = L->long_tagged ? size >> 3 : size;
	if ((L->long_tagged && (size & 3) == 2) || ndigits > 2)
		return uw_fail(err, UW_ECORRUPT, "task name 0x%llx: not a str nor a small int",
		               (unsigned long long)obj);
	uint64_t lo = ndigits > 0 ? load_u32(b, L->long_digit) : 0;
	uint64_t hi = ndigits > 1 ? load_u32(b, L->long_digit + 4) : 0;
	*value = lo | hi << 30;
	return 0;
}

/* A task's name as a string id and its <task>:NAME frame, cached by the name object. */
static int tasks_name(struct uw_target *t, struct tasks *ts, raddr_t obj, uint32_t *str,
                      uint32_t *marker, struct uw_error *err)
{
	uint32_t h = hash_u64(obj);
	uint32_t id = hash_find(&ts->names_index, h, tasks_name_equal, ts, &obj);
	if (id != HASH_NONE && t->sample_gen - ts->names[id].gen < TASKS_NAME_REFRESH) {
		*str = ts->names[id].str;
		*marker = ts->names[id].marker;
		return 0;
	}
	char name[TASKS_NAME_MAX + 16];
	uint8_t hdr[16];
	if (!obj || remote_read(&t->mem, obj, hdr, sizeof hdr, err) != 0)
		return uw_fail(err, UW_ECORRUPT, "task name at 0x%llx unreadable", (unsigned long long)obj);
	if (load_u64(hdr, t->layout.object.ob_type) == t->unicode_type) {
		uint32_t s = pyobj_read_str(t, obj, err);
		if (s == INTERN_FAILED)
			return -1;
		snprintf(name, sizeof name, "%.*s", TASKS_NAME_MAX, t->intern.strs[s]);
	} else {
		uint64_t n = 0;
		if (tasks_read_small_int(t, &ts->L, obj, &n, err) != 0)
			return -1;
		snprintf(name, sizeof name, "Task-%llu", (unsigned long long)n);
	}
	char label[sizeof name + 8];
	int len = snprintf(label, sizeof label, "<task>:%s", name);
	struct frame_key key = {.line = -1, .kind = UW_FRAME_PYTHON};
	uint32_t s = intern_string(&t->intern, name, strlen(name));
	key.function = key.qualname = intern_string(&t->intern, label, (size_t)len);
	if (s == INTERN_FAILED || key.function == INTERN_FAILED ||
	    (*marker = intern_frame(&t->intern, &key)) == INTERN_FAILED)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	*str = s;
	if (id == HASH_NONE) {
		if (array_reserve((void **)&ts->names, &ts->names_cap, ts->nnames, sizeof *ts->names, NULL) ||
		    hash_reserve(&ts->names_index, 1) != 0)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		id = ts->nnames++;
		hash_fill(&ts->names_index, hash_probe(&ts->names_index, h, tasks_name_equal, ts, &obj), h, id);
	}
	ts->names[id] = (struct task_name){.obj = obj, .str = s, .marker = *marker, .gen = t->sample_gen};
	return 0;
}

/* -------- one task -------- */

static int tasks_push_frame(struct tasks *ts, uint32_t frame, struct uw_error *err)
{
	if (array_reserve((void **)&ts->frames, &ts->frames_cap, ts->nframes, sizeof *ts->frames, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	ts->frames[ts->nframes++] = frame;
	return 0;
}

/*
 * The object a suspended coroutine frame awaits, if it is a coroutine of
 * the same type: the top of its value stack (3.15 keeps the value being
 * sent above it).  0 when it awaits something else (a future).
 */
/*
 * Where a suspended coroutine frame keeps the object it awaits: the top of
 * its value stack, and (3.14+) the slot below, as 3.15 keeps the value being
 * sent above it.  false when the stack cannot hold one.
 */
static bool tasks_stack_top(const struct asyncio_layout *L, raddr_t frame, const uint8_t *f,
                            raddr_t *addr, uint32_t *len)
{
	if (L->frame_stackpointer != LAYOUT_ABSENT) {
		raddr_t sp = load_u64(f, L->frame_stackpointer) & ~(raddr_t)TASKS_STACKREF_TAGS;
		if (sp < frame + L->frame_localsplus + 8 || sp - frame > (1u << 16))
			return false;
		bool two = sp - 16 >= frame + L->frame_localsplus;
		*addr = two ? sp - 16 : sp - 8;
		*len = two ? 16 : 8;
		return true;
	}
	int32_t top = load_i32(f, L->frame_stacktop);
	if (top < 1 || top > (1 << 13))
		return false;
	*addr = frame + L->frame_localsplus + (uint64_t)(top - 1) * 8;
	*len = 8;
	return true;
}

/* The objects in the slots tasks_stack_top found, the top first. */
static void tasks_stack_objects(const uint8_t *b, uint32_t len, raddr_t out[2])
{
	out[0] = load_u64(b, len - 8) & ~(raddr_t)TASKS_STACKREF_TAGS;
	out[1] = len == 16 ? load_u64(b, 0) & ~(raddr_t)TASKS_STACKREF_TAGS : 0;
}

/*
 * The object a suspended coroutine frame awaits, if it is a coroutine of
 * the same type; 0 when it awaits something else (a future).
 */
static raddr_t tasks_awaited_coro(struct uw_target *t, const struct tasks *ts, raddr_t frame,
                                  const uint8_t *f, raddr_t coro_type)
{
	raddr_t at, objs[2];
	uint32_t len;
	uint8_t b[16];
	if (!tasks_stack_top(&ts->L, frame, f, &at, &len) || tasks_read(t, ts, at, b, len, NULL) != 0)
		return 0;
	tasks_stack_objects(b, len, objs);
	for (int i = 0; i < 2; i++) {
		uint8_t hdr[16];
		if (objs[i] && tasks_read(t, ts, objs[i], hdr, sizeof hdr, NULL) == 0 &&
		    load_u64(hdr, t->layout.object.ob_type) == coro_type)
			return objs[i];
	}
	return 0;
}

/*
 * A task's coroutine chain from its coroutine to the innermost one it
 * awaits, read into e's frames (innermost first).  A coroutine that runs
 * marks the task running: its frames are on its thread's stack.
 */
static int tasks_read_coro(struct uw_target *t, struct tasks *ts, struct task_entry *e, raddr_t coro,
                           struct uw_error *err)
{
	const struct asyncio_layout *L = &ts->L;
	const struct py_layout *P = &t->layout;
	uint32_t nraw = 0;
	raddr_t coro_type = 0;
	for (uint32_t depth = 0; coro && depth < TASKS_MAX_AWAIT_DEPTH; depth++) {
		uint8_t g[512];
		uint32_t len = L->gen_iframe + TASKS_FRAME_BYTES;
		if (len > sizeof g || tasks_read(t, ts, coro, g, len, err) != 0)
			return -1;
		raddr_t type = load_u64(g, P->object.ob_type);
		if (!coro_type)
			coro_type = type;
		else if (type != coro_type)
			break;
		int8_t state = (int8_t)g[L->gen_frame_state];
		raddr_t frame = coro + L->gen_iframe;
		const uint8_t *f = g + L->gen_iframe;
		if (state == L->state_executing) {
			e->running = true;
			e->running_frame = frame;
			break;
		}
		bool suspended = state >= L->state_suspended_lo && state <= L->state_suspended_hi;
		if (!suspended && state != L->state_created)
			break; /* finished: nothing parked there */
		if (array_reserve((void **)&ts->raw, &ts->raw_cap, nraw, sizeof *ts->raw, NULL))
			return uw_fail(err, UW_ENOMEM, "out of memory");
		ts->raw[nraw++] = (struct raw_frame){
			.addr = frame,
			.code = load_u64(f, P->frame.code) & ~P->frame.code_tag_mask,
			.pos = load_u64(f, P->frame.instr_ptr),
			.kind = UW_FRAME_PYTHON};
		if (!suspended)
			break;
		coro = tasks_awaited_coro(t, ts, frame, f, coro_type);
	}
	/* Read outermost first: the innermost await is the task's top frame. */
	e->frames_first = ts->nframes;
	for (uint32_t i = nraw; i-- > 0;) {
		struct code_info *ci = code_get(t, ts->raw[i].code, err);
		if (!ci)
			return -1;
		uint32_t frame = code_frame_at(t, ci, ts->raw[i].pos);
		if (frame == INTERN_FAILED)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		if (tasks_push_frame(ts, frame, err) != 0)
			return -1;
	}
	e->nframes = ts->nframes - e->frames_first;
	return 0;
}

/* The awaiting tasks a task records (3.14+): one object, or a set of them. */
static void tasks_read_awaited_by(struct uw_target *t, const struct tasks *ts, const uint8_t *task,
                                  struct task_entry *e)
{
	const struct asyncio_layout *L = &ts->L;
	if (L->task_awaited_by == LAYOUT_ABSENT)
		return;
	raddr_t by = load_u64(task, L->task_awaited_by);
	if (!by)
		return;
	if (!task[L->task_awaited_by_is_set]) {
		e->parents[0] = by;
		return;
	}
	uint8_t set[TASKS_SET_TABLE + 8];
	if (remote_read(&t->mem, by, set, sizeof set, NULL) != 0)
		return;
	uint64_t mask = load_u64(set, TASKS_SET_MASK);
	raddr_t table = load_u64(set, TASKS_SET_TABLE);
	uint64_t slots = mask + 1;
	if (mask >= TASKS_SET_MAX_SLOTS || (slots & mask) != 0 || !table)
		return;
	uint8_t entries[TASKS_SET_MAX_SLOTS * 16];
	if (remote_read(&t->mem, table, entries, slots * 16, NULL) != 0)
		return;
	uint32_t k = 0;
	for (uint64_t i = 0; i < slots && k < TASKS_PARENT_CANDIDATES; i++) {
		raddr_t key = load_u64(entries, (uint32_t)(i * 16));
		if (key && key != e->addr)
			e->parents[k++] = key;
	}
}

static bool tasks_index_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tasks *ts = ctx;
	return ts->v[id].addr == *(const raddr_t *)key;
}

static uint32_t tasks_find(const struct tasks *ts, raddr_t addr)
{
	return hash_find(&ts->index, hash_u64(addr), tasks_index_equal, ts, &addr);
}

/*
 * One task at addr, read into a new entry unless it is done; *next is the
 * next node of the list it is on.  -1 only for what ends the sample's tasks.
 */
static int tasks_read_one(struct uw_target *t, struct tasks *ts, raddr_t addr, uint64_t thread_id,
                          raddr_t *next, struct uw_error *err)
{
	const struct asyncio_layout *L = &ts->L;
	uint8_t task[512];
	raddr_t e_waiter, e_callbacks[2];
	if (L->task_size > sizeof task || tasks_read(t, ts, addr, task, L->task_size, err) != 0)
		return -1;
	*next = L->task_node != LAYOUT_ABSENT ? load_u64(task, L->task_node) : 0;
	if (L->task_is_task != LAYOUT_ABSENT && !task[L->task_is_task])
		return uw_fail(err, UW_ECORRUPT, "object 0x%llx on the task list is not a task",
		               (unsigned long long)addr);
	e_waiter = load_u64(task, L->task_fut_waiter);
	e_callbacks[0] = load_u64(task, TASKS_FUT_CALLBACK0);
	e_callbacks[1] = load_u64(task, TASKS_FUT_CALLBACKS);
	int32_t state = load_i32(task, L->fut_state);
	if (state < 0 || state > 2)
		return uw_fail(err, UW_ECORRUPT, "task 0x%llx in state %d", (unsigned long long)addr, state);
	raddr_t coro = load_u64(task, L->task_coro);
	if (state != 0 || !coro)
		return 0; /* done: asyncio.all_tasks() leaves it out too */
	if (tasks_find(ts, addr) != HASH_NONE)
		return uw_fail(err, UW_ECORRUPT, "task 0x%llx comes twice: the task list loops",
		               (unsigned long long)addr);
	if (array_reserve((void **)&ts->v, &ts->cap, ts->n, sizeof *ts->v, NULL) ||
	    hash_reserve(&ts->index, 1) != 0)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	struct task_entry *e = &ts->v[ts->n];
	*e = (struct task_entry){.addr = addr, .parent = TASKS_NONE, .thread_id = thread_id,
	                         .waiter = e_waiter, .callbacks = {e_callbacks[0], e_callbacks[1]}};
	if (tasks_name(t, ts, load_u64(task, L->task_name), &e->name, &e->marker, err) != 0 ||
	    tasks_read_coro(t, ts, e, coro, err) != 0)
		return -1;
	tasks_read_awaited_by(t, ts, task, e);
	uint32_t h = hash_u64(addr);
	hash_fill(&ts->index, hash_probe(&ts->index, h, tasks_index_equal, ts, &addr), h, ts->n);
	ts->n++;
	return 0;
}

/*
 * Read ahead, in a batch each level, what tasks_read_one will read of the
 * tasks in ts->batch: the tasks (unless read already), their coroutines,
 * the top of each suspended coroutine's stack and the objects there, which
 * are the next level's coroutines, for the first few awaits of each task.
 */
static int tasks_prefetch(struct uw_target *t, struct tasks *ts, bool read_tasks, struct uw_error *err)
{
	const struct asyncio_layout *L = &ts->L;
	uint32_t glen = L->gen_iframe + TASKS_FRAME_BYTES, from = ts->npf, nf = 0;
	for (uint32_t i = 0; read_tasks && i < ts->nbatch; i++)
		if (tasks_pf_add(ts, ts->batch[i], L->task_size) != 0)
			return uw_fail(err, UW_ENOMEM, "out of memory");
	if (tasks_pf_read(t, ts, from, err) != 0)
		return -1;
	if (array_reserve((void **)&ts->frontier, &ts->frontier_cap, 2 * ts->nbatch, sizeof *ts->frontier, NULL) ||
	    array_reserve((void **)&ts->next_frontier, &ts->next_frontier_cap, 2 * ts->nbatch,
	                  sizeof *ts->next_frontier, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < ts->nbatch; i++) {
		const uint8_t *task = tasks_pf_get(ts, ts->batch[i], L->task_size);
		if (task && load_u64(task, L->task_coro))
			ts->frontier[nf++] = load_u64(task, L->task_coro);
	}
	for (unsigned level = 0; level < TASKS_PF_LEVELS && nf; level++) {
		from = ts->npf;
		for (uint32_t i = 0; i < nf; i++)
			if (tasks_pf_add(ts, ts->frontier[i], glen) != 0)
				return uw_fail(err, UW_ENOMEM, "out of memory");
		if (tasks_pf_read(t, ts, from, err) != 0)
			return -1;
		from = ts->npf;
		for (uint32_t i = 0; i < nf; i++) {
			const uint8_t *g = tasks_pf_get(ts, ts->frontier[i], glen);
			raddr_t at;
			uint32_t len;
			if (g && tasks_stack_top(L, ts->frontier[i] + L->gen_iframe, g + L->gen_iframe, &at, &len) &&
			    tasks_pf_add(ts, at, len) != 0)
				return uw_fail(err, UW_ENOMEM, "out of memory");
		}
		if (tasks_pf_read(t, ts, from, err) != 0)
			return -1;
		uint32_t nn = 0;
		for (uint32_t i = 0; i < nf; i++) {
			const uint8_t *g = tasks_pf_get(ts, ts->frontier[i], glen), *b;
			raddr_t at, objs[2];
			uint32_t len;
			if (!g || !tasks_stack_top(L, ts->frontier[i] + L->gen_iframe, g + L->gen_iframe, &at, &len) ||
			    !(b = tasks_pf_get(ts, at, len)))
				continue;
			tasks_stack_objects(b, len, objs);
			for (int k = 0; k < 2; k++)
				if (objs[k] && nn < 2 * ts->nbatch)
					ts->next_frontier[nn++] = objs[k];
		}
		raddr_t *swap = ts->frontier;
		size_t swap_cap = ts->frontier_cap;
		ts->frontier = ts->next_frontier;
		ts->frontier_cap = ts->next_frontier_cap;
		ts->next_frontier = swap;
		ts->next_frontier_cap = swap_cap;
		nf = nn;
	}
	/* The last level's objects: their headers tell a coroutine from a future. */
	from = ts->npf;
	for (uint32_t i = 0; i < nf; i++)
		if (tasks_pf_add(ts, ts->frontier[i], 16) != 0)
			return uw_fail(err, UW_ENOMEM, "out of memory");
	return tasks_pf_read(t, ts, from, err);
}

static int tasks_batch_add(struct tasks *ts, raddr_t task, struct uw_error *err)
{
	if (array_reserve((void **)&ts->batch, &ts->batch_cap, ts->nbatch, sizeof *ts->batch, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	ts->batch[ts->nbatch++] = task;
	return 0;
}

/*
 * The tasks on one list (a thread's, or the interpreter's): a circular list
 * of llist_nodes through each task's task_node, its head at `head`.
 */
static int tasks_read_list(struct walk *w, struct tasks *ts, raddr_t head, uint64_t thread_id,
                           uint32_t max, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct asyncio_layout *L = &ts->L;
	uint8_t b[8];
	if (remote_read(&t->mem, head, b, 8, err) != 0)
		return -1;
	raddr_t node = load_u64(b, 0);
	while (node && node != head) {
		if (ts->n >= max || tasks_over_time(w)) {
			ts->cut = true;
			return 0;
		}
		/* A batch of the list: each task says where the next is, so those reads come one by one. */
		tasks_pf_reset(ts);
		ts->nbatch = 0;
		while (node && node != head && ts->nbatch < TASKS_BATCH && ts->n + ts->nbatch < max) {
			raddr_t task = node - L->task_node;
			uint32_t from = ts->npf;
			if (tasks_pf_add(ts, task, L->task_size) != 0 || tasks_batch_add(ts, task, err) != 0)
				return uw_fail(err, UW_ENOMEM, "out of memory");
			if (tasks_pf_read(t, ts, from, err) != 0)
				return -1;
			const uint8_t *p = tasks_pf_get(ts, task, L->task_size);
			if (!p)
				return uw_fail(err, UW_ECORRUPT, "task 0x%llx on the task list is unreadable",
				               (unsigned long long)task);
			raddr_t next = load_u64(p, L->task_node);
			if (next == node)
				return uw_fail(err, UW_ECORRUPT, "task list node 0x%llx links to itself",
				               (unsigned long long)node);
			node = next;
		}
		if (tasks_prefetch(t, ts, false, err) != 0)
			return -1;
		for (uint32_t i = 0; i < ts->nbatch; i++) {
			raddr_t next;
			if (tasks_read_one(t, ts, ts->batch[i], thread_id, &next, err) != 0)
				return -1;
		}
	}
	if (!node)
		return uw_fail(err, UW_ECORRUPT, "task list at 0x%llx ends in NULL", (unsigned long long)head);
	return 0;
}

/* Every interpreter's threads' task lists, then the interpreter's own. */
static int tasks_read_all(struct walk *w, struct tasks *ts, uint32_t max, struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *P = &t->layout;
	const uint8_t *rt = view_read(t, t->runtime, P->runtime.size, 0, err);
	if (!rt)
		return -1;
	raddr_t interp = load_u64(rt, P->runtime.interpreters_head);
	for (unsigned ni = 0; interp && ni < UW_MAX_INTERPRETERS; ni++) {
		const uint8_t *is = view_read(t, interp, P->interp.size, 0, err);
		if (!is)
			return -1;
		raddr_t next_interp = load_u64(is, P->interp.next);
		raddr_t tstate = load_u64(is, P->interp.threads_head);
		for (uint32_t k = 0; tstate && k < UW_MAX_THREADS; k++) {
			const uint8_t *tsb = view_read(t, tstate, P->tstate.size, 0, err);
			if (!tsb)
				return -1;
			uint64_t thread_id = load_u64(tsb, P->tstate.thread_id);
			if (tasks_read_list(w, ts, tstate + ts->L.ts_tasks_head, thread_id, max, err) != 0)
				return -1;
			if (ts->cut)
				return 0;
			raddr_t next = load_u64(tsb, P->tstate.next);
			if (next == tstate)
				break;
			tstate = next;
		}
		if (tasks_read_list(w, ts, interp + ts->L.interp_tasks_head, 0, max, err) != 0)
			return -1;
		if (ts->cut || next_interp == interp)
			return 0;
		interp = next_interp;
	}
	return 0;
}

/* -------- 3.11-3.13: the task sets of asyncio.tasks -------- */

/* Whether the object at addr is the str `name` (compact ASCII, as identifiers are). */
static bool tasks_str_is(struct uw_target *t, raddr_t addr, const char *name)
{
	const struct py_layout *P = &t->layout;
	size_t len = strlen(name);
	uint8_t b[128];
	if (!addr || P->unicode.ascii_size + len > sizeof b ||
	    remote_read(&t->mem, addr, b, P->unicode.ascii_size + len, NULL) != 0)
		return false;
	uint32_t state = load_u32(b, P->unicode.state);
	/* interned:2 kind:3 compact:1 ascii:1 */
	return load_u64(b, P->object.ob_type) == t->unicode_type &&
	       load_u64(b, P->unicode.length) == len && ((state >> 5) & 3) == 3 &&
	       memcmp(b + P->unicode.ascii_size, name, len) == 0;
}

/*
 * The value of key `name` in a dict whose keys are all str (sys.modules, a
 * module's globals): 1 and *value, 0 when it is not there, -1 if unreadable.
 * PyDictObject: ma_keys 32, ma_values 40; PyDictKeysObject: log2_index_bytes
 * 9, kind 10, nentries 24, indices from 32, then the entries.
 */
static int tasks_dict_get(struct uw_target *t, raddr_t dict, const char *name, raddr_t *value)
{
	uint8_t d[48], k[32];
	if (!dict || remote_read(&t->mem, dict, d, sizeof d, NULL) != 0 || load_u64(d, 40) != 0)
		return -1;
	raddr_t keys = load_u64(d, 32);
	if (!keys || remote_read(&t->mem, keys, k, sizeof k, NULL) != 0)
		return -1;
	unsigned index_bytes_log2 = k[9], kind = k[10];
	uint64_t n = load_u64(k, 24);
	if (index_bytes_log2 > 30 || kind > 2 || n > TASKS_DICT_MAX_ENTRIES)
		return -1;
	uint32_t entry = kind == 0 ? 24 : 16, key_at = kind == 0 ? 8 : 0;
	raddr_t entries = keys + 32 + ((raddr_t)1 << index_bytes_log2);
	uint8_t chunk[256 * 24];
	for (uint64_t i = 0; i < n; i += 256) {
		uint64_t m = n - i < 256 ? n - i : 256;
		if (remote_read(&t->mem, entries + i * entry, chunk, m * entry, NULL) != 0)
			return -1;
		for (uint64_t j = 0; j < m; j++) {
			const uint8_t *e = chunk + j * entry;
			if (tasks_str_is(t, load_u64(e, key_at), name)) {
				*value = load_u64(e, key_at + 8);
				return 1;
			}
		}
	}
	return 0;
}

/* Where the attribute values of a plain instance start (3.11-3.13); 0 if not readable. */
static raddr_t tasks_instance_values(struct uw_target *t, const struct asyncio_layout *L, raddr_t obj)
{
	uint8_t b[8];
	if (L->values_ptr == 0) {
		/* Inline after the object: at its type's basicsize, past the values' header. */
		uint8_t hdr[16];
		if (remote_read(&t->mem, obj, hdr, sizeof hdr, NULL) != 0 ||
		    remote_read(&t->mem, load_u64(hdr, t->layout.object.ob_type) + TASKS_TYPE_BASICSIZE,
		                b, 8, NULL) != 0)
			return 0;
		uint64_t basicsize = load_u64(b, 0);
		return basicsize >= 16 && basicsize < 4096 ? obj + basicsize + 8 : 0;
	}
	if (remote_read(&t->mem, obj + (raddr_t)(int64_t)L->values_ptr, b, 8, NULL) != 0)
		return 0;
	raddr_t v = load_u64(b, 0);
	if (L->values_tagged)
		return (v & 1) ? v + 1 : 0; /* untagged: a dict, not values */
	return v;
}

/* The first of an instance's attribute values that is of type `type`; 0 if none. */
static raddr_t tasks_attribute_of_type(struct uw_target *t, const struct tasks *ts, raddr_t obj,
                                       raddr_t type)
{
	raddr_t values = tasks_instance_values(t, &ts->L, obj);
	uint8_t v[TASKS_MAX_ITEMS * 8], hdr[16];
	if (!values || remote_read(&t->mem, values, v, sizeof v, NULL) != 0)
		return 0;
	for (uint32_t i = 0; i < TASKS_MAX_ITEMS; i++) {
		raddr_t o = load_u64(v, i * 8);
		if (o && remote_read(&t->mem, o, hdr, sizeof hdr, NULL) == 0 &&
		    load_u64(hdr, t->layout.object.ob_type) == type)
			return o;
	}
	return 0;
}

/*
 * Find asyncio.tasks' sets of tasks: sys.modules["asyncio.tasks"], its
 * _all_tasks (3.11) or _scheduled_tasks WeakSet's data set, and its
 * _eager_tasks set (3.12+).  0 when asyncio is not imported yet.
 */
static int tasks_find_sets(struct uw_target *t, struct tasks *ts)
{
	const struct py_layout *P = &t->layout;
	uint8_t b[8];
	if (remote_read(&t->mem, t->runtime + P->runtime.interpreters_head, b, 8, NULL) != 0)
		return 0;
	raddr_t interp = load_u64(b, 0), modules = 0, module = 0, dict = 0, weakset = 0, eager = 0;
	if (!interp || remote_read(&t->mem, interp + ts->L.interp_modules, b, 8, NULL) != 0)
		return 0;
	modules = load_u64(b, 0);
	if (tasks_dict_get(t, modules, "asyncio.tasks", &module) != 1 ||
	    remote_read(&t->mem, module + TASKS_MODULE_DICT, b, 8, NULL) != 0)
		return 0;
	dict = load_u64(b, 0);
	const char *all = ts->L.minor == 11 ? "_all_tasks" : "_scheduled_tasks";
	if (tasks_dict_get(t, dict, all, &weakset) != 1)
		return 0;
	raddr_t data = tasks_attribute_of_type(t, ts, weakset, ts->set_type);
	if (!data)
		return 0;
	if (ts->L.minor >= 12 && tasks_dict_get(t, dict, "_eager_tasks", &eager) == 1) {
		uint8_t hdr[16];
		if (remote_read(&t->mem, eager, hdr, sizeof hdr, NULL) != 0 ||
		    load_u64(hdr, P->object.ob_type) != ts->set_type)
			eager = 0;
	}
	ts->task_sets[0] = data;
	ts->task_sets[1] = eager;
	return 1;
}

/*
 * The tasks of a set: of weak references to them (the WeakSet's data) or of
 * the tasks themselves.  A slot that is no live task (a dead reference, a
 * task the set is losing as it is read) is passed over.
 */
static int tasks_read_set(struct walk *w, struct tasks *ts, raddr_t set, bool weak, uint32_t max,
                          struct uw_error *err)
{
	struct uw_target *t = w->t;
	uint8_t s[TASKS_SET_TABLE + 8];
	if (remote_read(&t->mem, set, s, sizeof s, err) != 0)
		return -1;
	if (load_u64(s, t->layout.object.ob_type) != ts->set_type)
		return uw_fail(err, UW_ECORRUPT, "asyncio's set of tasks at 0x%llx is no set",
		               (unsigned long long)set);
	uint64_t mask = load_u64(s, TASKS_SET_MASK), slots = mask + 1;
	raddr_t table = load_u64(s, TASKS_SET_TABLE);
	if (slots > TASKS_SET_SLOTS_MAX || (slots & mask) != 0 || !table)
		return uw_fail(err, UW_ECORRUPT, "asyncio's set of tasks has %llu slots",
		               (unsigned long long)slots);
	static const uint32_t chunk_bytes = TASKS_SET_CHUNK * 16;
	uint8_t *chunk = malloc(chunk_bytes);
	if (!chunk)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	int rc = 0;
	for (uint64_t i = 0; i < slots && rc == 0; i += TASKS_SET_CHUNK) {
		uint64_t m = slots - i < TASKS_SET_CHUNK ? slots - i : TASKS_SET_CHUNK;
		if ((rc = remote_read(&t->mem, table + i * 16, chunk, m * 16, err)) != 0)
			break;
		/* The chunk's tasks (through their weak references) read together. */
		tasks_pf_reset(ts);
		ts->nbatch = 0;
		bool full = false;
		for (uint64_t j = 0; j < m && !full; j++) {
			raddr_t key = load_u64(chunk, (uint32_t)(j * 16));
			int64_t hash = (int64_t)load_u64(chunk, (uint32_t)(j * 16 + 8));
			if (!key || hash == -1) /* empty, or the dummy of a removed key */
				continue;
			if (ts->n + ts->nbatch >= max) {
				ts->cut = full = true;
				break;
			}
			if ((weak && tasks_pf_add(ts, key + TASKS_WEAKREF_OBJECT, 8) != 0) ||
			    tasks_batch_add(ts, key, err) != 0) {
				rc = uw_fail(err, UW_ENOMEM, "out of memory");
				break;
			}
		}
		if (rc == 0 && weak)
			rc = tasks_pf_read(t, ts, 0, err);
		for (uint32_t k = 0; rc == 0 && weak && k < ts->nbatch; k++) {
			const uint8_t *ref = tasks_pf_get(ts, ts->batch[k] + TASKS_WEAKREF_OBJECT, 8);
			ts->batch[k] = ref ? load_u64(ref, 0) : 0;
		}
		if (rc == 0)
			rc = tasks_prefetch(t, ts, true, err);
		for (uint32_t k = 0; rc == 0 && k < ts->nbatch; k++) {
			raddr_t next;
			struct uw_error one = {0};
			if (ts->batch[k] && tasks_read_one(t, ts, ts->batch[k], 0, &next, &one) != 0 &&
			    (one.status == UW_ENOMEM || one.status == UW_EGONE)) {
				*err = one;
				rc = -1;
			}
		}
		if (rc == 0 && (full || tasks_over_time(w))) {
			ts->cut = true;
			break;
		}
	}
	free(chunk);
	return rc;
}

/* Every pending task of 3.11-3.13, from asyncio.tasks' sets. */
static int tasks_read_sets(struct walk *w, struct tasks *ts, uint32_t max, struct uw_error *err)
{
	struct uw_target *t = w->t;
	if (!ts->task_sets[0]) {
		if (ts->sets_looked && t->sample_gen - ts->sets_looked < TASKS_SETS_RETRY)
			return uw_fail(err, UW_OK, "no asyncio tasks found (asyncio.tasks is not imported)");
		ts->sets_looked = t->sample_gen;
		if (!tasks_find_sets(t, ts))
			return uw_fail(err, UW_OK, "no asyncio tasks found (asyncio.tasks is not imported)");
	}
	if (tasks_read_set(w, ts, ts->task_sets[0], true, max, err) != 0) {
		/* Found once, but gone or moved: looked for again next time. */
		ts->task_sets[0] = ts->task_sets[1] = 0;
		return -1;
	}
	if (ts->task_sets[1] && !ts->cut && tasks_read_set(w, ts, ts->task_sets[1], false, max, err) != 0) {
		ts->task_sets[1] = 0;
		return -1;
	}
	return 0;
}

static bool tasks_waiter_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tasks *ts = ctx;
	return ts->v[id].waiter == *(const raddr_t *)key;
}

/* The task an object is, or the task waiting on the future it is; TASKS_NONE. */
static uint32_t tasks_awaiting(const struct tasks *ts, raddr_t obj, uint32_t self)
{
	if (!obj)
		return TASKS_NONE;
	uint32_t p = tasks_find(ts, obj);
	if (p == HASH_NONE)
		p = hash_find(&ts->waiters, hash_u64(obj), tasks_waiter_equal, ts, &obj);
	return p == HASH_NONE || p == self ? TASKS_NONE : p;
}

/*
 * The task awaiting task i (3.11-3.13 record none): it left a callback on
 * task i.  A plain await leaves its own wakeup, bound to the awaiting task
 * (3.12+: a C function, its self; 3.11: a wrapper, its task, at 16);
 * gather and shield a closure holding the future the awaiting task waits
 * on (3.11's wait_for a partial holding it, at 24, in a tuple); a
 * TaskGroup its bound _on_task_done, whose group holds its parent task.
 */
static uint32_t tasks_parent_of(struct uw_target *t, const struct tasks *ts, uint32_t i)
{
	const struct task_entry *e = &ts->v[i];
	raddr_t cbs[TASKS_MAX_CALLBACKS];
	uint32_t n = 0;
	if (e->callbacks[0])
		cbs[n++] = e->callbacks[0];
	uint8_t b[TASKS_LIST_ITEMS + 8];
	if (e->callbacks[1] && remote_read(&t->mem, e->callbacks[1], b, sizeof b, NULL) == 0) {
		uint64_t size = load_u64(b, TASKS_VAR_SIZE);
		uint8_t items[TASKS_MAX_CALLBACKS * 8];
		if (size > TASKS_MAX_CALLBACKS - 1)
			size = TASKS_MAX_CALLBACKS - 1;
		if (size && remote_read(&t->mem, load_u64(b, TASKS_LIST_ITEMS), items, size * 8, NULL) == 0)
			for (uint64_t k = 0; k < size; k++) {
				/* Each is a (callback, context) tuple. */
				uint8_t tup[TASKS_TUPLE_ITEMS + 8];
				if (remote_read(&t->mem, load_u64(items, (uint32_t)(k * 8)), tup, sizeof tup, NULL) == 0)
					cbs[n++] = load_u64(tup, TASKS_TUPLE_ITEMS);
			}
	}
	const raddr_t type_off = t->layout.object.ob_type;
	for (uint32_t c = 0; c < n; c++) {
		uint8_t x[TASKS_FUNC_CLOSURE + 8];
		if (!cbs[c] || remote_read(&t->mem, cbs[c], x, sizeof x, NULL) != 0)
			continue;
		raddr_t type = load_u64(x, (uint32_t)type_off);
		uint32_t p = tasks_awaiting(ts, load_u64(x, 16), i);
		if (p == TASKS_NONE)
			p = tasks_awaiting(ts, load_u64(x, 24), i);
		if (p != TASKS_NONE)
			return p;
		/* A closure's cells, or a partial's arguments. */
		raddr_t tuple = type == ts->function_type ? load_u64(x, TASKS_FUNC_CLOSURE) : load_u64(x, 24);
		uint8_t tb[TASKS_TUPLE_ITEMS + TASKS_MAX_ITEMS * 8];
		if (tuple && remote_read(&t->mem, tuple, tb, TASKS_TUPLE_ITEMS, NULL) == 0 &&
		    load_u64(tb, (uint32_t)type_off) == ts->tuple_type) {
			uint64_t size = load_u64(tb, TASKS_VAR_SIZE);
			if (size > TASKS_MAX_ITEMS)
				size = TASKS_MAX_ITEMS;
			if (size && remote_read(&t->mem, tuple + TASKS_TUPLE_ITEMS, tb + TASKS_TUPLE_ITEMS,
			                        size * 8, NULL) == 0)
				for (uint64_t k = 0; k < size; k++) {
					raddr_t item = load_u64(tb, (uint32_t)(TASKS_TUPLE_ITEMS + k * 8));
					if (type == ts->function_type) {
						uint8_t cell[TASKS_CELL_REF + 8];
						if (remote_read(&t->mem, item, cell, sizeof cell, NULL) != 0)
							continue;
						item = load_u64(cell, TASKS_CELL_REF);
					}
					if ((p = tasks_awaiting(ts, item, i)) != TASKS_NONE)
						return p;
				}
		}
		/* A bound method: its instance's attributes (a TaskGroup's _parent_task). */
		if (type == ts->method_type) {
			raddr_t values = tasks_instance_values(t, &ts->L, load_u64(x, TASKS_METHOD_SELF));
			uint8_t v[TASKS_MAX_ITEMS * 8];
			if (values && remote_read(&t->mem, values, v, sizeof v, NULL) == 0)
				for (uint32_t k = 0; k < TASKS_MAX_ITEMS; k++) {
					raddr_t o = load_u64(v, k * 8);
					if (o && (p = tasks_find(ts, o)) != HASH_NONE && p != i)
						return p;
				}
		}
	}
	return TASKS_NONE;
}

/* 3.11-3.13: each task's awaiting task, from what it left on the tasks it awaits. */
static int tasks_link_callbacks(struct uw_target *t, struct tasks *ts, struct uw_error *err)
{
	hash_clear(&ts->waiters);
	if (hash_reserve(&ts->waiters, ts->n) != 0)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < ts->n; i++) {
		raddr_t w = ts->v[i].waiter;
		if (!w)
			continue;
		uint32_t h = hash_u64(w);
		struct hash_slot *slot = hash_probe(&ts->waiters, h, tasks_waiter_equal, ts, &w);
		if (!slot->id)
			hash_fill(&ts->waiters, slot, h, i);
	}
	for (uint32_t i = 0; i < ts->n; i++)
		if (ts->v[i].callbacks[0] || ts->v[i].callbacks[1])
			ts->v[i].parent = tasks_parent_of(t, ts, i);
	return 0;
}

/* -------- the tree -------- */

/* A running task's own frames: its thread's, from the innermost down to its coroutine's frame. */
static int tasks_splice_running(struct uw_target *t, struct tasks *ts, struct task_entry *e,
                                struct uw_error *err)
{
	for (uint32_t i = 0; i < t->nthreads; i++) {
		const struct thread_cache *tc = &t->threads[i];
		if (tc->seen != t->sample_gen)
			continue;
		for (uint32_t d = 0; d < tc->n; d++) {
			if (tc->chain[d].addr != e->running_frame)
				continue;
			e->frames_first = ts->nframes;
			for (uint32_t k = tc->n; k-- > d;)
				if (tasks_push_frame(ts, uw_stack_frame(t, tc->chain[k].stack), err) != 0)
					return -1;
			e->nframes = ts->nframes - e->frames_first;
			if (!e->thread_id) {
				const uint8_t *tsb = view_read(t, tc->tstate, t->layout.tstate.size, 0, NULL);
				if (tsb)
					e->thread_id = load_u64(tsb, t->layout.tstate.thread_id);
			}
			return 0;
		}
	}
	return 0;
}

/* The stack of task i: its frames on <task>:NAME on the stack of the task awaiting it. */
static int tasks_build_stack(struct uw_target *t, struct tasks *ts, uint32_t i, struct uw_error *err)
{
	uint32_t path[TASKS_MAX_TREE_DEPTH];
	uint32_t n = 0;
	/* Up to a built ancestor or the root; a loop (or a tree too deep) is cut there. */
	for (uint32_t k = i; k != TASKS_NONE && ts->v[k].built == 0 && n < TASKS_MAX_TREE_DEPTH;
	     k = ts->v[k].parent) {
		ts->v[k].built = 1;
		path[n++] = k;
	}
	while (n-- > 0) {
		struct task_entry *e = &ts->v[path[n]];
		uint32_t base = e->parent != TASKS_NONE && ts->v[e->parent].built == 2
		                    ? ts->v[e->parent].stack : 0;
		uint32_t s = intern_stack(&t->intern, base, e->marker);
		for (uint32_t f = e->nframes; s != INTERN_FAILED && f-- > 0;)
			s = intern_stack(&t->intern, s, ts->frames[e->frames_first + f]);
		if (s == INTERN_FAILED)
			return uw_fail(err, UW_ENOMEM, "out of memory interning frames");
		e->stack = s;
		e->built = 2;
	}
	return 0;
}

/* Make the sample's stacks task stacks, as the async mode says. */
static int tasks_apply(struct walk *w, struct tasks *ts, struct uw_error *err)
{
	struct uw_target *t = w->t;
	struct uw_sample *s = w->out;
	uint32_t nthreads = s->nthreads;
	for (uint32_t i = 0; i < ts->n; i++) {
		const struct task_entry *e = &ts->v[i];
		struct uw_sample_thread *owner = NULL;
		for (uint32_t k = 0; k < nthreads && !owner; k++)
			if (s->threads[k].thread_id == e->thread_id)
				owner = &s->threads[k];
		if (e->running && owner) {
			owner->stack = e->stack;
			owner->task = true;
			continue;
		}
		if (t->opts.async_mode != UW_ASYNC_ALL || e->running)
			continue;
		/* A task with no thread (one that ended) is shown on the first. */
		struct uw_sample_thread th = owner ? *owner : nthreads ? s->threads[0] : (struct uw_sample_thread){0};
		if (s->nthreads >= UW_MAX_THREADS + UW_MAX_TASKS)
			break;
		if (array_reserve((void **)&s->threads, &s->cap, s->nthreads, sizeof *s->threads, NULL))
			return uw_fail(err, UW_ENOMEM, "out of memory");
		th.holds_gil = th.on_cpu = th.truncated = th.moving = false;
		th.idle = true; /* parked in an await */
		th.task = true;
		th.stack = e->stack;
		s->threads[s->nthreads++] = th;
	}
	return 0;
}

int tasks_sample(struct walk *w, struct uw_error *err)
{
	struct uw_target *t = w->t;
	struct uw_sample *s = w->out;
	s->tasks = 0;
	s->tasks_cut = false;
	s->tasks_error = (struct uw_error){0};
	if (!t->tasks && !(t->tasks = calloc(1, sizeof *t->tasks)))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	struct tasks *ts = t->tasks;
	ts->n = ts->nframes = 0;
	ts->cut = false;
	hash_clear(&ts->index);
	if (ts->epoch != t->epoch) {
		/* The names' frame ids were of the epoch that ended. */
		ts->nnames = 0;
		hash_clear(&ts->names_index);
		ts->epoch = t->epoch;
	}
	if (!tasks_usable(t, ts)) {
		s->tasks_error = ts->why;
		return 0;
	}
	uint32_t max = t->opts.max_tasks ? t->opts.max_tasks : UW_MAX_TASKS_DEFAULT;
	if (max > UW_MAX_TASKS)
		max = UW_MAX_TASKS;
	struct uw_error terr = {0};
	int rc = ts->L.task_node != LAYOUT_ABSENT ? tasks_read_all(w, ts, max, &terr)
	                                          : tasks_read_sets(w, ts, max, &terr);
	if (rc == 0 && ts->L.task_awaited_by == LAYOUT_ABSENT)
		rc = tasks_link_callbacks(t, ts, &terr);
	for (uint32_t i = 0; rc == 0 && i < ts->n; i++) {
		struct task_entry *e = &ts->v[i];
		for (int k = 0; k < TASKS_PARENT_CANDIDATES && e->parents[k] && e->parent == TASKS_NONE; k++) {
			uint32_t p = tasks_find(ts, e->parents[k]);
			if (p != HASH_NONE && p != i)
				e->parent = p;
		}
		if (e->running)
			rc = tasks_splice_running(t, ts, e, &terr);
	}
	for (uint32_t i = 0; rc == 0 && i < ts->n; i++)
		if (ts->v[i].built == 0)
			rc = tasks_build_stack(t, ts, i, &terr);
	if (rc == 0 && t->opts.async_mode != UW_ASYNC_OFF)
		rc = tasks_apply(w, ts, &terr);
	if (rc != 0) {
		if (terr.status == UW_ENOMEM) {
			*err = terr;
			return -1;
		}
		/* Tasks that moved under the read: this sample keeps its threads' stacks. */
		s->tasks_error = terr;
		ts->n = 0;
		return 0;
	}
	s->tasks = ts->n;
	s->tasks_cut = ts->cut;
	t->stats.tasks_read += ts->n;
	t->stats.tasks_cut += ts->cut;
	return 0;
}

/* A frame id's frames spelled out for a snapshot, innermost first. */
int tasks_snapshot(struct uw_target *t, struct uw_snapshot *out, struct uw_error *err)
{
	struct tasks *ts = t->tasks;
	if (!ts || !ts->n)
		return 0;
	out->tasks = calloc(ts->n, sizeof *out->tasks);
	if (!out->tasks)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < ts->n; i++) {
		const struct task_entry *e = &ts->v[i];
		struct uw_task *u = &out->tasks[out->ntasks++];
		*u = (struct uw_task){.id = e->addr,
		                      .name = t->intern.strs[e->name],
		                      .thread_id = e->thread_id,
		                      .awaited_by = e->parent != TASKS_NONE ? ts->v[e->parent].addr : 0,
		                      .running = e->running};
		u->frames = calloc(e->nframes ? e->nframes : 1, sizeof *u->frames);
		if (!u->frames)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		for (uint32_t f = 0; f < e->nframes; f++)
			u->frames[u->nframes++] = *uw_frame_get(t, ts->frames[e->frames_first + f]);
	}
	return 0;
}
