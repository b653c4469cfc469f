/*
 * The daemon's configuration: defaults, then the config file (inih), then
 * the command line, each stronger than the last.  SIGHUP reads the file
 * again; the flags, parsed again from the same argv, still win.
 */
#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pyprofd.h"

static const char serve_usage[] =
	"usage: pyprofd [serve] [options]\n"
	"\n"
	"Run the profiling daemon in the foreground: it samples the Python processes\n"
	"clients attach it to and answers pyprofd-ctl on a Unix socket.\n"
	"\n"
	"  --state-dir DIR        everything under DIR: socket DIR/pyprofd.sock, data,\n"
	"                         config DIR/pyprofd.conf when present\n"
	"  --socket PATH          listen on PATH instead\n"
	"  --config FILE          read FILE (INI: [daemon] [limits] [sampling])\n"
	"  --log-level LEVEL      error, warn, info (default) or debug\n"
	"  --max-connections N    clients at once (default 64)\n"
	"  --max-targets N        processes known at once (default 256)\n"
	"  --warm-budget MB       memory kept for detached targets' caches (default 256)\n"
	"  --default-rate HZ      sampling rate when attach gives none (default 100)\n"
	"  --max-rate HZ          highest rate a client may ask for (default 1000)\n"
	"  --flush-interval S     how often samples reach the history database (default 10)\n"
	"\n"
	"Defaults: as root, state in /var/lib/pyprofd, socket /run/pyprofd/pyprofd.sock,\n"
	"config /etc/pyprofd/pyprofd.conf when present; under systemd $STATE_DIRECTORY\n"
	"and $RUNTIME_DIRECTORY win; as another user, $XDG_STATE_HOME/pyprofd (or\n"
	"~/.local/state/pyprofd) holds everything.  A socket passed by systemd socket\n"
	"activation is used as is.\n"
	"\n"
	"Signals: SIGTERM and SIGINT stop cleanly; SIGHUP reads the config file again.\n"
	"Other commands: pyprofd dump, pyprofd record (pyprofd COMMAND --help).\n";

#define MB (1024u * 1024u)

static void config_defaults(struct config *c)
{
	*c = (struct config){
		.log_level = LOG_LEVEL_INFO,
		.max_connections = 64,
		.max_connections_per_uid = 16,
		.root_reserved_connections = 8,
		.idle_timeout_s = 300,
		.request_timeout_s = 10,
		.max_message_bytes = 1 * MB,
		.max_pending_requests = 16,
		.max_targets = 256,
		.warm_budget_bytes = (size_t)256 * MB,
		.default_rate_hz = 100,
		.max_rate_hz = 1000,
		.top_window_s = 1,
		.flush_interval_s = 10,
		.bucket_seconds = 10,
		.max_pending_rows = 1u << 20,
		.max_db_bytes = (uint64_t)4096 * MB,
		/* 10 s buckets for an hour, 1 min for a day, 1 h after that. */
		.nretention = 2,
		.retention_age_s = {3600, 86400},
		.retention_bucket_s = {60, 3600},
	};
}

void config_free(struct config *c)
{
	free(c->state_dir);
	free(c->socket_path);
	free(c->config_path);
	c->state_dir = c->socket_path = c->config_path = NULL;
}

static int config_set_string(char **field, const char *value)
{
	char *copy = strdup(value);
	if (!copy)
		return -1;
	free(*field);
	*field = copy;
	return 0;
}

