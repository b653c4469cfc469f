/*
 * The unwinder's reach into a target: its memory (error.c, remote.c), its
 * /proc files (proc.c), its ELF files (elf.c) and its str objects
 * (pystr.c).  Internal to daemon/unwind, through unwind_internal.h.
 */
#ifndef PYPROFD_UNWIND_MEMORY_H
#define PYPROFD_UNWIND_MEMORY_H

#include <dirent.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "kstill_abi.h"
#include "layout.h"
#include "prove.h"
#include "remote_range.h"
#include "unwind.h"

/* An address in the target's address space (prove.h names it): never dereferenced here. */


/* remote.c */
/* A piece of a memory image: what addr..addr+len holds. */
struct remote_segment {
	raddr_t addr;
	const uint8_t *bytes;
	size_t len;
};

/*
 * Memory to read instead of a process's: the unwinder's walk and decoders
 * run on crafted bytes (tests, fuzzing); a read outside the segments fails
 * as a stale pointer does.
 */
struct remote_image {
	const struct remote_segment *segments;
	size_t n;
};

/* The target's memory, and a count of what reading it cost. */
struct remote {
	pid_t pid;
	const struct remote_image *image; /* when set, read instead of the process */
	uint64_t calls;
	uint64_t bytes;
	uint64_t pages;  /* pages the reads touched (the kernel pins each) */
	uint64_t read_ns; /* time in process_vm_readv */
	uint64_t writes;
	uint64_t wrote_ns; /* when a write last returned (unwind_now_ns): a copy begun before may be stale */
};

/*
 * Whether the memory may still be there: false only when the process is
 * known to be gone (an image always is there).
 */
bool remote_alive(const struct remote *r);
/* The same by kill(2) alone, for a retry of a torn read: a zombie passes (its next read fails as gone). */
bool remote_may_live(const struct remote *r);

/*
 * Read exactly len bytes at addr.  A short read or EFAULT is UW_ECORRUPT
 * (a stale or garbage pointer), ESRCH UW_EGONE, EPERM UW_EPERM.
 */
int remote_read(struct remote *r, raddr_t addr, void *buf, size_t len, struct uw_error *err);
/* Pages a read of len bytes at addr touches: the kernel pins each one. */
uint64_t remote_pages(raddr_t addr, size_t len);

/*
 * Write len bytes at addr (process_vm_writev).  The one caller writes the
 * frame-cache marker of a validated 3.15 layout; an image is never written.
 */
int remote_write(struct remote *r, raddr_t addr, const void *buf, size_t len, struct uw_error *err);


/*
 * Read many ranges in as few process_vm_readv calls as the kernel allows
 * (IOV_MAX ranges a call).  A range that faults is left short (`got`) and the
 * rest are still read.  -1 only when the process is gone or unreadable.
 */
int remote_read_batch(struct remote *r, struct remote_range *ranges, uint32_t n,
                      struct uw_error *err);

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

static inline uint16_t load_u16(const uint8_t *base, uint32_t off)
{
	uint16_t v;
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
	dev_t dev;      /* of the file mapped, as the kernel lists it */
	uint64_t inode;
	char perms[5];
	char *path; /* NULL for anonymous mappings */
};

struct proc_maps {
	struct proc_map *maps;
	size_t count;
};

/* Whether n more /proc files may be kept open: the target's bound and the shared budget. */
bool proc_fds_room(const struct uw_target *t, unsigned n);
/* n files kept open (n < 0: closed), counted against both. */
void proc_fds_add(struct uw_target *t, int n);

/* Parse /proc/PID/maps (bounded). 0, or -1 and *err. */
int proc_maps_read(pid_t pid, struct proc_maps *out, struct uw_error *err);
void proc_maps_free(struct proc_maps *maps);

/*
 * Open the file a mapping of process pid maps (whatever root or mount
 * namespace it runs in), checked to be that file.  A descriptor, or -1 and *err.
 */
int proc_map_open(pid_t pid, const struct proc_map *m, struct uw_error *err);

