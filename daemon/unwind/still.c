/*
 * A whole process that ran nothing since its last sample: the kernel's
 * word for it, and the sample kept to answer with meanwhile.
 *
 * A process whose threads all sleep (a service between requests, a worker
 * parked on its queue, a deep stack waiting on a lock) has the stacks it had
 * at its last sample, however deep, however many.  When the kernel proves
 * that none of its threads was put on a CPU since that sample's memory was
 * read, the sample is answered from the one kept, reading no remote memory
 * at all: one small read of /proc a thread, where a walk pins a page for
 * each interpreter, thread state and innermost frame.
 *
 * The argument.  /proc/PID/task/TID/schedstat holds three numbers: the
 * thread's run time, its time waiting on a run queue, and the times it was
 * put on a CPU (the scheduler adds one each time it switches to the thread
 * after it was queued, sched_info_arrive).  /proc/PID/task/TID/wchan names a
 * function only while the thread sleeps off every run queue (see
 * threads_still_begin).  For each sample that arms the proof, in order:
 *
 *   L0. the process's tasks are listed
 *   a.  each task's schedstat line is read      (in turn, for every task)
 *   b.  its wchan shows it off every run queue  (just after its a)
 *   L1. the tasks are listed again: the same tasks
 *   c.  the process's memory is read whole      (the sample)
 *
 * and at a later sample:
 *
 *   e.  every task's schedstat line reads as at its a
 *
 * A task off its queues at b runs again only once woken (queued) and
 * switched to, which adds to its count after b, so after a: e would differ.
 * So no task of L1 ran between its b and e, all of them from L1 on.  A task
 * is only made by one of its process running (clone), so none was made
 * after L1 either: from L1 to e nothing of the process ran an instruction,
 * and its memory is as c read it, but for what other processes write into
 * it (another profiler's frame-cache marker, which is not a stack).  The run
 * time alone would not do: a thread put on a CPU a moment ago has had none
 * of it counted yet.  A kernel that keeps no counts ("0 0 0") or names no
 * wchan proves nothing, and the memory is read as ever.
 *
 * What it costs when it fails: a process with a thread that runs now and
 * then fails the check at that thread (a read or two), then arms again (two
 * reads a thread and two listings, about what a sample of a few threads
 * costs).  An arming that did not answer STILL_PROOFS_WORTH samples doubles
 * the samples before the next, up to STILL_BACKOFF_MAX, so a process that
 * is seldom still for long pays a fraction of a microsecond a sample for it.
 *
 * With the kernel's look (kstill.c) the same facts come for every task at
 * once, at no cost of their own: the look is taken for the threads anyway.
 * The process is watched; each look lists its tasks, the kernel's own list,
 * each with its count of switches away and whether it is on a CPU.  Armed
 * when the look before a sample's read saw every task off its CPU (a
 * process of up to KSTILL_TASKS), the proof holds at a later look that
 * lists the very same tasks, off their CPUs, with the very same counts:
 * none ran (kstill.c), none was made, none ended.  Nothing is read of
 * /proc, and nothing backs off.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

static void still_task_close(struct uw_target *t, struct still_task *k)
{
	sched_files_close(t, &k->files);
	k->run_len = 0;
}

struct kstill *still_look(struct uw_target *t)
{
	struct kstill *ks = t->opts.no_cache ? NULL : kread_still(t->opts.kreader);
	if (!ks || (kstill_looks(ks) == t->kstill_looked && !kstill_look(ks)))
		return NULL;
	t->kstill_looked = kstill_looks(ks);
	return ks;
}

static void still_forget(struct process_still *ps)
{
	ps->valid = ps->armed = false;
}

void still_free(struct uw_target *t)
{
	struct process_still *ps = &t->still;
	for (uint32_t i = 0; i < ps->ntasks; i++)
		still_task_close(t, &ps->tasks[i]);
	ps->ntasks = 0;
	if (ps->look_proc >= 0)
		kstill_unwatch(kread_still(t->opts.kreader), ps->look_proc);
	ps->look_proc = -1;
	kcopy_release(kread_copier(t->opts.kreader), ps->copy_slot);
	ps->copy_slot = -1;
	ps->copy_generation = 0;
	ps->copy_sampled_ns = ps->copy_interval_ns = ps->copy_quiet_seen = ps->copy_quiet_x256 = 0;
	ps->copy_switches_x256 = ps->copy_switches_seen = ps->copy_paused_ns = 0;
	ps->copy_tasks_seen = 0;
	ps->look_start = 0;
	if (ps->task_dir) {
		closedir(ps->task_dir);
		proc_fds_add(t, -1);
	}
	ps->task_dir = NULL;
	free(ps->kept.threads);
	ps->kept.threads = NULL;
	ps->kept.cap = 0;
	free(ps->kept_contexts);
	ps->kept_contexts = NULL;
	ps->kept_contexts_cap = 0;
	still_forget(ps);
}

/* A sample read whole (nothing cut or left out) into dst, its room kept; 0 or -1. */
static int still_copy(struct uw_sample *dst, const struct uw_sample *src)
{
	if (src->nthreads &&
	    array_reserve((void **)&dst->threads, &dst->cap, src->nthreads - 1, sizeof *dst->threads,
	                  NULL) != 0)
		return -1;
	if (src->nthreads)
		memcpy(dst->threads, src->threads, src->nthreads * sizeof *dst->threads);
	dst->nthreads = src->nthreads;
	dst->gc_running = src->gc_running;
	dst->dropped_threads = 0;
	dst->cut = false;
	dst->tasks = src->tasks;
	dst->tasks_cut = src->tasks_cut;
	dst->tasks_error = src->tasks_error;
	dst->tasks_moved = src->tasks_moved;
	return 0;
}

