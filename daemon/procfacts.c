/*
 * A process's facts from /proc, for rules and labels: no ptrace, no reads
 * of its memory, a handful of small files.
 *
 * Where systemd and container runtimes put a process is read from its
 * cgroup path: the name=systemd hierarchy of cgroup v1 when there is one
 * (hybrid hosts), else the unified v2 path ("0::").  The runtimes name
 * their cgroups as in proc_facts_runtimes below.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pyprofd.h"

#define PROC_FACTS_CMDLINE_MAX 4096
#define PROC_FACTS_CGROUP_MAX 16384
#define PROC_FACTS_ENVIRON_MAX (256 * 1024)
#define PROC_FACTS_LABEL_KEY_MAX 128
#define PROC_FACTS_LABEL_VALUE_MAX 1024

void proc_facts_free(struct proc_facts *f)
{
	free(f->cmdline);
	labels_free(&f->labels);
	memset(f, 0, sizeof *f);
}

bool proc_facts_label_ok(const char *key, const char *value)
{
	size_t klen = strlen(key), vlen = strlen(value);
	if (klen == 0 || klen > PROC_FACTS_LABEL_KEY_MAX || vlen > PROC_FACTS_LABEL_VALUE_MAX ||
	    strpbrk(key, "=,"))
		return false;
	for (const char *p = key; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return false;
	for (const char *p = value; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return false;
	/* What a process says of itself reaches list, query and a collector, which all take UTF-8. */
	return check_utf8_prefix((const uint8_t *)key, klen) == klen &&
	       check_utf8_prefix((const uint8_t *)value, vlen) == vlen;
}

bool proc_facts_label_is_own(const char *key)
{
	return strncmp(key, LABELS_OWN_PREFIX, strlen(LABELS_OWN_PREFIX)) == 0;
}

/* How many labels, and how long, a text of labels may give. */
struct proc_facts_bounds {
	size_t labels, key, value;
};
static const struct proc_facts_bounds proc_facts_given = {LABELS_GIVEN_MAX, PROC_FACTS_LABEL_KEY_MAX,
                                                          PROC_FACTS_LABEL_VALUE_MAX};
static const struct proc_facts_bounds proc_facts_own = {LABELS_OWN_MAX, LABELS_OWN_KEY_MAX,
                                                        LABELS_OWN_VALUE_MAX};

/* One label into f, the last of a repeated key winning; -1 out of memory. */
static int proc_facts_put_label(struct proc_facts *f, const struct proc_facts_bounds *b, const char *key,
                                const char *value)
{
	if (f->labels.n >= b->labels && !labels_get(&f->labels, key)) {
		f->bad_labels++;
		return 0;
	}
	return labels_put(&f->labels, key, value);
}

/* s[0..len) without the blanks around it, into out (NUL-terminated); false if too long. */
static bool proc_facts_trimmed(const char *s, size_t len, char *out, size_t cap)
{
	while (len && (*s == ' ' || *s == '\t'))
		s++, len--;
	while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (len >= cap)
		return false;
	memcpy(out, s, len);
	out[len] = '\0';
	return true;
}

static int proc_facts_parse(const char *value, const struct proc_facts_bounds *b, struct proc_facts *f)
{
	const char *p = value;
	/* Entries are bounded by the value's length: each one consumes at least its comma. */
	while (*p) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);
		char key[PROC_FACTS_LABEL_KEY_MAX + 2], val[PROC_FACTS_LABEL_VALUE_MAX + 2];
		bool blank = strspn(p, " \t") >= len;
		if (!blank) {
			if (!eq || !proc_facts_trimmed(p, (size_t)(eq - p), key, sizeof key) ||
			    !proc_facts_trimmed(eq + 1, len - (size_t)(eq - p) - 1, val, sizeof val) ||
			    !proc_facts_label_ok(key, val) || strlen(key) > b->key || strlen(val) > b->value)
				f->bad_labels++;
			else if (proc_facts_put_label(f, b, key, val) != 0)
				return -1;
		}
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

int proc_facts_parse_labels(const char *value, struct proc_facts *f)
{
	return proc_facts_parse(value, &proc_facts_given, f);
}

/*
 * How container runtimes name a container's cgroup: a path component that
 * starts with the prefix and ends with the suffix holds the id between.
 */
static const struct {
	const char *prefix, *suffix;
	bool hex; /* the id is hexadecimal (else any name, as lxc and nspawn give) */
} proc_facts_runtimes[] = {
	{"docker-", ".scope", true},         /* docker, systemd cgroup driver */
	{"cri-containerd-", ".scope", true}, /* containerd (Kubernetes) */
	{"crio-", ".scope", true},           /* CRI-O */
	{"libpod-", ".scope", true},         /* podman */
	{"machine-", ".scope", false},       /* systemd-nspawn, machine.slice */
};

