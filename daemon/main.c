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
	"  record [OPTIONS] -- COMMAND [ARG...]  record a command and the processes it starts\n"
	"\n"
	"Run `pyprofd COMMAND --help` for a command's options and exit statuses;\n"
	"`pyprofd --version` prints the version.\n";

/* Subcommands by name; an unknown one is a usage error. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{"serve", server_main},
	{"dump", dump_main},
	{"record", record_main},
};

int main(int argc, char **argv)
{
	if (argc >= 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
		printf("pyprofd %s (protocol %d)\n", PYPROFD_VERSION,
		       PYPROFD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT);
		return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAILURE_OTHER;
	}
	/* No command, or options first: the daemon. */
	if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "-h") != 0 &&
	                 strcmp(argv[1], "--help") != 0))
		return server_main(argc, argv);
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
