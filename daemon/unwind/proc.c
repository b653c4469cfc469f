/* What /proc tells about a process: its mappings, threads and their states. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "procstat.h"
#include "unwind_internal.h"

/* vm.max_map_count defaults to 65530; anything far past it is not a real process. */
#define PROC_MAPS_MAX (1u << 20)

/*
 * A /proc file that could not be opened or read: the process is gone only
 * when /proc says so (ENOENT, ESRCH).  Anything else (out of descriptors
 * or memory, ...) says nothing about the process: it could not be looked
 * at, and the message names why.
 */
static int proc_open_error(pid_t pid, const char *what, struct uw_error *err)
{
	switch (errno) {
	case ENOENT:
	case ESRCH:
		return uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
	case EACCES:
	case EPERM:
		return uw_fail(err, UW_EPERM, "not permitted to read %s of process %d", what, (int)pid);
	default:
		return uw_fail(err, UW_EIO, "cannot read %s of process %d: %s", what, (int)pid,
		               strerror(errno));
	}
}

int proc_maps_read(pid_t pid, struct proc_maps *out, struct uw_error *err)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
	out->maps = NULL;
	out->count = 0;

	FILE *f = fopen(path, "re");
	if (!f)
		return proc_open_error(pid, "the memory map", err);

	size_t cap = 0;
	char *line = NULL;
	size_t linecap = 0;
	int rc = 0;
	errno = 0;
	while (getline(&line, &linecap, f) > 0) {
		if (out->count >= PROC_MAPS_MAX) {
			rc = uw_fail(err, UW_EIO, "process %d has too many mappings", (int)pid);
			break;
		}
		struct proc_map m = {0};
		unsigned long long start, end, offset, inode;
		unsigned dev_major, dev_minor;
		int pathpos = 0;
		if (sscanf(line, "%llx-%llx %4s %llx %x:%x %llu %n", &start, &end, m.perms, &offset,
		           &dev_major, &dev_minor, &inode, &pathpos) < 7)
			continue;
		m.start = start;
		m.end = end;
		m.offset = offset;
		m.dev = makedev(dev_major, dev_minor);
		m.inode = inode;
		char *p = line + pathpos;
		p[strcspn(p, "\n")] = '\0';
		size_t plen = strlen(p);
		static const char deleted[] = " (deleted)";
		if (plen > sizeof deleted - 1 && strcmp(p + plen - (sizeof deleted - 1), deleted) == 0)
			p[plen - (sizeof deleted - 1)] = '\0';
		if (p[0] == '/') {
			m.path = strdup(p);
			if (!m.path) {
				rc = uw_fail(err, UW_ENOMEM, "out of memory");
				break;
			}
		}
		if (out->count == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			struct proc_map *n = realloc(out->maps, ncap * sizeof *n);
			if (!n) {
				free(m.path);
				rc = uw_fail(err, UW_ENOMEM, "out of memory");
				break;
			}
			out->maps = n;
			cap = ncap;
		}
		out->maps[out->count++] = m;
	}
	if (rc == 0 && ferror(f))
		rc = proc_open_error(pid, "the memory map", err);
	free(line);
	fclose(f);
	if (rc == 0 && out->count == 0) {
		/* A zombie or kernel thread has an empty map. */
		switch (proc_life(pid)) {
		case PROC_LIVES:
			rc = uw_fail(err, UW_ENOTPYTHON, "process %d has no memory map", (int)pid);
			break;
		case PROC_GONE:
			rc = uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
			break;
		case PROC_UNSEEN:
			rc = proc_open_error(pid, "the status", err);
			break;
		}
	}
	if (rc != 0)
		proc_maps_free(out);
	return rc;
}

void proc_maps_free(struct proc_maps *maps)
{
	for (size_t i = 0; i < maps->count; i++)
		free(maps->maps[i].path);
	free(maps->maps);
	maps->maps = NULL;
	maps->count = 0;
}

