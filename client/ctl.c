/*
 * What every pyprofd-ctl command shares: its common options and usage
 * errors, the daemon's socket, one call and its answer, the exit status of
 * a failure, and writing the output.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ctl.h"
#include "export.h"
#include "wire.h"

/* Where the daemon listens when run by root under systemd. */
#define CTL_SYSTEM_SOCKET "/run/pyprofd/pyprofd.sock"
#define CTL_SOCKET_NAME "pyprofd.sock"

const char ctl_usage[] =
	"usage: pyprofd-ctl [--socket PATH] [--json] COMMAND [ARGS]\n"
	"\n"
	"Control pyprofd, the continuous profiler daemon for Python processes.\n"
	"\n"
	"commands:\n"
	"  attach PID [--rate HZ] [--mode wall|cpu|gil|exception] [--duration S] [--label K=V]...\n"
	"             [--native] [--gc]\n"
	"                    start profiling a process\n"
	"  detach PID        stop profiling it; the daemon keeps its state warm\n"
	"  list [--state STATE] [--label K=V]...\n"
	"                    the processes the daemon knows\n"
	"  dump PID [--native] [--gc]\n"
	"                    every thread's Python stack once, as `pyprofd dump` prints it\n"
	"  stats PID         what sampling a process costs, and how well it keeps its rate\n"
	"  status            the daemon's own state\n"
	"  top PID | --label K=V... [--window S] [--limit N] [--sort own|total|name]\n"
	"          [--threads] [--idle | --no-idle] [--once]\n"
	"                    the functions seen most, refreshed every second\n"
	"  query [--pid P | --target ID] [--label K=V]... [--since D | --from T [--until T]]\n"
	"        [--format F] [--idle | --no-idle] [-o FILE]\n"
	"                    the history: stored samples as collapsed stacks, a flamegraph,\n"
	"                    speedscope, pprof, gecko, a table of functions, json, or the\n"
	"                    processes a range has samples of\n"
	"  diff [--pid P | --label K=V]... --base FROM..UNTIL --compare FROM..UNTIL\n"
	"                    two ranges of the history side by side, per function\n"
	"  rules [add NAME KEY=VALUE... | remove NAME]\n"
	"                    the rules by which the daemon attaches processes by itself\n"
	"  export --otlp URL [--pid P | --label K=V]... --since D\n"
	"                    send a range of the history to an OpenTelemetry Collector\n"
	"\n"
	"options (before or after the command):\n"
	"  --socket PATH     the daemon's socket (see below)\n"
	"  --json            print one line of JSON instead of text\n"
	"  -h, --help        this text; `pyprofd-ctl COMMAND --help` for a command's options\n"
	"  --version         the version of pyprofd-ctl and of the protocol it speaks\n"
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

/* One stderr line for a usage error; returns EXIT_USAGE. */
int ctl_usage_error(const struct ctl *ctl, const char *fmt, ...)
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
int ctl_common_option(struct ctl *ctl, int opt, char **argv)
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
		fputs(ctl->cmd ? ctl->cmd->usage : ctl_usage, stdout);
		return fflush(stdout) == 0 ? EXIT_OK : EXIT_FAILURE_OTHER;
	case ':':
		return ctl_usage_error(ctl, "option '%s' needs a value", argv[optind - 1]);
	default:
		if (optopt)
			return ctl_usage_error(ctl, "unknown option '-%c'", optopt);
		return ctl_usage_error(ctl, "unknown option '%s'", argv[optind - 1]);
	}
}

int ctl_parse_pid(const struct ctl *ctl, const char *arg, int32_t *pid)
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
int ctl_pid_operand(const struct ctl *ctl, int argc, char **argv, int32_t *pid)
{
	if (optind + 1 != argc)
		return ctl_usage_error(ctl, "takes exactly one PID");
	return ctl_parse_pid(ctl, argv[optind], pid);
}

int ctl_no_operand(const struct ctl *ctl, int argc, char **argv)
{
	if (optind != argc)
		return ctl_usage_error(ctl, "unexpected argument '%s'", argv[optind]);
	return EXIT_OK;
}

int ctl_parse_label(const struct ctl *ctl, char *arg, Pyprofd__Label *l)
{
	char *eq = strchr(arg, '=');
	if (!eq || eq == arg)
		return ctl_usage_error(ctl, "--label takes KEY=VALUE, not '%s'", arg);
	*eq = '\0';
	pyprofd__label__init(l);
	l->key = arg;
	l->value = eq + 1;
	return EXIT_OK;
}

/* --idle, --no-idle or neither as a request's two fields. */
void ctl_idle_request(Pyprofd__IdlePolicy idle, Pyprofd__IdlePolicy *policy,
                      protobuf_c_boolean *no_idle)
{
	*policy = idle;
	/* A daemon from before idle_policy reads no_idle alone. */
	*no_idle = idle == PYPROFD__IDLE_POLICY__IDLE_DROP;
}

