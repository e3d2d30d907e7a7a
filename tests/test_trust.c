/*
 * Nothing another user could have written is run, loaded or removed: a cache
 * directory owned by another user, or one others can write, is refused with
 * the reason; a worker program or a kernel artifact planted in the cache (a
 * script, a library with a constructor, owned by another user or writable by
 * others) is never executed or loaded, and is built again in its place; a
 * cache entry that is a link to /dev/zero, a FIFO or a device is refused at
 * once; with no HOME and no XDG_CACHE_HOME the cache is a private temporary
 * one, never a fixed directory in /tmp; the sweep of dead processes' trees
 * removes only this user's directories and follows no link.
 *
 * Another user is uid 65534 (nobody): the cases that need one run as root
 * and are skipped otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/artifact.h"
#include "common/common.h"

#include "test_util.h"

#define NOBODY 65534

static char base[] = "/tmp/schedrun-trust-XXXXXX";

static int setup(void **st) {
  (void)st;
  return mkdtemp(base) ? 0 : -1;
}

static bool planted; /* /tmp/schedrun-cache is the test's, to remove */

static int teardown(void **st) {
  (void)st;
  fs_remove_tree(base);
  if (planted) fs_remove_tree("/tmp/schedrun-cache");
  return 0;
}

/* A fresh cache directory under base (static storage per slot). */
static const char *fresh_cache(int slot) {
  static char dirs[8][512];
  snprintf(dirs[slot], sizeof dirs[slot], "%s/cache%d", base, slot);
  assert_int_equal(mkdir(dirs[slot], 0700), 0);
  return dirs[slot];
}

/* Runs tu_tiny_yaml once on host:1 with cache dir `cache`; it must verify
 * when `verify`. */
static void run_tiny_as(const char *cache, bool verify) { tu_run_once(cache, tu_tiny_yaml, "tiny.yaml", verify); }

static void run_tiny(const char *cache) { run_tiny_as(cache, true); }

/* The one file under cache/sub whose name ends with `suffix` (static). */
static const char *only_file(const char *cache, const char *sub, const char *suffix) {
  static char path[1024];
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "find %s/%s -type f -name '*%s' ! -name '.*'", cache, sub, suffix);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  path[0] = '\0';
  int n = 0;
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    snprintf(path, sizeof path, "%s", line);
    n++;
  }
  pclose(f);
  if (n != 1) fail_msg("%d files *%s under %s/%s, not one", n, suffix, cache, sub);
  return path;
}

static void expect_open_refused(const char *cache, const char *why) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  o.cache_dir = cache;
  schedrun_t *s = NULL;
  schedrun_error_t err = {0};
  int rc = schedrun_open(&s, &o, &err);
  if (rc != SCHEDRUN_EIO || !strstr(err.message, cache) || !strstr(err.message, why))
    fail_msg("a cache that %s: open returned %d: %s", why, rc, err.message ? err.message : "(no message)");
  assert_null(s);
  schedrun_error_clear(&err);
}

