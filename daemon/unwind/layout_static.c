/*
 * Where 3.8-3.12 keep what the unwinder reads.
 *
 * 3.8-3.12 publish nothing about their own layout, so each minor version is a
 * static table.  The numbers were measured with offsetof()/sizeof() against
 * the internal headers of 3.8.18, 3.9.18, 3.10.13, 3.11.7 and 3.12.1 (x86-64,
 * default GIL builds), on the premise that CPython keeps these structs stable
 * across the patch releases of a minor version.
 *
 * Every `size` is the number of bytes to read so that every field we use is
 * covered (largest offset + width), not the size of the whole C struct.
 */
#include "layout.h"

#include <string.h>

#define ABSENT LAYOUT_ABSENT
#define NO_OWNER LAYOUT_OWNER_NONE

/*
 * Unicode `state`: in every default build from 3.8 to 3.14 the low bits of
 * the 32-bit word are interned:2 kind:3 compact:1 ascii:1 (then ready:1 up to
 * 3.11, statically_allocated:1 from 3.12).  Checked for each of 3.8-3.14 by
 * setting each bit field in a zeroed PyASCIIObject and reading the word back:
 * masks 0x3, 0x1c, 0x20, 0x40.  3.15 is assumed to keep them (not measured).
 * Free-threaded 3.14 builds differ: `interned` is a whole unsigned char there,
 * which moves kind to bit 8 (Include/cpython/unicodeobject.h under
 * Py_GIL_DISABLED), so these bit positions do not hold for them.
 *
 * Non-compact ("legacy") strings exist in every version: instances of str
 * subclasses keep their characters in a separate buffer at data.any.
 */

static const struct py_layout layout_38 = {
	.minor = 8,
	.frame_model = FRAME_MODEL_OBJECT,
	.line_model = LINE_MODEL_LNOTAB,
	.lasti_model = LASTI_BYTES,
	/* The GIL and the GC state are process-wide in 3.8: both live in
	 * _PyRuntime, so its size reaches to the GIL's locked flag. */
	.runtime = {.size = 1172, .interpreters_head = 32, .gil = 1152, .gc_collecting = 544},
	.interp = {.size = 24, .next = 0, .id = 16, .threads_head = 8,
	           .gc_collecting = ABSENT, .gil_ptr = ABSENT, .modules = 56},
	.gil = {.last_holder = 8, .locked = 16},
	.tstate = {.size = 184, .next = 8, .interp = 16, .frame = 24, .cframe = ABSENT,
	           .cframe_current_frame = ABSENT, .thread_id = 176,
	           .native_thread_id = ABSENT, .datastack_chunk = ABSENT},
	.frame = {.size = 112, .back = 24, .code = 32, .lasti = 104, .lineno = 108,
	          .trace = 80, .gen = 96, .instr_ptr = ABSENT, .owner = ABSENT, .is_entry = ABSENT,
	          .stacktop = ABSENT, .tlbc_index = ABSENT,
	          .owner_generator = NO_OWNER, .owner_cstack = NO_OWNER,
	          .owner_interpreter = NO_OWNER, .code_tag_mask = 0},
	.code = {.size = 128, .filename = 104, .name = 112, .qualname = ABSENT,
	         .linetable = 120, .firstlineno = 40, .code_adaptive = ABSENT, .tlbc = ABSENT,
	         .framesize = ABSENT, .nlocalsplus = ABSENT, .stacksize = ABSENT},
	.object = {.ob_type = 8},
	/* 3.8-3.11 still carry the wstr fields, hence the larger headers. */
	.unicode = {.length = 16, .state = 32, .ascii_size = 48, .compact_size = 72,
	            .legacy_data = 72},
	.bytes = {.ob_size = 16, .ob_sval = 32},
};

