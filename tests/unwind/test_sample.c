/*
 * The sampling engine against real interpreters: the caches never change an
 * answer, and they stay inside their budget however many code objects a
 * target makes.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "kstill_abi.h"
#include "pythons.h"
#include "unwind.h"
#include "uw_open.h"

/* How long the callgraph target is sampled at most, waiting to see all it is about. */
#define CALLGRAPH_SAMPLING_MAX_S 30

TestSuite(sample, .init = helpers_init, .fini = helpers_fini);

/* Every thread's stack spelled out, one line per thread, sorted: comparable across samples. */
static char *sample_text(const struct uw_target *t, const struct uw_sample *s)
{
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	cr_assert_not_null(out);
	out[0] = '\0';
	for (uint32_t i = 0; i < s->nthreads; i++) {
		char line[1 << 14];
		int n = snprintf(line, sizeof line, "%llu:", (unsigned long long)s->threads[i].thread_id);
		for (uint32_t st = s->threads[i].stack; st && n < (int)sizeof line - 256;
		     st = uw_stack_parent(t, st)) {
			const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, st));
			n += snprintf(line + n, sizeof line - (size_t)n, " %s@%s:%d", f->function,
			              f->file ? f->file : "-", f->line);
		}
		if (len + (size_t)n + 2 > cap) {
			cap = (cap + (size_t)n) * 2;
			out = realloc(out, cap);
			cr_assert_not_null(out);
		}
		memcpy(out + len, line, (size_t)n);
		len += (size_t)n;
		out[len++] = '\n';
		out[len] = '\0';
	}
	return out;
}

/* A blocked target gives the same stacks with every cache on as with every cache off. */
Test(sample, frozen_cache_identical, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		static const char *const scenarios[] = {"threads20", "recursion", "coroutines"};
		for (size_t k = 0; k < sizeof scenarios / sizeof scenarios[0]; k++) {
			struct test_target target;
			test_target_start(&target, &pys[i], scenarios[k]);
			json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
			struct uw_target *t = test_uw_open(target.pid);

			struct uw_sample s = {0};
			struct uw_error err = {0};
			char *reference = NULL;
			struct uw_options cached = {.flags = UW_SNAP_NATIVE, .cache_budget = 0};
			struct uw_options uncached = {.flags = UW_SNAP_NATIVE, .no_cache = true};
			/* 3.15: with the frame-cache marker written, and without (proven as 3.14's). */
			struct uw_options unwritten = {.flags = UW_SNAP_NATIVE, .no_write = true};
			const struct uw_options *rounds[] = {&cached, &cached, &uncached, &unwritten, &unwritten};
			for (int round = 0; round < 60; round++) {
				uw_configure(t, rounds[round % 5]);
				cr_assert_eq(uw_sample(t, &s, &err), 0, "%s %s: sample: %s", pys[i].path,
				             scenarios[k], err.msg);
				cr_assert_eq(s.dropped_threads, 0);
				for (uint32_t th = 0; th < s.nthreads; th++)
					cr_assert(!s.threads[th].moving, "%s %s: a blocked stack moved",
					          pys[i].path, scenarios[k]);
				char *text = sample_text(t, &s);
				if (!reference)
					reference = text;
				else {
					cr_assert_str_eq(text, reference, "%s %s: round %d (%s) differs",
					                 pys[i].path, scenarios[k], round,
					                 rounds[round % 5] == &uncached    ? "no cache"
					                 : rounds[round % 5] == &unwritten ? "cache, no marker"
					                                                   : "cache");
					free(text);
				}
			}
			struct uw_stats st;
			uw_stats(t, &st);
			/* The cached rounds really were served from the caches. */
			cr_assert_gt(st.frame_cache_full_hits, 0, "%s %s", pys[i].path, scenarios[k]);
			cr_assert_gt(st.frames_from_cache, 0, "%s %s", pys[i].path, scenarios[k]);
			/* 3.15's marker was written, and stacks taken from it. */
			if (pys[i].minor >= 15) {
				cr_assert_gt(st.marker_written, 0, "%s %s", pys[i].path, scenarios[k]);
				cr_assert_gt(st.marker_honoured, 0, "%s %s", pys[i].path, scenarios[k]);
			} else {
				cr_assert_eq(st.marker_written, 0, "%s %s", pys[i].path, scenarios[k]);
			}
			free(reference);
			uw_sample_free(&s);
			uw_close(t);
			test_target_kill(&target);
		}
	}
}

static bool file_exists(const char *path)
{
	struct stat sb;
	return stat(path, &sb) == 0;
}

/* Samples taken at most while waiting for a sleeping deep stack to be taken without its frames. */
#define MOVE_SAMPLES_TO_PROVE 400
/*
 * Samples at least before the process's own proof is judged beside a busy
 * thread: the thread's proof can come within five, too few for a share.
 */
#define MOVE_SAMPLES_JUDGED 100
/* Samples after the move that must all show the new stack. */
#define MOVE_SAMPLES_AFTER 100

/*
 * The in-kernel reader with its look at which threads ran (kstill.c), or
 * NULL when the kernel refuses the look (before Linux 6.7), which is said.
 * As root the reader itself must load.
 */
static struct uw_kreader *look_reader(void)
{
	struct uw_error err = {0};
	struct uw_kreader *kr = uw_kreader_open(&err);
	cr_assert(kr || geteuid() != 0, "the in-kernel reader, as root: %s", err.msg);
	if (kr && uw_kreader_look_refused(kr)) {
		cr_log_info("%s", uw_kreader_look_refused(kr));
		uw_kreader_close(kr);
		kr = NULL;
	}
	return kr;
}

/* How a stack that stood still was taken without its frames being read. */
enum still_proof {
	PROOF_PROCESS, /* no thread of the process ran (process_still) */
	PROOF_THREAD,  /* the thread ran nothing (still_proven, 3.8-3.14) or kept its marker (3.15) */
};

static bool proof_seen(const struct python *py, const struct uw_stats *st, enum still_proof proof)
{
	if (proof == PROOF_PROCESS)
		return st->process_still > 0;
	/* 3.15 without the kernel's look: the marker. */
	return st->still_proven > 0 || (py->minor >= 15 && st->marker_honoured > 0);
}

/*
 * Wakes the target of scenario: SIGUSR1, or for move_spin a byte into its
 * FIFO (the thread alone wakes).  A descriptor to wait on for move_spin's
 * answer (-1 for the others, which write REPORT.moved).
 */
static int deep_stack_wake(const struct test_target *target, const char *scenario)
{
	if (strcmp(scenario, "move_spin") != 0) {
		cr_assert_eq(kill(target->pid, SIGUSR1), 0);
		return -1;
	}
	char path[PATH_MAX + 8];
	snprintf(path, sizeof path, "%s.ack", target->report);
	int ack = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	cr_assert_geq(ack, 0, "%s: %m", path);
	snprintf(path, sizeof path, "%s.fifo", target->report);
	int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	cr_assert_geq(fd, 0, "%s: %m", path);
	cr_assert_eq(write(fd, "x", 1), 1, "%s: %m", path);
	close(fd);
	return ack;
}

/* Whether the woken thread said it moved on. */
static bool deep_stack_moved(int ack, const char *moved)
{
	char byte;
	return ack >= 0 ? read(ack, &byte, 1) == 1 : file_exists(moved);
}

/*
 * A thread that sleeps 600 frames deep is taken from the caches without its
 * frames being read; woken, it goes on at the next line of the same frame,
 * every frame where it was.  From the moment it says so, no sample shows it
 * on the old line.  Alone in a process that sleeps, the kernel proves that
 * nothing of the process ran (scenario move; move_spin, whose thread wakes
 * alone and runs on without ever leaving its CPU, so no run time of it is
 * counted until the next tick: only the count of times it was put on a CPU
 * tells); beside a thread that wakes every 2 ms, only the thread's own
 * proof can hold (move_busy).  looked: the proofs are the kernel's look
 * (kstill.c), not /proc's.
 */
