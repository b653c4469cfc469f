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

/* Entries of a dict of str keys looked through at most (sys.modules, a module's or an instance's). */
#define NAMES_MAX_ENTRIES 8192u
/* Entries read at a time while looking through one, and the bytes of one at most. */
#define NAMES_CHUNK 128u
#define NAMES_ENTRY_MAX 32u
/* Probes of threading._active for one ident (CPython's own open addressing). */
#define NAMES_MAX_PROBES 64u
/* Slots of a dict past which it is taken for garbage. */
#define NAMES_MAX_SLOTS (1u << 24)
/*
 * How long a threading module not found yet is left alone before it is
 * looked for again: at first briefly (a program starting imports it in its
 * first moments), twice as long after each miss, up to the most.
 */
#define NAMES_RETRY_FIRST_NS 100000000ull
#define NAMES_RETRY_MOST_NS 3000000000ull

/* Type flags (Include/object.h): attributes kept by the interpreter, 3.11+; inline values, 3.13+. */
#define NAMES_TPFLAGS_INLINE_VALUES (1ull << 2)
#define NAMES_TPFLAGS_MANAGED_DICT (1ull << 4)

/* The dict index of an empty slot (Objects/dict-common.h): the key is not there. */
#define NAMES_DKIX_EMPTY (-1)

/* One dict's keys as read: where its entries are and how they are laid out. */
struct names_keys {
	uint64_t slots;      /* index slots, a power of two */
	uint64_t nentries;
	unsigned index_width; /* bytes of one index */
	raddr_t indices, entries;
	uint32_t entry_size;
	bool has_hash;       /* entries begin with the key's hash (general keys) */
	uint32_t key_at, value_at;
};

static int names_read(struct uw_target *t, raddr_t addr, void *buf, size_t len)
{
	return addr ? remote_read(&t->mem, addr, buf, len, NULL) : -1;
}

/* How much longer a free-threaded build's object header is than the usual 16 bytes. */
static uint32_t names_shift(const struct uw_target *t)
{
	return t->layout.object.ob_type - 8;
}

/* The pointer at addr; 0 when unreadable. */
static raddr_t names_pointer(struct uw_target *t, raddr_t addr)
{
	uint8_t b[8];
	return names_read(t, addr, b, 8) == 0 ? load_u64(b, 0) : 0;
}

/* The object's type; 0 when unreadable. */
static raddr_t names_type_of(struct uw_target *t, raddr_t obj)
{
	return obj ? names_pointer(t, obj + t->layout.object.ob_type) : 0;
}

/* PyDict_Type and PyLong_Type, from the runtime's own symbols; false when not found. */
static bool names_types(struct uw_target *t)
{
	struct pynames *pn = &t->names;
	if (pn->types_looked)
		return pn->dict_type && pn->long_type;
	pn->types_looked = true;
	struct elf_symbol syms[2] = {{.name = "PyDict_Type"}, {.name = "PyLong_Type"}};
	raddr_t at[2];
	if (proc_runtime_symbols(t, syms, 2, at)) {
		pn->dict_type = at[0];
		pn->long_type = at[1];
	}
	return pn->dict_type && pn->long_type;
}

/* A keys object's layout, checked to be one the interpreter could have made.  0, or -1. */
static int names_keys_read(struct uw_target *t, const struct names_layout *N, raddr_t keys,
                           struct names_keys *k)
{
	uint8_t b[64];
	uint32_t len = N->keys_indices;
	if (len > sizeof b || names_read(t, keys, b, len) != 0)
		return -1;
	k->nentries = load_u64(b, N->keys_nentries);
	if (N->keys_log2) {
		unsigned log2_size = b[N->keys_size], log2_bytes = b[N->keys_log2_index_bytes];
		unsigned kind = b[N->keys_kind];
		if (log2_size > 24 || log2_bytes < log2_size || log2_bytes - log2_size > 3 || kind > 2)
			return -1;
		k->slots = 1ull << log2_size;
		k->index_width = 1u << (log2_bytes - log2_size);
		k->entries = keys + N->keys_indices + (1ull << log2_bytes);
		/* DICT_KEYS_GENERAL: hash, key, value; the str-keyed kinds: key, value. */
		k->has_hash = kind == 0;
	} else {
		k->slots = load_u64(b, N->keys_size);
		if (k->slots == 0 || k->slots > NAMES_MAX_SLOTS || (k->slots & (k->slots - 1)) != 0)
			return -1;
		k->index_width = k->slots <= 0xff ? 1 : k->slots <= 0xffff ? 2 : 4;
		k->entries = keys + N->keys_indices + k->slots * k->index_width;
		k->has_hash = true;
	}
	if (k->nentries > k->slots)
		return -1;
	k->indices = keys + N->keys_indices;
	k->entry_size = k->has_hash ? N->entry_size : N->str_entry_size;
	k->key_at = k->has_hash ? N->entry_key : N->str_entry_key;
	k->value_at = k->has_hash ? N->entry_value : N->str_entry_value;
	return 0;
}

