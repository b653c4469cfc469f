/*
 * C frames from a copy: a thread's registers and the top of its stack, as
 * the kernel copied them while the thread waited (kernel/knative.c), are
 * unwound by elfutils' libdwfl with the CFI of each module (.eh_frame,
 * which Debian's and pyenv's builds keep, frame pointers or not).  Nothing
 * is read of the thread but the copy: a walk that needs more of the stack
 * ends there, marked.
 *
 * A step is taken only from a frame whose code has CFI.  libdwfl would
 * otherwise guess the caller from the frame pointer, and code built
 * without one gives a wrong caller: such a walk ends at that frame with a
 * marker instead.
 *
 * Symbols come from the module's own .symtab, .dynsym and MiniDebugInfo
 * (.gnu_debugdata); separate debug files are not looked for, so what is
 * shown does not depend on what else the host has installed.  The modules
 * and their symbol tables are kept with the target, so a warm target does
 * no symbol work but a lookup; a frame is interned once an epoch by its
 * address (the walk's cache below).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <elfutils/libdwfl.h>

#include "kernel/kernel.h"
#include "native.h"
#include "unwind_internal.h"

/* The DWARF numbers of x86-64's frame pointer, stack pointer and return address. */
#define NATIVE_DWARF_BP 6
#define NATIVE_DWARF_SP 7
#define NATIVE_DWARF_RA 16

/* The evaluation loop's C function: where a segment of Python frames runs. */
#define NATIVE_EVAL_SYMBOL "_PyEval_EvalFrameDefault"

/* Addresses whose frames are interned, kept per target: a warm walk looks up, not symbolises. */
#define NATIVE_PC_SLOTS 1024u

/* Modules whose symbol tables a target keeps at hand; past them a table is found by its build id again. */
#define NATIVE_MODULES_KEPT 64u

/* How a register of the caller is found, by a frame's CFI. */
enum native_how {
	NATIVE_SAME,      /* the frame kept it */
	NATIVE_UNDEFINED, /* lost (the return address: the thread's first frame) */
	NATIVE_AT_CFA,    /* saved at the canonical frame address plus an offset */
};

/*
 * A frame's CFI at one address, as the walk below follows it: the CFA is a
 * register (the stack or frame pointer) plus an offset, and the return
 * address and frame pointer are kept, lost or saved at the CFA plus an
 * offset.  What the CFI says otherwise (an expression, a signal frame) is
 * left to libdwfl's own walk.
 */
enum native_rule_kind { NATIVE_RULE_SIMPLE, NATIVE_RULE_COMPLEX, NATIVE_RULE_NONE };
struct native_rule {
	uint8_t kind;     /* enum native_rule_kind; NONE: no CFI, the caller would be a guess */
	uint8_t cfa_reg;  /* NATIVE_DWARF_SP or NATIVE_DWARF_BP */
	uint8_t ra_how, bp_how;
	int32_t cfa_off, ra_off, bp_off;
};

struct native_pc {
	uint64_t pc;     /* the address looked up (a return address less one); 0 empty */
	uint32_t frame;
	bool eval;
	struct native_rule rule;
	uint32_t epoch;  /* the intern epoch the frame id belongs to */
	uint32_t listing; /* the modules' listing it was looked up in */
};

struct native_state {
	Dwfl *dwfl;
	bool attached;
	const struct knative_thread *copy; /* the walk under way */
	pid_t pid, tid;
	struct native_pc pcs[NATIVE_PC_SLOTS];
	uint32_t listing;  /* times the modules were listed: an address's module may change with it */
	/* Each module's symbols, found by its build id once a listing. */
	struct {
		Dwfl_Module *mod;
		const struct native_symbols *symbols;
	} tables[NATIVE_MODULES_KEPT];
	uint32_t ntables;
	/* A sample's working room, kept: a steady sample allocates nothing. */
	uint32_t *ids;
	size_t ids_cap;
	struct native_frame frames[NATIVE_MAX_FRAMES];
};

/* The target's walker, made at its first use. */
static struct native_state *native_state_of(struct uw_target *t, struct uw_error *err)
{
	if (!t->native && !(t->native = calloc(1, sizeof *t->native)))
		uw_fail(err, UW_ENOMEM, "out of memory");
	return t->native;
}

