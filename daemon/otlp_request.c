/*
 * One ExportProfilesServiceRequest (proto/otlp_profiles.proto): one
 * process over one range, from the history.  A ResourceProfiles with the
 * process's resource attributes (OpenTelemetry's semantic conventions,
 * then the configured extras, then its labels), one profile of its samples
 * (the sampling mode as the period type, one sample per thread and stack
 * with thread.id), and the dictionary they index into.  A request per
 * process keeps a collector's partial success unambiguous: when it
 * rejects the profile, nothing of the request was taken, and it is sent
 * again whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "array.h"
#include "hash.h"
#include "otlp.h"
#include "otlp_profiles.pb-c.h"
#include "store.h"
#include "vocab.h"

/* Growing arrays of message pointers, handed to the messages when packed. */
#define OTLP_TABLE(type) \
	struct {             \
		type **v;        \
		size_t n, cap;   \
	}

struct otlp_request {
	struct arena arena; /* every message and string of the request */
	struct hash_map index; /* a table entry's identity (tagged bytes) -> its index */
	OTLP_TABLE(char) strings;
	OTLP_TABLE(Pyprofd__Otlp__Function) functions;
	OTLP_TABLE(Pyprofd__Otlp__Location) locations;
	OTLP_TABLE(Pyprofd__Otlp__Stack) stacks;
	OTLP_TABLE(Pyprofd__Otlp__KeyValueAndUnit) attributes;
	OTLP_TABLE(Pyprofd__Otlp__KeyValue) resource;
	OTLP_TABLE(Pyprofd__Otlp__Sample) samples;
	OTLP_TABLE(Pyprofd__Otlp__Link) links; /* entry 0 the zero link: a sample in no span */
	OTLP_TABLE(Pyprofd__Otlp__Mapping) mappings; /* entry 0 the zero mapping: Python frames and markers */
	int32_t *locs; /* one stack's location indexes, leaf first */
	size_t locs_cap;
	Pyprofd__Otlp__Profile *profile;
	Pyprofd__Otlp__ResourceProfiles *rp;
	uint64_t nsamples; /* the sum of the sample values */
	bool failed;       /* out of memory: the request cannot be sent */
};

/* Makes room for one more entry of a table; -1 when out of memory. */
#define OTLP_TABLE_ROOM(t) array_reserve((void **)&(t).v, &(t).cap, (t).n, sizeof *(t).v, NULL)

/* The index of an entry by its identity, or -1: *fresh says it is new (its index: the table's n). */
static int32_t otlp_intern(struct otlp_request *q, char tag, const void *key, size_t len,
                           size_t table_n, bool *fresh)
{
	char buf[512];
	char *k = len + 1 <= sizeof buf ? buf : malloc(len + 1);
	if (!k)
		return -1;
	k[0] = tag;
	memcpy(k + 1, key, len);
	int64_t v;
	*fresh = false;
	int32_t index = -1;
	if (hash_map_get(&q->index, k, len + 1, &v))
		index = (int32_t)v;
	else if (table_n < INT32_MAX && hash_map_put(&q->index, k, len + 1, (int64_t)table_n) == 0) {
		*fresh = true;
		index = (int32_t)table_n;
	}
	if (k != buf)
		free(k);
	return index;
}

/* A string's index in the string table, added on first use; -1 out of memory. */
static int32_t otlp_string(struct otlp_request *q, const char *s)
{
	if (!s)
		s = "";
	bool fresh;
	int32_t i = otlp_intern(q, 's', s, strlen(s), q->strings.n, &fresh);
	if (i < 0 || !fresh)
		return i;
	char *copy = arena_strdup(&q->arena, s);
	if (!copy || OTLP_TABLE_ROOM(q->strings) < 0)
		return -1;
	q->strings.v[q->strings.n++] = copy;
	return i;
}

