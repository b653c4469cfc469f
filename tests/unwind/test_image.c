/*
 * The unwinder on memory images: a CPython 3.10 runtime built by hand at
 * the layout's offsets, read through the image backend instead of a
 * process.  A sound image must read back exactly; each hostile one (links
 * that loop, lengths past reason, objects of the wrong type) must give a
 * bounded, clear error and never a crash or a hang.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

/* The image as a target; tp_offset nonzero: publishing thread records there (uw_image_target's). */
static struct uw_target *img_open_at(struct img *m, const struct img_runtime *r, int64_t tp_offset)
{
	m->image = (struct remote_image){m->seg, m->n};
	struct uw_image_target it = {&m->image,  10,        r->runtime, CODE_TYPE,  UNICODE_TYPE,    BYTES_TYPE,
	                             FRAME_TYPE, DICT_TYPE, LONG_TYPE,  TUPLE_TYPE, CONTEXTVAR_TYPE, tp_offset};
	struct uw_error err;
	struct uw_target *t = uw_open_image(&it, &err);
	cr_assert_not_null(t, "%s", err.msg);
	return t;
}

static struct uw_target *img_open(struct img *m, const struct img_runtime *r)
{
	return img_open_at(m, r, 0);
}


/* A snapshot that must fail as corrupt. */
static void expect_corrupt(struct img *m, const struct img_runtime *r, const char *what)
{
	struct uw_target *t = img_open(m, r);
	struct uw_snapshot snap;
	struct uw_error err = {0};
	cr_assert_eq(uw_snapshot(t, 0, &snap, &err), -1, "%s: read as a stack", what);
	cr_assert_eq(err.status, UW_ECORRUPT, "%s: %s", what, err.msg);
	uw_close(t);
	img_free(m);
}

Test(image, a_sound_runtime_reads_back)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	struct uw_target *t = img_open(&m, &r);
	struct uw_snapshot snap;
	struct uw_error err;
	cr_assert_eq(uw_snapshot(t, 0, &snap, &err), 0, "%s", err.msg);
	cr_assert_eq(snap.nthreads, 1);
	cr_assert_eq(snap.threads[0].thread_id, 4242);
	cr_assert_eq(snap.threads[0].nframes, 3);
	cr_assert_str_eq(snap.threads[0].frames[0].function, "leaf");
	cr_assert_str_eq(snap.threads[0].frames[2].function, "root");
	cr_assert_str_eq(snap.threads[0].frames[0].file, "app.py");
	uw_snapshot_release(&snap);
	/* Sampled again, the same stack from the caches. */
	struct uw_sample s = {0};
	cr_assert_eq(uw_sample(t, &s, &err), 0, "%s", err.msg);
	struct uw_stats st;
	uw_stats(t, &st);
	cr_assert_gt(st.frame_cache_full_hits, 0, "the stack was not found as it was");
	uw_sample_free(&s);
	uw_close(t);
	img_free(&m);
}

Test(image, a_frame_that_is_its_own_caller, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_put64(r.frame_b[1], m.L->frame.back, r.frames[1]);
	expect_corrupt(&m, &r, "a frame its own caller");
}

Test(image, frames_calling_in_a_circle_stop_at_the_bound, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	/* leaf -> mid -> leaf -> ...: every link sound, the chain endless. */
	img_put64(r.frame_b[1], m.L->frame.back, r.frames[2]);
	struct uw_target *t = img_open(&m, &r);
	struct uw_snapshot snap;
	struct uw_error err;
	cr_assert_eq(uw_snapshot(t, 0, &snap, &err), 0, "%s", err.msg);
	cr_assert(snap.threads[0].truncated);
	cr_assert_eq(snap.threads[0].nframes, UW_MAX_FRAMES);
	uw_snapshot_release(&snap);
	uw_close(t);
	img_free(&m);
}

