/*
 * One snapshot: runtime → interpreters → thread states → frames.
 *
 * Written once against struct py_layout; the two frame models (heap frame
 * objects up to 3.10, interpreter frames from 3.11) differ only in how a
 * frame names its code and instruction.  Every list walked here comes from
 * remote memory and is bounded by the UW_MAX_* limits.
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* All frames of one snapshot together; keeps a garbage snapshot's memory bounded. */
#define WALK_MAX_TOTAL_FRAMES (1u << 18)
/* Shim frames do not count as frames, but they are bounded too. */
#define WALK_MAX_LINKS (2u * UW_MAX_FRAMES)
/* Bytes of struct pthread searched for the kernel thread id (3.8-3.10). */
#define PTHREAD_SCAN_BYTES 1024
/* Where glibc on x86-64 keeps `tid` in struct pthread: tried first. */
#define PTHREAD_TID_GLIBC_X86_64 720

struct walk {
	struct uw_target *t;
	unsigned flags;
	struct uw_snapshot *out;
	uint32_t threads_cap;
	uint32_t total_frames;
	pid_t tasks[UW_MAX_THREADS];
	int ntasks; /* -1 until listed */
};

static int frames_push(struct walk *w, struct uw_thread *th, uint32_t *cap,
                       const struct uw_frame *f, struct uw_error *err)
{
	if (w->total_frames >= WALK_MAX_TOTAL_FRAMES)
		return uw_fail(err, UW_ECORRUPT, "more than %u frames in one snapshot",
		               WALK_MAX_TOTAL_FRAMES);
	if (th->nframes == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 64;
		struct uw_frame *n = realloc(th->frames, ncap * sizeof *n);
		if (!n)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		th->frames = n;
		*cap = ncap;
	}
	th->frames[th->nframes++] = *f;
	w->total_frames++;
	return 0;
}

static const struct uw_frame native_marker = {
	.function = "<native>", .qualname = "<native>", .line = -1, .kind = UW_FRAME_NATIVE};
static const struct uw_frame gc_marker = {
	.function = "<GC>", .qualname = "<GC>", .line = -1, .kind = UW_FRAME_GC};

static struct uw_frame frame_of_code(const struct code_info *ci, int line)
{
	return (struct uw_frame){.function = ci->name,
	                         .qualname = ci->qualname,
	                         .file = ci->file,
	                         .line = line,
	                         .kind = UW_FRAME_PYTHON};
}

/* The line of a byte offset into the bytecode; before the first instruction is the def line. */
static int code_line_at(const struct code_info *ci, int64_t offset)
{
	if (offset < 0)
		return ci->firstlineno;
	if (offset > UINT32_MAX)
		return -1;
	return line_table_lookup(&ci->lines, (uint32_t)offset);
}

/* 3.8-3.10: PyFrameObjects linked by f_back. */
static int walk_frame_objects(struct walk *w, struct uw_thread *th, raddr_t addr,
                              struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	uint8_t f[512];
	uint32_t cap = 0;

	if (L->frame.size > sizeof f)
		return uw_fail(err, UW_ECORRUPT, "frame layout too large");
	while (addr) {
		if (th->nframes >= UW_MAX_FRAMES) {
			th->truncated = true;
			break;
		}
		if (remote_read(&t->mem, addr, f, L->frame.size, err) != 0)
			return -1;
		if (t->frame_type && load_u64(f, L->object.ob_type) != t->frame_type)
			return uw_fail(err, UW_ECORRUPT, "object at 0x%llx is not a frame",
			               (unsigned long long)addr);
		const struct code_info *ci = code_get(t, load_u64(f, L->frame.code), err);
		if (!ci)
			return -1;
		int lasti = load_i32(f, L->frame.lasti);
		int line;
		if (L->lasti_model == LASTI_BYTES) {
			/* Only a traced frame keeps f_lineno current. */
			line = load_u64(f, L->frame.trace) ? load_i32(f, L->frame.lineno)
			                                   : code_line_at(ci, lasti);
		} else {
			int lineno = load_i32(f, L->frame.lineno);
			line = lineno ? lineno : code_line_at(ci, (int64_t)lasti * 2);
		}
		struct uw_frame fr = frame_of_code(ci, line);
		if (frames_push(w, th, &cap, &fr, err) != 0)
			return -1;
		raddr_t back = load_u64(f, L->frame.back);
		if (back == addr)
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx is its own caller",
			               (unsigned long long)addr);
		addr = back;
	}
	return 0;
}

