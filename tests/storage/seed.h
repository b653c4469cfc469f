/*
 * The seeded history the storage tests share: data that is a pure function
 * of its coordinates (target, bucket, thread, stack), written through the
 * store, and the expected answer of a query computed from the same loop.
 * sqlite3.h is used only to look at or tamper with a file from outside.
 */
#ifndef PYPROFD_TESTS_SEED_H
#define PYPROFD_TESTS_SEED_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store.h"

#define NTARGETS 3
#define NTHREADS 2
#define NSTACKS 6
#define BUCKET_S 10

struct seed_frame {
	const char *function, *file;
	int line, kind;
};

struct expect {
	unsigned targets; /* bit t */
	int thread_t, thread_th; /* -1: every thread */
	int64_t k0, k1;          /* buckets [k0, k1) */
	int times;               /* how many times each bucket was written */
};

struct tally {
	uint64_t per_stack[NSTACKS];
	unsigned rows, unknown;
	char first_unknown[256];
};

extern const struct seed_frame frames[NSTACKS];
extern const int parent[NSTACKS];
extern const pid_t pids[NTARGETS];
extern const char *const apps[NTARGETS];
extern const char *const envs[NTARGETS];
uint64_t tid_of(int t, int th);
uint64_t count_of(int t, int64_t k, int th, int s);
int64_t base_days_ago(int days);
void batch_add_bucket(struct store_batch *b, const int tix[NTARGETS], int64_t base,
                      int64_t k, uint64_t *rows_out);
struct store_batch *batch_begin(int tix[NTARGETS]);
uint64_t submit_buckets(struct store_writer *w, int64_t base, int64_t k0, int64_t k1);
uint64_t expected(const struct expect *e, uint64_t per_stack[NSTACKS]);
int stack_of(const struct store_row *row);
int tally_row(void *ctx, const struct store_row *row);
uint64_t run_query(struct store_reader *r, const struct store_query *q, struct tally *t);
void check_query(struct store_reader *r, const struct store_query *q,
                 const struct expect *e, const char *what);
struct store_query range_query(int64_t base, int64_t k0, int64_t k1);
sqlite3 *raw_open(const char *path);
int64_t raw_int(const char *path, const char *sql);
void raw_exec(const char *path, const char *sql);
void raw_integrity(const char *path, char *out, size_t len);
void db_path(char *out, size_t len);
struct store_writer *open_writer(const char *path);
struct store_reader *open_reader(const char *path);
void expect_written(struct store_writer *w, const char *what);
void seed_overlapping(struct store_writer *w, int64_t base, int64_t from, int64_t to, int per);

#endif