/* A walk past its time is cut short and counted; what the caches learnt stays for the next. */
Test(image, a_walk_past_its_time_is_cut_short, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	/* leaf -> mid -> leaf -> ...: 8192 frames a sample, far longer than a nanosecond. */
	img_put64(r.frame_b[1], m.L->frame.back, r.frames[2]);
	struct uw_target *t = img_open(&m, &r);
	uw_configure(t, &(struct uw_options){.max_sample_ns = 1});
	struct uw_sample s = {0};
	struct uw_error err;
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(uw_sample(t, &s, &err), 0, "%s", err.msg);
		cr_assert(s.cut, "sample %d not cut", i);
		cr_assert_eq(s.nthreads, 0, "a thread cut in the middle of its stack was kept");
	}
	struct uw_stats st;
	uw_stats(t, &st);
	cr_assert_eq(st.walks_cut, 3);
	/* A dump would show a part as the whole: it fails instead. */
	struct uw_snapshot snap;
	cr_assert_eq(uw_snapshot(t, 0, &snap, &err), -1);
	cr_assert(strstr(err.msg, "cut short"), "%s", err.msg);
	/* Unbounded again, the walk goes to the end. */
	uw_configure(t, &(struct uw_options){0});
	cr_assert_eq(uw_sample(t, &s, &err), 0, "%s", err.msg);
	cr_assert(!s.cut);
	cr_assert_eq(s.nthreads, 1);
	cr_assert(s.threads[0].truncated);
	uw_sample_free(&s);
	uw_close(t);
	img_free(&m);
}

Test(image, a_thread_list_that_loops, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_put64(r.tstate_b, m.L->tstate.next, r.tstate);
	expect_corrupt(&m, &r, "a thread its own next");
}

Test(image, two_threads_that_point_at_each_other, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	uint8_t *other;
	raddr_t t2 = img_alloc(&m, m.L->tstate.size + 16, &other);
	img_put64(other, m.L->tstate.interp, r.interp);
	img_put64(other, m.L->tstate.next, r.tstate);
	img_put64(r.tstate_b, m.L->tstate.next, t2);
	/* Seen at the first state met twice, not after thousands of threads. */
	struct uw_target *t = img_open(&m, &r);
	struct uw_sample s = {0};
	struct uw_error err;
	cr_assert_eq(uw_sample(t, &s, &err), -1);
	cr_assert(strstr(err.msg, "loops"), "%s", err.msg);
	struct uw_stats st;
	uw_stats(t, &st);
	cr_assert_leq(st.thread_samples, 2, "walked %llu threads of a list of two",
	              (unsigned long long)st.thread_samples);
	uw_sample_free(&s);
	uw_close(t);
	expect_corrupt(&m, &r, "two threads in a circle");
}

Test(image, an_interpreter_list_that_loops, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_put64(r.interp_b, m.L->interp.next, r.interp);
	expect_corrupt(&m, &r, "an interpreter its own next");
}

Test(image, a_name_too_long_to_be_one, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	uint8_t *s;
	raddr_t huge = img_alloc(&m, m.L->unicode.ascii_size + 8, &s);
	img_put64(s, m.L->object.ob_type, UNICODE_TYPE);
	img_put64(s, m.L->unicode.length, 1ull << 40);
	img_put32(s, m.L->unicode.state, (1u << 2) | (1u << 5) | (1u << 6));
	img_put64(r.code_b, m.L->code.name, huge);
	expect_corrupt(&m, &r, "a name of 2^40 characters");
}

Test(image, a_code_object_that_is_not_one, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_put64(r.code_b, m.L->object.ob_type, UNICODE_TYPE);
	expect_corrupt(&m, &r, "a str where a code object belongs");
}

Test(image, pointers_into_nothing, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_put64(r.frame_b[1], m.L->frame.code, 0x12345678ull);
	expect_corrupt(&m, &r, "a code pointer into unmapped memory");
}

/* The options that read the image's context: the span and both labels. */
static void img_context_options(struct uw_target *t)
{
	struct uw_options o = {.context_otel = true, .ncontext_labels = 2};
	strcpy(o.context_labels[0], "route");
	strcpy(o.context_labels[1], "tenant");
	uw_configure(t, &o);
}

/* The one thread's context of a sample of the image (NULL when none); err when the sample failed. */
static const struct uw_context *img_sample_context(struct uw_target *t, struct uw_sample *s)
{
	struct uw_error err = {0};
	cr_assert_eq(uw_sample(t, s, &err), 0, "%s", err.msg);
	cr_assert_eq(s->nthreads, 1);
	return s->threads[0].context;
}

