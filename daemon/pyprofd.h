/* pyprofd's internal interfaces, grouped by the file that owns them. */
#ifndef PYPROFD_H
#define PYPROFD_H

#include <ev.h>
#include <pthread.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "arena.h"
#include "array.h"
#include "contexts.h"
#include "export.h"
#include "hash.h"
#include "jobs.h"
#include "labels.h"
#include "log.h"
#include "otlp.h"
#include "procwatch.h"
#include "schedule.h"
#include "tally.h"
#include "pyprofd.pb-c.h"
#include "unwind.h"
#include "vocab.h"
#include "wire.h"

/* cli.c */
/* One stderr line for an option getopt rejected; returns EXIT_USAGE. */
int cli_bad_option(const char *command, const char *option);
/* The single PID operand left after the options; EXIT_OK or EXIT_USAGE (line printed). */
int cli_pid_operand(const char *command, int argc, char **argv, int optind_, pid_t *pid);

/* dump.c */
int dump_main(int argc, char **argv);
/* A snapshot as the protocol's dump answer, allocated in a; NULL if out of memory. */
Pyprofd__DumpResult *dump_to_proto(pid_t pid, const struct uw_target *uw,
                                   const struct uw_snapshot *snap, struct arena *a);

/* counters.c */
/* The engine's counters by the names --stats-json and the stats RPC give them. */
struct stats_counter {
	const char *name;
	size_t offset; /* of a uint64_t in struct uw_stats */
};
extern const struct stats_counter counters_table[];
#define COUNTERS_COUNT 54
uint64_t counters_value(const struct uw_stats *st, size_t i);

/* record.c */
int record_main(int argc, char **argv);

/* spell.c */
/* Where spelled-out frames and stacks go: each returns its own index (>= 0), or -1. */
struct spell_sink {
	int32_t (*frame)(void *ctx, const struct uw_frame *f);
	int32_t (*stack)(void *ctx, int32_t parent, int32_t frame); /* parent -1: the root's child */
};
/* The unwinder's ids of one epoch as a sink's indexes, each spelled once. */
struct spell {
	const struct spell_sink *sink;
	void *sink_ctx;
	int32_t *frame_at, *stack_at; /* unwinder id -> sink index + 1; 0: not spelled */
	size_t frame_cap, stack_cap;
	uint32_t *touched_frames, *touched_stacks;
	size_t ntouched_frames, ntouched_stacks, touched_frames_cap, touched_stacks_cap;
	uint32_t *chain;
	size_t chain_cap;
};
void spell_init(struct spell *sp, const struct spell_sink *sink, void *sink_ctx);
void spell_free(struct spell *sp);
/* The sink's index of a stack id, its frames and ancestors spelled as needed; -1 on failure. */
int32_t spell_stack(struct spell *sp, const struct uw_target *uw, uint32_t stack);
/* The ids mean something else now (another epoch) or the sink starts over (a new batch). */
void spell_forget(struct spell *sp);
/* The ids of an epoch are all gone: give back the maps sized for its largest. */
void spell_reset(struct spell *sp);
size_t spell_bytes(const struct spell *sp);

/* target.c: the threads of a target or a recording */
/* A thread a target sampled lately: what its samples in top and the history are called. */
struct target_thread {
	uint64_t thread_id;
	int64_t native_id;
	char name[UW_THREAD_NAME_LEN];      /* UTF-8 */
	char seen_name[UW_THREAD_NAME_LEN]; /* as the unwinder gave it: a change is told by it */
	int64_t last_second; /* loop time it was last sampled with a stack */
	bool declared;       /* the history has it as it is now */
	uint32_t tally_hint; /* the tally entry its last sample went to (tally_add_hinted) */
};
/* Threads a table keeps names of: the unwinder's bound. */
#define TARGET_THREADS_MAX UW_MAX_THREADS
/* The threads of a target (or a recording) by thread id, with their names. */
struct thread_table {
	struct target_thread *v;
	size_t n, cap;
};
/*
 * A thread sampled now (at `hint` in its sample): its name kept up to date,
 * declared false when it changed.  Allocates only for a new thread; past
 * TARGET_THREADS_MAX or out of memory the thread stays unnamed (NULL).
 */
struct target_thread *thread_table_note(struct thread_table *tt, uint32_t hint,
                                        const struct uw_sample_thread *th, int64_t second);
const struct target_thread *thread_table_find(const struct thread_table *tt, uint64_t thread_id);
void thread_table_free(struct thread_table *tt);

