/*
 * The store's connections and schema: pragmas, migrations.
 *
 * The schema version lives in PRAGMA user_version.  Migrations are a table
 * of steps; each step runs in one transaction together with the bump of
 * user_version, so a crash leaves the database at one version or the next,
 * never between.  A database written by a newer pyprofd is refused rather
 * than guessed at.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "storage.h"

int store_exec(sqlite3 *db, const char *sql, struct store_error *err)
{
	char *msg = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		/* The first line of the SQL names the step well enough. */
		int n = (int)strcspn(sql, "\n");
		store_error_text(err, "%.*s: %s", n > 60 ? 60 : n, sql,
		                 msg ? msg : sqlite3_errmsg(db));
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

int store_query_int(sqlite3 *db, const char *sql, int64_t *out, struct store_error *err)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		store_error_set(err, db, "%s", sql);
		return -1;
	}
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		if (rc == SQLITE_DONE)
			store_error_text(err, "%s: no result", sql);
		else
			store_error_set(err, db, "%s", sql);
		sqlite3_finalize(st);
		return -1;
	}
	*out = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return 0;
}

uint64_t store_db_bytes(sqlite3 *db)
{
	int64_t pages = 0, size = 0;
	if (store_query_int(db, "PRAGMA page_count", &pages, NULL) < 0 ||
	    store_query_int(db, "PRAGMA page_size", &size, NULL) < 0 || pages < 0 || size < 0)
		return 0;
	return (uint64_t)pages * (uint64_t)size;
}

/*
 * Version 1.  Strings, frames and stacks are interned; a stack is a node of
 * a prefix tree (parent 0 is the root, which has no row).  Samples are
 * WITHOUT ROWID: the primary key is the whole identity of a row and the
 * table's only access path besides the bucket index, so a rowid would only
 * add a second b-tree to keep in step.  Its key leads with the target and
 * bucket, the shape of every query (one target or a few, a time range);
 * samples_bucket serves queries over all targets, retention's merges and
 * dropping the oldest buckets.
 */
static const char schema_v1[] =
	"CREATE TABLE strings(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  s TEXT NOT NULL UNIQUE);\n"
	"CREATE TABLE frames(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  function INTEGER NOT NULL,\n" /* strings.id, 0 for none */
	"  file INTEGER NOT NULL,\n"
	"  line INTEGER NOT NULL,\n"
	"  kind INTEGER NOT NULL,\n"
	"  UNIQUE(function, file, line, kind));\n"
	"CREATE TABLE stacks(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  parent INTEGER NOT NULL,\n" /* stacks.id, 0 for the root */
	"  frame INTEGER NOT NULL,\n"
	"  UNIQUE(parent, frame));\n"
	"CREATE TABLE targets(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  pid INTEGER NOT NULL,\n"
	"  start_time INTEGER NOT NULL,\n"
	"  uid INTEGER NOT NULL,\n"
	"  executable TEXT,\n"
	"  command_line TEXT,\n"
	"  python_version TEXT,\n"
	"  first_seen REAL NOT NULL,\n"
	"  last_seen REAL NOT NULL,\n"
	"  UNIQUE(pid, start_time));\n"
	"CREATE TABLE target_labels(\n"
	"  target INTEGER NOT NULL,\n"
	"  key TEXT NOT NULL,\n"
	"  value TEXT NOT NULL,\n"
	"  PRIMARY KEY(target, key)) WITHOUT ROWID;\n"
	"CREATE INDEX target_labels_kv ON target_labels(key, value, target);\n"
	"CREATE TABLE sessions(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  target INTEGER NOT NULL,\n"
	"  attached_at REAL NOT NULL,\n"
	"  detached_at REAL,\n" /* NULL while attached */
	"  rate_hz INTEGER NOT NULL,\n"
	"  mode TEXT,\n"
	"  UNIQUE(target, attached_at));\n"
	"CREATE TABLE samples(\n"
	"  target INTEGER NOT NULL,\n"
	"  bucket_start INTEGER NOT NULL,\n"
	"  bucket_seconds INTEGER NOT NULL,\n"
	"  thread_id INTEGER NOT NULL,\n"
	"  stack INTEGER NOT NULL,\n"
	"  count INTEGER NOT NULL,\n"
	"  PRIMARY KEY(target, bucket_start, bucket_seconds, thread_id, stack)) WITHOUT ROWID;\n"
	"CREATE INDEX samples_bucket ON samples(bucket_start);\n";

