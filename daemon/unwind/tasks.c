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
#include "tasks_state.h"


bool tasks_wanted(const struct uw_target *t)
{
	return t->opts.async_mode != UW_ASYNC_OFF || (t->opts.flags & UW_SNAP_TASKS);
}

void tasks_free(struct uw_target *t)
{
	struct tasks *ts = t->tasks;
	if (!ts)
		return;
	tasks_names_free(ts);
	hash_free(&ts->coro_index);
	free(ts->v);
	hash_free(&ts->index);
	free(ts->frames);
	free(ts->raw);
	hash_free(&ts->waiters);
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
		if (tasks_read(t, addr, raw, sizeof raw, err) != 0 ||
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

/*
 * A free-threaded build's objects begin with a longer header: every
 * object field of the tables moves by as much, and its coroutines' frames
 * are where its own debug offsets say (3.14+; false before).
 */
static bool tasks_free_threaded(const struct uw_target *t, struct asyncio_layout *L)
{
	const struct py_layout *P = &t->layout;
	if (!P->coro.known || P->object.ob_type < 8)
		return false;
	uint32_t shift = P->object.ob_type - 8; /* ob_type ends CPython's usual 16-byte header */
	L->gen_iframe = P->coro.iframe;
	L->gen_frame_state = P->coro.frame_state;
	L->frame_localsplus = P->coro.localsplus;
	L->frame_stackpointer = P->coro.stackpointer;
	L->task_size += shift;
	L->fut_state += shift;
	L->task_fut_waiter += shift;
	L->long_size += shift;
	L->long_digit += shift;
	uint32_t *fields[] = {&L->obj.head, &L->obj.fut_callback0, &L->obj.fut_callbacks, &L->obj.var_size,
	                      &L->obj.list_items, &L->obj.tuple_items, &L->obj.func_closure, &L->obj.method_self,
	                      &L->obj.cell_ref, &L->obj.weakref_object, &L->obj.type_basicsize,
	                      &L->obj.module_dict, &L->obj.set_mask, &L->obj.set_table};
	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
		*fields[i] += shift;
		if (*fields[i] + 8 > LAYOUT_ASYNCIO_OBJECT_BYTES)
			return false;
	}
	return L->gen_iframe + TASKS_FRAME_BYTES <= 512 && L->frame_localsplus + 16 <= TASKS_FRAME_BYTES;
}

/* Whether the tasks can be read at all; ts->why says why not. */
static bool tasks_usable(struct uw_target *t, struct tasks *ts)
{
	if (ts->usable)
		return true;
	const struct asyncio_layout *L = layout_asyncio_for_minor(t->layout.minor);
	ts->why = (struct uw_error){0};
	if (!L || t->layout.frame_model != FRAME_MODEL_INTERP || tasks_head_len(t) > TASKS_HEAD_MAX) {
		uw_fail(&ts->why, UW_EVERSION, "asyncio tasks are read from Python 3.11 on, not %s",
		        t->version);
		return false;
	}
	ts->L = *L;
	if (t->layout.free_threaded && !tasks_free_threaded(t, &ts->L)) {
		uw_fail(&ts->why, UW_EVERSION, "asyncio tasks of free-threaded %s are not read", t->version);
		return false;
	}
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
	if (tasks_read(t, head, b, 8, err) != 0)
		return -1;
	raddr_t node = load_u64(b, 0);
	while (node && node != head) {
		if (ts->n >= max || tasks_over_time(w)) {
			ts->cut = true;
			return 0;
		}
		/* A batch of the list: each task says where the next is, so those reads come one by one. */
		view_ahead_clear(t);
		ts->nbatch = 0;
		while (node && node != head && ts->nbatch < TASKS_BATCH && ts->n + ts->nbatch < max) {
			raddr_t task = node - L->task_node;
			if (view_ahead(t, task, L->task_size, err) != 0 || tasks_batch_add(ts, task, err) != 0 ||
			    view_ahead_read(t, err) != 0)
				return -1;
			const uint8_t *p = view_at_hand(t, task, L->task_size);
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
			if (tasks_over_time_at(w, i)) {
				ts->cut = true;
				return 0;
			}
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

/* -------- the tree -------- */

static bool tasks_coro_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tasks *ts = ctx;
	return ts->v[id].coro_frame == *(const raddr_t *)key;
}

/*
 * The sample's thread whose stack tc's chain is, up to chain[*top]: 3.15's
 * part below the marker ends below the chain's top, and a <GC> marker may
 * stand on it.  false when no thread of the sample has it (a thread left
 * out by the mode, or one that moved through every read).
 */
static bool tasks_thread_of(struct uw_target *t, const struct uw_sample *s, const struct thread_cache *tc,
                            uint32_t *slot, uint32_t *top)
{
	const uint8_t *tsb = view_read(t, tc->tstate, t->layout.tstate.size, 0, NULL);
	if (!tsb)
		return false;
	uint64_t thread_id = load_u64(tsb, t->layout.tstate.thread_id);
	for (uint32_t k = 0; k < s->nthreads; k++) {
		if (s->threads[k].thread_id != thread_id)
			continue;
		uint32_t stack = s->threads[k].stack;
		if (stack && uw_stack_frame(t, stack) == t->gc_frame)
			stack = uw_stack_parent(t, stack);
		for (uint32_t d = tc->n; d-- > 0;) {
			if (tc->chain[d].stack == stack) {
				*slot = k;
				*top = d;
				return true;
			}
		}
		return false;
	}
	return false;
}

/*
 * The tasks running as the threads were read, with their frames: a task
 * runs when its coroutine's frame is on its thread's stack as the sample
 * read it, and its frames are that stack's from there up.  Its coroutine
 * read as running does not say so: the tasks are read after the threads,
 * and the loop may have switched tasks in between, so such a task may run
 * where its thread's stack shows another, or none.  Such a task is counted
 * (tasks_moved) and its stack left out, being unknown.
 */
static int tasks_find_running(struct walk *w, struct tasks *ts, struct uw_error *err)
{
	struct uw_target *t = w->t;
	struct uw_sample *s = w->out;
	hash_clear(&ts->coro_index);
	if (hash_reserve(&ts->coro_index, ts->n) != 0)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < ts->n; i++) {
		raddr_t frame = ts->v[i].coro_frame;
		uint32_t h = hash_u64(frame);
		struct hash_slot *at = hash_probe(&ts->coro_index, h, tasks_coro_equal, ts, &frame);
		if (frame && !at->id)
			hash_fill(&ts->coro_index, at, h, i);
	}
	for (uint32_t i = 0; i < t->nthreads; i++) {
		const struct thread_cache *tc = &t->threads[i];
		if (tc->seen != t->sample_gen)
			continue;
		uint32_t slot = 0, top = UINT32_MAX;
		bool innermost = true;
		/* Innermost first: with loops nested in one thread, the innermost task is the thread's. */
		for (uint32_t d = tc->n; d-- > 0;) {
			raddr_t frame = tc->chain[d].addr;
			uint32_t k = frame ? hash_find(&ts->coro_index, hash_u64(frame), tasks_coro_equal, ts, &frame)
			                   : HASH_NONE;
			if (k == HASH_NONE || ts->v[k].running)
				continue;
			if (top == UINT32_MAX && !tasks_thread_of(t, s, tc, &slot, &top))
				break;
			if (d > top)
				continue;
			struct task_entry *e = &ts->v[k];
			e->thread_top = innermost;
			innermost = false;
			e->running = true;
			/* One that returned since its thread was read is named after the code it ran then. */
			if (!e->coro_code)
				e->coro_code = tc->chain[d].code;
			e->slot = slot;
			e->thread_id = s->threads[slot].thread_id;
			e->frames_first = ts->nframes;
			for (uint32_t j = top + 1; j-- > d;)
				if (tasks_push_frame(ts, uw_stack_frame(t, tc->chain[j].stack), err) != 0)
					return -1;
			e->nframes = ts->nframes - e->frames_first;
		}
	}
	for (uint32_t i = 0; i < ts->n; i++)
		s->tasks_moved += ts->v[i].executing && !ts->v[i].running;
	/* Only where every thread is in the sample is a task running on none of them one that moved. */
	if (t->opts.mode == UW_MODE_WALL)
		t->stats.tasks_moved += s->tasks_moved;
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
		if (e->running && e->thread_top) {
			s->threads[e->slot].stack = e->stack;
			s->threads[e->slot].task = true;
			continue;
		}
		/* One that began running after its thread was read has no stack known of that moment. */
		if (t->opts.async_mode != UW_ASYNC_ALL || e->running || e->executing || e->finished)
			continue;
		struct uw_sample_thread *owner = NULL;
		for (uint32_t k = 0; k < nthreads && !owner; k++)
			if (s->threads[k].thread_id == e->thread_id)
				owner = &s->threads[k];
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
		/* Parked, it runs in a context of its own: not its thread's. */
		th.context = context_of_task(t, e->context);
		s->threads[s->nthreads++] = th;
	}
	return 0;
}

int tasks_sample(struct walk *w, struct uw_error *err)
{
	struct uw_target *t = w->t;
	struct uw_sample *s = w->out;
	s->tasks = 0;
	s->tasks_moved = 0;
	s->tasks_cut = false;
	s->tasks_error = (struct uw_error){0};
	if (!t->tasks && !(t->tasks = calloc(1, sizeof *t->tasks)))
		return uw_fail(err, UW_ENOMEM, "out of memory");
	struct tasks *ts = t->tasks;
	ts->n = ts->nframes = 0;
	ts->cut = false;
	hash_clear(&ts->index);
	tasks_names_new_epoch(ts, t->epoch);
	bool looking = !ts->usable;
	uint64_t look_began = looking ? clock_mono_ns() : 0;
	if (!tasks_usable(t, ts)) {
		s->tasks_error = ts->why;
		return 0;
	}
	/* Finding asyncio (its module's files read, once) is no reading of tasks: the tasks get their time whole. */
	if (looking && w->deadline_ns)
		w->deadline_ns += clock_mono_ns() - look_began;
	uint32_t max = t->opts.max_tasks ? t->opts.max_tasks : UW_MAX_TASKS_DEFAULT;
	if (max > UW_MAX_TASKS)
		max = UW_MAX_TASKS;
	struct uw_error terr = {0};
	int rc = ts->L.task_node != LAYOUT_ABSENT ? tasks_read_all(w, ts, max, &terr)
	                                          : tasks_read_sets(w, ts, max, &terr);
	if (rc == 0 && ts->L.task_awaited_by == LAYOUT_ABSENT)
		rc = tasks_link_callbacks(w, ts, &terr);
	for (uint32_t i = 0; rc == 0 && i < ts->n; i++) {
		struct task_entry *e = &ts->v[i];
		for (int k = 0; k < TASKS_PARENT_CANDIDATES && e->parents[k] && e->parent == TASKS_NONE; k++) {
			uint32_t p = tasks_find(ts, e->parents[k]);
			/* A task past a cut (tasks_link_callbacks) is out of the sample, though still indexed. */
			if (p != HASH_NONE && p != i && p < ts->n)
				e->parent = p;
		}
	}
	if (rc == 0)
		rc = tasks_find_running(w, ts, &terr);
	for (uint32_t i = 0; rc == 0 && i < ts->n; i++)
		rc = tasks_label(t, ts, &ts->v[i], &terr);
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
		s->tasks_moved = 0;
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
		/* Its coroutine returned: asyncio is about to mark it done, and it has no frames to show. */
		if (e->finished && !e->running)
			continue;
		uint32_t name = tasks_display_name(t, e);
		if (name == INTERN_FAILED)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		struct uw_task *u = &out->tasks[out->ntasks++];
		*u = (struct uw_task){.id = e->addr,
		                      .name = t->intern.strs[name],
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
