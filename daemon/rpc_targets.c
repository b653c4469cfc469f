/* The requests on one process: attach, detach, list, dump and stats. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fleet_labels.h"
#include "pyprofd.h"
#include "rpc_handlers.h"

#define LABEL_KEY_MAX 128
#define LABEL_VALUE_MAX 1024
/*
 * The time a dump with its asyncio tasks may take on the loop: thousands of
 * tasks read cold take more than a sample's bound, and a dump is asked for
 * now and then.  Tasks past it are left out, and the dump says so.
 */
#define DUMP_TASKS_NS (50u * 1000 * 1000)

/* The attach request as target parameters, checked; -1 with the error in resp. */
static int rpc_attach_params(struct server *s, const Pyprofd__AttachRequest *req, bool by_user,
                             struct target_params *p, Pyprofd__Response *resp, struct arena *a)
{
	memset(p, 0, sizeof *p);
	p->rate_hz = req->rate_hz ? req->rate_hz : s->config.default_rate_hz;
	if (p->rate_hz > s->config.max_rate_hz) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
		          "a rate of %u Hz is above the daemon's maximum of %u Hz", p->rate_hz,
		          s->config.max_rate_hz);
		return -1;
	}
	if (vocab_mode_from_wire(req->mode, &p->mode) != 0) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "unknown sampling mode %d",
		          (int)req->mode);
		return -1;
	}
	if (!isfinite(req->duration_s) || req->duration_s < 0 || req->duration_s > 1e9) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
		          "a duration must be a number of seconds, 0 for no end");
		return -1;
	}
	if (vocab_async_mode_from_wire(req->async_mode, &p->async_mode) != 0) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "unknown async mode %d",
		          (int)req->async_mode);
		return -1;
	}
	char why[256];
	if (req->context[0] && context_spec_kind(&p->context, req->context, why, sizeof why) != 0) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "%s", why);
		return -1;
	}
	for (size_t i = 0; i < req->n_context_labels; i++)
		if (context_spec_add_label(&p->context, req->context_labels[i], why, sizeof why) != 0) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "%s", why);
			return -1;
		}
	p->duration_s = req->duration_s;
	p->flags = (req->native ? UW_SNAP_NATIVE : 0u) | (req->gc ? UW_SNAP_GC : 0u);
	p->no_write = req->no_write;
	if (req->n_labels > LABELS_GIVEN_MAX) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "more than %d labels",
		          LABELS_GIVEN_MAX);
		return -1;
	}
	for (size_t i = 0; i < req->n_labels; i++) {
		const char *k = req->labels[i]->key, *v = req->labels[i]->value;
		if (!*k || strlen(k) > LABEL_KEY_MAX || strlen(v) > LABEL_VALUE_MAX ||
		    strpbrk(k, "=,\n")) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
			          "label keys are 1 to %d characters without '=', ',' or newlines; values "
			          "up to %d",
			          LABEL_KEY_MAX, LABEL_VALUE_MAX);
			return -1;
		}
		if (proc_facts_label_is_own(k)) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
			          "the label '%s' is the process's own (PYPROFD_LABELS), under '" LABELS_OWN_PREFIX
			          "', for it alone to set",
			          k);
			return -1;
		}
	}
	/*
	 * A user other than root speaks for its own process alone: the labels
	 * it names it with are that process's claims, kept under
	 * LABELS_OWN_PREFIX as its PYPROFD_LABELS are, so that no user's
	 * process passes for one of root's services.
	 */
	for (size_t i = 0; i < req->n_labels; i++) {
		char own[sizeof LABELS_OWN_PREFIX + LABEL_KEY_MAX];
		const char *key = req->labels[i]->key;
		if (by_user) {
			snprintf(own, sizeof own, LABELS_OWN_PREFIX "%s", key);
			key = own;
		}
		if (labels_put(&p->labels, key, req->labels[i]->value) != 0) {
			target_params_free(p);
			rpc_out_of_memory(resp, a);
			return -1;
		}
	}
	return 0;
}

