/*
 * The JSON formats, through jansson: the profile itself, and speedscope's
 * file format (https://www.speedscope.app/file-format-schema.json).
 */
#include <errno.h>
#include <stdlib.h>

#include <jansson.h>

#include "export_int.h"
#include "vocab.h"

int export_json_set(json_t *obj, const char *key, json_t *value)
{
	/* set_new fails on a NULL value too (and frees a value it could not
	 * place), so one check covers making the value and inserting it. */
	return json_object_set_new(obj, key, value) < 0 ? -1 : 0;
}

int export_json_add(json_t *arr, json_t *value)
{
	return json_array_append_new(arr, value) < 0 ? -1 : 0;
}

json_t *export_json_doc(const struct export_view *v, const char *total_key, json_t **frames,
                        json_t **stacks)
{
	const struct export_profile *p = v->p;
	json_t *doc = json_object();
	/* The head first, so that a reader sees it before the (long) arrays. */
	if (export_json_set(doc, "name", json_string(v->name)) ||
	    export_json_set(doc, "mode", json_string(v->mode)) ||
	    export_json_set(doc, "rate_hz", json_integer(p->rate_hz)) ||
	    export_json_set(doc, "from", json_real(p->from_unix)) ||
	    export_json_set(doc, "until", json_real(p->until_unix)) ||
	    export_json_set(doc, total_key, json_integer((json_int_t)v->total)) ||
	    export_json_set(doc, "frames", *frames = json_array()) ||
	    export_json_set(doc, "stacks", *stacks = json_array())) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

int export_json_write(json_t *doc, FILE *out)
{
	errno = 0;
	int r = doc && json_dumpf(doc, out, JSON_COMPACT) == 0 && fputc('\n', out) != EOF ? 0 : -1;
	if (r < 0 && !errno)
		errno = ENOMEM;
	json_decref(doc);
	return r;
}

int export_write_json(const struct export_view *v, FILE *out)
{
	const struct export_profile *p = v->p;
	json_t *frames, *stacks, *doc = export_json_doc(v, "samples", &frames, &stacks);
	if (!doc)
		goto fail;
	for (uint32_t i = 0; i < p->nframes; i++) {
		const struct export_frame *f = &p->frames[i];
		json_t *o = json_object();
		if (export_json_add(frames, o) ||
		    export_json_set(o, "function", json_string(v->function[i])) ||
		    export_json_set(o, "file", json_string(v->file[i])) ||
		    export_json_set(o, "line",
		                    export_frame_line(f) >= 0 ? json_integer(f->line) : json_null()) ||
		    export_json_set(o, "first_line",
		                    f->first_line > 0 ? json_integer(f->first_line) : json_null()) ||
		    export_json_set(o, "kind", json_string(vocab_kind_name(f->kind))))
			goto fail;
		/* A C frame: where it is in its module's file, and which build that file is. */
		if (f->kind == UW_FRAME_C &&
		    ((f->line >= 0 && export_json_set(o, "address", json_integer(f->line))) ||
		     (f->build_id && *f->build_id && export_json_set(o, "build_id", json_string(f->build_id)))))
			goto fail;
	}
	json_t *threads = json_array();
	if (export_json_set(doc, "threads", threads))
		goto fail;
	for (uint32_t i = 0; i < p->nthreads; i++) {
		const struct export_thread *t = &p->threads[i];
		json_t *labels = json_object(), *o = json_object();
		if (export_json_add(threads, o) || export_json_set(o, "labels", labels) ||
		    export_json_set(o, "thread_id", json_integer((json_int_t)t->thread_id)) ||
		    export_json_set(o, "native_thread_id",
		                    t->native_id > 0 ? json_integer(t->native_id) : json_null()) ||
		    export_json_set(o, "name", export_json_string(t->name)) ||
		    export_json_set(o, "pid", t->pid ? json_integer(t->pid) : json_null()))
			goto fail;
		for (uint32_t k = 0; k < t->nlabels; k++)
			if (export_json_set(labels, t->labels[k].key, export_json_string(t->labels[k].value)))
				goto fail;
	}
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		json_t *o = json_object();
		if (export_json_add(stacks, o))
			goto fail;
		json_t *ids = json_array();
		if (export_json_set(o, "frames", ids))
			goto fail;
		for (uint32_t d = 0; d < st->depth; d++)
			if (export_json_add(ids, json_integer(st->frames[d])))
				goto fail;
		/* Thread ids are pthread_t values, which fit; cast as pyprofd dump does. */
		uint64_t thread_id = st->thread ? p->threads[st->thread - 1].thread_id : st->thread_id;
		if (export_json_set(o, "count", json_integer((json_int_t)st->count)) ||
		    export_json_set(o, "idle", json_integer((json_int_t)st->idle)) ||
		    export_json_set(o, "thread_id", json_integer((json_int_t)thread_id)) ||
		    export_json_set(o, "thread", st->thread ? json_integer(st->thread - 1) : json_null()) ||
		    (p->slot_seconds && export_json_set(o, "slot_start", json_integer(st->slot_start))))
			goto fail;
	}
	if (p->slot_seconds && export_json_set(doc, "slot_seconds", json_integer(p->slot_seconds)))
		goto fail;
	return export_json_write(doc, out);
fail:
	json_decref(doc);
	errno = ENOMEM;
	return -1;
}

