/*
 * The sources a heatmap shows, read as the page is written: the history
 * keeps stacks, not files, so a page of a process that has exited can only
 * show a file as it is now, and says so.
 *
 * pyprofd-ctl reads them, not the daemon.  A user sees in the history only
 * the processes it may trace, so it may look into their roots itself; and
 * a target names its files itself (co_filename is whatever the code was
 * compiled with): a daemon reading them as root would hand a user any file
 * its process claimed to run.  Read with the reader's own rights, a file
 * is further shown only when the process's user could read it too: run as
 * root, the reader opens a running process's files with that process's
 * file-system credentials (uid, gid, groups), so the kernel decides as it
 * would for the process itself, directories and ACLs included.
 *
 * A live process's files are opened inside its root (/proc/PID/root,
 * resolved as the process resolves them), so a container's or a chroot's
 * files are the ones shown, never the host's namesakes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "export_int.h"
#include "procstat.h"

/* The processes tried for one file: its most sampled ones are enough. */
#define SOURCE_PROCS 4
/* /proc/PID/status is a few KiB; its Groups line holds at most NGROUPS_MAX ids. */
#define SOURCE_STATUS_MAX (64u << 10)

struct source_file {
	const char *name;
	uint64_t samples;                  /* of stacks with a frame in it, each once */
	uint32_t thread[SOURCE_PROCS];     /* 1 + a thread of its stacks, one per process; 0: none */
	uint32_t last_stack;               /* 1 + the last stack counted */
};

/* A process's file-system credentials, as the kernel checks a read. */
struct source_cred {
	uid_t uid;
	gid_t gid;
	gid_t *groups;
	size_t ngroups;
};

