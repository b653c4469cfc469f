/* pyprofd-ctl's internal interfaces, grouped by the file that owns them. */
#ifndef PYPROFD_CTL_H
#define PYPROFD_CTL_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "client.h"
#include "duration.h"
#include "export.h"
#include "vocab.h"

/* What the command line asked for, before and after the command. */
struct ctl {
	const char *socket; /* --socket, NULL for the default */
	bool json;
	const struct ctl_command *cmd;
};

/* A command: its name, how it runs, its --help. */
struct ctl_command {
	const char *name;
	int (*run)(struct ctl *ctl, int argc, char **argv);
	const char *usage;
};

/* Options every command takes, after it as before it; last, as they end the table. */
#define CTL_COMMON_OPTIONS                                                                         \
	{"json", no_argument, NULL, 'j'}, {"socket", required_argument, NULL, 'S'},                  \
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}

/* ctl.c */
/* pyprofd-ctl --help. */
extern const char ctl_usage[];
/* One stderr line for a usage error; returns EXIT_USAGE. */
int ctl_usage_error(const struct ctl *ctl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * An option getopt handed back that every command shares, or one it
 * rejected: -1 when parsing goes on, else the exit status to return now.
 */
int ctl_common_option(struct ctl *ctl, int opt, char **argv);
/* The options of a command that has only the common ones: -1 to go on, else its exit status. */
int ctl_common_options_only(struct ctl *ctl, int argc, char **argv);
int ctl_parse_pid(const struct ctl *ctl, const char *arg, int32_t *pid);
/* The single PID operand left after the options. */
int ctl_pid_operand(const struct ctl *ctl, int argc, char **argv, int32_t *pid);
int ctl_no_operand(const struct ctl *ctl, int argc, char **argv);
/*
 * --label KEY=VALUE into l, arg split in place (l borrows it: argv outlives
 * the command); EXIT_OK or a usage error.
 */
int ctl_parse_label(const struct ctl *ctl, char *arg, Pyprofd__Label *l);
/*
 * --idle (IDLE_KEEP), --no-idle (IDLE_DROP) or neither (IDLE_DEFAULT: the
 * daemon's [sampling] idle) as a request's idle_policy and no_idle.
 */
void ctl_idle_request(Pyprofd__IdlePolicy idle, Pyprofd__IdlePolicy *policy,
                      protobuf_c_boolean *no_idle);
/* A whole number in [min, UINT32_MAX]; EXIT_OK or a usage error. */
int ctl_parse_u32(const struct ctl *ctl, const char *option, const char *arg, uint32_t min,
                  uint32_t *out);
/* Print a failed call's one line on stderr; returns its exit status. */
int ctl_report(const struct client_error *err);
/* Connect to the daemon; NULL after printing why (*status is the exit status). */
struct client *ctl_connect(const struct ctl *ctl, int *status);
/* One request, its whole answer; NULL after printing why (*status is the exit status). */
struct client_reply *ctl_call(const struct ctl *ctl, Pyprofd__Request *req, int *status);
/* Prints a plain command's reply (pid is its operand, 0 for none); the exit status. */
typedef int (*ctl_show_fn)(struct ctl *ctl, const struct client_reply *reply, int32_t pid);
/*
 * After a command's options: its PID operand into *pid (none when pid is
 * NULL), req sent and its answer given to show; the exit status.
 */
int ctl_call_shown(struct ctl *ctl, int argc, char **argv, Pyprofd__Request *req, int32_t *pid,
                   ctl_show_fn show);
/*
 * A command with the common options alone and one PID operand (detach,
 * stats) or none (list, status): the request of kind body sent and its
 * answer given to show.  The exit status; --help, a usage error or a failed
 * call end it before show.
 */
int ctl_call_plain(struct ctl *ctl, int argc, char **argv, Pyprofd__Request__BodyCase body,
                   ctl_show_fn show);
/* Flush stdout; a failed write is an error the caller must hear of. */
int ctl_finish(int status);
/* doc as one line on stdout (it is freed); the exit status. */
int ctl_print_json(json_t *doc);
/* A result may leave out its target: an empty one rather than a crash. */
const Pyprofd__Target *ctl_target_or_empty(const Pyprofd__Target *t);

/* ctl_live.c */
extern const char ctl_attach_usage[], ctl_detach_usage[], ctl_list_usage[], ctl_dump_usage[],
	ctl_stats_usage[], ctl_status_usage[];
int ctl_live_attach(struct ctl *ctl, int argc, char **argv);
int ctl_live_detach(struct ctl *ctl, int argc, char **argv);
int ctl_live_list(struct ctl *ctl, int argc, char **argv);
int ctl_live_dump(struct ctl *ctl, int argc, char **argv);
int ctl_live_stats(struct ctl *ctl, int argc, char **argv);
int ctl_live_status(struct ctl *ctl, int argc, char **argv);

/* ctl_rules.c */
extern const char ctl_rules_usage[];
int ctl_rules(struct ctl *ctl, int argc, char **argv);

/* ctl_backfill.c: the export command, a range of the history sent to a collector */
extern const char ctl_backfill_usage[];
int ctl_backfill(struct ctl *ctl, int argc, char **argv);

/* ctl_history.c: what query and diff share */
/* The options ctl_history_option reads, after each command's own; last, as they end the table. */
#define CTL_HISTORY_OPTIONS                                                                        \
	{"no-idle", no_argument, NULL, 'I'}, {"idle", no_argument, NULL, 'K'},                     \
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
/*
 * Room for the labels, then argv's options into h; each one neither shares
 * goes to the command's own(ctl, opt, ctx).  EXIT_OK (h->done after --help)
 * or the first error, said on stderr; h is freed by the caller either way.
 */
int ctl_history_parse(struct ctl *ctl, int argc, char **argv, const struct option *options,
                      int (*own)(struct ctl *ctl, int opt, void *ctx), void *ctx,
                      struct ctl_history_args *h);
void ctl_history_args_free(struct ctl_history_args *h);
/* Unix seconds, or local time YYYY-MM-DDTHH:MM[:SS]; -1 if neither. */
double ctl_history_parse_time(const char *arg);
/* The longest duration an option takes: far past any history kept. */
#define CTL_DURATION_MAX (100 * 365 * 86400.0)
/* A page's time slots: about one per 5 pixels of a wide screen. */
#define CTL_HISTORY_PAGE_SLOTS 240
/* -o's file, or standard output without one; NULL (said on stderr) if it cannot be written. */
FILE *ctl_history_output_open(const char *path);
/* Closes what ctl_history_output_open gave after a writer returned rc; the exit status. */
int ctl_history_output_close(FILE *out, const char *path, int rc);
/* The processes an answer lists, as a table or JSON; 0 or -1. */
int ctl_history_processes(const struct client_reply *reply, bool json, FILE *out);
/* A function table or diff answered in parts, written as one table; 0 or -1. */
int ctl_history_table(const struct client_reply *reply, const char *name, bool diff, bool json,
                      FILE *out);
/*
 * Answers to stack queries (all parts of each; a diff's base range last,
 * marked base) written in an export format; 0 or -1.
 */
int ctl_history_export(const struct client_reply *const *replies, size_t nreplies, bool diff,
                       const char *name, enum export_format format, bool per_thread, FILE *out);
/* An empty answer to a selection that no process of the history ever matched: said on stderr. */
void ctl_history_warn_unmatched(const struct ctl *ctl, const Pyprofd__QueryRequest *q);
/* What a selection is called in a title: its target, pid or first label. */
void ctl_history_name(const Pyprofd__QueryRequest *q, char *name, size_t len);

/* ctl_query.c */
extern const char ctl_query_usage[];
int ctl_query(struct ctl *ctl, int argc, char **argv);

/* ctl_diff.c */
extern const char ctl_diff_usage[];
int ctl_diff(struct ctl *ctl, int argc, char **argv);
/* A time of a diff range: as ctl_history_parse_time, "now", or "-D" for D ago; -1 if none. */
double ctl_diff_parse_when(const char *arg, double now);
/* "FROM..UNTIL" into q's range; EXIT_OK or a usage error. */
int ctl_diff_parse_range(const struct ctl *ctl, const char *option, const char *arg, double now,
                         Pyprofd__QueryRequest *q);

/* fields.c */
enum field_type {
	FIELD_STRING, FIELD_INT32, FIELD_UINT32, FIELD_INT64, FIELD_UINT64,
	FIELD_DOUBLE, /* text with `decimals` digits */
	FIELD_TIME,   /* unix seconds: a JSON number, UTC in text */
	FIELD_BOOL, FIELD_MODE, FIELD_ASYNC_MODE,
	FIELD_LABELS, /* at the offset of n_labels, the array after it: a JSON object, k=v,... in text */
	FIELD_THREADS, /* at the offset of n_threads (ThreadInfo): a JSON array, names,... in text */
	FIELD_STRINGS, /* at the offset of a repeated string's count: a JSON array, a,b,... in text */
};
/* One field of a protocol message, as both forms show it. */
struct field {
	const char *key; /* "group.key": the member key of the JSON object group */
	enum field_type type;
	size_t offset;
	int decimals;
};
extern const struct field fields_target[], fields_status[], fields_stats[], fields_process[];
extern const size_t fields_ntarget, fields_nstatus, fields_nstats, fields_nprocess;
/* The message as a JSON object, in the table's order; NULL if out of memory. */
json_t *fields_json(const void *msg, const struct field *fields, size_t n);
/* A line per field: "key: value", or the key padded to width columns when width > 0; 0 or -1. */
int fields_text(FILE *out, const void *msg, const struct field *fields, size_t n, int width);
/* One field's value as text (malloc'd; NULL if out of memory). */
char *fields_cell(const void *msg, const struct field *f);
/* The field of a key, or NULL. */
const struct field *fields_find(const struct field *fields, size_t n, const char *key);
/* The documented JSON form of a Target; NULL if out of memory. */
json_t *fields_target_json(const Pyprofd__Target *t);

/* top.c */
struct top_options {
	int32_t pid;       /* 0: the targets with all of labels */
	Pyprofd__Label **labels;
	size_t n_labels;
	uint32_t window_s; /* 0: the daemon's default */
	uint32_t limit;    /* 0: as many as fit, or all when not live */
	Pyprofd__TopSort sort;
	bool threads;      /* the per-thread view */
	Pyprofd__IdlePolicy idle; /* --idle, --no-idle, the i key; IDLE_DEFAULT: the daemon's */
	bool idle_left_out; /* by the daemon, in its last answer */
	bool once;
	bool json;
};

extern const char ctl_top_usage[];
/* `pyprofd-ctl top`: its options, then the busiest functions of a target, live or once. */
int top_main(struct ctl *ctl, int argc, char **argv);

#endif
