/*
 * Line tables of CPython 3.8-3.15, decoded to byte-offset ranges.
 *
 * The bytes come out of another process's memory, so nothing about them is
 * trusted: every read is bounds-checked against the length we were given,
 * every running sum is range-checked before it is stored, and the output is
 * capped at LINE_TABLE_MAX_RANGES.  Anything a real interpreter could not
 * have written is rejected as a whole rather than half-decoded, because a
 * plausible-looking wrong line is worse for a profile than no line at all.
 */
#include "linetable.h"

#include <stdbool.h>
#include <stdlib.h>

/* First allocation; most functions fit, and growth is geometric after. */
#define RANGES_INITIAL 16u

/* Instructions are 2-byte code units; the 3.11+ table counts in units. */
#define CODE_UNIT_BYTES 2u

/* 3.10 spells "this range has no line" with this line delta. */
#define PEP626_NO_LINE (-128)

/* Location-table entry kinds (bits 3-6 of an entry's first byte). */
#define LOC_NO_LOCATION 15
#define LOC_LONG 14
#define LOC_NO_COLUMNS 13
#define LOC_ONE_LINE_FIRST 10

/* A varint carries 6 bits a byte; six bytes already exceed 32 bits of value. */
#define VARINT_MAX_BYTES 6u

struct builder {
	struct line_range *ranges;
	uint32_t count, cap;
};

/*
 * Append [start, end) -> line.  Callers emit ranges in ascending order with
 * no gaps, so a range continuing its predecessor's line is folded into it:
 * fewer ranges to search and to keep cached per code object.
 */
static int builder_add(struct builder *b, uint32_t start, uint32_t end, int32_t line)
{
	if (start == end)
		return 0;
	if (b->count > 0) {
		struct line_range *last = &b->ranges[b->count - 1];
		if (last->end == start && last->line == line) {
			last->end = end;
			return 0;
		}
	}
	if (b->count == b->cap) {
		if (b->cap >= LINE_TABLE_MAX_RANGES)
			return -1;
		uint32_t cap = b->cap ? b->cap * 2 : RANGES_INITIAL;
		if (cap > LINE_TABLE_MAX_RANGES)
			cap = LINE_TABLE_MAX_RANGES;
		struct line_range *grown = realloc(b->ranges, (size_t)cap * sizeof *grown);
		if (!grown)
			return -1;
		b->ranges = grown;
		b->cap = cap;
	}
	b->ranges[b->count++] = (struct line_range){ .start = start, .end = end, .line = line };
	return 0;
}

/* The range of size bytes from *addr at line, ending at most at max_end; *addr moves to its end. */
static int builder_advance(struct builder *b, uint64_t *addr, uint64_t size, int32_t line,
                           uint64_t max_end)
{
	uint64_t next = *addr + size;
	if (next > max_end || builder_add(b, (uint32_t)*addr, (uint32_t)next, line) != 0)
		return -1;
	*addr = next;
	return 0;
}

/* Line numbers are int in CPython; a sum leaving that range is garbage. */
static bool line_ok(int64_t line)
{
	return line >= INT32_MIN && line <= INT32_MAX;
}

/*
 * The two byte-pair tables: co_lnotab (3.8, 3.9) and 3.10's co_linetable
 * (PEP 626), each pair a byte length and a signed line delta.  In lnotab a
 * line delta takes effect at the address reached so far, so the range ending
 * at a pair's address still has the old line, and the last line has no end
 * in the table: the interpreter answers it for any later offset.  In PEP 626
 * each pair describes the range it ends, and the no-line marker leaves the
 * running line untouched; zero-length pairs exist only to carry line deltas
 * too big for one byte (or lengths too big for one pair) and own no code.
 */
static int decode_pairs(const uint8_t *buf, size_t len, int firstlineno, bool pep626,
                        struct builder *b)
{
	/* CPython only ever writes whole pairs; half a pair means a bad read. */
	if (len % 2 != 0)
		return -1;
	uint64_t addr = 0;
	int64_t line = firstlineno;
	for (size_t i = 0; i < len; i += 2) {
		uint8_t size = buf[i];
		int8_t ldelta = (int8_t)buf[i + 1];
		bool no_line = pep626 && ldelta == PEP626_NO_LINE;
		/* UINT32_MAX is reserved as the open end of lnotab's last range. */
		if (!pep626 && size > 0 &&
		    builder_advance(b, &addr, size, (int32_t)line, UINT32_MAX - 1) != 0)
			return -1;
		line += no_line ? 0 : ldelta;
		if (!line_ok(line))
			return -1;
		if (pep626 &&
		    builder_advance(b, &addr, size, no_line ? -1 : (int32_t)line, UINT32_MAX) != 0)
			return -1;
	}
	return pep626 ? 0 : builder_add(b, (uint32_t)addr, UINT32_MAX, (int32_t)line);
}

/*
 * An unsigned location-table varint at buf[*pos]: 6 value bits a byte, low
 * chunk first, 0x40 meaning another byte follows.  Fails if it runs off the
 * table, meets the first byte of an entry, or does not fit 32 bits (CPython
 * computes these in an unsigned int, so nothing wider was ever written).
 */
