/*
 * The request a thread serves, read from outside: its contextvars context
 * (PyThreadState.context), and in it OpenTelemetry's current span and the
 * ContextVars the options name as labels, 3.8-3.15.
 *
 * A context's variables are an immutable HAMT (ctx_vars), but nothing read
 * of one is kept by its pointers: a set makes a new HAMT where the last was
 * freed, and context_ver moves only when a context is entered or left.
 * So a context is read every sample through the sample's view (its
 * addresses in the next one batched read), and given to the sample only
 * when every read of it, and of the frame the stack ends in, holds its
 * bytes when made again after the stack (pyobj_notes_hold); else the
 * sample has no request, never another's.  A thread the kernel proves ran
 * nothing since keeps the context proven then.
 *
 * OpenTelemetry's SDK keeps the current span in a ContextVar named
 * "current_context" whose value is a Context (a dict subclass) holding
 * the span under "current-span-<uuid>"; the span's _context is a
 * SpanContext (a tuple subclass) whose first two items are the trace id
 * (128 bits) and the span id (64 bits).
 *
 * Every read is bounded (nodes, entries, depth, string bytes) and every
 * object is checked by type where its value is taken: garbage gives no
 * context, never another thread's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* HAMT nodes visited for one context at most, entries looked at, and depth (7 levels and collisions). */
#define CONTEXT_MAX_NODES 64u
#define CONTEXT_MAX_ENTRIES 128u
#define CONTEXT_MAX_DEPTH 9u
/* Slots of one bitmap or collision node at most (two a key), and an array node's children. */
#define CONTEXT_NODE_SLOTS 64u
#define CONTEXT_ARRAY_CHILDREN 32u

/* The ContextVar OpenTelemetry's runtime context keeps the current Context in. */
#define CONTEXT_OTEL_VAR "current_context"
/* The key of the current span in that Context: create_key("current-span") adds "-" and a uuid. */
#define CONTEXT_OTEL_SPAN_KEY "current-span-"

/* A node's kind, told by its type's tp_name (the types are not exported by every build). */
enum context_node_kind { NODE_UNKNOWN, NODE_BITMAP, NODE_ARRAY, NODE_COLLISION };

/* Which wanted name a ContextVar's name is: a label's index, CONTEXT_WANT_OTEL, or none. */
#define CONTEXT_WANT_OTEL (-2)
#define CONTEXT_WANT_NONE (-1)

static enum context_node_kind context_node_kind(struct uw_target *t, raddr_t type)
{
	struct context_state *cs = &t->contexts;
	for (unsigned i = 0; i < cs->ntypes; i++)
		if (cs->types[i].type == type)
			return (enum context_node_kind)cs->types[i].kind;
	/* PyTypeObject.tp_name, after the variable-size header. */
	raddr_t name = pyobj_pointer(t, type + 24 + pyobj_shift(t));
	char s[24] = {0};
	if (!name || pyobj_read(t, name, s, sizeof s - 1) != 0)
		return NODE_UNKNOWN;
	enum context_node_kind kind = !strcmp(s, "hamt_bitmap_node")      ? NODE_BITMAP
	                              : !strcmp(s, "hamt_array_node")     ? NODE_ARRAY
	                              : !strcmp(s, "hamt_collision_node") ? NODE_COLLISION
	                                                                  : NODE_UNKNOWN;
	if (kind != NODE_UNKNOWN && cs->ntypes < CONTEXT_NODE_TYPES)
		cs->types[cs->ntypes++] = (struct context_node_type){.type = type, .kind = (uint8_t)kind};
	return kind;
}

