/*
 * The flamegraph and heatmap page, run by headless Chromium: each view,
 * search, zoom, the thread, label and idle selections, the time strip,
 * the sandwich, the hotspots, a diff's colours, the view kept in the URL,
 * the sources line by line; hostile names and sources stay text.  A
 * script put after the page's own drives it as a person would (clicks,
 * drags, choices) and logs what the page then shows into the DOM, which
 * Chromium dumps.  Screenshots of every view go to $PYPROFD_SCREENSHOTS
 * when it is set, for a person to look at.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "export.h"
#include "helpers.h"
#include "profiles.h"

TestSuite(page, .init = helpers_init, .fini = helpers_fini);

/* ---- a service's profile, as a query by threads and time answers it ---- */

#define T0 1700000000 /* 2023-11-14 22:13:20 UTC, a multiple of the slot */
#define SLOT 10

static const struct export_frame shop_frames[] = {
	/* 0 */ {"<module>", "/srv/shop/app.py", 40, UW_FRAME_PYTHON, 1, NULL},
	/* 1 */ {"main", "/srv/shop/app.py", 33, UW_FRAME_PYTHON, 30, NULL},
	/* 2 */ {"Server.serve", "/srv/shop/server.py", 12, UW_FRAME_PYTHON, 10, NULL},
	/* 3 */ {"Server.handle", "/srv/shop/server.py", 20, UW_FRAME_PYTHON, 18, NULL},
	/* 4 */ {"render", "/srv/shop/views.py", 5, UW_FRAME_PYTHON, 3, NULL},
	/* 5 */ {"query", "/srv/shop/db.py", 8, UW_FRAME_PYTHON, 6, NULL},
	/* 6 */ {"Condition.wait", "/usr/lib/python3.12/threading.py", 355, UW_FRAME_PYTHON, 327, NULL},
	/* 7 */ {"worker", "/srv/shop/app.py", 25, UW_FRAME_PYTHON, 22, NULL},
	/* 8 */ {"<native>", "", -1, UW_FRAME_NATIVE, 0, NULL},
	/* 9 */ {"<GC>", "", -1, UW_FRAME_GC, 0, NULL},
	/* 10 */ {"Server.handle", "/srv/shop/server.py", 21, UW_FRAME_PYTHON, 18, NULL},
	/* 11 */ {"Page.render", "/srv/shop/views.py", 14, UW_FRAME_PYTHON, 12, NULL},
};
static const uint32_t p_render[] = {0, 1, 2, 3, 4}, p_query[] = {0, 1, 2, 10, 5},
		      p_native[] = {0, 1, 2, 10, 5, 8}, p_wait[] = {0, 7, 6}, p_page[] = {0, 1, 2, 3, 11},
		      p_gc[] = {0, 1, 9};
static const struct export_label shop_labels[] = {{"service", "shop"}};
static const struct export_label batch_labels[] = {{"service", "batch"}};
static const struct export_thread shop_threads[] = {
	{.thread_id = 140001, .native_id = 101, .name = "MainThread", .pid = 100, .labels = shop_labels, .nlabels = 1},
	{.thread_id = 140002, .native_id = 102, .name = "worker-1", .pid = 100, .labels = shop_labels, .nlabels = 1},
	{.thread_id = 140003, .native_id = -1, .name = "", .pid = 200, .labels = batch_labels, .nlabels = 1},
};
/*
 * 29 samples: MainThread 18 (render 10, query 8 of which 3 in C), worker-1
 * 8, all idle, the batch thread 3; slots 0..3 hold 10, 5, 5 and 9.
 */
#define SHOP_TOTAL 29
static const struct export_stack shop_stacks[] = {
	{p_render, 5, 6, 140001, 1, 0, T0, false},
	{p_render, 5, 4, 140001, 1, 0, T0 + 2 * SLOT, false},
	{p_query, 5, 5, 140001, 1, 0, T0 + SLOT, false},
	{p_native, 6, 3, 140001, 1, 0, T0 + 3 * SLOT, false},
	{p_wait, 3, 4, 140002, 2, 4, T0, false},
	{p_wait, 3, 4, 140002, 2, 4, T0 + 3 * SLOT, false},
	{p_page, 5, 2, 140003, 3, 0, T0 + 3 * SLOT, false},
	{p_gc, 3, 1, 140003, 3, 0, T0 + 2 * SLOT, false},
};
static const struct export_profile shop = {
	.frames = shop_frames,
	.nframes = COUNT(shop_frames),
	.stacks = shop_stacks,
	.nstacks = COUNT(shop_stacks),
	.threads = shop_threads,
	.nthreads = COUNT(shop_threads),
	.name = "service=shop",
	.mode = "wall",
	.rate_hz = RATE,
	.from_unix = T0,
	.until_unix = T0 + 4 * SLOT,
	.slot_seconds = SLOT,
};

/*
 * The same against a base range of 20 samples: render 10 (50 % there, 34 %
 * here), query 2 (10 %, 28 % here), the worker 8 (40 %, 28 %).
 */
static const struct export_stack diff_stacks[] = {
	{p_render, 5, 10, 140001, 1, 0, 0, false}, {p_query, 5, 5, 140001, 1, 0, 0, false},
	{p_native, 6, 3, 140001, 1, 0, 0, false},  {p_wait, 3, 8, 140002, 2, 8, 0, false},
	{p_page, 5, 2, 140003, 3, 0, 0, false},    {p_gc, 3, 1, 140003, 3, 0, 0, false},
	{p_render, 5, 10, 140001, 1, 0, 0, true},  {p_query, 5, 2, 140001, 1, 0, 0, true},
	{p_wait, 3, 8, 140002, 2, 8, 0, true},
};
static const struct export_profile shop_diff = {
	.frames = shop_frames,
	.nframes = COUNT(shop_frames),
	.stacks = diff_stacks,
	.nstacks = COUNT(diff_stacks),
	.threads = shop_threads,
	.nthreads = COUNT(shop_threads),
	.name = "service=shop",
	.mode = "wall",
	.rate_hz = RATE,
	.from_unix = T0 + 3600,
	.until_unix = T0 + 7200,
	.diff = true,
	.base_from_unix = T0,
	.base_until_unix = T0 + 3600,
};

