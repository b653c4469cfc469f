/*
 * The profile page on a large profile: 50,000 distinct stacks (a service's
 * day: 8 threads, 240 time slots, 2,000 functions in 200 files, stacks 8 to
 * 48 frames deep sharing their roots as real ones do), written by the
 * export library, then opened in headless Chromium, where a script times
 * what a person does: the first drawing, a search, a thread, the idle
 * toggle, a time range, a zoom, a sandwich, the hotspots sorted, the
 * source view.  Prints figures; passes or fails on nothing.
 *
 *   make bench-page            (BENCH_ARGS: the number of stacks)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "export.h"

#define FUNCS 2000
#define FILES 200
#define THREADS 8
#define SLOTS 240
#define T0 1700000040 /* a multiple of the 60 s slots */

static double bench_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double bench_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t lcg(uint64_t *seed)
{
	*seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
	return *seed >> 33;
}

/* Timed in the page, after its own script: one line each, "name ms". */
static const char drive[] =
	"<pre id=\"log\"></pre><script>\n"
	"var first = performance.now();\n"
	"document.body.offsetHeight;\n"
	"var out = ['load ' + first.toFixed(0), 'layout ' + (performance.now() - first).toFixed(0)];\n"
	"function $(id) { return document.getElementById(id); }\n"
	"function time(name, f) { var t = performance.now(); f(); document.body.offsetHeight;\n"
	"  out.push(name + ' ' + (performance.now() - t).toFixed(0)); }\n"
	"function choose(id, v) { var s = $(id); s.value = v; s.dispatchEvent(new Event('change')); }\n"
	"out.push('bars ' + document.querySelectorAll('#graph .fr').length);\n"
	"time('search', function () { var s = $('search'); s.value = 'f1'; s.dispatchEvent(new Event('input')); });\n"
	"time('search_clear', function () { var s = $('search'); s.value = ''; s.dispatchEvent(new Event('input')); });\n"
	"time('thread', function () { choose('thread', $('thread').options[2].value); });\n"
	"time('all_threads', function () { choose('thread', ''); });\n"
	"time('idle', function () { $('idle').click(); });\n"
	"time('strip', function () { var r = $('strip').getBoundingClientRect();\n"
	"  $('strip').dispatchEvent(new MouseEvent('mousedown', {bubbles: true, clientX: r.left + r.width * 0.2, clientY: r.top + 5}));\n"
	"  window.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * 0.6, clientY: r.top + 5}));\n"
	"  window.dispatchEvent(new MouseEvent('mouseup', {clientX: r.left + r.width * 0.6, clientY: r.top + 5})); });\n"
	"time('zoom', function () { var b = document.querySelectorAll('#graph .fr')[5];\n"
	"  b.dispatchEvent(new MouseEvent('click', {bubbles: true})); });\n"
	"time('sandwich', function () { var r = document.querySelector('#hot tr.row');\n"
	"  r.dispatchEvent(new MouseEvent('dblclick', {bubbles: true})); });\n"
	"time('sort_total', function () { document.querySelector('#hot th[data-sort=total]').click(); });\n"
	"time('source', function () { $('views').querySelector('[data-v=source]').click(); });\n"
	"time('flame', function () { $('views').querySelector('[data-v=flame]').click(); });\n"
	"$('log').textContent = out.join('\\n');\n"
	"</script>\n";

