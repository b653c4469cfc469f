/*
 * What `pyprofd record` of one process (record.c) and of a command with its
 * children (record_run.c) share: the options, the grid of ticks a profile
 * counts, the run's timings, and the writing of the profile.
 */
#ifndef PYPROFD_RECORD_H
#define PYPROFD_RECORD_H

#include <signal.h>
#include <time.h>

#include "pyprofd.h"

struct record_opts {
	pid_t pid;
	char **command; /* after --: the command to start and record with its children; NULL: pid */
	double rate; /* 0: max */
	double duration;
	struct uw_options uw;
	const char *output;
	enum export_format format;
	bool table; /* --format table: counted here, written as pyprofd-ctl writes one */
	bool stats, stats_json;
	bool no_idle, per_thread;
	bool no_kernel_reader;
	bool kernel_copy;
	struct uw_error kreader_err; /* why the in-kernel reader could not be loaded */
};

/* What a run measured, beside the engine's own counters. */
struct record_run {
	uint64_t ok, failed;
	double elapsed;
	double started_unix, ended_unix;
	uint32_t *ns; /* per-sample time of uw_sample, nanoseconds */
	size_t nns, ns_cap;
};

/* The ticks of a grid a profile counts, each once, for the read nearest it (see record.c). */
struct record_ticks {
	struct profile *prof;
	struct uw_sample reads[2];
	bool pending;          /* a read whose later ticks are not counted yet */
	int pending_slot;      /* which of reads it is (the next read goes in the other) */
	bool pending_ok;       /* a failed read stands for its ticks, and counts nothing */
	uint64_t pending_ns;   /* when it was taken */
	uint64_t origin_ns, period_ns, reach_ns;
	uint64_t deadline_ns;  /* the duration's end: no tick from here on is counted */
	uint64_t counted_ns;   /* the ticks before this are counted or missed */
	uint64_t counted, missed;
	bool failed;           /* out of memory counting */
};

double record_seconds(const struct timespec *ts);
uint64_t record_ns(const struct timespec *ts);
/* The grid of the rate from origin_ns (monotonic), no tick counted from deadline_ns on. */
void record_ticks_start(struct record_ticks *k, double rate, uint64_t origin_ns, uint64_t deadline_ns);
/* The pending read's ticks, up to `until` (the midpoint to the next read, or the end). */
void record_ticks_settle(struct record_ticks *k, uint64_t until);
/* A read just taken (into reads[slot]) at `at`: the one before it gets its ticks. */
void record_ticks_read(struct record_ticks *k, int slot, bool ok, uint64_t at);
void record_ticks_free(struct record_ticks *k);
/* The uw_options epoch callback: its ctx is the target's struct record_ticks. */
void record_on_epoch_end(void *ctx, const struct uw_target *t);
/* A sample's time into run's timings, its paced wait (kernel_pace) left out. */
void record_time_sample(struct record_run *run, double ns);

/*
 * The stats of a run over the engine's counters st (of one process, or
 * summed over several), as --stats-json prints them; processes > 0 adds
 * how many processes were recorded.
 */
json_t *record_stats_json(const struct uw_stats *st, const char *version, uint64_t counted,
                          uint64_t missed, struct record_run *run, const struct record_opts *o,
                          unsigned processes);
/* --stats and --stats-json on stderr. */
void record_stats_report(json_t *j, const struct record_opts *o);

/* An exported profile, named and timed by the run, in the asked format; 0 or -1 and errno. */
int record_emit(struct export_profile *p, const struct record_opts *o, const struct record_run *run,
                FILE *out);

/* record_run.c */
/* `pyprofd record [options] -- COMMAND...`: o parsed, the profile to out; the exit status. */
int record_command(struct record_opts *o, FILE *out);
/* The command line into o: 0, -1 when --help was printed, or an exit status. */
int record_parse(int argc, char **argv, struct record_opts *o);
/*
 * With --native, the kernel's copier of waiting threads' stacks into
 * o->uw.native; when the kernel refuses it, said once, and the samples
 * have marks.
 */
void record_native_open(struct record_opts *o);
/* Record the process o names into out (closed unless stdout); pyprofd's exit status. */
int record_pid(struct record_opts *o, FILE *out);

#endif
