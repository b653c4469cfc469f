/* The array grower: capacity doubles, so n appends cost O(n) copies in all. */
#include <stdint.h>
#include <stdlib.h>

#include "array.h"

size_t array_alloc_room(size_t len)
{
	size_t chunk = (len + 8 + 15) & ~(size_t)15;
	return chunk < 32 ? 32 : chunk;
}

/* array_reserve's slow path: *cap <= n. */
int array_grow(void **arr, size_t *cap, size_t n, size_t elem, size_t *bytes)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? *cap : 16;
	while (ncap <= n) {
		if (ncap > SIZE_MAX / 2)
			return -1;
		ncap *= 2;
	}
	if (elem && ncap > SIZE_MAX / elem)
		return -1;
	void *p = realloc(*arr, ncap * elem);
	if (!p)
		return -1;
	if (bytes)
		*bytes += (ncap - *cap) * elem;
	*arr = p;
	*cap = ncap;
	return 0;
}