/* Its sources as a heatmap has them: one read, one not, one with a line that is markup. */
static const char server_py[] =
	"\"\"\"The shop's server: requests in, pages out.\"\"\"\n" /* 1 */
	"import db\n"
	"import views\n"
	"\n"
	"\n"
	"class Server:\n"
	"    def __init__(self, port):\n"
	"        self.port = port\n"
	"\n"
	"    def serve(self):\n" /* 10 */
	"        while True:\n"
	"            self.handle(self.accept())\n"
	"\n"
	"    def accept(self):\n"
	"        return {\"path\": \"/\"}\n"
	"\n"
	"\n"
	"    def handle(self, request):\n" /* 18 */
	"        page = views.Page(request)\n"
	"        html = views.render(page)\n" /* 20 */
	"        rows = db.query(\"SELECT 1\")  # </script><b id=\"src\">not markup</b>\n"
	"        return html, rows\n";
static const struct export_source shop_sources[] = {
	{"/srv/shop/server.py", server_py, sizeof server_py - 1, "read in pid 100's root"},
	{"/srv/shop/db.py", NULL, 0, "not readable in pid 100's root, as its user (uid 0): No such file or directory"},
};

static struct export_profile shop_heatmap(void)
{
	struct export_profile p = shop;
	p.sources = shop_sources;
	p.nsources = COUNT(shop_sources);
	return p;
}

/* ---- driving the page ---- */

/* What every script below may call: find, click, choose, drag, and say what the page shows. */
#define DRIVE                                                                                      \
	"function log(s) { document.getElementById('log').textContent += s + '\\n'; }\n"          \
	"function $(id) { return document.getElementById(id); }\n"                                 \
	"function bars(box) { return Array.prototype.slice.call((box || $('graph')).querySelectorAll('.fr')); }\n" \
	"function bar(text, box) { return bars(box).find(function (e) { return e.textContent === text; }); }\n" \
	"function names(box) { return bars(box).map(function (e) {\n"                             \
	"  return e.textContent + (/hit/.test(e.className) ? '*' : ''); }).join(','); }\n"       \
	"function click(e) { e.dispatchEvent(new MouseEvent('click', {bubbles: true})); }\n"      \
	"function choose(id, value) { var s = $(id); s.value = value; s.dispatchEvent(new Event('change')); }\n" \
	"function status() { return $('status').textContent; }\n"                                \
	"function hot(n) { return Array.prototype.slice.call(document.querySelectorAll('#hot tr.row'), 0, n)\n" \
	"  .map(function (r) { return Array.prototype.map.call(r.cells, function (c) { return c.textContent; }).join(' '); })\n" \
	"  .join(' | '); }\n"                                                                     \
	"function row(name) { return Array.prototype.find.call(document.querySelectorAll('#hot tr.row'),\n" \
	"  function (r) { return r.cells[0].firstChild.textContent === name; }); }\n"            \
	"function mouse(type, e, fx) { var r = e.getBoundingClientRect();\n"                      \
	"  (type === 'mousedown' ? e : window).dispatchEvent(new MouseEvent(type,\n"             \
	"    {bubbles: true, clientX: r.left + fx * r.width, clientY: r.top + r.height / 2})); }\n" \
	"function drag(e, from, to) { mouse('mousedown', e, from); mouse('mousemove', e, to); mouse('mouseup', e, to); }\n" \
	"function nav(hash) { history.replaceState(null, '', hash);\n"                           \
	"  window.dispatchEvent(new HashChangeEvent('hashchange')); }\n"                         \
	"function rgb(e) { var m = /rgb\\((\\d+), (\\d+), (\\d+)\\)/.exec(e.style.background);\n"  \
	"  var r = +m[1], g = +m[2], b = +m[3];\n"                                               \
	"  return r === g && g === b ? 'grey' : r > b ? 'red' : 'blue'; }\n"

/* The DOM of p's page driven by script at hash, which must show every line of want. */
static char *page_expect(const struct export_profile *p, enum export_format f, const char *hash,
                         const char *script, const char *const *want, size_t nwant)
{
	struct out o;
	export_ok(p, f, &o);
	char *full = NULL;
	cr_assert(asprintf(&full, "%s%s", DRIVE, script) > 0);
	char *dom = page_dom(&o, full, hash);
	free(full);
	free(o.buf);
	for (size_t i = 0; i < nwant; i++)
		cr_expect(strstr(dom, want[i]), "the page does not show: %s\nDOM:\n%s", want[i], dom);
	return dom;
}

#define EXPECT(p, f, hash, script, ...)                                                            \
	do {                                                                                       \
		static const char *const want_[] = {__VA_ARGS__};                                  \
		free(page_expect(p, f, hash, script, want_, COUNT(want_)));                        \
	} while (0)

/* ---- the page of the export tests' own profile: names, titles, hostile text ---- */

