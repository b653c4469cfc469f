/* The status request: the daemon's health, whole for root, a user's own share for others. */
#include <unistd.h>

#include "pyprofd.h"
#include "rpc_handlers.h"

/*
 * What status shows a user other than root (and other than the user the
 * daemon runs as, whose it all is): the counts of its own targets
 * (those it may act on), connections and queries, and the daemon's
 * settings and health.  Every figure of the whole daemon (other users'
 * connections and refusals, memory, CPU, history rows, processes the rules
 * judged) would tell it what other users do, and stays 0: what all holds
 * is copied field by field, so a figure added later is root's until it is
 * listed here.
 */
static void rpc_status_own(const struct server *s, const struct client *c,
                           const Pyprofd__StatusResult *all, Pyprofd__StatusResult *own)
{
	own->own_only = true;
	own->version = all->version;
	own->pid = all->pid;
	own->uptime_s = all->uptime_s;
	for (size_t i = 0; i < s->targets.n; i++) {
		const struct target *t = s->targets.v[i];
		if (!rpc_may_see(c, t->uid, t->gid))
			continue;
		own->targets_sampling += t->state == TARGET_SAMPLING;
		own->targets_detached += t->state == TARGET_DETACHED;
		own->targets_exited += t->state == TARGET_EXITED;
		if (t->state == TARGET_DETACHED)
			own->warm_bytes += target_cache_bytes(t);
		if (t->state == TARGET_SAMPLING)
			own->cache_bytes += target_cache_bytes(t);
		own->count_bytes += target_count_bytes(t);
	}
	for (const struct client *other = s->clients; other; other = other->next)
		own->connections += other->uid == c->uid;
	own->queries_running = queries_count(&s->jobs, c->uid).of_uid;
	own->warm_budget_bytes = all->warm_budget_bytes;
	own->cache_budget_bytes = all->cache_budget_bytes;
	own->history_cache_budget_bytes = all->history_cache_budget_bytes;
	own->state_dir = all->state_dir;
	own->socket = all->socket;
	own->history_file = all->history_file;
	own->history_open = all->history_open;
	own->history_failing = all->history_failing;
	own->history_error = all->history_error;
	own->discovery = all->discovery;
	own->idle_default = all->idle_default; /* what the user's own views do */
	own->rules = all->rules; /* `rules list` shows them to everyone */
	own->cpu_budget_percent = all->cpu_budget_percent;
	/* budget_status listed this user's share alone. */
	own->uid_cpu_budget_percent = all->uid_cpu_budget_percent;
	own->n_user_budgets = all->n_user_budgets;
	own->user_budgets = all->user_budgets;
}

void rpc_status(struct server *s, struct client *c, const Pyprofd__Request *req,
                Pyprofd__Response *resp, struct arena *a)
{
	(void)req;
	Pyprofd__StatusResult *res = ARENA_MESSAGE(a, Pyprofd__StatusResult, PYPROFD__STATUS_RESULT__INIT);
	bool whole = c->uid == 0 || c->uid == geteuid();
	Pyprofd__StatusResult *own =
	        whole ? res : ARENA_MESSAGE(a, Pyprofd__StatusResult, PYPROFD__STATUS_RESULT__INIT);
	if (!res || !own) {
		rpc_out_of_memory(resp, a);
		return;
	}
	res->version = (char *)PYPROFD_VERSION;
	res->pid = (int32_t)getpid();
	res->uptime_s = ev_now(s->loop) - s->started;
	for (size_t i = 0; i < s->targets.n; i++) {
		enum target_state st = s->targets.v[i]->state;
		res->targets_sampling += st == TARGET_SAMPLING;
		res->targets_detached += st == TARGET_DETACHED;
		res->targets_exited += st == TARGET_EXITED;
	}
	res->connections = s->nclients;
	res->connections_refused = s->connections_refused;
	res->connections_timed_out = s->connections_timed_out;
	res->queued_bytes = s->queued_bytes;
	res->queries_running = queries_count(&s->jobs, 0).all;
	res->warm_bytes = targets_warm_bytes(&s->targets);
	res->warm_budget_bytes = s->config.warm_budget_bytes;
	res->cache_bytes = targets_cache_bytes(&s->targets);
	res->cache_budget_bytes = s->config.cache_budget_bytes;
	res->count_bytes = targets_count_bytes(&s->targets);
	res->rss_bytes = usage_rss_bytes();
	res->cpu_percent = res->uptime_s > 0 ? 100.0 * usage_cpu_seconds() / res->uptime_s : 0;
	res->schedule_wakeups = s->schedule.wakeups;
	res->schedule_ticks = s->schedule.ticks;
	res->schedule_missed_ticks = s->schedule.missed;
	schedule_lateness(&s->schedule, &res->schedule_lateness_us_p50, &res->schedule_lateness_us_p99);
	res->schedule_behind = s->schedule.keep.behind;
	res->schedule_behind_since_unix = s->schedule.keep.since_unix;
	res->schedule_behind_episodes = s->schedule.keep.episodes;
	res->schedule_missed_percent = s->schedule.keep.missed_share * 100;
	struct uw_kreader_state k = uw_kreader_state(
		s->kreader, s->config.no_kernel_reader ? "off ([sampling] kernel_reader = false)" : s->kreader_err.msg);
	res->kernel_reader = (char *)k.reader;
	res->kernel_look = (char *)k.look;
	res->kernel_copy = (char *)k.copy;
	res->config_reload_failed_unix = s->reload_failed_at;
	res->config_reload_error = s->reload_error;
	res->idle_default = (char *)config_idle_names[s->config.drop_idle];
	res->state_dir = s->config.state_dir;
	res->socket = s->socket_activated ? (char *)"(from systemd)" : s->config.socket_path;
	history_status(&s->history, res, a);
	fleet_status(&s->fleet, res);
	budget_status(&s->budget, c->uid, res, a);
	otlp_sender_status(&s->otlp, res, a);
	if (own != res)
		rpc_status_own(s, c, res, own);
	resp->result_case = PYPROFD__RESPONSE__RESULT_STATUS;
	resp->status = own;
}
