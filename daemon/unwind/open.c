/*
 * An opened Python process: where its runtime is, which CPython it is, and
 * the layout to read it with.  Everything here is resolved once per open.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "native.h"
#include "unwind_internal.h"

/* Symbols the unwinder needs, in this order. */
enum {
	SYM_RUNTIME,
	SYM_PY_VERSION,
	SYM_CODE_TYPE,
	SYM_UNICODE_TYPE,
	SYM_BYTES_TYPE,
	SYM_FRAME_TYPE,
	SYM_VERSION_BUFFER, /* static char version[] in Py_GetVersion, 3.8-3.10 */
	SYM_API_3_10,       /* API functions first exported by a version tell the */
	SYM_API_3_9,        /* minor version of a build without Py_Version */
	SYM_API_3_8,
	SYM_API_ANY,        /* any CPython at all */
	SYM_COUNT
};

static void open_symbols(struct elf_symbol syms[SYM_COUNT])
{
	static const char *const names[SYM_COUNT] = {
		[SYM_RUNTIME] = "_PyRuntime",
		[SYM_PY_VERSION] = "Py_Version",
		[SYM_CODE_TYPE] = "PyCode_Type",
		[SYM_UNICODE_TYPE] = "PyUnicode_Type",
		[SYM_BYTES_TYPE] = "PyBytes_Type",
		[SYM_FRAME_TYPE] = "PyFrame_Type",
		[SYM_VERSION_BUFFER] = "version.",
		[SYM_API_3_10] = "Py_IsNone",
		[SYM_API_3_9] = "PyFrame_GetCode",
		[SYM_API_3_8] = "PyCode_NewWithPosOnlyArgs",
		[SYM_API_ANY] = "Py_Initialize",
	};
	/*
	 * What tells the version where Py_Version is missing (3.8-3.10), and
	 * whether a file without a runtime is an older Python, is needed only
	 * then, when the walk goes through every symbol anyway; with Py_Version
	 * (3.11+) it stops at the exported ones, before the static ones.
	 */
	for (int i = 0; i < SYM_COUNT; i++)
		syms[i] = (struct elf_symbol){.name = names[i],
		                              .spare = i >= SYM_VERSION_BUFFER};
}

static bool path_is_libpython(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	return strncmp(base, "libpython", 9) == 0 && strstr(base, ".so") != NULL;
}

/* The mapping at offset 0 of the file at path: where the file starts in memory. */
static const struct proc_map *maps_file_start(const struct proc_maps *maps, const char *path)
{
	for (size_t i = 0; i < maps->count; i++) {
		const struct proc_map *m = &maps->maps[i];
		if (m->path && m->offset == 0 && strcmp(m->path, path) == 0)
			return m;
	}
	return NULL;
}

static void version_format(uint64_t hex, char *buf, size_t len)
{
	unsigned major = (hex >> 24) & 0xff, minor = (hex >> 16) & 0xff, micro = (hex >> 8) & 0xff;
	unsigned level = (hex >> 4) & 0xf, serial = hex & 0xf;
	const char *tag = level == 0xa ? "a" : level == 0xb ? "b" : level == 0xc ? "rc" : "";
	if (*tag)
		snprintf(buf, len, "%u.%u.%u%s%u", major, minor, micro, tag, serial);
	else
		snprintf(buf, len, "%u.%u.%u", major, minor, micro);
}

/* "3.10.13 (main, ...)" or "3.10.0rc2 (...)" → hex, as Py_Version has it; 0 if it does not start with a version. */
static uint64_t version_parse(const char *s)
{
	unsigned major, minor, micro, serial = 0;
	int used = 0;
	if (sscanf(s, "%u.%u.%u%n", &major, &minor, &micro, &used) != 3 || major > 9 || minor > 99 ||
	    micro > 99)
		return 0;
	/* A pre-release: a, b or rc and its serial, as version_format writes them. */
	const char *tag = s + used;
	unsigned level = tag[0] == 'a' ? 0xa : tag[0] == 'b' ? 0xb : strncmp(tag, "rc", 2) == 0 ? 0xc : 0xf;
	if (level != 0xf && (sscanf(tag + (level == 0xc ? 2 : 1), "%u", &serial) != 1 || serial > 15)) {
		level = 0xf;
		serial = 0;
	}
	return ((uint64_t)major << 24) | ((uint64_t)minor << 16) | ((uint64_t)micro << 8) |
	       ((uint64_t)level << 4) | serial;
}

