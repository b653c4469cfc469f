/*
 * Function tables, written: own and total samples per function over a
 * range (`pyprofd-ctl query --format table`, `pyprofd record --format
 * table`), or the same over two ranges as shares (`pyprofd-ctl diff`).  The
 * rows come counted and ordered; this file only shows them, with names made
 * safe for a terminal, or as JSON.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export.h"

static double export_table_share(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void export_table_put_utc(FILE *out, double unix_s)
{
	char buf[32];
	time_t t = (time_t)unix_s;
	struct tm tm;
	if (!gmtime_r(&t, &tm) || !strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, sizeof buf, "%.0f", unix_s);
	fputs(buf, out);
}

static unsigned export_table_digits(uint64_t n)
{
	unsigned d = 1;
	for (; n >= 10; n /= 10)
		d++;
	return d;
}

/*
 * "function (file:first line)", "function (file)" when the first line is
 * not known, or "function" for a marker; control characters shown as '?'.
 */
static void export_table_put_function(FILE *out, const Pyprofd__FunctionRow *row)
{
	export_put(out, row->function, 200, 0);
	if (*export_str(row->file)) {
		fputs(" (", out);
		export_put(out, row->file, 400, 0);
		if (row->first_line > 0)
			fprintf(out, ":%d", (int)row->first_line);
		fputc(')', out);
	}
}

/* A function's first line, or null when not known. */
static json_t *export_table_first_line(const Pyprofd__FunctionRow *row)
{
	return row->first_line > 0 ? json_integer(row->first_line) : json_null();
}

static void export_table_row(FILE *out, const Pyprofd__FunctionRow *row, int width, uint64_t total)
{
	fprintf(out, "%*" PRIu64 " %6.2f%% %*" PRIu64 " %6.2f%%  ", width, row->own,
	        export_table_share(row->own, total), width, row->total,
	        export_table_share(row->total, total));
	export_table_put_function(out, row);
	fputc('\n', out);
}

static void export_table_diff_row(FILE *out, const Pyprofd__FunctionRow *row,
                                  const struct export_table *t)
{
	double before = export_table_share(row->base_own, t->base_total), after = export_table_share(row->own, t->total);
	fprintf(out, "%7.2f %7.2f %+8.2f   %7.2f %7.2f  ", before, after, after - before,
	        export_table_share(row->base_total, t->base_total), export_table_share(row->total, t->total));
	export_table_put_function(out, row);
	fputc('\n', out);
}

static json_t *export_table_json_row(const Pyprofd__FunctionRow *row, const struct export_table *t)
{
	double own_change = export_table_share(row->own, t->total) -
	                    export_table_share(row->base_own, t->base_total);
	double total_change = export_table_share(row->total, t->total) -
	                      export_table_share(row->base_total, t->base_total);
	if (t->diff)
		return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:f, s:f}", "function",
		                 export_json_string(row->function), "file", export_json_string(row->file),
		                 "first_line", export_table_first_line(row), "base_own", export_json_u64(row->base_own), "base_total",
		                 export_json_u64(row->base_total), "compare_own", export_json_u64(row->own),
		                 "compare_total", export_json_u64(row->total), "own_percent_change",
		                 own_change, "total_percent_change", total_change);
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:f, s:f}", "function",
	                 export_json_string(row->function), "file", export_json_string(row->file),
	                 "first_line", export_table_first_line(row), "own", export_json_u64(row->own), "total", export_json_u64(row->total),
	                 "own_percent", export_table_share(row->own, t->total), "total_percent",
	                 export_table_share(row->total, t->total));
}

int export_table_write(const struct export_table *t, bool json, FILE *out)
{
	bool diff = t->diff;
	const char *name = t->name;
	if (json) {
		json_t *rows = json_array();
		for (size_t i = 0; rows && i < t->nrows; i++) {
			if (json_array_append_new(rows, export_table_json_row(t->rows[i], t)) != 0) {
				json_decref(rows);
				rows = NULL;
			}
		}
		json_t *doc =
			diff ? json_pack("{s:o, s:o, s:o, s:o}", "base_samples", export_json_u64(t->base_total),
		                         "compare_samples", export_json_u64(t->total), "functions_found",
		                         export_json_u64(t->functions_found), "functions", rows)
			     : json_pack("{s:o, s:o, s:f, s:f, s:o, s:o, s:o}", "name", export_json_string(name),
		                         "mode", export_json_string(t->mode), "from", t->from_unix,
		                         "until", t->until_unix, "samples", export_json_u64(t->total),
		                         "functions_found", export_json_u64(t->functions_found),
		                         "functions", rows);
		return export_json_write(doc, out) || fflush(out) != 0 || ferror(out) ? -1 : 0;
	}
	if (diff) {
		fprintf(out, "base: %" PRIu64 " samples, ", t->base_total);
		export_table_put_utc(out, t->base_from_unix);
		fputs(" to ", out);
		export_table_put_utc(out, t->base_until_unix);
		fprintf(out, " UTC\ncompare: %" PRIu64 " samples, ", t->total);
		export_table_put_utc(out, t->from_unix);
		fputs(" to ", out);
		export_table_put_utc(out, t->until_unix);
		fputs(" UTC\nshares of each side's samples, by change of own share\n\n", out);
		fprintf(out, "%7s %7s %8s   %7s %7s  %s\n", "own%", "->own%", "change", "total%", "->tot%",
		        "function (file)");
		for (size_t i = 0; i < t->nrows; i++)
			export_table_diff_row(out, t->rows[i], t);
	} else {
		export_put(out, name, 200, 0);
		/* The daemon knows the mode and rate of a process it samples now, not of a label's. */
		if (*export_str(t->mode)) {
			fputs(": ", out);
			export_put(out, t->mode, 16, 0);
		}
		fprintf(out, ", %" PRIu64 " samples", t->total);
		if (t->rate_hz)
			fprintf(out, " at %" PRIu32 " Hz", t->rate_hz);
		if (t->from_unix > 0) {
			fputs(", ", out);
			export_table_put_utc(out, t->from_unix);
			fputs(" to ", out);
		} else {
			fputs(", everything stored up to ", out);
		}
		export_table_put_utc(out, t->until_unix);
		fputs(" UTC\n\n", out);
		int width = 5;
		for (size_t i = 0; i < t->nrows; i++)
			if ((int)export_table_digits(t->rows[i]->total) > width)
				width = (int)export_table_digits(t->rows[i]->total);
		fprintf(out, "%*s %7s %*s %7s  %s\n", width, "own", "own%", width, "total", "total%",
		        "function");
		for (size_t i = 0; i < t->nrows; i++)
			export_table_row(out, t->rows[i], width, t->total);
	}
	size_t shown = t->nrows;
	if (shown < t->functions_found)
		fprintf(out, "(%" PRIu64 " more functions; --limit 0 shows all)\n",
		        t->functions_found - (uint64_t)shown);
	return fflush(out) != 0 || ferror(out) ? -1 : 0;
}
