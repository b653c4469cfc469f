/*
 * `make install` and the systemd units it installs.
 *
 * The tree is installed into a scratch root (DESTDIR, PREFIX=/usr), as a
 * package build would do it; every documented file must land where the man
 * pages and systemd/README.md say, with its mode, and nothing else may.  Then
 * `systemd-analyze verify --root` checks the installed units as systemd would
 * load them from that root: every directive known and well formed, ExecStart
 * naming an executable that exists there, the socket's service loadable, the
 * man pages of Documentation= found (MANPATH points into the root).  Nothing
 * on the machine itself is installed or changed.
 *
 * A unit does not live alone: its default dependencies need sysinit.target
 * and ExecReload needs kill(1).  Those belong to the operating system the
 * units are installed on, so the scratch root gets the machine's own copies,
 * as a real root would have them.
 */
#include <criterion/criterion.h>

#include <ctype.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collector.h"
#include "daemon.h"
#include "helpers.h"

TestSuite(install, .init = helpers_init, .fini = helpers_fini);

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* make install copies a few files; no build happens (see run_install). */
#define INSTALL_TIMEOUT_S 120.0
/* verify also formats the man pages through man(1). */
#define VERIFY_TIMEOUT_S 120.0
/* Any file the test reads whole (units, man pages, binaries). */
#define FILE_MAX (64 * 1024 * 1024)

#define UNITDIR "/usr/lib/systemd/system"

/* What `make install PREFIX=/usr` puts in DESTDIR, and nothing more. */
static const struct installed {
	const char *path;   /* under DESTDIR */
	mode_t mode;
	const char *source; /* the repository file it is a copy of; NULL: checked apart */
} installed[] = {
	{"/usr/bin/pyprofd", 0755, NULL},
	{"/usr/bin/pyprofd-ctl", 0755, NULL},
	{UNITDIR "/pyprofd.service", 0644, NULL},
	{UNITDIR "/pyprofd.socket", 0644, "systemd/pyprofd.socket"},
	{"/usr/share/man/man8/pyprofd.8", 0644, "daemon/pyprofd.8"},
	{"/usr/share/man/man1/pyprofd-ctl.1", 0644, "client/pyprofd-ctl.1"},
	{"/usr/share/doc/pyprofd/pyprofd.conf.example", 0644, "systemd/pyprofd.conf.example"},
};

/*
 * Units of the operating system that ours need to load: sysinit.target,
 * basic.target and shutdown.target through DefaultDependencies=,
 * sockets.target and multi-user.target through [Install].
 */
static const char *const system_units[] = {
	"sysinit.target", "basic.target", "shutdown.target", "sockets.target", "multi-user.target",
};

/* Where systemd looks up a command given without a path (ExecReload=kill). */
static const char *const system_bin_dirs[] = {
	"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin",
};

/* The repository: the parent of $PYPROFD_TESTS_DIR. */
static void repo_root(char *out, size_t len)
{
	const char *tests = getenv("PYPROFD_TESTS_DIR");
	cr_assert(tests && *tests, "PYPROFD_TESTS_DIR is not set: run the suite with `make test`");
	char up[PATH_MAX], real[PATH_MAX];
	snprintf(up, sizeof up, "%s/..", tests);
	cr_assert(realpath(up, real), "realpath %s: %s", up, strerror(errno));
	int n = snprintf(out, len, "%s", real);
	cr_assert(n > 0 && (size_t)n < len, "repository path too long");
}

static void path_join(char *out, size_t len, const char *a, const char *b)
{
	int n = snprintf(out, len, "%s%s%s", a, b[0] == '/' ? "" : "/", b);
	cr_assert(n > 0 && (size_t)n < len, "path too long: %s/%s", a, b);
}

/* The whole of a file, NUL-terminated; fails the test if it cannot be read. */
static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	cr_assert(f, "open %s: %s", path, strerror(errno));
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	cr_assert(buf, "out of memory");
	for (;;) {
		if (cap - n < 4096) {
			cr_assert(cap < FILE_MAX, "%s is larger than %d bytes", path, FILE_MAX);
			cap *= 2;
			buf = realloc(buf, cap);
			cr_assert(buf, "out of memory");
		}
		size_t got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0)
			break;
	}
	cr_assert(!ferror(f), "read %s: %s", path, strerror(errno));
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

static bool same_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && memcmp(a, b, alen) == 0;
}

/* `from` copied to `to` with `mode`; fails the test on error. */
static void copy_file(const char *from, const char *to, mode_t mode)
{
	copy_executable(from, to);
	cr_assert(chmod(to, mode) == 0, "chmod %s: %s", to, strerror(errno));
}

/* First directory of `dirs` holding an executable `name`; false if none. */
static bool find_program(const char *name, const char *const dirs[], size_t ndirs, char *out,
                         size_t len)
{
	for (size_t i = 0; i < ndirs; i++) {
		path_join(out, len, dirs[i], name);
		if (access(out, X_OK) == 0)
			return true;
	}
	return false;
}

