/*
 * The daemon's function tables, printed: `query --format table` (own and
 * total samples per function over a range) and `diff` (the same over two
 * ranges, as shares).  The daemon counts and orders; this file only shows,
 * with names made safe for a terminal, or as JSON.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"

static double share(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void put_utc(FILE *out, double unix_s)
{
	char buf[32];
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, sizeof buf, "%.0f", unix_s);
	fputs(buf, out);
}

static unsigned digits(uint64_t n)
{
	unsigned d = 1;
	for (; n >= 10; n /= 10)
		d++;
	return d;
}

/* "function (file)", or "function" for a marker; control characters shown as '?'. */
static void put_function(FILE *out, const Pyprofd__FunctionRow *row)
{
	format_put(out, row->function, 200, 0);
	if (*format_str(row->file)) {
		fputs(" (", out);
		format_put(out, row->file, 400, 0);
		fputc(')', out);
	}
}

/* Each row of every part, in the daemon's order. */
static void each_row(const struct client_reply *reply,
                     void (*fn)(void *ctx, const Pyprofd__FunctionRow *row), void *ctx)
{
	for (size_t p = 0; p < reply->nparts; p++) {
		const Pyprofd__QueryResult *r = reply->parts[p]->query;
		for (size_t i = 0; i < r->n_functions; i++)
			fn(ctx, r->functions[i]);
	}
}

struct text_ctx {
	FILE *out;
	uint64_t total, base_total;
	int width;
};

static void max_total(void *ctx, const Pyprofd__FunctionRow *row)
{
	struct text_ctx *t = ctx;
	if ((int)digits(row->total) > t->width)
		t->width = (int)digits(row->total);
}

static void table_row(void *ctx, const Pyprofd__FunctionRow *row)
{
	const struct text_ctx *t = ctx;
	fprintf(t->out, "%*" PRIu64 " %6.2f%% %*" PRIu64 " %6.2f%%  ", t->width, row->own,
	        share(row->own, t->total), t->width, row->total, share(row->total, t->total));
	put_function(t->out, row);
	fputc('\n', t->out);
}

static void diff_row(void *ctx, const Pyprofd__FunctionRow *row)
{
	const struct text_ctx *t = ctx;
	double before = share(row->base_own, t->base_total), after = share(row->own, t->total);
	fprintf(t->out, "%7.2f %7.2f %+8.2f   %7.2f %7.2f  ", before, after, after - before,
	        share(row->base_total, t->base_total), share(row->total, t->total));
	put_function(t->out, row);
	fputc('\n', t->out);
}

struct json_ctx {
	json_t *rows;
	uint64_t total, base_total;
	bool diff;
};

static void json_row(void *ctx, const Pyprofd__FunctionRow *row)
{
	struct json_ctx *j = ctx;
	if (!j->rows)
		return;
	json_t *obj;
	if (j->diff)
		obj = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:f}", "function",
		                format_json_string(row->function), "file", format_json_string(row->file),
		                "base_own", format_json_u64(row->base_own), "base_total",
		                format_json_u64(row->base_total), "compare_own", format_json_u64(row->own),
		                "compare_total", format_json_u64(row->total), "own_percent_change",
		                share(row->own, j->total) - share(row->base_own, j->base_total),
		                "total_percent_change",
		                share(row->total, j->total) - share(row->base_total, j->base_total));
	else
		obj = json_pack("{s:o, s:o, s:o, s:o, s:f, s:f}", "function",
		                format_json_string(row->function), "file", format_json_string(row->file),
		                "own", format_json_u64(row->own), "total", format_json_u64(row->total),
		                "own_percent", share(row->own, j->total), "total_percent",
		                share(row->total, j->total));
	if (json_array_append_new(j->rows, obj) != 0) {
		json_decref(j->rows);
		j->rows = NULL;
	}
}

int functions_write(const struct client_reply *reply, const char *name, bool diff, bool json,
                    FILE *out)
{
	const Pyprofd__QueryResult *head = reply->parts[0]->query;
	if (json) {
		struct json_ctx j = {json_array(), head->total, head->base_total, diff};
		each_row(reply, json_row, &j);
		json_t *doc =
			diff ? json_pack("{s:o, s:o, s:o, s:o}", "base_samples", format_json_u64(head->base_total),
		                         "compare_samples", format_json_u64(head->total), "functions_found",
		                         format_json_u64(head->functions_found), "functions", j.rows)
			     : json_pack("{s:o, s:o, s:f, s:f, s:o, s:o, s:o}", "name", format_json_string(name),
		                         "mode", format_json_string(head->mode), "from", head->from_unix,
		                         "until", head->until_unix, "samples", format_json_u64(head->total),
		                         "functions_found", format_json_u64(head->functions_found),
		                         "functions", j.rows);
		char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
		int rc = text && fprintf(out, "%s\n", text) > 0 ? 0 : -1;
		free(text);
		json_decref(doc);
		return rc || fflush(out) != 0 || ferror(out) ? -1 : 0;
	}
	struct text_ctx t = {out, head->total, head->base_total, 5};
	if (diff) {
		fprintf(out, "base: %" PRIu64 " samples, ", head->base_total);
		put_utc(out, head->base_from_unix);
		fputs(" to ", out);
		put_utc(out, head->base_until_unix);
		fprintf(out, " UTC\ncompare: %" PRIu64 " samples, ", head->total);
		put_utc(out, head->from_unix);
		fputs(" to ", out);
		put_utc(out, head->until_unix);
		fputs(" UTC\nshares of each side's samples, by change of own share\n\n", out);
		fprintf(out, "%7s %7s %8s   %7s %7s  %s\n", "own%", "->own%", "change", "total%", "->tot%",
		        "function (file)");
		each_row(reply, diff_row, &t);
	} else {
		format_put(out, name, 200, 0);
		/* The daemon knows the mode and rate of a process it samples now, not of a label's. */
		if (*format_str(head->mode)) {
			fputs(": ", out);
			format_put(out, head->mode, 16, 0);
		}
		fprintf(out, ", %" PRIu64 " samples", head->total);
		if (head->rate_hz)
			fprintf(out, " at %" PRIu32 " Hz", head->rate_hz);
		if (head->from_unix > 0) {
			fputs(", ", out);
			put_utc(out, head->from_unix);
			fputs(" to ", out);
		} else {
			fputs(", everything stored up to ", out);
		}
		put_utc(out, head->until_unix);
		fputs(" UTC\n\n", out);
		each_row(reply, max_total, &t);
		fprintf(out, "%*s %7s %*s %7s  %s\n", t.width, "own", "own%", t.width, "total", "total%",
		        "function");
		each_row(reply, table_row, &t);
	}
	size_t shown = 0;
	for (size_t p = 0; p < reply->nparts; p++)
		shown += reply->parts[p]->query->n_functions;
	if (shown < head->functions_found)
		fprintf(out, "(%" PRIu64 " more functions; --limit 0 shows all)\n",
		        head->functions_found - (uint64_t)shown);
	return fflush(out) != 0 || ferror(out) ? -1 : 0;
}