/*
 * Version 2.  A function is its qualified name, file and first line:
 * frames.function holds co_qualname (3.11+; co_name before) and the new
 * first_line co_firstlineno, so a method and a function of one short name
 * are two functions.  Rows of version 1 keep the name they had and
 * first_line 0 (unknown).  SQLite cannot change a UNIQUE constraint in
 * place: frames is copied under its ids (stacks name them), and is small
 * next to samples.  samples.idle counts the samples of a row whose thread
 * waited (off CPU, or in a known wait): added in place, 0 for old rows.
 * threads names each (target, thread) as the kernel last did.
 */
static const char schema_v2[] =
	"CREATE TABLE frames_v2(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  function INTEGER NOT NULL,\n"
	"  file INTEGER NOT NULL,\n"
	"  line INTEGER NOT NULL,\n"
	"  kind INTEGER NOT NULL,\n"
	"  first_line INTEGER NOT NULL DEFAULT 0,\n"
	"  UNIQUE(function, file, line, kind, first_line));\n"
	"INSERT INTO frames_v2(id, function, file, line, kind) "
	"SELECT id, function, file, line, kind FROM frames;\n"
	"DROP TABLE frames;\n"
	"ALTER TABLE frames_v2 RENAME TO frames;\n"
	"ALTER TABLE samples ADD COLUMN idle INTEGER NOT NULL DEFAULT 0;\n"
	"CREATE TABLE threads(\n"
	"  target INTEGER NOT NULL,\n"
	"  thread_id INTEGER NOT NULL,\n"
	"  native_id INTEGER NOT NULL,\n" /* -1: unknown */
	"  name TEXT NOT NULL,\n"         /* "": unknown */
	"  PRIMARY KEY(target, thread_id)) WITHOUT ROWID;\n";

/*
 * Version 3: what each export sink (an OTLP endpoint) was sent.  A sink's
 * sent_until is the start of the first bucket not yet sent for every
 * target; a target whose part of the next interval went out before the
 * rest (a request of its own succeeded) is ahead of it in export_sent.
 * active_at (unix seconds) is when the sink was last exported to: retention
 * keeps what active sinks still have to send unmerged (retention.c).
 */
static const char schema_v3[] =
	"CREATE TABLE export_sinks(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  name TEXT NOT NULL UNIQUE,\n"
	"  sent_until INTEGER NOT NULL,\n"
	"  active_at REAL NOT NULL);\n"
	"CREATE TABLE export_sent(\n"
	"  sink INTEGER NOT NULL,\n"
	"  target INTEGER NOT NULL,\n"
	"  sent_until INTEGER NOT NULL,\n"
	"  PRIMARY KEY(sink, target)) WITHOUT ROWID;\n";

/*
 * Version 4: request contexts (issue 45).  A context is a trace, a span
 * and labels, zero-length blobs and "" for none; its UNIQUE key leads with
 * trace_id, so that index serves lookups by trace too.  context_samples
 * holds again samples that samples holds, split by the context they ran
 * in: only queries that filter or split by context read it.  Its rows are
 * never merged into coarser buckets (retention deletes them instead), so
 * the context index lets retention find the contexts no row uses.
 */
