#!/usr/bin/env bash
# What watching costs the watched: the halt ping-pong's round trip (scripts/kvm-pingpong.py, a
# VMM apart from cpulab) with `cpulab host` attached against without, rounds alternated in one
# run. Prints each round, the means, and without/with as a ratio (1 = watching costs nothing;
# the target is at least 0.97).
#
# Usage: scripts/host-watch-cost.sh [CPULAB] [ROUNDS] [SECONDS]   (as root, /dev/kvm needed)
# Measures `cpulab host` as it runs by default (KVM's events by BPF on raw tracepoints);
# HOST_FLAGS="--kvm-events off" measures /proc alone, HOST_FLAGS=--bpf-program-costs with the
# kernel timing the programs as well.
set -euo pipefail
cd "$(dirname "$0")/.."
cpulab=${1:-target/release/cpulab}
rounds=${2:-5}
secs=${3:-2}
a=${CPU_A:-0}
b=${CPU_B:-1}
[ -x "$cpulab" ] || { echo "no cpulab binary at $cpulab: cargo build --release" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
    python3 scripts/kvm-pingpong.py halt "$a" "$b" module "$secs" | sed 's/^/without /' >> "$out/runs"
    # The watcher's window covers the whole measured stretch (the VMM warms up for 0.2 s first).
    # shellcheck disable=SC2086 # HOST_FLAGS is a list of flags
    "$cpulab" --quiet --no-history host ${HOST_FLAGS:-} --duration "$(awk "BEGIN { print $secs + 1 }")s" > /dev/null &
    w=$!
    python3 scripts/kvm-pingpong.py halt "$a" "$b" module "$secs" | sed 's/^/with /' >> "$out/runs"
    wait "$w"
    echo "round $r of $rounds done" >&2
done
python3 - "$out/runs" <<'PY'
import json, statistics as st, sys
runs = {"without": [], "with": []}
for line in open(sys.argv[1]):
    side, doc = line.split(" ", 1)
    runs[side].append(json.loads(doc)["rtt_ns"])
for side in ("without", "with"):
    v = runs[side]
    print(f"{side:8} cpulab host: " + ", ".join(f"{x/1e3:.2f}" for x in v)
          + f" us; mean {st.mean(v)/1e3:.2f} us, stdev {st.stdev(v)/1e3:.2f} us")
ratio = st.mean(runs['without']) / st.mean(runs['with'])
# Each round's own ratio (its two runs a few seconds apart): their spread is the noise of the
# figure above, as a 95% interval of their mean (Student's t, n - 1 degrees of freedom).
pairs = [a / b for a, b in zip(runs['without'], runs['with'])]
t95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
       10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 19: 2.09, 29: 2.05}
half = ""
if len(pairs) > 1:
    df = len(pairs) - 1
    t = t95.get(df) or t95[max(k for k in t95 if k <= df)]
    half = f", rounds' own ratios {st.mean(pairs):.3f} +- {t * st.stdev(pairs) / len(pairs) ** 0.5:.3f} (95%)"
print(f"round trip without / with (1 = no cost; target >= 0.97): {ratio:.3f}{half}")
PY
