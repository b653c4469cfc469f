/*
 * pyprofd-ctl query: stacks of the history in any export format, a table
 * of functions, or the processes a range has samples of.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "ctl.h"
#include "export.h"

const char ctl_query_usage[] =
	"usage: pyprofd-ctl query [--pid P | --target ID] [--label K=V]... [--since D | --from T [--until T]]\n"
	"                         [--thread TID] [--format F] [--limit N] [--idle | --no-idle]\n"
	"                         [-o FILE]\n"
	"\n"
	"What the history holds: the stored samples of the selected processes in a time\n"
	"range, aggregated by stack (samples not yet written to the database included).\n"
	"A user other than root sees only its own processes.\n"
	"\n"
	"  --pid P           one process (by pid; every process that had it)\n"
	"  --target ID       one process by its id in the history (--format processes)\n"
	"  --label K=V       processes attached with this label; repeat: all must match\n"
	"  --since D         the last D: 90s, 15m, 2h, 1d (default: everything stored)\n"
	"  --from T, --until T\n"
	"                    a range: unix seconds, or local time YYYY-MM-DDTHH:MM[:SS]\n"
	"  --thread TID      one thread (threading.get_ident())\n"
	"  --no-idle         leave out the samples of waiting threads (off CPU without\n"
	"                    the GIL, or in a known wait)\n"
	"  --idle            keep them, whatever the daemon's default (the last of the\n"
	"                    two wins; neither: the daemon's [sampling] idle, keep\n"
	"                    unless set; status shows it as sampling.idle)\n"
	"  --format F        collapsed (default), flamegraph (one HTML file), heatmap (the\n"
	"                    same page with the sources, read now, line by line),\n"
	"                    speedscope, pprof (gzip'd protobuf), gecko, table (top\n"
	"                    functions, counted by\n"
	"                    the daemon; with --json one object: {name, mode, from, until,\n"
	"                    samples, functions_found, functions: [{function, file, own,\n"
	"                    total, own_percent, total_percent}]}), json, or processes\n"
	"                    (which processes the range has samples of, and their\n"
	"                    target ids; with --json an array of objects: {target_id,\n"
	"                    pid, uid, executable, command_line, python_version,\n"
	"                    labels, first, last, samples})\n"
	"  --limit N         table: the first N functions (default: all)\n"
	"  -o, --output FILE write there instead of standard output; without --format\n"
	"                    its name's ending says the format: .html (flamegraph),\n"
	"                    .speedscope.json, .gecko.json, .json, .pb.gz or .pprof\n"
	"                    (pprof), .txt, .collapsed or .folded (collapsed); another\n"
	"                    ending is refused, none leaves the default\n";

/* The options only query takes. */
struct ctl_query_opts {
	Pyprofd__QueryRequest *q;
	bool table, processes, per_thread;
	bool format_given;
	enum export_format format;
	double since;
};

static int ctl_query_option(struct ctl *ctl, int opt, void *ctx)
{
	struct ctl_query_opts *o = ctx;
	switch (opt) {
	case 's':
		if (duration_parse(optarg, 0, CTL_DURATION_MAX, &o->since) != 0)
			return ctl_usage_error(ctl, "--since takes a duration such as 90s, 15m, 2h or 1d");
		return EXIT_OK;
	case 'f':
	case 'u': {
		double t = ctl_history_parse_time(optarg);
		if (t < 0)
			return ctl_usage_error(ctl, "--%s takes unix seconds or YYYY-MM-DDTHH:MM[:SS]",
			                       opt == 'f' ? "from" : "until");
		*(opt == 'f' ? &o->q->from_unix : &o->q->until_unix) = t;
		return EXIT_OK;
	}
	case 'F':
		o->format_given = true;
		/* The table is counted by the daemon; the other formats are written from stacks. */
		o->table = strcmp(optarg, "table") == 0;
		o->processes = strcmp(optarg, "processes") == 0;
		if (!o->table && !o->processes && export_format_parse(optarg, &o->format) != 0)
			return ctl_usage_error(ctl, "unknown format '%s': query writes " EXPORT_FORMAT_NAMES
			                       ", table or processes", optarg);
		return EXIT_OK;
	case 'P':
		o->per_thread = true;
		return EXIT_OK;
	}
	return EXIT_OK;
}

int ctl_query(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"since", required_argument, NULL, 's'}, {"from", required_argument, NULL, 'f'},
		{"until", required_argument, NULL, 'u'}, {"format", required_argument, NULL, 'F'},
		{"per-thread", no_argument, NULL, 'P'},
		CTL_HISTORY_OPTIONS,
	};
	struct ctl_history_args h;
	Pyprofd__QueryRequest *q = &h.q;
	struct ctl_query_opts o = {.q = q, .format = EXPORT_COLLAPSED, .since = -1};
	char name[256] = "all processes";
	int status = ctl_history_parse(ctl, argc, argv, options, ctl_query_option, &o, &h);
	if (status != EXIT_OK || h.done)
		goto out;
	/* Without --format the file's name says it: x.html a page, never collapsed text. */
	if (h.output && !o.format_given && export_format_of_file(h.output, &o.format) < 0) {
		status = ctl_usage_error(ctl, "cannot tell the format from the name '%s': give --format, "
		                         "or end it in " EXPORT_FORMAT_ENDINGS, h.output);
		goto out;
	}
	if (q->limit && !o.table) {
		status = ctl_usage_error(ctl, "--limit goes with --format table");
		goto out;
	}
	if (o.table)
		q->aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_FUNCTIONS;
	if (o.processes)
		q->aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
	/* Stacks come per thread, with the threads' names and their processes' labels. */
	q->split_threads = !o.table && !o.processes;
	/* A page draws the samples over time: they come in slots. */
	if (!o.table && !o.processes && (o.format == EXPORT_FLAMEGRAPH || o.format == EXPORT_HEATMAP))
		q->time_slots = CTL_HISTORY_PAGE_SLOTS;
	ctl_history_name(q, name, sizeof name);
	if (o.since >= 0) {
		if (q->from_unix || q->until_unix) {
			status = ctl_usage_error(ctl, "--since and --from/--until do not go together");
			goto out;
		}
		q->from_unix = floor(clock_wall_s()) - o.since;
	}
	if (q->until_unix && q->until_unix < q->from_unix) {
		status = ctl_usage_error(ctl, "--until is before --from");
		goto out;
	}

	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = q;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		goto out;
	FILE *out = ctl_history_output_open(h.output);
	if (!out) {
		status = EXIT_FAILURE_OTHER;
	} else {
		const Pyprofd__QueryResult *head = reply->parts[0]->query;
		if (!o.table && !o.processes && head->total && !head->rate_hz)
			fputs("pyprofd-ctl: the selected processes were sampled at different rates or in "
			      "different modes; times assume 100 Hz wall-clock samples\n",
			      stderr);
		int rc = o.table       ? ctl_history_table(reply, name, false, ctl->json, out)
		         : o.processes ? ctl_history_processes(reply, ctl->json, out)
		                     : ctl_history_export((const struct client_reply *const[]){reply}, 1,
		                                          false, name, o.format, o.per_thread, out);
		status = ctl_history_output_close(out, h.output, rc);
		if (status == EXIT_OK && !head->total && !head->n_processes)
			ctl_history_warn_unmatched(ctl, q);
	}
	client_reply_free(reply);
out:
	ctl_history_args_free(&h);
	return status;
}