/*
 * The file a mapping maps, opened from this process whatever root or mount
 * namespace the target runs in.  The path in /proc/PID/maps is the file's
 * path as seen from the *reader's* root where the reader can see the file
 * (a chrooted target shows the host's path to it), and from the target's
 * own root where it cannot (another mount namespace), so neither
 * /proc/PID/root/PATH nor PATH is right every time.  Tried in order:
 * map_files (the mapping itself, whatever the namespace, but only for
 * CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), then the path under the
 * target's root, then the path as it is.  A file is taken only when its
 * device and inode are the ones the map lists: a path can name another
 * file (the host's own copy of a library at the container's path).
 */
int proc_map_open(pid_t pid, const struct proc_map *m, struct uw_error *err)
{
	char paths[3][PATH_MAX + 64];
	snprintf(paths[0], sizeof paths[0], "/proc/%d/map_files/%llx-%llx", (int)pid,
	         (unsigned long long)m->start, (unsigned long long)m->end);
	snprintf(paths[1], sizeof paths[1], "/proc/%d/root%s", (int)pid, m->path);
	snprintf(paths[2], sizeof paths[2], "%s", m->path);
	int denied = 0, failure = ENOENT;
	bool mismatch = false;
	for (int i = 0; i < 3; i++) {
		int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			if (errno == EACCES || errno == EPERM)
				denied++;
			else if (errno != ENOENT && errno != ENOTDIR)
				failure = errno;
			continue;
		}
		struct stat st;
		if (fstat(fd, &st) == 0 && st.st_dev == m->dev && st.st_ino == m->inode)
			return fd;
		mismatch = true;
		close(fd);
	}
	if (proc_life(pid) == PROC_GONE)
		return uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
	/* map_files is refused to all but the privileged: the paths refused too is the caller's rights. */
	if (denied >= 2)
		return uw_fail(err, UW_EPERM, "not permitted to open %s of process %d", m->path,
		               (int)pid);
	return uw_fail(err, UW_EIO, "cannot open %s of process %d: %s", m->path, (int)pid,
	               mismatch ? "the file at that path is not the one it maps" : strerror(failure));
}

/*
 * Read a small /proc file whole into buf (NUL-terminated); its length, or -1
 * with errno.  With st, the file's owner as the kernel gave it at open too.
 */
static ssize_t proc_read_file_stat(const char *path, char *buf, size_t cap, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (st && fstat(fd, st) != 0) {
		int saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	size_t len = 0;
	ssize_t got = 0;
	while (len + 1 < cap) {
		got = read(fd, buf + len, cap - 1 - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		len += (size_t)got;
	}
	int saved = errno;
	close(fd);
	errno = saved;
	buf[len] = '\0';
	/* A failed read is no short file: ESRCH there is a process that died after the open. */
	return got < 0 ? -1 : (ssize_t)len;
}

/* The same without the owner. */
static ssize_t proc_read_file(const char *path, char *buf, size_t cap)
{
	return proc_read_file_stat(path, buf, cap, NULL);
}

ssize_t uw_proc_read(pid_t pid, const char *name, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	return proc_read_file(path, buf, cap);
}

/* The state letter of the process or thread whose stat file is at path; '?' if unknown. */
static char proc_stat_state(const char *path)
{
	char buf[512];
	struct proc_stat st;
	if (proc_read_file(path, buf, sizeof buf) < 0 || proc_stat_parse(buf, &st) != 0)
		return '?';
	return st.state;
}

char proc_thread_state(pid_t pid, pid_t tid)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	return proc_stat_state(path);
}

enum proc_life proc_life(pid_t pid)
{
	/* No descriptor needed to learn that a pid is free. */
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return PROC_GONE;
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	struct proc_stat st;
	if (proc_read_file(path, buf, sizeof buf) < 0)
		return errno == ENOENT || errno == ESRCH ? PROC_GONE : PROC_UNSEEN;
	if (proc_stat_parse(buf, &st) != 0)
		return PROC_UNSEEN;
	/* Exiting, its memory map may be gone before it is a zombie: it is going, not "not Python". */
	return st.state == 'Z' || st.state == 'X' || (st.flags & PROC_PF_EXITING) ? PROC_GONE : PROC_LIVES;
}

/*
 * The ids of "NSpid:" in a status file: the first as this /proc numbers the
 * task, the last as its own pid namespace does.  The count of ids, 0 if none.
 */
static int proc_status_nspids(const char *status, pid_t *first, pid_t *last)
{
	const char *line = strstr(status, "\nNSpid:");
	if (!line)
		return 0;
	line += strlen("\nNSpid:");
	int n = 0;
	/* One id per nested namespace: the kernel allows 32 levels. */
	for (int i = 0; i < 33; i++) {
		char *end;
		long id = strtol(line, &end, 10);
		if (end == line || id <= 0)
			break;
		if (n++ == 0)
			*first = (pid_t)id;
		*last = (pid_t)id;
		line = end;
	}
	return n;
}

bool proc_pid_namespace_nested(pid_t pid)
{
	char buf[4096];
	pid_t first, last;
	return uw_proc_read(pid, "status", buf, sizeof buf) >= 0 &&
	       proc_status_nspids(buf, &first, &last) > 1;
}

uint32_t proc_sched_line(int fd, char line[PROC_SCHED_LINE])
{
	ssize_t n = pread(fd, line, PROC_SCHED_LINE, 0);
	return n > 0 && n < PROC_SCHED_LINE ? (uint32_t)n : 0;
}

bool proc_sched_line_counts(const char *line, uint32_t len)
{
	char copy[PROC_SCHED_LINE];
	unsigned long long runtime, waited, arrivals;
	if (!len || len >= sizeof copy)
		return false;
	memcpy(copy, line, len);
	copy[len] = '\0';
	return sscanf(copy, "%llu %llu %llu", &runtime, &waited, &arrivals) == 3 && arrivals > 0;
}

int proc_tasks(pid_t pid, pid_t *tids, pid_t *own_tids, int max)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *de;
	while (n < max && (de = readdir(d)) != NULL) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);
		if (*end != '\0' || tid <= 0)
			continue;
		if (own_tids) {
			char status[96], buf[4096];
			pid_t first, last;
			snprintf(status, sizeof status, "/proc/%d/task/%ld/status", (int)pid, tid);
			/* A thread that ended meanwhile is simply not listed. */
			if (proc_read_file(status, buf, sizeof buf) < 0 ||
			    proc_status_nspids(buf, &first, &last) == 0)
				continue;
			own_tids[n] = last;
		}
		tids[n++] = (pid_t)tid;
	}
	closedir(d);
	return n;
}