static Pyprofd__Otlp__AnyValue *otlp_value_string(struct otlp_request *q, const char *s)
{
	Pyprofd__Otlp__AnyValue *v = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__AnyValue,
	                                           PYPROFD__OTLP__ANY_VALUE__INIT);
	if (v) {
		v->value_case = PYPROFD__OTLP__ANY_VALUE__VALUE_STRING_VALUE;
		if (!(v->string_value = arena_strdup(&q->arena, s ? s : "")))
			return NULL;
	}
	return v;
}

static Pyprofd__Otlp__AnyValue *otlp_value_int(struct otlp_request *q, int64_t i)
{
	Pyprofd__Otlp__AnyValue *v = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__AnyValue,
	                                           PYPROFD__OTLP__ANY_VALUE__INIT);
	if (v) {
		v->value_case = PYPROFD__OTLP__ANY_VALUE__VALUE_INT_VALUE;
		v->int_value = i;
	}
	return v;
}

/* An integer attribute of the dictionary's table (a sample's thread.id); -1 out of memory. */
static int32_t otlp_attribute_int(struct otlp_request *q, const char *key, int64_t value)
{
	int32_t k = otlp_string(q, key);
	if (k < 0)
		return -1;
	int64_t ident[2] = {k, value};
	bool fresh;
	int32_t i = otlp_intern(q, 'a', ident, sizeof ident, q->attributes.n, &fresh);
	if (i < 0 || !fresh)
		return i;
	Pyprofd__Otlp__KeyValueAndUnit *a = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__KeyValueAndUnit,
	                                                  PYPROFD__OTLP__KEY_VALUE_AND_UNIT__INIT);
	if (!a || !(a->value = otlp_value_int(q, value)) || OTLP_TABLE_ROOM(q->attributes) < 0)
		return -1;
	a->key_strindex = k;
	q->attributes.v[q->attributes.n++] = a;
	return i;
}

/* A string attribute of the dictionary's table (a sample's thread.name); -1 out of memory. */
static int32_t otlp_attribute_string(struct otlp_request *q, const char *key, const char *value)
{
	int32_t k = otlp_string(q, key);
	if (k < 0)
		return -1;
	/* Interned by key and value: the key's index, then the value's bytes. */
	char ident[sizeof k + OTLP_ATTRIBUTE_VALUE_MAX];
	size_t len = strnlen(value, OTLP_ATTRIBUTE_VALUE_MAX);
	memcpy(ident, &k, sizeof k);
	memcpy(ident + sizeof k, value, len);
	bool fresh;
	int32_t i = otlp_intern(q, 'n', ident, sizeof k + len, q->attributes.n, &fresh);
	if (i < 0 || !fresh)
		return i;
	Pyprofd__Otlp__KeyValueAndUnit *a = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__KeyValueAndUnit,
	                                                  PYPROFD__OTLP__KEY_VALUE_AND_UNIT__INIT);
	if (!a || !(a->value = otlp_value_string(q, value)) || OTLP_TABLE_ROOM(q->attributes) < 0)
		return -1;
	a->key_strindex = k;
	q->attributes.v[q->attributes.n++] = a;
	return i;
}

/*
 * What the history knows of a frame, as OTLP's function and line: the one
 * place that says which stored fields make a function's identity (its
 * name, file and first line) and which the line a sample was on.
 */
struct otlp_frame_identity {
	const char *name, *system_name, *file;
	int64_t start_line, line;
	uint64_t address; /* a C frame's, in its module's file; 0 for the rest */
};
static void otlp_frame_identity(const struct store_frame *f, struct otlp_frame_identity *out)
{
	const char *name = f->function && *f->function ? f->function : NULL;
	if (!name)
		name = f->kind == 1 ? "<native>" : f->kind == 2 ? "<GC>" : f->kind == 3 ? "<moving>" : "<unknown>";
	*out = (struct otlp_frame_identity){
		.name = name,
		.system_name = name,
		.file = f->file ? f->file : "",
		.start_line = f->first_line > 0 ? f->first_line : 0,
		.line = f->kind != UW_FRAME_C && f->line > 0 ? f->line : 0,
		.address = f->kind == UW_FRAME_C && f->line > 0 ? (uint64_t)f->line : 0,
	};
}

