/*
 * The daemon: one libev loop that owns the listening socket, the clients,
 * the targets and their sampling timers, and the signals.  Everything it
 * does on the loop is short and bounded; a sample is a few process_vm_readv
 * calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "clock.h"
#include "pyprofd.h"

#define LISTEN_BACKLOG 128
/* Blocks from this size up are mapped on their own (server_main says why). */
#define SERVER_MMAP_THRESHOLD (128 * 1024)

/* mkdir -p with `mode` for the directories it creates. */
static int server_make_dirs(const char *path, mode_t mode)
{
	char buf[4096];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = buf + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;
		*p = '\0';
		if (mkdir(buf, mode) != 0 && errno != EEXIST)
			return -1;
		*p = saved;
		if (saved == '\0')
			return 0;
	}
}

/* The state directory, checked from / down and held open (statedir.c). */
static int server_prepare_state_dir(struct server *s)
{
	char why[PATH_MAX + 256];
	s->state_fd = statedir_open("state directory", s->config.state_dir, geteuid(), why, sizeof why);
	if (s->state_fd < 0) {
		fprintf(stderr, "pyprofd: %s\n", why);
		return -1;
	}
	for (const char *const *f = history_files; *f; f++)
		if (statedir_check_file(s->state_fd, s->config.state_dir, *f, geteuid(), why, sizeof why) != 0) {
			fprintf(stderr, "pyprofd: %s\n", why);
			return -1;
		}
	return 0;
}

/*
 * When the socket's directory is the state directory, its name there:
 * the socket is then bound and removed through the directory held open,
 * as the database is reached.
 */
static const char *server_socket_in_state_dir(const struct server *s, const char *dir,
                                              const char *name)
{
	struct stat a, b;
	if (stat(dir, &a) != 0 || fstat(s->state_fd, &b) != 0)
		return NULL;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino ? name : NULL;
}

/* Whether a daemon already answers on path (then it is not ours to replace). */
static bool server_socket_in_use(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	bool in_use = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
	close(fd);
	return in_use;
}

