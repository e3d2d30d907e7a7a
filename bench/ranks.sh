#!/usr/bin/env bash
# Jobs per second across 1 to 4 MPI ranks on this machine (one host device
# each, bench/configs/tiny_jobs.yaml), with and without batching, and the
# cluster model (bench/cluster_model.py) calibrated with those figures.
# Prints a Markdown section; bench/run.sh appends it to bench/RESULTS.md.
# Usage: bench/ranks.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
config=bench/configs/tiny_jobs.yaml
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# json on stdin -> "jobs_per_s execute_us_per_job"
rate() {
  python3 -c 'import json,sys; j=json.load(sys.stdin); assert j["status"]=="verified", j["status"]
w=j["wall_ms"]/1e3; print("%.0f %.3f" % (j["jobs"]/w, j["execute_ms_sum"]*1e3/j["jobs"]))'
}
one() { # label command... -> appends "label jobs_per_s" for 3 rounds to $tmp/raw
  local label=$1; shift
  for round in 1 2 3; do
    "$@" --no-cache --json "$config" | rate > "$tmp/r"
    echo "$label $(cut -d' ' -f1 "$tmp/r")" >> "$tmp/raw"
    if [ "$label" = single ]; then cut -d" " -f2 "$tmp/r" >> "$tmp/exec"; fi
  done
}
mpi() { mpirun -n "$1" --oversubscribe --mca btl self,tcp "$build/sched-run" "${@:2}"; }
echo "ranks: one process, then 1 to 4 ranks, batched and one job per message" >&2
one single "$build/sched-run"
for r in 1 2 3 4; do
  one "r$r" mpi "$r"
  one "r${r}b1" mpi "$r" --rank-batch 1
done
fig() { awk -v l="$1" '$1 == l {print $2}' "$tmp/raw" | median; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }
one_rank=$(fig r1)
echo "## Across MPI ranks"
echo
echo "100,000 jobs of \`bench/configs/tiny_jobs.yaml\` (one launch each, the recording"
echo "never changes) on R ranks of this 2-core machine, one host device per rank,"
echo "over MPI's TCP transport (\`mpirun -n R --oversubscribe --mca btl self,tcp\`);"
echo "jobs per second over the whole run (compiles included), medians of 3, one run."
echo "Batched: up to 256 jobs per MPI message (the default); one by one: \`--rank-batch 1\`."
echo
echo "| ranks | batched | ratio to 1 rank | one job per message | batched / one by one |"
echo "|---|---|---|---|---|"
for r in 1 2 3 4; do
  b=$(fig "r$r") u=$(fig "r${r}b1")
  echo "| $r | $b jobs/s | $(ratio "$b" "$one_rank")x | $u jobs/s | $(ratio "$b" "$u")x |"
done
echo "| one process, no MPI | $(fig single) jobs/s | $(ratio "$(fig single)" "$one_rank")x | | |"
echo
echo "All ranks share the same two cores here, each with its actors and a host"
echo "device's worker process, so more ranks add contention, not capacity; what the"
echo "table shows is what the MPI path costs (rank 0 placing, encoding and decoding"
echo "every job), not how a cluster scales. That is the model's job, below."
echo
exec_us=$(median < "$tmp/exec")
python3 bench/cluster_model.py --batched "$(fig r2)" --unbatched "$(fig r2b1)" --device-us "$exec_us"
