/*
 * The labels the daemon gives a process it attaches: what it finds of
 * the process (exe, python, unit, container), what a rule or the person
 * attaching says, and what the process says of itself, each under its own
 * keys so that none passes for another.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fleet_labels.h"
#include "pyprofd.h"

/* A label set being built: a later put of a key replaces the earlier value. */
struct fleet_labels {
	struct labels l;
	bool failed; /* out of memory on the way: nothing is given */
};

/*
 * key = value, unless value is empty (nothing found is no label) or the set
 * is full: the bounds of each kind of label keep it below what the store
 * takes, and a set past it would never be stored.  A value found in names
 * the process chose (its program's, a cgroup's) has its bytes that are not
 * UTF-8 replaced (U+FFFD), as list, query and a collector take UTF-8.
 */
static void fleet_labels_put(struct fleet_labels *l, const char *key, const char *value)
{
	if (!value || !*value || l->failed ||
	    (l->l.n == TARGET_LABELS_MAX && !labels_get(&l->l, key)))
		return;
	char *fixed = NULL;
	if (check_utf8_prefix((const uint8_t *)value, strlen(value)) != strlen(value) &&
	    !(value = fixed = export_utf8_copy(value))) {
		l->failed = true;
		return;
	}
	if (labels_put(&l->l, key, value) != 0)
		l->failed = true;
	free(fixed);
}

static void fleet_labels_put_all(struct fleet_labels *l, const struct labels *from)
{
	for (size_t i = 0; i < from->n; i++)
		fleet_labels_put(l, from->keys[i], from->values[i]);
}

/* Into params (which owns them from then on); -1 if out of memory. */
static int fleet_labels_give(struct fleet_labels *l, struct target_params *p)
{
	if (l->failed) {
		labels_free(&l->l);
		return -1;
	}
	p->labels = l->l;
	l->l = (struct labels){0};
	return 0;
}

/*
 * The process's own labels, each under LABELS_OWN_PREFIX: a process may
 * say what it likes of itself, never what the daemon found or a rule gave.
 */
static void fleet_labels_own(struct fleet_labels *l, const struct labels *own)
{
	for (size_t i = 0; i < own->n && !l->failed; i++) {
		char key[sizeof LABELS_OWN_PREFIX + LABELS_OWN_KEY_MAX];
		if (snprintf(key, sizeof key, "%s%s", LABELS_OWN_PREFIX, own->keys[i]) < (int)sizeof key &&
		    !labels_get(&l->l, key))
			fleet_labels_put(l, key, own->values[i]);
	}
}

/* Once an attach: the process's own labels that were left out, and why. */
void fleet_labels_say_left_out(const struct proc_facts *facts)
{
	if (facts->bad_labels)
		log_warn("pid %d: %u of its own labels (PYPROFD_LABELS) left out: it may give %d, "
		         "KEY=VALUE in UTF-8, keys up to %d bytes, values up to %d",
		         (int)facts->pid, facts->bad_labels, LABELS_OWN_MAX, LABELS_OWN_KEY_MAX,
		         LABELS_OWN_VALUE_MAX);
}

static const char *fleet_base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

/* What the daemon finds of every process: its program, runtime, unit and container. */
static void fleet_labels_found(struct fleet_labels *l, const struct proc_facts *facts,
                               const char *python_version)
{
	fleet_labels_put(l, "exe", fleet_base_name(facts->exe));
	fleet_labels_put(l, "python", python_version);
	fleet_labels_put(l, "unit", facts->unit);
	fleet_labels_put(l, "container", facts->container);
}

int fleet_hand_labels(pid_t pid, const char *python_version, const struct target_params *before,
                      struct target_params *p)
{
	struct proc_facts facts;
	struct fleet_labels l = {0};
	if (proc_facts_read(pid, PROC_FACTS_ENVIRONMENT, &facts) == 0) {
		fleet_labels_found(&l, &facts, python_version);
		fleet_labels_own(&l, &facts.labels);
		fleet_labels_say_left_out(&facts);
	}
	proc_facts_free(&facts);
	/*
	 * Attached again without labels: it keeps those it had, but no rule's or
	 * parent's, and its own as it says them now.
	 */
	if (!p->labels.n && before)
		for (size_t i = 0; i < before->labels.n; i++)
			if (strcmp(before->labels.keys[i], "rule") != 0 &&
			    strcmp(before->labels.keys[i], "parent") != 0 &&
			    !proc_facts_label_is_own(before->labels.keys[i]))
				fleet_labels_put(&l, before->labels.keys[i], before->labels.values[i]);
	/* What the person attaching said wins over what was found. */
	fleet_labels_put_all(&l, &p->labels);
	labels_free(&p->labels);
	return fleet_labels_give(&l, p);
}

int fleet_labels_of_rule(const struct proc_facts *facts, const char *python_version, const struct rule *rule,
                         struct target_params *p)
{
	struct fleet_labels l = {0};
	fleet_labels_found(&l, facts, python_version);
	fleet_labels_put_all(&l, &rule->labels);
	fleet_labels_put(&l, "rule", rule->name);
	fleet_labels_own(&l, &facts->labels);
	return fleet_labels_give(&l, p);
}

int fleet_labels_of_child(const struct proc_facts *facts, const char *python_version, const struct labels *parent,
                          pid_t ancestor, struct target_params *p)
{
	struct fleet_labels l = {0};
	fleet_labels_found(&l, facts, python_version);
	fleet_labels_put_all(&l, parent);
	char pid_text[16];
	snprintf(pid_text, sizeof pid_text, "%d", (int)ancestor);
	fleet_labels_put(&l, "parent", pid_text);
	return fleet_labels_give(&l, p);
}
