/*
 * Attach rules: which processes the daemon profiles by itself, how, and
 * under which labels.  A rule is the KEY=VALUE settings an operator wrote,
 * in a config file's [rule.NAME] section or through `pyprofd-ctl rules
 * add`; both go through rule_set, so a setting means the same wherever it
 * was written.  The settings are kept as given, to be listed and written
 * back; what they mean is compiled next to them (a regex, a uid, ...).
 *
 * Matching is in two steps, because the Python version is known only once
 * the runtime is found: rules_match without a version says which rule may
 * claim a process, and again with the version which one does.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pyprofd.h"

#define RULE_NAME_MAX 64
#define RULE_SETTINGS_MAX 32

bool rule_name_ok(const char *name)
{
	size_t len = strlen(name);
	if (len == 0 || len > RULE_NAME_MAX)
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
}

void rule_init(struct rule *r)
{
	memset(r, 0, sizeof *r);
}

void rule_free(struct rule *r)
{
	labels_free(&r->settings);
	free(r->name);
	free(r->source);
	free(r->exe_glob);
	free(r->unit_glob);
	free(r->container);
	if (r->has_cmdline)
		regfree(&r->cmdline);
	labels_free(&r->labels);
	memset(r, 0, sizeof *r);
}

static bool rule_parse_bool(const char *text, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(text, yes[i]) == 0)
			return *out = true, true;
		if (strcasecmp(text, no[i]) == 0)
			return *out = false, true;
	}
	return false;
}

/*
 * ">=3.11", "3.12", "==3.12", "<3.13", ">3.8", "<=3.14", "!=3.9": major and
 * minor; a bare version means that minor series.
 */
static bool rule_parse_python(const char *text, struct rule_python *out)
{
	static const struct {
		const char *spelling;
		enum rule_python_op op;
	} ops[] = {{">=", RULE_PY_GE}, {"<=", RULE_PY_LE}, {"==", RULE_PY_EQ}, {"!=", RULE_PY_NE},
	           {">", RULE_PY_GT},  {"<", RULE_PY_LT},  {"=", RULE_PY_EQ}};
	out->op = RULE_PY_EQ;
	while (*text == ' ')
		text++;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
		if (strncmp(text, ops[i].spelling, strlen(ops[i].spelling)) == 0) {
			out->op = ops[i].op;
			text += strlen(ops[i].spelling);
			break;
		}
	while (*text == ' ')
		text++;
	unsigned major, minor;
	int used = 0;
	if (sscanf(text, "%3u.%3u%n", &major, &minor, &used) != 2 || text[used] != '\0' || major < 2 ||
	    major > 9)
		return false;
	out->version = major * 1000 + minor;
	return true;
}

/* "3.11.4" (what the unwinder reports) as major * 1000 + minor; 0 if it says nothing. */
static unsigned rule_version_of(const char *text)
{
	unsigned major, minor;
	if (!text || sscanf(text, "%3u.%3u", &major, &minor) != 2)
		return 0;
	return major * 1000 + minor;
}

static bool rule_python_holds(const struct rule_python *want, unsigned version)
{
	switch (want->op) {
	case RULE_PY_EQ: return version == want->version;
	case RULE_PY_NE: return version != want->version;
	case RULE_PY_GE: return version >= want->version;
	case RULE_PY_GT: return version > want->version;
	case RULE_PY_LE: return version <= want->version;
	case RULE_PY_LT: return version < want->version;
	}
	return false;
}

/* A glob fnmatch can use: it must compile, which fnmatch only says by failing later. */
static bool rule_glob_ok(const char *glob)
{
	if (!*glob || strlen(glob) > 256)
		return false;
	int depth = 0;
	for (const char *p = glob; *p; p++) {
		if (*p == '\\' && p[1])
			p++;
		else if (*p == '[')
			depth++;
		else if (*p == ']' && depth)
			depth--;
	}
	return depth == 0;
}

static int rule_set_string(char **field, const char *value)
{
	char *copy = strdup(value);
	if (!copy)
		return -1;
	free(*field);
	*field = copy;
	return 0;
}

