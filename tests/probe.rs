//! `cpulab probe` end to end: the real binary on fixture trees that stand in for machines we do
//! not have, and once on the live machine. Assertions are about structure and the placement
//! classes each topology implies, never about timing.

#[macro_use]
mod common;

use common::{cpulab, installed};
use serde_json::Value;

fn probe_json(root: Option<&str>) -> Value {
    let mut cmd = cpulab();
    if let Some(r) = root {
        cmd.args(["--root", r]);
    }
    let out = cmd.args(["probe", "--json"]).output().unwrap();
    common::assert_success(&out);
    serde_json::from_slice(&out.stdout).expect("exactly one JSON document")
}

fn fixture(name: &str) -> Value {
    probe_json(Some(&format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    )))
}

/// The placement class of CPUs `a` and `b` from the JSON matrix.
fn class(p: &Value, a: u64, b: u64) -> String {
    let m = &p["topology"]["matrix"];
    let cpus: Vec<u64> = m["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    let i = cpus.iter().position(|&c| c == a).expect("cpu a allowed");
    let j = cpus.iter().position(|&c| c == b).expect("cpu b allowed");
    m["classes"][i][j].as_str().unwrap().to_string()
}

fn unavailable_reason(v: &Value) -> Option<&str> {
    v.get("unavailable")?.get("reason")?.as_str()
}

/// Every matrix is square over the allowed CPUs, symmetric, and same-cpu exactly on the diagonal.
fn check_matrix(p: &Value) {
    let m = &p["topology"]["matrix"];
    let n = m["cpus"].as_array().unwrap().len();
    let rows = m["classes"].as_array().unwrap();
    assert_eq!(rows.len(), n);
    for (i, row) in rows.iter().enumerate() {
        let row = row.as_array().unwrap();
        assert_eq!(row.len(), n);
        for (j, c) in row.iter().enumerate() {
            assert_eq!(c == "same-cpu", i == j, "same-cpu only on the diagonal");
            assert_eq!(c, &m["classes"][j][i], "matrix is symmetric");
        }
    }
}

#[test]
fn intel_two_socket_smt_classes() {
    let p = fixture("intel-2s");
    check_matrix(&p);
    assert_eq!(class(&p, 0, 16), "smt-sibling");
    assert_eq!(class(&p, 9, 25), "smt-sibling");
    assert_eq!(class(&p, 0, 1), "shared-llc");
    assert_eq!(class(&p, 0, 17), "shared-llc");
    assert_eq!(class(&p, 0, 8), "cross-node");
    assert_eq!(class(&p, 7, 24), "cross-node");
    let t = &p["topology"];
    assert_eq!(t["packages"], 2);
    assert_eq!(t["cores"], 16);
    assert_eq!(t["threads_per_core"], 2);
    assert_eq!(t["nodes"].as_object().unwrap().len(), 2);
    assert_eq!(
        t["llc_domains"],
        serde_json::json!(["0-7,16-23", "8-15,24-31"])
    );
    assert_eq!(t["isolated"], "4-7");
    assert!(p["virt"]["hypervisor"].is_null());
    assert_eq!(p["freq"]["intel_pstate"], "active");
    assert_eq!(p["freq"]["policies"][0]["governor"], "powersave");
    assert_eq!(p["sched"]["debug_tunables"]["migration_cost_ns"], "500000");
    assert_eq!(p["sched"]["tuned_profile"], "balanced");
    assert_eq!(
        p["mitigations"]["vulnerabilities"]["meltdown"]["state"],
        "mitigated"
    );
    assert_eq!(p["mitigations"]["cmdline"]["nohz_full"], "4-7");
    assert_eq!(p["idle"]["driver"], "intel_idle");
}

#[test]
fn epyc_ccx_classes_inside_a_restricted_container() {
    let p = fixture("epyc-4ccx");
    check_matrix(&p);
    assert_eq!(class(&p, 0, 16), "smt-sibling");
    assert_eq!(class(&p, 0, 1), "shared-llc");
    assert_eq!(class(&p, 0, 19), "shared-llc");
    assert_eq!(class(&p, 0, 4), "same-node");
    assert_eq!(class(&p, 3, 20), "same-node");
    let t = &p["topology"];
    assert_eq!(t["llc_domains"].as_array().unwrap().len(), 4);
    // The container's cpuset leaves half the machine; the matrix covers only what is allowed.
    assert_eq!(t["allowed"], "0-7,16-23");
    assert_eq!(t["matrix"]["cpus"].as_array().unwrap().len(), 16);
    let cpu = &p["sched"]["cgroup"]["cpu"];
    assert_eq!(cpu["version"], "v2");
    assert_eq!(cpu["quota_cpus"], 4.0);
    assert_eq!(cpu["nr_throttled"], 340);
    assert_eq!(cpu["throttled_ns"], 5_400_000_000u64);
    let c = &p["virt"]["container"];
    assert_eq!(c["runtime"], "podman");
    assert_eq!(c["marker_only"], false);
    assert_eq!(p["freq"]["boost"], true);
}

#[test]
fn opteron_modules_share_l2_and_each_die_is_a_node() {
    let p = fixture("opteron-6376");
    check_matrix(&p);
    assert_eq!(class(&p, 0, 1), "shared-l2");
    assert_eq!(class(&p, 30, 31), "shared-l2");
    assert_eq!(class(&p, 0, 2), "shared-llc");
    assert_eq!(class(&p, 0, 7), "shared-llc");
    assert_eq!(class(&p, 0, 8), "cross-node");
    assert_eq!(class(&p, 0, 16), "cross-node");
    let t = &p["topology"];
    assert_eq!(t["modules"].as_array().unwrap().len(), 16);
    assert_eq!(t["llc_domains"].as_array().unwrap().len(), 4);
    assert_eq!(t["nodes"].as_object().unwrap().len(), 4);
    // Module partners are listed as thread siblings by the kernel but are separate cores.
    assert_eq!(t["cores"], 32);
    assert_eq!(t["threads_per_core"], 1);
    let cpu = &p["sched"]["cgroup"]["cpu"];
    assert_eq!(cpu["version"], "v1");
    assert_eq!(cpu["quota_cpus"], 16.0);
    assert_eq!(cpu["shares"], 512);
    assert_eq!(cpu["throttled_ns"], 84_000_000);
    assert_eq!(p["mitigations"]["cmdline"]["mitigations"], "off");
    assert_eq!(p["sched"]["tunables"]["sched_migration_cost_ns"], "500000");
    assert_eq!(
        unavailable_reason(&p["counters"]["hardware"]),
        Some("not-applicable")
    );
}

#[test]
fn kvm_guest_fixture_shows_haltpoll_and_pv_features() {
    let p = fixture("kvm-guest");
    check_matrix(&p);
    assert_eq!(class(&p, 0, 1), "shared-llc");
    assert_eq!(p["virt"]["hypervisor"], "KVM");
    let kvm = &p["virt"]["cpuid"]["kvm"];
    assert_eq!(kvm["features"]["pv_send_ipi"], true);
    assert_eq!(kvm["realtime_hint"], false);
    assert_eq!(p["idle"]["driver"], "haltpoll");
    assert_eq!(p["idle"]["haltpoll"]["guest_halt_poll_ns"], "0");
    assert_eq!(
        unavailable_reason(&p["freq"]["policies"]),
        Some("not-exposed")
    );
    let notable = p["notable"].as_array().unwrap();
    assert!(
        notable
            .iter()
            .any(|n| n.as_str().unwrap().contains("guest_halt_poll_ns=0"))
    );
}

/// Every `{"unavailable": ..}` anywhere in the document names a known reason and a detail.
fn check_unavailable(v: &Value, path: &str) {
    match v {
        Value::Object(m) => {
            if let Some(u) = m.get("unavailable") {
                let reason = u["reason"].as_str().unwrap_or_default();
                assert!(
                    [
                        "absent",
                        "permission-denied",
                        "not-exposed",
                        "not-applicable",
                        "unreadable"
                    ]
                    .contains(&reason),
                    "{path}: reason {reason}"
                );
                assert!(
                    !u["detail"].as_str().unwrap_or_default().is_empty(),
                    "{path}"
                );
            }
            for (k, x) in m {
                check_unavailable(x, &format!("{path}.{k}"));
            }
        }
        Value::Array(a) => a.iter().for_each(|x| check_unavailable(x, path)),
        _ => {}
    }
}

#[test]
fn live_probe_has_every_section_and_round_trips() {
    let p = probe_json(None);
    for s in [
        "conditions",
        "topology",
        "virt",
        "idle",
        "freq",
        "mitigations",
        "sched",
        "counters",
    ] {
        assert!(p.get(s).is_some_and(|v| v.is_object()), "section {s}");
    }
    assert_eq!(p["live"], true);
    check_matrix(&p);
    check_unavailable(&p, "");
    let c = &p["counters"];
    assert!(c["software"] == true || unavailable_reason(&c["software"]).is_some());
    assert_eq!(p["cpulab_schema"], 1);
    assert_eq!(p["kind"], "probe");
    // The body round-trips through the schema type (serde's flatten cannot carry the integer
    // map keys, so the envelope is taken off first).
    let mut body = p.clone();
    let o = body.as_object_mut().unwrap();
    o.remove("cpulab_schema");
    o.remove("kind");
    let back: cpulab::probe::Probe = serde_json::from_value(body.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), body);
}