/* 3.11+: _PyInterpreterFrames linked by previous, with shim frames where C entered. */
static int walk_interp_frames(struct walk *w, struct uw_thread *th, raddr_t addr,
                              struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	uint8_t f[512];
	uint32_t cap = 0, links = 0;
	bool native_pending = false;
	bool want_native = w->flags & UW_SNAP_NATIVE;

	if (L->frame.size > sizeof f)
		return uw_fail(err, UW_ECORRUPT, "frame layout too large");
	while (addr) {
		if (th->nframes >= UW_MAX_FRAMES || ++links > WALK_MAX_LINKS) {
			th->truncated = true;
			break;
		}
		if (remote_read(&t->mem, addr, f, L->frame.size, err) != 0)
			return -1;
		raddr_t previous = load_u64(f, L->frame.back);
		if (previous == addr)
			return uw_fail(err, UW_ECORRUPT, "frame 0x%llx is its own caller",
			               (unsigned long long)addr);
		uint8_t owner = f[L->frame.owner];
		if ((L->frame.owner_cstack != LAYOUT_OWNER_NONE && owner == L->frame.owner_cstack) ||
		    (L->frame.owner_interpreter != LAYOUT_OWNER_NONE &&
		     owner == L->frame.owner_interpreter)) {
			/* The eval loop was entered from C here: C code sits below. */
			native_pending = want_native && th->nframes > 0;
			addr = previous;
			continue;
		}
		raddr_t code = load_u64(f, L->frame.code) & ~L->frame.code_tag_mask;
		const struct code_info *ci = code_get(t, code, err);
		if (!ci)
			return -1;
		if (native_pending) {
			if (frames_push(w, th, &cap, &native_marker, err) != 0)
				return -1;
			native_pending = false;
		}
		int64_t offset = (int64_t)(load_u64(f, L->frame.instr_ptr) - ci->bytecode);
		struct uw_frame fr = frame_of_code(ci, code_line_at(ci, offset));
		if (frames_push(w, th, &cap, &fr, err) != 0)
			return -1;
		if (L->frame.is_entry != LAYOUT_ABSENT && f[L->frame.is_entry])
			native_pending = want_native; /* 3.11 marks the entered frame itself */
		addr = previous;
	}
	return 0;
}

static bool tid_is_task(int32_t tid, const pid_t *tasks, int ntasks)
{
	for (int i = 0; i < ntasks; i++)
		if (tid > 0 && tid == tasks[i])
			return true;
	return false;
}

/* Learnt once per target: the first place in the descriptor holding one of the process's tids. */
static int pthread_tid_offset_find(const uint8_t *buf, size_t len, const pid_t *tasks, int ntasks)
{
	if (PTHREAD_TID_GLIBC_X86_64 + 4 <= len &&
	    tid_is_task(load_i32(buf, PTHREAD_TID_GLIBC_X86_64), tasks, ntasks))
		return PTHREAD_TID_GLIBC_X86_64;
	for (size_t off = 0; off + 4 <= len; off += 4)
		if (tid_is_task(load_i32(buf, (uint32_t)off), tasks, ntasks))
			return (int)off;
	return -1;
}

