/*
 * One range of a batched read of a target's memory (remote.c): what the
 * view plans, the kernel's copies take, and remote_read_batch fills.
 * Internal to daemon/unwind.
 */
#ifndef PYPROFD_UNWIND_REMOTE_RANGE_H
#define PYPROFD_UNWIND_REMOTE_RANGE_H

#include <stdbool.h>
#include <stdint.h>

#include "prove.h"

/* `got` is how many bytes from addr arrived. */
struct remote_range {
	raddr_t addr;
	uint32_t len;
	uint32_t got;
	uint8_t *buf;
	bool skip; /* not read this time (view.c: a thread proven still): got stays 0 */
};

#endif
