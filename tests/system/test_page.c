/*
 * The profile page end to end, with the real daemon, pyprofd-ctl and real
 * interpreters: a query's page carries its samples over time; a heatmap
 * carries the sources read where the process runs (through its root, so a
 * chrooted interpreter's own library files, which this host does not
 * have), and says what it could not read once the process has gone; diff
 * draws two ranges in one page; pyprofd record writes a heatmap too.  What
 * the page does with its data is tested in Chromium by tests/export.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(pages, .init = helpers_init, .fini = helpers_fini);

/* Samples before looking: every thread of the target at 200 Hz, in several 1 s buckets. */
#define PAGES_SAMPLE_MS 2600

/* The data of a page pyprofd wrote (the JSON of its "profile" element), parsed. */
static json_t *page_data_of(const char *html, size_t len)
{
	static const char open[] = "<script type=\"application/json\" id=\"profile\">";
	const char *start = memmem(html, len, open, sizeof open - 1);
	cr_assert_not_null(start, "not a pyprofd page");
	start += sizeof open - 1;
	const char *end = strstr(start, "</script>");
	cr_assert_not_null(end);
	json_error_t e;
	json_t *doc = json_loadb(start, (size_t)(end - start), 0, &e);
	cr_assert_not_null(doc, "the page's data: %s", e.text);
	return doc;
}

static json_t *page_file_data(const char *path)
{
	size_t len;
	char *html = file_bytes(path, &len);
	json_t *doc = page_data_of(html, len);
	free(html);
	return doc;
}

/* The [file, text, note] of the source whose file ends in suffix, or NULL. */
static json_t *source_ending(json_t *doc, const char *suffix)
{
	size_t i, n = strlen(suffix);
	json_t *s;
	json_array_foreach(json_object_get(doc, "sources"), i, s) {
		const char *file = json_string_value(json_array_get(s, 0));
		size_t len = strlen(file);
		if (len >= n && strcmp(file + len - n, suffix) == 0)
			return s;
	}
	return NULL;
}

static const char *text_of(json_t *source) { return json_string_value(json_array_get(source, 1)); }
static const char *note_of(json_t *source) { return json_string_value(json_array_get(source, 2)); }

/* A daemon keeping 1 s buckets, flushing every second. */
static void pages_daemon(struct daemon *d)
{
	char dir[PATH_MAX - 64], conf[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(conf, sizeof conf, "%s/pyprofd.conf", dir);
	write_text_file(conf, "[storage]\nbucket_seconds = 1\nflush_interval_s = 1\n");
	const char *extra[] = {"--config", conf, NULL};
	daemon_start(d, extra);
}

/* `pyprofd-ctl query --pid PID --format F -o OUT`, which must succeed. */
static void query_page(const struct daemon *d, const char *pid, const char *format, const char *out)
{
	const char *args[] = {"query", "--pid", pid, "--format", format, "-o", out, NULL};
	ctl_ok(d, args);
}

/*
 * A heatmap of a host interpreter and of one in a root of its own: the
 * script and the interpreter's threading.py read in the process's root
 * while it runs (the rooted one's threading.py is not on this host at
 * all); once it has exited, the host's files as they are now, and a note
 * for what this host does not have.
 */
Test(pages, heatmap_reads_sources_where_the_process_runs, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX), rooted = n;
	for (size_t i = 0; i < n; i++)
		if (pys[i].root_len && rooted == n)
			rooted = i;
	const struct python *use[2] = {&pys[0], rooted < n ? &pys[rooted] : NULL};
	if (!use[1])
		cr_log_info("no interpreter in a root of its own (make pythons): only the host's is tried");
	for (size_t k = 0; k < 2 && use[k]; k++) {
		char why[PATH_MAX];
		cr_log_info("%s", python_describe(use[k], why, sizeof why));
		struct daemon d;
		pages_daemon(&d);
		struct test_target t;
		test_target_start(&t, use[k], "views");
		json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
		char pid[16], page[PATH_MAX + 16], want[64];
		pid_text(t.pid, pid, sizeof pid);
		const char *attach[] = {"attach", pid, "--rate", "200", NULL};
		ctl_ok(&d, attach);
		pause_ms(PAGES_SAMPLE_MS);
		snprintf(page, sizeof page, "%s/heat.html", t.dir);
		query_page(&d, pid, "heatmap", page);
		json_t *doc = page_file_data(page);
		/* Its samples over time, in slots of the history's 1 s buckets. */
		cr_expect_eq(jint(doc, "slot_seconds"), 1);
		cr_expect_geq(jint(doc, "nslots"), 2);
		cr_expect_str_eq(json_string_value(json_object_get(doc, "view")), "source");
		snprintf(want, sizeof want, "read in pid %s's root", pid);
		json_t *script = source_ending(doc, "/stacks.py"), *threading = source_ending(doc, "/threading.py");
		cr_assert_not_null(script, "no source of the script");
		cr_expect(text_of(script) && strstr(text_of(script), "def scenario_views("), "the script's text");
		cr_expect_str_eq(note_of(script), want);
		cr_assert_not_null(threading, "no source of threading.py");
		cr_expect_not_null(text_of(threading), "threading.py: %s", note_of(threading));
		const char *lib = json_string_value(json_array_get(threading, 0));
		if (use[k]->root_len)
			cr_expect_neq(access(lib, F_OK), 0, "%s is on this host too: the test proves nothing", lib);
		json_decref(doc);

		/* Gone: the history stays, the root with it does not. */
		test_target_kill(&t);
		query_page(&d, pid, "heatmap", page);
		doc = page_file_data(page);
		script = source_ending(doc, "/stacks.py");
		threading = source_ending(doc, "/threading.py");
		cr_assert(script && threading);
		cr_expect(strncmp(note_of(script), "the process has exited: this host's file as it is now", 53) == 0,
		          "%s", note_of(script));
		if (use[k]->root_len) {
			cr_expect_null(text_of(threading), "a file this host does not have was shown");
			cr_expect_str_eq(note_of(threading), "not readable: the process has exited, and on this "
			                                     "host: No such file or directory");
		}
		json_decref(doc);
		daemon_stop(&d);
	}
}