/* The four ids of a "Uid:" or "Gid:" line of /proc/PID/status into ids; 0 or -1. */
static int proc_status_ids(const char *status, const char *key, unsigned ids[4])
{
	const char *line = strstr(status, key);
	return line && sscanf(line + strlen(key), "%u %u %u %u", &ids[0], &ids[1], &ids[2], &ids[3]) == 4
	               ? 0
	               : -1;
}

int uw_process_started(pid_t pid, struct uw_process_identity *out, struct uw_error *err)
{
	char path[64], buf[4096];
	struct proc_stat st;
	memset(out, 0, sizeof *out);
	if (pid <= 0)
		return uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if (proc_read_file(path, buf, sizeof buf) < 0)
		return proc_open_error(pid, "the status", err);
	/* What /proc gave cannot be garbage for a process that lives: say so, never "gone". */
	if (proc_stat_parse(buf, &st) != 0 || !st.has_start_time)
		return uw_fail(err, UW_EIO, "process %d has no readable status", (int)pid);
	out->start_time = st.start_time;
	out->state = st.state;
	out->ppid = st.ppid;
	return 0;
}

int uw_process_identity(pid_t pid, struct uw_process_identity *out, struct uw_error *err)
{
	if (uw_process_started(pid, out, err) != 0)
		return -1;
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	struct stat owner;
	if (proc_read_file_stat(path, buf, sizeof buf, &owner) < 0)
		return proc_open_error(pid, "the status", err);
	unsigned uids[4], gids[4];
	if (proc_status_ids(buf, "\nUid:", uids) != 0 || proc_status_ids(buf, "\nGid:", gids) != 0)
		return uw_fail(err, UW_EIO, "process %d has no readable owner", (int)pid);
	for (int i = 0; i < 4; i++) {
		out->uid[i] = (uid_t)uids[i];
		out->gid[i] = (gid_t)gids[i];
	}
	const char *caps = strstr(buf, "\nCapPrm:");
	unsigned long long cap_permitted;
	if (!caps || sscanf(caps + strlen("\nCapPrm:"), "%llx", &cap_permitted) != 1)
		return uw_fail(err, UW_EIO, "process %d has no readable capabilities", (int)pid);
	out->cap_permitted = cap_permitted;
	/*
	 * The kernel gives a process's files under /proc/PID to its effective
	 * ids when it is dumpable and to root otherwise (a setuid or
	 * file-capability program, or one that made itself undumpable): their
	 * owner is the only place it shows.  Not /proc/PID itself: that
	 * directory always shows the effective ids (task_dump_owner exempts it).
	 * A process of root's reads as dumpable either way, and is root's alone
	 * either way.  A process whose memory is gone (exiting, or a zombie)
	 * has its files given to root too, and status no longer shows its
	 * memory: that is no sign of privileges.  The owner was taken before
	 * the read, so memory there means memory when the owner was taken.
	 */
	out->exiting = out->state == 'Z' || out->state == 'X' || !strstr(buf, "\nVmSize:");
	out->dumpable = !out->exiting && owner.st_uid == out->uid[1] && owner.st_gid == out->gid[1];
	return 0;
}

