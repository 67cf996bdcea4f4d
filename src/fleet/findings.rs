//! Doctor findings across the fleet: each finding id with the hosts whose newest doctor run has
//! it, and the machine facts all of those hosts share ("cross-cpu-wakeup on 212 hosts, all
//! with guest_halt_poll_ns=0"), with how many hosts of the fleet have that value, so a fact
//! every host has is told from one that marks the finding's hosts.

use super::client::{Prometheus, Sample};
use super::queries;
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;

/// A host's findings, `id (severity)`, by (instance, job).
pub type HostFindings = BTreeMap<(String, String), Vec<String>>;

/// A fact value every host with a finding shares.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SharedFact {
    pub fact: String,
    pub value: String,
    /// Hosts of the whole fleet with this value (the finding's hosts included).
    pub hosts_in_fleet: u64,
}

/// One finding id across the fleet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FindingGroup {
    pub id: String,
    pub severity: String,
    pub hosts: u64,
    /// Facts on which every host with the finding agrees, those fewer hosts of the fleet share
    /// first.
    pub shared_facts: Vec<SharedFact>,
}

fn label<'a>(s: &'a Sample, name: &str) -> &'a str {
    s.labels.get(name).map_or("", String::as_str)
}

/// Asks for the findings by id and by the facts of their hosts.
pub fn query(p: &Prometheus, at: f64) -> Result<Vec<FindingGroup>> {
    let counts = p.instant(&queries::finding_counts(), at)?;
    if counts.is_empty() {
        return Ok(Vec::new());
    }
    let by_facts = p.instant(&queries::findings_by_facts(), at)?;
    let fleet = p.instant(&queries::fleet_by_facts(), at)?;
    Ok(group(&counts, &by_facts, &fleet))
}

/// The groups (pure): `counts` by id and severity, `by_facts` by id and every fact, `fleet`
/// by every fact.
pub fn group(counts: &[Sample], by_facts: &[Sample], fleet: &[Sample]) -> Vec<FindingGroup> {
    let mut out: Vec<FindingGroup> = counts
        .iter()
        .map(|c| {
            let id = label(c, "id");
            let rows: Vec<&Sample> = by_facts.iter().filter(|s| label(s, "id") == id).collect();
            let mut shared: Vec<SharedFact> = queries::FACTS
                .iter()
                .filter_map(|fact| {
                    let first = label(rows.first()?, fact);
                    if first.is_empty() {
                        return None;
                    }
                    rows.iter()
                        .all(|r| label(r, fact) == first)
                        .then(|| SharedFact {
                            fact: fact.to_string(),
                            value: first.to_string(),
                            hosts_in_fleet: fleet
                                .iter()
                                .filter(|f| label(f, fact) == first)
                                .map(|f| f.value as u64)
                                .sum(),
                        })
                })
                .collect();
            shared.sort_by_key(|s| s.hosts_in_fleet);
            FindingGroup {
                id: id.to_string(),
                severity: label(c, "severity").to_string(),
                hosts: c.value as u64,
                shared_facts: shared,
            }
        })
        .collect();
    let rank = |s: &str| match s {
        "high" => 0,
        "medium" => 1,
        "low" => 2,
        _ => 3,
    };
    out.sort_by(|a, b| {
        rank(&a.severity)
            .cmp(&rank(&b.severity))
            .then(b.hosts.cmp(&a.hosts))
            .then(a.id.cmp(&b.id))
    });
    out
}

/// The findings of these hosts.
pub fn of_hosts(p: &Prometheus, hosts: &[String], at: f64) -> Result<HostFindings> {
    let mut out = HostFindings::new();
    if hosts.is_empty() {
        return Ok(out);
    }
    for s in p.instant(&queries::findings_of(hosts), at)? {
        let host = (
            label(&s, "instance").to_string(),
            label(&s, "job").to_string(),
        );
        out.entry(host).or_default().push(format!(
            "{} ({})",
            label(&s, "id"),
            label(&s, "severity")
        ));
    }
    for v in out.values_mut() {
        v.sort();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(labels: &[(&str, &str)], v: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: v,
        }
    }

    #[test]
    fn a_finding_names_the_facts_its_hosts_share_rarest_first() {
        let counts = [
            s(&[("id", "kernel-entry-cost"), ("severity", "low")], 1.0),
            s(&[("id", "cross-cpu-wakeup"), ("severity", "high")], 3.0),
        ];
        let by_facts = [
            s(
                &[
                    ("id", "cross-cpu-wakeup"),
                    ("guest_halt_poll_ns", "0"),
                    ("kernel", "6.1"),
                ],
                2.0,
            ),
            s(
                &[
                    ("id", "cross-cpu-wakeup"),
                    ("guest_halt_poll_ns", "0"),
                    ("kernel", "6.6"),
                ],
                1.0,
            ),
            s(
                &[("id", "kernel-entry-cost"), ("guest_halt_poll_ns", "none")],
                1.0,
            ),
        ];
        let fleet = [
            s(&[("guest_halt_poll_ns", "0"), ("kernel", "6.1")], 2.0),
            s(&[("guest_halt_poll_ns", "0"), ("kernel", "6.6")], 1.0),
            s(&[("guest_halt_poll_ns", "200000"), ("kernel", "6.1")], 5.0),
        ];
        let g = group(&counts, &by_facts, &fleet);
        // High severity first.
        assert_eq!(g[0].id, "cross-cpu-wakeup");
        assert_eq!(g[0].hosts, 3);
        // The kernels differ, so only halt polling is shared; 3 of the 8 hosts have it.
        let f = &g[0].shared_facts;
        assert!(f.iter().all(|x| x.fact != "kernel"), "{f:?}");
        let hp = f.iter().find(|x| x.fact == "guest_halt_poll_ns").unwrap();
        assert_eq!((hp.value.as_str(), hp.hosts_in_fleet), ("0", 3));
        assert_eq!(g[1].id, "kernel-entry-cost");
    }
}
