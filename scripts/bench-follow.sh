#!/usr/bin/env bash
# What following the host costs: the CPU time of the exporter's ranking thread (`cpulab-targets`)
# with no target named, for two cpulab binaries side by side in one run, beside a process with
# many threads. Prints each binary's CPU-s/s and their ratio (after / before).
#
#   BEFORE=/tmp/cpulab-before AFTER=target/release/cpulab THREADS=400 MODE=wake scripts/bench-follow.sh
#
# BEFORE is the build to compare against: a release build of the previous head copied aside (as
# docs/benchmarks.md's figures were taken), or by default /usr/bin/cpulab, the installed package.
# MODE=wake: each thread sleeps 1 s in a loop (each wakes once a second);
# MODE=idle: each thread blocks for good (never woken).
# AFTER is not built here: run `cargo build --release` first. Needs root (the exporters' BPF
# programs). Both exporters run at once, on loopback ports (the probe is off by default);
# everything started here ends with the script.
set -euo pipefail
before=${BEFORE:-/usr/bin/cpulab}
after=${AFTER:-target/release/cpulab}
threads=${THREADS:-400}
mode=${MODE:-wake}
secs=${SECS:-30}
for b in "$before" "$after"; do
    [ -x "$b" ] || { echo "bench-follow: $b is not an executable; build it or set BEFORE/AFTER" >&2; exit 2; }
done

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

python3 - "$threads" "$mode" <<'EOF' &
import sys, threading, time
n, mode = int(sys.argv[1]), sys.argv[2]
ev = threading.Event()
def wake():
    while True:
        time.sleep(1)
for _ in range(n):
    threading.Thread(target=wake if mode == "wake" else ev.wait, daemon=True).start()
while True:
    time.sleep(3600)
EOF
pids+=($!)

port=19311
for b in "$before" "$after"; do
    "$b" exporter --web.listen-address "127.0.0.1:$port" --no-history \
        --log.level error >/dev/null 2>&1 &
    pids+=($!)
    port=$((port + 1))
done
sleep 5 # both started and ranked once

# utime + stime (clock ticks) of a process's thread named cpulab-targets.
ticks() {
    local pid=$1 t
    for t in /proc/"$pid"/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = cpulab-targets ]; then
            awk '{ s = $0; sub(/.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "$t/stat"
            return
        fi
    done
    echo "bench-follow: no cpulab-targets thread in pid $pid" >&2
    exit 1
}
hz=$(getconf CLK_TCK)
b0=$(ticks "${pids[1]}"); a0=$(ticks "${pids[2]}")
sleep "$secs"
b1=$(ticks "${pids[1]}"); a1=$(ticks "${pids[2]}")
host_threads=$(ls -d /proc/[0-9]*/task/* 2>/dev/null | wc -l)
awk -v b=$((b1 - b0)) -v a=$((a1 - a0)) -v hz="$hz" -v s="$secs" -v n="$threads" -v m="$mode" \
    -v h="$host_threads" -v ld="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
    printf "ranking thread CPU over %d s, %d threads (%s) beside it, %d threads on the host, load %s\n", s, n, m, h, ld
    printf "  before: %.4f CPU-s/s\n  after:  %.4f CPU-s/s\n", b / hz / s, a / hz / s
    if (b > 0) printf "  ratio after/before: %.2f (clock-tick resolution: +-%.4f CPU-s/s each)\n", a / b, 1 / hz / s
    else print "  ratio: not available, because the before binary used under one clock tick"
}'