/* Which wanted name the ContextVar var has; its name is read only when not met before. */
static int context_var_want(struct uw_target *t, raddr_t var)
{
	struct context_state *cs = &t->contexts;
	uint32_t shift = pyobj_shift(t);
	/* One slot a var, by its address: a var met again is one probe. */
	if (!cs->vars && !(cs->vars = calloc(CONTEXT_VARS_KEPT, sizeof *cs->vars)))
		return CONTEXT_WANT_NONE;
	struct context_var_seen *slot = &cs->vars[(var >> 4) % CONTEXT_VARS_KEPT];
	/*
	 * A var met before that nothing asked for is taken by its address
	 * alone, nothing read: should another var have taken the address, the
	 * worst is a label missed, never one given wrongly.
	 */
	if (slot->var == var && slot->want == CONTEXT_WANT_NONE)
		return CONTEXT_WANT_NONE;
	/* Its type and name in one read: a context of many variables makes many of these. */
	uint8_t b[40];
	if (pyobj_read_fixed(t, var + 8, b, 16 + shift) != 0 || load_u64(b, shift) != t->objtypes.contextvar)
		return CONTEXT_WANT_NONE;
	raddr_t name = load_u64(b, 8 + shift);
	/*
	 * A var and its name are immutable and the name lives while the var
	 * points to it: the same pair is the same name.
	 */
	if (slot->var == var && slot->name == name)
		return slot->want;
	char s[UW_CONTEXT_NAME_LEN];
	int want = CONTEXT_WANT_NONE;
	if (pyobj_type_of(t, name) == t->unicode_type && pyobj_read_str_into(t, name, s, sizeof s, NULL) == 0) {
		if (t->opts.context_otel && !strcmp(s, CONTEXT_OTEL_VAR))
			want = CONTEXT_WANT_OTEL;
		for (uint32_t i = 0; i < t->opts.ncontext_labels && want == CONTEXT_WANT_NONE; i++)
			if (!strcmp(s, t->opts.context_labels[i]))
				want = (int)i;
	}
	*slot = (struct context_var_seen){.var = var, .name = name, .want = want};
	return want;
}

/* OpenTelemetry's span of a Context (a dict): the ids of its span's SpanContext, when valid. */
static void context_otel_span(struct uw_target *t, const struct names_layout *N, raddr_t otel_ctx,
                              struct uw_context *out)
{
	raddr_t unused = 0, span = 0, slot, span_context = 0;
	if (pyobj_dict_get(t, N, otel_ctx, CONTEXT_OTEL_SPAN_KEY, true, &unused, &span, &slot) != 1 ||
	    pyobj_attr_get(t, N, span, "_context", &t->contexts.context_key, &span_context, &slot) != 1)
		return;
	raddr_t trace = pyobj_tuple_item(t, N, span_context, 0), id = pyobj_tuple_item(t, N, span_context, 1);
	uint8_t trace_id[16], span_id[8];
	if (!trace || !id || pyobj_int_read(t, N, trace, trace_id, 16) != 1 || pyobj_int_read(t, N, id, span_id, 8) != 1)
		return;
	static const uint8_t zero[16];
	if (!memcmp(trace_id, zero, 16) || !memcmp(span_id, zero, 8))
		return;
	memcpy(out->trace_id, trace_id, 16);
	memcpy(out->span_id, span_id, 8);
	out->has_span = true;
}

/* A label's value: a str, or an int in decimal; a label the thread's record gave stands. */
static void context_label(struct uw_target *t, const struct names_layout *N, raddr_t value, uint32_t index,
                          struct uw_context *out)
{
	char s[UW_CONTEXT_VALUE_LEN];
	raddr_t type = pyobj_type_of(t, value);
	if (type && type == t->unicode_type) {
		if (pyobj_read_str_into(t, value, s, sizeof s, NULL) != 0)
			return;
	} else {
		uint8_t be[8];
		if (pyobj_int_read(t, N, value, be, sizeof be) != 1)
			return;
		uint64_t v = 0;
		for (unsigned i = 0; i < 8; i++)
			v = v << 8 | be[i];
		snprintf(s, sizeof s, "%llu", (unsigned long long)v);
	}
	context_label_put(out, index, s, strlen(s), false);
}

/* One key and value of the HAMT: a wanted ContextVar's value read into out. */
static void context_entry(struct uw_target *t, const struct names_layout *N, raddr_t key, raddr_t value,
                          struct uw_context *out)
{
	int want = context_var_want(t, key);
	/* The thread's record, when the process publishes them, says the span: the SDK's own word. */
	if (want == CONTEXT_WANT_OTEL && !t->contexts.span_from_record)
		context_otel_span(t, N, value, out);
	else if (want >= 0)
		context_label(t, N, value, (uint32_t)want, out);
}

