/* Files and clocks. Writes that others may read at the same time go through a
 * temporary file and a rename, so no reader ever sees half a file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/common.h"

int fs_read_file(const char *path, char **data, size_t *len, schedrun_error_t *err) {
  return fs_read_input(path, UINT64_MAX, data, len, err);
}

int fs_mkdir_mode(const char *path, unsigned mode, schedrun_error_t *err) {
  char *p = xstrdup(path);
  if (!p) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == '\0') {
      char c = *s;
      *s = '\0';
      if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST) {
        int e = errno;
        free(p);
        return err_set(err, SCHEDRUN_EIO, "%s: cannot create directory: %s", path, strerror(e));
      }
      *s = c;
      if (c == '\0') break;
    }
  }
  free(p);
  return SCHEDRUN_OK;
}

int fs_mkdir_p(const char *path, schedrun_error_t *err) { return fs_mkdir_mode(path, 0755, err); }

static int write_all(int fd, const void *data, size_t len, const char *what, schedrun_error_t *err) {
  const char *p = data;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return err_set(err, SCHEDRUN_EIO, "%s: write failed: %s", what, strerror(w < 0 ? errno : EIO));
    p += w;
    len -= (size_t)w;
  }
  return SCHEDRUN_OK;
}

int fs_write_atomic(const char *path, const void *data, size_t len, schedrun_error_t *err) {
  strbuf tmp;
  sb_init(&tmp);
  sb_addf(&tmp, "%s.tmp.XXXXXX", path);
  if (tmp.failed) return err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  int fd = mkstemp(tmp.data);
  if (fd < 0) {
    int e = errno;
    sb_free(&tmp);
    return err_set(err, SCHEDRUN_EIO, "%s: cannot create a temporary file: %s", path, strerror(e));
  }
  if (write_all(fd, data, len, path, err) != SCHEDRUN_OK) {
    close(fd);
    unlink(tmp.data);
    sb_free(&tmp);
    return SCHEDRUN_EIO;
  }
  if (fchmod(fd, 0644) != 0 || close(fd) != 0 || rename(tmp.data, path) != 0) {
    int e = errno;
    unlink(tmp.data);
    sb_free(&tmp);
    return err_set(err, SCHEDRUN_EIO, "%s: cannot publish: %s", path, strerror(e));
  }
  sb_free(&tmp);
  return SCHEDRUN_OK;
}

#define FIFO_READER_WAIT_MS 10000

/* Opens a device or FIFO for writing without waiting forever: a FIFO with
 * no reader is waited on for FIFO_READER_WAIT_MS, then it is ENXIO. Writes
 * then block as usual (a reader that stops reading is the caller's to
 * bound). */
static int open_in_place(const char *path, bool fifo) {
  int flags = O_WRONLY | O_CLOEXEC | O_NOCTTY;
  if (!fifo) return open(path, flags);
  for (int waited = 0;; waited += 10) {
    int fd = open(path, flags | O_NONBLOCK);
    if (fd >= 0) {
      int fl = fcntl(fd, F_GETFL);
      if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
      return fd;
    }
    if (errno != ENXIO || waited >= FIFO_READER_WAIT_MS) return -1;
    struct timespec ts = {0, 10000000L};
    nanosleep(&ts, NULL);
  }
}

