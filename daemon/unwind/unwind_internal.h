/*
 * The unwinder's internal interfaces, grouped by the file that owns them.
 * Nothing outside daemon/unwind includes this.
 */
#ifndef PYPROFD_UNWIND_INTERNAL_H
#define PYPROFD_UNWIND_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "layout.h"
#include "linetable.h"
#include "unwind.h"

/* An address in the target's address space: never dereferenced here. */
typedef uint64_t raddr_t;

/* error.c */
/* Set *err (if not NULL) and return -1, so failures read `return uw_fail(...)`. */
int uw_fail(struct uw_error *err, enum uw_status status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* remote.c */
/* The target's memory, and a count of what reading it cost. */
struct remote {
	pid_t pid;
	uint64_t calls;
	uint64_t bytes;
};

/*
 * Read exactly len bytes at addr.  A short read or EFAULT is UW_ECORRUPT
 * (a stale or garbage pointer), ESRCH UW_EGONE, EPERM UW_EPERM.
 */
int remote_read(struct remote *r, raddr_t addr, void *buf, size_t len, struct uw_error *err);

/* Little-endian field loads from a local copy of a remote struct. */
static inline uint64_t load_u64(const uint8_t *base, uint32_t off)
{
	uint64_t v;
	__builtin_memcpy(&v, base + off, sizeof v);
	return v;
}

static inline int32_t load_i32(const uint8_t *base, uint32_t off)
{
	int32_t v;
	__builtin_memcpy(&v, base + off, sizeof v);
	return v;
}

static inline uint32_t load_u32(const uint8_t *base, uint32_t off)
{
	uint32_t v;
	__builtin_memcpy(&v, base + off, sizeof v);
	return v;
}

/* proc.c */
struct proc_map {
	uint64_t start, end, offset;
	char perms[5];
	char *path; /* NULL for anonymous mappings */
};

struct proc_maps {
	struct proc_map *maps;
	size_t count;
};

/* Parse /proc/PID/maps (bounded). 0, or -1 and *err. */
int proc_maps_read(pid_t pid, struct proc_maps *out, struct uw_error *err);
void proc_maps_free(struct proc_maps *maps);

/* Path to open a file of the target's mount namespace: /proc/PID/root/PATH. */
void proc_root_path(pid_t pid, const char *path, char *buf, size_t len);

/* The kernel's one-letter state of a thread ('R', 'S', ...); '?' if unknown. */
char proc_thread_state(pid_t pid, pid_t tid);

/* The thread ids of a process (bounded by max). Count, or -1 if gone. */
int proc_tasks(pid_t pid, pid_t *tids, int max);

/* Whether a process still exists and is not a zombie. */
bool proc_alive(pid_t pid);

/* elf.c */
/* A symbol to look up; a name ending in '.' matches any suffix (local statics). */
struct elf_symbol {
	const char *name;
	uint64_t value; /* st_value, unrelocated */
	uint64_t size;
	bool found;     /* defined in this file */
};

struct elf_facts {
	uint64_t first_load_vaddr;   /* page-aligned p_vaddr of the PT_LOAD at offset 0 */
	uint64_t pyruntime_section;  /* sh_addr of .PyRuntime, 0 if none */
	bool is_elf;
};

/* Look the symbols up in .dynsym and .symtab. 0, or -1 and *err. */
int elf_lookup(const char *path, struct elf_symbol *syms, size_t nsyms,
               struct elf_facts *facts, struct uw_error *err);

/* pystr.c */
/*
 * Convert `count` code points of UCS kind 1, 2 or 4 to NUL-terminated UTF-8.
 * Surrogates and values past U+10FFFF become U+FFFD.  Returns the malloc'd
 * string, NULL on allocation failure.
 */
char *pystr_to_utf8(const uint8_t *data, size_t count, unsigned kind);

/* code.c */
/* What the unwinder keeps of one code object. */
struct code_info {
	raddr_t addr;
	uint8_t *header;          /* the layout.code.size bytes it was decoded from */
	char *name, *qualname, *file;
	int firstlineno;
	raddr_t bytecode;         /* first instruction, 3.11+ */
	struct line_table lines;
	uint64_t checked_gen;     /* snapshot generation it was last validated in */
};

/* Code objects by remote address. */
struct code_cache {
	struct code_info **slots;
	size_t cap;    /* power of two */
	size_t count;
};

void code_cache_init(struct code_cache *cache);
void code_cache_free(struct code_cache *cache);
/* Between snapshots only: strings handed out stay valid until the next one. */
void code_cache_trim(struct code_cache *cache);

/* target.c — the opened process; owns everything above. */
struct uw_target {
	pid_t pid;
	struct remote mem;
	struct py_layout layout;
	uint64_t version_hex;
	char version[32];
	char *runtime_file;
	raddr_t runtime;      /* &_PyRuntime in the target */
	raddr_t code_type;    /* &PyCode_Type */
	raddr_t unicode_type; /* &PyUnicode_Type */
	raddr_t bytes_type;   /* &PyBytes_Type */
	raddr_t frame_type;   /* &PyFrame_Type, to check heap frames (3.8-3.10) */
	int pthread_tid_offset; /* 3.8-3.10: where struct pthread keeps the tid; -1 unknown */
	struct code_cache codes;
	uint64_t snapshot_gen;
};

/* code.c */
/*
 * The decoded code object at addr, validated against the target this
 * snapshot: a freed and reused address is decoded again.  NULL and *err.
 */
const struct code_info *code_get(struct uw_target *t, raddr_t addr, struct uw_error *err);

/* Read a str object into a malloc'd UTF-8 string (bounded length). */
char *pyobj_read_str(struct uw_target *t, raddr_t addr, struct uw_error *err);

/* walk.c */
int walk_snapshot(struct uw_target *t, unsigned flags, struct uw_snapshot *out,
                  struct uw_error *err);

#endif
