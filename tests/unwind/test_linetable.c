/*
 * Line-table decoding, checked against the interpreters themselves.
 *
 * The decoder's contract is "the line CPython would report", so the main
 * test asks every installed interpreter for its own answer (co_lines() or
 * dis.findlinestarts()) on real stdlib code and on synthesized code built to
 * hit the encodings' corner cases, then compares every byte offset.  The
 * rest pins down behaviour on tables no interpreter writes: the bytes come
 * from another process's memory and may be anything.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linetable.h"
#include "pythons.h"

/* Offsets past the bytecode's end checked too (3.10+: no line there). */
#define PAST_END 8u

/* Prefixes of each real table re-decoded to probe truncation handling. */
#define PREFIX_PROBES 8u

/* Mismatches described in detail before only counting the rest. */
#define REPORT_MAX 10u

static enum line_model model_for_minor(unsigned minor)
{
	if (minor <= 9)
		return LINE_MODEL_LNOTAB;
	if (minor == 10)
		return LINE_MODEL_PEP626;
	return LINE_MODEL_LOCATIONS;
}

static const char *tests_dir(void)
{
	const char *dir = getenv("PYPROFD_TESTS_DIR");
	return dir && *dir ? dir : "tests";
}

/*
 * Decode into a buffer of exactly the table's size, so a sanitizer build
 * flags any read past the end.  The copy of a zero-length table is NULL.
 */
static int decode_exact(enum line_model model, const uint8_t *buf, size_t len,
                        int firstlineno, struct line_table *out)
{
	uint8_t *copy = NULL;
	if (len > 0) {
		copy = malloc(len);
		cr_assert_not_null(copy);
		memcpy(copy, buf, len);
	}
	int rc = line_table_decode(model, copy, len, firstlineno, out);
	free(copy);
	return rc;
}

/* What every successful decode must look like, whatever the input. */
static void assert_well_formed(const struct line_table *t, enum line_model model)
{
	cr_assert_leq(t->count, LINE_TABLE_MAX_RANGES);
	if (t->count == 0) {
		cr_assert_null(t->ranges);
		cr_assert_eq(line_table_lookup(t, 0), -1);
		return;
	}
	cr_assert_not_null(t->ranges);
	cr_assert_eq(t->ranges[0].start, 0u, "ranges must start at offset 0");
	for (uint32_t i = 0; i < t->count; i++) {
		const struct line_range *r = &t->ranges[i];
		cr_assert_lt(r->start, r->end, "range %u is empty", i);
		if (i + 1 < t->count)
			cr_assert_eq(r->end, t->ranges[i + 1].start, "gap after range %u", i);
		cr_assert_eq(line_table_lookup(t, r->start), r->line);
		cr_assert_eq(line_table_lookup(t, r->end - 1), r->line);
	}
	uint32_t end = t->ranges[t->count - 1].end;
	if (model == LINE_MODEL_LNOTAB)
		cr_assert_eq(end, UINT32_MAX, "an lnotab's last line has no end");
	else
		cr_assert_eq(line_table_lookup(t, end), -1);
}

/* ---- real interpreters -------------------------------------------------- */

struct dump_stats {
	size_t codes, offsets, prefixes, mismatches;
};

static int hex_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* "-" is the empty table.  Returns a malloc'd buffer (NULL when empty). */
static uint8_t *hex_decode(const char *hex, size_t *len)
{
	if (strcmp(hex, "-") == 0) {
		*len = 0;
		return NULL;
	}
	size_t n = strlen(hex);
	cr_assert_eq(n % 2, 0u, "odd hex table in dump");
	uint8_t *buf = malloc(n / 2);
	cr_assert_not_null(buf);
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hex_nibble(hex[2 * i]), lo = hex_nibble(hex[2 * i + 1]);
		cr_assert(hi >= 0 && lo >= 0, "bad hex in dump");
		buf[i] = (uint8_t)(hi << 4 | lo);
	}
	*len = n / 2;
	return buf;
}

/* The integers after the tag letter of a mapping line. */
static long *parse_ints(const char *line, size_t *count)
{
	size_t cap = 64, n = 0;
	long *v = malloc(cap * sizeof *v);
	cr_assert_not_null(v);
	const char *p = line + 1;
	for (;;) {
		char *end;
		long x = strtol(p, &end, 10);
		if (end == p)
			break;
		if (n == cap) {
			cap *= 2;
			v = realloc(v, cap * sizeof *v);
			cr_assert_not_null(v);
		}
		v[n++] = x;
		p = end;
	}
	*count = n;
	return v;
}

