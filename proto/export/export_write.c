/*
 * export_write: validate the profile, build the view every writer shares,
 * hand it to the writer of the format.  A profile is checked whole before a
 * byte is written, so a bad one leaves the output untouched.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "export_int.h"

static const struct {
	const char *name;
	enum export_format format;
	int (*write)(const struct export_view *v, FILE *out);
} formats[] = {
	{"collapsed", EXPORT_COLLAPSED, export_write_collapsed},
	{"flamegraph", EXPORT_FLAMEGRAPH, export_write_flamegraph},
	{"speedscope", EXPORT_SPEEDSCOPE, export_write_speedscope},
	{"pprof", EXPORT_PPROF, export_write_pprof},
	{"json", EXPORT_JSON, export_write_json},
	{"gecko", EXPORT_GECKO, export_write_gecko},
	{"heatmap", EXPORT_HEATMAP, export_write_heatmap},
};

#define NFORMATS (sizeof formats / sizeof formats[0])

int export_format_parse(const char *name, enum export_format *out)
{
	for (size_t i = 0; name && i < NFORMATS; i++) {
		if (strcmp(name, formats[i].name) == 0) {
			*out = formats[i].format;
			return 0;
		}
	}
	return -1;
}

/* The endings of file names, longest first where one ends another (.gecko.json before .json). */
static const struct {
	const char *ending;
	enum export_format format;
} endings[] = {
	{".html", EXPORT_FLAMEGRAPH},       {".htm", EXPORT_FLAMEGRAPH},
	{".speedscope.json", EXPORT_SPEEDSCOPE}, {".gecko.json", EXPORT_GECKO},
	{".json", EXPORT_JSON},             {".pb.gz", EXPORT_PPROF},
	{".pprof", EXPORT_PPROF},           {".pb", EXPORT_PPROF},
	{".txt", EXPORT_COLLAPSED},         {".collapsed", EXPORT_COLLAPSED},
	{".folded", EXPORT_COLLAPSED},
};

int export_format_of_file(const char *path, enum export_format *out)
{
	size_t len = path ? strlen(path) : 0;
	for (size_t i = 0; i < sizeof endings / sizeof endings[0]; i++) {
		size_t n = strlen(endings[i].ending);
		/* A name that is only the ending (".json") is a hidden file, not a format. */
		if (len > n && path[len - n - 1] != '/' && strcasecmp(path + len - n, endings[i].ending) == 0) {
			*out = endings[i].format;
			return 0;
		}
	}
	const char *slash = path ? strrchr(path, '/') : NULL;
	const char *base = slash ? slash + 1 : path ? path : "";
	const char *dot = strrchr(base, '.');
	return dot && dot > base ? -1 : 1;
}

/*
 * s itself when it is valid UTF-8, else a copy with each bad byte replaced by
 * U+FFFD, recorded in the view to be freed.  JSON, protobuf strings and the
 * browser all need UTF-8, and every format should show a name the same way.
 */
static const char *export_view_utf8(struct export_view *v, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n;
	while (*p && (n = export_utf8_seq(p)) != 0)
		p += n;
	if (!*p)
		return s;
	char *fixed = export_utf8_copy(s);
	if (!fixed)
		return NULL;
	v->owned[v->nowned++] = fixed;
	return fixed;
}

/*
 * What a thread is called in every format: "NAME (tid N)", or "thread N"
 * without a name; N the kernel's id, else threading's.  Owned by the view.
 */
static const char *export_view_thread_title(struct export_view *v, const struct export_thread *t)
{
	char buf[512];
	unsigned long long id = t->native_id > 0 ? (unsigned long long)t->native_id
	                                         : (unsigned long long)t->thread_id;
	if (t->name[0])
		snprintf(buf, sizeof buf, "%.400s (tid %llu)", t->name, id);
	else
		snprintf(buf, sizeof buf, "thread %llu", id);
	char *copy = export_utf8_copy(buf);
	if (copy)
		v->owned[v->nowned++] = copy;
	return copy;
}

