//! Remedies shared by several rules, as exact commands with what they buy and what they cost.
//!
//! The commands name the CPUs and paths of this machine where the doctor knows them, and a
//! placeholder in angle brackets (`<server command>`) where only the user does. With a watched
//! application (`doctor --pid/--comm`) the doctor knows its processes: the commands carry
//! their pids and the cgroup they live in (issue 22: the remedies printed `<server pid>`
//! beside a load line that named postgres and pgbench with their pids).

use crate::doctor::findings::{Change, Remedy, Workload};
use crate::doctor::measurements::{AppWatch, Facts};

/// At most this many pids on one command line; the rest are named as left out.
const MAX_PIDS: usize = 12;

/// The watched application's pids (most wakeups first) and the cgroups they live in.
pub fn patient(app: Option<&AppWatch>) -> Option<(Vec<i32>, Vec<String>)> {
    let app = app?;
    let mut pids: Vec<i32> = Vec::new();
    let mut groups: Vec<String> = Vec::new();
    for p in &app.processes {
        for pid in &p.pids {
            if !pids.contains(pid) {
                pids.push(*pid);
            }
        }
        if let Some(g) = p.cgroup.as_ref().filter(|g| !groups.contains(g)) {
            groups.push(g.clone());
        }
    }
    (!pids.is_empty()).then_some((pids, groups))
}

/// The watched application as the data a placement change names: its pids, its systemd units
/// and its cgroups below the root; why no unit is named when none is.
pub fn workload(app: Option<&AppWatch>) -> Workload {
    let Some((pids, groups)) = patient(app) else {
        return Workload::unknown();
    };
    let mut units: Vec<String> = Vec::new();
    for u in app
        .into_iter()
        .flat_map(|a| &a.processes)
        .filter_map(|p| p.unit.as_ref())
    {
        if !units.contains(u) {
            units.push(u.clone());
        }
    }
    let unnamed = units.is_empty().then(|| {
        "the watched processes run in no systemd unit (their cgroups name none, or this result \
         was written before cpulab read it)"
            .to_string()
    });
    Workload {
        pids,
        units,
        cgroups: groups.into_iter().filter(|g| g != "/").collect(),
        unnamed,
    }
}

/// `pid:1.affinity=0 pid:2.affinity=0 ...`, and a note when pids were left out.
pub fn pid_args(pids: &[i32], cpu: &str) -> (String, String) {
    let args = pids
        .iter()
        .take(MAX_PIDS)
        .map(|p| format!("pid:{p}.affinity={cpu}"))
        .collect::<Vec<_>>()
        .join(" ");
    let more = if pids.len() > MAX_PIDS {
        format!(" ({} more pids not listed)", pids.len() - MAX_PIDS)
    } else {
        String::new()
    };
    (args, more)
}

/// The cgroup directory under /sys/fs/cgroup of a path as /proc/<pid>/cgroup names it.
fn cgroup_dir(path: &str, v1: bool) -> String {
    if v1 {
        format!("/sys/fs/cgroup/cpuset{path}")
    } else {
        format!("/sys/fs/cgroup{path}")
    }
}

/// For a guest whose costly wakeups cross a socket or NUMA node of its own topology: the host
/// keeps the whole guest on one physical node, its `vcpus` vCPUs on that node's cores and its
/// memory from that node (libvirt `<vcpupin>` and `<numatune>`), so a crossing in the guest's
/// layout no longer crosses a socket, and memory stays local.
pub fn one_host_node(vcpus: u32) -> Remedy {
    Remedy::new(
        "for a VM: on the host, keep the guest on one NUMA node: each vCPU pinned to a core of \
         that node and its memory from that node (libvirt <vcpupin> and <numatune>)",
        "A wakeup between vCPUs the guest sees on different sockets or nodes then stays within \
         one physical socket, and memory stays local, whatever layout the guest is shown.",
        "The guest must fit in one host node (its vCPUs in the node's cores, its memory in the \
         node's memory); fewer guests fit per node, and the memory placement takes effect when \
         the guest starts again.",
    )
    .on_host("the hypervisor host's administrator; not a cloud customer")
    .changing(Change::VcpuPin {
        vcpus,
        one_node: true,
    })
}