/* Which CPython the runtime at t->runtime is, and the layout to read it with. */
/*
 * 3.13+: the runtime describes itself.  1 and the layout when _PyRuntime
 * starts with _Py_DebugOffsets, 0 when it does not, -1 and *err.
 */
static int open_debug_layout(struct uw_target *t, struct uw_error *err)
{
	uint8_t head[24];
	if (remote_read(&t->mem, t->runtime, head, sizeof head, err) != 0)
		return -1;
	if (memcmp(head, "xdebugpy", 8) == 0) {
		t->version_hex = load_u64(head, 8);
		version_format(t->version_hex, t->version, sizeof t->version);
		size_t size = layout_debug_offsets_size(t->version_hex);
		if (size == 0)
			return uw_fail(err, UW_EVERSION, "process %d runs Python %s, which is not "
			               "supported (3.8 to 3.15 are)", (int)t->pid, t->version);
		uint8_t *raw = malloc(size);
		if (!raw)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		int rc = remote_read(&t->mem, t->runtime, raw, size, err);
		if (rc == 0 && layout_from_debug_offsets(raw, size, &t->layout) != 0)
			rc = uw_fail(err, UW_ECORRUPT, "Python %s: unreadable _Py_DebugOffsets", t->version);
		free(raw);
		return rc == 0 ? 1 : -1;
	}
	return 0;
}

static int open_resolve_version(struct uw_target *t, const struct elf_symbol *syms,
                                uint64_t bias, struct uw_error *err)
{
	int described = open_debug_layout(t, err);
	if (described != 0)
		return described < 0 ? -1 : 0;

	unsigned minor = 0;
	if (syms[SYM_PY_VERSION].found) {
		uint8_t v[4];
		if (remote_read(&t->mem, bias + syms[SYM_PY_VERSION].value, v, 4, err) != 0)
			return -1;
		t->version_hex = load_u32(v, 0);
		version_format(t->version_hex, t->version, sizeof t->version);
		minor = (t->version_hex >> 16) & 0xff;
	} else {
		minor = syms[SYM_API_3_10].found  ? 10
		        : syms[SYM_API_3_9].found ? 9
		        : syms[SYM_API_3_8].found ? 8
		                                  : 7;
		t->version_hex = 0x03000000ULL | ((uint64_t)minor << 16);
		snprintf(t->version, sizeof t->version, "3.%u", minor);
		/*
		 * Py_GetVersion() fills a static buffer as the interpreter starts
		 * (sys.version): the exact version.  Empty, the interpreter has not
		 * got that far yet; opening it now would name it "3.8", then
		 * "3.8.18" once opened again, so it is refused as not ready, and
		 * the fleet tries again.  Only a build without the symbol is named
		 * by its minor version alone.
		 */
		const struct elf_symbol *vb = &syms[SYM_VERSION_BUFFER];
		char buf[64];
		if (vb->found && vb->size >= sizeof buf) {
			if (remote_read(&t->mem, bias + vb->value, buf, sizeof buf, err) != 0)
				return -1;
			buf[sizeof buf - 1] = '\0';
			uint64_t hex = version_parse(buf);
			if (!hex && !buf[0])
				return uw_fail(err, UW_ENOTPYTHON, "process %d: Python 3.%u is still starting "
				               "(its version is not written yet)", (int)t->pid, minor);
			if (hex && ((hex >> 16) & 0xff) == minor) {
				t->version_hex = hex;
				version_format(hex, t->version, sizeof t->version);
			}
		}
	}
	const struct py_layout *layout = layout_for_minor(minor);
	if ((t->version_hex >> 24) != 3 || !layout)
		return uw_fail(err, UW_EVERSION, "process %d runs Python %s, which is not supported "
		               "(3.8 to 3.15 are)", (int)t->pid, t->version);
	t->layout = *layout;
	return 0;
}

/* The walk reads datastack_top beside datastack_chunk: make the thread-state read cover it. */
static void open_fit_layout(struct py_layout *L)
{
	uint32_t off = L->tstate.datastack_chunk;
	if (off != LAYOUT_ABSENT && L->tstate.size < off + 16)
		L->tstate.size = off + 16;
}

