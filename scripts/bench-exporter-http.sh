#!/usr/bin/env bash
# The exporter's HTTP side, two binaries side by side in one run (issue 28: the hand-written
# server against hyper): resident memory and CPU idle and scraped, and what a flood of wrong
# passwords costs it.
#
# Each binary runs `exporter --mechanism fake --no-history` (the test double: no BPF, so the
# wakeup source does not matter) on a loopback port. Per round and binary, in turn (A B A B):
#   - idle: its CPU (utime + stime from /proc/PID/stat) over SECONDS with no request;
#   - scraped: its CPU over SECONDS while one `curl --rate 1/s` scrapes it every second;
#   - VmRSS after both, and VmHWM (peak) at the end.
# Then the flood, once per binary: a web config with one user (a bcrypt hash of cost 10, as
# `htpasswd -nBC 10` makes), and 20 curl clients at once sending PER_CLIENT requests each with
# that user and a wrong password of its own; the exporter's CPU-seconds over the flood.
#
# Usage: scripts/bench-exporter-http.sh OLD_BINARY NEW_BINARY [SECONDS] [ROUNDS] [PER_CLIENT]
#        (defaults 30, 2, 50: 1,000 wrong passwords)
# Needs curl (7.84 or newer, for --rate) and htpasswd (apache2-utils).
set -euo pipefail

old=${1:?usage: $0 OLD_BINARY NEW_BINARY [SECONDS] [ROUNDS] [PER_CLIENT]}
new=${2:?usage: $0 OLD_BINARY NEW_BINARY [SECONDS] [ROUNDS] [PER_CLIENT]}
secs=${3:-30}
rounds=${4:-2}
per_client=${5:-50}

die() { echo "bench-exporter-http: $*" >&2; exit 2; }
command -v curl >/dev/null || die "curl not found (Debian package curl)"
command -v htpasswd >/dev/null || die "htpasswd not found (Debian package apache2-utils)"
for b in "$old" "$new"; do [ -x "$b" ] || die "$b is not an executable"; done

dir=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT

hz=$(getconf CLK_TCK)
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
kib() { awk -v k="$2" '$1 == k":" { print $2 }' "/proc/$1/status"; }
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start BINARY PORT [FLAGS...]: runs the exporter, waits until it answers.
start() {
    local bin=$1 p=$2
    shift 2
    "$bin" exporter --quiet --mechanism fake --no-history --listen "127.0.0.1:$p" "$@" 2>"$dir/err" &
    pid=$!
    for _ in $(seq 200); do
        curl -s -o /dev/null "http://127.0.0.1:$p/" && return 0
        kill -0 "$pid" 2>/dev/null || die "$bin exited: $(cat "$dir/err")"
        sleep 0.1
    done
    die "$bin never answered on port $p"
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

# cpu_over SECONDS COMMAND...: the exporter's CPU-seconds per second while COMMAND runs (or
# while it sleeps SECONDS, for `idle`).
cpu_over() {
    local s=$1 a b t0 t1
    shift
    a=$(ticks "$pid")
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    b=$(ticks "$pid")
    awk -v a="$a" -v b="$b" -v hz="$hz" -v t0="$t0" -v t1="$t1" \
        'BEGIN { printf "%.4f", (b - a) / hz / (t1 - t0) }'
}

echo "binary round idle_cpu_s_per_s scraped_cpu_s_per_s rss_kib peak_rss_kib"
for round in $(seq "$rounds"); do
    for which in old new; do
        bin=$old
        [ "$which" = new ] && bin=$new
        p=$(port)
        start "$bin" "$p"
        curl -s -o /dev/null "http://127.0.0.1:$p/metrics"
        idle=$(cpu_over "$secs" sleep "$secs")
        scraped=$(cpu_over "$secs" curl -s -o /dev/null --rate 1/s "http://127.0.0.1:$p/metrics?[1-$secs]")
        echo "$which $round $idle $scraped $(kib "$pid" VmRSS) $(kib "$pid" VmHWM)"
        stop
    done
done

hash=$(htpasswd -nbBC 10 prometheus 's3cret' | cut -d: -f2)
printf 'basic_auth_users:\n  prometheus: %s\n' "$hash" >"$dir/web.yml"
flood() {
    local c clients=()
    for c in $(seq 20); do
        curl -s -o /dev/null -u "prometheus:wrong-$c" "http://127.0.0.1:$p/metrics?[1-$per_client]" &
        clients+=($!)
    done
    wait "${clients[@]}" || true
}
echo
echo "binary requests flood_cpu_s flood_wall_s authorised_scrape"
for which in old new; do
    bin=$old
    [ "$which" = new ] && bin=$new
    p=$(port)
    start "$bin" "$p" --web.config.file "$dir/web.yml"
    a=$(ticks "$pid")
    t0=$(date +%s.%N)
    flood
    t1=$(date +%s.%N)
    b=$(ticks "$pid")
    ok=$(curl -s -o /dev/null -w '%{http_code}' -u prometheus:s3cret "http://127.0.0.1:$p/metrics" || true)
    awk -v w="$which" -v n=$((20 * per_client)) -v a="$a" -v b="$b" -v hz="$hz" -v t0="$t0" \
        -v t1="$t1" -v ok="$ok" 'BEGIN { printf "%s %d %.2f %.1f %s\n", w, n, (b - a) / hz, t1 - t0, ok }'
    stop
done
