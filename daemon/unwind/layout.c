/*
 * Where 3.13 and newer keep what the unwinder reads.
 *
 * 3.13 and newer put _Py_DebugOffsets at the start of _PyRuntime.  Its header
 * is a cookie, PY_VERSION_HEX and a free-threaded flag; every field after that
 * is a uint64_t, so one version's layout is nothing but the order of its
 * fields.  That order is kept below as data, one list per version, and a
 * single decoder maps any of them into struct py_layout.  The tables of
 * 3.8-3.12 are in layout_static.c, those of asyncio and the exception
 * states in layout_tasks.c.
 *
 * Every `size` is the number of bytes to read so that every field we use is
 * covered (largest offset + width), not the size of the whole C struct.
 */
#include "layout.h"

#include <string.h>

#define ABSENT LAYOUT_ABSENT
#define NO_OWNER LAYOUT_OWNER_NONE

/* ---- _Py_DebugOffsets (3.13+) ------------------------------------------ */

/*
 * Every field any known version of _Py_DebugOffsets has, named
 * <sub-struct>_<field>.  Most are not used; they are named anyway so that the
 * per-version lists below read line by line against the C headers.
 */
enum dof {
	DO_RUNTIME_SIZE,
	DO_RUNTIME_FINALIZING,
	DO_RUNTIME_INTERPRETERS_HEAD,

	DO_INTERP_SIZE,
	DO_INTERP_ID,
	DO_INTERP_NEXT,
	DO_INTERP_THREADS_HEAD,
	DO_INTERP_THREADS_MAIN,
	DO_INTERP_GC,
	DO_INTERP_IMPORTS_MODULES,
	DO_INTERP_SYSDICT,
	DO_INTERP_BUILTINS,
	DO_INTERP_CEVAL_GIL,
	DO_INTERP_GIL_RUNTIME_STATE,
	DO_INTERP_GIL_RUNTIME_STATE_ENABLED,
	DO_INTERP_GIL_RUNTIME_STATE_LOCKED,
	DO_INTERP_GIL_RUNTIME_STATE_HOLDER,
	DO_INTERP_CODE_OBJECT_GENERATION,
	DO_INTERP_TLBC_GENERATION,

	DO_TSTATE_SIZE,
	DO_TSTATE_PREV,
	DO_TSTATE_NEXT,
	DO_TSTATE_INTERP,
	DO_TSTATE_CURRENT_FRAME,
	DO_TSTATE_BASE_FRAME,
	DO_TSTATE_LAST_PROFILED_FRAME,
	DO_TSTATE_LAST_PROFILED_FRAME_SEQ,
	DO_TSTATE_THREAD_ID,
	DO_TSTATE_NATIVE_THREAD_ID,
	DO_TSTATE_DATASTACK_CHUNK,
	DO_TSTATE_STATUS,
	DO_TSTATE_HOLDS_GIL,
	DO_TSTATE_GIL_REQUESTED,
	DO_TSTATE_CURRENT_EXCEPTION,
	DO_TSTATE_EXC_STATE,

	DO_ERR_STACKITEM_EXC_VALUE,

	DO_FRAME_SIZE,
	DO_FRAME_PREVIOUS,
	DO_FRAME_EXECUTABLE,
	DO_FRAME_INSTR_PTR,
	DO_FRAME_LOCALSPLUS,
	DO_FRAME_OWNER,
	DO_FRAME_STACKPOINTER,
	DO_FRAME_TLBC_INDEX,

	DO_CODE_SIZE,
	DO_CODE_FILENAME,
	DO_CODE_NAME,
	DO_CODE_QUALNAME,
	DO_CODE_LINETABLE,
	DO_CODE_FIRSTLINENO,
	DO_CODE_ARGCOUNT,
	DO_CODE_LOCALSPLUSNAMES,
	DO_CODE_LOCALSPLUSKINDS,
	DO_CODE_CO_CODE_ADAPTIVE,
	DO_CODE_CO_TLBC,

	DO_PYOBJECT_SIZE,
	DO_PYOBJECT_OB_TYPE,

	DO_TYPE_SIZE,
	DO_TYPE_TP_NAME,
	DO_TYPE_TP_REPR,
	DO_TYPE_TP_FLAGS,
	DO_TYPE_TP_BASICSIZE,
	DO_TYPE_TP_DICTOFFSET,

	DO_HEAP_TYPE_SIZE,
	DO_HEAP_TYPE_HT_CACHED_KEYS,

	DO_TUPLE_SIZE,
	DO_TUPLE_OB_ITEM,
	DO_TUPLE_OB_SIZE,

	DO_LIST_SIZE,
	DO_LIST_OB_ITEM,
	DO_LIST_OB_SIZE,

	DO_SET_SIZE,
	DO_SET_USED,
	DO_SET_TABLE,
	DO_SET_MASK,

	DO_DICT_SIZE,
	DO_DICT_MA_KEYS,
	DO_DICT_MA_VALUES,

	DO_FLOAT_SIZE,
	DO_FLOAT_OB_FVAL,

	DO_LONG_SIZE,
	DO_LONG_LV_TAG,
	DO_LONG_OB_DIGIT,

	DO_BYTES_SIZE,
	DO_BYTES_OB_SIZE,
	DO_BYTES_OB_SVAL,

