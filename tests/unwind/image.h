/*
 * A CPython 3.10 runtime built by hand in a memory image, at the layout's
 * offsets, for the unwinder to read through its image backend: the tests
 * break one link of it at a time, the remote-memory fuzzer many.
 */
#ifndef PYPROFD_TESTS_IMAGE_H
#define PYPROFD_TESTS_IMAGE_H

#include "unwind_internal.h"

#define IMG_MAX 64
#define IMG_BASE 0x10000000ull
#define CODE_TYPE 0x7f0000001000ull
#define UNICODE_TYPE 0x7f0000002000ull
#define BYTES_TYPE 0x7f0000003000ull
#define FRAME_TYPE 0x7f0000004000ull
#define DICT_TYPE 0x7f0000005000ull
#define LONG_TYPE 0x7f0000006000ull
#define TUPLE_TYPE 0x7f0000007000ull
#define CONTEXTVAR_TYPE 0x7f0000008000ull
/* The request context img_context builds: what a reader must find. */
#define IMG_TRACE_ID "0102030405060708090a0b0c0d0e0f10"
#define IMG_SPAN_ID "1112131415161718"
#define IMG_ROUTE "/checkout"
#define IMG_TENANT 42
/* The one thread's thread_id: unmapped, as a thread pointer is to these reads. */
#define IMG_THREAD_ID 4242u
/* The thread record img_record builds (OTEP 4947): its ids and its two attributes, keys 0 and 1. */
#define IMG_RECORD_TRACE_ID "a1a2a3a4a5a6a7a8a9aaabacadaeafb0"
#define IMG_RECORD_SPAN_ID "b1b2b3b4b5b6b7b8"
#define IMG_RECORD_ROUTE "/records"
#define IMG_RECORD_TENANT "7"

struct img {
	struct remote_segment seg[IMG_MAX];
	uint8_t *mem[IMG_MAX];
	size_t n;
	raddr_t next;
	struct remote_image image;
	const struct py_layout *L;
};

/* The pieces of a runtime a test may break. */
struct img_runtime {
	raddr_t runtime, interp, tstate;
	uint8_t *interp_b, *tstate_b;
	raddr_t frames[3];
	uint8_t *frame_b[3];
	uint8_t *code_b;
	/* img_context's: the context, its HAMT's one node, the span's SpanContext tuple. */
	raddr_t context, hamt_node, span_context;
	uint8_t *context_b, *hamt_node_b, *span_context_b;
	/* img_record's: the thread's TLS slot and the record it points to. */
	raddr_t tls_slot, record;
	uint8_t *tls_slot_b, *record_b;
};

/* A zeroed object of len bytes at a fresh address; its bytes in *out. */
raddr_t img_alloc(struct img *m, size_t len, uint8_t **out);
void img_put64(uint8_t *b, uint32_t off, uint64_t v);
void img_put32(uint8_t *b, uint32_t off, uint32_t v);
/* A 3.10 int: v, or the 128 bits of be16 (big-endian) when given. */
raddr_t img_int(struct img *m, uint64_t v, const uint8_t *be16);
/* One interpreter, one thread, root -> mid -> leaf. */
void img_build(struct img *m, struct img_runtime *r);
/*
 * The thread's contextvars context: ContextVars route (a str), tenant (an
 * int) and OpenTelemetry's current_context (a dict holding a span whose
 * _context is the ids above), in one bitmap node of its HAMT.
 */
void img_context(struct img *m, struct img_runtime *r);
/*
 * The thread's OTEP 4947 record, its ids and attributes above, pointed to
 * by a thread-local slot: returns the slot's offset from the thread's
 * thread_id, for uw_image_target.otel_tp_offset.
 */
int64_t img_record(struct img *m, struct img_runtime *r);
void img_free(struct img *m);

#endif
