/*
 * 3.11-3.13: asyncio keeps its tasks in asyncio.tasks' WeakSet (and, 3.12+,
 * a set of eager tasks), found through sys.modules, and records no
 * awaiting task: it is told by the callback the awaiting side left on the
 * task it awaits.  Everything read here is remote and bounded.
 */
#include <stdlib.h>
#include <string.h>

#include "tasks_state.h"

/* -------- 3.11-3.13: the task sets of asyncio.tasks -------- */

/* Whether the object at addr is the str `name` (compact ASCII, as identifiers are). */
static bool tasks_str_is(struct uw_target *t, raddr_t addr, const char *name)
{
	const struct py_layout *P = &t->layout;
	size_t len = strlen(name);
	uint8_t b[128];
	if (!addr || P->unicode.ascii_size + len > sizeof b ||
	    tasks_read(t, addr, b, P->unicode.ascii_size + len, NULL) != 0)
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
	if (!dict || tasks_read(t, dict, d, sizeof d, NULL) != 0 || load_u64(d, 40) != 0)
		return -1;
	raddr_t keys = load_u64(d, 32);
	if (!keys || tasks_read(t, keys, k, sizeof k, NULL) != 0)
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
		if (tasks_read(t, entries + i * entry, chunk, m * entry, NULL) != 0)
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
		uint8_t hdr[TASKS_HEAD_MAX];
		if (tasks_read(t, obj, hdr, tasks_head_len(t), NULL) != 0 ||
		    tasks_read(t, load_u64(hdr, t->layout.object.ob_type) + L->obj.type_basicsize,
		                b, 8, NULL) != 0)
			return 0;
		uint64_t basicsize = load_u64(b, 0);
		return basicsize >= 16 && basicsize < 4096 ? obj + basicsize + 8 : 0;
	}
	if (tasks_read(t, obj + (raddr_t)(int64_t)L->values_ptr, b, 8, NULL) != 0)
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
	uint8_t v[TASKS_MAX_ITEMS * 8], hdr[TASKS_HEAD_MAX];
	if (!values || tasks_read(t, values, v, sizeof v, NULL) != 0)
		return 0;
	for (uint32_t i = 0; i < TASKS_MAX_ITEMS; i++) {
		raddr_t o = load_u64(v, i * 8);
		if (o && tasks_read(t, o, hdr, tasks_head_len(t), NULL) == 0 &&
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
	if (tasks_read(t, t->runtime + P->runtime.interpreters_head, b, 8, NULL) != 0)
		return 0;
	raddr_t interp = load_u64(b, 0), modules = 0, module = 0, dict = 0, weakset = 0, eager = 0;
	if (!interp || tasks_read(t, interp + ts->L.interp_modules, b, 8, NULL) != 0)
		return 0;
	modules = load_u64(b, 0);
	if (tasks_dict_get(t, modules, "asyncio.tasks", &module) != 1 ||
	    tasks_read(t, module + ts->L.obj.module_dict, b, 8, NULL) != 0)
		return 0;
	dict = load_u64(b, 0);
	const char *all = ts->L.minor == 11 ? "_all_tasks" : "_scheduled_tasks";
	if (tasks_dict_get(t, dict, all, &weakset) != 1)
		return 0;
	raddr_t data = tasks_attribute_of_type(t, ts, weakset, ts->set_type);
	if (!data)
		return 0;
	if (ts->L.minor >= 12 && tasks_dict_get(t, dict, "_eager_tasks", &eager) == 1) {
		uint8_t hdr[TASKS_HEAD_MAX];
		if (tasks_read(t, eager, hdr, tasks_head_len(t), NULL) != 0 ||
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
	const struct asyncio_layout *L = &ts->L;
	uint8_t s[LAYOUT_ASYNCIO_OBJECT_BYTES];
	if (tasks_read(t, set, s, L->obj.set_table + 8, err) != 0)
		return -1;
	if (load_u64(s, t->layout.object.ob_type) != ts->set_type)
		return uw_fail(err, UW_ECORRUPT, "asyncio's set of tasks at 0x%llx is no set",
		               (unsigned long long)set);
	uint64_t mask = load_u64(s, L->obj.set_mask), slots = mask + 1;
	raddr_t table = load_u64(s, L->obj.set_table);
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
		if ((rc = tasks_read(t, table + i * 16, chunk, m * 16, err)) != 0)
			break;
		/* The chunk's tasks (through their weak references) read together. */
		view_ahead_clear(t);
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
			if ((weak && view_ahead(t, key + L->obj.weakref_object, 8, err) != 0) ||
			    tasks_batch_add(ts, key, err) != 0) {
				rc = -1;
				break;
			}
		}
		if (rc == 0 && weak)
			rc = view_ahead_read(t, err);
		/* Read through the view, found there: the next sample's batch holds them. */
		for (uint32_t k = 0; rc == 0 && weak && k < ts->nbatch; k++) {
			const uint8_t *ref = view_read(t, ts->batch[k] + L->obj.weakref_object, 8, 0, NULL);
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
			if (tasks_over_time_at(w, k)) {
				full = true;
				break;
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
int tasks_read_sets(struct walk *w, struct tasks *ts, uint32_t max, struct uw_error *err)
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
uint32_t tasks_parent_of(struct uw_target *t, const struct tasks *ts, uint32_t i)
{
	const struct asyncio_layout *L = &ts->L;
	const struct task_entry *e = &ts->v[i];
	raddr_t cbs[TASKS_MAX_CALLBACKS];
	uint32_t n = 0;
	if (e->callbacks[0])
		cbs[n++] = e->callbacks[0];
	uint8_t b[LAYOUT_ASYNCIO_OBJECT_BYTES];
	if (e->callbacks[1] && tasks_read(t, e->callbacks[1], b, L->obj.list_items + 8, NULL) == 0) {
		uint64_t size = load_u64(b, L->obj.var_size);
		uint8_t items[TASKS_MAX_CALLBACKS * 8];
		if (size > TASKS_MAX_CALLBACKS - 1)
			size = TASKS_MAX_CALLBACKS - 1;
		if (size && tasks_read(t, load_u64(b, L->obj.list_items), items, size * 8, NULL) == 0)
			for (uint64_t k = 0; k < size; k++) {
				/* Each is a (callback, context) tuple. */
				uint8_t tup[LAYOUT_ASYNCIO_OBJECT_BYTES];
				if (tasks_read(t, load_u64(items, (uint32_t)(k * 8)), tup, L->obj.tuple_items + 8,
				                NULL) == 0)
					cbs[n++] = load_u64(tup, L->obj.tuple_items);
			}
	}
	const raddr_t type_off = t->layout.object.ob_type;
	for (uint32_t c = 0; c < n; c++) {
		uint8_t x[LAYOUT_ASYNCIO_OBJECT_BYTES];
		if (!cbs[c] || tasks_read(t, cbs[c], x, L->obj.func_closure + 8, NULL) != 0)
			continue;
		raddr_t type = load_u64(x, (uint32_t)type_off);
		/* Its first two fields: a partial's function and arguments, a method's function and self. */
		uint32_t p = tasks_awaiting(ts, load_u64(x, L->obj.head), i);
		if (p == TASKS_NONE)
			p = tasks_awaiting(ts, load_u64(x, L->obj.head + 8), i);
		if (p != TASKS_NONE)
			return p;
		/* A closure's cells, or a partial's arguments. */
		raddr_t tuple = load_u64(x, type == ts->function_type ? L->obj.func_closure : L->obj.head + 8);
		uint8_t tb[LAYOUT_ASYNCIO_OBJECT_BYTES + TASKS_MAX_ITEMS * 8];
		if (tuple && tasks_read(t, tuple, tb, L->obj.tuple_items, NULL) == 0 &&
		    load_u64(tb, (uint32_t)type_off) == ts->tuple_type) {
			uint64_t size = load_u64(tb, L->obj.var_size);
			if (size > TASKS_MAX_ITEMS)
				size = TASKS_MAX_ITEMS;
			if (size && tasks_read(t, tuple + L->obj.tuple_items, tb + L->obj.tuple_items,
			                        size * 8, NULL) == 0)
				for (uint64_t k = 0; k < size; k++) {
					raddr_t item = load_u64(tb, (uint32_t)(L->obj.tuple_items + k * 8));
					if (type == ts->function_type) {
						uint8_t cell[LAYOUT_ASYNCIO_OBJECT_BYTES];
						if (tasks_read(t, item, cell, L->obj.cell_ref + 8, NULL) != 0)
							continue;
						item = load_u64(cell, L->obj.cell_ref);
					}
					if ((p = tasks_awaiting(ts, item, i)) != TASKS_NONE)
						return p;
				}
		}
		/* A bound method: its instance's attributes (a TaskGroup's _parent_task). */
		if (type == ts->method_type) {
			raddr_t values = tasks_instance_values(t, &ts->L, load_u64(x, L->obj.method_self));
			uint8_t v[TASKS_MAX_ITEMS * 8];
			if (values && tasks_read(t, values, v, sizeof v, NULL) == 0)
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
int tasks_link_callbacks(const struct walk *w, struct tasks *ts, struct uw_error *err)
{
	struct uw_target *t = w->t;
	hash_clear(&ts->waiters);
	if (hash_reserve(&ts->waiters, ts->n) != 0)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < ts->n; i++) {
		raddr_t waiter = ts->v[i].waiter;
		if (!waiter)
			continue;
		uint32_t h = hash_u64(waiter);
		struct hash_slot *slot = hash_probe(&ts->waiters, h, tasks_waiter_equal, ts, &waiter);
		if (!slot->id)
			hash_fill(&ts->waiters, slot, h, i);
	}
	for (uint32_t i = 0; i < ts->n; i++) {
		if (ts->v[i].callbacks[0] || ts->v[i].callbacks[1])
			ts->v[i].parent = tasks_parent_of(t, ts, i);
		/* Out of time: the tasks not linked yet leave the sample, which says it was cut. */
		if (i + 1 < ts->n && tasks_over_time_at(w, i)) {
			ts->n = i + 1;
			ts->cut = true;
		}
	}
	for (uint32_t i = 0; ts->cut && i < ts->n; i++)
		if (ts->v[i].parent != TASKS_NONE && ts->v[i].parent >= ts->n)
			ts->v[i].parent = TASKS_NONE;
	return 0;
}

