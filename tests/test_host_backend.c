/* The host backend: kernels compiled from CUDA C by the C++ compiler, run as
 * grids of loops; sequences of launches, copies, fills and while loops;
 * in-place updates; refusals and compile errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/backend.h"
#include "test_util.h"

static char tmpdir[64];

static int setup(void **st) {
  (void)st;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/schedrun-hb-XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **st) {
  (void)st;
  fs_remove_tree(tmpdir);
  return 0;
}

typedef struct image {
  uint8_t *data;
  size_t len;
} image;

static int compile(const char *name, const char *src, const prog_type *params, uint32_t np, image *out,
                   char **log, schedrun_error_t *err) {
  gpu_compile_req req = {name, name, src, "test.cu", 1, params, np, "x86_64"};
  int rc = gpu_host_target.compile(NULL, &req, tmpdir, &out->data, &out->len, log, err);
  if (rc) assert_null(out->data); /* nothing half-made comes back */
  else assert_true(out->len > 0);
  return rc;
}

static const char saxpy_src[] =
    "extern \"C\" __global__ void saxpy(float a, const float *x, float *y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = a * x[i] + y[i];\n"
    "}\n";

static const char grid3d_src[] =
    "extern \"C\" __global__ void grid3d(unsigned *out, long long base, double scale) {\n"
    "  unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
    "  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
    "  unsigned i = bx * blockDim.x * blockDim.y * blockDim.z + t;\n"
    "  out[i] = (unsigned)(base + (long long)(i * scale));\n"
    "  atomicAdd(&out[1000], 1u);\n"
    "}\n";

static const char countdown_src[] =
    "extern \"C\" __global__ void countdown(int *flag, float *log) {\n"
    "  if (threadIdx.x == 0) { log[flag[0]] = (float)flag[0] * 10.0f; flag[0] -= 1; }\n"
    "}\n";

