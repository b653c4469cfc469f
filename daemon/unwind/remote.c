/* Reading the target's memory with process_vm_readv, errors mapped to meaning. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/uio.h>

#include "unwind_internal.h"

/* Remote pointers are untrusted: catch the obviously impossible before the syscall. */
static bool remote_plausible(raddr_t addr, size_t len)
{
	return addr >= 4096 && addr + len >= addr && addr + len <= 0x0000800000000000ULL;
}

bool remote_alive(const struct remote *r)
{
	return r->image || proc_life(r->pid) != PROC_GONE;
}

/*
 * Whether a read that came back torn is worth another try: the process is
 * not yet reaped.  One kill(2), not remote_alive's file of /proc, which costs
 * ten times as much and is asked about once every few samples of a busy
 * thread; a zombie passes, and its next read fails as gone (no memory left).
 */
bool remote_may_live(const struct remote *r)
{
	return r->image || kill(r->pid, 0) == 0 || errno != ESRCH;
}

/* Bytes of the image from addr on, at most len of them, contiguous in one segment; 0 if none. */
static size_t remote_image_copy(const struct remote_image *img, raddr_t addr, uint8_t *buf,
                                size_t len)
{
	for (size_t i = 0; i < img->n; i++) {
		const struct remote_segment *s = &img->segments[i];
		if (addr < s->addr || addr - s->addr >= s->len)
			continue;
		size_t n = s->len - (size_t)(addr - s->addr);
		if (n > len)
			n = len;
		memcpy(buf, s->bytes + (addr - s->addr), n);
		return n;
	}
	return 0;
}

uint64_t remote_pages(raddr_t addr, size_t len)
{
	return len ? ((addr + len - 1) >> 12) - (addr >> 12) + 1 : 0;
}

/* process_vm_readv, its time counted: what reading costs shows beside what the rest of a sample does. */
static ssize_t remote_readv(struct remote *r, const struct iovec *local, unsigned long nlocal,
                            const struct iovec *remote, unsigned long nremote)
{
	uint64_t start = clock_mono_ns();
	ssize_t n = process_vm_readv(r->pid, local, nlocal, remote, nremote, 0);
	int saved = errno;
	r->read_ns += clock_mono_ns() - start;
	errno = saved;
	return n;
}

int remote_read(struct remote *r, raddr_t addr, void *buf, size_t len, struct uw_error *err)
{
	if (len == 0)
		return 0;
	if (!remote_plausible(addr, len))
		return uw_fail(err, UW_ECORRUPT, "bad remote address 0x%llx",
		               (unsigned long long)addr);
	if (r->image) {
		r->calls++;
		size_t got = remote_image_copy(r->image, addr, buf, len);
		r->bytes += got;
		return got == len ? 0
		                  : uw_fail(err, UW_ECORRUPT, "short read of %zu bytes at 0x%llx", len,
		                            (unsigned long long)addr);
	}

	struct iovec local = {.iov_base = buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	r->calls++;
	r->pages += remote_pages(addr, len);
	ssize_t n = remote_readv(r, &local, 1, &remote, 1);
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

/* The kernel's limit on iovecs per call (UIO_MAXIOV). */
#define BATCH_IOV_MAX 1024

int remote_read_batch(struct remote *r, struct remote_range *ranges, uint32_t n,
                      struct uw_error *err)
{
	struct iovec local[BATCH_IOV_MAX], remote[BATCH_IOV_MAX];
	uint32_t i = 0;

	for (uint32_t k = 0; k < n; k++)
		ranges[k].got = 0;
	if (r->image) {
		/* As the kernel would: each range as far as the memory goes, in one call. */
		r->calls++;
		for (uint32_t k = 0; k < n; k++)
			if (ranges[k].len && !ranges[k].skip && remote_plausible(ranges[k].addr, ranges[k].len))
				r->bytes += ranges[k].got = (uint32_t)remote_image_copy(
					r->image, ranges[k].addr, ranges[k].buf, ranges[k].len);
		return 0;
	}
	while (i < n) {
		/* Gather the next run of plausible ranges; skip the impossible ones. */
		uint32_t idx[BATCH_IOV_MAX], count = 0;
		while (i < n && count < BATCH_IOV_MAX) {
			if (ranges[i].len > 0 && !ranges[i].skip &&
			    remote_plausible(ranges[i].addr, ranges[i].len)) {
				local[count] = (struct iovec){ranges[i].buf, ranges[i].len};
				r->pages += remote_pages(ranges[i].addr, ranges[i].len);
				remote[count] = (struct iovec){(void *)(uintptr_t)ranges[i].addr, ranges[i].len};
				idx[count++] = i;
			}
			i++;
		}
		uint32_t done = 0;
		while (done < count) {
			r->calls++;
			ssize_t got = remote_readv(r, local + done, count - done, remote + done, count - done);
			if (got < 0) {
				if (errno == ESRCH)
					return uw_fail(err, UW_EGONE, "process %d exited", (int)r->pid);
				if (errno == EPERM || errno == EACCES)
					return uw_fail(err, UW_EPERM,
					               "not permitted to read the memory of process %d",
					               (int)r->pid);
				if (errno == ENOMEM)
					return uw_fail(err, UW_ENOMEM, "out of memory reading process %d",
					               (int)r->pid);
				/* The first range faulted: it stays empty, go on after it. */
				done++;
				continue;
			}
			r->bytes += (uint64_t)got;
			/* The kernel stops at the first range that faults; credit what arrived. */
			size_t left = (size_t)got;
			while (done < count && left >= remote[done].iov_len) {
				ranges[idx[done]].got = (uint32_t)remote[done].iov_len;
				left -= remote[done].iov_len;
				done++;
			}
			if (done < count) {
				ranges[idx[done]].got = (uint32_t)left;
				done++;
			}
		}
	}
	return 0;
}

int remote_write(struct remote *r, raddr_t addr, const void *buf, size_t len, struct uw_error *err)
{
	if (r->image)
		return uw_fail(err, UW_EPERM, "a memory image is not written");
	if (!remote_plausible(addr, len))
		return uw_fail(err, UW_ECORRUPT, "bad remote address 0x%llx", (unsigned long long)addr);
	struct iovec local = {.iov_base = (void *)buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	r->writes++;
	ssize_t n = process_vm_writev(r->pid, &local, 1, &remote, 1, 0);
	/* After the write, failed or not: a copy begun before may hold what it overwrote. */
	r->wrote_ns = clock_mono_ns();
	if (n == (ssize_t)len)
		return 0;
	if (n < 0 && errno == ESRCH)
		return uw_fail(err, UW_EGONE, "process %d exited", (int)r->pid);
	if (n < 0 && (errno == EPERM || errno == EACCES))
		return uw_fail(err, UW_EPERM, "not permitted to write the memory of process %d", (int)r->pid);
	return uw_fail(err, UW_ECORRUPT, "cannot write %zu bytes at 0x%llx", len, (unsigned long long)addr);
}
