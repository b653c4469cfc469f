/*
 * Where one CPython minor version keeps what the unwinder reads.
 *
 * Version differences are data: the walker is written once against this
 * struct, and each supported minor version is one table (3.8-3.12, taken from
 * the headers of that version) or is filled at attach time from the target's
 * own _Py_DebugOffsets (3.13 and newer).  Offsets are bytes from the start of
 * the named struct; LAYOUT_ABSENT marks a field the version does not have.
 */
#ifndef PYPROFD_UNWIND_LAYOUT_H
#define PYPROFD_UNWIND_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LAYOUT_ABSENT UINT32_MAX
#define LAYOUT_OWNER_NONE 0xff

/* How a thread's frames are linked. */
enum frame_model {
	FRAME_MODEL_OBJECT, /* 3.8-3.10: heap PyFrameObject linked by f_back */
	FRAME_MODEL_INTERP, /* 3.11+: _PyInterpreterFrame linked by previous */
};

/* Which line-number table a code object carries. */
enum line_model {
	LINE_MODEL_LNOTAB,    /* 3.8-3.9 co_lnotab */
	LINE_MODEL_PEP626,    /* 3.10 co_linetable */
	LINE_MODEL_LOCATIONS, /* 3.11+ location table (Objects/locations.md) */
};

/* How the instruction position of a frame is stored. */
enum lasti_model {
	LASTI_BYTES,      /* 3.8-3.9: int f_lasti, byte offset, -1 before start */
	LASTI_CODEUNITS,  /* 3.10: int f_lasti, index in 2-byte code units */
	LASTI_INSTR_PTR,  /* 3.11+: pointer into the code object's bytecode */
};

struct py_layout {
	unsigned minor; /* 8 .. 15 */
	enum frame_model frame_model;
	enum line_model line_model;
	enum lasti_model lasti_model;
	bool free_threaded;

	/* _PyRuntimeState */
	struct {
		uint32_t size;              /* bytes to read: covers every field below */
		uint32_t interpreters_head; /* PyInterpreterState * */
		uint32_t gil;               /* embedded struct _gil_runtime_state (3.8-3.11) */
		uint32_t gc_collecting;     /* int, 3.8 only (per interpreter later) */
	} runtime;

	/* PyInterpreterState */
	struct {
		uint32_t size;          /* bytes to read: covers every field below */
		uint32_t next;          /* PyInterpreterState * */
		uint32_t id;            /* int64_t */
		uint32_t threads_head;  /* PyThreadState * (tstate_head / threads.head) */
		uint32_t gc_collecting; /* int, 3.9+ */
		uint32_t gil_ptr;       /* struct _gil_runtime_state *, 3.12+ (ceval.gil) */
		/* sys.modules (a dict): read alone, now and then, so not within size */
		uint32_t modules;
	} interp;

	/* struct _gil_runtime_state, wherever it lives */
	struct {
		uint32_t last_holder; /* PyThreadState * */
		uint32_t locked;      /* int */
	} gil;

	/* PyThreadState */
	struct {
		uint32_t size;             /* bytes to read: covers every field below */
		uint32_t next;             /* PyThreadState * */
		uint32_t interp;           /* PyInterpreterState * */
		uint32_t frame;            /* innermost frame: PyFrameObject * (3.8-3.10)
		                              or _PyInterpreterFrame * (3.13+) */
		uint32_t cframe;           /* _PyCFrame * (3.11-3.12), else ABSENT */
		uint32_t cframe_current_frame; /* in _PyCFrame: _PyInterpreterFrame * */
		uint32_t thread_id;        /* unsigned long, pthread_self() */
		uint32_t native_thread_id; /* unsigned long, 3.11+; else ABSENT */
		uint32_t datastack_chunk;  /* _PyStackChunk *, 3.11+ */
		/*
		 * 3.15+: the frame-cache marker, last_profiled_frame and
		 * last_profiled_frame_seq (present false before: the zero offsets
		 * mean nothing then).
		 */
		bool marker;
		uint32_t marker_frame, marker_seq;
	} tstate;

