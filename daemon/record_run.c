/*
 * `pyprofd record -- COMMAND`: start a command and record it from its start
 * together with every process it starts (forks, multiprocessing's workers,
 * other Pythons run by a shell), each attached as soon as its runtime can
 * be read and closed when it exits.  One profile comes out: with more than
 * one process recorded, each stack sits under a frame naming its process.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "contexts.h"
#include "procstat.h"
#include "record.h"

/* Processes followed at most, the recorded ones kept to the end: bounds memory and the profile. */
#define RUN_MAX_PROCS 256
/* How often descendants are looked for and each followed process looked at (exit, exec). */
#define RUN_SCAN_NS 25000000u
/* A process not readable yet is tried this often for its first moments, then less often. */
#define RUN_RETRY_FAST_NS 1000000u
#define RUN_RETRY_FAST_FOR_NS 200000000u
#define RUN_RETRY_SLOW_NS 20000000u
/* No runtime this long after its exec (a dynamic loader maps libpython first): not Python. */
#define RUN_NOT_PYTHON_NS 2000000000u
/* Any other refusal this long (a runtime not initialised yet): given up. */
#define RUN_GIVE_UP_NS 10000000000u
/* Tasks of one process whose children are looked for, and bytes of one children file. */
#define RUN_MAX_TASKS 4096
#define RUN_CHILDREN_BYTES 8192
/* At max rate, rounds of samples between looks for signals. */
#define RUN_SIGNAL_CHECK_EVERY 64
#define RUN_CMDLINE_MAX 512
/* Bytes of the command line a process's root frame shows. */
#define RUN_TITLE_CMDLINE 80

enum run_state {
	RUN_WAITING,  /* tried until it runs Python */
	RUN_SAMPLING,
	RUN_OTHER,    /* not Python (or not readable): only its children are followed, until it execs */
	RUN_DONE,     /* exited, or replaced by an exec (another entry), or given up */
};

struct run_proc {
	pid_t pid;
	uint64_t start_time;
	enum run_state state;
	bool recorded;       /* it was attached: its profile is part of the output */
	uint64_t since_ns;   /* found, or its last exec */
	uint64_t next_try_ns;
	char exe[256];
	char cmdline[RUN_CMDLINE_MAX]; /* for its title: a program may rewrite it (setproctitle) */
	uint64_t code, stack;          /* where its program and stack began: an exec moves them */
	char title[RUN_TITLE_CMDLINE + 48];
	char version[16];
	struct uw_target *t;
	struct profile prof;
	struct record_ticks ticks;
	struct uw_stats stats; /* taken as its target was closed */
	double process_context_polled;
};

struct run {
	const struct record_opts *o;
	struct run_proc *procs[RUN_MAX_PROCS];
	size_t n;
	pid_t command;
	bool command_done;
	int command_status; /* its wait status */
	bool cap_told, failed;
	uint64_t deadline_ns;
	struct record_run timing;
	sigset_t waitset;
};

/* A process now, from its stat line. */
struct run_look {
	struct proc_stat st;
	uint64_t code, stack; /* startcode and startstack: an exec maps them anew */
};

/* 0, or -1 when the process is gone. */
static int run_look(pid_t pid, struct run_look *out)
{
	char buf[1024];
	if (uw_proc_read(pid, "stat", buf, sizeof buf) <= 0 || proc_stat_parse(buf, &out->st) != 0 ||
	    !out->st.has_start_time)
		return -1;
	out->code = out->st.start_code;
	out->stack = out->st.start_stack;
	return 0;
}

/*
 * /proc/PID/exe, and the cmdline (arguments joined by spaces, cut) unless
 * NULL; -1 if the process is gone.
 */
