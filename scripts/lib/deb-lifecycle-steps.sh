#!/usr/bin/env bash
# The .deb's life under a running systemd, run inside the container scripts/deb-lifecycle.sh
# boots (a root with no cpulab):
#
#   deb-lifecycle-steps.sh CURRENT.deb HIGHER.deb MAX_EXPOSURE
#
# install, the exporter enabled and started (its user, its hardening, its exposure score),
# Restart= on a crash but not on bad input (exit 2), a web config through LoadCredential=, the
# doctor's timer firing and its findings on /metrics, upgrade, remove and purge. Each step
# prints one line; the first check that fails ends the script with FAIL and the reason.
set -euo pipefail

deb=$1
higher_deb=$2
max_exposure=$3
current=$(dpkg-deb -f "$deb" Version)
higher=$(dpkg-deb -f "$higher_deb" Version)

units=(cpulab-exporter.service cpulab-doctor.service cpulab-doctor.timer)
unitdir=/usr/lib/systemd/system
conffile=/etc/default/cpulab-exporter
exporter=cpulab-exporter.service
dropin=/etc/systemd/system/cpulab-exporter.service.d/50-lifecycle-credential.conf
timer_dropin=/etc/systemd/system/cpulab-doctor.timer.d/50-lifecycle-now.conf
webdir=/etc/cpulab
# The test's basic-auth user and password; the web config holds only its bcrypt hash
# (htpasswd -nbBC 10 prometheus lifecycle-secret makes one like it).
user=prometheus
password=lifecycle-secret
hash='$2b$10$h/dF3YaCLa7PTJGkOH6Om.O6NbD2zjdgZ8ui.RfilL3nfiZQJP.dm'
listen=127.0.0.1:10039
export DEBIAN_FRONTEND=noninteractive

say() { echo "deb-lifecycle: $*"; }
fail() {
    echo "deb-lifecycle: FAIL: $*" >&2
    journalctl -u cpulab-exporter.service -u cpulab-doctor.service -n 30 --no-pager >&2 2>/dev/null || true
    exit 1
}

status() { dpkg-query -W -f='${db:Status-Abbrev}' cpulab 2>/dev/null | tr -d ' ' || true; }
prop() { systemctl show -P "$1" "$2"; }
# Waits up to 60 s for `cmd...` to succeed.
wait_for() {
    local what=$1
    shift
    for _ in $(seq 600); do
        "$@" && return 0
        sleep 0.1
    done
    fail "not within 60 s: $what"
}
active_with_pid() {
    [ "$(prop ActiveState "$exporter")" = active ] && [ "$(prop MainPID "$exporter")" -ne 0 ]
}
main_pid() {
    wait_for "$exporter active with a main process" active_with_pid
    prop MainPID "$exporter"
}
metrics() { curl -sf "$@" "http://$listen/metrics"; }
# Whether a line matching PATTERN is on /metrics (curl's other arguments after it). The scrape
# is read whole first: `metrics | grep -q` under pipefail fails whenever grep stops reading
# before curl has written everything (curl then exits 23 on the closed pipe).
on_metrics() {
    local pattern=$1 page
    shift
    page=$(metrics "$@") || return 1
    grep -q -- "$pattern" <<<"$page"
}
serving() { metrics "$@" -o /dev/null; }
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
build_version() {
    metrics "$@" | sed -n 's/^cpulab_exporter_build_info{version="\([^"]*\)"} 1$/\1/p'
}

check_installed() {
    local version=$1 u out
    [ "$(status)" = ii ] || fail "cpulab is $(status), not installed"
    [ "$(dpkg-query -W -f='${Version}' cpulab)" = "$version" ] || fail "installed $(dpkg-query -W -f='${Version}' cpulab), not $version"
    /usr/bin/cpulab --version >/dev/null || fail "/usr/bin/cpulab --version failed"
    for u in "${units[@]}"; do
        [ -f "$unitdir/$u" ] || fail "no $unitdir/$u"
        [ "$(prop LoadState "$u")" = loaded ] || fail "$u is $(prop LoadState "$u"), not loaded"
    done
    grep -q "^ $conffile " <<<"$(dpkg-query -W -f='${Conffiles}\n' cpulab)" || fail "$conffile is not a conffile"
    out=$(cd "$unitdir" && systemd-analyze verify --man=no "${units[@]}" 2>&1) || fail "systemd-analyze verify: $out"
    [ -z "$out" ] || fail "systemd-analyze verify: $out"
}

