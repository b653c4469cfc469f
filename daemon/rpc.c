/*
 * The requests the daemon answers, one handler each, found in a table by
 * the request's type; each family of handlers has a file of its own
 * (rpc_targets.c, rpc_top.c, rpc_status.c, rpc_rules.c, rpc_history.c),
 * and who may act on what is rpc_access.c's.  The protocol version is
 * checked before dispatch.
 */
#include "pyprofd.h"
#include "rpc_handlers.h"

static const struct {
	Pyprofd__Request__BodyCase body;
	const char *name;
	rpc_handler handle;
} handlers[] = {
	{PYPROFD__REQUEST__BODY_ATTACH, "attach", rpc_attach},
	{PYPROFD__REQUEST__BODY_DETACH, "detach", rpc_detach},
	{PYPROFD__REQUEST__BODY_LIST, "list", rpc_list},
	{PYPROFD__REQUEST__BODY_DUMP, "dump", rpc_dump},
	{PYPROFD__REQUEST__BODY_STATS, "stats", rpc_stats},
	{PYPROFD__REQUEST__BODY_STATUS, "status", rpc_status},
	{PYPROFD__REQUEST__BODY_TOP, "top", rpc_top},
	{PYPROFD__REQUEST__BODY_RULES, "rules", rpc_rules},
	{PYPROFD__REQUEST__BODY_QUERY, "query", rpc_query},
	{PYPROFD__REQUEST__BODY_OTLP_EXPORT, "otlp_export", rpc_otlp_export},
};

bool rpc_dispatch(struct server *s, struct client *c, const Pyprofd__Request *req,
                  Pyprofd__Response *resp, struct arena *a)
{
	if (req->version != PYPROFD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_PROTOCOL,
		          "protocol version %u is not spoken here (this daemon speaks %d)", req->version,
		          PYPROFD__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT);
		return true;
	}
	for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
		if (handlers[i].body == req->body_case) {
			log_debug("uid %d: %s", (int)c->uid, handlers[i].name);
			handlers[i].handle(s, c, req, resp, a);
			/* Every handler answers now or with an error, save those that went to a job (jobs.c). */
			return resp->result_case != PYPROFD__RESPONSE__RESULT__NOT_SET;
		}
	rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "the request has no known body");
	return true;
}
