/*
 * Line numbers from a code object's line table, decoded once per code object.
 *
 * Each CPython family has its own table (co_lnotab 3.8-3.9, the PEP 626
 * co_linetable of 3.10, the location table of 3.11+); all decode to the same
 * sorted list of byte-offset ranges, so a lookup is a binary search.
 */
#ifndef PYPROFD_UNWIND_LINETABLE_H
#define PYPROFD_UNWIND_LINETABLE_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/* Bytecode byte offsets [start, end) map to line; line -1 means "no line". */
struct line_range {
	uint32_t start, end;
	int32_t line;
};

struct line_table {
	struct line_range *ranges;
	uint32_t count;
};

/* Most ranges one table may decode to; a longer table is treated as garbage. */
#define LINE_TABLE_MAX_RANGES (1u << 20)

/*
 * Decode `len` bytes of a line table of the given model.  Reads nothing past
 * buf + len.  Returns 0, or -1 (out left empty) if the table is malformed or
 * too long.  Free with line_table_free().
 */
int line_table_decode(enum line_model model, const uint8_t *buf, size_t len,
                      int firstlineno, struct line_table *out);

/*
 * The line of the instruction at byte offset `offset` in the bytecode, as
 * CPython itself computes it (PyCode_Addr2Line), or -1 if it has none.
 */
int line_table_lookup(const struct line_table *table, uint32_t offset);

void line_table_free(struct line_table *table);

#endif
