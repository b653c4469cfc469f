/*
 * The unwinder on memory images: a CPython 3.10 runtime built by hand at
 * the layout's offsets, read through the image backend instead of a
 * process.  A sound image must read back exactly; each hostile one (links
 * that loop, lengths past reason, objects of the wrong type) must give a
 * bounded, clear error and never a crash or a hang.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "image.h"

static struct uw_target *img_open(struct img *m, const struct img_runtime *r)
{
	m->image = (struct remote_image){m->seg, m->n};
	struct uw_image_target it = {&m->image, 10, r->runtime, CODE_TYPE, UNICODE_TYPE, BYTES_TYPE,
	                             FRAME_TYPE};
	struct uw_error err;
	struct uw_target *t = uw_open_image(&it, &err);
	cr_assert_not_null(t, "%s", err.msg);
	return t;
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
