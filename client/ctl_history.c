/*
 * pyprofd-ctl's commands on the history: query (stacks in any format, a
 * table of functions, the processes a range has samples of) and diff.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ctl.h"
#include "export.h"

const char ctl_query_usage[] =
	"usage: pyprofd-ctl query [--pid P | --target ID] [--label K=V]... [--since D | --from T [--until T]]\n"
	"                         [--thread TID] [--format F] [--limit N] [-o FILE]\n"
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
	"  -o, --output FILE write there instead of standard output\n";

const char ctl_diff_usage[] =
	"usage: pyprofd-ctl diff [--pid P | --target ID] [--label K=V]... [--thread TID] [--limit N]\n"
	"                        --base FROM..UNTIL --compare FROM..UNTIL [--format F] [--json]\n"
	"                        [-o FILE]\n"
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
	"  --json            one JSON object: {base_samples, compare_samples,\n"
	"                    functions_found, functions:\n"
	"                    [{function, file, base_own, base_total, compare_own,\n"
	"                    compare_total, own_percent_change, total_percent_change}]}\n";

/* --- query --- */

/* -o's file, or standard output without one; NULL (said on stderr) if it cannot be written. */
static FILE *ctl_history_output_open(const char *path)
{
	FILE *out = path ? fopen(path, "wb") : stdout;
	if (!out)
		fprintf(stderr, "pyprofd-ctl: cannot write %s: %s\n", path, strerror(errno));
	return out;
}

/* Closes what ctl_history_output_open gave after a writer returned rc; the exit status. */
static int ctl_history_output_close(FILE *out, const char *path, int rc)
{
	if (path && fclose(out) != 0)
		rc = -1;
	if (rc != 0) {
		fprintf(stderr, "pyprofd-ctl: cannot write %s: %s\n", path ? path : "the output",
		        strerror(errno));
		return EXIT_FAILURE_OTHER;
	}
	return path ? EXIT_OK : ctl_finish(EXIT_OK);
}

/* Unix seconds, or local time YYYY-MM-DDTHH:MM[:SS]; -1 if neither. */
double ctl_history_parse_time(const char *arg)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	if (end != arg && *end == '\0' && errno == 0 && v >= 0)
		return v;
	struct tm tm = {0};
	const char *rest = strptime(arg, "%Y-%m-%dT%H:%M", &tm);
	if (rest && *rest == ':')
		rest = strptime(rest, ":%S", &tm);
	if (!rest || *rest)
		return -1;
	tm.tm_isdst = -1;
	time_t t = mktime(&tm);
	return t == (time_t)-1 ? -1 : (double)t;
}

/* The options ctl_history_option reads, after each command's own; last, as they end the table. */
#define CTL_HISTORY_OPTIONS                                                                        \
	{"no-idle", no_argument, NULL, 'I'},                                                       \
	{"pid", required_argument, NULL, 'p'}, {"label", required_argument, NULL, 'l'},              \
		{"thread", required_argument, NULL, 't'}, {"target", required_argument, NULL, 'T'},  \
		{"output", required_argument, NULL, 'o'}, {"limit", required_argument, NULL, 'n'},   \
		CTL_COMMON_OPTIONS

/* What query and diff take alike: which processes and threads, --limit, -o. */
struct ctl_history_args {
	Pyprofd__QueryRequest q;
	Pyprofd__Label *labels; /* every label is one argument, so argc bounds their number */
	Pyprofd__Label **label_ptrs;
	const char *output;
	bool done; /* --help was printed */
};

/* Room for the labels; EXIT_OK, or EXIT_FAILURE_OTHER said on stderr. */
static int ctl_history_args_init(struct ctl_history_args *h, int argc)
{
	*h = (struct ctl_history_args){.q = PYPROFD__QUERY_REQUEST__INIT};
	h->labels = calloc((size_t)argc, sizeof *h->labels);
	h->label_ptrs = calloc((size_t)argc, sizeof *h->label_ptrs);
	h->q.labels = h->label_ptrs;
	if (!h->labels || !h->label_ptrs) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	return EXIT_OK;
}

static void ctl_history_args_free(struct ctl_history_args *h)
{
	free(h->labels);
	free(h->label_ptrs);
}

