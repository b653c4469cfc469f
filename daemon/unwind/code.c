/*
 * Code objects of the target, decoded once and cached by remote address.
 *
 * A code object is immutable while it lives, but its address can be freed and
 * reused by another one.  An entry is therefore revalidated the first time a
 * snapshot meets it: the fixed header is read again and the fields the
 * decoding depended on (type, name, file, line table pointers, first line)
 * must be unchanged, which costs one exact-size read instead of a full decode.
 */
#include <stdlib.h>
#include <string.h>

#include "unwind_internal.h"

/* Longest str we accept at all, and how much of one we keep. */
#define STR_MAX_LENGTH (1u << 24)
#define STR_KEEP_LENGTH 4096u
/* Longest line table we read: real ones are a few KiB. */
#define LINETABLE_MAX_BYTES (1u << 22)

void code_cache_init(struct code_cache *cache)
{
	memset(cache, 0, sizeof *cache);
}

static void code_info_free(struct code_info *ci)
{
	if (!ci)
		return;
	free(ci->header);
	line_table_free(&ci->lines);
	free(ci);
}

void code_cache_free(struct code_cache *cache)
{
	for (uint32_t i = 0; i < cache->count; i++)
		code_info_free(cache->codes[i]);
	free(cache->codes);
	hash_free(&cache->index);
	memset(cache, 0, sizeof *cache);
}

static bool code_cache_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct code_cache *cache = ctx;
	return cache->codes[id]->addr == *(const raddr_t *)key;
}

static uint32_t code_cache_hash(raddr_t addr)
{
	return hash_u64(addr);
}

/* The cached entry of addr, or NULL. */
static struct code_info *code_cache_find(const struct code_cache *cache, raddr_t addr)
{
	uint32_t id = hash_find(&cache->index, code_cache_hash(addr), code_cache_equal, cache, &addr);
	return id == HASH_NONE ? NULL : cache->codes[id];
}

/* A str's read: through the sample's view while a context is read (pyobj_read), else now. */
static int code_str_read(struct uw_target *t, raddr_t addr, void *buf, size_t len, struct uw_error *err)
{
	if (!t->pyobj_batched)
		return remote_read(&t->mem, addr, buf, len, err);
	return pyobj_read(t, addr, buf, len) == 0 ? 0 : uw_fail(err, UW_ECORRUPT, "unreadable str");
}

/*
 * The first len bytes of the object at addr into hdr (128 bytes), checked to
 * be of type (when known): what a str or bytes read starts with.
 */
static int pyobj_read_header(struct uw_target *t, raddr_t addr, uint8_t hdr[128], uint32_t len,
                             raddr_t type, const char *what, struct uw_error *err)
{
	if (len > 128) {
		uw_fail(err, UW_ECORRUPT, "object layout too large");
		return -1;
	}
	if (code_str_read(t, addr, hdr, len, err) != 0)
		return -1;
	if (type && load_u64(hdr, t->layout.object.ob_type) != type) {
		uw_fail(err, UW_ECORRUPT, "object at 0x%llx is not %s", (unsigned long long)addr, what);
		return -1;
	}
	return 0;
}

/* Where a str's characters are, how many and how wide (1, 2 or 4 bytes).  0, or -1 and *err. */
static int pyobj_str_data(struct uw_target *t, raddr_t addr, raddr_t *data, size_t *length,
                          unsigned *kind, struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	uint8_t hdr[128];
	if (pyobj_read_header(t, addr, hdr, L->unicode.ascii_size, t->unicode_type, "a str", err) != 0)
		return -1;
	int64_t len = (int64_t)load_u64(hdr, L->unicode.length);
	uint32_t state = load_u32(hdr, L->unicode.state);
	/* Free-threaded builds keep `interned` in a whole byte before the bit fields. */
	unsigned shift = L->free_threaded ? 8 : 2;
	*kind = (state >> shift) & 7;
	bool compact = (state >> (shift + 3)) & 1;
	bool ascii = (state >> (shift + 4)) & 1;
	if (len < 0 || len > (int64_t)STR_MAX_LENGTH || (*kind != 1 && *kind != 2 && *kind != 4) ||
	    (ascii && *kind != 1))
		return uw_fail(err, UW_ECORRUPT, "garbage str header at 0x%llx", (unsigned long long)addr);
	*length = (size_t)len;
	if (compact) {
		*data = addr + (ascii ? L->unicode.ascii_size : L->unicode.compact_size);
		return 0;
	}
	uint8_t ptr[8];
	if (code_str_read(t, addr + L->unicode.legacy_data, ptr, 8, err) != 0)
		return -1;
	*data = load_u64(ptr, 0);
	return 0;
}

