/* The client library: one connection to pyprofd, framed protobuf requests and answers. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "array.h"
#include "client.h"
#include "clock.h"
#include "wire.h"

/* A frame buffer starts this small and grows as bytes arrive, not as the length claims. */
#define CLIENT_FIRST_CHUNK (64u << 10)

struct client {
	int fd;
	bool broken; /* an answer was left half read: the stream is out of step */
	uint64_t next_id;
	const volatile sig_atomic_t *interrupt;
};

/*
 * Decoding memory with a budget.  protobuf-c allocates per field, so a small
 * frame of many empty submessages decodes to far more than its size; every
 * allocation of one answer is counted here and refused past the budget.
 */
struct client_budget {
	ProtobufCAllocator allocator;
	size_t used;
	size_t limit;
	bool refused; /* an allocation was refused for the budget, not by malloc */
};

/* Each block remembers its size so free can give it back to the budget. */
union client_budget_header {
	size_t size;
	max_align_t align;
};

static int client_fail(struct client_error *err, enum client_status status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Fill *err; returns -1 so callers can `return client_fail(...)`. */
static int client_fail(struct client_error *err, enum client_status status, const char *fmt, ...)
{
	va_list ap;
	err->status = status;
	err->code = PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	va_end(ap);
	return -1;
}

static void *client_budget_alloc(void *data, size_t size)
{
	struct client_budget *a = data;
	size_t room = a->limit - a->used;
	if (room < sizeof(union client_budget_header) || size > room - sizeof(union client_budget_header)) {
		a->refused = true;
		return NULL;
	}
	union client_budget_header *h = malloc(sizeof *h + size);
	if (!h)
		return NULL;
	h->size = size;
	a->used += sizeof *h + size;
	return h + 1;
}

static void client_budget_free(void *data, void *ptr)
{
	struct client_budget *a = data;
	if (!ptr)
		return;
	union client_budget_header *h = (union client_budget_header *)ptr - 1;
	a->used -= sizeof *h + h->size;
	free(h);
}

struct client *client_connect(const char *path, struct client_error *err)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sun.sun_path) {
		client_fail(err, CLIENT_EUNREACHABLE, "socket path too long: %s", path);
		return NULL;
	}
	strcpy(sun.sun_path, path);

	struct client *c = calloc(1, sizeof *c);
	if (!c) {
		client_fail(err, CLIENT_ENOMEM, "out of memory");
		return NULL;
	}
	c->next_id = 1;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		client_fail(err, CLIENT_EUNREACHABLE, "cannot create a socket: %s", strerror(errno));
		free(c);
		return NULL;
	}

	/*
	 * A Unix socket connects at once or waits for room in the listener's
	 * backlog; SO_SNDTIMEO bounds that wait (connect then fails EAGAIN).
	 */
	struct timeval tv = {.tv_sec = CLIENT_TIMEOUT_MS / 1000};
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	int rc;
	do {
		rc = connect(c->fd, (struct sockaddr *)&sun, sizeof sun);
	} while (rc != 0 && errno == EINTR);
	if (rc != 0) {
		int e = errno;
		if (e == ENOENT || e == ECONNREFUSED || e == ENOTDIR)
			client_fail(err, CLIENT_EUNREACHABLE,
			            "the daemon is not running (nothing listens on %s)", path);
		else if (e == EACCES || e == EPERM)
			client_fail(err, CLIENT_EUNREACHABLE, "permission denied on %s", path);
		else if (e == EAGAIN || e == ETIMEDOUT)
			client_fail(err, CLIENT_EUNREACHABLE,
			            "the daemon did not accept a connection on %s within %d s", path,
			            CLIENT_TIMEOUT_MS / 1000);
		else
			client_fail(err, CLIENT_EUNREACHABLE, "cannot connect to %s: %s", path,
			            strerror(e));
		client_free(c);
		return NULL;
	}
	/* From here every wait goes through poll, with our own deadline. */
	int flags = fcntl(c->fd, F_GETFL);
	if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
		client_fail(err, CLIENT_EUNREACHABLE, "cannot set up the connection to %s: %s", path,
		            strerror(errno));
		client_free(c);
		return NULL;
	}
	return c;
}

