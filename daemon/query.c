/*
 * History queries, each a job (jobs.c).  SQLite never runs on the loop:
 * each query's thread opens a read-only connection; it waits for the
 * writer to store what the loop handed it (so the answer includes samples
 * not yet flushed when the query came), counts what the writer still holds
 * in memory from there (while the file cannot be written), aggregates, and
 * packs the answer into framed parts as it goes.
 */
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"
#include "store.h"

/* Of QUERIES_MAX, one uid other than root runs this many at most, and all of them one fewer than the whole. */
#define QUERIES_PER_UID 2
/* QUERY_TRACES: traces listed when the limit is 0, and spans per trace. */
#define QUERY_TRACES_DEFAULT 100
#define QUERY_TRACE_SPANS 10
/* A response part stays under this many bytes; the client's limit is far above. */
#define QUERY_PART_BYTES (1u << 20)

/* One query: what it asks, and the job that answers it. */
struct query_job {
	struct job *job;
	struct store_writer *writer; /* what the query waits for and pins */
	uint64_t request_id;
	struct store_query q;
	Pyprofd__QueryAggregate aggregate;
	uint32_t limit;
	double base_from, base_until; /* QUERY_DIFF */
	struct labels labels; /* the selection's, which q borrows */
	/* The request context's filter, which q borrows: ids, and "key=value" lines. */
	uint8_t trace_id[STORE_TRACE_ID_LEN], span_id[STORE_SPAN_ID_LEN];
	char *context_labels[STORE_CONTEXT_LABELS];
	uint32_t rate_hz; /* of the selected processes' sessions, when they agree */
	char mode[8];
};

/* ---- on the query's thread ---- */

/*
 * The answer ends in an error.  Parts already sent stay sent: the client
 * takes an error as the end of an answer, whatever came before it.
 */
static int query_answer_error(struct query_job *j, Pyprofd__ErrorCode code, const char *msg)
{
	Pyprofd__Response resp;
	Pyprofd__Error e;
	wire_error(&resp, &e, j->request_id, code, msg);
	return job_emit(j->job, &resp);
}

/* The answer being built: a part at a time. */
struct builder {
	struct query_job *job;
	/* Stacks: a store frame id's index in the answer + 1; 0 not sent yet. */
	uint32_t *sent;
	size_t nsent_cap;
	uint32_t nframes_sent;
	/* Split by threads: the same for a store thread id. */
	uint32_t *sent_threads;
	size_t nsent_threads_cap;
	uint32_t nthreads_sent;
	/* Split by contexts: the same for a store context id. */
	uint32_t *sent_contexts;
	size_t nsent_contexts_cap;
	uint32_t ncontexts_sent;
	double first_unix, last_unix; /* of the samples, from the first row */
	uint32_t slot_seconds;        /* time_slots: from the first row */
	/* Functions or processes, and the arena they live in until the last part. */
	struct functions fs;
	struct arena rows_arena;
	Pyprofd__StoredProcess **all_processes;
	size_t nall_processes, all_processes_cap;
	Pyprofd__QueryTrace **all_traces;
	size_t nall_traces, all_traces_cap;
	/* The part under way. */
	struct arena arena;
	Pyprofd__QueryFrame **frames;
	size_t nframes, frames_cap;
	Pyprofd__QueryStack **stacks;
	size_t nstacks, stacks_cap;
	Pyprofd__ThreadInfo **threads;
	size_t nthreads, threads_cap;
	Pyprofd__QueryContext **contexts;
	size_t ncontexts, contexts_cap;
	Pyprofd__QueryTrace **traces;
	size_t ntraces, traces_cap;
	Pyprofd__FunctionRow **rows;
	size_t nrows;
	Pyprofd__StoredProcess **processes;
	size_t nprocesses;
	size_t part_bytes;
	bool first_sent;
	const char *partial; /* the reader's, when it answers from memory alone */
	uint64_t total;
	bool oom;
};