/*
 * The mapping of a C frame's module (its file, and its build id as the
 * attribute process.executable.build_id.gnu), added on first use; 0 for
 * the rest, -1 out of memory.  It spans the module's file addresses from
 * 0, as the frames' addresses are.
 */
static int32_t otlp_mapping(struct otlp_request *q, const struct store_frame *f)
{
	if (f->kind != UW_FRAME_C)
		return 0;
	int32_t file = otlp_string(q, f->file ? f->file : ""), build_id = otlp_string(q, f->build_id ? f->build_id : "");
	if (file < 0 || build_id < 0)
		return -1;
	int64_t key[2] = {file, build_id};
	bool fresh;
	int32_t at = otlp_intern(q, 'm', key, sizeof key, q->mappings.n, &fresh);
	if (at < 0 || !fresh)
		return at;
	Pyprofd__Otlp__Mapping *m = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Mapping, PYPROFD__OTLP__MAPPING__INIT);
	if (!m || OTLP_TABLE_ROOM(q->mappings) < 0)
		return -1;
	m->filename_strindex = file;
	if (build_id) {
		int32_t attribute = otlp_attribute_string(q, "process.executable.build_id.gnu", f->build_id);
		if (attribute < 0 || !(m->attribute_indices = arena_alloc(&q->arena, sizeof *m->attribute_indices)))
			return -1;
		m->attribute_indices[0] = attribute;
		m->n_attribute_indices = 1;
	}
	q->mappings.v[q->mappings.n++] = m;
	return at;
}

/* The location of a frame (its function and line), added on first use; -1 out of memory. */
static int32_t otlp_location(struct otlp_request *q, const struct store_frame *f)
{
	struct otlp_frame_identity id;
	otlp_frame_identity(f, &id);
	int32_t name = otlp_string(q, id.name), sys = otlp_string(q, id.system_name),
	        file = otlp_string(q, id.file);
	if (name < 0 || sys < 0 || file < 0)
		return -1;
	int64_t fkey[4] = {name, sys, file, id.start_line};
	bool fresh;
	int32_t fn = otlp_intern(q, 'f', fkey, sizeof fkey, q->functions.n, &fresh);
	if (fn < 0)
		return -1;
	if (fresh) {
		Pyprofd__Otlp__Function *m = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Function,
		                                           PYPROFD__OTLP__FUNCTION__INIT);
		if (!m || OTLP_TABLE_ROOM(q->functions) < 0)
			return -1;
		m->name_strindex = name;
		m->system_name_strindex = sys;
		m->filename_strindex = file;
		m->start_line = id.start_line;
		q->functions.v[q->functions.n++] = m;
	}
	int32_t mapping = otlp_mapping(q, f);
	if (mapping < 0)
		return -1;
	int64_t lkey[4] = {fn, id.line, mapping, (int64_t)id.address};
	int32_t loc = otlp_intern(q, 'l', lkey, sizeof lkey, q->locations.n, &fresh);
	if (loc < 0 || !fresh)
		return loc;
	Pyprofd__Otlp__Location *l = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Location,
	                                           PYPROFD__OTLP__LOCATION__INIT);
	Pyprofd__Otlp__Line *line = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Line,
	                                          PYPROFD__OTLP__LINE__INIT);
	if (!l || !line || !(l->lines = arena_alloc(&q->arena, sizeof *l->lines)) ||
	    OTLP_TABLE_ROOM(q->locations) < 0)
		return -1;
	line->function_index = fn;
	line->line = id.line;
	l->lines[0] = line;
	l->n_lines = 1;
	l->mapping_index = mapping;
	l->address = id.address;
	if (mapping > 0 && id.address + 1 > q->mappings.v[mapping]->memory_limit)
		q->mappings.v[mapping]->memory_limit = id.address + 1;
	q->locations.v[q->locations.n++] = l;
	return loc;
}

