/*
 * check — what a request must be besides decodable, one home for both
 * sides: the daemon refuses a request that is not, pyprofd-ctl refuses to
 * send one, in the same words.  Every string a client sends is UTF-8 (as
 * proto3 says and strict clients hold the answers to) without a NUL byte
 * (the daemon keeps C strings: "a\0b" would become "a"); every time bound
 * is unix seconds within CHECK_UNIX_MIN..CHECK_UNIX_MAX, and a range is in
 * order; a query asks for at most CHECK_MAX_TIME_SLOTS time slots; a
 * query's or top's idle_policy is one the protocol has, and not IDLE_KEEP
 * beside the older no_idle; a query's trace, span and context labels are
 * of the lengths below.
 */
#ifndef PYPROFD_CHECK_H
#define PYPROFD_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "pyprofd.pb-c.h"

/*
 * The times a request may name: from 1970 to 2255-03-14, as far as a time
 * in nanoseconds still fits 64 bits (pprof's profiles count in them).
 */
#define CHECK_UNIX_MIN 0.0
#define CHECK_UNIX_MAX 9.0e9

/* A query's time slots: a page draws a few hundred; more only multiplies an answer's rows. */
#define CHECK_MAX_TIME_SLOTS 10000

/*
 * A query's request context (issue 45): trace_id 16 bytes and not all zero,
 * span_id 8, at most this many context labels, each a key of 1 to 31 bytes
 * without '=', and a value of at most 63, neither with a line break (the
 * store keeps a context's labels as "key=value" lines).
 */
#define CHECK_TRACE_ID_LEN 16
#define CHECK_SPAN_ID_LEN 8
#define CHECK_CONTEXT_LABELS_MAX 8
#define CHECK_CONTEXT_KEY_MAX 31
#define CHECK_CONTEXT_VALUE_MAX 63

/* The bytes of s that are whole UTF-8 characters from its start: len when it all is. */
size_t check_utf8_prefix(const uint8_t *s, size_t len);

/*
 * Every string field of the message of type desc packed in data, nested
 * messages included, is UTF-8 without a NUL byte.  0, or -1 with why
 * naming the field ("attach.labels[1].value") and what is wrong; bytes
 * that are not a protobuf message are refused too.  Read on the bytes, as
 * protobuf-c hands strings over cut at their first NUL.
 */
int check_strings(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                  char *why, size_t why_len);

/*
 * The time range [from, until) of a request, its fields named as given:
 * each bound finite and within CHECK_UNIX_MIN..CHECK_UNIX_MAX, from <=
 * until; until 0 is an open end (now).  0, or -1 with why.
 */
int check_time_range(const char *from_name, double from, const char *until_name, double until,
                     char *why, size_t why_len);

/* req, decoded from the len bytes at data: its strings, time ranges and idle policies.  0, or -1 with why. */
int check_request(const Pyprofd__Request *req, const uint8_t *data, size_t len, char *why,
                  size_t why_len);

#endif