# --- Install: the units loaded by systemd, none enabled or started. ---
[ -z "$(status)" ] || [ "$(status)" = un ] || fail "the container has cpulab already ($(status))"
dpkg -i "$deb" >/dev/null
check_installed "$current"
for u in "${units[@]}"; do
    # disabled, or static for the doctor's service, which only its timer starts
    case "$(systemctl is-enabled "$u" 2>/dev/null || true)" in
        disabled | static) ;;
        *) fail "$u is $(systemctl is-enabled "$u" 2>&1) after install" ;;
    esac
    [ "$(prop ActiveState "$u")" = inactive ] || fail "$u is $(prop ActiveState "$u") after install"
done
installed_binary_running && fail "installing started cpulab"
say "install: $current, 3 units loaded and verified, none enabled or active, no cpulab running"

# --- Enable: the exporter as its dynamic user, with its sandbox in force. ---
systemctl enable --now "$exporter" 2>/dev/null
[ "$(systemctl is-enabled "$exporter")" = enabled ] || fail "$exporter is not enabled"
pid=$(main_pid)
wait_for "/metrics on $listen" serving
on_metrics '^cpulab_machine_info{' || fail "no cpulab_machine_info on /metrics"
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" -ne 0 ] || fail "the exporter runs as root"
awk '/^Uid:|^Gid:/ { for (i = 2; i <= 5; i++) if ($i == 0) bad = 1 } END { exit bad }' "/proc/$pid/status" \
    || fail "the exporter keeps a root id: $(grep -E '^(Uid|Gid):' "/proc/$pid/status")"
[ "$(getent passwd "$uid" | cut -d: -f1)" = cpulab ] || fail "uid $uid is not the dynamic user cpulab: $(getent passwd "$uid" || echo none)"
grep -q '^cpulab:' /etc/passwd && fail "the package put cpulab in /etc/passwd (the unit's user is dynamic)"
# CAP_PERFMON (38) and CAP_BPF (39), nothing else, and no way to gain more.
for set in CapEff CapPrm CapBnd CapAmb; do
    [ "$(awk -v s="$set:" '$1 == s { print $2 }' "/proc/$pid/status")" = 000000c000000000 ] \
        || fail "$set is $(awk -v s="$set:" '$1 == s { print $2 }' "/proc/$pid/status"), not CAP_BPF CAP_PERFMON"
done
[ "$(awk '$1 == "NoNewPrivs:" { print $2 }' "/proc/$pid/status")" = 1 ] || fail "NoNewPrivs is not set"
[ "$(awk '$1 == "Seccomp:" { print $2 }' "/proc/$pid/status")" = 2 ] || fail "no seccomp filter (SystemCallFilter=)"
# ProtectSystem=strict: the root the service sees is read-only; PrivateTmp=: its own /tmp.
awk '$5 == "/" { split($6, o, ","); if (o[1] != "ro") bad = 1; seen = 1 } END { exit bad || !seen }' "/proc/$pid/mountinfo" \
    || fail "the exporter's / is writable (ProtectSystem=strict)"