/*
 * An option query and diff share, into h: --pid, --target, --label,
 * --thread, --limit, -o and the common ones.  -1 when opt is none of them;
 * else EXIT_OK (h->done after --help) or a usage error.
 */
static int ctl_history_option(struct ctl *ctl, int opt, char **argv, struct ctl_history_args *h)
{
	Pyprofd__QueryRequest *q = &h->q;
	switch (opt) {
	case 'p': {
		uint32_t u;
		int status = ctl_parse_u32(ctl, "--pid", optarg, 1, &u);
		if (status == EXIT_OK && u > INT32_MAX)
			status = ctl_usage_error(ctl, "'%s' is not a process id", optarg);
		q->pid = (int32_t)u;
		return status;
	}
	case 'l': {
		char *eq = strchr(optarg, '=');
		if (!eq || eq == optarg)
			return ctl_usage_error(ctl, "--label takes KEY=VALUE, not '%s'", optarg);
		*eq = '\0';
		Pyprofd__Label *l = &h->labels[q->n_labels];
		pyprofd__label__init(l);
		l->key = optarg;
		l->value = eq + 1;
		q->labels[q->n_labels++] = l;
		return EXIT_OK;
	}
	case 'T': {
		char *end;
		errno = 0;
		long long id = strtoll(optarg, &end, 10);
		if (*optarg < '1' || *optarg > '9' || *end || errno || id <= 0)
			return ctl_usage_error(ctl, "--target takes a target id (query --format processes "
			                            "lists them), not '%s'", optarg);
		q->target_id = id;
		return EXIT_OK;
	}
	case 't': {
		char *end;
		errno = 0;
		q->thread_id = strtoull(optarg, &end, 10);
		q->by_thread = true;
		if (*optarg < '0' || *optarg > '9' || *end || errno)
			return ctl_usage_error(ctl, "--thread takes a thread id, not '%s'", optarg);
		return EXIT_OK;
	}
	case 'n':
		return ctl_parse_u32(ctl, "--limit", optarg, 0, &q->limit);
	case 'I':
		q->no_idle = true;
		return EXIT_OK;
	case 'o':
		h->output = optarg;
		return EXIT_OK;
	case 'j':
	case 'S':
	case 'h':
	case ':':
	case '?': {
		int status = ctl_common_option(ctl, opt, argv);
		if (status < 0)
			return EXIT_OK;
		h->done = status == EXIT_OK;
		return status;
	}
	}
	return -1;
}

/*
 * Room for the labels, then argv's options into h; each one neither shares
 * goes to the command's own(ctl, opt, ctx).  EXIT_OK (h->done after --help)
 * or the first error, said on stderr; h is freed by the caller either way.
 */
static int ctl_history_parse(struct ctl *ctl, int argc, char **argv, const struct option *options,
                             int (*own)(struct ctl *ctl, int opt, void *ctx), void *ctx,
                             struct ctl_history_args *h)
{
	int status = ctl_history_args_init(h, argc), opt;
	while (status == EXIT_OK && !h->done &&
	       (opt = getopt_long(argc, argv, ":ho:", options, NULL)) != -1) {
		status = ctl_history_option(ctl, opt, argv, h);
		if (status < 0)
			status = own(ctl, opt, ctx);
	}
	if (status != EXIT_OK || h->done)
		return status;
	return ctl_no_operand(ctl, argc, argv);
}

/* The columns of the processes table before its Python version, labels and command: fields_process. */
static const struct {
	const char *key, *header;
	int width, gap; /* width < 0: to the right */
} ctl_history_process_columns[] = {
	{"target_id", "TARGET", 9, 1},   {"pid", "PID", 8, 1},          {"uid", "UID", 6, 1},
	{"first", "FIRST (UTC)", 19, 2}, {"last", "LAST (UTC)", 19, 1}, {"samples", "SAMPLES", -10, 2},
};
#define PROCESS_NCOLS (sizeof ctl_history_process_columns / sizeof ctl_history_process_columns[0])

/* One cell of the processes table, padded to its column. */
static void ctl_history_process_cell(FILE *out, size_t k, const char *text)
{
	int width = ctl_history_process_columns[k].width;
	fprintf(out, "%*s%*s", -width, text, ctl_history_process_columns[k].gap, "");
}

