/*
 * `pyprofd record`: sample one process at a fixed rate (or as fast as
 * possible) for a while, without a daemon, and write the profile.  It runs
 * the same engine the daemon runs, so it is also how the engine is measured.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "contexts.h"
#include "record.h"

/* Per-sample timings kept for percentiles; past this many, the rest are not timed. */
#define RECORD_MAX_TIMINGS (1u << 22)
/* At max rate, how many samples between looks for SIGINT/SIGTERM. */
#define RECORD_SIGNAL_CHECK_EVERY 64
/* At max rate, the grid whose ticks the profile counts (record_ticks): 10 us apart. */
#define RECORD_MAX_GRID_HZ 100000
/* How far a tick may lie from the read it is counted for (or a period, if longer); further, missed. */
#define RECORD_TICK_REACH_NS 1000000u

double record_seconds(const struct timespec *ts)
{
	return (double)ts->tv_sec + (double)ts->tv_nsec / 1e9;
}

/*
 * The k-th smallest of v[0..n) (v is reordered): a percentile costs a pass or
 * two over the timings, not a sort of a million of them, which showed in the
 * CPU per sample a benchmark divides out.
 */
static uint32_t record_select(uint32_t *v, size_t n, size_t k)
{
	ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, want = (ptrdiff_t)k;
	while (lo < hi) {
		uint32_t pivot = v[lo + (hi - lo) / 2];
		ptrdiff_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				uint32_t tmp = v[i];
				v[i++] = v[j];
				v[j--] = tmp;
			}
		}
		if (want <= j)
			hi = j;
		else if (want >= i)
			lo = i;
		else
			break;
	}
	return v[want];
}

/*
 * What the profile counts: the ticks of a grid (the rate's; at max, one of
 * RECORD_MAX_GRID_HZ), each once, for the read nearest it in time.  A read
 * made on time stands for its own tick, as at any fixed rate.  But how long
 * a read takes depends on what the target runs (a stack that moves under
 * the read is read again), so counting reads as they come, back to back or
 * behind the grid, counts short the code that makes them slow: 3.15's
 * call-heavy phase came out 25 points under its share of the time at max
 * rate.  Each read stands instead for the ticks between the midpoints to
 * the reads on either side, so it is counted only once the next read's time
 * is known: two samples alternate, the last one kept until then.  A tick
 * further than the reach from every read (the sampler itself stalled) is
 * missed rather than given to a read that never saw it.
 */

uint64_t record_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * 1000000000u + (uint64_t)ts->tv_nsec;
}

/* The grid's period at a rate (0: max). */
static uint64_t record_period_ns(double rate)
{
	double hz = rate > 0 ? rate : RECORD_MAX_GRID_HZ;
	return (uint64_t)(1e9 / hz) ? (uint64_t)(1e9 / hz) : 1;
}

void record_ticks_start(struct record_ticks *k, double rate, uint64_t origin_ns, uint64_t deadline_ns)
{
	k->period_ns = record_period_ns(rate);
	/*
	 * At a slow rate a read reaches a period: one made late, the machine
	 * busy, still stands for its own tick, and one beside a stall of the
	 * sampler's for at most one tick more.
	 */
	k->reach_ns = k->period_ns > RECORD_TICK_REACH_NS ? k->period_ns : RECORD_TICK_REACH_NS;
	k->origin_ns = k->counted_ns = origin_ns;
	k->deadline_ns = deadline_ns;
}

/* The grid's ticks in [lo, hi). */
static uint64_t record_ticks_between(const struct record_ticks *k, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return 0;
	uint64_t p = k->period_ns;
	return (hi - k->origin_ns + p - 1) / p - (lo - k->origin_ns + p - 1) / p;
}

void record_ticks_settle(struct record_ticks *k, uint64_t until)
{
	if (!k->pending)
		return;
	k->pending = false;
	until = until < k->deadline_ns ? until : k->deadline_ns;
	uint64_t from = k->counted_ns;
	if (until <= from)
		return;
	/* [from, lo) and [hi, until) are out of the read's reach; [lo, hi) is its own. */
	uint64_t t = k->pending_ns;
	uint64_t lo = t > from + k->reach_ns ? t - k->reach_ns : from;
	lo = lo < until ? lo : until;
	uint64_t hi = t + k->reach_ns < until ? t + k->reach_ns : until;
	hi = hi > lo ? hi : lo;
	uint64_t n = record_ticks_between(k, lo, hi);
	k->missed += record_ticks_between(k, from, lo) + record_ticks_between(k, hi, until);
	if (!k->pending_ok)
		k->missed += n;
	else if (n && !k->failed && profile_count(k->prof, &k->reads[k->pending_slot], n) != 0)
		k->failed = true;
	else
		k->counted += n;
	k->counted_ns = until;
}