uint32_t *native_room(struct uw_target *t, size_t n, struct native_frame **frames, struct uw_error *err)
{
	struct native_state *ns = native_state_of(t, err);
	if (!ns || array_reserve((void **)&ns->ids, &ns->ids_cap, n, sizeof *ns->ids, NULL)) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	*frames = ns->frames;
	return ns->ids;
}

struct uw_native *uw_native_open(bool shots, struct uw_error *err)
{
#ifndef __x86_64__
	/* The registers copied and their DWARF numbers are x86-64's. */
	uw_fail(err, UW_EVERSION, "native frames are read on x86-64 only");
	return NULL;
#endif
	struct uw_native *n = calloc(1, sizeof *n);
	if (!n) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	if (!(n->kn = knative_open(err))) {
		free(n);
		return NULL;
	}
	if (shots)
		n->shots = kshot_open(&n->shots_err);
	else
		uw_fail(&n->shots_err, UW_EPERM, "off");
	return n;
}

const char *uw_native_shots_refused(const struct uw_native *n)
{
	return n && !n->shots ? n->shots_err.msg : NULL;
}

void uw_native_close(struct uw_native *n)
{
	if (!n)
		return;
	kshot_close(n->shots);
	knative_close(n->kn);
	native_symbols_free(n);
	free(n);
}

struct knative *native_copier(const struct uw_native *native)
{
	return native ? native->kn : NULL;
}

/* No separate debug files: a frame's symbol is what the module itself holds. */
static int native_no_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                               const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
                               char **debuginfo_file_name)
{
	(void)mod, (void)userdata, (void)modname, (void)base, (void)file_name;
	(void)debuglink_file, (void)debuglink_crc;
	*debuginfo_file_name = NULL;
	return -1;
}

/*
 * A module's file as the process sees it, through its root: a target in a
 * container or chroot names files of its own, not the daemon's.  A module
 * with no path of its own (the vDSO) is libdwfl's to find.  Each module's
 * userdata is its walker's state (native_report).
 */
static int native_find_elf(Dwfl_Module *mod, void **userdata, const char *module_name, Dwarf_Addr base,
                           char **file_name, Elf **elfp)
{
	const struct native_state *ns = *userdata;
	if (ns && module_name[0] == '/') {
		char path[PATH_MAX];
		int len = snprintf(path, sizeof path, "/proc/%d/root%s", (int)ns->pid, module_name);
		int fd = len > 0 && (size_t)len < sizeof path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
		if (fd >= 0) {
			*file_name = strdup(path);
			*elfp = NULL;
			return fd;
		}
	}
	return dwfl_linux_proc_find_elf(mod, userdata, module_name, base, file_name, elfp);
}

static const Dwfl_Callbacks native_modules = {
	.find_elf = native_find_elf,
	.find_debuginfo = native_no_debuginfo,
};

static pid_t native_next_thread(Dwfl *dwfl, void *arg, void **thread_arg)
{
	(void)dwfl;
	struct native_state *ns = arg;
	if (*thread_arg)
		return 0;
	*thread_arg = ns;
	return ns->tid;
}

static bool native_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_arg)
{
	(void)dwfl;
	struct native_state *ns = arg;
	*thread_arg = ns;
	return tid == ns->tid;
}

/* Only the copy is read: the thread may run again by now, and its live stack is not the copy's. */
static bool native_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	(void)dwfl;
	const struct knative_thread *c = ((struct native_state *)arg)->copy;
	/* Below the stack pointer is not the stack's: the page's bytes there are of no frame. */
	if (addr < c->regs[KNATIVE_SP] || addr - c->base > c->len || c->len - (addr - c->base) < sizeof *result)
		return false;
	memcpy(result, c->stack + (addr - c->base), sizeof *result);
	return true;
}

