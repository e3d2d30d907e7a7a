/*
 * The NVRTC compile process: one kernel compiled in a process of its own,
 * so that a compile can be stopped (the process group killed) at a
 * shutdown, a deadline or the compile timeout, which a call into NVRTC in
 * the library's process could not be. The library carries this file as
 * text and builds it once into its cache (gpu/cuda/nvrtc_target.c); it
 * needs nothing but the C library and libdl.
 *
 *   nvrtc-worker LIBNVRTC BUILTINS SOURCE NAME KIND OUT LOG [OPTION...]
 *
 * LIBNVRTC is the NVRTC the library loaded (its path), BUILTINS the
 * libnvrtc-builtins beside it ("" when none: then it is found by name),
 * KIND "cubin" or "ptx". Exit status: 0, OUT holds the image (PTX with its
 * NUL); 1, NVRTC refused the source (LOG holds its log); 3, LIBNVRTC cannot
 * be loaded here (the library then compiles in its own process); 2,
 * anything else.
 * Either way what went wrong is one line on standard output.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int res;
typedef struct prog *prog;

static struct {
  const char *(*GetErrorString)(res);
  res (*CreateProgram)(prog *, const char *, const char *, int, const char *const *, const char *const *);
  res (*DestroyProgram)(prog *);
  res (*CompileProgram)(prog, int, const char *const *);
  res (*GetProgramLogSize)(prog, size_t *);
  res (*GetProgramLog)(prog, char *);
  res (*GetCUBINSize)(prog, size_t *);
  res (*GetCUBIN)(prog, char *);
  res (*GetPTXSize)(prog, size_t *);
  res (*GetPTX)(prog, char *);
} nv;

static char *read_all(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  size_t n;
  while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap) {
      char *bigger = realloc(buf, 2 * cap + 1);
      if (!bigger) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[len] = '\0';
  return buf;
}

static int write_all(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(data, 1, len, f) == len;
  return fclose(f) == 0 && ok ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc < 8) {
    printf("usage: %s LIBNVRTC BUILTINS SOURCE NAME KIND OUT LOG [OPTION...]\n", argv[0]);
    return 2;
  }
  const char *lib = argv[1], *builtins = argv[2], *source = argv[3], *name = argv[4], *kind = argv[5];
  const char *out = argv[6], *log = argv[7];
  int ptx = strcmp(kind, "ptx") == 0;
  /* NVRTC opens its builtins by name: the one beside it, loaded first, is that name */
  if (builtins[0]) dlopen(builtins, RTLD_NOW | RTLD_GLOBAL);
  void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    printf("cannot load %s: %s\n", lib, dlerror());
    return 3;
  }
  struct {
    void **slot;
    const char *sym;
  } syms[] = {
      {(void **)&nv.GetErrorString, "nvrtcGetErrorString"}, {(void **)&nv.CreateProgram, "nvrtcCreateProgram"},
      {(void **)&nv.DestroyProgram, "nvrtcDestroyProgram"}, {(void **)&nv.CompileProgram, "nvrtcCompileProgram"},
      {(void **)&nv.GetProgramLogSize, "nvrtcGetProgramLogSize"}, {(void **)&nv.GetProgramLog, "nvrtcGetProgramLog"},
      {(void **)&nv.GetCUBINSize, "nvrtcGetCUBINSize"}, {(void **)&nv.GetCUBIN, "nvrtcGetCUBIN"},
      {(void **)&nv.GetPTXSize, "nvrtcGetPTXSize"}, {(void **)&nv.GetPTX, "nvrtcGetPTX"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
    if (!(*syms[i].slot = dlsym(dl, syms[i].sym))) {
      printf("%s lacks %s\n", lib, syms[i].sym);
      return 3;
    }
  char *src = read_all(source);
  if (!src) {
    printf("cannot read %s\n", source);
    return 2;
  }
  prog p = NULL;
  res r = nv.CreateProgram(&p, src, name, 0, NULL, NULL);
  free(src);
  if (r != 0) {
    printf("nvrtcCreateProgram: %s\n", nv.GetErrorString(r));
    return 2;
  }
  r = nv.CompileProgram(p, argc - 8, (const char *const *)argv + 8);
  size_t n = 0;
  if (nv.GetProgramLogSize(p, &n) == 0 && n > 1) {
    char *text = malloc(n);
    if (text && nv.GetProgramLog(p, text) == 0) write_all(log, text, strlen(text));
    free(text);
  }
  if (r != 0) {
    printf("%s\n", nv.GetErrorString(r));
    nv.DestroyProgram(&p);
    return 1;
  }
  n = 0;
  char *image = NULL;
  r = ptx ? nv.GetPTXSize(p, &n) : nv.GetCUBINSize(p, &n);
  if (r == 0 && n > 0 && (image = malloc(n)) != NULL) r = ptx ? nv.GetPTX(p, image) : nv.GetCUBIN(p, image);
  int status = 0;
  if (r != 0 || n == 0 || !image) {
    printf("NVRTC produced no %s: %s\n", kind, r ? nv.GetErrorString(r) : "empty");
    status = 2;
  } else if (write_all(out, image, n) != 0) {
    printf("cannot write %s\n", out);
    status = 2;
  }
  free(image);
  nv.DestroyProgram(&p);
  return status;
}
