/*
 * End-to-end tests of `pyprofd dump` against live interpreters.
 *
 * Each target (tests/targets/stacks.py) parks its threads at known places and
 * reports what CPython itself sees of their stacks; the dump, read from
 * outside, must agree with that report exactly, on every supported CPython
 * found on the machine.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "pythons.h"

TestSuite(dump, .init = helpers_init, .fini = helpers_fini);

/* The stacks.py scenarios in which every reported thread parks at a known line. */
static const char *const parked_scenarios[] = {
	"nested", "methods",   "generators", "coroutines", "lambdas",
	"recursion", "callbacks", "nonascii", "threads20",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* How often the spin test looks before deciding the flags are never set. */
#define SPIN_ATTEMPTS 10
#define SPIN_PAUSE_NS (50 * 1000 * 1000L)
/* Targets started by the exit race test, per interpreter; more, to the bound, while no dump has won. */
#define EXIT_ROUNDS 3
#define EXIT_ROUNDS_MAX 40
/* Offsets of the code-object bytes the corruption test overwrites. */
#define GARBAGE_OFFSET 8
#define GARBAGE_LEN 48

struct py_param {
	bool none; /* no supported interpreter was found: the test fails saying so */
	struct python py;
	char scenario[16];
};

/* ------------------------------------------------------------------------ */
/* Parameters: one per supported interpreter (and scenario).                 */

static void free_params(struct criterion_test_params *crp)
{
	cr_free(crp->params);
}

/* Which interpreters a parameterized test runs on. */
enum params_kind {
	PARAMS_FOUND = 1,     /* every supported one, as found */
	PARAMS_CONTAINED = 2, /* those with a root, run contained */
};

/* Parameters must live in criterion's shared arena: tests run in other processes. */
static struct criterion_test_params make_params_of(const char *const *scenarios,
                                                   size_t nscenarios, unsigned kinds)
{
	struct python all[PYTHONS_MAX];
	size_t n = pythons_find(all, PYTHONS_MAX), k = 0;
	size_t per = nscenarios ? nscenarios : 1;
	struct py_param *p = cr_malloc(sizeof *p * (2 * n * per + 1));
	if (!p)
		abort();
	for (unsigned kind = PARAMS_FOUND; kind <= PARAMS_CONTAINED; kind <<= 1) {
		for (size_t i = 0; i < n; i++) {
			if (!(kinds & kind) || !all[i].supported ||
			    (kind == PARAMS_CONTAINED && !all[i].root_len))
				continue;
			for (size_t j = 0; j < per; j++, k++) {
				memset(&p[k], 0, sizeof p[k]);
				p[k].py = all[i];
				p[k].py.contained = kind == PARAMS_CONTAINED;
				if (scenarios)
					snprintf(p[k].scenario, sizeof p[k].scenario, "%s", scenarios[j]);
			}
		}
	}
	if (k == 0) {
		memset(&p[0], 0, sizeof p[0]);
		p[0].none = true;
		k = 1;
	}
	return cr_make_param_array(struct py_param, p, k, free_params);
}

static struct criterion_test_params make_params(const char *const *scenarios, size_t nscenarios)
{
	return make_params_of(scenarios, nscenarios, PARAMS_FOUND);
}

/* Context for failure messages; fails the test if there was no interpreter at all. */
static void param_context(const struct py_param *p, char *buf, size_t len)
{
	if (p->none) {
		struct python unused[1];
		pythons_supported(unused, 1); /* fails, explaining what to install */
	}
	char py[PATH_MAX + 64];
	snprintf(buf, len, "Python %s%s%s", python_describe(&p->py, py, sizeof py),
	         p->scenario[0] ? ", scenario " : "", p->scenario);
}

/* ------------------------------------------------------------------------ */
/* Reading the JSON of the report and of the dump.                           */

static const char *str_of(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static json_int_t int_of(const json_t *obj, const char *key)
{
	return json_integer_value(json_object_get(obj, key));
}

static json_t *thread_by_id(const json_t *dump, json_int_t tid)
{
	size_t i;
	json_t *th;
	json_array_foreach(json_object_get(dump, "threads"), i, th)
		if (json_is_integer(json_object_get(th, "thread_id")) && int_of(th, "thread_id") == tid)
			return th;
	return NULL;
}

static json_t *thread_by_role(const json_t *report, const char *role)
{
	size_t i;
	json_t *th;
	json_array_foreach(json_object_get(report, "threads"), i, th)
		if (str_of(th, "role") && strcmp(str_of(th, "role"), role) == 0)
			return th;
	return NULL;
}

static bool is_kind(const json_t *frame, const char *kind)
{
	const char *k = str_of(frame, "kind");
	return k && strcmp(k, kind) == 0;
}

static void frame_text(const json_t *frame, char *buf, size_t len)
{
	char *s = json_dumps(frame, JSON_COMPACT | JSON_ENSURE_ASCII);
	snprintf(buf, len, "%s", s ? s : "(unprintable)");
	free(s);
}

/* "fn:line < fn:line < ...", shortened: enough to see where two stacks part. */
static void stack_text(json_t *const *frames, size_t n, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && used + 1 < len; i++) {
		const json_t *line = json_object_get(frames[i], "line");
		int w = snprintf(buf + used, len - used, "%s%s:%lld%s", i ? " < " : "",
		                 str_of(frames[i], "function") ? str_of(frames[i], "function") : "?",
		                 json_is_integer(line) ? (long long)json_integer_value(line) : -1LL,
		                 is_kind(frames[i], "python") || !json_object_get(frames[i], "kind")
		                         ? ""
		                         : "[marker]");
		if (w < 0)
			break;
		used += (size_t)w;
	}
	if (used + 1 >= len && len > 4)
		strcpy(buf + len - 4, "...");
}

/* Same function, qualname, file and line; json_equal makes null equal only null. */
static bool frame_equal(const json_t *want, const json_t *got)
{
	static const char *const keys[] = {"function", "qualname", "file", "line"};
	if (!is_kind(got, "python"))
		return false;
	for (size_t i = 0; i < COUNT(keys); i++) {
		json_t *w = json_object_get(want, keys[i]), *g = json_object_get(got, keys[i]);
		if (!w || !g || !json_equal(w, g))
			return false;
	}
	return true;
}

enum match_mode {
	MATCH_EXACT,       /* every dumped frame is a Python frame equal to the report's */
	MATCH_PYTHON_ONLY, /* the same once <native> markers and C frames are left out */
};

/* A C frame (--native, as root: test_native.c holds them to gdb's): a symbol, or an address, and its file. */
static bool c_frame_ok(const json_t *f)
{
	const char *fn = str_of(f, "function"), *file = str_of(f, "file");
	return is_kind(f, "c") && fn && *fn && file && *file && json_is_null(json_object_get(f, "line"));
}

/* A <native> marker as documented. */
static bool native_marker_ok(const json_t *f)
{
	const char *fn = str_of(f, "function");
	return is_kind(f, "native") && fn && strcmp(fn, "<native>") == 0 &&
	       json_is_null(json_object_get(f, "file")) && json_is_null(json_object_get(f, "line"));
}

static void compare_stack(const char *ctx, json_int_t tid, const json_t *want_frames,
                          const json_t *got_frames, enum match_mode mode, unsigned minor)
{
	size_t nwant = json_array_size(want_frames), ngot = json_array_size(got_frames);
	json_t **want = calloc(nwant + 1, sizeof *want), **got = calloc(ngot + 1, sizeof *got);
	cr_assert(want && got, "out of memory");
	size_t k = 0, markers = 0, c_frames = 0;
	for (size_t i = 0; i < nwant; i++)
		want[i] = json_array_get(want_frames, i);
	for (size_t i = 0; i < ngot; i++) {
		json_t *f = json_array_get(got_frames, i);
		if (mode == MATCH_PYTHON_ONLY && is_kind(f, "c")) {
			char t[512];
			frame_text(f, t, sizeof t);
			cr_expect(c_frame_ok(f), "%s: thread %lld frame %zu: bad C frame %s", ctx, (long long)tid, i, t);
			c_frames++;
			continue;
		}
		if (mode == MATCH_PYTHON_ONLY && !is_kind(f, "python")) {
			char t[512];
			frame_text(f, t, sizeof t);
			cr_expect(native_marker_ok(f), "%s: thread %lld frame %zu: bad marker %s", ctx,
			          (long long)tid, i, t);
			markers++;
			continue;
		}
		got[k++] = f;
	}
	/* With C frames, one mark may end them: a stack deeper than the kernel's copy. */
	if (mode == MATCH_PYTHON_ONLY && minor < 11)
		cr_expect(markers <= (c_frames ? 1u : 0u),
		          "%s: thread %lld: %zu <native> markers, but before 3.11 C frames between "
		          "Python frames cannot be detected, so none may appear but where C frames were cut",
		          ctx, (long long)tid, markers);

	char ws[2048], gs[2048];
	if (k != nwant) {
		stack_text(want, nwant, ws, sizeof ws);
		stack_text(got, k, gs, sizeof gs);
		cr_expect(false, "%s: thread %lld: %zu frames dumped, CPython sees %zu\n  want: %s\n  got:  %s",
		          ctx, (long long)tid, k, nwant, ws, gs);
	} else {
		for (size_t i = 0; i < nwant; i++) {
			if (frame_equal(want[i], got[i]))
				continue;
			frame_text(want[i], ws, sizeof ws);
			frame_text(got[i], gs, sizeof gs);
			cr_expect(false, "%s: thread %lld frame %zu (innermost 0) differs\n  want: %s\n  got:  %s",
			          ctx, (long long)tid, i, ws, gs);
			break;
		}
	}
	free(want);
	free(got);
}

/* The version the target reports itself; a pre-release may add a suffix to x.y.z. */
static void check_version(const char *ctx, const json_t *report, const json_t *dump)
{
	const char *want = str_of(report, "version"), *got = str_of(dump, "python_version");
	size_t n = want ? strlen(want) : 0;
	bool ok = want && got && strncmp(want, got, n) == 0 &&
	          (got[n] == '\0' || (got[n] >= 'a' && got[n] <= 'z') || got[n] == '+');
	cr_expect(ok, "%s: python_version is \"%s\", the target says %s", ctx, got ? got : "(none)",
	          want ? want : "?");
}

/*
 * The dump shows exactly the reported threads, by thread_id, each with the
 * reported native id and (unless it spins) the reported frames.
 */
static void check_dump(const char *ctx, const struct python *py, pid_t pid, const json_t *report,
                       const json_t *dump, enum match_mode mode)
{
	cr_expect(json_is_integer(json_object_get(dump, "pid")) && int_of(dump, "pid") == pid,
	          "%s: dump pid is not %d", ctx, (int)pid);
	check_version(ctx, report, dump);
	json_t *threads = json_object_get(report, "threads");
	size_t ndump = json_array_size(json_object_get(dump, "threads"));
	cr_expect(json_is_array(json_object_get(dump, "threads")) &&
	                  ndump == json_array_size(threads),
	          "%s: %zu threads dumped, the target has %zu", ctx, ndump, json_array_size(threads));
	size_t i;
	json_t *want;
	json_array_foreach(threads, i, want) {
		json_int_t tid = int_of(want, "thread_id");
		json_t *got = thread_by_id(dump, tid);
		cr_expect(got != NULL, "%s: thread %lld (threading.get_ident) missing from the dump",
		          ctx, (long long)tid);
		if (!got)
			continue;
		json_t *wn = json_object_get(want, "native_thread_id");
		json_t *gn = json_object_get(got, "native_thread_id");
		cr_expect(gn && json_equal(wn, gn),
		          "%s: thread %lld: native_thread_id %s%lld, threading.get_native_id() says %lld",
		          ctx, (long long)tid, json_is_integer(gn) ? "" : "(not an integer) ",
		          (long long)json_integer_value(gn), (long long)json_integer_value(wn));
		cr_expect(json_is_boolean(json_object_get(got, "gil")) &&
		                  json_is_boolean(json_object_get(got, "on_cpu")),
		          "%s: thread %lld: gil and on_cpu must be booleans", ctx, (long long)tid);
		const char *role = str_of(want, "role");
		if (role && strcmp(role, "spin") == 0)
			continue;
		compare_stack(ctx, tid, json_object_get(want, "frames"), json_object_get(got, "frames"),
		              mode, py->minor);
	}
}

/*
 * With --native on 3.11+, sorted() and functools.reduce() are C code between
 * the parked callback and the Python function that called them: a <native>
 * mark, or (a waiting thread, as root) the C frames themselves.
 */
static void check_callback_markers(const char *ctx, const json_t *report, const json_t *dump)
{
	size_t i, seen = 0;
	json_t *want;
	json_array_foreach(json_object_get(report, "threads"), i, want) {
		json_t *wf = json_object_get(want, "frames");
		const char *inner = str_of(json_array_get(wf, 0), "function");
		if (!inner || (strcmp(inner, "callbacks_key") != 0 &&
		               strcmp(inner, "callbacks_reducer") != 0))
			continue;
		seen++;
		json_t *got = thread_by_id(dump, int_of(want, "thread_id"));
		json_t *gf = json_object_get(got, "frames");
		const char *caller = str_of(json_array_get(wf, 1), "function");
		/* The callback's own waits in C, above it, are not what is checked. */
		size_t top = 0;
		while (is_kind(json_array_get(gf, top), "c"))
			top++;
		size_t c_between = 0;
		while (is_kind(json_array_get(gf, top + 1 + c_between), "c"))
			c_between++;
		json_t *g0 = json_array_get(gf, top), *g1 = json_array_get(gf, top + 1),
		       *g2 = json_array_get(gf, top + 1 + (c_between ? c_between : 1));
		bool ok = g0 && g1 && g2 && is_kind(g0, "python") && is_kind(g2, "python") &&
		          (c_between || native_marker_ok(g1)) && str_of(g0, "function") && str_of(g2, "function") &&
		          strcmp(str_of(g0, "function"), inner) == 0 && caller &&
		          strcmp(str_of(g2, "function"), caller) == 0;
		char gs[2048];
		json_t *frames[3] = {g0, g1, g2};
		stack_text(frames, g2 ? 3 : g1 ? 2 : g0 ? 1 : 0, gs, sizeof gs);
		cr_expect(ok, "%s: with --native a <native> frame must sit between %s and its caller %s; "
		              "innermost frames dumped: %s",
		          ctx, inner, caller ? caller : "?", gs);
	}
	cr_expect(seen == 2, "%s: the report lacks the sorted() and reduce() threads", ctx);
}

/* ------------------------------------------------------------------------ */
/* Stacks of parked threads, every scenario, every interpreter.              */

ParameterizedTestParameters(dump, frames)
{
	return make_params(parked_scenarios, COUNT(parked_scenarios));
}

ParameterizedTest(struct py_param *p, dump, frames)
{
	char ctx[PATH_MAX + 128], sub[PATH_MAX + 256];
	param_context(p, ctx, sizeof ctx);
	struct test_target t;
	test_target_start(&t, &p->py, p->scenario);
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);

	json_t *plain = dump_json(t.pid, (const char *const[]){"--json", NULL}, ctx);
	check_dump(ctx, &p->py, t.pid, report, plain, MATCH_EXACT);

	snprintf(sub, sizeof sub, "%s, --native", ctx);
	json_t *native = dump_json(t.pid, (const char *const[]){"--json", "--native", NULL}, sub);
	check_dump(sub, &p->py, t.pid, report, native, MATCH_PYTHON_ONLY);
	if (strcmp(p->scenario, "callbacks") == 0 && p->py.minor >= 11)
		check_callback_markers(sub, report, native);

	/* Nothing allocates in a parked target, so no collection can be under way. */
	snprintf(sub, sizeof sub, "%s, --gc", ctx);
	json_t *gc = dump_json(t.pid, (const char *const[]){"--json", "--gc", NULL}, sub);
	check_dump(sub, &p->py, t.pid, report, gc, MATCH_EXACT);

	json_decref(gc);
	json_decref(native);
	json_decref(plain);
	json_decref(report);
	test_target_kill(&t);
}

