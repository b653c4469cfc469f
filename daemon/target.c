/*
 * A target: one process the daemon knows, and everything about it — its
 * identity (pid and start time, so a reused pid is a different process), its
 * unwinder state with the warm caches, its sampling timer, what it sampled
 * lately and how punctual and costly the sampling was.
 *
 * Lifecycle: target_open (detached, state warm), target_start (sampling),
 * target_stop (detached again, caches kept), target_mark_exited (state
 * dropped, entry kept for `list`), target_free.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "pyprofd.h"
#include "store.h"

_Static_assert(TARGET_LABELS_MAX <= STORE_MAX_LABELS, "a target's labels fit what the store keeps of it");

#define CMDLINE_MAX 4096

/*
 * The executable's path, its bytes that are not UTF-8 replaced (U+FFFD):
 * the process chose the name, and list, query and a collector take UTF-8.
 */
static char *target_read_executable(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
	ssize_t len = readlink(path, buf, sizeof buf - 1);
	if (len < 0)
		return strdup("");
	buf[len] = '\0';
	return export_utf8_copy(buf);
}

/*
 * The command line with its NULs as spaces, cut at CMDLINE_MAX bytes, its
 * bytes that are not UTF-8 replaced as the executable's are; NULL
 * with *err if it could not be read (then the process is gone, or could not
 * be looked at: an empty line would be kept in its history for good).
 */
static char *target_read_command_line(pid_t pid, struct uw_error *err)
{
	char buf[CMDLINE_MAX];
	ssize_t len = uw_proc_read(pid, "cmdline", buf, sizeof buf);
	if (len < 0 && (errno == ENOENT || errno == ESRCH)) {
		err->status = UW_ENOPROC;
		snprintf(err->msg, sizeof err->msg, "no process with pid %d", (int)pid);
		return NULL;
	}
	if (len < 0) {
		err->status = UW_EIO;
		snprintf(err->msg, sizeof err->msg, "cannot read the command line of process %d: %s", (int)pid,
		         strerror(errno));
		return NULL;
	}
	while (len > 0 && buf[len - 1] == '\0')
		len--;
	for (ssize_t i = 0; i < len; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[len] = '\0';
	char *line = export_utf8_copy(buf);
	if (!line) {
		err->status = UW_ENOMEM;
		snprintf(err->msg, sizeof err->msg, "out of memory");
	}
	return line;
}

/* The last samples' lateness and cost: 32 KiB, kept while the process lives. */
struct target_timings {
	struct timing jitter_us, cost_us;
};

static void target_on_tick(struct schedule_entry *e, double now, double late_s);

/* What a sample is taken to cost before the target's first: places it on the schedule. */
#define TARGET_FIRST_COST_S 0.00005

/* ---- the history's batches ---- */

/* A batch under construction: samples merge per (bucket, thread, stack) before they go in. */
struct target_batch {
	struct store_batch *b;
	int target; /* the batch's index of this target */
	unsigned width;
	struct target_batch_row {
		int64_t bucket;
		uint64_t thread_id;
		int32_t stack;
		uint64_t count, idle;
	} *rows;
	size_t nrows, rows_cap;
	struct hash index;
};

static int32_t target_batch_frame(void *ctx, const struct uw_frame *f)
{
	struct target_batch *tb = ctx;
	const char *name = uw_frame_name(f);
	if (f->kind == UW_FRAME_C)
		return store_batch_c_frame(tb->b, name ? name : "", f->file ? f->file : "", f->line, f->build_id);
	return store_batch_frame(tb->b, name ? name : "", f->file ? f->file : "", f->line, (int)f->kind,
	                         f->first_line);
}

static int32_t target_batch_stack(void *ctx, int32_t parent, int32_t frame)
{
	struct target_batch *tb = ctx;
	return store_batch_stack(tb->b, parent, frame);
}

static const struct spell_sink target_batch_sink = {target_batch_frame, target_batch_stack};

static bool target_batch_row_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct target_batch_row *r = &((const struct target_batch *)ctx)->rows[id];
	const struct target_batch_row *k = key;
	return r->stack == k->stack && r->thread_id == k->thread_id && r->bucket == k->bucket;
}