/* systemd-analyze, found in $PATH; fails the test, saying how to get it, if missing. */
static void systemd_analyze(char *out, size_t len)
{
	char buf[8192];
	const char *dirs[256], *path = getenv("PATH");
	snprintf(buf, sizeof buf, "%s", path && *path ? path : "/usr/bin:/bin");
	size_t n = 0;
	for (char *save = NULL, *d = strtok_r(buf, ":", &save); d && n < COUNT(dirs);
	     d = strtok_r(NULL, ":", &save))
		dirs[n++] = d;
	cr_assert(find_program("systemd-analyze", dirs, n, out, len),
	          "systemd-analyze not found: `make deps` installs it (Debian package systemd)");
}

/*
 * `make install` of this repository into `destdir` with PREFIX=/usr and
 * every other directory left to the Makefile's defaults.
 *
 * It runs with `-o all`: the binaries are those the suite is testing, built
 * before the suite started ($PYPROFD_BIN names them, and BUILD is their
 * directory).  Rebuilding them here could replace binaries other tests are
 * running, and would install something else than what was tested.
 */
static void run_install(struct run_result *r, const char *destdir, const struct run_opts *opts)
{
	char repo[PATH_MAX], build[PATH_MAX], dest_arg[PATH_MAX + 16], build_arg[PATH_MAX + 16];
	repo_root(repo, sizeof repo);
	snprintf(build, sizeof build, "%s", pyprofd_bin());
	char *slash = strrchr(build, '/');
	cr_assert(slash && slash != build, "PYPROFD_BIN is not a path: %s", build);
	*slash = '\0';
	snprintf(dest_arg, sizeof dest_arg, "DESTDIR=%s", destdir);
	snprintf(build_arg, sizeof build_arg, "BUILD=%s", build);

	/*
	 * Under `make test` the environment holds the outer make's flags (its
	 * jobserver among them, which is not this process's to use) and maybe
	 * directory variables of the caller's shell, which the Makefile's ?=
	 * would take: its defaults are what is under test.
	 */
	static const char *const inherited[] = {
		"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GNUMAKEFLAGS", "PREFIX",
		"BINDIR",    "UNITDIR", "MANDIR",   "DOCDIR",       "DESTDIR",
	};
	for (size_t i = 0; i < COUNT(inherited); i++)
		unsetenv(inherited[i]);

	struct run_opts o = opts ? *opts : (struct run_opts){0};
	o.timeout_s = INSTALL_TIMEOUT_S;
	const char *const argv[] = {"make",    "-C",      repo,      "--no-print-directory",
	                            "-o",      "all",     "install", dest_arg,
	                            build_arg, "PREFIX=/usr", NULL};
	run_command(r, argv, &o);
}

static void install_ok(const char *destdir)
{
	struct run_result r;
	char why[1024];
	run_install(&r, destdir, NULL);
	cr_assert(r.exited && !r.timed_out && r.code == 0, "make install failed: %s",
	          run_describe(&r, why, sizeof why));
	run_result_free(&r);
}

/* nftw has no closure: the walk reports into these. */
static const char *walk_root;
static char walk_unexpected[4096];
static size_t walk_found;

static int walk_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	const char *rel = path + strlen(walk_root);
	if (flag == FTW_D || flag == FTW_DP)
		return 0;
	bool known = false;
	for (size_t i = 0; i < COUNT(installed) && !known; i++)
		known = strcmp(rel, installed[i].path) == 0 && S_ISREG(st->st_mode);
	if (known) {
		walk_found++;
	} else {
		size_t used = strlen(walk_unexpected);
		snprintf(walk_unexpected + used, sizeof walk_unexpected - used, " %s", rel);
	}
	return 0;
}

/* Every installed file is one of `installed`, a regular file. */
static void expect_only_installed(const char *root)
{
	walk_root = root;
	walk_unexpected[0] = '\0';
	walk_found = 0;
	cr_assert(nftw(root, walk_entry, 16, FTW_PHYS) == 0, "walk %s: %s", root, strerror(errno));
	cr_expect(walk_unexpected[0] == '\0', "make install put files it does not document:%s",
	          walk_unexpected);
	cr_expect(walk_found == COUNT(installed), "%zu of the %zu documented files installed",
	          walk_found, COUNT(installed));
}

/* Each documented file: there, its mode, its content. */
static void expect_installed_files(const char *root)
{
	char repo[PATH_MAX];
	repo_root(repo, sizeof repo);
	for (size_t i = 0; i < COUNT(installed); i++) {
		char path[PATH_MAX];
		struct stat st;
		path_join(path, sizeof path, root, installed[i].path);
		if (lstat(path, &st) != 0) {
			cr_expect_fail("%s not installed: %s", installed[i].path, strerror(errno));
			continue;
		}
		cr_expect(S_ISREG(st.st_mode), "%s is not a regular file", installed[i].path);
		cr_expect((st.st_mode & 07777) == installed[i].mode, "%s has mode %04o, not %04o",
		          installed[i].path, (unsigned)(st.st_mode & 07777),
		          (unsigned)installed[i].mode);
		if (!installed[i].source)
			continue;
		char src[PATH_MAX];
		path_join(src, sizeof src, repo, installed[i].source);
		size_t a, b;
		char *want = read_file(src, &a), *got = read_file(path, &b);
		cr_expect(same_bytes(want, a, got, b), "%s is not a copy of %s", installed[i].path,
		          installed[i].source);
		free(want);
		free(got);
	}
}