void record_ticks_read(struct record_ticks *k, int slot, bool ok, uint64_t at)
{
	if (k->pending)
		record_ticks_settle(k, k->pending_ns + (at - k->pending_ns) / 2);
	k->pending = true;
	k->pending_slot = slot;
	k->pending_ok = ok;
	k->pending_ns = at;
}

void record_ticks_free(struct record_ticks *k)
{
	uw_sample_free(&k->reads[0]);
	uw_sample_free(&k->reads[1]);
}

static double record_percentile_us(struct record_run *run, double q)
{
	if (run->nns == 0)
		return 0;
	size_t i = (size_t)(q * (double)(run->nns - 1) + 0.5);
	return record_select(run->ns, run->nns, i) / 1000.0;
}

json_t *record_stats_json(const struct uw_stats *stats, const char *version, uint64_t counted,
                          uint64_t missed, struct record_run *run, const struct record_opts *o,
                          unsigned processes)
{
	const struct uw_stats st = *stats;
	double samples = (double)(st.samples ? st.samples : 1);
	double threads = (double)(st.thread_samples ? st.thread_samples : 1);
	uint64_t frames = st.frames_from_cache + st.frames_from_memory;
	uint64_t codes = st.code_cache_hits + st.code_cache_misses;
	json_t *errors = json_object();
	for (int s = UW_ENOPROC; s <= UW_EIO; s++)
		if (st.errors[s])
			json_object_set_new(errors, vocab_status_name((enum uw_status)s),
			                    json_integer((json_int_t)st.errors[s]));
	json_t *j = json_pack(
		"{s:i, s:s, s:b, s:s, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:f}",
		"pid", (int)o->pid, "python_version", version, "cache", !o->uw.no_cache, "mode",
		vocab_mode_name(o->uw.mode),
		"total_samples", (json_int_t)st.samples, "ok_samples", (json_int_t)run->ok,
		"failed_samples", (json_int_t)run->failed, "duration_s", run->elapsed,
		"samples_per_s", run->elapsed > 0 ? (double)st.samples / run->elapsed : 0.0,
		"us_per_sample_median", record_percentile_us(run, 0.5), "us_per_sample_p99",
		record_percentile_us(run, 0.99), "success_rate", (double)run->ok / samples, "readv_calls",
		(json_int_t)st.readv_calls, "bytes_read", (json_int_t)st.bytes_read,
		"readv_calls_per_sample", (double)st.readv_calls / samples, "bytes_per_sample",
		(double)st.bytes_read / samples);
	json_object_set_new(j, "pages_per_sample", json_real((double)st.pages_read / samples));
	json_object_set_new(j, "read_us_per_sample", json_real((double)st.read_ns / 1e3 / samples));
	for (size_t i = 0; i < COUNTERS_COUNT; i++)
		json_object_set_new(j, counters_table[i].name,
		                    json_integer((json_int_t)counters_value(&st, i)));
	json_object_set_new(j, "frame_cache_hit_rate",
	                    json_real((double)(st.frame_cache_full_hits + st.frame_cache_partial_hits) / threads));
	json_object_set_new(j, "frames_from_cache_rate",
	                    json_real(frames ? (double)st.frames_from_cache / (double)frames : 0.0));
	json_object_set_new(j, "code_object_cache_hit_rate",
	                    json_real(codes ? (double)st.code_cache_hits / (double)codes : 0.0));
	json_object_set_new(j, "errors", errors);
	/* What the profile's counts are: ticks of this grid, and those no read was near. */
	json_object_set_new(j, "grid_hz", json_real(1e9 / (double)record_period_ns(o->rate)));
	json_object_set_new(j, "ticks_counted", json_integer((json_int_t)counted));
	json_object_set_new(j, "ticks_missed", json_integer((json_int_t)missed));
	if (processes)
		json_object_set_new(j, "processes", json_integer(processes));
	/*
	 * Whether the kernel tells which threads ran (then no /proc file is
	 * read for it), and copies a process as it falls quiet (then a sample
	 * after a burst pins no page).
	 */
	struct uw_kreader_state k =
		uw_kreader_state(o->uw.kreader, o->no_kernel_reader ? "off (--no-kernel-reader)" : o->kreader_err.msg);
	json_object_set_new(j, "kernel_reader", json_string(k.reader));
	json_object_set_new(j, "kernel_look", json_string(k.look));
	json_object_set_new(j, "kernel_copy", json_string(k.copy));
	return j;
}

