#!/usr/bin/env bash
# Everything that needs a GPU, in one short run (about 5 minutes on one GPU;
# no network, no package installs). Every section runs even after another
# failed, and says PASS, FAIL or SKIP (a tool that is not installed) on a line
# of its own:
#   build     sched-run, the GPU tests, gpu_probe and cuda_bench only (-j all cores)
#   preflight nvidia-smi's driver and GPUs, and gpu_probe's: the driver's CUDA
#             version, each GPU's compute capability, NVRTC, libcudadevrt
#   configs   every shipped config on the GPU against the host, element by element
#   loops     while loops as conditional graph nodes (a FAIL where the driver
#             has them, 12.3 on, and they ran on the host) and driven from the
#             host: both verified
#   updates   jobs that change nodes update them in place, as many as on the
#             host (no rebuild), a while loop's body included, on this driver
#   devices   two logical devices on one GPU (cuda:0,0): the demo, and a job
#             graph whose stages hand buffers on
#   fault     a kernel writing to a wild address: the job fails naming
#             CUDA_ERROR_ILLEGAL_ADDRESS, the device is lost
#   deadline  a kernel that never ends, as one launch, in a conditional loop
#             and in a host-driven one, each in its own process: the job
#             fails at its deadline (200 ms), and the run ends within 3 s
#   batches   jobs that share a recording, sent in batches (pinned staging,
#             one wait per batch): every job's distinct result verified
#   overlap   two buffer sets of 12 MiB jobs: copies beside the other set's
#             kernels (batches_beside), every job verified
#   autotune  configs/autotune.yaml: the candidates timed on the GPU, the
#             fastest chosen and kept; a second run takes it untimed
#   mixed     bench/configs/placement.yaml on the GPU and a host device in one
#             scheduler (cuda:0+host:1), placed by model: verified, and the
#             jobs each device took, with the model's error
#   trace     --trace: the first jobs run node by node, timed with events; the
#             trace has their node spans
#   context   the application's current context is kept by every call
#   memcheck  compute-sanitizer memcheck on two configs (SKIP: not installed)
#   demo      the multi-device demo on every GPU
#   bench     the GPU benchmark
# Then a summary: OUT/summary.json (or ./gpu-summary.json), the logs beside
# it in gpu-logs/, kept. Exit 0: every section passed (or skipped); 1: one
# failed; 77: no GPU here (nvidia-smi sees none).
#
# Usage: tests/gpu/run.sh [--no-build] [BUILD_DIR]
#   GPU_SECTIONS="loops updates"  runs only those sections (and preflight)
# With SCHEDRUN_CUDA_LIBRARY naming the driver double (tests/cuda_double/)
# and a stand-in nvidia-smi, it runs on a machine without a GPU: the double
# is told which kernels fault and which never end (tests/gpu/run_on_double.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
build_it=1
if [ "${1:-}" = "--no-build" ]; then
  build_it=0
  shift
fi
build=${1:-build}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
if [ -n "${OUT:-}" ]; then
  summary=$OUT/summary.json
  logs=$OUT/gpu-logs
else
  summary=$PWD/gpu-summary.json
  logs=$PWD/gpu-logs
fi
mkdir -p "$logs"
run=$build/sched-run
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SCHEDRUN_CACHE_DIR=${SCHEDRUN_CACHE_DIR:-$work/cache}
# what the GPU tests read (as ctest would give them)
export SCHEDRUN_CONFIGS=$PWD/configs SCHEDRUN_SOURCE_DIR=$PWD SCHEDRUN_RUN=$run
double=0
case "${SCHEDRUN_CUDA_LIBRARY:-}" in *cuda-double*) double=1 ;; esac

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" = 0 ]; then
  echo "SKIP: no GPU here (nvidia-smi sees none); nothing was checked"
  exit 77
fi

names=() results=() details=()
section() {
  local name=$1
  shift
  if [ -n "${GPU_SECTIONS:-}" ] && [ "$name" != preflight ] && ! [[ " $GPU_SECTIONS " == *" $name "* ]]; then
    return
  fi
  echo "== $name"
  detail=""
  "$@"
  local rc=$? result=FAIL
  [ $rc = 0 ] && result=PASS
  [ $rc = 77 ] && result=SKIP
  names+=("$name")
  results+=("$result")
  details+=("$detail")
  echo "$result $name: $detail"
}

# jget FILE EXPR: EXPR over the JSON object j in FILE (Python), or nothing
jget() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null; }

