/*
 * Where each CPython keeps what a thread's Python name and its request
 * context are reached through: dicts and their keys, modules, types,
 * instance attributes, ints, tuples and the thread state's context.
 *
 * Measured with offsetof() against the headers of 3.8.18, 3.9.18, 3.10.13,
 * 3.11.7, 3.12.1, 3.13.0 and 3.15.2 (x86-64, default builds), and of
 * 3.14.7 built free-threaded (its header 16 bytes longer, as every object
 * field here); the ways attributes are kept are those of each version's
 * Include/internal/pycore_object.h and pycore_dict.h.
 */
#include "layout.h"

#include <stddef.h>

#define ABSENT LAYOUT_ABSENT

/* Fields every version keeps at the same place; str-keyed entries only from 3.11. */
#define NAMES_COMMON                                                                          \
	.entry_size = 24, .entry_hash = 0, .entry_key = 8, .entry_value = 16,                     \
	.str_entry_size = 16, .str_entry_key = 0, .str_entry_value = 8,                           \
	.module_dict = 16, .dict_keys = 32, .dict_values = 40, .type_basicsize = 32,              \
	.type_flags = 168, .type_dictoffset = 288, .long_size = 16, .long_digit = 24,             \
	.var_size = 16

/* 3.8-3.10: dk_refcnt, dk_size, dk_lookup, dk_usable, dk_nentries, then the indices. */
#define NAMES_KEYS_SIZED                                                                      \
	.keys_log2 = false, .keys_size = 8, .keys_log2_index_bytes = ABSENT,                    \
	.keys_kind = ABSENT, .keys_nentries = 32, .keys_indices = 40

/* 3.11+: dk_refcnt, dk_log2_size, dk_log2_index_bytes, dk_kind, dk_version, dk_usable, dk_nentries. */
#define NAMES_KEYS_LOG2                                                                       \
	.keys_log2 = true, .keys_size = 8, .keys_log2_index_bytes = 9, .keys_kind = 10,          \
	.keys_nentries = 24, .keys_indices = 32

/* 3.13+: a managed dict's pointer three words before the object (one in free-threaded builds). */
#define NAMES_INLINE                                                                          \
	.attrs = ATTRS_INLINE, .dict_ptr = -24, .dict_ptr_ft = -8, .values_ptr = 0,              \
	.inline_capacity = 0, .inline_valid = 3, .inline_values = 8, .long_tagged = true

static const struct names_layout names_layouts[] = {
	{.minor = 8, .ts_context = 240, .tuple_items = 24, NAMES_COMMON, NAMES_KEYS_SIZED, .type_cached_keys = 872, .attrs = ATTRS_DICT,
	 .long_tagged = false},
	{.minor = 9, .ts_context = 240, .tuple_items = 24, NAMES_COMMON, NAMES_KEYS_SIZED, .type_cached_keys = 864, .attrs = ATTRS_DICT,
	 .long_tagged = false},
	{.minor = 10, .ts_context = 240, .tuple_items = 24, NAMES_COMMON, NAMES_KEYS_SIZED, .type_cached_keys = 872, .attrs = ATTRS_DICT,
	 .long_tagged = false},
	{.minor = 11, .ts_context = 224, .tuple_items = 24, NAMES_COMMON, NAMES_KEYS_LOG2, .type_cached_keys = 872, .attrs = ATTRS_VALUES,
	 .dict_ptr = -24, .dict_ptr_ft = -24, .values_ptr = -32, .long_tagged = false},
	{.minor = 12, .ts_context = 208, .tuple_items = 24, NAMES_COMMON, NAMES_KEYS_LOG2, .type_cached_keys = 880, .attrs = ATTRS_TAGGED,
	 .dict_ptr = -24, .dict_ptr_ft = -24, .values_ptr = 0, .long_tagged = true},
	{.minor = 13, .ts_context = 208, .tuple_items = 24, NAMES_COMMON, NAMES_KEYS_LOG2, .type_cached_keys = 880, NAMES_INLINE},
	{.minor = 14, .ts_context = 208, .tuple_items = 32, NAMES_COMMON, NAMES_KEYS_LOG2, .type_cached_keys = 880, NAMES_INLINE},
	{.minor = 15, .ts_context = 232, .tuple_items = 32, NAMES_COMMON, NAMES_KEYS_LOG2, .type_cached_keys = 888, NAMES_INLINE},
};

const struct names_layout *layout_names_for_minor(unsigned minor)
{
	for (size_t i = 0; i < sizeof names_layouts / sizeof names_layouts[0]; i++)
		if (names_layouts[i].minor == minor)
			return &names_layouts[i];
	return NULL;
}
