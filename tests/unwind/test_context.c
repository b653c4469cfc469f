/*
 * Request contexts read from outside, on every supported interpreter
 * (tests/targets/contexts.py): each thread's "route" and "tenant"
 * ContextVars as labels (a str, an int, a str cut at 63 bytes, a list
 * giving none), OpenTelemetry's current span where the SDK is installed,
 * none for a thread whose context holds nothing asked for; through the
 * sample's batch as without it.
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

TestSuite(context, .init = helpers_init, .fini = helpers_fini);

/* Samples taken at most while waiting for every thread to show. */
#define CONTEXT_SAMPLES 400

static void context_hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* The label named key of a context, NULL when it has none. */
static const char *context_label(const struct uw_options *o, const struct uw_context *c, const char *key)
{
	for (uint32_t i = 0; c && i < c->nlabels; i++)
		if (strcmp(o->context_labels[c->labels[i].index], key) == 0)
			return c->labels[i].value;
	return NULL;
}

/* Whether a thread's context is what the target said of it; why not into why. */
static bool context_matches(const struct uw_options *o, const struct uw_context *c, json_t *want, char *why,
                            size_t len)
{
	static const char *const keys[] = {"route", "tenant"};
	for (size_t k = 0; k < 2; k++) {
		const char *w = json_string_value(json_object_get(want, keys[k]));
		const char *got = context_label(o, c, keys[k]);
		if ((w == NULL) != (got == NULL) || (w && strcmp(w, got) != 0)) {
			snprintf(why, len, "%s: want %s, got %s", keys[k], w ? w : "none", got ? got : "none");
			return false;
		}
	}
	const char *trace = json_string_value(json_object_get(want, "trace_id"));
	const char *span = json_string_value(json_object_get(want, "span_id"));
	if (!trace) {
		if (c && c->has_span) {
			snprintf(why, len, "a span where none was opened");
			return false;
		}
		return true;
	}
	char got_trace[33], got_span[17];
	if (!c || !c->has_span) {
		snprintf(why, len, "no span where %s/%s was", trace, span);
		return false;
	}
	context_hex(c->trace_id, 16, got_trace);
	context_hex(c->span_id, 8, got_span);
	if (strcmp(got_trace, trace) != 0 || strcmp(got_span, span) != 0) {
		snprintf(why, len, "span %s/%s where %s/%s was", got_trace, got_span, trace, span);
		return false;
	}
	return true;
}

/*
 * Samples until every thread the target listed showed with its context:
 * a sample may give a running thread none (it moved while read), never
 * another.
 */
static void context_check(struct uw_target *t, const struct uw_options *o, json_t *threads, const char *ctx,
                          bool *otel_seen)
{
	size_t nwant = json_object_size(threads);
	json_t *seen = json_object();
	unsigned torn = 0;
	struct uw_sample s = {0};
	struct uw_error err = {0};
	for (int round = 0; round < CONTEXT_SAMPLES && (round < 10 || json_object_size(seen) < nwant); round++) {
		if (uw_sample(t, &s, &err) != 0) {
			cr_assert(err.status == UW_ECORRUPT, "%s: %s", ctx, err.msg);
			continue;
		}
		for (uint32_t i = 0; i < s.nthreads; i++) {
			char tid[24], why[256];
			snprintf(tid, sizeof tid, "%lld", (long long)s.threads[i].native_id);
			json_t *want = json_object_get(threads, tid);
			if (!want || (!s.threads[i].context && s.threads[i].on_cpu))
				continue;
			if (!s.threads[i].context && json_object_size(want)) {
				torn++;
				continue;
			}
			cr_assert(context_matches(o, s.threads[i].context, want, why, sizeof why),
			          "%s: thread %s: %s", ctx, tid, why);
			if (s.threads[i].context && s.threads[i].context->has_span)
				*otel_seen = true;
			json_object_set_new(seen, tid, json_true());
		}
		usleep(5000);
	}
	cr_assert_eq(json_object_size(seen), nwant, "%s: %zu of %zu threads seen", ctx, json_object_size(seen),
	             nwant);
	cr_log_info("%s: %u thread samples without their context (moved while read)", ctx, torn);
	uw_sample_free(&s);
	json_decref(seen);
}

Test(context, labels_and_spans_of_every_thread, .timeout = 600)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX];
	target_script("contexts.py", script, sizeof script);
	size_t otel_targets = 0;
	for (size_t i = 0; i < n; i++) {
		char ctx[PATH_MAX + 64];
		python_describe(&pys[i], ctx, sizeof ctx);
		struct test_target target;
		const char *args[] = {"-I", script, "{report}", NULL};
		test_target_start_python(&target, &pys[i], args);
		json_t *report = test_target_wait_report(&target, TARGET_READY_TIMEOUT_S);
		bool otel = json_is_true(json_object_get(report, "otel"));
		json_t *threads = json_object_get(report, "threads");
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_options o = {.context_otel = true, .ncontext_labels = 2};
		strcpy(o.context_labels[0], "route");
		strcpy(o.context_labels[1], "tenant");
		/* Cached, then every sample read afresh: the same answers. */
		bool otel_seen = false;
		uw_configure(t, &o);
		context_check(t, &o, threads, ctx, &otel_seen);
		struct uw_stats st;
		o.no_cache = true;
		uw_configure(t, &o);
		context_check(t, &o, threads, ctx, &otel_seen);
		cr_expect_eq(otel_seen, otel, "%s: the SDK %s, a span %s", ctx, otel ? "runs" : "is absent",
		             otel_seen ? "seen" : "never seen");
		otel_targets += otel;

		/* Off: nothing read, nothing given. */
		struct uw_options off = {0};
		uw_configure(t, &off);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		uw_stats(t, &st);
		uint64_t reads = st.context_reads;
		for (int k = 0; k < 20; k++)
			if (uw_sample(t, &s, &err) == 0)
				for (uint32_t j = 0; j < s.nthreads; j++)
					cr_assert_null(s.threads[j].context, "%s: a context with the option off", ctx);
		uw_stats(t, &st);
		cr_expect_eq(st.context_reads, reads, "%s: contexts read with the option off", ctx);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
		json_decref(report);
	}
	/* The test root's 3.13 to 3.15 carry the SDK: it must have been tried. */
	if (getenv("PYPROFD_PYTHONS_ROOT"))
		cr_expect_gt(otel_targets, 0, "no interpreter could import the OpenTelemetry SDK");
}

