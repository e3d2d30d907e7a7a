#!/usr/bin/env bash
# Runs the tests that wait for time (deadlines, signals, heartbeats, hangs
# caught) on a busy machine: two busy loops per core beside `ctest -j2`, so
# that a test that guesses how fast the machine is fails here rather than on
# a user's machine, a packager's build daemon or a CI runner.
#
#   tests/load.sh BUILD_DIR [CTEST ARGS...]
#
# The loops run at the tests' own priority and are ended however this script
# ends. LOAD_PER_CORE (default 2) sets how many loops per core.
set -uo pipefail
build=${1:?usage: tests/load.sh BUILD_DIR [CTEST ARGS...]}
shift

cores=$(nproc)
n=$((cores * ${LOAD_PER_CORE:-2}))
pids=()
stop_load() {
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in $(seq "$n"); do
  (while :; do :; done) &
  pids+=($!)
done
echo "load: $n busy loops on $cores cores beside the tests (load average now $(cut -d' ' -f1 /proc/loadavg))"
cd "$build" && ctest --output-on-failure --no-tests=error -j 2 -L timing "$@"
