#!/usr/bin/env bash
# Does cpulab's timing loop add anything to a round trip? Compares cpulab's same-CPU pipe round
# trip with `perf bench sched pipe` pinned to the same CPU, alternating the two several times in
# one run so drift and background load hit both alike, and prints each pair, the medians and
# the ratio cpulab/perf (target: <= 1.02). Also prints cpulab's peak RSS (target: < 20 MB).
#
# Like is compared with like: `perf bench sched pipe` runs two processes by default and two
# threads with -T; this script runs `cpulab pingpong --processes` against the former and plain
# `cpulab pingpong` (threads) against the latter. Both send 4-byte messages over two pipes, one
# round trip per loop. perf's figure is a mean (total time / loops), so cpulab's mean is used.
#
# Medians are the headline; on a machine where other jobs run, the fastest round of each (also
# printed) is the better estimate of the intrinsic cost, since other load only ever adds time.
#
# Usage: scripts/bench-pipe.sh [rounds]   (env: CPU=0 LOOPS=300000 MAX_TIME=1.5 MODES="processes threads")
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
cpu=${CPU:-0}
loops=${LOOPS:-300000}
max_time=${MAX_TIME:-1.5}
modes=${MODES:-processes threads}

for tool in perf jq taskset /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench-pipe: $tool is required" >&2; exit 2; }
done
cargo build --release --quiet
bin=target/release/cpulab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

peak_kb=0
echo "cpulab $($bin --version | cut -d' ' -f2), perf bench sched pipe -l $loops, CPU $cpu, $rounds rounds"
for mode in $modes; do
    if [ "$mode" = threads ]; then perf_flag=-T; cl_flag=; else perf_flag=; cl_flag=--processes; fi
    echo
    echo "== two $mode =="
    printf '%-6s %14s %14s %8s\n' round "perf us/op" "cpulab us/rt" ratio
    : >"$tmp/perf.$mode"; : >"$tmp/cpulab.$mode"
    for r in $(seq 1 "$rounds"); do
        p=$(taskset -c "$cpu" perf bench sched pipe $perf_flag -l "$loops" | awk '/usecs\/op/ {print $1}')
        /usr/bin/time -f '%M' -o "$tmp/rss" "$bin" --quiet pingpong $cl_flag --method pipe \
            --pairs "$cpu:$cpu" --max-time "$max_time" --target-ci 0 --no-load-check --json \
            >"$tmp/out.json"
        c=$(jq '.runs[0].mean_rtt_ns.mean / 1000' "$tmp/out.json")
        kb=$(tail -n1 "$tmp/rss")
        [ "$kb" -gt "$peak_kb" ] && peak_kb=$kb
        echo "$p" >>"$tmp/perf.$mode"; echo "$c" >>"$tmp/cpulab.$mode"
        printf '%-6s %14.3f %14.3f %8.3f\n' "$r" "$p" "$c" "$(echo "$c $p" | awk '{print $1/$2}')"
    done
    mp=$(median <"$tmp/perf.$mode"); mc=$(median <"$tmp/cpulab.$mode")
    printf '%-6s %14.3f %14.3f %8.3f   (cpulab/perf of the medians, target <= 1.02)\n' \
        median "$mp" "$mc" "$(echo "$mc $mp" | awk '{print $1/$2}')"
    # Background load only ever adds time, so the fastest round is the least disturbed one.
    bp=$(sort -g "$tmp/perf.$mode" | head -n1); bc=$(sort -g "$tmp/cpulab.$mode" | head -n1)
    printf '%-6s %14.3f %14.3f %8.3f   (fastest rounds: the least disturbed by other load)\n' \
        best "$bp" "$bc" "$(echo "$bc $bp" | awk '{print $1/$2}')"
done
echo
echo "peak RSS of cpulab pingpong: $((peak_kb / 1024)).$(((peak_kb % 1024) * 10 / 1024)) MB ($peak_kb KiB; target < 20 MB)"
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "load average during the run: $load (figures are only meaningful on a quiet machine)"