/* The HAMT's entries from its root node, depth first, every count bounded.  0, or -1 when garbage. */
static int context_hamt(struct uw_target *t, const struct names_layout *N, raddr_t root, struct uw_context *out)
{
	uint32_t shift = pyobj_shift(t);
	raddr_t stack[CONTEXT_MAX_DEPTH * CONTEXT_ARRAY_CHILDREN];
	unsigned depth[CONTEXT_MAX_DEPTH * CONTEXT_ARRAY_CHILDREN];
	unsigned n = 0, nodes = 0, entries = 0;
	stack[n] = root;
	depth[n++] = 0;
	while (n) {
		raddr_t node = stack[--n];
		unsigned level = depth[n];
		if (++nodes > CONTEXT_MAX_NODES || level >= CONTEXT_MAX_DEPTH)
			return -1;
		uint8_t hdr[16];
		if (pyobj_read(t, node + 8 + shift, hdr, 16) != 0)
			return -1;
		enum context_node_kind kind = context_node_kind(t, load_u64(hdr, 0));
		uint8_t slots[CONTEXT_NODE_SLOTS * 8];
		if (kind == NODE_ARRAY) {
			if (pyobj_read(t, node + 16 + shift, slots, CONTEXT_ARRAY_CHILDREN * 8) != 0)
				return -1;
			for (unsigned i = 0; i < CONTEXT_ARRAY_CHILDREN; i++) {
				raddr_t child = load_u64(slots, i * 8);
				if (!child)
					continue;
				if (n >= sizeof stack / sizeof stack[0])
					return -1;
				stack[n] = child;
				depth[n++] = level + 1;
			}
			continue;
		}
		if (kind == NODE_UNKNOWN)
			return -1;
		/* Bitmap and collision nodes: ob_size slots, a key and its value each (a bitmap's NULL key: a child). */
		uint64_t size = load_u64(hdr, 8);
		if (size > CONTEXT_NODE_SLOTS || size % 2)
			return -1;
		if (kind == NODE_BITMAP) {
			uint8_t bitmap[4];
			if (pyobj_read(t, node + 24 + shift, bitmap, 4) != 0 ||
			    (uint64_t)__builtin_popcount(load_u32(bitmap, 0)) * 2 != size)
				return -1;
		}
		if (size && pyobj_read(t, node + 32 + shift, slots, size * 8) != 0)
			return -1;
		for (uint64_t i = 0; i < size; i += 2) {
			raddr_t key = load_u64(slots, i * 8), value = load_u64(slots, (i + 1) * 8);
			if (!value)
				return -1;
			if (!key) {
				if (kind != NODE_BITMAP || n >= sizeof stack / sizeof stack[0])
					return -1;
				stack[n] = value;
				depth[n++] = level + 1;
				continue;
			}
			if (++entries > CONTEXT_MAX_ENTRIES)
				return 0; /* more variables than anyone sets: the first ones are what was read */
			context_entry(t, N, key, value, out);
		}
	}
	return 0;
}

/* What a context's variables (its HAMT at vars) say: 0, or -1 when garbage. */
static int context_read(struct uw_target *t, const struct names_layout *N, raddr_t vars, struct uw_context *out)
{
	t->stats.context_reads++;
	raddr_t root = vars ? pyobj_pointer(t, vars + 16 + pyobj_shift(t)) : 0;
	/* An empty HAMT has a root too (an empty bitmap node); none at all is garbage. */
	return root ? context_hamt(t, N, root, out) : -1;
}


/* Whether the options ask for contexts and the runtime has what they are read through. */
static const struct names_layout *context_wanted(struct uw_target *t)
{
	if (!t->opts.context_otel && !t->opts.ncontext_labels)
		return NULL;
	const struct names_layout *N = layout_names_for_minor(t->layout.minor);
	if (!N || N->ts_context == LAYOUT_ABSENT || !pyobj_types(t) || !t->objtypes.contextvar)
		return NULL;
	return N;
}

/* The thread's context pointer and version, read now (never from the sample's batch). */
static bool context_current(struct uw_target *t, const struct names_layout *N, raddr_t tstate, raddr_t *ctx,
                            uint64_t *ver)
{
	uint8_t b[16];
	if (remote_read(&t->mem, tstate + N->ts_context, b, 16, NULL) != 0)
		return false;
	*ctx = load_u64(b, 0);
	*ver = load_u64(b, 8);
	return true;
}

/* A context's variables (its HAMT), read now; 0 when unreadable. */
static raddr_t context_vars_now(struct uw_target *t, raddr_t ctx)
{
	uint8_t b[8];
	return remote_read(&t->mem, ctx + 24 + pyobj_shift(t), b, 8, NULL) == 0 ? load_u64(b, 0) : 0;
}

/*
 * What a context's variables say, its reads made through the sample's
 * view: the same addresses are in the next sample's one batched read.
 * Nothing read of a context is kept from one sample to the next by its
 * pointers: a program that sets a variable again and again frees a HAMT
 * and makes the next at the same address (pymalloc hands the block freed
 * last out first), and the dict, the span and its ids as well, so equal
 * pointers say nothing of equal values.  0, or -1 when garbage.
 */