# runs sched-run with a JSON report into $logs/NAME.json (stderr in NAME.err)
srun() {
  local name=$1
  shift
  timeout 120 "$run" --json "$@" >"$logs/$name.json" 2>"$logs/$name.err"
}

verified() { [ "$(jget "$logs/$1.json" 'j["verified"]')" = True ]; }

do_build() {
  if [ "$build_it" = 0 ]; then
    detail="not built here (--no-build): $build"
    return 0
  fi
  if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSCHEDRUN_BUILD_EXAMPLES=OFF -DSCHEDRUN_FUZZ=OFF \
    >"$logs/build.log" 2>&1 ||
    ! timeout 600 cmake --build "$build" -j "$(nproc)" --target sched-run test_cuda test_cuda_context gpu_probe \
      cuda_bench >>"$logs/build.log" 2>&1; then
    detail="the build failed: $(grep -m1 -i error "$logs/build.log")"
    return 1
  fi
  detail="sched-run, test_cuda, test_cuda_context, gpu_probe, cuda_bench"
}

driver_version=0
do_preflight() {
  local smi
  smi=$(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>/dev/null | head -1)
  "$build/tests/gpu_probe" >"$logs/probe.json" 2>"$logs/probe.err"
  local rc=$?
  if [ $rc != 0 ]; then
    detail="nvidia-smi sees $gpus GPU(s) ($smi) but the driver does not: $(cat "$logs/probe.json")"
    return 1
  fi
  driver_version=$(jget "$logs/probe.json" 'j["driver_version"]')
  local n sms nvrtc devrt
  n=$(jget "$logs/probe.json" 'len(j["devices"])')
  sms=$(jget "$logs/probe.json" '",".join("sm_%d" % d["sm"] for d in j["devices"])')
  nvrtc=$(jget "$logs/probe.json" 'j["nvrtc"]')
  devrt=$(jget "$logs/probe.json" 'j["devrt"] or "not found"')
  detail="nvidia-smi: $gpus GPU(s), driver $smi; cuDriverGetVersion $driver_version; $n device(s) $sms; NVRTC $nvrtc; libcudadevrt: $devrt"
  [ "$n" = "$gpus" ] || {
    detail="$detail: the driver sees $n device(s), nvidia-smi $gpus"
    return 1
  }
}

do_configs() {
  timeout 300 "$build/tests/test_cuda" >"$logs/configs.log" 2>&1
  local rc=$?
  detail="test_cuda: exit $rc; $(grep -c 'elements equal' "$logs/configs.log") configs equal element by element"
  [ $rc = 77 ] && detail="test_cuda skipped itself on a machine with $gpus GPU(s)"
  [ $rc = 0 ]
}

do_loops() {
  srun loops-graph --devices cuda:0 configs/while_countdown.yaml
  local jobs launches syncs loops
  jobs=$(jget "$logs/loops-graph.json" 'j["devices"][0]["jobs"]')
  launches=$(jget "$logs/loops-graph.json" 'j["devices"][0]["launches"]')
  syncs=$(jget "$logs/loops-graph.json" 'j["devices"][0]["loop_syncs"]')
  loops=$(jget "$logs/loops-graph.json" 'j["devices"][0]["loops"]')
  detail="$jobs jobs: $launches launches, $syncs host syncs; loops $loops"
  verified loops-graph || {
    detail="while_countdown not verified: $(head -c 300 "$logs/loops-graph.err")"
    return 1
  }
  if [ "${driver_version:-0}" -ge 12030 ]; then
    # a driver with conditional nodes: one launch per job, no host sync
    [ "$launches" = "$jobs" ] && [ "$syncs" = 0 ] || {
      detail="driver $driver_version has conditional nodes, yet $detail"
      return 1
    }
  fi
  SCHEDRUN_CUDA_HOST_LOOPS=1 srun loops-host --devices cuda:0 configs/while_countdown.yaml
  local hsyncs
  hsyncs=$(jget "$logs/loops-host.json" 'j["devices"][0]["loop_syncs"]')
  verified loops-host || {
    detail="$detail; host-driven: not verified: $(head -c 300 "$logs/loops-host.err")"
    return 1
  }
  [ "${hsyncs:-0}" -ge $((10 * jobs)) ] || {
    detail="$detail; host-driven: only $hsyncs host syncs"
    return 1
  }
  detail="$detail; host-driven: verified, $hsyncs syncs"
}