static int run_program(pid_t pid, char *exe, size_t exe_len, char *cmdline, size_t cmd_len)
{
	char link[48];
	snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
	ssize_t n = readlink(link, exe, exe_len - 1);
	exe[n > 0 ? n : 0] = '\0';
	if (!cmdline)
		return 0;
	char buf[RUN_CMDLINE_MAX];
	ssize_t len = uw_proc_read(pid, "cmdline", buf, sizeof buf);
	if (len < 0)
		return -1;
	len = len < (ssize_t)cmd_len ? len : (ssize_t)cmd_len - 1;
	while (len > 0 && buf[len - 1] == '\0')
		len--;
	for (ssize_t i = 0; i < len; i++)
		cmdline[i] = buf[i] ? buf[i] : ' ';
	cmdline[len] = '\0';
	return 0;
}

/* "process PID (COMMAND LINE)", the line cut at a character's start. */
static void run_title(struct run_proc *p)
{
	size_t len = strlen(p->cmdline);
	bool cut = len > RUN_TITLE_CMDLINE;
	if (cut)
		for (len = RUN_TITLE_CMDLINE; len > 0 && ((unsigned char)p->cmdline[len] & 0xc0) == 0x80;)
			len--;
	if (len)
		snprintf(p->title, sizeof p->title, "process %d (%.*s%s)", (int)p->pid, (int)len, p->cmdline,
		         cut ? "..." : "");
	else
		snprintf(p->title, sizeof p->title, "process %d", (int)p->pid);
}

/* A process to follow from now; NULL past the bound (said once) or when it is gone. */
static struct run_proc *run_add(struct run *r, pid_t pid, uint64_t now)
{
	size_t at = r->n;
	/* The room of a process never recorded is taken back once it is done. */
	for (size_t i = 0; at == r->n && i < r->n; i++)
		if (r->procs[i]->state == RUN_DONE && !r->procs[i]->recorded)
			at = i;
	if (at == RUN_MAX_PROCS) {
		if (!r->cap_told)
			fprintf(stderr, "pyprofd: following %d processes already: process %d and those after it "
			                "are not recorded\n", RUN_MAX_PROCS, (int)pid);
		r->cap_told = true;
		return NULL;
	}
	struct run_proc *p = calloc(1, sizeof *p);
	struct run_look look;
	if (!p || run_look(pid, &look) != 0 ||
	    run_program(pid, p->exe, sizeof p->exe, p->cmdline, sizeof p->cmdline) != 0) {
		free(p);
		return NULL;
	}
	p->pid = pid;
	p->start_time = look.st.start_time;
	p->code = look.code;
	p->stack = look.stack;
	p->since_ns = p->next_try_ns = now;
	run_title(p);
	if (at < r->n)
		free(r->procs[at]);
	else
		r->n++;
	r->procs[at] = p;
	return p;
}

/* Whether a process has samples in the profile: one attached only to exec at once has none. */
static bool run_in_profile(const struct run_proc *p)
{
	return p->recorded && p->ticks.counted > 0;
}

/* The entry following pid now, if any. */
static struct run_proc *run_find(const struct run *r, pid_t pid)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->procs[i]->pid == pid && r->procs[i]->state != RUN_DONE)
			return r->procs[i];
	return NULL;
}

/* Stop sampling p: its last read's ticks counted, its stacks spelled out while its ids hold. */
static void run_close(struct run *r, struct run_proc *p, uint64_t now)
{
	if (p->state == RUN_SAMPLING) {
		record_ticks_settle(&p->ticks, now);
		if (p->ticks.failed || profile_settle(&p->prof, p->t) != 0)
			p->prof.failed = r->failed = true;
		uw_stats(p->t, &p->stats);
		record_ticks_free(&p->ticks);
		uw_close(p->t);
		p->t = NULL;
	}
	p->state = RUN_DONE;
}

static void run_attach(struct run *r, struct run_proc *p, struct uw_target *t, uint64_t now)
{
	profile_init(&p->prof);
	p->prof.context_labels = r->o->uw.context_labels;
	p->ticks = (struct record_ticks){.prof = &p->prof};
	struct uw_options uw = r->o->uw;
	uw.on_epoch_end = record_on_epoch_end;
	uw.epoch_ctx = &p->ticks;
	uw_configure(t, &uw);
	record_ticks_start(&p->ticks, r->o->rate, now, r->deadline_ns);
	snprintf(p->version, sizeof p->version, "%s", uw_version(t));
	p->t = t;
	p->state = RUN_SAMPLING;
	p->recorded = true;
}

