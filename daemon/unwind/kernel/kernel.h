/*
 * The unwinder's kernel programs (this folder), as the rest of the
 * unwinder uses them: each a BPF program (NAME.bpf.c, built into a libbpf
 * skeleton) with the C file of the same name that loads and drives it, and
 * what the two share (NAME_abi.h).  Internal to daemon/unwind.
 */
#ifndef PYPROFD_UNWIND_KERNEL_H
#define PYPROFD_UNWIND_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "clock.h"
#include "error.h"
#include "knative_abi.h"
#include "kshot_abi.h"
#include "kstill_abi.h"
#include "layout.h"
#include "prove.h"
#include "remote_range.h"
#include "unwind.h"

/* load.c: the one loader of the programs below. */
struct bpf_map;
struct bpf_object_skeleton;
/*
 * A program's skeleton, opened (NULL when that failed, errno saying why),
 * loaded into the kernel with libbpf's own messages quiet.  0, or -1 and
 * *err: `what` the kernel refused and `needs` what it takes (both shown).
 */
int kernel_load(struct bpf_object_skeleton *skeleton, const char *what, const char *needs,
                struct uw_error *err);
/* A BPF array made with BPF_F_MMAPABLE, len bytes of it mapped with prot (MAP_SHARED), or NULL. */
void *kernel_map_mmap(const struct bpf_map *map, size_t len, int prot);
struct bpf_link;
struct bpf_program;
/*
 * A timer of thread tid's own CPU time (a task-clock perf event) that runs
 * prog with cookie on the thread's CPU every period_ns of its running;
 * disabled until enabled (PERF_EVENT_IOC_REFRESH) when asked.  Its link,
 * which owns the event (*fd when fd is not NULL, to enable it), or NULL.
 */
struct bpf_link *kernel_task_timer(struct bpf_program *prog, pid_t tid, uint64_t period_ns, bool disabled,
                                   uint64_t cookie, int *fd);

/* kstill.c: the kernel's word on which threads ran (see kstill.c) */
struct kstill;
/* NULL and *err when the kernel refuses its program. */
struct kstill *kstill_open(struct uw_error *err);
void kstill_close(struct kstill *ks);
/* Look at process pid (as /proc names it) from the next look on: its number in the look, or -1. */
int kstill_watch(struct kstill *ks, pid_t pid);
void kstill_unwatch(struct kstill *ks, int proc);
/* Look at every watched process now; false when the kernel would not run the program. */
bool kstill_look(struct kstill *ks);
/* Looks taken so far: the number of the last. */
uint64_t kstill_looks(const struct kstill *ks);
/*
 * The tasks the last look saw of a watched process, in the kernel's order:
 * *ntasks of them, KSTILL_TASKS + 1 when more than KSTILL_TASKS (the first
 * KSTILL_TASKS told), and when the process began.  NULL when it was not
 * seen (gone, not looked at yet).
 */
const struct kstill_task *kstill_seen(const struct kstill *ks, int proc, uint32_t *ntasks,
                                     uint64_t *start_ns);

/* kcopy.c: the kernel's copy of a process as it falls quiet (see kcopy.c) */
struct kcopy;
struct kcopy *kcopy_open(struct uw_error *err);
void kcopy_close(struct kcopy *kc);
/* A slot for a process, or -1 (none free, or no copier). */
int kcopy_claim(struct kcopy *kc);
void kcopy_release(struct kcopy *kc, int slot);
/*
 * Watch the process's tasks as this sample's look lists them (n of them):
 * the ones that end are let go.  The tasks that could not be watched now
 * (no room, or the kernel refused), which leave the process uncopied.
 */
uint32_t kcopy_follow(struct kcopy *kc, int slot, const struct kstill_task *tasks, uint32_t n);
/*
 * Copy these ranges (a sample's batch plan), each as far as its reads used
 * (used_lens: the room to grow is left to a read), from now on: the plan's
 * generation, 0 when it is not copied.  owners: the task id (as /proc names
 * it) of the thread whose stack each holds, or 0.
 */
uint64_t kcopy_plan(struct kcopy *kc, int slot, const struct remote_range *ranges, const uint32_t *used_lens,
                    const pid_t *owners, uint32_t n);
/* The times a switch away left the slot's process quiet, so far (a copy may be made at each). */
uint64_t kcopy_quiet(const struct kcopy *kc, int slot);
/*
 * Copies of the slot's process are made from from_ns on (CLOCK_MONOTONIC),
 * none before, and hold the stack of a thread only if it was switched away
 * since since_ns (a sample's look).
 */
void kcopy_window(struct kcopy *kc, int slot, uint64_t since_ns, uint64_t from_ns);
/*
 * Fill the ranges (the plan of that generation, their buffers given) from
 * the slot's copy, each as far as the plan copied it (got), when it was taken after after_ns and the look (tasks, n)
 * proves nothing of the process ran since: true then, else false and the
 * ranges are to be read.
 */
