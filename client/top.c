/*
 * pyprofd-ctl top: the functions seen most in a target's recent samples.
 *
 * On a terminal it is a live view redrawn every second, the terminal in
 * non-canonical mode without echo or signal keys so q and Ctrl-C arrive as
 * bytes; the terminal is given back on every way out, signals included.
 * Otherwise it prints one table (or one JSON object) and exits.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ctl.h"
#include "export.h"

/* Screen rows when the terminal does not say. */
#define TOP_DEFAULT_ROWS 40
/*
 * Lines the view takes besides the rows: header, shares, blank, column
 * titles above, and the line the cursor is left on below (the last row ends
 * with a newline); one more and the terminal scrolls the header away.
 */
#define TOP_CHROME_LINES 5
#define TOP_INTERVAL_MS 1000

/*
 * The signal that asked the live view to end, 0 while none has.  The one
 * piece of global state: a signal handler can reach nothing else.
 */
static volatile sig_atomic_t top_signal;

static void top_on_signal(int sig)
{
	top_signal = sig;
}

/* Signals that end the live view, their handlers saved to be put back. */
static const int top_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define TOP_NSIGNALS (sizeof top_signals / sizeof top_signals[0])

/* What the live view changed in the terminal and the process, to undo it. */
struct top_screen {
	bool keys; /* stdin is the terminal: read q and Ctrl-C from it */
	bool raw;
	struct termios saved;
	struct sigaction old[TOP_NSIGNALS];
};

/* One TopRequest; its answer, or NULL and *err. */
static struct client_reply *top_fetch(struct client *c, const struct top_options *o, uint32_t limit,
                                      struct client_error *err)
{
	Pyprofd__TopRequest t = PYPROFD__TOP_REQUEST__INIT;
	t.pid = o->pid;
	t.n_labels = o->n_labels;
	t.labels = o->labels;
	t.window_s = o->window_s;
	t.limit = limit;
	t.sort = o->sort;
	ctl_idle_request(o->idle, &t.idle_policy, &t.no_idle);
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_TOP;
	req.top = &t;
	return client_call(c, &req, err);
}

static double percent(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* The window as people write it: "10", or "2.5" when it is not whole seconds. */
static void put_seconds(char *buf, size_t size, double s)
{
	if (s == (double)(long long)s)
		snprintf(buf, size, "%lld", (long long)s);
	else
		snprintf(buf, size, "%.1f", s);
}

static const char *const top_sort_names[] = {
	[PYPROFD__TOP_SORT__TOP_SORT_OWN] = "own",
	[PYPROFD__TOP_SORT__TOP_SORT_TOTAL] = "total",
	[PYPROFD__TOP_SORT__TOP_SORT_NAME] = "name",
};
#define TOP_NSORTS (sizeof top_sort_names / sizeof top_sort_names[0])

/* Where the last `keep` columns of s begin (s is wider). */
static const char *top_tail(const char *s, size_t keep)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t skip = export_width(s) - keep; skip; skip--) {
		size_t n = export_utf8_seq(p);
		p += n ? n : 1;
	}
	return (const char *)p;
}

/*
 * " (file:first line)" after a function, within cols; w the columns already
 * written.  A path too long gives way from the left, from a '/' where one
 * is near, so the file's name and line stay: " (…/pkg/module.py:42)".
 */
static size_t top_put_where(FILE *out, const Pyprofd__FunctionRow *row, size_t cols, size_t w)
{
	const char *file = export_str(row->file);
	if (!*file || w + 2 >= cols)
		return w;
	char num[24] = "";
	if (row->first_line > 0)
		snprintf(num, sizeof num, ":%d", (int)row->first_line);
	size_t after = strlen(num) + 1; /* ":line)" */
	fputs(" (", out);
	w += 2;
	size_t room = cols - w; /* > 0 */
	if (cols != SIZE_MAX && export_width(file) + after > room && room > after + 1) {
		const char *tail = top_tail(file, room - after - 1);
		const char *slash = strchr(tail, '/');
		if (slash && slash[1])
			tail = slash;
		fputs("\u2026", out); /* … */
		w++;
		w += export_put(out, tail, cols - w, 0);
	} else {
		w += export_put(out, file, cols - w, 0);
	}
	if (*num && w < cols)
		w += export_put(out, num, cols - w, 0);
	if (w < cols) {
		fputc(')', out);
		w++;
	}
	return w;
}

