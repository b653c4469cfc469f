/*
 * Messages of the protocol printed for people, each from one description of
 * its fields: the same table gives the JSON object (--json), the text lines
 * and the cells of a table, so the two forms cannot drift apart.  A key
 * "group.name" is the member `name` of the JSON object `group`, and is
 * printed whole in text.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "export.h"

#define FIELD(msg, key, type, member, ...) {key, type, offsetof(msg, member), __VA_ARGS__}

const struct field fields_target[] = {
	FIELD(Pyprofd__Target, "pid", FIELD_INT32, pid, 0),
	FIELD(Pyprofd__Target, "start_time", FIELD_UINT64, start_time, 0),
	FIELD(Pyprofd__Target, "uid", FIELD_UINT32, uid, 0),
	FIELD(Pyprofd__Target, "state", FIELD_STRING, state, 0),
	FIELD(Pyprofd__Target, "python_version", FIELD_STRING, python_version, 0),
	FIELD(Pyprofd__Target, "rate_hz", FIELD_UINT32, rate_hz, 0),
	FIELD(Pyprofd__Target, "effective_rate_hz", FIELD_UINT32, effective_rate_hz, 0),
	FIELD(Pyprofd__Target, "rate_lowered_by", FIELD_STRING, rate_lowered_by, 0),
	FIELD(Pyprofd__Target, "rule", FIELD_STRING, rule, 0),
	FIELD(Pyprofd__Target, "parent", FIELD_INT32, parent, 0),
	FIELD(Pyprofd__Target, "mode", FIELD_MODE, mode, 0),
	FIELD(Pyprofd__Target, "async_mode", FIELD_ASYNC_MODE, async_mode, 0),
	FIELD(Pyprofd__Target, "samples", FIELD_UINT64, samples, 0),
	FIELD(Pyprofd__Target, "thread_samples", FIELD_UINT64, thread_samples, 0),
	FIELD(Pyprofd__Target, "errors", FIELD_UINT64, errors, 0),
	FIELD(Pyprofd__Target, "labels", FIELD_LABELS, n_labels, 0),
	FIELD(Pyprofd__Target, "executable", FIELD_STRING, executable, 0),
	FIELD(Pyprofd__Target, "command_line", FIELD_STRING, command_line, 0),
	FIELD(Pyprofd__Target, "attached_at", FIELD_DOUBLE, attached_at, 3),
	FIELD(Pyprofd__Target, "duration_s", FIELD_DOUBLE, duration_s, 1),
	FIELD(Pyprofd__Target, "sessions", FIELD_UINT64, sessions, 0),
	FIELD(Pyprofd__Target, "threads", FIELD_THREADS, n_threads, 0),
	FIELD(Pyprofd__Target, "context", FIELD_STRING, context, 0),
	FIELD(Pyprofd__Target, "context_labels", FIELD_STRINGS, n_context_labels, 0),
	FIELD(Pyprofd__Target, "context_samples", FIELD_UINT64, context_samples, 0),
	FIELD(Pyprofd__Target, "contexts_cut", FIELD_UINT64, contexts_cut, 0),
	FIELD(Pyprofd__Target, "context_values_folded", FIELD_UINT64, context_values_folded, 0),
};
const size_t fields_ntarget = sizeof fields_target / sizeof fields_target[0];

const struct field fields_status[] = {
	FIELD(Pyprofd__StatusResult, "version", FIELD_STRING, version, 0),
	FIELD(Pyprofd__StatusResult, "pid", FIELD_INT32, pid, 0),
	FIELD(Pyprofd__StatusResult, "uptime_s", FIELD_DOUBLE, uptime_s, 1),
	FIELD(Pyprofd__StatusResult, "own_only", FIELD_BOOL, own_only, 0),
	FIELD(Pyprofd__StatusResult, "targets_sampling", FIELD_UINT32, targets_sampling, 0),
	FIELD(Pyprofd__StatusResult, "targets_detached", FIELD_UINT32, targets_detached, 0),
	FIELD(Pyprofd__StatusResult, "targets_exited", FIELD_UINT32, targets_exited, 0),
	FIELD(Pyprofd__StatusResult, "connections", FIELD_UINT32, connections, 0),
	FIELD(Pyprofd__StatusResult, "connections_refused", FIELD_UINT64, connections_refused, 0),
	FIELD(Pyprofd__StatusResult, "connections_timed_out", FIELD_UINT64, connections_timed_out, 0),
	FIELD(Pyprofd__StatusResult, "queued_bytes", FIELD_UINT64, queued_bytes, 0),
	FIELD(Pyprofd__StatusResult, "queries_running", FIELD_UINT32, queries_running, 0),
	FIELD(Pyprofd__StatusResult, "discovery.method", FIELD_STRING, discovery, 0),
	FIELD(Pyprofd__StatusResult, "discovery.rules", FIELD_UINT32, rules, 0),
	FIELD(Pyprofd__StatusResult, "discovery.judged", FIELD_UINT64, processes_judged, 0),
	FIELD(Pyprofd__StatusResult, "discovery.attached", FIELD_UINT64, attached_by_rules, 0),
	FIELD(Pyprofd__StatusResult, "discovery.waiting", FIELD_UINT32, processes_waiting, 0),
	FIELD(Pyprofd__StatusResult, "discovery.events", FIELD_UINT64, discovery_events, 0),
	FIELD(Pyprofd__StatusResult, "discovery.scans", FIELD_UINT64, discovery_scans, 0),
	FIELD(Pyprofd__StatusResult, "discovery.lost", FIELD_UINT64, discovery_lost, 0),
	FIELD(Pyprofd__StatusResult, "discovery.scan_ms_last", FIELD_DOUBLE, discovery_scan_ms_last, 2),
	FIELD(Pyprofd__StatusResult, "discovery.scan_ms_max", FIELD_DOUBLE, discovery_scan_ms_max, 2),
	FIELD(Pyprofd__StatusResult, "budget.cpu_percent", FIELD_DOUBLE, cpu_budget_percent, 1),
	FIELD(Pyprofd__StatusResult, "budget.recent_cpu_percent", FIELD_DOUBLE, cpu_recent_percent, 2),
	FIELD(Pyprofd__StatusResult, "budget.factor", FIELD_DOUBLE, budget_factor, 3),
	FIELD(Pyprofd__StatusResult, "budget.over", FIELD_BOOL, over_budget, 0),
	FIELD(Pyprofd__StatusResult, "budget.uid_cpu_percent", FIELD_DOUBLE, uid_cpu_budget_percent, 1),
	FIELD(Pyprofd__StatusResult, "cache_bytes", FIELD_UINT64, cache_bytes, 0),
	FIELD(Pyprofd__StatusResult, "cache_budget_bytes", FIELD_UINT64, cache_budget_bytes, 0),
	FIELD(Pyprofd__StatusResult, "count_bytes", FIELD_UINT64, count_bytes, 0),
	FIELD(Pyprofd__StatusResult, "warm_bytes", FIELD_UINT64, warm_bytes, 0),
	FIELD(Pyprofd__StatusResult, "warm_budget_bytes", FIELD_UINT64, warm_budget_bytes, 0),
	FIELD(Pyprofd__StatusResult, "rss_bytes", FIELD_UINT64, rss_bytes, 0),
	FIELD(Pyprofd__StatusResult, "cpu_percent", FIELD_DOUBLE, cpu_percent, 2),
	FIELD(Pyprofd__StatusResult, "schedule.wakeups", FIELD_UINT64, schedule_wakeups, 0),
	FIELD(Pyprofd__StatusResult, "schedule.ticks", FIELD_UINT64, schedule_ticks, 0),
	FIELD(Pyprofd__StatusResult, "schedule.missed_ticks", FIELD_UINT64, schedule_missed_ticks, 0),
	FIELD(Pyprofd__StatusResult, "schedule.lateness_us_p50", FIELD_DOUBLE, schedule_lateness_us_p50, 1),
	FIELD(Pyprofd__StatusResult, "schedule.lateness_us_p99", FIELD_DOUBLE, schedule_lateness_us_p99, 1),
	FIELD(Pyprofd__StatusResult, "schedule.behind", FIELD_BOOL, schedule_behind, 0),
	FIELD(Pyprofd__StatusResult, "schedule.behind_since", FIELD_TIME, schedule_behind_since_unix, 0),
	FIELD(Pyprofd__StatusResult, "schedule.behind_episodes", FIELD_UINT64, schedule_behind_episodes, 0),
	FIELD(Pyprofd__StatusResult, "schedule.missed_percent", FIELD_DOUBLE, schedule_missed_percent, 1),
	FIELD(Pyprofd__StatusResult, "sampling.idle", FIELD_STRING, idle_default, 0),
	FIELD(Pyprofd__StatusResult, "kernel.reader", FIELD_STRING, kernel_reader, 0),
	FIELD(Pyprofd__StatusResult, "kernel.look", FIELD_STRING, kernel_look, 0),
	FIELD(Pyprofd__StatusResult, "kernel.copy", FIELD_STRING, kernel_copy, 0),
	FIELD(Pyprofd__StatusResult, "config.reload_failed", FIELD_TIME, config_reload_failed_unix, 0),
	FIELD(Pyprofd__StatusResult, "config.reload_error", FIELD_STRING, config_reload_error, 0),
	FIELD(Pyprofd__StatusResult, "state_dir", FIELD_STRING, state_dir, 0),
	FIELD(Pyprofd__StatusResult, "socket", FIELD_STRING, socket, 0),
	FIELD(Pyprofd__StatusResult, "history.file", FIELD_STRING, history_file, 0),
	FIELD(Pyprofd__StatusResult, "history.open", FIELD_BOOL, history_open, 0),
	FIELD(Pyprofd__StatusResult, "history.failing", FIELD_BOOL, history_failing, 0),
	FIELD(Pyprofd__StatusResult, "history.error", FIELD_STRING, history_error, 0),
	FIELD(Pyprofd__StatusResult, "history.pending_rows", FIELD_UINT64, history_pending_rows, 0),
	FIELD(Pyprofd__StatusResult, "history.rows_written", FIELD_UINT64, history_rows_written, 0),
	FIELD(Pyprofd__StatusResult, "history.dropped_rows", FIELD_UINT64, history_dropped_rows, 0),
	FIELD(Pyprofd__StatusResult, "history.bytes", FIELD_UINT64, history_bytes, 0),
	FIELD(Pyprofd__StatusResult, "history.lost_samples", FIELD_UINT64, history_lost_samples, 0),
	FIELD(Pyprofd__StatusResult, "history.cache_bytes", FIELD_UINT64, history_cache_bytes, 0),
	FIELD(Pyprofd__StatusResult, "history.cache_budget_bytes", FIELD_UINT64, history_cache_budget_bytes, 0),
	FIELD(Pyprofd__StatusResult, "history.file_changes", FIELD_UINT64, history_file_changes, 0),
	FIELD(Pyprofd__StatusResult, "history.file_change", FIELD_STRING, history_file_change, 0),
	FIELD(Pyprofd__StatusResult, "export.endpoint", FIELD_STRING, export_endpoint, 0),
	FIELD(Pyprofd__StatusResult, "export.failing", FIELD_BOOL, export_failing, 0),
	FIELD(Pyprofd__StatusResult, "export.last_error", FIELD_STRING, export_last_error, 0),
	FIELD(Pyprofd__StatusResult, "export.last_success", FIELD_TIME, export_last_success_unix, 0),
	FIELD(Pyprofd__StatusResult, "export.sent_until", FIELD_TIME, export_sent_until_unix, 0),
	FIELD(Pyprofd__StatusResult, "export.backlog_samples", FIELD_UINT64, export_backlog_samples, 0),
	FIELD(Pyprofd__StatusResult, "export.samples_sent", FIELD_UINT64, export_samples_sent, 0),
	FIELD(Pyprofd__StatusResult, "export.requests_failed", FIELD_UINT64, export_requests_failed, 0),
	FIELD(Pyprofd__StatusResult, "export.bytes_sent", FIELD_UINT64, export_bytes_sent, 0),
};
const size_t fields_nstatus = sizeof fields_status / sizeof fields_status[0];

/* The figures of `stats` after the engine's counters. */
const struct field fields_stats[] = {
	FIELD(Pyprofd__StatsResult, "achieved_rate_hz", FIELD_DOUBLE, achieved_rate_hz, 2),
	FIELD(Pyprofd__StatsResult, "jitter_us_p50", FIELD_DOUBLE, jitter_us_p50, 2),
	FIELD(Pyprofd__StatsResult, "jitter_us_p99", FIELD_DOUBLE, jitter_us_p99, 2),
	FIELD(Pyprofd__StatsResult, "sample_us_p50", FIELD_DOUBLE, sample_us_p50, 2),
	FIELD(Pyprofd__StatsResult, "sample_us_p99", FIELD_DOUBLE, sample_us_p99, 2),
	FIELD(Pyprofd__StatsResult, "cache_bytes", FIELD_UINT64, cache_bytes, 0),
	FIELD(Pyprofd__StatsResult, "missed_ticks", FIELD_UINT64, missed_ticks, 0),
};
const size_t fields_nstats = sizeof fields_stats / sizeof fields_stats[0];