/* A whole number in [min, max]; -1 otherwise. */
static int config_parse_uint(const char *text, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(text, &end, 10);
	if (*text == '\0' || *text == '-' || *end != '\0' || errno || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/*
 * "AGE:BUCKET,AGE:BUCKET,..." in seconds, ages and buckets growing, each bucket
 * a multiple of the one before (merges stay exact); "none" for no merging.
 */
static int config_parse_retention(struct config *c, const char *value)
{
	if (strcmp(value, "none") == 0) {
		c->nretention = 0;
		return 0;
	}
	unsigned n = 0;
	double ages[CONFIG_RETENTION_MAX];
	unsigned buckets[CONFIG_RETENTION_MAX];
	const char *p = value;
	while (*p) {
		char *end;
		unsigned long age = strtoul(p, &end, 10), bucket;
		if (end == p || *end != ':' || n == CONFIG_RETENTION_MAX)
			return -1;
		p = end + 1;
		bucket = strtoul(p, &end, 10);
		if (end == p || (*end && *end != ',') || bucket == 0 || bucket > 86400 * 7 || age > 1ul << 31)
			return -1;
		unsigned previous = n ? buckets[n - 1] : c->bucket_seconds;
		if ((n && age <= ages[n - 1]) || bucket <= previous || bucket % previous)
			return -1;
		ages[n] = (double)age;
		buckets[n++] = (unsigned)bucket;
		p = *end ? end + 1 : end;
	}
	if (n == 0)
		return -1;
	c->nretention = n;
	memcpy(c->retention_age_s, ages, n * sizeof *ages);
	memcpy(c->retention_bucket_s, buckets, n * sizeof *buckets);
	return 0;
}

/* One setting by its config-file name; also how flags are applied. */
static int config_set(struct config *c, const char *section, const char *name, const char *value)
{
	unsigned long v;
	if (strcmp(section, "daemon") == 0) {
		if (strcmp(name, "state_dir") == 0)
			return config_set_string(&c->state_dir, value);
		if (strcmp(name, "socket") == 0)
			return config_set_string(&c->socket_path, value);
		if (strcmp(name, "log_level") == 0)
			return log_level_parse(value, &c->log_level);
	} else if (strcmp(section, "limits") == 0) {
		if (strcmp(name, "max_connections") == 0 && config_parse_uint(value, 1, 65536, &v) == 0)
			return c->max_connections = (unsigned)v, 0;
		if (strcmp(name, "max_connections_per_uid") == 0 && config_parse_uint(value, 1, 65536, &v) == 0)
			return c->max_connections_per_uid = (unsigned)v, 0;
		if (strcmp(name, "root_reserved_connections") == 0 && config_parse_uint(value, 0, 65535, &v) == 0)
			return c->root_reserved_connections = (unsigned)v, 0;
		if (strcmp(name, "idle_timeout_s") == 0 && config_parse_uint(value, 1, 86400, &v) == 0)
			return c->idle_timeout_s = (unsigned)v, 0;
		if (strcmp(name, "request_timeout_s") == 0 && config_parse_uint(value, 1, 3600, &v) == 0)
			return c->request_timeout_s = (unsigned)v, 0;
		if (strcmp(name, "max_message_bytes") == 0 && config_parse_uint(value, 1024, 64 * MB, &v) == 0)
			return c->max_message_bytes = v, 0;
		if (strcmp(name, "max_pending_requests") == 0 && config_parse_uint(value, 1, 4096, &v) == 0)
			return c->max_pending_requests = (unsigned)v, 0;
		if (strcmp(name, "max_targets") == 0 && config_parse_uint(value, 1, 65536, &v) == 0)
			return c->max_targets = (unsigned)v, 0;
		if (strcmp(name, "warm_budget_mb") == 0 && config_parse_uint(value, 0, 1u << 20, &v) == 0)
			return c->warm_budget_bytes = (size_t)v * MB, 0;
	} else if (strcmp(section, "sampling") == 0) {
		if (strcmp(name, "default_rate_hz") == 0 && config_parse_uint(value, 1, 100000, &v) == 0)
			return c->default_rate_hz = (unsigned)v, 0;
		if (strcmp(name, "max_rate_hz") == 0 && config_parse_uint(value, 1, 100000, &v) == 0)
			return c->max_rate_hz = (unsigned)v, 0;
		if (strcmp(name, "top_window_s") == 0 && config_parse_uint(value, 1, TOP_SECONDS_KEPT - 2, &v) == 0)
			return c->top_window_s = (unsigned)v, 0;
	} else if (strcmp(section, "storage") == 0) {
		if (strcmp(name, "flush_interval_s") == 0 && config_parse_uint(value, 1, 3600, &v) == 0)
			return c->flush_interval_s = (double)v, 0;
		if (strcmp(name, "bucket_seconds") == 0 && config_parse_uint(value, 1, 3600, &v) == 0)
			return c->bucket_seconds = (unsigned)v, 0;
		if (strcmp(name, "max_pending_rows") == 0 && config_parse_uint(value, 1000, 1ul << 32, &v) == 0)
			return c->max_pending_rows = v, 0;
		if (strcmp(name, "max_db_mb") == 0 && config_parse_uint(value, 0, 1ul << 24, &v) == 0)
			return c->max_db_bytes = (uint64_t)v * MB, 0;
		if (strcmp(name, "max_file_kb") == 0 && config_parse_uint(value, 0, 1ul << 34, &v) == 0)
			return c->max_file_bytes = (uint64_t)v * 1024, 0;
		if (strcmp(name, "retention") == 0)
			return config_parse_retention(c, value);
	}
	return -1;
}

struct file_ctx {
	struct config *c;
	const char *path;
	int bad_line;
};

static int config_on_ini_entry(void *user, const char *section, const char *name, const char *value)
{
	struct file_ctx *ctx = user;
	if (config_set(ctx->c, section, name, value) != 0) {
		fprintf(stderr, "pyprofd: %s: bad or unknown setting [%s] %s = %s\n", ctx->path, section,
		        name, value);
		return 0; /* inih reports the line */
	}
	return 1;
}

static int config_read_file(struct config *c, const char *path)
{
	struct file_ctx ctx = {c, path, 0};
	int rc = ini_parse(path, config_on_ini_entry, &ctx);
	if (rc < 0) {
		fprintf(stderr, "pyprofd: cannot read config file %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (rc > 0) {
		fprintf(stderr, "pyprofd: %s: line %d is not valid\n", path, rc);
		return -1;
	}
	return 0;
}

/* The flags, by the config setting each stands for. */
static const struct {
	const char *flag, *section, *name;
} flag_settings[] = {
	{"state-dir", "daemon", "state_dir"},
	{"socket", "daemon", "socket"},
	{"log-level", "daemon", "log_level"},
	{"max-connections", "limits", "max_connections"},
	{"max-targets", "limits", "max_targets"},
	{"warm-budget", "limits", "warm_budget_mb"},
	{"default-rate", "sampling", "default_rate_hz"},
	{"max-rate", "sampling", "max_rate_hz"},
	{"flush-interval", "storage", "flush_interval_s"},
};
#define NFLAGS (sizeof flag_settings / sizeof flag_settings[0])

struct flags {
	const char *values[NFLAGS];
	const char *config;
	bool help;
};

static int config_flags_parse(int argc, char **argv, struct flags *f)
{
	struct option options[NFLAGS + 3];
	for (size_t i = 0; i < NFLAGS; i++)
		options[i] = (struct option){flag_settings[i].flag, required_argument, NULL, (int)i + 256};
	options[NFLAGS] = (struct option){"config", required_argument, NULL, 'c'};
	options[NFLAGS + 1] = (struct option){"help", no_argument, NULL, 'h'};
	options[NFLAGS + 2] = (struct option){NULL, 0, NULL, 0};
	memset(f, 0, sizeof *f);
	optind = 1;
	opterr = 0;
	int opt;
	while ((opt = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
		if (opt >= 256)
			f->values[opt - 256] = optarg;
		else if (opt == 'c')
			f->config = optarg;
		else if (opt == 'h')
			f->help = true;
		else
			return cli_bad_option("serve", argv[optind - 1]);
	}
	if (optind < argc) {
		fprintf(stderr, "pyprofd: serve takes no operands ('%s'; see pyprofd --help)\n",
		        argv[optind]);
		return EXIT_USAGE;
	}
	return EXIT_OK;
}

static bool config_file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static char *config_path_join(const char *dir, const char *name)
{
	size_t len = strlen(dir) + strlen(name) + 2;
	char *p = malloc(len);
	if (p)
		snprintf(p, len, "%s/%s", dir, name);
	return p;
}

/* Where state lives when nothing says: see serve_usage. */
static char *config_default_state_dir(void)
{
	const char *systemd = getenv("STATE_DIRECTORY");
	if (systemd && *systemd) {
		/* systemd may pass several, colon-separated: ours is the first. */
		size_t len = strcspn(systemd, ":");
		return strndup(systemd, len);
	}
	if (geteuid() == 0)
		return strdup("/var/lib/pyprofd");
	const char *xdg = getenv("XDG_STATE_HOME");
	if (xdg && *xdg == '/')
		return config_path_join(xdg, "pyprofd");
	const char *home = getenv("HOME");
	if (!home || *home != '/')
		return NULL;
	return config_path_join(home, ".local/state/pyprofd");
}

static char *config_default_socket(const struct config *c, bool state_dir_given)
{
	const char *runtime = getenv("RUNTIME_DIRECTORY");
	if (!state_dir_given && runtime && *runtime) {
		size_t len = strcspn(runtime, ":");
		char *dir = strndup(runtime, len);
		char *p = dir ? config_path_join(dir, "pyprofd.sock") : NULL;
		free(dir);
		return p;
	}
	if (!state_dir_given && geteuid() == 0 && !getenv("STATE_DIRECTORY"))
		return strdup("/run/pyprofd/pyprofd.sock");
	return config_path_join(c->state_dir, "pyprofd.sock");
}

/* Defaults, file, flags: into c (which the caller frees). */
static int config_build(struct config *c, const struct flags *f)
{
	config_defaults(c);
	/* The state dir decides where the config file is looked for, so it comes first. */
	const char *state_flag = f->values[0];
	if (state_flag ? config_set_string(&c->state_dir, state_flag) != 0
	               : !(c->state_dir = config_default_state_dir())) {
		fprintf(stderr, "pyprofd: no state directory: pass --state-dir\n");
		return EXIT_USAGE;
	}
	if (f->config) {
		if (config_set_string(&c->config_path, f->config) != 0)
			return EXIT_FAILURE_OTHER;
	} else {
		char *in_state = config_path_join(c->state_dir, "pyprofd.conf");
		if (in_state && config_file_exists(in_state))
			c->config_path = in_state;
		else {
			free(in_state);
			if (!state_flag && geteuid() == 0 && config_file_exists("/etc/pyprofd/pyprofd.conf"))
				c->config_path = strdup("/etc/pyprofd/pyprofd.conf");
		}
	}
	bool state_in_file = false;
	if (c->config_path) {
		char *before = c->state_dir;
		c->state_dir = NULL;
		if (config_read_file(c, c->config_path) != 0) {
			free(before);
			return EXIT_USAGE;
		}
		state_in_file = c->state_dir != NULL;
		if (!c->state_dir)
			c->state_dir = before;
		else
			free(before);
	}
	for (size_t i = 0; i < NFLAGS; i++) {
		if (!f->values[i])
			continue;
		if (config_set(c, flag_settings[i].section, flag_settings[i].name, f->values[i]) != 0) {
			fprintf(stderr, "pyprofd: --%s: bad value '%s' (see pyprofd --help)\n",
			        flag_settings[i].flag, f->values[i]);
			return EXIT_USAGE;
		}
	}
	if (!c->socket_path && !(c->socket_path = config_default_socket(c, state_flag || state_in_file)))
		return EXIT_FAILURE_OTHER;
	if (c->default_rate_hz > c->max_rate_hz)
		c->default_rate_hz = c->max_rate_hz;
	/* Other users keep at least one connection, whatever root keeps for itself. */
	if (c->root_reserved_connections >= c->max_connections)
		c->root_reserved_connections = c->max_connections - 1;
	return EXIT_OK;
}

int config_load(struct config *c, int argc, char **argv)
{
	struct flags f;
	int rc = config_flags_parse(argc, argv, &f);
	if (rc != EXIT_OK)
		return rc;
	if (f.help) {
		fputs(serve_usage, stdout);
		return -1;
	}
	rc = config_build(c, &f);
	if (rc != EXIT_OK)
		config_free(c);
	return rc;
}

int config_reload(struct config *c, int argc, char **argv)
{
	struct flags f;
	struct config fresh = {0};
	if (config_flags_parse(argc, argv, &f) != EXIT_OK || config_build(&fresh, &f) != EXIT_OK) {
		config_free(&fresh);
		return -1;
	}
	/* Where the daemon lives does not move while it runs. */
	free(fresh.state_dir);
	free(fresh.socket_path);
	fresh.state_dir = c->state_dir;
	fresh.socket_path = c->socket_path;
	c->state_dir = c->socket_path = NULL;
	config_free(c);
	*c = fresh;
	return 0;
}
