/* Output helpers shared by the commands: JSON values, the Target object, terminal-safe text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "export.h"

const char *format_str(const char *s)
{
	return s ? s : "";
}

json_t *format_json_string(const char *s)
{
	s = format_str(s);
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

json_t *format_json_u64(uint64_t v)
{
	return json_integer((json_int_t)(v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v));
}

json_t *format_json_double(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

json_t *format_json_target(const Pyprofd__Target *t)
{
	json_t *labels = json_object();
	for (size_t i = 0; labels && i < t->n_labels; i++) {
		json_t *key = format_json_string(t->labels[i]->key);
		json_t *value = format_json_string(t->labels[i]->value);
		/* json_object_set_new takes value even when it fails. */
		int rc = key ? json_object_set_new(labels, json_string_value(key), value) : -1;
		if (!key)
			json_decref(value);
		json_decref(key);
		if (rc != 0) {
			json_decref(labels);
			labels = NULL;
		}
	}
	/* json_pack takes ownership of every "o" argument, even when it fails. */
	return json_pack("{s:i, s:o, s:I, s:o, s:o, s:I, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
	                 "pid", (int)t->pid, "start_time", format_json_u64(t->start_time), "uid",
	                 (json_int_t)t->uid, "state", format_json_string(t->state), "python_version",
	                 format_json_string(t->python_version), "rate_hz", (json_int_t)t->rate_hz,
	                 "mode", vocab_wire_mode_name(t->mode), "samples", format_json_u64(t->samples),
	                 "errors", format_json_u64(t->errors), "labels", labels, "executable",
	                 format_json_string(t->executable), "command_line",
	                 format_json_string(t->command_line), "attached_at",
	                 format_json_double(t->attached_at), "duration_s",
	                 format_json_double(t->duration_s), "sessions",
	                 format_json_u64(t->sessions));
}

int format_json_print(json_t *doc)
{
	int rc = -1;
	if (doc && json_dumpf(doc, stdout, JSON_COMPACT) == 0 && putchar('\n') != EOF)
		rc = 0;
	json_decref(doc);
	return rc;
}

size_t format_width(const char *s)
{
	size_t w = 0;
	for (const unsigned char *p = (const unsigned char *)format_str(s); *p; w++) {
		size_t n = export_utf8_seq(p);
		p += n ? n : 1; /* a broken byte shows as one '?' */
	}
	return w;
}

size_t format_put(FILE *out, const char *s, size_t cols, size_t pad)
{
	size_t w = 0;
	const unsigned char *p = (const unsigned char *)format_str(s);
	while (*p && w < cols) {
		size_t n = export_utf8_seq(p);
		if (n == 0 || (n == 1 && (*p < 0x20 || *p == 0x7f)) ||
		    (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)) {
			/* control characters, C1 controls included, and broken bytes */
			fputc('?', out);
			p++;
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
