/*
 * An OTLP/HTTP endpoint of the test's own that keeps every request whole:
 * the real Collector's OTLP/HTTP exporter forwards what the Collector
 * received to it, as the Collector re-encoded it, so a test reads what a
 * back end behind the Collector would get.
 */
#ifndef PYPROFD_TESTS_OTLP_SINK_H
#define PYPROFD_TESTS_OTLP_SINK_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct otlp_sink_request {
	char path[128];
	uint8_t *body;
	size_t len;
};

/* Requests kept at most, and a body's bytes at most (past them a request is answered and dropped). */
#define OTLP_SINK_MAX_REQUESTS 4096
#define OTLP_SINK_MAX_BODY (16u << 20)

struct otlp_sink {
	int fd, port;
	pthread_t thread;
	pthread_mutex_t lock;
	struct otlp_sink_request *requests;
	size_t n;
	volatile bool stop;
};

void otlp_sink_start(struct otlp_sink *s);
void otlp_sink_stop(struct otlp_sink *s);
/* Calls fn for each request kept whose path is path, under the sink's lock; fn returns false to stop. */
void otlp_sink_each(struct otlp_sink *s, const char *path,
                    bool (*fn)(void *ctx, const uint8_t *body, size_t len), void *ctx);

#endif