/* One row of the processes table; 0, or -1 if out of memory. */
static int ctl_history_process_row(const Pyprofd__StoredProcess *p, FILE *out)
{
	for (size_t k = 0; k < PROCESS_NCOLS; k++) {
		char *cell = fields_cell(p, fields_find(fields_process, fields_nprocess,
		                                        ctl_history_process_columns[k].key));
		if (!cell)
			return -1;
		ctl_history_process_cell(out, k, cell);
		free(cell);
	}
	export_put(out, *export_str(p->python_version) ? p->python_version : "-", 16, 8);
	fputc(' ', out);
	char *labels = fields_cell(p, fields_find(fields_process, fields_nprocess, "labels"));
	if (!labels)
		return -1;
	export_put(out, labels, SIZE_MAX, 0);
	free(labels);
	fputs(p->n_labels ? "  " : " ", out);
	export_put(out, *export_str(p->command_line) ? p->command_line : export_str(p->executable), 200, 0);
	fputc('\n', out);
	return 0;
}

/* The processes a range has samples of (every part), as a table or one JSON array. */
static int ctl_history_processes(const struct client_reply *reply, bool json, FILE *out)
{
	if (json) {
		json_t *list = json_array();
		for (size_t k = 0; list && k < reply->nparts; k++) {
			const Pyprofd__QueryResult *r = reply->parts[k]->query;
			for (size_t i = 0; list && i < r->n_processes; i++)
				if (json_array_append_new(list, fields_json(r->processes[i], fields_process,
				                                            fields_nprocess)) != 0) {
					json_decref(list);
					list = NULL;
				}
		}
		return export_json_write(list, out) || fflush(out) != 0 || ferror(out) ? -1 : 0;
	}
	for (size_t k = 0; k < PROCESS_NCOLS; k++)
		ctl_history_process_cell(out, k, ctl_history_process_columns[k].header);
	fprintf(out, "%-8s %s\n", "PYTHON", "LABELS  COMMAND");
	for (size_t k = 0; k < reply->nparts; k++) {
		const Pyprofd__QueryResult *r = reply->parts[k]->query;
		for (size_t i = 0; i < r->n_processes; i++)
			if (ctl_history_process_row(r->processes[i], out) != 0)
				return -1;
	}
	return fflush(out) != 0 || ferror(out) ? -1 : 0;
}

/* A function table or diff answered in parts, written as one table; 0 or -1. */
static int ctl_history_table(const struct client_reply *reply, const char *name, bool diff, bool json,
                           FILE *out)
{
	size_t n = 0;
	for (size_t p = 0; p < reply->nparts; p++)
		n += reply->parts[p]->query->n_functions;
	Pyprofd__FunctionRow **rows = calloc(n ? n : 1, sizeof *rows);
	if (!rows)
		return -1;
	for (size_t p = 0, k = 0; p < reply->nparts; p++)
		for (size_t i = 0; i < reply->parts[p]->query->n_functions; i++)
			rows[k++] = reply->parts[p]->query->functions[i];
	const Pyprofd__QueryResult *head = reply->parts[0]->query;
	struct export_table t = {
		.rows = rows,
		.nrows = n,
		.functions_found = head->functions_found,
		.name = name,
		.mode = export_str(head->mode),
		.rate_hz = head->rate_hz,
		.from_unix = head->from_unix,
		.until_unix = head->until_unix,
		.total = head->total,
		.diff = diff,
		.base_total = head->base_total,
		.base_from_unix = head->base_from_unix,
		.base_until_unix = head->base_until_unix,
	};
	int rc = export_table_write(&t, json, out);
	free(rows);
	return rc;
}

/*
 * The range a profile covers: the buckets its samples are in, within the
 * range asked for, so an open range ("everything stored") does not start
 * at 1970.  An empty answer covers no time at all.
 */
static void ctl_history_covered(const Pyprofd__QueryResult *head, double *from, double *until)
{
	*from = head->from_unix;
	*until = head->until_unix;
	if (head->total && head->first_unix > 0) {
		if (head->first_unix > *from)
			*from = head->first_unix;
		if (head->last_unix < *until)
			*until = head->last_unix;
		if (*until < *from)
			*until = *from;
	} else if (!head->total) {
		*from = *until;
	}
}

