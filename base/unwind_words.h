/*
 * The unwinder's words that the wire, the export writers and both programs
 * share: how a read failed, which threads a sample walks, what it makes of
 * asyncio, the kinds of frames, and how deep a stack may go.  Apart from
 * unwind.h, so that what only names these needs nothing else of the unwinder.
 */
#ifndef PYPROFD_UNWIND_WORDS_H
#define PYPROFD_UNWIND_WORDS_H

enum uw_status {
	UW_OK = 0,
	UW_ENOPROC,    /* no such process */
	UW_EPERM,      /* the caller may not read the process */
	UW_ENOTPYTHON, /* no CPython runtime in the process */
	UW_EVERSION,   /* a CPython this unwinder cannot read */
	UW_EGONE,      /* the process exited while being read */
	UW_ECORRUPT,   /* remote data inconsistent: bad pointer, type or length */
	UW_ENOMEM,
	UW_EIO,        /* a file of the process (maps, ELF) could not be read */
};

enum uw_frame_kind {
	UW_FRAME_PYTHON,
	UW_FRAME_NATIVE, /* C code sits between the Python frames around it */
	UW_FRAME_GC,     /* the cyclic garbage collector is running */
	UW_FRAME_MOVING, /* the last resort: the thread moved through every read, nothing of it proven */
	UW_FRAME_C,      /* a C function: function its symbol, file its shared object (--native) */
};

/* Which threads a sample walks. */
enum uw_mode {
	UW_MODE_WALL, /* every thread */
	UW_MODE_CPU,  /* threads the kernel has running or runnable */
	UW_MODE_GIL,  /* the thread holding the GIL */
	UW_MODE_EXCEPTION, /* threads handling an exception: in except or finally with one set */
};

/*
 * What a sample makes of an asyncio program (3.11+).  A task's stack is its
 * coroutine frames, innermost first, then a `<task>:NAME` frame, then the
 * stack of the task awaiting it, down to the root task.
 */
enum uw_async_mode {
	UW_ASYNC_OFF,
	UW_ASYNC_RUNNING, /* a thread running a task shows that task's stack */
	UW_ASYNC_ALL,     /* and every suspended task is a stack of its own, idle */
};

/* Frames one stack holds at most: remote data past them is not trusted. */
#define UW_MAX_FRAMES 8192

/* ContextVars a target's samples are labelled by at most, and a name's bytes with its NUL. */
#define UW_CONTEXT_LABELS_MAX 8u
#define UW_CONTEXT_NAME_LEN 32u
/* A label's value at most, with its NUL: a longer str is cut, at a character's boundary. */
#define UW_CONTEXT_VALUE_LEN 64u

#endif
