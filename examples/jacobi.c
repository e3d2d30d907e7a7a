/*
 * A 2-D Jacobi heat stencil over a 256 x 256 grid split across two devices,
 * as a job graph of 100 steps. The grid's left column is held at row / 255
 * (0 at the top, 1 at the bottom) and its right column at 0, with rows of 0
 * above and below it; each step, every other point becomes the mean of its
 * four neighbours, so heat spreads from the left across the line where the
 * halves meet, and differs from one side of it to the other. Device 0 holds rows 0-127, device 1 rows 128-255, each
 * with one halo row from the other half. Every step is two jobs, one per
 * device: each takes its half from its own previous job (it stays on its
 * device) and its halo row from the other device's previous job (a hand-off
 * across devices, device to device where they allow it), updates the half,
 * and leaves the edge row the other half needs next.
 *
 *   cc jacobi.c $(pkg-config --cflags --libs schedrun) -o jacobi
 *   ./jacobi [DEVICES [EXPECTED.npy]]   (host:2 by default; cuda on two GPUs)
 *
 * With EXPECTED.npy (a 256 x 256 float32 grid, as
 * `python3 examples/workloads/data.py jacobi DIR` writes it with NumPy), the
 * result is checked against it element by element; the exit status says
 * whether it matched.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <schedrun.h>

#define ROWS 256
#define COLS 256
#define HALF (ROWS / 2)
#define STEPS 100

/* One half: rows 1..HALF of u are its own, row 0 (side 1) or row HALF + 1
 * (side 0) the halo, and the other the row of 0 beyond the grid's edge.
 * $job is the side. */
static const char half_yaml[] =
    "version: 1\nname: jacobi_half\n"
    "kernels:\n"
    "  frame:\n    params: [ptr, ptr, i32]\n    source: |\n"
    "      extern \"C\" __global__ void frame(float *u, const float *halo, int side) {\n"
    "        int c = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (c >= 256) return;\n"
    "        if (side == 0) { u[c] = 0.0f; u[129 * 256 + c] = halo[c]; }\n"
    "        else { u[c] = halo[c]; u[129 * 256 + c] = 0.0f; }\n"
    "      }\n"
    "  step:\n    params: [ptr, ptr, i32]\n    source: |\n"
    "      extern \"C\" __global__ void step(const float *u, float *v, int side) {\n"
    "        int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y + 1;\n"
    "        if (r > 128 || c >= 256) return;\n"
    "        float x = c == 0 ? (float)(side * 128 + r - 1) / 255.0f : 0.0f;\n"
    "        if (c > 0 && c < 255)\n"
    "          x = 0.25f * ((u[(r - 1) * 256 + c] + u[(r + 1) * 256 + c]) + (u[r * 256 + c - 1] + u[r * 256 + c + 1]));\n"
    "        v[r * 256 + c] = x;\n"
    "      }\n"
    "  edge:\n    params: [ptr, ptr, i32]\n    source: |\n"
    "      extern \"C\" __global__ void edge(const float *u, float *out, int side) {\n"
    "        int c = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "        if (c < 256) out[c] = u[(side == 0 ? 128 : 1) * 256 + c];\n"
    "      }\n"
    "buffers:\n"
    "  u: {type: f32, shape: [130, 256]}\n"
    "  v: {type: f32, shape: [130, 256]}\n"
    "  halo: {type: f32, count: 256}\n"
    "  edge_out: {type: f32, count: 256}\n"
    "program:\n"
    "  - launch: {kernel: frame, grid: 1, block: 256, args: [u, halo, $job]}\n"
    "  - launch: {kernel: step, grid: [16, 8], block: [16, 16], args: [u, v, $job]}\n"
    "  - copy: {from: v, to: u, count: 32768, from_offset: 256, to_offset: 256}\n"
    "  - launch: {kernel: edge, grid: 1, block: 256, args: [u, edge_out, $job]}\n";

/* A 256 x 256 float32 .npy file (as NumPy's np.save writes it), or NULL. */
static float *read_npy(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char head[10];
  char dict[512];
  float *v = NULL;
  if (fread(head, 1, 10, f) == 10 && !memcmp(head, "\x93NUMPY", 6) && head[6] == 1) {
    size_t len = head[8] | (size_t)head[9] << 8;
    if (len < sizeof dict && fread(dict, 1, len, f) == len) {
      dict[len] = '\0';
      if (strstr(dict, "'<f4'") && strstr(dict, "(256, 256)") && strstr(dict, "'fortran_order': False") &&
          (v = malloc(ROWS * COLS * sizeof *v)) && fread(v, sizeof *v, ROWS * COLS, f) != ROWS * COLS) {
        free(v);
        v = NULL;
      }
    }
  }
  fclose(f);
  return v;
}

