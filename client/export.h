/*
 * Writing an aggregated profile out: collapsed stacks, a self-contained
 * flamegraph page, speedscope JSON, pprof (gzip'd protobuf), a table of top
 * functions, JSON.  Pure functions of the profile below: no socket, no
 * daemon, so the tests drive them directly.
 */
#ifndef PYPROFD_EXPORT_H
#define PYPROFD_EXPORT_H

#include <stdint.h>
#include <stdio.h>

enum export_frame_kind { EXPORT_FRAME_PYTHON, EXPORT_FRAME_NATIVE, EXPORT_FRAME_GC };

struct export_frame {
	const char *function;
	const char *file; /* "" for markers */
	int32_t line;     /* -1: unknown */
	enum export_frame_kind kind;
};

/* One distinct stack and how many samples had it. */
struct export_stack {
	const uint32_t *frames; /* indices into export_profile.frames, root first */
	uint32_t depth;
	uint64_t count;
	uint64_t thread_id; /* 0 when threads were merged */
};

struct export_profile {
	const struct export_frame *frames;
	uint32_t nframes;
	const struct export_stack *stacks;
	uint32_t nstacks;
	const char *name;        /* e.g. "pid 4242 (service=api)", for titles */
	const char *mode;        /* "wall", "cpu" or "gil" */
	uint32_t rate_hz;        /* samples per second per thread: one sample is 1/rate_hz s */
	double from_unix;        /* the time range the samples cover */
	double until_unix;
};

enum export_format {
	EXPORT_COLLAPSED,  /* "frame;frame;... count" lines, root first, frame as "function (file:line)" */
	EXPORT_FLAMEGRAPH, /* one HTML file, no network needed, with search and zoom */
	EXPORT_SPEEDSCOPE, /* speedscope's file format (JSON) */
	EXPORT_PPROF,      /* gzip'd perftools.profiles.Profile */
	EXPORT_TABLE,      /* top functions, own and total */
	EXPORT_JSON,       /* the profile itself as JSON */
};

/* The format named "collapsed", "flamegraph", ...; -1 if none is. */
int export_format_parse(const char *name, enum export_format *out);

/* Write the profile in a format; 0, or -1 with errno (or EINVAL for a bad profile). */
int export_write(const struct export_profile *p, enum export_format format, FILE *out);

#endif
