#!/usr/bin/env bash
# What `cpulab exporter` costs a live PostgreSQL: pgbench SELECT 1 throughput with and without
# the exporter attached, alternated ABAB so drift and background load fall on both sides alike.
#
# A private cluster (0700 temp directory, Unix socket only) runs pinned to CPU 0; `pgbench -c 1`
# runs pinned to CPU 0 (the same-CPU pair, 0:0) and to CPU 1 (one CPU apart, 0:1). Each round
# runs pgbench once without the exporter and once with `cpulab exporter --comm postgres,pgbench`
# running and scraped every second (as Prometheus would); odd rounds run without first, even
# rounds with first. It prints per placement the throughput ratio (with / without), the median
# and the range of the per-round ratios, the exporter's own CPU while scraped and at idle (read
# from /proc over each run, after its start-up), and its peak RSS (/usr/bin/time -v). Targets
# (issue 19): ratio >= 0.99 at both placements, own CPU at idle < 0.5% of one CPU, peak RSS
# < 20 MB.
#
# Usage: scripts/bench-exporter.sh [SECONDS_PER_RUN] [ROUNDS]     (defaults 10 and 5)
#        TARGETS=default scripts/bench-exporter.sh   (no --comm: the default targets, the busiest
#            process groups re-ranked from /proc every second, as a packaged exporter runs)
#        MECHANISM=fake scripts/bench-exporter.sh   (the HTTP and encoding side only: no BPF)
#        MECHANISM=null scripts/bench-exporter.sh   (an A/A check: python3's http.server serving a
#            static /metrics, scraped alike, in place of the exporter: the ratios the benchmark
#            gives for a process that does nothing, i.e. its noise floor on this host)
# Needs root (the exporter attaches BPF programs; the server runs as `postgres`), PostgreSQL
# server programs and pgbench, taskset, curl, /usr/bin/time, CPUs 0 and 1.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-10}
rounds=${2:-5}
[ "$rounds" -ge 5 ] || { echo "bench-exporter: at least 5 rounds" >&2; exit 2; }
cpulab=${CPULAB:-target/release/cpulab}
mechanism=${MECHANISM:-auto}
targets=(--comm "postgres,pgbench")
if [ "${TARGETS:-}" = default ]; then targets=(); fi

