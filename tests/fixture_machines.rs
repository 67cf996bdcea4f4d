//! The binary on the machines of the field notes' environments, through `--root`: an Azure
//! Hyper-V guest, a Xen HVM domU, a vSphere guest and a bare-metal Xeon. Each fixture tree was
//! written by `tests/fixtures/generate.py` from public facts about that machine; this checks that
//! `cpulab probe` (JSON and text) reports those facts, end to end through the root-path readers.
//!
//! `doctor` measures the live machine (its rules need measured wakeups), so it is not run on a
//! fixture root; its rules are tested on these environments beside the code
//! (`src/doctor/rules/`).

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
