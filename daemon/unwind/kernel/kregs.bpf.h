/*
 * A thread's user registers as the kernel saved them on entry, as the BPF
 * programs that copy native stacks read them (knative.bpf.c, kshot.bpf.c):
 * the x86-64 registers a CFI walk starts from.
 */
#ifndef PYPROFD_UNWIND_KREGS_BPF_H
#define PYPROFD_UNWIND_KREGS_BPF_H

#include <linux/types.h>

#include "knative_abi.h"

struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx;
	unsigned long ip, sp;
} __attribute__((preserve_access_index));

static __always_inline void kregs_save(__u64 *out, const struct pt_regs *regs)
{
	out[KNATIVE_IP] = regs->ip;
	out[KNATIVE_SP] = regs->sp;
	out[KNATIVE_BP] = regs->bp;
	out[KNATIVE_BX] = regs->bx;
	out[KNATIVE_R12] = regs->r12;
	out[KNATIVE_R13] = regs->r13;
	out[KNATIVE_R14] = regs->r14;
	out[KNATIVE_R15] = regs->r15;
}

#endif
