/*
 * Key and value pairs a part owns, in order: a process's labels, a rule's
 * settings, the headers and resource attributes sent to a collector (each
 * key once, by labels_put), a query's selection (each pair a condition, by
 * labels_add).  Kept as two parallel arrays, so the store and the wire can
 * borrow keys and values as they are.
 */
#ifndef PYPROFD_LABELS_H
#define PYPROFD_LABELS_H

#include <stdbool.h>
#include <stddef.h>

struct labels {
	size_t n, cap;
	char **keys, **values;
};

/* key = value, replacing the value key had; 0, or -1 out of memory (l as it was). */
int labels_put(struct labels *l, const char *key, const char *value);
/* key = value appended, even if key is there; 0, or -1 out of memory (l as it was). */
int labels_add(struct labels *l, const char *key, const char *value);
/* The value of key (the first, if added twice), or NULL. */
const char *labels_get(const struct labels *l, const char *key);
/* A copy of from into to, which holds nothing; 0, or -1 with to empty. */
int labels_copy(struct labels *to, const struct labels *from);
/* The same pairs in the same order. */
bool labels_equal(const struct labels *a, const struct labels *b);
/* Every pair let go; l is empty again. */
void labels_free(struct labels *l);

#endif
