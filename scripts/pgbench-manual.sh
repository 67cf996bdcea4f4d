#!/usr/bin/env bash
# The field notes' pgbench experiment by hand, then the same with `cpulab pair`, in one run.
#
# By hand, exactly as field note A: a throwaway cluster started with `taskset -c 0 pg_ctl start`,
# then `pgbench -n -f select1 -c 1 -j 1 -T N` under `taskset -c 0` (same vCPU) and `taskset -c 1`
# (different vCPU), alternating ROUNDS times. Then `cpulab pair --preset pgbench --workload select1`
# with the same two placements, duration and repeats. Prints both same/cross ratios; they must
# agree within 10% (exit 1 otherwise).
#
# Usage: scripts/pgbench-manual.sh [SECONDS_PER_RUN] [ROUNDS]     (defaults 10 and 3)
# Needs PostgreSQL server programs and pgbench, taskset, jq, two CPUs (0 and 1); run as root
# (the server runs as `postgres`) or as an ordinary user (the server runs as you).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
rounds=${2:-3}
cpulab=${CPULAB:-target/release/cpulab}

die() { echo "pgbench-manual: $*" >&2; exit 2; }
command -v taskset >/dev/null || die "taskset not found (Debian package util-linux)"
command -v jq >/dev/null || die "jq not found (Debian package jq)"
source scripts/lib/pg.sh
pg_find
taskset -c 1 true 2>/dev/null || die "CPU 1 is not available: this experiment needs CPUs 0 and 1"

dir=$(mktemp -d /tmp/pgbench-manual.XXXXXX)
cleanup() {
    pg_stop
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

echo "== by hand: PostgreSQL from $bindir, pgbench SELECT 1, ${secs} s x ${rounds} per placement"
# The field notes' server start: taskset -c 0 pg_ctl start.
pg_start

same=() cross=()
for r in $(seq "$rounds"); do
    s=$(tps 0); c=$(tps 1)
    same+=("$s"); cross+=("$c")
    printf '  round %d: same vCPU %.0f tps, different vCPU %.0f tps\n' "$r" "$s" "$c"
done
pg_stop

m_same=$(mean "${same[@]}"); m_cross=$(mean "${cross[@]}")
manual=$(awk -v a="$m_same" -v b="$m_cross" 'BEGIN {printf "%.2f", a / b}')
printf '  mean: same %.0f tps, different %.0f tps, ratio %sx\n' "$m_same" "$m_cross" "$manual"

echo "== cpulab pair --preset pgbench --workload select1 --pairs 0:0,0:1"
[ -x "$cpulab" ] || cargo build --release --quiet
json=$("$cpulab" pair --preset pgbench --workload select1 --duration "$secs" --repeat "$rounds" \
    --pairs 0:0,0:1 --json)
c_same=$(jq '.placements[] | select(.placement.label | startswith("same-cpu")) | .metric.mean' <<<"$json")
c_cross=$(jq '[.placements[] | select(.placement.label | startswith("same-cpu") | not)][0].metric.mean' <<<"$json")
tool=$(awk -v a="$c_same" -v b="$c_cross" 'BEGIN {printf "%.2f", a / b}')
printf '  mean: same %.0f tps, different %.0f tps, ratio %sx\n' "$c_same" "$c_cross" "$tool"
jq -r '.conditions.notes[]' <<<"$json" | sed 's/^/  note: /'

agree=$(awk -v a="$tool" -v b="$manual" 'BEGIN {d = a / b - 1; if (d < 0) d = -d; printf "%.1f", 100 * d}')
echo "== same/different ratio: by hand ${manual}x, cpulab ${tool}x, differ by ${agree}%"
if awk -v d="$agree" 'BEGIN {exit !(d <= 10)}'; then
    echo "OK: within 10%"
else
    echo "FAIL: more than 10% apart" >&2
    exit 1
fi