/* profile.c */
/* A recorded profile: frames and stacks by content across epochs, counts per (thread, stack). */
struct profile_node {
	int32_t parent, frame;
	uint32_t depth;
};
struct profile {
	struct tally tally; /* this epoch's samples, by stack id */
	struct spell spell;
	const struct uw_target *settling;
	struct export_frame *frames;
	size_t nframes, frames_cap;
	struct hash frame_index;
	struct profile_node *nodes;
	size_t nnodes, nodes_cap;
	struct hash node_index;
	struct tally totals; /* the whole run's samples, by thread and node (second 0) */
	struct thread_table threads;
	/* The names of the ContextVars samples are labelled by (uw_options.context_labels); NULL: none. */
	const char (*context_labels)[UW_CONTEXT_NAME_LEN];
	bool failed; /* out of memory spelling out an epoch */
};
void profile_init(struct profile *p);
void profile_free(struct profile *p);
/* Count one sample's threads, each `count` times (the ticks it stands for); -1 if out of memory. */
int profile_count(struct profile *p, const struct uw_sample *s, uint64_t count);
/* Spell out what this epoch counted (its ids still valid); -1 if out of memory. */
int profile_settle(struct profile *p, const struct uw_target *uw);
/*
 * The profile as the export library takes it, its threads the process's
 * (pid, and start_time: 0 unknown): stacks and threads allocated, frames
 * and names borrowed; without the samples of waiting threads if no_idle.
 * 0 or -1.
 */
int profile_export(const struct profile *p, pid_t pid, uint64_t start_time, bool no_idle,
                   struct export_profile *out);
void profile_free_export(struct export_profile *out);

/* functions.c */
/*
 * Own and total samples per function (qualified name, file and first line) over stacks fed frame
 * by frame: functions_next_stack, then functions_count for each of its
 * frames.  Side 0 counts into a row's own/total, side 1 into base_own/
 * base_total.  Rows and their strings live in the arena.
 */
struct functions {
	struct arena *arena;
	Pyprofd__FunctionRow **rows;
	size_t nrows, cap;
	uint64_t samples[2]; /* per side */
	uint64_t stamp;      /* the stack being counted: a row's total counts it once */
	uint64_t *seen;      /* per row: the stamp that last counted its total */
	size_t seen_cap;
	struct hash index;   /* rows by (function, file) */
	uint32_t *row_of_frame; /* frame id -> row + 1; 0 not seen yet */
	size_t nframes;
};
void functions_init(struct functions *fs, struct arena *a);
void functions_free(struct functions *fs); /* not the rows: the arena has them */
/* Frame ids of the stacks to come mean other frames (another query's). */
void functions_forget_frames(struct functions *fs);
void functions_next_stack(struct functions *fs, int side, uint64_t count);
/* One frame of the current stack; -1 if out of memory. */
int functions_count(struct functions *fs, int side, uint32_t frame, const char *function,
                    const char *file, int32_t first_line, bool innermost, uint64_t count);
enum functions_order {
	FUNCTIONS_BY_OWN,    /* own, then total, then name */
	FUNCTIONS_BY_TOTAL,  /* total, then own, then name */
	FUNCTIONS_BY_NAME,   /* name, file, first line */
	FUNCTIONS_BY_CHANGE, /* a diff: how far the own share moved between the sides */
};
/* Order the rows.  Counting ends here. */
void functions_sort(struct functions *fs, enum functions_order order);

/* procfacts.c */
/*
 * What rules and labels need of a process, read from /proc without
 * attaching: who it is, what it runs, where systemd and container runtimes
 * put it, and the labels it gives itself in its environment.
 */
#define PROC_FACTS_NAME_MAX 256
/*
 * A target's labels, bounded so the whole set fits what the store keeps:
 * those the daemon finds or sets (exe, python, unit, container, rule,
 * parent), those a rule or an attach gives, and the process's own
 * (PYPROFD_LABELS), each own one KEY=VALUE of bounded size.  The process's
 * own are kept under a prefix no other label may take, so a process can
 * never pass for what the daemon found or a rule said.
 */