/// Put both ends of a request/response pair on one CPU; the watched application's own pids and
/// cgroups when the doctor watched one.
pub fn colocate(cpu: u32, facts: &Facts, app: Option<&AppWatch>) -> Vec<Remedy> {
    let caveat = "Both ends then share one CPU: right for a pair that takes turns (one client \
                  connection, pgbench -c 1, ab -c 1), wrong when either side needs a CPU of its \
                  own (many clients, CPU-heavy queries). Check with `cpulab pair`.";
    let v1 = facts.cgroup_version == Some(1);
    let known = patient(app);
    let (try_pids, running) = match &known {
        Some((pids, _)) => {
            let (args, more) = pid_args(pids, &cpu.to_string());
            (
                format!("cpulab try {args}"),
                format!(
                    "for the running application: {}{more}",
                    pids.iter()
                        .take(MAX_PIDS)
                        .map(|p| format!("taskset -a -pc {cpu} {p}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            )
        }
        None => (
            format!("cpulab try pid:<server pid>.affinity={cpu} pid:<client pid>.affinity={cpu}"),
            format!("for a running server: taskset -a -pc {cpu} <pid>"),
        ),
    };
    let groups: Vec<String> = known
        .as_ref()
        .map(|(_, g)| g.iter().filter(|g| g.as_str() != "/").cloned().collect())
        .unwrap_or_default();
    let (cpuset, cpuset_try) = if groups.is_empty() {
        (
            format!("echo {cpu} > {}/cpuset.cpus", cgroup_dir("/<group>", v1)),
            Some(format!("cpulab try cgroup:<group>:cpuset.cpus={cpu}")),
        )
    } else {
        let dirs: Vec<String> = groups.iter().map(|g| cgroup_dir(g, v1)).collect();
        let tries: Vec<String> = dirs
            .iter()
            .filter_map(|d| cgroup_try(d, v1, "cpuset.cpus", &cpu.to_string()))
            .collect();
        (
            dirs.iter()
                .map(|d| format!("echo {cpu} > {d}/cpuset.cpus"))
                .collect::<Vec<_>>()
                .join("; "),
            (!tries.is_empty()).then(|| tries.join("; ")),
        )
    };
    let mut by_cgroup = Remedy::new(
        cpuset,
        "Confines every task of the cgroup (container, pod, slice) to that CPU.",
        "Everything in the group competes for one CPU; with containers use the runtime's \
         own knob (docker --cpuset-cpus, Kubernetes static CPU manager).",
    )
    .by("root on this machine, or the container platform's operator");
    if let Some(t) = cpuset_try {
        by_cgroup = by_cgroup.with_try(t);
    }
    let pin = Change::Pin {
        cpus: cpu.to_string(),
        workload: workload(app),
    };
    let by_cgroup = by_cgroup.changing(pin.clone());
    vec![
        Remedy::new(
            format!("taskset -c {cpu} <server command>; taskset -c {cpu} <client command>"),
            format!(
                "Server and client start on one CPU, so each wakeup is a local context switch \
                 ({running})."
            ),
            caveat,
        )
        .with_try(try_pids.clone())
        .changing(pin.clone()),
        Remedy::new(
            format!("systemctl edit <unit>  ->  [Service] CPUAffinity={cpu}  (both units)"),
            "The same pinning, kept across restarts for services started by systemd; the \
             whole process tree inherits it, PostgreSQL backends included.",
            "As above: both ends share one CPU.",
        )
        .by("root on this machine")
        .with_try(try_pids)
        .changing(pin),
        by_cgroup,
    ]
}

/// Guest halt polling's parameter at `ns`, as data.
pub fn guest_halt_poll(ns: u64) -> Change {
    Change::ModuleParam {
        module: "haltpoll".into(),
        param: "guest_halt_poll_ns".into(),
        value: ns.to_string(),
    }
}

/// The KVM host's halt polling at `ns`, as data (a remedy for the host).
pub fn host_halt_poll(ns: u64) -> Change {
    Change::ModuleParam {
        module: "kvm".into(),
        param: "halt_poll_ns".into(),
        value: ns.to_string(),
    }
}

/// The haltpoll cpuidle driver loaded even where the host does not advertise it.
pub fn force_haltpoll() -> Change {
    Change::BootOptions {
        options: vec!["cpuidle_haltpoll.force=1".into()],
    }
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
            .with_try("cpulab try haltpoll.guest_halt_poll_ns=200000")
            .changing(guest_halt_poll(200_000)),
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
    .by("root in this guest")
    .changing(force_haltpoll())
    .changing(guest_halt_poll(200_000)));
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
            .on_host("the KVM host's administrator; not a cloud customer")
            .changing(host_halt_poll(200_000)),
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
    use super::{cgroup_try, colocate, halt_polling, patient, pid_args};
    use crate::doctor::measurements::{AppWatch, Facts, WatchedProcess};
    use crate::doctor::rules::fixtures::everything_wrong;

    /// Regression (issue 22): with a watched application the remedies printed `<server pid>`,
    /// `<client pid>` and `<group>` although the doctor knew them.
    #[test]
    fn a_watched_application_gets_its_own_pids_and_cgroup() {
        let (mut facts, m) = everything_wrong();
        facts.cgroup_version = Some(2);
        let app = m.app_watch.as_ref().unwrap();
        let pids = &app.processes[0].pids;
        let r = colocate(0, &facts, Some(app));
        let text: String = r
            .iter()
            .flat_map(|x| {
                [
                    x.command.clone(),
                    x.effect.clone(),
                    x.try_command.clone().unwrap_or_default(),
                ]
            })
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            !text.contains("<server pid>") && !text.contains("<group>"),
            "{text}"
        );
        assert!(
            text.contains(&format!("pid:{}.affinity=0", pids[0])),
            "{text}"
        );
        assert!(
            text.contains(&format!("taskset -a -pc 0 {}", pids[0])),
            "{text}"
        );
        assert!(
            text.contains("/sys/fs/cgroup/system.slice/postgresql@15-main.service/cpuset.cpus"),
            "{text}"
        );
        assert!(
            text.contains(
                "cpulab try cgroup:system.slice/postgresql@15-main.service:cpuset.cpus=0"
            )
        );
        // cgroup v1: the cpuset hierarchy's directory; the try line names the group alone.
        facts.cgroup_version = Some(1);
        let r = colocate(0, &facts, Some(app));
        assert_eq!(
            r[2].command,
            "echo 0 > /sys/fs/cgroup/cpuset/system.slice/postgresql@15-main.service/cpuset.cpus"
        );
        assert_eq!(
            r[2].try_command.as_deref(),
            Some("cpulab try cgroup:system.slice/postgresql@15-main.service:cpuset.cpus=0")
        );
        // Without a watch the placeholders stay: only the user knows.
        let r = colocate(0, &facts, None);
        assert!(r.iter().any(|x| {
            x.try_command
                .clone()
                .unwrap_or_default()
                .contains("<server pid>")
        }));
    }

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

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    fn process(pids: &[i32], cgroup: Option<&str>) -> WatchedProcess {
        WatchedProcess {
            name: "postgres".into(),
            pids: pids.to_vec(),
            cgroup: cgroup.map(String::from),
            unit: None,
            wakeups_per_s: 1000.0,
            cross_share: 0.5,
            cross_wakeups_per_s: 500.0,
        }
    }

    fn watch_of(processes: Vec<WatchedProcess>) -> AppWatch {
        AppWatch {
            target: "comm postgres".into(),
            interval_s: 5.0,
            setup_s: None,
            incomplete: None,
            processes,
        }
    }

    #[test]
    fn the_patient_is_each_pid_and_each_cgroup_once_in_the_watch_s_order() {
        let w = watch_of(vec![
            process(&[812, 813], Some("/a.service")),
            process(&[813, 900], Some("/a.service")),
            process(&[901], None),
            process(&[902], Some("/b.service")),
        ]);
        assert_eq!(
            patient(Some(&w)),
            Some((
                vec![812, 813, 900, 901, 902],
                vec!["/a.service".to_string(), "/b.service".to_string()]
            ))
        );
        // No pid watched: nobody to name, whatever the cgroup.
        assert_eq!(patient(Some(&watch_of(vec![]))), None);
        let no_pids = watch_of(vec![process(&[], Some("/a.service"))]);
        assert_eq!(patient(Some(&no_pids)), None);
        assert_eq!(patient(None), None);
    }

    #[test]
    fn pid_args_name_twelve_pids_and_count_the_rest() {
        assert_eq!(
            pid_args(&[812, 813], "0-1"),
            (
                "pid:812.affinity=0-1 pid:813.affinity=0-1".to_string(),
                String::new()
            )
        );
        let up_to = |n: i32| (1..=n).collect::<Vec<i32>>();
        // Exactly twelve: all listed, no note.
        let (args, more) = pid_args(&up_to(12), "0");
        assert_eq!(args.matches("pid:").count(), 12);
        assert!(args.ends_with(" pid:12.affinity=0"), "{args}");
        assert_eq!(more, "");
        // Thirteen and fourteen: the first twelve, and how many were left out.
        let (args, more) = pid_args(&up_to(13), "0");
        assert!(
            args.ends_with(" pid:12.affinity=0") && !args.contains("pid:13."),
            "{args}"
        );
        assert_eq!(more, " (1 more pids not listed)");
        assert_eq!(pid_args(&up_to(14), "0").1, " (2 more pids not listed)");
    }

    #[test]
    fn colocate_names_every_group_and_keeps_placeholders_for_what_only_the_user_knows() {
        let (mut facts, _) = everything_wrong();
        facts.cgroup_version = Some(2);
        let r = colocate(1, &facts, None);
        assert_eq!(r.len(), 3);
        assert_eq!(
            r[0].command,
            "taskset -c 1 <server command>; taskset -c 1 <client command>"
        );
        assert_eq!(
            r[0].try_command.as_deref(),
            Some("cpulab try pid:<server pid>.affinity=1 pid:<client pid>.affinity=1")
        );
        assert!(
            r[0].effect
                .ends_with("(for a running server: taskset -a -pc 1 <pid>)."),
            "{}",
            r[0].effect
        );
        assert_eq!(r[1].try_command, r[0].try_command);
        assert_eq!(r[2].command, "echo 1 > /sys/fs/cgroup/<group>/cpuset.cpus");
        assert_eq!(
            r[2].try_command.as_deref(),
            Some("cpulab try cgroup:<group>:cpuset.cpus=1")
        );
        facts.cgroup_version = Some(1);
        assert_eq!(
            colocate(1, &facts, None)[2].command,
            "echo 1 > /sys/fs/cgroup/cpuset/<group>/cpuset.cpus"
        );
        // A process in the root cgroup: no group to confine, so the placeholder stays.
        let root = watch_of(vec![process(&[812], Some("/"))]);
        let r = colocate(1, &facts, Some(&root));
        assert_eq!(
            r[2].command,
            "echo 1 > /sys/fs/cgroup/cpuset/<group>/cpuset.cpus"
        );
        assert_eq!(
            r[0].try_command.as_deref(),
            Some("cpulab try pid:812.affinity=1")
        );
        // Fourteen pids in two groups: twelve named, the rest counted, both groups confined.
        let w = watch_of(vec![
            process(&(1..=13).collect::<Vec<i32>>(), Some("/a.service")),
            process(&[14], Some("/b.service")),
        ]);
        facts.cgroup_version = Some(2);
        let r = colocate(0, &facts, Some(&w));
        assert!(
            r[0].effect
                .ends_with("; taskset -a -pc 0 12 (2 more pids not listed))."),
            "{}",
            r[0].effect
        );
        assert_eq!(
            r[2].command,
            "echo 0 > /sys/fs/cgroup/a.service/cpuset.cpus; \
             echo 0 > /sys/fs/cgroup/b.service/cpuset.cpus"
        );
        assert_eq!(
            r[2].try_command.as_deref(),
            Some(
                "cpulab try cgroup:a.service:cpuset.cpus=0; \
                 cpulab try cgroup:b.service:cpuset.cpus=0"
            )
        );
    }

    #[test]
    fn halt_polling_offers_the_sysfs_knob_only_with_the_haltpoll_driver() {
        // A KVM guest idling through haltpoll, without poll control.
        let (mut facts, _) = everything_wrong();
        assert!(!facts.kvm_poll_control);
        let commands =
            |f: &Facts| -> Vec<String> { halt_polling(f).into_iter().map(|r| r.command).collect() };
        let r = halt_polling(&facts);
        assert_eq!(r.len(), 4);
        assert_eq!(
            r[0].command,
            "echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns"
        );
        assert_eq!(
            r[0].try_command.as_deref(),
            Some("cpulab try haltpoll.guest_halt_poll_ns=200000")
        );
        assert!(!r[1].effect.contains("not haltpoll"), "{}", r[1].effect);
        assert!(r[2].command.starts_with("on the KVM host: "));
        assert!(
            !r[2].cost_caveat.contains("does nothing here"),
            "{}",
            r[2].cost_caveat
        );
        assert_eq!(r[3].command, "give a latency-bound VM fewer vCPUs (e.g. 1)");
        // With poll control the guest's driver turns the host's polling off for itself.
        facts.kvm_poll_control = true;
        assert!(
            halt_polling(&facts)[2]
                .cost_caveat
                .contains("does nothing here")
        );
        // Another cpuidle driver: no sysfs knob, the command line says why it forces the
        // driver, and poll control alone does not make the host's polling moot.
        facts.cpuidle_driver = Some("acpi_idle".into());
        let r = halt_polling(&facts);
        assert_eq!(r.len(), 3);
        assert!(
            r[0].effect.contains(
                "(the cpuidle driver here is not haltpoll, so the sysfs knob alone does nothing)"
            ),
            "{}",
            r[0].effect
        );
        assert!(
            !r[1].cost_caveat.contains("does nothing here"),
            "{}",
            r[1].cost_caveat
        );
        // The KVM host's knob only for KVM or an unknown hypervisor.
        facts.hypervisor = Some("Microsoft Hv".into());
        assert_eq!(
            commands(&facts),
            [
                "kernel command line: cpuidle_haltpoll.force=1 haltpoll.guest_halt_poll_ns=200000",
                "give a latency-bound VM fewer vCPUs (e.g. 1)"
            ]
        );
        facts.hypervisor = None;
        assert_eq!(commands(&facts).len(), 3);
    }

    #[test]
    fn cgroup_try_quotes_what_a_shell_would_split_and_refuses_the_root_and_placeholders() {
        assert_eq!(
            cgroup_try(
                "/sys/fs/cgroup/a.slice/db.service",
                false,
                "cpu.max",
                "50000 100000"
            )
            .as_deref(),
            Some("cpulab try 'cgroup:a.slice/db.service:cpu.max=50000 100000'")
        );
        assert_eq!(
            cgroup_try("/sys/fs/cgroup/it's", false, "cpu.max", "max").as_deref(),
            Some(r"cpulab try 'cgroup:it'\''s:cpu.max=max'")
        );
        assert_eq!(
            cgroup_try("/sys/fs/cgroup/a;b", false, "cpu.max", "max").as_deref(),
            Some("cpulab try 'cgroup:a;b:cpu.max=max'")
        );
        // The root cgroup has no limits, and a placeholder is not a group.
        assert_eq!(cgroup_try("/sys/fs/cgroup/", false, "cpu.max", "max"), None);
        assert_eq!(
            cgroup_try("/sys/fs/cgroup/<group>", false, "cpuset.cpus", "0"),
            None
        );
        assert_eq!(
            cgroup_try("/sys/fs/cgroup/cpuset/<group>", true, "cpuset.cpus", "0"),
            None
        );
        assert_eq!(
            cgroup_try("/sys/fs/cgroup/cpuset/", true, "cpuset.cpus", "0"),
            None
        );
    }
}
