#!/usr/bin/env bash
# Runs every benchmark in one go and rewrites bench/RESULTS.md.
# Usage: bench/run.sh BUILD_DIR   (`make bench` builds the StarPU peer, then runs this)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=bench/RESULTS.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export SCHEDRUN_CACHE_DIR="$tmp/cache"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# microseconds between two $EPOCHREALTIME readings: bash's own clock, so no
# process is forked inside a timed span
us_between() { echo $(( ${2/./} - ${1/./} )); }
get() { sed -n "s/^$1=//p" "$2"; }
ratio() { # a / b to one decimal, or n/a when either is not a number
  if [[ "$1" =~ ^[0-9.]+$ && "$2" =~ ^[0-9.]+$ ]] && awk "BEGIN {exit !($2 > 0)}"; then
    awk "BEGIN {printf \"%.1f\", $1 / $2}"
  else
    echo "n/a"
  fi
}

# key=value lines of several runs -> the median of each key
median_keys() {
  local k
  for k in $(cut -d= -f1 "$@" | sort -u); do
    echo "$k=$(grep -h "^$k=" "$@" | cut -d= -f2 | median)"
  done
}

# schedrun and StarPU take turns, three times, so that a noisy moment hits both
for round in 1 2 3; do
  echo "jobs (round $round of 3): 100,000 single-launch jobs, latency, chains; six pipeline modes" >&2
  "$build/jobs_bench" 100000 > "$tmp/jobs.$round"
  echo "dependent jobs (round $round of 3): a chain of 100, a diamond" >&2
  "$build/dag_bench" --deps-only > "$tmp/deps.$round"
  echo "data-carrying jobs (round $round of 3): 50,000 saxpy jobs on their own 1,024 floats" >&2
  "$build/data_bench" 50000 > "$tmp/data.$round"
  if [ -x "$build/starpu_bench" ]; then
    # at the same worker count as schedrun's devices: 1 vs 1 and 2 vs 2
    for w in 1 2; do
      echo "StarPU with $w CPU worker(s) (round $round of 3): the same workloads" >&2
      STARPU_SILENT=1 STARPU_NCPU=$w "$build/starpu_bench" 100000 | sed "s/^starpu_/starpu${w}_/" > "$tmp/starpu$w.$round"
    done
    echo "StarPU as it starts by default (round $round of 3)" >&2
    STARPU_SILENT=1 "$build/starpu_bench" 100000 > "$tmp/starpud.$round"
  fi
done
median_keys "$tmp"/jobs.? > "$tmp/jobs"
median_keys "$tmp"/deps.? >> "$tmp/jobs"
median_keys "$tmp"/data.? >> "$tmp/jobs"
# system calls per job, counted by perf (when it can count tracepoints here)
syscalls() { # command... -> system calls per job of 100,000, or n/a
  if perf stat -x, -e raw_syscalls:sys_enter -o "$tmp/perf" -- "$@" >/dev/null 2>&1; then
    awk -F, '/raw_syscalls/ {printf "%.2f", $1 / 100000}' "$tmp/perf"
  else
    echo "n/a"
  fi
}
for w in 1 2; do
  echo "system calls: schedrun with $w device(s)" >&2
  echo "syscalls_${w}dev_per_job=$(syscalls "$build/jobs_bench" --only-jobs 100000 $w)" >> "$tmp/jobs"
  if [ -x "$build/starpu_bench" ]; then
    echo "system calls: StarPU with $w worker(s)" >&2
    echo "starpu${w}_syscalls_per_task=$(syscalls env STARPU_SILENT=1 STARPU_NCPU=$w "$build/starpu_bench" --only-tasks 100000)" \
      >> "$tmp/starpu_sys"
  fi
done
if [ -x "$build/starpu_bench" ]; then
  median_keys "$tmp"/starpu1.? "$tmp"/starpu2.? "$tmp"/starpud.? > "$tmp/starpu"
  cat "$tmp/starpu_sys" >> "$tmp/starpu" 2>/dev/null || true
else
  : > "$tmp/starpu"
fi
# instructions per empty job, from callgrind: the same on a busy machine as on
# an idle one. The slope between 10,000 and 30,000 jobs (or tasks), so that
# start-up and shutdown cancel; one device against one CPU worker.
instructions() { # command prefix... -> instructions (Ir) of the whole run, or nothing
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 | sed -n 's/.*Collected : //p' | tr -d ' ,'
}
# The median of three such counts: a waiting thread's polling is counted
# too, and one run in which a wait spun long gave a negative slope.
instructions3() {
  local i
  for i in 1 2 3; do instructions "$@"; done | sort -n | sed -n 2p
}
# slope KEY FILE SMALL LARGE APART COMMAND... : the instructions per unit of
# COMMAND with SMALL and with LARGE appended (APART units apart) as KEY=N in FILE
slope() {
  local key=$1 file=$2 small=$3 large=$4 apart=$5 a b
  shift 5
  a=$(instructions3 "$@" $small); b=$(instructions3 "$@" $large) # SMALL, LARGE: words
  [ -n "$a" ] && [ -n "$b" ] && echo "$key=$(( (b - a) / apart ))" >> "$file"
}
if command -v valgrind >/dev/null; then
  echo "instructions per job (callgrind): schedrun, 1 device" >&2
  slope instructions_1dev_per_job "$tmp/jobs" "10000 1" "30000 1" 20000 "$build/jobs_bench" --only-jobs
  # a dependent job: the chain of 100 (d), 10 and 30 rounds (2,000 jobs apart)
  echo "instructions per dependent job (callgrind): schedrun, 1 device" >&2
  slope instructions_1dev_per_dependent_job "$tmp/jobs" 10 30 2000 "$build/dag_bench" --chain-only
  if [ -x "$build/starpu_bench" ]; then
    echo "instructions per task and per dependent task (callgrind): StarPU, 1 worker" >&2
    STARPU_SILENT=1 STARPU_NCPU=1 slope starpu1_instructions_per_task "$tmp/starpu" 10000 30000 20000 \
      "$build/starpu_bench" --only-tasks
    STARPU_SILENT=1 STARPU_NCPU=1 slope starpu1_instructions_per_dependent_task "$tmp/starpu" 10 30 2000 \
      "$build/starpu_bench" --chain-only
  fi
