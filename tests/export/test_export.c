/*
 * The export writers (client/export.h) on synthetic profiles.
 *
 * One profile has what real ones have and what breaks careless writers:
 * stacks sharing prefixes, recursion, <native> and <GC> markers, a frame
 * listed twice, an unknown line, a stack with no samples, non-ASCII names,
 * and names that attack each format (';' and a newline for collapsed lines,
 * "</script>" and "<!--<script>" for the flamegraph page).  Each format is
 * read back by something other than our code where one exists: protoc for
 * pprof, headless Chromium for the flamegraph, speedscope's own published
 * schema for speedscope (and jansson for the JSON ones).
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
#include "helpers.h"
#include "profile.pb-c.h"

TestSuite(export, .init = helpers_init, .fini = helpers_fini);

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Chromium starts in a second or two; a minute only catches a hang. */
#define CHROMIUM_TIMEOUT_S 60.0
#define PROTOC_TIMEOUT_S 30.0
/* jsonschema checks the largest document here in about a second; a minute only catches a hang. */
#define SCHEMA_TIMEOUT_S 60.0

#define EVIL_SCRIPT "</script><b id=\"pwned\">x</b>"
#define EVIL_COMMENT "<!--<script>"

static const struct export_frame frames[] = {
	/* 0 */ {"main", "app.py", 10, UW_FRAME_PYTHON},
	/* 1 */ {"serve", "server.py", 40, UW_FRAME_PYTHON},
	/* 2 */ {"handle", "server.py", 88, UW_FRAME_PYTHON},
	/* 3 */ {"parse", "json.py", -1, UW_FRAME_PYTHON},
	/* 4 */ {"<native>", "", -1, UW_FRAME_NATIVE},
	/* 5 */ {"fib", "fib.py", 3, UW_FRAME_PYTHON},
	/* 6 */ {"größe_λ", "ünï.py", 7, UW_FRAME_PYTHON},
	/* 7 */ {EVIL_SCRIPT, "evil.py", 1, UW_FRAME_PYTHON},
	/* 8 */ {"a;b\nc", "semi.py", 2, UW_FRAME_PYTHON},
	/* 9 */ {"<GC>", "", -1, UW_FRAME_GC},
	/* 10 */ {"handle", "server.py", 88, UW_FRAME_PYTHON}, /* frame 2 again */
	/* 11 */ {EVIL_COMMENT, "evil.py", 5, UW_FRAME_PYTHON},
};

static const uint32_t st0[] = {0, 1, 2}, st1[] = {0, 1, 2, 3}, st2[] = {0, 5, 5, 5},
		      st3[] = {0, 1, 10}, st4[] = {0, 4, 6}, st5[] = {0, 7}, st6[] = {0, 8, 9},
		      st7[] = {0, 1}, st8[] = {0, 11};

static const struct export_stack stacks[] = {
	{st0, 3, 5, 1},  {st1, 4, 3, 1}, {st2, 4, 4, 2}, {st3, 3, 2, 2}, {st4, 3, 1, 1},
	{st5, 2, 1, 0},  {st6, 3, 2, 1}, {st7, 2, 0, 1}, {st8, 2, 1, 0},
};

#define TOTAL 19 /* the counts above */
#define RATE 100

static const struct export_profile profile = {
	.frames = frames,
	.nframes = COUNT(frames),
	.stacks = stacks,
	.nstacks = COUNT(stacks),
	.name = "pid 4242 (service=api)",
	.mode = "cpu",
	.rate_hz = RATE,
	.from_unix = 1700000000.0,
	.until_unix = 1700000060.5,
};

static const struct export_profile empty = {
	.name = "idle",
	.mode = "wall",
	.rate_hz = 100,
	.from_unix = 1700000000.0,
	.until_unix = 1700000010.0,
};

static const enum export_format all_formats[] = {
	EXPORT_COLLAPSED, EXPORT_FLAMEGRAPH, EXPORT_SPEEDSCOPE, EXPORT_PPROF, EXPORT_JSON,
};

/* What a writer wrote, in memory. */
struct out {
	char *buf;
	size_t len;
};

/* export_write into memory; returns its result with errno kept. */
static int export_mem(const struct export_profile *p, enum export_format f, struct out *o)
{
	o->buf = NULL;
	o->len = 0;
	FILE *fp = open_memstream(&o->buf, &o->len);
	cr_assert_not_null(fp, "open_memstream: %s", strerror(errno));
	int r = export_write(p, f, fp);
	int e = errno;
	cr_assert_eq(fclose(fp), 0);
	errno = e;
	return r;
}

/* export_write that must succeed. */
static void export_ok(const struct export_profile *p, enum export_format f, struct out *o)
{
	int r = export_mem(p, f, o);
	cr_assert_eq(r, 0, "export_write(format %d): %s", f, strerror(errno));
}

static void scratch_write(const char *path, const void *data, size_t len)
{
	FILE *fp = fopen(path, "wb");
	cr_assert_not_null(fp, "%s: %s", path, strerror(errno));
	cr_assert_eq(fwrite(data, 1, len, fp), len);
	cr_assert_eq(fclose(fp), 0);
}

/* ---- collapsed ------------------------------------------------------------ */

static const char collapsed_expected[] =
	"main (app.py:10);" EVIL_COMMENT " (evil.py:5) 1\n"
	"main (app.py:10);" EVIL_SCRIPT " (evil.py:1) 1\n"
	"main (app.py:10);<native>;größe_λ (ünï.py:7) 1\n"
	"main (app.py:10);a\\x3bb\\x0ac (semi.py:2);<GC> 2\n"
	"main (app.py:10);fib (fib.py:3);fib (fib.py:3);fib (fib.py:3) 4\n"
	"main (app.py:10);serve (server.py:40);handle (server.py:88) 7\n"
	"main (app.py:10);serve (server.py:40);handle (server.py:88);parse (json.py) 3\n";