/* Try to open a process that may run Python by now. */
static void run_try_open(struct run *r, struct run_proc *p, uint64_t now)
{
	struct uw_error err = {0};
	struct uw_target *t = uw_open(p->pid, &err);
	if (t) {
		/* An exec since the last look (a wrapper's exec of python): known as what was opened. */
		struct run_look look;
		if (run_look(p->pid, &look) == 0 &&
		    run_program(p->pid, p->exe, sizeof p->exe, p->cmdline, sizeof p->cmdline) == 0) {
			p->code = look.code;
			p->stack = look.stack;
			run_title(p);
		}
		run_attach(r, p, t, now);
		return;
	}
	uint64_t waited = now - p->since_ns;
	bool command = p->pid == r->command;
	switch (err.status) {
	case UW_ENOPROC:
	case UW_EGONE:
		p->state = RUN_DONE;
		return;
	case UW_ENOTPYTHON:
		if (waited < RUN_NOT_PYTHON_NS)
			break;
		if (command)
			fprintf(stderr, "pyprofd: %s is not a Python process; recording the processes it "
			                "starts\n", p->title);
		p->state = RUN_OTHER;
		return;
	case UW_EPERM:
	case UW_EVERSION:
		uw_error_add_remedy(&err, p->pid);
		fprintf(stderr, "pyprofd: %s not recorded: %s\n", p->title, err.msg);
		p->state = RUN_OTHER;
		return;
	default:
		if (waited < RUN_GIVE_UP_NS)
			break;
		fprintf(stderr, "pyprofd: %s not recorded: still not readable after %u s: %s\n", p->title,
		        (unsigned)(RUN_GIVE_UP_NS / 1000000000u), err.msg);
		p->state = RUN_OTHER;
		return;
	}
	p->next_try_ns = now + (waited < RUN_RETRY_FAST_FOR_NS ? RUN_RETRY_FAST_NS : RUN_RETRY_SLOW_NS);
}

static void run_sample(struct run *r, struct run_proc *p)
{
	struct record_ticks *k = &p->ticks;
	int slot = k->pending_slot ^ 1; /* not the pending read's */
	struct uw_error err;
	err.status = UW_OK;
	err.msg[0] = '\0';
	struct uw_stats before, after;
	if (r->o->uw.kernel_pace)
		uw_stats(p->t, &before);
	uint64_t a = clock_mono_ns();
	int rc = uw_sample(p->t, &k->reads[slot], &err);
	uint64_t b = clock_mono_ns();
	/* A fork's child's parent's threads, not cleared yet, the unwinder leaves out (threads_own). */
	record_ticks_read(k, slot, rc == 0, b);
	double ns = (double)(b - a);
	if (r->o->uw.kernel_pace) {
		uw_stats(p->t, &after);
		ns -= (double)(after.kernel_paced_ns - before.kernel_paced_ns);
	}
	record_time_sample(&r->timing, ns);
	if (rc == 0) {
		r->timing.ok++;
		if (r->o->uw.context_otel || r->o->uw.ncontext_labels)
			contexts_poll_process(p->t, p->pid, (double)b / 1e9, &p->process_context_polled, NULL, 0);
	} else {
		r->timing.failed++;
		if (err.status == UW_EGONE || err.status == UW_ENOPROC) {
			run_close(r, p, b);
		} else if (err.status == UW_EPERM || err.status == UW_ENOMEM) {
			uw_error_add_remedy(&err, p->pid);
			fprintf(stderr, "pyprofd: %s: %s; no longer recorded\n", p->title, err.msg);
			run_close(r, p, b);
		}
	}
	if (k->failed || p->prof.failed)
		r->failed = true; /* out of memory counting: said once the loop ends */
}

