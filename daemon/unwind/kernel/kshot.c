/*
 * The shots of running threads' native stacks: the owner of kshot.bpf.c.
 *
 * A thread on its CPU has no saved registers worth copying from outside
 * and a stack that moves under any read: it is shot instead, as it runs.
 * A watch is a timer on the thread's own CPU time (a task-clock perf
 * event, the program attached, its slot as the cookie) that fires every
 * KSHOT_PERIOD_NS of the thread's running: the program copies the
 * registers the interrupt saved, the top of the stack, and the innermost
 * Python frames (addresses and instructions).  A sample takes the newest
 * shot only when those frames are the ones its walk read: the C frames then
 * lie under the Python frames shown.  No system call a sample: arming a
 * timer of a thread on another CPU waits for that CPU (an interrupt between
 * processors), some 50 us in a virtual machine.  Nothing is stopped; the
 * thread pays the copy, a few microseconds a shot, and a thread that waits
 * pays nothing.
 *
 * Slots are shared by every target.  A watch whose shots were not wanted
 * for KSHOT_IDLE_NS gives its slot to a thread that needs one; its owner
 * finds out by the generation, which every call takes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kshot.skel.h"
#include "kernel.h"

/* A watch whose shots were not wanted for this long may be given to another thread. */
#define KSHOT_IDLE_NS 1000000000ull

_Static_assert(UW_NATIVE_SHOT_DESCRIPTORS >= 8u + 2u * KSHOT_SLOTS, "a watch holds its perf event and its link");

struct kshot {
	struct kshot_bpf *skel;
	int aims_fd;
	const uint8_t *slots; /* the slots map, mapped read-only */
	size_t slots_len, slot_stride;
	uint64_t generation;
	struct bpf_link *links[KSHOT_SLOTS];
	uint64_t generations[KSHOT_SLOTS];
	uint64_t wanted_ns[KSHOT_SLOTS]; /* last taken from or watched: who may lose the slot */
	struct kshot_aim aims[KSHOT_SLOTS]; /* as the program has them */
	struct kshot_slot taken;        /* the last shot taken, for the caller */
};

struct kshot *kshot_open(struct uw_error *err)
{
	struct kshot *ks = calloc(1, sizeof *ks);
	if (!ks) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	ks->skel = kshot_bpf__open();
	if (kernel_load(ks->skel ? ks->skel->skeleton : NULL, "the shot of running threads' native stacks",
	                "it needs CAP_BPF and CAP_PERFMON, or root", err) != 0) {
		kshot_close(ks);
		return NULL;
	}
	ks->aims_fd = bpf_map__fd(ks->skel->maps.aims);
	ks->slot_stride = (sizeof(struct kshot_slot) + 7) & ~(size_t)7;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (ks->slot_stride * KSHOT_SLOTS + page - 1) / page * page;
	void *m = kernel_map_mmap(ks->skel->maps.slots, len, PROT_READ);
	if (!m) {
		uw_fail(err, UW_EIO, "mapping the shots of native stacks: %s", strerror(errno));
		kshot_close(ks);
		return NULL;
	}
	ks->slots = m;
	ks->slots_len = len;
	return ks;
}

static void kshot_drop(struct kshot *ks, int slot)
{
	bpf_link__destroy(ks->links[slot]); /* and its perf event: the timer stops */
	ks->links[slot] = NULL;
	ks->generations[slot] = 0;
	struct kshot_aim none = {0};
	uint32_t key = (uint32_t)slot;
	bpf_map_update_elem(ks->aims_fd, &key, &none, BPF_ANY);
}

void kshot_close(struct kshot *ks)
{
	if (!ks)
		return;
	for (int i = 0; i < KSHOT_SLOTS; i++)
		if (ks->links[i])
			bpf_link__destroy(ks->links[i]);
	if (ks->slots_len)
		munmap((void *)ks->slots, ks->slots_len);
	if (ks->skel)
		kshot_bpf__destroy(ks->skel);
	free(ks);
}

/* A free slot, or the one wanted longest ago when that was past KSHOT_IDLE_NS: -1 when none. */
static int kshot_room(struct kshot *ks, uint64_t now)
{
	int oldest = -1;
	for (int i = 0; i < KSHOT_SLOTS; i++) {
		if (!ks->links[i])
			return i;
		if (oldest < 0 || ks->wanted_ns[i] < ks->wanted_ns[oldest])
			oldest = i;
	}
	if (oldest < 0 || now - ks->wanted_ns[oldest] < KSHOT_IDLE_NS)
		return -1;
	kshot_drop(ks, oldest);
	return oldest;
}

int kshot_watch(struct kshot *ks, pid_t tid, struct kshot_aim aim, uint64_t *generation)
{
	uint64_t now = clock_mono_ns();
	int slot = ks && tid > 0 ? kshot_room(ks, now) : -1;
	if (slot < 0)
		return -1;
	aim.generation = ++ks->generation;
	uint32_t key = (uint32_t)slot;
	if (bpf_map_update_elem(ks->aims_fd, &key, &aim, BPF_ANY) != 0)
		return -1;
	struct bpf_link *link =
		kernel_task_timer(ks->skel->progs.kshot_tick, tid, KSHOT_PERIOD_NS, false, (uint64_t)slot, NULL);
	if (!link)
		return -1;
	ks->links[slot] = link;
	ks->generations[slot] = aim.generation;
	ks->wanted_ns[slot] = now;
	ks->aims[slot] = aim;
	*generation = aim.generation;
	return slot;
}

bool kshot_watching(const struct kshot *ks, int slot, uint64_t generation)
{
	return ks && slot >= 0 && slot < KSHOT_SLOTS && ks->links[slot] && generation &&
	       ks->generations[slot] == generation;
}

void kshot_unwatch(struct kshot *ks, int slot, uint64_t generation)
{
	if (kshot_watching(ks, slot, generation))
		kshot_drop(ks, slot);
}

static const struct kshot_slot *kshot_slot_at(const struct kshot *ks, int slot)
{
	return (const void *)(ks->slots + (size_t)slot * ks->slot_stride);
}

bool kshot_aim_top(struct kshot *ks, int slot, uint64_t generation, uint64_t top)
{
	if (!kshot_watching(ks, slot, generation))
		return false;
	if (ks->aims[slot].top == top)
		return true;
	/* Kept only once the program has it: a refused update is tried again at the next walk. */
	struct kshot_aim aim = ks->aims[slot];
	aim.top = top;
	uint32_t key = (uint32_t)slot;
	if (bpf_map_update_elem(ks->aims_fd, &key, &aim, BPF_ANY) != 0)
		return false;
	ks->aims[slot] = aim;
	return true;
}

const struct kshot_slot *kshot_take(struct kshot *ks, int slot, uint64_t generation, uint64_t after_ns)
{
	if (!kshot_watching(ks, slot, generation))
		return NULL;
	ks->wanted_ns[slot] = clock_mono_ns();
	const struct kshot_slot *s = kshot_slot_at(ks, slot);
	uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
	if (seq & 1)
		return NULL; /* being written: the thread is in the program right now */
	struct kshot_slot *out = &ks->taken;
	/* All but the stack, then as much of it as was copied. */
	memcpy(out, s, offsetof(struct kshot_slot, copy.stack));
	uint32_t len = out->copy.len <= KNATIVE_STACK ? out->copy.len : 0;
	memcpy(out->copy.stack, s->copy.stack, len);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != seq)
		return NULL;
	out->copy.len = len;
	if (out->status != KSHOT_OK || out->generation != generation || out->taken_ns <= after_ns)
		return NULL;
	return out;
}