do_updates() {
  local cfg name hc gc hu gu out=""
  for cfg in tests/configs/while_body_updates.yaml configs/saxpy.yaml configs/nested_loops.yaml; do
    name=upd-$(basename "$cfg" .yaml)
    srun "$name-host" --devices host "$cfg"
    srun "$name-cuda" --devices cuda:0 "$cfg"
    verified "$name-cuda" || {
      detail="$cfg not verified on cuda:0: $(head -c 300 "$logs/$name-cuda.err")"
      return 1
    }
    hc=$(jget "$logs/$name-host.json" 'j["nodes_created"]')
    gc=$(jget "$logs/$name-cuda.json" 'j["nodes_created"]')
    hu=$(jget "$logs/$name-host.json" 'j["nodes_updated"]')
    gu=$(jget "$logs/$name-cuda.json" 'j["nodes_updated"]')
    out="$out $(basename "$cfg"): $gu updated, $gc created (host $hu, $hc);"
    # every recording updated in place, as on the host: none built again
    [ "$gc" = "$hc" ] && [ "$gu" = "$hu" ] || {
      detail="driver $driver_version rebuilt recordings:$out"
      return 1
    }
  done
  detail="driver $driver_version:$out"
}

do_devices() {
  srun demo-0-0 --devices cuda:0,0 configs/multi_device_demo.yaml
  srun pipeline-0-0 --devices cuda:0,0 examples/pipeline/pipeline.yaml
  local copied
  copied=$(jget "$logs/pipeline-0-0.json" 'sum(s["handoffs_copied"] + s["handoffs_local"] + s["handoffs_peer"] for s in j["stages"])')
  detail="demo on cuda:0,0: $(jget "$logs/demo-0-0.json" 'j["jobs_verified"]') jobs verified; pipeline: $copied hand-offs"
  verified demo-0-0 && verified pipeline-0-0 && [ "${copied:-0}" -gt 0 ]
}

wild_yaml='version: 1
name: wild
kernels:
  wild:
    params: [ptr]
    source: |
      extern "C" __global__ void wild(int *x) {
        int *p = x[0] == 12345 ? x : (int *)8;
        *(volatile int *)p = 1;
      }
buffers:
  x: {type: i32, count: 32}
program:
  - launch: {kernel: wild, grid: 1, block: 32, args: [x]}'

do_fault() {
  echo "$wild_yaml" >"$work/wild.yaml"
  [ $double = 1 ] && export SCHEDRUN_CUDA_DOUBLE_FAULT=wild
  srun fault --devices cuda:0 "$work/wild.yaml"
  local rc=$?
  unset SCHEDRUN_CUDA_DOUBLE_FAULT
  local first
  first=$(jget "$logs/fault.json" 'j["failures"][0]')
  detail="exit $rc: $first"
  [ $rc != 0 ] && [[ "$first" == *CUDA_ERROR_ILLEGAL_ADDRESS* ]] && [[ "$first" == *unusable* ]]
}

spin_yaml='version: 1
name: spin
kernels:
  spin:
    params: [ptr]
    source: |
      extern "C" __global__ void spin(int *flag) {
        while (*(volatile int *)flag != 0) {
        }
      }
buffers:
  flag: {type: i32, count: 1, init: {values: [1]}}
program:
%s'

