/*
 * Writing an aggregated profile out: collapsed stacks, a self-contained
 * flamegraph page (and a heatmap: the page with sources), speedscope JSON,
 * pprof (gzip'd protobuf), gecko, JSON.  (The
 * table of top functions is counted by the daemon: see functions.c.)  Pure functions of the profile below: no socket, no
 * daemon, so the tests drive them directly.
 */
#ifndef PYPROFD_EXPORT_H
#define PYPROFD_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "check.h"
#include "pyprofd.pb-c.h"
#include "unwind_words.h"


/*
 * A frame.  function is the qualified name where the interpreter has one
 * (co_qualname, 3.11+; co_name before); with file and first_line it names
 * the function: a method and a function of one short name are two.
 */
struct export_frame {
	const char *function;
	const char *file; /* "" for markers; a C frame's module */
	int32_t line;     /* -1: unknown; a C frame's: its address in its module's file (export_frame_line) */
	enum uw_frame_kind kind;
	int32_t first_line; /* co_firstlineno; 0: unknown, and for markers */
	const char *build_id; /* a C frame's module's GNU build id in hex; NULL or "": none */
};

/* The line a view shows of a frame: -1 for a C frame, whose line holds its address. */
static inline int32_t export_frame_line(const struct export_frame *f)
{
	return f->kind == UW_FRAME_C ? -1 : f->line;
}

struct export_label {
	const char *key, *value;
};

/* A thread of a profile: whose it is and what it is called. */
struct export_thread {
	uint64_t thread_id;  /* threading.get_ident() */
	int64_t native_id;   /* the kernel's; -1 unknown */
	const char *name;    /* "" unknown */
	int32_t pid;         /* 0 unknown */
	const struct export_label *labels; /* its process's */
	uint32_t nlabels;
	uint64_t start_time; /* its process's start, clock ticks after boot (/proc/PID/stat); 0 unknown */
};

/* A request context a stack ran in: its trace and span as lowercase hex, and its labels. */
struct export_context {
	const char *trace_id, *span_id; /* NULL: none */
	const struct export_label *labels;
	uint32_t nlabels;
};

/*
 * Bounds of a profile export_write accepts; past them it fails with EINVAL.
 * The unwinder cuts stacks at 8192 Python frames and markers may sit between
 * them, so real stacks stay far below EXPORT_MAX_DEPTH; the bound is there so
 * a corrupt depth cannot make a writer walk off into memory.  Sample totals
 * stay exact as JSON numbers (JavaScript's integers end at 2^53), and times
 * are those a request may name, which fit pprof's int64 nanoseconds.
 */
#define EXPORT_MAX_DEPTH 65536
#define EXPORT_MAX_SAMPLES (UINT64_C(1) << 53)
#define EXPORT_MAX_UNIX CHECK_UNIX_MAX

/* One distinct stack and how many samples had it. */
struct export_stack {
	const uint32_t *frames; /* indices into export_profile.frames, root first */
	uint32_t depth;
	uint64_t count;
	uint64_t thread_id; /* 0 when threads were merged */
	uint32_t thread;    /* 1 + its index into export_profile.threads; 0: none */
	uint64_t idle;      /* of count, samples of a waiting thread */
	int64_t slot_start; /* with the profile's slot_seconds: the start of its time slot, unix seconds */
	bool base;          /* a diff: of the base range (else of the compared one) */
};

/*
 * A source file as a heatmap shows it: its text, or why there is none.
 * text need not be UTF-8 nor end in a NUL; bytes that are not UTF-8 become
 * U+FFFD.
 */
struct export_source {
	const char *file; /* as the frames name it */
	const char *text; /* NULL: not read */
	size_t len;
	const char *note; /* how it was read, or why not; NULL as "" */
};