	/* PyFrameObject (3.8-3.10) or _PyInterpreterFrame (3.11+) */
	struct {
		uint32_t size;        /* bytes to read: covers every field below */
		uint32_t back;        /* f_back / previous */
		uint32_t code;        /* f_code / f_executable */
		uint32_t lasti;       /* int f_lasti (3.8-3.10) */
		uint32_t lineno;      /* int f_lineno (3.8-3.10) */
		uint32_t trace;       /* PyObject *f_trace (3.8-3.10) */
		uint32_t gen;         /* PyObject *f_gen (3.8-3.10): set in a generator's frame */
		uint32_t instr_ptr;   /* prev_instr (3.11-3.12) / instr_ptr (3.13+) */
		uint32_t owner;       /* char owner (3.11+) */
		uint32_t tlbc_index;  /* int32 index of the thread's bytecode copy (free-threaded 3.14+), else ABSENT */
		uint32_t is_entry;    /* bool is_entry (3.11 only) */
		uint32_t stacktop;    /* int stacktop, -1 while the frame runs (3.12-3.13) */
		uint8_t owner_generator;   /* enum values of owner, LAYOUT_OWNER_NONE if absent */
		uint8_t owner_cstack;      /* shim frame pushed when C enters the eval loop */
		uint8_t owner_interpreter; /* 3.14+ interpreter-owned shim frame */
		uint64_t code_tag_mask;    /* low bits to clear from code (3.14+ _PyStackRef) */
	} frame;

	/*
	 * A coroutine's frame as the interpreter's own debug offsets place it
	 * (3.14+): the asyncio tables' values, for a build whose objects they
	 * do not describe (free-threaded).  known false: none given.
	 */
	struct {
		bool known;
		uint32_t iframe, frame_state;    /* PyGenObject: gi_iframe, gi_frame_state */
		uint32_t localsplus, stackpointer; /* _PyInterpreterFrame */
	} coro;

	/* PyCodeObject */
	struct {
		uint32_t size;          /* bytes to read: covers every field below */
		uint32_t filename;      /* PyObject * (str) */
		uint32_t name;          /* PyObject * (str) */
		uint32_t qualname;      /* PyObject * (str), 3.11+ */
		uint32_t linetable;     /* PyObject * (bytes): co_lnotab / co_linetable */
		uint32_t firstlineno;   /* int */
		uint32_t code_adaptive; /* start of the bytecode inside the object, 3.11+ */
		uint32_t tlbc;          /* _PyCodeArray *co_tlbc: the threads' copies (free-threaded 3.14+), else ABSENT */
		/*
		 * What a frame of the code takes on the data stack, in words
		 * (3.11-3.12): co_framesize (3.12), or FRAME_SPECIALS_WORDS and
		 * co_nlocalsplus and co_stacksize, ints (3.11).
		 */
		uint32_t framesize, nlocalsplus, stacksize;
	} code;

	/* PyObject */
	struct {
		uint32_t ob_type;
	} object;

	/* PyASCIIObject / PyCompactUnicodeObject / PyUnicodeObject */
	struct {
		uint32_t length;       /* Py_ssize_t, in code points */
		uint32_t state;        /* bit field word: interned:2 kind:3 compact:1 ascii:1 */
		uint32_t ascii_size;   /* sizeof(PyASCIIObject): compact ASCII data follows */
		uint32_t compact_size; /* sizeof(PyCompactUnicodeObject): compact data follows */
		uint32_t legacy_data;  /* void *data.any of a non-compact PyUnicodeObject */
	} unicode;

	/* PyBytesObject */
	struct {
		uint32_t ob_size; /* Py_ssize_t */
		uint32_t ob_sval; /* char[] */
	} bytes;
};

/* The static table of a minor version without _Py_DebugOffsets (3.8-3.12). */
const struct py_layout *layout_for_minor(unsigned minor);

/*
 * Fill a layout for 3.13+ from the raw bytes of the target's _Py_DebugOffsets.
 * Returns 0, or -1 if the bytes do not describe a version we can read.
 */
int layout_from_debug_offsets(const uint8_t *raw, size_t len, struct py_layout *out);

/* Bytes of _Py_DebugOffsets to read for a given PY_VERSION_HEX (0 if unknown). */
size_t layout_debug_offsets_size(uint64_t version_hex);

/*
 * asyncio's C tasks (Modules/_asynciomodule.c) and the coroutines they run,
 * 3.11 and newer.  Each minor version is one table measured on the real
 * interpreters; 3.14+ also publish most task fields in the _asyncio
 * module's own debug offsets (_AsyncioDebug, section .AsyncioDebug), which
 * then override the table.  LAYOUT_ABSENT: not in that version.
 */
