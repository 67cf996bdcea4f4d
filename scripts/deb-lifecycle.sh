#!/usr/bin/env bash
# The .deb's lifecycle as an operator meets it: install the current .deb on a machine without
# cpulab, upgrade to a copy of it at a higher version, remove, purge, and check what each step
# leaves (binary, units, conffile, state, version, running exporter). Ends with the current
# .deb installed again, as scripts/build-deb.sh --install left it (tests/exporter_service.rs
# checks the installed unit).
#
#   scripts/deb-lifecycle.sh [CURRENT.deb]    # default: target/debian/cpulab_*.deb
#
# Run as root after scripts/build-deb.sh (the higher version is `cargo deb --no-build
# --deb-version` of the same build). Used by .ci/run.
#
# With systemd running, the exporter is started from its unit before the upgrade: the upgrade
# must restart it on the new binary, and removal must stop it. Without systemd as PID 1 (a
# container, as CI's machines are) that part cannot exist: no package installs an init system
# into a running container. It prints NOT RUN with the reason, and does not fail: the generated
# scripts' systemd calls are checked as text above, and the path that does run here, every
# maintainer script succeeding without systemd, is the one the rest checks.
#
# Purge deletes the package's state, /var/lib/cpulab, which is also root's default history:
# whatever is there is moved aside first and put back at the end, with the conffile's text.
set -euo pipefail
cd "$(dirname "$0")/.."

units=(cpulab-exporter.service cpulab-doctor.service cpulab-doctor.timer)
unitdir=/usr/lib/systemd/system
conffile=/etc/default/cpulab-exporter
state=/var/lib/cpulab
private_state=/var/lib/private/cpulab
export DEBIAN_FRONTEND=noninteractive

say() { echo "deb-lifecycle: $*"; }
fail() {
    echo "deb-lifecycle: FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "run as root (dpkg -i, -r, -P)"
deb=${1:-$(find target/debian -maxdepth 1 -name 'cpulab_*.deb' -printf '%T@ %p\n' | sort -n | tail -1 | cut -d' ' -f2-)}
[ -f "$deb" ] || fail "no .deb: run scripts/build-deb.sh first"
current=$(dpkg-deb -f "$deb" Version)
higher="${current%-*}+lifecycle-1"
dpkg --compare-versions "$higher" gt "$current" || fail "$higher is not above $current"

work=$(mktemp -d)
backup="$work/backup"
mkdir "$backup"
restore() {
    # Whatever happened, cpulab ends installed at the current version, with what was there.
    local again=$deb
    [ -f "$work/current.deb" ] && again=$work/current.deb
    if [ "$(dpkg-query -W -f='${Version} ${db:Status-Abbrev}' cpulab 2>/dev/null || true)" != "$current ii " ]; then
        dpkg -i --force-confold "$again" >/dev/null || echo "deb-lifecycle: could not reinstall $again" >&2
    fi
    [ -f "$backup/conffile" ] && cat "$backup/conffile" >"$conffile"
    for d in state private_state; do
        [ -e "$backup/$d" ] || [ -L "$backup/$d" ] || continue
        if [ -e "${!d}" ] || [ -L "${!d}" ]; then
            echo "deb-lifecycle: ${!d} exists again; the one from before is kept at $backup/$d" >&2
            return
        fi
        mkdir -p "$(dirname "${!d}")"
        mv "$backup/$d" "${!d}"
    done
    rm -rf "$work"
}
trap restore EXIT

status() { dpkg-query -W -f='${db:Status-Abbrev}' cpulab 2>/dev/null | tr -d ' ' || true; }
systemd_running() { [ -d /run/systemd/system ]; }
# Processes running the installed binary, also after dpkg replaced or deleted it.
installed_binary_running() {
    local exe
    for exe in /proc/[0-9]*/exe; do
        case "$(readlink "$exe" 2>/dev/null || true)" in
            /usr/bin/cpulab | "/usr/bin/cpulab (deleted)" | /usr/bin/.dpkg-new*) return 0 ;;
        esac
    done
    return 1
}
# Waits up to 20 s for the exporter unit's main process; prints its pid.
exporter_main_pid() {
    local pid
    for _ in $(seq 200); do
        pid=$(systemctl show -p MainPID --value cpulab-exporter.service)
        if [ "${pid:-0}" -ne 0 ] && systemctl is-active --quiet cpulab-exporter.service; then
            echo "$pid"
            return
        fi
        sleep 0.1
    done
    journalctl -u cpulab-exporter.service -n 20 --no-pager >&2 || true
    fail "cpulab-exporter.service did not start"
}

