/*
 * The daemon's configuration: defaults, then the config file (inih), then
 * the command line, each stronger than the last.  SIGHUP reads the file
 * again; the flags, parsed again from the same argv, still win.
 */
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <ini.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "duration.h"
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
	"  --config FILE          read FILE (INI: [daemon] [limits] [sampling] [storage]\n"
	"                         [discovery] [rule.NAME])\n"
	"  --log-level LEVEL      error, warn, info (default) or debug\n"
	"  --max-connections N    clients at once (default 64)\n"
	"  --max-targets N        processes known at once (default 256)\n"
	"  --cache-budget MB      memory the sampled targets' caches share (default 64)\n"
	"  --warm-budget MB       memory kept for detached targets' caches (default 64)\n"
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
		.cache_budget_bytes = (size_t)64 * MB,
		.warm_budget_bytes = (size_t)64 * MB,
		.default_rate_hz = 100,
		.max_rate_hz = 1000,
		.top_window_s = 1,
		.discovery_method = PROCWATCH_AUTO,
		.scan_interval_s = 0.5,
		.min_rate_hz = 10,
		.uid_cpu_percent = 10,
		.max_sample_ns = 5000000,
		.flush_interval_s = 10,
		.bucket_seconds = 10,
		.max_pending_rows = 1u << 20,
		.max_db_bytes = (uint64_t)4096 * MB,
		/* 10 s buckets for an hour, 1 min for a day, 1 h after that. */
		.nretention = 2,
		.retention_age_s = {3600, 86400},
		.retention_bucket_s = {60, 3600},
	};
	otlp_config_init(&c->otlp);
}

