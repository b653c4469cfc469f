/* pyprofd-ctl: the command-line client of pyprofd. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "export.h"

/* Where the daemon listens when run by root under systemd. */
#define CTL_SYSTEM_SOCKET "/run/pyprofd/pyprofd.sock"
#define CTL_SOCKET_NAME "pyprofd.sock"

/* What the command line asked for, before and after the command. */
struct ctl {
	const char *socket; /* --socket, NULL for the default */
	bool json;
	const struct command *cmd;
};

struct command {
	const char *name;
	int (*run)(struct ctl *ctl, int argc, char **argv);
	const char *usage;
};

static const char usage[] =
	"usage: pyprofd-ctl [--socket PATH] [--json] COMMAND [ARGS]\n"
	"\n"
	"Control pyprofd, the continuous profiler daemon for Python processes.\n"
	"\n"
	"commands:\n"
	"  attach PID [--rate HZ] [--mode wall|cpu|gil] [--duration S] [--label K=V]...\n"
	"             [--native] [--gc]\n"
	"                    start profiling a process\n"
	"  detach PID        stop profiling it; the daemon keeps its state warm\n"
	"  list              the processes the daemon knows\n"
	"  dump PID [--native] [--gc]\n"
	"                    every thread's Python stack once, as `pyprofd dump` prints it\n"
	"  stats PID         what sampling a process costs, and how well it keeps its rate\n"
	"  status            the daemon's own state\n"
	"  top PID [--window S] [--limit N] [--once]\n"
	"                    the functions seen most, refreshed every second\n"
	"\n"
	"options (before or after the command):\n"
	"  --socket PATH     the daemon's socket (see below)\n"
	"  --json            print one line of JSON instead of text\n"
	"  -h, --help        this text; `pyprofd-ctl COMMAND --help` for a command's options\n"
	"\n"
	"socket, when --socket is not given: $PYPROFD_SOCKET if set; else, run as root,\n"
	"/run/pyprofd/pyprofd.sock if it exists (the daemon of root or systemd); else\n"
	"$XDG_STATE_HOME/pyprofd/pyprofd.sock, $XDG_STATE_HOME defaulting to\n"
	"$HOME/.local/state (the daemon a user runs without flags), or, when that does\n"
	"not exist, /run/pyprofd/pyprofd.sock.  `pyprofd --state-dir DIR` listens on\n"
	"DIR/pyprofd.sock.\n"
	"\n"
	"exit status:\n"
	"   0  done\n"
	"   1  another error: a request the daemon refused as bad or over a limit, a daemon\n"
	"      or protocol error, an answer cut short or undecodable, cannot write output\n"
	"   2  usage error\n"
	"   3  no such process\n"
	"   4  permission denied (the daemon may not read that process, or you may not\n"
	"      act on it)\n"
	"   5  not a Python process\n"
	"   6  unsupported Python version\n"
	"   7  the process exited\n"
	"   8  inconsistent remote data (its memory did not read as a Python runtime)\n"
	"   9  the daemon is not profiling that process\n"
	"  10  the daemon cannot be reached (not running, no permission on its socket,\n"
	"      no connection within 30 s)\n"
	"On any non-zero status pyprofd-ctl prints one line on stderr.\n";

static const char attach_usage[] =
	"usage: pyprofd-ctl attach PID [--rate HZ] [--mode wall|cpu|gil] [--duration S]\n"
	"                          [--label K=V]... [--native] [--gc] [--json]\n"
	"\n"
	"Start profiling process PID: the daemon samples it until detached, the duration\n"
	"ends or the process exits.  Attaching again to a detached process reuses what\n"
	"the daemon kept of it (shown as \"warm\").\n"
	"\n"
	"  --rate HZ         samples per second (default: the daemon's, 100 unless set)\n"
	"  --mode MODE       wall: every thread (default); cpu: threads the kernel has\n"
	"                    running; gil: the thread holding the GIL\n"
	"  --duration S      stop after S seconds (default: until detached)\n"
	"  --label K=V       tag the samples; repeat for several labels (attached\n"
	"                    again without, a process keeps the labels it had)\n"
	"  --native          mark where C code entered the interpreter\n"
	"  --gc              mark samples taken while the garbage collector runs\n"
	"  --json            print the target as JSON, with \"warm\"\n";

static const char detach_usage[] =
	"usage: pyprofd-ctl detach PID [--json]\n"
	"\n"
	"Stop profiling process PID.  The daemon keeps what it learnt of the process\n"
	"(\"warm\"), so a later attach starts at full speed.\n"
	"\n"
	"  --json            print the target as JSON\n";

static const char list_usage[] =
	"usage: pyprofd-ctl list [--json]\n"
	"\n"
	"The processes the daemon knows: sampling, detached (state kept warm) or exited.\n"
	"\n"
	"  --json            a JSON array of targets: {pid, start_time, uid, state,\n"
	"                    python_version, rate_hz, mode, samples, errors, labels,\n"
	"                    executable, command_line, attached_at, duration_s, sessions}\n";

static const char dump_usage[] =
	"usage: pyprofd-ctl dump PID [--native] [--gc] [--json]\n"
	"\n"
	"Print the Python stack of every thread of process PID once, innermost frame\n"
	"first, read by the daemon.  The output is that of `pyprofd dump`.\n"
	"\n"
	"  --native          mark with <native> where C code sits between Python frames\n"
	"                    (3.11+)\n"
	"  --gc              mark with <GC> the thread running the garbage collector\n"
	"  --json            one JSON object: {pid, python_version, threads: [{thread_id,\n"
	"                    native_thread_id, interpreter_id, gil, on_cpu, truncated,\n"
	"                    unreadable, frames: [{function, qualname, file, line, kind}]}]}\n";

static const char stats_usage[] =
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

static const char status_usage[] =
	"usage: pyprofd-ctl status [--json]\n"
	"\n"
	"The daemon's own state: version, pid, uptime, targets by state, connections,\n"
	"memory kept for detached targets, resident memory, CPU use, state directory and\n"
	"socket.\n"
	"\n"
	"  --json            one JSON object with those fields\n";

static const char top_usage[] =
	"usage: pyprofd-ctl top PID [--window S] [--limit N] [--once] [--json]\n"
	"\n"
	"The functions seen most in process PID's recent samples: %Own is the share of\n"
	"thread samples with the function innermost, %Total with it anywhere on the\n"
	"stack.  On a terminal the view refreshes every second; q or Ctrl-C quits.\n"
	"When the output is not a terminal, one table is printed.  Ended by SIGTERM,\n"
	"SIGHUP or SIGQUIT, the live view exits with 128 + the signal's number.\n"
	"\n"
	"  --window S        the last S seconds of samples (default: the daemon's)\n"
	"  --limit N         at most N rows; 0 (the default): as many as fit the terminal,\n"
	"                    or all when printing once\n"
	"  --once            print one table and exit\n"
	"  --json            once, as one JSON object: {pid, window_s, samples, rows:\n"
	"                    [{function, file, own, total, own_percent, total_percent}]}\n";

