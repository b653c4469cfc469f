/* What the commands share on their command lines: option and PID errors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pyprofd.h"

int cli_bad_option(const char *command, const char *option)
{
	fprintf(stderr, "pyprofd: %s: unknown or incomplete option '%s' (see pyprofd %s --help)\n",
	        command, option, command);
	return EXIT_USAGE;
}

int cli_pid_operand(const char *command, int argc, char **argv, int optind_, pid_t *pid)
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
