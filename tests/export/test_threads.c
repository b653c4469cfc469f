/*
 * Threads, labels and function identity in every export (the `threaded`
 * profile of profiles.c): pprof's sample labels, sample type and names as
 * `go tool pprof` shows them, a thread as the root of collapsed stacks, a
 * speedscope profile and a Firefox Profiler track per thread, the threads of
 * the JSON export.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "profile.pb-c.h"
#include "profiles.h"

TestSuite(threads, .init = helpers_init, .fini = helpers_fini);

/* `go tool pprof` reads a profile in well under a minute; this only catches a hang. */
#define GO_PPROF_TIMEOUT_S 120.0

/* The string label key of a sample, or NULL. */
static const char *label_str(const Perftools__Profiles__Profile *p,
                             const Perftools__Profiles__Sample *s, const char *key)
{
	for (size_t i = 0; i < s->n_label; i++)
		if (strcmp(pprof_str(p, s->label[i]->key), key) == 0 && s->label[i]->str)
			return pprof_str(p, s->label[i]->str);
	return NULL;
}

static int64_t label_num(const Perftools__Profiles__Profile *p, const Perftools__Profiles__Sample *s,
                         const char *key)
{
	for (size_t i = 0; i < s->n_label; i++)
		if (strcmp(pprof_str(p, s->label[i]->key), key) == 0)
			return s->label[i]->num;
	return -1;
}

Test(threads, pprof_labels_every_sample_with_its_thread_and_process)
{
	Perftools__Profiles__Profile *p = pprof_of(&threaded);
	/* The mode is the sample type. */
	cr_assert_eq(p->n_sample_type, 2);
	cr_expect_str_eq(pprof_str(p, p->sample_type[1]->type), "gil");
	cr_expect_str_eq(pprof_str(p, p->period_type->type), "gil");
	cr_expect_eq(p->time_nanos, 1700000000LL * 1000000000LL);
	cr_expect_eq(p->duration_nanos, 60500000000LL);
	int64_t per_thread[3] = {0};
	for (size_t i = 0; i < p->n_sample; i++) {
		const Perftools__Profiles__Sample *s = p->sample[i];
		const char *name = label_str(p, s, "thread.name"), *service = label_str(p, s, "service");
		cr_assert_not_null(name, "sample %zu has no thread.name", i);
		cr_assert_not_null(service, "sample %zu has no service label", i);
		int64_t tid = label_num(p, s, "thread.id");
		if (strcmp(name, "MainThread (tid 42)") == 0) {
			cr_expect_eq(tid, 42);
			cr_expect_str_eq(service, "api");
			cr_expect_str_eq(label_str(p, s, "env"), "prod");
			cr_expect_eq(label_num(p, s, "pid"), 42);
			per_thread[0] += s->value[0];
		} else if (strcmp(name, "worker-1 (tid 43)") == 0) {
			cr_expect_eq(tid, 43);
			per_thread[1] += s->value[0];
		} else {
			/* No kernel id: threading's stands in. */
			cr_expect_str_eq(name, "thread 140003");
			cr_expect_eq(tid, 140003);
			cr_expect_str_eq(service, "batch");
			cr_expect_eq(label_num(p, s, "pid"), 77);
			cr_expect_null(label_str(p, s, "env"));
			per_thread[2] += s->value[0];
		}
	}
	cr_expect_eq(per_thread[0], 7);
	cr_expect_eq(per_thread[1], 5);
	cr_expect_eq(per_thread[2], 3);
	perftools__profiles__profile__free_unpacked(p, NULL);
}

Test(threads, pprof_keeps_two_functions_of_one_short_name_and_their_names_whole)
{
	Perftools__Profiles__Profile *p = pprof_of(&threaded);
	unsigned runs = 0;
	bool module = false;
	for (size_t i = 0; i < p->n_function; i++) {
		const Perftools__Profiles__Function *f = p->function[i];
		const char *name = pprof_str(p, f->name), *system = pprof_str(p, f->system_name);
		/* pprof simplifies a name equal to its system name: they must differ. */
		cr_expect_str_neq(name, system, "function %s: system name equals the name", name);
		if (strcmp(name, "run") == 0) {
			runs++;
			cr_expect(f->start_line == 40 || f->start_line == 118, "run from line %lld",
			          (long long)f->start_line);
		}
		module |= strcmp(name, "<module>") == 0;
	}
	cr_expect_eq(runs, 2, "run (line 40) and run (line 118) are two functions, not %u", runs);
	cr_expect(module, "<module> is named as it is");
	perftools__profiles__profile__free_unpacked(p, NULL);
}

