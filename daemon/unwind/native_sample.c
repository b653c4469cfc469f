/*
 * A sample's C frames, put in place: which threads to copy and which keep
 * the C frames they had, which C frames run the eval loop, and the stack
 * that interleaves the two (native.h).  The copy and the walk are
 * native.c's and kernel/knative.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "kernel/kernel.h"
#include "native.h"
#include "unwind_internal.h"

/* Bytes of a thread state its members lie in (it is a few hundred). */
#define NATIVE_TSTATE_SPAN 4096u

/* Where each segment of Python frames begins: one eval loop's frames, split at C's entries. */
static uint32_t native_segments(const struct uw_target *t, const uint32_t *py, uint32_t from, uint32_t npy,
                                uint32_t *starts)
{
	/* Before 3.11 every Python call is a C call of the eval loop; from 3.11 markers stand where C entered. */
	bool each_frame = t->version_hex < 0x030b0000;
	uint32_t s = 0;
	bool open = false;
	for (uint32_t i = from; i < npy; i++) {
		if (uw_frame_get(t, py[i])->kind == UW_FRAME_NATIVE) {
			open = false;
			continue;
		}
		if (!open || each_frame)
			starts[s++] = i;
		open = true;
	}
	return s;
}

uint32_t native_splice(const struct uw_target *t, const uint32_t *py, uint32_t npy, const struct native_frame *c,
                       uint32_t nc, enum native_end end, uint32_t *starts, uint32_t *out)
{
	uint32_t n = 0, from = 0;
	/* The collector's marker stays on top. */
	if (npy && uw_frame_get(t, py[0])->kind == UW_FRAME_GC)
		out[n++] = py[from++];
	uint32_t segments = native_segments(t, py, from, npy, starts), evals = 0;
	for (uint32_t i = 0; i < nc; i++)
		evals += c[i].eval;
	/*
	 * The innermost eval loop runs the innermost segment, and so on out: a
	 * whole walk must have one loop a segment, a cut one at most that
	 * many.  Otherwise an eval loop went unrecognised (a symbol stripped)
	 * and no C frame can be placed: the Python frames are shown as read.
	 */
	if (evals > segments || (evals < segments && end == NATIVE_WHOLE)) {
		memcpy(out + n, py + from, (npy - from) * sizeof *py);
		return n + npy - from;
	}
	uint32_t next = 0;
	for (uint32_t i = 0; i < nc; i++) {
		if (!c[i].eval) {
			out[n++] = c[i].frame;
			continue;
		}
		uint32_t stop = next + 1 < segments ? starts[next + 1] : npy;
		for (uint32_t k = starts[next]; k < stop; k++)
			if (uw_frame_get(t, py[k])->kind != UW_FRAME_NATIVE)
				out[n++] = py[k];
		next++;
	}
	if (end != NATIVE_WHOLE) {
		out[n++] = t->native_frame;
		if (next < segments) {
			memcpy(out + n, py + starts[next], (npy - starts[next]) * sizeof *py);
			n += npy - starts[next];
		}
	}
	return n;
}

/*
 * From 3.12 the eval loop pushes a shim frame (entry_frame, one of its own
 * locals) below the Python frames it runs: the shim lies in the loop's C
 * frame, between its stack pointer and its caller's.  Each segment of the
 * thread's chain (its Python frames between two of C's entries) has its
 * outermost frame link to its shim; the shim, in the copy, must be one
 * (its owner C's or the interpreter's) and link to the next segment's
 * innermost frame (none for the last).  That is read of the copy, the
 * moment the chain is proven of: the one live read, of the outermost
 * frame's link, is held to it.  Symbols would not do: the eval loop of a
 * stripped build is a clone without a name.
 */
