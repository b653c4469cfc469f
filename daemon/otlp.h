/*
 * OTLP profiles: the [export.otlp] settings (otlp_config.c), a history
 * range as an ExportProfilesServiceRequest (otlp_request.c), its POST to a
 * collector (otlp_post.c), the sender that ships the history as it is
 * written (otlp_sender.c) and the backfills asked for by hand
 * (otlp_backfill.c).
 */
#ifndef PYPROFD_OTLP_H
#define PYPROFD_OTLP_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "labels.h"
#include "pyprofd.pb-c.h"

struct store_process;
struct store_frame;
struct store_context;
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
/*
 * A sample's count of a thread and stack: frames root first, as the history
 * gives them; the thread's name (NULL or "": none) is its thread.name; the
 * request it ran in (NULL: none): its span as the sample's Link, its labels
 * as attributes.  -1 out of memory (the request is then spoilt).
 */
int otlp_request_sample(struct otlp_request *q, uint64_t thread_id, const char *thread_name,
                        const struct store_context *context, const struct store_frame *frames,
                        uint32_t depth, uint64_t count);
/* Bytes of an attribute's string value kept at most (a thread's name is far shorter). */
#define OTLP_ATTRIBUTE_VALUE_MAX 256
uint64_t otlp_request_samples(const struct otlp_request *q);
/* The request's bytes (malloc'd).  0, or -1 out of memory. */
int otlp_request_pack(struct otlp_request *q, uint8_t **out, size_t *len);
void otlp_request_free(struct otlp_request *q);
/*
 * A target's samples in buckets starting in [from, until) as a request,
 * without those of waiting threads if no_idle; NULL and why.
 */
struct otlp_request *otlp_request_from_history(struct store_reader *r, const struct otlp_config *oc,
                                               const char *host, int64_t target_id, int64_t from,
                                               int64_t until, bool no_idle, char *why,
                                               size_t why_len);
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
/*
 * The seconds the last answer on handle asked to wait before the next
 * request (Retry-After, as a collector answers 429 or 503), 0 if it asked
 * nothing.
 */
double otlp_post_retry_after(void *handle);

/* ---- otlp_sender.c: the sender of [export.otlp], on a thread of its own ---- */

struct config;
struct jobs;
struct store_writer;
struct arena;
struct store_sinks;
struct otlp_sender {
	struct store_writer *writer; /* NULL: no history, nothing to send */
	unsigned bucket_seconds;
	char host[256];              /* host.name */
	pthread_t thread;
	bool running;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	/* Under the lock. */
	struct otlp_config config;
	bool no_idle; /* [sampling] idle = drop: waiting threads' samples are not sent */
	uint64_t config_serial, round_serial; /* the configuration's, and the one the thread sends by */
	bool stop;
	int64_t flushed_through; /* every sample of a second before this is handed to the writer */
	double last_success;     /* unix time */
	char last_error[256];
	bool failing;
	uint64_t backlog_samples, samples_sent, requests_failed, bytes_sent;
	int64_t sent_until;
	/* The thread's own. */
	struct store_sinks *store;
	struct store_reader *reader;
	uint64_t file_changes; /* the writer's count when they were opened */
	void *http;
};
/* Start the thread (idle while no endpoint is configured).  0, or -1. */
int otlp_sender_start(struct otlp_sender *x, struct store_writer *writer, const struct config *c);
/*
 * [export.otlp] as reloaded: a change starts the sender afresh, cancelling
 * what it was sending.  [sampling] idle applies from the next request on.
 */
void otlp_sender_configure(struct otlp_sender *x, const struct config *c);
/* After a flush round at loop time now: the history is complete up to its second. */
void otlp_sender_flushed(struct otlp_sender *x, double now);
/* Stop the thread (cancelling what it sends) and wait for it; backfills are the jobs'. */
void otlp_sender_stop(struct otlp_sender *x);
void otlp_sender_status(struct otlp_sender *x, Pyprofd__StatusResult *out, struct arena *a);

/* ---- otlp_backfill.c ---- */

/* Backfills running at once. */
#define OTLP_BACKFILLS_MAX 2
/*
 * Start a backfill (req->otlp_export) as a job: ERROR_UNSPECIFIED, and the
 * answer goes to the client later; or the code of an error with why.  The
 * sender lends its history, its host name and, for its own collector, its
 * headers.
 */
Pyprofd__ErrorCode otlp_backfill_start(struct otlp_sender *x, struct jobs *js,
                                       uint64_t client_serial, uid_t uid,
                                       const Pyprofd__Request *req, char *why, size_t why_len);

#endif