static void record_stats_print(json_t *j)
{
	fprintf(stderr, "\npyprofd record: %lld samples in %.2f s (%.0f/s), %.2f us median, %.2f us p99\n",
	        (long long)json_integer_value(json_object_get(j, "total_samples")),
	        json_real_value(json_object_get(j, "duration_s")),
	        json_real_value(json_object_get(j, "samples_per_s")),
	        json_real_value(json_object_get(j, "us_per_sample_median")),
	        json_real_value(json_object_get(j, "us_per_sample_p99")));
	fprintf(stderr, "  %-28s %s\n", "kernel_reader",
	        json_string_value(json_object_get(j, "kernel_reader")));
	fprintf(stderr, "  %-28s %s\n", "kernel_look", json_string_value(json_object_get(j, "kernel_look")));
	const char *key;
	json_t *value;
	json_object_foreach(j, key, value) {
		if (json_is_integer(value))
			fprintf(stderr, "  %-28s %lld\n", key, (long long)json_integer_value(value));
		else if (json_is_real(value))
			fprintf(stderr, "  %-28s %.4f\n", key, json_real_value(value));
	}
}

void record_stats_report(json_t *j, const struct record_opts *o)
{
	if (o->stats)
		record_stats_print(j);
	if (o->stats_json) {
		char *line = json_dumps(j, JSON_COMPACT);
		if (line)
			fprintf(stderr, "%s\n", line);
		free(line);
	}
}

/* Sleep until `next` or a stop signal; true if a signal came. */
static bool record_wait(const sigset_t *stop, const struct timespec *next)
{
	for (;;) {
		struct timespec now, left;
		clock_gettime(CLOCK_MONOTONIC, &now);
		double d = record_seconds(next) - record_seconds(&now);
		if (d <= 0)
			return false;
		left.tv_sec = (time_t)d;
		left.tv_nsec = (long)((d - (double)left.tv_sec) * 1e9);
		int sig = sigtimedwait(stop, NULL, &left);
		if (sig > 0)
			return true;
		if (sig < 0 && errno == EAGAIN)
			return false;
	}
}

static bool record_stop_pending(const sigset_t *stop)
{
	sigset_t pending;
	if (sigpending(&pending) != 0)
		return false;
	return sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM) ||
	       (sigismember(stop, SIGHUP) && sigismember(&pending, SIGHUP));
}

/*
 * The unwinder is about to forget every stack id: the read still pending
 * takes its ticks so far, and the profile spells its counts out.
 */
void record_on_epoch_end(void *ctx, const struct uw_target *t)
{
	struct record_ticks *k = ctx;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	record_ticks_settle(k, record_ns(&now));
	if (k->failed || profile_settle(k->prof, t) != 0)
		k->prof->failed = true;
}