static int server_listen(struct server *s)
{
	const char *path = s->config.socket_path;
	int n = sd_listen_fds(1);
	if (n > 1) {
		fprintf(stderr, "pyprofd: systemd passed %d sockets; one is expected\n", n);
		return -1;
	}
	if (n == 1) {
		if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0) {
			fprintf(stderr, "pyprofd: the socket systemd passed is not a listening Unix stream socket\n");
			return -1;
		}
		/* systemd hands the socket over blocking; the accept loop must never wait. */
		int flags = fcntl(SD_LISTEN_FDS_START, F_GETFL);
		if (flags < 0 || fcntl(SD_LISTEN_FDS_START, F_SETFL, flags | O_NONBLOCK) != 0 ||
		    fcntl(SD_LISTEN_FDS_START, F_SETFD, FD_CLOEXEC) != 0) {
			fprintf(stderr, "pyprofd: cannot set up the socket systemd passed: %s\n", strerror(errno));
			return -1;
		}
		s->listen_fd = SD_LISTEN_FDS_START;
		s->socket_activated = true;
		return 0;
	}
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof addr.sun_path) {
		fprintf(stderr, "pyprofd: socket path too long: %s\n", path);
		return -1;
	}
	char dir[sizeof addr.sun_path];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	const char *name_in_dir = slash ? path + (slash - dir) + 1 : path;
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	s->socket_name = server_socket_in_state_dir(s, dir, name_in_dir);
	s->socket_dir_fd = s->socket_name ? s->state_fd : -1;
	if (!s->socket_name) {
		/* Others must reach a system socket; each request is authorized by its peer's uid. */
		if (server_make_dirs(dir, geteuid() == 0 ? 0755 : 0700) != 0) {
			fprintf(stderr, "pyprofd: cannot create %s: %s\n", dir, strerror(errno));
			return -1;
		}
		/* Where the socket goes is no other user's to lead elsewhere, as for the state directory. */
		char why[PATH_MAX + 256];
		s->socket_dir_fd = statedir_open("socket directory", dir, geteuid(), why, sizeof why);
		if (s->socket_dir_fd < 0) {
			fprintf(stderr, "pyprofd: %s\n", why);
			return -1;
		}
		s->socket_name = name_in_dir;
	}
	/* Bound through the descriptor the checks were made on. */
	int len = snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", s->socket_dir_fd,
	                   s->socket_name);
	if (len < 0 || len >= (int)sizeof addr.sun_path) {
		s->socket_name = NULL; /* a path shorter than the descriptor's: bound by its path */
		memcpy(addr.sun_path, path, strlen(path) + 1);
	}
	int at = s->socket_name ? s->socket_dir_fd : AT_FDCWD;
	const char *name = s->socket_name ? s->socket_name : path;
	if (server_socket_in_use(addr.sun_path)) {
		fprintf(stderr, "pyprofd: another daemon is listening on %s\n", path);
		return -1;
	}
	/* A socket left by a daemon that died goes; anything else there is not ours to remove. */
	struct stat st;
	if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			fprintf(stderr, "pyprofd: %s exists and is not a socket\n", path);
			return -1;
		}
		unlinkat(at, name, 0);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	/*
	 * The socket is born with its final mode: a chmod after bind would
	 * leave a moment in which it has the umask's.  Root's is for every
	 * local user (each request is authorized by its peer's uid); another
	 * user's daemon is for that user alone.
	 */
	mode_t saved = umask(geteuid() == 0 ? 0111 : 0177);
	int bound = fd >= 0 ? bind(fd, (struct sockaddr *)&addr, sizeof addr) : -1;
	umask(saved);
	if (fd < 0 || bound != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
		fprintf(stderr, "pyprofd: cannot listen on %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	s->listen_fd = fd;
	s->socket_created = true;
	return 0;
}

static void server_look(void *kreader)
{
	uw_kreader_look(kreader);
}

static void server_on_stop(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)revents;
	log_info("stopping on %s", w->signum == SIGTERM ? "SIGTERM" : "SIGINT");
	ev_break(loop, EVBREAK_ALL);
}

/* Every flush interval: what targets counted goes to the history. */
static void server_on_flush_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	struct server *s = w->data;
	targets_flush(&s->targets);
	history_flushed(&s->history, &s->config);
	otlp_sender_flushed(&s->otlp, ev_now(s->loop));
}

static void server_on_reload(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)loop;
	(void)revents;
	struct server *s = w->data;
	notify_reloading();
	char why[CONFIG_WHY_MAX];
	if (config_reload(&s->config, s->argc, s->argv, why, sizeof why) == 0) {
		s->reload_failed_at = 0;
		s->reload_error[0] = '\0';
		log_set_level(s->config.log_level);
		history_configure(&s->history, &s->config);
		otlp_sender_configure(&s->otlp, &s->config);
		/* An active watcher's repeat may change; ev_timer_again restarts it with the new one. */
		s->flush_timer.repeat = s->config.flush_interval_s;
		ev_timer_again(s->loop, &s->flush_timer);
		log_info("configuration reloaded%s%s (%zu rule%s)", s->config.config_path ? " from " : "",
		         s->config.config_path ? s->config.config_path : "", s->config.rules.n,
		         s->config.rules.n == 1 ? "" : "s");
		descriptors_explain(&s->config);
		/* Files kept past a lowered limit close as their threads go; none is opened past it. */
		s->proc_fds.limit = descriptors_for_proc_files(&s->config);
		fleet_rules_changed(&s->fleet);
		budget_configure(&s->budget);
	} else {
		/* Said in status too: a reload's failure is easy to miss in the log. */
		s->reload_failed_at = ev_time();
		snprintf(s->reload_error, sizeof s->reload_error, "%s", why);
		log_error("configuration not reloaded (kept the last one): %s", why);
	}
	targets_trim(&s->targets, s->config.warm_budget_bytes, s->config.max_targets);
	notify_ready(s);
}

