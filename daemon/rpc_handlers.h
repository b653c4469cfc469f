/*
 * What the request handlers share (rpc*.c): who may act on what, the error
 * answers, and each family's handlers, all of one shape.
 */
#ifndef PYPROFD_RPC_HANDLERS_H
#define PYPROFD_RPC_HANDLERS_H

#include "pyprofd.h"

/* One request answered into resp (nested messages in a); RESULT__NOT_SET: answered later. */
typedef void (*rpc_handler)(struct server *s, struct client *c, const Pyprofd__Request *req,
                            Pyprofd__Response *resp, struct arena *a);

/* rpc_access.c */
/* An error response. */
void rpc_error(Pyprofd__Response *resp, struct arena *a, Pyprofd__ErrorCode code,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void rpc_out_of_memory(Pyprofd__Response *resp, struct arena *a);
/* Whether the client may see what this owner's: root sees all, a user its own. */
bool rpc_may_see(const struct client *c, uid_t owner_uid, gid_t owner_gid);
/* Whether the target has every one of these labels, key and value (none: any target has). */
bool rpc_target_has_labels(const struct target *t, Pyprofd__Label *const *labels, size_t n);
/*
 * Whether a view (top, a query) leaves out the samples of waiting threads:
 * as the request's policy says, or its older no_idle, else as [sampling] idle.
 */
bool rpc_idle_left_out(const struct server *s, Pyprofd__IdlePolicy policy, bool no_idle);
/* Most labels a selection of targets (list, top) may ask for: as many as a target holds. */
#define RPC_SELECT_LABELS_MAX TARGET_LABELS_MAX
/*
 * The live process pid, if the client may act on it, and the target the
 * daemon has of it in *t (NULL if none; a target of a process that had
 * the pid before is forgotten here), and its real uid in *real_uid unless
 * NULL.  Otherwise an error in resp and -1.
 */
int rpc_process(struct server *s, const struct client *c, pid_t pid, struct target **t, uid_t *real_uid,
                Pyprofd__Response *resp, struct arena *a);
/* A known target the client may see, or an error in resp. */
struct target *rpc_known_target(struct server *s, const struct client *c, pid_t pid,
                                Pyprofd__Response *resp, struct arena *a);

/* rpc_targets.c */
void rpc_attach(struct server *s, struct client *c, const Pyprofd__Request *req,
                Pyprofd__Response *resp, struct arena *a);
void rpc_detach(struct server *s, struct client *c, const Pyprofd__Request *req,
                Pyprofd__Response *resp, struct arena *a);
void rpc_list(struct server *s, struct client *c, const Pyprofd__Request *req,
              Pyprofd__Response *resp, struct arena *a);
void rpc_dump(struct server *s, struct client *c, const Pyprofd__Request *req,
              Pyprofd__Response *resp, struct arena *a);
void rpc_stats(struct server *s, struct client *c, const Pyprofd__Request *req,
               Pyprofd__Response *resp, struct arena *a);

/* rpc_status.c */
void rpc_status(struct server *s, struct client *c, const Pyprofd__Request *req,
                Pyprofd__Response *resp, struct arena *a);

/* rpc_top.c */
void rpc_top(struct server *s, struct client *c, const Pyprofd__Request *req,
             Pyprofd__Response *resp, struct arena *a);

/* rpc_rules.c */
void rpc_rules(struct server *s, struct client *c, const Pyprofd__Request *req,
               Pyprofd__Response *resp, struct arena *a);

/* rpc_history.c: answered later, as jobs (jobs.c) */
void rpc_query(struct server *s, struct client *c, const Pyprofd__Request *req,
               Pyprofd__Response *resp, struct arena *a);
void rpc_otlp_export(struct server *s, struct client *c, const Pyprofd__Request *req,
                     Pyprofd__Response *resp, struct arena *a);

#endif
