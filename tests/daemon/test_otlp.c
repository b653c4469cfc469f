/*
 * OTLP profiles as the daemon writes them (daemon/otlp_config.c, otlp_request.c): [export.otlp]
 * settings read and refused, and a request packed, read back with the same
 * .proto and held to what the specification asks of it: every table
 * starting with its zero value, stacks leaf first, one value and one
 * thread.id per sample, the resource by the semantic conventions.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "otlp_profiles.pb-c.h"
#include "pyprofd.h"
#include "store.h"

TestSuite(otlp, .init = helpers_init, .fini = helpers_fini);

Test(otlp, settings_read_and_refused)
{
	struct otlp_config oc;
	otlp_config_init(&oc);
	cr_expect_null(oc.endpoint, "export is off by default");
	cr_expect(oc.gzip);
	cr_expect_eq(oc.interval_s, OTLP_DEFAULT_INTERVAL_S);
	cr_expect_eq(otlp_config_set(&oc, "endpoint", "http://collector:4318"), 0);
	cr_expect_eq(otlp_config_set(&oc, "interval", "30s"), 0);
	cr_expect_eq(oc.interval_s, 30);
	cr_expect_eq(otlp_config_set(&oc, "compression", "none"), 0);
	cr_expect(!oc.gzip);
	cr_expect_eq(otlp_config_set(&oc, "headers", "X-Scope-OrgID=team-a, Authorization = Bearer x y"), 0);
	cr_assert_eq(oc.headers.n, 2);
	cr_expect_str_eq(oc.headers.keys[1], "Authorization");
	cr_expect_str_eq(oc.headers.values[1], "Bearer x y");
	cr_expect_eq(otlp_config_set(&oc, "resource.deployment.environment", "prod"), 0);
	cr_assert_eq(oc.resource.n, 1);
	cr_expect_str_eq(oc.resource.keys[0], "deployment.environment");

	static const char *const bad[][2] = {
		{"endpoint", "collector:4318"},      {"endpoint", "ftp://collector"},
		{"endpoint", "http://"},             {"endpoint", "http://a b"},
		{"interval", "0"},                   {"interval", "2h"},
		{"timeout", "fast"},                 {"compression", "zstd"},
		{"headers", "novalue"},              {"headers", "Content-Type=x"},
		{"headers", "X-A=line\nbreak"},      {"headers", "bad name=x"},
		{"resource.", "x"},                  {"colour", "blue"},
	};
	struct otlp_config copy;
	cr_assert_eq(otlp_config_copy(&copy, &oc), 0);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		cr_expect_eq(otlp_config_set(&oc, bad[i][0], bad[i][1]), -1, "%s = %s was taken", bad[i][0],
		             bad[i][1]);
	cr_expect(otlp_config_equal(&oc, &copy), "a refused setting changed the configuration");
	otlp_config_free(&copy);
	otlp_config_free(&oc);
}

/* The string at index i of the dictionary. */
static const char *str_at(const Pyprofd__Otlp__ProfilesDictionary *d, int32_t i)
{
	cr_assert(i >= 0 && (size_t)i < d->n_string_table, "string index %d out of the table", i);
	return d->string_table[i];
}

static const Pyprofd__Otlp__KeyValue *resource_attr(const Pyprofd__Otlp__Resource *r, const char *key)
{
	for (size_t i = 0; i < r->n_attributes; i++)
		if (strcmp(r->attributes[i]->key, key) == 0)
			return r->attributes[i];
	return NULL;
}

/* The request packed as it would be sent, decoded again; the request and its settings freed. */
static Pyprofd__Otlp__ExportProfilesServiceRequest *request_sent(struct otlp_request *q, struct otlp_config *oc)
{
	uint8_t *bytes;
	size_t len;
	cr_assert_eq(otlp_request_pack(q, &bytes, &len), 0);
	otlp_request_free(q);
	otlp_config_free(oc);
	Pyprofd__Otlp__ExportProfilesServiceRequest *r =
		pyprofd__otlp__export_profiles_service_request__unpack(NULL, len, bytes);
	free(bytes);
	cr_assert_not_null(r, "the request does not decode");
	return r;
}