/* The x86-64 DWARF numbers of the registers copied (the psABI's table). */
static bool native_initial_registers(Dwfl_Thread *thread, void *arg)
{
	const struct knative_thread *c = ((struct native_state *)arg)->copy;
	Dwarf_Word bx = c->regs[KNATIVE_BX];
	Dwarf_Word bp_sp[2] = {c->regs[KNATIVE_BP], c->regs[KNATIVE_SP]};
	Dwarf_Word r12_15[4] = {c->regs[KNATIVE_R12], c->regs[KNATIVE_R13], c->regs[KNATIVE_R14],
	                        c->regs[KNATIVE_R15]};
	if (!dwfl_thread_state_registers(thread, 3, 1, &bx) || !dwfl_thread_state_registers(thread, 6, 2, bp_sp) ||
	    !dwfl_thread_state_registers(thread, 12, 4, r12_15))
		return false;
	dwfl_thread_state_register_pc(thread, c->regs[KNATIVE_IP]);
	return true;
}

static const Dwfl_Thread_Callbacks native_threads = {
	.next_thread = native_next_thread,
	.get_thread = native_get_thread,
	.memory_read = native_memory_read,
	.set_initial_registers = native_initial_registers,
};

/* Each module's files are looked for through its process's root: the module knows its walker. */
static int native_module_owner(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr start, void *arg)
{
	(void)mod, (void)name, (void)start;
	*userdata = arg;
	return DWARF_CB_OK;
}

/* The process's modules, listed (again) from its maps, and the walker attached to them. */
static int native_report(struct uw_target *t, struct native_state *ns, struct uw_error *err)
{
	if (ns->dwfl)
		dwfl_end(ns->dwfl);
	ns->attached = false;
	if (!(ns->dwfl = dwfl_begin(&native_modules)))
		return uw_fail(err, UW_ENOMEM, "native frames: %s", dwfl_errmsg(-1));
	ns->listing++;
	ns->ntables = 0;
	dwfl_report_begin(ns->dwfl);
	int rc = dwfl_linux_proc_report(ns->dwfl, t->pid);
	if (dwfl_report_end(ns->dwfl, NULL, NULL) != 0 || rc != 0)
		return uw_fail(err, rc > 0 && rc == ESRCH ? UW_EGONE : UW_EIO,
		               "native frames: the process's modules cannot be listed (%s)",
		               rc > 0 ? strerror(rc) : dwfl_errmsg(-1));
	ns->pid = t->pid;
	dwfl_getmodules(ns->dwfl, native_module_owner, ns, 0);
	if (!dwfl_attach_state(ns->dwfl, NULL, t->pid, &native_threads, ns))
		return uw_fail(err, UW_EIO, "native frames: %s", dwfl_errmsg(-1));
	ns->attached = true;
	return 0;
}

/* A register's rule as the walk follows it: false when it is an expression. */
static bool native_how_of(const Dwarf_Op *ops, size_t nops, const Dwarf_Op *ops_mem, uint8_t *how, int32_t *off)
{
	*off = 0;
	if (nops == 0) {
		*how = ops == ops_mem ? NATIVE_UNDEFINED : NATIVE_SAME;
		return true;
	}
	if (ops[0].atom != DW_OP_call_frame_cfa)
		return false;
	*how = NATIVE_AT_CFA;
	if (nops == 1)
		return true;
	if (nops == 2 && ops[1].atom == DW_OP_plus_uconst) {
		*off = (int32_t)(int64_t)ops[1].number;
		return true;
	}
	if (nops == 3 && ops[1].atom == DW_OP_consts && ops[2].atom == DW_OP_plus) {
		*off = (int32_t)(int64_t)ops[1].number;
		return true;
	}
	return false;
}

