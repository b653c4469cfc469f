/*
 * The fleet: processes the daemon finds, judges and attaches by itself.
 *
 * Process events (procwatch) put pids on a short list of processes to
 * judge; a timer judges them a moment later, so a fork followed by an exec
 * is judged once, as the program it became, and a process that is gone by
 * then costs nothing.  Judging reads the process's facts, tries the rules
 * (and its parent, for children), and opens the runtime; a process whose
 * runtime is not up yet (it has just exec'd) is tried again on a growing
 * delay, and one that finds no room under max_targets waits for room.
 * A child waits for its parent's verdict: the walk at start finds a pool
 * all at once, and it is attached as it was followed live.
 *
 * Hand attaches win: rules never touch a target without a rule, and a
 * process detached by hand is held (never attached by a rule again) until
 * it exits.  The daemon's CPU budget (budget.c) lowers the rates of
 * rule-attached targets alone.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fleet_labels.h"
#include "fleet_log.h"
#include "pyprofd.h"

/* Waiting processes, at most: past it a burst's later processes are dropped (counted). */
#define FLEET_WAITING_MAX 4096
/* Processes held from the rules (detached by hand), at most. */
#define FLEET_HELD_MAX 4096
/* A new process is judged this long after its event: long enough for a fork's exec. */
#define FLEET_SETTLE_S 0.02
/* A runtime not up yet is looked for again after a delay doubling from the first to the last. */
#define FLEET_RETRY_FIRST_S 0.02
#define FLEET_RETRY_LAST_S 0.5
/* How long a process a rule claims may take to show its runtime. */
#define FLEET_GIVE_UP_S 20.0
/*
 * How long it may take to map one: the loader maps libpython before main
 * runs, so a program without a runtime by then is not Python (a shell, a
 * container's init) and is not looked at every half second for 20 s.
 */
#define FLEET_GIVE_UP_NOT_PYTHON_S 1.0

enum fleet_why { FLEET_NEW, FLEET_EXEC };

struct fleet_waiting {
	pid_t pid;
	uint64_t start_time; /* 0 until first judged */
	double due;          /* loop time it is judged next */
	double since;        /* loop time it was first seen */
	double delay;        /* of the next retry */
	bool exec;           /* it ran a new program: a target it had is stale */
	bool claimed;        /* a rule or its parent claims it: it waits for its runtime or room */
	bool for_room;       /* claimed, waits for room under max_targets */
	bool follows;        /* claimed by a rule that follows children, or as a child */
	bool walked;         /* found by the walk that began watching: counted for its summary */
	bool on_parent;      /* waits for its parent's verdict */
};

struct fleet_held {
	pid_t pid;
	uint64_t start_time;
};

struct fleet_state {
	struct fleet_waiting *waiting;
	size_t nwaiting, waiting_cap;
	struct fleet_held *held;
	size_t nheld, held_cap;
	ev_timer judge;
	bool room_warned; /* max_targets reached: said once until there is room again */
	uint64_t dropped; /* processes not judged: the waiting list was full */
	struct fleet_log *log;
	bool walking;          /* the first walk of watching reports processes now */
	const char *walk_when; /* what the next such walk's summary says: "at start", ... */
};

static struct server *fleet_server(struct fleet *f)
{
	return f->server;
}

/* ---- the waiting list ---- */

static struct fleet_waiting *fleet_waiting_find(struct fleet_state *st, pid_t pid)
{
	for (size_t i = 0; i < st->nwaiting; i++)
		if (st->waiting[i].pid == pid)
			return &st->waiting[i];
	return NULL;
}

static void fleet_waiting_drop(struct fleet_state *st, struct fleet_waiting *w)
{
	*w = st->waiting[--st->nwaiting];
}

