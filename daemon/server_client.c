/*
 * The server's view of one client connection: who it is (SO_PEERCRED, taken
 * once on accept), its input and output buffers, and the framing — a 4-byte
 * big-endian length, then one protobuf Request.
 *
 * Input is hostile: a length is checked against the limit before anything
 * is allocated for it; an oversized frame gets an error and the connection
 * is closed once the error is written; bytes that do not decode get an
 * error and the connection goes on (the framing still holds).  A client
 * that does not read its responses stops being read from.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pyprofd.h"

/* Read this much at a time at most. */
#define CLIENT_READ_CHUNK 65536u
/* Past this many bytes of unsent responses, stop reading requests. */
#define CLIENT_OUT_HIGH (8u << 20)

static void server_client_on_read(struct ev_loop *loop, ev_io *w, int revents);
static void server_client_on_write(struct ev_loop *loop, ev_io *w, int revents);

/* Refuse a connection past the limit before any client object exists. */
static void server_client_refuse(int fd, const char *why)
{
	Pyprofd__Response resp;
	Pyprofd__Error error;
	wire_error(&resp, &error, 0, PYPROFD__ERROR_CODE__ERROR_LIMIT, why);
	uint8_t buf[512];
	size_t len = wire_frame_size(&resp.base);
	if (len && len <= sizeof buf) {
		wire_frame_pack(&resp.base, buf);
		/* Best effort: the socket is fresh, its buffer empty. */
		ssize_t ignored = write(fd, buf, len);
		(void)ignored;
	}
	close(fd);
}

void server_client_accept(struct server *s, int fd)
{
	struct ucred cred;
	socklen_t len = sizeof cred;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
		log_warn("a client without credentials: %s", strerror(errno));
		close(fd);
		return;
	}
	if (s->nclients >= s->config.max_connections) {
		log_warn("refused a client (uid %d, pid %d): %u connections already", (int)cred.uid,
		         (int)cred.pid, s->nclients);
		server_client_refuse(fd, "too many connections to pyprofd");
		return;
	}
	struct client *c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return;
	}
	c->server = s;
	c->serial = ++s->next_client_serial;
	c->fd = fd;
	c->uid = cred.uid;
	c->gid = cred.gid;
	c->pid = cred.pid;
	ev_io_init(&c->reader, server_client_on_read, fd, EV_READ);
	ev_io_init(&c->writer, server_client_on_write, fd, EV_WRITE);
	c->reader.data = c->writer.data = c;
	ev_io_start(s->loop, &c->reader);
	c->next = s->clients;
	s->clients = c;
	s->nclients++;
	log_debug("client connected: uid %d, pid %d", (int)c->uid, (int)c->pid);
}

void server_client_free(struct client *c)
{
	struct server *s = c->server;
	for (struct client **p = &s->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	s->nclients--;
	ev_io_stop(s->loop, &c->reader);
	ev_io_stop(s->loop, &c->writer);
	close(c->fd);
	free(c->in);
	free(c->out);
	free(c);
}

static int server_client_out_reserve(struct client *c, size_t more)
{
	if (c->out_off > 0 && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->out_len + more <= c->out_cap)
		return 0;
	/* Slide what is unsent to the front before growing. */
	if (c->out_off > 0) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
		if (c->out_len + more <= c->out_cap)
			return 0;
	}
	size_t cap = c->out_cap ? c->out_cap : 4096;
	while (cap < c->out_len + more)
		cap *= 2;
	unsigned char *out = realloc(c->out, cap);
	if (!out)
		return -1;
	c->out = out;
	c->out_cap = cap;
	return 0;
}

int server_client_send(struct client *c, const Pyprofd__Response *resp)
{
	size_t len = wire_frame_size(&resp->base);
	if (!len || server_client_out_reserve(c, len) != 0)
		return -1;
	wire_frame_pack(&resp->base, c->out + c->out_len);
	c->out_len += len;
	ev_io_start(c->server->loop, &c->writer);
	if (c->out_len - c->out_off > CLIENT_OUT_HIGH)
		ev_io_stop(c->server->loop, &c->reader);
	return 0;
}

/* Queue responses already framed. */
static int server_client_send_bytes(struct client *c, const unsigned char *bytes, size_t len)
{
	if (server_client_out_reserve(c, len) != 0)
		return -1;
	memcpy(c->out + c->out_len, bytes, len);
	c->out_len += len;
	ev_io_start(c->server->loop, &c->writer);
	return 0;
}

/* Stop reading requests: an answer is being worked out elsewhere, and answers keep their order. */
static void server_client_pause(struct client *c)
{
	c->paused = true;
	ev_io_stop(c->server->loop, &c->reader);
}

static void server_client_resume(struct client *c)
{
	c->paused = false;
	if (c->closing) {
		if (c->out_len == c->out_off)
			ev_feed_event(c->server->loop, &c->writer, EV_WRITE);
		return;
	}
	ev_io_start(c->server->loop, &c->reader);
	/* Requests that came while paused are already buffered: handle them without waiting for more. */
	if (c->in_len)
		ev_feed_event(c->server->loop, &c->reader, EV_READ);
}

