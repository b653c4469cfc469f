/* Finding the real CPython interpreters the tests run against, and running them. */
#ifndef PYPROFD_TESTS_PYTHONS_H
#define PYPROFD_TESTS_PYTHONS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#define PYTHONS_MAX 32
/* Where builds of CPython's sources live (PYPROFD_BUILT_PYTHONS): bin/python3.N[t] in DIR/py3.N[t]. */
#define PYTHONS_BUILT_DEFAULT "/var/cache/pyprofd"

struct python {
	/* As this process sees it: under root_len bytes of root when it has one. */
	char path[PATH_MAX];
	/*
	 * The interpreter lives in a root of its own (the Debian sid root of
	 * `make pythons`): path starts with that root, and its processes run
	 * chrooted into it in a mount namespace of their own, the test files
	 * bound at the same paths inside.  0: the host's own interpreter.
	 */
	size_t root_len;
	/* Run also in a pid namespace of its own, the root pivoted to, as a container runs it. */
	bool contained;
	unsigned major, minor;
	bool debug;     /* a Py_DEBUG build (python3.15d) */
	bool free_threaded; /* built --disable-gil (python3.14t): no GIL, its own object layout */
	bool supported; /* 3.8 .. 3.15 */
};

/*
 * Every interpreter on the machine, once each (by real path): pyenv's versions
 * (PYENV_ROOT, else `pyenv root`, else ~/.pyenv), Debian's /usr/bin/python3.N,
 * the interpreters of the root named in PYPROFD_PYTHONS_ROOT (`make pythons`
 * builds it and `make test` names it; they need root to run), and the
 * colon-separated paths in PYPROFD_TEST_PYTHONS (e.g. a 3.14 built by hand).
 * Versions are asked of the interpreter itself.  Returns the count.
 */
size_t pythons_find(struct python *out, size_t max);

/* Only the supported ones; fails the calling test when there are none. */
size_t pythons_supported(struct python *out, size_t max);

/* A parameterised test's interpreter of one minor version; none when the machine has no such build. */
struct python_param {
	bool none;
	unsigned minor;
	struct python py;
};
/*
 * The parameters of a test run once per minor of minors (n of them): the
 * first release build (neither debug nor free-threaded) of each.  For
 * ParameterizedTestParameters: cr_make_param_array(struct python_param, p,
 * n, python_params_free).
 */
struct python_param *python_params_of_minors(const unsigned *minors, size_t n);
struct criterion_test_params;
void python_params_free(struct criterion_test_params *crp);

/* The interpreter's path as its own processes see it (inside its root). */
const char *python_exec_path(const struct python *py);

/* Its root ("" for the host's), into buf. */
const char *python_root(const struct python *py, char *buf, size_t len);

/* "3.15 (/path)", with "in its root" or "contained" said, for messages. */
const char *python_describe(const struct python *py, char *buf, size_t len);

/*
 * In a child about to exec py: a mount namespace of its own (private, so
 * nothing reaches the host's mount table and nothing needs undoing), the test
 * files (PYPROFD_TESTS_DIR, the scratch area) and /proc bound into the root
 * at their own paths, then chroot.  A contained python's child must be in its
 * new pid namespace already: it gets a /proc of its own and pivot_root
 * instead.  Nothing for a host interpreter.  0, or -1 with errno.
 */
int python_enter_root(const struct python *py);

/*
 * Starts `py args...` (args NULL-terminated, after argv[0]) with stdout to the
 * returned stream, and stderr to this process's (to /dev/null when quiet);
 * *pid is the child to wait for (python_pclose).  Fails the test when it
 * cannot start.
 */
FILE *python_popen(const struct python *py, const char *const args[], bool quiet, pid_t *pid);

/* Closes the stream and reaps the child; its wait status. */
int python_pclose(FILE *out, pid_t pid);

#endif