/* The binaries are those under test: $PYPROFD_BIN and $PYPROFD_CTL. */
static void expect_installed_binaries(const char *root)
{
	const struct {
		const char *installed, *built;
	} bins[] = {
		{"/usr/bin/pyprofd", pyprofd_bin()},
		{"/usr/bin/pyprofd-ctl", getenv("PYPROFD_CTL")},
	};
	for (size_t i = 0; i < COUNT(bins); i++) {
		if (!bins[i].built || !*bins[i].built)
			continue; /* PYPROFD_CTL unset: nothing to compare with */
		char path[PATH_MAX];
		size_t a, b;
		path_join(path, sizeof path, root, bins[i].installed);
		char *want = read_file(bins[i].built, &a), *got = read_file(path, &b);
		cr_expect(same_bytes(want, a, got, b), "%s is not the binary under test %s",
		          bins[i].installed, bins[i].built);
		free(want);
		free(got);
	}
}

/* The service is its template with the installed binary directory filled in. */
static void expect_service_filled(const char *root)
{
	char repo[PATH_MAX], tmpl_path[PATH_MAX], path[PATH_MAX];
	repo_root(repo, sizeof repo);
	path_join(tmpl_path, sizeof tmpl_path, repo, "systemd/pyprofd.service.in");
	path_join(path, sizeof path, root, UNITDIR "/pyprofd.service");
	size_t tlen, glen;
	char *tmpl = read_file(tmpl_path, &tlen), *got = read_file(path, &glen);

	static const char placeholder[] = "@BINDIR@", bindir[] = "/usr/bin";
	char *want = malloc(tlen * 2 + 1);
	cr_assert(want, "out of memory");
	size_t n = 0, fills = 0;
	for (const char *p = tmpl; *p;) {
		if (strncmp(p, placeholder, sizeof placeholder - 1) == 0) {
			memcpy(want + n, bindir, sizeof bindir - 1);
			n += sizeof bindir - 1;
			p += sizeof placeholder - 1;
			fills++;
		} else {
			want[n++] = *p++;
		}
	}
	want[n] = '\0';
	cr_expect(fills > 0, "systemd/pyprofd.service.in has no @BINDIR@ to fill");
	cr_expect(same_bytes(want, n, got, glen),
	          "the installed pyprofd.service is not its template with @BINDIR@ = /usr/bin");
	cr_expect(strstr(got, "\nExecStart=/usr/bin/pyprofd ") != NULL,
	          "the installed service does not start /usr/bin/pyprofd");
	cr_expect(strstr(got, placeholder) == NULL, "@BINDIR@ is left in pyprofd.service");
	free(tmpl);
	free(want);
	free(got);
}

/*
 * Gives the scratch root the parts of the operating system the units rely
 * on (see the top of the file), from this machine.
 */
static void add_system_parts(const char *root)
{
	static const char *const unit_dirs[] = {"/usr/lib/systemd/system", "/lib/systemd/system"};
	char dir[PATH_MAX] = "", path[PATH_MAX], to[PATH_MAX];
	for (size_t i = 0; i < COUNT(unit_dirs) && !dir[0]; i++) {
		path_join(path, sizeof path, unit_dirs[i], "sysinit.target");
		if (access(path, R_OK) == 0)
			snprintf(dir, sizeof dir, "%s", unit_dirs[i]);
	}
	cr_assert(dir[0], "no sysinit.target on this machine: is systemd installed? (`make deps`)");
	for (size_t i = 0; i < COUNT(system_units); i++) {
		path_join(path, sizeof path, dir, system_units[i]);
		char unitdir[PATH_MAX];
		path_join(unitdir, sizeof unitdir, root, UNITDIR);
		path_join(to, sizeof to, unitdir, system_units[i]);
		copy_file(path, to, 0644);
	}
	cr_assert(find_program("kill", system_bin_dirs, COUNT(system_bin_dirs), path, sizeof path),
	          "no kill(1) on this machine (package procps)");
	path_join(to, sizeof to, root, "/usr/bin/kill");
	copy_file(path, to, 0755);
}