static void deep_stack_moves(const char *scenario, enum still_proof proof, bool looked)
{
	struct uw_kreader *kr = looked ? look_reader() : NULL;
	if (looked && !kr)
		cr_skip_test("the kernel refused the look at which threads ran");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		test_target_start(&target, &pys[i], scenario);
		json_t *report = test_target_wait_report(&target, TARGET_READY_TIMEOUT_S);
		json_t *mover = json_array_get(json_object_get(report, "threads"), 0);
		json_t *top = json_array_get(json_object_get(mover, "frames"), 0);
		cr_assert_not_null(top);
		/* The sleeping frame as sample_text spells it: on its first line, then. */
		char before[PATH_MAX + 64];
		const char *frame = strcmp(scenario, "move_spin") == 0 ? " spin_deep@" : " move_deep@";
		snprintf(before, sizeof before, "%s%s:%d ", frame,
		         json_string_value(json_object_get(top, "file")),
		         (int)json_integer_value(json_object_get(top, "line")));
		json_decref(report);
		char moved[PATH_MAX + 8];
		snprintf(moved, sizeof moved, "%s.moved", target.report);
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_options opts = {.cache_budget = 0, .kreader = kr};
		uw_configure(t, &opts);

		struct uw_sample s = {0};
		struct uw_error err = {0};
		struct uw_stats st = {0};
		bool proven = false;
		for (int round = 0; round < MOVE_SAMPLES_TO_PROVE &&
		                    (!proven || (proof == PROOF_THREAD && round < MOVE_SAMPLES_JUDGED));
		     round++) {
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: sample: %s", pys[i].path, err.msg);
			char *text = sample_text(t, &s);
			cr_assert_not_null(strstr(text, before), "%s: before the move, no%s in:\n%s",
			                   pys[i].path, before, text);
			free(text);
			uw_stats(t, &st);
			proven = proven || proof_seen(&pys[i], &st, proof);
			usleep(1000);
		}
		cr_assert(proven, "%s %s: the sleeping stack was never taken without its frames",
		          pys[i].path, scenario);
		if (looked)
			cr_assert_gt(st.still_proven + st.process_still, 0, "%s %s: the look proved nothing",
			             pys[i].path, scenario);
		/*
		 * Beside a thread that keeps waking, /proc's proof of the whole
		 * process seldom pays and backs off (1 to 5 in 100); the look
		 * costs nothing more and proves every quiet millisecond.
		 */
		if (proof == PROOF_THREAD && !looked)
			cr_assert_leq(st.process_still, st.samples / 4, "%s: %llu of %llu samples", pys[i].path,
			             (unsigned long long)st.process_still, (unsigned long long)st.samples);

		int ack = deep_stack_wake(&target, scenario);
		for (int wait = 0; !deep_stack_moved(ack, moved); wait++) {
			cr_assert_lt(wait, 3000000, "%s: the thread never said it moved", pys[i].path);
			/*
			 * Sampling on through the move, as a profiler does: back to
			 * back where the thread runs on, so that the samples right
			 * after its word fall before the kernel counts its run time.
			 */
			uw_sample(t, &s, &err);
			if (ack < 0)
				usleep(1000);
		}
		if (ack >= 0)
			close(ack);
		for (int round = 0; round < MOVE_SAMPLES_AFTER; round++) {
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: sample: %s", pys[i].path, err.msg);
			char *text = sample_text(t, &s);
			cr_assert(strstr(text, frame) && !strstr(text, before),
			          "%s %s: sample %d after the move shows the old stack:\n%s", pys[i].path,
			          scenario, round, text);
			free(text);
			if (ack < 0)
				usleep(round < 10 ? 100 : 1000);
		}
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
	uw_kreader_close(kr);
}

Test(sample, a_deep_stack_that_moves_is_never_kept, .timeout = 300)
{
	deep_stack_moves("move", PROOF_PROCESS, false);
}

Test(sample, a_deep_stack_that_wakes_alone_and_runs_on_is_never_kept, .timeout = 300)
{
	deep_stack_moves("move_spin", PROOF_PROCESS, false);
}

Test(sample, a_deep_stack_that_moves_beside_a_busy_thread_is_never_kept, .timeout = 300)
{
	deep_stack_moves("move_busy", PROOF_THREAD, false);
}

Test(sample, a_deep_stack_that_moves_is_never_kept_by_the_look, .timeout = 300)
{
	deep_stack_moves("move", PROOF_PROCESS, true);
}

Test(sample, a_deep_stack_that_wakes_alone_and_runs_on_is_never_kept_by_the_look, .timeout = 300)
{
	deep_stack_moves("move_spin", PROOF_PROCESS, true);
}

Test(sample, a_deep_stack_that_moves_beside_a_busy_thread_is_never_kept_by_the_look, .timeout = 300)
{
	deep_stack_moves("move_busy", PROOF_THREAD, true);
}

/* Frames a wake-up adds to the sleeping thread of stacks.py's "wake" (its WAKE_DEPTH). */
#define WAKE_DEPTH 60

/* Whether the kernel shows thread tid of process pid asleep on a pipe. */
static bool thread_on_pipe(pid_t pid, long tid)
{
	char path[64], buf[64];
	snprintf(path, sizeof path, "/proc/%d/task/%ld/wchan", (int)pid, tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, "pipe") != NULL;
}

/* A target of stacks.py's "wake" kind started: its sleeping thread's id, and the file it writes as it wakes. */
static long wake_target_start(struct test_target *target, const struct python *py, const char *scenario,
                              char *woke, size_t woke_len)
{
	test_target_start(target, py, scenario);
	json_t *report = test_target_wait_report(target, TARGET_READY_TIMEOUT_S);
	json_t *sleeper = json_array_get(json_object_get(report, "threads"), 0);
	long tid = (long)json_integer_value(json_object_get(sleeper, "native_thread_id"));
	json_decref(report);
	cr_assert_gt(tid, 0, "%s: the report names no thread id", py->path);
	snprintf(woke, woke_len, "%s.woke", target->report);
	return tid;
}

/* Wake it, until it sleeps again, deeper: the file says it woke, the kernel that it waits on its pipe. */
static void wake_target_wake(const struct test_target *target, const struct python *py, long tid,
                             const char *woke)
{
	cr_assert_eq(kill(target->pid, SIGUSR1), 0);
	for (int wait = 0; !(file_exists(woke) && thread_on_pipe(target->pid, tid)); wait++) {
		cr_assert_lt(wait, 30000, "%s: the thread never slept again", py->path);
		usleep(1000);
	}
}

/*
 * A thread that slept two frames deep wakes up to sleep WAKE_DEPTH frames
 * deeper.  The batch, planned from its shallow samples, holds none of the
 * new frames: the sample that first walks them reads the live part of the
 * thread's data stack in one call and finds them there, instead of a call a
 * frame (3.11+; before, frames are heap objects of their own).
 */
Test(sample, a_stack_that_woke_is_read_in_few_calls, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		if (pys[i].minor < 11)
			continue;
		struct test_target target;
		char woke[PATH_MAX + 8];
		long tid = wake_target_start(&target, &pys[i], "wake", woke, sizeof woke);
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		/* The shallow stack, until the batch is planned from it alone. */
		for (int k = 0; k < 50; k++)
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);

		wake_target_wake(&target, &pys[i], tid, woke);
		struct uw_stats before, after;
		uw_stats(t, &before);
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		uw_stats(t, &after);
		uint64_t frames = after.frames_from_memory - before.frames_from_memory;
		uint64_t calls = after.readv_calls - before.readv_calls;
		cr_assert_geq(frames, WAKE_DEPTH, "%s: %llu frames read, the stack grew by %d",
		              pys[i].path, (unsigned long long)frames, WAKE_DEPTH);
		/* A call a frame made WAKE_DEPTH and more; the new code object's own reads stay. */
		cr_assert_lt(calls, WAKE_DEPTH / 2, "%s: %llu process_vm_readv calls for %llu new frames",
		             pys[i].path, (unsigned long long)calls, (unsigned long long)frames);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}

/* The stack of the thread the kernel knows as tid in sample s; 0 when it is not there. */
static uint32_t thread_stack(const struct uw_sample *s, long tid)
{
	for (uint32_t th = 0; th < s->nthreads; th++)
		if (s->threads[th].native_id == tid)
			return s->threads[th].stack;
	return 0;
}

/* The thread tid's stack spelled out, innermost first (malloc'd). */
static char *thread_text(const struct uw_target *t, const struct uw_sample *s, long tid)
{
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	cr_assert_not_null(out);
	out[0] = '\0';
	for (uint32_t st = thread_stack(s, tid); st && len < cap - 512; st = uw_stack_parent(t, st)) {
		const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, st));
		len += (size_t)snprintf(out + len, cap - len, " %s@%s:%d", f->function, f->file ? f->file : "-",
		                        f->line);
	}
	return out;
}

/* Whether the stack holds a frame of function name. */
static bool stack_has(const struct uw_target *t, uint32_t stack, const char *name)
{
	for (uint32_t st = stack; st; st = uw_stack_parent(t, st)) {
		const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, st));
		if (f->function && strcmp(f->function, name) == 0)
			return true;
	}
	return false;
}

/*
 * The target opened with each thread's state letter taken from the kernel:
 * no proof that the whole process stood still then answers for a sample
 * without a walk, so back to back (where the targets' tickers sleep through
 * most samples) the walks go on and mark the frame a thread sleeps in.
 */
static struct uw_target *open_walked(pid_t pid)
{
	struct uw_target *t = test_uw_open(pid);
	struct uw_options walked = {.want_on_cpu = true};
	uw_configure(t, &walked);
	return t;
}

/* Frames stacks.py's "deepen" keeps under the frame its thread wakes in (its DEEPEN_BASE). */
#define DEEPEN_BASE 600

/*
 * 3.15: a thread that sleeps under DEEPEN_BASE frames wakes up to call
 * deeper from the very frame it slept in.  The marker still on that frame
 * proves the frames below it never moved: the sample reads the frames above
 * it alone, not the base (a call a frame, for the data-stack chunks the
 * live read does not cover), and its stack is the one a walk with every
 * cache off reads.
 */