static const struct py_layout layout_39 = {
	.minor = 9,
	.frame_model = FRAME_MODEL_OBJECT,
	.line_model = LINE_MODEL_LNOTAB,
	.lasti_model = LASTI_BYTES,
	/* GC state moved into the interpreter; the GIL stayed in _PyRuntime. */
	.runtime = {.size = 372, .interpreters_head = 32, .gil = 352, .gc_collecting = ABSENT},
	.interp = {.size = 820, .next = 0, .id = 24, .threads_head = 8,
	           .gc_collecting = 816, .gil_ptr = ABSENT, .modules = 856},
	.gil = {.last_holder = 8, .locked = 16},
	.tstate = {.size = 184, .next = 8, .interp = 16, .frame = 24, .cframe = ABSENT,
	           .cframe_current_frame = ABSENT, .thread_id = 176,
	           .native_thread_id = ABSENT, .datastack_chunk = ABSENT},
	.frame = {.size = 112, .back = 24, .code = 32, .lasti = 104, .lineno = 108,
	          .trace = 80, .gen = 96, .instr_ptr = ABSENT, .owner = ABSENT, .is_entry = ABSENT,
	          .stacktop = ABSENT, .tlbc_index = ABSENT,
	          .owner_generator = NO_OWNER, .owner_cstack = NO_OWNER,
	          .owner_interpreter = NO_OWNER, .code_tag_mask = 0},
	.code = {.size = 128, .filename = 104, .name = 112, .qualname = ABSENT,
	         .linetable = 120, .firstlineno = 40, .code_adaptive = ABSENT, .tlbc = ABSENT,
	         .framesize = ABSENT, .nlocalsplus = ABSENT, .stacksize = ABSENT},
	.object = {.ob_type = 8},
	.unicode = {.length = 16, .state = 32, .ascii_size = 48, .compact_size = 72,
	            .legacy_data = 72},
	.bytes = {.ob_size = 16, .ob_sval = 32},
};

static const struct py_layout layout_310 = {
	.minor = 10,
	.frame_model = FRAME_MODEL_OBJECT,
	.line_model = LINE_MODEL_PEP626,
	.lasti_model = LASTI_CODEUNITS,
	.runtime = {.size = 372, .interpreters_head = 32, .gil = 352, .gc_collecting = ABSENT},
	.interp = {.size = 820, .next = 0, .id = 24, .threads_head = 8,
	           .gc_collecting = 816, .gil_ptr = ABSENT, .modules = 856},
	.gil = {.last_holder = 8, .locked = 16},
	/* 3.10 has a CFrame, but it only carries use_tracing: frames are still
	 * reached through tstate->frame. */
	.tstate = {.size = 184, .next = 8, .interp = 16, .frame = 24, .cframe = ABSENT,
	           .cframe_current_frame = ABSENT, .thread_id = 176,
	           .native_thread_id = ABSENT, .datastack_chunk = ABSENT},
	.frame = {.size = 104, .back = 24, .code = 32, .lasti = 96, .lineno = 100,
	          .trace = 72, .gen = 88, .instr_ptr = ABSENT, .owner = ABSENT, .is_entry = ABSENT,
	          .stacktop = ABSENT, .tlbc_index = ABSENT,
	          .owner_generator = NO_OWNER, .owner_cstack = NO_OWNER,
	          .owner_interpreter = NO_OWNER, .code_tag_mask = 0},
	.code = {.size = 128, .filename = 104, .name = 112, .qualname = ABSENT,
	         .linetable = 120, .firstlineno = 40, .code_adaptive = ABSENT, .tlbc = ABSENT,
	         .framesize = ABSENT, .nlocalsplus = ABSENT, .stacksize = ABSENT},
	.object = {.ob_type = 8},
	.unicode = {.length = 16, .state = 32, .ascii_size = 48, .compact_size = 72,
	            .legacy_data = 72},
	.bytes = {.ob_size = 16, .ob_sval = 32},
};

