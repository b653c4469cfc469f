/* pyprofd's internal interfaces, grouped by the file that owns them. */
#ifndef PYPROFD_H
#define PYPROFD_H

#include <stdio.h>

#include "unwind.h"

/* Exit statuses of the one-shot commands, documented in README.md and --help. */
enum pyprofd_exit {
	EXIT_OK = 0,
	EXIT_FAILURE_OTHER = 1,
	EXIT_USAGE = 2,
	EXIT_NO_PROCESS = 3,
	EXIT_PERMISSION = 4,
	EXIT_NOT_PYTHON = 5,
	EXIT_UNSUPPORTED = 6,
	EXIT_EXITED = 7,
	EXIT_CORRUPT = 8,
};

/* main.c */
/* The exit status a command reports for an unwinder failure. */
int exit_status_of(enum uw_status status);
/* One stderr line for an option getopt rejected; returns EXIT_USAGE. */
int usage_bad_option(const char *command, const char *option);
/* The single PID operand left after the options; EXIT_OK or EXIT_USAGE (line printed). */
int parse_pid_operand(const char *command, int argc, char **argv, int optind_, pid_t *pid);

/* dump.c */
int cmd_dump(int argc, char **argv);

/* record.c */
int cmd_record(int argc, char **argv);

/* profile.c */
struct profile_line {
	char *text;
	uint64_t count;
};

/* Sample counts by stack id of one epoch, and spelled-out lines of past epochs. */
struct profile {
	uint64_t *counts;
	uint32_t counts_cap;
	uint64_t counts_epoch;
	bool touched;
	struct profile_line *lines;
	size_t nlines, lines_cap;
	uint64_t total;
};

void profile_init(struct profile *p);
void profile_free(struct profile *p);
/* Count one sample; -1 if out of memory or its epoch was not settled first. */
int profile_add(struct profile *p, const struct uw_sample *s);
/* Spell out the current epoch's counts (before the target resets its ids). */
int profile_settle(struct profile *p, const struct uw_target *t);
/* "frame;frame;... count" lines, root first, sorted. */
int profile_write_collapsed(struct profile *p, const struct uw_target *t, FILE *out);

#endif
