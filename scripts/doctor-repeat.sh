#!/usr/bin/env bash
# Findings you can trust twice: runs `cpulab doctor --json` N times on this machine, one after
# the other, and prints each run's set of finding ids (with severity and confidence), then how
# often each id appeared. On a machine whose state does not change, every id should appear in
# all N runs or in none; an id seen in some runs only is a rule that flips around its threshold.
#
# The background load on the CPUs before each run is printed beside it, because a busy machine
# changes what the doctor measures (and a finding that follows the load is not a flip).
#
# Usage: scripts/doctor-repeat.sh [N] [doctor flags...]   e.g. scripts/doctor-repeat.sh 5 --quick
# (env: KEEP=DIR keeps each run's JSON document in DIR)
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-5}
shift || true
case "$n" in '' | *[!0-9]*) echo "doctor-repeat: N must be a whole number, not '$n'" >&2; exit 2 ;; esac
command -v jq >/dev/null || { echo "doctor-repeat: jq is required (apt-get install jq)" >&2; exit 2; }

cargo build --release --quiet
bin=target/release/cpulab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for i in $(seq 1 "$n"); do
    "$bin" doctor --json --quiet "$@" > "$tmp/run$i.json"
    load=$(jq -r '[.conditions.load_before.busy_pct // {} | to_entries[] | "cpu\(.key) \(.value|floor)%"] | join(", ")' "$tmp/run$i.json")
    ids=$(jq -r '[.findings[] | "\(.id) (\(.severity), \(.confidence))"] | join("; ")' "$tmp/run$i.json")
    secs=$(jq -r '.duration_s | floor' "$tmp/run$i.json")
    printf 'run %d (%s s; other load before: %s): %s\n' "$i" "$secs" "${load:-none}" "${ids:-no finding}"
done

echo
echo "finding id: runs it appeared in (of $n)"
jq -r '.findings[].id' "$tmp"/run*.json | sort | uniq -c | sort -rn |
    awk -v n="$n" '{ flag = ($1 == n) ? "every run" : "FLIPS"; printf "  %-28s %d/%d  %s\n", $2, $1, n, flag }'
stable=$(for f in "$tmp"/run*.json; do jq -c '[.findings[].id] | sort' "$f"; done | sort -u | wc -l)
if [ "$stable" -eq 1 ]; then
    echo "the same set of finding ids in all $n runs"
else
    echo "$stable different sets of finding ids in $n runs"
    # A flip is only understood with its figures: for each id seen in some runs only, what it
    # measured in the runs where it appeared.
    for id in $(jq -r '.findings[].id' "$tmp"/run*.json | sort | uniq -c | awk -v n="$n" '$1 < n {print $2}'); do
        echo
        echo "$id, in the runs where it appeared:"
        for i in $(seq 1 "$n"); do
            jq -r --arg id "$id" --arg run "$i" '.findings[] | select(.id == $id) |
                "  run \($run): \(.magnitude.text)",
                (.evidence[] | "    \(.label): \(.value) [\(.source)]")' "$tmp/run$i.json"
        done
    done
fi
if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP" && cp "$tmp"/run*.json "$KEEP"/ && echo "the runs' documents are in $KEEP"
fi
