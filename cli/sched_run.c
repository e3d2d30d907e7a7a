/*
 * sched-run: runs a config (format: docs/config.md) and says how it went.
 *
 * Exit status: 0 every run verified; 1 a verification failed; 2 a bad config
 * or bad usage; 3 a kernel did not compile; 4 any other failure (device,
 * timeout); 128 + the signal when SIGINT, SIGTERM or SIGHUP stopped it.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "interrupt.h"
#include "notes.h"
#include "json_out.h"
#include "ranks.h"
#include "schedrun.h"
#include "stages.h"

enum { EXIT_VERIFIED = 0, EXIT_MISMATCH = 1, EXIT_USAGE = 2, EXIT_COMPILE = 3, EXIT_OTHER = 4 };

static void usage(FILE *f) {
  fprintf(f,
          "usage: sched-run [options] config.yaml   (- reads the config from standard input)\n"
          "\n"
          "Compiles the config's kernels (cached), records its program once per\n"
          "execution context, runs it `repeat` times and verifies `expect`. A\n"
          "stages config (a job graph of program configs) runs its graph `repeat`\n"
          "times, each stage after those it names, its inputs handed on.\n"
          "\n"
          "options:\n"
          "  --devices SPEC   override the config's devices: auto, host, host:N,\n"
          "                   cuda, cuda:I,J,..., all, or both kinds as cuda+host:N\n"
          "  --placement P    where jobs go: model (where each is expected to finish\n"
          "                   first, from execute times kept in the cache), least-loaded,\n"
          "                   or auto (default: model on devices of both kinds)\n"
          "  --repeat N       override the config's repeat\n"
          "  --jobs N         override the config's jobs\n"
          "  --no-cache       compile into a temporary cache, removed afterwards\n"
          "  --retune         time autotuned launches' candidates again instead of taking\n"
          "                   the choices the kernel cache holds, and replace them; start\n"
          "                   the performance models afresh\n"
          "  --check          compile and record every job without running any: exit 0,\n"
          "                   2 (config) or 3 (kernel) as a run would\n"
          "  -s, --stats      print per-device counters (always, with several devices)\n"
          "  --json           print the summary as one JSON object\n"
          "  --output DIR     write output buffers as NumPy .npy files: DIR/<buffer>.npy\n"
          "                   (run 0, job 0) and DIR/run<R>/job<J>/<buffer>.npy; the\n"
          "                   buffers marked output: true, else those with an expect\n"
          "  --output-all DIR the same with every buffer\n"
          "  --dot FILE       write the program as recorded as Graphviz DOT (- for\n"
          "                   standard output): a cluster per device and binding slot;\n"
          "                   for a stages config, its job graph\n"
          "  --trace FILE     write a Chrome trace event file (opens in Perfetto);\n"
          "                   - writes it to standard output\n"
          "  --rank-batch N   under mpirun or srun: jobs rank 0 sends another rank in one\n"
          "                   message, at most (default 256; 1 sends each job alone)\n"
          "  --timeout SECS   bound on the whole run and every job's deadline, from its\n"
          "                   submission (default 600); jobs still running then fail\n"
          "                   naming what they ran, and their devices are lost\n"
          "  --job-timeout MS each job's own deadline, in milliseconds from its\n"
          "                   submission (default: --timeout's); a job running then\n"
          "                   fails, and its device is lost unless its work ends\n"
          "                   within half a second\n"
          "  --compile-timeout SECS\n"
          "                   a kernel compile running longer is killed and fails (exit\n"
          "                   3; default 300)\n"
          "  -q, --quiet      print only errors\n"
          "  -h, --help       this text\n"
          "  -V, --version    the version\n"
          "\n"
          "exit status: 0 verified, 1 verification failed, 2 bad config or usage (an\n"
          "output that cannot be written included, found before anything runs),\n"
          "3 kernel compile error, 4 other failure; 130, 143, 129 when SIGINT, SIGTERM or\n"
          "SIGHUP stopped it (the summary, --json and --trace hold what finished;\n"
          "a second signal ends it at once)\n");
}

static int positive(const char *opt, const char *v, int *out) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n < 1 || n > 100000000) {
    fprintf(stderr, "sched-run: %s needs a positive integer, not '%s'\n", opt, v);
    return -1;
  }
  *out = (int)n;
  return 0;
}

const char *ranks_launcher_rank(void) {
  /* Open MPI's mpirun, PMIx (srun --mpi=pmix), PMI-1/2 (MPICH, srun --mpi=pmi2) */
  const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (getenv(names[i])) return getenv(names[i]);
  return NULL;
}

