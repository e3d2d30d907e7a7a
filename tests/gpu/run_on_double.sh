#!/usr/bin/env bash
# tests/gpu/run.sh where there is no GPU: on the driver double (the
# environment ctest gives: SCHEDRUN_CUDA_LIBRARY and the rest), with a
# stand-in nvidia-smi. Every section runs and passes (memcheck skips), and
# the summary says so; then, with while loops forced to the host on a 13.0
# driver, and with a driver that updates nothing in place, the script fails
# naming that section.
# Usage: tests/gpu/run_on_double.sh BUILD_DIR
set -uo pipefail
build=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'SMI'
#!/bin/sh
# nvidia-smi as run.sh asks it, for the driver double's one device
case "$*" in
-L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
*--query-gpu*) echo "580.65.06, NVIDIA H100 80GB HBM3" ;;
*) echo "nvidia-smi (stand-in for the driver double)" ;;
esac
SMI
chmod +x "$tmp/bin/nvidia-smi"
export PATH=$tmp/bin:$PATH SCHEDRUN_CUDA_DOUBLE_DEVICES=1 SCHEDRUN_CUDA_DOUBLE_DRIVER=13000
unset SCHEDRUN_CUDA_HOST_LOOPS SCHEDRUN_CUDA_DOUBLE_STRICT GPU_SECTIONS
fail() {
  echo "FAIL: $*"
  exit 1
}

# results FILE: "section:result ..." from a summary
results() {
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(" ".join("%s:%s" % (s["section"], s["result"]) for s in j["sections"]))' "$1"
}

OUT=$tmp/all "$src/tests/gpu/run.sh" --no-build "$build" >"$tmp/all.log" 2>&1
rc=$?
cat "$tmp/all.log"
[ $rc = 0 ] || fail "run.sh on the double: exit $rc"
[ -f "$tmp/all/summary.json" ] || fail "no summary.json"
got=$(results "$tmp/all/summary.json")
want="build:PASS preflight:PASS configs:PASS loops:PASS updates:PASS devices:PASS fault:PASS deadline:PASS batches:PASS overlap:PASS autotune:PASS mixed:PASS trace:PASS context:PASS memcheck:SKIP demo:PASS bench:PASS"
[ "$got" = "$want" ] || fail "the summary says: $got"
echo "every section: $got"

# break BREAK SECTION VAR=VALUE: with VAR set, run.sh fails, naming SECTION
broken() {
  local section=$1
  shift
  env "$@" GPU_SECTIONS="$section" OUT="$tmp/$section" "$src/tests/gpu/run.sh" --no-build "$build" \
    >"$tmp/$section.log" 2>&1
  local rc=$?
  local line
  line=$(grep "^FAIL $section:" "$tmp/$section.log")
  if [ $rc != 1 ] || [ -z "$line" ] || ! grep -q "^gpu: FAILED: $section $" "$tmp/$section.log" ||
    [ "$(results "$tmp/$section/summary.json")" != "preflight:PASS $section:FAIL" ]; then
    cat "$tmp/$section.log"
    fail "with $*, run.sh: exit $rc, not a failure of $section alone"
  fi
  echo "with $*: $line"
}
broken loops SCHEDRUN_CUDA_HOST_LOOPS=1
broken updates SCHEDRUN_CUDA_DOUBLE_STRICT=no-updates
echo "PASS: run.sh on the driver double"
