/*
 * pyprofd-ctl's commands on what the daemon does now: attach, detach,
 * list, dump, stats, status.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "export.h"

const char ctl_attach_usage[] =
	"usage: pyprofd-ctl attach PID [--rate HZ] [--mode wall|cpu|gil|exception] [--duration S]\n"
	"                          [--label K=V]... [--native] [--gc]\n"
	"                          [--async-aware] [--async-mode running|all]\n"
	"                          [--context otel|none] [--context-label NAME]... [--json]\n"
	"\n"
	"Start profiling process PID: the daemon samples it until detached, the duration\n"
	"ends or the process exits.  Attaching again to a detached process reuses what\n"
	"the daemon kept of it (shown as \"warm\").\n"
	"\n"
	"  --rate HZ         samples per second (default: the daemon's, 100 unless set)\n"
	"  --mode MODE       wall: every thread (default); cpu: threads the kernel has\n"
	"                    running; gil: the thread holding the GIL; exception:\n"
	"                    threads handling an exception (in except or finally)\n"
	"  --duration S      stop after S seconds (default: until detached)\n"
	"  --label K=V       tag the samples; repeat for several labels (attached\n"
	"                    again without, a process keeps the labels it had)\n"
	"  --native          the C frames of waiting threads too (else marks where C\n"
	"                    code entered the interpreter)\n"
	"  --gc              mark samples taken while the garbage collector runs\n"
	"  --async-aware     asyncio programs (3.11+): a thread running a task is sampled\n"
	"                    as the task's stack: its coroutine frames, <task>:NAME, then\n"
	"                    the task awaiting it, down to the root task\n"
	"  --async-mode M    running (what --async-aware does) or all: every suspended\n"
	"                    task is sampled too, as an idle stack of its own\n"
	"  --context otel    each sample inside an OpenTelemetry span carries its trace\n"
	"                    and span ids (query --trace, --span, --format traces)\n"
	"  --context-label NAME\n"
	"                    the value of the ContextVar NAME (a str or an int) labels\n"
	"                    each sample (query --context NAME=VALUE); up to 8\n"
	"  --json            print the target as JSON, with \"warm\"\n";

const char ctl_detach_usage[] =
	"usage: pyprofd-ctl detach PID [--json]\n"
	"\n"
	"Stop profiling process PID.  The daemon keeps what it learnt of the process\n"
	"(\"warm\"), so a later attach starts at full speed.\n"
	"\n"
	"  --json            print the target as JSON\n";

const char ctl_list_usage[] =
	"usage: pyprofd-ctl list [--state STATE] [--label K=V]... [--json]\n"
	"\n"
	"The processes the daemon knows: sampling, detached (state kept warm) or exited.\n"
	"\n"
	"  --state STATE     only those in this state: sampling, detached or exited\n"
	"  --label K=V       only those with this label; repeat: all must match\n"
	"SAMPLES counts thread samples with a Python stack, as top and the history do\n"
	"(a tick samples every thread); THREADS names the threads sampled lately.\n"
	"\n"
	"  --json            a JSON array of targets: {pid, start_time, uid, state,\n"
	"                    python_version, rate_hz, mode, samples (ticks), thread_samples,\n"
	"                    errors, labels, executable, command_line, attached_at,\n"
	"                    duration_s, sessions, effective_rate_hz, rate_lowered_by, rule,\n"
	"                    parent, threads: [{thread_id, native_thread_id, name}]}\n";

const char ctl_dump_usage[] =
	"usage: pyprofd-ctl dump PID [--native] [--gc] [--async-aware] [--json]\n"
	"\n"
	"Print the Python stack of every thread of process PID once, innermost frame\n"
	"first, read by the daemon.  The output is that of `pyprofd dump`.\n"
	"\n"
	"  --native          the C frames of waiting threads too, in place; <native> marks\n"
	"                    where C code sits between Python frames of a running thread\n"
	"                    (3.11+)\n"
	"  --gc              mark with <GC> the thread running the garbage collector\n"
	"  --async-aware     also print asyncio's task tree (3.11+): every pending task\n"
	"                    with its coroutine frames, under the task awaiting it; the\n"
	"                    running task with its thread's frames from its coroutine up\n"
	"  --json            one JSON object: {pid, python_version, threads: [{thread_id,\n"
	"                    native_thread_id, interpreter_id, gil, on_cpu, truncated,\n"
	"                    unreadable, frames: [{function, qualname, file, line, kind}]}],\n"
	"                    and with --async-aware tasks: [{id, name, thread_id,\n"
	"                    awaited_by, running, frames}], tasks_cut, tasks_error}\n";

const char ctl_stats_usage[] =
	"usage: pyprofd-ctl stats PID [--json]\n"
	"\n"
	"What sampling process PID costs: the sampling engine's counters, then the rate\n"
	"achieved, the sampling timer's lateness (jitter) and the time one sample takes\n"
	"(median and 99th percentile, in microseconds), the memory its caches hold, and\n"
	"the timer ticks skipped while the daemon was busy.\n"
	"\n"
	"  --json            one JSON object: {pid, target, COUNTER..., achieved_rate_hz,\n"
	"                    jitter_us_p50, jitter_us_p99, sample_us_p50, sample_us_p99,\n"
	"                    cache_bytes, missed_ticks}\n";

const char ctl_status_usage[] =
	"usage: pyprofd-ctl status [--json]\n"
	"\n"
	"The daemon's own state: version, pid, uptime, targets by state, connections\n"
	"(open, refused past a limit, closed as idle or stalled), bytes of answers\n"
	"waiting for clients to read them, queries running, memory kept for detached\n"
	"targets, resident memory, CPU use, the last refused reload of the config file\n"
	"(config.reload_failed and .reload_error, until one succeeds), state directory,\n"
	"socket and history;\n"
	"discovery and the budgets: the daemon's CPU against [limits] cpu_percent, and\n"
	"each user's share of sampling against uid_cpu_percent (root sees every user,\n"
	"another user itself alone).\n"
	"\n"
	"  --json            one JSON object with those fields (budget.users: [{uid,\n"
	"                    recent_cpu_percent, factor, over}])\n";

/* --- attach --- */

