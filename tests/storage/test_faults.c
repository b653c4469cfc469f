/*
 * The store under faults, on real SQLite files: a read-only file, an I/O
 * error and a full disk lose nothing submitted within the memory bound and
 * recover by themselves; SIGKILL at any moment leaves a sound database
 * holding every batch synced before it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "seed.h"

TestSuite(faults, .init = helpers_init, .fini = helpers_fini);

Test(faults, full_disk_keeps_batches_and_recovers, .timeout = 120)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	uint64_t per = submit_buckets(w, base, 0, 50);
	store_writer_sync(w);
	expect_written(w, "before the disk fills");
	struct store_reader *r = open_reader(path);
	struct store_query all = range_query(base, 0, 10000);
	struct expect before = {.targets = 7, .thread_t = -1, .k0 = 0, .k1 = 50, .times = 1};
	check_query(r, &all, &before, "before");

	/* The file may not grow: every batch of new buckets fails with SQLITE_FULL. */
	struct store_writer_status st;
	store_writer_status(w, &st);
	store_writer_set_file_limit(w, st.db_bytes);
	store_writer_set_limits(w, 3 * per, 0);
	int nfull = 6;
	for (int i = 0; i < nfull; i++)
		cr_assert_eq(submit_buckets(w, base, 50 + 50 * i, 100 + 50 * i), per);
	store_writer_sync(w);
	store_writer_status(w, &st);
	cr_expect(st.failing, "the writer does not say it is failing");
	cr_expect(strstr(st.last_error, "full"), "last error: %s", st.last_error);
	cr_expect_leq(st.pending_rows, 3 * per, "pending %llu rows past the bound %llu",
	              (unsigned long long)st.pending_rows, (unsigned long long)(3 * per));
	cr_expect_eq(st.pending_rows + st.dropped_rows, (uint64_t)nfull * per);
	cr_expect_eq(st.pending_rows, 3 * per, "the bound is kept full, not emptier");
	check_query(r, &all, &before, "while the disk is full");
	/* Retries go on failing, and still lose nothing. */
	usleep(1500 * 1000);
	store_writer_sync(w);
	store_writer_status(w, &st);
	cr_expect(st.failing);
	check_query(r, &all, &before, "after retries on a full disk");

	store_writer_set_file_limit(w, 0);
	store_writer_sync(w);
	store_writer_status(w, &st);
	cr_expect(!st.failing, "still failing after room was made: %s", st.last_error);
	cr_expect_eq(st.pending_rows, 0);
	uint64_t dropped_batches = st.dropped_rows / per;
	cr_expect_eq(dropped_batches, (uint64_t)nfull - 3);
	/* The dropped batches are the oldest; the kept ones are whole. */
	for (int i = 0; i < nfull; i++) {
		struct store_query q = range_query(base, 50 + 50 * i, 100 + 50 * i);
		struct expect e = {.targets = 7, .thread_t = -1, .k0 = 50 + 50 * i, .k1 = 100 + 50 * i,
		                   .times = 1};
		if ((uint64_t)i < dropped_batches)
			e.targets = 0;
		char what[64];
		snprintf(what, sizeof what, "batch %d after recovery", i);
		check_query(r, &q, &e, what);
	}
	check_query(r, &(struct store_query){.from_unix = (double)base,
	                                     .until_unix = (double)(base + 50 * BUCKET_S)},
	            &before, "the first batch after recovery");
	store_reader_close(r);
	store_writer_close(w);
}

/* ---- a read-only file, an I/O error ---- */

/*
 * What a forked child checks cannot go through Criterion's assertions: it
 * writes why it failed to fd and exits 1, and the parent asserts on that.
 */
__attribute__((format(printf, 2, 3), noreturn)) static void storage_child_fail(int fd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n > 0 && write(fd, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1) < 0)
		_exit(2);
	_exit(1);
}

#define CHILD_CHECK(fd, cond, ...)                                                                 \
	do {                                                                                       \
		if (!(cond))                                                                       \
			storage_child_fail(fd, __VA_ARGS__);                                               \
	} while (0)

/* Runs body in a child; its verdict becomes the test's. */
static void run_child(void (*body)(int fd, const char *path), const char *path)
{
	int p[2];
	cr_assert_eq(pipe(p), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(p[0]);
		body(p[1], path);
		_exit(0);
	}
	close(p[1]);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	char msg[1024] = "";
	ssize_t got = read(p[0], msg, sizeof msg - 1);
	close(p[0]);
	msg[got > 0 ? got : 0] = '\0';
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child (status %#x): %s", status,
	          msg[0] ? msg : "no message");
}