	DO_UNICODE_SIZE,
	DO_UNICODE_STATE,
	DO_UNICODE_LENGTH,
	DO_UNICODE_ASCIIOBJECT_SIZE,
	DO_UNICODE_COMPACTUNICODEOBJECT_SIZE,

	DO_GC_SIZE,
	DO_GC_COLLECTING,
	DO_GC_FRAME,
	DO_GC_GENERATION_STATS_SIZE,
	DO_GC_GENERATION_STATS,

	DO_GEN_SIZE,
	DO_GEN_GI_NAME,
	DO_GEN_GI_IFRAME,
	DO_GEN_GI_FRAME_STATE,

	DO_LLIST_NEXT,
	DO_LLIST_PREV,

	DO_DEBUGGER_EVAL_BREAKER,
	DO_DEBUGGER_REMOTE_DEBUGGER_SUPPORT,
	DO_DEBUGGER_REMOTE_DEBUGGING_ENABLED,
	DO_DEBUGGER_PENDING_CALL,
	DO_DEBUGGER_SCRIPT_PATH,
	DO_DEBUGGER_SCRIPT_PATH_SIZE,

	DO_COUNT
};

/* cookie[8], version and free_threaded come before the first field. */
#define DO_HEADER_SIZE 24
#define DO_COOKIE "xdebugpy"

/* No offset or size we use is anywhere near this; remote bytes beyond it are
 * garbage, whatever the version field says. */
#define DO_SANE_CAP (1u << 20)

/* 3.13.0: struct _Py_DebugOffsets in Include/internal/pycore_runtime.h. */
static const uint8_t fields_313[] = {
	DO_RUNTIME_SIZE, DO_RUNTIME_FINALIZING, DO_RUNTIME_INTERPRETERS_HEAD,

	DO_INTERP_SIZE, DO_INTERP_ID, DO_INTERP_NEXT, DO_INTERP_THREADS_HEAD,
	DO_INTERP_GC, DO_INTERP_IMPORTS_MODULES, DO_INTERP_SYSDICT, DO_INTERP_BUILTINS,
	DO_INTERP_CEVAL_GIL, DO_INTERP_GIL_RUNTIME_STATE,
	DO_INTERP_GIL_RUNTIME_STATE_ENABLED, DO_INTERP_GIL_RUNTIME_STATE_LOCKED,
	DO_INTERP_GIL_RUNTIME_STATE_HOLDER,

	DO_TSTATE_SIZE, DO_TSTATE_PREV, DO_TSTATE_NEXT, DO_TSTATE_INTERP,
	DO_TSTATE_CURRENT_FRAME, DO_TSTATE_THREAD_ID, DO_TSTATE_NATIVE_THREAD_ID,
	DO_TSTATE_DATASTACK_CHUNK, DO_TSTATE_STATUS,

	DO_FRAME_SIZE, DO_FRAME_PREVIOUS, DO_FRAME_EXECUTABLE, DO_FRAME_INSTR_PTR,
	DO_FRAME_LOCALSPLUS, DO_FRAME_OWNER,

	DO_CODE_SIZE, DO_CODE_FILENAME, DO_CODE_NAME, DO_CODE_QUALNAME,
	DO_CODE_LINETABLE, DO_CODE_FIRSTLINENO, DO_CODE_ARGCOUNT,
	DO_CODE_LOCALSPLUSNAMES, DO_CODE_LOCALSPLUSKINDS, DO_CODE_CO_CODE_ADAPTIVE,

	DO_PYOBJECT_SIZE, DO_PYOBJECT_OB_TYPE,
	DO_TYPE_SIZE, DO_TYPE_TP_NAME, DO_TYPE_TP_REPR, DO_TYPE_TP_FLAGS,
	DO_TUPLE_SIZE, DO_TUPLE_OB_ITEM, DO_TUPLE_OB_SIZE,
	DO_LIST_SIZE, DO_LIST_OB_ITEM, DO_LIST_OB_SIZE,
	DO_DICT_SIZE, DO_DICT_MA_KEYS, DO_DICT_MA_VALUES,
	DO_FLOAT_SIZE, DO_FLOAT_OB_FVAL,
	DO_LONG_SIZE, DO_LONG_LV_TAG, DO_LONG_OB_DIGIT,
	DO_BYTES_SIZE, DO_BYTES_OB_SIZE, DO_BYTES_OB_SVAL,
	DO_UNICODE_SIZE, DO_UNICODE_STATE, DO_UNICODE_LENGTH,
	DO_UNICODE_ASCIIOBJECT_SIZE,
	DO_GC_SIZE, DO_GC_COLLECTING,
};

/* 3.14.7: Include/internal/pycore_debug_offsets.h (3.13 plus threads_main,
 * code_object_generation, tlbc_generation, stackpointer, tlbc_index, co_tlbc,
 * set_object, gen_object, llist_node, debugger_support). */