static const char query_usage[] =
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
	"  --format F        collapsed (default), flamegraph (one HTML file), speedscope,\n"
	"                    pprof (gzip'd protobuf), table (top functions, counted by\n"
	"                    the daemon; with --json one object: {name, mode, from, until,\n"
	"                    samples, functions_found, functions: [{function, file, own,\n"
	"                    total, own_percent, total_percent}]}), json, or processes\n"
	"                    (which processes the range has samples of, and their\n"
	"                    target ids; with --json an array of objects: {target_id,\n"
	"                    pid, uid, executable, command_line, python_version,\n"
	"                    labels, first, last, samples})\n"
	"  --limit N         table: the first N functions (default: all)\n"
	"  -o, --output FILE write there instead of standard output\n";

static const char diff_usage[] =
	"usage: pyprofd-ctl diff [--pid P | --target ID] [--label K=V]... [--thread TID] [--limit N]\n"
	"                        --base FROM..UNTIL --compare FROM..UNTIL [--json] [-o FILE]\n"
	"\n"
	"Two ranges of the history side by side: each function's share of the samples\n"
	"(own and total) in the base range and in the compared one, the functions whose\n"
	"own share changed most first.  Shares, not counts, so ranges of different\n"
	"lengths compare fairly.  A time is unix seconds, local YYYY-MM-DDTHH:MM[:SS],\n"
	"now, or -D for D ago (-90s, -15m, -2h, -1d): --base -2h..-1h --compare -1h..now.\n"
	"The daemon counts and orders; one request answers both ranges.\n"
	"\n"
	"  --limit N         the first N functions (default: all)\n"
	"  --json            one JSON object: {base_samples, compare_samples,\n"
	"                    functions_found, functions:\n"
	"                    [{function, file, base_own, base_total, compare_own,\n"
	"                    compare_total, own_percent_change, total_percent_change}]}\n";

/* Options every command takes, after it as before it; last, as they end the table. */
#define CTL_COMMON_OPTIONS                                                                         \
	{"json", no_argument, NULL, 'j'}, {"socket", required_argument, NULL, 'S'},                  \
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}

static int ctl_usage_error(const struct ctl *ctl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* One stderr line for a usage error; returns EXIT_USAGE. */
static int ctl_usage_error(const struct ctl *ctl, const char *fmt, ...)
{
	va_list ap;
	fputs("pyprofd-ctl: ", stderr);
	if (ctl->cmd)
		fprintf(stderr, "%s: ", ctl->cmd->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (ctl->cmd)
		fprintf(stderr, " (see pyprofd-ctl %s --help)\n", ctl->cmd->name);
	else
		fputs(" (see pyprofd-ctl --help)\n", stderr);
	return EXIT_USAGE;
}

/*
 * An option getopt handed back that every command shares, or one it
 * rejected.  -1 when parsing goes on; else the exit status to return now.
 */
static int ctl_common_option(struct ctl *ctl, int opt, char **argv)
{
	switch (opt) {
	case 'j':
		ctl->json = true;
		return -1;
	case 'S':
		if (!*optarg)
			return ctl_usage_error(ctl, "--socket needs a path");
		ctl->socket = optarg;
		return -1;
	case 'h':
		fputs(ctl->cmd ? ctl->cmd->usage : usage, stdout);
		return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAILURE_OTHER;
	case ':':
		return ctl_usage_error(ctl, "option '%s' needs a value", argv[optind - 1]);
	default:
		if (optopt)
			return ctl_usage_error(ctl, "unknown option '-%c'", optopt);
		return ctl_usage_error(ctl, "unknown option '%s'", argv[optind - 1]);
	}
}

static int ctl_parse_pid(const struct ctl *ctl, const char *arg, int32_t *pid)
{
	char *end;
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (*arg == '\0' || *end != '\0' || errno != 0 || v <= 0 || v > INT32_MAX)
		return ctl_usage_error(ctl, "'%s' is not a process id", arg);
	*pid = (int32_t)v;
	return EXIT_OK;
}

/* The single PID operand left after the options. */
static int ctl_pid_operand(const struct ctl *ctl, int argc, char **argv, int32_t *pid)
{
	if (optind + 1 != argc)
		return ctl_usage_error(ctl, "takes exactly one PID");
	return ctl_parse_pid(ctl, argv[optind], pid);
}

static int ctl_no_operand(const struct ctl *ctl, int argc, char **argv)
{
	if (optind != argc)
		return ctl_usage_error(ctl, "unexpected argument '%s'", argv[optind]);
	return EXIT_OK;
}

/* A whole number in [min, UINT32_MAX]; EXIT_OK or a usage error. */
static int ctl_parse_u32(const struct ctl *ctl, const char *option, const char *arg, uint32_t min,
                         uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 10);
	if (*arg < '0' || *arg > '9' || *end != '\0' || errno != 0 || v < min || v > UINT32_MAX)
		return ctl_usage_error(ctl, "%s takes a whole number from %u to %u, not '%s'", option,
		                       min, UINT32_MAX, arg);
	*out = (uint32_t)v;
	return EXIT_OK;
}

/*
 * The socket to use: --socket, $PYPROFD_SOCKET, the system socket when root
 * and it exists, else the per-user one, found as the daemon finds its state
 * directory ($XDG_STATE_HOME/pyprofd or $HOME/.local/state/pyprofd, either
 * only when absolute).  Malloc'd; NULL after printing why (*status set).
 */
static char *ctl_socket_path(const struct ctl *ctl, int *status)
{
	const char *env = getenv("PYPROFD_SOCKET");
	const char *path = ctl->socket ? ctl->socket : env && *env ? env : NULL;
	struct stat st;
	if (!path && geteuid() == 0 && stat(CTL_SYSTEM_SOCKET, &st) == 0)
		path = CTL_SYSTEM_SOCKET;
	const char *xdg = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	char *out = NULL;
	int rc = 0;
	if (path)
		out = strdup(path);
	else if (xdg && *xdg == '/')
		rc = asprintf(&out, "%s/pyprofd/" CTL_SOCKET_NAME, xdg);
	else if (home && *home == '/')
		rc = asprintf(&out, "%s/.local/state/pyprofd/" CTL_SOCKET_NAME, home);
	else {
		fputs("pyprofd-ctl: cannot tell where the daemon's socket is: neither XDG_STATE_HOME "
		      "nor HOME is an absolute path (use --socket or PYPROFD_SOCKET)\n",
		      stderr);
		*status = EXIT_UNREACHABLE;
		return NULL;
	}
	if (rc < 0 || !out) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		*status = EXIT_FAILURE_OTHER;
		return NULL;
	}
	/* A user with no daemon of its own talks to the system's. */
	if (!path && stat(out, &st) != 0 && stat(CTL_SYSTEM_SOCKET, &st) == 0) {
		free(out);
		out = strdup(CTL_SYSTEM_SOCKET);
		if (!out) {
			fputs("pyprofd-ctl: out of memory\n", stderr);
			*status = EXIT_FAILURE_OTHER;
		}
	}
	return out;
}

