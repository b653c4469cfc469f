/*
 * What OpenTelemetry publishes for readers outside the process: the process
 * context of OTEP 4719 (an OTEL_CTX mapping holding a Resource, protobuf,
 * handed to the daemon as bytes: the unwinder decodes no wire format), and
 * the thread records of OTEP 4947 (the thread-local otel_thread_ctx_v1
 * points to the thread's current trace, span and attributes).
 *
 * A record is found from the thread pointer, which CPython gives us for
 * every thread: PyThreadState.thread_id is pthread_self(), and glibc's
 * pthread_t is the thread's TCB, the thread pointer itself (x86-64).  The
 * module defining the variable is read once: the GOT slot its loader filled
 * says where in each thread's TLS the variable is.
 *
 * The OTEP has readers stop the thread; we never do.  A record's reads are
 * noted with the context's and made again after the stack (context.c): a
 * record given to a sample held its bytes while the stack was read.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unwind_internal.h"

#define OTEL_CTX_NAME "OTEL_CTX"
#define OTEL_TLS_SYMBOL "otel_thread_ctx_v1"
/* The process context's header: signature, version, payload size, publication time, payload pointer. */
#define OTEL_HEADER_BYTES 32u
/* A record's fixed part (ids, valid, flags, attrs-data-size), and the attributes read at most. */
#define OTEL_RECORD_HEAD 28u
#define OTEL_RECORD_ATTRS_MAX 996u
/* Reads of a changing header before the payload is left for the next poll. */
#define OTEL_PAYLOAD_TRIES 3
/* The thread-local slot looked for again at most this often while not found, and the longest wait. */
#define OTEL_TLS_RETRY_FIRST_NS 5000000000ull
#define OTEL_TLS_RETRY_MAX_NS 60000000000ull
/* A module id and offset that no loader gives: a descriptor not resolved yet, or garbage. */
#define OTEL_MODID_MAX 65536u
#define OTEL_OFFSET_MAX (1ull << 24)

static bool otel_map_named(const char *path)
{
	/* A memfd, its anonymous fallback named with prctl, or shared memory that the kernel names either way. */
	return path && (!strncmp(path, "/memfd:" OTEL_CTX_NAME, 7 + sizeof OTEL_CTX_NAME - 1) ||
	                !strncmp(path, "[anon:" OTEL_CTX_NAME "]", 6 + sizeof OTEL_CTX_NAME) ||
	                !strncmp(path, "[anon_shmem:" OTEL_CTX_NAME "]", 12 + sizeof OTEL_CTX_NAME));
}

/* The header at addr, when it is a process context: its signature and a version this reader knows. */
static bool otel_header(struct uw_target *t, raddr_t addr, uint8_t h[OTEL_HEADER_BYTES])
{
	if (remote_read(&t->mem, addr, h, OTEL_HEADER_BYTES, NULL) != 0 || memcmp(h, OTEL_CTX_NAME, 8) != 0)
		return false;
	uint32_t version = load_u32(h, 8);
	return version == 1 || version == 2;
}

static raddr_t otel_find_map(struct uw_target *t)
{
	struct proc_maps maps;
	if (proc_maps_read(t->pid, &maps, NULL) != 0)
		return 0;
	raddr_t found = 0;
	uint8_t h[OTEL_HEADER_BYTES];
	for (size_t i = 0; i < maps.count && !found; i++)
		if (otel_map_named(maps.maps[i].path) && maps.maps[i].end - maps.maps[i].start >= OTEL_HEADER_BYTES &&
		    otel_header(t, maps.maps[i].start, h))
			found = maps.maps[i].start;
	proc_maps_free(&maps);
	return found;
}

int uw_process_context(struct uw_target *t, uint8_t *buf, size_t cap, size_t *len, struct uw_error *err)
{
	struct otel_state *os = &t->otel;
	*len = 0;
	if (!os->process_map && !(os->process_map = otel_find_map(t)))
		return 0;
	for (int tries = 0; tries < OTEL_PAYLOAD_TRIES; tries++) {
		uint8_t h[OTEL_HEADER_BYTES], again[OTEL_HEADER_BYTES];
		if (!otel_header(t, os->process_map, h)) {
			/* Unmapped, or another mapping there now: looked for again next time. */
			os->process_map = 0;
			os->published_at = 0;
			return 0;
		}
		uint32_t size = load_u32(h, 12);
		uint64_t at = load_u64(h, 16);
		raddr_t payload = load_u64(h, 24);
		/* Zero: an update under way. */
		if (!at)
			continue;
		if (at == os->published_at)
			return 0;
		if (size > cap) {
			/* Said once a publication: the next poll finds the same time and reads nothing. */
			os->published_at = at;
			return uw_fail(err, UW_ECORRUPT, "process context of %u bytes, past the %zu read", size, cap);
		}
		if (size && remote_read(&t->mem, payload, buf, size, NULL) != 0)
			continue;
		/* The same publication time after the payload: it was not rewritten under the read. */
		if (remote_read(&t->mem, os->process_map, again, OTEL_HEADER_BYTES, NULL) != 0 ||
		    load_u64(again, 16) != at)
			continue;
		os->published_at = at;
		*len = size;
		return 1;
	}
	return 0;
}