/* Entry 0 of every table: the zero value the specification asks for. */
static int otlp_request_zeros(struct otlp_request *q)
{
	if (otlp_string(q, "") != 0 || OTLP_TABLE_ROOM(q->functions) < 0 ||
	    OTLP_TABLE_ROOM(q->locations) < 0 || OTLP_TABLE_ROOM(q->stacks) < 0 ||
	    OTLP_TABLE_ROOM(q->attributes) < 0 || OTLP_TABLE_ROOM(q->links) < 0 ||
	    OTLP_TABLE_ROOM(q->mappings) < 0)
		return -1;
	if (!(q->mappings.v[0] = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Mapping, PYPROFD__OTLP__MAPPING__INIT)))
		return -1;
	q->mappings.n = 1;
	if (!(q->links.v[0] = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Link, PYPROFD__OTLP__LINK__INIT)))
		return -1;
	q->links.n = 1;
	if (!(q->functions.v[0] = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Function,
	                                        PYPROFD__OTLP__FUNCTION__INIT)) ||
	    !(q->locations.v[0] = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Location,
	                                        PYPROFD__OTLP__LOCATION__INIT)) ||
	    !(q->stacks.v[0] = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Stack,
	                                     PYPROFD__OTLP__STACK__INIT)) ||
	    !(q->attributes.v[0] = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__KeyValueAndUnit,
	                                         PYPROFD__OTLP__KEY_VALUE_AND_UNIT__INIT)))
		return -1;
	q->functions.n = q->locations.n = q->stacks.n = q->attributes.n = 1;
	/* The zero values are their tables' entry 0 by identity too. */
	int64_t zf[4] = {0, 0, 0, 0}, zl[4] = {0, 0, 0, 0}, zm[2] = {0, 0};
	bool fresh;
	return otlp_intern(q, 'f', zf, sizeof zf, 0, &fresh) == 0 &&
	               otlp_intern(q, 'l', zl, sizeof zl, 0, &fresh) == 0 &&
	               otlp_intern(q, 'm', zm, sizeof zm, 0, &fresh) == 0
	           ? 0
	           : -1;
}

/* One resource attribute, unless an earlier one has the key; -1 out of memory. */
static int otlp_resource_add(struct otlp_request *q, const char *key, Pyprofd__Otlp__AnyValue *v)
{
	if (!v)
		return -1;
	for (size_t i = 0; i < q->resource.n; i++)
		if (strcmp(q->resource.v[i]->key, key) == 0)
			return 0;
	Pyprofd__Otlp__KeyValue *kv = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__KeyValue,
	                                            PYPROFD__OTLP__KEY_VALUE__INIT);
	if (!kv || !(kv->key = arena_strdup(&q->arena, key)) || OTLP_TABLE_ROOM(q->resource) < 0)
		return -1;
	kv->value = v;
	q->resource.v[q->resource.n++] = kv;
	return 0;
}

static const char *otlp_label(const struct store_process *p, const char *key)
{
	for (size_t i = 0; i < p->nlabels; i++)
		if (strcmp(p->label_keys[i], key) == 0)
			return p->label_values[i];
	return NULL;
}