static const char schema_v4[] =
	"CREATE TABLE contexts(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  trace_id BLOB NOT NULL,\n"
	"  span_id BLOB NOT NULL,\n"
	"  labels TEXT NOT NULL,\n"
	"  UNIQUE(trace_id, span_id, labels));\n"
	"CREATE TABLE context_samples(\n"
	"  target INTEGER NOT NULL,\n"
	"  bucket_start INTEGER NOT NULL,\n"
	"  bucket_seconds INTEGER NOT NULL,\n"
	"  thread_id INTEGER NOT NULL,\n"
	"  stack INTEGER NOT NULL,\n"
	"  context INTEGER NOT NULL,\n"
	"  count INTEGER NOT NULL,\n"
	"  idle INTEGER NOT NULL DEFAULT 0,\n"
	"  PRIMARY KEY(target, bucket_start, bucket_seconds, thread_id, stack, context)) WITHOUT ROWID;\n"
	"CREATE INDEX context_samples_context ON context_samples(context);\n"
	"CREATE INDEX context_samples_bucket ON context_samples(bucket_start);\n";

/*
 * Version 5: a C frame's module's build id (a string, 0 for none), so pprof
 * and OTLP name the exact build a frame's address is of.  Part of a
 * frame's identity: two builds of a library at one path are two modules.
 * frames is copied under its ids again, as in version 2.
 */
static const char schema_v5[] =
	"CREATE TABLE frames_v5(\n"
	"  id INTEGER PRIMARY KEY,\n"
	"  function INTEGER NOT NULL,\n"
	"  file INTEGER NOT NULL,\n"
	"  line INTEGER NOT NULL,\n" /* a C frame's: its address in its module's file */
	"  kind INTEGER NOT NULL,\n"
	"  first_line INTEGER NOT NULL DEFAULT 0,\n"
	"  build_id INTEGER NOT NULL DEFAULT 0,\n" /* strings.id of the hex; 0 none */
	"  UNIQUE(function, file, line, kind, first_line, build_id));\n"
	"INSERT INTO frames_v5(id, function, file, line, kind, first_line) "
	"SELECT id, function, file, line, kind, first_line FROM frames;\n"
	"DROP TABLE frames;\n"
	"ALTER TABLE frames_v5 RENAME TO frames;\n";

/* Step i brings the schema from version i to i + 1. */
static const char *const migrations[STORE_SCHEMA_VERSION] = {
	schema_v1,
	schema_v2,
	schema_v3,
	schema_v4,
	schema_v5,
};

/* Applies every step past the database's version, one transaction each. */
static int store_db_migrate(sqlite3 *db, struct store_error *err)
{
	int64_t version;
	if (store_query_int(db, "PRAGMA user_version", &version, err) < 0)
		return -1;
	if (version > STORE_SCHEMA_VERSION) {
		store_error_text(err,
		                 "the database has schema version %lld, newer than this pyprofd's %d; "
		                 "refusing to touch it",
		                 (long long)version, STORE_SCHEMA_VERSION);
		return -1;
	}
	if (version < 0) {
		store_error_text(err, "the database has a negative schema version %lld",
		                 (long long)version);
		return -1;
	}
	for (int64_t v = version; v < STORE_SCHEMA_VERSION; v++) {
		char bump[64];
		snprintf(bump, sizeof bump, "PRAGMA user_version = %lld", (long long)(v + 1));
		if (store_exec(db, "BEGIN IMMEDIATE", err) < 0)
			return -1;
		/* Re-read inside the lock: another process may have migrated meanwhile. */
		int64_t now;
		if (store_query_int(db, "PRAGMA user_version", &now, err) < 0)
			goto rollback;
		if (now != v) {
			store_exec(db, "ROLLBACK", NULL);
			return store_db_migrate(db, err);
		}
		if (store_exec(db, migrations[v], err) < 0 || store_exec(db, bump, err) < 0 ||
		    store_exec(db, "COMMIT", err) < 0)
			goto rollback;
	}
	return 0;
rollback:
	store_exec(db, "ROLLBACK", NULL);
	return -1;
}

/*
 * An empty history of this schema in memory: what a reader stands on when
 * the file cannot be read, so the writer's memory alone still answers.
 */