#define LABELS_OWN_PREFIX "self."
#define LABELS_FOUND_MAX 6
#define LABELS_GIVEN_MAX 42
#define LABELS_OWN_MAX 16
#define LABELS_OWN_KEY_MAX 64
#define LABELS_OWN_VALUE_MAX 256
#define TARGET_LABELS_MAX (LABELS_FOUND_MAX + LABELS_GIVEN_MAX + LABELS_OWN_MAX)
struct proc_facts {
	pid_t pid, ppid;
	uint64_t start_time; /* clock ticks after boot, as uw_process_identity gives it */
	uid_t uid;           /* real */
	char exe[4096];      /* what /proc/PID/exe points to, without " (deleted)"; "" if unreadable */
	char *cmdline;       /* the arguments joined by spaces, cut at 4 KiB; never NULL after a read */
	char unit[PROC_FACTS_NAME_MAX];      /* the systemd unit of its cgroup ("api.service"); "" */
	char container[PROC_FACTS_NAME_MAX]; /* the container id of its cgroup; "" */
	struct labels labels; /* PYPROFD_LABELS=k=v,k=v from its environment (only with PROC_FACTS_ENVIRONMENT) */
	unsigned bad_labels; /* entries of PYPROFD_LABELS left out: not k=v, too many or too long */
};
#define PROC_FACTS_ENVIRONMENT 1u /* also read /proc/PID/environ (larger; only when attaching) */
/*
 * 0; or -1 with errno: ENOENT or ESRCH when the process is gone, anything
 * else when it could not be looked at.  *out is freed with proc_facts_free
 * either way.
 */
int proc_facts_read(pid_t pid, unsigned what, struct proc_facts *out);
void proc_facts_free(struct proc_facts *f);
/*
 * Its PYPROFD_LABELS into f (what PROC_FACTS_ENVIRONMENT reads): 0, or -1 and
 * errno: ENOENT when it is gone, else it could not be read (ENOMEM, EMFILE...).
 */
int proc_facts_read_environment(pid_t pid, struct proc_facts *f);
/* The unit and container of a /proc/PID/cgroup text (v1, v2 or both), each "" when none. */
void proc_facts_parse_cgroup(const char *text, char *unit, size_t unit_len, char *container,
                             size_t container_len);
/*
 * A rule's labels setting into f's labels (appended): at most
 * LABELS_GIVEN_MAX; entries that are not valid are counted.
 */
int proc_facts_parse_labels(const char *value, struct proc_facts *f);
/*
 * Whether a label key (1 to 128 bytes, no '=', ',' or control characters)
 * and value (up to 1024) may be stored: both UTF-8.
 */
bool proc_facts_label_ok(const char *key, const char *value);
/* Whether a label key is one of a process's own (LABELS_OWN_PREFIX), which nothing else may give. */
bool proc_facts_label_is_own(const char *key);

/* rules.c */
/* match.python: the runtime's major.minor against one bound. */
enum rule_python_op { RULE_PY_EQ, RULE_PY_NE, RULE_PY_GE, RULE_PY_GT, RULE_PY_LE, RULE_PY_LT };
struct rule_python {
	enum rule_python_op op;
	unsigned version; /* major * 1000 + minor */
};
/* One attach rule: its settings as written, and what they mean. */
struct rule {
	char *name;
	char *source; /* the file it was read from, or "rpc" */
	unsigned line; /* of its section in that file; 0 for rpc */
	struct labels settings; /* as written, the last of a repeated key in place of the first */
	/* What the match.* settings mean; unset ones hold for every process. */
	char *exe_glob, *unit_glob;
	char *container; /* "*": any container; else an id prefix */
	bool has_cmdline, has_uid, has_python;
	regex_t cmdline;
	uid_t uid;
	struct rule_python python;
	/* What a match gets. */
	unsigned rate_hz; /* 0: the daemon's default rate */
	bool has_mode;
	enum uw_mode mode;
	enum uw_async_mode async_mode; /* async = true: running, or async_mode's */
	struct context_spec context;   /* context, context_labels */
	struct labels labels;
	bool children; /* Python children follow their parent */
	bool exclude;  /* a match is never attached */
	bool native;   /* C frames too (UW_SNAP_NATIVE) */
};
struct rules {
	struct rule *v;
	size_t n, cap;
};
bool rule_name_ok(const char *name);
void rule_init(struct rule *r);
void rule_free(struct rule *r);
/* One KEY=VALUE; 0, or -1 with why (r keeps what it had). */
int rule_set(struct rule *r, const char *key, const char *value, unsigned max_rate_hz, char *why,
             size_t why_len);
/* Whether the rule, its settings all given, can stand; -1 with why if not. */
int rule_finish(const struct rule *r, char *why, size_t why_len);
/*
 * The first rule whose match.* all hold.  Without the Python version (not
 * known before the runtime is found) a rule's match.python is taken to
 * hold: ask again with the version to know.
 */
const struct rule *rules_match(const struct rules *rs, const struct proc_facts *f,
                               const char *python_version);
const struct rule *rules_find(const struct rules *rs, const char *name);
/* Takes r (left empty); -1 if out of memory. */
int rules_append(struct rules *rs, struct rule *r);
void rules_remove_at(struct rules *rs, size_t i);
/*
 * Write the rules added by RPC to path (atomically: a crash or a full disk
 * leaves the old file), as they will be once `extra` takes index `at` (a
 * new rule when at == rs->n), or once index `at` is gone.  0, or -1 with why.
 */
