//! The binary on the machines of the field notes' environments, through `--root`: an Azure
//! Hyper-V guest, a Xen HVM domU, a vSphere guest and a bare-metal Xeon. Each fixture tree was
//! written by `tests/fixtures/generate.py` from public facts about that machine; this checks that
//! `cpulab probe` (JSON and text) reports those facts, end to end through the root-path readers.
//!
//! `doctor` measures the live machine, so on a fixture root it runs with `--replay`: the
//! measurements of a saved doctor result (kvm-emr-16's, a real 16-vCPU KVM guest) judged
//! against each fixture's facts, end to end through the binary: the hypervisor named, the idle
//! and halt-polling facts, and the remedies worded for that environment.

mod common;

use common::{cpulab_on, fixture, json_of};
use serde_json::Value;

fn probe(name: &str) -> (Value, String) {
    let json = json_of(
        &cpulab_on(&fixture(name))
            .args(["probe", "--json"])
            .output()
            .unwrap(),
    );
    let out = cpulab_on(&fixture(name)).arg("probe").output().unwrap();
    common::assert_success(&out);
    (json, String::from_utf8_lossy(&out.stdout).to_string())
}

/// What generate.py wrote for one machine.
struct Known {
    name: &'static str,
    model: &'static str,
    hypervisor: Option<&'static str>,
    cpuid_signature: Option<&'static str>,
    packages: u64,
    cores: u64,
    threads_per_core: u64,
    llc_domains: &'static [&'static str],
    classes: &'static [&'static str],
    idle_driver: &'static str,
    /// The cpufreq governor of every policy; `None`: cpufreq not exposed (a guest).
    governor: Option<&'static str>,
    mitigated: &'static [&'static str],
    tuned: Option<&'static str>,
}