do_deadline() {
  local how body loop start end ms out="" rc first
  for how in launch graph-loop host-loop; do
    body="  - launch: {kernel: spin, grid: 1, block: 1, args: [flag]}"
    loop="  - loop:
      while: {buffer: flag, index: 0}
      max_trips: 4
      body:
        - launch: {kernel: spin, grid: 1, block: 1, args: [flag]}"
    # shellcheck disable=SC2059
    [ $how = launch ] && printf "$spin_yaml\n" "$body" >"$work/spin-$how.yaml" || printf "$spin_yaml\n" "$loop" >"$work/spin-$how.yaml"
    local envs=()
    [ $how = host-loop ] && envs+=(SCHEDRUN_CUDA_HOST_LOOPS=1)
    env "${envs[@]}" timeout 120 "$run" -q --devices cuda:0 --check "$work/spin-$how.yaml" \
      >"$logs/deadline-$how.check" 2>&1 || {
      detail="$how: --check failed: $(head -c 300 "$logs/deadline-$how.check")"
      return 1
    }
    # a deadline that passes before the kernel runs (the condition kernel's
    # compile, a busy machine) proves nothing: again, with twice the time
    local jt=200
    while :; do
      [ $double = 1 ] && export SCHEDRUN_CUDA_DOUBLE_HANG=spin
      start=$(date +%s%N)
      env "${envs[@]}" timeout 60 "$run" --json --devices cuda:0 --timeout 30 --job-timeout $jt "$work/spin-$how.yaml" \
        >"$logs/deadline-$how.json" 2>"$logs/deadline-$how.err"
      rc=$?
      end=$(date +%s%N)
      unset SCHEDRUN_CUDA_DOUBLE_HANG
      ms=$(((end - start) / 1000000))
      first=$(jget "$logs/deadline-$how.json" 'j["failures"][0] if j["failures"] else j["errors"][0]["message"]')
      [ -z "$first" ] && first=$(head -c 200 "$logs/deadline-$how.err")
      # (a deadline named, but not one the job ran past: it had not reached its kernel)
      [[ "$first" == *deadline* && "$first" != *"past its deadline"* ]] && [ $jt -lt 6400 ] || break
      jt=$((jt * 2))
    done
    out="$out $how: exit $rc in $ms ms (deadline $jt ms);"
    # the job's deadline named; the run over within 3 s of it
    if [ $rc = 0 ] || [ $((ms - jt)) -gt 3000 ] || ! [[ "$first" == *"past its deadline"* ]]; then
      detail="$how: exit $rc after $ms ms (deadline $jt ms): $first"
      return 1
    fi
  done
  detail="$out"
}

do_batches() {
  # jobs that share a recording go to the device in batches: pinned staging,
  # one wait per batch; every job's output differs from the one before
  srun batches --devices cuda:0 tests/configs/same_jobs.yaml
  detail="$(jget "$logs/batches.json" 'j["jobs_verified"]') of $(jget "$logs/batches.json" 'j["jobs"]') jobs verified, target $(jget "$logs/batches.json" 'j["target"]')"
  verified batches || {
    detail="same_jobs.yaml not verified: $(head -c 300 "$logs/batches.err")"
    return 1
  }
}

do_overlap() {
  # two buffer sets of 12 MiB jobs: a job's copies go beside the kernel of
  # the job before (the other set's); every job verified, the count said
  srun overlap --devices cuda:0 tests/gpu/overlap.yaml
  verified overlap || {
    detail="overlap.yaml not verified: $(head -c 300 "$logs/overlap.err")"
    return 1
  }
  detail="$(jget "$logs/overlap.json" 'j["jobs_verified"]') jobs verified; $(jget "$logs/overlap.json" 'j["devices"][0]["batches_beside"]') of them copied in beside the job before; wall $(jget "$logs/overlap.json" 'j["wall_ms"]') ms"
}

do_autotune() {
  # an autotuned launch on a GPU: the candidates timed with events, the
  # fastest kept in the cache; a second run takes it without timing
  srun autotune1 --devices cuda:0 --retune configs/autotune.yaml &&
    srun autotune2 --devices cuda:0 configs/autotune.yaml
  local first=$logs/autotune1.json second=$logs/autotune2.json
  if ! verified autotune1 || ! verified autotune2; then
    detail="autotune.yaml not verified: $(head -c 300 "$logs/autotune1.err" "$logs/autotune2.err")"
    return 1
  fi
  local t1 t2 block times
  t1=$(jget "$first" 'j["autotune"][0]["timed"]')
  t2=$(jget "$second" 'j["autotune"][0]["timed"]')
  block=$(jget "$first" 'j["autotune"][0]["block"][0]')
  times=$(jget "$first" '", ".join("%d: %d ns" % (c["block"][0], c["ns"]) for c in j["autotune"][0]["candidates"])')
  detail="chose block $block on $(jget "$first" 'j["autotune"][0]["device"]') ($times); timed then $t1, the second run $t2"
  [ "$t1" = True ] && [ "$t2" = False ] &&
    [ "$block" = "$(jget "$first" 'min(j["autotune"][0]["candidates"], key=lambda c: c["ns"])["block"][0]')" ]
}

