/* The shared vocabulary's tables. */
#include <stddef.h>
#include <string.h>

#include "vocab.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* A row no unwinder status gives: the daemon's own refusals. */
#define NOT_UNWINDER (-1)

static const struct {
	int status; /* enum uw_status, or NOT_UNWINDER */
	Pyprofd__ErrorCode code;
	enum exit_status exit;
	const char *name;
} vocab_statuses[] = {
	{UW_OK, PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED, EXIT_OK, "ok"},
	{UW_ENOPROC, PYPROFD__ERROR_CODE__ERROR_NO_PROCESS, EXIT_NO_PROCESS, "no such process"},
	{UW_EPERM, PYPROFD__ERROR_CODE__ERROR_PERMISSION, EXIT_PERMISSION, "permission denied"},
	{UW_ENOTPYTHON, PYPROFD__ERROR_CODE__ERROR_NOT_PYTHON, EXIT_NOT_PYTHON, "not a Python process"},
	{UW_EVERSION, PYPROFD__ERROR_CODE__ERROR_UNSUPPORTED, EXIT_UNSUPPORTED,
	 "unsupported Python version"},
	{UW_EGONE, PYPROFD__ERROR_CODE__ERROR_EXITED, EXIT_EXITED, "process exited"},
	{UW_ECORRUPT, PYPROFD__ERROR_CODE__ERROR_CORRUPT, EXIT_CORRUPT, "inconsistent remote data"},
	{UW_ENOMEM, PYPROFD__ERROR_CODE__ERROR_INTERNAL, EXIT_FAILURE_OTHER, "out of memory"},
	{UW_EIO, PYPROFD__ERROR_CODE__ERROR_INTERNAL, EXIT_FAILURE_OTHER, "I/O error"},
	{NOT_UNWINDER, PYPROFD__ERROR_CODE__ERROR_NOT_ATTACHED, EXIT_NOT_ATTACHED, "not attached"},
	{NOT_UNWINDER, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, EXIT_FAILURE_OTHER, "bad request"},
	{NOT_UNWINDER, PYPROFD__ERROR_CODE__ERROR_PROTOCOL, EXIT_FAILURE_OTHER, "protocol"},
	{NOT_UNWINDER, PYPROFD__ERROR_CODE__ERROR_LIMIT, EXIT_FAILURE_OTHER, "limit"},
};

static const struct {
	enum uw_mode mode;
	Pyprofd__Mode wire;
	const char *name;
} vocab_modes[] = {
	{UW_MODE_WALL, PYPROFD__MODE__MODE_WALL, "wall"},
	{UW_MODE_CPU, PYPROFD__MODE__MODE_CPU, "cpu"},
	{UW_MODE_GIL, PYPROFD__MODE__MODE_GIL, "gil"},
	{UW_MODE_EXCEPTION, PYPROFD__MODE__MODE_EXCEPTION, "exception"},
};

static const struct {
	enum uw_frame_kind kind;
	const char *name;
} vocab_kinds[] = {
	{UW_FRAME_PYTHON, "python"},
	{UW_FRAME_NATIVE, "native"},
	{UW_FRAME_GC, "gc"},
	{UW_FRAME_MOVING, "moving"},
	{UW_FRAME_C, "c"},
};

Pyprofd__ErrorCode vocab_status_code(enum uw_status status)
{
	for (size_t i = 0; i < COUNT(vocab_statuses); i++)
		if (vocab_statuses[i].status == (int)status)
			return vocab_statuses[i].code;
	return PYPROFD__ERROR_CODE__ERROR_INTERNAL;
}

enum exit_status vocab_status_exit(enum uw_status status)
{
	for (size_t i = 0; i < COUNT(vocab_statuses); i++)
		if (vocab_statuses[i].status == (int)status)
			return vocab_statuses[i].exit;
	return EXIT_FAILURE_OTHER;
}

enum exit_status vocab_code_exit(Pyprofd__ErrorCode code)
{
	/* The first row of a code: ERROR_INTERNAL is out of memory's and I/O's alike. */
	for (size_t i = 0; i < COUNT(vocab_statuses); i++)
		if (vocab_statuses[i].code == code && code != PYPROFD__ERROR_CODE__ERROR_UNSPECIFIED)
			return vocab_statuses[i].exit;
	return EXIT_FAILURE_OTHER;
}

