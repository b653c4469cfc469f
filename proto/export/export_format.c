/*
 * What every writer of text for people shares: names made safe for a
 * terminal (a process's command line or file names must not drive it) and
 * JSON values made valid whatever bytes a target gave.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"

const char *export_str(const char *s)
{
	return s ? s : "";
}

json_t *export_json_string(const char *s)
{
	s = export_str(s);
	json_t *j = json_string(s);
	if (j)
		return j;
	/* Not UTF-8 (json_string refuses it): replace each bad byte, keep the rest. */
	char *fixed = export_utf8_copy(s);
	if (!fixed)
		return NULL;
	j = json_string(fixed);
	free(fixed);
	return j;
}

json_t *export_json_u64(uint64_t v)
{
	return json_integer((json_int_t)(v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v));
}

json_t *export_json_double(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

size_t export_width(const char *s)
{
	size_t w = 0;
	for (const unsigned char *p = (const unsigned char *)export_str(s); *p; w++) {
		size_t n = export_utf8_seq(p);
		p += n ? n : 1; /* a broken byte shows as one '?' */
	}
	return w;
}

size_t export_put(FILE *out, const char *s, size_t cols, size_t pad)
{
	size_t w = 0;
	const unsigned char *p = (const unsigned char *)export_str(s);
	while (*p && w < cols) {
		size_t n = export_utf8_seq(p);
		if (n == 0 || (n == 1 && (*p < 0x20 || *p == 0x7f)) ||
		    (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)) {
			/* Control characters, C1 controls included, and broken bytes: one '?' each, as wide as export_width counts them. */
			fputc('?', out);
			p += n ? n : 1;
		} else {
			fwrite(p, 1, n, out);
			p += n;
		}
		w++;
	}
	for (; w < pad; w++)
		fputc(' ', out);
	return w;
}
