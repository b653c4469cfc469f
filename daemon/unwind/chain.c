/*
 * The frame cache: consecutive samples of a thread share the bottom of its
 * stack, so each thread keeps the chain it had last time and a new chain
 * reuses the stack id of the base the two share; only the new top is
 * decoded.
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* How many frames, from the bottom, a chain shares with the thread's last sample. */
uint32_t chain_common(const struct uw_target *t, const struct thread_cache *tc,
                      const struct raw_frame *raw, uint32_t n)
{
	uint32_t common = 0;
	if (t->opts.no_cache)
		return 0;
	while (common < n && common < tc->n) {
		const struct raw_frame *r = &raw[n - 1 - common];
		const struct chain_link *c = &tc->chain[common];
		if (r->addr != c->addr || r->code != c->code || r->pos != c->pos || r->kind != c->kind)
			break;
		common++;
	}
	return common;
}

/*
 * The stack id of a chain read innermost first.  The base the chain shares
 * with the thread's previous sample (same frames at the same addresses, same
 * code, same instruction: `common` frames, from chain_common) keeps its ids;
 * only the rest is decoded.
 */
uint32_t chain_resolve(struct uw_target *t, struct thread_cache *tc,
                       const struct raw_frame *raw, uint32_t n, uint32_t common,
                       struct uw_error *err)
{
	if (n > 0 && array_reserve((void **)&tc->chain, &tc->cap, n - 1, sizeof *tc->chain, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return INTERN_FAILED;
	}
	if (n > 0) {
		if (common == n && tc->n == n)
			t->stats.frame_cache_full_hits++;
		else if (common > 0)
			t->stats.frame_cache_partial_hits++;
		else
			t->stats.frame_cache_misses++;
	}
	t->stats.frames_from_cache += common;
	t->stats.frames_from_memory += n - common;

	uint32_t stack = common ? tc->chain[common - 1].stack : 0;
	tc->n = common; /* until the rest is decoded, only the shared base is valid */
	for (uint32_t d = common; d < n; d++) {
		const struct raw_frame *r = &raw[n - 1 - d];
		uint32_t frame;
		if (r->kind == UW_FRAME_NATIVE) {
			frame = t->native_frame;
		} else if (r->kind == UW_FRAME_MOVING) {
			frame = t->moving_frame;
		} else {
			struct code_info *ci = code_get(t, r->code, err);
			if (!ci)
				return INTERN_FAILED;
			/* Free-threaded: an instruction of the thread's own copy, as the code's. */
			uint64_t pos = r->pos;
			if (r->tlbc && code_tlbc_pos(t, ci, r->tlbc, &pos, err) != 0)
				return INTERN_FAILED;
			/*
			 * A frame caught while being set up (or torn down) can show one
			 * code and another's instruction: its instruction must be in its
			 * code.
			 */
			if (t->layout.lasti_model == LASTI_INSTR_PTR &&
			    (pos + 2 < ci->bytecode || pos > ci->bytecode + ci->bytecode_len)) {
				uw_fail(err, UW_ECORRUPT, "frame 0x%llx: instruction outside its code",
				        (unsigned long long)r->addr);
				return INTERN_FAILED;
			}
			frame = code_frame_at(t, ci, pos);
		}
		if (frame == INTERN_FAILED || (stack = intern_stack(&t->intern, stack, frame)) == INTERN_FAILED) {
			uw_fail(err, UW_ENOMEM, "out of memory interning frames");
			return INTERN_FAILED;
		}
		tc->chain[d] = (struct chain_link){
			.addr = r->addr, .code = r->code, .pos = r->pos, .kind = r->kind, .stack = stack};
		tc->n = d + 1;
	}
	return stack;
}
