#!/usr/bin/env bash
# Placement by performance model on devices of two kinds: a CUDA device (the
# driver double, its kernels SLOWDOWN times slower than their CPU time) and a
# host device, against each fixed placement (every job on the host device,
# every job on the GPU) and against least-loaded placement over both. Whole
# `sched-run` runs of bench/configs/placement.yaml, the cache warm (kernels
# compiled, and the model calibrated by a run before the timed ones), taking
# turns, 5 rounds, idle and beside 4 busy loops; the figure is each one's median wall time.
# Prints a Markdown section; bench/run.sh appends it to bench/RESULTS.md.
# Usage: bench/placement.sh BUILD_DIR [SLOWDOWN]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
slowdown=${2:-4}
double="$build/tests/libcuda-double.so"
[ -f "$double" ] || { echo "placement: no driver double at $double" >&2; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export SCHEDRUN_CUDA_LIBRARY="$double" SCHEDRUN_NVRTC_LIBRARY="$double"
export SCHEDRUN_CUDA_DOUBLE_DIR="$tmp/double" SCHEDRUN_CACHE_DIR="$tmp/cache"
export SCHEDRUN_CUDA_DOUBLE_SLOWDOWN="$slowdown"
config=bench/configs/placement.yaml
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# json on stdin -> "wall_ms jobs_on_device_0 jobs_on_device_1"
wall() {
  python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["status"]=="verified", j["status"]
p=j.get("placement") or []
print("%.1f %s" % (j["wall_ms"], " ".join(str(d["placed"]) for d in p)))'
}
run() { "$build/sched-run" --json "$@" "$config"; }
echo "placement: model, least-loaded, host only, GPU only (slowdown $slowdown)" >&2
# compile for both kinds, and calibrate the model
run --devices cuda+host:1 --placement model > /dev/null
run --devices host:1 > /dev/null
# the same rounds idle, then with 4 busy loops beside them (two per core)
for mode in idle loaded; do
  pids=()
  if [ "$mode" = loaded ]; then
    for i in 1 2 3 4; do (while :; do :; done) & pids+=($!); done
  fi
  for round in 1 2 3 4 5; do
    run --devices cuda+host:1 --placement model | wall | sed "s/^/$mode-model /" >> "$tmp/raw"
    run --devices cuda+host:1 --placement least-loaded | wall | sed "s/^/$mode-least /" >> "$tmp/raw"
    run --devices host:1 | wall | sed "s/^/$mode-host /" >> "$tmp/raw"
    run --devices cuda | wall | sed "s/^/$mode-cuda /" >> "$tmp/raw"
  done
  if [ ${#pids[@]} -gt 0 ]; then kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true; fi
done
fig() { awk -v l="$1" '$1 == l {print $2}' "$tmp/raw" | median; }
split() { awk -v l="$1" '$1 == l {print $3 " / " $4; exit}' "$tmp/raw"; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }
jobs=$(awk '/^jobs:/ {print $2}' "$config")
echo "## Placement over devices of two kinds"
echo
echo "$jobs jobs of \`$config\` on \`cuda+host:1\`: the GPU is the driver double with"
echo "\`SCHEDRUN_CUDA_DOUBLE_SLOWDOWN=$slowdown\` (each kernel takes $slowdown times its CPU time),"
echo "the host device runs the same kernel on the CPU. Whole \`sched-run --json\` runs,"
echo "warm cache, the model calibrated by a run before; medians of 5 rounds taking turns,"
echo "idle, then with 4 busy loops beside them (two per core)."
echo
echo "| placement | idle: wall | jobs on cuda:0 / host:0 | against the best fixed | loaded: wall | jobs on cuda:0 / host:0 | against the best fixed |"
echo "|---|---|---|---|---|---|---|"
for m in model least host cuda; do
  case $m in
    model) label="**model**" ;;
    least) label="least-loaded" ;;
    host) label="every job on host:0 (\`--devices host:1\`)" ;;
    cuda) label="every job on cuda:0 (\`--devices cuda\`)" ;;
  esac
  row="| $label"
  for mode in idle loaded; do
    w=$(fig "$mode-$m") h=$(fig "$mode-host") c=$(fig "$mode-cuda")
    best=$(awk "BEGIN {print ($h < $c) ? $h : $c}")
    r=$(ratio "$w" "$best")
    [ "$m" = model ] && r="**${r}x**" || r="${r}x"
    sp=$(split "$mode-$m")
    case $m in host | cuda) sp="" ;; esac # one device: all its jobs there
    row="$row | $w ms | $sp | $r"
  done
  echo "$row |"
done
echo
echo "Command: \`bench/placement.sh build $slowdown\`. Target: the model's total time within"
echo "20% of the best fixed placement (at most 1.20x)."