const MACHINES: &[Known] = &[
    Known {
        name: "azure-hyperv",
        model: "Intel(R) Xeon(R) Platinum 8370C CPU @ 2.80GHz",
        hypervisor: Some("Microsoft Hyper-V"),
        cpuid_signature: Some("Microsoft Hv"),
        packages: 1,
        cores: 2,
        threads_per_core: 2,
        llc_domains: &["0-3"],
        classes: &["same-cpu", "smt-sibling", "shared-llc"],
        idle_driver: "none",
        governor: None,
        mitigated: &["spectre_v1", "spectre_v2"],
        tuned: None,
    },
    Known {
        name: "xen-hvm",
        model: "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz",
        hypervisor: Some("Xen"),
        cpuid_signature: Some("XenVMMXenVMM"),
        packages: 1,
        cores: 2,
        threads_per_core: 2,
        llc_domains: &["0-3"],
        classes: &["same-cpu", "smt-sibling", "shared-llc"],
        idle_driver: "none",
        governor: None,
        mitigated: &["l1tf", "mds", "meltdown", "spectre_v2"],
        tuned: None,
    },
    Known {
        name: "vmware-guest",
        model: "Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz",
        hypervisor: Some("VMware"),
        cpuid_signature: Some("VMwareVMware"),
        // vSphere's default: every vCPU a socket of its own, each with its own view of L3.
        packages: 4,
        cores: 4,
        threads_per_core: 1,
        llc_domains: &["0", "1", "2", "3"],
        classes: &["same-cpu", "cross-package"],
        idle_driver: "none",
        governor: None,
        mitigated: &["spectre_v1", "spectre_v2"],
        tuned: None,
    },
    Known {
        name: "intel-baremetal",
        model: "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz",
        hypervisor: None,
        cpuid_signature: None,
        packages: 1,
        cores: 16,
        threads_per_core: 2,
        llc_domains: &["0-31"],
        classes: &["same-cpu", "smt-sibling", "shared-llc"],
        idle_driver: "intel_idle",
        governor: Some("powersave"),
        mitigated: &["l1tf", "mds", "meltdown", "spectre_v1", "spectre_v2"],
        tuned: Some("balanced"),
    },
];

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn each_machine_is_probed_as_generate_py_wrote_it() {
    for k in MACHINES {
        let (p, text) = probe(k.name);
        let what = k.name;
        assert_eq!(p["kind"], "probe", "{what}");
        assert_eq!(p["cpu_model"], k.model, "{what}");
        // Virtualisation: the hypervisor, and the CPUID signature it was named from.
        assert_eq!(p["virt"]["hypervisor"].as_str(), k.hypervisor, "{what}");
        assert_eq!(
            p["virt"]["cpuid"]["signature"].as_str(),
            k.cpuid_signature,
            "{what}"
        );
        assert_eq!(
            p["virt"]["cpuid"]["hypervisor_bit"],
            k.hypervisor.is_some(),
            "{what}"
        );
        // Topology and the placement classes it implies.
        let t = &p["topology"];
        assert_eq!(
            t["online"],
            "0-".to_string() + &(k.cores * k.threads_per_core - 1).to_string()
        );
        assert_eq!(t["packages"].as_u64(), Some(k.packages), "{what}");
        assert_eq!(t["cores"].as_u64(), Some(k.cores), "{what}");
        assert_eq!(
            t["threads_per_core"].as_u64(),
            Some(k.threads_per_core),
            "{what}"
        );
        assert_eq!(strings(&t["llc_domains"]), k.llc_domains, "{what}");
        let classes: Vec<&str> = t["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["class"].as_str().unwrap())
            .collect();
        assert_eq!(classes, k.classes, "{what}");
        // Idle and frequency: a guest has no cpufreq and says the host owns the clock.
        assert_eq!(p["idle"]["driver"], k.idle_driver, "{what}");
        match k.governor {
            None => {
                assert_eq!(
                    p["freq"]["policies"]["unavailable"]["reason"], "not-exposed",
                    "{what}"
                );
            }
            Some(g) => {
                let policies = p["freq"]["policies"].as_array().unwrap();
                assert_eq!(
                    policies.len() as u64,
                    k.cores * k.threads_per_core,
                    "{what}"
                );
                assert!(policies.iter().all(|x| x["governor"] == g), "{what}");
            }
        }
        let vulns = p["mitigations"]["vulnerabilities"].as_object().unwrap();
        let mitigated: Vec<&str> = vulns
            .iter()
            .filter(|(_, v)| v["state"] == "mitigated")
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(mitigated, k.mitigated, "{what}");
        assert_eq!(p["sched"]["tuned_profile"].as_str(), k.tuned, "{what}");
        // The notable lines and the text name what matters on this machine.
        let notable = strings(&p["notable"]).join("\n");
        let first = text.lines().next().unwrap_or("");
        assert!(first.contains(k.model), "{what}: {first}");
        match k.hypervisor {
            Some(h) => {
                assert!(
                    notable.contains(&format!(
                        "{h} guest: cross-vCPU wakeups go through the hypervisor"
                    )),
                    "{what}: {notable}"
                );
                assert!(
                    notable.contains("cpufreq is not exposed"),
                    "{what}: {notable}"
                );
                assert!(first.contains(&format!("{h} guest")), "{what}: {first}");
            }
            None => {
                assert!(!notable.contains("guest"), "{what}: {notable}");
                // intel_idle's Skylake-SP C6 exits in 133 us; powersave ramps after idle.
                assert!(notable.contains("exits in 133 us"), "{what}: {notable}");
                assert!(notable.contains("governor powersave"), "{what}: {notable}");
                assert!(
                    notable.contains("tuned profile balanced"),
                    "{what}: {notable}"
                );
            }
        }
        assert!(
            notable.contains(&format!("{} mitigation(s) active", k.mitigated.len())),
            "{what}: {notable}"
        );
    }
}

/// `doctor --replay SAVED --json` on a fixture root.
fn replayed(name: &str, saved: &std::path::Path) -> Value {
    let out = cpulab_on(&fixture(name))
        .args(["doctor", "--json", "--replay"])
        .arg(saved)
        .output()
        .unwrap();
    common::assert_success(&out);
    json_of(&out)
}

/// The cross-CPU wakeup finding's mechanism and its remedies' (command, site).
fn cross_cpu(doc: &Value) -> (String, Vec<(String, String)>) {
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "cross-cpu-wakeup")
        .unwrap_or_else(|| panic!("no cross-cpu-wakeup finding: {doc}"));
    let remedies = f["remedies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["command"].as_str().unwrap().to_string(),
                r["site"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (f["mechanism"].as_str().unwrap().to_string(), remedies)
}

fn has(remedies: &[(String, String)], start: &str, site: &str) -> bool {
    remedies
        .iter()
        .any(|(c, s)| c.starts_with(start) && s == site)
}

/// kvm-emr-16's own measurements on its own facts (issue 30's "done when"): no cpuidle driver,
/// so halts are not visible, never "awake", with pinning and halt polling offered.
#[test]
fn kvm_emr_16_replayed_names_halts_not_visible_and_offers_halt_polling() {
    let saved = fixture("results/kvm-emr-16-doctor.json");
    let doc = replayed("kvm-emr-16", &saved);
    assert_eq!(doc["facts"]["hypervisor"], "KVM");
    assert_eq!(doc["facts"]["environment"], "kvm-no-haltpoll");
    assert_eq!(doc["facts"]["cpuidle_driver"], "none");
    assert_eq!(doc["facts"]["guest_halt_poll_ns"], 200000);
    assert!(
        doc["replayed_from"]
            .as_str()
            .unwrap()
            .contains("kvm-emr-16-doctor.json"),
        "{}",
        doc["replayed_from"]
    );
    let (mechanism, remedies) = cross_cpu(&doc);
    assert!(
        mechanism.contains("halts are not visible here"),
        "{mechanism}"
    );
    assert!(!mechanism.contains("awake"), "{mechanism}");
    assert!(
        has(&remedies, "taskset -c 0", "this-machine"),
        "{remedies:?}"
    );
    assert!(
        has(
            &remedies,
            "kernel command line: cpuidle_haltpoll.force=1",
            "this-machine"
        ),
        "{remedies:?}"
    );
    assert!(has(&remedies, "on the KVM host", "host"), "{remedies:?}");
}

/// The same measurements, with 2 halts per round trip counted where the VMs count none (a test
/// input written here, not a measurement), judged on each environment's facts: each gets its own
/// mechanism and its own remedies, the host's marked as the host's.
#[test]
fn each_environment_gets_its_own_mechanism_and_remedies_from_the_same_figures() {
    let text = std::fs::read_to_string(fixture("results/kvm-emr-16-doctor.json")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    for w in doc["measurements"]["wakeup"].as_array_mut().unwrap() {
        let halts = if w["class"] == "same-cpu" { 0.0 } else { 2.0 };
        w["per_round_trip"]["idle_entries"] = halts.into();
    }
    let dir = tempfile::tempdir().unwrap();
    let counted = dir.path().join("halts-counted.json");
    std::fs::write(&counted, doc.to_string()).unwrap();
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        // (fixture, hypervisor, words in the mechanism, a remedy, its site)
        (
            "azure-hyperv",
            "Microsoft Hyper-V",
            "scheduler type",
            "bcdedit /set hypervisorschedulertype classic",
            "host",
        ),
        (
            "xen-hvm",
            "Xen",
            "Xen deschedules it",
            "xl vcpu-pin",
            "host",
        ),
        (
            "vmware-guest",
            "VMware",
            "ESXi deschedules it",
            "VM setting Latency Sensitivity = High",
            "host",
        ),
        (
            "intel-baremetal",
            "",
            "intel_idle puts it in a sleep state",
            "cpupower idle-set -D 10",
            "this-machine",
        ),
    ];
    for (name, hypervisor, words, remedy, site) in cases {
        let doc = replayed(name, &counted);
        let hv = doc["facts"]["hypervisor"].as_str().unwrap_or("");
        assert_eq!(hv, *hypervisor, "{name}");
        let (mechanism, remedies) = cross_cpu(&doc);
        assert!(mechanism.contains(words), "{name}: {mechanism}");
        assert!(
            mechanism.contains("2.0 halts") || mechanism.contains("2.0 idle entries"),
            "{name}: {mechanism}"
        );
        assert!(has(&remedies, remedy, site), "{name}: {remedies:?}");
        // Every remedy done on a host is for a VM's host; bare metal has none.
        let on_host = remedies.iter().filter(|(_, s)| s == "host").count();
        assert_eq!(on_host > 0, !hypervisor.is_empty(), "{name}: {remedies:?}");
    }
}

/// A replay measures nothing, so it records nothing: the history is not touched.
#[test]
fn a_replay_records_no_history() {
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("history.sqlite");
    let out = cpulab_on(&fixture("kvm-emr-16"))
        .env("CPULAB_HISTORY", &history)
        .args(["doctor", "--json", "--replay"])
        .arg(fixture("results/kvm-emr-16-doctor.json"))
        .output()
        .unwrap();
    common::assert_success(&out);
    assert!(!history.exists(), "a replay wrote {}", history.display());
}