/* The total the store has over buckets [k0, k1) of base, or -1 (for children). */
static int64_t store_total(const char *path, int64_t base, int64_t k0, int64_t k1)
{
	struct store_error err = {{0}};
	struct store_reader *r = store_reader_open(path, &err);
	if (!r)
		return -1;
	struct store_query q = range_query(base, k0, k1);
	uint64_t total = 0;
	int rc = store_query_stacks(r, &q, NULL, NULL, &total, &err);
	store_reader_close(r);
	return rc < 0 ? -1 : (int64_t)total;
}

static int64_t seed_total(int64_t k0, int64_t k1)
{
	uint64_t per_stack[NSTACKS];
	struct expect e = {.targets = 7, .thread_t = -1, .k0 = k0, .k1 = k1, .times = 1};
	return (int64_t)expected(&e, per_stack);
}

/* Status checks of a child: failing or not, open or not, an error naming the file. */
static void child_expect_status(int fd, struct store_writer *w, bool failing, bool open,
                                uint64_t pending_rows, const char *why, const char *path,
                                const char *what)
{
	struct store_writer_status st;
	store_writer_status(w, &st);
	CHILD_CHECK(fd, st.failing == failing && st.open == open,
	            "%s: failing %d open %d, expected %d %d (last error: %s)", what, st.failing,
	            st.open, failing, open, st.last_error);
	CHILD_CHECK(fd, st.pending_rows == pending_rows, "%s: %llu rows pending, expected %llu", what,
	            (unsigned long long)st.pending_rows, (unsigned long long)pending_rows);
	CHILD_CHECK(fd, st.dropped_rows == 0, "%s: %llu rows dropped", what,
	            (unsigned long long)st.dropped_rows);
	if (why)
		CHILD_CHECK(fd, strstr(st.last_error, why) && strstr(st.last_error, path),
		            "%s: last error \"%s\" does not name \"%s\" and the file", what, st.last_error,
		            why);
}

/* As nobody (root writes any file): a 0444 store waits, then recovers once it is 0644. */
static void read_only_child(int fd, const char *path)
{
	if (setgroups(0, NULL) != 0 || setgid(NOBODY_GID) != 0 || setuid(NOBODY_UID) != 0)
		storage_child_fail(fd, "cannot become nobody: %s", strerror(errno));
	int64_t base = base_days_ago(1);
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	CHILD_CHECK(fd, w, "store_writer_open: %s", err.msg);
	submit_buckets(w, base, 0, 10);
	store_writer_sync(w);
	child_expect_status(fd, w, false, true, 0, NULL, path, "before chmod");
	store_writer_close(w);

	CHILD_CHECK(fd, chmod(path, 0444) == 0, "chmod 0444: %s", strerror(errno));
	w = store_writer_open(path, &err);
	CHILD_CHECK(fd, w, "store_writer_open: %s", err.msg);
	uint64_t per = submit_buckets(w, base, 10, 20);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, "readonly", path, "read-only file");
	/* Retries on the writer's schedule keep failing, and keep the rows. */
	usleep(1200 * 1000);
	per += submit_buckets(w, base, 20, 30);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, "readonly", path, "read-only file, retried");

	CHILD_CHECK(fd, chmod(path, 0644) == 0, "chmod 0644: %s", strerror(errno));
	struct store_writer_status st;
	for (int i = 0; i < 50; i++) {
		store_writer_status(w, &st);
		if (!st.pending_rows)
			break;
		usleep(100 * 1000);
	}
	child_expect_status(fd, w, false, true, 0, NULL, path, "writable again");
	store_writer_close(w);
	int64_t total = store_total(path, base, 0, 30), want = seed_total(0, 30);
	CHILD_CHECK(fd, total == want, "after recovery: total %lld, expected %lld", (long long)total,
	            (long long)want);
}

Test(faults, read_only_file_waits_and_recovers, .timeout = 60)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it writes the store as nobody)");
	char dir[PATH_MAX - 64], path[PATH_MAX];
	scratch_dir(dir, sizeof dir);
	cr_assert(chown(dir, NOBODY_UID, NOBODY_GID) == 0 && chmod(dir, 0755) == 0);
	snprintf(path, sizeof path, "%s/history.db", dir);
	run_child(read_only_child, path);
}

/*
 * An I/O error in the middle of a write (the file size limit of the
 * process: every write fails with EFBIG, which SQLite reports as a disk I/O
 * error) closes the connection; once writes work again the writer opens the
 * file anew by itself and writes what waited.
 */
