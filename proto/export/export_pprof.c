/*
 * pprof: a perftools.profiles.Profile (proto/profile.proto), encoded with
 * protobuf-c and gzip'd, as pprof readers expect a file to be.
 *
 * Each distinct frame is one Location with one Line; each (function, file,
 * first line) one Function, so pprof's function view merges the lines of a
 * function as the table does.  Ids are the dense ids of the view plus one (0 means none).
 * A C frame's Location has its address in its module's file, and a Mapping
 * of that module (its file and build id): the Mapping spans the module's
 * file addresses from 0, so an address is what addr2line takes.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "export_int.h"
#include "profile.pb-c.h"

/* The strings of a profile, sorted and unique: "" sorts first, as entry 0 must be. */
struct strings {
	const char **s;
	size_t n;
};

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void strings_sort(struct strings *t)
{
	qsort(t->s, t->n, sizeof *t->s, str_cmp);
	size_t o = 0;
	for (size_t i = 0; i < t->n; i++)
		if (o == 0 || strcmp(t->s[o - 1], t->s[i]) != 0)
			t->s[o++] = t->s[i];
	t->n = o;
}

/* The index of a string put in the table before sorting. */
static int64_t strings_index(const struct strings *t, const char *s)
{
	const char **hit = bsearch(&s, t->s, t->n, sizeof *t->s, str_cmp);
	return hit ? hit - t->s : 0;
}

/* Compresses buf as one gzip member onto out. */
static int write_gzip(const uint8_t *buf, size_t len, FILE *out)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	/* 16 + window bits: a gzip header and trailer instead of zlib's. */
	if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return errno = ENOMEM, -1;
	uint8_t chunk[16384];
	int r = -1, zr;
	do {
		/* avail_in is 32 bits: feed a large buffer in slices. */
		if (z.avail_in == 0 && len > 0) {
			size_t n = len > (1u << 30) ? (1u << 30) : len;
			z.next_in = (Bytef *)buf;
			z.avail_in = (uInt)n;
			buf += n;
			len -= n;
		}
		z.next_out = chunk;
		z.avail_out = sizeof chunk;
		zr = deflate(&z, len == 0 ? Z_FINISH : Z_NO_FLUSH);
		if (zr == Z_STREAM_ERROR) {
			errno = EIO;
			goto out;
		}
		size_t have = sizeof chunk - z.avail_out;
		if (have && fwrite(chunk, 1, have, out) != have)
			goto out;
	} while (zr != Z_STREAM_END);
	r = 0;
out:
	deflateEnd(&z);
	return r;
}

/*
 * What pprof shows of a function.  pprof's reports simplify a name whose
 * Function.name equals its system_name as a C++ one, dropping every <...>:
 * "<module>" would be shown as "<unknown>".  A name that differs from its
 * system_name counts as already simplified and is shown as it is, so the
 * system name carries the file too ("app.py:<module>"), which keeps it
 * unique per function as well.
 */
static const char *pprof_build_id(const struct export_frame *f)
{
	return f->build_id ? f->build_id : "";
}

static char *pprof_system_name(const char *function, const char *file, int32_t first_line)
{
	size_t n = strlen(function) + strlen(file) + 32;
	char *s = malloc(n);
	if (s) {
		if (first_line > 0)
			snprintf(s, n, "%s:%d:%s", file, (int)first_line, function);
		else
			snprintf(s, n, "%s:%s", file, function);
	}
	return s;
}

/* A sample's labels: the thread's id and name, its process, its process's labels. */
#define PPROF_THREAD_LABELS 3
/* And its request context's: trace_id, span_id (what go tool pprof -tags lists), its labels. */
#define PPROF_CONTEXT_LABELS 2

/* Stack s's request context, or NULL: none, or one the profile lacks (a broken answer). */
static const struct export_context *pprof_context(const struct export_profile *p, uint32_t s)
{
	uint32_t c = p->stack_contexts ? p->stack_contexts[s] : 0;
	return c && c <= p->ncontexts ? &p->contexts[c - 1] : NULL;
}

