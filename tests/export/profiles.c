/* The profiles the export tests share: see profiles.h. */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <zlib.h>

#include "profiles.h"
#include "helpers.h"

const struct export_frame frames[PROFILE_NFRAMES] = {
	/* 0 */ {"main", "app.py", 10, UW_FRAME_PYTHON, 0, NULL},
	/* 1 */ {"serve", "server.py", 40, UW_FRAME_PYTHON, 0, NULL},
	/* 2 */ {"handle", "server.py", 88, UW_FRAME_PYTHON, 0, NULL},
	/* 3 */ {"parse", "json.py", -1, UW_FRAME_PYTHON, 0, NULL},
	/* 4 */ {"<native>", "", -1, UW_FRAME_NATIVE, 0, NULL},
	/* 5 */ {"fib", "fib.py", 3, UW_FRAME_PYTHON, 0, NULL},
	/* 6 */ {"größe_λ", "ünï.py", 7, UW_FRAME_PYTHON, 0, NULL},
	/* 7 */ {EVIL_SCRIPT, "evil.py", 1, UW_FRAME_PYTHON, 0, NULL},
	/* 8 */ {"a;b\nc", "semi.py", 2, UW_FRAME_PYTHON, 0, NULL},
	/* 9 */ {"<GC>", "", -1, UW_FRAME_GC, 0, NULL},
	/* 10 */ {"handle", "server.py", 88, UW_FRAME_PYTHON, 0, NULL}, /* frame 2 again */
	/* 11 */ {EVIL_COMMENT, "evil.py", 5, UW_FRAME_PYTHON, 0, NULL},
};

const uint32_t st0[3] = {0, 1, 2};
static const uint32_t st1[] = {0, 1, 2, 3, 0, 0}, st2[] = {0, 5, 5, 5, 0, 0},
		      st3[] = {0, 1, 10}, st4[] = {0, 4, 6}, st5[] = {0, 7}, st6[] = {0, 8, 9},
		      st7[] = {0, 1}, st8[] = {0, 11};

const struct export_stack stacks[PROFILE_NSTACKS] = {
	{st0, 3, 5, 1, 0, 0, 0, false},  {st1, 4, 3, 1, 0, 0, 0, false}, {st2, 4, 4, 2, 0, 0, 0, false}, {st3, 3, 2, 2, 0, 0, 0, false}, {st4, 3, 1, 1, 0, 0, 0, false},
	{st5, 2, 1, 0, 0, 0, 0, false},  {st6, 3, 2, 1, 0, 0, 0, false}, {st7, 2, 0, 1, 0, 0, 0, false}, {st8, 2, 1, 0, 0, 0, 0, false},
};

const struct export_profile profile = {
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

const struct export_profile empty = {
	.name = "idle",
	.mode = "wall",
	.rate_hz = 100,
	.from_unix = 1700000000.0,
	.until_unix = 1700000010.0,
};

const enum export_format all_formats[NFORMATS] = {
	EXPORT_COLLAPSED, EXPORT_FLAMEGRAPH, EXPORT_SPEEDSCOPE, EXPORT_PPROF, EXPORT_JSON,
};

/* export_write into memory; returns its result with errno kept. */
int export_mem(const struct export_profile *p, enum export_format f, struct out *o)
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
void export_ok(const struct export_profile *p, enum export_format f, struct out *o)
{
	int r = export_mem(p, f, o);
	cr_assert_eq(r, 0, "export_write(format %d): %s", f, strerror(errno));
}

void scratch_write(const char *path, const void *data, size_t len)
{
	FILE *fp = fopen(path, "wb");
	cr_assert_not_null(fp, "%s: %s", path, strerror(errno));
	cr_assert_eq(fwrite(data, 1, len, fp), len);
	cr_assert_eq(fclose(fp), 0);
}

/* A JSON number that is an integer (speedscope's schema says number; ours are indices). */
static bool is_index(json_t *v, size_t n)
{
	return json_is_integer(v) && json_integer_value(v) >= 0 && (size_t)json_integer_value(v) < n;
}

/*
 * What we promise of a speedscope file beyond its schema (which the tests
 * below hold it to): sampled profiles (one per thread), our exporter, indices
 * in range, one weight per sample, each profile's weights summing to its
 * range (*weight_sum: all of them).  Returns the frames.
 */
json_t *check_speedscope(json_t *doc, double *weight_sum)
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
	cr_assert(json_is_array(profiles) && json_array_size(profiles) >= 1);
	*weight_sum = 0;
	for (size_t k = 0; k < json_array_size(profiles); k++) {
		json_t *p = json_array_get(profiles, k);
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
		double sum = 0;
		for (size_t i = 0; i < json_array_size(samples); i++) {
			json_t *s = json_array_get(samples, i), *w = json_array_get(weights, i);
			cr_assert(json_is_array(s) && json_array_size(s) > 0);
			for (size_t d = 0; d < json_array_size(s); d++)
				cr_expect(is_index(json_array_get(s, d), json_array_size(fr)),
				          "sample %zu: frame %zu out of range", i, d);
			cr_assert(json_is_number(w));
			sum += json_number_value(w);
		}
		cr_expect(fabs(json_number_value(json_object_get(p, "endValue")) -
		               json_number_value(json_object_get(p, "startValue")) - sum) < 1e-9);
		*weight_sum += sum;
	}
	return fr;
}