/* glibc and musl: pthread_t is the address of the thread's descriptor, which holds the tid. */
static int64_t walk_pthread_tid(struct walk *w, uint64_t pthread)
{
	struct uw_target *t = w->t;
	uint8_t buf[PTHREAD_SCAN_BYTES];

	if (w->ntasks < 0)
		w->ntasks = proc_tasks(t->pid, w->tasks, UW_MAX_THREADS);
	if (w->ntasks <= 0 || remote_read(&t->mem, pthread, buf, sizeof buf, NULL) != 0)
		return -1;

	int off = t->pthread_tid_offset;
	if (off < 0) {
		off = pthread_tid_offset_find(buf, sizeof buf, w->tasks, w->ntasks);
		if (off < 0)
			return -1;
		t->pthread_tid_offset = off;
	}
	int32_t tid = load_i32(buf, (uint32_t)off);
	return tid_is_task(tid, w->tasks, w->ntasks) ? tid : -1;
}

static int walk_add_thread(struct walk *w, struct uw_thread **out, struct uw_error *err)
{
	struct uw_snapshot *s = w->out;
	if (s->nthreads >= UW_MAX_THREADS)
		return uw_fail(err, UW_ECORRUPT, "more than %u threads", UW_MAX_THREADS);
	if (s->nthreads == w->threads_cap) {
		uint32_t ncap = w->threads_cap ? w->threads_cap * 2 : 16;
		struct uw_thread *n = realloc(s->threads, ncap * sizeof *n);
		if (!n)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		s->threads = n;
		w->threads_cap = ncap;
	}
	*out = &s->threads[s->nthreads++];
	memset(*out, 0, sizeof **out);
	return 0;
}

/* Put a marker frame on top (innermost) of a thread. */
static int thread_push_top(struct walk *w, struct uw_thread *th, const struct uw_frame *f,
                           struct uw_error *err)
{
	uint32_t cap = th->nframes; /* force growth: frames was sized exactly or larger */
	if (frames_push(w, th, &cap, f, err) != 0)
		return -1;
	memmove(th->frames + 1, th->frames, (th->nframes - 1) * sizeof *th->frames);
	th->frames[0] = *f;
	return 0;
}

static int walk_thread(struct walk *w, raddr_t tstate, raddr_t interp, int64_t interp_id,
                       raddr_t gil_holder, bool gc_running, raddr_t *next,
                       struct uw_error *err)
{
	struct uw_target *t = w->t;
	const struct py_layout *L = &t->layout;
	uint8_t ts[1024];

	if (L->tstate.size > sizeof ts)
		return uw_fail(err, UW_ECORRUPT, "thread state layout too large");
	if (remote_read(&t->mem, tstate, ts, L->tstate.size, err) != 0)
		return -1;
	if (load_u64(ts, L->tstate.interp) != interp)
		return uw_fail(err, UW_ECORRUPT, "thread state 0x%llx is not of its interpreter",
		               (unsigned long long)tstate);
	*next = load_u64(ts, L->tstate.next);
	if (*next == tstate)
		return uw_fail(err, UW_ECORRUPT, "thread state 0x%llx links to itself",
		               (unsigned long long)tstate);

	struct uw_thread *th = NULL;
	if (walk_add_thread(w, &th, err) != 0)
		return -1;
	th->thread_id = load_u64(ts, L->tstate.thread_id);
	th->interp_id = interp_id;
	th->holds_gil = gil_holder && gil_holder == tstate;
	if (L->tstate.native_thread_id != LAYOUT_ABSENT)
		th->native_id = (int64_t)load_u64(ts, L->tstate.native_thread_id);
	else
		th->native_id = walk_pthread_tid(w, th->thread_id);
	if (th->native_id <= 0 || th->native_id > INT32_MAX)
		th->native_id = -1;
	th->on_cpu = th->native_id > 0 && proc_thread_state(t->pid, (pid_t)th->native_id) == 'R';

	raddr_t frame;
	if (L->tstate.cframe != LAYOUT_ABSENT) {
		raddr_t cframe = load_u64(ts, L->tstate.cframe);
		uint8_t cf[8];
		frame = 0;
		if (cframe) {
			if (remote_read(&t->mem, cframe + L->tstate.cframe_current_frame, cf, 8, err) != 0)
				return -1;
			frame = load_u64(cf, 0);
		}
	} else {
		frame = load_u64(ts, L->tstate.frame);
	}
	int rc = L->frame_model == FRAME_MODEL_OBJECT ? walk_frame_objects(w, th, frame, err)
	                                              : walk_interp_frames(w, th, frame, err);
	if (rc != 0)
		return -1;
	if ((w->flags & UW_SNAP_GC) && gc_running && th->holds_gil)
		return thread_push_top(w, th, &gc_marker, err);
	return 0;
}