const struct field fields_process[] = {
	FIELD(Pyprofd__StoredProcess, "target_id", FIELD_INT64, target_id, 0),
	FIELD(Pyprofd__StoredProcess, "pid", FIELD_INT32, pid, 0),
	FIELD(Pyprofd__StoredProcess, "uid", FIELD_UINT32, uid, 0),
	FIELD(Pyprofd__StoredProcess, "executable", FIELD_STRING, executable, 0),
	FIELD(Pyprofd__StoredProcess, "command_line", FIELD_STRING, command_line, 0),
	FIELD(Pyprofd__StoredProcess, "python_version", FIELD_STRING, python_version, 0),
	FIELD(Pyprofd__StoredProcess, "labels", FIELD_LABELS, n_labels, 0),
	FIELD(Pyprofd__StoredProcess, "first", FIELD_TIME, first_unix, 0),
	FIELD(Pyprofd__StoredProcess, "last", FIELD_TIME, last_unix, 0),
	FIELD(Pyprofd__StoredProcess, "samples", FIELD_UINT64, samples, 0),
};
const size_t fields_nprocess = sizeof fields_process / sizeof fields_process[0];

/* The member of msg a field describes. */
static const void *fields_at(const void *msg, const struct field *f)
{
	return (const char *)msg + f->offset;
}