/* ------------------------------------------------------------------------ */
/* Text form.                                                               */

struct lines {
	char *text;
	char **line;
	size_t n;
};

/* Splits on '\n' keeping empty lines; the text is modified in place. */
static void lines_split(struct lines *l, char *text)
{
	size_t cap = 16;
	l->text = text;
	l->n = 0;
	l->line = malloc(cap * sizeof *l->line);
	cr_assert(l->line, "out of memory");
	for (char *s = text; *s;) {
		if (l->n == cap) {
			cap *= 2;
			l->line = realloc(l->line, cap * sizeof *l->line);
			cr_assert(l->line, "out of memory");
		}
		l->line[l->n++] = s;
		char *nl = strchr(s, '\n');
		if (!nl)
			break;
		*nl = '\0';
		s = nl + 1;
	}
}

/* Whether a header line holds `word` as a whole word; punctuation separates words. */
static bool has_word(const char *line, const char *word)
{
	static const char seps[] = " \t,;:()[]{}=<>\"'#/|";
	size_t wl = strlen(word);
	for (const char *s = line; *s;) {
		size_t skip = strspn(s, seps);
		s += skip;
		size_t n = strcspn(s, seps);
		if (n == wl && strncasecmp(s, word, n) == 0)
			return true;
		s += n;
	}
	return false;
}

