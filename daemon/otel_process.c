/*
 * A target's OpenTelemetry process context (OTEP 4719), looked at every few
 * seconds while request contexts are asked for.  When it says the process
 * publishes thread records (OTEP 4947's threadlocal.* attributes), their
 * key map goes to the unwinder, which reads each thread's record from then
 * on in place of the SDK's ContextVar.  The payload is a Resource, decoded
 * here because the unwinder decodes no wire format.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contexts.h"
#include "log.h"
#include "otlp_profiles.pb-c.h"
#include "store.h"

/* How often a process is looked at, and the largest context read (the OTEP expects one page or so). */
#define PROCESS_CONTEXT_POLL_S 5.0
#define PROCESS_CONTEXT_MAX (64u << 10)

/* The schemas of the thread records this reader knows: the OTEP's draft name and its final one. */
static bool process_context_schema_known(const char *s)
{
	return !strcmp(s, "tlsdesc_v1_dev") || !strcmp(s, "tls_v1");
}

static const Pyprofd__Otlp__AnyValue *process_context_attr(const Pyprofd__Otlp__Resource *r, const char *key)
{
	for (size_t i = 0; i < r->n_attributes; i++)
		if (r->attributes[i] && r->attributes[i]->key && !strcmp(r->attributes[i]->key, key))
			return r->attributes[i]->value;
	return NULL;
}

static void process_context_apply(struct uw_target *uw, pid_t pid, const Pyprofd__Otlp__Resource *r,
                                  char *service_out, size_t service_len)
{
	const Pyprofd__Otlp__AnyValue *schema = process_context_attr(r, "threadlocal.schema_version");
	const Pyprofd__Otlp__AnyValue *map = process_context_attr(r, "threadlocal.attribute_key_map");
	const Pyprofd__Otlp__AnyValue *service = process_context_attr(r, "service.name");
	const char *service_name = service && service->value_case == PYPROFD__OTLP__ANY_VALUE__VALUE_STRING_VALUE
	                                   ? service->string_value
	                                   : "";
	/* Its service by the SDK's own name: a stored label, unless the process or a rule gave one. */
	if (service_out && service_len)
		snprintf(service_out, service_len, "%s", service_name);
	if (!schema || schema->value_case != PYPROFD__OTLP__ANY_VALUE__VALUE_STRING_VALUE) {
		log_info("pid %d: publishes OpenTelemetry's process context (service.name \"%s\"), without thread records",
		         (int)pid, service_name);
		return;
	}
	if (!process_context_schema_known(schema->string_value)) {
		log_warn("pid %d: its thread records are of schema \"%s\", which pyprofd does not read; its "
		         "ContextVars are read instead",
		         (int)pid, schema->string_value);
		return;
	}
	/* Key i names index i; a key that is not a string keeps its place, named "". */
	const char *names[256];
	uint32_t n = 0;
	if (map && map->value_case == PYPROFD__OTLP__ANY_VALUE__VALUE_ARRAY_VALUE && map->array_value)
		for (size_t i = 0; i < map->array_value->n_values && n < 256; i++) {
			const Pyprofd__Otlp__AnyValue *v = map->array_value->values[i];
			names[n++] = v && v->value_case == PYPROFD__OTLP__ANY_VALUE__VALUE_STRING_VALUE ? v->string_value : "";
		}
	if (uw_thread_context_keys(uw, names, n))
		log_info("pid %d: publishes OpenTelemetry's thread records (schema %s, %u keys, service.name \"%s\"): "
		         "spans and labels are read from them",
		         (int)pid, schema->string_value, n, service_name);
	else
		log_warn("pid %d: says it publishes OpenTelemetry's thread records (schema %s), but no module it "
		         "maps defines otel_thread_ctx_v1 where this reader can find it (x86-64, a TLS relocation "
		         "of the module's own); looked for again, and its ContextVars are read meanwhile",
		         (int)pid, schema->string_value);
}

void contexts_poll_process(struct uw_target *uw, pid_t pid, double now, double *polled, char *service,
                           size_t service_len)
{
	if (*polled && now - *polled < PROCESS_CONTEXT_POLL_S)
		return;
	*polled = now;
	uint8_t *buf = malloc(PROCESS_CONTEXT_MAX);
	if (!buf)
		return;
	size_t len = 0;
	struct uw_error err;
	int rc = uw_process_context(uw, buf, PROCESS_CONTEXT_MAX, &len, &err);
	if (rc < 0)
		log_warn("pid %d: its OpenTelemetry process context is left unread: %s", (int)pid, err.msg);
	if (rc == 1) {
		Pyprofd__Otlp__Resource *r = pyprofd__otlp__resource__unpack(NULL, len, buf);
		if (r) {
			process_context_apply(uw, pid, r, service, service_len);
			pyprofd__otlp__resource__free_unpacked(r, NULL);
		} else {
			log_warn("pid %d: its OpenTelemetry process context is not a Resource (%zu bytes); left unread",
			         (int)pid, len);
		}
	}
	free(buf);
}

const struct labels *contexts_process_labels(const struct labels *own, const char *service, struct labels *scratch)
{
	/* A target holding all the labels the store keeps keeps its own. */
	if (!service || !*service || labels_get(own, "service") || own->n >= STORE_MAX_LABELS)
		return own;
	if (labels_copy(scratch, own) != 0 || labels_put(scratch, "service", service) != 0) {
		labels_free(scratch);
		return own;
	}
	return scratch;
}
