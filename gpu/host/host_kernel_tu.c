/* See host_kernel_tu.h. */
#include <string.h>

#include "gpu/host/host_kernel_tu.h"
#include "gpu/host/host_prelude.h"

/* gpu/host/host_blocks.hpp, as text (generated) */
extern const char host_blocks_text[];

static bool ident_char(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Steps over a comment, string or character at p (counting its lines);
 * returns p itself when there is none there. */
static const char *skip_quoted(const char *p, int *line) {
  if (p[0] == '/' && p[1] == '/') {
    while (*p && *p != '\n') p++;
  } else if (p[0] == '/' && p[1] == '*') {
    p += 2;
    while (*p && !(p[0] == '*' && p[1] == '/')) *line += *p++ == '\n';
    if (*p) p += 2;
  } else if (*p == '"' || *p == '\'') {
    char q = *p++;
    while (*p && *p != q && *p != '\n') p += (p[0] == '\\' && p[1]) ? 2 : 1;
    if (*p == q) p++;
  }
  return p;
}

int host_find_ident(const char *src, const char *ident) {
  size_t il = strlen(ident);
  int line = 1;
  for (const char *p = src; *p;) {
    const char *q = skip_quoted(p, &line);
    if (q != p) {
      p = q;
    } else if (*p == '\n') {
      line++;
      p++;
    } else if (ident_char(*p) && !(*p >= '0' && *p <= '9')) {
      const char *s = p;
      while (ident_char(*p)) p++;
      if ((size_t)(p - s) == il && memcmp(s, ident, il) == 0) return line;
    } else {
      p++;
    }
  }
  return 0;
}

bool host_tu_needs_blocks(const char *src) {
  static const char *const needs[] = {"__shared__",       "__syncthreads",   "__syncthreads_count", "__syncthreads_and",
                                      "__syncthreads_or", "__syncwarp",      "__shfl_sync",         "__shfl_up_sync",
                                      "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync",       "__any_sync",
                                      "__all_sync",       "__activemask"};
  for (size_t i = 0; i < SCHEDRUN__ARRAY_LEN(needs); i++)
    if (host_find_ident(src, needs[i])) return true;
  return false;
}

void host_tu_prelude(strbuf *sb, bool blocks) {
  sb_adds(sb, host_prelude);
  if (blocks) {
    sb_adds(sb, "#line 1 \"gpu/host/host_blocks.hpp\"\n");
    sb_adds(sb, host_blocks_text);
  }
}

/* `extern __shared__ DECL;` at p (p at "extern"), rewritten into sb; returns
 * the end of the declaration, or NULL when it is not such a declaration. */
static const char *dyn_shared(strbuf *sb, const char *p) {
  const char *q = p + 6;
  while (*q == ' ' || *q == '\t') q++;
  if (strncmp(q, "__shared__", 10) != 0 || ident_char(q[10])) return NULL;
  q += 10;
  const char *semi = strchr(q, ';');
  if (!semi) return NULL;
  /* the declarator: TYPE NAME [ ] ; the name is the last identifier before '[' */
  const char *br = semi;
  while (br > q && br[-1] != '[') br--;
  if (br == q) return NULL;
  const char *name_end = br - 1;
  while (name_end > q && (name_end[-1] == ' ' || name_end[-1] == '\t')) name_end--;
  const char *name = name_end;
  while (name > q && ident_char(name[-1])) name--;
  if (name == name_end) return NULL;
  strbuf type;
  sb_init(&type);
  for (const char *t = q; t < name; t++) {
    if (strncmp(t, "__align__", 9) == 0) { /* an alignment the pointer need not repeat */
      const char *c = strchr(t, ')');
      if (c && c < name) {
        t = c;
        continue;
      }
    }
    sb_add(&type, *t == '\n' ? " " : t, 1);
  }
  sb_addf(sb, "%s*%.*s = reinterpret_cast<%s*>(__sr::dyn_shared());", type.failed ? "char " : type.data,
          (int)(name_end - name), name, type.failed ? "char " : type.data);
  sb_free(&type);
  for (const char *t = p; t < semi; t++) /* the lines it spanned */
    if (*t == '\n') sb_adds(sb, "\n");
  return semi + 1;
}

int host_tu_source(strbuf *sb, const char *src) {
  int line = 1, depth = 0;
  const char *p = src, *from = src;
  while (*p) {
    const char *q = skip_quoted(p, &line);
    if (q != p) {
      p = q;
    } else if (*p == '\n' || *p == '{' || *p == '}') {
      line += *p == '\n';
      depth += *p == '{' ? 1 : *p == '}' ? -1 : 0;
      p++;
    } else if (ident_char(*p)) {
      bool word_start = p == src || !ident_char(p[-1]);
      if (word_start && strncmp(p, "extern", 6) == 0 && !ident_char(p[6])) {
        size_t mark = sb->len;
        sb_add(sb, from, (size_t)(p - from));
        const char *end = dyn_shared(sb, p);
        if (end && depth <= 0) {
          sb->len = mark;
          return line;
        }
        if (end) {
          for (const char *t = p; t < end; t++) line += *t == '\n';
          p = from = end;
          continue;
        }
        sb->len = mark;
      }
      while (ident_char(*p)) p++;
    } else {
      p++;
    }
  }
  sb_add(sb, from, (size_t)(p - from));
  return 0;
}

/* The loops over a grid's blocks and each block's threads around `call`,
 * indented by `in`, with the grid's and the block's sizes the expressions
 * g and b (x, y, z), ending in `return 0;`. */
static void grid_loops(strbuf *sb, const char *in, const char *const g[3], const char *const b[3],
                       const char *call) {
  sb_addf(sb,
          "%sgridDim = dim3(%s, %s, %s);\n"
          "%sblockDim = dim3(%s, %s, %s);\n"
          "%sfor (unsigned bz = 0; bz < %s; bz++)\n"
          "%sfor (unsigned by = 0; by < %s; by++)\n"
          "%sfor (unsigned bx = 0; bx < %s; bx++) {\n"
          "%s  blockIdx = uint3{bx, by, bz};\n"
          "%s  for (unsigned tz = 0; tz < %s; tz++)\n"
          "%s  for (unsigned ty = 0; ty < %s; ty++)\n"
          "%s  for (unsigned tx = 0; tx < %s; tx++) {\n"
          "%s    threadIdx = uint3{tx, ty, tz};\n"
          "%s    %s\n%s  }\n%s}\n%sreturn 0;\n",
          in, g[0], g[1], g[2], in, b[0], b[1], b[2], in, g[2], in, g[1], in, g[0], in, in, b[2], in, b[1], in, b[0],
          in, in, call, in, in, in);
}

void host_tu_launcher(strbuf *sb, const char *entry, const char *name, const char *unpack, const char *call,
                      bool blocks) {
  sb_addf(sb,
          "extern \"C\" __attribute__((visibility(\"default\"))) int __sched_launch_%s("
          "const unsigned *__g, const unsigned *__b, const uint64_t *__a, unsigned __shm, char *__text, "
          "unsigned __cap) {\n%s",
          entry, unpack);
  if (blocks) {
    sb_addf(sb,
            "  auto __body = [&]() { %s };\n"
            "  return __sr::run_grid(__g, __b, __shm, \"%s\", __text, __cap,\n"
            "                        [](void *__c) { (*static_cast<decltype(__body) *>(__c))(); }, &__body);\n}\n",
            call, name);
    return;
  }
  /* Two copies of the grid's loops. The first runs every grid within CUDA's
   * block limits and with at most 2^20 blocks across: its bounds are masked
   * to ranges the compiler can see, so that blockIdx.x * blockDim.x +
   * threadIdx.x provably neither wraps nor turns negative, the index is
   * affine in tx, and the loop over a block's threads (x fastest) becomes
   * vector code. The second runs the rest (wider grids), as CUDA would. */
  static const char *const g_masked[3] = {"__g0", "__g1", "__g2"}, *const b_masked[3] = {"__b0", "__b1", "__b2"};
  static const char *const g_plain[3] = {"__g[0]", "__g[1]", "__g[2]"}, *const b_plain[3] = {"__b[0]", "__b[1]", "__b[2]"};
  sb_adds(sb,
          "  (void)__shm; (void)__text; (void)__cap;\n"
          "  if (__b[0] <= 1024u && __b[1] <= 1024u && __b[2] <= 64u && __g[0] <= (1u << 20)) {\n"
          "    const unsigned __g0 = __g[0] & ((2u << 20) - 1), __g1 = __g[1], __g2 = __g[2];\n"
          "    const unsigned __b0 = __b[0] & 2047u, __b1 = __b[1] & 2047u, __b2 = __b[2] & 127u;\n");
  grid_loops(sb, "    ", g_masked, b_masked, call);
  sb_adds(sb, "  }\n");
  grid_loops(sb, "  ", g_plain, b_plain, call);
  sb_adds(sb, "}\n");
}
