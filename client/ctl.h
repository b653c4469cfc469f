/* pyprofd-ctl's internal interfaces, grouped by the file that owns them. */
#ifndef PYPROFD_CTL_H
#define PYPROFD_CTL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "client.h"
#include "vocab.h"

/* ctl.c */
/* The command line, parsed and run; the exit status. */
int ctl_main(int argc, char **argv);
/* Print a failed call's one line on stderr; returns its exit status. */
int ctl_report(const struct client_error *err);

/* format.c */
/* s, or "" for a string the decoder left NULL. */
const char *format_str(const char *s);
/* A JSON string even for bytes that are not UTF-8 (they become U+FFFD); NULL if out of memory. */
json_t *format_json_string(const char *s);
/* A JSON integer; past what JSON integers hold here, the largest one. */
json_t *format_json_u64(uint64_t v);
/* A JSON number, or null for NaN and infinities (JSON has neither). */
json_t *format_json_double(double v);
/* The documented JSON form of a Target; NULL if out of memory. */
json_t *format_json_target(const Pyprofd__Target *t);
/* Write doc as one compact line on stdout and free it; -1 if that failed. */
int format_json_print(json_t *doc);
/* Columns s takes on a terminal: one per UTF-8 character. */
size_t format_width(const char *s);
/*
 * Write at most `cols` columns of s to out with control characters shown as
 * '?' (a process's command line or file names must not drive the terminal),
 * padded with spaces to `pad` columns; returns the columns written.
 */
size_t format_put(FILE *out, const char *s, size_t cols, size_t pad);

/* functions.c */
/*
 * A history query's function table (QUERY_FUNCTIONS) or diff (QUERY_DIFF),
 * every part, as text or one JSON line; name titles the table.  0, or -1 if
 * writing failed.
 */
int functions_write(const struct client_reply *reply, const char *name, bool diff, bool json,
                    FILE *out);

/* processes.c */
/* A history query's processes (QUERY_PROCESSES), every part, as a table or one JSON line. */
int processes_write(const struct client_reply *reply, bool json, FILE *out);

/* top.c */
struct top_options {
	int32_t pid;
	uint32_t window_s; /* 0: the daemon's default */
	uint32_t limit;    /* 0: as many as fit, or all when not live */
	bool once;
	bool json;
};

/* Show the busiest functions of a target, live or once; returns the exit status. */
int top_run(struct client *c, const struct top_options *o);

#endif
