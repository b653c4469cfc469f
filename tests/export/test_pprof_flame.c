/*
 * pprof, decoded by protobuf-c and by protoc; the flamegraph page, rendered
 * by headless Chromium, searched, zoomed and attacked through its data.
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


TestSuite(pprof_flame, .init = helpers_init, .fini = helpers_fini);

/* ---- pprof ---------------------------------------------------------------- */

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

Test(pprof_flame, pprof_decodes_with_protobuf_c)
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
			if (strcmp(str_at(p, s->label[l]->key), "thread.id") == 0)
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

Test(pprof_flame, pprof_decodes_with_protoc)
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

Test(pprof_flame, flamegraph_renders_in_chromium)
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

Test(pprof_flame, flamegraph_empty_renders)
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

Test(pprof_flame, flamegraph_search_zoom_tooltip)
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
Test(pprof_flame, flamegraph_escapes_data)
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
