/*
 * Background jobs (jobs.h).  A job's thread packs its answer into framed
 * parts and queues them, at most JOB_QUEUE_BYTES at a time, woken by an
 * ev_async; the loop hands them to the sink while the client takes them.
 * A client that does not read therefore holds its job's thread, not the
 * daemon's memory; a client that leaves cancels its job at the next part.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define JOBS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JOBS_ASAN 1
#endif
#endif
#ifndef JOBS_ASAN
#define JOBS_ASAN 0
#endif

#include "jobs.h"
#include "wire.h"

/* A job's thread waits while this much of its answer waits for the loop. */
#define JOB_QUEUE_BYTES (2u << 20)

/* One framed response of an answer, on its way to the loop. */
struct job_part {
	struct job_part *next;
	size_t len;
	uint8_t bytes[];
};

struct job {
	struct job *next; /* in the running list, on the loop */
	struct jobs *jobs;
	const struct job_type *type;
	void *data;
	pthread_t thread;
	uint64_t client_serial;
	uid_t uid;
	/* Under the jobs' lock: the parts not taken yet, and how the job stands. */
	struct job_part *parts, *parts_tail;
	size_t queued_bytes;
	bool cancelled; /* set by the loop: the client left, or the daemon stops */
	bool finished;  /* set by the thread: nothing more comes */
	bool failed;    /* not even an error got out */
};

/* ---- on the job's thread ---- */

int job_emit(struct job *j, const Pyprofd__Response *resp)
{
	size_t len = wire_frame_size(&resp->base);
	struct job_part *p = len ? malloc(sizeof *p + len) : NULL;
	if (!p)
		return -1;
	wire_frame_pack(&resp->base, p->bytes);
	p->len = len;
	p->next = NULL;
	struct jobs *js = j->jobs;
	pthread_mutex_lock(&js->lock);
	while (!j->cancelled && j->queued_bytes >= JOB_QUEUE_BYTES)
		pthread_cond_wait(&js->room, &js->lock);
	bool cancelled = j->cancelled;
	if (!cancelled) {
		if (j->parts_tail)
			j->parts_tail->next = p;
		else
			j->parts = p;
		j->parts_tail = p;
		j->queued_bytes += len;
	}
	pthread_mutex_unlock(&js->lock);
	if (cancelled) {
		free(p);
		return -1;
	}
	ev_async_send(js->loop, &js->async);
	return 0;
}

bool job_cancelled(struct job *j)
{
	pthread_mutex_lock(&j->jobs->lock);
	bool cancelled = j->cancelled;
	pthread_mutex_unlock(&j->jobs->lock);
	return cancelled;
}

static void *job_thread(void *arg)
{
	struct job *j = arg;
	struct jobs *js = j->jobs;
	/* Its own name, so top -H and the benchmarks tell its cost from the loop's. */
	pthread_setname_np(pthread_self(), j->type->name);
	bool failed = j->type->run(j, j->data) != 0;
#if defined(__GLIBC__) && !JOBS_ASAN
	/*
	 * A query's working memory (its connection's pages, its aggregation)
	 * is freed by now, but into this thread's arena, which glibc keeps:
	 * the daemon's RSS grew to the largest query it ever answered, and a
	 * history that keeps meeting new code makes every query larger.
	 * Under AddressSanitizer malloc is its allocator, not glibc's, whose
	 * arenas malloc_trim would walk unset.
	 */
	malloc_trim(0);
#endif
	pthread_mutex_lock(&js->lock);
	j->failed = failed;
	j->finished = true;
	pthread_mutex_unlock(&js->lock);
	ev_async_send(js->loop, &js->async);
	return NULL;
}

/* ---- on the loop ---- */

static void job_parts_free(struct job_part *p)
{
	while (p) {
		struct job_part *next = p->next;
		free(p);
		p = next;
	}
}

static void job_free(struct job *j)
{
	j->type->free(j->data);
	job_parts_free(j->parts);
	free(j);
}

static void jobs_unlink(struct jobs *js, struct job *j)
{
	for (struct job **p = &js->running; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			return;
		}
}