/* Whether the object at addr is the str `name` (an identifier: compact ASCII). */
static bool names_str_is(struct uw_target *t, raddr_t addr, const char *name)
{
	const struct py_layout *P = &t->layout;
	size_t len = strlen(name);
	uint8_t b[160];
	if (!addr || P->unicode.ascii_size + len > sizeof b ||
	    names_read(t, addr, b, P->unicode.ascii_size + len) != 0)
		return false;
	uint32_t state = load_u32(b, P->unicode.state);
	/* interned, kind:3 compact:1 ascii:1; free-threaded builds keep interned in a whole byte. */
	unsigned shift = P->free_threaded ? 8 : 2;
	bool compact_ascii = ((state >> (shift + 3)) & 3) == 3;
	return load_u64(b, P->object.ob_type) == t->unicode_type && compact_ascii &&
	       load_u64(b, P->unicode.length) == len && memcmp(b + P->unicode.ascii_size, name, len) == 0;
}

/*
 * The entry of str key `name` among a keys object's first entries: 1 and
 * its index, value (NULL in a split table, whose values lie apart) and
 * where the value lies, 0 when not there, -1 when unreadable.  `known` is the key's address when
 * already met (identifiers are interned: one object), which spares a read
 * of each key; *known is set when it is met.
 */
static int names_keys_find(struct uw_target *t, const struct names_keys *k, const char *name,
                           raddr_t *known, uint64_t *index, raddr_t *value, raddr_t *slot)
{
	uint8_t chunk[NAMES_CHUNK * NAMES_ENTRY_MAX];
	uint64_t n = k->nentries < NAMES_MAX_ENTRIES ? k->nentries : NAMES_MAX_ENTRIES;
	if (k->entry_size > NAMES_ENTRY_MAX || k->key_at + 8 > k->entry_size || k->value_at + 8 > k->entry_size)
		return -1;
	for (uint64_t i = 0; i < n; i += NAMES_CHUNK) {
		uint64_t m = n - i < NAMES_CHUNK ? n - i : NAMES_CHUNK;
		if (names_read(t, k->entries + i * k->entry_size, chunk, m * k->entry_size) != 0)
			return -1;
		for (uint64_t j = 0; j < m; j++) {
			const uint8_t *e = chunk + j * k->entry_size;
			raddr_t key = load_u64(e, k->key_at);
			if (!key || (key != *known && !names_str_is(t, key, name)))
				continue;
			*known = key;
			*index = i + j;
			*value = load_u64(e, k->value_at);
			*slot = k->entries + (i + j) * k->entry_size + k->value_at;
			return 1;
		}
	}
	return 0;
}

/*
 * The value of str key `name` in a dict: 1 and *value (*slot: where it
 * lies), 0 when not there, -1 when unreadable.  A split table's values are ma_values' (after a header
 * from 3.13).
 */
static int names_dict_get(struct uw_target *t, const struct names_layout *N, raddr_t dict,
                          const char *name, raddr_t *known, raddr_t *value, raddr_t *slot)
{
	uint32_t shift = names_shift(t);
	uint8_t d[96];
	uint32_t len = N->dict_values + shift + 8;
	if (len > sizeof d || names_read(t, dict, d, len) != 0 ||
	    load_u64(d, t->layout.object.ob_type) != t->names.dict_type)
		return -1;
	raddr_t keys = load_u64(d, N->dict_keys + shift), values = load_u64(d, N->dict_values + shift);
	struct names_keys k;
	uint64_t index;
	if (!keys || names_keys_read(t, N, keys, &k) != 0)
		return -1;
	int found = names_keys_find(t, &k, name, known, &index, value, slot);
	if (found != 1 || !values)
		return found;
	raddr_t array = values + (N->attrs == ATTRS_INLINE ? N->inline_values : 0);
	*slot = array + index * 8;
	return (*value = names_pointer(t, *slot)) != 0;
}

