/*
 * Python objects read from outside: dicts, instance attributes, ints and
 * tuples, 3.8-3.15.  Everything here is remote and bounded: dicts by
 * their size and a cap, strings by the room given, ints by the width
 * asked.  Types are checked where a value is taken (a dict, an int, a
 * str), so garbage gives nothing, never another object's value.  Nothing
 * here allocates.
 */
#include <string.h>

#include "unwind_internal.h"

/* Entries of a dict of str keys looked through at most. */
#define PYOBJ_MAX_ENTRIES 8192u
/* Entries read at a time while looking through one. */
#define PYOBJ_CHUNK 128u
/* Slots of a dict past which it is taken for garbage. */
#define PYOBJ_MAX_SLOTS (1u << 24)

/* Type flags (Include/object.h): attributes kept by the interpreter, 3.11+; inline values, 3.13+. */
#define PYOBJ_TPFLAGS_INLINE_VALUES (1ull << 2)
#define PYOBJ_TPFLAGS_MANAGED_DICT (1ull << 4)
/* Subclasses of int, tuple and dict keep their base's layout first, and say so in their flags. */
#define PYOBJ_TPFLAGS_LONG_SUBCLASS (1ull << 24)
#define PYOBJ_TPFLAGS_TUPLE_SUBCLASS (1ull << 26)
#define PYOBJ_TPFLAGS_DICT_SUBCLASS (1ull << 29)

bool pyobj_is_a(struct uw_target *t, const struct names_layout *N, raddr_t type, raddr_t base,
                uint64_t subclass_flag)
{
	if (!type || !base)
		return false;
	if (type == base)
		return true;
	uint8_t flags[8];
	return pyobj_read_fixed(t, type + N->type_flags + pyobj_shift(t), flags, 8) == 0 &&
	       (load_u64(flags, 0) & subclass_flag);
}

raddr_t pyobj_tuple_item(struct uw_target *t, const struct names_layout *N, raddr_t tuple, uint32_t i)
{
	uint8_t size[8];
	if (!pyobj_is_a(t, N, pyobj_type_of(t, tuple), t->objtypes.tuple, PYOBJ_TPFLAGS_TUPLE_SUBCLASS) ||
	    pyobj_read(t, tuple + N->var_size + pyobj_shift(t), size, 8) != 0 || load_u64(size, 0) <= i ||
	    load_u64(size, 0) > PYOBJ_MAX_ENTRIES)
		return 0;
	return pyobj_pointer(t, tuple + N->tuple_items + pyobj_shift(t) + (raddr_t)i * 8);
}

int pyobj_attr_get(struct uw_target *t, const struct names_layout *N, raddr_t obj, const char *name,
                   raddr_t *known, raddr_t *value, raddr_t *slot)
{
	raddr_t dict = 0, values = 0, keys = 0;
	uint64_t capacity, index;
	int where = pyobj_attrs(t, N, obj, &dict, &values, &keys, &capacity);
	if (where < 0)
		return -1;
	if (where == 1)
		return pyobj_dict_get(t, N, dict, name, false, known, value, slot);
	struct pyobj_keys k;
	raddr_t unused;
	if (pyobj_keys_read(t, N, keys, &k) != 0)
		return -1;
	int found = pyobj_keys_find(t, &k, name, false, known, &index, &unused, slot);
	if (found != 1)
		return found;
	if (index >= capacity)
		return 0;
	*slot = values + index * 8;
	return (*value = pyobj_pointer(t, *slot)) != 0;
}

int pyobj_read(struct uw_target *t, raddr_t addr, void *buf, size_t len)
{
	if (!addr)
		return -1;
	if (!t->pyobj_batched)
		return remote_read(&t->mem, addr, buf, len, NULL);
	const uint8_t *p = len <= UINT32_MAX ? view_read(t, addr, (uint32_t)len, 0, NULL) : NULL;
	if (!p)
		return -1;
	memcpy(buf, p, len);
	pyobj_note(t, addr, p, len);
	return 0;
}

void pyobj_note(struct uw_target *t, raddr_t addr, const uint8_t *bytes, size_t len)
{
	struct pyobj_notes *p = t->notes;
	if (!p)
		return;
	if (p->n >= PYOBJ_NOTES_RANGES || len > PYOBJ_NOTES_BYTES - p->used) {
		p->overflow = true;
		return;
	}
	p->ranges[p->n].addr = addr;
	p->ranges[p->n].len = (uint32_t)len;
	p->ranges[p->n].at = p->used;
	memcpy(p->bytes + p->used, bytes, len);
	p->used += (uint32_t)len;
	p->n++;
}