/* `go tool pprof ARGS FILE`'s output (exit 0 required). */
static char *go_pprof(const char *flag, const char *file)
{
	cr_assert(access("/usr/bin/go", X_OK) == 0,
	          "go is not installed: make deps installs golang-go for `go tool pprof`");
	char home[PATH_MAX], cache[PATH_MAX + 16], gohome[PATH_MAX + 16];
	scratch_dir(home, sizeof home);
	snprintf(cache, sizeof cache, "GOCACHE=%s/cache", home);
	snprintf(gohome, sizeof gohome, "HOME=%s", home);
	const char *argv[] = {"/usr/bin/env", gohome, cache, "PPROF_TMPDIR=/tmp", "/usr/bin/go", "tool",
	                      "pprof", flag, file, NULL};
	struct run_result r;
	struct run_opts opts = {.timeout_s = GO_PPROF_TIMEOUT_S};
	run_command(&r, argv, &opts);
	char why[2048];
	cr_assert(r.exited && r.code == 0, "go tool pprof %s: %s", flag, run_describe(&r, why, sizeof why));
	char *out = strdup(r.out ? r.out : "");
	run_result_free(&r);
	return out;
}

Test(threads, go_tool_pprof_shows_names_tags_and_the_range, .timeout = 300)
{
	struct out o;
	export_ok(&threaded, EXPORT_PPROF, &o);
	char dir[PATH_MAX], path[PATH_MAX + 32];
	scratch_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/threaded.pb.gz", dir);
	scratch_write(path, o.buf, o.len);
	free(o.buf);

	char *top = go_pprof("-top", path);
	cr_expect(strstr(top, " <module>\n"), "-top lacks <module>:\n%s", top);
	cr_expect(strstr(top, " <lambda>\n"), "-top lacks <lambda>:\n%s", top);
	cr_expect(strstr(top, " <GC>\n"), "-top lacks <GC>:\n%s", top);
	cr_expect(strstr(top, " Runner.run\n"), "-top lacks Runner.run:\n%s", top);
	cr_expect_null(strstr(top, "<unknown>"), "-top simplified a name away:\n%s", top);
	cr_expect(strstr(top, "Type: gil"), "-top's type is not the mode:\n%s", top);
	/* 60.5 s, not the 1970-to-now of a zero start. */
	cr_expect(strstr(top, "Duration: 1min") || strstr(top, "Duration: 60.50s"),
	          "-top's duration is not the profile's range:\n%s", top);
	free(top);

	char *tags = go_pprof("-tags", path);
	cr_expect(strstr(tags, "thread.name:"), "-tags lacks thread.name:\n%s", tags);
	cr_expect(strstr(tags, "MainThread (tid 42)"), "-tags lacks the main thread:\n%s", tags);
	cr_expect(strstr(tags, "worker-1 (tid 43)"), "-tags lacks the worker:\n%s", tags);
	cr_expect(strstr(tags, "thread.id:"), "-tags lacks thread.id:\n%s", tags);
	cr_expect(strstr(tags, "service:"), "-tags lacks the service label:\n%s", tags);
	cr_expect(strstr(tags, ": batch"), "-tags lacks service=batch:\n%s", tags);
	cr_expect(strstr(tags, "env:"), "-tags lacks the env label:\n%s", tags);
	free(tags);
}