/* One tally entry into the batch's rows. */
static int target_batch_add(void *ctx, const struct tally_entry *e, uint64_t count)
{
	struct target *t = ctx;
	struct target_batch *tb = t->spell.sink_ctx;
	int32_t stack = spell_stack(&t->spell, t->uw, e->stack);
	if (stack < 0)
		return -1;
	struct target_batch_row key = {.bucket = e->second - ((e->second % tb->width) + tb->width) % tb->width,
	                               .thread_id = e->thread_id,
	                               .stack = stack};
	uint32_t hash = hash_u64((uint64_t)key.bucket ^ hash_u64(key.thread_id) ^ (uint64_t)stack << 20);
	if (hash_reserve(&tb->index, 1) != 0 ||
	    array_reserve((void **)&tb->rows, &tb->rows_cap, tb->nrows, sizeof *tb->rows, NULL) != 0)
		return -1;
	struct hash_slot *slot = hash_probe(&tb->index, hash, target_batch_row_equal, tb, &key);
	if (!slot->id) {
		tb->rows[tb->nrows] = key;
		hash_fill(&tb->index, slot, hash, (uint32_t)tb->nrows++);
	}
	tb->rows[slot->id - 1].count += count;
	tb->rows[slot->id - 1].idle += e->idle - e->idle_handed;
	return 0;
}

/* A stack id as the batch's (its sink set): for the requests' rows. */
static int32_t target_spell(void *ctx, uint32_t stack)
{
	struct target *t = ctx;
	return spell_stack(&t->spell, t->uw, stack);
}

/* The target's unhanded counts as a new batch; NULL if out of memory. */
static struct store_batch *target_batch(struct target *t)
{
	struct target_batch tb = {.width = t->history->bucket_seconds ? t->history->bucket_seconds : 10};
	if (!(tb.b = store_batch_new()))
		return NULL;
	struct labels scratch = {0};
	const struct labels *labels = contexts_process_labels(&t->params.labels, t->otel_service, &scratch);
	struct store_target_info info = {
		.pid = t->pid,
		.start_time = t->start_time,
		.uid = t->uid,
		.executable = t->executable,
		.command_line = t->command_line,
		.python_version = t->python_version,
		.nlabels = labels->n,
		.label_keys = (const char *const *)labels->keys,
		.label_values = (const char *const *)labels->values,
	};
	tb.target = store_batch_target(tb.b, &info);
	labels_free(&scratch);
	double detached_at = t->state == TARGET_SAMPLING ? 0 : t->session_end;
	bool ok = tb.target >= 0 &&
	          (!t->sessions || store_batch_session(tb.b, tb.target, t->attached_at, detached_at,
	                                               t->params.rate_hz,
	                                               vocab_mode_name(t->params.mode)) >= 0);
	/* Batch-local numbering: every batch spells its stacks afresh. */
	spell_forget(&t->spell);
	t->spell.sink_ctx = &tb;
	ok = ok && tally_hand(&t->tally, target_batch_add, t) == 0;
	ok = ok && (!t->contexts || contexts_batch(t->contexts, tb.b, tb.target, tb.width, target_spell, t) == 0);
	t->spell.sink_ctx = NULL;
	spell_forget(&t->spell);
	for (size_t i = 0; ok && i < tb.nrows; i++)
		ok = store_batch_samples(tb.b, tb.target, tb.rows[i].bucket, tb.width, tb.rows[i].thread_id,
		                         tb.rows[i].stack, tb.rows[i].count, tb.rows[i].idle) >= 0;
	/* The threads named since the last batch: a name is kept once per change, not per row. */
	for (size_t i = 0; ok && i < t->threads.n; i++) {
		struct target_thread *th = &t->threads.v[i];
		if (th->declared)
			continue;
		ok = store_batch_thread(tb.b, tb.target, th->thread_id, th->native_id, th->name) == 0;
		th->declared = ok;
	}
	free(tb.rows);
	hash_free(&tb.index);
	if (!ok) {
		store_batch_free(tb.b);
		return NULL;
	}
	return tb.b;
}

