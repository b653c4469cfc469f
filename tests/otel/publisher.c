/*
 * A test-only publisher of OpenTelemetry's process context (OTEP 4719) and
 * thread context (OTEP 4947), loaded by tests/targets/otel_records.py with
 * ctypes.  Built three times, differing only in how otel_thread_ctx_v1 is
 * reached: TLSDESC, general dynamic, initial exec (see README.md).
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "otlp_profiles.pb-c.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

#define OTEL_API __attribute__((visibility("default")))
#ifdef OTEL_PUB_INITIAL_EXEC
#define OTEL_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#define OTEL_TLS_MODEL
#endif

/* OTEP 4947's record: packed, native endianness, 2-byte aligned. */
struct __attribute__((packed, aligned(2))) otel_record {
	uint8_t trace_id[16];
	uint8_t span_id[8];
	uint8_t valid;
	uint8_t trace_flags;
	uint16_t attrs_data_size;
	uint8_t attrs_data[]; /* key index, length, that many bytes of UTF-8; repeated */
};

#define OTEL_RECORD_BUF 640
#define OTEL_RECORD_HEAD offsetof(struct otel_record, attrs_data)
_Static_assert(OTEL_RECORD_HEAD == 28, "OTEP 4947 record header is 28 bytes");

/* OTEP 4719's header, at the start of the mapping. */
struct otel_ctx_header {
	char signature[8];
	uint32_t version;
	uint32_t payload_size;
	uint64_t published_at_ns;
	uint64_t payload; /* an address in this process */
};
_Static_assert(sizeof(struct otel_ctx_header) == 32, "OTEP 4719 header is 32 bytes");

/* The library's face, what ctypes calls. */
OTEL_API int otel_attach(const uint8_t *trace16, const uint8_t *span8, const uint8_t *attrs,
                         uint32_t attrs_len);
OTEL_API void otel_detach(void);
OTEL_API int otel_publish_process(const char *service_name, const char *const *keys,
                                  uint32_t nkeys);

/* Exported so a reader finds it by name in .dynsym; "used" keeps it if nothing here read it. */
OTEL_API __attribute__((used)) OTEL_TLS_MODEL _Thread_local struct otel_record *otel_thread_ctx_v1;

/*
 * This thread's record buffer, from the heap rather than TLS: the TLS block
 * stays 16 bytes, as the initial-exec variant takes it from glibc's small
 * static TLS surplus (1-1.5 KB here) that other libraries share.  Never freed:
 * a test's few threads.
 */
static OTEL_TLS_MODEL _Thread_local struct otel_record *otel_own_record;

/* The compiler alone must keep these stores in order: a reader stops or samples this very thread. */
static void otel_compiler_fence(void)
{
	atomic_signal_fence(memory_order_seq_cst);
}

int otel_attach(const uint8_t *trace16, const uint8_t *span8, const uint8_t *attrs, uint32_t attrs_len)
{
	if (attrs_len > OTEL_RECORD_BUF - OTEL_RECORD_HEAD)
		return -1;
	struct otel_record *r = otel_own_record;
	if (!r) {
		r = aligned_alloc(16, OTEL_RECORD_BUF);
		if (!r)
			return -1;
		otel_own_record = r;
	}
	/* Unpublished while written, so a reader never sees half a record. */
	otel_thread_ctx_v1 = NULL;
	otel_compiler_fence();
	r->valid = 0;
	memcpy(r->trace_id, trace16, sizeof r->trace_id);
	memcpy(r->span_id, span8, sizeof r->span_id);
	r->trace_flags = 1;
	r->attrs_data_size = (uint16_t)attrs_len;
	if (attrs_len)
		memcpy(r->attrs_data, attrs, attrs_len);
	otel_compiler_fence();
	r->valid = 1;
	otel_compiler_fence();
	otel_thread_ctx_v1 = r;
	return 0;
}

void otel_detach(void)
{
	otel_thread_ctx_v1 = NULL;
	otel_compiler_fence();
}

/* The one process context: the mapping, its size, the payload's heap copy when too big for it. */
static struct otel_ctx_header *otel_ctx;
static size_t otel_ctx_len;
static uint8_t *otel_ctx_heap_payload;

/* Now, in ns since the epoch, never 0 and never the last value published (readers compare them). */
static uint64_t otel_now_ns(uint64_t last)
{
	struct timespec ts;
	uint64_t ns = 1;
	if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
		ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (ns == 0 || ns == last)
		ns = last + 1;
	return ns;
}

/* A string AnyValue. */
static void otel_string(Pyprofd__Otlp__AnyValue *v, const char *s)
{
	pyprofd__otlp__any_value__init(v);
	v->value_case = PYPROFD__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
	v->string_value = (char *)s;
}

/*
 * The Resource {service.name, threadlocal.schema_version,
 * threadlocal.attribute_key_map}, packed into a malloc'd buffer of *len
 * bytes.  A record names a key by one byte, so at most 256 keys.
 */
