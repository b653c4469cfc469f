/* Key and value pairs a part owns (labels.h). */
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "labels.h"

int labels_put(struct labels *l, const char *key, const char *value)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->keys[i], key) == 0) {
			char *copy = strdup(value);
			if (!copy)
				return -1;
			free(l->values[i]);
			l->values[i] = copy;
			return 0;
		}
	return labels_add(l, key, value);
}

int labels_add(struct labels *l, const char *key, const char *value)
{
	/* Both arrays grow to one room: values follows keys. */
	size_t cap = l->cap;
	if (array_reserve((void **)&l->keys, &cap, l->n, sizeof *l->keys, NULL) != 0)
		return -1;
	if (cap != l->cap) {
		char **values = realloc(l->values, cap * sizeof *values);
		if (!values)
			return -1; /* keys has room to spare: harmless */
		l->values = values;
		l->cap = cap;
	}
	char *k = strdup(key), *v = strdup(value);
	if (!k || !v) {
		free(k);
		free(v);
		return -1;
	}
	l->keys[l->n] = k;
	l->values[l->n++] = v;
	return 0;
}

const char *labels_get(const struct labels *l, const char *key)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->keys[i], key) == 0)
			return l->values[i];
	return NULL;
}

int labels_copy(struct labels *to, const struct labels *from)
{
	*to = (struct labels){0};
	for (size_t i = 0; i < from->n; i++)
		if (labels_add(to, from->keys[i], from->values[i]) != 0) {
			labels_free(to);
			return -1;
		}
	return 0;
}

bool labels_equal(const struct labels *a, const struct labels *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->keys[i], b->keys[i]) != 0 || strcmp(a->values[i], b->values[i]) != 0)
			return false;
	return true;
}

void labels_free(struct labels *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->keys[i]);
		free(l->values[i]);
	}
	free(l->keys);
	free(l->values);
	*l = (struct labels){0};
}