static void img_hex_of(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

Test(image, a_context_reads_back, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_context(&m, &r);
	struct uw_target *t = img_open(&m, &r);
	img_context_options(t);
	struct uw_sample s = {0};
	for (int round = 0; round < 3; round++) {
		const struct uw_context *c = img_sample_context(t, &s);
		cr_assert_not_null(c, "no context");
		cr_assert(c->has_span);
		char trace[33], span[17];
		img_hex_of(c->trace_id, 16, trace);
		img_hex_of(c->span_id, 8, span);
		cr_expect_str_eq(trace, IMG_TRACE_ID);
		cr_expect_str_eq(span, IMG_SPAN_ID);
		cr_assert_eq(c->nlabels, 2);
		for (uint32_t i = 0; i < 2; i++)
			cr_expect_str_eq(c->labels[i].value, c->labels[i].index == 0 ? IMG_ROUTE : "42");
	}
	struct uw_stats st;
	uw_stats(t, &st);
	cr_expect_eq(st.context_reads, 3, "read every sample");
	/*
	 * The route's value replaced where it lies, every pointer as it was (a
	 * HAMT freed and made again at the same address): seen at once.
	 */
	img_put64(r.hamt_node_b, 40, img_alloc(&m, 1, &(uint8_t *){0}));
	m.image = (struct remote_image){m.seg, m.n};
	const struct uw_context *c = img_sample_context(t, &s);
	cr_assert_not_null(c, "the span still stands");
	for (uint32_t i = 0; i < c->nlabels; i++)
		cr_expect_neq(c->labels[i].index, 0, "a route read from an object that is no str");
	uw_sample_free(&s);
	uw_close(t);
	img_free(&m);
}

/* Garbage in a context: no crash, no hang, and never a value that is not there. */
Test(image, a_context_of_garbage_gives_nothing_wrong, .timeout = 30)
{
	for (int kind = 0; kind < 6; kind++) {
		struct img m;
		struct img_runtime r;
		img_build(&m, &r);
		img_context(&m, &r);
		const char *what = "";
		switch (kind) {
		case 0: /* a node that is its own child */
			what = "a HAMT node that holds itself";
			img_put64(r.hamt_node_b, 32, 0);
			img_put64(r.hamt_node_b, 40, r.hamt_node);
			break;
		case 1: /* a node size past its bitmap */
			what = "a node's size past its bitmap";
			img_put64(r.hamt_node_b, 16, 1u << 30);
			break;
		case 2: /* the trace id an int of a million digits */
			what = "an int of a million digits";
			img_put64(r.span_context_b, 24, img_int(&m, 0, NULL));
			{
				uint8_t *b;
				raddr_t huge = img_alloc(&m, 64, &b);
				img_put64(b, 8, LONG_TYPE);
				img_put64(b, 16, 1000000);
				img_put64(r.span_context_b, 24, huge);
			}
			break;
		case 3: /* a tuple that says it holds a billion items */
			what = "a SpanContext of a billion items, the ids past its end";
			img_put64(r.span_context_b, 16, 1000000000);
			break;
		case 4: /* the context pointing at the thread state */
			what = "a context that is the thread state";
			img_put64(r.context_b, 24, r.tstate);
			break;
		case 5: /* a route of a str that says it is 2^40 characters long */
			what = "a str of 2^40 characters";
			{
				uint8_t *b;
				raddr_t str = img_alloc(&m, 128, &b);
				img_put64(b, m.L->object.ob_type, UNICODE_TYPE);
				img_put64(b, m.L->unicode.length, 1ull << 40);
				img_put32(b, m.L->unicode.state, (1u << 5) | (1u << 6));
				img_put64(r.hamt_node_b, 40, str);
			}
			break;
		}
		m.image = (struct remote_image){m.seg, m.n};
		struct uw_target *t = img_open(&m, &r);
		img_context_options(t);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		for (int round = 0; round < 3; round++) {
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", what, err.msg);
			const struct uw_context *c = s.threads[0].context;
			char trace[33], span[17];
			if (c && c->has_span) {
				img_hex_of(c->trace_id, 16, trace);
				img_hex_of(c->span_id, 8, span);
				cr_expect(strcmp(trace, IMG_TRACE_ID) == 0 && strcmp(span, IMG_SPAN_ID) == 0,
				          "%s: a span that is not there: %s/%s", what, trace, span);
			}
			for (uint32_t i = 0; c && i < c->nlabels; i++) {
				cr_assert_lt(c->labels[i].index, 2, "%s", what);
				cr_assert_lt(strnlen(c->labels[i].value, UW_CONTEXT_VALUE_LEN), UW_CONTEXT_VALUE_LEN);
				const char *want = c->labels[i].index == 0 ? IMG_ROUTE : "42";
				cr_expect(kind == 5 || strcmp(c->labels[i].value, want) == 0, "%s: label %s", what,
				          c->labels[i].value);
			}
		}
		uw_sample_free(&s);
		uw_close(t);
		img_free(&m);
	}
}

/* The image opened as a process publishing thread records, their keys named route and tenant. */
static struct uw_target *img_open_records(struct img *m, const struct img_runtime *r, int64_t tp_offset)
{
	struct uw_target *t = img_open_at(m, r, tp_offset);
	img_context_options(t);
	const char *keys[] = {"route", "tenant"};
	uw_thread_context_keys(t, keys, 2);
	return t;
}

/* The record's span and attributes, in place of what the ContextVars say. */
Test(image, a_thread_record_reads_back, .timeout = 30)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_context(&m, &r);
	struct uw_target *t = img_open_records(&m, &r, img_record(&m, &r));
	struct uw_sample s = {0};
	for (int round = 0; round < 3; round++) {
		const struct uw_context *c = img_sample_context(t, &s);
		cr_assert_not_null(c, "no context");
		cr_assert(c->has_span);
		char trace[33], span[17];
		img_hex_of(c->trace_id, 16, trace);
		img_hex_of(c->span_id, 8, span);
		cr_expect_str_eq(trace, IMG_RECORD_TRACE_ID, "the record's trace, not the ContextVar's");
		cr_expect_str_eq(span, IMG_RECORD_SPAN_ID);
		cr_assert_eq(c->nlabels, 2);
		for (uint32_t i = 0; i < 2; i++)
			cr_expect_str_eq(c->labels[i].value, c->labels[i].index == 0 ? IMG_RECORD_ROUTE : IMG_RECORD_TENANT);
	}
	/* Detached (the slot NULL): no span, though the ContextVar still holds one; labels from the ContextVars. */
	img_put64(r.tls_slot_b, 0, 0);
	const struct uw_context *c = img_sample_context(t, &s);
	cr_assert_not_null(c, "the ContextVars' labels stand");
	cr_expect(!c->has_span, "a span the process says is not there");
	for (uint32_t i = 0; i < c->nlabels; i++)
		cr_expect_str_eq(c->labels[i].value, c->labels[i].index == 0 ? IMG_ROUTE : "42");
	/* Being written (valid 0): the same. */
	img_put64(r.tls_slot_b, 0, r.record);
	r.record_b[24] = 0;
	c = img_sample_context(t, &s);
	cr_expect(c && !c->has_span, "a record being written gave a span");
	uw_sample_free(&s);
	uw_close(t);
	img_free(&m);
}