/* Find the ELF file holding _PyRuntime among the executable and libpython. */
static int open_find_runtime(struct uw_target *t, const struct proc_maps *maps,
                             struct uw_error *err)
{
	const struct proc_map *candidates[2] = {NULL, NULL};
	for (size_t i = 0; i < maps->count && !candidates[0]; i++)
		if (maps->maps[i].path && path_is_libpython(maps->maps[i].path))
			candidates[0] = maps_file_start(maps, maps->maps[i].path);
	/* /proc/PID/exe reads as maps does, from the same root. */
	char exe[4096];
	char link[64];
	snprintf(link, sizeof link, "/proc/%d/exe", (int)t->pid);
	ssize_t n = readlink(link, exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *del = strstr(exe, " (deleted)");
		if (del)
			*del = '\0';
		candidates[1] = maps_file_start(maps, exe);
	}
	if (!candidates[1] && maps->count && maps->maps[0].path && maps->maps[0].offset == 0)
		candidates[1] = &maps->maps[0];

	bool saw_python = false;
	for (int c = 0; c < 2; c++) {
		const struct proc_map *m = candidates[c];
		if (!m)
			continue;
		struct elf_symbol syms[SYM_COUNT];
		struct elf_facts facts;
		open_symbols(syms);
		int fd = proc_map_open(t->pid, m, err);
		if (fd < 0)
			return -1;
		int rc = elf_lookup(fd, syms, SYM_COUNT, &facts, err);
		close(fd);
		if (rc != 0)
			return -1;
		saw_python |= syms[SYM_API_ANY].found;
		uint64_t runtime = syms[SYM_RUNTIME].found ? syms[SYM_RUNTIME].value
		                                          : facts.pyruntime_section;
		if (!runtime)
			continue;
		uint64_t bias = m->start - facts.first_load_vaddr;
		if (!syms[SYM_CODE_TYPE].found || !syms[SYM_UNICODE_TYPE].found ||
		    !syms[SYM_BYTES_TYPE].found)
			return uw_fail(err, UW_ENOTPYTHON, "%s has _PyRuntime but no type objects",
			               m->path);
		t->runtime = bias + runtime;
		t->code_type = bias + syms[SYM_CODE_TYPE].value;
		t->unicode_type = bias + syms[SYM_UNICODE_TYPE].value;
		t->bytes_type = bias + syms[SYM_BYTES_TYPE].value;
		t->frame_type = syms[SYM_FRAME_TYPE].found ? bias + syms[SYM_FRAME_TYPE].value : 0;
		t->runtime_file = strdup(m->path);
		if (!t->runtime_file)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		if (open_resolve_version(t, syms, bias, err) != 0)
			return -1;
		open_fit_layout(&t->layout);
		return 0;
	}
	if (saw_python)
		return uw_fail(err, UW_EVERSION,
		               "process %d runs a Python older than 3.8 (3.8 to 3.15 are supported)",
		               (int)t->pid);
	return uw_fail(err, UW_ENOTPYTHON,
	               "process %d is not a Python process (no CPython runtime in %s)", (int)t->pid,
	               candidates[1] ? candidates[1]->path : "its executable");
}

/* A target with nothing resolved yet; NULL and *err. */
static struct uw_target *open_new_target(pid_t pid, struct uw_error *err)
{
	struct uw_target *t = calloc(1, sizeof *t);
	if (!t) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	t->still.look_proc = -1;
	t->still.copy_slot = -1;
	t->pid = pid;
	t->mem.pid = pid;
	t->pthread_tid_offset = -1;
	t->opts.cache_budget = UW_DEFAULT_CACHE_BUDGET;
	code_cache_init(&t->codes);
	if (intern_init(&t->intern) != 0) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		uw_close(t);
		return NULL;
	}
	return t;
}

