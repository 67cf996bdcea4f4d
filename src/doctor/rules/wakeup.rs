//! Cross-CPU wakeup penalty, with its mechanism told apart.
//!
//! A blocking round trip between two CPUs costs more than one on a single CPU for one of three
//! reasons, and each has a different remedy:
//! - **halt and IPI exits** (VMs): the woken vCPU had halted, so the wakeup is an
//!   inter-processor interrupt that goes through the hypervisor, and the halted vCPU has to be
//!   scheduled again on the host. Seen as about one idle entry and one RES/CAL interrupt per CPU
//!   per round trip, while a spinning round trip across the same pair stays cheap.
//!   (On bare metal the same counters mean a deep C-state exit.)
//! - **cache distance**: the data moves further; seen as spinning round trips that grow with
//!   the placement class (SMT sibling < shared L2 < shared LLC < other node).
//! - **SMT sharing**: two hardware threads of one core compete for its execution units.
//!
//! The effect is the worst pinned class against same-CPU, on the blocking method (pipe first).

use super::rule::{Effect, Inputs, Rule, cost_effect, home_cpu, ns_ci};
use super::{environment, remedies};
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Remedy, Severity};
use crate::doctor::measurements::WakeupRun;
use crate::output::fmt_ns;
use crate::topology::PlacementClass;

/// Smallest slowdown worth a finding.
pub const MIN_RATIO: f64 = 1.25;
/// Halts (or IPIs) per round trip from which a wakeup is taken to pay for them.
pub const PER_RT_THRESHOLD: f64 = 0.5;

pub struct CrossCpuWakeup;

/// The blocking method the rules judge placement by: pipe when measured, else the first one.
pub fn primary_method(i: &Inputs<'_>) -> Option<String> {
    let blocking = |m: &str| {
        i.m.wakeup
            .iter()
            .any(|w| w.blocking && w.method == m && w.class == PlacementClass::SameCpu)
    };
    if blocking("pipe") {
        return Some("pipe".into());
    }
    i.m.wakeup
        .iter()
        .find(|w| w.blocking && blocking(&w.method))
        .map(|w| w.method.clone())
}

/// The same-CPU run and the pinned run with the largest penalty beyond noise.
pub fn worst_penalty<'a>(i: &Inputs<'a>) -> Option<(&'a WakeupRun, &'a WakeupRun, Effect)> {
    let method = primary_method(i)?;
    let base = i.m.wakeup(&method, PlacementClass::SameCpu)?;
    i.m.wakeup
        .iter()
        .filter(|w| w.method == method && w.blocking)
        .filter(|w| !matches!(w.class, PlacementClass::SameCpu | PlacementClass::Unpinned))
        .filter_map(|w| {
            Some((
                base,
                w,
                cost_effect(&w.batch_means_ns, &base.batch_means_ns, MIN_RATIO)?,
            ))
        })
        .max_by(|a, b| a.2.ratio.total_cmp(&b.2.ratio))
}

fn per_rt(w: &WakeupRun, key: &str) -> f64 {
    w.per_round_trip.get(key).copied().unwrap_or(0.0)
}

/// A counter per round trip where it was read; `None` where it was not (never 0).
fn counted(w: &WakeupRun, key: &str) -> Option<f64> {
    w.per_round_trip.get(key).copied()
}

/// Whether two runs used the same two CPUs, in either direction.
fn same_pair(a: &WakeupRun, b: &WakeupRun) -> bool {
    let key = |w: &WakeupRun| {
        let (x, y) = w.cpus.as_deref()?.split_once(':')?;
        let (x, y): (u32, u32) = (x.parse().ok()?, y.parse().ok()?);
        Some((x.min(y), x.max(y)))
    };
    key(a).is_some() && key(a) == key(b)
}

/// Rescheduling plus function-call IPIs per round trip.
pub fn ipis(w: &WakeupRun) -> Option<f64> {
    let keys = ["irq_RES", "irq_CAL"];
    keys.iter()
        .any(|k| w.per_round_trip.contains_key(*k))
        .then(|| keys.iter().map(|k| per_rt(w, k)).sum())
}

#[derive(Debug, PartialEq)]
enum Mechanism {
    HaltIpiHypervisor,
    IdleExitBareMetal,
    /// IPIs with halts counted and few: the woken CPU was busy (other work) or polling.
    IpiToBusyCpu,
    /// IPIs in a VM whose halts are not counted (no cpuidle driver): a halt or IPI exit, the
    /// halts not visible here.
    HaltUnseen,
    CacheDistance,
    SmtSharing,
    Unclear,
}