Test(otlp, request_as_the_specification_reads_it)
{
	struct otlp_config oc;
	otlp_config_init(&oc);
	cr_assert_eq(otlp_config_set(&oc, "resource.deployment.environment", "prod"), 0);
	cr_assert_eq(otlp_config_set(&oc, "resource.service.name", "from-config"), 0);
	const char *keys[] = {"service", "container", "team"};
	const char *values[] = {"api", "0123abcd", "core"};
	struct store_process p = {.target_id = 7, .pid = 4242, .uid = 1000,
	                          .executable = "/usr/bin/python3.12",
	                          .command_line = "python3 app.py", .python_version = "3.12.1",
	                          .nlabels = 3, .label_keys = keys, .label_values = values};
	struct otlp_request *q = otlp_request_new(&oc, "host-a", &p, "cpu", 200, 1000, 1015);
	cr_assert_not_null(q);
	/* Root first, as the history gives them; the second shares the first's root. */
	struct store_frame s1[] = {{"main", "app.py", 10, 0, 8, 0, NULL}, {"Server.handle", "app.py", 20, 0, 18, 1, NULL}};
	struct store_frame s2[] = {{"main", "app.py", 10, 0, 8, 0, NULL}, {"", NULL, 0, 1, 0, 2, NULL}};
	cr_assert_eq(otlp_request_sample(q, 11, "worker-payments-1", NULL, s1, 2, 5), 0);
	cr_assert_eq(otlp_request_sample(q, 12, "", NULL, s1, 2, 3), 0);
	cr_assert_eq(otlp_request_sample(q, 11, "worker-payments-1", NULL, s2, 2, 1), 0);
	cr_expect_eq(otlp_request_samples(q), 9);
	Pyprofd__Otlp__ExportProfilesServiceRequest *r = request_sent(q, &oc);
	const Pyprofd__Otlp__ProfilesDictionary *d = r->dictionary;
	cr_assert_not_null(d);
	/* Every table starts with its zero value. */
	cr_assert(d->n_string_table > 0 && d->n_mapping_table > 0 && d->n_location_table > 0 &&
	          d->n_function_table > 0 && d->n_link_table > 0 && d->n_attribute_table > 0 &&
	          d->n_stack_table > 0);
	cr_expect_str_eq(d->string_table[0], "");
	cr_expect_eq(d->stack_table[0]->n_location_indices, 0);
	cr_expect_eq(d->location_table[0]->n_lines, 0);
	cr_expect_eq(d->function_table[0]->name_strindex, 0);
	cr_expect_eq(d->attribute_table[0]->key_strindex, 0);
	/* No string twice. */
	for (size_t i = 0; i < d->n_string_table; i++)
		for (size_t j = i + 1; j < d->n_string_table; j++)
			cr_expect_str_neq(d->string_table[i], d->string_table[j], "string %zu is %zu's", j, i);

	cr_assert_eq(r->n_resource_profiles, 1);
	const Pyprofd__Otlp__ResourceProfiles *rp = r->resource_profiles[0];
	const Pyprofd__Otlp__Resource *res = rp->resource;
	static const char *const want[][2] = {
		{"host.name", "host-a"},           {"process.executable.name", "python3.12"},
		{"process.command_line", "python3 app.py"}, {"process.runtime.name", "cpython"},
		{"process.runtime.version", "3.12.1"}, {"container.id", "0123abcd"},
		{"deployment.environment", "prod"},  {"service.name", "from-config"},
		{"team", "core"},                    {"service", "api"},
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		const Pyprofd__Otlp__KeyValue *kv = resource_attr(res, want[i][0]);
		cr_assert_not_null(kv, "no %s", want[i][0]);
		cr_expect_str_eq(kv->value->string_value, want[i][1], "%s", want[i][0]);
	}
	const Pyprofd__Otlp__KeyValue *pid = resource_attr(res, "process.pid");
	cr_assert_not_null(pid);
	cr_expect_eq(pid->value->value_case, PYPROFD__OTLP__ANY_VALUE__VALUE_INT_VALUE);
	cr_expect_eq(pid->value->int_value, 4242);
	for (size_t i = 0; i < res->n_attributes; i++)
		for (size_t j = i + 1; j < res->n_attributes; j++)
			cr_expect_str_neq(res->attributes[i]->key, res->attributes[j]->key, "a key twice");

	/* A function is its qualified name, file and first line. */
	bool handle_seen = false;
	for (size_t i = 1; i < d->n_function_table; i++)
		if (strcmp(str_at(d, d->function_table[i]->name_strindex), "Server.handle") == 0) {
			handle_seen = true;
			cr_expect_eq(d->function_table[i]->start_line, 18);
		}
	cr_expect(handle_seen, "no function Server.handle");

	cr_assert_eq(rp->n_scope_profiles, 1);
	cr_expect_str_eq(rp->scope_profiles[0]->scope->name, "pyprofd");
	cr_assert_eq(rp->scope_profiles[0]->n_profiles, 1);
	const Pyprofd__Otlp__Profile *pr = rp->scope_profiles[0]->profiles[0];
	cr_expect_str_eq(str_at(d, pr->sample_type->type_strindex), "samples");
	cr_expect_str_eq(str_at(d, pr->sample_type->unit_strindex), "count");
	cr_expect_str_eq(str_at(d, pr->period_type->type_strindex), "cpu");
	cr_expect_str_eq(str_at(d, pr->period_type->unit_strindex), "nanoseconds");
	cr_expect_eq(pr->period, 5000000);
	cr_expect_eq(pr->time_unix_nano, 1000000000000ull);
	cr_expect_eq(pr->duration_nano, 15000000000ull);
	cr_assert_eq(pr->n_samples, 3);
	/* Leaf first: handle, then main; the same stack is one entry for both threads. */
	const Pyprofd__Otlp__Sample *a = pr->samples[0], *b = pr->samples[1], *c = pr->samples[2];
	cr_expect_eq(a->stack_index, b->stack_index);
	cr_expect_neq(a->stack_index, c->stack_index);
	const Pyprofd__Otlp__Stack *st = d->stack_table[a->stack_index];
	cr_assert_eq(st->n_location_indices, 2);
	const Pyprofd__Otlp__Location *leaf = d->location_table[st->location_indices[0]];
	cr_assert_eq(leaf->n_lines, 1);
	const Pyprofd__Otlp__Function *fn = d->function_table[leaf->lines[0]->function_index];
	cr_expect_str_eq(str_at(d, fn->name_strindex), "Server.handle");
	cr_expect_str_eq(str_at(d, fn->filename_strindex), "app.py");
	cr_expect_eq(leaf->lines[0]->line, 20);
	const Pyprofd__Otlp__Location *root = d->location_table[st->location_indices[1]];
	cr_expect_str_eq(str_at(d, d->function_table[root->lines[0]->function_index]->name_strindex), "main");
	const Pyprofd__Otlp__Stack *st2 = d->stack_table[c->stack_index];
	cr_assert_eq(st2->n_location_indices, 2);
	cr_expect_eq(st2->location_indices[1], st->location_indices[1], "main is one location");
	const Pyprofd__Otlp__Location *native = d->location_table[st2->location_indices[0]];
	cr_expect_str_eq(str_at(d, d->function_table[native->lines[0]->function_index]->name_strindex),
	                 "<native>");
	/* One value and one thread.id each, and the thread's name where it has one. */
	const uint64_t threads[] = {11, 12, 11};
	const int64_t counts[] = {5, 3, 1};
	const size_t nattrs[] = {2, 1, 2};
	for (size_t i = 0; i < 3; i++) {
		const Pyprofd__Otlp__Sample *s = pr->samples[i];
		cr_assert_eq(s->n_values, 1);
		cr_expect_eq(s->values[0], counts[i]);
		cr_assert_eq(s->n_attribute_indices, nattrs[i]);
		const Pyprofd__Otlp__KeyValueAndUnit *attr = d->attribute_table[s->attribute_indices[0]];
		cr_expect_str_eq(str_at(d, attr->key_strindex), "thread.id");
		cr_expect_eq(attr->value->int_value, (int64_t)threads[i]);
		if (nattrs[i] < 2)
			continue;
		const Pyprofd__Otlp__KeyValueAndUnit *name = d->attribute_table[s->attribute_indices[1]];
		cr_expect_str_eq(str_at(d, name->key_strindex), "thread.name");
		cr_expect_eq(name->value->value_case, PYPROFD__OTLP__ANY_VALUE__VALUE_STRING_VALUE);
		cr_expect_str_eq(name->value->string_value, "worker-payments-1");
	}
	cr_expect_eq(a->attribute_indices[0], c->attribute_indices[0], "thread 11 is one attribute");
	cr_expect_eq(a->attribute_indices[1], c->attribute_indices[1], "its name is one attribute");
	pyprofd__otlp__export_profiles_service_request__free_unpacked(r, NULL);
}

