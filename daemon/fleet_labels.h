/*
 * fleet_labels — the label set of a process the daemon attaches.  Each
 * gives params (which owns them from then on) its labels; -1 when out of
 * memory, params untouched.
 */
#ifndef PYPROFD_FLEET_LABELS_H
#define PYPROFD_FLEET_LABELS_H

#include <sys/types.h>

struct labels;
struct proc_facts;
struct rule;
struct target_params;

/* Claimed by rule: what was found, the rule's labels and rule=NAME, then the process's own. */
int fleet_labels_of_rule(const struct proc_facts *facts, const char *python_version, const struct rule *rule,
                         struct target_params *p);
/* Followed as a child: what was found, its parent's labels, and parent=ANCESTOR (the rule's match). */
int fleet_labels_of_child(const struct proc_facts *facts, const char *python_version, const struct labels *parent,
                          pid_t ancestor, struct target_params *p);
/*
 * Attached by hand: what was found of the process, then those it had
 * before (when none are given), then those given, which win.
 */
int fleet_hand_labels(pid_t pid, const char *python_version, const struct target_params *before,
                      struct target_params *p);
/* Once an attach: the process's own labels that were left out, and why. */
void fleet_labels_say_left_out(const struct proc_facts *facts);

#endif