bool kcopy_take(struct kcopy *kc, int slot, uint64_t generation, uint64_t after_ns,
                const struct kstill_task *tasks, uint32_t n, struct remote_range *ranges, uint32_t nranges);

/* knative.c: the native stacks of waiting threads (see knative.c) */
struct knative;
/* NULL and *err when the kernel refuses its program. */
struct knative *knative_open(struct uw_error *err);
void knative_close(struct knative *kn);
/*
 * A thread to copy or look at: its process, its id, when it began (0: any)
 * and where its stack's copy may end (0: KNATIVE_STACK from its stack
 * pointer's page).
 */
struct knative_ask {
	pid_t pid, tid;
	uint64_t start_ns, top;
};
/*
 * Copy (KNATIVE_COPY) the n threads asked, at most KNATIVE_THREADS, or
 * look at (KNATIVE_LOOK, asks NULL) the n first of the last copy, which
 * stays: their answers in the order asked, valid until the next copy;
 * NULL when the kernel would not run the program.
 */
const struct knative_thread *knative_run(struct knative *kn, enum knative_mode mode,
                                         const struct knative_ask *asks, uint32_t n);

/* kshot.c: the shots of running threads' native stacks (see kshot.c) */
struct kshot;
/* NULL and *err when the kernel refuses its program. */
struct kshot *kshot_open(struct uw_error *err);
void kshot_close(struct kshot *ks);
/*
 * Watch thread tid (as /proc names it), its innermost Python frames found
 * as aim says (its generation is set here): its slot and *generation,
 * which every call below takes, or -1 (no slot free, the kernel refused).
 * The thread is shot every KSHOT_PERIOD_NS of its running from now on.  A
 * watch whose shots were not taken for a second may be given to another
 * thread: the calls below then find the generation gone and do nothing.
 */
int kshot_watch(struct kshot *ks, pid_t tid, struct kshot_aim aim, uint64_t *generation);
void kshot_unwatch(struct kshot *ks, int slot, uint64_t generation);
/* Where the thread's stack copies end from its next shot on (struct kshot_aim's top); false when the watch is gone. */
bool kshot_aim_top(struct kshot *ks, int slot, uint64_t generation, uint64_t top);
/* Whether the watch is still the caller's. */
bool kshot_watching(const struct kshot *ks, int slot, uint64_t generation);
/* The last shot when whole (KSHOT_OK) and taken after after_ns, NULL otherwise; valid until the next take. */
const struct kshot_slot *kshot_take(struct kshot *ks, int slot, uint64_t generation, uint64_t after_ns);

/* kread.c: the in-kernel reader (struct uw_kreader, unwind.h) */
/* The reader's copier of processes as they fall quiet, NULL when the kernel refused it. */
struct kcopy *kread_copier(const struct uw_kreader *kr);
/* The reader's look at which threads ran, NULL when the kernel refused it. */
struct kstill *kread_still(const struct uw_kreader *kr);
struct kread_frame;
/*
 * The slots are shared by every target of the reader: a user other than
 * root holds at most KREAD_USER_SLOTS of them, and all such users together
 * leave KREAD_USER_SLOTS to root, so that one user's threads (a process
 * whose reads always tear) cannot take the reader from the rest.
 */
#define KREAD_USER_SLOTS (KREAD_SLOTS / 4)
/*
 * Watch a thread (tid as /proc names it) of a 3.11+ layout for uid (whose
 * share of the slots it takes): its slot, or -1 (no slot free in that
 * share, a layout the program cannot walk, the kernel refused).
 */
int kread_watch(struct uw_kreader *kr, pid_t tid, raddr_t tstate, const struct py_layout *L, uint32_t uid);
void kread_unwatch(struct uw_kreader *kr, int slot);
/* Arm the watched thread's one shot: the time armed, or 0 when it could not be. */
uint64_t kread_arm(struct uw_kreader *kr, int slot);
/* When the watched thread's last shot came (unwind_now_ns), 0 never: it ran then. */
uint64_t kread_shot_at(const struct uw_kreader *kr, int slot);
/*
 * The snapshot the kernel took of a watched thread, innermost first, when
 * whole, of that thread state and taken at since_ns or after: *n frames,
 * valid until the next call.  NULL when there is none (yet).
 */
const struct kread_frame *kread_take(struct uw_kreader *kr, int slot, raddr_t tstate,
                                     uint64_t since_ns, uint32_t *n);
/* How long a sample waits for the shot after its last read of a thread tore. */
#define KREAD_WAIT_NS 100000u
/*
 * Least time between two shots of a thread.  Arming one costs the kernel an
 * interrupt of the thread's CPU, and the shot another: tens of µs of the
 * thread's time in a virtual machine (23 µs of the daemon's for the arm,
 * about 40 µs of the thread's for both, measured).  Sampling at 1 kHz arms
 * every sample; back to back, one in many, and the samples between take
 * what a read proves.
 */
#define KREAD_ARM_GAP_NS 500000u
/* How long a watched thread goes without being busy (see struct thread_cache) before the watch ends. */
#define KREAD_QUIET_NS 5000000000u

#endif