void target_flush(struct target *t)
{
	uint64_t samples = t->tally.unhanded;
	if (!samples || !t->uw)
		return;
	if (!t->history || !t->history->path) {
		/* No history to keep them for. */
		tally_mark_handed(&t->tally);
		if (t->contexts)
			contexts_drop(t->contexts);
		for (size_t i = 0; i < t->threads.n; i++)
			t->threads.v[i].declared = true;
	} else {
		struct store_batch *b = target_batch(t);
		if (b) {
			history_submit(t->history, b);
		} else {
			log_warn("pid %d: out of memory writing %llu samples to the history", (int)t->pid,
			         (unsigned long long)samples);
			history_lose(t->history, samples);
			tally_mark_handed(&t->tally);
			if (t->contexts)
				contexts_drop(t->contexts);
		}
	}
	/* What is handed on and older than `top` looks is forgotten, threads gone as long too. */
	int64_t before = (int64_t)floor(ev_now(t->loop)) - TOP_SECONDS_KEPT;
	tally_prune(&t->tally, before);
	size_t kept = 0;
	for (size_t i = 0; i < t->threads.n; i++)
		if (t->threads.v[i].last_second >= before || !t->threads.v[i].declared)
			t->threads.v[kept++] = t->threads.v[i];
	t->threads.n = kept;
}

/* The unwinder is about to forget every stack id: what was counted by them goes out first. */
static void target_on_epoch_end(void *ctx, const struct uw_target *uw)
{
	(void)uw;
	struct target *t = ctx;
	target_flush(t);
	/* `top` forgets the last seconds with them. */
	tally_clear(&t->tally);
	spell_reset(&t->spell);
}

void target_owner(const struct uw_process_identity *id, uid_t *uid, gid_t *gid)
{
	bool one_user = id->uid[0] == id->uid[1] && id->uid[0] == id->uid[2] &&
	                id->gid[0] == id->gid[1] && id->gid[0] == id->gid[2];
	if (one_user && id->dumpable && id->cap_permitted == 0) {
		*uid = id->uid[0];
		*gid = id->gid[0];
	} else {
		*uid = 0;
		*gid = 0;
	}
}

void target_lower_owner(struct target *t, const struct uw_process_identity *id)
{
	/*
	 * Exec of a setuid or file-capability program keeps the pid and start
	 * time: the user it belonged to may no longer trace it, so it is root's
	 * now.  Never the other way: its history holds what it did as root.
	 * A process that is exiting shows its files as root's for want of
	 * memory, not of rights: it keeps its owner.
	 */
	if (id->exiting)
		return;
	uid_t uid;
	gid_t gid;
	target_owner(id, &uid, &gid);
	if (t->uid != 0 && (uid != t->uid || gid != t->gid)) {
		log_info("pid %d: no longer traceable by uid %d (it gained privileges): root's alone now",
		         (int)t->pid, (int)t->uid);
		t->uid = 0;
		t->gid = 0;
	}
}

struct target *target_open(struct ev_loop *loop, struct schedule *schedule,
                           struct history *history, struct uw_kreader *kreader, struct uw_native *native,
                           struct uw_fd_budget *proc_fds, pid_t pid, struct uw_error *err)
{
	struct uw_process_identity id;
	if (uw_process_identity(pid, &id, err) != 0)
		return NULL;
	struct target *t = calloc(1, sizeof *t);
	if (!t) {
		err->status = UW_ENOMEM;
		snprintf(err->msg, sizeof err->msg, "out of memory");
		return NULL;
	}
	t->loop = loop;
	t->schedule = schedule;
	t->history = history;
	t->kreader = kreader;
	t->native = native;
	t->proc_fds = proc_fds;
	schedule_entry_init(&t->tick, target_on_tick, TARGET_FIRST_COST_S);
	t->pid = pid;
	t->start_time = id.start_time;
	target_owner(&id, &t->uid, &t->gid);
	t->charged_uid = id.uid[0];
	t->state = TARGET_DETACHED;
	spell_init(&t->spell, &target_batch_sink, NULL);
	if (!(t->command_line = target_read_command_line(pid, err))) {
		target_free(t);
		return NULL;
	}
	t->executable = target_read_executable(pid);
	t->timings = calloc(1, sizeof *t->timings);
	if (!t->executable || !t->timings) {
		err->status = UW_ENOMEM;
		snprintf(err->msg, sizeof err->msg, "out of memory");
		target_free(t);
		return NULL;
	}
	t->uw = uw_open(pid, err);
	if (!t->uw) {
		target_free(t);
		return NULL;
	}
	snprintf(t->python_version, sizeof t->python_version, "%s", uw_version(t->uw));
	t->last_used = ev_now(loop);
	return t;
}

void target_params_free(struct target_params *p)
{
	labels_free(&p->labels);
	memset(p, 0, sizeof *p);
}

