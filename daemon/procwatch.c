/*
 * Processes as they come and go.
 *
 * The kernel's process-events connector (a netlink socket; root with
 * CAP_NET_ADMIN, in the initial namespaces) tells of every fork, exec and
 * exit as it happens.  Where it cannot be had, /proc is walked every
 * scan interval: a walk reads the directory and, for a pid not seen in the
 * walk before, its stat file once (for its start time, so a reused pid is a
 * new process).  A walk catches processes that live across it.
 *
 * A walk sees a process at whatever moment it is in, a fork's child before
 * its exec or a wrapper script before it execs the program it wraps: so for
 * the first PROCWATCH_EXEC_WATCH_S seconds of its life a process's executable (the file
 * /proc/PID/exe names, by device and inode: one stat) is looked at again at
 * every walk, and a change is told as the connector tells an exec.  Past
 * that, an exec of a known pid is caught by the connector alone.
 *
 * Both begin with one walk that reports every live process, and the
 * connector walks again when the kernel dropped events (a burst overflowed
 * the socket): the consumer sees some processes twice and must tell by pid
 * and start time.
 */
#include <dirent.h>
#include <errno.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "array.h"
#include "clock.h"
#include "log.h"
#include "procwatch.h"
#include "unwind.h"

/* Messages read per wakeup at most: a fork storm cannot starve the loop's timers. */
#define PROCWATCH_BATCH 256
/* Newly seen processes a walk reports at most; the rest are reported by the next walk. */
#define PROCWATCH_WALK_NEW_MAX 8192
/* Processes a walk keeps track of at most. */
#define PROCWATCH_KNOWN_MAX (1u << 20)
/*
 * How long after its start a process's executable is watched for an exec:
 * a fork's child execs within moments, a wrapper script after its setup; a
 * process that runs a new program later than this is missed.
 */
#define PROCWATCH_EXEC_WATCH_S 30.0

/* The file a process runs, by device and inode; all zero when it could not be looked at. */
struct procwatch_exe {
	dev_t dev;
	ino_t ino;
};

struct procwatch_known {
	pid_t pid;
	uint64_t start_time;
	uint64_t walk; /* the walk that last saw it */
	struct procwatch_exe exe;
};

struct procwatch_state {
	struct ev_loop *loop;
	enum procwatch_method method; /* NETLINK or SCAN */
	struct procwatch_callbacks cb;
	void *ctx;
	int fd;          /* netlink */
	ev_io reader;
	ev_timer walk_timer; /* scan */
	struct procwatch_known *known; /* scan: sorted by pid */
	size_t nknown, known_cap;
	uint64_t walks;
	struct procwatch_stats stats;
};

int procwatch_method_parse(const char *text, enum procwatch_method *out)
{
	static const char *const names[] = {"auto", "netlink", "scan"};
	for (size_t i = 0; i < 3; i++)
		if (strcmp(text, names[i]) == 0) {
			*out = (enum procwatch_method)i;
			return 0;
		}
	return -1;
}

const char *procwatch_method_name(const struct procwatch *w)
{
	if (!w->state)
		return "off";
	return w->state->method == PROCWATCH_NETLINK ? "netlink" : "scan";
}

void procwatch_stats(const struct procwatch *w, struct procwatch_stats *out)
{
	memset(out, 0, sizeof *out);
	if (w->state)
		*out = w->state->stats;
}

/* A directory entry that is a pid. */
static pid_t procwatch_pid_of(const char *name)
{
	char *end;
	long v = strtol(name, &end, 10);
	return *name >= '1' && *name <= '9' && *end == '\0' && v > 0 && v < (1l << 30) ? (pid_t)v : 0;
}

