/* The hand-built runtime of image.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

/* A zeroed object of len bytes at a fresh address; its bytes in *out. */
raddr_t img_alloc(struct img *m, size_t len, uint8_t **out)
{
	if (m->n == IMG_MAX)
		abort();
	raddr_t addr = m->next ? m->next : IMG_BASE;
	/* Gaps between objects: a read past one is a read of nothing. */
	m->next = addr + ((len + 63) & ~(size_t)63) + 4096;
	uint8_t *b = calloc(1, len);
	if (!b)
		abort();
	m->mem[m->n] = b;
	m->seg[m->n++] = (struct remote_segment){addr, b, len};
	*out = b;
	return addr;
}

void img_put64(uint8_t *b, uint32_t off, uint64_t v)
{
	memcpy(b + off, &v, sizeof v);
}

void img_put32(uint8_t *b, uint32_t off, uint32_t v)
{
	memcpy(b + off, &v, sizeof v);
}

/* A compact ASCII str. */
static raddr_t img_str(struct img *m, const char *s)
{
	const struct py_layout *L = m->L;
	uint8_t *b;
	size_t n = strlen(s);
	raddr_t a = img_alloc(m, L->unicode.ascii_size + n + 1, &b);
	img_put64(b, L->object.ob_type, UNICODE_TYPE);
	img_put64(b, L->unicode.length, n);
	/* interned:2, kind:3 = 1, compact:1, ascii:1 */
	img_put32(b, L->unicode.state, (1u << 2) | (1u << 5) | (1u << 6));
	memcpy(b + L->unicode.ascii_size, s, n);
	return a;
}

static raddr_t img_bytes(struct img *m, size_t n)
{
	uint8_t *b;
	raddr_t a = img_alloc(m, m->L->bytes.ob_sval + n + 1, &b);
	img_put64(b, m->L->object.ob_type, BYTES_TYPE);
	img_put64(b, m->L->bytes.ob_size, n);
	return a;
}

static raddr_t img_code(struct img *m, const char *name, uint8_t **out)
{
	const struct py_layout *L = m->L;
	uint8_t *b;
	raddr_t a = img_alloc(m, L->code.size, &b);
	img_put64(b, L->object.ob_type, CODE_TYPE);
	img_put64(b, L->code.name, img_str(m, name));
	img_put64(b, L->code.filename, img_str(m, "app.py"));
	img_put64(b, L->code.linetable, img_bytes(m, 0));
	img_put32(b, L->code.firstlineno, 10);
	if (out)
		*out = b;
	return a;
}

static raddr_t img_frame(struct img *m, raddr_t back, raddr_t code, uint8_t **out)
{
	const struct py_layout *L = m->L;
	uint8_t *b;
	raddr_t a = img_alloc(m, L->frame.size, &b);
	img_put64(b, L->object.ob_type, FRAME_TYPE);
	img_put64(b, L->frame.back, back);
	img_put64(b, L->frame.code, code);
	img_put32(b, L->frame.lineno, 12);
	if (out)
		*out = b;
	return a;
}


/* A 3.10 runtime: one interpreter, one thread, root -> mid -> leaf. */
void img_build(struct img *m, struct img_runtime *r)
{
	memset(m, 0, sizeof *m);
	memset(r, 0, sizeof *r);
	m->L = layout_for_minor(10);
	if (!m->L)
		abort();
	const struct py_layout *L = m->L;
	uint8_t *rt;
	r->runtime = img_alloc(m, L->runtime.size, &rt);
	r->interp = img_alloc(m, L->interp.size, &r->interp_b);
	/* Room for the context and its version too (after the fields the walk reads). */
	r->tstate = img_alloc(m, L->tstate.size + 16 > 256 ? L->tstate.size + 16 : 256, &r->tstate_b);
	img_put64(rt, L->runtime.interpreters_head, r->interp);
	img_put64(r->interp_b, L->interp.threads_head, r->tstate);
	img_put64(r->tstate_b, L->tstate.interp, r->interp);
	img_put64(r->tstate_b, L->tstate.thread_id, IMG_THREAD_ID);
	const char *names[3] = {"root", "mid", "leaf"};
	raddr_t back = 0;
	for (int i = 0; i < 3; i++) {
		raddr_t code = img_code(m, names[i], i == 2 ? &r->code_b : NULL);
		back = r->frames[i] = img_frame(m, back, code, &r->frame_b[i]);
	}
	img_put64(r->tstate_b, L->tstate.frame, r->frames[2]);
	m->image = (struct remote_image){m->seg, m->n};
}

/* A type object whose tp_name is name (the HAMT's node types are told by it). */
static raddr_t img_type(struct img *m, const char *name, int64_t dictoffset)
{
	uint8_t *b, *s;
	raddr_t a = img_alloc(m, 400, &b);
	/* Room past the name: a reader may take a few bytes more of it at once. */
	raddr_t str = img_alloc(m, strlen(name) + 32, &s);
	memcpy(s, name, strlen(name));
	img_put64(b, 24, str);
	img_put64(b, 32, 48);                 /* tp_basicsize */
	img_put64(b, 288, (uint64_t)dictoffset); /* tp_dictoffset */
	return a;
}