int rules_save_with(const struct rules *rs, size_t at, const struct rule *extra, const char *path,
                    char *why, size_t why_len);
int rules_save_without(const struct rules *rs, size_t at, const char *path, char *why,
                       size_t why_len);
void rules_free(struct rules *rs);

/* config.c */
/*
 * The longest line a config file may hold, its newline aside: inih reads
 * no more, and a rule added by RPC is saved as such a line, so rule_set
 * refuses a setting that would not fit.
 */
#define CONFIG_LINE_MAX 198
struct config {
	char *state_dir;
	char *socket_path;
	char *config_path; /* the file read, or NULL */
	enum log_level log_level;
	unsigned max_connections;
	unsigned max_connections_per_uid;   /* root's are bounded by max_connections alone */
	unsigned root_reserved_connections; /* of max_connections, never given to other users */
	unsigned idle_timeout_s;    /* a connection with nothing under way is closed after this */
	unsigned request_timeout_s; /* a request must arrive whole within this of its first byte */
	size_t max_message_bytes;
	unsigned max_pending_requests;
	unsigned max_targets;       /* lowered to what the descriptors allow (descriptors_fit) */
	unsigned max_targets_asked; /* as configured */
	unsigned max_targets_per_uid; /* of max_targets, one user's and root's kept; 0: a quarter */
	size_t cache_budget_bytes;  /* the unwinder caches of the targets sampling, together */
	size_t warm_budget_bytes;
	unsigned default_rate_hz;
	unsigned max_rate_hz;
	unsigned top_window_s;
	double flush_interval_s;   /* samples reach the history this often */
	unsigned bucket_seconds;   /* the finest time bucket of the history */
	uint64_t max_pending_rows; /* history rows kept in memory while writes fail */
	uint64_t max_db_bytes;     /* the history's size cap; 0: none */
	uint64_t max_file_bytes;   /* a hard limit on the database file; writes past it fail */
	/* Retention: buckets older than age_s[i] merge into buckets of bucket_s[i]. */
#define CONFIG_RETENTION_MAX 8
	unsigned nretention;
	double retention_age_s[CONFIG_RETENTION_MAX];
	unsigned retention_bucket_s[CONFIG_RETENTION_MAX];
	/* Fleet: which processes the daemon attaches by itself, and what it may spend. */
	struct rules rules;          /* the config file's, then those added by RPC */
	char *rules_path;            /* where the rules added by RPC are kept */
	enum procwatch_method discovery_method;
	double scan_interval_s;      /* of /proc, when the kernel's events are not to be had */
	double cpu_percent;          /* of one core the daemon may use; 0: no budget */
	unsigned min_rate_hz;        /* the budget lowers rule-attached targets' rates no further */
	double uid_cpu_percent;      /* of one core sampling one user's targets may take (not root's); 0: no limit */
	uint64_t max_sample_ns;      /* a sample's walk is cut short past this; 0: never */
	struct otlp_config otlp;     /* [export.otlp] */
	bool no_write;               /* [sampling] write = false: never write into a target */
	bool no_kernel_reader;       /* [sampling] kernel_reader = false: never load the in-kernel reader */
	bool kernel_copy;            /* [sampling] kernel_copy = true: the kernel copies targets as they fall quiet */
	bool drop_idle;              /* [sampling] idle = drop: views leave waiting threads out unless asked */
	unsigned provers_off;        /* [sampling] provers_off: ways of proving stacks turned off (the ablation bench) */
};
/*
 * The configuration from defaults, the file and the flags, in that order of
 * strength.  EXIT_OK, or an exit status with the reason printed (--help
 * prints usage and gives -1: exit 0).
 */
int config_load(struct config *c, int argc, char **argv);
/* [sampling] idle's values: "keep" and "drop", indexed by drop_idle. */
extern const char *const config_idle_names[2];
/* The longest reason a configuration is refused. */
#define CONFIG_WHY_MAX 1024
/* Read the file again (SIGHUP); flags still win.  0, or -1 and why, with the old config kept. */
int config_reload(struct config *c, int argc, char **argv, char *why, size_t why_len);
void config_free(struct config *c);

/* `top` looks back this many seconds at most; a target's tally keeps them. */
#define TOP_SECONDS_KEPT 64

/* descriptors.c */
/* Descriptors one known process holds: its timer, and room for a thread's state file kept open. */
#define DESCRIPTORS_PER_TARGET 2
/* The soft RLIMIT_NOFILE raised to the hard one (at start): the limit now, 0 if unknown. */
unsigned long long descriptors_raise_limit(void);
/* Descriptors the daemon needs besides its targets: clients, the socket, the database, ... */
unsigned descriptors_reserved(const struct config *c);
/*
 * max_targets lowered to what RLIMIT_NOFILE leaves room for (the setting
 * kept in max_targets_asked); -1 with why when not even one target fits.
 */