/* The process's resource: facts first, then the configured extras, then its labels. */
static int otlp_request_resource(struct otlp_request *q, const struct otlp_config *oc,
                                 const char *host, const struct store_process *p)
{
	const char *exe = p->executable, *slash = exe ? strrchr(exe, '/') : NULL;
	const char *service = otlp_label(p, "service"), *container = otlp_label(p, "container");
	int rc = 0;
	if (host && *host)
		rc |= otlp_resource_add(q, "host.name", otlp_value_string(q, host));
	rc |= otlp_resource_add(q, "process.pid", otlp_value_int(q, p->pid));
	if (exe && *exe) {
		rc |= otlp_resource_add(q, "process.executable.name", otlp_value_string(q, slash ? slash + 1 : exe));
		rc |= otlp_resource_add(q, "process.executable.path", otlp_value_string(q, exe));
	}
	if (p->command_line && *p->command_line)
		rc |= otlp_resource_add(q, "process.command_line", otlp_value_string(q, p->command_line));
	rc |= otlp_resource_add(q, "process.runtime.name", otlp_value_string(q, "cpython"));
	if (p->python_version && *p->python_version)
		rc |= otlp_resource_add(q, "process.runtime.version", otlp_value_string(q, p->python_version));
	rc |= otlp_resource_add(q, "process.owner.uid", otlp_value_int(q, p->uid));
	if (container && *container && strcmp(container, "*") != 0)
		rc |= otlp_resource_add(q, "container.id", otlp_value_string(q, container));
	for (size_t i = 0; oc && i < oc->resource.n; i++)
		rc |= otlp_resource_add(q, oc->resource.keys[i], otlp_value_string(q, oc->resource.values[i]));
	if (service && *service)
		rc |= otlp_resource_add(q, "service.name", otlp_value_string(q, service));
	for (size_t i = 0; i < p->nlabels; i++)
		rc |= otlp_resource_add(q, p->label_keys[i], otlp_value_string(q, p->label_values[i]));
	return rc ? -1 : 0;
}

static Pyprofd__Otlp__ValueType *otlp_value_type(struct otlp_request *q, const char *type,
                                                 const char *unit)
{
	Pyprofd__Otlp__ValueType *v = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__ValueType,
	                                            PYPROFD__OTLP__VALUE_TYPE__INIT);
	if (!v || (v->type_strindex = otlp_string(q, type)) < 0 ||
	    (v->unit_strindex = otlp_string(q, unit)) < 0)
		return NULL;
	return v;
}

struct otlp_request *otlp_request_new(const struct otlp_config *oc, const char *host,
                                      const struct store_process *p, const char *mode,
                                      unsigned rate_hz, int64_t from, int64_t until)
{
	struct otlp_request *q = calloc(1, sizeof *q);
	if (!q)
		return NULL;
	if (otlp_request_zeros(q) < 0 || otlp_request_resource(q, oc, host, p) < 0)
		goto fail;
	q->profile = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Profile, PYPROFD__OTLP__PROFILE__INIT);
	q->rp = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__ResourceProfiles,
	                      PYPROFD__OTLP__RESOURCE_PROFILES__INIT);
	Pyprofd__Otlp__ScopeProfiles *sp = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__ScopeProfiles,
	                                                 PYPROFD__OTLP__SCOPE_PROFILES__INIT);
	Pyprofd__Otlp__InstrumentationScope *scope = ARENA_MESSAGE(
		&q->arena, Pyprofd__Otlp__InstrumentationScope, PYPROFD__OTLP__INSTRUMENTATION_SCOPE__INIT);
	Pyprofd__Otlp__Resource *res = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Resource,
	                                             PYPROFD__OTLP__RESOURCE__INIT);
	if (!q->profile || !q->rp || !sp || !scope || !res ||
	    !(sp->profiles = arena_alloc(&q->arena, sizeof *sp->profiles)) ||
	    !(q->rp->scope_profiles = arena_alloc(&q->arena, sizeof *q->rp->scope_profiles)))
		goto fail;
	scope->name = (char *)"pyprofd";
	scope->version = (char *)PYPROFD_VERSION;
	sp->scope = scope;
	sp->profiles[0] = q->profile;
	sp->n_profiles = 1;
	q->rp->resource = res;
	q->rp->scope_profiles[0] = sp;
	q->rp->n_scope_profiles = 1;
	/* Samples counted, taken every period of the mode's kind: wall, cpu or gil time. */
	const char *kind = mode && *mode ? mode : "wall";
	if (!(q->profile->sample_type = otlp_value_type(q, "samples", "count")) ||
	    !(q->profile->period_type = otlp_value_type(q, kind, "nanoseconds")))
		goto fail;
	q->profile->period = rate_hz ? (int64_t)(1000000000ull / rate_hz) : 0;
	q->profile->time_unix_nano = (uint64_t)from * 1000000000ull;
	q->profile->duration_nano = (uint64_t)(until - from) * 1000000000ull;
	return q;