/* Checks everything a writer relies on; 0, or -1 with errno EINVAL. */
static int export_profile_check(const struct export_profile *p, uint64_t *total)
{
	if (!p || (p->nframes && !p->frames) || (p->nstacks && !p->stacks) || p->rate_hz == 0 ||
	    !isfinite(p->from_unix) || !isfinite(p->until_unix) || p->until_unix < p->from_unix ||
	    p->from_unix < 0 || p->until_unix > EXPORT_MAX_UNIX)
		goto bad;
	for (uint32_t i = 0; i < p->nframes; i++) {
		const struct export_frame *f = &p->frames[i];
		if (!f->function || !f->file || f->kind < UW_FRAME_PYTHON || f->kind > UW_FRAME_C)
			goto bad;
	}
	if (p->nthreads && !p->threads)
		goto bad;
	if (p->diff && (!isfinite(p->base_from_unix) || !isfinite(p->base_until_unix) ||
	                p->base_from_unix < 0 || p->base_until_unix < p->base_from_unix ||
	                p->base_until_unix > EXPORT_MAX_UNIX))
		goto bad;
	if (p->nsources && !p->sources)
		goto bad;
	for (uint32_t i = 0; i < p->nsources; i++)
		if (!p->sources[i].file || (p->sources[i].len && !p->sources[i].text))
			goto bad;
	for (uint32_t i = 0; i < p->nthreads; i++) {
		const struct export_thread *t = &p->threads[i];
		if (!t->name || (t->nlabels && !t->labels))
			goto bad;
		for (uint32_t k = 0; k < t->nlabels; k++)
			if (!t->labels[k].key || !t->labels[k].value)
				goto bad;
	}
	uint64_t sum = 0;
	int64_t first_slot = 0, last_slot = 0;
	for (uint32_t i = 0; i < p->nstacks; i++) {
		const struct export_stack *s = &p->stacks[i];
		if (s->depth == 0 || s->depth > EXPORT_MAX_DEPTH || !s->frames ||
		    s->count > EXPORT_MAX_SAMPLES - sum || s->idle > s->count || s->thread > p->nthreads ||
		    (s->base && !p->diff))
			goto bad;
		if (p->slot_seconds) {
			/* Whole slots within the times a request may name, few enough for a page to draw. */
			if (s->slot_start < 0 || s->slot_start > (int64_t)EXPORT_MAX_UNIX ||
			    s->slot_start % p->slot_seconds)
				goto bad;
			int64_t slot = s->slot_start / p->slot_seconds;
			first_slot = i == 0 || slot < first_slot ? slot : first_slot;
			last_slot = i == 0 || slot > last_slot ? slot : last_slot;
			if (last_slot - first_slot >= EXPORT_MAX_SLOTS)
				goto bad;
		}
		for (uint32_t d = 0; d < s->depth; d++)
			if (s->frames[d] >= p->nframes)
				goto bad;
		sum += s->count;
	}
	*total = sum;
	return 0;
bad:
	errno = EINVAL;
	return -1;
}

/* Orders frame indices by what a frame shows: (function, file, first line[, line, kind]). */
struct frame_order {
	const struct export_view *v;
	bool whole; /* false: by function, (function, file, first line), only */
};

/* <0, 0, >0 as frames i and j show before, the same as, after each other. */
static int export_frame_shown_cmp(const struct frame_order *o, uint32_t i, uint32_t j)
{
	const struct export_frame *fi = &o->v->p->frames[i], *fj = &o->v->p->frames[j];
	int c = strcmp(o->v->function[i], o->v->function[j]);
	if (!c)
		c = strcmp(o->v->file[i], o->v->file[j]);
	if (!c)
		c = (fi->first_line > fj->first_line) - (fi->first_line < fj->first_line);
	if (!c && o->whole) {
		c = (fi->line > fj->line) - (fi->line < fj->line);
		if (!c)
			c = (fi->kind > fj->kind) - (fi->kind < fj->kind);
	}
	return c;
}

static int export_frame_cmp(const void *a, const void *b, void *arg)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	int c = export_frame_shown_cmp(arg, i, j);
	/* A total order, so the ids do not depend on how qsort treats ties. */
	return c ? c : (i > j) - (i < j);
}