Test(sample, a_deep_base_under_a_woken_frame_is_not_read_again, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX), tried = 0;
	for (size_t i = 0; i < n; i++) {
		if (pys[i].major != 3 || pys[i].minor < 15)
			continue;
		tried++;
		struct test_target target;
		char woke[PATH_MAX + 8];
		long tid = wake_target_start(&target, &pys[i], "deepen", woke, sizeof woke);
		struct uw_target *t = open_walked(target.pid);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		/* Asleep under its base, until the marker stands on the frame it sleeps in. */
		for (int k = 0; k < 50; k++)
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		struct uw_stats before, after;
		uw_stats(t, &before);
		cr_assert_gt(before.marker_honoured, 0, "%s: the marker's path never ran", pys[i].path);

		wake_target_wake(&target, &pys[i], tid, woke);
		uw_stats(t, &before);
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		uw_stats(t, &after);
		uint64_t pages = after.pages_read - before.pages_read;
		uint64_t calls = after.readv_calls - before.readv_calls;
		cr_log_info("%s: the woken sample read %llu pages in %llu calls", pys[i].path,
		            (unsigned long long)pages, (unsigned long long)calls);
		/*
		 * Read again, the base took a call and a page a frame (about 600
		 * of each); kept, the sample reads the batch, the new frames, their
		 * new code object and the re-read (about 11 calls, 30 pages).
		 */
		cr_assert_lt(pages, DEEPEN_BASE / 6, "%s: %llu pages read for a stack that grew by %d frames",
		             pys[i].path, (unsigned long long)pages, WAKE_DEPTH);
		cr_assert_lt(calls, DEEPEN_BASE / 10, "%s: %llu process_vm_readv calls", pys[i].path,
		             (unsigned long long)calls);
		uint32_t depth = uw_stack_depth(t, thread_stack(&s, tid));
		cr_assert_geq(depth, DEEPEN_BASE + WAKE_DEPTH, "%s: the woken thread's stack is %u deep",
		              pys[i].path, depth);
		/*
		 * The sleeper's alone: the main thread may still be leaving the
		 * signal handler that woke it, between the two samples.
		 */
		char *kept = thread_text(t, &s, tid);
		struct uw_options uncached = {.no_cache = true};
		uw_configure(t, &uncached);
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		char *read = thread_text(t, &s, tid);
		cr_assert_str_eq(kept, read, "%s: the stack taken with the base kept differs from a "
		                 "walk with every cache off:\n%s\n%s", pys[i].path, kept, read);
		free(kept);
		free(read);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
	if (!tried)
		cr_skip_test("no CPython 3.15 here (make pythons)");
}

/* Samples a look-proven test takes while its sleeper sleeps. */
#define LOOK_SAMPLES 40

/* Pages and proofs of count samples of t. */
static void look_samples(struct uw_target *t, const struct python *py, int count, uint64_t *pages,
                         uint64_t *proven)
{
	struct uw_sample s = {0};
	struct uw_error err = {0};
	struct uw_stats before, after;
	uw_stats(t, &before);
	for (int k = 0; k < count; k++)
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", py->path, err.msg);
	uw_stats(t, &after);
	*pages = after.pages_read - before.pages_read;
	*proven = after.still_proven - before.still_proven;
	uw_sample_free(&s);
}

/*
 * A sample of t, and one with every cache off: the same stacks.  The
 * thread tid (0: none) sleeps DEEPEN_BASE frames deep or more.  The threads
 * the sample had.
 */
static uint32_t look_matches_uncached(struct uw_target *t, const struct python *py, long tid,
                                      const char *when)
{
	struct uw_sample s = {0};
	struct uw_error err = {0};
	struct uw_options saved;
	uw_options_get(t, &saved);
	cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", py->path, err.msg);
	char *kept = sample_text(t, &s);
	uint32_t nthreads = s.nthreads;
	uint32_t depth = tid ? uw_stack_depth(t, thread_stack(&s, tid)) : DEEPEN_BASE;
	struct uw_options uncached = {.no_cache = true, .no_write = true};
	uw_configure(t, &uncached);
	cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", py->path, err.msg);
	char *read = sample_text(t, &s);
	cr_assert_str_eq(kept, read, "%s, %s: the stacks the kernel's look proved differ from a walk "
	                 "with every cache off", py->path, when);
	cr_assert_geq(depth, DEEPEN_BASE, "%s, %s: the sleeper's stack is %u deep", py->path, when, depth);
	free(kept);
	free(read);
	uw_sample_free(&s);
	uw_configure(t, &saved);
	return nthreads;
}

/*
 * With the kernel's look at which threads ran (kstill.c): a thread asleep
 * under DEEPEN_BASE frames since its stack was read is proven at every
 * sample, its frames neither walked nor read (on 3.15, where the marker
 * alone reads the innermost frame's page at every sample, the look reads
 * fewer pages); once woken to sleep deeper, its next sample is its new
 * stack.  Beside a ticker, so that the whole process is never still and the
 * proof is the thread's own.  Every version.
 */
Test(sample, a_thread_asleep_since_its_read_pins_none_of_its_frames, .timeout = 600)
{
	struct uw_kreader *kr = look_reader();
	if (!kr)
		cr_skip_test("the kernel refused the look at which threads ran");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		char woke[PATH_MAX + 8];
		long tid = wake_target_start(&target, &pys[i], "deepen", woke, sizeof woke);
		/* Each thread's state from the kernel, so the whole-process proof never answers. */
		struct uw_options looked = {.kreader = kr, .want_on_cpu = true, .no_write = true};
		struct uw_options unlooked = {.want_on_cpu = true, .no_write = true};
		struct uw_target *t = test_uw_open(target.pid), *plain = test_uw_open(target.pid);
		uw_configure(t, &looked);
		uw_configure(plain, &unlooked);
		uint64_t pages, plain_pages, proven, plain_proven;
		look_samples(t, &pys[i], 10, &pages, &proven);
		look_samples(plain, &pys[i], 10, &plain_pages, &plain_proven);
		look_samples(t, &pys[i], LOOK_SAMPLES, &pages, &proven);
		look_samples(plain, &pys[i], LOOK_SAMPLES, &plain_pages, &plain_proven);
		cr_log_info("%s: %d samples read %llu pages with the look (%llu thread samples proven), "
		            "%llu without", pys[i].path, LOOK_SAMPLES, (unsigned long long)pages,
		            (unsigned long long)proven, (unsigned long long)plain_pages);
		cr_assert_geq(proven, LOOK_SAMPLES, "%s: %llu thread samples proven in %d samples of a "
		              "thread asleep", pys[i].path, (unsigned long long)proven, LOOK_SAMPLES);
		if (pys[i].minor >= 15)
			cr_assert_lt(pages + LOOK_SAMPLES / 2, plain_pages,
			             "%s: %llu pages read with the look, %llu without", pys[i].path,
			             (unsigned long long)pages, (unsigned long long)plain_pages);
		look_matches_uncached(t, &pys[i], tid, "asleep");

		wake_target_wake(&target, &pys[i], tid, woke);
		look_matches_uncached(t, &pys[i], tid, "woken to sleep deeper");
		uw_close(plain);
		uw_close(t);
		test_target_kill(&target);
	}
	uw_kreader_close(kr);
}

/* Threads of the pool scenario (stacks.py's POOL_THREADS): more than a look told of before. */
#define POOL_THREADS 200

/*
 * A pool of POOL_THREADS threads asleep beside a ticker (a service's thread
 * pool between requests): the look tells of every task of a process of up to
 * KSTILL_TASKS, so nearly every sleeper is proven at every sample, not only
 * the first few score the look once told of, and the stacks so taken are a
 * walk's with every cache off.  Every version.
 */
Test(sample, a_pool_of_sleepers_is_proven_thread_by_thread, .timeout = 600)
{
	struct uw_kreader *kr = look_reader();
	if (!kr)
		cr_skip_test("the kernel refused the look at which threads ran");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		test_target_start(&target, &pys[i], "pool");
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		/* Each thread's state from the kernel, so the whole-process proof never answers. */
		struct uw_options looked = {.kreader = kr, .want_on_cpu = true, .no_write = true};
		struct uw_target *t = test_uw_open(target.pid);
		uw_configure(t, &looked);
		uint64_t pages, proven;
		look_samples(t, &pys[i], 10, &pages, &proven);
		look_samples(t, &pys[i], LOOK_SAMPLES, &pages, &proven);
		cr_log_info("%s: %d samples of %d sleepers read %llu pages, %llu thread samples proven",
		            pys[i].path, LOOK_SAMPLES, POOL_THREADS, (unsigned long long)pages,
		            (unsigned long long)proven);
		/* A sleeper's one sample in a hundred unproven is slack for a slow host, no more. */
		cr_assert_geq(proven, (uint64_t)LOOK_SAMPLES * POOL_THREADS * 99 / 100,
		              "%s: %llu of %d sleepers' samples proven", pys[i].path, (unsigned long long)proven,
		              LOOK_SAMPLES * POOL_THREADS);
		uint32_t sampled = look_matches_uncached(t, &pys[i], 0, "a pool asleep");
		cr_assert_geq(sampled, POOL_THREADS, "%s: %u threads sampled", pys[i].path, sampled);
		uw_close(t);
		test_target_kill(&target);
	}
	uw_kreader_close(kr);
}

