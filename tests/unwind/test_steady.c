/*
 * What a fleet pays for leaving the sampler on: once a target's stacks are
 * known, a sample allocates nothing; an epoch ends with one call that still
 * sees every id it ends; a process's identity is read as the kernel sees it.
 *
 * The suite is linked with malloc, calloc and realloc wrapped
 * (-Wl,--wrap=...): every allocation the unwinder asks for passes through the
 * counters below.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "pythons.h"
#include "unwind.h"
#include "uw_open.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

/* Owned by the wrappers: each test process (criterion forks one a test) counts its own. */
static unsigned long steady_allocations;

void *__wrap_malloc(size_t size)
{
	steady_allocations++;
	return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size)
{
	steady_allocations++;
	return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size)
{
	steady_allocations++;
	return __real_realloc(p, size);
}

TestSuite(steady, .init = helpers_init, .fini = helpers_fini);

/*
 * Every supported interpreter, twenty blocked threads, every mode: after a few
 * samples have met every code object, a thousand more allocate nothing.
 */
Test(steady, known_stacks_allocate_nothing, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	cr_assert_gt(n, 0);
	static const struct uw_options modes[] = {
		{.flags = UW_SNAP_NATIVE | UW_SNAP_GC, .mode = UW_MODE_WALL},
		{.flags = UW_SNAP_NATIVE, .mode = UW_MODE_CPU},
		{.flags = UW_SNAP_NATIVE, .mode = UW_MODE_GIL},
		/* The daemon's: idle threads told apart, thread names read now and then. */
		{.flags = UW_SNAP_NATIVE, .mode = UW_MODE_WALL, .want_idle = true},
	};
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		test_target_start(&target, &pys[i], "threads20");
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_sample s = {0};
		for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
			uw_configure(t, &modes[m]);
			struct uw_error err = {0};
			for (int warm = 0; warm < 5; warm++)
				cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
			unsigned long before = steady_allocations;
			uint32_t threads_seen = 0, idle_seen = 0;
			for (int k = 0; k < 1000; k++) {
				cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
				threads_seen += s.nthreads;
				for (uint32_t h = 0; h < s.nthreads; h++)
					idle_seen += s.threads[h].idle;
			}
			/* Twenty blocked threads: with idle told, most samples are idle ones. */
			if (modes[m].want_idle)
				cr_assert_geq(idle_seen, 1000u * 20, "%s: %u idle thread samples of %u",
				              pys[i].path, idle_seen, threads_seen);
			cr_assert_eq(steady_allocations - before, 0,
			             "%s, mode %zu: %lu allocations in 1000 samples of known stacks",
			             pys[i].path, m, steady_allocations - before);
			if (modes[m].mode == UW_MODE_WALL)
				cr_assert_geq(threads_seen, 1000u * 21, "%s: the threads were not all sampled",
				              pys[i].path);
		}
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}

/* Frames of every thread of one snapshot. */
static uint32_t steady_frames(struct uw_target *t, const char *python)
{
	struct uw_snapshot snap;
	struct uw_error err = {0};
	cr_assert_eq(uw_snapshot(t, 0, &snap, &err), 0, "%s: %s", python, err.msg);
	uint32_t frames = 0;
	for (uint32_t i = 0; i < snap.nthreads; i++)
		frames += snap.threads[i].nframes;
	uw_snapshot_release(&snap);
	return frames;
}

/*
 * A stack thousands of frames deep grows the working arrays past the room a
 * sample keeps; once the stacks are shallow again that room is given back
 * within UW_SCRATCH_TRIM_SAMPLES samples, and sampling is steady again (a
 * daemon kept the room of every target's largest sample for good, and its
 * RSS crept as its targets met one).
 */
Test(steady, room_a_deep_stack_took_is_given_back, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	cr_assert_gt(n, 0);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		test_target_start(&target, &pys[i], "dive");
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		struct uw_stats st;
		for (int k = 0; k < 5; k++)
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		uw_stats(t, &st);
		cr_assert_gt(st.scratch_bytes, UW_SCRATCH_KEEP_BYTES,
		             "%s: a stack 3000 deep took only %llu bytes of room", pys[i].path,
		             (unsigned long long)st.scratch_bytes);

		cr_assert_eq(kill(target.pid, SIGUSR1), 0);
		for (int k = 0; k < 1000 && steady_frames(t, pys[i].path) > 100; k++)
			usleep(10 * 1000);
		cr_assert_leq(steady_frames(t, pys[i].path), 100, "%s: the stack did not come back up",
		              pys[i].path);
		for (unsigned k = 0; k < 2 * UW_SCRATCH_TRIM_SAMPLES; k++)
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		uw_stats(t, &st);
		cr_assert_leq(st.scratch_bytes, UW_SCRATCH_KEEP_BYTES,
		              "%s: shallow stacks still hold %llu bytes of room", pys[i].path,
		              (unsigned long long)st.scratch_bytes);

		/* Given back once: the shallow stacks sample without allocating again. */
		unsigned long before = steady_allocations;
		for (unsigned k = 0; k < 2 * UW_SCRATCH_TRIM_SAMPLES; k++)
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
		cr_assert_eq(steady_allocations - before, 0, "%s: %lu allocations in %u shallow samples",
		             pys[i].path, steady_allocations - before, 2 * UW_SCRATCH_TRIM_SAMPLES);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}