int descriptors_fit(struct config *c, char *why, size_t why_len);
/* Say in the log why max_targets is lower than configured, if it is. */
void descriptors_explain(const struct config *c);
/*
 * Descriptors left, once everything else and max_targets are provided for,
 * for the /proc files targets keep open between samples (uw_fd_budget).
 */
unsigned descriptors_for_proc_files(const struct config *c);

/* usage.c */
/* What the daemon's own process uses: CPU seconds (user and system), resident bytes. */
double usage_cpu_seconds(void);
uint64_t usage_rss_bytes(void);

/* statedir.c */
/*
 * The state directory, created if missing and checked from / down (every
 * directory on the way root's or uid's and writable by no one else unless
 * sticky, every link followed root's or uid's, the directory itself uid's
 * alone), opened O_PATH for the files in it to be reached through.  The
 * descriptor, or -1 and why ("state directory PATH: COMPONENT is ...").
 */
int statedir_open(const char *what, const char *path, uid_t uid, char *why, size_t len);
/* A file in the directory held open (dir_fd), if there: its user's alone.  0, or -1 and why. */
int statedir_check_file(int dir_fd, const char *dir, const char *name, uid_t uid, char *why, size_t len);

/* history.c */
struct server;
struct target;
struct store_writer;
struct store_batch;

/* The daemon's way into the store: its writer, what failed. */
struct history {
	char *path;                  /* NULL: no history */
	struct store_writer *writer; /* opens the file on its thread, and retries while it cannot */
	unsigned bucket_seconds;     /* as the daemon started: a reload does not change it */
	bool write_failing;          /* as last logged */
	uint64_t file_changes;       /* the file found deleted or replaced: as last logged */
	uint64_t lost_samples, flushes;
};
/* The database's file in the state directory, and its journals' (NULL-terminated). */
#define HISTORY_FILE "pyprofd.db"
extern const char *const history_files[];
/* The database in the state directory, reached through state_fd (-1: by its path). */
int history_open(struct history *h, const struct config *c, int state_fd);
void history_configure(struct history *h, const struct config *c);
/* Hand a batch to the writer, which takes it. */
void history_submit(struct history *h, struct store_batch *b);
/* Samples that could not be made a batch (out of memory). */
void history_lose(struct history *h, uint64_t samples);
/* After a round of flushes: retention now and then, and the log of failures. */
void history_flushed(struct history *h, const struct config *c);
void history_close(struct history *h);
void history_status(struct history *h, Pyprofd__StatusResult *out, struct arena *a);

/* target.c */
enum target_state { TARGET_SAMPLING, TARGET_DETACHED, TARGET_EXITED };

struct target_params {
	unsigned rate_hz;
	enum uw_mode mode;
	enum uw_async_mode async_mode;
	unsigned flags; /* UW_SNAP_* */
	bool no_write;  /* never write into the target (attach --no-write, [sampling] write = false) */
	unsigned provers_off; /* [sampling] provers_off (uw_options.provers_off) */
	double duration_s;
	uint64_t max_sample_ns; /* a walk past this is cut short ([limits] max_sample_time); 0: never */
	struct labels labels;
	struct context_spec context; /* the requests its samples are counted by ([rule] context, attach --context) */
};

/* Percentiles of a target's timer lateness and sample cost. */
struct target_percentiles {
	double jitter_us_p50, jitter_us_p99, sample_us_p50, sample_us_p99;
};
struct target_timings;