struct uw_target *uw_open_image(const struct uw_image_target *it, struct uw_error *err)
{
	/* No process: pid -1 names none, so nothing of /proc is mistaken for the image's. */
	struct uw_target *t = open_new_target(-1, err);
	if (!t)
		return NULL;
	t->mem.image = it->image;
	t->runtime = it->runtime;
	t->code_type = it->code_type;
	t->unicode_type = it->unicode_type;
	t->bytes_type = it->bytes_type;
	t->frame_type = it->frame_type;
	t->objtypes = (struct pyobj_types){.dict = it->dict_type, .long_ = it->long_type, .tuple = it->tuple_type,
	                                   .contextvar = it->contextvar_type, .looked = true};
	if (it->otel_tp_offset) {
		t->otel.tls = OTEL_TLS_STATIC;
		t->otel.tp_offset = it->otel_tp_offset;
	}
	t->runtime_file = strdup("(memory image)");
	int described = t->runtime_file ? open_debug_layout(t, err) : -1;
	const struct py_layout *layout = layout_for_minor(it->minor);
	if (described == 0 && layout) {
		t->layout = *layout;
		t->version_hex = 0x030000f0ULL | ((uint64_t)it->minor << 16);
		version_format(t->version_hex, t->version, sizeof t->version);
	} else if (described == 0) {
		uw_fail(err, UW_EVERSION, "no layout for Python 3.%u", it->minor);
		described = -1;
	}
	if (described < 0) {
		if (!t->runtime_file)
			uw_fail(err, UW_ENOMEM, "out of memory");
		uw_close(t);
		return NULL;
	}
	open_fit_layout(&t->layout);
	return t;
}

struct uw_target *uw_open(pid_t pid, struct uw_error *err)
{
	if (pid <= 0) {
		uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
		return NULL;
	}
	if (kill(pid, 0) != 0 && errno == ESRCH) {
		uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
		return NULL;
	}
	/* The unwinder's own process runs no Python: said at once, not after reading all its symbols. */
	if (pid == getpid()) {
		uw_fail(err, UW_ENOTPYTHON, "process %d is not a Python process (it is this pyprofd)",
		        (int)pid);
		return NULL;
	}
	struct uw_target *t = open_new_target(pid, err);
	if (!t)
		return NULL;

	struct proc_maps maps;
	if (proc_maps_read(pid, &maps, err) != 0) {
		uw_close(t);
		return NULL;
	}
	int rc = open_find_runtime(t, &maps, err);
	proc_maps_free(&maps);
	t->pid_namespace_nested = proc_pid_namespace_nested(pid);
	if (rc != 0) {
		/* A process that died while we looked is "gone", whatever failed first. */
		if (err && err->status != UW_EVERSION && err->status != UW_EPERM &&
		    proc_life(pid) == PROC_GONE)
			uw_fail(err, UW_ENOPROC, "no process with pid %d", (int)pid);
		uw_close(t);
		return NULL;
	}
	return t;
}

void uw_close(struct uw_target *t)
{
	if (!t)
		return;
	code_cache_free(&t->codes);
	intern_free(&t->intern);
	threads_free(t);
	still_free(t);
	tasks_free(t);
	context_free(t);
	otel_free(t);
	native_free(t);
	walk_free(t);
	view_free(t);
	free(t->runtime_file);
	free(t);
}

pid_t uw_pid(const struct uw_target *t)
{
	return t->pid;
}

const char *uw_version(const struct uw_target *t)
{
	return t->version;
}

uint64_t uw_version_hex(const struct uw_target *t)
{
	return t->version_hex;
}

const char *uw_runtime_file(const struct uw_target *t)
{
	return t->runtime_file;
}

void uw_configure(struct uw_target *t, const struct uw_options *options)
{
	/* Watches, and the kernel's looks at threads, belong to the reader that set them. */
	if (options->kreader != t->opts.kreader) {
		for (uint32_t i = 0; i < t->nthreads; i++) {
			threads_unwatch(t, &t->threads[i]);
			threads_still_end(t, &t->threads[i]);
		}
		still_free(t);
		t->kstill_looked = 0;
		t->look = NULL;
	}
	/* Shots belong to the copier that watched for them. */
	if (options->native != t->opts.native)
		for (uint32_t i = 0; i < t->nthreads; i++)
			native_forget(t, &t->threads[i]);
	/* The files kept open are charged to the budget given now. */
	if (options->fd_budget != t->opts.fd_budget) {
		if (t->opts.fd_budget)
			t->opts.fd_budget->used -= t->stat_fds;
		if (options->fd_budget)
			options->fd_budget->used += t->stat_fds;
	}
	struct uw_options old = t->opts;
	t->opts = *options;
	context_configured(t, &old);
	otel_configured(t);
	if (!t->opts.cache_budget)
		t->opts.cache_budget = UW_DEFAULT_CACHE_BUDGET;
}

void uw_options_get(const struct uw_target *t, struct uw_options *out)
{
	*out = t->opts;
}

void uw_stats(const struct uw_target *t, struct uw_stats *out)
{
	*out = t->stats;
}