/* What export writers need of replies' threads and stacks, owned together. */
struct ctl_history_profile {
	struct export_frame *frames;
	struct export_stack *stacks;
	struct export_thread *threads;
	struct export_label *labels;
	struct export_sources sources;
};

static void ctl_history_profile_free(struct ctl_history_profile *h)
{
	free(h->frames);
	free(h->stacks);
	free(h->threads);
	free(h->labels);
	export_sources_free(&h->sources);
}

/* A page's time slots: about one per 5 pixels of a wide screen. */
#define CTL_HISTORY_PAGE_SLOTS 240

/*
 * Answers to stack queries (all parts of each; a diff's base range last,
 * marked base) as the export writers take them.  The first answer heads
 * the profile; a heatmap gets the sources of its files, read here (see
 * export_sources_read).
 */
static int ctl_history_export(const struct client_reply *const *replies, size_t nreplies, bool diff,
                              const char *name, enum export_format format, bool per_thread, FILE *out)
{
	size_t nframes = 0, nstacks = 0, nthreads = 0, nlabels = 0, nrefs = 0;
	for (size_t k = 0; k < nreplies; k++)
		for (size_t i = 0; i < replies[k]->nparts; i++) {
			const Pyprofd__QueryResult *r = replies[k]->parts[i]->query;
			nframes += r->n_frames;
			nstacks += r->n_stacks;
			nthreads += r->n_threads;
			for (size_t m = 0; m < r->n_threads; m++)
				nlabels += r->threads[m]->n_labels;
			for (size_t m = 0; m < r->n_stacks; m++)
				nrefs += r->stacks[m]->n_frames;
		}
	if (nframes > UINT32_MAX || nstacks > UINT32_MAX || nthreads > UINT32_MAX)
		return -1;
	struct ctl_history_profile h = {
		.frames = calloc(nframes ? nframes : 1, sizeof *h.frames),
		.stacks = calloc(nstacks ? nstacks : 1, sizeof *h.stacks),
		.threads = calloc(nthreads ? nthreads : 1, sizeof *h.threads),
		.labels = calloc(nlabels ? nlabels : 1, sizeof *h.labels),
	};
	/* Stacks name their reply's frames: the frames of the replies before it come first. */
	uint32_t *ids = calloc(nrefs ? nrefs : 1, sizeof *ids), *next = ids;
	int rc = -1;
	if (!h.frames || !h.stacks || !h.threads || !h.labels || !ids)
		goto out;
	size_t f = 0, s = 0, t = 0, l = 0;
	for (size_t k = 0; k < nreplies; k++) {
		size_t f0 = f, t0 = t;
		for (size_t i = 0; i < replies[k]->nparts; i++) {
			const Pyprofd__QueryResult *r = replies[k]->parts[i]->query;
			for (size_t m = 0; m < r->n_frames; m++, f++) {
				const Pyprofd__QueryFrame *qf = r->frames[m];
				h.frames[f] = (struct export_frame){
					.function = export_str(qf->function),
					.file = export_str(qf->file),
					.line = qf->line,
					.kind = vocab_kind_parse(qf->kind),
					.first_line = qf->first_line,
				};
			}
			for (size_t m = 0; m < r->n_threads; m++, t++) {
				const Pyprofd__ThreadInfo *ti = r->threads[m];
				h.threads[t] = (struct export_thread){.thread_id = ti->thread_id,
				                                      .native_id = ti->native_thread_id,
				                                      .name = export_str(ti->name),
				                                      .pid = ti->pid,
				                                      .start_time = ti->process_start_time,
				                                      .labels = &h.labels[l],
				                                      .nlabels = (uint32_t)ti->n_labels};
				for (size_t n = 0; n < ti->n_labels; n++, l++)
					h.labels[l] = (struct export_label){export_str(ti->labels[n]->key),
					                                    export_str(ti->labels[n]->value)};
			}
			for (size_t m = 0; m < r->n_stacks; m++, s++) {
				const Pyprofd__QueryStack *qs = r->stacks[m];
				/* A frame the daemon has not sent (a broken answer) fails the export. */
				for (size_t d = 0; d < qs->n_frames; d++)
					next[d] = qs->frames[d] < f - f0 ? (uint32_t)(f0 + qs->frames[d]) : UINT32_MAX;
				/* A thread the daemon has not sent (a broken answer) is no thread. */
				uint32_t thread = qs->thread && qs->thread <= t - t0 ? (uint32_t)(t0 + qs->thread) : 0;
				h.stacks[s] = (struct export_stack){
					.frames = next,
					.depth = (uint32_t)qs->n_frames,
					.count = qs->count,
					.idle = qs->idle <= qs->count ? qs->idle : qs->count,
					.thread = thread,
					.thread_id = thread ? h.threads[thread - 1].thread_id : 0,
					.slot_start = qs->slot_start,
					.base = diff && k == nreplies - 1,
				};
				next += qs->n_frames;
			}
		}
	}
	const Pyprofd__QueryResult *head = replies[0]->parts[0]->query;
	struct export_profile p = {
		.frames = h.frames,
		.nframes = (uint32_t)nframes,
		.stacks = h.stacks,
		.nstacks = (uint32_t)nstacks,
		.threads = h.threads,
		.nthreads = (uint32_t)nthreads,
		.per_thread = per_thread,
		.name = name,
		.mode = head->mode && *head->mode ? head->mode : "wall",
		.rate_hz = head->rate_hz ? head->rate_hz : 100,
		.slot_seconds = diff ? 0 : head->slot_seconds,
		.diff = diff,
	};
	ctl_history_covered(head, &p.from_unix, &p.until_unix);
	if (diff)
		ctl_history_covered(replies[nreplies - 1]->parts[0]->query, &p.base_from_unix,
		                    &p.base_until_unix);
	if (format == EXPORT_HEATMAP) {
		if (export_sources_read(&p, EXPORT_SOURCE_MAX_TOTAL, &h.sources) < 0)
			goto out;
		p.sources = h.sources.v;
		p.nsources = h.sources.n;
	}
	rc = export_write(&p, format, out);
out:
	free(ids);
	ctl_history_profile_free(&h);
	return rc;
}

