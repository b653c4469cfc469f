/*
 * The top request: a target's recent seconds, or those of every target with
 * some labels (a pool), counted per function and per thread.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"
#include "rpc_handlers.h"

#define TOP_ROWS_MAX 1000

/* One thread's part of top's window. */
struct rpc_top_thread {
	const struct target *target; /* thread ids are per process */
	uint64_t thread_id;
	uint64_t samples, gil, gc, idle;
	struct functions fs; /* its own functions, for its hottest */
};

/* Targets' recent stacks, counted per function, and per thread. */
struct rpc_top {
	const struct target *target; /* the one being counted */
	const struct uw_target *uw;  /* its unwinder: stack and frame ids are its own */
	const Pyprofd__TopRequest *r;
	bool no_idle; /* leave out waiting threads' samples (rpc_idle_left_out) */
	struct functions fs;
	uint64_t gil, gc, idle;
	struct rpc_top_thread *threads;
	size_t nthreads, threads_cap;
	struct arena *arena;
	bool failed;
};

/* The thread's entry in acc, made on first sight; NULL if out of memory. */
static struct rpc_top_thread *rpc_top_thread(struct rpc_top *acc, uint64_t thread_id)
{
	for (size_t i = 0; i < acc->nthreads; i++)
		if (acc->threads[i].thread_id == thread_id && acc->threads[i].target == acc->target)
			return &acc->threads[i];
	if (array_reserve((void **)&acc->threads, &acc->threads_cap, acc->nthreads,
	                  sizeof *acc->threads, NULL) != 0)
		return NULL;
	struct rpc_top_thread *th = &acc->threads[acc->nthreads++];
	*th = (struct rpc_top_thread){.target = acc->target, .thread_id = thread_id};
	functions_init(&th->fs, acc->arena);
	return th;
}

/* Count one stack into fs; -1 if out of memory. */
static int rpc_top_stack(const struct uw_target *uw, struct functions *fs, uint32_t stack,
                         uint64_t count)
{
	functions_next_stack(fs, 0, count);
	bool innermost = true;
	for (uint32_t depth = 0; stack && depth < UW_MAX_FRAMES; depth++, stack = uw_stack_parent(uw, stack)) {
		uint32_t frame = uw_stack_frame(uw, stack);
		const struct uw_frame *f = uw_frame_get(uw, frame);
		if (!f || !uw_frame_name(f))
			continue;
		if (functions_count(fs, 0, frame, uw_frame_name(f), f->file, f->first_line, innermost,
		                    count) < 0)
			return -1;
		innermost = false;
	}
	return 0;
}

static void rpc_top_count(void *ctx, const struct tally_entry *e)
{
	struct rpc_top *acc = ctx;
	if (acc->failed || (acc->r->by_thread && e->thread_id != acc->r->thread_id))
		return;
	uint64_t count = acc->no_idle ? e->count - e->idle : e->count;
	if (!count)
		return;
	struct rpc_top_thread *th = rpc_top_thread(acc, e->thread_id);
	if (!th || rpc_top_stack(acc->uw, &acc->fs, e->stack, count) < 0 ||
	    rpc_top_stack(acc->uw, &th->fs, e->stack, count) < 0) {
		acc->failed = true;
		return;
	}
	uint64_t idle = acc->no_idle ? 0 : e->idle;
	th->samples += count;
	th->gil += e->gil;
	th->gc += e->gc;
	th->idle += idle;
	acc->gil += e->gil;
	acc->gc += e->gc;
	acc->idle += idle;
}

static int rpc_top_thread_cmp(const void *x, const void *y)
{
	const struct rpc_top_thread *a = x, *b = y;
	if (a->samples != b->samples)
		return a->samples > b->samples ? -1 : 1;
	return (a->thread_id > b->thread_id) - (a->thread_id < b->thread_id);
}

/* The per-thread view: every thread of the window by samples, with its name and hottest function. */
static int rpc_top_threads(struct rpc_top *acc, Pyprofd__TopResult *res, struct arena *a)
{
	if (acc->nthreads > 1)
		qsort(acc->threads, acc->nthreads, sizeof *acc->threads, rpc_top_thread_cmp);
	res->threads = arena_alloc(a, (acc->nthreads ? acc->nthreads : 1) * sizeof *res->threads);
	if (!res->threads)
		return -1;
	for (size_t i = 0; i < acc->nthreads; i++) {
		struct rpc_top_thread *th = &acc->threads[i];
		Pyprofd__TopThread *p = ARENA_MESSAGE(a, Pyprofd__TopThread, PYPROFD__TOP_THREAD__INIT);
		if (!p)
			return -1;
		const struct target_thread *known = thread_table_find(&th->target->threads, th->thread_id);
		struct target_thread unnamed = {.thread_id = th->thread_id, .native_id = -1};
		if (!(p->thread = target_thread_to_proto(known ? known : &unnamed, a)))
			return -1;
		p->pid = th->target->pid;
		p->samples = th->samples;
		p->gil = th->gil;
		p->gc = th->gc;
		p->idle = th->idle;
		functions_sort(&th->fs, FUNCTIONS_BY_OWN);
		p->hottest = th->fs.nrows ? th->fs.rows[0] : NULL;
		res->threads[res->n_threads++] = p;
	}
	return 0;
}