/* The header of a thread: unindented, naming both its ids. */
static ssize_t find_header(const struct lines *l, json_int_t tid, json_int_t native_id)
{
	char dec[32], hex[32], nat[32];
	snprintf(dec, sizeof dec, "%lld", (long long)tid);
	snprintf(hex, sizeof hex, "%#llx", (unsigned long long)tid);
	snprintf(nat, sizeof nat, "%lld", (long long)native_id);
	for (size_t i = 0; i < l->n; i++)
		if (l->line[i][0] && l->line[i][0] != ' ' && l->line[i][0] != '\t' &&
		    (has_word(l->line[i], dec) || has_word(l->line[i], hex)) && has_word(l->line[i], nat))
			return (ssize_t)i;
	return -1;
}

static void check_text_thread(const char *ctx, const struct lines *l, const json_t *want)
{
	json_int_t tid = int_of(want, "thread_id");
	ssize_t h = find_header(l, tid, int_of(want, "native_thread_id"));
	cr_expect(h >= 0, "%s: no header line naming thread %lld and native id %lld", ctx,
	          (long long)tid, (long long)int_of(want, "native_thread_id"));
	if (h < 0)
		return;
	cr_expect(!has_word(l->line[h], "gil") && !has_word(l->line[h], "on-cpu"),
	          "%s: a parked thread's header says gil or on-cpu: \"%s\"", ctx, l->line[h]);
	json_t *frames = json_object_get(want, "frames");
	size_t i = 0, first = (size_t)h + 1;
	for (; first + i < l->n && strncmp(l->line[first + i], "    ", 4) == 0; i++) {
		const json_t *f = json_array_get(frames, i);
		if (!f)
			break;
		char expect[PATH_MAX + 512];
		/* The qualified name where the interpreter has one. */
		const char *name = str_of(f, "qualname") ? str_of(f, "qualname") : str_of(f, "function");
		snprintf(expect, sizeof expect, "    %s (%s:%lld)", name,
		         str_of(f, "file"), (long long)int_of(f, "line"));
		if (strcmp(expect, l->line[first + i]) != 0) {
			cr_expect(false, "%s: thread %lld frame line %zu\n  want: \"%s\"\n  got:  \"%s\"",
			          ctx, (long long)tid, i, expect, l->line[first + i]);
			return;
		}
	}
	size_t more = 0;
	while (first + i + more < l->n && strncmp(l->line[first + i + more], "    ", 4) == 0)
		more++;
	cr_expect(i == json_array_size(frames) && more == 0,
	          "%s: thread %lld: %zu frame lines, CPython sees %zu frames", ctx, (long long)tid,
	          i + more, json_array_size(frames));
}

