/*
 * speedscope files: their structure, and every one of them checked against
 * speedscope's own published schema, which must also refuse broken ones.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "export.h"
#include "profiles.h"
#include "helpers.h"
#include "profile.pb-c.h"


TestSuite(speedscope, .init = helpers_init, .fini = helpers_fini);

/* ---- speedscope ----------------------------------------------------------- */

Test(speedscope, speedscope_structure)
{
	struct out o;
	export_ok(&profile, EXPORT_SPEEDSCOPE, &o);
	json_t *doc = parse_json(&o);
	double sum;
	json_t *fr = check_speedscope(doc, &sum);
	/* Seconds: a sample weighs 1/rate_hz. */
	json_t *p = json_array_get(json_object_get(doc, "profiles"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(p, "unit")), "seconds");
	cr_expect(fabs(sum - (double)TOTAL / RATE) < 1e-9, "weights sum to %g", sum);
	/* The repeated handle frame is one shared frame. */
	cr_expect_eq(json_array_size(fr), COUNT(frames) - 1);
	bool saw_evil = false, saw_marker = false;
	for (size_t i = 0; i < json_array_size(fr); i++) {
		json_t *f = json_array_get(fr, i);
		const char *name = json_string_value(json_object_get(f, "name"));
		if (strcmp(name, EVIL_SCRIPT) == 0) {
			saw_evil = true;
			cr_expect_str_eq(json_string_value(json_object_get(f, "file")), "evil.py");
			cr_expect_eq(json_integer_value(json_object_get(f, "line")), 1);
		}
		if (strcmp(name, "<native>") == 0) {
			saw_marker = true;
			cr_expect_null(json_object_get(f, "file"), "a marker has no file");
			cr_expect_null(json_object_get(f, "line"), "a marker has no line");
		}
	}
	cr_expect(saw_evil && saw_marker);
	/* Root first: every sample starts at main; the fib stack ends in fib x3. */
	json_t *samples = json_object_get(p, "samples");
	bool saw_fib = false;
	for (size_t i = 0; i < json_array_size(samples); i++) {
		json_t *s = json_array_get(samples, i);
		json_t *root = json_array_get(fr, (size_t)json_integer_value(json_array_get(s, 0)));
		cr_expect_str_eq(json_string_value(json_object_get(root, "name")), "main");
		if (json_array_size(s) == 4) {
			const char *leaf = json_string_value(json_object_get(
				json_array_get(fr, (size_t)json_integer_value(json_array_get(s, 3))), "name"));
			saw_fib |= strcmp(leaf, "fib") == 0 &&
			           json_integer_value(json_array_get(s, 1)) ==
			                   json_integer_value(json_array_get(s, 3));
		}
	}
	cr_expect(saw_fib, "the recursive stack");
	cr_expect_eq(json_array_size(samples), COUNT(stacks) - 1, "the stack of no samples is left out");
	json_decref(doc);
	free(o.buf);
}

/* ---- speedscope against speedscope's schema -------------------------------- */

/*
 * speedscope publishes the JSON Schema of its file format (in its npm
 * package); it is not ours to copy into the tree, so make deps fetches it and
 * make test names it in PYPROFD_SPEEDSCOPE_SCHEMA.  Debian's python checks it,
 * being the one python3-jsonschema is installed for.  A missing schema or
 * validator fails the test: the check must not quietly stop happening.
 * Returns the validator's status: 0 valid, 1 invalid (reasons on stderr).
 */