/* A thread as top shows it: "NAME (tid N)", or "thread N"; its pid first when top counts a pool. */
static void top_thread_title(const Pyprofd__TopThread *th, bool pool, char *buf, size_t len)
{
	const Pyprofd__ThreadInfo *t = th->thread;
	long long id = t && t->native_thread_id > 0 ? (long long)t->native_thread_id
	               : t                          ? (long long)t->thread_id
	                                            : 0;
	char pid[24] = "";
	if (pool)
		snprintf(pid, sizeof pid, "%d ", (int)th->pid);
	if (t && *export_str(t->name))
		snprintf(buf, len, "%s%.63s (tid %lld)", pid, t->name, id);
	else
		snprintf(buf, len, "%sthread %lld", pid, id);
}

/* The per-thread view: a thread a row, its share, GIL and idle shares, its hottest function. */
static void top_print_threads(FILE *out, struct client_reply *reply, size_t cols, size_t maxrows)
{
	const Pyprofd__TopResult *head = reply->parts[0]->top;
	char line[256];
	snprintf(line, sizeof line, "%-32s %8s %6s %6s %6s  %s", "Thread", "Samples", "%All", "%GIL",
	         "%Idle", "Hottest (own)");
	export_put(out, line, cols, 0);
	fputc('\n', out);
	for (size_t i = 0; i < head->n_threads && i < maxrows; i++) {
		const Pyprofd__TopThread *th = head->threads[i];
		char title[128];
		top_thread_title(th, !head->target, title, sizeof title);
		size_t w = export_put(out, title, cols, 32);
		snprintf(line, sizeof line, " %8llu %6.1f %6.1f %6.1f  ", (unsigned long long)th->samples,
		         percent(th->samples, head->samples), percent(th->gil, th->samples),
		         percent(th->idle, th->samples));
		if (w < cols)
			w += export_put(out, line, cols - w, 0);
		if (th->hottest && w < cols) {
			w += export_put(out, th->hottest->function, cols - w, 0);
			top_put_where(out, th->hottest, cols, w);
		}
		fputc('\n', out);
	}
}

/*
 * The table: a header line, the shares line, the column titles, at most
 * maxrows rows, every line cut to cols columns.  The rows of all parts, in
 * the daemon's order; or the threads, in the per-thread view.
 */
