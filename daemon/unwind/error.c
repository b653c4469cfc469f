/* Errors of the unwinder: a status and one line for a person. */
#include <stdarg.h>
#include <stdio.h>

#include "error.h"

int uw_fail(struct uw_error *err, enum uw_status status, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		err->status = status;
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
	}
	return -1;
}