static void io_error_child(int fd, const char *path)
{
	int64_t base = base_days_ago(1);
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	CHILD_CHECK(fd, w, "store_writer_open: %s", err.msg);
	submit_buckets(w, base, 0, 10);
	store_writer_sync(w);
	child_expect_status(fd, w, false, true, 0, NULL, path, "before the error");

	struct rlimit lim;
	CHILD_CHECK(fd, getrlimit(RLIMIT_FSIZE, &lim) == 0, "getrlimit");
	rlim_t soft = lim.rlim_cur;
	signal(SIGXFSZ, SIG_IGN);
	lim.rlim_cur = 0;
	CHILD_CHECK(fd, setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
	uint64_t per = submit_buckets(w, base, 10, 20);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, "I/O error", "", "writes fail");
	/* Retries open the file again; while writes fail, they fail and keep the rows. */
	usleep(1200 * 1000);
	store_writer_sync(w);
	child_expect_status(fd, w, true, false, per, NULL, path, "writes still fail");

	lim.rlim_cur = soft;
	CHILD_CHECK(fd, setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit: %s", strerror(errno));
	struct store_writer_status st;
	for (int i = 0; i < 50; i++) {
		store_writer_status(w, &st);
		if (!st.pending_rows)
			break;
		usleep(100 * 1000);
	}
	child_expect_status(fd, w, false, true, 0, NULL, path, "writes work again");
	store_writer_close(w);
	int64_t total = store_total(path, base, 0, 20), want = seed_total(0, 20);
	CHILD_CHECK(fd, total == want, "after recovery: total %lld, expected %lld", (long long)total,
	            (long long)want);
}

Test(faults, io_error_reopens_and_recovers, .timeout = 60)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	run_child(io_error_child, path);
	char ok[64];
	raw_integrity(path, ok, sizeof ok);
	cr_expect_str_eq(ok, "ok");
}

/* ---- the file deleted or replaced under the writer ---- */

/* Waits (within 5 s) until the writer has seen n changes of file and written what waits. */
static void expect_changes_then_written(struct store_writer *w, uint64_t n, const char *what)
{
	struct store_writer_status st;
	for (int i = 0; i < 50; i++) {
		store_writer_sync(w);
		store_writer_status(w, &st);
		if (st.file_changes >= n && st.open && !st.failing && !st.pending_rows)
			break;
		usleep(100 * 1000);
	}
	cr_assert(st.file_changes == n && st.open && !st.failing && !st.pending_rows,
	          "%s: %llu changes seen (expected %llu), open %d, failing %d (%s), %llu rows pending",
	          what, (unsigned long long)st.file_changes, (unsigned long long)n, st.open, st.failing,
	          st.last_error, (unsigned long long)st.pending_rows);
	cr_assert_eq(st.dropped_rows, 0, "%s", what);
}

/*
 * Deleted (alone: its -wal and -shm stay behind), deleted with them, and
 * replaced by another store's file: each time the writer writes what comes
 * next to the file now at the name, that file holds exactly what it had
 * plus that, and what the old file had is not in it (its -wal was not
 * taken for the new file's).  Replaced by a file that is not a database,
 * the writer waits without touching it.
 */
Test(faults, file_deleted_or_replaced_goes_on_at_the_name, .timeout = 120)
{
	char path[PATH_MAX], side[PATH_MAX + 8], other[PATH_MAX + 8];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	struct store_writer *w = open_writer(path);
	submit_buckets(w, base, 0, 10);
	store_writer_sync(w);
	expect_written(w, "the first file");

	cr_assert_eq(unlink(path), 0);
	submit_buckets(w, base, 10, 20);
	expect_changes_then_written(w, 1, "deleted alone");
	cr_expect_eq(store_total(path, base, 0, 100), seed_total(10, 20), "deleted alone");

	for (int k = 0; k < 3; k++) {
		snprintf(side, sizeof side, "%s%s", path, k == 1 ? "-wal" : k == 2 ? "-shm" : "");
		cr_assert(unlink(side) == 0 || errno == ENOENT, "%s: %s", side, strerror(errno));
	}
	submit_buckets(w, base, 20, 30);
	expect_changes_then_written(w, 2, "deleted with its -wal and -shm");
	cr_expect_eq(store_total(path, base, 0, 100), seed_total(20, 30), "deleted with -wal and -shm");

	/* Another store's file, written and closed (no -wal of its own). */
	snprintf(other, sizeof other, "%s.other", path);
	struct store_writer *o = open_writer(other);
	submit_buckets(o, base, 50, 60);
	store_writer_close(o);
	cr_assert_eq(rename(other, path), 0);
	submit_buckets(w, base, 30, 40);
	expect_changes_then_written(w, 3, "replaced by another store");
	cr_expect_eq(store_total(path, base, 0, 100), seed_total(30, 40) + seed_total(50, 60),
	             "replaced by another store");

	/* Not a database: left as it is, and the batches wait. */
	write_text_file(other, "not a database\n");
	cr_assert_eq(rename(other, path), 0);
	uint64_t per = submit_buckets(w, base, 40, 50);
	store_writer_sync(w);
	store_writer_sync(w);
	struct store_writer_status st;
	store_writer_status(w, &st);
	cr_expect(st.file_changes == 4 && st.failing && !st.open && st.pending_rows == per &&
	                  strstr(st.file_change, "replaced") && strstr(st.last_error, "not a database"),
	          "a foreign file: %llu changes, failing %d, open %d, %llu rows pending, \"%s\", \"%s\"",
	          (unsigned long long)st.file_changes, st.failing, st.open,
	          (unsigned long long)st.pending_rows, st.file_change, st.last_error);
	store_writer_close(w);
	size_t len;
	char *bytes = file_bytes(path, &len);
	cr_expect(len == strlen("not a database\n") && memcmp(bytes, "not a database\n", len) == 0,
	          "the foreign file was written to");
	free(bytes);
}

