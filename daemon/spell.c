/*
 * Spelling stack ids out: the unwinder names a stack by an id of its own
 * epoch's prefix tree; a batch for the history, or a recorded profile,
 * needs the frames themselves and stacks of its own numbering.  Each id is
 * spelled once per sink: a flat array maps the unwinder's dense ids to the
 * sink's, and only the ids touched are cleared when the sink changes.
 */
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"

void spell_init(struct spell *sp, const struct spell_sink *sink, void *sink_ctx)
{
	memset(sp, 0, sizeof *sp);
	sp->sink = sink;
	sp->sink_ctx = sink_ctx;
}

void spell_free(struct spell *sp)
{
	free(sp->frame_at);
	free(sp->stack_at);
	free(sp->touched_frames);
	free(sp->touched_stacks);
	free(sp->chain);
	memset(sp, 0, sizeof *sp);
}

void spell_reset(struct spell *sp)
{
	const struct spell_sink *sink = sp->sink;
	void *ctx = sp->sink_ctx;
	spell_free(sp);
	spell_init(sp, sink, ctx);
}

size_t spell_bytes(const struct spell *sp)
{
	return (sp->frame_cap + sp->stack_cap) * sizeof *sp->frame_at +
	       (sp->touched_frames_cap + sp->touched_stacks_cap) * sizeof *sp->touched_frames +
	       sp->chain_cap * sizeof *sp->chain;
}

void spell_forget(struct spell *sp)
{
	for (size_t i = 0; i < sp->ntouched_frames; i++)
		sp->frame_at[sp->touched_frames[i]] = 0;
	for (size_t i = 0; i < sp->ntouched_stacks; i++)
		sp->stack_at[sp->touched_stacks[i]] = 0;
	sp->ntouched_frames = sp->ntouched_stacks = 0;
}

/* The slot of id in a map (index + 1; 0 not spelled yet), grown to hold it; NULL if out of memory. */
static int32_t *spell_slot(int32_t **map, size_t *cap, uint32_t id)
{
	if (id >= *cap) {
		size_t old = *cap;
		if (array_reserve((void **)map, cap, id, sizeof **map, NULL) != 0)
			return NULL;
		memset(*map + old, 0, (*cap - old) * sizeof **map);
	}
	return &(*map)[id];
}

/* Remember that a map's slot was filled, so spell_forget clears it. */
static int spell_touch(uint32_t **touched, size_t *n, size_t *cap, uint32_t id)
{
	if (array_reserve((void **)touched, cap, *n, sizeof **touched, NULL) != 0)
		return -1;
	(*touched)[(*n)++] = id;
	return 0;
}

/* The sink's index of a frame id; -1 on failure. */
static int32_t spell_frame(struct spell *sp, const struct uw_target *uw, uint32_t frame)
{
	int32_t *slot = spell_slot(&sp->frame_at, &sp->frame_cap, frame);
	if (!slot)
		return -1;
	if (*slot)
		return *slot - 1;
	int32_t index = sp->sink->frame(sp->sink_ctx, uw_frame_get(uw, frame));
	if (index < 0 || index == INT32_MAX ||
	    spell_touch(&sp->touched_frames, &sp->ntouched_frames, &sp->touched_frames_cap, frame) != 0)
		return -1;
	*slot = index + 1;
	return index;
}

int32_t spell_stack(struct spell *sp, const struct uw_target *uw, uint32_t stack)
{
	size_t n = 0;
	int32_t parent = -1;
	/* Up to the first ancestor already spelled (or the root)... */
	for (uint32_t s = stack; s && n < UW_MAX_FRAMES * 2; s = uw_stack_parent(uw, s)) {
		int32_t *slot = spell_slot(&sp->stack_at, &sp->stack_cap, s);
		if (!slot)
			return -1;
		if (*slot) {
			parent = *slot - 1;
			break;
		}
		if (array_reserve((void **)&sp->chain, &sp->chain_cap, n, sizeof *sp->chain, NULL) != 0)
			return -1;
		sp->chain[n++] = s;
	}
	/* ...then down again, adding each. */
	while (n > 0) {
		uint32_t s = sp->chain[--n];
		int32_t frame = spell_frame(sp, uw, uw_stack_frame(uw, s));
		if (frame < 0)
			return -1;
		parent = sp->sink->stack(sp->sink_ctx, parent, frame);
		if (parent < 0 || parent == INT32_MAX ||
		    spell_touch(&sp->touched_stacks, &sp->ntouched_stacks, &sp->touched_stacks_cap, s) != 0)
			return -1;
		sp->stack_at[s] = parent + 1;
	}
	return parent;
}
