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

/*
 * Request contexts: the process CTX_PID, whose every bucket holds, per
 * trace i, CTX_CHECKOUT samples of checkout in span 0 ("route=/checkout")
 * and CTX_CART of cart (one waiting) in span 1 ("route=/cart", "user=vip"),
 * plus CTX_LOOP samples of loop in no context.
 */
#define CTX_PID 4321
#define CTX_CHECKOUT 3
#define CTX_CART 2
#define CTX_LOOP 5
void trace_of(int i, uint8_t out[STORE_TRACE_ID_LEN]);
void span_of(int i, int j, uint8_t out[STORE_SPAN_ID_LEN]);
/* One bucket at bucket_start with traces [first, first + n); pad: bytes added to each label value. */
struct store_batch *context_batch(int64_t bucket_start, int first, int n, size_t pad);
/* The samples a query counts (store_query_stacks' total). */
uint64_t query_total(struct store_reader *r, const struct store_query *q);

#endif
