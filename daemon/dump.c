/*
 * `pyprofd dump`: every thread's Python stack, once, without a daemon.  A
 * snapshot becomes the protocol's DumpResult here, for the daemon's dump
 * request as for this command, and the export library writes it: the one
 * rendering pyprofd-ctl dump uses too.
 */
#include <getopt.h>
#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pyprofd.h"

/* A snapshot races the running target; a few fresh tries make a torn read unlikely. */
#define DUMP_ATTEMPTS 5

static const char dump_usage[] =
	"usage: pyprofd dump PID [--json] [--native] [--gc] [--no-write] [--async-aware]\n"
	"\n"
	"Print the Python stack of every thread of process PID, innermost frame first.\n"
	"The process is read from outside and never stopped.\n"
	"\n"
	"  --json     one JSON object: {pid, python_version, threads: [{thread_id,\n"
	"             native_thread_id, gil, on_cpu, frames: [{function, qualname, file,\n"
	"             line, kind}]}]}\n"
	"  --native   the C frames too (kind \"c\"), of every thread that waits: its\n"
	"             symbols and shared objects, in place between and below its Python\n"
	"             frames; a running thread, or without the kernel's copy (root,\n"
	"             Linux 6.7), is marked <native> where C code sits (3.11+)\n"
	"  --gc       mark with <GC> the thread running the garbage collector\n"
	"  --no-write never write into the target (3.15's frame-cache marker)\n"
	"  --async-aware\n"
	"             also print asyncio's task tree (3.11+): every pending task with\n"
	"             its coroutine frames, under the task awaiting it\n"
	"\n"
	"exit status: 0 ok, 1 other error, 2 usage, 3 no such process, 4 permission denied,\n"
	"5 not a Python process, 6 unsupported Python version, 7 process exited during the\n"
	"dump, 8 inconsistent remote data\n";

/* One frame of a dump. */
static Pyprofd__Frame *dump_frame_to_proto(const struct uw_frame *f, struct arena *a)
{
	Pyprofd__Frame *pf = ARENA_MESSAGE(a, Pyprofd__Frame, PYPROFD__FRAME__INIT);
	if (!pf)
		return NULL;
	pf->function = arena_strdup(a, f->function ? f->function : "");
	pf->qualname = arena_strdup(a, f->qualname ? f->qualname : "");
	pf->file = arena_strdup(a, f->file ? f->file : "");
	pf->line = f->line >= 0 ? f->line : -1;
	pf->first_line = f->first_line;
	pf->kind = arena_strdup(a, vocab_kind_name(f->kind));
	if (f->build_id && !(pf->build_id = arena_strdup(a, f->build_id)))
		return NULL;
	if (!pf->function || !pf->qualname || !pf->file || !pf->kind)
		return NULL;
	return pf;
}

/* The snapshot's asyncio tasks into the answer. */
static int dump_tasks_to_proto(Pyprofd__DumpResult *res, const struct uw_snapshot *snap,
                               struct arena *a)
{
	res->tasks_cut = snap->tasks_cut;
	if (snap->tasks_error.status != UW_OK || snap->tasks_error.msg[0])
		if (!(res->tasks_error = arena_strdup(a, snap->tasks_error.msg)))
			return -1;
	if (!snap->ntasks)
		return 0;
	if (!(res->tasks = arena_alloc(a, snap->ntasks * sizeof *res->tasks)))
		return -1;
	for (uint32_t i = 0; i < snap->ntasks; i++) {
		const struct uw_task *task = &snap->tasks[i];
		Pyprofd__Task *pt = ARENA_MESSAGE(a, Pyprofd__Task, PYPROFD__TASK__INIT);
		if (!pt || !(pt->name = arena_strdup(a, task->name ? task->name : "")))
			return -1;
		pt->id = task->id;
		pt->thread_id = task->thread_id;
		pt->awaited_by = task->awaited_by;
		pt->running = task->running;
		pt->frames = arena_alloc(a, (task->nframes ? task->nframes : 1) * sizeof *pt->frames);
		if (!pt->frames)
			return -1;
		for (uint32_t k = 0; k < task->nframes; k++)
			if (!(pt->frames[pt->n_frames++] = dump_frame_to_proto(&task->frames[k], a)))
				return -1;
		res->tasks[res->n_tasks++] = pt;
	}
	return 0;
}

