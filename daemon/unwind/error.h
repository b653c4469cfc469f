/*
 * The unwinder's one way to fail (error.c): a status and one line for a
 * person.  Internal to daemon/unwind.
 */
#ifndef PYPROFD_UNWIND_ERROR_H
#define PYPROFD_UNWIND_ERROR_H

#include "unwind.h"

/* Set *err (if not NULL) and return -1, so failures read `return uw_fail(...)`. */
int uw_fail(struct uw_error *err, enum uw_status status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