static int ctl_live_attach_show(struct ctl *ctl, const struct client_reply *reply, int32_t pid)
{
	(void)pid;
	const Pyprofd__AttachResult *r = reply->parts[0]->attach;
	const Pyprofd__Target *t = ctl_target_or_empty(r->target);
	if (ctl->json) {
		json_t *doc = fields_target_json(t);
		if (doc && json_object_set_new(doc, "warm", json_boolean(r->warm)) != 0) {
			json_decref(doc);
			doc = NULL;
		}
		return ctl_print_json(doc);
	}
	printf("attached to %d (Python ", (int)t->pid);
	export_put(stdout, t->python_version, SIZE_MAX, 0);
	printf("), %u Hz, %s%s\n", t->rate_hz, vocab_wire_mode_name(t->mode), r->warm ? " (warm)" : "");
	return ctl_finish(EXIT_OK);
}

int ctl_live_attach(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"rate", required_argument, NULL, 'r'},  {"mode", required_argument, NULL, 'm'},
		{"duration", required_argument, NULL, 'd'}, {"label", required_argument, NULL, 'l'},
		{"native", no_argument, NULL, 'n'},      {"gc", no_argument, NULL, 'g'},
		{"no-write", no_argument, NULL, 'W'},
		{"async-aware", no_argument, NULL, 'A'}, {"async-mode", required_argument, NULL, 'M'},
		{"context", required_argument, NULL, 'c'}, {"context-label", required_argument, NULL, 'L'},
		CTL_COMMON_OPTIONS,
	};
	Pyprofd__AttachRequest a = PYPROFD__ATTACH_REQUEST__INIT;
	/* Each name is one argument too. */
	char **context_labels = calloc((size_t)argc, sizeof *context_labels);
	/* Every label is one argument, so argc bounds their number. */
	Pyprofd__Label *labels = calloc((size_t)argc, sizeof *labels);
	Pyprofd__Label **label_ptrs = calloc((size_t)argc, sizeof *label_ptrs);
	int status = EXIT_OK;
	if (!labels || !label_ptrs || !context_labels) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		status = EXIT_FAILURE_OTHER;
		goto out;
	}
	a.labels = label_ptrs;
	a.context_labels = context_labels;

	int opt;
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		switch (opt) {
		case 'r':
			status = ctl_parse_u32(ctl, "--rate", optarg, 1, &a.rate_hz);
			break;
		case 'm':
			if (vocab_wire_mode_parse(optarg, &a.mode) != 0)
				status = ctl_usage_error(ctl, "--mode is wall, cpu, gil or exception, not '%s'", optarg);
			break;
		case 'd': {
			char *end;
			errno = 0;
			a.duration_s = strtod(optarg, &end);
			if (*optarg == '\0' || *end != '\0' || errno != 0 || !isfinite(a.duration_s) ||
			    a.duration_s <= 0)
				status = ctl_usage_error(
					ctl, "--duration takes a positive number of seconds, not '%s'", optarg);
			break;
		}
		case 'l':
			if ((status = ctl_parse_label(ctl, optarg, &labels[a.n_labels])) == EXIT_OK) {
				label_ptrs[a.n_labels] = &labels[a.n_labels];
				a.n_labels++;
			}
			break;
		case 'n': a.native = true; break;
		case 'g': a.gc = true; break;
		case 'W': a.no_write = true; break;
		case 'c':
			if (strcmp(optarg, "otel") != 0 && strcmp(optarg, "none") != 0)
				status = ctl_usage_error(ctl, "--context is otel or none, not '%s'", optarg);
			a.context = optarg;
			break;
		case 'L':
			if (!*optarg || strlen(optarg) >= UW_CONTEXT_NAME_LEN || strpbrk(optarg, "=, \t\n"))
				status = ctl_usage_error(ctl, "--context-label takes a ContextVar's name, not '%s'", optarg);
			context_labels[a.n_context_labels++] = optarg;
			break;
		case 'A':
			if (a.async_mode == PYPROFD__ASYNC_MODE__ASYNC_OFF)
				a.async_mode = PYPROFD__ASYNC_MODE__ASYNC_RUNNING;
			break;
		case 'M': {
			enum uw_async_mode m;
			if (vocab_async_mode_parse(optarg, &m) != 0 || m == UW_ASYNC_OFF)
				status = ctl_usage_error(ctl, "--async-mode is running or all, not '%s'", optarg);
			else
				a.async_mode = vocab_async_mode_to_wire(m);
			break;
		}
		default: {
			int rc = ctl_common_option(ctl, opt, argv);
			if (rc >= 0) {
				status = rc;
				goto out;
			}
		}
		}
		if (status != EXIT_OK)
			goto out;
	}
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_ATTACH;
	req.attach = &a;
	status = ctl_call_shown(ctl, argc, argv, &req, &a.pid, ctl_live_attach_show);