/* pid among the first n known, which are sorted. */
static struct procwatch_known *procwatch_find(struct procwatch_state *st, size_t n, pid_t pid)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (st->known[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && st->known[lo].pid == pid ? &st->known[lo] : NULL;
}

static struct procwatch_exe procwatch_exe_of(pid_t pid)
{
	char path[64];
	struct stat sb;
	snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
	/* A kernel thread, a zombie or a process mid-exec has none to follow: unknown. */
	if (stat(path, &sb) != 0)
		return (struct procwatch_exe){0, 0};
	return (struct procwatch_exe){sb.st_dev, sb.st_ino};
}

/* The clock a walk judges ages by: seconds since boot, and the start times' ticks a second. */
struct procwatch_clock {
	double boot_s;
	double ticks_per_s;
};

static struct procwatch_clock procwatch_clock_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	long hz = sysconf(_SC_CLK_TCK);
	return (struct procwatch_clock){(double)ts.tv_sec + (double)ts.tv_nsec / 1e9, hz > 0 ? (double)hz : 100.0};
}

/* Whether a process started at start_time (ticks since boot) is young enough to be watched for an exec. */
static bool procwatch_young(const struct procwatch_clock *c, uint64_t start_time)
{
	return c->boot_s - (double)start_time / c->ticks_per_s < PROCWATCH_EXEC_WATCH_S;
}

/* A known young process now runs another file than when last looked at: it exec'd. */
static bool procwatch_execed(struct procwatch_known *k, const struct procwatch_clock *c)
{
	if (!procwatch_young(c, k->start_time))
		return false;
	struct procwatch_exe exe = procwatch_exe_of(k->pid);
	if (exe.dev == 0 && exe.ino == 0)
		return false;
	bool changed = exe.dev != k->exe.dev || exe.ino != k->exe.ino;
	k->exe = exe;
	return changed;
}

static int procwatch_by_pid(const void *a, const void *b)
{
	pid_t x = ((const struct procwatch_known *)a)->pid, y = ((const struct procwatch_known *)b)->pid;
	return (x > y) - (x < y);
}

/*
 * One walk of /proc.  With `track` (scan mode) it remembers what it saw
 * and reports only what changed; without (a connector's first walk or
 * resync) it reports every live process.
 */
static void procwatch_walk(struct procwatch_state *st, bool track)
{
	double t0 = (clock_mono_s() * 1e6);
	DIR *dir = opendir("/proc");
	if (!dir) {
		log_warn("discovery: cannot read /proc: %s", strerror(errno));
		return;
	}
	uint64_t walk = ++st->walks;
	struct procwatch_clock clock = procwatch_clock_now();
	size_t before = st->nknown, seen = 0, reported = 0;
	struct dirent *e;
	while ((e = readdir(dir)) != NULL) {
		pid_t pid = procwatch_pid_of(e->d_name);
		if (!pid)
			continue;
		seen++;
		if (!track) {
			st->stats.events++;
			st->cb.exec(st->ctx, pid);
			continue;
		}
		/* Seen in the walk before: the same process (a pid reused between two walks is missed). */
		struct procwatch_known *k = procwatch_find(st, before, pid);
		if (k) {
			k->walk = walk;
			if (procwatch_execed(k, &clock)) {
				st->stats.events++;
				st->cb.exec(st->ctx, pid);
			}
			continue;
		}
		if (reported == PROCWATCH_WALK_NEW_MAX)
			continue; /* the next walk */
		struct uw_process_identity id;
		struct uw_error err;
		if (uw_process_identity(pid, &id, &err) != 0)
			continue;
		if (st->nknown == PROCWATCH_KNOWN_MAX ||
		    array_reserve((void **)&st->known, &st->known_cap, st->nknown, sizeof *st->known, NULL) != 0)
			continue;
		st->known[st->nknown++] = (struct procwatch_known){
			.pid = pid,
			.start_time = id.start_time,
			.walk = walk,
			/* Past its watch already: no exec of it is looked for. */
			.exe = procwatch_young(&clock, id.start_time) ? procwatch_exe_of(pid)
			                                              : (struct procwatch_exe){0, 0},
		};
		reported++;
		if (st->walks > 1) {
			st->stats.events++;
			st->cb.exec(st->ctx, pid);
		}
	}
	closedir(dir);
	if (track) {
		/* The new ones were appended: sort them in, and drop those no walk saw this time. */
		size_t kept = 0;
		for (size_t i = 0; i < st->nknown; i++) {
			if (st->known[i].walk == walk) {
				st->known[kept++] = st->known[i];
			} else {
				st->stats.events++;
				st->cb.exit(st->ctx, st->known[i].pid);
			}
		}
		if (st->nknown != before || kept != st->nknown)
			qsort(st->known, kept, sizeof *st->known, procwatch_by_pid);
		st->nknown = kept;
		/* The first walk reports every process once it knows them all (a sorted table). */
		if (st->walks == 1)
			for (size_t i = 0; i < st->nknown; i++) {
				st->stats.events++;
				st->cb.exec(st->ctx, st->known[i].pid);
			}
	}
	st->stats.scans++;
	st->stats.processes = (unsigned)seen;
	st->stats.scan_us_last = (clock_mono_s() * 1e6) - t0;
	if (st->stats.scan_us_last > st->stats.scan_us_max)
		st->stats.scan_us_max = st->stats.scan_us_last;
}

