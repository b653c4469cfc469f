/*
 * pyprofd-ctl's own modules: a message printed as JSON and as text from one
 * description of its fields, text made safe for a terminal, and the times
 * and durations the history commands take.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "export.h"

/* What a FILE* wrote, as a string (malloc'd). */
static char *written(void (*fn)(FILE *out, const void *ctx), const void *ctx)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	cr_assert_not_null(out);
	fn(out, ctx);
	fclose(out);
	return buf;
}

static void status_text(FILE *out, const void *ctx)
{
	cr_assert_eq(fields_text(out, ctx, fields_status, fields_nstatus, 0), 0);
}

Test(fields, status_as_json_and_text_from_one_description)
{
	Pyprofd__StatusResult st = PYPROFD__STATUS_RESULT__INIT;
	st.version = "1.2.3";
	st.pid = 42;
	st.uptime_s = 12.25;
	st.cpu_percent = 1.5;
	st.state_dir = "/st";
	st.socket = "/s.sock";
	st.history_file = "/st/pyprofd.db";
	st.history_failing = true;
	st.history_error = "disk full";
	st.history_rows_written = 99;
	st.idle_default = "drop";
	json_t *doc = fields_json(&st, fields_status, fields_nstatus);
	cr_assert_not_null(doc);
	cr_assert_str_eq(json_string_value(json_object_get(doc, "version")), "1.2.3");
	cr_assert_eq(json_integer_value(json_object_get(doc, "pid")), 42);
	json_t *h = json_object_get(doc, "history");
	cr_assert(json_is_object(h), "history.* fields make one object");
	cr_assert(json_is_true(json_object_get(h, "failing")));
	cr_assert_eq(json_integer_value(json_object_get(h, "rows_written")), 99);
	cr_assert_str_eq(json_string_value(json_object_get(h, "file")), "/st/pyprofd.db");
	/* Every field once, in the table's order: the JSON keys are the text's (groups: one key each). */
	json_t *discovery = json_object_get(doc, "discovery"), *budget = json_object_get(doc, "budget");
	json_t *export = json_object_get(doc, "export");
	json_t *schedule = json_object_get(doc, "schedule"), *kernel = json_object_get(doc, "kernel");
	json_t *config = json_object_get(doc, "config"), *sampling = json_object_get(doc, "sampling");
	cr_assert(json_is_object(discovery) && json_is_object(budget) && json_is_object(export) &&
	          json_is_object(schedule) && json_is_object(kernel) && json_is_object(config) &&
	          json_is_object(sampling));
	size_t n = json_object_size(doc) - 8 + json_object_size(h) + json_object_size(discovery) +
	           json_object_size(budget) + json_object_size(export) + json_object_size(schedule) +
	           json_object_size(kernel) + json_object_size(config) + json_object_size(sampling);
	cr_assert_eq(n, fields_nstatus);
	json_decref(doc);
	char *text = written(status_text, &st);
	cr_assert(strstr(text, "version: 1.2.3\n"), "%s", text);
	cr_assert(strstr(text, "uptime_s: 12.2") || strstr(text, "uptime_s: 12.3"), "%s", text);
	cr_assert(strstr(text, "cpu_percent: 1.50\n"), "%s", text);
	cr_assert(strstr(text, "history.failing: true\n"), "%s", text);
	cr_assert(strstr(text, "history.error: disk full\n"), "%s", text);
	cr_assert(strstr(text, "sampling.idle: drop\n"), "%s", text);
	free(text);
}

Test(fields, target_labels_and_unsafe_text)
{
	Pyprofd__Target t = PYPROFD__TARGET__INIT;
	Pyprofd__Label l1 = PYPROFD__LABEL__INIT, l2 = PYPROFD__LABEL__INIT;
	Pyprofd__Label *labels[] = {&l1, &l2};
	l1.key = "service", l1.value = "api";
	l2.key = "bad\xff", l2.value = "x";
	t.labels = labels;
	t.n_labels = 2;
	t.pid = 7;
	t.mode = PYPROFD__MODE__MODE_GIL;
	t.command_line = "python \x1b[2J app.py";
	json_t *doc = fields_target_json(&t);
	cr_assert_not_null(doc);
	cr_assert_str_eq(json_string_value(json_object_get(doc, "mode")), "gil");
	json_t *lab = json_object_get(doc, "labels");
	cr_assert_str_eq(json_string_value(json_object_get(lab, "service")), "api");
	cr_assert_not_null(json_object_get(lab, "bad\xef\xbf\xbd"), "a key that is not UTF-8 is repaired");
	cr_assert_eq(json_integer_value(json_object_get(doc, "pid")), 7);
	json_decref(doc);
	char *cell = fields_cell(&t, fields_find(fields_target, fields_ntarget, "labels"));
	cr_assert_str_eq(cell, "service=api,bad\xff=x");
	free(cell);
	cr_assert_null(fields_find(fields_target, fields_ntarget, "nosuch"));
}

static void put_escape(FILE *out, const void *ctx)
{
	export_put(out, ctx, SIZE_MAX, 0);
}

Test(format, control_characters_never_reach_the_terminal)
{
	char *text = written(put_escape, "a\x1b[2Jb\tc\xc2\x9b" "d\xff");
	cr_assert_str_eq(text, "a?[2Jb?c?d?");
	free(text);
	cr_assert_eq(export_width("größe"), 5, "columns are characters, not bytes");
	cr_assert_eq(export_width(NULL), 0);
}

Test(parse, durations_and_times)
{
	cr_assert_eq(ctl_history_parse_time("1700000000"), 1700000000);
	double local = ctl_history_parse_time("2024-01-02T03:04:05");
	struct tm tm = {.tm_year = 124, .tm_mon = 0, .tm_mday = 2, .tm_hour = 3, .tm_min = 4,
	                .tm_sec = 5, .tm_isdst = -1};
	cr_assert_eq(local, (double)mktime(&tm));
	cr_assert_lt(ctl_history_parse_time("yesterday"), 0);
	cr_assert_eq(ctl_diff_parse_when("now", 1000), 1000);
	cr_assert_eq(ctl_diff_parse_when("-2h", 10000), 10000 - 7200);
}

Test(parse, ranges)
{
	struct ctl ctl = {0};
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	cr_assert_eq(ctl_diff_parse_range(&ctl, "--base", "-2h..-1h", 10000, &q), EXIT_OK);
	cr_assert_eq(q.from_unix, 10000 - 7200);
	cr_assert_eq(q.until_unix, 10000 - 3600);
	cr_assert_eq(ctl_diff_parse_range(&ctl, "--base", "-1h..-2h", 10000, &q), EXIT_USAGE,
	             "a range ending before it starts");
	cr_assert_eq(ctl_diff_parse_range(&ctl, "--base", "now", 10000, &q), EXIT_USAGE);
}