int ctl_report(const struct client_error *err)
{
	fprintf(stderr, "pyprofd-ctl: %s\n", err->msg);
	switch (err->status) {
	case CLIENT_EUNREACHABLE: return EXIT_UNREACHABLE;
	case CLIENT_EDAEMON: return vocab_code_exit(err->code);
	default: return EXIT_FAILURE_OTHER;
	}
}

/* Connect to the daemon; NULL after printing why (*status is the exit status). */
static struct client *ctl_connect(const struct ctl *ctl, int *status)
{
	char *path = ctl_socket_path(ctl, status);
	if (!path)
		return NULL;
	struct client_error err;
	struct client *c = client_connect(path, &err);
	free(path);
	if (!c)
		*status = ctl_report(&err);
	return c;
}

/* One request, its whole answer; NULL after printing why (*status is the exit status). */
static struct client_reply *ctl_call(const struct ctl *ctl, Pyprofd__Request *req, int *status)
{
	struct client *c = ctl_connect(ctl, status);
	if (!c)
		return NULL;
	struct client_error err;
	struct client_reply *reply = client_call(c, req, &err);
	client_free(c);
	if (!reply)
		*status = ctl_report(&err);
	return reply;
}

/* Flush stdout; a failed write is an error the caller must hear of. */
static int ctl_finish(int status)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fputs("pyprofd-ctl: cannot write the output\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	return status;
}

static int ctl_print_json(json_t *doc)
{
	if (format_json_print(doc) != 0) {
		fputs("pyprofd-ctl: cannot write the JSON output (out of memory?)\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	return ctl_finish(EXIT_OK);
}

/* A result may leave out its target; print it as an empty one rather than crash. */
static const Pyprofd__Target *target_or_empty(const Pyprofd__Target *t)
{
	static const Pyprofd__Target empty = PYPROFD__TARGET__INIT;
	return t ? t : &empty;
}

/* --- attach --- */

static int cmd_attach(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"rate", required_argument, NULL, 'r'},  {"mode", required_argument, NULL, 'm'},
		{"duration", required_argument, NULL, 'd'}, {"label", required_argument, NULL, 'l'},
		{"native", no_argument, NULL, 'n'},      {"gc", no_argument, NULL, 'g'},
		CTL_COMMON_OPTIONS,
	};
	Pyprofd__AttachRequest a = PYPROFD__ATTACH_REQUEST__INIT;
	/* Every label is one argument, so argc bounds their number. */
	Pyprofd__Label *labels = calloc((size_t)argc, sizeof *labels);
	Pyprofd__Label **label_ptrs = calloc((size_t)argc, sizeof *label_ptrs);
	int status = EXIT_OK;
	if (!labels || !label_ptrs) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		status = EXIT_FAILURE_OTHER;
		goto out;
	}
	a.labels = label_ptrs;

	int opt;
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		switch (opt) {
		case 'r':
			status = ctl_parse_u32(ctl, "--rate", optarg, 1, &a.rate_hz);
			break;
		case 'm':
			if (vocab_wire_mode_parse(optarg, &a.mode) != 0)
				status = ctl_usage_error(ctl, "--mode is wall, cpu or gil, not '%s'", optarg);
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
		case 'l': {
			char *eq = strchr(optarg, '=');
			if (!eq || eq == optarg) {
				status = ctl_usage_error(ctl, "--label takes KEY=VALUE, not '%s'", optarg);
				break;
			}
			Pyprofd__Label *l = &labels[a.n_labels];
			pyprofd__label__init(l);
			l->key = strndup(optarg, (size_t)(eq - optarg));
			l->value = eq + 1;
			label_ptrs[a.n_labels++] = l;
			if (!l->key) {
				fputs("pyprofd-ctl: out of memory\n", stderr);
				status = EXIT_FAILURE_OTHER;
			}
			break;
		}
		case 'n': a.native = true; break;
		case 'g': a.gc = true; break;
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
	if ((status = ctl_pid_operand(ctl, argc, argv, &a.pid)) != EXIT_OK)
		goto out;

	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_ATTACH;
	req.attach = &a;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		goto out;
	const Pyprofd__AttachResult *r = reply->parts[0]->attach;
	const Pyprofd__Target *t = target_or_empty(r->target);
	if (ctl->json) {
		json_t *doc = format_json_target(t);
		if (doc && json_object_set_new(doc, "warm", json_boolean(r->warm)) != 0) {
			json_decref(doc);
			doc = NULL;
		}
		status = ctl_print_json(doc);
	} else {
		printf("attached to %d (Python ", (int)t->pid);
		format_put(stdout, t->python_version, SIZE_MAX, 0);
		printf("), %u Hz, %s%s\n", t->rate_hz, vocab_wire_mode_name(t->mode), r->warm ? " (warm)" : "");
		status = ctl_finish(EXIT_OK);
	}
	client_reply_free(reply);
out:
	for (size_t i = 0; i < a.n_labels; i++)
		free(labels[i].key);
	free(labels);
	free(label_ptrs);
	return status;
}

/* The options of a command that has only the common ones: -1 to go on, else its exit status. */
static int ctl_common_options_only(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {CTL_COMMON_OPTIONS};
	int opt, status;
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
		if ((status = ctl_common_option(ctl, opt, argv)) >= 0)
			return status;
	return -1;
}

/* --- detach --- */

static int cmd_detach(struct ctl *ctl, int argc, char **argv)
{
	int status = ctl_common_options_only(ctl, argc, argv);
	if (status >= 0)
		return status;
	Pyprofd__DetachRequest d = PYPROFD__DETACH_REQUEST__INIT;
	if ((status = ctl_pid_operand(ctl, argc, argv, &d.pid)) != EXIT_OK)
		return status;

	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_DETACH;
	req.detach = &d;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		return status;
	const Pyprofd__Target *t = target_or_empty(reply->parts[0]->detach->target);
	if (ctl->json) {
		status = ctl_print_json(format_json_target(t));
	} else {
		printf("detached from %d; its state is kept warm\n", (int)d.pid);
		status = ctl_finish(EXIT_OK);
	}
	client_reply_free(reply);
	return status;
}

/* --- list --- */

/* Total width of a list line; the command line gets what the other columns leave. */
#define LIST_WIDTH 120

enum { LIST_PID, LIST_STATE, LIST_PYTHON, LIST_RATE, LIST_MODE, LIST_SAMPLES, LIST_ERRORS,
       LIST_LABELS, LIST_COMMAND, LIST_NCOLS };

static const char *const list_header[LIST_NCOLS] = {
	"PID", "STATE", "PYTHON", "RATE", "MODE", "SAMPLES", "ERRORS", "LABELS", "COMMAND",
};

