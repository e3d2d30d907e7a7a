/*
 * An artifact holding one image per architecture: what a kernel is compiled
 * to when the devices of one scheduler are of several architectures (a
 * cubin holds code for one architecture only; the loader picks the image of
 * each device's). Also the format of the artifact in the kernel cache.
 *
 *   "SRARCH1\0"  magic, 8 bytes
 *   u32 n, u32 0  (little-endian)
 *   n entries:   char arch[16] (NUL-padded, e.g. "sm_90"), u64 offset, u64 length
 *   the images, each where its entry says (inside the artifact)
 *
 * Pure functions over bytes; no backend is involved.
 */
#ifndef SCHEDRUN_GPU_ARCH_BUNDLE_H
#define SCHEDRUN_GPU_ARCH_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ARCH_BUNDLE_MAX 16     /* architectures in one bundle */
#define ARCH_BUNDLE_NAME_MAX 15 /* characters of an architecture's name */

/* Whether the image starts as a bundle does (it may still be malformed). */
bool arch_bundle_is(const uint8_t *img, size_t len);

/* Packs n images (1..ARCH_BUNDLE_MAX, names of 1..ARCH_BUNDLE_NAME_MAX
 * characters, all different) into *out (heap, *out_len bytes). Returns 0,
 * -1 on a bad argument, -2 out of memory. */
int arch_bundle_pack(size_t n, const char *const *archs, const uint8_t *const *imgs, const size_t *lens,
                     uint8_t **out, size_t *out_len);

/* The image for arch inside the bundle (a pointer into img). Returns 0, 1
 * when the bundle has no image for arch (*have then lists the ones it has,
 * space-separated), -1 when img is not a well-formed bundle. */
int arch_bundle_pick(const uint8_t *img, size_t len, const char *arch, const uint8_t **out, size_t *out_len,
                     char *have, size_t have_size);

#endif
