/*
 * Who may act on what, and the error answers every handler gives.
 *
 * Authorization, by the peer's uid and gid from SO_PEERCRED: root may act
 * on any process; any other user only on processes the kernel would let it
 * trace (target_owner: all its uids and gids the user's, dumpable, no
 * capabilities), and it sees only those in `list`, `status` and the
 * history.  A process the daemon knows is judged by its target's uid,
 * which is lowered to root's for good when the process gains privileges.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pyprofd.h"
#include "rpc_handlers.h"

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

void rpc_out_of_memory(Pyprofd__Response *resp, struct arena *a)
{
	rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_INTERNAL, "the daemon is out of memory");
}

bool rpc_may_see(const struct client *c, uid_t owner_uid, gid_t owner_gid)
{
	return c->uid == 0 || (owner_uid != 0 && c->uid == owner_uid && c->gid == owner_gid);
}

bool rpc_target_has_labels(const struct target *t, Pyprofd__Label *const *labels, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *value = labels_get(&t->params.labels, labels[i]->key);
		if (!value || strcmp(value, labels[i]->value) != 0)
			return false;
	}
	return true;
}

bool rpc_idle_left_out(const struct server *s, Pyprofd__IdlePolicy policy, bool no_idle)
{
	/* check_request refused a policy the protocol lacks, and keep beside no_idle. */
	if (policy != PYPROFD__IDLE_POLICY__IDLE_DEFAULT)
		return policy == PYPROFD__IDLE_POLICY__IDLE_DROP;
	/* A client from before idle_policy says drop by no_idle, and nothing otherwise. */
	return no_idle || s->config.drop_idle;
}

/*
 * The live process pid, if the client may act on it, and the target the
 * daemon has of it in *t (NULL if none; a target of a process that had
 * the pid before is forgotten here), and its real uid in *real_uid unless
 * NULL.  Otherwise an error in resp and -1.
 */
int rpc_process(struct server *s, const struct client *c, pid_t pid, struct target **t, uid_t *real_uid,
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
	if (real_uid)
		*real_uid = id.uid[0];
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

/* A known target the client may see, or an error in resp. */
struct target *rpc_known_target(struct server *s, const struct client *c, pid_t pid,
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