/* The options a kept sample answers for: anything else and it is not the sample asked for. */
static bool still_same_options(const struct uw_options *a, const struct uw_options *b)
{
	return a->flags == b->flags && a->mode == b->mode && a->async_mode == b->async_mode &&
	       a->max_tasks == b->max_tasks && a->want_idle == b->want_idle &&
	       a->context_otel == b->context_otel && a->ncontext_labels == b->ncontext_labels &&
	       memcmp(a->context_labels, b->context_labels, sizeof a->context_labels) == 0;
}

/*
 * Whether the process may be proven so: a thread's state letter (on_cpu)
 * is the kernel's now, not a sample's, so modes that report it are left
 * out, as is a sampler with its caches off.
 */
static bool still_applies(const struct uw_target *t)
{
	return !t->opts.no_cache && !t->opts.want_on_cpu && t->opts.mode != UW_MODE_CPU;
}

/*
 * The process's task ids, sorted, into tids (at most max): their count,
 * max + 1 when there are more, -1 when they could not be listed.  Not
 * proc_tasks: that opens the directory anew, a buffer libc allocates at
 * every arming, where a sample that knows its stacks allocates nothing.
 */
static int still_list(struct uw_target *t, pid_t *tids, int max)
{
	struct process_still *ps = &t->still;
	if (!ps->task_dir) {
		if (!proc_fds_room(t, 1))
			return -1;
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/task", (int)t->pid);
		if (!(ps->task_dir = opendir(path)))
			return -1;
		proc_fds_add(t, 1);
	} else {
		rewinddir(ps->task_dir);
	}
	int n = 0;
	const struct dirent *de;
	/* Bounded: the kernel lists each task once, and past max the answer is known. */
	while ((de = readdir(ps->task_dir)) != NULL) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);
		if (*end != '\0' || tid <= 0)
			continue;
		if (n == max)
			return max + 1;
		/* Kept sorted: two listings are compared entry by entry. */
		int k = n++;
		for (; k > 0 && tids[k - 1] > tid; k--)
			tids[k] = tids[k - 1];
		tids[k] = (pid_t)tid;
	}
	return n;
}

/* The next arming waits a doubling number of samples: the process was not still. */
static void still_back_off(struct process_still *ps)
{
	ps->backoff = ps->backoff ? ps->backoff * 2 : 1;
	if (ps->backoff > STILL_BACKOFF_MAX)
		ps->backoff = STILL_BACKOFF_MAX;
	ps->skip = ps->backoff;
}

/* Keep the tasks of tids (sorted), their files carried over where the task was kept before. */
static void still_take_tasks(struct uw_target *t, const pid_t *tids, uint32_t n)
{
	struct process_still *ps = &t->still;
	struct still_task next[STILL_TASKS_MAX];
	uint32_t j = 0;
	for (uint32_t i = 0; i < n; i++) {
		while (j < ps->ntasks && ps->tasks[j].tid < tids[i])
			still_task_close(t, &ps->tasks[j++]);
		if (j < ps->ntasks && ps->tasks[j].tid == tids[i])
			next[i] = ps->tasks[j++];
		else
			next[i] = (struct still_task){.tid = tids[i], .files = SCHED_FILES_NONE};
	}
	while (j < ps->ntasks)
		still_task_close(t, &ps->tasks[j++]);
	memcpy(ps->tasks, next, n * sizeof *next);
	ps->ntasks = n;
}

