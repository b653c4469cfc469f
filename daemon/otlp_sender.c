/*
 * The OTLP sender: a thread of its own that sends each interval's samples
 * from the history to the collector of [export.otlp].  (Backfills asked
 * for by hand are jobs of their own: otlp_backfill.c.)  The loop only
 * tells it how far the history is complete (after each flush round), hands
 * it the configuration, and reads its status: a collector that never
 * answers holds these threads, never the loop.
 *
 * The history is the source of truth.  An interval is sent from the file,
 * never from memory, and only once every sample of it is there: buckets
 * that end before the last flush round, once the writer has written what
 * that round handed it.  What each endpoint (a sink) was sent is kept in
 * the same file (store_export_*), marked after the collector took it, so
 * an outage, a reload or a restart (kill -9 included) resumes where the
 * collector stopped taking: nothing is lost and nothing is sent twice,
 * save what a kill between the collector's answer and the mark (a few
 * milliseconds) sends again.  Each failure waits longer before the next
 * try (1 s, doubling, at most a minute), and a round sends at most
 * SENDER_ROUND_S of history, so catching up after a long outage goes a
 * bounded piece at a time.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "pyprofd.h"
#include "store.h"

/* History one round sends at most: catching up goes a piece at a time. */
#define SENDER_ROUND_S 600
#define SENDER_BACKOFF_MIN_S 1.0
#define SENDER_BACKOFF_MAX_S 60.0
/* The longest wait a collector's Retry-After is taken for: past it, a misconfigured one would stall the export. */
#define SENDER_RETRY_AFTER_MAX_S 3600.0

/* The error of the last attempt, for status and the log (under the lock). */
static void sender_set_error(struct otlp_sender *x, const char *why)
{
	snprintf(x->last_error, sizeof x->last_error, "%s", why);
}

static bool sender_cancelled(void *ctx)
{
	struct otlp_sender *x = ctx;
	pthread_mutex_lock(&x->lock);
	bool stop = x->stop || x->config_serial != x->round_serial;
	pthread_mutex_unlock(&x->lock);
	return stop;
}

/* The store connections of the thread, opened when first needed. */
static int sender_connect(struct otlp_sender *x, char *why, size_t why_len)
{
	struct store_error err = {{0}};
	if (!x->store && !(x->store = store_sinks_open(x->writer, &err))) {
		snprintf(why, why_len, "opening the history: %.200s", err.msg);
		return -1;
	}
	if (!x->reader && !(x->reader = store_reader_open_writer(x->writer, &err))) {
		snprintf(why, why_len, "opening the history: %.200s", err.msg);
		return -1;
	}
	return 0;
}

/* Let go of the connections (after an error: the next round opens them again). */
static void sender_disconnect(struct otlp_sender *x)
{
	store_sinks_close(x->store);
	store_reader_close(x->reader);
	x->store = NULL;
	x->reader = NULL;
}

struct sender_due_list {
	struct store_sink_due *v;
	size_t n, cap;
};

static int sender_collect_due(void *ctx, const struct store_sink_due *d)
{
	struct sender_due_list *l = ctx;
	if (array_reserve((void **)&l->v, &l->cap, l->n, sizeof *l->v, NULL) < 0)
		return 1;
	l->v[l->n++] = *d;
	return 0;
}

/* One target's range as one request, sent.  0, or -1 and why. */
static int sender_send_target(struct otlp_sender *x, const struct otlp_config *oc, int64_t target_id,
                              int64_t from, int64_t until, uint64_t *samples, char *why,
                              size_t why_len)
{
	pthread_mutex_lock(&x->lock);
	bool no_idle = x->no_idle;
	pthread_mutex_unlock(&x->lock);
	struct otlp_request *q = otlp_request_from_history(x->reader, oc, x->host, target_id, from,
	                                                   until, no_idle, why, why_len);
	if (!q)
		return -1;
	uint8_t *body = NULL;
	size_t len = 0;
	int rc = -1;
	uint64_t bytes = 0;
	if (otlp_request_pack(q, &body, &len) < 0)
		snprintf(why, why_len, "out of memory");
	else
		rc = otlp_post(&x->http, oc, oc->endpoint, body, len, sender_cancelled, x, &bytes, why,
		               why_len);
	*samples = otlp_request_samples(q);
	free(body);
	otlp_request_free(q);
	pthread_mutex_lock(&x->lock);
	x->bytes_sent += bytes;
	pthread_mutex_unlock(&x->lock);
	return rc;
}

/*
 * One round: what the history holds complete and the sink was not sent
 * yet, up to SENDER_ROUND_S of it.  0 when the sink is up to date, 1
 * when more is due at once, -1 and why on a failure.
 */
