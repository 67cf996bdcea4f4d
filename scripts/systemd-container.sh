#!/usr/bin/env bash
# A Debian root with systemd as its PID 1, booted with systemd-nspawn, for what needs a real
# systemd: the .deb's life (scripts/deb-lifecycle.sh) and remedies applied to a running service
# (tests/common/container.rs, tests/systemd_container.rs). docs/testing.md says how it is used.
#
#   scripts/systemd-container.sh root            # builds the root once, prints its path
#   scripts/systemd-container.sh boot [DIR...]   # boots it; runs until SIGTERM
#
# root: mmdebstrap builds the root from Debian's packages into target/systemd-root/KEY/root,
# where KEY is a hash of the suite and the package list below, so a root is reused while they
# are unchanged, and a change builds a new one (older keys are deleted then). Built into a
# temporary directory and renamed, so a build that fails is never reused; a lock keeps two
# builds from racing.
#
# boot: in a mount namespace of its own, an overlay (the root below, a tmpfs above) is what the
# container boots, so every boot starts from the same root and writes nothing to it; each DIR
# is bound read-only at the same path inside. The script execs into systemd-nspawn (same pid:
# SIGTERM to it halts the container cleanly), and the mounts belong to that namespace alone, so
# they are gone when the container's last process is, however it ends: nothing is left mounted.
# The container has its own network namespace with only a loopback, and CAP_BPF and CAP_PERFMON
# on top of nspawn's default set, which the exporter's unit gives its service.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

suite=bookworm
# What the container needs beyond minbase: systemd as PID 1, its bus and its dynamic users'
# names, curl for /metrics and jq for the JSON the checks read.
packages=(systemd systemd-sysv dbus libnss-systemd curl jq)

die() {
    echo "systemd-container: $*" >&2
    exit 1
}

need() {
    command -v "$1" >/dev/null || die "no $1: apt-get install $2"
}

cache=$here/target/systemd-root

key() {
    printf '%s\n' "$suite" minbase "${packages[@]}" | sha256sum | cut -c1-16
}

root() {
    [ "$(id -u)" -eq 0 ] || die "building the root needs root (mmdebstrap)"
    need mmdebstrap mmdebstrap
    local k dir
    k=$(key)
    dir="$cache/$k"
    mkdir -p "$cache"
    exec 9>"$cache/lock"
    flock 9
    if [ ! -d "$dir/root" ]; then
        local started=$SECONDS
        rm -rf "$dir.tmp"
        mkdir -p "$dir.tmp"
        local list
        list=$(IFS=,; echo "${packages[*]}")
        mmdebstrap --quiet --variant=minbase --include="$list" "$suite" "$dir.tmp/root" \
            >"$dir.tmp/mmdebstrap.log" 2>&1 \
            || { cat "$dir.tmp/mmdebstrap.log" >&2; rm -rf "$dir.tmp"; die "mmdebstrap $suite failed"; }
        # The machine id is made at each boot (the overlay's upper layer), never shared.
        : >"$dir.tmp/root/etc/machine-id"
        printf '%s\n' "$suite" "${packages[@]}" >"$dir.tmp/packages"
        mkdir "$dir.tmp/overlay"
        mv "$dir.tmp" "$dir"
        echo "systemd-container: built $dir/root in $((SECONDS - started)) s" >&2
        # Roots of other package lists are not reused: delete them.
        find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$k" -exec rm -rf {} +
    fi
    flock -u 9
    echo "$dir"
}

boot() {
    need systemd-nspawn systemd-container
    need unshare util-linux
    local dir
    dir=$(root)
    exec unshare --mount --propagation private -- "$0" _boot "$dir" "$@"
}

# Inside the private mount namespace: the overlay, then nspawn in place of this shell.
_boot() {
    local dir=$1 o
    shift
    o="$dir/overlay"
    mount -t tmpfs -o mode=0700 cpulab-container "$o"
    mkdir "$o/upper" "$o/work" "$o/merged"
    mount -t overlay overlay -o "lowerdir=$dir/root,upperdir=$o/upper,workdir=$o/work" "$o/merged"
    local binds=()
    for b in "$@"; do binds+=("--bind-ro=$b"); done
    exec systemd-nspawn --quiet --register=no --keep-unit --private-network \
        --capability=CAP_BPF,CAP_PERFMON --system-call-filter="bpf perf_event_open" --console=read-only \
        --machine="cpulab-$$" -D "$o/merged" "${binds[@]}" -b
}

case "${1:-}" in
    root) root ;;
    boot) shift; boot "$@" ;;
    _boot) shift; _boot "$@" ;;
    *) die "usage: $0 root | boot [DIR...]" ;;
esac
