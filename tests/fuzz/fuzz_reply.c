/*
 * libFuzzer harness for the client's reading of an answer: the input is
 * what a daemon (or anything on its socket) sends back to request 1 of a
 * query.  Besides the sanitizers' checks it aborts when an accepted answer
 * breaks what the client relies on: at least one part, none past the bound,
 * every part the query result of request 1, only the last without `more`,
 * and no more bytes taken than were given.  `make fuzz` builds and runs it.
 */
#include <stdint.h>
#include <stdlib.h>

#include "client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t used = 0;
	struct client_error err;
	struct client_reply *r =
		client_reply_decode(data, size, 1, PYPROFD__RESPONSE__RESULT_QUERY, &used, &err);
	if (!r)
		return 0;
	if (r->nparts == 0 || r->nparts > CLIENT_MAX_PARTS || used > size)
		abort();
	for (size_t i = 0; i < r->nparts; i++) {
		const Pyprofd__Response *p = r->parts[i];
		if (p->id != 1 || p->result_case != PYPROFD__RESPONSE__RESULT_QUERY || !p->query ||
		    p->more != (i + 1 < r->nparts))
			abort();
	}
	client_reply_free(r);
	return 0;
}