impl Rule for CrossCpuWakeup {
    fn id(&self) -> &'static str {
        "cross-cpu-wakeup"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let Some((base, worst, eff)) = worst_penalty(&i) else {
            return vec![];
        };
        let vm = i.facts.hypervisor.is_some();
        let cpu_word = if vm { "vCPU" } else { "CPU" };
        let mut ev = vec![
            Evidence::new(
                format!("{} round trip, same {cpu_word}", base.method),
                ns_ci(&eff.better),
                src(base),
            ),
            Evidence::new(
                format!("{} round trip, {}", worst.method, worst.class),
                ns_ci(&eff.worse),
                src(worst),
            ),
        ];
        let d = diagnose(&i, base, worst, &eff, cpu_word);
        ev.extend(d.evidence);
        ev.extend(fact_evidence(&i));
        let (mech, agree, halts, ipi) = (d.mechanism, d.agree, d.halts, d.ipi);
        let (mechanism, extra) = explain(&mech, &i, halts, ipi);
        let cpu = home_cpu(base, i.facts);
        let mut remedies = remedies::colocate(cpu, i.facts, i.m.app_watch.as_ref());
        remedies.extend(extra);
        // A guest's sockets and nodes are what its host shows it: a KVM host (libvirt) can keep
        // them on one. Other hypervisors have their own NUMA affinity settings, not written here.
        if i.facts
            .hypervisor
            .as_deref()
            .is_some_and(|h| h.contains("KVM"))
            && matches!(
                worst.class,
                PlacementClass::CrossNode | PlacementClass::CrossPackage
            )
        {
            remedies.push(remedies::one_host_node(i.facts.online_cpus.len() as u32));
        }
        vec![Finding {
            id: self.id().into(),
            title: format!(
                "Wakeups across {cpu_word}s cost {:.1}x a same-{cpu_word} wakeup",
                eff.ratio
            ),
            severity: Severity::of_ratio(eff.ratio),
            magnitude: eff.magnitude(
                format!(
                    "a blocking {} round trip between {cpu_word}s {} ({}) takes {} against {} on one {cpu_word}: {:.1}x",
                    worst.method,
                    worst.cpus.as_deref().unwrap_or("?"),
                    worst.class,
                    fmt_ns(eff.worse.mean),
                    fmt_ns(eff.better.mean),
                    eff.ratio
                ),
                "ns",
            ),
            evidence: ev,
            mechanism,
            remedies,
            confidence: Confidence::from_agreeing(agree),
            uncertain: None,
        }]
    }
}

/// What the counters say about the mechanism.
struct Diagnosis {
    evidence: Vec<Evidence>,
    /// Independent measured pieces of evidence that agree with `mechanism`.
    agree: usize,
    mechanism: Mechanism,
    /// Halts per round trip where they were counted.
    halts: Option<f64>,
    ipi: Option<f64>,
}

fn src(w: &WakeupRun) -> String {
    format!(
        "measured: pingpong {} {} {}",
        w.method,
        w.class,
        w.cpus.as_deref().unwrap_or("unpinned")
    )
}