/* `systemd-analyze verify` of the installed units; r holds what it said. */
static void run_verify(struct run_result *r, const char *root)
{
	char sa[PATH_MAX];
	systemd_analyze(sa, sizeof sa);

	char root_arg[PATH_MAX + 16], manpath[PATH_MAX + 16], tmpdir[PATH_MAX + 16], tmp[PATH_MAX];
	/* The search path of the service manager, not the caller's, finds kill(1). */
	char search[256] = "PATH=";
	for (size_t i = 0; i < COUNT(system_bin_dirs); i++)
		snprintf(search + strlen(search), sizeof search - strlen(search), "%s%s",
		         i ? ":" : "", system_bin_dirs[i]);
	snprintf(root_arg, sizeof root_arg, "--root=%s", root);
	snprintf(manpath, sizeof manpath, "MANPATH=%s/usr/share/man", root);
	/* Its own temporary files go to the scratch area too. */
	scratch_dir(tmp, sizeof tmp);
	snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", tmp);
	/*
	 * --recursive-errors=yes: without it verify exits 0 whatever it finds.
	 * Unit paths are read under --root, as systemd would find them there.
	 */
	const char *const argv[] = {"env",
	                            search,
	                            manpath,
	                            tmpdir,
	                            sa,
	                            "verify",
	                            root_arg,
	                            "--recursive-errors=yes",
	                            "--man=yes",
	                            UNITDIR "/pyprofd.socket",
	                            UNITDIR "/pyprofd.service",
	                            NULL};
	run_command(r, argv, &(struct run_opts){.timeout_s = VERIFY_TIMEOUT_S});
}

/* verify passed: exit 0 and not a word about our units. */
static void expect_verified(const struct run_result *r, const char *context)
{
	char why[4096];
	run_describe(r, why, sizeof why);
	cr_expect(r->exited && !r->timed_out && r->code == 0, "%s: systemd-analyze verify failed: %s",
	          context, why);
	bool quiet = true;
	static const char *const ours[] = {"pyprofd.service", "pyprofd.socket"};
	for (size_t i = 0; i < COUNT(ours); i++)
		quiet = quiet && !strstr(r->err, ours[i]) && !strstr(r->out, ours[i]);
	cr_expect(quiet, "%s: systemd-analyze verify has something to say about the units: %s",
	          context, why);
}

/* verify failed, as it must on a broken unit. */
static void install_expect_rejected(const struct run_result *r, const char *context)
{
	char why[4096];
	cr_expect(r->exited && !r->timed_out && r->code != 0,
	          "%s: systemd-analyze verify passed a broken unit: %s", context,
	          run_describe(r, why, sizeof why));
}

/* Replaces the first `from` in the file at `path` by `to`. */
static void replace_in_file(const char *path, const char *from, const char *to)
{
	size_t len;
	char *text = read_file(path, &len);
	char *at = strstr(text, from);
	cr_assert(at, "%s has no %s", path, from);
	FILE *f = fopen(path, "w");
	cr_assert(f, "open %s: %s", path, strerror(errno));
	fwrite(text, 1, (size_t)(at - text), f);
	fputs(to, f);
	fputs(at + strlen(from), f);
	cr_assert(fclose(f) == 0, "write %s: %s", path, strerror(errno));
	free(text);
}

/* Writes `len` bytes of `text` over `path`. */
static void install_write_file(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "w");
	cr_assert(f, "open %s: %s", path, strerror(errno));
	cr_assert(fwrite(text, 1, len, f) == len && fclose(f) == 0, "write %s: %s", path,
	          strerror(errno));
}

/* The line after `line`, or NULL at the end of the text. */
static const char *next_line(const char *line)
{
	const char *nl = strchr(line, '\n');
	return nl && nl[1] ? nl + 1 : NULL;
}

/* The value of directive `key` in unit text (the last assignment wins); NULL if unset. */
static char *unit_value(const char *text, const char *key)
{
	char *found = NULL;
	size_t klen = strlen(key);
	for (const char *line = text; line; line = next_line(line)) {
		if (strncmp(line, key, klen) != 0 || line[klen] != '=')
			continue;
		free(found);
		found = strndup(line + klen + 1, strcspn(line + klen + 1, "\n"));
		cr_assert(found, "out of memory");
	}
	return found;
}

/* Groups nest a few levels deep (@system-service holds @ipc); this bounds a cycle. */
#define SYSCALL_GROUP_DEPTH 8

/*
 * The calls a SystemCallFilter= word stands for (a call, or a @group whose
 * nested groups are followed through systemd-analyze), one a line into out.
 */
static void filter_word_calls(const char *analyze, const char *word, int depth, FILE *out)
{
	if (word[0] != '@') {
		fprintf(out, "%s\n", word);
		return;
	}
	cr_assert(depth < SYSCALL_GROUP_DEPTH, "system call groups nest too deep at %s", word);
	struct run_result r;
	const char *const argv[] = {analyze, "syscall-filter", word, NULL};
	run_command(&r, argv, NULL);
	cr_assert(r.exited && r.code == 0, "systemd-analyze syscall-filter %s failed", word);
	/* The group's name, then its members, one per line, indented. */
	for (const char *line = r.out; line; line = next_line(line)) {
		char member[128];
		if (line[0] == ' ' && sscanf(line, " %127[^ \n#]", member) == 1)
			filter_word_calls(analyze, member, depth + 1, out);
	}
	run_result_free(&r);
}

