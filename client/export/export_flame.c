/*
 * The flamegraph: one HTML page with its CSS and script inline, so it opens
 * from a file with no network.  The profile goes in as JSON (distinct frames
 * and the stacks over them); the script merges the stacks into a call tree
 * and draws it as an icicle (root on top) of absolutely positioned divs, each
 * holding its function's name as text, with search, zoom and tooltips.
 *
 * Nothing from the profile is written into the HTML except inside that JSON,
 * and there every '<', '>' and '&' is a \uXXXX escape: no name can close the
 * script element or open a comment inside it.  The script puts names into the
 * page as text nodes only, never as markup.
 */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "export_int.h"

static const char page_head[] =
	"<!DOCTYPE html>\n"
	"<html lang=\"en\">\n"
	"<head>\n"
	"<meta charset=\"utf-8\">\n"
	"<meta name=\"generator\" content=\"pyprofd\">\n"
	"<title>pyprofd flamegraph</title>\n"
	"<style>\n"
	"body { margin: 0; font: 13px system-ui, sans-serif; color: #222; background: #fff; }\n"
	"header { padding: 8px 12px; border-bottom: 1px solid #ddd; }\n"
	"h1 { font-size: 16px; margin: 0 0 4px; word-break: break-all; }\n"
	"#meta, #status { color: #555; }\n"
	"#controls { margin-top: 6px; display: flex; gap: 8px; align-items: center; }\n"
	"#search { width: 24em; }\n"
	"#matched { color: #a0008a; font-weight: bold; }\n"
	"#graph { position: relative; margin: 8px 12px; }\n"
	".fr { position: absolute; height: 17px; line-height: 17px; box-sizing: border-box;\n"
	"      padding: 0 3px; border: 1px solid #fff; border-width: 0 1px 1px 0;\n"
	"      overflow: hidden; white-space: nowrap; text-overflow: ellipsis;\n"
	"      font: 12px ui-monospace, monospace; cursor: pointer; }\n"
	".fr:hover { filter: brightness(0.85); }\n"
	".fr.up { opacity: 0.55; }\n"
	".fr.hit { background: #e055d0 !important; color: #fff; }\n"
	"#tip { position: absolute; pointer-events: none; background: #fffff0; border: 1px solid #999;\n"
	"       padding: 4px 6px; font: 12px ui-monospace, monospace; max-width: 60em;\n"
	"       word-break: break-all; box-shadow: 2px 2px 4px rgba(0,0,0,.2); }\n"
	"</style>\n"
	"</head>\n"
	"<body>\n"
	"<header>\n"
	"<h1 id=\"title\">pyprofd flamegraph</h1>\n"
	"<div id=\"meta\"></div>\n"
	"<div id=\"controls\">\n"
	"<input id=\"search\" type=\"search\" placeholder=\"Search functions and files\">\n"
	"<button id=\"reset\" type=\"button\">Reset zoom</button>\n"
	"<span id=\"matched\"></span>\n"
	"</div>\n"
	"<div id=\"status\">This page needs JavaScript to draw the graph.</div>\n"
	"</header>\n"
	"<div id=\"graph\"></div>\n"
	"<div id=\"tip\" hidden></div>\n"
	"<script type=\"application/json\" id=\"profile\">";

