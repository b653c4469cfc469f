/*
 * Profiles that know the request, end to end: a service traced by the real
 * OpenTelemetry SDK (sid's 3.13 to 3.15, tests/targets/otel_service.py)
 * sends its spans to the real Collector while pyprofd, attached with
 * --context otel, exports its profiles there; `query --trace` of one of
 * its traces holds the code that ran inside the span and nothing from
 * outside it, and what the Collector hands on carries both the traces and
 * profiles whose Links name the same trace and span.  An asyncio service's
 * requests split by their route ContextVar (tests/targets/context_routes.py):
 * the route whose handler burns holds its function, the other does not.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collector.h"
#include "daemon.h"
#include "helpers.h"
#include "otlp_profiles.pb-c.h"
#include "otlp_sink.h"
#include "pythons.h"

TestSuite(contexts, .init = helpers_init, .fini = helpers_fini);

/* How long traces are waited for in the history, and links at the sink. */
#define CONTEXTS_WAIT_S 60.0

/* The OTLP/HTTP path profiles take (the signal is still in development). */
#define CONTEXTS_PROFILES_PATH "/v1development/profiles"

/* The collapsed stacks of a query (the caller frees). */
static char *contexts_collapsed(const struct daemon *d, const char *const args[])
{
	struct run_result r;
	ctl_run(d, &r, args, NULL);
	cr_assert(r.exited && r.code == 0, "%s %s: %s", args[0], args[1], r.err ? r.err : "");
	char *out = r.out;
	r.out = NULL;
	run_result_free(&r);
	return out ? out : strdup("");
}

/* Samples of collapsed stacks whose line holds needle, and of all. */
static void contexts_count(const char *collapsed, const char *needle, uint64_t *with, uint64_t *all)
{
	*with = *all = 0;
	for (const char *line = collapsed; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *sp = line + len;
		while (sp > line && sp[-1] != ' ')
			sp--;
		uint64_t n = strtoull(sp, NULL, 10);
		*all += n;
		if (memmem(line, len, needle, strlen(needle)))
			*with += n;
		line = end ? end + 1 : NULL;
	}
}

/* Whether the service wrote "trace span" as one of its ended requests. */
static bool contexts_span_written(const char *spans_file, const char *trace, char span[17])
{
	FILE *f = fopen(spans_file, "r");
	if (!f)
		return false;
	char t[64], s[64];
	bool found = false;
	while (!found && fscanf(f, "%63s %63s", t, s) == 2)
		if (strcmp(t, trace) == 0) {
			snprintf(span, 17, "%.16s", s);
			found = true;
		}
	fclose(f);
	return found;
}

static void contexts_hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* What the sink's profiles say of one span: samples linked to it, and of them in checkout_compute. */
struct contexts_links {
	const char *trace, *span;
	uint64_t linked, in_compute, requests;
};

static bool contexts_link_scan(void *ctx, const uint8_t *body, size_t len)
{
	struct contexts_links *l = ctx;
	Pyprofd__Otlp__ExportProfilesServiceRequest *r =
		pyprofd__otlp__export_profiles_service_request__unpack(NULL, len, body);
	if (!r)
		return true;
	l->requests++;
	const Pyprofd__Otlp__ProfilesDictionary *d = r->dictionary;
	for (size_t i = 0; d && i < r->n_resource_profiles; i++)
		for (size_t j = 0; j < r->resource_profiles[i]->n_scope_profiles; j++)
			for (size_t k = 0; k < r->resource_profiles[i]->scope_profiles[j]->n_profiles; k++) {
				const Pyprofd__Otlp__Profile *p = r->resource_profiles[i]->scope_profiles[j]->profiles[k];
				for (size_t s = 0; s < p->n_samples; s++) {
					const Pyprofd__Otlp__Sample *smp = p->samples[s];
					if (smp->link_index <= 0 || (size_t)smp->link_index >= d->n_link_table)
						continue;
					const Pyprofd__Otlp__Link *link = d->link_table[smp->link_index];
					char t[33] = "", sp[17] = "";
					if (link->trace_id.len != 16 || link->span_id.len != 8)
						continue;
					contexts_hex(link->trace_id.data, 16, t);
					contexts_hex(link->span_id.data, 8, sp);
					if (strcmp(t, l->trace) != 0 || strcmp(sp, l->span) != 0)
						continue;
					uint64_t n = smp->n_values ? (uint64_t)smp->values[0] : 0;
					l->linked += n;
					if ((size_t)smp->stack_index >= d->n_stack_table)
						continue;
					const Pyprofd__Otlp__Stack *st = d->stack_table[smp->stack_index];
					bool compute = false;
					for (size_t x = 0; x < st->n_location_indices; x++) {
						const Pyprofd__Otlp__Location *loc = d->location_table[st->location_indices[x]];
						for (size_t y = 0; y < loc->n_lines; y++) {
							const Pyprofd__Otlp__Function *fn = d->function_table[loc->lines[y]->function_index];
							compute |= strcmp(d->string_table[fn->name_strindex], "checkout_compute") == 0;
						}
					}
					l->in_compute += compute ? n : 0;
				}
			}
	pyprofd__otlp__export_profiles_service_request__free_unpacked(r, NULL);
	return true;
}