/* ---- why a process may not be read, and what would let it ---- */

/* The effective capability set of this process, from /proc/self/status; 0 if unread. */
static unsigned long long proc_self_cap_effective(void)
{
	char buf[4096];
	unsigned long long caps = 0;
	if (proc_read_file("/proc/self/status", buf, sizeof buf) < 0)
		return 0;
	const char *line = strstr(buf, "\nCapEff:");
	if (!line || sscanf(line + strlen("\nCapEff:"), "%llx", &caps) != 1)
		return 0;
	return caps;
}

void uw_access_facts(pid_t pid, struct uw_access_facts *out)
{
	/* CAP_SYS_PTRACE is capability 19. */
	*out = (struct uw_access_facts){.root = geteuid() == 0,
	                                .cap_sys_ptrace = (proc_self_cap_effective() >> 19) & 1,
	                                .ptrace_scope = -1,
	                                .target_dumpable = true};
	char buf[64];
	if (proc_read_file("/proc/sys/kernel/yama/ptrace_scope", buf, sizeof buf) > 0)
		out->ptrace_scope = atoi(buf);
	struct uw_process_identity id;
	if (uw_process_identity(pid, &id, NULL) == 0) {
		uid_t me = geteuid();
		gid_t group = getegid();
		out->same_user = id.uid[0] == me && id.uid[1] == me && id.uid[2] == me &&
		                 id.gid[0] == group && id.gid[1] == group && id.gid[2] == group;
		out->target_dumpable = id.dumpable && id.cap_permitted == 0;
	}
}

void uw_access_remedy(const struct uw_access_facts *f, char *buf, size_t len)
{
	bool privileged = f->root || f->cap_sys_ptrace;
	if (f->ptrace_scope >= 3)
		snprintf(buf, len, "Yama's ptrace_scope is %d: no process may read another's memory, "
		                   "root included, until the machine restarts with a lower kernel.yama.ptrace_scope",
		         f->ptrace_scope);
	else if (privileged && f->cap_sys_ptrace)
		snprintf(buf, len, "the kernel refused even with CAP_SYS_PTRACE: a security module (AppArmor, "
		                   "SELinux) or another user namespace keeps the process apart");
	else if (privileged)
		snprintf(buf, len, "running as root without CAP_SYS_PTRACE (a container or a bounding set "
		                   "that drops it): grant CAP_SYS_PTRACE");
	else if (!f->same_user || !f->target_dumpable)
		snprintf(buf, len, "it is %s: run as root, or give the program CAP_SYS_PTRACE "
		                   "(setcap cap_sys_ptrace+ep)",
		         !f->same_user ? "another user's process" : "a privileged process (setuid, "
		                                                     "capabilities or not dumpable)");
	else if (f->ptrace_scope == 2)
		snprintf(buf, len, "Yama's ptrace_scope is 2: only CAP_SYS_PTRACE may read other processes: "
		                   "run as root or with CAP_SYS_PTRACE (setcap cap_sys_ptrace+ep)");
	else if (f->ptrace_scope == 1)
		snprintf(buf, len, "Yama's ptrace_scope is 1: only a process's ancestors may read it: run as "
		                   "root or with CAP_SYS_PTRACE, start the process from this one, or set "
		                   "kernel.yama.ptrace_scope=0");
	else
		snprintf(buf, len, "run as root or with CAP_SYS_PTRACE");
}

