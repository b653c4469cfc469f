/*
 * The requests the daemon answers, one handler each, found in a table by
 * the request's type.  The protocol version is checked before dispatch.
 *
 * Authorization, by the peer's uid and gid from SO_PEERCRED: root may act
 * on any process; any other user only on processes the kernel would let it
 * trace (target_owner: all its uids and gids the user's, dumpable, no
 * capabilities), and it sees only those in `list`, `status` and the
 * history.
 * A process the daemon knows is judged by its target's uid, which is
 * lowered to root's for good when the process gains privileges.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pyprofd.h"

#define LABELS_MAX 64
#define LABEL_KEY_MAX 128
#define LABEL_VALUE_MAX 1024
#define TOP_ROWS_MAX 1000

void rpc_error(Pyprofd__Response *resp, struct arena *a, Pyprofd__ErrorCode code, const char *fmt,
               ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	Pyprofd__Error *e = arena_alloc(a, sizeof *e);
	char *message = arena_strdup(a, msg);
	if (!e) {
		/* Even the error could not be built: an empty error still says "failed". */
		static Pyprofd__Error oom = PYPROFD__ERROR__INIT;
		resp->result_case = PYPROFD__RESPONSE__RESULT_ERROR;
		resp->error = &oom;
		return;
	}
	wire_error(resp, e, resp->id, code, message ? message : "out of memory");
}

static void rpc_out_of_memory(Pyprofd__Response *resp, struct arena *a)
{
	rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_INTERNAL, "the daemon is out of memory");
}

static bool rpc_may_see(const struct client *c, uid_t owner_uid, gid_t owner_gid)
{
	return c->uid == 0 || (owner_uid != 0 && c->uid == owner_uid && c->gid == owner_gid);
}

/*
 * The live process pid, if the client may act on it, and the target the
 * daemon has of it in *t (NULL if none; a target of a process that had
 * the pid before is forgotten here).  Otherwise an error in resp and -1.
 */
static int rpc_process(struct server *s, const struct client *c, pid_t pid, struct target **t,
                       Pyprofd__Response *resp, struct arena *a)
{
	struct uw_error err = {0};
	struct uw_process_identity id;
	if (pid <= 0) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "%d is not a process id", (int)pid);
		return -1;
	}
	if (uw_process_identity(pid, &id, &err) != 0) {
		if (err.status == UW_ENOPROC)
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_NO_PROCESS, "no such process: %d", (int)pid);
		else /* not "no such process": it may well run, the daemon could not look */
			rpc_error(resp, a, vocab_status_code(err.status), "cannot look at process %d now: %s",
			          (int)pid, err.msg);
		return -1;
	}
	uid_t owner_uid;
	gid_t owner_gid;
	target_owner(&id, &owner_uid, &owner_gid);
	if (!rpc_may_see(c, owner_uid, owner_gid)) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_PERMISSION,
		          owner_uid == 0 && id.uid[0] == c->uid
		                  ? "permission denied: process %d runs with privileges (setuid, setgid, "
		                    "capabilities or not dumpable), root's alone"
		                  : "permission denied: process %d belongs to another user",
		          (int)pid);
		return -1;
	}
	*t = targets_find(&s->targets, pid);
	if (*t && (*t)->start_time != id.start_time) {
		log_info("pid %d was reused by another process: forgetting the old one", (int)pid);
		targets_remove(&s->targets, *t);
		target_free(*t);
		*t = NULL;
	}
	/*
	 * A process the daemon knows keeps the owner it has, which is never
	 * raised: one that ran with privileges while known stays root's even
	 * if it dropped them since.
	 */
	if (*t) {
		target_lower_owner(*t, &id);
		if (!rpc_may_see(c, (*t)->uid, (*t)->gid)) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_PERMISSION,
			          "permission denied: process %d ran with privileges while profiled, "
			          "root's alone",
			          (int)pid);
			*t = NULL;
			return -1;
		}
	}
	return 0;
}