struct asyncio_layout {
	unsigned minor;
	/* TaskObj (FutureObj_HEAD first) */
	uint32_t task_size;       /* bytes to read: covers every field below */
	uint32_t fut_state;       /* int: 0 pending, 1 cancelled, 2 finished */
	uint32_t task_fut_waiter; /* PyObject *: the future the task waits on */
	uint32_t task_coro;       /* PyObject *: the coroutine it runs */
	uint32_t task_name;       /* PyObject *: str, or from 3.12 an int N for "Task-N" */
	uint32_t task_context;    /* PyObject *: the contextvars context its steps run in (after task_name in every version) */
	uint32_t task_awaited_by; /* PyObject *: the awaiting task, or a set of them (3.14+) */
	uint32_t task_is_task;    /* char (3.14+) */
	uint32_t task_awaited_by_is_set; /* char (3.14+) */
	uint32_t task_node;       /* struct llist_node in the per-thread task list (3.14+) */
	/* PyThreadState and PyInterpreterState, 3.14+ */
	uint32_t ts_running_task; /* PyObject * */
	uint32_t ts_tasks_head;   /* struct llist_node */
	uint32_t interp_tasks_head; /* struct llist_node: tasks of threads that ended */
	/* PyCoroObject */
	uint32_t gen_iframe;      /* the embedded _PyInterpreterFrame */
	uint32_t gen_frame_state; /* int8_t */
	int8_t state_created, state_suspended_lo, state_suspended_hi, state_executing;
	/* _PyInterpreterFrame of a coroutine: where its value stack ends */
	uint32_t frame_stacktop;      /* int, slots above localsplus (3.11-3.13) */
	uint32_t frame_stackpointer;  /* _PyStackRef * (3.14+) */
	uint32_t frame_localsplus;
	/*
	 * 3.11-3.13 keep the tasks in asyncio.tasks' WeakSet (_all_tasks in
	 * 3.11, _scheduled_tasks and the set _eager_tasks from 3.12), found
	 * through sys.modules; an instance's attributes (WeakSet.data, a
	 * TaskGroup's) live in a values array: before the object (3.11: its
	 * pointer at values_ptr; 3.12: the same, tagged, one byte short) or
	 * inline after it (3.13: at tp_basicsize, past an 8-byte header).
	 */
	uint32_t interp_modules;  /* PyInterpreterState.imports.modules (sys.modules) */
	int32_t values_ptr;       /* from the object; 0: inline */
	bool values_tagged;
	/* PyLongObject, for a task named by number */
	uint32_t long_size;   /* ob_size (3.11) or lv_tag (3.12+) */
	uint32_t long_digit;  /* first 30-bit digit */
	bool long_tagged;     /* lv_tag: digit count << 3 and the sign in the low bits */
	/*
	 * The objects a task's callbacks and asyncio's sets are made of, each
	 * field read where a table here says (every one within
	 * LAYOUT_ASYNCIO_OBJECT_BYTES of its object).
	 */
	struct {
		uint32_t head;                    /* PyObject_HEAD: an object's first own field */
		uint32_t fut_callback0, fut_callbacks; /* FutureObj: the first callback, the list of the others */
		uint32_t var_size;                /* PyVarObject.ob_size */
		uint32_t list_items, tuple_items; /* PyListObject.ob_item, PyTupleObject.ob_item[] */
		uint32_t func_closure;            /* PyFunctionObject.func_closure */
		uint32_t method_self;             /* PyMethodObject.im_self */
		uint32_t cell_ref;                /* PyCellObject.ob_ref */
		uint32_t weakref_object;          /* PyWeakReference.wr_object */
		uint32_t type_basicsize;          /* PyTypeObject.tp_basicsize */
		uint32_t module_dict;             /* PyModuleObject.md_dict */
		uint32_t set_mask, set_table;     /* PySetObject */
	} obj;
};
/* Bytes of an object read for the fields of asyncio_layout.obj, at most. */
#define LAYOUT_ASYNCIO_OBJECT_BYTES 96u

/* The table of asyncio's objects for a minor version, NULL before 3.11. */
const struct asyncio_layout *layout_asyncio_for_minor(unsigned minor);