/*
 * Every call the unit's SystemCallFilter= lines allow, one a line (malloc'd).
 * The unit lists what it allows: a deny-list (~...) is not what it means.
 */
static char *unit_allowed_calls(const char *text)
{
	char analyze[PATH_MAX];
	systemd_analyze(analyze, sizeof analyze);
	static const char key[] = "SystemCallFilter=";
	char *calls = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&calls, &len);
	cr_assert(out, "open_memstream: %s", strerror(errno));
	for (const char *line = text; line; line = next_line(line)) {
		if (strncmp(line, key, sizeof key - 1) != 0)
			continue;
		char set[512];
		snprintf(set, sizeof set, "%.*s", (int)strcspn(line + sizeof key - 1, "\n"), line + sizeof key - 1);
		cr_assert(set[0] != '~', "pyprofd.service denies calls (SystemCallFilter=%s): it should list what it allows",
		          set);
		for (char *save = NULL, *w = strtok_r(set, " ", &save); w; w = strtok_r(NULL, " ", &save))
			filter_word_calls(analyze, w, 0, out);
	}
	cr_assert(fclose(out) == 0 && calls, "open_memstream: %s", strerror(errno));
	return calls;
}

/* Whether a list of calls, one a line, holds name. */
static bool calls_hold(const char *calls, const char *name)
{
	size_t n = strlen(name);
	for (const char *line = calls; line && *line; line = next_line(line))
		if (strncmp(line, name, n) == 0 && line[n] == '\n')
			return true;
	return false;
}

Test(install, install_layout, .timeout = 300)
{
	char root[PATH_MAX];
	scratch_dir(root, sizeof root);
	install_ok(root);
	expect_only_installed(root);
	expect_installed_files(root);
	expect_installed_binaries(root);
	expect_service_filled(root);
}

Test(install, installed_units_verify, .timeout = 300)
{
	char root[PATH_MAX];
	scratch_dir(root, sizeof root);
	install_ok(root);
	add_system_parts(root);
	struct run_result r;
	run_verify(&r, root);
	expect_verified(&r, "installed units");
	run_result_free(&r);
}

/* make install into a new scratch root (its path into root): the installed pyprofd.service's text. */
static char *installed_service(char *root, size_t len)
{
	char path[PATH_MAX];
	scratch_dir(root, len);
	install_ok(root);
	path_join(path, sizeof path, root, UNITDIR "/pyprofd.service");
	return read_file(path, NULL);
}

/*
 * Hardening must not hide what pyprofd profiles: verify accepts any valid
 * sandbox, so what the daemon needs from one is checked here.
 */
Test(install, service_keeps_targets_in_sight, .timeout = 300)
{
	char root[PATH_MAX];
	char *text = installed_service(root, sizeof root);

	/* Each, but at the value given, hides processes from the daemon (see the unit). */
	static const struct {
		const char *key, *harmless;
	} hiding[] = {
		{"PrivatePIDs", "no"},
		{"PrivateUsers", "no"},
		{"ProtectProc", "default"},
	};
	for (size_t i = 0; i < COUNT(hiding); i++) {
		char *v = unit_value(text, hiding[i].key);
		cr_expect(!v || strcmp(v, hiding[i].harmless) == 0, "pyprofd.service sets %s=%s",
		          hiding[i].key, v);
		free(v);
	}
	static const struct {
		const char *key, *value;
	} needed[] = {
		{"Type", "notify"},
		{"CapabilityBoundingSet", "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_NET_ADMIN CAP_BPF CAP_PERFMON"},
		{"AmbientCapabilities", "CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_NET_ADMIN CAP_BPF CAP_PERFMON"},
		{"RestrictAddressFamilies", "AF_UNIX AF_NETLINK AF_INET AF_INET6"},
		{"StateDirectory", "pyprofd"},
		{"RuntimeDirectory", "pyprofd"},
		/* pyprofd.socket listens inside /run/pyprofd: it must outlive a stop. */
		{"RuntimeDirectoryPreserve", "yes"},
	};
	for (size_t i = 0; i < COUNT(needed); i++) {
		char *v = unit_value(text, needed[i].key);
		cr_expect(v && strcmp(v, needed[i].value) == 0, "pyprofd.service: %s=%s, not %s",
		          needed[i].key, v ? v : "(unset)", needed[i].value);
		free(v);
	}

	/* The system call filter lets through the calls the daemon's sampling and its look are made of. */
	char *calls = unit_allowed_calls(text);
	static const char *const sampling_calls[] = {"process_vm_readv", "process_vm_writev", "bpf",
	                                             "perf_event_open"};
	for (size_t i = 0; i < COUNT(sampling_calls); i++)
		cr_expect(calls_hold(calls, sampling_calls[i]), "pyprofd.service's SystemCallFilter= does not allow %s",
		          sampling_calls[i]);
	free(calls);
	free(text);
}