void client_free(struct client *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c);
}

void client_set_interrupt(struct client *c, const volatile sig_atomic_t *flag)
{
	c->interrupt = flag;
}

/* Wait until fd is ready for events or the deadline passes; 0, or -1 and *err. */
static int client_wait(struct client *c, short events, int64_t deadline, struct client_error *err)
{
	for (;;) {
		if (c->interrupt && *c->interrupt)
			return client_fail(err, CLIENT_EINTR, "interrupted");
		int64_t left = deadline - (int64_t)(clock_mono_ns() / 1000000);
		if (left <= 0)
			return client_fail(err, CLIENT_ETIMEOUT, "the daemon did not answer within %d s",
			                   CLIENT_TIMEOUT_MS / 1000);
		struct pollfd pfd = {.fd = c->fd, .events = events};
		int n = poll(&pfd, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return client_fail(err, CLIENT_EPROTO, "waiting for the daemon: %s",
			                   strerror(errno));
	}
}

static int client_send(struct client *c, const uint8_t *buf, size_t len, struct client_error *err)
{
	int64_t deadline = (int64_t)(clock_mono_ns() / 1000000) + CLIENT_TIMEOUT_MS;
	size_t done = 0;
	while (done < len) {
		ssize_t n = send(c->fd, buf + done, len - done, MSG_NOSIGNAL);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (client_wait(c, POLLOUT, deadline, err) != 0)
				return -1;
			continue;
		}
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			return client_fail(err, CLIENT_EPROTO,
			                   "the daemon closed the connection before the request was sent");
		return client_fail(err, CLIENT_EPROTO, "cannot send to the daemon: %s",
		                   n < 0 ? strerror(errno) : "no progress");
	}
	return 0;
}

/*
 * Read exactly len bytes into buf before the deadline.  Returns the count
 * read (less than len only at end of stream), or -1 and *err.
 */
static ssize_t client_read(struct client *c, uint8_t *buf, size_t len, int64_t deadline,
                           struct client_error *err)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = recv(c->fd, buf + done, len - done, 0);
		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (client_wait(c, POLLIN, deadline, err) != 0)
				return -1;
			continue;
		}
		if (errno == ECONNRESET)
			break;
		return client_fail(err, CLIENT_EPROTO, "cannot read from the daemon: %s",
		                   strerror(errno));
	}
	return (ssize_t)done;
}

/* Whether a frame's announced length is believed, before anything is read or allocated for it. */
static int client_frame_admit(uint32_t len, size_t budget, struct client_error *err)
{
	if (len > CLIENT_MAX_FRAME)
		return client_fail(err, CLIENT_EPROTO,
		                   "the daemon sent a %u-byte response, over the %u MiB limit", len,
		                   CLIENT_MAX_FRAME >> 20);
	if (len > budget)
		return client_fail(err, CLIENT_EPROTO, "the daemon's answer is over the %u MiB limit",
		                   CLIENT_MAX_REPLY >> 20);
	return 0;
}

/*
 * Receive one frame into a malloc'd buffer (*out, *outlen).  The length
 * prefix is only believed up to CLIENT_MAX_FRAME and `budget`, and the buffer
 * grows with the bytes that actually arrive.
 */
static int client_recv_frame(struct client *c, size_t budget, uint8_t **out, size_t *outlen,
                             struct client_error *err)
{
	int64_t deadline = (int64_t)(clock_mono_ns() / 1000000) + CLIENT_TIMEOUT_MS;
	uint8_t hdr[4];
	ssize_t n = client_read(c, hdr, sizeof hdr, deadline, err);
	if (n < 0)
		return -1;
	if (n == 0)
		return client_fail(err, CLIENT_EPROTO,
		                   "the daemon closed the connection without answering");
	if (n < (ssize_t)sizeof hdr)
		return client_fail(err, CLIENT_EPROTO,
		                   "truncated response from the daemon (cut in its length)");
	uint32_t len = wire_frame_length(hdr);
	if (client_frame_admit(len, budget, err) != 0)
		return -1;