char *pyobj_read_utf8(struct uw_target *t, raddr_t addr, struct uw_error *err)
{
	raddr_t data;
	size_t length;
	unsigned kind;
	if (pyobj_str_data(t, addr, &data, &length, &kind, err) != 0)
		return NULL;
	size_t count = length < STR_KEEP_LENGTH ? length : STR_KEEP_LENGTH;
	uint8_t *raw = malloc(count * kind + 1);
	if (!raw) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	if (count && remote_read(&t->mem, data, raw, count * kind, err) != 0) {
		free(raw);
		return NULL;
	}
	char *s = pystr_to_utf8(raw, count, kind);
	free(raw);
	if (!s)
		uw_fail(err, UW_ENOMEM, "out of memory");
	return s;
}

uint32_t pyobj_read_str(struct uw_target *t, raddr_t addr, struct uw_error *err)
{
	char *s = pyobj_read_utf8(t, addr, err);
	if (!s)
		return INTERN_FAILED;
	uint32_t id = intern_string(&t->intern, s, strlen(s));
	free(s);
	if (id == INTERN_FAILED)
		uw_fail(err, UW_ENOMEM, "out of memory");
	return id;
}

int pyobj_read_str_into(struct uw_target *t, raddr_t addr, char *out, size_t cap,
                        struct uw_error *err)
{
	raddr_t data;
	size_t length;
	unsigned kind;
	uint8_t raw[PYOBJ_STR_INTO_MAX * 4];
	if (cap == 0 || cap > PYOBJ_STR_INTO_MAX)
		return uw_fail(err, UW_ECORRUPT, "no room for a str");
	if (pyobj_str_data(t, addr, &data, &length, &kind, err) != 0)
		return -1;
	/* A character takes a byte of UTF-8 at least: more than cap of them never fit. */
	size_t count = length < cap ? length : cap;
	if (count && code_str_read(t, data, raw, count * kind, err) != 0)
		return -1;
	pystr_to_utf8_into(raw, count, kind, out, cap);
	return 0;
}

/* The bytes of a bytes object, bounded. */
static uint8_t *pyobj_read_bytes(struct uw_target *t, raddr_t addr, size_t *len,
                                 struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	uint8_t hdr[128];
	if (pyobj_read_header(t, addr, hdr, L->bytes.ob_sval, t->bytes_type, "bytes", err) != 0)
		return NULL;
	int64_t size = (int64_t)load_u64(hdr, L->bytes.ob_size);
	if (size < 0 || size > (int64_t)LINETABLE_MAX_BYTES) {
		uw_fail(err, UW_ECORRUPT, "garbage bytes size at 0x%llx", (unsigned long long)addr);
		return NULL;
	}
	uint8_t *buf = malloc((size_t)size + 1);
	if (!buf) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	if (size && remote_read(&t->mem, addr + L->bytes.ob_sval, buf, (size_t)size, err) != 0) {
		free(buf);
		return NULL;
	}
	*len = (size_t)size;
	return buf;
}

/*
 * The standard library's functions that, innermost in a thread without the
 * GIL, are blocked in the C call they make: a lock or condition, a
 * selector, a socket, a child process, a pipe.  By co_name and the end of
 * the file's path, so 3.8 to 3.10 (no qualified names) match too.  A wait
 * in the program's own code (time.sleep) shows in the kernel's state.
 */