/* p's children (of all its tasks) followed from now. */
static void run_children(struct run *r, pid_t pid, uint64_t now)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	char buf[RUN_CHILDREN_BYTES];
	for (unsigned tasks = 0; tasks < RUN_MAX_TASKS && (e = readdir(d)); tasks++) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		char name[64];
		snprintf(name, sizeof name, "task/%.20s/children", e->d_name);
		if (uw_proc_read(pid, name, buf, sizeof buf) <= 0)
			continue;
		/* Space-separated pids; a list cut by the buffer loses its last ones until the next look. */
		for (char *s = buf, *end; *s; s = end) {
			long child = strtol(s, &end, 10);
			if (end == s)
				break;
			if (child > 0 && child <= INT32_MAX && !run_find(r, (pid_t)child))
				run_add(r, (pid_t)child, now);
		}
	}
	closedir(d);
}

/* Each followed process looked at (gone, or another program since an exec), then new children. */
static void run_scan(struct run *r, uint64_t now)
{
	for (size_t i = 0; i < r->n; i++) {
		struct run_proc *p = r->procs[i];
		if (p->state == RUN_DONE)
			continue;
		struct run_look look;
		char exe[sizeof p->exe];
		if (run_look(p->pid, &look) != 0 || look.st.start_time != p->start_time ||
		    look.st.state == 'Z' || look.st.state == 'X') {
			run_close(r, p, now);
			continue;
		}
		run_program(p->pid, exe, sizeof exe, NULL, 0);
		if (strcmp(exe, p->exe) == 0 && look.code == p->code && look.stack == p->stack)
			continue;
		/* An exec: what was recorded stays the old program's; the new one is a process of its own. */
		if (p->recorded) {
			run_close(r, p, now);
			run_add(r, p->pid, now);
			continue;
		}
		run_program(p->pid, p->exe, sizeof p->exe, p->cmdline, sizeof p->cmdline);
		p->code = look.code;
		p->stack = look.stack;
		run_title(p);
		p->state = RUN_WAITING;
		p->since_ns = p->next_try_ns = now;
	}
	for (size_t i = 0; i < r->n; i++)
		if (r->procs[i]->state != RUN_DONE)
			run_children(r, r->procs[i]->pid, now);
}

/* The command reaped once it exits. */
static void run_reap(struct run *r)
{
	int status;
	if (!r->command_done && waitpid(r->command, &status, WNOHANG) == r->command) {
		r->command_done = true;
		r->command_status = status;
	}
}

/*
 * Wait until `until` (monotonic ns; 0: until a signal) or a signal.  A stop
 * signal is sent on to the command, unless the terminal sent it (to the
 * command as well, as the whole foreground group gets it).
 */
static void run_wait(struct run *r, uint64_t until)
{
	uint64_t now = clock_mono_ns();
	struct timespec left = {0, 0};
	if (until > now) {
		left.tv_sec = (time_t)((until - now) / 1000000000u);
		left.tv_nsec = (long)((until - now) % 1000000000u);
	}
	siginfo_t info;
	int sig = sigtimedwait(&r->waitset, &info, until ? &left : NULL);
	if ((sig == SIGINT || sig == SIGTERM) && info.si_code != SI_KERNEL)
		kill(r->command, sig);
}

/* The time of the next thing to do: a tick, a scan, or a process to try again. */
static uint64_t run_next(const struct run *r, uint64_t tick, uint64_t scan)
{
	uint64_t next = tick < scan ? tick : scan;
	for (size_t i = 0; i < r->n; i++)
		if (r->procs[i]->state == RUN_WAITING && r->procs[i]->next_try_ns < next)
			next = r->procs[i]->next_try_ns;
	return next < r->deadline_ns ? next : r->deadline_ns;
}

