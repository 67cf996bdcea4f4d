#!/usr/bin/env bash
# Fair share beside busy neighbours: `cpulab share` against `sysbench cpu` + `stress-ng -c N`,
# in the same run, next to the fair-share model (field notes C).
#
# For T = N (all CPUs) and T = 1 worker thread, with N = CPUs this process may use and N busy
# burners beside them, prints each worker's throughput relative to running alone:
#   - cpulab share (its own burners: threads of cpulab, 100% duty)
#   - sysbench cpu --threads=T alone, then again beside stress-ng -c N (same prime kernel)
#   - the model: min(1, N/(T+N)) / min(1, N/T)
# Expect about 50% for T = N. Env: SECS (sysbench seconds per run, default 5),
# REPEATS (cpulab runs per configuration, default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

N=$(nproc)
SECS=${SECS:-5}
REPEATS=${REPEATS:-3}
BIN=target/release/cpulab
for tool in sysbench stress-ng jq; do
    command -v "$tool" >/dev/null || { echo "bench-share: $tool is not installed" >&2; exit 2; }
done
cargo build --release --quiet
TMP=$(mktemp -d)
STRESS_PID=""
cleanup() {
    [ -n "$STRESS_PID" ] && kill "$STRESS_PID" 2>/dev/null && wait "$STRESS_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

model() { # T N -> model relative share in percent
    awk -v t="$1" -v n="$2" 'function min(a,b){return a<b?a:b}
        BEGIN { printf "%.1f", 100 * min(1, n/(t+n)) / min(1, n/t) }'
}

cpu_ticks() { # busy and total ticks of all CPUs from /proc/stat
    awk '/^cpu / {print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat
}

sysbench_eps() { # T -> events per second
    sysbench cpu --threads="$1" --time="$SECS" run | awk '/events per second/ {print $4}'
}

declare -A CPULAB SYSB
echo "bench-share: $N CPUs, $N burners; cpulab $REPEATS x 2 s per configuration, sysbench $SECS s per run"
for T in "$N" 1; do
    "$BIN" share --threads "$T" --burners "$N" --duration 2 --repeats "$REPEATS" --json --quiet \
        > "$TMP/share-$T.json"
    CPULAB[$T]=$(jq -r '.configs[] | select(.burners > 0)
        | "\(.relative.mean * 1000 | round / 10)% ± \(.relative.ci95_half_width * 1000 | round / 10)"' \
        "$TMP/share-$T.json")
    noisy=$(jq -r '.conditions.noisy' "$TMP/share-$T.json")
    [ "$noisy" = "true" ] && CPULAB[$T]="${CPULAB[$T]} (noisy)"

    read -r b0 t0 < <(cpu_ticks)
    alone=$(sysbench_eps "$T")
    read -r b1 t1 < <(cpu_ticks)
    # CPUs busy during the alone run beyond sysbench's T threads: someone else's load.
    other=$(awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" -v n="$N" -v k="$T" \
        'BEGIN { o = n * b / t - k; if (o < 0) o = 0; printf "%.2f", o }')
    stress-ng -c "$N" -t $((SECS + 5)) -q & STRESS_PID=$!
    sleep 1
    loaded=$(sysbench_eps "$T")
    kill "$STRESS_PID" 2>/dev/null; wait "$STRESS_PID" 2>/dev/null || true; STRESS_PID=""
    SYSB[$T]=$(awk -v a="$alone" -v l="$loaded" 'BEGIN { printf "%.1f%% (%.0f -> %.0f ev/s)", 100*l/a, a, l }')
    awk -v o="$other" 'BEGIN { exit !(o >= 0.1) }' && SYSB[$T]="${SYSB[$T]} (noisy: +$other CPU)"
done

printf '\n%-24s %-22s %-48s %s\n' "workers beside $N busy" "cpulab share" "sysbench cpu + stress-ng -c $N" "model"
for T in "$N" 1; do
    printf '%-24s %-22s %-48s %s%%\n' "$T thread(s)" "${CPULAB[$T]}" "${SYSB[$T]}" "$(model "$T" "$N")"
done
echo
echo "share = throughput beside the burners / throughput alone, per worker; cpulab's ± is the 95% CI over runs."
echo "noisy = other processes used CPU during the run (cpulab: measured throughout; sysbench: during the alone run)."