/* Send an error that answers no particular request (the request id could not be read). */
static void server_client_send_error(struct client *c, uint64_t id, Pyprofd__ErrorCode code, const char *msg)
{
	Pyprofd__Response resp;
	Pyprofd__Error error;
	wire_error(&resp, &error, id, code, msg);
	if (server_client_send(c, &resp) != 0)
		c->closing = true;
}

/* One complete frame's payload. */
static void server_client_handle_frame(struct client *c, const unsigned char *payload, size_t len)
{
	Pyprofd__Request *req = pyprofd__request__unpack(NULL, len, payload);
	if (!req) {
		log_debug("client uid %d sent %zu bytes that are not a request", (int)c->uid, len);
		server_client_send_error(c, 0, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
		           "the message is not a pyprofd request");
		return;
	}
	Pyprofd__Response resp = PYPROFD__RESPONSE__INIT;
	struct arena arena = {0};
	resp.id = req->id;
	if (!rpc_dispatch(c->server, c, req, &resp, &arena))
		server_client_pause(c);
	else if (server_client_send(c, &resp) != 0) {
		log_warn("client uid %d: out of memory queueing a response", (int)c->uid);
		c->closing = true;
	}
	server_update_status(c->server);
	arena_free(&arena);
	pyprofd__request__free_unpacked(req, NULL);
}

/*
 * Handle the complete frames in the input buffer, at most
 * max_pending_requests of them per wakeup so one client cannot hold the
 * loop; the rest are handled on the next iteration.
 */
static void server_client_handle_input(struct client *c)
{
	size_t off = 0;
	unsigned handled = 0;
	while (!c->closing && !c->paused && c->in_len - off >= 4) {
		const unsigned char *p = c->in + off;
		uint32_t len = wire_frame_length(p);
		if (len > c->server->config.max_message_bytes) {
			char msg[128];
			snprintf(msg, sizeof msg, "a message of %u bytes exceeds the limit of %zu", len,
			         c->server->config.max_message_bytes);
			log_warn("client uid %d: %s; closing", (int)c->uid, msg);
			server_client_send_error(c, 0, PYPROFD__ERROR_CODE__ERROR_LIMIT, msg);
			c->closing = true;
			break;
		}
		if (c->in_len - off - 4 < len)
			break;
		if (handled == c->server->config.max_pending_requests) {
			ev_feed_event(c->server->loop, &c->reader, EV_READ);
			break;
		}
		server_client_handle_frame(c, p + 4, len);
		handled++;
		off += 4 + (size_t)len;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
}

static void server_client_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	struct client *c = w->data;
	/* Room for one whole frame at the limit, no more. */
	size_t limit = c->server->config.max_message_bytes + 4;
	if (c->in_len < limit) {
		size_t want = limit - c->in_len < CLIENT_READ_CHUNK ? limit - c->in_len : CLIENT_READ_CHUNK;
		if (c->in_cap - c->in_len < want) {
			size_t cap = c->in_len + want;
			unsigned char *in = realloc(c->in, cap);
			if (!in) {
				server_client_free(c);
				return;
			}
			c->in = in;
			c->in_cap = cap;
		}
		ssize_t got = read(c->fd, c->in + c->in_len, want);
		if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			got = -2;
		if (got == 0 || got == -1) {
			if (c->in_len > 0)
				log_debug("client uid %d left in the middle of a message", (int)c->uid);
			server_client_free(c);
			return;
		}
		if (got > 0)
			c->in_len += (size_t)got;
	}
	server_client_handle_input(c);
	if (c->closing) {
		ev_io_stop(c->server->loop, &c->reader);
		if (c->out_len == c->out_off)
			server_client_free(c);
	}
}

static void server_client_on_write(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)revents;
	struct client *c = w->data;
	while (c->out_off < c->out_len) {
		ssize_t put = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (put <= 0) {
			server_client_free(c);
			return;
		}
		c->out_off += (size_t)put;
	}
	c->out_off = c->out_len = 0;
	ev_io_stop(loop, &c->writer);
	if (c->closing) {
		server_client_free(c);
		return;
	}
	/* Drained: read requests again if a backlog had stopped it. */
	if (!ev_is_active(&c->reader))
		ev_io_start(loop, &c->reader);
}

void server_client_answer(struct server *s, uint64_t client_serial, const uint8_t *bytes,
                          size_t len)
{
	struct client *c = s->clients;
	while (c && c->serial != client_serial)
		c = c->next;
	if (!c)
		return; /* it left meanwhile */
	if (!len || server_client_send_bytes(c, bytes, len) != 0) {
		log_warn("client uid %d: out of memory sending a query's answer", (int)c->uid);
		c->closing = true;
	}
	server_client_resume(c);
}
