/* The last few thousand measurements of one quantity, for percentiles on request. */
#include <stdlib.h>
#include <string.h>

#include "timing.h"

void timing_add(struct timing *t, double value)
{
	t->v[t->next] = (float)value;
	t->next = (t->next + 1) % TIMING_KEEP;
	if (t->n < TIMING_KEEP)
		t->n++;
}

static int timing_float_cmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

double timing_percentile(const struct timing *t, double p)
{
	if (t->n == 0)
		return 0;
	float *sorted = malloc(t->n * sizeof *sorted);
	if (!sorted)
		return 0;
	memcpy(sorted, t->v, t->n * sizeof *sorted);
	qsort(sorted, t->n, sizeof *sorted, timing_float_cmp);
	size_t at = (size_t)(p / 100.0 * (t->n - 1) + 0.5);
	double value = sorted[at < t->n ? at : t->n - 1];
	free(sorted);
	return value;
}
