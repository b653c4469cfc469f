/* The requests answered from the history later, as jobs: queries and backfills. */
#include <unistd.h>

#include "pyprofd.h"
#include "rpc_handlers.h"

/* A history query: checked and started here, answered from its thread later. */
void rpc_query(struct server *s, struct client *c, const Pyprofd__Request *req,
               Pyprofd__Response *resp, struct arena *a)
{
	if (!s->history.path) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_INTERNAL, "this daemon keeps no history");
		return;
	}
	/* What was sampled up to now goes to the writer first; the query waits for it. */
	targets_flush(&s->targets);
	struct query_origin o = {.client_serial = c->serial,
	                         .request_id = req->id,
	                         .uid = c->uid,
	                         .writer = s->history.writer,
	                         .no_idle = rpc_idle_left_out(s, req->query->idle_policy,
	                                                      req->query->no_idle)};
	char why[256];
	Pyprofd__ErrorCode code = queries_start(&s->jobs, &o, req->query, why, sizeof why);
	if (code != PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED)
		rpc_error(resp, a, code, "%s", why);
	else
		resp->result_case = PYPROFD__RESPONSE__RESULT__NOT_SET; /* answered later */
}

/* A backfill to a collector: root's and the daemon's user's; answered from its thread later. */
void rpc_otlp_export(struct server *s, struct client *c, const Pyprofd__Request *req,
                     Pyprofd__Response *resp, struct arena *a)
{
	/* The daemon would connect where the caller says, with its own network's reach. */
	if (c->uid != 0 && c->uid != geteuid()) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_PERMISSION,
		          "only root may send the history to a collector");
		return;
	}
	/* What was sampled up to now goes to the writer first; the backfill waits for it. */
	targets_flush(&s->targets);
	char why[256];
	Pyprofd__ErrorCode code = otlp_backfill_start(&s->otlp, &s->jobs, c->serial, c->uid, req, why,
	                                           sizeof why);
	if (code != PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED)
		rpc_error(resp, a, code, "%s", why);
	else
		resp->result_case = PYPROFD__RESPONSE__RESULT__NOT_SET; /* answered later */
}