ParameterizedTestParameters(dump, text)
{
	static const char *const scenarios[] = {"nested", "lambdas"};
	return make_params(scenarios, COUNT(scenarios));
}

ParameterizedTest(struct py_param *p, dump, text)
{
	char ctx[PATH_MAX + 128], why[1024];
	param_context(p, ctx, sizeof ctx);
	struct test_target t;
	test_target_start(&t, &p->py, p->scenario);
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);

	struct run_result r;
	run_dump(&r, t.pid, NULL, NULL);
	cr_assert(r.exited && r.code == 0, "%s: text dump failed: %s", ctx,
	          run_describe(&r, why, sizeof why));
	struct lines l;
	lines_split(&l, r.out);
	size_t i;
	json_t *want;
	json_array_foreach(json_object_get(report, "threads"), i, want)
		check_text_thread(ctx, &l, want);
	free(l.line);
	run_result_free(&r);
	json_decref(report);
	test_target_kill(&t);
}

/* ------------------------------------------------------------------------ */
/* gil and on_cpu.                                                          */

static bool flag(const json_t *th, const char *key)
{
	return json_is_true(json_object_get(th, key));
}

/* In a container too: the flags come from the host's /proc, which names threads otherwise. */
ParameterizedTestParameters(dump, spin)
{
	return make_params_of(NULL, 0, PARAMS_FOUND | PARAMS_CONTAINED);
}

