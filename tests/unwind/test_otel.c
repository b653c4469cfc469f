/*
 * OpenTelemetry's records for outside readers, read from outside on every
 * supported interpreter (tests/targets/otel_records.py, its library
 * tests/otel/publisher.c): the process context (OTEP 4719) handed over as
 * its payload, once per publication, and each thread's record (OTEP 4947)
 * found through its thread pointer, in each TLS model a loader gives:
 * a TLS descriptor, static or in the thread's DTV, legacy general dynamic,
 * and initial-exec.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "pythons.h"
#include "unwind.h"
#include "uw_open.h"

TestSuite(otel, .init = helpers_init, .fini = helpers_fini);

/* The library variant's path, copied where a python in a root sees it too. */
static void otel_library(const char *variant, char *out, size_t len)
{
	const char *dir = getenv("PYPROFD_OTEL_PUBLISHERS");
	cr_assert(dir, "PYPROFD_OTEL_PUBLISHERS is not set: `make test` builds the publishers and names them");
	char from[PATH_MAX], scratch[PATH_MAX - 64];
	snprintf(from, sizeof from, "%s/libotelpub-%s.so", dir, variant);
	scratch_dir(scratch, sizeof scratch);
	snprintf(out, len, "%s/libotelpub-%s.so", scratch, variant);
	copy_executable(from, out);
}

static const char *otel_label(const struct uw_options *o, const struct uw_context *c, const char *key)
{
	for (uint32_t i = 0; c && i < c->nlabels; i++)
		if (strcmp(o->context_labels[c->labels[i].index], key) == 0)
			return c->labels[i].value;
	return NULL;
}

static bool otel_stack_has(const struct uw_target *t, uint32_t stack, const char *name)
{
	for (uint32_t st = stack, depth = 0; st && depth < 512; st = uw_stack_parent(t, st), depth++) {
		const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, st));
		if (f && f->function && strcmp(f->function, name) == 0)
			return true;
	}
	return false;
}

static void otel_hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/*
 * One target with one library variant: the process context once, then
 * every thread's record under its own function, and none outside.
 */