/* What the epoch callback saw, against what the sample before it gave. */
struct epoch_watch {
	uint32_t stack;           /* an id of the previous sample */
	char spelled[4096];       /* its frames as that sample spelled them */
	char spelled_at_end[4096];
	unsigned calls;
};

static void epoch_spell(const struct uw_target *t, uint32_t stack, char *out, size_t len)
{
	size_t used = 0;
	out[0] = '\0';
	for (int depth = 0; stack && depth < 256 && used < len; depth++, stack = uw_stack_parent(t, stack)) {
		const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, stack));
		int w = snprintf(out + used, len - used, "%s:%d;", f->function, f->line);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

static void epoch_ended(void *ctx, const struct uw_target *t)
{
	struct epoch_watch *watch = ctx;
	watch->calls++;
	epoch_spell(t, watch->stack, watch->spelled_at_end, sizeof watch->spelled_at_end);
}

/*
 * A budget every sample exceeds: each sample starts a new epoch, and the
 * callback, called once for each, still reads the ending epoch's ids.  With
 * room in the budget it is never called.
 */
Test(steady, an_epoch_ends_with_one_call_that_sees_its_ids, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		struct test_target target;
		test_target_start(&target, &pys[i], "recursion");
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		struct uw_target *t = test_uw_open(target.pid);
		struct epoch_watch watch = {0};
		struct uw_options tight = {.cache_budget = 1, .on_epoch_end = epoch_ended, .epoch_ctx = &watch};
		uw_configure(t, &tight);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		uint64_t first_epoch = 0;
		unsigned first_calls = 0;
		for (unsigned k = 0; k < 20; k++) {
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
			if (k == 0) {
				first_epoch = s.epoch;
				first_calls = watch.calls;
			} else {
				cr_assert_str_eq(watch.spelled_at_end, watch.spelled,
				                 "%s: the ending epoch's ids read differently in the callback",
				                 pys[i].path);
			}
			cr_assert_eq(watch.calls - first_calls, k, "%s: %u calls in %u samples", pys[i].path,
			             watch.calls - first_calls, k);
			cr_assert_eq(s.epoch, first_epoch + k);
			uint32_t deepest = 0;
			for (uint32_t th = 0; th < s.nthreads; th++)
				if (uw_stack_depth(t, s.threads[th].stack) > uw_stack_depth(t, deepest))
					deepest = s.threads[th].stack;
			cr_assert_gt(uw_stack_depth(t, deepest), 10, "%s: no deep stack to watch", pys[i].path);
			watch.stack = deepest;
			epoch_spell(t, deepest, watch.spelled, sizeof watch.spelled);
		}

		struct epoch_watch idle = {0};
		struct uw_options roomy = {.on_epoch_end = epoch_ended, .epoch_ctx = &idle};
		uw_configure(t, &roomy);
		uint64_t epoch = 0;
		for (int k = 0; k < 50; k++) {
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", pys[i].path, err.msg);
			if (k == 0)
				epoch = s.epoch;
			cr_assert_eq(s.epoch, epoch, "%s: an epoch ended with room left", pys[i].path);
		}
		cr_assert_eq(idle.calls, 0, "%s: the callback ran with room in the budget", pys[i].path);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}

/* Field 22 of /proc/PID/stat, read the plain way, for comparison. */
static unsigned long long steady_start_time(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	size_t len = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[len] = '\0';
	char *p = strrchr(buf, ')');
	cr_assert_not_null(p);
	unsigned long long start = 0;
	cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
	                           "%*d %*d %llu",
	                    &start),
	             1);
	return start;
}

