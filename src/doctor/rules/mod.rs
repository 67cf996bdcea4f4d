//! The rules that turn measurements into findings.
//!
//! One small trait ([`rule::Rule`]), one file per family of causes, all chosen in [`all`]. A
//! rule is a pure function of the doctor's [`Inputs`] (probe facts and condensed measurements):
//! it reads no file and runs nothing, so each is tested on hand-built inputs, including the
//! quiet machine on which it must stay silent.
//!
//! Every rule follows the same discipline: first the *effect* (two measured figures whose
//! difference is beyond noise by [`crate::compare`]'s criterion, and larger than the rule's
//! minimum size), and only then the mechanism, from counters and probe facts. No effect, no
//! finding, whatever the configuration looks like.
//!
//! This file holds only the module declarations and the list; what the rules share (the trait,
//! the effect helpers, the figures as data) is [`rule`], which imports no rule, so no rule
//! imports the file that lists it.

mod app;
mod cpuset;
pub mod environment;
mod kernel;
mod neighbour;
pub mod paradox;
mod power;
mod quota;
pub mod remedies;
pub mod rule;
mod scaling;
mod tradeoff;
mod unpinned;
mod wakeup;
mod watched;

pub use kernel::spoiled as primitive_spoiled;
pub use wakeup::ipis as wakeup_ipis;

pub use rule::{Inputs, Rule};

use super::findings::{self, Finding};

/// Every rule, in no particular order (findings are sorted afterwards).
pub fn all() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(wakeup::CrossCpuWakeup),
        Box::new(unpinned::UnpinnedPlacement),
        Box::new(paradox::LoadMakesItFaster),
        Box::new(tradeoff::LatencyThroughput),
        Box::new(app::AppPlacement),
        Box::new(neighbour::NoisyNeighbour),
        Box::new(quota::QuotaThrottling),
        Box::new(cpuset::RestrictedCpuSet),
        Box::new(power::PowerManagement),
        Box::new(kernel::KernelEntryCost),
        Box::new(scaling::ParallelContention),
        Box::new(watched::WatchedCrossWakeups),
    ]
}

