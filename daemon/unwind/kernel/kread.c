/*
 * The in-kernel reader's owner: loads kread.bpf.c, watches the threads the
 * unwinder could not read whole from outside (their stack moved under every
 * process_vm_readv), and hands back the snapshot the kernel took of each
 * while it stood interrupted on its CPU.
 *
 * A watch is a timer on the thread's own CPU time (a task-clock perf event,
 * the BPF program attached, its slot as the cookie), disarmed.  When a read
 * of the thread tears, the timer is armed for one shot, KREAD_SHOT_NS of
 * the thread's running later (the least the kernel allows): the copy is of
 * the moment the sample was taken, give or take that, and a watched thread
 * costs nothing between tears, nor the rest of the machine ever.  The
 * slots are a BPF array mapped read-only into this process: taking a
 * snapshot is a copy under a sequence count, no system call.
 */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kread_abi.h"
#include "kread.skel.h"
#include "kernel.h"

_Static_assert(UW_KREADER_DESCRIPTORS >= 8u + 2u * KREAD_SLOTS,
               "a watch holds its perf event and its link");

struct uw_kreader {
	struct kread_bpf *skel;
	int watches_fd;
	const uint8_t *slots; /* the slots map, mapped read-only */
	size_t slots_len, slot_stride;
	uint64_t generation;
	struct bpf_link *links[KREAD_SLOTS];
	int fds[KREAD_SLOTS];              /* each link's perf event, to arm it */
	uint64_t generations[KREAD_SLOTS]; /* of each slot's watch */
	uint32_t uids[KREAD_SLOTS];        /* whose share each slot's watch takes */
	struct kread_frame copy[KREAD_MAX_FRAMES]; /* the last snapshot taken, for the caller */
	/* The look at which threads ran (kstill.c): its own program, which a kernel may refuse alone. */
	struct kstill *still;
	struct uw_error still_err;
	/* The copy of a process as it falls quiet (kcopy.c): its own program, which a kernel may refuse alone. */
	struct kcopy *copier;
	struct uw_error copier_err;
};

/* libbpf's own messages would go to stderr: what failed is told through uw_error. */
struct uw_kreader *uw_kreader_open(struct uw_error *err)
{
	struct uw_kreader *kr = calloc(1, sizeof *kr);
	if (!kr) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	kr->skel = kread_bpf__open();
	if (kernel_load(kr->skel ? kr->skel->skeleton : NULL, "in-kernel reader",
	                "it needs CAP_BPF and CAP_PERFMON, or root", err) != 0) {
		uw_kreader_close(kr);
		return NULL;
	}
	kr->watches_fd = bpf_map__fd(kr->skel->maps.watches);
	/* An mmapable array's values lie at a stride of their size rounded up to 8. */
	kr->slot_stride = (sizeof(struct kread_slot) + 7) & ~(size_t)7;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	kr->slots_len = (kr->slot_stride * KREAD_SLOTS + page - 1) / page * page;
	void *m = kernel_map_mmap(kr->skel->maps.slots, kr->slots_len, PROT_READ);
	if (!m) {
		uw_fail(err, UW_EIO, "in-kernel reader: mapping its snapshots: %s", strerror(errno));
		kr->slots_len = 0;
		uw_kreader_close(kr);
		return NULL;
	}
	kr->slots = m;
	kr->still = kstill_open(&kr->still_err);
	/* Its copies are taken only on the look's word: without the look, no copier. */
	if (kr->still)
		kr->copier = kcopy_open(&kr->copier_err);
	return kr;
}

void uw_kreader_close(struct uw_kreader *kr)
{
	if (!kr)
		return;
	for (unsigned i = 0; i < KREAD_SLOTS; i++)
		if (kr->links[i])
			bpf_link__destroy(kr->links[i]);
	if (kr->slots_len)
		munmap((void *)kr->slots, kr->slots_len);
	if (kr->skel)
		kread_bpf__destroy(kr->skel);
	kcopy_close(kr->copier);
	kstill_close(kr->still);
	free(kr);
}

/* Whether uid may take one more slot (KREAD_USER_SLOTS). */
static bool kread_share_room(const struct uw_kreader *kr, uint32_t uid)
{
	if (uid == 0)
		return true;
	unsigned its = 0, users = 0;
	for (unsigned i = 0; i < KREAD_SLOTS; i++) {
		if (!kr->links[i] || kr->uids[i] == 0)
			continue;
		users++;
		its += kr->uids[i] == uid;
	}
	return its < KREAD_USER_SLOTS && users < KREAD_SLOTS - KREAD_USER_SLOTS;
}