/*
 * An empty answer to a selection by pid, target or labels: when no process
 * the history ever had matches it (a typo in a label is the usual cause),
 * say so on stderr.  The answer itself stands: an empty range is no error.
 */
static void ctl_history_warn_unmatched(const struct ctl *ctl, const Pyprofd__QueryRequest *q)
{
	if (!q->pid && !q->target_id && !q->n_labels)
		return;
	Pyprofd__QueryRequest any = *q;
	any.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
	any.from_unix = any.until_unix = any.base_from_unix = any.base_until_unix = 0;
	any.by_thread = false;
	any.thread_id = 0;
	any.split_threads = any.no_idle = false;
	any.limit = 0;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &any;
	int status;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		return;
	size_t n = 0;
	for (size_t i = 0; i < reply->nparts; i++)
		n += reply->parts[i]->query->n_processes;
	client_reply_free(reply);
	if (n)
		return;
	char what[512] = "";
	size_t o = 0;
	if (q->pid)
		o += (size_t)snprintf(what + o, sizeof what - o, " --pid %d", (int)q->pid);
	if (q->target_id && o < sizeof what)
		o += (size_t)snprintf(what + o, sizeof what - o, " --target %lld", (long long)q->target_id);
	for (size_t i = 0; i < q->n_labels && o < sizeof what; i++)
		o += (size_t)snprintf(what + o, sizeof what - o, " --label %s=%s", q->labels[i]->key,
		                      q->labels[i]->value);
	fprintf(stderr,
	        "pyprofd-ctl: warning: no process in the history ever matched%s "
	        "(`pyprofd-ctl query --format processes` lists those it has)\n",
	        what);
}

/* What a selection is called in a title: its target, pid or first label. */
static void ctl_history_name(const Pyprofd__QueryRequest *q, char *name, size_t len)
{
	if (q->target_id)
		snprintf(name, len, "target %lld", (long long)q->target_id);
	else if (q->pid)
		snprintf(name, len, "pid %d", (int)q->pid);
	else if (q->n_labels)
		snprintf(name, len, "%s=%s", q->labels[0]->key, q->labels[0]->value);
}