static void rpc_top_free(struct rpc_top *acc)
{
	functions_free(&acc->fs);
	for (size_t i = 0; i < acc->nthreads; i++)
		functions_free(&acc->threads[i].fs);
	free(acc->threads);
}

/*
 * Count target t's seconds since the window began (or its session did, if
 * later) into acc; the time those seconds span up to now.
 */
static double rpc_top_visit(struct rpc_top *acc, const struct target *t, unsigned window, double at)
{
	/*
	 * The tally counts whole seconds: the window starts at the one it
	 * began in, or at the session's first when it began later (a warm
	 * re-attach keeps the last session's counts), and says the time those
	 * seconds span up to now, not the window asked.
	 */
	int64_t since = (int64_t)floor(at - (double)window);
	if (t->session_start > (double)since)
		since = (int64_t)floor(t->session_start);
	acc->target = t;
	acc->uw = t->uw;
	/* Frame ids are the target's own: another target's same id is another frame. */
	functions_forget_frames(&acc->fs);
	tally_visit(&t->tally, since, rpc_top_count, acc);
	return at - (double)since;
}

/*
 * Every target the client may see with all of r's labels, counted into acc;
 * how many, and the longest span of theirs in *span.
 */
static uint32_t rpc_top_pool(struct server *s, const struct client *c, struct rpc_top *acc,
                             unsigned window, double at, double *span)
{
	uint32_t n = 0;
	for (size_t i = 0; i < s->targets.n && !acc->failed; i++) {
		const struct target *t = s->targets.v[i];
		if (!t->uw || !rpc_may_see(c, t->uid, t->gid) ||
		    !rpc_target_has_labels(t, acc->r->labels, acc->r->n_labels))
			continue;
		double spanned = rpc_top_visit(acc, t, window, at);
		if (spanned > *span)
			*span = spanned;
		n++;
	}
	return n;
}

void rpc_top(struct server *s, struct client *c, const Pyprofd__Request *req,
             Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__TopRequest *r = req->top;
	static const enum functions_order orders[] = {
		[PYPROFD__TOP_SORT__TOP_SORT_OWN] = FUNCTIONS_BY_OWN,
		[PYPROFD__TOP_SORT__TOP_SORT_TOTAL] = FUNCTIONS_BY_TOTAL,
		[PYPROFD__TOP_SORT__TOP_SORT_NAME] = FUNCTIONS_BY_NAME,
	};
	if ((unsigned)r->sort >= sizeof orders / sizeof orders[0]) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "unknown sort order %d",
		          (int)r->sort);
		return;
	}
	if ((r->pid != 0) == (r->n_labels != 0) || r->n_labels > RPC_SELECT_LABELS_MAX) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
		          "top takes a pid or 1 to %d labels, not both", RPC_SELECT_LABELS_MAX);
		return;
	}
	struct target *one = NULL;
	if (r->pid) {
		if (!(one = rpc_known_target(s, c, r->pid, resp, a)))
			return;
		if (!one->uw) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_EXITED, "process %d exited", (int)one->pid);
			return;
		}
	}
	unsigned window = r->window_s ? r->window_s : s->config.top_window_s;
	if (window > TOP_SECONDS_KEPT - 2)
		window = TOP_SECONDS_KEPT - 2;
	struct rpc_top acc = {.r = r, .no_idle = rpc_idle_left_out(s, r->idle_policy, r->no_idle),
	                      .arena = a};
	functions_init(&acc.fs, a);
	double at = ev_now(s->loop), span = 0;
	uint32_t processes = 1;
	if (one)
		span = rpc_top_visit(&acc, one, window, at);
	else
		processes = rpc_top_pool(s, c, &acc, window, at, &span);
	Pyprofd__TopResult *res = ARENA_MESSAGE(a, Pyprofd__TopResult, PYPROFD__TOP_RESULT__INIT);
	if (acc.failed || !res || rpc_top_threads(&acc, res, a) != 0) {
		rpc_top_free(&acc);
		rpc_out_of_memory(resp, a);
		return;
	}
	functions_sort(&acc.fs, orders[r->sort]);
	size_t limit = r->limit ? r->limit : TOP_ROWS_MAX;
	res->n_rows = acc.fs.nrows < limit ? acc.fs.nrows : limit;
	res->rows = arena_alloc(a, (res->n_rows ? res->n_rows : 1) * sizeof *res->rows);
	if (res->rows && res->n_rows)
		memcpy(res->rows, acc.fs.rows, res->n_rows * sizeof *res->rows);
	res->samples = acc.fs.samples[0];
	res->gil_samples = acc.gil;
	res->gc_samples = acc.gc;
	res->idle_samples = acc.idle;
	res->idle_left_out = acc.no_idle;
	res->processes = processes;
	rpc_top_free(&acc);
	res->target = one ? target_to_proto(one, a) : NULL;
	res->window_s = span > 0 ? span : 0;
	if (!res->rows || (one && !res->target)) {
		rpc_out_of_memory(resp, a);
		return;
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_TOP;
	resp->top = res;
}
