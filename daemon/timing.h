/* timing — the last few thousand measurements of something, for percentiles. */
#ifndef PYPROFD_TIMING_H
#define PYPROFD_TIMING_H

#include <stdint.h>

/*
 * The last TIMING_KEEP measurements of something, for percentiles.  Floats,
 * the counters first: each sample writes three of these, and half the
 * cache lines touched is what a float's 7 digits cost a figure of µs.
 */
#define TIMING_KEEP 4096
struct timing {
	uint32_t n, next;
	float v[TIMING_KEEP];
};
void timing_add(struct timing *t, double value);
double timing_percentile(const struct timing *t, double p); /* 0 when empty */

#endif