/* Moves of the steps scenario's sleeper a test makes (stacks.py). */
#define STEPS_MOVES 20

/* Threads the steps scenario starts in a test (stacks.py). */
#define STEPS_SPAWNS 5

/* A count in one of the steps scenario's files (key, and *tid if asked), -1 before it is written. */
static long steps_count(const char *path, const char *key, long *tid)
{
	json_t *j = json_load_file(path, 0, NULL);
	long count = j ? (long)json_integer_value(json_object_get(j, key)) : -1;
	if (tid)
		*tid = j ? (long)json_integer_value(json_object_get(j, "tid")) : 0;
	json_decref(j);
	return count;
}

/* The in-kernel reader with its copy of a process as it falls quiet (kcopy.c), or NULL when the kernel refused it. */
static struct uw_kreader *copy_reader(void)
{
	struct uw_kreader *kr = look_reader();
	if (kr && uw_kreader_copy_refused(kr)) {
		cr_log_info("%s", uw_kreader_copy_refused(kr));
		uw_kreader_close(kr);
		kr = NULL;
	}
	return kr;
}

/*
 * Two unwinders of process pid: *t with the kernel's copies, as the daemon
 * samples (its tasks followed and its plan made by a few samples), *plain
 * with every cache off.
 */
static void copy_pair_open(struct uw_kreader *kr, const struct python *py, pid_t pid, struct uw_target **t,
                           struct uw_target **plain)
{
	struct uw_options copied = {.kreader = kr}, uncached = {.no_cache = true, .no_write = true};
	*t = test_uw_open(pid);
	*plain = test_uw_open(pid);
	uw_configure(*t, &copied);
	uw_configure(*plain, &uncached);
	struct uw_sample s = {0};
	struct uw_error err = {0};
	for (int k = 0; k < 3; k++)
		cr_assert_eq(uw_sample(*t, &s, &err), 0, "%s: %s", py->path, err.msg);
	uw_sample_free(&s);
}

/* A sample of t (taking the kernel's copy or not), and plain's with every cache off: the same stacks. */
static uint64_t steps_sample_matches(struct uw_target *t, struct uw_target *plain, const struct python *py,
                                     const char *what, long k, uint32_t *depth, long tid)
{
	struct uw_sample s = {0};
	struct uw_error err = {0};
	struct uw_stats before, after;
	uw_stats(t, &before);
	cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", py->path, err.msg);
	uw_stats(t, &after);
	char *kept = sample_text(t, &s);
	if (depth)
		*depth = uw_stack_depth(t, thread_stack(&s, tid));
	cr_assert_eq(uw_sample(plain, &s, &err), 0, "%s: %s", py->path, err.msg);
	char *read = sample_text(plain, &s);
	cr_assert_str_eq(kept, read, "%s, %s %ld (%s): the stacks differ from a walk with every cache off",
	                 py->path, what, k, after.kernel_copies > before.kernel_copies ? "the kernel's copy" : "read");
	free(kept);
	free(read);
	uw_sample_free(&s);
	return after.kernel_copies - before.kernel_copies;
}

/*
 * A thread moves to another depth and sleeps again, as a service's thread
 * does between requests: the process ran since its last sample, so nothing
 * proves it still, but it fell quiet as the thread was switched away, and
 * the kernel copied then what the next sample reads (kcopy.c).  Most
 * samples take that copy, and each one shows the stacks a walk with every
 * cache off shows.  Then threads are started, one at a time, each falling
 * asleep before the kernel watches it: the last copy, made before it began,
 * is not taken (a copy taken regardless shows one thread too few).  Writing 3.15's marker, as the
 * daemon does: a copy from before a write is not taken.  Every version.
 */
Test(sample, a_process_fallen_quiet_is_read_from_the_kernels_copy, .timeout = 600)
{
	struct uw_kreader *kr = copy_reader();
	if (!kr)
		cr_skip_test("the kernel refused its copy of a process as it falls quiet");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		char woke[PATH_MAX + 8];
		long tid = wake_target_start(&target, &pys[i], "steps", woke, sizeof woke);
		struct uw_target *t, *plain;
		copy_pair_open(kr, &pys[i], target.pid, &t, &plain);
		uint64_t copies = 0, depths[2] = {0, 0};
		for (long move = 1; move <= STEPS_MOVES; move++) {
			cr_assert_eq(kill(target.pid, SIGUSR1), 0);
			for (int wait = 0; !(steps_count(woke, "woke", NULL) == move && thread_on_pipe(target.pid, tid));
			     wait++) {
				cr_assert_lt(wait, 30000, "%s: the thread never slept again", pys[i].path);
				usleep(1000);
			}
			/* The main thread, which ran the signal's handler, back asleep too. */
			usleep(20000);
			uint32_t depth;
			copies += steps_sample_matches(t, plain, &pys[i], "move", move, &depth, tid);
			depths[move % 2] = depth;
		}
		char spawned[PATH_MAX + 16];
		snprintf(spawned, sizeof spawned, "%s.spawned", target.report);
		for (long spawn = 1; spawn <= STEPS_SPAWNS; spawn++) {
			cr_assert_eq(kill(target.pid, SIGUSR2), 0);
			long newest = 0;
			for (int wait = 0; !(steps_count(spawned, "spawned", &newest) == spawn && newest > 0 &&
			                     thread_on_pipe(target.pid, newest));
			     wait++) {
				cr_assert_lt(wait, 30000, "%s: the new thread never slept", pys[i].path);
				usleep(1000);
			}
			usleep(20000);
			steps_sample_matches(t, plain, &pys[i], "thread started", spawn, NULL, 0);
		}
		struct uw_stats stats;
		uw_stats(t, &stats);
		cr_log_info("%s: %llu of %d samples after a move were the kernel's copies (depths %llu, %llu; "
		            "copies stopped %llu times)",
		            pys[i].path, (unsigned long long)copies, STEPS_MOVES, (unsigned long long)depths[0],
		            (unsigned long long)depths[1], (unsigned long long)stats.kernel_copy_pauses);
		/* The two depths are six frames apart: each sample saw the move. */
		cr_assert_eq(depths[0] + 6, depths[1], "%s: depths %llu and %llu", pys[i].path,
		             (unsigned long long)depths[0], (unsigned long long)depths[1]);
		/*
		 * Slack for a host so busy that the process's threads are still on
		 * a CPU, or waiting for one, as the sample comes (a debug build,
		 * beside the suite's other jobs): a quarter, where a quiet host
		 * copies all.
		 */
		cr_assert_geq(copies, STEPS_MOVES / 4, "%s: %llu of %d samples after a move were the "
		              "kernel's copies", pys[i].path, (unsigned long long)copies, STEPS_MOVES);
		uw_close(plain);
		uw_close(t);
		test_target_kill(&target);
	}
	uw_kreader_close(kr);
}

/* Samples of t at about 100 Hz, for about ms milliseconds; its stats after them. */
static struct uw_stats copy_sample_for(struct uw_target *t, const struct python *py, long ms)
{
	struct uw_sample s = {0};
	for (long k = 0; k < ms / 10; k++) {
		struct uw_error err = {0};
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", py->path, err.msg);
		usleep(10000);
	}
	uw_sample_free(&s);
	struct uw_stats stats;
	uw_stats(t, &stats);
	return stats;
}

/*
 * Two threads hand a token back and forth, thousands of switches away a
 * second: the kernel's copies would cost the process far more than
 * the reads they spare the sampler (view.c), so after a few samples they
 * stop, its tasks no longer watched, and none is made while it stays that
 * busy.  Once a handoff comes only every 50 ms, they start again (on the
 * newest interpreter alone: it takes the ten seconds they stay stopped).
 * Every version.
 */
/* Half seconds of sampling the busy handoff is given to stop the copies. */
#define COPY_PAUSE_WAIT_HALVES 20

