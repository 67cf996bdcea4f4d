#!/usr/bin/env bash
# cpulab host bench against an independent VMM (scripts/kvm-pingpong.py) on the same guest
# exchanges, side by side in one run, rounds alternated so load that comes and goes weighs on
# both alike. Prints, per exchange, each side's round trip and cpulab's over the independent one;
# the same for the differences that do not depend on how fast this KVM runs guest instructions
# (halt minus spin, polling off minus the module's default); cpulab's guest-timed round trip
# (rdtsc) over its host-counted one in its stamped windows; and cpulab's harness cost, its
# stamped round trip over its bare one (three guest instructions more and the host reading the
# ring every 5 ms). The cpulab/independent column is itself the bare harness's cost.
#
# Usage: scripts/host-bench-ratio.sh [CPULAB] [ROUNDS] [SECONDS]   (as root, /dev/kvm needed)
set -euo pipefail
cd "$(dirname "$0")/.."
cpulab=${1:-target/release/cpulab}
rounds=${2:-3}
secs=${3:-2}
a=${CPU_A:-0}
b=${CPU_B:-1}
[ -x "$cpulab" ] || { echo "no cpulab binary at $cpulab: cargo build --release" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
    for x in "halt $a $b module" "halt $a $b 0" "halt $a $a module" "spin $a $b module"; do
        # shellcheck disable=SC2086
        python3 scripts/kvm-pingpong.py $x "$secs" >> "$out/independent.jsonl"
    done
    "$cpulab" --quiet --no-history host bench --no-load-check --cpus "$a,$b" \
        --parts exchange,halt-poll --halt-poll 0 --poll-window 5us \
        --duration "${secs}s" --repeats 3 --json > "$out/cpulab-$r.json"
    echo "round $r of $rounds done" >&2
done
python3 - "$out" "$a" "$b" <<'PY'
import json, glob, statistics as st, sys
out, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
ind = [json.loads(l) for l in open(f"{out}/independent.jsonl")]
def imean(ex, cpus, hp):
    v = [x["rtt_ns"] for x in ind if x["exchange"] == ex and x["cpus"] == cpus and x["halt_poll"] == hp and x["rtt_ns"]]
    return st.mean(v) if v else None
docs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/cpulab-*.json"))]
def cpoints():
    for d in docs:
        yield from d["points"]
        for r in (d.get("sweep") or {}).get("rows", []):
            yield r["point"]
def cmean(ex, cpus, hp):
    v = [p["rtt_ns"]["mean"] for p in cpoints() if p["exchange"] == ex and p["cpus"] == cpus
         and p["halt_poll_limit_ns"] == hp and p["poll_window_ns"] is None and p["rtt_ns"]]
    return st.mean(v) if v else None
cross, same = f"{a}:{b}", f"{a}:{a}"
rows = [
    ("halt, two CPUs, module halt-poll", cmean("halt", cross, None), imean("halt", cross, "module")),
    ("halt, two CPUs, halt polling off", cmean("halt", cross, 0), imean("halt", cross, "0")),
    ("halt, one CPU", cmean("halt", same, None), imean("halt", same, "module")),
    ("spin, two CPUs", cmean("spin", cross, None), imean("spin", cross, "module")),
]
def diff(x, y):
    return None if x is None or y is None else x - y
rows += [
    ("halt minus spin, two CPUs", diff(rows[0][1], rows[3][1]), diff(rows[0][2], rows[3][2])),
    ("polling off minus module default", diff(rows[1][1], rows[0][1]), diff(rows[1][2], rows[0][2])),
]
us = lambda v: "-" if v is None else f"{v/1e3:8.2f} us"
print(f"{'exchange':36} {'cpulab':>11} {'independent':>11}  cpulab/independent")
for name, c, i in rows:
    ratio = "-" if not c or not i else f"{c/i:.3f}"
    print(f"{name:36} {us(c):>11} {us(i):>11}  {ratio}")
g = [p["guest_over_host"] for p in cpoints() if p.get("guest_over_host")]
print(f"guest-timed (rdtsc) over host-counted round trip, cpulab, {len(g)} points: "
      f"mean {st.mean(g):.4f}, range {min(g):.4f} to {max(g):.4f}")
sc = [p["stamping_cost"] for p in cpoints() if p.get("stamping_cost")]
if sc:
    print(f"cpulab's stamping cost (stamped over bare round trip), {len(sc)} points: "
          f"mean {st.mean(sc):.3f}, range {min(sc):.3f} to {max(sc):.3f}")
PY
