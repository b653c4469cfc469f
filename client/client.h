/*
 * client — talk to pyprofd over its Unix socket.
 *
 * One connection, requests answered in order.  Every frame is a 4-byte
 * big-endian length and one protobuf message (proto/pyprofd.proto).  What
 * the daemon sends is checked as if it came from the network: frame length,
 * total size of an answer, memory its decoding may take, and time.
 */
#ifndef PYPROFD_CLIENT_H
#define PYPROFD_CLIENT_H

#include <signal.h>
#include <stddef.h>

#include "pyprofd.pb-c.h"

/* Connecting, and each frame of an answer, give up after this long. */
#define CLIENT_TIMEOUT_MS 30000

/* Bounds on one answer; past them the answer is refused, not allocated. */
#define CLIENT_MAX_FRAME (64u << 20)         /* bytes of one frame */
#define CLIENT_MAX_REPLY (256u << 20)        /* bytes of all the frames of one answer */
#define CLIENT_MAX_DECODED ((size_t)512 << 20) /* memory decoding one answer may use */
#define CLIENT_MAX_PARTS 65536               /* frames of one answer */

enum client_status {
	CLIENT_OK = 0,
	CLIENT_EUNREACHABLE, /* no connection: nothing listens, no rights, no answer in time */
	CLIENT_EDAEMON,      /* the daemon answered with an Error: see code */
	CLIENT_EPROTO,       /* the answer was cut, undecodable, too large, or not ours */
	CLIENT_ETIMEOUT,     /* connected, but an answer did not come in time */
	CLIENT_EINTR,        /* the interrupt flag was raised while waiting */
	CLIENT_ENOMEM,
};

/* What went wrong, for a person: one line without a newline. */
struct client_error {
	enum client_status status;
	Pyprofd__ErrorCode code; /* for CLIENT_EDAEMON */
	char msg[512];
};

struct client;

/*
 * The answer to one request: every response frame carrying it, in order.
 * All parts hold the same result case; only the last has `more` clear.
 */
struct client_reply {
	size_t nparts;
	Pyprofd__Response **parts;
	struct client_arena *arena; /* private: what the parts were decoded into */
};

/* Connect to the daemon's socket; NULL and *err on failure. */
struct client *client_connect(const char *path, struct client_error *err);

/* Close the connection and free it. */
void client_free(struct client *c);

/*
 * While a call waits, a signal that sets *flag non-zero makes it give up with
 * CLIENT_EINTR instead of waiting out the timeout (for an interactive view).
 */
void client_set_interrupt(struct client *c, const volatile sig_atomic_t *flag);

/*
 * Send req (its version and id are filled in here) and read its whole answer.
 * NULL and *err when the exchange failed or the daemon answered an Error.
 */
struct client_reply *client_call(struct client *c, Pyprofd__Request *req, struct client_error *err);

void client_reply_free(struct client_reply *reply);

#endif