out:
	free(labels);
	free(label_ptrs);
	free(context_labels);
	return status;
}

/* --- detach --- */

static int ctl_live_detach_show(struct ctl *ctl, const struct client_reply *reply, int32_t pid)
{
	const Pyprofd__Target *t = ctl_target_or_empty(reply->parts[0]->detach->target);
	if (ctl->json)
		return ctl_print_json(fields_target_json(t));
	printf("detached from %d; its state is kept warm\n", (int)pid);
	return ctl_finish(EXIT_OK);
}

int ctl_live_detach(struct ctl *ctl, int argc, char **argv)
{
	return ctl_call_plain(ctl, argc, argv, PYPROFD__REQUEST__BODY_DETACH, ctl_live_detach_show);
}

/* --- list --- */

/* Total width of a list line; the command line gets what the other columns leave. */
#define LIST_WIDTH 120

/* The columns of `list`: fields of a Target (fields_target), numbers to the right. */
static const struct {
	const char *header, *key;
	bool right;
} ctl_live_list_columns[] = {
	{"PID", "pid", true},         {"STATE", "state", false},    {"PYTHON", "python_version", false},
	{"RATE", "effective_rate_hz", true}, {"MODE", "mode", false},
	/* Thread samples with a stack: what top and the history count of it. */
	{"SAMPLES", "thread_samples", true},
	{"ERRORS", "errors", true},   {"RULE", "rule", false},      {"LABELS", "labels", false},
	{"THREADS", "threads", false}, {"COMMAND", "command_line", false},
};
#define LIST_NCOLS (sizeof ctl_live_list_columns / sizeof ctl_live_list_columns[0])
#define LIST_COMMAND (LIST_NCOLS - 1)

