/*
 * Key and value pairs: what a later put of a key does, what add keeps,
 * copies and comparisons, and that a free leaves a set that can be used
 * again.  Every label set, rule's settings and collector header list of
 * the daemon is one of these.
 */
#include <criterion/criterion.h>

#include <stdio.h>

#include "labels.h"

Test(labels, a_later_put_of_a_key_replaces_its_value_in_place)
{
	struct labels l = {0};
	cr_assert_eq(labels_put(&l, "service", "api"), 0);
	cr_assert_eq(labels_put(&l, "zone", "a"), 0);
	cr_assert_eq(labels_put(&l, "service", "web"), 0);
	cr_assert_eq(l.n, 2);
	cr_expect_str_eq(l.keys[0], "service");
	cr_expect_str_eq(l.values[0], "web");
	cr_expect_str_eq(labels_get(&l, "zone"), "a");
	cr_expect_null(labels_get(&l, "missing"));
	labels_free(&l);
	cr_expect_eq(l.n, 0);
	cr_expect_null(l.keys);
	cr_assert_eq(labels_put(&l, "again", "1"), 0, "a freed set takes pairs again");
	labels_free(&l);
}

Test(labels, add_keeps_every_pair_in_order)
{
	struct labels l = {0};
	cr_assert_eq(labels_add(&l, "a", "1"), 0);
	cr_assert_eq(labels_add(&l, "a", "2"), 0);
	cr_assert_eq(l.n, 2, "a selection's conditions all stand");
	cr_expect_str_eq(labels_get(&l, "a"), "1");
	labels_free(&l);
}

Test(labels, many_pairs_grow_both_arrays_together)
{
	struct labels l = {0};
	char key[16], value[16];
	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof key, "k%d", i);
		snprintf(value, sizeof value, "v%d", i);
		cr_assert_eq(labels_put(&l, key, value), 0);
	}
	cr_assert_eq(l.n, 1000);
	cr_expect_str_eq(l.keys[999], "k999");
	cr_expect_str_eq(l.values[999], "v999");
	cr_expect_str_eq(labels_get(&l, "k500"), "v500");
	labels_free(&l);
}

Test(labels, copies_are_equal_and_independent)
{
	struct labels a = {0}, b;
	cr_assert_eq(labels_put(&a, "x", "1"), 0);
	cr_assert_eq(labels_add(&a, "x", "2"), 0);
	cr_assert_eq(labels_copy(&b, &a), 0);
	cr_expect(labels_equal(&a, &b));
	cr_assert_eq(labels_put(&b, "x", "3"), 0);
	cr_expect(!labels_equal(&a, &b), "a copy owns its strings");
	cr_expect_str_eq(a.values[0], "1");
	struct labels empty = {0}, none;
	cr_assert_eq(labels_copy(&none, &empty), 0);
	cr_expect(labels_equal(&none, &empty));
	cr_expect(!labels_equal(&a, &empty));
	labels_free(&a);
	labels_free(&b);
}
