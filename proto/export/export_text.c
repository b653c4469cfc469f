/*
 * Collapsed stacks: the input of flamegraph tools.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"

/* A growing string. */
struct buf {
	char *data;
	size_t len, cap;
};

static int buf_add(struct buf *b, const char *s, size_t n)
{
	if (n >= b->cap - b->len || !b->data) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap - b->len <= n) {
			if (cap > SIZE_MAX / 2)
				return errno = ENOMEM, -1;
			cap *= 2;
		}
		char *d = realloc(b->data, cap);
		if (!d)
			return errno = ENOMEM, -1;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

/*
 * Appends s with '\' doubled and control characters and ';' as \xNN: a
 * collapsed line stays one line whose ';' only separate frames, and the
 * escaping can be undone.
 */
static int buf_escaped(struct buf *b, const char *s)
{
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		char esc[8];
		if (c == '\\') {
			if (buf_add(b, "\\\\", 2) < 0)
				return -1;
		} else if (c < 0x20 || c == 0x7f || c == ';') {
			snprintf(esc, sizeof esc, "\\x%02x", c);
			if (buf_add(b, esc, 4) < 0)
				return -1;
		} else if (buf_add(b, p, 1) < 0) {
			return -1;
		}
	}
	return 0;
}

/* "function (file:line)", "function (file)" without a line, "function" for a marker. */
static int buf_frame(struct buf *b, const struct export_view *v, uint32_t i)
{
	if (buf_escaped(b, v->function[i]) < 0)
		return -1;
	if (!v->file[i][0])
		return 0;
	if (buf_add(b, " (", 2) < 0 || buf_escaped(b, v->file[i]) < 0)
		return -1;
	char num[24] = "";
	if (export_frame_line(&v->p->frames[i]) >= 0)
		snprintf(num, sizeof num, ":%" PRId32, v->p->frames[i].line);
	return buf_add(b, num, strlen(num)) < 0 || buf_add(b, ")", 1) < 0 ? -1 : 0;
}

/* ---- collapsed ------------------------------------------------------------ */

struct line {
	char *text;
	uint64_t count;
};

static int line_cmp(const void *a, const void *b)
{
	return strcmp(((const struct line *)a)->text, ((const struct line *)b)->text);
}

int export_write_collapsed(const struct export_view *v, FILE *out)
{
	const struct export_profile *p = v->p;
	int r = -1;
	size_t nlines = 0;
	char **labels = calloc(v->nuniq ? v->nuniq : 1, sizeof *labels);
	size_t *lens = calloc(v->nuniq ? v->nuniq : 1, sizeof *lens);
	struct line *lines = calloc(p->nstacks ? p->nstacks : 1, sizeof *lines);
	if (!labels || !lens || !lines)
		goto out;
	/* Each distinct frame's text once; a stack's line is their concatenation. */
	for (uint32_t u = 0; u < v->nuniq; u++) {
		struct buf b = {0};
		if (buf_frame(&b, v, v->frame_rep[u]) < 0 || buf_add(&b, "", 0) < 0) {
			free(b.data);
			goto out;
		}
		labels[u] = b.data;
		lens[u] = b.len;
	}
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		if (!st->count)
			continue;
		/* --per-thread: the thread as the first frame, so each thread is a tree of its own. */
		struct buf root = {0};
		char unnamed[48];
		const char *title = export_stack_thread_title(v, st);
		if (!title && st->thread_id) {
			snprintf(unnamed, sizeof unnamed, "thread %llu", (unsigned long long)st->thread_id);
			title = unnamed;
		}
		if (p->per_thread && title && (buf_escaped(&root, title) < 0 || buf_add(&root, ";", 1) < 0)) {
			free(root.data);
			goto out;
		}
		size_t len = st->depth + root.len; /* separators and the NUL */
		for (uint32_t d = 0; d < st->depth; d++)
			len += lens[v->frame_id[st->frames[d]]];
		char *text = malloc(len);
		if (!text) {
			free(root.data);
			goto out;
		}
		size_t o = root.len;
		if (root.len)
			memcpy(text, root.data, root.len);
		free(root.data);
		for (uint32_t d = 0; d < st->depth; d++) {
			uint32_t u = v->frame_id[st->frames[d]];
			if (d)
				text[o++] = ';';
			memcpy(text + o, labels[u], lens[u]);
			o += lens[u];
		}
		text[o] = '\0';
		lines[nlines].text = text;
		lines[nlines++].count = st->count;
	}
	qsort(lines, nlines, sizeof *lines, line_cmp);
	for (size_t i = 0; i < nlines;) {
		uint64_t count = lines[i].count;
		size_t j = i + 1;
		for (; j < nlines && strcmp(lines[j].text, lines[i].text) == 0; j++)
			count += lines[j].count;
		if (fprintf(out, "%s %" PRIu64 "\n", lines[i].text, count) < 0)
			goto out;
		i = j;
	}
	r = 0;
out:
	for (uint32_t u = 0; labels && u < v->nuniq; u++)
		free(labels[u]);
	for (size_t i = 0; i < nlines; i++)
		free(lines[i].text);
	free(labels);
	free(lens);
	free(lines);
	return r;
}