/* A process the daemon knows: identity, warm unwinder state, its sampling. */
struct target {
	struct ev_loop *loop;
	struct history *history; /* where its samples go */
	pid_t pid;
	uint64_t start_time; /* clock ticks after boot: pid + this is the identity */
	/*
	 * Who besides root may act on it and see its history (target_owner):
	 * uid 0 when only root may.  Lowered to root for good if the process
	 * gains privileges while known; never raised.
	 */
	uid_t uid;
	gid_t gid;
	/*
	 * Whose share of the daemon (CPU budget, target slots) it spends: its
	 * real uid when first seen, whatever it does to itself later.  A user's
	 * process made root's alone above still costs that user.
	 */
	uid_t charged_uid;
	char *executable, *command_line;
	char python_version[32];
	struct uw_target *uw; /* NULL once exited */
	enum target_state state;
	struct target_params params; /* rate_hz: what was asked */
	unsigned effective_rate_hz;  /* what it samples at: lower while a budget is exceeded */
	const char *rate_lowered_by; /* that budget ("cpu_percent", "uid_cpu_percent"); NULL: none */
	double sample_seconds;       /* spent sampling it since its user's budget last counted */
	char *rule;      /* the rule that attached it; NULL: attached by hand (rules leave it alone) */
	bool children;   /* its Python children are attached too (the rule said so) */
	pid_t parent;    /* attached as a child of this target; 0: not */
	double attached_at;     /* unix time the last session began */
	ev_tstamp session_start; /* loop time of the same */
	double process_context_polled; /* contexts_poll_process's: when its OpenTelemetry context was looked at */
	char otel_service[128];        /* its process context's service.name, "" when none */
	ev_tstamp session_end;   /* loop time the last session stopped */
	uint64_t samples, errors, sessions, session_samples;
	struct schedule *schedule; /* whose ticks sample it */
	struct schedule_entry tick; /* its ticks; tick.missed: skipped while the loop was behind */
	struct uw_sample sample;
	struct tally tally;  /* this epoch's samples: `top` and the history read it */
	struct contexts *contexts; /* the same by request, when its params ask for one; NULL before */
	struct spell spell;  /* stack ids into the history's batches */
	uint64_t history_samples; /* thread samples counted for the history, all sessions */
	struct thread_table threads; /* seen within TOP_SECONDS_KEPT */
	struct target_timings *timings; /* timer lateness and sample cost; NULL once exited */
	struct target_percentiles final_percentiles; /* theirs when the process exited */
	struct uw_stats final_stats; /* the engine's counters when the process exited */
	struct uw_kreader *kreader;  /* the daemon's, or NULL */
	struct uw_native *native;    /* the daemon's copier of waiting threads' C frames, or NULL */
	struct uw_fd_budget *proc_fds; /* the daemon's budget of /proc files its targets keep open */
	size_t cache_budget;  /* its unwinder's, a share of the daemon's (targets_share_cache) */
	ev_tstamp last_used; /* loop time; detached targets are evicted oldest first */
};

/*
 * kreader: the daemon's in-kernel reader, or NULL; native: its copier of
 * C frames, or NULL; proc_fds: its budget of /proc files kept open, or
 * NULL; all outlive the target.
 */
struct target *target_open(struct ev_loop *loop, struct schedule *schedule,
                           struct history *history, struct uw_kreader *kreader, struct uw_native *native,
                           struct uw_fd_budget *proc_fds, pid_t pid, struct uw_error *err);

/*
 * The user who may act on a process besides root, by the kernel's rule for
 * tracing without privileges: its real, effective and saved uids all one
 * user's, its gids all one group's, dumpable and without capabilities.
 * Otherwise uid and gid 0: root alone.
 */
void target_owner(const struct uw_process_identity *id, uid_t *uid, gid_t *gid);
/* Root's alone from now on if the process (as it is now: id) is no longer its owner's. */
void target_lower_owner(struct target *t, const struct uw_process_identity *id);
/* Start (or restart) sampling with these parameters; the target takes the labels. */
void target_start(struct target *t, struct target_params *params);
/* Sample at this rate from now on (the budgets); the asked rate stays as it was. */
void target_set_rate(struct target *t, unsigned hz);
/* Cut its walks short past this from now on (0: never). */
void target_set_max_sample(struct target *t, uint64_t ns);
/* Its unwinder's caches hold at most this from its next sample on (0: UW_DEFAULT_CACHE_BUDGET). */
void target_set_cache_budget(struct target *t, size_t bytes);
/* Stop sampling and keep the unwinder state warm. */
void target_stop(struct target *t);
/* The process is gone: stop and drop its unwinder state. */
void target_mark_exited(struct target *t, const char *why);
/* Hand what was counted and not handed yet to the history. */
void target_flush(struct target *t);
/* What a look at a target's process found. */
enum target_sight { TARGET_SEEN, TARGET_GONE, TARGET_UNSEEN };
/*
 * Whether the process still lives as the same process: marks it exited if
 * gone, and lowers its owner if it gained privileges.  One that could not
 * be looked at (out of descriptors, ...) stays as it was, why in *err (err
 * may be NULL), and is looked at again at the next check.
 */
enum target_sight target_check_alive(struct target *t, struct uw_error *err);
void target_free(struct target *t);
const char *target_state_name(enum target_state state);
size_t target_cache_bytes(const struct target *t);
/* What its counts of samples hold: the tally and the map spelling its stack ids out. */
size_t target_count_bytes(const struct target *t);
/* Now, or as they were when the process exited. */
void target_percentiles(const struct target *t, struct target_percentiles *out);
/* The target as the protocol shows it, allocated in a. */
Pyprofd__Target *target_to_proto(const struct target *t, struct arena *a);
/* A thread as the protocol shows it, allocated in a; NULL if out of memory. */
Pyprofd__ThreadInfo *target_thread_to_proto(const struct target_thread *th, struct arena *a);
void target_params_free(struct target_params *p);