static void fleet_arm(struct fleet *f)
{
	struct fleet_state *st = f->state;
	struct ev_loop *loop = fleet_server(f)->loop;
	double next = INFINITY;
	for (size_t i = 0; i < st->nwaiting; i++)
		if (!st->waiting[i].for_room && st->waiting[i].due < next)
			next = st->waiting[i].due;
	ev_timer_stop(loop, &st->judge);
	if (isfinite(next)) {
		double in = next - ev_now(loop);
		ev_timer_set(&st->judge, in > 0.001 ? in : 0.001, 0);
		ev_timer_start(loop, &st->judge);
	}
}

/* Judge pid soon (again, if it waits already). */
static void fleet_enqueue(struct fleet *f, pid_t pid, bool exec)
{
	struct fleet_state *st = f->state;
	double now = ev_now(fleet_server(f)->loop);
	struct fleet_waiting *w = fleet_waiting_find(st, pid);
	if (!w) {
		if (st->nwaiting == FLEET_WAITING_MAX) {
			if (st->dropped++ % 1000 == 0)
				log_warn("discovery: %zu processes wait already; not judging pid %d (%llu so far)",
				         st->nwaiting, (int)pid, (unsigned long long)st->dropped);
			return;
		}
		if (array_reserve((void **)&st->waiting, &st->waiting_cap, st->nwaiting, sizeof *st->waiting,
		                  NULL) != 0) {
			st->dropped++;
			return;
		}
		w = &st->waiting[st->nwaiting++];
		*w = (struct fleet_waiting){.pid = pid, .since = now};
	} else {
		/* A new program starts the clock afresh. */
		w->since = now;
		w->start_time = 0;
		w->for_room = w->claimed = w->follows = w->on_parent = false;
	}
	w->walked = w->walked || st->walking;
	w->exec = w->exec || exec;
	w->due = now + FLEET_SETTLE_S;
	w->delay = FLEET_RETRY_FIRST_S;
	fleet_arm(f);
}

/* ---- holds ---- */

static bool fleet_is_held(const struct fleet_state *st, pid_t pid, uint64_t start_time)
{
	for (size_t i = 0; i < st->nheld; i++)
		if (st->held[i].pid == pid && st->held[i].start_time == start_time)
			return true;
	return false;
}

void fleet_hold(struct fleet *f, pid_t pid, uint64_t start_time)
{
	struct fleet_state *st = f->state;
	if (!st || fleet_is_held(st, pid, start_time))
		return;
	if (st->nheld == FLEET_HELD_MAX ||
	    array_reserve((void **)&st->held, &st->held_cap, st->nheld, sizeof *st->held, NULL) != 0) {
		log_warn("pid %d: cannot hold it from the rules (%zu held already): a rule may attach it again",
		         (int)pid, st->nheld);
		return;
	}
	st->held[st->nheld++] = (struct fleet_held){pid, start_time};
	struct fleet_waiting *w = fleet_waiting_find(st, pid);
	if (w)
		fleet_waiting_drop(st, w);
}

static void fleet_unhold(struct fleet_state *st, pid_t pid)
{
	for (size_t i = 0; i < st->nheld;)
		if (st->held[i].pid == pid)
			st->held[i] = st->held[--st->nheld];
		else
			i++;
}

/* ---- judging ---- */

/* The parent's target if it has its children followed. */
static struct target *fleet_parent_target(struct server *s, pid_t ppid)
{
	struct target *parent = ppid > 1 ? targets_find(&s->targets, ppid) : NULL;
	return parent && parent->children && parent->state == TARGET_SAMPLING ? parent : NULL;
}

/*
 * The process its rule attached, at the top of a line of followed children:
 * what a child's parent= names, so a pool's workers name the service even
 * when a process in between made them (a forkserver, a worker's own fork).
 */
static pid_t fleet_rule_ancestor(const struct target *parent)
{
	if (!parent->parent)
		return parent->pid;
	const char *label = labels_get(&parent->params.labels, "parent");
	long pid = label ? strtol(label, NULL, 10) : 0;
	return pid > 0 && pid < (1l << 30) ? (pid_t)pid : parent->parent;
}