static const uint8_t fields_314[] = {
	DO_RUNTIME_SIZE, DO_RUNTIME_FINALIZING, DO_RUNTIME_INTERPRETERS_HEAD,

	DO_INTERP_SIZE, DO_INTERP_ID, DO_INTERP_NEXT, DO_INTERP_THREADS_HEAD,
	DO_INTERP_THREADS_MAIN, DO_INTERP_GC, DO_INTERP_IMPORTS_MODULES,
	DO_INTERP_SYSDICT, DO_INTERP_BUILTINS, DO_INTERP_CEVAL_GIL,
	DO_INTERP_GIL_RUNTIME_STATE, DO_INTERP_GIL_RUNTIME_STATE_ENABLED,
	DO_INTERP_GIL_RUNTIME_STATE_LOCKED, DO_INTERP_GIL_RUNTIME_STATE_HOLDER,
	DO_INTERP_CODE_OBJECT_GENERATION, DO_INTERP_TLBC_GENERATION,

	DO_TSTATE_SIZE, DO_TSTATE_PREV, DO_TSTATE_NEXT, DO_TSTATE_INTERP,
	DO_TSTATE_CURRENT_FRAME, DO_TSTATE_THREAD_ID, DO_TSTATE_NATIVE_THREAD_ID,
	DO_TSTATE_DATASTACK_CHUNK, DO_TSTATE_STATUS,

	DO_FRAME_SIZE, DO_FRAME_PREVIOUS, DO_FRAME_EXECUTABLE, DO_FRAME_INSTR_PTR,
	DO_FRAME_LOCALSPLUS, DO_FRAME_OWNER, DO_FRAME_STACKPOINTER,
	DO_FRAME_TLBC_INDEX,

	DO_CODE_SIZE, DO_CODE_FILENAME, DO_CODE_NAME, DO_CODE_QUALNAME,
	DO_CODE_LINETABLE, DO_CODE_FIRSTLINENO, DO_CODE_ARGCOUNT,
	DO_CODE_LOCALSPLUSNAMES, DO_CODE_LOCALSPLUSKINDS, DO_CODE_CO_CODE_ADAPTIVE,
	DO_CODE_CO_TLBC,

	DO_PYOBJECT_SIZE, DO_PYOBJECT_OB_TYPE,
	DO_TYPE_SIZE, DO_TYPE_TP_NAME, DO_TYPE_TP_REPR, DO_TYPE_TP_FLAGS,
	DO_TUPLE_SIZE, DO_TUPLE_OB_ITEM, DO_TUPLE_OB_SIZE,
	DO_LIST_SIZE, DO_LIST_OB_ITEM, DO_LIST_OB_SIZE,
	DO_SET_SIZE, DO_SET_USED, DO_SET_TABLE, DO_SET_MASK,
	DO_DICT_SIZE, DO_DICT_MA_KEYS, DO_DICT_MA_VALUES,
	DO_FLOAT_SIZE, DO_FLOAT_OB_FVAL,
	DO_LONG_SIZE, DO_LONG_LV_TAG, DO_LONG_OB_DIGIT,
	DO_BYTES_SIZE, DO_BYTES_OB_SIZE, DO_BYTES_OB_SVAL,
	DO_UNICODE_SIZE, DO_UNICODE_STATE, DO_UNICODE_LENGTH,
	DO_UNICODE_ASCIIOBJECT_SIZE,
	DO_GC_SIZE, DO_GC_COLLECTING,
	DO_GEN_SIZE, DO_GEN_GI_NAME, DO_GEN_GI_IFRAME, DO_GEN_GI_FRAME_STATE,
	DO_LLIST_NEXT, DO_LLIST_PREV,
	DO_DEBUGGER_EVAL_BREAKER, DO_DEBUGGER_REMOTE_DEBUGGER_SUPPORT,
	DO_DEBUGGER_REMOTE_DEBUGGING_ENABLED, DO_DEBUGGER_PENDING_CALL,
	DO_DEBUGGER_SCRIPT_PATH, DO_DEBUGGER_SCRIPT_PATH_SIZE,
};

/*
 * 3.15.0b4 and later: Include/internal/pycore_debug_offsets.h as found in
 * indexed copies of the 3.15-era header (no 3.15 tree was available to build).
 * Against 3.14 it adds base_frame, last_profiled_frame,
 * last_profiled_frame_seq, holds_gil, gil_requested, current_exception,
 * exc_state, err_stackitem, tp_basicsize, tp_dictoffset, heap_type_object,
 * compactunicodeobject_size and three gc fields.
 */
