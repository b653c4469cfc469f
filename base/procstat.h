/*
 * The one parser of a /proc/PID/stat (or /proc/PID/task/TID/stat) line: the
 * unwinder, the daemon's look at a process and the export writers' check of
 * whose sources they read all take its fields from here.
 */
#ifndef PYPROFD_PROCSTAT_H
#define PYPROFD_PROCSTAT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* What a stat line says of its process or thread. */
struct proc_stat {
	char state;          /* 'R', 'S', ... */
	pid_t ppid;          /* 0 if the line stops before it */
	unsigned flags;      /* the kernel's PF_* of the task; 0 if the line stops before it */
	bool has_start_time;
	uint64_t start_time; /* clock ticks after boot */
	/* Where its program's code and its stack begin: an exec maps them anew.  0 if not given. */
	uint64_t start_code, start_stack;
};
/* The task is on its way out (exit has begun; its memory may be gone already). */
#define PROC_PF_EXITING 0x4u
/* 0, or -1 when the text is no stat line. */
int proc_stat_parse(const char *buf, struct proc_stat *out);
/* The state letter alone ('?' if it is not a stat line): no field after it is parsed. */
char proc_stat_state_letter(const char *buf);

#endif