static const struct {
	const char *file, *name;
} code_waits[] = {
	{"/threading.py", "wait"},          /* Condition.wait, under Event, Semaphore, Barrier, Queue */
	{"/threading.py", "_wait_for_tstate_lock"}, /* Thread.join, 3.8-3.12 */
	{"/threading.py", "join"},          /* Thread.join, 3.13+: the handle's join is C */
	{"/selectors.py", "select"},        /* every selector, asyncio's loop, socketserver */
	{"/socket.py", "accept"},
	{"/socket.py", "readinto"},         /* SocketIO: a file made of a socket */
	{"/subprocess.py", "_try_wait"},    /* Popen.wait */
	{"/multiprocessing/connection.py", "_recv"},
	{"/concurrent/futures/thread.py", "_worker"}, /* a pool's idle worker, in its queue's get */
};

static bool code_ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), m = strlen(tail);
	return n >= m && memcmp(s + n - m, tail, m) == 0;
}

bool code_known_wait(const char *name, const char *file)
{
	for (size_t i = 0; i < sizeof code_waits / sizeof code_waits[0]; i++)
		if (strcmp(name, code_waits[i].name) == 0 && code_ends_with(file, code_waits[i].file))
			return true;
	return false;
}

/* Whether a freshly read header describes the same code object as ci. */
static bool code_header_same(const struct py_layout *L, const uint8_t *a, const uint8_t *b)
{
	const uint32_t ptrs[] = {L->object.ob_type, L->code.name, L->code.filename,
	                         L->code.qualname, L->code.linetable};
	for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
		if (ptrs[i] != LAYOUT_ABSENT && load_u64(a, ptrs[i]) != load_u64(b, ptrs[i]))
			return false;
	return load_i32(a, L->code.firstlineno) == load_i32(b, L->code.firstlineno);
}

