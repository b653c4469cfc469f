/* The checks a request passes before the daemon acts on it or a client sends it. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

/* Protobuf's wire types (encoding.md): groups (3, 4) are not in proto3 and not taken. */
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LENGTH = 2, WIRE_FIXED32 = 5 };

/* Nesting deeper than any request message has, so a hostile one cannot make the walk deep. */
#define CHECK_DEPTH_MAX 16
/* Fields of one message whose repetitions are counted for the name ("labels[3]"). */
#define CHECK_COUNTED_FIELDS 64
#define CHECK_PATH_MAX 256

size_t check_utf8_prefix(const uint8_t *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		uint8_t b = s[i];
		size_t n;
		/* The second byte's range depends on the first (Unicode, table 3-7): no overlong forms, surrogates, or past U+10FFFF. */
		uint8_t lo = 0x80, hi = 0xbf;
		if (b < 0x80) {
			i++;
			continue;
		} else if (b >= 0xc2 && b <= 0xdf) {
			n = 2;
		} else if (b >= 0xe0 && b <= 0xef) {
			n = 3;
			if (b == 0xe0)
				lo = 0xa0;
			else if (b == 0xed)
				hi = 0x9f;
		} else if (b >= 0xf0 && b <= 0xf4) {
			n = 4;
			if (b == 0xf0)
				lo = 0x90;
			else if (b == 0xf4)
				hi = 0x8f;
		} else {
			return i;
		}
		if (len - i < n || s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k < n; k++)
			if (s[i + k] < 0x80 || s[i + k] > 0xbf)
				return i;
		i += n;
	}
	return len;
}

/* A varint at p (at most len bytes): its bytes, or 0 if it is cut or longer than ten bytes. */
static size_t check_varint(const uint8_t *p, size_t len, uint64_t *v)
{
	uint64_t out = 0;
	for (size_t i = 0; i < len && i < 10; i++) {
		out |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = out;
			return i + 1;
		}
	}
	return 0;
}

/* One string field's bytes, named path: UTF-8 without NUL, or -1 with why. */
static int check_string(const char *path, const uint8_t *s, size_t len, char *why, size_t why_len)
{
	const uint8_t *nul = memchr(s, 0, len);
	size_t valid = check_utf8_prefix(s, len);
	if (nul && (size_t)(nul - s) <= valid) {
		snprintf(why, why_len, "%s holds a NUL byte (at byte %zu): strings may not", path,
		         (size_t)(nul - s));
		return -1;
	}
	if (valid < len) {
		snprintf(why, why_len, "%s is not UTF-8 (byte 0x%02x at byte %zu)", path, s[valid], valid);
		return -1;
	}
	return 0;
}

/*
 * The message of type desc in data: its strings, and its nested messages'
 * in turn.  path holds the name of the message (path_used bytes of it).
 */
static int check_message(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                         char *path, size_t path_used, unsigned depth, char *why, size_t why_len)
{
	uint32_t seen[CHECK_COUNTED_FIELDS] = {0};
	size_t off = 0;
	while (off < len) {
		uint64_t key, n = 0;
		size_t used = check_varint(data + off, len - off, &key);
		if (!used)
			goto malformed;
		off += used;
		switch (key & 7) {
		case WIRE_VARINT:
			if (!(used = check_varint(data + off, len - off, &n)))
				goto malformed;
			off += used;
			continue;
		case WIRE_FIXED64:
		case WIRE_FIXED32: {
			size_t size = (key & 7) == WIRE_FIXED64 ? 8 : 4;
			if (len - off < size)
				goto malformed;
			off += size;
			continue;
		}
		case WIRE_LENGTH:
			if (!(used = check_varint(data + off, len - off, &n)) || n > len - off - used)
				goto malformed;
			off += used;
			break;
		default:
			goto malformed;
		}
		uint64_t number = key >> 3;
		const ProtobufCFieldDescriptor *f =
		        number <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)number)
		                             : NULL;
		if (f && (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE)) {
			size_t index = (size_t)(f - desc->fields);
			int w = f->label == PROTOBUF_C_LABEL_REPEATED && index < CHECK_COUNTED_FIELDS
			                ? snprintf(path + path_used, CHECK_PATH_MAX - path_used, "%s%s[%u]",
			                           path_used ? "." : "", f->name, (unsigned)seen[index]++)
			                : snprintf(path + path_used, CHECK_PATH_MAX - path_used, "%s%s",
			                           path_used ? "." : "", f->name);
			size_t end = path_used + (w > 0 ? (size_t)w : 0);
			if (end >= CHECK_PATH_MAX)
				end = CHECK_PATH_MAX - 1;
			if (f->type == PROTOBUF_C_TYPE_STRING) {
				if (check_string(path, data + off, (size_t)n, why, why_len) != 0)
					return -1;
			} else if (depth >= CHECK_DEPTH_MAX) {
				snprintf(why, why_len, "%s is nested deeper than %d messages", path,
				         CHECK_DEPTH_MAX);
				return -1;
			} else if (check_message(f->descriptor, data + off, (size_t)n, path, end, depth + 1,
			                         why, why_len) != 0) {
				return -1;
			}
			path[path_used] = '\0';
		}
		off += (size_t)n;
	}
	return 0;
malformed:
	snprintf(why, why_len, "%s is not a well-formed protobuf message", path_used ? path : "the message");
	return -1;
}

int check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                  char *why, size_t why_len)
{
	char path[CHECK_PATH_MAX] = "";
	return check_message(desc, data, len, path, 0, 0, why, why_len);
}

