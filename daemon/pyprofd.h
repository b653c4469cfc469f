/* pyprofd's internal interfaces, grouped by the file that owns them. */
#ifndef PYPROFD_H
#define PYPROFD_H

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

/* dump.c */
int cmd_dump(int argc, char **argv);

#endif