Test(page, renders_names_as_text)
{
	struct out o;
	export_ok(&profile, EXPORT_FLAMEGRAPH, &o);
	/* Self-contained: nothing fetched from anywhere. */
	cr_expect_null(strstr(o.buf, "http://"));
	cr_expect_null(strstr(o.buf, "https://"));
	cr_expect_null(strstr(o.buf, "src="));
	cr_expect_null(strstr(o.buf, "@import"));
	cr_expect_null(strstr(o.buf, "<!--PROFILE-->"), "the data's place is filled");
	char *dom = page_dom(&o, NULL, NULL);
	/* Each frame a bar: its qualified name, and its module and line where it has a file. */
	static const char *const names[] = {
		">all<",         ">main (app:10)<",  ">serve (server:40)<",
		">handle (server:88)<", ">parse (json)<",   ">fib (fib:3)<",
		">größe_λ (ünï:7)<", ">&lt;native&gt;<", ">&lt;GC&gt;<",
		">a;b\nc (semi:2)<", ">&lt;/script&gt;&lt;b id=\"pwned\"&gt;x&lt;/b&gt; (evil:1)<",
		">&lt;!--&lt;script&gt; (evil:5)<",
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
	/* No times in this profile: no strip. */
	cr_expect(strstr(dom, "<div id=\"stripbox\" hidden=\"\">"), "a strip without times");
	free(dom);
	free(o.buf);
}

Test(page, empty_profile_renders)
{
	EXPECT(&empty, EXPORT_FLAMEGRAPH, NULL, "log('status: ' + status() + ' | ' + names());",
	       "status: No samples in this profile. | all\n");
}

/* The embedded data never holds a raw '<': no name can end the script or open a comment. */
Test(page, data_is_escaped)
{
	struct out o;
	struct export_profile p = shop_heatmap();
	export_ok(&p, EXPORT_HEATMAP, &o);
	const char *start = strstr(o.buf, "<script type=\"application/json\" id=\"profile\">");
	cr_assert_not_null(start);
	start = strchr(start, '>') + 1;
	const char *end = strstr(start, "</script>");
	cr_assert_not_null(end);
	cr_expect_null(memchr(start, '<', (size_t)(end - start)));
	cr_expect(strstr(start, "\\u003c/script\\u003e\\u003cb id=\\\"src\\\"\\u003e"),
	          "the source's line is in the data, escaped");
	/* The data is JSON: it parses once cut out, samples in columns over the tree. */
	json_error_t err;
	json_t *doc = json_loadb(start, (size_t)(end - start), 0, &err);
	cr_assert_not_null(doc, "embedded JSON: %s", err.text);
	cr_expect_eq(json_integer_value(json_object_get(doc, "total")), SHOP_TOTAL);
	cr_expect_eq(json_array_size(json_object_get(doc, "sample_node")), COUNT(shop_stacks));
	cr_expect_eq(json_integer_value(json_object_get(doc, "nslots")), 4);
	cr_expect_eq(json_integer_value(json_object_get(doc, "slot_first")), T0 / SLOT);
	/* Every distinct path once: 12 nodes for 8 stacks of up to 6 frames. */
	cr_expect_eq(json_array_size(json_object_get(doc, "nodes")), 2 * 12);
	cr_expect_str_eq(json_string_value(json_object_get(doc, "view")), "source");
	json_decref(doc);
	free(o.buf);
	/* A flamegraph carries no source text at all. */
	export_ok(&p, EXPORT_FLAMEGRAPH, &o);
	cr_expect_null(strstr(o.buf, "import views"), "a flamegraph embedded a source");
	free(o.buf);
}

/* What a page cannot draw is refused whole, nothing written; other formats refuse a diff. */
Test(page, bad_times_and_ranges_are_refused)
{
	struct out o;
	struct export_stack st[2] = {shop_stacks[0], shop_stacks[1]};
	struct export_profile p = shop;
	p.stacks = st;
	p.nstacks = 2;
	st[1].slot_start = T0 + 5; /* not a slot's start */
	cr_expect_eq(export_mem(&p, EXPORT_FLAMEGRAPH, &o), -1);
	cr_expect_eq(errno, EINVAL);
	cr_expect_eq(o.len, 0);
	free(o.buf);
	st[1].slot_start = T0 + (int64_t)SLOT * EXPORT_MAX_SLOTS; /* one slot too many */
	cr_expect_eq(export_mem(&p, EXPORT_FLAMEGRAPH, &o), -1);
	free(o.buf);
	st[1].slot_start = T0 + (int64_t)SLOT * (EXPORT_MAX_SLOTS - 1);
	export_ok(&p, EXPORT_FLAMEGRAPH, &o);
	free(o.buf);
	st[1].base = true; /* a base range's stack in no diff */
	cr_expect_eq(export_mem(&p, EXPORT_FLAMEGRAPH, &o), -1);
	free(o.buf);
	for (size_t f = 0; f < NFORMATS; f++) {
		int rc = export_mem(&shop_diff, all_formats[f], &o);
		cr_expect_eq(rc, all_formats[f] == EXPORT_FLAMEGRAPH ? 0 : -1, "format %d", all_formats[f]);
		free(o.buf);
	}
	export_ok(&shop_diff, EXPORT_HEATMAP, &o);
	free(o.buf);
	p = shop_diff;
	p.base_until_unix = p.base_from_unix - 1;
	cr_expect_eq(export_mem(&p, EXPORT_FLAMEGRAPH, &o), -1);
	free(o.buf);
}

/* ---- the views ---- */

Test(page, icicle_and_flame)
{
	EXPECT(&shop, EXPORT_FLAMEGRAPH, NULL,
	       "log('icicle: ' + status());\n"
	       "log('icicle root row: ' + bar('all').style.top);\n"
	       "log('bars: ' + names());\n"
	       "click($('views').querySelector('[data-v=flame]'));\n"
	       "log('flame root row last: ' + (parseInt(bar('all').style.top) + 18 === parseInt($('graph').style.height)));\n"
	       "log('flame: ' + status());\n"
	       "log('hash: ' + location.hash);\n",
	       "icicle: 13 frames drawn. Click a frame to zoom into it.\n",
	       "icicle root row: 0px\n",
	       /* A method and a function of one short name, each with its module and line. */
	       "Server.handle (server:20)", "Server.handle (server:21)", "render (views:5)",
	       "Page.render (views:14)", "query (db:8)", "Condition.wait (threading:355)",
	       "flame root row last: true\n", "flame: 13 frames drawn.", "hash: #v=flame\n");
}

Test(page, search_zoom_tooltip_reset)
{
	EXPECT(&shop, EXPORT_FLAMEGRAPH, NULL,
	       "var s = $('search');\n"
	       "s.value = 'QUERY';\n"
	       "s.dispatchEvent(new Event('input'));\n"
	       "log('search: ' + $('matched').textContent + ' | ' + names());\n"
	       "click(bar('Server.serve (server:12)'));\n"
	       "log('zoom: ' + status() + ' | ' + names());\n"
	       "bar('Server.handle (server:20)').dispatchEvent(new MouseEvent('mousemove',\n"
	       "  {bubbles: true, clientX: 50, clientY: 50}));\n"
	       "var tip = $('tip');\n"
	       "log('tip: ' + (tip.hidden ? 'hidden' : Array.prototype.map.call(tip.children,\n"
	       "  function (d) { return d.textContent; }).join(' / ')));\n"
	       "log('hash: ' + location.hash);\n"
	       "$('reset').click();\n"
	       "log('reset: ' + status());\n",
	       /* Case-insensitive, by name or file: query's samples, 8 of 29. */
	       "search: Matched: 27.59% of samples | ", "query (db:8)*",
	       /* Zoomed into serve: its callers above, its callees, nothing else. */
	       "zoom: 10 frames drawn, zoomed into Server.serve (68.97%). Click a frame to zoom into it. "
	       "Server.serve: callers and callees",
	       "tip: Server.handle / /srv/shop/server.py:20 (def at line 18) / 12 samples, 41.38% (own 0, 0.00%)\n",
	       "hash: #q=QUERY&amp;z=", "reset: 13 frames drawn. Click a frame to zoom into it.\n");
}

Test(page, thread_label_idle)
{
	EXPECT(&shop, EXPORT_FLAMEGRAPH, NULL,
	       "log('threads: ' + Array.prototype.map.call($('thread').options, function (o) { return o.text; }).join(', '));\n"
	       "log('labels: ' + Array.prototype.map.call($('label').options, function (o) { return o.text; }).join(', '));\n"
	       "choose('thread', 'worker-1 (tid 102)');\n"
	       "log('worker: ' + status() + ' | ' + names() + ' | ' + hot(1));\n"
	       "choose('thread', '');\n"
	       "choose('label', 'service=batch');\n"
	       "log('batch: ' + status() + ' | ' + hot(1));\n"
	       "choose('label', '');\n"
	       "log('idle share: ' + $('idleshare').textContent);\n"
	       "$('idle').click();\n"
	       "log('no idle: ' + status() + ' | ' + (bar('Condition.wait (threading:355)') ? 'wait drawn' : 'no wait') +\n"
	       "  ' | ' + hot(1));\n"
	       "log('hash: ' + location.hash);\n",
	       "threads: all threads, MainThread (tid 101), worker-1 (tid 102), thread 140003\n",
	       "labels: all labels, service=batch, service=shop\n",
	       "worker: 4 frames drawn. Click a frame to zoom into it. | all,&lt;module&gt; (app:40),worker (app:25),"
	       "Condition.wait (threading:355) | Condition.wait threading:327 100.00% 100.00%\n",
	       /* The batch process: Page.render 2 of its 3 samples, the collector 1. */
	       "batch: 7 frames drawn. Click a frame to zoom into it. | Page.render views:12 66.67% 66.67%\n",
	       "idle share: (27.59%)\n",
	       /* Without the worker's waits: 21 samples, render 10 of them. */
	       "no idle: 11 frames drawn. Click a frame to zoom into it. | no wait | render views:3 47.62% 47.62%\n",
	       "hash: #idle=1\n");
}

Test(page, strip_narrows_to_a_time_range)
{
	EXPECT(&shop, EXPORT_FLAMEGRAPH, NULL,
	       "log('strip: ' + $('strip-from').textContent + ' / ' + $('strip-sel').textContent + ' / ' +\n"
	       "  $('strip-until').textContent);\n"
	       /* Four slots: from the middle of the first to the middle of the second. */
	       "drag($('strip'), 0.125, 0.375);\n"
	       "log('narrowed: ' + $('strip-sel').textContent + ' | ' + status() + ' | ' + hot(2));\n"
	       "log('hash: ' + location.hash);\n"
	       "drag($('strip'), 0.9, 0.9);\n"
	       "log('whole: ' + $('strip-sel').textContent + ' | ' + status());\n",
	       "strip: 2023-11-14 22:13:20 UTC / the whole range; drag to narrow it / 2023-11-14 22:14:00 UTC\n",
	       /* Slots 0 and 1: render 6, query 5, the worker's wait 4. */
	       "narrowed: 2023-11-14 22:13:20 UTC to 2023-11-14 22:13:40 UTC (20 s) | 10 frames drawn. "
	       "Click a frame to zoom into it. | render views:3 40.00% 40.00% | query db:6 33.33% 33.33%\n",
	       "hash: #r=0-1\n",
	       "whole: the whole range; drag to narrow it | 13 frames drawn.");
}

Test(page, hotspots_focus_and_sandwich)
{
	EXPECT(&shop, EXPORT_FLAMEGRAPH, NULL,
	       "log('hot: ' + hot(3));\n"
	       "click(row('query').cells[0]);\n"
	       "log('focus: ' + $('focus').textContent + ' | ' + status() + ' | ' + names());\n"
	       "log('outlined: ' + bars().filter(function (e) { return /\\bfn\\b/.test(e.className); })\n"
	       "  .map(function (e) { return e.textContent; }).join(','));\n"
	       "log('hash: ' + location.hash);\n"
	       "click(Array.prototype.find.call($('focus').querySelectorAll('button'),\n"
	       "  function (b) { return b.textContent === 'callers and callees'; }));\n"
	       "var g = $('sandwich').querySelectorAll('.graph');\n"
	       "log('sandwich: ' + status() + ' | ' + $('sandwich').querySelector('.sandhead').textContent);\n"
	       "log('callers: ' + names(g[0]) + ' | callees: ' + names(g[1]));\n"
	       /* Everything again, then the sandwich of the caller clicked in it. */
	       "click($('focus').querySelector('button:last-child'));\n"
	       "click(bar('Server.handle (server:21)', $('sandwich').querySelectorAll('.graph')[0]));\n"
	       "g = $('sandwich').querySelectorAll('.graph');\n"
	       "log('caller: ' + $('sandwich').querySelector('.sandhead').textContent + ' | callees: ' + names(g[1]));\n"
	       "click(document.querySelector('#hot th[data-sort=total]'));\n"
	       "log('by total: ' + hot(2));\n",
	       /* Own first: render 10, the worker's wait 8, query 5 of 29. */
	       "hot: render views:3 34.48% 34.48% | Condition.wait threading:327 27.59% 27.59% | "
	       "query db:6 17.24% 27.59%\n",
	       "focus: Focus: query (db:6) callers and callees source \xe2\x9c\x95  | 7 frames drawn. Click a frame to zoom "
	       "into it. | all,&lt;module&gt; (app:40),main (app:33),Server.serve (server:12),"
	       "Server.handle (server:21),query (db:8),&lt;native&gt;\n",
	       "outlined: query (db:8)\n",
	       "sandwich: Callers and callees of query: 7 frames drawn. Click a frame to take its function. | "
	       "query (db:6) \xe2\x80\x94 8 samples, 100.00% (own 5, 62.50%)\n",
	       "callers: query (db:6),Server.handle (server:21),Server.serve (server:12),main (app:33),"
	       "&lt;module&gt; (app:40) | callees: query (db:6),&lt;native&gt;\n",
	       "caller: Server.handle (server:18) \xe2\x80\x94 20 samples, 68.97% (own 0, 0.00%) | callees: "
	       "Server.handle (server:18),",
	       "by total: &lt;module&gt; app:1 0.00% 100.00% | main app:30 0.00% 72.41%\n");
}

Test(page, diff_colours)
{
	EXPECT(&shop_diff, EXPORT_FLAMEGRAPH, NULL,
	       "log('title: ' + document.title);\n"
	       "log('legend: ' + $('legend').textContent);\n"
	       "log('colours: query ' + rgb(bar('query (db:8)')) + ', render ' + rgb(bar('render (views:5)')) +\n"
	       "  ', wait ' + rgb(bar('Condition.wait (threading:355)')) + ', module ' + rgb(bar('<module> (app:40)')) +\n"
	       "  ', new ' + rgb(bar('Page.render (views:14)')));\n"
	       "bar('query (db:8)').dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: 5, clientY: 5}));\n"
	       "log('tip: ' + $('tip').lastChild.textContent);\n"
	       "log('hot: ' + hot(3));\n",
	       "title: service=shop \xe2\x80\x94 wall samples, 2023-11-14 23:13:20 UTC to 2023-11-15 00:13:20 UTC "
	       "against the base range 2023-11-14 22:13:20 UTC to 2023-11-14 23:13:20 UTC\n",
	       "legend: a larger share of the samples than in the base range",
	       "about the same (within 0.1 points)", "a smaller share",
	       /* query 10 % -> 28 %, render 50 % -> 34 %, the wait 40 % -> 28 %, the root module the same. */
	       "colours: query red, render blue, wait blue, module grey, new red\n",
	       "tip: base range 10.00% \xe2\x86\x92 27.59% (+17.59 points)\n",
	       /* By the change of own share: render -15.52, the wait -12.41, <native> +10.34. */
	       "hot: render views:3 34.48% 34.48% \xe2\x88\x92" "15.52 | Condition.wait threading:327 27.59% 27.59% "
	       "\xe2\x88\x92" "12.41 | &lt;native&gt; 10.34% 10.34% +10.34\n");
}

/* Everything a person set, as the page shows it: the same from the URL alone. */
#define SUMMARY                                                                                    \
	"function summary() { return [status(), $('matched').textContent, $('thread').value,\n"   \
	"  $('label').value, $('idle').checked, $('views').querySelector('[aria-pressed=true]').textContent,\n" \
	"  $('strip-sel').textContent, $('focus').textContent, hot(3), names()].join(' / '); }\n"

/* The text after "prefix" up to the end of its line in dom, malloc'd, with the DOM's "&amp;" as "&". */
static char *logged(const char *dom, const char *prefix)
{
	const char *at = strstr(dom, prefix);
	cr_assert_not_null(at, "no %s in the page:\n%s", prefix, dom);
	at += strlen(prefix);
	size_t len = strcspn(at, "\n");
	char *s = strndup(at, len);
	cr_assert_not_null(s);
	for (char *amp; (amp = strstr(s, "&amp;"));)
		memmove(amp + 1, amp + 5, strlen(amp + 5) + 1);
	return s;
}

Test(page, url_keeps_the_view)
{
	struct out o;
	export_ok(&shop, EXPORT_FLAMEGRAPH, &o);
	char *dom = page_dom(&o,
	                     DRIVE SUMMARY
	                     "var s = $('search'); s.value = 'render'; s.dispatchEvent(new Event('input'));\n"
	                     "choose('thread', 'MainThread (tid 101)');\n"
	                     "click($('views').querySelector('[data-v=flame]'));\n"
	                     "click(bar('Server.serve (server:12)'));\n"
	                     "drag($('strip'), 0.1, 0.6);\n"
	                     "click(row('render').cells[0]);\n"
	                     "log('hash: ' + location.hash);\n"
	                     "log('state: ' + summary());\n",
	                     NULL);
	char *hash = logged(dom, "hash: #"), *state = logged(dom, "state: ");
	cr_expect(strstr(hash, "v=flame") && strstr(hash, "q=render") && strstr(hash, "r=0-2") &&
	                  strstr(hash, "t=MainThread+%28tid+101%29") && strstr(hash, "z=") &&
	                  strstr(hash, "focus="),
	          "the URL lacks a setting: %s", hash);
	cr_expect(strstr(state, "zoomed into Server.serve"), "state: %s", state);
	/* A reload, or the link sent to someone: the page opens as it was left. */
	char *again = page_dom(&o, DRIVE SUMMARY "log('state: ' + summary());\n", hash);
	char *state2 = logged(again, "state: ");
	cr_expect_str_eq(state2, state);
	/* A link naming what the page does not have opens the whole profile. */
	char *bad = page_dom(&o, DRIVE SUMMARY "log('state: ' + summary());\n",
	                     "v=nope&t=nobody&r=9-99&z=77.1&fn=999&focus=-1&line=x");
	char *state3 = logged(bad, "state: ");
	cr_expect(strncmp(state3, "13 frames drawn. Click a frame", 30) == 0, "state: %s", state3);
	free(state3);
	free(bad);
	free(state2);
	free(again);
	free(state);
	free(hash);
	free(dom);
	free(o.buf);
}

/* ---- sources, line by line ---- */

Test(page, heatmap_lines_callers_callees)
{
	struct export_profile p = shop_heatmap();
	char *dom;
	static const char *const want[] = {
		/* The source view opens; the files by samples, server.py second after app.py. */
		"files: /srv/shop/app.py 100.00% | /srv/shop/server.py 68.97% | /srv/shop/views.py 41.38%",
		"note: read in pid 100's root\n",
		/* Lines 20 and 21: who is called from them and how much. */
		"line 20: 41.38% |  | 20 |         html = views.render(page)calls \xe2\x86\x92 render 34.48%"
		"\xe2\x86\x92 Page.render 6.90%\n",
		"line 21: 27.59% |  | 21 |         rows = db.query(\"SELECT 1\")  # &lt;/script&gt;&lt;b id=\"src\"&gt;"
		"not markup&lt;/b&gt;calls \xe2\x86\x92 query 27.59%\n",
		"def 18: Server.handle callers and callees called from: Server.serve (server:12) 100.00%\n",
		"at: L20\n",
		/* The callee's file: not read, said so, its lines with samples listed. */
		"callee: /srv/shop/db.py | Source not shown: not readable in pid 100's root, as its user (uid 0): "
		"No such file or directory | 6 8\n",
		/* The heat: the hottest line darkest. */
		"heat: true\n",
	};
	dom = page_expect(
		&p, EXPORT_HEATMAP, "file=/srv/shop/server.py&line=20",
		"function line(n) { var r = $('L' + n); return Array.prototype.map.call(r.cells,\n"
		"  function (c) { return c.textContent; }).join(' | '); }\n"
		"log('files: ' + Array.prototype.map.call($('files').children, function (a) {\n"
		"  return a.lastChild.textContent + ' ' + a.firstChild.textContent; }).join(' | '));\n"
		"log('note: ' + $('code').querySelector('.note').textContent);\n"
		"log('line 20: ' + line(20));\n"
		"log('line 21: ' + line(21));\n"
		"var def = $('L18').previousSibling;\n"
		"log('def 18: ' + def.textContent);\n"
		"log('at: ' + document.querySelector('#lines tr.at').id);\n"
		"var a20 = $('L20').cells[0].style.background, a21 = $('L21').cells[0].style.background;\n"
		"log('heat: ' + (a20 !== a21 && a20 !== '' && $('L5').cells[0].style.background === ''));\n"
		"var link = Array.prototype.find.call($('L21').querySelectorAll('a'), function (a) {\n"
		"  return /query/.test(a.textContent); });\n"
		"nav(link.getAttribute('href'));\n"
		"log('callee: ' + $('code').querySelector('h2').textContent + ' | ' +\n"
		"  $('code').querySelector('.note').textContent + ' | ' +\n"
		"  Array.prototype.map.call(document.querySelectorAll('#lines tr[id]'), function (r) {\n"
		"    return r.id.slice(1); }).join(' '));\n",
		want, COUNT(want));
	/* A line of source is text, never markup. */
	cr_expect_null(strstr(dom, "<b id=\"src\">"), "a source line became markup");
	free(dom);
	/* A flamegraph's source view lists the lines with samples and says why there is no text. */
	EXPECT(&shop, EXPORT_FLAMEGRAPH, "v=source&file=/srv/shop/server.py",
	       "log('note: ' + $('code').querySelector('.note').textContent);\n"
	       "log('lines: ' + Array.prototype.map.call(document.querySelectorAll('#lines tr[id]'), function (r) {\n"
	       "  return r.id.slice(1); }).join(' '));\n",
	       "note: This page holds no source text (pyprofd-ctl query --format heatmap writes one that does)",
	       "lines: 10 12 18 20 21\n");
}

/*
 * Opened with no file named, the source view shows the file where the
 * service's own code spends the most time: not app.py, under every sample,
 * nor threading.py, where the worker waits longest.
 */
Test(page, source_opens_on_the_hottest_own_file)
{
	static const struct export_stack waits_most[] = {
		{p_render, 5, 6, 140001, 1, 0, T0, false},
		{p_query, 5, 5, 140001, 1, 0, T0 + SLOT, false},
		{p_wait, 3, 20, 140002, 2, 20, T0, false},
	};
	struct export_profile p = shop_heatmap();
	p.stacks = waits_most;
	p.nstacks = COUNT(waits_most);
	EXPECT(&p, EXPORT_HEATMAP, "",
	       "log('opened: ' + $('code').querySelector('h2').textContent);\n",
	       "opened: /srv/shop/views.py\n");
}

/* Every view as a person sees it; $PYPROFD_SCREENSHOTS keeps them. */
Test(page, screenshots)
{
	struct out o;
	export_ok(&shop, EXPORT_FLAMEGRAPH, &o);
	page_screenshot(&o, NULL, "page-icicle", 1400, 700);
	page_screenshot(&o, "v=flame&q=query", "page-flame-search", 1400, 700);
	page_screenshot(&o, "v=sandwich&fn=3", "page-sandwich", 1400, 700);
	page_screenshot(&o, "r=2-3&idle=1", "page-narrowed-no-idle", 1400, 700);
	free(o.buf);
	export_ok(&shop_diff, EXPORT_FLAMEGRAPH, &o);
	page_screenshot(&o, NULL, "page-diff", 1400, 700);
	free(o.buf);
	struct export_profile p = shop_heatmap();
	export_ok(&p, EXPORT_HEATMAP, &o);
	page_screenshot(&o, "v=source&file=/srv/shop/server.py&line=20", "page-heatmap", 1400, 700);
	free(o.buf);
}

/* ---- export_sources_read: what is read, from where, and what is not ---- */

/* The start of a process in clock ticks after boot (/proc/PID/stat, field 22). */
static uint64_t start_time_of(pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *at = strrchr(buf, ')');
	cr_assert_not_null(at);
	unsigned long long v = 0;
	for (int field = 2; at && field < 22; field++)
		if ((at = strchr(at + 1, ' ')) && field == 21)
			v = strtoull(at + 1, NULL, 10);
	cr_assert(v > 0);
	return v;
}

/* The source of file in s, which must be there. */
static const struct export_source *source_of(const struct export_sources *s, const char *file)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i].file, file) == 0)
			return &s->v[i];
	cr_assert_fail("no source for %s", file);
	return NULL;
}

