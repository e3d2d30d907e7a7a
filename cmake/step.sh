#!/usr/bin/env bash
# The Makefile's build steps, quiet: the whole output goes to a log in the
# build directory, and the terminal gets one line per step, the progress of a
# build, every warning and, when a step fails, the end of its log.
#
#   step.sh configure DIR [CMAKE ARGS...]   configure DIR (log: DIR/configure.log)
#   step.sh build DIR [TARGET...]           build TARGETs, or everything (log: DIR/build.log)
#
# JOBS (default: the number of cores) is the build's parallelism.
set -uo pipefail

what=${1:?usage: step.sh configure|build DIR ...}
dir=${2:?usage: step.sh configure|build DIR ...}
shift 2
mkdir -p "$dir"

fail() { # LOG: the end of the log, then exit 1
  echo "  ... the last lines of $1:"
  tail -n 40 "$1" | sed 's/^/  | /'
  exit 1
}

case "$what" in
configure)
  log=$dir/configure.log
  if ! cmake -S . -B "$dir" "$@" >"$log" 2>&1; then
    echo "configure $dir: FAILED"
    fail "$log"
  fi
  type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$dir/CMakeCache.txt")
  echo "configure $dir: done (${type:-no build type}; log: $log)"
  # schedrun's own notes (which backends are built) and any CMake warning
  grep -E '^-- schedrun:|CMake Warning' "$log" | sed 's/^-- /  /'
  ;;
build)
  log=$dir/build.log
  targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  echo "build $dir: ${*:-everything}"
  # progress at each finished target; warnings and errors as the compiler
  # wrote them; nothing else
  cmake --build "$dir" -j "${JOBS:-$(nproc)}" "${targets[@]}" 2>&1 |
    tee "$log" |
    grep --line-buffered -E '^\[ *[0-9]+%\] Built target|warning:|error:|Error [0-9]' |
    sed -u 's/^\[ *\([0-9]*\)%\] Built target /  [\1%] built /'
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "build $dir: FAILED"
    fail "$log"
  fi
  compiled=$(grep -cE '(Building|Linking) ' "$log")
  if [ "$compiled" -eq 0 ]; then echo "build $dir: up to date"; else echo "build $dir: done ($compiled files compiled or linked)"; fi
  ;;
*)
  echo "step.sh: unknown step '$what'" >&2
  exit 2
  ;;
esac