/*
 * The interpreter's line for every byte offset in [0, span): from co_lines()
 * ranges (uncovered offsets have no line), or from findlinestarts() (the
 * line of the last start at or before the offset).
 */
static int *expected_lines(char tag, const long *v, size_t n, size_t span)
{
	int *exp = malloc(span * sizeof *exp);
	cr_assert_not_null(exp);
	for (size_t o = 0; o < span; o++)
		exp[o] = -1;
	if (tag == 'L') {
		cr_assert_eq(n % 3, 0u, "co_lines() record not in triples");
		for (size_t i = 0; i < n; i += 3) {
			cr_assert(v[i] >= 0 && v[i] <= v[i + 1] && (size_t)v[i + 1] <= span,
			          "co_lines() range [%ld, %ld) out of bounds", v[i], v[i + 1]);
			for (long o = v[i]; o < v[i + 1]; o++)
				exp[o] = (int)v[i + 2];
		}
	} else {
		cr_assert_eq(n % 2, 0u, "findlinestarts() record not in pairs");
		cr_assert(n >= 2 && v[0] == 0, "findlinestarts() must start at offset 0");
		for (size_t i = 0; i < n; i += 2) {
			size_t from = (size_t)v[i];
			size_t to = i + 2 < n ? (size_t)v[i + 2] : span;
			cr_assert(from <= to, "findlinestarts() not ascending");
			for (size_t o = from; o < to && o < span; o++)
				exp[o] = (int)v[i + 1];
		}
	}
	return exp;
}

/*
 * A real table cut short.  A cut between two entries is itself a valid
 * table describing a prefix of the code; a cut inside an entry is not (every
 * byte after an entry's first has bit 7 clear in a location table, and the
 * pair tables come in whole pairs).
 */
static void check_prefix(enum line_model model, const uint8_t *buf, size_t cut,
                         int firstlineno, const struct line_table *full,
                         struct dump_stats *st)
{
	struct line_table t;
	int rc = decode_exact(model, buf, cut, firstlineno, &t);
	bool boundary = model == LINE_MODEL_LOCATIONS ? (buf[cut] & 0x80) != 0 : cut % 2 == 0;
	st->prefixes++;
	if (!boundary) {
		cr_expect_eq(rc, -1, "table cut inside an entry at byte %zu decoded", cut);
		return;
	}
	cr_assert_eq(rc, 0, "table cut between entries at byte %zu rejected", cut);
	assert_well_formed(&t, model);
	/* Everything the prefix still describes must read as in the full table;
	 * an lnotab's open last line is the one exception. */
	uint32_t covered = t.count ? t.ranges[t.count - 1].start : 0;
	if (model != LINE_MODEL_LNOTAB && t.count)
		covered = t.ranges[t.count - 1].end;
	for (uint32_t o = 0; o < covered; o++)
		if (line_table_lookup(&t, o) != line_table_lookup(full, o)) {
			cr_expect_fail("prefix of %zu bytes differs at offset %u", cut, o);
			break;
		}
	line_table_free(&t);
}

static void check_record(const struct python *py, enum line_model model, int firstlineno,
                         size_t codelen, const char *hex, const char *name,
                         const char *mapping, struct dump_stats *st)
{
	size_t len, n;
	uint8_t *buf = hex_decode(hex, &len);
	long *v = parse_ints(mapping, &n);
	/* Past the end 3.8-3.9 answer from pairs that describe no bytecode, which
	 * findlinestarts() drops, so there is nothing to compare with. */
	size_t span = codelen + (model == LINE_MODEL_LNOTAB ? 0 : PAST_END);
	int *exp = expected_lines(mapping[0], v, n, span);

	struct line_table t;
	int rc = decode_exact(model, buf, len, firstlineno, &t);
	cr_assert_eq(rc, 0, "python %u.%u: table of %s (line %d) rejected", py->major,
	             py->minor, name, firstlineno);
	assert_well_formed(&t, model);

	for (size_t o = 0; o < span; o++) {
		int got = line_table_lookup(&t, (uint32_t)o);
		if (got != exp[o]) {
			if (st->mismatches < REPORT_MAX)
				cr_log_error("python %u.%u: %s (line %d) offset %zu: decoded %d, "
				             "interpreter says %d", py->major, py->minor, name,
				             firstlineno, o, got, exp[o]);
			st->mismatches++;
		}
	}
	st->offsets += span;
	st->codes++;

	for (size_t k = 1; k <= PREFIX_PROBES && len > 1; k++) {
		size_t cut = len * k / (PREFIX_PROBES + 1);
		if (cut > 0 && cut < len)
			check_prefix(model, buf, cut, firstlineno, &t, st);
	}

	line_table_free(&t);
	free(exp);
	free(v);
	free(buf);
}

