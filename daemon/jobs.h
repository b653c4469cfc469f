/*
 * jobs — the daemon's one way to work off the loop: each job runs on a
 * thread of its own (a history query, a backfill to a collector) and
 * answers a client a part at a time.  Parts wait in a bounded queue; the
 * loop hands them to the sink, the server's clients, while the client
 * takes them, and tells the sink when the answer is whole.
 */
#ifndef PYPROFD_JOBS_H
#define PYPROFD_JOBS_H

#include <ev.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pyprofd.pb-c.h"

struct job;

/* What a job does: its name (its thread's), its work, and how its data is let go. */
struct job_type {
	const char *name;
	/* On the job's thread: the answer, by job_emit.  0, or -1 when not even an error got out. */
	int (*run)(struct job *j, void *data);
	/* On the loop, once the thread has ended (or never started). */
	void (*free)(void *data);
};

/* Whether the client of an answer takes a part now, is full (it will say when not), or left. */
enum job_room { JOB_CLIENT_GONE, JOB_CLIENT_FULL, JOB_CLIENT_READY };

/* Where the loop hands answers: the server's clients, by serial. */
struct job_sink {
	enum job_room (*room)(void *ctx, uint64_t client_serial);
	/* One framed part for a client that had room. */
	void (*part)(void *ctx, uint64_t client_serial, const uint8_t *bytes, size_t len);
	/* The answer is whole (ok), or ended without one (out of memory). */
	void (*done)(void *ctx, uint64_t client_serial, bool ok);
};

struct jobs {
	struct ev_loop *loop;
	pthread_mutex_t lock;
	pthread_cond_t room; /* the loop took parts, or cancelled a job */
	ev_async async;      /* a thread queued a part or finished */
	struct job *running; /* on the loop: started, not collected yet */
	struct job_sink sink;
	void *sink_ctx;
};

/* Jobs of one type running now: all of them, those of one uid, those of users other than root. */
struct jobs_count {
	unsigned all, of_uid, not_root;
};

int jobs_init(struct jobs *js, struct ev_loop *loop, const struct job_sink *sink, void *sink_ctx);
/*
 * Run data on a thread of its own, answering the client with this serial
 * later.  The job takes data: freed by type->free when it ends, or at once
 * when it cannot start (-1 and why).
 */
int jobs_start(struct jobs *js, const struct job_type *type, void *data, uint64_t client_serial,
               uid_t uid, char *why, size_t why_len);
struct jobs_count jobs_count(const struct jobs *js, const struct job_type *type, uid_t uid);
/* Hand the parts that wait to their clients while they take them (a client made room, or left). */
void jobs_pump(struct jobs *js);
/* Cancel every job, wait for its thread and drop its answer (shutdown). */
void jobs_finish(struct jobs *js);

/* On a job's thread: queue one response, once there is room; -1 if out of memory or cancelled. */
int job_emit(struct job *j, const Pyprofd__Response *resp);
/* Whether the job's client left or the daemon stops: the work is wasted from here on. */
bool job_cancelled(struct job *j);

#endif