/* The gunzipped bytes of a gzip stream. */
uint8_t *gunzip(const struct out *o, size_t *len)
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

/* Chromium on a page written into a fresh scratch dir; the run's result, which must be a success. */
static void page_chromium(const struct out *page, const char *script, const char *hash,
                          const char *action, int width, int height, struct run_result *r)
{
	char dir[PATH_MAX], path[PATH_MAX + 16], url[PATH_MAX * 2], profile_dir[PATH_MAX + 32],
		size[64];
	scratch_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/page.html", dir);
	/* Its own profile directory: HOME may not be writable, and runs must not share state. */
	snprintf(profile_dir, sizeof profile_dir, "--user-data-dir=%s/chromium", dir);
	snprintf(size, sizeof size, "--window-size=%d,%d", width, height);
	FILE *fp = fopen(path, "wb");
	cr_assert_not_null(fp, "%s: %s", path, strerror(errno));
	const char *body = script ? strstr(page->buf, "</body>") : NULL;
	size_t head = body ? (size_t)(body - page->buf) : page->len;
	cr_assert(!script || body, "the page has no </body>");
	cr_assert_eq(fwrite(page->buf, 1, head, fp), head);
	if (script)
		fprintf(fp, "<pre id=\"log\"></pre><script>\n%s\n</script>\n", script);
	cr_assert_eq(fwrite(page->buf + head, 1, page->len - head, fp), page->len - head);
	cr_assert_eq(fclose(fp), 0);
	snprintf(url, sizeof url, "file://%s%s%s", path, hash && *hash ? "#" : "", hash ? hash : "");
	/* Root needs --no-sandbox; a container's small /dev/shm must not matter. */
	const char *argv[] = {"chromium", "--headless", "--no-sandbox", "--disable-gpu",
	                      "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars",
	                      profile_dir, size, action, url, NULL};
	struct run_opts opts = {.timeout_s = CHROMIUM_TIMEOUT_S};
	run_command(r, argv, &opts);
	char why[2048];
	cr_assert(r->exited && r->code == 0, "chromium %s: %s", action, run_describe(r, why, sizeof why));
}

char *page_dom(const struct out *page, const char *script, const char *hash)
{
	struct run_result r;
	page_chromium(page, script, hash, "--dump-dom", 1400, 900, &r);
	cr_assert(r.out_len > 0, "chromium --dump-dom printed nothing");
	char *dom = strdup(r.out);
	cr_assert_not_null(dom);
	run_result_free(&r);
	return dom;
}