/* diff as a page: the compared range drawn, the base range's samples beside it to colour by. */
Test(pages, diff_draws_two_ranges_in_one_page, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target t;
	test_target_start(&t, &pys[n - 1], "views");
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	struct daemon d;
	pages_daemon(&d);
	char pid[16], page[PATH_MAX + 16], base[64], compare[64];
	pid_text(t.pid, pid, sizeof pid);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	long t0 = (long)ts.tv_sec;
	const char *attach[] = {"attach", pid, "--rate", "200", NULL};
	ctl_ok(&d, attach);
	pause_ms(PAGES_SAMPLE_MS);
	clock_gettime(CLOCK_REALTIME, &ts);
	long t1 = (long)ts.tv_sec;
	pause_ms(PAGES_SAMPLE_MS);
	snprintf(base, sizeof base, "%ld..%ld", t0 - 1, t1);
	snprintf(compare, sizeof compare, "%ld..now", t1);
	snprintf(page, sizeof page, "%s/diff.html", t.dir);
	const char *diff[] = {"diff", "--pid", pid, "--base", base, "--compare", compare, "--format",
	                      "flamegraph", "-o", page, NULL};
	ctl_ok(&d, diff);
	json_t *doc = page_file_data(page);
	json_t *b = json_object_get(doc, "base");
	cr_assert(json_is_object(b), "no base range in a diff's page");
	json_int_t compared = jint(doc, "total"), based = jint(b, "total");
	cr_expect_gt(compared, 0);
	cr_expect_gt(based, 0);
	/* Each sample of the page is of one range, and each range adds up. */
	json_int_t sum[2] = {0, 0};
	json_t *counts = json_object_get(doc, "sample_count"), *which = json_object_get(doc, "sample_base");
	cr_assert_eq(json_array_size(counts), json_array_size(which));
	for (size_t i = 0; i < json_array_size(counts); i++)
		sum[json_integer_value(json_array_get(which, i)) ? 1 : 0] +=
			json_integer_value(json_array_get(counts, i));
	cr_expect_eq(sum[0], compared);
	cr_expect_eq(sum[1], based);
	/* No time strip: the colours compare whole ranges. */
	cr_expect_eq(jint(doc, "nslots"), 0);
	json_decref(doc);

	/* The table stays the default; only a page draws two ranges. */
	const char *pprof[] = {"diff", "--pid", pid, "--base", base, "--compare", compare, "--format",
	                       "pprof", NULL};
	ctl_expect_failure(&d, pprof, 2, NULL, "diff --format pprof");
	const char *json_page[] = {"diff", "--pid", pid, "--base", base, "--compare", compare,
	                           "--format", "flamegraph", "--json", NULL};
	ctl_expect_failure(&d, json_page, 2, NULL, "diff --format flamegraph --json");
	daemon_stop(&d);
	test_target_kill(&t);
}

