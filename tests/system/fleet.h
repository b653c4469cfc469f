/*
 * What the tests of the fleet share: a daemon with a config of rules, Python
 * processes to find, and looks at what the daemon made of them.
 */
#ifndef PYPROFD_TESTS_FLEET_H
#define PYPROFD_TESTS_FLEET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "daemon.h"

/* The newest supported interpreter (of pys). */
const struct python *fleet_python(struct python pys[PYTHONS_MAX]);

/* The daemon (debug log) with this config file, written into a scratch directory: its path in config_path. */
void fleet_daemon(struct daemon *d, const char *config_text, char *config_path, size_t len);
/* fleet_daemon with discovery by method ("netlink" or "scan", walking every interval) and rules. */
void fleet_daemon_discovering(struct daemon *d, const char *method, const char *interval, const char *rules);

/* The daemon started again (stopped before) on its state directory, with this config file, as a restart by systemd does. */
void fleet_daemon_again(struct daemon *d, const char *config_path);

/* py idling in a function, marker in its argv. */
pid_t fleet_spawn(const struct python *py, const char *marker);

/* SIGKILL and reap. */
void fleet_kill(pid_t pid);

/* Predicates on a list entry. */
bool fleet_sampling(json_t *e);  /* sampling, and has samples */
bool fleet_detached(json_t *e);

/* A label of a list entry, or NULL. */
const char *fleet_label(json_t *entry, const char *key);

/* Whether the daemon knows pid at all. */
bool fleet_knows(const struct daemon *d, pid_t pid);

/* The entry whose command line holds marker once it samples (within 30 s), or the test fails. */
json_t *fleet_entry_by_marker(const struct daemon *d, const char *marker, const char *what);

/* `pyprofd-ctl status --json`'s discovery.waiting. */
json_int_t fleet_waiting(const struct daemon *d);

#endif