/* A label list: its count at the field's offset, the array right after (protobuf-c's layout). */
static void fields_labels(const void *msg, const struct field *f, size_t *n,
                          Pyprofd__Label *const **labels)
{
	const size_t *count = fields_at(msg, f);
	*n = *count;
	*labels = *(Pyprofd__Label *const *const *)(count + 1);
}

/* A repeated string: its count at the field's offset, the array right after. */
static void fields_strings(const void *msg, const struct field *f, size_t *n, char *const **strings)
{
	const size_t *count = fields_at(msg, f);
	*n = *count;
	*strings = *(char *const *const *)(count + 1);
}

/* A thread list: its count at the field's offset, the array right after. */
static void fields_threads(const void *msg, const struct field *f, size_t *n,
                           Pyprofd__ThreadInfo *const **threads)
{
	const size_t *count = fields_at(msg, f);
	*n = *count;
	*threads = *(Pyprofd__ThreadInfo *const *const *)(count + 1);
}

/* A thread as text: its name, or "thread N" without one (N the kernel's id where known). */
static void fields_thread_name(const Pyprofd__ThreadInfo *t, char *buf, size_t len)
{
	if (*export_str(t->name))
		snprintf(buf, len, "%s", t->name);
	else
		snprintf(buf, len, "thread %lld",
		         t->native_thread_id > 0 ? (long long)t->native_thread_id : (long long)t->thread_id);
}

