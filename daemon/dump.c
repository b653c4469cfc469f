/* `pyprofd dump`: every thread's Python stack, once, without a daemon. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pyprofd.h"

/* A snapshot races the running target; a few fresh tries make a torn read unlikely. */
#define DUMP_ATTEMPTS 5

static const char dump_usage[] =
	"usage: pyprofd dump PID [--json] [--native] [--gc]\n"
	"\n"
	"Print the Python stack of every thread of process PID, innermost frame first.\n"
	"The process is read from outside and never stopped.\n"
	"\n"
	"  --json     one JSON object: {pid, python_version, threads: [{thread_id,\n"
	"             native_thread_id, gil, on_cpu, frames: [{function, qualname, file,\n"
	"             line, kind}]}]}\n"
	"  --native   mark with <native> where C code sits between Python frames (3.11+)\n"
	"  --gc       mark with <GC> the thread running the garbage collector\n"
	"\n"
	"exit status: 0 ok, 1 other error, 2 usage, 3 no such process, 4 permission denied,\n"
	"5 not a Python process, 6 unsupported Python version, 7 process exited during the\n"
	"dump, 8 inconsistent remote data\n";

static void dump_text(const struct uw_target *t, const struct uw_snapshot *s)
{
	printf("Process %d: Python %s (%s)\n", (int)uw_pid(t), uw_version(t), uw_runtime_file(t));
	for (uint32_t i = 0; i < s->nthreads; i++) {
		const struct uw_thread *th = &s->threads[i];
		printf("\nThread %llu", (unsigned long long)th->thread_id);
		if (th->native_id > 0)
			printf(" (native %lld)", (long long)th->native_id);
		if (th->interp_id != 0)
			printf(" interpreter %lld", (long long)th->interp_id);
		printf("%s%s%s\n", th->holds_gil ? " [gil]" : "", th->on_cpu ? " [on-cpu]" : "",
		       !th->holds_gil && !th->on_cpu ? " [idle]" : "");
		for (uint32_t k = 0; k < th->nframes; k++) {
			const struct uw_frame *f = &th->frames[k];
			if (f->kind != UW_FRAME_PYTHON)
				printf("    %s\n", f->function);
			else if (f->line >= 0)
				printf("    %s (%s:%d)\n", f->function, f->file, f->line);
			else
				printf("    %s (%s)\n", f->function, f->file);
		}
		if (th->unreadable)
			printf("    (stack not shown: it kept changing while it was read)\n");
		if (th->truncated)
			printf("    ... (truncated at %u frames)\n", UW_MAX_FRAMES);
	}
}

static json_t *json_string_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* Builds the documented JSON form; NULL only when out of memory. */
static json_t *dump_json(const struct uw_target *t, const struct uw_snapshot *s)
{
	json_t *threads = json_array();
	for (uint32_t i = 0; threads && i < s->nthreads; i++) {
		const struct uw_thread *th = &s->threads[i];
		json_t *frames = json_array();
		for (uint32_t k = 0; frames && k < th->nframes; k++) {
			const struct uw_frame *f = &th->frames[k];
			json_array_append_new(
				frames, json_pack("{s:o, s:o, s:o, s:o, s:s}", "function",
			                          json_string(f->function), "qualname",
			                          json_string_or_null(f->qualname), "file",
			                          json_string_or_null(f->file), "line",
			                          f->line >= 0 ? json_integer(f->line) : json_null(),
			                          "kind", vocab_kind_name(f->kind)));
		}
		json_array_append_new(
			threads,
			json_pack("{s:I, s:o, s:I, s:b, s:b, s:b, s:b, s:o}", "thread_id",
		                  (json_int_t)th->thread_id, "native_thread_id",
		                  th->native_id > 0 ? json_integer(th->native_id) : json_null(),
		                  "interpreter_id", (json_int_t)th->interp_id, "gil", th->holds_gil,
		                  "on_cpu", th->on_cpu, "truncated", th->truncated, "unreadable",
		                  th->unreadable, "frames", frames));
	}
	return json_pack("{s:i, s:s, s:o}", "pid", (int)uw_pid(t), "python_version", uw_version(t),
	                 "threads", threads);
}

int cmd_dump(int argc, char **argv)
{
	static const struct option options[] = {
		{"json", no_argument, NULL, 'j'},
		{"native", no_argument, NULL, 'n'},
		{"gc", no_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool as_json = false;
	unsigned flags = 0;
	int opt;
	optind = 1;
	opterr = 0; /* one line of our own instead of getopt's */
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case 'j': as_json = true; break;
		case 'n': flags |= UW_SNAP_NATIVE; break;
		case 'g': flags |= UW_SNAP_GC; break;
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
		fprintf(stderr, "pyprofd: %s\n", err.msg);
		return vocab_status_exit(err.status);
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
		fprintf(stderr, "pyprofd: process %d (Python %s): %s\n", (int)pid, uw_version(t), err.msg);
		uw_close(t);
		return vocab_status_exit(err.status);
	}

	status = EXIT_OK;
	if (as_json) {
		json_t *doc = dump_json(t, &snap);
		if (!doc || json_dumpf(doc, stdout, JSON_COMPACT) != 0) {
			fputs("pyprofd: out of memory writing JSON\n", stderr);
			status = EXIT_FAILURE_OTHER;
		} else {
			putchar('\n');
		}
		json_decref(doc);
	} else {
		dump_text(t, &snap);
	}
	if (fflush(stdout) != 0) {
		fputs("pyprofd: cannot write the dump\n", stderr);
		status = EXIT_FAILURE_OTHER;
	}
	uw_snapshot_release(&snap);
	uw_close(t);
	return status;
}
