/*
 * What reading another process's memory costs the reader, by how many
 * pages one process_vm_readv pins: the unit every design choice of the
 * unwinder trades in (a page against a call, a read against a proof).
 *
 * Ten child processes each hold 16 pages and sleep, waking every 20 ms to
 * touch them (as a service's threads do between samples).  Each page
 * count is timed twice, in this process's CPU time:
 *
 *   back to back  the ten children read again and again, everything hot;
 *   10 ms apart   one round of the ten every 10 ms, as the daemon's
 *                 wakeups find them at 100 Hz: the reader's and the
 *                 children's kernel data cold (page tables, VMAs, the
 *                 pages themselves).
 *
 * The first read of a round pays for waking the reader's own side too:
 * it is printed apart.  Prints figures; passes or fails on nothing.
 *
 *   make bench-readv            (BENCH_ARGS: rounds per figure, 300)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILDREN 10
#define CHILD_PAGES 16
#define PAGE 4096
/* What one sample reads of a page: a thread state's fields, a frame. */
#define READ_BYTES 272

static double cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void child_loop(volatile unsigned char *mem)
{
	const struct timespec nap = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
	for (;;) {
		for (size_t i = 0; i < CHILD_PAGES * PAGE; i += 64)
			mem[i]++;
		nanosleep(&nap, NULL);
	}
}

/* One read of `pages` pages of a child, READ_BYTES from each: 0, or why not (an errno value). */
static int read_child(pid_t pid, unsigned char *remote, unsigned pages, unsigned char *buf)
{
	struct iovec local[CHILD_PAGES], far[CHILD_PAGES];
	for (unsigned i = 0; i < pages; i++) {
		local[i] = (struct iovec){buf + (size_t)i * READ_BYTES, READ_BYTES};
		far[i] = (struct iovec){remote + (size_t)i * PAGE + 128, READ_BYTES};
	}
	ssize_t got = process_vm_readv(pid, local, pages, far, pages, 0);
	if (got < 0)
		return errno;
	return got == (ssize_t)(pages * READ_BYTES) ? 0 : EIO; /* short: a child gone mid-read */
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300;
	if (rounds < 10) {
		fprintf(stderr, "usage: readv_cost [rounds per figure, 10 or more]\n");
		return 2;
	}
	/* Mapped before the fork: the children's copies sit at the same address. */
	unsigned char *mem = mmap(NULL, CHILD_PAGES * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
	                          -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(mem, 1, CHILD_PAGES * PAGE);
	pid_t kids[CHILDREN];
	for (int k = 0; k < CHILDREN; k++) {
		kids[k] = fork();
		if (kids[k] < 0) {
			perror("fork");
			for (int j = 0; j < k; j++)
				kill(kids[j], SIGKILL);
			return 1;
		}
		if (kids[k] == 0)
			child_loop(mem);
	}
	usleep(100 * 1000);

	static unsigned char buf[CHILD_PAGES * READ_BYTES];
	const unsigned counts[] = {1, 2, 4, 8, 12, 16};
	const struct timespec gap = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
	int rc = 0;
	printf("process_vm_readv of %d bytes from each of N pages of one of %d sleeping processes,\n"
	       "CPU time of the reader per call (us):\n", READ_BYTES, CHILDREN);
	printf("%6s %14s %16s %16s\n", "pages", "back to back", "10 ms apart", "first of a round");
	for (size_t c = 0; c < sizeof counts / sizeof *counts && rc == 0; c++) {
		unsigned pages = counts[c];
		double hot = 0, cold = 0, first = 0;
		for (int r = 0; r < rounds && rc == 0; r++)
			for (int k = 0; k < CHILDREN; k++) {
				double t0 = cpu_ns();
				if ((rc = read_child(kids[k], mem, pages, buf)) != 0)
					break;
				hot += cpu_ns() - t0;
			}
		for (int r = 0; r < rounds && rc == 0; r++) {
			nanosleep(&gap, NULL);
			for (int k = 0; k < CHILDREN; k++) {
				double t0 = cpu_ns();
				if ((rc = read_child(kids[k], mem, pages, buf)) != 0)
					break;
				double spent = cpu_ns() - t0;
				if (k == 0)
					first += spent;
				else
					cold += spent;
			}
		}
		if (rc != 0) {
			fprintf(stderr, "readv_cost: process_vm_readv: %s (root, or ptrace rights over the children)\n",
			        strerror(rc));
			break;
		}
		printf("%6u %14.2f %16.2f %16.2f\n", pages, hot / 1e3 / (rounds * CHILDREN),
		       cold / 1e3 / (rounds * (CHILDREN - 1)), first / 1e3 / rounds);
	}
	for (int k = 0; k < CHILDREN; k++)
		kill(kids[k], SIGKILL);
	while (wait(NULL) > 0 || errno == EINTR)
		;
	return rc == 0 ? 0 : 1;
}
