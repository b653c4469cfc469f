/*
 * A target's way from stack ids to the history, and the registry's trimming,
 * on real interpreters: spelling stack ids into a sink (daemon/spell.c), a
 * target's counts spelled into a batch and read back from a real store
 * (target_flush), and which targets the warm budget and the cap drop.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "pyprofd.h"
#include "store.h"

TestSuite(targets, .init = helpers_init, .fini = helpers_fini);

/* A sink that keeps what it is given, to compare with the unwinder's own view. */
struct test_sink {
	struct uw_frame frames[4096];
	int32_t nframes;
	struct {
		int32_t parent, frame;
	} stacks[4096];
	int32_t nstacks;
	unsigned frame_calls, stack_calls;
};

static int32_t test_sink_frame(void *ctx, const struct uw_frame *f)
{
	struct test_sink *s = ctx;
	s->frame_calls++;
	cr_assert_lt(s->nframes, 4096);
	s->frames[s->nframes] = *f;
	return s->nframes++;
}

static int32_t test_sink_stack(void *ctx, int32_t parent, int32_t frame)
{
	struct test_sink *s = ctx;
	s->stack_calls++;
	cr_assert_lt(s->nstacks, 4096);
	cr_assert_lt(parent, s->nstacks, "a parent is spelled before its children");
	cr_assert_lt(frame, s->nframes);
	s->stacks[s->nstacks].parent = parent;
	s->stacks[s->nstacks].frame = frame;
	return s->nstacks++;
}

static const struct spell_sink test_sink_ops = {test_sink_frame, test_sink_stack};

/* A parked target of stacks.py and the newest supported interpreter. */
static json_t *start_scenario(struct test_target *t, const char *scenario)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	cr_assert_gt(n, 0, "no supported interpreter found");
	test_target_start(t, &pys[n - 1], scenario);
	return test_target_wait_report(t, TARGET_READY_TIMEOUT_S);
}

Test(targets, spelling_follows_the_unwinders_stacks, .timeout = 120)
{
	struct test_target tt;
	json_decref(start_scenario(&tt, "threads20"));
	struct uw_error err;
	struct uw_target *uw = uw_open(tt.pid, &err);
	cr_assert_not_null(uw, "%s", err.msg);
	struct uw_sample s = {0};
	cr_assert_eq(uw_sample(uw, &s, &err), 0, "%s", err.msg);
	cr_assert_geq(s.nthreads, 21);

	struct test_sink sink = {0};
	struct spell sp;
	spell_init(&sp, &test_sink_ops, &sink);
	unsigned nodes = 0;
	for (uint32_t i = 0; i < s.nthreads; i++) {
		uint32_t stack = s.threads[i].stack;
		unsigned before = sink.stack_calls;
		int32_t at = spell_stack(&sp, uw, stack);
		cr_assert_geq(at, 0);
		nodes += sink.stack_calls - before;
		/* The sink's stack, walked up, is the unwinder's, frame for frame. */
		for (uint32_t u = stack; u; u = uw_stack_parent(uw, u), at = sink.stacks[at].parent) {
			cr_assert_geq(at, 0, "the sink's stack is shorter");
			const struct uw_frame *want = uw_frame_get(uw, uw_stack_frame(uw, u));
			const struct uw_frame *got = &sink.frames[sink.stacks[at].frame];
			cr_assert_str_eq(got->function, want->function);
			cr_assert_eq(got->line, want->line);
		}
		cr_assert_eq(at, -1, "the sink's stack is longer");
	}
	/* 21 threads share the frames of <module> and the threads' start: far fewer nodes than frames. */
	uint32_t frames_total = 0;
	for (uint32_t i = 0; i < s.nthreads; i++)
		frames_total += uw_stack_depth(uw, s.threads[i].stack);
	cr_assert_lt(nodes, frames_total, "shared prefixes were spelled again");
	/* Each id once: spelling them again asks the sink nothing. */
	unsigned calls = sink.frame_calls + sink.stack_calls;
	for (uint32_t i = 0; i < s.nthreads; i++)
		spell_stack(&sp, uw, s.threads[i].stack);
	cr_assert_eq(sink.frame_calls + sink.stack_calls, calls);
	/* A new sink (a new batch) starts over. */
	spell_forget(&sp);
	spell_stack(&sp, uw, s.threads[0].stack);
	cr_assert_gt(sink.stack_calls, nodes);
	spell_free(&sp);
	uw_sample_free(&s);
	uw_close(uw);
	test_target_kill(&tt);
}

