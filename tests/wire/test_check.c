/*
 * The checks every request passes (check.c), on bytes as a client would
 * send them: strings UTF-8 without NUL, found by name however deep, time
 * ranges finite, within bounds and in order, and idle policies known.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static size_t utf8_ok(const char *s)
{
	return check_utf8_prefix((const uint8_t *)s, strlen(s));
}

Test(check, utf8_as_unicode_defines_it)
{
	/* Whole: ASCII, and the longest and shortest of each length. */
	static const char *const good[] = {"", "plain", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80",
	                                   "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbf",
	                                   "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", "caf\xc3\xa9"};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		cr_assert_eq(utf8_ok(good[i]), strlen(good[i]), "good[%zu] refused", i);
	/* Each refused at the byte where it goes wrong. */
	static const struct {
		const char *s;
		size_t at;
	} bad[] = {
		{"\xff\xfe", 0},             /* never in UTF-8 */
		{"ab\x80", 2},               /* a continuation alone */
		{"\xc0\x80", 0},             /* overlong NUL */
		{"\xc1\xbf", 0},             /* overlong */
		{"\xe0\x9f\xbf", 0},         /* overlong three bytes */
		{"\xed\xa0\x80", 0},         /* a surrogate */
		{"\xf0\x8f\xbf\xbf", 0},     /* overlong four bytes */
		{"\xf4\x90\x80\x80", 0},     /* past U+10FFFF */
		{"\xf5\x80\x80\x80", 0},
		{"x\xe2\x82", 1},            /* cut short */
		{"x\xe2\x28\xa1", 1},        /* a continuation missing */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(utf8_ok(bad[i].s), bad[i].at, "bad[%zu]: valid up to %zu, not %zu", i,
		             utf8_ok(bad[i].s), bad[i].at);
}

/* req packed, with every "~" of its strings made the byte `to`: what C strings cannot say. */
static uint8_t *packed_with(const Pyprofd__Request *req, uint8_t to, size_t *len)
{
	*len = pyprofd__request__get_packed_size(req);
	uint8_t *buf = malloc(*len);
	cr_assert_not_null(buf);
	pyprofd__request__pack(req, buf);
	for (size_t i = 0; i < *len; i++)
		if (buf[i] == '~')
			buf[i] = to;
	return buf;
}

/* check_request on req with '~' made `to`: 0, or -1 with why. */
static int check_with(const Pyprofd__Request *req, uint8_t to, char *why, size_t why_len)
{
	size_t len;
	uint8_t *buf = packed_with(req, to, &len);
	/* What the daemon decodes is what it checks. */
	Pyprofd__Request *back = pyprofd__request__unpack(NULL, len, buf);
	cr_assert_not_null(back, "the patched request does not decode");
	int rc = check_request(back, buf, len, why, why_len);
	pyprofd__request__free_unpacked(back, NULL);
	free(buf);
	return rc;
}

Test(check, every_string_is_named_when_refused)
{
	Pyprofd__Label l0 = PYPROFD__LABEL__INIT, l1 = PYPROFD__LABEL__INIT;
	Pyprofd__Label *labels[] = {&l0, &l1};
	Pyprofd__AttachRequest attach = PYPROFD__ATTACH_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_ATTACH;
	req.attach = &attach;
	attach.pid = 1;
	attach.labels = labels;
	attach.n_labels = 2;
	l0.key = "service";
	l0.value = "caf\xc3\xa9";
	l1.key = "env";
	l1.value = "a~b";
	char why[256] = "";
	cr_assert_eq(check_with(&req, '~', why, sizeof why), 0, "%s", why);
	cr_assert_eq(check_with(&req, 0, why, sizeof why), -1, "a NUL in a value passed");
	cr_assert_str_eq(why, "attach.labels[1].value holds a NUL byte (at byte 1): strings may not");
	cr_assert_eq(check_with(&req, 0xff, why, sizeof why), -1, "0xff in a value passed");
	cr_assert_str_eq(why, "attach.labels[1].value is not UTF-8 (byte 0xff at byte 1)");
	l1.value = "b";
	l0.key = "~";
	cr_assert_eq(check_with(&req, 0xfe, why, sizeof why), -1);
	cr_assert_str_eq(why, "attach.labels[0].key is not UTF-8 (byte 0xfe at byte 0)");

	/* The rules' name and settings, and a query's labels, alike. */
	Pyprofd__RuleSetting set = PYPROFD__RULE_SETTING__INIT;
	Pyprofd__RuleSetting *sets[] = {&set};
	Pyprofd__RulesRequest rules = PYPROFD__RULES_REQUEST__INIT;
	rules.action = PYPROFD__RULES_ACTION__RULES_ADD;
	rules.name = "web";
	rules.settings = sets;
	rules.n_settings = 1;
	set.key = "labels";
	set.value = "service=~";
	req.body_case = PYPROFD__REQUEST__BODY_RULES;
	req.rules = &rules;
	cr_assert_eq(check_with(&req, 0, why, sizeof why), -1);
	cr_assert_str_eq(why, "rules.settings[0].value holds a NUL byte (at byte 8): strings may not");
	set.value = "x";
	rules.name = "w~b";
	cr_assert_eq(check_with(&req, 0xc0, why, sizeof why), -1);
	cr_assert_str_eq(why, "rules.name is not UTF-8 (byte 0xc0 at byte 1)");

	Pyprofd__QueryRequest query = PYPROFD__QUERY_REQUEST__INIT;
	query.labels = labels;
	query.n_labels = 1;
	l0.key = "k";
	l0.value = "~";
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &query;
	cr_assert_eq(check_with(&req, 0, why, sizeof why), -1);
	cr_assert_str_eq(why, "query.labels[0].value holds a NUL byte (at byte 0): strings may not");
}