/* A profile of one frame per file (path[i] in dir, or as given when absolute or not a path). */
struct one_each {
	struct export_frame frames[8];
	uint32_t ids[8];
	struct export_stack stacks[8];
	struct export_thread thread;
	struct export_profile p;
	char files[8][PATH_MAX];
};

static void one_each(struct one_each *e, const char *dir, const char *const *names, size_t n,
                     pid_t pid, uint64_t start_time)
{
	memset(e, 0, sizeof *e);
	cr_assert(n <= 8);
	e->thread = (struct export_thread){.thread_id = 1, .native_id = pid, .name = "", .pid = pid,
	                                   .start_time = start_time};
	for (size_t i = 0; i < n; i++) {
		if (names[i][0] == '/' || names[i][0] == '<')
			snprintf(e->files[i], sizeof e->files[i], "%s", names[i]);
		else
			snprintf(e->files[i], sizeof e->files[i], "%s/%s", dir, names[i]);
		e->frames[i] = (struct export_frame){"f", e->files[i], 1, UW_FRAME_PYTHON, 1, NULL};
		e->ids[i] = (uint32_t)i;
		/* The first file the most sampled. */
		e->stacks[i] = (struct export_stack){&e->ids[i], 1, 10 - i, 1, 1, 0, 0, false};
	}
	e->p = (struct export_profile){.frames = e->frames, .nframes = (uint32_t)n, .stacks = e->stacks,
	                               .nstacks = (uint32_t)n, .threads = &e->thread, .nthreads = 1,
	                               .rate_hz = 100, .from_unix = 1, .until_unix = 2};
}

