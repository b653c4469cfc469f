/*
 * What the unwinder keeps of each thread between samples (its chain, its
 * kernel state through a descriptor kept open), and the kernel's id of a
 * thread where CPython 3.8-3.10 does not record it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "native.h"
#include "procstat.h"
#include "unwind_internal.h"

/* Bytes of struct pthread searched for the kernel thread id (3.8-3.10). */
#define PTHREAD_SCAN_BYTES 1024
/* Where glibc on x86-64 keeps `tid` in struct pthread: tried first. */
#define PTHREAD_TID_GLIBC_X86_64 720
/* Looks for the tid in struct pthread before giving up on a target. */
#define THREADS_TID_SEARCHES 3
/* stat_fd of a thread whose id /proc does not know (in a pid namespace of its own). */
#define THREADS_NO_TASK (-2)

static void threads_close_stat(struct uw_target *t, struct thread_cache *tc)
{
	if (tc->stat_fd < 0)
		return;
	close(tc->stat_fd);
	tc->stat_fd = -1;
	proc_fds_add(t, -1);
}

static void threads_still_close(struct uw_target *t, struct thread_still *st)
{
	sched_files_close(t, &st->files);
	st->looked = false;
	st->valid = st->holds = st->armed = false;
}

void threads_still_end(struct uw_target *t, struct thread_cache *tc)
{
	threads_still_close(t, &tc->still);
}

void threads_unwatch(struct uw_target *t, struct thread_cache *tc)
{
	if (tc->kernel.slot >= 0 && t->opts.kreader)
		kread_unwatch(t->opts.kreader, tc->kernel.slot);
	tc->kernel.slot = -1;
	tc->kernel.tid = 0;
}

static void threads_clear_one(struct uw_target *t, struct thread_cache *tc)
{
	threads_unwatch(t, tc);
	native_forget(t, tc);
	threads_close_stat(t, tc);
	threads_still_close(t, &tc->still);
	free(tc->chain);
	free(tc->ctx);
	same_bytes_free(&tc->same);
}

void threads_free(struct uw_target *t)
{
	for (uint32_t i = 0; i < t->nthreads; i++)
		threads_clear_one(t, &t->threads[i]);
	free(t->threads);
	t->threads = NULL;
	t->nthreads = t->threads_cap = 0;
}

/* Threads are met in the same order every sample, so `hint` nearly always hits. */
struct thread_cache *threads_lookup(struct uw_target *t, raddr_t tstate, uint32_t hint,
                                    struct uw_error *err)
{
	if (hint < t->nthreads && t->threads[hint].tstate == tstate)
		return &t->threads[hint];
	for (uint32_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].tstate == tstate)
			return &t->threads[i];
	if (array_reserve((void **)&t->threads, &t->threads_cap, t->nthreads, sizeof *t->threads, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	struct thread_cache *tc = &t->threads[t->nthreads++];
	*tc = (struct thread_cache){.tstate = tstate, .stat_fd = -1, .stat_tid = -1,
	                            .still = {.files = SCHED_FILES_NONE, .proc_tid_of = -1},
	                            .kernel = {.slot = -1}, .native = {.shot_slot = -1}};
	return tc;
}

/* Forget the threads that were not in this sample: they ended. */
void threads_sweep(struct uw_target *t)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < t->nthreads; i++) {
		if (t->threads[i].seen == t->sample_gen) {
			/* Nothing ended, nothing moves: no copy of each cache onto itself every sample. */
			if (k != i)
				t->threads[k] = t->threads[i];
			k++;
		} else
			threads_clear_one(t, &t->threads[i]);
	}
	t->nthreads = k;
}

size_t threads_bytes(const struct uw_target *t)
{
	size_t bytes = t->threads_cap * sizeof *t->threads;
	for (uint32_t i = 0; i < t->nthreads; i++)
		bytes += t->threads[i].cap * sizeof *t->threads[i].chain +
		         t->threads[i].same.cap * sizeof *t->threads[i].same.reads + t->threads[i].same.bytes_cap;
	return bytes;
}