/* The labels setting: "k=v, k=v", every entry valid. */
static int rule_set_labels(struct rule *r, const char *value, char *why, size_t why_len)
{
	struct proc_facts parsed = {0};
	if (proc_facts_parse_labels(value, &parsed) != 0) {
		proc_facts_free(&parsed);
		snprintf(why, why_len, "out of memory");
		return -1;
	}
	if (parsed.bad_labels) {
		proc_facts_free(&parsed);
		snprintf(why, why_len,
		         "labels are KEY=VALUE, separated by commas, at most %d (UTF-8; keys 1 to 128 "
		         "bytes without '=' or ','; values up to 1024)",
		         LABELS_GIVEN_MAX);
		return -1;
	}
	for (size_t i = 0; i < parsed.labels.n; i++)
		if (strcmp(parsed.labels.keys[i], "rule") == 0 || strcmp(parsed.labels.keys[i], "parent") == 0 ||
		    proc_facts_label_is_own(parsed.labels.keys[i])) {
			snprintf(why, why_len, "the label '%s' is %s to set", parsed.labels.keys[i],
			         proc_facts_label_is_own(parsed.labels.keys[i])
			             ? "the process's own (PYPROFD_LABELS), under '" LABELS_OWN_PREFIX "', for it alone"
			             : "the daemon's");
			proc_facts_free(&parsed);
			return -1;
		}
	labels_free(&r->labels);
	r->labels = parsed.labels;
	parsed.labels = (struct labels){0};
	proc_facts_free(&parsed);
	return 0;
}

/* What one setting means, compiled into r; 0, or -1 with why. */
static int rule_apply(struct rule *r, const char *key, const char *value, unsigned max_rate_hz,
                      char *why, size_t why_len)
{
	bool flag;
	if (strcmp(key, "match.exe") == 0) {
		if (!rule_glob_ok(value))
			return snprintf(why, why_len, "match.exe takes a glob ('%s' is not one)", value), -1;
		return rule_set_string(&r->exe_glob, value);
	}
	if (strcmp(key, "match.cmdline") == 0) {
		regex_t re;
		int rc = regcomp(&re, value, REG_EXTENDED | REG_NOSUB);
		if (rc != 0) {
			char msg[128];
			regerror(rc, &re, msg, sizeof msg);
			return snprintf(why, why_len, "match.cmdline: bad regular expression '%s': %s", value, msg), -1;
		}
		if (r->has_cmdline)
			regfree(&r->cmdline);
		r->cmdline = re;
		r->has_cmdline = true;
		return 0;
	}
	if (strcmp(key, "match.unit") == 0) {
		if (!rule_glob_ok(value))
			return snprintf(why, why_len, "match.unit takes a glob ('%s' is not one)", value), -1;
		return rule_set_string(&r->unit_glob, value);
	}
	if (strcmp(key, "match.container") == 0) {
		if (!*value || (strcmp(value, "*") != 0 && strspn(value, "0123456789abcdefABCDEF_.-") != strlen(value)))
			return snprintf(why, why_len, "match.container is '*' (any container) or a container id prefix"), -1;
		return rule_set_string(&r->container, value);
	}
	if (strcmp(key, "match.uid") == 0) {
		unsigned long uid;
		char *end;
		errno = 0;
		uid = strtoul(value, &end, 10);
		if (*value && *end == '\0' && !errno && uid < (1ul << 31)) {
			r->uid = (uid_t)uid;
		} else {
			struct passwd *pw = getpwnam(value);
			if (!pw)
				return snprintf(why, why_len, "match.uid: no user '%s'", value), -1;
			r->uid = pw->pw_uid;
		}
		r->has_uid = true;
		return 0;
	}
	if (strcmp(key, "match.python") == 0) {
		if (!rule_parse_python(value, &r->python))
			return snprintf(why, why_len,
			                "match.python takes a version such as 3.12 or >=3.11 (not '%s')", value),
			       -1;
		r->has_python = true;
		return 0;
	}
	if (strcmp(key, "rate") == 0) {
		unsigned long hz;
		char *end;
		errno = 0;
		hz = strtoul(value, &end, 10);
		if (end != value && (strcasecmp(end, "hz") == 0 || strcasecmp(end, " hz") == 0))
			end += strlen(end);
		if (end == value || *end || errno || hz == 0 || hz > max_rate_hz)
			return snprintf(why, why_len, "rate is 1 to %u (Hz; max_rate_hz)", max_rate_hz), -1;
		r->rate_hz = (unsigned)hz;
		return 0;
	}
	if (strcmp(key, "mode") == 0) {
		if (vocab_mode_parse(value, &r->mode) != 0)
			return snprintf(why, why_len, "mode is wall, cpu, gil or exception (not '%s')", value), -1;
		r->has_mode = true;
		return 0;
	}
	if (strcmp(key, "async") == 0) {
		if (!rule_parse_bool(value, &flag))
			return snprintf(why, why_len, "async is true or false (not '%s')", value), -1;
		/* async = true keeps an async_mode given first; false turns it off. */
		r->async_mode = !flag ? UW_ASYNC_OFF : r->async_mode ? r->async_mode : UW_ASYNC_RUNNING;
		return 0;
	}
	if (strcmp(key, "async_mode") == 0) {
		if (vocab_async_mode_parse(value, &r->async_mode) != 0)
			return snprintf(why, why_len, "async_mode is off, running or all (not '%s')", value), -1;
		return 0;
	}
	if (strcmp(key, "context") == 0)
		return context_spec_kind(&r->context, value, why, why_len);
	if (strcmp(key, "context_labels") == 0)
		return context_spec_labels(&r->context, value, why, why_len);
	if (strcmp(key, "labels") == 0)
		return rule_set_labels(r, value, why, why_len);
	if (strcmp(key, "children") == 0 || strcmp(key, "exclude") == 0 || strcmp(key, "native") == 0) {
		if (!rule_parse_bool(value, &flag))
			return snprintf(why, why_len, "%s is true or false (not '%s')", key, value), -1;
		*(strcmp(key, "children") == 0 ? &r->children : strcmp(key, "exclude") == 0 ? &r->exclude : &r->native) =
			flag;
		return 0;
	}
	snprintf(why, why_len,
	         "unknown setting '%s' (a rule takes match.exe, match.cmdline, match.unit, "
	         "match.container, match.uid, match.python, rate, mode, async, async_mode, context, "
	         "context_labels, labels, children, exclude, native)",
	         key);
	return -1;
}