int fs_write_output(const char *path, const void *data, size_t len, schedrun_error_t *err) {
  if (!strcmp(path, "-")) return write_all(STDOUT_FILENO, data, len, "standard output", err);
  struct stat st, lst;
  bool link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return err_set(err, SCHEDRUN_EIO, "%s: is a directory", path);
    if (!S_ISREG(st.st_mode)) {
      /* a device, a FIFO, /dev/stdout: written in place, never replaced */
      int fd = open_in_place(path, S_ISFIFO(st.st_mode));
      if (fd < 0 && errno == ENXIO)
        return err_set(err, SCHEDRUN_EIO, "%s: a FIFO that no process opened for reading within %d s", path,
                       FIFO_READER_WAIT_MS / 1000);
      if (fd < 0) return err_set(err, SCHEDRUN_EIO, "%s: cannot open: %s", path, strerror(errno));
      int rc = write_all(fd, data, len, path, err);
      close(fd);
      return rc;
    }
    if (link) {
      /* the link stays; its target is what gets written */
      char *target = realpath(path, NULL);
      if (!target) return err_set(err, SCHEDRUN_EIO, "%s: cannot resolve the link: %s", path, strerror(errno));
      int rc = fs_write_atomic(target, data, len, err);
      free(target);
      return rc;
    }
  } else if (link) {
    /* a dangling link: create what it names */
    char to[4096];
    ssize_t n = readlink(path, to, sizeof to - 1);
    if (n < 0) return err_set(err, SCHEDRUN_EIO, "%s: cannot read the link: %s", path, strerror(errno));
    to[n] = '\0';
    char *target = fs_join_rel(path, to);
    int rc = target ? fs_write_atomic(target, data, len, err) : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    free(target);
    return rc;
  }
  return fs_write_atomic(path, data, len, err);
}

/* A directory that a file can be created in: it exists, is a directory, and
 * an entry made in it (a probe, removed at once) can be: permissions alone do
 * not tell (a read-only mount, /proc). */
static int writable_dir(const char *dir, const char *path, schedrun_error_t *err) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return err_set(err, SCHEDRUN_EIO, "%s: cannot be created: %s: %s", path, dir, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return err_set(err, SCHEDRUN_EIO, "%s: cannot be created: %s is not a directory", path, dir);
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/.schedrun-probe-XXXXXX", dir);
  if (!mkdtemp(probe)) return err_set(err, SCHEDRUN_EIO, "%s: cannot be created in %s: %s", path, dir, strerror(errno));
  rmdir(probe);
  return SCHEDRUN_OK;
}