/* Whether the target still shows the program it was opened on (an exec changes both). */
static bool fleet_same_program(const struct target *t, const struct proc_facts *facts)
{
	return strcmp(t->executable, facts->exe) == 0 && strcmp(t->command_line, facts->cmdline) == 0;
}

enum fleet_verdict { FLEET_DONE, FLEET_RETRY, FLEET_NO_ROOM };

/* Open, and attach under the rule (or as the parent's child); the verdict on w. */
static enum fleet_verdict fleet_attach(struct fleet *f, struct fleet_waiting *w,
                                       struct proc_facts *facts, const struct rule *claim,
                                       struct target *parent)
{
	struct server *s = fleet_server(f);
	struct fleet_state *st = f->state;
	targets_trim(&s->targets, s->config.warm_budget_bytes, s->config.max_targets);
	char full[256];
	if (targets_room(&s->targets, &s->config, facts->uid, full, sizeof full) != 0) {
		/* A user at its share is its own affair: only the daemon's whole maximum is warned of. */
		bool whole = targets_live(&s->targets) >= s->config.max_targets;
		if (!whole || !st->room_warned)
			log_msg(whole ? LOG_LEVEL_WARN : LOG_LEVEL_DEBUG, "discovery: %s; pid %d waits for room",
			        full, (int)facts->pid);
		st->room_warned |= whole;
		return FLEET_NO_ROOM;
	}
	struct uw_error err = {0};
	struct target *t = target_open(s->loop, &s->schedule, &s->history, s->kreader, s->native, &s->proc_fds,
	                               facts->pid, &err);
	if (!t) {
		double waited = ev_now(s->loop) - w->since;
		bool early = (err.status == UW_ENOTPYTHON && waited < FLEET_GIVE_UP_NOT_PYTHON_S) ||
		             ((err.status == UW_ECORRUPT || err.status == UW_EIO) && waited < FLEET_GIVE_UP_S);
		if (early)
			return FLEET_RETRY;
		/* A rule on a unit or a container meets its shells and init too: not worth a line each. */
		if (err.status != UW_ENOPROC && err.status != UW_EGONE) {
			char why[96];
			if (parent)
				snprintf(why, sizeof why, "a child of pid %d", (int)parent->pid);
			else
				snprintf(why, sizeof why, "rule %s", claim->name);
			log_msg(err.status == UW_ENOTPYTHON ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO,
			        "pid %d: not attached (%s): %s", (int)facts->pid, why, err.msg);
		}
		return FLEET_DONE;
	}
	const struct rule *rule = claim;
	if (!parent) {
		/* The version is known now: the rule that holds with it decides. */
		rule = rules_match(&s->config.rules, facts, t->python_version);
		if (!rule || rule->exclude) {
			target_free(t);
			return FLEET_DONE;
		}
		/*
		 * Its environment is read only now: most processes judged are never
		 * attached.  Gone, it is let go as any exit is; not read (out of
		 * descriptors or memory), it is judged again within the same
		 * patience rather than attached without the labels it asked for.
		 */
		if (proc_facts_read_environment(facts->pid, facts) != 0) {
			int why = errno;
			target_free(t);
			if (why == ENOENT)
				return FLEET_DONE;
			if (ev_now(s->loop) - w->since < FLEET_GIVE_UP_S)
				return FLEET_RETRY;
			log_warn("pid %d: not attached (rule %s): its labels could not be read: %s",
			         (int)facts->pid, rule->name, strerror(why));
			return FLEET_DONE;
		}
		fleet_labels_say_left_out(facts);
	}
	struct target_params params = {.rate_hz = s->config.default_rate_hz,
	                               .max_sample_ns = s->config.max_sample_ns,
	                               .no_write = s->config.no_write,
	                               .provers_off = s->config.provers_off};
	int labelled;
	pid_t ancestor = parent ? fleet_rule_ancestor(parent) : 0;
	if (parent) {
		params.rate_hz = parent->params.rate_hz;
		params.mode = parent->params.mode;
		params.async_mode = parent->params.async_mode;
		params.flags = parent->params.flags;
		params.context = parent->params.context;
		labelled = fleet_labels_of_child(facts, t->python_version, &parent->params.labels, ancestor,
		                                 &params);
	} else {
		if (rule->rate_hz)
			params.rate_hz = rule->rate_hz;
		if (rule->has_mode)
			params.mode = rule->mode;
		params.async_mode = rule->async_mode;
		params.flags = rule->native ? UW_SNAP_NATIVE : 0u;
		params.context = rule->context;
		labelled = fleet_labels_of_rule(facts, t->python_version, rule, &params);
	}
	if (params.rate_hz > s->config.max_rate_hz)
		params.rate_hz = s->config.max_rate_hz;
	const char *rule_name = parent ? parent->rule : rule->name;
	if (labelled != 0 || !(t->rule = strdup(rule_name ? rule_name : "")) ||
	    targets_add(&s->targets, t) != 0) {
		log_warn("pid %d: out of memory attaching it", (int)facts->pid);
		target_params_free(&params);
		target_free(t);
		return FLEET_DONE;
	}
	t->children = parent ? true : rule->children;
	t->parent = parent ? parent->pid : 0;
	target_start(t, &params);
	targets_share_cache(&s->targets, s->config.cache_budget_bytes);
	budget_apply(&s->budget, t);
	f->attached++;
	if (w->walked)
		fleet_log_walk_found(st->log, t->rule, parent != NULL);
	char how[128];
	if (!parent)
		snprintf(how, sizeof how, "by rule %s", t->rule);
	else if (ancestor == parent->pid)
		snprintf(how, sizeof how, "as a child of pid %d (rule %s)", (int)parent->pid, t->rule);
	else
		snprintf(how, sizeof how, "as a child of pid %d, under pid %d (rule %s)", (int)parent->pid,
		         (int)ancestor, t->rule);
	fleet_log_attach(st->log, t->rule, parent != NULL, "pid %d: attached (Python %s, %u Hz, %s) %s",
	                 (int)t->pid, t->python_version, t->params.rate_hz, vocab_mode_name(t->params.mode),
	                 how);
	return FLEET_DONE;
}

