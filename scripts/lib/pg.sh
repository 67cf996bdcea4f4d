# Sourced by the scripts that run pgbench against a private PostgreSQL (bench-exporter.sh,
# bench-watch.sh, pgbench-manual.sh): finds the server programs, starts a throwaway cluster the
# way field note A does (`taskset -c 0 pg_ctl start`, Unix socket only, in the caller's private
# directory `$dir`), runs one pgbench SELECT 1, and the small statistics the scripts print.
# The caller defines `die MESSAGE` and sets `secs` (seconds per pgbench run).

# Sets `bindir` to the newest PostgreSQL's programs.
pg_find() {
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$bindir" ] && [ -x "$bindir/initdb" ] || die "PostgreSQL not found (Debian package postgresql)"
}

# As root the server runs as `postgres`; as an ordinary user, as that user.
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# A new cluster in "$dir/data" and the server started pinned to CPU 0.
pg_start() {
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    as_pg "$bindir/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log"; die "initdb failed"; }
    echo 'SELECT 1;' >"$dir/select1.sql"
    chmod 644 "$dir/select1.sql"
    as_pg taskset -c 0 "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-k $dir -c listen_addresses='' -p 5432" start >/dev/null
}

pg_stop() {
    as_pg "$bindir/pg_ctl" -D "$dir/data" stop -m fast >/dev/null 2>&1 || true
}

tps() { # CPU -> tps of one pgbench -c 1 run pinned there
    taskset -c "$1" "$bindir/pgbench" -n -f "$dir/select1.sql" -c 1 -j 1 -T "$secs" \
        -h "$dir" -p 5432 -U postgres postgres 2>/dev/null \
        | sed -n 's/^tps = \([0-9.]*\) .*/\1/p'
}

mean() { printf '%s\n' "$@" | awk '{s += $1} END {printf "%.1f", s / NR}'; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
spread() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 {lo = $1} {hi = $1} END {printf "%.3f..%.3f", lo, hi}'; }
