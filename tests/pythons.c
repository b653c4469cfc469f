#include "pythons.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

const char *python_exec_path(const struct python *py)
{
	return py->path + py->root_len;
}

const char *python_root(const struct python *py, char *buf, size_t len)
{
	snprintf(buf, len, "%.*s", (int)py->root_len, py->path);
	return buf;
}

const char *python_describe(const struct python *py, char *buf, size_t len)
{
	snprintf(buf, len, "%u.%u%s%s (%s%s)", py->major, py->minor, py->free_threaded ? "t" : "",
	         py->debug ? " debug" : "",
	         py->path,
	         py->contained ? ", contained" : py->root_len ? ", chrooted" : "");
	return buf;
}

/* mkdir -p; 0 or -1 with errno. */
static int pythons_mkdirs(char *path)
{
	for (char *slash = strchr(path + 1, '/');; slash = strchr(slash + 1, '/')) {
		if (slash)
			*slash = '\0';
		int rc = mkdir(path, 0755);
		int saved = errno;
		if (slash)
			*slash = '/';
		if (rc != 0 && saved != EEXIST) {
			errno = saved;
			return -1;
		}
		if (!slash)
			return 0;
	}
}

/*
 * Binds the host's directory dir at the same path under root.  The mount
 * point is made in the root when missing: an empty directory, left there for
 * the next run.
 */
static int pythons_bind(const char *root, const char *dir)
{
	char inside[PATH_MAX];
	if (!dir || !*dir)
		return 0; /* not named: the test uses none */
	if (dir[0] != '/') {
		errno = EINVAL;
		return -1;
	}
	if (snprintf(inside, sizeof inside, "%s%s", root, dir) >= (int)sizeof inside) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (pythons_mkdirs(inside) != 0)
		return -1;
	return mount(dir, inside, NULL, MS_BIND | MS_REC, NULL);
}

int python_enter_root(const struct python *py)
{
	if (!py->root_len)
		return 0;
	char root[PATH_MAX], proc[PATH_MAX + 8];
	python_root(py, root, sizeof root);
	snprintf(proc, sizeof proc, "%s/proc", root);
	/* Private first: a bind made in a namespace still shared would show on the host. */
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		return -1;
	/* pivot_root wants the new root to be a mount of its own. */
	if (py->contained && mount(root, root, NULL, MS_BIND | MS_REC, NULL) != 0)
		return -1;
	if (pythons_bind(root, getenv("PYPROFD_TESTS_DIR")) != 0 ||
	    pythons_bind(root, scratch_root()) != 0)
		return -1;
	if (!py->contained) {
		/* The targets look at /proc (stacks.py waits for a thread's task to go). */
		if (mount("/proc", proc, NULL, MS_BIND | MS_REC, NULL) != 0 || chroot(root) != 0)
			return -1;
		return chdir("/");
	}
	/* The /proc of the pid namespace this process is the first of. */
	if (mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0 ||
	    chdir(root) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 ||
	    umount2(".", MNT_DETACH) != 0)
		return -1;
	return chdir("/");
}

