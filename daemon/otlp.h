/*
 * OTLP profiles: the [export.otlp] settings (otlp_config.c), a history
 * range as an ExportProfilesServiceRequest (otlp_request.c), and its POST
 * to a collector (otlp_post.c).
 */
#ifndef PYPROFD_OTLP_H
#define PYPROFD_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "labels.h"

struct store_process;
struct store_frame;
struct store_reader;

/* [export.otlp]: where and how the OTLP sender sends profiles. */
#define OTLP_DEFAULT_INTERVAL_S 15
#define OTLP_DEFAULT_TIMEOUT_S 10
struct otlp_config {
	char *endpoint; /* http(s)://host:port[/path]; NULL: no export */
	double interval_s, timeout_s;
	bool gzip;
	struct labels headers;  /* sent with every request (auth, tenant) */
	struct labels resource; /* extra resource attributes (resource.KEY = VALUE) */
};
void otlp_config_init(struct otlp_config *oc);
void otlp_config_free(struct otlp_config *oc); /* and back to the defaults */
/* One setting of [export.otlp] by name; 0, or -1 when the name or value is bad. */
int otlp_config_set(struct otlp_config *oc, const char *name, const char *value);
/* A copy into to, which holds nothing (initialised or freed); 0, or -1 with to empty. */
int otlp_config_copy(struct otlp_config *to, const struct otlp_config *from);
bool otlp_config_equal(const struct otlp_config *a, const struct otlp_config *b);
/* Once, before any thread sends (libcurl's global state). */
void otlp_global_init(void);
/*
 * One ExportProfilesServiceRequest: one process (its resource) over
 * [from, until), its samples added one (thread, stack) at a time.
 */
struct otlp_request;
struct otlp_request *otlp_request_new(const struct otlp_config *oc, const char *host,
                                      const struct store_process *p, const char *mode,
                                      unsigned rate_hz, int64_t from, int64_t until);
/* frames root first, as the history gives them; -1 out of memory (the request is then spoilt). */
int otlp_request_sample(struct otlp_request *q, uint64_t thread_id, const struct store_frame *frames,
                        uint32_t depth, uint64_t count);
uint64_t otlp_request_samples(const struct otlp_request *q);
/* The request's bytes (malloc'd).  0, or -1 out of memory. */
int otlp_request_pack(struct otlp_request *q, uint8_t **out, size_t *len);
void otlp_request_free(struct otlp_request *q);
/* A target's samples in buckets starting in [from, until) as a request; NULL and why. */
struct otlp_request *otlp_request_from_history(struct store_reader *r, const struct otlp_config *oc,
                                               const char *host, int64_t target_id, int64_t from,
                                               int64_t until, char *why, size_t why_len);
/*
 * POST a packed request to endpoint's /v1development/profiles, as oc says
 * (compression, headers, timeout), on the HTTP client *handle (made on
 * first use, reused).  0 when the collector took it all; -1 and why on a
 * failure to connect, a timeout, a status other than 2xx, a partial
 * success, or cancelled() turning true.  *wire_bytes grows by the body sent.
 */
int otlp_post(void **handle, const struct otlp_config *oc, const char *endpoint, const uint8_t *body,
              size_t len, bool (*cancelled)(void *ctx), void *cancel_ctx, uint64_t *wire_bytes,
              char *why, size_t why_len);
void otlp_post_free(void **handle);

#endif
