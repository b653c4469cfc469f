/*
 * A dump, written: every thread's Python stack, innermost frame first, the
 * one rendering of `pyprofd dump` (from its own snapshot) and of
 * `pyprofd-ctl dump` (from the daemon's answer), both given the protocol's
 * DumpResult.  The text keeps names as the target gave them, as a stack
 * trace does; the JSON repairs bytes that are not UTF-8.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "vocab.h"

/* One frame of a stack, as text. */
static void export_dump_frame_text(const Pyprofd__Frame *f, const char *indent, FILE *out)
{
	/* The qualified name where there is one: Runner.run, not run. */
	const char *name = *export_str(f->qualname) ? f->qualname : export_str(f->function);
	enum uw_frame_kind kind = vocab_kind_parse(f->kind);
	/* A C frame: its symbol and the shared object's name, as a debugger shows them. */
	if (kind == UW_FRAME_C) {
		const char *module = strrchr(export_str(f->file), '/');
		fprintf(out, "%s%s (%s)\n", indent, name, module ? module + 1 : export_str(f->file));
		return;
	}
	/* Markers (<native>, <task>:NAME) have no file. */
	if (kind != UW_FRAME_PYTHON || !*export_str(f->file))
		fprintf(out, "%s%s\n", indent, name);
	else if (f->line >= 0)
		fprintf(out, "%s%s (%s:%d)\n", indent, name, export_str(f->file), (int)f->line);
	else
		fprintf(out, "%s%s (%s)\n", indent, name, export_str(f->file));
}

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
	for (size_t k = 0; k < th->n_frames; k++)
		export_dump_frame_text(th->frames[k], "    ", out);
	if (th->unreadable)
		fputs("    (stack not shown: it kept changing while it was read)\n", out);
	if (th->truncated)
		fprintf(out, "    ... (truncated at %u frames)\n", UW_MAX_FRAMES);
}

/* Tasks deeper than this in the tree are printed at this depth. */
#define EXPORT_DUMP_TASK_DEPTH 64

/* Every task of the answer's parts, in one array (NULL when none); *n of them. */
static const Pyprofd__Task **export_dump_tasks(const Pyprofd__DumpResult *const *parts, size_t nparts,
                                                 size_t *n)
{
	size_t total = 0;
	*n = 0;
	for (size_t p = 0; p < nparts; p++)
		total += parts[p]->n_tasks;
	if (!total)
		return NULL;
	const Pyprofd__Task **all = malloc(total * sizeof *all);
	if (!all)
		return NULL;
	for (size_t p = 0; p < nparts; p++)
		for (size_t i = 0; i < parts[p]->n_tasks; i++)
			all[(*n)++] = parts[p]->tasks[i];
	return all;
}

/* Whether the task a task says awaits it is among the tasks: else it heads a tree of its own. */
static bool export_dump_task_is_root(const Pyprofd__Task *const *all, size_t n, const Pyprofd__Task *t)
{
	if (!t->awaited_by)
		return true;
	for (size_t i = 0; i < n; i++)
		if (all[i]->id == t->awaited_by && all[i] != t)
			return false;
	return true;
}

/* One task and, indented under it, the tasks it awaits (those awaited_by it). */
static void export_dump_task_text(const Pyprofd__Task *const *all, size_t n, bool *shown, size_t i,
                                  unsigned depth, FILE *out)
{
	char indent[2 * EXPORT_DUMP_TASK_DEPTH + 8];
	unsigned d = depth < EXPORT_DUMP_TASK_DEPTH ? depth : EXPORT_DUMP_TASK_DEPTH;
	const Pyprofd__Task *t = all[i];
	shown[i] = true;
	memset(indent, ' ', 2 * d + 2);
	indent[2 * d + 2] = '\0';
	fprintf(out, "%sTask \"%s\" (0x%llx", indent, export_str(t->name), (unsigned long long)t->id);
	if (t->thread_id)
		fprintf(out, ", thread %llu", (unsigned long long)t->thread_id);
	fprintf(out, ")%s\n", t->running ? " [running]" : "");
	memset(indent, ' ', 2 * d + 6);
	indent[2 * d + 6] = '\0';
	for (size_t k = 0; k < t->n_frames; k++)
		export_dump_frame_text(t->frames[k], indent, out);
	for (size_t c = 0; c < n; c++)
		if (!shown[c] && all[c]->awaited_by == t->id)
			export_dump_task_text(all, n, shown, c, depth + 1, out);
}