/* The identity of this process, of a stopped, a dead and a reaped child. */
Test(steady, process_identity_as_the_kernel_sees_it, .timeout = 30)
{
	struct uw_process_identity id;
	struct uw_error err = {0};
	cr_assert_eq(uw_process_identity(getpid(), &id, &err), 0, "%s", err.msg);
	cr_assert_eq(id.start_time, steady_start_time(getpid()));
	cr_assert_eq(id.uid[0], getuid());
	cr_assert_eq(id.uid[1], geteuid());
	cr_assert_eq(id.gid[0], getgid());
	cr_assert_eq(id.state, 'R');

	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		/* A name with ") " in it: the parser must not stop at the first parenthesis. */
		prctl(PR_SET_NAME, "x) S 1 (y");
		for (;;)
			pause();
	}
	usleep(100 * 1000);
	cr_assert_eq(kill(child, SIGSTOP), 0);
	int status;
	cr_assert_eq(waitpid(child, &status, WUNTRACED), child);
	cr_assert_eq(uw_process_identity(child, &id, &err), 0, "%s", err.msg);
	cr_assert_eq(id.state, 'T', "a stopped child reads as '%c'", id.state);
	cr_assert_eq(id.start_time, steady_start_time(child));

	cr_assert_eq(kill(child, SIGKILL), 0);
	for (int k = 0; k < 200; k++) {
		cr_assert_eq(uw_process_identity(child, &id, &err), 0, "%s", err.msg);
		if (id.state == 'Z')
			break;
		usleep(10 * 1000);
	}
	cr_assert_eq(id.state, 'Z', "a dead, unreaped child reads as '%c'", id.state);
	cr_assert_eq(waitpid(child, &status, 0), child);
	cr_assert_eq(uw_process_identity(child, &id, &err), -1);
	cr_assert_eq(err.status, UW_ENOPROC, "a reaped child: %s", err.msg);
	cr_assert_eq(uw_process_identity(-1, &id, &err), -1);
	cr_assert_eq(err.status, UW_ENOPROC, "pid -1: %s", err.msg);
}

/* The permitted capabilities of this process, asked of the kernel rather than of /proc. */
static uint64_t steady_cap_permitted(void)
{
	struct __user_cap_header_struct head = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {{0}};
	cr_assert_eq(syscall(SYS_capget, &head, data), 0);
	return (uint64_t)data[0].permitted | (uint64_t)data[1].permitted << 32;
}

/*
 * What decides who besides root may trace a process: dumpable, its
 * capabilities.  Dumpable shows only in a process of another user than
 * root (root's own files are root's either way), so root's test drops the
 * child to nobody first.
 */
Test(steady, process_identity_knows_dumpable_and_capabilities, .timeout = 30)
{
	struct uw_process_identity id;
	struct uw_error err = {0};
	cr_assert_eq(uw_process_identity(getpid(), &id, &err), 0, "%s", err.msg);
	cr_assert_eq(id.cap_permitted, steady_cap_permitted());

	int told[2], go[2];
	cr_assert_eq(pipe(told), 0);
	cr_assert_eq(pipe(go), 0);
	pid_t child = fork();
	cr_assert_geq(child, 0);
	if (child == 0) {
		char c;
		if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
		                       setresuid(65534, 65534, 65534) != 0))
			_exit(1);
		/* Changing ids made it undumpable: as its user may trace it again. */
		prctl(PR_SET_DUMPABLE, 1);
		(void)!write(told[1], "d", 1);
		(void)!read(go[0], &c, 1);
		/* As a process that guards its secrets does (ssh-agent). */
		prctl(PR_SET_DUMPABLE, 0);
		(void)!write(told[1], "u", 1);
		for (;;)
			pause();
	}
	char c;
	cr_assert_eq(read(told[0], &c, 1), 1, "the child could not become nobody");
	int rc = uw_process_identity(child, &id, &err);
	bool dumpable = id.dumpable;
	uint64_t caps = id.cap_permitted;
	cr_assert_eq(write(go[1], "", 1), 1);
	cr_assert_eq(read(told[0], &c, 1), 1);
	int rc_after = uw_process_identity(child, &id, &err);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	cr_assert_eq(rc, 0, "%s", err.msg);
	cr_assert_eq(rc_after, 0, "%s", err.msg);
	cr_assert(dumpable, "a dumpable child reads as undumpable");
	cr_assert_eq(caps, geteuid() == 0 ? 0 : steady_cap_permitted(), "the child's capabilities");
	cr_assert_not(id.dumpable, "a child that made itself undumpable reads as dumpable");
	cr_assert_eq(id.uid[0], id.uid[1], "only dumpable tells it apart, not its ids");
}
