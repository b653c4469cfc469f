/*
 * Runs a command inside the part of pyprofd.service's sandbox that decides
 * which kernel interfaces it may use, as systemd would set it up: its system
 * call filter (SystemCallFilter=) and its address families
 * (RestrictAddressFamilies=).  The capability bounding set
 * (CapabilityBoundingSet=) is setpriv's to drop around this program, so the
 * filters are loaded by a process that no longer holds CAP_SYS_ADMIN, with
 * no new privileges, as they are for the unit.
 *
 *   unit-sandbox CALLS FAMILIES -- COMMAND [ARG]...
 *
 * CALLS is a file of system call names, one a line: what the unit's
 * SystemCallFilter= words expand to (systemd-analyze syscall-filter).  A
 * call outside it kills the process with SIGSYS, as systemd's filter does
 * when SystemCallErrorNumber= is unset.  FAMILIES is the unit's
 * RestrictAddressFamilies= list (AF_UNIX AF_NETLINK ...): a socket of any
 * other family fails with EAFNOSUPPORT, as systemd makes it.
 *
 * A test program: it exists so that the tests see the daemon meet the
 * unit's limits on this machine without systemd as its init.
 */
#include <errno.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Calls systemd lets through whatever the filter says (systemd.exec(5)). */
static const char *const always_allowed[] = {
	"execve", "exit", "exit_group", "getrlimit", "rt_sigreturn", "sigreturn",
	"clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "nanosleep", "time",
};

static const struct {
	const char *name;
	int family;
} families[] = {
	{"AF_UNIX", AF_UNIX},       {"AF_LOCAL", AF_LOCAL},   {"AF_INET", AF_INET},
	{"AF_INET6", AF_INET6},     {"AF_NETLINK", AF_NETLINK}, {"AF_PACKET", AF_PACKET},
	{"AF_VSOCK", AF_VSOCK},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static int fail(const char *what)
{
	fprintf(stderr, "unit-sandbox: %s\n", what);
	return 125;
}

static int allow_call(scmp_filter_ctx ctx, const char *name)
{
	int nr = seccomp_syscall_resolve_name(name);
	/* A name of another architecture, or one this libseccomp does not know: systemd skips it too. */
	if (nr == __NR_SCMP_ERROR)
		return 0;
	return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
}

/* The allow-list: every call in the file and the ones systemd always allows; anything else kills. */
static int add_call_filter(const char *path)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
	if (!ctx)
		return fail("seccomp_init failed");
	FILE *f = fopen(path, "r");
	if (!f) {
		seccomp_release(ctx);
		return fail("cannot open the list of calls");
	}
	char line[128];
	int rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f)) {
		line[strcspn(line, " \t\r\n")] = '\0';
		if (line[0])
			rc = allow_call(ctx, line);
	}
	fclose(f);
	for (size_t i = 0; rc == 0 && i < COUNT(always_allowed); i++)
		rc = allow_call(ctx, always_allowed[i]);
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc == 0 ? 0 : fail("the call filter was refused");
}

/* socket() of a family not listed fails with EAFNOSUPPORT; every other call passes this filter. */
static int add_family_filter(const char *list)
{
	bool allowed[AF_MAX] = {false};
	char *copy = strdup(list);
	if (!copy)
		return fail("out of memory");
	for (char *save = NULL, *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		size_t i = 0;
		while (i < COUNT(families) && strcmp(families[i].name, w) != 0)
			i++;
		if (i == COUNT(families)) {
			fprintf(stderr, "unit-sandbox: unknown address family %s (a deny-list is not supported)\n", w);
			free(copy);
			return 125;
		}
		allowed[families[i].family] = true;
	}
	free(copy);
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return fail("seccomp_init failed");
	int rc = 0;
	for (int family = 0; rc == 0 && family < AF_MAX; family++)
		if (!allowed[family])
			rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
			                      SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)family));
	if (rc == 0)
		rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
		                      SCMP_A0(SCMP_CMP_GE, (scmp_datum_t)AF_MAX));
	if (rc == 0)
		rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc == 0 ? 0 : fail("the address family filter was refused");
}

int main(int argc, char **argv)
{
	if (argc < 5 || strcmp(argv[3], "--") != 0) {
		fprintf(stderr, "usage: unit-sandbox CALLS FAMILIES -- COMMAND [ARG]...\n");
		return 2;
	}
	int rc = add_family_filter(argv[2]);
	if (rc == 0)
		rc = add_call_filter(argv[1]);
	if (rc != 0)
		return rc;
	execvp(argv[4], argv + 4);
	fprintf(stderr, "unit-sandbox: %s: %s\n", argv[4], strerror(errno));
	return 127;
}