fi

# The same jobs with a background load beside both: two busy loops per core,
# schedrun and StarPU taking turns, three times (a median of two runs was one
# bad stretch of the machine away from either of them).
busy=()
for _ in $(seq $((2 * $(nproc)))); do
  ( while :; do :; done ) &
  busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
for round in 1 2 3; do
  echo "with $((2 * $(nproc))) busy loops (round $round of 3): schedrun jobs and dependent jobs" >&2
  "$build/jobs_bench" --shipped 50000 > "$tmp/ljobs.$round"
  "$build/dag_bench" --deps-only >> "$tmp/ljobs.$round"
  if [ -x "$build/starpu_bench" ]; then
    for w in 1 2; do
      echo "with $((2 * $(nproc))) busy loops (round $round of 3): StarPU, $w worker(s)" >&2
      STARPU_SILENT=1 STARPU_NCPU=$w "$build/starpu_bench" 50000 | sed "s/^starpu_/starpu${w}_/" > "$tmp/lstarpu$w.$round"
    done
  fi
done
kill "${busy[@]}" 2>/dev/null
wait "${busy[@]}" 2>/dev/null || true
trap 'rm -rf "$tmp"' EXIT
median_keys "$tmp"/ljobs.? > "$tmp/load"
if [ -x "$build/starpu_bench" ]; then median_keys "$tmp"/lstarpu?.? > "$tmp/lstarpu"; else : > "$tmp/lstarpu"; fi

echo "job graphs: 1,000 chains of 10 hand-offs; one chain's steps, graph vs caller" >&2
"$build/dag_bench" > "$tmp/dag"
echo "breakdown: zmq floor, codec, one job phase by phase" >&2
"$build/breakdown_bench" > "$tmp/breakdown"
echo "replay: 1000 tiny launches; record create / update / reuse; memory" >&2
"$build/replay_bench" > "$tmp/replay"
echo "record: create / update one / update all / reuse, 100 to 100,000 launches" >&2
"$build/record_bench" > "$tmp/record"
echo "blocks: a tree reduction's barriers against a barrier-free kernel" >&2
"$build/blocks_bench" > "$tmp/blocks"
"$build/gemm_bench" >> "$tmp/blocks"
echo "kernels: a barrier-free saxpy as vector code against plain C; its instructions" >&2
"$build/kernel_bench" > "$tmp/kernel"
if command -v valgrind >/dev/null; then
  kernel_ir() { # launches -> instructions of the device's side of a job over 2^20 floats
    valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=hw_handle \
      "$build/kernel_bench" --in-process 1048576 "$1" 2>&1 | sed -n 's/.*Collected : //p' | tr -d ' ,'
  }
  a=$(kernel_ir 1); b=$(kernel_ir 11)
  [ -n "$a" ] && [ -n "$b" ] &&
    echo "saxpy_instructions_per_element=$(awk "BEGIN {printf \"%.2f\", ($b - $a) / 10485760}")" >> "$tmp/kernel"
fi
echo "compile: pool of 1 vs 2 workers, memory-cache hits" >&2
"$build/compile_bench" 5 > "$tmp/compile"

echo "compile: cold vs warm disk cache" >&2
coldwarm() { # config rounds -> "cold_us warm_us"
  local cfg=$1 rounds=$2 cold=() warm=()
  for _ in $(seq "$rounds"); do
    rm -rf "$tmp/cw"
    local t0=$EPOCHREALTIME t1
    SCHEDRUN_CACHE_DIR="$tmp/cw" "$build/sched-run" -q "$cfg"
    t1=$EPOCHREALTIME
    cold+=("$(us_between "$t0" "$t1")")
    for _ in 1 2 3; do
      t0=$EPOCHREALTIME
      SCHEDRUN_CACHE_DIR="$tmp/cw" "$build/sched-run" -q "$cfg"
      t1=$EPOCHREALTIME
      warm+=("$(us_between "$t0" "$t1")")
    done
  done
  echo "$(printf '%s\n' "${cold[@]}" | median) $(printf '%s\n' "${warm[@]}" | median)"
}
read -r saxpy_cold saxpy_warm < <(coldwarm configs/saxpy.yaml 5)
"$build/compile_bench" --print-config > "$tmp/k16.yaml"
read -r k16_cold k16_warm < <(coldwarm "$tmp/k16.yaml" 3)