/* Ticks every interval seconds (> 0), or none. */
static void target_schedule(struct target *t, double interval)
{
	if (interval > 0 && t->uw) {
		if (schedule_add(t->schedule, &t->tick, interval) != 0)
			log_error("pid %d: out of memory scheduling its samples", (int)t->pid);
	} else {
		schedule_remove(t->schedule, &t->tick);
	}
}

/* The unwinder's options from the target's parameters. */
static void target_configure_unwinder(struct target *t)
{
	struct uw_options opts = {.flags = t->params.flags,
	                          .mode = t->params.mode,
	                          .async_mode = t->params.async_mode,
	                          .want_idle = true,
	                          .cache_budget = t->cache_budget,
	                          .max_sample_ns = t->params.max_sample_ns,
	                          .no_write = t->params.no_write,
	                          .provers_off = t->params.provers_off,
	                          /* Watches hold a slot and a perf event each: a detached target gives them back. */
	                          .kreader = t->state == TARGET_SAMPLING ? t->kreader : NULL,
	                          .kreader_uid = t->charged_uid,
	                          .native = t->native,
	                          /* A detached target keeps its files open with its warm state, charged still. */
	                          .fd_budget = t->proc_fds,
	                          .on_epoch_end = target_on_epoch_end,
	                          .epoch_ctx = t};
	context_spec_to_options(&t->params.context, &opts);
	uw_configure(t->uw, &opts);
}

void target_set_max_sample(struct target *t, uint64_t ns)
{
	t->params.max_sample_ns = ns;
	if (t->uw)
		target_configure_unwinder(t);
}

void target_set_cache_budget(struct target *t, size_t bytes)
{
	if (t->cache_budget == bytes)
		return;
	t->cache_budget = bytes;
	if (t->uw)
		target_configure_unwinder(t);
}

void target_start(struct target *t, struct target_params *params)
{
	struct ev_loop *loop = t->loop;
	/* Attached again without labels: the process keeps its labels, and its history under them. */
	if (!params->labels.n) {
		labels_free(&params->labels);
		params->labels = t->params.labels;
		t->params.labels = (struct labels){0};
	}
	target_params_free(&t->params);
	t->params = *params;
	memset(params, 0, sizeof *params);
	t->state = TARGET_SAMPLING;
	target_configure_unwinder(t);
	t->sessions++;
	t->session_samples = 0;
	t->session_start = ev_now(loop);
	t->attached_at = ev_time();
	t->last_used = ev_now(loop);
	memset(t->timings, 0, sizeof *t->timings);
	t->effective_rate_hz = t->params.rate_hz;
	t->rate_lowered_by = NULL;
	target_schedule(t, 1.0 / t->effective_rate_hz);
}

void target_set_rate(struct target *t, unsigned hz)
{
	if (hz == 0 || hz == t->effective_rate_hz)
		return;
	t->effective_rate_hz = hz;
	if (t->state == TARGET_SAMPLING)
		target_schedule(t, 1.0 / hz);
}

void target_stop(struct target *t)
{
	if (t->state == TARGET_SAMPLING)
		t->session_end = ev_now(t->loop);
	target_schedule(t, 0);
	if (t->state == TARGET_SAMPLING) {
		t->state = TARGET_DETACHED;
		if (t->uw)
			target_configure_unwinder(t);
	}
	target_flush(t);
	t->last_used = ev_now(t->loop);
}

/*
 * The process is gone for good: everything but what `list` and `stats`
 * show goes now, its place on the schedule first, rather than when the entry
 * is dropped (minutes later, or past max_targets): short-lived processes
 * must not pile up descriptors and memory.
 */
void target_mark_exited(struct target *t, const char *why)
{
	if (t->state == TARGET_SAMPLING)
		t->session_end = ev_now(t->loop);
	target_schedule(t, 0);
	if (t->timings) {
		target_percentiles(t, &t->final_percentiles);
		free(t->timings);
		t->timings = NULL;
	}
	if (t->state != TARGET_EXITED)
		log_info("pid %d: %s; stopped after %llu samples", (int)t->pid, why,
		         (unsigned long long)t->samples);
	t->state = TARGET_EXITED;
	target_flush(t);
	if (t->uw) {
		uw_stats(t->uw, &t->final_stats);
		uw_close(t->uw);
		t->uw = NULL;
	}
	uw_sample_free(&t->sample);
	tally_free(&t->tally);
	contexts_free(t->contexts);
	t->contexts = NULL;
	spell_free(&t->spell);
	t->last_used = ev_now(t->loop);
}