/* One interpreter of the test root with the SDK: its service, traced, profiled and exported. */
static void contexts_otel_service(const struct python *py)
{
	char what[PATH_MAX + 64];
	python_describe(py, what, sizeof what);
	struct otlp_sink sink;
	otlp_sink_start(&sink);
	char sink_url[64], collector[64];
	snprintf(sink_url, sizeof sink_url, "http://127.0.0.1:%d", sink.port);
	struct collector col;
	collector_start_forwarding(&col, 0, sink_url);
	collector_url(&col, collector, sizeof collector);

	char dir[PATH_MAX - 64], config[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	snprintf(config, sizeof config, "%s/pyprofd.conf", dir);
	char text[1024];
	snprintf(text, sizeof text,
	         "[storage]\nflush_interval_s = 1\nbucket_seconds = 1\n"
	         "[export.otlp]\nendpoint = %s\ninterval = 1s\ntimeout = 2s\ncompression = none\n",
	         collector);
	write_text_file(config, text);
	const char *const dargs[] = {"--config", config, NULL};
	struct daemon d;
	daemon_start(&d, dargs);

	char script[PATH_MAX], pid[16], spans_file[PATH_MAX + 8];
	target_script("otel_service.py", script, sizeof script);
	struct test_target target;
	const char *args[] = {"-I", script, "{report}", collector, NULL};
	test_target_start_python(&target, py, args);
	json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
	snprintf(spans_file, sizeof spans_file, "%s.spans", target.report);
	pid_text(target.pid, pid, sizeof pid);
	const char *attach[] = {"attach", pid, "--context", "otel", NULL};
	ctl_ok(&d, attach);

	/*
	 * The Collector handing profiles on first: a trace exported before its
	 * exporter to the sink worked may be dropped by it, which says nothing
	 * of pyprofd.  So the trace is one that began after.
	 */
	struct contexts_links probe = {.trace = "", .span = ""};
	double deadline = mono_now() + CONTEXTS_WAIT_S;
	while (!probe.requests && mono_now() < deadline) {
		otlp_sink_each(&sink, CONTEXTS_PROFILES_PATH, contexts_link_scan, &probe);
		if (!probe.requests)
			pause_ms(250);
	}
	cr_assert_gt(probe.requests, 0, "%s: the Collector handed on no profiles", what);
	double handing_on = (double)time(NULL) + 1;

	/* A trace the history has samples of, begun after that, whose span the service saw end. */
	char trace[33] = "", span[17] = "";
	deadline = mono_now() + CONTEXTS_WAIT_S;
	while (!trace[0] && mono_now() < deadline) {
		/* The recent ones: the list is of the most sampled, and older traces would fill it. */
		const char *traces[] = {"query", "--pid", pid, "--since", "10s", "--limit", "1000", "--format", "traces", NULL};
		json_t *j = ctl_json(&d, traces);
		size_t i;
		json_t *t;
		json_array_foreach(j, i, t) {
			const char *id = json_string_value(json_object_get(t, "trace_id"));
			if (id && json_integer_value(json_object_get(t, "samples")) >= 2 &&
			    json_number_value(json_object_get(t, "first")) >= handing_on &&
			    contexts_span_written(spans_file, id, span)) {
				snprintf(trace, sizeof trace, "%s", id);
				break;
			}
		}
		json_decref(j);
		if (!trace[0])
			pause_ms(250);
	}
	cr_assert(trace[0], "%s: no trace of the service's came to the history", what);

	/* The trace's samples: its span's code, nothing from outside it. */
	uint64_t with, all, outside, unused;
	const char *by_trace[] = {"query", "--pid", pid, "--trace", trace, NULL};
	char *collapsed = contexts_collapsed(&d, by_trace);
	contexts_count(collapsed, "checkout_compute", &with, &all);
	contexts_count(collapsed, "outside_work", &outside, &unused);
	cr_expect_gt(all, 0, "%s: trace %s has no samples", what, trace);
	cr_expect_eq(outside, 0, "%s: trace %s holds %llu samples from outside its span:\n%s", what, trace,
	             (unsigned long long)outside, collapsed);
	cr_expect_geq(with * 10, all * 8, "%s: %llu of %llu samples of the span in checkout_compute:\n%s", what,
	              (unsigned long long)with, (unsigned long long)all, collapsed);
	free(collapsed);
	const char *by_span[] = {"query", "--pid", pid, "--span", span, NULL};
	collapsed = contexts_collapsed(&d, by_span);
	uint64_t span_with, span_all;
	contexts_count(collapsed, "checkout_compute", &span_with, &span_all);
	cr_expect_eq(span_all, all, "%s: span %s has %llu samples, its trace %llu", what, span,
	             (unsigned long long)span_all, (unsigned long long)all);
	free(collapsed);
	/* The whole history holds outside_work: the filter took it out, the sampler saw it. */
	const char *whole[] = {"query", "--pid", pid, NULL};
	collapsed = contexts_collapsed(&d, whole);
	contexts_count(collapsed, "outside_work", &outside, &all);
	cr_expect_gt(outside, 0, "%s: outside_work never sampled", what);
	free(collapsed);

	/* The Collector: the trace from the SDK, the profile's Link to it from pyprofd. */
	struct contexts_links links = {.trace = trace, .span = span};
	deadline = mono_now() + CONTEXTS_WAIT_S;
	while (mono_now() < deadline) {
		links.linked = links.in_compute = links.requests = 0;
		otlp_sink_each(&sink, CONTEXTS_PROFILES_PATH, contexts_link_scan, &links);
		char *log = collector_logs(&col);
		bool traced = log && strstr(log, trace);
		free(log);
		if (traced && links.linked)
			break;
		pause_ms(500);
	}
	char *log = collector_logs(&col);
	if (!links.requests) {
		/* What the Collector said of handing on, for the one who reads why this failed. */
		for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n"))
			if (strstr(line, "\"error\""))
				cr_log_warn("collector: %.300s", strstr(line, "\"error\""));
		free(log);
		log = collector_logs(&col);
	}
	cr_expect(log && strstr(log, trace), "%s: the Collector never logged trace %s", what, trace);
	cr_expect(log && strstr(log, span), "%s: the Collector never logged span %s", what, span);
	free(log);
	cr_expect_gt(links.requests, 0, "%s: the Collector handed on no profiles", what);
	cr_expect_gt(links.linked, 0, "%s: no profile sample links to trace %s span %s", what, trace, span);
	cr_expect_geq(links.in_compute * 10, links.linked * 8,
	              "%s: %llu of %llu linked samples in checkout_compute", what,
	              (unsigned long long)links.in_compute, (unsigned long long)links.linked);

	test_target_kill(&target);
	daemon_stop(&d);
	collector_stop(&col, SIGTERM);
	otlp_sink_stop(&sink);
}

Test(contexts, otel_spans_reach_the_history_and_the_collector, .timeout = 600)
{
	collector_require();
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX), tried = 0;
	for (size_t i = 0; i < n; i++) {
		/* The test root's interpreters alone import the SDK; 3.14's is sid's default, as 3.13's and 3.15's. */
		if (!pys[i].root_len || pys[i].debug || pys[i].contained || (pys[i].minor != 13 && pys[i].minor != 15))
			continue;
		contexts_otel_service(&pys[i]);
		tried++;
	}
	cr_expect_gt(tried, 0, "no interpreter of the test root: make pythons builds it");
}

