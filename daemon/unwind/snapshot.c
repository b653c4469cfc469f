/* Whole snapshots for dumps: every thread's stack spelled out, and the tasks apart. */
#include <stdlib.h>
#include <string.h>

#include "kernel/kernel.h"
#include "native.h"
#include "unwind_internal.h"

/* A dump wants every thread: a moving one gets this many reads. */
#define SNAPSHOT_THREAD_ATTEMPTS 12
/*
 * Samples a dump of tasks takes at most for one where no task began
 * running after its thread was read (tasks.c's tasks_moved): such a task's
 * frames are known of no moment, and a dump shows the running task's.
 */
#define SNAPSHOT_TASK_ATTEMPTS 16

/*
 * The waiting threads' registers and stacks, copied by the kernel between
 * the sample that found the threads and the sample taken for the
 * snapshot, then looked at once more: a thread off its CPU from the copy to
 * the look, its switch count unchanged, ran nothing in between, so its
 * copy and its Python frames are of one moment (kernel/knative.c).  The
 * copy's answers, or NULL (no copier, none asked, the kernel refused).
 */
static const struct knative_thread *snapshot_copy(struct uw_target *t, struct knative *kn,
                                                  const struct uw_sample *s, uint32_t *ncopied)
{
	struct knative_ask asks[KNATIVE_THREADS];
	uint32_t n = 0;
	*ncopied = 0;
	/* The kernel finds threads by the ids of its own namespace, not those of a nested one. */
	if (!kn || t->pid_namespace_nested)
		return NULL;
	for (uint32_t i = 0; i < s->nthreads && n < KNATIVE_THREADS; i++)
		if (s->threads[i].native_id > 0 && !s->threads[i].moving)
			asks[n++] = (struct knative_ask){.pid = t->pid, .tid = (pid_t)s->threads[i].native_id};
	*ncopied = n;
	return n ? knative_run(kn, KNATIVE_COPY, asks, n) : NULL;
}

/* The copy of a thread that holds, by its id: NULL when it ran, or was not copied. */
static const struct knative_thread *snapshot_copy_of(const struct knative_thread *copies, uint32_t n,
                                                     int64_t tid)
{
	for (uint32_t i = 0; copies && i < n; i++)
		if (copies[i].tid == tid)
			return copies[i].status == KNATIVE_COPIED && copies[i].look_status == KNATIVE_STILL &&
			               copies[i].look_switches == copies[i].switches
			       ? &copies[i]
			       : NULL;
	return NULL;
}

/* The cache of the thread read this sample with kernel id tid, NULL when none. */
static const struct thread_cache *snapshot_cache_of(const struct uw_target *t, int64_t tid)
{
	for (uint32_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].seen == t->sample_gen && t->threads[i].own_tid == tid)
			return &t->threads[i];
	return NULL;
}

/* A thread's frames: as read, or with its C frames in place when its copy holds. */
static int snapshot_frames(struct uw_target *t, const struct uw_sample_thread *st,
                           const struct knative_thread *copy, struct uw_thread *th, struct uw_error *err)
{
	/* Unreadable: its one frame says only that; the snapshot's flag says it plainly. */
	uint32_t depth = st->moving ? 0 : uw_stack_depth(t, st->stack);
	uint32_t room = depth + (copy ? NATIVE_MAX_FRAMES + 1 : 0);
	uint32_t *ids = calloc(2 * (size_t)depth + room + 1, sizeof *ids);
	struct native_frame *c = copy ? calloc(NATIVE_MAX_FRAMES, sizeof *c) : NULL;
	th->frames = calloc(room ? room : 1, sizeof *th->frames);
	if (!ids || (copy && !c) || !th->frames) {
		free(ids);
		free(c);
		return uw_fail(err, UW_ENOMEM, "out of memory");
	}
	uint32_t npy = 0, n;
	for (uint32_t stack = st->stack; stack && npy < depth; stack = uw_stack_parent(t, stack))
		ids[npy++] = uw_stack_frame(t, stack);
	const uint32_t *shown = ids;
	n = npy;
	uint32_t nc;
	enum native_end end;
	if (copy) {
		if (native_walk(t, copy, c, &nc, &end, err) != 0) {
			free(ids);
			free(c);
			return -1;
		}
		const struct thread_cache *tc = snapshot_cache_of(t, st->native_id);
		if (t->version_hex >= 0x030c0000 && !(tc && native_find_evals(t, tc, copy, c, nc)))
			nc = 0;
		uint32_t *spliced = ids + npy, *starts = spliced + room;
		n = native_splice(t, ids, npy, c, nc, end, starts, spliced);
		shown = spliced;
	}
	for (uint32_t i = 0; i < n; i++)
		th->frames[th->nframes++] = *uw_frame_get(t, shown[i]);
	free(ids);
	free(c);
	return 0;
}

