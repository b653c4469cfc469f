/* What the commands share on their command lines: exit statuses, option and PID errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pyprofd.h"

int exit_status_of(enum uw_status status)
{
	switch (status) {
	case UW_OK: return EXIT_OK;
	case UW_ENOPROC: return EXIT_NO_PROCESS;
	case UW_EPERM: return EXIT_PERMISSION;
	case UW_ENOTPYTHON: return EXIT_NOT_PYTHON;
	case UW_EVERSION: return EXIT_UNSUPPORTED;
	case UW_EGONE: return EXIT_EXITED;
	case UW_ECORRUPT: return EXIT_CORRUPT;
	case UW_ENOMEM:
	case UW_EIO: break;
	}
	return EXIT_FAILURE_OTHER;
}

int usage_bad_option(const char *command, const char *option)
{
	fprintf(stderr, "pyprofd: %s: unknown or incomplete option '%s' (see pyprofd %s --help)\n",
	        command, option, command);
	return EXIT_USAGE;
}

int parse_pid_operand(const char *command, int argc, char **argv, int optind_, pid_t *pid)
{
	if (optind_ + 1 != argc) {
		fprintf(stderr, "pyprofd: %s takes exactly one PID (see pyprofd %s --help)\n", command,
		        command);
		return EXIT_USAGE;
	}
	const char *arg = argv[optind_];
	char *end;
	long value = strtol(arg, &end, 10);
	if (*arg == '\0' || *end != '\0' || value <= 0 || value > INT32_MAX) {
		fprintf(stderr, "pyprofd: '%s' is not a process id\n", arg);
		return EXIT_USAGE;
	}
	*pid = (pid_t)value;
	return EXIT_OK;
}