void rpc_attach(struct server *s, struct client *c, const Pyprofd__Request *req,
                Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__AttachRequest *r = req->attach;
	struct target *t;
	struct target_params params;
	uid_t real_uid;
	if (rpc_process(s, c, r->pid, &t, &real_uid, resp, a) != 0 ||
	    rpc_attach_params(s, r, c->uid != 0, &params, resp, a) != 0)
		return;
	if (t && t->state == TARGET_EXITED) {
		targets_remove(&s->targets, t);
		target_free(t);
		t = NULL;
	}
	bool warm = t && t->state == TARGET_DETACHED;
	if (!t) {
		targets_trim(&s->targets, s->config.warm_budget_bytes, s->config.max_targets);
		/* Root's own hand is bounded by max_targets alone: which processes to profile is its call. */
		char why[256];
		if (targets_room(&s->targets, &s->config, c->uid == 0 ? 0 : real_uid, why, sizeof why) != 0) {
			target_params_free(&params);
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_LIMIT, "%s", why);
			return;
		}
		struct uw_error err = {0};
		t = target_open(s->loop, &s->schedule, &s->history, s->kreader, s->native, &s->proc_fds, r->pid,
		                &err);
		if (!t) {
			uw_error_add_remedy(&err, r->pid);
			target_params_free(&params);
			rpc_error(resp, a, vocab_status_code(err.status), "%s", err.msg);
			return;
		}
		if (targets_add(&s->targets, t) != 0) {
			target_free(t);
			target_params_free(&params);
			rpc_out_of_memory(resp, a);
			return;
		}
	}
	/* By hand from now on: the rules leave it alone. */
	bool was_rule = t->rule != NULL;
	free(t->rule);
	t->rule = NULL;
	t->children = false;
	t->parent = 0;
	if (fleet_hand_labels(t->pid, t->python_version, was_rule || t->sessions ? &t->params : NULL,
	                      &params) != 0) {
		target_params_free(&params);
		rpc_out_of_memory(resp, a);
		return;
	}
	params.max_sample_ns = s->config.max_sample_ns;
	params.no_write = params.no_write || s->config.no_write;
	params.provers_off = s->config.provers_off;
	target_start(t, &params);
	/* One more target sampling: the others' shares of the caches shrink before it grows its own. */
	targets_share_cache(&s->targets, s->config.cache_budget_bytes);
	/* A user over its share samples its new target at the lowered rate too. */
	budget_apply(&s->budget, t);
	log_info("pid %d: attached (Python %s, %u Hz, %s%s) for uid %d", (int)t->pid,
	         t->python_version, t->params.rate_hz, vocab_mode_name(t->params.mode),
	         warm ? ", warm" : "", (int)c->uid);

	Pyprofd__AttachResult *res = ARENA_MESSAGE(a, Pyprofd__AttachResult, PYPROFD__ATTACH_RESULT__INIT);
	if (!res) {
		rpc_out_of_memory(resp, a);
		return;
	}
	res->target = target_to_proto(t, a);
	res->warm = warm;
	if (!res->target) {
		rpc_out_of_memory(resp, a);
		return;
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_ATTACH;
	resp->attach = res;
}

void rpc_detach(struct server *s, struct client *c, const Pyprofd__Request *req,
                Pyprofd__Response *resp, struct arena *a)
{
	struct target *t = rpc_known_target(s, c, req->detach->pid, resp, a);
	if (!t)
		return;
	if (t->state != TARGET_SAMPLING) {
		rpc_error(resp, a, t->state == TARGET_EXITED ? PYPROFD__ERROR_CODE__ERROR_EXITED
		                                              : PYPROFD__ERROR_CODE__ERROR_NOT_ATTACHED,
		          "process %d is not being sampled (%s)", (int)t->pid, target_state_name(t->state));
		return;
	}
	target_stop(t);
	/* Detached by a person: no rule attaches it again while it lives. */
	fleet_hold(&s->fleet, t->pid, t->start_time);
	log_info("pid %d: detached after %llu samples; state kept warm%s", (int)t->pid,
	         (unsigned long long)t->session_samples, t->rule ? " (held from the rules until it exits)" : "");
	Pyprofd__DetachResult *res = ARENA_MESSAGE(a, Pyprofd__DetachResult, PYPROFD__DETACH_RESULT__INIT);
	if (!res) {
		rpc_out_of_memory(resp, a);
		return;
	}
	res->target = target_to_proto(t, a);
	if (!res->target) {
		rpc_out_of_memory(resp, a);
		return;
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_DETACH;
	resp->detach = res;
	targets_trim(&s->targets, s->config.warm_budget_bytes, s->config.max_targets);
}

void rpc_list(struct server *s, struct client *c, const Pyprofd__Request *req,
              Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__ListRequest *r = req->list;
	int state = -1; /* any */
	if (*r->state) {
		for (int st = TARGET_SAMPLING; st <= TARGET_EXITED && state < 0; st++)
			if (strcmp(r->state, target_state_name((enum target_state)st)) == 0)
				state = st;
		if (state < 0) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
			          "state must be one of sampling, detached, exited, not '%.64s'", r->state);
			return;
		}
	}
	if (r->n_labels > RPC_SELECT_LABELS_MAX) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "at most %d labels select targets",
		          RPC_SELECT_LABELS_MAX);
		return;
	}
	Pyprofd__ListResult *res = ARENA_MESSAGE(a, Pyprofd__ListResult, PYPROFD__LIST_RESULT__INIT);
	Pyprofd__Target **v = arena_alloc(a, (s->targets.n ? s->targets.n : 1) * sizeof *v);
	if (!res || !v) {
		rpc_out_of_memory(resp, a);
		return;
	}
	res->targets = v;
	for (size_t i = 0; i < s->targets.n; i++) {
		const struct target *t = s->targets.v[i];
		if (!rpc_may_see(c, t->uid, t->gid) || (state >= 0 && t->state != (enum target_state)state) ||
		    !rpc_target_has_labels(t, r->labels, r->n_labels))
			continue;
		if (!(v[res->n_targets++] = target_to_proto(t, a))) {
			rpc_out_of_memory(resp, a);
			return;
		}
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_LIST;
	resp->list = res;
}