ParameterizedTest(struct py_param *p, dump, spin)
{
	char ctx[PATH_MAX + 128], why[1024];
	param_context(p, ctx, sizeof ctx);
	struct test_target t;
	test_target_start(&t, &p->py, "spin");
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);
	json_int_t spin_id = int_of(thread_by_role(report, "spin"), "thread_id");
	json_int_t main_id = int_of(thread_by_role(report, "blocked"), "thread_id");

	/*
	 * The spinner may be caught descheduled or between GIL handoffs now and
	 * then, so a few looks are allowed; flags that are never set still fail.
	 */
	bool seen = false;
	bool last_gil = false, last_cpu = false;
	for (int attempt = 0; attempt < SPIN_ATTEMPTS && !seen; attempt++) {
		json_t *dump = dump_json(t.pid, (const char *const[]){"--json", NULL}, ctx);
		check_dump(ctx, &p->py, t.pid, report, dump, MATCH_EXACT);
		json_t *spin = thread_by_id(dump, spin_id), *sleeper = thread_by_id(dump, main_id);
		cr_assert(spin && sleeper, "%s: spinning or sleeping thread missing", ctx);
		/* A free-threaded build has no GIL: its spinning thread is on a CPU, holding nothing. */
		last_gil = flag(spin, "gil");
		last_cpu = flag(spin, "on_cpu");
		cr_expect(!p->py.free_threaded || !last_gil, "%s: a thread holds the GIL of a build without one", ctx);
		seen = (last_gil || p->py.free_threaded) && last_cpu;
		cr_expect(!flag(sleeper, "gil") && !flag(sleeper, "on_cpu"),
		          "%s: the sleeping main thread has gil=%d on_cpu=%d", ctx, flag(sleeper, "gil"),
		          flag(sleeper, "on_cpu"));
		json_decref(dump);
		if (!seen)
			nanosleep(&(struct timespec){.tv_nsec = SPIN_PAUSE_NS}, NULL);
	}
	cr_expect(seen, "%s: in %d dumps the spinning thread never had both gil and on_cpu "
	                "(last: gil=%d on_cpu=%d)",
	          ctx, SPIN_ATTEMPTS, last_gil, last_cpu);

	/* The text form shows the same flags as words in the thread's header. */
	json_int_t spin_native = int_of(thread_by_role(report, "spin"), "native_thread_id");
	json_int_t main_native = int_of(thread_by_role(report, "blocked"), "native_thread_id");
	seen = false;
	for (int attempt = 0; attempt < SPIN_ATTEMPTS && !seen; attempt++) {
		struct run_result r;
		run_dump(&r, t.pid, NULL, NULL);
		cr_assert(r.exited && r.code == 0, "%s: text dump failed: %s", ctx,
		          run_describe(&r, why, sizeof why));
		struct lines l;
		lines_split(&l, r.out);
		ssize_t hs = find_header(&l, spin_id, spin_native);
		ssize_t hm = find_header(&l, main_id, main_native);
		cr_assert(hs >= 0 && hm >= 0, "%s: text form lacks a thread header", ctx);
		seen = (has_word(l.line[hs], "gil") || p->py.free_threaded) && has_word(l.line[hs], "on-cpu");
		cr_expect(!has_word(l.line[hm], "gil") && !has_word(l.line[hm], "on-cpu"),
		          "%s: sleeping main thread's header: \"%s\"", ctx, l.line[hm]);
		if (!seen && attempt == SPIN_ATTEMPTS - 1)
			cr_expect(false, "%s: spinning thread's header never said gil and on-cpu: \"%s\"",
			          ctx, l.line[hs]);
		free(l.line);
		run_result_free(&r);
		if (!seen)
			nanosleep(&(struct timespec){.tv_nsec = SPIN_PAUSE_NS}, NULL);
	}
	json_decref(report);
	test_target_kill(&t);
}

/* ------------------------------------------------------------------------ */
/* Interpreters in roots and namespaces of their own.                        */

/*
 * A dump without the rights /proc/PID/map_files needs (CAP_SYS_ADMIN or
 * CAP_CHECKPOINT_RESTORE), as the hardened service runs: the mapped files
 * are then found by their paths.
 */
static json_t *dump_json_without_map_files(pid_t pid, const char *context)
{
	char pidstr[24], why[1024];
	snprintf(pidstr, sizeof pidstr, "%d", (int)pid);
	const char *argv[] = {"setpriv", "--bounding-set=-sys_admin,-checkpoint_restore",
	                      pyprofd_bin(), "dump", pidstr, "--json", NULL};
	struct run_result r;
	run_command(&r, argv, NULL);
	cr_assert(r.exited && !r.timed_out && r.code == 0, "%s: dump failed: %s", context,
	          run_describe(&r, why, sizeof why));
	json_error_t jerr;
	json_t *doc = json_loadb(r.out, r.out_len, 0, &jerr);
	cr_assert(json_is_object(doc), "%s: dump stdout is not a JSON object: %.300s", context,
	          r.out);
	run_result_free(&r);
	return doc;
}

/* The first interpreter with a root (chrooted), or NULL. */
static const struct python *rooted_python(struct python pys[PYTHONS_MAX])
{
	size_t n = pythons_find(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++)
		if (pys[i].supported && pys[i].root_len)
			return &pys[i];
	return NULL;
}

/* The last pid of "NSpid:" in /proc/PID/status: the process's pid in its own namespace. */
static long own_namespace_pid(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	long last = -1;
	while (fgets(line, sizeof line, f)) {
		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		char *tok, *save = NULL;
		for (tok = strtok_r(line + 6, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save))
			last = atol(tok);
	}
	fclose(f);
	return last;
}

static const char *const contained_scenarios[] = {"nested", "threads20", "coroutines"};

