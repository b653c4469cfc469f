/*
 * The one grammar of a duration, which the daemon's configuration and
 * pyprofd-ctl's options share: the units both ever took, spaces before a
 * unit, the bounds each caller sets, and what neither ever took.
 */
#include <criterion/criterion.h>

#include "duration.h"

static double seconds(const char *text)
{
	double v = -1;
	return duration_parse(text, 0, 1e10, &v) == 0 ? v : -1;
}

Test(duration, every_unit_and_a_bare_number)
{
	cr_assert_float_eq(seconds("500ms"), 0.5, 1e-12);
	cr_assert_eq(seconds("90s"), 90);
	cr_assert_eq(seconds("15m"), 900);
	cr_assert_eq(seconds("2h"), 7200);
	cr_assert_eq(seconds("1d"), 86400);
	cr_assert_eq(seconds("30"), 30, "a bare number is seconds");
	cr_assert_eq(seconds("1.5h"), 5400);
	cr_assert_eq(seconds("2 m"), 120, "spaces may stand before the unit");
	cr_assert_eq(seconds("0"), 0);
}

Test(duration, what_is_no_duration)
{
	const char *bad[] = {"", "5y", "-1s", "+1s", " 1s", "inf", "nan", "1e999", "s", "1s ", "1 2s",
	                     "0x10", "ms"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_lt(seconds(bad[i]), 0, "'%s' is no duration", bad[i]);
}

Test(duration, bounds_are_the_callers)
{
	double v = 42;
	cr_assert_eq(duration_parse("1s", 1, 3600, &v), 0);
	cr_assert_eq(v, 1);
	cr_assert_eq(duration_parse("999ms", 1, 3600, &v), -1, "under the least");
	cr_assert_eq(duration_parse("61m", 1, 3600, &v), -1, "over the most");
	cr_assert_eq(v, 1, "a refused duration leaves the value as it was");
}