/* "k=v,k=v", or "-" when there are none; malloc'd, NULL if out of memory. */
static char *list_labels(const Pyprofd__Target *t)
{
	if (t->n_labels == 0)
		return strdup("-");
	size_t len = 1;
	for (size_t i = 0; i < t->n_labels; i++)
		len += strlen(format_str(t->labels[i]->key)) + strlen(format_str(t->labels[i]->value)) + 2;
	char *s = malloc(len);
	if (!s)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < t->n_labels; i++)
		o += (size_t)snprintf(s + o, len - o, "%s%s=%s", i ? "," : "",
		                      format_str(t->labels[i]->key), format_str(t->labels[i]->value));
	return s;
}

/* The cells of one row; every cell is malloc'd. */
static int list_cells(const Pyprofd__Target *t, char *cells[LIST_NCOLS])
{
	const char *python = format_str(t->python_version);
	const char *command = format_str(t->command_line);
	if (asprintf(&cells[LIST_PID], "%d", (int)t->pid) < 0)
		cells[LIST_PID] = NULL;
	cells[LIST_STATE] = strdup(*format_str(t->state) ? t->state : "-");
	cells[LIST_PYTHON] = strdup(*python ? python : "-");
	if (asprintf(&cells[LIST_RATE], "%u", t->rate_hz) < 0)
		cells[LIST_RATE] = NULL;
	cells[LIST_MODE] = strdup(vocab_wire_mode_name(t->mode));
	if (asprintf(&cells[LIST_SAMPLES], "%llu", (unsigned long long)t->samples) < 0)
		cells[LIST_SAMPLES] = NULL;
	if (asprintf(&cells[LIST_ERRORS], "%llu", (unsigned long long)t->errors) < 0)
		cells[LIST_ERRORS] = NULL;
	cells[LIST_LABELS] = list_labels(t);
	cells[LIST_COMMAND] = strdup(*command ? command : format_str(t->executable));
	for (int k = 0; k < LIST_NCOLS; k++)
		if (!cells[k])
			return -1;
	return 0;
}

static int list_text(const Pyprofd__Target *const *targets, size_t n)
{
	char **cells = calloc(n * LIST_NCOLS + 1, sizeof *cells);
	if (!cells) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	int status = EXIT_OK;
	size_t width[LIST_NCOLS];
	for (int k = 0; k < LIST_NCOLS; k++)
		width[k] = strlen(list_header[k]);
	for (size_t i = 0; i < n; i++) {
		char **row = cells + i * LIST_NCOLS;
		if (list_cells(targets[i], row) != 0) {
			fputs("pyprofd-ctl: out of memory\n", stderr);
			status = EXIT_FAILURE_OTHER;
			goto out;
		}
		for (int k = 0; k < LIST_COMMAND; k++) {
			size_t w = format_width(row[k]);
			if (w > width[k])
				width[k] = w;
		}
	}
	size_t used = 0;
	for (int k = 0; k < LIST_COMMAND; k++)
		used += width[k] + 2;
	/* Even when the other columns leave less, show the start of the command. */
	size_t room = used + 20 < LIST_WIDTH ? LIST_WIDTH - used : 20;

	for (size_t i = 0; i <= n; i++) {
		const char *const *row =
			i == 0 ? list_header : (const char *const *)cells + (i - 1) * LIST_NCOLS;
		for (int k = 0; k < LIST_COMMAND; k++) {
			/* numbers to the right, words to the left */
			bool right = k == LIST_PID || k == LIST_RATE || k == LIST_SAMPLES || k == LIST_ERRORS;
			size_t w = format_width(row[k]);
			for (size_t s = w; right && s < width[k]; s++)
				putchar(' ');
			format_put(stdout, row[k], SIZE_MAX, right ? 0 : width[k]);
			fputs("  ", stdout);
		}
		const char *cmd = row[LIST_COMMAND];
		if (format_width(cmd) > room) {
			format_put(stdout, cmd, room - 3, 0);
			fputs("...", stdout);
		} else {
			format_put(stdout, cmd, room, 0);
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

static int cmd_list(struct ctl *ctl, int argc, char **argv)
{
	int status = ctl_common_options_only(ctl, argc, argv);
	if (status >= 0)
		return status;
	if ((status = ctl_no_operand(ctl, argc, argv)) != EXIT_OK)
		return status;

	Pyprofd__ListRequest l = PYPROFD__LIST_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_LIST;
	req.list = &l;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		return status;

	/* A long list comes in parts: gather the targets of all of them. */
	size_t n = 0;
	for (size_t p = 0; p < reply->nparts; p++)
		n += reply->parts[p]->list->n_targets;
	const Pyprofd__Target **targets = calloc(n + 1, sizeof *targets);
	if (!targets) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		client_reply_free(reply);
		return EXIT_FAILURE_OTHER;
	}
	size_t k = 0;
	for (size_t p = 0; p < reply->nparts; p++)
		for (size_t i = 0; i < reply->parts[p]->list->n_targets; i++)
			targets[k++] = target_or_empty(reply->parts[p]->list->targets[i]);

	if (ctl->json) {
		json_t *doc = json_array();
		for (size_t i = 0; doc && i < n; i++) {
			if (json_array_append_new(doc, format_json_target(targets[i])) != 0) {
				json_decref(doc);
				doc = NULL;
			}
		}
		status = ctl_print_json(doc);
	} else {
		status = list_text(targets, n);
	}
	free(targets);
	client_reply_free(reply);
	return status;
}

/* --- dump --- */

/* The frame bound `pyprofd dump` names when a stack is cut (UW_MAX_FRAMES). */
#define DUMP_MAX_FRAMES 8192

static bool frame_is_python(const Pyprofd__Frame *f)
{
	return vocab_kind_parse(f->kind) == UW_FRAME_PYTHON;
}

/* The text of `pyprofd dump` (daemon/dump.c), line for line. */
static void dump_text(const Pyprofd__DumpResult *head, struct client_reply *reply)
{
	/* The contract carries no runtime file, so the header stops at the version. */
	if (head->runtime_file && *head->runtime_file)
		printf("Process %d: Python %s (%s)\n", (int)head->pid, format_str(head->python_version),
		       head->runtime_file);
	else
		printf("Process %d: Python %s\n", (int)head->pid, format_str(head->python_version));
	for (size_t p = 0; p < reply->nparts; p++) {
		const Pyprofd__DumpResult *d = reply->parts[p]->dump;
		for (size_t i = 0; i < d->n_threads; i++) {
			const Pyprofd__Thread *th = d->threads[i];
			printf("\nThread %llu", (unsigned long long)th->thread_id);
			if (th->native_thread_id > 0)
				printf(" (native %lld)", (long long)th->native_thread_id);
			if (th->interpreter_id != 0)
				printf(" interpreter %lld", (long long)th->interpreter_id);
			printf("%s%s%s\n", th->gil ? " [gil]" : "", th->on_cpu ? " [on-cpu]" : "",
			       !th->gil && !th->on_cpu ? " [idle]" : "");
			for (size_t k = 0; k < th->n_frames; k++) {
				const Pyprofd__Frame *f = th->frames[k];
				if (!frame_is_python(f))
					printf("    %s\n", format_str(f->function));
				else if (f->line >= 0)
					printf("    %s (%s:%d)\n", format_str(f->function), format_str(f->file),
					       (int)f->line);
				else
					printf("    %s (%s)\n", format_str(f->function), format_str(f->file));
			}
			if (th->unreadable)
				printf("    (stack not shown: it kept changing while it was read)\n");
			if (th->truncated)
				printf("    ... (truncated at %u frames)\n", DUMP_MAX_FRAMES);
		}
	}
}

/* "" on the wire stands for `pyprofd dump`'s null. */
static json_t *json_string_or_null(const char *s)
{
	return s && *s ? format_json_string(s) : json_null();
}

/* The JSON of `pyprofd dump --json`: same keys, same order; NULL if out of memory. */
static json_t *dump_json(const Pyprofd__DumpResult *head, struct client_reply *reply)
{
	json_t *threads = json_array();
	for (size_t p = 0; threads && p < reply->nparts; p++) {
		const Pyprofd__DumpResult *d = reply->parts[p]->dump;
		for (size_t i = 0; threads && i < d->n_threads; i++) {
			const Pyprofd__Thread *th = d->threads[i];
			json_t *frames = json_array();
			for (size_t k = 0; frames && k < th->n_frames; k++) {
				const Pyprofd__Frame *f = th->frames[k];
				json_t *frame = json_pack(
					"{s:o, s:o, s:o, s:o, s:o}", "function", format_json_string(f->function),
					"qualname", json_string_or_null(f->qualname), "file",
					json_string_or_null(f->file), "line",
					f->line >= 0 ? json_integer(f->line) : json_null(), "kind",
					frame_is_python(f) ? json_string("python") : format_json_string(f->kind));
				if (json_array_append_new(frames, frame) != 0) {
					json_decref(frames);
					frames = NULL;
				}
			}
			json_t *thread = json_pack(
				"{s:I, s:o, s:I, s:b, s:b, s:b, s:b, s:o}", "thread_id",
				(json_int_t)th->thread_id, "native_thread_id",
				th->native_thread_id > 0 ? json_integer(th->native_thread_id) : json_null(),
				"interpreter_id", (json_int_t)th->interpreter_id, "gil", th->gil, "on_cpu",
				th->on_cpu, "truncated", th->truncated, "unreadable", th->unreadable, "frames",
				frames);
			if (json_array_append_new(threads, thread) != 0) {
				json_decref(threads);
				threads = NULL;
			}
		}
	}
	return json_pack("{s:i, s:o, s:o}", "pid", (int)head->pid, "python_version",
	                 format_json_string(head->python_version), "threads", threads);
}

static int cmd_dump(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"native", no_argument, NULL, 'n'},
		{"gc", no_argument, NULL, 'g'},
		CTL_COMMON_OPTIONS,
	};
	Pyprofd__DumpRequest d = PYPROFD__DUMP_REQUEST__INIT;
	int opt, status;
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		if (opt == 'n')
			d.native = true;
		else if (opt == 'g')
			d.gc = true;
		else if ((status = ctl_common_option(ctl, opt, argv)) >= 0)
			return status;
	}
	if ((status = ctl_pid_operand(ctl, argc, argv, &d.pid)) != EXIT_OK)
		return status;

	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_DUMP;
	req.dump = &d;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		return status;
	/* The threads of a large dump come in parts; the first part heads it. */
	const Pyprofd__DumpResult *head = reply->parts[0]->dump;
	if (ctl->json) {
		status = ctl_print_json(dump_json(head, reply));
	} else {
		dump_text(head, reply);
		status = ctl_finish(EXIT_OK);
	}
	client_reply_free(reply);
	return status;
}