	size_t cap = len < CLIENT_FIRST_CHUNK ? len : CLIENT_FIRST_CHUNK;
	uint8_t *buf = malloc(cap ? cap : 1);
	if (!buf)
		return client_fail(err, CLIENT_ENOMEM, "out of memory");
	size_t got = 0;
	while (got < len) {
		if (got == cap) {
			size_t ncap = cap * 2 < len ? cap * 2 : len;
			uint8_t *nbuf = realloc(buf, ncap);
			if (!nbuf) {
				free(buf);
				return client_fail(err, CLIENT_ENOMEM, "out of memory");
			}
			buf = nbuf;
			cap = ncap;
		}
		n = client_read(c, buf + got, cap - got, deadline, err);
		if (n < 0) {
			free(buf);
			return -1;
		}
		got += (size_t)n;
		if (got < cap) {
			free(buf);
			return client_fail(err, CLIENT_EPROTO,
			                   "truncated response from the daemon (%zu of %u bytes)", got, len);
		}
	}
	*out = buf;
	*outlen = len;
	return 0;
}

/* The result case that answers a request case; the contract numbers them alike. */
Pyprofd__Response__ResultCase client_result_case(Pyprofd__Request__BodyCase body)
{
	switch (body) {
	case PYPROFD__REQUEST__BODY_ATTACH: return PYPROFD__RESPONSE__RESULT_ATTACH;
	case PYPROFD__REQUEST__BODY_DETACH: return PYPROFD__RESPONSE__RESULT_DETACH;
	case PYPROFD__REQUEST__BODY_LIST: return PYPROFD__RESPONSE__RESULT_LIST;
	case PYPROFD__REQUEST__BODY_DUMP: return PYPROFD__RESPONSE__RESULT_DUMP;
	case PYPROFD__REQUEST__BODY_STATS: return PYPROFD__RESPONSE__RESULT_STATS;
	case PYPROFD__REQUEST__BODY_STATUS: return PYPROFD__RESPONSE__RESULT_STATUS;
	case PYPROFD__REQUEST__BODY_TOP: return PYPROFD__RESPONSE__RESULT_TOP;
	case PYPROFD__REQUEST__BODY_QUERY: return PYPROFD__RESPONSE__RESULT_QUERY;
	case PYPROFD__REQUEST__BODY_RULES: return PYPROFD__RESPONSE__RESULT_RULES;
	case PYPROFD__REQUEST__BODY_OTLP_EXPORT: return PYPROFD__RESPONSE__RESULT_OTLP_EXPORT;
	default: break;
	}
	return PYPROFD__RESPONSE__RESULT__NOT_SET;
}

/* The daemon's message made one printable line: it goes to a terminal as is. */
static void copy_line(char *dst, size_t size, const char *src)
{
	size_t i = 0;
	for (; src && src[i] && i + 1 < size; i++) {
		unsigned char ch = (unsigned char)src[i];
		dst[i] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
	}
	dst[i] = '\0';
}

void client_reply_free(struct client_reply *reply)
{
	if (!reply)
		return;
	for (size_t i = 0; i < reply->nparts; i++)
		pyprofd__response__free_unpacked(reply->parts[i], &reply->arena->allocator);
	free(reply->parts);
	free(reply->arena);
	free(reply);
}

