#!/usr/bin/env bash
# Does cpulab messaging measure what `perf bench sched messaging` measures? Alternates one run of
# each with the same shape (groups, senders and receivers per group, messages, processes or
# threads, sockets or pipes) several times in one run, so drift and background load hit both
# alike, and prints each pair, the medians and the ratio cpulab/perf (target: within 1.10).
#
# perf's senders per group are fixed at 20 in the versions without `-f`; cpulab is run with 20.
#
# Usage: scripts/bench-messaging.sh [rounds]   (env: GROUPS_N=10 LOOPS=100 THREADS=0 PIPE=0
#        CPULAB=target/debug/cpulab)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
groups=${GROUPS_N:-10}
fds=20
loops=${LOOPS:-100}
for tool in perf jq; do
    command -v "$tool" >/dev/null || { echo "bench-messaging: $tool is required" >&2; exit 2; }
done
bin=${CPULAB:-target/debug/cpulab}
[ -x "$bin" ] || cargo build --quiet
perf_args=(-g "$groups" -l "$loops")
cpulab_args=(--groups "$groups" --senders "$fds" --messages "$loops")
if [ "${THREADS:-0}" = 1 ]; then perf_args+=(-t); cpulab_args+=(--tasks threads); fi
if [ "${PIPE:-0}" = 1 ]; then perf_args+=(-p); cpulab_args+=(--pipe); fi

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %12s %12s\n' round "cpulab s" "perf s"
c_all=() p_all=()
for r in $(seq "$rounds"); do
    c=$("$bin" messaging "${cpulab_args[@]}" --repeats 1 --no-load-check --quiet --json | jq '.runs[0].wall_s')
    p=$(perf bench sched messaging "${perf_args[@]}" 2>/dev/null | awk '/Total time/ {print $3}')
    printf '%-6s %12.4f %12.4f\n' "$r" "$c" "$p"
    c_all+=("$c") p_all+=("$p")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
cm=$(median "${c_all[@]}") pm=$(median "${p_all[@]}")
echo "median  cpulab ${cm} s  perf ${pm} s  ratio cpulab/perf $(awk -v c="$cm" -v p="$pm" 'BEGIN {printf "%.3f", c/p}')"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