/* The GIL holder, from the lock struct at addr inside a local copy or remote. */
static raddr_t gil_holder_at(struct uw_target *t, raddr_t gil, struct uw_error *err, bool *ok)
{
	const struct py_layout *L = &t->layout;
	uint32_t len = (L->gil.last_holder > L->gil.locked ? L->gil.last_holder : L->gil.locked) + 8;
	uint8_t buf[64];
	*ok = true;
	if (!gil || len > sizeof buf)
		return 0;
	if (remote_read(&t->mem, gil, buf, len, err) != 0) {
		*ok = false;
		return 0;
	}
	return load_i32(buf, L->gil.locked) ? load_u64(buf, L->gil.last_holder) : 0;
}

int walk_snapshot(struct uw_target *t, unsigned flags, struct uw_snapshot *out,
                  struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	struct walk *w = calloc(1, sizeof *w);
	if (!w)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	w->t = t;
	w->flags = flags;
	w->out = out;
	w->ntasks = -1;

	int rc = -1;
	uint8_t *rt = malloc(L->runtime.size);
	uint8_t *is = malloc(L->interp.size);
	if (!rt || !is) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		goto done;
	}
	if (remote_read(&t->mem, t->runtime, rt, L->runtime.size, err) != 0)
		goto done;

	raddr_t runtime_gil_holder = 0;
	if (L->runtime.gil != LAYOUT_ABSENT && load_i32(rt, L->runtime.gil + L->gil.locked))
		runtime_gil_holder = load_u64(rt, L->runtime.gil + L->gil.last_holder);
	bool runtime_gc = L->runtime.gc_collecting != LAYOUT_ABSENT &&
	                  load_i32(rt, L->runtime.gc_collecting) != 0;

	raddr_t interp = load_u64(rt, L->runtime.interpreters_head);
	for (unsigned ni = 0; interp; ni++) {
		if (ni >= UW_MAX_INTERPRETERS) {
			uw_fail(err, UW_ECORRUPT, "more than %u interpreters", UW_MAX_INTERPRETERS);
			goto done;
		}
		if (remote_read(&t->mem, interp, is, L->interp.size, err) != 0)
			goto done;
		int64_t interp_id = (int64_t)load_u64(is, L->interp.id);
		bool gc = runtime_gc || (L->interp.gc_collecting != LAYOUT_ABSENT &&
		                         load_i32(is, L->interp.gc_collecting) != 0);
		out->gc_running |= gc;
		raddr_t holder = runtime_gil_holder;
		if (L->interp.gil_ptr != LAYOUT_ABSENT) {
			bool ok;
			holder = gil_holder_at(t, load_u64(is, L->interp.gil_ptr), err, &ok);
			if (!ok)
				goto done;
		}

		uint32_t first = out->nthreads;
		raddr_t tstate = load_u64(is, L->interp.threads_head);
		while (tstate) {
			raddr_t next;
			if (walk_thread(w, tstate, interp, interp_id, holder, gc, &next, err) != 0)
				goto done;
			tstate = next;
		}
		/* Thread states are pushed at the head: list them oldest (main) first. */
		for (uint32_t a = first, b = out->nthreads; a + 1 < b; a++, b--) {
			struct uw_thread tmp = out->threads[a];
			out->threads[a] = out->threads[b - 1];
			out->threads[b - 1] = tmp;
		}
		raddr_t next = load_u64(is, L->interp.next);
		if (next == interp) {
			uw_fail(err, UW_ECORRUPT, "interpreter 0x%llx links to itself",
			        (unsigned long long)interp);
			goto done;
		}
		interp = next;
	}
	rc = 0;
done:
	free(rt);
	free(is);
	free(w);
	return rc;
}
