/* Frames and error responses, for the daemon and its clients alike. */
#include <string.h>

#include "array.h"
#include "wire.h"

uint32_t wire_frame_length(const uint8_t header[WIRE_HEADER_BYTES])
{
	return (uint32_t)header[0] << 24 | (uint32_t)header[1] << 16 | (uint32_t)header[2] << 8 |
	       header[3];
}

size_t wire_frame_size(const ProtobufCMessage *msg)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	return len > UINT32_MAX ? 0 : len + WIRE_HEADER_BYTES;
}

void wire_frame_pack(const ProtobufCMessage *msg, uint8_t *out)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	out[0] = (uint8_t)(len >> 24);
	out[1] = (uint8_t)(len >> 16);
	out[2] = (uint8_t)(len >> 8);
	out[3] = (uint8_t)len;
	protobuf_c_message_pack(msg, out + WIRE_HEADER_BYTES);
}

int wire_frame_append(uint8_t **data, size_t *len, size_t *cap, const ProtobufCMessage *msg)
{
	size_t size = wire_frame_size(msg);
	if (!size || *len > SIZE_MAX - size ||
	    array_reserve((void **)data, cap, *len + size - 1, 1, NULL) != 0)
		return -1;
	wire_frame_pack(msg, *data + *len);
	*len += size;
	return 0;
}

void wire_error(Pyprofd__Response *resp, Pyprofd__Error *e, uint64_t id, Pyprofd__ErrorCode code,
                const char *message)
{
	pyprofd__error__init(e);
	e->code = code;
	e->message = (char *)message;
	pyprofd__response__init(resp);
	resp->id = id;
	resp->result_case = PYPROFD__RESPONSE__RESULT_ERROR;
	resp->error = e;
}