sqlite3 *store_db_open_memory(struct store_error *err)
{
	sqlite3 *db = NULL;
	if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
	                    NULL) != SQLITE_OK) {
		store_error_text(err, "an empty history in memory: %s", db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return NULL;
	}
	if (store_exec(db, "PRAGMA temp_store = MEMORY", err) < 0 || store_db_migrate(db, err) < 0) {
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

/* The name and VFS SQLite opens p with (through p's directory).  The VFS, or NULL and *err. */
static const char *store_db_name(const struct store_place *p, char *name, size_t len,
                                 struct store_error *err)
{
	const char *vfs = place_vfs_name();
	if (!vfs || place_proc_path(p, name, len) < 0) {
		store_error_text(err, "cannot open %s: %s", p->path,
		                 vfs ? "the name is too long" : "the store's VFS could not be registered");
		return NULL;
	}
	return vfs;
}

/* Opens p with flags and sets what every connection wants. */
sqlite3 *store_db_connect(const struct store_place *p, int flags, struct store_error *err)
{
	char name[PATH_MAX];
	const char *vfs = store_db_name(p, name, sizeof name, err);
	if (!vfs)
		return NULL;
	sqlite3 *db = NULL;
	int rc = sqlite3_open_v2(name, &db, flags | SQLITE_OPEN_NOMUTEX, vfs);
	if (rc != SQLITE_OK) {
		store_error_text(err, "open %s: %s", p->path, db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_extended_result_codes(db, 1);
	if (sqlite3_busy_timeout(db, STORE_BUSY_TIMEOUT_MS) != SQLITE_OK) {
		store_error_set(err, db, "busy timeout");
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

/*
 * What store_db_open_rw does, its messages without the path.  Everything
 * that may write (auto_vacuum, journal_mode, the migration) waits until the
 * file is known to be a pyprofd history this build may write: a file that
 * is not a database, a schema from a newer pyprofd or someone else's
 * database is left exactly as it was.
 */
static sqlite3 *open_rw(const char *name, const char *vfs, struct store_error *err)
{
	sqlite3 *db = NULL;
	/* The file exists (place_prepare made it): SQLite is not to create one, which would follow a link. */
	int rc = sqlite3_open_v2(name, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, vfs);
	if (rc != SQLITE_OK) {
		store_error_text(err, "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_extended_result_codes(db, 1);
	/*
	 * SQLite falls back to read-only when the file or its file system is;
	 * writes would then fail one by one.  Refused here instead, so the
	 * writer says why and opens again once the file is writable.
	 */
	if (sqlite3_db_readonly(db, "main") == 1) {
		store_error_text(err, "%s", sqlite3_errstr(SQLITE_READONLY));
		goto fail;
	}
	if (sqlite3_busy_timeout(db, STORE_BUSY_TIMEOUT_MS) != SQLITE_OK) {
		store_error_set(err, db, "busy timeout");
		goto fail;
	}
	/* The first read of the file: "file is not a database" shows here, and alone. */
	int64_t version, tables;
	if (store_query_int(db, "PRAGMA user_version", &version, NULL) < 0) {
		store_error_text(err, "%s", sqlite3_errmsg(db));
		goto fail;
	}
	if (version > STORE_SCHEMA_VERSION) {
		store_error_text(err,
		                 "the database has schema version %lld, newer than this pyprofd's %d; "
		                 "refusing to touch it",
		                 (long long)version, STORE_SCHEMA_VERSION);
		goto fail;
	}
	if (version < 0) {
		store_error_text(err, "the database has a negative schema version %lld; refusing to touch it",
		                 (long long)version);
		goto fail;
	}
	if (version == 0) {
		if (store_query_int(db, "SELECT count(*) FROM sqlite_master", &tables, err) < 0)
			goto fail;
		/* Version 0 with tables is not a history killed while it was created (one transaction). */
		if (tables > 0) {
			store_error_text(err, "a database with %lld tables and no pyprofd schema version "
			                      "is not a pyprofd history; refusing to touch it",
			                 (long long)tables);
			goto fail;
		}
		/*
		 * auto_vacuum only takes on a database without tables, so it is
		 * set on a new one only.  INCREMENTAL: when retention drops the
		 * oldest buckets, PRAGMA incremental_vacuum hands the freed pages
		 * back in proportion to what was freed, where VACUUM would rewrite
		 * the whole file (and need as much space again, on a disk that may
		 * be full).
		 */
		if (store_exec(db, "PRAGMA auto_vacuum = INCREMENTAL", err) < 0)
			goto fail;
	}
	/* journal_mode answers with the mode it got: WAL can be refused (some network file systems). */
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW) {
		store_error_set(err, db, "PRAGMA journal_mode = WAL");
		sqlite3_finalize(st);
		goto fail;
	}
	const unsigned char *jm = sqlite3_column_text(st, 0);
	bool wal = jm && strcmp((const char *)jm, "wal") == 0;
	sqlite3_finalize(st);
	if (!wal) {
		store_error_text(err, "the file system refuses WAL mode");
		goto fail;
	}
	/* In WAL mode NORMAL survives any crash of the process; only power loss may take the last commits. */
	/*
	 * After a checkpoint the WAL keeps its largest size unless told: a day's
	 * merge would leave a file as large as the merge on disk for good.
	 *
	 * The page cache: SQLite's default (2000 KiB) fills at the pace the file
	 * grows, a few pages a minute, so the daemon's memory crept for hours
	 * before it levelled.  A flush touches few pages (the newest bucket of
	 * each target, the ends of the indexes, the interned rows it misses),
	 * retention reads through the kernel's cache, and writing a synthetic
	 * day goes as fast with 512 KiB as with the default.
	 */
	if (store_exec(db, "PRAGMA cache_size = -" STORE_WRITER_CACHE_KIB, err) < 0 ||
	    store_exec(db, "PRAGMA journal_size_limit = 67108864", err) < 0 ||
	    store_exec(db, "PRAGMA synchronous = NORMAL", err) < 0 ||
	    store_exec(db, "PRAGMA foreign_keys = OFF", err) < 0 || store_db_migrate(db, err) < 0)
		goto fail;
	return db;
fail:
	sqlite3_close(db);
	return NULL;
}

sqlite3 *store_db_open_rw(const struct store_place *p, const struct store_ids *last,
                          struct store_ids *ids, struct store_error *err)
{
	if (place_prepare(p, last, true, err) < 0)
		return NULL;
	char name[PATH_MAX];
	const char *vfs = store_db_name(p, name, sizeof name, err);
	if (!vfs)
		return NULL;
	struct store_error why = {{0}};
	sqlite3 *db = open_rw(name, vfs, &why);
	if (!db) {
		store_error_text(err, "cannot open %s: %s", p->path, why.msg);
		return NULL;
	}
	if (place_verify(p, db, ids, err) < 0) {
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

sqlite3 *store_db_open_ro(const struct store_place *p, struct store_error *err)
{
	const char *path = p->path;
	if (place_prepare(p, NULL, false, err) < 0)
		return NULL;
	sqlite3 *db = store_db_connect(p, SQLITE_OPEN_READONLY, err);
	if (!db)
		return NULL;
	int64_t version;
	/*
	 * Opened read-only, the file cannot be written through this connection;
	 * query_only would also forbid the TEMP tables that hold the writer's
	 * memory for a pinned query (reader.c), which live in memory.
	 */
	if (store_exec(db, "PRAGMA temp_store = MEMORY", err) < 0 ||
	    store_query_int(db, "PRAGMA user_version", &version, err) < 0)
		goto fail;
	if (version > STORE_SCHEMA_VERSION) {
		store_error_text(err, "%s has schema version %lld, newer than this pyprofd's %d", path,
		                 (long long)version, STORE_SCHEMA_VERSION);
		goto fail;
	}
	if (version < 1) {
		store_error_text(err, "%s is not a pyprofd history (no schema)", path);
		goto fail;
	}
	/* A reader cannot migrate; the writer does when the daemon opens the store. */
	if (version < STORE_SCHEMA_VERSION) {
		store_error_text(err, "%s has schema version %lld, older than this pyprofd's %d: "
		                 "open it for writing once to migrate it",
		                 path, (long long)version, STORE_SCHEMA_VERSION);
		goto fail;
	}
	return db;
fail:
	sqlite3_close(db);
	return NULL;
}
