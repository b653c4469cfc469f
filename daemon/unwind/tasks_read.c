/*
 * Reading asyncio's tasks: one task (its coroutine chain, the task
 * awaiting it; its name is tasks_names.c's), a level of tasks at a time.
 * Every read goes through the sample's view: the reads of a batch of tasks
 * (then of the coroutines they run, and so on down) are asked for ahead and
 * made in one batch (view_ahead), each task's decoding then finds its bytes
 * there, and the view plans the next sample's batched read from them as
 * from the threads'.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_state.h"

/* -------- reads -------- */

/*
 * A task costs a handful of small reads (the task, its coroutine, the
 * awaited object on the coroutine's stack, that object's type), and
 * thousands of tasks as many system calls.  So they are asked for ahead a
 * level at a time for a batch of tasks, and read in as few
 * process_vm_readv calls as the kernel allows.  In a steady service the
 * sample's batch holds them already, and nothing is read ahead.  Each read
 * then finds its bytes in the view (tasks_read, tasks_state.h).
 */

/*
 * Ask ahead, in a batch each level, for what tasks_read_one will read of
 * the tasks in ts->batch: the tasks (unless read already), their
 * coroutines, the top of each suspended coroutine's stack and the objects
 * there, which are the next level's coroutines, for the first few awaits
 * of each task.
 */