/* The index of a frame in the answer, sent with the current part when new; UINT32_MAX if out of memory. */
static uint32_t query_frame_id(struct builder *b, const struct store_frame *f)
{
	if (f->id >= b->nsent_cap) {
		size_t old = b->nsent_cap;
		if (array_reserve((void **)&b->sent, &b->nsent_cap, f->id, sizeof *b->sent, NULL) != 0)
			return UINT32_MAX;
		memset(b->sent + old, 0, (b->nsent_cap - old) * sizeof *b->sent);
	}
	if (b->sent[f->id])
		return b->sent[f->id] - 1;
	Pyprofd__QueryFrame *qf = arena_alloc(&b->arena, sizeof *qf);
	if (!qf || b->nframes_sent >= UINT32_MAX - 1 ||
	    array_reserve((void **)&b->frames, &b->frames_cap, b->nframes, sizeof *b->frames, NULL))
		return UINT32_MAX;
	pyprofd__query_frame__init(qf);
	qf->function = arena_strdup(&b->arena, f->function ? f->function : "");
	qf->file = arena_strdup(&b->arena, f->file ? f->file : "");
	qf->line = f->line;
	qf->first_line = f->first_line;
	qf->kind = (char *)vocab_kind_name((enum uw_frame_kind)f->kind);
	if (f->build_id && *f->build_id && !(qf->build_id = arena_strdup(&b->arena, f->build_id)))
		return UINT32_MAX;
	if (!qf->function || !qf->file)
		return UINT32_MAX;
	b->frames[b->nframes++] = qf;
	b->part_bytes += strlen(qf->function) + strlen(qf->file) + 16;
	b->sent[f->id] = ++b->nframes_sent;
	return b->nframes_sent - 1;
}

/* The index of a thread in the answer, sent with the current part when new; UINT32_MAX if out of memory. */
static uint32_t query_thread_id(struct builder *b, const struct store_thread *t)
{
	if (t->id >= b->nsent_threads_cap) {
		size_t old = b->nsent_threads_cap;
		if (array_reserve((void **)&b->sent_threads, &b->nsent_threads_cap, t->id,
		                  sizeof *b->sent_threads, NULL) != 0)
			return UINT32_MAX;
		memset(b->sent_threads + old, 0, (b->nsent_threads_cap - old) * sizeof *b->sent_threads);
	}
	if (b->sent_threads[t->id])
		return b->sent_threads[t->id] - 1;
	struct arena *a = &b->arena;
	Pyprofd__ThreadInfo *ti = ARENA_MESSAGE(a, Pyprofd__ThreadInfo, PYPROFD__THREAD_INFO__INIT);
	if (!ti || b->nthreads_sent >= UINT32_MAX - 1 ||
	    array_reserve((void **)&b->threads, &b->threads_cap, b->nthreads, sizeof *b->threads, NULL))
		return UINT32_MAX;
	ti->thread_id = t->thread_id;
	ti->native_thread_id = t->native_id;
	ti->target_id = t->target_id;
	ti->pid = t->pid;
	ti->process_start_time = t->start_time;
	if (!(ti->name = arena_strdup(a, t->name ? t->name : "")))
		return UINT32_MAX;
	if (t->nlabels && !(ti->labels = arena_alloc(a, t->nlabels * sizeof *ti->labels)))
		return UINT32_MAX;
	for (size_t i = 0; i < t->nlabels; i++) {
		Pyprofd__Label *l = ARENA_MESSAGE(a, Pyprofd__Label, PYPROFD__LABEL__INIT);
		if (!l || !(l->key = arena_strdup(a, t->label_keys[i])) ||
		    !(l->value = arena_strdup(a, t->label_values[i])))
			return UINT32_MAX;
		ti->labels[ti->n_labels++] = l;
		b->part_bytes += strlen(l->key) + strlen(l->value) + 8;
	}
	b->threads[b->nthreads++] = ti;
	b->part_bytes += strlen(ti->name) + 48;
	b->sent_threads[t->id] = ++b->nthreads_sent;
	return b->nthreads_sent - 1;
}

