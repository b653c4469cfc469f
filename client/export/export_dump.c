/*
 * A dump, written: every thread's Python stack, innermost frame first, the
 * one rendering of `pyprofd dump` (from its own snapshot) and of
 * `pyprofd-ctl dump` (from the daemon's answer), both given the protocol's
 * DumpResult.  The text keeps names as the target gave them, as a stack
 * trace does; the JSON repairs bytes that are not UTF-8.
 */
#include <errno.h>
#include <stdlib.h>

#include "export.h"
#include "vocab.h"

/* The text of one thread: its heading, its frames, what was left out. */
static void export_dump_thread_text(const Pyprofd__Thread *th, FILE *out)
{
	fprintf(out, "\nThread %llu", (unsigned long long)th->thread_id);
	if (th->native_thread_id > 0)
		fprintf(out, " (native %lld)", (long long)th->native_thread_id);
	if (*export_str(th->name))
		fprintf(out, " \"%s\"", th->name);
	if (th->interpreter_id != 0)
		fprintf(out, " interpreter %lld", (long long)th->interpreter_id);
	fprintf(out, "%s%s%s\n", th->gil ? " [gil]" : "", th->on_cpu ? " [on-cpu]" : "",
	        th->idle ? " [idle]" : "");
	for (size_t k = 0; k < th->n_frames; k++) {
		const Pyprofd__Frame *f = th->frames[k];
		/* The qualified name where there is one: Runner.run, not run. */
		const char *name = *export_str(f->qualname) ? f->qualname : export_str(f->function);
		if (vocab_kind_parse(f->kind) != UW_FRAME_PYTHON)
			fprintf(out, "    %s\n", name);
		else if (f->line >= 0)
			fprintf(out, "    %s (%s:%d)\n", name, export_str(f->file), (int)f->line);
		else
			fprintf(out, "    %s (%s)\n", name, export_str(f->file));
	}
	if (th->unreadable)
		fputs("    (stack not shown: it kept changing while it was read)\n", out);
	if (th->truncated)
		fprintf(out, "    ... (truncated at %u frames)\n", UW_MAX_FRAMES);
}

/* The wire's "" stands for JSON's null (a marker has no file, 3.10 and older no qualname). */
static json_t *export_dump_string_or_null(const char *s)
{
	return s && *s ? export_json_string(s) : json_null();
}

static json_t *export_dump_thread_json(const Pyprofd__Thread *th)
{
	json_t *frames = json_array();
	for (size_t k = 0; frames && k < th->n_frames; k++) {
		const Pyprofd__Frame *f = th->frames[k];
		/* json_pack takes every "o" argument, even when it fails. */
		json_t *frame = json_pack(
			"{s:o, s:o, s:o, s:o, s:o, s:s}", "function", export_json_string(f->function),
			"qualname", export_dump_string_or_null(f->qualname), "file",
			export_dump_string_or_null(f->file), "line",
			f->line >= 0 ? json_integer(f->line) : json_null(), "first_line",
			f->first_line > 0 ? json_integer(f->first_line) : json_null(), "kind",
			vocab_kind_name(vocab_kind_parse(f->kind)));
		if (json_array_append_new(frames, frame) != 0) {
			json_decref(frames);
			frames = NULL;
		}
	}
	return json_pack("{s:I, s:o, s:o, s:I, s:b, s:b, s:b, s:b, s:b, s:o}", "thread_id",
	                 (json_int_t)th->thread_id, "native_thread_id",
	                 th->native_thread_id > 0 ? json_integer(th->native_thread_id) : json_null(),
	                 "name", export_dump_string_or_null(th->name), "interpreter_id",
	                 (json_int_t)th->interpreter_id, "gil", th->gil, "on_cpu", th->on_cpu, "idle",
	                 th->idle, "truncated", th->truncated, "unreadable", th->unreadable, "frames",
	                 frames);
}

static int export_dump_json(const Pyprofd__DumpResult *const *parts, size_t nparts, FILE *out)
{
	json_t *threads = json_array();
	for (size_t p = 0; threads && p < nparts; p++)
		for (size_t i = 0; threads && i < parts[p]->n_threads; i++)
			if (json_array_append_new(threads, export_dump_thread_json(parts[p]->threads[i])) != 0) {
				json_decref(threads);
				threads = NULL;
			}
	return export_json_write(json_pack("{s:i, s:o, s:o}", "pid", (int)parts[0]->pid,
	                                   "python_version", export_json_string(parts[0]->python_version),
	                                   "threads", threads),
	                         out);
}

int export_dump_write(const Pyprofd__DumpResult *const *parts, size_t nparts, bool json, FILE *out)
{
	if (nparts == 0) {
		errno = EINVAL;
		return -1;
	}
	if (json)
		return export_dump_json(parts, nparts, out);
	const Pyprofd__DumpResult *head = parts[0];
	fprintf(out, "Process %d: Python %s", (int)head->pid, export_str(head->python_version));
	if (head->runtime_file && *head->runtime_file)
		fprintf(out, " (%s)", head->runtime_file);
	fputc('\n', out);
	for (size_t p = 0; p < nparts; p++)
		for (size_t i = 0; i < parts[p]->n_threads; i++)
			export_dump_thread_text(parts[p]->threads[i], out);
	return ferror(out) ? -1 : 0;
}