void record_time_sample(struct record_run *run, double ns)
{
	if (run->nns < RECORD_MAX_TIMINGS &&
	    array_reserve((void **)&run->ns, &run->ns_cap, run->nns, sizeof *run->ns, NULL) == 0) {
		ns = ns > 0 ? ns : 0;
		run->ns[run->nns++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
	}
}

/* The sampling loop: until the duration, a stop signal, or the target's exit. */
static int record_loop(struct uw_target *t, const struct record_opts *o, struct record_ticks *k,
                       struct record_run *run, const sigset_t *stop)
{
	struct timespec start, next, a, b;
	clock_gettime(CLOCK_MONOTONIC, &start);
	run->started_unix = clock_wall_s();
	record_ticks_start(k, o->rate, record_ns(&start),
	                   o->duration > 0 ? record_ns(&start) + (uint64_t)(o->duration * 1e9) : UINT64_MAX);
	next = start;
	double interval = o->rate > 0 ? 1.0 / o->rate : 0;
	int status = EXIT_OK;
	double polled = 0; /* contexts_poll_process's: when the process's OpenTelemetry context was looked at */

	for (uint64_t n = 0;; n++) {
		clock_gettime(CLOCK_MONOTONIC, &a);
		if (o->duration > 0 && record_seconds(&a) - record_seconds(&start) >= o->duration)
			break;
		struct uw_error err; /* uw_sample fills it when it fails: no message cleared per sample */
		err.status = UW_OK;
		err.msg[0] = '\0';
		/* A paced sample's wait for its shots is not the sampler's work: its time leaves it out. */
		struct uw_stats before, after;
		if (o->uw.kernel_pace)
			uw_stats(t, &before);
		int slot = k->pending_slot ^ 1; /* not the pending read's */
		int rc = uw_sample(t, &k->reads[slot], &err);
		clock_gettime(CLOCK_MONOTONIC, &b);
		record_ticks_read(k, slot, rc == 0, record_ns(&b));
		double ns = (record_seconds(&b) - record_seconds(&a)) * 1e9;
		if (o->uw.kernel_pace) {
			uw_stats(t, &after);
			ns -= (double)(after.kernel_paced_ns - before.kernel_paced_ns);
		}
		record_time_sample(run, ns);
		if (rc != 0) {
			run->failed++;
			if (err.status == UW_EGONE || err.status == UW_ENOPROC) {
				fprintf(stderr, "pyprofd: process %d exited; stopping\n", (int)o->pid);
				break;
			}
			if (err.status == UW_EPERM || err.status == UW_ENOMEM) {
				uw_error_add_remedy(&err, o->pid);
				fprintf(stderr, "pyprofd: %s\n", err.msg);
				status = vocab_status_exit(err.status);
				break;
			}
		} else {
			run->ok++;
			if (o->uw.context_otel || o->uw.ncontext_labels)
				contexts_poll_process(t, o->pid, record_seconds(&b), &polled, NULL, 0);
		}
		if (k->failed || k->prof->failed)
			break; /* out of memory counting: said once the loop ends */
		if (interval > 0) {
			/* Drift-free: the schedule advances by the interval, not from now. */
			double when = record_seconds(&next) + interval;
			if (when < record_seconds(&b))
				when = record_seconds(&b); /* behind: skip, do not burst */
			next.tv_sec = (time_t)when;
			next.tv_nsec = (long)((when - (double)next.tv_sec) * 1e9);
			if (record_wait(stop, &next))
				break;
		} else if (n % RECORD_SIGNAL_CHECK_EVERY == 0 && record_stop_pending(stop)) {
			break;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	run->elapsed = record_seconds(&b) - record_seconds(&start);
	run->ended_unix = clock_wall_s();
	/* The last read's ticks run to the end, but no further than the duration asked. */
	record_ticks_settle(k, record_ns(&b));
	if ((k->failed || k->prof->failed) && status == EXIT_OK) {
		fputs("pyprofd: out of memory aggregating samples\n", stderr);
		status = EXIT_FAILURE_OTHER;
	}
	return status;
}

/* The functions of a profile, own and total, written as pyprofd-ctl writes a query's table. */
static int record_table(const struct export_profile *p, FILE *out)
{
	struct arena a = {0};
	struct functions fs;
	functions_init(&fs, &a);
	int rc = 0;
	for (uint32_t i = 0; rc == 0 && i < p->nstacks; i++) {
		const struct export_stack *st = &p->stacks[i];
		functions_next_stack(&fs, 0, st->count);
		for (uint32_t d = st->depth; rc == 0 && d-- > 0;) {
			const struct export_frame *f = &p->frames[st->frames[d]];
			rc = functions_count(&fs, 0, st->frames[d], f->function, f->file, f->first_line,
			                     d + 1 == st->depth, st->count);
		}
	}
	if (rc != 0) {
		errno = ENOMEM;
	} else {
		functions_sort(&fs, FUNCTIONS_BY_OWN);
		struct export_table t = {.rows = fs.rows,
		                         .nrows = fs.nrows,
		                         .functions_found = fs.nrows,
		                         .name = p->name,
		                         .mode = p->mode,
		                         .rate_hz = p->rate_hz,
		                         .from_unix = p->from_unix,
		                         .until_unix = p->until_unix,
		                         .total = fs.samples[0]};
		rc = export_table_write(&t, false, out);
	}
	functions_free(&fs);
	arena_free(&a);
	return rc;
}

int record_emit(struct export_profile *p, const struct record_opts *o, const struct record_run *run,
                FILE *out)
{
	p->mode = vocab_mode_name(o->uw.mode);
	/* What a count stands for: a tick of the grid (record_ticks). */
	double rate = o->rate > 0 ? o->rate : RECORD_MAX_GRID_HZ;
	p->rate_hz = rate < 1 ? 1 : rate > UINT32_MAX ? UINT32_MAX : (uint32_t)(rate + 0.5);
	p->per_thread = o->per_thread;
	p->from_unix = run->started_unix;
	p->until_unix = run->ended_unix > run->started_unix ? run->ended_unix : run->started_unix;
	struct export_sources sources = {0};
	int rc = 0;
	if (o->format == EXPORT_HEATMAP && !o->table) {
		rc = export_sources_read(p, EXPORT_SOURCE_MAX_TOTAL, &sources);
		p->sources = sources.v;
		p->nsources = sources.n;
	}
	if (rc == 0)
		rc = o->table ? record_table(p, out) : export_write(p, o->format, out);
	int saved = errno;
	export_sources_free(&sources);
	p->sources = NULL;
	p->nsources = 0;
	errno = saved;
	return rc;
}

void record_native_open(struct record_opts *o)
{
	if (!(o->uw.flags & UW_SNAP_NATIVE))
		return;
	struct uw_error why = {0};
	if (!(o->uw.native = uw_native_open(!o->no_kernel_reader, &why)))
		fprintf(stderr, "pyprofd: --native: no C frames, only <native> marks: %s\n", why.msg);
	else if (!o->no_kernel_reader && uw_native_shots_refused(o->uw.native))
		fprintf(stderr, "pyprofd: --native: running threads keep their <native> marks: %s\n",
		        uw_native_shots_refused(o->uw.native));
}

/* The profile in the asked format, through the export library pyprofd-ctl uses too. */
static int record_write(struct profile *prof, const struct uw_target *t,
                        const struct record_opts *o, const struct record_run *run, FILE *out)
{
	if (profile_settle(prof, t) != 0 || prof->failed) {
		errno = ENOMEM;
		return -1;
	}
	/* The process's start names it to a heatmap, which reads its sources in its root. */
	struct uw_process_identity id = {0};
	struct uw_error err = {0};
	if (o->format == EXPORT_HEATMAP && uw_process_identity(o->pid, &id, &err) != 0)
		id.start_time = 0;
	struct export_profile p;
	if (profile_export(prof, o->pid, id.start_time, o->no_idle, &p) != 0) {
		errno = ENOMEM;
		return -1;
	}
	char name[32];
	snprintf(name, sizeof name, "pid %d", (int)o->pid);
	p.name = name;
	int rc = record_emit(&p, o, run, out);
	int saved = errno;
	profile_free_export(&p);
	errno = saved;
	return rc;
}

int record_pid(struct record_opts *opts, FILE *out)
{
	struct record_opts o = *opts;
	struct uw_error err = {0};
	struct uw_target *t = uw_open(o.pid, &err);
	if (!t) {
		uw_error_add_remedy(&err, o.pid);
		fprintf(stderr, "pyprofd: %s\n", err.msg);
		if (out != stdout)
			fclose(out);
		return vocab_status_exit(err.status);
	}
	struct profile prof;
	profile_init(&prof);
	prof.context_labels = o.uw.context_labels;
	struct record_ticks ticks = {.prof = &prof};
	o.uw.on_epoch_end = record_on_epoch_end;
	o.uw.epoch_ctx = &ticks;
	/* Without it (not root), threads whose stacks move under every read go uncounted: the stats say why. */
	o.uw.kreader = o.no_kernel_reader ? NULL : uw_kreader_open(&o.kreader_err);
	if (!o.kernel_copy)
		uw_kreader_copy_off(o.uw.kreader);
	record_native_open(&o);
	/* Faster than a thread may be shot (2 kHz): each sample waits for its shot, rather than go unshot. */
	o.uw.kernel_pace = o.rate == 0 || o.rate > 2000;
	uw_configure(t, &o.uw);

	/* Signals stop the loop where it stands, so the profile is still written. */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);

	struct record_run run = {0};
	int status = record_loop(t, &o, &ticks, &run, &stop);
	if (record_write(&prof, t, &o, &run, out) != 0 && status == EXIT_OK) {
		fprintf(stderr, "pyprofd: cannot write the profile: %s\n", strerror(errno));
		status = EXIT_FAILURE_OTHER;
	}
	if (out != stdout)
		fclose(out);
	if (o.stats || o.stats_json) {
		struct uw_stats st;
		uw_stats(t, &st);
		json_t *j = record_stats_json(&st, uw_version(t), ticks.counted, ticks.missed, &run, &o, 0);
		record_stats_report(j, &o);
		json_decref(j);
	}
	profile_free(&prof);
	record_ticks_free(&ticks);
	free(run.ns);
	uw_close(t);
	uw_kreader_close(o.uw.kreader);
	uw_native_close(o.uw.native);
	return status;
}
