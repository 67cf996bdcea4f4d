# Sourced: a booted systemd container (scripts/systemd-container.sh) for a script's checks.
#
#   container_start LOG [DIR...]   # boots it (each DIR bound read-only), waits for systemd
#   container_run CMD...            # runs CMD inside, as root, with a plain environment
#   container_stop                  # halts it (SIGTERM); after 30 s SIGKILL; safe to repeat
#
# Commands run through nsenter into the container's PID 1 (docs/testing.md says why). The
# caller calls container_stop from its EXIT trap.

container_pid=
container_leader=

# The container's PID 1: nspawn's child whose innermost pid is 1.
_container_find_leader() {
    local c
    for c in $(cat /proc/"$container_pid"/task/*/children 2>/dev/null); do
        if awk '/^NSpid:/ { exit !($NF == 1 && NF > 2) }' /proc/"$c"/status 2>/dev/null; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

container_start() {
    local log=$1
    shift
    local script
    script="$(dirname "${BASH_SOURCE[0]}")/../systemd-container.sh"
    # The root is built (or found) first, so its build time is not counted as boot time.
    "$script" root >/dev/null
    local started
    started=$(date +%s.%N)
    "$script" boot "$@" >"$log" 2>&1 &
    container_pid=$!
    local state=
    for _ in $(seq 600); do
        kill -0 "$container_pid" 2>/dev/null || {
            cat "$log" >&2
            echo "systemd-container: systemd-nspawn exited before the container booted" >&2
            return 1
        }
        if [ -z "$container_leader" ]; then
            container_leader=$(_container_find_leader) || container_leader=
        fi
        if [ -n "$container_leader" ]; then
            state=$(container_run systemctl is-system-running 2>/dev/null || true)
            case "$state" in
                running | degraded) break ;;
            esac
        fi
        sleep 0.2
    done
    case "$state" in
        running | degraded) ;;
        *)
            cat "$log" >&2
            echo "systemd-container: not booted after 120 s (state: ${state:-none})" >&2
            return 1
            ;;
    esac
    container_boot_s=$(echo "$(date +%s.%N) $started" | awk '{ printf "%.1f", $1 - $2 }')
}

container_run() {
    nsenter --target "$container_leader" --mount --uts --ipc --net --pid --cgroup --root --wd \
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

container_stop() {
    [ -n "$container_pid" ] || return 0
    kill -TERM "$container_pid" 2>/dev/null || true
    for _ in $(seq 300); do
        kill -0 "$container_pid" 2>/dev/null || break
        sleep 0.1
    done
    # nspawn killed would leave its container running: SIGKILL to the container's PID 1 ends
    # every process of its pid namespace, then nspawn.
    if kill -0 "$container_pid" 2>/dev/null; then
        echo "systemd-container: not halted after 30 s; killed" >&2
        [ -n "$container_leader" ] && kill -KILL "$container_leader" 2>/dev/null
        kill -KILL "$container_pid" 2>/dev/null || true
    fi
    wait "$container_pid" 2>/dev/null || true
    container_pid=
    container_leader=
}