/*
 * Run as a container runs it: its own pid and mount namespaces, the root
 * pivoted to.  The test holds the interpreter's pid as the host numbers it,
 * while the interpreter reports its own; the dump reads it through its root
 * with map_files and without.
 */
ParameterizedTestParameters(dump, contained)
{
	return make_params_of(contained_scenarios, COUNT(contained_scenarios), PARAMS_CONTAINED);
}

ParameterizedTest(struct py_param *p, dump, contained)
{
	if (p->none)
		cr_skip_test("no interpreter with a root of its own: `make pythons` builds one");
	char ctx[PATH_MAX + 128], sub[PATH_MAX + 256];
	param_context(p, ctx, sizeof ctx);
	struct test_target t;
	test_target_start(&t, &p->py, p->scenario);
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);
	long inner = own_namespace_pid(t.pid);
	cr_assert(int_of(report, "pid") == inner && inner != t.pid,
	          "%s: the interpreter sees itself as %lld, its namespace pid is %ld, the test "
	          "holds %d: not the host's pid of a process in a namespace of its own",
	          ctx, (long long)int_of(report, "pid"), inner, (int)t.pid);

	json_t *dump = dump_json(t.pid, (const char *const[]){"--json", NULL}, ctx);
	check_dump(ctx, &p->py, t.pid, report, dump, MATCH_EXACT);
	json_decref(dump);
	snprintf(sub, sizeof sub, "%s, without map_files", ctx);
	dump = dump_json_without_map_files(t.pid, sub);
	check_dump(sub, &p->py, t.pid, report, dump, MATCH_EXACT);
	json_decref(dump);
	json_decref(report);
	test_target_kill(&t);
}

/*
 * A chrooted interpreter's maps name its files by the host's paths.  With
 * map_files, without (the path as it is), and with another file put where
 * the path under /proc/PID/root leads: the dump must take the mapped file
 * itself, which only its device and inode tell.
 */
Test(dump, chrooted_mapped_files)
{
	struct python pys[PYTHONS_MAX];
	const struct python *py = rooted_python(pys);
	if (!py)
		cr_skip_test("no interpreter with a root of its own: `make pythons` builds one");
	char ctx[PATH_MAX + 64], root[PATH_MAX];
	python_describe(py, ctx, sizeof ctx);
	python_root(py, root, sizeof root);
	struct test_target t;
	test_target_start(&t, py, "nested");
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);

	json_t *dump = dump_json(t.pid, (const char *const[]){"--json", NULL}, ctx);
	check_dump(ctx, py, t.pid, report, dump, MATCH_EXACT);
	json_decref(dump);
	dump = dump_json_without_map_files(t.pid, ctx);
	check_dump(ctx, py, t.pid, report, dump, MATCH_EXACT);
	json_decref(dump);

	/*
	 * The decoy: /proc/PID/root + the host's path is ROOT/ROOT/usr/bin/...,
	 * made in the target's own mount namespace on a tmpfs over the root's
	 * first directory of that path, so neither the host nor the cached root
	 * sees it.
	 */
	char first[2 * PATH_MAX], decoy[2 * PATH_MAX], dir[2 * PATH_MAX], pidstr[24];
	snprintf(first, sizeof first, "%s/%.*s", root, (int)strcspn(root + 1, "/"), root + 1);
	snprintf(decoy, sizeof decoy, "%s%s", root, py->path);
	snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(decoy, '/') - decoy), decoy);
	snprintf(pidstr, sizeof pidstr, "%d", (int)t.pid);
	struct stat st;
	cr_assert(stat(first, &st) == 0 && S_ISDIR(st.st_mode),
	          "%s: the root has no %s to hide a decoy under", ctx, first);
	const char *plant[] = {"nsenter", "-t", pidstr, "-m", "sh", "-c",
	                       "set -e; mount -t tmpfs decoy \"$1\"; mkdir -p \"$2\"; "
	                       "cp /bin/true \"$3\"",
	                       "sh", first, dir, decoy, NULL};
	struct run_result r;
	char why[1024];
	run_command(&r, plant, NULL);
	cr_assert(r.exited && r.code == 0, "%s: planting the decoy: %s", ctx,
	          run_describe(&r, why, sizeof why));
	run_result_free(&r);
	char sub[3 * PATH_MAX];
	snprintf(sub, sizeof sub, "%s, a decoy at /proc/PID/root%s", ctx, py->path);
	dump = dump_json_without_map_files(t.pid, sub);
	check_dump(sub, py, t.pid, report, dump, MATCH_EXACT);
	json_decref(dump);
	json_decref(report);
	test_target_kill(&t);
}

/* The plain case without map_files: the host's interpreter, by its path under /proc/PID/root. */
Test(dump, plain_without_map_files)
{
	struct python py;
	pythons_supported(&py, 1);
	char ctx[PATH_MAX + 64];
	python_describe(&py, ctx, sizeof ctx);
	struct test_target t;
	test_target_start(&t, &py, "nested");
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);
	json_t *dump = dump_json_without_map_files(t.pid, ctx);
	check_dump(ctx, &py, t.pid, report, dump, MATCH_EXACT);
	json_decref(dump);
	json_decref(report);
	test_target_kill(&t);
}

/* ------------------------------------------------------------------------ */
/* Garbage in the target.                                                   */

/* " --json --native", for messages. */
static void flags_text(const char *const flags[], char *buf, size_t len)
{
	buf[0] = '\0';
	for (size_t i = 0; flags[i]; i++) {
		strncat(buf, " ", len - strlen(buf) - 1);
		strncat(buf, flags[i], len - strlen(buf) - 1);
	}
}

