/* SHA-256 through OpenSSL's EVP interface (a reviewed implementation beats a
 * home-made one for cache keys), plus FNV-1a for in-memory hash tables. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

struct hash_ctx {
  EVP_MD_CTX *md;
};

hash_ctx *hash_new(void) {
  hash_ctx *h = malloc(sizeof *h);
  if (!h) return NULL;
  h->md = EVP_MD_CTX_new();
  if (!h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(h->md);
    free(h);
    return NULL;
  }
  return h;
}

void hash_add(hash_ctx *h, const void *p, size_t n) {
  if (h && n) EVP_DigestUpdate(h->md, p, n);
}

void hash_add_field(hash_ctx *h, const void *p, size_t n) {
  uint64_t len = n;
  hash_add(h, &len, sizeof len);
  hash_add(h, p, n);
}

void hash_add_str(hash_ctx *h, const char *s) { hash_add_field(h, s ? s : "", s ? strlen(s) : 0); }

void hash_final_hex(hash_ctx *h, char out[65]) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  out[0] = '\0';
  if (!h) return;
  if (EVP_DigestFinal_ex(h->md, md, &n) == 1) {
    for (unsigned i = 0; i < n && i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
  }
  EVP_MD_CTX_free(h->md);
  free(h);
}

uint64_t hash_fnv1a(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t x = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    x ^= b[i];
    x *= 1099511628211ull;
  }
  return x;
}
