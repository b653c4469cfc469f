/* The OpenTelemetry Collector of the OTLP tests, and stand-ins for bad ones (see collector.h). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collector.h"
#include "daemon.h"
#include "helpers.h"

/* A Go binary of some 100 MB starts in well under this on a loaded machine. */
#define COLLECTOR_START_TIMEOUT_S 60.0

const char *collector_bin(void)
{
	const char *bin = getenv("PYPROFD_COLLECTOR");
	return bin && *bin && access(bin, X_OK) == 0 ? bin : NULL;
}

void collector_require(void)
{
	if (!collector_bin()) {
		fprintf(stderr, "\n*** SKIPPED: no OpenTelemetry Collector to send to (make collector builds "
		                "one; PYPROFD_COLLECTOR names it)\n\n");
		cr_skip_test("no OpenTelemetry Collector: make collector builds one");
	}
}

static double now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(fd >= 0, "socket: %s", strerror(errno));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	          getsockname(fd, (struct sockaddr *)&a, &len) == 0, "bind: %s", strerror(errno));
	close(fd);
	return ntohs(a.sin_port);
}

static bool port_accepts(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

const char *collector_url(const struct collector *c, char *buf, size_t len)
{
	snprintf(buf, len, "http://127.0.0.1:%d", c->port);
	return buf;
}

static void collector_spawn(struct collector *c)
{
	snprintf(c->log, sizeof c->log, "%s/log.%u", c->dir, ++c->runs);
	char config_arg[PATH_MAX + 16];
	snprintf(config_arg, sizeof config_arg, "--config=file:%s", c->config);
	const char *argv[] = {collector_bin(), config_arg, "--feature-gates=service.profilesSupport", NULL};
	c->pid = spawn_process((char *const *)argv, c->log);
	double deadline = now_mono() + COLLECTOR_START_TIMEOUT_S;
	while (!port_accepts(c->port)) {
		int status;
		if (waitpid(c->pid, &status, WNOHANG) == c->pid) {
			char *log = file_bytes(c->log, NULL);
			cr_assert_fail("the collector exited before listening:\n%s", log ? log : "");
		}
		cr_assert(now_mono() < deadline, "the collector did not listen on %d within %.0f s",
		          c->port, COLLECTOR_START_TIMEOUT_S);
		pause_ms(50);
	}
}

void collector_start(struct collector *c, int port)
{
	collector_start_forwarding(c, port, NULL);
}

void collector_start_forwarding(struct collector *c, int port, const char *forward_url)
{
	collector_require();
	memset(c, 0, sizeof *c);
	scratch_dir(c->dir, sizeof c->dir);
	c->port = port ? port : free_port();
	snprintf(c->config, sizeof c->config, "%s/collector.yaml", c->dir);
	char forward[512] = "", to[64] = "[debug]";
	if (forward_url) {
		snprintf(forward, sizeof forward,
		         "  otlphttp:\n"
		         "    endpoint: %s\n"
		         "    compression: none\n"
		         "    retry_on_failure:\n"
		         "      enabled: false\n",
		         forward_url);
		snprintf(to, sizeof to, "[debug, otlphttp]");
	}
	char text[2048];
	snprintf(text, sizeof text,
	         "receivers:\n"
	         "  otlp:\n"
	         "    protocols:\n"
	         "      http:\n"
	         "        endpoint: 127.0.0.1:%d\n"
	         "exporters:\n"
	         "  debug:\n"
	         "    verbosity: detailed\n"
	         "%s"
	         "service:\n"
	         "  telemetry:\n"
	         "    metrics:\n"
	         "      level: none\n"
	         "  pipelines:\n"
	         "    profiles:\n"
	         "      receivers: [otlp]\n"
	         "      exporters: %s\n"
	         "    traces:\n"
	         "      receivers: [otlp]\n"
	         "      exporters: %s\n",
	         c->port, forward, to, to);
	write_text_file(c->config, text);
	collector_spawn(c);
}

void collector_restart(struct collector *c)
{
	cr_assert_eq(c->pid, 0, "the collector still runs");
	collector_spawn(c);
}

void collector_stop(struct collector *c, int sig)
{
	if (c->pid <= 0)
		return;
	kill(c->pid, sig);
	int status;
	waitpid(c->pid, &status, 0);
	c->pid = 0;
}

char *collector_logs(const struct collector *c)
{
	size_t len = 0, cap = 1;
	char *all = calloc(1, 1);
	cr_assert_not_null(all);
	for (unsigned i = 1; i <= c->runs; i++) {
		char path[PATH_MAX + 16];
		snprintf(path, sizeof path, "%s/log.%u", c->dir, i);
		size_t n = 0;
		char *text = file_bytes(path, &n);
		if (!text)
			continue;
		if (len + n + 1 > cap) {
			cap = len + n + 1;
			all = realloc(all, cap);
			cr_assert_not_null(all);
		}
		memcpy(all + len, text, n);
		len += n;
		all[len] = '\0';
		free(text);
	}
	return all;
}

static size_t totals_slot(struct collector_totals *t, pid_t pid)
{
	for (size_t i = 0; i < t->npids; i++)
		if (t->pids[i] == pid)
			return i;
	cr_assert(t->npids < COLLECTOR_MAX_PIDS, "too many processes in the collector's log");
	t->pids[t->npids] = pid;
	return t->npids++;
}

/*
 * The debug exporter's detailed text: per ResourceProfiles its resource
 * attributes (-> process.pid: Int(N)), then per sample "Values: [N]" and
 * its attributes (-> thread.id: N).  pyprofd sends one process per
 * ResourceProfiles and one value per sample.
 */
void collector_totals(const struct collector *c, struct collector_totals *t)
{
	memset(t, 0, sizeof *t);
	char *all = collector_logs(c);
	size_t slot = SIZE_MAX;
	uint64_t last_value = 0;
	for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
		const char *at;
		if (strstr(line, "ResourceProfiles #")) {
			slot = SIZE_MAX;
			t->requests++;
		} else if ((at = strstr(line, "-> process.pid: Int("))) {
			slot = totals_slot(t, (pid_t)atol(at + strlen("-> process.pid: Int(")));
		} else if ((at = strstr(line, "Values: ["))) {
			cr_assert_neq(slot, SIZE_MAX, "a sample before its process.pid in the log: %s", line);
			last_value = strtoull(at + strlen("Values: ["), NULL, 10);
			t->samples[slot] += last_value;
		} else if (strstr(line, "-> thread.id: ") && slot != SIZE_MAX) {
			t->with_thread[slot] += last_value;
			last_value = 0;
		}
	}
	free(all);
}