static int context_read_batched(struct uw_target *t, const struct names_layout *N, raddr_t vars,
                                struct uw_context *out)
{
	t->pyobj_batched = true;
	out->has_span = false;
	out->nlabels = 0;
	int rc = context_read(t, N, vars, out);
	t->pyobj_batched = false;
	return rc;
}

bool context_before(struct uw_target *t, struct thread_cache *tc, raddr_t tstate, struct context_seen *seen)
{
	const struct names_layout *N = context_wanted(t);
	*seen = (struct context_seen){0};
	if (!N)
		return false;
	/*
	 * In the sample's batch: the next sample reads it with the thread
	 * state.  A thread whose context moved under the last read (a loop
	 * switching requests) has it read now instead, just before its stack,
	 * so less time lies between the two reads that must agree.
	 */
	const uint8_t *p = view_read(t, tstate + N->ts_context, 16, 0, NULL);
	if (!p)
		return false;
	seen->ctx = load_u64(p, 0);
	seen->ver = load_u64(p, 8);
	if (tc->ctx_moved && !context_current(t, N, tstate, &seen->ctx, &seen->ver))
		return false;
	if (!seen->ctx)
		return false;
	const uint8_t *v = view_read(t, seen->ctx + 24 + pyobj_shift(t), 8, 0, NULL);
	seen->vars = v ? load_u64(v, 0) : 0;
	if (tc->ctx_moved)
		seen->vars = context_vars_now(t, seen->ctx);
	return seen->vars != 0;
}

/*
 * The thread's innermost frame and its code where its stack ends (the
 * walk's, or the proof's that kept it), its reads noted.  Not the
 * instruction: a thread busy in one frame moves it all the time, and what
 * this proof must rule out is a request left and another entered, which
 * takes a return to the caller and a call (another frame or another code
 * there), or changes the context's bytes.
 */
static bool context_frame_holds(struct uw_target *t, const struct thread_cache *tc, raddr_t tstate)
{
	const struct py_layout *L = &t->layout;
	if (!tc->n || !tc->chain[tc->n - 1].addr)
		return false;
	const struct chain_link *top = &tc->chain[tc->n - 1];
	uint8_t b[8];
	if (L->tstate.cframe != LAYOUT_ABSENT) {
		if (pyobj_read(t, tstate + L->tstate.cframe, b, 8) != 0 ||
		    pyobj_read(t, load_u64(b, 0) + L->tstate.cframe_current_frame, b, 8) != 0)
			return false;
	} else if (L->tstate.frame == LAYOUT_ABSENT || pyobj_read(t, tstate + L->tstate.frame, b, 8) != 0) {
		return false;
	}
	if (load_u64(b, 0) != top->addr)
		return false;
	return pyobj_read(t, top->addr + L->frame.code, b, 8) == 0 &&
	       (load_u64(b, 0) & ~L->frame.code_tag_mask) == top->code;
}