/* --- stats --- */

/* The figures after the counters, in order; a counter of the same name gives way to them. */
static const char *const stats_fields[] = {
	"achieved_rate_hz", "jitter_us_p50", "jitter_us_p99", "sample_us_p50",
	"sample_us_p99",    "cache_bytes",   "missed_ticks",
};
#define STATS_NFIELDS (sizeof stats_fields / sizeof stats_fields[0])
#define STATS_NREALS 5 /* the first five are measurements, the rest counts */

static bool stats_counter_shown(const Pyprofd__Counter *ctr)
{
	const char *name = format_str(ctr->name);
	if (strcmp(name, "pid") == 0 || strcmp(name, "target") == 0)
		return false;
	for (size_t k = 0; k < STATS_NFIELDS; k++)
		if (strcmp(name, stats_fields[k]) == 0)
			return false;
	return true;
}

static double stats_real(const Pyprofd__StatsResult *r, size_t k)
{
	const double v[STATS_NREALS] = {r->achieved_rate_hz, r->jitter_us_p50, r->jitter_us_p99,
	                                r->sample_us_p50, r->sample_us_p99};
	return v[k];
}

static uint64_t stats_count(const Pyprofd__StatsResult *r, size_t k)
{
	return k == STATS_NREALS ? r->cache_bytes : r->missed_ticks;
}

/* `name value` lines, names padded to one column; counters of every part first. */
static int stats_text(const Pyprofd__StatsResult *head, struct client_reply *reply)
{
	size_t width = 0;
	for (size_t k = 0; k < STATS_NFIELDS; k++)
		if (strlen(stats_fields[k]) > width)
			width = strlen(stats_fields[k]);
	for (size_t p = 0; p < reply->nparts; p++) {
		const Pyprofd__StatsResult *s = reply->parts[p]->stats;
		for (size_t i = 0; i < s->n_counters; i++)
			if (stats_counter_shown(s->counters[i]) && format_width(s->counters[i]->name) > width)
				width = format_width(s->counters[i]->name);
	}
	for (size_t p = 0; p < reply->nparts; p++) {
		const Pyprofd__StatsResult *s = reply->parts[p]->stats;
		for (size_t i = 0; i < s->n_counters; i++) {
			if (!stats_counter_shown(s->counters[i]))
				continue;
			format_put(stdout, s->counters[i]->name, SIZE_MAX, width);
			printf(" %llu\n", (unsigned long long)s->counters[i]->value);
		}
	}
	for (size_t k = 0; k < STATS_NFIELDS; k++) {
		if (k < STATS_NREALS)
			printf("%-*s %.2f\n", (int)width, stats_fields[k], stats_real(head, k));
		else
			printf("%-*s %llu\n", (int)width, stats_fields[k],
			       (unsigned long long)stats_count(head, k));
	}
	return ctl_finish(EXIT_OK);
}

