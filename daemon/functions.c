/*
 * Own and total samples per function, a function being its qualified name
 * in a file from its first line (a method and a function of one short name
 * are two):
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

struct functions_key {
	const char *function, *file;
	int32_t first_line;
};

static uint32_t functions_hash(const struct functions_key *k)
{
	/* Mixed, not xor'd alone: "ab" in "c" must differ from "a" in "bc". */
	return hash_u64((uint64_t)hash_bytes(k->function, strlen(k->function)) << 32 |
	                hash_bytes(k->file, strlen(k->file))) ^
	       hash_u64((uint64_t)(uint32_t)k->first_line);
}

static bool functions_equal(const void *ctx, uint32_t id, const void *key)
{
	const Pyprofd__FunctionRow *row = ((const struct functions *)ctx)->rows[id];
	const struct functions_key *k = key;
	return row->first_line == k->first_line && strcmp(row->function, k->function) == 0 &&
	       strcmp(row->file, k->file) == 0;
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
	hash_free(&fs->index);
	free(fs->row_of_frame);
	memset(fs, 0, sizeof *fs);
}

void functions_forget_frames(struct functions *fs)
{
	if (fs->row_of_frame)
		memset(fs->row_of_frame, 0, fs->nframes * sizeof *fs->row_of_frame);
}

/* The row of a function, made on first sight; -1 if out of memory. */
static long functions_row_by_name(struct functions *fs, const char *function, const char *file,
                                  int32_t first_line)
{
	struct functions_key key = {function, file, first_line};
	uint32_t hash = functions_hash(&key);
	if (fs->nrows >= HASH_MAX_IDS || hash_reserve(&fs->index, 1) != 0)
		return -1;
	struct hash_slot *slot = hash_probe(&fs->index, hash, functions_equal, fs, &key);
	if (slot->id)
		return (long)slot->id - 1;
	if (array_reserve((void **)&fs->rows, &fs->cap, fs->nrows, sizeof *fs->rows, NULL) != 0 ||
	    array_reserve((void **)&fs->seen, &fs->seen_cap, fs->nrows, sizeof *fs->seen, NULL) != 0)
		return -1;
	Pyprofd__FunctionRow *row = arena_alloc(fs->arena, sizeof *row);
	if (!row)
		return -1;
	pyprofd__function_row__init(row);
	row->function = arena_strdup(fs->arena, function);
	row->file = arena_strdup(fs->arena, file);
	row->first_line = first_line;
	if (!row->function || !row->file)
		return -1;
	fs->seen[fs->nrows] = 0;
	fs->rows[fs->nrows] = row;
	hash_fill(&fs->index, slot, hash, (uint32_t)fs->nrows);
	return (long)fs->nrows++;
}

void functions_next_stack(struct functions *fs, int side, uint64_t count)
{
	fs->samples[side != 0] += count;
	fs->stamp++;
}

int functions_count(struct functions *fs, int side, uint32_t frame, const char *function,
                    const char *file, int32_t first_line, bool innermost, uint64_t count)
{
	if (frame >= fs->nframes) {
		size_t old = fs->nframes;
		if (array_reserve((void **)&fs->row_of_frame, &fs->nframes, frame, sizeof *fs->row_of_frame,
		                  NULL) != 0)
			return -1;
		memset(fs->row_of_frame + old, 0, (fs->nframes - old) * sizeof *fs->row_of_frame);
	}
	if (!fs->row_of_frame[frame]) {
		long row = functions_row_by_name(fs, function, file ? file : "", first_line);
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

/* By name, then file, then first line: the last word of every order, so ties never depend on qsort. */
static int functions_by_name(const void *x, const void *y)
{
	const Pyprofd__FunctionRow *a = *(Pyprofd__FunctionRow *const *)x;
	const Pyprofd__FunctionRow *b = *(Pyprofd__FunctionRow *const *)y;
	int c = strcmp(a->function, b->function);
	if (!c)
		c = strcmp(a->file, b->file);
	return c ? c : (a->first_line > b->first_line) - (a->first_line < b->first_line);
}

static int functions_by_own(const void *x, const void *y)
{
	const Pyprofd__FunctionRow *a = *(Pyprofd__FunctionRow *const *)x;
	const Pyprofd__FunctionRow *b = *(Pyprofd__FunctionRow *const *)y;
	if (a->own != b->own)
		return a->own > b->own ? -1 : 1;
	if (a->total != b->total)
		return a->total > b->total ? -1 : 1;
	return functions_by_name(x, y);
}

static int functions_by_total(const void *x, const void *y)
{
	const Pyprofd__FunctionRow *a = *(Pyprofd__FunctionRow *const *)x;
	const Pyprofd__FunctionRow *b = *(Pyprofd__FunctionRow *const *)y;
	if (a->total != b->total)
		return a->total > b->total ? -1 : 1;
	if (a->own != b->own)
		return a->own > b->own ? -1 : 1;
	return functions_by_name(x, y);
}

static double functions_share(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

/* Shares, not counts, so ranges of different lengths or rates compare fairly. */
static int functions_by_change(const void *x, const void *y, void *ctx)
{
	const uint64_t *samples = ctx;
	const Pyprofd__FunctionRow *a = *(Pyprofd__FunctionRow *const *)x;
	const Pyprofd__FunctionRow *b = *(Pyprofd__FunctionRow *const *)y;
	double da = fabs(functions_share(a->own, samples[0]) - functions_share(a->base_own, samples[1]));
	double db = fabs(functions_share(b->own, samples[0]) - functions_share(b->base_own, samples[1]));
	if (da != db)
		return da > db ? -1 : 1;
	return functions_by_own(x, y);
}

void functions_sort(struct functions *fs, enum functions_order order)
{
	/* An empty table has no array to hand qsort at all. */
	if (fs->nrows < 2)
		return;
	switch (order) {
	case FUNCTIONS_BY_CHANGE:
		qsort_r(fs->rows, fs->nrows, sizeof *fs->rows, functions_by_change, fs->samples);
		break;
	case FUNCTIONS_BY_TOTAL:
		qsort(fs->rows, fs->nrows, sizeof *fs->rows, functions_by_total);
		break;
	case FUNCTIONS_BY_NAME:
		qsort(fs->rows, fs->nrows, sizeof *fs->rows, functions_by_name);
		break;
	case FUNCTIONS_BY_OWN:
		qsort(fs->rows, fs->nrows, sizeof *fs->rows, functions_by_own);
		break;
	}
}