static void top_print(FILE *out, const struct top_options *o, struct client_reply *reply,
                      size_t cols, size_t maxrows, bool live)
{
	int32_t pid = o->pid;
	const Pyprofd__TopResult *head = reply->parts[0]->top;
	const Pyprofd__Target *t = head->target;
	char window[64], line[512];
	put_seconds(window, sizeof window, head->window_s);
	if (o->n_labels) {
		/* A pool: its labels, how many processes have them. */
		char labels[256] = "";
		size_t at = 0;
		for (size_t i = 0; i < o->n_labels && at < sizeof labels; i++)
			at += (size_t)snprintf(labels + at, sizeof labels - at, "%s%s=%s", i ? "," : "",
			                       o->labels[i]->key, o->labels[i]->value);
		snprintf(line, sizeof line, "%.200s  %u process%s  %llu samples in %s s%s", labels,
		         (unsigned)head->processes, head->processes == 1 ? "" : "es",
		         (unsigned long long)head->samples, window, live ? "  (q quits)" : "");
	} else {
		snprintf(line, sizeof line, "PID %d  Python %.32s  %.16s  %llu samples in %s s%s",
		         (int)(t ? t->pid : pid), t && *export_str(t->python_version) ? t->python_version : "?",
		         t && *export_str(t->state) ? t->state : "?", (unsigned long long)head->samples, window,
		         live ? "  (q quits)" : "");
	}
	export_put(out, line, cols, 0);
	fputc('\n', out);
	/* Where the samples went besides functions: holding the GIL, collecting, waiting. */
	snprintf(line, sizeof line, "GIL %.1f%%  GC %.1f%%  idle %.1f%%%s  sort: %s%s",
	         percent(head->gil_samples, head->samples), percent(head->gc_samples, head->samples),
	         percent(head->idle_samples, head->samples), head->idle_left_out ? " (left out)" : "",
	         top_sort_names[o->sort], live ? "  (s sort, t threads, i idle)" : "");
	export_put(out, line, cols, 0);
	fputs("\n\n", out);
	if (o->threads) {
		top_print_threads(out, reply, cols, maxrows);
		return;
	}
	snprintf(line, sizeof line, "%6s %7s  %s", "%Own", "%Total", "Function (file:first line)");
	export_put(out, line, cols, 0);
	fputc('\n', out);

	size_t shown = 0;
	for (size_t p = 0; p < reply->nparts && shown < maxrows; p++) {
		const Pyprofd__TopResult *r = reply->parts[p]->top;
		for (size_t i = 0; i < r->n_rows && shown < maxrows; i++, shown++) {
			const Pyprofd__FunctionRow *row = r->rows[i];
			snprintf(line, sizeof line, "%6.1f %7.1f  ", percent(row->own, head->samples),
			         percent(row->total, head->samples));
			size_t w = export_put(out, line, cols, 0);
			if (w < cols)
				w += export_put(out, row->function, cols - w, 0);
			top_put_where(out, row, cols, w);
			fputc('\n', out);
		}
	}
}

/* A row of the table as JSON; NULL if out of memory. */
static json_t *top_row_json(const Pyprofd__FunctionRow *row, uint64_t samples)
{
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:f, s:f}", "function",
	                 export_json_string(row->function), "file", export_json_string(row->file),
	                 "first_line", row->first_line > 0 ? json_integer(row->first_line) : json_null(),
	                 "own", export_json_u64(row->own), "total", export_json_u64(row->total),
	                 "own_percent", percent(row->own, samples), "total_percent",
	                 percent(row->total, samples));
}

static json_t *top_json(int32_t pid, Pyprofd__TopSort sort, struct client_reply *reply)
{
	const Pyprofd__TopResult *head = reply->parts[0]->top;
	json_t *rows = json_array(), *threads = json_array();
	for (size_t p = 0; rows && p < reply->nparts; p++) {
		const Pyprofd__TopResult *r = reply->parts[p]->top;
		for (size_t i = 0; rows && i < r->n_rows; i++)
			if (json_array_append_new(rows, top_row_json(r->rows[i], head->samples)) != 0) {
				json_decref(rows);
				rows = NULL;
			}
	}
	for (size_t i = 0; threads && i < head->n_threads; i++) {
		const Pyprofd__TopThread *th = head->threads[i];
		const Pyprofd__ThreadInfo *t = th->thread;
		json_t *o = json_pack(
			"{s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "pid", (int)th->pid, "thread_id",
			(json_int_t)(t ? t->thread_id : 0), "native_thread_id",
			t && t->native_thread_id > 0 ? json_integer(t->native_thread_id) : json_null(), "name",
			t && *export_str(t->name) ? export_json_string(t->name) : json_null(), "samples",
			export_json_u64(th->samples), "gil", export_json_u64(th->gil), "gc",
			export_json_u64(th->gc), "idle", export_json_u64(th->idle), "hottest",
			th->hottest ? top_row_json(th->hottest, th->samples) : json_null());
		if (json_array_append_new(threads, o) != 0) {
			json_decref(threads);
			threads = NULL;
		}
	}
	return json_pack("{s:o, s:i, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o, s:o}", "pid",
	                 pid || head->target ? json_integer(head->target ? head->target->pid : pid)
	                                     : json_null(),
	                 "processes", (int)head->processes, "window_s",
	                 export_json_double(head->window_s), "samples", export_json_u64(head->samples),
	                 "gil_samples", export_json_u64(head->gil_samples), "gc_samples",
	                 export_json_u64(head->gc_samples), "idle_samples",
	                 export_json_u64(head->idle_samples), "idle_left_out", (int)head->idle_left_out,
	                 "rows", rows, "threads", threads,
	                 "sort", json_string(top_sort_names[sort]));
}

