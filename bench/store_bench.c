/*
 * The history store under a synthetic day: 10 targets x 4 threads x 20
 * stacks, one row per 10 s bucket each (6.9 million rows), written through
 * the writer as the daemon would write it, then queried over 1 h and 24 h,
 * before and after the default retention (10 s buckets older than 1 h into
 * 1 min, older than a day into 1 h).  Prints figures; passes or fails on
 * nothing.  With a directory, the database is left there (before retention)
 * for bench/history.py to query through the daemon.
 *
 *   make bench-history
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store.h"

#define TARGETS 10
#define THREADS 4
#define STACKS 20
#define DEPTH 12
#define BUCKET 10
#define DAY (24 * 3600)

static double bench_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One flush interval of every target: the stacks are the same each time, as a steady service's are. */
static struct store_batch *batch_for(int64_t bucket)
{
	struct store_batch *b = store_batch_new();
	char exe[] = "/usr/bin/python3", cmd[64], name[32], file[] = "service.py";
	for (int t = 0; t < TARGETS; t++) {
		snprintf(cmd, sizeof cmd, "python3 service.py --shard %d", t);
		const char *key = "service", *value = "bench";
		struct store_target_info info = {.pid = 1000 + t, .start_time = 42, .uid = 0,
		                                 .executable = exe, .command_line = cmd,
		                                 .python_version = "3.13.0", .nlabels = 1,
		                                 .label_keys = &key, .label_values = &value};
		int ti = store_batch_target(b, &info);
		for (int s = 0; s < STACKS; s++) {
			int32_t parent = -1;
			for (int d = 0; d < DEPTH; d++) {
				/* Stacks share their first half: a prefix tree, as real ones do. */
				snprintf(name, sizeof name, "f%d_%d", d < DEPTH / 2 ? 0 : s, d);
				parent = store_batch_stack(b, parent, store_batch_frame(b, name, file, 10 + d, 0, 0));
			}
			for (int th = 0; th < THREADS; th++)
				store_batch_samples(b, ti, bucket, BUCKET, 7000 + (uint64_t)th, parent, 1 + (uint64_t)(s % 5), 0);
		}
	}
	return b;
}

static double query_ms(const char *path, const struct store_query *q, uint64_t *total)
{
	struct store_error err;
	struct store_reader *r = store_reader_open(path, &err);
	if (!r) {
		fprintf(stderr, "store_bench: %s\n", err.msg);
		exit(1);
	}
	double t0 = bench_now_s();
	if (store_query_stacks(r, q, NULL, NULL, total, &err) != 0) {
		fprintf(stderr, "store_bench: query: %s\n", err.msg);
		exit(1);
	}
	double ms = (bench_now_s() - t0) * 1e3;
	store_reader_close(r);
	return ms;
}

/* Copies the database file (WAL checkpointed by the writer's close) to dir/pyprofd.db. */
static int keep_copy(const char *path, const char *dir)
{
	char to[4096];
	snprintf(to, sizeof to, "%s/pyprofd.db", dir);
	FILE *in = fopen(path, "rb"), *out = fopen(to, "wb");
	int rc = in && out ? 0 : -1;
	char buf[1 << 16];
	size_t n;
	while (rc == 0 && (n = fread(buf, 1, sizeof buf, in)) > 0)
		if (fwrite(buf, 1, n, out) != n)
			rc = -1;
	if (in)
		fclose(in);
	if (out && fclose(out) != 0)
		rc = -1;
	return rc;
}

int main(int argc, char **argv)
{
	const char *keep = argc > 1 ? argv[1] : NULL;
	char dir[] = "/tmp/pyprofd-store-bench.XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char path[128];
	snprintf(path, sizeof path, "%s/pyprofd.db", dir);
	struct store_error err;
	struct store_writer *w = store_writer_open(path, &err);
	if (!w) {
		fprintf(stderr, "store_bench: %s\n", err.msg);
		return 1;
	}
	store_writer_set_limits(w, UINT64_MAX, 0);
	int64_t start = (int64_t)time(NULL) - DAY;
	/* On a whole hour: ranges then cover whole merged buckets, whose totals retention keeps exact. */
	start -= start % 3600;
	double t0 = bench_now_s();
	for (int64_t bucket = start; bucket < start + DAY; bucket += BUCKET) {
		store_writer_submit(w, batch_for(bucket));
		/* Keep the queue short, as the daemon's flushes would. */
		if ((bucket - start) % (BUCKET * 360) == 0)
			store_writer_sync(w);
	}
	store_writer_sync(w);
	double write_s = bench_now_s() - t0;
	struct store_writer_status st;
	store_writer_status(w, &st);
	store_writer_close(w);
	struct stat sb;
	stat(path, &sb);

	uint64_t rows = (uint64_t)TARGETS * THREADS * STACKS * (DAY / BUCKET), total;
	printf("history store: %d targets x %d threads x %d stacks, 10 s buckets, 24 h (%llu rows)\n",
	       TARGETS, THREADS, STACKS, (unsigned long long)rows);
	printf("  write                 %8.0f rows/s (%.1f s)\n", (double)rows / write_s, write_s);
	printf("  database              %8.1f MiB (%.1f bytes per row, %.1f MiB per target-day)\n",
	       (double)sb.st_size / 1048576.0, (double)sb.st_size / (double)rows,
	       (double)sb.st_size / 1048576.0 / TARGETS);
	struct store_query one_hour = {.pid = 1000, .from_unix = (double)(start + DAY - 3600),
	                               .until_unix = (double)(start + DAY)};
	struct store_query one_day = {.pid = 1000, .from_unix = (double)start, .until_unix = (double)(start + DAY)};
	struct store_query all_day = {.from_unix = (double)start, .until_unix = (double)(start + DAY)};
	double ms = query_ms(path, &one_hour, &total);
	printf("  query 1 target, 1 h    %8.1f ms (%llu samples)\n", ms, (unsigned long long)total);
	ms = query_ms(path, &one_day, &total);
	printf("  query 1 target, 24 h   %8.1f ms (%llu samples)\n", ms, (unsigned long long)total);
	ms = query_ms(path, &all_day, &total);
	printf("  query 10 targets, 24 h %8.1f ms (%llu samples)\n", ms, (unsigned long long)total);
	(void)st;
	if (keep && keep_copy(path, keep) != 0) {
		fprintf(stderr, "store_bench: cannot copy the database to %s\n", keep);
		return 1;
	}

	/* The defaults' retention, as the day's end would run it. */
	uint64_t before = total;
	w = store_writer_open(path, &err);
	if (!w) {
		fprintf(stderr, "store_bench: %s\n", err.msg);
		return 1;
	}
	const struct store_retention_step steps[] = {{3600, 60}, {86400, 3600}};
	t0 = bench_now_s();
	store_writer_retention(w, steps, 2);
	store_writer_sync(w);
	double retention_s = bench_now_s() - t0;
	store_writer_close(w);
	printf("  retention (1 h -> 1 min) %6.1f s\n", retention_s);
	ms = query_ms(path, &one_day, &total);
	printf("  query 1 target, 24 h   %8.1f ms after retention\n", ms);
	ms = query_ms(path, &all_day, &total);
	printf("  query 10 targets, 24 h %8.1f ms after retention (%llu samples: %s)\n", ms,
	       (unsigned long long)total, total == before ? "exact" : "NOT EXACT");
	char wal[160], shm[160];
	snprintf(wal, sizeof wal, "%s-wal", path);
	snprintf(shm, sizeof shm, "%s-shm", path);
	unlink(path);
	unlink(wal);
	unlink(shm);
	rmdir(dir);
	return 0;
}