struct export_profile {
	const struct export_frame *frames;
	uint32_t nframes;
	const struct export_stack *stacks;
	uint32_t nstacks;
	const char *name;        /* e.g. "pid 4242 (service=api)", for titles; NULL as "" */
	const char *mode;        /* "wall", "cpu" or "gil"; NULL as "" */
	uint32_t rate_hz;        /* samples per second per thread: one sample is 1/rate_hz s */
	double from_unix;        /* the time range the samples cover */
	double until_unix;
	const struct export_thread *threads; /* the stacks' threads, when known */
	uint32_t nthreads;
	bool per_thread;         /* collapsed: each stack under a first frame naming its thread */
	/*
	 * > 0: the stacks are split by time, each in the slot of this many
	 * seconds starting at its slot_start (a multiple of it); at most
	 * EXPORT_MAX_SLOTS slots from the first to the last.
	 */
	uint32_t slot_seconds;
	/*
	 * A diff (flamegraph and heatmap only): the stacks marked base are of
	 * [base_from_unix, base_until_unix), the others of [from_unix, until_unix).
	 */
	bool diff;
	double base_from_unix, base_until_unix;
	const struct export_source *sources; /* heatmap: the files' text (export_sources_read) */
	uint32_t nsources;
	/*
	 * The stacks' request contexts, when split by them: stack i ran in
	 * contexts[stack_contexts[i] - 1], in none when that is 0 (or
	 * stack_contexts is NULL).  pprof labels its samples with them.
	 */
	const struct export_context *contexts;
	uint32_t ncontexts;
	const uint32_t *stack_contexts;
};

#define EXPORT_MAX_SLOTS 65536

enum export_format {
	/*
	 * "frame;frame;... count" lines, root first, frame as "function (file:line)",
	 * "function (file)" without a line, "function" for a marker; equal lines
	 * merged, sorted bytewise.  In names '\' is doubled, and ';' and control
	 * characters are written \xNN, so a line is one line with ';' between frames.
	 */
	EXPORT_COLLAPSED,
	/*
	 * One HTML file, no network needed, its script the page's own: flame,
	 * icicle and sandwich views, hotspots, search, zoom, thread, label,
	 * idle and time selections, a per-line view of the files, a diff's
	 * colours; the view kept in the URL.  No source text: see heatmap.
	 */
	EXPORT_FLAMEGRAPH,
	/* speedscope's file format (JSON): one "sampled" profile in seconds, 1/rate_hz a sample. */
	EXPORT_SPEEDSCOPE,
	/*
	 * gzip'd perftools.profiles.Profile (proto/profile.proto): values samples/count
	 * and cpu/nanoseconds for mode "cpu", wall/nanoseconds otherwise; a
	 * "thread_id" label on samples of a known thread.
	 */
	EXPORT_PPROF,
	/*
	 * The profile itself, one line: {name, mode, rate_hz, from, until, samples,
	 * frames: [{function, file, line (null: unknown, and for C frames),
	 * first_line (null: unknown), kind: python|native|gc|moving|c, and for a
	 * C frame address and build_id (absent: none)}], stacks: [{frames: [index...], count,
	 * idle, thread_id, thread (index into threads, or null), slot_start (a
	 * profile split by time)}], threads: [{thread_id, native_thread_id,
	 * name, pid, labels}], slot_seconds (a profile split by time)}.
	 */
	EXPORT_JSON,
	/*
	 * The Firefox Profiler's Gecko profile format (JSON, version 29): a thread
	 * track per thread, each sample one entry 1/rate_hz after the last in
	 * the order of the stacks (a profile is aggregated: times within a
	 * thread are not when the samples were taken).  At most
	 * EXPORT_GECKO_MAX_SAMPLES samples (EFBIG past them).
	 */
	EXPORT_GECKO,
	/* The flamegraph page with the profile's sources, opened on its per-line view of them. */
	EXPORT_HEATMAP,
};

#define EXPORT_GECKO_MAX_SAMPLES (UINT64_C(1) << 24)

/* The format named "collapsed", "flamegraph", ...; -1 if none is. */
int export_format_parse(const char *name, enum export_format *out);
/* Every name export_format_parse takes, as an error lists them. */
#define EXPORT_FORMAT_NAMES "collapsed, flamegraph, heatmap, speedscope, pprof, gecko, json"
/*
 * The format a file's name asks for, by its ending (see
 * EXPORT_FORMAT_ENDINGS; case ignored): 0 and *out; 1 when the name has no
 * ending at all (/dev/null, "profile"), *out untouched; -1 when it has one
 * that names no format (.svg).
 */
int export_format_of_file(const char *path, enum export_format *out);
/* The endings export_format_of_file knows, as an error lists them. */
#define EXPORT_FORMAT_ENDINGS                                                                   \
	".html or .htm (flamegraph), .speedscope.json (speedscope), .gecko.json (gecko), "        \
	".json (json), .pb.gz, .pprof or .pb (pprof), .txt, .collapsed or .folded (collapsed)"