/* Samples of a query with one context label, and of them in func. */
static void contexts_route(const struct daemon *d, const char *pid, const char *label, const char *func,
                           uint64_t *with, uint64_t *all)
{
	const char *args[] = {"query", "--pid", pid, "--context", label, NULL};
	char *collapsed = contexts_collapsed(d, args);
	contexts_count(collapsed, func, with, all);
	free(collapsed);
}

Test(contexts, asyncio_routes_split_the_profile, .timeout = 600)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX];
	target_script("context_routes.py", script, sizeof script);
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	size_t tried = 0;
	for (size_t i = 0; i < n; i++) {
		/* One of each minor past 3.10 (tasks are read from 3.11): pyenv's, or the root's for 3.14 and 3.15. */
		bool dup = false;
		for (size_t k = 0; k < i; k++)
			dup |= pys[k].minor == pys[i].minor && pys[k].supported;
		if (pys[i].minor < 11 || dup || pys[i].contained || pys[i].debug)
			continue;
		char what[PATH_MAX + 64], pid[16];
		python_describe(&pys[i], what, sizeof what);
		struct test_target target;
		const char *args[] = {"-I", script, "{report}", NULL};
		test_target_start_python(&target, &pys[i], args);
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		pid_text(target.pid, pid, sizeof pid);
		const char *attach[] = {"attach", pid, "--context-label", "route", "--async-mode", "all", NULL};
		ctl_ok(&d, attach);
		uint64_t burn_with = 0, burn_all = 0, wait_burn = 0, wait_all = 0, wait_handler = 0, unused;
		double deadline = mono_now() + CONTEXTS_WAIT_S;
		while (mono_now() < deadline && (burn_with < 50 || wait_handler < 50)) {
			pause_ms(500);
			contexts_route(&d, pid, "route=/burn", "burn_step", &burn_with, &burn_all);
			contexts_route(&d, pid, "route=/wait", "wait_handler", &wait_handler, &wait_all);
		}
		contexts_route(&d, pid, "route=/wait", "burn_step", &wait_burn, &unused);
		cr_expect_geq(burn_with, 50, "%s: route=/burn holds %llu samples in burn_step", what,
		              (unsigned long long)burn_with);
		cr_expect_geq(wait_handler, 50, "%s: route=/wait holds %llu samples in wait_handler", what,
		              (unsigned long long)wait_handler);
		cr_expect_eq(wait_burn, 0, "%s: route=/wait holds %llu samples in burn_step", what,
		             (unsigned long long)wait_burn);
		uint64_t burn_waits;
		contexts_route(&d, pid, "route=/burn", "wait_handler", &burn_waits, &unused);
		cr_expect_eq(burn_waits, 0, "%s: route=/burn holds %llu samples in wait_handler", what,
		             (unsigned long long)burn_waits);
		const char *list[] = {"list", NULL};
		json_t *j = ctl_json(&d, list);
		size_t k;
		json_t *e;
		json_array_foreach(j, k, e)
			if (jint(e, "pid") == target.pid)
				cr_expect_gt(jint(e, "context_samples"), 0, "%s: list counts no samples by request", what);
		json_decref(j);
		test_target_kill(&target);
		tried++;
	}
	cr_expect_gt(tried, 0);
	daemon_stop(&d);
}