bool native_find_evals(struct uw_target *t, const struct thread_cache *tc, const struct knative_thread *copy,
                       struct native_frame *c, uint32_t nc, enum native_end end)
{
	const struct py_layout *L = &t->layout;
	raddr_t inner[NATIVE_MAX_FRAMES], outer[NATIVE_MAX_FRAMES];
	uint32_t segments = 0;
	bool open = false;
	for (uint32_t i = 0; i < nc; i++)
		c[i].eval = false;
	/* The chain is outermost first: its segments are taken innermost first. */
	for (uint32_t d = tc->n; d-- > 0;) {
		const struct chain_link *link = &tc->chain[d];
		if (link->kind == UW_FRAME_NATIVE) {
			open = false;
			continue;
		}
		if (link->kind != UW_FRAME_PYTHON || !link->addr)
			return false;
		if (!open) {
			if (segments == NATIVE_MAX_FRAMES)
				return false;
			inner[segments++] = link->addr;
			open = true;
		}
		outer[segments - 1] = link->addr;
	}
	uint64_t sp = copy->regs[KNATIVE_SP], copy_end = copy->base + copy->len;
	uint32_t k = 0;
	for (uint32_t j = 0; j < segments; j++) {
		uint64_t shim;
		if (remote_read(&t->mem, outer[j] + L->frame.back, &shim, sizeof shim, NULL) != 0 || shim < sp ||
		    shim % 8)
			return false;
		/* Past the copy: a cut walk has placed the loops it holds, the rest stay under its mark. */
		if (shim + L->frame.size > copy_end)
			return end != NATIVE_WHOLE;
		const uint8_t *in_copy = copy->stack + (shim - copy->base);
		uint64_t links_to;
		memcpy(&links_to, in_copy + L->frame.back, sizeof links_to);
		/*
		 * The last links to no frame, or from 3.14 to the thread state's
		 * own base frame, a member of the state (within its first pages).
		 */
		bool last_ok = links_to == 0 || (links_to > tc->tstate && links_to - tc->tstate < NATIVE_TSTATE_SPAN);
		if (!frames_is_shim(L, in_copy[L->frame.owner]) ||
		    (j + 1 < segments ? links_to != inner[j + 1] : !last_ok))
			return false;
		/*
		 * The C frame whose locals hold it: after the last one found,
		 * innermost first as the segments.  The last frame of a cut walk
		 * has no known end: what lies past its stack pointer may be its
		 * callers'.
		 */
		while (k < nc && !(shim >= c[k].sp && (k + 1 < nc ? shim < c[k + 1].sp : end == NATIVE_WHOLE)))
			k++;
		if (k == nc)
			return end != NATIVE_WHOLE;
		c[k++].eval = true;
	}
	return true;
}

/* Whether this sample takes C frames: asked for, a copier given, and ids the kernel knows the threads by. */
static struct knative *native_wanted(const struct uw_target *t)
{
	if (!(t->opts.flags & UW_SNAP_NATIVE) || t->pid_namespace_nested)
		return NULL;
	return native_copier(t->opts.native);
}

static struct kshot *native_shooter(const struct uw_target *t)
{
	return t->opts.native ? t->opts.native->shots : NULL;
}

void native_forget(struct uw_target *t, struct thread_cache *tc)
{
	if (tc->native.shot_slot >= 0)
		kshot_unwatch(native_shooter(t), tc->native.shot_slot, tc->native.shot_generation);
	tc->native.shot_slot = -1;
	tc->native.shot_generation = tc->native.shot_taken = 0;
}

/*
 * A thread on its CPU at the look (3.11+): watched, unless it is, and
 * shot as it runs from now on.  The shots record where the thread's
 * innermost frames are as the walk reads them (see kshot.c).
 */
static void native_watch_running(struct uw_target *t, struct thread_cache *tc)
{
	struct kshot *ks = native_shooter(t);
	const struct py_layout *L = &t->layout;
	if (!ks || L->frame_model != FRAME_MODEL_INTERP ||
	    kshot_watching(ks, tc->native.shot_slot, tc->native.shot_generation))
		return;
	bool cframe = L->tstate.cframe != LAYOUT_ABSENT;
	struct kshot_aim aim = {
		.tstate = tc->tstate,
		.frame = (uint16_t)(cframe ? L->tstate.cframe : L->tstate.frame),
		.cframe_current = (uint16_t)(cframe ? L->tstate.cframe_current_frame : KSHOT_ABSENT),
		.back = (uint16_t)L->frame.back,
		.instr = (uint16_t)L->frame.instr_ptr,
		.owner = (uint16_t)L->frame.owner,
		.top = tc->native.top,
	};
	tc->native.shot_slot = kshot_watch(ks, (pid_t)tc->own_tid, aim, &tc->native.shot_generation);
	tc->native.shot_taken = 0;
}

