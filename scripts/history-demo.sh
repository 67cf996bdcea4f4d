#!/usr/bin/env bash
# The history names a changed setting: three `cpulab doctor --quick` runs, then halt polling
# changed with `cpulab try --keep` (a measured trial that leaves the new value), three more
# doctor runs, `cpulab history check --kind doctor`, and halt polling restored the same way.
# Needs root and the haltpoll module (a KVM guest). Runs in a fresh history file in a temporary
# directory (kept, and named at the end, so `cpulab --history FILE history report --html` can
# be run on it). CPULAB=path/to/cpulab to use another binary.
set -euo pipefail
CPULAB=${CPULAB:-cpulab}
param=/sys/module/haltpoll/parameters/guest_halt_poll_ns
if [ "$(id -u)" != 0 ] || [ ! -r "$param" ]; then
    echo "history-demo: needs root and the haltpoll module ($param)" >&2
    exit 2
fi
dir=$(mktemp -d)
H="$dir/history.sqlite"
orig=$(cat "$param")
# Halting at once (0) if the guest polls now, else polling for 200 us.
if [ "$orig" = 0 ]; then new=200000; else new=0; fi
doctor() {
    for i in 1 2 3; do
        "$CPULAB" --history "$H" -q doctor --quick > /dev/null
    done
}
echo "load before: $(cat /proc/loadavg)"
echo "== 3 doctor runs with haltpoll.guest_halt_poll_ns=$orig"
doctor
echo "== cpulab try haltpoll.guest_halt_poll_ns=$new --keep"
"$CPULAB" --history "$H" -q try "haltpoll.guest_halt_poll_ns=$new" --keep --rounds 3 > /dev/null
restore() {
    echo "== restoring haltpoll.guest_halt_poll_ns=$orig (cpulab try --keep)"
    "$CPULAB" --no-history -q try "haltpoll.guest_halt_poll_ns=$orig" --keep --rounds 3 > /dev/null \
        || echo "history-demo: restore failed; run: cpulab try haltpoll.guest_halt_poll_ns=$orig --keep" >&2
    echo "now: $(cat "$param")"
}
trap restore EXIT
echo "== 3 doctor runs with haltpoll.guest_halt_poll_ns=$new"
doctor
echo "== cpulab history check --kind doctor"
"$CPULAB" --history "$H" history check --kind doctor || true
echo "load after: $(cat /proc/loadavg)"
echo "history kept in $H"