/* The trace of the report's thread whose function is func, and its route. */
static void contexts_record_of(json_t *report, const char *func, const char **trace, const char **route)
{
	const char *tid;
	json_t *th;
	json_object_foreach(json_object_get(report, "threads"), tid, th)
		if (!strcmp(json_string_value(json_object_get(th, "function")), func)) {
			*trace = json_string_value(json_object_get(th, "trace_id"));
			*route = json_string_value(json_object_get(th, "route"));
		}
	cr_assert(*trace && *route, "the report has no thread in %s", func);
}

/*
 * A service whose native library publishes OpenTelemetry's process context
 * and thread records (tests/targets/otel_records.py): the daemon finds them
 * by itself, and each trace and route holds its own thread's function; so
 * does `pyprofd record`.
 */
Test(contexts, thread_records_split_the_profile, .timeout = 600)
{
	const char *dir = getenv("PYPROFD_OTEL_PUBLISHERS");
	cr_assert(dir, "PYPROFD_OTEL_PUBLISHERS is not set: `make test` builds the publishers and names them");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX];
	target_script("otel_records.py", script, sizeof script);
	static const char *const fast_flush[] = {"--flush-interval", "1", NULL};
	struct daemon d;
	daemon_start(&d, fast_flush);
	bool host_done = false, root_done = false;
	for (size_t i = 0; i < n; i++) {
		/* One interpreter of the host's glibc, one of the root's. */
		bool *done = pys[i].root_len ? &root_done : &host_done;
		if (*done || pys[i].contained || pys[i].debug)
			continue;
		*done = true;
		char what[PATH_MAX + 64], pid[16], from[PATH_MAX], lib[PATH_MAX], scratch[PATH_MAX - 64];
		python_describe(&pys[i], what, sizeof what);
		snprintf(from, sizeof from, "%s/libotelpub-desc.so", dir);
		scratch_dir(scratch, sizeof scratch);
		snprintf(lib, sizeof lib, "%s/libotelpub-desc.so", scratch);
		copy_executable(from, lib);
		struct test_target target;
		const char *args[] = {"-I", script, "{report}", lib, NULL};
		test_target_start_python(&target, &pys[i], args);
		json_t *report = test_target_wait_report(&target, TARGET_READY_TIMEOUT_S);
		pid_text(target.pid, pid, sizeof pid);
		const char *attach[] = {"attach", pid, "--context", "otel", "--context-label", "route", NULL};
		ctl_ok(&d, attach);
		const char *trace0 = NULL, *route0 = NULL, *trace1 = NULL, *route1 = NULL;
		contexts_record_of(report, "inside_0", &trace0, &route0);
		contexts_record_of(report, "inside_1", &trace1, &route1);
		char label1[64];
		snprintf(label1, sizeof label1, "route=%s", route1);
		uint64_t in0 = 0, all0 = 0, in1 = 0, all1 = 0, unused;
		double deadline = mono_now() + CONTEXTS_WAIT_S;
		const char *by_trace[] = {"query", "--pid", pid, "--trace", trace0, NULL};
		while (mono_now() < deadline && (in0 < 20 || in1 < 20)) {
			pause_ms(500);
			char *c = contexts_collapsed(&d, by_trace);
			contexts_count(c, "inside_0", &in0, &all0);
			free(c);
			contexts_route(&d, pid, label1, "inside_1", &in1, &all1);
		}
		cr_expect_geq(in0, 20, "%s: trace %s holds %llu samples in inside_0", what, trace0, (unsigned long long)in0);
		cr_expect_geq(in1, 20, "%s: %s holds %llu samples in inside_1", what, label1, (unsigned long long)in1);
		uint64_t other = 0, outside = 0;
		char *c = contexts_collapsed(&d, by_trace);
		contexts_count(c, "inside_1", &other, &unused);
		contexts_count(c, "outside_work", &outside, &unused);
		cr_expect_eq(other + outside, 0, "%s: trace %s holds another thread's or unspanned code:\n%s", what, trace0, c);
		free(c);
		contexts_route(&d, pid, label1, "inside_0", &other, &unused);
		cr_expect_eq(other, 0, "%s: %s holds %llu samples of inside_0", what, label1, (unsigned long long)other);
		char *log = daemon_log(&d);
		cr_expect(log && strstr(log, "thread records"), "%s: the daemon never said it reads the records", what);
		free(log);
		/* Its process context's service.name is the label it is stored under. */
		const char *by_service[] = {"query", "--label", "service=records-service", "--pid", pid, NULL};
		c = contexts_collapsed(&d, by_service);
		contexts_count(c, "inside_0", &other, &unused);
		cr_expect_gt(other, 0, "%s: nothing stored under service=records-service", what);
		free(c);
		const char *by_other[] = {"query", "--label", "service=another", "--pid", pid, NULL};
		struct run_result none;
		ctl_run(&d, &none, by_other, NULL);
		cr_expect(!none.out || !strstr(none.out, "inside_0"), "%s: service=another holds its samples", what);
		run_result_free(&none);

		/* record reads them too: each stack rooted under its thread's route. */
		const char *rec[] = {pyprofd_bin(), "record", pid, "--duration", "2", "--rate", "100",
		                     "--context", "otel", "--context-label", "route", NULL};
		struct run_result r;
		run_command(&r, rec, NULL);
		cr_assert(r.exited && r.code == 0, "%s: record: %s", what, r.err ? r.err : "");
		char root0[64];
		snprintf(root0, sizeof root0, "route=%s;", route0);
		unsigned mine = 0, others = 0;
		for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
			if (strncmp(line, root0, strlen(root0)) != 0)
				continue;
			mine += strstr(line, "inside_0") != NULL;
			others += strstr(line, "inside_1") || strstr(line, "inside_2") || strstr(line, "outside_work");
		}
		cr_expect_gt(mine, 0, "%s: record has no stack of inside_0 under %s", what, root0);
		cr_expect_eq(others, 0, "%s: record has %u other stacks under %s", what, others, root0);
		run_result_free(&r);
		test_target_kill(&target);
		json_decref(report);
	}
	cr_expect(host_done, "no interpreter of the host's");
	daemon_stop(&d);
}
