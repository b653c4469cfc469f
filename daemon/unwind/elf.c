/* Symbols and load facts of an ELF file of the target, read with libelf. */
#include <gelf.h>
#include <libelf.h>
#include <string.h>

#include "unwind_internal.h"

/* Symbol tables larger than this are not something we will walk. */
#define ELF_MAX_SYMBOLS (1u << 22)

static bool elf_name_matches(const char *want, const char *name)
{
	size_t n = strlen(want);
	if (n > 0 && want[n - 1] == '.')
		return strncmp(want, name, n) == 0;
	return strcmp(want, name) == 0;
}

/*
 * Fill in the symbols of syms not found yet from one symbol table; *left
 * counts those still wanted.  A libpython has tens of thousands of symbols
 * and a lookup wants a dozen: a name is compared only when its first byte
 * is one of theirs, and the walk stops once all but the spare ones are
 * found.
 */
static void elf_scan_symtab(Elf *elf, Elf_Scn *scn, const GElf_Shdr *shdr,
                            struct elf_symbol *syms, size_t nsyms, size_t *left)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	if (!data || shdr->sh_entsize == 0)
		return;
	bool first[256] = {false};
	for (size_t k = 0; k < nsyms; k++)
		first[(unsigned char)syms[k].name[0]] = true;
	size_t count = shdr->sh_size / shdr->sh_entsize;
	if (count > ELF_MAX_SYMBOLS)
		count = ELF_MAX_SYMBOLS;
	for (size_t i = 0; i < count && *left; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym))
			break;
		if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0)
			continue;
		const char *name = elf_strptr(elf, shdr->sh_link, sym.st_name);
		if (!name || !first[(unsigned char)name[0]])
			continue;
		for (size_t k = 0; k < nsyms; k++) {
			if (!syms[k].found && elf_name_matches(syms[k].name, name)) {
				syms[k].found = true;
				syms[k].value = sym.st_value;
				syms[k].size = sym.st_size;
				*left -= !syms[k].spare;
			}
		}
	}
}

int elf_lookup(int fd, struct elf_symbol *syms, size_t nsyms, struct elf_facts *facts,
               struct uw_error *err)
{
	memset(facts, 0, sizeof *facts);
	for (size_t k = 0; k < nsyms; k++)
		syms[k].found = false;

	if (elf_version(EV_CURRENT) == EV_NONE)
		return uw_fail(err, UW_EIO, "libelf: %s", elf_errmsg(-1));

	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		if (elf)
			elf_end(elf);
		return 0; /* not ELF: simply nothing found */
	}
	facts->is_elf = true;

	size_t phnum = 0;
	if (elf_getphdrnum(elf, &phnum) == 0) {
		for (size_t i = 0; i < phnum; i++) {
			GElf_Phdr ph;
			if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && ph.p_offset == 0) {
				facts->first_load_vaddr = ph.p_vaddr & ~(uint64_t)0xfff;
				break;
			}
		}
	}

	size_t shstrndx, left = 0;
	for (size_t k = 0; k < nsyms; k++)
		left += !syms[k].spare;
	if (elf_getshdrstrndx(elf, &shstrndx) == 0) {
		Elf_Scn *scn = NULL;
		while ((scn = elf_nextscn(elf, scn)) != NULL) {
			GElf_Shdr shdr;
			if (!gelf_getshdr(scn, &shdr))
				continue;
			if (shdr.sh_type == SHT_DYNSYM || shdr.sh_type == SHT_SYMTAB) {
				elf_scan_symtab(elf, scn, &shdr, syms, nsyms, &left);
			} else {
				const char *name = elf_strptr(elf, shstrndx, shdr.sh_name);
				if (name && strcmp(name, ".PyRuntime") == 0)
					facts->pyruntime_section = shdr.sh_addr;
				else if (name && strcmp(name, ".AsyncioDebug") == 0)
					facts->asyncio_debug_section = shdr.sh_addr;
			}
		}
	}
	elf_end(elf);
	return 0;
}