/*
 * Whether ppid waits to be judged, or to be attached with its children
 * followed: until then its child cannot know whether it is one to follow.
 */
static bool fleet_parent_waiting(const struct fleet_state *st, pid_t ppid)
{
	for (size_t i = 0; ppid > 1 && i < st->nwaiting; i++)
		if (st->waiting[i].pid == ppid)
			return st->waiting[i].start_time == 0 || st->waiting[i].on_parent ||
			       (st->waiting[i].claimed && st->waiting[i].follows);
	return false;
}

/* One waiting process judged: what becomes of it. */
static enum fleet_verdict fleet_judge(struct fleet *f, struct fleet_waiting *w)
{
	struct server *s = fleet_server(f);
	struct fleet_state *st = f->state;
	struct proc_facts facts;
	if (proc_facts_read(w->pid, 0, &facts) != 0) {
		bool gone = errno == ENOENT || errno == ESRCH || (kill(w->pid, 0) != 0 && errno == ESRCH);
		proc_facts_free(&facts);
		/* Could not look (out of descriptors...): look again, within the same patience. */
		return !gone && ev_now(s->loop) - w->since < FLEET_GIVE_UP_S ? FLEET_RETRY : FLEET_DONE;
	}
	f->judged += w->start_time == 0;
	w->start_time = facts.start_time;
	enum fleet_verdict verdict = FLEET_DONE;
	struct target *known = targets_find(&s->targets, w->pid);
	if (known && known->start_time != facts.start_time) {
		target_check_alive(known, NULL); /* a reused pid: the old process is gone */
		known = NULL;
	}
	if (known && known->state != TARGET_EXITED) {
		bool stale = w->exec && known->uw && !fleet_same_program(known, &facts);
		if (!stale) {
			/* Already known as it is: a hand attach, or attached already. */
			if (w->walked && known->state == TARGET_SAMPLING)
				fleet_log_walk_found(st->log, known->rule, known->parent != 0);
			goto out;
		}
		target_mark_exited(known, "the process ran a new program");
	}
	if (known) {
		targets_remove(&s->targets, known);
		target_free(known);
	}
	if (fleet_is_held(st, w->pid, facts.start_time))
		goto out;
	const struct rule *claim = rules_match(&s->config.rules, &facts, NULL);
	if (claim && claim->exclude && !claim->has_python)
		goto out;
	struct target *parent = fleet_parent_target(s, facts.ppid);
	/*
	 * A child judged before its parent is attached (the parent waiting for
	 * its runtime or a retry's time on a loaded host, or both found at once
	 * by the walk at start) waits for its parent, within the same patience:
	 * a fork child would be attached by its parent's rule rather than as the
	 * child it is (seen in a clean-clone CI), and a spawned worker or a
	 * forkserver, which no rule matches, not at all (after a restart).
	 */
	w->on_parent = !parent && fleet_parent_waiting(st, facts.ppid) &&
	               ev_now(s->loop) - w->since < FLEET_GIVE_UP_S;
	if (w->on_parent) {
		verdict = FLEET_RETRY;
		goto out;
	}
	if (parent && !(claim && claim->exclude))
		verdict = fleet_attach(f, w, &facts, NULL, parent);
	else if (claim)
		verdict = fleet_attach(f, w, &facts, claim, NULL);
	w->claimed = verdict != FLEET_DONE;
	w->follows = w->claimed && (parent || claim->children);
out:
	proc_facts_free(&facts);
	return verdict;
}