#[test]
fn live_page_is_grouped_by_section() {
    let out = cpulab().env("NO_COLOR", "1").arg("probe").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for h in [
        "Notable",
        "Topology",
        "Virtualisation",
        "Idle",
        "Frequency",
        "Mitigations",
        "Scheduler and limits",
        "Counters",
    ] {
        assert!(text.lines().any(|l| l == h), "heading {h}");
    }
    assert!(!text.contains('\x1b'), "no colour when NO_COLOR is set");
}

#[test]
fn one_allowed_cpu_under_taskset() {
    if !installed(test_name!(), &[("taskset", "util-linux")]) {
        return;
    }
    // The first CPU this test may use (cpu0 may be outside a container's cpuset).
    let live = probe_json(None);
    let first = live["topology"]["matrix"]["cpus"][0]
        .as_u64()
        .unwrap()
        .to_string();
    let out = common::cpulab_under_taskset(&first, &["probe", "--json"]);
    assert!(out.status.success());
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p["topology"]["allowed"], first.as_str());
    let classes = p["topology"]["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0]["class"], "same-cpu");
}

#[test]
fn bad_root_is_bad_input() {
    for root in ["/nonexistent/cpulab-root", env!("CARGO_MANIFEST_DIR")] {
        let out = cpulab().args(["--root", root, "probe"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{root}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--root"), "{err}");
    }
}

/// Regression: the probe and `share` read the CFS quota with two parsers, and only the probe's
/// looked at parent groups. Through the binary, a parent's tighter quota is the one reported.
#[test]
fn parent_quota_tighter_than_leaf_binds_the_probe() {
    let t = tempfile::tempdir().unwrap();
    for (rel, text) in [
        ("sys/devices/system/cpu/online", "0\n"),
        ("sys/devices/system/cpu/possible", "0\n"),
        ("proc/self/cgroup", "0::/pod/app\n"),
        (
            "proc/self/mountinfo",
            "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        ),
        ("sys/fs/cgroup/pod/cpu.max", "50000 100000\n"),
        ("sys/fs/cgroup/pod/app/cpu.max", "max 100000\n"),
        ("sys/fs/cgroup/pod/app/cpu.stat", "nr_periods 0\n"),
    ] {
        let p = t.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let p = probe_json(Some(t.path().to_str().unwrap()));
    let cpu = &p["sched"]["cgroup"]["cpu"];
    assert!(
        cpu["quota_cpus"].is_null(),
        "the leaf itself is unlimited: {cpu}"
    );
    let (cpus, from) = (&cpu["effective_quota"][0], &cpu["effective_quota"][1]);
    assert_eq!(cpus.as_f64(), Some(0.5), "{cpu}");
    assert!(
        from.as_str().unwrap().ends_with("sys/fs/cgroup/pod"),
        "{cpu}"
    );
}

/// A CPU list (`0-3,8`) as a sorted set, parsed here rather than by the code under test.
fn cpu_set(list: &str) -> std::collections::BTreeSet<u64> {
    let mut set = std::collections::BTreeSet::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u64, u64) = (a.trim().parse().unwrap(), b.trim().parse().unwrap());
        set.extend(a..=b);
    }
    set
}

/// hwloc, an independent reader of the same machine, asked one question.
fn hwloc(args: &[&str]) -> String {
    let out = std::process::Command::new("hwloc-calc")
        .arg("--whole-system")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "hwloc-calc {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The sets of CPUs (OS numbers) in each hwloc object of `kind` (`core`, `l3cache`...).
fn hwloc_groups(kind: &str) -> std::collections::BTreeSet<std::collections::BTreeSet<u64>> {
    let n: usize = hwloc(&["--number-of", kind, "all"]).parse().unwrap();
    (0..n)
        .map(|i| {
            hwloc(&["-p", "--intersect", "pu", &format!("{kind}:{i}")])
                .split(',')
                .map(|c| c.parse().unwrap())
                .collect()
        })
        .collect()
}

/// The live probe against hwloc's view of the same machine: packages, cores, NUMA nodes, SMT
/// siblings and the last-level cache domains agree (hwloc reads sysfs and CPUID through its own
/// code, so a misread topology file or a wrong grouping in cpulab shows as a difference).
#[test]
fn the_live_topology_agrees_with_hwloc() {
    if !installed(test_name!(), &[("hwloc-calc", "hwloc")]) {
        return;
    }
    let t = &probe_json(None)["topology"];
    if t["online"] != t["allowed"] {
        common::skipped(
            test_name!(),
            "this process may not use every online CPU; hwloc and the probe would count different sets",
        );
        return;
    }
    let count = |k: &str| hwloc(&["--number-of", k, "all"]).parse::<u64>().unwrap();
    assert_eq!(t["packages"].as_u64(), Some(count("package")), "packages");
    assert_eq!(t["cores"].as_u64(), Some(count("core")), "cores");
    let nodes: std::collections::BTreeSet<_> = t["nodes"]
        .as_object()
        .unwrap()
        .values()
        .map(|l| cpu_set(l.as_str().unwrap()))
        .collect();
    assert_eq!(nodes, hwloc_groups("numanode"), "NUMA nodes");
    let siblings: std::collections::BTreeSet<_> = t["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| cpu_set(c["smt_siblings"].as_str().unwrap()))
        .collect();
    assert_eq!(
        siblings,
        hwloc_groups("core"),
        "SMT siblings (the CPUs of each core)"
    );
    let llc: std::collections::BTreeSet<_> = t["llc_domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| cpu_set(l.as_str().unwrap()))
        .collect();
    let top = t["caches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["level"].as_u64())
        .max()
        .unwrap_or(0);
    if top >= 2 {
        assert_eq!(
            llc,
            hwloc_groups(&format!("l{top}cache")),
            "last-level caches"
        );
    }
}