static json_t *stats_json(int32_t pid, const Pyprofd__StatsResult *head, struct client_reply *reply)
{
	const Pyprofd__Target *t = target_or_empty(head->target);
	json_t *doc = json_pack("{s:i, s:o}", "pid", (int)(head->target ? t->pid : pid), "target",
	                        format_json_target(t));
	for (size_t p = 0; doc && p < reply->nparts; p++) {
		const Pyprofd__StatsResult *s = reply->parts[p]->stats;
		for (size_t i = 0; doc && i < s->n_counters; i++) {
			if (!stats_counter_shown(s->counters[i]))
				continue;
			json_t *name = format_json_string(s->counters[i]->name);
			if (!name || json_object_set_new(doc, json_string_value(name),
			                                 format_json_u64(s->counters[i]->value)) != 0) {
				json_decref(doc);
				doc = NULL;
			}
			json_decref(name);
		}
	}
	for (size_t k = 0; doc && k < STATS_NFIELDS; k++) {
		json_t *v = k < STATS_NREALS ? format_json_double(stats_real(head, k))
		                             : format_json_u64(stats_count(head, k));
		if (json_object_set_new(doc, stats_fields[k], v) != 0) {
			json_decref(doc);
			doc = NULL;
		}
	}
	return doc;
}

static int cmd_stats(struct ctl *ctl, int argc, char **argv)
{
	int status = ctl_common_options_only(ctl, argc, argv);
	if (status >= 0)
		return status;
	Pyprofd__StatsRequest s = PYPROFD__STATS_REQUEST__INIT;
	if ((status = ctl_pid_operand(ctl, argc, argv, &s.pid)) != EXIT_OK)
		return status;

	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_STATS;
	req.stats = &s;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		return status;
	/* Counters may come in parts; the figures after them are the first part's. */
	const Pyprofd__StatsResult *head = reply->parts[0]->stats;
	if (ctl->json)
		status = ctl_print_json(stats_json(s.pid, head, reply));
	else
		status = stats_text(head, reply);
	client_reply_free(reply);
	return status;
}

/* --- status --- */

static int cmd_status(struct ctl *ctl, int argc, char **argv)
{
	int status = ctl_common_options_only(ctl, argc, argv);
	if (status >= 0)
		return status;
	if ((status = ctl_no_operand(ctl, argc, argv)) != EXIT_OK)
		return status;

	Pyprofd__StatusRequest s = PYPROFD__STATUS_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_STATUS;
	req.status = &s;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		return status;
	const Pyprofd__StatusResult *r = reply->parts[0]->status;
	if (ctl->json) {
		json_t *doc = json_pack(
			"{s:o, s:i, s:o, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "version",
			format_json_string(r->version), "pid", (int)r->pid, "uptime_s",
			format_json_double(r->uptime_s), "targets_sampling", (json_int_t)r->targets_sampling,
			"targets_detached", (json_int_t)r->targets_detached, "targets_exited",
			(json_int_t)r->targets_exited, "connections", (json_int_t)r->connections,
			"warm_bytes", format_json_u64(r->warm_bytes), "warm_budget_bytes",
			format_json_u64(r->warm_budget_bytes), "rss_bytes", format_json_u64(r->rss_bytes),
			"cpu_percent", format_json_double(r->cpu_percent), "state_dir",
			format_json_string(r->state_dir), "socket", format_json_string(r->socket));
		json_t *history = json_pack(
			"{s:o, s:b, s:b, s:o, s:o, s:o, s:o, s:o, s:o}", "file", format_json_string(r->history_file),
			"open", r->history_open, "failing", r->history_failing, "error", format_json_string(r->history_error),
			"pending_rows", format_json_u64(r->history_pending_rows), "rows_written",
			format_json_u64(r->history_rows_written), "dropped_rows",
			format_json_u64(r->history_dropped_rows), "bytes", format_json_u64(r->history_bytes),
			"lost_samples", format_json_u64(r->history_lost_samples));
		if (doc && history)
			json_object_set_new(doc, "history", history);
		else
			json_decref(history);
		status = ctl_print_json(doc);
	} else {
		printf("version: ");
		format_put(stdout, r->version, SIZE_MAX, 0);
		printf("\npid: %d\n", (int)r->pid);
		printf("uptime_s: %.1f\n", r->uptime_s);
		printf("targets_sampling: %u\n", r->targets_sampling);
		printf("targets_detached: %u\n", r->targets_detached);
		printf("targets_exited: %u\n", r->targets_exited);
		printf("connections: %u\n", r->connections);
		printf("warm_bytes: %llu\n", (unsigned long long)r->warm_bytes);
		printf("warm_budget_bytes: %llu\n", (unsigned long long)r->warm_budget_bytes);
		printf("rss_bytes: %llu\n", (unsigned long long)r->rss_bytes);
		printf("cpu_percent: %.2f\n", r->cpu_percent);
		printf("state_dir: ");
		format_put(stdout, r->state_dir, SIZE_MAX, 0);
		printf("\nsocket: ");
		format_put(stdout, r->socket, SIZE_MAX, 0);
		printf("\nhistory: ");
		format_put(stdout, r->history_file, SIZE_MAX, 0);
		printf(", %llu rows written, %llu waiting, %llu bytes%s",
		       (unsigned long long)r->history_rows_written,
		       (unsigned long long)r->history_pending_rows, (unsigned long long)r->history_bytes,
		       r->history_failing ? ", FAILING: " : "");
		if (r->history_failing)
			format_put(stdout, r->history_error, SIZE_MAX, 0);
		if (r->history_dropped_rows || r->history_lost_samples)
			printf(" (%llu rows dropped, %llu samples lost)",
			       (unsigned long long)r->history_dropped_rows,
			       (unsigned long long)r->history_lost_samples);
		putchar('\n');
		status = ctl_finish(EXIT_OK);
	}
	client_reply_free(reply);
	return status;
}

/* --- top --- */

static int cmd_top(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"window", required_argument, NULL, 'w'},
		{"limit", required_argument, NULL, 'n'},
		{"once", no_argument, NULL, '1'},
		CTL_COMMON_OPTIONS,
	};
	struct top_options o = {0};
	int opt, status = EXIT_OK;
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		if (opt == 'w')
			status = ctl_parse_u32(ctl, "--window", optarg, 1, &o.window_s);
		else if (opt == 'n')
			status = ctl_parse_u32(ctl, "--limit", optarg, 0, &o.limit);
		else if (opt == '1')
			o.once = true;
		else if ((status = ctl_common_option(ctl, opt, argv)) < 0)
			status = EXIT_OK;
		else
			return status;
		if (status != EXIT_OK)
			return status;
	}
	if ((status = ctl_pid_operand(ctl, argc, argv, &o.pid)) != EXIT_OK)
		return status;
	o.json = ctl->json;

	struct client *c = ctl_connect(ctl, &status);
	if (!c)
		return status;
	status = top_run(c, &o);
	client_free(c);
	return status;
}

/* --- query --- */