static void procwatch_on_walk(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	procwatch_walk(w->data, true);
}

/* ---- the connector ---- */

/* Subscribe (listen) or not; 0 or -1 with errno. */
static int procwatch_subscribe(int fd, enum proc_cn_mcast_op op)
{
	/* Laid out by hand: struct cn_msg ends in a flexible array member, which
	 * ISO C does not allow inside another struct (clang refuses it). */
	_Alignas(struct nlmsghdr) unsigned char msg[sizeof(struct nlmsghdr) + sizeof(struct cn_msg) +
	                                            sizeof op];
	struct nlmsghdr nl = {
		.nlmsg_len = sizeof msg,
		.nlmsg_type = NLMSG_DONE,
		.nlmsg_pid = (uint32_t)getpid(),
	};
	struct cn_msg cn = {.id = {.idx = CN_IDX_PROC, .val = CN_VAL_PROC}, .len = sizeof op};
	memcpy(msg, &nl, sizeof nl);
	memcpy(msg + sizeof nl, &cn, sizeof cn);
	memcpy(msg + sizeof nl + sizeof cn, &op, sizeof op);
	return send(fd, msg, sizeof msg, 0) == (ssize_t)sizeof msg ? 0 : -1;
}

static void procwatch_event(struct procwatch_state *st, const struct proc_event *ev)
{
	switch (ev->what) {
	case PROC_EVENT_FORK:
		/* A thread is a fork of its process: only new processes count. */
		if (ev->event_data.fork.child_pid != ev->event_data.fork.child_tgid)
			return;
		st->stats.events++;
		st->cb.fork(st->ctx, ev->event_data.fork.parent_tgid, ev->event_data.fork.child_tgid);
		return;
	case PROC_EVENT_EXEC:
		st->stats.events++;
		st->cb.exec(st->ctx, ev->event_data.exec.process_tgid);
		return;
	case PROC_EVENT_EXIT:
		if (ev->event_data.exit.process_pid != ev->event_data.exit.process_tgid)
			return;
		st->stats.events++;
		st->cb.exit(st->ctx, ev->event_data.exit.process_tgid);
		return;
	default:
		return;
	}
}

