/* pyprofd: the profiler daemon and its one-shot commands. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"

static const char usage[] =
	"usage: pyprofd [serve] [OPTIONS]       run the daemon (pyprofd serve --help)\n"
	"       pyprofd COMMAND [ARGS]\n"
	"\n"
	"commands:\n"
	"  serve [OPTIONS]                       the daemon, in the foreground (the default)\n"
	"  dump PID [--json] [--native] [--gc]   print every thread's Python stack once\n"
	"  record PID [--rate HZ|max] [--duration S] [-o FILE] ...\n"
	"                                        sample a process and write its profile\n"
	"\n"
	"Run `pyprofd COMMAND --help` for a command's options and exit statuses.\n";

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

/* Subcommands by name; an unknown one is a usage error. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{"serve", cmd_serve},
	{"dump", cmd_dump},
	{"record", cmd_record},
};

int main(int argc, char **argv)
{
	/* No command, or options first: the daemon. */
	if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "-h") != 0 &&
	                 strcmp(argv[1], "--help") != 0))
		return cmd_serve(argc, argv);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		fputs(usage, stdout);
		return EXIT_OK;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "pyprofd: unknown command '%s' (try pyprofd --help)\n", argv[1]);
	return EXIT_USAGE;
}