/* pyprofd record: the heatmap of the process it recorded, its sources read while it runs. */
Test(pages, record_writes_a_heatmap, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target t;
	test_target_start(&t, &pys[n - 1], "views");
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	char pid[16], want[64];
	pid_text(t.pid, pid, sizeof pid);
	const char *argv[] = {pyprofd_bin(), "record", pid, "--duration", "1", "--rate", "100",
	                      "--format", "heatmap", NULL};
	struct run_result r;
	run_command(&r, argv, NULL);
	char why[512];
	cr_assert(r.exited && r.code == 0, "record --format heatmap: %s", run_describe(&r, why, sizeof why));
	json_t *doc = page_data_of(r.out, r.out_len);
	json_t *script = source_ending(doc, "/stacks.py");
	cr_assert_not_null(script, "no source of the script");
	snprintf(want, sizeof want, "read in pid %s's root", pid);
	cr_expect_str_eq(note_of(script), want);
	cr_expect(text_of(script) && strstr(text_of(script), "def scenario_views("));
	json_decref(doc);
	run_result_free(&r);
	test_target_kill(&t);
}

/*
 * Without --format, -o's name says the format (query and diff); a name whose
 * ending names none is refused with the endings there are.
 */
Test(pages, files_are_written_in_the_format_their_name_says, .timeout = 120)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	struct test_target t;
	test_target_start(&t, &pys[n - 1], "nested");
	json_decref(test_target_wait_report(&t, TARGET_READY_TIMEOUT_S));
	struct daemon d;
	pages_daemon(&d);
	ctl_attach_at(&d, t.pid, "200");
	pause_ms(PAGES_SAMPLE_MS);
	/* Without --format, the file's name says which; a name that says none is refused. */
	static const char *const named[][2] = {
		{"page.html", "<!"}, {"p.speedscope.json", "{\"$schema\""}, {"p.PB.GZ", "\x1f\x8b"}, {"p.txt", NULL},
	};
	for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
		char path[PATH_MAX + 32];
		snprintf(path, sizeof path, "%s/%s", d.dir, named[k][0]);
		const char *args[] = {"query", "-o", path, NULL};
		ctl_ok(&d, args);
		FILE *f = fopen(path, "rb");
		cr_assert_not_null(f, "%s: no output file", named[k][0]);
		char head[512] = {0};
		size_t got = fread(head, 1, sizeof head - 1, f);
		fclose(f);
		/* Collapsed text: "frame;frame (file:line) count" lines, neither a page nor JSON. */
		bool collapsed = strncmp(head, "<!", 2) != 0 && head[0] != '{' && strstr(head, " (") &&
		                 strchr(head, '\n');
		cr_assert(got > 2 && (named[k][1] ? strncmp(head, named[k][1], strlen(named[k][1])) == 0 : collapsed),
		          "%s: not the format its name says: %.40s", named[k][0], head);
	}
	char svg[PATH_MAX + 32];
	snprintf(svg, sizeof svg, "%s/flame.svg", d.dir);
	const char *svg_args[] = {"query", "-o", svg, NULL};
	struct run_result bad;
	ctl_run(&d, &bad, svg_args, NULL);
	cr_assert(bad.exited && bad.code == 2 && strstr(bad.err, "flame.svg'") &&
	          strstr(bad.err, ".html or .htm (flamegraph)") && strstr(bad.err, ".pb.gz"),
	          "query -o flame.svg: %d %s", bad.code, bad.err);
	cr_assert(access(svg, F_OK) != 0, "a refused name was written");
	run_result_free(&bad);
	/* diff writes its page to an .html name too, not the table. */
	char diff_page[PATH_MAX + 32];
	snprintf(diff_page, sizeof diff_page, "%s/diff.html", d.dir);
	const char *diff_args[] = {"diff", "--base", "-2h..-1h", "--compare", "-1h..now", "-o", diff_page, NULL};
	ctl_ok(&d, diff_args);
	size_t diff_len;
	char *diff_text = file_bytes(diff_page, &diff_len);
	cr_assert(strncmp(diff_text, "<!", 2) == 0, "diff.html is not a page: %.40s", diff_text);
	free(diff_text);
	test_target_kill(&t);
	daemon_stop(&d);
}