/*
 * The tasks this sample's look saw of the process (*n of them), NULL when
 * it saw none, or saw a process that began at another time than the one
 * first found under its pid.
 */
static const struct kstill_task *still_looked_tasks(struct uw_target *t, uint32_t *n)
{
	struct process_still *ps = &t->still;
	uint64_t start;
	const struct kstill_task *tasks = kstill_seen(t->look, ps->look_proc, n, &start);
	if (tasks && !ps->look_start)
		ps->look_start = start;
	return tasks && start == ps->look_start ? tasks : NULL;
}

/* The look lists the very tasks the arming look did, off their CPUs, with the very same counts: none ran. */
static bool still_looked_same(struct uw_target *t)
{
	const struct process_still *ps = &t->still;
	uint32_t n;
	const struct kstill_task *tasks = still_looked_tasks(t, &n);
	if (!tasks || n != ps->nlooked || n == 0)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		const struct still_seen *was = &ps->looked[i];
		if (tasks[i].state == KSTILL_RUNS || tasks[i].tid != was->tid ||
		    tasks[i].switches != was->switches || tasks[i].start_ns != was->start_ns)
			return false;
	}
	return true;
}

/*
 * The look's arming: every task of the process off its CPU.  The
 * process is watched from its first sample on, whether or not the proof
 * applies to it (the threads' proofs take their looks from it too).
 */
static void still_arm_looked(struct uw_target *t)
{
	struct process_still *ps = &t->still;
	if (ps->look_proc < 0) {
		/* Looked at from the next look on. */
		ps->look_proc = kstill_watch(t->look, t->pid);
		return;
	}
	uint32_t n;
	const struct kstill_task *tasks = still_looked_tasks(t, &n);
	if (!tasks || n == 0 || n > KSTILL_TASKS || !still_applies(t))
		return;
	for (uint32_t i = 0; i < n; i++) {
		if (tasks[i].state == KSTILL_RUNS)
			return;
		ps->looked[i] = (struct still_seen){.tid = tasks[i].tid, .switches = tasks[i].switches,
		                                    .start_ns = tasks[i].start_ns};
	}
	ps->nlooked = n;
	ps->armed = ps->by_look = true;
}

const struct kstill_task *still_tasks(struct uw_target *t, uint32_t *n)
{
	*n = 0;
	if (!t->look || t->still.look_proc < 0)
		return NULL;
	return still_looked_tasks(t, n);
}

const struct kstill_task *still_task_seen(struct uw_target *t, pid_t tid, uint32_t *hint)
{
	const struct process_still *ps = &t->still;
	if (!t->look || ps->look_proc < 0)
		return NULL;
	uint32_t n;
	const struct kstill_task *tasks = still_looked_tasks(t, &n);
	if (!tasks)
		return NULL;
	if (n > KSTILL_TASKS)
		n = KSTILL_TASKS;
	/* Threads are met in the same order every sample: the hint nearly always holds. */
	if (*hint < n && tasks[*hint].tid == tid)
		return &tasks[*hint];
	for (uint32_t i = 0; i < n; i++)
		if (tasks[i].tid == tid) {
			*hint = i;
			return &tasks[i];
		}
	return NULL;
}

