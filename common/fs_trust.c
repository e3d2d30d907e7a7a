/* What another user could have written is never run, loaded or removed by
 * path. The kernel cache and the worker program live in a directory only the
 * effective user can write; every file taken from it is opened without
 * following a link and checked on its descriptor (type, owner, mode, size)
 * before a byte of it is used; trees are removed through directory
 * descriptors, never by a path that could be swapped meanwhile. */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

/* Why a file or directory with this status is not the effective user's
 * alone, or NULL. */
static const char *untrusted(const struct stat *st) {
  if (st->st_uid != geteuid()) return "is owned by another user";
  if (st->st_mode & S_IWOTH) return "can be written by every user";
  if (st->st_mode & S_IWGRP) return "can be written by its group";
  return NULL;
}

int fs_mkdir_private(const char *path, schedrun_error_t *err) { return fs_mkdir_mode(path, 0700, err); }

int fs_check_private_dir(const char *path, schedrun_error_t *err) {
  struct stat st;
  if (stat(path, &st) != 0) return err_set(err, SCHEDRUN_EIO, "%s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return err_set(err, SCHEDRUN_EIO, "%s: is not a directory", path);
  const char *why = untrusted(&st);
  if (why)
    return err_set(err, SCHEDRUN_EIO,
                   "the kernel cache %s %s (uid %ld, mode %03o): a cache others can write could hand this process "
                   "their code; use a directory only you can write (chmod 700), or --no-cache",
                   path, why, (long)st.st_uid, (unsigned)(st.st_mode & 0777));
  /* the directories above: none another user could rename it out of (one
   * writable by others must have the sticky bit, as /tmp has) */
  char *up = fs_dirname(path);
  while (up && strcmp(up, ".") && strcmp(up, "/")) {
    struct stat ust;
    if (stat(up, &ust) == 0 && (ust.st_mode & (S_IWGRP | S_IWOTH)) && !(ust.st_mode & S_ISVTX) &&
        ust.st_uid != geteuid()) {
      int rc = err_set(err, SCHEDRUN_EIO,
                       "the kernel cache %s lies in %s, which others can write (mode %03o, no sticky bit): they "
                       "could replace the cache; use a directory only you can write, or --no-cache",
                       path, up, (unsigned)(ust.st_mode & 0777));
      free(up);
      return rc;
    }
    char *next = fs_dirname(up);
    free(up);
    up = next;
  }
  free(up);
  return SCHEDRUN_OK;
}

int fs_open_owned(const char *path, bool executable, uint64_t max_bytes, struct stat *st, schedrun_error_t *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    if (e == ELOOP) err_set(err, SCHEDRUN_EIO, "%s: is a symbolic link; the cache holds none", path);
    else err_set(err, SCHEDRUN_EIO, "%s: cannot open: %s", path, strerror(e));
    return -1;
  }
  const char *why = NULL;
  if (fstat(fd, st) != 0) why = strerror(errno);
  else if (!S_ISREG(st->st_mode)) why = "is not a regular file (a device, a FIFO or a socket)";
  else if ((why = untrusted(st)) != NULL) {
  } else if (executable && !(st->st_mode & S_IXUSR)) why = "is not executable";
  else if ((uint64_t)st->st_size > max_bytes) why = "is larger than any file the cache writes";
  if (why) {
    err_set(err, SCHEDRUN_EIO, "%s: %s; not used", path, why);
    close(fd);
    return -1;
  }
  return fd;
}

int fs_read_owned(const char *path, uint64_t max_bytes, char **data, size_t *len, schedrun_error_t *err) {
  *data = NULL;
  *len = 0;
  struct stat st;
  int fd = fs_open_owned(path, false, max_bytes, &st, err);
  if (fd < 0) return err && err->code ? err->code : SCHEDRUN_EIO;
  return fs_read_fd(fd, path, max_bytes, data, len, err);
}

/* Removes what dfd's entry `name` is, without following links: a directory's
 * entries first, each through the directory's own descriptor. */
static int remove_at(int dfd, const char *name, int depth) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : -1;
  if (!S_ISDIR(st.st_mode)) return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
  if (depth > 64) return -1;
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return -1;
  }
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (remove_at(dirfd(d), e->d_name, depth + 1) != 0) rc = -1;
  }
  closedir(d);
  if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) rc = -1;
  return rc;
}

int fs_remove_tree(const char *path) {
  char *dir = fs_dirname(path);
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  if (!dir || !*name) {
    free(dir);
    return -1;
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (dfd < 0) return -1;
  int rc = remove_at(dfd, name, 0);
  close(dfd);
  return rc;
}

void fs_sweep_dead(const char *dir, const char *prefix) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  DIR *d = fdopendir(dfd);
  if (!d) {
    close(dfd);
    return;
  }
  size_t plen = strlen(prefix);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, prefix, plen) != 0) continue;
    char *end;
    long pid = strtol(e->d_name + plen, &end, 10);
    if (end == e->d_name + plen || *end != '-' || pid <= 0) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge */
    /* only a directory of this user's: what another user left is theirs */
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    remove_at(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}