static const uint8_t fields_315[] = {
	DO_RUNTIME_SIZE, DO_RUNTIME_FINALIZING, DO_RUNTIME_INTERPRETERS_HEAD,

	DO_INTERP_SIZE, DO_INTERP_ID, DO_INTERP_NEXT, DO_INTERP_THREADS_HEAD,
	DO_INTERP_THREADS_MAIN, DO_INTERP_GC, DO_INTERP_IMPORTS_MODULES,
	DO_INTERP_SYSDICT, DO_INTERP_BUILTINS, DO_INTERP_CEVAL_GIL,
	DO_INTERP_GIL_RUNTIME_STATE, DO_INTERP_GIL_RUNTIME_STATE_ENABLED,
	DO_INTERP_GIL_RUNTIME_STATE_LOCKED, DO_INTERP_GIL_RUNTIME_STATE_HOLDER,
	DO_INTERP_CODE_OBJECT_GENERATION, DO_INTERP_TLBC_GENERATION,

	DO_TSTATE_SIZE, DO_TSTATE_PREV, DO_TSTATE_NEXT, DO_TSTATE_INTERP,
	DO_TSTATE_CURRENT_FRAME, DO_TSTATE_BASE_FRAME,
	DO_TSTATE_LAST_PROFILED_FRAME, DO_TSTATE_LAST_PROFILED_FRAME_SEQ,
	DO_TSTATE_THREAD_ID, DO_TSTATE_NATIVE_THREAD_ID, DO_TSTATE_DATASTACK_CHUNK,
	DO_TSTATE_STATUS, DO_TSTATE_HOLDS_GIL, DO_TSTATE_GIL_REQUESTED,
	DO_TSTATE_CURRENT_EXCEPTION, DO_TSTATE_EXC_STATE,

	DO_ERR_STACKITEM_EXC_VALUE,

	DO_FRAME_SIZE, DO_FRAME_PREVIOUS, DO_FRAME_EXECUTABLE, DO_FRAME_INSTR_PTR,
	DO_FRAME_LOCALSPLUS, DO_FRAME_OWNER, DO_FRAME_STACKPOINTER,
	DO_FRAME_TLBC_INDEX,

	DO_CODE_SIZE, DO_CODE_FILENAME, DO_CODE_NAME, DO_CODE_QUALNAME,
	DO_CODE_LINETABLE, DO_CODE_FIRSTLINENO, DO_CODE_ARGCOUNT,
	DO_CODE_LOCALSPLUSNAMES, DO_CODE_LOCALSPLUSKINDS, DO_CODE_CO_CODE_ADAPTIVE,
	DO_CODE_CO_TLBC,

	DO_PYOBJECT_SIZE, DO_PYOBJECT_OB_TYPE,
	DO_TYPE_SIZE, DO_TYPE_TP_NAME, DO_TYPE_TP_REPR, DO_TYPE_TP_FLAGS,
	DO_TYPE_TP_BASICSIZE, DO_TYPE_TP_DICTOFFSET,
	DO_HEAP_TYPE_SIZE, DO_HEAP_TYPE_HT_CACHED_KEYS,
	DO_TUPLE_SIZE, DO_TUPLE_OB_ITEM, DO_TUPLE_OB_SIZE,
	DO_LIST_SIZE, DO_LIST_OB_ITEM, DO_LIST_OB_SIZE,
	DO_SET_SIZE, DO_SET_USED, DO_SET_TABLE, DO_SET_MASK,
	DO_DICT_SIZE, DO_DICT_MA_KEYS, DO_DICT_MA_VALUES,
	DO_FLOAT_SIZE, DO_FLOAT_OB_FVAL,
	DO_LONG_SIZE, DO_LONG_LV_TAG, DO_LONG_OB_DIGIT,
	DO_BYTES_SIZE, DO_BYTES_OB_SIZE, DO_BYTES_OB_SVAL,
	DO_UNICODE_SIZE, DO_UNICODE_STATE, DO_UNICODE_LENGTH,
	DO_UNICODE_ASCIIOBJECT_SIZE, DO_UNICODE_COMPACTUNICODEOBJECT_SIZE,
	DO_GC_SIZE, DO_GC_COLLECTING, DO_GC_FRAME, DO_GC_GENERATION_STATS_SIZE,
	DO_GC_GENERATION_STATS,
	DO_GEN_SIZE, DO_GEN_GI_NAME, DO_GEN_GI_IFRAME, DO_GEN_GI_FRAME_STATE,
	DO_LLIST_NEXT, DO_LLIST_PREV,
	DO_DEBUGGER_EVAL_BREAKER, DO_DEBUGGER_REMOTE_DEBUGGER_SUPPORT,
	DO_DEBUGGER_REMOTE_DEBUGGING_ENABLED, DO_DEBUGGER_PENDING_CALL,
	DO_DEBUGGER_SCRIPT_PATH, DO_DEBUGGER_SCRIPT_PATH_SIZE,
};

/*
 * 3.15.0b1-b3: the b4+ list without last_profiled_frame_seq.  Reports around
 * the 3.15 betas say b4 inserted that one field (shifting everything after it
 * by 8 bytes) and that b1, b3 and b4 have the same 21 sub-structs; an indexed
 * mid-cycle copy of the header shows base_frame and last_profiled_frame
 * without the _seq field.  None of this was checked against a real beta.
 */
