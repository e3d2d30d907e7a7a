#!/usr/bin/env bash
# Everything that needs a GPU, in one go (at most about 5 minutes on one GPU):
# builds, checks that schedrun opens every GPU nvidia-smi sees, runs the GPU
# tests (CUDA vs host, element by element), the copy and fill edge cases, a
# while loop as one graph launch per job, compute-sanitizer's memcheck on two
# configs when it is installed, the multi-device demo on every GPU, and the GPU
# benchmark; ends with one summary line. It cannot pass by skipping:
#   exit 0, "gpu: PASSED ..."   everything ran on the GPU and passed
#   exit 1, "FAIL: ..."         something failed, or a GPU is there but unusable
#   exit 77, "SKIP: ..."        no GPU here (nvidia-smi sees none)
# Usage: tests/gpu/run.sh [--no-build] [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
build_it=1
if [ "${1:-}" = "--no-build" ]; then
  build_it=0
  shift
fi
build=${1:-build}
log=$(mktemp)
trap 'rm -f "$log" "$log".*' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "${gpus:-0}" = 0 ]; then
  echo "SKIP: no GPU here (nvidia-smi sees none); nothing was checked"
  exit 77
fi
if [ "$build_it" = 1 ] && ! timeout 240 make build BUILD="$build" >"$log.build" 2>&1; then
  tail -30 "$log.build"
  fail "the build failed"
fi
export SCHEDRUN_CACHE_DIR=${SCHEDRUN_CACHE_DIR:-$(mktemp -d)}

# nvidia-smi sees GPUs: schedrun must open every one of them
if ! timeout 60 "$build/sched-run" -q --devices cuda configs/saxpy.yaml >"$log.open" 2>&1; then
  fail "nvidia-smi sees $gpus GPU(s) but schedrun cannot run on them: $(head -3 "$log.open" | tr '\n' ' ')"
fi

echo "== GPU tests"
(cd "$build" && timeout 200 ctest -L gpu --output-on-failure) 2>&1 | tee "$log.tests"
tests_line=$(grep -E "tests passed|tests failed" "$log.tests" | tail -1)
grep -q "(Skipped)" "$log.tests" && fail "a GPU test skipped itself on a machine with $gpus GPU(s): $tests_line"
grep -qE "^\s*[0-9]+% tests passed, 0 tests failed" "$log.tests" || fail "GPU tests: $tests_line"

echo "== copy and fill edge cases; a while loop as one graph launch per job"
timeout 60 "$build/sched-run" -q --devices cuda tests/configs/copy_fill_edges.yaml >"$log.edges" 2>&1 ||
  fail "tests/configs/copy_fill_edges.yaml: $(head -3 "$log.edges" | tr '\n' ' ')"
timeout 60 "$build/sched-run" --devices cuda:0 --json configs/while_countdown.yaml >"$log.while" 2>&1 ||
  fail "configs/while_countdown.yaml: $(head -3 "$log.while" | tr '\n' ' ')"
dev=$(sed 's/.*"devices": \[{//' "$log.while")
jobs=$(echo "$dev" | grep -o '"jobs": [0-9]*' | head -1 | grep -o '[0-9]*$')
launches=$(echo "$dev" | grep -o '"launches": [0-9]*' | head -1 | grep -o '[0-9]*$')
loops=$(echo "$dev" | grep -o '"loops": "[^"]*"' | head -1)
echo "while_countdown: $jobs jobs, $launches graph launches, $loops"
loops_line="while loops: $launches launches for $jobs jobs"
if [ "$launches" != "$jobs" ]; then
  # only a driver without conditional nodes may drive loops from the host
  echo "$loops" | grep -q "on the host" || fail "while_countdown: $launches launches for $jobs jobs ($loops)"
  loops_line="$loops_line (host-driven: $loops)"
fi

sanitizer_line="compute-sanitizer: not installed"
if command -v compute-sanitizer >/dev/null 2>&1; then
  echo "== compute-sanitizer memcheck"
  for cfg in configs/saxpy.yaml configs/while_countdown.yaml; do
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$build/sched-run" -q --devices cuda "$cfg" \
      >"$log.san" 2>&1 || { tail -20 "$log.san"; fail "compute-sanitizer memcheck on $cfg"; }
  done
  sanitizer_line="memcheck: clean on 2 configs"
fi

echo "== multi-device demo on every GPU"
timeout 60 "$build/sched-run" --devices cuda --stats configs/multi_device_demo.yaml 2>&1 | tee "$log.demo"
[ "${PIPESTATUS[0]}" = 0 ] || fail "the demo on every GPU: $(head -1 "$log.demo")"
demo_line=$(head -1 "$log.demo")

echo "== GPU benchmark"
timeout 60 "$build/cuda_bench" 2>&1 | tee "$log.bench"
[ "${PIPESTATUS[0]}" = 0 ] || fail "the GPU benchmark: $(tail -1 "$log.bench")"
bench_line=$(tail -1 "$log.bench")

echo "gpu: PASSED on $gpus GPU(s) | $tests_line | $loops_line | $sanitizer_line | demo: $demo_line | $bench_line"