/* A directory any user may enter, under a scratch one. */
static void open_dir(char *dir, size_t len)
{
	char base[PATH_MAX - 16];
	scratch_dir(base, sizeof base);
	cr_assert_eq(chmod(base, 0755), 0);
	snprintf(dir, len, "%s/src", base);
	cr_assert_eq(mkdir(dir, 0755), 0);
}

Test(page, sources_of_a_running_process)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	open_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/ok.py", dir);
	write_text_file(path, "def f():\n    return 1\n");
	snprintf(path, sizeof path, "%s/nul.py", dir);
	scratch_write(path, "a\0b", 3);
	snprintf(path, sizeof path, "%s/big.py", dir);
	char *big = malloc(EXPORT_SOURCE_MAX_FILE + 1);
	cr_assert_not_null(big);
	memset(big, '#', EXPORT_SOURCE_MAX_FILE + 1);
	scratch_write(path, big, EXPORT_SOURCE_MAX_FILE + 1);
	free(big);
	snprintf(path, sizeof path, "%s/fifo.py", dir);
	cr_assert_eq(mkfifo(path, 0644), 0);
	static const char *const names[] = {"ok.py", "nul.py", "big.py", "fifo.py", "<string>",
	                                    "missing.py"};
	struct one_each e;
	one_each(&e, dir, names, COUNT(names), getpid(), start_time_of(getpid()));
	struct export_sources s;
	cr_assert_eq(export_sources_read(&e.p, EXPORT_SOURCE_MAX_TOTAL, &s), 0);
	cr_expect_eq(s.n, COUNT(names));
	/* The most sampled first. */
	cr_expect_str_eq(s.v[0].file, e.files[0]);
	const struct export_source *ok = source_of(&s, e.files[0]);
	cr_expect(ok->text && ok->len == 22 && memcmp(ok->text, "def f():", 8) == 0);
	char want[128];
	snprintf(want, sizeof want, "read in pid %d's root", (int)getpid());
	cr_expect_str_eq(ok->note, want);
	static const char *const notes[] = {
		"not shown: not text (it holds a NUL byte)",
		"not embedded: 1048577 bytes, more than the 1048576 a page holds of one file",
		"not shown: not a regular file",
		"not a file: the interpreter names it so",
		"No such file or directory",
	};
	for (size_t i = 1; i < COUNT(names); i++) {
		const struct export_source *src = source_of(&s, e.files[i]);
		cr_expect_null(src->text, "%s was read", e.files[i]);
		cr_expect(strstr(src->note, notes[i - 1]), "%s: %s", e.files[i], src->note);
	}
	export_sources_free(&s);
	/* Past the bytes a page may hold, the files with fewer samples are left out. */
	cr_assert_eq(export_sources_read(&e.p, 10, &s), 0);
	cr_expect_null(source_of(&s, e.files[0])->text);
	cr_expect(strstr(source_of(&s, e.files[0])->note, "not embedded: the page's 10 bytes"),
	          "%s", source_of(&s, e.files[0])->note);
	export_sources_free(&s);
}