static int validate_speedscope(const char *doc, size_t len, struct run_result *r)
{
	const char *schema = getenv("PYPROFD_SPEEDSCOPE_SCHEMA");
	const char *tests = getenv("PYPROFD_TESTS_DIR");
	cr_assert(schema && *schema && tests && *tests,
	          "PYPROFD_SPEEDSCOPE_SCHEMA or PYPROFD_TESTS_DIR is not set: run the suite with "
	          "`make test`");
	cr_assert(access(schema, R_OK) == 0, "speedscope's schema %s: %s (make deps fetches it)",
	          schema, strerror(errno));
	char dir[PATH_MAX], path[PATH_MAX + 32], script[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/speedscope.json", dir);
	snprintf(script, sizeof script, "%s/validate_json_schema.py", tests);
	scratch_write(path, doc, len);
	const char *argv[] = {"/usr/bin/python3", "-I", script, schema, path, NULL};
	struct run_opts opts = {.timeout_s = SCHEMA_TIMEOUT_S};
	run_command(r, argv, &opts);
	char why[2048];
	/* Anything else is a validator that did not get to judge (2: no jsonschema, bad input). */
	cr_assert(r->exited && (r->code == 0 || r->code == 1), "validate_json_schema.py: %s",
	          run_describe(r, why, sizeof why));
	return r->code;
}

/* The speedscope export of p passes speedscope's schema. */
static void expect_speedscope_schema(const struct export_profile *p, const char *what)
{
	struct out o;
	export_ok(p, EXPORT_SPEEDSCOPE, &o);
	struct run_result r;
	char why[2048];
	cr_expect_eq(validate_speedscope(o.buf, o.len, &r), 0,
	             "%s: speedscope's schema rejects our speedscope output: %s", what,
	             run_describe(&r, why, sizeof why));
	run_result_free(&r);
	free(o.buf);
}

Test(speedscope, speedscope_schema_plain)
{
	static const struct export_frame f[] = {
		{"main", "app.py", 1, UW_FRAME_PYTHON, 0, NULL},
		{"work", "app.py", 7, UW_FRAME_PYTHON, 0, NULL},
		{"sleep", "time.py", 30, UW_FRAME_PYTHON, 0, NULL},
	};
	static const uint32_t a[] = {0, 1}, b[] = {0, 1, 2}, c[] = {0};
	static const struct export_stack st[] = {{a, 2, 40, 0, 0, 0, 0, false}, {b, 3, 9, 0, 0, 0, 0, false}, {c, 1, 1, 0, 0, 0, 0, false}};
	struct export_profile p = empty;
	p.frames = f;
	p.nframes = COUNT(f);
	p.stacks = st;
	p.nstacks = COUNT(st);
	expect_speedscope_schema(&p, "a plain profile");
}

/* Markers, non-ASCII and hostile names, thread ids, a repeated frame, a stack of no samples. */
Test(speedscope, speedscope_schema_mixed)
{
	expect_speedscope_schema(&profile, "the mixed profile");
}

/*
 * Names that are not UTF-8 (stray continuation bytes, a cut sequence, an
 * overlong '/', an encoded surrogate, bytes past U+10FFFF), 4-byte characters,
 * controls, quotes and backslashes; an empty name and mode, for which the
 * writer makes up the names speedscope requires.
 */
Test(speedscope, speedscope_schema_unicode_and_bad_utf8)
{
	static const struct export_frame f[] = {
		{"bad\xff\xfe", "x\xc3.py", 1, UW_FRAME_PYTHON, 0, NULL},
		{"over\xc0\xaflong", "sur\xed\xa0\x80rogate.py", 2, UW_FRAME_PYTHON, 0, NULL},
		{"past\xf4\x90\x80\x80max", "\x80\x80.py", 3, UW_FRAME_PYTHON, 0, NULL},
		{"größe_λ_\xf0\x9f\x90\x8d", "ünï/\xe6\x97\xa5\xe6\x9c\xac.py", 4, UW_FRAME_PYTHON, 0, NULL},
		{"ctl\t\n\r\x01\x1f\x7f", "q\"u\\o'te.py", 5, UW_FRAME_PYTHON, 0, NULL},
		{"", "", -1, UW_FRAME_PYTHON, 0, NULL},
	};
	static const uint32_t a[] = {0, 1, 2}, b[] = {3, 4}, c[] = {3, 5};
	static const struct export_stack st[] = {{a, 3, 2, 7, 0, 0, 0, false}, {b, 2, 1, 7, 0, 0, 0, false}, {c, 2, 4, 8, 0, 0, 0, false}};
	struct export_profile p = empty;
	p.frames = f;
	p.nframes = COUNT(f);
	p.stacks = st;
	p.nstacks = COUNT(st);
	p.name = "n\x80\xc3";
	p.mode = "w\xffll";
	expect_speedscope_schema(&p, "bad UTF-8");
	p.name = "";
	p.mode = NULL;
	expect_speedscope_schema(&p, "no name and no mode");
	p.name = NULL;
	p.mode = "gil";
	expect_speedscope_schema(&p, "a NULL name");
}

/* Markers at the root, between Python frames and on top; thread ids of every size. */
Test(speedscope, speedscope_schema_markers_and_threads)
{
	static const struct export_frame f[] = {
		{"<native>", "", -1, UW_FRAME_NATIVE, 0, NULL},
		{"<GC>", "", -1, UW_FRAME_GC, 0, NULL},
		{"callback", "lib.py", 12, UW_FRAME_PYTHON, 0, NULL},
		{"<module>", "main.py", 0, UW_FRAME_PYTHON, 0, NULL},
	};
	static const uint32_t gc_only[] = {1}, native_root[] = {0, 2}, sandwich[] = {3, 0, 2, 1, 0, 0},
			      native_top[] = {3, 2, 0};
	static const struct export_stack st[] = {
		{gc_only, 1, 3, 0, 0, 0, 0, false},
		{native_root, 2, 1, 1, 0, 0, 0, false},
		{sandwich, 4, 2, UINT64_C(140079881370496), 0, 0, 0, false},
		{sandwich, 4, 5, UINT64_C(140079872977664), 0, 0, 0, false},
		{native_top, 3, 1, UINT64_MAX, 0, 0, 0, false},
		{native_top, 3, 6, (uint64_t)INT64_MAX, 0, 0, 0, false},
	};
	struct export_profile p = empty;
	p.frames = f;
	p.nframes = COUNT(f);
	p.stacks = st;
	p.nstacks = COUNT(st);
	p.mode = "gil";
	p.rate_hz = 1;
	expect_speedscope_schema(&p, "markers and thread ids");
}

/* Stacks with no samples are left out: some, all, and none to begin with. */
Test(speedscope, speedscope_schema_zero_counts)
{
	static const uint32_t a[] = {0, 1}, b[] = {0, 5, 5};
	static const struct export_stack st[] = {{a, 2, 0, 1, 0, 0, 0, false}, {b, 3, 0, 2, 0, 0, 0, false}, {a, 2, 0, 0, 0, 0, 0, false}};
	struct export_profile p = profile;
	p.stacks = st;
	p.nstacks = COUNT(st);
	expect_speedscope_schema(&p, "only stacks of no samples");
	expect_speedscope_schema(&empty, "an empty profile");
}

/* Deterministic, so a failure reproduces. */
static uint64_t lcg(uint64_t *s)
{
	*s = *s * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
	return *s >> 33;
}

/*
 * Thousands of frames and stacks, counts from 0 to 2^52 (weights far from
 * small numbers), a rate of 997 Hz (weights that are not round), the deepest
 * stack allowed, and line numbers up to INT32_MAX.
 */
Test(speedscope, speedscope_schema_large)
{
	enum { NFRAMES = 3000, NSTACKS = 4000, MAXDEPTH = 48 };
	struct export_frame *f = calloc(NFRAMES, sizeof *f);
	char(*names)[2][32] = calloc(NFRAMES, sizeof *names);
	struct export_stack *st = calloc(NSTACKS, sizeof *st);
	uint32_t *ids = calloc((size_t)NSTACKS * MAXDEPTH + EXPORT_MAX_DEPTH, sizeof *ids);
	cr_assert(f && names && st && ids);
	uint64_t seed = 42;
	for (uint32_t i = 0; i < NFRAMES; i++) {
		snprintf(names[i][0], sizeof names[i][0], i % 7 ? "fn_%u" : "fünc_λ_%u", i);
		snprintf(names[i][1], sizeof names[i][1], "pkg/mod_%u.py", i % 97);
		f[i] = (struct export_frame){names[i][0], names[i][1], (int32_t)(lcg(&seed) % 5000),
		                             UW_FRAME_PYTHON, 0, NULL};
	}
	f[1] = (struct export_frame){"<native>", "", -1, UW_FRAME_NATIVE, 0, NULL};
	f[2] = (struct export_frame){"<GC>", "", -1, UW_FRAME_GC, 0, NULL};
	f[3].line = INT32_MAX;
	f[4].line = -1;
	uint32_t *next = ids;
	for (uint32_t s = 0; s < NSTACKS; s++) {
		uint32_t depth = 1 + (uint32_t)(lcg(&seed) % MAXDEPTH);
		next[0] = 0;
		for (uint32_t d = 1; d < depth; d++)
			next[d] = (uint32_t)(lcg(&seed) % NFRAMES);
		uint64_t count = lcg(&seed) % 10 ? lcg(&seed) % 1000 : 0;
		st[s] = (struct export_stack){next, depth, count, lcg(&seed) << 20, 0, 0, 0, false};
		next += depth;
	}
	st[7].count = UINT64_C(1) << 52;
	for (uint32_t d = 0; d < EXPORT_MAX_DEPTH; d++)
		next[d] = d ? 5 : 0;
	st[NSTACKS - 1] = (struct export_stack){next, EXPORT_MAX_DEPTH, 3, 0, 0, 0, 0, false};
	struct export_profile p = profile;
	p.frames = f;
	p.nframes = NFRAMES;
	p.stacks = st;
	p.nstacks = NSTACKS;
	p.rate_hz = 997;
	expect_speedscope_schema(&p, "a large profile");
	free(ids);
	free(st);
	free(names);
	free(f);
}

/*
 * The control: documents that break the format in one place each are
 * rejected, for that reason, while the same document unbroken passes.
 * Without it a validator that accepts everything would pass every test above.
 */
static json_t *first_profile(json_t *doc)
{
	return json_array_get(json_object_get(doc, "profiles"), 0);
}

static void break_type(json_t *doc)
{
	cr_assert_eq(json_object_set_new(first_profile(doc), "type", json_string("sampling")), 0);
}

static void break_shared_frames(json_t *doc)
{
	cr_assert_eq(json_object_del(json_object_get(doc, "shared"), "frames"), 0);
}

static void break_frame_name(json_t *doc)
{
	json_t *fr = json_object_get(json_object_get(doc, "shared"), "frames");
	cr_assert_eq(json_object_del(json_array_get(fr, 0), "name"), 0);
}

static void break_weight(json_t *doc)
{
	json_t *w = json_object_get(first_profile(doc), "weights");
	cr_assert_eq(json_array_set_new(w, 0, json_string("0.05")), 0);
}

static void break_unit(json_t *doc)
{
	cr_assert_eq(json_object_set_new(first_profile(doc), "unit", json_string("ticks")), 0);
}

static void break_schema_url(json_t *doc)
{
	cr_assert_eq(json_object_set_new(doc, "$schema", json_string("https://example.com/s.json")), 0);
}

Test(speedscope, speedscope_schema_rejects_broken)
{
	static const struct {
		const char *what;
		void (*apply)(json_t *doc);
		const char *reason; /* what the validator must say */
	} cases[] = {
		{"type not sampled", break_type, "at /profiles/0/type: 'sampled' was expected"},
		{"shared.frames missing", break_shared_frames,
		 "at /shared: 'frames' is a required property"},
		{"a frame without a name", break_frame_name,
		 "at /shared/frames/0: 'name' is a required property"},
		{"a weight that is a string", break_weight,
		 "at /profiles/0/weights/0: '0.05' is not of type 'number'"},
		{"an unknown unit", break_unit, "at /profiles/0/unit: 'ticks' is not one of"},
		{"another $schema", break_schema_url, "at /$schema: "},
	};
	struct out o;
	export_ok(&profile, EXPORT_SPEEDSCOPE, &o);
	json_t *doc = parse_json(&o);
	struct run_result r;
	char why[2048];
	cr_assert_eq(validate_speedscope(o.buf, o.len, &r), 0, "the unbroken document: %s",
	             run_describe(&r, why, sizeof why));
	run_result_free(&r);
	for (size_t i = 0; i < COUNT(cases); i++) {
		json_t *broken = json_deep_copy(doc);
		cr_assert_not_null(broken);
		cases[i].apply(broken);
		char *text = json_dumps(broken, JSON_COMPACT);
		cr_assert_not_null(text);
		int code = validate_speedscope(text, strlen(text), &r);
		cr_expect_eq(code, 1, "%s: accepted by speedscope's schema", cases[i].what);
		cr_expect(code != 1 || strstr(r.err, cases[i].reason),
		          "%s: rejected, but not for \"%s\": %s", cases[i].what, cases[i].reason,
		          r.err);
		run_result_free(&r);
		free(text);
		json_decref(broken);
	}
	json_decref(doc);
	free(o.buf);
}

Test(speedscope, speedscope_one_profile_per_thread)
{
	expect_speedscope_schema(&threaded, "threads");
	struct out o;
	export_ok(&threaded, EXPORT_SPEEDSCOPE, &o);
	json_t *doc = parse_json(&o);
	double sum;
	check_speedscope(doc, &sum);
	cr_expect(fabs(sum - (double)THREADED_TOTAL / RATE) < 1e-9);
	json_t *profiles = json_object_get(doc, "profiles");
	cr_assert_eq(json_array_size(profiles), 3);
	/* Named after their threads, the busiest first: speedscope opens profile 0. */
	static const char *const names[] = {"MainThread (tid 42)", "worker-1 (tid 43)", "thread 140003"};
	static const double seconds[] = {0.07, 0.05, 0.03};
	for (size_t i = 0; i < 3; i++) {
		json_t *p = json_array_get(profiles, i);
		cr_expect_str_eq(json_string_value(json_object_get(p, "name")), names[i]);
		cr_expect(fabs(json_number_value(json_object_get(p, "endValue")) - seconds[i]) < 1e-9,
		          "%s", names[i]);
	}
	json_decref(doc);
	free(o.buf);
}