/* Sample every attached process on the rate's grid until the command exits or the duration ends. */
static void run_loop(struct run *r)
{
	uint64_t start = clock_mono_ns(), tick = start, scan = start;
	r->timing.started_unix = clock_wall_s();
	r->deadline_ns = r->o->duration > 0 ? start + (uint64_t)(r->o->duration * 1e9) : UINT64_MAX;
	uint64_t interval = r->o->rate > 0 ? (uint64_t)(1e9 / r->o->rate) : 0;
	run_add(r, r->command, start);
	for (uint64_t round = 0;; round++) {
		run_reap(r);
		uint64_t now = clock_mono_ns();
		if (r->command_done || now >= r->deadline_ns || r->failed)
			break;
		if (now >= scan) {
			run_scan(r, now);
			scan = now + RUN_SCAN_NS;
		}
		for (size_t i = 0; i < r->n; i++)
			if (r->procs[i]->state == RUN_WAITING && r->procs[i]->next_try_ns <= now)
				run_try_open(r, r->procs[i], now);
		bool sampling = false;
		if (now >= tick) {
			for (size_t i = 0; i < r->n; i++)
				if (r->procs[i]->state == RUN_SAMPLING) {
					run_sample(r, r->procs[i]);
					sampling = true;
				}
			/* Drift-free: the schedule advances by the interval, not from now; behind, it skips. */
			tick += interval;
			now = clock_mono_ns();
			if (tick < now)
				tick = interval ? now : tick;
		}
		if (interval == 0 && sampling) {
			if (round % RUN_SIGNAL_CHECK_EVERY == 0)
				run_wait(r, now);
			continue;
		}
		/* At max rate with nothing to sample, the next look or try is all there is to wait for. */
		run_wait(r, run_next(r, interval == 0 ? UINT64_MAX : tick > now ? tick : now, scan));
	}
	uint64_t end = clock_mono_ns();
	r->timing.elapsed = (double)(end - start) / 1e9;
	r->timing.ended_unix = clock_wall_s();
	for (size_t i = 0; i < r->n; i++)
		run_close(r, r->procs[i], end);
}

/* Start the command, its signal mask as pyprofd's was; 0, or the exit status of a failure (said). */
static int run_spawn(struct run *r, char **argv, const sigset_t *old_mask)
{
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) != 0) {
		fprintf(stderr, "pyprofd: cannot start %s: %s\n", argv[0], strerror(errno));
		return EXIT_FAILURE_OTHER;
	}
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "pyprofd: cannot start %s: %s\n", argv[0], strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return EXIT_FAILURE_OTHER;
	}
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, old_mask, NULL);
		execvp(argv[0], argv);
		/* The pipe closes on a successful exec; a failure sends its errno instead. */
		int e = errno;
		ssize_t unused = write(fds[1], &e, sizeof e);
		(void)unused;
		_exit(127);
	}
	close(fds[1]);
	int e = 0;
	ssize_t got;
	do
		got = read(fds[0], &e, sizeof e);
	while (got < 0 && errno == EINTR);
	close(fds[0]);
	if (got == (ssize_t)sizeof e) {
		waitpid(pid, NULL, 0);
		fprintf(stderr, "pyprofd: cannot run %s: %s\n", argv[0], strerror(e));
		return e == ENOENT ? 127 : 126;
	}
	r->command = pid;
	return EXIT_OK;
}