static const uint8_t fields_315_pre_b4[] = {
	DO_RUNTIME_SIZE, DO_RUNTIME_FINALIZING, DO_RUNTIME_INTERPRETERS_HEAD,

	DO_INTERP_SIZE, DO_INTERP_ID, DO_INTERP_NEXT, DO_INTERP_THREADS_HEAD,
	DO_INTERP_THREADS_MAIN, DO_INTERP_GC, DO_INTERP_IMPORTS_MODULES,
	DO_INTERP_SYSDICT, DO_INTERP_BUILTINS, DO_INTERP_CEVAL_GIL,
	DO_INTERP_GIL_RUNTIME_STATE, DO_INTERP_GIL_RUNTIME_STATE_ENABLED,
	DO_INTERP_GIL_RUNTIME_STATE_LOCKED, DO_INTERP_GIL_RUNTIME_STATE_HOLDER,
	DO_INTERP_CODE_OBJECT_GENERATION, DO_INTERP_TLBC_GENERATION,

	DO_TSTATE_SIZE, DO_TSTATE_PREV, DO_TSTATE_NEXT, DO_TSTATE_INTERP,
	DO_TSTATE_CURRENT_FRAME, DO_TSTATE_BASE_FRAME,
	DO_TSTATE_LAST_PROFILED_FRAME,
	DO_TSTATE_THREAD_ID, DO_TSTATE_NATIVE_THREAD_ID, DO_TSTATE_DATASTACK_CHUNK,
	DO_TSTATE_STATUS, DO_TSTATE_HOLDS_GIL, DO_TSTATE_GIL_REQUESTED,
	DO_TSTATE_CURRENT_EXCEPTION, DO_TSTATE_EXC_STATE,

	DO_ERR_STACKITEM_EXC_VALUE,

	DO_FRAME_SIZE, DO_FRAME_PREVIOUS, DO_FRAME_EXECUTABLE, DO_FRAME_INSTR_PTR,
	DO_FRAME_LOCALSPLUS, DO_FRAME_OWNER, DO_FRAME_STACKPOINTER,
	DO_FRAME_TLBC_INDEX,

	DO_CODE_SIZE, DO_CODE_FILENAME, DO_CODE_NAME, DO_CODE_QUALNAME,
	DO_CODE_LINETABLE, DO_CODE_FIRSTLINENO, DO_CODE_ARGCOUNT,
	DO_CODE_LOCALSPLUSNAMES, DO_CODE_LOCALSPLUSKINDS, DO_CODE_CO_CODE_ADAPTIVE,
	DO_CODE_CO_TLBC,

	DO_PYOBJECT_SIZE, DO_PYOBJECT_OB_TYPE,
	DO_TYPE_SIZE, DO_TYPE_TP_NAME, DO_TYPE_TP_REPR, DO_TYPE_TP_FLAGS,
	DO_TYPE_TP_BASICSIZE, DO_TYPE_TP_DICTOFFSET,
	DO_HEAP_TYPE_SIZE, DO_HEAP_TYPE_HT_CACHED_KEYS,
	DO_TUPLE_SIZE, DO_TUPLE_OB_ITEM, DO_TUPLE_OB_SIZE,
	DO_LIST_SIZE, DO_LIST_OB_ITEM, DO_LIST_OB_SIZE,
	DO_SET_SIZE, DO_SET_USED, DO_SET_TABLE, DO_SET_MASK,
	DO_DICT_SIZE, DO_DICT_MA_KEYS, DO_DICT_MA_VALUES,
	DO_FLOAT_SIZE, DO_FLOAT_OB_FVAL,
	DO_LONG_SIZE, DO_LONG_LV_TAG, DO_LONG_OB_DIGIT,
	DO_BYTES_SIZE, DO_BYTES_OB_SIZE, DO_BYTES_OB_SVAL,
	DO_UNICODE_SIZE, DO_UNICODE_STATE, DO_UNICODE_LENGTH,
	DO_UNICODE_ASCIIOBJECT_SIZE, DO_UNICODE_COMPACTUNICODEOBJECT_SIZE,
	DO_GC_SIZE, DO_GC_COLLECTING, DO_GC_FRAME, DO_GC_GENERATION_STATS_SIZE,
	DO_GC_GENERATION_STATS,
	DO_GEN_SIZE, DO_GEN_GI_NAME, DO_GEN_GI_IFRAME, DO_GEN_GI_FRAME_STATE,
	DO_LLIST_NEXT, DO_LLIST_PREV,
	DO_DEBUGGER_EVAL_BREAKER, DO_DEBUGGER_REMOTE_DEBUGGER_SUPPORT,
	DO_DEBUGGER_REMOTE_DEBUGGING_ENABLED, DO_DEBUGGER_PENDING_CALL,
	DO_DEBUGGER_SCRIPT_PATH, DO_DEBUGGER_SCRIPT_PATH_SIZE,
};

