/*
 * The kernel's copy of waiting threads' native stacks: the owner of
 * knative.bpf.c.
 *
 * A thread that waits (in a system call, or preempted) has its user
 * registers saved by the kernel, and its stack holds still until it runs
 * again.  The program copies both for the threads asked, one system call
 * for all of them, and says of each whether it stayed off its CPU
 * throughout (its count of switches away unchanged, with the thread off its
 * CPU before the first load).  A look afterwards that loads the same count
 * proves, by the argument of kstill.c, that nothing of the thread ran
 * between the copy and the look: whatever was read of it in between (its
 * Python frames) is of the same moment as the copy.  No thread is stopped,
 * signalled or traced.  A kernel without bpf_copy_from_user_task (Linux
 * 5.18) or the task kfuncs refuses the program, and native stacks are off.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "knative.skel.h"
#include "kernel.h"

struct knative {
	struct knative_bpf *skel;
	int prog_fd;
	struct knative_thread *threads; /* the map, mapped */
	size_t threads_len;
};

struct knative *knative_open(struct uw_error *err)
{
	struct knative *kn = calloc(1, sizeof *kn);
	if (!kn) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	kn->skel = knative_bpf__open();
	if (kernel_load(kn->skel ? kn->skel->skeleton : NULL, "the copy of waiting threads' native stacks",
	                "it needs Linux 6.7 and CAP_BPF with CAP_PERFMON", err) != 0) {
		knative_close(kn);
		return NULL;
	}
	kn->prog_fd = bpf_program__fd(kn->skel->progs.knative_run);
	_Static_assert(sizeof(struct knative_thread) % 8 == 0, "the map's values lie at their own size");
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (sizeof(struct knative_thread) * KNATIVE_THREADS + page - 1) / page * page;
	kn->threads = kernel_map_mmap(kn->skel->maps.threads, len, PROT_READ | PROT_WRITE);
	if (!kn->threads) {
		uw_fail(err, UW_EIO, "mapping the copies of native stacks: %s", strerror(errno));
		knative_close(kn);
		return NULL;
	}
	kn->threads_len = len;
	return kn;
}

void knative_close(struct knative *kn)
{
	if (!kn)
		return;
	if (kn->threads_len)
		munmap(kn->threads, kn->threads_len);
	if (kn->skel)
		knative_bpf__destroy(kn->skel);
	free(kn);
}

const struct knative_thread *knative_run(struct knative *kn, enum knative_mode mode,
                                         const struct knative_ask *asks, uint32_t n)
{
	if (!kn || n > KNATIVE_THREADS)
		return NULL;
	/* A look answers for the threads of the last copy. */
	for (uint32_t i = 0; asks && i < n; i++) {
		struct knative_thread *e = &kn->threads[i];
		e->pid = asks[i].pid;
		e->tid = asks[i].tid;
		e->start_ns = asks[i].start_ns;
		e->top = asks[i].top;
	}
	kn->skel->bss->knative_nthreads = n;
	kn->skel->bss->knative_mode = mode;
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	if (n && bpf_prog_test_run_opts(kn->prog_fd, &opts) != 0)
		return NULL;
	/* The program ran to its end before the call returned: plain loads see what it wrote. */
	return kn->threads;
}
