#!/usr/bin/env bash
# Builds the cpulab .deb with cargo-deb: the release binary, its man pages and completions,
# the exporter's and the doctor's systemd units, the maintainer scripts (packaging/README.md)
# and the Prometheus files. With --install, also installs it with
# dpkg -i and runs the installed exporter briefly: it must serve /metrics and stop on SIGTERM
# with 0. Used by .ci/run; needs `cargo install cargo-deb --locked`.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked
rm -rf target/assets
mkdir -p target/assets/man target/assets/completions
target/release/cpulab manpages target/assets/man >/dev/null
target/release/cpulab completions bash >target/assets/completions/cpulab
target/release/cpulab completions zsh >target/assets/completions/_cpulab
target/release/cpulab completions fish >target/assets/completions/cpulab.fish
deblog=$(mktemp)
deb=$(cargo deb --no-build --locked 2>"$deblog" | tail -1) || { cat "$deblog" >&2; rm -f "$deblog"; exit 1; }
rm -f "$deblog"
echo "built $deb"

[ "${1:-}" = "--install" ] || exit 0
dpkg -i "$deb" >/dev/null
test -x /usr/bin/cpulab
test -f /usr/lib/systemd/system/cpulab-exporter.service
dpkg -L cpulab | grep '/man1/cpulab-exporter\.1' >/dev/null

# The installed exporter, briefly, on a free loopback port.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$(mktemp)
/usr/bin/cpulab exporter --listen "127.0.0.1:$port" 2>"$log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null && break
    sleep 0.1
done
curl -sf "http://127.0.0.1:$port/metrics" | grep '^cpulab_machine_info{' >/dev/null
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || { echo "installed exporter exited $rc after SIGTERM"; cat "$log"; exit 1; }
echo "installed exporter served /metrics and stopped with 0"