/*
 * speedscope: one "sampled" profile per thread over shared frames, named
 * after the thread, the busiest first (speedscope opens activeProfileIndex);
 * stacks without a thread share one profile.  The unit is seconds, each
 * stack weighing count / rate_hz: speedscope then shows every frame as time
 * (1.25s, 340ms) in its tooltips and sandwich table, which is what a sample
 * stands for, where "none" would show bare counts.  speedscope lays the
 * samples of a sampled profile end to end, so its range is 0 to the summed
 * weight rather than the wall-clock range (which is in the name).
 */

/* A profile of the document: its thread (0: none) and its samples. */
struct speedscope_part {
	uint32_t thread;
	uint64_t samples;
};

static int speedscope_part_cmp(const void *a, const void *b)
{
	const struct speedscope_part *x = a, *y = b;
	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return (x->thread > y->thread) - (x->thread < y->thread);
}

/* One profile of the stacks of a thread; NULL if out of memory. */
static json_t *speedscope_profile(const struct export_view *v, uint32_t thread, uint64_t samples)
{
	const struct export_profile *p = v->p;
	double period = 1.0 / p->rate_hz;
	json_t *prof = json_object(), *ids = json_array(), *weights = json_array();
	if (!prof || export_json_set(prof, "samples", ids) || export_json_set(prof, "weights", weights))
		goto fail;
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		if (!st->count || st->thread != thread)
			continue;
		json_t *frames = json_array();
		if (export_json_add(ids, frames))
			goto fail;
		for (uint32_t d = 0; d < st->depth; d++)
			if (export_json_add(frames, json_integer(v->frame_id[st->frames[d]])))
				goto fail;
		if (export_json_add(weights, json_real((double)st->count * period)))
			goto fail;
	}
	char name[600];
	if (thread)
		snprintf(name, sizeof name, "%s", v->thread_title[thread - 1]);
	else if (v->name[0])
		snprintf(name, sizeof name, "%s", v->name);
	else
		snprintf(name, sizeof name, "%s samples at %u Hz", v->mode[0] ? v->mode : "all",
		         (unsigned)p->rate_hz);
	if (export_json_set(prof, "type", json_string("sampled")) ||
	    export_json_set(prof, "name", export_json_string(name)) ||
	    export_json_set(prof, "unit", json_string("seconds")) ||
	    export_json_set(prof, "startValue", json_real(0)) ||
	    export_json_set(prof, "endValue", json_real((double)samples * period)))
		goto fail;
	return prof;
fail:
	json_decref(prof);
	return NULL;
}

int export_write_speedscope(const struct export_view *v, FILE *out)
{
	const struct export_profile *p = v->p;
	struct speedscope_part *parts = calloc(p->nthreads + 1, sizeof *parts);
	json_t *doc = json_object(), *shared = json_object(), *frames = json_array(),
	       *profiles = json_array();
	if (!parts || !doc || !shared || !frames || !profiles)
		goto fail;
	for (uint32_t i = 0; i <= p->nthreads; i++)
		parts[i].thread = i;
	for (uint32_t s = 0; s < p->nstacks; s++)
		parts[p->stacks[s].thread].samples += p->stacks[s].count;
	qsort(parts, p->nthreads + 1, sizeof *parts, speedscope_part_cmp);
	json_t *f_ = frames, *s_ = shared, *p_ = profiles;
	frames = shared = profiles = NULL; /* from here on the document holds them */
	if (export_json_set(doc, "$schema",
	                    json_string("https://www.speedscope.app/file-format-schema.json")) ||
	    export_json_set(doc, "exporter", json_string("pyprofd")) ||
	    export_json_set(doc, "name", json_string(v->name[0] ? v->name : "pyprofd")) ||
	    export_json_set(doc, "activeProfileIndex", json_integer(0)) ||
	    export_json_set(s_, "frames", f_) || export_json_set(doc, "shared", s_) ||
	    export_json_set(doc, "profiles", p_))
		goto fail;
	for (uint32_t u = 0; u < v->nuniq; u++) {
		uint32_t i = v->frame_rep[u];
		json_t *f = json_object();
		if (export_json_add(f_, f) ||
		    export_json_set(f, "name", json_string(v->function[i])))
			goto fail;
		if (v->file[i][0] && export_json_set(f, "file", json_string(v->file[i])))
			goto fail;
		if (export_frame_line(&p->frames[i]) >= 0 &&
		    export_json_set(f, "line", json_integer(p->frames[i].line)))
			goto fail;
	}
	/* Every thread with samples; a profile with none still has one (empty) profile. */
	for (uint32_t k = 0; k <= p->nthreads; k++) {
		if (!parts[k].samples && (k > 0 || parts[0].samples))
			continue;
		if (export_json_add(p_, speedscope_profile(v, parts[k].thread, parts[k].samples)))
			goto fail;
	}
	free(parts);
	return export_json_write(doc, out);
fail:
	free(parts);
	json_decref(doc);
	json_decref(shared);
	json_decref(frames);
	json_decref(profiles);
	/* dump reports a NULL document (a failure above) as ENOMEM. */
	return export_json_write(NULL, out);
}
