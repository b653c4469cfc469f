/*
 * libFuzzer harness for the unwinder on untrusted memory: a sound CPython
 * 3.10 runtime is built in a memory image (tests/unwind/image.c), the
 * input overwrites pieces of it (each patch: a segment, an offset, bytes;
 * pointers to other objects are bytes like any other), and the unwinder
 * samples and dumps it through its image backend.  Besides the sanitizers'
 * checks it aborts on any answer that breaks what callers rely on: thread
 * and frame counts within their bounds, every stack id walking up to the
 * root within its depth, every frame with a name.  `make fuzz` builds and
 * runs it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Every thread of a sample resolves within the bounds; abort() otherwise. */
static void fuzz_check_sample(const struct uw_target *t, const struct uw_sample *s)
{
	if (s->nthreads > UW_MAX_THREADS)
		abort();
	for (uint32_t i = 0; i < s->nthreads; i++) {
		uint32_t depth = uw_stack_depth(t, s->threads[i].stack), n = 0;
		if (depth > UW_MAX_FRAMES + 2)
			abort();
		for (uint32_t st = s->threads[i].stack; st; st = uw_stack_parent(t, st)) {
			if (++n > depth)
				abort();
			const struct uw_frame *f = uw_frame_get(t, uw_stack_frame(t, st));
			if (!f->function || strlen(f->function) > 4096 * 4)
				abort();
		}
		if (n != depth)
			abort();
		const struct uw_context *c = s->threads[i].context;
		if (c && c->nlabels > 2)
			abort();
		for (uint32_t k = 0; c && k < c->nlabels; k++)
			if (c->labels[k].index >= 2 || strnlen(c->labels[k].value, UW_CONTEXT_VALUE_LEN) >= UW_CONTEXT_VALUE_LEN)
				abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct img m;
	struct img_runtime r;
	img_build(&m, &r);
	img_context(&m, &r);
	int64_t tp_offset = img_record(&m, &r);
	/* Patches: segment (u8), offset (u16), length (u8), bytes. */
	for (size_t off = 0; off + 4 <= size;) {
		size_t seg = data[off] % m.n, at = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
		size_t len = data[off + 3];
		off += 4;
		if (len > size - off)
			len = size - off;
		uint8_t *b = (uint8_t *)m.seg[seg].bytes;
		for (size_t k = 0; k < len && at + k < m.seg[seg].len; k++)
			b[at + k] = data[off + k];
		off += len;
	}
	m.image = (struct remote_image){m.seg, m.n};
	struct uw_image_target it = {&m.image,  10,        r.runtime, CODE_TYPE,  UNICODE_TYPE,   BYTES_TYPE,
	                             FRAME_TYPE, DICT_TYPE, LONG_TYPE, TUPLE_TYPE, CONTEXTVAR_TYPE,
	                             size && data[0] & 1 ? tp_offset : 0};
	struct uw_error err;
	struct uw_target *t = uw_open_image(&it, &err);
	if (t) {
		/* The thread's request context read too: its span and two labels. */
		struct uw_options o = {.context_otel = true, .ncontext_labels = 2};
		strcpy(o.context_labels[0], "route");
		strcpy(o.context_labels[1], "tenant");
		uw_configure(t, &o);
		/* Half the inputs publish thread records (OTEP 4947) too, read in place of the ContextVars. */
		const char *keys[] = {"route", "tenant"};
		if (size && data[0] & 1)
			uw_thread_context_keys(t, keys, 2);
		struct uw_sample s = {0};
		for (int i = 0; i < 3; i++)
			if (uw_sample(t, &s, &err) == 0)
				fuzz_check_sample(t, &s);
		uw_sample_free(&s);
		struct uw_snapshot snap;
		if (uw_snapshot(t, UW_SNAP_NATIVE | UW_SNAP_GC, &snap, &err) == 0) {
			for (uint32_t i = 0; i < snap.nthreads; i++)
				if (snap.threads[i].nframes > UW_MAX_FRAMES + 2)
					abort();
			uw_snapshot_release(&snap);
		}
		uw_close(t);
	}
	img_free(&m);
	return 0;
}