/* The recorded processes' profiles as one, each stack under a frame naming its process. */
static int run_merge(const struct run *r, struct export_profile *parts, size_t nparts,
                     struct export_profile *out)
{
	uint64_t nframes = nparts, nstacks = 0, nthreads = 0;
	for (size_t i = 0; i < nparts; i++) {
		nframes += parts[i].nframes;
		nstacks += parts[i].nstacks;
		nthreads += parts[i].nthreads;
	}
	if (nframes > UINT32_MAX || nstacks > UINT32_MAX || nthreads > UINT32_MAX)
		return errno = ENOMEM, -1;
	struct export_frame *frames = calloc(nframes ? nframes : 1, sizeof *frames);
	struct export_stack *stacks = calloc(nstacks ? nstacks : 1, sizeof *stacks);
	struct export_thread *threads = calloc(nthreads ? nthreads : 1, sizeof *threads);
	*out = (struct export_profile){.frames = frames, .stacks = stacks, .threads = threads};
	if (!frames || !stacks || !threads)
		return errno = ENOMEM, -1;
	uint32_t f = (uint32_t)nparts, s = 0, t = 0;
	size_t k = 0;
	for (size_t i = 0; i < r->n && k < nparts; i++) {
		if (!run_in_profile(r->procs[i]))
			continue;
		const struct export_profile *part = &parts[k];
		frames[k] = (struct export_frame){r->procs[i]->title, "", -1, UW_FRAME_PYTHON, 0, NULL};
		memcpy(frames + f, part->frames, part->nframes * sizeof *frames);
		memcpy(threads + t, part->threads, part->nthreads * sizeof *threads);
		for (uint32_t j = 0; j < part->nstacks; j++) {
			const struct export_stack *st = &part->stacks[j];
			uint32_t *ids = malloc((st->depth + 1) * sizeof *ids);
			if (!ids)
				return out->nstacks = s, errno = ENOMEM, -1;
			ids[0] = (uint32_t)k;
			for (uint32_t d = 0; d < st->depth; d++)
				ids[d + 1] = st->frames[d] + f;
			stacks[s] = *st;
			stacks[s].frames = ids;
			stacks[s].depth = st->depth + 1;
			stacks[s++].thread = st->thread ? st->thread + t : 0;
		}
		f += part->nframes;
		t += part->nthreads;
		k++;
	}
	out->nframes = f;
	out->nstacks = s;
	out->nthreads = t;
	return 0;
}

/* The profile: one process's as `record PID` writes it, several merged; 0 or -1 and errno. */
static int run_write(const struct run *r, FILE *out)
{
	size_t nparts = 0;
	for (size_t i = 0; i < r->n; i++)
		nparts += run_in_profile(r->procs[i]);
	struct export_profile *parts = calloc(nparts ? nparts : 1, sizeof *parts);
	struct profile none;
	profile_init(&none);
	int rc = parts ? 0 : -1;
	size_t k = 0;
	const struct run_proc *one = NULL;
	for (size_t i = 0; rc == 0 && i < r->n; i++) {
		const struct run_proc *p = r->procs[i];
		if (!run_in_profile(p))
			continue;
		one = p;
		rc = p->prof.failed ? -1
		                    : profile_export(&p->prof, p->pid, p->start_time, r->o->no_idle, &parts[k++]);
	}
	struct export_profile merged = {0};
	char name[64];
	if (rc == 0 && nparts > 1) {
		rc = run_merge(r, parts, nparts, &merged);
		snprintf(name, sizeof name, "pid %d and its children", (int)r->command);
	} else if (rc == 0 && nparts == 0) {
		rc = profile_export(&none, r->command, 0, r->o->no_idle, &merged);
		snprintf(name, sizeof name, "pid %d", (int)r->command);
	} else if (rc == 0) {
		merged = parts[0];
		snprintf(name, sizeof name, "pid %d", (int)one->pid);
	}
	if (rc == 0) {
		merged.name = name;
		rc = record_emit(&merged, r->o, &r->timing, out);
	}
	if (rc == 0 && fflush(out) != 0)
		rc = -1;
	int saved = rc == 0 ? 0 : errno ? errno : ENOMEM;
	if (nparts > 1)
		free((void *)merged.frames); /* the merge's own; a part's frames are its profile's */
	if (nparts != 1)
		profile_free_export(&merged);
	for (size_t i = 0; parts && i < k; i++)
		profile_free_export(&parts[i]);
	free(parts);
	profile_free(&none);
	errno = saved;
	return rc;
}

