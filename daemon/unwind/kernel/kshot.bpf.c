/*
 * The native stack of a running thread: on a timer of a watched thread's
 * CPU time, every KSHOT_PERIOD_NS of its running, copy its user registers
 * and the top of its user stack while it stands interrupted, and the few
 * innermost Python frames it is in, which tie the shot to the walk of a
 * sample (kshot.c).  Only the
 * interrupted thread's own memory is read, with faults off: a page not
 * resident ends the copy, never the thread.  Built by clang for BPF (see
 * Makefile), loaded by kshot.c.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "kregs.bpf.h"
#include "kshot_abi.h"

#define KSHOT_PAGE 4096u

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, KSHOT_SLOTS);
	__type(key, __u32);
	__type(value, struct kshot_aim);
} aims SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, KSHOT_SLOTS);
	__type(key, __u32);
	__type(value, struct kshot_slot);
} slots SEC(".maps");

static __always_inline __u64 kshot_load(__u64 at, int *fault)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof v, (const void *)at) != 0)
		*fault = 1;
	return v;
}

/* The innermost Python frames, innermost first: as many as KSHOT_ANCHORS, or to the first. */
static __always_inline __u32 kshot_anchors(struct kshot_slot *s, const struct kshot_aim *aim)
{
	int fault = 0;
	__u64 frame = kshot_load(aim->tstate + aim->frame, &fault);
	if (aim->cframe_current != KSHOT_ABSENT && frame && !fault)
		frame = kshot_load(frame + aim->cframe_current, &fault);
	__u32 n = 0;
#pragma unroll
	for (int i = 0; i < KSHOT_ANCHORS; i++) {
		if (!frame || fault)
			break;
		struct kshot_anchor *a = &s->anchors[i];
		a->addr = frame;
		a->instr = kshot_load(frame + aim->instr, &fault);
		__u8 owner = 0;
		if (bpf_probe_read_user(&owner, 1, (const void *)(frame + aim->owner)) != 0)
			fault = 1;
		a->owner = owner;
		frame = kshot_load(frame + aim->back, &fault);
		n = i + 1;
	}
	s->nanchors = fault ? 0 : n;
	return fault ? KSHOT_FAULT : KSHOT_OK;
}

/*
 * The stack from the page of sp up to the page of top (0: no end), whole
 * pages, until one will not copy or the room ends.
 */
static __always_inline __u32 kshot_copy_stack(struct knative_thread *c, __u64 sp, __u64 top)
{
	__u64 base = sp & ~(__u64)(KSHOT_PAGE - 1);
	__u32 len = 0;
	c->base = base;
	c->top = top;
#pragma unroll
	for (int page = 0; page < (int)(KNATIVE_STACK / KSHOT_PAGE); page++) {
		if (top && base + page * KSHOT_PAGE >= top)
			break;
		if (bpf_probe_read_user(c->stack + page * KSHOT_PAGE, KSHOT_PAGE,
		                        (const void *)(base + page * KSHOT_PAGE)) != 0)
			break;
		len += KSHOT_PAGE;
	}
	return len;
}

SEC("perf_event")
int kshot_tick(void *ctx)
{
	/* The context (struct bpf_perf_event_data) is not read: its registers are the interrupt's, kernel ones too. */
	__u32 key = (__u32)bpf_get_attach_cookie(ctx);
	const struct kshot_aim *aim = bpf_map_lookup_elem(&aims, &key);
	struct kshot_slot *s = bpf_map_lookup_elem(&slots, &key);
	/* 0: nothing more of the perf event's own (it has no buffer). */
	if (!aim || !s || !aim->generation)
		return 0;
	__sync_fetch_and_add(&s->seq, 1);
	/* The user registers saved as the interrupt (or the system call it came in) entered the kernel. */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	__u32 status = KSHOT_NO_REGS;
	s->copy.len = 0;
	if (regs) {
		kregs_save(s->copy.regs, regs);
		s->copy.len = kshot_copy_stack(&s->copy, s->copy.regs[KNATIVE_SP], aim->top);
		status = kshot_anchors(s, aim);
	}
	s->copy.status = KNATIVE_COPIED;
	s->status = status;
	s->generation = aim->generation;
	s->taken_ns = bpf_ktime_get_ns();
	__sync_fetch_and_add(&s->seq, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
