/*
 * The daemon's log: one line per event on stderr, with a level.  Under
 * systemd stderr goes to the journal, which reads the level from a "<N>"
 * prefix; by hand, lines carry the time instead.  The log is one object for
 * the whole process; this file owns it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pyprofd.h"

static struct {
	enum log_level level;
	bool journal; /* stderr is the journal: syslog-style priority prefixes */
} logger = {LOG_LEVEL_INFO, false};

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* sd-daemon(3) priorities: err, warning, info, debug. */
static const char *const journal_prefixes[] = {"<3>", "<4>", "<6>", "<7>"};

void log_init(enum log_level level)
{
	logger.level = level;
	logger.journal = getenv("JOURNAL_STREAM") != NULL;
}

void log_set_level(enum log_level level)
{
	logger.level = level;
}

int log_level_parse(const char *name, enum log_level *out)
{
	for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++)
		if (strcmp(name, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	return -1;
}

const char *log_level_name(enum log_level level)
{
	return level_names[level];
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if (level > logger.level)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* One line per event, whatever the message held. */
	for (char *p = line; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	if (logger.journal) {
		fprintf(stderr, "%s%s\n", journal_prefixes[level], line);
		return;
	}
	struct timespec now;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &now);
	localtime_r(&now.tv_sec, &tm);
	char stamp[32];
	strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ld pyprofd %s: %s\n", stamp, now.tv_nsec / 1000000,
	        level_names[level], line);
}
