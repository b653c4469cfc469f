/*
 * pyprofd-ctl diff: two ranges of the history side by side, as a table of
 * functions whose share moved, or as a page coloured by the change.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "ctl.h"
#include "export.h"

const char ctl_diff_usage[] =
	"usage: pyprofd-ctl diff [--pid P | --target ID] [--label K=V]... [--thread TID] [--limit N]\n"
	"                        --base FROM..UNTIL --compare FROM..UNTIL [--format F] [--json]\n"
	"                        [--idle | --no-idle] [-o FILE]\n"
	"\n"
	"Two ranges of the history side by side: each function's share of the samples\n"
	"(own and total) in the base range and in the compared one, the functions whose\n"
	"own share changed most first.  Shares, not counts, so ranges of different\n"
	"lengths compare fairly.  A time is unix seconds, local YYYY-MM-DDTHH:MM[:SS],\n"
	"now, or -D for D ago (-90s, -15m, -2h, -1d): --base -2h..-1h --compare -1h..now.\n"
	"The daemon counts and orders; one request answers both ranges.\n"
	"\n"
	"  --format F        table (default), or flamegraph: the compared range's graph,\n"
	"                    each frame coloured by how its share of the samples moved\n"
	"                    (red: up, blue: down), or heatmap: the same with sources\n"
	"  --limit N         the first N functions (default: all)\n"
	"  --no-idle, --idle leave out or keep the samples of waiting threads, both\n"
	"                    ranges (neither: the daemon's default, as query)\n"
	"  -o, --output FILE write there instead of standard output; without --format a\n"
	"                    name ending in .html asks for the flamegraph, .txt (or .json\n"
	"                    with --json) or no ending the table; another is refused\n"
	"  --json            one JSON object: {base_samples, compare_samples,\n"
	"                    functions_found, functions:\n"
	"                    [{function, file, base_own, base_total, compare_own,\n"
	"                    compare_total, own_percent_change, total_percent_change}]}\n";

/* A time of a diff range: as ctl_history_parse_time, or "now", or "-D" for D ago; -1 if none. */
double ctl_diff_parse_when(const char *arg, double now)
{
	if (strcmp(arg, "now") == 0)
		return now;
	if (arg[0] == '-') {
		double ago;
		return duration_parse(arg + 1, 0, CTL_DURATION_MAX, &ago) != 0 ? -1 : now - ago;
	}
	return ctl_history_parse_time(arg);
}

/* "FROM..UNTIL" into q; EXIT_OK or a usage error. */
int ctl_diff_parse_range(const struct ctl *ctl, const char *option, const char *arg, double now,
                         Pyprofd__QueryRequest *q)
{
	const char *dots = strstr(arg, "..");
	char from[64];
	if (!dots || (size_t)(dots - arg) >= sizeof from)
		return ctl_usage_error(ctl, "%s takes FROM..UNTIL, not '%s'", option, arg);
	memcpy(from, arg, (size_t)(dots - arg));
	from[dots - arg] = '\0';
	double a = ctl_diff_parse_when(from, now), b = ctl_diff_parse_when(dots + 2, now);
	if (a < 0 || b < 0 || b < a)
		return ctl_usage_error(ctl, "%s: '%s' is not a range of times (FROM..UNTIL)", option, arg);
	q->from_unix = a;
	q->until_unix = b > a ? b : a + 1e-6;
	return EXIT_OK;
}

/* The ranges and format only diff takes. */
struct ctl_diff_opts {
	Pyprofd__QueryRequest *compare, *base;
	double now;
	bool have_base, have_compare;
	bool page; /* a flamegraph or heatmap, not the table */
	bool format_given;
	enum export_format format;
};

static int ctl_diff_option(struct ctl *ctl, int opt, void *ctx)
{
	struct ctl_diff_opts *o = ctx;
	int status = EXIT_OK;
	if (opt == 'b') {
		status = ctl_diff_parse_range(ctl, "--base", optarg, o->now, o->base);
		o->have_base = status == EXIT_OK;
	} else if (opt == 'c') {
		status = ctl_diff_parse_range(ctl, "--compare", optarg, o->now, o->compare);
		o->have_compare = status == EXIT_OK;
	} else if (opt == 'F') {
		o->format_given = true;
		o->page = strcmp(optarg, "table") != 0;
		if (o->page && (export_format_parse(optarg, &o->format) != 0 ||
		                (o->format != EXPORT_FLAMEGRAPH && o->format != EXPORT_HEATMAP)))
			status = ctl_usage_error(ctl, "diff writes table, flamegraph or heatmap, not '%s'", optarg);
	}
	return status;
}