/* Check one decoded response against the request it should answer; 0 or -1 and *err. */
static int client_check(const Pyprofd__Response *resp, uint64_t id,
                        Pyprofd__Response__ResultCase want, struct client_error *err)
{
	/*
	 * The daemon answers with id 0 an error tied to no request it could read:
	 * a refused connection, a frame over its limit.  That error is the answer.
	 */
	bool connection_error = resp->id == 0 && resp->result_case == PYPROFD__RESPONSE__RESULT_ERROR;
	if (resp->id != id && !connection_error)
		return client_fail(err, CLIENT_EPROTO,
		                   "the daemon answered request %llu with the id %llu",
		                   (unsigned long long)id, (unsigned long long)resp->id);
	if (resp->result_case == PYPROFD__RESPONSE__RESULT_ERROR) {
		const Pyprofd__Error *e = resp->error;
		client_fail(err, CLIENT_EDAEMON, "the daemon reported an error (code %d)",
		            e ? (int)e->code : 0);
		if (e && e->message && e->message[0])
			copy_line(err->msg, sizeof err->msg, e->message);
		err->code = e ? e->code : PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED;
		return -1;
	}
	if (resp->result_case != want)
		return client_fail(err, CLIENT_EPROTO,
		                   "the daemon answered with another kind of result (field %d, not %d)",
		                   (int)resp->result_case, (int)want);
	return 0;
}

/*
 * After a failed send, read the error the daemon may have left before it
 * closed; when there is one it replaces *err.
 */
static void client_read_parting_error(struct client *c, struct client_error *err)
{
	struct client_error tmp;
	uint8_t *buf = NULL;
	size_t len;
	/* An error frame is small: read no more than a few KiB of what is there. */
	if (client_recv_frame(c, 4096, &buf, &len, &tmp) != 0)
		return;
	Pyprofd__Response *resp = pyprofd__response__unpack(NULL, len, buf);
	free(buf);
	if (!resp)
		return;
	if (resp->result_case == PYPROFD__RESPONSE__RESULT_ERROR && resp->error) {
		client_fail(err, CLIENT_EDAEMON, "the daemon closed the connection (code %d)",
		            (int)resp->error->code);
		if (resp->error->message && resp->error->message[0])
			copy_line(err->msg, sizeof err->msg, resp->error->message);
		err->code = resp->error->code;
	}
	pyprofd__response__free_unpacked(resp, NULL);
}

int client_answer_start(struct client_answer *a, uint64_t id, Pyprofd__Response__ResultCase want,
                        struct client_error *err)
{
	memset(a, 0, sizeof *a);
	a->id = id;
	a->want = want;
	a->reply = calloc(1, sizeof *a->reply);
	struct client_budget *budget = calloc(1, sizeof *budget);
	if (!a->reply || !budget) {
		free(a->reply);
		free(budget);
		a->reply = NULL;
		return client_fail(err, CLIENT_ENOMEM, "out of memory");
	}
	budget->allocator = (ProtobufCAllocator){client_budget_alloc, client_budget_free, budget};
	budget->limit = CLIENT_MAX_DECODED;
	a->reply->arena = budget;
	return 0;
}

int client_answer_part(struct client_answer *a, const uint8_t *payload, size_t len,
                       struct client_error *err, bool *in_step)
{
	struct client_reply *reply = a->reply;
	*in_step = false;
	if (reply->nparts == CLIENT_MAX_PARTS)
		return client_fail(err, CLIENT_EPROTO, "the daemon's answer has more than %u parts",
		                   CLIENT_MAX_PARTS);
	if (client_frame_admit((uint32_t)(len > UINT32_MAX ? UINT32_MAX : len), CLIENT_MAX_REPLY - a->wire,
	                       err) != 0)
		return -1;
	a->wire += len;
	Pyprofd__Response *resp = pyprofd__response__unpack(&reply->arena->allocator, len, payload);
	if (!resp) {
		if (reply->arena->refused)
			return client_fail(err, CLIENT_EPROTO,
			                   "the daemon's answer takes more than %zu MiB to decode",
			                   CLIENT_MAX_DECODED >> 20);
		return client_fail(err, CLIENT_EPROTO, "undecodable response from the daemon");
	}
	if (array_reserve((void **)&reply->parts, &a->parts_cap, reply->nparts, sizeof *reply->parts,
	                  NULL) != 0) {
		pyprofd__response__free_unpacked(resp, &reply->arena->allocator);
		return client_fail(err, CLIENT_ENOMEM, "out of memory");
	}
	reply->parts[reply->nparts++] = resp;
	if (client_check(resp, a->id, a->want, err) != 0) {
		/* An Error ends its answer; anything else leaves the stream unreadable. */
		*in_step = err->status == CLIENT_EDAEMON && !resp->more;
		return -1;
	}
	*in_step = true;
	return resp->more ? 1 : 0;
}