/* A whole number in [min, UINT32_MAX]; EXIT_OK or a usage error. */
int ctl_parse_u32(const struct ctl *ctl, const char *option, const char *arg, uint32_t min,
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
struct client *ctl_connect(const struct ctl *ctl, int *status)
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

/*
 * Whether the daemon would take req as it is (check_request): EXIT_OK, or a
 * usage error in the daemon's words.  Checked on the bytes that would be
 * sent, before connecting, so a bad argument is told apart from a daemon
 * that is down.
 */
static int ctl_check_request(const struct ctl *ctl, const Pyprofd__Request *req)
{
	size_t size = wire_frame_size(&req->base);
	uint8_t *bytes = size ? malloc(size) : NULL;
	if (!bytes) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	wire_frame_pack(&req->base, bytes);
	char why[256];
	int rc = check_request(req, bytes + WIRE_HEADER_BYTES, size - WIRE_HEADER_BYTES, why, sizeof why);
	free(bytes);
	return rc == 0 ? EXIT_OK : ctl_usage_error(ctl, "%s", why);
}

/* One request, its whole answer; NULL after printing why (*status is the exit status). */
struct client_reply *ctl_call(const struct ctl *ctl, Pyprofd__Request *req, int *status)
{
	if ((*status = ctl_check_request(ctl, req)) != EXIT_OK)
		return NULL;
	struct client *c = ctl_connect(ctl, status);
	if (!c)
		return NULL;
	struct client_error err;
	struct client_reply *reply = client_call(c, req, &err);
	client_free(c);
	if (!reply)
		*status = ctl_report(&err);
	else if (reply->parts[0]->result_case == PYPROFD__RESPONSE__RESULT_QUERY &&
	         reply->parts[0]->query->partial[0])
		fprintf(stderr, "pyprofd-ctl: %s\n", reply->parts[0]->query->partial);
	return reply;
}

/* Flush stdout; a failed write is an error the caller must hear of. */
int ctl_finish(int status)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fputs("pyprofd-ctl: cannot write the output\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	return status;
}

int ctl_print_json(json_t *doc)
{
	if (export_json_write(doc, stdout) != 0) {
		fputs("pyprofd-ctl: cannot write the JSON output (out of memory?)\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	return ctl_finish(EXIT_OK);
}

/* A result may leave out its target; print it as an empty one rather than crash. */
const Pyprofd__Target *ctl_target_or_empty(const Pyprofd__Target *t)
{
	static const Pyprofd__Target empty = PYPROFD__TARGET__INIT;
	return t ? t : &empty;
}

/* The options of a command that has only the common ones: -1 to go on, else its exit status. */
int ctl_common_options_only(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {CTL_COMMON_OPTIONS};
	int opt, status;
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1)
		if ((status = ctl_common_option(ctl, opt, argv)) >= 0)
			return status;
	return -1;
}

int ctl_call_shown(struct ctl *ctl, int argc, char **argv, Pyprofd__Request *req, int32_t *pid,
                   ctl_show_fn show)
{
	int status = pid ? ctl_pid_operand(ctl, argc, argv, pid) : ctl_no_operand(ctl, argc, argv);
	if (status != EXIT_OK)
		return status;
	struct client_reply *reply = ctl_call(ctl, req, &status);
	if (!reply)
		return status;
	status = show(ctl, reply, pid ? *pid : 0);
	client_reply_free(reply);
	return status;
}

int ctl_call_plain(struct ctl *ctl, int argc, char **argv, Pyprofd__Request__BodyCase body,
                   ctl_show_fn show)
{
	/* Each of these requests carries a pid at most. */
	Pyprofd__DetachRequest detach = PYPROFD__DETACH_REQUEST__INIT;
	Pyprofd__StatsRequest stats = PYPROFD__STATS_REQUEST__INIT;
	Pyprofd__StatusRequest status_req = PYPROFD__STATUS_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	int32_t *pid = NULL;
	switch (body) {
	case PYPROFD__REQUEST__BODY_DETACH:
		req.detach = &detach;
		pid = &detach.pid;
		break;
	case PYPROFD__REQUEST__BODY_STATS:
		req.stats = &stats;
		pid = &stats.pid;
		break;
	case PYPROFD__REQUEST__BODY_STATUS:
		req.status = &status_req;
		break;
	default:
		fputs("pyprofd-ctl: internal error: not a plain request\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	req.body_case = body;
	int status = ctl_common_options_only(ctl, argc, argv);
	return status >= 0 ? status : ctl_call_shown(ctl, argc, argv, &req, pid, show);
}
