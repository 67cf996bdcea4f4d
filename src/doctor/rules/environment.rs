//! Where the doctor runs, and what that changes about a cross-CPU wakeup's mechanism and cure.
//!
//! The same measured penalty (a blocking round trip several times dearer across CPUs, with a
//! halt and an IPI per round trip) has a different cause and different remedies per
//! environment, and many remedies can only be applied on the hypervisor host, by someone a
//! guest's user may not be. The environment is told from what the guest can see: the CPUID
//! hypervisor signature, DMI, `/sys/hypervisor`, the clocksource, guest driver modules, and the
//! cpuidle driver (probe facts). Each remedy says where it must be done and who can do it.
//!
//! Published figures quoted here come from `docs/field-notes.md` and are labelled as such, with
//! their section; the doctor's own figures are in the finding's evidence.

use super::remedies::{force_haltpoll, guest_halt_poll, host_halt_poll};
use crate::doctor::findings::{Change, Remedy};
use crate::doctor::measurements::{Environment, Facts};

const IDLE_POLL_COST: &str = "Every idle vCPU spins at 100% instead of halting: the host sees it \
    always busy, other guests lose that time, and a cloud bills it; more power and heat. Only for \
    a VM whose vCPUs are dedicated to it. Needs a reboot.";

fn idle_poll() -> Remedy {
    Remedy::new(
        "kernel command line: idle=poll   (GRUB_CMDLINE_LINUX, update-grub, reboot)",
        "An idle vCPU polls instead of halting, so a wakeup needs no halt exit and no \
         rescheduling by the hypervisor.",
        IDLE_POLL_COST,
    )
    .by("root in this guest")
    .changing(Change::BootOptions {
        options: vec!["idle=poll".into()],
    })
}

fn fewer_vcpus(who: &str) -> Remedy {
    Remedy::new(
        "give a latency-bound VM fewer vCPUs (e.g. 1)",
        "With one vCPU client and server always share it, so wakeups never cross vCPUs \
         (published, docs/field-notes.md section A: 17,842 tps with 1 vCPU against 7,485 with 2, \
         pgbench -S on Hyper-V).",
        "Less parallel capacity; only for VMs whose work is one request/response chain.",
    )
    .by(who)
}

/// Why a guest counts no halts: the words for a missing `idle_entries` counter.
pub fn halts_unseen_reason(f: &Facts) -> &'static str {
    match f.cpuidle_driver.as_deref() {
        None | Some("none") => {
            "no cpuidle driver: an idle CPU halts in the kernel's default idle loop, which \
             counts nothing"
        }
        Some(_) => "the cpuidle counters could not be read during the run",
    }
}

/// What each round trip pays, in words: the halts and IPIs counted, or why halts were not.
fn paid_words(f: &Facts, halts: Option<f64>, ipi: Option<f64>) -> String {
    match (halts, ipi) {
        (Some(h), Some(n)) => format!(
            "Each round trip here pays {h:.1} halts and {n:.1} IPIs, exits that a same-vCPU wakeup never makes"
        ),
        (Some(h), None) => format!(
            "Each round trip here pays {h:.1} halts, exits that a same-vCPU wakeup never makes"
        ),
        (None, ipi) => format!(
            "Each round trip here sends {}, exits that a same-vCPU wakeup never makes; halts are \
             not visible here ({}), so they are inferred from the idle vCPU, not counted",
            ipi.map(|n| format!("{n:.1} IPIs"))
                .unwrap_or_else(|| "IPIs that were not counted".into()),
            halts_unseen_reason(f)
        ),
    }
}

/// Mechanism words and environment remedies for a cross-vCPU wakeup that halts (VMs).
// Long as a table is: one arm per environment, each its own words and remedies (docs/doctor.md).
///
/// `halts` is `None` where the guest counts no halts (no cpuidle driver): the exits are then
/// named from the IPIs and the idle facts, and the words say the halts are not visible.
pub fn halt_in_vm(f: &Facts, halts: Option<f64>, ipi: Option<f64>) -> (String, Vec<Remedy>) {
    let paid = paid_words(f, halts, ipi);
    match f.environment {
        Environment::HyperV => hyperv(&paid),
        Environment::Xen => xen(&paid),
        Environment::Vmware => vmware(&paid),
        Environment::KvmNoHaltpoll => kvm_no_haltpoll(&paid),
        // KVM with haltpoll, another hypervisor, or an older result: the KVM wording.
        _ => (
            format!(
                "The waiting vCPU has nothing else to run, so it halts; waking it takes an \
                 inter-processor interrupt that the hypervisor delivers, and the halted vCPU must \
                 be scheduled again on the host before it runs. {paid}{}.",
                match f.guest_halt_poll_ns {
                    Some(0) => "; guest halt polling is off, so every idle period halts at once",
                    _ => "",
                }
            ),
            super::remedies::halt_polling(f),
        ),
    }
}

