#!/usr/bin/env bash
# Overhead of `cpulab watch` on a wakeup-heavy application: pgbench -c 1 running SELECT 1
# against a private PostgreSQL, server and client pinned one CPU apart (and then on one CPU),
# alternating rounds without (A) and with (B) `cpulab watch` attached to the server, ABAB.
# Prints each round's tps, the B/A throughput ratio with its spread, and watch's peak RSS.
#
# Usage (root): scripts/bench-watch.sh [ROUNDS=3] [SECONDS=8] [CPULAB=target/release/cpulab]
# Needs PostgreSQL server programs (initdb, postgres, pgbench) and an OS user `postgres`.
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-8}
CPULAB=$(realpath "${3:-target/release/cpulab}")
BIN=$(dirname "$(readlink -f "$(command -v initdb || echo /usr/lib/postgresql/15/bin/initdb)")")
DIR=$(mktemp -d /tmp/cpulab-bench-watch.XXXXXX)
chmod 0700 "$DIR"
chown postgres "$DIR"
PG=""
cleanup() {
  [ -n "$PG" ] && kill "$PG" 2>/dev/null && wait "$PG" 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT INT TERM
runuser -u postgres -- "$BIN/initdb" -D "$DIR/data" -U bench --auth=trust >/dev/null
printf 'SELECT 1;\n' >"$DIR/select1.sql"
chmod 0644 "$DIR/select1.sql"

start_server() { # cpu
  taskset -c "$1" runuser -u postgres -- "$BIN/postgres" -D "$DIR/data" -c listen_addresses='' \
    -c unix_socket_directories="$DIR" -c fsync=off >"$DIR/pg.log" 2>&1 &
  PG=$!
  for _ in $(seq 50); do "$BIN/pg_isready" -q -h "$DIR" && return 0; sleep 0.1; done
  echo "PostgreSQL did not start; see $DIR/pg.log" >&2; exit 1
}
stop_server() { kill "$PG"; wait "$PG" 2>/dev/null || true; PG=""; }

tps() { # client cpu
  taskset -c "$1" runuser -u postgres -- "$BIN/pgbench" -h "$DIR" -U bench -n -c 1 -j 1 \
    -f "$DIR/select1.sql" -T "$SECS" postgres 2>/dev/null |
    awk '/^tps/ {print $3; exit}'
}

measure() { # label server_cpu client_cpu
  start_server "$2"
  local a=() b=() rss=0
  for r in $(seq "$ROUNDS"); do
    a+=("$(tps "$3")")
    /usr/bin/time -f '%M' -o "$DIR/rss" "$CPULAB" watch --quiet --json --pid "$PG" \
      --duration "$((SECS + 2))s" >"$DIR/watch.json" &
    local w=$!
    sleep 1
    b+=("$(tps "$3")")
    wait "$w" || true
    rss=$(( $(cat "$DIR/rss") > rss ? $(cat "$DIR/rss") : rss ))
    lost=$(python3 -c "import json;d=json.load(open('$DIR/watch.json'));print(d['lost_records'], sum(g['wakeups'] for g in d['groups'])/d['window_s'])")
    echo "$1 round $r: without ${a[-1]} tps, with ${b[-1]} tps (watch: lost records, wakeups/s = $lost)"
  done
  stop_server
  python3 - "$1" "${a[*]}" "${b[*]}" "$rss" <<'PY'
import sys, statistics as st
label, a, b, rss = sys.argv[1], list(map(float, sys.argv[2].split())), list(map(float, sys.argv[3].split())), int(sys.argv[4])
ratios = [y / x for x, y in zip(a, b)]
print(f"{label}: without {st.mean(a):.0f} tps (sd {st.stdev(a):.0f}), with watch {st.mean(b):.0f} tps "
      f"(sd {st.stdev(b):.0f}); ratio with/without {st.mean(ratios):.3f} "
      f"(per round {min(ratios):.3f}..{max(ratios):.3f}); watch peak RSS {rss/1024:.1f} MB")
PY
}

measure "one CPU apart (server 0, client 1)" 0 1
measure "same CPU (server 0, client 0)" 0 0
