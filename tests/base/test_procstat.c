/* The stat line of /proc/PID/stat as base/procstat.c reads it. */
#include <criterion/criterion.h>

#include "procstat.h"

/* A name holding ") " and digits: fields are counted after the last ')'. */
static const char stat_line[] =
	"4242 (py) 7 (x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 12 3 0 0 20 0 3 0 987654 "
	"123456789 2048 18446744073709551615 94000000000000 94000000004096 140700000000000 "
	"0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

Test(procstat, fields_after_the_name)
{
	struct proc_stat st;
	cr_assert_eq(proc_stat_parse(stat_line, &st), 0);
	cr_expect_eq(st.state, 'S');
	cr_expect_eq(st.ppid, 1);
	cr_expect_eq(st.flags, 4194560u);
	cr_expect(st.has_start_time);
	cr_expect_eq(st.start_time, 987654u);
	cr_expect_eq(st.start_code, 94000000000000ull);
	cr_expect_eq(st.start_stack, 140700000000000ull);
}

Test(procstat, a_line_cut_short_gives_what_it_has)
{
	struct proc_stat st;
	cr_assert_eq(proc_stat_parse("1 (init) R 0 1 1 0 -1 64", &st), 0);
	cr_expect_eq(st.state, 'R');
	cr_expect_eq(st.flags, 64u);
	cr_expect(!st.has_start_time);
	cr_expect_eq(st.start_code, 0u);
	cr_expect_eq(st.start_stack, 0u);
	cr_expect_eq(proc_stat_parse("no stat line", &st), -1);
}