/* The index in the symbol table scn of the defined thread-local `name`; 0 when none. */
static size_t elf_tls_symbol(Elf *elf, Elf_Scn *scn, const GElf_Shdr *shdr, const char *name, uint64_t *value)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	if (!data || shdr->sh_entsize == 0)
		return 0;
	size_t count = shdr->sh_size / shdr->sh_entsize;
	if (count > ELF_MAX_SYMBOLS)
		count = ELF_MAX_SYMBOLS;
	for (size_t i = 1; i < count; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(data, (int)i, &sym))
			break;
		if (GELF_ST_TYPE(sym.st_info) != STT_TLS || sym.st_shndx == SHN_UNDEF || sym.st_name == 0)
			continue;
		const char *s = elf_strptr(elf, shdr->sh_link, sym.st_name);
		if (s && strcmp(s, name) == 0) {
			*value = sym.st_value;
			return i;
		}
	}
	return 0;
}

/*
 * How the loader resolves the module's own references to symbol index sym:
 * the relocation of a GOT slot it fills.  TLSDESC is what the OTEP asks
 * writers to use, initial-exec what a linker may relax to, and the legacy
 * general dynamic pair the third model it allows.
 */
static void elf_tls_relocation(Elf *elf, size_t dynsym_index, size_t sym, struct elf_tls *out)
{
	static const int rank[] = {[ELF_TLS_NONE] = 0, [ELF_TLS_EXEC] = 1, [ELF_TLS_DTPMOD] = 2,
	                           [ELF_TLS_TPOFF] = 3, [ELF_TLS_DESC] = 4};
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr shdr;
		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_RELA || shdr.sh_link != dynsym_index ||
		    shdr.sh_entsize == 0)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		size_t count = data ? shdr.sh_size / shdr.sh_entsize : 0;
		if (count > ELF_MAX_SYMBOLS)
			count = ELF_MAX_SYMBOLS;
		for (size_t i = 0; i < count; i++) {
			GElf_Rela r;
			if (!gelf_getrela(data, (int)i, &r))
				break;
			if (GELF_R_SYM(r.r_info) != sym)
				continue;
			enum elf_tls_access a = GELF_R_TYPE(r.r_info) == R_X86_64_TLSDESC  ? ELF_TLS_DESC
			                        : GELF_R_TYPE(r.r_info) == R_X86_64_TPOFF64 ? ELF_TLS_TPOFF
			                        : GELF_R_TYPE(r.r_info) == R_X86_64_DTPMOD64 ? ELF_TLS_DTPMOD
			                                                                      : ELF_TLS_NONE;
			if (rank[a] > rank[out->access]) {
				out->access = a;
				out->slot = r.r_offset;
			}
		}
	}
}

int elf_tls_find(int fd, const char *name, struct elf_tls *out, struct uw_error *err)
{
	memset(out, 0, sizeof *out);
	if (elf_version(EV_CURRENT) == EV_NONE)
		return uw_fail(err, UW_EIO, "libelf: %s", elf_errmsg(-1));
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	GElf_Ehdr eh;
	size_t phnum = 0;
	/* x86-64's thread pointer and relocations only: elsewhere no record is read, never a wrong one. */
	if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh) || eh.e_machine != EM_X86_64 ||
	    elf_getphdrnum(elf, &phnum) != 0)
		goto done;
	bool has_tls = false;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;
		if (!gelf_getphdr(elf, (int)i, &ph))
			continue;
		if (ph.p_type == PT_LOAD && ph.p_offset == 0 && !out->first_load_vaddr)
			out->first_load_vaddr = ph.p_vaddr & ~(uint64_t)0xfff;
		if (ph.p_type == PT_TLS) {
			has_tls = true;
			out->block_size = ph.p_memsz;
			out->block_align = ph.p_align ? ph.p_align : 1;
		}
	}
	/* Most modules keep no thread-local variable: their symbols are not looked at. */
	if (!has_tls)
		goto done;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr shdr;
		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_DYNSYM)
			continue;
		size_t sym = elf_tls_symbol(elf, scn, &shdr, name, &out->value);
		if (!sym)
			break;
		elf_tls_relocation(elf, elf_ndxscn(scn), sym, out);
		/* An executable's own reference needs no relocation: its block sits right below the thread pointer. */
		if (out->access == ELF_TLS_NONE && eh.e_type == ET_EXEC)
			out->access = ELF_TLS_EXEC;
		break;
	}
done:
	if (elf)
		elf_end(elf);
	return 0;
}
