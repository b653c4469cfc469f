/* Whole snapshots for dumps: every thread's stack spelled out, and the tasks apart. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernel/kshot_abi.h"
#include "unwind_internal.h"

/* A dump wants every thread: a moving one gets this many reads. */
#define SNAPSHOT_THREAD_ATTEMPTS 12
/*
 * Samples a dump of tasks takes at most for one where no task began
 * running after its thread was read (tasks.c's tasks_moved): such a task's
 * frames are known of no moment, and a dump shows the running task's.
 */
#define SNAPSHOT_TASK_ATTEMPTS 16
/* Samples more a dump with C frames takes at most for running threads' shots. */
#define SNAPSHOT_NATIVE_SHOTS 4

/* A thread's frames, outermost last. */
static int snapshot_frames(struct uw_target *t, const struct uw_sample_thread *st, struct uw_thread *th,
                           struct uw_error *err)
{
	/* Unreadable: its one frame says only that; the snapshot's flag says it plainly. */
	uint32_t depth = st->moving ? 0 : uw_stack_depth(t, st->stack);
	th->frames = calloc(depth ? depth : 1, sizeof *th->frames);
	if (!th->frames)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	for (uint32_t stack = st->stack; stack && th->nframes < depth; stack = uw_stack_parent(t, stack))
		th->frames[th->nframes++] = *uw_frame_get(t, uw_stack_frame(t, stack));
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
	/*
	 * C frames are copied only of threads the kernel looked at before the
	 * walk, which are those a sample met: the first one meets them, the
	 * next copies them.
	 */
	if (rc == 0 && (flags & UW_SNAP_NATIVE) && t->opts.native) {
		/*
		 * A thread that ran at the look is shot as it runs from then on
		 * (kshot.c): a few samples more, a few shots apart, give it one
		 * whose Python frames are the walk's.
		 */
		for (int again = 0; rc == 0 && again <= SNAPSHOT_NATIVE_SHOTS; again++) {
			uint64_t unshot = t->stats.native_shot_late + t->stats.native_shot_missed;
			if (again) {
				struct timespec apart = {0, 2 * (long)KSHOT_PERIOD_NS};
				nanosleep(&apart, NULL);
			}
			rc = uw_sample(t, &s, err);
			if (t->stats.native_shot_late + t->stats.native_shot_missed == unshot)
				break;
		}
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
		if (snapshot_frames(t, st, th, err) != 0) {
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
