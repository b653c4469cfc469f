/*
 * The server's view of its clients: accepting them (and resting when the
 * descriptors run out), and of each connection who it is (SO_PEERCRED,
 * taken once on accept), its input and output buffers, and the framing — a
 * 4-byte big-endian length, then one protobuf Request.
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

#include "check.h"
#include "pyprofd.h"

/* Read this much at a time at most. */
#define CLIENT_READ_CHUNK 65536u
/*
 * Past this many bytes of unsent responses, stop reading requests and
 * taking parts of answers; below half of it, start again.  A client's queue
 * stays under this plus one response.
 */
#define CLIENT_OUT_HIGH (4u << 20)
#define CLIENT_OUT_LOW (CLIENT_OUT_HIGH / 2)
/* How long accepting rests after it failed for want of descriptors or memory. */
#define ACCEPT_REST_S 1.0

static void server_client_on_read(struct ev_loop *loop, ev_io *w, int revents);
static void server_client_on_write(struct ev_loop *loop, ev_io *w, int revents);

/* Bytes queued for the client and not written yet. */
static size_t server_client_backlog(const struct client *c)
{
	return c->out_len - c->out_off;
}

/* Refuse a connection past a limit before any client object exists. */
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

/*
 * Why a connection of uid cannot be taken now, or NULL.  One user cannot
 * hold more than its share, and all users but root together leave root's
 * reserve free: whatever others do, root's clients get in.
 */
static const char *server_client_over_limit(const struct server *s, uid_t uid)
{
	const struct config *cf = &s->config;
	if (s->nclients >= cf->max_connections)
		return "too many connections to pyprofd";
	if (uid == 0)
		return NULL;
	unsigned same_uid = 0, not_root = 0;
	for (const struct client *c = s->clients; c; c = c->next) {
		same_uid += c->uid == uid;
		not_root += c->uid != 0;
	}
	if (same_uid >= cf->max_connections_per_uid)
		return "too many connections to pyprofd from this user";
	if (not_root + cf->root_reserved_connections >= cf->max_connections)
		return "too many connections to pyprofd (the rest are kept for root)";
	return NULL;
}

/* Counted for status; a flood of them is held back by the log itself. */
static void server_client_log_refusal(struct server *s, const struct ucred *cred, const char *why)
{
	s->connections_refused++;
	log_warn("refused a client (uid %d, pid %d): %s", (int)cred->uid, (int)cred->pid, why);
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
	const char *why = server_client_over_limit(s, cred.uid);
	if (why) {
		server_client_log_refusal(s, &cred, why);
		server_client_refuse(fd, why);
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
	c->last_progress = ev_now(s->loop);
	ev_io_init(&c->reader, server_client_on_read, fd, EV_READ);
	ev_io_init(&c->writer, server_client_on_write, fd, EV_WRITE);
	c->reader.data = c->writer.data = c;
	ev_io_start(s->loop, &c->reader);
	c->next = s->clients;
	s->clients = c;
	s->nclients++;
	log_debug("client connected: uid %d, pid %d", (int)c->uid, (int)c->pid);
}

/* ---- accepting ---- */

/*
 * accept failed for a reason waiting will not fix at once (out of
 * descriptors, mostly): the connection stays queued and the socket stays
 * readable, so retrying now would spin.  Rest a second, and say so once
 * for the whole episode.
 */
static void server_accept_rest(struct server *s, int err)
{
	ev_io_stop(s->loop, &s->accept_watcher);
	ev_timer_set(&s->accept_pause, ACCEPT_REST_S, 0.0);
	ev_timer_start(s->loop, &s->accept_pause);
	if (s->accept_starved)
		return;
	s->accept_starved = true;
	log_warn("cannot accept connections: %s; trying again every %.0f s", strerror(err),
	         ACCEPT_REST_S);
}

/*
 * The episode ends when the queue of waiting connections is empty, not at
 * the first accept that works: a descriptor freed for a moment would
 * otherwise start a new episode, and a new warning, at every rest.  (Linux
 * reports EMFILE before it looks at the queue, so an empty queue is seen
 * only with a descriptor to spare.)
 */
static void server_accept_caught_up(struct server *s)
{
	if (!s->accept_starved)
		return;
	s->accept_starved = false;
	log_warn("accepting connections again");
}

/*
 * Accept again now rather than when the socket next turns readable: a
 * queue that emptied during the rest would otherwise never tell us that
 * the episode is over.  The try is fed through the loop, never made from
 * inside a caller that may be walking the clients.
 */
static void server_accept_resume(struct server *s)
{
	ev_timer_stop(s->loop, &s->accept_pause);
	ev_io_start(s->loop, &s->accept_watcher);
	ev_feed_event(s->loop, &s->accept_watcher, EV_READ);
}

static void server_on_accept_rested(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	server_accept_resume(w->data);
}

/*
 * A client's descriptor was just released: the rest need not run its
 * course, there is room for one waiting connection now.  Each retry is
 * paid for by a freed descriptor, so this cannot spin.
 */
static void server_accept_room_freed(struct server *s)
{
	if (s->accept_starved && ev_is_active(&s->accept_pause))
		server_accept_resume(s);
}

static void server_on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	struct server *s = w->data;
	/* A bounded batch per wakeup: a flood of connections cannot starve the timers. */
	for (int i = 0; i < 64; i++) {
		int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				server_accept_caught_up(s);
			else if (errno != EINTR && errno != ECONNABORTED)
				server_accept_rest(s, errno);
			return;
		}
		server_client_accept(s, fd);
	}
}

