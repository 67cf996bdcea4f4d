//! Latency and throughput disagree.
//!
//! A request/response pair is fastest on one CPU because its two ends never run at the same
//! time: co-locating them removes the cross-CPU wakeup and costs nothing. Many tasks that
//! communicate at once (hackbench, a server under many connections) do run at the same time, and
//! spreading them over more CPUs gives them more CPU, which can outweigh dearer wakeups. When the
//! measurements show both, a single "pin it" or "spread it" advice is wrong for half the
//! workloads; the finding says which workload wants which.

use super::wakeup::primary_method;
use super::{Inputs, Rule, cost_effect, ns_ci, rate_ci, rate_effect};
use crate::doctor::findings::{Confidence, Evidence, Finding, Magnitude, Remedy, Severity};
use crate::output::fmt_ns;
use crate::topology::PlacementClass;

/// Smallest difference, either way, for the two to count as disagreeing.
pub const MIN_RATIO: f64 = 1.1;

pub struct LatencyThroughput;

impl Rule for LatencyThroughput {
    fn id(&self) -> &'static str {
        "latency-throughput-tradeoff"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let Some(method) = primary_method(&i) else {
            return vec![];
        };
        let Some(same) = i.m.wakeup(&method, PlacementClass::SameCpu) else {
            return vec![];
        };
        let Some(cross) =
            i.m.wakeup
                .iter()
                .filter(|w| w.method == method && w.blocking)
                .filter(|w| !matches!(w.class, PlacementClass::SameCpu | PlacementClass::Unpinned))
                .max_by(|a, b| a.rtt_ns.mean.total_cmp(&b.rtt_ns.mean))
        else {
            return vec![];
        };
        // Spreading is any placement that uses more than one CPU: pinned round-robin, or the
        // scheduler's own; the better of the two stands for it.
        let spread =
            i.m.throughput
                .iter()
                .filter(|t| t.placement != "packed" && t.cpus.len() > 1)
                .max_by(|a, b| a.messages_per_s.mean.total_cmp(&b.messages_per_s.mean));
        let (Some(packed), Some(spread)) = (i.m.throughput("packed"), spread) else {
            return vec![];
        };
        let latency = cost_effect(&cross.batch_means_ns, &same.batch_means_ns, MIN_RATIO);
        let throughput = rate_effect(&packed.samples_per_s, &spread.samples_per_s, MIN_RATIO);
        let (Some(lat), Some(thr)) = (latency, throughput) else {
            return vec![];
        };
        let cpu = same
            .cpus
            .as_deref()
            .and_then(|c| c.split(':').next()?.parse().ok())
            .unwrap_or(0);
        let remedies = vec![
            Remedy::new(
                format!("taskset -c {cpu} <server>; taskset -c {cpu} <client>"),
                format!(
                    "For latency-bound pairs (one connection: pgbench -c 1, ab -c 1): co-located, \
                     one round trip takes {} instead of {}.",
                    fmt_ns(lat.better.mean),
                    fmt_ns(lat.worse.mean)
                ),
                "Only while the pair takes turns; with more clients than that, measure again \
                 with `cpulab pair`.",
            ),
            Remedy::new(
                format!(
                    "taskset -c {} <command>   (or no pinning at all)",
                    spread.cpus
                ),
                format!(
                    "For throughput-bound groups (many connections, parallel batch): spread over \
                     CPUs {}, the messaging test moved {:.2}x the messages of one CPU.",
                    spread.cpus, thr.ratio
                ),
                "Each message pays the cross-CPU wakeup; latency per request is higher.",
            ),
        ];
        vec![Finding {
            id: self.id().into(),
            title:
                "Latency and throughput disagree: co-location wins one request, spreading wins many"
                    .into(),
            severity: Severity::Medium,
            magnitude: Magnitude {
                text: format!(
                    "one round trip is {:.1}x faster on one CPU ({} vs {}), but many communicating tasks move {:.2}x more messages spread over CPUs {} than packed on one",
                    lat.ratio,
                    fmt_ns(lat.better.mean),
                    fmt_ns(lat.worse.mean),
                    thr.ratio,
                    spread.cpus
                ),
                ratio: Some(thr.ratio.min(lat.ratio)),
                worse: None,
                better: None,
                unit: "ratio".into(),
            },
            evidence: vec![
                Evidence::new(
                    "round trip on one CPU",
                    ns_ci(&lat.better),
                    format!("measured: pingpong {method} same-cpu"),
                ),
                Evidence::new(
                    format!("round trip across CPUs ({})", cross.class),
                    ns_ci(&lat.worse),
                    format!("measured: pingpong {method} {}", cross.class),
                ),
                Evidence::new(
                    format!("messaging throughput packed on CPU {}", packed.cpus),
                    rate_ci(&thr.worse, "/s"),
                    "measured: doctor messaging test",
                ),
                Evidence::new(
                    format!(
                        "messaging throughput spread over CPUs {} ({})",
                        spread.cpus, spread.placement
                    ),
                    rate_ci(&thr.better, "/s"),
                    "measured: doctor messaging test",
                ),
            ],
            mechanism:
                "A pair that takes turns never needs two CPUs at once, so co-locating it only \
                removes the cross-CPU wakeup. Many tasks communicating at the same time can use \
                every CPU, and the extra CPU time outweighs the dearer wakeups."
                    .into(),
            remedies,
            confidence: Confidence::High,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn disagreement_needs_both_effects() {
        let (facts, mut m) = everything_wrong();
        assert_eq!(
            LatencyThroughput
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .len(),
            1
        );
        m.throughput = vec![
            throughput("packed", "0", 90e3),
            throughput("spread", "0-1", 91e3),
        ];
        assert!(
            LatencyThroughput
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
    }
}
