/*
 * The export writers (proto/export/export.h) on synthetic profiles.
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
#include "profiles.h"
#include "helpers.h"
#include "profile.pb-c.h"


TestSuite(export, .init = helpers_init, .fini = helpers_fini);

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
	rev[COUNT(stacks)] = (struct export_stack){st0, 3, 5, 9, 0, 0, 0, false};
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
		{"x\\y", "dir\\f.py", 1, UW_FRAME_PYTHON, 0, NULL},
		{"tab\there", "p;q\r.py", -1, UW_FRAME_PYTHON, 0, NULL},
	};
	static const uint32_t s[] = {0, 1};
	static const struct export_stack st[] = {{s, 2, 3, 0, 0, 0, 0, false}};
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
	static const struct export_frame f[] = {{"bad\xff\xfe", "x\xc3.py", 1, UW_FRAME_PYTHON, 0, NULL}};
	static const uint32_t s[] = {0};
	static const struct export_stack st[] = {{s, 1, 2, 0, 0, 0, 0, false}};
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
	struct export_stack st = {ok, 1, 1, 0, 0, 0, 0, false};
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

	struct export_stack two[2] = {{ok, 1, EXPORT_MAX_SAMPLES, 0, 0, 0, 0, false}, {ok, 1, UINT64_MAX, 0, 0, 0, 0, false}};
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
	struct export_stack st = {ids, EXPORT_MAX_DEPTH, 3, 0, 0, 0, 0, false};
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

/* A file's name says its format by its ending; no ending leaves the caller's default. */
Test(export, format_of_a_file_name)
{
	static const struct {
		const char *name;
		int rc;
		enum export_format format;
	} names[] = {
		{"out/profile.html", 0, EXPORT_FLAMEGRAPH}, {"P.HTM", 0, EXPORT_FLAMEGRAPH},
		{"a.speedscope.json", 0, EXPORT_SPEEDSCOPE}, {"a.gecko.json", 0, EXPORT_GECKO},
		{"a.json", 0, EXPORT_JSON},                 {"cpu.pb.gz", 0, EXPORT_PPROF},
		{"cpu.pprof", 0, EXPORT_PPROF},             {"stacks.folded", 0, EXPORT_COLLAPSED},
		{"stacks.txt", 0, EXPORT_COLLAPSED},        {"flame.svg", -1, EXPORT_COLLAPSED},
		{"profile", 1, EXPORT_COLLAPSED},           {"/dev/null", 1, EXPORT_COLLAPSED},
		{"dir.d/profile", 1, EXPORT_COLLAPSED},     {"out/.json", 1, EXPORT_COLLAPSED},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		enum export_format f = EXPORT_COLLAPSED;
		cr_expect_eq(export_format_of_file(names[i].name, &f), names[i].rc, "%s", names[i].name);
		cr_expect_eq(f, names[i].format, "%s: format %d", names[i].name, (int)f);
	}
}
