/* Reading the target's memory with process_vm_readv, errors mapped to meaning. */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "unwind_internal.h"

int remote_read(struct remote *r, raddr_t addr, void *buf, size_t len, struct uw_error *err)
{
	if (len == 0)
		return 0;
	/* Remote pointers are untrusted: catch the obviously impossible before the syscall. */
	if (addr < 4096 || addr + len < addr || addr + len > 0x0000800000000000ULL)
		return uw_fail(err, UW_ECORRUPT, "bad remote address 0x%llx",
		               (unsigned long long)addr);

	struct iovec local = {.iov_base = buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	r->calls++;
	ssize_t n = process_vm_readv(r->pid, &local, 1, &remote, 1, 0);
	if (n == (ssize_t)len) {
		r->bytes += (uint64_t)n;
		return 0;
	}
	if (n >= 0)
		return uw_fail(err, UW_ECORRUPT, "short read of %zu bytes at 0x%llx", len,
		               (unsigned long long)addr);
	switch (errno) {
	case ESRCH:
		return uw_fail(err, UW_EGONE, "process %d exited", (int)r->pid);
	case EPERM:
	case EACCES:
		return uw_fail(err, UW_EPERM, "not permitted to read the memory of process %d",
		               (int)r->pid);
	case ENOMEM:
		return uw_fail(err, UW_ENOMEM, "out of memory reading process %d", (int)r->pid);
	default:
		return uw_fail(err, UW_ECORRUPT, "cannot read %zu bytes at 0x%llx: %s", len,
		               (unsigned long long)addr, strerror(errno));
	}
}