/*
 * diff as a page: the stacks of the compared range and of the base range,
 * one query each with the same selection, drawn as the compared range's
 * graph coloured by the change.  The exit status.
 */
static int ctl_diff_page(struct ctl *ctl, struct ctl_history_args *h,
                         const Pyprofd__QueryRequest *base_range, enum export_format format)
{
	Pyprofd__QueryRequest *q = &h->q, base = *q;
	q->aggregate = base.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_STACKS;
	q->split_threads = base.split_threads = true;
	base.from_unix = base_range->from_unix;
	base.until_unix = base_range->until_unix;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT, base_req = PYPROFD__REQUEST__INIT;
	req.body_case = base_req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = q;
	base_req.query = &base;
	int status;
	struct client_reply *compared = ctl_call(ctl, &req, &status), *based = NULL;
	if (compared && (based = ctl_call(ctl, &base_req, &status))) {
		char name[256] = "all processes";
		ctl_history_name(q, name, sizeof name);
		FILE *out = ctl_history_output_open(h->output);
		status = out ? ctl_history_output_close(
		                       out, h->output,
		                       ctl_history_export((const struct client_reply *const[]){compared, based},
		                                          2, true, name, format, false, out))
		             : EXIT_FAILURE_OTHER;
		if (status == EXIT_OK && !compared->parts[0]->query->total && !based->parts[0]->query->total)
			ctl_history_warn_unmatched(ctl, q);
	}
	client_reply_free(compared);
	client_reply_free(based);
	return status;
}

int ctl_diff(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"base", required_argument, NULL, 'b'},
		{"compare", required_argument, NULL, 'c'},
		{"format", required_argument, NULL, 'F'},
		CTL_HISTORY_OPTIONS,
	};
	/* The compared range is the query's own; the base range rides along in base_*. */
	struct ctl_history_args h;
	Pyprofd__QueryRequest *q = &h.q, base = PYPROFD__QUERY_REQUEST__INIT;
	struct client_reply *reply = NULL;
	struct ctl_diff_opts o = {.compare = q, .base = &base, .now = clock_wall_s()};
	int status = ctl_history_parse(ctl, argc, argv, options, ctl_diff_option, &o, &h);
	if (status != EXIT_OK || h.done)
		goto out;
	/* Without --format an .html file asks for the page; a table goes to text (or JSON) alone. */
	enum export_format named;
	int known = h.output && !o.format_given ? export_format_of_file(h.output, &named) : 1;
	if (known == 0 && named == EXPORT_FLAMEGRAPH) {
		o.page = true;
		o.format = named;
	} else if (known < 0 || (known == 0 && named != EXPORT_COLLAPSED && !(ctl->json && named == EXPORT_JSON))) {
		status = ctl_usage_error(ctl, "diff writes a table (.txt, or .json with --json) or a flamegraph "
		                         "(.html), not what '%s' names: give --format", h.output);
		goto out;
	}
	if (!o.have_base || !o.have_compare) {
		status = ctl_usage_error(ctl, "diff needs --base and --compare");
		goto out;
	}
	if (o.page) {
		status = q->limit ? ctl_usage_error(ctl, "--limit goes with the table")
		         : ctl->json ? ctl_usage_error(ctl, "--json goes with the table")
		                     : ctl_diff_page(ctl, &h, &base, o.format);
		goto out;
	}
	q->aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_DIFF;
	q->base_from_unix = base.from_unix;
	q->base_until_unix = base.until_unix;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = q;
	if (!(reply = ctl_call(ctl, &req, &status)))
		goto out;
	FILE *out = ctl_history_output_open(h.output);
	status = out ? ctl_history_output_close(out, h.output,
	                                        ctl_history_table(reply, NULL, true, ctl->json, out))
	             : EXIT_FAILURE_OTHER;
	const Pyprofd__QueryResult *head = reply->parts[0]->query;
	if (status == EXIT_OK && !head->total && !head->base_total)
		ctl_history_warn_unmatched(ctl, q);
out:
	client_reply_free(reply);
	ctl_history_args_free(&h);
	return status;
}