static int read_varint(const uint8_t *buf, size_t len, size_t *pos, uint32_t *out)
{
	uint64_t val = 0;
	for (unsigned n = 0; n < VARINT_MAX_BYTES; n++) {
		if (*pos >= len)
			return -1;
		uint8_t byte = buf[(*pos)++];
		if (byte & 0x80)
			return -1;
		val |= (uint64_t)(byte & 0x3f) << (6 * n);
		if (!(byte & 0x40)) {
			if (val > UINT32_MAX)
				return -1;
			*out = (uint32_t)val;
			return 0;
		}
	}
	return -1;
}

/* Signed varints keep the sign in the low bit and the magnitude above it. */
static int read_signed_varint(const uint8_t *buf, size_t len, size_t *pos, int64_t *out)
{
	uint32_t raw;
	if (read_varint(buf, len, pos, &raw) != 0)
		return -1;
	int64_t magnitude = raw >> 1;
	*out = (raw & 1) ? -magnitude : magnitude;
	return 0;
}

/* Skip `n` bytes that must be payload (bit 7 clear), never an entry start. */
static int skip_payload(const uint8_t *buf, size_t len, size_t *pos, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (*pos >= len || (buf[*pos] & 0x80))
			return -1;
		(*pos)++;
	}
	return 0;
}

/*
 * 3.11+ location table.  Every entry starts with a byte with bit 7 set; what
 * follows depends on its kind, and only the line delta matters here.  The
 * interpreter itself just skips to the next byte with bit 7 set, but a real
 * table never has bytes beyond what the kind calls for, so we require the
 * exact shape: that catches a misread table early instead of trusting it.
 */
static int decode_locations(const uint8_t *buf, size_t len, int firstlineno, struct builder *b)
{
	uint64_t addr = 0;
	int64_t computed = firstlineno;
	size_t pos = 0;
	while (pos < len) {
		uint8_t head = buf[pos++];
		if (!(head & 0x80))
			return -1;
		unsigned kind = (head >> 3) & 0x0f;
		uint32_t units = (uint32_t)(head & 0x07) + 1;
		int64_t delta = 0;
		uint32_t ignored;
		bool no_line = false;

		switch (kind) {
		case LOC_NO_LOCATION:
			no_line = true;
			break;
		case LOC_LONG:
			/* line delta, then end-line delta, start and end column */
			if (read_signed_varint(buf, len, &pos, &delta) != 0 ||
			    read_varint(buf, len, &pos, &ignored) != 0 ||
			    read_varint(buf, len, &pos, &ignored) != 0 ||
			    read_varint(buf, len, &pos, &ignored) != 0)
				return -1;
			break;
		case LOC_NO_COLUMNS:
			if (read_signed_varint(buf, len, &pos, &delta) != 0)
				return -1;
			break;
		case LOC_ONE_LINE_FIRST:
		case LOC_ONE_LINE_FIRST + 1:
		case LOC_ONE_LINE_FIRST + 2:
			/* the kind is the line delta; start and end column follow */
			delta = (int64_t)kind - LOC_ONE_LINE_FIRST;
			if (skip_payload(buf, len, &pos, 2) != 0)
				return -1;
			break;
		default:
			/* short forms: same line, one byte of column data */
			if (skip_payload(buf, len, &pos, 1) != 0)
				return -1;
			break;
		}

		computed += delta;
		if (!line_ok(computed))
			return -1;
		if (builder_advance(b, &addr, (uint64_t)units * CODE_UNIT_BYTES,
		                    no_line ? -1 : (int32_t)computed, UINT32_MAX) != 0)
			return -1;
	}
	return 0;
}

int line_table_decode(enum line_model model, const uint8_t *buf, size_t len,
                      int firstlineno, struct line_table *out)
{
	if (!out)
		return -1;
	out->ranges = NULL;
	out->count = 0;
	if (!buf && len > 0)
		return -1;

	struct builder b = { 0 };
	int rc;
	switch (model) {
	case LINE_MODEL_LNOTAB:
		rc = decode_pairs(buf, len, firstlineno, false, &b);
		break;
	case LINE_MODEL_PEP626:
		rc = decode_pairs(buf, len, firstlineno, true, &b);
		break;
	case LINE_MODEL_LOCATIONS:
		rc = decode_locations(buf, len, firstlineno, &b);
		break;
	default:
		rc = -1;
		break;
	}
	if (rc != 0) {
		free(b.ranges);
		return -1;
	}

	/* Tables are cached per code object for the daemon's lifetime: trim. */
	if (b.count == 0) {
		free(b.ranges);
		b.ranges = NULL;
	} else if (b.count < b.cap) {
		struct line_range *trimmed = realloc(b.ranges, (size_t)b.count * sizeof *trimmed);
		if (trimmed)
			b.ranges = trimmed;
	}
	out->ranges = b.ranges;
	out->count = b.count;
	return 0;
}

int line_table_lookup(const struct line_table *table, uint32_t offset)
{
	if (!table || !table->ranges || table->count == 0)
		return -1;
	/* The last range starting at or before offset is the only candidate. */
	uint32_t lo = 0, hi = table->count;
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (table->ranges[mid].start <= offset)
			lo = mid;
		else
			hi = mid;
	}
	const struct line_range *r = &table->ranges[lo];
	if (offset < r->start || offset >= r->end)
		return -1;
	return r->line;
}

void line_table_free(struct line_table *table)
{
	if (!table)
		return;
	free(table->ranges);
	table->ranges = NULL;
	table->count = 0;
}