/* One bound of a range: finite and within the times a request may name. */
static int check_time(const char *name, double t, char *why, size_t why_len)
{
	if (isnan(t))
		snprintf(why, why_len, "%s is not a number", name);
	else if (isinf(t))
		snprintf(why, why_len, "%s is infinite", name);
	else if (t < CHECK_UNIX_MIN || t > CHECK_UNIX_MAX)
		snprintf(why, why_len,
		         "%s is %.10g: a time is unix seconds from %.0f (1970) to %.0f (2255-03-14)", name, t,
		         CHECK_UNIX_MIN, CHECK_UNIX_MAX);
	else
		return 0;
	return -1;
}

int check_time_range(const char *from_name, double from, const char *until_name, double until,
                     char *why, size_t why_len)
{
	if (check_time(from_name, from, why, why_len) != 0 ||
	    check_time(until_name, until, why, why_len) != 0)
		return -1;
	if (until != 0 && until < from) {
		snprintf(why, why_len, "%s (%.3f) is before %s (%.3f)", until_name, until, from_name, from);
		return -1;
	}
	return 0;
}

/* A view's idle_policy: one the protocol has, and not against the older no_idle beside it. */
static int check_idle(const char *name, Pyprofd__IdlePolicy policy, bool no_idle, char *why,
                      size_t why_len)
{
	/* protobuf-c keeps any number a proto3 enum is sent as. */
	if ((unsigned)policy > PYPROFD__IDLE_POLICY__IDLE_DROP) {
		snprintf(why, why_len, "%s.idle_policy is %d: it is 0 (default), 1 (keep) or 2 (drop)", name,
		         (int)policy);
		return -1;
	}
	if (no_idle && policy == PYPROFD__IDLE_POLICY__IDLE_KEEP) {
		snprintf(why, why_len, "%s.no_idle drops the idle samples %s.idle_policy keeps", name, name);
		return -1;
	}
	return 0;
}

/* A query's request context: the lengths of its ids, its labels' count and shape. */
static int check_context(const Pyprofd__QueryRequest *q, char *why, size_t why_len)
{
	static const uint8_t zero[CHECK_TRACE_ID_LEN];
	if (q->trace_id.len && q->trace_id.len != CHECK_TRACE_ID_LEN) {
		snprintf(why, why_len, "query.trace_id is %zu bytes: a trace id is %d (32 hex digits)",
		         q->trace_id.len, CHECK_TRACE_ID_LEN);
		return -1;
	}
	if (q->trace_id.len && memcmp(q->trace_id.data, zero, CHECK_TRACE_ID_LEN) == 0) {
		snprintf(why, why_len, "query.trace_id is all zero: no trace has that id");
		return -1;
	}
	if (q->span_id.len && q->span_id.len != CHECK_SPAN_ID_LEN) {
		snprintf(why, why_len, "query.span_id is %zu bytes: a span id is %d (16 hex digits)",
		         q->span_id.len, CHECK_SPAN_ID_LEN);
		return -1;
	}
	if (q->n_context_labels > CHECK_CONTEXT_LABELS_MAX) {
		snprintf(why, why_len, "query.context_labels has %zu labels: at most %d",
		         q->n_context_labels, CHECK_CONTEXT_LABELS_MAX);
		return -1;
	}
	for (size_t i = 0; i < q->n_context_labels; i++) {
		const Pyprofd__Label *l = q->context_labels[i];
		const char *k = l && l->key ? l->key : "", *v = l && l->value ? l->value : "";
		size_t kl = strlen(k), vl = strlen(v);
		const char *bad = NULL;
		if (kl == 0 || kl > CHECK_CONTEXT_KEY_MAX)
			bad = "key must be 1 to 31 bytes";
		else if (strpbrk(k, "=\n\r"))
			bad = "key must have no '=' nor line break";
		else if (vl > CHECK_CONTEXT_VALUE_MAX)
			bad = "value must be at most 63 bytes";
		else if (strpbrk(v, "\n\r"))
			bad = "value must have no line break";
		if (bad) {
			snprintf(why, why_len, "query.context_labels[%zu]: its %s", i, bad);
			return -1;
		}
	}
	return 0;
}

int check_request(const Pyprofd__Request *req, const uint8_t *data, size_t len, char *why,
                  size_t why_len)
{
	if (check_strings(&pyprofd__request__descriptor, data, len, why, why_len) != 0)
		return -1;
	if (req->body_case == PYPROFD__REQUEST__BODY_TOP && req->top &&
	    check_idle("top", req->top->idle_policy, req->top->no_idle, why, why_len) != 0)
		return -1;
	if (req->body_case == PYPROFD__REQUEST__BODY_QUERY && req->query) {
		const Pyprofd__QueryRequest *q = req->query;
		if (check_time_range("query.from_unix", q->from_unix, "query.until_unix", q->until_unix,
		                     why, why_len) != 0)
			return -1;
		if (check_idle("query", q->idle_policy, q->no_idle, why, why_len) != 0)
			return -1;
		if (q->time_slots > CHECK_MAX_TIME_SLOTS) {
			snprintf(why, why_len, "query.time_slots (%u) is more than %d", (unsigned)q->time_slots,
			         CHECK_MAX_TIME_SLOTS);
			return -1;
		}
		if (check_context(q, why, why_len) != 0)
			return -1;
		/* The base range is a diff's alone: another aggregate ignores it. */
		if (q->aggregate == PYPROFD__QUERY_AGGREGATE__QUERY_DIFF &&
		    check_time_range("query.base_from_unix", q->base_from_unix, "query.base_until_unix",
		                     q->base_until_unix, why, why_len) != 0)
			return -1;
	}
	if (req->body_case == PYPROFD__REQUEST__BODY_OTLP_EXPORT && req->otlp_export &&
	    check_time_range("otlp_export.from_unix", req->otlp_export->from_unix,
	                     "otlp_export.until_unix", req->otlp_export->until_unix, why, why_len) != 0)
		return -1;
	return 0;
}
