/*
 * vocab — the words both programs and the wire share, one table each: how a
 * failure is named, coded on the wire and reported as an exit status; the
 * sampling modes; the kinds of frames.  The unwinder's enums are the things
 * named (unwind_words.h); the protocol's are how they travel.
 */
#ifndef PYPROFD_VOCAB_H
#define PYPROFD_VOCAB_H

#include "pyprofd.pb-c.h"
#include "unwind_words.h"

/* The release of both programs: what --version and the status RPC say. */
#define PYPROFD_VERSION "0.4.0"

/* Exit statuses of `pyprofd dump|record` and of pyprofd-ctl, as their --help documents. */
enum exit_status {
	EXIT_OK = 0,
	EXIT_FAILURE_OTHER = 1, /* bad request, limit, protocol, internal error, output */
	EXIT_USAGE = 2,
	EXIT_NO_PROCESS = 3,
	EXIT_PERMISSION = 4,
	EXIT_NOT_PYTHON = 5,
	EXIT_UNSUPPORTED = 6,
	EXIT_EXITED = 7,
	EXIT_CORRUPT = 8,
	EXIT_NOT_ATTACHED = 9,  /* pyprofd-ctl: the daemon is not profiling that process */
	EXIT_UNREACHABLE = 10,  /* pyprofd-ctl: the daemon cannot be reached */
};

/* The error code the daemon answers an unwinder failure with. */
Pyprofd__ErrorCode vocab_status_code(enum uw_status status);
/* The exit status of an unwinder failure (pyprofd dump and record). */
enum exit_status vocab_status_exit(enum uw_status status);
/* The exit status of an error the daemon answered (pyprofd-ctl). */
enum exit_status vocab_code_exit(Pyprofd__ErrorCode code);
/* A short, stable name of an unwinder status ("no such process", ...). */
const char *vocab_status_name(enum uw_status status);

/* "wall", "cpu", "gil"; "unknown" for a value of neither table. */
const char *vocab_mode_name(enum uw_mode mode);
const char *vocab_wire_mode_name(Pyprofd__Mode mode);
/* The mode of a name; -1 if it names none. */
int vocab_mode_parse(const char *name, enum uw_mode *out);
/* "off", "running", "all": an async mode's name, and back; to and from the wire. */
const char *vocab_async_mode_name(enum uw_async_mode mode);
int vocab_async_mode_parse(const char *name, enum uw_async_mode *out);
Pyprofd__AsyncMode vocab_async_mode_to_wire(enum uw_async_mode mode);
int vocab_async_mode_from_wire(Pyprofd__AsyncMode wire, enum uw_async_mode *out);
int vocab_wire_mode_parse(const char *name, Pyprofd__Mode *out);
/* A wire mode as the unwinder's; -1 for a value the protocol does not define. */
int vocab_mode_from_wire(Pyprofd__Mode mode, enum uw_mode *out);
Pyprofd__Mode vocab_mode_to_wire(enum uw_mode mode);

/* "python", "native", "gc", "moving". */
const char *vocab_kind_name(enum uw_frame_kind kind);
/* The kind of a name; an unknown or empty name is a Python frame. */
enum uw_frame_kind vocab_kind_parse(const char *name);

#endif
