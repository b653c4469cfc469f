/*
 * `pyprofd-ctl query --format processes`: which processes a range of the
 * history has samples of, with the target id that tells apart processes
 * that shared a pid.  A table with names made safe for a terminal, or JSON.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

static void utc(double unix_s, char *buf, size_t len)
{
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "%.0f", unix_s);
}

static json_t *process_json(const Pyprofd__StoredProcess *p)
{
	json_t *labels = json_object();
	for (size_t i = 0; labels && i < p->n_labels; i++) {
		/* A key must be UTF-8 too: the JSON string form has the bad bytes replaced. */
		json_t *key = format_json_string(p->labels[i]->key);
		if (!key || json_object_set_new(labels, json_string_value(key),
		                                format_json_string(p->labels[i]->value)) != 0) {
			json_decref(labels);
			labels = NULL;
		}
		json_decref(key);
	}
	return json_pack("{s:I, s:i, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "target_id",
	                 (json_int_t)p->target_id, "pid", (int)p->pid, "uid", (json_int_t)p->uid,
	                 "executable", format_json_string(p->executable), "command_line",
	                 format_json_string(p->command_line), "python_version",
	                 format_json_string(p->python_version), "labels", labels, "first",
	                 format_json_double(p->first_unix), "last", format_json_double(p->last_unix),
	                 "samples", format_json_u64(p->samples));
}

int processes_write(const struct client_reply *reply, bool json, FILE *out)
{
	if (json) {
		json_t *list = json_array();
		for (size_t k = 0; list && k < reply->nparts; k++) {
			const Pyprofd__QueryResult *r = reply->parts[k]->query;
			for (size_t i = 0; list && i < r->n_processes; i++)
				if (json_array_append_new(list, process_json(r->processes[i])) != 0) {
					json_decref(list);
					list = NULL;
				}
		}
		char *text = list ? json_dumps(list, JSON_COMPACT) : NULL;
		int rc = text && fprintf(out, "%s\n", text) > 0 ? 0 : -1;
		free(text);
		json_decref(list);
		return rc || fflush(out) != 0 || ferror(out) ? -1 : 0;
	}
	fprintf(out, "%-9s %-8s %-6s %-19s  %-19s %10s  %-8s %s\n", "TARGET", "PID", "UID",
	        "FIRST (UTC)", "LAST (UTC)", "SAMPLES", "PYTHON", "LABELS  COMMAND");
	for (size_t k = 0; k < reply->nparts; k++) {
		const Pyprofd__QueryResult *r = reply->parts[k]->query;
		for (size_t i = 0; i < r->n_processes; i++) {
			const Pyprofd__StoredProcess *p = r->processes[i];
			char first[32], last[32];
			utc(p->first_unix, first, sizeof first);
			utc(p->last_unix, last, sizeof last);
			fprintf(out, "%-9" PRId64 " %-8d %-6u %-19s  %-19s %10" PRIu64 "  ", p->target_id,
			        (int)p->pid, (unsigned)p->uid, first, last, p->samples);
			format_put(out, *format_str(p->python_version) ? p->python_version : "-", 16, 8);
			fputc(' ', out);
			for (size_t l = 0; l < p->n_labels; l++) {
				format_put(out, p->labels[l]->key, 64, 0);
				fputc('=', out);
				format_put(out, p->labels[l]->value, 128, 0);
				fputc(l + 1 < p->n_labels ? ',' : ' ', out);
			}
			fputc(' ', out);
			format_put(out, *format_str(p->command_line) ? p->command_line : format_str(p->executable),
			           200, 0);
			fputc('\n', out);
		}
	}
	return fflush(out) != 0 || ferror(out) ? -1 : 0;
}