/// Runs every rule, aims each remedy's trial at the change its finding predicts, and sorts the
/// findings, most important first.
pub fn evaluate(input: Inputs<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = all().iter().flat_map(|r| r.check(input)).collect();
    findings::aim_trials(&mut out);
    findings::sort(&mut out);
    out
}

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 8: every remedy that is a setting changed now, on this machine, carries the
    /// `cpulab try` line that measures it.
    #[test]
    fn every_runtime_setting_remedy_carries_its_try_line() {
        let (facts, m) = fixtures::everything_wrong();
        let f = evaluate(Inputs {
            facts: &facts,
            m: &m,
        });
        let mut seen = 0;
        for r in f.iter().flat_map(|f| &f.remedies) {
            let c = &r.command;
            let setting = c.starts_with("cpupower ")
                || c.starts_with("tuned-adm ")
                || (c.starts_with("echo ") && c.contains("> /sys/"))
                || c.starts_with("taskset -a -p");
            if setting && r.site == crate::doctor::findings::Site::ThisMachine {
                seen += 1;
                let t = r.try_command.as_deref().unwrap_or_else(|| panic!("{c}"));
                assert!(t.starts_with("cpulab try "), "{t}");
            }
        }
        assert!(seen >= 3, "the fixture has setting remedies ({seen})");
    }

    /// Every printed trial asks for the change its finding predicts: a finding of ratio R gets
    /// `--detect` of 1 - 1/R (held to 2..50%), and a finding without a ratio leaves its lines
    /// as the rule wrote them.
    #[test]
    fn every_try_line_asks_for_the_change_its_finding_predicts() {
        let (facts, m) = fixtures::everything_wrong();
        let f = evaluate(Inputs {
            facts: &facts,
            m: &m,
        });
        let mut aimed = 0;
        for x in &f {
            for t in x.remedies.iter().filter_map(|r| r.try_command.as_deref()) {
                match x.magnitude.trial_target() {
                    Some(target) => {
                        let want = format!(" --detect {:.0}", target * 100.0);
                        assert!(t.ends_with(&want), "{}: {t}", x.id);
                        assert_eq!(t.matches("--detect").count(), 1, "{t}");
                        aimed += 1;
                    }
                    None => assert!(!t.contains("--detect"), "{}: {t}", x.id),
                }
            }
        }
        assert!(aimed >= 3, "the fixture has trials to aim ({aimed})");
        let wake = f.iter().find(|x| x.id == "cross-cpu-wakeup").unwrap();
        let ratio = wake.magnitude.ratio.unwrap();
        assert!(ratio > 2.0, "{ratio}");
        let want = (1.0 - 1.0 / ratio).clamp(0.02, 0.5) * 100.0;
        let t = wake
            .remedies
            .iter()
            .find_map(|r| r.try_command.clone())
            .unwrap();
        assert!(t.ends_with(&format!("--detect {want:.0}")), "{t}");
    }

    #[test]
    fn evidence_carries_figures_and_sources_as_data() {
        use crate::doctor::findings::SourceKind;
        let (facts, m) = fixtures::everything_wrong();
        let f = evaluate(Inputs {
            facts: &facts,
            m: &m,
        });
        let wake = f.iter().find(|x| x.id == "cross-cpu-wakeup").unwrap();
        let rtt = &wake.evidence[1];
        let q = rtt.quantity.as_ref().expect("a round trip is a figure");
        assert_eq!(q.unit, "ns");
        assert!((q.value - 42000.0).abs() < 1.0);
        let [lo, hi] = q.ci95.unwrap();
        assert!(lo <= q.value && q.value <= hi);
        assert_eq!(rtt.source_kind, SourceKind::Measured);
        let ipi = wake
            .evidence
            .iter()
            .find(|e| e.label.starts_with("IPIs"))
            .unwrap();
        assert_eq!(ipi.quantity.as_ref().unwrap().unit, "per_round_trip");
        let hyp = wake
            .evidence
            .iter()
            .find(|e| e.label == "hypervisor")
            .unwrap();
        assert!(hyp.quantity.is_none(), "a name is not a figure");
        assert_eq!(hyp.source_kind, SourceKind::Probe);
        let paradox = f.iter().find(|x| x.id == "load-makes-it-faster").unwrap();
        let published = paradox
            .evidence
            .iter()
            .find(|e| e.source_kind == SourceKind::Published)
            .unwrap();
        assert!(
            published.quantity.is_none(),
            "published figures never pass as measured"
        );
        // The JSON carries the figure as a number.
        let j = serde_json::to_value(rtt).unwrap();
        assert!(j["quantity"]["value"].is_f64());
        assert_eq!(j["source_kind"], "measured");
    }

    #[test]
    fn a_quiet_machine_has_no_findings() {
        let (facts, m) = fixtures::quiet_machine();
        let f = evaluate(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!(f.is_empty(), "{f:#?}");
    }

    #[test]
    fn every_finding_has_evidence_and_remedies() {
        let (facts, m) = fixtures::everything_wrong();
        let f = evaluate(Inputs {
            facts: &facts,
            m: &m,
        });
        let ids: Vec<&str> = f.iter().map(|x| x.id.as_str()).collect();
        for r in all() {
            assert!(
                ids.contains(&r.id()),
                "rule {} silent on everything_wrong: {ids:?}",
                r.id()
            );
        }
        for x in &f {
            assert!(!x.evidence.is_empty(), "{}", x.id);
            assert!(!x.remedies.is_empty(), "{}", x.id);
            assert!(!x.mechanism.is_empty());
            assert!(x.magnitude.ratio.is_none_or(|r| r >= 1.0));
        }
        for w in f.windows(2) {
            assert!(w[0].severity >= w[1].severity, "sorted by severity");
        }
    }
}
