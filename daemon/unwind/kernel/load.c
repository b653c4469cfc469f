/*
 * The one loader of the unwinder's kernel programs: a skeleton opened by
 * its generated code is loaded here, and a refusal said once, in one form,
 * with what the program needs.  The mapped arrays the programs answer in
 * are mapped here too, and the timers of a thread's CPU time that run a
 * program on the thread's own CPU.
 */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "kernel.h"

/* libbpf's own lines would reach the daemon's log: a refusal is said once, below. */
static int kernel_quiet(enum libbpf_print_level level, const char *fmt, va_list args)
{
	(void)level;
	(void)fmt;
	(void)args;
	return 0;
}

int kernel_load(struct bpf_object_skeleton *skeleton, const char *what, const char *needs,
                struct uw_error *err)
{
	libbpf_set_print(kernel_quiet);
	int e = skeleton ? -bpf_object__load_skeleton(skeleton) : errno;
	if (e == 0)
		return 0;
	bool denied = e == EPERM || e == EACCES;
	return uw_fail(err, denied ? UW_EPERM : UW_EIO, "%s: the kernel refused its BPF program (%s)%s%s",
	               what, strerror(e), needs ? ": " : "", needs ? needs : "");
}

void *kernel_map_mmap(const struct bpf_map *map, size_t len, int prot)
{
	void *m = mmap(NULL, len, prot, MAP_SHARED, bpf_map__fd(map), 0);
	return m == MAP_FAILED ? NULL : m;
}

struct bpf_link *kernel_task_timer(struct bpf_program *prog, pid_t tid, uint64_t period_ns, bool disabled,
                                   uint64_t cookie, int *fd)
{
	/* The thread's own CPU time: the timer runs only while it does. */
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof attr,
		.config = PERF_COUNT_SW_TASK_CLOCK,
		.sample_period = period_ns,
		.disabled = disabled,
	};
	int event = (int)syscall(__NR_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (event < 0)
		return NULL;
	LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = cookie);
	struct bpf_link *link = bpf_program__attach_perf_event_opts(prog, event, &opts);
	if (!link) {
		close(event);
		return NULL;
	}
	if (fd)
		*fd = event;
	return link;
}