int ranks_refuse_singleton(const char *why) {
  const char *tasks = getenv("SLURM_NTASKS");
  if (!tasks || atoi(tasks) <= 1) return 0;
  fprintf(stderr, "sched-run: SLURM_NTASKS is %s, but %s; refusing to run the config alone\n", tasks, why);
  return EXIT_USAGE;
}

static double ms(uint64_t ns) { return (double)ns / 1e6; }

/* A file the run was asked to write could not be: says so; a run that
 * verified then fails with exit status 4. */
static int file_failed(const char *opt, schedrun_error_t *e, int status) {
  fprintf(stderr, "sched-run: %s%s%s\n", opt ? opt : "", opt ? ": " : "", e->message ? e->message : "failed");
  schedrun_error_clear(e);
  return status == EXIT_VERIFIED ? EXIT_OTHER : status;
}

#define MAX_CONFIG_BYTES (320ull << 20)

/* All of standard input as a string; -1 on a read error, or past the limit
 * of a config (then *out is set too, to tell the two apart). */
static int read_stdin(char **out) {
  size_t len = 0, cap = 1 << 16;
  char *buf = malloc(cap + 1);
  *out = NULL;
  if (!buf) return -1;
  for (;;) {
    if (len == cap) {
      if (cap > MAX_CONFIG_BYTES) {
        *out = buf;
        return -1;
      }
      char *b = realloc(buf, cap * 2 + 1);
      if (!b) break;
      buf = b;
      cap *= 2;
    }
    size_t n = fread(buf + len, 1, cap - len, stdin);
    len += n;
    if (n == 0) {
      if (ferror(stdin)) break;
      buf[len] = '\0';
      *out = buf;
      return 0;
    }
  }
  free(buf);
  return -1;
}

/* The progress line: on a terminal only, and only once a run has taken a
 * moment, so short runs and pipes see nothing extra. */
typedef struct progress {
  struct timespec start, running; /* the run's start; when jobs began to complete */
  uint32_t done_at_running;
  int shown;
} progress;

static double since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The phase, its counts and its rate: compiling k/n kernels, recording,
 * running d/t jobs (the rate and ETA from when jobs began to complete). */
static void show_progress(const char *phase, uint32_t done, uint32_t total, uint32_t kdone, uint32_t ktotal,
                          void *user) {
  progress *p = user;
  double t = since(&p->start);
  if (t < 0.5 && !p->shown) return;
  if (!strcmp(phase, "compiling")) {
    fprintf(stderr, "\r  compiling kernels: %u/%u  (%.1f s)                    ", kdone, ktotal, t);
  } else if (!strcmp(phase, "recording")) {
    fprintf(stderr, "\r  recording and starting %u jobs  (%.1f s)               ", total, t);
  } else {
    if (p->running.tv_sec == 0 && p->running.tv_nsec == 0) {
      clock_gettime(CLOCK_MONOTONIC, &p->running);
      p->done_at_running = done;
    }
    double rt = since(&p->running);
    double rate = rt > 0.05 ? (done - p->done_at_running) / rt : 0;
    double eta = rate > 0 ? (total - done) / rate : 0;
    fprintf(stderr, "\r  running jobs: %u/%u  %.0f jobs/s  ETA %.1f s        ", done, total, rate, eta);
  }
  fflush(stderr);
  p->shown = 1;
}

