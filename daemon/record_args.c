/*
 * `pyprofd record`'s command line: its options into struct record_opts,
 * checked, and its help.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "record.h"

static const char record_usage[] =
	"usage: pyprofd record PID [options]\n"
	"       pyprofd record [options] -- COMMAND [ARG...]\n"
	"\n"
	"Sample the Python stacks of process PID and write the profile, by default as\n"
	"collapsed stacks (\"frame;frame;... count\", root first, one frame as\n"
	"\"function (file:line)\").  Stops after --duration, when the process exits,\n"
	"or on SIGINT/SIGTERM.\n"
	"\n"
	"With -- COMMAND, start the command (its standard input and outputs are\n"
	"pyprofd's; -o is advised, so the profile does not mix with its output) and\n"
	"record it from its start with every process it starts, each attached once it\n"
	"runs Python (at most 256 processes).  When more than one was recorded, each\n"
	"stack is rooted under a frame \"process PID (COMMAND LINE)\".  Stops when the\n"
	"command exits; SIGINT or SIGTERM sent to pyprofd alone is sent on to the\n"
	"command, and the profile is written once it has exited; after --duration the\n"
	"profile is written, then pyprofd waits for the command.\n"
	"\n"
	"  --rate HZ|max       samples per second (default 100); max: back to back, the\n"
	"                      profile counting the ticks of a 100 kHz grid, each for the\n"
	"                      read nearest it\n"
	"  --duration S        seconds to record (default: until stopped)\n"
	"  --mode wall|cpu|gil|exception\n"
	"                      threads to sample: all (default), on CPU, holding the GIL,\n"
	"                      handling an exception (in except or finally with one set)\n"
	"  --native            the C frames of waiting threads too, in place (as root;\n"
	"                      else marks where C code sits between Python frames, 3.11+)\n"
	"  --gc                mark the thread running the garbage collector\n"
	"  --async-aware       asyncio programs (3.11+): a thread running a task is sampled\n"
	"                      as the task's stack: its coroutine frames, <task>:NAME,\n"
	"                      then the task awaiting it, down to the root task\n"
	"  --async-mode M      running (what --async-aware does) or all: every suspended\n"
	"                      task is sampled too, as an idle stack of its own\n"
	"  --no-cache          turn every cache off (for comparison)\n"
	"  --no-write          never write into the target (3.15's frame-cache marker)\n"
	"  --no-kernel-reader  never load the in-kernel reader (as root): threads whose stacks\n"
	"                      move under every read go uncounted (3.11-3.14), and /proc, not\n"
	"                      the kernel's look, proves which threads ran, and with --native\n"
	"                      running threads keep their <native> marks (for comparison)\n"
	"  --kernel-copy       have the kernel copy the target as it falls quiet (as root): a\n"
	"                      sample after its threads ran then pins none of its pages, but\n"
	"                      each of its threads pays about a microsecond at every switch\n"
	"                      away; stopped while they switch away often\n"
	"  --context otel      read each thread's OpenTelemetry span too (its cost shows in\n"
	"                      --stats: context_reads, context_torn)\n"
	"  --context-label NAME\n"
	"                      read the ContextVar NAME too; with a str or int value each\n"
	"                      stack is rooted under a frame \"NAME=VALUE\" (up to 8)\n"
	"  --provers-off LIST  turn off ways of proving a stack, to measure what each buys:\n"
	"                      look, marker, same_bytes, kernel_reader, process (stacks stay\n"
	"                      exact, at a higher cost)\n"
	"  -o, --output FILE   write the profile to FILE (default: standard output); without\n"
	"                      --format its name's ending says the format: .html\n"
	"                      (flamegraph), .speedscope.json, .gecko.json, .json,\n"
	"                      .pb.gz or .pprof (pprof), .txt, .collapsed or .folded;\n"
	"                      another ending is refused, none leaves the default\n"
	"  --format F          collapsed (default), flamegraph (one HTML file), heatmap\n"
	"                      (the same page with the process's sources, line by line),\n"
	"                      speedscope (a profile per thread), pprof (gzip'd\n"
	"                      protobuf), gecko (the Firefox Profiler's, a track per\n"
	"                      thread), json or table (the functions seen most, own\n"
	"                      and total), as pyprofd-ctl query writes them\n"
	"  --per-thread        collapsed: each stack under a first frame naming its thread\n"
	"  --no-idle           leave out the samples of waiting threads (off CPU without\n"
	"                      the GIL, or in a known wait: sleep, locks, select, recv)\n"
	"  --stats             print sampling statistics on standard error\n"
	"  --stats-json        print them as one JSON object, the last line of standard error\n"
	"\n"
	"exit status: as pyprofd dump (0 ok, 2 usage, 3 no such process, 4 permission\n"
	"denied, 5 not a Python process, 6 unsupported version, 1 other errors); with\n"
	"-- COMMAND, once the profile is written, the command's own exit status (128+N\n"
	"when signal N ended it), else 1 (the profile not written), 2 (usage), 126 (the\n"
	"command could not be run) or 127 (no such command)\n";

int record_parse(int argc, char **argv, struct record_opts *o)
{
	static const struct option options[] = {
		{"rate", required_argument, NULL, 'r'},
		{"duration", required_argument, NULL, 'd'},
		{"mode", required_argument, NULL, 'm'},
		{"native", no_argument, NULL, 'n'},
		{"gc", no_argument, NULL, 'g'},
		{"async-aware", no_argument, NULL, 'A'},
		{"async-mode", required_argument, NULL, 'M'},
		{"no-cache", no_argument, NULL, 'C'},
		{"no-write", no_argument, NULL, 'W'},
		{"no-kernel-reader", no_argument, NULL, 'K'},
		{"kernel-copy", no_argument, NULL, 'Q'},
		{"provers-off", required_argument, NULL, 'X'},
		{"context", required_argument, NULL, 'c'},
		{"context-label", required_argument, NULL, 'L'},
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, 'f'},
		{"stats", no_argument, NULL, 's'},
		{"stats-json", no_argument, NULL, 'j'},
		{"no-idle", no_argument, NULL, 'I'},
		{"per-thread", no_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	*o = (struct record_opts){.rate = 100,
	                          .uw = {.cache_budget = UW_DEFAULT_CACHE_BUDGET, .want_idle = true}};
	/* Everything after the first -- is the command: getopt sees the options before it alone. */
	int split = 1;
	while (split < argc && strcmp(argv[split], "--") != 0)
		split++;
	if (split < argc) {
		o->command = argv + split + 1;
		argc = split;
	}
	int opt;
	char *end;
	bool format_given = false;
	optind = 1;
	opterr = 0; /* one line of our own instead of getopt's */
	while ((opt = getopt_long(argc, argv, "o:h", options, NULL)) != -1) {
		switch (opt) {
		case 'r':
			if (strcmp(optarg, "max") == 0) {
				o->rate = 0;
				break;
			}
			o->rate = strtod(optarg, &end);
			if (*end || !(o->rate > 0 && o->rate <= 1e6)) {
				fprintf(stderr, "pyprofd: --rate takes a number of Hz (0 < HZ <= 1000000) or max\n");
				return EXIT_USAGE;
			}
			break;
		case 'd':
			o->duration = strtod(optarg, &end);
			if (*end || !(o->duration > 0)) {
				fprintf(stderr, "pyprofd: --duration takes a positive number of seconds\n");
				return EXIT_USAGE;
			}
			break;
		case 'm':
			if (vocab_mode_parse(optarg, &o->uw.mode) != 0) {
				fprintf(stderr, "pyprofd: --mode is wall, cpu, gil or exception\n");
				return EXIT_USAGE;
			}
			break;
		case 'n': o->uw.flags |= UW_SNAP_NATIVE; break;
		case 'g': o->uw.flags |= UW_SNAP_GC; break;
		case 'A':
			if (o->uw.async_mode == UW_ASYNC_OFF)
				o->uw.async_mode = UW_ASYNC_RUNNING;
			break;
		case 'M':
			if (vocab_async_mode_parse(optarg, &o->uw.async_mode) != 0 ||
			    o->uw.async_mode == UW_ASYNC_OFF) {
				fprintf(stderr, "pyprofd: --async-mode is running or all\n");
				return EXIT_USAGE;
			}
			break;
		case 'C': o->uw.no_cache = true; break;
		case 'W': o->uw.no_write = true; break;
		case 'K': o->no_kernel_reader = true; break;
		case 'Q': o->kernel_copy = true; break;
		case 'X': {
			char why[160];
			if (uw_provers_parse(optarg, &o->uw.provers_off, why, sizeof why) != 0) {
				fprintf(stderr, "pyprofd: --provers-off: %s\n", why);
				return EXIT_USAGE;
			}
			break;
		}
		case 'c':
		case 'L': {
			char why[256];
			struct context_spec spec = {.otel = o->uw.context_otel, .nlabels = o->uw.ncontext_labels};
			memcpy(spec.labels, o->uw.context_labels, sizeof spec.labels);
			if ((opt == 'c' ? context_spec_kind(&spec, optarg, why, sizeof why)
			                : context_spec_add_label(&spec, optarg, why, sizeof why)) != 0) {
				fprintf(stderr, "pyprofd: --%s: %s\n", opt == 'c' ? "context" : "context-label", why);
				return EXIT_USAGE;
			}
			context_spec_to_options(&spec, &o->uw);
			break;
		}
		case 'o': o->output = optarg; break;
		case 'f':
			format_given = true;
			o->table = strcmp(optarg, "table") == 0;
			if (!o->table && export_format_parse(optarg, &o->format) != 0) {
				fprintf(stderr, "pyprofd: unknown format '%s': record writes " EXPORT_FORMAT_NAMES
				                " or table\n", optarg);
				return EXIT_USAGE;
			}
			break;
		case 's': o->stats = true; break;
		case 'j': o->stats_json = true; break;
		case 'I': o->no_idle = true; break;
		case 'P': o->per_thread = true; break;
		case 'h': fputs(record_usage, stdout); return -1;
		default: return cli_bad_option("record", argv[optind - 1]);
		}
	}
	/* Without --format the file's name says it: x.html a page, never collapsed text. */
	if (o->output && !format_given && export_format_of_file(o->output, &o->format) < 0) {
		fprintf(stderr, "pyprofd: record: cannot tell the format from the name '%s': give --format, "
		                "or end it in " EXPORT_FORMAT_ENDINGS "\n", o->output);
		return EXIT_USAGE;
	}
	if (o->command && optind < argc) {
		fprintf(stderr, "pyprofd: record takes a PID or -- COMMAND, not both (see pyprofd record --help)\n");
		return EXIT_USAGE;
	}
	if (o->command && !o->command[0]) {
		fputs("pyprofd: record: no command after -- (see pyprofd record --help)\n", stderr);
		return EXIT_USAGE;
	}
	if (o->command)
		return EXIT_OK;
	if (optind >= argc) {
		fputs("pyprofd: record takes a PID or -- COMMAND (see pyprofd record --help)\n", stderr);
		return EXIT_USAGE;
	}
	return cli_pid_operand("record", argc, argv, optind, &o->pid);
}