Test(export, collapsed_exact)
{
	struct out o;
	export_ok(&profile, EXPORT_COLLAPSED, &o);
	cr_expect_str_eq(o.buf, collapsed_expected);
	free(o.buf);
}

/* The same stacks in another order, and split differently, give the same bytes. */
Test(export, collapsed_deterministic)
{
	struct export_stack rev[COUNT(stacks) + 1];
	for (size_t i = 0; i < COUNT(stacks); i++)
		rev[i] = stacks[COUNT(stacks) - 1 - i];
	/* 5 of the 7 samples of serve;handle moved to a stack of their own. */
	rev[COUNT(stacks) - 1].count = 0;
	rev[COUNT(stacks)] = (struct export_stack){st0, 3, 5, 9};
	struct export_profile p = profile;
	p.stacks = rev;
	p.nstacks = COUNT(rev);
	struct out o;
	export_ok(&p, EXPORT_COLLAPSED, &o);
	cr_expect_str_eq(o.buf, collapsed_expected);
	free(o.buf);
}

Test(export, collapsed_escapes_backslash_and_controls)
{
	static const struct export_frame f[] = {
		{"x\\y", "dir\\f.py", 1, UW_FRAME_PYTHON},
		{"tab\there", "p;q\r.py", -1, UW_FRAME_PYTHON},
	};
	static const uint32_t s[] = {0, 1};
	static const struct export_stack st[] = {{s, 2, 3, 0}};
	struct export_profile p = empty;
	p.frames = f;
	p.nframes = 2;
	p.stacks = st;
	p.nstacks = 1;
	struct out o;
	export_ok(&p, EXPORT_COLLAPSED, &o);
	cr_expect_str_eq(o.buf, "x\\\\y (dir\\\\f.py:1);tab\\x09here (p\\x3bq\\x0d.py) 3\n");
	free(o.buf);
}

/* ---- json ----------------------------------------------------------------- */

static json_t *parse_json(const struct out *o)
{
	json_error_t err;
	json_t *doc = json_loadb(o->buf, o->len, 0, &err);
	cr_assert_not_null(doc, "not JSON: %s at %d:%d", err.text, err.line, err.column);
	return doc;
}

Test(export, json_is_the_profile)
{
	struct out o;
	export_ok(&profile, EXPORT_JSON, &o);
	json_t *doc = parse_json(&o);
	cr_expect_str_eq(json_string_value(json_object_get(doc, "name")), profile.name);
	cr_expect_str_eq(json_string_value(json_object_get(doc, "mode")), "cpu");
	cr_expect_eq(json_integer_value(json_object_get(doc, "rate_hz")), RATE);
	cr_expect_eq(json_number_value(json_object_get(doc, "from")), profile.from_unix);
	cr_expect_eq(json_number_value(json_object_get(doc, "until")), profile.until_unix);
	cr_expect_eq(json_integer_value(json_object_get(doc, "samples")), TOTAL);
	json_t *fr = json_object_get(doc, "frames"), *st = json_object_get(doc, "stacks");
	cr_assert_eq(json_array_size(fr), COUNT(frames));
	cr_assert_eq(json_array_size(st), COUNT(stacks));
	for (size_t i = 0; i < COUNT(frames); i++) {
		json_t *f = json_array_get(fr, i);
		cr_expect_str_eq(json_string_value(json_object_get(f, "function")), frames[i].function);
		cr_expect_str_eq(json_string_value(json_object_get(f, "file")), frames[i].file);
		json_t *line = json_object_get(f, "line");
		if (frames[i].line < 0)
			cr_expect(json_is_null(line), "frame %zu: line should be null", i);
		else
			cr_expect_eq(json_integer_value(line), frames[i].line);
	}
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(fr, 4), "kind")), "native");
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(fr, 9), "kind")), "gc");
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(fr, 0), "kind")), "python");
	long long sum = 0;
	for (size_t s = 0; s < COUNT(stacks); s++) {
		json_t *j = json_array_get(st, s), *ids = json_object_get(j, "frames");
		cr_assert_eq(json_array_size(ids), stacks[s].depth);
		for (size_t d = 0; d < stacks[s].depth; d++)
			cr_expect_eq(json_integer_value(json_array_get(ids, d)), stacks[s].frames[d]);
		cr_expect_eq(json_integer_value(json_object_get(j, "count")), (long long)stacks[s].count);
		cr_expect_eq(json_integer_value(json_object_get(j, "thread_id")),
		             (long long)stacks[s].thread_id);
		sum += json_integer_value(json_object_get(j, "count"));
	}
	cr_expect_eq(sum, TOTAL);
	json_decref(doc);
	free(o.buf);
}

/* Bytes that are not UTF-8 become U+FFFD rather than failing the JSON formats. */
Test(export, json_replaces_bad_utf8)
{
	static const struct export_frame f[] = {{"bad\xff\xfe", "x\xc3.py", 1, UW_FRAME_PYTHON}};
	static const uint32_t s[] = {0};
	static const struct export_stack st[] = {{s, 1, 2, 0}};
	struct export_profile p = empty;
	p.frames = f;
	p.nframes = 1;
	p.stacks = st;
	p.nstacks = 1;
	p.name = "n\x80";
	struct out o;
	export_ok(&p, EXPORT_JSON, &o);
	json_t *doc = parse_json(&o);
	json_t *f0 = json_array_get(json_object_get(doc, "frames"), 0);
	cr_expect_str_eq(json_string_value(json_object_get(f0, "function")),
	                 "bad\xef\xbf\xbd\xef\xbf\xbd");
	cr_expect_str_eq(json_string_value(json_object_get(f0, "file")), "x\xef\xbf\xbd.py");
	cr_expect_str_eq(json_string_value(json_object_get(doc, "name")), "n\xef\xbf\xbd");
	json_decref(doc);
	free(o.buf);
	for (size_t i = 0; i < COUNT(all_formats); i++) {
		export_ok(&p, all_formats[i], &o);
		free(o.buf);
	}
}