bool pyobj_notes_hold(struct uw_target *t, struct pyobj_notes *p, uint32_t lead_from)
{
	if (p->overflow || lead_from > p->n || p->n - lead_from > PYOBJ_NOTES_LEAD)
		return false;
	/*
	 * One read copies its ranges in turn, not at one instant: the notes
	 * from lead_from on are read first as well as in their place, so what
	 * they hold is seen before and after all the others.
	 */
	uint32_t lead = p->n - lead_from, total = lead + p->n;
	struct remote_range ranges[PYOBJ_NOTES_LEAD + PYOBJ_NOTES_RANGES];
	uint8_t first[PYOBJ_NOTES_LEAD][PYOBJ_NOTES_LEAD_BYTES];
	for (uint32_t i = 0; i < lead; i++) {
		if (p->ranges[lead_from + i].len > PYOBJ_NOTES_LEAD_BYTES)
			return false;
		ranges[i] = (struct remote_range){.addr = p->ranges[lead_from + i].addr,
		                                  .len = p->ranges[lead_from + i].len, .buf = first[i]};
	}
	for (uint32_t i = 0; i < p->n; i++)
		ranges[lead + i] = (struct remote_range){.addr = p->ranges[i].addr, .len = p->ranges[i].len,
		                                         .buf = p->again + p->ranges[i].at};
	if (remote_read_batch(&t->mem, ranges, total, NULL) != 0)
		return false;
	for (uint32_t i = 0; i < total; i++) {
		uint32_t k = i < lead ? lead_from + i : i - lead;
		if (ranges[i].got != ranges[i].len || memcmp(p->bytes + p->ranges[k].at, ranges[i].buf, p->ranges[k].len) != 0)
			return false;
	}
	return true;
}

int pyobj_read_fixed(struct uw_target *t, raddr_t addr, void *buf, size_t len)
{
	struct pyobj_notes *notes = t->notes;
	t->notes = NULL;
	int rc = pyobj_read(t, addr, buf, len);
	t->notes = notes;
	return rc;
}

/* How much longer a free-threaded build's object header is than the usual 16 bytes. */
uint32_t pyobj_shift(const struct uw_target *t)
{
	return t->layout.object.ob_type - 8;
}

/* The pointer at addr; 0 when unreadable. */
raddr_t pyobj_pointer(struct uw_target *t, raddr_t addr)
{
	uint8_t b[8];
	return pyobj_read(t, addr, b, 8) == 0 ? load_u64(b, 0) : 0;
}

/* The object's type; 0 when unreadable. */
raddr_t pyobj_type_of(struct uw_target *t, raddr_t obj)
{
	return obj ? pyobj_pointer(t, obj + t->layout.object.ob_type) : 0;
}

bool pyobj_types(struct uw_target *t)
{
	struct pyobj_types *ty = &t->objtypes;
	if (ty->looked)
		return ty->dict && ty->long_;
	ty->looked = true;
	struct elf_symbol syms[4] = {{.name = "PyDict_Type"}, {.name = "PyLong_Type"},
	                             {.name = "PyTuple_Type"}, {.name = "PyContextVar_Type"}};
	raddr_t at[4];
	if (proc_runtime_symbols(t, syms, 4, at)) {
		ty->dict = at[0];
		ty->long_ = at[1];
		ty->tuple = at[2];
		ty->contextvar = at[3];
	}
	return ty->dict && ty->long_;
}