const struct field *fields_find(const struct field *fields, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(fields[i].key, key) == 0)
			return &fields[i];
	return NULL;
}

/* One value as JSON; NULL if out of memory. */
static json_t *fields_value_json(const void *msg, const struct field *f)
{
	const void *at = fields_at(msg, f);
	switch (f->type) {
	case FIELD_STRING: return export_json_string(*(char *const *)at);
	case FIELD_INT32: return json_integer(*(const int32_t *)at);
	case FIELD_UINT32: return json_integer(*(const uint32_t *)at);
	case FIELD_INT64: return json_integer(*(const int64_t *)at);
	case FIELD_UINT64: return export_json_u64(*(const uint64_t *)at);
	case FIELD_DOUBLE:
	case FIELD_TIME: return export_json_double(*(const double *)at);
	case FIELD_BOOL: return json_boolean(*(const protobuf_c_boolean *)at);
	case FIELD_MODE: return json_string(vocab_wire_mode_name(*(const Pyprofd__Mode *)at));
	case FIELD_ASYNC_MODE: {
		enum uw_async_mode m = UW_ASYNC_OFF;
		vocab_async_mode_from_wire(*(const Pyprofd__AsyncMode *)at, &m);
		return json_string(vocab_async_mode_name(m));
	}
	case FIELD_LABELS: {
		size_t n;
		Pyprofd__Label *const *labels;
		fields_labels(msg, f, &n, &labels);
		json_t *obj = json_object();
		for (size_t i = 0; obj && i < n; i++) {
			/* A key must be UTF-8 too: the JSON string form has the bad bytes replaced. */
			json_t *key = export_json_string(labels[i]->key);
			if (!key || json_object_set_new(obj, json_string_value(key),
			                                export_json_string(labels[i]->value)) != 0) {
				json_decref(obj);
				obj = NULL;
			}
			json_decref(key);
		}
		return obj;
	}
	case FIELD_STRINGS: {
		size_t n;
		char *const *strings;
		fields_strings(msg, f, &n, &strings);
		json_t *arr = json_array();
		for (size_t i = 0; arr && i < n; i++)
			if (json_array_append_new(arr, export_json_string(strings[i])) != 0) {
				json_decref(arr);
				arr = NULL;
			}
		return arr;
	}
	case FIELD_THREADS: {
		size_t n;
		Pyprofd__ThreadInfo *const *threads;
		fields_threads(msg, f, &n, &threads);
		json_t *arr = json_array();
		for (size_t i = 0; arr && i < n; i++) {
			const Pyprofd__ThreadInfo *t = threads[i];
			json_t *o = json_pack("{s:I, s:o, s:o}", "thread_id", (json_int_t)t->thread_id,
			                      "native_thread_id",
			                      t->native_thread_id > 0 ? json_integer(t->native_thread_id)
			                                              : json_null(),
			                      "name", *export_str(t->name) ? export_json_string(t->name)
			                                                   : json_null());
			if (json_array_append_new(arr, o) != 0) {
				json_decref(arr);
				arr = NULL;
			}
		}
		return arr;
	}
	}
	return NULL;
}

