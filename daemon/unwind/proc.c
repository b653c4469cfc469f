/* What /proc tells about a process: its mappings, threads and their states. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* vm.max_map_count defaults to 65530; anything far past it is not a real process. */
#define PROC_MAPS_MAX (1u << 20)

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
		unsigned long long start, end, offset;
		int pathpos = 0;
		if (sscanf(line, "%llx-%llx %4s %llx %*s %*s %n", &start, &end, m.perms, &offset,
		           &pathpos) < 4)
			continue;
		m.start = start;
		m.end = end;
		m.offset = offset;
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
	if (rc == 0 && out->count == 0)
		/* A zombie or kernel thread has an empty map. */
		rc = proc_alive(pid) ? uw_fail(err, UW_ENOTPYTHON, "process %d has no memory map", (int)pid)
		                     : uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
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

void proc_root_path(pid_t pid, const char *path, char *buf, size_t len)
{
	snprintf(buf, len, "/proc/%d/root%s", (int)pid, path);
}

/* The state letter follows the command name, which may itself hold ") ". */
static char proc_stat_state(const char *path)
{
	char buf[512];
	FILE *f = fopen(path, "re");
	if (!f)
		return '?';
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *close = strrchr(buf, ')');
	if (!close || close[1] != ' ' || close[2] == '\0')
		return '?';
	return close[2];
}

char proc_thread_state(pid_t pid, pid_t tid)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	return proc_stat_state(path);
}

bool proc_alive(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	char state = proc_stat_state(path);
	return state != '?' && state != 'Z' && state != 'X';
}

int proc_tasks(pid_t pid, pid_t *tids, int max)
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
		if (*end == '\0' && tid > 0)
			tids[n++] = (pid_t)tid;
	}
	closedir(d);
	return n;
}
