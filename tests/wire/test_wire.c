/*
 * The wire library alone: frames as the contract defines them (4-byte
 * big-endian length, then the message), error responses, and the shared
 * vocabulary, whose tables both programs' exit statuses and the daemon's
 * error codes come from.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "vocab.h"
#include "wire.h"

Test(wire, frame_is_length_then_message)
{
	Pyprofd__Response resp;
	Pyprofd__Error e;
	wire_error(&resp, &e, 77, PYPROFD__ERROR_CODE__ERROR_LIMIT, "too many");
	size_t size = wire_frame_size(&resp.base);
	size_t packed = pyprofd__response__get_packed_size(&resp);
	cr_assert_eq(size, packed + WIRE_HEADER_BYTES);
	uint8_t *buf = malloc(size);
	wire_frame_pack(&resp.base, buf);
	cr_assert_eq(buf[0], (packed >> 24) & 0xff);
	cr_assert_eq(buf[3], packed & 0xff);
	cr_assert_eq(wire_frame_length(buf), packed);
	Pyprofd__Response *back = pyprofd__response__unpack(NULL, packed, buf + WIRE_HEADER_BYTES);
	cr_assert_not_null(back);
	cr_assert_eq(back->id, 77);
	cr_assert_eq(back->result_case, PYPROFD__RESPONSE__RESULT_ERROR);
	cr_assert_eq(back->error->code, PYPROFD__ERROR_CODE__ERROR_LIMIT);
	cr_assert_str_eq(back->error->message, "too many");
	pyprofd__response__free_unpacked(back, NULL);
	free(buf);
}

Test(wire, length_is_big_endian)
{
	const uint8_t header[4] = {0x01, 0x02, 0x03, 0x04};
	cr_assert_eq(wire_frame_length(header), 0x01020304u);
	const uint8_t max[4] = {0xff, 0xff, 0xff, 0xff};
	cr_assert_eq(wire_frame_length(max), UINT32_MAX);
}

Test(wire, frames_append_back_to_back)
{
	uint8_t *data = NULL;
	size_t len = 0, cap = 0;
	for (uint64_t id = 1; id <= 1000; id++) {
		Pyprofd__Response resp;
		Pyprofd__Error e;
		wire_error(&resp, &e, id, PYPROFD__ERROR_CODE__ERROR_INTERNAL, "x");
		cr_assert_eq(wire_frame_append(&data, &len, &cap, &resp.base), 0);
	}
	size_t off = 0;
	for (uint64_t id = 1; id <= 1000; id++) {
		cr_assert_leq(off + WIRE_HEADER_BYTES, len);
		uint32_t n = wire_frame_length(data + off);
		Pyprofd__Response *r = pyprofd__response__unpack(NULL, n, data + off + WIRE_HEADER_BYTES);
		cr_assert_not_null(r);
		cr_assert_eq(r->id, id);
		pyprofd__response__free_unpacked(r, NULL);
		off += WIRE_HEADER_BYTES + n;
	}
	cr_assert_eq(off, len);
	free(data);
}

Test(vocab, every_unwinder_status_has_its_documented_exit_and_code)
{
	static const struct {
		enum uw_status status;
		enum exit_status exit;
		Pyprofd__ErrorCode code;
	} want[] = {
		{UW_OK, 0, PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED},
		{UW_ENOPROC, 3, PYPROFD__ERROR_CODE__ERROR_NO_PROCESS},
		{UW_EPERM, 4, PYPROFD__ERROR_CODE__ERROR_PERMISSION},
		{UW_ENOTPYTHON, 5, PYPROFD__ERROR_CODE__ERROR_NOT_PYTHON},
		{UW_EVERSION, 6, PYPROFD__ERROR_CODE__ERROR_UNSUPPORTED},
		{UW_EGONE, 7, PYPROFD__ERROR_CODE__ERROR_EXITED},
		{UW_ECORRUPT, 8, PYPROFD__ERROR_CODE__ERROR_CORRUPT},
		{UW_ENOMEM, 1, PYPROFD__ERROR_CODE__ERROR_INTERNAL},
		{UW_EIO, 1, PYPROFD__ERROR_CODE__ERROR_INTERNAL},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		cr_assert_eq(vocab_status_exit(want[i].status), want[i].exit, "status %d", (int)i);
		cr_assert_eq(vocab_status_code(want[i].status), want[i].code, "status %d", (int)i);
		/* What the daemon answers, pyprofd-ctl reports with the exit pyprofd would give. */
		if (want[i].status != UW_OK)
			cr_assert_eq(vocab_code_exit(vocab_status_code(want[i].status)), want[i].exit);
		cr_assert_str_neq(vocab_status_name(want[i].status), "unknown error");
	}
	cr_assert_str_eq(vocab_status_name(UW_ENOPROC), "no such process");
	cr_assert_eq(vocab_code_exit(PYPROFD__ERROR_CODE__ERROR_NOT_ATTACHED), EXIT_NOT_ATTACHED);
	cr_assert_eq(vocab_code_exit(PYPROFD__ERROR_CODE__ERROR_LIMIT), EXIT_FAILURE_OTHER);
	cr_assert_eq(vocab_code_exit(PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED), EXIT_FAILURE_OTHER);
	cr_assert_eq(vocab_code_exit((Pyprofd__ErrorCode)999), EXIT_FAILURE_OTHER);
}

Test(vocab, modes_round_trip)
{
	const char *names[] = {"wall", "cpu", "gil"};
	for (size_t i = 0; i < 3; i++) {
		enum uw_mode m;
		Pyprofd__Mode w;
		cr_assert_eq(vocab_mode_parse(names[i], &m), 0);
		cr_assert_str_eq(vocab_mode_name(m), names[i]);
		cr_assert_eq(vocab_wire_mode_parse(names[i], &w), 0);
		cr_assert_str_eq(vocab_wire_mode_name(w), names[i]);
		enum uw_mode back;
		cr_assert_eq(vocab_mode_from_wire(vocab_mode_to_wire(m), &back), 0);
		cr_assert_eq(back, m);
	}
	enum uw_mode m;
	cr_assert_eq(vocab_mode_parse("Wall", &m), -1);
	cr_assert_eq(vocab_mode_parse(NULL, &m), -1);
	cr_assert_eq(vocab_mode_from_wire((Pyprofd__Mode)9, &m), -1);
	cr_assert_str_eq(vocab_wire_mode_name((Pyprofd__Mode)9), "unknown");
}

Test(vocab, frame_kinds_round_trip)
{
	enum uw_frame_kind kinds[] = {UW_FRAME_PYTHON, UW_FRAME_NATIVE, UW_FRAME_GC};
	for (size_t i = 0; i < 3; i++)
		cr_assert_eq(vocab_kind_parse(vocab_kind_name(kinds[i])), kinds[i]);
	cr_assert_str_eq(vocab_kind_name(UW_FRAME_NATIVE), "native");
	cr_assert_eq(vocab_kind_parse(""), UW_FRAME_PYTHON, "the wire's empty string");
	cr_assert_eq(vocab_kind_parse(NULL), UW_FRAME_PYTHON);
}
