//! Noisy neighbour: CPU time taken by someone else.
//!
//! Inside a VM, another guest on the same host shows up as *steal*: time the vCPU was ready but
//! the host ran something else. Outside one, or inside it, local programs take their share by
//! the fair-share model: with equal weights each runnable task gets min(1, CPUs / tasks) of a
//! CPU (field notes C: measured 49.9% against a model of 50%). The effect the doctor measures is
//! the share check: CPU-bound workers, one per allowed CPU, each against one worker alone. A share
//! below the model with no local load to explain it is someone outside; steal says who.

use super::{Inputs, Rule, plain_ci};
use crate::doctor::findings::{Confidence, Evidence, Finding, Magnitude, Remedy, Severity};
use crate::stats::MeanCi;

/// Steal percent whose interval must lie above this to count on its own.
pub const STEAL_PCT: f64 = 2.0;
/// A share this far under the model (and beyond noise) counts as a shortfall.
pub const SHORTFALL: f64 = 0.9;

pub struct NoisyNeighbour;

impl Rule for NoisyNeighbour {
    fn id(&self) -> &'static str {
        "noisy-neighbour"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let steal = MeanCi::of(&i.m.counters.steal_samples_pct);
        let steal_sig = steal
            .as_ref()
            .is_some_and(|s| s.n >= 2 && s.ci95_low > STEAL_PCT);
        let share = i.m.share.as_ref();
        let shortfall = share.filter(|s| {
            s.share.n >= 2
                && s.share.ci95_high < s.model_share
                && s.share.mean < SHORTFALL * s.model_share
        });
        let local: Vec<(u32, f64)> =
            i.m.counters
                .other_busy_pct
                .iter()
                .filter(|(_, b)| **b > 10.0)
                .map(|(c, b)| (*c, *b))
                .collect();
        if !steal_sig && shortfall.is_none() {
            return vec![];
        }
        let mut ev = Vec::new();
        if let Some(s) = share {
            ev.push(Evidence::new(
                format!(
                    "share of a CPU each of {} CPU-bound workers got, against one alone",
                    s.workers
                ),
                plain_ci(&s.share, 2),
                "measured: doctor share check",
            ));
            ev.push(Evidence::new(
                "fair-share model for the load seen",
                format!(
                    "{:.2} (other load: {:.2} CPUs)",
                    s.model_share, s.other_load_cpus
                ),
                "model: min(1, CPUs / (workers + other busy tasks))",
            ));
        }
        if let Some(s) = &steal {
            ev.push(Evidence::new(
                "steal time during the run",
                format!("{} %", plain_ci(s, 1)),
                "measured: /proc/stat steal",
            ));
        }
        for (c, b) in &local {
            ev.push(Evidence::new(
                format!("other programs on cpu{c} before the run"),
                format!("{b:.0}% busy"),
                "measured: /proc/stat",
            ));
        }
        let steal_mean = steal.as_ref().map_or(0.0, |s| s.mean);
        let outside = steal_sig;
        let (ratio, text) = match shortfall {
            Some(s) => (
                s.model_share / s.share.mean,
                format!(
                    "CPU-bound workers get {:.0}% of a CPU each where the fair-share model predicts {:.0}%{}",
                    s.share.mean * 100.0,
                    s.model_share * 100.0,
                    if outside {
                        format!("; {steal_mean:.0}% of the time was stolen by the host")
                    } else {
                        String::new()
                    }
                ),
            ),
            None => (
                100.0 / (100.0 - steal_mean).max(1.0),
                format!(
                    "the hypervisor ran something else for {steal_mean:.0}% of the time the vCPUs were ready"
                ),
            ),
        };
        let mut remedies = Vec::new();
        if outside {
            remedies.push(Remedy::new(
                "ask the host or provider for dedicated (pinned, not overcommitted) vCPUs, or move the VM",
                "Steal falls to zero when no other guest shares the physical cores.",
                "Dedicated cores cost more; a busy neighbour can come back after a migration.",
            ));
            remedies.push(Remedy::new(
                "cpulab share --threads N --burners 0   (at different times of day)",
                "Shows whether the shortfall follows the neighbour's schedule.",
                "Measures only; changes nothing.",
            ));
        }
        if !local.is_empty() || !outside {
            remedies.push(Remedy::new(
                "top -o %CPU   (or pidstat 1) to find the other programs; then renice +10 -p <pid>, or systemctl set-property <unit> CPUWeight=20",
                "Lowers the other programs' weight, so the workload's share rises toward a whole CPU.",
                "The other programs slow down in turn.",
            ));
        }
        vec![Finding {
            id: self.id().into(),
            title: if outside {
                format!("A noisy neighbour takes CPU time: {steal_mean:.0}% steal")
            } else {
                "Other work takes CPU time from the workload".into()
            },
            severity: Severity::of_ratio(ratio),
            magnitude: Magnitude {
                text,
                ratio: Some(ratio.max(1.0)),
                worse: shortfall.map(|s| s.share.mean),
                better: shortfall.map(|s| s.model_share),
                unit: "share".into(),
            },
            evidence: ev,
            mechanism: if outside {
                "Each vCPU is a thread on the host; when the host's cores are shared with other \
                 guests, a ready vCPU waits its turn and the guest sees that wait as steal time. \
                 With equal weights each running vCPU gets an equal slice, so the share falls as \
                 the neighbours get busier."
                    .into()
            } else {
                "The scheduler divides a CPU among the runnable tasks by weight; with equal \
                 weights each gets an equal slice, so other busy programs on the same CPUs take \
                 their share."
                    .into()
            },
            remedies,
            confidence: if outside && shortfall.is_some() {
                Confidence::High
            } else if outside || !local.is_empty() {
                Confidence::Medium
            } else {
                Confidence::Low
            },
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn steal_and_a_shortfall_name_the_neighbour() {
        let (facts, m) = everything_wrong();
        let f = NoisyNeighbour.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(f[0].confidence, Confidence::High);
        assert!(f[0].title.contains("steal"));
    }

    #[test]
    fn a_share_at_the_model_is_no_finding() {
        let (facts, mut m) = quiet_machine();
        // Local burners halve the share, exactly as the model predicts: nothing unexplained.
        m.share = Some(share(0.5, 0.5, 0.0, 2.0));
        assert!(
            NoisyNeighbour
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
    }
}