# What an installed cpulab must have, at a version.
check_installed() {
    local version=$1 u
    [ "$(status)" = ii ] || fail "cpulab is $(status), not installed"
    [ "$(dpkg-query -W -f='${Version}' cpulab)" = "$version" ] || fail "installed $(dpkg-query -W -f='${Version}' cpulab), not $version"
    [ -x /usr/bin/cpulab ] || fail "no /usr/bin/cpulab"
    /usr/bin/cpulab --version >/dev/null || fail "/usr/bin/cpulab --version failed"
    for u in "${units[@]}"; do
        [ -f "$unitdir/$u" ] || fail "no $unitdir/$u"
    done
    [ -f "$conffile" ] || fail "no $conffile"
    dpkg-query -W -f='${Conffiles}\n' cpulab | grep -q "^ $conffile " || fail "$conffile is not a conffile"
    # systemd-analyze verify reads the units' files without a running systemd.
    local out
    out=$(cd "$unitdir" && systemd-analyze verify --man=no "${units[@]}" 2>&1) || fail "systemd-analyze verify: $out"
    [ -z "$out" ] || fail "systemd-analyze verify: $out"
    # Installing enables nothing: no symlink to a cpulab unit anywhere under /etc/systemd.
    [ -z "$(find /etc/systemd -name 'cpulab-*' 2>/dev/null)" ] || fail "a cpulab unit is enabled: $(find /etc/systemd -name 'cpulab-*')"
}

# --- Set-up: the higher version, and a machine without cpulab. ---
say "current $current ($deb), higher $higher"
# cargo deb deletes the package's other .debs in target/debian: keep the current one.
cp "$deb" "$work/current.deb"
cargo deb --no-build --locked --deb-version "$higher" --output "$work/higher.deb" >/dev/null 2>"$work/cargo-deb.log" \
    || { cat "$work/cargo-deb.log" >&2; fail "cargo deb --deb-version $higher"; }
[ -f "$deb" ] || cp "$work/current.deb" "$deb"
[ "$(dpkg-deb -f "$work/higher.deb" Version)" = "$higher" ] || fail "the rebuilt .deb is not $higher"
# The systemd actions the maintainer scripts carry (run live below only with systemd running).
dpkg-deb -e "$deb" "$work/control"
for u in "${units[@]}"; do
    grep -q "deb-systemd-invoke try-restart .*$u" "$work/control/postinst" || fail "postinst does not try-restart $u on upgrade"
    grep -q "deb-systemd-invoke stop .*$u" "$work/control/prerm" || fail "prerm does not stop $u on removal"
done
grep -q 'rm -rf /var/lib/cpulab' "$work/control/postrm" || fail "postrm does not delete the state on purge"
# cargo-deb replaces every debhelper token, a comment's too: generated code before `set -e`
# would run twice and unchecked.
for script in postinst prerm postrm; do
    awk '/^set -e$/ { on = 1 } /Automatically added/ && !on { bad = 1 } END { exit bad }' "$work/control/$script" \
        || fail "$script: generated code before set -e"
