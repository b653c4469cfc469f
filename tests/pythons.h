/* Finding the real CPython interpreters the tests run against. */
#ifndef PYPROFD_TESTS_PYTHONS_H
#define PYPROFD_TESTS_PYTHONS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define PYTHONS_MAX 32

struct python {
	char path[PATH_MAX];
	unsigned major, minor;
	bool supported; /* 3.8 .. 3.15 */
};

/*
 * Every interpreter on the machine, once each (by real path): pyenv's versions
 * (PYENV_ROOT, else `pyenv root`, else ~/.pyenv), Debian's /usr/bin/python3.N,
 * and the colon-separated paths in PYPROFD_TEST_PYTHONS (e.g. a 3.14 built by
 * hand).  Versions are asked of the interpreter itself.  Returns the count.
 */
size_t pythons_find(struct python *out, size_t max);

/* Only the supported ones; fails the calling test when there are none. */
size_t pythons_supported(struct python *out, size_t max);

#endif
