/*
 * What the export writers share, grouped by the file that owns it.  Every
 * writer gets a profile that export_write has validated, seen through a view
 * that gives the names as valid UTF-8 and numbers the distinct frames and
 * functions, so no writer repeats those checks.
 */
#ifndef PYPROFD_EXPORT_INT_H
#define PYPROFD_EXPORT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "export.h"

struct export_view {
	const struct export_profile *p;
	/* Per frame of p: its strings as valid UTF-8 (bad bytes become U+FFFD). */
	const char **function;
	const char **file;
	/*
	 * Per frame of p: the dense id of its distinct (function, file, line,
	 * kind), so a table with repeated entries still merges them; frame_rep
	 * gives one frame index for each id.
	 */
	uint32_t *frame_id;
	uint32_t *frame_rep;
	uint32_t nuniq;
	/* Per frame of p: the dense id of its function, (function, file, first line). */
	uint32_t *func_id;
	uint32_t *func_rep;
	uint32_t nfuncs;
	uint64_t total;   /* samples of all stacks */
	const char *name; /* never NULL, valid UTF-8 */
	const char *mode; /* never NULL, valid UTF-8 */
	const char **thread_title; /* per thread of p: what it is called, valid UTF-8 */
	char **owned;     /* the UTF-8 copies above, freed with the view */
	size_t nowned;
};

/* export_format.c */
/* fputs that reports failure as -1 (errno set by the write). */
int export_puts(FILE *out, const char *s);
/* A stack's thread as every format calls it, or NULL when the stack has no thread. */
const char *export_stack_thread_title(const struct export_view *v, const struct export_stack *s);

/* export_text.c */
int export_write_collapsed(const struct export_view *v, FILE *out);

/* export_json.c */
/* Put a new value in an object or array; -1 if it or the insertion failed (value freed). */
int export_json_set(json_t *obj, const char *key, json_t *value);
int export_json_add(json_t *arr, json_t *value);
/*
 * {name, mode, rate_hz, from, until, total_key: the sample total, frames: [],
 * stacks: []}, with *frames and *stacks the document's own arrays to fill;
 * NULL when out of memory.
 */
json_t *export_json_doc(const struct export_view *v, const char *total_key, json_t **frames,
                        json_t **stacks);
int export_write_json(const struct export_view *v, FILE *out);
int export_write_speedscope(const struct export_view *v, FILE *out);

/* export_flame.c; page.html, built in (see the Makefile) */
extern const char export_page[];
int export_write_flamegraph(const struct export_view *v, FILE *out);
int export_write_heatmap(const struct export_view *v, FILE *out);

/* export_pprof.c */
int export_write_pprof(const struct export_view *v, FILE *out);

/* export_gecko.c */
int export_write_gecko(const struct export_view *v, FILE *out);

#endif
