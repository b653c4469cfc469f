/*
 * The daemon's log: one line per event on stderr, with a level.  Under
 * systemd stderr goes to the journal, which reads the level from a "<N>"
 * prefix; by hand, lines carry the time instead.  The log is one object for
 * the whole process; this file owns it.
 *
 * Repeats are held back here, for every caller: past LOG_BURST lines of
 * one format (one call site) within LOG_WINDOW_S of the first, the rest
 * are counted, and once the window is over one line says how many more
 * came like them and gives the last.  A flood of refused connections or of
 * short-lived targets costs a few lines a minute, not one line an event.
 * Debug lines, asked for by a person watching, are all written.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"

#define LOG_LINE_MAX 1024
#define LOG_WINDOW_S 60.0
#define LOG_BURST 5
/* Formats followed at once: more than the daemon has call sites, so none is ever dropped. */
#define LOG_FORMATS_MAX 128

/* One format's lines in its current window. */
struct log_repeats {
	const char *fmt; /* the key: a call site's format string */
	enum log_level level;
	double window_start; /* CLOCK_MONOTONIC seconds */
	unsigned written;    /* lines of this window written */
	uint64_t held;       /* and held back */
	char last[LOG_LINE_MAX]; /* the last held back, for the summary */
};

static struct {
	pthread_mutex_t lock; /* the repeats, and whole lines on stderr */
	enum log_level level;
	bool journal; /* stderr is the journal: syslog-style priority prefixes */
	struct log_repeats repeats[LOG_FORMATS_MAX];
	size_t nrepeats;
} logger = {.lock = PTHREAD_MUTEX_INITIALIZER, .level = LOG_LEVEL_INFO};

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* sd-daemon(3) priorities: err, warning, info, debug. */
static const char *const journal_prefixes[] = {"<3>", "<4>", "<6>", "<7>"};

void log_init(enum log_level level)
{
	pthread_mutex_lock(&logger.lock);
	logger.level = level;
	logger.journal = getenv("JOURNAL_STREAM") != NULL;
	pthread_mutex_unlock(&logger.lock);
}

void log_set_level(enum log_level level)
{
	pthread_mutex_lock(&logger.lock);
	logger.level = level;
	pthread_mutex_unlock(&logger.lock);
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

/* One finished line on stderr, with its level's prefix or the time.  Lock held. */
static void log_write(enum log_level level, const char *line)
{
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
	fprintf(stderr, "%s.%03ld pyprofd %s: %s\n", stamp, now.tv_nsec / 1000000, level_names[level],
	        line);
}

/* Say what a window held back, if anything, and start the next one.  Lock held. */
static void log_window_close(struct log_repeats *r, double now)
{
	if (r->held) {
		char line[LOG_LINE_MAX + 64];
		snprintf(line, sizeof line, "%llu more like this in %.0f s, the last: %s",
		         (unsigned long long)r->held, now - r->window_start, r->last);
		log_write(r->level, line);
	}
	r->window_start = now;
	r->written = 0;
	r->held = 0;
}

/*
 * The repeats of fmt, found or made.  With every slot taken, the one whose
 * window began first is closed and given to fmt.  Lock held.
 */
static struct log_repeats *log_repeats_of(const char *fmt, enum log_level level, double now)
{
	struct log_repeats *oldest = NULL;
	for (size_t i = 0; i < logger.nrepeats; i++) {
		struct log_repeats *r = &logger.repeats[i];
		if (r->fmt == fmt)
			return r;
		if (!oldest || r->window_start < oldest->window_start)
			oldest = r;
	}
	struct log_repeats *r = oldest;
	if (logger.nrepeats < LOG_FORMATS_MAX)
		r = &logger.repeats[logger.nrepeats++];
	else
		log_window_close(r, now);
	r->fmt = fmt;
	r->level = level;
	r->window_start = now;
	r->written = 0;
	r->held = 0;
	return r;
}

/* The message as one line: whatever it held, one line per event. */
__attribute__((format(printf, 2, 0)))
static void log_format(char line[LOG_LINE_MAX], const char *fmt, va_list ap)
{
	vsnprintf(line, LOG_LINE_MAX, fmt, ap);
	for (char *p = line; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
}

void log_always(enum log_level level, const char *fmt, ...)
{
	pthread_mutex_lock(&logger.lock);
	if (level <= logger.level) {
		char line[LOG_LINE_MAX];
		va_list ap;
		va_start(ap, fmt);
		log_format(line, fmt, ap);
		va_end(ap);
		log_write(level, line);
	}
	pthread_mutex_unlock(&logger.lock);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	pthread_mutex_lock(&logger.lock);
	if (level > logger.level) {
		pthread_mutex_unlock(&logger.lock);
		return;
	}
	char line[LOG_LINE_MAX];
	va_list ap;
	va_start(ap, fmt);
	log_format(line, fmt, ap);
	va_end(ap);
	if (level == LOG_LEVEL_DEBUG) {
		log_write(level, line);
	} else {
		double now = clock_mono_s();
		struct log_repeats *r = log_repeats_of(fmt, level, now);
		if (now - r->window_start >= LOG_WINDOW_S)
			log_window_close(r, now);
		if (r->written < LOG_BURST) {
			r->written++;
			log_write(level, line);
		} else {
			r->held++;
			memcpy(r->last, line, sizeof line);
		}
	}
	pthread_mutex_unlock(&logger.lock);
}

/* Close the windows that are over (all of them when `all`); forget formats gone quiet. */
static void log_sweep(bool all)
{
	pthread_mutex_lock(&logger.lock);
	double now = clock_mono_s();
	for (size_t i = 0; i < logger.nrepeats;) {
		struct log_repeats *r = &logger.repeats[i];
		if (all || now - r->window_start >= LOG_WINDOW_S) {
			bool quiet = r->held == 0;
			log_window_close(r, now);
			if (quiet) {
				*r = logger.repeats[--logger.nrepeats];
				continue;
			}
		}
		i++;
	}
	fflush(stderr);
	pthread_mutex_unlock(&logger.lock);
}

void log_tick(void)
{
	log_sweep(false);
}

void log_finish(void)
{
	log_sweep(true);
}
