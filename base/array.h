/* Growing a dense array: one way for every array in the tree. */
#ifndef PYPROFD_ARRAY_H
#define PYPROFD_ARRAY_H

#include <stddef.h>

/*
 * Make index n of the array *arr of *cap elements of `elem` bytes valid,
 * doubling the capacity; adds the bytes grown to *bytes when not NULL.
 * 0, or -1 when out of memory or past what size_t can count.
 */
int array_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t *bytes);
/* Inline for the common case, room already there: a steady sample appends to several arrays. */
static inline int array_reserve(void **arr, size_t *cap, size_t n, size_t elem, size_t *bytes)
{
	return n < *cap ? 0 : array_grow(arr, cap, n, elem, bytes);
}

/*
 * What malloc takes for a request of len bytes: glibc hands out 16-byte
 * chunks with 8 bytes of header, at least 32.  A memory bound over many
 * short strings that counted their lengths alone would hold twice its size.
 */
size_t array_alloc_room(size_t len);

#endif
