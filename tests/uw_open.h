/*
 * For the suite that drives the unwinder directly (tests/unwind): open a
 * target as a test does, waiting while it is still
 * starting (no runtime mapped yet).  Header-only, as the shared support
 * (helpers.c) is built without the unwinder's headers.
 */
#ifndef PYPROFD_TEST_UW_OPEN_H
#define PYPROFD_TEST_UW_OPEN_H

#include <criterion/criterion.h>
#include <unistd.h>

#include "unwind.h"

static inline struct uw_target *test_uw_open(pid_t pid)
{
	struct uw_error err = {0};
	struct uw_target *t = NULL;
	for (int i = 0; i < 400; i++) {
		t = uw_open(pid, &err);
		if (t || err.status != UW_ENOTPYTHON)
			break;
		usleep(25 * 1000);
	}
	cr_assert_not_null(t, "uw_open(%d): %s", (int)pid, err.msg);
	return t;
}

#endif
