/*
 * The state directory: the database and (by default) the socket live
 * there, so no one but root and the daemon's user may have a say in where
 * its path leads.  It is checked from / down as sshd's StrictModes checks
 * a user's files: every directory on the way owned by root or by the
 * daemon's user and writable by no one else, unless sticky (as /tmp,
 * where others may add entries but not rename or remove ours: the next
 * component is then checked as any); every symbolic link followed owned by
 * root or that user; the directory itself that user's and writable by it
 * alone.  The walk opens each directory from the one before (O_NOFOLLOW)
 * and checks the descriptor it got, so what is checked is what is used,
 * and the last descriptor is held for the daemon's life: the files in the
 * directory are reached through it, never by the path again.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pyprofd.h"

/* Symbolic links followed at most, as the kernel's own limit. */
#define STATEDIR_MAX_LINKS 40

struct statedir_walk {
	const char *what; /* "state directory", "socket directory": for messages */
	const char *path; /* as asked for, for messages */
	uid_t uid;
	int fd;           /* the directory reached */
	char at[PATH_MAX]; /* its path as followed, for messages */
	char *why;
	size_t len;
};

static int statedir_refuse(struct statedir_walk *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int statedir_refuse(struct statedir_walk *w, const char *fmt, ...)
{
	int n = snprintf(w->why, w->len, "%s %s: ", w->what, w->path);
	va_list ap;
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < w->len)
		vsnprintf(w->why + n, w->len - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* w->at with "/name" added (a name at / gives "/name"). */
static int statedir_at_push(struct statedir_walk *w, const char *name)
{
	size_t n = strlen(w->at);
	bool root = n == 1 && w->at[0] == '/';
	if (snprintf(w->at + n - root, sizeof w->at - n + root, "/%s", name) >= (int)(sizeof w->at - n + root))
		return statedir_refuse(w, "the path is too long");
	return 0;
}

/* w->at without its last component. */
static void statedir_at_pop(struct statedir_walk *w)
{
	char *slash = strrchr(w->at, '/');
	if (slash && slash != w->at)
		*slash = '\0';
	else
		snprintf(w->at, sizeof w->at, "/");
}

/* The owner may be root or the daemon's user; others may write only where the sticky bit holds. */
static int statedir_check_dir(struct statedir_walk *w, const struct stat *st)
{
	if (st->st_uid != 0 && st->st_uid != w->uid)
		return statedir_refuse(w, "%s is owned by uid %u, not by root or uid %u", w->at,
		                       (unsigned)st->st_uid, (unsigned)w->uid);
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
		return statedir_refuse(w, "%s is writable by %s (mode %04o) and not sticky", w->at,
		                       st->st_mode & S_IWOTH ? "others" : "its group",
		                       (unsigned)(st->st_mode & 07777));
	return 0;
}

/* Steps from w->fd into its directory name (seen: as fstatat saw it, if it did), and checks it. */
static int statedir_enter(struct statedir_walk *w, const char *name, const struct stat *seen)
{
	int fd = openat(w->fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return statedir_refuse(w, "cannot open %s: %s", w->at, strerror(e));
	}
	/* What was looked at is what was opened: else it changed in between, and is checked no more. */
	if (seen && (st.st_dev != seen->st_dev || st.st_ino != seen->st_ino)) {
		close(fd);
		return statedir_refuse(w, "%s changed while it was checked", w->at);
	}
	close(w->fd);
	w->fd = fd;
	return statedir_check_dir(w, &st);
}

/*
 * Walks rest (a path relative to w->fd, or absolute), following links,
 * creating what is missing.  links counts the links followed so far.
 */
static int statedir_walk(struct statedir_walk *w, char *rest, int *links)
{
	char *save = NULL;
	for (char *name = strtok_r(rest, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0) {
			statedir_at_pop(w);
			if (statedir_enter(w, "..", NULL) != 0)
				return -1;
			continue;
		}
		if (statedir_at_push(w, name) != 0)
			return -1;
		struct stat st;
		int rc = fstatat(w->fd, name, &st, AT_SYMLINK_NOFOLLOW);
		if (rc != 0 && errno == ENOENT) {
			/* mkdir -p: the state directory and what leads to it may not exist yet. */
			if (mkdirat(w->fd, name, 0700) != 0 && errno != EEXIST)
				return statedir_refuse(w, "cannot create %s: %s", w->at, strerror(errno));
			rc = fstatat(w->fd, name, &st, AT_SYMLINK_NOFOLLOW);
		}
		if (rc != 0)
			return statedir_refuse(w, "cannot look at %s: %s", w->at, strerror(errno));
		if (S_ISDIR(st.st_mode)) {
			if (statedir_enter(w, name, &st) != 0)
				return -1;
			continue;
		}
		if (!S_ISLNK(st.st_mode))
			return statedir_refuse(w, "%s is not a directory", w->at);
		/* A link is as good as the directory it sits in, and its owner: who may re-point it. */
		if (st.st_uid != 0 && st.st_uid != w->uid)
			return statedir_refuse(w, "%s is a symbolic link owned by uid %u, not by root or uid %u",
			                       w->at, (unsigned)st.st_uid, (unsigned)w->uid);
		if (++*links > STATEDIR_MAX_LINKS)
			return statedir_refuse(w, "%s: too many levels of symbolic links", w->at);
		char target[PATH_MAX];
		ssize_t n = readlinkat(w->fd, name, target, sizeof target - 1);
		if (n < 0)
			return statedir_refuse(w, "cannot read the link %s: %s", w->at, strerror(errno));
		target[n] = '\0';
		statedir_at_pop(w);
		if (target[0] == '/') {
			/* From / again, which is checked again as any directory on the way. */
			snprintf(w->at, sizeof w->at, "/");
			if (statedir_enter(w, "/", NULL) != 0)
				return -1;
		}
		if (statedir_walk(w, target, links) != 0)
			return -1;
	}
	return 0;
}

/*
 * A file of the state directory the daemon reads and writes (the history
 * and its journals), when there: the daemon's user's regular file, with
 * one link, writable by that user alone.  Another user's file there would
 * be read and written with the daemon's rights.
 */
int statedir_check_file(int dir_fd, const char *dir, const char *name, uid_t uid, char *why, size_t len)
{
	struct stat st;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(why, len, "%s/%s: %s", dir, name, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != uid || st.st_nlink != 1 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(why, len,
		         "%s/%s must be a regular file of uid %u with one link, writable by its owner alone "
		         "(it is uid %u's, mode %04o, %lu links)",
		         dir, name, (unsigned)uid, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
		         (unsigned long)st.st_nlink);
		return -1;
	}
	return 0;
}

int statedir_open(const char *what, const char *path, uid_t uid, char *why, size_t len)
{
	struct statedir_walk w = {.what = what, .path = path, .uid = uid, .fd = -1, .why = why, .len = len};
	char rest[PATH_MAX];
	/* A relative path is checked from / too: the working directory is on its way. */
	char cwd[PATH_MAX];
	if (path[0] != '/' && !getcwd(cwd, sizeof cwd)) {
		statedir_refuse(&w, "cannot find the working directory: %s", strerror(errno));
		return -1;
	}
	if (snprintf(rest, sizeof rest, "%s%s%s", path[0] == '/' ? "" : cwd, path[0] == '/' ? "" : "/",
	             path) >= (int)sizeof rest) {
		statedir_refuse(&w, "the path is too long");
		return -1;
	}
	w.fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	snprintf(w.at, sizeof w.at, "/");
	struct stat st;
	int links = 0;
	if (w.fd < 0 || fstat(w.fd, &st) != 0) {
		statedir_refuse(&w, "cannot open /: %s", strerror(errno));
		goto fail;
	}
	if (statedir_check_dir(&w, &st) != 0 || statedir_walk(&w, rest, &links) != 0)
		goto fail;
	/* The directory itself: the daemon's user's, and no one else may add or remove files in it. */
	if (fstat(w.fd, &st) != 0) {
		statedir_refuse(&w, "cannot look at %s: %s", w.at, strerror(errno));
		goto fail;
	}
	if (st.st_uid != uid || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		statedir_refuse(&w, "%s must be owned by uid %u and writable by its owner alone "
		                    "(it is uid %u's, mode %04o)",
		                w.at, (unsigned)uid, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		goto fail;
	}
	return w.fd;
fail:
	if (w.fd >= 0)
		close(w.fd);
	return -1;
}