Pyprofd__DumpResult *dump_to_proto(pid_t pid, const struct uw_target *uw,
                                          const struct uw_snapshot *snap, struct arena *a)
{
	Pyprofd__DumpResult *res = ARENA_MESSAGE(a, Pyprofd__DumpResult, PYPROFD__DUMP_RESULT__INIT);
	if (!res)
		return NULL;
	res->pid = pid;
	res->python_version = arena_strdup(a, uw_version(uw));
	res->runtime_file = arena_strdup(a, uw_runtime_file(uw));
	res->threads = arena_alloc(a, (snap->nthreads ? snap->nthreads : 1) * sizeof *res->threads);
	if (!res->python_version || !res->runtime_file || !res->threads)
		return NULL;
	for (uint32_t i = 0; i < snap->nthreads; i++) {
		const struct uw_thread *th = &snap->threads[i];
		Pyprofd__Thread *pt = ARENA_MESSAGE(a, Pyprofd__Thread, PYPROFD__THREAD__INIT);
		if (!pt)
			return NULL;
		pt->thread_id = th->thread_id;
		pt->native_thread_id = th->native_id;
		pt->interpreter_id = th->interp_id;
		pt->gil = th->holds_gil;
		pt->on_cpu = th->on_cpu;
		pt->truncated = th->truncated;
		pt->unreadable = th->unreadable;
		pt->idle = th->idle;
		if (!(pt->name = arena_strdup(a, th->name)))
			return NULL;
		pt->frames = arena_alloc(a, (th->nframes ? th->nframes : 1) * sizeof *pt->frames);
		if (!pt->frames)
			return NULL;
		for (uint32_t k = 0; k < th->nframes; k++)
			if (!(pt->frames[pt->n_frames++] = dump_frame_to_proto(&th->frames[k], a)))
				return NULL;
		res->threads[res->n_threads++] = pt;
	}
	return dump_tasks_to_proto(res, snap, a) == 0 ? res : NULL;
}

int dump_main(int argc, char **argv)
{
	static const struct option options[] = {
		{"json", no_argument, NULL, 'j'},
		{"native", no_argument, NULL, 'n'},
		{"gc", no_argument, NULL, 'g'},
		{"no-write", no_argument, NULL, 'W'},
		{"async-aware", no_argument, NULL, 'a'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool as_json = false, no_write = false;
	unsigned flags = 0;
	int opt;
	optind = 1;
	opterr = 0; /* one line of our own instead of getopt's */
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case 'j': as_json = true; break;
		case 'n': flags |= UW_SNAP_NATIVE; break;
		case 'g': flags |= UW_SNAP_GC; break;
		case 'W': no_write = true; break;
		case 'a': flags |= UW_SNAP_TASKS; break;
		case 'h': fputs(dump_usage, stdout); return EXIT_OK;
		default: return cli_bad_option("dump", argv[optind - 1]);
		}
	}
	pid_t pid;
	int status = cli_pid_operand("dump", argc, argv, optind, &pid);
	if (status != EXIT_OK)
		return status;

	struct uw_error err = {0};
	struct uw_target *t = uw_open(pid, &err);
	if (!t) {
		uw_error_add_remedy(&err, pid);
		fprintf(stderr, "pyprofd: %s\n", err.msg);
		return vocab_status_exit(err.status);
	}
	struct uw_native *native = NULL;
	if (flags & UW_SNAP_NATIVE) {
		struct uw_error why = {0};
		if (!(native = uw_native_open(true, &why)))
			fprintf(stderr, "pyprofd: --native: no C frames, only <native> marks: %s\n", why.msg);
		else if (uw_native_shots_refused(native))
			fprintf(stderr, "pyprofd: --native: running threads keep their <native> marks: %s\n",
			        uw_native_shots_refused(native));
	}
	if (no_write || native) {
		struct uw_options opts;
		uw_options_get(t, &opts);
		opts.no_write = no_write;
		opts.native = native;
		uw_configure(t, &opts);
	}
	struct uw_snapshot snap;
	int rc = -1;
	for (int attempt = 0; attempt < DUMP_ATTEMPTS && rc != 0; attempt++) {
		if (attempt > 0) {
			if (err.status != UW_ECORRUPT)
				break;
			nanosleep(&(struct timespec){.tv_nsec = 2 * 1000 * 1000}, NULL);
		}
		rc = uw_snapshot(t, flags, &snap, &err);
	}
	if (rc != 0) {
		uw_error_add_remedy(&err, pid);
		fprintf(stderr, "pyprofd: process %d (Python %s): %s\n", (int)pid, uw_version(t), err.msg);
		uw_close(t);
		uw_native_close(native);
		return vocab_status_exit(err.status);
	}

	status = EXIT_OK;
	struct arena a = {0};
	const Pyprofd__DumpResult *res = dump_to_proto(pid, t, &snap, &a);
	if (!res) {
		fputs("pyprofd: out of memory writing the dump\n", stderr);
		status = EXIT_FAILURE_OTHER;
	} else if (export_dump_write(&res, 1, as_json, stdout) != 0 || fflush(stdout) != 0) {
		fprintf(stderr, "pyprofd: cannot write the dump: %s\n", strerror(errno));
		status = EXIT_FAILURE_OTHER;
	}
	arena_free(&a);
	uw_snapshot_release(&snap);
	uw_close(t);
	uw_native_close(native);
	return status;
}