/* Once none of the processes found by the walk that began watching waits but for room: its summary. */
static void fleet_walk_check(struct fleet_state *st)
{
	if (!fleet_log_walking(st->log))
		return;
	for (size_t i = 0; i < st->nwaiting; i++)
		if (st->waiting[i].walked && !st->waiting[i].for_room)
			return;
	fleet_log_walk_end(st->log);
}

static void fleet_on_judge(struct ev_loop *loop, ev_timer *timer, int revents)
{
	(void)revents;
	struct fleet *f = timer->data;
	struct fleet_state *st = f->state;
	double now = ev_now(loop);
	/* A bounded round: a burst is judged over several wakeups, the loop's timers between. */
	unsigned budget = 256;
	for (size_t i = 0; i < st->nwaiting && budget;) {
		struct fleet_waiting *w = &st->waiting[i];
		if (w->for_room || w->due > now) {
			i++;
			continue;
		}
		budget--;
		switch (fleet_judge(f, w)) {
		case FLEET_DONE:
			fleet_waiting_drop(st, w);
			continue; /* the last one moved into i */
		case FLEET_RETRY:
			w->due = now + w->delay;
			w->delay = fmin(w->delay * 2, FLEET_RETRY_LAST_S);
			break;
		case FLEET_NO_ROOM:
			w->for_room = true;
			break;
		}
		i++;
	}
	fleet_walk_check(st);
	fleet_arm(f);
	/* Left over from a bounded round: on at the next wakeup. */
	if (!budget && !ev_is_active(&st->judge)) {
		ev_timer_set(&st->judge, 0.001, 0);
		ev_timer_start(loop, &st->judge);
	}
}

/* ---- events ---- */

static void fleet_on_fork(void *ctx, pid_t parent, pid_t child)
{
	(void)parent;
	fleet_enqueue(ctx, child, false);
}

static void fleet_on_exec(void *ctx, pid_t pid)
{
	fleet_enqueue(ctx, pid, true);
}