Test(sample, copies_stop_for_a_process_that_switches_too_often, .timeout = 600)
{
	struct uw_kreader *kr = copy_reader();
	if (!kr)
		cr_skip_test("the kernel refused its copy of a process as it falls quiet");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX), newest = 0;
	for (size_t i = 0; i < n; i++)
		if (!pys[i].debug && pys[i].minor > pys[newest].minor)
			newest = i;
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		test_target_start(&target, &pys[i], "pingpong");
		json_decref(test_target_wait_report(&target, 60));
		struct uw_options copied = {.kreader = kr};
		struct uw_target *t = test_uw_open(target.pid);
		uw_configure(t, &copied);
		/* A loaded host runs the handoff less often: it may take a few half seconds to tell. */
		struct uw_stats busy = copy_sample_for(t, &pys[i], 500);
		for (int half = 1; half < COPY_PAUSE_WAIT_HALVES && !busy.kernel_copy_pauses; half++)
			busy = copy_sample_for(t, &pys[i], 500);
		cr_assert_eq(busy.kernel_copy_pauses, 1, "%s: the copies stopped %llu times in %d half seconds",
		             pys[i].path, (unsigned long long)busy.kernel_copy_pauses, COPY_PAUSE_WAIT_HALVES);
		struct uw_stats still_busy = copy_sample_for(t, &pys[i], 1000);
		cr_assert_eq(still_busy.kernel_copies, busy.kernel_copies, "%s: %llu copies taken once stopped",
		             pys[i].path, (unsigned long long)(still_busy.kernel_copies - busy.kernel_copies));
		cr_assert_eq(still_busy.kernel_copy_pauses, 1, "%s: stopped again", pys[i].path);
		if (i == newest) {
			cr_assert_eq(kill(target.pid, SIGUSR1), 0);
			struct uw_stats calm = still_busy;
			for (int second = 0; calm.kernel_copies == still_busy.kernel_copies; second++) {
				cr_assert_lt(second, 30, "%s: no copy in 30 s of a handoff every 50 ms", pys[i].path);
				calm = copy_sample_for(t, &pys[i], 1000);
			}
			cr_log_info("%s: copies again once calm: %llu", pys[i].path,
			            (unsigned long long)(calm.kernel_copies - still_busy.kernel_copies));
			cr_assert_eq(calm.kernel_copy_pauses, 1, "%s: stopped again once calm", pys[i].path);
		}
		uw_close(t);
		test_target_kill(&target);
	}
	uw_kreader_close(kr);
}

/* Moves of the handoff scenario's sleeper a test makes (stacks.py). */
#define HANDOFF_MOVES 10

/* Whether process pid has n tasks. */
static bool process_tasks(pid_t pid, int n)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return false;
	int count = 0;
	for (struct dirent *e; (e = readdir(d));)
		count += e->d_name[0] != '.';
	closedir(d);
	return count == n;
}

/*
 * A thread is moved on to another line of its frame by a thread that
 * spins on a CPU meanwhile and then ends: the sleeper's switch away finds
 * the waker running, so no copy is made, and the waker ends with its event
 * gone, so none is made then either.  The batch's plan is the same before
 * and after (the same frame), so the last copy is of the plan a sample
 * reads: but the sleeper's record is newer, and the copy is not taken (a
 * copy taken regardless shows the line it slept at before).  Every version.
 */
Test(sample, a_copy_from_before_a_thread_ran_is_not_taken, .timeout = 600)
{
	struct uw_kreader *kr = copy_reader();
	if (!kr)
		cr_skip_test("the kernel refused its copy of a process as it falls quiet");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		char moved[PATH_MAX + 8];
		long tid = wake_target_start(&target, &pys[i], "handoff", moved, sizeof moved);
		snprintf(moved, sizeof moved, "%s.moved", target.report);
		/* The reporter gone: the main thread and the sleeper are all there is. */
		for (int wait = 0; !process_tasks(target.pid, 2); wait++) {
			cr_assert_lt(wait, 30000, "%s: the reporter never ended", pys[i].path);
			usleep(1000);
		}
		struct uw_target *t, *plain;
		copy_pair_open(kr, &pys[i], target.pid, &t, &plain);
		uint64_t copies = 0;
		for (long move = 1; move <= HANDOFF_MOVES; move++) {
			cr_assert_eq(kill(target.pid, SIGUSR1), 0);
			/* Moved, asleep again, and the waker gone (the main thread, the sleeper). */
			for (int wait = 0; !(steps_count(moved, "moved", NULL) == move && thread_on_pipe(target.pid, tid) &&
			                     process_tasks(target.pid, 2));
			     wait++) {
				cr_assert_lt(wait, 30000, "%s: the thread never slept again", pys[i].path);
				usleep(1000);
			}
			usleep(20000);
			copies += steps_sample_matches(t, plain, &pys[i], "handoff", move, NULL, 0);
		}
		cr_log_info("%s: %llu of %d samples after a handoff were the kernel's copies", pys[i].path,
		            (unsigned long long)copies, HANDOFF_MOVES);
		uw_close(plain);
		uw_close(t);
		test_target_kill(&target);
	}
	uw_kreader_close(kr);
}

/* Thread samples proven in count samples of t. */
static uint64_t look_proven(struct uw_target *t, const struct python *py, int count)
{
	uint64_t pages, proven;
	look_samples(t, py, count, &pages, &proven);
	return proven;
}

/*
 * The look watches KSTILL_PROCS processes at most.  A target past them
 * proves nothing through it, and takes the entry a closed target gives
 * back at its next sample.  The sleeper is two frames deep, too shallow for
 * /proc's proof, and each thread's state is asked for, so that the process's
 * is not tried: only the look proves it.  One interpreter: the table is the
 * daemon's, whatever the version.
 */
Test(sample, a_target_past_the_looks_room_takes_an_entry_given_back, .timeout = 300)
{
	struct uw_kreader *kr = look_reader();
	if (!kr)
		cr_skip_test("the kernel refused the look at which threads ran");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	cr_assert_gt(n, 0);
	/*
	 * The last found with a GIL: a free-threaded build's reads (its
	 * threads' bytecode copies too) touch pages enough for /proc's proof.
	 */
	const struct python *py = &pys[n - 1];
	for (size_t i = n; i-- > 0 && py->free_threaded;)
		py = &pys[i];
	struct test_target target;
	char woke[PATH_MAX + 8];
	wake_target_start(&target, py, "wake", woke, sizeof woke);
	struct uw_options looked = {.kreader = kr, .want_on_cpu = true, .no_write = true};
	static struct uw_target *watched[KSTILL_PROCS];
	for (int i = 0; i < KSTILL_PROCS; i++) {
		watched[i] = test_uw_open(target.pid);
		uw_configure(watched[i], &looked);
		look_proven(watched[i], py, 1); /* watched from its first sample on */
	}
	struct uw_target *past = test_uw_open(target.pid);
	uw_configure(past, &looked);
	cr_assert_eq(look_proven(past, py, 10), 0, "%s: a target past the look's %d processes proved "
	             "a thread through it", py->path, KSTILL_PROCS);
	cr_assert_gt(look_proven(watched[0], py, 3), 0, "%s: a watched target proves nothing", py->path);

	uw_close(watched[KSTILL_PROCS / 2]);
	watched[KSTILL_PROCS / 2] = NULL;
	look_proven(past, py, 2); /* the entry taken, then the thread armed */
	cr_assert_gt(look_proven(past, py, 5), 0, "%s: the entry a closed target gave back was not "
	             "taken", py->path);
	uw_close(past);
	for (int i = 0; i < KSTILL_PROCS; i++)
		if (watched[i])
			uw_close(watched[i]);
	test_target_kill(&target);
	uw_kreader_close(kr);
}

/*
 * A generator sleeps in a helper under one caller, then yields and is
 * resumed by another whose frame lies where the first's did: the frames of
 * the generator and of the helper are back at their addresses, linked as
 * before, and only the caller below them changed.  Its sample shows the new
 * caller: a base kept across the yield (3.15's marker taken as still on the
 * helper's frame, or a stack taken by its frames' addresses) would show the
 * old one.
 */
Test(sample, a_generator_resumed_by_another_caller_is_shown_under_it, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		char woke[PATH_MAX + 8];
		long tid = wake_target_start(&target, &pys[i], "two_callers", woke, sizeof woke);
		struct uw_target *t = open_walked(target.pid);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		uint32_t stack = 0;
		for (int k = 0; k < 50; k++) {
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
			stack = thread_stack(&s, tid);
			cr_assert(stack_has(t, stack, "two_callers_a") && !stack_has(t, stack, "two_callers_b"),
			          "%s: sample %d is not under the first caller", pys[i].path, k);
		}
		wake_target_wake(&target, &pys[i], tid, woke);
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		stack = thread_stack(&s, tid);
		cr_assert(stack_has(t, stack, "two_callers_helper"), "%s: the helper is not on the stack",
		          pys[i].path);
		cr_assert(stack_has(t, stack, "two_callers_b") && !stack_has(t, stack, "two_callers_a"),
		          "%s: the generator resumed by the second caller is shown under the first",
		          pys[i].path);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}

/*
 * 30 000 code objects made, run and freed over time (the budget holds a few
 * hundred): the caches reset when they reach their budget, never grow past
 * it, and notice reused addresses.
 */