int rule_set(struct rule *r, const char *key, const char *value, unsigned max_rate_hz, char *why,
             size_t why_len)
{
	snprintf(why, why_len, "out of memory");
	/*
	 * It is saved as the line "KEY=VALUE" (rules_write_one), the shortest a
	 * config file may hold it in, and must read back the same from there.
	 */
	size_t line_len = strlen(key) + 1 + strlen(value);
	if (line_len > CONFIG_LINE_MAX)
		return snprintf(why, why_len, "%s: KEY=VALUE is %zu characters, over the %d of a config file's line",
		                key, line_len, CONFIG_LINE_MAX),
		       -1;
	/* There, these start a comment. */
	for (const char *p = value; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return snprintf(why, why_len, "%s: the value holds a control character", key), -1;
		else if ((*p == '#' || *p == ';') && p > value && (p[-1] == ' ' || p[-1] == '\t'))
			return snprintf(why, why_len,
			                "%s: a blank then '%c' starts a comment in a config file (write [%c])", key,
			                *p, *p),
			       -1;
	if (rule_apply(r, key, value, max_rate_hz, why, why_len) != 0)
		return -1;
	/* Kept as written, the last of a repeated key in place of the first. */
	if (r->settings.n == RULE_SETTINGS_MAX && !labels_get(&r->settings, key))
		return snprintf(why, why_len, "a rule has at most %d settings", RULE_SETTINGS_MAX), -1;
	return labels_put(&r->settings, key, value);
}

int rule_finish(const struct rule *r, char *why, size_t why_len)
{
	if (!r->exe_glob && !r->has_cmdline && !r->unit_glob && !r->container && !r->has_uid &&
	    !r->has_python) {
		snprintf(why, why_len,
		         "rule '%s' matches nothing: give it at least one match.* setting", r->name);
		return -1;
	}
	return 0;
}

/* The base name of a path: what match.exe globs. */
static const char *rule_base_name(const char *path, size_t *len)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	*len = strlen(base);
	return base;
}

/*
 * match.exe: the program's base name as the kernel runs it (symlinks
 * resolved: a venv's python is the python3.x it links to) or as it was
 * started (argv[0]: the name a symlink gave it).
 */
static bool rule_exe_holds(const struct rule *r, const struct proc_facts *f)
{
	size_t len;
	if (f->exe[0] && fnmatch(r->exe_glob, rule_base_name(f->exe, &len), 0) == 0)
		return true;
	if (!f->cmdline || !f->cmdline[0])
		return false;
	/* argv[0] is the command line up to its first space (arguments were joined by spaces). */
	char argv0[4096];
	size_t n = strcspn(f->cmdline, " ");
	if (n >= sizeof argv0)
		return false;
	memcpy(argv0, f->cmdline, n);
	argv0[n] = '\0';
	return fnmatch(r->exe_glob, rule_base_name(argv0, &len), 0) == 0;
}

static bool rule_container_holds(const struct rule *r, const struct proc_facts *f)
{
	if (!f->container[0])
		return false;
	return strcmp(r->container, "*") == 0 ||
	       strncasecmp(f->container, r->container, strlen(r->container)) == 0;
}