/* In 30-bit digits, as 3.10 keeps them. */
raddr_t img_int(struct img *m, uint64_t v, const uint8_t *be16)
{
	uint32_t digits[5] = {0};
	unsigned n = 0;
	if (be16) {
		for (unsigned bit = 0; bit < 128; bit++)
			if (be16[15 - bit / 8] >> (bit % 8) & 1) {
				digits[bit / 30] |= 1u << (bit % 30);
				n = bit / 30 + 1;
			}
	} else {
		for (; v; v >>= 30)
			digits[n++] = (uint32_t)(v & ((1u << 30) - 1));
	}
	uint8_t *b;
	raddr_t a = img_alloc(m, 24 + 4 * 5, &b);
	img_put64(b, 8, LONG_TYPE);
	img_put64(b, 16, n);
	for (unsigned i = 0; i < n; i++)
		img_put32(b, 24 + 4 * i, digits[i]);
	return a;
}

/* A 3.10 dict of one str key: its keys object of 8 slots, one entry. */
static raddr_t img_dict1(struct img *m, const char *key, raddr_t value)
{
	uint8_t *d, *k;
	raddr_t dict = img_alloc(m, 48, &d), keys = img_alloc(m, 40 + 8 + 24, &k);
	img_put64(d, 8, DICT_TYPE);
	img_put64(d, 32, keys);
	img_put64(k, 8, 8);  /* dk_size */
	img_put64(k, 32, 1); /* dk_nentries */
	img_put64(k, 48 + 8, img_str(m, key));
	img_put64(k, 48 + 16, value);
	return dict;
}

static void img_hex(const char *hex, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		out[i] = (uint8_t)v;
	}
}

void img_context(struct img *m, struct img_runtime *r)
{
	const struct names_layout *N = layout_names_for_minor(10);
	uint8_t trace[16], span[8], *b;
	img_hex(IMG_TRACE_ID, trace, 16);
	img_hex(IMG_SPAN_ID, span, 8);
	uint64_t span_v = 0;
	for (int i = 0; i < 8; i++)
		span_v = span_v << 8 | span[i];
	/* SpanContext: a tuple of the trace id and the span id first. */
	r->span_context = img_alloc(m, 24 + 8 * 3, &r->span_context_b);
	img_put64(r->span_context_b, 8, TUPLE_TYPE);
	img_put64(r->span_context_b, 16, 3);
	img_put64(r->span_context_b, 24, img_int(m, 0, trace));
	img_put64(r->span_context_b, 32, img_int(m, span_v, NULL));
	img_put64(r->span_context_b, 40, img_int(m, 0, NULL));
	/* The span: an instance whose dict (at its type's dictoffset) holds _context. */
	raddr_t span_type = img_type(m, "_Span", 16), obj = img_alloc(m, 32, &b);
	img_put64(b, 8, span_type);
	img_put64(b, 16, img_dict1(m, "_context", r->span_context));
	raddr_t otel = img_dict1(m, "current-span-5e8f", obj);
	/* The variables, and their values. */
	const char *names[3] = {"route", "tenant", "current_context"};
	raddr_t values[3] = {img_str(m, IMG_ROUTE), img_int(m, IMG_TENANT, NULL), otel};
	raddr_t node_type = img_type(m, "hamt_bitmap_node", 0);
	r->hamt_node = img_alloc(m, 32 + 8 * 6, &r->hamt_node_b);
	img_put64(r->hamt_node_b, 8, node_type);
	img_put64(r->hamt_node_b, 16, 6);
	img_put32(r->hamt_node_b, 24, 0x7);
	for (int i = 0; i < 3; i++) {
		raddr_t var = img_alloc(m, 64, &b);
		img_put64(b, 8, CONTEXTVAR_TYPE);
		img_put64(b, 16, img_str(m, names[i]));
		img_put64(r->hamt_node_b, 32 + 16 * (uint32_t)i, var);
		img_put64(r->hamt_node_b, 40 + 16 * (uint32_t)i, values[i]);
	}
	raddr_t hamt = img_alloc(m, 40, &b);
	img_put64(b, 16, r->hamt_node);
	r->context = img_alloc(m, 48, &r->context_b);
	img_put64(r->context_b, 24, hamt);
	img_put64(r->tstate_b, N->ts_context, r->context);
	img_put64(r->tstate_b, N->ts_context + 8, 1);
	m->image = (struct remote_image){m->seg, m->n};
}

int64_t img_record(struct img *m, struct img_runtime *r)
{
	static const char attrs[] = "\x00\x08" IMG_RECORD_ROUTE "\x01\x01" IMG_RECORD_TENANT;
	r->record = img_alloc(m, 28 + sizeof attrs - 1, &r->record_b);
	img_hex(IMG_RECORD_TRACE_ID, r->record_b, 16);
	img_hex(IMG_RECORD_SPAN_ID, r->record_b + 16, 8);
	r->record_b[24] = 1; /* valid */
	r->record_b[25] = 1; /* sampled */
	r->record_b[26] = (uint8_t)(sizeof attrs - 1);
	memcpy(r->record_b + 28, attrs, sizeof attrs - 1);
	r->tls_slot = img_alloc(m, 8, &r->tls_slot_b);
	img_put64(r->tls_slot_b, 0, r->record);
	m->image = (struct remote_image){m->seg, m->n};
	/* The thread pointer is the thread's thread_id (pthread_self()). */
	return (int64_t)(r->tls_slot - IMG_THREAD_ID);
}

void img_free(struct img *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->mem[i]);
}