/* A keys object's layout, checked to be one the interpreter could have made.  0, or -1. */
int pyobj_keys_read(struct uw_target *t, const struct names_layout *N, raddr_t keys,
                           struct pyobj_keys *k)
{
	uint8_t b[64];
	uint32_t len = N->keys_indices;
	if (len > sizeof b || pyobj_read(t, keys, b, len) != 0)
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
		if (k->slots == 0 || k->slots > PYOBJ_MAX_SLOTS || (k->slots & (k->slots - 1)) != 0)
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

bool pyobj_str_is(struct uw_target *t, raddr_t addr, const char *name, bool prefix)
{
	const struct py_layout *P = &t->layout;
	size_t len = strlen(name);
	uint8_t b[160];
	if (!addr || P->unicode.ascii_size + len > sizeof b ||
	    pyobj_read(t, addr, b, P->unicode.ascii_size + len) != 0)
		return false;
	uint32_t state = load_u32(b, P->unicode.state);
	/* interned, kind:3 compact:1 ascii:1; free-threaded builds keep interned in a whole byte. */
	unsigned shift = P->free_threaded ? 8 : 2;
	bool compact_ascii = ((state >> (shift + 3)) & 3) == 3;
	uint64_t length = load_u64(b, P->unicode.length);
	return load_u64(b, P->object.ob_type) == t->unicode_type && compact_ascii &&
	       (prefix ? length >= len : length == len) && memcmp(b + P->unicode.ascii_size, name, len) == 0;
}

int pyobj_keys_find(struct uw_target *t, const struct pyobj_keys *k, const char *name, bool prefix,
                    raddr_t *known, uint64_t *index, raddr_t *value, raddr_t *slot)
{
	uint8_t chunk[PYOBJ_CHUNK * PYOBJ_ENTRY_MAX];
	uint64_t n = k->nentries < PYOBJ_MAX_ENTRIES ? k->nentries : PYOBJ_MAX_ENTRIES;
	if (k->entry_size > PYOBJ_ENTRY_MAX || k->key_at + 8 > k->entry_size || k->value_at + 8 > k->entry_size)
		return -1;
	for (uint64_t i = 0; i < n; i += PYOBJ_CHUNK) {
		uint64_t m = n - i < PYOBJ_CHUNK ? n - i : PYOBJ_CHUNK;
		if (pyobj_read(t, k->entries + i * k->entry_size, chunk, m * k->entry_size) != 0)
			return -1;
		for (uint64_t j = 0; j < m; j++) {
			const uint8_t *e = chunk + j * k->entry_size;
			raddr_t key = load_u64(e, k->key_at);
			if (!key || (key != *known && !pyobj_str_is(t, key, name, prefix)))
				continue;
			if (!prefix)
				*known = key;
			*index = i + j;
			*value = load_u64(e, k->value_at);
			*slot = k->entries + (i + j) * k->entry_size + k->value_at;
			return 1;
		}
	}
	return 0;
}

int pyobj_dict_get(struct uw_target *t, const struct names_layout *N, raddr_t dict, const char *name,
                   bool prefix, raddr_t *known, raddr_t *value, raddr_t *slot)
{
	uint32_t shift = pyobj_shift(t);
	uint8_t d[96];
	uint32_t len = N->dict_values + shift + 8;
	if (len > sizeof d || pyobj_read(t, dict, d, len) != 0 ||
	    !pyobj_is_a(t, N, load_u64(d, t->layout.object.ob_type), t->objtypes.dict, PYOBJ_TPFLAGS_DICT_SUBCLASS))
		return -1;
	raddr_t keys = load_u64(d, N->dict_keys + shift), values = load_u64(d, N->dict_values + shift);
	struct pyobj_keys k;
	uint64_t index;
	if (!keys || pyobj_keys_read(t, N, keys, &k) != 0)
		return -1;
	int found = pyobj_keys_find(t, &k, name, prefix, known, &index, value, slot);
	if (found != 1 || !values)
		return found;
	raddr_t array = values + (N->attrs == ATTRS_INLINE ? N->inline_values : 0);
	*slot = array + index * 8;
	return (*value = pyobj_pointer(t, *slot)) != 0;
}

bool pyobj_int_is(struct uw_target *t, const struct names_layout *N, raddr_t addr, uint64_t v)
{
	uint8_t be[8];
	if (pyobj_int_read(t, N, addr, be, sizeof be) != 1)
		return false;
	uint64_t got = 0;
	for (unsigned i = 0; i < 8; i++)
		got = got << 8 | be[i];
	return got == v;
}

int pyobj_int_read(struct uw_target *t, const struct names_layout *N, raddr_t addr, uint8_t *be, size_t width)
{
	uint32_t shift = pyobj_shift(t);
	uint8_t b[64];
	uint32_t digit = N->long_digit + shift;
	/* Digits that can hold width bytes: 30 bits each. */
	uint32_t most = (uint32_t)((width * 8 + 29) / 30);
	if (width > 16 || digit + most * 4 > sizeof b || pyobj_read(t, addr, b, digit + most * 4) != 0)
		return -1;
	raddr_t type = load_u64(b, t->layout.object.ob_type);
	if (type != t->objtypes.long_ && !pyobj_is_a(t, N, type, t->objtypes.long_, PYOBJ_TPFLAGS_LONG_SUBCLASS))
		return 0;
	uint64_t size = load_u64(b, N->long_size + shift), ndigits;
	if (N->long_tagged) {
		/* Sign bits 0: positive, 1: zero. */
		if ((size & 3) > 1)
			return 0;
		ndigits = (size & 3) == 1 ? 0 : size >> 3;
	} else {
		if ((int64_t)size < 0)
			return 0;
		ndigits = size;
	}
	if (ndigits > most)
		return 0;
	memset(be, 0, width);
	/* Each digit's 30 bits, least significant first, into the big-endian bytes. */
	for (uint64_t i = 0; i < ndigits; i++) {
		uint32_t d = load_u32(b, digit + (uint32_t)(i * 4));
		if (d >> 30)
			return 0;
		for (unsigned bit = 0; bit < 30; bit++) {
			if (!(d >> bit & 1))
				continue;
			uint64_t at = i * 30 + bit;
			if (at >= width * 8)
				return 0; /* wider than asked */
			be[width - 1 - at / 8] |= (uint8_t)(1u << (at % 8));
		}
	}
	return 1;
}

/* One signed index of a dict's index table. */
int pyobj_index_read(struct uw_target *t, const struct pyobj_keys *k, uint64_t slot, int64_t *ix)
{
	uint8_t b[8];
	if (pyobj_read(t, k->indices + slot * k->index_width, b, k->index_width) != 0)
		return -1;
	switch (k->index_width) {
	case 1: *ix = (int8_t)b[0]; break;
	case 2: { int16_t v; memcpy(&v, b, 2); *ix = v; break; }
	case 4: { int32_t v; memcpy(&v, b, 4); *ix = v; break; }
	default: { int64_t v; memcpy(&v, b, 8); *ix = v; break; }
	}
	return 0;
}


int pyobj_attrs(struct uw_target *t, const struct names_layout *N, raddr_t obj, raddr_t *dict,
                       raddr_t *values, raddr_t *keys, uint64_t *capacity)
{
	uint32_t shift = pyobj_shift(t);
	raddr_t type = pyobj_type_of(t, obj);
	/* The type's basicsize, flags and dictoffset, each read on its own: they lie far apart. */
	uint8_t basicsize[8], flags[8], dictoffset[8];
	if (!type || pyobj_read_fixed(t, type + N->type_basicsize + shift, basicsize, 8) != 0 ||
	    pyobj_read_fixed(t, type + N->type_flags + shift, flags, 8) != 0 ||
	    pyobj_read_fixed(t, type + N->type_dictoffset + shift, dictoffset, 8) != 0)
		return -1;
	int64_t offset = (int64_t)load_u64(dictoffset, 0);
	uint64_t tp_flags = load_u64(flags, 0), size = load_u64(basicsize, 0);
	*capacity = UINT64_MAX;
	if (N->attrs == ATTRS_DICT) {
		if (offset <= 0 || offset >= 4096)
			return -1;
		return (*dict = pyobj_pointer(t, obj + (uint64_t)offset)) ? 1 : -1;
	}
	if (!(tp_flags & PYOBJ_TPFLAGS_MANAGED_DICT))
		return -1;
	int32_t dict_ptr = t->layout.free_threaded ? N->dict_ptr_ft : N->dict_ptr;
	raddr_t managed = pyobj_pointer(t, obj + (raddr_t)(int64_t)dict_ptr);
	*values = 0;
	if (N->attrs == ATTRS_VALUES) {
		*values = pyobj_pointer(t, obj + (raddr_t)(int64_t)N->values_ptr);
	} else if (N->attrs == ATTRS_TAGGED) {
		if (managed & 1)
			*values = managed + 1;
	} else if (tp_flags & PYOBJ_TPFLAGS_INLINE_VALUES) {
		uint8_t hdr[8];
		if (size < 16 || size >= 4096 || pyobj_read(t, obj + size, hdr, sizeof hdr) != 0)
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
	*keys = pyobj_pointer(t, type + N->type_cached_keys + shift);
	return *keys ? 2 : -1;
}

