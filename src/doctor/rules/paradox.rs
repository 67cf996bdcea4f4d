//! "Adding load made it faster" (field notes A).
//!
//! On an idle machine, when one end of a request/response pair wakes the other, the scheduler
//! looks for an idle CPU to run the woken task and finds one: the pair takes turns, so the
//! other CPU is always idle. Every round trip then crosses CPUs and pays the cross-CPU wakeup
//! (in a VM, a halt and an IPI through the hypervisor). With a busy thread on every other CPU
//! there is no idle CPU to pick, so the woken task runs where its waker runs: no halt, no IPI,
//! and the round trip gets several times faster. Field notes A saw pgbench -S run twice as fast
//! with `stress-ng -c 3` beside it; our guest shows the unpinned pipe round trip fall from tens
//! of microseconds to a few.
//!
//! The doctor measures the unpinned round trip twice, on an otherwise idle machine and with a
//! spinning neighbour on every usable CPU but the first. The effect is the loaded run faster
//! beyond noise; the mechanism evidence is the share of time both ends shared a CPU and the
//! halts and IPIs per round trip, each in both runs.

use super::remedies;
use super::rule::{Effect, Inputs, Rule, cost_effect, ns_ci, uncertainty};
use super::unpinned::split_modes;
use super::wakeup::{MIN_RATIO, ipis, primary_method};
use crate::doctor::findings::Datum;
use crate::doctor::findings::{Confidence, Evidence, Finding, Remedy, Severity};
use crate::doctor::measurements::{Measurements, WakeupRun};
use crate::output::fmt_ns;
use crate::topology::PlacementClass;

/// Busy percent of a CPU from other programs above which the doctor says what that load does
/// to its figures.
pub const OTHER_LOAD_PCT: f64 = 10.0;

pub struct LoadMakesItFaster;

fn per_rt(w: &WakeupRun, key: &str) -> Option<f64> {
    w.per_round_trip.get(key).copied()
}

fn pct(x: Option<f64>) -> String {
    x.map_or("not recorded".into(), |s| format!("{:.0}%", s * 100.0))
}

const IDLE: &str = "idle";
const BUSY: &str = "with busy neighbours";

/// Whether the unpinned pair's placement changed during this run, in words (pure): its batches
/// fell into two groups, or both ends shared a CPU for only part of the time.
fn placement_changed(run: &WakeupRun, label: &str) -> Option<String> {
    if let Some((lo, hi)) = split_modes(&run.batch_means_ns) {
        return Some(format!(
            "the unpinned pair moved during the {label} run: {} batches at ~{} and {} at ~{}",
            lo.len(),
            fmt_ns(lo.iter().sum::<f64>() / lo.len() as f64),
            hi.len(),
            fmt_ns(hi.iter().sum::<f64>() / hi.len() as f64)
        ));
    }
    run.same_cpu_share
        .filter(|s| (0.2..=0.8).contains(s))
        .map(|s| {
            format!(
                "the unpinned pair shared a CPU {:.0}% of the {label} run: its placement changed \
                 while it was measured",
                s * 100.0
            )
        })
}

fn both(label: &str, idle: Option<f64>, busy: Option<f64>, src: &str) -> Option<Evidence> {
    let (i, b) = (idle?, busy?);
    Some(Evidence::new(
        label,
        Datum::versus("per_round_trip", (IDLE, i), (BUSY, b)),
        src,
    ))
}

