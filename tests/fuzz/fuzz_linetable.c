/*
 * libFuzzer harness for the line-table decoders; `make fuzz` builds and
 * runs it.
 *
 * Input: one byte picking the model, four bytes of firstlineno, the table.
 * Besides the sanitizers' checks it aborts on any decoded table that breaks
 * the invariants lookups rely on.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "linetable.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 5)
		return 0;
	enum line_model model = (enum line_model)(data[0] % 3);
	uint32_t raw;
	memcpy(&raw, data + 1, sizeof raw);
	int firstlineno = (int)(int32_t)raw;
	const uint8_t *table = data + 5;
	size_t len = size - 5;

	struct line_table t;
	int rc = line_table_decode(model, len ? table : NULL, len, firstlineno, &t);
	if (rc != 0) {
		if (rc != -1 || t.ranges || t.count)
			abort();
		return 0;
	}
	if (t.count > LINE_TABLE_MAX_RANGES || (t.count == 0) != (t.ranges == NULL))
		abort();
	for (uint32_t i = 0; i < t.count; i++) {
		const struct line_range *r = &t.ranges[i];
		if (r->start >= r->end || (i == 0 && r->start != 0) ||
		    (i + 1 < t.count && r->end != t.ranges[i + 1].start))
			abort();
		if (line_table_lookup(&t, r->start) != r->line ||
		    line_table_lookup(&t, r->end - 1) != r->line)
			abort();
	}
	if (t.count && model != LINE_MODEL_LNOTAB &&
	    line_table_lookup(&t, t.ranges[t.count - 1].end) != -1)
		abort();
	line_table_free(&t);
	return 0;
}