/* ---- speedscope ----------------------------------------------------------- */

/* A JSON number that is an integer (speedscope's schema says number; ours are indices). */
static bool is_index(json_t *v, size_t n)
{
	return json_is_integer(v) && json_integer_value(v) >= 0 && (size_t)json_integer_value(v) < n;
}

/*
 * What we promise of a speedscope file beyond its schema (which the tests
 * below hold it to): one sampled profile, our exporter, indices in range, one
 * weight per sample, weights summing to the range.  Returns the frames.
 */
static json_t *check_speedscope(json_t *doc, double *weight_sum)
{
	cr_assert(json_is_object(doc));
	cr_expect_str_eq(json_string_value(json_object_get(doc, "$schema")),
	                 "https://www.speedscope.app/file-format-schema.json");
	cr_expect_str_eq(json_string_value(json_object_get(doc, "exporter")), "pyprofd");
	cr_expect(json_is_string(json_object_get(doc, "name")));
	cr_expect(json_is_number(json_object_get(doc, "activeProfileIndex")));
	json_t *shared = json_object_get(doc, "shared");
	cr_assert(json_is_object(shared));
	json_t *fr = json_object_get(shared, "frames");
	cr_assert(json_is_array(fr));
	for (size_t i = 0; i < json_array_size(fr); i++) {
		json_t *f = json_array_get(fr, i), *file = json_object_get(f, "file"),
		       *line = json_object_get(f, "line");
		cr_assert(json_is_object(f));
		cr_expect(json_is_string(json_object_get(f, "name")), "frame %zu has no name", i);
		cr_expect(!file || json_is_string(file), "frame %zu: file not a string", i);
		cr_expect(!line || json_is_number(line), "frame %zu: line not a number", i);
	}
	json_t *profiles = json_object_get(doc, "profiles");
	cr_assert(json_is_array(profiles) && json_array_size(profiles) == 1);
	json_t *p = json_array_get(profiles, 0);
	cr_expect_str_eq(json_string_value(json_object_get(p, "type")), "sampled");
	cr_expect(json_is_string(json_object_get(p, "name")));
	static const char *const units[] = {"bytes", "microseconds", "milliseconds",
	                                    "nanoseconds", "none", "seconds"};
	const char *unit = json_string_value(json_object_get(p, "unit"));
	bool known = false;
	for (size_t i = 0; unit && i < COUNT(units); i++)
		known |= strcmp(unit, units[i]) == 0;
	cr_expect(known, "unit %s", unit ? unit : "(none)");
	cr_expect(json_is_number(json_object_get(p, "startValue")));
	cr_expect(json_is_number(json_object_get(p, "endValue")));
	json_t *samples = json_object_get(p, "samples"), *weights = json_object_get(p, "weights");
	cr_assert(json_is_array(samples) && json_is_array(weights));
	cr_assert_eq(json_array_size(samples), json_array_size(weights));
	*weight_sum = 0;
	for (size_t i = 0; i < json_array_size(samples); i++) {
		json_t *s = json_array_get(samples, i), *w = json_array_get(weights, i);
		cr_assert(json_is_array(s) && json_array_size(s) > 0);
		for (size_t d = 0; d < json_array_size(s); d++)
			cr_expect(is_index(json_array_get(s, d), json_array_size(fr)),
			          "sample %zu: frame %zu out of range", i, d);
		cr_assert(json_is_number(w));
		*weight_sum += json_number_value(w);
	}
	cr_expect(fabs(json_number_value(json_object_get(p, "endValue")) -
	               json_number_value(json_object_get(p, "startValue")) - *weight_sum) < 1e-9);
	return fr;
}

Test(export, speedscope_structure)
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

Test(export, speedscope_schema_plain)
{
	static const struct export_frame f[] = {
		{"main", "app.py", 1, UW_FRAME_PYTHON},
		{"work", "app.py", 7, UW_FRAME_PYTHON},
		{"sleep", "time.py", 30, UW_FRAME_PYTHON},
	};
	static const uint32_t a[] = {0, 1}, b[] = {0, 1, 2}, c[] = {0};
	static const struct export_stack st[] = {{a, 2, 40, 0}, {b, 3, 9, 0}, {c, 1, 1, 0}};
	struct export_profile p = empty;
	p.frames = f;
	p.nframes = COUNT(f);
	p.stacks = st;
	p.nstacks = COUNT(st);
	expect_speedscope_schema(&p, "a plain profile");
}

/* Markers, non-ASCII and hostile names, thread ids, a repeated frame, a stack of no samples. */
Test(export, speedscope_schema_mixed)
{
	expect_speedscope_schema(&profile, "the mixed profile");
}

/*
 * Names that are not UTF-8 (stray continuation bytes, a cut sequence, an
 * overlong '/', an encoded surrogate, bytes past U+10FFFF), 4-byte characters,
 * controls, quotes and backslashes; an empty name and mode, for which the
 * writer makes up the names speedscope requires.
 */
