/*
 * log — the daemon's log on stderr (journald takes it from there): one
 * line a message, its level first, and repeats of one message counted and
 * summed up once a minute rather than written each.
 */
#ifndef PYPROFD_LOG_H
#define PYPROFD_LOG_H

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };
void log_init(enum log_level level);
void log_set_level(enum log_level level);
/* The names log_level_parse takes, as an error lists them. */
#define LOG_LEVEL_CHOICES "error, warn, info, debug"
int log_level_parse(const char *name, enum log_level *out);
const char *log_level_name(enum log_level level);
/* One line; past a few of one format a minute, the rest are counted and summed up later. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One line, never held back: for a caller that sums up its own repeats. */
void log_always(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Now and then (once a second): the counts of repeats whose minute is over. */
void log_tick(void);
/* At exit: every count not told yet. */
void log_finish(void);
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
