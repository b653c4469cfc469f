/*
 * Where each CPython keeps what the asyncio reader and exception mode read:
 * tables measured per version, and for asyncio on 3.14 and newer the
 * interpreter's own debug offsets.
 */
#include "layout.h"

#include <string.h>

#define ABSENT LAYOUT_ABSENT
#define NO_OWNER LAYOUT_OWNER_NONE

/* -------- asyncio's tasks and coroutines, 3.11+ -------- */

/*
 * Measured on 3.11.7, 3.12.1, 3.13.0 and 3.13.18, 3.14.10, 3.15.2 (and
 * 3.15.2 with Py_DEBUG, which lays these objects out alike): the offsets of
 * a task's coroutine, name and waited future in the object, a coroutine's
 * embedded frame and state, where a suspended frame keeps the awaited
 * object, sys.modules in the interpreter and an instance's attributes.  The frame states are each version's enum of
 * Include/internal/pycore_frame.h.
 */
/* Every version's objects (a 16-byte PyObject_HEAD): see asyncio_layout.obj. */
#define ASYNCIO_OBJECTS                                                                     \
	.obj = {.head = 16, .fut_callback0 = 24, .fut_callbacks = 40, .var_size = 16, .list_items = 24,   \
	        .tuple_items = 24, .func_closure = 72, .method_self = 24, .cell_ref = 16,               \
	        .weakref_object = 16, .type_basicsize = 32, .module_dict = 16, .set_mask = 32,          \
	        .set_table = 40}

#define ASYNCIO_COMMON_3_14                                                                 \
	.task_size = 168, .fut_state = 104, .task_fut_waiter = 120, .task_coro = 128,        \
	.task_name = 136, .task_context = 144, .task_awaited_by = ABSENT, .task_is_task = ABSENT,                 \
	.task_awaited_by_is_set = ABSENT, .task_node = ABSENT, .ts_running_task = ABSENT,    \
	.ts_tasks_head = ABSENT, .interp_tasks_head = ABSENT, .gen_iframe = 72,              \
	.gen_frame_state = 67, .frame_stacktop = ABSENT, .frame_stackpointer = 64,           \
	.frame_localsplus = 80, .long_size = 16, .long_digit = 24, .long_tagged = true,      \
	ASYNCIO_OBJECTS

static const struct asyncio_layout asyncio_layouts[] = {
	{.minor = 11, .task_size = 176, .fut_state = 88, .task_fut_waiter = 128, .task_coro = 136,
	 .task_name = 144, .task_context = 152, .task_awaited_by = ABSENT, .task_is_task = ABSENT,
	 .task_awaited_by_is_set = ABSENT, .task_node = ABSENT, .ts_running_task = ABSENT,
	 .ts_tasks_head = ABSENT, .interp_tasks_head = ABSENT, .gen_iframe = 80,
	 .gen_frame_state = 75, .state_created = -2, .state_suspended_lo = -1,
	 .state_suspended_hi = -1, .state_executing = 0, .frame_stacktop = 64,
	 .frame_stackpointer = ABSENT, .frame_localsplus = 72, .interp_modules = 888,
	 .values_ptr = -32, .values_tagged = false, .long_size = 16, .long_digit = 24,
	 .long_tagged = false, ASYNCIO_OBJECTS},
	{.minor = 12, .task_size = 176, .fut_state = 88, .task_fut_waiter = 128, .task_coro = 136,
	 .task_name = 144, .task_context = 152, .task_awaited_by = ABSENT, .task_is_task = ABSENT,
	 .task_awaited_by_is_set = ABSENT, .task_node = ABSENT, .ts_running_task = ABSENT,
	 .ts_tasks_head = ABSENT, .interp_tasks_head = ABSENT, .gen_iframe = 72,
	 .gen_frame_state = 67, .state_created = -2, .state_suspended_lo = -1,
	 .state_suspended_hi = -1, .state_executing = 0, .frame_stacktop = 64,
	 .frame_stackpointer = ABSENT, .frame_localsplus = 72, .interp_modules = 944,
	 .values_ptr = -24, .values_tagged = true, .long_size = 16, .long_digit = 24,
	 .long_tagged = true, ASYNCIO_OBJECTS},
	{.minor = 13, .task_size = 144, .fut_state = 96, .task_fut_waiter = 112, .task_coro = 120,
	 .task_name = 128, .task_context = 136, .task_awaited_by = ABSENT, .task_is_task = ABSENT,
	 .task_awaited_by_is_set = ABSENT, .task_node = ABSENT, .ts_running_task = ABSENT,
	 .ts_tasks_head = ABSENT, .interp_tasks_head = ABSENT, .gen_iframe = 72,
	 .gen_frame_state = 67, .state_created = -3, .state_suspended_lo = -2,
	 .state_suspended_hi = -1, .state_executing = 0, .frame_stacktop = 64,
	 .frame_stackpointer = ABSENT, .frame_localsplus = 72, .interp_modules = 7656,
	 .values_ptr = 0, .values_tagged = false, .long_size = 16, .long_digit = 24,
	 .long_tagged = true, ASYNCIO_OBJECTS},
	{.minor = 14, ASYNCIO_COMMON_3_14, .state_created = -3, .state_suspended_lo = -2,
	 .state_suspended_hi = -1, .state_executing = 0},
	/* 3.15 renumbered the frame states from 0 and added a locked yield-from. */
	{.minor = 15, ASYNCIO_COMMON_3_14, .state_created = 0, .state_suspended_lo = 1,
	 .state_suspended_hi = 3, .state_executing = 4},
};