int fs_check_output(const char *path, bool dir, schedrun_error_t *err) {
  if (!path || !*path) return err_set(err, SCHEDRUN_EIO, "an empty path");
  if (!dir && !strcmp(path, "-")) return SCHEDRUN_OK;
  struct stat st;
  if (stat(path, &st) == 0) {
    if (dir) {
      if (!S_ISDIR(st.st_mode)) return err_set(err, SCHEDRUN_EIO, "%s: is not a directory", path);
      if (access(path, W_OK) != 0) return err_set(err, SCHEDRUN_EIO, "%s: cannot be written: %s", path, strerror(errno));
      return SCHEDRUN_OK;
    }
    if (S_ISDIR(st.st_mode)) return err_set(err, SCHEDRUN_EIO, "%s: is a directory", path);
    if (access(path, W_OK) != 0) return err_set(err, SCHEDRUN_EIO, "%s: cannot be written: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return SCHEDRUN_OK; /* a device or FIFO: written in place */
    char *real = realpath(path, NULL); /* a regular file is replaced in its (link target's) directory */
    if (!real) return err_set(err, SCHEDRUN_EIO, "%s: cannot resolve: %s", path, strerror(errno));
    char *d = fs_dirname(real);
    int rc = d ? writable_dir(d, path, err) : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
    free(d);
    free(real);
    return rc;
  }
  if (errno != ENOENT) return err_set(err, SCHEDRUN_EIO, "%s: %s", path, strerror(errno));
  /* not there: a dangling link names what gets created; a directory is made
   * from its nearest existing ancestor */
  char *target = NULL;
  struct stat lst;
  if (!dir && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
    char to[4096];
    ssize_t n = readlink(path, to, sizeof to - 1);
    if (n < 0) return err_set(err, SCHEDRUN_EIO, "%s: cannot read the link: %s", path, strerror(errno));
    to[n] = '\0';
    target = fs_join_rel(path, to);
  } else {
    target = xstrdup(path);
  }
  char *d = target ? fs_dirname(target) : NULL;
  while (d && dir && stat(d, &st) != 0 && errno == ENOENT && strcmp(d, ".") && strcmp(d, "/")) {
    char *up = fs_dirname(d);
    free(d);
    d = up;
  }
  int rc = d ? writable_dir(d, path, err) : err_set(err, SCHEDRUN_ENOMEM, "out of memory");
  free(d);
  free(target);
  return rc;
}

int fs_read_fd(int fd, const char *path, uint64_t max_bytes, char **data, size_t *len, schedrun_error_t *err) {
  *data = NULL;
  *len = 0;
  /* read to the end, not to st_size: /proc files say 0, files grow */
  struct stat st;
  size_t cap = fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= max_bytes ? (size_t)st.st_size + 1 : 65536;
  char *buf = malloc(cap);
  size_t got = 0;
  int rc = buf ? SCHEDRUN_OK : err_set(err, SCHEDRUN_ENOMEM, "%s: out of memory for %zu bytes", path, cap);
  while (rc == SCHEDRUN_OK) {
    if (got + 1 >= cap) {
      char *more = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
      if (!more) {
        rc = err_set(err, SCHEDRUN_ENOMEM, "%s: out of memory reading the file", path);
        break;
      }
      buf = more;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + got, cap - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = err_set(err, SCHEDRUN_EIO, "%s: read failed: %s", path, strerror(errno));
    else if (r == 0) break;
    else if ((got += (size_t)r) > max_bytes)
      rc = err_set(err, SCHEDRUN_EIO, "%s: has more than %llu bytes", path, (unsigned long long)max_bytes);
  }
  close(fd);
  if (rc) {
    free(buf);
    return rc;
  }
  buf[got] = '\0';
  *data = buf;
  *len = got;
  return SCHEDRUN_OK;
}

int fs_read_input(const char *path, uint64_t max_bytes, char **data, size_t *len, schedrun_error_t *err) {
  *data = NULL;
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return err_set(err, SCHEDRUN_EIO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  int rc = SCHEDRUN_OK;
  if (fstat(fd, &st) != 0) rc = err_set(err, SCHEDRUN_EIO, "%s: cannot stat: %s", path, strerror(errno));
  else if (S_ISDIR(st.st_mode)) rc = err_set(err, SCHEDRUN_EIO, "%s: is a directory", path);
  else if (!S_ISREG(st.st_mode))
    rc = err_set(err, SCHEDRUN_EIO, "%s: is not a regular file (a device, a FIFO or a socket)", path);
  else if ((uint64_t)st.st_size > max_bytes)
    rc = err_set(err, SCHEDRUN_EIO, "%s: has %llu bytes; at most %llu", path, (unsigned long long)st.st_size,
                 (unsigned long long)max_bytes);
  if (rc) {
    close(fd);
    return rc;
  }
  return fs_read_fd(fd, path, max_bytes, data, len, err);
}

char *fs_dirname(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return xstrdup(".");
  if (slash == path) return xstrdup("/");
  return xstrndup(path, (size_t)(slash - path));
}

char *fs_join_rel(const char *base_file, const char *rel) {
  if (rel[0] == '/') return xstrdup(rel);
  char *dir = fs_dirname(base_file);
  if (!dir) return NULL;
  strbuf sb;
  sb_init(&sb);
  sb_addf(&sb, "%s/%s", dir, rel);
  free(dir);
  if (sb.failed) {
    sb_free(&sb);
    return NULL;
  }
  return sb_take(&sb);
}

int fs_temp_dir(char *buf, size_t size, const char *dir, const char *prefix) {
  int n = snprintf(buf, size, "%s/%s%ld-XXXXXX", dir, prefix, (long)getpid());
  if (n < 0 || (size_t)n >= size) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return mkdtemp(buf) ? 0 : -1;
}

uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