void config_free(struct config *c)
{
	free(c->state_dir);
	free(c->socket_path);
	free(c->config_path);
	free(c->rules_path);
	c->state_dir = c->socket_path = c->config_path = c->rules_path = NULL;
	rules_free(&c->rules);
	otlp_config_free(&c->otlp);
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

/* A duration in whole seconds, for the settings counted in seconds. */
static int config_parse_seconds(const char *text, unsigned long min, unsigned long max,
                                unsigned long *out)
{
	double seconds;
	if (duration_parse(text, (double)min, (double)max, &seconds) != 0 ||
	    seconds != (double)(unsigned long)seconds)
		return -1;
	*out = (unsigned long)seconds;
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
		char part[64];
		size_t age_len = strcspn(p, ":"), bucket_len;
		unsigned long age, bucket;
		if (p[age_len] != ':' || age_len >= sizeof part || n == CONFIG_RETENTION_MAX)
			return -1;
		memcpy(part, p, age_len);
		part[age_len] = '\0';
		if (config_parse_seconds(part, 0, 1ul << 31, &age) != 0)
			return -1;
		p += age_len + 1;
		bucket_len = strcspn(p, ",");
		if (bucket_len >= sizeof part)
			return -1;
		memcpy(part, p, bucket_len);
		part[bucket_len] = '\0';
		if (config_parse_seconds(part, 1, 86400 * 7, &bucket) != 0)
			return -1;
		const char *end = p + bucket_len;
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

/* A share of one core, "3" or "2.5" or "3%": 0 (no budget) to 100. */
static int config_parse_percent(const char *text, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(text, &end);
	if (end == text || errno)
		return -1;
	if (*end == '%')
		end++;
	if (*end || !(v >= 0 && v <= 100))
		return -1;
	*out = v;
	return 0;
}

/* [sampling] idle's values, by what they make drop_idle. */
const char *const config_idle_names[2] = {"keep", "drop"};

static int config_idle_parse(const char *value, bool *drop)
{
	for (size_t i = 0; i < 2; i++)
		if (strcmp(value, config_idle_names[i]) == 0)
			return *drop = i == 1, 0;
	return -1;
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
		if (strcmp(name, "idle_timeout_s") == 0 && config_parse_seconds(value, 1, 86400, &v) == 0)
			return c->idle_timeout_s = (unsigned)v, 0;
		if (strcmp(name, "request_timeout_s") == 0 && config_parse_seconds(value, 1, 3600, &v) == 0)
			return c->request_timeout_s = (unsigned)v, 0;
		if (strcmp(name, "max_message_bytes") == 0 && config_parse_uint(value, 1024, 64 * MB, &v) == 0)
			return c->max_message_bytes = v, 0;
		if (strcmp(name, "max_pending_requests") == 0 && config_parse_uint(value, 1, 4096, &v) == 0)
			return c->max_pending_requests = (unsigned)v, 0;
		if (strcmp(name, "max_targets") == 0 && config_parse_uint(value, 1, 65536, &v) == 0)
			return c->max_targets = (unsigned)v, 0;
		if (strcmp(name, "max_targets_per_uid") == 0 && config_parse_uint(value, 1, 65536, &v) == 0)
			return c->max_targets_per_uid = (unsigned)v, 0;
		if (strcmp(name, "cache_mb") == 0 && config_parse_uint(value, 1, 1u << 20, &v) == 0)
			return c->cache_budget_bytes = (size_t)v * MB, 0;
		if (strcmp(name, "warm_budget_mb") == 0 && config_parse_uint(value, 0, 1u << 20, &v) == 0)
			return c->warm_budget_bytes = (size_t)v * MB, 0;
		if (strcmp(name, "cpu_percent") == 0)
			return config_parse_percent(value, &c->cpu_percent);
		if (strcmp(name, "min_rate_hz") == 0 && config_parse_uint(value, 1, 100000, &v) == 0)
			return c->min_rate_hz = (unsigned)v, 0;
		if (strcmp(name, "uid_cpu_percent") == 0)
			return config_parse_percent(value, &c->uid_cpu_percent);
		if (strcmp(name, "max_sample_time") == 0) {
			double seconds;
			if (duration_parse(value, 0, 10, &seconds) != 0)
				return -1;
			return c->max_sample_ns = (uint64_t)(seconds * 1e9), 0;
		}
	} else if (strcmp(section, "sampling") == 0) {
		if (strcmp(name, "default_rate_hz") == 0 && config_parse_uint(value, 1, 100000, &v) == 0)
			return c->default_rate_hz = (unsigned)v, 0;
		if (strcmp(name, "max_rate_hz") == 0 && config_parse_uint(value, 1, 100000, &v) == 0)
			return c->max_rate_hz = (unsigned)v, 0;
		if (strcmp(name, "top_window_s") == 0 && config_parse_seconds(value, 1, TOP_SECONDS_KEPT - 2, &v) == 0)
			return c->top_window_s = (unsigned)v, 0;
		if (strcmp(name, "write") == 0 && (strcmp(value, "true") == 0 || strcmp(value, "false") == 0))
			return c->no_write = strcmp(value, "false") == 0, 0;
		if (strcmp(name, "kernel_reader") == 0 &&
		    (strcmp(value, "true") == 0 || strcmp(value, "false") == 0))
			return c->no_kernel_reader = strcmp(value, "false") == 0, 0;
		if (strcmp(name, "kernel_copy") == 0 && (strcmp(value, "true") == 0 || strcmp(value, "false") == 0))
			return c->kernel_copy = strcmp(value, "true") == 0, 0;
		if (strcmp(name, "idle") == 0)
			return config_idle_parse(value, &c->drop_idle);
		if (strcmp(name, "provers_off") == 0) {
			char why[160];
			return uw_provers_parse(value, &c->provers_off, why, sizeof why) == 0 ? 0 : -1;
		}
	} else if (strcmp(section, "discovery") == 0) {
		if (strcmp(name, "method") == 0)
			return procwatch_method_parse(value, &c->discovery_method);
		if (strcmp(name, "scan_interval") == 0)
			return duration_parse(value, 0.05, 60, &c->scan_interval_s);
	} else if (strcmp(section, "storage") == 0) {
		if (strcmp(name, "flush_interval_s") == 0 && config_parse_seconds(value, 1, 3600, &v) == 0)
			return c->flush_interval_s = (double)v, 0;
		if (strcmp(name, "bucket_seconds") == 0 && config_parse_seconds(value, 1, 3600, &v) == 0)
			return c->bucket_seconds = (unsigned)v, 0;
		if (strcmp(name, "max_pending_rows") == 0 && config_parse_uint(value, 1000, 1ul << 32, &v) == 0)
			return c->max_pending_rows = v, 0;
		if (strcmp(name, "max_db_mb") == 0 && config_parse_uint(value, 0, 1ul << 24, &v) == 0)
			return c->max_db_bytes = (uint64_t)v * MB, 0;
		if (strcmp(name, "max_file_kb") == 0 && config_parse_uint(value, 0, 1ul << 34, &v) == 0)
			return c->max_file_bytes = (uint64_t)v * 1024, 0;
		if (strcmp(name, "retention") == 0)
			return config_parse_retention(c, value);
	} else if (strcmp(section, "export.otlp") == 0)
		return otlp_config_set(&c->otlp, name, value);
	return -1;
}

/* What a setting that takes one of a few forms takes, for its error; NULL: none said. */
static const char *config_takes(const char *section, const char *name)
{
	static const struct {
		const char *section, *name, *takes;
	} forms[] = {
		{"daemon", "log_level", "one of " LOG_LEVEL_CHOICES},
		{"discovery", "method", "one of auto, netlink, scan"},
		{"sampling", "write", "true or false"},
		{"sampling", "kernel_reader", "true or false"},
		{"sampling", "kernel_copy", "true or false"},
		{"sampling", "idle", "keep or drop"},
		{"export.otlp", "endpoint", "an http:// or https:// URL with a host, e.g. http://collector:4318"},
		{"export.otlp", "compression", "gzip or none"},
	};
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
		if (strcmp(section, forms[i].section) == 0 && strcmp(name, forms[i].name) == 0)
			return forms[i].takes;
	return NULL;
}

/*
 * Reading one file: inih parses, we hand it the lines (to know which line
 * an error is on, and to take a '#' after a blank as a comment, as people
 * write them), and [rule.NAME] sections become rules.
 */
struct file_ctx {
	struct config *c;
	const char *path;
	const char *rule_source; /* what rules read here are said to come from */
	FILE *file;
	unsigned line;      /* of the line inih has now */
	unsigned bad_line;  /* the first line with an error; 0: none */
	char why[512];      /* what is wrong there */
	struct rule rule;   /* the [rule.NAME] section being read */
	bool in_rule;
	bool rpc_rules;     /* the daemon's own file of rules added by RPC */
	char empty_rule[80];       /* a rule section whose header came, and no setting yet */
	unsigned empty_rule_line;
	char skipping[80];  /* a section of that file the config file overrides */
};

_Static_assert(CONFIG_LINE_MAX <= INI_MAX_LINE - 2, "inih reads no longer line than INI_MAX_LINE - 2");

/* The rule prefix of a section name. */
#define RULE_SECTION "rule."
/* Above any max_rate_hz the config may set. */
#define RULE_RATE_CEILING 100000

static void config_rule_done(struct file_ctx *ctx);
static void config_rule_header(struct file_ctx *ctx, const char *line);

static char *config_next_line(char *str, int num, void *stream)
{
	struct file_ctx *ctx = stream;
	if (!fgets(str, num, ctx->file))
		return NULL;
	ctx->line++;
	size_t len = strlen(str);
	bool cut = len == (size_t)num - 1 && str[len - 1] != '\n' && !feof(ctx->file);
	if (cut || len - (len && str[len - 1] == '\n') > CONFIG_LINE_MAX) {
		/* inih would take the rest for a line of its own: say what is wrong instead. */
		int ch;
		while (cut && (ch = fgetc(ctx->file)) != EOF && ch != '\n')
			;
		if (!ctx->bad_line) {
			ctx->bad_line = ctx->line;
			snprintf(ctx->why, sizeof ctx->why, "the line is longer than %d characters", CONFIG_LINE_MAX);
		}
		str[0] = '\0';
		return str;
	}
	/* A section header ends the rule before it, even one of the same name. */
	const char *first = str + strspn(str, " \t");
	if (*first == '[') {
		config_rule_done(ctx);
		config_rule_header(ctx, first);
	}
	/* "key = value   # comment": inih knows only ';' after a blank, so cut '#' here. */
	for (char *p = str; *p; p++)
		if (*p == '#' && p > first && (p[-1] == ' ' || p[-1] == '\t')) {
			*p++ = '\n';
			*p = '\0';
			break;
		}
	return str;
}

static void config_file_verror(struct file_ctx *ctx, unsigned line, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
static void config_file_verror(struct file_ctx *ctx, unsigned line, const char *fmt, va_list ap)
{
	if (ctx->bad_line && ctx->bad_line <= line)
		return;
	ctx->bad_line = line ? line : 1;
	vsnprintf(ctx->why, sizeof ctx->why, fmt, ap);
}

static void config_file_error(struct file_ctx *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void config_file_error(struct file_ctx *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	config_file_verror(ctx, ctx->line, fmt, ap);
	va_end(ap);
}

static void config_file_error_at(struct file_ctx *ctx, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void config_file_error_at(struct file_ctx *ctx, unsigned line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	config_file_verror(ctx, line, fmt, ap);
	va_end(ap);
}

/*
 * A section header: a rule section must have settings (inih says nothing
 * of a header alone, which would make a rule that silently never was).
 */
static void config_rule_header(struct file_ctx *ctx, const char *line)
{
	if (ctx->empty_rule_line)
		config_file_error_at(ctx, ctx->empty_rule_line, "[%s] has no settings", ctx->empty_rule);
	ctx->empty_rule_line = 0;
	size_t len = strcspn(line + 1, "]");
	if (len > strlen(RULE_SECTION) && len < sizeof ctx->empty_rule &&
	    strncmp(line + 1, RULE_SECTION, strlen(RULE_SECTION)) == 0) {
		memcpy(ctx->empty_rule, line + 1, len);
		ctx->empty_rule[len] = '\0';
		ctx->empty_rule_line = ctx->line;
	}
}

/* The rule being read is whole: it joins the config's, or the file is bad. */
static void config_rule_done(struct file_ctx *ctx)
{
	if (!ctx->in_rule)
		return;
	ctx->in_rule = false;
	char why[256];
	if (rule_finish(&ctx->rule, why, sizeof why) != 0)
		config_file_error_at(ctx, ctx->rule.line, "%s", why);
	else if (rules_append(&ctx->c->rules, &ctx->rule) != 0) {
		config_file_error(ctx, "out of memory");
	}
	rule_free(&ctx->rule);
}

static int config_rule_begin(struct file_ctx *ctx, const char *section)
{
	const char *name = section + strlen(RULE_SECTION);
	if (!rule_name_ok(name)) {
		config_file_error(ctx, "[%s]: a rule's name is 1 to 64 letters, digits, '_', '.' or '-'",
		                  section);
		return -1;
	}
	const struct rule *same = rules_find(&ctx->c->rules, name);
	if (same && ctx->rpc_rules && strcmp(same->source, "rpc") != 0) {
		/* The operator's file wins over what was added by RPC before. */
		fprintf(stderr, "pyprofd: %s:%u: rule '%s' is also in %s: the rule added by RPC is ignored\n",
		        ctx->path, ctx->line, name, same->source);
		snprintf(ctx->skipping, sizeof ctx->skipping, "%s", section);
		return -1;
	}
	if (same) {
		config_file_error(ctx, "[%s]: a rule of that name is already defined", section);
		return -1;
	}
	rule_init(&ctx->rule);
	ctx->in_rule = true;
	ctx->rule.line = ctx->line;
	if (!(ctx->rule.name = strdup(name)) || !(ctx->rule.source = strdup(ctx->rule_source))) {
		config_file_error(ctx, "out of memory");
		return -1;
	}
	return 0;
}

static int config_on_ini_entry(void *user, const char *section, const char *name, const char *value)
{
	struct file_ctx *ctx = user;
	if (strncmp(section, RULE_SECTION, strlen(RULE_SECTION)) == 0) {
		ctx->empty_rule_line = 0;
		if (strcmp(section, ctx->skipping) == 0)
			return 1;
		if (!ctx->in_rule || strcmp(ctx->rule.name, section + strlen(RULE_SECTION)) != 0) {
			config_rule_done(ctx);
			if (config_rule_begin(ctx, section) != 0)
				return ctx->skipping[0] && strcmp(section, ctx->skipping) == 0;
		}
		char why[384];
		/* The rate is checked against max_rate_hz once every setting is known (config_build). */
		if (rule_set(&ctx->rule, name, value, RULE_RATE_CEILING, why, sizeof why) != 0) {
			config_file_error(ctx, "[%s] %s", section, why);
			return 0;
		}
		return 1;
	}
	config_rule_done(ctx);
	if (ctx->rpc_rules) {
		config_file_error(ctx, "[%s]: this file holds rules alone ([rule.NAME])", section);
		return 0;
	}
	if (config_set(ctx->c, section, name, value) != 0) {
		const char *takes = config_takes(section, name);
		if (takes)
			config_file_error(ctx, "[%s] %s must be %s, not '%s'", section, name, takes, value);
		else
			config_file_error(ctx, "bad or unknown setting [%s] %s = %s", section, name, value);
		return 0;
	}
	return 1;
}

/*
 * Read one INI file into c: the config file, or (rpc_rules) the daemon's
 * file of the rules added by RPC.  0, or -1 and why.
 */
static int config_read_file(struct config *c, const char *path, bool rpc_rules, char *why,
                            size_t why_len)
{
	struct file_ctx ctx = {.c = c, .path = path, .rule_source = rpc_rules ? "rpc" : path,
	                       .rpc_rules = rpc_rules};
	if (!(ctx.file = fopen(path, "re"))) {
		snprintf(why, why_len, "cannot read config file %s: %s", path, strerror(errno));
		return -1;
	}
	int rc = ini_parse_stream(config_next_line, &ctx, config_on_ini_entry, &ctx);
	config_rule_done(&ctx);
	config_rule_header(&ctx, "[]"); /* the end: a last rule header alone is said */
	bool read_error = ferror(ctx.file);
	fclose(ctx.file);
	if (read_error) {
		snprintf(why, why_len, "cannot read config file %s", path);
		return -1;
	}
	if (ctx.bad_line && (rc <= 0 || ctx.bad_line <= (unsigned)rc)) {
		snprintf(why, why_len, "%s:%u: %s", path, ctx.bad_line, ctx.why);
		return -1;
	}
	if (rc != 0) {
		snprintf(why, why_len, "%s:%d: not a section, a comment or KEY = VALUE", path, rc);
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
	{"cache-budget", "limits", "cache_mb"},
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

/* Defaults, file, flags: into c (which the caller frees); else an exit status and why. */
static int config_build(struct config *c, const struct flags *f, char *why, size_t why_len)
{
	config_defaults(c);
	/* The state dir decides where the config file is looked for, so it comes first. */
	const char *state_flag = f->values[0];
	if (state_flag ? config_set_string(&c->state_dir, state_flag) != 0
	               : !(c->state_dir = config_default_state_dir())) {
		snprintf(why, why_len, "no state directory: pass --state-dir");
		return EXIT_USAGE;
	}
	if (f->config) {
		if (config_set_string(&c->config_path, f->config) != 0) {
			snprintf(why, why_len, "out of memory");
			return EXIT_FAILURE_OTHER;
		}
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
		if (config_read_file(c, c->config_path, false, why, why_len) != 0) {
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
			const char *takes = config_takes(flag_settings[i].section, flag_settings[i].name);
			if (takes)
				snprintf(why, why_len, "--%s must be %s, not '%s'", flag_settings[i].flag, takes,
				         f->values[i]);
			else
				snprintf(why, why_len, "--%s: bad value '%s' (see pyprofd --help)",
				         flag_settings[i].flag, f->values[i]);
			return EXIT_USAGE;
		}
	}
	if ((!c->socket_path && !(c->socket_path = config_default_socket(c, state_flag || state_in_file))) ||
	    /* The rules added by RPC come after the file's: the operator's file is tried first. */
	    !(c->rules_path = config_path_join(c->state_dir, "rules.conf"))) {
		snprintf(why, why_len, "out of memory");
		return EXIT_FAILURE_OTHER;
	}
	if (config_file_exists(c->rules_path) && config_read_file(c, c->rules_path, true, why, why_len) != 0)
		return EXIT_USAGE;
	for (size_t i = 0; i < c->rules.n; i++)
		if (c->rules.v[i].rate_hz > c->max_rate_hz) {
			snprintf(why, why_len, "%s:%u: [rule.%s] rate %u Hz is above max_rate_hz (%u)",
			         c->rules.v[i].source, c->rules.v[i].line, c->rules.v[i].name,
			         c->rules.v[i].rate_hz, c->max_rate_hz);
			return EXIT_USAGE;
		}
	if (c->default_rate_hz > c->max_rate_hz)
		c->default_rate_hz = c->max_rate_hz;
	/* Other users keep at least one connection, whatever root keeps for itself. */
	if (c->root_reserved_connections >= c->max_connections)
		c->root_reserved_connections = c->max_connections - 1;
	if (descriptors_fit(c, why, why_len) != 0)
		return EXIT_USAGE;
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
	char why[CONFIG_WHY_MAX] = "";
	rc = config_build(c, &f, why, sizeof why);
	if (rc != EXIT_OK) {
		fprintf(stderr, "pyprofd: %s\n", why);
		config_free(c);
	}
	return rc;
}

int config_reload(struct config *c, int argc, char **argv, char *why, size_t why_len)
{
	struct flags f;
	struct config fresh = {0};
	snprintf(why, why_len, "the command line cannot be read again");
	if (config_flags_parse(argc, argv, &f) != EXIT_OK || config_build(&fresh, &f, why, why_len) != EXIT_OK) {
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
