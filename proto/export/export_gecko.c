/*
 * The Firefox Profiler's Gecko profile format: the JSON a browser's own
 * profiler writes, which the Firefox Profiler upgrades and processes when
 * it opens a file.  Its shape has held for years where the processed
 * format changes often, so a writer outside the profiler stays readable.
 *
 * One thread track per thread of the profile (one for all stacks when the
 * profile has no threads), each with its own string, frame and stack
 * tables.  A frame of the table is a function at a line: its location is
 * the function as every format names it, "qualname (file:first line)",
 * which the profiler takes as a label (not a JavaScript frame, which would
 * need a column) and merges into one function per location.  The format
 * has no sample weights: a stack counted n times is n samples, 1/rate_hz
 * apart, one stack after the other.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "export_int.h"

/* The version of the format written: frame tables without optimizations, counters without sample groups. */
#define GECKO_VERSION 29

/* Categories: the index of each in meta.categories. */
enum gecko_category { GECKO_PYTHON, GECKO_NATIVE, GECKO_GC, GECKO_IDLE };

/* One thread track under way: its tables, and where the view's frames and stacks went in them. */
struct gecko_track {
	json_t *thread, *strings, *frames, *stacks, *samples;
	uint32_t nstrings, nframes, nstacks;
	int64_t *string_of_func; /* view's function id -> index in strings; -1 not yet */
	int64_t *frame_of_uniq;  /* view's distinct frame id -> index in frames */
	/* (parent stack + 1, frame) -> stack index, as a small open-addressed table. */
	uint64_t *keys;
	uint32_t *values;
	size_t cap, used;
	double clock_ms; /* the next sample's time */
};

static void gecko_track_free(struct gecko_track *g)
{
	json_decref(g->thread);
	json_decref(g->strings);
	json_decref(g->frames);
	json_decref(g->stacks);
	json_decref(g->samples);
	free(g->string_of_func);
	free(g->frame_of_uniq);
	free(g->keys);
	free(g->values);
	memset(g, 0, sizeof *g);
}

static int gecko_track_init(struct gecko_track *g, const struct export_view *v)
{
	memset(g, 0, sizeof *g);
	g->string_of_func = malloc((v->nfuncs ? v->nfuncs : 1) * sizeof *g->string_of_func);
	g->frame_of_uniq = malloc((v->nuniq ? v->nuniq : 1) * sizeof *g->frame_of_uniq);
	g->cap = 64;
	g->keys = calloc(g->cap, sizeof *g->keys);
	g->values = calloc(g->cap, sizeof *g->values);
	g->thread = json_object();
	g->strings = json_array();
	g->frames = json_array();
	g->stacks = json_array();
	g->samples = json_array();
	if (!g->string_of_func || !g->frame_of_uniq || !g->keys || !g->values || !g->thread ||
	    !g->strings || !g->frames || !g->stacks || !g->samples) {
		gecko_track_free(g);
		return -1;
	}
	for (uint32_t i = 0; i < v->nfuncs; i++)
		g->string_of_func[i] = -1;
	for (uint32_t i = 0; i < v->nuniq; i++)
		g->frame_of_uniq[i] = -1;
	return 0;
}

/* The string index of a view function's location in this track. */
static int64_t gecko_func_string(struct gecko_track *g, const struct export_view *v, uint32_t i)
{
	uint32_t f = v->func_id[i];
	if (g->string_of_func[f] >= 0)
		return g->string_of_func[f];
	const struct export_frame *fr = &v->p->frames[i];
	size_t n = strlen(v->function[i]) + strlen(v->file[i]) + 32;
	char *loc = malloc(n);
	if (!loc)
		return -1;
	if (!v->file[i][0])
		snprintf(loc, n, "%s", v->function[i]);
	else if (fr->first_line > 0)
		snprintf(loc, n, "%s (%s:%d)", v->function[i], v->file[i], (int)fr->first_line);
	else
		snprintf(loc, n, "%s (%s)", v->function[i], v->file[i]);
	int rc = export_json_add(g->strings, json_string(loc));
	free(loc);
	if (rc)
		return -1;
	return g->string_of_func[f] = g->nstrings++;
}

static enum gecko_category gecko_frame_category(const struct export_frame *f)
{
	return f->kind == UW_FRAME_NATIVE || f->kind == UW_FRAME_C ? GECKO_NATIVE
	       : f->kind == UW_FRAME_GC                           ? GECKO_GC
	                                                          : GECKO_PYTHON;
}