impl Rule for LoadMakesItFaster {
    fn id(&self) -> &'static str {
        "load-makes-it-faster"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let Some(method) = primary_method(&i) else {
            return vec![];
        };
        let (Some(idle), Some(busy)) = (
            i.m.wakeup(&method, PlacementClass::Unpinned),
            i.m.unpinned_with_neighbours(&method),
        ) else {
            return vec![];
        };
        let Some(eff) = cost_effect(&idle.batch_means_ns, &busy.batch_means_ns, MIN_RATIO) else {
            return vec![];
        };
        // The paradox is a spread pair pulled together by load. When the pair was already
        // together without the neighbours (other programs kept the CPUs busy), a speed-up has
        // another cause, and the conditions note speaks to that load instead.
        let already_together = idle.same_cpu_share.is_some_and(|s| s >= 0.8)
            && per_rt(idle, "idle_entries").is_none_or(|h| h < 0.3);
        if already_together {
            return vec![];
        }
        let n = busy.neighbour_load.unwrap_or(1);
        let vm = i.facts.hypervisor.is_some();
        let cpu_word = if vm { "vCPU" } else { "CPU" };
        let signs = Signs::of(idle, busy);
        let ev = evidence(&i, &method, n, &eff, &signs);
        let mechanism = mechanism(vm, &signs);
        let rems = pinning_remedies(&i, n);
        vec![Finding {
            id: self.id().into(),
            title: format!(
                "Adding load made it faster: an unpinned round trip is {:.1}x faster with the other {cpu_word}s busy",
                eff.ratio
            ),
            severity: Severity::of_ratio(eff.ratio),
            magnitude: eff.magnitude(
                format!(
                    "an unpinned blocking {method} round trip takes {} on an otherwise idle machine and {} with a spinning thread on {n} other {cpu_word}(s): {:.1}x faster under load",
                    fmt_ns(eff.worse.mean),
                    fmt_ns(eff.better.mean),
                    eff.ratio
                ),
                "ns",
            ),
            evidence: ev,
            mechanism,
            remedies: rems,
            confidence: Confidence::from_agreeing(signs.agreeing()),
            uncertain: uncertainty(
                &eff,
                MIN_RATIO,
                placement_changed(idle, IDLE).or(placement_changed(busy, BUSY)),
            ),
        }]
    }
}

/// The mechanism's signs in the idle and the loaded run: the share of time both ends shared a
/// CPU, halts and IPIs per round trip.
struct Signs {
    share_idle: Option<f64>,
    share_busy: Option<f64>,
    halts_idle: Option<f64>,
    halts_busy: Option<f64>,
    ipi_idle: Option<f64>,
    ipi_busy: Option<f64>,
}

impl Signs {
    fn of(idle: &WakeupRun, busy: &WakeupRun) -> Self {
        Signs {
            share_idle: idle.same_cpu_share,
            share_busy: busy.same_cpu_share,
            halts_idle: per_rt(idle, "idle_entries"),
            halts_busy: per_rt(busy, "idle_entries"),
            ipi_idle: ipis(idle),
            ipi_busy: ipis(busy),
        }
    }

    /// How many independent signs agree: the pair co-located more, and it stopped halting.
    fn agreeing(&self) -> usize {
        let colocated =
            matches!((self.share_idle, self.share_busy), (Some(a), Some(b)) if b > a + 0.2);
        let fewer_halts = matches!((self.halts_idle, self.halts_busy), (Some(a), Some(b)) if b < 0.5 * a && a >= 0.3);
        let fewer_ipis =
            matches!((self.ipi_idle, self.ipi_busy), (Some(a), Some(b)) if b < 0.5 * a && a >= 0.3);
        usize::from(colocated) + usize::from(fewer_halts || fewer_ipis)
    }
}

/// The round trips idle and loaded, the shares on one CPU, the halts and IPIs per round trip
/// in both runs, the pinned reference and the published case.
fn evidence(i: &Inputs<'_>, method: &str, n: usize, eff: &Effect, s: &Signs) -> Vec<Evidence> {
    let cpu_word = if i.facts.hypervisor.is_some() {
        "vCPU"
    } else {
        "CPU"
    };
    let src = format!("measured: pingpong {method} unpinned, idle and with {n} busy neighbour(s)");
    let mut ev = vec![
        Evidence::new(
            "unpinned round trip, machine otherwise idle",
            ns_ci(&eff.worse),
            format!("measured: pingpong {method} unpinned"),
        ),
        Evidence::new(
            format!("unpinned round trip, a spinning thread on {n} other {cpu_word}(s)"),
            ns_ci(&eff.better),
            src.clone(),
        ),
    ];
    if s.share_idle.is_some() || s.share_busy.is_some() {
        let value = match (s.share_idle, s.share_busy) {
            (Some(i), Some(b)) => Datum::versus("pct", (IDLE, i * 100.0), (BUSY, b * 100.0)),
            (Some(i), None) => Datum::share(i).note(format!("{IDLE}; not recorded {BUSY}")),
            (None, Some(b)) => Datum::share(b).note(format!("{BUSY}; not recorded {IDLE}")),
            (None, None) => Datum::from("not recorded"),
        };
        ev.push(Evidence::new(
            format!("time both ends shared a {cpu_word}"),
            value,
            src.clone(),
        ));
    }
    ev.extend(both(
        "halts (idle entries) per round trip",
        s.halts_idle,
        s.halts_busy,
        &src,
    ));
    ev.extend(both(
        "IPIs (RES+CAL) per round trip",
        s.ipi_idle,
        s.ipi_busy,
        &src,
    ));
    if let Some(same) = i.m.wakeup(method, PlacementClass::SameCpu) {
        ev.push(Evidence::new(
            format!("pinned to one {cpu_word}, for reference"),
            ns_ci(&same.rtt_ns),
            format!("measured: pingpong {method} same-cpu"),
        ));
    }
    ev.push(Evidence::new(
        "the same effect elsewhere (pgbench -S on a 4-vCPU Hyper-V guest)",
        Datum::versus(
            "tps",
            (IDLE, 7486.0),
            ("with stress-ng -c 3 -l 100 beside it", 15681.0),
        ),
        "published: docs/field-notes.md, section A",
    ));
    ev
}