/* The task tree: each root task, and under each task the tasks it awaits. */
static void export_dump_tasks_text(const Pyprofd__DumpResult *const *parts, size_t nparts, FILE *out)
{
	const Pyprofd__DumpResult *head = parts[0];
	size_t n;
	const Pyprofd__Task **all = export_dump_tasks(parts, nparts, &n);
	if (!n && !*export_str(head->tasks_error) && !head->tasks_cut)
		return;
	fprintf(out, "\nasyncio tasks: %zu%s\n", n, head->tasks_cut ? " (more were left unread)" : "");
	if (*export_str(head->tasks_error))
		fprintf(out, "  (%s)\n", head->tasks_error);
	bool *shown = n ? calloc(n, sizeof *shown) : NULL;
	if (n && !shown) {
		fputs("  (out of memory)\n", out);
		free(all);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (!shown[i] && export_dump_task_is_root(all, n, all[i]))
			export_dump_task_text(all, n, shown, i, 0, out);
	/* Tasks awaiting each other in a loop have no root: shown once each all the same. */
	for (size_t i = 0; i < n; i++)
		if (!shown[i])
			export_dump_task_text(all, n, shown, i, 0, out);
	free(shown);
	free(all);
}

/* The wire's "" stands for JSON's null (a marker has no file, 3.10 and older no qualname). */
static json_t *export_dump_string_or_null(const char *s)
{
	return s && *s ? export_json_string(s) : json_null();
}

static json_t *export_dump_frames_json(Pyprofd__Frame *const *fs, size_t n)
{
	json_t *frames = json_array();
	for (size_t k = 0; frames && k < n; k++) {
		const Pyprofd__Frame *f = fs[k];
		/* json_pack takes every "o" argument, even when it fails. */
		bool c = vocab_kind_parse(f->kind) == UW_FRAME_C;
		json_t *frame = json_pack(
			"{s:o, s:o, s:o, s:o, s:o, s:s}", "function", export_json_string(f->function),
			"qualname", export_dump_string_or_null(f->qualname), "file",
			export_dump_string_or_null(f->file), "line",
			f->line >= 0 && !c ? json_integer(f->line) : json_null(), "first_line",
			f->first_line > 0 ? json_integer(f->first_line) : json_null(), "kind",
			vocab_kind_name(vocab_kind_parse(f->kind)));
		/* A C frame: where it is in its module's file, and which build that file is. */
		if (frame && c &&
		    ((f->line >= 0 && json_object_set_new(frame, "address", json_integer(f->line)) != 0) ||
		     (f->build_id && *f->build_id &&
		      json_object_set_new(frame, "build_id", export_json_string(f->build_id)) != 0))) {
			json_decref(frame);
			frame = NULL;
		}
		if (json_array_append_new(frames, frame) != 0) {
			json_decref(frames);
			frames = NULL;
		}
	}
	return frames;
}

static json_t *export_dump_thread_json(const Pyprofd__Thread *th)
{
	json_t *frames = export_dump_frames_json(th->frames, th->n_frames);
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
	json_t *doc = json_pack("{s:i, s:o, s:o}", "pid", (int)parts[0]->pid, "python_version",
	                        export_json_string(parts[0]->python_version), "threads", threads);
	const Pyprofd__DumpResult *head = parts[0];
	size_t n;
	const Pyprofd__Task **all = export_dump_tasks(parts, nparts, &n);
	/* The tasks only of a dump that asked for them (which says so even when none were read). */
	if (doc && (n || *export_str(head->tasks_error) || head->tasks_cut)) {
		json_t *tasks = json_array();
		for (size_t i = 0; tasks && i < n; i++) {
			const Pyprofd__Task *t = all[i];
			json_t *task = json_pack(
				"{s:I, s:o, s:o, s:o, s:b, s:o}", "id", (json_int_t)t->id, "name",
				export_json_string(t->name), "thread_id",
				t->thread_id ? json_integer((json_int_t)t->thread_id) : json_null(), "awaited_by",
				t->awaited_by ? json_integer((json_int_t)t->awaited_by) : json_null(), "running",
				t->running, "frames", export_dump_frames_json(t->frames, t->n_frames));
			if (json_array_append_new(tasks, task) != 0) {
				json_decref(tasks);
				tasks = NULL;
			}
		}
		if (!tasks || json_object_set_new(doc, "tasks", tasks) != 0 ||
		    json_object_set_new(doc, "tasks_cut", json_boolean(head->tasks_cut)) != 0 ||
		    json_object_set_new(doc, "tasks_error", export_dump_string_or_null(head->tasks_error)) != 0) {
			json_decref(doc);
			doc = NULL;
		}
	}
	free(all);
	return export_json_write(doc, out);
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
	export_dump_tasks_text(parts, nparts, out);
	return ferror(out) ? -1 : 0;
}
