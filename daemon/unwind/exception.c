/*
 * Exception mode: only the threads handling an exception are sampled.  A
 * thread handles one while its chain of exception states (the thread's own
 * and those of the generators it runs) holds an exception that is not None,
 * the test sys.exc_info() makes: inside an except block, or a finally block
 * entered by an exception.
 */
#include <string.h>
#include <unistd.h>

#include "unwind_internal.h"

/* Items of the chain looked at: one per generator running inside another, and the thread's. */
#define EXCEPTION_MAX_ITEMS 256

/* Where None is: an item holding None holds no exception. */
static raddr_t exception_none(struct uw_target *t)
{
	if (t->none_looked)
		return t->none_object;
	t->none_looked = true;
	struct elf_symbol none = {.name = "_Py_NoneStruct"};
	raddr_t at;
	if (proc_runtime_symbols(t, &none, 1, &at))
		t->none_object = at;
	return t->none_object;
}

bool exception_handling(struct uw_target *t, raddr_t tstate, uint32_t *items)
{
	*items = 0;
	const struct exc_layout *L = layout_exc_for_minor(t->layout.minor);
	if (!L)
		return false;
	raddr_t none = exception_none(t);
	const uint8_t *p = view_read(t, tstate + L->tstate_exc_info, 8, 0, NULL);
	if (!p)
		return false;
	raddr_t item = load_u64(p, 0);
	uint32_t len = (L->item_exception > L->item_previous ? L->item_exception : L->item_previous) + 8;
	for (unsigned i = 0; item && i < EXCEPTION_MAX_ITEMS; i++) {
		++*items;
		const uint8_t *it = view_read(t, item, len, 0, NULL);
		if (!it)
			return false;
		raddr_t exc = load_u64(it, L->item_exception);
		if (exc && exc != none)
			return true;
		raddr_t previous = load_u64(it, L->item_previous);
		if (previous == item)
			return false;
		item = previous;
	}
	return false;
}
