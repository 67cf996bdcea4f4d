//! Restricted CPU set: fewer usable CPUs than online ones, while the others sit idle.
//!
//! An affinity mask or a cgroup cpuset narrower than the machine is often deliberate
//! (isolation, licensing), so the restriction alone is context. It becomes a finding when the
//! doctor measured capacity going to waste: during its parallel tests, which kept every usable
//! CPU busy, the CPUs it was not allowed to use stayed mostly idle.

use super::rule::{Inputs, Rule};
use crate::cpulist::CpuSet;
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Magnitude, Remedy, Severity};

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
        let narrower = |c: &Option<CpuSet>| {
            c.as_ref()
                .filter(|c| !online.difference(c).is_empty())
                .cloned()
        };
        let by_affinity = narrower(&i.facts.affinity_cpus);
        let by_cpuset = narrower(&i.facts.cpuset_cpus);
        let group = i
            .facts
            .cpuset_file
            .as_deref()
            .and_then(|f| f.rsplit_once('/').map(|(d, _)| d.to_string()))
            .unwrap_or_else(|| "<group>".into());
        let mut evidence =
            restriction_evidence(&i, &group, by_affinity.is_some(), by_cpuset.is_some());
        evidence.push(Evidence::new(
            format!("idle share of CPUs {forbidden} during the parallel tests"),
            Datum::number(idle, "pct"),
            "measured: /proc/stat",
        ));
        let remedies = Remedies {
            taskset: taskset_remedy(&i, online),
            widen_cpuset: widen_cpuset_remedy(&group, online),
        };
        let (who, mechanism, remedies) = cause(&group, &by_affinity, &by_cpuset, remedies);
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
                    "{who} limits the workload to CPUs {allowed}; during the parallel tests CPUs {forbidden} were {idle:.0}% idle"
                ),
                ratio: Some(ratio),
                worse: Some(allowed.len() as f64),
                better: Some(online.len() as f64),
                unit: "cpus".into(),
            },
            evidence,
            mechanism,
            remedies,
            confidence: Confidence::Medium,
            uncertain: None,
        }]
    }
}

/// The online CPUs, and the affinity mask and the cgroup cpuset with whether each restricts.
fn restriction_evidence(
    i: &Inputs<'_>,
    group: &str,
    affinity_restricts: bool,
    cpuset_restricts: bool,
) -> Vec<Evidence> {
    let online = &i.facts.online_cpus;
    let mut evidence = vec![Evidence::new(
        "online CPUs",
        online.to_string(),
        "probe: /sys/devices/system/cpu/online",
    )];
    if let Some(a) = &i.facts.affinity_cpus {
        evidence.push(Evidence::new(
            "affinity mask of this process",
            format!(
                "{a}{}",
                if affinity_restricts {
                    " (restricts)"
                } else {
                    " (every online CPU)"
                }
            ),
            "probe: sched_getaffinity",
        ));
    }
    if let Some(c) = &i.facts.cpuset_cpus {
        evidence.push(Evidence::new(
            format!("cgroup cpuset of {group}"),
            format!(
                "{c}{}",
                if cpuset_restricts {
                    " (restricts)"
                } else {
                    " (every online CPU)"
                }
            ),
            format!(
                "probe: {}",
                i.facts.cpuset_file.as_deref().unwrap_or("cgroup cpuset")
            ),
        ));
    }
    evidence
}

