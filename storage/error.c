/* The store's error messages: what was being done, and SQLite's reason when there is one. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "storage.h"

/* fmt into err's message, in at most room bytes of it. */
static void store_error_vtext(struct store_error *err, size_t room, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static void store_error_vtext(struct store_error *err, size_t room, const char *fmt, va_list ap)
{
	if (err)
		vsnprintf(err->msg, room < sizeof err->msg ? room : sizeof err->msg, fmt, ap);
}

void store_error_text(struct store_error *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	store_error_vtext(err, sizeof err->msg, fmt, ap);
	va_end(ap);
}

void store_error_set(struct store_error *err, sqlite3 *db, const char *fmt, ...)
{
	/* What was being done, then SQLite's reason: a long context (a path) must
	 * leave the reason room, as it is what the operator acts on. */
	va_list ap;
	va_start(ap, fmt);
	store_error_vtext(err, 160, fmt, ap);
	va_end(ap);
	if (!err)
		return;
	size_t n = strlen(err->msg);
	snprintf(err->msg + n, sizeof err->msg - n, ": %s", db ? sqlite3_errmsg(db) : "out of memory");
}
