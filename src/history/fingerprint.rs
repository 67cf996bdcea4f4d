//! The fingerprint a run is stored with: a host key, a hardware key and the configuration facts.
//!
//! The history's question is "what changed between the fast runs and the slow ones", so every
//! fact is a name and a display string (`cpufreq.governor` = `performance`), compared for
//! equality and never parsed again. The names are the ones `cpulab try` uses where try can
//! change the setting (`haltpoll.guest_halt_poll_ns`, `kernel.sched_autogroup_enabled`,
//! `smt.control`), so a changed fact turns into the `cpulab try` line that tests it without a
//! second table. The hardware key is what must be equal for two runs to be compared at all:
//! the CPU model, the topology and the virtualisation, not the kernel or any setting.

use crate::probe::Probe;
use serde_json::Value;
use std::collections::BTreeMap;

/// Name -> value, in name order.
pub type Facts = BTreeMap<String, String>;

/// What the history keys a run by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// The host name the run was taken on.
    pub host_key: String,
    /// CPU model, topology and virtualisation: runs are compared only within one.
    pub hardware_key: String,
    pub facts: Facts,
}

/// The fingerprint of a probed machine; `conditions_kernel` etc. come from the probe itself.
pub fn of_probe(p: &Probe) -> Fingerprint {
    let mut f = Facts::new();
    kernel_facts(p, &mut f);
    idle_facts(p, &mut f);
    freq_facts(p, &mut f);
    placement_facts(p, &mut f);
    Fingerprint {
        host_key: p.conditions.hostname.clone(),
        hardware_key: hardware_key(p),
        facts: f,
    }
}

/// Records a fact that was read and is not empty; one that was not is left out, never blank.
fn put(f: &mut Facts, k: &str, v: Option<String>) {
    if let Some(v) = v.filter(|v| !v.is_empty()) {
        f.insert(k.to_string(), v);
    }
}

/// The kernel, its command line and its mitigations.
fn kernel_facts(p: &Probe, f: &mut Facts) {
    put(f, "kernel", Some(p.kernel().to_string()));
    put(f, "cmdline", p.cmdline.value().cloned());
    put(
        f,
        "mitigations",
        // No `mitigations=` on the command line: the kernel's default, `auto`.
        Some(p.mitigations.mode().unwrap_or("auto").to_string()),
    );
    if let Some(v) = p.mitigations.vulnerabilities.value() {
        for (name, vuln) in v {
            put(f, &format!("vulnerability.{name}"), Some(vuln.text.clone()));
        }
    }
}

/// Idle: the cpuidle driver and governor, halt polling in the guest and on the host, the
/// states turned off.
fn idle_facts(p: &Probe, f: &mut Facts) {
    put(f, "cpuidle.driver", p.idle.driver.value().cloned());
    put(f, "cpuidle.governor", p.idle.governor.value().cloned());
    if let Some(h) = p.idle.haltpoll.value() {
        for (k, v) in h {
            put(f, &format!("haltpoll.{k}"), Some(v.clone()));
        }
    }
    put(
        f,
        "kvm.halt_poll_ns",
        p.idle.kvm_host_halt_poll_ns().map(|v| v.to_string()),
    );
    if let Some(states) = p.idle.states.value() {
        let off: Vec<&str> = states
            .iter()
            .filter(|s| s.disabled)
            .map(|s| s.name.as_str())
            .collect();
        put(
            f,
            "cpuidle.disabled_states",
            Some(if off.is_empty() {
                "none".into()
            } else {
                off.join(",")
            }),
        );
    }
}

/// Frequency: the cpufreq drivers, governors and preferences, boost, the p-state drivers.
fn freq_facts(p: &Probe, f: &mut Facts) {
    if let Some(policies) = p.freq.policies.value() {
        let join = |of: &dyn Fn(&crate::probe::freq::Policy) -> Option<String>| {
            let mut v: Vec<String> = policies.iter().filter_map(of).collect();
            v.sort();
            v.dedup();
            (!v.is_empty()).then(|| v.join(","))
        };
        put(f, "cpufreq.driver", join(&|x| x.driver.clone()));
        put(f, "cpufreq.governor", join(&|x| x.governor.clone()));
        put(
            f,
            "cpufreq.epp",
            join(&|x| x.energy_performance_preference.clone()),
        );
    }
    put(
        f,
        "cpufreq.boost",
        p.freq.boost.value().map(|b| b.to_string()),
    );
    put(f, "intel_pstate", p.freq.intel_pstate.value().cloned());
    put(f, "amd_pstate", p.freq.amd_pstate.value().cloned());
}

/// What decides where tasks run: SMT, tuned, the scheduler's knobs, the quota and the CPUs
/// allowed, the hypervisor, and the cpulab build that measured.
fn placement_facts(p: &Probe, f: &mut Facts) {
    put(f, "smt.control", p.topology.smt_control.value().cloned());
    put(f, "tuned.profile", p.sched.tuned_profile.value().cloned());
    if let Some(t) = p.sched.tunables.value() {
        for (k, v) in t {
            put(f, &format!("kernel.{k}"), v.value().cloned());
        }
    }
    if let Some(t) = p.sched.debug_tunables.value() {
        for (k, v) in t {
            put(f, &format!("sched.{k}"), Some(v.clone()));
        }
    }
    put(
        f,
        "cgroup.cpu_quota_cpus",
        Some(
            p.cpu_quota_cpus()
                .map_or("unlimited".into(), |q| format!("{q}")),
        ),
    );
    put(f, "cpus.allowed", Some(p.topology.allowed.to_string()));
    put(
        f,
        "hypervisor",
        Some(p.virt.hypervisor.clone().unwrap_or("none".into())),
    );
    // The release only: the revision is a fact of its own, so one build change is one fact.
    put(
        f,
        "cpulab.version",
        Some(p.conditions.cpulab_version.clone()),
    );
    // The build: a run of another revision is a changed fact like a kernel, so a regression
    // that came with a cpulab change is named as one.
    put(f, "cpulab.revision", p.conditions.cpulab_revision.clone());
}

