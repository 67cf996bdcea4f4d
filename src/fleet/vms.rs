//! What guests wait: the hosts, and the VMs on them, ranked by their vCPUs' run-queue wait per
//! vCPU (what a guest sees as steal), from the exporters of KVM hosts (`cpulab_vm_*`,
//! docs/exporter.md) through the recording rules `vm:` and `instance:`
//! `cpulab_vm_vcpu_wait_seconds_per_vcpu:rate5m`. [`query`] asks Prometheus (bounded by its
//! `topk`s); [`build_hosts`] and [`build_vms`] are pure.

use super::Reading;
use super::client::{Prometheus, Sample};
use super::queries::{self, Window};
use anyhow::Result;
use serde::Serialize;
use std::collections::BTreeMap;

/// A host (`instance`, `job`).
pub type Host = (String, String);
/// A VM of a host (`instance`, `job`, `vm`).
pub type VmKey = (String, String, String);

/// A host ranked by what its guests wait.
#[derive(Clone, Debug, Serialize)]
pub struct HostWait {
    pub rank: usize,
    pub instance: String,
    pub job: String,
    /// Its VMs' vCPU run-queue wait over their vCPUs measured: seconds per second per vCPU.
    pub wait_per_vcpu: Reading,
    /// vCPUs measured on it.
    pub vcpus: Reading,
}

/// A VM ranked by what its guest waits.
#[derive(Clone, Debug, Serialize)]
pub struct VmWait {
    pub rank: usize,
    pub instance: String,
    pub job: String,
    pub vm: String,
    /// Its vCPU threads' run-queue wait per vCPU measured (its guest's steal), seconds per
    /// second.
    pub wait_per_vcpu: Reading,
    /// Their run time per vCPU measured: how busy its vCPUs were.
    pub run_per_vcpu: Reading,
    pub vcpus: Reading,
}

/// The section of the report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VmWaits {
    /// Why there is no ranking at all (the rules not loaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_available: Option<String>,
    pub hosts: Vec<HostWait>,
    pub vms: Vec<VmWait>,
}

fn label(s: &Sample, name: &str) -> String {
    s.labels.get(name).cloned().unwrap_or_default()
}

fn host(s: &Sample) -> Host {
    (label(s, "instance"), label(s, "job"))
}

fn vm(s: &Sample) -> VmKey {
    (label(s, "instance"), label(s, "job"), label(s, "vm"))
}

/// What [`build_hosts`] reads.
#[derive(Debug, Default)]
pub struct HostInputs {
    pub wait: Vec<Sample>,
    pub wait_sd: BTreeMap<Host, f64>,
    pub wait_n: BTreeMap<Host, f64>,
    pub vcpus: BTreeMap<Host, f64>,
}

/// What [`build_vms`] reads.
#[derive(Debug, Default)]
pub struct VmInputs {
    pub wait: Vec<Sample>,
    pub wait_sd: BTreeMap<VmKey, f64>,
    pub wait_n: BTreeMap<VmKey, f64>,
    pub run: BTreeMap<VmKey, f64>,
    pub vcpus: BTreeMap<VmKey, f64>,
}

