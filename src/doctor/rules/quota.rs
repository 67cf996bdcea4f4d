//! CPU quota throttling.
//!
//! A cgroup CPU quota (`cpu.cfs_quota_us` / `cpu.max`, docker `--cpus`, a Kubernetes limit) lets
//! the group run for `quota` microseconds per `period`, then stops it until the next period. A
//! quota is only configuration; the effect is the throttled periods counted while the doctor
//! ran, and the time the group spent stopped.

use super::rule::{Inputs, Rule};
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Magnitude, Remedy, Severity};

pub struct QuotaThrottling;

impl Rule for QuotaThrottling {
    fn id(&self) -> &'static str {
        "cpu-quota-throttling"
    }

    // About 100 lines: one finding whose figures (periods, stopped time, quota) feed every part.
    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let c = &i.m.counters;
        let (Some(periods), Some(throttled)) = (c.cfs_periods, c.cfs_throttled_periods) else {
            return vec![];
        };
        // Counts are exact, not sampled: any throttled period is a measured effect, but one or
        // two stray periods during a CPU-heavy test are not worth a finding.
        if throttled == 0 || periods == 0 || (throttled as f64) < 0.01 * periods as f64 {
            return vec![];
        }
        let frac = throttled as f64 / periods as f64;
        // The time stopped is a separate counter (throttled_usec); where it was not read, the
        // slowdown is not known, and nothing stands in for it.
        let stopped = c.cfs_throttled_s;
        let ratio = stopped.map(|st| {
            if c.interval_s > st && c.interval_s > 0.0 {
                c.interval_s / (c.interval_s - st)
            } else {
                1.0
            }
        });
        let quota = i.facts.cpu_quota_cpus;
        let group = i
            .facts
            .cgroup_path
            .clone()
            .unwrap_or_else(|| "<group>".into());
        let mut ev = vec![
            Evidence::new(
                "throttled periods during the run",
                Datum::number(throttled as f64, "count").of(periods as f64),
                "measured: cgroup cpu.stat",
            ),
            Evidence::new(
                "time stopped by the quota",
                match stopped {
                    Some(st) => Datum::number(st, "s").of(c.interval_s),
                    None => Datum::from(
                        "not available, because cpu.stat gave no throttled time during the run",
                    ),
                },
                "measured: cgroup cpu.stat",
            ),
        ];
        if let Some(q) = quota {
            ev.push(Evidence::new(
                "CPU quota",
                Datum::number(q, "cpus"),
                "probe: cgroup cpu quota / period",
            ));
        }
        let percent = quota.map_or(200, |q| (q * 200.0).round() as u32);
        let limit = format!("{percent}%");
        let quota_change = crate::doctor::findings::Change::CpuQuota {
            percent,
            workload: quota_workload(&group, i.facts.cgroup_version == Some(1)),
        };
        vec![Finding {
            id: self.id().into(),
            title: format!(
                "The CPU quota throttled the workload in {:.0}% of periods",
                frac * 100.0
            ),
            severity: if frac >= 0.2 {
                Severity::High
            } else {
                // Without the time stopped, the share of periods is the only size known.
                Severity::of_ratio(ratio.unwrap_or(1.0 / (1.0 - frac)).max(1.0))
            },
            magnitude: magnitude(throttled, periods, stopped, c.interval_s, quota, ratio),
            evidence: ev,
            mechanism:
                "The cgroup may use its quota of CPU time per period (100 ms by default); a \
                burst that uses it up is stopped until the next period, even when CPUs sit idle. \
                Latency-sensitive work sees this as stalls of up to a period."
                    .into(),
            remedies: vec![
                {
                    let r = Remedy::new(
                        format!(
                            "systemctl set-property <unit> CPUQuota={limit}   (or raise cpu.max / cpu.cfs_quota_us of {group})"
                        ),
                        "A larger quota, or none, removes the stalls.",
                        "The group can then take more CPU from its neighbours.",
                    );
                    // The trial lifts the quota altogether: the largest effect a raise can have.
                    let v1 = i.facts.cgroup_version == Some(1);
                    let (file, none) = if v1 {
                        ("cpu.cfs_quota_us", "-1")
                    } else {
                        ("cpu.max", "max")
                    };
                    let r = r.changing(quota_change);
                    match super::remedies::cgroup_try(&group, v1, file, none) {
                        Some(t) => r.with_try(t),
                        None => r,
                    }
                },
                Remedy::new(
                    "docker update --cpus <n> <container>; Kubernetes: raise or remove resources.limits.cpu",
                    "The same for containers; requests (not limits) keep the fair share without stalls.",
                    "Limits are often set on purpose to protect other tenants.",
                ),
            ],
            confidence: Confidence::High,
            uncertain: None,
        }]
    }
}

