/*
 * Where a store's file is: a directory held open and a name in it.
 *
 * SQLite opens files by name, and its unix VFS resolves every symbolic
 * link of a name before it opens it: a directory's /proc/self/fd/N link
 * would become the directory's path again, by name.  The store's VFS is
 * the unix one with that step left out, so the database, its -wal and its
 * -shm are all reached through the descriptor of the directory the caller
 * holds, whatever happens to the directory's path meanwhile.
 *
 * A file can still be deleted or replaced at its name under an open
 * connection, which then goes on writing into a file no one will read
 * again.  So the connection's file is compared with the name by device and
 * inode, and so are the -wal and -shm it uses: after each open (SQLite's
 * own record of the inode it opened against the name's), and then by the
 * writer, regularly and before it trusts a commit.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage.h"

/* The files of a database besides itself, as SQLite names them. */
static const char *const place_suffix[] = {"", "-wal", "-shm"};

/* ---- the VFS ---- */

#define PLACE_VFS "pyprofd"

/*
 * Written once, by place_vfs_register under pthread_once, then only read
 * (by SQLite, which keeps a pointer to it once registered).
 */
static sqlite3_vfs place_vfs;
static bool place_vfs_registered;
static pthread_once_t place_vfs_once = PTHREAD_ONCE_INIT;

/* Names are taken as they are: every name the store hands SQLite is absolute. */
static int place_full_pathname(sqlite3_vfs *vfs, const char *in, int n, char *out)
{
	(void)vfs;
	if (in[0] != '/' || n <= 0)
		return SQLITE_CANTOPEN;
	int len = snprintf(out, (size_t)n, "%s", in);
	return len >= 0 && len < n ? SQLITE_OK : SQLITE_CANTOPEN;
}

static void place_vfs_register(void)
{
	sqlite3_vfs *unix_vfs = sqlite3_vfs_find("unix");
	if (!unix_vfs)
		return;
	place_vfs = *unix_vfs;
	place_vfs.zName = PLACE_VFS;
	place_vfs.pNext = NULL;
	place_vfs.xFullPathname = place_full_pathname;
	place_vfs_registered = sqlite3_vfs_register(&place_vfs, 0) == SQLITE_OK;
}

const char *place_vfs_name(void)
{
	pthread_once(&place_vfs_once, place_vfs_register);
	return place_vfs_registered ? PLACE_VFS : NULL;
}

int place_proc_path(const struct store_place *p, char *buf, size_t len)
{
	int n = snprintf(buf, len, "/proc/self/fd/%d/%s", p->dirfd, p->name);
	return n > 0 && (size_t)n < len ? 0 : -1;
}

/* ---- the directory of a path ---- */

const char *place_base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *name = slash ? slash + 1 : path;
	return *name && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 ? name : NULL;
}

int place_open_dir(const char *path, struct store_error *err)
{
	const char *name = place_base_name(path);
	if (!name) {
		store_error_text(err, "cannot open %s: not a file name", path);
		return -1;
	}
	/* "a/b" is in "a", "/b" in "/", "b" in "." */
	size_t dir_len = name - 1 == path ? 1 : (size_t)(name - 1 - path);
	char *dir = name == path ? strdup(".") : strndup(path, dir_len);
	if (!dir) {
		store_error_text(err, "cannot open %s: out of memory", path);
		return -1;
	}
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int e = errno;
	free(dir);
	if (fd < 0)
		store_error_text(err, "cannot open %s: unable to open its directory: %s", path, strerror(e));
	return fd;
}

/* ---- identities ---- */

/*
 * The identity of file i of p (the database, -wal, -shm) into *id, not
 * known when there is nothing at the name.  0, or -1 with errno when the
 * name could not be looked at.
 */