Test(sample, caches_stay_in_budget, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	/* The oldest and the newest family: heap frames and interpreter frames. */
	size_t picks[2] = {0, 0};
	for (size_t i = 0; i < n; i++) {
		if (pys[i].minor < pys[picks[0]].minor)
			picks[0] = i;
		if (pys[i].minor > pys[picks[1]].minor)
			picks[1] = i;
	}
	const size_t budget = 256u << 10;
	for (size_t p = 0; p < (picks[0] == picks[1] ? 1u : 2u); p++) {
		const struct python *py = &pys[picks[p]];
		char dir[512], script[1024], done[1024];
		scratch_dir(dir, sizeof dir);
		target_script("churn_code.py", script, sizeof script);
		snprintf(done, sizeof done, "%s/churn-done-%zu", dir, p);
		const char *args[] = {script, "30000", done, NULL};
		struct test_target target;
		test_target_start_python(&target, py, args);
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_options opts = {.cache_budget = budget};
		uw_configure(t, &opts);

		struct uw_sample s = {0};
		struct uw_stats st;
		uint64_t max_bytes = 0;
		time_t deadline = time(NULL) + 240;
		while (!file_exists(done) && time(NULL) < deadline) {
			struct uw_error err = {0};
			int rc = uw_sample(t, &s, &err);
			cr_assert(rc == 0 || err.status == UW_ECORRUPT, "%s: sample: %s", py->path, err.msg);
			uw_stats(t, &st);
			if (st.cache_bytes > max_bytes)
				max_bytes = st.cache_bytes;
		}
		cr_assert(file_exists(done), "%s: the target did not finish its code objects", py->path);
		uw_stats(t, &st);
		cr_assert_leq(max_bytes, budget, "%s: caches grew to %llu bytes", py->path,
		              (unsigned long long)max_bytes);
		cr_assert_geq(st.cache_resets, 1, "%s: the budget was never reached", py->path);
		cr_assert_gt(st.code_cache_misses, 200, "%s: few code objects were seen", py->path);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}

/* The kind of a dumped thread's innermost frame, or NULL. */
static const char *innermost_kind(json_t *thread)
{
	json_t *frames = json_object_get(thread, "frames");
	return json_array_size(frames) ? json_string_value(json_object_get(json_array_get(frames, 0), "kind"))
	                               : NULL;
}

/* While the collector runs, --gc puts a <GC> frame on top of the thread running it. */
Test(sample, gc_marker, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		/* No GIL: which thread collects is not told by its holder, and no <GC> frame is put. */
		if (pys[i].free_threaded)
			continue;
		char dir[512], script[1024], ready[1024];
		scratch_dir(dir, sizeof dir);
		target_script("gc_spin.py", script, sizeof script);
		snprintf(ready, sizeof ready, "%s/gc-ready-%zu", dir, i);
		const char *args[] = {script, ready, NULL};
		struct test_target target;
		test_target_start_python(&target, &pys[i], args);
		for (int k = 0; k < 4000 && !file_exists(ready); k++)
			usleep(10 * 1000);
		cr_assert(file_exists(ready), "%s: the target never entered the collector", pys[i].path);

		static const char *const with_gc[] = {"--json", "--gc", NULL};
		static const char *const without[] = {"--json", NULL};
		/*
		 * The callback holds the GIL while it spins, but it let the GIL go to
		 * write its ready file: a dump may come before it has it back.
		 */
		json_t *marked = NULL, *th = NULL;
		for (int attempt = 0; attempt < 50; attempt++) {
			json_decref(marked);
			marked = dump_json(target.pid, with_gc, pys[i].path);
			th = json_array_get(json_object_get(marked, "threads"), 0);
			if (json_is_true(json_object_get(th, "gil")))
				break;
			usleep(20 * 1000);
		}
		cr_assert(json_is_true(json_object_get(th, "gil")), "%s: the collecting thread holds the GIL",
		          pys[i].path);
		const char *kind = innermost_kind(th);
		cr_assert(kind && strcmp(kind, "gc") == 0, "%s: no <GC> frame on top (got %s)", pys[i].path,
		          kind ? kind : "nothing");
		cr_assert_str_eq(json_string_value(json_object_get(
		                         json_array_get(json_object_get(th, "frames"), 1), "function")),
		                 "spin_in_collector");
		json_t *plain = dump_json(target.pid, without, pys[i].path);
		const char *plain_kind = innermost_kind(json_array_get(json_object_get(plain, "threads"), 0));
		cr_assert(plain_kind && strcmp(plain_kind, "python") == 0,
		          "%s: a <GC> frame without --gc", pys[i].path);
		json_decref(marked);
		json_decref(plain);
		test_target_kill(&target);
	}
}

/* The name of a frame of callgraph.py, or NULL for any other frame. */
static const char *callgraph_function(const struct uw_frame *f)
{
	const char *base = f->file ? strrchr(f->file, '/') : NULL;
	return base && strcmp(base + 1, "callgraph.py") == 0 ? f->function : NULL;
}

/*
 * Never a torn stack: a program whose caller -> callee pairs are all known,
 * sampled as fast as the engine goes while its stacks unwind and rewind
 * every few microseconds and its threads start and end.  A stack read half
 * before a return and half after the next call shows a pair that cannot
 * exist.
 */
/* Seconds CPython's own sampler reads the callgraph target alongside. */
#define CALLGRAPH_TACHYON_S 8

/*
 * Sample the callgraph target on py as fast as the engine goes, with opts,
 * and fail on any caller -> callee pair the program does not have.  With
 * tachyon, CPython's own sampler (3.15) reads the same process at the same
 * time, writing the same frame-cache marker.  With naps, every thread of
 * the target naps between its rounds of calls: the process falls quiet
 * many times a second, its stacks elsewhere each time, and with the
 * in-kernel reader some samples must be the kernel's copies (kcopy.c).
 * Sampled back to back, most samples are the look's proof that nothing
 * ran: the copies are those right after a thread's nap began, few and far
 * between (a run here took up to 11 million samples to make 26), fewer
 * under the sanitizers (one run of 3.9 made 20 in its 30 s).  More than
 * ten shows the path taken and its stacks checked, within the time on
 * either build.
 */