int uw_snapshot(struct uw_target *t, unsigned flags, struct uw_snapshot *out,
                struct uw_error *err)
{
	memset(out, 0, sizeof *out);
	struct uw_options saved = t->opts;
	t->opts.flags |= flags;
	t->opts.mode = UW_MODE_WALL;
	t->opts.want_on_cpu = true;
	t->opts.want_idle = true;
	/* A dump shows threads as they are and, when asked, the tasks apart (uw_snapshot.tasks). */
	t->opts.async_mode = UW_ASYNC_OFF;
	if (flags & UW_SNAP_TASKS)
		t->opts.max_tasks = UW_MAX_TASKS;
	/* A dump wants every thread: give a moving one more chances. */
	t->thread_attempts = SNAPSHOT_THREAD_ATTEMPTS;
	struct uw_sample s = {0};
	int rc = uw_sample(t, &s, err);
	for (int attempt = 1; rc == 0 && s.tasks_moved && attempt < SNAPSHOT_TASK_ATTEMPTS; attempt++)
		rc = uw_sample(t, &s, err);
	struct knative *kn = (flags & UW_SNAP_NATIVE) ? native_copier(t->opts.native) : NULL;
	uint32_t ncopied = 0;
	const struct knative_thread *copies = rc == 0 ? snapshot_copy(t, kn, &s, &ncopied) : NULL;
	if (copies) {
		rc = uw_sample(t, &s, err);
		if (rc == 0 && !knative_run(kn, KNATIVE_LOOK, NULL, ncopied))
			copies = NULL;
	}
	t->opts = saved;
	t->thread_attempts = 0;
	/* A thread read as garbage makes the snapshot fail; one that kept moving is shown as such. */
	if (rc == 0 && s.dropped_threads) {
		if (err)
			*err = s.drop_reason;
		rc = -1;
	}
	/* A dump shows every thread or none: one cut short would look whole. */
	if (rc == 0 && s.cut)
		rc = uw_fail(err, UW_ECORRUPT, "reading every thread took longer than %.1f ms; cut short after %u",
		             (double)t->opts.max_sample_ns / 1e6, s.nthreads);
	if (rc != 0) {
		uw_sample_free(&s);
		return -1;
	}
	out->gc_running = s.gc_running;
	out->tasks_cut = s.tasks_cut;
	out->tasks_error = s.tasks_error;
	if ((flags & UW_SNAP_TASKS) && tasks_snapshot(t, out, err) != 0) {
		uw_sample_free(&s);
		uw_snapshot_release(out);
		return -1;
	}
	out->threads = calloc(s.nthreads ? s.nthreads : 1, sizeof *out->threads);
	if (!out->threads) {
		uw_sample_free(&s);
		return uw_fail(err, UW_ENOMEM, "out of memory");
	}
	for (uint32_t i = 0; i < s.nthreads; i++) {
		const struct uw_sample_thread *st = &s.threads[i];
		struct uw_thread *th = &out->threads[out->nthreads++];
		*th = (struct uw_thread){.thread_id = st->thread_id,
		                         .native_id = st->native_id,
		                         .interp_id = st->interp_id,
		                         .holds_gil = st->holds_gil,
		                         .on_cpu = st->on_cpu,
		                         .idle = st->idle,
		                         .truncated = st->truncated,
		                         .unreadable = st->moving};
		memcpy(th->name, st->name, sizeof th->name);
		const struct knative_thread *copy = st->moving ? NULL : snapshot_copy_of(copies, ncopied, st->native_id);
		if (snapshot_frames(t, st, copy, th, err) != 0) {
			uw_sample_free(&s);
			uw_snapshot_release(out);
			return -1;
		}
	}
	uw_sample_free(&s);
	return 0;
}

void uw_snapshot_release(struct uw_snapshot *snap)
{
	for (uint32_t i = 0; i < snap->nthreads; i++)
		free(snap->threads[i].frames);
	free(snap->threads);
	for (uint32_t i = 0; i < snap->ntasks; i++)
		free(snap->tasks[i].frames);
	free(snap->tasks);
	memset(snap, 0, sizeof *snap);
}