/* Each key's label: its index among the options' label names, -1 when none asks for it. */
static void otel_key_labels(struct uw_target *t)
{
	struct otel_state *os = &t->otel;
	for (uint32_t k = 0; k < OTEL_KEYS_MAX; k++) {
		os->key_label[k] = -1;
		for (uint32_t i = 0; os->keys && k < os->nkeys && i < t->opts.ncontext_labels; i++)
			if (!strcmp(os->keys[k], t->opts.context_labels[i]))
				os->key_label[k] = (int16_t)i;
	}
}

/* Where the module mapped at m keeps the variable: its GOT slot read as the loader filled it. */
static bool otel_tls_module(struct uw_target *t, const struct proc_map *m)
{
	struct otel_state *os = &t->otel;
	int fd = proc_map_open(t->pid, m, NULL);
	if (fd < 0)
		return false;
	struct elf_tls tls;
	int rc = elf_tls_find(fd, OTEL_TLS_SYMBOL, &tls, NULL);
	close(fd);
	if (rc != 0 || tls.access == ELF_TLS_NONE)
		return false;
	raddr_t slot = m->start - tls.first_load_vaddr + tls.slot;
	uint8_t b[16];
	switch (tls.access) {
	case ELF_TLS_EXEC: {
		/* x86-64 puts the executable's block first below the thread pointer, rounded to its alignment. */
		uint64_t align = tls.block_align, size = (tls.block_size + align - 1) / align * align;
		os->tp_offset = (int64_t)tls.value - (int64_t)size;
		os->tls = OTEL_TLS_STATIC;
		return true;
	}
	case ELF_TLS_TPOFF:
		if (remote_read(&t->mem, slot, b, 8, NULL) != 0 || (int64_t)load_u64(b, 0) >= 0)
			return false;
		os->tp_offset = (int64_t)load_u64(b, 0);
		os->tls = OTEL_TLS_STATIC;
		return true;
	case ELF_TLS_DESC:
		/* The descriptor's function and argument: an offset from the thread pointer, or a module's index. */
		if (remote_read(&t->mem, slot, b, 16, NULL) != 0)
			return false;
		if ((int64_t)load_u64(b, 8) < 0) {
			os->tp_offset = (int64_t)load_u64(b, 8);
			os->tls = OTEL_TLS_STATIC;
			return true;
		}
		slot = load_u64(b, 8);
		break;
	case ELF_TLS_DTPMOD:
		break;
	case ELF_TLS_NONE:
		return false;
	}
	/* A module id and the offset in its block, read from the slot (or the descriptor's argument). */
	if (remote_read(&t->mem, slot, b, 16, NULL) != 0 || load_u64(b, 0) == 0 || load_u64(b, 0) > OTEL_MODID_MAX ||
	    load_u64(b, 8) >= OTEL_OFFSET_MAX)
		return false;
	os->modid = load_u64(b, 0);
	os->mod_offset = load_u64(b, 8);
	os->tls = OTEL_TLS_DYNAMIC;
	return true;
}

/* The module defining the thread-local slot, among those mapped, and where each thread has it. */
static void otel_tls_look(struct uw_target *t)
{
	struct otel_state *os = &t->otel;
	uint64_t now = clock_mono_ns();
	if (os->tls != OTEL_TLS_UNKNOWN || (os->tls_looked_ns && now - os->tls_looked_ns < os->tls_retry_ns))
		return;
	os->tls_looked_ns = now;
	os->tls_retry_ns = os->tls_retry_ns ? os->tls_retry_ns * 2 : OTEL_TLS_RETRY_FIRST_NS;
	if (os->tls_retry_ns > OTEL_TLS_RETRY_MAX_NS)
		os->tls_retry_ns = OTEL_TLS_RETRY_MAX_NS;
	struct proc_maps maps;
	if (proc_maps_read(t->pid, &maps, NULL) != 0)
		return;
	for (size_t i = 0; i < maps.count && os->tls == OTEL_TLS_UNKNOWN; i++) {
		const struct proc_map *m = &maps.maps[i];
		/* Each file once, at its first mapping: the ELF header is there. */
		if (m->path && m->path[0] == '/' && m->offset == 0 && m->inode && !otel_map_named(m->path))
			otel_tls_module(t, m);
	}
	proc_maps_free(&maps);
}

