/*
 * What each sink (an OTLP endpoint) was sent: the cursors the OTLP sender
 * keeps in the same file as the samples, so that what it sends survives
 * the daemon (a kill -9 included) and retention knows what it must not
 * merge yet.
 *
 * A sink's sent_until says every bucket starting before it was sent for
 * every target; export_sent rows say a target got further on its own (its
 * request of an interval succeeded while another's failed).  Both only move
 * forward, and the rows behind the sink's cursor are dropped as it passes.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storage.h"

enum sinks_stmt {
	SINKS_SINK_ADD,
	SINKS_SINK_GET,
	SINKS_DUE,
	SINKS_MARK,
	SINKS_ADVANCE,
	SINKS_FORGET,
	SINKS_STATEMENTS
};

static const char *const sinks_sql[SINKS_STATEMENTS] = {
	[SINKS_SINK_ADD] = "INSERT INTO export_sinks(name, sent_until, active_at) VALUES (?1, ?2, ?3) "
	                    "ON CONFLICT(name) DO UPDATE SET active_at = excluded.active_at",
	[SINKS_SINK_GET] = "SELECT id, sent_until FROM export_sinks WHERE name = ?1",
	/* From the sink's cursor or the target's, whichever is further. */
	[SINKS_DUE] = "SELECT s.target, t.pid, max(k.sent_until, coalesce(e.sent_until, 0)) AS f, "
	               "sum(s.count) FROM export_sinks k JOIN samples s "
	               "ON s.bucket_start >= k.sent_until AND s.bucket_start < ?2 "
	               "JOIN targets t ON t.id = s.target "
	               "LEFT JOIN export_sent e ON e.sink = k.id AND e.target = s.target "
	               "WHERE k.id = ?1 AND s.bucket_start >= coalesce(e.sent_until, 0) "
	               "GROUP BY s.target ORDER BY s.target",
	[SINKS_MARK] = "INSERT INTO export_sent(sink, target, sent_until) VALUES (?1, ?2, ?3) "
	                "ON CONFLICT(sink, target) DO UPDATE SET "
	                "sent_until = max(sent_until, excluded.sent_until)",
	[SINKS_ADVANCE] = "UPDATE export_sinks SET sent_until = max(sent_until, ?2) WHERE id = ?1",
	[SINKS_FORGET] = "DELETE FROM export_sent WHERE sink = ?1 AND sent_until <= ?2",
};

struct store_sinks {
	int dirfd; /* its own when the writer opens its file by path, else -1 */
	sqlite3 *db;
	sqlite3_stmt *stmt[SINKS_STATEMENTS];
};

void store_sinks_close(struct store_sinks *x)
{
	if (!x)
		return;
	for (int i = 0; i < SINKS_STATEMENTS; i++)
		sqlite3_finalize(x->stmt[i]);
	sqlite3_close(x->db);
	if (x->dirfd >= 0)
		close(x->dirfd);
	free(x);
}

struct store_sinks *store_sinks_open(struct store_writer *w, struct store_error *err)
{
	struct store_sinks *x = calloc(1, sizeof *x);
	if (!x) {
		store_error_text(err, "store_sinks_open: out of memory");
		return NULL;
	}
	x->dirfd = -1;
	struct store_place p;
	if (!writer_place(w, &p)) {
		if ((x->dirfd = place_open_dir(p.path, err)) < 0)
			goto fail;
		p.dirfd = x->dirfd;
		p.name = place_base_name(p.path);
	}
	int64_t version;
	if (place_prepare(&p, NULL, false, err) < 0 ||
	    !(x->db = store_db_connect(&p, SQLITE_OPEN_READWRITE, err)) ||
	    store_query_int(x->db, "PRAGMA user_version", &version, err) < 0)
		goto fail;
	if (version != STORE_SCHEMA_VERSION) {
		store_error_text(err, "%s has schema version %lld, not this pyprofd's %d", p.path,
		                 (long long)version, STORE_SCHEMA_VERSION);
		goto fail;
	}
	for (int i = 0; i < SINKS_STATEMENTS; i++)
		if (sqlite3_prepare_v2(x->db, sinks_sql[i], -1, &x->stmt[i], NULL) != SQLITE_OK) {
			store_error_set(err, x->db, "store_sinks_open: prepare");
			goto fail;
		}
	return x;
fail:
	store_sinks_close(x);
	return NULL;
}

/* Steps a bound statement to its end and resets it; 0, or -1 and *err (what: the step). */
static int sinks_run(struct store_sinks *x, sqlite3_stmt *st, const char *what,
                     struct store_error *err)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE) {
		store_error_set(err, x->db, "export: %s", what);
		return -1;
	}
	return 0;
}