/// Why load made it faster, in words, with the figures of both runs.
fn mechanism(vm: bool, s: &Signs) -> String {
    let cpu_word = if vm { "vCPU" } else { "CPU" };
    let crossing = if vm {
        "a halt of the idle vCPU and an inter-processor interrupt through the hypervisor"
    } else {
        "an inter-processor interrupt and an exit from the idle CPU's sleep state"
    };
    format!(
        "With the other {cpu_word}s idle, the scheduler wakes the sleeping end on an idle \
         {cpu_word} (it looks free, and the pair takes turns, so one always is): every round \
         trip crosses {cpu_word}s and pays {crossing}{}. With a busy thread on every other \
         {cpu_word} there is no idle one to pick, so the woken task runs where its waker runs: \
         both ends shared a {cpu_word} {} of the time instead of {}{}. Nothing about the \
         work changed; only where the scheduler put it.",
        match (s.halts_idle, s.ipi_idle) {
            (Some(h), Some(x)) => format!(" ({h:.1} halts and {x:.1} IPIs per round trip)"),
            _ => String::new(),
        },
        pct(s.share_busy),
        pct(s.share_idle),
        match (s.halts_busy, s.ipi_busy) {
            (Some(h), Some(x)) =>
                format!(", and halts fell to {h:.2} and IPIs to {x:.2} per round trip"),
            _ => String::new(),
        }
    )
}

/// Pinning instead of relying on load, putting the pair on one CPU, and the real server and
/// client measured beside busy neighbours.
fn pinning_remedies(i: &Inputs<'_>, n: usize) -> Vec<Remedy> {
    let mut rems = vec![Remedy::new(
        "pin both ends instead of relying on load (below), then measure again",
        "Request/response figures on this machine depend on what else runs: a benchmark on \
         an idle machine understates what the same code does beside other work, and the \
         reverse. Pinning makes the placement, and so the figure, the same whatever runs.",
        "None for the measurement; see each pinning remedy for its own cost.",
    )];
    rems.extend(remedies::colocate(
        i.facts.allowed_cpus.first().unwrap_or(0),
        i.facts,
        i.m.app_watch.as_ref(),
    ));
    rems.push(Remedy::new(
        format!("cpulab pair --preset pgbench --neighbour-load {n}"),
        "Shows the same effect on a real server and client: every placement measured again \
         with busy neighbours beside it.",
        "Measures only; changes nothing.",
    ));
    rems
}

/// The findings whose figures other load can change: the unpinned ones (load pulls a spread
/// pair together), the pinned cross-CPU wakeup (waiting for a busy CPU) and the share check's.
pub const LOAD_SENSITIVE: &[&str] = &[
    "load-makes-it-faster",
    "unpinned-placement",
    "latency-throughput-tradeoff",
    "cross-cpu-wakeup",
    "watched-cross-cpu-wakeups",
    "noisy-neighbour",
];