/* A copy of n bytes in the arena, as protobuf bytes; false when out of memory. */
static bool query_bytes(struct arena *a, ProtobufCBinaryData *out, const uint8_t *p, size_t n)
{
	out->len = n;
	out->data = arena_alloc(a, n ? n : 1);
	if (!out->data)
		return false;
	memcpy(out->data, p, n);
	return true;
}

/* The index of a context in the answer, sent with the current part when new; UINT32_MAX if out of memory. */
static uint32_t query_context_id(struct builder *b, const struct store_context *c)
{
	if (c->id >= b->nsent_contexts_cap) {
		size_t old = b->nsent_contexts_cap;
		if (array_reserve((void **)&b->sent_contexts, &b->nsent_contexts_cap, c->id,
		                  sizeof *b->sent_contexts, NULL) != 0)
			return UINT32_MAX;
		memset(b->sent_contexts + old, 0, (b->nsent_contexts_cap - old) * sizeof *b->sent_contexts);
	}
	if (b->sent_contexts[c->id])
		return b->sent_contexts[c->id] - 1;
	struct arena *a = &b->arena;
	Pyprofd__QueryContext *qc = ARENA_MESSAGE(a, Pyprofd__QueryContext, PYPROFD__QUERY_CONTEXT__INIT);
	if (!qc || b->ncontexts_sent >= UINT32_MAX - 1 ||
	    array_reserve((void **)&b->contexts, &b->contexts_cap, b->ncontexts, sizeof *b->contexts, NULL) ||
	    (c->has_trace && !query_bytes(a, &qc->trace_id, c->trace_id, sizeof c->trace_id)) ||
	    (c->has_span && !query_bytes(a, &qc->span_id, c->span_id, sizeof c->span_id)))
		return UINT32_MAX;
	/* Labels are "key=value" lines: at most STORE_CONTEXT_LABELS of them. */
	if (c->labels[0] && !(qc->labels = arena_alloc(a, STORE_CONTEXT_LABELS * sizeof *qc->labels)))
		return UINT32_MAX;
	for (const char *line = c->labels; *line && qc->n_labels < STORE_CONTEXT_LABELS;) {
		size_t len = strcspn(line, "\n"), key = strcspn(line, "=\n");
		Pyprofd__Label *l = ARENA_MESSAGE(a, Pyprofd__Label, PYPROFD__LABEL__INIT);
		if (!l || !(l->key = arena_alloc(a, key + 1)) ||
		    !(l->value = arena_alloc(a, key < len ? len - key : 1)))
			return UINT32_MAX;
		memcpy(l->key, line, key);
		l->key[key] = '\0';
		if (key < len) {
			memcpy(l->value, line + key + 1, len - key - 1);
			l->value[len - key - 1] = '\0';
		} else {
			l->value[0] = '\0';
		}
		qc->labels[qc->n_labels++] = l;
		line += len + (line[len] ? 1 : 0);
	}
	b->contexts[b->ncontexts++] = qc;
	b->part_bytes += strlen(c->labels) + 64;
	b->sent_contexts[c->id] = ++b->ncontexts_sent;
	return b->ncontexts_sent - 1;
}

