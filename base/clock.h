/*
 * The clocks every part of pyprofd reads, one helper each: the monotonic
 * clock for durations and deadlines, the wall clock for unix times.
 * Inline, as the unwinder reads the monotonic one on its hot path.
 */
#ifndef PYPROFD_CLOCK_H
#define PYPROFD_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in ns: deadlines, and the in-kernel reader's stamps (bpf_ktime_get_ns). */
static inline uint64_t clock_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in seconds. */
static inline double clock_mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Unix time in seconds. */
static inline double clock_wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
