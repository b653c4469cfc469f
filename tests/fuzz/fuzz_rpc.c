/*
 * libFuzzer harness for the daemon's side of the wire: the input is what a
 * client sends (framing and protobuf alike), fed through a socketpair to a
 * real server_client on a real libev loop, which answers it through
 * rpc_dispatch.  Besides the sanitizers' checks it aborts if a client is
 * left half-freed or a response is not a well-formed frame.  The check
 * every request passes (check.c) also reads the whole input as one request,
 * well-formed or not, and must agree with protobuf-c's decoding of it.
 * `make fuzz` builds and runs it.
 *
 * Requests name pids: an attach or dump may open a real process of this
 * machine.  That only reads it, as the daemon would.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "pyprofd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A server without a socket or signals: only what a connection needs. */
static struct server *fuzz_server(void)
{
	static struct server s;
	if (!s.loop) {
		s.loop = ev_loop_new(EVFLAG_AUTO);
		s.listen_fd = -1;
		s.config = (struct config){
			.log_level = LOG_LEVEL_ERROR,
			.max_connections = 4,
			.max_message_bytes = 1u << 16,
			.max_pending_requests = 4,
			.max_targets = 4,
			.warm_budget_bytes = 1u << 20,
			.default_rate_hz = 100,
			.max_rate_hz = 1000,
			.top_window_s = 1,
			/*
			 * A rule added by RPC is kept in its file before it is taken; there
			 * is no such file to be had here, so none is taken and every input
			 * starts with no rules (and no process watching).
			 */
			.rules_path = (char *)"/proc/self/no-such-directory/rules",
		};
		log_init(LOG_LEVEL_ERROR);
		/* status and attach ask the fleet (discovery, the budget). */
		if (fleet_init(&s.fleet, &s) != 0)
			abort();
	}
	return &s;
}

/* Every response frame the daemon wrote must be a length and a Response. */
static void check_responses(int fd)
{
	static unsigned char buf[1 << 20];
	size_t len = 0;
	ssize_t got;
	while (len < sizeof buf && (got = read(fd, buf + len, sizeof buf - len)) > 0)
		len += (size_t)got;
	for (size_t off = 0; off + 4 <= len;) {
		uint32_t n = (uint32_t)buf[off] << 24 | (uint32_t)buf[off + 1] << 16 |
		             (uint32_t)buf[off + 2] << 8 | buf[off + 3];
		if (off + 4 + n > len)
			break; /* cut by the buffer, not by the daemon */
		Pyprofd__Response *r = pyprofd__response__unpack(NULL, n, buf + off + 4);
		if (!r)
			abort();
		pyprofd__response__free_unpacked(r, NULL);
		off += 4 + (size_t)n;
	}
}

/*
 * Bytes as one request: the check walks bytes of any shape safely, and
 * what it passes decodes to a request whose strings pass too once encoded
 * again (it read every string protobuf-c would keep).
 */
static void check_agrees(const uint8_t *data, size_t size)
{
	static uint8_t again[1 << 20];
	char why[256];
	int passed = check_strings(&pyprofd__request__descriptor, data, size, why, sizeof why);
	Pyprofd__Request *req = pyprofd__request__unpack(NULL, size, data);
	if (!req)
		return;
	(void)check_request(req, data, size, why, sizeof why);
	size_t len = pyprofd__request__get_packed_size(req);
	if (passed == 0 && len <= sizeof again) {
		pyprofd__request__pack(req, again);
		if (check_strings(&pyprofd__request__descriptor, again, len, why, sizeof why) != 0)
			abort();
	}
	pyprofd__request__free_unpacked(req, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Each frame's payload as the daemon will see it, and the whole input unframed. */
	check_agrees(data, size);
	for (size_t at = 0; size - at >= WIRE_HEADER_BYTES;) {
		uint32_t len = wire_frame_length(data + at);
		if (len > size - at - WIRE_HEADER_BYTES)
			break;
		check_agrees(data + at + WIRE_HEADER_BYTES, len);
		at += WIRE_HEADER_BYTES + (size_t)len;
	}
	struct server *s = fuzz_server();
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
		return 0;
	server_client_accept(s, sv[0]);
	size_t off = 0;
	while (off < size) {
		ssize_t put = write(sv[1], data + off, size - off);
		if (put <= 0)
			break;
		off += (size_t)put;
	}
	shutdown(sv[1], SHUT_WR);
	for (int i = 0; i < 256 && s->clients; i++)
		ev_run(s->loop, EVRUN_NOWAIT);
	check_responses(sv[1]);
	while (s->clients)
		server_client_free(s->clients);
	if (s->nclients != 0)
		abort();
	targets_free(&s->targets);
	close(sv[1]);
	return 0;
}