/* Send the part under way (more: parts follow). */
static int query_flush_part(struct builder *b, bool more)
{
	struct query_job *j = b->job;
	Pyprofd__Response resp = PYPROFD__RESPONSE__INIT;
	Pyprofd__QueryResult res = PYPROFD__QUERY_RESULT__INIT;
	res.frames = b->frames;
	res.n_frames = b->nframes;
	res.stacks = b->stacks;
	res.n_stacks = b->nstacks;
	res.functions = b->rows;
	res.n_functions = b->nrows;
	res.processes = b->processes;
	res.n_processes = b->nprocesses;
	res.threads = b->threads;
	res.n_threads = b->nthreads;
	res.contexts = b->contexts;
	res.n_contexts = b->ncontexts;
	res.traces = b->traces;
	res.n_traces = b->ntraces;
	if (!b->first_sent) {
		res.total = b->total;
		res.first_unix = b->first_unix;
		res.last_unix = b->last_unix;
		res.slot_seconds = b->slot_seconds;
		res.from_unix = j->q.from_unix;
		res.until_unix = j->q.until_unix;
		res.rate_hz = j->rate_hz;
		res.mode = j->mode;
		res.functions_found = b->fs.nrows;
		/* The processes' samples are all their samples, idle or not. */
		res.idle_left_out = j->q.no_idle && j->aggregate != PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES;
		if (b->partial)
			res.partial = (char *)b->partial;
		if (j->aggregate == PYPROFD__QUERY_AGGREGATE__QUERY_DIFF) {
			res.base_total = b->fs.samples[1];
			res.base_from_unix = j->base_from;
			res.base_until_unix = j->base_until;
		}
	}
	resp.id = j->request_id;
	resp.more = more;
	resp.result_case = PYPROFD__RESPONSE__RESULT_QUERY;
	resp.query = &res;
	int rc = job_emit(j->job, &resp);
	b->first_sent = true;
	b->nframes = b->nstacks = b->nprocesses = b->nthreads = b->ncontexts = 0;
	if (b->ntraces)
		b->traces += b->ntraces;
	b->ntraces = 0;
	/* Rows and processes go out of their whole table in order. */
	if (b->nrows)
		b->rows += b->nrows;
	if (b->nprocesses)
		b->processes += b->nprocesses;
	b->nrows = 0;
	b->part_bytes = 0;
	arena_free(&b->arena);
	return rc;
}

static int query_on_stack(void *ctx, const struct store_row *row)
{
	struct builder *b = ctx;
	b->total = row->query_total;
	b->first_unix = row->first_unix;
	b->last_unix = row->last_unix;
	b->slot_seconds = row->slot_seconds;
	Pyprofd__QueryStack *qs = arena_alloc(&b->arena, sizeof *qs);
	uint32_t *ids = arena_alloc(&b->arena, (row->depth ? row->depth : 1) * sizeof *ids);
	if (!qs || !ids || array_reserve((void **)&b->stacks, &b->stacks_cap, b->nstacks, sizeof *b->stacks, NULL)) {
		b->oom = true;
		return -1;
	}
	pyprofd__query_stack__init(qs);
	for (uint32_t i = 0; i < row->depth; i++)
		if ((ids[i] = query_frame_id(b, &row->frames[i])) == UINT32_MAX) {
			b->oom = true;
			return -1;
		}
	qs->frames = ids;
	qs->n_frames = row->depth;
	qs->count = row->count;
	qs->idle = row->idle;
	qs->slot_start = row->slot_start;
	if (row->thread) {
		uint32_t thread = query_thread_id(b, row->thread);
		if (thread == UINT32_MAX) {
			b->oom = true;
			return -1;
		}
		qs->thread = thread + 1;
	}
	if (row->context) {
		uint32_t context = query_context_id(b, row->context);
		if (context == UINT32_MAX) {
			b->oom = true;
			return -1;
		}
		qs->context = context + 1;
	}
	b->stacks[b->nstacks++] = qs;
	b->part_bytes += 4 * (size_t)row->depth + 28;
	/* The arena holds this part's frames and stacks: send it before it grows large. */
	if (b->part_bytes > QUERY_PART_BYTES && query_flush_part(b, true) != 0) {
		b->oom = true;
		return -1;
	}
	return 0;
}

/* A stack counted into the function table; side 1 is a diff's base range. */
static int query_count_stack(struct builder *b, int side, const struct store_row *row)
{
	functions_next_stack(&b->fs, side, row->count);
	for (uint32_t i = row->depth; i-- > 0;) {
		const struct store_frame *f = &row->frames[i];
		if (!f->function)
			continue;
		if (functions_count(&b->fs, side, f->id, f->function, f->file, f->first_line,
		                    i + 1 == row->depth, row->count) < 0) {
			b->oom = true;
			return -1;
		}
	}
	return 0;
}

