//! Restricted CPU set: fewer usable CPUs than online ones, while the others sit idle.
//!
//! An affinity mask or a cgroup cpuset narrower than the machine is often deliberate
//! (isolation, licensing), so the restriction alone is context. It becomes a finding when the
//! doctor measured capacity going to waste: during its parallel tests, which kept every usable
//! CPU busy, the CPUs it was not allowed to use stayed mostly idle.

use super::{Inputs, Rule};
use crate::doctor::findings::{Confidence, Evidence, Finding, Magnitude, Remedy, Severity};

/// Idle share of the forbidden CPUs above which their capacity counts as wasted.
pub const IDLE_PCT: f64 = 50.0;

pub struct RestrictedCpuSet;

impl Rule for RestrictedCpuSet {
    fn id(&self) -> &'static str {
        "restricted-cpu-set"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let (online, allowed) = (&i.facts.online_cpus, &i.facts.allowed_cpus);
        let Some(idle) = i.m.counters.disallowed_idle_pct else {
            return vec![];
        };
        if allowed.is_empty() || allowed.len() >= online.len() || idle < IDLE_PCT {
            return vec![];
        }
        let forbidden = online.difference(allowed);
        let ratio = online.len() as f64 / allowed.len() as f64;
        vec![Finding {
            id: self.id().into(),
            title: format!(
                "Only {} of {} online CPUs may be used, while the rest sat idle",
                allowed.len(),
                online.len()
            ),
            severity: Severity::of_ratio(ratio),
            magnitude: Magnitude {
                text: format!(
                    "the workload may run on CPUs {allowed} only; during the parallel tests CPUs {forbidden} were {idle:.0}% idle"
                ),
                ratio: Some(ratio),
                worse: Some(allowed.len() as f64),
                better: Some(online.len() as f64),
                unit: "cpus".into(),
            },
            evidence: vec![
                Evidence::new(
                    "online CPUs",
                    online.to_string(),
                    "probe: /sys/devices/system/cpu/online",
                ),
                Evidence::new(
                    "CPUs this process may use",
                    allowed.to_string(),
                    "probe: affinity mask and cgroup cpuset",
                ),
                Evidence::new(
                    format!("idle share of CPUs {forbidden} during the parallel tests"),
                    format!("{idle:.0}%"),
                    "measured: /proc/stat",
                ),
            ],
            mechanism:
                "The affinity mask or the cgroup cpuset confines every thread to the listed \
                CPUs; parallel work queues on them while the other CPUs have nothing to do."
                    .into(),
            remedies: vec![
                Remedy::new(
                    format!(
                        "taskset -a -pc {online} <pid>   (or start it with taskset -c {online})"
                    ),
                    "Lets the process use every online CPU.",
                    "If the restriction was set for isolation (other tenants, real-time CPUs), keep it.",
                ),
                Remedy::new(
                    format!(
                        "systemctl set-property <unit> AllowedCPUs={online}; docker update --cpuset-cpus {online} <container>"
                    ),
                    "Widens the cgroup cpuset for services and containers.",
                    "The same: check why it was narrowed first.",
                ),
            ],
            confidence: Confidence::Medium,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn busy_forbidden_cpus_are_no_finding() {
        let (facts, mut m) = everything_wrong();
        assert_eq!(
            RestrictedCpuSet
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .len(),
            1
        );
        m.counters.disallowed_idle_pct = Some(5.0);
        assert!(
            RestrictedCpuSet
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
    }
}
