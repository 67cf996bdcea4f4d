#!/usr/bin/env bash
# The .deb's life as an operator meets it, under a running systemd: a Debian container booted
# with systemd-nspawn (scripts/systemd-container.sh) installs the current .deb, enables and
# starts the exporter (its dynamic user, its hardening, its systemd-analyze security exposure),
# sees a crash restarted and bad input (exit 2) not, gives it a web config through
# LoadCredential=, fires the doctor's timer and finds its run on /metrics, upgrades to a build
# of a higher version (the running exporter restarted on the new binary: its
# cpulab_exporter_build_info changes), removes and purges it (scripts/lib/deb-lifecycle-steps.sh,
# each step one line). The host's own packages are not touched.
#
#   scripts/deb-lifecycle.sh [CURRENT.deb]    # default: target/debian/cpulab_*.deb
#
# Run as root after scripts/build-deb.sh; used by .ci/run. Needs systemd-container and
# mmdebstrap (apt-get install), and Debian's mirror the first time (the container's root is
# built once into target/systemd-root). The higher version is a release build of the same
# source with CPULAB_LOCAL_VERSION=lifecycle.1 (the cpulab crate alone is rebuilt), packaged
# by `cargo deb --no-build --deb-version`; target/release/cpulab is that build afterwards, until
# the next scripts/build-deb.sh. A machine where the container cannot boot fails here, with the
# reason.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/container.sh

units=(cpulab-exporter.service cpulab-doctor.service cpulab-doctor.timer)
say() { echo "deb-lifecycle: $*"; }
fail() {
    echo "deb-lifecycle: FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run as root (mmdebstrap, systemd-nspawn)"
deb=${1:-$(find target/debian -maxdepth 1 -name 'cpulab_*.deb' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)}
[ -f "$deb" ] || fail "no .deb: run scripts/build-deb.sh first"
current=$(dpkg-deb -f "$deb" Version)
local_version=lifecycle.1
higher="${current%-*}+$local_version-1"
dpkg --compare-versions "$higher" gt "$current" || fail "$higher is not above $current"
# The exposure systemd-analyze security gave the exporter's unit, recorded in packaging/README.md:
# a higher one fails (a hardening setting was lost or weakened).
max_exposure=$(sed -n 's/^Recorded exposure: \*\*\([0-9.]*\)\*\*.*/\1/p' packaging/README.md)
[ -n "$max_exposure" ] || fail "packaging/README.md has no 'Recorded exposure: **N**' line"

work=$(mktemp -d)
cleanup() {
    container_stop
    rm -rf "$work"
}
trap cleanup EXIT

# --- The higher version: the same source built as ${current%-*}+$local_version. ---
say "current $current ($deb), higher $higher"
cp "$deb" "$work/current.deb"
CPULAB_LOCAL_VERSION=$local_version cargo build --release --locked --quiet 2>"$work/build.log" \
    || { cat "$work/build.log" >&2; fail "cargo build --release with CPULAB_LOCAL_VERSION=$local_version"; }
case "$(target/release/cpulab --version)" in
    *"+$local_version"*) ;;
    *) fail "target/release/cpulab is $(target/release/cpulab --version), not the +$local_version build" ;;
esac
# cargo deb deletes the package's other .debs in target/debian: the current one is copied back.
cargo deb --no-build --locked --deb-version "$higher" --output "$work/higher.deb" >/dev/null 2>"$work/cargo-deb.log" \
    || { cat "$work/cargo-deb.log" >&2; fail "cargo deb --deb-version $higher"; }
[ -f "$deb" ] || cp "$work/current.deb" "$deb"
[ "$(dpkg-deb -f "$work/higher.deb" Version)" = "$higher" ] || fail "the rebuilt .deb is not $higher"

# The maintainer scripts as generated: cargo-deb replaces every debhelper token, a comment's
# too, and generated code before `set -e` would run twice and unchecked.
dpkg-deb -e "$deb" "$work/control"
for u in "${units[@]}"; do
    grep -q "deb-systemd-invoke try-restart .*$u" "$work/control/postinst" || fail "postinst does not try-restart $u on upgrade"
    grep -q "deb-systemd-invoke stop .*$u" "$work/control/prerm" || fail "prerm does not stop $u on removal"
done
for script in postinst prerm postrm; do
    awk '/^set -e$/ { on = 1 } /Automatically added/ && !on { bad = 1 } END { exit bad }' "$work/control/$script" \
        || fail "$script: generated code before set -e"
done

# --- The package's life inside the container. ---
cp scripts/lib/deb-lifecycle-steps.sh "$work/steps.sh"
container_start "$work/boot.log" "$work" || fail "the systemd container did not boot (above); it needs systemd-container, mmdebstrap and Debian's mirror"
say "container booted in ${container_boot_s} s (systemd $(container_run systemctl --version | awk 'NR == 1 { print $2 }'))"
container_run bash "$work/steps.sh" "$work/current.deb" "$work/higher.deb" "$max_exposure"
container_stop
say "passed"
