/*
 * Small helpers shared by every module: error objects, a growable byte
 * buffer, hashing, files and clocks. Nothing here holds global state.
 */
#ifndef SCHEDRUN_COMMON_H
#define SCHEDRUN_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "schedrun.h"

#define SCHEDRUN__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors: set, append a line, prefix ---- */
int err_set(schedrun_error_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int err_append(schedrun_error_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Moves src into dst (dst is cleared first); src ends empty. */
void err_move(schedrun_error_t *dst, schedrun_error_t *src);

/* ---- a growable buffer, always NUL-terminated ---- */
typedef struct strbuf {
  char *data;
  size_t len, cap;
  bool failed; /* an allocation failed; contents are truncated */
} strbuf;

void sb_init(strbuf *sb);
void sb_free(strbuf *sb);
void sb_add(strbuf *sb, const void *p, size_t n);
void sb_adds(strbuf *sb, const char *s);
void sb_addf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vaddf(strbuf *sb, const char *fmt, va_list ap);
/* s as a JSON string, quotes included; bytes that are not UTF-8 become U+FFFD. */
void sb_add_json(strbuf *sb, const char *s);
/* Hands the buffer over (caller frees); sb is empty afterwards. */
char *sb_take(strbuf *sb);

/* ---- hashing: SHA-256 as 64 lowercase hex digits + NUL ---- */
typedef struct hash_ctx hash_ctx;
hash_ctx *hash_new(void);
void hash_add(hash_ctx *h, const void *p, size_t n);
/* Adds a length prefix, so that ("ab","c") and ("a","bc") differ. */
void hash_add_field(hash_ctx *h, const void *p, size_t n);
void hash_add_str(hash_ctx *h, const char *s);
void hash_final_hex(hash_ctx *h, char out[65]); /* frees h */
uint64_t hash_fnv1a(const void *p, size_t n);

/* ---- files ---- */
/* Reads a regular file whole (a device or FIFO is refused, not read). */
int fs_read_file(const char *path, char **data, size_t *len, schedrun_error_t *err);
/* Reads fd to its end into a NUL-terminated heap buffer (more than max_bytes
 * is an error), then closes fd; path only names it in errors. */
int fs_read_fd(int fd, const char *path, uint64_t max_bytes, char **data, size_t *len, schedrun_error_t *err);
/* Creates path and the directories above it that are missing, with mode
 * (0755 for fs_mkdir_p); one that exists is fine. */
int fs_mkdir_mode(const char *path, unsigned mode, schedrun_error_t *err);
int fs_mkdir_p(const char *path, schedrun_error_t *err);
/* ---- what only this user can write (common/fs_trust.c) ---- */
struct stat;
/* fs_mkdir_p with mode 0700 for what it creates. */
int fs_mkdir_private(const char *path, schedrun_error_t *err);
/* SCHEDRUN_OK when path is a directory owned by the effective user that no
 * group or other user can write, in directories no other user could rename
 * it out of; else SCHEDRUN_EIO saying why. */
int fs_check_private_dir(const char *path, schedrun_error_t *err);
/* Opens a file of the cache: a regular file (no link followed), owned by the
 * effective user, not writable by group or others, at most max_bytes, and
 * executable by its owner when asked. The descriptor (close-on-exec), with
 * its status in *st; or -1 with err saying why. What is checked is what the
 * descriptor reads: the path cannot be swapped after the check. */
int fs_open_owned(const char *path, bool executable, uint64_t max_bytes, struct stat *st, schedrun_error_t *err);
/* fs_read_file for a file of the cache, checked as fs_open_owned checks. */
int fs_read_owned(const char *path, uint64_t max_bytes, char **data, size_t *len, schedrun_error_t *err);
/* Writes through a temporary file in the same directory, then renames it
 * into place: readers see the old file or the new one, never a part. */
int fs_write_atomic(const char *path, const void *data, size_t len, schedrun_error_t *err);
/* Writes a file the user named (a trace, a report): "-" is standard output;
 * an existing device or FIFO is written in place; a symbolic link is followed
 * (the link stays); a directory is refused; otherwise written atomically. */
int fs_write_output(const char *path, const void *data, size_t len, schedrun_error_t *err);
/* Whether fs_write_output (dir false) or files under a directory that
 * fs_mkdir_p makes (dir true) could be written at path, found out without
 * writing anything: SCHEDRUN_OK, or SCHEDRUN_EIO saying what stands in the
 * way. */
int fs_check_output(const char *path, bool dir, schedrun_error_t *err);
/* Reads a file the user gave (a config, a kernel, an init): regular files
 * only, at most max_bytes, every failure named with its cause. */
int fs_read_input(const char *path, uint64_t max_bytes, char **data, size_t *len, schedrun_error_t *err);
/* The directory part of a path ("." when none), heap-allocated. */
char *fs_dirname(const char *path);
/* `rel` resolved against the directory of `base_file` (rel if absolute). */
char *fs_join_rel(const char *base_file, const char *rel);
/* Removes a tree through directory descriptors, following no link. */
int fs_remove_tree(const char *path);
/* Creates a private directory dir/<prefix><pid>-XXXXXX in buf: 0, or -1 with
 * errno. The pid lets fs_sweep_dead find what a dead process left. */
int fs_temp_dir(char *buf, size_t size, const char *dir, const char *prefix);
/* Removes dir's entries named <prefix><pid>-... whose process no longer
 * exists: directories of the effective user's only, through descriptors. */
void fs_sweep_dead(const char *dir, const char *prefix);

/* ---- time ---- */
uint64_t now_ns(void);

char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* Copies s (NULL: "") into dst of cap bytes, cut to fit, always terminated:
 * what snprintf(dst, cap, "%s", s) does, without parsing a format. */
void str_copy(char *dst, size_t cap, const char *s);

#endif