static bool proc_facts_is_hex_id(const char *s, size_t len)
{
	return len >= 12 && len <= 128 && strspn(s, "0123456789abcdef") >= len;
}

/*
 * The container of one path component, if it names one; `previous` is the
 * component before it (docker's cgroupfs driver: /docker/<id>, lxc: /lxc/<name>,
 * Kubernetes' cgroupfs driver: /kubepods/.../pod<uid>/<id>).
 */
static bool proc_facts_container_of(const char *part, size_t len, const char *previous,
                                    size_t previous_len, char *out, size_t cap)
{
	for (size_t i = 0; i < sizeof proc_facts_runtimes / sizeof proc_facts_runtimes[0]; i++) {
		size_t plen = strlen(proc_facts_runtimes[i].prefix), slen = strlen(proc_facts_runtimes[i].suffix);
		if (len <= plen + slen || strncmp(part, proc_facts_runtimes[i].prefix, plen) != 0 ||
		    strncmp(part + len - slen, proc_facts_runtimes[i].suffix, slen) != 0)
			continue;
		const char *id = part + plen;
		size_t idlen = len - plen - slen;
		if (proc_facts_runtimes[i].hex && !proc_facts_is_hex_id(id, idlen))
			continue;
		return proc_facts_trimmed(id, idlen, out, cap);
	}
	bool under_runtime = (previous_len == 6 && strncmp(previous, "docker", 6) == 0) ||
	                     (previous_len == 3 && strncmp(previous, "lxc", 3) == 0) ||
	                     (previous_len > 3 && strncmp(previous, "pod", 3) == 0);
	if (under_runtime && (previous_len == 3 ? len > 0 : proc_facts_is_hex_id(part, len)))
		return proc_facts_trimmed(part, len, out, cap);
	return false;
}

/* The unit and container of one cgroup path; the innermost service wins over scopes. */
static void proc_facts_parse_path(const char *path, size_t len, char *unit, size_t unit_len,
                                  char *container, size_t container_len)
{
	char scope[PROC_FACTS_NAME_MAX] = "";
	const char *previous = "";
	size_t previous_len = 0;
	unit[0] = container[0] = '\0';
	for (size_t at = 0; at < len;) {
		while (at < len && path[at] == '/')
			at++;
		size_t part_len = 0;
		while (at + part_len < len && path[at + part_len] != '/')
			part_len++;
		const char *part = path + at;
		if (!part_len)
			break;
		char id[PROC_FACTS_NAME_MAX];
		if (proc_facts_container_of(part, part_len, previous, previous_len, id, sizeof id)) {
			snprintf(container, container_len, "%s", id);
		} else if (part_len > 8 && strncmp(part + part_len - 8, ".service", 8) == 0) {
			proc_facts_trimmed(part, part_len, unit, unit_len);
		} else if (part_len > 6 && strncmp(part + part_len - 6, ".scope", 6) == 0) {
			proc_facts_trimmed(part, part_len, scope, sizeof scope);
		}
		previous = part;
		previous_len = part_len;
		at += part_len;
	}
	/* A login session's or a transient scope is all some processes have. */
	if (!unit[0] && scope[0])
		snprintf(unit, unit_len, "%s", scope);
}

void proc_facts_parse_cgroup(const char *text, char *unit, size_t unit_len, char *container,
                             size_t container_len)
{
	const char *v1 = NULL, *v2 = NULL;
	size_t v1_len = 0, v2_len = 0;
	unit[0] = container[0] = '\0';
	/* Lines are "ID:CONTROLLERS:PATH"; bounded by the text's length. */
	for (const char *line = text; *line;) {
		size_t len = strcspn(line, "\n");
		const char *first = memchr(line, ':', len);
		const char *second = first ? memchr(first + 1, ':', len - (size_t)(first + 1 - line)) : NULL;
		if (second) {
			const char *path = second + 1;
			size_t path_len = len - (size_t)(path - line);
			size_t controllers = (size_t)(second - first - 1);
			if (controllers == 12 && strncmp(first + 1, "name=systemd", 12) == 0)
				v1 = path, v1_len = path_len;
			else if (controllers == 0 && first - line == 1 && line[0] == '0')
				v2 = path, v2_len = path_len;
		}
		line += len;
		if (*line == '\n')
			line++;
	}
	if (v1)
		proc_facts_parse_path(v1, v1_len, unit, unit_len, container, container_len);
	/* A hybrid host may put a container in the v2 tree alone; the unit comes from v1 still. */
	if (v2 && (!v1 || !container[0])) {
		char unit2[PROC_FACTS_NAME_MAX], container2[PROC_FACTS_NAME_MAX];
		proc_facts_parse_path(v2, v2_len, unit2, sizeof unit2, container2, sizeof container2);
		if (!unit[0])
			snprintf(unit, unit_len, "%s", unit2);
		if (!container[0])
			snprintf(container, container_len, "%s", container2);
	}
}