/* Run the dump script under `py` with extra interpreter options `opts` (NULL-terminated). */
static struct dump_stats check_interpreter(const struct python *py, const char *const opts[])
{
	struct dump_stats st = { 0 };
	enum line_model model = model_for_minor(py->minor);
	char script[PATH_MAX];
	int w = snprintf(script, sizeof script, "%s/targets/linetable_dump.py", tests_dir());
	cr_assert(w > 0 && (size_t)w < sizeof script, "path too long");
	const char *args[8] = {"-I"};
	size_t n = 1;
	for (size_t i = 0; opts[i] && n < 6; i++)
		args[n++] = opts[i];
	args[n++] = script;
	args[n] = NULL;
	pid_t pid;
	FILE *p = python_popen(py, args, false, &pid);

	char *line = NULL, *record = NULL;
	size_t cap = 0, record_cap = 0;
	long records = -1;
	bool version_seen = false;
	while (getline(&line, &cap, p) > 0) {
		line[strcspn(line, "\n")] = '\0';
		unsigned major, minor;
		if (sscanf(line, "V %u %u", &major, &minor) == 2) {
			cr_assert(major == py->major && minor == py->minor,
			          "%s dumped as %u.%u", py->path, major, minor);
			version_seen = true;
		} else if (sscanf(line, "END %ld", &records) == 1) {
			break;
		} else if (line[0] == 'C') {
			/* the mapping follows on its own line; keep this one */
			if (record_cap < cap) {
				record = realloc(record, cap);
				cr_assert_not_null(record);
				record_cap = cap;
			}
			memcpy(record, line, strlen(line) + 1);
			if (getline(&line, &cap, p) <= 0)
				break;
			line[strcspn(line, "\n")] = '\0';
			char tag = model == LINE_MODEL_LNOTAB ? 'S' : 'L';
			cr_assert_eq(line[0], tag, "unexpected dump line after a code record");

			char *save = NULL;
			strtok_r(record, " ", &save);
			char *first = strtok_r(NULL, " ", &save);
			char *clen = strtok_r(NULL, " ", &save);
			char *hex = strtok_r(NULL, " ", &save);
			char *name = strtok_r(NULL, " ", &save);
			cr_assert(first && clen && hex && name, "short code record in dump");
			check_record(py, model, atoi(first), strtoul(clen, NULL, 10), hex, name,
			             line, &st);
		}
	}
	free(record);
	free(line);
	int status = python_pclose(p, pid);
	cr_assert(version_seen, "%s printed no version", py->path);
	cr_assert_eq(status, 0, "%s: dump script failed", py->path);
	cr_assert_eq((size_t)records, st.codes, "%s: dump cut short", py->path);
	return st;
}

Test(linetable, matches_every_interpreter, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	for (size_t i = 0; i < n; i++) {
		/* Without column data (PYTHONNODEBUGRANGES, as some deployments run)
		 * 3.11+ writes almost only the no-columns form, rare otherwise. */
		static const char *const defaults[] = {NULL};
		static const char *const no_debug_ranges[] = {"-X", "no_debug_ranges", NULL};
		const char *const *passes[] = {defaults, no_debug_ranges};
		const char *const names[] = {"defaults", "-X no_debug_ranges"};
		size_t npasses = pys[i].minor >= 11 ? 2 : 1;
		for (size_t k = 0; k < npasses; k++) {
			struct dump_stats st = check_interpreter(&pys[i], passes[k]);
			cr_log_info("linetable: python %u.%u [%s] (%s): %zu code objects, %zu offsets, "
			            "%zu truncated tables, %zu mismatches",
			            pys[i].major, pys[i].minor, names[k],
			            pys[i].path, st.codes,
			            st.offsets, st.prefixes, st.mismatches);
			cr_expect_gt(st.codes, 100u, "python %u.%u: too few code objects dumped",
			             pys[i].major, pys[i].minor);
			cr_expect_eq(st.mismatches, 0u, "python %u.%u %s: %zu offsets decoded wrong",
			             pys[i].major, pys[i].minor, names[k], st.mismatches);
		}
	}
}