void page_screenshot(const struct out *page, const char *hash, const char *name, int width, int height)
{
	char dir[PATH_MAX], png[PATH_MAX + 64], action[PATH_MAX + 96];
	scratch_dir(dir, sizeof dir);
	snprintf(png, sizeof png, "%s/%s.png", dir, name);
	snprintf(action, sizeof action, "--screenshot=%s", png);
	struct run_result r;
	page_chromium(page, NULL, hash, action, width, height, &r);
	run_result_free(&r);
	size_t len;
	char *bytes = file_bytes(png, &len);
	cr_assert(len > 8 && memcmp(bytes, "\x89PNG", 4) == 0, "%s is not a PNG", png);
	const char *keep = getenv("PYPROFD_SCREENSHOTS");
	if (keep && *keep) {
		char copy[PATH_MAX * 2];
		snprintf(copy, sizeof copy, "%s/%s.png", keep, name);
		scratch_write(copy, bytes, len);
	}
	free(bytes);
}

json_t *parse_json(const struct out *o)
{
	json_error_t err;
	json_t *doc = json_loadb(o->buf, o->len, 0, &err);
	cr_assert_not_null(doc, "not JSON: %s at %d:%d", err.text, err.line, err.column);
	return doc;
}

static const struct export_frame threaded_frames[] = {
	/* 0 */ {"<module>", "app.py", 12, UW_FRAME_PYTHON, 1, NULL},
	/* 1 */ {"run", "runners.py", 44, UW_FRAME_PYTHON, 40, NULL},     /* a function run */
	/* 2 */ {"run", "runners.py", 120, UW_FRAME_PYTHON, 118, NULL},   /* a method run, co_name only */
	/* 3 */ {"Runner.run", "runners.py", 121, UW_FRAME_PYTHON, 118, NULL},
	/* 4 */ {"<lambda>", "app.py", 7, UW_FRAME_PYTHON, 7, NULL},
	/* 5 */ {"<GC>", "", -1, UW_FRAME_GC, 0, NULL},
	/* 6 */ {"Condition.wait", "threading.py", 320, UW_FRAME_PYTHON, 288, NULL},
};
static const uint32_t th0[] = {0, 1}, th1[] = {0, 2}, th2[] = {0, 3, 4}, th3[] = {0, 4, 5},
		      th4[] = {0, 6};
static const struct export_label api_labels[] = {{"service", "api"}, {"env", "prod"}};
static const struct export_label batch_labels[] = {{"service", "batch"}};
static const struct export_thread threaded_threads[] = {
	{.thread_id = 140001, .native_id = 42, .name = "MainThread", .pid = 42,
	 .labels = api_labels, .nlabels = 2},
	{.thread_id = 140002, .native_id = 43, .name = "worker-1", .pid = 42,
	 .labels = api_labels, .nlabels = 2},
	{.thread_id = 140003, .native_id = -1, .name = "", .pid = 77,
	 .labels = batch_labels, .nlabels = 1},
};
static const struct export_stack threaded_stacks[] = {
	{th0, 2, 3, 140001, 1, 0, 0, false}, {th1, 2, 2, 140001, 1, 2, 0, false}, {th2, 3, 2, 140001, 1, 0, 0, false},
	{th4, 2, 5, 140002, 2, 5, 0, false}, {th3, 3, 1, 140003, 3, 0, 0, false}, {th2, 3, 2, 140003, 3, 0, 0, false},
};
const struct export_profile threaded = {
	.frames = threaded_frames,
	.nframes = COUNT(threaded_frames),
	.stacks = threaded_stacks,
	.nstacks = COUNT(threaded_stacks),
	.threads = threaded_threads,
	.nthreads = COUNT(threaded_threads),
	.name = "service=api",
	.mode = "gil",
	.rate_hz = RATE,
	.from_unix = 1700000000.0,
	.until_unix = 1700000060.5,
};

const char *pprof_str(const Perftools__Profiles__Profile *p, int64_t i)
{
	cr_assert(i >= 0 && (size_t)i < p->n_string_table, "string index %lld", (long long)i);
	return p->string_table[i];
}

Perftools__Profiles__Profile *pprof_of(const struct export_profile *prof)
{
	struct out o;
	export_ok(prof, EXPORT_PPROF, &o);
	size_t len;
	uint8_t *raw = gunzip(&o, &len);
	Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(NULL, len, raw);
	cr_assert_not_null(p, "protobuf-c cannot decode the profile");
	free(raw);
	free(o.buf);
	return p;
}
