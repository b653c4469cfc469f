/*
 * The daemon's configuration (daemon/config.c): defaults, then the file,
 * then the flags, each stronger than the last; a bad file or flag is
 * refused whole, and a reload that fails keeps the configuration running.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "pyprofd.h"

TestSuite(config, .init = helpers_init, .fini = helpers_fini);

/* A config file in a scratch state directory; its path into file. */
static void config_file(char *dir, size_t dir_len, char *file, size_t file_len, const char *text)
{
	scratch_dir(dir, dir_len);
	snprintf(file, file_len, "%s/pyprofd.conf", dir);
	write_text_file(file, text);
}

Test(config, file_then_flags)
{
	char dir[PATH_MAX - 64], file[PATH_MAX];
	config_file(dir, sizeof dir, file, sizeof file,
	            "[limits]\nmax_connections = 10\nmax_targets = 7\nmax_connections_per_uid = 4\nmax_targets_per_uid = 3\n"
	            "root_reserved_connections = 20\nidle_timeout_s = 30\nrequest_timeout_s = 2\n"
	            "[sampling]\ndefault_rate_hz = 50\nmax_rate_hz = 500\nkernel_copy = true\n"
	            "[storage]\nflush_interval_s = 3\nretention = 600:60,7200:600\n");
	char *argv[] = {"serve", "--state-dir", dir, "--max-targets", "9", NULL};
	struct config c;
	cr_assert_eq(config_load(&c, 5, argv), EXIT_OK);
	cr_assert_str_eq(c.config_path, file, "the state directory's file is read");
	cr_assert_eq(c.max_connections, 10);
	cr_assert_eq(c.max_connections_per_uid, 4);
	cr_assert_eq(c.root_reserved_connections, 9, "root's reserve leaves other users one connection");
	cr_assert_eq(c.idle_timeout_s, 30);
	cr_assert_eq(c.request_timeout_s, 2);
	cr_assert_eq(c.max_targets, 9, "a flag beats the file");
	cr_assert_eq(c.max_targets_per_uid, 3);
	cr_assert_eq(c.default_rate_hz, 50);
	cr_assert_eq(c.max_rate_hz, 500);
	cr_assert(c.kernel_copy, "kernel_copy = true");
	cr_assert(!c.no_kernel_reader, "the reader stays on");
	cr_assert_eq(c.flush_interval_s, 3.0);
	cr_assert_eq(c.nretention, 2);
	cr_assert_eq(c.retention_age_s[1], 7200.0);
	cr_assert_eq(c.retention_bucket_s[1], 600);
	cr_assert_eq(c.max_message_bytes, 1u << 20, "what nothing sets keeps its default");
	char sock[PATH_MAX + 16];
	snprintf(sock, sizeof sock, "%s/pyprofd.sock", dir);
	cr_assert_str_eq(c.socket_path, sock);
	config_free(&c);
}

Test(config, bad_settings_are_refused)
{
	static const char *const bad[] = {
		"[limits]\nmax_connections = 0\n",         /* out of range */
		"[limits]\nmax_connections = 12abc\n",     /* not a number */
		"[limits]\nno_such_setting = 1\n",         /* unknown */
		"[nosection]\nx = 1\n",                    /* unknown section */
		"[storage]\nretention = 600:7\n",          /* not a multiple of the finest bucket */
		"[storage]\nretention = 600:60,300:600\n", /* ages must grow */
		"[sampling]\nkernel_copy = no\n",         /* true or false */
		"this is not ini\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char dir[PATH_MAX - 64], file[PATH_MAX];
		config_file(dir, sizeof dir, file, sizeof file, bad[i]);
		char *argv[] = {"serve", "--state-dir", dir, NULL};
		struct config c;
		cr_assert_eq(config_load(&c, 3, argv), EXIT_USAGE, "accepted: %s", bad[i]);
	}
	char *flags[] = {"serve", "--state-dir", "/nonexistent", "--max-rate", "-1", NULL};
	struct config c;
	cr_assert_eq(config_load(&c, 5, flags), EXIT_USAGE, "a bad flag value");
	char *unknown[] = {"serve", "--no-such-flag", NULL};
	cr_assert_eq(config_load(&c, 2, unknown), EXIT_USAGE);
}

Test(config, reload_keeps_the_running_config_when_the_file_breaks)
{
	char dir[PATH_MAX - 64], file[PATH_MAX];
	config_file(dir, sizeof dir, file, sizeof file, "[limits]\nmax_targets = 5\n");
	char *argv[] = {"serve", "--state-dir", dir, NULL};
	struct config c;
	cr_assert_eq(config_load(&c, 3, argv), EXIT_OK);
	cr_assert_eq(c.max_targets, 5);
	cr_assert(!c.kernel_copy, "the targets pay for the kernel's copies: only when asked");

	write_text_file(file, "[limits]\nmax_targets = 6\n[daemon]\nstate_dir = /elsewhere\n");
	char why[CONFIG_WHY_MAX];
	cr_assert_eq(config_reload(&c, 3, argv, why, sizeof why), 0);
	cr_assert_eq(c.max_targets, 6, "a reload reads the file again");
	cr_assert_str_eq(c.state_dir, dir, "where the daemon lives does not move while it runs");

	write_text_file(file, "[limits]\nmax_targets = many\n");
	cr_assert_eq(config_reload(&c, 3, argv, why, sizeof why), -1);
	cr_assert_eq(c.max_targets, 6, "a broken file changes nothing");
	cr_assert(strstr(why, ":2: bad or unknown setting [limits] max_targets = many"), "%s", why);
	config_free(&c);
}