FILE *python_popen(const struct python *py, const char *const args[], bool quiet, pid_t *pid)
{
	int fds[2];
	cr_assert(pipe2(fds, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
	*pid = fork();
	cr_assert(*pid >= 0, "fork: %s", strerror(errno));
	if (*pid == 0) {
		const char *argv[64];
		size_t n = 0;
		argv[n++] = python_exec_path(py);
		for (; args[n - 1] && n < 63; n++)
			argv[n] = args[n - 1];
		argv[n] = NULL;
		/* A child the test gave up on must not live on. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int null = quiet ? open("/dev/null", O_WRONLY) : STDERR_FILENO;
		if (dup2(fds[1], STDOUT_FILENO) < 0 || null < 0 || dup2(null, STDERR_FILENO) < 0 ||
		    python_enter_root(py) != 0)
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(fds[1]);
	FILE *out = fdopen(fds[0], "r");
	cr_assert_not_null(out, "fdopen: %s", strerror(errno));
	return out;
}

int python_pclose(FILE *out, pid_t pid)
{
	fclose(out);
	int status = -1;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return status;
}

/*
 * What interpreters said of themselves, kept in the file named by
 * PYPROFD_PYTHONS_CACHE (`make test` names one in the build tree): every test
 * looks for the interpreters, and asking each of a dozen costs seconds on a
 * loaded machine.  An answer holds while the file it came from has the same
 * device, inode, size and modification time.
 */
#define PYTHONS_CACHE_MAX 64

struct pythons_cache {
	struct pythons_cache_entry {
		char path[PATH_MAX];
		unsigned long long dev, ino, size, mtime_ns;
		unsigned major, minor, build; /* 1: a debug build, 2: free-threaded */
	} entries[PYTHONS_CACHE_MAX];
	size_t n;
	bool changed;
};

/* The file's identity as the cache keys it; false when it cannot be read. */
static bool pythons_cache_key(const char *path, struct pythons_cache_entry *e)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return false;
	snprintf(e->path, sizeof e->path, "%s", path);
	e->dev = st.st_dev;
	e->ino = st.st_ino;
	e->size = (unsigned long long)st.st_size;
	e->mtime_ns = (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
	              (unsigned long long)st.st_mtim.tv_nsec;
	return true;
}

static void pythons_cache_load(struct pythons_cache *c)
{
	c->n = 0;
	c->changed = false;
	const char *file = getenv("PYPROFD_PYTHONS_CACHE");
	FILE *f = file && *file ? fopen(file, "r") : NULL;
	if (!f)
		return;
	struct pythons_cache_entry *e = &c->entries[0];
	/* Paths come last on their line: they hold no newline, and no other field a space. */
	while (c->n < PYTHONS_CACHE_MAX &&
	       fscanf(f, "%llu %llu %llu %llu %u %u %u %4095[^\n]", &e->dev, &e->ino, &e->size,
	              &e->mtime_ns, &e->major, &e->minor, &e->build, e->path) == 8)
		e = &c->entries[++c->n];
	fclose(f);
}

/* Written whole beside the file and renamed over it: a test reading it meanwhile sees one or the other. */
static void pythons_cache_save(const struct pythons_cache *c)
{
	const char *file = getenv("PYPROFD_PYTHONS_CACHE");
	char tmp[PATH_MAX + 32];
	if (!c->changed || !file || !*file ||
	    snprintf(tmp, sizeof tmp, "%s.%d", file, (int)getpid()) >= (int)sizeof tmp)
		return;
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	for (size_t i = 0; i < c->n; i++) {
		const struct pythons_cache_entry *e = &c->entries[i];
		fprintf(f, "%llu %llu %llu %llu %u %u %u %s\n", e->dev, e->ino, e->size, e->mtime_ns,
		        e->major, e->minor, e->build, e->path);
	}
	if (fclose(f) != 0 || rename(tmp, file) != 0)
		remove(tmp);
}

/* Asks the interpreter what it is; 0 on success. */
static int python_ask_version(struct python *py)
{
	static const char *const args[] = {
		"-c",
		"import sys, sysconfig; print(sys.version_info[0], sys.version_info[1], "
		"int(hasattr(sys, 'gettotalrefcount')) | 2 * int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))",
		NULL,
	};
	pid_t pid;
	FILE *out = python_popen(py, args, true, &pid);
	unsigned build = 0;
	int n = fscanf(out, "%u %u %u", &py->major, &py->minor, &build);
	int status = python_pclose(out, pid);
	py->debug = build & 1;
	py->free_threaded = build & 2;
	return n == 3 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* What the interpreter is, from the cache or asked (and then remembered); 0 on success. */
static int python_identify(struct python *py, struct pythons_cache *c)
{
	struct pythons_cache_entry key;
	if (!pythons_cache_key(py->path, &key))
		return -1;
	for (size_t i = 0; i < c->n; i++) {
		const struct pythons_cache_entry *e = &c->entries[i];
		if (strcmp(e->path, key.path) == 0 && e->dev == key.dev && e->ino == key.ino &&
		    e->size == key.size && e->mtime_ns == key.mtime_ns) {
			py->major = e->major;
			py->minor = e->minor;
			py->debug = e->build & 1;
			py->free_threaded = e->build & 2;
			return 0;
		}
	}
	if (python_ask_version(py) != 0)
		return -1;
	/* A changed file's old line is replaced, not added to. */
	size_t slot = c->n;
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->entries[i].path, key.path) == 0)
			slot = i;
	if (slot < PYTHONS_CACHE_MAX) {
		key.major = py->major;
		key.minor = py->minor;
		key.build = py->debug | (unsigned)py->free_threaded << 1;
		c->entries[slot] = key;
		c->n += slot == c->n;
		c->changed = true;
	}
	return 0;
}

/* Adds the interpreter at path; root_len bytes of it are the root it runs in. */
static void pythons_add(struct python *out, size_t max, size_t *n, const char *path,
                        size_t root_len, struct pythons_cache *c)
{
	char real[PATH_MAX];
	if (*n >= max || access(path, X_OK) != 0)
		return;
	/* Inside a root a link resolves against that root, not the host's: keep the path. */
	if (root_len)
		snprintf(real, sizeof real, "%s", path);
	else if (!realpath(path, real))
		return;
	/* Once each, by path and by file: a build installs python3.N and python3.Nt as one file. */
	struct stat st, other;
	bool known = !root_len && stat(real, &st) == 0;
	for (size_t i = 0; i < *n; i++)
		if (strcmp(out[i].path, real) == 0 ||
		    (known && !out[i].root_len && stat(out[i].path, &other) == 0 && other.st_dev == st.st_dev &&
		     other.st_ino == st.st_ino))
			return;
	struct python *py = &out[*n];
	memset(py, 0, sizeof *py);
	snprintf(py->path, sizeof py->path, "%s", real);
	py->root_len = root_len;
	if (python_identify(py, c) != 0)
		return;
	py->supported = py->major == 3 && py->minor >= 8 && py->minor <= 15;
	/*
	 * The sanitized run's choice, for CI's time: the first build of each
	 * version and kind (debug, free-threaded) reaches every layout the
	 * unwinder reads; another build of one (Debian's static 3.11, the
	 * root's 3.13 beside pyenv's) adds where symbols lie, which the plain
	 * run covers.
	 */
	const char *one = getenv("PYPROFD_TEST_ONE_PER_VERSION");
	if (one && strcmp(one, "1") == 0)
		for (size_t i = 0; i < *n; i++)
			if (out[i].major == py->major && out[i].minor == py->minor && out[i].debug == py->debug &&
			    out[i].free_threaded == py->free_threaded)
				return;
	(*n)++;
}

static void pythons_add_glob(struct python *out, size_t max, size_t *n, const char *pattern,
                             size_t root_len, struct pythons_cache *c)
{
	glob_t g;
	if (glob(pattern, 0, NULL, &g) != 0)
		return;
	for (size_t i = 0; i < g.gl_pathc; i++)
		pythons_add(out, max, n, g.gl_pathv[i], root_len, c);
	globfree(&g);
}

static void pyenv_root(char *buf, size_t len)
{
	const char *env = getenv("PYENV_ROOT");
	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return;
	}
	buf[0] = '\0';
	FILE *p = popen("pyenv root 2>/dev/null", "r");
	if (p) {
		if (fgets(buf, (int)len, p))
			buf[strcspn(buf, "\n")] = '\0';
		pclose(p);
	}
	if (!buf[0] && getenv("HOME"))
		snprintf(buf, len, "%s/.pyenv", getenv("HOME"));
}

/* Debian's python3.N and python3.Nd of the root `make pythons` built; only root can chroot. */
static void pythons_add_root(struct python *out, size_t max, size_t *n, struct pythons_cache *c)
{
	const char *env = getenv("PYPROFD_PYTHONS_ROOT");
	char root[PATH_MAX / 2], pattern[PATH_MAX];
	if (!env || !*env || geteuid() != 0 || !realpath(env, root) || strcmp(root, "/") == 0)
		return;
	snprintf(pattern, sizeof pattern, "%s/usr/bin/python3.*[0-9]", root);
	pythons_add_glob(out, max, n, pattern, strlen(root), c);
	snprintf(pattern, sizeof pattern, "%s/usr/bin/python3.*[0-9]d", root);
	pythons_add_glob(out, max, n, pattern, strlen(root), c);
}

size_t pythons_find(struct python *out, size_t max)
{
	size_t n = 0;
	char root[PATH_MAX / 2], pattern[PATH_MAX];
	/* Big (a path per entry): not for a test's stack. */
	struct pythons_cache *c = malloc(sizeof *c);
	cr_assert_not_null(c, "out of memory");
	pythons_cache_load(c);

	pyenv_root(root, sizeof root);
	snprintf(pattern, sizeof pattern, "%s/versions/*/bin/python[23].*[0-9]", root);
	pythons_add_glob(out, max, &n, pattern, 0, c);
	pythons_add_glob(out, max, &n, "/usr/bin/python3.*[0-9]", 0, c);
	/*
	 * Built by hand from CPython's sources (free-threaded, the next
	 * version), outside any clone; before the root's, whose newest stays
	 * the last found (the suites that take one interpreter take it).
	 */
	const char *built = getenv("PYPROFD_BUILT_PYTHONS");
	if (!built)
		built = PYTHONS_BUILT_DEFAULT;
	snprintf(pattern, sizeof pattern, "%s/py3*/bin/python3.*[0-9]", built);
	pythons_add_glob(out, max, &n, pattern, 0, c);
	snprintf(pattern, sizeof pattern, "%s/py3*/bin/python3.*[0-9]t", built);
	pythons_add_glob(out, max, &n, pattern, 0, c);
	pythons_add_root(out, max, &n, c);
	const char *extra = getenv("PYPROFD_TEST_PYTHONS");
	if (extra) {
		char *copy = strdup(extra), *save = NULL;
		for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save))
			pythons_add(out, max, &n, tok, 0, c);
		free(copy);
	}
	pythons_cache_save(c);
	free(c);
	return n;
}