/* A target for the sandboxed daemon: a thread parked for good beside one that works. */
/* Seconds the sandboxed daemon is given to prove a parked thread still. */
#define SANDBOX_STILL_WAIT_S 30

static const char sandbox_program[] =
	"import threading, time\n"
	"def sandbox_parked():\n"
	"    threading.Event().wait()\n"
	"threading.Thread(target=sandbox_parked, daemon=True).start()\n"
	"def sandbox_busy():\n"
	"    while True:\n"
	"        sum(range(3000))\n"
	"        time.sleep(0.002)\n"
	"sandbox_busy()\n";

/* CAP_SYS_PTRACE CAP_BPF ... as setpriv's --bounding-set: -all,+sys_ptrace,+bpf,... */
static void bounding_set_arg(const char *caps, char *out, size_t len)
{
	char *copy = strdup(caps);
	cr_assert(copy, "out of memory");
	size_t used = (size_t)snprintf(out, len, "-all");
	for (char *save = NULL, *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		cr_assert(strncmp(w, "CAP_", 4) == 0, "CapabilityBoundingSet= holds %s", w);
		for (char *c = w; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		used += (size_t)snprintf(out + used, len - used, ",+%s", w + 4);
		cr_assert(used < len, "CapabilityBoundingSet= too long");
	}
	free(copy);
}

/* The sandboxed daemon must live: if it died, how, in the unit's words. */
static void sandboxed_alive(struct daemon *d, const char *when)
{
	int status;
	if (waitpid(d->pid, &status, WNOHANG) != d->pid)
		return;
	char *log = daemon_log(d);
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS)
		cr_assert_fail("%s: the daemon was killed by SIGSYS: it made a call pyprofd.service's "
		               "SystemCallFilter= does not allow\n%s", when, log);
	cr_assert_fail("%s: the daemon in the unit's sandbox ended (status 0x%x)\n%s", when, (unsigned)status, log);
}

/* The newest interpreter (3.15's marker is written with process_vm_writev, and proven by the look alone). */
static const struct python *newest_python(struct python *pys, size_t n)
{
	cr_assert(n > 0, "no supported interpreter");
	const struct python *best = &pys[0];
	for (size_t i = 1; i < n; i++)
		if (pys[i].minor > best->minor || (pys[i].minor == best->minor && !pys[i].debug && best->debug))
			best = &pys[i];
	return best;
}

/*
 * The installed daemon started (`pyprofd serve`, as ExecStart= runs it) in
 * the unit's sandbox as systemd would set it up: its capability bounding
 * set (setpriv), its system call filter and address families
 * (unit-sandbox), no new privileges, every value read from the installed
 * unit (text) and the call groups expanded by systemd-analyze.  The mounts
 * (ProtectSystem= and the like) are not set up: they hide nothing the
 * daemon reads but the directories the test gives it instead.
 */
static void sandboxed_daemon_start(struct daemon *d, const char *root, const char *text, const char *config_text)
{
	char *calls = unit_allowed_calls(text), *caps = unit_value(text, "CapabilityBoundingSet"),
	     *families = unit_value(text, "RestrictAddressFamilies");
	cr_assert(caps && families, "pyprofd.service sets no CapabilityBoundingSet= or RestrictAddressFamilies=");
	const char *sandbox = getenv("PYPROFD_UNIT_SANDBOX");
	cr_assert(sandbox && access(sandbox, X_OK) == 0,
	          "$PYPROFD_UNIT_SANDBOX names no program: run the suite with `make test`");
	memset(d, 0, sizeof *d);
	scratch_dir(d->dir, sizeof d->dir);
	snprintf(d->state, sizeof d->state, "%s/state", d->dir);
	snprintf(d->sock, sizeof d->sock, "%s/run/pyprofd.sock", d->dir);
	snprintf(d->log, sizeof d->log, "%s/daemon.log", d->dir);
	char calls_path[PATH_MAX + 16], config[PATH_MAX + 16], bset[1024], bin[PATH_MAX];
	snprintf(calls_path, sizeof calls_path, "%s/calls", d->dir);
	write_text_file(calls_path, calls);
	snprintf(config, sizeof config, "%s/pyprofd.conf", d->dir);
	write_text_file(config, config_text);
	bounding_set_arg(caps, bset, sizeof bset);
	path_join(bin, sizeof bin, root, "/usr/bin/pyprofd");

	/* The sanitizers' leak check stops the world with ptrace, which no service needs. */
	const char *asan = getenv("ASAN_OPTIONS");
	char asan_options[512];
	snprintf(asan_options, sizeof asan_options, "%s%sdetect_leaks=0", asan ? asan : "", asan && *asan ? ":" : "");
	setenv("ASAN_OPTIONS", asan_options, 1);
	const char *argv[] = {"setpriv", "--bounding-set", bset, "--no-new-privs", "--", sandbox, calls_path,
	                      families, "--", bin, "serve", "--state-dir", d->state, "--socket", d->sock,
	                      "--config", config, "--log-level", "info", NULL};
	d->pid = spawn_process((char *const *)argv, d->log);
	double deadline = mono_now() + 30;
	int fd;
	while ((fd = daemon_connect(d)) < 0) {
		sandboxed_alive(d, "starting");
		cr_assert(mono_now() < deadline, "the sandboxed daemon does not listen on %s", d->sock);
		pause_ms(20);
	}
	close(fd);
	free(calls);
	free(caps);
	free(families);
}