static void stop_target(struct test_target *t)
{
	int status;
	cr_assert(kill(t->pid, SIGSTOP) == 0, "SIGSTOP: %s", strerror(errno));
	while (waitpid(t->pid, &status, WUNTRACED) < 0)
		cr_assert(errno == EINTR, "waitpid: %s", strerror(errno));
	cr_assert(WIFSTOPPED(status), "target did not stop (status %#x)", status);
}

ParameterizedTestParameters(dump, corrupt_code_object)
{
	return make_params(NULL, 0);
}

ParameterizedTest(struct py_param *p, dump, corrupt_code_object)
{
	char ctx[PATH_MAX + 128], sub[PATH_MAX + 256];
	param_context(p, ctx, sizeof ctx);
	struct test_target t;
	test_target_start(&t, &p->py, "nested");
	json_t *report = test_target_wait_report(&t, TARGET_READY_TIMEOUT_S);
	json_t *code_id = json_object_get(report, "code_id");
	cr_assert(json_is_integer(code_id), "report without code_id");
	uint64_t addr = (uint64_t)json_integer_value(code_id) + GARBAGE_OFFSET;

	/* Stopped, so nothing in the target repairs or trips over the garbage meanwhile. */
	stop_target(&t);
	unsigned char saved[GARBAGE_LEN], garbage[GARBAGE_LEN];
	memset(garbage, 0x41, sizeof garbage);
	cr_assert(target_mem_read(t.pid, addr, saved, sizeof saved) == (ssize_t)sizeof saved,
	          "process_vm_readv: %s", strerror(errno));
	cr_assert(target_mem_write(t.pid, addr, garbage, sizeof garbage) == (ssize_t)sizeof garbage,
	          "process_vm_writev: %s", strerror(errno));

	const char *const *const variants[] = {
		(const char *const[]){"--json", NULL},
		(const char *const[]){NULL},
		(const char *const[]){"--json", "--native", "--gc", NULL},
	};
	for (size_t i = 0; i < COUNT(variants); i++) {
		struct run_result r;
		char flags[64];
		flags_text(variants[i], flags, sizeof flags);
		snprintf(sub, sizeof sub, "%.*s, code object overwritten, dump%s", PATH_MAX + 128, ctx,
		         flags);
		run_dump(&r, t.pid, variants[i], &(struct run_opts){.timeout_s = 30.0});
		expect_clean_failure(&r, 8, sub);
		run_result_free(&r);
	}

	cr_assert(target_mem_write(t.pid, addr, saved, sizeof saved) == (ssize_t)sizeof saved,
	          "restoring the code object: %s", strerror(errno));
	cr_assert(kill(t.pid, SIGCONT) == 0, "SIGCONT: %s", strerror(errno));
	snprintf(sub, sizeof sub, "%s, code object restored", ctx);
	json_t *dump = dump_json(t.pid, (const char *const[]){"--json", NULL}, sub);
	check_dump(sub, &p->py, t.pid, report, dump, MATCH_EXACT);
	json_decref(dump);
	json_decref(report);
	test_target_kill(&t);
}

/* ------------------------------------------------------------------------ */
/* A target that exits while being dumped.                                  */

ParameterizedTestParameters(dump, exit_during_dump)
{
	return make_params(NULL, 0);
}

ParameterizedTest(struct py_param *p, dump, exit_during_dump)
{
	static const int allowed[] = {0, 3, 7};
	char ctx[PATH_MAX + 128], why[1024];
	param_context(p, ctx, sizeof ctx);
	unsigned counts[COUNT(allowed)] = {0};
	unsigned dumps = 0;

	/*
	 * A loaded host (a sanitized build, other suites) can make every dump of
	 * a round lose the race: rounds go on, to a bound, until one has won.
	 */
	int rounds = 0;
	for (; rounds < EXIT_ROUNDS || (counts[0] == 0 && rounds < EXIT_ROUNDS_MAX); rounds++) {
		struct test_target t;
		test_target_start(&t, &p->py, "exiting");
		json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
		/*
		 * Dump back to back until one runs after the target is reaped; the
		 * ones before race its exit, including while it is a zombie.
		 */
		for (bool gone = false; !gone;) {
			gone = test_target_exited(&t);
			struct run_result r;
			run_dump(&r, t.pid, (const char *const[]){"--json", "--native", NULL}, NULL);
			dumps++;
			cr_assert(r.exited && !r.timed_out, "%s: dump #%u %s", ctx, dumps,
			          run_describe(&r, why, sizeof why));
			if (gone) {
				/*
				 * Reaped: the pid names nobody now, or, where pids wrap
				 * at 32768 on a busy host, already a new process that is
				 * not Python (once it was this very dump).
				 */
				static const int after_reap[] = {3, 5};
				int k = expect_clean_failure_among(&r, after_reap, COUNT(after_reap), ctx);
				if (k == 0)
					counts[1]++;
			} else if (r.code == 0) {
				json_error_t jerr;
				json_t *doc = json_loadb(r.out, r.out_len, 0, &jerr);
				cr_expect(json_is_object(doc) &&
				                  json_is_array(json_object_get(doc, "threads")),
				          "%s: exit 0 without a JSON dump: %s", ctx, jerr.text);
				json_decref(doc);
				counts[0]++;
			} else {
				int k = expect_clean_failure_among(&r, allowed + 1, COUNT(allowed) - 1, ctx);
				if (k >= 0)
					counts[k + 1]++;
			}
			run_result_free(&r);
		}
	}
	cr_log_info("%s: %u dumps: %u ok, %u no such process, %u exited during the dump", ctx,
	            dumps, counts[0], counts[1], counts[2]);
	/*
	 * A free-threaded build runs the eight churning threads at once: a dump
	 * that reads each until it holds still outlasts the target's short life
	 * on a loaded host.  Every dump still ended cleanly (above).
	 */
	if (!p->py.free_threaded)
		cr_expect(counts[0] > 0, "%s: no dump of %d live targets succeeded (%u dumps)", ctx,
		          rounds, dumps);
}