/* The CFI of a code address, in its module's .eh_frame or .debug_frame. */
static struct native_rule native_rule_at(Dwfl_Module *mod, uint64_t pc)
{
	struct native_rule rule = {.kind = NATIVE_RULE_NONE};
	Dwarf_Addr bias;
	Dwarf_Frame *frame = NULL;
	Dwarf_CFI *cfi = dwfl_module_eh_cfi(mod, &bias);
	if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &frame) != 0) {
		cfi = dwfl_module_dwarf_cfi(mod, &bias);
		if (!cfi || dwarf_cfi_addrframe(cfi, pc - bias, &frame) != 0)
			return rule;
	}
	rule.kind = NATIVE_RULE_COMPLEX;
	Dwarf_Op *ops, ra_mem[3], bp_mem[3];
	size_t nops;
	bool signal = false;
	Dwarf_Addr start, end;
	if (dwarf_frame_info(frame, &start, &end, &signal) < 0 || signal ||
	    dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops != 1)
		goto out;
	unsigned reg;
	int64_t off;
	if (ops[0].atom == DW_OP_bregx) {
		reg = (unsigned)ops[0].number;
		off = (int64_t)ops[0].number2;
	} else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
		reg = ops[0].atom - DW_OP_breg0;
		off = (int64_t)ops[0].number;
	} else {
		goto out;
	}
	if ((reg != NATIVE_DWARF_SP && reg != NATIVE_DWARF_BP) || off < INT32_MIN || off > INT32_MAX)
		goto out;
	rule.cfa_reg = (uint8_t)reg;
	rule.cfa_off = (int32_t)off;
	Dwarf_Op *ra_ops, *bp_ops;
	size_t ra_n, bp_n;
	if (dwarf_frame_register(frame, NATIVE_DWARF_RA, ra_mem, &ra_ops, &ra_n) != 0 ||
	    !native_how_of(ra_ops, ra_n, ra_mem, &rule.ra_how, &rule.ra_off) ||
	    dwarf_frame_register(frame, NATIVE_DWARF_BP, bp_mem, &bp_ops, &bp_n) != 0 ||
	    !native_how_of(bp_ops, bp_n, bp_mem, &rule.bp_how, &rule.bp_off) || rule.ra_how == NATIVE_SAME)
		goto out;
	rule.kind = NATIVE_RULE_SIMPLE;
out:
	free(frame);
	return rule;
}

/* A module's symbols: the copier's table of its build id, kept at hand for the target's next frames. */
static const struct native_symbols *native_module_symbols(struct uw_target *t, Dwfl_Module *mod)
{
	struct native_state *ns = t->native;
	for (uint32_t i = 0; i < ns->ntables; i++)
		if (ns->tables[i].mod == mod)
			return ns->tables[i].symbols;
	const struct native_symbols *symbols = t->opts.native ? native_symbols_of(t->opts.native, mod) : NULL;
	if (symbols && ns->ntables < NATIVE_MODULES_KEPT) {
		ns->tables[ns->ntables].mod = mod;
		ns->tables[ns->ntables++].symbols = symbols;
	}
	return symbols;
}

/*
 * The interned frame of a code address: its symbol and module, or where it
 * has no symbol, its address in the module's file (a clear "[+0x…]", never
 * the nearest name).
 */
static int native_frame_of(struct uw_target *t, Dwfl_Module *mod, uint64_t pc, struct native_pc *out,
                           struct uw_error *err)
{
	Dwarf_Addr start = 0;
	/* The path the process maps it by, not where it was opened from (its root, through /proc). */
	const char *path = dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, NULL, NULL);
	if (!path)
		path = "";
	/* The address in the file, as the symbols, addr2line and objdump take it. */
	Dwarf_Addr bias = 0;
	if (!dwfl_module_getelf(mod, &bias))
		bias = start;
	const struct native_symbols *symbols = native_module_symbols(t, mod);
	uint64_t at = pc - bias;
	const char *name = symbols ? native_symbols_find(symbols, pc - bias, &at) : NULL;
	char unnamed[32];
	if (!name) {
		at = pc - bias;
		snprintf(unnamed, sizeof unnamed, "[+0x%llx]", (unsigned long long)at);
		name = unnamed;
	}
	/* The address the frame is known by in exports (pprof, OTLP), with the module's build id. */
	struct frame_key key = {.line = at <= INT32_MAX ? (int32_t)at : -1, .kind = UW_FRAME_C};
	const unsigned char *bits;
	GElf_Addr note_at;
	int bits_len = dwfl_module_build_id(mod, &bits, &note_at);
	char hex[2 * NATIVE_BUILD_ID_MAX + 1];
	if (bits_len > 0 && bits_len <= NATIVE_BUILD_ID_MAX) {
		for (int i = 0; i < bits_len; i++)
			snprintf(hex + 2 * i, 3, "%02x", bits[i]);
		if ((key.build_id = intern_string(&t->intern, hex, 2 * (size_t)bits_len)) == INTERN_FAILED)
			return uw_fail(err, UW_ENOMEM, "out of memory interning native frames");
	}
	key.function = key.qualname = intern_string(&t->intern, name, strlen(name));
	key.file = intern_string(&t->intern, path, strlen(path));
	if (key.function == INTERN_FAILED || key.file == INTERN_FAILED ||
	    (out->frame = intern_frame(&t->intern, &key)) == INTERN_FAILED)
		return uw_fail(err, UW_ENOMEM, "out of memory interning native frames");
	out->eval = strncmp(name, NATIVE_EVAL_SYMBOL, sizeof NATIVE_EVAL_SYMBOL - 1) == 0 &&
	            (name[sizeof NATIVE_EVAL_SYMBOL - 1] == '\0' || name[sizeof NATIVE_EVAL_SYMBOL - 1] == '.');
	out->pc = pc;
	out->epoch = t->stats.cache_resets;
	return 0;
}