const struct asyncio_layout *layout_asyncio_for_minor(unsigned minor)
{
	for (size_t i = 0; i < sizeof asyncio_layouts / sizeof asyncio_layouts[0]; i++)
		if (asyncio_layouts[i].minor == minor)
			return &asyncio_layouts[i];
	return NULL;
}

/* _Py_AsyncioModuleDebugOffsets, in u64 words: the task object's, the interpreter's, the thread's. */
enum asyncio_dof {
	ADO_TASK_SIZE,
	ADO_TASK_NAME,
	ADO_TASK_AWAITED_BY,
	ADO_TASK_IS_TASK,
	ADO_TASK_AWAITED_BY_IS_SET,
	ADO_TASK_CORO,
	ADO_TASK_NODE,
	ADO_INTERP_SIZE,
	ADO_INTERP_TASKS_HEAD,
	ADO_TSTATE_SIZE,
	ADO_TSTATE_RUNNING_LOOP,
	ADO_TSTATE_RUNNING_TASK,
	ADO_TSTATE_TASKS_HEAD,
	ADO_COUNT
};

int layout_asyncio_from_debug(const uint8_t *raw, size_t len, struct asyncio_layout *out)
{
	if (len < ADO_COUNT * 8)
		return -1;
	uint64_t v[ADO_COUNT];
	memcpy(v, raw, sizeof v);
	uint64_t task_size = v[ADO_TASK_SIZE];
	/* Fields of a task lie inside it; states are a few KiB at most. */
	if (task_size < 64 || task_size > 512 || v[ADO_TSTATE_SIZE] > (1u << 16) ||
	    v[ADO_INTERP_SIZE] > (1u << 20))
		return -1;
	for (int f = ADO_TASK_NAME; f <= ADO_TASK_NODE; f++)
		if (v[f] + 16 > task_size)
			return -1;
	if (v[ADO_TSTATE_RUNNING_TASK] + 8 > v[ADO_TSTATE_SIZE] ||
	    v[ADO_TSTATE_TASKS_HEAD] + 16 > v[ADO_TSTATE_SIZE] ||
	    v[ADO_INTERP_TASKS_HEAD] + 16 > v[ADO_INTERP_SIZE])
		return -1;
	/* The fields the debug offsets leave out must still fit the task read. */
	if (out->fut_state + 4 > task_size || out->task_fut_waiter + 8 > task_size)
		return -1;
	out->task_size = (uint32_t)task_size;
	out->task_name = (uint32_t)v[ADO_TASK_NAME];
	/* Not among the debug offsets; the word after the name in every TaskObj so far. */
	out->task_context = out->task_name + 8 + 8 <= task_size ? out->task_name + 8 : LAYOUT_ABSENT;
	out->task_awaited_by = (uint32_t)v[ADO_TASK_AWAITED_BY];
	out->task_is_task = (uint32_t)v[ADO_TASK_IS_TASK];
	out->task_awaited_by_is_set = (uint32_t)v[ADO_TASK_AWAITED_BY_IS_SET];
	out->task_coro = (uint32_t)v[ADO_TASK_CORO];
	out->task_node = (uint32_t)v[ADO_TASK_NODE];
	out->interp_tasks_head = (uint32_t)v[ADO_INTERP_TASKS_HEAD];
	out->ts_running_task = (uint32_t)v[ADO_TSTATE_RUNNING_TASK];
	out->ts_tasks_head = (uint32_t)v[ADO_TSTATE_TASKS_HEAD];
	return 0;
}

/* -------- the exceptions a thread handles -------- */

/* Measured on 3.8.18, 3.9.18, 3.10.13, 3.11.2 and .7, 3.12.1, 3.13.0 and .18, 3.14.10, 3.15.2 (and Py_DEBUG). */
static const struct exc_layout exc_layouts[] = {
	{.minor = 8, .tstate_exc_info = 144, .item_exception = 0, .item_previous = 24},
	{.minor = 9, .tstate_exc_info = 144, .item_exception = 0, .item_previous = 24},
	{.minor = 10, .tstate_exc_info = 144, .item_exception = 0, .item_previous = 24},
	{.minor = 11, .tstate_exc_info = 120, .item_exception = 0, .item_previous = 8},
	{.minor = 12, .tstate_exc_info = 104, .item_exception = 0, .item_previous = 8},
	{.minor = 13, .tstate_exc_info = 120, .item_exception = 0, .item_previous = 8},
	{.minor = 14, .tstate_exc_info = 120, .item_exception = 0, .item_previous = 8},
	{.minor = 15, .tstate_exc_info = 144, .item_exception = 0, .item_previous = 8},
};

const struct exc_layout *layout_exc_for_minor(unsigned minor)
{
	for (size_t i = 0; i < sizeof exc_layouts / sizeof exc_layouts[0]; i++)
		if (exc_layouts[i].minor == minor)
			return &exc_layouts[i];
	return NULL;
}