do_mixed() {
  # the GPU and a host device in one scheduler, placed by performance model
  srun mixed1 --devices cuda:0+host:1 --retune bench/configs/placement.yaml &&
    srun mixed2 --devices cuda:0+host:1 bench/configs/placement.yaml
  if ! verified mixed1 || ! verified mixed2; then
    detail="placement.yaml on cuda:0+host:1 not verified: $(head -c 300 "$logs/mixed1.err" "$logs/mixed2.err")"
    return 1
  fi
  local split
  split=$(jget "$logs/mixed2.json" '"; ".join("%s %d jobs (%d by model, error %.0f%%)" % (d["device"], d["placed"], d["by_model"], 100 * d["model_error"]) for d in j["placement"])')
  detail="calibrated, then: $split; wall $(jget "$logs/mixed1.json" 'j["wall_ms"]') ms, then $(jget "$logs/mixed2.json" 'j["wall_ms"]') ms"
  [ "$(jget "$logs/mixed2.json" 'sum(d["by_model"] for d in j["placement"])')" = "$(jget "$logs/mixed2.json" 'j["jobs"]')" ]
}

do_trace() {
  # --trace: the first jobs run node by node, timed with events
  srun trace --devices cuda:0 --trace "$logs/trace.trace.json" configs/saxpy.yaml
  verified trace || {
    detail="saxpy --trace not verified: $(head -c 300 "$logs/trace.err")"
    return 1
  }
  local spans
  spans=$(python3 -c 'import json,sys
e=json.load(open(sys.argv[1]))["traceEvents"]
x=[v for v in e if v.get("ph")=="X" and v.get("cat")=="launch"]
print(len(x), "node spans, median", sorted(v["dur"] for v in x)[len(x)//2] if x else 0, "us")' "$logs/trace.trace.json" 2>&1)
  detail="$spans"
  [[ "$spans" != 0\ * ]] && [[ "$spans" == *"node spans"* ]]
}

do_context() {
  "$build/tests/test_cuda_context" >"$logs/context.log" 2>&1
  local rc=$?
  detail="test_cuda_context: exit $rc $(grep -E 'PASSED|FAILED|ERROR|skipped' "$logs/context.log" | head -2 | tr '\n' ' ')"
  [ $rc = 0 ]
}

do_memcheck() {
  if [ $double = 1 ]; then
    detail="not on the driver double (compute-sanitizer needs a GPU)"
    return 77
  fi
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    detail="compute-sanitizer is not installed"
    return 77
  fi
  local cfg
  for cfg in configs/saxpy.yaml configs/while_countdown.yaml; do
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$run" -q --devices cuda "$cfg" \
      >"$logs/memcheck-$(basename "$cfg" .yaml).log" 2>&1 || {
      detail="memcheck on $cfg: $(tail -3 "$logs/memcheck-$(basename "$cfg" .yaml).log" | tr '\n' ' ')"
      return 1
    }
  done
  detail="clean on 2 configs"
}

do_demo() {
  srun demo --devices cuda configs/multi_device_demo.yaml
  detail="$(jget "$logs/demo.json" 'j["jobs_verified"]') jobs verified on $(jget "$logs/demo.json" 'len(j["devices"])') device(s)"
  verified demo
}

do_bench() {
  timeout 120 "$build/cuda_bench" >"$logs/bench.log" 2>&1
  local rc=$?
  detail=$(tail -1 "$logs/bench.log")
  [ $rc = 0 ]
}

section build do_build
section preflight do_preflight
section configs do_configs
section loops do_loops
section updates do_updates
section devices do_devices
section fault do_fault
section deadline do_deadline
section batches do_batches
section overlap do_overlap
section autotune do_autotune
section mixed do_mixed
section trace do_trace
section context do_context
section memcheck do_memcheck
section demo do_demo
section bench do_bench

# the summary: sections in order, with their lines
failed=0
{
  printf '{"gpus": %s, "sections": [' "$gpus"
  for i in "${!names[@]}"; do
    [ "${results[$i]}" = FAIL ] && failed=1
    d=${details[$i]//\\/\\\\}
    d=${d//\"/\\\"}
    d=$(printf '%s' "$d" | tr '\n\t' '  ')
    printf '%s{"section": "%s", "result": "%s", "detail": "%s"}' "$([ "$i" = 0 ] || echo ', ')" "${names[$i]}" \
      "${results[$i]}" "$d"
  done
  printf '], "passed": %s}\n' "$([ $failed = 0 ] && echo true || echo false)"
} >"$summary"
echo "== summary ($summary; logs in $logs)"
for i in "${!names[@]}"; do echo "${results[$i]} ${names[$i]}"; done
if [ $failed = 0 ]; then
  echo "gpu: PASSED on $gpus GPU(s)"
  exit 0
fi
echo "gpu: FAILED: $(for i in "${!names[@]}"; do [ "${results[$i]}" = FAIL ] && printf '%s ' "${names[$i]}"; done)"
exit 1