static int query_on_stack_compared(void *ctx, const struct store_row *row)
{
	return query_count_stack(ctx, 0, row);
}

static int query_on_stack_base(void *ctx, const struct store_row *row)
{
	return query_count_stack(ctx, 1, row);
}

/* One stored process into the part under way. */
static int query_on_process(void *ctx, const struct store_process *sp)
{
	struct builder *b = ctx;
	struct arena *a = &b->rows_arena;
	Pyprofd__StoredProcess *p =
		ARENA_MESSAGE(a, Pyprofd__StoredProcess, PYPROFD__STORED_PROCESS__INIT);
	if (!p || array_reserve((void **)&b->all_processes, &b->all_processes_cap, b->nall_processes,
	                         sizeof *b->all_processes, NULL))
		goto nomem;
	p->target_id = sp->target_id;
	p->pid = sp->pid;
	p->uid = sp->uid;
	p->executable = arena_strdup(a, sp->executable ? sp->executable : "");
	p->command_line = arena_strdup(a, sp->command_line ? sp->command_line : "");
	p->python_version = arena_strdup(a, sp->python_version ? sp->python_version : "");
	p->first_unix = sp->first_unix;
	p->last_unix = sp->last_unix;
	p->samples = sp->samples;
	b->total += sp->samples;
	if (!p->executable || !p->command_line || !p->python_version)
		goto nomem;
	if (sp->nlabels) {
		p->labels = arena_alloc(a, sp->nlabels * sizeof *p->labels);
		if (!p->labels)
			goto nomem;
		for (size_t i = 0; i < sp->nlabels; i++) {
			Pyprofd__Label *l = ARENA_MESSAGE(a, Pyprofd__Label, PYPROFD__LABEL__INIT);
			if (!l)
				goto nomem;
			l->key = arena_strdup(a, sp->label_keys[i]);
			l->value = arena_strdup(a, sp->label_values[i]);
			if (!l->key || !l->value)
				goto nomem;
			p->labels[p->n_labels++] = l;
		}
	}
	b->all_processes[b->nall_processes++] = p;
	return 0;
nomem:
	b->oom = true;
	return -1;
}

/* One trace into the whole list (rows_arena), sent after. */
static int query_on_trace(void *ctx, const struct store_trace *t)
{
	struct builder *b = ctx;
	struct arena *a = &b->rows_arena;
	Pyprofd__QueryTrace *qt = ARENA_MESSAGE(a, Pyprofd__QueryTrace, PYPROFD__QUERY_TRACE__INIT);
	if (!qt || array_reserve((void **)&b->all_traces, &b->all_traces_cap, b->nall_traces,
	                         sizeof *b->all_traces, NULL) ||
	    !query_bytes(a, &qt->trace_id, t->trace_id, sizeof t->trace_id) ||
	    (t->nspans && !(qt->spans = arena_alloc(a, t->nspans * sizeof *qt->spans))))
		goto nomem;
	qt->samples = t->samples;
	qt->first_unix = t->first_unix;
	qt->last_unix = t->last_unix;
	qt->spans_found = t->spans_found;
	for (size_t i = 0; i < t->nspans; i++) {
		Pyprofd__QuerySpan *s = ARENA_MESSAGE(a, Pyprofd__QuerySpan, PYPROFD__QUERY_SPAN__INIT);
		if (!s || !query_bytes(a, &s->span_id, t->spans[i].span_id, sizeof t->spans[i].span_id))
			goto nomem;
		s->samples = t->spans[i].samples;
		qt->spans[qt->n_spans++] = s;
	}
	b->total += t->samples;
	b->all_traces[b->nall_traces++] = qt;
	return 0;
nomem:
	b->oom = true;
	return -1;
}

