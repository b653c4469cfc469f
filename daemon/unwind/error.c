/* Errors of the unwinder: a status and one line for a person. */
#include <stdio.h>

#include "unwind_internal.h"

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

const char *uw_status_name(enum uw_status status)
{
	switch (status) {
	case UW_OK: return "ok";
	case UW_ENOPROC: return "no such process";
	case UW_EPERM: return "permission denied";
	case UW_ENOTPYTHON: return "not a Python process";
	case UW_EVERSION: return "unsupported Python version";
	case UW_EGONE: return "process exited";
	case UW_ECORRUPT: return "inconsistent remote data";
	case UW_ENOMEM: return "out of memory";
	case UW_EIO: return "I/O error";
	}
	return "unknown error";
}
