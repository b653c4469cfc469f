/*
 * The daemon's descriptor budget.  Every process the daemon knows holds
 * descriptors while it lives, so max_targets must fit in RLIMIT_NOFILE
 * next to everything else the daemon keeps open: a setting past it would
 * only be found out when an attach, an accept or a /proc read fails.
 */
#include <limits.h>
#include <stdio.h>
#include <sys/resource.h>

#include "pyprofd.h"

/* What the daemon holds besides its clients and targets, at most at once. */
#define DESCRIPTORS_STDIO 3
#define DESCRIPTORS_LISTEN 1
#define DESCRIPTORS_LOOP 4      /* libev's epoll, signal and wakeup descriptors */
#define DESCRIPTORS_WRITER 5    /* the history's connection: file, WAL, shared memory, temporary files */
#define DESCRIPTORS_PER_QUERY 3 /* a query's read-only connection: file, WAL, shared memory */
#define DESCRIPTORS_DISCOVERY 1 /* the process-events socket, or the /proc scan's directory */
/* An attach's /proc files and ELF file, a rules file being saved, a reload, sd_notify. */
#define DESCRIPTORS_PASSING 8
/* The in-kernel reader and the shots of native stacks, unless turned off: UW_KREADER_DESCRIPTORS, UW_NATIVE_SHOT_DESCRIPTORS. */

unsigned long long descriptors_raise_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	/* The hard limit is what the administrator allows; the soft one is only a default. */
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit raised = {rl.rlim_max, rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &raised) == 0)
			rl.rlim_cur = rl.rlim_max;
	}
	return rl.rlim_cur;
}

unsigned descriptors_reserved(const struct config *c)
{
	return DESCRIPTORS_STDIO + DESCRIPTORS_LISTEN + DESCRIPTORS_LOOP + DESCRIPTORS_WRITER +
	       QUERIES_MAX * DESCRIPTORS_PER_QUERY + DESCRIPTORS_DISCOVERY + DESCRIPTORS_PASSING +
	       (c->no_kernel_reader ? 0 : UW_KREADER_DESCRIPTORS + UW_NATIVE_SHOT_DESCRIPTORS) + c->max_connections;
}

int descriptors_fit(struct config *c, char *why, size_t why_len)
{
	struct rlimit rl;
	c->max_targets_asked = c->max_targets;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	rlim_t reserved = descriptors_reserved(c);
	rlim_t room = rl.rlim_cur > reserved ? (rl.rlim_cur - reserved) / DESCRIPTORS_PER_TARGET : 0;
	if (room == 0) {
		snprintf(why, why_len,
		         "a limit of %llu open files (RLIMIT_NOFILE) leaves no room for a single target "
		         "next to %u connections%s: %llu descriptors are needed at least; raise the limit "
		         "(LimitNOFILE= under systemd) or lower max_connections%s",
		         (unsigned long long)rl.rlim_cur, c->max_connections,
		         c->no_kernel_reader ? "" : " and the in-kernel reader",
		         (unsigned long long)reserved + DESCRIPTORS_PER_TARGET,
		         c->no_kernel_reader ? "" : " (or set [sampling] kernel_reader = false)");
		return -1;
	}
	if (room < c->max_targets)
		c->max_targets = (unsigned)room;
	return 0;
}

void descriptors_explain(const struct config *c)
{
	if (c->max_targets >= c->max_targets_asked)
		return;
	struct rlimit rl = {0, 0};
	getrlimit(RLIMIT_NOFILE, &rl);
	log_warn("max_targets lowered from %u to %u: a limit of %llu open files (RLIMIT_NOFILE) "
	         "keeps %u for %u connections, the socket and the database, and %d per target",
	         c->max_targets_asked, c->max_targets, (unsigned long long)rl.rlim_cur,
	         descriptors_reserved(c), c->max_connections, DESCRIPTORS_PER_TARGET);
}

unsigned descriptors_for_proc_files(const struct config *c)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT_MAX;
	/* A target's share of DESCRIPTORS_PER_TARGET beyond its first is such a file: it is pooled here. */
	rlim_t held = descriptors_reserved(c) + (rlim_t)c->max_targets;
	rlim_t left = rl.rlim_cur > held ? rl.rlim_cur - held : 0;
	return left < UINT_MAX ? (unsigned)left : UINT_MAX;
}