/* The kernel's one-letter state of a thread ('R', 'S', ...); '?' if unknown. */
char proc_thread_state(pid_t pid, pid_t tid);

/*
 * The thread ids of a process (bounded by max), as this /proc numbers them,
 * and with own_tids each as its own pid namespace does.  Count, or -1 with errno.
 */
int proc_tasks(pid_t pid, pid_t *tids, pid_t *own_tids, int max);

/* Bytes of a thread's schedstat line kept (three decimal numbers). */
#define PROC_SCHED_LINE 64
/* A thread's schedstat line, read again through its descriptor: its length, 0 if unread. */
uint32_t proc_sched_line(int fd, char line[PROC_SCHED_LINE]);
/*
 * Whether a schedstat line can prove a thread still: it counts the times
 * the thread was put on a CPU (a kernel without CONFIG_SCHED_INFO reads
 * "0 0 0").  Only lines that do are kept to compare later ones with.
 */
bool proc_sched_line_counts(const char *line, uint32_t len);

/*
 * Whether the process lives in a pid namespace below this /proc's (a
 * container): then the thread ids it keeps in its memory are not /proc's.
 */
bool proc_pid_namespace_nested(pid_t pid);

/*
 * Whether a process still runs (a zombie is gone), or could not be looked
 * at (out of descriptors, ...): then nothing is known of it.
 */
enum proc_life { PROC_LIVES, PROC_GONE, PROC_UNSEEN };
enum proc_life proc_life(pid_t pid);

/* elf.c */
/* A symbol to look up; a name ending in '.' matches any suffix (local statics). */
struct elf_symbol {
	const char *name;
	uint64_t value; /* st_value, unrelocated */
	uint64_t size;
	bool found;     /* defined in this file */
	bool spare;     /* wanted only if met: the walk stops once every other one is found */
};

struct elf_facts {
	uint64_t first_load_vaddr;   /* page-aligned p_vaddr of the PT_LOAD at offset 0 */
	uint64_t pyruntime_section;  /* sh_addr of .PyRuntime, 0 if none */
	uint64_t asyncio_debug_section; /* sh_addr of .AsyncioDebug (3.14+ _asyncio), 0 if none */
	bool is_elf;
};

/* Look the symbols up in .dynsym and .symtab of the file open at fd. 0, or -1 and *err. */
int elf_lookup(int fd, struct elf_symbol *syms, size_t nsyms, struct elf_facts *facts,
               struct uw_error *err);

/*
 * How a module's thread-local variable is reached (elf_tls_find), x86-64:
 * the GOT slot the loader fills for it (a TLS descriptor, an offset from
 * the thread pointer, or a module id and offset), or, for an executable's
 * own variable, its place in the block below the thread pointer.
 */
enum elf_tls_access { ELF_TLS_NONE, ELF_TLS_EXEC, ELF_TLS_DTPMOD, ELF_TLS_TPOFF, ELF_TLS_DESC };
struct elf_tls {
	enum elf_tls_access access;
	uint64_t slot;             /* the slot's vaddr, unrelocated */
	uint64_t value;            /* the symbol's offset in the module's block */
	uint64_t block_size, block_align; /* PT_TLS */
	uint64_t first_load_vaddr; /* as elf_facts' */
};
/* The defined thread-local `name` of the file open at fd: out->access NONE when not there. 0, or -1 and *err. */
int elf_tls_find(int fd, const char *name, struct elf_tls *out, struct uw_error *err);

/* pystr.c */
/*
 * Convert `count` code points of UCS kind 1, 2 or 4 to NUL-terminated UTF-8.
 * Surrogates and values past U+10FFFF become U+FFFD.  Returns the malloc'd
 * string, NULL on allocation failure.
 */
char *pystr_to_utf8(const uint8_t *data, size_t count, unsigned kind);
/* The same into out (cap bytes, the NUL included), cut at a whole character. */
void pystr_to_utf8_into(const uint8_t *data, size_t count, unsigned kind, char *out, size_t cap);

#endif