/* Bytes of _Py_AsyncioModuleDebugOffsets (3.14+). */
#define LAYOUT_ASYNCIO_DEBUG_SIZE 104

/*
 * Take what the _asyncio module's debug offsets say over the table's.
 * 0, or -1 if the bytes do not describe a task object we can read.
 */
int layout_asyncio_from_debug(const uint8_t *raw, size_t len, struct asyncio_layout *out);

/*
 * Where a thread keeps the exceptions it handles: PyThreadState.exc_info
 * points to the innermost _PyErr_StackItem (the thread's own exc_state, or
 * a running generator's), each linking to the one it hides.  A thread
 * handles an exception (inside except or finally with one set, as
 * sys.exc_info() tells) when an item of that chain holds one that is not
 * None.  3.8-3.10 items are (type, value, traceback, previous), where the
 * type tells it; 3.11+ (value, previous).
 */
struct exc_layout {
	unsigned minor;
	uint32_t tstate_exc_info;
	uint32_t item_exception; /* the exception (3.11+) or its type (3.8-3.10) */
	uint32_t item_previous;
};

/* The table of a minor version (3.8-3.15), NULL for another. */
const struct exc_layout *layout_exc_for_minor(unsigned minor);

/* How an instance keeps its attributes (Thread._name). */
enum attrs_model {
	ATTRS_DICT,        /* 3.8-3.10: a dict at the type's tp_dictoffset */
	ATTRS_VALUES,      /* 3.11: a values array at values_ptr, else a dict at dict_ptr */
	ATTRS_TAGGED,      /* 3.12: at dict_ptr, a dict or (low bit set) a values array one byte on */
	ATTRS_INLINE,      /* 3.13+: values inline at tp_basicsize while valid, else a dict at dict_ptr */
};

/*
 * The objects a thread's Python name is reached through, 3.8-3.15:
 * threading._active (a dict of int idents to Thread objects) in the
 * threading module's dict in sys.modules, and the _name attribute of a
 * Thread.  Object fields are for CPython's 16-byte object header; a
 * free-threaded build's longer header moves them all by as much.
 */
struct names_layout {
	unsigned minor;
	uint32_t module_dict;           /* PyModuleObject.md_dict */
	uint32_t dict_keys, dict_values; /* PyDictObject.ma_keys, ma_values */
	/*
	 * PyDictKeysObject: 3.8-3.10 keep dk_size (Py_ssize_t) and one form of
	 * entry (hash, key, value); 3.11+ log2 sizes in bytes and a kind
	 * (general entries, or key and value alone for str keys).
	 */
	bool keys_log2;
	uint32_t keys_size;             /* dk_size, or the byte dk_log2_size */
	uint32_t keys_log2_index_bytes, keys_kind; /* bytes, 3.11+ */
	uint32_t keys_nentries, keys_indices;
	/* PyDictKeyEntry (hash, key, value), and PyDictUnicodeEntry (key, value) of str-keyed kinds (3.11+) */
	uint32_t entry_size, entry_hash, entry_key, entry_value;
	uint32_t str_entry_size, str_entry_key, str_entry_value;
	uint32_t type_basicsize, type_flags, type_dictoffset; /* PyTypeObject */
	uint32_t type_cached_keys;      /* PyHeapTypeObject.ht_cached_keys: the keys of its instances' values */
	enum attrs_model attrs;
	int32_t dict_ptr, dict_ptr_ft;  /* a managed dict's pointer from the object (3.11+); free-threaded builds' */
	int32_t values_ptr;             /* 3.11: the values array's pointer from the object */
	uint32_t inline_capacity, inline_valid, inline_values; /* 3.13+: the inline values' header, then the values */
	uint32_t long_size, long_digit; /* PyLongObject: ob_size or lv_tag, the first 30-bit digit */
	bool long_tagged;               /* lv_tag: digit count << 3, the sign in the low bits (3.12+) */
	uint32_t var_size;              /* PyVarObject.ob_size */
	uint32_t ts_context;            /* PyThreadState.context, context_ver the word after it */
	uint32_t tuple_items;           /* PyTupleObject.ob_item (3.14+ keep the hash before it) */
};

/* The table of a minor version (3.8-3.15), NULL for another. */
const struct names_layout *layout_names_for_minor(unsigned minor);

#endif