/// Widening the affinity mask of the watched application's pids, or of a `<pid>`.
fn taskset_remedy(i: &Inputs<'_>, online: &CpuSet) -> Remedy {
    // The watched application's own pids when the doctor watched one.
    let (taskset_cmd, try_cmd) = match super::remedies::patient(i.m.app_watch.as_ref()) {
        Some((pids, _)) => {
            let (args, more) = super::remedies::pid_args(&pids, &online.to_string());
            (
                format!(
                    "{}{more}",
                    pids.iter()
                        .take(12)
                        .map(|p| format!("taskset -a -pc {online} {p}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                format!("cpulab try {args}"),
            )
        }
        None => (
            format!("taskset -a -pc {online} <pid>   (or start it with taskset -c {online})"),
            format!("cpulab try pid:<pid>.affinity={online}"),
        ),
    };
    Remedy::new(
        taskset_cmd,
        "Widens the affinity mask so the process may use every online CPU.",
        "If the restriction was set for isolation (other tenants, real-time CPUs), keep it.",
    )
    .with_try(try_cmd)
}

/// Widening the cgroup cpuset, with its `cpulab try` line when the group is known.
fn widen_cpuset_remedy(group: &str, online: &CpuSet) -> Remedy {
    let mut widen_cpuset = Remedy::new(
        format!(
            "systemctl set-property <unit> AllowedCPUs={online}; docker update --cpuset-cpus {online} <container>; or echo {online} > {group}/cpuset.cpus"
        ),
        format!("Widens the cgroup cpuset ({group}) for services and containers."),
        "Check why it was narrowed first; a parent group's cpuset bounds it too.",
    );
    // A v1 cpuset lives under its own controller directory, which the path keeps.
    if let Some(t) = super::remedies::cgroup_try(group, false, "cpuset.cpus", &online.to_string()) {
        widen_cpuset = widen_cpuset.with_try(t);
    }
    widen_cpuset
}

/// The two remedies a restriction may call for.
struct Remedies {
    taskset: Remedy,
    widen_cpuset: Remedy,
}

/// What restricts the CPUs, in words; why that wastes them; and the remedies in the order that
/// works.
fn cause(
    group: &str,
    by_affinity: &Option<CpuSet>,
    by_cpuset: &Option<CpuSet>,
    remedies: Remedies,
) -> (String, String, Vec<Remedy>) {
    // The remedy that works first: a wider affinity mask cannot pass the cpuset, so when
    // the cpuset restricts it comes first.
    let Remedies {
        taskset,
        widen_cpuset,
    } = remedies;
    match (by_affinity, by_cpuset) {
        (_, Some(c)) => (
            if by_affinity.is_some() {
                format!("the cgroup cpuset of {group} ({c}) and the affinity mask")
            } else {
                format!("the cgroup cpuset of {group} ({c})")
            },
            format!(
                "The cgroup cpuset of {group} confines every task of the group to CPUs {c}; \
                 parallel work queues on them while the other CPUs have nothing to do. Widening \
                 the affinity mask alone does nothing: the kernel intersects it with the cpuset."
            ),
            if by_affinity.is_some() {
                vec![widen_cpuset, taskset]
            } else {
                vec![widen_cpuset]
            },
        ),
        (Some(a), None) => (
            format!("the affinity mask ({a})"),
            format!(
                "The affinity mask (set by taskset, numactl, a service manager's CPUAffinity \
                 or the parent process, and inherited) confines every thread to CPUs {a}; the \
                 cgroup cpuset allows them all. Parallel work queues on the allowed CPUs while \
                 the others have nothing to do."
            ),
            vec![taskset],
        ),
        (None, None) => (
            "the affinity mask or the cgroup cpuset".to_string(),
            "The affinity mask or the cgroup cpuset confines every thread to the listed \
             CPUs; parallel work queues on them while the other CPUs have nothing to do."
                .to_string(),
            vec![widen_cpuset, taskset],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::cpulist::CpuSet;

    fn check(facts: &crate::doctor::measurements::Facts) -> Finding {
        let (_, m) = everything_wrong();
        RestrictedCpuSet
            .check(Inputs { facts, m: &m })
            .pop()
            .unwrap()
    }

    #[test]
    fn names_the_restriction_and_puts_the_remedy_that_works_first() {
        let (mut facts, _) = everything_wrong();
        let cpus = |t: &str| CpuSet::parse_list(t, false).unwrap();
        // Only the affinity mask restricts: taskset, and nothing about cgroups.
        facts.affinity_cpus = Some(cpus("0-1"));
        facts.cpuset_cpus = Some(cpus("0-3"));
        facts.cpuset_file =
            Some("/sys/fs/cgroup/system.slice/db.service/cpuset.cpus.effective".into());
        let f = check(&facts);
        assert!(
            f.magnitude.text.starts_with("the affinity mask (0-1)"),
            "{}",
            f.magnitude.text
        );
        assert_eq!(f.remedies.len(), 1);
        assert!(f.remedies[0].command.starts_with("taskset"));
        // Only the cpuset restricts: the cgroup named, its remedy first and alone.
        facts.affinity_cpus = Some(cpus("0-3"));
        facts.cpuset_cpus = Some(cpus("0-1"));
        let f = check(&facts);
        assert!(
            f.magnitude
                .text
                .contains("/sys/fs/cgroup/system.slice/db.service"),
            "{}",
            f.magnitude.text
        );
        assert!(!f.magnitude.text.contains("affinity"));
        assert!(f.remedies[0].command.contains("AllowedCPUs=0-3"));
        assert!(f.remedies.iter().all(|r| !r.command.starts_with("taskset")));
        // Both: the cpuset first, since a wider mask cannot pass it.
        facts.affinity_cpus = Some(cpus("0"));
        let f = check(&facts);
        assert!(f.remedies[0].command.contains("AllowedCPUs"));
        assert!(f.remedies[1].command.starts_with("taskset"));
    }

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

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// The fixture (4 online CPUs, 2 allowed, no mask or cpuset known) with these CPUs allowed
    /// and this idle share of the others.
    fn judged(allowed: &str, idle: f64) -> Vec<Finding> {
        let (mut facts, mut m) = everything_wrong();
        facts.allowed_cpus = CpuSet::parse_list(allowed, true).unwrap();
        m.counters.disallowed_idle_pct = Some(idle);
        RestrictedCpuSet.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    #[test]
    fn forbidden_cpus_count_as_wasted_from_half_idle() {
        assert_eq!(judged("0-1", 50.0).len(), 1);
        assert!(judged("0-1", 49.9).is_empty());
        // Every online CPU allowed, or none known: nothing to widen.
        assert!(judged("0-3", 95.0).is_empty());
        assert!(judged("", 95.0).is_empty());
    }

    #[test]
    fn the_finding_states_the_share_of_the_machine_and_the_widening() {
        let f = judged("0-1", 95.0).remove(0);
        assert_eq!(f.id, "restricted-cpu-set");
        assert_eq!(
            f.title,
            "Only 2 of 4 online CPUs may be used, while the rest sat idle"
        );
        assert_eq!(
            f.magnitude.text,
            "the affinity mask or the cgroup cpuset limits the workload to CPUs 0-1; during the \
             parallel tests CPUs 2-3 were 95% idle"
        );
        assert_eq!(f.magnitude.ratio, Some(2.0));
        assert_eq!(f.magnitude.worse, Some(2.0));
        assert_eq!(f.magnitude.better, Some(4.0));
        assert_eq!(f.severity, Severity::Medium);
        // Neither restriction known: both remedies, the cpuset's first; the watched pid named.
        assert!(f.remedies[0].command.contains("AllowedCPUs=0-3"));
        assert_eq!(f.remedies[0].try_command, None, "no group known");
        assert_eq!(f.remedies[1].command, "taskset -a -pc 0-3 812");
        assert_eq!(
            f.remedies[1].try_command.as_deref(),
            Some("cpulab try pid:812.affinity=0-3")
        );
        // One CPU of four: 4x, high.
        assert_eq!(judged("0", 95.0)[0].severity, Severity::High);
        assert_eq!(judged("0", 95.0)[0].magnitude.ratio, Some(4.0));
    }

    #[test]
    fn a_known_cpuset_file_names_its_group_and_tries_widening_it() {
        let (mut facts, _) = everything_wrong();
        let cpus = |t: &str| CpuSet::parse_list(t, false).unwrap();
        facts.cpuset_cpus = Some(cpus("0-1"));
        facts.cpuset_file =
            Some("/sys/fs/cgroup/system.slice/db.service/cpuset.cpus.effective".into());
        let f = check(&facts);
        let c = f
            .evidence
            .iter()
            .find(|e| e.label == "cgroup cpuset of /sys/fs/cgroup/system.slice/db.service")
            .unwrap();
        assert_eq!(c.value, "0-1 (restricts)");
        assert_eq!(
            f.remedies[0].try_command.as_deref(),
            Some("cpulab try cgroup:system.slice/db.service:cpuset.cpus=0-3")
        );
        assert_eq!(f.remedies.len(), 1);
    }
}