static void procwatch_on_events(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	struct procwatch_state *st = w->data;
	_Alignas(struct nlmsghdr) char buf[8192];
	for (int batch = 0; batch < PROCWATCH_BATCH; batch++) {
		struct sockaddr_nl from;
		socklen_t from_len = sizeof from;
		ssize_t n = recvfrom(st->fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &from_len);
		if (n < 0) {
			if (errno == ENOBUFS) {
				/* The kernel dropped events: find what was missed in /proc. */
				st->stats.lost++;
				log_warn("discovery: the kernel dropped process events (a burst); walking /proc");
				procwatch_walk(st, false);
				continue;
			}
			return; /* EAGAIN, EINTR: the next wakeup */
		}
		/* Only the kernel speaks on this socket. */
		if (from_len != sizeof from || from.nl_pid != 0)
			continue;
		int len = (int)n;
		for (struct nlmsghdr *nl = (struct nlmsghdr *)buf; NLMSG_OK(nl, (unsigned)len); nl = NLMSG_NEXT(nl, len)) {
			if (nl->nlmsg_type == NLMSG_NOOP || nl->nlmsg_type == NLMSG_ERROR)
				continue;
			if (nl->nlmsg_len < NLMSG_LENGTH(sizeof(struct cn_msg) + sizeof(struct proc_event)))
				continue;
			const struct cn_msg *cn = NLMSG_DATA(nl);
			if (cn->id.idx != CN_IDX_PROC || cn->id.val != CN_VAL_PROC || cn->len < sizeof(struct proc_event))
				continue;
			/* The event sits 36 bytes into the message: copied to be read aligned. */
			struct proc_event ev;
			memcpy(&ev, cn->data, sizeof ev);
			procwatch_event(st, &ev);
		}
	}
}

/* The connector's socket, subscribed; -1 with why. */
static int procwatch_open_netlink(char *why, size_t why_len)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_CONNECTOR);
	if (fd < 0) {
		snprintf(why, why_len, "the process-events connector: %s", strerror(errno));
		return -1;
	}
	struct sockaddr_nl addr = {.nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC, .nl_pid = 0};
	/* Room for a burst: a full socket drops events (then a walk finds them). */
	int size = 4 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
	    procwatch_subscribe(fd, PROC_CN_MCAST_LISTEN) != 0) {
		snprintf(why, why_len, "the process-events connector: %s", strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int procwatch_start(struct procwatch *w, struct ev_loop *loop, enum procwatch_method method,
                    double scan_interval_s, const struct procwatch_callbacks *cb, void *ctx,
                    char *why, size_t why_len)
{
	w->state = NULL;
	struct procwatch_state *st = calloc(1, sizeof *st);
	if (!st) {
		snprintf(why, why_len, "out of memory");
		return -1;
	}
	st->loop = loop;
	st->cb = *cb;
	st->ctx = ctx;
	st->fd = -1;
	if (method != PROCWATCH_SCAN) {
		char netlink_why[256];
		st->fd = procwatch_open_netlink(netlink_why, sizeof netlink_why);
		if (st->fd < 0 && method == PROCWATCH_NETLINK) {
			snprintf(why, why_len, "%s", netlink_why);
			free(st);
			return -1;
		}
		if (st->fd < 0)
			log_info("discovery: %s; scanning /proc every %.2f s instead", netlink_why, scan_interval_s);
	}
	w->state = st;
	if (st->fd >= 0) {
		st->method = PROCWATCH_NETLINK;
		ev_io_init(&st->reader, procwatch_on_events, st->fd, EV_READ);
		st->reader.data = st;
		ev_io_start(loop, &st->reader);
		/* Subscribed first, then walked: a process started between is seen twice, never missed. */
		procwatch_walk(st, false);
	} else {
		st->method = PROCWATCH_SCAN;
		ev_timer_init(&st->walk_timer, procwatch_on_walk, scan_interval_s, scan_interval_s);
		st->walk_timer.data = st;
		ev_timer_start(loop, &st->walk_timer);
		procwatch_walk(st, true);
	}
	return 0;
}

void procwatch_stop(struct procwatch *w)
{
	struct procwatch_state *st = w->state;
	if (!st)
		return;
	if (st->fd >= 0) {
		ev_io_stop(st->loop, &st->reader);
		procwatch_subscribe(st->fd, PROC_CN_MCAST_IGNORE);
		close(st->fd);
	} else {
		ev_timer_stop(st->loop, &st->walk_timer);
	}
	free(st->known);
	free(st);
	w->state = NULL;
}
