/*
 * Native frames of running threads (record --native): threads that never
 * wait, each calling into C on one line over and over
 * (tests/targets/cworkers.py), show the C frames they run under that line:
 * zlib's deflate under the line that compresses, the regular expression
 * engine under the line that matches, numpy's BLAS under the line that
 * multiplies.  The threads are shot as they run (kshot.c) or copied while
 * preempted (knative.c); either way every C frame stands under the Python
 * line that called into it, never another's.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(native_running, .init = helpers_init, .fini = helpers_fini);

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* Rounds of recording, each RUNNING_ROUND_S long, until every thread showed what it is about. */
#define RUNNING_ROUNDS 10
#define RUNNING_ROUND_S "2"

/*
 * What one work's samples must show: a C frame named `symbol` of a module
 * named `module*` under the work's line, and never under another; with no
 * symbol, any C frame of the module under the line.
 */
struct running_want {
	const char *work, *function, *symbol, *module;
	long line;
	bool seen;
};

/* A collapsed line's frames, outermost first, split in place at ';'. */
static size_t running_frames(char *stack, char **frames, size_t max)
{
	size_t n = 0;
	for (char *save = NULL, *f = strtok_r(stack, ";", &save); f && n < max; f = strtok_r(NULL, ";", &save))
		frames[n++] = f;
	return n;
}

/* A frame `name (file[:line])`: its name, its file's base name and its line (0: a C frame). */
static void running_frame(const char *frame, char *name, size_t name_len, char *base, size_t base_len,
                          long *line)
{
	const char *open = strstr(frame, " (");
	size_t n = open ? (size_t)(open - frame) : strlen(frame);
	snprintf(name, name_len, "%.*s", (int)(n < name_len ? n : name_len - 1), frame);
	*line = 0;
	base[0] = '\0';
	if (!open)
		return;
	const char *file = open + 2, *end = strrchr(file, ')');
	const char *slash = file, *s;
	for (s = file; end && s < end; s++)
		if (*s == '/')
			slash = s + 1;
	const char *colon = NULL;
	for (s = slash; end && s < end; s++)
		if (*s == ':')
			colon = s;
	if (colon && strstr(slash, ".py"))
		*line = strtol(colon + 1, NULL, 10);
	size_t len = (size_t)((colon ? colon : end ? end : file + strlen(file)) - slash);
	snprintf(base, base_len, "%.*s", (int)(len < base_len ? len : base_len - 1), slash);
}

/*
 * Checks each sample of the collapsed text against the works: a C frame
 * of a work's module must lie under that work's line, and marks each work
 * whose line has its symbol's frame above it.
 */
static void running_check(const char *ctx, const char *collapsed, struct running_want *wants, size_t nwants)
{
	char *copy = strdup(collapsed);
	for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *space = strrchr(line, ' ');
		if (!space)
			continue;
		*space = '\0';
		char *frames[512];
		size_t n = running_frames(line, frames, COUNT(frames));
		/* The innermost Python frame, and the C frames above it. */
		size_t py = n;
		char name[256], base[256], py_name[256] = "", py_base[256] = "";
		long at, py_line = 0;
		for (size_t i = n; i-- > 0 && py == n;) {
			running_frame(frames[i], name, sizeof name, base, sizeof base, &at);
			if (at > 0) {
				py = i;
				py_line = at;
				snprintf(py_name, sizeof py_name, "%s", name);
				snprintf(py_base, sizeof py_base, "%s", base);
			}
		}
		for (size_t w = 0; w < nwants; w++) {
			struct running_want *want = &wants[w];
			bool under_its_line = py < n && strcmp(py_name, want->function) == 0 && py_line == want->line;
			for (size_t i = py < n ? py + 1 : 0; i < n; i++) {
				running_frame(frames[i], name, sizeof name, base, sizeof base, &at);
				if (strncmp(base, want->module, strlen(want->module)) != 0 ||
				    (want->symbol && strcmp(name, want->symbol) != 0))
					continue;
				/* A symbol is the work's alone; a module without names may serve others too. */
				cr_assert(under_its_line || !want->symbol,
				          "%s: %s's C frame %s (%s) lies under %s (%s:%ld), not %s line %ld", ctx, want->work,
				          name, base, py_name, py_base, py_line, want->function, want->line);
				want->seen = want->seen || under_its_line;
			}
		}
	}
	free(copy);
}

/*
 * cworkers.py running works on py, recorded with --native until each
 * work's C frames showed and some sample was the shot of a running thread
 * (on a busy host most are copies of preempted ones).
 */
