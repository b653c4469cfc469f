/*
 * A real OpenTelemetry Collector for the OTLP export tests (make collector
 * builds it; $PYPROFD_COLLECTOR names it): its OTLP/HTTP receiver on a port
 * of the loopback, a profiles pipeline into its debug exporter at detailed
 * verbosity, and what that exporter logged read back as totals.  Also the
 * small HTTP servers that stand in for a collector answering badly.
 */
#ifndef PYPROFD_TESTS_COLLECTOR_H
#define PYPROFD_TESTS_COLLECTOR_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct collector {
	pid_t pid;
	int port;
	char dir[PATH_MAX - 64];
	char config[PATH_MAX];
	char log[PATH_MAX]; /* the current run's; earlier runs' are log.1, log.2, ... */
	unsigned runs;
};

/* $PYPROFD_COLLECTOR, or NULL: the caller skips, saying so. */
const char *collector_bin(void);
/* Skips the test (loudly) when there is no collector to run. */
void collector_require(void);
/* A free TCP port of 127.0.0.1 (bound and released: taken again at once by the caller). */
int free_port(void);
/* Start it listening on port (0: a free one); returns once it accepts connections. */
void collector_start(struct collector *c, int port);
/*
 * The same, with a traces pipeline beside the profiles', and both handed
 * on by its OTLP/HTTP exporter to forward_url (NULL: not handed on).
 */
void collector_start_forwarding(struct collector *c, int port, const char *forward_url);
/* Start it again on the same port, after a stop or a kill; its log goes to a new file. */
void collector_restart(struct collector *c);
/* SIGTERM (a clean stop) or SIGKILL, and wait for it. */
void collector_stop(struct collector *c, int sig);
/* "http://127.0.0.1:PORT" */
const char *collector_url(const struct collector *c, char *buf, size_t len);

/* What every run of the collector logged, summed. */
#define COLLECTOR_MAX_PIDS 64
struct collector_totals {
	size_t npids;
	pid_t pids[COLLECTOR_MAX_PIDS];
	uint64_t samples[COLLECTOR_MAX_PIDS];
	uint64_t with_thread[COLLECTOR_MAX_PIDS]; /* of them, in samples that carry thread.id */
	uint64_t requests;                        /* resource profiles received */
};
void collector_totals(const struct collector *c, struct collector_totals *t);
uint64_t collector_total_of(const struct collector_totals *t, pid_t pid);
/* Everything every run logged (malloc'd). */
char *collector_logs(const struct collector *c);

/* A stand-in that answers every request with status (0: never answers) and counts them. */
struct fake_collector {
	int fd, port, status;
	int retry_after_s; /* said in a Retry-After header when set */
	pthread_t thread;
	volatile int requests;
	volatile bool stop;
};
void fake_collector_start(struct fake_collector *f, int status);
/* The same, asking in Retry-After to wait retry_after_s seconds before the next request. */
void fake_collector_start_asking(struct fake_collector *f, int status, int retry_after_s);
void fake_collector_stop(struct fake_collector *f);

#endif
