/*
 * What waking up costs on this host: a process that does nothing but wait
 * for the next tick of a grid, as the daemon's loop does (a timerfd armed
 * at the tick, absolute, waited on with epoll), and wake, RATE times a
 * second.  Its CPU time is the floor of any sampler that wakes at that rate
 * here, whatever it then reads: the daemon pays it once a tick, shared by
 * every target due then.
 *
 * A virtual machine can make this the largest single part of a sampler's
 * cost: a CPU woken from idle returns through the hypervisor, and the
 * woken thread is charged for some of it.  bench/daemon.py runs this beside
 * its targets, before the daemon samples them, so the figure is the one the
 * daemon met.
 *
 *   wake_cost [RATE_HZ [SECONDS]]      (100 Hz, 5 s)
 *
 * Prints figures; passes or fails on nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int64_t clock_ns(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	double rate = argc > 1 ? atof(argv[1]) : 100, seconds = argc > 2 ? atof(argv[2]) : 5;
	if (rate <= 0 || rate > 10000 || seconds <= 0 || seconds > 3600) {
		fprintf(stderr, "usage: wake_cost [RATE_HZ (1-10000) [SECONDS (up to 3600)]]\n");
		return 2;
	}
	int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	int epoll = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event want = {.events = EPOLLIN};
	if (timer < 0 || epoll < 0 || epoll_ctl(epoll, EPOLL_CTL_ADD, timer, &want) != 0) {
		fprintf(stderr, "wake_cost: %s\n", strerror(errno));
		return 1;
	}
	int64_t interval = (int64_t)(1e9 / rate), tick = clock_ns(CLOCK_MONOTONIC) / interval * interval;
	long wakeups = (long)(seconds * rate);
	int64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), late = 0;
	for (long i = 0; i < wakeups; i++) {
		tick += interval;
		struct itimerspec at = {.it_value = {.tv_sec = tick / 1000000000, .tv_nsec = tick % 1000000000}};
		struct epoll_event got;
		if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &at, NULL) != 0 ||
		    (epoll_wait(epoll, &got, 1, -1) < 0 && errno != EINTR)) {
			fprintf(stderr, "wake_cost: %s\n", strerror(errno));
			return 1;
		}
		late += clock_ns(CLOCK_MONOTONIC) - tick;
	}
	double cpu_us = (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0) / 1e3 / (double)wakeups;
	printf("%.0f Hz for %.0f s: %.1f us of CPU a wakeup, %.3f %% of one core, %.0f us late on average\n", rate,
	       seconds, cpu_us, cpu_us * rate / 1e4, (double)late / 1e3 / (double)wakeups);
	return 0;
}