static void otel_check(const struct python *py, const char *variant, bool dynamic)
{
	char ctx[PATH_MAX + 96], lib[PATH_MAX], script[PATH_MAX];
	python_describe(py, ctx, sizeof ctx);
	snprintf(ctx + strlen(ctx), sizeof ctx - strlen(ctx), " %s%s", variant, dynamic ? " in the DTV" : "");
	otel_library(variant, lib, sizeof lib);
	target_script("otel_records.py", script, sizeof script);
	struct test_target target;
	const char *args[] = {"-I", script, "{report}", lib, dynamic ? "dynamic" : NULL, NULL};
	test_target_start_python(&target, py, args);
	json_t *report = test_target_wait_report(&target, TARGET_READY_TIMEOUT_S);
	json_t *threads = json_object_get(report, "threads");
	struct uw_target *t = test_uw_open(target.pid);
	struct uw_options o = {.context_otel = true, .ncontext_labels = 2};
	strcpy(o.context_labels[0], "route");
	strcpy(o.context_labels[1], "tenant");
	uw_configure(t, &o);

	struct uw_sample s = {0};
	struct uw_error err = {0};
	/* Before the key map is given, nothing of the records: the program runs no SDK. */
	for (int k = 0; k < 20; k++)
		if (uw_sample(t, &s, &err) == 0)
			for (uint32_t j = 0; j < s.nthreads; j++)
				cr_assert_null(s.threads[j].context, "%s: a context before the records were known", ctx);

	size_t cap = 1 << 16, len = 0;
	uint8_t *payload = malloc(cap);
	cr_assert_eq(uw_process_context(t, payload, cap, &len, &err), 1, "%s: no process context: %s", ctx, err.msg);
	cr_assert(memmem(payload, len, "threadlocal.attribute_key_map", 29), "%s: the key map is not in it", ctx);
	cr_assert(memmem(payload, len, "records-service", 15), "%s: service.name is not in it", ctx);
	cr_assert_eq(uw_process_context(t, payload, cap, &len, &err), 0, "%s: the same publication twice", ctx);
	free(payload);
	const char *keys[] = {"route", "tenant"};
	cr_assert(uw_thread_context_keys(t, keys, 2), "%s: otel_thread_ctx_v1 not found", ctx);

	json_t *seen = json_object();
	unsigned inside = 0, torn = 0;
	for (int round = 0; round < 600 && (round < 100 || json_object_size(seen) < 3); round++) {
		if (uw_sample(t, &s, &err) != 0) {
			cr_assert(err.status == UW_ECORRUPT, "%s: %s", ctx, err.msg);
			continue;
		}
		for (uint32_t j = 0; j < s.nthreads; j++) {
			const struct uw_sample_thread *th = &s.threads[j];
			char tid[24];
			snprintf(tid, sizeof tid, "%lld", (long long)th->native_id);
			json_t *want = json_object_get(threads, tid);
			if (!want)
				continue;
			const char *fn = json_string_value(json_object_get(want, "function"));
			if (otel_stack_has(t, th->stack, "outside_work")) {
				/* Detached: the record is gone, and nothing else gives one. */
				cr_assert_null(th->context, "%s: thread %s outside its span has a context", ctx, tid);
				continue;
			}
			if (!otel_stack_has(t, th->stack, fn))
				continue;
			if (!th->context) {
				torn++; /* it moved while read: none, never another's */
				continue;
			}
			char trace[33], span[17];
			cr_assert(th->context->has_span, "%s: thread %s in %s has no span", ctx, tid, fn);
			otel_hex(th->context->trace_id, 16, trace);
			otel_hex(th->context->span_id, 8, span);
			cr_assert_str_eq(trace, json_string_value(json_object_get(want, "trace_id")), "%s: thread %s", ctx, tid);
			cr_assert_str_eq(span, json_string_value(json_object_get(want, "span_id")), "%s: thread %s", ctx, tid);
			const char *route = otel_label(&o, th->context, "route"), *tenant = otel_label(&o, th->context, "tenant");
			cr_assert(route && !strcmp(route, json_string_value(json_object_get(want, "route"))),
			          "%s: thread %s under route %s", ctx, tid, route ? route : "none");
			cr_assert(tenant && !strcmp(tenant, json_string_value(json_object_get(want, "tenant"))),
			          "%s: thread %s under tenant %s", ctx, tid, tenant ? tenant : "none");
			json_object_set_new(seen, tid, json_true());
			inside++;
		}
		usleep(3000);
	}
	cr_assert_eq(json_object_size(seen), 3, "%s: %zu of 3 threads seen in their span", ctx, json_object_size(seen));
	cr_log_info("%s: %u samples in their span, %u without (moved while read)", ctx, inside, torn);

	/* Asked for nothing, the records are not read. */
	struct uw_options off = {0};
	uw_configure(t, &off);
	for (int k = 0; k < 10; k++)
		if (uw_sample(t, &s, &err) == 0)
			for (uint32_t j = 0; j < s.nthreads; j++)
				cr_assert_null(s.threads[j].context, "%s: a context with the option off", ctx);
	uw_sample_free(&s);
	uw_close(t);
	test_target_kill(&target);
	json_decref(seen);
	json_decref(report);
}

Test(otel, thread_records_of_every_interpreter, .timeout = 900)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	bool host_done = false, root_done = false;
	for (size_t i = 0; i < n; i++) {
		otel_check(&pys[i], "desc", false);
		/* Every model on one interpreter of the host's glibc and one of the root's. */
		bool *done = pys[i].root_len ? &root_done : &host_done;
		if (*done)
			continue;
		*done = true;
		otel_check(&pys[i], "desc", true);
		otel_check(&pys[i], "gd", false);
		otel_check(&pys[i], "gd", true);
		otel_check(&pys[i], "ie", false);
	}
}