int export_write_pprof(const struct export_view *v, FILE *out)
{
	const struct export_profile *p = v->p;
	/* The mode is the sample type: wall, cpu or gil time. */
	const char *kind = v->mode[0] ? v->mode : "wall";
	int64_t period = llround(1e9 / p->rate_hz);
	if (period < 1) /* past 1 GHz: nonsense, but no division by zero */
		period = 1;
	int r = -1;

	size_t nsamples = 0, nids = 0, nlabels = 0, nthread_labels = 0;
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		if (!st->count)
			continue;
		/* The time value must fit pprof's int64. */
		if (st->count > (uint64_t)(INT64_MAX / period))
			return errno = EINVAL, -1;
		nsamples++;
		nids += st->depth;
		if (st->thread)
			nlabels += PPROF_THREAD_LABELS + p->threads[st->thread - 1].nlabels;
		else if (st->thread_id)
			nlabels++;
		const struct export_context *c = pprof_context(p, s);
		if (c)
			nlabels += PPROF_CONTEXT_LABELS + c->nlabels;
	}
	for (uint32_t i = 0; i < p->nthreads; i++)
		nthread_labels += 2 * p->threads[i].nlabels;
	for (uint32_t i = 0; i < p->ncontexts; i++)
		nthread_labels += PPROF_CONTEXT_LABELS + 2 * p->contexts[i].nlabels;

	struct strings t = {0};
	Perftools__Profiles__Function *funcs = calloc(v->nfuncs + 1, sizeof *funcs);
	Perftools__Profiles__Function **funcp = calloc(v->nfuncs + 1, sizeof *funcp);
	char **system_names = calloc(v->nfuncs + 1, sizeof *system_names);
	Perftools__Profiles__Location *locs = calloc(v->nuniq + 1, sizeof *locs);
	Perftools__Profiles__Location **locp = calloc(v->nuniq + 1, sizeof *locp);
	Perftools__Profiles__Line *lines = calloc(v->nuniq + 1, sizeof *lines);
	Perftools__Profiles__Line **linep = calloc(v->nuniq + 1, sizeof *linep);
	Perftools__Profiles__Sample *samples = calloc(nsamples + 1, sizeof *samples);
	Perftools__Profiles__Sample **samplep = calloc(nsamples + 1, sizeof *samplep);
	Perftools__Profiles__Label *labels = calloc(nlabels + 1, sizeof *labels);
	Perftools__Profiles__Label **labelp = calloc(nlabels + 1, sizeof *labelp);
	uint64_t *ids = calloc(nids + 1, sizeof *ids);
	int64_t *values = calloc(2 * nsamples + 1, sizeof *values);
	t.s = calloc(14 + 3 * (size_t)v->nfuncs + v->nuniq + p->nthreads + nthread_labels, sizeof *t.s);
	Perftools__Profiles__Mapping *maps = calloc(v->nuniq + 1, sizeof *maps);
	Perftools__Profiles__Mapping **mapp = calloc(v->nuniq + 1, sizeof *mapp);
	uint32_t *mapping_frame = calloc(v->nuniq + 1, sizeof *mapping_frame); /* the frame each mapping is of */
	uint32_t *uniq_mapping = calloc(v->nuniq + 1, sizeof *uniq_mapping);   /* each frame's mapping id, 0 none */
	uint32_t nmaps = 0;
	uint8_t *packed = NULL;
	if (!funcs || !funcp || !system_names || !locs || !locp || !lines || !linep || !samples ||
	    !samplep || !labels || !labelp || !ids || !values || !t.s || !maps || !mapp || !mapping_frame ||
	    !uniq_mapping)
		goto out;

	const char *comment = v->name[0] ? v->name : NULL;
	t.s[t.n++] = "";
	t.s[t.n++] = "samples";
	t.s[t.n++] = "count";
	t.s[t.n++] = kind;
	t.s[t.n++] = "nanoseconds";
	t.s[t.n++] = "thread.id";
	t.s[t.n++] = "thread.name";
	t.s[t.n++] = "pid";
	t.s[t.n++] = "trace_id";
	t.s[t.n++] = "span_id";
	if (comment)
		t.s[t.n++] = comment;
	for (uint32_t f = 0; f < v->nfuncs; f++) {
		uint32_t i = v->func_rep[f];
		if (!(system_names[f] = pprof_system_name(v->function[i], v->file[i], p->frames[i].first_line)))
			goto out;
		t.s[t.n++] = v->function[i];
		t.s[t.n++] = v->file[i];
		t.s[t.n++] = system_names[f];
	}
	/* The modules of the C frames: one Mapping each (file and build id), in order of first use. */
	for (uint32_t u = 0; u < v->nuniq; u++) {
		const struct export_frame *f = &p->frames[v->frame_rep[u]];
		if (f->kind != UW_FRAME_C)
			continue;
		const char *build_id = f->build_id ? f->build_id : "";
		uint32_t m = 0;
		while (m < nmaps && !(strcmp(p->frames[mapping_frame[m]].file, f->file) == 0 &&
		                      strcmp(pprof_build_id(&p->frames[mapping_frame[m]]), build_id) == 0))
			m++;
		if (m == nmaps) {
			perftools__profiles__mapping__init(&maps[m]);
			maps[m].id = ++nmaps;
			maps[m].has_functions = true;
			mapping_frame[m] = v->frame_rep[u];
			mapp[m] = &maps[m];
			if (*build_id)
				t.s[t.n++] = build_id;
		}
		uniq_mapping[u] = maps[m].id;
		if (f->line >= 0 && (uint64_t)f->line + 1 > maps[m].memory_limit)
			maps[m].memory_limit = (uint64_t)f->line + 1;
	}
	for (uint32_t i = 0; i < p->nthreads; i++) {
		t.s[t.n++] = v->thread_title[i];
		for (uint32_t k = 0; k < p->threads[i].nlabels; k++) {
			t.s[t.n++] = p->threads[i].labels[k].key;
			t.s[t.n++] = p->threads[i].labels[k].value;
		}
	}
	for (uint32_t i = 0; i < p->ncontexts; i++) {
		const struct export_context *c = &p->contexts[i];
		t.s[t.n++] = c->trace_id ? c->trace_id : "";
		t.s[t.n++] = c->span_id ? c->span_id : "";
		for (uint32_t k = 0; k < c->nlabels; k++) {
			t.s[t.n++] = c->labels[k].key;
			t.s[t.n++] = c->labels[k].value;
		}
	}
	strings_sort(&t);

	for (uint32_t f = 0; f < v->nfuncs; f++) {
		uint32_t i = v->func_rep[f];
		perftools__profiles__function__init(&funcs[f]);
		funcs[f].id = f + 1;
		funcs[f].name = strings_index(&t, v->function[i]);
		funcs[f].system_name = strings_index(&t, system_names[f]);
		funcs[f].filename = strings_index(&t, v->file[i]);
		funcs[f].start_line = p->frames[i].first_line > 0 ? p->frames[i].first_line : 0;
		funcp[f] = &funcs[f];
	}
	for (uint32_t m = 0; m < nmaps; m++) {
		const struct export_frame *f = &p->frames[mapping_frame[m]];
		maps[m].filename = strings_index(&t, f->file);
		maps[m].build_id = strings_index(&t, pprof_build_id(f));
	}
	for (uint32_t u = 0; u < v->nuniq; u++) {
		uint32_t i = v->frame_rep[u];
		const struct export_frame *f = &p->frames[i];
		perftools__profiles__line__init(&lines[u]);
		lines[u].function_id = v->func_id[i] + 1;
		lines[u].line = export_frame_line(f) > 0 ? f->line : 0;
		linep[u] = &lines[u];
		perftools__profiles__location__init(&locs[u]);
		locs[u].id = u + 1;
		locs[u].n_line = 1;
		locs[u].line = &linep[u];
		locp[u] = &locs[u];
		locs[u].mapping_id = uniq_mapping[u];
		if (uniq_mapping[u] && f->line >= 0)
			locs[u].address = (uint64_t)f->line;
	}
	size_t k = 0, id = 0, l = 0;
	int64_t thread_id_key = strings_index(&t, "thread.id");
	int64_t thread_name_key = strings_index(&t, "thread.name");
	int64_t pid_key = strings_index(&t, "pid");
	int64_t trace_key = strings_index(&t, "trace_id"), span_key = strings_index(&t, "span_id");
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		if (!st->count)
			continue;
		Perftools__Profiles__Sample *sm = &samples[k];
		perftools__profiles__sample__init(sm);
		sm->location_id = &ids[id];
		sm->n_location_id = st->depth;
		/* pprof wants the leaf first; our stacks are root first. */
		for (uint32_t d = 0; d < st->depth; d++)
			ids[id++] = v->frame_id[st->frames[st->depth - 1 - d]] + 1;
		sm->value = &values[2 * k];
		sm->n_value = 2;
		sm->value[0] = (int64_t)st->count;
		sm->value[1] = (int64_t)st->count * period;
		sm->label = &labelp[l];
		const struct export_thread *th = st->thread ? &p->threads[st->thread - 1] : NULL;
		/* The kernel's id where known: what top, ps and the thread's name go by. */
		uint64_t tid = th && th->native_id > 0 ? (uint64_t)th->native_id
		               : th                    ? th->thread_id
		                                       : st->thread_id;
		if (tid) {
			perftools__profiles__label__init(&labels[l]);
			labels[l].key = thread_id_key;
			labels[l].num = (int64_t)tid;
			labelp[l] = &labels[l];
			l++;
		}
		if (th) {
			perftools__profiles__label__init(&labels[l]);
			labels[l].key = thread_name_key;
			labels[l].str = strings_index(&t, v->thread_title[st->thread - 1]);
			labelp[l] = &labels[l];
			l++;
			if (th->pid) {
				perftools__profiles__label__init(&labels[l]);
				labels[l].key = pid_key;
				labels[l].num = th->pid;
				labelp[l] = &labels[l];
				l++;
			}
			for (uint32_t i = 0; i < th->nlabels; i++) {
				perftools__profiles__label__init(&labels[l]);
				labels[l].key = strings_index(&t, th->labels[i].key);
				labels[l].str = strings_index(&t, th->labels[i].value);
				labelp[l] = &labels[l];
				l++;
			}
		}
		const struct export_context *c = pprof_context(p, s);
		for (int i = 0; c && i < PPROF_CONTEXT_LABELS; i++) {
			const char *hex = i == 0 ? c->trace_id : c->span_id;
			if (!hex)
				continue;
			perftools__profiles__label__init(&labels[l]);
			labels[l].key = i == 0 ? trace_key : span_key;
			labels[l].str = strings_index(&t, hex);
			labelp[l] = &labels[l];
			l++;
		}
		for (uint32_t i = 0; c && i < c->nlabels; i++) {
			perftools__profiles__label__init(&labels[l]);
			labels[l].key = strings_index(&t, c->labels[i].key);
			labels[l].str = strings_index(&t, c->labels[i].value);
			labelp[l] = &labels[l];
			l++;
		}
		sm->n_label = (size_t)(&labelp[l] - sm->label);
		samplep[k++] = sm;
	}

	Perftools__Profiles__ValueType count_type = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
	Perftools__Profiles__ValueType time_type = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
	Perftools__Profiles__ValueType period_type = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
	Perftools__Profiles__ValueType *types[2] = {&count_type, &time_type};
	count_type.type = strings_index(&t, "samples");
	count_type.unit = strings_index(&t, "count");
	time_type.type = period_type.type = strings_index(&t, kind);
	time_type.unit = period_type.unit = strings_index(&t, "nanoseconds");
	int64_t comment_index = comment ? strings_index(&t, comment) : 0;

	Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
	prof.n_sample_type = 2;
	prof.sample_type = types;
	prof.n_sample = nsamples;
	prof.sample = samplep;
	prof.n_location = v->nuniq;
	prof.location = locp;
	prof.n_function = v->nfuncs;
	prof.function = funcp;
	prof.n_mapping = nmaps;
	prof.mapping = mapp;
	prof.n_string_table = t.n;
	prof.string_table = (char **)t.s; /* only read by the encoder */
	prof.time_nanos = llround(p->from_unix * 1e9);
	prof.duration_nanos = llround((p->until_unix - p->from_unix) * 1e9);
	prof.period_type = &period_type;
	prof.period = period;
	prof.default_sample_type = time_type.type;
	if (comment) {
		prof.n_comment = 1;
		prof.comment = &comment_index;
	}

	size_t len = perftools__profiles__profile__get_packed_size(&prof);
	packed = malloc(len ? len : 1);
	if (!packed)
		goto out;
	perftools__profiles__profile__pack(&prof, packed);
	r = write_gzip(packed, len, out);
out:
	for (uint32_t f = 0; system_names && f < v->nfuncs; f++)
		free(system_names[f]);
	free(system_names);
	free(packed);
	free(t.s);
	free(funcs);
	free(funcp);
	free(locs);
	free(locp);
	free(lines);
	free(linep);
	free(samples);
	free(samplep);
	free(labels);
	free(labelp);
	free(ids);
	free(values);
	free(maps);
	free(mapp);
	free(mapping_frame);
	free(uniq_mapping);
	return r;
}