/* -o's file, or standard output without one; NULL (said on stderr) if it cannot be written. */
static FILE *output_open(const char *path)
{
	FILE *out = path ? fopen(path, "wb") : stdout;
	if (!out)
		fprintf(stderr, "pyprofd-ctl: cannot write %s: %s\n", path, strerror(errno));
	return out;
}

/* Closes what output_open gave after a writer returned rc; the exit status. */
static int output_close(FILE *out, const char *path, int rc)
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

/* "90s", "15m", "2h", "1d" or plain seconds; -1 if it is none of those. */
static double parse_duration(const char *arg)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	if (end == arg || errno != 0 || !(v >= 0))
		return -1;
	double unit = *end == '\0' || strcmp(end, "s") == 0 ? 1
	              : strcmp(end, "m") == 0                ? 60
	              : strcmp(end, "h") == 0                ? 3600
	              : strcmp(end, "d") == 0                ? 86400
	                                                     : -1;
	return unit < 0 ? -1 : v * unit;
}

/* Unix seconds, or local time YYYY-MM-DDTHH:MM[:SS]; -1 if neither. */
static double parse_time(const char *arg)
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

/*
 * One of the selection options query and diff share, into q: --pid, --target,
 * --label (labels, sized by argc, hold them), --thread.  -1 when opt is none of them;
 * else EXIT_OK or a usage error.
 */
static int selection_option(const struct ctl *ctl, int opt, Pyprofd__QueryRequest *q,
                            Pyprofd__Label *labels)
{
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
		Pyprofd__Label *l = &labels[q->n_labels];
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
	}
	return -1;
}

/* The query's answer, all parts, as the export writers take it. */
static int query_export(const struct client_reply *reply, const char *name,
                        enum export_format format, FILE *out)
{
	size_t nframes = 0, nstacks = 0;
	for (size_t i = 0; i < reply->nparts; i++) {
		nframes += reply->parts[i]->query->n_frames;
		nstacks += reply->parts[i]->query->n_stacks;
	}
	if (nframes > UINT32_MAX || nstacks > UINT32_MAX)
		return -1;
	struct export_frame *frames = calloc(nframes ? nframes : 1, sizeof *frames);
	struct export_stack *stacks = calloc(nstacks ? nstacks : 1, sizeof *stacks);
	int rc = -1;
	if (!frames || !stacks)
		goto out;
	size_t f = 0, s = 0;
	for (size_t i = 0; i < reply->nparts; i++) {
		const Pyprofd__QueryResult *r = reply->parts[i]->query;
		for (size_t k = 0; k < r->n_frames; k++, f++) {
			const Pyprofd__QueryFrame *qf = r->frames[k];
			frames[f] = (struct export_frame){
				.function = format_str(qf->function),
				.file = format_str(qf->file),
				.line = qf->line,
				.kind = vocab_kind_parse(qf->kind),
			};
		}
		for (size_t k = 0; k < r->n_stacks; k++, s++)
			stacks[s] = (struct export_stack){.frames = r->stacks[k]->frames,
			                                  .depth = (uint32_t)r->stacks[k]->n_frames,
			                                  .count = r->stacks[k]->count};
	}
	const Pyprofd__QueryResult *head = reply->parts[0]->query;
	struct export_profile p = {
		.frames = frames,
		.nframes = (uint32_t)nframes,
		.stacks = stacks,
		.nstacks = (uint32_t)nstacks,
		.name = name,
		.mode = head->mode && *head->mode ? head->mode : "wall",
		.rate_hz = head->rate_hz ? head->rate_hz : 100,
		.from_unix = head->from_unix,
		.until_unix = head->until_unix,
	};
	rc = export_write(&p, format, out);
out:
	free(frames);
	free(stacks);
	return rc;
}

static int cmd_query(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"pid", required_argument, NULL, 'p'},    {"label", required_argument, NULL, 'l'},
		{"since", required_argument, NULL, 's'},  {"from", required_argument, NULL, 'f'},
		{"until", required_argument, NULL, 'u'},  {"thread", required_argument, NULL, 't'},
		{"format", required_argument, NULL, 'F'}, {"output", required_argument, NULL, 'o'},
		{"limit", required_argument, NULL, 'n'},  {"target", required_argument, NULL, 'T'},
		CTL_COMMON_OPTIONS,
	};
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	bool table = false, processes = false;
	Pyprofd__Label *labels = calloc((size_t)argc, sizeof *labels);
	Pyprofd__Label **label_ptrs = calloc((size_t)argc, sizeof *label_ptrs);
	enum export_format format = EXPORT_COLLAPSED;
	const char *output = NULL;
	double since = -1;
	char name[256] = "all processes";
	int status = EXIT_OK, opt;
	if (!labels || !label_ptrs) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		status = EXIT_FAILURE_OTHER;
		goto out;
	}
	q.labels = label_ptrs;
	while (status == EXIT_OK && (opt = getopt_long(argc, argv, ":ho:", options, NULL)) != -1) {
		if ((status = selection_option(ctl, opt, &q, labels)) >= 0)
			continue;
		status = EXIT_OK;
		switch (opt) {
		case 's':
			if ((since = parse_duration(optarg)) < 0)
				status = ctl_usage_error(ctl, "--since takes a duration such as 90s, 15m, 2h or 1d");
			break;
		case 'f':
		case 'u': {
			double t = parse_time(optarg);
			if (t < 0)
				status = ctl_usage_error(ctl, "--%s takes unix seconds or YYYY-MM-DDTHH:MM[:SS]",
				                         opt == 'f' ? "from" : "until");
			else if (opt == 'f')
				q.from_unix = t;
			else
				q.until_unix = t;
			break;
		}
		case 'F':
			/* The table is counted by the daemon; the other formats are written from stacks. */
			table = strcmp(optarg, "table") == 0;
			processes = strcmp(optarg, "processes") == 0;
			if (!table && !processes && export_format_parse(optarg, &format) != 0)
				status = ctl_usage_error(ctl, "unknown format '%s'", optarg);
			break;
		case 'n':
			status = ctl_parse_u32(ctl, "--limit", optarg, 0, &q.limit);
			break;
		case 'o':
			output = optarg;
			break;
		default:
			if ((status = ctl_common_option(ctl, opt, argv)) < 0)
				status = EXIT_OK;
			else if (status == EXIT_OK)
				status = -1; /* --help printed */
		}
	}
	if (status == -1) {
		status = EXIT_OK;
		goto out;
	}
	if (status != EXIT_OK)
		goto out;
	if ((status = ctl_no_operand(ctl, argc, argv)) != EXIT_OK)
		goto out;
	if (q.limit && !table) {
		status = ctl_usage_error(ctl, "--limit goes with --format table");
		goto out;
	}
	if (table)
		q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_FUNCTIONS;
	if (processes)
		q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
	if (q.target_id)
		snprintf(name, sizeof name, "target %lld", (long long)q.target_id);
	else if (q.pid)
		snprintf(name, sizeof name, "pid %d", (int)q.pid);
	else if (q.n_labels)
		snprintf(name, sizeof name, "%s=%s", q.labels[0]->key, q.labels[0]->value);
	if (since >= 0) {
		if (q.from_unix || q.until_unix) {
			status = ctl_usage_error(ctl, "--since and --from/--until do not go together");
			goto out;
		}
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		q.from_unix = (double)now.tv_sec - since;
	}
	if (q.until_unix && q.until_unix < q.from_unix) {
		status = ctl_usage_error(ctl, "--until is before --from");
		goto out;
	}

	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		goto out;
	FILE *out = output_open(output);
	if (!out) {
		status = EXIT_FAILURE_OTHER;
	} else {
		const Pyprofd__QueryResult *head = reply->parts[0]->query;
		if (!table && !processes && head->total && !head->rate_hz)
			fputs("pyprofd-ctl: the selected processes were sampled at different rates or in "
			      "different modes; times assume 100 Hz wall-clock samples\n",
			      stderr);
		int rc = table       ? functions_write(reply, name, false, ctl->json, out)
		         : processes ? processes_write(reply, ctl->json, out)
		                     : query_export(reply, name, format, out);
		status = output_close(out, output, rc);
	}
	client_reply_free(reply);
