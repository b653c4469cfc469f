#include "fleet.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

const struct python *fleet_python(struct python pys[PYTHONS_MAX])
{
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	cr_assert_gt(n, 0);
	/*
	 * The host's own: these tests start it by its path, under env, runuser,
	 * unshare and cgroups of their own; chrooted interpreters have tests of
	 * their own.
	 */
	for (size_t i = n; i-- > 0;)
		if (pys[i].root_len == 0)
			return &pys[i];
	cr_assert_fail("no interpreter of the host's own (the fleet tests start one by its path)");
	return NULL;
}

void fleet_daemon(struct daemon *d, const char *config_text, char *config_path, size_t len)
{
	char dir[PATH_MAX - 32];
	scratch_dir(dir, sizeof dir);
	snprintf(config_path, len, "%s/pyprofd.conf", dir);
	write_text_file(config_path, config_text);
	const char *extra[] = {"--config", config_path, "--log-level", "debug", NULL};
	daemon_start(d, extra);
}

void fleet_daemon_discovering(struct daemon *d, const char *method, const char *interval, const char *rules)
{
	char config[PATH_MAX], text[2048];
	int n = snprintf(text, sizeof text, "[discovery]\nmethod = %s\nscan_interval = %s\n\n%s", method,
	                 interval, rules);
	cr_assert(n > 0 && (size_t)n < sizeof text, "config too long");
	fleet_daemon(d, text, config, sizeof config);
}

void fleet_daemon_again(struct daemon *d, const char *config_path)
{
	char state[PATH_MAX];
	snprintf(state, sizeof state, "%s", d->state);
	const char *extra[] = {"--config", config_path, "--state-dir", state, NULL};
	daemon_start(d, extra);
}

pid_t fleet_spawn(const struct python *py, const char *marker)
{
	char *const argv[] = {(char *)py->path, "-c", (char *)idle_program, (char *)marker, NULL};
	return spawn_process(argv, NULL);
}

void fleet_kill(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

bool fleet_sampling(json_t *e)
{
	return strcmp(json_string_value(json_object_get(e, "state")), "sampling") == 0 &&
	       json_integer_value(json_object_get(e, "samples")) > 0;
}

bool fleet_detached(json_t *e)
{
	return strcmp(json_string_value(json_object_get(e, "state")), "detached") == 0;
}

const char *fleet_label(json_t *entry, const char *key)
{
	json_t *v = json_object_get(json_object_get(entry, "labels"), key);
	return v ? json_string_value(v) : NULL;
}

bool fleet_knows(const struct daemon *d, pid_t pid)
{
	static const char *const list[] = {"list", NULL};
	json_t *all = ctl_json(d, list);
	size_t i;
	json_t *e;
	bool known = false;
	json_array_foreach(all, i, e) known = known || jint(e, "pid") == pid;
	json_decref(all);
	return known;
}

json_t *fleet_entry_by_marker(const struct daemon *d, const char *marker, const char *what)
{
	static const char *const list[] = {"list", NULL};
	for (int tries = 0; tries < 600; tries++) {
		json_t *all = ctl_json(d, list);
		size_t i;
		json_t *e;
		json_array_foreach(all, i, e) {
			const char *line = json_string_value(json_object_get(e, "command_line"));
			if (line && strstr(line, marker) && fleet_sampling(e)) {
				json_incref(e);
				json_decref(all);
				return e;
			}
		}
		json_decref(all);
		pause_ms(50);
	}
	char *log = daemon_log(d);
	cr_assert_fail("no process with %s in its command line became %s; daemon log:\n%s", marker, what, log);
	return NULL;
}

json_int_t fleet_waiting(const struct daemon *d)
{
	static const char *const status[] = {"status", NULL};
	json_t *st = ctl_json(d, status);
	json_int_t n = jint(json_object_get(st, "discovery"), "waiting");
	json_decref(st);
	return n;
}