J=$tmp/jobs S=$tmp/starpu B=$tmp/breakdown R=$tmp/replay C=$tmp/compile RB=$tmp/record D=$tmp/dag
{
  echo "# Benchmark results"
  echo
  echo "Regenerated by \`make bench\` (\`bench/run.sh build\`) on a machine with $(nproc) cores,"
  echo "$(date -u +%Y-%m-%d). Every ratio compares figures measured in this same run; each"
  echo "figure is a median. schedrun's and StarPU's job figures are medians of three runs of"
  echo "each benchmark, taking turns (within a run, throughput is the best of 3 rounds)."
  echo "The machine is shared and noisy: compare ratios, not absolute numbers across runs."
  echo
  echo "## Side by side with StarPU, at the same worker count"
  echo
  if [ -s "$S" ]; then
    echo "StarPU with \`STARPU_NCPU=1\` against one host device, and with 2 against two"
    echo "(its default on this machine is $(nproc) CPU workers besides the submitting thread:"
    echo "figures for it are in the last column)."
    echo
    echo "| workload | StarPU, 1 worker | schedrun, 1 device | **1 vs 1** | StarPU, 2 workers | schedrun, 2 devices | **2 vs 2** | StarPU default |"
    echo "|---|---|---|---|---|---|---|---|"
    # label unit starpu-key schedrun-key-fmt default-key(or "") direction(higher|lower|cost);
    # StarPU's figures from $S, schedrun's from $J
    row() {
      local v=() r=()
      for w in 1 2; do
        local sp; sp=$(get "starpu${w}_$3" "$S"); local me; me=$(get "$(printf "$4" "$w")" "$J")
        local q
        if [ "$6" = higher ]; then q="$(ratio "$me" "$sp")x the rate"
        elif [ "$6" = cost ]; then q="$(ratio "$me" "$sp")x as much"; else q="$(ratio "$sp" "$me")x as fast"; fi
        [[ "$q" == n/a* ]] && q="n/a" # a figure of 0 or none: no ratio
        r+=("$q")
        v+=("$sp $2" "$me $2")
      done
      local last=""
      [ -n "$5" ] && last=" $(get "$5" "$S") $2 |"
      echo "| $1 | ${v[0]} | ${v[1]} | **${r[0]}** | ${v[2]} | ${v[3]} | **${r[1]}** |$last"
    }
    row "(a) 100,000 empty single-kernel jobs, submitted one by one" "per s" throughput_tasks_per_s "throughput_%ddev_jobs_per_s" starpu_throughput_tasks_per_s higher
    row "(a') the same through \`schedrun_submit_many\` / \`schedrun_wait_many\`" "per s" throughput_tasks_per_s "many_throughput_%ddev_jobs_per_s" starpu_throughput_tasks_per_s higher
    row "(a2) CPU time per job of (a), all its threads and processes" "us" cpu_us_per_task "cpu_%ddev_us_per_job" starpu_cpu_us_per_task cost
    row "(a3) context switches per job of (a)" "" csw_per_task "csw_%ddev_per_job" starpu_csw_per_task cost
    row "(a4) system calls per job of (a), counted by perf" "" syscalls_per_task "syscalls_%ddev_per_job" starpu_syscalls_per_task cost
    row "(b) submit-and-wait latency of one empty job, median" "us" latency_median_us "latency_%ddev_median_us" starpu_latency_median_us lower
    row "(b') the same, 99th percentile" "us" latency_p99_us "latency_%ddev_p99_us" starpu_latency_p99_us lower
    row "(b2) the same through \`schedrun_submit_wait\`, median" "us" latency_median_us "sync_latency_%ddev_median_us" starpu_latency_median_us lower
    row "(b2') the same, 99th percentile" "us" latency_p99_us "sync_latency_%ddev_p99_us" starpu_latency_p99_us lower
    for w in 1 2; do
      sp=$(get "starpu${w}_chain_ns_per_task" "$S"); me=$(get "chain_${w}dev_ns_per_kernel" "$J")
      cr[$w]="1/$(ratio "$sp" "$me") of the cost"; cv[$w]="$sp ns | $me ns"
    done
    echo "| (c) a chain of 100 tiny kernels x 1,000: per kernel | ${cv[1]} | **${cr[1]}** | ${cv[2]} | **${cr[2]}** | $(get starpu_chain_ns_per_task "$S") ns |"
    row "(d) a chain of 100 dependent jobs (tasks), submitted and waited for: per job, median of 50" "ns" deps100_ns_per_task "dag_deps100_%ddev_ns_per_job" starpu_deps100_ns_per_task cost
    row "(e) a diamond of four saxpy jobs (tasks) on 4,096 floats, submitted and waited for: median of 200" "us" diamond_us "dag_diamond_%ddev_us" starpu_diamond_us cost
    row "(g) 50,000 data-carrying saxpy jobs (tasks), each on its own 1,024 floats: CPU time per job" "us" data_cpu_us_per_task "data_%ddev_cpu_us_per_job" starpu_data_cpu_us_per_task cost
    row "(g') page faults per job of (g), all its threads and processes" "" data_faults_per_task "data_%ddev_faults_per_job" starpu_data_faults_per_task cost
    sp=$(get starpu1_instructions_per_task "$S"); me=$(get instructions_1dev_per_job "$J")
    echo "| (f) instructions per empty job (task) of (a), callgrind | $sp | $me | **$(ratio "$me" "$sp")x as many** | | | | |"
    sp=$(get starpu1_instructions_per_dependent_task "$S"); me=$(get instructions_1dev_per_dependent_job "$J")
    echo "| (f') instructions per dependent job (task) of (d), callgrind | $sp | $me | **$(ratio "$me" "$sp")x as many** | | | | |"
  else
    echo "StarPU is not installed (libstarpu-dev): run \`make bench\` as root to compare."
  fi
  echo
  echo "Commands: \`build/jobs_bench 100000\` and \`STARPU_NCPU=W build/starpu_bench 100000\`"
  echo "(from \`bench/peers/starpu_bench.c\`, built by \`make bench\`), three rounds each,"
  echo "taking turns. The workloads are the same: (a)"
  echo "StarPU submits 100,000 tasks of an empty codelet and waits for all; schedrun submits"
  echo "100,000 jobs of a program with one launch of an empty kernel and collects every"
  echo "result. (b) One task with \`synchronous = 1\`; one \`schedrun_submit\` + \`schedrun_wait\`,"
  echo "5,000 times each; (b2) StarPU's synchronous task against schedrun's synchronous call,"
  echo "\`schedrun_submit_wait\`, which runs a lone job on the calling thread. (c)"
  echo "StarPU submits 100 tasks read-writing one piece of data (each depends on the"
  echo "previous), 1,000 times; schedrun runs 1,000 jobs of a program that is one recorded"
  echo "sequence of 100 launches (its tail) and divides by 100,000 kernels. (d) StarPU"
  echo "submits 100 tasks on one read-write handle and waits for them; schedrun submits a"
  echo "graph of 100 jobs, each handing its one float on to the next (\`dag_bench\`), and"
  echo "waits for them; 50 times each, the median per job. (e) A -> B, C -> D: B and C read"
  echo "A's y as their x, D reads B's y as x and C's as y; D's 4,096 results are checked."
  echo "(g) \`build/data_bench 50000\` against the same \`starpu_bench\` run (its (g)): schedrun"
  echo "submits windows of 256 jobs, each with its own x and y as inputs, y coming back in"
  echo "its result; StarPU registers each task's two vectors in place"
  echo "(\`starpu_vector_data_register\`), submits, and unregisters them (bringing y home),"
  echo "256 at a time. Both check y's first and last element of every job and all 1,024 of"
  echo "every 64th; CPU time and page faults (minor and major) of the whole process,"
  echo "schedrun's host workers included, per job."
  echo "(f) \`valgrind --tool=callgrind\` (the median of three runs) over \`jobs_bench --only-jobs N 1\` and"
  echo "\`STARPU_NCPU=1 starpu_bench --only-tasks N\`, N = 10,000 and 30,000: the difference"
  echo "divided by 20,000 (start-up cancels), every thread and, for schedrun, not the"
  echo "worker process (the kernels' side). Callgrind counts what a spinning thread does"
  echo "too, so both figures include their waits' polling. (f') the same over"
  echo "\`dag_bench --chain-only R\` and \`starpu_bench --chain-only R\` (R rounds of (d)'s chain of"
  echo "100 on one device or worker), R = 10 and 30: the difference divided by 2,000; schedrun's"
  echo "jobs verify their results (the chain's \`expect\`), StarPU's tasks do not."
  echo
  if [ -s "$S" ]; then
    echo "### With a background load"
    echo
    echo "The same jobs with $((2 * $(nproc))) busy loops beside both (two per core), schedrun"
    echo "and StarPU taking turns, medians of three runs each (\`jobs_bench --shipped 50000\`,"
    echo "\`dag_bench --deps-only\`, \`starpu_bench 50000\`)."
    echo
    echo "| workload, loaded | StarPU, 1 worker | schedrun, 1 device | **1 vs 1** | StarPU, 2 workers | schedrun, 2 devices | **2 vs 2** |"
    echo "|---|---|---|---|---|---|---|"
    lrow() { S="$tmp/lstarpu" J="$tmp/load" row "$1" "$2" "$3" "$4" "" "$5"; } # the same, loaded
    lrow "(a) empty single-kernel jobs, submitted one by one" "per s" throughput_tasks_per_s "throughput_%ddev_jobs_per_s" higher
    lrow "(b) submit-and-wait latency, median" "us" latency_median_us "latency_%ddev_median_us" lower
    lrow "(b') the same, 99th percentile" "us" latency_p99_us "latency_%ddev_p99_us" lower
    lrow "(b2) \`schedrun_submit_wait\`, median" "us" latency_median_us "sync_latency_%ddev_median_us" lower
    lrow "(d) a chain of 100 dependent jobs: per job" "ns" deps100_ns_per_task "dag_deps100_%ddev_ns_per_job" cost
    lrow "(e) a diamond of four saxpy jobs" "us" diamond_us "dag_diamond_%ddev_us" cost
    echo
  fi
  echo "| resident memory after 200,000 jobs in waves of 1,000 | | $(get rss_1dev_kib "$J") KiB | $(get rss_2dev_kib "$J") KiB | |"
  echo "| **its growth over the last 100,000 of them** (flat: no growth per job) | | $(get rss_1dev_growth_kib "$J") KiB | $(get rss_2dev_growth_kib "$J") KiB | |"
  echo
  echo "Cost per job with W jobs kept in flight (each completion collected, another"
  echo "submitted; at least 200,000 jobs), \`build/jobs_bench\` in the same run: flat"
  echo "when the bookkeeping is (jobs are kept in id-indexed tables, common/idmap.h)."
  echo
  echo "| jobs in flight | 1 device | 2 devices |"
  echo "|---|---|---|"
  for w in 10 1000 100000 300000; do
    echo "| $w | $(get inflight_1dev_${w}_ns_per_job "$J") ns | $(get inflight_2dev_${w}_ns_per_job "$J") ns |"
  done
  echo
  echo "## What changed, before and after (same run)"
  echo
  echo "The pipeline as first built (every job RECORDed, one message per job at every"
  echo "hop, receivers sleeping at once), then with the reuse fast path, then with the"
  echo "short receive spin, then with batches (the submit queue, EXECUTE_MANY and"
  echo "COMPLETE_MANY, one device submission for many jobs), then with callers running"
  echo "the scheduler's messages themselves while it is idle (a lone job's SUBMIT, the"
  echo "EXECUTED a waiting caller finds): the five modes of \`jobs_bench\`, in this one run."
  echo
  echo "| figure | as first built | + reuse without RECORD | + receive spin | + batches | + callers run the scheduler (shipped) | first built / shipped | before batches / shipped | before callers / shipped |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for d in 1 2; do
    a=$(get plain_throughput_${d}dev_jobs_per_s "$J"); b=$(get nospin_throughput_${d}dev_jobs_per_s "$J")
    n=$(get nobatch_throughput_${d}dev_jobs_per_s "$J"); g=$(get noguest_throughput_${d}dev_jobs_per_s "$J")
    c=$(get throughput_${d}dev_jobs_per_s "$J")
    echo "| throughput, $d device(s) | $a jobs/s | $b jobs/s | $n jobs/s | $g jobs/s | $c jobs/s | $(ratio "$c" "$a")x the rate | $(ratio "$c" "$n")x the rate | $(ratio "$c" "$g")x the rate |"
  done
  for d in 1 2; do
    a=$(get plain_latency_${d}dev_median_us "$J"); b=$(get nospin_latency_${d}dev_median_us "$J")
    n=$(get nobatch_latency_${d}dev_median_us "$J"); g=$(get noguest_latency_${d}dev_median_us "$J")
    c=$(get latency_${d}dev_median_us "$J")
    echo "| latency, $d device(s) | $a us | $b us | $n us | $g us | $c us | $(ratio "$a" "$c")x as fast | $(ratio "$n" "$c")x as fast | $(ratio "$g" "$c")x as fast |"
  done
  for d in 1 2; do
    a=$(get plain_chain_${d}dev_ns_per_kernel "$J"); b=$(get nospin_chain_${d}dev_ns_per_kernel "$J")
    n=$(get nobatch_chain_${d}dev_ns_per_kernel "$J"); g=$(get noguest_chain_${d}dev_ns_per_kernel "$J")
    c=$(get chain_${d}dev_ns_per_kernel "$J")
    echo "| chain, per kernel, $d device(s) | $a ns | $b ns | $n ns | $g ns | $c ns | $(ratio "$a" "$c")x cheaper | $(ratio "$n" "$c")x cheaper | $(ratio "$g" "$c")x cheaper |"
  done
  echo
  echo "## Job graphs (same run)"
  echo
  echo "\`build/dag_bench\`: 1,000 chains of 10 jobs, each adding 1 to a buffer of 1,024 floats"
  echo "that the job before it hands on (a graph per chain), all submitted at once; and one"
  echo "chain at a time, as a graph against the same ten steps driven by the caller (submit,"
  echo "wait, take the output, submit the next job with it as an input). StarPU: 1,000 chains"
  echo "of 10 tasks, each chain read-writing its own vector of 1,024 floats (from the same"
  echo "\`starpu_bench\` runs as above)."
  echo
  echo "| figure | 1 device / worker | 2 devices / workers |"
  echo "|---|---|---|"
  echo "| schedrun, chains of hand-offs: per job | $(get dag_chains_1dev_ns_per_job "$D") ns | $(get dag_chains_2dev_ns_per_job "$D") ns |"
  if [ -s "$S" ]; then
    echo "| StarPU, chains on data handles: per task | $(get starpu1_dag_ns_per_task "$S") ns | $(get starpu2_dag_ns_per_task "$S") ns |"
    echo "| **schedrun / StarPU** | **$(ratio "$(get dag_chains_1dev_ns_per_job "$D")" "$(get starpu1_dag_ns_per_task "$S")")x as much** | **$(ratio "$(get dag_chains_2dev_ns_per_job "$D")" "$(get starpu2_dag_ns_per_task "$S")")x as much** |"
  fi
  echo "| one chain as a graph: per step | $(get dag_graph_1dev_us_per_step "$D") us | $(get dag_graph_2dev_us_per_step "$D") us |"
  echo "| the same steps driven by the caller: per step | $(get dag_caller_1dev_us_per_step "$D") us | $(get dag_caller_2dev_us_per_step "$D") us |"
  echo
  echo "A chain's steps leave together (one SUBMIT_MANY per chain) and run in one device"
  echo "submission, each step working on the buffer the step before it left in place; what"
  echo "is left here is each job's 4 KiB read back for its check, sent back in messages and"
  echo "checked, and a graph's registration per chain, against StarPU's tasks that read and"
  echo "write one handle in place."
  echo
  echo "## What containing kernel faults costs (same run)"
  echo
  echo "Host devices run kernels in a worker process each, so that a kernel that"
  echo "faults, aborts, calls exit() or never returns ends that process and not the"
  echo "program (docs/design.md). \`host_in_process\` runs them in the program instead:"
  echo "the same code without the process hop. Both as shipped otherwise, in this one"
  echo "run of \`jobs_bench\`."
  echo
  echo "| figure | in-process (no containment) | worker processes (shipped) | cost of containment |"
  echo "|---|---|---|---|"
  for d in 1 2; do
    a=$(get inprocess_throughput_${d}dev_jobs_per_s "$J"); c=$(get throughput_${d}dev_jobs_per_s "$J")
    echo "| single-launch throughput, $d device(s) | $a jobs/s | $c jobs/s | $(ratio "$c" "$a")x the rate |"
  done
  for d in 1 2; do
    a=$(get inprocess_latency_${d}dev_median_us "$J"); c=$(get latency_${d}dev_median_us "$J")
    echo "| median latency, $d device(s) | $a us | $c us | $(ratio "$c" "$a")x as long |"
  done
  for d in 1 2; do
    a=$(get inprocess_chain_${d}dev_ns_per_kernel "$J"); c=$(get chain_${d}dev_ns_per_kernel "$J")
    echo "| chain of 100, per kernel, $d device(s) | $a ns | $c ns | $(ratio "$c" "$a")x as much |"
  done
  echo
  echo "Changes that cannot be switched off at run time, measured by hand before and after"
  echo "on this machine, taking turns (single-launch throughput, 1 / 2 devices, unless said):"
  echo
  echo "| change | before | after |"
  echo "|---|---|---|"
  echo "| the encoder's buffer starts at 256 bytes, not msgpack-c's 8 KiB (every message had allocated 8 KiB, freed by another thread); \`jobs_bench 20000\` | 236,703 / 194,169 jobs/s | 334,358 / 425,759 jobs/s |"
  echo "| spinning receivers yield the CPU (sched_yield) while they poll: on 2 cores a bare spin starved the thread with work; \`jobs_bench 20000\` | 143,039 jobs/s, 77 us | 224,076 jobs/s, 17 us |"
  echo "| every message through inproc ZeroMQ and msgpack-c (the mutex queues and the hand-written parser and writer gone); \`jobs_bench --shipped 100000\`, instructions from \`--only-jobs\` under callgrind | 0.87-1.03 M jobs/s (1 device), 16,600 instructions per job | 0.64-0.66 M jobs/s, 17,000-17,500 instructions |"
  echo "| message bodies as msgpack arrays in schema order, not maps (no keys to write, look up and compare) | 17,000-17,500 instructions per job; SUBMIT round trip 700-900 ns | 11,400; 340-360 ns |"
  echo "| the scheduler tries the last program looked up first, keeps the slot \`pick_device\` found, copies names without snprintf | 11,400 instructions per job | 10,500 |"
  echo "| a job released by its predecessors alone is placed by the releasing thread (no wake of the scheduler's thread); a chain of 100 dependent jobs | 24-25 us per job | 15-16 us |"
  echo "| waits stop spinning once a yield has lost a time slice (\`common/spin_gauge.h\`); with 4 busy loops on the 2 cores, \`jobs_bench --shipped 20000\` | 30-38k jobs/s, 4.0 ms median latency | 110-500k jobs/s, 50-60 us |"
  echo "| SUBMITs pushed while the scheduler has not taken the last one are gathered into one SUBMIT_MANY, in columns; instructions per job from \`jobs_bench --only-jobs\` under callgrind, throughput from \`jobs_bench --shipped 50000\`, 1 device | 10,500 instructions, 0.57-0.68 M jobs/s | 5,600-5,700, 1.0-1.1 M jobs/s |"
  echo "| a wait without a timeout that does not spin runs its lone job itself when the job's EXECUTE is still queued; with 4 busy loops on the 2 cores, median latency, \`jobs_bench --shipped 20000\` | 50-100 us | 18-22 us |"
  echo "| a chain's next step runs on the thread that filed its predecessor's completion when no device has work queued; \`dag_bench --deps-only\`, per dependent job, idle / with 4 busy loops | 14-21 us / 165-360 us | 8-12 us / 40-57 us |"
  echo "| jobs released together are placed on the releasing thread in one round, and one device's share of them runs there when no device has work queued; a diamond of four saxpy jobs, \`dag_bench --deps-only\`, 1 / 2 devices | 123-160 / 123-146 us | 47-60 / 47-62 us |"
  echo "| a batch of one job leaves as a plain EXECUTE, and a chain step formats no error text before an error; instructions per step of a chain of 100 under callgrind | 71,000 | 49,000 |"
  echo "| a released job's followers that wait only for it leave with it in one SUBMIT_MANY and run in one device submission, their hand-offs kept on the device (a chain works on its buffer in place); \`dag_bench --deps-only\`, before and after taking turns, chain of 100 per job / diamond, 1 and 2 devices | 8.6-10.9 us / 54-90 us | 1.6-2.2 us / 42-53 us |"
  echo "| staging blocks under 1 MiB keep their pages (a batch staging 100 KB paid a page fault per page in both processes); the diamond's first job | 100 us | 10-35 us |"
  echo "| a batch fills a buffer from its \`init\` contents kept on the device (one copy in the worker, none in the library); the diamond, 1 / 2 devices, 2,000 rounds, p50 | 42-48 / 42-50 us | 36-39 / 36-45 us |"
  echo "| a batch's staging block is kept for the next batch (up to 64 MiB per device), not freed and hole-punched after each; \`data_bench 20000\`, CPU per job and page faults per job, 1 / 2 devices | 43.5 / 27.1 us, 4.63 / 3.40 faults | 10.5 / 9.7 us, 0.54 / 0.19 faults |"
  echo "| a job's bytes of 4 KiB or more are lent to its messages (a ticket each), not copied into them and out again; the same | 10.5 / 9.7 us | 7.1 / 6.8 us |"
  echo "| freed blocks of job bytes are pooled by length (up to 64 MiB), so that outputs made on a device's thread and freed on the caller's keep their pages; the same, page faults per job, start-up included | 0.49 / 0.34 | 0.11 / 0.06 |"
  echo "| msgpack-c's packer and unpacker instantiated from its templates: values appended to the buffer directly, and checked and written into the message as the unpacker reads them (no scan, no object tree); \`breakdown_bench\` codec figures, and instructions of a lone job (\`schedrun_submit\` + \`schedrun_wait\`, spinning off) under callgrind | SUBMIT 330 ns, COMPLETE 610 ns; 40,100 instructions per lone job | 210-220 ns, 370 ns; 35,700 |"
  echo "| host kernels built with AVX-512 where the CPU has it (masked stores through mask registers; AVX2's \`vmaskmovps\` store is microcoded on AMD's cores); an AMD EPYC, 7fd6119 and 9d2e1a8 taking turns, three rounds: \`kernel_bench\` saxpy per element / \`dag_bench --diamond-only 1 200\` and \`2 200\` / 2,000 saxpy jobs on 4,096 floats, \`sched-run\` wall time | 1.01-1.11 ns / 25.8-26.2 and 25.9-26.1 us / 7.7-9.1 ms | 0.20-0.28 ns / 19.7-25.0 and 20.0-25.6 us / 4.8-6.5 ms |"
  echo "| kernels read their thread-local indices through \`__tls_get_addr\`, not TLS descriptors, below glibc 2.38 (glibc bug 29039 gave a module a stale TLS block: wrong results); \`blocks_bench\`, fefbea3 and 226c6bf taking turns, three rounds: tree reduction / barrier-free kernel, ns per element | 250-266 / 1.7 | 311-350 / 1.4-1.9 (a quarter more for the barriers' fiber switches) |"
  echo "| a registered array from \`schedrun_host_alloc\` is used in place (the buffer mapped onto it in the worker), not copied in and out; \`data_bench 20000\`, 1,024-float saxpy bound to registered arrays, CPU per job: a new array each job / a chain of jobs on one array | 13-20 / 23-26 us (copied) | 29-55 / 19-38 us, 2.0 / 0.0 faults per job (in place) |"
  echo "| a lone job is posted to its host device by the submitting thread and collected by its wait (no thread of the library woken); 20,000 lone jobs, each \`schedrun_submit\` + \`schedrun_wait\`, one host device (\`jobs_bench --only-latency 1 20000\`, and the same loop built against the library before), taking turns, median, idle / with 4 busy loops | 5.8-9.2 us / 13.1-29.4 us | 3.9-4.3 us / 13.1-20.4 us |"
  echo "| after a lone job's request the host worker spins through its window even where the cores are shared (batches keep the spin gauge); with 4 busy loops on the 2 cores, median latency of \`jobs_bench --only-latency 1 20000\` / throughput of \`jobs_bench --shipped 20000\`, 1 device, taking turns | 13-20 us / 288-411k jobs/s | 9.4-9.6 us / 280-517k jobs/s |"
  echo "| the library's small blocks (up to 1 KiB) come from free lists each thread keeps by size class, with a depot the threads share, in front of the C library's malloc (\`common/alloc.h\`): a burst of a hundred jobs' objects no longer goes through the arena's bins; a chain of 100 dependent jobs, instructions per job under callgrind (\`dag_bench --chain-only\` 10 against 30 rounds) / \`dag_bench --deps-only\` per job, 1 and 2 devices, 15 runs taking turns | 15,300 / 1,400-2,100 ns | 9,750 / 800-830 ns |"
  echo "| a device's batch is up to 1024 jobs, answered every 512 (it was 256, answered every 128), and the allocator's depot keeps up to 64 MiB (it kept 16 batches a class): beside busy threads each hop of a batch waits for a core; with 4 busy loops on the 2 cores, \`jobs_bench --shipped 50000\`, 1 / 2 devices, 7729cb9 and 291d759 taking turns, five rounds, median (range) | 400k (215-460k) / 544k (478-660k) jobs/s | 793k (678k-1.16M) / 713k (625-813k) jobs/s |"
  echo
  echo "## Where a job's time goes"
  echo
  echo "One empty job at a time on one host device; medians of 2,000 jobs, from each"
  echo "job's timeline (\`build/breakdown_bench\`)."
  echo
  echo "| phase | every job RECORDed | shipped (reuse without RECORD) |"
  echo "|---|---|---|"
  for ph in client_to_scheduler scheduler_work record_roundtrip to_execute execute back_to_scheduler complete_to_caller total; do
    echo "| ${ph//_/ } | $(get phase_always_${ph}_us "$B") us | $(get phase_fast_${ph}_us "$B") us |"
  done
  echo
  echo "| the floor and the codec | figure |"
  echo "|---|---|"
  echo "| raw inproc ZeroMQ round trip between two sleeping threads (two hops) | $(get zmq_roundtrip_us "$B") us |"
  echo "| encode + decode a SUBMIT | $(get codec_submit_ns "$B") ns |"
  echo "| encode + decode an EXECUTE (3 bindings) | $(get codec_execute_ns "$B") ns |"
  echo "| encode + decode a COMPLETE | $(get codec_complete_ns "$B") ns |"
  echo "| record lookup on reuse, in the record actor | skipped: the scheduler knows nothing changed |"
  echo "| replay dispatch per launch node (below) | $(get dispatch_ns "$R") ns |"
  echo
  echo "A hop costs what waking the receiving thread costs: the raw round trip above,"
  echo "where both threads sleep, is the slow case. Receivers therefore poll (yielding the"
  echo "CPU) for 30 us before they sleep (\`spin_us\`), so a pipeline's next message finds"
  echo "them awake."
  echo
  echo "## Replay and recording"
  echo
  echo "| what | figure |"
  echo "|---|---|"
  echo "| a tiny kernel called directly (its own cost), per launch | $(get direct_ns "$R") ns |"
  echo "| the same 1000 launches replayed from a recorded sequence, per launch (kernels in this process) | $(get replay_ns "$R") ns |"
  echo "| **dispatch per launch node, beside the kernel** (replay - direct) | **$(get dispatch_ns "$R") ns** |"
  echo "| the same launches run eagerly (arguments evaluated and packed per launch), per launch | $(get eager_ns "$R") ns |"
  echo "| **eager / replay** | **$(get eager_over_replay "$R")x** |"
  echo "| replayed in the device's worker process (shipped; one request per sequence), per launch | $(get worker_replay_ns "$R") ns |"
  echo "| **dispatch per launch node in the worker, the request included** (worker replay - direct) | **$(get worker_dispatch_ns "$R") ns** |"
  echo "| run eagerly through the worker (one request per launch), per launch | $(get worker_eager_ns "$R") ns |"
  echo "| RECORD of the 1000-launch program: create | $(get record_create_us "$R") us |"
  echo "| RECORD: update in place (all 1000 nodes' scalars changed) | $(get record_update_us "$R") us |"
  echo "| RECORD: reuse (nothing changed, record_always) | $(get record_reuse_us "$R") us |"
  echo "| memory per recorded node, all in | $(get bytes_per_node "$R") bytes |"
  echo "| **memory per recorded node beside its arguments** | **$(get bytes_per_node_beside_args "$R") bytes** |"
  echo
  echo "Command: \`build/replay_bench\`. Replay and eager run on the host backend (one"
  echo "block of one thread per launch). RECORD times are the RECORD -> RECORDED round"
  echo "trip seen by the scheduler (two message hops included), medians of 9. Memory is"
  echo "the allocator's growth between recordings of 1,000 and 101,000 nodes; each node"
  echo "keeps its two 8-byte argument slots twice (the record actor compares them, the"
  echo "backend replays them), 32 bytes counted as arguments."
  echo
  echo "## Recording updates cost what changed"
  echo
  echo "A RECORD through the record actor (every job sent there), for programs of N"
  echo "launches. *update one*: one launch reads \$job, the other N - 1 cannot change;"
  echo "*update all*: every launch reads \$job; *reuse*: nothing changed. Shipped: only"
  echo "the steps that depend on the job are evaluated again (while the buffers and"
  echo "kernels are those the recording was made with); *whole program*: every RECORD"
  echo "walks and compares the whole program (\`record_whole_program\`), as before. Same run."
  echo
  echo "| N | create | update one | update all | reuse | update one, whole program | update all, whole program | **create / update one** |"
  echo "|---|---|---|---|---|---|---|---|"
  for n in 100 1000 10000 100000; do
    echo "| $n | $(get record_${n}_create_us "$RB") us | $(get record_${n}_update_one_us "$RB") us | $(get record_${n}_update_all_us "$RB") us | $(get record_${n}_reuse_us "$RB") us | $(get record_${n}_update_one_whole_us "$RB") us | $(get record_${n}_update_all_whole_us "$RB") us | **$(ratio "$(get record_${n}_create_us "$RB")" "$(get record_${n}_update_one_us "$RB")")x** |"
  done
  echo
  echo "Command: \`build/record_bench\` (one host device; medians of 5; RECORD -> RECORDED"
  echo "as the scheduler sees it, two message hops included)."
  echo
  echo "## Kernels without barriers on a host device"
  echo
  echo "| saxpy (y = a x + y), blocks of 256 threads | figure |"
  echo "|---|---|"
  echo "| schedrun, one host device: time per element (the loop over a block's threads as vector code: AVX-512 where the CPU has it, else AVX2) | $(get saxpy_schedrun_ns_per_element "$tmp/kernel") ns |"
  echo "| the same loop as plain C, \`-O3\`, baseline x86-64, one thread | $(get saxpy_plain_c_ns_per_element "$tmp/kernel") ns |"
  echo "| instructions per element in the kernel, callgrind | $(get saxpy_instructions_per_element "$tmp/kernel") |"
  echo
  echo "Commands: \`build/kernel_bench\` (4,194,304 floats; a job of 11 launches less one of 1,"
  echo "medians of 7); instructions: \`valgrind --tool=callgrind --toggle-collect=hw_handle"
  echo "build/kernel_bench --in-process 1048576 T\` for T = 11 and T = 1, the difference"
  echo "over 10 x 2^20 (valgrind cannot run AVX-512, so under it kernels are AVX2 code)."
  echo "Before kernels were built as vector code (commit 9939773, the same"
  echo "commands): 11.13 instructions and 0.58-0.59 ns per element, against 1.93 and"
  echo "0.19-0.22 ns after, taking turns; the plain loop took 0.12-0.18 ns (it is bound"
  echo "by memory bandwidth here)."
  echo
  echo "## Blocks of cooperating threads on a host device"
  echo
  echo "| kernel on 4,194,304 floats, blocks of 256 | execute time per element, median of 7 |"
  echo "|---|---|"
  echo "| a tree reduction in \`__shared__\` memory, nine \`__syncthreads()\` per thread (each block's threads as fibers) | $(get blocks_tree_ns_per_element "$tmp/blocks") ns |"
  echo "| the same sums with no barrier (plain loops) | $(get blocks_plain_ns_per_element "$tmp/blocks") ns |"
  echo
  echo "| GEMM, 512 x 512 x 512, single precision | GFLOP/s, median of 5 |"
  echo "|---|---|"
  echo "| schedrun, one host device: the tiled kernel of \`examples/workloads/gemm.yaml\` (16 x 16 tiles in shared memory) | $(get gemm_schedrun_gflops "$tmp/blocks") |"
  echo "| the same tiling as plain C loops, \`-O3\`, one thread (the limit here) | $(get gemm_plain_c_gflops "$tmp/blocks") |"
  echo
  echo "Commands: \`build/blocks_bench\`, \`build/gemm_bench\` (one host device; each blocks job also fills its input"
  echo "first, under 1 ns per element). Every barrier switches each of a block's threads"
  echo "out and in again, about 40 ns a switch: loop fission at barriers would remove"
  echo "them where the compiler can prove it, and is not done."
  echo
  echo "## Compiles"
  echo
  echo "| what | figure |"
  echo "|---|---|"
  echo "| 16 distinct kernels, pool of 1 worker (cold private cache) | $(get compile_pool_1_ms "$C") ms |"
  echo "| 16 distinct kernels, pool of 2 workers (cold private cache) | $(get compile_pool_2_ms "$C") ms |"
  echo "| **speed-up, 2 workers vs 1** | **$(get compile_pool_speedup "$C")x** |"
  echo "| a cold compile's CPU time (the compiler's processes), per kernel of those 16 | $(get compile_cpu_per_kernel_ms "$C") ms |"
  echo "| the same for a small kernel (saxpy) | $(get compile_small_kernel_cpu_ms "$C") ms |"
  echo "| \`sched-run configs/saxpy.yaml\` (2 kernels), cold disk cache | $((saxpy_cold / 1000)) ms |"
  echo "| \`sched-run configs/saxpy.yaml\`, warm disk cache | $(awk "BEGIN {printf \"%.1f\", $saxpy_warm / 1000}") ms |"
  echo "| **cold / warm, saxpy** | **$(ratio "$saxpy_cold" "$saxpy_warm")x** |"
  echo "| \`sched-run\` on the 16-kernel config, cold disk cache | $((k16_cold / 1000)) ms |"
  echo "| \`sched-run\` on the 16-kernel config, warm disk cache | $(awk "BEGIN {printf \"%.1f\", $k16_warm / 1000}") ms |"
  echo "| **cold / warm, 16 kernels** | **$(ratio "$k16_cold" "$k16_warm")x** |"
  echo "| COMPILE -> COMPILED for 16 kernels, all memory-cache hits | $(get memory_hit_program_us "$C") us ($(get memory_hit_per_kernel_us "$C") us per kernel) |"
  echo
  echo "Commands: \`build/compile_bench 5\` (pool, CPU and memory-hit figures); the cold/warm"
  echo "figures time whole \`sched-run -q\` processes with the cache directory emptied"
  echo "before each cold run (3 warm runs after each cold one). The 16-kernel config is"
  echo "\`build/compile_bench --print-config\`. A warm run is mostly process start-up:"
  echo "loading libzmq and its dependencies alone takes about 3 ms here, so a config"
  echo "with two kernels that compile in parallel stays under 20x."
  echo
  echo "Kernels are compiled at \`-O3\` with AVX2 so that they become vector code (above):"
  echo "at the commit before (9939773), the same \`compile_bench 3\` taking turns gave"
  echo "61-66 ms per kernel of the 16 and 49-51 ms for saxpy, against 77-80 and 82 ms"
  echo "after. Before the prelude stopped including the C++ standard headers, it"
  echo "was 350 ms per kernel."
} > "$out"
# across MPI ranks, and the cluster model calibrated with it (sched-run built with MPI)
if command -v mpirun >/dev/null && [ -x "$build/sched-run-mpi" ]; then
  { echo; bench/ranks.sh "$build"; } >> "$out"
fi
# placement by performance model over a CUDA device (the driver double) and a host device
{ echo; bench/placement.sh "$build" 4; } >> "$out"
echo "wrote $out" >&2