size_t pythons_supported(struct python *out, size_t max)
{
	struct python all[PYTHONS_MAX];
	size_t n = pythons_find(all, PYTHONS_MAX), k = 0;
	for (size_t i = 0; i < n && k < max; i++)
		if (all[i].supported)
			out[k++] = all[i];
	cr_assert(k > 0, "no supported CPython (3.8-3.15) found: install one with pyenv "
	                 "or name one in PYPROFD_TEST_PYTHONS");
	return k;
}

struct python_param *python_params_of_minors(const unsigned *minors, size_t n)
{
	struct python all[PYTHONS_MAX];
	size_t found = pythons_find(all, PYTHONS_MAX);
	struct python_param *p = cr_malloc(sizeof *p * n);
	if (!p)
		abort();
	for (size_t i = 0; i < n; i++) {
		memset(&p[i], 0, sizeof p[i]);
		p[i].minor = minors[i];
		p[i].none = true;
		for (size_t k = 0; k < found && p[i].none; k++) {
			if (all[k].supported && all[k].minor == minors[i] && !all[k].debug && !all[k].free_threaded) {
				p[i].py = all[k];
				p[i].none = false;
			}
		}
	}
	return p;
}

void python_params_free(struct criterion_test_params *crp)
{
	cr_free(crp->params);
}