int main(int argc, char **argv)
{
	uint32_t nstacks = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 50000;
	if (nstacks == 0)
		nstacks = 50000;
	/* A frame per (function, line): each function at one of 4 lines. */
	uint32_t nframes = FUNCS * 4;
	struct export_frame *frames = calloc(nframes, sizeof *frames);
	char (*names)[32] = calloc(FUNCS, sizeof *names), (*files)[48] = calloc(FILES, sizeof *files);
	struct export_stack *stacks = calloc(nstacks, sizeof *stacks);
	uint32_t *ids = calloc((size_t)nstacks * 48, sizeof *ids);
	struct export_thread threads[THREADS];
	if (!frames || !names || !files || !stacks || !ids)
		return 1;
	for (int f = 0; f < FILES; f++)
		snprintf(files[f], sizeof files[f], "/srv/app/pkg%d/mod%d.py", f % 10, f);
	for (int f = 0; f < FUNCS; f++) {
		snprintf(names[f], sizeof names[f], "Class%d.f%d", f % 37, f);
		for (int l = 0; l < 4; l++)
			frames[f * 4 + l] = (struct export_frame){names[f], files[f % FILES], 10 * f % 900 + l + 2,
			                                           UW_FRAME_PYTHON, 10 * f % 900 + 1};
	}
	for (int t = 0; t < THREADS; t++)
		threads[t] = (struct export_thread){.thread_id = 1000 + (uint64_t)t, .native_id = 100 + t,
		                                    .name = t ? "worker" : "MainThread", .pid = 42};
	uint64_t seed = 7;
	for (uint32_t s = 0; s < nstacks; s++) {
		uint32_t depth = 8 + (uint32_t)(lcg(&seed) % 41), *st = ids + (size_t)s * 48;
		/* Roots shared: the first frames from a few functions, the rest spread wider. */
		for (uint32_t d = 0; d < depth; d++) {
			uint64_t span = d < 3 ? 2 + d : d < 8 ? 40 : FUNCS;
			st[d] = (uint32_t)((lcg(&seed) % span) * 4 + lcg(&seed) % 4) % nframes;
		}
		uint64_t count = 1 + lcg(&seed) % 20;
		stacks[s] = (struct export_stack){.frames = st, .depth = depth, .count = count,
		                                  .idle = lcg(&seed) % 4 == 0 ? count : 0,
		                                  .thread = 1 + (uint32_t)(lcg(&seed) % THREADS),
		                                  .slot_start = T0 + 60 * (int64_t)(lcg(&seed) % SLOTS)};
		stacks[s].thread_id = threads[stacks[s].thread - 1].thread_id;
	}
	struct export_profile p = {
		.frames = frames, .nframes = nframes, .stacks = stacks, .nstacks = nstacks,
		.threads = threads, .nthreads = THREADS, .name = "bench", .mode = "wall", .rate_hz = 100,
		.from_unix = T0, .until_unix = T0 + 60.0 * SLOTS, .slot_seconds = 60,
	};
	char dir[] = "/tmp/pyprofd-bench-page.XXXXXX", page[64], cmd[512];
	if (!mkdtemp(dir))
		return 1;
	snprintf(page, sizeof page, "%s/page.html", dir);
	char *buf = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&buf, &len);
	double t = bench_now_s(), cpu = bench_cpu_s();
	if (!mem || export_write(&p, EXPORT_FLAMEGRAPH, mem) != 0 || fclose(mem) != 0)
		return 1;
	double write_s = bench_now_s() - t;
	cpu = bench_cpu_s() - cpu;
	/* The timing script after the page's own, before </body>. */
	char *body = strstr(buf, "</body>");
	FILE *out = fopen(page, "w");
	if (!body || !out)
		return 1;
	fwrite(buf, 1, (size_t)(body - buf), out);
	fputs(drive, out);
	fputs(body, out);
	fclose(out);
	/* Times are wall-clock: a busy machine stretches them, so say how busy. */
	double load = 0;
	FILE *la = fopen("/proc/loadavg", "r");
	if (la) {
		if (fscanf(la, "%lf", &load) != 1)
			load = 0;
		fclose(la);
	}
	printf("load average %.1f on %ld CPUs\n", load, sysconf(_SC_NPROCESSORS_ONLN));
	printf("page: %u stacks, %u frames, %d threads, %d slots: %.1f MB written in %.0f ms (%.0f ms of CPU)\n",
	       nstacks, nframes, THREADS, SLOTS, (double)len / 1e6, write_s * 1e3, cpu * 1e3);
	snprintf(cmd, sizeof cmd,
	         "chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-dev-shm-usage "
	         "--user-data-dir=%s/chromium --window-size=1400,900 --dump-dom file://%s 2>/dev/null",
	         dir, page);
	t = bench_now_s();
	FILE *dom = popen(cmd, "r");
	char line[4096];
	bool in_log = false;
	printf("chromium (in the page, ms after navigation starts; then per action, drawing included):\n");
	while (dom && fgets(line, sizeof line, dom)) {
		char *at = strstr(line, "<pre id=\"log\">");
		if (at) {
			in_log = true;
			memmove(line, at + 14, strlen(at + 14) + 1);
		}
		char *end = strstr(line, "</pre>");
		if (end)
			*end = '\0';
		if (in_log && *line)
			printf("  %s%s", line, strchr(line, '\n') ? "" : "\n");
		if (end)
			in_log = false;
	}
	int rc = dom ? pclose(dom) : -1;
	printf("chromium: %.1f s from start to exit (rc %d)\n", bench_now_s() - t, rc);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "page_bench: %s left behind\n", dir);
	free(buf);
	free(frames);
	free(names);
	free(files);
	free(stacks);
	free(ids);
	return 0;
}