int tasks_prefetch(struct uw_target *t, struct tasks *ts, bool read_tasks, struct uw_error *err)
{
	const struct asyncio_layout *L = &ts->L;
	uint32_t glen = L->gen_iframe + TASKS_FRAME_BYTES, nf = 0;
	for (uint32_t i = 0; read_tasks && i < ts->nbatch; i++)
		if (view_ahead(t, ts->batch[i], L->task_size, err) != 0)
			return -1;
	if (view_ahead_read(t, err) != 0)
		return -1;
	if (array_reserve((void **)&ts->frontier, &ts->frontier_cap, 2 * ts->nbatch, sizeof *ts->frontier, NULL) ||
	    array_reserve((void **)&ts->next_frontier, &ts->next_frontier_cap, 2 * ts->nbatch,
	                  sizeof *ts->next_frontier, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < ts->nbatch; i++) {
		const uint8_t *task = view_at_hand(t, ts->batch[i], L->task_size);
		if (task && load_u64(task, L->task_coro))
			ts->frontier[nf++] = load_u64(task, L->task_coro);
	}
	for (unsigned level = 0; level < TASKS_PF_LEVELS && nf; level++) {
		for (uint32_t i = 0; i < nf; i++)
			if (view_ahead(t, ts->frontier[i], glen, err) != 0)
				return -1;
		if (view_ahead_read(t, err) != 0)
			return -1;
		for (uint32_t i = 0; i < nf; i++) {
			const uint8_t *g = view_at_hand(t, ts->frontier[i], glen);
			raddr_t at;
			uint32_t len;
			if (g && tasks_stack_top(L, ts->frontier[i] + L->gen_iframe, g + L->gen_iframe, &at, &len) &&
			    view_ahead(t, at, len, err) != 0)
				return -1;
		}
		if (view_ahead_read(t, err) != 0)
			return -1;
		uint32_t nn = 0;
		for (uint32_t i = 0; i < nf; i++) {
			const uint8_t *g = view_at_hand(t, ts->frontier[i], glen), *b;
			raddr_t at, objs[2];
			uint32_t len;
			if (!g || !tasks_stack_top(L, ts->frontier[i] + L->gen_iframe, g + L->gen_iframe, &at, &len) ||
			    !(b = view_at_hand(t, at, len)))
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
	for (uint32_t i = 0; i < nf; i++)
		if (view_ahead(t, ts->frontier[i], tasks_head_len(t), err) != 0)
			return -1;
	return view_ahead_read(t, err);
}

int tasks_batch_add(struct tasks *ts, raddr_t task, struct uw_error *err)
{
	if (array_reserve((void **)&ts->batch, &ts->batch_cap, ts->nbatch, sizeof *ts->batch, NULL))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	ts->batch[ts->nbatch++] = task;
	return 0;
}

/*
 * Whether the tasks' share of the sample's time ran out: tasks past it are
 * left unread (the sample says so as tasks_cut) while the threads read
 * stand, so the walk itself is not marked cut.  The tasks read still have
 * their stacks built and their reads planned into the next sample's batch,
 * which took a fifth of the time of a sample of 4,096 tasks: a quarter of
 * the bound is left for that.
 */
bool tasks_over_time(const struct walk *w)
{
	return w->deadline_ns && clock_mono_ns() + w->t->opts.max_sample_ns / 4 > w->deadline_ns;
}

bool tasks_over_time_at(const struct walk *w, uint32_t i)
{
	return (i + 1) % TASKS_CLOCK_EVERY == 0 && tasks_over_time(w);
}

/* -------- one task -------- */

int tasks_push_frame(struct tasks *ts, uint32_t frame, struct uw_error *err)
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
bool tasks_stack_top(const struct asyncio_layout *L, raddr_t frame, const uint8_t *f,
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
void tasks_stack_objects(const uint8_t *b, uint32_t len, raddr_t out[2])
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
	if (!tasks_stack_top(&ts->L, frame, f, &at, &len) || tasks_read(t, at, b, len, NULL) != 0)
		return 0;
	tasks_stack_objects(b, len, objs);
	for (int i = 0; i < 2; i++) {
		uint8_t hdr[TASKS_HEAD_MAX];
		if (objs[i] && tasks_read(t, objs[i], hdr, tasks_head_len(t), NULL) == 0 &&
		    load_u64(hdr, t->layout.object.ob_type) == coro_type)
			return objs[i];
	}
	return 0;
}

/*
 * A task's coroutine chain from its coroutine to the innermost one it
 * awaits, read into e's frames (innermost first), and its coroutine's
 * frame and code.  A coroutine that runs has its frames on its thread's
 * stack instead.
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
		if (len > sizeof g || tasks_read(t, coro, g, len, err) != 0)
			return -1;
		raddr_t type = load_u64(g, P->object.ob_type);
		if (!coro_type)
			coro_type = type;
		else if (type != coro_type)
			break;
		int8_t state = (int8_t)g[L->gen_frame_state];
		raddr_t frame = coro + L->gen_iframe;
		const uint8_t *f = g + L->gen_iframe;
		bool suspended = state >= L->state_suspended_lo && state <= L->state_suspended_hi;
		bool live = suspended || state == L->state_created || state == L->state_executing;
		if (depth == 0) {
			e->coro_frame = frame;
			/* A coroutine that returned has its frame cleared: its task is done but for asyncio's books. */
			e->finished = !live;
			e->coro_code = live ? load_u64(f, P->frame.code) & ~P->frame.code_tag_mask : 0;
		}
		if (state == L->state_executing) {
			/* Its frames are its thread's: tasks_find_running takes them there. */
			e->executing = true;
			break;
		}
		if (!live)
			break; /* finished: nothing parked there */
		if (array_reserve((void **)&ts->raw, &ts->raw_cap, nraw, sizeof *ts->raw, NULL))
			return uw_fail(err, UW_ENOMEM, "out of memory");
		ts->raw[nraw++] = (struct raw_frame){
			.addr = frame,
			.code = load_u64(f, P->frame.code) & ~P->frame.code_tag_mask,
			.pos = load_u64(f, P->frame.instr_ptr),
			.kind = UW_FRAME_PYTHON,
			.tlbc = frames_tlbc(P, f)};
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
		uint64_t pos = ts->raw[i].pos;
		if (code_tlbc_pos(t, ci, ts->raw[i].tlbc, &pos, err) != 0)
			return -1;
		uint32_t frame = code_frame_at(t, ci, pos);
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
	uint8_t set[LAYOUT_ASYNCIO_OBJECT_BYTES];
	if (tasks_read(t, by, set, L->obj.set_table + 8, NULL) != 0)
		return;
	uint64_t mask = load_u64(set, L->obj.set_mask);
	raddr_t table = load_u64(set, L->obj.set_table);
	uint64_t slots = mask + 1;
	if (mask >= TASKS_SET_MAX_SLOTS || (slots & mask) != 0 || !table)
		return;
	uint8_t entries[TASKS_SET_MAX_SLOTS * 16];
	if (tasks_read(t, table, entries, slots * 16, NULL) != 0)
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

uint32_t tasks_find(const struct tasks *ts, raddr_t addr)
{
	return hash_find(&ts->index, hash_u64(addr), tasks_index_equal, ts, &addr);
}

/*
 * One task at addr, read into a new entry unless it is done; *next is the
 * next node of the list it is on.  -1 only for what ends the sample's tasks.
 */
int tasks_read_one(struct uw_target *t, struct tasks *ts, raddr_t addr, uint64_t thread_id,
                   raddr_t *next, struct uw_error *err)
{
	const struct asyncio_layout *L = &ts->L;
	uint8_t task[512];
	raddr_t e_waiter, e_callbacks[2];
	if (L->task_size > sizeof task || tasks_read(t, addr, task, L->task_size, err) != 0)
		return -1;
	*next = L->task_node != LAYOUT_ABSENT ? load_u64(task, L->task_node) : 0;
	if (L->task_is_task != LAYOUT_ABSENT && !task[L->task_is_task])
		return uw_fail(err, UW_ECORRUPT, "object 0x%llx on the task list is not a task",
		               (unsigned long long)addr);
	e_waiter = load_u64(task, L->task_fut_waiter);
	e_callbacks[0] = load_u64(task, L->obj.fut_callback0);
	e_callbacks[1] = load_u64(task, L->obj.fut_callbacks);
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
	struct task_name nm;
	if (tasks_name_read(t, ts, load_u64(task, L->task_name), &nm, err) != 0 ||
	    tasks_read_coro(t, ts, e, coro, err) != 0)
		return -1;
	e->name = nm.chosen ? nm.str : TASKS_NONE;
	e->context = L->task_context != LAYOUT_ABSENT ? load_u64(task, L->task_context) : 0;
	e->number = nm.number;
	tasks_read_awaited_by(t, ts, task, e);
	uint32_t h = hash_u64(addr);
	hash_fill(&ts->index, hash_probe(&ts->index, h, tasks_index_equal, ts, &addr), h, ts->n);
	ts->n++;
	return 0;
}

