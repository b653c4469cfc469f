/*
 * contexts — the requests a target's samples ran in: what a rule or an
 * attach asks to read (OpenTelemetry's span, ContextVars as labels), and
 * the samples counted by request until they go into the history.
 */
#ifndef PYPROFD_CONTEXTS_H
#define PYPROFD_CONTEXTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "labels.h"
#include "unwind.h"

struct store_batch;

/* What to read of each sample's context: `context = otel`, `context_labels = route, tenant`. */
struct context_spec {
	bool otel;
	uint32_t nlabels;
	char labels[UW_CONTEXT_LABELS_MAX][UW_CONTEXT_NAME_LEN];
};

/*
 * Every few seconds (*polled: when last, CLOCK_MONOTONIC s; 0 never): the
 * process's OpenTelemetry process context (OTEP 4719); when it says the
 * process publishes thread records (OTEP 4947), their keys go to uw.  Its
 * service.name into service (service_len bytes; NULL: not wanted).
 */
void contexts_poll_process(struct uw_target *uw, pid_t pid, double now, double *polled, char *service,
                           size_t service_len);
/*
 * The labels a target is stored with: its own, and "service" from its
 * process context's service.name (service, as contexts_poll_process gave
 * it) unless its own have one; scratch holds the copy (the caller frees it).
 */
const struct labels *contexts_process_labels(const struct labels *own, const char *service, struct labels *scratch);

/* Whether it asks for anything. */
bool context_spec_on(const struct context_spec *s);
bool context_spec_equal(const struct context_spec *a, const struct context_spec *b);
/* `context = otel|none`.  0, or -1 with why. */
int context_spec_kind(struct context_spec *s, const char *value, char *why, size_t why_len);
/* `context_labels = NAME, NAME` (replacing the list; "" for none).  0, or -1 with why. */
int context_spec_labels(struct context_spec *s, const char *list, char *why, size_t why_len);
/* One more label name (--context-label).  0, or -1 with why. */
int context_spec_add_label(struct context_spec *s, const char *name, char *why, size_t why_len);
/* The label names joined by ", " into out. */
void context_spec_labels_text(const struct context_spec *s, char *out, size_t len);
void context_spec_to_options(const struct context_spec *s, struct uw_options *o);

/*
 * A target's samples by request since they last went into a batch, and
 * the label values met over its life.  Bounded: CONTEXTS_MAX requests
 * between two batches (past them a sample keeps no request, counted in
 * cut), CONTEXTS_VALUES_MAX values of one label over the process's life
 * (past them a new value is written CONTEXTS_OTHER, counted in folded).
 */
#define CONTEXTS_MAX 16384u
#define CONTEXTS_VALUES_MAX 256u
#define CONTEXTS_OTHER "<other>"
struct contexts;
struct contexts_stats {
	uint64_t samples; /* thread samples counted with a request */
	uint64_t cut;     /* thread samples past CONTEXTS_MAX: kept without their request */
	uint64_t folded;  /* label values past CONTEXTS_VALUES_MAX: written as CONTEXTS_OTHER */
};

struct contexts *contexts_new(void);
void contexts_free(struct contexts *c);
/* Count one thread sample in its context.  0, or -1 (out of memory, or past the bound: counted). */
int contexts_count(struct contexts *c, const struct context_spec *spec, const struct uw_context *ctx,
                   int64_t second, uint64_t thread_id, uint32_t stack, bool idle);
/*
 * Everything counted since the last time into batch b (target index
 * `target`, buckets of width seconds), each stack id made the batch's by
 * batch_stack (-1: fail).  Emptied either way.  0, or -1.
 */
int contexts_batch(struct contexts *c, struct store_batch *b, int target, unsigned width,
                   int32_t (*batch_stack)(void *ctx, uint32_t stack), void *batch_stack_ctx);
/* Forget what was counted, as a history that keeps nothing does; label values stay. */
void contexts_drop(struct contexts *c);
void contexts_stats(const struct contexts *c, struct contexts_stats *out);
/* Bytes held, for the daemon's memory bounds. */
size_t contexts_bytes(const struct contexts *c);

#endif
