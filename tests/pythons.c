#include "pythons.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Asks the interpreter for its version; 0 on success. */
static int python_ask_version(const char *path, unsigned *major, unsigned *minor)
{
	char cmd[PATH_MAX + 128];
	snprintf(cmd, sizeof cmd,
	         "'%s' -c 'import sys; print(sys.version_info[0], sys.version_info[1])' 2>/dev/null",
	         path);
	FILE *p = popen(cmd, "r");
	if (!p)
		return -1;
	int n = fscanf(p, "%u %u", major, minor);
	int rc = pclose(p);
	return (n == 2 && rc == 0) ? 0 : -1;
}

static void pythons_add(struct python *out, size_t max, size_t *n, const char *path)
{
	char real[PATH_MAX];
	if (*n >= max || access(path, X_OK) != 0 || !realpath(path, real))
		return;
	for (size_t i = 0; i < *n; i++)
		if (strcmp(out[i].path, real) == 0)
			return;
	struct python *py = &out[*n];
	if (python_ask_version(real, &py->major, &py->minor) != 0)
		return;
	snprintf(py->path, sizeof py->path, "%s", real);
	py->supported = py->major == 3 && py->minor >= 8 && py->minor <= 15;
	(*n)++;
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

size_t pythons_find(struct python *out, size_t max)
{
	size_t n = 0;
	char root[PATH_MAX / 2], pattern[PATH_MAX];
	glob_t g;

	pyenv_root(root, sizeof root);
	snprintf(pattern, sizeof pattern, "%s/versions/*/bin/python[23].*[0-9]", root);
	if (glob(pattern, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			pythons_add(out, max, &n, g.gl_pathv[i]);
		globfree(&g);
	}
	if (glob("/usr/bin/python3.*[0-9]", 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			pythons_add(out, max, &n, g.gl_pathv[i]);
		globfree(&g);
	}
	const char *extra = getenv("PYPROFD_TEST_PYTHONS");
	if (extra) {
		char *copy = strdup(extra), *save = NULL;
		for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save))
			pythons_add(out, max, &n, tok);
		free(copy);
	}
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