/* ---- hand-made tables --------------------------------------------------- */

struct probe {
	uint32_t offset;
	int line;
};

static void expect_lines(enum line_model model, const uint8_t *buf, size_t len,
                         int firstlineno, const struct probe *probes, size_t nprobes)
{
	struct line_table t;
	cr_assert_eq(decode_exact(model, buf, len, firstlineno, &t), 0);
	assert_well_formed(&t, model);
	for (size_t i = 0; i < nprobes; i++)
		cr_expect_eq(line_table_lookup(&t, probes[i].offset), probes[i].line,
		             "offset %u: got %d, want %d", probes[i].offset,
		             line_table_lookup(&t, probes[i].offset), probes[i].line);
	line_table_free(&t);
}

static void linetable_expect_rejected(enum line_model model, const uint8_t *buf, size_t len,
                            int firstlineno)
{
	struct line_table t = { .ranges = (struct line_range *)&t, .count = 7 };
	cr_expect_eq(decode_exact(model, buf, len, firstlineno, &t), -1);
	cr_expect_null(t.ranges, "a rejected table must leave the output empty");
	cr_expect_eq(t.count, 0u);
}

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

Test(linetable, lnotab_negative_delta)
{
	/* +1 at 2, -2 at 6, +5 at 8; the last line runs on past the table */
	static const uint8_t tab[] = { 2, 1, 4, 0xfe, 2, 5 };
	static const struct probe want[] = {
		{ 0, 10 }, { 1, 10 }, { 2, 11 }, { 5, 11 }, { 6, 9 },
		{ 7, 9 },  { 8, 14 }, { 1000, 14 }, { UINT32_MAX - 1, 14 },
	};
	expect_lines(LINE_MODEL_LNOTAB, tab, sizeof tab, 10, want, ARRAY_LEN(want));
}

Test(linetable, lnotab_split_deltas)
{
	/* a 300-line jump split over zero-length pairs, then a 300-byte range
	 * split over two pairs of one line */
	static const uint8_t tab[] = { 0, 127, 0, 127, 4, 46, 255, 0, 45, 0x80, 2, 0x83 };
	static const struct probe want[] = {
		{ 0, 255 }, { 3, 255 }, { 4, 301 }, { 303, 301 }, { 304, 173 },
		{ 305, 173 }, { 306, 48 }, { 400, 48 },
	};
	expect_lines(LINE_MODEL_LNOTAB, tab, sizeof tab, 1, want, ARRAY_LEN(want));
}

Test(linetable, pep626_no_line_and_zero_length)
{
	static const uint8_t tab[] = {
		6, 0,          /* [0,6) 10 */
		0, 5,          /* no code: line 15 from here */
		4, 0x80,       /* [6,10) no line; the running line stays 15 */
		2, 1,          /* [10,12) 16 */
		254, 0x80,     /* [12,276) no line, in two pairs */
		10, 0x80,
		2, 0xfd,       /* [276,278) 13 */
	};
	static const struct probe want[] = {
		{ 0, 10 },   { 5, 10 },   { 6, -1 },  { 9, -1 },  { 10, 16 }, { 11, 16 },
		{ 12, -1 },  { 275, -1 }, { 276, 13 }, { 277, 13 }, { 278, -1 },
		{ UINT32_MAX, -1 },
	};
	expect_lines(LINE_MODEL_PEP626, tab, sizeof tab, 10, want, ARRAY_LEN(want));
}