/* The ident as its int key hashes: ints hash to themselves modulo 2**61 - 1. */
static uint64_t names_int_hash(uint64_t v)
{
	const uint64_t modulus = (1ull << 61) - 1;
	return v % modulus;
}

/* Whether the object at addr is the int v (v >= 0). */
static bool names_int_is(struct uw_target *t, const struct names_layout *N, raddr_t addr, uint64_t v)
{
	uint32_t shift = names_shift(t);
	uint8_t b[64];
	uint32_t digit = N->long_digit + shift;
	if (digit + 12 > sizeof b || names_read(t, addr, b, digit + 12) != 0 ||
	    load_u64(b, t->layout.object.ob_type) != t->names.long_type)
		return false;
	uint64_t size = load_u64(b, N->long_size + shift), ndigits;
	if (N->long_tagged) {
		/* Sign bits 0: positive, 1: zero. */
		if ((size & 3) > 1)
			return false;
		ndigits = (size & 3) == 1 ? 0 : size >> 3;
	} else {
		if ((int64_t)size < 0)
			return false;
		ndigits = size;
	}
	if (ndigits > 3)
		return false;
	uint64_t got = 0;
	for (uint64_t i = 0; i < ndigits; i++) {
		uint64_t d = load_u32(b, digit + (uint32_t)(i * 4));
		if (d >> 30)
			return false;
		if (i == 2 && d >> 4)
			return false; /* past 64 bits: no ident */
		got |= d << (30 * i);
	}
	return got == v;
}

/* One signed index of a dict's index table. */
static int names_index_read(struct uw_target *t, const struct names_keys *k, uint64_t slot, int64_t *ix)
{
	uint8_t b[8];
	if (names_read(t, k->indices + slot * k->index_width, b, k->index_width) != 0)
		return -1;
	switch (k->index_width) {
	case 1: *ix = (int8_t)b[0]; break;
	case 2: { int16_t v; memcpy(&v, b, 2); *ix = v; break; }
	case 4: { int32_t v; memcpy(&v, b, 4); *ix = v; break; }
	default: { int64_t v; memcpy(&v, b, 8); *ix = v; break; }
	}
	return 0;
}

/*
 * The Thread object of ident in threading._active, by the dict's own open
 * addressing (Objects/dictobject.c): 1 and *thread, 0 when not there, -1
 * when unreadable.
 */