static void test_launch_and_sequence(void **st) {
  (void)st;
  gpu_backend *b;
  schedrun_error_t err = {0};
  assert_int_equal(gpu_host_open(2, tu_gpu_opts(), &b, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->device_count(b), 2);
  assert_string_equal(b->ops->device_name(b, 1), "host:1");

  image path = {0}, path2 = {0}, path3 = {0};
  char *log = NULL;
  prog_type sp[] = {PT_F32, PT_PTR, PT_PTR, PT_I32};
  if (compile("saxpy", saxpy_src, sp, 4, &path, &log, &err)) fail_msg("%s\n%s", err.message, log);
  free(log);
  prog_type gp[] = {PT_PTR, PT_I64, PT_F64};
  if (compile("grid3d", grid3d_src, gp, 3, &path2, &log, &err)) fail_msg("%s\n%s", err.message, log);
  free(log);
  prog_type cp[] = {PT_PTR, PT_PTR};
  if (compile("countdown", countdown_src, cp, 2, &path3, &log, &err)) fail_msg("%s\n%s", err.message, log);
  free(log);

  gpu_module *m1, *m2, *m3;
  gpu_function f1, f2, f3;
  assert_int_equal(b->ops->module_load(b, 0, path.data, path.len, &m1, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->module_function(b, m1, "saxpy", &f1, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->module_function(b, m1, "nothere", &f2, &err), SCHEDRUN_EBACKEND);
  schedrun_error_clear(&err);
  assert_int_equal(b->ops->module_load(b, 0, path2.data, path2.len, &m2, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->module_function(b, m2, "grid3d", &f2, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->module_load(b, 0, path3.data, path3.len, &m3, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->module_function(b, m3, "countdown", &f3, &err), SCHEDRUN_OK);

  enum { N = 1000 };
  uint64_t x, y, y2, g, flag, logb;
  assert_int_equal(b->ops->mem_alloc(b, 0, N * 4, &x, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_alloc(b, 0, N * 4, &y, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_alloc(b, 0, N * 4, &y2, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_alloc(b, 0, 1001 * 4, &g, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_alloc(b, 0, 4, &flag, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_alloc(b, 0, 8 * 4, &logb, &err), SCHEDRUN_OK);
  float hx[N];
  for (int i = 0; i < N; i++) hx[i] = (float)i;
  assert_int_equal(b->ops->copy_htod(b, 0, x, hx, sizeof hx, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_zero(b, 0, g, 1001 * 4, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_zero(b, 0, logb, 8 * 4, &err), SCHEDRUN_OK);

  gpu_seq *s;
  assert_int_equal(b->ops->seq_create(b, 0, &s, &err), SCHEDRUN_OK);
  uint32_t idx[6];
  float one = 1.0f, a = 2.0f;
  int32_t n = N, five = 5;
  uint64_t fill_pat = 0, saxpy_args[4] = {0, x, y, 0};
  memcpy(&fill_pat, &one, 4);
  memcpy(&saxpy_args[0], &a, 4);
  memcpy(&saxpy_args[3], &n, 4);
  gpu_node nodes[6];
  memset(nodes, 0, sizeof nodes);
  nodes[0].kind = GN_FILL;
  nodes[0].u.fill.dst = y;
  nodes[0].u.fill.count = N;
  nodes[0].u.fill.pattern = fill_pat;
  nodes[0].u.fill.elem_size = 4;
  nodes[1].kind = GN_LAUNCH;
  nodes[1].u.launch.fn = f1;
  nodes[1].u.launch.grid[0] = 4, nodes[1].u.launch.grid[1] = 1, nodes[1].u.launch.grid[2] = 1;
  nodes[1].u.launch.block[0] = 256, nodes[1].u.launch.block[1] = 1, nodes[1].u.launch.block[2] = 1;
  nodes[1].u.launch.args = saxpy_args;
  nodes[1].u.launch.nargs = 4;
  nodes[2].kind = GN_COPY;
  nodes[2].u.copy.dst = y2;
  nodes[2].u.copy.src = y;
  nodes[2].u.copy.bytes = N * 4;
  /* grid3d over a 2x3x2 grid of 2x2x2 blocks = 96 threads */
  uint64_t gargs[3] = {g, 0, 0};
  int64_t base = 1000000;
  double scale = 2.0;
  memcpy(&gargs[1], &base, 8);
  memcpy(&gargs[2], &scale, 8);
  nodes[3].kind = GN_LAUNCH;
  nodes[3].u.launch.fn = f2;
  uint32_t gg[3] = {2, 3, 2}, bb[3] = {2, 2, 2};
  memcpy(nodes[3].u.launch.grid, gg, sizeof gg);
  memcpy(nodes[3].u.launch.block, bb, sizeof bb);
  nodes[3].u.launch.args = gargs;
  nodes[3].u.launch.nargs = 3;
  nodes[4].kind = GN_FILL;
  nodes[4].u.fill.dst = flag;
  nodes[4].u.fill.count = 1;
  nodes[4].u.fill.pattern = (uint64_t)(uint32_t)five;
  nodes[4].u.fill.elem_size = 4;
  nodes[5].kind = GN_WHILE;
  nodes[5].u.loop.flag = flag;
  nodes[5].u.loop.max_trips = 100;
  for (int i = 0; i < 6; i++) assert_int_equal(b->ops->seq_add(s, &nodes[i], &idx[i], &err), SCHEDRUN_OK);
  assert_non_null(nodes[5].u.loop.body);
  uint64_t cargs[2] = {flag, logb};
  gpu_node body = {.kind = GN_LAUNCH};
  body.u.launch.fn = f3;
  body.u.launch.grid[0] = body.u.launch.grid[1] = body.u.launch.grid[2] = 1;
  body.u.launch.block[0] = 32, body.u.launch.block[1] = body.u.launch.block[2] = 1;
  body.u.launch.args = cargs;
  body.u.launch.nargs = 2;
  uint32_t bidx;
  assert_int_equal(b->ops->seq_add(nodes[5].u.loop.body, &body, &bidx, &err), SCHEDRUN_OK);

  for (int rep = 0; rep < 3; rep++) {
    assert_int_equal(b->ops->seq_launch(s, 0, NULL, &err), SCHEDRUN_OK);
    float hy[N], hy2[N];
    assert_int_equal(b->ops->copy_dtoh(b, 0, hy, y, sizeof hy, &err), SCHEDRUN_OK);
    assert_int_equal(b->ops->copy_dtoh(b, 0, hy2, y2, sizeof hy2, &err), SCHEDRUN_OK);
    for (int i = 0; i < N; i++) {
      float want = (rep == 2 ? 3.0f : 2.0f) * (float)i + 1.0f;
      if (hy[i] != want || hy2[i] != want) fail_msg("rep %d: y[%d] = %g / %g, want %g", rep, i, hy[i], hy2[i], want);
    }
    uint32_t hg[1001];
    assert_int_equal(b->ops->copy_dtoh(b, 0, hg, g, sizeof hg, &err), SCHEDRUN_OK);
    for (int i = 0; i < 96; i++) assert_int_equal(hg[i], 1000000 + 2 * i);
    assert_int_equal(hg[1000], 96 * (rep + 1));
    int32_t hf;
    float hl[8];
    assert_int_equal(b->ops->copy_dtoh(b, 0, &hf, flag, 4, &err), SCHEDRUN_OK);
    assert_int_equal(b->ops->copy_dtoh(b, 0, hl, logb, sizeof hl, &err), SCHEDRUN_OK);
    assert_int_equal(hf, 0); /* five trips: 5,4,3,2,1 */
    for (int i = 1; i <= 5; i++) assert_true(hl[i] == 10.0f * (float)i);
    assert_true(hl[0] == 0.0f && hl[6] == 0.0f);
    if (rep == 1) {
      /* update the saxpy node in place: a = 3 */
      float a3 = 3.0f;
      memcpy(&saxpy_args[0], &a3, 4);
      assert_int_equal(b->ops->seq_update(s, idx[1], &nodes[1], &err), SCHEDRUN_OK);
    }
  }
  /* an update that changes a node's kind is refused */
  assert_int_equal(b->ops->seq_update(s, idx[0], &nodes[1], &err), SCHEDRUN_EINTERNAL);
  schedrun_error_clear(&err);
  b->ops->seq_destroy(s);
  uint64_t bufs[] = {x, y, y2, g, flag, logb};
  for (int i = 0; i < 6; i++) b->ops->mem_free(b, 0, bufs[i]);
  b->ops->module_unload(b, m1);
  b->ops->module_unload(b, m2);
  b->ops->module_unload(b, m3);
  free(path.data);
  free(path2.data);
  free(path3.data);
  /* an image that is not a shared object is refused */
  gpu_module *bad;
  assert_int_equal(b->ops->module_load(b, 0, "not an ELF", 10, &bad, &err), SCHEDRUN_EBACKEND);
  assert_non_null(strstr(err.message, "cannot load module"));
  schedrun_error_clear(&err);
  gpu_backend_close(&b);
  assert_null(b);
}

static const char lanes_src[] =
    "extern \"C\" __global__ void lanes(unsigned *out, float *f, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) { out[i] = (unsigned)i * 3u + 1u + blockIdx.y; f[i] = (sqrtf((float)i) + 0.5f) + f[i]; }\n"
    "}\n";

/* One launch of `lanes` over n elements, checked element by element (and
 * the elements past n untouched), rep times over the same buffers. */
static void run_lanes(gpu_backend *b, gpu_function fn, uint32_t grid, uint32_t block, int32_t n, uint32_t gy) {
  schedrun_error_t err = {0};
  size_t cap = (size_t)n + 9;
  uint64_t out, f;
  assert_int_equal(b->ops->mem_alloc(b, 0, cap * 4, &out, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_alloc(b, 0, cap * 4, &f, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_zero(b, 0, out, cap * 4, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->mem_zero(b, 0, f, cap * 4, &err), SCHEDRUN_OK);
  uint64_t args[3] = {out, f, 0};
  memcpy(&args[2], &n, 4);
  gpu_node node = {.kind = GN_LAUNCH};
  node.u.launch.fn = fn;
  node.u.launch.grid[0] = grid, node.u.launch.grid[1] = gy, node.u.launch.grid[2] = 1;
  node.u.launch.block[0] = block, node.u.launch.block[1] = node.u.launch.block[2] = 1;
  node.u.launch.args = args;
  node.u.launch.nargs = 3;
  gpu_seq *s;
  uint32_t idx;
  assert_int_equal(b->ops->seq_create(b, 0, &s, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->seq_add(s, &node, &idx, &err), SCHEDRUN_OK);
  uint32_t *ho = malloc(cap * 4);
  float *hf = malloc(cap * 4);
  assert_non_null(ho);
  assert_non_null(hf);
  for (int rep = 1; rep <= 2; rep++) {
    assert_int_equal(b->ops->seq_launch(s, 0, NULL, &err), SCHEDRUN_OK);
    assert_int_equal(b->ops->copy_dtoh(b, 0, ho, out, cap * 4, &err), SCHEDRUN_OK);
    assert_int_equal(b->ops->copy_dtoh(b, 0, hf, f, cap * 4, &err), SCHEDRUN_OK);
    for (size_t i = 0; i < cap; i++) {
      /* with gy rows of blocks, the last row's write wins: blockIdx.y = gy - 1 */
      uint32_t want = i < (size_t)n ? (uint32_t)i * 3u + 1u + (gy - 1) : 0;
      float fw = 0.0f;
      if (i < (size_t)n) { /* each row of blocks added sqrt(i) + 0.5 once per launch */
        for (int k = 0; k < rep * (int)gy; k++) fw = (sqrtf((float)i) + 0.5f) + fw;
      }
      if (ho[i] != want || hf[i] != fw)
        fail_msg("grid %u x %u, block %u, n %d, launch %d: element %zu is %u / %g, want %u / %g", grid, gy, block, n,
                 rep, i, ho[i], hf[i], want, fw);
    }
  }
  free(ho);
  free(hf);
  b->ops->seq_destroy(s);
  b->ops->mem_free(b, 0, out);
  b->ops->mem_free(b, 0, f);
}

static void test_grid_paths(void **st) {
  (void)st;
  /* a grid runs as vector code when it is within CUDA's block limits and at
   * most 2^20 blocks across, and as plain loops otherwise: both give every
   * thread its own indices, guarded tails included */
  gpu_backend *b;
  schedrun_error_t err = {0};
  assert_int_equal(gpu_host_open(1, tu_gpu_opts(), &b, &err), SCHEDRUN_OK);
  image img = {0};
  char *log = NULL;
  prog_type lp[] = {PT_PTR, PT_PTR, PT_I32};
  if (compile("lanes", lanes_src, lp, 3, &img, &log, &err)) fail_msg("%s\n%s", err.message, log);
  free(log);
  gpu_module *m;
  gpu_function fn;
  assert_int_equal(b->ops->module_load(b, 0, img.data, img.len, &m, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->module_function(b, m, "lanes", &fn, &err), SCHEDRUN_OK);
  run_lanes(b, fn, 43, 96, 4099, 1);                    /* a tail of 4099 - 42 * 96 = 67 lanes */
  run_lanes(b, fn, 5, 1024, 5 * 1024 - 1, 2);           /* the widest block, two rows of blocks */
  run_lanes(b, fn, 1, 7, 5, 1);                         /* fewer lanes than a vector */
  run_lanes(b, fn, (1u << 20) + 5, 1, (1 << 20) + 3, 1); /* more than 2^20 blocks: the plain loops */
  b->ops->module_unload(b, m);
  free(img.data);
  gpu_backend_close(&b);
}

static void test_refusals_and_errors(void **st) {
  (void)st;
  schedrun_error_t err = {0};
  image path = {0};
  char *log = NULL;
  prog_type p1[] = {PT_PTR};
  /* barriers and shared memory compile (the blocks run as cooperating
   * threads: test_blocks runs them); an extern __shared__ array outside a
   * function cannot be given each block's memory, and is refused naming it */
  const char *sync_src = "extern \"C\" __global__ void k(float *p) {\n  __shared__ float t[32];\n"
                         "  t[threadIdx.x] = 1;\n  __syncthreads();\n  p[threadIdx.x] = t[31 - threadIdx.x];\n}\n";
  log = NULL;
  if (compile("k", sync_src, p1, 1, &path, &log, &err) != SCHEDRUN_OK) fail_msg("%s\n%s", err.message, log ? log : "");
  free(path.data);
  path = (image){0};
  free(log);
  log = NULL;
  const char *extern_src = "// a comment\nextern __shared__ float t[];\n"
                           "extern \"C\" __global__ void k(float *p) {\n  p[0] = t[0];\n}\n";
  assert_int_equal(compile("k", extern_src, p1, 1, &path, &log, &err), SCHEDRUN_ECOMPILE);
  if (!strstr(err.message, "test.cu:2: kernel 'k' declares an extern __shared__ array outside a function"))
    fail_msg("%s", err.message);
  schedrun_error_clear(&err);
  free(log);
  /* a syntax error: the log names the line in the original file */
  const char *bad_src = "extern \"C\" __global__ void k(float *p) {\n  p[0] = 1\n}\n";
  log = NULL;
  assert_int_equal(compile("k", bad_src, p1, 1, &path, &log, &err), SCHEDRUN_ECOMPILE);
  assert_non_null(log);
  if (!strstr(log, "test.cu:2")) fail_msg("log: %s", log);
  schedrun_error_clear(&err);
  free(log);
  /* params that do not match the signature */
  prog_type wrong[] = {PT_F32, PT_PTR, PT_PTR, PT_I64};
  log = NULL;
  assert_int_equal(compile("saxpy", saxpy_src, wrong, 4, &path, &log, &err), SCHEDRUN_ECOMPILE);
  if (!strstr(log, "parameter 4 is declared i64 in params")) fail_msg("log: %s", log);
  schedrun_error_clear(&err);
  free(log);
  prog_type few[] = {PT_F32, PT_PTR};
  log = NULL;
  assert_int_equal(compile("saxpy", saxpy_src, few, 2, &path, &log, &err), SCHEDRUN_ECOMPILE);
  if (!strstr(log, "params lists 2 types")) fail_msg("log: %s", log);
  schedrun_error_clear(&err);
  free(log);
  /* a missing entry */
  log = NULL;
  prog_type none[1];
  gpu_compile_req req = {"ghost", "ghost", "extern \"C\" void other() {}\n", "g.cu", 1, none, 0, ""};
  assert_int_equal(gpu_host_target.compile(NULL, &req, tmpdir, &path.data, &path.len, &log, &err), SCHEDRUN_ECOMPILE);
  assert_null(path.data);
  if (!strstr(log, "ghost")) fail_msg("log: %s", log);
  schedrun_error_clear(&err);
  free(log);
}

static void test_identity_and_params(void **st) {
  (void)st;
  /* the recipe (part of every cache key) holds the options and the wrapper
   * the prelude and trampolines make around a kernel */
  char *recipe = NULL;
  schedrun_error_t rerr = {0};
  assert_int_equal(gpu_host_target.recipe(NULL, &recipe, &rerr), SCHEDRUN_OK);
  const char *parts[] = {"-std=c++17", "-O3", "-fno-trapping-math", "-fvisibility=hidden", "-fno-rtti", "threadIdx",
                         "__sched_launch_sample", "blockIdx = uint3{bx, by, bz}"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    if (!strstr(recipe, parts[i])) fail_msg("the recipe lacks '%s'", parts[i]);
#if defined(__x86_64__)
  /* the vector instructions this CPU has are part of the recipe, so that a
   * cache shared with another kind of machine keeps a build for each */
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  assert_int_equal(strstr(recipe, " -mavx2 ") != NULL, avx2);
  /* AVX-512's masked stores where the CPU has them, except under valgrind,
   * which cannot run them */
  const char *pre = getenv("LD_PRELOAD");
  bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                !(pre && strstr(pre, "vgpreload"));
  assert_int_equal(strstr(recipe, " -mavx512vl ") != NULL, avx512);
#endif
  free(recipe);
  char *id = NULL;
  schedrun_error_t err = {0};
  assert_int_equal(gpu_host_target.identity(NULL, &id, &err), SCHEDRUN_OK);
  assert_true(strlen(id) > 3);
  free(id);
  prog_type t[8];
  assert_int_equal(gpu_params_parse("f32,ptr,i64,u32", t, 8), 4);
  assert_int_equal(t[0], PT_F32);
  assert_int_equal(t[1], PT_PTR);
  assert_int_equal(t[2], PT_I64);
  assert_int_equal(t[3], PT_U32);
  assert_int_equal(gpu_params_parse("", t, 8), 0);
  assert_int_equal(gpu_params_parse("f32,,ptr", t, 8), -1);
  assert_int_equal(gpu_params_parse("f16", t, 8), -1);
  assert_int_equal(gpu_params_parse("i32,i32,i32", t, 2), -1);
  gpu_backend *b;
  assert_int_equal(gpu_backend_open("host:0", tu_gpu_opts(), &b, NULL, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(gpu_backend_open("tpu", tu_gpu_opts(), &b, NULL, &err), SCHEDRUN_EINVAL);
  schedrun_error_clear(&err);
  assert_int_equal(gpu_backend_open("host:3", tu_gpu_opts(), &b, NULL, &err), SCHEDRUN_OK);
  assert_int_equal(b->ops->device_count(b), 3);
  gpu_backend_close(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_launch_and_sequence),
      cmocka_unit_test(test_grid_paths),
      cmocka_unit_test(test_refusals_and_errors),
      cmocka_unit_test(test_identity_and_params),
  };
  return cmocka_run_group_tests(tests, setup, teardown_dir);
}