fail:
	otlp_request_free(q);
	return NULL;
}

/* The Link of a span (its trace and span ids), by identity; -1 out of memory. */
static int32_t otlp_link(struct otlp_request *q, const struct store_context *c)
{
	uint8_t key[STORE_TRACE_ID_LEN + STORE_SPAN_ID_LEN];
	memcpy(key, c->trace_id, STORE_TRACE_ID_LEN);
	memcpy(key + STORE_TRACE_ID_LEN, c->span_id, STORE_SPAN_ID_LEN);
	bool fresh;
	int32_t link = otlp_intern(q, 'L', key, sizeof key, q->links.n, &fresh);
	if (link < 0 || !fresh)
		return link;
	Pyprofd__Otlp__Link *l = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Link, PYPROFD__OTLP__LINK__INIT);
	if (!l || OTLP_TABLE_ROOM(q->links) < 0 ||
	    !(l->trace_id.data = arena_dup(&q->arena, c->trace_id, STORE_TRACE_ID_LEN)) ||
	    !(l->span_id.data = arena_dup(&q->arena, c->span_id, STORE_SPAN_ID_LEN)))
		return -1;
	l->trace_id.len = STORE_TRACE_ID_LEN;
	l->span_id.len = STORE_SPAN_ID_LEN;
	q->links.v[q->links.n++] = l;
	return link;
}

/*
 * A request's labels ("key=value" lines) as attributes into out (room for
 * STORE_CONTEXT_LABELS); how many, or -1 out of memory.
 */
static int otlp_context_labels(struct otlp_request *q, const char *labels, int32_t *out)
{
	int n = 0;
	for (const char *p = labels; p && *p && n < STORE_CONTEXT_LABELS;) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', len);
		if (eq && eq > p) {
			char key[STORE_CONTEXT_LABELS_BYTES], value[STORE_CONTEXT_LABELS_BYTES];
			snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
			snprintf(value, sizeof value, "%.*s", (int)(len - (size_t)(eq - p) - 1), eq + 1);
			if ((out[n++] = otlp_attribute_string(q, key, value)) < 0)
				return -1;
		}
		p = end ? end + 1 : NULL;
	}
	return n;
}