/* Garbage in a record: no crash, no hang, and never a value that is not there. */
Test(image, a_thread_record_of_garbage_gives_nothing_wrong, .timeout = 30)
{
	for (int kind = 0; kind < 5; kind++) {
		struct img m;
		struct img_runtime r;
		img_build(&m, &r);
		int64_t offset = img_record(&m, &r);
		const char *what = "";
		switch (kind) {
		case 0:
			what = "attributes of 65535 bytes";
			r.record_b[26] = r.record_b[27] = 0xff;
			break;
		case 1:
			what = "an attribute longer than the rest";
			r.record_b[29] = 200;
			break;
		case 2:
			what = "a key past the key map";
			r.record_b[28] = 77;
			break;
		case 3:
			what = "a record pointer into nothing";
			img_put64(r.tls_slot_b, 0, 0x12345678ull);
			break;
		case 4:
			what = "a slot that points to itself";
			img_put64(r.tls_slot_b, 0, r.tls_slot);
			break;
		}
		struct uw_target *t = img_open_records(&m, &r, offset);
		struct uw_sample s = {0};
		struct uw_error err = {0};
		for (int round = 0; round < 3; round++) {
			cr_assert_eq(uw_sample(t, &s, &err), 0, "%s: %s", what, err.msg);
			const struct uw_context *c = s.threads[0].context;
			char trace[33];
			if (c && c->has_span) {
				img_hex_of(c->trace_id, 16, trace);
				cr_expect(kind == 4 || strcmp(trace, IMG_RECORD_TRACE_ID) == 0, "%s: trace %s", what, trace);
			}
			for (uint32_t i = 0; c && i < c->nlabels; i++) {
				cr_assert_lt(c->labels[i].index, 2, "%s", what);
				cr_assert_lt(strnlen(c->labels[i].value, UW_CONTEXT_VALUE_LEN), UW_CONTEXT_VALUE_LEN);
				const char *want = c->labels[i].index == 0 ? IMG_RECORD_ROUTE : IMG_RECORD_TENANT;
				cr_expect(kind == 0 || strcmp(c->labels[i].value, want) == 0, "%s: label %s", what,
				          c->labels[i].value);
			}
		}
		uw_sample_free(&s);
		uw_close(t);
		img_free(&m);
	}
}
