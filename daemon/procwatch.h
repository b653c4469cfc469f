/*
 * procwatch — processes as they start, exec and exit: the kernel's
 * process-events connector where the daemon may use it, otherwise a
 * bounded scan of /proc.
 */
#ifndef PYPROFD_PROCWATCH_H
#define PYPROFD_PROCWATCH_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum procwatch_method { PROCWATCH_AUTO, PROCWATCH_NETLINK, PROCWATCH_SCAN };
struct procwatch_callbacks {
	/* A new process (not a thread), child of parent. */
	void (*fork)(void *ctx, pid_t parent, pid_t child);
	/*
	 * A process runs a new program, or is seen for the first time (at
	 * start, in a scan, after events were lost): judge it afresh.
	 */
	void (*exec)(void *ctx, pid_t pid);
	void (*exit)(void *ctx, pid_t pid);
};
struct procwatch_stats {
	uint64_t events;       /* fork, exec and exit delivered */
	uint64_t scans;        /* walks of /proc, the first and resyncs included */
	uint64_t lost;         /* times the kernel dropped events (each answered by a scan) */
	double scan_us_last, scan_us_max;
	unsigned processes;    /* seen in the last scan */
};
struct procwatch_state;
struct procwatch {
	struct procwatch_state *state; /* owned; NULL when stopped */
};
/*
 * Start watching: every process alive now is reported once through exec,
 * then what changes.  0, or -1 with why (netlink asked for and refused, ...).
 */
int procwatch_start(struct procwatch *w, struct ev_loop *loop, enum procwatch_method method,
                    double scan_interval_s, const struct procwatch_callbacks *cb, void *ctx,
                    char *why, size_t why_len);
void procwatch_stop(struct procwatch *w);
/* The method in use: "netlink" or "scan"; "off" when stopped. */
const char *procwatch_method_name(const struct procwatch *w);
void procwatch_stats(const struct procwatch *w, struct procwatch_stats *out);
int procwatch_method_parse(const char *text, enum procwatch_method *out);

#endif