Test(threads, collapsed_per_thread_roots_each_stack_at_its_thread)
{
	struct export_profile p = threaded;
	p.per_thread = true;
	struct out o;
	export_ok(&p, EXPORT_COLLAPSED, &o);
	cr_expect(strstr(o.buf, "MainThread (tid 42);<module> (app.py:12);run (runners.py:44) 3\n"),
	          "%s", o.buf);
	cr_expect(strstr(o.buf, "worker-1 (tid 43);<module> (app.py:12);Condition.wait (threading.py:320) 5\n"),
	          "%s", o.buf);
	cr_expect(strstr(o.buf, "thread 140003;<module> (app.py:12);Runner.run (runners.py:121);"
	                        "<lambda> (app.py:7) 2\n"),
	          "%s", o.buf);
	/* Every line starts at a thread. */
	for (char *line = o.buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
		cr_expect(strncmp(line, "MainThread", 10) == 0 || strncmp(line, "worker-1", 8) == 0 ||
		                  strncmp(line, "thread 140003", 13) == 0,
		          "a line without its thread: %.80s", line);
	free(o.buf);
	/* Without --per-thread the threads merge, as before. */
	export_ok(&threaded, EXPORT_COLLAPSED, &o);
	cr_expect(strstr(o.buf, "<module> (app.py:12);Runner.run (runners.py:121);<lambda> (app.py:7) 4\n"),
	          "%s", o.buf);
	cr_expect_null(strstr(o.buf, "MainThread"), "%s", o.buf);
	free(o.buf);
}

Test(threads, json_has_the_threads_and_idle_counts)
{
	struct out o;
	export_ok(&threaded, EXPORT_JSON, &o);
	json_t *doc = parse_json(&o);
	json_t *threads = json_object_get(doc, "threads"), *rows = json_object_get(doc, "stacks");
	cr_assert_eq(json_array_size(threads), 3);
	cr_expect_str_eq(json_string_value(json_object_get(json_array_get(threads, 1), "name")),
	                 "worker-1");
	cr_expect_str_eq(json_string_value(json_object_get(
				 json_object_get(json_array_get(threads, 2), "labels"), "service")),
	                 "batch");
	cr_expect(json_is_null(json_object_get(json_array_get(threads, 2), "native_thread_id")));
	json_int_t idle = 0;
	size_t i;
	json_t *s;
	json_array_foreach(rows, i, s) {
		idle += json_integer_value(json_object_get(s, "idle"));
		cr_expect(json_is_integer(json_object_get(s, "thread")));
	}
	cr_expect_eq(idle, 7);
	json_t *f1 = json_array_get(json_object_get(doc, "frames"), 1);
	cr_expect_eq(json_integer_value(json_object_get(f1, "first_line")), 40);
	json_decref(doc);
	free(o.buf);
}

/* A Gecko table: {schema: {name: column...}, data: [[...]...]}; the column of name. */
static size_t gecko_column(json_t *table, const char *name, size_t width)
{
	json_t *schema = json_object_get(table, "schema");
	cr_assert(json_is_object(schema), "a table without its schema");
	json_t *col = json_object_get(schema, name);
	cr_assert(json_is_integer(col), "schema lacks %s", name);
	cr_assert(json_integer_value(col) >= 0 && (size_t)json_integer_value(col) < width,
	          "column %s out of the row's width", name);
	cr_assert_eq(json_object_size(schema), width, "schema has %zu columns, rows %zu",
	             json_object_size(schema), width);
	return (size_t)json_integer_value(col);
}

/*
 * The structure the Firefox Profiler reads from a Gecko profile of version
 * 29 (its src/types/gecko-profile.ts): meta with the fields its processing
 * needs, a thread per track with its own string, frame and stack tables,
 * every index in range, prefixes before the stacks that name them, times
 * not going back.  Returns the samples per track name.
 */
static void check_gecko(json_t *doc, const char *const names[], const size_t want[], size_t n)
{
	cr_assert(json_is_object(doc));
	json_t *meta = json_object_get(doc, "meta");
	cr_assert(json_is_object(meta));
	cr_expect_eq(json_integer_value(json_object_get(meta, "version")), 29);
	static const char *const numbers[] = {"startTime", "interval", "stackwalk", "debug", "gcpoison",
	                                      "asyncstack", "processType"};
	for (size_t i = 0; i < COUNT(numbers); i++)
		cr_expect(json_is_number(json_object_get(meta, numbers[i])), "meta.%s", numbers[i]);
	cr_expect(json_is_null(json_object_get(meta, "shutdownTime")));
	cr_expect(json_is_array(json_object_get(meta, "markerSchema")));
	cr_expect_eq(json_real_value(json_object_get(meta, "startTime")), 1700000000.0 * 1000);
	cr_expect_eq(json_real_value(json_object_get(meta, "interval")), 1000.0 / RATE);
	json_t *categories = json_object_get(meta, "categories");
	cr_assert(json_is_array(categories) && json_array_size(categories) > 0);
	size_t i;
	json_t *c;
	json_array_foreach(categories, i, c) {
		cr_expect(json_is_string(json_object_get(c, "name")) &&
		          json_is_string(json_object_get(c, "color")) &&
		          json_is_array(json_object_get(c, "subcategories")) &&
		          json_array_size(json_object_get(c, "subcategories")) > 0,
		          "category %zu", i);
	}
	static const char *const arrays[] = {"libs", "pausedRanges", "processes", "threads"};
	for (size_t k = 0; k < COUNT(arrays); k++)
		cr_assert(json_is_array(json_object_get(doc, arrays[k])), "%s", arrays[k]);
	json_t *threads = json_object_get(doc, "threads");
	cr_assert_eq(json_array_size(threads), n, "%zu tracks", json_array_size(threads));
	json_t *t;
	json_array_foreach(threads, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		cr_assert_not_null(name);
		size_t k = 0;
		while (k < n && strcmp(names[k], name) != 0)
			k++;
		cr_assert(k < n, "a track named %s", name);
		cr_expect(json_is_string(json_object_get(t, "processType")));
		cr_expect(json_is_integer(json_object_get(t, "pid")) && json_is_integer(json_object_get(t, "tid")));
		cr_expect(json_is_number(json_object_get(t, "registerTime")));
		cr_expect(json_is_null(json_object_get(t, "unregisterTime")));
		json_t *strings = json_object_get(t, "stringTable");
		cr_assert(json_is_array(strings));
		json_t *ft = json_object_get(t, "frameTable"), *st = json_object_get(t, "stackTable");
		json_t *samples = json_object_get(t, "samples"), *markers = json_object_get(t, "markers");
		cr_assert(json_is_array(json_object_get(markers, "data")));
		gecko_column(markers, "data", 6);
		size_t loc = gecko_column(ft, "location", 8), line = gecko_column(ft, "line", 8),
		       cat = gecko_column(ft, "category", 8), sub = gecko_column(ft, "subcategory", 8),
		       js = gecko_column(ft, "relevantForJS", 8);
		size_t prefix = gecko_column(st, "prefix", 2), frame = gecko_column(st, "frame", 2);
		size_t stack = gecko_column(samples, "stack", 3), time = gecko_column(samples, "time", 3);
		gecko_column(samples, "eventDelay", 3);
		json_t *fd = json_object_get(ft, "data"), *sd = json_object_get(st, "data"),
		       *xd = json_object_get(samples, "data");
		size_t j;
		json_t *row;
		json_array_foreach(fd, j, row) {
			json_t *l = json_array_get(row, loc);
			cr_assert(json_is_integer(l) && (size_t)json_integer_value(l) < json_array_size(strings),
			          "frame %zu: location", j);
			cr_expect(json_is_boolean(json_array_get(row, js)));
			cr_expect(json_is_null(json_array_get(row, line)) || json_is_integer(json_array_get(row, line)));
			json_t *ci = json_array_get(row, cat);
			cr_assert(json_is_integer(ci) && (size_t)json_integer_value(ci) < json_array_size(categories));
			cr_expect(json_is_integer(json_array_get(row, sub)));
		}
		json_array_foreach(sd, j, row) {
			json_t *p = json_array_get(row, prefix), *f = json_array_get(row, frame);
			cr_assert(json_is_null(p) || (json_is_integer(p) && (size_t)json_integer_value(p) < j),
			          "stack %zu: a prefix not before it", j);
			cr_assert(json_is_integer(f) && (size_t)json_integer_value(f) < json_array_size(fd),
			          "stack %zu: frame", j);
		}
		double last = -1;
		json_array_foreach(xd, j, row) {
			json_t *s = json_array_get(row, stack), *tm = json_array_get(row, time);
			cr_assert(json_is_integer(s) && (size_t)json_integer_value(s) < json_array_size(sd),
			          "sample %zu: stack", j);
			cr_assert(json_is_number(tm) && json_number_value(tm) >= last, "sample %zu: time", j);
			last = json_number_value(tm);
		}
		cr_expect_eq(json_array_size(xd), want[k], "%s: %zu samples, want %zu", name,
		             json_array_size(xd), want[k]);
	}
}

Test(threads, gecko_has_a_track_per_thread)
{
	struct out o;
	export_ok(&threaded, EXPORT_GECKO, &o);
	json_t *doc = parse_json(&o);
	static const char *const names[] = {"MainThread (tid 42)", "worker-1 (tid 43)", "thread 140003"};
	static const size_t want[] = {7, 5, 3};
	check_gecko(doc, names, want, COUNT(names));
	/* Functions by location: run twice (two first lines), Runner.run once per track that has it. */
	json_t *main = json_array_get(json_object_get(doc, "threads"), 0);
	size_t i, runs = 0;
	json_t *s;
	json_array_foreach(json_object_get(main, "stringTable"), i, s)
		runs += strncmp(json_string_value(s), "run (runners.py:", 16) == 0;
	cr_expect_eq(runs, 2);
	json_decref(doc);
	free(o.buf);

	/* A profile without threads is one track. */
	export_ok(&profile, EXPORT_GECKO, &o);
	doc = parse_json(&o);
	static const char *const one[] = {"pid 4242 (service=api)"};
	static const size_t total[] = {TOTAL};
	check_gecko(doc, one, total, 1);
	json_decref(doc);
	free(o.buf);
}

Test(threads, gecko_refuses_more_samples_than_it_can_list)
{
	static const uint32_t st[] = {0};
	struct export_stack big = {st, 1, EXPORT_GECKO_MAX_SAMPLES + 1, 0, 0, 0, 0, false};
	struct export_profile p = profile;
	p.stacks = &big;
	p.nstacks = 1;
	struct out o;
	cr_expect_eq(export_mem(&p, EXPORT_GECKO, &o), -1);
	cr_expect_eq(errno, EFBIG);
	free(o.buf);
}