/*
 * [sampling] idle: keep (the default, as before the key) or drop; another
 * value is refused in one line that names both.
 */
Test(config, idle_is_keep_or_drop)
{
	char dir[PATH_MAX - 64], file[PATH_MAX];
	config_file(dir, sizeof dir, file, sizeof file, "[sampling]\ndefault_rate_hz = 50\n");
	char *argv[] = {"serve", "--state-dir", dir, NULL};
	struct config c;
	cr_assert_eq(config_load(&c, 3, argv), EXIT_OK);
	cr_assert(!c.drop_idle, "idle samples are kept unless the file says");
	cr_assert_str_eq(config_idle_names[c.drop_idle], "keep");

	char why[CONFIG_WHY_MAX];
	write_text_file(file, "[sampling]\nidle = drop\n");
	cr_assert_eq(config_reload(&c, 3, argv, why, sizeof why), 0, "%s", why);
	cr_assert(c.drop_idle, "idle = drop");
	cr_assert_str_eq(config_idle_names[c.drop_idle], "drop");
	write_text_file(file, "[sampling]\nidle = keep\n");
	cr_assert_eq(config_reload(&c, 3, argv, why, sizeof why), 0, "%s", why);
	cr_assert(!c.drop_idle, "idle = keep");

	static const char *const bad[] = {"sometimes", "Drop", "true", ""};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char text[64];
		snprintf(text, sizeof text, "[sampling]\nidle = %s\n", bad[i]);
		write_text_file(file, text);
		cr_assert_eq(config_reload(&c, 3, argv, why, sizeof why), -1, "accepted idle = '%s'", bad[i]);
		char want[128];
		snprintf(want, sizeof want, ":2: [sampling] idle must be keep or drop, not '%s'", bad[i]);
		cr_assert(strstr(why, want) && !strchr(why, '\n'), "%s", why);
		cr_assert(!c.drop_idle, "a refused file changes nothing");
	}
	config_free(&c);
}

/* A rule's context and context_labels: read, kept as written, and bad names refused with why. */
Test(config, rule_context_and_its_labels)
{
	char dir[PATH_MAX - 64], file[PATH_MAX];
	config_file(dir, sizeof dir, file, sizeof file,
	            "[rule.web]\nmatch.exe = python*\ncontext = otel\ncontext_labels = route, tenant.id\n");
	char *argv[] = {"serve", "--state-dir", dir, NULL};
	struct config c;
	cr_assert_eq(config_load(&c, 3, argv), EXIT_OK);
	const struct rule *r = rules_find(&c.rules, "web");
	cr_assert_not_null(r);
	cr_assert(r->context.otel);
	cr_assert_eq(r->context.nlabels, 2);
	cr_assert_str_eq(r->context.labels[0], "route");
	cr_assert_str_eq(r->context.labels[1], "tenant.id");
	config_free(&c);

	static const char *const bad[][2] = {
		{"context = zipkin", "context is otel or none (not 'zipkin')"},
		{"context_labels = 9lives", "not '9lives'"},
		{"context_labels = route, route", "'route' is given twice"},
		{"context_labels = a,b,c,d,e,f,g,h,i", "at most 8 context labels"},
		{"context_labels = trace_id", "names the span's ids"},
		{"context_labels = a name", "not 'a name'"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char text[256];
		snprintf(text, sizeof text, "[rule.web]\nmatch.exe = python*\n%s\n", bad[i][0]);
		write_text_file(file, text);
		cr_assert_eq(config_load(&c, 3, argv), EXIT_USAGE, "accepted %s", bad[i][0]);
	}
	struct context_spec s = {0};
	char why[256];
	cr_assert_eq(context_spec_labels(&s, "  route ,tenant,, ", why, sizeof why), 0, "%s", why);
	cr_assert_eq(s.nlabels, 2);
	cr_assert_eq(context_spec_labels(&s, "", why, sizeof why), 0);
	cr_assert_eq(s.nlabels, 0, "an empty list clears them");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *v = strchr(bad[i][0], '=') + 2;
		int rc = strncmp(bad[i][0], "context =", 9) == 0 ? context_spec_kind(&s, v, why, sizeof why)
		                                                 : context_spec_labels(&s, v, why, sizeof why);
		cr_assert_eq(rc, -1, "accepted %s", bad[i][0]);
		cr_assert(strstr(why, bad[i][1]), "%s: %s", bad[i][0], why);
	}
}
