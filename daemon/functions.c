/*
 * Own and total samples per function, a function being a name in a file:
 * what `top` shows of the last seconds and a history query's function table
 * and diff show of a time range.  Stacks arrive frame by frame with their
 * frame ids; a frame id is mapped to its function once, so names are hashed
 * once per distinct frame, not once per sample.  Two sides keep two ranges
 * apart for a diff: side 0 counts into own/total, side 1 into base_*.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"

static uint64_t name_hash(const char *function, const char *file)
{
	uint64_t h = 1469598103934665603ull;
	for (const char *s = function; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	h = (h ^ 0x1f) * 1099511628211ull; /* a separator, so "ab"+"c" differs from "a"+"bc" */
	for (const char *s = file; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

void functions_init(struct functions *fs, struct arena *a)
{
	memset(fs, 0, sizeof *fs);
	fs->arena = a;
}

void functions_free(struct functions *fs)
{
	free(fs->rows);
	free(fs->seen);
	free(fs->slots);
	free(fs->row_of_frame);
	memset(fs, 0, sizeof *fs);
}

void functions_forget_frames(struct functions *fs)
{
	if (fs->row_of_frame)
		memset(fs->row_of_frame, 0, fs->nframes * sizeof *fs->row_of_frame);
}

/* Room for the index to take one more row at most half full; -1 if out of memory. */
static int index_reserve(struct functions *fs)
{
	if ((fs->nrows + 1) * 2 <= fs->nslots)
		return 0;
	size_t n = fs->nslots ? fs->nslots * 2 : 256;
	uint32_t *slots = calloc(n, sizeof *slots); /* row + 1; 0 empty */
	if (!slots)
		return -1;
	for (size_t i = 0; i < fs->nrows; i++) {
		size_t k = name_hash(fs->rows[i]->function, fs->rows[i]->file) & (n - 1);
		while (slots[k])
			k = (k + 1) & (n - 1);
		slots[k] = (uint32_t)i + 1;
	}
	free(fs->slots);
	fs->slots = slots;
	fs->nslots = n;
	return 0;
}

/* The row of a function, made on first sight; -1 if out of memory. */
static long row_by_name(struct functions *fs, const char *function, const char *file)
{
	if (fs->nrows >= UINT32_MAX - 1 || index_reserve(fs) < 0)
		return -1;
	size_t mask = fs->nslots - 1, k = name_hash(function, file) & mask;
	/* Never more than half full: an empty slot ends every probe. */
	for (; fs->slots[k]; k = (k + 1) & mask) {
		const Pyprofd__FunctionRow *row = fs->rows[fs->slots[k] - 1];
		if (strcmp(row->function, function) == 0 && strcmp(row->file, file) == 0)
			return (long)fs->slots[k] - 1;
	}
	if (fs->nrows == fs->cap) {
		size_t cap = fs->cap ? fs->cap * 2 : 64;
		Pyprofd__FunctionRow **rows = realloc(fs->rows, cap * sizeof *rows);
		if (rows)
			fs->rows = rows;
		uint64_t *seen = realloc(fs->seen, cap * sizeof *seen);
		if (seen)
			fs->seen = seen;
		if (!rows || !seen)
			return -1;
		fs->cap = cap;
	}
	Pyprofd__FunctionRow *row = arena_alloc(fs->arena, sizeof *row);
	if (!row)
		return -1;
	pyprofd__function_row__init(row);
	row->function = arena_strdup(fs->arena, function);
	row->file = arena_strdup(fs->arena, file);
	if (!row->function || !row->file)
		return -1;
	fs->seen[fs->nrows] = 0;
	fs->rows[fs->nrows] = row;
	fs->slots[k] = (uint32_t)++fs->nrows;
	return (long)fs->nrows - 1;
}

void functions_next_stack(struct functions *fs, int side, uint64_t count)
{
	fs->samples[side != 0] += count;
	fs->stamp++;
}

int functions_count(struct functions *fs, int side, uint32_t frame, const char *function,
                    const char *file, bool innermost, uint64_t count)
{
	if (frame >= fs->nframes) {
		size_t n = (size_t)frame + 1 > fs->nframes * 2 ? (size_t)frame + 1 : fs->nframes * 2;
		uint32_t *v = realloc(fs->row_of_frame, n * sizeof *v);
		if (!v)
			return -1;
		memset(v + fs->nframes, 0, (n - fs->nframes) * sizeof *v);
		fs->row_of_frame = v;
		fs->nframes = n;
	}
	if (!fs->row_of_frame[frame]) {
		long row = row_by_name(fs, function, file ? file : "");
		if (row < 0)
			return -1;
		fs->row_of_frame[frame] = (uint32_t)row + 1;
	}
	size_t at = fs->row_of_frame[frame] - 1;
	Pyprofd__FunctionRow *row = fs->rows[at];
	uint64_t *own = side ? &row->base_own : &row->own, *total = side ? &row->base_total : &row->total;
	if (innermost)
		*own += count;
	/* Recursion counts a function once per stack in its total. */
	if (fs->seen[at] != fs->stamp) {
		fs->seen[at] = fs->stamp;
		*total += count;
	}
	return 0;
}

static int by_own(const void *x, const void *y)
{
	const Pyprofd__FunctionRow *a = *(Pyprofd__FunctionRow *const *)x;
	const Pyprofd__FunctionRow *b = *(Pyprofd__FunctionRow *const *)y;
	if (a->own != b->own)
		return a->own > b->own ? -1 : 1;
	if (a->total != b->total)
		return a->total > b->total ? -1 : 1;
	int c = strcmp(a->function, b->function);
	return c ? c : strcmp(a->file, b->file);
}

static double share(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

/* Shares, not counts, so ranges of different lengths or rates compare fairly. */
static int by_change(const void *x, const void *y, void *ctx)
{
	const uint64_t *samples = ctx;
	const Pyprofd__FunctionRow *a = *(Pyprofd__FunctionRow *const *)x;
	const Pyprofd__FunctionRow *b = *(Pyprofd__FunctionRow *const *)y;
	double da = fabs(share(a->own, samples[0]) - share(a->base_own, samples[1]));
	double db = fabs(share(b->own, samples[0]) - share(b->base_own, samples[1]));
	if (da != db)
		return da > db ? -1 : 1;
	return by_own(x, y);
}

void functions_sort(struct functions *fs, bool by_share_change)
{
	/* An empty table has no array to hand qsort at all. */
	if (fs->nrows < 2)
		return;
	if (by_share_change)
		qsort_r(fs->rows, fs->nrows, sizeof *fs->rows, by_change, fs->samples);
	else
		qsort(fs->rows, fs->nrows, sizeof *fs->rows, by_own);
}