/* The attach request as target parameters, checked; -1 with the error in resp. */
static int rpc_attach_params(struct server *s, const Pyprofd__AttachRequest *req,
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
	p->duration_s = req->duration_s;
	p->flags = (req->native ? UW_SNAP_NATIVE : 0u) | (req->gc ? UW_SNAP_GC : 0u);
	p->no_write = req->no_write;
	if (req->n_labels > LABELS_MAX) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "more than %d labels",
		          LABELS_MAX);
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
	}
	if (req->n_labels) {
		p->label_keys = calloc(req->n_labels, sizeof *p->label_keys);
		p->label_values = calloc(req->n_labels, sizeof *p->label_values);
		if (!p->label_keys || !p->label_values) {
			target_params_free(p);
			rpc_out_of_memory(resp, a);
			return -1;
		}
		for (size_t i = 0; i < req->n_labels; i++) {
			p->label_keys[i] = strdup(req->labels[i]->key);
			p->label_values[i] = strdup(req->labels[i]->value);
			p->nlabels++;
			if (!p->label_keys[i] || !p->label_values[i]) {
				target_params_free(p);
				rpc_out_of_memory(resp, a);
				return -1;
			}
		}
	}
	return 0;
}

static size_t rpc_live_targets(const struct targets *ts)
{
	size_t n = 0;
	for (size_t i = 0; i < ts->n; i++)
		n += ts->v[i]->state != TARGET_EXITED;
	return n;
}

static void rpc_attach(struct server *s, struct client *c, const Pyprofd__Request *req,
                       Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__AttachRequest *r = req->attach;
	struct target *t;
	struct target_params params;
	if (rpc_process(s, c, r->pid, &t, resp, a) != 0 ||
	    rpc_attach_params(s, r, &params, resp, a) != 0)
		return;
	if (t && t->state == TARGET_EXITED) {
		targets_remove(&s->targets, t);
		target_free(t);
		t = NULL;
	}
	bool warm = t && t->state == TARGET_DETACHED;
	if (!t) {
		targets_trim(&s->targets, s->config.warm_budget_bytes, s->config.max_targets);
		if (rpc_live_targets(&s->targets) >= s->config.max_targets) {
			target_params_free(&params);
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_LIMIT,
			          "the daemon already profiles its maximum of %u processes",
			          s->config.max_targets);
			return;
		}
		struct uw_error err = {0};
		t = target_open(s->loop, &s->schedule, &s->history, s->kreader, &s->proc_fds, r->pid,
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

/* A known target the client may see, or an error in resp. */
static struct target *rpc_known_target(struct server *s, const struct client *c, pid_t pid,
                                   Pyprofd__Response *resp, struct arena *a)
{
	struct target *t = pid > 0 ? targets_find(&s->targets, pid) : NULL;
	if (!t) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_NOT_ATTACHED,
		          "pyprofd is not profiling process %d", (int)pid);
		return NULL;
	}
	/* First: the process may have gained privileges since housekeeping last looked. */
	struct uw_error err;
	if (target_check_alive(t, &err) == TARGET_UNSEEN && c->uid != 0) {
		rpc_error(resp, a, vocab_status_code(err.status),
		          "cannot look at process %d now, to check who may act on it: %s", (int)pid, err.msg);
		return NULL;
	}
	if (!rpc_may_see(c, t->uid, t->gid)) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_PERMISSION,
		          "permission denied: process %d belongs to another user", (int)pid);
		return NULL;
	}
	return t;
}