void uw_error_add_remedy(struct uw_error *err, pid_t pid)
{
	if (!err || err->status != UW_EPERM)
		return;
	struct uw_access_facts f;
	uw_access_facts(pid, &f);
	char remedy[sizeof err->msg];
	uw_access_remedy(&f, remedy, sizeof remedy);
	/* Cut to the room left: the cause stays whole, the remedy may lose its end. */
	size_t n = strlen(err->msg);
	if (n + 4 >= sizeof err->msg)
		return;
	size_t room = sizeof err->msg - n - 4;
	size_t len = strnlen(remedy, room);
	err->msg[n] = ' ';
	err->msg[n + 1] = '(';
	memcpy(err->msg + n + 2, remedy, len);
	err->msg[n + 2 + len] = ')';
	err->msg[n + 3 + len] = '\0';
}

/* ---- /proc files kept open between samples, within the target's bound and the shared budget ---- */

bool proc_fds_room(const struct uw_target *t, unsigned n)
{
	if (t->stat_fds + n > THREADS_STAT_FDS_MAX)
		return false;
	const struct uw_fd_budget *b = t->opts.fd_budget;
	return !b || b->used + n <= b->limit;
}

void proc_fds_add(struct uw_target *t, int n)
{
	t->stat_fds += (uint32_t)n;
	if (t->opts.fd_budget)
		t->opts.fd_budget->used += (unsigned)n;
}

void sched_files_close(struct uw_target *t, struct sched_files *f)
{
	if (f->sched_fd >= 0) {
		close(f->sched_fd);
		proc_fds_add(t, -1);
	}
	if (f->wchan_fd >= 0) {
		close(f->wchan_fd);
		proc_fds_add(t, -1);
	}
	*f = SCHED_FILES_NONE;
}

bool sched_files_open(struct uw_target *t, struct sched_files *f, int64_t proc_tid)
{
	if (f->sched_fd >= 0 && f->wchan_fd >= 0)
		return true;
	sched_files_close(t, f);
	if (proc_tid <= 0 || !proc_fds_room(t, 2))
		return false;
	char path[96];
	snprintf(path, sizeof path, "/proc/%d/task/%lld/schedstat", (int)t->pid, (long long)proc_tid);
	f->sched_fd = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof path, "/proc/%d/task/%lld/wchan", (int)t->pid, (long long)proc_tid);
	f->wchan_fd = open(path, O_RDONLY | O_CLOEXEC);
	proc_fds_add(t, (f->sched_fd >= 0) + (f->wchan_fd >= 0));
	if (f->sched_fd < 0 || f->wchan_fd < 0) {
		sched_files_close(t, f);
		return false;
	}
	return true;
}

bool sched_files_off(const struct sched_files *f)
{
	char buf[64];
	ssize_t n = pread(f->wchan_fd, buf, sizeof buf, 0);
	return n > 0 && !(n == 1 && buf[0] == '0');
}

bool proc_runtime_symbols(struct uw_target *t, struct elf_symbol *syms, size_t n, raddr_t *addrs)
{
	struct proc_maps maps;
	if (t->pid <= 0 || !t->runtime_file || proc_maps_read(t->pid, &maps, NULL) != 0)
		return false;
	bool all = false;
	for (size_t i = 0; i < maps.count; i++) {
		const struct proc_map *m = &maps.maps[i];
		if (!m->path || m->offset != 0 || strcmp(m->path, t->runtime_file) != 0)
			continue;
		int fd = proc_map_open(t->pid, m, NULL);
		if (fd < 0)
			break;
		struct elf_facts facts;
		all = elf_lookup(fd, syms, n, &facts, NULL) == 0;
		for (size_t k = 0; all && k < n; k++)
			all = syms[k].found;
		for (size_t k = 0; all && k < n; k++)
			addrs[k] = m->start - facts.first_load_vaddr + syms[k].value;
		close(fd);
		break;
	}
	proc_maps_free(&maps);
	return all;
}