/*
 * Write the profile in a format; 0, or -1 with errno (or EINVAL for a bad
 * profile, with nothing written).  A valid profile: every frame has a function
 * and a file (both non-NULL) and a known kind; every stack at least one frame
 * and at most EXPORT_MAX_DEPTH, each index below nframes; counts summing to at
 * most EXPORT_MAX_SAMPLES; rate_hz > 0; 0 <= from_unix <= until_unix <=
 * EXPORT_MAX_UNIX; split by time, every slot_start a multiple of
 * slot_seconds and at most EXPORT_MAX_SLOTS slots from the first to the
 * last; stacks marked base only in a diff, whose base range is as valid,
 * and a diff only as a flamegraph or heatmap.  Strings need not be UTF-8:
 * bytes that are not become U+FFFD in every format.  Stacks with a count
 * of 0 appear only in json.
 * Writes are checked (the stream is flushed at the end).
 */
int export_write(const struct export_profile *p, enum export_format format, FILE *out);

/* ---- export_source.c: the files a heatmap shows ---- */

/* Of the bytes of sources a heatmap embeds: a file past this is left out; all of them, by default. */
#define EXPORT_SOURCE_MAX_FILE (1u << 20)
#define EXPORT_SOURCE_MAX_TOTAL (8u << 20)

/* What export_sources_read found, owned together. */
struct export_sources {
	struct export_source *v;
	uint32_t n;
	char **owned;
	size_t nowned;
};

/*
 * The source files of p's Python frames, the most sampled first, read for
 * a heatmap: a file of a process that still runs (its pid and start time
 * those of p's threads) through /proc/PID/root, so a container's or a
 * chroot's own files are read; else, the process gone, at its path on
 * this host, said as such.  A file is read only when the process's user
 * could read it (after it exits: only when anyone may), it is a regular
 * file with no NUL byte, at most EXPORT_SOURCE_MAX_FILE bytes, and the
 * files read so far leave room under max_total bytes; every other file
 * gets a note saying why it is not shown.  Reads with the caller's own
 * rights.  0, or -1 with errno (ENOMEM): what cannot be read is a note,
 * never an error.
 */
int export_sources_read(const struct export_profile *p, size_t max_total, struct export_sources *out);
void export_sources_free(struct export_sources *s);

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if it is not one. */
size_t export_utf8_seq(const unsigned char *s);

/* A malloc'd copy of s with each byte that is not valid UTF-8 replaced by U+FFFD; NULL if out of memory. */
char *export_utf8_copy(const char *s);

/* ---- export_format.c: text for people and JSON values, whatever bytes a target gave ---- */

/* s, or "" for a string the decoder left NULL. */
const char *export_str(const char *s);
/* A JSON string even for bytes that are not UTF-8 (they become U+FFFD); NULL if out of memory. */
json_t *export_json_string(const char *s);
/* A JSON integer; past what JSON integers hold here, the largest one. */
json_t *export_json_u64(uint64_t v);
/* A JSON number, or null for NaN and infinities (JSON has neither). */
json_t *export_json_double(double v);
/* doc (taken, NULL included) as one compact line; 0, or -1 with errno (ENOMEM unless the write said). */
int export_json_write(json_t *doc, FILE *out);
/* Columns s takes on a terminal: one per UTF-8 character. */
size_t export_width(const char *s);
/*
 * Write at most `cols` columns of s to out with control characters shown as
 * '?', padded with spaces to `pad` columns; returns the columns written.
 */
size_t export_put(FILE *out, const char *s, size_t cols, size_t pad);

/* ---- export_table.c: a table of functions, own and total samples ---- */

/* What heads a table: the range and totals its rows were counted over. */
struct export_table {
	Pyprofd__FunctionRow *const *rows; /* in the order to print */
	size_t nrows;
	uint64_t functions_found; /* rows there were before a limit kept these */
	const char *name;         /* what was selected, e.g. "pid 4242" */
	const char *mode;         /* "" when unknown */
	uint32_t rate_hz;         /* 0 when unknown */
	double from_unix, until_unix;
	uint64_t total;
	/* A diff: each row's base_own and base_total over the base range. */
	bool diff;
	uint64_t base_total;
	double base_from_unix, base_until_unix;
};

/* The table as text for people (names made safe) or one JSON line; 0, or -1 if writing failed. */
int export_table_write(const struct export_table *t, bool json, FILE *out);

/* ---- export_dump.c: every thread's stack, as pyprofd dump and pyprofd-ctl dump print it ---- */

/*
 * A dump answer (its parts: the first heads it, threads of all follow in
 * order) as text or one JSON line.  0, or -1 if writing failed (errno) or
 * memory ran out (ENOMEM).
 */
int export_dump_write(const Pyprofd__DumpResult *const *parts, size_t nparts, bool json, FILE *out);

#endif
