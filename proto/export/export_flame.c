/*
 * The flamegraph and the heatmap: one HTML page with its CSS and script
 * inline, so it opens from a file with no network.  The page is
 * page.html, built in as export_page; the profile goes into it as JSON, as
 * a call tree (each distinct path from the root once) and the samples at
 * its nodes, by thread, time slot and range, so the script can count any
 * selection of them by walking up from each sample's node.
 *
 * Nothing from the profile is written into the HTML except inside that JSON,
 * and there every '<', '>' and '&' is a \uXXXX escape: no name and no line
 * of a source can close the script element or open a comment inside it.
 * The script puts names and sources into the page as text nodes only, never
 * as markup.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "export_int.h"
#include "array.h"
#include "hash.h"

/* Where the page takes its data: the profile replaces this. */
#define PAGE_MARKER "<!--PROFILE-->"

/* json_dump_callback's sink: writes the JSON with '<', '>' and '&' escaped. */
static int emit_escaped(const char *buf, size_t len, void *data)
{
	FILE *out = data;
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		const char *esc = buf[i] == '<'   ? "\\u003c"
		                  : buf[i] == '>' ? "\\u003e"
		                  : buf[i] == '&' ? "\\u0026"
		                                  : NULL;
		if (!esc)
			continue;
		/* Outside strings JSON has none of the three, so this is always inside one. */
		if (fwrite(buf + start, 1, i - start, out) != i - start || fputs(esc, out) == EOF)
			return -1;
		start = i + 1;
	}
	return fwrite(buf + start, 1, len - start, out) == len - start ? 0 : -1;
}

/* A source's text as a JSON string: cut at a NUL, bytes that are not UTF-8 as U+FFFD; NULL if out of memory. */
static json_t *page_text(const struct export_source *src)
{
	if (!src->text)
		return json_null();
	const char *nul = memchr(src->text, '\0', src->len);
	size_t len = nul ? (size_t)(nul - src->text) : src->len;
	char *copy = malloc(len + 1);
	if (!copy)
		return NULL;
	memcpy(copy, src->text, len);
	copy[len] = '\0';
	json_t *j = export_json_string(copy);
	free(copy);
	return j;
}

/* threads: [{title, pid, labels: ["key=value"]}]; 0 or -1. */
static int page_threads(const struct export_view *v, json_t *doc)
{
	const struct export_profile *p = v->p;
	json_t *threads = json_array();
	if (export_json_set(doc, "threads", threads))
		return -1;
	for (uint32_t i = 0; i < p->nthreads; i++) {
		const struct export_thread *t = &p->threads[i];
		json_t *o = json_object(), *labels = json_array();
		if (export_json_add(threads, o) || export_json_set(o, "labels", labels) ||
		    export_json_set(o, "title", json_string(v->thread_title[i])) ||
		    export_json_set(o, "pid", json_integer(t->pid)))
			return -1;
		for (uint32_t k = 0; k < t->nlabels; k++) {
			char *kv = NULL;
			if (asprintf(&kv, "%s=%s", t->labels[k].key, t->labels[k].value) < 0)
				return -1;
			int rc = export_json_add(labels, export_json_string(kv));
			free(kv);
			if (rc)
				return -1;
		}
	}
	return 0;
}

/* The page's columns of numbers, written as they are rather than as a JSON value each. */
enum page_column { COL_NODES, COL_NODE, COL_COUNT, COL_IDLE, COL_THREAD, COL_SLOT, COL_BASE, NCOLS };
static const char *const page_column_name[NCOLS] = {
	"nodes", "sample_node", "sample_count", "sample_idle", "sample_thread", "sample_slot", "sample_base",
};
struct page_columns {
	int64_t *v[NCOLS];
	size_t n[NCOLS], cap[NCOLS];
	bool on[NCOLS];
};

static int page_put(struct page_columns *c, enum page_column col, int64_t x)
{
	if (array_reserve((void **)&c->v[col], &c->cap[col], c->n[col], sizeof *c->v[col], NULL) < 0)
		return -1;
	c->v[col][c->n[col]++] = x;
	return 0;
}

static void page_columns_free(struct page_columns *c)
{
	for (int i = 0; i < NCOLS; i++)
		free(c->v[i]);
}

/*
 * nodes: [parent, frame, ...], a node of the call tree per pair (parent
 * -1: under the root; a parent before its children), and per sample (a
 * stack of the profile) its node, count, idle samples, thread (-1: none),
 * time slot (from the first, when split) and range (1: a diff's base).
 * 0 or -1.
 */
static int page_tree(const struct export_view *v, struct page_columns *c, int64_t slot_first,
                     uint64_t *compared)
{
	const struct export_profile *p = v->p;
	for (int i = 0; i < NCOLS; i++)
		c->on[i] = (i != COL_SLOT || p->slot_seconds) && (i != COL_BASE || p->diff);
	struct hash_map tree = {0}; /* (parent, frame id) -> node */
	int64_t nnodes = 0;
	int rc = -1;
	*compared = 0;
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		if (!st->count)
			continue;
		int64_t at = -1;
		for (uint32_t d = 0; d < st->depth; d++) {
			int64_t key[2] = {at, v->frame_id[st->frames[d]]}, found;
			if (hash_map_get(&tree, key, sizeof key, &found)) {
				at = found;
				continue;
			}
			if (hash_map_put(&tree, key, sizeof key, nnodes) < 0 || page_put(c, COL_NODES, at) ||
			    page_put(c, COL_NODES, key[1]))
				goto out;
			at = nnodes++;
		}
		if (page_put(c, COL_NODE, at) || page_put(c, COL_COUNT, (int64_t)st->count) ||
		    page_put(c, COL_IDLE, (int64_t)st->idle) || page_put(c, COL_THREAD, (int64_t)st->thread - 1) ||
		    (p->slot_seconds && page_put(c, COL_SLOT, st->slot_start / p->slot_seconds - slot_first)) ||
		    (p->diff && page_put(c, COL_BASE, st->base)))
			goto out;
		if (!st->base)
			*compared += st->count;
	}
	rc = 0;
