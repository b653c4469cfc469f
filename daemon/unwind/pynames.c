/*
 * Threads' names as Python knows them (Thread.name), 3.8-3.15, read from
 * outside: sys.modules["threading"]._active maps each thread's ident to its
 * Thread object, whose _name attribute is the name.  The kernel's comm
 * holds 15 bytes at most and, before 3.14, nothing the program chose.
 *
 * Everything here is remote and bounded: dicts by their size and a cap,
 * probes by a cap, strings by the name's room.  The dict and the int key
 * are checked by type, the key by value, the name by type: garbage gives no
 * name, never another thread's.  Looked up rarely (threads.c says when),
 * never inside the sample's batched read, and allocating nothing.
 */
#include <string.h>
#include <unistd.h>

#include "unwind_internal.h"

/* Probes of threading._active for one ident (CPython's own open addressing). */
#define NAMES_MAX_PROBES 64u
/*
 * How long a threading module not found yet is left alone before it is
 * looked for again: at first briefly (a program starting imports it in its
 * first moments), twice as long after each miss, up to the most.
 */
#define NAMES_RETRY_FIRST_NS 100000000ull
#define NAMES_RETRY_MOST_NS 3000000000ull

/* The dict index of an empty slot (Objects/dict-common.h): the key is not there. */
#define NAMES_DKIX_EMPTY (-1)


/* The ident as its int key hashes: ints hash to themselves modulo 2**61 - 1. */
static uint64_t names_int_hash(uint64_t v)
{
	const uint64_t modulus = (1ull << 61) - 1;
	return v % modulus;
}

/*
 * The Thread object of ident in threading._active, by the dict's own open
 * addressing (Objects/dictobject.c): 1 and *thread, 0 when not there, -1
 * when unreadable.
 */
static int names_active_get(struct uw_target *t, const struct names_layout *N, uint64_t ident,
                            raddr_t *thread)
{
	uint32_t shift = pyobj_shift(t);
	uint8_t d[96];
	uint32_t len = N->dict_values + shift + 8;
	raddr_t active = t->names.active;
	if (len > sizeof d || pyobj_read(t, active, d, len) != 0 ||
	    load_u64(d, t->layout.object.ob_type) != t->objtypes.dict ||
	    load_u64(d, N->dict_values + shift) != 0)
		return -1;
	struct pyobj_keys k;
	if (pyobj_keys_read(t, N, load_u64(d, N->dict_keys + shift), &k) != 0 || !k.has_hash)
		return -1;
	uint64_t hash = names_int_hash(ident), mask = k.slots - 1, perturb = hash, slot = hash & mask;
	for (unsigned probe = 0; probe < NAMES_MAX_PROBES; probe++) {
		int64_t ix;
		if (pyobj_index_read(t, &k, slot, &ix) != 0)
			return -1;
		if (ix == NAMES_DKIX_EMPTY)
			return 0;
		if (ix >= 0) {
			uint8_t e[PYOBJ_ENTRY_MAX];
			if ((uint64_t)ix >= k.nentries || k.entry_size > sizeof e ||
			    pyobj_read(t, k.entries + (uint64_t)ix * k.entry_size, e, k.entry_size) != 0)
				return -1;
			if (load_u64(e, N->entry_hash) == hash && pyobj_int_is(t, N, load_u64(e, k.key_at), ident)) {
				*thread = load_u64(e, k.value_at);
				return *thread != 0;
			}
		}
		perturb >>= 5;
		slot = (slot * 5 + perturb + 1) & mask;
	}
	return 0;
}

/*
 * The main interpreter: the last of the list, whose head is the newest
 * (sub-interpreters are made after it).  0 when unreadable.
 */
static raddr_t names_main_interp(struct uw_target *t)
{
	raddr_t interp = pyobj_pointer(t, t->runtime + t->layout.runtime.interpreters_head);
	for (unsigned i = 0; interp && i < UW_MAX_INTERPRETERS; i++) {
		raddr_t next = pyobj_pointer(t, interp + t->layout.interp.next);
		if (!next)
			return interp;
		interp = next;
	}
	return 0;
}

/* Find threading._active: sys.modules["threading"].__dict__["_active"].  True when found. */
static bool names_find_active(struct uw_target *t, const struct names_layout *N)
{
	struct pynames *pn = &t->names;
	uint64_t now = clock_mono_ns();
	if (pn->looked_ns && now - pn->looked_ns < pn->retry_ns)
		return false;
	pn->looked_ns = now;
	pn->retry_ns = !pn->retry_ns ? NAMES_RETRY_FIRST_NS
	               : 2 * pn->retry_ns > NAMES_RETRY_MOST_NS ? NAMES_RETRY_MOST_NS
	                                                        : 2 * pn->retry_ns;
	if (t->layout.interp.modules == LAYOUT_ABSENT || !pyobj_types(t))
		return false;
	raddr_t interp = names_main_interp(t);
	raddr_t modules = interp ? pyobj_pointer(t, interp + t->layout.interp.modules) : 0;
	raddr_t module = 0, dict = 0, active = 0, unused = 0, slot;
	if (!modules || pyobj_dict_get(t, N, modules, "threading", false, &unused, &module, &slot) != 1)
		return false;
	dict = pyobj_pointer(t, module + N->module_dict + pyobj_shift(t));
	unused = 0;
	if (!dict || pyobj_dict_get(t, N, dict, "_active", false, &unused, &active, &slot) != 1 ||
	    pyobj_type_of(t, active) != t->objtypes.dict)
		return false;
	pn->active = active;
	return true;
}

/*
 * A Thread's _name into out: 1 and where its pointer lies and the str it
 * points to (seen), or 0 when it has none that is a str, -1 when unreadable.
 */
static int names_thread_name(struct uw_target *t, const struct names_layout *N, raddr_t obj,
                             char out[UW_THREAD_NAME_LEN], struct pyname_seen *seen)
{
	raddr_t name = 0, slot = 0;
	int found = pyobj_attr_get(t, N, obj, "_name", &t->names.name_key, &name, &slot);
	if (found < 0)
		return -1;
	if (found == 0 || pyobj_type_of(t, name) != t->unicode_type ||
	    pyobj_read_str_into(t, name, out, UW_THREAD_NAME_LEN, NULL) != 0)
		return 0;
	seen->slot = slot;
	seen->name = name;
	return out[0] != '\0';
}

int pynames_lookup(struct uw_target *t, uint64_t ident, char out[UW_THREAD_NAME_LEN],
                   struct pyname_seen *seen)
{
	const struct names_layout *N = layout_names_for_minor(t->layout.minor);
	if (!N || !ident || (!t->names.active && !names_find_active(t, N)))
		return 0;
	raddr_t thread = 0;
	int found = names_active_get(t, N, ident, &thread);
	if (found < 0) {
		/* No dict there any more (threading imported again?): looked for anew, later. */
		t->names.active = 0;
		return 0;
	}
	return found == 1 && names_thread_name(t, N, thread, out, seen) == 1;
}

bool pynames_same(struct uw_target *t, const struct pyname_seen *seen)
{
	return seen->slot && pyobj_pointer(t, seen->slot) == seen->name;
}