/* ------------------------------------------------------------------------ */
/* Refusals.                                                                */

Test(dump, no_such_process)
{
	/* A pid that just died and was reaped: the kernel hands pids out in order. */
	pid_t pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0)
		_exit(0);
	cr_assert(waitpid(pid, NULL, 0) == pid, "waitpid: %s", strerror(errno));
	struct run_result r;
	run_dump(&r, pid, (const char *const[]){"--json", NULL}, NULL);
	expect_clean_failure(&r, 3, "dump of a pid nobody has");
	run_result_free(&r);
	run_dump(&r, pid, NULL, NULL);
	expect_clean_failure(&r, 3, "text dump of a pid nobody has");
	run_result_free(&r);
}

Test(dump, not_python)
{
	struct test_target t;
	test_target_start_argv(&t, (const char *const[]){"sleep", "100", NULL});
	struct run_result r;
	run_dump(&r, t.pid, (const char *const[]){"--json", NULL}, NULL);
	expect_clean_failure(&r, 5, "dump of `sleep 100`");
	run_result_free(&r);
	test_target_kill(&t);
}

Test(dump, permission_denied)
{
	if (geteuid() != 0)
		cr_skip_test("needs root, to run the dump as another user against a root target");
	struct passwd *pw = getpwnam("nobody");
	if (!pw)
		cr_skip_test("no user nobody");
	struct python py;
	pythons_supported(&py, 1);

	/* The build directory may be closed to nobody. */
	char copy[PATH_MAX];
	const char *bin = bin_for_others(pyprofd_bin(), copy, sizeof copy);

	struct test_target t;
	test_target_start(&t, &py, "nested");
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	struct run_opts opts = {
		.bin = bin, .drop_privileges = true, .uid = pw->pw_uid, .gid = pw->pw_gid};
	const char *const *const variants[] = {
		(const char *const[]){"--json", NULL},
		(const char *const[]){NULL},
	};
	for (size_t i = 0; i < COUNT(variants); i++) {
		struct run_result r;
		run_dump(&r, t.pid, variants[i], &opts);
		expect_clean_failure(&r, 4, i ? "text dump of a root process as nobody"
		                              : "dump of a root process as nobody");
		/* The cause, and what would let it through. */
		cr_expect(r.err && strstr(r.err, "another user's process") && strstr(r.err, "root") &&
		                  strstr(r.err, "CAP_SYS_PTRACE"),
		          "the refusal names no remedy: %s", r.err ? r.err : "");
		run_result_free(&r);
	}
	test_target_kill(&t);
}

/* Prints nothing the test needs; it only has to be a live interpreter, 2.7 included. */
static const char unsupported_target[] =
	"import os, sys, time\n"
	"path = sys.argv[1]\n"
	"f = open(path + '.tmp', 'w')\n"
	"f.write('{}')\n"
	"f.close()\n"
	"os.rename(path + '.tmp', path)\n"
	"while True:\n"
	"    time.sleep(3600)\n";

Test(dump, unsupported_version)
{
	struct python all[PYTHONS_MAX];
	size_t n = pythons_find(all, PYTHONS_MAX), tried = 0;
	for (size_t i = 0; i < n; i++) {
		if (all[i].supported)
			continue;
		char ctx[PATH_MAX + 64];
		snprintf(ctx, sizeof ctx, "dump of Python %u.%u (%.*s)", all[i].major, all[i].minor,
		         PATH_MAX, all[i].path);
		struct test_target t;
		test_target_start_python(&t, &all[i], (const char *const[]){"-E", "-s", "-c",
		                                                unsupported_target, "{report}", NULL});
		json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
		struct run_result r;
		run_dump(&r, t.pid, (const char *const[]){"--json", NULL}, NULL);
		expect_clean_failure(&r, 6, ctx);
		run_result_free(&r);
		test_target_kill(&t);
		tried++;
	}
	if (!tried)
		cr_skip_test("no unsupported interpreter (e.g. pyenv 2.7, 3.6, 3.7) installed");
}

Test(dump, usage)
{
	char self[24];
	snprintf(self, sizeof self, "%d", (int)getpid());
	const char *bin = pyprofd_bin();
	const char *const *const cases[] = {
		(const char *const[]){bin, "dump", NULL},
		(const char *const[]){bin, "dump", "notapid", NULL},
		(const char *const[]){bin, "dump", "12abc", NULL},
		(const char *const[]){bin, "dump", self, "--no-such-flag", NULL},
		(const char *const[]){bin, "dump", self, self, NULL},
	};
	for (size_t i = 0; i < COUNT(cases); i++) {
		char ctx[256] = "usage:";
		flags_text(cases[i] + 1, ctx + strlen(ctx), sizeof ctx - strlen(ctx));
		struct run_result r;
		run_command(&r, cases[i], NULL);
		expect_clean_failure(&r, 2, ctx);
		run_result_free(&r);
	}
}