/// The mechanism and remedies of a halt in a Hyper-V guest; `paid` says what a wakeup paid.
fn hyperv(paid: &str) -> (String, Vec<Remedy>) {
    (
        format!(
            "The waiting vCPU has nothing else to run, so it halts. Hyper-V guests have no \
         halt-polling cpuidle driver, so every idle period halts at once; waking it takes a \
         synthetic inter-processor interrupt through the hypervisor, and the halted virtual \
         processor must be scheduled again on a logical processor by the host. How much \
         that costs depends on the host's scheduler type: under the root scheduler \
         (client Hyper-V, field notes A) a cross-VP wakeup is far dearer than under the \
         classic one (published, docs/field-notes.md section B: pgbench SELECT 1 29,655 vs \
         5,663 tps same vs different vCPU under root, 30,747 vs 19,519 under classic). \
         {paid}."
        ),
        vec![
            Remedy::new(
                "bcdedit /set hypervisorschedulertype classic   (then reboot the host)",
                "Switches the host from the root (or core) scheduler to the classic one, \
             which the field notes measured at 19,519 instead of 5,663 tps for a \
             cross-vCPU pgbench (published, docs/field-notes.md section B).",
                "Applies to every VM on the host; the classic scheduler does not keep SMT \
             siblings to one VM as the core scheduler does (a side-channel boundary); \
             needs a host reboot. Impossible on Azure: the provider runs the host.",
            )
            .on_host("the Hyper-V host's administrator; not an Azure customer"),
            idle_poll(),
            fewer_vcpus("whoever sizes the VM (on Azure: choose a smaller VM size)"),
        ],
    )
}

/// The mechanism and remedies of a halt in a Xen guest; `paid` says what a wakeup paid.
fn xen(paid: &str) -> (String, Vec<Remedy>) {
    (
        format!(
            "The waiting vCPU blocks and Xen deschedules it; the wakeup is an event-channel \
         notification through the hypervisor, and Xen's scheduler (credit or credit2) \
         must pick the vCPU again on a physical CPU, which may be busy or share a module \
         or SMT core with another busy vCPU (field notes E: slowdown tracked the modules \
         with both cores busy). {paid}."
        ),
        vec![
            Remedy::new(
                "xl vcpu-pin <domain> <vcpu> <pcpu>   (one vCPU per physical core or module)",
                "Keeps each vCPU on its own physical CPU, so it is not queued behind another \
             and does not share a module (published, docs/field-notes.md section E: one \
             core per module scaled near ideally to 16 threads).",
                "Fewer physical CPUs left for other domains; must be redone when the domain \
             is recreated unless put in its config (cpus=).",
            )
            .on_host("the Xen host's administrator (dom0); not a cloud customer"),
            Remedy::new(
                "xl cpupool-create <pool.cfg>; xl cpupool-migrate <domain> <pool>",
                "Gives the domain physical CPUs no other domain runs on, with its own \
             scheduler instance.",
                "Dedicated capacity: the pool's CPUs sit idle when the domain does.",
            )
            .on_host("the Xen host's administrator (dom0)"),
            idle_poll(),
        ],
    )
}

/// The mechanism and remedies of a halt in a VMware guest; `paid` says what a wakeup paid.
fn vmware(paid: &str) -> (String, Vec<Remedy>) {
    (
    format!(
        "The waiting vCPU halts and ESXi deschedules it; the wakeup is an \
         inter-processor interrupt that the hypervisor delivers, and the halted vCPU must \
         be scheduled again on a physical CPU before it runs. {paid}."
    ),
    vec![
        Remedy::new(
            "VM setting Latency Sensitivity = High   (vSphere: Edit Settings > VM Options > Advanced)",
            "ESXi gives each vCPU exclusive use of a physical core and avoids \
             descheduling it when idle, so a wakeup does not wait for the vCPU to be \
             scheduled again.",
            "Needs a full CPU and memory reservation: the cores are the VM's even when \
             idle. Applies after a power cycle of the VM.",
        )
        .on_host("the vSphere administrator"),
        idle_poll(),
        fewer_vcpus("whoever sizes the VM"),
    ],
    )
}