/* Take connections on the listening socket from now on. */
void server_clients_listen(struct server *s)
{
	ev_io_init(&s->accept_watcher, server_on_accept, s->listen_fd, EV_READ);
	s->accept_watcher.data = s;
	ev_io_start(s->loop, &s->accept_watcher);
	ev_timer_init(&s->accept_pause, server_on_accept_rested, ACCEPT_REST_S, 0.0);
	s->accept_pause.data = s;
}

void server_clients_close(struct server *s)
{
	if (s->listen_fd >= 0) {
		ev_io_stop(s->loop, &s->accept_watcher);
		ev_timer_stop(s->loop, &s->accept_pause);
	}
	while (s->clients)
		server_client_free(s->clients);
}

/* ---- one client ---- */

void server_client_free(struct client *c)
{
	struct server *s = c->server;
	for (struct client **p = &s->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	s->nclients--;
	s->queued_bytes -= server_client_backlog(c);
	ev_io_stop(s->loop, &c->reader);
	ev_io_stop(s->loop, &c->writer);
	close(c->fd);
	server_accept_room_freed(s);
	free(c->in);
	free(c->out);
	bool query_under_way = c->paused;
	free(c);
	/* Its query may wait for room this client will never make: it finds the client gone. */
	if (query_under_way)
		jobs_pump(&s->jobs);
}

/*
 * Read requests only from a client that waits for no answer of its own,
 * is not being closed and reads what it is sent.
 */
static void server_client_update_reading(struct client *c)
{
	struct ev_loop *loop = c->server->loop;
	bool want = !c->paused && !c->closing && server_client_backlog(c) <= CLIENT_OUT_HIGH;
	if (want == (bool)ev_is_active(&c->reader))
		return;
	if (!want) {
		ev_io_stop(loop, &c->reader);
		return;
	}
	ev_io_start(loop, &c->reader);
	if (c->in_len) {
		/* A request buffered while reading stood still has its time from now. */
		c->frame_started = ev_now(loop);
		/* Requests already buffered are handled without waiting for more. */
		ev_feed_event(loop, &c->reader, EV_READ);
	}
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

/* Account for len bytes just queued: write them, and read no more past the mark. */
static void server_client_queued(struct client *c, size_t len)
{
	if (server_client_backlog(c) == 0)
		c->last_progress = ev_now(c->server->loop); /* the reader's clock starts now */
	c->out_len += len;
	c->server->queued_bytes += len;
	ev_io_start(c->server->loop, &c->writer);
	server_client_update_reading(c);
}

int server_client_send(struct client *c, const Pyprofd__Response *resp)
{
	size_t len = wire_frame_size(&resp->base);
	if (!len || server_client_out_reserve(c, len) != 0)
		return -1;
	wire_frame_pack(&resp->base, c->out + c->out_len);
	server_client_queued(c, len);
	return 0;
}

/* Queue responses already framed. */
static int server_client_send_bytes(struct client *c, const unsigned char *bytes, size_t len)
{
	if (server_client_out_reserve(c, len) != 0)
		return -1;
	memcpy(c->out + c->out_len, bytes, len);
	server_client_queued(c, len);
	return 0;
}

/* Stop reading requests: an answer is being worked out elsewhere, and answers keep their order. */
static void server_client_pause(struct client *c)
{
	c->paused = true;
	server_client_update_reading(c);
}

static void server_client_resume(struct client *c)
{
	c->paused = false;
	if (c->closing) {
		if (server_client_backlog(c) == 0)
			ev_feed_event(c->server->loop, &c->writer, EV_WRITE);
		return;
	}
	server_client_update_reading(c);
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
	/*
	 * What a request holds is checked on its bytes, for every request
	 * alike, before any handler sees it (a version the daemon does not
	 * speak is answered as such first).
	 */
	char why[256];
	if (req->version == PYPROFD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT &&
	    check_request(req, payload, len, why, sizeof why) != 0) {
		log_debug("client uid %d: request refused: %s", (int)c->uid, why);
		server_client_send_error(c, req->id, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, why);
		pyprofd__request__free_unpacked(req, NULL);
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
	notify_status(c->server);
	arena_free(&arena);
	pyprofd__request__free_unpacked(req, NULL);
}

/*
 * Handle the complete frames in the input buffer, at most
 * max_pending_requests of them per wakeup so one client cannot hold the
 * loop, and none while its answers pile up unread; the rest are handled on
 * a later iteration.
 */
static void server_client_handle_input(struct client *c)
{
	size_t off = 0;
	unsigned handled = 0;
	while (!c->closing && !c->paused && server_client_backlog(c) <= CLIENT_OUT_HIGH &&
	       c->in_len - off >= 4) {
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
	if (off > 0) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
		/* The next request's time starts once the one before it is taken. */
		c->frame_started = ev_now(c->server->loop);
	}
}

/* Close now if nothing is left to write, else once it is written. */
static void server_client_close_when_written(struct client *c)
{
	ev_io_stop(c->server->loop, &c->reader);
	if (server_client_backlog(c) == 0)
		server_client_free(c);
}

static void server_client_on_read(struct ev_loop *loop, ev_io *w, int revents)
{
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
		if (got > 0) {
			if (c->in_len == 0)
				c->frame_started = ev_now(loop);
			c->in_len += (size_t)got;
			c->last_progress = ev_now(loop);
		}
	}
	server_client_handle_input(c);
	if (c->closing)
		server_client_close_when_written(c);
	else
		server_client_update_reading(c);
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
			break;
		if (put <= 0) {
			server_client_free(c);
			return;
		}
		c->out_off += (size_t)put;
		c->server->queued_bytes -= (size_t)put;
		c->last_progress = ev_now(loop);
	}
	if (server_client_backlog(c) == 0) {
		c->out_off = c->out_len = 0;
		ev_io_stop(loop, &c->writer);
		if (c->closing) {
			server_client_free(c);
			return;
		}
	}
	if (server_client_backlog(c) > CLIENT_OUT_LOW)
		return;
	/* Room again: the rest of its answer, or its next requests. */
	if (c->paused)
		jobs_pump(&c->server->jobs);
	else
		server_client_update_reading(c);
}

static struct client *server_client_find(struct server *s, uint64_t serial)
{
	struct client *c = s->clients;
	while (c && c->serial != serial)
		c = c->next;
	return c;
}

enum job_room server_client_answer_room(void *server, uint64_t client_serial)
{
	const struct client *c = server_client_find(server, client_serial);
	if (!c || c->closing)
		return JOB_CLIENT_GONE;
	return server_client_backlog(c) > CLIENT_OUT_HIGH ? JOB_CLIENT_FULL : JOB_CLIENT_READY;
}

void server_client_answer_part(void *server, uint64_t client_serial, const uint8_t *bytes,
                               size_t len)
{
	struct client *c = server_client_find(server, client_serial);
	if (c && server_client_send_bytes(c, bytes, len) != 0) {
		log_warn("client uid %d: out of memory sending a query's answer", (int)c->uid);
		c->closing = true; /* its query learns it at the next part */
	}
}

void server_client_answer_done(void *server, uint64_t client_serial, bool ok)
{
	struct client *c = server_client_find(server, client_serial);
	if (!c)
		return; /* it left meanwhile */
	if (!ok) {
		log_warn("client uid %d: out of memory answering a query", (int)c->uid);
		c->closing = true;
	}
	server_client_resume(c);
}

enum client_stall { STALL_NONE, STALL_REQUEST, STALL_IDLE, STALL_UNREAD };

/* Whether c has stood still too long, and how. */
static enum client_stall server_client_stalled(const struct client *c, ev_tstamp now)
{
	const struct config *cf = &c->server->config;
	if (ev_is_active(&c->reader) && c->in_len > 0 && now - c->frame_started > cf->request_timeout_s)
		return STALL_REQUEST;
	/* Waiting for its own query is not idle; not reading its answers is. */
	if (c->paused && server_client_backlog(c) == 0)
		return STALL_NONE;
	if (now - c->last_progress <= cf->idle_timeout_s)
		return STALL_NONE;
	return server_client_backlog(c) ? STALL_UNREAD : STALL_IDLE;
}

void server_clients_expire(struct server *s)
{
	static const char *const why[] = {
		[STALL_REQUEST] = "a request did not arrive whole in time",
		[STALL_IDLE] = "idle",
		[STALL_UNREAD] = "its answers went unread",
	};
	ev_tstamp now = ev_now(s->loop);
	for (struct client *c = s->clients, *next; c; c = next) {
		next = c->next;
		enum client_stall stall = server_client_stalled(c, now);
		if (stall == STALL_NONE)
			continue;
		log_info("client uid %d, pid %d: closed: %s", (int)c->uid, (int)c->pid, why[stall]);
		s->connections_timed_out++;
		if (stall != STALL_REQUEST) {
			server_client_free(c);
			continue;
		}
		/* It is sending, and reads: say why no answer comes. */
		char msg[128];
		snprintf(msg, sizeof msg, "closed: a request must arrive whole within %u s",
		         s->config.request_timeout_s);
		server_client_send_error(c, 0, PYPROFD__ERROR_CODE__ERROR_LIMIT, msg);
		c->closing = true;
		server_client_close_when_written(c);
	}
}