/* The collector gets samples of pid from the daemon within a minute; if not, the exporter's last error says why. */
static void expect_exported(struct daemon *d, const struct collector *c, pid_t pid)
{
	struct collector_totals got = {0};
	double until = mono_now() + 60;
	do {
		pause_ms(500);
		sandboxed_alive(d, "exporting");
		collector_totals(c, &got);
	} while (collector_total_of(&got, pid) == 0 && mono_now() < until);
	if (collector_total_of(&got, pid) > 0)
		return;
	static const char *const status[] = {"status", NULL};
	json_t *st = ctl_json(d, status);
	json_t *e = json_object_get(json_object_get(st, "export"), "last_error");
	cr_expect_fail("the collector received nothing of pid %d from the daemon in the unit's sandbox "
	               "(the exporter's last error: %s)",
	               (int)pid, json_is_string(e) ? json_string_value(e) : "none");
	json_decref(st);
}

/*
 * The daemon at work inside the unit's sandbox, as a fleet host runs it: it
 * finds its target by a rule, samples it, dumps it, stores it and exports
 * it.  A call the unit forbids kills it (SIGSYS), a missing capability turns
 * its in-kernel aids off, a missing address family stops the export: the
 * unit as first shipped did all three (it allowed neither bpf nor
 * perf_event_open, granted neither CAP_BPF nor CAP_PERFMON, and no
 * AF_INET).  The kernel's copies are asked for too, so that every aid the
 * daemon may load is loaded there.
 */
Test(install, service_sandbox_keeps_the_daemon_whole, .timeout = 300)
{
	char root[PATH_MAX];
	char *text = installed_service(root, sizeof root);
	struct collector c;
	bool otlp = collector_bin() != NULL;
	char url[128], config[1024];
	/* By name: the lookup of the collector's host runs inside the sandbox too. */
	if (otlp) {
		collector_start(&c, 0);
		snprintf(url, sizeof url, "http://localhost:%d", c.port);
	} else {
		cr_log_warn("no collector ($PYPROFD_COLLECTOR): the OTLP export is not tried in the sandbox");
	}
	snprintf(config, sizeof config,
	         "[sampling]\nkernel_copy = true\n[storage]\nflush_interval_s = 2\nbucket_seconds = 1\n"
	         "[rule.sandboxed]\nmatch.cmdline = sandbox_target\nrate = 100\n%s%s%s",
	         otlp ? "[export.otlp]\nendpoint = " : "", otlp ? url : "",
	         otlp ? "\ninterval = 1s\ntimeout = 2s\n" : "");
	struct daemon d;
	sandboxed_daemon_start(&d, root, text, config);

	/* The reader, its look and its copies all loaded; the process events heard. */
	static const char *const status[] = {"status", NULL};
	json_t *st = ctl_json(&d, status), *kernel = json_object_get(st, "kernel");
	cr_expect_str_eq(jstr(json_object_get(st, "discovery"), "method"), "netlink",
	                 "in the unit's sandbox the daemon does not hear the kernel's process events");
	static const char *const aids[] = {"reader", "look", "copy"};
	for (size_t i = 0; i < COUNT(aids); i++)
		cr_expect_str_eq(jstr(kernel, aids[i]), "on", "in the unit's sandbox the kernel's %s is %s", aids[i],
		                 jstr(kernel, aids[i]));
	json_decref(st);

	struct python pys[PYTHONS_MAX];
	const struct python *py = newest_python(pys, pythons_supported(pys, PYTHONS_MAX));
	char script[PATH_MAX + 32], target_log[PATH_MAX + 16], p[16];
	snprintf(script, sizeof script, "%s/sandbox_target.py", d.dir);
	snprintf(target_log, sizeof target_log, "%s/target.log", d.dir);
	write_text_file(script, sandbox_program);
	const char *args[] = {script, NULL};
	pid_t target = spawn_python(py, args, target_log);
	pid_text(target, p, sizeof p);
	/* Attached by its rule, on the kernel's process events. */
	json_decref(entry_when(&d, target, sampled_a_while, "the target sampled a while"));
	sandboxed_alive(&d, "sampling");

	/*
	 * 3.15's stacks are proven still by the look alone (/proc is not asked
	 * there): the parked thread, once read whole, at any later sample; a
	 * loaded host may take a while to give the daemon those samples.
	 */
	json_int_t still = 0;
	for (int k = 0; k < SANDBOX_STILL_WAIT_S * 10 && py->minor >= 15 && still == 0; k++) {
		json_t *stats = ctl_stats_of(&d, target);
		still = jint(stats, "still_proven");
		json_decref(stats);
		if (still == 0)
			pause_ms(100);
	}
	if (py->minor >= 15)
		cr_expect_gt(still, 0, "3.%u in the unit's sandbox: no thread was proven still in %d s: the look is off",
		             py->minor, SANDBOX_STILL_WAIT_S);
	const char *dump[] = {"dump", p, NULL};
	json_decref(ctl_json(&d, dump));
	sandboxed_alive(&d, "dumping");
	if (otlp)
		expect_exported(&d, &c, target);
	const char *by_pid[] = {"--pid", p, NULL};
	cr_expect_gt(query_total(&d, by_pid, NULL), 0, "the history holds nothing of pid %d", (int)target);
	kill(target, SIGKILL);
	waitpid(target, NULL, 0);
	sandboxed_alive(&d, "querying");
	daemon_stop(&d);
	if (otlp)
		collector_stop(&c, SIGTERM);
	free(text);
}