/* The cells of one row, each malloc'd: "-" for what is empty, the executable for no command line. */
static int ctl_live_list_cells(const Pyprofd__Target *t, char *cells[LIST_NCOLS])
{
	for (size_t k = 0; k < LIST_NCOLS; k++) {
		const char *key = ctl_live_list_columns[k].key;
		if (k == LIST_COMMAND && !*export_str(t->command_line))
			key = "executable";
		char *cell = fields_cell(t, fields_find(fields_target, fields_ntarget, key));
		if (cell && !*cell && k != LIST_COMMAND) {
			free(cell);
			cell = strdup("-");
		}
		if (!(cells[k] = cell))
			return -1;
	}
	return 0;
}

static int ctl_live_list_text(const Pyprofd__Target *const *targets, size_t n)
{
	char **cells = calloc(n * LIST_NCOLS + 1, sizeof *cells);
	if (!cells) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	int status = EXIT_OK;
	size_t width[LIST_NCOLS];
	const char *header[LIST_NCOLS];
	for (size_t k = 0; k < LIST_NCOLS; k++)
		width[k] = strlen(header[k] = ctl_live_list_columns[k].header);
	for (size_t i = 0; i < n; i++) {
		char **row = cells + i * LIST_NCOLS;
		if (ctl_live_list_cells(targets[i], row) != 0) {
			fputs("pyprofd-ctl: out of memory\n", stderr);
			status = EXIT_FAILURE_OTHER;
			goto out;
		}
		for (size_t k = 0; k < LIST_COMMAND; k++) {
			size_t w = export_width(row[k]);
			if (w > width[k])
				width[k] = w;
		}
	}
	size_t used = 0;
	for (size_t k = 0; k < LIST_COMMAND; k++)
		used += width[k] + 2;
	/* Even when the other columns leave less, show the start of the command. */
	size_t room = used + 20 < LIST_WIDTH ? LIST_WIDTH - used : 20;

	for (size_t i = 0; i <= n; i++) {
		const char *const *row =
			i == 0 ? header : (const char *const *)cells + (i - 1) * LIST_NCOLS;
		for (size_t k = 0; k < LIST_COMMAND; k++) {
			bool right = ctl_live_list_columns[k].right;
			size_t w = export_width(row[k]);
			for (size_t s = w; right && s < width[k]; s++)
				putchar(' ');
			export_put(stdout, row[k], SIZE_MAX, right ? 0 : width[k]);
			fputs("  ", stdout);
		}
		const char *cmd = row[LIST_COMMAND];
		if (export_width(cmd) > room) {
			export_put(stdout, cmd, room - 3, 0);
			fputs("...", stdout);
		} else {
			export_put(stdout, cmd, room, 0);
		}
		putchar('\n');
	}
	status = ctl_finish(EXIT_OK);
out:
	for (size_t i = 0; i < n * LIST_NCOLS; i++)
		free(cells[i]);
	free(cells);
	return status;
}

static int ctl_live_list_show(struct ctl *ctl, const struct client_reply *reply, int32_t pid)
{
	(void)pid;
	/* A long list comes in parts: gather the targets of all of them. */
	size_t n = 0;
	for (size_t p = 0; p < reply->nparts; p++)
		n += reply->parts[p]->list->n_targets;
	const Pyprofd__Target **targets = calloc(n + 1, sizeof *targets);
	if (!targets) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	size_t k = 0;
	for (size_t p = 0; p < reply->nparts; p++)
		for (size_t i = 0; i < reply->parts[p]->list->n_targets; i++)
			targets[k++] = ctl_target_or_empty(reply->parts[p]->list->targets[i]);
	int status;
	if (ctl->json) {
		json_t *doc = json_array();
		for (size_t i = 0; doc && i < n; i++) {
			if (json_array_append_new(doc, fields_target_json(targets[i])) != 0) {
				json_decref(doc);
				doc = NULL;
			}
		}
		status = ctl_print_json(doc);
	} else {
		status = ctl_live_list_text(targets, n);
	}
	free(targets);
	return status;
}

/* The states a target is in, as the daemon names them (Target.state). */
static const char *const ctl_live_states[] = {"sampling", "detached", "exited"};

