/* Growing the dense arrays the unwinder keeps: one way, bounded by the caller. */
#include <stdlib.h>

#include "unwind_internal.h"

int array_reserve(void **arr, uint32_t *cap, uint32_t n, size_t elem, size_t *bytes)
{
	if (n < *cap)
		return 0;
	uint64_t ncap = *cap ? *cap : 16;
	while (ncap <= n)
		ncap *= 2;
	if (ncap > UINT32_MAX)
		return -1;
	void *p = realloc(*arr, (size_t)ncap * elem);
	if (!p)
		return -1;
	if (bytes)
		*bytes += (size_t)(ncap - *cap) * elem;
	*arr = p;
	*cap = (uint32_t)ncap;
	return 0;
}