static void run_loop_stop(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop for a while, for the target's timer. */
static void run_loop_for(struct ev_loop *loop, double seconds)
{
	ev_timer stop;
	ev_timer_init(&stop, run_loop_stop, seconds, 0);
	ev_timer_start(loop, &stop);
	ev_run(loop, 0);
	ev_timer_stop(loop, &stop);
}

struct read_back {
	uint64_t count;
	uint32_t rows;
	char leaf[256];
};

static int read_back_row(void *ctx, const struct store_row *row)
{
	struct read_back *rb = ctx;
	rb->count += row->count;
	rb->rows++;
	snprintf(rb->leaf, sizeof rb->leaf, "%s", row->frames[row->depth - 1].function);
	return 0;
}

Test(targets, a_flush_writes_what_was_counted, .timeout = 120)
{
	struct test_target tt;
	json_t *report = start_scenario(&tt, "nested");
	char dir[PATH_MAX - 64];
	scratch_dir(dir, sizeof dir);
	char *argv[] = {"serve", "--state-dir", dir, NULL};
	struct config c;
	cr_assert_eq(config_load(&c, 3, argv), EXIT_OK);
	struct history h;
	cr_assert_eq(history_open(&h, &c, -1), 0);
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct schedule sched;
	cr_assert_eq(schedule_init(&sched, loop), 0);

	struct uw_error err;
	struct target *t = target_open(loop, &sched, &h, NULL, NULL, NULL, tt.pid, &err);
	cr_assert_not_null(t, "%s", err.msg);
	struct target_params params = {.rate_hz = 200, .mode = UW_MODE_WALL};
	target_start(t, &params);
	run_loop_for(loop, 0.5);
	target_stop(t); /* stops and flushes */
	uint64_t counted = t->history_samples;
	cr_assert_gt(counted, 0);
	cr_assert_eq(t->tally.unhanded, 0, "the flush handed everything on");
	store_writer_sync(h.writer);

	struct store_error serr;
	struct store_reader *r = store_reader_open(h.path, &serr);
	cr_assert_not_null(r, "%s", serr.msg);
	struct store_query q = {.pid = tt.pid, .until_unix = 0};
	struct read_back rb = {0};
	cr_assert_eq(store_query_stacks(r, &q, read_back_row, &rb, NULL, &serr), 0, "%s", serr.msg);
	cr_assert_eq(rb.count, counted, "every sample counted is in the file, once");
	cr_assert_eq(rb.rows, 1, "one parked thread, one stack");
	const json_t *frames = json_object_get(json_array_get(json_object_get(report, "threads"), 0),
	                                       "frames");
	cr_assert_str_eq(rb.leaf, json_string_value(json_object_get(json_array_get(frames, 0), "function")));
	store_reader_close(r);

	target_free(t);
	schedule_free(&sched);
	history_close(&h);
	ev_loop_destroy(loop);
	config_free(&c);
	json_decref(report);
	test_target_kill(&tt);
}

Test(targets, trimming_drops_the_least_recently_used, .timeout = 120)
{
	struct test_target tts[3];
	struct targets ts = {0};
	struct history none = {0}; /* no history: nothing to flush into */
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct schedule sched;
	cr_assert_eq(schedule_init(&sched, loop), 0);
	for (int i = 0; i < 3; i++) {
		json_decref(start_scenario(&tts[i], "nested"));
		struct uw_error err;
		struct target *t = target_open(loop, &sched, &none, NULL, NULL, NULL, tts[i].pid, &err);
		cr_assert_not_null(t, "%s", err.msg);
		struct uw_sample s = {0};
		cr_assert_eq(uw_sample(t->uw, &s, &err), 0, "%s", err.msg);
		uw_sample_free(&s);
		t->last_used = 100 + i; /* the first is the oldest */
		cr_assert_eq(targets_add(&ts, t), 0);
	}
	size_t each = targets_warm_bytes(&ts) / 3;
	cr_assert_gt(each, 0, "detached targets keep their caches warm");
	/* Room for two: the oldest goes. */
	targets_trim(&ts, targets_warm_bytes(&ts) - 1, 10);
	cr_assert_eq(ts.n, 2);
	cr_assert_null(targets_find(&ts, tts[0].pid));
	cr_assert_not_null(targets_find(&ts, tts[2].pid));
	/* An exited target past the cap goes, before any live one. */
	target_mark_exited(targets_find(&ts, tts[2].pid), "a test");
	targets_trim(&ts, SIZE_MAX, 1);
	cr_assert_eq(ts.n, 1);
	cr_assert_not_null(targets_find(&ts, tts[1].pid));
	targets_free(&ts);
	schedule_free(&sched);
	ev_loop_destroy(loop);
	for (int i = 0; i < 3; i++)
		test_target_kill(&tts[i]);
}

/* Who besides root may act on a process, by the kernel's rule for tracing without privileges. */
Test(targets, owner_by_the_kernels_rule)
{
	const struct {
		const char *what;
		uid_t uid[3];
		gid_t gid[3];
		bool dumpable;
		uint64_t caps;
		uid_t owner;
		gid_t group;
	} cases[] = {
		{"a user's plain process", {1000, 1000, 1000}, {100, 100, 100}, true, 0, 1000, 100},
		{"setuid root", {1000, 0, 0}, {100, 100, 100}, false, 0x3fffffffffull, 0, 0},
		{"setuid another user", {1000, 1001, 1001}, {100, 100, 100}, false, 0, 0, 0},
		{"setgid", {1000, 1000, 1000}, {100, 50, 50}, false, 0, 0, 0},
		{"gids of two groups, dumpable", {1000, 1000, 1000}, {100, 50, 100}, true, 0, 0, 0},
		{"uids of two users, dumpable", {1000, 1000, 1001}, {100, 100, 100}, true, 0, 0, 0},
		{"file capabilities", {1000, 1000, 1000}, {100, 100, 100}, false, 1u << 10, 0, 0},
		{"capabilities, dumpable", {1000, 1000, 1000}, {100, 100, 100}, true, 1u << 10, 0, 0},
		{"undumpable", {1000, 1000, 1000}, {100, 100, 100}, false, 0, 0, 0},
		{"root's", {0, 0, 0}, {0, 0, 0}, true, 0x3fffffffffull, 0, 0},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct uw_process_identity id = {.dumpable = cases[i].dumpable, .cap_permitted = cases[i].caps};
		for (int k = 0; k < 3; k++) {
			id.uid[k] = cases[i].uid[k];
			id.gid[k] = cases[i].gid[k];
		}
		id.uid[3] = id.uid[1];
		id.gid[3] = id.gid[1];
		uid_t uid = 12345;
		gid_t gid = 12345;
		target_owner(&id, &uid, &gid);
		cr_expect(uid == cases[i].owner && gid == cases[i].group, "%s: %d:%d, not %d:%d",
		          cases[i].what, (int)uid, (int)gid, (int)cases[i].owner, (int)cases[i].group);
	}
}
