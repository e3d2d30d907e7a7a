/*
 * The math functions kernels call on the host backend and the driver double
 * (declared by the prelude, gpu/host/host_prelude.h, without <cmath>): one
 * kernel computes each of them for 64 inputs, in float and in double, with
 * CUDA's float overloads (sqrt(float) is sqrtf) and the classification
 * functions, in code NVRTC accepts too (the double compiles it with the real
 * NVRTC first: it has no headers, so no INFINITY, and sqrt(int) is
 * ambiguous there); every result is
 * compared with the same function of the C library called here, which is
 * what the kernel's module calls too. SCHEDRUN_MATH_DEVICES picks the
 * devices (default host:1; "cuda" on the driver double).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { N = 64, NF = 16, ND = 12 };

static const char math_yaml[] =
    "version: 1\nname: math\n"
    "kernels:\n  m:\n    params: [ptr, ptr]\n    source: |\n"
    "      extern \"C\" __global__ void m(float *f, double *d) {\n"
    "        int i = threadIdx.x;\n"
    "        float x = 0.05f * (float)(i + 1);\n"
    "        double y = 0.05 * (double)(i + 1);\n"
    "        float *o = f + 16 * i;\n"
    "        o[0] = sqrt(x); o[1] = sinf(x); o[2] = cos(x); o[3] = pow(x, 1.5f); o[4] = exp(x);\n"
    "        o[5] = log(x); o[6] = tanh(x); o[7] = fmaxf(x, 1.0f); o[8] = fabs(-x); o[9] = floor(10.0f * x);\n"
    "        o[10] = atan2(x, 0.5f); o[11] = erf(x); o[12] = fmaf(x, x, 1.0f);\n"
    "        float s, c; sincosf(x, &s, &c); o[13] = s + c;\n"
    "        o[14] = rsqrtf(x); o[15] = copysignf(x, -1.0f);\n"
    "        double *p = d + 12 * i;\n"
    "        p[0] = sqrt(y); p[1] = pow(y, 2.5); p[2] = exp2(y); p[3] = log10(y); p[4] = cbrt(y);\n"
    "        p[5] = sqrt((double)(i + 1)); p[6] = lround(100.0 * y); p[7] = hypot(y, 1.0); p[8] = fmod(10.0 * y, 0.7);\n"
    "        p[9] = (isnan(y) ? 1 : 0) + (isinf(y / 0.0) ? 2 : 0) + (isfinite(y) ? 4 : 0) + (signbit(-y) ? 8 : 0);\n"
    "        p[10] = abs(-(i + 1)) + max(i, 3) + min(i, 3);\n"
    "        p[11] = ldexp(y, 3);\n"
    "      }\n"
    "buffers:\n  f: {type: f32, count: 1024}\n  d: {type: f64, count: 768}\n"
    "program:\n  - launch: {kernel: m, grid: 1, block: 64, args: [f, d]}\n";

static void expected(int i, float *o, double *p) {
  float x = 0.05f * (float)(i + 1);
  double y = 0.05 * (double)(i + 1);
  float s, c;
  sincosf(x, &s, &c);
  const float f[NF] = {sqrtf(x),      sinf(x),        cosf(x),        powf(x, 1.5f),         expf(x),
                       logf(x),       tanhf(x),       fmaxf(x, 1.0f), fabsf(-x),             floorf(10.0f * x),
                       atan2f(x, .5f), erff(x),       fmaf(x, x, 1),  s + c,                 1.0f / sqrtf(x),
                       copysignf(x, -1.0f)};
  const double d[ND] = {sqrt(y),
                        pow(y, 2.5),
                        exp2(y),
                        log10(y),
                        cbrt(y),
                        sqrt((double)(i + 1)),
                        (double)lround(100.0 * y),
                        hypot(y, 1.0),
                        fmod(10.0 * y, 0.7),
                        2 + 4 + 8,
                        (double)((i + 1) + (i > 3 ? i : 3) + (i < 3 ? i : 3)),
                        ldexp(y, 3)};
  memcpy(o, f, sizeof f);
  memcpy(p, d, sizeof d);
}

static void test_math_functions(void **st) {
  (void)st;
  schedrun_t *s = tu_open_devices("SCHEDRUN_MATH_DEVICES", "host:1", 0, NULL);
  schedrun_program_t *p = tu_load(s, math_yaml, "math.yaml");
  for (int dev = 0; dev < schedrun_device_count(s); dev++) {
    schedrun_job_result_t *r = tu_job_on(s, p, dev, 0);
    const float *f = schedrun_job_result_output(r, "f", NULL);
    const double *d = schedrun_job_result_output(r, "d", NULL);
    assert_non_null(f);
    assert_non_null(d);
    for (int i = 0; i < N; i++) {
      float wf[NF];
      double wd[ND];
      expected(i, wf, wd);
      for (int k = 0; k < NF; k++) /* the kernel divides for rsqrtf as the C here does; both call libm */
        if (f[16 * i + k] != wf[k] && fabsf(f[16 * i + k] - wf[k]) > 1e-6f * fabsf(wf[k]))
          fail_msg("device %d, input %d: float result %d is %.9g, wanted %.9g", dev, i, k, f[16 * i + k], wf[k]);
      for (int k = 0; k < ND; k++)
        if (d[12 * i + k] != wd[k] && fabs(d[12 * i + k] - wd[k]) > 1e-14 * fabs(wd[k]))
          fail_msg("device %d, input %d: double result %d is %.17g, wanted %.17g", dev, i, k, d[12 * i + k], wd[k]);
    }
    schedrun_job_result_free(&r);
  }
  schedrun_program_free(&p);
  assert_int_equal(schedrun_close(&s), SCHEDRUN_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_math_functions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
