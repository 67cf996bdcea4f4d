#!/usr/bin/env bash
# Times the choice of a woken task's vCPU on the waker's vCPU, by the rule in docs/sim.md ("The
# CPU an unpinned wakee is given"): five `cpulab pair --preset pgbench` runs with the server free
# (unpinned:1) and five with it pinned (0:1), alternated, each under scripts/wake-choice.py's
# tracepoint probe; prints one JSON line per run and the difference of the means with its 95%
# Welch interval. Root (BPF), PostgreSQL and a release build of cpulab; run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cpulab=${CPULAB:-target/release/cpulab}
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
for i in 1 2 3 4 5; do
    for pl in unpinned:1 0:1; do
        line=$(python3 scripts/wake-choice.py pgbench -- "$cpulab" pair --preset pgbench \
            --pairs "$pl" --repeats 3 --duration 5 --no-history -q)
        echo "{\"placement\": \"$pl\", \"run\": $i, \"probe\": $line}" | tee -a "$runs"
    done
done
python3 - "$runs" <<'PY'
import json, math, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
u = [r["probe"]["mean_ns"] for r in rows if r["placement"] == "unpinned:1"]
p = [r["probe"]["mean_ns"] for r in rows if r["placement"] == "0:1"]
vu, vp = st.variance(u) / len(u), st.variance(p) / len(p)
se = math.sqrt(vu + vp)
df = (vu + vp) ** 2 / (vu ** 2 / (len(u) - 1) + vp ** 2 / (len(p) - 1))
# Student's t 0.975 quantile, interpolated in 1/df between printed table values.
table = [(5, 2.571), (6, 2.447), (7, 2.365), (8, 2.306), (9, 2.262), (10, 2.228), (15, 2.131), (20, 2.086), (30, 2.042)]
t = table[-1][1]
for (d0, t0), (d1, t1) in zip(table, table[1:]):
    if d0 <= df <= d1:
        t = t0 + (t1 - t0) * (1 / df - 1 / d0) / (1 / d1 - 1 / d0)
        break
else:
    if df < table[0][0]:
        t = table[0][1]
d = st.mean(u) - st.mean(p)
print(f"choice: {d:.0f} ns, 95% Welch interval {d - t * se:.0f} to {d + t * se:.0f} ns "
      f"(unpinned {st.mean(u):.0f} ns, pinned {st.mean(p):.0f} ns, df {df:.1f})")
PY