awk '$5 == "/tmp" { seen = 1 } END { exit !seen }' "/proc/$pid/mountinfo" || fail "the exporter has no private /tmp"
exposure=$(systemd-analyze security --no-pager "$exporter" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
[ -n "$exposure" ] || fail "systemd-analyze security printed no exposure level"
awk -v e="$exposure" -v m="$max_exposure" 'BEGIN { exit !(e <= m) }' \
    || fail "systemd-analyze security: exposure $exposure, above the recorded $max_exposure (packaging/README.md): a hardening setting was lost"
say "enable --now: pid $pid as dynamic user cpulab (uid $uid), CapEff CAP_BPF CAP_PERFMON only, NoNewPrivs, seccomp, read-only /, private /tmp; systemd-analyze security exposure $exposure (at most $max_exposure)"

# --- Restart policy: a crash is restarted, bad input (exit 2) is not, so it cannot loop. ---
restarts=$(prop NRestarts "$exporter")
kill -KILL "$pid"
restarted() { [ "$(prop NRestarts "$exporter")" -gt "$restarts" ] && active_with_pid; }
wait_for "$exporter restarted after SIGKILL" restarted
pid=$(main_pid)
say "restart: SIGKILL of the exporter restarted it (NRestarts $(prop NRestarts "$exporter"), pid $pid)"
cp "$conffile" /tmp/conffile.orig
echo 'CPULAB_EXPORTER_ARGS="--no-such-flag"' >>"$conffile"
systemctl restart "$exporter"
failed() { [ "$(prop ActiveState "$exporter")" = failed ]; }
wait_for "$exporter failed on a bad flag" failed
[ "$(prop ExecMainStatus "$exporter")" = 2 ] || fail "a bad flag exited $(prop ExecMainStatus "$exporter"), not 2"
restarts=$(prop NRestarts "$exporter")
# Twice RestartSec=: a restart would have come by then.
restart_s=$(prop RestartUSec "$exporter" | sed -n 's/^\([0-9]*\)s$/\1/p')
[ -n "$restart_s" ] || fail "RestartSec is $(prop RestartUSec "$exporter"), not whole seconds"
sleep $((2 * restart_s))
[ "$(prop ActiveState "$exporter")" = failed ] || fail "after exit 2 the exporter is $(prop ActiveState "$exporter"), not failed"
[ "$(prop NRestarts "$exporter")" = "$restarts" ] || fail "exit 2 was restarted (NRestarts $restarts -> $(prop NRestarts "$exporter"))"
grep -q -- '--no-such-flag' <<<"$(journalctl -u "$exporter" --no-pager -n 20)" || fail "the journal does not name the bad flag"
cp /tmp/conffile.orig "$conffile"
systemctl reset-failed "$exporter"
say "restart: a bad flag exits 2 and stays failed for $((2 * restart_s)) s, not restarted, the flag named in the journal"

# --- The web config as a credential: root-only on disk, given to the dynamic user by systemd. ---
mkdir -p "$webdir"
(umask 077 && printf 'basic_auth_users:\n  %s: %s\n' "$user" "$hash" >"$webdir/web.yml")
mkdir -p "$(dirname "$dropin")"
printf '[Service]\nLoadCredential=web.yml:%s/web.yml\n' "$webdir" >"$dropin"
echo "CPULAB_EXPORTER_ARGS=\"--web.listen-address $listen --web.config.file /run/credentials/$exporter/web.yml\"" >>"$conffile"
systemctl daemon-reload
systemctl restart "$exporter"
pid=$(main_pid)
wait_for "/metrics with basic auth" serving -u "$user:$password"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$listen/metrics")
[ "$code" = 401 ] || fail "without a password /metrics answered $code, not 401"
code=$(curl -s -o /dev/null -w '%{http_code}' -u "$user:wrong" "http://$listen/metrics")
[ "$code" = 401 ] || fail "with a wrong password /metrics answered $code, not 401"
[ "$(stat -c '%a %U' "$webdir/web.yml")" = "600 root" ] || fail "$webdir/web.yml is $(stat -c '%a %U' "$webdir/web.yml")"
# Its copy is readable where the exporter looks, and only there (the credential's own mount).
grep -q " /run/credentials/$exporter " "/proc/$pid/mountinfo" || fail "no credentials mount in the exporter's namespace"
say "credential: web.yml (0600 root) through LoadCredential=; /metrics 401 without or with a wrong password, 200 with it"

# --- The doctor's timer, fired now by a drop-in; its findings on /metrics. ---
mkdir -p "$(dirname "$timer_dropin")"
printf '[Timer]\nOnCalendar=\nRandomizedDelaySec=0\nOnActiveSec=1s\nAccuracySec=1s\n' >"$timer_dropin"
systemctl daemon-reload
systemctl enable --now cpulab-doctor.timer 2>/dev/null
doctor_ran() {
    [ "$(prop ExecMainExitTimestampMonotonic cpulab-doctor.service)" -gt 0 ] \
        && [ "$(prop ActiveState cpulab-doctor.service)" != activating ]
}
for _ in $(seq 1800); do doctor_ran && break; sleep 0.1; done
doctor_ran || fail "cpulab-doctor.service did not run within 180 s of its timer"
[ "$(prop Result cpulab-doctor.service)" = success ] || fail "cpulab-doctor.service: $(prop Result cpulab-doctor.service), exit $(prop ExecMainStatus cpulab-doctor.service)"
run_id=$(CPULAB_HISTORY=/var/lib/cpulab/history.sqlite cpulab history list --kind doctor --json \
    | sed -n 's/.*"id": *\([0-9][0-9]*\).*/\1/p' | sort -n | tail -1)
[ -n "$run_id" ] || fail "the timer's doctor run is not in /var/lib/cpulab/history.sqlite"
published() {
    on_metrics "^cpulab_doctor_run_info{history_id=\"$run_id\"," -u "$user:$password"
}
wait_for "doctor run $run_id on /metrics" published
on_metrics '^cpulab_doctor_history_info{state="ok"} 1' -u "$user:$password" || fail "cpulab_doctor_history_info is not ok"
findings=$(CPULAB_HISTORY=/var/lib/cpulab/history.sqlite cpulab history show "$run_id" --json \
    | jq -r '.. | objects | select(has("findings")) | .findings[]? | objects | .id' | sort -u)
served=$(metrics -u "$user:$password" | sed -n 's/^cpulab_doctor_finding{id="\([^"]*\)".*/\1/p' | sort -u)
[ "$served" = "$findings" ] || fail "/metrics has findings [${served//$'\n'/ }], run $run_id has [${findings//$'\n'/ }]"
say "timer: cpulab-doctor.service ran from the timer (history run $run_id); /metrics publishes that run and its findings, the same as the history's: ${served//$'\n'/ }"

# --- Upgrade: the running exporter restarted on the new binary; the operator's edits kept. ---
old_pid=$(main_pid)
old_version=$(build_version -u "$user:$password")
[ "$old_version" = "${current%-*}" ] || fail "the exporter's build_info says ${old_version:-nothing}, not ${current%-*}"
dpkg -i --force-confold "$higher_deb" >/dev/null
check_installed "$higher"
new_pid=$(main_pid)
[ "$new_pid" != "$old_pid" ] || fail "the upgrade did not restart the exporter (pid $old_pid)"
# systemd forks the new main process and execs the binary after: until then its exe is systemd.
runs_cpulab() { [ "$(readlink "/proc/$new_pid/exe")" = /usr/bin/cpulab ]; }
wait_for "the restarted exporter (pid $new_pid) to run /usr/bin/cpulab, not $(readlink "/proc/$new_pid/exe")" runs_cpulab
wait_for "/metrics after the upgrade" serving -u "$user:$password"
new_version=$(build_version -u "$user:$password")
[ -n "$new_version" ] && [ "$new_version" != "$old_version" ] || fail "cpulab_exporter_build_info is still ${old_version} after the upgrade"
grep -q "web.config.file /run/credentials/" "$conffile" || fail "the upgrade lost the conffile's edit"
[ "$(systemctl is-enabled "$exporter")" = enabled ] || fail "the upgrade disabled the exporter"
say "upgrade: $higher; exporter restarted (pid $old_pid -> $new_pid), build_info $old_version -> $new_version, still enabled, conffile edit and credential kept"

# --- Remove: stopped, binary and units gone, the conffile kept. ---
dpkg -r cpulab >/dev/null
[ "$(status)" = rc ] || fail "after remove cpulab is $(status), not rc"
[ ! -e /usr/bin/cpulab ] || fail "remove left /usr/bin/cpulab"
for u in "${units[@]}"; do
    [ ! -e "$unitdir/$u" ] || fail "remove left $unitdir/$u"
    [ "$(prop ActiveState "$u")" != active ] || fail "remove left $u active"
done
installed_binary_running && fail "remove left a cpulab process running"
grep -q "web.config.file /run/credentials/" "$conffile" || fail "remove did not keep the conffile"
say "remove: exporter and timer stopped, no cpulab process, binary and units gone, conffile kept"

# --- Purge: nothing of the package left. ---
# The operator's own files first, as an operator undoing the set-up would.
rm -rf "$(dirname "$dropin")" "$(dirname "$timer_dropin")" "$webdir"
systemctl daemon-reload
dpkg --purge cpulab >/dev/null
[ -z "$(status)" ] || [ "$(status)" = un ] || fail "after purge cpulab is $(status)"
[ ! -e "$conffile" ] || fail "purge left $conffile"
for d in /var/lib/cpulab /var/lib/private/cpulab; do
    [ ! -e "$d" ] && [ ! -L "$d" ] || fail "purge left $d"
done
left=$(find /etc /usr /var/lib/systemd -name '*cpulab*' 2>/dev/null || true)
[ -z "$left" ] || fail "purge left $left"
if dpkg -S cpulab >/dev/null 2>&1; then fail "dpkg -S still finds cpulab: $(dpkg -S cpulab 2>&1 | head -3)"; fi
getent passwd cpulab >/dev/null && fail "the user cpulab still exists after purge"
say "purge: conffile, state, units' enable state and masks gone; dpkg -S finds nothing; no user cpulab"