void target_free(struct target *t)
{
	if (!t)
		return;
	if (t->loop) {
		target_schedule(t, 0);
		/* A target dropped while alive (budget, reused pid) keeps what it counted. */
		target_flush(t);
	}
	if (t->uw)
		uw_close(t->uw);
	uw_sample_free(&t->sample);
	tally_free(&t->tally);
	contexts_free(t->contexts);
	spell_free(&t->spell);
	thread_table_free(&t->threads);
	free(t->timings);
	target_params_free(&t->params);
	free(t->rule);
	free(t->executable);
	free(t->command_line);
	free(t);
}

/*
 * Whether pid still names the process this target was opened on: gone
 * only when /proc says so (no such process, or another one under the
 * pid); unseen, why in *err, when it could not be looked at.  Its owner is
 * read too only while it may yet be lowered (target_lower_owner): for a
 * target already root's the start time is all, one file of /proc, not two
 * (the status file is the costlier to make, and every target is looked at
 * once a second).
 */
static enum target_sight target_look(const struct target *t, struct uw_process_identity *id,
                                     struct uw_error *err)
{
	int looked = t->uid != 0 ? uw_process_identity(t->pid, id, err) : uw_process_started(t->pid, id, err);
	if (looked != 0)
		return err->status == UW_ENOPROC ? TARGET_GONE : TARGET_UNSEEN;
	return id->start_time == t->start_time ? TARGET_SEEN : TARGET_GONE;
}

enum target_sight target_check_alive(struct target *t, struct uw_error *err)
{
	struct uw_error local;
	if (!err)
		err = &local;
	if (t->state == TARGET_EXITED)
		return TARGET_GONE;
	struct uw_process_identity id;
	switch (target_look(t, &id, err)) {
	case TARGET_GONE:
		target_mark_exited(t, "the process exited");
		return TARGET_GONE;
	case TARGET_UNSEEN:
		/* It stays as it was, and is looked at again at the next check. */
		log_warn("pid %d: cannot tell whether the process still runs (%s); trying again", (int)t->pid,
		         err->msg);
		return TARGET_UNSEEN;
	case TARGET_SEEN:
		break;
	}
	target_lower_owner(t, &id);
	return TARGET_SEEN;
}

/*
 * A thread's name as the kernel gives it (any bytes a program wrote to its
 * comm), made UTF-8 within its buffer: U+FFFD for bytes that are not, cut
 * at a whole character, so list, the history and a collector get UTF-8.
 */
static void thread_name_utf8(char name[UW_THREAD_NAME_LEN])
{
	size_t len = strnlen(name, UW_THREAD_NAME_LEN - 1);
	name[len] = '\0';
	if (check_utf8_prefix((const uint8_t *)name, len) == len)
		return;
	char *fixed = export_utf8_copy(name);
	if (!fixed) {
		name[check_utf8_prefix((const uint8_t *)name, len)] = '\0';
		return;
	}
	size_t fixed_len = strlen(fixed);
	size_t keep = check_utf8_prefix((const uint8_t *)fixed,
	                                fixed_len < UW_THREAD_NAME_LEN - 1 ? fixed_len : UW_THREAD_NAME_LEN - 1);
	memcpy(name, fixed, keep);
	name[keep] = '\0';
	free(fixed);
}

/* Threads come in the same order every sample, so the entry at `hint` nearly always is the one. */
struct target_thread *thread_table_note(struct thread_table *tt, uint32_t hint,
                                        const struct uw_sample_thread *th, int64_t second)
{
	struct target_thread *at = NULL;
	if (hint < tt->n && tt->v[hint].thread_id == th->thread_id)
		at = &tt->v[hint];
	for (size_t i = 0; !at && i < tt->n; i++)
		if (tt->v[i].thread_id == th->thread_id)
			at = &tt->v[i];
	if (!at) {
		if (tt->n >= TARGET_THREADS_MAX ||
		    array_reserve((void **)&tt->v, &tt->cap, tt->n, sizeof *tt->v, NULL) != 0)
			return NULL; /* unnamed, counted all the same */
		at = &tt->v[tt->n++];
		*at = (struct target_thread){.thread_id = th->thread_id, .tally_hint = UINT32_MAX};
	}
	at->last_second = second;
	if (at->native_id != th->native_id || memcmp(at->seen_name, th->name, sizeof at->seen_name) != 0) {
		at->native_id = th->native_id;
		memcpy(at->seen_name, th->name, sizeof at->seen_name);
		memcpy(at->name, th->name, sizeof at->name);
		thread_name_utf8(at->name);
		at->declared = false;
	}
	return at;
}