bool still_sample(struct uw_target *t, struct uw_sample *s)
{
	struct process_still *ps = &t->still;
	if (!ps->valid)
		return false;
	if (!still_applies(t) || ps->epoch != t->epoch || !still_same_options(&ps->opts, &t->opts)) {
		still_forget(ps);
		return false;
	}
	/* Proven by the look, only the look proves it again; by /proc, only /proc. */
	if (ps->by_look != (t->look != NULL) || (t->look && !still_looked_same(t))) {
		still_forget(ps);
		return false;
	}
	for (uint32_t i = 0; i < ps->ntasks && !t->look; i++) {
		struct still_task *k = &ps->tasks[i];
		char run[PROC_SCHED_LINE];
		uint32_t len = proc_sched_line(k->files.sched_fd, run);        /* e */
		if (!len || len != k->run_len || memcmp(run, k->run, len) != 0) {
			/* It ran.  An arming that paid for itself is tried again at once. */
			if (ps->proofs < STILL_PROOFS_WORTH)
				still_back_off(ps);
			else
				ps->backoff = 0;
			still_forget(ps);
			return false;
		}
	}
	const struct uw_sample *kept = &ps->kept;
	if (still_copy(s, kept) != 0)
		return false;
	t->stats.process_still++;
	t->stats.thread_samples += kept->nthreads;
	t->stats.steady_hits += kept->nthreads;
	t->stats.frame_cache_full_hits += ps->kept_stacks;
	t->stats.frames_from_cache += ps->kept_frames;
	ps->proofs++;
	return true;
}

void still_arm(struct uw_target *t)
{
	struct process_still *ps = &t->still;
	still_forget(ps);
	if (t->look) {
		still_arm_looked(t);
		return;
	}
	ps->by_look = false;
	if (!still_applies(t))
		return;
	if (ps->skip) {
		ps->skip--;
		return;
	}
	pid_t tids[STILL_TASKS_MAX], again[STILL_TASKS_MAX];
	int n = still_list(t, tids, STILL_TASKS_MAX);                /* L0 */
	if (n <= 0 || n > STILL_TASKS_MAX) {
		/* Too many threads to be worth it (or no listing): look again after the longest wait. */
		ps->backoff = ps->skip = STILL_BACKOFF_MAX;
		return;
	}
	still_take_tasks(t, tids, (uint32_t)n);
	for (uint32_t i = 0; i < ps->ntasks; i++) {
		struct still_task *k = &ps->tasks[i];
		/* A task that ended since the listing: the process is not still. */
		if (!sched_files_open(t, &k->files, k->tid)) {
			still_back_off(ps);
			return;
		}
		k->run_len = proc_sched_line(k->files.sched_fd, k->run);     /* a */
		if (!proc_sched_line_counts(k->run, k->run_len)) {
			ps->backoff = ps->skip = STILL_BACKOFF_MAX;
			return;
		}
		if (!sched_files_off(&k->files)) {                      /* b */
			still_back_off(ps);
			return;
		}
	}
	if (still_list(t, again, STILL_TASKS_MAX) != n ||            /* L1 */
	    memcmp(again, tids, (size_t)n * sizeof *tids) != 0) {
		still_back_off(ps);
		return;
	}
	ps->armed = true;
}

void still_keep(struct uw_target *t, const struct uw_sample *s)
{
	struct process_still *ps = &t->still;
	if (!ps->armed)
		return;
	ps->armed = false;
	/* Only a sample read whole (c) stands for the process: nothing left out, nothing moving. */
	if (s->cut || s->dropped_threads || s->tasks_cut || s->tasks_moved || s->tasks_error.status != UW_OK)
		return;
	uint64_t frames = 0, stacks = 0;
	for (uint32_t i = 0; i < s->nthreads; i++) {
		if (s->threads[i].moving)
			return;
	}
	for (uint32_t i = 0; i < t->nthreads; i++) {
		if (t->threads[i].seen != t->sample_gen)
			continue;
		frames += t->threads[i].n;
		stacks += t->threads[i].n > 0;
	}
	if (still_copy(&ps->kept, s) != 0)
		return;
	/*
	 * The threads' contexts are the reader's, written again by the next
	 * sample (a parked task's slot may hold another's then): the kept
	 * sample holds copies of its own.
	 */
	uint32_t with = 0;
	for (uint32_t i = 0; i < s->nthreads; i++)
		with += s->threads[i].context != NULL;
	if (with && array_reserve((void **)&ps->kept_contexts, &ps->kept_contexts_cap, with - 1,
	                          sizeof *ps->kept_contexts, NULL) != 0)
		return;
	with = 0;
	for (uint32_t i = 0; i < s->nthreads; i++)
		if (s->threads[i].context) {
			ps->kept_contexts[with] = *s->threads[i].context;
			ps->kept.threads[i].context = &ps->kept_contexts[with++];
		}
	ps->kept_frames = frames;
	ps->kept_stacks = stacks;
	ps->epoch = t->epoch;
	ps->opts = t->opts;
	ps->proofs = 0;
	ps->valid = true;
}