void native_sample_begin(struct uw_target *t)
{
	struct knative *kn = native_wanted(t);
	if (!kn)
		return;
	struct knative_ask asks[KNATIVE_THREADS];
	struct thread_cache *of[KNATIVE_THREADS];
	uint32_t n = 0;
	/*
	 * The threads the last walk met (its sweep let the rest go), however
	 * many samples the process stood still since: a thread new to this one
	 * is copied from the next on.
	 */
	for (uint32_t i = 0; i <= t->nthreads; i++) {
		struct thread_cache *tc = i < t->nthreads ? &t->threads[i] : NULL;
		if (tc) {
			tc->native.looked = false;
			if (tc->own_tid > 0)
				of[n] = tc, asks[n++] = (struct knative_ask){.pid = t->pid, .tid = (pid_t)tc->own_tid};
		}
		if (n == KNATIVE_THREADS || (!tc && n)) {
			const struct knative_thread *seen = knative_run(kn, KNATIVE_LOOK, asks, n);
			for (uint32_t k = 0; seen && k < n; k++) {
				of[k]->native.looked = seen[k].look_status == KNATIVE_STILL;
				of[k]->native.look_switches = seen[k].look_switches;
				if (seen[k].look_status == KNATIVE_RUNS)
					native_watch_running(t, of[k]);
			}
			n = 0;
		}
	}
}

/*
 * The cache of the thread read this sample with kernel id tid, NULL when
 * none.  The caches stand in the order the walk meets the thread states, as
 * the sample's threads do: looked for from the sample's own index (hint),
 * a sample of thousands of threads does not search them all for each.
 */
static struct thread_cache *native_cache_of(struct uw_target *t, int64_t tid, uint32_t hint)
{
	for (uint32_t k = 0; k < t->nthreads; k++) {
		struct thread_cache *tc = &t->threads[(hint + k) % t->nthreads];
		if (tc->seen == t->sample_gen && tc->own_tid == tid)
			return tc;
	}
	return NULL;
}

/* The stack of a thread whose copy holds: its Python stack with its C frames in place. */
static int native_stack(struct uw_target *t, struct thread_cache *tc, const struct knative_thread *copy,
                        uint32_t py_stack, uint32_t *stack, struct uw_error *err)
{
	uint32_t depth = uw_stack_depth(t, py_stack);
	struct native_frame *c;
	/* The Python frame ids, the spliced ones and the segments' starts. */
	uint32_t *py = native_room(t, 3 * (size_t)depth + NATIVE_MAX_FRAMES + 2, &c, err);
	if (!py)
		return -1;
	uint32_t *out = py + depth, *starts = out + depth + NATIVE_MAX_FRAMES + 1;
	uint32_t npy = 0, nc;
	for (uint32_t s = py_stack; s && npy < depth; s = uw_stack_parent(t, s))
		py[npy++] = uw_stack_frame(t, s);
	enum native_end end;
	struct uw_error walk_err;
	uint64_t top;
	/* A process whose modules cannot be listed keeps its marks, counted; only memory fails the sample. */
	if (native_walk(t, copy, c, &nc, &end, &top, &walk_err) != 0) {
		*stack = py_stack;
		if (walk_err.status != UW_ENOMEM) {
			t->stats.native_unwalked++;
			return 0;
		}
		*err = walk_err;
		return -1;
	}
	/*
	 * A thread's stack ends where it began, whatever it runs: its next
	 * copies stop there (a few pages, not KNATIVE_STACK), and one cut short
	 * of it (another thread under the state) copies all it may again.
	 */
	if (top != tc->native.top) {
		tc->native.top = top;
		kshot_aim_top(native_shooter(t), tc->native.shot_slot, tc->native.shot_generation, top);
	}
	if (t->version_hex >= 0x030c0000 && !native_find_evals(t, tc, copy, c, nc, end))
		nc = 0;
	uint32_t n = native_splice(t, py, npy, c, nc, end, starts, out);
	uint32_t id = 0;
	for (uint32_t i = n; i-- > 0;)
		if ((id = intern_stack(&t->intern, id, out[i])) == INTERN_FAILED)
			return uw_fail(err, UW_ENOMEM, "out of memory interning frames");
	*stack = id;
	return 0;
}

/*
 * Whether a shot is of the moment the walk read: the Python frames it
 * found, innermost first (shims aside), are the chain's, at the same
 * addresses and instructions.  The C frames under a frame at the same
 * instruction are the ones of that call.
 */