#define CALLGRAPH_QUIET_COPIES 10
static void callgraph_check(const struct python *py, const struct uw_options *opts, bool tachyon,
                            bool naps)
{
	char script[1024], what[PATH_MAX + 64];
	python_describe(py, what, sizeof what);
	/* 3.11-3.14: the reader copies the stacks of threads that tear (3.15's marker stands in for it). */
	bool copies = opts->kreader && py->minor >= 11 && py->minor <= 14 && !naps;
	bool quiet_copies = opts->kreader && naps && !uw_kreader_copy_refused(opts->kreader);
	/* Which run of the interpreter: a failure says which path took the stack. */
	strncat(what, opts->kreader ? " with the in-kernel reader" : opts->no_write ? " not writing" : "",
	        sizeof what - strlen(what) - 1);
	strncat(what, naps ? ", napping" : "", sizeof what - strlen(what) - 1);
	target_script("callgraph.py", script, sizeof script);
	const char *args[] = {"-I", script, naps ? "--naps" : "{report}", naps ? "{report}" : NULL, NULL};
	struct test_target target, second;
	test_target_start_python(&target, py, args);
	json_t *report = test_target_wait_report(&target, TARGET_READY_TIMEOUT_S);
	json_t *edges = json_object_get(report, "edges");
	cr_assert(json_is_object(edges), "%s: no edges in the report", what);
	if (tachyon) {
		char second_script[1024], pid[16], seconds[16];
		target_script("tachyon.py", second_script, sizeof second_script);
		snprintf(pid, sizeof pid, "%d", (int)target.pid);
		snprintf(seconds, sizeof seconds, "%d", CALLGRAPH_TACHYON_S);
		/*
		 * In the target's own mount namespace and root: CPython's sampler
		 * opens the files /proc/PID/maps names as its reader sees them.
		 */
		const char *second_argv[] = {"nsenter", "-t", pid, "-m", "-r", python_exec_path(py), "-I",
		                             second_script, pid, script, seconds, "{report}", NULL};
		test_target_start_argv(&second, second_argv);
	}
	struct uw_target *t = test_uw_open(target.pid);
	uw_configure(t, opts);
	/*
	 * The in-kernel reader copies a thread only when every read of it
	 * tears, and a read tears only while the thread runs beside it: on a
	 * busy host, the target and this sampler go first.
	 */
	int priority = copies ? test_favour_over_the_host(target.pid) : 0;

	uint64_t pairs = 0, samples = 0, max_climb = 0;
	uint64_t thread_ids[64]; /* native ids: Python reuses its own thread ids */
	size_t nthread_ids = 0;
	struct uw_sample s = {0};
	struct timespec start, now;
	bool seen_enough;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		struct uw_error err = {0};
		int rc = uw_sample(t, &s, &err);
		cr_assert(rc == 0 || err.status == UW_ECORRUPT, "%s: sample: %s", what, err.msg);
		samples += rc == 0;
		for (uint32_t k = 0; rc == 0 && k < s.nthreads; k++) {
			const struct uw_sample_thread *th = &s.threads[k];
			uint64_t climb = 0;
			const char *callee = NULL;
			const struct uw_frame *root = NULL;
			/* Nothing proven: a lone <moving> frame, and no caller to judge. */
			if (th->moving) {
				cr_assert(uw_stack_parent(t, th->stack) == 0 &&
				          uw_frame_get(t, uw_stack_frame(t, th->stack))->kind == UW_FRAME_MOVING,
				          "%s: a thread flagged moving with a stack", what);
				continue;
			}
			for (uint32_t st = th->stack; st; st = uw_stack_parent(t, st)) {
				root = uw_frame_get(t, uw_stack_frame(t, st));
				const char *caller = callgraph_function(root);
				if (caller && callee) {
					json_t *callees = json_object_get(edges, caller);
					bool known = false;
					for (size_t e = 0; e < json_array_size(callees); e++)
						known = known || strcmp(json_string_value(json_array_get(callees, e)), callee) == 0;
					cr_assert(known, "%s: a stack shows %s calling %s", what, caller, callee);
					pairs++;
				}
				climb += caller && strcmp(caller, "climb") == 0;
				callee = caller;
			}
			/* Every stack starts where a thread does: the module, or threading's bootstrap. */
			const char *root_file = root && root->file ? strrchr(root->file, '/') : NULL;
			cr_assert(!root || (root_file && strcmp(root_file + 1, "threading.py") == 0) ||
			              (callgraph_function(root) && strcmp(root->function, "<module>") == 0),
			          "%s: a stack starts at %s (%s)", what, root->function,
			          root->file ? root->file : "?");
			if (climb > max_climb)
				max_climb = climb;
			bool seen = false;
			for (size_t j = 0; j < nthread_ids; j++)
				seen = seen || thread_ids[j] == (uint64_t)th->native_id;
			if (!seen && nthread_ids < sizeof thread_ids / sizeof thread_ids[0])
				thread_ids[nthread_ids++] = (uint64_t)th->native_id;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		/*
		 * A slow interpreter (a debug build) starts its threads later: it
		 * gets longer.  So does the in-kernel reader on a busy host: it
		 * copies a stack only when reads tear, which they do only while the
		 * target runs beside this process.
		 */
		struct uw_stats so_far;
		if (copies || quiet_copies)
			uw_stats(t, &so_far);
		seen_enough = pairs > 1000 && max_climb >= 10 && nthread_ids >= 4 &&
		              (!tachyon || test_target_exited(&second)) && (!copies || so_far.kernel_stacks > 0) &&
		              (!quiet_copies || so_far.kernel_copies > CALLGRAPH_QUIET_COPIES);
	} while (now.tv_sec - start.tv_sec < 3 ||
	         (!seen_enough && now.tv_sec - start.tv_sec < CALLGRAPH_SAMPLING_MAX_S));

	if (copies)
		setpriority(PRIO_PROCESS, 0, priority);
	/* The run must have seen what it is about: many pairs, deep recursion, threads coming and going. */
	cr_assert_gt(pairs, 1000, "%s: only %llu pairs in %llu samples", what,
	             (unsigned long long)pairs, (unsigned long long)samples);
	cr_assert_geq(max_climb, 10, "%s: recursion never went deeper than %llu", what,
	              (unsigned long long)max_climb);
	cr_assert_geq(nthread_ids, 4, "%s: only %zu threads seen", what, nthread_ids);
	struct uw_stats stats;
	uw_stats(t, &stats);
	if (py->minor >= 15 && !opts->no_write)
		cr_assert_gt(stats.marker_written, 0, "%s: the marker was never written", what);
	if (opts->no_write)
		cr_assert_eq(stats.marker_written, 0, "%s: written with no_write", what);
	if (opts->kreader)
		cr_log_info("%s: in-kernel reader: %llu threads watched, %llu stacks its copies, %llu "
		            "samples paced, %llu torn; the look proved %llu thread samples, %llu samples; "
		            "%llu of %llu samples the copy of the process as it fell quiet (its copies stopped "
		            "%llu times)",
		            what, (unsigned long long)stats.kernel_watches,
		            (unsigned long long)stats.kernel_stacks, (unsigned long long)stats.kernel_paced,
		            (unsigned long long)stats.torn_threads, (unsigned long long)stats.still_proven,
		            (unsigned long long)stats.process_still, (unsigned long long)stats.kernel_copies,
		            (unsigned long long)samples, (unsigned long long)stats.kernel_copy_pauses);
	if (quiet_copies)
		cr_assert_gt(stats.kernel_copies, CALLGRAPH_QUIET_COPIES, "%s: %llu samples were the kernel's copies", what,
		             (unsigned long long)stats.kernel_copies);
	if (copies) {
		cr_assert_gt(stats.kernel_watches, 0, "%s: the in-kernel reader watched no thread", what);
		cr_assert_gt(stats.kernel_stacks, 0, "%s: no stack was the kernel's copy", what);
	}
	if (tachyon) {
		json_t *r = test_target_wait_report(&second, CALLGRAPH_SAMPLING_MAX_S);
		json_t *impossible = json_object_get(r, "impossible");
		cr_log_info("%s: CPython's sampler: %lld samples, %lld errors, %lld pairs; ours: %llu "
		            "samples, marker written %llu, honoured %llu, another's seen %llu",
		            what, json_integer_value(json_object_get(r, "samples")),
		            json_integer_value(json_object_get(r, "errors")),
		            json_integer_value(json_object_get(r, "pairs")), (unsigned long long)samples,
		            (unsigned long long)stats.marker_written, (unsigned long long)stats.marker_honoured,
		            (unsigned long long)stats.marker_foreign);
		/*
		 * It read the process all along, so the marker was written by two.
		 * Its own stacks are not checked: alone, it shows impossible pairs
		 * of this program too (it does not prove its reads whole).
		 */
		cr_assert_gt(json_integer_value(json_object_get(r, "pairs")), 1000,
		             "%s: CPython's sampler read too little", what);
		char *seen = json_dumps(impossible, 0);
		cr_log_info("%s: CPython's sampler's impossible pairs: %s", what, seen ? seen : "?");
		free(seen);
		cr_assert_gt(stats.marker_honoured, 0, "%s: the marker's path never ran", what);
		/* Its writes over this reader's marker were told from the interpreter's moves. */
		cr_assert_gt(stats.marker_foreign, 0, "%s: CPython's sampler's writes went unseen", what);
		json_decref(r);
		test_target_kill(&second);
	}
	uw_sample_free(&s);
	uw_close(t);
	json_decref(report);
	test_target_kill(&target);
}

Test(sample, no_impossible_callers, .timeout = 600)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct uw_options written = {.cache_budget = 0}, unwritten = {.no_write = true};
	/*
	 * With the in-kernel reader too: on 3.11-3.14 threads that tear are
	 * watched and shot, paced, as pyprofd record --rate max, so that every
	 * sample of a watched thread is shot and its copy taken when reads tear;
	 * on every version the kernel's look proves threads that did not run.
	 */
	struct uw_error kerr = {0};
	struct uw_options kernel = {.kreader = uw_kreader_open(&kerr), .kernel_pace = true};
	cr_assert(kernel.kreader || geteuid() != 0, "the in-kernel reader, as root: %s", kerr.msg);
	/* As the daemon samples: the marker written, no pacing. */
	struct uw_options quiet = {.kreader = kernel.kreader};
	for (size_t i = 0; i < n; i++) {
		callgraph_check(&pys[i], &written, false, false);
		/* 3.15: the marker's path and the proof without it. */
		if (pys[i].minor >= 15)
			callgraph_check(&pys[i], &unwritten, false, false);
		/* Every version: the kernel's look at which threads ran proves stacks on all of them. */
		if (kernel.kreader)
			callgraph_check(&pys[i], &kernel, false, false);
		/* Every version: samples of a process fallen quiet are the kernel's copies, never a mix of moments. */
		if (kernel.kreader)
			callgraph_check(&pys[i], &quiet, false, true);
	}
	uw_kreader_close(kernel.kreader);
}

/* Samples of a process left in the moment between a call and its link (below). */
#define LINKED_LATE_SAMPLES 50

/*
 * 3.11+: a frame read before its caller's link was written into it is no
 * stack.  tests/targets/hostile.py holds the main thread in that moment
 * while it sleeps (it cannot be hit on purpose in a running one: the
 * impossible-callers test met it about 1 run in 5 on 3.11): its innermost
 * frame with no caller and no mark of an entry from C ("unlinked"), or, on
 * 3.11-3.12, not yet run and linked to a frame of another thread
 * ("being-called").  Read as they stand, they are a lone frame and a stack
 * that runs from one thread's frames into another's.  The thread is
 * reported, without a stack; the other threads keep theirs.
 */
static void linked_late_check(const struct python *py, const char *shape)
{
	char script[1024], what[PATH_MAX + 64];
	python_describe(py, what, sizeof what);
	target_script("hostile.py", script, sizeof script);
	const char *args[] = {"-I", script, shape, "{report}", NULL};
	struct test_target target;
	test_target_start_python(&target, py, args);
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	struct uw_target *t = test_uw_open(target.pid);
	struct uw_sample s = {0};
	uint64_t bystanders = 0, stackless = 0;
	for (int i = 0; i < LINKED_LATE_SAMPLES; i++) {
		struct uw_error err = {0};
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s, %s: sample: %s", what, shape, err.msg);
		cr_assert_eq(s.nthreads, 2, "%s, %s: %u threads, not the main one and the bystander", what,
		             shape, s.nthreads);
		for (uint32_t k = 0; k < s.nthreads; k++) {
			const char *callee = NULL;
			bool bystander = false;
			for (uint32_t st = s.threads[k].stack; st; st = uw_stack_parent(t, st)) {
				const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, st));
				const char *fn = f->function ? f->function : "?";
				cr_assert(!callee || strcmp(callee, "linked_late") != 0 || strcmp(fn, "calls_late") == 0,
				          "%s, %s: a stack shows %s calling linked_late", what, shape, fn);
				cr_assert(strcmp(fn, "linked_late") != 0 || uw_stack_parent(t, st),
				          "%s, %s: a stack of linked_late alone", what, shape);
				bystander = bystander || strcmp(fn, "bystander") == 0;
				callee = fn;
			}
			bystanders += bystander;
			/* No stack, or the lone <moving> frame of a thread nothing of which was proven. */
			stackless += !s.threads[k].stack || s.threads[k].moving;
		}
	}
	/* The bystander's stack stood; the main thread had none to show. */
	cr_assert_eq(bystanders, LINKED_LATE_SAMPLES, "%s, %s: the bystander's stack in %llu samples of %d",
	             what, shape, (unsigned long long)bystanders, LINKED_LATE_SAMPLES);
	cr_assert_eq(stackless, LINKED_LATE_SAMPLES, "%s, %s: the main thread without a stack in %llu samples of %d",
	             what, shape, (unsigned long long)stackless, LINKED_LATE_SAMPLES);
	uw_sample_free(&s);
	uw_close(t);
	test_target_kill(&target);
}