const char *vocab_status_name(enum uw_status status)
{
	for (size_t i = 0; i < COUNT(vocab_statuses); i++)
		if (vocab_statuses[i].status == (int)status)
			return vocab_statuses[i].name;
	return "unknown error";
}

const char *vocab_mode_name(enum uw_mode mode)
{
	for (size_t i = 0; i < COUNT(vocab_modes); i++)
		if (vocab_modes[i].mode == mode)
			return vocab_modes[i].name;
	return "unknown";
}

const char *vocab_wire_mode_name(Pyprofd__Mode mode)
{
	for (size_t i = 0; i < COUNT(vocab_modes); i++)
		if (vocab_modes[i].wire == mode)
			return vocab_modes[i].name;
	return "unknown";
}

int vocab_mode_parse(const char *name, enum uw_mode *out)
{
	for (size_t i = 0; name && i < COUNT(vocab_modes); i++)
		if (strcmp(name, vocab_modes[i].name) == 0) {
			*out = vocab_modes[i].mode;
			return 0;
		}
	return -1;
}

int vocab_wire_mode_parse(const char *name, Pyprofd__Mode *out)
{
	enum uw_mode mode;
	if (vocab_mode_parse(name, &mode) != 0)
		return -1;
	*out = vocab_mode_to_wire(mode);
	return 0;
}

int vocab_mode_from_wire(Pyprofd__Mode wire, enum uw_mode *out)
{
	for (size_t i = 0; i < COUNT(vocab_modes); i++)
		if (vocab_modes[i].wire == wire) {
			*out = vocab_modes[i].mode;
			return 0;
		}
	return -1;
}

Pyprofd__Mode vocab_mode_to_wire(enum uw_mode mode)
{
	for (size_t i = 0; i < COUNT(vocab_modes); i++)
		if (vocab_modes[i].mode == mode)
			return vocab_modes[i].wire;
	return PYPROFD__MODE__MODE_WALL;
}

const char *vocab_kind_name(enum uw_frame_kind kind)
{
	for (size_t i = 0; i < COUNT(vocab_kinds); i++)
		if (vocab_kinds[i].kind == kind)
			return vocab_kinds[i].name;
	return "python";
}

enum uw_frame_kind vocab_kind_parse(const char *name)
{
	for (size_t i = 0; name && i < COUNT(vocab_kinds); i++)
		if (strcmp(name, vocab_kinds[i].name) == 0)
			return vocab_kinds[i].kind;
	return UW_FRAME_PYTHON;
}

static const struct {
	enum uw_async_mode mode;
	Pyprofd__AsyncMode wire;
	const char *name;
} vocab_async_modes[] = {
	{UW_ASYNC_OFF, PYPROFD__ASYNC_MODE__ASYNC_OFF, "off"},
	{UW_ASYNC_RUNNING, PYPROFD__ASYNC_MODE__ASYNC_RUNNING, "running"},
	{UW_ASYNC_ALL, PYPROFD__ASYNC_MODE__ASYNC_ALL, "all"},
};

const char *vocab_async_mode_name(enum uw_async_mode mode)
{
	for (size_t i = 0; i < COUNT(vocab_async_modes); i++)
		if (vocab_async_modes[i].mode == mode)
			return vocab_async_modes[i].name;
	return "unknown";
}

int vocab_async_mode_parse(const char *name, enum uw_async_mode *out)
{
	for (size_t i = 0; name && i < COUNT(vocab_async_modes); i++)
		if (strcmp(name, vocab_async_modes[i].name) == 0) {
			*out = vocab_async_modes[i].mode;
			return 0;
		}
	return -1;
}

Pyprofd__AsyncMode vocab_async_mode_to_wire(enum uw_async_mode mode)
{
	for (size_t i = 0; i < COUNT(vocab_async_modes); i++)
		if (vocab_async_modes[i].mode == mode)
			return vocab_async_modes[i].wire;
	return PYPROFD__ASYNC_MODE__ASYNC_OFF;
}

int vocab_async_mode_from_wire(Pyprofd__AsyncMode wire, enum uw_async_mode *out)
{
	for (size_t i = 0; i < COUNT(vocab_async_modes); i++)
		if (vocab_async_modes[i].wire == wire) {
			*out = vocab_async_modes[i].mode;
			return 0;
		}
	return -1;
}