/* What each autotuned launch chose, and what its candidates took (--stats). */
static void print_tunes(schedrun_t *s) {
  schedrun_tune_info_t t;
  for (size_t i = 0; schedrun_tune_get(s, i, &t, NULL) == SCHEDRUN_OK; i++) {
    printf("  autotune: kernel '%s' at %s on %s%s%s: block [%u, %u, %u], grid [%u, %u, %u]%s%s, %s\n", t.kernel,
           t.where, t.device, t.key[0] ? ", " : "", t.key, t.block[0], t.block[1], t.block[2], t.grid[0], t.grid[1],
           t.grid[2], t.constants[0] ? ", " : "", t.constants, t.timed ? "timed now" : "from the kernel cache (not timed)");
    printf("            candidates:");
    for (unsigned c = 0; c < t.ncandidates; c++)
      printf("%s [%u, %u, %u]%s%s %.3f ms", c ? "," : "", t.candidates[c][0], t.candidates[c][1], t.candidates[c][2],
             t.candidate_constants[c][0] ? " " : "", t.candidate_constants[c], (double)t.candidate_ns[c] / 1e6);
    printf("\n");
  }
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"devices", required_argument, NULL, 'd'}, {"repeat", required_argument, NULL, 'r'},
      {"jobs", required_argument, NULL, 'j'},    {"no-cache", no_argument, NULL, 'n'},
      {"stats", no_argument, NULL, 's'},         {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},          {"version", no_argument, NULL, 'V'},
      {"json", no_argument, NULL, 'J'},          {"trace", required_argument, NULL, 'T'},
      {"timeout", required_argument, NULL, 't'}, {"check", no_argument, NULL, 'c'},
      {"output", required_argument, NULL, 'o'}, {"output-all", required_argument, NULL, 'O'},
      {"dot", required_argument, NULL, 'D'},    {"rank-batch", required_argument, NULL, 'B'},
      {"compile-timeout", required_argument, NULL, 'C'}, {"job-timeout", required_argument, NULL, 'M'},
      {"retune", no_argument, NULL, 'R'},        {"placement", required_argument, NULL, 'P'},
      {NULL, 0, NULL, 0}};
  const char *devices = NULL, *placement = NULL;
  const char *trace = NULL, *output = NULL, *dotfile = NULL;
  int output_all = 0;
  int rank_batch = 0;
  int repeat = 0, jobs = 0, no_cache = 0, stats = 0, quiet = 0, json = 0, timeout_s = 600, check = 0, retune = 0, c;
  int compile_timeout_s = 0, job_timeout_ms = 0;
  opterr = 0;
  int handed = ranks_handover(argv); /* started by an MPI launcher: sched-run-mpi takes over */
  if (handed) return handed;
  ranks_silence_others(); /* under MPI only rank 0 talks */
  /* before any thread starts: they all inherit the blocked signals */
  if (interrupt_start() != 0) {
    fprintf(stderr, "sched-run: cannot set up signal handling\n");
    return EXIT_OTHER;
  }
  while ((c = getopt_long(argc, argv, ":hqsV", longopts, NULL)) != -1) {
    switch (c) {
    case 'd': devices = optarg; break;
    case 'r': if (positive("--repeat", optarg, &repeat)) return EXIT_USAGE; break;
    case 'j': if (positive("--jobs", optarg, &jobs)) return EXIT_USAGE; break;
    case 'n': no_cache = 1; break;
    case 'R': retune = 1; break;
    case 'P': placement = optarg; break;
    case 's': stats = 1; break;
    case 'q': quiet = 1; break;
    case 'J': json = 1; break;
    case 'c': check = 1; break;
    case 'B':
      if (positive("--rank-batch", optarg, &rank_batch)) return EXIT_USAGE;
      if (rank_batch > 65536) {
        fprintf(stderr, "sched-run: --rank-batch is at most 65536 jobs\n");
        return EXIT_USAGE;
      }
      break;
    case 'o': output = optarg; break;
    case 'D': dotfile = optarg; break;
    case 'O':
      output = optarg;
      output_all = 1;
      break;
    case 'T': trace = optarg; break;
    case 'C':
      if (positive("--compile-timeout", optarg, &compile_timeout_s)) return EXIT_USAGE;
      if (compile_timeout_s > INT_MAX / 1000) {
        fprintf(stderr, "sched-run: --compile-timeout is at most %d seconds\n", INT_MAX / 1000);
        return EXIT_USAGE;
      }
      break;
    case 'M':
      if (positive("--job-timeout", optarg, &job_timeout_ms)) return EXIT_USAGE;
      break;
    case 't':
      if (positive("--timeout", optarg, &timeout_s)) return EXIT_USAGE;
      if (timeout_s > INT_MAX / 1000) {
        fprintf(stderr, "sched-run: --timeout is at most %d seconds\n", INT_MAX / 1000);
        return EXIT_USAGE;
      }
      break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("sched-run %s\n", schedrun_version()); return 0;
    case ':': /* getopt has put what was given into optind - 1 */
      fprintf(stderr, "sched-run: option '%s' requires an argument\n", argv[optind - 1]);
      return EXIT_USAGE;
    default: {
      const char *given = argv[optind - 1];
      if (strncmp(given, "--", 2) == 0) {
        const char *eq = strchr(given, '=');
        if (eq && optopt) /* a known option that takes no argument was given one */
          fprintf(stderr, "sched-run: option '%.*s' takes no argument\n", (int)(eq - given), given);
        else
          fprintf(stderr, "sched-run: unknown option '%s'\n", given);
      } else {
        fprintf(stderr, "sched-run: unknown option '-%c'%s%s%s\n", optopt ? optopt : '?',
                strlen(given) > 2 ? " (in '" : "", strlen(given) > 2 ? given : "", strlen(given) > 2 ? "')" : "");
      }
      usage(stderr);
      return EXIT_USAGE;
    }
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "sched-run: %s\n", optind >= argc ? "no config file given" : "give one config file");
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *path = argv[optind];
  /* every file the run will write can be written: found out now, not after
   * every job has run */
  const struct {
    const char *opt, *path;
    int dir;
  } outs[] = {{output_all ? "--output-all" : "--output", output, 1}, {"--dot", dotfile, 0}, {"--trace", trace, 0}};
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
    schedrun_error_t oerr = {0};
    if (!outs[i].path || schedrun_check_output(outs[i].path, outs[i].dir, &oerr) == SCHEDRUN_OK) continue;
    fprintf(stderr, "sched-run: %s: %s; nothing was run\n", outs[i].opt, oerr.message);
    if (json) {
      cli_outcome oc = {EXIT_USAGE, "usage-error", path, NULL, oerr.message, NULL, NULL, NULL, NULL};
      json_print_outcome(&oc);
    }
    schedrun_error_clear(&oerr);
    return EXIT_USAGE;
  }
  if (interrupt_bound(timeout_s) != 0) {
    fprintf(stderr, "sched-run: cannot start the --timeout thread\n");
    return EXIT_OTHER;
  }
  interrupt_phase("loading the config", 0);
  if (strcmp(path, "-") != 0 && schedrun_config_is_graph(path, NULL) == 1) {
    /* a stages config: a job graph, run in this process */
    const char *refused = jobs ? "--jobs" : check ? "--check" : output ? (output_all ? "--output-all" : "--output")
                        : trace ? "--trace" : rank_batch ? "--rank-batch" : job_timeout_ms ? "--job-timeout" : NULL;
    if (refused) {
      fprintf(stderr, "sched-run: %s is for program configs, not for a stages config (%s)\n", refused, path);
      return EXIT_USAGE;
    }
    if (ranks_launcher_rank()) {
      fprintf(stderr, "sched-run: %s is a stages config: it runs in one process, not under an MPI launcher\n", path);
      return EXIT_USAGE;
    }
    stages_opts so = {devices, dotfile, repeat, no_cache, json, quiet, timeout_s, compile_timeout_s, retune};
    return stages_run(path, &so);
  }
  cli_ranks ranks;
  int rst = ranks_start(&ranks);
  if (rst != 0) return rst;
  if (ranks.active && ranks.rank != 0) return ranks_serve(&ranks);
  ranks.batch = rank_batch;

  schedrun_error_t err = {0};
  schedrun_program_t *prog = NULL;
  int load_rc;
  if (strcmp(path, "-") == 0) {
    /* the config from standard input; its kernel files are relative to here */
    char *text = NULL;
    if (read_stdin(&text) != 0) {
      fprintf(stderr, "sched-run: cannot read the config from standard input: %s\n",
              text ? "it is larger than 320 MiB" : "read error");
      free(text);
      return EXIT_USAGE;
    }
    load_rc = schedrun_program_load_string(NULL, text, "<stdin>", &prog, &err);
    free(text);
  } else {
    load_rc = schedrun_program_load_file(NULL, path, &prog, &err);
  }
  if (load_rc != SCHEDRUN_OK) {
    fprintf(stderr, "%s\n", err.message);
    int st = load_rc == SCHEDRUN_ENOMEM ? EXIT_OTHER : EXIT_USAGE; /* out of memory is not the config's fault */
    if (json) {
      cli_outcome oc = {st, st == EXIT_USAGE ? "config-error" : "failed", path, NULL, err.message, NULL, NULL, NULL, NULL};
      json_print_outcome(&oc);
    }
    schedrun_error_clear(&err);
    ranks_share(&ranks, st, NULL, 0, 0);
    schedrun_t *none = NULL;
    return ranks_end(&ranks, &none, st);
  }
  ranks_share(&ranks, 0, devices ? devices : schedrun_program_devices(prog), no_cache, compile_timeout_s * 1000);
  schedrun_options_t opts;
  schedrun_options_init(&opts);
  opts.devices = devices ? devices : schedrun_program_devices(prog);
  opts.no_disk_cache = no_cache;
  opts.retune = retune;
  opts.placement = placement;
  opts.compile_timeout_ms = compile_timeout_s * 1000;
  opts.time_nodes = trace != NULL; /* each node's time in the trace, on every backend */
  schedrun_t *s = NULL;
  int rc = ranks_open(&ranks, &opts, &s, &err);
  if (rc != SCHEDRUN_OK) {
    fprintf(stderr, "sched-run: %s\n", err.message);
    int st = rc == SCHEDRUN_EINVAL ? EXIT_USAGE : EXIT_OTHER;
    if (json) {
      cli_outcome oc = {st, st == EXIT_USAGE ? "usage-error" : "failed", path, NULL, err.message, NULL, prog, NULL, NULL};
      json_print_outcome(&oc);
    }
    schedrun_error_clear(&err);
    schedrun_program_free(&prog);
    return ranks_end(&ranks, &s, st);
  }
  interrupt_watch(s);
  note_opened(s, no_cache, quiet || json);
  schedrun_run_options_t ro;
  schedrun_run_options_init(&ro);
  ro.repeat = repeat;
  ro.jobs = jobs;
  ro.timeout_ms = interrupt_left_ms(); /* --timeout counts from the start: loading took some */
  ro.job_timeout_ms = job_timeout_ms;
  ro.check_only = check;
  ro.keep_outputs = output != NULL;
  progress pg = {{0, 0}, {0, 0}, 0, 0};
  clock_gettime(CLOCK_MONOTONIC, &pg.start);
  if (!quiet && !json && isatty(STDERR_FILENO)) {
    ro.progress_phase = show_progress;
    ro.progress_user = &pg;
  }
  schedrun_report_t *rep = NULL;
  rc = ranks_run(&ranks, s, prog, &ro, &rep, &err);
  if (pg.shown) fprintf(stderr, "\r%70s\r", "");
  const schedrun_summary_t *sum = schedrun_report_summary(rep);
  int status = EXIT_VERIFIED;
  int sig = interrupt_signal();
  if (sig) {
    fprintf(stderr, "sched-run: interrupted by %s: %u of %u jobs finished and verified\n", interrupt_name(sig),
            sum ? sum->verified : 0, sum ? sum->jobs : 0);
    status = 128 + sig;
  } else if (rc == SCHEDRUN_ECOMPILE) {
    fprintf(stderr, "sched-run: %s: kernel compile error\n%s\n", path, err.message);
    status = EXIT_COMPILE;
  } else if (rc == SCHEDRUN_EVERIFY) {
    size_t n = schedrun_report_failure_count(rep);
    for (size_t i = 0; i < n && i < 20; i++) fprintf(stderr, "sched-run: mismatch: %s\n", schedrun_report_failure(rep, i));
    if (n > 20) fprintf(stderr, "sched-run: ... %zu mismatches in all\n", n);
    status = EXIT_MISMATCH;
  } else if (rc == SCHEDRUN_ECONFIG || rc == SCHEDRUN_EINVAL) {
    /* a config, or options, asking for what cannot run */
    fprintf(stderr, "%s%s\n", rc == SCHEDRUN_EINVAL ? "sched-run: " : "", err.message);
    status = EXIT_USAGE;
  } else if (rc != SCHEDRUN_OK) {
    fprintf(stderr, "sched-run: %s: %s\n", schedrun_strerror(rc), err.message ? err.message : "");
    status = EXIT_OTHER;
  }
  schedrun_error_t ferr = {0};
  interrupt_phase("writing outputs", 1);
  if (output && rep && !check && schedrun_report_write_npy(rep, output, output_all, &ferr) != SCHEDRUN_OK)
    status = file_failed("--output", &ferr, status);
  if (dotfile && rep && schedrun_program_write_dot(prog, rep, dotfile, &ferr) != SCHEDRUN_OK)
    status = file_failed("--dot", &ferr, status);
  if (trace && rep && schedrun_report_write_trace(rep, trace, &ferr) != SCHEDRUN_OK)
    status = file_failed(NULL, &ferr, status);
  if (json) {
    const char *what = sig                         ? "interrupted"
                       : status == EXIT_VERIFIED   ? (check ? "checked" : "verified")
                       : status == EXIT_MISMATCH   ? "not-verified"
                       : status == EXIT_COMPILE    ? "compile-error"
                       : status == EXIT_USAGE      ? (rc == SCHEDRUN_ECONFIG ? "config-error" : "usage-error")
                                                   : "failed";
    cli_outcome oc = {status, what, path, sig ? interrupt_name(sig) : NULL,
                      status == EXIT_VERIFIED || status == EXIT_MISMATCH || sig ? NULL : err.message,
                      s, prog, rep, ranks_json(&ranks, rep)};
    if (json_print_outcome(&oc) != 0 && status == EXIT_VERIFIED) status = EXIT_OTHER;
  } else if (sum && !quiet && check && status == EXIT_VERIFIED) {
    printf("%s: checked: %u jobs compiled and recorded on %d device%s (%s%s); none was run\n",
           schedrun_program_name(prog), sum->verified, sum->ndevices, sum->ndevices == 1 ? "" : "s",
           sum->devices[0].name, sum->ndevices > 1 ? ", ..." : "");
  } else if (sum && !quiet && status != EXIT_COMPILE) {
    printf("%s: %s on %d device%s (%s%s)\n", schedrun_program_name(prog),
           sig ? "INTERRUPTED" : check ? "check FAILED" : status == EXIT_VERIFIED ? "verified" : "NOT verified",
           sum->ndevices,
           sum->ndevices == 1 ? "" : "s", sum->devices[0].name, sum->ndevices > 1 ? ", ..." : "");
    if (schedrun_device_fallback(s)) printf("  host devices: %s\n", schedrun_device_fallback(s));
    printf("  runs %u, %u jobs in all: %u verified, %u failed\n", sum->runs, sum->jobs, sum->verified, sum->failed);
    printf("  time: wall %.1f ms; summed over jobs: compile %.1f ms, record %.3f ms, execute %.3f ms\n",
           ms(sum->wall_ns), ms(sum->compile_ns), ms(sum->record_ns), ms(sum->execute_ns));
    printf("  kernel cache: %llu hits, %llu misses\n", (unsigned long long)sum->cache_hits,
           (unsigned long long)sum->cache_misses);
    printf("  recorded nodes: %llu created, %llu updated, %llu reused\n",
           (unsigned long long)sum->nodes_created, (unsigned long long)sum->nodes_updated,
           (unsigned long long)sum->nodes_reused);
    schedrun_stats_t st;
    bool have_stats = schedrun_get_stats(s, &st, NULL) == SCHEDRUN_OK;
    if (stats || sum->ndevices > 1)
      for (int d = 0; d < sum->ndevices; d++) {
        const schedrun_device_stats_t *ds = &sum->devices[d];
        printf("  %-8s jobs %llu, nodes %llu created / %llu updated / %llu reused, busy %.3f ms, %llu launches\n",
               ds->name, (unsigned long long)ds->jobs, (unsigned long long)ds->nodes_created,
               (unsigned long long)ds->nodes_updated, (unsigned long long)ds->nodes_reused, ms(ds->busy_ns),
               (unsigned long long)ds->launches);
        printf("  %-8s bytes: %llu in, %llu out, %llu from its peers\n", "", (unsigned long long)ds->bytes_in,
               (unsigned long long)ds->bytes_out, (unsigned long long)ds->bytes_peer);
        if (ds->loops[0])
          printf("  %-8s while loops run %s; %llu host-driven trips\n", "", ds->loops,
                 (unsigned long long)ds->loop_syncs);
        if (ds->batches_beside)
          printf("  %-8s %llu batches had their inputs copied in while the batch before ran\n", "",
                 (unsigned long long)ds->batches_beside);
        if (have_stats && st.placement[d].by_model)
          printf("  %-8s placed by model: %llu of %llu jobs; model error %.1f%% over %llu predicted\n", "",
                 (unsigned long long)st.placement[d].by_model, (unsigned long long)st.placement[d].placed,
                 100 * st.placement[d].model_error, (unsigned long long)st.placement[d].predicted);
      }
    if (stats) print_tunes(s);
    ranks_print(&ranks, stdout);
  }
  schedrun_error_clear(&err);
  schedrun_report_free(&rep);
  schedrun_program_free(&prog);
  interrupt_watch(NULL);                /* waits for a shutdown the signal thread started */
  return ranks_end(&ranks, &s, status); /* closes: removes the --no-cache directory */
}