static const char page_tail[] =
	"</script>\n"
	"<script>\n"
	"'use strict';\n"
	"(function () {\n"
	"  var D = JSON.parse(document.getElementById('profile').textContent);\n"
	"  var F = D.frames, ROW = 18;\n"
	"  var $ = function (id) { return document.getElementById(id); };\n"
	"  var graph = $('graph'), tip = $('tip'), search = $('search');\n"
	"\n"
	"  // The call tree: stacks merged from the root down.  v: samples of the\n"
	"  // node and everything under it; self: samples that stopped in it.\n"
	"  function mk(f, up) {\n"
	"    return { f: f, up: up, v: 0, self: 0, kids: new Map(), list: [],\n"
	"             depth: up ? up.depth + 1 : 0 };\n"
	"  }\n"
	"  var root = mk(-1, null);\n"
	"  D.stacks.forEach(function (s) {\n"
	"    var n = root;\n"
	"    n.v += s[0];\n"
	"    for (var i = 1; i < s.length; i++) {\n"
	"      var k = n.kids.get(s[i]);\n"
	"      if (!k) { k = mk(s[i], n); n.kids.set(s[i], k); n.list.push(k); }\n"
	"      k.v += s[0];\n"
	"      n = k;\n"
	"    }\n"
	"    n.self += s[0];\n"
	"  });\n"
	"  function name(n) { return n.f < 0 ? 'all' : F[n.f][0]; }\n"
	"  function where(n) {\n"
	"    if (n.f < 0 || !F[n.f][1]) return '';\n"
	"    return F[n.f][2] >= 0 ? F[n.f][1] + ':' + F[n.f][2] : F[n.f][1];\n"
	"  }\n"
	"  // Children in name order, as flamegraph.pl draws them; no recursion, so\n"
	"  // a deep stack cannot overflow the script's own stack.\n"
	"  var all = [root];\n"
	"  for (var i = 0; i < all.length; i++) {\n"
	"    all[i].list.sort(function (a, b) {\n"
	"      var x = name(a), y = name(b);\n"
	"      return x < y ? -1 : x > y ? 1 : a.f - b.f;\n"
	"    });\n"
	"    for (var j = 0; j < all[i].list.length; j++) all.push(all[i].list[j]);\n"
	"  }\n"
	"\n"
	"  function color(n) {\n"
	"    if (n.f < 0) return 'hsl(0,0%,82%)';\n"
	"    if (F[n.f][3] !== 0) return 'hsl(210,12%,78%)'; // <native> and <GC> markers\n"
	"    var h = 0, s = name(n);\n"
	"    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0;\n"
	"    return 'hsl(' + (h % 50) + ',' + (65 + h % 20) + '%,' + (58 + (h >>> 8) % 14) + '%)';\n"
	"  }\n"
	"  function pct(v) { return root.v ? (100 * v / root.v).toFixed(2) + '%' : '0%'; }\n"
	"\n"
	"  // Search: a case-insensitive substring of the function or the file.\n"
	"  var term = '';\n"
	"  function hit(n) {\n"
	"    if (!term || n.f < 0) return false;\n"
	"    return F[n.f][0].toLowerCase().indexOf(term) >= 0 ||\n"
	"      F[n.f][1].toLowerCase().indexOf(term) >= 0;\n"
	"  }\n"
	"  // Samples under a match, each counted once: a match inside a match adds nothing.\n"
	"  function matched() {\n"
	"    var sum = 0, todo = [root];\n"
	"    while (todo.length) {\n"
	"      var n = todo.pop();\n"
	"      if (hit(n)) sum += n.v;\n"
	"      else for (var i = 0; i < n.list.length; i++) todo.push(n.list[i]);\n"
	"    }\n"
	"    return sum;\n"
	"  }\n"
	"\n"
	"  var zoom = root, drawn = [];\n"
	"  function bar(frag, n, x, w) {\n"
	"    var el = document.createElement('div');\n"
	"    el.className = 'fr' + (n.depth < zoom.depth ? ' up' : '') + (hit(n) ? ' hit' : '');\n"
	"    el.style.left = (100 * x) + '%';\n"
	"    el.style.width = (100 * w) + '%';\n"
	"    el.style.top = (n.depth * ROW) + 'px';\n"
	"    el.style.background = color(n);\n"
	"    el.textContent = name(n);\n"
	"    el.dataset.i = drawn.length;\n"
	"    drawn.push(n);\n"
	"    frag.appendChild(el);\n"
	"  }\n"
	"  // The zoomed node spans the width, its callers above it too; frames\n"
	"  // narrower than half a pixel are left out with everything they call.\n"
	"  function render() {\n"
	"    var frag = document.createDocumentFragment(), deepest = zoom.depth;\n"
	"    var minw = 0.5 / Math.max(graph.clientWidth || 0, 200);\n"
	"    drawn = [];\n"
	"    var callers = [];\n"
	"    for (var a = zoom.up; a; a = a.up) callers.unshift(a);\n"
	"    callers.forEach(function (c) { bar(frag, c, 0, 1); });\n"
	"    var todo = [[zoom, 0]];\n"
	"    while (todo.length) {\n"
	"      var t = todo.pop(), n = t[0], x = t[1];\n"
	"      var w = zoom.v ? n.v / zoom.v : 1;\n"
	"      if (w < minw) continue;\n"
	"      bar(frag, n, x, w);\n"
	"      deepest = Math.max(deepest, n.depth);\n"
	"      for (var i = 0; i < n.list.length; i++) {\n"
	"        todo.push([n.list[i], x]);\n"
	"        x += zoom.v ? n.list[i].v / zoom.v : 0;\n"
	"      }\n"
	"    }\n"
	"    graph.textContent = '';\n"
	"    graph.appendChild(frag);\n"
	"    graph.style.height = ((deepest + 1) * ROW) + 'px';\n"
	"    $('status').textContent = root.v ? drawn.length + ' frames drawn' +\n"
	"      (zoom !== root ? ', zoomed into ' + name(zoom) + ' (' + pct(zoom.v) + ')' : '') +\n"
	"      '. Click a frame to zoom into it.' : 'No samples in this profile.';\n"
	"    $('matched').textContent = term ?\n"
	"      'Matched: ' + pct(matched()) + ' of samples' : '';\n"
	"  }\n"
	"\n"
	"  function iso(s) {\n"
	"    return new Date(s * 1000).toISOString().replace('T', ' ').replace(/\\.\\d+Z$/, ' UTC');\n"
	"  }\n"
	"  var title = (D.name || 'pyprofd profile') + ' \\u2014 ' + (D.mode || '?') + ' samples';\n"
	"  if (D.until > 0) title += ', ' + iso(D.from) + ' to ' + iso(D.until);\n"
	"  document.title = title;\n"
	"  $('title').textContent = title;\n"
	"  $('meta').textContent = D.total + ' samples at ' + D.rate_hz + ' Hz, ' +\n"
	"    (all.length - 1) + ' distinct call paths';\n"
	"\n"
	"  function target(e) {\n"
	"    var el = e.target.closest ? e.target.closest('.fr') : null;\n"
	"    return el ? drawn[+el.dataset.i] : null;\n"
	"  }\n"
	"  graph.addEventListener('click', function (e) {\n"
	"    var n = target(e);\n"
	"    if (n) { zoom = n; tip.hidden = true; render(); }\n"
	"  });\n"
	"  graph.addEventListener('mousemove', function (e) {\n"
	"    var n = target(e);\n"
	"    if (!n) { tip.hidden = true; return; }\n"
	"    tip.textContent = '';\n"
	"    var counts = n.v + ' samples, ' + pct(n.v) + ' (own ' + n.self + ', ' + pct(n.self) + ')';\n"
	"    [name(n), where(n), counts]\n"
	"      .forEach(function (line) {\n"
	"        if (!line) return;\n"
	"        var d = document.createElement('div');\n"
	"        d.textContent = line;\n"
	"        tip.appendChild(d);\n"
	"      });\n"
	"    tip.hidden = false;\n"
	"    var left = e.pageX + 12, room = document.documentElement.clientWidth - tip.offsetWidth - 4;\n"
	"    tip.style.left = Math.max(0, Math.min(left, room)) + 'px';\n"
	"    tip.style.top = (e.pageY + 14) + 'px';\n"
	"  });\n"
	"  graph.addEventListener('mouseleave', function () { tip.hidden = true; });\n"
	"  $('reset').addEventListener('click', function () { zoom = root; render(); });\n"
	"  search.addEventListener('input', function () {\n"
	"    term = search.value.trim().toLowerCase();\n"
	"    render();\n"
	"  });\n"
	"  document.addEventListener('keydown', function (e) {\n"
	"    if (e.key === 'Escape') { zoom = root; render(); }\n"
	"  });\n"
	"  render();\n"
	"})();\n"
	"</script>\n"
	"</body>\n"
	"</html>\n";