int otlp_request_sample(struct otlp_request *q, uint64_t thread_id, const char *thread_name,
                        const struct store_context *context, const struct store_frame *frames,
                        uint32_t depth, uint64_t count)
{
	if (q->failed)
		return -1;
	if (depth && array_reserve((void **)&q->locs, &q->locs_cap, depth - 1, sizeof *q->locs, NULL) < 0)
		goto fail;
	/* The history holds stacks root first; OTLP's stacks are leaf first. */
	for (uint32_t i = 0; i < depth; i++) {
		int32_t loc = otlp_location(q, &frames[depth - 1 - i]);
		if (loc < 0)
			goto fail;
		q->locs[i] = loc;
	}
	bool fresh;
	int32_t stack = otlp_intern(q, 'k', q->locs, depth * sizeof *q->locs, q->stacks.n, &fresh);
	if (stack < 0)
		goto fail;
	if (fresh) {
		Pyprofd__Otlp__Stack *st = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Stack,
		                                         PYPROFD__OTLP__STACK__INIT);
		if (!st || OTLP_TABLE_ROOM(q->stacks) < 0 ||
		    (depth && !(st->location_indices = arena_dup(&q->arena, q->locs, depth * sizeof *q->locs))))
			goto fail;
		st->n_location_indices = depth;
		q->stacks.v[q->stacks.n++] = st;
	}
	int32_t thread = otlp_attribute_int(q, "thread.id", (int64_t)thread_id);
	bool named = thread_name && *thread_name;
	int32_t name = named ? otlp_attribute_string(q, "thread.name", thread_name) : 0;
	/* Inside a span: the Link a back end follows from the span to its samples. */
	int32_t link = context && context->has_span ? otlp_link(q, context) : 0;
	int32_t labels[STORE_CONTEXT_LABELS];
	int nlabels = context ? otlp_context_labels(q, context->labels, labels) : 0;
	Pyprofd__Otlp__Sample *s = ARENA_MESSAGE(&q->arena, Pyprofd__Otlp__Sample,
	                                         PYPROFD__OTLP__SAMPLE__INIT);
	if (thread < 0 || name < 0 || link < 0 || nlabels < 0 || !s ||
	    !(s->attribute_indices = arena_alloc(&q->arena, (2 + (size_t)nlabels) * sizeof(int32_t))) ||
	    !(s->values = arena_alloc(&q->arena, sizeof(int64_t))) || OTLP_TABLE_ROOM(q->samples) < 0)
		goto fail;
	s->stack_index = stack;
	s->link_index = link;
	s->attribute_indices[0] = thread;
	s->n_attribute_indices = 1;
	if (named)
		s->attribute_indices[s->n_attribute_indices++] = name;
	for (int i = 0; i < nlabels; i++)
		s->attribute_indices[s->n_attribute_indices++] = labels[i];
	s->values[0] = (int64_t)count;
	s->n_values = 1;
	q->samples.v[q->samples.n++] = s;
	q->nsamples += count;
	return 0;
fail:
	q->failed = true;
	return -1;
}

uint64_t otlp_request_samples(const struct otlp_request *q)
{
	return q->nsamples;
}

int otlp_request_pack(struct otlp_request *q, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	if (q->failed)
		return -1;
	Pyprofd__Otlp__ProfilesDictionary dict = PYPROFD__OTLP__PROFILES_DICTIONARY__INIT;
	dict.mapping_table = q->mappings.v;
	dict.n_mapping_table = q->mappings.n;
	dict.link_table = q->links.v;
	dict.n_link_table = q->links.n;
	dict.string_table = q->strings.v;
	dict.n_string_table = q->strings.n;
	dict.function_table = q->functions.v;
	dict.n_function_table = q->functions.n;
	dict.location_table = q->locations.v;
	dict.n_location_table = q->locations.n;
	dict.stack_table = q->stacks.v;
	dict.n_stack_table = q->stacks.n;
	dict.attribute_table = q->attributes.v;
	dict.n_attribute_table = q->attributes.n;
	q->rp->resource->attributes = q->resource.v;
	q->rp->resource->n_attributes = q->resource.n;
	q->profile->samples = q->samples.v;
	q->profile->n_samples = q->samples.n;
	Pyprofd__Otlp__ResourceProfiles *rps[1] = {q->rp};
	Pyprofd__Otlp__ExportProfilesServiceRequest req =
		PYPROFD__OTLP__EXPORT_PROFILES_SERVICE_REQUEST__INIT;
	req.resource_profiles = rps;
	req.n_resource_profiles = 1;
	req.dictionary = &dict;
	size_t n = pyprofd__otlp__export_profiles_service_request__get_packed_size(&req);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return -1;
	pyprofd__otlp__export_profiles_service_request__pack(&req, buf);
	*out = buf;
	*len = n;
	return 0;
}