json_t *fields_json(const void *msg, const struct field *fields, size_t n)
{
	json_t *doc = json_object();
	for (size_t i = 0; doc && i < n; i++) {
		const char *key = fields[i].key, *dot = strchr(key, '.');
		json_t *into = doc;
		if (dot) {
			char group[64];
			snprintf(group, sizeof group, "%.*s", (int)(dot - key), key);
			into = json_object_get(doc, group);
			if (!into && json_object_set_new(doc, group, into = json_object()) != 0)
				into = NULL;
			key = dot + 1;
		}
		if (!into || json_object_set_new(into, key, fields_value_json(msg, &fields[i])) != 0) {
			json_decref(doc);
			doc = NULL;
		}
	}
	return doc;
}

/* "YYYY-MM-DD HH:MM:SS" in UTC, or the seconds when they are not a time. */
static void fields_utc(double unix_s, char *buf, size_t len)
{
	if (unix_s == 0) {
		snprintf(buf, len, "never");
		return;
	}
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%.0f", unix_s);
}

char *fields_cell(const void *msg, const struct field *f)
{
	const void *at = fields_at(msg, f);
	char buf[64], *out = NULL;
	switch (f->type) {
	case FIELD_STRING: return strdup(export_str(*(char *const *)at));
	case FIELD_INT32: snprintf(buf, sizeof buf, "%" PRId32, *(const int32_t *)at); break;
	case FIELD_UINT32: snprintf(buf, sizeof buf, "%" PRIu32, *(const uint32_t *)at); break;
	case FIELD_INT64: snprintf(buf, sizeof buf, "%" PRId64, *(const int64_t *)at); break;
	case FIELD_UINT64: snprintf(buf, sizeof buf, "%" PRIu64, *(const uint64_t *)at); break;
	case FIELD_DOUBLE: snprintf(buf, sizeof buf, "%.*f", f->decimals, *(const double *)at); break;
	case FIELD_TIME: fields_utc(*(const double *)at, buf, sizeof buf); break;
	case FIELD_BOOL: snprintf(buf, sizeof buf, "%s", *(const protobuf_c_boolean *)at ? "true" : "false"); break;
	case FIELD_MODE: snprintf(buf, sizeof buf, "%s", vocab_wire_mode_name(*(const Pyprofd__Mode *)at)); break;
	case FIELD_ASYNC_MODE: {
		enum uw_async_mode m = UW_ASYNC_OFF;
		vocab_async_mode_from_wire(*(const Pyprofd__AsyncMode *)at, &m);
		snprintf(buf, sizeof buf, "%s", vocab_async_mode_name(m));
		break;
	}
	case FIELD_LABELS: {
		size_t n, len = 1;
		Pyprofd__Label *const *labels;
		fields_labels(msg, f, &n, &labels);
		for (size_t i = 0; i < n; i++)
			len += strlen(export_str(labels[i]->key)) + strlen(export_str(labels[i]->value)) + 2;
		if (!(out = malloc(len)))
			return NULL;
		size_t o = 0;
		out[0] = '\0';
		for (size_t i = 0; i < n; i++)
			o += (size_t)snprintf(out + o, len - o, "%s%s=%s", i ? "," : "",
			                      export_str(labels[i]->key), export_str(labels[i]->value));
		return out;
	}
	case FIELD_STRINGS: {
		size_t n, len = 1;
		char *const *strings;
		fields_strings(msg, f, &n, &strings);
		for (size_t i = 0; i < n; i++)
			len += strlen(export_str(strings[i])) + 1;
		if (!(out = malloc(len)))
			return NULL;
		size_t o = 0;
		out[0] = '\0';
		for (size_t i = 0; i < n; i++)
			o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "," : "", export_str(strings[i]));
		return out;
	}
	case FIELD_THREADS: {
		size_t n, len = 1;
		Pyprofd__ThreadInfo *const *threads;
		fields_threads(msg, f, &n, &threads);
		char name[256];
		for (size_t i = 0; i < n; i++) {
			fields_thread_name(threads[i], name, sizeof name);
			len += strlen(name) + 1;
		}
		if (!(out = malloc(len)))
			return NULL;
		size_t o = 0;
		out[0] = '\0';
		for (size_t i = 0; i < n; i++) {
			fields_thread_name(threads[i], name, sizeof name);
			o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "," : "", name);
		}
		return out;
	}
	}
	return strdup(buf);
}

int fields_text(FILE *out, const void *msg, const struct field *fields, size_t n, int width)
{
	for (size_t i = 0; i < n; i++) {
		char *cell = fields_cell(msg, &fields[i]);
		if (!cell)
			return -1;
		if (width)
			fprintf(out, "%-*s ", width, fields[i].key);
		else
			fprintf(out, "%s: ", fields[i].key);
		export_put(out, cell, SIZE_MAX, 0);
		fputc('\n', out);
		free(cell);
	}
	return ferror(out) ? -1 : 0;
}

json_t *fields_target_json(const Pyprofd__Target *t)
{
	return fields_json(t, fields_target, fields_ntarget);
}
