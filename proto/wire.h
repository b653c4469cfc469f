/*
 * wire — the framing of proto/pyprofd.proto on a stream, one home for both
 * sides: a 4-byte big-endian length, then one protobuf message.  Also the
 * one way to build an error Response.
 */
#ifndef PYPROFD_WIRE_H
#define PYPROFD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "pyprofd.pb-c.h"

#define WIRE_HEADER_BYTES 4

/* The length a frame's header announces. */
uint32_t wire_frame_length(const uint8_t header[WIRE_HEADER_BYTES]);

/* Bytes msg takes framed; 0 if its length does not fit a header. */
size_t wire_frame_size(const ProtobufCMessage *msg);

/* Frame msg into out, which has wire_frame_size(msg) bytes. */
void wire_frame_pack(const ProtobufCMessage *msg, uint8_t *out);

/*
 * Append msg, framed, to the buffer *data of *len bytes (room *cap), growing
 * it.  0, or -1 when out of memory or the message is too large to frame.
 */
int wire_frame_append(uint8_t **data, size_t *len, size_t *cap, const ProtobufCMessage *msg);

/*
 * resp made an error answering request id: e is the caller's to keep (an
 * automatic variable does), message is not copied.
 */
void wire_error(Pyprofd__Response *resp, Pyprofd__Error *e, uint64_t id, Pyprofd__ErrorCode code,
                const char *message);

#endif