Test(check, bytes_that_are_no_message_are_refused)
{
	char why[256];
	/* A length past the end, a varint that never ends, a group, a cut fixed64. */
	static const uint8_t past_end[] = {0x52, 0x05, 0x08};
	static const uint8_t endless[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
	static const uint8_t group[] = {0x0b, 0x0c};
	static const uint8_t cut[] = {0x09, 1, 2, 3};
	const struct {
		const uint8_t *b;
		size_t n;
	} cases[] = {{past_end, sizeof past_end}, {endless, sizeof endless}, {group, sizeof group}, {cut, sizeof cut}};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cr_assert_eq(check_strings(&pyprofd__request__descriptor, cases[i].b, cases[i].n, why, sizeof why), -1,
		             "case %zu passed", i);
		cr_assert(strstr(why, "is not a well-formed protobuf message"), "case %zu: %s", i, why);
	}
	/* Inside a nested message, the message is named. */
	static const uint8_t nested[] = {0x52, 0x02, 0x2a, 0x05};
	cr_assert_eq(check_strings(&pyprofd__request__descriptor, nested, sizeof nested, why, sizeof why), -1);
	cr_assert_str_eq(why, "attach is not a well-formed protobuf message");
	/* Fields this version does not know are passed over, whatever they hold. */
	static const uint8_t unknown[] = {0xfa, 0x3e, 0x02, 0xff, 0x00};
	cr_assert_eq(check_strings(&pyprofd__request__descriptor, unknown, sizeof unknown, why, sizeof why), 0, "%s", why);
	cr_assert_eq(check_strings(&pyprofd__request__descriptor, NULL, 0, why, sizeof why), 0);
}

Test(check, time_ranges)
{
	char why[256];
	cr_assert_eq(check_time_range("from", 0, "until", 0, why, sizeof why), 0, "%s", why);
	cr_assert_eq(check_time_range("from", 1.7e9, "until", 1.7e9 + 60, why, sizeof why), 0, "%s", why);
	cr_assert_eq(check_time_range("from", 5, "until", 5, why, sizeof why), 0, "%s", why);
	cr_assert_eq(check_time_range("from", 0, "until", CHECK_UNIX_MAX, why, sizeof why), 0, "%s", why);
	cr_assert_eq(check_time_range("from", 1.7e9, "until", 0, why, sizeof why), 0, "an open end refused");
	static const struct {
		double from, until;
		const char *why;
	} bad[] = {
		{0, INFINITY, "until is infinite"},
		{-INFINITY, 0, "from is infinite"},
		{NAN, 0, "from is not a number"},
		{0, NAN, "until is not a number"},
		{0, 1e300, "until is 1e+300: a time is unix seconds from 0 (1970) to 9000000000 (2255-03-14)"},
		{9.3e18, 0, "from is 9.3e+18: a time is unix seconds from 0 (1970) to 9000000000 (2255-03-14)"},
		{-1, 0, "from is -1: a time is unix seconds from 0 (1970) to 9000000000 (2255-03-14)"},
		{0, CHECK_UNIX_MAX + 1, "until is 9000000001: a time is unix seconds from 0 (1970) to 9000000000 (2255-03-14)"},
		{2000, 1000, "until (1000.000) is before from (2000.000)"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(check_time_range("from", bad[i].from, "until", bad[i].until, why, sizeof why), -1,
		             "bad[%zu] passed", i);
		cr_assert_str_eq(why, bad[i].why, "bad[%zu]", i);
	}
}

Test(check, a_diff_base_range_is_checked_for_a_diff_alone)
{
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	q.base_from_unix = INFINITY;
	char why[256] = "";
	cr_assert_eq(check_with(&req, '~', why, sizeof why), 0, "%s", why);
	q.aggregate = PYPROFD__QUERY_AGGREGATE__QUERY_DIFF;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.base_from_unix is infinite");
	q.base_from_unix = 100;
	q.until_unix = 1e19;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.until_unix is 1e+19: a time is unix seconds from 0 (1970) to 9000000000 (2255-03-14)");
}

Test(check, time_slots_are_bounded)
{
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	char why[256] = "";
	q.time_slots = CHECK_MAX_TIME_SLOTS;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), 0, "%s", why);
	q.time_slots = UINT32_MAX;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.time_slots (4294967295) is more than 10000");
}

