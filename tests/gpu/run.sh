#!/usr/bin/env bash
# Everything that needs a GPU, in one go (a few minutes at most): builds,
# runs the GPU tests (CUDA vs host, element by element), the multi-device
# demo on every GPU, and the GPU benchmark; ends with one summary line.
# Usage: tests/gpu/run.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
log=$(mktemp)
status=0
say() { echo "$@" | tee -a "$log"; }

if ! make build BUILD="$build" >"$log.build" 2>&1; then
  tail -30 "$log.build"
  echo "gpu: FAILED to build"
  exit 1
fi
export SCHEDRUN_CACHE_DIR=${SCHEDRUN_CACHE_DIR:-$(mktemp -d)}

say "== GPU tests"
(cd "$build" && timeout 200 ctest -L gpu --output-on-failure) 2>&1 | tee "$log.tests"
tests_line=$(grep -E "tests passed|tests failed" "$log.tests" | tail -1)
grep -q "(Skipped)" "$log.tests" && skipped=1 || skipped=0
grep -qE "^\s*[0-9]+% tests passed, 0 tests failed" "$log.tests" || status=1

say "== multi-device demo on every GPU"
timeout 60 "$build/sched-run" --devices all --stats configs/multi_device_demo.yaml 2>&1 | tee "$log.demo"
demo_rc=${PIPESTATUS[0]}
[ "$demo_rc" = 0 ] || status=1
demo_line=$(head -1 "$log.demo")

say "== GPU benchmark"
timeout 60 "$build/cuda_bench" 2>&1 | tee "$log.bench"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" = 0 ] || [ "$bench_rc" = 77 ] || status=1
bench_line=$(tail -1 "$log.bench")

if [ "$skipped" = 1 ]; then
  echo "gpu: SKIPPED (no GPU found) | $tests_line | demo: $demo_line"
elif [ "$status" = 0 ]; then
  echo "gpu: PASSED | $tests_line | demo: $demo_line | $bench_line"
else
  echo "gpu: FAILED | $tests_line | demo exit $demo_rc: $demo_line | bench exit $bench_rc: $bench_line"
fi
rm -f "$log" "$log".*
exit $status
