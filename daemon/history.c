/*
 * History: the daemon's way into the store.  Targets spell their counts
 * out into self-contained batches (target_flush) and hand them here; the
 * store's writer thread writes them, so the loop never waits on SQLite.
 * After each round of flushes this file asks for retention now and then
 * and says once when writing starts to fail and once when it recovers.
 */
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"
#include "store.h"

/* The configuration's bounds on the writer: memory while writes fail, the size cap, the file limit. */
static void history_limits(struct history *h, const struct config *c)
{
	store_writer_set_limits(h->writer, c->max_pending_rows, c->max_db_bytes);
	store_writer_set_file_limit(h->writer, c->max_file_bytes);
}


const char *const history_files[] = {HISTORY_FILE, HISTORY_FILE "-wal", HISTORY_FILE "-shm",
                                     HISTORY_FILE "-journal", NULL};

int history_open(struct history *h, const struct config *c, int state_fd)
{
	memset(h, 0, sizeof *h);
	h->bucket_seconds = c->bucket_seconds;
	size_t len = strlen(c->state_dir) + sizeof "/" HISTORY_FILE;
	h->path = malloc(len);
	if (!h->path)
		return -1;
	snprintf(h->path, len, "%s/" HISTORY_FILE, c->state_dir);
	/*
	 * The writer's thread opens the file, and retries while it cannot: the
	 * loop never waits on it.  Through the state directory held open: the
	 * path is only its name in messages.
	 */
	struct store_error err = {{0}};
	h->writer = state_fd >= 0 ? store_writer_open_at(state_fd, HISTORY_FILE, h->path, &err)
	                          : store_writer_open(h->path, &err);
	if (!h->writer) {
		log_error("history: %s", err.msg);
		free(h->path);
		h->path = NULL;
		return -1;
	}
	history_limits(h, c);
	return 0;
}

void history_configure(struct history *h, const struct config *c)
{
	if (h->writer)
		history_limits(h, c);
}

void history_submit(struct history *h, struct store_batch *b)
{
	store_writer_submit(h->writer, b);
}

void history_lose(struct history *h, uint64_t samples)
{
	h->lost_samples += samples;
}

/*
 * Old buckets merge into coarser ones ([storage] retention) every 60
 * flush rounds, and the size cap is enforced then too, or at once when the
 * file is past it.  After a flush round only: a query's flush must not
 * start a long merge that the query would then wait for.
 */
static void history_retention(struct history *h, const struct config *c,
                              const struct store_writer_status *st)
{
	bool over_cap = c->max_db_bytes && st->open && st->db_bytes > c->max_db_bytes;
	if ((c->nretention || c->max_db_bytes) && (h->flushes++ % 60 == 0 || over_cap)) {
		struct store_retention_step steps[CONFIG_RETENTION_MAX];
		for (unsigned i = 0; i < c->nretention; i++)
			steps[i] = (struct store_retention_step){c->retention_age_s[i], c->retention_bucket_s[i]};
		store_writer_retention(h->writer, steps, c->nretention);
	}
}

/*
 * Say once when the database cannot be opened or written (full disk,
 * read-only file, I/O errors) and once when it recovers.
 */
static void history_watch(struct history *h, const struct store_writer_status *st)
{
	unsigned long long rows = st->pending_rows;
	if (st->file_changes != h->file_changes) {
		/*
		 * The file went from under the writer: one line for the episode,
		 * saying where it stands (a new file taken, or none it may write).
		 */
		if (!st->failing)
			log_error("history: %s; samples go to the database now at that path", st->file_change);
		else if (st->open || strcmp(st->file_change, st->last_error) == 0)
			log_error("history: %s; samples wait in memory (%llu rows)", st->file_change, rows);
		else
			log_error("history: %s, and %s; samples wait in memory (%llu rows)", st->file_change,
			          st->last_error, rows);
		h->file_changes = st->file_changes;
	} else if (st->failing && !h->write_failing && !st->open)
		/* The message of a failed open names the file already. */
		log_error("history: %s; samples wait in memory (%llu rows)", st->last_error, rows);
	else if (st->failing && !h->write_failing)
		log_error("history: writing %s fails: %s; samples wait in memory (%llu rows)", h->path,
		          st->last_error, rows);
	else if (!st->failing && h->write_failing)
		log_info("history: writing %s again (%llu rows dropped meanwhile)", h->path,
		         (unsigned long long)st->dropped_rows);
	h->write_failing = st->failing;
}

void history_flushed(struct history *h, const struct config *c)
{
	struct store_writer_status st;
	store_writer_status(h->writer, &st);
	history_retention(h, c, &st);
	history_watch(h, &st);
}

void history_close(struct history *h)
{
	if (h->writer) {
		store_writer_close(h->writer);
		h->writer = NULL;
	}
	free(h->path);
	h->path = NULL;
}

void history_status(struct history *h, Pyprofd__StatusResult *out, struct arena *a)
{
	out->history_file = h->path;
	out->history_lost_samples = h->lost_samples;
	if (!h->writer)
		return;
	struct store_writer_status st;
	store_writer_status(h->writer, &st);
	out->history_failing = st.failing;
	out->history_open = st.open;
	out->history_error = st.failing ? arena_strdup(a, st.last_error) : (char *)"";
	out->history_pending_rows = st.pending_rows;
	out->history_rows_written = st.rows_written;
	out->history_dropped_rows = st.dropped_rows;
	out->history_bytes = st.db_bytes;
	out->history_cache_bytes = st.cache_bytes + st.page_cache_bytes;
	out->history_cache_budget_bytes = st.cache_budget_bytes + st.page_cache_budget_bytes;
	out->history_file_changes = st.file_changes;
	out->history_file_change = st.file_changes ? arena_strdup(a, st.file_change) : (char *)"";
	if (!out->history_file_change)
		out->history_file_change = (char *)"";
	if (!out->history_error)
		out->history_error = (char *)"";
}