Test(export, speedscope_schema_unicode_and_bad_utf8)
{
	static const struct export_frame f[] = {
		{"bad\xff\xfe", "x\xc3.py", 1, UW_FRAME_PYTHON},
		{"over\xc0\xaflong", "sur\xed\xa0\x80rogate.py", 2, UW_FRAME_PYTHON},
		{"past\xf4\x90\x80\x80max", "\x80\x80.py", 3, UW_FRAME_PYTHON},
		{"größe_λ_\xf0\x9f\x90\x8d", "ünï/\xe6\x97\xa5\xe6\x9c\xac.py", 4, UW_FRAME_PYTHON},
		{"ctl\t\n\r\x01\x1f\x7f", "q\"u\\o'te.py", 5, UW_FRAME_PYTHON},
		{"", "", -1, UW_FRAME_PYTHON},
	};
	static const uint32_t a[] = {0, 1, 2}, b[] = {3, 4}, c[] = {3, 5};
	static const struct export_stack st[] = {{a, 3, 2, 7}, {b, 2, 1, 7}, {c, 2, 4, 8}};
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
Test(export, speedscope_schema_markers_and_threads)
{
	static const struct export_frame f[] = {
		{"<native>", "", -1, UW_FRAME_NATIVE},
		{"<GC>", "", -1, UW_FRAME_GC},
		{"callback", "lib.py", 12, UW_FRAME_PYTHON},
		{"<module>", "main.py", 0, UW_FRAME_PYTHON},
	};
	static const uint32_t gc_only[] = {1}, native_root[] = {0, 2}, sandwich[] = {3, 0, 2, 1},
			      native_top[] = {3, 2, 0};
	static const struct export_stack st[] = {
		{gc_only, 1, 3, 0},
		{native_root, 2, 1, 1},
		{sandwich, 4, 2, UINT64_C(140079881370496)},
		{sandwich, 4, 5, UINT64_C(140079872977664)},
		{native_top, 3, 1, UINT64_MAX},
		{native_top, 3, 6, (uint64_t)INT64_MAX},
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
Test(export, speedscope_schema_zero_counts)
{
	static const uint32_t a[] = {0, 1}, b[] = {0, 5, 5};
	static const struct export_stack st[] = {{a, 2, 0, 1}, {b, 3, 0, 2}, {a, 2, 0, 0}};
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
Test(export, speedscope_schema_large)
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
		                             UW_FRAME_PYTHON};
	}
	f[1] = (struct export_frame){"<native>", "", -1, UW_FRAME_NATIVE};
	f[2] = (struct export_frame){"<GC>", "", -1, UW_FRAME_GC};
	f[3].line = INT32_MAX;
	f[4].line = -1;
	uint32_t *next = ids;
	for (uint32_t s = 0; s < NSTACKS; s++) {
		uint32_t depth = 1 + (uint32_t)(lcg(&seed) % MAXDEPTH);
		next[0] = 0;
		for (uint32_t d = 1; d < depth; d++)
			next[d] = (uint32_t)(lcg(&seed) % NFRAMES);
		uint64_t count = lcg(&seed) % 10 ? lcg(&seed) % 1000 : 0;
		st[s] = (struct export_stack){next, depth, count, lcg(&seed) << 20};
		next += depth;
	}
	st[7].count = UINT64_C(1) << 52;
	for (uint32_t d = 0; d < EXPORT_MAX_DEPTH; d++)
		next[d] = d ? 5 : 0;
	st[NSTACKS - 1] = (struct export_stack){next, EXPORT_MAX_DEPTH, 3, 0};
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

Test(export, speedscope_schema_rejects_broken)
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

/* ---- pprof ---------------------------------------------------------------- */

/* The gunzipped bytes of a gzip stream. */
static uint8_t *gunzip(const struct out *o, size_t *len)
{
	cr_assert(o->len >= 2 && (uint8_t)o->buf[0] == 0x1f && (uint8_t)o->buf[1] == 0x8b,
	          "not gzip");
	z_stream z;
	memset(&z, 0, sizeof z);
	cr_assert_eq(inflateInit2(&z, 15 + 16), Z_OK);
	size_t cap = 4096, n = 0;
	uint8_t *buf = malloc(cap);
	cr_assert_not_null(buf);
	z.next_in = (Bytef *)o->buf;
	z.avail_in = (uInt)o->len;
	int r;
	do {
		if (n == cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			cr_assert_not_null(buf);
		}
		z.next_out = buf + n;
		z.avail_out = (uInt)(cap - n);
		r = inflate(&z, Z_NO_FLUSH);
		cr_assert(r == Z_OK || r == Z_STREAM_END, "inflate: %d", r);
		n = cap - z.avail_out;
	} while (r != Z_STREAM_END);
	cr_expect_eq(z.avail_in, 0, "bytes after the gzip stream");
	inflateEnd(&z);
	*len = n;
	return buf;
}

static const char *str_at(const Perftools__Profiles__Profile *p, int64_t i)
{
	cr_assert(i >= 0 && (size_t)i < p->n_string_table, "string index %lld", (long long)i);
	return p->string_table[i];
}

static const Perftools__Profiles__Location *location(const Perftools__Profiles__Profile *p,
                                                     uint64_t id)
{
	for (size_t i = 0; i < p->n_location; i++)
		if (p->location[i]->id == id)
			return p->location[i];
	cr_assert_fail("no location %llu", (unsigned long long)id);
	return NULL;
}

static const Perftools__Profiles__Function *function(const Perftools__Profiles__Profile *p,
                                                     uint64_t id)
{
	for (size_t i = 0; i < p->n_function; i++)
		if (p->function[i]->id == id)
			return p->function[i];
	cr_assert_fail("no function %llu", (unsigned long long)id);
	return NULL;
}

/* The function name of a location (with exactly one line). */
static const char *location_name(const Perftools__Profiles__Profile *p, uint64_t id)
{
	const Perftools__Profiles__Location *l = location(p, id);
	cr_assert_eq(l->n_line, 1);
	return str_at(p, function(p, l->line[0]->function_id)->name);
}

Test(export, pprof_decodes_with_protobuf_c)
{
	struct out o;
	export_ok(&profile, EXPORT_PPROF, &o);
	size_t len;
	uint8_t *raw = gunzip(&o, &len);
	Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(NULL, len, raw);
	cr_assert_not_null(p, "protobuf-c cannot decode the profile");

	cr_assert(p->n_string_table > 0);
	cr_expect_str_eq(p->string_table[0], "");
	cr_assert_eq(p->n_sample_type, 2);
	cr_expect_str_eq(str_at(p, p->sample_type[0]->type), "samples");
	cr_expect_str_eq(str_at(p, p->sample_type[0]->unit), "count");
	cr_expect_str_eq(str_at(p, p->sample_type[1]->type), "cpu");
	cr_expect_str_eq(str_at(p, p->sample_type[1]->unit), "nanoseconds");
	cr_assert_not_null(p->period_type);
	cr_expect_str_eq(str_at(p, p->period_type->type), "cpu");
	cr_expect_str_eq(str_at(p, p->period_type->unit), "nanoseconds");
	cr_expect_eq(p->period, 1000000000 / RATE);
	cr_expect_eq(p->time_nanos, 1700000000LL * 1000000000LL);
	cr_expect_eq(p->duration_nanos, 60500000000LL);

	/* Ids non-zero and unique; functions and locations as the view merges them. */
	cr_expect_eq(p->n_function, 11, "functions: (function, file) pairs");
	cr_expect_eq(p->n_location, COUNT(frames) - 1, "locations: distinct frames");
	for (size_t i = 0; i < p->n_function; i++) {
		cr_expect_neq(p->function[i]->id, 0);
		for (size_t j = 0; j < i; j++)
			cr_expect_neq(p->function[i]->id, p->function[j]->id);
	}
	for (size_t i = 0; i < p->n_location; i++) {
		cr_expect_neq(p->location[i]->id, 0);
		for (size_t j = 0; j < i; j++)
			cr_expect_neq(p->location[i]->id, p->location[j]->id);
		cr_assert_eq(p->location[i]->n_line, 1);
		function(p, p->location[i]->line[0]->function_id);
	}

	int64_t count = 0, ns = 0;
	bool saw_fib = false, saw_thread = false, saw_evil = false;
	cr_expect_eq(p->n_sample, COUNT(stacks) - 1);
	for (size_t i = 0; i < p->n_sample; i++) {
		const Perftools__Profiles__Sample *s = p->sample[i];
		cr_assert_eq(s->n_value, 2);
		cr_assert(s->n_location_id > 0);
		count += s->value[0];
		ns += s->value[1];
		cr_expect_eq(s->value[1], s->value[0] * (1000000000 / RATE));
		/* Leaf first: the root, main, is last. */
		cr_expect_str_eq(location_name(p, s->location_id[s->n_location_id - 1]), "main");
		const char *leaf = location_name(p, s->location_id[0]);
		if (s->n_location_id == 4 && strcmp(leaf, "fib") == 0)
			saw_fib = s->value[0] == 4;
		if (strcmp(leaf, "größe_λ") == 0)
			cr_expect_str_eq(location_name(p, s->location_id[1]), "<native>");
		if (strcmp(leaf, "parse") == 0) {
			cr_expect_str_eq(location_name(p, s->location_id[1]), "handle");
			cr_expect_eq(location(p, s->location_id[0])->line[0]->line, 0, "unknown line");
		}
		saw_evil |= strcmp(leaf, EVIL_SCRIPT) == 0;
		for (size_t l = 0; l < s->n_label; l++)
			if (strcmp(str_at(p, s->label[l]->key), "thread_id") == 0)
				saw_thread |= s->label[l]->num == 2;
	}
	cr_expect_eq(count, TOTAL);
	cr_expect_eq(ns, (int64_t)TOTAL * (1000000000 / RATE));
	cr_expect(saw_fib && saw_thread && saw_evil);
	perftools__profiles__profile__free_unpacked(p, NULL);
	free(raw);
	free(o.buf);
}

/* protoc's text dump of a pprof file; fails the test unless protoc decodes it. */
static char *protoc_decode(const struct out *o)
{
	const char *tests = getenv("PYPROFD_TESTS_DIR");
	cr_assert(tests && *tests, "PYPROFD_TESTS_DIR is not set: run the suite with `make test`");
	char dir[PATH_MAX], bin[PATH_MAX + 16], proto[PATH_MAX], cmd[4 * PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(bin, sizeof bin, "%s/profile.pb", dir);
	snprintf(proto, sizeof proto, "%s/../proto", tests);
	size_t len;
	uint8_t *raw = gunzip(o, &len);
	scratch_write(bin, raw, len);
	free(raw);
	snprintf(cmd, sizeof cmd,
	         "exec protoc --decode perftools.profiles.Profile -I'%s' '%s/profile.proto' < '%s'",
	         proto, proto, bin);
	const char *argv[] = {"sh", "-c", cmd, NULL};
	struct run_opts opts = {.timeout_s = PROTOC_TIMEOUT_S};
	struct run_result r;
	run_command(&r, argv, &opts);
	char why[512];
	cr_assert(r.exited && r.code == 0, "protoc --decode: %s", run_describe(&r, why, sizeof why));
	char *text = strdup(r.out);
	cr_assert_not_null(text);
	run_result_free(&r);
	return text;
}

Test(export, pprof_decodes_with_protoc)
{
	struct out o;
	export_ok(&profile, EXPORT_PPROF, &o);
	char *text = protoc_decode(&o);
	/* Values line up with sample_type: count, then nanoseconds. */
	long long count = 0, ns = 0;
	int samples = 0, value_index = 0;
	bool in_sample = false;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		long long n;
		if (strcmp(line, "sample {") == 0) {
			in_sample = true;
			value_index = 0;
			samples++;
		} else if (strcmp(line, "}") == 0) {
			in_sample = false;
		} else if (in_sample && sscanf(line, "  value: %lld", &n) == 1) {
			if (value_index++ == 0)
				count += n;
			else
				ns += n;
		}
	}
	free(text);
	text = protoc_decode(&o);
	cr_expect_eq(samples, (int)COUNT(stacks) - 1);
	cr_expect_eq(count, TOTAL);
	cr_expect_eq(ns, TOTAL * (1000000000LL / RATE));
	/* protoc prints strings C-escaped: a newline as \n, quotes as \". */
	static const char *const names[] = {
		"string_table: \"\"\n", "string_table: \"main\"\n", "string_table: \"handle\"\n",
		"string_table: \"fib\"\n", "string_table: \"a;b\\nc\"\n",
		"string_table: \"</script><b id=\\\"pwned\\\">x</b>\"\n",
		"string_table: \"samples\"\n", "string_table: \"cpu\"\n",
		"string_table: \"nanoseconds\"\n", "period: 10000000\n",
		"time_nanos: 1700000000000000000\n", "duration_nanos: 60500000000\n",
	};
	for (size_t i = 0; i < COUNT(names); i++)
		cr_expect(strstr(text, names[i]), "protoc output lacks %s", names[i]);
	cr_expect(strncmp(text, "sample_type {", 13) == 0, "starts: %.40s", text);
	free(text);
	free(o.buf);
}

/* ---- flamegraph ----------------------------------------------------------- */

/* The DOM of an HTML page after its scripts ran, as headless Chromium dumps it. */
static char *render_dom(const struct out *o)
{
	char dir[PATH_MAX], page[PATH_MAX + 16], url[PATH_MAX + 32], profile_dir[PATH_MAX + 32];
	scratch_dir(dir, sizeof dir);
	snprintf(page, sizeof page, "%s/flame.html", dir);
	snprintf(url, sizeof url, "file://%s", page);
	/* Its own profile directory: HOME may not be writable, and runs must not share state. */
	snprintf(profile_dir, sizeof profile_dir, "--user-data-dir=%s/chromium", dir);
	scratch_write(page, o->buf, o->len);
	/* Root needs --no-sandbox; a container's small /dev/shm must not matter. */
	const char *argv[] = {"chromium",       "--headless",  "--no-sandbox",
	                      "--disable-gpu",  "--no-first-run", "--disable-dev-shm-usage",
	                      profile_dir,      "--dump-dom",  url, NULL};
	struct run_opts opts = {.timeout_s = CHROMIUM_TIMEOUT_S};
	struct run_result r;
	run_command(&r, argv, &opts);
	char why[2048];
	cr_assert(r.exited && r.code == 0 && r.out_len > 0, "chromium --dump-dom: %s",
	          run_describe(&r, why, sizeof why));
	char *dom = strdup(r.out);
	cr_assert_not_null(dom);
	run_result_free(&r);
	return dom;
}

Test(export, flamegraph_renders_in_chromium)
{
	struct out o;
	export_ok(&profile, EXPORT_FLAMEGRAPH, &o);
	/* Self-contained: nothing fetched from anywhere. */
	cr_expect_null(strstr(o.buf, "http://"));
	cr_expect_null(strstr(o.buf, "https://"));
	cr_expect_null(strstr(o.buf, "src="));
	cr_expect_null(strstr(o.buf, "@import"));
	char *dom = render_dom(&o);
	/* Each frame is a div whose text is the function's name. */
	static const char *const names[] = {
		">all<",        ">main<",          ">serve<",
		">handle<",     ">parse<",         ">fib<",
		">größe_λ<",    ">&lt;native&gt;<", ">&lt;GC&gt;<",
		">a;b\nc<",     ">&lt;/script&gt;&lt;b id=\"pwned\"&gt;x&lt;/b&gt;<",
		">&lt;!--&lt;script&gt;<",
	};
	for (size_t i = 0; i < COUNT(names); i++)
		cr_expect(strstr(dom, names[i]), "rendered DOM lacks %s", names[i]);
	/* The hostile names stayed text: no element of theirs, and the script ran to the end. */
	cr_expect_null(strstr(dom, "<b id=\"pwned\">"), "a function name became markup");
	cr_expect(strstr(dom, "frames drawn"), "the script did not finish drawing");
	cr_expect(strstr(dom, "<title>pid 4242 (service=api) \xe2\x80\x94 cpu samples, "
	                      "2023-11-14 22:13:20 UTC to 2023-11-14 22:14:20 UTC</title>"),
	          "title with name, mode and time range");
	cr_expect(strstr(dom, "19 samples at 100 Hz"));
	free(dom);
	free(o.buf);
}

Test(export, flamegraph_empty_renders)
{
	struct out o;
	export_ok(&empty, EXPORT_FLAMEGRAPH, &o);
	char *dom = render_dom(&o);
	cr_expect(strstr(dom, "No samples in this profile."), "empty profile message missing");
	cr_expect(strstr(dom, ">all<"));
	free(dom);
	free(o.buf);
}

/*
 * Search, zoom, tooltip and reset, driven by a script appended to the page:
 * it logs what the page shows after each step into a <pre> the dump shows.
 */
static const char interact[] =
	"<pre id=\"log\"></pre><script>\n"
	"function log(s) { document.getElementById('log').textContent += s + '\\n'; }\n"
	"function bar(name) {\n"
	"  return Array.prototype.find.call(document.querySelectorAll('.fr'),\n"
	"    function (e) { return e.textContent === name; });\n"
	"}\n"
	"function names() {\n"
	"  return Array.prototype.map.call(document.querySelectorAll('.fr'),\n"
	"    function (e) { return e.textContent + (/hit/.test(e.className) ? '*' : ''); }).join(',');\n"
	"}\n"
	"var s = document.getElementById('search');\n"
	"s.value = 'FIB';\n"
	"s.dispatchEvent(new Event('input'));\n"
	"log('search: ' + document.getElementById('matched').textContent + ' | ' + names());\n"
	"bar('serve').dispatchEvent(new MouseEvent('click', {bubbles: true}));\n"
	"log('zoom: ' + document.getElementById('status').textContent + ' | ' + names());\n"
	"bar('handle').dispatchEvent(new MouseEvent('mousemove',\n"
	"  {bubbles: true, clientX: 50, clientY: 50}));\n"
	"var tip = document.getElementById('tip');\n"
	"log('tip: ' + (tip.hidden ? 'hidden' : Array.prototype.map.call(tip.children,\n"
	"  function (d) { return d.textContent; }).join(' / ')));\n"
	"document.getElementById('reset').click();\n"
	"log('reset: ' + document.getElementById('status').textContent);\n"
	"</script>\n";

Test(export, flamegraph_search_zoom_tooltip)
{
	struct out o;
	export_ok(&profile, EXPORT_FLAMEGRAPH, &o);
	char *body = strstr(o.buf, "</body>");
	cr_assert_not_null(body);
	size_t at = (size_t)(body - o.buf);
	struct out page = {malloc(o.len + sizeof interact), 0};
	cr_assert_not_null(page.buf);
	memcpy(page.buf, o.buf, at);
	memcpy(page.buf + at, interact, sizeof interact - 1);
	memcpy(page.buf + at + sizeof interact - 1, o.buf + at, o.len - at);
	page.len = o.len + sizeof interact - 1;
	char *dom = render_dom(&page);
	static const char *const want[] = {
		/* Case-insensitive; fib's three frames are one match: 4 of 19 samples. */
		"search: Matched: 21.05% of samples | ",
		"fib*,fib*,fib*",
		/* Zoomed into serve: its callers above, its callees, nothing else. */
		"zoom: 5 frames drawn, zoomed into serve (52.63%). Click a frame to zoom into it. "
		"| all,main,serve,handle,parse\n",
		"tip: handle / server.py:88 / 10 samples, 52.63% (own 7, 36.84%)\n",
		"reset: 14 frames drawn. Click a frame to zoom into it.\n",
	};
	for (size_t i = 0; i < COUNT(want); i++)
		cr_expect(strstr(dom, want[i]), "the page does not show: %s\nDOM:\n%s", want[i], dom);
	free(dom);
	free(page.buf);
	free(o.buf);
}

/* The embedded data never holds a raw '<': no name can end the script or open a comment. */
Test(export, flamegraph_escapes_data)
{
	struct out o;
	export_ok(&profile, EXPORT_FLAMEGRAPH, &o);
	const char *start = strstr(o.buf, "<script type=\"application/json\" id=\"profile\">");
	cr_assert_not_null(start);
	start = strchr(start, '>') + 1;
	const char *end = strstr(start, "</script>");
	cr_assert_not_null(end);
	cr_expect_null(memchr(start, '<', (size_t)(end - start)));
	cr_expect(strstr(start, "\\u003c/script\\u003e"), "the name is in the data, escaped");
	/* The data is the JSON of the profile: it parses once cut out. */
	json_error_t err;
	json_t *doc = json_loadb(start, (size_t)(end - start), 0, &err);
	cr_assert_not_null(doc, "embedded JSON: %s", err.text);
	cr_expect_eq(json_integer_value(json_object_get(doc, "total")), TOTAL);
	json_decref(doc);
	free(o.buf);
}

/* ---- every format --------------------------------------------------------- */

Test(export, format_names)
{
	static const struct {
		const char *name;
		enum export_format f;
	} names[] = {
		{"collapsed", EXPORT_COLLAPSED}, {"flamegraph", EXPORT_FLAMEGRAPH},
		{"speedscope", EXPORT_SPEEDSCOPE}, {"pprof", EXPORT_PPROF},
		{"json", EXPORT_JSON},
	};
	for (size_t i = 0; i < COUNT(names); i++) {
		enum export_format f;
		cr_expect_eq(export_format_parse(names[i].name, &f), 0, "%s", names[i].name);
		cr_expect_eq(f, names[i].f, "%s", names[i].name);
	}
	enum export_format f;
	cr_expect_eq(export_format_parse("svg", &f), -1);
	/* The daemon counts the table: it is no profile format. */
	cr_expect_eq(export_format_parse("table", &f), -1);
	cr_expect_eq(export_format_parse("", &f), -1);
	cr_expect_eq(export_format_parse(NULL, &f), -1);
}

/* An empty profile is valid output in every format. */
Test(export, empty_profile)
{
	struct out o;
	export_ok(&empty, EXPORT_COLLAPSED, &o);
	cr_expect_eq(o.len, 0);
	free(o.buf);

	export_ok(&empty, EXPORT_JSON, &o);
	json_t *doc = parse_json(&o);
	cr_expect_eq(json_array_size(json_object_get(doc, "frames")), 0);
	cr_expect_eq(json_array_size(json_object_get(doc, "stacks")), 0);
	cr_expect_eq(json_integer_value(json_object_get(doc, "samples")), 0);
	json_decref(doc);
	free(o.buf);

	export_ok(&empty, EXPORT_SPEEDSCOPE, &o);
	doc = parse_json(&o);
	double sum;
	json_t *fr = check_speedscope(doc, &sum);
	cr_expect_eq(json_array_size(fr), 0);
	cr_expect_eq(sum, 0);
	json_decref(doc);
	free(o.buf);

	export_ok(&empty, EXPORT_PPROF, &o);
	size_t len;
	uint8_t *raw = gunzip(&o, &len);
	Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(NULL, len, raw);
	cr_assert_not_null(p);
	cr_expect_eq(p->n_sample, 0);
	cr_expect_str_eq(p->string_table[0], "");
	cr_expect_str_eq(p->string_table[p->sample_type[1]->type], "wall");
	perftools__profiles__profile__free_unpacked(p, NULL);
	free(raw);
	free(o.buf);

	export_ok(&empty, EXPORT_FLAMEGRAPH, &o);
	cr_expect(strncmp(o.buf, "<!DOCTYPE html>", 15) == 0);
	cr_expect(strstr(o.buf, "</html>\n"));
	free(o.buf);
}

/* A bad profile fails with EINVAL in every format, before writing anything. */
static void expect_einval(const struct export_profile *p, const char *what)
{
	for (size_t i = 0; i < COUNT(all_formats); i++) {
		struct out o;
		errno = 0;
		int r = export_mem(p, all_formats[i], &o);
		cr_expect_eq(r, -1, "%s accepted (format %d)", what, all_formats[i]);
		cr_expect_eq(errno, EINVAL, "%s: errno %d (format %d)", what, errno, all_formats[i]);
		cr_expect_eq(o.len, 0, "%s: wrote %zu bytes (format %d)", what, o.len, all_formats[i]);
		free(o.buf);
	}
}

Test(export, invalid_profiles)
{
	static const uint32_t out_of_range[] = {0, 12};
	static const uint32_t ok[] = {0};
	struct export_stack st = {ok, 1, 1, 0};
	struct export_profile p = profile;

	p.stacks = &st;
	p.nstacks = 1;
	st.frames = out_of_range;
	st.depth = 2;
	expect_einval(&p, "a frame index past nframes");

	st.frames = ok;
	st.depth = 0;
	expect_einval(&p, "an empty stack");

	st.depth = EXPORT_MAX_DEPTH + 1;
	expect_einval(&p, "a stack deeper than EXPORT_MAX_DEPTH");

	st.depth = 1;
	st.frames = NULL;
	expect_einval(&p, "a stack without frames");

	st.frames = ok;
	st.count = EXPORT_MAX_SAMPLES + 1;
	expect_einval(&p, "too many samples");

	struct export_stack two[2] = {{ok, 1, EXPORT_MAX_SAMPLES, 0}, {ok, 1, UINT64_MAX, 0}};
	p.stacks = two;
	p.nstacks = 2;
	expect_einval(&p, "counts that overflow");

	p = profile;
	p.rate_hz = 0;
	expect_einval(&p, "a rate of 0");

	p = profile;
	p.until_unix = p.from_unix - 1;
	expect_einval(&p, "a range ending before it starts");

	p = profile;
	p.from_unix = NAN;
	expect_einval(&p, "a NaN time");

	struct export_frame bad[COUNT(frames)];
	memcpy(bad, frames, sizeof bad);
	bad[3].function = NULL;
	p = profile;
	p.frames = bad;
	expect_einval(&p, "a frame without a function");
	bad[3].function = "parse";
	bad[3].file = NULL;
	expect_einval(&p, "a frame without a file");
	bad[3].file = "json.py";
	bad[3].kind = (enum uw_frame_kind)7;
	expect_einval(&p, "an unknown frame kind");

	p = profile;
	p.frames = NULL;
	expect_einval(&p, "frames missing");

	expect_einval(NULL, "no profile");

	struct out o;
	cr_expect_eq(export_mem(&profile, (enum export_format)42, &o), -1);
	cr_expect_eq(errno, EINVAL);
	free(o.buf);
}

/* A failed write is reported, not lost in the stdio buffer. */
Test(export, write_errors)
{
	for (size_t i = 0; i < COUNT(all_formats); i++) {
		FILE *fp = fopen("/dev/full", "w");
		cr_assert_not_null(fp, "/dev/full: %s", strerror(errno));
		errno = 0;
		int r = export_write(&profile, all_formats[i], fp);
		int e = errno;
		fclose(fp);
		cr_expect_eq(r, -1, "format %d: a full disk went unnoticed", all_formats[i]);
		cr_expect_eq(e, ENOSPC, "format %d: errno %d", all_formats[i], e);
	}
}

/* Deep recursion: the deepest accepted stack, through every format. */
Test(export, deepest_stack)
{
	uint32_t *ids = calloc(EXPORT_MAX_DEPTH, sizeof *ids);
	cr_assert_not_null(ids);
	for (size_t d = 1; d < EXPORT_MAX_DEPTH; d++)
		ids[d] = 5;
	struct export_stack st = {ids, EXPORT_MAX_DEPTH, 3, 0};
	struct export_profile p = profile;
	p.stacks = &st;
	p.nstacks = 1;
	for (size_t i = 0; i < COUNT(all_formats); i++) {
		struct out o;
		export_ok(&p, all_formats[i], &o);
		cr_expect_gt(o.len, 0);
		free(o.buf);
	}
	free(ids);
}
