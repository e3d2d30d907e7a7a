/* See arch_bundle.h. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/arch_bundle.h"

static const char magic[8] = "SRARCH1";
#define HEAD 16u
#define ENTRY 32u

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

bool arch_bundle_is(const uint8_t *img, size_t len) { return img && len >= HEAD && memcmp(img, magic, 8) == 0; }

int arch_bundle_pack(size_t n, const char *const *archs, const uint8_t *const *imgs, const size_t *lens,
                     uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if (n == 0 || n > ARCH_BUNDLE_MAX || !archs || !imgs || !lens) return -1;
  size_t total = HEAD + n * ENTRY;
  for (size_t i = 0; i < n; i++) {
    size_t an = archs[i] ? strlen(archs[i]) : 0;
    if (an == 0 || an > ARCH_BUNDLE_NAME_MAX || !imgs[i] || lens[i] == 0 || lens[i] > SIZE_MAX - total) return -1;
    for (size_t j = 0; j < i; j++)
      if (strcmp(archs[i], archs[j]) == 0) return -1;
    total += lens[i];
  }
  uint8_t *b = calloc(1, total);
  if (!b) return -2;
  memcpy(b, magic, 8);
  put_u32(b + 8, (uint32_t)n);
  size_t at = HEAD + n * ENTRY;
  for (size_t i = 0; i < n; i++) {
    uint8_t *e = b + HEAD + i * ENTRY;
    memcpy(e, archs[i], strlen(archs[i]));
    put_u64(e + 16, at);
    put_u64(e + 24, lens[i]);
    memcpy(b + at, imgs[i], lens[i]);
    at += lens[i];
  }
  assert(at == total); /* every image where its entry says, nothing after the last */
  *out = b;
  *out_len = total;
  return 0;
}

int arch_bundle_pick(const uint8_t *img, size_t len, const char *arch, const uint8_t **out, size_t *out_len,
                     char *have, size_t have_size) {
  *out = NULL;
  *out_len = 0;
  if (have && have_size) have[0] = '\0';
  if (!arch_bundle_is(img, len)) return -1;
  uint32_t n = get_u32(img + 8);
  if (n == 0 || n > ARCH_BUNDLE_MAX || get_u32(img + 12) != 0 || len < HEAD + (size_t)n * ENTRY) return -1;
  size_t used = 0, mine_len = 0;
  const uint8_t *mine = NULL;
  int found = -1;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *e = img + HEAD + (size_t)i * ENTRY;
    size_t an = strnlen((const char *)e, 16);
    if (an == 0 || an > ARCH_BUNDLE_NAME_MAX) return -1;
    for (size_t k = an; k < 16; k++)
      if (e[k]) return -1; /* NUL-padded */
    uint64_t off = get_u64(e + 16), n_bytes = get_u64(e + 24);
    if (off < HEAD + (uint64_t)n * ENTRY || off > len || n_bytes == 0 || n_bytes > len - off) return -1;
    if (have && used + an + 2 <= have_size) { /* a space, the name, the NUL */
      if (used) have[used++] = ' ';
      memcpy(have + used, e, an);
      used += an;
      have[used] = '\0';
    }
    if (found < 0 && arch && strlen(arch) == an && memcmp(e, arch, an) == 0) {
      found = (int)i;
      mine = img + off;
      mine_len = (size_t)n_bytes;
    }
  }
  /* a bad entry after the one asked for refuses the whole: handed out only now */
  *out = mine;
  *out_len = mine_len;
  return found < 0 ? 1 : 0;
}