die() { echo "bench-exporter: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "run as root (BPF programs, and the server runs as postgres)"
command -v taskset >/dev/null || die "taskset not found (Debian package util-linux)"
command -v curl >/dev/null || die "curl not found (Debian package curl)"
curl --help all 2>/dev/null | grep -q -- --rate || die "this curl has no --rate (curl 7.84 or newer scrapes from one process)"
[ -x /usr/bin/time ] || die "/usr/bin/time not found (Debian package time)"
source scripts/lib/pg.sh
pg_find
taskset -c 1 true 2>/dev/null || die "CPU 1 is not available: this benchmark needs CPUs 0 and 1"
[ -x "$cpulab" ] || cargo build --release --quiet

dir=$(mktemp -d /tmp/bench-exporter.XXXXXX)
exporter_pid= scraper_pid=
ticks_per_s=$(getconf CLK_TCK)
# The exporter's CPU (user + system, in ticks) now, and the time, to measure it over a window
# that starts once it serves: its start-up (reading the kernel's BTF) is not what it costs a
# running host, and over a 5 s run it was most of the figure.
cpu_mark() { # -> "ticks seconds"
    local pid
    pid=$(pgrep -P "$exporter_pid" | head -1)
    echo "$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0) $(date +%s.%N)"
}
stop_exporter() {
    [ -n "$scraper_pid" ] && kill "$scraper_pid" 2>/dev/null && wait "$scraper_pid" 2>/dev/null || true
    # $exporter_pid is /usr/bin/time: the exporter is its child. Stopping the child lets time
    # write the exporter's CPU and RSS and exit; stopping time would orphan the exporter (it
    # then held the port, and stayed attached through every later "without" run).
    [ -n "$exporter_pid" ] && { pkill -TERM -P "$exporter_pid" 2>/dev/null; wait "$exporter_pid" 2>/dev/null; } || true
    exporter_pid= scraper_pid=
}
cleanup() {
    stop_exporter
    pg_stop
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

pg_start

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_exporter() { # TAG: the exporter, scraped every second, under /usr/bin/time
    if [ "$mechanism" = null ]; then
        mkdir -p "$dir/null" && echo "# nothing" > "$dir/null/metrics"
        /usr/bin/time -v -o "$dir/exporter.$1.time" python3 -m http.server "$port" \
            --bind 127.0.0.1 --directory "$dir/null" >/dev/null 2>&1 &
    else
        /usr/bin/time -v -o "$dir/exporter.$1.time" "$cpulab" exporter --quiet ${extra_flags:-} \
            --mechanism "$mechanism" "${targets[@]}" --web.listen-address "127.0.0.1:$port" &
    fi
    exporter_pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null && break; sleep 0.1; done
    curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null || die "the exporter did not answer on port $port"
    # One curl process scrapes every second for the whole run (--rate, a URL range), as a
    # Prometheus keeps running: starting a curl per scrape cost this host more than the scrape.
    curl -s --rate 1/s "http://127.0.0.1:$port/metrics?scrape=[1-1000000]" >/dev/null 2>&1 &
    scraper_pid=$!
}
own_cpu() { # "ticks seconds" "ticks seconds" -> CPU-s per s of the exporter between two marks
    awk -v a="$1" -v b="$2" -v hz="$ticks_per_s" 'BEGIN {split(a, x, " "); split(b, y, " ");
        printf "%.4f", (y[1] - x[1]) / hz / (y[2] - x[2])}'
}
peak_kb=0
note_rss() {
    kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/exporter.$1.time")
    [ "${kb:-0}" -gt "$peak_kb" ] && peak_kb=$kb
    return 0
}


echo "== cpulab exporter overhead: PostgreSQL on CPU 0, pgbench -c 1 SELECT 1, ${secs} s runs, ${rounds} rounds (ABAB), exporter --mechanism $mechanism scraped every 1 s"
echo "   (load on the machine when run: $(cut -d' ' -f1-3 /proc/loadavg))"
for placement in "0:0:0" "0:1:1"; do
    name=${placement%:*} cpu=${placement##*:}
    ratios=() cpus=()
    for r in $(seq "$rounds"); do
        order="without with"
        [ $((r % 2)) = 0 ] && order="with without"
        declare -A got=()
        for side in $order; do
            if [ "$side" = without ]; then
                got[without]=$(tps "$cpu")
            else
                start_exporter "$name.$r"
                mark=$(cpu_mark)
                got[with]=$(tps "$cpu")
                cpus+=("$(own_cpu "$mark" "$(cpu_mark)")")
                stop_exporter
                note_rss "$name.$r"
            fi
        done
        ratio=$(awk -v a="${got[without]}" -v b="${got[with]}" 'BEGIN {printf "%.4f", b / a}')
        ratios+=("$ratio")
        printf '  %s round %d (%s): without %.0f tps, with %.0f tps, ratio %s\n' \
            "$name" "$r" "${order/ /,}" "${got[without]}" "${got[with]}" "$ratio"
        unset got
    done
    echo "  $name: ratio median $(median "${ratios[@]}") (per-round range $(spread "${ratios[@]}")), exporter CPU while scraped $(median "${cpus[@]}") CPU-s/s (median)"
done

# The exporter alone, idle machine, scraped every second for 30 s.
start_exporter idle
mark=$(cpu_mark)
sleep 30
idle_cpu=$(own_cpu "$mark" "$(cpu_mark)")
stop_exporter
note_rss idle
echo "  idle: exporter CPU $idle_cpu CPU-s/s scraped every second (30 s, after start-up); peak RSS over all runs $((peak_kb / 1024)) MB"

# Where the kernel side's cost goes: one more run per placement with --bpf-program-costs (the
# kernel times each program while that exporter runs; the timing adds to the cost, so these
# runs are not among the ratios above). Per program: runs per transaction and ns per run; and
# the programs' ns per transaction against the transaction's own time.
[ "$mechanism" = fake ] || [ "$mechanism" = null ] && exit 0
program_costs() { # -> "program runs seconds" lines of a scrape
    curl -sf "http://127.0.0.1:$port/metrics" | awk '
        /^cpulab_exporter_bpf_program_runs_total/ {match($0, /program="[^"]*"/); p = substr($0, RSTART + 9, RLENGTH - 10); runs[p] = $NF}
        /^cpulab_exporter_bpf_program_run_seconds_total/ {match($0, /program="[^"]*"/); p = substr($0, RSTART + 9, RLENGTH - 10); sec[p] = $NF}
        END {for (p in runs) print p, runs[p], sec[p]}' | sort
}
for placement in "0:0:0" "0:1:1"; do
    name=${placement%:*} cpu=${placement##*:}
    extra_flags=--bpf-program-costs start_exporter "$name.costs"
    before=$(program_costs)
    t=$(tps "$cpu")
    after=$(program_costs)
    stop_exporter
    [ -n "$after" ] || { echo "  $name: no program costs published (--bpf-program-costs needs CAP_SYS_ADMIN and BPF)"; continue; }
    join <(echo "$before") <(echo "$after") | awk -v tps="$t" -v secs="$secs" -v name="$name" '
        {runs = $4 - $2; ns = ($5 - $3) * 1e9; tx = tps * secs; total += ns
         if (runs > 0) printf "  %s %s: %.2f runs per transaction, %.0f ns per run\n", name, $1, runs / tx, ns / runs}
        END {printf "  %s: the programs take %.0f ns per transaction (%.2f%% of its %.1f us; %.0f tps with the timing on)\n", name, total / (tps * secs), 100 * total / (tps * secs) / (1e9 / tps), 1e6 / tps, tps}'
done