/* A sample in a span references a Link with its ids; its labels are attributes; one in none links to 0. */
Test(otlp, samples_in_a_span_carry_its_link)
{
	struct otlp_config oc;
	otlp_config_init(&oc);
	struct store_process p = {.target_id = 7, .pid = 4242, .executable = "/usr/bin/python3.15",
	                          .command_line = "python3 app.py", .python_version = "3.15.2"};
	struct otlp_request *q = otlp_request_new(&oc, "host-a", &p, "wall", 100, 1000, 1015);
	cr_assert_not_null(q);
	struct store_frame s1[] = {{"main", "app.py", 10, 0, 8, 0, NULL}, {"checkout", "app.py", 20, 0, 18, 1, NULL}};
	struct store_context in_span = {.has_trace = true, .has_span = true, .labels = "route=/checkout\ntenant=42"};
	for (int i = 0; i < 16; i++)
		in_span.trace_id[i] = (uint8_t)(0xa0 + i);
	for (int i = 0; i < 8; i++)
		in_span.span_id[i] = (uint8_t)(0x10 + i);
	struct store_context labelled = {.labels = "route=/health"};
	cr_assert_eq(otlp_request_sample(q, 11, "web", &in_span, s1, 2, 5), 0);
	cr_assert_eq(otlp_request_sample(q, 11, "web", &in_span, s1, 1, 2), 0);
	cr_assert_eq(otlp_request_sample(q, 11, "web", &labelled, s1, 2, 3), 0);
	cr_assert_eq(otlp_request_sample(q, 11, "web", NULL, s1, 2, 1), 0);
	Pyprofd__Otlp__ExportProfilesServiceRequest *r = request_sent(q, &oc);
	const Pyprofd__Otlp__ProfilesDictionary *d = r->dictionary;
	cr_assert_eq(d->n_link_table, 2, "the zero link and the one span's, once");
	cr_expect_eq(d->link_table[0]->trace_id.len, 0);
	cr_assert_eq(d->link_table[1]->trace_id.len, 16);
	cr_assert_eq(d->link_table[1]->span_id.len, 8);
	cr_expect_eq(memcmp(d->link_table[1]->trace_id.data, in_span.trace_id, 16), 0);
	cr_expect_eq(memcmp(d->link_table[1]->span_id.data, in_span.span_id, 8), 0);
	const Pyprofd__Otlp__Profile *pr = r->resource_profiles[0]->scope_profiles[0]->profiles[0];
	cr_assert_eq(pr->n_samples, 4);
	int32_t want_link[] = {1, 1, 0, 0};
	const char *want_route[] = {"/checkout", "/checkout", "/health", NULL};
	for (size_t i = 0; i < 4; i++) {
		const Pyprofd__Otlp__Sample *s = pr->samples[i];
		cr_expect_eq(s->link_index, want_link[i], "sample %zu", i);
		const char *route = NULL;
		for (size_t k = 0; k < s->n_attribute_indices; k++) {
			const Pyprofd__Otlp__KeyValueAndUnit *a = d->attribute_table[s->attribute_indices[k]];
			if (strcmp(str_at(d, a->key_strindex), "route") == 0)
				route = a->value->string_value;
		}
		if (want_route[i])
			cr_expect(route && strcmp(route, want_route[i]) == 0, "sample %zu: route %s", i,
			          route ? route : "none");
		else
			cr_expect_null(route, "sample %zu: a route outside any request", i);
	}
	pyprofd__otlp__export_profiles_service_request__free_unpacked(r, NULL);
}