const struct uw_context *context_of_thread(struct uw_target *t, struct thread_cache *tc, raddr_t tstate,
                                           uint64_t thread_id, const struct context_seen *seen)
{
	/* A thread that never entered a context may still have a record: the process's SDK keeps it. */
	const struct names_layout *N = seen->vars || t->otel.keys_known ? context_wanted(t) : NULL;
	bool record = N && otel_records_on(t);
	if (!N || (!seen->vars && !record))
		return NULL;
	/*
	 * A thread the kernel proves ran nothing since its stack was read, whose
	 * context was proven then or since: the same context, nothing read.
	 */
	if (tc->still.holds && tc->ctx_proven && tc->ctx_gen == t->contexts.gen) {
		t->stats.context_kept++;
		return tc->ctx->has_span || tc->ctx->nlabels ? tc->ctx : NULL;
	}
	tc->ctx_proven = false;
	struct context_state *cs = &t->contexts;
	if ((!tc->ctx && !(tc->ctx = malloc(sizeof *tc->ctx))) ||
	    (!cs->proof && !(cs->proof = malloc(sizeof *cs->proof))))
		return NULL;
	/*
	 * Every read of the context (as the sample's batch had it, before the
	 * stack was read), and of the frame the stack ends in, noted and made
	 * again at the end, all at once.  Each holding its bytes, the thread
	 * sat in that frame at that instruction under that very context, down
	 * to the ids and strings: a request left, and another entered, changes
	 * some of them, even when its objects took the last one's addresses
	 * (pymalloc hands the block freed last out first), so equal pointers
	 * alone would prove nothing.
	 */
	cs->proof->n = cs->proof->used = 0;
	cs->proof->overflow = false;
	t->notes = cs->proof;
	t->pyobj_batched = true;
	tc->ctx->has_span = false;
	tc->ctx->nlabels = 0;
	int rc = record ? otel_thread_record(t, thread_id, tc->ctx) : 0;
	/* The ContextVars for what the record did not say: every label, or the span too when there is no record. */
	bool vars = rc == 0 && seen->vars && (!record || tc->ctx->nlabels < t->opts.ncontext_labels);
	/* One read of the thread's context, whichever it was read through. */
	if (!vars)
		t->stats.context_reads += record;
	if (vars) {
		uint8_t fields[16];
		memcpy(fields, &seen->ctx, 8);
		memcpy(fields + 8, &seen->ver, 8);
		pyobj_note(t, tstate + N->ts_context, fields, 16);
		memcpy(fields, &seen->vars, 8);
		pyobj_note(t, seen->ctx + 24 + pyobj_shift(t), fields, 8);
		t->contexts.span_from_record = record;
		rc = context_read(t, N, seen->vars, tc->ctx);
		t->contexts.span_from_record = false;
	}
	/* Nothing asked for in it: a sample given no context is never a wrong one, and needs no proof. */
	bool found = rc == 0 && (tc->ctx->has_span || tc->ctx->nlabels);
	/* The frame's notes come last: the proof reads them before the context's and after. */
	uint32_t frame_notes = cs->proof->n;
	if (found && !context_frame_holds(t, tc, tstate))
		rc = -1;
	t->pyobj_batched = false;
	t->notes = NULL;
	if (rc != 0 || (found && !pyobj_notes_hold(t, cs->proof, frame_notes))) {
		/* Torn or garbage: no context this sample, never a guess. */
		t->stats.context_torn++;
		tc->ctx_moved = rc == 0;
		return NULL;
	}
	tc->ctx_moved = false;
	tc->ctx_proven = true;
	tc->ctx_gen = cs->gen;
	return tc->ctx->has_span || tc->ctx->nlabels ? tc->ctx : NULL;
}

const struct uw_context *context_of_task(struct uw_target *t, raddr_t ctx)
{
	const struct names_layout *N = ctx ? context_wanted(t) : NULL;
	if (!N)
		return NULL;
	/*
	 * A parked task's context changes only while one of its steps runs:
	 * read through the view, as a thread's, into a slot of this sample's.
	 */
	const uint8_t *p = view_read(t, ctx + 24 + pyobj_shift(t), 8, 0, NULL);
	if (!p)
		return NULL;
	raddr_t vars = load_u64(p, 0);
	struct context_state *cs = &t->contexts;
	if (cs->tasks_gen != t->sample_gen) {
		cs->tasks_gen = t->sample_gen;
		cs->ntasks = 0;
	}
	/* Tasks of one request share its context: read once a sample. */
	for (uint32_t i = 0; i < cs->ntasks; i++)
		if (cs->tasks[i].ctx == ctx && cs->tasks[i].vars == vars)
			return cs->tasks[i].found ? &cs->tasks[i].value : NULL;
	if (cs->ntasks >= CONTEXT_TASKS_KEPT) {
		t->stats.context_torn++;
		return NULL;
	}
	if (!cs->tasks && !(cs->tasks = calloc(CONTEXT_TASKS_KEPT, sizeof *cs->tasks)))
		return NULL;
	struct context_task *e = &cs->tasks[cs->ntasks];
	*e = (struct context_task){.ctx = ctx, .vars = vars};
	if (context_read_batched(t, N, vars, &e->value) != 0) {
		t->stats.context_torn++;
		return NULL;
	}
	cs->ntasks++;
	e->found = e->value.has_span || e->value.nlabels;
	return e->found ? &e->value : NULL;
}

void context_free(struct uw_target *t)
{
	free(t->contexts.tasks);
	free(t->contexts.proof);
	free(t->contexts.vars);
	t->contexts.vars = NULL;
	t->contexts.tasks = NULL;
	t->contexts.proof = NULL;
}

void context_configured(struct uw_target *t, const struct uw_options *old)
{
	struct context_state *cs = &t->contexts;
	bool same = old->context_otel == t->opts.context_otel && old->ncontext_labels == t->opts.ncontext_labels &&
	            !memcmp(old->context_labels, t->opts.context_labels, sizeof old->context_labels);
	if (same)
		return;
	/* What each var was wanted as, and every thread's context read, were of the old names. */
	cs->gen++;
	free(cs->vars);
	cs->vars = NULL;
}