Test(linetable, locations_every_kind)
{
	static const uint8_t tab[] = {
		0xe8, 0x02,                   /* no columns, +1: [0,2) 6 */
		0xe1, 0x01, 0x05,             /* one line +2, 2 units: [2,6) 8 */
		0xf8,                         /* no location: [6,8) none, line stays 8 */
		0x9a, 0x12,                   /* short form, 3 units: [8,14) 8 */
		0xf0, 0x07, 0x00, 0x01, 0x04, /* long, -3: [14,16) 5 */
		0xe8, 0x50, 0x06,             /* no columns, +200 in two chunks: [16,18) 205 */
		0xd7, 0x03, 0x09,             /* one line +0, 8 units: [18,34) 205 */
	};
	static const struct probe want[] = {
		{ 0, 6 },   { 1, 6 },    { 2, 8 },    { 5, 8 },    { 6, -1 },  { 7, -1 },
		{ 8, 8 },   { 13, 8 },   { 14, 5 },   { 15, 5 },   { 16, 205 }, { 17, 205 },
		{ 18, 205 }, { 33, 205 }, { 34, -1 }, { UINT32_MAX, -1 },
	};
	expect_lines(LINE_MODEL_LOCATIONS, tab, sizeof tab, 5, want, ARRAY_LEN(want));
}

Test(linetable, locations_wide_varints)
{
	/* Deltas of 18+ bits take four 6-bit chunks; the short header forms
	 * in between must keep the running line. */
	static const uint8_t tab[] = {
		0xe8, 0x40, 0x5f, 0x52, 0x02,       /* +300000: [0,2) 300100 */
		0x98, 0x00,                         /* short form: [2,4) same line */
		0xf0, 0x41, 0x6a, 0x61, 0x01,       /* long, -200000: [4,6) 100100 */
		0x40, 0x00, 0x01, 0x05,             /* end line +0 in two chunks, columns */
		0xe8, 0x50, 0x5c, 0x02,             /* +5000: [6,8) 105100 */
		0xe8, 0x03,                         /* -1: [8,10) 105099 */
	};
	static const struct probe want[] = {
		{ 0, 300100 }, { 2, 300100 }, { 4, 100100 }, { 6, 105100 },
		{ 8, 105099 }, { 9, 105099 }, { 10, -1 },
	};
	expect_lines(LINE_MODEL_LOCATIONS, tab, sizeof tab, 100, want, ARRAY_LEN(want));
}

Test(linetable, empty_tables)
{
	/* 3.8-3.9: every offset is on the first line; later: no line anywhere */
	static const struct probe lnotab[] = { { 0, 42 }, { 1234, 42 } };
	expect_lines(LINE_MODEL_LNOTAB, NULL, 0, 42, lnotab, ARRAY_LEN(lnotab));
	static const struct probe none[] = { { 0, -1 }, { 2, -1 } };
	expect_lines(LINE_MODEL_PEP626, NULL, 0, 42, none, ARRAY_LEN(none));
	expect_lines(LINE_MODEL_LOCATIONS, NULL, 0, 42, none, ARRAY_LEN(none));

	struct line_table t = { 0 };
	cr_expect_eq(line_table_lookup(&t, 0), -1);
	cr_expect_eq(line_table_lookup(NULL, 0), -1);
	line_table_free(&t);
	line_table_free(&t);
	line_table_free(NULL);
}

Test(linetable, truncated_or_misplaced_bytes)
{
	static const uint8_t varint_cut[] = { 0xe8, 0x41 };
	static const uint8_t long_cut[] = { 0xf0, 0x02, 0x00, 0x01 };
	static const uint8_t short_cut[] = { 0x98 };
	static const uint8_t one_line_cut[] = { 0xd0, 0x01 };
	static const uint8_t starts_mid_entry[] = { 0x40, 0x98, 0x00 };
	static const uint8_t extra_payload[] = { 0x98, 0x01, 0x01 };
	static const uint8_t header_in_varint[] = { 0xe8, 0x41, 0x98, 0x00 };
	static const uint8_t header_as_column[] = { 0xd0, 0x01, 0x98, 0x00 };
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, varint_cut, sizeof varint_cut, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, long_cut, sizeof long_cut, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, short_cut, sizeof short_cut, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, one_line_cut, sizeof one_line_cut, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, starts_mid_entry, sizeof starts_mid_entry, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, extra_payload, sizeof extra_payload, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, header_in_varint, sizeof header_in_varint, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, header_as_column, sizeof header_as_column, 1);

	/* the pair tables never end in half a pair */
	static const uint8_t odd[] = { 2, 1, 4 };
	linetable_expect_rejected(LINE_MODEL_LNOTAB, odd, sizeof odd, 1);
	linetable_expect_rejected(LINE_MODEL_PEP626, odd, sizeof odd, 1);
}