/* ---- crash durability ---- */

#define CRASH_BUCKETS 20 /* per batch: about 700 rows */

/* The child: batch after batch from index `from`, reporting each one synced on fd. */
static void crash_child(const char *path, int64_t base, int64_t from, int fd)
{
	struct store_error err = {{0}};
	struct store_writer *w = store_writer_open(path, &err);
	if (!w)
		_exit(2);
	for (int64_t i = from;; i++) {
		int tix[NTARGETS];
		struct store_batch *b = batch_begin(tix);
		for (int64_t k = i * CRASH_BUCKETS; k < (i + 1) * CRASH_BUCKETS; k++)
			batch_add_bucket(b, tix, base, k, NULL);
		store_writer_submit(w, b);
		store_writer_sync(w);
		struct store_writer_status st;
		store_writer_status(w, &st);
		if (st.failing)
			_exit(4);
		if (write(fd, &i, sizeof i) != sizeof i)
			_exit(5);
	}
}

Test(faults, sigkill_keeps_every_synced_batch, .timeout = 300)
{
	char path[PATH_MAX];
	db_path(path, sizeof path);
	int64_t base = base_days_ago(1);
	unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
	srand(seed);
	cr_log_info("seed %u", seed);
	int64_t next = 0;
	enum { MAX_BATCHES = 1 << 15 };
	bool *synced = calloc(MAX_BATCHES, sizeof *synced);
	cr_assert_not_null(synced);
	int rounds = 8;
	for (int round = 0; round < rounds; round++) {
		int p[2];
		cr_assert_eq(pipe(p), 0);
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(p[0]);
			crash_child(path, base, next, p[1]);
			_exit(1);
		}
		close(p[1]);
		/* 20 to 400 ms: mostly mid-transaction, since the child is always writing. */
		usleep((useconds_t)(20000 + rand() % 380000));
		kill(pid, SIGKILL);
		int status;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFSIGNALED(status), "child ended on its own: status %d", status);
		int64_t i, last = next - 1;
		ssize_t got;
		while ((got = read(p[0], &i, sizeof i)) == sizeof i) {
			cr_assert(i >= next && i < MAX_BATCHES);
			synced[i] = true;
			last = i;
		}
		close(p[0]);

		char ok[64];
		raw_integrity(path, ok, sizeof ok);
		cr_assert_str_eq(ok, "ok", "round %d: integrity_check", round);
		struct store_error err = {{0}};
		struct store_reader *r = store_reader_open(path, &err);
		/* Killed while it created the schema: nothing to read yet, and the next child migrates. */
		if (!r && last < 0 && strstr(err.msg, "no schema"))
			continue;
		cr_assert_not_null(r, "round %d: store_reader_open: %s", round, err.msg);
		/* Every synced batch whole; the one in flight whole or absent. */
		for (int64_t b = 0; b <= last + 1; b++) {
			struct store_query q =
				range_query(base, b * CRASH_BUCKETS, (b + 1) * CRASH_BUCKETS);
			struct expect e = {.targets = 7, .thread_t = -1, .k0 = b * CRASH_BUCKETS,
			                   .k1 = (b + 1) * CRASH_BUCKETS, .times = 1};
			uint64_t want[NSTACKS];
			uint64_t want_total = expected(&e, want);
			struct tally t;
			uint64_t total = run_query(r, &q, &t);
			if (b < MAX_BATCHES && synced[b])
				cr_assert_eq(total, want_total, "round %d: synced batch %lld has %llu of %llu",
				             round, (long long)b, (unsigned long long)total,
				             (unsigned long long)want_total);
			else
				cr_assert(total == 0 || total == want_total,
				          "round %d: batch %lld is partial: %llu of %llu", round, (long long)b,
				          (unsigned long long)total, (unsigned long long)want_total);
		}
		store_reader_close(r);
		/* The next child starts past anything the killed one may have committed. */
		next = last + 2;
		cr_assert_lt(next + 200, MAX_BATCHES);
	}
	cr_log_info("synced %lld batches over %d kills", (long long)next, rounds);
	free(synced);
}

/* ---- the writer's memory answers as the file will ---- */

/* An answer as text, comparable across sources: sorted rows, then the total. */