/* The frame-table index of a view frame in this track. */
static int64_t gecko_frame(struct gecko_track *g, const struct export_view *v, uint32_t i)
{
	uint32_t u = v->frame_id[i];
	if (g->frame_of_uniq[u] >= 0)
		return g->frame_of_uniq[u];
	int64_t loc = gecko_func_string(g, v, i);
	if (loc < 0)
		return -1;
	const struct export_frame *f = &v->p->frames[i];
	/* location, relevantForJS, innerWindowID, implementation, line, column, category, subcategory */
	json_t *row = json_pack("[I, b, n, n, o, n, i, i]", (json_int_t)loc, 0,
	                        export_frame_line(f) > 0 ? json_integer(f->line) : json_null(),
	                        (int)gecko_frame_category(f), 0);
	if (export_json_add(g->frames, row))
		return -1;
	return g->frame_of_uniq[u] = g->nframes++;
}

static size_t gecko_slot(const struct gecko_track *g, uint64_t key)
{
	uint64_t h = key * 0x9E3779B97F4A7C15ull;
	size_t at = (size_t)(h >> 32) & (g->cap - 1);
	while (g->keys[at] && g->keys[at] != key)
		at = (at + 1) & (g->cap - 1);
	return at;
}

/* The stack-table index of (parent, frame) in this track, added on first sight; -1 if out of memory. */
static int64_t gecko_stack(struct gecko_track *g, int64_t parent, int64_t frame)
{
	/* parent + 1 in the high half, frame + 1 in the low: 0 never is a key. */
	uint64_t key = (uint64_t)(parent + 1) << 32 | (uint64_t)(frame + 1);
	size_t at = gecko_slot(g, key);
	if (g->keys[at])
		return g->values[at];
	if (2 * (g->used + 1) > g->cap) {
		size_t cap = g->cap * 2;
		uint64_t *keys = calloc(cap, sizeof *keys), *old_keys = g->keys;
		uint32_t *values = calloc(cap, sizeof *values), *old_values = g->values;
		if (!keys || !values) {
			free(keys);
			free(values);
			return -1;
		}
		size_t old_cap = g->cap;
		g->keys = keys;
		g->values = values;
		g->cap = cap;
		for (size_t i = 0; i < old_cap; i++)
			if (old_keys[i]) {
				size_t to = gecko_slot(g, old_keys[i]);
				g->keys[to] = old_keys[i];
				g->values[to] = old_values[i];
			}
		free(old_keys);
		free(old_values);
		at = gecko_slot(g, key);
	}
	json_t *row = json_pack("[o, I]", parent >= 0 ? json_integer(parent) : json_null(),
	                        (json_int_t)frame);
	if (export_json_add(g->stacks, row))
		return -1;
	g->keys[at] = key;
	g->values[at] = g->nstacks;
	g->used++;
	return g->nstacks++;
}

/* A stack's count as samples of this track; 0, or -1 if out of memory. */
static int gecko_add_stack(struct gecko_track *g, const struct export_view *v,
                           const struct export_stack *st, double interval_ms)
{
	int64_t at = -1;
	for (uint32_t d = 0; d < st->depth; d++) {
		int64_t frame = gecko_frame(g, v, st->frames[d]);
		if (frame < 0 || (at = gecko_stack(g, at, frame)) < 0)
			return -1;
	}
	for (uint64_t c = 0; c < st->count; c++) {
		/* stack, time (ms after meta.startTime), eventDelay */
		if (export_json_add(g->samples, json_pack("[I, f, i]", (json_int_t)at, g->clock_ms, 0)))
			return -1;
		g->clock_ms += interval_ms;
	}
	return 0;
}

/* The finished track as a thread of the profile (taken from g); NULL if out of memory. */
static json_t *gecko_track_thread(struct gecko_track *g, const char *name, int64_t pid, int64_t tid)
{
	json_t *t = g->thread;
	/*
	 * The pid and tid are numbers in this format; the processed one makes
	 * strings of them.  Every set runs, failed or not: each takes its value.
	 */
	int bad = 0;
	bad |= export_json_set(t, "name", json_string(name));
	bad |= export_json_set(t, "processType", json_string("default"));
	bad |= export_json_set(t, "processName", json_string("python"));
	bad |= export_json_set(t, "registerTime", json_real(0));
	bad |= export_json_set(t, "unregisterTime", json_null());
	bad |= export_json_set(t, "pid", json_integer(pid));
	bad |= export_json_set(t, "tid", json_integer(tid));
	bad |= export_json_set(t, "markers",
	                       json_pack("{s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:[]}", "schema", "name", 0,
	                                 "startTime", 1, "endTime", 2, "phase", 3, "category", 4, "data",
	                                 5, "data"));
	bad |= export_json_set(t, "samples",
	                       json_pack("{s:{s:i, s:i, s:i}, s:o}", "schema", "stack", 0, "time", 1,
	                                 "eventDelay", 2, "data", g->samples));
	bad |= export_json_set(t, "frameTable",
	                       json_pack("{s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}, s:o}", "schema",
	                                 "location", 0, "relevantForJS", 1, "innerWindowID", 2,
	                                 "implementation", 3, "line", 4, "column", 5, "category", 6,
	                                 "subcategory", 7, "data", g->frames));
	bad |= export_json_set(t, "stackTable",
	                       json_pack("{s:{s:i, s:i}, s:o}", "schema", "prefix", 0, "frame", 1, "data",
	                                 g->stacks));
	bad |= export_json_set(t, "stringTable", g->strings);
	g->samples = g->frames = g->stacks = g->strings = NULL;
	g->thread = NULL;
	if (bad) {
		json_decref(t);
		return NULL;
	}
	return t;
}

