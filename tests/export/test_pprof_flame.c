/*
 * pprof, decoded by protobuf-c and by protoc.  (The flamegraph page has
 * its own tests: test_page.c.)
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
	return pprof_str(p, function(p, l->line[0]->function_id)->name);
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
	cr_expect_str_eq(pprof_str(p, p->sample_type[0]->type), "samples");
	cr_expect_str_eq(pprof_str(p, p->sample_type[0]->unit), "count");
	cr_expect_str_eq(pprof_str(p, p->sample_type[1]->type), "cpu");
	cr_expect_str_eq(pprof_str(p, p->sample_type[1]->unit), "nanoseconds");
	cr_assert_not_null(p->period_type);
	cr_expect_str_eq(pprof_str(p, p->period_type->type), "cpu");
	cr_expect_str_eq(pprof_str(p, p->period_type->unit), "nanoseconds");
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
			if (strcmp(pprof_str(p, s->label[l]->key), "thread.id") == 0)
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

/* The labels of a decoded sample as "key=value" lines (strings) in one text, for comparison. */
static void sample_labels(const Perftools__Profiles__Profile *p, const Perftools__Profiles__Sample *s,
                          char *out, size_t len)
{
	size_t n = 0;
	out[0] = '\0';
	for (size_t l = 0; l < s->n_label && n < len; l++)
		if (s->label[l]->str)
			n += (size_t)snprintf(out + n, len - n, "%s=%s;", pprof_str(p, s->label[l]->key),
			                      pprof_str(p, s->label[l]->str));
}

/*
 * A query split by request context: each sample carries its trace_id and
 * span_id as hex strings and its context labels, what `go tool pprof -tags`
 * lists; a sample in no context, or in one the answer lacks, carries none.
 */
Test(pprof_flame, pprof_labels_request_contexts)
{
	static const struct export_frame fr[] = {
		{.function = "main", .file = "shop.py", .line = 1, .kind = UW_FRAME_PYTHON, .first_line = 1},
		{.function = "checkout", .file = "shop.py", .line = 9, .kind = UW_FRAME_PYTHON, .first_line = 8},
	};
	static const uint32_t st[] = {0, 1};
	static const struct export_label cl[] = {{"route", "/checkout"}, {"user", "vip"}};
	static const struct export_context ctx[] = {
		{.trace_id = "0af7651916cd43dd8448eb211c80319c", .span_id = "b7ad6b7169203331",
		 .labels = cl, .nlabels = 2},
		{.labels = cl, .nlabels = 1},
	};
	const struct export_stack sts[] = {
		{.frames = st, .depth = 2, .count = 5},
		{.frames = st, .depth = 2, .count = 3},
		{.frames = st, .depth = 2, .count = 2},
		{.frames = st, .depth = 2, .count = 1},
	};
	/* The last names a context the profile lacks, as a broken answer would. */
	static const uint32_t in[] = {1, 2, 0, 3};
	const struct export_profile prof = {
		.frames = fr, .nframes = 2, .stacks = sts, .nstacks = 4, .name = "contexts", .mode = "wall",
		.rate_hz = RATE, .from_unix = 1700000000, .until_unix = 1700000060, .contexts = ctx,
		.ncontexts = 2, .stack_contexts = in,
	};
	struct out o;
	export_ok(&prof, EXPORT_PPROF, &o);
	size_t len;
	uint8_t *raw = gunzip(&o, &len);
	Perftools__Profiles__Profile *p = perftools__profiles__profile__unpack(NULL, len, raw);
	cr_assert_not_null(p, "protobuf-c cannot decode the profile");
	cr_assert_eq(p->n_sample, 4);
	static const char *const want[] = {
		"trace_id=0af7651916cd43dd8448eb211c80319c;span_id=b7ad6b7169203331;route=/checkout;user=vip;",
		"route=/checkout;",
		"",
		"",
	};
	for (size_t i = 0; i < p->n_sample; i++) {
		char got[512];
		sample_labels(p, p->sample[i], got, sizeof got);
		cr_expect_str_eq(got, want[i], "sample %zu", i);
	}
	perftools__profiles__profile__free_unpacked(p, NULL);
	free(raw);
	free(o.buf);
}
