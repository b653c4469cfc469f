/* The sampling engine's counters, named once for every place that reports them. */
#include <stddef.h>
#include <string.h>

#include "pyprofd.h"

const struct stats_counter counters_table[COUNTERS_COUNT] = {
	{"thread_samples", offsetof(struct uw_stats, thread_samples)},
	{"frame_cache_full_hits", offsetof(struct uw_stats, frame_cache_full_hits)},
	{"frame_cache_partial_hits", offsetof(struct uw_stats, frame_cache_partial_hits)},
	{"frame_cache_misses", offsetof(struct uw_stats, frame_cache_misses)},
	{"frames_from_cache", offsetof(struct uw_stats, frames_from_cache)},
	{"frames_from_memory", offsetof(struct uw_stats, frames_from_memory)},
	{"prefetch_hits", offsetof(struct uw_stats, prefetch_hits)},
	{"prefetch_misses", offsetof(struct uw_stats, prefetch_misses)},
	{"code_object_cache_hits", offsetof(struct uw_stats, code_cache_hits)},
	{"code_object_cache_misses", offsetof(struct uw_stats, code_cache_misses)},
	{"stale_invalidations", offsetof(struct uw_stats, stale_invalidations)},
	{"stack_rereads", offsetof(struct uw_stats, stack_rereads)},
	{"torn_retries", offsetof(struct uw_stats, torn_retries)},
	{"torn_threads", offsetof(struct uw_stats, torn_threads)},
	{"torn_returned", offsetof(struct uw_stats, torn_returned)},
	{"marker_partial", offsetof(struct uw_stats, marker_partial)},
	{"marker_partial_reread", offsetof(struct uw_stats, marker_partial_reread)},
	{"context_reads", offsetof(struct uw_stats, context_reads)},
	{"context_torn", offsetof(struct uw_stats, context_torn)},
	{"context_kept", offsetof(struct uw_stats, context_kept)},
	{"native_copied", offsetof(struct uw_stats, native_copied)},
	{"native_kept", offsetof(struct uw_stats, native_kept)},
	{"native_ran", offsetof(struct uw_stats, native_ran)},
	{"native_shot", offsetof(struct uw_stats, native_shot)},
	{"native_shot_late", offsetof(struct uw_stats, native_shot_late)},
	{"native_shot_missed", offsetof(struct uw_stats, native_shot_missed)},
	{"native_unwalked", offsetof(struct uw_stats, native_unwalked)},
	{"native_libdwfl_walks", offsetof(struct uw_stats, native_libdwfl_walks)},
	{"cache_resets", offsetof(struct uw_stats, cache_resets)},
	{"cache_bytes", offsetof(struct uw_stats, cache_bytes)},
	{"walks_cut", offsetof(struct uw_stats, walks_cut)},
	{"tasks_read", offsetof(struct uw_stats, tasks_read)},
	{"tasks_cut", offsetof(struct uw_stats, tasks_cut)},
	{"tasks_moved", offsetof(struct uw_stats, tasks_moved)},
	{"task_names_folded", offsetof(struct uw_stats, task_names_folded)},
	{"scratch_bytes", offsetof(struct uw_stats, scratch_bytes)},
	{"plans_kept", offsetof(struct uw_stats, plans_kept)},
	{"pages_read", offsetof(struct uw_stats, pages_read)},
	{"read_ns", offsetof(struct uw_stats, read_ns)},
	{"steady_hits", offsetof(struct uw_stats, steady_hits)},
	{"marker_honoured", offsetof(struct uw_stats, marker_honoured)},
	{"marker_written", offsetof(struct uw_stats, marker_written)},
	{"marker_cleared", offsetof(struct uw_stats, marker_cleared)},
	{"marker_foreign", offsetof(struct uw_stats, marker_foreign)},
	{"still_proven", offsetof(struct uw_stats, still_proven)},
	{"process_still", offsetof(struct uw_stats, process_still)},
	{"kernel_copies", offsetof(struct uw_stats, kernel_copies)},
	{"kernel_copy_watch_failures", offsetof(struct uw_stats, kernel_copy_watch_failures)},
	{"kernel_copy_pauses", offsetof(struct uw_stats, kernel_copy_pauses)},
	{"kernel_stacks", offsetof(struct uw_stats, kernel_stacks)},
	{"kernel_watches", offsetof(struct uw_stats, kernel_watches)},
	{"kernel_paced", offsetof(struct uw_stats, kernel_paced)},
	{"kernel_paced_ns", offsetof(struct uw_stats, kernel_paced_ns)},
	{"kernel_watch_failures", offsetof(struct uw_stats, kernel_watch_failures)},
};

uint64_t counters_value(const struct uw_stats *st, size_t i)
{
	uint64_t v;
	memcpy(&v, (const char *)st + counters_table[i].offset, sizeof v);
	return v;
}