int ctl_live_list(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"state", required_argument, NULL, 's'},
		{"label", required_argument, NULL, 'l'},
		CTL_COMMON_OPTIONS,
	};
	Pyprofd__ListRequest list = PYPROFD__LIST_REQUEST__INIT;
	/* Every label is one argument, so argc bounds their number. */
	Pyprofd__Label *labels = calloc((size_t)argc, sizeof *labels);
	Pyprofd__Label **label_ptrs = calloc((size_t)argc, sizeof *label_ptrs);
	int status = EXIT_OK, opt;
	if (!labels || !label_ptrs) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		status = EXIT_FAILURE_OTHER;
		goto out;
	}
	list.labels = label_ptrs;
	while (status == EXIT_OK && (opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		if (opt == 's') {
			list.state = NULL;
			for (size_t i = 0; i < sizeof ctl_live_states / sizeof *ctl_live_states; i++)
				if (strcmp(optarg, ctl_live_states[i]) == 0)
					list.state = optarg;
			if (!list.state)
				status = ctl_usage_error(ctl, "--state is sampling, detached or exited, not '%s'", optarg);
		} else if (opt == 'l') {
			if ((status = ctl_parse_label(ctl, optarg, &labels[list.n_labels])) == EXIT_OK) {
				label_ptrs[list.n_labels] = &labels[list.n_labels];
				list.n_labels++;
			}
		} else if ((status = ctl_common_option(ctl, opt, argv)) >= 0) {
			goto out;
		} else {
			status = EXIT_OK;
		}
	}
	if (status == EXIT_OK) {
		Pyprofd__Request req = PYPROFD__REQUEST__INIT;
		req.body_case = PYPROFD__REQUEST__BODY_LIST;
		req.list = &list;
		status = ctl_call_shown(ctl, argc, argv, &req, NULL, ctl_live_list_show);
	}
out:
	free(labels);
	free(label_ptrs);
	return status;
}

/* --- dump --- */

static int ctl_live_dump_show(struct ctl *ctl, const struct client_reply *reply, int32_t pid)
{
	(void)pid;
	/* The threads of a large dump come in parts; the first part heads it. */
	const Pyprofd__DumpResult **parts = calloc(reply->nparts, sizeof *parts);
	if (!parts) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	for (size_t p = 0; p < reply->nparts; p++)
		parts[p] = reply->parts[p]->dump;
	int rc = export_dump_write(parts, reply->nparts, ctl->json, stdout);
	free(parts);
	return ctl_finish(rc == 0 ? EXIT_OK : EXIT_FAILURE_OTHER);
}

int ctl_live_dump(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"native", no_argument, NULL, 'n'},
		{"gc", no_argument, NULL, 'g'},
		{"async-aware", no_argument, NULL, 'A'},
		CTL_COMMON_OPTIONS,
	};
	Pyprofd__DumpRequest d = PYPROFD__DUMP_REQUEST__INIT;
	int opt, status;
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		if (opt == 'n')
			d.native = true;
		else if (opt == 'g')
			d.gc = true;
		else if (opt == 'A')
			d.tasks = true;
		else if ((status = ctl_common_option(ctl, opt, argv)) >= 0)
			return status;
	}
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_DUMP;
	req.dump = &d;
	return ctl_call_shown(ctl, argc, argv, &req, &d.pid, ctl_live_dump_show);
}

/* --- stats --- */

/* A counter of the engine; one of the same name as a figure (fields_stats) gives way to it. */
static bool ctl_live_counter_shown(const Pyprofd__Counter *ctr)
{
	const char *name = export_str(ctr->name);
	return strcmp(name, "pid") != 0 && strcmp(name, "target") != 0 &&
	       !fields_find(fields_stats, fields_nstats, name);
}

/* `name value` lines, names padded to one column; counters of every part first, then the figures. */
static int ctl_live_stats_text(const Pyprofd__StatsResult *head, const struct client_reply *reply)
{
	size_t width = 0;
	for (size_t k = 0; k < fields_nstats; k++)
		if (strlen(fields_stats[k].key) > width)
			width = strlen(fields_stats[k].key);
	for (size_t p = 0; p < reply->nparts; p++) {
		const Pyprofd__StatsResult *s = reply->parts[p]->stats;
		for (size_t i = 0; i < s->n_counters; i++)
			if (ctl_live_counter_shown(s->counters[i]) && export_width(s->counters[i]->name) > width)
				width = export_width(s->counters[i]->name);
	}
	for (size_t p = 0; p < reply->nparts; p++) {
		const Pyprofd__StatsResult *s = reply->parts[p]->stats;
		for (size_t i = 0; i < s->n_counters; i++) {
			if (!ctl_live_counter_shown(s->counters[i]))
				continue;
			export_put(stdout, s->counters[i]->name, SIZE_MAX, width);
			printf(" %llu\n", (unsigned long long)s->counters[i]->value);
		}
	}
	if (fields_text(stdout, head, fields_stats, fields_nstats, (int)width) != 0)
		return ctl_finish(EXIT_FAILURE_OTHER);
	return ctl_finish(EXIT_OK);
}

