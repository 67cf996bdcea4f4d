#!/usr/bin/env bash
# Does `cpulab try` measure what a person measures by hand? Sets guest_halt_poll_ns the manual
# way (echo to sysfs, `perf bench sched pipe` with its two processes pinned to different CPUs,
# echo the original value back) and with `cpulab try` on the same cross-CPU pipe round trip,
# alternating the two several times in one run, and prints both changed/baseline ratios side by
# side (target: they agree within 10%).
#
# By hand: `taskset -c A perf bench sched pipe` forks its partner, which is then moved to CPU B
# with `taskset -p`; the round trips before the move (same-CPU, fast) are cancelled by taking
# the difference of a LOOPS/4 and a LOOPS run (see cross_pipe). Each hand trial alternates
# baseline and changed runs (ABAB..., ROUNDS of each), like cpulab does; its ratio is
# mean(changed) / mean(baseline).
# cpulab: `cpulab try ... --measure 'pingpong:--pairs A:B --processes ...'` (two processes, one
# pipe round trip per loop, as perf does), ROUNDS rounds per side; its ratio is the one it reports.
#
# Needs root (it writes /sys/module/haltpoll/parameters/guest_halt_poll_ns) and restores the
# original value on exit, Ctrl-C or error.
#
# Usage: scripts/bench-try.sh [iterations]  (env: VALUE=200000 A=0 B=1 LOOPS=20000 ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/.."

iterations=${1:-3}
value=${VALUE:-200000}
a=${A:-0}
b=${B:-1}
loops=${LOOPS:-20000}
rounds=${ROUNDS:-3}
param=/sys/module/haltpoll/parameters/guest_halt_poll_ns

for tool in perf jq taskset; do
    command -v "$tool" >/dev/null || { echo "bench-try: $tool is required" >&2; exit 2; }
done
[ -w "$param" ] || { echo "bench-try: needs root and the haltpoll module ($param)" >&2; exit 2; }
cargo build --release --quiet
bin=target/release/cpulab
orig=$(cat "$param")
tmp=$(mktemp -d)
trap 'echo "$orig" > "$param"; rm -rf "$tmp"' EXIT INT TERM

# One perf bench run of N loops with its forked partner moved to CPU b; prints the run's total
# time in microseconds (perf's usecs/op times N).
perf_run() {
    local n=$1
    taskset -c "$a" perf bench sched pipe -l "$n" >"$tmp/perf.out" 2>&1 &
    local perf_pid=$! child=""
    for _ in $(seq 1 200); do
        child=$(cat /proc/"$perf_pid"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -m1 . || true)
        [ -n "$child" ] && break
        sleep 0.005
    done
    [ -n "$child" ] && taskset -p -c "$b" "$child" >/dev/null 2>&1 || true
    wait "$perf_pid"
    awk -v n="$n" '/usecs\/op/ {print $1 * n}' "$tmp/perf.out"
}

# One cross-CPU pipe round trip figure by hand, in microseconds. perf forks its partner on CPU a
# and the script can only move it to b a few milliseconds later; at ~5 us per same-CPU round
# trip, that is 1,000-2,000 fast round trips that would pull a single run's mean down by 5-10%.
# So two runs are taken, of LOOPS/4 and LOOPS loops, and the figure is the difference of their
# total times over the difference of their loops: what both runs share (the start before the
# move, process creation) cancels.
cross_pipe() {
    local short=$((loops / 4))
    local t_short t_long
    t_short=$(perf_run "$short")
    t_long=$(perf_run "$loops")
    echo "$t_long $t_short $loops $short" | awk '{print ($1 - $2) / ($3 - $4)}'
}

mean() { awk '{s+=$1} END {print s/NR}'; }

echo "guest_halt_poll_ns $orig -> $value; cross-CPU pipe round trip (CPUs $a and $b)"
echo "by hand: perf bench sched pipe -l $loops, $rounds baseline + $rounds changed runs, ABAB"
echo "cpulab:  cpulab try, pingpong --pairs $a:$b --processes, $rounds rounds per side"
echo
printf '%-4s %12s %12s %9s   %12s %12s %9s %9s\n' iter "hand A us" "hand B us" "hand B/A" \
    "cpulab A us" "cpulab B us" "cpulab" "cpulab/hand"
for i in $(seq 1 "$iterations"); do
    : >"$tmp/A"; : >"$tmp/B"
    for _ in $(seq 1 "$rounds"); do
        echo "$orig" >"$param"; cross_pipe >>"$tmp/A"
        echo "$value" >"$param"; cross_pipe >>"$tmp/B"
    done
    echo "$orig" >"$param"
    ha=$(mean <"$tmp/A"); hb=$(mean <"$tmp/B")
    hr=$(echo "$hb $ha" | awk '{print $1/$2}')
    "$bin" --quiet try "haltpoll.guest_halt_poll_ns=$value" --rounds "$rounds" --json \
        --measure "pingpong:--pairs $a:$b --processes --max-time 1 --target-ci 0 --no-load-check" \
        >"$tmp/try.json"
    [ "$(cat "$param")" = "$orig" ] || { echo "bench-try: cpulab left $param changed" >&2; exit 1; }
    sel='.trial.comparisons[] | select(.name | startswith("rtt_ns"))'
    ca=$(jq "$sel | .baseline.mean / 1000" "$tmp/try.json")
    cb=$(jq "$sel | .changed.mean / 1000" "$tmp/try.json")
    cr=$(jq "$sel | .ratio.mean" "$tmp/try.json")
    printf '%-4s %12.2f %12.2f %9.3f   %12.2f %12.2f %9.3f %9.3f\n' "$i" "$ha" "$hb" "$hr" \
        "$ca" "$cb" "$cr" "$(echo "$cr $hr" | awk '{print $1/$2}')"
    echo "$cr $hr" | awk '{print $1/$2}' >>"$tmp/agree"
done
echo
echo "median cpulab/hand over $iterations iterations: $(sort -g "$tmp/agree" | awk '{v[NR]=$1} END {printf "%.3f (range %.3f-%.3f)", (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2), v[1], v[NR]}')"
echo
echo "cpulab/hand near 1.00 (within 0.90-1.10) means cpulab try measures what the manual procedure does"
echo "load average during the run: $(cut -d' ' -f1-3 /proc/loadavg) (2 vCPUs; figures are only meaningful on a quiet machine)"