static void running_record(const struct python *py, const char *const *works, struct running_want *wants,
                           size_t nwants)
{
	char ctx[PATH_MAX + 64], script[PATH_MAX], pid[16];
	python_describe(py, ctx, sizeof ctx);
	target_script("cworkers.py", script, sizeof script);
	const char *args[8] = {"-I", script, "{report}"};
	size_t nargs = 3;
	for (size_t i = 0; works[i] && nargs < COUNT(args) - 1; i++)
		args[nargs++] = works[i];
	args[nargs] = NULL;
	struct test_target t;
	test_target_start_python(&t, py, args);
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);
	json_t *lines = json_object_get(report, "lines");
	for (size_t w = 0; w < nwants; w++) {
		wants[w].line = (long)json_integer_value(json_object_get(lines, wants[w].work));
		cr_assert_gt(wants[w].line, 0, "%s: the report gives no line for %s", ctx, wants[w].work);
	}
	snprintf(pid, sizeof pid, "%d", (int)t.pid);
	/* Threads found running are shot: on a busy host they must get to run. */
	test_favour_over_the_host(t.pid);
	const char *rec[] = {pyprofd_bin(), "record", pid, "--native", "--duration", RUNNING_ROUND_S,
	                     "--format", "collapsed", "--stats-json", NULL};
	long long shots = 0;
	bool all_seen = false;
	char last_stats[1024] = "";
	for (int round = 0; round < RUNNING_ROUNDS && !(all_seen && shots > 0); round++) {
		struct run_result r;
		run_command(&r, rec, NULL);
		cr_assert(r.exited && r.code == 0, "%s: record --native failed: %s", ctx, r.err);
		cr_assert(!strstr(r.err, "marks:"), "%s: C frames refused: %s", ctx, r.err);
		running_check(ctx, r.out, wants, nwants);
		/* --stats-json: the last line on stderr that is a JSON object. */
		const char *stats = NULL;
		for (const char *l = r.err; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
			if (*l == '{')
				stats = l;
		json_t *st = stats ? json_loads(stats, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
		cr_assert(st, "%s: record --stats-json printed no statistics: %s", ctx, r.err);
		shots += json_integer_value(json_object_get(st, "native_shot"));
		/* The counters of the C frames, for a failure to say where the samples went. */
		last_stats[0] = '\0';
		const char *key;
		json_t *value;
		json_object_foreach(st, key, value) if (strncmp(key, "native_", 7) == 0)
		{
			size_t at = strlen(last_stats);
			snprintf(last_stats + at, sizeof last_stats - at, " %s %lld", key,
			         (long long)json_integer_value(value));
		}
		json_decref(st);
		run_result_free(&r);
		all_seen = true;
		for (size_t w = 0; w < nwants; w++)
			all_seen = all_seen && wants[w].seen;
	}
	for (size_t w = 0; w < nwants; w++)
		cr_assert(wants[w].seen, "%s: no sample shows %s %s (%s*) under %s line %ld", ctx, wants[w].work,
		          wants[w].symbol ? wants[w].symbol : "a C frame", wants[w].module, wants[w].function,
		          wants[w].line);
	cr_assert_gt(shots, 0, "%s: no sample was the shot of a running thread; the last run's statistics: %s", ctx,
	             last_stats);
	json_decref(report);
	test_target_kill(&t);
}

static const unsigned running_minors[] = {12, 15};

ParameterizedTestParameters(native_running, zlib_and_re_show_their_c_frames_under_their_line)
{
	size_t n = COUNT(running_minors);
	return cr_make_param_array(struct python_param, python_params_of_minors(running_minors, n), n,
	                           python_params_free);
}

/*
 * 3.12 from pyenv (CFI; its libpython keeps its symbol table) and 3.15
 * from Debian (frame pointers; stripped, its debug symbols packaged apart:
 * the engine's static functions have no name there, as for gdb without
 * those packages, and are held to their module).
 */
ParameterizedTest(struct python_param *p, native_running, zlib_and_re_show_their_c_frames_under_their_line,
                  .timeout = 300)
{
	if (p->none)
		cr_skip_test("no Python 3.%u here", p->minor);
	if (p->py.root_len && geteuid() != 0)
		cr_skip_test("the Debian root's interpreters need root to chroot");
	bool named = !p->py.root_len;
	struct running_want wants[] = {
		{.work = "zlib", .function = "run_zlib", .symbol = "deflate", .module = "libz.so"},
		{.work = "re", .function = "run_re", .symbol = named ? "sre_ucs1_match" : NULL,
		 .module = named ? "libpython3" : "python3"},
	};
	static const char *const works[] = {"zlib", "re", NULL};
	running_record(&p->py, works, wants, COUNT(wants));
}

static const unsigned numpy_minors[] = {14};

ParameterizedTestParameters(native_running, numpy_shows_its_blas_under_the_line)
{
	size_t n = COUNT(numpy_minors);
	return cr_make_param_array(struct python_param, python_params_of_minors(numpy_minors, n), n,
	                           python_params_free);
}

/* Debian's numpy, for its default Python (3.14 in the root): a matrix product's time is in its BLAS. */
ParameterizedTest(struct python_param *p, native_running, numpy_shows_its_blas_under_the_line, .timeout = 300)
{
	if (p->none || !p->py.root_len)
		cr_skip_test("no Debian Python 3.%u here (make pythons)", p->minor);
	if (geteuid() != 0)
		cr_skip_test("the Debian root's interpreters need root to chroot");
	struct running_want wants[] = {
		{.work = "numpy", .function = "run_numpy", .symbol = "dgemm_", .module = "libblas.so"},
		{.work = "numpy", .function = "run_numpy", .symbol = NULL, .module = "_multiarray_umath"},
	};
	static const char *const works[] = {"numpy", NULL};
	running_record(&p->py, works, wants, COUNT(wants));
}

/* The first line of a command's output that starts with `prefix` (after blanks), its rest; NULL when none. */
static char *running_tool_line(const char *const argv[], const char *prefix)
{
	struct run_result r;
	run_command(&r, argv, NULL);
	char *found = NULL;
	for (char *save = NULL, *l = strtok_r(r.out ? r.out : "", "\n", &save); l && !found;
	     l = strtok_r(NULL, "\n", &save)) {
		l += strspn(l, " \t");
		if (strncmp(l, prefix, strlen(prefix)) == 0)
			found = strdup(l + strlen(prefix));
	}
	run_result_free(&r);
	return found;
}

/*
 * record --native --format json gives each C frame its address in its
 * module's file and the module's build id: libz's deflate is at the
 * address and of the build id binutils read of the file the target maps.
 */
Test(native_running, c_frames_carry_their_address_and_build_id, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = NULL;
	for (size_t i = 0; i < n && !py; i++)
		if (pys[i].minor >= 11 && !pys[i].root_len && !pys[i].debug && !pys[i].free_threaded)
			py = &pys[i];
	if (!py)
		cr_skip_test("no 3.11+ interpreter of the host's own");
	char script[PATH_MAX], pid[16], ctx[PATH_MAX + 64];
	python_describe(py, ctx, sizeof ctx);
	target_script("cworkers.py", script, sizeof script);
	const char *args[] = {"-I", script, "{report}", "zlib", NULL};
	struct test_target t;
	test_target_start_python(&t, py, args);
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	snprintf(pid, sizeof pid, "%d", (int)t.pid);
	const char *rec[] = {pyprofd_bin(), "record", pid, "--native", "--duration", RUNNING_ROUND_S, "--format", "json",
	                     NULL};
	const char *libz = NULL;
	json_int_t address = -1;
	char *build_id = NULL;
	for (int round = 0; round < RUNNING_ROUNDS && !libz; round++) {
		struct run_result r;
		run_command(&r, rec, NULL);
		cr_assert(r.exited && r.code == 0, "%s: record --native failed: %s", ctx, r.err);
		json_t *doc = json_loads(r.out, 0, NULL);
		cr_assert(doc, "%s: record --format json printed no JSON", ctx);
		size_t i;
		json_t *f;
		json_array_foreach(json_object_get(doc, "frames"), i, f) {
			const char *kind = json_string_value(json_object_get(f, "kind"));
			const char *name = json_string_value(json_object_get(f, "function"));
			const char *file = json_string_value(json_object_get(f, "file"));
			if (!kind || strcmp(kind, "c") != 0)
				continue;
			cr_assert(json_is_null(json_object_get(f, "line")), "%s: C frame %s has a line", ctx, name);
			cr_assert(json_is_integer(json_object_get(f, "address")), "%s: C frame %s has no address", ctx, name);
			if (!libz && name && strcmp(name, "deflate") == 0 && file && strstr(file, "libz.so")) {
				libz = strdup(file);
				address = json_integer_value(json_object_get(f, "address"));
				const char *id = json_string_value(json_object_get(f, "build_id"));
				build_id = id ? strdup(id) : NULL;
			}
		}
		json_decref(doc);
		run_result_free(&r);
	}
	cr_assert(libz, "%s: no sample shows libz's deflate", ctx);
	const char *notes[] = {"readelf", "-n", libz, NULL};
	char *want_id = running_tool_line(notes, "Build ID: ");
	cr_assert(want_id, "readelf found no build id in %s", libz);
	cr_assert(build_id && strcmp(build_id, want_id) == 0, "%s: libz's build id %s, readelf's %s", ctx,
	          build_id ? build_id : "none", want_id);
	/* deflate's own address, as its dynamic symbol gives it. */
	char line[256];
	const char *syms[] = {"sh", "-c", "nm -D --defined-only \"$1\" | grep ' deflate$'", "sh", libz, NULL};
	char *sym = running_tool_line(syms, "");
	cr_assert(sym, "nm found no deflate in %s", libz);
	snprintf(line, sizeof line, "%s", sym);
	cr_assert_eq(address, (json_int_t)strtoll(line, NULL, 16), "%s: deflate at 0x%llx, nm says %s", ctx,
	             (long long)address, line);
	free(sym);
	free(want_id);
	free(build_id);
	free((char *)libz);
	test_target_kill(&t);
}