/* A process of the user nobody (setpriv), idle until killed. */
static pid_t nobody_sleeps(void)
{
	char *const argv[] = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
	                      "sleep", "600", NULL};
	pid_t pid = spawn_process(argv, NULL);
	/* The exec of sleep, after setpriv's: until then the process is root's. */
	for (int i = 0; i < 500; i++) {
		char path[64], link[PATH_MAX];
		snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
		ssize_t n = readlink(path, link, sizeof link - 1);
		if (n > 0 && (link[n] = '\0', strstr(link, "sleep")))
			return pid;
		usleep(10000);
	}
	cr_assert_fail("setpriv did not exec sleep");
	return pid;
}

Test(page, sources_read_as_the_process_user)
{
	if (geteuid() != 0)
		cr_skip_test("only root reads as another user");
	char dir[PATH_MAX], closed[PATH_MAX], path[PATH_MAX + 32];
	open_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/public.py", dir);
	write_text_file(path, "print('anyone')\n");
	snprintf(path, sizeof path, "%s/secret.py", dir);
	write_text_file(path, "TOKEN = 'root only'\n");
	cr_assert_eq(chmod(path, 0600), 0);
	/* A file anyone may read, in a directory nobody may not enter. */
	scratch_dir(closed, sizeof closed);
	snprintf(path, sizeof path, "%s/hidden.py", closed);
	write_text_file(path, "HIDDEN = 1\n");
	cr_assert_eq(chmod(path, 0644), 0);
	pid_t pid = nobody_sleeps();
	const char *const names[] = {"public.py", "secret.py", path};
	struct one_each e;
	one_each(&e, dir, names, COUNT(names), pid, start_time_of(pid));
	struct export_sources s;
	cr_assert_eq(export_sources_read(&e.p, EXPORT_SOURCE_MAX_TOTAL, &s), 0);
	cr_expect_not_null(source_of(&s, e.files[0])->text, "%s", source_of(&s, e.files[0])->note);
	for (size_t i = 1; i < 3; i++) {
		const struct export_source *src = source_of(&s, e.files[i]);
		cr_expect_null(src->text, "%s was read for nobody's process", e.files[i]);
		cr_expect(strstr(src->note, "as its user (uid 65534): Permission denied"), "%s", src->note);
	}
	export_sources_free(&s);
	/* This process's own rights are its own again: the secret reads for it. */
	one_each(&e, dir, names, COUNT(names), getpid(), start_time_of(getpid()));
	cr_assert_eq(export_sources_read(&e.p, EXPORT_SOURCE_MAX_TOTAL, &s), 0);
	cr_expect_not_null(source_of(&s, e.files[1])->text, "%s", source_of(&s, e.files[1])->note);
	export_sources_free(&s);
	kill(pid, SIGKILL);
}