/*
 * A view's idle_policy is one of the three the protocol has, as protobuf-c
 * decodes any number; the older no_idle says drop, so beside keep it is refused.
 */
Test(check, idle_policies_are_bounded)
{
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	Pyprofd__TopRequest t = PYPROFD__TOP_REQUEST__INIT;
	Pyprofd__Request query = PYPROFD__REQUEST__INIT, top = PYPROFD__REQUEST__INIT;
	query.body_case = PYPROFD__REQUEST__BODY_QUERY;
	query.query = &q;
	top.body_case = PYPROFD__REQUEST__BODY_TOP;
	top.top = &t;
	char why[256] = "";
	for (int p = PYPROFD__IDLE_POLICY__IDLE_DEFAULT; p <= PYPROFD__IDLE_POLICY__IDLE_DROP; p++) {
		q.idle_policy = t.idle_policy = (Pyprofd__IdlePolicy)p;
		q.no_idle = t.no_idle = false;
		cr_assert_eq(check_with(&query, '~', why, sizeof why), 0, "%s", why);
		cr_assert_eq(check_with(&top, '~', why, sizeof why), 0, "%s", why);
		q.no_idle = t.no_idle = p != PYPROFD__IDLE_POLICY__IDLE_KEEP;
		cr_assert_eq(check_with(&query, '~', why, sizeof why), 0, "%s", why);
		cr_assert_eq(check_with(&top, '~', why, sizeof why), 0, "%s", why);
	}
	q.no_idle = t.no_idle = true;
	q.idle_policy = t.idle_policy = PYPROFD__IDLE_POLICY__IDLE_KEEP;
	cr_assert_eq(check_with(&query, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.no_idle drops the idle samples query.idle_policy keeps");
	cr_assert_eq(check_with(&top, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "top.no_idle drops the idle samples top.idle_policy keeps");
	q.no_idle = t.no_idle = false;
	q.idle_policy = t.idle_policy = (Pyprofd__IdlePolicy)3;
	cr_assert_eq(check_with(&query, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.idle_policy is 3: it is 0 (default), 1 (keep) or 2 (drop)");
	t.idle_policy = (Pyprofd__IdlePolicy)-1;
	cr_assert_eq(check_with(&top, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "top.idle_policy is -1: it is 0 (default), 1 (keep) or 2 (drop)");
}

/* A query's request context: ids of their lengths, a trace not all zero, labels bounded and line-safe. */
Test(check, query_contexts_are_bounded)
{
	Pyprofd__QueryRequest q = PYPROFD__QUERY_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_QUERY;
	req.query = &q;
	char why[256] = "";
	uint8_t trace[17] = {0}, span[9] = {0};
	q.trace_id = (ProtobufCBinaryData){16, trace};
	cr_assert_eq(check_with(&req, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.trace_id is all zero: no trace has that id");
	trace[15] = 1;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), 0, "%s", why);
	q.trace_id.len = 17;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.trace_id is 17 bytes: a trace id is 16 (32 hex digits)");
	q.trace_id.len = 16;
	q.span_id = (ProtobufCBinaryData){9, span};
	cr_assert_eq(check_with(&req, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.span_id is 9 bytes: a span id is 8 (16 hex digits)");
	q.span_id.len = 8;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), 0, "%s", why);

	Pyprofd__Label labels[9], *lp[9];
	for (int i = 0; i < 9; i++) {
		pyprofd__label__init(&labels[i]);
		labels[i].key = "route";
		labels[i].value = "/checkout";
		lp[i] = &labels[i];
	}
	q.context_labels = lp;
	q.n_context_labels = 8;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), 0, "%s", why);
	q.n_context_labels = 9;
	cr_assert_eq(check_with(&req, '~', why, sizeof why), -1);
	cr_assert_str_eq(why, "query.context_labels has 9 labels: at most 8");
	q.n_context_labels = 2;
	static const struct {
		const char *key, *value, *why;
	} bad[] = {
		{"", "v", "query.context_labels[1]: its key must be 1 to 31 bytes"},
		{"a=b", "v", "query.context_labels[1]: its key must have no '=' nor line break"},
		{"k", "a\nb", "query.context_labels[1]: its value must have no line break"},
		{"k", "0123456789012345678901234567890123456789012345678901234567890123",
		 "query.context_labels[1]: its value must be at most 63 bytes"},
		{"0123456789012345678901234567890123", "v", "query.context_labels[1]: its key must be 1 to 31 bytes"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		labels[1].key = (char *)bad[i].key;
		labels[1].value = (char *)bad[i].value;
		cr_assert_eq(check_with(&req, '~', why, sizeof why), -1, "bad[%zu] passed", i);
		cr_assert_str_eq(why, bad[i].why);
	}
}