int store_sink_get(struct store_sinks *x, const char *name, int64_t start, double now,
                   int64_t *sink, int64_t *sent_until, struct store_error *err)
{
	sqlite3_stmt *add = x->stmt[SINKS_SINK_ADD], *get = x->stmt[SINKS_SINK_GET];
	sqlite3_bind_text(add, 1, name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(add, 2, start);
	sqlite3_bind_double(add, 3, now);
	if (sinks_run(x, add, "declare the sink", err) < 0)
		return -1;
	sqlite3_bind_text(get, 1, name, -1, SQLITE_STATIC);
	int rc = sqlite3_step(get);
	if (rc == SQLITE_ROW) {
		*sink = sqlite3_column_int64(get, 0);
		*sent_until = sqlite3_column_int64(get, 1);
	} else
		store_error_set(err, x->db, "export: read the sink");
	sqlite3_reset(get);
	sqlite3_clear_bindings(get);
	return rc == SQLITE_ROW ? 0 : -1;
}

int store_sink_due(struct store_sinks *x, int64_t sink, int64_t until,
                   int (*fn)(void *ctx, const struct store_sink_due *d), void *ctx,
                   uint64_t *samples, struct store_error *err)
{
	sqlite3_stmt *st = x->stmt[SINKS_DUE];
	sqlite3_bind_int64(st, 1, sink);
	sqlite3_bind_int64(st, 2, until);
	uint64_t sum = 0;
	int rc, stopped = 0;
	while (!stopped && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_sink_due d = {
			.target_id = sqlite3_column_int64(st, 0),
			.pid = (pid_t)sqlite3_column_int64(st, 1),
			.from = sqlite3_column_int64(st, 2),
			.samples = (uint64_t)sqlite3_column_int64(st, 3),
		};
		sum += d.samples;
		if (fn)
			stopped = fn(ctx, &d);
	}
	if (!stopped && rc != SQLITE_DONE)
		store_error_set(err, x->db, "export: what is due");
	else if (stopped)
		store_error_text(err, "export: stopped");
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (samples)
		*samples = sum;
	return stopped || rc != SQLITE_DONE ? -1 : 0;
}

int store_sink_mark(struct store_sinks *x, int64_t sink, int64_t target_id, int64_t until,
                    struct store_error *err)
{
	sqlite3_stmt *st = x->stmt[SINKS_MARK];
	sqlite3_bind_int64(st, 1, sink);
	sqlite3_bind_int64(st, 2, target_id);
	sqlite3_bind_int64(st, 3, until);
	return sinks_run(x, st, "mark a target sent", err);
}

int store_sink_advance(struct store_sinks *x, int64_t sink, int64_t until,
                       struct store_error *err)
{
	/* One transaction: a target's row goes only when the sink's cursor has passed it. */
	if (store_exec(x->db, "BEGIN IMMEDIATE", err) < 0)
		return -1;
	sqlite3_stmt *adv = x->stmt[SINKS_ADVANCE], *forget = x->stmt[SINKS_FORGET];
	sqlite3_bind_int64(adv, 1, sink);
	sqlite3_bind_int64(adv, 2, until);
	sqlite3_bind_int64(forget, 1, sink);
	sqlite3_bind_int64(forget, 2, until);
	if (sinks_run(x, adv, "advance the sink", err) < 0 ||
	    sinks_run(x, forget, "forget what the sink passed", err) < 0 ||
	    store_exec(x->db, "COMMIT", err) < 0) {
		store_exec(x->db, "ROLLBACK", NULL);
		return -1;
	}
	return 0;
}

int store_query_threads(struct store_reader *r, int64_t target_id, int64_t from, int64_t until,
                        uint64_t **ids, size_t *n, struct store_error *err)
{
	*ids = NULL;
	*n = 0;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(r->db,
	                       "SELECT DISTINCT thread_id FROM main.samples WHERE target = ?1 "
	                       "AND bucket_start >= ?2 AND bucket_start < ?3 ORDER BY thread_id",
	                       -1, &st, NULL) != SQLITE_OK) {
		store_error_set(err, r->db, "threads: prepare");
		return -1;
	}
	sqlite3_bind_int64(st, 1, target_id);
	sqlite3_bind_int64(st, 2, from);
	sqlite3_bind_int64(st, 3, until);
	size_t cap = 0;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (array_reserve((void **)ids, &cap, *n, sizeof **ids, NULL) < 0) {
			rc = SQLITE_NOMEM;
			break;
		}
		(*ids)[(*n)++] = (uint64_t)sqlite3_column_int64(st, 0);
	}
	if (rc != SQLITE_DONE) {
		store_error_set(err, r->db, "threads");
		free(*ids);
		*ids = NULL;
		*n = 0;
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

int sinks_horizon(sqlite3 *db, double now, int64_t *horizon, struct store_error *err)
{
	sqlite3_stmt *st = NULL;
	*horizon = -1;
	if (sqlite3_prepare_v2(db, "SELECT min(sent_until) FROM export_sinks WHERE active_at >= ?1", -1,
	                       &st, NULL) != SQLITE_OK) {
		store_error_set(err, db, "retention: export horizon");
		return -1;
	}
	sqlite3_bind_double(st, 1, now - STORE_EXPORT_IDLE_S);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
		*horizon = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW) {
		store_error_set(err, db, "retention: export horizon");
		return -1;
	}
	return 0;
}
