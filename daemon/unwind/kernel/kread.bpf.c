/*
 * The in-kernel reader: on a one-shot timer of a watched thread's CPU time,
 * armed when a read of it from outside tore, copy its Python frames while
 * it stands interrupted on its CPU.  Nothing it reads
 * can move under the copy, as only the thread itself pushes and pops its
 * frames; a stack that moves faster than process_vm_readv can prove it
 * (call-heavy code) is read whole here.  Only user memory of the
 * interrupted thread is read, with faults off: a page not resident fails
 * the snapshot, never the thread.  Built by clang for BPF (see Makefile),
 * loaded by kread.c.
 */
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#include "kread_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct kread_watch);
} watches SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KREAD_SLOTS);
	__type(key, __u32);
	__type(value, struct kread_slot);
} slots SEC(".maps");

/* One frame's bytes, per CPU: too many for the program's stack. */
struct frame_bytes {
	__u8 b[KREAD_FRAME_BYTES];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct frame_bytes);
} scratch SEC(".maps");

static __always_inline __u64 field_u64(const struct frame_bytes *f, __u32 off)
{
	__u64 v = 0;
	if (off <= KREAD_FRAME_BYTES - 8)
		__builtin_memcpy(&v, &f->b[off], 8);
	return v;
}

static __always_inline __u32 field_u32(const struct frame_bytes *f, __u32 off)
{
	__u32 v = 0;
	if (off <= KREAD_FRAME_BYTES - 4)
		__builtin_memcpy(&v, &f->b[off], 4);
	return v;
}

static __always_inline __u8 field_u8(const struct frame_bytes *f, __u32 off)
{
	return off < KREAD_FRAME_BYTES ? f->b[off] : 0;
}

SEC("perf_event")
int kread_tick(struct bpf_perf_event_data *ctx)
{
	__u32 key = (__u32)bpf_get_attach_cookie(ctx), zero = 0;
	const struct kread_watch *w = bpf_map_lookup_elem(&watches, &key);
	struct kread_slot *s = bpf_map_lookup_elem(&slots, &key);
	struct frame_bytes *f = bpf_map_lookup_elem(&scratch, &zero);
	/* 1: the shot counts, and the kernel disarms the timer (PERF_EVENT_IOC_REFRESH). */
	if (!w || !s || !f || !w->tstate)
		return 1;
	__u32 size = w->frame_size;
	if (size == 0 || size > KREAD_FRAME_BYTES)
		return 1;

	__sync_fetch_and_add(&s->seq, 1);
	__u32 status = KREAD_OK, n = 0;
	__u64 frame = 0;
	if (bpf_probe_read_user(&frame, sizeof frame, (const void *)(w->tstate + w->frame)) != 0)
		status = KREAD_FAULT;
	else if (w->cframe_current != KREAD_ABSENT && frame &&
	         bpf_probe_read_user(&frame, sizeof frame, (const void *)(frame + w->cframe_current)) != 0)
		status = KREAD_FAULT;
	for (__u32 i = 0; i < KREAD_MAX_FRAMES && status == KREAD_OK && frame; i++) {
		if (bpf_probe_read_user(f->b, size, (const void *)frame) != 0) {
			status = KREAD_FAULT;
			break;
		}
		struct kread_frame *out = &s->frames[i];
		out->addr = frame;
		out->code = field_u64(f, w->code) & ~w->code_tag_mask;
		out->instr = field_u64(f, w->instr);
		out->owner = field_u8(f, w->owner);
		out->entry = w->is_entry != KREAD_ABSENT ? field_u8(f, w->is_entry) : 0;
		out->tlbc = w->tlbc != KREAD_ABSENT ? field_u32(f, w->tlbc) : 0;
		frame = field_u64(f, w->back);
		n = i + 1;
	}
	if (status == KREAD_OK && frame)
		status = KREAD_DEEP;
	s->n = n;
	s->status = status;
	s->tstate = w->tstate;
	s->generation = w->generation;
	s->taken_ns = bpf_ktime_get_ns();
	__sync_fetch_and_add(&s->seq, 1);
	return 1;
}

char LICENSE[] SEC("license") = "GPL";