/* One _Py_DebugOffsets layout, with what the target cannot tell us. */
struct do_version {
	uint64_t first, last; /* PY_VERSION_HEX range, inclusive */
	unsigned minor;
	const uint8_t *fields;
	size_t nfields;
	/* enum _frameowner values; NO_OWNER where the version has none. */
	uint8_t owner_generator, owner_cstack, owner_interpreter;
	/* Py_TAG_BITS of _PyStackRef f_executable, default and free-threaded;
	 * 0 while f_executable is a plain PyObject *. */
	uint8_t tag_bits, tag_bits_ft;
	/* sizeof(PyCompactUnicodeObject) - sizeof(PyASCIIObject), used when the
	 * version does not publish compactunicodeobject_size. */
	uint8_t compact_extra;
};

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Only the field lists of final releases were read for 3.13 and 3.14, and the
 * struct is not frozen before a final release (3.15's betas changed it), so
 * their pre-releases are refused; patch releases keep the final list.  3.15
 * has no final release to read yet: its betas are described from b1, split
 * where b4 changed the thread_state list, and its alphas are refused.
 */
static const struct do_version do_versions[] = {
	{
		.first = 0x030D00F0, .last = 0x030DFFFF, .minor = 13,
		.fields = fields_313, .nfields = NFIELDS(fields_313),
		/* Include/internal/pycore_frame.h (3.13): THREAD 0, GENERATOR 1,
		 * FRAME_OBJECT 2, CSTACK 3. */
		.owner_generator = 1, .owner_cstack = 3, .owner_interpreter = NO_OWNER,
		/* f_executable is a PyObject * in 3.13. */
		.tag_bits = 0, .tag_bits_ft = 0,
		/* Include/cpython/unicodeobject.h: utf8_length and utf8. */
		.compact_extra = 16,
	},
	{
		.first = 0x030E00F0, .last = 0x030EFFFF, .minor = 14,
		.fields = fields_314, .nfields = NFIELDS(fields_314),
		/* Include/internal/pycore_interpframe_structs.h (3.14): THREAD 0,
		 * GENERATOR 1, FRAME_OBJECT 2, INTERPRETER 3, CSTACK 4.  The shim
		 * frame each C-level evaluation pushes is INTERPRETER; 3.14.7's
		 * sources define CSTACK but never assign it. */
		.owner_generator = 1, .owner_cstack = 4, .owner_interpreter = 3,
		/* Include/internal/pycore_stackref.h (3.14): Py_TAG_BITS is 3, and
		 * 1 under Py_GIL_DISABLED. */
		.tag_bits = 3, .tag_bits_ft = 1,
		.compact_extra = 16,
	},
	{
		.first = 0x030F00B1, .last = 0x030F00B3, .minor = 15,
		.fields = fields_315_pre_b4, .nfields = NFIELDS(fields_315_pre_b4),
		/* Include/internal/pycore_interpframe_structs.h (3.15 era):
		 * FRAME_OWNED_BY_CSTACK is gone, INTERPRETER stays 3. */
		.owner_generator = 1, .owner_cstack = NO_OWNER, .owner_interpreter = 3,
		/* Include/internal/pycore_stackref.h (3.15 era): Py_TAG_BITS is 3
		 * in every build. */
		.tag_bits = 3, .tag_bits_ft = 3,
		.compact_extra = 16,
	},
	{
		.first = 0x030F00B4, .last = 0x030FFFFF, .minor = 15,
		.fields = fields_315, .nfields = NFIELDS(fields_315),
		.owner_generator = 1, .owner_cstack = NO_OWNER, .owner_interpreter = 3,
		.tag_bits = 3, .tag_bits_ft = 3,
		.compact_extra = 16,
	},
};

static const struct do_version *do_version_for(uint64_t version_hex)
{
	for (size_t i = 0; i < NFIELDS(do_versions); i++) {
		const struct do_version *v = &do_versions[i];
		if (version_hex >= v->first && version_hex <= v->last &&
		    ((version_hex >> 24) & 0xff) == 3 && ((version_hex >> 16) & 0xff) == v->minor)
			return v;
	}
	return NULL;
}

static size_t do_size(const struct do_version *v)
{
	return DO_HEADER_SIZE + 8 * v->nfields;
}

size_t layout_debug_offsets_size(uint64_t version_hex)
{
	const struct do_version *v = do_version_for(version_hex);
	return v ? do_size(v) : 0;
}

/* The target is x86-64 like us, so the u64 fields are little-endian. */
static uint64_t read_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* The values of one target's table, and whether it is still believable. */
struct do_values {
	uint64_t v[DO_COUNT];
	bool have[DO_COUNT];
	bool bad;
};

static uint64_t get(struct do_values *d, enum dof f)
{
	if (!d->have[f]) {
		d->bad = true;
		return 0;
	}
	return d->v[f];
}

/* A whole-struct size published by the target: must be sane. */
static uint64_t get_size(struct do_values *d, enum dof f)
{
	uint64_t size = get(d, f);
	if (size == 0 || size > DO_SANE_CAP)
		d->bad = true;
	return size;
}

/*
 * A field of `width` bytes at the published offset `f`, inside a struct of
 * `size` bytes; widens *cover so a read of *cover bytes includes it.
 */
static uint32_t do_field(struct do_values *d, enum dof f, unsigned width, uint64_t size,
                         uint32_t *cover)
{
	uint64_t off = get(d, f);
	if (off > DO_SANE_CAP || off + width > size) {
		d->bad = true;
		return 0;
	}
	if (cover && off + width > *cover)
		*cover = (uint32_t)(off + width);
	return (uint32_t)off;
}

int layout_from_debug_offsets(const uint8_t *raw, size_t len, struct py_layout *out)
{
	if (!raw || !out || len < DO_HEADER_SIZE || memcmp(raw, DO_COOKIE, 8) != 0)
		return -1;
	const struct do_version *ver = do_version_for(read_u64(raw + 8));
	uint64_t free_threaded = read_u64(raw + 16);
	if (!ver || len < do_size(ver) || free_threaded > 1)
		return -1;

	struct do_values d;
	memset(&d, 0, sizeof d);
	for (size_t i = 0; i < ver->nfields; i++) {
		enum dof f = (enum dof)ver->fields[i];
		d.v[f] = read_u64(raw + DO_HEADER_SIZE + 8 * i);
		d.have[f] = true;
	}

	struct py_layout l;
	memset(&l, 0, sizeof l);
	l.minor = ver->minor;
	l.frame_model = FRAME_MODEL_INTERP;
	l.line_model = LINE_MODEL_LOCATIONS;
	l.lasti_model = LASTI_INSTR_PTR;
	l.free_threaded = free_threaded != 0;

	/* _PyRuntimeState: from 3.12 the GIL and GC state are per interpreter. */
	uint64_t rt_size = get_size(&d, DO_RUNTIME_SIZE);
	l.runtime.interpreters_head = do_field(&d, DO_RUNTIME_INTERPRETERS_HEAD, 8, rt_size,
	                                    &l.runtime.size);
	l.runtime.gil = ABSENT;
	l.runtime.gc_collecting = ABSENT;

	/* PyInterpreterState */
	uint64_t is_size = get_size(&d, DO_INTERP_SIZE);
	l.interp.next = do_field(&d, DO_INTERP_NEXT, 8, is_size, &l.interp.size);
	l.interp.id = do_field(&d, DO_INTERP_ID, 8, is_size, &l.interp.size);
	l.interp.threads_head = do_field(&d, DO_INTERP_THREADS_HEAD, 8, is_size, &l.interp.size);
	l.interp.gil_ptr = do_field(&d, DO_INTERP_CEVAL_GIL, 8, is_size, &l.interp.size);
	l.interp.modules = do_field(&d, DO_INTERP_IMPORTS_MODULES, 8, is_size, NULL);

	/* interp->gc is an embedded struct _gc_runtime_state whose own offsets
	 * are published separately. */
	uint64_t gc_size = get_size(&d, DO_GC_SIZE);
	uint32_t gc = do_field(&d, DO_INTERP_GC, 0, is_size, NULL);
	if (gc + gc_size > is_size)
		d.bad = true;
	uint32_t gc_collecting = do_field(&d, DO_GC_COLLECTING, 4, gc_size, NULL);
	l.interp.gc_collecting = gc + gc_collecting;
	if (!d.bad && l.interp.gc_collecting + 4 > l.interp.size)
		l.interp.size = l.interp.gc_collecting + 4;

	/* The GIL is published as absolute offsets of interp->_gil and of two of
	 * its fields; the walker reaches it through interp->ceval.gil, which may
	 * point at another interpreter's, so it needs them relative. */
	uint32_t gil = do_field(&d, DO_INTERP_GIL_RUNTIME_STATE, 0, is_size, NULL);
	uint32_t holder = do_field(&d, DO_INTERP_GIL_RUNTIME_STATE_HOLDER, 8, is_size, NULL);
	uint32_t locked = do_field(&d, DO_INTERP_GIL_RUNTIME_STATE_LOCKED, 4, is_size, NULL);
	if (holder < gil || locked < gil)
		d.bad = true;
	l.gil.last_holder = holder - gil;
	l.gil.locked = locked - gil;

	/* PyThreadState: frames hang off it directly again from 3.13. */
	uint64_t ts_size = get_size(&d, DO_TSTATE_SIZE);
	l.tstate.next = do_field(&d, DO_TSTATE_NEXT, 8, ts_size, &l.tstate.size);
	l.tstate.interp = do_field(&d, DO_TSTATE_INTERP, 8, ts_size, &l.tstate.size);
	l.tstate.frame = do_field(&d, DO_TSTATE_CURRENT_FRAME, 8, ts_size, &l.tstate.size);
	l.tstate.cframe = ABSENT;
	l.tstate.cframe_current_frame = ABSENT;
	l.tstate.thread_id = do_field(&d, DO_TSTATE_THREAD_ID, 8, ts_size, &l.tstate.size);
	l.tstate.native_thread_id = do_field(&d, DO_TSTATE_NATIVE_THREAD_ID, 8, ts_size,
	                                  &l.tstate.size);
	l.tstate.datastack_chunk = do_field(&d, DO_TSTATE_DATASTACK_CHUNK, 8, ts_size,
	                                 &l.tstate.size);
	/* Only with its sequence is the marker usable: before 3.15.0b4 it is left alone. */
	if (d.have[DO_TSTATE_LAST_PROFILED_FRAME] && d.have[DO_TSTATE_LAST_PROFILED_FRAME_SEQ]) {
		l.tstate.marker = true;
		l.tstate.marker_frame = do_field(&d, DO_TSTATE_LAST_PROFILED_FRAME, 8, ts_size,
		                              &l.tstate.size);
		l.tstate.marker_seq = do_field(&d, DO_TSTATE_LAST_PROFILED_FRAME_SEQ, 8, ts_size,
		                            &l.tstate.size);
	}

	/* _PyInterpreterFrame */
	uint64_t fr_size = get_size(&d, DO_FRAME_SIZE);
	l.frame.back = do_field(&d, DO_FRAME_PREVIOUS, 8, fr_size, &l.frame.size);
	l.frame.code = do_field(&d, DO_FRAME_EXECUTABLE, 8, fr_size, &l.frame.size);
	l.frame.instr_ptr = do_field(&d, DO_FRAME_INSTR_PTR, 8, fr_size, &l.frame.size);
	l.frame.owner = do_field(&d, DO_FRAME_OWNER, 1, fr_size, &l.frame.size);
	l.frame.lasti = ABSENT;
	l.frame.lineno = ABSENT;
	l.frame.trace = ABSENT;
	l.frame.is_entry = ABSENT;
	l.frame.gen = ABSENT;
	/*
	 * 3.13 still has 3.12's int stacktop right after instr_ptr (the debug
	 * offsets do not list it); 3.14 replaced it with a pointer that only
	 * debug builds clear.
	 */
	l.frame.stacktop = ABSENT;
	if (ver->minor == 13 && l.frame.instr_ptr == 56 && fr_size >= 68) {
		l.frame.stacktop = 64;
		if (l.frame.size < 68)
			l.frame.size = 68;
	}
	l.frame.owner_generator = ver->owner_generator;
	l.frame.owner_cstack = ver->owner_cstack;
	l.frame.owner_interpreter = ver->owner_interpreter;
	l.frame.code_tag_mask = l.free_threaded ? ver->tag_bits_ft : ver->tag_bits;

	/* PyCodeObject; the bytecode start is an address, not a field to read. */
	uint64_t co_size = get_size(&d, DO_CODE_SIZE);
	l.code.filename = do_field(&d, DO_CODE_FILENAME, 8, co_size, &l.code.size);
	l.code.name = do_field(&d, DO_CODE_NAME, 8, co_size, &l.code.size);
	l.code.qualname = do_field(&d, DO_CODE_QUALNAME, 8, co_size, &l.code.size);
	l.code.linetable = do_field(&d, DO_CODE_LINETABLE, 8, co_size, &l.code.size);
	l.code.firstlineno = do_field(&d, DO_CODE_FIRSTLINENO, 4, co_size, &l.code.size);
	l.code.code_adaptive = do_field(&d, DO_CODE_CO_CODE_ADAPTIVE, 1, co_size, NULL);
	l.code.framesize = l.code.nlocalsplus = l.code.stacksize = ABSENT; /* frames_being_called: 3.11-3.12 */
	/*
	 * Free-threaded builds run a copy of the bytecode per thread: the
	 * frame's tlbc_index picks it from the code's co_tlbc.  Other builds
	 * list both at offset 0, which means absent.
	 */
	l.frame.tlbc_index = l.code.tlbc = ABSENT;
	if (d.have[DO_GEN_GI_IFRAME] && d.have[DO_GEN_GI_FRAME_STATE] && d.have[DO_FRAME_LOCALSPLUS] &&
	    d.have[DO_FRAME_STACKPOINTER]) {
		uint64_t gen_size = get_size(&d, DO_GEN_SIZE);
		l.coro.iframe = do_field(&d, DO_GEN_GI_IFRAME, 8, gen_size, NULL);
		l.coro.frame_state = do_field(&d, DO_GEN_GI_FRAME_STATE, 1, gen_size, NULL);
		l.coro.localsplus = do_field(&d, DO_FRAME_LOCALSPLUS, 8, fr_size, NULL);
		l.coro.stackpointer = do_field(&d, DO_FRAME_STACKPOINTER, 8, fr_size, NULL);
		l.coro.known = true;
	}
	if (l.free_threaded && d.have[DO_FRAME_TLBC_INDEX] && d.have[DO_CODE_CO_TLBC] &&
	    get(&d, DO_FRAME_TLBC_INDEX) && get(&d, DO_CODE_CO_TLBC)) {
		l.frame.tlbc_index = do_field(&d, DO_FRAME_TLBC_INDEX, 4, fr_size, &l.frame.size);
		l.code.tlbc = do_field(&d, DO_CODE_CO_TLBC, 8, co_size, &l.code.size);
	}

	uint64_t ob_size = get_size(&d, DO_PYOBJECT_SIZE);
	l.object.ob_type = do_field(&d, DO_PYOBJECT_OB_TYPE, 8, ob_size, NULL);

	/* Unicode: length and state sit in the PyASCIIObject header, whose size
	 * is where compact ASCII data begins. */
	uint64_t un_size = get_size(&d, DO_UNICODE_SIZE);
	uint64_t ascii_size = get(&d, DO_UNICODE_ASCIIOBJECT_SIZE);
	uint64_t compact_size = d.have[DO_UNICODE_COMPACTUNICODEOBJECT_SIZE]
	                                ? d.v[DO_UNICODE_COMPACTUNICODEOBJECT_SIZE]
	                                : ascii_size + ver->compact_extra;
	/* PyUnicodeObject's data.any pointer directly follows the compact header
	 * (Include/cpython/unicodeobject.h). */
	uint64_t legacy_data = compact_size;
	if (ascii_size == 0 || ascii_size > compact_size || compact_size > un_size ||
	    un_size - legacy_data < 8)
		d.bad = true;
	l.unicode.length = do_field(&d, DO_UNICODE_LENGTH, 8, ascii_size, NULL);
	l.unicode.state = do_field(&d, DO_UNICODE_STATE, 4, ascii_size, NULL);
	l.unicode.ascii_size = (uint32_t)ascii_size;
	l.unicode.compact_size = (uint32_t)compact_size;
	l.unicode.legacy_data = (uint32_t)legacy_data;

	uint64_t by_size = get_size(&d, DO_BYTES_SIZE);
	l.bytes.ob_size = do_field(&d, DO_BYTES_OB_SIZE, 8, by_size, NULL);
	l.bytes.ob_sval = do_field(&d, DO_BYTES_OB_SVAL, 1, by_size, NULL);

	if (d.bad)
		return -1;
	*out = l;
	return 0;
}

