/*
 * pyprofd-ctl query: stacks of the history in any export format, a table
 * of functions, the processes a range has samples of, or its top traces.
 */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ctl.h"
#include "export.h"

const char ctl_query_usage[] =
	"usage: pyprofd-ctl query [--pid P | --target ID] [--label K=V]... [--since D | --from T [--until T]]\n"
	"                         [--thread TID] [--format F] [--limit N] [--idle | --no-idle]\n"
	"                         [--trace HEX32] [--span HEX16] [--context K=V]... [-o FILE]\n"
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
	"  --trace HEX32     only samples taken in this OpenTelemetry trace (32 hex\n"
	"                    digits)\n"
	"  --span HEX16      only samples taken in this span (16 hex digits)\n"
	"  --context K=V     only samples whose request context has this label (a\n"
	"                    ContextVar the daemon reads); repeat: all must match.\n"
	"                    Contexts are kept until the first retention step merges\n"
	"                    their buckets\n"
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
	"                    labels, first, last, samples}), or traces (the traces with\n"
	"                    the most samples, each with its first and last bucket and\n"
	"                    its spans of most samples; with --json an array of objects:\n"
	"                    {trace_id, samples, first, last, spans: [{span_id,\n"
	"                    samples}], spans_found}).  pprof labels each sample with\n"
	"                    its trace_id, span_id and context labels where it has them\n"
	"  --limit N         table: the first N functions (default: all); traces: the\n"
	"                    first N traces (default: 100)\n"
	"  -o, --output FILE write there instead of standard output; without --format\n"
	"                    its name's ending says the format: .html (flamegraph),\n"
	"                    .speedscope.json, .gecko.json, .json, .pb.gz or .pprof\n"
	"                    (pprof), .txt, .collapsed or .folded (collapsed); another\n"
	"                    ending is refused, none leaves the default\n";

/* The options only query takes. */
struct ctl_query_opts {
	Pyprofd__QueryRequest *q;
	bool table, processes, traces, per_thread;
	uint8_t trace_id[16], span_id[8];
	Pyprofd__Label *context; /* every --context is one argument, so argc bounds their number */
	Pyprofd__Label **context_ptrs;
	bool format_given;
	enum export_format format;
	double since;
};

/* HEX of exactly 2 * n digits into out; EXIT_OK or a usage error naming the option. */
static int ctl_query_hex(struct ctl *ctl, const char *option, const char *arg, uint8_t *out, size_t n,
                         ProtobufCBinaryData *field)
{
	size_t len = strlen(arg);
	bool ok = len == 2 * n && strspn(arg, "0123456789abcdefABCDEF") == len;
	for (size_t i = 0; ok && i < n; i++) {
		char byte[3] = {arg[2 * i], arg[2 * i + 1], '\0'};
		out[i] = (uint8_t)strtoul(byte, NULL, 16);
	}
	if (!ok)
		return ctl_usage_error(ctl, "%s takes %zu hex digits, not '%s'", option, 2 * n, arg);
	*field = (ProtobufCBinaryData){n, out};
	return EXIT_OK;
}

static int ctl_query_option(struct ctl *ctl, int opt, void *ctx)
{
	struct ctl_query_opts *o = ctx;
	switch (opt) {
	case 'R':
		return ctl_query_hex(ctl, "--trace", optarg, o->trace_id, sizeof o->trace_id, &o->q->trace_id);
	case 'N':
		return ctl_query_hex(ctl, "--span", optarg, o->span_id, sizeof o->span_id, &o->q->span_id);
	case 'C': {
		char *eq = strchr(optarg, '=');
		if (!eq || eq == optarg)
			return ctl_usage_error(ctl, "--context takes KEY=VALUE, not '%s'", optarg);
		/* q is set up as parsing starts: its room for these is given here. */
		o->q->context_labels = o->context_ptrs;
		Pyprofd__Label *l = &o->context[o->q->n_context_labels];
		*eq = '\0';
		pyprofd__label__init(l);
		l->key = optarg;
		l->value = eq + 1;
		o->q->context_labels[o->q->n_context_labels++] = l;
		return EXIT_OK;
	}
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
		o->traces = strcmp(optarg, "traces") == 0;
		if (!o->table && !o->processes && !o->traces &&
		    export_format_parse(optarg, &o->format) != 0)
			return ctl_usage_error(ctl, "unknown format '%s': query writes " EXPORT_FORMAT_NAMES
			                       ", table, processes or traces", optarg);
		return EXIT_OK;
	case 'P':
		o->per_thread = true;
		return EXIT_OK;
	}
	return EXIT_OK;
}

/* "YYYY-MM-DD HH:MM:SS" in UTC. */
static void ctl_query_utc(double unix_s, char *buf, size_t len)
{
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%.0f", unix_s);
}

/* An id as lowercase hex into out (2 * len + 1 bytes, len at most 16). */
static const char *ctl_query_id(const ProtobufCBinaryData *id, char *out)
{
	size_t n = id->len > 16 ? 16 : id->len;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", id->data[i]);
	return out;
}

/* One trace as JSON; NULL when out of memory. */
static json_t *ctl_query_trace_json(const Pyprofd__QueryTrace *t)
{
	char hex[33];
	json_t *spans = json_array();
	for (size_t i = 0; spans && i < t->n_spans; i++)
		if (json_array_append_new(spans, json_pack("{s:s, s:I}", "span_id",
		                                           ctl_query_id(&t->spans[i]->span_id, hex), "samples",
		                                           (json_int_t)t->spans[i]->samples)) != 0) {
			json_decref(spans);
			spans = NULL;
		}
	if (!spans)
		return NULL;
	return json_pack("{s:s, s:I, s:f, s:f, s:o, s:I}", "trace_id", ctl_query_id(&t->trace_id, hex),
	                 "samples", (json_int_t)t->samples, "first", t->first_unix, "last", t->last_unix,
	                 "spans", spans, "spans_found", (json_int_t)t->spans_found);
}

