/*
 * Backfills: a range of the history sent by hand (`pyprofd-ctl export`) to
 * a collector, one request per process, each backfill a job (jobs.c).  The
 * configured headers (credentials) go to the configured collector alone.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "clock.h"
#include "pyprofd.h"
#include "store.h"

/* A backfill tries each request this many times before it gives up. */
#define BACKFILL_TRIES 3

/* What one backfill sends, and where. */
struct backfill {
	struct store_writer *writer;
	const char *host; /* the sender's: jobs end before it stops */
	uint64_t request_id;
	struct otlp_config oc;
	struct store_query q;
	struct labels labels; /* the selection's, which q borrows */
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
		                                                   until, b->q.no_idle, why, sizeof why);
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
	labels_free(&b->labels);
	free(b);
}

static const struct job_type backfill_job_type = {"otlp-backfill", backfill_run, backfill_free};

Pyprofd__ErrorCode otlp_backfill_start(struct otlp_sender *x, struct jobs *js, uint64_t client_serial,
                                       uid_t uid, const Pyprofd__Request *req, char *why,
                                       size_t why_len)
{
	const Pyprofd__OtlpExportRequest *r = req->otlp_export;
	/* The history's own bound, said before a job starts, as a query's is. */
	if (r->n_labels > STORE_MAX_LABELS || r->pid < 0) {
		snprintf(why, why_len, "an export needs a valid pid and at most %d labels", STORE_MAX_LABELS);
		return PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	if (!x->writer) {
		snprintf(why, why_len, "this daemon keeps no history");
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	}
	if (jobs_count(js, &backfill_job_type, uid).all >= OTLP_BACKFILLS_MAX) {
		snprintf(why, why_len, "%u backfills run already; try again when one is done",
		         OTLP_BACKFILLS_MAX);
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
	/* A backfill sends what the sender would: the request has no say on idle samples. */
	b->q.no_idle = x->no_idle;
	pthread_mutex_unlock(&x->lock);
	b->q.pid = r->pid;
	b->q.from_unix = r->from_unix;
	b->q.until_unix = r->until_unix ? r->until_unix : clock_wall_s();
	bool ok = copied == 0;
	for (size_t i = 0; ok && i < r->n_labels; i++)
		ok = labels_add(&b->labels, r->labels[i]->key, r->labels[i]->value) == 0;
	if (!ok) {
		snprintf(why, why_len, "out of memory");
		backfill_free(b);
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	}
	b->q.nlabels = b->labels.n;
	b->q.label_keys = (const char *const *)b->labels.keys;
	b->q.label_values = (const char *const *)b->labels.values;
	if (jobs_start(js, &backfill_job_type, b, client_serial, uid, why, why_len) != 0)
		return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
	return PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED;
}