/* The stats summed over every process recorded. */
static void run_stats(const struct run *r)
{
	struct uw_stats sum = {0};
	uint64_t counted = 0, missed = 0;
	unsigned recorded = 0;
	const char *version = "";
	/* Every field of uw_stats is a uint64_t count or size: they add up one by one. */
	_Static_assert(sizeof sum % sizeof(uint64_t) == 0, "uw_stats holds uint64_t alone");
	uint64_t total[sizeof sum / sizeof(uint64_t)] = {0}, one[sizeof sum / sizeof(uint64_t)];
	for (size_t i = 0; i < r->n; i++) {
		const struct run_proc *p = r->procs[i];
		if (!p->recorded)
			continue;
		memcpy(one, &p->stats, sizeof one);
		for (size_t w = 0; w < sizeof one / sizeof one[0]; w++)
			total[w] += one[w];
		counted += p->ticks.counted;
		missed += p->ticks.missed;
		if (run_in_profile(p) && !recorded++)
			version = p->version;
	}
	memcpy(&sum, total, sizeof sum);
	struct record_opts o = *r->o;
	o.pid = r->command;
	struct record_run timing = r->timing;
	json_t *j = record_stats_json(&sum, version, counted, missed, &timing, &o, recorded);
	if (j)
		record_stats_report(j, &o);
	json_decref(j);
}

int record_command(struct record_opts *o, FILE *out)
{
	struct run *r = calloc(1, sizeof *r);
	if (!r) {
		fputs("pyprofd: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	/* Stop signals and the command's exit are waited for, never handled: nothing runs in between. */
	sigset_t old;
	sigemptyset(&r->waitset);
	sigaddset(&r->waitset, SIGINT);
	sigaddset(&r->waitset, SIGTERM);
	sigaddset(&r->waitset, SIGCHLD);
	sigprocmask(SIG_BLOCK, &r->waitset, &old);
	/* Loaded before the command starts, so its first moments are read as well as the rest. */
	o->uw.kreader = o->no_kernel_reader ? NULL : uw_kreader_open(&o->kreader_err);
	if (!o->kernel_copy)
		uw_kreader_copy_off(o->uw.kreader);
	record_native_open(o);
	o->uw.kernel_pace = o->rate == 0 || o->rate > 2000;
	r->o = o;
	int status = run_spawn(r, o->command, &old);
	if (status == EXIT_OK) {
		run_loop(r);
		if (r->failed)
			fputs("pyprofd: out of memory aggregating samples\n", stderr);
		bool written = !r->failed && run_write(r, out) == 0;
		if (!written && !r->failed)
			fprintf(stderr, "pyprofd: cannot write the profile: %s\n", strerror(errno));
		if (o->stats || o->stats_json)
			run_stats(r);
		/* After --duration the command runs on: its exit status is still pyprofd's. */
		while (!r->command_done) {
			run_wait(r, 0);
			run_reap(r);
		}
		int ws = r->command_status;
		status = !written ? EXIT_FAILURE_OTHER
		         : WIFEXITED(ws) ? WEXITSTATUS(ws)
		         : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws)
		                           : EXIT_FAILURE_OTHER;
	}
	for (size_t i = 0; i < r->n; i++) {
		if (r->procs[i]->recorded)
			profile_free(&r->procs[i]->prof);
		free(r->procs[i]);
	}
	free(r->timing.ns);
	free(r);
	uw_kreader_close(o->uw.kreader);
	uw_native_close(o->uw.native);
	return status;
}

/* `pyprofd record`: a process by its pid, or a command from its start. */
int record_main(int argc, char **argv)
{
	struct record_opts o;
	int rc = record_parse(argc, argv, &o);
	if (rc != 0)
		return rc < 0 ? EXIT_OK : rc;
	FILE *out = stdout;
	if (o.output && !(out = fopen(o.output, "we"))) {
		fprintf(stderr, "pyprofd: cannot write %s: %s\n", o.output, strerror(errno));
		return EXIT_FAILURE_OTHER;
	}
	if (!o.command)
		return record_pid(&o, out);
	rc = record_command(&o, out);
	if (out != stdout)
		fclose(out); /* flushed and checked by record_command */
	return rc;
}