fn ranked<K: Ord + Clone>(samples: &[Sample], key: impl Fn(&Sample) -> K) -> Vec<(K, f64)> {
    let mut v: Vec<(K, f64)> = samples
        .iter()
        .filter(|s| s.value.is_finite())
        .map(|s| (key(s), s.value))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

const NO_VCPUS: &str = "no vCPU measured in the window";

/// Hosts, most waited first (pure).
pub fn build_hosts(i: &HostInputs) -> Vec<HostWait> {
    ranked(&i.wait, host)
        .into_iter()
        .enumerate()
        .map(|(n, (k, mean))| HostWait {
            rank: n + 1,
            wait_per_vcpu: Reading {
                mean: Some(mean),
                stddev: i.wait_sd.get(&k).copied(),
                points: i.wait_n.get(&k).map(|v| *v as u64),
                not_available: None,
            },
            vcpus: Reading::of(i.vcpus.get(&k).copied(), NO_VCPUS),
            instance: k.0,
            job: k.1,
        })
        .collect()
}

/// VMs, most waited first (pure).
pub fn build_vms(i: &VmInputs) -> Vec<VmWait> {
    ranked(&i.wait, vm)
        .into_iter()
        .enumerate()
        .map(|(n, (k, mean))| VmWait {
            rank: n + 1,
            wait_per_vcpu: Reading {
                mean: Some(mean),
                stddev: i.wait_sd.get(&k).copied(),
                points: i.wait_n.get(&k).map(|v| *v as u64),
                not_available: None,
            },
            run_per_vcpu: Reading::of(i.run.get(&k).copied(), NO_VCPUS),
            vcpus: Reading::of(i.vcpus.get(&k).copied(), NO_VCPUS),
            instance: k.0,
            job: k.1,
            vm: k.2,
        })
        .collect()
}

fn instances(samples: &[Sample]) -> Vec<String> {
    let set: std::collections::BTreeSet<String> =
        samples.iter().map(|s| label(s, "instance")).collect();
    set.into_iter().collect()
}

/// Asks for the hosts and VMs whose guests wait most, and their figures; `missing` is a VM
/// rule the server has not loaded (then nothing is asked).
pub fn query(
    p: &Prometheus,
    w: Window,
    limit: usize,
    at: f64,
    missing: Option<&str>,
) -> Result<VmWaits> {
    if let Some(rule) = missing {
        return Ok(VmWaits {
            not_available: Some(format!(
                "the recording rule {rule} is not loaded: the rules file predates the VM \
                 figures; load this cpulab's cpulab.rules.yml (contrib/prometheus/)"
            )),
            ..VmWaits::default()
        });
    }
    let hosts = p.instant(&queries::top_of(w, queries::HOST_VM_WAIT, limit), at)?;
    let host_inputs = if hosts.is_empty() {
        HostInputs::default()
    } else {
        let on = instances(&hosts);
        let get = |f: &str, rule: &str| -> Result<BTreeMap<Host, f64>> {
            let q = queries::of_hosts(f, rule, w, &on);
            Ok(p.instant(&q, at)?
                .iter()
                .map(|s| (host(s), s.value))
                .collect())
        };
        HostInputs {
            wait_sd: get("stddev_over_time", queries::HOST_VM_WAIT)?,
            wait_n: get("count_over_time", queries::HOST_VM_WAIT)?,
            vcpus: get("avg_over_time", queries::HOST_VCPUS)?,
            wait: hosts,
        }
    };
    let vms = p.instant(&queries::top_of(w, queries::VM_WAIT, limit), at)?;
    let vm_inputs = if vms.is_empty() {
        VmInputs::default()
    } else {
        let on = instances(&vms);
        let get = |f: &str, rule: &str| -> Result<BTreeMap<VmKey, f64>> {
            let q = queries::of_hosts(f, rule, w, &on);
            Ok(p.instant(&q, at)?
                .iter()
                .map(|s| (vm(s), s.value))
                .collect())
        };
        VmInputs {
            wait_sd: get("stddev_over_time", queries::VM_WAIT)?,
            wait_n: get("count_over_time", queries::VM_WAIT)?,
            run: get("avg_over_time", queries::VM_RUN)?,
            vcpus: get("avg_over_time", queries::VM_VCPUS)?,
            wait: vms,
        }
    };
    Ok(VmWaits {
        not_available: None,
        hosts: build_hosts(&host_inputs),
        vms: build_vms(&vm_inputs),
    })
}

/// A share of a vCPU's time as people read it, with its spread: `12.5% ±0.4%`, or `n/a`.
pub fn shown_as_share(r: &Reading) -> String {
    match (r.mean, r.stddev) {
        (Some(m), Some(sd)) => format!("{:.1}% ±{:.1}%", m * 100.0, sd * 100.0),
        (Some(m), None) => format!("{:.1}%", m * 100.0),
        _ => "n/a".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(labels: &[(&str, &str)], v: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: v,
        }
    }

    #[test]
    fn most_waited_first_and_a_figure_not_held_is_not_zero() {
        let h = |i: &str, v| sample(&[("instance", i), ("job", "cpulab")], v);
        let hosts = build_hosts(&HostInputs {
            wait: vec![h("a", 0.01), h("b", 0.2), h("c", 0.0), h("d", f64::NAN)],
            wait_sd: [(("b".into(), "cpulab".into()), 0.05)].into(),
            vcpus: [(("b".into(), "cpulab".into()), 6.0)].into(),
            ..HostInputs::default()
        });
        let order: Vec<&str> = hosts.iter().map(|x| x.instance.as_str()).collect();
        // A NaN (no vCPU measured) is not ranked; a wait of 0 is measured, and last.
        assert_eq!(order, ["b", "a", "c"]);
        assert_eq!(hosts[0].wait_per_vcpu.stddev, Some(0.05));
        assert_eq!(hosts[0].vcpus.mean, Some(6.0));
        assert_eq!(hosts[1].vcpus.mean, None);
        assert_eq!(hosts[1].vcpus.not_available.as_deref(), Some(NO_VCPUS));
        let v = |i: &str, vm: &str, x| sample(&[("instance", i), ("job", "j"), ("vm", vm)], x);
        let vms = build_vms(&VmInputs {
            wait: vec![v("a", "db", 0.15), v("a", "web", 0.05), v("b", "db", 0.3)],
            run: [(("a".into(), "j".into(), "db".into()), 0.5)].into(),
            ..VmInputs::default()
        });
        let order: Vec<(&str, &str)> = vms
            .iter()
            .map(|x| (x.instance.as_str(), x.vm.as_str()))
            .collect();
        assert_eq!(order, [("b", "db"), ("a", "db"), ("a", "web")]);
        assert_eq!(vms[1].run_per_vcpu.mean, Some(0.5));
        assert_eq!(vms.iter().map(|x| x.rank).collect::<Vec<_>>(), [1, 2, 3]);
    }

    #[test]
    fn a_share_reads_as_a_percentage_with_its_spread() {
        let r = Reading {
            mean: Some(0.125),
            stddev: Some(0.004),
            ..Reading::default()
        };
        assert_eq!(shown_as_share(&r), "12.5% ±0.4%");
        assert_eq!(shown_as_share(&Reading::missing("x")), "n/a");
    }
}
