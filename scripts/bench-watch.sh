#!/usr/bin/env bash
# What `cpulab watch` costs a live PostgreSQL: pgbench SELECT 1 throughput with and without a
# watch attached, alternated (ABAB) so drift and background load fall on both sides alike.
#
# A private cluster (0700 temp directory, Unix socket only) runs pinned to CPU 0; `pgbench -c 1`
# runs pinned to CPU 1 (one CPU apart: tens of thousands of cross-CPU wakeups per second), then
# to CPU 0 (the same-CPU pair). Each round runs pgbench once without a watch, then once with
# `cpulab watch --comm postgres,pgbench --mechanism M` attached for each mechanism M in turn
# (bpf: raw tracepoints; bpf-tracepoint; perf), so the mechanisms are compared side by side
# under the same conditions; odd rounds run without a watch first, even rounds last (ABBA), so
# a drift in the machine's speed does not favour either side. It
# prints, per placement and mechanism, the throughput ratio (with / without), the spread of the
# per-round ratios, the events the watch lost, its own CPU and its peak RSS (/usr/bin/time -v).
# Target: ratio >= 0.95 for the cross-CPU pair, peak RSS < 50 MB.
#
# Usage: scripts/bench-watch.sh [SECONDS_PER_RUN] [ROUNDS]     (defaults 10 and 3)
#        MECHANISMS="bpf" scripts/bench-watch.sh               (one mechanism only)
#        WATCH_FLAGS="--no-kernel-filter --sample-wakeups" MECHANISMS=perf scripts/bench-watch.sh
#        (what perf's in-kernel filters and counting sched_wakeup instead of sampling it save)
# Needs root (the watch opens system-wide tracepoints; the server runs as `postgres`),
# PostgreSQL server programs and pgbench, taskset, jq, /usr/bin/time, CPUs 0 and 1.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
rounds=${2:-3}
cpulab=${CPULAB:-target/release/cpulab}

die() { echo "bench-watch: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "run as root (system-wide tracepoints, and the server runs as postgres)"
command -v taskset >/dev/null || die "taskset not found (Debian package util-linux)"
command -v jq >/dev/null || die "jq not found (Debian package jq)"
[ -x /usr/bin/time ] || die "/usr/bin/time not found (Debian package time)"
source scripts/lib/pg.sh
pg_find
taskset -c 1 true 2>/dev/null || die "CPU 1 is not available: this benchmark needs CPUs 0 and 1"
[ -x "$cpulab" ] || cargo build --release --quiet

dir=$(mktemp -d /tmp/bench-watch.XXXXXX)
watch_pid=
cleanup() {
    [ -n "$watch_pid" ] && kill "$watch_pid" 2>/dev/null || true
    pg_stop
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

pg_start



mechanisms=${MECHANISMS:-bpf bpf-tracepoint perf}
echo "== cpulab watch overhead: PostgreSQL on CPU 0, pgbench -c 1 SELECT 1, ${secs} s runs, ${rounds} rounds, each: without, then with each of: ${mechanisms}${WATCH_FLAGS:+ (watch flags: $WATCH_FLAGS)}"
echo "   (load on the machine when run: $(cut -d' ' -f1-3 /proc/loadavg))"
declare -A peak_kb
for placement in "cross:1" "same:0"; do
    name=${placement%%:*} cpu=${placement#*:}
    off=()
    declare -A on=() ratios=() lost=()
    for r in $(seq "$rounds"); do
        # Odd rounds run without a watch first, even rounds last (ABBA): a drift in the
        # machine's speed over a round then falls on both sides alike over two rounds.
        order="none $mechanisms"
        [ $((r % 2)) = 0 ] && order=$(printf '%s\n' $order | tac | tr '\n' ' ')
        declare -A got=() extra=()
        for m in $order; do
            if [ "$m" = none ]; then
                got[none]=$(tps "$cpu")
                continue
            fi
            out=$dir/watch.$name.$m.$r
            # shellcheck disable=SC2086 # WATCH_FLAGS is a list of flags
            /usr/bin/time -v -o "$out.time" "$cpulab" watch --quiet --json --mechanism "$m" \
                ${WATCH_FLAGS:-} --comm postgres,pgbench --duration $((secs + 30))s >"$out.json" &
            watch_pid=$!
            sleep 1 # tracepoints open before the measured run
            got[$m]=$(tps "$cpu")
            kill -INT "$(pgrep -P "$watch_pid" -x cpulab || echo "$watch_pid")" 2>/dev/null || true
            wait "$watch_pid" || true
            watch_pid=
            kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$out.time")
            [ "${kb:-0}" -gt "${peak_kb[$m]:-0}" ] && peak_kb[$m]=$kb
            l=$(jq '.lost_events' "$out.json" 2>/dev/null || echo 0)
            lost[$m]=$(( ${lost[$m]:-0} + ${l:-0} ))
            w=$(jq '[.processes[].wakeups_per_s] | add // 0 | floor' "$out.json" 2>/dev/null || echo "?")
            cpu_s=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$out.time")
            wall=$(jq '.interval_s' "$out.json" 2>/dev/null || echo 0)
            extra[$m]=$(printf '%s wakeups/s seen, lost %s, own CPU %.2f CPU-s/s' "$w" "$l" \
                "$(awk -v c="$cpu_s" -v w="$wall" 'BEGIN {print (w > 0) ? c / w : 0}')")
        done
        a=${got[none]}
        off+=("$a")
        line="  $name round $r ($(echo $order | tr ' ' ',')): without $(printf '%.0f' "$a") tps"
        for m in $mechanisms; do
            b=${got[$m]}
            ratio=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.4f", b / a}')
            on[$m]+="$b "; ratios[$m]+="$ratio "
            line+=$(printf '; %s %.0f tps (%s), %s' "$m" "$b" "$ratio" "${extra[$m]}")
        done
        echo "$line"
        unset got extra
    done
    m_off=$(mean "${off[@]}")
    for m in $mechanisms; do
        # shellcheck disable=SC2086 # space-separated lists
        m_on=$(mean ${on[$m]})
        # shellcheck disable=SC2086
        printf '  %s-CPU pair, %s: without %.0f tps, with %.0f tps, ratio %.3f (median of per-round ratios %s, range %s), lost events %d\n' \
            "$name" "$m" "$m_off" "$m_on" "$(awk -v a="$m_off" -v b="$m_on" 'BEGIN {print b / a}')" \
            "$(median ${ratios[$m]})" "$(spread ${ratios[$m]})" "${lost[$m]}"
    done
    unset on ratios lost
done
for m in $mechanisms; do
    printf '  peak RSS of cpulab watch, %s: %.1f MB\n' "$m" "$(awk -v k="${peak_kb[$m]:-0}" 'BEGIN {print k / 1024}')"
done
echo "   target: ratio >= 0.95 for the cross-CPU pair, peak RSS < 50 MB; a busy machine widens the spread"