static const struct py_layout layout_311 = {
	.minor = 11,
	.frame_model = FRAME_MODEL_INTERP,
	.line_model = LINE_MODEL_LOCATIONS,
	.lasti_model = LASTI_INSTR_PTR,
	.runtime = {.size = 380, .interpreters_head = 40, .gil = 360, .gc_collecting = ABSENT},
	.interp = {.size = 852, .next = 0, .id = 48, .threads_head = 16,
	           .gc_collecting = 848, .gil_ptr = ABSENT, .modules = 888},
	.gil = {.last_holder = 8, .locked = 16},
	.tstate = {.size = 304, .next = 8, .interp = 16, .frame = ABSENT, .cframe = 56,
	           .cframe_current_frame = 8, .thread_id = 152,
	           .native_thread_id = 160, .datastack_chunk = 296},
	/* No shim frames yet: the first frame of each C-level evaluation is
	 * marked by is_entry instead (enum _frameowner in
	 * Include/internal/pycore_frame.h: THREAD 0, GENERATOR 1, FRAME_OBJECT 2). */
	.frame = {.size = 70, .back = 48, .code = 32, .lasti = ABSENT, .lineno = ABSENT,
	          .trace = ABSENT, .gen = ABSENT, .instr_ptr = 56, .owner = 69, .is_entry = 68,
	          .stacktop = ABSENT, .tlbc_index = ABSENT,
	          .owner_generator = 1, .owner_cstack = NO_OWNER,
	          .owner_interpreter = NO_OWNER, .code_tag_mask = 0},
	/* code_adaptive is where the bytecode starts, an address we compute and
	 * never a field we read, so it does not count towards size. */
	.code = {.size = 144, .filename = 112, .name = 120, .qualname = 128,
	         .linetable = 136, .firstlineno = 72, .code_adaptive = 184, .tlbc = ABSENT,
	         .framesize = ABSENT, .nlocalsplus = 76, .stacksize = 68},
	.object = {.ob_type = 8},
	.unicode = {.length = 16, .state = 32, .ascii_size = 48, .compact_size = 72,
	            .legacy_data = 72},
	.bytes = {.ob_size = 16, .ob_sval = 32},
};

static const struct py_layout layout_312 = {
	.minor = 12,
	.frame_model = FRAME_MODEL_INTERP,
	.line_model = LINE_MODEL_LOCATIONS,
	.lasti_model = LASTI_INSTR_PTR,
	/* Each interpreter may own its GIL from 3.12: it is reached through
	 * interp->ceval.gil, nothing of it is left in _PyRuntime. */
	.runtime = {.size = 48, .interpreters_head = 40, .gil = ABSENT, .gc_collecting = ABSENT},
	.interp = {.size = 392, .next = 0, .id = 8, .threads_head = 72,
	           .gc_collecting = 312, .gil_ptr = 384, .modules = 944},
	.gil = {.last_holder = 8, .locked = 16},
	.tstate = {.size = 240, .next = 8, .interp = 16, .frame = ABSENT, .cframe = 56,
	           .cframe_current_frame = 0, .thread_id = 136,
	           .native_thread_id = 144, .datastack_chunk = 232},
	/* enum _frameowner, Include/internal/pycore_frame.h: THREAD 0,
	 * GENERATOR 1, FRAME_OBJECT 2, CSTACK 3. */
	.frame = {.size = 71, .back = 8, .code = 0, .lasti = ABSENT, .lineno = ABSENT,
	          .trace = ABSENT, .gen = ABSENT, .instr_ptr = 56, .owner = 70, .is_entry = ABSENT,
	          .stacktop = 64, .tlbc_index = ABSENT,
	          .owner_generator = 1, .owner_cstack = 3,
	          .owner_interpreter = NO_OWNER, .code_tag_mask = 0},
	.code = {.size = 144, .filename = 112, .name = 120, .qualname = 128,
	         .linetable = 136, .firstlineno = 68, .code_adaptive = 192, .tlbc = ABSENT,
	         .framesize = 76, .nlocalsplus = ABSENT, .stacksize = ABSENT},
	.object = {.ob_type = 8},
	/* wstr is gone from 3.12 on. */
	.unicode = {.length = 16, .state = 32, .ascii_size = 40, .compact_size = 56,
	            .legacy_data = 56},
	.bytes = {.ob_size = 16, .ob_sval = 32},
};

const struct py_layout *layout_for_minor(unsigned minor)
{
	switch (minor) {
	case 8:
		return &layout_38;
	case 9:
		return &layout_39;
	case 10:
		return &layout_310;
	case 11:
		return &layout_311;
	case 12:
		return &layout_312;
	default:
		return NULL;
	}
}