/* targets.c */
/* Every target the daemon knows, by pid. */
struct targets {
	struct target **v;
	size_t n, cap;
};
struct target *targets_find(const struct targets *ts, pid_t pid);
int targets_add(struct targets *ts, struct target *t);
void targets_remove(struct targets *ts, struct target *t);
/* Drop detached state past the budget (oldest first) and exited targets past the cap. */
void targets_trim(struct targets *ts, size_t warm_budget, size_t max_targets);
size_t targets_warm_bytes(const struct targets *ts);
/* Targets not exited: what max_targets bounds. */
size_t targets_live(const struct targets *ts);
/*
 * Whether one more live target charged to uid fits: under max_targets, and
 * for a user other than root under its share (max_targets_per_uid) with a
 * share kept for root's own processes.  -1 and why, naming the limit, if not.
 */
int targets_room(const struct targets *ts, const struct config *c, uid_t uid, char *why, size_t len);
/*
 * Every sampling target's unwinder gets an equal share of budget (at most
 * UW_DEFAULT_CACHE_BUDGET), so all of them together never hold more, however
 * many there are; called as targets start, and once a second for the rest.
 */
void targets_share_cache(struct targets *ts, size_t budget);
/* What the unwinder caches of the sampling targets hold (the detached ones: targets_warm_bytes). */
size_t targets_cache_bytes(const struct targets *ts);
/* What the counts of samples of every target hold (target_count_bytes). */
size_t targets_count_bytes(const struct targets *ts);
void targets_flush(struct targets *ts);
void targets_free(struct targets *ts);

/* query.c */
/* History queries, each a job of its own (jobs.c): answered a part at a time. */
/* Queries running at once, each on a connection of its own. */
#define QUERIES_MAX 4
/* Who asks, and of what. */
struct query_origin {
	uint64_t client_serial;
	uint64_t request_id;
	uid_t uid;
	struct store_writer *writer; /* the history's: its file is read as it reaches it */
	bool no_idle;                /* leave out waiting threads' samples (rpc_idle_left_out) */
};
/*
 * Start a query as a job: ERROR_UNSPECIFIED, and the answer comes later;
 * or the code of an error with why (then none comes).  r has passed
 * check_request (its strings and time ranges).
 */
Pyprofd__ErrorCode queries_start(struct jobs *js, const struct query_origin *o,
                                 const Pyprofd__QueryRequest *r, char *why, size_t why_len);
/* The queries running now: all, this user's, and those of users other than root. */
struct jobs_count queries_count(const struct jobs *js, uid_t uid);

/* budget.c */
/* A measured share of one core, and the factor on the asked rates of the targets it covers. */
struct budget_gauge {
	double recent; /* percent of a core, smoothed */
	double factor; /* 1: the asked rates */
	bool over;
};
/* One user other than root whose targets were sampled lately. */
struct budget_user {
	uid_t uid;
	struct budget_gauge gauge;
	double spent_s; /* sampling its targets, in the last tick */
};
/* What sampling may cost: the daemon's CPU and each user's share (see budget.c). */
struct budget {
	struct server *server;
	struct budget_gauge daemon; /* against cpu_percent: covers rule-attached targets */
	double cpu_seconds_then, wall_then;
	struct budget_user *users;  /* against uid_cpu_percent: each covers its uid's targets */
	size_t nusers, users_cap;
	bool users_warned;
};
void budget_init(struct budget *b, struct server *s);
void budget_free(struct budget *b);
/* Once a second: measure, steer, and apply the rates that moved. */
void budget_tick(struct budget *b);
/* The config was reloaded: every target under its budgets and max_sample_time as they are now. */
void budget_configure(struct budget *b);
/* A sampling target's rate under the budgets as they are (after it starts, or changes rule). */
void budget_apply(struct budget *b, struct target *t);
/* The budgets' state; a peer other than root sees its own user alone. */
void budget_status(const struct budget *b, uid_t peer, Pyprofd__StatusResult *out, struct arena *a);

/* fleet.c */
/* The processes the daemon finds and attaches by itself (rules, children). */
struct fleet_state;
struct fleet {
	struct server *server;
	struct procwatch watch;
	bool watching; /* only while there are rules */
	struct fleet_state *state;
	uint64_t judged, attached;
};
int fleet_init(struct fleet *f, struct server *s);
/* Watch processes while there are rules, and not otherwise (at start and after a reload). */
void fleet_configure(struct fleet *f);
/*
 * The rules changed: rule-attached targets follow the rule that claims them
 * now (or are detached), and every live process is judged again.
 */
