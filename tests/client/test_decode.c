/*
 * The client's reading of an answer (client_reply_decode and the
 * client_answer it is made of), on bytes as a daemon would send them: what
 * the daemon sends is untrusted, so every bound is checked before memory is
 * given to it, and an answer is taken only when it is whole and ours.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "wire.h"

/* Bytes built frame by frame, as the daemon writes them. */
struct stream {
	uint8_t *data;
	size_t len, cap;
};

static void stream_frame(struct stream *s, const Pyprofd__Response *resp)
{
	cr_assert_eq(wire_frame_append(&s->data, &s->len, &s->cap, &resp->base), 0);
}

/* A status result part (more: parts follow). */
static void stream_status(struct stream *s, uint64_t id, bool more)
{
	Pyprofd__Response resp = PYPROFD__RESPONSE__INIT;
	Pyprofd__StatusResult st = PYPROFD__STATUS_RESULT__INIT;
	st.version = "9.9";
	resp.id = id;
	resp.more = more;
	resp.result_case = PYPROFD__RESPONSE__RESULT_STATUS;
	resp.status = &st;
	stream_frame(s, &resp);
}

static struct client_reply *decode(const struct stream *s, uint64_t id, size_t *used,
                                   struct client_error *err)
{
	return client_reply_decode(s->data, s->len, id, PYPROFD__RESPONSE__RESULT_STATUS, used, err);
}

Test(decode, a_whole_answer_in_parts)
{
	struct stream s = {0};
	stream_status(&s, 7, true);
	stream_status(&s, 7, true);
	stream_status(&s, 7, false);
	stream_status(&s, 8, false); /* the next answer: not read */
	size_t used;
	struct client_error err;
	struct client_reply *r = decode(&s, 7, &used, &err);
	cr_assert_not_null(r, "%s", err.msg);
	cr_assert_eq(r->nparts, 3);
	cr_assert_str_eq(r->parts[2]->status->version, "9.9");
	cr_assert_lt(used, s.len, "the next answer's bytes were taken");
	client_reply_free(r);
	free(s.data);
}

Test(decode, cut_answers_are_refused)
{
	struct stream s = {0};
	stream_status(&s, 1, false);
	size_t used;
	struct client_error err;
	for (size_t cut = 0; cut < s.len; cut++) {
		struct stream part = {s.data, cut, cut};
		cr_assert_null(decode(&part, 1, &used, &err), "an answer cut at %zu was taken", cut);
		cr_assert_eq(err.status, CLIENT_EPROTO);
	}
	/* A first part whose last part never came. */
	struct stream more = {0};
	stream_status(&more, 1, true);
	cr_assert_null(decode(&more, 1, &used, &err));
	free(more.data);
	free(s.data);
}

Test(decode, lengths_past_the_limits_are_refused_unread)
{
	uint8_t huge[4];
	uint32_t n = CLIENT_MAX_FRAME + 1;
	huge[0] = (uint8_t)(n >> 24), huge[1] = (uint8_t)(n >> 16), huge[2] = (uint8_t)(n >> 8),
	huge[3] = (uint8_t)n;
	size_t used;
	struct client_error err;
	cr_assert_null(client_reply_decode(huge, sizeof huge, 1, PYPROFD__RESPONSE__RESULT_STATUS,
	                                   &used, &err));
	cr_assert(strstr(err.msg, "over the"), "%s", err.msg);
}

Test(decode, an_answer_to_another_request_is_not_ours)
{
	struct stream s = {0};
	stream_status(&s, 5, false);
	size_t used;
	struct client_error err;
	cr_assert_null(decode(&s, 6, &used, &err));
	cr_assert_eq(err.status, CLIENT_EPROTO);
	cr_assert(strstr(err.msg, "id"), "%s", err.msg);
	free(s.data);
}

Test(decode, another_result_case_is_refused)
{
	struct stream s = {0};
	Pyprofd__Response resp = PYPROFD__RESPONSE__INIT;
	Pyprofd__ListResult list = PYPROFD__LIST_RESULT__INIT;
	resp.id = 1;
	resp.result_case = PYPROFD__RESPONSE__RESULT_LIST;
	resp.list = &list;
	stream_frame(&s, &resp);
	size_t used;
	struct client_error err;
	cr_assert_null(decode(&s, 1, &used, &err));
	cr_assert_eq(err.status, CLIENT_EPROTO);
	free(s.data);
}

Test(decode, an_error_is_the_answer_and_keeps_the_stream_in_step)
{
	/* Id 0: the daemon could not read the request's id (a refused connection, say). */
	struct stream s = {0};
	Pyprofd__Response resp;
	Pyprofd__Error e;
	wire_error(&resp, &e, 0, PYPROFD__ERROR_CODE__ERROR_LIMIT, "too many\nconnections");
	stream_frame(&s, &resp);
	struct client_answer a;
	struct client_error err;
	cr_assert_eq(client_answer_start(&a, 3, PYPROFD__RESPONSE__RESULT_STATUS, &err), 0);
	bool in_step;
	cr_assert_eq(client_answer_part(&a, s.data + 4, s.len - 4, &err, &in_step), -1);
	cr_assert_eq(err.status, CLIENT_EDAEMON);
	cr_assert_eq(err.code, PYPROFD__ERROR_CODE__ERROR_LIMIT);
	cr_assert(in_step, "an error answer ends its answer, nothing more");
	cr_assert_str_eq(err.msg, "too many connections", "the daemon's message is made one line");
	client_answer_abandon(&a);
	free(s.data);
}

Test(decode, bytes_that_are_no_response)
{
	uint8_t frame[4 + 3] = {0, 0, 0, 3, 0xff, 0xff, 0xff};
	size_t used;
	struct client_error err;
	cr_assert_null(client_reply_decode(frame, sizeof frame, 1, PYPROFD__RESPONSE__RESULT_STATUS,
	                                   &used, &err));
	cr_assert(strstr(err.msg, "undecodable"), "%s", err.msg);
}

Test(decode, parts_past_the_bound_are_refused)
{
	struct stream s = {0};
	for (unsigned i = 0; i <= CLIENT_MAX_PARTS; i++)
		stream_status(&s, 1, true);
	size_t used;
	struct client_error err;
	cr_assert_null(decode(&s, 1, &used, &err));
	cr_assert(strstr(err.msg, "parts"), "%s", err.msg);
	free(s.data);
}

Test(decode, result_cases_answer_their_requests)
{
	cr_assert_eq(client_result_case(PYPROFD__REQUEST__BODY_QUERY), PYPROFD__RESPONSE__RESULT_QUERY);
	cr_assert_eq(client_result_case(PYPROFD__REQUEST__BODY_DUMP), PYPROFD__RESPONSE__RESULT_DUMP);
	cr_assert_eq(client_result_case((Pyprofd__Request__BodyCase)99), PYPROFD__RESPONSE__RESULT__NOT_SET);
}
