#!/usr/bin/env bash
# What `cpulab exporter`'s in-kernel programs cost a live PostgreSQL, measured within one run so
# that the host's drift (which moves separate 10 s runs by 4% to 10% on a shared guest) cancels.
#
# The exporter runs with `--attach-every 2`: its `sched_waking` and `sched_switch` programs are
# attached one second, detached the next, and it prints when its windows fall. pgbench `-c 1`
# SELECT 1 runs throughout with a per-transaction log (`-l`: each transaction's completion
# time), against a private PostgreSQL pinned to CPU 0, at 0:0 and 0:1. Transactions are counted
# per window (10 ms at each edge left out, where the attach and detach happen); each attached
# second is set against the mean of the detached seconds either side (so a linear drift cancels
# too): R, the ratio the programs give while attached, that is the cost of `--attach-every 1`.
#
# The run repeats with `--attach-every 4`: besides R, each whole cycle of 4 seconds is set
# against its 3 detached seconds, the ratio that setting gives (about 1 - (1 - R) / 4). And once
# more with `--attach-every 1` (always attached), split as if every other second were not: an
# A/A check of the design on this host, which should give 1 within its interval.
#
# Last, the exporter process itself: with `--attach-every 60` (the programs attached one second
# a minute; those seconds and the next three are left out), stopped (SIGSTOP) every other
# second and continued the next, so the seconds it runs are set against those it cannot.
#
# Each ratio is the mean over the run's windows (or cycles) with its 95% confidence interval,
# and for R the quartiles of the per-window ratios. The exporter process is there in both
# halves, scraped every second, so what this measures is the programs alone (their runs, and
# their dispatch by the tracepoints). Its HTTP and encoding side is measured by
# `MECHANISM=fake scripts/bench-exporter.sh` against `MECHANISM=null`.
#
# Usage: scripts/bench-exporter-interleaved.sh [SECONDS_PER_RUN]     (default 120, at least 40)
# Needs root (BPF programs; the server runs as `postgres`), PostgreSQL server programs and
# pgbench, taskset, curl, python3, CPUs 0 and 1. Reads extra exporter flags from $extra_flags.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-120}
[ "$secs" -ge 40 ] || { echo "bench-exporter-interleaved: at least 40 s per run (8 cycles of 4 s)" >&2; exit 2; }
cpulab=${CPULAB:-target/release/cpulab}

die() { echo "bench-exporter-interleaved: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "run as root (BPF programs, and the server runs as postgres)"
command -v taskset >/dev/null || die "taskset not found (Debian package util-linux)"
command -v curl >/dev/null || die "curl not found (Debian package curl)"
command -v python3 >/dev/null || die "python3 not found (Debian package python3)"
source scripts/lib/pg.sh
pg_find
taskset -c 1 true 2>/dev/null || die "CPU 1 is not available: this benchmark needs CPUs 0 and 1"
[ -x "$cpulab" ] || cargo build --release --quiet

dir=$(mktemp -d /tmp/bench-exporter-interleaved.XXXXXX)
exporter_pid= scraper_pid=
stopper_pid=
stop_exporter() {
    [ -n "$stopper_pid" ] && kill "$stopper_pid" 2>/dev/null && wait "$stopper_pid" 2>/dev/null || true
    [ -n "$scraper_pid" ] && kill "$scraper_pid" 2>/dev/null && wait "$scraper_pid" 2>/dev/null || true
    # Continued first: a stopped process takes no SIGTERM until it runs.
    [ -n "$exporter_pid" ] && kill -CONT "$exporter_pid" 2>/dev/null || true
    [ -n "$exporter_pid" ] && kill -TERM "$exporter_pid" 2>/dev/null && wait "$exporter_pid" 2>/dev/null || true
    exporter_pid= scraper_pid= stopper_pid=
}
# Stops the exporter ($exporter_pid) every odd second from $from and continues it every even
# one, for the run: while stopped it costs nothing, so what its process does (the scrapes, the
# targets' re-read) is in the even seconds, with some from the odd ones (a scrape queued while
# stopped is served on continuing): the ratio is a bound on its cost, not less.
start_stopper() {
    python3 - "$exporter_pid" "$from" <<'EOF' &
import os, signal, sys, time
pid, origin = int(sys.argv[1]), float(sys.argv[2])
script = os.getppid()
k = int(time.time() - origin) + 1
while True:
    time.sleep(max(0.0, origin + k - time.time()))
    try:
        if os.getppid() != script:
            # The script was killed (SIGKILL: no trap ran): end the exporter, not leave it
            # stopped with its programs loaded.
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGTERM)
            break
        os.kill(pid, signal.SIGSTOP if k % 2 else signal.SIGCONT)
    except ProcessLookupError:
        break
    k += 1
EOF
    stopper_pid=$!
}
cleanup() {
    stop_exporter
    pg_stop
    rm -rf "$dir"
}
trap cleanup EXIT INT TERM

pg_start

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# TAG EVERY: the exporter with its programs attached one second in EVERY, scraped every second
# by one curl process; sets `from` to the Unix time its windows start from.
start_exporter() {
    local started
    started=$(date +%s.%N)
    "$cpulab" exporter ${extra_flags:-} --attach-every "$2" --comm postgres,pgbench \
        --listen "127.0.0.1:$port" 2>"$dir/exporter.$1.err" &
    exporter_pid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null && break; sleep 0.1; done
    curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null \
        || { cat "$dir/exporter.$1.err" >&2; die "the exporter did not answer on port $port"; }
    curl -s --rate 1/s "http://127.0.0.1:$port/metrics?scrape=[1-1000000]" >/dev/null 2>&1 &
    scraper_pid=$!
    from=$(sed -n 's/.*from Unix time \([0-9.]*\) .*/\1/p' "$dir/exporter.$1.err")
    if [ "$2" -gt 1 ]; then
        [ -n "$from" ] || { cat "$dir/exporter.$1.err" >&2; die "the exporter did not say when its windows fall"; }
    else
        from=$started # always attached: any grid will do for the A/A check
    fi
}