static int sender_round(struct otlp_sender *x, const struct otlp_config *oc, int64_t flushed_through,
                        char *why, size_t why_len)
{
	/* What the loop handed the writer up to the last flush round is in the file once this returns. */
	store_writer_flush(x->writer);
	struct store_writer_status ws;
	store_writer_status(x->writer, &ws);
	/* The file was replaced under the writer: this thread's connections still read the old one. */
	if (ws.file_changes != x->file_changes) {
		sender_disconnect(x);
		x->file_changes = ws.file_changes;
	}
	if (!ws.open || ws.failing || ws.pending_batches) {
		snprintf(why, why_len, "the history is not written yet%s%.200s", ws.failing ? ": " : "",
		         ws.failing ? ws.last_error : "");
		return -1;
	}
	if (sender_connect(x, why, why_len) < 0)
		return -1;
	int64_t bucket = x->bucket_seconds ? x->bucket_seconds : 10;
	int64_t complete = flushed_through / bucket * bucket;
	int64_t sink, sent_until;
	struct store_error err = {{0}};
	if (store_sink_get(x->store, oc->endpoint, complete, clock_wall_s(), &sink, &sent_until,
	                      &err) < 0)
		goto store_failed;
	uint64_t backlog = 0;
	if (complete > sent_until &&
	    store_sink_due(x->store, sink, complete, NULL, NULL, &backlog, &err) < 0)
		goto store_failed;
	pthread_mutex_lock(&x->lock);
	x->backlog_samples = backlog;
	x->sent_until = sent_until;
	pthread_mutex_unlock(&x->lock);
	if (complete <= sent_until)
		return 0;
	int64_t until = complete;
	if (until - sent_until > SENDER_ROUND_S)
		until = (sent_until + SENDER_ROUND_S) / bucket * bucket;
	if (until <= sent_until)
		until = sent_until + bucket;
	struct sender_due_list due = {0};
	if (store_sink_due(x->store, sink, until, sender_collect_due, &due, NULL, &err) < 0) {
		free(due.v);
		goto store_failed;
	}
	int rc = 0;
	for (size_t i = 0; i < due.n && rc == 0; i++) {
		uint64_t samples = 0;
		if (sender_send_target(x, oc, due.v[i].target_id, due.v[i].from, until, &samples, why,
		                         why_len) < 0) {
			rc = -1;
			break;
		}
		/* Taken: marked at once, so a kill from here on does not send it again. */
		if (store_sink_mark(x->store, sink, due.v[i].target_id, until, &err) < 0) {
			free(due.v);
			goto store_failed;
		}
		pthread_mutex_lock(&x->lock);
		x->samples_sent += samples;
		x->last_success = clock_wall_s();
		x->backlog_samples -= x->backlog_samples < due.v[i].samples ? x->backlog_samples
		                                                             : due.v[i].samples;
		pthread_mutex_unlock(&x->lock);
	}
	free(due.v);
	if (rc < 0)
		return -1;
	if (store_sink_advance(x->store, sink, until, &err) < 0)
		goto store_failed;
	pthread_mutex_lock(&x->lock);
	x->sent_until = until;
	if (until >= complete)
		x->backlog_samples = 0;
	pthread_mutex_unlock(&x->lock);
	return until < complete ? 1 : 0;
store_failed:
	snprintf(why, why_len, "the history: %.200s", err.msg);
	sender_disconnect(x);
	return -1;
}

/* Waits on the condition until the monotonic time `until` (or a signal); under the lock. */
static void sender_wait(struct otlp_sender *x, double until)
{
	if (until <= 0) {
		pthread_cond_wait(&x->wake, &x->lock);
		return;
	}
	struct timespec ts;
	ts.tv_sec = (time_t)until;
	ts.tv_nsec = (long)((until - floor(until)) * 1e9);
	pthread_cond_timedwait(&x->wake, &x->lock, &ts);
}

static void *sender_main(void *arg)
{
	struct otlp_sender *x = arg;
	/* Its own name, so top -H and the benchmark tell its cost from the loop's. */
	pthread_setname_np(pthread_self(), "otlp-export");
	struct otlp_config oc;
	otlp_config_init(&oc);
	double backoff = 0, next = 0;
	pthread_mutex_lock(&x->lock);
	while (!x->stop) {
		double now = clock_mono_s();
		if (!x->config.endpoint || !x->flushed_through) {
			sender_wait(x, 0);
			continue;
		}
		if (x->round_serial != x->config_serial) {
			/* A new configuration starts afresh: now, not after the old one's backoff. */
			otlp_config_free(&oc);
			if (otlp_config_copy(&oc, &x->config) < 0) {
				sender_set_error(x, "out of memory");
				sender_wait(x, now + SENDER_BACKOFF_MAX_S);
				continue;
			}
			x->round_serial = x->config_serial;
			backoff = next = 0;
			x->failing = false;
			x->last_error[0] = '\0';
		}
		if (now < next) {
			sender_wait(x, next);
			continue;
		}
		int64_t flushed = x->flushed_through;
		uint64_t serial = x->round_serial;
		pthread_mutex_unlock(&x->lock);
		char why[256] = "";
		int rc = sender_round(x, &oc, flushed, why, sizeof why);
		pthread_mutex_lock(&x->lock);
		if (serial != x->config_serial)
			continue; /* reconfigured meanwhile: what failed was cancelled */
		if (rc < 0) {
			backoff = backoff ? backoff * 2 : SENDER_BACKOFF_MIN_S;
			if (backoff > SENDER_BACKOFF_MAX_S)
				backoff = SENDER_BACKOFF_MAX_S;
			/* A collector that says when to come back (429, 503) is taken at its word. */
			double wait = otlp_post_retry_after(x->http);
			if (wait > SENDER_RETRY_AFTER_MAX_S)
				wait = SENDER_RETRY_AFTER_MAX_S;
			if (wait < backoff)
				wait = backoff;
			next = clock_mono_s() + wait;
			x->requests_failed++;
			if (!x->failing || strcmp(x->last_error, why) != 0)
				log_warn("export: %s; trying again in %.0f s", why, wait);
			x->failing = true;
			sender_set_error(x, why);
		} else {
			if (x->failing)
				log_info("export: %s takes profiles again", oc.endpoint);
			x->failing = false;
			x->last_error[0] = '\0';
			backoff = 0;
			next = rc > 0 ? 0 : clock_mono_s() + oc.interval_s;
		}
	}
	pthread_mutex_unlock(&x->lock);
	otlp_config_free(&oc);
	sender_disconnect(x);
	otlp_post_free(&x->http);
	return NULL;
}