static void test_cache_others_can_write_is_refused(void **st) {
  (void)st;
  const char *c = fresh_cache(0);
  assert_int_equal(chmod(c, 0777), 0);
  expect_open_refused(c, "can be written by every user");
  assert_int_equal(chmod(c, 0770), 0);
  expect_open_refused(c, "can be written by its group");
  if (geteuid() == 0) {
    assert_int_equal(chmod(c, 0700), 0);
    assert_int_equal(chown(c, NOBODY, NOBODY), 0);
    expect_open_refused(c, "is owned by another user");
    /* inside a directory another user owns and others can write, without
     * the sticky bit: they could rename the cache away and put theirs */
    char inner[600];
    snprintf(inner, sizeof inner, "%s/mine", c);
    assert_int_equal(mkdir(inner, 0700), 0);
    assert_int_equal(chmod(c, 0777), 0);
    expect_open_refused(inner, "which others can write");
  }
  /* a new cache directory is made 0700 */
  char made[600];
  snprintf(made, sizeof made, "%s/made/here", base);
  run_tiny(made);
  struct stat sb;
  assert_int_equal(stat(made, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
}

/* A script at the worker program's path: if run, it leaves `marker`. */
static void plant_script(const char *path, const char *marker, mode_t mode, uid_t uid) {
  char text[1200];
  snprintf(text, sizeof text, "#!/bin/sh\necho ran > %s\n", marker);
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0700);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  assert_int_equal(chmod(path, mode), 0);
  if (uid != geteuid()) assert_int_equal(chown(path, uid, uid), 0);
}

static void expect_rebuilt_worker(const char *path, const char *marker) {
  assert_int_equal(access(marker, F_OK), -1);
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_equal(sb.st_uid, geteuid());
  char magic[4] = {0};
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(read(fd, magic, 4), 4);
  close(fd);
  assert_memory_equal(magic, "\177ELF", 4); /* built again in its place */
}

static void test_planted_worker_never_runs(void **st) {
  (void)st;
  const char *c = fresh_cache(1);
  run_tiny(c);
  char worker[1024], marker[600];
  snprintf(worker, sizeof worker, "%s", only_file(c, "host-worker", ""));
  snprintf(marker, sizeof marker, "%s/worker-ran", base);
  /* writable by every user, though owned by this one */
  plant_script(worker, marker, 0777, geteuid());
  run_tiny(c);
  expect_rebuilt_worker(worker, marker);
  if (geteuid() == 0) {
    plant_script(worker, marker, 0755, NOBODY);
    run_tiny(c);
    expect_rebuilt_worker(worker, marker);
  }
  /* a link to a program elsewhere is not the cache's file either */
  char elsewhere[600];
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere.sh", base);
  plant_script(elsewhere, marker, 0755, geteuid());
  unlink(worker);
  assert_int_equal(symlink(elsewhere, worker), 0);
  run_tiny(c);
  expect_rebuilt_worker(worker, marker);
}

/* A valid artifact of the kernel's key whose library leaves `marker` when it
 * is loaded (a constructor), owned by `uid`. */
static void plant_library(const char *artifact, const char *marker, uid_t uid) {
  char src[600], so[600], cmd[2000];
  snprintf(src, sizeof src, "%s/planted.c", base);
  snprintf(so, sizeof so, "%s/planted.so", base);
  char text[1200];
  snprintf(text, sizeof text,
           "#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {\n"
           "  FILE *f = fopen(\"%s\", \"w\"); if (f) fclose(f);\n}\n",
           marker);
  FILE *f = fopen(src, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "cc -shared -fPIC -o %s %s", so, src);
  assert_int_equal(system(cmd), 0);
  size_t len = 0;
  char *bytes = tu_slurp(so, &len);
  assert_non_null(bytes);
  const char *slash = strrchr(artifact, '/');
  char key[65];
  snprintf(key, sizeof key, "%.64s", slash + 1);
  schedrun_error_t err = {0};
  unlink(artifact);
  assert_int_equal(artifact_write(artifact, key, bytes, len, &err), SCHEDRUN_OK);
  free(bytes);
  if (uid != geteuid()) assert_int_equal(chown(artifact, uid, uid), 0);
  else assert_int_equal(chmod(artifact, 0666), 0);
}

static void expect_own_artifact(const char *path, const char *marker) {
  assert_int_equal(access(marker, F_OK), -1);
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_equal(sb.st_uid, geteuid());
  assert_int_equal(sb.st_mode & 022, 0);
}

static void test_planted_kernel_never_loads(void **st) {
  (void)st;
  const char *c = fresh_cache(2);
  run_tiny(c);
  char art[1024], marker[600];
  snprintf(art, sizeof art, "%s", only_file(c, "host", ".so"));
  snprintf(marker, sizeof marker, "%s/library-loaded", base);
  /* the planted library is loadable: a cache that trusted it would run its
   * constructor (checked first, so that the test can fail) */
  plant_library(art, marker, geteuid());
  assert_int_equal(chmod(art, 0644), 0);
  run_tiny_as(c, false);
  assert_int_equal(access(marker, F_OK), 0);
  unlink(marker);
  /* writable by others: compiled again, never loaded */
  plant_library(art, marker, geteuid());
  run_tiny(c);
  expect_own_artifact(art, marker);
  if (geteuid() == 0) {
    plant_library(art, marker, NOBODY);
    run_tiny(c);
    expect_own_artifact(art, marker);
  }
}

/* Cache entries that are not files: each is refused at once (reading a link
 * to /dev/zero never ends, opening a FIFO waits for a writer) and the kernel
 * compiles again into a file in its place. */
static void test_special_cache_entries(void **st) {
  (void)st;
  const char *c = fresh_cache(3);
  run_tiny(c);
  char art[1024];
  snprintf(art, sizeof art, "%s", only_file(c, "host", ".so"));
  for (int kind = 0; kind < 3; kind++) {
    if (kind == 2 && geteuid() != 0) break;
    unlink(art);
    if (kind == 0) assert_int_equal(symlink("/dev/zero", art), 0);
    if (kind == 1) assert_int_equal(mkfifo(art, 0600), 0);
    if (kind == 2) assert_int_equal(mknod(art, S_IFCHR | 0600, makedev(1, 5)), 0); /* /dev/zero itself */
    run_tiny(c);
    struct stat sb;
    assert_int_equal(lstat(art, &sb), 0);
    if (!S_ISREG(sb.st_mode)) fail_msg("entry %d is still not a file", kind);
  }
  /* the identity record and the worker, the same way */
  char id[1024];
  snprintf(id, sizeof id, "%s", only_file(c, "identity", ""));
  unlink(id);
  assert_int_equal(mkfifo(id, 0600), 0);
  char worker[1024];
  snprintf(worker, sizeof worker, "%s", only_file(c, "host-worker", ""));
  unlink(worker);
  assert_int_equal(mkfifo(worker, 0700), 0);
  run_tiny(c);
  struct stat sb;
  assert_int_equal(lstat(worker, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
}

/* Without HOME and XDG_CACHE_HOME (cron, systemd, env -i) the cache is a
 * private temporary directory, removed at close; a /tmp/schedrun-cache made
 * by another user, with a worker program planted in it, is never looked at. */
static void test_no_home_uses_a_private_cache(void **st) {
  (void)st;
  const char *c = fresh_cache(4);
  run_tiny(c);
  char worker[1024];
  snprintf(worker, sizeof worker, "%s", only_file(c, "host-worker", ""));
  const char *key = strrchr(worker, '/') + 1;
  char marker[600];
  snprintf(marker, sizeof marker, "%s/fixed-cache-ran", base);
  if (geteuid() == 0 && mkdir("/tmp/schedrun-cache", 0777) == 0) {
    planted = true;
    assert_int_equal(mkdir("/tmp/schedrun-cache/host-worker", 0777), 0);
    char path[1200];
    snprintf(path, sizeof path, "/tmp/schedrun-cache/host-worker/%s", key);
    plant_script(path, marker, 0755, NOBODY);
    assert_int_equal(chown("/tmp/schedrun-cache/host-worker", NOBODY, NOBODY), 0);
    assert_int_equal(chown("/tmp/schedrun-cache", NOBODY, NOBODY), 0);
  }
  char *keep[3];
  const char *names[3] = {"HOME", "XDG_CACHE_HOME", "SCHEDRUN_CACHE_DIR"};
  for (int i = 0; i < 3; i++) {
    keep[i] = getenv(names[i]) ? xstrdup(getenv(names[i])) : NULL;
    unsetenv(names[i]);
  }
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = "host:1";
  schedrun_t *s = tu_open(&o);
  int temporary = 0;
  char *dir = xstrdup(schedrun_cache_dir(s, &temporary));
  assert_int_equal(temporary, 1);
  assert_null(strstr(dir, "/tmp/schedrun-cache/"));
  assert_string_not_equal(dir, "/tmp/schedrun-cache");
  struct stat sb;
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  schedrun_program_t *p = tu_load(s, tu_tiny_yaml, "tiny.yaml");
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  schedrun_report_t *r = NULL;
  schedrun_error_t err = {0};
  if (schedrun_run(s, p, &ro, &r, &err) != SCHEDRUN_OK) fail_msg("%s", err.message);
  assert_int_equal(schedrun_report_summary(r)->verified, 1);
  schedrun_report_free(&r);
  schedrun_program_free(&p);
  schedrun_close(&s);
  assert_int_equal(stat(dir, &sb), -1); /* removed at close */
  free(dir);
  for (int i = 0; i < 3; i++) {
    if (keep[i]) setenv(names[i], keep[i], 1);
    free(keep[i]);
  }
  assert_int_equal(access(marker, F_OK), -1);
}

/* The sweep at open removes a dead process's temporary tree only when it is
 * this user's directory: not another user's, and not through a link. */
static void test_sweep_takes_only_its_own(void **st) {
  (void)st;
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  assert_true(dead > 0);
  assert_int_equal(waitpid(dead, NULL, 0), dead);
  char mine[256], theirs[256], link[256], target[600], kept[700];
  snprintf(mine, sizeof mine, "/tmp/schedrun-cache-%ld-mine", (long)dead);
  snprintf(theirs, sizeof theirs, "/tmp/schedrun-cache-%ld-theirs", (long)dead);
  snprintf(link, sizeof link, "/tmp/schedrun-cache-%ld-link", (long)dead);
  snprintf(target, sizeof target, "%s/target", base);
  snprintf(kept, sizeof kept, "%s/target/kept", base);
  assert_int_equal(mkdir(mine, 0700), 0);
  assert_int_equal(mkdir(target, 0700), 0);
  FILE *f = fopen(kept, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(symlink(target, link), 0);
  bool other = geteuid() == 0;
  if (other) {
    assert_int_equal(mkdir(theirs, 0700), 0);
    assert_int_equal(chown(theirs, NOBODY, NOBODY), 0);
  }
  run_tiny(fresh_cache(5));
  assert_int_equal(access(mine, F_OK), -1);
  assert_int_equal(access(kept, F_OK), 0);
  struct stat sb;
  assert_int_equal(lstat(link, &sb), 0); /* not a directory: not swept */
  unlink(link);
  if (other) {
    assert_int_equal(access(theirs, F_OK), 0);
    rmdir(theirs);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cache_others_can_write_is_refused),
      cmocka_unit_test(test_planted_worker_never_runs),
      cmocka_unit_test(test_planted_kernel_never_loads),
      cmocka_unit_test(test_special_cache_entries),
      cmocka_unit_test(test_no_home_uses_a_private_cache),
      cmocka_unit_test(test_sweep_takes_only_its_own),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