static json_t *gecko_meta(const struct export_view *v, double interval_ms)
{
	const struct export_profile *p = v->p;
	json_t *categories = json_pack(
		"[{s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}, {s:s, s:s, s:[s]}]", "name",
		"Python", "color", "yellow", "subcategories", "Other", "name", "Native", "color", "grey",
		"subcategories", "Other", "name", "GC / CC", "color", "orange", "subcategories", "Other",
		"name", "Idle", "color", "transparent", "subcategories", "Other");
	json_t *meta = json_object();
	char product[512];
	snprintf(product, sizeof product, "pyprofd: %s (%s samples)", v->name[0] ? v->name : "profile",
	         v->mode[0] ? v->mode : "wall");
	if (!categories || !meta || export_json_set(meta, "version", json_integer(GECKO_VERSION)) ||
	    export_json_set(meta, "startTime", json_real(p->from_unix * 1000.0)) ||
	    export_json_set(meta, "shutdownTime", json_null()) ||
	    export_json_set(meta, "profilingStartTime", json_real(0)) ||
	    export_json_set(meta, "profilingEndTime",
	                    json_real((p->until_unix - p->from_unix) * 1000.0)) ||
	    export_json_set(meta, "interval", json_real(interval_ms)) ||
	    export_json_set(meta, "stackwalk", json_integer(0)) ||
	    export_json_set(meta, "debug", json_integer(0)) ||
	    export_json_set(meta, "gcpoison", json_integer(0)) ||
	    export_json_set(meta, "asyncstack", json_integer(0)) ||
	    export_json_set(meta, "processType", json_integer(0)) ||
	    export_json_set(meta, "product", json_string(product)) ||
	    export_json_set(meta, "presymbolicated", json_true()) ||
	    export_json_set(meta, "categories", categories) ||
	    export_json_set(meta, "markerSchema", json_array())) {
		json_decref(meta);
		return NULL;
	}
	return meta;
}

int export_write_gecko(const struct export_view *v, FILE *out)
{
	const struct export_profile *p = v->p;
	if (v->total > EXPORT_GECKO_MAX_SAMPLES)
		return errno = EFBIG, -1;
	double interval_ms = 1000.0 / p->rate_hz;
	json_t *threads = json_array(), *doc = NULL;
	struct gecko_track g = {0};
	/* A track per thread; stacks without one share a track of their own, last. */
	uint32_t ntracks = p->nthreads + 1;
	for (uint32_t k = 0; threads && k < ntracks; k++) {
		bool any = false;
		for (uint32_t s = 0; !any && s < p->nstacks; s++)
			any = p->stacks[s].count && (k < p->nthreads ? p->stacks[s].thread == k + 1
			                                              : p->stacks[s].thread == 0);
		if (!any)
			continue;
		if (gecko_track_init(&g, v) < 0)
			goto fail;
		for (uint32_t s = 0; s < p->nstacks; s++) {
			const struct export_stack *st = &p->stacks[s];
			if (!st->count || st->thread != (k < p->nthreads ? k + 1 : 0))
				continue;
			if (gecko_add_stack(&g, v, st, interval_ms) < 0)
				goto fail;
		}
		const struct export_thread *t = k < p->nthreads ? &p->threads[k] : NULL;
		int64_t tid = !t ? 0 : t->native_id > 0 ? t->native_id : (int64_t)t->thread_id;
		json_t *thread = gecko_track_thread(&g, t ? v->thread_title[k] : (v->name[0] ? v->name : "all threads"),
		                                    t ? t->pid : 0, tid);
		gecko_track_free(&g);
		if (export_json_add(threads, thread))
			goto fail;
	}
	if (!threads || !(doc = json_object()))
		goto fail;
	/* The threads first: the document takes them whatever follows. */
	if (export_json_set(doc, "threads", threads)) {
		json_decref(doc);
		return errno = ENOMEM, -1;
	}
	if (export_json_set(doc, "meta", gecko_meta(v, interval_ms)) ||
	    export_json_set(doc, "libs", json_array()) ||
	    export_json_set(doc, "pausedRanges", json_array()) ||
	    export_json_set(doc, "processes", json_array())) {
		json_decref(doc);
		return errno = ENOMEM, -1;
	}
	return export_json_write(doc, out);
fail:
	gecko_track_free(&g);
	json_decref(threads);
	errno = ENOMEM;
	return -1;
}