static int names_active_get(struct uw_target *t, const struct names_layout *N, uint64_t ident,
                            raddr_t *thread)
{
	uint32_t shift = names_shift(t);
	uint8_t d[96];
	uint32_t len = N->dict_values + shift + 8;
	raddr_t active = t->names.active;
	if (len > sizeof d || names_read(t, active, d, len) != 0 ||
	    load_u64(d, t->layout.object.ob_type) != t->names.dict_type ||
	    load_u64(d, N->dict_values + shift) != 0)
		return -1;
	struct names_keys k;
	if (names_keys_read(t, N, load_u64(d, N->dict_keys + shift), &k) != 0 || !k.has_hash)
		return -1;
	uint64_t hash = names_int_hash(ident), mask = k.slots - 1, perturb = hash, slot = hash & mask;
	for (unsigned probe = 0; probe < NAMES_MAX_PROBES; probe++) {
		int64_t ix;
		if (names_index_read(t, &k, slot, &ix) != 0)
			return -1;
		if (ix == NAMES_DKIX_EMPTY)
			return 0;
		if (ix >= 0) {
			uint8_t e[NAMES_ENTRY_MAX];
			if ((uint64_t)ix >= k.nentries || k.entry_size > sizeof e ||
			    names_read(t, k.entries + (uint64_t)ix * k.entry_size, e, k.entry_size) != 0)
				return -1;
			if (load_u64(e, N->entry_hash) == hash && names_int_is(t, N, load_u64(e, k.key_at), ident)) {
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
	raddr_t interp = names_pointer(t, t->runtime + t->layout.runtime.interpreters_head);
	for (unsigned i = 0; interp && i < UW_MAX_INTERPRETERS; i++) {
		raddr_t next = names_pointer(t, interp + t->layout.interp.next);
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
	if (t->layout.interp.modules == LAYOUT_ABSENT || !names_types(t))
		return false;
	raddr_t interp = names_main_interp(t);
	raddr_t modules = interp ? names_pointer(t, interp + t->layout.interp.modules) : 0;
	raddr_t module = 0, dict = 0, active = 0, unused = 0, slot;
	if (!modules || names_dict_get(t, N, modules, "threading", &unused, &module, &slot) != 1)
		return false;
	dict = names_pointer(t, module + N->module_dict + names_shift(t));
	unused = 0;
	if (!dict || names_dict_get(t, N, dict, "_active", &unused, &active, &slot) != 1 ||
	    names_type_of(t, active) != pn->dict_type)
		return false;
	pn->active = active;
	return true;
}

/*
 * Where a Thread keeps _name: its dict (1, *dict), or a values array and
 * the keys naming it (2, *values and *keys, *capacity the slots it has);
 * -1 when unreadable.
 */
static int names_attrs(struct uw_target *t, const struct names_layout *N, raddr_t obj, raddr_t *dict,
                       raddr_t *values, raddr_t *keys, uint64_t *capacity)
{
	uint32_t shift = names_shift(t);
	raddr_t type = names_type_of(t, obj);
	/* The type's basicsize, flags and dictoffset, each read on its own: they lie far apart. */
	uint8_t basicsize[8], flags[8], dictoffset[8];
	if (!type || names_read(t, type + N->type_basicsize + shift, basicsize, 8) != 0 ||
	    names_read(t, type + N->type_flags + shift, flags, 8) != 0 ||
	    names_read(t, type + N->type_dictoffset + shift, dictoffset, 8) != 0)
		return -1;
	int64_t offset = (int64_t)load_u64(dictoffset, 0);
	uint64_t tp_flags = load_u64(flags, 0), size = load_u64(basicsize, 0);
	*capacity = UINT64_MAX;
	if (N->attrs == ATTRS_DICT) {
		if (offset <= 0 || offset >= 4096)
			return -1;
		return (*dict = names_pointer(t, obj + (uint64_t)offset)) ? 1 : -1;
	}
	if (!(tp_flags & NAMES_TPFLAGS_MANAGED_DICT))
		return -1;
	int32_t dict_ptr = t->layout.free_threaded ? N->dict_ptr_ft : N->dict_ptr;
	raddr_t managed = names_pointer(t, obj + (raddr_t)(int64_t)dict_ptr);
	*values = 0;
	if (N->attrs == ATTRS_VALUES) {
		*values = names_pointer(t, obj + (raddr_t)(int64_t)N->values_ptr);
	} else if (N->attrs == ATTRS_TAGGED) {
		if (managed & 1)
			*values = managed + 1;
	} else if (tp_flags & NAMES_TPFLAGS_INLINE_VALUES) {
		uint8_t hdr[8];
		if (size < 16 || size >= 4096 || names_read(t, obj + size, hdr, sizeof hdr) != 0)
			return -1;
		if (hdr[N->inline_valid]) {
			*values = obj + size + N->inline_values;
			*capacity = hdr[N->inline_capacity];
		}
	}
	if (!*values) {
		*dict = managed;
		return managed ? 1 : -1;
	}
	*keys = names_pointer(t, type + N->type_cached_keys + shift);
	return *keys ? 2 : -1;
}

/*
 * A Thread's _name into out: 1 and where its pointer lies and the str it
 * points to (seen), or 0 when it has none that is a str, -1 when unreadable.
 */
static int names_thread_name(struct uw_target *t, const struct names_layout *N, raddr_t obj,
                             char out[UW_THREAD_NAME_LEN], struct pyname_seen *seen)
{
	struct pynames *pn = &t->names;
	raddr_t dict = 0, values = 0, keys = 0, name = 0, slot = 0;
	uint64_t capacity, index;
	int where = names_attrs(t, N, obj, &dict, &values, &keys, &capacity);
	if (where < 0)
		return -1;
	if (where == 1) {
		if (names_dict_get(t, N, dict, "_name", &pn->name_key, &name, &slot) != 1)
			return 0;
	} else {
		struct names_keys k;
		raddr_t unused;
		if (names_keys_read(t, N, keys, &k) != 0 ||
		    names_keys_find(t, &k, "_name", &pn->name_key, &index, &unused, &slot) != 1 ||
		    index >= capacity || !(name = names_pointer(t, slot = values + index * 8)))
			return 0;
	}
	if (names_type_of(t, name) != t->unicode_type ||
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
	return seen->slot && names_pointer(t, seen->slot) == seen->name;
}
