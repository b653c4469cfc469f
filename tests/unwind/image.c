/* The hand-built runtime of image.h. */
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
	r->tstate = img_alloc(m, L->tstate.size + 16, &r->tstate_b);
	img_put64(rt, L->runtime.interpreters_head, r->interp);
	img_put64(r->interp_b, L->interp.threads_head, r->tstate);
	img_put64(r->tstate_b, L->tstate.interp, r->interp);
	img_put64(r->tstate_b, L->tstate.thread_id, 4242);
	const char *names[3] = {"root", "mid", "leaf"};
	raddr_t back = 0;
	for (int i = 0; i < 3; i++) {
		raddr_t code = img_code(m, names[i], i == 2 ? &r->code_b : NULL);
		back = r->frames[i] = img_frame(m, back, code, &r->frame_b[i]);
	}
	img_put64(r->tstate_b, L->tstate.frame, r->frames[2]);
	m->image = (struct remote_image){m->seg, m->n};
}

void img_free(struct img *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->mem[i]);
}
