/*
 * A label put into a request context: the one home of its rules (the value
 * cut at a whole character, its control bytes made '?', a bounded count),
 * for the labels of ContextVars (context.c) and of thread records (otel.c).
 */
#include <string.h>

#include "unwind_internal.h"

void context_label_put(struct uw_context *out, uint32_t index, const char *value, size_t len, bool replace)
{
	uint32_t at = 0;
	while (at < out->nlabels && out->labels[at].index != index)
		at++;
	if (at < out->nlabels ? !replace : out->nlabels >= UW_CONTEXT_LABELS_MAX)
		return;
	if (len > UW_CONTEXT_VALUE_LEN - 1) {
		/* Cut at a whole character. */
		len = UW_CONTEXT_VALUE_LEN - 1;
		while (len && ((unsigned char)value[len] & 0xc0) == 0x80)
			len--;
	}
	out->nlabels += at == out->nlabels;
	out->labels[at].index = index;
	/* Control bytes made '?': they would break a line of labels. */
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)value[i];
		out->labels[at].value[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	out->labels[at].value[len] = '\0';
}