/// The mechanism and remedies of a halt in a KVM guest without the haltpoll cpuidle driver;
/// `paid` says what a wakeup paid.
fn kvm_no_haltpoll(paid: &str) -> (String, Vec<Remedy>) {
    (
        format!(
            "The waiting vCPU halts at once: this guest does not idle through the haltpoll \
         cpuidle driver, so there is no guest-side polling window. Waking it takes an \
         inter-processor interrupt that KVM delivers, and the halted vCPU must be \
         scheduled again on the host. Whether the host polls before descheduling a \
         halted vCPU (kvm halt_poll_ns) is the provider's setting, invisible from here. \
         {paid}."
        ),
        {
            let mut r = vec![Remedy::new(
            "kernel command line: cpuidle_haltpoll.force=1 haltpoll.guest_halt_poll_ns=200000",
            "Loads the haltpoll cpuidle driver even though the host does not advertise \
             it, so an idle vCPU polls up to 200 us before halting (GRUB_CMDLINE_LINUX, \
             update-grub, reboot). Needs a kernel built with cpuidle-haltpoll.",
            "An idle vCPU spins up to 200 us before halting: billed and seen as busy by \
             the host. Needs a reboot.",
        )
        .by("root in this guest")
        .changing(force_haltpoll())
        .changing(guest_halt_poll(200_000))];
            r.push(idle_poll());
            r.push(
                Remedy::new(
                    "on the KVM host: echo 200000 > /sys/module/kvm/parameters/halt_poll_ns",
                    "The host polls briefly for a halted vCPU's next wakeup instead of \
                 descheduling it.",
                    "Costs host CPU for every guest; a cloud customer cannot set it (ask \
                 for a dedicated-host or latency-optimised instance type instead).",
                )
                .on_host("the KVM host's administrator; not a cloud customer")
                .changing(host_halt_poll(200_000)),
            );
            r.push(fewer_vcpus("whoever sizes the VM"));
            r
        },
    )
}

