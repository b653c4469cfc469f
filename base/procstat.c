/* The one parser of a /proc stat line, a process's or a thread's. */
#include <stdio.h>
#include <string.h>

#include "procstat.h"

char proc_stat_state_letter(const char *buf)
{
	/* The command name may hold anything, ") " included: the fields start after the last ')'. */
	const char *close = strrchr(buf, ')');
	return close && close[1] == ' ' && close[2] != '\0' ? close[2] : '?';
}

int proc_stat_parse(const char *buf, struct proc_stat *out)
{
	const char *close = strrchr(buf, ')');
	if (proc_stat_state_letter(buf) == '?')
		return -1;
	unsigned long long start = 0, code = 0, stack = 0;
	int ppid = 0;
	unsigned flags = 0;
	out->state = close[2];
	/*
	 * After ") ": state is field 3, the parent field 4, the flags field 9,
	 * the start time field 22, the start of code 26 and of the stack 28.
	 */
	int got = sscanf(close + 2, "%*c %d %*d %*d %*d %*d %u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
	                            "%*d %*d %llu %*u %*d %*u %llu %*u %llu", &ppid, &flags, &start, &code, &stack);
	out->ppid = got >= 1 ? (pid_t)ppid : 0;
	out->flags = got >= 2 ? flags : 0;
	out->has_start_time = got >= 3;
	out->start_time = start;
	out->start_code = got >= 4 ? code : 0;
	out->start_stack = got >= 5 ? stack : 0;
	return 0;
}