Test(linetable, overflow_rejected)
{
	/* varints wider than the 32 bits CPython computes them in */
	static const uint8_t wide36[] = { 0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x3f };
	static const uint8_t seven_chunks[] = { 0xe8, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40, 0x00 };
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, wide36, sizeof wide36, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, seven_chunks, sizeof seven_chunks, 1);

	/* the largest 32-bit delta is fine on its own, not past INT_MAX */
	static const uint8_t max_down[] = { 0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x03 };
	static const uint8_t max_up[] = { 0xe8, 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0x03 };
	static const struct probe low[] = { { 0, 0 } };
	expect_lines(LINE_MODEL_LOCATIONS, max_down, sizeof max_down, INT32_MAX, low, 1);
	linetable_expect_rejected(LINE_MODEL_LOCATIONS, max_up, sizeof max_up, 1);

	static const uint8_t up[] = { 2, 1 }, down[] = { 2, 0xff };
	linetable_expect_rejected(LINE_MODEL_LNOTAB, up, sizeof up, INT32_MAX);
	linetable_expect_rejected(LINE_MODEL_LNOTAB, down, sizeof down, INT32_MIN);
	linetable_expect_rejected(LINE_MODEL_PEP626, up, sizeof up, INT32_MAX);
	linetable_expect_rejected(LINE_MODEL_PEP626, down, sizeof down, INT32_MIN);
}

Test(linetable, bad_arguments)
{
	static const uint8_t tab[] = { 0x98, 0x00 };
	struct line_table t;
	cr_expect_eq(line_table_decode(LINE_MODEL_LOCATIONS, tab, sizeof tab, 1, NULL), -1);
	cr_expect_eq(line_table_decode(LINE_MODEL_LOCATIONS, NULL, 2, 1, &t), -1);
	cr_expect_eq(line_table_decode((enum line_model)99, tab, sizeof tab, 1, &t), -1);
	cr_expect_eq(t.count, 0u);
}

/* Byte offsets end at UINT32_MAX; a table reaching past must not wrap. */
Test(linetable, offsets_do_not_wrap, .timeout = 60)
{
	/* 255 * 16843009 == UINT32_MAX */
	const size_t pairs = 16843009;
	uint8_t *tab = malloc(2 * (pairs + 1));
	cr_assert_not_null(tab);
	for (size_t i = 0; i < pairs + 1; i++) {
		tab[2 * i] = 255;
		tab[2 * i + 1] = 0;
	}
	struct line_table t;
	/* one range of one line, merged */
	cr_assert_eq(line_table_decode(LINE_MODEL_PEP626, tab, 2 * pairs, 3, &t), 0);
	cr_expect_eq(t.count, 1u);
	cr_expect_eq(line_table_lookup(&t, UINT32_MAX - 1), 3);
	line_table_free(&t);
	cr_expect_eq(line_table_decode(LINE_MODEL_PEP626, tab, 2 * (pairs + 1), 3, &t), -1);
	/* lnotab keeps UINT32_MAX for its open end, so reaching it is too far */
	cr_expect_eq(line_table_decode(LINE_MODEL_LNOTAB, tab, 2 * pairs, 3, &t), -1);
	cr_assert_eq(line_table_decode(LINE_MODEL_LNOTAB, tab, 2 * (pairs - 1), 3, &t), 0);
	cr_expect_eq(line_table_lookup(&t, UINT32_MAX - 1), 3);
	line_table_free(&t);
	free(tab);
}

Test(linetable, range_cap, .timeout = 60)
{
	/* each pair a new line, so nothing merges */
	const size_t pairs = LINE_TABLE_MAX_RANGES + 1;
	uint8_t *tab = malloc(2 * pairs);
	cr_assert_not_null(tab);
	for (size_t i = 0; i < pairs; i++) {
		tab[2 * i] = 2;
		tab[2 * i + 1] = 1;
	}
	struct line_table t;
	cr_assert_eq(line_table_decode(LINE_MODEL_PEP626, tab, 2 * (pairs - 1), 0, &t), 0);
	cr_expect_eq(t.count, LINE_TABLE_MAX_RANGES);
	cr_expect_eq(line_table_lookup(&t, 2 * (LINE_TABLE_MAX_RANGES - 1)),
	             (int)LINE_TABLE_MAX_RANGES);
	line_table_free(&t);
	cr_expect_eq(line_table_decode(LINE_MODEL_PEP626, tab, 2 * pairs, 0, &t), -1);
	free(tab);
}