/* The traces found, in parts, the first with the total. */
static int query_send_traces(struct builder *b)
{
	b->traces = b->all_traces;
	for (size_t i = 0; i < b->nall_traces; i++) {
		b->ntraces++;
		b->part_bytes += 64 + 24 * b->all_traces[i]->n_spans;
		if (b->part_bytes > QUERY_PART_BYTES && i + 1 < b->nall_traces &&
		    query_flush_part(b, true) != 0)
			return -1;
	}
	return query_flush_part(b, false);
}

/* The function table sorted and sent, the first `limit` rows, in parts. */
static int query_send_functions(struct builder *b)
{
	struct query_job *j = b->job;
	functions_sort(&b->fs, j->aggregate == PYPROFD__QUERY_AGGREGATE__QUERY_DIFF ? FUNCTIONS_BY_CHANGE
	                                                                            : FUNCTIONS_BY_OWN);
	b->total = b->fs.samples[0];
	size_t n = j->limit && j->limit < b->fs.nrows ? j->limit : b->fs.nrows;
	b->rows = b->fs.rows;
	for (size_t i = 0; i < n; i++) {
		b->nrows++;
		b->part_bytes += strlen(b->fs.rows[i]->function) + strlen(b->fs.rows[i]->file) + 48;
		if (b->part_bytes > QUERY_PART_BYTES && i + 1 < n && query_flush_part(b, true) != 0)
			return -1;
	}
	return query_flush_part(b, false);
}

/* The processes found, in parts, the first with the total. */
static int query_send_processes(struct builder *b)
{
	b->processes = b->all_processes;
	for (size_t i = 0; i < b->nall_processes; i++) {
		const Pyprofd__StoredProcess *p = b->all_processes[i];
		b->nprocesses++;
		b->part_bytes += strlen(p->executable) + strlen(p->command_line) + 64 + 64 * p->n_labels;
		if (b->part_bytes > QUERY_PART_BYTES && i + 1 < b->nall_processes &&
		    query_flush_part(b, true) != 0)
			return -1;
	}
	return query_flush_part(b, false);
}

static void query_builder_free(struct builder *b)
{
	free(b->sent);
	free(b->sent_threads);
	free(b->threads);
	free(b->sent_contexts);
	free(b->contexts);
	free(b->all_traces);
	free(b->frames);
	free(b->stacks);
	free(b->all_processes);
	arena_free(&b->arena);
	functions_free(&b->fs);
	arena_free(&b->rows_arena);
}

/* The answer, sent in parts; 0, or -1 and *err (b->oom says whether memory ran out). */
static int query_answer(struct query_job *j, struct store_reader *r, struct builder *b,
                        struct store_error *err)
{
	switch (j->aggregate) {
	case PYPROFD__QUERY_AGGREGATE__QUERY_STACKS:
		if (store_query_stacks(r, &j->q, query_on_stack, b, &b->total, err) != 0)
			return -1;
		return query_flush_part(b, false);
	case PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES:
		if (store_query_processes(r, &j->q, query_on_process, b, err) != 0)
			return -1;
		return query_send_processes(b);
	case PYPROFD__QUERY_AGGREGATE__QUERY_TRACES:
		if (store_query_traces(r, &j->q, j->limit ? j->limit : QUERY_TRACES_DEFAULT,
		                       QUERY_TRACE_SPANS, query_on_trace, b, err) != 0)
			return -1;
		return query_send_traces(b);
	case PYPROFD__QUERY_AGGREGATE__QUERY_DIFF: {
		struct store_query base = j->q;
		base.from_unix = j->base_from;
		base.until_unix = j->base_until;
		if (store_query_stacks(r, &base, query_on_stack_base, b, NULL, err) != 0)
			return -1;
		/* The next query numbers its frames afresh. */
		functions_forget_frames(&b->fs);
	}
		/* fall through */
	default:
		if (store_query_stacks(r, &j->q, query_on_stack_compared, b, NULL, err) != 0)
			return -1;
		return query_send_functions(b);
	}
}