static void rpc_detach(struct server *s, struct client *c, const Pyprofd__Request *req,
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

static void rpc_list(struct server *s, struct client *c, const Pyprofd__Request *req,
                     Pyprofd__Response *resp, struct arena *a)
{
	(void)req;
	Pyprofd__ListResult *res = ARENA_MESSAGE(a, Pyprofd__ListResult, PYPROFD__LIST_RESULT__INIT);
	Pyprofd__Target **v = arena_alloc(a, (s->targets.n ? s->targets.n : 1) * sizeof *v);
	if (!res || !v) {
		rpc_out_of_memory(resp, a);
		return;
	}
	res->targets = v;
	for (size_t i = 0; i < s->targets.n; i++) {
		const struct target *t = s->targets.v[i];
		if (!rpc_may_see(c, t->uid, t->gid))
			continue;
		if (!(v[res->n_targets++] = target_to_proto(t, a))) {
			rpc_out_of_memory(resp, a);
			return;
		}
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_LIST;
	resp->list = res;
}

static void rpc_dump(struct server *s, struct client *c, const Pyprofd__Request *req,
                     Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__DumpRequest *r = req->dump;
	struct target *t;
	if (rpc_process(s, c, r->pid, &t, resp, a) != 0)
		return;
	struct uw_error err = {0};
	/* A known process answers from its warm state; any other is opened for this dump alone. */
	struct uw_target *uw = t && t->uw ? t->uw : uw_open(r->pid, &err);
	if (!uw) {
		uw_error_add_remedy(&err, r->pid);
		rpc_error(resp, a, vocab_status_code(err.status), "%s", err.msg);
		return;
	}
	unsigned flags = (r->native ? UW_SNAP_NATIVE : 0u) | (r->gc ? UW_SNAP_GC : 0u);
	struct uw_snapshot snap = {0};
	if (uw_snapshot(uw, flags, &snap, &err) != 0) {
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

static void rpc_stats(struct server *s, struct client *c, const Pyprofd__Request *req,
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
	own->rules = all->rules; /* `rules list` shows them to everyone */
	own->cpu_budget_percent = all->cpu_budget_percent;
	/* budget_status listed this user's share alone. */
	own->uid_cpu_budget_percent = all->uid_cpu_budget_percent;
	own->n_user_budgets = all->n_user_budgets;
	own->user_budgets = all->user_budgets;
}

static void rpc_status(struct server *s, struct client *c, const Pyprofd__Request *req,
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
	struct uw_kreader_state k = uw_kreader_state(
		s->kreader, s->config.no_kernel_reader ? "off ([sampling] kernel_reader = false)" : s->kreader_err.msg);
	res->kernel_reader = (char *)k.reader;
	res->kernel_look = (char *)k.look;
	res->kernel_copy = (char *)k.copy;
	res->state_dir = s->config.state_dir;
	res->socket = s->socket_activated ? (char *)"(from systemd)" : s->config.socket_path;
	history_status(&s->history, res, a);
	fleet_status(&s->fleet, res);
	budget_status(&s->budget, c->uid, res, a);
	exporter_status(&s->exporter, res, a);
	if (own != res)
		rpc_status_own(s, c, res, own);
	resp->result_case = PYPROFD__RESPONSE__RESULT_STATUS;
	resp->status = own;
}

/* One thread's part of top's window. */
struct rpc_top_thread {
	uint64_t thread_id;
	uint64_t samples, gil, gc, idle;
	struct functions fs; /* its own functions, for its hottest */
};

/* A target's recent stacks, counted per function, and per thread. */
struct rpc_top {
	const struct uw_target *uw;
	const Pyprofd__TopRequest *r;
	struct functions fs;
	uint64_t gil, gc, idle;
	struct rpc_top_thread *threads;
	size_t nthreads, threads_cap;
	struct arena *arena;
	bool failed;
};

/* The thread's entry in acc, made on first sight; NULL if out of memory. */
static struct rpc_top_thread *rpc_top_thread(struct rpc_top *acc, uint64_t thread_id)
{
	for (size_t i = 0; i < acc->nthreads; i++)
		if (acc->threads[i].thread_id == thread_id)
			return &acc->threads[i];
	if (array_reserve((void **)&acc->threads, &acc->threads_cap, acc->nthreads,
	                  sizeof *acc->threads, NULL) != 0)
		return NULL;
	struct rpc_top_thread *th = &acc->threads[acc->nthreads++];
	*th = (struct rpc_top_thread){.thread_id = thread_id};
	functions_init(&th->fs, acc->arena);
	return th;
}

/* Count one stack into fs; -1 if out of memory. */
static int rpc_top_stack(const struct uw_target *uw, struct functions *fs, uint32_t stack,
                         uint64_t count)
{
	functions_next_stack(fs, 0, count);
	bool innermost = true;
	for (uint32_t depth = 0; stack && depth < UW_MAX_FRAMES; depth++, stack = uw_stack_parent(uw, stack)) {
		uint32_t frame = uw_stack_frame(uw, stack);
		const struct uw_frame *f = uw_frame_get(uw, frame);
		if (!f || !uw_frame_name(f))
			continue;
		if (functions_count(fs, 0, frame, uw_frame_name(f), f->file, f->first_line, innermost,
		                    count) < 0)
			return -1;
		innermost = false;
	}
	return 0;
}

static void rpc_top_count(void *ctx, const struct tally_entry *e)
{
	struct rpc_top *acc = ctx;
	if (acc->failed || (acc->r->by_thread && e->thread_id != acc->r->thread_id))
		return;
	uint64_t count = acc->r->no_idle ? e->count - e->idle : e->count;
	if (!count)
		return;
	struct rpc_top_thread *th = rpc_top_thread(acc, e->thread_id);
	if (!th || rpc_top_stack(acc->uw, &acc->fs, e->stack, count) < 0 ||
	    rpc_top_stack(acc->uw, &th->fs, e->stack, count) < 0) {
		acc->failed = true;
		return;
	}
	uint64_t idle = acc->r->no_idle ? 0 : e->idle;
	th->samples += count;
	th->gil += e->gil;
	th->gc += e->gc;
	th->idle += idle;
	acc->gil += e->gil;
	acc->gc += e->gc;
	acc->idle += idle;
}

static int rpc_top_thread_cmp(const void *x, const void *y)
{
	const struct rpc_top_thread *a = x, *b = y;
	if (a->samples != b->samples)
		return a->samples > b->samples ? -1 : 1;
	return (a->thread_id > b->thread_id) - (a->thread_id < b->thread_id);
}

/* The per-thread view: every thread of the window by samples, with its name and hottest function. */
static int rpc_top_threads(const struct target *t, struct rpc_top *acc, Pyprofd__TopResult *res,
                           struct arena *a)
{
	if (acc->nthreads > 1)
		qsort(acc->threads, acc->nthreads, sizeof *acc->threads, rpc_top_thread_cmp);
	res->threads = arena_alloc(a, (acc->nthreads ? acc->nthreads : 1) * sizeof *res->threads);
	if (!res->threads)
		return -1;
	for (size_t i = 0; i < acc->nthreads; i++) {
		struct rpc_top_thread *th = &acc->threads[i];
		Pyprofd__TopThread *p = ARENA_MESSAGE(a, Pyprofd__TopThread, PYPROFD__TOP_THREAD__INIT);
		if (!p)
			return -1;
		const struct target_thread *known = thread_table_find(&t->threads, th->thread_id);
		struct target_thread unnamed = {.thread_id = th->thread_id, .native_id = -1};
		if (!(p->thread = target_thread_to_proto(known ? known : &unnamed, a)))
			return -1;
		p->samples = th->samples;
		p->gil = th->gil;
		p->gc = th->gc;
		p->idle = th->idle;
		functions_sort(&th->fs, FUNCTIONS_BY_OWN);
		p->hottest = th->fs.nrows ? th->fs.rows[0] : NULL;
		res->threads[res->n_threads++] = p;
	}
	return 0;
}

static void rpc_top_free(struct rpc_top *acc)
{
	functions_free(&acc->fs);
	for (size_t i = 0; i < acc->nthreads; i++)
		functions_free(&acc->threads[i].fs);
	free(acc->threads);
}

static void rpc_top(struct server *s, struct client *c, const Pyprofd__Request *req,
                    Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__TopRequest *r = req->top;
	static const enum functions_order orders[] = {
		[PYPROFD__TOP_SORT__TOP_SORT_OWN] = FUNCTIONS_BY_OWN,
		[PYPROFD__TOP_SORT__TOP_SORT_TOTAL] = FUNCTIONS_BY_TOTAL,
		[PYPROFD__TOP_SORT__TOP_SORT_NAME] = FUNCTIONS_BY_NAME,
	};
	if ((unsigned)r->sort >= sizeof orders / sizeof orders[0]) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "unknown sort order %d",
		          (int)r->sort);
		return;
	}
	struct target *t = rpc_known_target(s, c, r->pid, resp, a);
	if (!t)
		return;
	if (!t->uw) {
		rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_EXITED, "process %d exited", (int)t->pid);
		return;
	}
	unsigned window = r->window_s ? r->window_s : s->config.top_window_s;
	if (window > TOP_SECONDS_KEPT - 2)
		window = TOP_SECONDS_KEPT - 2;
	struct rpc_top acc = {.uw = t->uw, .r = r, .arena = a};
	functions_init(&acc.fs, a);
	/*
	 * The tally counts whole seconds: the window starts at the one it
	 * began in, or at the session's first when it began later (a warm
	 * re-attach keeps the last session's counts), and says the time those
	 * seconds span up to now, not the window asked.
	 */
	double at = ev_now(s->loop);
	int64_t since = (int64_t)floor(at - (double)window);
	if (t->session_start > (double)since)
		since = (int64_t)floor(t->session_start);
	double span = at - (double)since;
	tally_visit(&t->tally, since, rpc_top_count, &acc);
	Pyprofd__TopResult *res = ARENA_MESSAGE(a, Pyprofd__TopResult, PYPROFD__TOP_RESULT__INIT);
	if (acc.failed || !res || rpc_top_threads(t, &acc, res, a) != 0) {
		rpc_top_free(&acc);
		rpc_out_of_memory(resp, a);
		return;
	}
	functions_sort(&acc.fs, orders[r->sort]);
	size_t limit = r->limit ? r->limit : TOP_ROWS_MAX;
	res->n_rows = acc.fs.nrows < limit ? acc.fs.nrows : limit;
	res->rows = arena_alloc(a, (res->n_rows ? res->n_rows : 1) * sizeof *res->rows);
	if (res->rows && res->n_rows)
		memcpy(res->rows, acc.fs.rows, res->n_rows * sizeof *res->rows);
	res->samples = acc.fs.samples[0];
	res->gil_samples = acc.gil;
	res->gc_samples = acc.gc;
	res->idle_samples = acc.idle;
	rpc_top_free(&acc);
	res->target = target_to_proto(t, a);
	res->window_s = span > 0 ? span : 0;
	if (!res->rows || !res->target) {
		rpc_out_of_memory(resp, a);
		return;
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_TOP;
	resp->top = res;
}

typedef void (*rpc_handler)(struct server *, struct client *, const Pyprofd__Request *,
                            Pyprofd__Response *, struct arena *);

/* A history query: checked and started here, answered from its thread later. */
static void rpc_query(struct server *s, struct client *c, const Pyprofd__Request *req,
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
	                         .writer = s->history.writer};
	char why[256];
	Pyprofd__ErrorCode code = queries_start(&s->jobs, &o, req->query, why, sizeof why);
	if (code != PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED)
		rpc_error(resp, a, code, "%s", why);
	else
		resp->result_case = PYPROFD__RESPONSE__RESULT__NOT_SET; /* answered later */
}

/* A backfill to a collector: root's and the daemon's user's; answered from its thread later. */
static void rpc_otlp_export(struct server *s, struct client *c, const Pyprofd__Request *req,
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
	Pyprofd__ErrorCode code = exporter_backfill(&s->exporter, &s->jobs, c->serial, c->uid, req, why,
	                                           sizeof why);
	if (code != PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED)
		rpc_error(resp, a, code, "%s", why);
	else
		resp->result_case = PYPROFD__RESPONSE__RESULT__NOT_SET; /* answered later */
}

/* Every rule, in the order they are tried. */
static Pyprofd__RulesResult *rpc_rules_list(const struct rules *rs, struct arena *a)
{
	Pyprofd__RulesResult *res = ARENA_MESSAGE(a, Pyprofd__RulesResult, PYPROFD__RULES_RESULT__INIT);
	if (!res || !(res->rules = arena_alloc(a, (rs->n ? rs->n : 1) * sizeof *res->rules)))
		return NULL;
	for (size_t i = 0; i < rs->n; i++) {
		const struct rule *r = &rs->v[i];
		Pyprofd__Rule *p = ARENA_MESSAGE(a, Pyprofd__Rule, PYPROFD__RULE__INIT);
		if (!p || !(p->settings = arena_alloc(a, (r->nsettings ? r->nsettings : 1) * sizeof *p->settings)))
			return NULL;
		p->name = r->name;
		p->source = r->source;
		p->line = r->line;
		for (size_t k = 0; k < r->nsettings; k++) {
			Pyprofd__RuleSetting *kv = ARENA_MESSAGE(a, Pyprofd__RuleSetting, PYPROFD__RULE_SETTING__INIT);
			if (!kv)
				return NULL;
			kv->key = r->keys[k];
			kv->value = r->values[k];
			p->settings[p->n_settings++] = kv;
		}
		res->rules[res->n_rules++] = p;
	}
	return res;
}

/*
 * List the rules, or add or remove one of those added by RPC (root alone:
 * a rule attaches every user's processes).  A change is written to the
 * daemon's rules file before it takes effect, so it outlives a restart
 * and a full disk changes nothing.
 */
static void rpc_rules(struct server *s, struct client *c, const Pyprofd__Request *req,
                      Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__RulesRequest *r = req->rules;
	struct rules *rs = &s->config.rules;
	if (r->action != PYPROFD__RULES_ACTION__RULES_LIST) {
		if (c->uid != 0) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_PERMISSION,
			          "permission denied: only root may change the attach rules");
			return;
		}
		if (!rule_name_ok(r->name)) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
			          "a rule's name is 1 to 64 letters, digits, '_', '.' or '-'");
			return;
		}
		size_t at = rs->n;
		for (size_t i = 0; i < rs->n; i++)
			if (strcmp(rs->v[i].name, r->name) == 0)
				at = i;
		if (at < rs->n && strcmp(rs->v[at].source, "rpc") != 0) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
			          "rule '%s' is in %s: change it there (and send SIGHUP)", r->name,
			          rs->v[at].source);
			return;
		}
		char why[512];
		if (r->action == PYPROFD__RULES_ACTION__RULES_REMOVE) {
			if (at == rs->n) {
				rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "there is no rule '%s'",
				          r->name);
				return;
			}
			if (rules_save_without(rs, at, s->config.rules_path, why, sizeof why) != 0) {
				rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_INTERNAL, "%s", why);
				return;
			}
			rules_remove_at(rs, at);
			log_info("rule %s removed by uid %d", r->name, (int)c->uid);
		} else if (r->action == PYPROFD__RULES_ACTION__RULES_ADD) {
			bool replacing = at < rs->n;
			struct rule rule;
			rule_init(&rule);
			bool ok = (rule.name = strdup(r->name)) && (rule.source = strdup("rpc"));
			snprintf(why, sizeof why, "out of memory");
			for (size_t i = 0; ok && i < r->n_settings; i++)
				ok = rule_set(&rule, r->settings[i]->key, r->settings[i]->value, s->config.max_rate_hz,
				              why, sizeof why) == 0;
			ok = ok && rule_finish(&rule, why, sizeof why) == 0;
			/* In the file first: a rule that cannot be kept is not taken. */
			ok = ok && rules_save_with(rs, at, &rule, s->config.rules_path, why, sizeof why) == 0;
			if (ok && at < rs->n) {
				rule_free(&rs->v[at]);
				rs->v[at] = rule;
				memset(&rule, 0, sizeof rule);
			} else if (ok) {
				ok = rules_append(rs, &rule) == 0;
				snprintf(why, sizeof why, "out of memory");
			}
			rule_free(&rule);
			if (!ok) {
				rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "%s", why);
				return;
			}
			log_info("rule %s %s by uid %d", r->name, replacing ? "replaced" : "added", (int)c->uid);
		} else {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "unknown rules action %d",
			          (int)r->action);
			return;
		}
		fleet_rules_changed(&s->fleet);
	}
	Pyprofd__RulesResult *res = rpc_rules_list(rs, a);
	if (!res) {
		rpc_out_of_memory(resp, a);
		return;
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_RULES;
	resp->rules = res;
}

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
			/* Every handler answers now or with an error, save a query that went to its thread. */
			return resp->result_case != PYPROFD__RESPONSE__RESULT__NOT_SET;
		}
	rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "the request has no known body");
	return true;
}