int kread_watch(struct uw_kreader *kr, pid_t tid, raddr_t tstate, const struct py_layout *L, uint32_t uid)
{
	/* frame.size covers every field the program reads of a frame. */
	if (tid <= 0 || L->frame_model != FRAME_MODEL_INTERP || L->frame.size > KREAD_FRAME_BYTES ||
	    !kread_share_room(kr, uid))
		return -1;
	int slot = -1;
	for (int i = 0; i < KREAD_SLOTS && slot < 0; i++)
		if (!kr->links[i])
			slot = i;
	if (slot < 0)
		return -1;
	bool cframe = L->tstate.cframe != LAYOUT_ABSENT;
	struct kread_watch watch = {
		.tstate = tstate,
		.code_tag_mask = L->frame.code_tag_mask,
		.generation = ++kr->generation,
		.frame = (uint16_t)(cframe ? L->tstate.cframe : L->tstate.frame),
		.cframe_current = (uint16_t)(cframe ? L->tstate.cframe_current_frame : KREAD_ABSENT),
		.back = (uint16_t)L->frame.back,
		.code = (uint16_t)L->frame.code,
		.instr = (uint16_t)L->frame.instr_ptr,
		.owner = (uint16_t)L->frame.owner,
		.is_entry = (uint16_t)(L->frame.is_entry == LAYOUT_ABSENT ? KREAD_ABSENT : L->frame.is_entry),
		.frame_size = (uint16_t)L->frame.size,
		.tlbc = (uint16_t)(L->frame.tlbc_index == LAYOUT_ABSENT ? KREAD_ABSENT : L->frame.tlbc_index),
	};
	uint32_t key = (uint32_t)slot;
	if (bpf_map_update_elem(kr->watches_fd, &key, &watch, BPF_ANY) != 0)
		return -1;
	/* Disarmed until a tear. */
	int fd;
	struct bpf_link *link = kernel_task_timer(kr->skel->progs.kread_tick, tid, KREAD_SHOT_NS, true, (uint64_t)slot, &fd);
	if (!link)
		return -1;
	kr->links[slot] = link;
	kr->fds[slot] = fd;
	kr->generations[slot] = watch.generation;
	kr->uids[slot] = uid;
	return slot;
}

void kread_unwatch(struct uw_kreader *kr, int slot)
{
	if (slot < 0 || slot >= KREAD_SLOTS || !kr->links[slot])
		return;
	/* The link owns the perf event: destroying it stops the timer. */
	bpf_link__destroy(kr->links[slot]);
	kr->links[slot] = NULL;
	kr->generations[slot] = 0;
	kr->fds[slot] = -1;
	struct kread_watch none = {0};
	uint32_t key = (uint32_t)slot;
	bpf_map_update_elem(kr->watches_fd, &key, &none, BPF_ANY);
}

uint64_t kread_arm(struct uw_kreader *kr, int slot)
{
	if (slot < 0 || slot >= KREAD_SLOTS || !kr->links[slot])
		return 0;
	uint64_t now = clock_mono_ns();
	/* One overflow, then the kernel disarms it again (the program returns 1 to count it). */
	if (ioctl(kr->fds[slot], PERF_EVENT_IOC_REFRESH, 1) != 0)
		return 0;
	return now;
}

uint64_t kread_shot_at(const struct uw_kreader *kr, int slot)
{
	if (slot < 0 || slot >= KREAD_SLOTS || !kr->links[slot])
		return 0;
	const struct kread_slot *s = (const void *)(kr->slots + (size_t)slot * kr->slot_stride);
	return __atomic_load_n(&s->taken_ns, __ATOMIC_ACQUIRE);
}

const struct kread_frame *kread_take(struct uw_kreader *kr, int slot, raddr_t tstate,
                                     uint64_t since_ns, uint32_t *n)
{
	if (slot < 0 || slot >= KREAD_SLOTS || !kr->links[slot])
		return NULL;
	const struct kread_slot *s = (const void *)(kr->slots + (size_t)slot * kr->slot_stride);
	uint64_t seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
	if (seq & 1)
		return NULL; /* being written: the thread is on its CPU in the program right now */
	uint32_t count = s->n;
	uint64_t taken = s->taken_ns;
	if (s->status != KREAD_OK || s->generation != kr->generations[slot] || s->tstate != tstate ||
	    count == 0 || count > KREAD_MAX_FRAMES)
		return NULL;
	/* Only the shot the tear armed is of the sample's moment. */
	if (taken < since_ns)
		return NULL;
	memcpy(kr->copy, s->frames, count * sizeof *kr->copy);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != seq)
		return NULL;
	*n = count;
	return kr->copy;
}

struct kstill *kread_still(const struct uw_kreader *kr)
{
	return kr ? kr->still : NULL;
}

struct kcopy *kread_copier(const struct uw_kreader *kr)
{
	return kr ? kr->copier : NULL;
}

void uw_kreader_look(struct uw_kreader *kr)
{
	if (kr)
		kstill_look(kr->still);
}

const char *uw_kreader_look_refused(const struct uw_kreader *kr)
{
	return kr && !kr->still ? kr->still_err.msg : NULL;
}

const char *uw_kreader_copy_refused(const struct uw_kreader *kr)
{
	if (!kr || kr->copier)
		return NULL;
	return kr->still ? kr->copier_err.msg : kr->still_err.msg;
}

struct uw_kreader_state uw_kreader_state(const struct uw_kreader *kr, const char *without)
{
	if (!kr)
		return (struct uw_kreader_state){without, "off", "off"};
	const char *look = uw_kreader_look_refused(kr), *copy = uw_kreader_copy_refused(kr);
	return (struct uw_kreader_state){"on", look ? look : "on", copy ? copy : "on"};
}

void uw_kreader_copy_off(struct uw_kreader *kr)
{
	if (!kr || !kr->copier)
		return;
	kcopy_close(kr->copier);
	kr->copier = NULL;
	uw_fail(&kr->copier_err, UW_EPERM, "off");
}