int main(int argc, char **argv) {
  schedrun_options_t o;
  schedrun_options_init(&o);
  o.devices = argc > 1 ? argv[1] : "host:2";
  schedrun_t *s = NULL;
  schedrun_error_t err = {0};
  schedrun_program_t *p = NULL;
  schedrun_graph_t *g = NULL;
  float *grid = NULL, *want = NULL;
  int status = 1, node[STEPS][2];
  if (schedrun_open(&s, &o, &err) || schedrun_program_load_string(s, half_yaml, "jacobi_half", &p, &err) ||
      schedrun_graph_new(&g, &err))
    goto out;
  int devices = schedrun_device_count(s);
  for (int k = 0; k < STEPS; k++)
    for (int side = 0; side < 2; side++) {
      schedrun_job_options_t jo;
      schedrun_job_options_init(&jo);
      jo.device = devices > 1 ? side : 0;
      jo.job = side;
      jo.keep_outputs = k == STEPS - 1; /* the last step's halves come back */
      if (schedrun_graph_job(g, p, &jo, &node[k][side], &err)) goto out;
      if (k && (schedrun_graph_handoff(g, node[k - 1][side], "u", node[k][side], "u", &err) ||
                schedrun_graph_handoff(g, node[k - 1][1 - side], "edge_out", node[k][side], "halo", &err)))
        goto out;
    }
  size_t n = schedrun_graph_size(g);
  schedrun_job_t *ids = calloc(n, sizeof *ids);
  schedrun_job_result_t **rs = calloc(n, sizeof *rs);
  grid = malloc(ROWS * COLS * sizeof *grid);
  if (!ids || !rs || !grid || schedrun_graph_submit(s, g, ids, &err) ||
      schedrun_wait_many(s, n, ids, -1, rs, &err)) {
    free(ids);
    free(rs);
    goto out;
  }
  int ok = 1, peer = 0;
  for (size_t i = 0; i < n; i++) {
    const schedrun_job_info_t *in = schedrun_job_result_info(rs[i]);
    if (in->status != SCHEDRUN_OK) {
      fprintf(stderr, "jacobi: %s: %s\n", schedrun_graph_node_name(g, i), schedrun_job_result_error(rs[i]));
      ok = 0;
    }
    peer += (int)in->handoffs_peer;
  }
  for (int side = 0; ok && side < 2; side++) { /* rows 1..128 of each half are its part of the grid */
    const float *u = schedrun_job_result_output(rs[node[STEPS - 1][side]], "u", NULL);
    if (!u) ok = 0;
    else memcpy(grid + side * HALF * COLS, u + COLS, HALF * COLS * sizeof *grid);
  }
  if (ok) {
    printf("jacobi: %d steps of a %d x %d grid on %s, %d hand-offs from device to device; where the halves meet, "
           "column 1 holds %.6f and %.6f\n",
           STEPS, ROWS, COLS, devices > 1 ? "two devices" : "one device", peer, grid[(HALF - 1) * COLS + 1],
           grid[HALF * COLS + 1]);
    status = 0;
  }
  if (ok && argc > 2) {
    want = read_npy(argv[2]);
    if (!want) {
      fprintf(stderr, "jacobi: %s is not a 256 x 256 float32 .npy file\n", argv[2]);
      status = 1;
    }
    for (int i = 0; want && i < ROWS * COLS; i++)
      if (fabsf(grid[i] - want[i]) > 1e-5f + 1e-5f * fabsf(want[i])) {
        fprintf(stderr, "jacobi: grid[%d, %d] is %.7g, expected %.7g\n", i / COLS, i % COLS, grid[i], want[i]);
        status = 1;
        break;
      }
    if (want && status == 0) printf("jacobi: every element matches %s\n", argv[2]);
  }
  for (size_t i = 0; i < n; i++) schedrun_job_result_free(&rs[i]);
  free(ids);
  free(rs);
out:
  if (err.message) fprintf(stderr, "jacobi: %s\n", err.message);
  schedrun_error_clear(&err);
  free(grid);
  free(want);
  schedrun_graph_free(&g);
  schedrun_program_free(&p);
  schedrun_close(&s);
  return status;
}
