/*
 * The text formats: collapsed stacks (the input of flamegraph tools) and the
 * table of top functions.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
 * Appends s with '\' doubled and control characters (and ';' when asked) as
 * \xNN: a collapsed line stays one line whose ';' only separate frames, a
 * table row cannot drive the terminal, and the escaping can be undone.
 */
static int buf_escaped(struct buf *b, const char *s, bool semicolon)
{
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		char esc[8];
		if (c == '\\') {
			if (buf_add(b, "\\\\", 2) < 0)
				return -1;
		} else if (c < 0x20 || c == 0x7f || (semicolon && c == ';')) {
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
static int buf_frame(struct buf *b, const struct export_view *v, uint32_t i, bool line,
                     bool semicolon)
{
	if (buf_escaped(b, v->function[i], semicolon) < 0)
		return -1;
	if (!v->file[i][0])
		return 0;
	if (buf_add(b, " (", 2) < 0 || buf_escaped(b, v->file[i], semicolon) < 0)
		return -1;
	char num[24] = "";
	if (line && v->p->frames[i].line >= 0)
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
		if (buf_frame(&b, v, v->frame_rep[u], true, true) < 0 || buf_add(&b, "", 0) < 0) {
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
		size_t len = st->depth; /* separators and the NUL */
		for (uint32_t d = 0; d < st->depth; d++)
			len += lens[v->frame_id[st->frames[d]]];
		char *text = malloc(len);
		if (!text)
			goto out;
		size_t o = 0;
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

/* ---- table ---------------------------------------------------------------- */

struct row {
	uint32_t func; /* a frame index of the function */
	uint64_t own, total;
};

static int row_cmp(const void *a, const void *b, void *arg)
{
	const struct export_view *v = arg;
	const struct row *x = a, *y = b;
	if (x->own != y->own)
		return x->own > y->own ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	int c = strcmp(v->function[x->func], v->function[y->func]);
	return c ? c : strcmp(v->file[x->func], v->file[y->func]);
}

static void format_time(double unix_s, char *buf, size_t len)
{
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%.0f", unix_s);
}

static unsigned digits(uint64_t n)
{
	unsigned d = 1;
	while (n >= 10) {
		n /= 10;
		d++;
	}
	return d;
}

static double percent(uint64_t n, uint64_t total)
{
	return total ? 100.0 * (double)n / (double)total : 0.0;
}

/*
 * One row per function, (function, file), that appears in a stack: own
 * samples are those with it as the leaf, total those with it anywhere in the
 * stack, counted once per stack however often recursion repeats it.
 */
int export_write_table(const struct export_view *v, FILE *out)
{
	const struct export_profile *p = v->p;
	int r = -1;
	size_t nf = v->nfuncs ? v->nfuncs : 1;
	uint64_t *own = calloc(nf, sizeof *own), *total = calloc(nf, sizeof *total);
	uint32_t *seen = calloc(nf, sizeof *seen); /* the last stack (+1) that counted it */
	struct row *rows = calloc(nf, sizeof *rows);
	struct buf b = {0};
	if (!own || !total || !seen || !rows)
		goto out;
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		if (!st->count)
			continue;
		own[v->func_id[st->frames[st->depth - 1]]] += st->count;
		for (uint32_t d = 0; d < st->depth; d++) {
			uint32_t f = v->func_id[st->frames[d]];
			if (seen[f] != s + 1) {
				seen[f] = s + 1;
				total[f] += st->count;
			}
		}
	}
	size_t nrows = 0;
	uint64_t max = 0;
	for (uint32_t f = 0; f < v->nfuncs; f++) {
		if (!total[f])
			continue;
		rows[nrows++] = (struct row){v->func_rep[f], own[f], total[f]};
		if (total[f] > max)
			max = total[f];
	}
	qsort_r(rows, nrows, sizeof *rows, row_cmp, (void *)v);

	/* The heading: what the profile is, on one line, made safe for a terminal. */
	if (buf_escaped(&b, v->name[0] ? v->name : "profile", false) < 0 ||
	    buf_add(&b, ": ", 2) < 0 || buf_escaped(&b, v->mode[0] ? v->mode : "?", false) < 0)
		goto out;
	char from[32], until[32];
	format_time(p->from_unix, from, sizeof from);
	format_time(p->until_unix, until, sizeof until);
	if (fprintf(out, "%s, %" PRIu64 " samples at %" PRIu32 " Hz, %s to %s UTC\n\n", b.data,
	            v->total, p->rate_hz, from, until) < 0)
		goto out;
	int w = (int)digits(max);
	if (w < 5)
		w = 5;
	if (fprintf(out, "%*s %7s %*s %7s  %s\n", w, "own", "own%", w, "total", "total%",
	            "function") < 0)
		goto out;
	for (size_t i = 0; i < nrows; i++) {
		b.len = 0;
		if (buf_frame(&b, v, rows[i].func, false, false) < 0 || buf_add(&b, "", 0) < 0)
			goto out;
		if (fprintf(out, "%*" PRIu64 " %6.2f%% %*" PRIu64 " %6.2f%%  %s\n", w, rows[i].own,
		            percent(rows[i].own, v->total), w, rows[i].total,
		            percent(rows[i].total, v->total), b.data) < 0)
			goto out;
	}
	r = 0;
out:
	free(b.data);
	free(own);
	free(total);
	free(seen);
	free(rows);
	return r;
}
