#!/usr/bin/env bash
# Does cpulab doctor keep its time budget (default 30 s, --quick 15 s, probe included) and its
# memory goal (peak RSS <= 20 MB)? Runs `doctor` and `doctor --quick` N times each (default 5),
# and prints per run each stage's seconds against its deadline (stage_times in the JSON), the
# total against the budget, the peak RSS (/usr/bin/time), the load average and which stages
# stopped at their deadline. Ends with how many runs kept the budget. Run it on a busy machine
# too: the deadlines are there so the budget holds under load.
#
# Usage: scripts/bench-doctor.sh [runs]   (env: CPULAB=target/debug/cpulab MODES="default quick")
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-5}
for tool in jq /usr/bin/time; do
    command -v "$tool" >/dev/null || { echo "bench-doctor: $tool is required" >&2; exit 2; }
done
bin=${CPULAB:-target/debug/cpulab}
[ -x "$bin" ] || cargo build --quiet
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for mode in ${MODES:-default quick}; do
    case $mode in
        quick) flags=(--quick); budget=15 ;;
        *) flags=(); budget=30 ;;
    esac
    kept=0
    echo "== doctor ${flags[*]:-(default)}: budget ${budget} s, peak RSS goal 20 MB"
    for r in $(seq "$runs"); do
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        /usr/bin/time -f '%e %M' -o "$tmp/time" "$bin" doctor "${flags[@]}" --json --quiet >"$tmp/out.json" 2>"$tmp/err" || true
        read -r wall rss <"$tmp/time"
        total=$(jq -r '.duration_s' "$tmp/out.json")
        stages=$(jq -r '[.measurements.stage_times[] | "\(.stage | split(" ")[0]) \(.actual_s*10|round/10)/\(.planned_s*10|round/10)"] | join(", ")' "$tmp/out.json")
        cut=$(jq -r '[.measurements.stage_times[] | select(.cut_short) | "\(.stage | split(" ")[0]): \(.cut_short)"] | join("; ")' "$tmp/out.json")
        ok=$(awk -v w="$wall" -v b="$budget" 'BEGIN {print (w <= b) ? "within" : "OVER"}')
        [ "$ok" = within ] && kept=$((kept + 1))
        printf 'run %s: %6.1f s of %s (%s), wall %s s, peak RSS %.1f MB, load %s\n' \
            "$r" "$total" "$budget" "$ok" "$wall" "$(awk -v k="$rss" 'BEGIN {print k/1024}')" "$load"
        echo "  stages (taken/deadline s): $stages"
        [ -n "$cut" ] && echo "  cut at the deadline: $cut"
    done
    echo "$mode: $kept of $runs runs within ${budget} s"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