done
[ -f "$conffile" ] && cp "$conffile" "$backup/conffile"
if [ -n "$(status)" ] && [ "$(status)" != un ]; then
    if systemd_running; then systemctl stop "${units[@]}" 2>/dev/null || true; fi
    dpkg --purge cpulab >/dev/null
fi
for d in state private_state; do
    if [ -e "${!d}" ] || [ -L "${!d}" ]; then mv "${!d}" "$backup/$d"; fi
done

# --- Install: everything in place, nothing enabled or started. ---
dpkg -i "$deb" >/dev/null
check_installed "$current"
installed_binary_running && fail "installing started cpulab"
say "install: binary, 3 units (verified), conffile; nothing enabled or running"

# The operator's edit of the conffile must survive the upgrade and the removal.
echo '# deb-lifecycle: an operator edit' >>"$conffile"

# --- Upgrade: the new version, the edit kept, a running exporter restarted on it. ---
old_pid=
if systemd_running; then
    systemctl start cpulab-exporter.service
    old_pid=$(exporter_main_pid)
else
    echo "NOT RUN: deb-lifecycle: an upgrade restarting the running exporter, and removal stopping it, need systemd as PID 1, and this machine has none ($(systemctl is-system-running 2>/dev/null || true)); the scripts' systemd calls were checked as text" >&2
fi
dpkg -i --force-confold "$work/higher.deb" >/dev/null
check_installed "$higher"
grep -q '^# deb-lifecycle: an operator edit$' "$conffile" || fail "the upgrade lost the conffile's edit"
if [ -n "$old_pid" ]; then
    new_pid=$(exporter_main_pid)
    [ "$new_pid" != "$old_pid" ] || fail "the upgrade did not restart the exporter (pid $old_pid)"
    [ "$(readlink "/proc/$new_pid/exe")" = /usr/bin/cpulab ] || fail "the restarted exporter runs $(readlink "/proc/$new_pid/exe")"
    say "upgrade: exporter restarted (pid $old_pid -> $new_pid) on the new /usr/bin/cpulab"
fi
say "upgrade: $higher installed, the conffile's edit kept"

# --- Remove: binary and units gone, conffile kept, no exporter running. ---
dpkg -r cpulab >/dev/null
[ "$(status)" = rc ] || fail "after remove cpulab is $(status), not rc"
[ ! -e /usr/bin/cpulab ] || fail "remove left /usr/bin/cpulab"
for u in "${units[@]}"; do
    [ ! -e "$unitdir/$u" ] || fail "remove left $unitdir/$u"
done
grep -q '^# deb-lifecycle: an operator edit$' "$conffile" || fail "remove did not keep the conffile"
if systemd_running; then
    systemctl is-active --quiet cpulab-exporter.service && fail "remove left cpulab-exporter.service active"
fi
installed_binary_running && fail "remove left an exporter running"
say "remove: binary and units gone, conffile kept, no exporter running"

# --- Purge: the conffile and the state gone. ---
# The state the units make under DynamicUser= (StateDirectory=cpulab), when systemd did not.
if [ ! -e "$state" ]; then
    mkdir -p "$private_state"
    ln -s private/cpulab "$state"
    touch "$private_state/history.sqlite"
fi
dpkg --purge cpulab >/dev/null
[ -z "$(status)" ] || [ "$(status)" = un ] || fail "after purge cpulab is $(status)"
[ ! -e "$conffile" ] || fail "purge left $conffile"
if [ -e "$state" ] || [ -L "$state" ] || [ -e "$private_state" ]; then fail "purge left $state or $private_state"; fi
# Nor the masks remove left, nor deb-systemd-helper's memory of the units.
left=$(find /etc/systemd /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked -name 'cpulab-*' 2>/dev/null || true)
[ -z "$left" ] || fail "purge left $left"
say "purge: conffile and $state gone"

# --- Back to the current .deb, as .ci/run expects. ---
dpkg -i "$deb" >/dev/null
check_installed "$current"
say "reinstalled $current"
