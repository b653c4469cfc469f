/* CPython str payloads (UCS1/UCS2/UCS4) to UTF-8. */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

static size_t utf8_put(char *out, uint32_t cp)
{
	if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
		cp = 0xFFFD; /* lone surrogates (e.g. surrogateescape'd file names) are not UTF-8 */
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* The i-th character of a str's data, kind bytes wide (1, 2 or 4). */
static uint32_t pystr_code_point(const uint8_t *data, size_t i, unsigned kind)
{
	if (kind == 1)
		return data[i];
	if (kind == 2) {
		uint16_t v;
		memcpy(&v, data + 2 * i, 2);
		return v;
	}
	uint32_t v;
	memcpy(&v, data + 4 * i, 4);
	return v;
}

char *pystr_to_utf8(const uint8_t *data, size_t count, unsigned kind)
{
	char *out = malloc(count * 4 + 1);
	if (!out)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < count; i++) {
		uint32_t cp = pystr_code_point(data, i, kind);
		n += utf8_put(out + n, cp);
	}
	out[n] = '\0';
	return out;
}

void pystr_to_utf8_into(const uint8_t *data, size_t count, unsigned kind, char *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < count; i++) {
		uint32_t cp = pystr_code_point(data, i, kind);
		char one[4];
		size_t len = utf8_put(one, cp);
		/* Cut at a whole character, the NUL kept. */
		if (n + len >= cap)
			break;
		memcpy(out + n, one, len);
		n += len;
	}
	out[n] = '\0';
}