void rpc_dump(struct server *s, struct client *c, const Pyprofd__Request *req,
              Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__DumpRequest *r = req->dump;
	struct target *t;
	if (rpc_process(s, c, r->pid, &t, NULL, resp, a) != 0)
		return;
	struct uw_error err = {0};
	/* A known process answers from its warm state; any other is opened for this dump alone. */
	struct uw_target *uw = t && t->uw ? t->uw : uw_open(r->pid, &err);
	if (!uw) {
		uw_error_add_remedy(&err, r->pid);
		rpc_error(resp, a, vocab_status_code(err.status), "%s", err.msg);
		return;
	}
	unsigned flags = (r->native ? UW_SNAP_NATIVE : 0u) | (r->gc ? UW_SNAP_GC : 0u) |
	                 (r->tasks ? UW_SNAP_TASKS : 0u);
	struct uw_options saved;
	uw_options_get(uw, &saved);
	if (r->tasks) {
		struct uw_options opts = saved;
		opts.max_sample_ns = DUMP_TASKS_NS;
		uw_configure(uw, &opts);
	}
	struct uw_snapshot snap = {0};
	int rc = uw_snapshot(uw, flags, &snap, &err);
	if (r->tasks)
		uw_configure(uw, &saved);
	if (rc != 0) {
		rpc_error(resp, a, vocab_status_code(err.status), "%s", err.msg);
	} else {
		Pyprofd__DumpResult *res = dump_to_proto(r->pid, uw, &snap, a);
		if (res) {
			resp->result_case = PYPROFD__RESPONSE__RESULT_DUMP;
			resp->dump = res;
		} else {
			rpc_out_of_memory(resp, a);
		}
	}
	uw_snapshot_release(&snap);
	if (!t || uw != t->uw)
		uw_close(uw);
}

void rpc_stats(struct server *s, struct client *c, const Pyprofd__Request *req,
               Pyprofd__Response *resp, struct arena *a)
{
	struct target *t = rpc_known_target(s, c, req->stats->pid, resp, a);
	if (!t)
		return;
	struct uw_stats st = t->final_stats;
	if (t->uw)
		uw_stats(t->uw, &st);
	Pyprofd__StatsResult *res = ARENA_MESSAGE(a, Pyprofd__StatsResult, PYPROFD__STATS_RESULT__INIT);
	size_t n = COUNTERS_COUNT + 4;
	Pyprofd__Counter **v = arena_alloc(a, n * sizeof *v);
	if (!res || !v) {
		rpc_out_of_memory(resp, a);
		return;
	}
	res->counters = v;
	if (!(res->target = target_to_proto(t, a))) {
		rpc_out_of_memory(resp, a);
		return;
	}
	const struct {
		const char *name;
		uint64_t value;
	} totals[] = {{"total_samples", st.samples},
	              {"readv_calls", st.readv_calls},
	              {"bytes_read", st.bytes_read},
	              {"history_samples", t->history_samples}};
	for (size_t i = 0; i < n; i++) {
		Pyprofd__Counter *ctr = ARENA_MESSAGE(a, Pyprofd__Counter, PYPROFD__COUNTER__INIT);
		if (!ctr) {
			rpc_out_of_memory(resp, a);
			return;
		}
		size_t ntotals = sizeof totals / sizeof totals[0];
		if (i < ntotals) {
			ctr->name = (char *)totals[i].name;
			ctr->value = totals[i].value;
		} else {
			ctr->name = (char *)counters_table[i - ntotals].name;
			ctr->value = counters_value(&st, i - ntotals);
		}
		v[res->n_counters++] = ctr;
	}
	ev_tstamp end = t->state == TARGET_SAMPLING ? ev_now(s->loop) : t->session_end;
	ev_tstamp elapsed = end - t->session_start;
	res->achieved_rate_hz = t->sessions && elapsed > 0 ? (double)t->session_samples / elapsed : 0;
	struct target_percentiles pc;
	target_percentiles(t, &pc);
	res->jitter_us_p50 = pc.jitter_us_p50;
	res->jitter_us_p99 = pc.jitter_us_p99;
	res->sample_us_p50 = pc.sample_us_p50;
	res->sample_us_p99 = pc.sample_us_p99;
	res->cache_bytes = st.cache_bytes;
	res->missed_ticks = t->tick.missed;
	resp->result_case = PYPROFD__RESPONSE__RESULT_STATS;
	resp->stats = res;
}
