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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
	struct client_budget *arena; /* private: what the parts were decoded into */
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

/* The result case that answers a request case. */
Pyprofd__Response__ResultCase client_result_case(Pyprofd__Request__BodyCase body);

/*
 * Reading an answer, a frame at a time: every check of what the daemon sent
 * (sizes, parts, decoding memory, ids, result cases) is made here, on
 * bytes, so it holds for a socket and for a test or fuzzer alike.
 */
struct client_answer {
	uint64_t id;
	Pyprofd__Response__ResultCase want;
	struct client_reply *reply;
	size_t parts_cap;
	size_t wire; /* bytes of the frames so far */
};
int client_answer_start(struct client_answer *a, uint64_t id, Pyprofd__Response__ResultCase want,
                        struct client_error *err);
/*
 * One frame's payload: 1 when parts follow, 0 when the answer is whole,
 * -1 and *err when it failed (also when the daemon answered an Error);
 * *in_step says whether the stream still is (the next answer readable).
 */
int client_answer_part(struct client_answer *a, const uint8_t *payload, size_t len,
                       struct client_error *err, bool *in_step);
/* The whole answer, now the caller's. */
struct client_reply *client_answer_take(struct client_answer *a);
void client_answer_abandon(struct client_answer *a);

/*
 * An answer to request id from bytes as the socket would give them: the
 * reply, or NULL and *err; *used is how many bytes its frames took.
 */
struct client_reply *client_reply_decode(const uint8_t *bytes, size_t len, uint64_t id,
                                         Pyprofd__Response__ResultCase want, size_t *used,
                                         struct client_error *err);

#endif
