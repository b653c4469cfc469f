/* pyprofd-ctl: the command-line client of pyprofd, and the table of its commands. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* Commands by name; an unknown one is a usage error. */
static const struct ctl_command main_commands[] = {
	{"attach", ctl_live_attach, ctl_attach_usage}, {"detach", ctl_live_detach, ctl_detach_usage},
	{"list", ctl_live_list, ctl_list_usage},       {"dump", ctl_live_dump, ctl_dump_usage},
	{"stats", ctl_live_stats, ctl_stats_usage},    {"status", ctl_live_status, ctl_status_usage},
	{"top", top_main, ctl_top_usage},             {"query", ctl_query, ctl_query_usage},
	{"diff", ctl_diff, ctl_diff_usage},   {"rules", ctl_rules, ctl_rules_usage},
	{"export", ctl_backfill, ctl_backfill_usage},
};

int main(int argc, char **argv)
{
	static const struct option options[] = {{"version", no_argument, NULL, 'V'}, CTL_COMMON_OPTIONS};
	struct ctl ctl = {0};
	int opt, status;
	opterr = 0; /* one line of our own instead of getopt's */
	/* "+": stop at the command; its own options are parsed by it. */
	while ((opt = getopt_long(argc, argv, "+:hV", options, NULL)) != -1) {
		if (opt == 'V') {
			printf("pyprofd-ctl %s (protocol %d)\n", PYPROFD_VERSION,
			       PYPROFD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT);
			return ctl_finish(EXIT_OK);
		}
		if ((status = ctl_common_option(&ctl, opt, argv)) >= 0)
			return status;
	}
	if (optind >= argc)
		return ctl_usage_error(&ctl, "no command given");

	const char *name = argv[optind];
	for (size_t i = 0; i < sizeof main_commands / sizeof main_commands[0]; i++) {
		if (strcmp(name, main_commands[i].name) == 0) {
			ctl.cmd = &main_commands[i];
			int cargc = argc - optind;
			char **cargv = argv + optind;
			optind = 0; /* glibc: start over, with the command's own option string */
			return main_commands[i].run(&ctl, cargc, cargv);
		}
	}
	return ctl_usage_error(&ctl, "unknown command '%s'", name);
}