/* ---- on the loop ---- */

int otlp_sender_start(struct otlp_sender *x, struct store_writer *writer, const struct config *c)
{
	memset(x, 0, sizeof *x);
	x->writer = writer;
	x->bucket_seconds = c->bucket_seconds;
	x->no_idle = c->drop_idle;
	otlp_config_init(&x->config);
	if (gethostname(x->host, sizeof x->host - 1) != 0)
		x->host[0] = '\0';
	otlp_global_init();
	pthread_condattr_t attr;
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	int rc = pthread_cond_init(&x->wake, &attr);
	pthread_condattr_destroy(&attr);
	if (rc != 0 || pthread_mutex_init(&x->lock, NULL) != 0)
		return -1;
	if (otlp_config_copy(&x->config, &c->otlp) < 0)
		return -1;
	x->config_serial = 1;
	if (!writer)
		return 0;
	if (pthread_create(&x->thread, NULL, sender_main, x) != 0)
		return -1;
	x->running = true;
	if (x->config.endpoint)
		log_info("export: OTLP profiles to %s every %.0f s", x->config.endpoint, x->config.interval_s);
	return 0;
}

void otlp_sender_configure(struct otlp_sender *x, const struct config *c)
{
	pthread_mutex_lock(&x->lock);
	/* What was sent stays sent: the setting changes what goes out next, not the history. */
	x->no_idle = c->drop_idle;
	if (!otlp_config_equal(&x->config, &c->otlp)) {
		struct otlp_config fresh;
		if (otlp_config_copy(&fresh, &c->otlp) == 0) {
			otlp_config_free(&x->config);
			x->config = fresh;
			x->config_serial++;
			if (fresh.endpoint)
				log_info("export: OTLP profiles to %s every %.0f s", fresh.endpoint,
				         fresh.interval_s);
			else
				log_info("export: off");
		} else
			log_error("export: out of memory taking the new [export.otlp]; keeping the old");
		pthread_cond_signal(&x->wake);
	}
	pthread_mutex_unlock(&x->lock);
}

void otlp_sender_flushed(struct otlp_sender *x, double now)
{
	pthread_mutex_lock(&x->lock);
	int64_t second = (int64_t)floor(now);
	if (second > x->flushed_through) {
		bool first = !x->flushed_through;
		x->flushed_through = second;
		/* The first round can go at once; later ones keep their interval. */
		if (first)
			pthread_cond_signal(&x->wake);
	}
	pthread_mutex_unlock(&x->lock);
}

void otlp_sender_stop(struct otlp_sender *x)
{
	pthread_mutex_lock(&x->lock);
	x->stop = true;
	pthread_cond_broadcast(&x->wake);
	pthread_mutex_unlock(&x->lock);
	if (x->running)
		pthread_join(x->thread, NULL);
	x->running = false;
	otlp_config_free(&x->config);
	pthread_cond_destroy(&x->wake);
	pthread_mutex_destroy(&x->lock);
}

void otlp_sender_status(struct otlp_sender *x, Pyprofd__StatusResult *out, struct arena *a)
{
	pthread_mutex_lock(&x->lock);
	out->export_endpoint = arena_strdup(a, x->config.endpoint ? x->config.endpoint : "");
	out->export_last_success_unix = x->last_success;
	out->export_backlog_samples = x->backlog_samples;
	out->export_last_error = arena_strdup(a, x->last_error);
	out->export_sent_until_unix = (double)x->sent_until;
	out->export_samples_sent = x->samples_sent;
	out->export_requests_failed = x->requests_failed;
	out->export_bytes_sent = x->bytes_sent;
	out->export_failing = x->failing;
	pthread_mutex_unlock(&x->lock);
	if (!out->export_endpoint)
		out->export_endpoint = (char *)"";
	if (!out->export_last_error)
		out->export_last_error = (char *)"";
}