/* Whether every match.* but the Python version holds. */
static bool rule_holds(const struct rule *r, const struct proc_facts *f)
{
	if (r->has_uid && f->uid != r->uid)
		return false;
	if (r->exe_glob && !rule_exe_holds(r, f))
		return false;
	if (r->unit_glob && (!f->unit[0] || fnmatch(r->unit_glob, f->unit, 0) != 0))
		return false;
	if (r->container && !rule_container_holds(r, f))
		return false;
	if (r->has_cmdline && regexec(&r->cmdline, f->cmdline ? f->cmdline : "", 0, NULL, 0) != 0)
		return false;
	return true;
}

const struct rule *rules_match(const struct rules *rs, const struct proc_facts *f,
                               const char *python_version)
{
	unsigned version = rule_version_of(python_version);
	for (size_t i = 0; i < rs->n; i++) {
		const struct rule *r = &rs->v[i];
		if (!rule_holds(r, f))
			continue;
		/* Not known yet: the rule may claim it, the version will tell. */
		if (!r->has_python || !python_version)
			return r;
		if (version && rule_python_holds(&r->python, version))
			return r;
	}
	return NULL;
}

const struct rule *rules_find(const struct rules *rs, const char *name)
{
	for (size_t i = 0; i < rs->n; i++)
		if (strcmp(rs->v[i].name, name) == 0)
			return &rs->v[i];
	return NULL;
}

int rules_append(struct rules *rs, struct rule *r)
{
	if (array_reserve((void **)&rs->v, &rs->cap, rs->n, sizeof *rs->v, NULL) != 0)
		return -1;
	rs->v[rs->n++] = *r;
	memset(r, 0, sizeof *r);
	return 0;
}

void rules_remove_at(struct rules *rs, size_t i)
{
	rule_free(&rs->v[i]);
	memmove(&rs->v[i], &rs->v[i + 1], (rs->n - i - 1) * sizeof *rs->v);
	rs->n--;
}

void rules_free(struct rules *rs)
{
	for (size_t i = 0; i < rs->n; i++)
		rule_free(&rs->v[i]);
	free(rs->v);
	memset(rs, 0, sizeof *rs);
}

/* One rule as the config file would have it. */
static void rules_write_one(FILE *out, const struct rule *r)
{
	fprintf(out, "\n[rule.%s]\n", r->name);
	for (size_t i = 0; i < r->settings.n; i++)
		fprintf(out, "%s=%s\n", r->settings.keys[i], r->settings.values[i]);
}

/* The file of RPC rules, with `skip` left out and `extra` at `at`; see rules_save_with. */
static int rules_save(const struct rules *rs, size_t at, const struct rule *extra, size_t skip,
                      const char *path, char *why, size_t why_len)
{
	char tmp[4096 + 16];
	if (snprintf(tmp, sizeof tmp, "%s.new", path) >= (int)sizeof tmp)
		return snprintf(why, why_len, "the rules file's path is too long"), -1;
	FILE *out = fopen(tmp, "we");
	if (!out)
		return snprintf(why, why_len, "cannot write %s: %s", tmp, strerror(errno)), -1;
	fprintf(out, "# The attach rules added with `pyprofd-ctl rules add`.  pyprofd rewrites this\n"
	             "# file; the rules of the config file come first and win a name.\n");
	for (size_t i = 0; i <= rs->n; i++) {
		if (extra && i == at)
			rules_write_one(out, extra);
		if (i < rs->n && i != skip && !(extra && i == at) && strcmp(rs->v[i].source, "rpc") == 0)
			rules_write_one(out, &rs->v[i]);
	}
	bool ok = fflush(out) == 0 && fsync(fileno(out)) == 0;
	int saved = errno;
	ok = fclose(out) == 0 && ok;
	if (!ok || rename(tmp, path) != 0) {
		if (ok)
			saved = errno;
		unlink(tmp);
		return snprintf(why, why_len, "cannot write %s: %s", path, strerror(saved)), -1;
	}
	/* The rename itself must reach the disk, or a crash may bring back the old rules. */
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash) {
		*slash = '\0';
		int fd = open(*dir ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	return 0;
}

int rules_save_with(const struct rules *rs, size_t at, const struct rule *extra, const char *path,
                    char *why, size_t why_len)
{
	return rules_save(rs, at, extra, (size_t)-1, path, why, why_len);
}

int rules_save_without(const struct rules *rs, size_t at, const char *path, char *why,
                       size_t why_len)
{
	return rules_save(rs, (size_t)-1, NULL, at, path, why, why_len);
}