/* json_dump_callback's sink: writes the JSON with '<', '>' and '&' escaped. */
static int emit_escaped(const char *buf, size_t len, void *data)
{
	FILE *out = data;
	size_t start = 0;
	for (size_t i = 0; i < len; i++) {
		const char *esc = buf[i] == '<'   ? "\\u003c"
		                  : buf[i] == '>' ? "\\u003e"
		                  : buf[i] == '&' ? "\\u0026"
		                                  : NULL;
		if (!esc)
			continue;
		/* Outside strings JSON has none of the three, so this is always inside one. */
		if (fwrite(buf + start, 1, i - start, out) != i - start || fputs(esc, out) == EOF)
			return -1;
		start = i + 1;
	}
	return fwrite(buf + start, 1, len - start, out) == len - start ? 0 : -1;
}

/*
 * The page's data: {name, mode, rate_hz, from, until, total, frames: [[function
 * (the qualified name), file, line, kind, first_line]], stacks: [[count,
 * frame...]], threads: [title], stack_threads: [thread index or -1, per
 * stack], stack_idle: [idle samples, per stack]}, frames the view's distinct
 * ones, stacks root first.
 */
static json_t *page_data(const struct export_view *v)
{
	const struct export_profile *p = v->p;
	json_t *frames, *stacks, *doc = export_json_doc(v, "total", &frames, &stacks);
	json_t *threads = json_array(), *stack_threads = json_array(), *stack_idle = json_array();
	if (!doc || export_json_set(doc, "threads", threads) ||
	    export_json_set(doc, "stack_threads", stack_threads) ||
	    export_json_set(doc, "stack_idle", stack_idle))
		goto fail;
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (export_json_add(threads, json_string(v->thread_title[i])))
			goto fail;
	for (uint32_t u = 0; u < v->nuniq; u++) {
		uint32_t i = v->frame_rep[u];
		json_t *f = json_array();
		if (export_json_add(frames, f) || export_json_add(f, json_string(v->function[i])) ||
		    export_json_add(f, json_string(v->file[i])) ||
		    export_json_add(f, json_integer(p->frames[i].line)) ||
		    export_json_add(f, json_integer(p->frames[i].kind)) ||
		    export_json_add(f, json_integer(p->frames[i].first_line)))
			goto fail;
	}
	for (uint32_t s = 0; s < p->nstacks; s++) {
		const struct export_stack *st = &p->stacks[s];
		if (!st->count)
			continue;
		json_t *a = json_array();
		if (export_json_add(stacks, a) ||
		    export_json_add(a, json_integer((json_int_t)st->count)) ||
		    export_json_add(stack_threads, json_integer((json_int_t)st->thread - 1)) ||
		    export_json_add(stack_idle, json_integer((json_int_t)st->idle)))
			goto fail;
		for (uint32_t d = 0; d < st->depth; d++)
			if (export_json_add(a, json_integer(v->frame_id[st->frames[d]])))
				goto fail;
	}
	return doc;
fail:
	json_decref(doc);
	return NULL;
}

int export_write_flamegraph(const struct export_view *v, FILE *out)
{
	json_t *data = page_data(v);
	if (!data)
		return errno = ENOMEM, -1;
	errno = 0;
	int r = export_puts(out, page_head) == 0 &&
	                json_dump_callback(data, emit_escaped, out, JSON_COMPACT) == 0 &&
	                export_puts(out, page_tail) == 0
	            ? 0
	            : -1;
	if (r < 0 && !errno)
		errno = ENOMEM;
	json_decref(data);
	return r;
}