/* Whether a stack of t holds a frame of function name. */
static bool context_stack_has(const struct uw_target *t, uint32_t stack, const char *name)
{
	for (uint32_t st = stack, depth = 0; st && depth < 512; st = uw_stack_parent(t, st), depth++) {
		const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, st));
		if (f && f->function && strcmp(f->function, name) == 0)
			return true;
	}
	return false;
}

/*
 * An asyncio service's requests by route: with every task a stack of its
 * own, each parked request carries its own task's route, and the one
 * running its thread's (which is its task's while a step runs).
 */
Test(context, asyncio_tasks_carry_their_own_routes, .timeout = 600)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX];
	target_script("context_routes.py", script, sizeof script);
	for (size_t i = 0; i < n; i++) {
		if (pys[i].minor < 11)
			continue; /* tasks are read from 3.11 */
		char ctx[PATH_MAX + 64];
		python_describe(&pys[i], ctx, sizeof ctx);
		struct test_target target;
		const char *args[] = {"-I", script, "{report}", NULL};
		test_target_start_python(&target, &pys[i], args);
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_options o = {.ncontext_labels = 1, .async_mode = UW_ASYNC_ALL, .want_idle = true};
		strcpy(o.context_labels[0], "route");
		uw_configure(t, &o);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		unsigned waits = 0, burns = 0, unlabelled = 0;
		for (int round = 0; round < 300; round++) {
			if (uw_sample(t, &s, &err) != 0) {
				cr_assert(err.status == UW_ECORRUPT, "%s: %s", ctx, err.msg);
				continue;
			}
			for (uint32_t k = 0; k < s.nthreads; k++) {
				const struct uw_sample_thread *th = &s.threads[k];
				const char *r = context_label(&o, th->context, "route");
				bool wait = context_stack_has(t, th->stack, "wait_handler");
				bool burn = context_stack_has(t, th->stack, "burn_handler");
				if (wait) {
					cr_assert(r && strcmp(r, "/wait") == 0, "%s: a waiting request under route %s", ctx,
					          r ? r : "none");
					waits++;
				}
				if (burn && !th->idle && context_stack_has(t, th->stack, "burn_step")) {
					/* Running, it may have left the request while read: none then, never another. */
					cr_assert(!r || strcmp(r, "/burn") == 0, "%s: a burning request under route %s", ctx, r);
					burns += r != NULL;
					unlabelled += r == NULL;
				}
			}
			usleep(2000);
		}
		cr_expect_geq(waits, 50, "%s: %u waiting requests seen", ctx, waits);
		cr_expect_geq(burns, 5, "%s: %u burning requests seen", ctx, burns);
		cr_log_info("%s: %u burning samples by their route, %u without (moved while read)", ctx, burns,
		            unlabelled);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}

/*
 * Requests entered and left back to back, each HAMT made where the last
 * one was freed: a sample's route is the one its stack ran under, or none,
 * never the other (a read kept by its pointers would say the last one's).
 */
Test(context, a_route_set_again_and_again_is_never_the_last_ones, .timeout = 600)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX];
	target_script("context_flips.py", script, sizeof script);
	for (size_t i = 0; i < n; i++) {
		char ctx[PATH_MAX + 64];
		python_describe(&pys[i], ctx, sizeof ctx);
		struct test_target target;
		const char *args[] = {"-I", script, "{report}", NULL};
		test_target_start_python(&target, &pys[i], args);
		json_decref(test_target_wait_report(&target, TARGET_READY_TIMEOUT_S));
		struct uw_target *t = test_uw_open(target.pid);
		struct uw_options o = {.ncontext_labels = 1};
		strcpy(o.context_labels[0], "route");
		uw_configure(t, &o);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		unsigned right = 0, none = 0;
		for (int round = 0; round < 300; round++) {
			if (uw_sample(t, &s, &err) != 0)
				continue;
			for (uint32_t k = 0; k < s.nthreads; k++) {
				const struct uw_sample_thread *th = &s.threads[k];
				bool even = context_stack_has(t, th->stack, "even_work");
				bool odd = context_stack_has(t, th->stack, "odd_work");
				if (!even && !odd)
					continue;
				const char *r = context_label(&o, th->context, "route");
				cr_assert(!r || strcmp(r, even ? "/even" : "/odd") == 0, "%s: %s under route %s", ctx,
				          even ? "even_work" : "odd_work", r);
				right += r != NULL;
				none += r == NULL;
			}
			usleep(1000);
		}
		cr_expect_gt(right, 0, "%s: no sample with its route", ctx);
		cr_log_info("%s: %u samples under their route, %u without (moved while read)", ctx, right, none);
		uw_sample_free(&s);
		uw_close(t);
		test_target_kill(&target);
	}
}