static void fleet_on_exit(void *ctx, pid_t pid)
{
	struct fleet *f = ctx;
	struct fleet_state *st = f->state;
	struct fleet_waiting *w = fleet_waiting_find(st, pid);
	if (w)
		fleet_waiting_drop(st, w);
	fleet_unhold(st, pid);
	struct target *t = targets_find(&fleet_server(f)->targets, pid);
	if (t)
		target_check_alive(t, NULL);
}

static const struct procwatch_callbacks fleet_callbacks = {fleet_on_fork, fleet_on_exec, fleet_on_exit};

/* ---- lifecycle ---- */

int fleet_init(struct fleet *f, struct server *s)
{
	memset(f, 0, sizeof *f);
	f->server = s;
	if (!(f->state = calloc(1, sizeof *f->state)))
		return -1;
	if (!(f->state->log = fleet_log_new())) {
		free(f->state);
		f->state = NULL;
		return -1;
	}
	f->state->walk_when = "at start";
	ev_timer_init(&f->state->judge, fleet_on_judge, 1, 0);
	f->state->judge.data = f;
	return 0;
}

void fleet_configure(struct fleet *f)
{
	struct server *s = fleet_server(f);
	bool want = s->config.rules.n > 0;
	if (want && !f->watching) {
		char why[256];
		struct fleet_state *st = f->state;
		/* Every process the first walk reports (it only enqueues) is counted for its rule's summary. */
		st->walking = true;
		int started = procwatch_start(&f->watch, s->loop, s->config.discovery_method,
		                              s->config.scan_interval_s, &fleet_callbacks, f, why, sizeof why);
		st->walking = false;
		if (started != 0) {
			log_error("discovery: cannot watch processes: %s", why);
			return;
		}
		fleet_log_walk_begin(st->log, &s->config.rules, st->walk_when);
		f->watching = true;
		log_info("discovery: watching processes (%s) for %zu rule%s", procwatch_method_name(&f->watch),
		         s->config.rules.n, s->config.rules.n == 1 ? "" : "s");
	} else if (!want && f->watching) {
		procwatch_stop(&f->watch);
		f->watching = false;
		f->state->nwaiting = 0;
		fleet_arm(f);
		log_info("discovery: no rules, no longer watching processes");
	}
}

/*
 * A rule-attached target under the rules as they are now: kept as it is,
 * moved to the rule that claims it now (its rate, mode and labels), or
 * detached when none does.  Children stay with their parents.
 */
static void fleet_reconsider(struct fleet *f, struct target *t)
{
	struct server *s = fleet_server(f);
	struct proc_facts facts;
	if (proc_facts_read(t->pid, PROC_FACTS_ENVIRONMENT, &facts) != 0) {
		proc_facts_free(&facts);
		return; /* gone, or not to be looked at now: housekeeping will know */
	}
	const struct rule *rule = rules_match(&s->config.rules, &facts, t->python_version);
	if (!rule || rule->exclude) {
		log_info("pid %d: no rule claims it any more (it was rule %s's): detached", (int)t->pid, t->rule);
		target_stop(t);
	} else {
		struct target_params params = {.rate_hz = rule->rate_hz ? rule->rate_hz : s->config.default_rate_hz,
		                               .mode = rule->has_mode ? rule->mode : t->params.mode,
		                               .async_mode = rule->async_mode,
		                               .context = rule->context,
		                               .flags = (t->params.flags & ~UW_SNAP_NATIVE) | (rule->native ? UW_SNAP_NATIVE : 0u),
		                               .max_sample_ns = s->config.max_sample_ns,
		                               .no_write = s->config.no_write,
		                               .provers_off = s->config.provers_off};
		int labelled = fleet_labels_of_rule(&facts, t->python_version, rule, &params);
		char *name = strdup(rule->name);
		if (params.rate_hz > s->config.max_rate_hz)
			params.rate_hz = s->config.max_rate_hz;
		if (!name || labelled != 0) {
			free(name);
			target_params_free(&params);
		} else {
			free(t->rule);
			t->rule = name;
			t->children = rule->children;
			/* A new session only when something it samples by changed. */
			if (params.rate_hz != t->params.rate_hz || params.mode != t->params.mode ||
			    params.async_mode != t->params.async_mode || params.flags != t->params.flags ||
			    !context_spec_equal(&params.context, &t->params.context) ||
			    params.labels.n != t->params.labels.n)
				target_start(t, &params);
			else {
				target_params_free(&t->params);
				t->params = params;
			}
			budget_apply(&s->budget, t);
		}
	}
	proc_facts_free(&facts);
}