/* One table or JSON object, no escapes. */
static int top_once(struct client *c, const struct top_options *o)
{
	struct client_error err;
	struct client_reply *reply = top_fetch(c, o, o->limit, &err);
	if (!reply)
		return ctl_report(&err);
	int status;
	if (o->json) {
		status = ctl_print_json(top_json(o->pid, o->sort, reply));
	} else {
		top_print(stdout, o, reply, SIZE_MAX, SIZE_MAX, false);
		status = ctl_finish(EXIT_OK);
	}
	client_reply_free(reply);
	return status;
}

/* Take over the terminal: handlers, keys without echo, the alternate screen. */
static void top_screen_enter(struct top_screen *s)
{
	struct sigaction sa = {.sa_handler = top_on_signal};
	sigemptyset(&sa.sa_mask);
	/* no SA_RESTART: a signal must cut a wait short */
	for (size_t i = 0; i < TOP_NSIGNALS; i++)
		sigaction(top_signals[i], &sa, &s->old[i]);

	s->keys = isatty(STDIN_FILENO);
	if (s->keys && tcgetattr(STDIN_FILENO, &s->saved) == 0) {
		struct termios raw = s->saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO | ISIG | IEXTEN);
		raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		s->raw = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
	}
	fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, cursor hidden */
	fflush(stdout);
}

/* Give everything back as it was: the one way out of the live view. */
static void top_screen_leave(struct top_screen *s)
{
	fputs("\033[?25h\033[?1049l", stdout);
	fflush(stdout);
	if (s->raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &s->saved);
	for (size_t i = 0; i < TOP_NSIGNALS; i++)
		sigaction(top_signals[i], &s->old[i], NULL);
}

/* What a key asked of the live view. */
enum top_key { TOP_KEY_NONE, TOP_KEY_QUIT, TOP_KEY_REDRAW };

/*
 * Wait until `deadline` for a key: q, Ctrl-C or a signal end the view; s
 * (the next sort), t (threads or functions) and i (idle samples in or out,
 * the other way from what the daemon did last) change o and redraw at once.
 */
static enum top_key top_wait(struct top_screen *s, struct top_options *o, int64_t deadline)
{
	for (;;) {
		if (top_signal)
			return TOP_KEY_QUIT;
		int64_t left = deadline - (int64_t)(clock_mono_ns() / 1000000);
		if (left <= 0)
			return TOP_KEY_NONE;
		struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
		int n = poll(&pfd, s->keys ? 1 : 0, (int)left);
		if (n < 0 && errno != EINTR)
			return TOP_KEY_NONE;
		if (n <= 0)
			continue;
		char buf[64];
		ssize_t got = read(STDIN_FILENO, buf, sizeof buf);
		if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
			s->keys = false; /* the terminal went away: only signals are left */
			continue;
		}
		enum top_key key = TOP_KEY_NONE;
		for (ssize_t i = 0; i < got; i++) {
			if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == 0x03)
				return TOP_KEY_QUIT;
			if (buf[i] == 's')
				o->sort = (o->sort + 1) % TOP_NSORTS;
			else if (buf[i] == 't')
				o->threads = !o->threads;
			else if (buf[i] == 'i')
				o->idle = o->idle_left_out ? PYPROFD__IDLE_POLICY__IDLE_KEEP
				                           : PYPROFD__IDLE_POLICY__IDLE_DROP;
			else
				continue;
			key = TOP_KEY_REDRAW;
		}
		if (key == TOP_KEY_REDRAW)
			return key;
	}
}