void otlp_request_free(struct otlp_request *q)
{
	if (!q)
		return;
	arena_free(&q->arena);
	hash_map_clear(&q->index);
	free(q->strings.v);
	free(q->functions.v);
	free(q->locations.v);
	free(q->stacks.v);
	free(q->attributes.v);
	free(q->resource.v);
	free(q->samples.v);
	free(q->links.v);
	free(q->mappings.v);
	free(q->locs);
	free(q);
}

/* ---- one process's range, from the history ---- */

struct otlp_collect {
	struct otlp_request *q;
	uint64_t thread_id;
};

static int otlp_collect_row(void *ctx, const struct store_row *row)
{
	struct otlp_collect *c = ctx;
	const char *name = row->thread ? row->thread->name : NULL;
	return otlp_request_sample(c->q, c->thread_id, name, row->context, row->frames, row->depth, row->count) < 0;
}

struct otlp_process_copy {
	struct store_process p;
	bool found;
	struct arena *a;
};

/* Keeps the one process a target query finds (its strings into the arena). */
static int otlp_keep_process(void *ctx, const struct store_process *p)
{
	struct otlp_process_copy *c = ctx;
	c->p = *p;
	c->p.executable = arena_strdup(c->a, p->executable);
	c->p.command_line = arena_strdup(c->a, p->command_line);
	c->p.python_version = arena_strdup(c->a, p->python_version);
	char **k = arena_alloc(c->a, (p->nlabels + 1) * sizeof *k);
	char **v = arena_alloc(c->a, (p->nlabels + 1) * sizeof *v);
	if (!k || !v)
		return 1;
	for (size_t i = 0; i < p->nlabels; i++)
		if (!(k[i] = arena_strdup(c->a, p->label_keys[i])) ||
		    !(v[i] = arena_strdup(c->a, p->label_values[i])))
			return 1;
	c->p.label_keys = (const char *const *)k;
	c->p.label_values = (const char *const *)v;
	c->found = true;
	return 0;
}

struct otlp_request *otlp_request_from_history(struct store_reader *r, const struct otlp_config *oc,
                                               const char *host, int64_t target_id, int64_t from,
                                               int64_t until, bool no_idle, char *why,
                                               size_t why_len)
{
	struct store_error err = {{0}};
	struct arena a = {0};
	struct otlp_process_copy pc = {.a = &a};
	struct store_query sel = {.target_id = target_id, .from_unix = (double)from,
	                          .until_unix = (double)until, .no_idle = no_idle};
	uint32_t rate = 0;
	char mode[16] = "";
	uint64_t *threads = NULL;
	size_t nthreads = 0;
	struct otlp_request *q = NULL;
	if (store_query_processes(r, &sel, otlp_keep_process, &pc, &err) < 0 ||
	    store_query_sampling(r, &sel, &rate, mode, sizeof mode, &err) < 0 ||
	    store_query_threads(r, target_id, from, until, &threads, &nthreads, &err) < 0) {
		snprintf(why, why_len, "reading the history: %.200s", err.msg[0] ? err.msg : "out of memory");
		goto done;
	}
	if (!pc.found) {
		/* Nothing in the range: an empty profile of an unknown process says so as well as none. */
		pc.p = (struct store_process){.target_id = target_id};
	}
	if (!(q = otlp_request_new(oc, host, &pc.p, mode, rate, from, until))) {
		snprintf(why, why_len, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < nthreads; i++) {
		struct otlp_collect c = {.q = q, .thread_id = threads[i]};
		struct store_query tq = sel;
		tq.by_thread = true;
		tq.thread_id = threads[i];
		/* Split by thread too, so each row says the thread's name; by request, its span and labels. */
		tq.split_threads = true;
		tq.split_contexts = true;
		if (store_query_stacks(r, &tq, otlp_collect_row, &c, NULL, &err) < 0) {
			snprintf(why, why_len, "reading the history: %.200s",
			         q->failed ? "out of memory" : err.msg);
			otlp_request_free(q);
			q = NULL;
			goto done;
		}
	}
done:
	free(threads);
	arena_free(&a);
	return q;
}