static int place_id(const struct store_place *p, int i, struct store_file_id *id)
{
	char name[NAME_MAX + 8];
	struct stat st;
	*id = (struct store_file_id){0};
	if (snprintf(name, sizeof name, "%s%s", p->name, place_suffix[i]) >= (int)sizeof name) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if (fstatat(p->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return errno == ENOENT ? 0 : -1;
	id->known = true;
	id->regular = S_ISREG(st.st_mode);
	id->dev = st.st_dev;
	id->ino = st.st_ino;
	return 0;
}

static bool place_same(const struct store_file_id *a, const struct store_file_id *b)
{
	return a->known == b->known && (!a->known || (a->dev == b->dev && a->ino == b->ino));
}

int place_prepare(const struct store_place *p, const struct store_ids *last, bool create,
                  struct store_error *err)
{
	struct store_file_id db, wal;
	if (place_id(p, 0, &db) < 0 || place_id(p, 1, &wal) < 0) {
		store_error_text(err, "cannot open %s: %s", p->path, strerror(errno));
		return -1;
	}
	/* A symbolic link would be followed, a FIFO would block the open: only a plain file is a database. */
	if (db.known && !db.regular) {
		store_error_text(err, "cannot open %s: not a regular file; refusing to touch it", p->path);
		return -1;
	}
	/*
	 * SQLite takes a -wal beside a database as that database's own and
	 * applies it when it opens: one beside no database, the writer's last
	 * -wal beside another file (its own is removed when its database goes,
	 * see place_remove_leftovers: this is for when that failed), or another
	 * -wal beside the file this writer was using, would be written into it.
	 */
	bool same_db = last && last->db.known && place_same(&db, &last->db);
	bool last_wal = last && last->wal.known && place_same(&wal, &last->wal);
	if (create && wal.known && (!db.known || same_db != last_wal)) {
		store_error_text(err, "cannot open %s: %s-wal does not belong to %s; refusing to touch it "
		                      "until it is removed",
		                 p->path, p->path, db.known ? "it" : "a new database");
		return -1;
	}
	if (!db.known && create) {
		/*
		 * Created here rather than by SQLite, which would follow a
		 * symbolic link put at the name meanwhile.
		 */
		int fd = openat(p->dirfd, p->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		                0644);
		struct stat dir;
		if (fd < 0 && errno == ENOENT && fstat(p->dirfd, &dir) == 0 && dir.st_nlink == 0) {
			/* Held open, the directory cannot come back: another at its path is not it. */
			store_error_text(err, "cannot open %s: its directory was deleted", p->path);
			return -1;
		}
		if (fd < 0 && errno != EEXIST) {
			store_error_text(err, "cannot open %s: cannot create it: %s", p->path, strerror(errno));
			return -1;
		}
		if (fd >= 0)
			close(fd);
	}
	return 0;
}

int place_verify(const struct store_place *p, sqlite3 *db, struct store_ids *ids,
                 struct store_error *err)
{
	struct store_file_id before, after;
	int moved = 1;
	if (place_id(p, 0, &before) < 0 || !before.known || !before.regular ||
	    sqlite3_file_control(db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) != SQLITE_OK || moved ||
	    place_id(p, 0, &after) < 0 || !place_same(&before, &after)) {
		store_error_text(err, "cannot open %s: the file changed while it was opened", p->path);
		return -1;
	}
	ids->db = after;
	/* A connection in WAL mode keeps both open; absent, they are not compared. */
	if (place_id(p, 1, &ids->wal) < 0 || place_id(p, 2, &ids->shm) < 0)
		ids->wal.known = ids->shm.known = false;
	return 0;
}

int place_check(const struct store_place *p, const struct store_ids *ids, char *why, size_t len)
{
	const struct store_file_id *want[] = {&ids->db, &ids->wal, &ids->shm};
	for (int i = 0; i < 3; i++) {
		struct store_file_id now;
		if (!want[i]->known)
			continue;
		if (place_id(p, i, &now) < 0)
			return -1;
		if (place_same(&now, want[i]))
			continue;
		snprintf(why, len, "%s%s was %s under the daemon", p->path, place_suffix[i],
		         now.known ? "replaced by another file" : "deleted");
		return 1;
	}
	return 0;
}

bool place_db_unmoved(const struct store_place *p, const struct store_ids *ids)
{
	struct store_file_id now;
	return ids->db.known && place_id(p, 0, &now) == 0 && place_same(&now, &ids->db);
}

void place_remove_leftovers(const struct store_place *p, const struct store_ids *ids)
{
	const struct store_file_id *want[] = {NULL, &ids->wal, &ids->shm};
	for (int i = 1; i < 3; i++) {
		struct store_file_id now;
		char name[NAME_MAX + 8];
		if (!want[i]->known || place_id(p, i, &now) < 0 || !now.known || !place_same(&now, want[i]))
			continue;
		snprintf(name, sizeof name, "%s%s", p->name, place_suffix[i]);
		unlinkat(p->dirfd, name, 0);
	}
}
