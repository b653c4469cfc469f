/*
 * The unwinder's internal interfaces, in three headers by concern, each
 * grouped by the file that owns what it declares: reaching a target
 * (unwind_memory.h), what is kept of it between samples (unwind_state.h)
 * and a sample under way (unwind_walk.h).  Nothing outside daemon/unwind
 * includes them.
 */
#ifndef PYPROFD_UNWIND_INTERNAL_H
#define PYPROFD_UNWIND_INTERNAL_H

#include "unwind_walk.h"

#endif
