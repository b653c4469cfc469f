/* The test's own OTLP/HTTP endpoint: every POST kept whole, answered 200 with an empty response. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "otlp_sink.h"

/* Bytes of a request's head at most. */
#define SINK_HEAD_MAX 8192

/* One request: its path and body (malloc'd); false when the peer went or sent garbage. */
static bool sink_read(struct otlp_sink *s, int fd, char *path, size_t path_len, uint8_t **body, size_t *len)
{
	char head[SINK_HEAD_MAX + 1];
	size_t got = 0;
	char *end = NULL;
	*body = NULL;
	while (!s->stop && !end) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		/* A byte at a time up to the head's end: the body that follows stays in the socket. */
		ssize_t n = read(fd, head + got, 1);
		if (n <= 0 || ++got >= SINK_HEAD_MAX)
			return false;
		head[got] = '\0';
		end = strstr(head, "\r\n\r\n");
	}
	if (!end || sscanf(head, "POST %127s ", path) != 1)
		return false;
	(void)path_len;
	char *cl = strcasestr(head, "Content-Length:");
	long want = cl ? atol(cl + 15) : -1;
	if (want < 0 || (size_t)want > OTLP_SINK_MAX_BODY || !(*body = malloc((size_t)want + 1)))
		return false;
	*len = 0;
	while (!s->stop && *len < (size_t)want) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = read(fd, *body + *len, (size_t)want - *len);
		if (n <= 0)
			break;
		*len += (size_t)n;
	}
	if (*len != (size_t)want) {
		free(*body);
		*body = NULL;
		return false;
	}
	return true;
}

/* One connection's requests, each answered in turn (a client keeps it alive for the next). */
struct sink_conn {
	struct otlp_sink *s;
	int fd;
};

static void *sink_conn_main(void *arg)
{
	struct sink_conn *c = arg;
	struct otlp_sink *s = c->s;
	int conn = c->fd;
	{
		char path[128];
		uint8_t *body;
		size_t len;
		while (sink_read(s, conn, path, sizeof path, &body, &len)) {
			pthread_mutex_lock(&s->lock);
			if (s->n < OTLP_SINK_MAX_REQUESTS) {
				struct otlp_sink_request *r = &s->requests[s->n++];
				snprintf(r->path, sizeof r->path, "%s", path);
				r->body = body;
				r->len = len;
				body = NULL;
			}
			pthread_mutex_unlock(&s->lock);
			free(body);
			static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n"
			                         "Content-Length: 0\r\n\r\n";
			if (write(conn, ok, sizeof ok - 1) != (ssize_t)(sizeof ok - 1))
				break;
		}
		close(conn);
	}
	return NULL;
}

/* Connections served at once (the Collector opens one a signal): a thread each. */
#define SINK_CONNS 16

static void *sink_main(void *arg)
{
	struct otlp_sink *s = arg;
	pthread_t threads[SINK_CONNS];
	struct sink_conn conns[SINK_CONNS];
	size_t n = 0;
	while (!s->stop) {
		struct pollfd p = {.fd = s->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int conn = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0)
			continue;
		if (n == SINK_CONNS) {
			close(conn);
			continue;
		}
		conns[n] = (struct sink_conn){s, conn};
		if (pthread_create(&threads[n], NULL, sink_conn_main, &conns[n]) != 0) {
			close(conn);
			continue;
		}
		n++;
	}
	for (size_t i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return NULL;
}

void otlp_sink_start(struct otlp_sink *s)
{
	memset(s, 0, sizeof *s);
	pthread_mutex_init(&s->lock, NULL);
	s->requests = calloc(OTLP_SINK_MAX_REQUESTS, sizeof *s->requests);
	cr_assert_not_null(s->requests);
	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(s->fd >= 0);
	int one = 1;
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(bind(s->fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s->fd, 16) == 0 &&
	          getsockname(s->fd, (struct sockaddr *)&a, &len) == 0, "listen: %s", strerror(errno));
	s->port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&s->thread, NULL, sink_main, s), 0);
}

void otlp_sink_stop(struct otlp_sink *s)
{
	s->stop = true;
	pthread_join(s->thread, NULL);
	close(s->fd);
	for (size_t i = 0; i < s->n; i++)
		free(s->requests[i].body);
	free(s->requests);
	pthread_mutex_destroy(&s->lock);
}

void otlp_sink_each(struct otlp_sink *s, const char *path,
                    bool (*fn)(void *ctx, const uint8_t *body, size_t len), void *ctx)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->requests[i].path, path) == 0 && !fn(ctx, s->requests[i].body, s->requests[i].len))
			break;
	pthread_mutex_unlock(&s->lock);
}