/*
 * The tids of the process's threads as /proc numbers them, and with own_tids
 * as the process itself does (they differ in a pid namespace of its own).
 * Count, or -1; *tids (and *own_tids) malloc'd.
 */
static int threads_tasks(struct uw_target *t, pid_t **tids, pid_t **own_tids)
{
	*tids = malloc(UW_MAX_THREADS * sizeof **tids);
	if (own_tids)
		*own_tids = malloc(UW_MAX_THREADS * sizeof **own_tids);
	if (!*tids || (own_tids && !*own_tids))
		return -1;
	return proc_tasks(t->pid, *tids, own_tids ? *own_tids : NULL, UW_MAX_THREADS);
}

/*
 * The id /proc gives the thread the process knows as tid.  In a pid
 * namespace of its own (a container) that is another number, found once per
 * thread: its state descriptor is kept open after.
 */
int64_t threads_proc_tid(struct uw_target *t, int64_t tid)
{
	if (!t->pid_namespace_nested)
		return tid;
	pid_t *tids = NULL, *own = NULL;
	int n = threads_tasks(t, &tids, &own);
	int64_t found = -1;
	for (int i = 0; i < n && found < 0; i++)
		if (own[i] == tid)
			found = tids[i];
	free(tids);
	free(own);
	return found;
}

/*
 * What this sample's look saw of the thread tid (as the process knows it):
 * NULL when it did not tell of it.  /proc's id of it is kept, as finding it in
 * a pid namespace of the process's own lists the process's tasks.
 */
static const struct kstill_task *threads_looked(struct uw_target *t, struct thread_cache *tc, int64_t tid)
{
	struct thread_still *st = &tc->still;
	if (!t->look || tid <= 0)
		return NULL;
	if (st->proc_tid_of != tid) {
		st->proc_tid = threads_proc_tid(t, tid);
		st->proc_tid_of = tid;
	}
	return st->proc_tid > 0 ? still_task_seen(t, (pid_t)st->proc_tid, &st->look_hint) : NULL;
}

/* What this sample's look saw of the thread (R: on a CPU, Q: queued for one, S: asleep), 0 if it did not. */
static char threads_looked_exactly(struct uw_target *t, struct thread_cache *tc, int64_t tid)
{
	const struct kstill_task *seen = threads_looked(t, tc, tid);
	if (!seen)
		return 0;
	return seen->state == KSTILL_RUNS     ? 'R'
	       : seen->state == KSTILL_QUEUED ? 'Q'
	       : seen->state == KSTILL_OFF    ? 'S'
	                                      : 0;
}

/* The same as /proc tells it: R for on a CPU or queued for one. */
static char threads_looked_state(struct uw_target *t, struct thread_cache *tc, int64_t tid)
{
	char looked = threads_looked_exactly(t, tc, tid);
	return looked == 'Q' ? 'R' : looked;
}

/*
 * A fork's child holds its parent's thread states until its interpreter
 * clears them after the fork, which on a busy host can be samples later:
 * their ids are the parent's threads', no task of the child.  A thread is
 * proven the process's own once; one that is not is looked at again each
 * sample, which lasts only as long as that window (or a thread's exit).
 */
bool threads_own(struct uw_target *t, struct thread_cache *tc, int64_t tid)
{
	if (tid <= 0 || tc->own_tid == tid)
		return true;
	int64_t proc_tid = threads_proc_tid(t, tid);
	if (proc_tid <= 0)
		return false;
	char path[96];
	snprintf(path, sizeof path, "/proc/%d/task/%lld", (int)t->pid, (long long)proc_tid);
	if (access(path, F_OK) != 0)
		return errno != ENOENT; /* what cannot be judged is kept */
	tc->own_tid = tid;
	return true;
}