struct native_walk_ctx {
	struct uw_target *t;
	struct native_state *ns;
	struct native_frame *out;
	uint32_t n;
	enum native_end end;
	uint64_t top; /* the end of the stack the walk read */
	struct uw_error *err;
	bool failed;
};

/*
 * One frame at code address at (a caller's: its return address less one)
 * with stack pointer sp, into the walk: its slot (frame, eval loop, CFI),
 * or NULL when the walk ends here (w->end says why, w->failed out of memory).
 */
static const struct native_pc *native_emit(struct native_walk_ctx *w, uint64_t at, uint64_t sp)
{
	if (w->n >= NATIVE_MAX_FRAMES) {
		w->end = NATIVE_TOO_DEEP;
		return NULL;
	}
	struct native_state *ns = w->ns;
	uint32_t epoch = w->t->stats.cache_resets;
	struct native_pc *slot = &ns->pcs[(at ^ (at >> 12)) % NATIVE_PC_SLOTS];
	if (slot->pc != at || slot->epoch != epoch || slot->listing != ns->listing) {
		Dwfl_Module *mod = dwfl_addrmodule(ns->dwfl, at);
		if (!mod) {
			w->end = NATIVE_UNWOUND;
			return NULL;
		}
		if (native_frame_of(w->t, mod, at, slot, w->err) != 0) {
			w->failed = true;
			return NULL;
		}
		slot->rule = native_rule_at(mod, at);
		slot->listing = ns->listing;
	}
	/* From 3.12 the entry frames say which frames run the eval loop (native_find_evals), not names. */
	bool by_name = w->t->version_hex < 0x030c0000;
	w->out[w->n++] = (struct native_frame){.frame = slot->frame, .eval = by_name && slot->eval, .sp = sp};
	if (slot->rule.kind == NATIVE_RULE_NONE) {
		w->end = NATIVE_NO_CFI;
		return NULL;
	}
	return slot;
}

/* libdwfl's walk, for a stack whose CFI the walk below does not follow. */
static int native_on_frame(Dwfl_Frame *state, void *arg)
{
	struct native_walk_ctx *w = arg;
	Dwarf_Addr pc;
	bool activation;
	if (!dwfl_frame_pc(state, &pc, &activation)) {
		w->end = NATIVE_UNWOUND;
		return DWARF_CB_ABORT;
	}
	Dwarf_Word sp = 0;
	dwfl_frame_reg(state, NATIVE_DWARF_SP, &sp);
	/* A caller's pc is its return address: the call is the byte before. */
	return native_emit(w, activation ? pc : pc - 1, sp) ? DWARF_CB_OK : DWARF_CB_ABORT;
}

/* A word of the copy, false when it lies outside it (or below the stack pointer); *top past it. */
static bool native_copy_word(const struct knative_thread *c, uint64_t addr, uint64_t *word, uint64_t *top)
{
	if (addr < c->regs[KNATIVE_SP] || addr - c->base > c->len || c->len - (addr - c->base) < sizeof *word)
		return false;
	memcpy(word, c->stack + (addr - c->base), sizeof *word);
	if (addr + sizeof *word > *top)
		*top = addr + sizeof *word;
	return true;
}

/* How a walk that needed stack past the copy ended: the copy was all it could be, or its room was short. */
static enum native_end native_past_copy(const struct knative_thread *c)
{
	bool ended_as_asked = c->top && c->base + c->len >= c->top;
	return c->len >= KNATIVE_STACK || ended_as_asked ? NATIVE_STACK_CUT : NATIVE_UNWOUND;
}

