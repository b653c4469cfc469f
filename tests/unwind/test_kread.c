/*
 * The in-kernel reader's slots as users share them (daemon/unwind/kernel/
 * kread.c): every target of a daemon watches its threads through the one
 * reader, so a user other than root watches at most KREAD_USER_SLOTS
 * threads, all such users together leave as many to root, and root's
 * watches take what is left.  Real watches: a perf event and a BPF link
 * each, on the threads of a real CPython.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"
#include "kernel.h"
#include "kread_abi.h"
#include "pythons.h"
#include "unwind_internal.h"
#include "uw_open.h"

TestSuite(kread, .init = helpers_init, .fini = helpers_fini);

/* Threads of the target: sleepers, watched without ever being shot. */
#define KREAD_TEST_THREADS 40

static const char sleepers_program[] = "import threading, time\n"
                                       "for _ in range(40):\n"
                                       "    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n"
                                       "time.sleep(3600)\n";

/* The thread ids of process pid, as this /proc names them. */
static size_t kread_test_tids(pid_t pid, pid_t *tids, size_t max)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return 0;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(dir)) && n < max)
		if (e->d_name[0] != '.')
			tids[n++] = (pid_t)atoi(e->d_name);
	closedir(dir);
	return n;
}

/* Watches for uid of the threads tids[from..to) (wrapping), their slots added to slots[]: how many took. */
static unsigned kread_test_watch(struct uw_kreader *kr, const struct uw_target *t, const pid_t *tids,
                                 size_t ntids, size_t from, size_t to, uint32_t uid, int *slots,
                                 size_t *nslots)
{
	unsigned took = 0;
	for (size_t i = from; i < to; i++) {
		int slot = kread_watch(kr, tids[i % ntids], 0x100000 + 0x1000 * (raddr_t)i, &t->layout, uid);
		if (slot >= 0) {
			slots[(*nslots)++] = slot;
			took++;
		}
	}
	return took;
}

Test(kread, users_share_the_slots_and_leave_roots, .timeout = 120)
{
	cr_assert_eq(geteuid(), 0, "the in-kernel reader loads as root");
	struct uw_error err = {0};
	struct uw_kreader *kr = uw_kreader_open(&err);
	cr_assert_not_null(kr, "the in-kernel reader: %s", err.msg);
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = NULL;
	for (size_t i = 0; i < n && !py; i++)
		if (pys[i].minor >= 11 && pys[i].minor <= 14)
			py = &pys[i];
	cr_assert_not_null(py, "no CPython 3.11 to 3.14 found");
	struct test_target target;
	const char *args[] = {"-I", "-c", sleepers_program, NULL};
	test_target_start_python(&target, py, args);
	pid_t tids[KREAD_TEST_THREADS + 8];
	size_t ntids = 0;
	for (int i = 0; i < 400 && ntids <= KREAD_TEST_THREADS; i++) {
		ntids = kread_test_tids(target.pid, tids, sizeof tids / sizeof *tids);
		if (ntids <= KREAD_TEST_THREADS)
			usleep(50 * 1000);
	}
	cr_assert_gt(ntids, KREAD_TEST_THREADS, "the target started %zu threads", ntids);
	struct uw_target *t = test_uw_open(target.pid);
	int slots[KREAD_SLOTS];
	size_t nslots = 0;

	/* One user asks for every thread: it gets its share. */
	unsigned took = kread_test_watch(kr, t, tids, ntids, 0, ntids, 65534, slots, &nslots);
	cr_assert_eq(took, KREAD_USER_SLOTS, "one user watches %u threads", took);
	/* Other users fill the users' part, and leave root's. */
	for (uint32_t uid = 1000; uid < 1008; uid++)
		took += kread_test_watch(kr, t, tids, ntids, 0, KREAD_USER_SLOTS, uid, slots, &nslots);
	cr_assert_eq(took, KREAD_SLOTS - KREAD_USER_SLOTS, "users watch %u of %d slots", took, KREAD_SLOTS);
	/* Root takes what is left, and no more. */
	took = kread_test_watch(kr, t, tids, ntids, 0, KREAD_SLOTS, 0, slots, &nslots);
	cr_assert_eq(took, KREAD_USER_SLOTS, "root watches %u threads past the users", took);

	/* Given back, a user's share is its own again. */
	for (size_t i = 0; i < nslots; i++)
		kread_unwatch(kr, slots[i]);
	nslots = 0;
	took = kread_test_watch(kr, t, tids, ntids, 0, ntids, 65534, slots, &nslots);
	cr_assert_eq(took, KREAD_USER_SLOTS, "after the others let go, a user watches %u threads", took);
	for (size_t i = 0; i < nslots; i++)
		kread_unwatch(kr, slots[i]);
	uw_close(t);
	uw_kreader_close(kr);
	test_target_kill(&target);
}