Test(page, sources_of_an_exited_process)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	open_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/public.py", dir);
	write_text_file(path, "print('anyone')\n");
	snprintf(path, sizeof path, "%s/private.py", dir);
	write_text_file(path, "PRIVATE = 1\n");
	cr_assert_eq(chmod(path, 0600), 0);
	/* A process gone, its pid perhaps another's now: a start time no process of that pid has. */
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0)
		_exit(0);
	uint64_t started = start_time_of(getpid());
	waitpid(pid, NULL, 0);
	static const char *const names[] = {"public.py", "private.py"};
	struct one_each e;
	one_each(&e, dir, names, COUNT(names), pid, started);
	struct export_sources s;
	cr_assert_eq(export_sources_read(&e.p, EXPORT_SOURCE_MAX_TOTAL, &s), 0);
	const struct export_source *pub = source_of(&s, e.files[0]), *priv = source_of(&s, e.files[1]);
	cr_expect_not_null(pub->text);
	/* Changed after the range the samples cover (1970): said. */
	cr_expect(strstr(pub->note, "the process has exited: this host's file as it is now; changed at "),
	          "%s", pub->note);
	cr_expect_null(priv->text);
	cr_expect_str_eq(priv->note, "not shown: the process has exited, and this host's file is not "
	                             "readable by everyone");
	export_sources_free(&s);
}