void fleet_rules_changed(struct fleet *f)
{
	struct server *s = fleet_server(f);
	for (size_t i = 0; i < s->targets.n; i++) {
		struct target *t = s->targets.v[i];
		if (t->rule && !t->parent && t->state == TARGET_SAMPLING)
			fleet_reconsider(f, t);
	}
	/* New rules may claim processes that run already: every one is judged again. */
	f->state->walk_when = "after the rules changed";
	if (f->watching) {
		procwatch_stop(&f->watch);
		f->watching = false;
	}
	fleet_configure(f);
}

void fleet_free(struct fleet *f)
{
	if (!f->state)
		return;
	if (f->watching)
		procwatch_stop(&f->watch);
	ev_timer_stop(fleet_server(f)->loop, &f->state->judge);
	fleet_log_free(f->state->log);
	free(f->state->waiting);
	free(f->state->held);
	free(f->state);
	f->state = NULL;
}

/* ---- once a second: room, holds ---- */

void fleet_housekeeping(struct fleet *f)
{
	struct server *s = fleet_server(f);
	struct fleet_state *st = f->state;
	/* Holds of processes gone (an exit missed while not watching). */
	for (size_t i = 0; i < st->nheld;) {
		struct uw_process_identity id;
		struct uw_error err;
		int looked = uw_process_identity(st->held[i].pid, &id, &err);
		if (looked != 0 && err.status == UW_ENOPROC)
			st->held[i] = st->held[--st->nheld];
		else if (looked == 0 && id.start_time != st->held[i].start_time) /* else: could not look */
			st->held[i] = st->held[--st->nheld];
		else
			i++;
	}
	fleet_log_tick(st->log);
	/* An exit may have taken the last process of the walk's that waited. */
	fleet_walk_check(st);
	/* Room under max_targets: those that waited for it are judged again. */
	size_t waiting_room = 0;
	for (size_t i = 0; i < st->nwaiting; i++)
		waiting_room += st->waiting[i].for_room;
	if (waiting_room && targets_live(&s->targets) < s->config.max_targets) {
		for (size_t i = 0; i < st->nwaiting; i++)
			if (st->waiting[i].for_room) {
				st->waiting[i].for_room = false;
				st->waiting[i].due = ev_now(s->loop);
			}
		st->room_warned = false;
		fleet_arm(f);
	}
}

void fleet_status(const struct fleet *f, Pyprofd__StatusResult *out)
{
	const struct server *s = f->server;
	out->discovery = (char *)(f->watching ? procwatch_method_name(&f->watch) : "off");
	out->rules = (uint32_t)s->config.rules.n;
	out->processes_judged = f->judged;
	struct procwatch_stats ws;
	procwatch_stats(&f->watch, &ws);
	out->discovery_events = ws.events;
	out->discovery_scans = ws.scans;
	out->discovery_lost = ws.lost;
	out->discovery_scan_ms_last = ws.scan_us_last / 1e3;
	out->discovery_scan_ms_max = ws.scan_us_max / 1e3;
	out->attached_by_rules = f->attached;
	for (size_t i = 0; f->state && i < f->state->nwaiting; i++)
		out->processes_waiting += f->state->waiting[i].claimed;
}