/* The kernel's state letter of a thread: from this sample's look, else through a descriptor kept open. */
char threads_kernel_state(struct uw_target *t, struct thread_cache *tc, int64_t tid)
{
	if (tid <= 0)
		return '?';
	/* The kernel's look at the thread, taken as the sample began: no /proc read. */
	char looked = threads_looked_state(t, tc, tid);
	if (looked)
		return looked;
	if (tc->stat_tid != tid)
		threads_close_stat(t, tc);
	/* A thread the namespace's ids did not show is not looked for again every sample. */
	if (tc->stat_fd == THREADS_NO_TASK && tc->stat_tid == tid)
		return '?';
	int fd = tc->stat_fd;
	if (fd < 0) {
		char path[96];
		int64_t proc_tid = threads_proc_tid(t, tid);
		if (proc_tid <= 0) {
			tc->stat_fd = THREADS_NO_TASK;
			tc->stat_tid = tid;
			return '?';
		}
		snprintf(path, sizeof path, "/proc/%d/task/%lld/stat", (int)t->pid,
		         (long long)proc_tid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return '?';
		if (proc_fds_room(t, 1)) {
			tc->stat_fd = fd;
			tc->stat_tid = tid;
			proc_fds_add(t, 1);
		}
	}
	char buf[512];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	if (fd != tc->stat_fd)
		close(fd);
	if (n <= 0) {
		threads_close_stat(t, tc);
		return '?';
	}
	buf[n] = '\0';
	/* The letter alone: parsing the fields after it cost as much as the read. */
	return proc_stat_state_letter(buf);
}

/* One line of /proc/PID/NAME or /proc/PID/task/TID/comm into out, without its newline; false if unread. */
static bool threads_read_comm(pid_t pid, int64_t tid, char out[UW_THREAD_NAME_LEN])
{
	char path[96], buf[64];
	if (tid > 0)
		snprintf(path, sizeof path, "task/%lld/comm", (long long)tid);
	else
		snprintf(path, sizeof path, "comm");
	ssize_t n = uw_proc_read(pid, path, buf, sizeof buf);
	if (n <= 0)
		return false;
	buf[strcspn(buf, "\n")] = '\0';
	/* The kernel's names fit; a longer line is cut, never overrun. */
	size_t len = strnlen(buf, UW_THREAD_NAME_LEN - 1);
	memcpy(out, buf, len);
	out[len] = '\0';
	return true;
}

/*
 * Whether a thread's Python name is due a look: a thread (ident and tid)
 * new to its cache, or its wait since the last look over (a program may
 * rename a thread), within the sample's few lookups.
 */
static bool threads_pyname_due(struct uw_target *t, struct thread_cache *tc, int64_t tid, uint64_t ident)
{
	if (!ident)
		return false;
	struct pynames *pn = &t->names;
	/* One clock read a sample, not one a thread. */
	if (pn->budget_gen != t->sample_gen) {
		pn->budget_gen = t->sample_gen;
		pn->budget = THREADS_PYNAMES_PER_SAMPLE;
		pn->now_ns = clock_mono_ns();
	}
	if (tc->pyname_ident == ident && tc->pyname_tid == tid && pn->now_ns - tc->pyname_ns < tc->pyname_wait_ns)
		return false;
	if (pn->budget == 0)
		return false;
	pn->budget--;
	return true;
}

/*
 * The name Python gave the thread (Thread.name) where threading knows it;
 * else the kernel's.  Names change rarely (a thread names itself once,
 * early): the kernel's is read when a thread is new or its tid changed,
 * then every THREADS_NAME_REFRESH samples, never per sample.  A thread's
 * name that is the process's own is only the program's name, inherited,
 * not one the program gave.
 */
void threads_name(struct uw_target *t, struct thread_cache *tc, int64_t tid, uint64_t ident,
                  char out[UW_THREAD_NAME_LEN])
{
	if (threads_pyname_due(t, tc, tid, ident)) {
		/* Whole, so a name compares equal to itself byte for byte (target.c's seen_name). */
		char name[UW_THREAD_NAME_LEN] = {0};
		bool again = tc->pyname_ident == ident && tc->pyname_tid == tid, found;
		uint64_t now = t->names.now_ns;
		/*
		 * A name found is checked where it lies, one read; looked up whole
		 * when that moved, and now and then all the same (a dict that grew
		 * leaves its old table behind).
		 */
		if (again && tc->pyname_found && now - tc->pyname_full_ns < THREADS_PYNAME_WHOLE_NS &&
		    pynames_same(t, &tc->pyname_seen)) {
			found = true;
		} else {
			struct pyname_seen seen = {0};
			found = pynames_lookup(t, ident, name, &seen) == 1;
			tc->pyname_full_ns = now;
			if (found) {
				memcpy(tc->pyname, name, sizeof name);
				tc->pyname_seen = seen;
			}
		}
		/* A name once found stays through a look that failed: the thread is ending, or a dict moved under the read. */
		tc->pyname_found = found || (again && tc->pyname_found);
		/*
		 * A thread starts before threading lists it: one not found is
		 * looked for again soon, then less and less often.
		 */
		uint64_t wait = again && tc->pyname_wait_ns ? 2 * tc->pyname_wait_ns : THREADS_PYNAME_RETRY_NS;
		tc->pyname_wait_ns = found || wait > THREADS_PYNAME_REFRESH_NS ? THREADS_PYNAME_REFRESH_NS : wait;
		tc->pyname_ident = ident;
		tc->pyname_tid = tid;
		tc->pyname_ns = t->names.now_ns;
	}
	if (tc->pyname_found && tc->pyname_ident == ident && tc->pyname_tid == tid) {
		memcpy(out, tc->pyname, UW_THREAD_NAME_LEN);
		return;
	}
	if (tid > 0 && (tc->name_tid != tid || t->sample_gen - tc->name_gen >= THREADS_NAME_REFRESH)) {
		char comm[UW_THREAD_NAME_LEN] = {0}, process[UW_THREAD_NAME_LEN];
		tc->name_tid = tid;
		tc->name_gen = t->sample_gen;
		tc->name[0] = '\0';
		if (threads_read_comm(t->pid, tid, comm)) {
			bool inherited = threads_read_comm(t->pid, 0, process) && strcmp(comm, process) == 0;
			if (!inherited)
				memcpy(tc->name, comm, sizeof comm);
			else if (tid == t->pid)
				snprintf(tc->name, sizeof tc->name, "MainThread");
		}
	}
	memcpy(out, tc->name, UW_THREAD_NAME_LEN);
}

/*
 * The kernel's state costs a read per thread, which would triple the cost of
 * sampling many threads: it is read only for a thread whose stack stayed as
 * it was, and the verdict then holds while the stack does, for
 * THREADS_IDLE_REFRESH samples.  A thread whose stack changed ran Python
 * since the last sample, so it counts as busy (a wait that just began shows
 * from the next sample); one in a known wait of the standard library is idle
 * at once.
 */
bool threads_idle(struct uw_target *t, struct thread_cache *tc, int64_t tid, bool holds_gil,
                  char state, uint32_t stack)
{
	uint32_t prev = tc->prev_stack;
	/*
	 * Whether the stack's innermost frame is a known wait depends on the
	 * stack id alone (ids and thread caches are reset together): kept with
	 * it, a stack that stays as it was is not looked up again in the ids,
	 * which a daemon with many targets finds out of its caches.
	 */
	bool waits = tc->prev_waits;
	if (!prev || stack != prev) {
		uint32_t frame = stack < t->intern.nstacks ? t->intern.stacks[stack].frame : 0;
		waits = frame && frame < t->intern.nframes && t->intern.frame_keys[frame].waits;
	}
	tc->prev_stack = stack;
	tc->prev_waits = waits;
	if (holds_gil)
		return false;
	if (waits)
		return true;
	/*
	 * The look tells a thread on a CPU from one queued for a CPU.  Queued
	 * with its stack as it was, it is a waiter woken and not yet run (a
	 * sleep's end on a busy host); queued with a stack that moved, it ran
	 * Python and waits for its turn to run more.
	 */
	char looked = threads_looked_exactly(t, tc, tid);
	if (looked == 'Q')
		return !(prev && stack != prev);
	if (looked)
		return looked != 'R';
	if (state != '?')
		return state != 'R';
	/* prev 0: a thread met for the first time, which the kernel alone can judge. */
	if (prev && stack != prev)
		return false;
	if (tc->idle_gen && tc->idle_stack == stack && t->sample_gen - tc->idle_gen < THREADS_IDLE_REFRESH)
		return tc->idle_verdict;
	state = threads_kernel_state(t, tc, tid);
	tc->idle_stack = stack;
	tc->idle_gen = t->sample_gen;
	tc->idle_verdict = state != '?' && state != 'R';
	return tc->idle_verdict;
}

/* -------- native thread ids, 3.8-3.10 -------- */

static bool threads_tid_is_task(int32_t tid, const pid_t *tasks, int ntasks)
{
	for (int i = 0; i < ntasks; i++)
		if (tid > 0 && tid == tasks[i])
			return true;
	return false;
}

/* Learnt once per target: the first place in the descriptor holding one of the process's tids. */
static int threads_tid_offset_find(const uint8_t *buf, size_t len, const pid_t *tasks, int ntasks)
{
	if (PTHREAD_TID_GLIBC_X86_64 + 4 <= len &&
	    threads_tid_is_task(load_i32(buf, PTHREAD_TID_GLIBC_X86_64), tasks, ntasks))
		return PTHREAD_TID_GLIBC_X86_64;
	for (size_t off = 0; off + 4 <= len; off += 4)
		if (threads_tid_is_task(load_i32(buf, (uint32_t)off), tasks, ntasks))
			return (int)off;
	return -1;
}

/*
 * glibc's descriptor on x86-64 opens with its thread control block, whose
 * first and third words point at the descriptor itself; its tid is zero
 * once the thread no longer runs in this process.
 */
static bool threads_glibc_gone(const uint8_t *buf, uint64_t pthread)
{
	return load_u64(buf, 0) == pthread && load_u64(buf, 16) == pthread &&
	       load_i32(buf, PTHREAD_TID_GLIBC_X86_64) == 0;
}

/* glibc and musl: pthread_t is the address of the thread's descriptor, which holds the tid. */
int64_t threads_native_tid(struct uw_target *t, uint64_t pthread)
{
	if (t->pthread_tid_offset < 0) {
		/* A layout of struct pthread not found after a few looks is not there: stop looking. */
		if (t->pthread_tid_searches >= THREADS_TID_SEARCHES)
			return -1;
		uint8_t buf[PTHREAD_SCAN_BYTES];
		if (remote_read(&t->mem, pthread, buf, sizeof buf, NULL) != 0)
			return -1;
		/*
		 * A fork's child, met before it cleared its parent's thread states,
		 * shows those first, and glibc zeroed their tids: no task's id to
		 * find in them.  Told apart, they spend none of the looks.
		 */
		if (threads_glibc_gone(buf, pthread))
			return 0;
		/* struct pthread holds the tid the thread itself was given. */
		pid_t *tasks = NULL, *own = NULL;
		int ntasks = threads_tasks(t, &tasks, t->pid_namespace_nested ? &own : NULL);
		/* Threads that could not be listed (out of descriptors or memory): no look was had. */
		if (ntasks > 0) {
			t->pthread_tid_searches++;
			t->pthread_tid_offset = threads_tid_offset_find(
				buf, sizeof buf, t->pid_namespace_nested ? own : tasks, ntasks);
		}
		free(tasks);
		free(own);
		if (t->pthread_tid_offset < 0)
			return -1;
	}
	const uint8_t *p = view_read(t, pthread + (uint32_t)t->pthread_tid_offset, 4, 0, NULL);
	int32_t tid = p ? load_i32(p, 0) : -1;
	/* The kernel zeroes it as the thread exits, and glibc in a fork's child for the parent's other threads. */
	if (tid == 0)
		return 0;
	return tid > 0 ? tid : -1;
}

/* -------- a thread that stood still, 3.8-3.14 -------- */

/*
 * 3.8-3.10 keep each frame in a heap object of its own, so a deep stack
 * costs a page read per frame at every sample, even while its thread
 * sleeps; from 3.11 the frames lie together but each code object's header
 * is a page of its own.  The kernel can prove instead that the thread ran
 * nothing since its stack was read: the stack read then is its stack now.
 * (3.15's frame-cache marker proves as much from two pages.)
 *
 * The argument.  /proc/PID/task/TID/wchan names a function only while the
 * thread sleeps off every run queue (get_wchan looks, under the thread's
 * pi_lock, for a state other than running or waking, and !on_rq); a thread
 * on a CPU, runnable, or about to sleep but not yet taken off its queue
 * reads "0".  Its schedstat holds three numbers: run time, time waited on a
 * run queue, and the times the thread was put on a CPU, which the
 * scheduler adds one to each time it switches to the thread after it was
 * queued (sched_info_arrive), and which never goes down.  The reads come
 * in this order:
 *
 *   a. schedstat gives line L              (sample j, before its memory is read)
 *   b. wchan shows the thread off          (sample j, before its memory is read)
 *   c. the stack is read, whole            (sample j)
 *   e. schedstat gives L again             (sample m > j, before its memory is read)
 *
 * Suppose the thread ran an instruction between b and e.  Off its queues at
 * b, it had to be woken (queued) and switched to after b, which added one
 * to its count after b, so after a: e would differ from a.  So it ran
 * nothing between b and e, and the stack read at c is its stack at e.  (Its
 * run time alone would not do: a thread put on a CPU a moment ago has had
 * none of it counted yet; and a thread switched to again without leaving
 * its CPU was never taken off its queue, so b did not see it off.)  Only
 * the thread itself moves its frame chain and its frames' instruction
 * positions (a generator's frame joins the chain of the thread running it,
 * which no other thread may resume meanwhile), so that is the stack a walk
 * at e would read.  A kernel that keeps no counts ("0 0 0": no
 * CONFIG_SCHED_INFO) or names no wchan ("0" always) proves nothing, and the
 * frames are read as before.  A sample it proves costs one read of
 * schedstat; wchan is read only to arm the proof again after the thread ran.
 *
 * The descriptors stay open on the task they were opened for: once it
 * exits they read nothing, even if its tid is given to another; and the
 * thread state must still name that tid in the sample that uses the proof.
 * Only threads whose walk reads THREADS_STILL_MIN_PAGES pages or more are
 * proven so, and one the kernel shows on a CPU is looked at again after a
 * wait that doubles up to THREADS_STILL_BACKOFF_MAX samples while it stays
 * busy.  A whole process whose threads all sleep is proven at once, its
 * memory not read at all (still.c).
 *
 * With the in-kernel reader loaded, the kernel's look (kstill.c) gives as
 * much for every task of every target in one system call: a count of its
 * switches away, and whether it is on a CPU.  Then every thread
 * is worth proving, 3.15's too (its marker proves the frames below the
 * innermost, the look the innermost as well), and no /proc file is read.
 */

/* Open the thread's schedstat and wchan, unless open already; false when they cannot be. */
static bool threads_still_open(struct uw_target *t, struct thread_still *st)
{
	if (st->files.sched_fd >= 0 && st->files.wchan_fd >= 0)
		return true;
	if (sched_files_open(t, &st->files, threads_proc_tid(t, st->tid)))
		return true;
	threads_still_close(t, st);
	return false;
}

/*
 * One thread, from the kernel's look: its proof holds, or is armed for the
 * read to come.  False when the look does not tell of it (a process of more
 * than KSTILL_TASKS tasks, one not looked at yet).
 */
static bool threads_still_seen(struct uw_target *t, struct thread_cache *tc)
{
	struct thread_still *st = &tc->still;
	const struct kstill_task *seen = threads_looked(t, tc, st->tid);
	if (!seen)
		return false;
	if (st->valid && st->looked && seen->state != KSTILL_RUNS && seen->switches == st->switches &&
	    seen->start_ns == st->start_ns) {
		st->holds = true;
		return true;
	}
	st->valid = false;
	if (seen->state != KSTILL_RUNS) {
		st->armed_switches = seen->switches;
		st->armed_start = seen->start_ns;
		st->armed = st->armed_looked = true;
	}
	return true;
}

void threads_still_begin(struct uw_target *t)
{
	bool proves = !t->opts.no_cache;
	for (uint32_t i = 0; i < t->nthreads; i++) {
		struct thread_still *st = &t->threads[i].still;
		st->holds = st->armed = st->told = false;
		if (!st->want || !proves)
			continue;
		if (t->look && threads_still_seen(t, &t->threads[i])) {
			st->told = true;
			continue;
		}
		/*
		 * Not told of by the look, or no look: /proc's word, for a deep
		 * stack.  3.15's marker proves more than that is worth.
		 */
		if (st->looked)
			st->valid = st->looked = false;
		if (t->layout.tstate.marker || !st->deep)
			continue;
		if (st->skip) {
			st->skip--;
			st->valid = false;
			continue;
		}
		if (!threads_still_open(t, st))
			continue;
		char run[PROC_SCHED_LINE];
		uint32_t len = proc_sched_line(st->files.sched_fd, run);   /* e, and a */
		if (st->valid && len && len == st->run_len && memcmp(run, st->run, len) == 0) {
			st->holds = true;
			continue;
		}
		st->valid = false;
		if (!proc_sched_line_counts(run, len)) {
			threads_still_close(t, st);
			continue;
		}
		/* A thread on a CPU (or about to be) proves nothing now: its frames are read. */
		if (!sched_files_off(&st->files)) {                         /* b */
			st->backoff = st->backoff ? st->backoff * 2 : 1;
			if (st->backoff > THREADS_STILL_BACKOFF_MAX)
				st->backoff = THREADS_STILL_BACKOFF_MAX;
			st->skip = st->backoff;
			continue;
		}
		st->backoff = 0;
		memcpy(st->armed_run, run, len);
		st->armed_len = len;
		st->armed = true;
		st->armed_looked = false;
	}
}

bool threads_still_stack(struct uw_target *t, struct thread_cache *tc, int64_t tid, raddr_t top,
                         uint32_t *stack, bool *truncated)
{
	const struct thread_still *st = &tc->still;
	if (!st->holds || !st->valid || st->tid != tid || tid <= 0 || st->top != top ||
	    st->flags != t->opts.flags)
		return false;
	*stack = st->stack;
	*truncated = st->truncated;
	return true;
}

void threads_still_after(struct uw_target *t, struct thread_cache *tc, int64_t tid, raddr_t top,
                         uint32_t stack, bool truncated, uint32_t pages)
{
	struct thread_still *st = &tc->still;
	bool armed = st->armed;
	/* The kernel's look tells of every thread for a few tens of ns each: every one is worth it. */
	bool looks = kread_still(t->opts.kreader) != NULL;
	st->deep = pages >= THREADS_STILL_MIN_PAGES;
	st->want = !t->opts.no_cache && tid > 0 && (looks || (!t->layout.tstate.marker && st->deep));
	if (!st->want || st->tid != tid) {
		/* Another thread under this state, or not worth it: begin again from a. */
		threads_still_close(t, st);
		st->tid = tid;
		return;
	}
	st->valid = armed;
	if (!armed)
		return;
	st->looked = st->armed_looked;
	if (st->looked) {
		st->switches = st->armed_switches;
		st->start_ns = st->armed_start;
	} else {
		memcpy(st->run, st->armed_run, st->armed_len);
		st->run_len = st->armed_len;
	}
	st->stack = stack;
	st->truncated = truncated;
	st->top = top;
	st->flags = t->opts.flags;
}