uint64_t collector_total_of(const struct collector_totals *t, pid_t pid)
{
	for (size_t i = 0; i < t->npids; i++)
		if (t->pids[i] == pid)
			return t->samples[i];
	return 0;
}

/* ---- stand-ins ---- */

/* Reads one request's head and body (by Content-Length), bounded; false when the peer went. */
static bool fake_read_request(int fd, volatile bool *stop)
{
	char buf[65536];
	size_t len = 0;
	long body = -1;
	size_t head_end = 0;
	while (!*stop) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
		if (n <= 0)
			return false;
		len += (size_t)n;
		buf[len] = '\0';
		if (!head_end) {
			char *end = strstr(buf, "\r\n\r\n");
			if (!end)
				continue;
			head_end = (size_t)(end - buf) + 4;
			char *cl = strcasestr(buf, "Content-Length:");
			body = cl ? atol(cl + 15) : 0;
		}
		if (len - head_end >= (size_t)body)
			return true;
		if (len >= sizeof buf - 1) {
			/* Only the length matters: keep the head, drop what was read of the body. */
			body -= (long)(len - head_end);
			len = head_end;
		}
	}
	return false;
}

static void *fake_main(void *arg)
{
	struct fake_collector *f = arg;
	/* Connections of a server that never answers, held open until it stops. */
	int held[64];
	size_t nheld = 0;
	while (!f->stop) {
		struct pollfd p = {.fd = f->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int conn = accept4(f->fd, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0)
			continue;
		/* One connection at a time, each request answered in turn (curl keeps it alive). */
		while (!f->stop && fake_read_request(conn, &f->stop)) {
			__atomic_add_fetch(&f->requests, 1, __ATOMIC_SEQ_CST);
			if (!f->status) {
				if (nheld < sizeof held / sizeof *held) {
					held[nheld++] = conn;
					conn = -1;
				}
				break;
			}
			char reply[256], retry[64] = "";
			if (f->retry_after_s)
				snprintf(retry, sizeof retry, "Retry-After: %d\r\n", f->retry_after_s);
			int n = snprintf(reply, sizeof reply,
			                 "HTTP/1.1 %d Unavailable\r\nContent-Type: text/plain\r\n%s"
			                 "Content-Length: 12\r\n\r\ntry later\r\n\r\n",
			                 f->status, retry);
			if (write(conn, reply, (size_t)n) != n)
				break;
		}
		if (conn >= 0)
			close(conn);
	}
	for (size_t i = 0; i < nheld; i++)
		close(held[i]);
	return NULL;
}

void fake_collector_start(struct fake_collector *f, int status)
{
	fake_collector_start_asking(f, status, 0);
}

void fake_collector_start_asking(struct fake_collector *f, int status, int retry_after_s)
{
	memset(f, 0, sizeof *f);
	f->status = status;
	f->retry_after_s = retry_after_s;
	f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(f->fd >= 0);
	int one = 1;
	setsockopt(f->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(bind(f->fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(f->fd, 16) == 0 &&
	          getsockname(f->fd, (struct sockaddr *)&a, &len) == 0, "listen: %s", strerror(errno));
	f->port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

void fake_collector_stop(struct fake_collector *f)
{
	f->stop = true;
	pthread_join(f->thread, NULL);
	close(f->fd);
}
