#!/usr/bin/env bash
# Speed of the `cpulab sim` engine: events handled per CPU second of the simulating thread (and
# per wall second, which a busy machine lowers), for the
# built-in field-notes scenarios plus one long request/response run (the hidden `cpulab sim
# bench`), repeated to show the spread. The target is 10 million events/s in a release build; a
# field-notes scenario should take well under a second. The machine may be busy: read the spread.
# Env: RUNS (repeats, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
BIN=target/release/cpulab
command -v jq >/dev/null || { echo "bench-sim: jq is not installed" >&2; exit 2; }
cargo build --release --quiet
rates=()
for i in $(seq 1 "$RUNS"); do
    out=$(taskset -c 0 "$BIN" sim bench --json 2>/dev/null || "$BIN" sim bench --json)
    rate=$(jq -r '.events_per_cpu_s' <<<"$out")
    wall=$(jq -r '.events_per_s' <<<"$out")
    rates+=("$rate")
    echo "run $i: $(jq -r '"\(.events) events, \(.cpu_s * 1000 | floor) ms CPU, \(.wall_s * 1000 | floor) ms wall"' <<<"$out"), \
$(awk -v r="$rate" -v w="$wall" 'BEGIN { printf "%.1f million events per CPU second (%.1f per wall second)", r / 1e6, w / 1e6 }')"
    jq -r '.scenarios_s[] | "  \(.[0]): \(.[1] * 1000 | floor) ms"' <<<"$out"
done
printf '%s\n' "${rates[@]}" | sort -g | awk '
    { v[NR] = $1 }
    END {
        printf "events per CPU second: min %.1f M, median %.1f M, max %.1f M over %d runs; ", v[1]/1e6, v[int((NR+1)/2)]/1e6, v[NR]/1e6, NR
        printf "median / target (10 M) = %.2f\n", v[int((NR+1)/2)] / 1e7
    }'