/// The hardware a run's figures are comparable on: model, CPUs, packages, cores, threads, and
/// the hypervisor.
fn hardware_key(p: &Probe) -> String {
    let t = &p.topology;
    format!(
        "{} | {} CPUs, {} package(s), {} core(s), {} thread(s)/core | {}",
        p.cpu_model.value().map_or("unknown CPU", |s| s.as_str()),
        t.online.len(),
        t.packages,
        t.cores,
        t.threads_per_core,
        p.virt.hypervisor.as_deref().unwrap_or("bare metal")
    )
}

/// The fingerprint of a result document: its own probe when it carries one (doctor, probe);
/// otherwise what its conditions say (kernel, cpulab version, host), keyed by host, since a
/// document without a probe does not say what hardware it ran on.
pub fn of_document(doc: &Value) -> Option<Fingerprint> {
    let probe = match doc.get("kind").and_then(Value::as_str) {
        Some("probe") => Some(doc.clone()),
        _ => doc.get("probe").cloned(),
    };
    if let Some(p) = probe.and_then(|p| serde_json::from_value::<Probe>(p).ok()) {
        let mut fp = of_probe(&p);
        // The document's own cpulab version and revision, not this binary's.
        if let Some(v) = doc["conditions"]["cpulab_version"].as_str() {
            fp.facts.insert("cpulab.version".into(), v.to_string());
        }
        if let Some(r) = doc["conditions"]["cpulab_revision"].as_str() {
            fp.facts.insert("cpulab.revision".into(), r.to_string());
        }
        return Some(fp);
    }
    let c = doc.get("conditions")?;
    let host = c.get("hostname")?.as_str()?.to_string();
    let mut facts = Facts::new();
    for (k, key) in [
        ("kernel", "kernel"),
        ("cpulab.version", "cpulab_version"),
        ("cpulab.revision", "cpulab_revision"),
    ] {
        if let Some(v) = c.get(key).and_then(Value::as_str) {
            facts.insert(k.into(), v.into());
        }
    }
    Some(Fingerprint {
        hardware_key: format!("host {host} (no probe in the document)"),
        host_key: host,
        facts,
    })
}

/// A fact that changed between two runs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Changed {
    pub fact: String,
    /// `None`: the fact was not recorded on that side.
    pub before: Option<String>,
    pub after: Option<String>,
}

impl std::fmt::Display for Changed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not recorded)".into());
        write!(
            f,
            "{} {} -> {}",
            self.fact,
            show(&self.before),
            show(&self.after)
        )
    }
}

/// The facts that differ between `a` and `b`. A fact recorded on one side only is a change
/// too, except `cpulab.version`, which is listed like any other.
pub fn changed(a: &Facts, b: &Facts) -> Vec<Changed> {
    let names: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| Changed {
            fact: k.clone(),
            before: a.get(k).cloned(),
            after: b.get(k).cloned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_machine_has_its_facts_and_keys() {
        let m = crate::machine::Machine::detect(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/intel-baremetal"
        )))
        .unwrap();
        let fp = of_probe(&crate::probe::probe(&m));
        assert_eq!(fp.facts["cpufreq.governor"], "powersave");
        assert!(fp.facts.contains_key("kernel"));
        assert!(
            fp.hardware_key.contains("bare metal"),
            "{}",
            fp.hardware_key
        );
        assert!(!fp.facts.contains_key("haltpoll.guest_halt_poll_ns"));
    }

    /// The build is a fact: two documents of different revisions name it as changed, and a
    /// document written before revisions were recorded has none (not this binary's).
    #[test]
    fn the_cpulab_revision_of_a_document_is_a_fact() {
        let doc = |rev: Option<&str>| {
            let mut c = serde_json::json!({"hostname": "h", "kernel": "6.1.0",
                "cpulab_version": "0.1.0"});
            if let Some(r) = rev {
                c["cpulab_revision"] = r.into();
            }
            serde_json::json!({"kind": "pingpong", "conditions": c})
        };
        let a = of_document(&doc(Some("1111111"))).unwrap();
        let b = of_document(&doc(Some("2222222-dirty"))).unwrap();
        assert_eq!(a.facts["cpulab.revision"], "1111111");
        let c = changed(&a.facts, &b.facts);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].to_string(), "cpulab.revision 1111111 -> 2222222-dirty");
        assert!(
            !of_document(&doc(None))
                .unwrap()
                .facts
                .contains_key("cpulab.revision")
        );

        // A document with its own probe: the revision its conditions name, not this build's.
        let mut fixture: Value = serde_json::from_str(include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/results/doctor-quick.json"
        )))
        .unwrap();
        fixture["conditions"]["cpulab_revision"] = "3333333".into();
        fixture["probe"]["conditions"]["cpulab_revision"] = "3333333".into();
        let fp = of_document(&fixture).unwrap();
        assert_eq!(fp.facts["cpulab.revision"], "3333333");
    }

    #[test]
    fn changes_list_both_sides() {
        let a: Facts = [("kernel", "2.6.32"), ("smt.control", "on")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let b: Facts = [("kernel", "3.10"), ("tuned.profile", "balanced")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let c = changed(&a, &b);
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].to_string(), "kernel 2.6.32 -> 3.10");
    }
}
