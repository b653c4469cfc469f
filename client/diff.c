/*
 * `pyprofd-ctl diff`: two answers of the history, a base range and a range
 * to compare with it, set side by side.  Shares are compared, not counts,
 * so ranges of different lengths or rates compare fairly.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* One function (by name and file) and its samples on each side. */
struct diff_row {
	char *function, *file;
	uint64_t own[2], total[2];
	uint64_t seen; /* the stack that last counted it in a total */
};

struct diff {
	struct diff_row *rows;
	size_t nrows, cap;
	uint64_t total[2];
	uint64_t stamp;
};

static struct diff_row *diff_row(struct diff *d, const char *function, const char *file)
{
	for (size_t i = 0; i < d->nrows; i++)
		if (strcmp(d->rows[i].function, function) == 0 && strcmp(d->rows[i].file, file) == 0)
			return &d->rows[i];
	if (d->nrows == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		struct diff_row *rows = realloc(d->rows, cap * sizeof *rows);
		if (!rows)
			return NULL;
		d->rows = rows;
		d->cap = cap;
	}
	struct diff_row *r = &d->rows[d->nrows];
	memset(r, 0, sizeof *r);
	r->function = strdup(function);
	r->file = strdup(file);
	if (!r->function || !r->file) {
		free(r->function);
		free(r->file);
		return NULL;
	}
	d->nrows++;
	return r;
}

/* Add one side's answer (all its parts); -1 if out of memory or malformed. */
static int diff_add(struct diff *d, int side, const struct client_reply *reply)
{
	size_t nframes = 0;
	for (size_t i = 0; i < reply->nparts; i++)
		nframes += reply->parts[i]->query->n_frames;
	const Pyprofd__QueryFrame **frames = calloc(nframes ? nframes : 1, sizeof *frames);
	/* Each frame's row, found once: names are compared per frame, not per sample. */
	struct diff_row **row_of = calloc(nframes ? nframes : 1, sizeof *row_of);
	int rc = -1;
	if (!frames || !row_of)
		goto out;
	size_t f = 0;
	for (size_t i = 0; i < reply->nparts; i++)
		for (size_t k = 0; k < reply->parts[i]->query->n_frames; k++)
			frames[f++] = reply->parts[i]->query->frames[k];
	for (size_t i = 0; i < reply->nparts; i++) {
		const Pyprofd__QueryResult *r = reply->parts[i]->query;
		for (size_t k = 0; k < r->n_stacks; k++) {
			const Pyprofd__QueryStack *s = r->stacks[k];
			d->total[side] += s->count;
			d->stamp++;
			for (size_t depth = 0; depth < s->n_frames; depth++) {
				uint32_t id = s->frames[depth];
				if (id >= nframes)
					goto out;
				if (!row_of[id]) {
					row_of[id] = diff_row(d, format_str(frames[id]->function),
					                      format_str(frames[id]->file));
					if (!row_of[id])
						goto out;
				}
				struct diff_row *row = row_of[id];
				if (row->seen != d->stamp) {
					row->seen = d->stamp;
					row->total[side] += s->count;
				}
				if (depth + 1 == s->n_frames)
					row->own[side] += s->count;
			}
		}
	}
	rc = 0;
out:
	free(frames);
	free(row_of);
	return rc;
}

static double share(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

static int by_change(const void *a, const void *b, void *ctx)
{
	const struct diff *d = ctx;
	const struct diff_row *x = a, *y = b;
	double dx = fabs(share(x->own[1], d->total[1]) - share(x->own[0], d->total[0]));
	double dy = fabs(share(y->own[1], d->total[1]) - share(y->own[0], d->total[0]));
	if (dx != dy)
		return dx > dy ? -1 : 1;
	return strcmp(x->function, y->function);
}

static void diff_free(struct diff *d)
{
	for (size_t i = 0; i < d->nrows; i++) {
		free(d->rows[i].function);
		free(d->rows[i].file);
	}
	free(d->rows);
}

int diff_write(const struct client_reply *base, const struct client_reply *compare, bool json,
               FILE *out)
{
	struct diff d = {0};
	/*
	 * Rows are reached through pointers kept per frame, which a realloc would
	 * move: the table is sized for the worst case (a row per frame) up front.
	 */
	size_t frames = 0;
	for (size_t i = 0; i < base->nparts; i++)
		frames += base->parts[i]->query->n_frames;
	for (size_t i = 0; i < compare->nparts; i++)
		frames += compare->parts[i]->query->n_frames;
	d.cap = frames ? frames : 1;
	d.rows = malloc(d.cap * sizeof *d.rows);
	if (!d.rows || diff_add(&d, 0, base) != 0 || diff_add(&d, 1, compare) != 0) {
		diff_free(&d);
		errno = ENOMEM;
		return -1;
	}
	qsort_r(d.rows, d.nrows, sizeof *d.rows, by_change, &d);
	int rc = 0;
	if (json) {
		json_t *rows = json_array();
		for (size_t i = 0; rows && i < d.nrows; i++) {
			const struct diff_row *r = &d.rows[i];
			json_array_append_new(
				rows, json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:f, s:f}", "function",
			                        format_json_string(r->function), "file", format_json_string(r->file),
			                        "base_own", (json_int_t)r->own[0], "base_total", (json_int_t)r->total[0],
			                        "compare_own", (json_int_t)r->own[1], "compare_total",
			                        (json_int_t)r->total[1], "own_percent_change",
			                        share(r->own[1], d.total[1]) - share(r->own[0], d.total[0]),
			                        "total_percent_change",
			                        share(r->total[1], d.total[1]) - share(r->total[0], d.total[0])));
		}
		json_t *doc = json_pack("{s:I, s:I, s:o}", "base_samples", (json_int_t)d.total[0],
		                        "compare_samples", (json_int_t)d.total[1], "functions", rows);
		char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
		rc = text && fprintf(out, "%s\n", text) > 0 ? 0 : -1;
		free(text);
		json_decref(doc);
	} else {
		fprintf(out, "base: %llu samples, compare: %llu samples; shares of each, by change of own share\n\n",
		        (unsigned long long)d.total[0], (unsigned long long)d.total[1]);
		fprintf(out, "%7s %7s %8s   %7s %7s  %s\n", "own%", "->own%", "change", "total%", "->tot%",
		        "function (file)");
		for (size_t i = 0; i < d.nrows; i++) {
			const struct diff_row *r = &d.rows[i];
			double b = share(r->own[0], d.total[0]), c = share(r->own[1], d.total[1]);
			fprintf(out, "%7.2f %7.2f %+8.2f   %7.2f %7.2f  ", b, c, c - b, share(r->total[0], d.total[0]),
			        share(r->total[1], d.total[1]));
			format_put(out, r->function, 80, 0);
			fputs(" (", out);
			format_put(out, r->file, 200, 0);
			fputs(")\n", out);
		}
	}
	diff_free(&d);
	if (fflush(out) != 0 || ferror(out))
		rc = -1;
	return rc;
}