static int top_live(struct client *c, struct top_options *o)
{
	struct top_screen s = {0};
	struct client_error err = {.status = CLIENT_OK};
	top_signal = 0;
	top_screen_enter(&s);
	client_set_interrupt(c, &top_signal);

	for (int64_t next = (int64_t)(clock_mono_ns() / 1000000);;) {
		struct winsize ws = {0};
		size_t rows = TOP_DEFAULT_ROWS, cols = SIZE_MAX;
		if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
			rows = ws.ws_row;
			cols = ws.ws_col ? ws.ws_col : SIZE_MAX;
		}
		size_t fit = rows > TOP_CHROME_LINES ? rows - TOP_CHROME_LINES : 1;
		if (o->limit && o->limit < fit)
			fit = o->limit;

		struct client_reply *reply = top_fetch(c, o, (uint32_t)fit, &err);
		if (!reply)
			break;
		fputs("\033[H\033[2J", stdout);
		/* The i key turns from what the daemon applied: its default is not the client's to know. */
		o->idle_left_out = reply->parts[0]->top->idle_left_out;
		top_print(stdout, o, reply, cols, fit, true);
		client_reply_free(reply);
		if (fflush(stdout) != 0)
			break;

		next += TOP_INTERVAL_MS;
		if (next < (int64_t)(clock_mono_ns() / 1000000)) /* the answer took longer than a tick: start afresh */
			next = (int64_t)(clock_mono_ns() / 1000000) + TOP_INTERVAL_MS;
		enum top_key key = top_wait(&s, o, next);
		if (key == TOP_KEY_QUIT)
			break;
		if (key == TOP_KEY_REDRAW)
			next = (int64_t)(clock_mono_ns() / 1000000);
	}

	top_screen_leave(&s);
	client_set_interrupt(c, NULL);
	/* A failure shows on the normal screen, after it is back. */
	if (err.status != CLIENT_OK && err.status != CLIENT_EINTR)
		return ctl_report(&err);
	if (ferror(stdout)) {
		fputs("pyprofd-ctl: cannot write the output\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	/* Ctrl-C is the way to quit; a signal from elsewhere ends us as it would have. */
	int sig = top_signal;
	return sig && sig != SIGINT ? 128 + sig : EXIT_OK;
}

/* Live on a terminal, else once. */
static int top_run(struct client *c, struct top_options *o)
{
	if (o->once || o->json || !isatty(STDOUT_FILENO))
		return top_once(c, o);
	return top_live(c, o);
}

const char ctl_top_usage[] =
	"usage: pyprofd-ctl top PID | --label K=V... [--window S] [--limit N]\n"
	"                       [--sort own|total|name] [--threads] [--idle | --no-idle] [--once]\n"
	"                       [--json]\n"
	"\n"
	"The functions seen most in process PID's recent samples, or in those of every\n"
	"process with the labels given (a pool of workers, counted together): %Own is\n"
	"the share of thread samples with the function innermost, %Total with it\n"
	"anywhere on the stack; a function is its qualified name in its file from its\n"
	"first line (a path too long for the terminal loses its start, not its line).  A\n"
	"line above says which share of the samples held the GIL, ran the garbage\n"
	"collector and waited (idle: off CPU without the GIL, or in a known wait), and\n"
	"\"(left out)\" when the daemon left those out, as asked or by its default\n"
	"([sampling] idle; status shows it as sampling.idle).\n"
	"On a terminal the view refreshes every second; s changes the sort, t switches\n"
	"to threads and back, i leaves idle samples out or takes them in (the other way\n"
	"from what the daemon last did), q or Ctrl-C quits.\n"
	"When the output is not a terminal, one table is printed.  Ended by SIGTERM,\n"
	"SIGHUP or SIGQUIT, the live view exits with 128 + the signal's number.\n"
	"\n"
	"  --label K=V       instead of PID: the processes with this label; repeat: all\n"
	"                    must match (the header says how many there are)\n"
	"  --window S        the last S seconds of samples (default: the daemon's)\n"
	"  --limit N         at most N rows; 0 (the default): as many as fit the terminal,\n"
	"                    or all when printing once\n"
	"  --sort KEY        own (the default), total or name\n"
	"  --threads         a row per thread: its samples, GIL and idle shares, its\n"
	"                    hottest function\n"
	"  --no-idle         leave out the samples of waiting threads\n"
	"  --idle            keep them, whatever the daemon's default (the last of the\n"
	"                    two wins; neither: the daemon's default, keep unless set)\n"
	"  --once            print one table and exit\n"
	"  --json            once, as one JSON object: {pid (null by labels), processes,\n"
	"                    window_s, samples, gil_samples,\n"
	"                    gc_samples, idle_samples, idle_left_out, rows: [{function,\n"
	"                    file, first_line,\n"
	"                    own, total, own_percent, total_percent}], threads:\n"
	"                    [{pid, thread_id, native_thread_id, name, samples, gil, gc, idle,\n"
	"                    hottest}]}\n";

static int top_parse_sort(const struct ctl *ctl, const char *arg, Pyprofd__TopSort *out)
{
	for (size_t i = 0; i < TOP_NSORTS; i++)
		if (strcmp(arg, top_sort_names[i]) == 0) {
			*out = (Pyprofd__TopSort)i;
			return EXIT_OK;
		}
	return ctl_usage_error(ctl, "--sort takes own, total or name, not '%s'", arg);
}

/* `pyprofd-ctl top PID`: its options, then the view. */
int top_main(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"window", required_argument, NULL, 'w'},
		{"limit", required_argument, NULL, 'n'},
		{"once", no_argument, NULL, '1'},
		{"sort", required_argument, NULL, 's'},
		{"threads", no_argument, NULL, 't'},
		{"no-idle", no_argument, NULL, 'I'},
		{"idle", no_argument, NULL, 'K'},
		{"label", required_argument, NULL, 'l'},
		CTL_COMMON_OPTIONS,
	};
	struct top_options o = {0};
	int opt, status = EXIT_OK;
	/* Every label is one argument, so argc bounds their number. */
	Pyprofd__Label *labels = calloc((size_t)argc, sizeof *labels);
	o.labels = calloc((size_t)argc, sizeof *o.labels);
	if (!labels || !o.labels) {
		fputs("pyprofd-ctl: out of memory\n", stderr);
		status = EXIT_FAILURE_OTHER;
		goto out;
	}
	while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		if (opt == 'l') {
			if ((status = ctl_parse_label(ctl, optarg, &labels[o.n_labels])) == EXIT_OK) {
				o.labels[o.n_labels] = &labels[o.n_labels];
				o.n_labels++;
			}
		} else if (opt == 'w')
			status = ctl_parse_u32(ctl, "--window", optarg, 1, &o.window_s);
		else if (opt == 'n')
			status = ctl_parse_u32(ctl, "--limit", optarg, 0, &o.limit);
		else if (opt == '1')
			o.once = true;
		else if (opt == 't')
			o.threads = true;
		else if (opt == 'I' || opt == 'K') /* the last of the two wins */
			o.idle = opt == 'I' ? PYPROFD__IDLE_POLICY__IDLE_DROP : PYPROFD__IDLE_POLICY__IDLE_KEEP;
		else if (opt == 's')
			status = top_parse_sort(ctl, optarg, &o.sort);
		else if ((status = ctl_common_option(ctl, opt, argv)) < 0)
			status = EXIT_OK;
		else
			goto out;
		if (status != EXIT_OK)
			goto out;
	}
	/* A pid, or labels: not both, not neither. */
	if (o.n_labels && optind < argc)
		status = ctl_usage_error(ctl, "takes a PID or --label, not both");
	else if (!o.n_labels)
		status = ctl_pid_operand(ctl, argc, argv, &o.pid);
	if (status != EXIT_OK)
		goto out;
	o.json = ctl->json;

	struct client *c = ctl_connect(ctl, &status);
	if (c) {
		status = top_run(c, &o);
		client_free(c);
	}
out:
	free(labels);
	free(o.labels);
	return status;
}
