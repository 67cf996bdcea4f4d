//! Remedies shared by several rules, as exact commands with what they buy and what they cost.
//!
//! The commands name the CPUs and paths of this machine where the doctor knows them, and a
//! placeholder in angle brackets (`<server command>`) where only the user does.

use crate::doctor::findings::Remedy;
use crate::doctor::measurements::Facts;

/// Put both ends of a request/response pair on one CPU.
pub fn colocate(cpu: u32, facts: &Facts) -> Vec<Remedy> {
    let caveat = "Both ends then share one CPU: right for a pair that takes turns (one client \
                  connection, pgbench -c 1, ab -c 1), wrong when either side needs a CPU of its \
                  own (many clients, CPU-heavy queries). Check with `cpulab pair`.";
    let cpuset = match facts.cgroup_version {
        Some(1) => format!("echo {cpu} > /sys/fs/cgroup/cpuset/<group>/cpuset.cpus"),
        _ => format!("echo {cpu} > /sys/fs/cgroup/<group>/cpuset.cpus"),
    };
    vec![
        Remedy::new(
            format!("taskset -c {cpu} <server command>; taskset -c {cpu} <client command>"),
            format!(
                "Server and client start on one CPU, so each wakeup is a local context switch \
                 (for a running server: taskset -a -pc {cpu} <pid>)."
            ),
            caveat,
        )
        .with_try(format!(
            "cpulab try pid:<server pid>.affinity={cpu} pid:<client pid>.affinity={cpu}"
        )),
        Remedy::new(
            format!("systemctl edit <unit>  ->  [Service] CPUAffinity={cpu}  (both units)"),
            "The same pinning, kept across restarts for services started by systemd; the \
             whole process tree inherits it, PostgreSQL backends included.",
            "As above: both ends share one CPU.",
        )
        .by("root on this machine")
        .with_try(format!(
            "cpulab try pid:<server pid>.affinity={cpu} pid:<client pid>.affinity={cpu}"
        )),
        Remedy::new(
            cpuset,
            "Confines every task of the cgroup (container, pod, slice) to that CPU.",
            "Everything in the group competes for one CPU; with containers use the runtime's \
             own knob (docker --cpuset-cpus, Kubernetes static CPU manager).",
        )
        .by("root on this machine, or the container platform's operator")
        .with_try(format!("cpulab try cgroup:<group>:cpuset.cpus={cpu}")),
    ]
}

/// Make an idle vCPU poll before it halts, so a wakeup does not need a halt exit and an IPI.
pub fn halt_polling(facts: &Facts) -> Vec<Remedy> {
    let driver_ok = facts.cpuidle_driver.as_deref() == Some("haltpoll");
    let polling_cost = "An idle vCPU spins for up to 200 us before it halts: the host sees it \
                        busy and it is billed as CPU time; on an overcommitted host that time \
                        is taken from other guests.";
    let mut r = Vec::new();
    if driver_ok {
        r.push(
            Remedy::new(
                "echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns",
                "Now, as root, until reboot: an idle vCPU polls up to 200 us before halting, so \
             a wakeup within that window costs neither a halt exit nor an IPI through the \
             hypervisor. Measure again with `cpulab doctor` to see what it buys here.",
                polling_cost,
            )
            .by("root in this guest")
            .with_try("cpulab try haltpoll.guest_halt_poll_ns=200000"),
        );
    }
    r.push(Remedy::new(
        "kernel command line: cpuidle_haltpoll.force=1 haltpoll.guest_halt_poll_ns=200000",
        format!(
            "Permanent guest halt polling (GRUB_CMDLINE_LINUX in /etc/default/grub, then \
             update-grub and reboot); `force` loads the haltpoll driver even when the host does \
             not advertise it{}.",
            if driver_ok {
                ""
            } else {
                " (the cpuidle driver here is not haltpoll, so the sysfs knob alone does nothing)"
            }
        ),
        format!("{polling_cost} Needs a reboot."),
    )
    .by("root in this guest"));
    if facts
        .hypervisor
        .as_deref()
        .is_none_or(|h| h.contains("KVM"))
    {
        let poll_control = if facts.kvm_poll_control && driver_ok {
            " As things stand it does nothing here: this guest's haltpoll driver uses KVM poll \
             control to tell the host not to poll for it, so it helps only a guest that does \
             not use haltpoll."
        } else {
            ""
        };
        r.push(
            Remedy::new(
                "on the KVM host: echo 200000 > /sys/module/kvm/parameters/halt_poll_ns",
                "The host polls briefly for a halted vCPU's next wakeup instead of descheduling \
             it, which shortens the wakeup for every guest on that host.",
                format!(
                    "For host administrators only; costs host CPU for every guest, and the guest \
                 cannot set it.{poll_control}"
                ),
            )
            .on_host("the KVM host's administrator; not a cloud customer"),
        );
    }
    r.push(
        Remedy::new(
            "give a latency-bound VM fewer vCPUs (e.g. 1)",
            "With one vCPU client and server always share it, so wakeups never cross vCPUs \
         (published, docs/field-notes.md section A: 17,842 tps with 1 vCPU against 7,485 with \
         2, pgbench -S on Hyper-V).",
            "Less parallel capacity; only for VMs whose work is one request/response chain.",
        )
        .by("whoever sizes the VM"),
    );
    r
}

/// The `cpulab try` line that sets `file` of the cgroup at `dir` (a path under /sys/fs/cgroup)
/// to `value`; `None` when `dir` is not a cgroup below the root (a root cgroup has no limits).
/// `v1` drops the controller directory, which `cgroup:PATH:FILE` adds back itself.
pub fn cgroup_try(dir: &str, v1: bool, file: &str, value: &str) -> Option<String> {
    let rel = dir.split_once("sys/fs/cgroup/")?.1.trim_matches('/');
    let rel = if v1 { rel.split_once('/')?.1 } else { rel };
    if rel.is_empty() || rel.contains('<') {
        return None;
    }
    let arg = format!("cgroup:{rel}:{file}={value}");
    // Quoted only when a shell would split it (`cpu.max=50000 100000`).
    if arg.contains(|c: char| c.is_whitespace() || "'\"$`\\;&|<>*?".contains(c)) {
        Some(format!("cpulab try '{}'", arg.replace('\'', r"'\''")))
    } else {
        Some(format!("cpulab try {arg}"))
    }
}

#[cfg(test)]
mod tests {
    use super::cgroup_try;

    #[test]
    fn cgroup_try_lines_name_the_group_below_the_root() {
        assert_eq!(
            cgroup_try(
                "/sys/fs/cgroup/system.slice/db.service",
                false,
                "cpu.max",
                "max"
            )
            .as_deref(),
            Some("cpulab try cgroup:system.slice/db.service:cpu.max=max")
        );
        assert_eq!(
            cgroup_try(
                "/sys/fs/cgroup/cpu,cpuacct/docker/abc",
                true,
                "cpu.cfs_quota_us",
                "-1"
            )
            .as_deref(),
            Some("cpulab try cgroup:docker/abc:cpu.cfs_quota_us=-1")
        );
        assert_eq!(cgroup_try("/sys/fs/cgroup", false, "cpu.max", "max"), None);
        assert_eq!(cgroup_try("<group>", false, "cpu.max", "max"), None);
    }
}