/* Decode the code object whose header is hdr into a new entry (which owns hdr). */
static struct code_info *code_decode(struct uw_target *t, raddr_t addr, uint8_t *hdr,
                                     struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	struct code_info *ci = calloc(1, sizeof *ci);
	if (!ci) {
		free(hdr);
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	ci->addr = addr;
	ci->header = hdr;
	ci->firstlineno = load_i32(hdr, L->code.firstlineno);
	if (L->code.code_adaptive != LAYOUT_ABSENT) {
		ci->bytecode = addr + L->code.code_adaptive;
		/* A code object is a PyVarObject: ob_size (after ob_type) counts 2-byte code units. */
		int64_t units = (int64_t)load_u64(hdr, L->object.ob_type + 8);
		if (units < 0 || units > (1 << 28)) {
			uw_fail(err, UW_ECORRUPT, "garbage code object size at 0x%llx",
			        (unsigned long long)addr);
			goto fail;
		}
		ci->bytecode_len = (uint64_t)units * 2;
	}
	/* The words of _PyInterpreterFrame before localsplus (3.11's FRAME_SPECIALS_SIZE). */
	enum { FRAME_SPECIALS_WORDS = 9 };
	int64_t words = L->code.framesize != LAYOUT_ABSENT ? load_i32(hdr, L->code.framesize)
	                : L->code.nlocalsplus != LAYOUT_ABSENT
	                    ? FRAME_SPECIALS_WORDS + (int64_t)load_i32(hdr, L->code.nlocalsplus) +
	                          load_i32(hdr, L->code.stacksize)
	                    : 0;
	ci->frame_bytes = words > 0 && words < (1 << 20) ? (uint64_t)words * 8 : 0;

	if ((ci->name = pyobj_read_str(t, load_u64(hdr, L->code.name), err)) == INTERN_FAILED ||
	    (ci->file = pyobj_read_str(t, load_u64(hdr, L->code.filename), err)) == INTERN_FAILED)
		goto fail;
	if (L->code.qualname != LAYOUT_ABSENT &&
	    (ci->qualname = pyobj_read_str(t, load_u64(hdr, L->code.qualname), err)) == INTERN_FAILED)
		goto fail;
	ci->waits = code_known_wait(t->intern.strs[ci->name], t->intern.strs[ci->file]);
	size_t table_len = 0;
	uint8_t *table = pyobj_read_bytes(t, load_u64(hdr, L->code.linetable), &table_len, err);
	if (!table)
		goto fail;
	int rc = line_table_decode(L->line_model, table, table_len, ci->firstlineno, &ci->lines);
	free(table);
	if (rc != 0) {
		uw_fail(err, UW_ECORRUPT, "garbage line table in code object at 0x%llx",
		        (unsigned long long)addr);
		goto fail;
	}
	ci->bytes = sizeof *ci + L->code.size + ci->lines.count * sizeof *ci->lines.ranges;
	return ci;
fail:
	code_info_free(ci);
	return NULL;
}

/* Put a freshly decoded entry in the cache, replacing what held its address. */
static struct code_info *code_cache_put(struct code_cache *cache, struct code_info *ci,
                                        struct uw_error *err)
{
	uint32_t hash = code_cache_hash(ci->addr);
	size_t before = hash_memory(&cache->index) + cache->cap * sizeof *cache->codes;
	if (hash_reserve(&cache->index, 1) != 0 ||
	    array_reserve((void **)&cache->codes, &cache->cap, cache->count, sizeof *cache->codes, NULL)) {
		code_info_free(ci);
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	cache->bytes += hash_memory(&cache->index) + cache->cap * sizeof *cache->codes - before;
	struct hash_slot *slot = hash_probe(&cache->index, hash, code_cache_equal, cache, &ci->addr);
	if (slot->id) {
		struct code_info **at = &cache->codes[slot->id - 1];
		cache->bytes -= (*at)->bytes;
		code_info_free(*at);
		*at = ci;
	} else {
		cache->codes[cache->count] = ci;
		hash_fill(&cache->index, slot, hash, cache->count++);
	}
	cache->bytes += ci->bytes;
	return ci;
}

bool code_checked(const struct uw_target *t, raddr_t addr)
{
	const struct code_info *cached = code_cache_find(&t->codes, addr);
	return cached && !t->opts.no_cache && cached->checked_gen == t->sample_gen;
}

struct code_info *code_get(struct uw_target *t, raddr_t addr, struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	struct code_cache *cache = &t->codes;

	struct code_info *cached = code_cache_find(cache, addr);
	if (cached && !t->opts.no_cache && cached->checked_gen == t->sample_gen) {
		t->stats.code_cache_hits++;
		return cached;
	}

	/* The header is read through the view: steady-state samples find it batched. */
	const uint8_t *hdr = view_read(t, addr, L->code.size, 0, err);
	if (!hdr)
		return NULL;
	if (load_u64(hdr, L->object.ob_type) != t->code_type) {
		uw_fail(err, UW_ECORRUPT, "object at 0x%llx is not a code object",
		        (unsigned long long)addr);
		return NULL;
	}
	if (cached && !t->opts.no_cache) {
		if (code_header_same(L, cached->header, hdr)) {
			t->stats.code_cache_hits++;
			cached->checked_gen = t->sample_gen;
			return cached;
		}
		t->stats.stale_invalidations++;
	}
	t->stats.code_cache_misses++;
	uint8_t *copy = malloc(L->code.size);
	if (!copy) {
		uw_fail(err, UW_ENOMEM, "out of memory");
		return NULL;
	}
	memcpy(copy, hdr, L->code.size);
	struct code_info *ci = code_decode(t, addr, copy, err);
	if (!ci || !code_cache_put(cache, ci, err))
		return NULL;
	ci->checked_gen = t->sample_gen;
	return ci;
}

/* The line of a byte offset into the bytecode; before the first instruction is the def line. */
static int code_line_at(const struct code_info *ci, int64_t offset)
{
	if (offset < 0)
		return ci->firstlineno;
	if (offset > UINT32_MAX)
		return -1;
	return line_table_lookup(&ci->lines, (uint32_t)offset);
}

/* Copies of a code's bytecode looked for at most: one a thread, and threads are bounded. */
#define CODE_TLBC_MAX (1u << 20)

/*
 * The first instruction of copy `index` of ci's bytecode, read this sample:
 * a copy is freed with its thread and its index given to the next, so what
 * was read in another sample may name another copy.  0 and *err when none.
 */
static raddr_t code_tlbc_copy(struct uw_target *t, struct code_info *ci, uint32_t index, struct uw_error *err)
{
	const struct py_layout *L = &t->layout;
	unsigned slot = index & (CODE_TLBC_SLOTS - 1);
	if (ci->tlbc[slot].index == index && ci->tlbc[slot].gen == t->sample_gen && ci->tlbc[slot].copy)
		return ci->tlbc[slot].copy;
	/* Read now, not from the cached header: the array moves when it grows for a new thread. */
	const uint8_t *field = view_read(t, ci->addr + L->code.tlbc, 8, 0, err);
	if (!field)
		return 0;
	raddr_t array = load_u64(field, 0); /* _PyCodeArray: Py_ssize_t size, char *entries[size] */
	const uint8_t *size = array && index < CODE_TLBC_MAX ? view_read(t, array, 8, 0, err) : NULL;
	if (!size) {
		if (!array || index >= CODE_TLBC_MAX)
			uw_fail(err, UW_ECORRUPT, "code object at 0x%llx has no bytecode copy %u",
			        (unsigned long long)ci->addr, index);
		return 0;
	}
	if (index >= load_u64(size, 0)) {
		uw_fail(err, UW_ECORRUPT, "code object at 0x%llx has no bytecode copy %u",
		        (unsigned long long)ci->addr, index);
		return 0;
	}
	const uint8_t *entry = view_read(t, array + 8 + 8 * (uint64_t)index, 8, 0, err);
	raddr_t copy = entry ? load_u64(entry, 0) : 0;
	if (entry && !copy)
		uw_fail(err, UW_ECORRUPT, "code object at 0x%llx has no bytecode copy %u",
		        (unsigned long long)ci->addr, index);
	if (copy) {
		ci->tlbc[slot].index = index;
		ci->tlbc[slot].gen = t->sample_gen;
		ci->tlbc[slot].copy = copy;
	}
	return copy;
}

int code_tlbc_pos(struct uw_target *t, struct code_info *ci, uint32_t index, uint64_t *pos,
                  struct uw_error *err)
{
	if (!index || t->layout.code.tlbc == LAYOUT_ABSENT)
		return 0;
	raddr_t copy = code_tlbc_copy(t, ci, index, err);
	if (!copy)
		return -1;
	if (*pos + 2 < copy || *pos > copy + ci->bytecode_len)
		return uw_fail(err, UW_ECORRUPT, "an instruction outside its thread's copy of code 0x%llx",
		               (unsigned long long)ci->addr);
	*pos = ci->bytecode + (*pos - copy);
	return 0;
}

/*
 * pos is what the frame holds: 3.11+ the instruction pointer; 3.8-3.10 f_lasti
 * in the low half and, when the frame is traced, f_lineno in the high half.
 */
static int code_line_of_pos(const struct uw_target *t, const struct code_info *ci, uint64_t pos)
{
	switch (t->layout.lasti_model) {
	case LASTI_INSTR_PTR: {
		int64_t offset = (int64_t)(pos - ci->bytecode);
		/* Outside the code object: a thread's copy the caller did not map back (code_tlbc_pos). */
		if (offset > (int64_t)ci->bytecode_len)
			return -1;
		return code_line_at(ci, offset);
	}
	case LASTI_BYTES:
	case LASTI_CODEUNITS:
		break;
	}
	int32_t traced_line = (int32_t)(pos >> 32);
	if (traced_line)
		return traced_line;
	int64_t lasti = (int32_t)(uint32_t)pos;
	return code_line_at(ci, t->layout.lasti_model == LASTI_CODEUNITS ? lasti * 2 : lasti);
}

uint32_t code_frame_at(struct uw_target *t, struct code_info *ci, uint64_t pos)
{
	unsigned slot = (unsigned)(pos >> 1) & (CODE_LINE_SLOTS - 1);
	if (!t->opts.no_cache && ci->slot_frame[slot] && ci->slot_pos[slot] == pos)
		return ci->slot_frame[slot];
	struct frame_key key = {.function = ci->name,
	                        .qualname = ci->qualname,
	                        .file = ci->file,
	                        .line = code_line_of_pos(t, ci, pos),
	                        .kind = UW_FRAME_PYTHON,
	                        .first_line = ci->firstlineno,
	                        .waits = ci->waits};
	uint32_t id = intern_frame(&t->intern, &key);
	if (id != INTERN_FAILED) {
		ci->slot_pos[slot] = pos;
		ci->slot_frame[slot] = id;
	}
	return id;
}
