/*
 * The OTLP exporter: a thread of its own that sends each interval's
 * samples from the history to the collector of [export.otlp], and
 * backfills asked for by hand, each a job (jobs.c).  The loop only
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
 * EXPORTER_ROUND_S of history, so catching up after a long outage goes a
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
#define EXPORTER_ROUND_S 600
#define EXPORTER_BACKOFF_MIN_S 1.0
#define EXPORTER_BACKOFF_MAX_S 60.0
/* A backfill tries each request this many times before it gives up. */
#define BACKFILL_TRIES 3

/* The error of the last attempt, for status and the log (under the lock). */
static void exporter_set_error(struct exporter *x, const char *why)
{
	snprintf(x->last_error, sizeof x->last_error, "%s", why);
}

static bool exporter_cancelled(void *ctx)
{
	struct exporter *x = ctx;
	pthread_mutex_lock(&x->lock);
	bool stop = x->stop || x->config_serial != x->round_serial;
	pthread_mutex_unlock(&x->lock);
	return stop;
}

/* The store connections of the thread, opened when first needed. */
static int exporter_connect(struct exporter *x, char *why, size_t why_len)
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
static void exporter_disconnect(struct exporter *x)
{
	store_sinks_close(x->store);
	store_reader_close(x->reader);
	x->store = NULL;
	x->reader = NULL;
}

struct exporter_due_list {
	struct store_sink_due *v;
	size_t n, cap;
};

static int exporter_collect_due(void *ctx, const struct store_sink_due *d)
{
	struct exporter_due_list *l = ctx;
	if (array_reserve((void **)&l->v, &l->cap, l->n, sizeof *l->v, NULL) < 0)
		return 1;
	l->v[l->n++] = *d;
	return 0;
}

