/* The [export.otlp] settings: where and how the OTLP sender sends profiles. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "duration.h"
#include "otlp.h"

/* Settings of [export.otlp] past which a file is refused. */
#define OTLP_MAX_PAIRS 64

void otlp_config_free(struct otlp_config *oc)
{
	free(oc->endpoint);
	labels_free(&oc->headers);
	labels_free(&oc->resource);
	*oc = (struct otlp_config){.interval_s = OTLP_DEFAULT_INTERVAL_S,
	                           .timeout_s = OTLP_DEFAULT_TIMEOUT_S, .gzip = true};
}

void otlp_config_init(struct otlp_config *oc)
{
	*oc = (struct otlp_config){0};
	otlp_config_free(oc);
}

/* key = value into pairs, past OTLP_MAX_PAIRS keys refused; 0 or -1. */
static int otlp_pairs_put(struct labels *pairs, const char *key, const char *value)
{
	if (pairs->n >= OTLP_MAX_PAIRS && !labels_get(pairs, key))
		return -1;
	return labels_put(pairs, key, value);
}

/* An HTTP header name: a token (RFC 9110), not one curl or the protocol sets. */
static bool otlp_header_name_ok(const char *name, size_t len)
{
	static const char *const ours[] = {"content-type", "content-encoding", "content-length", "host"};
	if (len == 0 || len > 128)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(name[i] > ' ' && name[i] < 127 && !strchr("\"(),/:;<=>?@[\\]{}", name[i])))
			return false;
	for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
		if (strlen(ours[i]) == len && strncasecmp(ours[i], name, len) == 0)
			return false;
	return true;
}

/* "k=v,k=v" into the headers; -1 when an entry is not a header that may be sent. */
static int otlp_config_headers(struct otlp_config *oc, const char *text)
{
	for (const char *p = text; *p;) {
		size_t len = strcspn(p, ",");
		const char *eq = memchr(p, '=', len);
		const char *name = p, *name_end = eq;
		while (name < name_end && (*name == ' ' || *name == '\t'))
			name++;
		while (name_end && name_end > name && (name_end[-1] == ' ' || name_end[-1] == '\t'))
			name_end--;
		if (!eq || !otlp_header_name_ok(name, (size_t)(name_end - name)))
			return -1;
		const char *v = eq + 1, *v_end = p + len;
		while (v < v_end && (*v == ' ' || *v == '\t'))
			v++;
		while (v_end > v && (v_end[-1] == ' ' || v_end[-1] == '\t'))
			v_end--;
		char value[1024];
		if ((size_t)(v_end - v) >= sizeof value)
			return -1;
		for (const char *c = v; c < v_end; c++)
			if ((unsigned char)*c < ' ' || *c == 127)
				return -1;
		memcpy(value, v, (size_t)(v_end - v));
		value[v_end - v] = '\0';
		char key[129]; /* otlp_header_name_ok held it to 128 */
		memcpy(key, name, (size_t)(name_end - name));
		key[name_end - name] = '\0';
		if (otlp_pairs_put(&oc->headers, key, value) < 0)
			return -1;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

/* http:// or https://, a host, no whitespace, quote or fragment. */
static bool otlp_endpoint_ok(const char *url)
{
	size_t scheme = strncmp(url, "http://", 7) == 0 ? 7 : strncmp(url, "https://", 8) == 0 ? 8 : 0;
	if (!scheme || !url[scheme] || url[scheme] == '/' || strlen(url) > 2048)
		return false;
	for (const char *c = url; *c; c++)
		if ((unsigned char)*c <= ' ' || *c == 127 || *c == '"' || *c == '#')
			return false;
	return true;
}

int otlp_config_set(struct otlp_config *oc, const char *name, const char *value)
{
	if (strcmp(name, "endpoint") == 0) {
		if (!otlp_endpoint_ok(value))
			return -1;
		char *copy = strdup(value);
		if (!copy)
			return -1;
		free(oc->endpoint);
		oc->endpoint = copy;
		return 0;
	}
	if (strcmp(name, "interval") == 0)
		return duration_parse(value, 1, 3600, &oc->interval_s);
	if (strcmp(name, "timeout") == 0)
		return duration_parse(value, 0.1, 600, &oc->timeout_s);
	if (strcmp(name, "compression") == 0) {
		if (strcmp(value, "gzip") != 0 && strcmp(value, "none") != 0)
			return -1;
		oc->gzip = strcmp(value, "gzip") == 0;
		return 0;
	}
	if (strcmp(name, "headers") == 0)
		return otlp_config_headers(oc, value);
	if (strncmp(name, "resource.", 9) == 0 && name[9]) {
		const char *key = name + 9;
		if (strlen(key) > 255 || strlen(value) > 4096)
			return -1;
		return otlp_pairs_put(&oc->resource, key, value);
	}
	return -1;
}

/* Two configurations send alike (the sender starts over when they do not). */
bool otlp_config_equal(const struct otlp_config *a, const struct otlp_config *b)
{
	return (a->endpoint == NULL) == (b->endpoint == NULL) &&
	       (!a->endpoint || strcmp(a->endpoint, b->endpoint) == 0) && a->interval_s == b->interval_s &&
	       a->timeout_s == b->timeout_s && a->gzip == b->gzip &&
	       labels_equal(&a->headers, &b->headers) && labels_equal(&a->resource, &b->resource);
}

int otlp_config_copy(struct otlp_config *to, const struct otlp_config *from)
{
	otlp_config_init(to);
	to->interval_s = from->interval_s;
	to->timeout_s = from->timeout_s;
	to->gzip = from->gzip;
	if ((from->endpoint && !(to->endpoint = strdup(from->endpoint))) ||
	    labels_copy(&to->headers, &from->headers) != 0 ||
	    labels_copy(&to->resource, &from->resource) != 0) {
		otlp_config_free(to);
		return -1;
	}
	return 0;
}