const struct target_thread *thread_table_find(const struct thread_table *tt, uint64_t thread_id)
{
	for (size_t i = 0; i < tt->n; i++)
		if (tt->v[i].thread_id == thread_id)
			return &tt->v[i];
	return NULL;
}

void thread_table_free(struct thread_table *tt)
{
	free(tt->v);
	memset(tt, 0, sizeof *tt);
}

Pyprofd__ThreadInfo *target_thread_to_proto(const struct target_thread *th, struct arena *a)
{
	Pyprofd__ThreadInfo *p = ARENA_MESSAGE(a, Pyprofd__ThreadInfo, PYPROFD__THREAD_INFO__INIT);
	if (!p || !(p->name = arena_strdup(a, th->name)))
		return NULL;
	p->thread_id = th->thread_id;
	p->native_thread_id = th->native_id;
	return p;
}

/* One sample, started at `start` (CLOCK_MONOTONIC seconds, the schedule's clock read). */
static void target_sample(struct target *t, double start)
{
	struct uw_error err, look_err; /* err: uw_sample fills it when it fails, no message cleared per sample */
	struct uw_process_identity id;
	err.status = UW_OK;
	err.msg[0] = '\0';
	int rc = uw_sample(t->uw, &t->sample, &err);
	double cost_s = clock_mono_s() - start;
	timing_add(&t->timings->cost_us, cost_s * 1e6);
	t->sample_seconds += cost_s; /* charged to its user's budget */
	if (rc != 0) {
		/* A failed read may be a process that is gone, or a pid already reused. */
		if (err.status == UW_EGONE || err.status == UW_ENOPROC ||
		    target_look(t, &id, &look_err) == TARGET_GONE) {
			target_mark_exited(t, "the process exited");
			return;
		}
		t->errors++;
		log_debug("pid %d: sample failed: %s", (int)t->pid, err.msg);
		return;
	}
	t->samples++;
	t->session_samples++;
	if (context_spec_on(&t->params.context))
		contexts_poll_process(t->uw, t->pid, start, &t->process_context_polled, t->otel_service,
		                      sizeof t->otel_service);
	int64_t second = (int64_t)floor(ev_now(t->loop));
	for (uint32_t i = 0; i < t->sample.nthreads; i++) {
		const struct uw_sample_thread *th = &t->sample.threads[i];
		if (!th->stack)
			continue; /* no Python frames, or a stack that would not hold still */
		unsigned flags = (th->idle ? TALLY_IDLE : 0) | (th->holds_gil ? TALLY_GIL : 0) |
		                 (th->holds_gil && t->sample.gc_running ? TALLY_GC : 0);
		struct target_thread *named = thread_table_note(&t->threads, i, th, second);
		if (tally_add_hinted(&t->tally, named ? &named->tally_hint : NULL, second, th->thread_id,
		                     th->stack, 1, flags) != 0) {
			log_warn("pid %d: out of memory counting samples", (int)t->pid);
			continue;
		}
		/* Counted apart by request too; past the bound it stays counted above, without one. */
		if (th->context && (t->contexts || (t->contexts = contexts_new())))
			contexts_count(t->contexts, &t->params.context, th->context, second, th->thread_id, th->stack,
			               th->idle);
		t->history_samples++;
	}
}

static void target_on_tick(struct schedule_entry *e, double now, double late_s)
{
	struct target *t = (struct target *)((char *)e - offsetof(struct target, tick));
	timing_add(&t->timings->jitter_us, late_s * 1e6);
	target_sample(t, now);
	if (t->state == TARGET_SAMPLING && t->params.duration_s > 0 &&
	    ev_now(t->loop) - t->session_start >= t->params.duration_s) {
		target_stop(t);
		log_info("pid %d: sampled for %.1f s as asked; state kept warm", (int)t->pid,
		         t->params.duration_s);
	}
}

const char *target_state_name(enum target_state state)
{
	switch (state) {
	case TARGET_SAMPLING: return "sampling";
	case TARGET_DETACHED: return "detached";
	case TARGET_EXITED: return "exited";
	}
	return "unknown";
}