struct client_reply *client_answer_take(struct client_answer *a)
{
	struct client_reply *reply = a->reply;
	a->reply = NULL;
	return reply;
}

void client_answer_abandon(struct client_answer *a)
{
	client_reply_free(a->reply);
	a->reply = NULL;
}

struct client_reply *client_reply_decode(const uint8_t *bytes, size_t len, uint64_t id,
                                         Pyprofd__Response__ResultCase want, size_t *used,
                                         struct client_error *err)
{
	struct client_answer a;
	*used = 0;
	if (client_answer_start(&a, id, want, err) != 0)
		return NULL;
	for (size_t off = 0;;) {
		if (len - off < WIRE_HEADER_BYTES) {
			client_fail(err, CLIENT_EPROTO, off == len ? "the daemon closed the connection without answering"
			                                           : "truncated response from the daemon (cut in its length)");
			break;
		}
		uint32_t n = wire_frame_length(bytes + off);
		if (client_frame_admit(n, CLIENT_MAX_REPLY - a.wire, err) != 0)
			break;
		if (len - off - WIRE_HEADER_BYTES < n) {
			client_fail(err, CLIENT_EPROTO, "truncated response from the daemon (%zu of %u bytes)",
			            len - off - WIRE_HEADER_BYTES, n);
			break;
		}
		bool in_step;
		int rc = client_answer_part(&a, bytes + off + WIRE_HEADER_BYTES, n, err, &in_step);
		off += WIRE_HEADER_BYTES + n;
		*used = off;
		if (rc == 0)
			return client_answer_take(&a);
		if (rc < 0)
			break;
	}
	client_answer_abandon(&a);
	return NULL;
}

struct client_reply *client_call(struct client *c, Pyprofd__Request *req, struct client_error *err)
{
	if (c->broken) {
		client_fail(err, CLIENT_EPROTO, "the connection to the daemon was lost");
		return NULL;
	}
	Pyprofd__Response__ResultCase want = client_result_case(req->body_case);
	if (want == PYPROFD__RESPONSE__RESULT__NOT_SET) {
		client_fail(err, CLIENT_EPROTO, "no such request");
		return NULL;
	}
	req->version = PYPROFD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
	req->id = c->next_id++;

	size_t len = wire_frame_size(&req->base);
	if (!len || len - WIRE_HEADER_BYTES > CLIENT_MAX_FRAME) {
		client_fail(err, CLIENT_EPROTO, "the request is over the %u MiB limit",
		            CLIENT_MAX_FRAME >> 20);
		return NULL;
	}
	uint8_t *out = malloc(len);
	if (!out) {
		client_fail(err, CLIENT_ENOMEM, "out of memory");
		return NULL;
	}
	wire_frame_pack(&req->base, out);
	int rc = client_send(c, out, len, err);
	free(out);
	if (rc != 0) {
		c->broken = true;
		/* A daemon that closed on us (over its connection limit) may have said why first. */
		if (err->status == CLIENT_EPROTO)
			client_read_parting_error(c, err);
		return NULL;
	}

	struct client_answer a;
	if (client_answer_start(&a, req->id, want, err) != 0)
		return NULL;
	for (;;) {
		uint8_t *buf = NULL;
		if (client_recv_frame(c, CLIENT_MAX_REPLY - a.wire, &buf, &len, err) != 0) {
			c->broken = true;
			break;
		}
		bool in_step = true;
		rc = client_answer_part(&a, buf, len, err, &in_step);
		free(buf);
		if (rc == 0)
			return client_answer_take(&a);
		if (rc < 0) {
			c->broken = !in_step;
			break;
		}
	}
	client_answer_abandon(&a);
	return NULL;
}