# TAG CPU: pgbench pinned to CPU for $secs with a per-transaction log; prints the log's path.
pgbench_logged() {
    (cd "$dir" && taskset -c "$2" "$bindir/pgbench" -n -f "$dir/select1.sql" -c 1 -j 1 -T "$secs" \
        -l --log-prefix="tx.$1" -h "$dir" -p 5432 -U postgres postgres >/dev/null 2>&1) \
        || die "pgbench failed"
    ls "$dir"/tx."$1".* | head -1
}

# LOG FROM EVERY: over the windows of the log (see the header), two ratios with their 95%
# confidence intervals: each attached second (k a multiple of EVERY) against the mean of the
# detached seconds either side, and each whole cycle of EVERY seconds against its detached
# seconds alone. With EVERY 1 (always attached) the windows are split on a grid of 2 as if every
# other second were detached: the A/A check. Prints "R lo hi n q1 q3 C lo hi n tps".
analyse() {
    python3 - "$1" "$2" "$3" <<'EOF'
import math, statistics, sys
path, origin, every = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
# EVERY 60 is the run with the exporter stopped every other second: split on a grid of 2, and
# the seconds about each attached one (the first of 60, maybe late by a stop) left out.
grid = 2 if every in (1, 60) else every
skip = (lambda k: k % 60 in (0, 1, 2, 3)) if every == 60 else (lambda k: False)
GUARD = 0.010
counts = {}
for line in open(path):
    f = line.split()
    if len(f) < 6:
        continue
    t = int(f[4]) + int(f[5]) / 1e6 - origin
    k = math.floor(t)
    if k < 0 or not (GUARD <= t - k < 1 - GUARD):
        continue
    counts[k] = counts.get(k, 0) + 1
if not counts:
    print("none"); sys.exit(0)
first, last = min(counts), max(counts)
# Windows at both ends may be partial: left out.
full = {k: c for k, c in counts.items() if first < k < last and not skip(k)}
def ci(xs):
    m = statistics.fmean(xs)
    h = 1.96 * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - h, m + h
r = [full[k] / ((full[k - 1] + full[k + 1]) / 2)
     for k in sorted(full) if k % grid == 0 and (k - 1) in full and (k + 1) in full]
c = []
for j in range(first // grid, last // grid + 1):
    ks = range(j * grid, j * grid + grid)
    if all(k in full for k in ks):
        detached = [full[k] for k in ks if k % grid != 0]
        c.append(statistics.fmean(full[k] for k in ks) / statistics.fmean(detached))
if len(r) < 5 or len(c) < 5:
    print("few"); sys.exit(0)
q = statistics.quantiles(r, n=4)
tps = sum(full.values()) / (len(full) * (1 - 2 * GUARD))
rm, rlo, rhi = ci(r)
cm, clo, chi = ci(c)
print(f"{rm:.4f} {rlo:.4f} {rhi:.4f} {len(r)} {q[0]:.3f} {q[2]:.3f} {cm:.4f} {clo:.4f} {chi:.4f} {len(c)} {tps:.0f}")
EOF
}

echo "== cpulab exporter's programs, attached against detached within one run: PostgreSQL on CPU 0, pgbench -c 1 SELECT 1, ${secs} s per run, exporter scraped every 1 s"
echo "   (load on the machine when run: $(cut -d' ' -f1-3 /proc/loadavg); exporter flags: ${extra_flags:-none})"
for placement in "0:0:0" "0:1:1"; do
    name=${placement%:*} cpu=${placement##*:}
    for every in 2 4 1 60; do
        start_exporter "$name.$every" "$every"
        [ "$every" = 60 ] && start_stopper
        log=$(pgbench_logged "$name.$every" "$cpu")
        stop_exporter
        read -r r rlo rhi n q1 q3 c clo chi cycles tps <<<"$(analyse "$log" "$from" "$every")"
        rm -f "$log"
        [ -n "${tps:-}" ] || die "$name: too few windows in the log ($r)"
        case $every in
        60) printf '  %s the exporter process itself (--attach-every 60, stopped every other second; the seconds about the attached one left out): running / stopped either side %s (95%% CI %s to %s; %s windows, quartiles %s to %s): its cost is at most 1 minus this\n' \
            "$name" "$r" "$rlo" "$rhi" "$n" "$q1" "$q3" ;;
        1) printf '  %s A/A check (always attached, split as if every other second were not): %s (95%% CI %s to %s; %s windows, quartiles %s to %s)\n' \
            "$name" "$r" "$rlo" "$rhi" "$n" "$q1" "$q3" ;;
        *) printf '  %s --attach-every %s: attached second / detached seconds either side %s (95%% CI %s to %s; %s windows, quartiles %s to %s; about %s tps)\n' \
            "$name" "$every" "$r" "$rlo" "$rhi" "$n" "$q1" "$q3" "$tps"
           printf '  %s --attach-every %s: whole cycle / its detached seconds %s (95%% CI %s to %s; %s cycles)\n' \
            "$name" "$every" "$c" "$clo" "$chi" "$cycles" ;;
        esac
    done
done