/* The query's job: its answer, or an error. */
static int query_run(struct job *job, void *data)
{
	struct query_job *j = data;
	j->job = job;
	struct store_error err = {{0}};
	/* What the loop handed over before the query started is in the answer. */
	store_writer_flush(j->writer);
	struct store_reader *r = store_reader_open_writer(j->writer, &err);
	if (!r)
		return query_answer_error(j, PYPROFD__ERROR_CODE__ERROR_INTERNAL, err.msg);
	struct builder b = {.job = j, .partial = store_reader_partial(r)};
	functions_init(&b.fs, &b.rows_arena);
	/*
	 * What the writer could not write yet (a full disk, a read-only file)
	 * is counted from its memory, each sample once.
	 */
	struct store_pending *pending = store_reader_pin(r, j->writer, &err);
	j->q.pending = pending;
	/* The stored sessions know how every process of the range was sampled, gone or not. */
	int rc = pending ? store_query_sampling(r, &j->q, &j->rate_hz, j->mode, sizeof j->mode, &err)
	                 : -1;
	if (rc != 0 || query_answer(j, r, &b, &err) != 0)
		rc = query_answer_error(j, PYPROFD__ERROR_CODE__ERROR_INTERNAL,
		                        b.oom || !err.msg[0] ? "the daemon ran out of memory answering the query"
		                                             : err.msg);
	store_reader_unpin(r, pending);
	j->q.pending = NULL;
	query_builder_free(&b);
	store_reader_close(r);
	return rc;
}

/* ---- on the loop ---- */

static void query_job_free(void *data)
{
	struct query_job *j = data;
	labels_free(&j->labels);
	for (size_t i = 0; i < STORE_CONTEXT_LABELS; i++)
		free(j->context_labels[i]);
	free(j);
}

static const struct job_type query_job_type = {"query", query_run, query_job_free};

struct jobs_count queries_count(const struct jobs *js, uid_t uid)
{
	return jobs_count(js, &query_job_type, uid);
}

/* The label strings of a request, copied into the job for q to borrow. */
static int query_copy_labels(struct query_job *j, const Pyprofd__QueryRequest *r)
{
	for (size_t i = 0; i < r->n_labels; i++)
		if (labels_add(&j->labels, r->labels[i]->key, r->labels[i]->value) != 0)
			return -1;
	j->q.nlabels = j->labels.n;
	j->q.label_keys = (const char *const *)j->labels.keys;
	j->q.label_values = (const char *const *)j->labels.values;
	return 0;
}

/*
 * The request context's filter of a request, copied into the job for q to
 * borrow (check_request checked its lengths).  0, or -1 when out of memory.
 */
static int query_copy_context(struct query_job *j, const Pyprofd__QueryRequest *r)
{
	if (r->trace_id.len == STORE_TRACE_ID_LEN) {
		memcpy(j->trace_id, r->trace_id.data, STORE_TRACE_ID_LEN);
		j->q.trace_id = j->trace_id;
	}
	if (r->span_id.len == STORE_SPAN_ID_LEN) {
		memcpy(j->span_id, r->span_id.data, STORE_SPAN_ID_LEN);
		j->q.span_id = j->span_id;
	}
	for (size_t i = 0; i < r->n_context_labels && i < STORE_CONTEXT_LABELS; i++) {
		const Pyprofd__Label *l = r->context_labels[i];
		size_t n = strlen(l->key) + strlen(l->value) + 2;
		if (!(j->context_labels[i] = malloc(n)))
			return -1;
		snprintf(j->context_labels[i], n, "%s=%s", l->key, l->value);
		j->q.ncontext_labels = i + 1;
	}
	j->q.context_labels = (const char *const *)j->context_labels;
	return 0;
}