/* Stop a job: its thread ends at its next part, what it queued is dropped. */
static void job_cancel(struct jobs *js, struct job *j)
{
	pthread_mutex_lock(&js->lock);
	j->cancelled = true;
	struct job_part *dropped = j->parts;
	j->parts = j->parts_tail = NULL;
	j->queued_bytes = 0;
	pthread_cond_broadcast(&js->room);
	pthread_mutex_unlock(&js->lock);
	job_parts_free(dropped);
}

/*
 * Hand j's parts to its client while it has room; once the thread has
 * finished and every part is out, join it and tell the client the answer
 * ended.  A client that is full says so when it has room again.
 */
static void jobs_pump_one(struct jobs *js, struct job *j)
{
	for (;;) {
		if (!j->cancelled) {
			enum job_room room = js->sink.room(js->sink_ctx, j->client_serial);
			if (room == JOB_CLIENT_FULL)
				return;
			if (room == JOB_CLIENT_GONE)
				job_cancel(js, j);
		}
		pthread_mutex_lock(&js->lock);
		struct job_part *p = j->parts;
		bool finished = j->finished;
		if (p) {
			j->parts = p->next;
			if (!j->parts)
				j->parts_tail = NULL;
			j->queued_bytes -= p->len;
			pthread_cond_broadcast(&js->room);
		}
		pthread_mutex_unlock(&js->lock);
		if (!p) {
			if (!finished)
				return;
			pthread_join(j->thread, NULL);
			jobs_unlink(js, j);
			if (!j->cancelled)
				js->sink.done(js->sink_ctx, j->client_serial, !j->failed);
			job_free(j);
			return;
		}
		js->sink.part(js->sink_ctx, j->client_serial, p->bytes, p->len);
		free(p);
	}
}

void jobs_pump(struct jobs *js)
{
	for (struct job *j = js->running, *next; j; j = next) {
		next = j->next; /* j may be collected */
		jobs_pump_one(js, j);
	}
}

static void jobs_on_async(struct ev_loop *loop, ev_async *w, int revents)
{
	(void)loop;
	(void)revents;
	jobs_pump(w->data);
}

int jobs_init(struct jobs *js, struct ev_loop *loop, const struct job_sink *sink, void *sink_ctx)
{
	memset(js, 0, sizeof *js);
	if (pthread_mutex_init(&js->lock, NULL) != 0)
		return -1;
	if (pthread_cond_init(&js->room, NULL) != 0) {
		pthread_mutex_destroy(&js->lock);
		return -1;
	}
	js->loop = loop;
	js->sink = *sink;
	js->sink_ctx = sink_ctx;
	ev_async_init(&js->async, jobs_on_async);
	js->async.data = js;
	ev_async_start(loop, &js->async);
	return 0;
}

int jobs_start(struct jobs *js, const struct job_type *type, void *data, uint64_t client_serial,
               uid_t uid, char *why, size_t why_len)
{
	struct job *j = calloc(1, sizeof *j);
	if (!j) {
		type->free(data);
		snprintf(why, why_len, "the daemon is out of memory");
		return -1;
	}
	j->jobs = js;
	j->type = type;
	j->data = data;
	j->client_serial = client_serial;
	j->uid = uid;
	int e = pthread_create(&j->thread, NULL, job_thread, j);
	if (e != 0) {
		job_free(j);
		snprintf(why, why_len, "cannot start a thread: %s", strerror(e));
		return -1;
	}
	j->next = js->running;
	js->running = j;
	return 0;
}

struct jobs_count jobs_count(const struct jobs *js, const struct job_type *type, uid_t uid)
{
	struct jobs_count n = {0};
	for (const struct job *j = js->running; j; j = j->next)
		if (j->type == type) {
			n.all++;
			n.of_uid += j->uid == uid;
			n.not_root += j->uid != 0;
		}
	return n;
}

void jobs_finish(struct jobs *js)
{
	/* A thread may wait for room that no client will make: cancel, then join. */
	for (struct job *j = js->running; j; j = j->next)
		job_cancel(js, j);
	while (js->running) {
		struct job *j = js->running;
		pthread_join(j->thread, NULL);
		jobs_unlink(js, j);
		job_free(j);
	}
	ev_async_stop(js->loop, &js->async);
	pthread_cond_destroy(&js->room);
	pthread_mutex_destroy(&js->lock);
}
