/*
 * What pyprofd-ctl's commands on the history (query: ctl_query.c, diff:
 * ctl_diff.c) share: the options that select processes, threads and the
 * output, and the answers written out as a table of functions, the
 * processes, or a profile in any export format.
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

/* -o's file, or standard output without one; NULL (said on stderr) if it cannot be written. */
FILE *ctl_history_output_open(const char *path)
{
	FILE *out = path ? fopen(path, "wb") : stdout;
	if (!out)
		fprintf(stderr, "pyprofd-ctl: cannot write %s: %s\n", path, strerror(errno));
	return out;
}

/* Closes what ctl_history_output_open gave after a writer returned rc; the exit status. */
int ctl_history_output_close(FILE *out, const char *path, int rc)
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

void ctl_history_args_free(struct ctl_history_args *h)
{
	free(h->labels);
	free(h->label_ptrs);
}

/*
 * An option query and diff share, into h: --pid, --target, --label,
 * --thread, --limit, --idle, --no-idle, -o and the common ones.  -1 when opt is none of them;
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
		Pyprofd__Label *l = &h->labels[q->n_labels];
		int status = ctl_parse_label(ctl, optarg, l);
		if (status == EXIT_OK)
			q->labels[q->n_labels++] = l;
		return status;
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
	case 'K':
		/* The last of --idle and --no-idle wins. */
		ctl_idle_request(opt == 'I' ? PYPROFD__IDLE_POLICY__IDLE_DROP : PYPROFD__IDLE_POLICY__IDLE_KEEP,
		                 &q->idle_policy, &q->no_idle);
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
int ctl_history_parse(struct ctl *ctl, int argc, char **argv, const struct option *options,
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
int ctl_history_processes(const struct client_reply *reply, bool json, FILE *out)
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
int ctl_history_table(const struct client_reply *reply, const char *name, bool diff, bool json,
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
	struct export_context *contexts;
	uint32_t *stack_contexts;
	struct export_label *context_labels;
	char *hex; /* the contexts' ids, as text */
	struct export_sources sources;
};

static void ctl_history_profile_free(struct ctl_history_profile *h)
{
	free(h->frames);
	free(h->stacks);
	free(h->threads);
	free(h->labels);
	free(h->contexts);
	free(h->stack_contexts);
	free(h->context_labels);
	free(h->hex);
	export_sources_free(&h->sources);
}

/* An id of the daemon's as lowercase hex into out (2 * len + 1 bytes); NULL for none. */
static const char *ctl_history_hex(const ProtobufCBinaryData *id, char *out)
{
	if (!id->len)
		return NULL;
	for (size_t i = 0; i < id->len; i++)
		snprintf(out + 2 * i, 3, "%02x", id->data[i]);
	return out;
}

/* Room per context for its ids as hex: a trace's 32 digits and a span's 16, each ended. */
#define CTL_HISTORY_HEX 52

/* The contexts of one part into h from *c on (labels from *l on).  Ids longer than their kind are cut. */
static void ctl_history_contexts(const Pyprofd__QueryResult *r, struct ctl_history_profile *h,
                                 size_t *c, size_t *l)
{
	for (size_t m = 0; m < r->n_contexts; m++, (*c)++) {
		const Pyprofd__QueryContext *qc = r->contexts[m];
		char *hex = h->hex + *c * CTL_HISTORY_HEX;
		ProtobufCBinaryData trace = qc->trace_id, span = qc->span_id;
		trace.len = trace.len > 16 ? 16 : trace.len;
		span.len = span.len > 8 ? 8 : span.len;
		h->contexts[*c] = (struct export_context){.trace_id = ctl_history_hex(&trace, hex),
		                                          .span_id = ctl_history_hex(&span, hex + 33),
		                                          .labels = &h->context_labels[*l],
		                                          .nlabels = (uint32_t)qc->n_labels};
		for (size_t n = 0; n < qc->n_labels; n++, (*l)++)
			h->context_labels[*l] = (struct export_label){export_str(qc->labels[n]->key),
			                                              export_str(qc->labels[n]->value)};
	}
}

/*
 * Answers to stack queries (all parts of each; a diff's base range last,
 * marked base) as the export writers take them.  The first answer heads
 * the profile; a heatmap gets the sources of its files, read here (see
 * export_sources_read).
 */
int ctl_history_export(const struct client_reply *const *replies, size_t nreplies, bool diff,
                       const char *name, enum export_format format, bool per_thread, FILE *out)
{
	size_t nframes = 0, nstacks = 0, nthreads = 0, nlabels = 0, nrefs = 0, ncontexts = 0, nclabels = 0;
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
			ncontexts += r->n_contexts;
			for (size_t m = 0; m < r->n_contexts; m++)
				nclabels += r->contexts[m]->n_labels;
		}
	if (nframes > UINT32_MAX || nstacks > UINT32_MAX || nthreads > UINT32_MAX ||
	    ncontexts > UINT32_MAX / CTL_HISTORY_HEX)
		return -1;
	struct ctl_history_profile h = {
		.frames = calloc(nframes ? nframes : 1, sizeof *h.frames),
		.stacks = calloc(nstacks ? nstacks : 1, sizeof *h.stacks),
		.threads = calloc(nthreads ? nthreads : 1, sizeof *h.threads),
		.labels = calloc(nlabels ? nlabels : 1, sizeof *h.labels),
		.contexts = calloc(ncontexts ? ncontexts : 1, sizeof *h.contexts),
		.stack_contexts = calloc(nstacks ? nstacks : 1, sizeof *h.stack_contexts),
		.context_labels = calloc(nclabels ? nclabels : 1, sizeof *h.context_labels),
		.hex = calloc(ncontexts ? ncontexts : 1, CTL_HISTORY_HEX),
	};
	/* Stacks name their reply's frames: the frames of the replies before it come first. */
	uint32_t *ids = calloc(nrefs ? nrefs : 1, sizeof *ids), *next = ids;
	int rc = -1;
	if (!h.frames || !h.stacks || !h.threads || !h.labels || !ids || !h.contexts ||
	    !h.stack_contexts || !h.context_labels || !h.hex)
		goto out;
	size_t f = 0, s = 0, t = 0, l = 0, c = 0, cl = 0;
	for (size_t k = 0; k < nreplies; k++) {
		size_t f0 = f, t0 = t, c0 = c;
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
					.build_id = qf->build_id,
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
			ctl_history_contexts(r, &h, &c, &cl);
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
				/* A context the daemon has not sent (a broken answer) is none. */
				h.stack_contexts[s] = qs->context && qs->context <= c - c0 ? (uint32_t)(c0 + qs->context) : 0;
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
		.contexts = h.contexts,
		.ncontexts = (uint32_t)ncontexts,
		.stack_contexts = h.stack_contexts,
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
void ctl_history_warn_unmatched(const struct ctl *ctl, const Pyprofd__QueryRequest *q)
{
	if (!q->pid && !q->target_id && !q->n_labels)
		return;
	Pyprofd__QueryRequest any = *q;
	any.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
	any.from_unix = any.until_unix = any.base_from_unix = any.base_until_unix = 0;
	any.by_thread = false;
	any.thread_id = 0;
	any.split_threads = false;
	/* Which processes ever matched: whatever request context they ran in. */
	any.trace_id.len = any.span_id.len = 0;
	any.n_context_labels = 0;
	any.split_contexts = false;
	ctl_idle_request(PYPROFD__IDLE_POLICY__IDLE_DEFAULT, &any.idle_policy, &any.no_idle);
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
void ctl_history_name(const Pyprofd__QueryRequest *q, char *name, size_t len)
{
	if (q->target_id)
		snprintf(name, len, "target %lld", (long long)q->target_id);
	else if (q->pid)
		snprintf(name, len, "pid %d", (int)q->pid);
	else if (q->n_labels)
		snprintf(name, len, "%s=%s", q->labels[0]->key, q->labels[0]->value);
}

