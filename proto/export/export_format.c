/*
 * What every writer shares: text made valid UTF-8 whatever bytes a target
 * gave, names made safe for a terminal (a process's command line or file
 * names must not drive it), JSON values, and what a stack's thread is
 * called.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "export_int.h"

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

int export_puts(FILE *out, const char *s)
{
	return fputs(s, out) == EOF ? -1 : 0;
}

size_t export_utf8_seq(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	size_t n;
	uint32_t min;
	if ((s[0] & 0xe0) == 0xc0) {
		n = 2;
		min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		n = 3;
		min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		n = 4;
		min = 0x10000;
	} else {
		return 0;
	}
	uint32_t cp = s[0] & (0x7fu >> n);
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80) /* also stops at the terminating NUL */
			return 0;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

char *export_utf8_copy(const char *s)
{
	size_t len = strlen(s);
	if (len > (SIZE_MAX - 1) / 3)
		return NULL;
	char *fixed = malloc(len * 3 + 1);
	if (!fixed)
		return NULL;
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t n = export_utf8_seq(p);
		if (n) {
			memcpy(fixed + o, p, n);
			o += n;
			p += n;
		} else {
			memcpy(fixed + o, "\xef\xbf\xbd", 3);
			o += 3;
			p++;
		}
	}
	fixed[o] = '\0';
	return fixed;
}

const char *export_stack_thread_title(const struct export_view *v, const struct export_stack *s)
{
	return s->thread ? v->thread_title[s->thread - 1] : NULL;
}