/// Halts and IPIs per round trip, the spinning round trip on the same pair, and the spinning
/// gradient across classes, weighed into a mechanism.
fn diagnose(
    i: &Inputs<'_>,
    base: &WakeupRun,
    worst: &WakeupRun,
    eff: &Effect,
    cpu_word: &str,
) -> Diagnosis {
    let vm = i.facts.hypervisor.is_some();
    let mut ev = Vec::new();
    let mut agree = 0;
    // Halts and IPIs per round trip: the signature of a wakeup that crosses the hypervisor.
    let halts = counted(worst, "idle_entries");
    let halts_base = per_rt(base, "idle_entries");
    let halting = halts.is_some_and(|h| h >= PER_RT_THRESHOLD && h > halts_base + 0.3);
    match halts {
        Some(h) => ev.push(Evidence::new(
            "idle entries (halts) per round trip",
            Datum::versus(
                "per_round_trip",
                (&format!("across {cpu_word}s"), h),
                ("on one", halts_base),
            ),
            src(worst),
        )),
        None => ev.push(Evidence::new(
            "idle entries (halts) per round trip",
            Datum::from(format!(
                "not available, because {}",
                environment::halts_unseen_reason(i.facts)
            )),
            src(worst),
        )),
    }
    agree += usize::from(halting);
    let ipi = ipis(worst);
    if let Some(n) = ipi {
        ev.push(Evidence::new(
            "IPIs (RES+CAL) per round trip",
            Datum::number(n, "per_round_trip"),
            src(worst),
        ));
        agree += usize::from(halting && n >= PER_RT_THRESHOLD);
    }
    // A spinning round trip on the same pair shows how far the cache line travels.
    let spin_same =
        i.m.wakeup
            .iter()
            .find(|w| !w.blocking && same_pair(w, worst));
    let spin_cheap =
        spin_same.is_some_and(|s| s.rtt_ns.mean < 0.25 * (eff.worse.mean - eff.better.mean));
    if let Some(s) = spin_same {
        ev.push(Evidence::new(
            "spinning round trip on the same pair (cache-line transfer only)",
            ns_ci(&s.rtt_ns),
            src(s),
        ));
        agree += usize::from(spin_cheap && halting);
    }
    let cache = cache_distance(i);
    if let Some((near, far)) = &cache {
        ev.push(Evidence::new(
            "spinning round trip grows with distance",
            Datum::versus(
                "ns",
                (&near.class.to_string(), near.rtt_ns.mean),
                (&far.class.to_string(), far.rtt_ns.mean),
            ),
            "measured: pingpong spin",
        ));
    }
    let mechanism = if halting && vm {
        Mechanism::HaltIpiHypervisor
    } else if halting {
        Mechanism::IdleExitBareMetal
    } else if halts.is_none() && vm && ipi.is_some_and(|n| n >= PER_RT_THRESHOLD) {
        // The IPIs agree; the halts, the other half of the signature, cannot.
        agree += 1;
        Mechanism::HaltUnseen
    } else if halts.is_some() && ipi.is_some_and(|n| n >= PER_RT_THRESHOLD) {
        agree += 1;
        Mechanism::IpiToBusyCpu
    } else if cache.is_some() {
        agree += 1;
        Mechanism::CacheDistance
    } else if worst.class == PlacementClass::SmtSibling {
        Mechanism::SmtSharing
    } else {
        Mechanism::Unclear
    };
    Diagnosis {
        evidence: ev,
        agree,
        mechanism,
        halts,
        ipi,
    }
}

/// Probe facts that bear on the mechanism (context, not evidence of the effect).
fn fact_evidence(i: &Inputs<'_>) -> Vec<Evidence> {
    let mut ev = Vec::new();
    if let Some(h) = &i.facts.hypervisor {
        ev.push(Evidence::new("hypervisor", h.clone(), "probe: CPUID / DMI"));
    }
    if let Some(p) = i.facts.guest_halt_poll_ns {
        ev.push(Evidence::new(
            "guest halt polling",
            {
                let d = Datum::number(p as f64, "ns");
                if !matches!(i.facts.cpuidle_driver.as_deref(), Some("haltpoll")) {
                    // The parameter belongs to the haltpoll governor: without the driver it
                    // acts on nothing.
                    d.note("acts on nothing here: the haltpoll cpuidle driver is not in use")
                } else if p == 0 {
                    d.note("off")
                } else {
                    d
                }
            },
            "probe: /sys/module/haltpoll/parameters/guest_halt_poll_ns",
        ));
    }
    if let Some(d) = &i.facts.cpuidle_driver {
        ev.push(Evidence::new(
            "cpuidle driver",
            d.clone(),
            "probe: /sys/devices/system/cpu/cpuidle",
        ));
    }
    ev
}

/// The nearest and farthest pinned spinning runs, when the far one is beyond noise slower.
fn cache_distance<'a>(i: &Inputs<'a>) -> Option<(&'a WakeupRun, &'a WakeupRun)> {
    let mut spins: Vec<&WakeupRun> = i
        .m
        .wakeup
        .iter()
        .filter(|w| {
            !w.blocking && !matches!(w.class, PlacementClass::SameCpu | PlacementClass::Unpinned)
        })
        .collect();
    spins.sort_by_key(|w| w.class);
    let (near, far) = (spins.first()?, spins.last()?);
    (near.class != far.class)
        .then(|| cost_effect(&far.batch_means_ns, &near.batch_means_ns, 1.5))
        .flatten()
        .map(|_| (*near, *far))
}

