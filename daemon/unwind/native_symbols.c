/*
 * The functions of a module by address, for naming C frames: its .symtab,
 * .dynsym and MiniDebugInfo symbols as libdwfl reads them, once, sorted.
 * libdwfl's own lookup walks every symbol of the module at each address,
 * which a profile of code that runs (a new address at most samples) pays
 * again and again; here a lookup is a binary search.  A table is kept by
 * the module's build id with the copier (struct uw_native), so every target
 * running the same interpreter or library shares it, and a warm one does
 * no symbol work at all.  A module without a build id is keyed by its path
 * and size.
 */
#include <stdlib.h>
#include <string.h>

#include <elfutils/libdwfl.h>

#include "native.h"
#include "unwind_internal.h"

/* Symbols one table takes at most: past it a module's further functions go unnamed. */
#define NATIVE_SYMBOLS_MAX (1u << 22)
/* A key: a build id (at most 64 bytes) in hex, or a path with the file's size. */
#define NATIVE_KEY_LEN 4200

struct native_function {
	uint64_t addr, size; /* in the file's addresses */
	uint32_t name;       /* offset in names */
};

struct native_symbols {
	char key[NATIVE_KEY_LEN];
	struct native_function *functions;
	uint32_t n;
	char *names;
	struct native_symbols *next;
};

/* Leading underscores: of a function's aliases, the one with fewest is its public name. */
static size_t native_underscores(const char *name)
{
	size_t n = 0;
	while (name[n] == '_')
		n++;
	return n;
}

static int native_by_addr(const void *a, const void *b)
{
	const struct native_function *x = a, *y = b;
	return (x->addr > y->addr) - (x->addr < y->addr);
}

/* The module's key: its build id, else its path and its extent in the process. */
static void native_key(Dwfl_Module *mod, char *key)
{
	const unsigned char *id;
	GElf_Addr vaddr;
	int len = dwfl_module_build_id(mod, &id, &vaddr);
	if (len > 0 && len <= 64) {
		for (int i = 0; i < len; i++)
			snprintf(key + 2 * i, 3, "%02x", id[i]);
		return;
	}
	Dwarf_Addr start = 0, end = 0;
	const char *path = dwfl_module_info(mod, NULL, &start, &end, NULL, NULL, NULL, NULL);
	snprintf(key, NATIVE_KEY_LEN, "%s:%llu", path ? path : "", (unsigned long long)(end - start));
}

/* A module's table, built from its symbols: NULL when out of memory. */
static struct native_symbols *native_symbols_build(Dwfl_Module *mod, const char *key)
{
	struct native_symbols *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	memcpy(s->key, key, NATIVE_KEY_LEN);
	Dwarf_Addr bias = 0;
	dwfl_module_getelf(mod, &bias);
	int nsyms = dwfl_module_getsymtab(mod);
	uint32_t cap = nsyms > 0 ? (uint32_t)nsyms : 0, bytes = 0;
	if (cap > NATIVE_SYMBOLS_MAX)
		cap = NATIVE_SYMBOLS_MAX;
	s->functions = calloc(cap ? cap : 1, sizeof *s->functions);
	if (!s->functions)
		goto fail;
	/* First the names' room, then the names: two passes over the symbols, no growing. */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t n = 0, at = 0;
		for (int i = 1; i < nsyms && n < cap; i++) {
			GElf_Sym sym;
			GElf_Addr addr;
			const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
			int type = GELF_ST_TYPE(sym.st_info);
			if (!name || !*name || sym.st_size == 0 || (type != STT_FUNC && type != STT_GNU_IFUNC))
				continue;
			size_t len = strlen(name) + 1;
			if (pass == 0) {
				bytes += (uint32_t)len;
				continue;
			}
			s->functions[n++] = (struct native_function){.addr = addr - bias, .size = sym.st_size, .name = at};
			memcpy(s->names + at, name, len);
			at += (uint32_t)len;
		}
		if (pass == 0 && !(s->names = malloc(bytes ? bytes : 1)))
			goto fail;
		s->n = n;
	}
	qsort(s->functions, s->n, sizeof *s->functions, native_by_addr);
	/* One entry an address: the alias with fewest leading underscores (libc's select, not __select). */
	uint32_t kept = 0;
	for (uint32_t i = 0; i < s->n; i++) {
		struct native_function *f = &s->functions[i];
		if (kept && s->functions[kept - 1].addr == f->addr) {
			struct native_function *k = &s->functions[kept - 1];
			if (native_underscores(s->names + f->name) < native_underscores(s->names + k->name))
				*k = *f;
			continue;
		}
		s->functions[kept++] = *f;
	}
	s->n = kept;
	return s;
fail:
	free(s->functions);
	free(s->names);
	free(s);
	return NULL;
}

const struct native_symbols *native_symbols_of(struct uw_native *native, Dwfl_Module *mod)
{
	char key[NATIVE_KEY_LEN] = {0};
	native_key(mod, key);
	for (struct native_symbols *s = native->tables; s; s = s->next)
		if (strcmp(s->key, key) == 0)
			return s;
	struct native_symbols *s = native_symbols_build(mod, key);
	if (s) {
		s->next = native->tables;
		native->tables = s;
	}
	return s;
}

const char *native_symbols_find(const struct native_symbols *s, uint64_t at, uint64_t *start)
{
	uint32_t lo = 0, hi = s->n;
	/* The last function that begins at or below at. */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (s->functions[mid].addr <= at)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct native_function *f = &s->functions[lo - 1];
	*start = f->addr;
	return at - f->addr < f->size ? s->names + f->name : NULL;
}

void native_symbols_free(struct uw_native *native)
{
	while (native->tables) {
		struct native_symbols *s = native->tables;
		native->tables = s->next;
		free(s->functions);
		free(s->names);
		free(s);
	}
}