void fleet_rules_changed(struct fleet *f);
void fleet_free(struct fleet *f);
/* Once a second: room under max_targets, holds of processes gone. */
void fleet_housekeeping(struct fleet *f);
/* Detached by hand: no rule attaches this process again until it exits. */
void fleet_hold(struct fleet *f, pid_t pid, uint64_t start_time);
void fleet_status(const struct fleet *f, Pyprofd__StatusResult *out);

/* server.c */
struct server {
	struct ev_loop *loop;
	struct config config;
	int argc;
	char **argv;
	int listen_fd;
	bool socket_activated;
	bool socket_created;
	int state_fd;            /* the state directory, held from the check on (statedir_open) */
	int socket_dir_fd;       /* the socket's directory, checked as the state directory is (-1: none) */
	const char *socket_name; /* the socket's name in socket_dir_fd; NULL: bound by its path */
	ev_io accept_watcher;
	ev_signal sigterm, sigint, sighup;
	ev_timer housekeeping;
	ev_timer flush_timer;
	struct targets targets;
	struct schedule schedule; /* the targets' ticks */
	struct uw_kreader *kreader; /* the in-kernel reader every target shares; NULL without */
	struct uw_error kreader_err; /* why there is none (the kernel's refusal), for status */
	struct uw_native *native;    /* the copier of waiting threads' C frames (native = true); NULL without */
	struct uw_fd_budget proc_fds; /* the /proc files targets keep open: what the descriptors leave */
	struct history history;
	struct jobs jobs; /* queries and backfills */
	struct fleet fleet;
	struct budget budget;
	struct otlp_sender otlp;
	struct client *clients;
	unsigned nclients;
	uint64_t next_client_serial;
	size_t queued_bytes;           /* of every client's responses, not written yet */
	uint64_t connections_refused;  /* past a limit */
	uint64_t connections_timed_out;
	ev_timer accept_pause; /* out of descriptors: accepting waits for this */
	bool accept_starved;   /* since the first failed accept, until the queue is empty */
	double started_at;    /* unix time */
	ev_tstamp started;    /* loop time */
	/* The last reload refused (unix time, why), kept for status until one succeeds; 0: none. */
	double reload_failed_at;
	char reload_error[CONFIG_WHY_MAX];
};
int server_main(int argc, char **argv);

/* notify.c: what systemd is told */
void notify_ready(const struct server *s);
void notify_reloading(void);
void notify_stopping(void);
/* STATUS= with what the daemon is doing. */
void notify_status(const struct server *s);

/* server_client.c */
/* One connected client: its credentials, buffers and requests in flight. */
struct client {
	struct server *server;
	struct client *next;
	uint64_t serial; /* never reused: a late answer finds its client, or none */
	int fd;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	ev_io reader, writer;
	unsigned char *in;
	size_t in_len, in_cap;
	unsigned char *out;
	size_t out_len, out_off, out_cap;
	/* Loop times that decide when a stalled connection is closed (server_clients_expire). */
	ev_tstamp last_progress; /* a byte read or written */
	ev_tstamp frame_started; /* the first byte of the request now arriving */
	bool closing; /* flush what is queued, then close */
	bool paused;  /* a query of its own runs: its later requests wait */
};
/* Take connections on s->listen_fd from now on. */
void server_clients_listen(struct server *s);
/* Take no more, and let every client go (shutdown). */
void server_clients_close(struct server *s);
void server_client_accept(struct server *s, int fd);
void server_client_free(struct client *c);
/* Queue one response (packed with its length prefix); -1 if out of memory. */
int server_client_send(struct client *c, const Pyprofd__Response *resp);
/* Whether the client with this serial takes a part of its query's answer now. */
enum job_room server_client_answer_room(void *server, uint64_t client_serial);
/* A part of a query's answer, framed, for the client with this serial. */
void server_client_answer_part(void *server, uint64_t client_serial, const uint8_t *bytes,
                               size_t len);
/* A query's answer ended: the client's later requests are read again. */
void server_client_answer_done(void *server, uint64_t client_serial, bool ok);
/* Once a second: close connections idle or stalled past the configured timeouts. */
void server_clients_expire(struct server *s);


/* rpc.c */
/* Answer one request into resp (its nested messages in a); false if the answer comes later. */
bool rpc_dispatch(struct server *s, struct client *c, const Pyprofd__Request *req,
                  Pyprofd__Response *resp, struct arena *a);

#endif