/// Mechanism words and remedies for a cross-CPU wakeup on bare metal that enters idle states.
pub fn idle_exit_bare_metal(f: &Facts, halts: f64, ipi_text: &str) -> (String, Vec<Remedy>) {
    let driver = f.cpuidle_driver.as_deref().unwrap_or("the cpuidle driver");
    let deepest = f
        .deepest_idle_state
        .as_ref()
        .map(|(n, l)| format!(", as deep as {n} with an exit latency of {l} us"))
        .unwrap_or_default();
    let powersave = f
        .cpufreq_governor
        .as_deref()
        .filter(|g| *g != "performance");
    let mechanism = format!(
        "The waiting CPU goes idle and {driver} puts it in a sleep state{deepest}; the wakeup is \
         an inter-processor interrupt and the CPU must leave that state before the woken task \
         runs{}. Each round trip pays {halts:.1} idle entries{ipi_text}.",
        powersave
            .map(|g| format!(", and under the {g} governor it then starts at a low frequency"))
            .unwrap_or_default()
    );
    let root = "root on this machine";
    let mut r = vec![
        Remedy::new(
            "cpupower idle-set -D 10",
            "Now, until reboot: disables idle states with an exit latency above 10 us, so a \
             woken CPU answers sooner.",
            "More power and heat while idle; reverse with cpupower idle-set -E.",
        )
        .by(root)
        .with_try("cpulab try cpuidle.max_latency_us=10")
        .changing(Change::IdleLatency { max_us: 10 }),
        Remedy::new(
            "tuned-adm profile latency-performance",
            format!(
                "Holds /dev/cpu_dma_latency low (deep C-states off while it runs), sets the \
                 performance governor, and keeps them across reboots{}.",
                f.tuned_profile
                    .as_deref()
                    .map(|t| format!(" (active profile now: {t})"))
                    .unwrap_or_default()
            ),
            "More power and heat; tuned changes scheduler settings too.",
        )
        .by(root)
        .with_try("cpulab try tuned:latency-performance --each"),
        Remedy::new(
            "a process that holds /dev/cpu_dma_latency open with 0 written to it",
            "The PM QoS request lasts exactly as long as the file stays open: deep C-states off \
             only while the latency-critical service runs.",
            "The same power cost while held.",
        )
        .by(root),
    ];
    let cmdline = match driver {
        "intel_idle" => Some("intel_idle.max_cstate=1"),
        "acpi_idle" => Some("processor.max_cstate=1"),
        _ => None,
    };
    if let Some(c) = cmdline {
        r.push(
            Remedy::new(
                format!("kernel command line: {c}"),
                "Limits idle states permanently (GRUB_CMDLINE_LINUX, update-grub, reboot).",
                "Power and heat all the time, for every workload; needs a reboot.",
            )
            .by(root)
            .changing(Change::BootOptions {
                options: vec![c.to_string()],
            }),
        );
    }
    if let Some(g) = powersave {
        r.push(
            Remedy::new(
                "cpupower frequency-set -g performance",
                format!(
                    "Replaces the {g} governor, so a woken CPU does not also ramp up (published, \
                     docs/field-notes.md section D: a batch job 168 s to 159 s)."
                ),
                "More power and heat.",
            )
            .by(root)
            .with_try("cpulab try cpufreq.governor=performance")
            .changing(Change::Governor {
                governor: "performance".into(),
            }),
        );
    }
    (mechanism, r)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::everything_wrong;
    use super::super::rule::{Inputs, Rule};
    use super::super::wakeup::CrossCpuWakeup;
    use super::*;
    use crate::doctor::findings::{Finding, Site};
    use crate::machine::Machine;
    use crate::topology::PlacementClass;

    /// The probe facts of a fixture machine, as the doctor would see them there.
    fn facts_of(fixture: &str) -> Facts {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(fixture);
        let machine = Machine::detect(&root).unwrap();
        crate::doctor::adapt::facts(&crate::probe::probe(&machine))
    }

    /// The same measured penalty (42 us against 5 us, two halts and two IPIs per round trip)
    /// judged on a fixture machine.
    fn judged(fixture: &str) -> (Facts, Finding) {
        let facts = facts_of(fixture);
        let (_, mut m) = everything_wrong();
        // Bare metal has no vCPUs: the same figures on the fixture's CPUs 0 and 1.
        for w in &mut m.wakeup {
            if w.class == PlacementClass::SharedLlc {
                w.cpus = Some("0:1".into());
            }
        }
        let f = CrossCpuWakeup
            .check(Inputs {
                facts: &facts,
                m: &m,
            })
            .pop()
            .unwrap();
        (facts, f)
    }

    fn host_remedies(f: &Finding) -> Vec<&Remedy> {
        f.remedies.iter().filter(|r| r.site == Site::Host).collect()
    }

    #[test]
    fn each_fixture_is_told_from_what_the_guest_sees() {
        assert_eq!(facts_of("azure-hyperv").environment, Environment::HyperV);
        assert_eq!(facts_of("xen-hvm").environment, Environment::Xen);
        assert_eq!(facts_of("vmware-guest").environment, Environment::Vmware);
        assert_eq!(
            facts_of("intel-baremetal").environment,
            Environment::BareMetal
        );
        assert_eq!(facts_of("kvm-guest").environment, Environment::KvmHaltpoll);
        let hv = facts_of("azure-hyperv");
        assert!(
            hv.environment_evidence
                .iter()
                .any(|e| e.contains("hv_vmbus"))
        );
        assert!(
            hv.environment_evidence
                .iter()
                .any(|e| e.contains("clocksource"))
        );
        let bm = facts_of("intel-baremetal");
        assert_eq!(bm.deepest_idle_state, Some(("C6".to_string(), 133)));
        assert_eq!(bm.cpufreq_governor.as_deref(), Some("powersave"));
    }

    #[test]
    fn hyperv_names_the_host_scheduler_and_says_the_switch_is_the_hosts() {
        let (_, f) = judged("azure-hyperv");
        assert!(f.mechanism.contains("scheduler type"), "{}", f.mechanism);
        assert!(!f.mechanism.contains("guest_halt_poll_ns"));
        let host = host_remedies(&f);
        assert_eq!(host.len(), 1);
        assert!(
            host[0]
                .command
                .starts_with("bcdedit /set hypervisorschedulertype")
        );
        assert!(
            host[0].who.contains("not an Azure customer"),
            "{}",
            host[0].who
        );
        // Published figures are labelled with their source, never as measured.
        assert!(
            host[0]
                .effect
                .contains("published, docs/field-notes.md section B")
        );
        assert!(f.remedies.iter().any(|r| r.command.contains("idle=poll")));
        assert!(f.remedies.iter().all(|r| !r.command.contains("haltpoll")));
    }

    #[test]
    fn xen_vmware_cloud_kvm_and_bare_metal_each_get_their_own_words_and_remedies() {
        let (_, xen) = judged("xen-hvm");
        assert!(xen.mechanism.contains("credit"), "{}", xen.mechanism);
        assert!(
            host_remedies(&xen)
                .iter()
                .any(|r| r.command.starts_with("xl vcpu-pin"))
        );
        assert!(host_remedies(&xen).iter().all(|r| r.who.contains("dom0")));

        let (_, vmw) = judged("vmware-guest");
        assert!(vmw.mechanism.contains("ESXi"), "{}", vmw.mechanism);
        let h = host_remedies(&vmw);
        assert!(h[0].command.contains("Latency Sensitivity"));
        assert!(h[0].who.contains("vSphere"));

        // A KVM guest without haltpoll: no sysfs knob, a forced driver, the host's polling
        // marked as the provider's.
        let (mut kvm, _) = judged("kvm-guest");
        kvm.cpuidle_driver = None;
        kvm.guest_halt_poll_ns = None;
        kvm.environment = Environment::detect(&kvm);
        assert_eq!(kvm.environment, Environment::KvmNoHaltpoll);
        let (_, m) = everything_wrong();
        let f = CrossCpuWakeup
            .check(Inputs { facts: &kvm, m: &m })
            .pop()
            .unwrap();
        assert!(f.mechanism.contains("provider"), "{}", f.mechanism);
        assert!(
            f.remedies
                .iter()
                .all(|r| !r.command.starts_with("echo 200000 > /sys/module/haltpoll"))
        );
        assert!(
            f.remedies
                .iter()
                .any(|r| r.command.contains("cpuidle_haltpoll.force=1"))
        );
        assert!(host_remedies(&f)[0].who.contains("not a cloud customer"));

        let (_, bm) = judged("intel-baremetal");
        assert!(
            bm.title.contains("CPUs") && !bm.title.contains("vCPU"),
            "{}",
            bm.title
        );
        assert!(
            bm.mechanism.contains("C6") && bm.mechanism.contains("133 us"),
            "{}",
            bm.mechanism
        );
        assert!(bm.mechanism.contains("powersave"));
        assert!(host_remedies(&bm).is_empty(), "bare metal has no host");
        let cmds: Vec<&str> = bm.remedies.iter().map(|r| r.command.as_str()).collect();
        assert!(
            cmds.iter().any(|c| c.contains("intel_idle.max_cstate=1")),
            "{cmds:?}"
        );
        assert!(cmds.iter().any(|c| c.contains("/dev/cpu_dma_latency")));
        assert!(
            cmds.iter()
                .any(|c| c.contains("frequency-set -g performance"))
        );

        // The same measured penalty, five different mechanisms.
        let (_, hv) = judged("azure-hyperv");
        let texts = [
            &hv.mechanism,
            &xen.mechanism,
            &vmw.mechanism,
            &f.mechanism,
            &bm.mechanism,
        ];
        for (a, x) in texts.iter().enumerate() {
            for y in &texts[a + 1..] {
                assert_ne!(x, y);
            }
        }
        assert_eq!(hv.magnitude.ratio, bm.magnitude.ratio);
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// A machine in `environment` with nothing else known.
    fn facts_in(environment: Environment) -> Facts {
        Facts {
            environment,
            ..Default::default()
        }
    }

    fn commands(r: &[Remedy]) -> Vec<&str> {
        r.iter().map(|x| x.command.as_str()).collect()
    }

    #[test]
    fn each_environment_gets_its_remedies_in_order_with_the_fewer_vcpus_one_where_it_helps() {
        let fewer = "give a latency-bound VM fewer vCPUs (e.g. 1)";
        let idle = "kernel command line: idle=poll   (GRUB_CMDLINE_LINUX, update-grub, reboot)";
        let (_, hv) = halt_in_vm(&facts_in(Environment::HyperV), Some(2.0), None);
        assert_eq!(
            commands(&hv),
            [
                "bcdedit /set hypervisorschedulertype classic   (then reboot the host)",
                idle,
                fewer
            ]
        );
        assert_eq!(hv[1].who, "root in this guest");
        assert_eq!(
            hv[2].who,
            "whoever sizes the VM (on Azure: choose a smaller VM size)"
        );
        assert!(
            hv[2].effect.contains("17,842 tps with 1 vCPU"),
            "{}",
            hv[2].effect
        );
        let (_, xen) = halt_in_vm(&facts_in(Environment::Xen), Some(2.0), None);
        assert_eq!(xen.len(), 3);
        assert_eq!(xen[2].command, idle);
        let (_, vmw) = halt_in_vm(&facts_in(Environment::Vmware), Some(2.0), None);
        assert_eq!(commands(&vmw)[1..], [idle, fewer]);
        assert_eq!(vmw[2].who, "whoever sizes the VM");
        let (_, kvm) = halt_in_vm(&facts_in(Environment::KvmNoHaltpoll), Some(2.0), None);
        assert_eq!(
            commands(&kvm),
            [
                "kernel command line: cpuidle_haltpoll.force=1 haltpoll.guest_halt_poll_ns=200000",
                idle,
                "on the KVM host: echo 200000 > /sys/module/kvm/parameters/halt_poll_ns",
                fewer
            ]
        );
    }

    #[test]
    fn a_kvm_guest_with_haltpoll_says_whether_guest_polling_is_off() {
        let mut f = facts_in(Environment::KvmHaltpoll);
        f.hypervisor = Some("KVM".into());
        f.cpuidle_driver = Some("haltpoll".into());
        f.guest_halt_poll_ns = Some(0);
        let (words, r) = halt_in_vm(&f, Some(2.0), Some(2.0));
        assert!(
            words.ends_with(
                "Each round trip here pays 2.0 halts and 2.0 IPIs, exits that a same-vCPU \
                 wakeup never makes; guest halt polling is off, so every idle period halts at \
                 once."
            ),
            "{words}"
        );
        assert_eq!(r, super::super::remedies::halt_polling(&f));
        f.guest_halt_poll_ns = Some(200_000);
        let (words, _) = halt_in_vm(&f, Some(2.0), Some(2.0));
        assert!(
            words.ends_with("exits that a same-vCPU wakeup never makes."),
            "{words}"
        );
    }

    #[test]
    fn bare_metal_words_and_remedies_follow_the_driver_the_state_and_the_governor() {
        let mut f = facts_in(Environment::BareMetal);
        f.cpuidle_driver = Some("intel_idle".into());
        f.deepest_idle_state = Some(("C6".into(), 133));
        f.cpufreq_governor = Some("powersave".into());
        f.tuned_profile = Some("balanced".into());
        let (words, r) = idle_exit_bare_metal(&f, 2.0, " and 2.0 IPIs");
        assert_eq!(
            words,
            "The waiting CPU goes idle and intel_idle puts it in a sleep state, as deep as C6 \
             with an exit latency of 133 us; the wakeup is an inter-processor interrupt and the \
             CPU must leave that state before the woken task runs, and under the powersave \
             governor it then starts at a low frequency. Each round trip pays 2.0 idle entries \
             and 2.0 IPIs."
        );
        assert_eq!(
            commands(&r),
            [
                "cpupower idle-set -D 10",
                "tuned-adm profile latency-performance",
                "a process that holds /dev/cpu_dma_latency open with 0 written to it",
                "kernel command line: intel_idle.max_cstate=1",
                "cpupower frequency-set -g performance"
            ]
        );
        assert!(
            r[1].effect.contains("(active profile now: balanced)"),
            "{}",
            r[1].effect
        );
        assert!(r[4].effect.starts_with("Replaces the powersave governor"));
        // acpi_idle has its own command-line limit; the performance governor needs no remedy
        // and no words about frequency.
        f.cpuidle_driver = Some("acpi_idle".into());
        f.cpufreq_governor = Some("performance".into());
        let (words, r) = idle_exit_bare_metal(&f, 2.0, "");
        assert!(!words.contains("governor"), "{words}");
        assert_eq!(
            commands(&r)[3..],
            ["kernel command line: processor.max_cstate=1"]
        );
        // Another driver, nothing known: no command-line limit to name.
        let (words, r) = idle_exit_bare_metal(&facts_in(Environment::BareMetal), 1.0, "");
        assert!(
            words.starts_with(
                "The waiting CPU goes idle and the cpuidle driver puts it in a sleep state; "
            ),
            "{words}"
        );
        assert_eq!(r.len(), 3);
    }
}