/*
 * The walk by each frame's CFI, as the rules above keep it: a few loads a
 * frame once its address was met, where libdwfl evaluates the CFI again at
 * every frame of every walk.  1 when a frame's CFI is more than it follows
 * (libdwfl's walk is taken instead), else 0 with w->end set.
 */
static int native_walk_rules(struct native_walk_ctx *w, const struct knative_thread *copy)
{
	uint64_t pc = copy->regs[KNATIVE_IP], sp = copy->regs[KNATIVE_SP], bp = copy->regs[KNATIVE_BP];
	bool bp_known = true, first = true;
	for (;;) {
		const struct native_pc *slot = native_emit(w, first ? pc : pc - 1, sp);
		if (!slot)
			return 0;
		const struct native_rule *r = &slot->rule;
		if (r->kind != NATIVE_RULE_SIMPLE || (r->cfa_reg == NATIVE_DWARF_BP && !bp_known))
			return 1;
		uint64_t cfa = (r->cfa_reg == NATIVE_DWARF_SP ? sp : bp) + (uint64_t)(int64_t)r->cfa_off;
		/* The thread's first frame: its CFI says there is no caller. */
		if (r->ra_how == NATIVE_UNDEFINED) {
			w->end = NATIVE_WHOLE;
			return 0;
		}
		uint64_t ra;
		if (!native_copy_word(copy, cfa + (uint64_t)(int64_t)r->ra_off, &ra, &w->top)) {
			w->end = native_past_copy(copy);
			return 0;
		}
		if (r->bp_how == NATIVE_AT_CFA)
			bp_known = native_copy_word(copy, cfa + (uint64_t)(int64_t)r->bp_off, &bp, &w->top);
		else if (r->bp_how == NATIVE_UNDEFINED)
			bp_known = false;
		/* Each caller's frame lies above its callee's: a CFA that does not climb is bad data. */
		if (cfa <= sp || ra == 0) {
			w->end = ra == 0 ? NATIVE_WHOLE : NATIVE_UNWOUND;
			return 0;
		}
		sp = cfa;
		pc = ra;
		first = false;
	}
}

int native_walk(struct uw_target *t, const struct knative_thread *copy, struct native_frame *out,
                uint32_t *n, enum native_end *end, uint64_t *top, struct uw_error *err)
{
	*n = 0;
	*end = NATIVE_UNWOUND;
	*top = 0;
	struct native_state *ns = native_state_of(t, err);
	if (!ns)
		return -1;
	if (!ns->attached && native_report(t, ns, err) != 0)
		return -1;
	/* A module loaded since the modules were listed: listed again, once a walk. */
	if (!dwfl_addrmodule(ns->dwfl, copy->regs[KNATIVE_IP])) {
		if (native_report(t, ns, err) != 0)
			return -1;
	}
	struct native_walk_ctx w = {.t = t, .ns = ns, .out = out, .end = NATIVE_WHOLE, .err = err};
	if (native_walk_rules(&w, copy) == 0) {
		*n = w.n;
		*end = w.end;
		*top = w.end == NATIVE_WHOLE ? w.top : 0;
		return w.failed ? -1 : 0;
	}
	t->stats.native_libdwfl_walks++;
	w = (struct native_walk_ctx){.t = t, .ns = ns, .out = out, .end = NATIVE_WHOLE, .err = err};
	ns->copy = copy;
	ns->tid = copy->tid;
	int rc = dwfl_getthread_frames(ns->dwfl, copy->tid, native_on_frame, &w);
	ns->copy = NULL;
	if (w.failed)
		return -1;
	*n = w.n;
	if (rc != 0 && w.end == NATIVE_WHOLE) {
		/*
		 * libdwfl ends a walk with an error where the CFI leaves the
		 * caller undefined (a thread's start) only after the last frame
		 * was given: a stack read past the copy is what else stops it.
		 */
		w.end = native_past_copy(copy);
	}
	*end = w.end;
	return 0;
}

void native_free(struct uw_target *t)
{
	struct native_state *ns = t->native;
	if (!ns)
		return;
	if (ns->dwfl)
		dwfl_end(ns->dwfl);
	free(ns->ids);
	free(ns);
	t->native = NULL;
}