/* The options only query takes. */
struct ctl_history_query_opts {
	Pyprofd__QueryRequest *q;
	bool table, processes, per_thread;
	enum export_format format;
	double since;
};

static int ctl_history_query_option(struct ctl *ctl, int opt, void *ctx)
{
	struct ctl_history_query_opts *o = ctx;
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
		/* The table is counted by the daemon; the other formats are written from stacks. */
		o->table = strcmp(optarg, "table") == 0;
		o->processes = strcmp(optarg, "processes") == 0;
		if (!o->table && !o->processes && export_format_parse(optarg, &o->format) != 0)
			return ctl_usage_error(ctl, "unknown format '%s'", optarg);
		return EXIT_OK;
	case 'P':
		o->per_thread = true;
		return EXIT_OK;
	}
	return EXIT_OK;
}

int ctl_history_query(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"since", required_argument, NULL, 's'}, {"from", required_argument, NULL, 'f'},
		{"until", required_argument, NULL, 'u'}, {"format", required_argument, NULL, 'F'},
		{"per-thread", no_argument, NULL, 'P'},
		CTL_HISTORY_OPTIONS,
	};
	struct ctl_history_args h;
	Pyprofd__QueryRequest *q = &h.q;
	struct ctl_history_query_opts o = {.q = q, .format = EXPORT_COLLAPSED, .since = -1};
	char name[256] = "all processes";
	int status = ctl_history_parse(ctl, argc, argv, options, ctl_history_query_option, &o, &h);
	if (status != EXIT_OK || h.done)
		goto out;
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

/* --- diff --- */

/* A time of a diff range: as ctl_history_parse_time, or "now", or "-D" for D ago; -1 if none. */
double ctl_history_parse_when(const char *arg, double now)
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
int ctl_history_parse_range(const struct ctl *ctl, const char *option, const char *arg, double now,
                       Pyprofd__QueryRequest *q)
{
	const char *dots = strstr(arg, "..");
	char from[64];
	if (!dots || (size_t)(dots - arg) >= sizeof from)
		return ctl_usage_error(ctl, "%s takes FROM..UNTIL, not '%s'", option, arg);
	memcpy(from, arg, (size_t)(dots - arg));
	from[dots - arg] = '\0';
	double a = ctl_history_parse_when(from, now), b = ctl_history_parse_when(dots + 2, now);
	if (a < 0 || b < 0 || b < a)
		return ctl_usage_error(ctl, "%s: '%s' is not a range of times (FROM..UNTIL)", option, arg);
	q->from_unix = a;
	q->until_unix = b > a ? b : a + 1e-6;
	return EXIT_OK;
}

/* The ranges and format only diff takes. */
struct ctl_history_diff_opts {
	Pyprofd__QueryRequest *compare, *base;
	double now;
	bool have_base, have_compare;
	bool page; /* a flamegraph or heatmap, not the table */
	enum export_format format;
};

static int ctl_history_diff_option(struct ctl *ctl, int opt, void *ctx)
{
	struct ctl_history_diff_opts *o = ctx;
	int status = EXIT_OK;
	if (opt == 'b') {
		status = ctl_history_parse_range(ctl, "--base", optarg, o->now, o->base);
		o->have_base = status == EXIT_OK;
	} else if (opt == 'c') {
		status = ctl_history_parse_range(ctl, "--compare", optarg, o->now, o->compare);
		o->have_compare = status == EXIT_OK;
	} else if (opt == 'F') {
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
static int ctl_history_diff_page(struct ctl *ctl, struct ctl_history_args *h,
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

int ctl_history_diff(struct ctl *ctl, int argc, char **argv)
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
	struct ctl_history_diff_opts o = {.compare = q, .base = &base, .now = clock_wall_s()};
	int status = ctl_history_parse(ctl, argc, argv, options, ctl_history_diff_option, &o, &h);
	if (status != EXIT_OK || h.done)
		goto out;
	if (!o.have_base || !o.have_compare) {
		status = ctl_usage_error(ctl, "diff needs --base and --compare");
		goto out;
	}
	if (o.page) {
		status = q->limit ? ctl_usage_error(ctl, "--limit goes with the table")
		         : ctl->json ? ctl_usage_error(ctl, "--json goes with the table")
		                     : ctl_history_diff_page(ctl, &h, &base, o.format);
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