static uint8_t *otel_pack_resource(const char *service_name, const char *const *keys, uint32_t nkeys,
                                   size_t *len)
{
	if (nkeys > 256)
		return NULL;
	Pyprofd__Otlp__AnyValue key_values[256], *key_ptrs[256];
	for (uint32_t i = 0; i < nkeys; i++) {
		otel_string(&key_values[i], keys[i]);
		key_ptrs[i] = &key_values[i];
	}
	Pyprofd__Otlp__ArrayValue key_array = PYPROFD__OTLP__ARRAY_VALUE__INIT;
	key_array.n_values = nkeys;
	key_array.values = key_ptrs;

	Pyprofd__Otlp__AnyValue service, schema;
	otel_string(&service, service_name);
	otel_string(&schema, "tlsdesc_v1_dev");
	Pyprofd__Otlp__AnyValue key_map = PYPROFD__OTLP__ANY_VALUE__INIT;
	key_map.value_case = PYPROFD__OTLP__ANY_VALUE__VALUE_ARRAY_VALUE;
	key_map.array_value = &key_array;

	Pyprofd__Otlp__KeyValue kv[3] = {
		PYPROFD__OTLP__KEY_VALUE__INIT, PYPROFD__OTLP__KEY_VALUE__INIT,
		PYPROFD__OTLP__KEY_VALUE__INIT,
	};
	kv[0].key = "service.name";
	kv[0].value = &service;
	kv[1].key = "threadlocal.schema_version";
	kv[1].value = &schema;
	kv[2].key = "threadlocal.attribute_key_map";
	kv[2].value = &key_map;
	Pyprofd__Otlp__KeyValue *attrs[3] = { &kv[0], &kv[1], &kv[2] };
	Pyprofd__Otlp__Resource res = PYPROFD__OTLP__RESOURCE__INIT;
	res.n_attributes = 3;
	res.attributes = attrs;

	size_t sz = pyprofd__otlp__resource__get_packed_size(&res);
	uint8_t *out = malloc(sz ? sz : 1);
	if (out)
		*len = pyprofd__otlp__resource__pack(&res, out);
	return out;
}

/*
 * A shared mapping of len bytes: a memfd's, which maps names
 * "/memfd:OTEL_CTX" (*by_fd set), else anonymous, which only a name given by
 * prctl lets a reader find.
 */
static void *otel_map(size_t len, int *by_fd)
{
	void *p = MAP_FAILED;
	int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
	if (fd >= 0) {
		if (ftruncate(fd, (off_t)len) == 0)
			p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	}
	*by_fd = p != MAP_FAILED;
	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* Names the mapping "[anon_shmem:OTEL_CTX]"; kernels without CONFIG_ANON_VMA_NAME (or < 5.17) refuse. */
static int otel_name(void)
{
	return prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)otel_ctx, otel_ctx_len,
	             (unsigned long)"OTEL_CTX");
}

/*
 * Publishes the Resource of otel_pack_resource, keys[i] being key index i of
 * the thread records.  The first call maps and fills the header, signature
 * last; later ones follow the OTEP's update protocol, published_at_ns 0 while
 * the payload changes.  One thread publishes.  0, or -1.
 */
int otel_publish_process(const char *service_name, const char *const *keys, uint32_t nkeys)
{
	size_t len;
	uint8_t *payload = otel_pack_resource(service_name, keys, nkeys, &len);
	if (!payload || len > UINT32_MAX) {
		free(payload);
		return -1;
	}

	if (!otel_ctx) {
		long page = sysconf(_SC_PAGESIZE);
		size_t pg = page > 0 ? (size_t)page : 4096;
		size_t maplen = (sizeof *otel_ctx + len + pg - 1) / pg * pg;
		int by_fd;
		struct otel_ctx_header *h = otel_map(maplen, &by_fd);
		if (!h) {
			free(payload);
			return -1;
		}
		/* A child of fork has none: it would publish a parent's resource. */
		if (madvise(h, maplen, MADV_DONTFORK) != 0) {
			munmap(h, maplen);
			free(payload);
			return -1;
		}
		memcpy(h + 1, payload, len);
		free(payload);
		h->version = 2;
		h->payload_size = (uint32_t)len;
		h->payload = (uint64_t)(uintptr_t)(h + 1);
		h->published_at_ns = otel_now_ns(0);
		atomic_thread_fence(memory_order_seq_cst);
		memcpy(h->signature, "OTEL_CTX", sizeof h->signature);
		otel_ctx = h;
		otel_ctx_len = maplen;
		/* Neither the memfd's name nor one of our own: no reader can find it (the OTEP's rule). */
		if (otel_name() != 0 && !by_fd) {
			munmap(h, maplen);
			otel_ctx = NULL;
			otel_ctx_len = 0;
			return -1;
		}
		return 0;
	}

	/* An update: readers see published_at_ns 0, or a different one after, and read again. */
	uint64_t last = otel_ctx->published_at_ns;
	otel_ctx->published_at_ns = 0;
	atomic_thread_fence(memory_order_seq_cst);
	uint8_t *old_heap = otel_ctx_heap_payload;
	if (len <= otel_ctx_len - sizeof *otel_ctx) {
		memcpy(otel_ctx + 1, payload, len);
		free(payload);
		otel_ctx->payload = (uint64_t)(uintptr_t)(otel_ctx + 1);
		otel_ctx_heap_payload = NULL;
	} else {
		/* Too big for the mapping: the OTEP lets the payload live anywhere in the process. */
		otel_ctx->payload = (uint64_t)(uintptr_t)payload;
		otel_ctx_heap_payload = payload;
	}
	otel_ctx->payload_size = (uint32_t)len;
	atomic_thread_fence(memory_order_seq_cst);
	otel_ctx->published_at_ns = otel_now_ns(last);
	free(old_heap);
	(void)otel_name(); /* the OTEP asks again, for readers that watch prctl */
	return 0;
}