/* {pid, target, COUNTER..., the figures}. */
static json_t *ctl_live_stats_json(int32_t pid, const Pyprofd__StatsResult *head,
                                   const struct client_reply *reply)
{
	const Pyprofd__Target *t = ctl_target_or_empty(head->target);
	json_t *doc = json_pack("{s:i, s:o}", "pid", (int)(head->target ? t->pid : pid), "target",
	                        fields_target_json(t));
	for (size_t p = 0; doc && p < reply->nparts; p++) {
		const Pyprofd__StatsResult *s = reply->parts[p]->stats;
		for (size_t i = 0; doc && i < s->n_counters; i++) {
			if (!ctl_live_counter_shown(s->counters[i]))
				continue;
			json_t *name = export_json_string(s->counters[i]->name);
			if (!name || json_object_set_new(doc, json_string_value(name),
			                                 export_json_u64(s->counters[i]->value)) != 0) {
				json_decref(doc);
				doc = NULL;
			}
			json_decref(name);
		}
	}
	json_t *figures = doc ? fields_json(head, fields_stats, fields_nstats) : NULL;
	if (!figures || json_object_update(doc, figures) != 0) {
		json_decref(doc);
		doc = NULL;
	}
	json_decref(figures);
	return doc;
}

static int ctl_live_stats_show(struct ctl *ctl, const struct client_reply *reply, int32_t pid)
{
	/* Counters may come in parts; the figures after them are the first part's. */
	const Pyprofd__StatsResult *head = reply->parts[0]->stats;
	if (ctl->json)
		return ctl_print_json(ctl_live_stats_json(pid, head, reply));
	return ctl_live_stats_text(head, reply);
}

int ctl_live_stats(struct ctl *ctl, int argc, char **argv)
{
	return ctl_call_plain(ctl, argc, argv, PYPROFD__REQUEST__BODY_STATS, ctl_live_stats_show);
}

/* --- status --- */

/* The users over or near their share: budget.users in JSON, a line each in text. */
static json_t *ctl_live_user_budgets_json(const Pyprofd__StatusResult *r)
{
	json_t *users = json_array();
	for (size_t i = 0; users && i < r->n_user_budgets; i++) {
		const Pyprofd__UserBudget *u = r->user_budgets[i];
		if (json_array_append_new(users, json_pack("{s:I,s:f,s:f,s:b}", "uid", (json_int_t)u->uid,
		                                           "recent_cpu_percent", u->recent_percent, "factor",
		                                           u->factor, "over", (int)u->over)) != 0)
			json_decref(users), users = NULL;
	}
	return users;
}

static int ctl_live_status_show(struct ctl *ctl, const struct client_reply *reply, int32_t pid)
{
	(void)pid;
	const Pyprofd__StatusResult *r = reply->parts[0]->status;
	if (ctl->json) {
		json_t *doc = fields_json(r, fields_status, fields_nstatus);
		json_t *users = ctl_live_user_budgets_json(r);
		if (!doc || !users || json_object_set_new(json_object_get(doc, "budget"), "users", users) != 0)
			json_decref(doc), doc = NULL;
		return ctl_print_json(doc);
	}
	if (fields_text(stdout, r, fields_status, fields_nstatus, 0) != 0)
		return ctl_finish(EXIT_FAILURE_OTHER);
	for (size_t i = 0; i < r->n_user_budgets; i++) {
		const Pyprofd__UserBudget *u = r->user_budgets[i];
		printf("budget.user: uid %u %.1f%% factor %.3f%s\n", u->uid, u->recent_percent, u->factor,
		       u->over ? " over" : "");
	}
	return ctl_finish(EXIT_OK);
}

int ctl_live_status(struct ctl *ctl, int argc, char **argv)
{
	return ctl_call_plain(ctl, argc, argv, PYPROFD__REQUEST__BODY_STATUS, ctl_live_status_show);
}