Test(sample, a_frame_read_before_its_link_is_no_stack, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX), ran = 0;
	for (size_t i = 0; i < n; i++) {
		if (pys[i].minor < 11)
			continue;
		linked_late_check(&pys[i], "unlinked");
		if (pys[i].minor <= 12)
			linked_late_check(&pys[i], "being-called");
		ran++;
	}
	if (!ran)
		cr_skip_test("no CPython 3.11+");
}

/* CPython 3.15's own sampler reading the same process, both writing the frame-cache marker. */
Test(sample, beside_cpythons_sampler, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX), ran = 0;
	struct uw_options written = {.cache_budget = 0};
	for (size_t i = 0; i < n; i++) {
		if (pys[i].minor < 15 || pys[i].debug)
			continue;
		callgraph_check(&pys[i], &written, true, false);
		ran++;
	}
	if (!ran)
		cr_skip_test("no CPython 3.15 (make pythons)");
}

/* Parts of a moving thread among which one at least was proven by the re-read alone. */
#define MOVING_ENOUGH 20
/* Seconds the call-heavy target is sampled at most, waiting for a read that tears (3.15). */
#define MOVING_SAMPLING_MAX_S 30

/*
 * Whether callee may be called by caller in tests/targets/shares.py: the
 * calls its source makes, and the standard library's below main (its
 * random draws and its reports).
 */
static bool shares_call(const char *caller, const char *callee)
{
	static const char *const calls[][2] = {
	    {"<module>", "main"},       {"main", "below"},          {"below", "below"},
	    {"below", "phase_plain"},   {"below", "phase_calls"},   {"below", "phase_deep"},
	    {"phase_calls", "hop"},     {"hop", "tiny"},            {"phase_deep", "nested"},
	    {"nested", "nested"},       {"nested", "phase_plain"},  {"main", "uniform"},
	    {"main", "report_write"},
	};
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
		if (strcmp(caller, calls[i][0]) == 0 && strcmp(callee, calls[i][1]) == 0)
			return true;
	/* What the standard library calls is its own. */
	return strcmp(caller, "uniform") == 0 || strcmp(caller, "report_write") == 0;
}

/*
 * Never a wrong stack: every stack of a thread that calls and returns
 * faster than it can be read is one its source can make, from <module>
 * down, whatever proved it (a whole read, the part below 3.15's marker,
 * which ends at the frame that held).  A thread that moved through every
 * read is counted as a lone <moving> frame, nothing else.  With 3.15's
 * marker writes off no part is taken.  Returns the parts taken.
 */
static uint64_t moving_check(const struct python *py, bool no_write)
{
	char what[PATH_MAX + 64];
	python_describe(py, what, sizeof what);
	struct test_target target;
	json_decref(test_target_start_script(&target, py, "shares.py"));
	struct uw_target *t = test_uw_open(target.pid);
	struct uw_options opts = {.no_write = no_write};
	uw_configure(t, &opts);
	struct uw_sample s = {0};
	uint64_t lone = 0, in_calls = 0, stacks = 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	struct uw_stats st = {0};
	do {
		struct uw_error err = {0};
		int rc = uw_sample(t, &s, &err);
		cr_assert(rc == 0 || err.status == UW_ECORRUPT, "%s: sample: %s", what, err.msg);
		for (uint32_t k = 0; rc == 0 && k < s.nthreads; k++) {
			const char *names[UW_MAX_FRAMES];
			uint32_t depth = 0;
			for (uint32_t at = s.threads[k].stack; at && depth < UW_MAX_FRAMES; at = uw_stack_parent(t, at)) {
				const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, at));
				if (f->kind == UW_FRAME_MOVING) {
					cr_assert(depth == 0 && uw_stack_parent(t, at) == 0,
					          "%s: a <moving> frame with others", what);
					cr_assert(s.threads[k].moving, "%s: a <moving> frame on a thread not flagged", what);
					lone++;
				}
				names[depth++] = f->function ? f->function : "?";
			}
			cr_assert(!s.threads[k].moving || (depth == 1 && strcmp(names[0], "<moving>") == 0),
			          "%s: a thread flagged moving with a stack of %u frames", what, depth);
			if (!depth || s.threads[k].moving)
				continue;
			/* names[] is innermost first: each caller, outermost on, calls the next. */
			cr_assert_str_eq(names[depth - 1], "<module>", "%s: a stack from %s", what, names[depth - 1]);
			for (uint32_t i = depth - 1; i > 0; i--)
				cr_assert(shares_call(names[i], names[i - 1]), "%s: %s calls %s at depth %u of %u",
				          what, names[i], names[i - 1], depth - i, depth);
			bool calls = false;
			for (uint32_t i = 0; i < depth; i++)
				calls = calls || strcmp(names[i], "phase_calls") == 0;
			in_calls += calls;
			stacks++;
		}
		usleep(1000);
		clock_gettime(CLOCK_MONOTONIC, &now);
		uw_stats(t, &st);
		/* A loaded host runs the target and this reader on one CPU in turn: nothing tears then. */
	} while (now.tv_sec - start.tv_sec < 3 ||
	         (py->minor >= 15 && !no_write && !py->debug && !st.marker_partial &&
	          now.tv_sec - start.tv_sec < MOVING_SAMPLING_MAX_S));
	cr_assert_gt(in_calls, 0, "%s: the call-heavy phase never sampled", what);
	cr_assert_eq(st.torn_threads, lone, "%s: %llu threads counted torn, %llu <moving> frames", what,
	             (unsigned long long)st.torn_threads, (unsigned long long)lone);
	if (no_write)
		cr_assert_eq(st.marker_partial, 0, "%s: a part taken with the marker's writes off", what);
	/*
	 * Most parts are proven by the walk's own re-read, when the other
	 * threads' stacks are, not by reads after it (which land later, in the
	 * code that follows more often): of a few dozen, some at least.
	 */
	cr_assert_leq(st.marker_partial_reread, st.marker_partial, "%s", what);
	if (st.marker_partial >= MOVING_ENOUGH)
		cr_assert_gt(st.marker_partial_reread, 0, "%s: none of %llu parts proven by the re-read",
		             what, (unsigned long long)st.marker_partial);
	cr_log_info("%s%s: %llu stacks, %llu parts below the marker, %llu lone <moving>", what,
	            no_write ? " (no marker writes)" : "", (unsigned long long)stacks,
	            (unsigned long long)st.marker_partial, (unsigned long long)lone);
	uw_sample_free(&s);
	uw_close(t);
	test_target_kill(&target);
	return st.marker_partial;
}

Test(sample, moving_thread_never_gets_a_wrong_stack, .timeout = 400)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		moving_check(&pys[i], false);
		if (pys[i].minor >= 15)
			moving_check(&pys[i], true);
	}
}

/*
 * A CPython newer than the unwinder knows (one built from CPython's main
 * branch, when there) is refused by name, never read with a guess at its
 * layout.
 */
Test(sample, a_newer_cpython_is_refused_by_its_version, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_find(pys, PYTHONS_MAX), ran = 0;
	for (size_t i = 0; i < n; i++) {
		if (pys[i].supported || pys[i].major != 3 || pys[i].minor <= 15)
			continue;
		struct test_target target;
		json_decref(test_target_start_script(&target, &pys[i], "shares.py"));
		struct uw_error err = {0};
		struct uw_target *t = uw_open(target.pid, &err);
		char version[32];
		snprintf(version, sizeof version, "Python %u.%u", pys[i].major, pys[i].minor);
		cr_assert_null(t, "%s: read as a version it is not", pys[i].path);
		cr_assert_eq(err.status, UW_EVERSION, "%s: %s", pys[i].path, err.msg);
		cr_assert_not_null(strstr(err.msg, version), "%s: the refusal does not name %s: %s",
		                   pys[i].path, version, err.msg);
		test_target_kill(&target);
		ran++;
	}
	if (!ran)
		cr_skip_test("no CPython newer than 3.15 (built from CPython's main branch)");
}