/* The check above means something: verify, run the same way, rejects broken units. */
Test(install, verify_rejects_broken_units, .timeout = 300)
{
	char root[PATH_MAX], service[PATH_MAX], socket[PATH_MAX], bin[PATH_MAX], moved[PATH_MAX];
	scratch_dir(root, sizeof root);
	install_ok(root);
	add_system_parts(root);
	path_join(service, sizeof service, root, UNITDIR "/pyprofd.service");
	path_join(socket, sizeof socket, root, UNITDIR "/pyprofd.socket");
	size_t slen, klen;
	char *service_text = read_file(service, &slen), *socket_text = read_file(socket, &klen);
	const struct {
		const char *path, *from, *to, *what;
	} breaks[] = {
		{service, "\nProtectSystem=strict\n", "\nProtectSystem=strcit\n", "a misspelt value"},
		{service, "\nAmbientCapabilities=", "\nAmbientCapabilitys=", "an unknown directive"},
		{socket, "\nService=pyprofd.service\n", "\nService=pyprofd-other.service\n",
		 "a socket for no service"},
	};
	struct run_result r;
	for (size_t i = 0; i < COUNT(breaks); i++) {
		replace_in_file(breaks[i].path, breaks[i].from, breaks[i].to);
		run_verify(&r, root);
		install_expect_rejected(&r, breaks[i].what);
		run_result_free(&r);
		install_write_file(service, service_text, slen);
		install_write_file(socket, socket_text, klen);
	}

	/* Restored, the installed units pass again... */
	run_verify(&r, root);
	expect_verified(&r, "the restored units");
	run_result_free(&r);

	/* ...until ExecStart names nothing. */
	path_join(bin, sizeof bin, root, "/usr/bin/pyprofd");
	path_join(moved, sizeof moved, root, "/usr/bin/pyprofd.moved");
	cr_assert(rename(bin, moved) == 0, "rename %s: %s", bin, strerror(errno));
	run_verify(&r, root);
	install_expect_rejected(&r, "a missing ExecStart binary");
	run_result_free(&r);
	free(service_text);
	free(socket_text);
}

/* A packager builds as a plain user: DESTDIR alone must be enough. */
Test(install, install_as_plain_user, .timeout = 300)
{
	if (geteuid() != 0)
		cr_skip_test("already a plain user: install_layout covers it");
	struct passwd *pw = getpwnam("nobody");
	if (!pw)
		cr_skip_test("no user nobody");
	struct run_opts as_nobody = {
		.drop_privileges = true, .uid = pw->pw_uid, .gid = pw->pw_gid};

	/* The repository and its build may be closed to nobody (a private home). */
	char repo[PATH_MAX];
	repo_root(repo, sizeof repo);
	struct run_result r;
	char makefile[PATH_MAX];
	path_join(makefile, sizeof makefile, repo, "Makefile");
	const char *const probe[] = {"test", "-r", makefile, "-a", "-r", pyprofd_bin(), NULL};
	run_command(&r, probe, &as_nobody);
	bool readable = r.exited && r.code == 0;
	run_result_free(&r);
	if (!readable)
		cr_skip_test("the repository or its build is not readable by nobody");

	char root[PATH_MAX], why[1024];
	scratch_dir(root, sizeof root);
	cr_assert(chown(root, pw->pw_uid, pw->pw_gid) == 0, "chown %s: %s", root, strerror(errno));
	run_install(&r, root, &as_nobody);
	cr_assert(r.exited && !r.timed_out && r.code == 0, "make install as nobody failed: %s",
	          run_describe(&r, why, sizeof why));
	run_result_free(&r);
	expect_only_installed(root);
	expect_installed_files(root);
	char bin[PATH_MAX];
	struct stat st;
	path_join(bin, sizeof bin, root, "/usr/bin/pyprofd");
	cr_expect(stat(bin, &st) == 0 && st.st_uid == pw->pw_uid,
	          "%s was not installed by nobody", bin);
}