fn explain(
    m: &Mechanism,
    i: &Inputs<'_>,
    halts: Option<f64>,
    ipi: Option<f64>,
) -> (String, Vec<Remedy>) {
    let ipi_text = ipi.map(|n| format!(" and {n:.1} IPIs")).unwrap_or_default();
    // Halts in words: the count where it was read, else why it was not.
    let halts_words = halts.map(|h| format!("{h:.1} halts")).unwrap_or_else(|| {
        format!(
            "halts not available ({})",
            environment::halts_unseen_reason(i.facts)
        )
    });
    match m {
        Mechanism::HaltIpiHypervisor | Mechanism::HaltUnseen => {
            environment::halt_in_vm(i.facts, halts, ipi)
        }
        Mechanism::IdleExitBareMetal => {
            environment::idle_exit_bare_metal(i.facts, halts.unwrap_or(0.0), &ipi_text)
        }
        Mechanism::CacheDistance => (
            "The data each wakeup touches (the pipe buffer, the task structures) lives in the \
             other CPU's cache and must cross to this one; spinning round trips, which move only \
             a cache line, grow with the distance between the CPUs in the same way."
                .into(),
            vec![Remedy::new(
                "pin both ends to CPUs that share a cache (see the placement table)",
                "Keeps the exchanged data in a cache both CPUs share.",
                "Those CPUs then share the cache's capacity too.",
            )],
        ),
        Mechanism::SmtSharing => (
            "The two ends run on hardware threads of one core and compete for its execution \
             units and L1 cache while both are busy."
                .into(),
            vec![Remedy::new(
                "pin the ends to different cores (one SMT thread each)",
                "Each end gets a whole core.",
                "Wakeups then cross cores, which may cost more; measure both.",
            )],
        ),
        Mechanism::IpiToBusyCpu => (
            format!(
                "Each round trip sends {} to the other CPU but pays only {halts_words}: \
                 that CPU was awake (busy with other work, or polling), so the cost is delivering \
                 the interrupt{} and waiting until the woken task gets the CPU from whatever runs \
                 there. Other load during the run makes this worse; see the conditions.",
                ipi.map(|n| format!("{n:.1} IPIs"))
                    .unwrap_or_else(|| "IPIs".into()),
                if i.facts.hypervisor.is_some() {
                    ", which in a VM is an exit to the hypervisor unless interrupts are posted,"
                } else {
                    ""
                }
            ),
            vec![Remedy::new(
                "cpulab doctor   (again, with nothing else running on these CPUs)",
                "Shows whether the penalty is the wakeup itself or the other work it waited for.",
                "Measures only; changes nothing.",
            )],
        ),
        Mechanism::Unclear => (
            format!(
                "The counters do not single out a mechanism: {halts_words}{} per round trip, and \
                 no cache-distance gradient was measured. Co-locating the pair still removes the \
                 cross-CPU wakeup.",
                ipi.map(|n| format!(", {n:.1} IPIs"))
                    .unwrap_or_else(|| ", IPIs not counted".into())
            ),
            vec![],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    /// The facts and measurements of a saved doctor result.
    fn saved(
        name: &str,
    ) -> (
        crate::doctor::measurements::Facts,
        crate::doctor::measurements::Measurements,
    ) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/results")
            .join(name);
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        (
            serde_json::from_value(doc["facts"].clone()).unwrap(),
            serde_json::from_value(doc["measurements"].clone()).unwrap(),
        )
    }

    /// kvm-emr-16 (a 16-vCPU KVM guest with no cpuidle driver, see docs/field-notes.md's
    /// machines): 2.0 IPIs per round trip and no halt counter. Its doctor said "pays only 0.0
    /// halts: that CPU was awake", from a counter that does not exist there.
    #[test]
    fn halts_not_counted_in_a_vm_are_named_unseen_with_pinning_and_halt_polling() {
        let (facts, m) = saved("kvm-emr-16-doctor.json");
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        let f = &f[0];
        assert!(
            f.mechanism
                .contains("halts are not visible here (no cpuidle driver"),
            "{}",
            f.mechanism
        );
        assert!(f.mechanism.contains("sends 2.0 IPIs"), "{}", f.mechanism);
        assert!(!f.mechanism.contains("awake"), "{}", f.mechanism);
        assert!(!f.mechanism.contains("0.0 halts"), "{}", f.mechanism);
        let halts = f
            .evidence
            .iter()
            .find(|e| e.label.starts_with("idle entries"))
            .unwrap();
        assert!(
            halts
                .value
                .starts_with("not available, because no cpuidle driver"),
            "{}",
            halts.value
        );
        let polling = f
            .evidence
            .iter()
            .find(|e| e.label == "guest halt polling")
            .unwrap();
        assert!(
            polling.note.as_deref().unwrap().contains("acts on nothing"),
            "{polling:?}"
        );
        assert!(halts.quantity.is_none() && halts.versus.is_none());
        let commands: Vec<&str> = f.remedies.iter().map(|r| r.command.as_str()).collect();
        assert!(
            commands.iter().any(|c| c.starts_with("taskset -c")),
            "{commands:?}"
        );
        assert!(
            commands
                .iter()
                .any(|c| c.contains("cpuidle_haltpoll.force=1")),
            "{commands:?}"
        );
        assert!(
            !commands.iter().any(|c| c.starts_with("cpulab doctor")),
            "{commands:?}"
        );
    }

    #[test]
    fn halts_and_ipis_in_a_vm_name_the_hypervisor() {
        let (facts, m) = everything_wrong();
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        assert!(f[0].mechanism.contains("hypervisor"));
        assert_eq!(f[0].confidence, Confidence::High);
        assert_eq!(f[0].severity, Severity::High);
        assert!(
            f[0].remedies
                .iter()
                .any(|r| r.command.contains("guest_halt_poll_ns"))
        );
        assert!(
            f[0].remedies
                .iter()
                .any(|r| r.command.starts_with("taskset -c 0"))
        );
    }

    #[test]
    fn host_polling_is_called_moot_under_poll_control() {
        let (mut facts, m) = everything_wrong();
        facts.kvm_poll_control = true;
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        let host = f[0]
            .remedies
            .iter()
            .find(|r| r.command.contains("KVM host"))
            .unwrap();
        assert!(
            host.cost_caveat.contains("poll control"),
            "{}",
            host.cost_caveat
        );
    }

    /// A guest whose costly crossing is between its (virtual) sockets or nodes gets the host's
    /// one-node placement with its memory (`<numatune>`); a crossing within a socket, or any
    /// crossing on bare metal, does not.
    #[test]
    fn a_guests_cross_node_wakeup_offers_one_host_node() {
        let one_node = |f: &[Finding]| {
            f[0].remedies.iter().any(|r| {
                r.changes.iter().flatten().any(|c| {
                    matches!(
                        c,
                        crate::doctor::findings::Change::VcpuPin { one_node: true, .. }
                    )
                })
            })
        };
        let (facts, mut m) = everything_wrong();
        fn check(
            facts: &crate::doctor::measurements::Facts,
            m: &crate::doctor::measurements::Measurements,
        ) -> Vec<Finding> {
            CrossCpuWakeup.check(Inputs { facts, m })
        }
        assert!(!one_node(&check(&facts, &m)), "shared-llc is one socket");
        for class in [PlacementClass::CrossNode, PlacementClass::CrossPackage] {
            for w in m
                .wakeup
                .iter_mut()
                .filter(|w| !matches!(w.class, PlacementClass::SameCpu | PlacementClass::Unpinned))
            {
                w.class = class;
            }
            let f = check(&facts, &m);
            assert!(one_node(&f), "{class}");
            let r = f[0]
                .remedies
                .iter()
                .find(|r| r.command.contains("numatune"))
                .unwrap();
            assert_eq!(r.site, crate::doctor::findings::Site::Host);
        }
        let mut metal = facts.clone();
        metal.hypervisor = None;
        assert!(!one_node(&check(&metal, &m)), "bare metal has no host");
        let mut vmware = facts.clone();
        vmware.hypervisor = Some("VMware".into());
        assert!(!one_node(&check(&vmware, &m)), "libvirt is KVM's");
    }

    #[test]
    fn spin_gradient_on_bare_metal_is_cache_distance() {
        let (mut facts, mut m) = quiet_machine();
        facts.hypervisor = None;
        m.wakeup = vec![
            wake("pipe", true, PlacementClass::SameCpu, "0:0", 3000.0, 0.0),
            wake("pipe", true, PlacementClass::CrossNode, "0:8", 9000.0, 0.0),
            wake("spin", false, PlacementClass::SmtSibling, "0:1", 40.0, 0.0),
            wake("spin", false, PlacementClass::CrossNode, "0:8", 400.0, 0.0),
        ];
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        assert!(
            f[0].mechanism.starts_with("The data each wakeup touches"),
            "{}",
            f[0].mechanism
        );
        assert!(f[0].title.contains("CPUs"));
    }

    #[test]
    fn ipis_without_halts_point_to_a_busy_cpu() {
        let (facts, mut m) = everything_wrong();
        for w in m
            .wakeup
            .iter_mut()
            .filter(|w| w.class == PlacementClass::SharedLlc)
        {
            w.per_round_trip.insert("idle_entries".into(), 0.0);
        }
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!(f[0].mechanism.contains("awake"), "{}", f[0].mechanism);
        assert_eq!(f[0].confidence, Confidence::Medium);
    }

    /// The same IPIs with the halt counter missing: not "awake" (nothing said so), and in a
    /// VM a halt exit not visible; on bare metal, no mechanism, the missing counter named.
    #[test]
    fn ipis_with_halts_not_counted_are_never_an_awake_cpu() {
        let (mut facts, mut m) = everything_wrong();
        facts.cpuidle_driver = None;
        for w in m.wakeup.iter_mut() {
            w.per_round_trip.remove("idle_entries");
        }
        let judge = |facts: &crate::doctor::measurements::Facts| {
            CrossCpuWakeup.check(Inputs { facts, m: &m }).remove(0)
        };
        let vm = judge(&facts);
        assert!(!vm.mechanism.contains("awake"), "{}", vm.mechanism);
        assert!(
            vm.mechanism.contains("halts are not visible"),
            "{}",
            vm.mechanism
        );
        facts.hypervisor = None;
        let bare = judge(&facts);
        assert!(!bare.mechanism.contains("awake"), "{}", bare.mechanism);
        assert!(
            bare.mechanism
                .contains("halts not available (no cpuidle driver"),
            "{}",
            bare.mechanism
        );
        assert!(!bare.mechanism.contains("0.0 halts"), "{}", bare.mechanism);
    }

    #[test]
    fn a_penalty_within_noise_is_no_finding() {
        let (facts, m) = quiet_machine();
        assert!(
            CrossCpuWakeup
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.
    use crate::doctor::measurements::{Facts, Measurements};

    /// Same CPU 5 us (0 halts) against shared LLC 0:1 at 42 us with `halts` and `ipi`, plus
    /// `extra` runs, in a VM.
    fn judged(halts: Option<f64>, ipi: Option<(f64, f64)>, extra: Vec<WakeupRun>) -> Finding {
        let (facts, mut m) = quiet_machine();
        m.wakeup = vec![
            exact_wake(
                "pipe",
                true,
                PlacementClass::SameCpu,
                "0:0",
                (4e3, 6e3),
                Some(0.0),
                None,
            ),
            exact_wake(
                "pipe",
                true,
                PlacementClass::SharedLlc,
                "0:1",
                (40e3, 44e3),
                halts,
                ipi,
            ),
        ];
        m.wakeup.extend(extra);
        let mut f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1, "{f:?}");
        f.remove(0)
    }

    fn evidence<'a>(f: &'a Finding, label: &str) -> Option<&'a Evidence> {
        f.evidence.iter().find(|e| e.label.starts_with(label))
    }

    #[test]
    fn the_finding_names_its_rule_the_worst_pair_and_its_sources() {
        let f = judged(Some(2.0), Some((1.0, 0.5)), vec![]);
        assert_eq!(f.id, "cross-cpu-wakeup");
        // 42 us against 5 us: 8.4x, high severity.
        assert!((f.magnitude.ratio.unwrap() - 8.4).abs() < 1e-9);
        assert_eq!(f.severity, Severity::High);
        assert!(f.title.contains("8.4x"), "{}", f.title);
        let across = evidence(&f, "pipe round trip, shared-llc").unwrap();
        assert_eq!(across.source, "measured: pingpong pipe shared-llc 0:1");
        // Halts across against on one CPU, and RES + CAL = 1.5 IPIs per round trip.
        let halts = evidence(&f, "idle entries")
            .unwrap()
            .versus
            .as_ref()
            .unwrap();
        assert_eq!((halts.a.value, halts.b.value), (2.0, 0.0));
        let ipi = evidence(&f, "IPIs").unwrap().quantity.as_ref().unwrap();
        assert_eq!(ipi.value, 1.5);
        assert!(f.mechanism.contains("1.5 IPIs"), "{}", f.mechanism);
    }

    #[test]
    fn the_worst_blocking_run_of_the_primary_method_is_judged() {
        // Slower runs of another method, a spinning run and the unpinned run are not the
        // pinned blocking penalty: still 42 us against 5 us.
        let f = judged(
            Some(2.0),
            None,
            vec![
                exact_wake(
                    "eventfd",
                    true,
                    PlacementClass::SharedLlc,
                    "0:1",
                    (8e4, 1e5),
                    None,
                    None,
                ),
                exact_wake(
                    "spin",
                    false,
                    PlacementClass::CrossNode,
                    "0:8",
                    (8e4, 1e5),
                    None,
                    None,
                ),
                exact_wake(
                    "pipe",
                    true,
                    PlacementClass::Unpinned,
                    "",
                    (8e4, 1e5),
                    None,
                    None,
                ),
            ],
        );
        assert!((f.magnitude.ratio.unwrap() - 8.4).abs() < 1e-9);
    }

    #[test]
    fn the_primary_method_is_pipe_else_the_first_blocking_one_measured_on_one_cpu() {
        let (facts, mut m) = quiet_machine();
        let method = |m: &Measurements| primary_method(&Inputs { facts: &facts, m });
        // A spinning same-CPU run and a pinned pipe without its same-CPU run do not make pipe
        // the method; eventfd has both.
        m.wakeup = vec![
            exact_wake(
                "spin",
                false,
                PlacementClass::SameCpu,
                "0:0",
                (1e2, 1e2),
                None,
                None,
            ),
            exact_wake(
                "pipe",
                true,
                PlacementClass::SharedLlc,
                "0:1",
                (4e3, 6e3),
                None,
                None,
            ),
            exact_wake(
                "eventfd",
                true,
                PlacementClass::SameCpu,
                "0:0",
                (4e3, 6e3),
                None,
                None,
            ),
            exact_wake(
                "eventfd",
                true,
                PlacementClass::SharedLlc,
                "0:1",
                (4e3, 6e3),
                None,
                None,
            ),
        ];
        assert_eq!(method(&m).as_deref(), Some("eventfd"));
        m.wakeup.remove(2);
        assert_eq!(method(&m), None);
    }

    #[test]
    fn halting_starts_at_half_a_halt_per_round_trip() {
        // Exactly 0.5 halts (and no IPIs counted): a halt exit, in a VM the hypervisor's.
        let f = judged(Some(0.5), None, vec![]);
        assert!(f.mechanism.contains("hypervisor"), "{}", f.mechanism);
        // Halting alone is one agreeing piece of evidence.
        assert_eq!(f.confidence, Confidence::Medium);
        // Just under: no mechanism singled out.
        let f = judged(Some(0.49), None, vec![]);
        assert!(f.mechanism.contains("do not single out"), "{}", f.mechanism);
        assert_eq!(f.confidence, Confidence::Low);
        // Recorded as zero: not halting either.
        let f = judged(Some(0.0), None, vec![]);
        assert!(f.mechanism.contains("do not single out"), "{}", f.mechanism);
    }

    #[test]
    fn halting_needs_more_than_0_3_halts_above_the_same_cpu_run() {
        let with_base = |base: f64, halts: f64| {
            let (facts, mut m) = quiet_machine();
            m.wakeup = vec![
                exact_wake(
                    "pipe",
                    true,
                    PlacementClass::SameCpu,
                    "0:0",
                    (4e3, 6e3),
                    Some(base),
                    None,
                ),
                exact_wake(
                    "pipe",
                    true,
                    PlacementClass::SharedLlc,
                    "0:1",
                    (40e3, 44e3),
                    Some(halts),
                    None,
                ),
            ];
            CrossCpuWakeup
                .check(Inputs {
                    facts: &facts,
                    m: &m,
                })
                .remove(0)
                .mechanism
        };
        // 0.8 against 0.5 is exactly 0.3 more: not halting; 0.81 is.
        assert!(with_base(0.5, 0.8).contains("do not single out"));
        assert!(with_base(0.5, 0.6).contains("do not single out"));
        assert!(with_base(0.5, 0.81).contains("hypervisor"));
    }

    #[test]
    fn ipis_count_towards_a_halt_from_half_an_ipi_per_round_trip() {
        // Halting plus 0.5 IPIs: two agreeing pieces, high confidence.
        let f = judged(Some(2.0), Some((0.25, 0.25)), vec![]);
        assert_eq!(f.confidence, Confidence::High);
        // Halting plus 0.4 IPIs: only the halts agree.
        let f = judged(Some(2.0), Some((0.2, 0.2)), vec![]);
        assert_eq!(f.confidence, Confidence::Medium);
        // No halts, IPIs under the threshold: not an IPI to a busy CPU.
        let f = judged(Some(0.0), Some((0.2, 0.2)), vec![]);
        assert!(f.mechanism.contains("do not single out"), "{}", f.mechanism);
        assert!(f.mechanism.contains("0.4 IPIs"), "{}", f.mechanism);
    }

    #[test]
    fn a_spinning_run_on_the_same_pair_agrees_when_under_a_quarter_of_the_penalty() {
        let spin = |cpus: &str, mean: (f64, f64)| {
            exact_wake(
                "spin",
                false,
                PlacementClass::SharedLlc,
                cpus,
                mean,
                None,
                None,
            )
        };
        // The penalty is 42 - 5 = 37 us; a quarter of it is 9.25 us.
        let f = judged(Some(2.0), None, vec![spin("1:0", (200.0, 400.0))]);
        let s = evidence(&f, "spinning round trip on the same pair").unwrap();
        assert_eq!(s.quantity.as_ref().unwrap().value, 300.0);
        assert_eq!(s.source, "measured: pingpong spin shared-llc 1:0");
        assert_eq!(f.confidence, Confidence::High);
        // Exactly a quarter is not cheap; above it neither.
        let f = judged(Some(2.0), None, vec![spin("0:1", (9e3, 9.5e3))]);
        assert_eq!(f.confidence, Confidence::Medium);
        let f = judged(Some(2.0), None, vec![spin("0:1", (19e3, 21e3))]);
        assert_eq!(f.confidence, Confidence::Medium);
        // Another pair is no evidence about this one.
        let f = judged(Some(2.0), None, vec![spin("0:2", (200.0, 400.0))]);
        assert!(evidence(&f, "spinning round trip on the same pair").is_none());
        assert_eq!(f.confidence, Confidence::Medium);
        // A cheap spin without halting agrees with nothing.
        let f = judged(Some(0.0), None, vec![spin("0:1", (200.0, 400.0))]);
        assert_eq!(f.confidence, Confidence::Low);
    }

    #[test]
    fn only_spinning_runs_make_a_cache_gradient() {
        let (mut facts, mut m) = quiet_machine();
        facts.hypervisor = None;
        // One spinning class only; blocking runs at two classes are no gradient.
        m.wakeup = vec![
            exact_wake(
                "pipe",
                true,
                PlacementClass::SameCpu,
                "0:0",
                (2e3, 4e3),
                Some(0.0),
                None,
            ),
            exact_wake(
                "pipe",
                true,
                PlacementClass::SmtSibling,
                "0:1",
                (3e3, 3.2e3),
                Some(0.0),
                None,
            ),
            exact_wake(
                "spin",
                false,
                PlacementClass::CrossNode,
                "0:8",
                (300.0, 500.0),
                None,
                None,
            ),
            exact_wake(
                "pipe",
                true,
                PlacementClass::CrossNode,
                "0:8",
                (8e3, 1e4),
                Some(0.0),
                None,
            ),
        ];
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!(
            f[0].mechanism.contains("do not single out"),
            "{}",
            f[0].mechanism
        );
        assert!(f[0].title.contains("3.0x"), "{}", f[0].title);
    }

    #[test]
    fn a_cache_gradient_is_one_agreeing_piece() {
        let (mut facts, mut m) = quiet_machine();
        facts.hypervisor = None;
        m.wakeup = vec![
            exact_wake(
                "pipe",
                true,
                PlacementClass::SameCpu,
                "0:0",
                (2e3, 4e3),
                Some(0.0),
                None,
            ),
            exact_wake(
                "pipe",
                true,
                PlacementClass::CrossNode,
                "0:8",
                (8e3, 1e4),
                Some(0.0),
                None,
            ),
            exact_wake(
                "spin",
                false,
                PlacementClass::SmtSibling,
                "0:1",
                (30.0, 50.0),
                None,
                None,
            ),
            exact_wake(
                "spin",
                false,
                PlacementClass::CrossNode,
                "0:8",
                (300.0, 500.0),
                None,
                None,
            ),
        ];
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        // The cache-distance explanation, not the unclear one (which says "no cache-distance
        // gradient").
        assert!(
            f[0].mechanism.starts_with("The data each wakeup touches"),
            "{}",
            f[0].mechanism
        );
        assert_eq!(f[0].confidence, Confidence::Medium);
        let g = evidence(&f[0], "spinning round trip grows").unwrap();
        let v = g.versus.as_ref().unwrap();
        assert_eq!((v.a.value, v.b.value), (40.0, 400.0));
    }

    #[test]
    fn an_smt_sibling_pair_without_other_signs_is_smt_sharing() {
        let (mut facts, mut m) = quiet_machine();
        facts.hypervisor = None;
        m.wakeup = vec![
            exact_wake(
                "pipe",
                true,
                PlacementClass::SameCpu,
                "0:0",
                (2e3, 4e3),
                Some(0.0),
                None,
            ),
            exact_wake(
                "pipe",
                true,
                PlacementClass::SmtSibling,
                "0:1",
                (8e3, 1e4),
                Some(0.0),
                None,
            ),
        ];
        let f = CrossCpuWakeup.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!(
            f[0].mechanism.contains("hardware threads"),
            "{}",
            f[0].mechanism
        );
        assert!(f[0].title.contains("CPUs cost 3.0x"), "{}", f[0].title);
    }

    #[test]
    fn guest_halt_polling_off_is_noted_and_on_is_not() {
        let (mut facts, m) = everything_wrong();
        let note = |facts: &Facts| {
            fact_evidence(&Inputs { facts, m: &m })
                .into_iter()
                .find(|e| e.label == "guest halt polling")
                .unwrap()
                .note
        };
        assert_eq!(note(&facts).as_deref(), Some("off"));
        facts.guest_halt_poll_ns = Some(200_000);
        assert_eq!(note(&facts), None);
        let ev = fact_evidence(&Inputs {
            facts: &facts,
            m: &m,
        });
        assert!(
            ev.iter()
                .any(|e| e.label == "hypervisor" && e.value == "KVM")
        );
        assert!(
            ev.iter()
                .any(|e| e.label == "cpuidle driver" && e.value == "haltpoll")
        );
    }
}
