/*
 * The kernel's task iterator and references, and its iterator of numbers,
 * as the BPF programs that find tasks declare them (kstill.bpf.c,
 * kcopy.bpf.c, knative.bpf.c).  Each program declares the fields of struct
 * task_struct it reads itself.
 */
#ifndef PYPROFD_UNWIND_KTASKS_BPF_H
#define PYPROFD_UNWIND_KTASKS_BPF_H

#include <linux/types.h>

struct task_struct;

struct bpf_iter_task {
	__u64 opaque[3];
} __attribute__((aligned(8)));

/* The kernel's TASK_RUNNING: runnable, on a CPU or queued for one. */
#define KTASK_RUNNING 0

/* The kernel's task iterator: every thread of one process (BPF_TASK_ITER_PROC_THREADS). */
#define KTASK_ITER_PROC_THREADS 2

struct bpf_iter_num {
	__u64 opaque[1];
} __attribute__((aligned(8)));

extern struct task_struct *bpf_task_from_pid(__s32 pid) __ksym;
extern int bpf_iter_num_new(struct bpf_iter_num *it, int start, int end) __ksym;
extern int *bpf_iter_num_next(struct bpf_iter_num *it) __ksym;
extern void bpf_iter_num_destroy(struct bpf_iter_num *it) __ksym;
extern struct task_struct *bpf_task_acquire(struct task_struct *p) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;
extern int bpf_iter_task_new(struct bpf_iter_task *it, struct task_struct *task, unsigned int flags) __ksym;
extern struct task_struct *bpf_iter_task_next(struct bpf_iter_task *it) __ksym;
extern void bpf_iter_task_destroy(struct bpf_iter_task *it) __ksym;

#endif
