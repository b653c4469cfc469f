/*
 * The registry of targets.  Detached targets keep their unwinder state only
 * within the warm budget (least recently used go first), and exited ones stay
 * listed a while so an operator sees what ended, but never past the cap.
 */
#include <stdlib.h>

#include "pyprofd.h"

/* How long an exited target stays in `list`. */
#define EXITED_KEEP_S 600.0

struct target *targets_find(const struct targets *ts, pid_t pid)
{
	for (size_t i = 0; i < ts->n; i++)
		if (ts->v[i]->pid == pid)
			return ts->v[i];
	return NULL;
}

int targets_add(struct targets *ts, struct target *t)
{
	if (ts->n == ts->cap) {
		size_t cap = ts->cap ? ts->cap * 2 : 16;
		struct target **v = realloc(ts->v, cap * sizeof *v);
		if (!v)
			return -1;
		ts->v = v;
		ts->cap = cap;
	}
	ts->v[ts->n++] = t;
	return 0;
}

void targets_remove(struct targets *ts, struct target *t)
{
	for (size_t i = 0; i < ts->n; i++)
		if (ts->v[i] == t) {
			ts->v[i] = ts->v[--ts->n];
			return;
		}
}

size_t targets_warm_bytes(const struct targets *ts)
{
	size_t total = 0;
	for (size_t i = 0; i < ts->n; i++)
		if (ts->v[i]->state == TARGET_DETACHED)
			total += target_cache_bytes(ts->v[i]);
	return total;
}

void targets_share_cache(struct targets *ts, size_t budget)
{
	size_t sampling = 0;
	for (size_t i = 0; i < ts->n; i++)
		sampling += ts->v[i]->state == TARGET_SAMPLING;
	size_t share = budget / (sampling ? sampling : 1);
	if (share > UW_DEFAULT_CACHE_BUDGET)
		share = UW_DEFAULT_CACHE_BUDGET;
	/* A detached target keeps the share it had: the warm budget holds it now. */
	for (size_t i = 0; i < ts->n; i++)
		if (ts->v[i]->state == TARGET_SAMPLING)
			target_set_cache_budget(ts->v[i], share);
}

size_t targets_cache_bytes(const struct targets *ts)
{
	size_t total = 0;
	for (size_t i = 0; i < ts->n; i++)
		if (ts->v[i]->state == TARGET_SAMPLING)
			total += target_cache_bytes(ts->v[i]);
	return total;
}

size_t targets_count_bytes(const struct targets *ts)
{
	size_t total = 0;
	for (size_t i = 0; i < ts->n; i++)
		total += target_count_bytes(ts->v[i]);
	return total;
}

/* The least recently used target in `state`, or NULL. */
static struct target *targets_oldest_in(const struct targets *ts, enum target_state state)
{
	struct target *oldest = NULL;
	for (size_t i = 0; i < ts->n; i++)
		if (ts->v[i]->state == state && (!oldest || ts->v[i]->last_used < oldest->last_used))
			oldest = ts->v[i];
	return oldest;
}

void targets_trim(struct targets *ts, size_t warm_budget, size_t max_targets)
{
	struct target *t;
	while (targets_warm_bytes(ts) > warm_budget && (t = targets_oldest_in(ts, TARGET_DETACHED))) {
		log_info("pid %d: warm state dropped (over the %zu MiB budget)", (int)t->pid,
		         warm_budget >> 20);
		targets_remove(ts, t);
		target_free(t);
	}
	while ((t = targets_oldest_in(ts, TARGET_EXITED)) &&
	       (ts->n > max_targets || ev_now(t->loop) - t->last_used > EXITED_KEEP_S)) {
		targets_remove(ts, t);
		target_free(t);
	}
}

size_t targets_live(const struct targets *ts)
{
	size_t n = 0;
	for (size_t i = 0; i < ts->n; i++)
		n += ts->v[i]->state != TARGET_EXITED;
	return n;
}

/* One user's share of max_targets, and root's kept: a quarter unless told, never all. */
static unsigned targets_uid_share(const struct config *c)
{
	unsigned share = c->max_targets_per_uid ? c->max_targets_per_uid : c->max_targets / 4;
	if (share < 1)
		share = 1;
	return share < c->max_targets ? share : c->max_targets;
}

int targets_room(const struct targets *ts, const struct config *c, uid_t uid, char *why, size_t len)
{
	size_t live = 0, of_uid = 0, not_root = 0;
	for (size_t i = 0; i < ts->n; i++) {
		const struct target *t = ts->v[i];
		if (t->state == TARGET_EXITED)
			continue;
		live++;
		of_uid += t->charged_uid == uid;
		not_root += t->charged_uid != 0;
	}
	if (live >= c->max_targets)
		return snprintf(why, len, "the daemon already profiles its maximum of %u processes "
		                "([limits] max_targets)", c->max_targets), -1;
	if (uid == 0)
		return 0;
	unsigned share = targets_uid_share(c);
	if (of_uid >= share)
		return snprintf(why, len, "uid %d already has its share of %u profiled processes "
		                "([limits] max_targets_per_uid)", (int)uid, share), -1;
	/* Root's share is kept for root's own processes, whatever the users hold. */
	if (not_root >= c->max_targets - share)
		return snprintf(why, len, "users other than root already hold the %u profiled processes "
		                "open to them; the other %u are kept for root's ([limits] max_targets_per_uid)",
		                c->max_targets - share, share), -1;
	return 0;
}

void targets_flush(struct targets *ts)
{
	for (size_t i = 0; i < ts->n; i++)
		target_flush(ts->v[i]);
}

void targets_free(struct targets *ts)
{
	for (size_t i = 0; i < ts->n; i++)
		target_free(ts->v[i]);
	free(ts->v);
	ts->v = NULL;
	ts->n = ts->cap = 0;
}