/// What other load seen before the run does to the doctor's figures, in words, naming the
/// findings of this run it may have changed; `None` when the usable CPUs were quiet.
pub fn other_load_note(m: &Measurements, vm: bool, findings: &[Finding]) -> Option<String> {
    let busy: Vec<String> = m
        .counters
        .other_busy_pct
        .iter()
        .filter(|(_, b)| **b > OTHER_LOAD_PCT)
        .map(|(c, b)| format!("cpu{c} {b:.0}%"))
        .collect();
    if busy.is_empty() {
        return None;
    }
    let cpu_word = if vm { "vCPU" } else { "CPU" };
    // What the unpinned run measured, when it shows the effect: as fast as one CPU.
    let seen = m
        .wakeup
        .iter()
        .find(|w| w.blocking && w.class == PlacementClass::SameCpu && w.neighbour_load.is_none())
        .and_then(|same| {
            let free = m.wakeup(&same.method, PlacementClass::Unpinned)?;
            let share = free.same_cpu_share.filter(|s| *s >= 0.5)?;
            Some(format!(
                " Here the unpinned round trip took {} against {} pinned to one {cpu_word}, both \
                 ends sharing a {cpu_word} {:.0}% of the time: that is the other load's doing.",
                fmt_ns(free.rtt_ns.mean),
                fmt_ns(same.rtt_ns.mean),
                share * 100.0
            ))
        })
        .unwrap_or_default();
    Some(format!(
        "other programs kept CPUs busy before the run ({}). While a {cpu_word} is busy the \
         scheduler wakes a waiting task where its waker runs instead of on that {cpu_word}, so the \
         unpinned round trip (and unpinned pgbench or ab) is fast only while that load lasts, and \
         slow again on an idle machine; pinned cross-{cpu_word} figures that use a busy \
         {cpu_word} include waiting for it, and the share check is lower.{seen} Run the doctor \
         again when the machine is quiet to tell the two apart. {}",
        busy.join(", "),
        affected(findings)
    ))
}

/// The findings other load can hide altogether: it pulls the unpinned pair together (no
/// paradox, no slow unpinned run) and takes the spread placement's second CPU (no throughput
/// gain from spreading).
pub const LOAD_HIDES: &[&str] = &[
    "load-makes-it-faster",
    "unpinned-placement",
    "latency-throughput-tradeoff",
];