/// The throttled cgroup as a workload: its path below the hierarchy and the unit it names.
fn quota_workload(dir: &str, v1: bool) -> crate::doctor::findings::Workload {
    let rel = dir.split_once("sys/fs/cgroup").map_or("", |(_, r)| r);
    let rel = if v1 {
        rel.trim_start_matches('/')
            .split_once('/')
            .map_or("", |(_, r)| r)
    } else {
        rel.trim_start_matches('/')
    };
    let rel = rel.trim_matches('/');
    let unit = crate::probe::cgroup::innermost_unit(rel).map(str::to_string);
    crate::doctor::findings::Workload {
        pids: vec![],
        unnamed: unit.is_none().then(|| {
            format!("the throttled cgroup `{dir}` is not a systemd unit: set its quota where it is made (container runtime, pod spec)")
        }),
        units: unit.into_iter().collect(),
        cgroups: (!rel.is_empty() && !rel.contains('<'))
            .then(|| format!("/{rel}"))
            .into_iter()
            .collect(),
    }
}

/// Periods throttled, and the time stopped where it was read.
fn magnitude(
    throttled: u64,
    periods: u64,
    stopped: Option<f64>,
    interval_s: f64,
    quota: Option<f64>,
    ratio: Option<f64>,
) -> Magnitude {
    let quota = quota
        .map(|q| format!(" (quota {q:.2} CPUs)"))
        .unwrap_or_default();
    let stopped_words = match stopped {
        Some(st) => format!("the group was stopped for {st:.2} s of {interval_s:.1} s"),
        None => "the time it was stopped is not available (cpu.stat gave none)".into(),
    };
    Magnitude {
        text: format!(
            "{throttled} of {periods} scheduling periods hit the quota; {stopped_words}{quota}"
        ),
        ratio: ratio.map(|r| r.max(1.0)),
        worse: stopped,
        better: stopped.map(|_| 0.0),
        unit: "s".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn a_quota_alone_is_context_throttling_is_a_finding() {
        let (facts, m) = quiet_machine();
        assert!(facts.cpu_quota_cpus.is_some());
        assert!(
            QuotaThrottling
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
        let (facts, m) = everything_wrong();
        assert_eq!(
            QuotaThrottling.check(Inputs {
                facts: &facts,
                m: &m
            })[0]
                .severity,
            Severity::High
        );
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// The quiet machine with these cgroup counts over a 40 s run and a quota of 2 CPUs.
    fn judged(periods: u64, throttled: u64, stopped_s: f64) -> Vec<Finding> {
        let (facts, mut m) = quiet_machine();
        m.counters.cfs_periods = Some(periods);
        m.counters.cfs_throttled_periods = Some(throttled);
        m.counters.cfs_throttled_s = Some(stopped_s);
        QuotaThrottling.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    /// The time stopped not read: the finding stands on the periods, and says the time is not
    /// available instead of "stopped for 0.00 s".
    #[test]
    fn a_missing_throttled_time_is_not_available_not_zero() {
        let (facts, mut m) = quiet_machine();
        m.counters.cfs_periods = Some(400);
        m.counters.cfs_throttled_periods = Some(40);
        m.counters.cfs_throttled_s = None;
        let f = QuotaThrottling
            .check(Inputs {
                facts: &facts,
                m: &m,
            })
            .remove(0);
        assert!(
            f.magnitude.text.contains("not available"),
            "{}",
            f.magnitude.text
        );
        assert!(!f.magnitude.text.contains("0.00 s"), "{}", f.magnitude.text);
        assert_eq!((f.magnitude.ratio, f.magnitude.worse), (None, None));
        let stopped = f
            .evidence
            .iter()
            .find(|e| e.label == "time stopped by the quota")
            .unwrap();
        assert!(
            stopped.value.starts_with("not available"),
            "{}",
            stopped.value
        );
        // 10% of periods: 1/0.9 = 1.11x at most, low.
        assert_eq!(f.severity, Severity::Low);
    }

    #[test]
    fn throttling_counts_from_1_percent_of_periods() {
        assert!(judged(400, 3, 0.1).is_empty());
        assert_eq!(judged(400, 4, 0.1).len(), 1);
        assert!(judged(400, 0, 0.0).is_empty());
        assert!(judged(0, 1, 0.1).is_empty());
    }

    #[test]
    fn the_finding_states_the_periods_the_time_stopped_and_the_quota() {
        // 40 of 400 periods (10%), stopped 20 s of 40 s: the work took twice as long.
        let f = judged(400, 40, 20.0).remove(0);
        assert_eq!(f.id, "cpu-quota-throttling");
        assert_eq!(
            f.title,
            "The CPU quota throttled the workload in 10% of periods"
        );
        assert_eq!(
            f.magnitude.text,
            "40 of 400 scheduling periods hit the quota; the group was stopped for 20.00 s of \
             40.0 s (quota 2.00 CPUs)"
        );
        assert_eq!(f.magnitude.ratio, Some(2.0));
        assert_eq!(f.severity, Severity::Medium);
        assert!(
            f.remedies[0].command.contains("CPUQuota=400%"),
            "{}",
            f.remedies[0].command
        );
        let q = f.evidence.iter().find(|e| e.label == "CPU quota").unwrap();
        assert_eq!(q.quantity.as_ref().unwrap().value, 2.0);
        // Stopped 30 s of 40: 4x, high; stopped the whole run: no ratio to speak of.
        assert_eq!(judged(400, 40, 30.0)[0].severity, Severity::High);
        assert_eq!(judged(400, 40, 40.0)[0].magnitude.ratio, Some(1.0));
        assert_eq!(judged(400, 40, 0.0)[0].severity, Severity::Low);
        // A fifth of the periods throttled is high whatever the time stopped.
        assert_eq!(judged(400, 80, 0.0)[0].severity, Severity::High);
        assert_eq!(judged(400, 79, 0.0)[0].severity, Severity::Low);
    }

    #[test]
    fn the_quota_remedy_tries_lifting_it_in_the_group_s_own_file() {
        let (mut facts, mut m) = quiet_machine();
        m.counters.cfs_throttled_periods = Some(40);
        facts.cpu_quota_cpus = None;
        facts.cgroup_version = Some(1);
        facts.cgroup_path = Some("/sys/fs/cgroup/cpu,cpuacct/system.slice/app.service".into());
        let f = QuotaThrottling.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!(f[0].remedies[0].command.contains("CPUQuota=200%"));
        assert_eq!(
            f[0].remedies[0].try_command.as_deref(),
            Some("cpulab try cgroup:system.slice/app.service:cpu.cfs_quota_us=-1")
        );
        facts.cgroup_version = Some(2);
        facts.cgroup_path = Some("/sys/fs/cgroup/system.slice/app.service".into());
        let f = QuotaThrottling.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert_eq!(
            f[0].remedies[0].try_command.as_deref(),
            Some("cpulab try cgroup:system.slice/app.service:cpu.max=max")
        );
    }
}