out:
	hash_map_clear(&tree);
	return rc;
}

/* ,"name":[n,n,...] */
static int page_write_column(FILE *out, const char *name, const int64_t *v, size_t n)
{
	if (fprintf(out, ",\"%s\":[", name) < 0)
		return -1;
	char buf[32];
	for (size_t i = 0; i < n; i++) {
		int len = snprintf(buf, sizeof buf, i ? ",%lld" : "%lld", (long long)v[i]);
		if (fwrite(buf, 1, (size_t)len, out) != (size_t)len)
			return -1;
	}
	return export_puts(out, "]");
}

/*
 * The page's data: {name, mode, rate_hz, from, until, total (the compared
 * range's in a diff), frames: [[function (the qualified name), file, line,
 * kind, first_line]], the tree and samples of page_tree, threads (see
 * page_threads), slot_seconds, slot_first and nslots (0 when not split by
 * time: the first slot's start / slot_seconds, and how many slots from it
 * to the last), base: {from, until, total} or null, sources: [[file, text
 * or null, note]] (a heatmap's; none in a flamegraph), view: the one to
 * open}.  frames are the view's distinct ones.
 */
static json_t *page_data(const struct export_view *v, bool heatmap, struct page_columns *c)
{
	const struct export_profile *p = v->p;
	json_t *frames, *stacks, *doc = export_json_doc(v, "total", &frames, &stacks);
	if (!doc || json_object_del(doc, "stacks") || page_threads(v, doc))
		goto fail;
	for (uint32_t u = 0; u < v->nuniq; u++) {
		uint32_t i = v->frame_rep[u];
		json_t *f = json_array();
		if (export_json_add(frames, f) || export_json_add(f, json_string(v->function[i])) ||
		    export_json_add(f, json_string(v->file[i])) ||
		    export_json_add(f, json_integer(export_frame_line(&p->frames[i]))) ||
		    export_json_add(f, json_integer(p->frames[i].kind)) ||
		    export_json_add(f, json_integer(p->frames[i].first_line)))
			goto fail;
	}
	int64_t first = 0, last = 0;
	bool any = false;
	for (uint32_t s = 0; p->slot_seconds && s < p->nstacks; s++) {
		int64_t k = p->stacks[s].slot_start / p->slot_seconds;
		if (!any || k < first)
			first = k;
		if (!any || k > last)
			last = k;
		any = true;
	}
	uint64_t compared;
	if (page_tree(v, c, first, &compared) ||
	    export_json_set(doc, "slot_seconds", json_integer(p->slot_seconds)) ||
	    export_json_set(doc, "slot_first", json_integer(first)) ||
	    export_json_set(doc, "nslots", json_integer(any ? last - first + 1 : 0)) ||
	    export_json_set(doc, "view", json_string(heatmap ? "source" : "icicle")))
		goto fail;
	if (p->diff) {
		json_t *base = json_object();
		if (export_json_set(doc, "base", base) ||
		    export_json_set(base, "from", export_json_double(p->base_from_unix)) ||
		    export_json_set(base, "until", export_json_double(p->base_until_unix)) ||
		    export_json_set(base, "total", export_json_u64(v->total - compared)) ||
		    export_json_set(doc, "total", export_json_u64(compared)))
			goto fail;
	} else if (export_json_set(doc, "base", json_null())) {
		goto fail;
	}
	if (heatmap) {
		json_t *sources = json_array();
		if (export_json_set(doc, "sources", sources))
			goto fail;
		for (uint32_t i = 0; i < p->nsources; i++) {
			const struct export_source *src = &p->sources[i];
			json_t *a = json_array();
			if (export_json_add(sources, a) || export_json_add(a, export_json_string(src->file)) ||
			    export_json_add(a, page_text(src)) ||
			    export_json_add(a, export_json_string(src->note ? src->note : "")))
				goto fail;
		}
	}
	return doc;
fail:
	json_decref(doc);
	return NULL;
}

/*
 * The page: its head, the data (the JSON object of page_data with the
 * columns of numbers added before its closing brace), its tail.
 */
static int page_write(const struct export_view *v, bool heatmap, FILE *out)
{
	const char *marker = strstr(export_page, PAGE_MARKER);
	struct page_columns c = {0};
	json_t *data = marker ? page_data(v, heatmap, &c) : NULL;
	char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
	json_decref(data);
	if (!text) {
		page_columns_free(&c);
		return errno = ENOMEM, -1;
	}
	size_t head = (size_t)(marker - export_page), len = strlen(text);
	errno = 0;
	int r = fwrite(export_page, 1, head, out) == head && len > 1 && emit_escaped(text, len - 1, out) == 0
	                ? 0
	                : -1;
	for (int i = 0; r == 0 && i < NCOLS; i++)
		if (c.on[i])
			r = page_write_column(out, page_column_name[i], c.v[i], c.n[i]);
	if (r == 0)
		r = export_puts(out, "}") == 0 && export_puts(out, marker + strlen(PAGE_MARKER)) == 0 ? 0 : -1;
	if (r < 0 && !errno)
		errno = ENOMEM;
	free(text);
	page_columns_free(&c);
	return r;
}

int export_write_flamegraph(const struct export_view *v, FILE *out)
{
	return page_write(v, false, out);
}

int export_write_heatmap(const struct export_view *v, FILE *out)
{
	return page_write(v, true, out);
}