/* ---- garbage ------------------------------------------------------------ */

/* xorshift64: a fixed seed keeps any failure reproducible. */
static uint64_t next_random(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return x;
}

/* Appends a varint of `v` (6 bits a byte, 0x40 = more follow). */
static size_t put_varint(uint8_t *buf, size_t pos, uint32_t v)
{
	while (v >= 0x40) {
		buf[pos++] = (uint8_t)(0x40 | (v & 0x3f));
		v >>= 6;
	}
	buf[pos++] = (uint8_t)v;
	return pos;
}

/*
 * A location table of well-shaped entries of random kinds, so the decoder
 * gets deep into inputs; then, half the time, one byte overwritten, which
 * plain random bytes would almost never get past the first entry to test.
 */
static size_t shaped_locations(uint8_t *buf, size_t cap, uint64_t *state)
{
	size_t pos = 0;
	/* the longest entry: a header and four 6-byte varints */
	while (pos + 25 <= cap && next_random(state) % 16 != 0) {
		uint64_t r = next_random(state);
		unsigned kind = (unsigned)(r % 16);
		buf[pos++] = (uint8_t)(0x80 | kind << 3 | ((r >> 4) & 7));
		uint32_t v = (uint32_t)(r >> 8) >> (unsigned)((r >> 40) % 32);
		if (kind == 14) {
			pos = put_varint(buf, pos, v);
			for (int i = 0; i < 3; i++)
				pos = put_varint(buf, pos, (uint32_t)(r >> (44 + 6 * i)) & 0xff);
		} else if (kind == 13) {
			pos = put_varint(buf, pos, v);
		} else if (kind >= 10 && kind <= 12) {
			buf[pos++] = (uint8_t)(r >> 48) & 0x7f;
			buf[pos++] = (uint8_t)(r >> 56) & 0x7f;
		} else if (kind < 10) {
			buf[pos++] = (uint8_t)(r >> 48) & 0x7f;
		}
	}
	if (pos > 0 && next_random(state) % 2)
		buf[next_random(state) % pos] = (uint8_t)next_random(state);
	return pos;
}

Test(linetable, random_bytes, .timeout = 120)
{
	static const enum line_model models[] = {
		LINE_MODEL_LNOTAB, LINE_MODEL_PEP626, LINE_MODEL_LOCATIONS,
	};
	enum { ROUNDS = 6000, MAX_LEN = 400 };
	uint64_t state = 0x9e3779b97f4a7c15u;
	size_t accepted[ARRAY_LEN(models)] = { 0 };
	uint8_t *scratch = malloc(MAX_LEN);
	cr_assert_not_null(scratch);
	for (unsigned round = 0; round < ROUNDS; round++) {
		size_t len;
		if (round % 2 == 0) {
			len = next_random(&state) % 97;
			for (size_t i = 0; i < len; i++)
				scratch[i] = (uint8_t)next_random(&state);
		} else {
			len = shaped_locations(scratch, MAX_LEN, &state);
		}
		/* an exact-size copy, so a sanitizer sees any read past the end */
		uint8_t *buf = malloc(len ? len : 1);
		cr_assert_not_null(buf);
		memcpy(buf, scratch, len);
		int firstlineno = (int)(int32_t)(uint32_t)next_random(&state);
		if (round % 4 < 2)
			firstlineno %= 100000;
		for (size_t m = 0; m < ARRAY_LEN(models); m++) {
			struct line_table t;
			int rc = line_table_decode(models[m], len ? buf : NULL, len, firstlineno, &t);
			cr_assert(rc == 0 || rc == -1);
			if (rc == 0) {
				assert_well_formed(&t, models[m]);
				accepted[m]++;
			} else {
				cr_assert(t.ranges == NULL && t.count == 0);
			}
			line_table_free(&t);
		}
		free(buf);
	}
	free(scratch);
	/* the well-formedness checks above must actually have run */
	for (size_t m = 0; m < ARRAY_LEN(models); m++) {
		cr_log_info("linetable: random inputs accepted by model %zu: %zu of %d", m,
		            accepted[m], ROUNDS);
		cr_expect_gt(accepted[m], 100u, "model %zu accepted only %zu inputs", m, accepted[m]);
	}
}