void target_percentiles(const struct target *t, struct target_percentiles *out)
{
	if (!t->timings) {
		*out = t->final_percentiles;
		return;
	}
	out->jitter_us_p50 = timing_percentile(&t->timings->jitter_us, 50);
	out->jitter_us_p99 = timing_percentile(&t->timings->jitter_us, 99);
	out->sample_us_p50 = timing_percentile(&t->timings->cost_us, 50);
	out->sample_us_p99 = timing_percentile(&t->timings->cost_us, 99);
}

size_t target_cache_bytes(const struct target *t)
{
	if (!t->uw)
		return 0;
	struct uw_stats st;
	uw_stats(t->uw, &st);
	return st.cache_bytes;
}

size_t target_count_bytes(const struct target *t)
{
	return tally_bytes(&t->tally) + spell_bytes(&t->spell) + (t->contexts ? contexts_bytes(t->contexts) : 0);
}

/* What it reads of its samples' requests, and what became of them. */
static int target_context_to_proto(const struct target *t, Pyprofd__Target *p, struct arena *a)
{
	const struct context_spec *s = &t->params.context;
	p->context = (char *)(s->otel ? "otel" : "");
	if (s->nlabels) {
		if (!(p->context_labels = arena_alloc(a, s->nlabels * sizeof *p->context_labels)))
			return -1;
		for (uint32_t i = 0; i < s->nlabels; i++)
			if (!(p->context_labels[p->n_context_labels++] = arena_strdup(a, s->labels[i])))
				return -1;
	}
	if (t->contexts) {
		struct contexts_stats st;
		contexts_stats(t->contexts, &st);
		p->context_samples = st.samples;
		p->contexts_cut = st.cut;
		p->context_values_folded = st.folded;
	}
	return 0;
}

Pyprofd__Target *target_to_proto(const struct target *t, struct arena *a)
{
	Pyprofd__Target *p = ARENA_MESSAGE(a, Pyprofd__Target, PYPROFD__TARGET__INIT);
	if (!p)
		return NULL;
	p->pid = t->pid;
	p->start_time = t->start_time;
	p->uid = t->uid;
	p->state = arena_strdup(a, target_state_name(t->state));
	p->python_version = arena_strdup(a, t->python_version);
	p->rate_hz = t->params.rate_hz;
	p->effective_rate_hz = t->state == TARGET_SAMPLING ? t->effective_rate_hz : 0;
	p->rate_lowered_by = (char *)(t->state == TARGET_SAMPLING && t->rate_lowered_by ? t->rate_lowered_by : "");
	p->rule = arena_strdup(a, t->rule ? t->rule : "");
	p->parent = t->parent;
	p->mode = vocab_mode_to_wire(t->params.mode);
	p->async_mode = vocab_async_mode_to_wire(t->params.async_mode);
	if (target_context_to_proto(t, p, a) != 0)
		return NULL;
	p->samples = t->samples;
	p->thread_samples = t->history_samples;
	p->errors = t->errors;
	p->executable = arena_strdup(a, t->executable);
	p->command_line = arena_strdup(a, t->command_line);
	p->attached_at = t->attached_at;
	p->duration_s = t->params.duration_s;
	p->sessions = t->sessions;
	if (t->params.labels.n) {
		p->labels = arena_alloc(a, t->params.labels.n * sizeof *p->labels);
		if (!p->labels)
			return NULL;
		for (size_t i = 0; i < t->params.labels.n; i++) {
			Pyprofd__Label *l = ARENA_MESSAGE(a, Pyprofd__Label, PYPROFD__LABEL__INIT);
			if (!l)
				return NULL;
			l->key = arena_strdup(a, t->params.labels.keys[i]);
			l->value = arena_strdup(a, t->params.labels.values[i]);
			p->labels[p->n_labels++] = l;
		}
	}
	if (t->threads.n) {
		p->threads = arena_alloc(a, t->threads.n * sizeof *p->threads);
		if (!p->threads)
			return NULL;
		for (size_t i = 0; i < t->threads.n; i++)
			if (!(p->threads[p->n_threads++] = target_thread_to_proto(&t->threads.v[i], a)))
				return NULL;
	}
	if (!p->state || !p->python_version || !p->executable || !p->command_line || !p->rule)
		return NULL;
	return p;
}