/* The traces an answer lists, as a table or JSON; 0 or -1. */
static int ctl_query_traces(const struct client_reply *reply, bool json, FILE *out)
{
	if (json) {
		json_t *list = json_array();
		for (size_t k = 0; list && k < reply->nparts; k++) {
			const Pyprofd__QueryResult *r = reply->parts[k]->query;
			for (size_t i = 0; list && i < r->n_traces; i++)
				if (json_array_append_new(list, ctl_query_trace_json(r->traces[i])) != 0) {
					json_decref(list);
					list = NULL;
				}
		}
		return export_json_write(list, out) || fflush(out) != 0 || ferror(out) ? -1 : 0;
	}
	fprintf(out, "%-32s  %10s  %-19s  %-19s  %s\n", "TRACE", "SAMPLES", "FIRST (UTC)", "LAST (UTC)",
	        "SPANS");
	for (size_t k = 0; k < reply->nparts; k++) {
		const Pyprofd__QueryResult *r = reply->parts[k]->query;
		for (size_t i = 0; i < r->n_traces; i++) {
			const Pyprofd__QueryTrace *t = r->traces[i];
			char hex[33], first[32], last[32];
			ctl_query_utc(t->first_unix, first, sizeof first);
			ctl_query_utc(t->last_unix, last, sizeof last);
			fprintf(out, "%-32s  %10llu  %-19s  %-19s ", ctl_query_id(&t->trace_id, hex),
			        (unsigned long long)t->samples, first, last);
			for (size_t n = 0; n < t->n_spans; n++)
				fprintf(out, " %s:%llu", ctl_query_id(&t->spans[n]->span_id, hex),
				        (unsigned long long)t->spans[n]->samples);
			if (t->spans_found > t->n_spans)
				fprintf(out, " (+%llu)", (unsigned long long)(t->spans_found - t->n_spans));
			fputc('\n', out);
		}
	}
	return fflush(out) != 0 || ferror(out) ? -1 : 0;
}

int ctl_query(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"since", required_argument, NULL, 's'}, {"from", required_argument, NULL, 'f'},
		{"until", required_argument, NULL, 'u'}, {"format", required_argument, NULL, 'F'},
		{"per-thread", no_argument, NULL, 'P'}, {"trace", required_argument, NULL, 'R'},
		{"span", required_argument, NULL, 'N'}, {"context", required_argument, NULL, 'C'},
		CTL_HISTORY_OPTIONS,
	};
	struct ctl_history_args h;
	Pyprofd__QueryRequest *q = &h.q;
	struct ctl_query_opts o = {.q = q, .format = EXPORT_COLLAPSED, .since = -1};
	char name[256] = "all processes";
	o.context = calloc((size_t)argc, sizeof *o.context);
	o.context_ptrs = calloc((size_t)argc, sizeof *o.context_ptrs);
	int status = EXIT_OK;
	if (!o.context || !o.context_ptrs) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		status = EXIT_FAILURE_OTHER;
		h = (struct ctl_history_args){0};
		goto out;
	}
	status = ctl_history_parse(ctl, argc, argv, options, ctl_query_option, &o, &h);
	if (status != EXIT_OK || h.done)
		goto out;
	/* Without --format the file's name says it: x.html a page, never collapsed text. */
	if (h.output && !o.format_given && export_format_of_file(h.output, &o.format) < 0) {
		status = ctl_usage_error(ctl, "cannot tell the format from the name '%s': give --format, "
		                         "or end it in " EXPORT_FORMAT_ENDINGS, h.output);
		goto out;
	}
	if (q->limit && !o.table && !o.traces) {
		status = ctl_usage_error(ctl, "--limit goes with --format table or traces");
		goto out;
	}
	bool stacks = !o.table && !o.processes && !o.traces;
	if (o.table)
		q->aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_FUNCTIONS;
	if (o.processes)
		q->aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
	if (o.traces)
		q->aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_TRACES;
	/* Stacks come per thread, with the threads' names and their processes' labels. */
	q->split_threads = stacks;
	/* pprof labels samples with their request context; other formats merge contexts. */
	q->split_contexts = stacks && o.format == EXPORT_PPROF;
	/* A page draws the samples over time: they come in slots. */
	if (stacks && (o.format == EXPORT_FLAMEGRAPH || o.format == EXPORT_HEATMAP))
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
		if (stacks && head->total && !head->rate_hz)
			fputs("pyprofd-ctl: the selected processes were sampled at different rates or in "
			      "different modes; times assume 100 Hz wall-clock samples\n",
			      stderr);
		int rc = o.table       ? ctl_history_table(reply, name, false, ctl->json, out)
		         : o.processes ? ctl_history_processes(reply, ctl->json, out)
		         : o.traces    ? ctl_query_traces(reply, ctl->json, out)
		                     : ctl_history_export((const struct client_reply *const[]){reply}, 1,
		                                          false, name, o.format, o.per_thread, out);
		status = ctl_history_output_close(out, h.output, rc);
		if (status == EXIT_OK && !head->total && !head->n_processes)
			ctl_history_warn_unmatched(ctl, q);
	}
	client_reply_free(reply);
out:
	ctl_history_args_free(&h);
	free(o.context);
	free(o.context_ptrs);
	return status;
}