/* One target's range as one request, sent.  0, or -1 and why. */
static int exporter_send_target(struct exporter *x, const struct otlp_config *oc, int64_t target_id,
                                int64_t from, int64_t until, uint64_t *samples, char *why,
                                size_t why_len)
{
	struct otlp_request *q = otlp_request_from_history(x->reader, oc, x->host, target_id, from,
	                                                   until, why, why_len);
	if (!q)
		return -1;
	uint8_t *body = NULL;
	size_t len = 0;
	int rc = -1;
	uint64_t bytes = 0;
	if (otlp_request_pack(q, &body, &len) < 0)
		snprintf(why, why_len, "out of memory");
	else
		rc = otlp_post(&x->http, oc, oc->endpoint, body, len, exporter_cancelled, x, &bytes, why,
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
 * yet, up to EXPORTER_ROUND_S of it.  0 when the sink is up to date, 1
 * when more is due at once, -1 and why on a failure.
 */
static int exporter_round(struct exporter *x, const struct otlp_config *oc, int64_t flushed_through,
                          char *why, size_t why_len)
{
	/* What the loop handed the writer up to the last flush round is in the file once this returns. */
	store_writer_flush(x->writer);
	struct store_writer_status ws;
	store_writer_status(x->writer, &ws);
	/* The file was replaced under the writer: this thread's connections still read the old one. */
	if (ws.file_changes != x->file_changes) {
		exporter_disconnect(x);
		x->file_changes = ws.file_changes;
	}
	if (!ws.open || ws.failing || ws.pending_batches) {
		snprintf(why, why_len, "the history is not written yet%s%.200s", ws.failing ? ": " : "",
		         ws.failing ? ws.last_error : "");
		return -1;
	}
	if (exporter_connect(x, why, why_len) < 0)
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
	if (until - sent_until > EXPORTER_ROUND_S)
		until = (sent_until + EXPORTER_ROUND_S) / bucket * bucket;
	if (until <= sent_until)
		until = sent_until + bucket;
	struct exporter_due_list due = {0};
	if (store_sink_due(x->store, sink, until, exporter_collect_due, &due, NULL, &err) < 0) {
		free(due.v);
		goto store_failed;
	}
	int rc = 0;
	for (size_t i = 0; i < due.n && rc == 0; i++) {
		uint64_t samples = 0;
		if (exporter_send_target(x, oc, due.v[i].target_id, due.v[i].from, until, &samples, why,
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
	exporter_disconnect(x);
	return -1;
}

/* Waits on the condition until the monotonic time `until` (or a signal); under the lock. */
static void exporter_wait(struct exporter *x, double until)
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

static void *exporter_main(void *arg)
{
	struct exporter *x = arg;
	/* Its own name, so top -H and the benchmark tell its cost from the loop's. */
	pthread_setname_np(pthread_self(), "otlp-export");
	struct otlp_config oc;
	otlp_config_init(&oc);
	double backoff = 0, next = 0;
	pthread_mutex_lock(&x->lock);
	while (!x->stop) {
		double now = clock_mono_s();
		if (!x->config.endpoint || !x->flushed_through) {
			exporter_wait(x, 0);
			continue;
		}
		if (x->round_serial != x->config_serial) {
			/* A new configuration starts afresh: now, not after the old one's backoff. */
			otlp_config_free(&oc);
			if (otlp_config_copy(&oc, &x->config) < 0) {
				exporter_set_error(x, "out of memory");
				exporter_wait(x, now + EXPORTER_BACKOFF_MAX_S);
				continue;
			}
			x->round_serial = x->config_serial;
			backoff = next = 0;
			x->failing = false;
			x->last_error[0] = '\0';
		}
		if (now < next) {
			exporter_wait(x, next);
			continue;
		}
		int64_t flushed = x->flushed_through;
		uint64_t serial = x->round_serial;
		pthread_mutex_unlock(&x->lock);
		char why[256] = "";
		int rc = exporter_round(x, &oc, flushed, why, sizeof why);
		pthread_mutex_lock(&x->lock);
		if (serial != x->config_serial)
			continue; /* reconfigured meanwhile: what failed was cancelled */
		if (rc < 0) {
			backoff = backoff ? backoff * 2 : EXPORTER_BACKOFF_MIN_S;
			if (backoff > EXPORTER_BACKOFF_MAX_S)
				backoff = EXPORTER_BACKOFF_MAX_S;
			next = clock_mono_s() + backoff;
			x->requests_failed++;
			if (!x->failing || strcmp(x->last_error, why) != 0)
				log_warn("export: %s; trying again in %.0f s", why, backoff);
			x->failing = true;
			exporter_set_error(x, why);
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
	exporter_disconnect(x);
	otlp_post_free(&x->http);
	return NULL;
}

/* ---- backfills: each a job (jobs.c) ---- */

/* What one backfill sends, and where. */
struct backfill {
	struct store_writer *writer;
	const char *host; /* the exporter's: jobs end before it stops */
	uint64_t request_id;
	struct otlp_config oc;
	struct store_query q;
	char **label_keys, **label_values;
};

struct backfill_targets {
	int64_t *ids;
	size_t n, cap;
};

static int backfill_target(void *ctx, const struct store_process *p)
{
	struct backfill_targets *t = ctx;
	if (array_reserve((void **)&t->ids, &t->cap, t->n, sizeof *t->ids, NULL) < 0)
		return 1;
	t->ids[t->n++] = p->target_id;
	return 0;
}

static bool backfill_cancelled(void *job)
{
	return job_cancelled(job);
}

/* Every selected process's range, one request each; its result or why it stopped as the answer. */
static int backfill_run(struct job *job, void *data)
{
	struct backfill *b = data;
	struct store_error err = {{0}};
	struct backfill_targets ts = {0};
	void *http = NULL;
	char error[256] = "";
	uint32_t processes = 0;
	uint64_t samples = 0, bytes = 0;
	struct store_reader *r = store_reader_open_writer(b->writer, &err);
	store_writer_flush(b->writer);
	if (!r || store_query_processes(r, &b->q, backfill_target, &ts, &err) < 0) {
		snprintf(error, sizeof error, "reading the history: %.200s",
		         err.msg[0] ? err.msg : "out of memory");
		goto done;
	}
	int64_t from = (int64_t)floor(b->q.from_unix);
	int64_t until = (int64_t)ceil(b->q.until_unix);
	for (size_t i = 0; i < ts.n && !error[0]; i++) {
		char why[256] = "";
		struct otlp_request *q = otlp_request_from_history(r, &b->oc, b->host, ts.ids[i], from,
		                                                   until, why, sizeof why);
		uint8_t *body = NULL;
		size_t len = 0;
		if (!q || otlp_request_pack(q, &body, &len) < 0) {
			snprintf(error, sizeof error, "%.200s", q ? "out of memory" : why);
			otlp_request_free(q);
			break;
		}
		int rc = -1;
		for (int attempt = 0; attempt < BACKFILL_TRIES && rc < 0 && !job_cancelled(job); attempt++) {
			if (attempt)
				sleep((unsigned)attempt);
			rc = otlp_post(&http, &b->oc, b->oc.endpoint, body, len, backfill_cancelled, job, &bytes,
			               why, sizeof why);
		}
		if (rc < 0)
			snprintf(error, sizeof error, "%.200s (after %u processes)", why, processes);
		else {
			processes++;
			samples += otlp_request_samples(q);
		}
		free(body);
		otlp_request_free(q);
	}
done:
	free(ts.ids);
	store_reader_close(r);
	otlp_post_free(&http);
	Pyprofd__Response resp = PYPROFD__RESPONSE__INIT;
	Pyprofd__Error e = PYPROFD__ERROR__INIT;
	Pyprofd__OtlpExportResult res = PYPROFD__OTLP_EXPORT_RESULT__INIT;
	resp.id = b->request_id;
	if (error[0])
		wire_error(&resp, &e, b->request_id, PYPROFD__ERROR_CODE__ERROR_INTERNAL, error);
	else {
		res.processes = processes;
		res.samples = samples;
		res.bytes = bytes;
		resp.result_case = PYPROFD__RESPONSE__RESULT_OTLP_EXPORT;
		resp.otlp_export = &res;
	}
	return job_emit(job, &resp);
}

static void backfill_free(void *data)
{
	struct backfill *b = data;
	otlp_config_free(&b->oc);
	for (size_t i = 0; i < b->q.nlabels; i++) {
		free(b->label_keys[i]);
		free(b->label_values[i]);
	}
	free(b->label_keys);
	free(b->label_values);
	free(b);
}

static const struct job_type backfill_job_type = {"otlp-backfill", backfill_run, backfill_free};

Pyprofd__ErrorCode exporter_backfill(struct exporter *x, struct jobs *js, uint64_t client_serial,
                                     uid_t uid, const Pyprofd__Request *req, char *why,
                                     size_t why_len)
{
	const Pyprofd__OtlpExportRequest *r = req->otlp_export;
	if (!x->writer) {
		snprintf(why, why_len, "this daemon keeps no history");
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	}
	if (jobs_count(js, &backfill_job_type, uid).all >= EXPORTER_JOBS_MAX) {
		snprintf(why, why_len, "%u backfills run already; try again when one is done",
		         EXPORTER_JOBS_MAX);
		return PYPROFD__ERROR_CODE__ERROR_LIMIT;
	}
	struct backfill *b = calloc(1, sizeof *b);
	if (!b) {
		snprintf(why, why_len, "out of memory");
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	}
	b->writer = x->writer;
	b->host = x->host;
	b->request_id = req->id;
	otlp_config_init(&b->oc);
	if (otlp_config_set(&b->oc, "endpoint", r->endpoint) < 0) {
		snprintf(why, why_len, "otlp_export.endpoint '%.200s' is not an http:// or https:// URL",
		         r->endpoint);
		backfill_free(b);
		return PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	/* The configured headers (credentials) go to the configured collector alone. */
	pthread_mutex_lock(&x->lock);
	int copied = 0;
	if (x->config.endpoint && strcmp(x->config.endpoint, r->endpoint) == 0) {
		otlp_config_free(&b->oc);
		copied = otlp_config_copy(&b->oc, &x->config);
	} else {
		b->oc.timeout_s = x->config.timeout_s;
		b->oc.gzip = x->config.gzip;
	}
	pthread_mutex_unlock(&x->lock);
	b->q.pid = r->pid;
	b->q.from_unix = r->from_unix;
	b->q.until_unix = r->until_unix ? r->until_unix : clock_wall_s();
	if (copied < 0 ||
	    (r->n_labels && (!(b->label_keys = calloc(r->n_labels, sizeof *b->label_keys)) ||
	                     !(b->label_values = calloc(r->n_labels, sizeof *b->label_values))))) {
		snprintf(why, why_len, "out of memory");
		backfill_free(b);
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	}
	for (size_t i = 0; i < r->n_labels; i++) {
		b->q.nlabels = i + 1;
		if (!(b->label_keys[i] = strdup(r->labels[i]->key)) ||
		    !(b->label_values[i] = strdup(r->labels[i]->value))) {
			snprintf(why, why_len, "out of memory");
			backfill_free(b);
			return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
		}
	}
	b->q.label_keys = (const char *const *)b->label_keys;
	b->q.label_values = (const char *const *)b->label_values;
	if (jobs_start(js, &backfill_job_type, b, client_serial, uid, why, why_len) != 0)
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	return PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED;
}

/* ---- on the loop ---- */

int exporter_start(struct exporter *x, struct store_writer *writer, const struct config *c)
{
	memset(x, 0, sizeof *x);
	x->writer = writer;
	x->bucket_seconds = c->bucket_seconds;
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
	if (pthread_create(&x->thread, NULL, exporter_main, x) != 0)
		return -1;
	x->running = true;
	if (x->config.endpoint)
		log_info("export: OTLP profiles to %s every %.0f s", x->config.endpoint, x->config.interval_s);
	return 0;
}

void exporter_configure(struct exporter *x, const struct config *c)
{
	pthread_mutex_lock(&x->lock);
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

void exporter_flushed(struct exporter *x, double now)
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

void exporter_stop(struct exporter *x)
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

void exporter_status(struct exporter *x, Pyprofd__StatusResult *out, struct arena *a)
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