/// The sentence naming the findings the other load may have changed, and those it may have
/// hidden, the load-hideable ones absent from this run (pure).
fn affected(findings: &[Finding]) -> String {
    let present = |id: &str| findings.iter().any(|f| f.id == id);
    let changed: Vec<&str> = LOAD_SENSITIVE
        .iter()
        .copied()
        .filter(|id| present(id))
        .collect();
    let hidden: Vec<&str> = LOAD_HIDES
        .iter()
        .copied()
        .filter(|id| !present(id))
        .collect();
    let mut out = if changed.is_empty() {
        "It may have changed none of this run's findings".to_string()
    } else {
        format!("Findings it may have changed: {}", changed.join(", "))
    };
    if !hidden.is_empty() {
        out += &format!("; it may have hidden {}", hidden.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    fn loaded(mean: f64, share: f64, halts: f64) -> WakeupRun {
        let mut w = wake("pipe", true, PlacementClass::Unpinned, "", mean, halts);
        w.same_cpu_share = Some(share);
        w.neighbour_load = Some(1);
        w
    }

    #[test]
    fn faster_under_load_is_named_with_both_cases() {
        let (facts, mut m) = quiet_machine();
        // Idle: spread, 48 us, two halts; busy neighbour: co-located, 7 us, no halts.
        let idle = m
            .wakeup
            .iter_mut()
            .find(|w| w.class == PlacementClass::Unpinned)
            .unwrap();
        *idle = wake("pipe", true, PlacementClass::Unpinned, "", 48e3, 2.0);
        idle.same_cpu_share = Some(0.05);
        m.wakeup.push(loaded(7e3, 0.97, 0.02));
        let f = LoadMakesItFaster.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f.len(), 1);
        let f = &f[0];
        assert!((f.magnitude.ratio.unwrap() - 48.0 / 7.0).abs() < 0.05);
        assert_eq!(f.confidence, Confidence::High);
        assert!(
            f.mechanism.contains("97%") && f.mechanism.contains("5%"),
            "{}",
            f.mechanism
        );
        assert!(
            f.evidence
                .iter()
                .any(|e| e.label.starts_with("halts") && e.value.contains("2.00"))
        );
        // The published figure is labelled as such, never as measured.
        let p = f
            .evidence
            .iter()
            .find(|e| e.value.contains("15,681"))
            .unwrap();
        assert!(p.source.starts_with("published: docs/field-notes.md"));
        assert!(f.remedies[0].command.starts_with("pin both ends"));
        // Clear evidence, placement steady in each run: not uncertain.
        assert_eq!(f.uncertain, None);
        // The other rules still read the idle unpinned run.
        assert_eq!(
            m.wakeup("pipe", PlacementClass::Unpinned)
                .unwrap()
                .rtt_ns
                .mean,
            48e3
        );
    }

    #[test]
    fn no_finding_when_load_changes_nothing_or_was_not_measured() {
        let (facts, mut m) = quiet_machine();
        assert!(
            LoadMakesItFaster
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
        m.wakeup.push(loaded(5050.0, 0.5, 0.02));
        assert!(
            LoadMakesItFaster
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
    }

    /// Measured on our guest with both vCPUs 100% busy from other builds: the "idle" unpinned
    /// run was already co-located (10.7 us, 100% same CPU) and ran 5.6 us beside the neighbour.
    /// That is not the paradox; no finding.
    #[test]
    fn a_pair_already_together_without_neighbours_is_not_the_paradox() {
        let (facts, mut m) = quiet_machine();
        let idle = m
            .wakeup
            .iter_mut()
            .find(|w| w.class == PlacementClass::Unpinned)
            .unwrap();
        *idle = wake("pipe", true, PlacementClass::Unpinned, "", 10.7e3, 0.0);
        idle.same_cpu_share = Some(1.0);
        m.wakeup.push(loaded(5.6e3, 1.0, 0.0));
        assert!(
            LoadMakesItFaster
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
    }

    /// The unpinned runs of the paradox, idle (`idle_batches`, sharing a CPU `idle_share` of
    /// the time) against a co-located 10 us with busy neighbours.
    fn paradox(idle_batches: Vec<f64>, idle_share: f64) -> Vec<Finding> {
        let (facts, mut m) = quiet_machine();
        let idle = m
            .wakeup
            .iter_mut()
            .find(|w| w.class == PlacementClass::Unpinned)
            .unwrap();
        *idle = wake("pipe", true, PlacementClass::Unpinned, "", 1.0, 2.0);
        idle.rtt_ns = mci(&idle_batches);
        idle.batch_means_ns = idle_batches;
        idle.same_cpu_share = Some(idle_share);
        m.wakeup.push(loaded(10e3, 0.97, 0.02));
        LoadMakesItFaster.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    // Issue 22, the same answer twice: a run after a pgbench pair lost this finding.
    #[test]
    fn evidence_within_noise_of_the_threshold_is_marked_uncertain() {
        // 1.3x on average, beyond noise, but the intervals' nearer ends are under 1.25x apart.
        let f = paradox(samples(13e3, 0.2, 20), 0.05);
        assert_eq!(f.len(), 1);
        let why = f[0].uncertain.as_deref().expect("marked uncertain");
        assert!(why.contains("within noise"), "{why}");
    }

    #[test]
    fn a_pair_that_moved_during_the_idle_run_is_marked_uncertain() {
        // Clearly slower idle (40 us against 10 us), but the pair shared a CPU half the time.
        let f = paradox(samples(40e3, 0.02, 20), 0.5);
        assert_eq!(f.len(), 1);
        let why = f[0].uncertain.as_deref().expect("marked uncertain");
        assert!(why.contains("shared a CPU 50%"), "{why}");
        assert!(!why.contains("within noise"), "{why}");
        // The same figures with a steady placement: not uncertain.
        assert_eq!(paradox(samples(40e3, 0.02, 20), 0.05)[0].uncertain, None);
    }

    #[test]
    fn the_load_warning_names_the_findings_it_may_have_changed() {
        let (_, mut m) = quiet_machine();
        m.counters.other_busy_pct.insert(1, 60.0);
        let mut found = paradox(samples(40e3, 0.02, 20), 0.05);
        let mut other = found[0].clone();
        other.id = "kernel-entry-cost".into();
        found.push(other);
        let n = other_load_note(&m, true, &found).unwrap();
        assert!(
            n.contains("Findings it may have changed: load-makes-it-faster"),
            "{n}"
        );
        assert!(!n.contains("kernel-entry-cost"), "not changed by load: {n}");
        // Issue 22: busy CPUs take the spread placement's gain away, so the absent tradeoff
        // is named as possibly hidden, and a present finding is never.
        assert!(
            n.contains("it may have hidden unpinned-placement, latency-throughput-tradeoff"),
            "{n}"
        );
        // No affected finding: the warning says which it may have hidden.
        let n = other_load_note(&m, true, &found[1..]).unwrap();
        assert!(
            n.contains("none of this run's findings; it may have hidden load-makes-it-faster"),
            "{n}"
        );
    }

    #[test]
    fn other_load_before_the_run_is_explained() {
        let (_, mut m) = quiet_machine();
        assert!(other_load_note(&m, true, &[]).is_none());
        m.counters.other_busy_pct.insert(1, 98.0);
        let n = other_load_note(&m, true, &[]).unwrap();
        assert!(
            n.contains("cpu1 98%") && n.contains("fast only while"),
            "{n}"
        );
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// The idle unpinned run (40 us) and the run beside one busy neighbour (10 us), sharing a
    /// CPU `share` of the time with `halts` and `ipi` per round trip (`None`: not recorded).
    fn unpinned(
        busy: bool,
        share: Option<f64>,
        halts: Option<f64>,
        ipi: Option<(f64, f64)>,
    ) -> WakeupRun {
        let batches = if busy { (9e3, 11e3) } else { (38e3, 42e3) };
        let mut w = exact_wake(
            "pipe",
            true,
            PlacementClass::Unpinned,
            "",
            batches,
            halts,
            ipi,
        );
        w.same_cpu_share = share;
        w.neighbour_load = busy.then_some(1);
        w
    }

    fn judged(idle: WakeupRun, busy: WakeupRun) -> Vec<Finding> {
        let (facts, mut m) = quiet_machine();
        m.wakeup.retain(|w| w.class != PlacementClass::Unpinned);
        m.wakeup.extend([idle, busy]);
        LoadMakesItFaster.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    #[test]
    fn a_pair_together_from_80_percent_with_under_0_3_halts_is_not_the_paradox() {
        let busy = || unpinned(true, Some(0.97), Some(0.0), None);
        let found = |share: f64, halts: Option<f64>| {
            judged(unpinned(false, Some(share), halts, None), busy()).len()
        };
        assert_eq!(found(0.8, Some(0.0)), 0);
        assert_eq!(found(0.79, Some(0.0)), 1);
        // Halts not recorded: the share alone decides.
        assert_eq!(found(0.9, None), 0);
        // Sharing a CPU but still halting 0.3 per round trip: not together.
        assert_eq!(found(0.9, Some(0.3)), 1);
        assert_eq!(found(0.9, Some(0.29)), 0);
        // Apart and not halting: the paradox.
        assert_eq!(found(0.05, Some(0.0)), 1);
        let f = judged(unpinned(false, Some(0.05), Some(0.0), None), busy());
        assert_eq!(f[0].id, "load-makes-it-faster");
        assert!(f[0].title.contains("4.0x faster"), "{}", f[0].title);
    }

    #[test]
    fn the_shared_time_is_evidence_in_percent_when_either_run_recorded_it() {
        let share_of = |idle: Option<f64>, busy: Option<f64>| {
            judged(
                unpinned(false, idle, Some(2.0), None),
                unpinned(true, busy, Some(0.0), None),
            )
            .remove(0)
            .evidence
            .into_iter()
            .find(|e| e.label == "time both ends shared a vCPU")
        };
        let both = share_of(Some(0.25), Some(0.75)).unwrap();
        let v = both.versus.unwrap();
        assert_eq!((v.a.value, v.b.value), (25.0, 75.0));
        let idle_only = share_of(Some(0.25), None).unwrap();
        assert_eq!(idle_only.quantity.unwrap().value, 25.0);
        assert_eq!(
            idle_only.note.as_deref(),
            Some("idle; not recorded with busy neighbours")
        );
        assert!(share_of(None, Some(0.75)).is_some());
        assert!(share_of(None, None).is_none());
    }

    #[test]
    fn co_location_agrees_when_the_share_rose_by_more_than_0_2() {
        // Halts and IPIs not recorded: the share is the only mechanism evidence.
        let confidence = |idle: f64, busy: f64| {
            judged(
                unpinned(false, Some(idle), None, None),
                unpinned(true, Some(busy), None, None),
            )[0]
            .confidence
        };
        assert_eq!(confidence(0.5, 0.7), Confidence::Low);
        assert_eq!(confidence(0.5, 0.71), Confidence::Medium);
        assert_eq!(confidence(0.5, 0.3), Confidence::Low);
    }

    #[test]
    fn halts_or_ipis_agree_when_they_fell_below_half_from_0_3_or_more() {
        let by_halts = |idle: f64, busy: f64| {
            judged(
                unpinned(false, None, Some(idle), None),
                unpinned(true, None, Some(busy), None),
            )[0]
            .confidence
        };
        assert_eq!(by_halts(0.4, 0.2), Confidence::Low);
        assert_eq!(by_halts(0.4, 0.19), Confidence::Medium);
        assert_eq!(by_halts(0.3, 0.0), Confidence::Medium);
        assert_eq!(by_halts(0.29, 0.0), Confidence::Low);
        let by_ipis = |idle: f64, busy: f64| {
            judged(
                unpinned(false, None, None, Some((idle / 2.0, idle / 2.0))),
                unpinned(true, None, None, Some((busy / 2.0, busy / 2.0))),
            )[0]
            .confidence
        };
        assert_eq!(by_ipis(0.4, 0.2), Confidence::Low);
        assert_eq!(by_ipis(0.4, 0.19), Confidence::Medium);
        assert_eq!(by_ipis(0.3, 0.0), Confidence::Medium);
        assert_eq!(by_ipis(0.29, 0.0), Confidence::Low);
    }

    #[test]
    fn the_mechanism_quotes_both_runs_counters() {
        let f = judged(
            unpinned(false, Some(0.05), Some(2.0), Some((1.0, 0.5))),
            unpinned(true, None, Some(0.02), Some((0.01, 0.0))),
        );
        let m = &f[0].mechanism;
        assert!(m.contains("(2.0 halts and 1.5 IPIs per round trip)"), "{m}");
        assert!(m.contains("halts fell to 0.02 and IPIs to 0.01"), "{m}");
        assert!(m.contains("not recorded of the time instead of 5%"), "{m}");
        let ipis = f[0]
            .evidence
            .iter()
            .find(|e| e.label.starts_with("IPIs"))
            .unwrap();
        let v = ipis.versus.as_ref().unwrap();
        assert_eq!((v.a.value, v.b.value), (1.5, 0.01));
    }

    #[test]
    fn other_load_counts_above_10_percent_busy() {
        let (_, mut m) = quiet_machine();
        m.counters.other_busy_pct.insert(1, 10.0);
        assert!(other_load_note(&m, true, &[]).is_none());
        m.counters.other_busy_pct.insert(0, 11.0);
        let n = other_load_note(&m, true, &[]).unwrap();
        assert!(n.contains("before the run (cpu0 11%)"), "{n}");
    }

    #[test]
    fn the_load_note_quotes_the_unpinned_run_when_it_shared_a_cpu_half_the_time() {
        let (_, mut m) = quiet_machine();
        m.counters.other_busy_pct.insert(1, 98.0);
        // The pinned cross-CPU run first: the note compares with the same-CPU one.
        m.wakeup.swap(0, 1);
        let note = |m: &Measurements, share: f64| {
            let mut m = m.clone();
            for w in m
                .wakeup
                .iter_mut()
                .filter(|w| w.class == PlacementClass::Unpinned)
            {
                w.same_cpu_share = Some(share);
            }
            other_load_note(&m, false, &[]).unwrap()
        };
        let n = note(&m, 0.5);
        assert!(
            n.contains(
                "Here the unpinned round trip took 5.05 us against 5.00 us pinned to one CPU, \
                 both ends sharing a CPU 50% of the time"
            ),
            "{n}"
        );
        assert!(!note(&m, 0.49).contains("Here the unpinned"));
    }
}
