/*
 * Own and total samples per function (daemon/functions.c), what `top`, a
 * query's table and a diff show: a function counts once per stack in its
 * total however deep it recurses, frames of one function at other lines
 * are one row, and a diff orders by how far the own share moved.
 */
#include <criterion/criterion.h>

#include "pyprofd.h"

/* A stack of frames (innermost last) counted on a side. */
static void count_stack(struct functions *fs, int side, const uint32_t *frames,
                        const char *const *names, size_t depth, uint64_t count)
{
	functions_next_stack(fs, side, count);
	for (size_t i = depth; i-- > 0;)
		cr_assert_eq(functions_count(fs, side, frames[i], names[i], "f.py", 0, i + 1 == depth, count), 0);
}

static const Pyprofd__FunctionRow *row_of(const struct functions *fs, const char *name)
{
	for (size_t i = 0; i < fs->nrows; i++)
		if (strcmp(fs->rows[i]->function, name) == 0)
			return fs->rows[i];
	cr_assert_fail("no row %s", name);
	return NULL;
}

Test(functions, own_total_and_recursion)
{
	struct arena a = {0};
	struct functions fs;
	functions_init(&fs, &a);
	/* main -> fib -> fib -> fib, 6 samples; frame ids differ per line, names repeat. */
	const uint32_t deep[] = {1, 2, 3, 3};
	const char *const deep_names[] = {"main", "fib", "fib", "fib"};
	count_stack(&fs, 0, deep, deep_names, 4, 6);
	/* main -> work, 4 samples. */
	const uint32_t shallow[] = {1, 4};
	const char *const shallow_names[] = {"main", "work"};
	count_stack(&fs, 0, shallow, shallow_names, 2, 4);
	functions_sort(&fs, FUNCTIONS_BY_OWN);
	cr_assert_eq(fs.nrows, 3);
	cr_assert_eq(fs.samples[0], 10);
	const Pyprofd__FunctionRow *fib = row_of(&fs, "fib"), *main_row = row_of(&fs, "main");
	cr_assert_eq(fib->own, 6);
	cr_assert_eq(fib->total, 6, "recursion counts a function once per stack");
	cr_assert_eq(main_row->own, 0);
	cr_assert_eq(main_row->total, 10);
	cr_assert_str_eq(fs.rows[0]->function, "fib", "ordered by own samples");
	cr_assert_str_eq(fs.rows[1]->function, "work");
	functions_free(&fs);
	arena_free(&a);
}

Test(functions, diff_orders_by_change_of_share)
{
	struct arena a = {0};
	struct functions fs;
	functions_init(&fs, &a);
	const char *const names_a[] = {"a"}, *const names_b[] = {"b"};
	const uint32_t fa[] = {1}, fb[] = {2};
	/* Base: a 90 %, b 10 %.  Compared: a 50 %, b 50 %. */
	count_stack(&fs, 1, fa, names_a, 1, 90);
	count_stack(&fs, 1, fb, names_b, 1, 10);
	/* The next range numbers its frames afresh. */
	functions_forget_frames(&fs);
	const uint32_t ga[] = {7}, gb[] = {8};
	count_stack(&fs, 0, ga, names_a, 1, 5);
	count_stack(&fs, 0, gb, names_b, 1, 5);
	functions_sort(&fs, FUNCTIONS_BY_CHANGE);
	cr_assert_eq(fs.nrows, 2, "the same function across ranges is one row");
	cr_assert_eq(row_of(&fs, "a")->base_own, 90);
	cr_assert_eq(row_of(&fs, "a")->own, 5);
	cr_assert_eq(fs.samples[0], 10);
	cr_assert_eq(fs.samples[1], 100);
	/* Both moved 40 points; equal changes fall back to own, then name. */
	cr_assert_str_eq(fs.rows[0]->function, "a");
	functions_free(&fs);
	arena_free(&a);
}

Test(functions, many_functions)
{
	struct arena a = {0};
	struct functions fs;
	functions_init(&fs, &a);
	char name[32];
	for (uint32_t i = 0; i < 20000; i++) {
		snprintf(name, sizeof name, "fn%u", i % 5000);
		functions_next_stack(&fs, 0, 1);
		cr_assert_eq(functions_count(&fs, 0, i, name, "m.py", 0, true, 1), 0);
	}
	cr_assert_eq(fs.nrows, 5000);
	functions_sort(&fs, FUNCTIONS_BY_OWN);
	cr_assert_eq(fs.rows[0]->own, 4);
	functions_free(&fs);
	arena_free(&a);
}

Test(functions, first_line_tells_two_functions_of_one_name_apart)
{
	struct arena a = {0};
	struct functions fs;
	functions_init(&fs, &a);
	/* 3.8-3.10 name a method by co_name alone: its first line keeps it apart. */
	functions_next_stack(&fs, 0, 3);
	cr_assert_eq(functions_count(&fs, 0, 1, "run", "r.py", 40, true, 3), 0);
	functions_next_stack(&fs, 0, 2);
	cr_assert_eq(functions_count(&fs, 0, 2, "run", "r.py", 118, true, 2), 0);
	functions_next_stack(&fs, 0, 1);
	cr_assert_eq(functions_count(&fs, 0, 3, "run", "r.py", 40, true, 1), 0);
	functions_sort(&fs, FUNCTIONS_BY_OWN);
	cr_assert_eq(fs.nrows, 2);
	cr_expect_eq(fs.rows[0]->first_line, 40);
	cr_expect_eq(fs.rows[0]->own, 4);
	cr_expect_eq(fs.rows[1]->first_line, 118);
	functions_sort(&fs, FUNCTIONS_BY_NAME);
	cr_expect_eq(fs.rows[0]->first_line, 40, "one name, then by first line");
	functions_free(&fs);
	arena_free(&a);
}

Test(functions, sorts_by_total_and_by_name)
{
	struct arena a = {0};
	struct functions fs;
	functions_init(&fs, &a);
	/* b: own 5, total 5; a: own 0, total 5 + 1; c: own 1, total 1. */
	functions_next_stack(&fs, 0, 5);
	cr_assert_eq(functions_count(&fs, 0, 2, "b", "m.py", 1, true, 5), 0);
	cr_assert_eq(functions_count(&fs, 0, 1, "a", "m.py", 1, false, 5), 0);
	functions_next_stack(&fs, 0, 1);
	cr_assert_eq(functions_count(&fs, 0, 3, "c", "m.py", 1, true, 1), 0);
	cr_assert_eq(functions_count(&fs, 0, 1, "a", "m.py", 1, false, 1), 0);
	functions_sort(&fs, FUNCTIONS_BY_TOTAL);
	cr_expect_str_eq(fs.rows[0]->function, "a");
	cr_expect_str_eq(fs.rows[1]->function, "b");
	functions_sort(&fs, FUNCTIONS_BY_OWN);
	cr_expect_str_eq(fs.rows[0]->function, "b");
	cr_expect_str_eq(fs.rows[2]->function, "a");
	functions_sort(&fs, FUNCTIONS_BY_NAME);
	cr_expect_str_eq(fs.rows[0]->function, "a");
	cr_expect_str_eq(fs.rows[2]->function, "c");
	functions_free(&fs);
	arena_free(&a);
}