out:
	free(labels);
	free(label_ptrs);
	return status;
}

/* --- diff --- */

/* A time of a diff range: as parse_time, or "now", or "-D" for D ago; -1 if none. */
static double parse_when(const char *arg, double now)
{
	if (strcmp(arg, "now") == 0)
		return now;
	if (arg[0] == '-') {
		double ago = parse_duration(arg + 1);
		return ago < 0 ? -1 : now - ago;
	}
	return parse_time(arg);
}

/* "FROM..UNTIL" into q; EXIT_OK or a usage error. */
static int parse_range(const struct ctl *ctl, const char *option, const char *arg, double now,
                       Pyprofd__QueryRequest *q)
{
	const char *dots = strstr(arg, "..");
	char from[64];
	if (!dots || (size_t)(dots - arg) >= sizeof from)
		return ctl_usage_error(ctl, "%s takes FROM..UNTIL, not '%s'", option, arg);
	memcpy(from, arg, (size_t)(dots - arg));
	from[dots - arg] = '\0';
	double a = parse_when(from, now), b = parse_when(dots + 2, now);
	if (a < 0 || b < 0 || b < a)
		return ctl_usage_error(ctl, "%s: '%s' is not a range of times (FROM..UNTIL)", option, arg);
	q->from_unix = a;
	q->until_unix = b > a ? b : a + 1e-6;
	return EXIT_OK;
}

static int cmd_diff(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"pid", required_argument, NULL, 'p'},     {"label", required_argument, NULL, 'l'},
		{"thread", required_argument, NULL, 't'},  {"base", required_argument, NULL, 'b'},
		{"compare", required_argument, NULL, 'c'}, {"output", required_argument, NULL, 'o'},
		{"limit", required_argument, NULL, 'n'},   {"target", required_argument, NULL, 'T'},
		CTL_COMMON_OPTIONS,
	};
	/* The compared range is the query's own; the base range rides along in base_*. */
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT, base = PYPROFD__QUERY_REQUEST__INIT;
	Pyprofd__Label *labels = calloc((size_t)argc, sizeof *labels);
	Pyprofd__Label **label_ptrs = calloc((size_t)argc, sizeof *label_ptrs);
	struct client_reply *reply = NULL;
	const char *output = NULL;
	bool have_base = false, have_compare = false;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	int status = EXIT_OK, opt;
	if (!labels || !label_ptrs) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		status = EXIT_FAILURE_OTHER;
		goto out;
	}
	q.labels = label_ptrs;
	while (status == EXIT_OK && (opt = getopt_long(argc, argv, ":ho:", options, NULL)) != -1) {
		if ((status = selection_option(ctl, opt, &q, labels)) >= 0)
			continue;
		status = EXIT_OK;
		switch (opt) {
		case 'b':
			status = parse_range(ctl, "--base", optarg, now, &base);
			have_base = status == EXIT_OK;
			break;
		case 'c':
			status = parse_range(ctl, "--compare", optarg, now, &q);
			have_compare = status == EXIT_OK;
			break;
		case 'n':
			status = ctl_parse_u32(ctl, "--limit", optarg, 0, &q.limit);
			break;
		case 'o':
			output = optarg;
			break;
		default:
			if ((status = ctl_common_option(ctl, opt, argv)) < 0)
				status = EXIT_OK;
			else if (status == EXIT_OK)
				status = -1; /* --help printed */
		}
	}
	if (status == -1) {
		status = EXIT_OK;
		goto out;
	}
	if (status != EXIT_OK || (status = ctl_no_operand(ctl, argc, argv)) != EXIT_OK)
		goto out;
	if (!have_base || !have_compare) {
		status = ctl_usage_error(ctl, "diff needs --base and --compare");
		goto out;
	}
	q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_DIFF;
	q.base_from_unix = base.from_unix;
	q.base_until_unix = base.until_unix;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	if (!(reply = ctl_call(ctl, &req, &status)))
		goto out;
	FILE *out = output_open(output);
	status = out ? output_close(out, output, functions_write(reply, NULL, true, ctl->json, out))
	             : EXIT_FAILURE_OTHER;
out:
	client_reply_free(reply);
	free(labels);
	free(label_ptrs);
	return status;
}

static const struct command commands[] = {
	{"attach", cmd_attach, attach_usage}, {"detach", cmd_detach, detach_usage},
	{"list", cmd_list, list_usage},       {"dump", cmd_dump, dump_usage},
	{"stats", cmd_stats, stats_usage},    {"status", cmd_status, status_usage},
	{"top", cmd_top, top_usage},          {"query", cmd_query, query_usage},
	{"diff", cmd_diff, diff_usage},
};

int ctl_main(int argc, char **argv)
{
	static const struct option options[] = {CTL_COMMON_OPTIONS};
	struct ctl ctl = {0};
	int opt, status;
	opterr = 0; /* one line of our own instead of getopt's */
	/* "+": stop at the command; its own options are parsed by it. */
	while ((opt = getopt_long(argc, argv, "+:h", options, NULL)) != -1)
		if ((status = ctl_common_option(&ctl, opt, argv)) >= 0)
			return status;
	if (optind >= argc)
		return ctl_usage_error(&ctl, "no command given");

	const char *name = argv[optind];
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		if (strcmp(name, commands[i].name) == 0) {
			ctl.cmd = &commands[i];
			int cargc = argc - optind;
			char **cargv = argv + optind;
			optind = 0; /* glibc: start over, with the command's own option string */
			return commands[i].run(&ctl, cargc, cargv);
		}
	}
	return ctl_usage_error(&ctl, "unknown command '%s'", name);
}