static bool native_shot_matches(const struct uw_target *t, const struct thread_cache *tc,
                                const struct kshot_slot *shot)
{
	const struct py_layout *L = &t->layout;
	uint32_t d = tc->n, matched = 0;
	for (uint32_t i = 0; i < shot->nanchors && i < KSHOT_ANCHORS; i++) {
		const struct kshot_anchor *a = &shot->anchors[i];
		if (frames_is_shim(L, a->owner))
			continue;
		while (d > 0 && tc->chain[d - 1].kind != UW_FRAME_PYTHON)
			d--;
		if (d == 0 || tc->chain[d - 1].addr != a->addr || tc->chain[d - 1].pos != a->instr)
			return false;
		d--;
		matched++;
	}
	return matched > 0;
}

/*
 * A thread that ran at the look or during its copy: its stack with the C
 * frames of its newest shot, when one came since the last taken and its
 * Python frames are the walk's.  -1 and *err only when out of memory.
 */
static int native_shot_stack(struct uw_target *t, struct thread_cache *tc, struct uw_sample_thread *st,
                             struct uw_error *err)
{
	const struct kshot_slot *shot =
		kshot_take(native_shooter(t), tc->native.shot_slot, tc->native.shot_generation, tc->native.shot_taken);
	if (!shot) {
		t->stats.native_shot_late++;
		return 0;
	}
	tc->native.shot_taken = shot->taken_ns;
	if (!native_shot_matches(t, tc, shot)) {
		t->stats.native_shot_missed++;
		return 0;
	}
	uint32_t stack = st->stack;
	if (native_stack(t, tc, &shot->copy, st->stack, &stack, err) != 0)
		return -1;
	t->stats.native_shot++;
	st->stack = stack;
	return 0;
}

int native_sample_end(struct uw_target *t, struct uw_sample *s, struct uw_error *err)
{
	struct knative *kn = native_wanted(t);
	if (!kn)
		return 0;
	struct knative_ask asks[KNATIVE_THREADS];
	uint32_t at[KNATIVE_THREADS];
	struct thread_cache *of[KNATIVE_THREADS];
	uint32_t n = 0;
	for (uint32_t i = 0; i <= s->nthreads; i++) {
		struct uw_sample_thread *st = i < s->nthreads ? &s->threads[i] : NULL;
		struct thread_cache *tc = st && !st->task && !st->moving && st->native_id > 0
		                                  ? native_cache_of(t, st->native_id, i)
		                                  : NULL;
		if (tc && !tc->native.looked && tc->native.shot_slot >= 0 && native_shot_stack(t, tc, st, err) != 0)
			return -1;
		if (tc && tc->native.looked) {
			/* Not run since its last copy, with the same Python stack: the same C frames. */
			if (tc->native.epoch == t->epoch && tc->native.py_stack == st->stack &&
			    tc->native.copy_switches == tc->native.look_switches) {
				st->stack = tc->native.stack;
				t->stats.native_kept++;
			} else {
				at[n] = i;
				of[n] = tc;
				asks[n++] = (struct knative_ask){.pid = t->pid, .tid = (pid_t)st->native_id, .top = tc->native.top};
			}
		}
		if (n < KNATIVE_THREADS && (st || !n))
			continue;
		const struct knative_thread *copies = knative_run(kn, KNATIVE_COPY, asks, n);
		for (uint32_t k = 0; copies && k < n; k++) {
			struct uw_sample_thread *cs = &s->threads[at[k]];
			struct thread_cache *ctc = of[k];
			/* Off its CPU from the look to the copy: the walk read it as the copy holds it. */
			if (copies[k].status != KNATIVE_COPIED || copies[k].switches != ctc->native.look_switches) {
				t->stats.native_ran++;
				if (ctc->native.shot_slot >= 0 && native_shot_stack(t, ctc, cs, err) != 0)
					return -1;
				continue;
			}
			uint32_t stack = cs->stack;
			if (native_stack(t, ctc, &copies[k], cs->stack, &stack, err) != 0)
				return -1;
			t->stats.native_copied++;
			ctc->native.py_stack = cs->stack;
			ctc->native.copy_switches = copies[k].switches;
			ctc->native.epoch = t->epoch;
			ctc->native.stack = cs->stack = stack;
		}
		n = 0;
	}
	return 0;
}