bool uw_thread_context_keys(struct uw_target *t, const char *const *names, uint32_t n)
{
	struct otel_state *os = &t->otel;
	if (!os->keys && !(os->keys = calloc(OTEL_KEYS_MAX, sizeof *os->keys)))
		return false;
	os->nkeys = n < OTEL_KEYS_MAX ? n : OTEL_KEYS_MAX;
	for (uint32_t k = 0; k < os->nkeys; k++) {
		/* A name too long for a label's names none: cut, it could equal another's. */
		size_t len = names[k] ? strlen(names[k]) : 0;
		if (len >= UW_CONTEXT_NAME_LEN)
			len = 0;
		memcpy(os->keys[k], names[k] ? names[k] : "", len);
		os->keys[k][len] = '\0';
	}
	os->keys_known = true;
	otel_key_labels(t);
	/* Contexts read before were read without the records: read again. */
	t->contexts.gen++;
	/* Looked for at once, even if a look not long ago found nothing: the process says it is there now. */
	os->tls_looked_ns = 0;
	otel_tls_look(t);
	return os->tls != OTEL_TLS_UNKNOWN;
}

bool otel_records_on(struct uw_target *t)
{
	struct otel_state *os = &t->otel;
	if (!os->keys_known)
		return false;
	if (os->tls == OTEL_TLS_UNKNOWN)
		otel_tls_look(t);
	return os->tls != OTEL_TLS_UNKNOWN;
}

int otel_thread_record(struct uw_target *t, uint64_t tp, struct uw_context *out)
{
	struct otel_state *os = &t->otel;
	uint8_t b[16];
	raddr_t var;
	if (!tp)
		return -1;
	if (os->tls == OTEL_TLS_STATIC) {
		var = tp + (uint64_t)os->tp_offset;
	} else {
		/* The thread's DTV (the TCB's second word), its length before it, and the module's block in it. */
		if (pyobj_read(t, tp + 8, b, 8) != 0)
			return -1;
		raddr_t dtv = load_u64(b, 0);
		if (pyobj_read(t, dtv - 16, b, 8) != 0)
			return -1;
		if (os->modid > load_u64(b, 0))
			return 0; /* the module came after the thread last looked: nothing of it there yet */
		if (pyobj_read(t, dtv + 16 * os->modid, b, 8) != 0)
			return -1;
		raddr_t block = load_u64(b, 0);
		/* Not allocated until the thread first touches a variable of the module: no record. */
		if (!block || block == UINT64_MAX)
			return 0;
		var = block + os->mod_offset;
	}
	if (pyobj_read(t, var, b, 8) != 0)
		return -1;
	raddr_t record = load_u64(b, 0);
	if (!record)
		return 0;
	uint8_t head[OTEL_RECORD_HEAD];
	if (pyobj_read(t, record, head, sizeof head) != 0)
		return -1;
	/* Any value but 1 is a record being written, or none: no context. */
	if (head[24] != 1)
		return 0;
	static const uint8_t zero[16];
	if (memcmp(head, zero, 16) && memcmp(head + 16, zero, 8)) {
		memcpy(out->trace_id, head, 16);
		memcpy(out->span_id, head + 16, 8);
		out->has_span = t->opts.context_otel;
	}
	uint32_t size = load_u16(head, 26);
	if (size > OTEL_RECORD_ATTRS_MAX)
		size = OTEL_RECORD_ATTRS_MAX;
	if (!size || !t->opts.ncontext_labels)
		return 0;
	uint8_t attrs[OTEL_RECORD_ATTRS_MAX];
	if (pyobj_read(t, record + OTEL_RECORD_HEAD, attrs, size) != 0)
		return -1;
	/* Entries packed: key, length, value; stop at one that does not fit, the last of a key wins. */
	for (uint32_t at = 0; at + 2 <= size && at + 2u + attrs[at + 1] <= size; at += 2u + attrs[at + 1]) {
		int16_t label = os->key_label[attrs[at]]; /* -1 past the key map too */
		if (label >= 0)
			context_label_put(out, (uint32_t)label, (const char *)attrs + at + 2, attrs[at + 1], true);
	}
	return 0;
}

void otel_configured(struct uw_target *t)
{
	if (t->otel.keys_known)
		otel_key_labels(t);
}

void otel_free(struct uw_target *t)
{
	free(t->otel.keys);
	t->otel.keys = NULL;
}