/* A note in out's storage; NULL when out of memory. */
static const char *source_note(struct export_sources *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static const char *source_note(struct export_sources *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	out->owned[out->nowned++] = s;
	return s;
}

/* At most max bytes of an open file (read whole when it is shorter); its length, or -1. */
static ssize_t source_read_fd(int fd, char *buf, size_t max)
{
	size_t n = 0;
	while (n < max) {
		ssize_t r = read(fd, buf + n, max - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		n += (size_t)r;
	}
	return (ssize_t)n;
}

/* The file name under dir, NUL-ended, into a malloc'd buffer of at most max bytes; NULL if unreadable. */
static char *source_proc_text(int dir, const char *name, size_t max, size_t *len)
{
	int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char *buf = malloc(max + 1);
	ssize_t n = buf ? source_read_fd(fd, buf, max) : -1;
	close(fd);
	if (n < 0) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = (size_t)n;
	return buf;
}

/*
 * /proc/PID as a directory descriptor when the process there is the one
 * that started at start_time (its 22nd stat field); -1 when it is gone or
 * the pid is another's now.  Everything read through the descriptor is
 * that process's, or fails: the pid cannot be reused under it.
 */
static int source_proc_open(int32_t pid, uint64_t start_time)
{
	if (pid <= 0 || !start_time)
		return -1;
	char path[32];
	snprintf(path, sizeof path, "/proc/%d", (int)pid);
	int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return -1;
	size_t len;
	char *stat = source_proc_text(dir, "stat", 4096, &len);
	struct proc_stat st;
	bool same = stat && proc_stat_parse(stat, &st) == 0 && st.has_start_time &&
	            st.start_time == start_time;
	free(stat);
	if (!same) {
		close(dir);
		return -1;
	}
	return dir;
}

/* The fourth (file-system) id of a "Uid:" or "Gid:" line of /proc/PID/status. */
static int source_status_id(const char *status, const char *key, unsigned long *id)
{
	const char *at = strstr(status, key);
	if (!at)
		return -1;
	at += strlen(key);
	for (int i = 0; i < 4; i++) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(at, &end, 10);
		if (end == at || errno)
			return -1;
		*id = v;
		at = end;
	}
	return 0;
}

/* The process's credentials from its status; 0, or -1 if they cannot be read (c->groups freed by the caller). */
static int source_cred_read(int dir, struct source_cred *c)
{
	size_t len;
	char *status = source_proc_text(dir, "status", SOURCE_STATUS_MAX, &len);
	if (!status)
		return -1;
	unsigned long uid = 0, gid = 0;
	int rc = source_status_id(status, "\nUid:", &uid) == 0 &&
	                         source_status_id(status, "\nGid:", &gid) == 0
	                 ? 0
	                 : -1;
	c->uid = (uid_t)uid;
	c->gid = (gid_t)gid;
	char *g = strstr(status, "\nGroups:");
	if (rc == 0 && g) {
		g += strlen("\nGroups:");
		g[strcspn(g, "\n")] = '\0';
		/* Each id takes two bytes at least: the line bounds their number. */
		size_t cap = strlen(g) / 2 + 1;
		c->groups = calloc(cap, sizeof *c->groups);
		if (!c->groups)
			rc = -1;
		for (char *end; rc == 0 && c->ngroups < cap; g = end) {
			unsigned long v = strtoul(g, &end, 10);
			if (end == g)
				break;
			c->groups[c->ngroups++] = (gid_t)v;
		}
	}
	free(status);
	return rc;
}

/*
 * Take on c's file-system credentials (on) or this process's own again
 * (off, with *saved: the groups it had).  Only root may, and only root
 * needs to: another user reads with its own rights, which the kernel
 * checks.  0, or -1 when they could not be taken (nothing read then).
 */
static int source_cred_switch(const struct source_cred *c, bool on, struct source_cred *saved)
{
	if (geteuid() != 0)
		return 0;
	if (on) {
		int n = getgroups(0, NULL);
		saved->groups = n > 0 ? calloc((size_t)n, sizeof *saved->groups) : NULL;
		if (n < 0 || (n > 0 && (!saved->groups || getgroups(n, saved->groups) != n)))
			return -1;
		saved->ngroups = (size_t)n;
		if (setgroups(c->ngroups, c->groups) != 0)
			return -1;
		setfsgid(c->gid);
		setfsuid(c->uid);
		/* setfsuid says nothing of failure: asked again, it answers the one in force. */
		return (uid_t)setfsuid((uid_t)-1) == c->uid && (gid_t)setfsgid((gid_t)-1) == c->gid ? 0 : -1;
	}
	setfsuid(geteuid());
	setfsgid(getegid());
	int rc = setgroups(saved->ngroups, saved->groups);
	free(saved->groups);
	saved->groups = NULL;
	return rc;
}

/* file opened inside the root of the process at dir, resolved as it resolves it; -1 and errno. */
static int source_open_in_root(int dir, const char *file)
{
	int root = openat(dir, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return -1;
	struct open_how how = {
		.flags = O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int fd = (int)syscall(SYS_openat2, root, file, &how, sizeof how);
	/* Before Linux 5.6: the magic link itself, as the unwinder opens a target's files. */
	if (fd < 0 && errno == ENOSYS)
		fd = openat(root, file + strspn(file, "/"), (int)how.flags);
	int saved = errno;
	close(root);
	errno = saved;
	return fd;
}

/* The unix time a process started at, from its start in clock ticks after boot; 0 if unknown. */
static double source_started_unix(uint64_t start_time)
{
	int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[16384];
	ssize_t n = source_read_fd(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *b = strstr(buf, "\nbtime ");
	long hz = sysconf(_SC_CLK_TCK);
	if (!b || hz <= 0)
		return 0;
	return (double)strtoull(b + 7, NULL, 10) + (double)start_time / (double)hz;
}

/* "2024-05-01 12:00:00 UTC" */
static void source_time_text(double t, char *buf, size_t len)
{
	time_t s = (time_t)t;
	struct tm tm;
	if (!gmtime_r(&s, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm))
		snprintf(buf, len, "%.0f", t);
}

/*
 * The text of the open file fd into src, or a note why not (exited: the
 * process is gone, and fd a file of this host).  budget: the bytes the
 * page may still take.  changed_after: a modification later than this is
 * said (0: never).  0, or -1 when out of memory.
 */
static int source_take(struct export_sources *out, struct export_source *src, int fd,
                       bool exited, size_t *budget, double changed_after, const char *how)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		src->note = source_note(out, "not readable: %s", strerror(errno));
		return src->note ? 0 : -1;
	}
	if (!S_ISREG(st.st_mode)) {
		src->note = source_note(out, "not shown: not a regular file");
		return src->note ? 0 : -1;
	}
	/* Whose the process was is gone with it: only what anyone may read is shown. */
	if (exited && !(st.st_mode & S_IROTH)) {
		src->note = source_note(out, "not shown: the process has exited, and this host's "
		                             "file is not readable by everyone");
		return src->note ? 0 : -1;
	}
	if ((uint64_t)st.st_size > EXPORT_SOURCE_MAX_FILE) {
		src->note = source_note(out, "not embedded: %lld bytes, more than the %u a page holds of one file",
		                        (long long)st.st_size, EXPORT_SOURCE_MAX_FILE);
		return src->note ? 0 : -1;
	}
	if ((size_t)st.st_size > *budget) {
		src->note = source_note(out, "not embedded: the page's %zu bytes of sources went to files "
		                             "with more samples",
		                        *budget);
		return src->note ? 0 : -1;
	}
	/* One byte more than it said: a file that grew is cut at its size, never past the bound. */
	size_t want = (size_t)st.st_size;
	char *text = malloc(want + 1);
	if (!text)
		return -1;
	ssize_t n = source_read_fd(fd, text, want);
	if (n < 0) {
		free(text);
		src->note = source_note(out, "not readable: %s", strerror(errno));
		return src->note ? 0 : -1;
	}
	if (memchr(text, '\0', (size_t)n)) {
		free(text);
		src->note = source_note(out, "not shown: not text (it holds a NUL byte)");
		return src->note ? 0 : -1;
	}
	out->owned[out->nowned++] = text;
	src->text = text;
	src->len = (size_t)n;
	*budget -= (size_t)n;
	double mtime = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9;
	char when[64];
	source_time_text(mtime, when, sizeof when);
	if (changed_after > 0 && mtime > changed_after + 1)
		src->note = source_note(out, "%s; changed at %s, after the code ran: lines may not match", how,
		                        when);
	else
		src->note = source_note(out, "%s", how);
	return src->note ? 0 : -1;
}

/* One file of the frames into src, through the first of its processes that still runs. */
static int source_read_one(const struct export_profile *p, const struct source_file *f,
                           struct export_sources *out, struct export_source *src, size_t *budget)
{
	src->file = f->name;
	if (f->name[0] != '/') {
		src->note = source_note(out, "not a file: the interpreter names it so");
		return src->note ? 0 : -1;
	}
	for (size_t k = 0; k < SOURCE_PROCS && f->thread[k]; k++) {
		const struct export_thread *t = &p->threads[f->thread[k] - 1];
		int dir = source_proc_open(t->pid, t->start_time);
		if (dir < 0)
			continue;
		int rc = 0, fd = -1;
		struct source_cred c = {0}, saved = {0};
		bool known = source_cred_read(dir, &c) == 0;
		if (known) {
			if (source_cred_switch(&c, true, &saved) == 0)
				fd = source_open_in_root(dir, f->name);
			else
				errno = EPERM;
			int e = errno;
			if (source_cred_switch(&c, false, &saved) != 0) {
				/* This process's own groups could not be had back: stop, reading nothing more. */
				if (fd >= 0)
					close(fd);
				free(c.groups);
				close(dir);
				return -1;
			}
			errno = e;
		}
		if (fd < 0 && known) {
			src->note = source_note(out, "not readable in pid %d's root, as its user (uid %lu): %s",
			                        (int)t->pid, (unsigned long)c.uid, strerror(errno));
			rc = src->note ? 0 : -1;
		} else if (fd < 0) {
			src->note = source_note(out, "not readable: pid %d's credentials cannot be read: %s",
			                        (int)t->pid, strerror(errno));
			rc = src->note ? 0 : -1;
		} else {
			char how[64];
			snprintf(how, sizeof how, "read in pid %d's root", (int)t->pid);
			rc = source_take(out, src, fd, false, budget, source_started_unix(t->start_time), how);
			close(fd);
		}
		free(c.groups);
		close(dir);
		return rc;
	}
	/* No process of it runs: this host's file, which a container's may never have been. */
	int fd = open(f->name, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		src->note = source_note(out, "not readable: the process has exited, and on this host: %s",
		                        strerror(errno));
		return src->note ? 0 : -1;
	}
	int rc = source_take(out, src, fd, true, budget, p->from_unix,
	                     "the process has exited: this host's file as it is now");
	close(fd);
	return rc;
}

static int source_file_by_name(const void *a, const void *b, void *arg)
{
	const struct export_profile *p = arg;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	int c = strcmp(p->frames[i].file, p->frames[j].file);
	return c ? c : (i > j) - (i < j);
}

static int source_file_by_samples(const void *a, const void *b)
{
	const struct source_file *x = a, *y = b;
	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Counts a stack's samples once in each file it has a frame in, and notes its thread's process. */
static void source_count_stack(const struct export_profile *p, uint32_t s, const uint32_t *file_of,
                               struct source_file *files)
{
	const struct export_stack *st = &p->stacks[s];
	for (uint32_t d = 0; d < st->depth; d++) {
		uint32_t fi = file_of[st->frames[d]];
		if (fi == UINT32_MAX)
			continue;
		struct source_file *f = &files[fi];
		if (f->last_stack == s + 1)
			continue;
		f->last_stack = s + 1;
		f->samples += st->count;
		if (!st->thread)
			continue;
		const struct export_thread *t = &p->threads[st->thread - 1];
		for (size_t k = 0; k < SOURCE_PROCS; k++) {
			if (!f->thread[k]) {
				f->thread[k] = st->thread;
				break;
			}
			const struct export_thread *o = &p->threads[f->thread[k] - 1];
			if (o->pid == t->pid && o->start_time == t->start_time)
				break;
		}
	}
}

int export_sources_read(const struct export_profile *p, size_t max_total, struct export_sources *out)
{
	memset(out, 0, sizeof *out);
	uint32_t n = p->nframes, nfiles = 0;
	uint32_t *order = calloc(n ? n : 1, sizeof *order), *file_of = calloc(n ? n : 1, sizeof *file_of);
	struct source_file *files = calloc(n ? n : 1, sizeof *files);
	/* Per file at most a note and a text. */
	out->owned = calloc(2 * (size_t)n + 1, sizeof *out->owned);
	out->v = calloc(n ? n : 1, sizeof *out->v);
	int rc = -1;
	if (!order || !file_of || !files || !out->owned || !out->v)
		goto done;
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++) {
		file_of[i] = UINT32_MAX;
		if (p->frames[i].kind == UW_FRAME_PYTHON && p->frames[i].file && p->frames[i].file[0])
			order[k++] = i;
	}
	qsort_r(order, k, sizeof *order, source_file_by_name, (void *)p);
	for (uint32_t i = 0; i < k; i++) {
		if (i == 0 || strcmp(p->frames[order[i - 1]].file, p->frames[order[i]].file) != 0)
			files[nfiles++].name = p->frames[order[i]].file;
		file_of[order[i]] = nfiles - 1;
	}
	for (uint32_t s = 0; s < p->nstacks; s++)
		source_count_stack(p, s, file_of, files);
	qsort(files, nfiles, sizeof *files, source_file_by_samples);
	size_t budget = max_total;
	for (uint32_t i = 0; i < nfiles; i++) {
		if (!files[i].samples)
			continue;
		if (source_read_one(p, &files[i], out, &out->v[out->n], &budget) < 0)
			goto done;
		out->n++;
	}
	rc = 0;
done:
	free(order);
	free(file_of);
	free(files);
	if (rc < 0) {
		export_sources_free(out);
		errno = ENOMEM;
	}
	return rc;
}

void export_sources_free(struct export_sources *s)
{
	for (size_t i = 0; i < s->nowned; i++)
		free(s->owned[i]);
	free(s->owned);
	free(s->v);
	memset(s, 0, sizeof *s);
}