/*
 * Numbers the frames so that frames showing the same get the same id, ids
 * in the order of what they show; rep[id] is the first frame index with it.
 * Returns the number of ids.
 */
static uint32_t export_view_number(const struct export_view *v, bool whole, uint32_t *order,
                            uint32_t *id, uint32_t *rep)
{
	uint32_t n = v->p->nframes;
	struct frame_order o = {v, whole};
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, n, sizeof *order, export_frame_cmp, &o);
	uint32_t next = 0;
	for (uint32_t k = 0; k < n; k++) {
		bool fresh = k == 0 || export_frame_shown_cmp(&o, order[k - 1], order[k]) != 0;
		if (fresh && k > 0)
			next++;
		id[order[k]] = next;
		if (fresh)
			rep[next] = order[k];
	}
	return n ? next + 1 : 0;
}

static void export_view_free(struct export_view *v)
{
	for (size_t i = 0; i < v->nowned; i++)
		free(v->owned[i]);
	free(v->owned);
	free(v->function);
	free(v->file);
	free(v->frame_id);
	free(v->frame_rep);
	free(v->func_id);
	free(v->func_rep);
	free(v->thread_title);
}

static int export_view_build(struct export_view *v, const struct export_profile *p, uint64_t total)
{
	memset(v, 0, sizeof *v);
	v->p = p;
	v->total = total;
	size_t n = p->nframes;
	uint32_t *order = NULL;
	v->owned = calloc(2 * n + 2 + p->nthreads, sizeof *v->owned);
	v->thread_title = calloc(p->nthreads ? p->nthreads : 1, sizeof *v->thread_title);
	v->function = calloc(n ? n : 1, sizeof *v->function);
	v->file = calloc(n ? n : 1, sizeof *v->file);
	v->frame_id = calloc(n ? n : 1, sizeof *v->frame_id);
	v->frame_rep = malloc((n ? n : 1) * sizeof *v->frame_rep);
	v->func_id = calloc(n ? n : 1, sizeof *v->func_id);
	v->func_rep = malloc((n ? n : 1) * sizeof *v->func_rep);
	order = calloc(n ? n : 1, sizeof *order);
	if (!v->owned || !v->function || !v->file || !v->frame_id || !v->frame_rep || !v->func_id ||
	    !v->func_rep || !order || !v->thread_title)
		goto fail;
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (!(v->thread_title[i] = export_view_thread_title(v, &p->threads[i])))
			goto fail;
	v->name = export_view_utf8(v, p->name ? p->name : "");
	v->mode = export_view_utf8(v, p->mode ? p->mode : "");
	if (!v->name || !v->mode)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		v->function[i] = export_view_utf8(v, p->frames[i].function);
		v->file[i] = export_view_utf8(v, p->frames[i].file);
		if (!v->function[i] || !v->file[i])
			goto fail;
	}
	v->nuniq = export_view_number(v, true, order, v->frame_id, v->frame_rep);
	v->nfuncs = export_view_number(v, false, order, v->func_id, v->func_rep);
	free(order);
	return 0;
fail:
	free(order);
	export_view_free(v);
	errno = ENOMEM;
	return -1;
}

int export_write(const struct export_profile *p, enum export_format format, FILE *out)
{
	uint64_t total;
	if (!out || export_profile_check(p, &total) < 0)
		return errno = EINVAL, -1;
	size_t f = 0;
	while (f < NFORMATS && formats[f].format != format)
		f++;
	if (f == NFORMATS)
		return errno = EINVAL, -1;
	/* Only the page draws two ranges; any other format would merge them into one. */
	if (p->diff && format != EXPORT_FLAMEGRAPH && format != EXPORT_HEATMAP)
		return errno = EINVAL, -1;
	struct export_view v;
	if (export_view_build(&v, p, total) < 0)
		return -1;
	int r = formats[f].write(&v, out);
	int saved = errno;
	export_view_free(&v);
	errno = saved;
	if (r == 0 && (fflush(out) == EOF || ferror(out))) {
		if (!errno)
			errno = EIO;
		r = -1;
	}
	return r;
}