Pyprofd__ErrorCode queries_start(struct jobs *js, const struct query_origin *o,
                                 const Pyprofd__QueryRequest *r, char *why, size_t why_len)
{
	/* Its time ranges were checked with its strings, as every request's are (check_request). */
	if (r->n_labels > STORE_MAX_LABELS || r->pid < 0) {
		snprintf(why, why_len, "a query needs a valid pid and at most %d labels", STORE_MAX_LABELS);
		return PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	/* check_request refused worse; these bounds are what the copies below rely on. */
	if ((r->trace_id.len && r->trace_id.len != STORE_TRACE_ID_LEN) ||
	    (r->span_id.len && r->span_id.len != STORE_SPAN_ID_LEN) ||
	    r->n_context_labels > STORE_CONTEXT_LABELS) {
		snprintf(why, why_len, "a query's trace id is 16 bytes, its span id 8, and it has at most %d "
		                       "context labels", STORE_CONTEXT_LABELS);
		return PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	bool diff = r->aggregate == PYPROFD__QUERY_AGGREGATE__QUERY_DIFF;
	if (r->aggregate != PYPROFD__QUERY_AGGREGATE__QUERY_STACKS &&
	    r->aggregate != PYPROFD__QUERY_AGGREGATE__QUERY_FUNCTIONS &&
	    r->aggregate != PYPROFD__QUERY_AGGREGATE__QUERY_PROCESSES &&
	    r->aggregate != PYPROFD__QUERY_AGGREGATE__QUERY_TRACES && !diff) {
		snprintf(why, why_len, "unknown aggregate %d", (int)r->aggregate);
		return PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	struct jobs_count running = queries_count(js, o->uid);
	if (running.all >= QUERIES_MAX) {
		snprintf(why, why_len, "%d queries are already running", QUERIES_MAX);
		return PYPROFD__ERROR_CODE__ERROR_LIMIT;
	}
	/* No user can take every query thread: root always finds one. */
	if (o->uid != 0 && running.of_uid >= QUERIES_PER_UID) {
		snprintf(why, why_len, "this user already runs %d queries, the most one user may", QUERIES_PER_UID);
		return PYPROFD__ERROR_CODE__ERROR_LIMIT;
	}
	if (o->uid != 0 && running.not_root >= QUERIES_MAX - 1) {
		snprintf(why, why_len, "%d queries of users other than root are running (one is kept for root)",
		         QUERIES_MAX - 1);
		return PYPROFD__ERROR_CODE__ERROR_LIMIT;
	}
	struct query_job *j = calloc(1, sizeof *j);
	if (!j || query_copy_labels(j, r) != 0 || query_copy_context(j, r) != 0) {
		if (j)
			query_job_free(j);
		snprintf(why, why_len, "the daemon is out of memory");
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	}
	j->writer = o->writer;
	j->request_id = o->request_id;
	j->q.pid = r->pid;
	j->q.target_id = r->target_id;
	j->q.from_unix = r->from_unix;
	/* An open end is now, or the start if that is later (a range in the future is empty, not invalid). */
	double now = ev_time();
	j->q.until_unix = r->until_unix ? r->until_unix : now > r->from_unix ? now : r->from_unix;
	j->aggregate = r->aggregate;
	j->limit = r->limit;
	if (diff) {
		j->base_from = r->base_from_unix;
		j->base_until = r->base_until_unix ? r->base_until_unix
		                : now > r->base_from_unix ? now : r->base_from_unix;
	}
	j->q.by_thread = r->by_thread;
	j->q.thread_id = r->thread_id;
	j->q.split_threads = r->split_threads && r->aggregate == PYPROFD__QUERY_AGGREGATE__QUERY_STACKS;
	j->q.split_contexts = r->split_contexts && r->aggregate == PYPROFD__QUERY_AGGREGATE__QUERY_STACKS;
	j->q.no_idle = o->no_idle;
	j->q.time_slots = r->aggregate == PYPROFD__QUERY_AGGREGATE__QUERY_STACKS ? r->time_slots : 0;
	/* Another user sees the history of its own processes alone. */
	j->q.by_uid = o->uid != 0;
	j->q.uid = o->uid;
	if (jobs_start(js, &query_job_type, j, o->client_serial, o->uid, why, why_len) != 0)
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	return PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED;
}
