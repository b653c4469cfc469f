/*
 * The remedy a refused read names (uw_access_remedy): root, CAP_SYS_PTRACE
 * or Yama's ptrace_scope, whichever stands in the way.  Yama is absent on
 * some machines, so its cases are judged from facts given here.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "unwind.h"

static void expect_remedy(struct uw_access_facts f, const char *const want[], const char *what)
{
	char buf[256];
	uw_access_remedy(&f, buf, sizeof buf);
	for (size_t i = 0; want[i]; i++)
		cr_expect(strstr(buf, want[i]), "%s: \"%s\" lacks \"%s\"", what, buf, want[i]);
}

Test(access, each_obstacle_names_its_remedy)
{
	struct uw_access_facts mine = {.same_user = true, .target_dumpable = true, .ptrace_scope = 0};
	expect_remedy((struct uw_access_facts){.ptrace_scope = -1, .target_dumpable = true},
	              (const char *[]){"another user's process", "root", "CAP_SYS_PTRACE", NULL},
	              "another user's");
	struct uw_access_facts f = mine;
	f.target_dumpable = false;
	expect_remedy(f, (const char *[]){"privileged", "root", NULL}, "setuid");
	f = mine;
	f.ptrace_scope = 1;
	expect_remedy(f, (const char *[]){"ptrace_scope is 1", "ancestors", "kernel.yama.ptrace_scope=0", NULL},
	              "Yama 1");
	f.ptrace_scope = 2;
	expect_remedy(f, (const char *[]){"ptrace_scope is 2", "CAP_SYS_PTRACE", NULL}, "Yama 2");
	f.ptrace_scope = 3;
	f.root = true;
	expect_remedy(f, (const char *[]){"ptrace_scope is 3", "root included", NULL}, "Yama 3");
	f = mine;
	f.root = true;
	expect_remedy(f, (const char *[]){"without CAP_SYS_PTRACE", NULL}, "root, no capability");
	f.cap_sys_ptrace = true;
	expect_remedy(f, (const char *[]){"security module", NULL}, "root with the capability");
}

Test(access, a_permission_error_gets_its_remedy_and_others_do_not)
{
	struct uw_error err = {.status = UW_EPERM};
	strcpy(err.msg, "not permitted to read the memory of process 1");
	uw_error_add_remedy(&err, 1);
	cr_expect(strstr(err.msg, "not permitted to read the memory of process 1 ("), "%s", err.msg);
	cr_expect_eq(err.msg[strlen(err.msg) - 1], ')', "%s", err.msg);
	struct uw_error other = {.status = UW_ENOPROC};
	strcpy(other.msg, "no process with pid 1");
	uw_error_add_remedy(&other, 1);
	cr_expect_str_eq(other.msg, "no process with pid 1");
	/* A long cause keeps its end of message: the remedy is cut, never the buffer overrun. */
	struct uw_error full = {.status = UW_EPERM};
	memset(full.msg, 'x', sizeof full.msg - 1);
	full.msg[sizeof full.msg - 1] = '\0';
	uw_error_add_remedy(&full, 1);
	cr_expect_eq(strlen(full.msg), sizeof full.msg - 1);
}