/* Once a second: notice processes that exited while detached, hold the budgets. */
static void server_on_housekeeping(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	struct server *s = w->data;
	for (size_t i = 0; i < s->targets.n; i++)
		target_check_alive(s->targets.v[i], NULL);
	targets_trim(&s->targets, s->config.warm_budget_bytes, s->config.max_targets);
	targets_share_cache(&s->targets, s->config.cache_budget_bytes);
	fleet_housekeeping(&s->fleet);
	budget_tick(&s->budget);
	schedule_judge(&s->schedule, clock_wall_s());
	server_clients_expire(s);
	notify_status(s);
	log_tick();
}

static void server_shutdown(struct server *s)
{
	notify_stopping();
	server_clients_close(s);
	fleet_free(&s->fleet);
	budget_free(&s->budget);
	/* Everything counted reaches the database before the targets go. */
	jobs_finish(&s->jobs); /* queries and backfills: cancelled, their threads joined */
	ev_timer_stop(s->loop, &s->flush_timer);
	targets_flush(&s->targets);
	/* What was not sent waits in the history for the next start. */
	otlp_sender_stop(&s->otlp);
	history_close(&s->history);
	targets_free(&s->targets);
	uw_kreader_close(s->kreader); /* after every target that used it */
	uw_native_close(s->native);
	schedule_free(&s->schedule);
	if (s->listen_fd >= 0) {
		close(s->listen_fd);
		if (s->socket_created)
			unlinkat(s->socket_name ? s->socket_dir_fd : AT_FDCWD,
			         s->socket_name ? s->socket_name : s->config.socket_path, 0);
	}
	if (s->socket_dir_fd >= 0 && s->socket_dir_fd != s->state_fd)
		close(s->socket_dir_fd);
	close(s->state_fd);
	ev_signal_stop(s->loop, &s->sigterm);
	ev_signal_stop(s->loop, &s->sigint);
	ev_signal_stop(s->loop, &s->sighup);
	ev_timer_stop(s->loop, &s->housekeeping);
	ev_loop_destroy(s->loop);
	config_free(&s->config);
}