/* errno of a failed read: a process whose files vanish is gone. */
static int proc_facts_fail(void)
{
	if (errno == ESRCH)
		errno = ENOENT;
	return -1;
}

/*
 * A file /proc may refuse (another user's environment) is left out; any
 * other failure (out of descriptors, ...) fails the read, so the process
 * is looked at again rather than judged on facts that were never read.
 */
static bool proc_facts_may_skip(int err)
{
	return err == EACCES || err == EPERM;
}

int proc_facts_read(pid_t pid, unsigned what, struct proc_facts *out)
{
	memset(out, 0, sizeof *out);
	out->pid = pid;
	struct uw_process_identity id;
	struct uw_error err;
	if (uw_process_identity(pid, &id, &err) != 0) {
		errno = err.status == UW_ENOPROC ? ENOENT : err.status == UW_EPERM ? EACCES : EIO;
		return -1;
	}
	out->start_time = id.start_time;
	out->uid = id.uid[0];
	out->ppid = id.ppid;

	char link[64];
	snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
	ssize_t n = readlink(link, out->exe, sizeof out->exe - 1);
	if (n < 0) {
		if (errno == ENOENT || errno == ESRCH) {
			/* A kernel thread has no executable; a process gone has no /proc entry either. */
			if (access(link, F_OK) != 0 && errno == ENOENT && kill(pid, 0) != 0)
				return proc_facts_fail();
		}
		n = 0;
	}
	out->exe[n] = '\0';
	static const char deleted[] = " (deleted)";
	size_t len = (size_t)n;
	if (len > sizeof deleted - 1 && strcmp(out->exe + len - (sizeof deleted - 1), deleted) == 0)
		out->exe[len - (sizeof deleted - 1)] = '\0';

	char cmdline[PROC_FACTS_CMDLINE_MAX + 1];
	ssize_t clen = uw_proc_read(pid, "cmdline", cmdline, sizeof cmdline);
	if (clen < 0)
		return proc_facts_fail();
	while (clen > 0 && cmdline[clen - 1] == '\0')
		clen--;
	for (ssize_t i = 0; i < clen; i++)
		if (cmdline[i] == '\0')
			cmdline[i] = ' ';
	cmdline[clen] = '\0';
	if (!(out->cmdline = strdup(cmdline))) {
		errno = ENOMEM;
		return -1;
	}

	char *cgroup = malloc(PROC_FACTS_CGROUP_MAX);
	if (!cgroup) {
		errno = ENOMEM;
		return -1;
	}
	if (uw_proc_read(pid, "cgroup", cgroup, PROC_FACTS_CGROUP_MAX) >= 0) {
		proc_facts_parse_cgroup(cgroup, out->unit, sizeof out->unit, out->container,
		                        sizeof out->container);
	} else if (!proc_facts_may_skip(errno)) {
		int saved = errno;
		free(cgroup);
		errno = saved;
		return proc_facts_fail();
	}
	free(cgroup);

	if (what & PROC_FACTS_ENVIRONMENT)
		return proc_facts_read_environment(pid, out);
	return 0;
}

int proc_facts_read_environment(pid_t pid, struct proc_facts *f)
{
	/* Another user's environment is root's to read; where it is not, no labels, no failure. */
	char *env = malloc(PROC_FACTS_ENVIRON_MAX);
	if (!env) {
		errno = ENOMEM;
		return -1;
	}
	ssize_t elen = uw_proc_read(pid, "environ", env, PROC_FACTS_ENVIRON_MAX);
	if (elen < 0 && !proc_facts_may_skip(errno)) {
		int saved = errno;
		free(env);
		errno = saved;
		return proc_facts_fail();
	}
	static const char name[] = "PYPROFD_LABELS=";
	for (ssize_t at = 0; at < elen;) {
		size_t entry = strnlen(env + at, (size_t)(elen - at));
		if (entry >= sizeof name - 1 && strncmp(env + at, name, sizeof name - 1) == 0) {
			env[at + (ssize_t)entry] = '\0';
			if (proc_facts_parse(env + at + sizeof name - 1, &proc_facts_own, f) != 0) {
				free(env);
				errno = ENOMEM;
				return -1;
			}
		}
		at += (ssize_t)entry + 1;
	}
	free(env);
	return 0;
}