/*
 * C frames: each module one mapping (its file, its build id as the
 * attribute process.executable.build_id.gnu), each frame a location in it
 * at its address, its line 0; Python frames stay in the zero mapping.
 */
Test(otlp, c_frames_have_mappings_with_build_ids)
{
	struct otlp_config oc;
	otlp_config_init(&oc);
	struct store_process p = {.target_id = 7, .pid = 4242, .executable = "/usr/bin/python3.15",
	                          .command_line = "python3 app.py", .python_version = "3.15.2"};
	struct otlp_request *q = otlp_request_new(&oc, "host-a", &p, "cpu", 100, 1000, 1015);
	cr_assert_not_null(q);
	static const char libz[] = "/usr/lib/x86_64-linux-gnu/libz.so.1", id[] = "c0ffee0011223344";
	/* Root first: a Python frame, then two C frames of libz and one of libc (no build id). */
	struct store_frame s1[] = {{"run", "app.py", 37, 0, 35, 0, NULL},
	                           {"deflate", libz, 0x6100, 4, 0, 1, id},
	                           {"[+0x659b]", libz, 0x659b, 4, 0, 2, id}};
	struct store_frame s2[] = {{"run", "app.py", 37, 0, 35, 0, NULL},
	                           {"[+0x91c8b]", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x91c8b, 4, 0, 3, ""}};
	cr_assert_eq(otlp_request_sample(q, 11, "zlib", NULL, s1, 3, 4), 0);
	cr_assert_eq(otlp_request_sample(q, 11, "zlib", NULL, s2, 2, 1), 0);
	Pyprofd__Otlp__ExportProfilesServiceRequest *r = request_sent(q, &oc);
	const Pyprofd__Otlp__ProfilesDictionary *d = r->dictionary;
	/* The zero mapping, libz's and libc's. */
	cr_assert_eq(d->n_mapping_table, 3, "%zu mappings", d->n_mapping_table);
	cr_expect_eq(d->mapping_table[0]->filename_strindex, 0);
	unsigned seen = 0;
	for (size_t l = 1; l < d->n_location_table; l++) {
		const Pyprofd__Otlp__Location *loc = d->location_table[l];
		const char *name = str_at(d, d->function_table[loc->lines[0]->function_index]->name_strindex);
		if (strcmp(name, "run") == 0) {
			cr_expect_eq(loc->mapping_index, 0, "a Python frame in a module's mapping");
			cr_expect_eq(loc->lines[0]->line, 37);
			continue;
		}
		seen++;
		cr_assert(loc->mapping_index > 0 && (size_t)loc->mapping_index < d->n_mapping_table, "%s: mapping", name);
		cr_expect_eq(loc->lines[0]->line, 0, "%s: its address as a line", name);
		const Pyprofd__Otlp__Mapping *m = d->mapping_table[loc->mapping_index];
		const char *file = str_at(d, m->filename_strindex);
		if (strcmp(name, "[+0x91c8b]") == 0) {
			cr_expect_eq(loc->address, 0x91c8b);
			cr_expect_str_eq(file, "/usr/lib/x86_64-linux-gnu/libc.so.6");
			cr_expect_eq(m->n_attribute_indices, 0, "libc has no build id here");
			continue;
		}
		cr_expect_eq(loc->address, strcmp(name, "deflate") == 0 ? 0x6100u : 0x659bu, "%s: address", name);
		cr_expect_str_eq(file, libz);
		cr_expect_gt(m->memory_limit, 0x659b, "the mapping ends before its frames");
		cr_assert_eq(m->n_attribute_indices, 1, "%s: the mapping has no build id", name);
		const Pyprofd__Otlp__KeyValueAndUnit *a = d->attribute_table[m->attribute_indices[0]];
		cr_expect_str_eq(str_at(d, a->key_strindex), "process.executable.build_id.gnu");
		cr_expect_str_eq(a->value->string_value, id);
	}
	cr_expect_eq(seen, 3, "%u C frames, not 3", seen);
	pyprofd__otlp__export_profiles_service_request__free_unpacked(r, NULL);
}