int server_main(int argc, char **argv)
{
	static const struct job_sink job_sink = {
		server_client_answer_room, server_client_answer_part, server_client_answer_done};
	struct server s = {.listen_fd = -1, .state_fd = -1, .socket_dir_fd = -1, .argc = argc, .argv = argv};
	/* Before the configuration, which must fit in what it allows. */
	descriptors_raise_limit();
	int rc = config_load(&s.config, argc, argv);
	if (rc == -1)
		return EXIT_OK; /* --help */
	if (rc != EXIT_OK)
		return rc;
	log_init(s.config.log_level);
	descriptors_explain(&s.config);
	s.proc_fds.limit = descriptors_for_proc_files(&s.config);
	/*
	 * Before the socket listens: loading takes tens of milliseconds, and
	 * processes started meanwhile by whoever saw the socket would all be
	 * found at once by the first scan, a child before its parent attached.
	 */
	if (!s.config.no_kernel_reader) {
		s.kreader = uw_kreader_open(&s.kreader_err);
		if (!s.config.kernel_copy)
			uw_kreader_copy_off(s.kreader);
		if (!s.kreader)
			log_info("%s; threads whose stacks move under every read go uncounted "
			         "([sampling] kernel_reader = false hides this)", s.kreader_err.msg);
		else if (uw_kreader_look_refused(s.kreader))
			log_info("%s; whether a thread ran is asked of /proc instead",
			         uw_kreader_look_refused(s.kreader));
		else if (uw_kreader_copy_refused(s.kreader) && s.config.kernel_copy)
			log_info("%s; a process that ran since its last sample is read from outside",
			         uw_kreader_copy_refused(s.kreader));
	}
	/* Loaded whatever the rules say: a rule or an attach may ask for C frames at any time. */
	struct uw_error native_err = {0};
	/* Its shots of running threads are perf events as the in-kernel reader's, and go with it. */
	if (!(s.native = uw_native_open(!s.config.no_kernel_reader, &native_err)))
		log_info("%s; native = true marks where C code sits, without its frames", native_err.msg);
	else if (!s.config.no_kernel_reader && uw_native_shots_refused(s.native))
		log_info("%s; native = true marks where a running thread's C code sits, without its frames",
		         uw_native_shots_refused(s.native));
	signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
	/*
	 * glibc raises its mmap threshold to the largest block freed (up to
	 * 32 MiB): the room one outlier sample took and gave back was carved
	 * from the heap the next time, and stayed resident as holes once given
	 * back again, so the RSS crept by what the targets' largest samples had
	 * needed.  A fixed threshold keeps every large block mapped on its own,
	 * the system's again once freed.
	 */
	mallopt(M_MMAP_THRESHOLD, SERVER_MMAP_THRESHOLD);
#endif

	s.loop = ev_default_loop(EVFLAG_AUTO);
	if (!s.loop) {
		fprintf(stderr, "pyprofd: cannot create the event loop\n");
		goto fail_loop;
	}
	/*
	 * Signals first: a client may connect (and an operator signal) as soon as
	 * the socket listens, before the loop runs; SIGHUP's default would kill.
	 */
	ev_signal_init(&s.sigterm, server_on_stop, SIGTERM);
	ev_signal_init(&s.sigint, server_on_stop, SIGINT);
	ev_signal_init(&s.sighup, server_on_reload, SIGHUP);
	s.sighup.data = &s;
	ev_signal_start(s.loop, &s.sigterm);
	ev_signal_start(s.loop, &s.sigint);
	ev_signal_start(s.loop, &s.sighup);
	if (server_prepare_state_dir(&s) != 0 || server_listen(&s) != 0)
		goto fail_listen;
	s.started = ev_now(s.loop);
	s.started_at = ev_time();
	if (schedule_init(&s.schedule, s.loop) != 0) {
		fprintf(stderr, "pyprofd: cannot make the sampling timer: %s\n", strerror(errno));
		goto fail_schedule;
	}
	/* One look at which threads ran serves every target a wakeup samples. */
	s.schedule.before_ticks = server_look;
	s.schedule.before_ctx = s.kreader;
	if (history_open(&s.history, &s.config, s.state_fd) != 0 ||
	    jobs_init(&s.jobs, s.loop, &job_sink, &s) != 0 || fleet_init(&s.fleet, &s) != 0 ||
	    otlp_sender_start(&s.otlp, s.history.writer, &s.config) != 0) {
		fprintf(stderr, "pyprofd: out of memory\n");
		schedule_free(&s.schedule);
		goto fail_schedule;
	}
	budget_init(&s.budget, &s);

	server_clients_listen(&s);
	ev_timer_init(&s.housekeeping, server_on_housekeeping, 1.0, 1.0);
	s.housekeeping.data = &s;
	ev_timer_start(s.loop, &s.housekeeping);
	ev_timer_init(&s.flush_timer, server_on_flush_timer, s.config.flush_interval_s,
	              s.config.flush_interval_s);
	s.flush_timer.data = &s;
	ev_timer_start(s.loop, &s.flush_timer);

	log_info("pyprofd %s listening on %s%s (state in %s)", PYPROFD_VERSION,
	         s.socket_activated ? "a socket from systemd" : s.config.socket_path,
	         s.socket_activated ? "" : "", s.config.state_dir);
	fleet_configure(&s.fleet);
	notify_ready(&s);

	ev_run(s.loop, 0);

	server_shutdown(&s);
	log_info("stopped");
	log_finish();
	return EXIT_OK;

	/* Undone in the reverse order of the steps that were taken. */
fail_schedule:
	close(s.listen_fd);
fail_listen:
	if (s.state_fd >= 0)
		close(s.state_fd);
	ev_loop_destroy(s.loop);
fail_loop:
	config_free(&s.config);
	uw_kreader_close(s.kreader);
	uw_native_close(s.native);
	return EXIT_FAILURE_OTHER;
}
