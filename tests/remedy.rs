//! `cpulab remedy`: the files it writes from a saved doctor result, checked by the tools that
//! read them (systemd-analyze, modprobe), its bad input, and `doctor --expect-absent`.
//!
//! The result is `tests/fixtures/results/kvm-guest-remedies-doctor.json` (kvm-emr-16's run
//! replayed on this project's 2-vCPU KVM guest, so its remedies carry their changes as data),
//! edited structurally where a test needs the watched application's unit.

mod common;

use common::{cpulab, json_of, pgpair};
use serde_json::Value;
use std::path::{Path, PathBuf};

const UNIT: &str = "cpulab-remedy-test.service";

fn fixture_doc(name: &str) -> Value {
    let path = common::fixture("results").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The fixture with every pinning change naming `unit` (as the doctor writes it for a watched
/// process whose cgroup is that unit's), saved in `dir`.
fn with_unit(dir: &Path, unit: &str) -> PathBuf {
    let mut doc = fixture_doc("kvm-guest-remedies-doctor.json");
    let mut pins = 0;
    for f in doc["findings"].as_array_mut().unwrap() {
        for r in f["remedies"].as_array_mut().unwrap() {
            for c in r["changes"].as_array_mut().into_iter().flatten() {
                if c["kind"] == "pin" {
                    c["workload"] = serde_json::json!({
                        "pids": [4242],
                        "units": [unit],
                        "cgroups": [format!("/system.slice/{unit}")]
                    });
                    pins += 1;
                }
            }
        }
    }
    assert!(pins > 0, "the fixture has pinning remedies");
    let path = dir.join("doctor.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

fn remedy_json(result: &Path, out: &Path, extra: &[&str]) -> Value {
    let o = cpulab()
        .arg("remedy")
        .arg(result)
        .arg("--out")
        .arg(out)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    json_of(&o)
}

fn deployment<'a>(plan: &'a Value, kind: &str) -> &'a Value {
    plan["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["changes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["kind"] == kind)
        })
        .unwrap_or_else(|| panic!("a deployment changing {kind}: {plan}"))
}

fn form<'a>(d: &'a Value, format: &str) -> &'a Value {
    d["forms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["format"] == format)
        .unwrap_or_else(|| panic!("a {format} form: {d}"))
}

#[test]
fn every_remedy_with_changes_is_written_with_a_readme_and_listed_in_json() {
    let tmp = tempfile::tempdir().unwrap();
    let result = with_unit(tmp.path(), UNIT);
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &[]);
    // Every file listed is written, below the output directory, and nothing else is.
    let listed: Vec<String> = plan["files"]
        .as_array()
        .unwrap()
        .iter()
        .chain(
            plan["deployments"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|d| d["forms"].as_array().unwrap())
                .flat_map(|f| f["files"].as_array().unwrap()),
        )
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    assert!(listed.contains(&"README.md".to_string()), "{listed:?}");
    let mut on_disk = Vec::new();
    fn walk(dir: &Path, base: &Path, acc: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, base, acc);
            } else {
                acc.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    walk(&out, &out, &mut on_disk);
    let (mut a, mut b) = (listed.clone(), on_disk);
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // Pinning names the real unit, answers every finding that offers it, once.
    let pin = deployment(&plan, "pin");
    let ids: Vec<&str> = pin["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"cross-cpu-wakeup") && ids.contains(&"unpinned-placement"),
        "{ids:?}"
    );
    let systemd = form(pin, "systemd");
    let file = &systemd["files"][0];
    assert_eq!(
        file["install_to"],
        format!(
            "/etc/systemd/system/{UNIT}.d/50-cpulab-{}.conf",
            pin["id"].as_str().unwrap()
        )
    );
    assert!(file.get("placeholder").is_none(), "{file}");
    assert_eq!(systemd["needs"], "restart");
    // The result is a cgroup v1 host's: the drop-in has CPUAffinity= alone, which
    // `systemctl set-property` refuses, so there is no runtime trial (tests/systemd_container.rs
    // runs the lines under a real systemd).
    assert!(
        systemd["trial"].as_array().is_none_or(|t| t.is_empty()),
        "{}",
        systemd["trial"]
    );
    assert!(
        pin["verify_finding"]
            .as_str()
            .unwrap()
            .starts_with("cpulab doctor --quick --expect-absent ")
    );
    // A kernel setting is never a pod's: skipped with the reason.
    let boot = deployment(&plan, "boot-options");
    let k8s = boot["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["format"] == "kubernetes")
        .expect("kubernetes skipped for a boot option");
    assert!(
        k8s["reason"]
            .as_str()
            .unwrap()
            .contains("not a container's or a pod's"),
        "{k8s}"
    );
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(readme.contains("## Order") && readme.contains("Nothing here has been applied"));
    // The host's halt polling is said to be for the host.
    let host = plan["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["site"] == "host")
        .expect("the fixture's KVM host halt polling remedy");
    assert!(
        form(host, "modprobe")["notes"][0]
            .as_str()
            .unwrap()
            .contains("for the hypervisor host, not this guest")
    );
}

#[test]
fn a_watched_process_without_a_unit_gets_a_placeholder_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let result = common::fixture("results").join("kvm-guest-remedies-doctor.json");
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "systemd"]);
    let pin = deployment(&plan, "pin");
    let file = &form(pin, "systemd")["files"][0];
    let why = file["placeholder"].as_str().unwrap();
    assert!(why.contains("no application was watched"), "{why}");
    let text = std::fs::read_to_string(out.join(file["path"].as_str().unwrap())).unwrap();
    assert!(text.starts_with("# PLACEHOLDER: "), "{text}");
    assert!(
        file["path"]
            .as_str()
            .unwrap()
            .contains("UNIT-NOT-NAMED.service.d/")
    );
    assert_eq!(plan["formats"], serde_json::json!(["systemd"]));
}

#[test]
fn a_result_from_before_changes_were_recorded_asks_for_a_new_doctor_run() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = cpulab()
        .arg("remedy")
        .arg(common::fixture("results").join("kvm-emr-16-doctor.json"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    common::assert_success(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("No file written"), "{text}");
    assert!(text.contains("no deployable form recorded"), "{text}");
    assert!(text.contains("re-run `cpulab doctor`"), "{text}");
    // No README is written, so the text lists them itself rather than point at one.
    assert!(!text.contains("README"), "{text}");
    assert!(text.contains("\n  cross-cpu-wakeup: "), "{text}");
    assert!(!out.exists());
    // An --out that is a file is refused here too, though nothing would be written.
    let file_out = tmp.path().join("a-file");
    std::fs::write(&file_out, "x").unwrap();
    common::bad_input(&[
        "remedy",
        common::fixture("results")
            .join("kvm-emr-16-doctor.json")
            .to_str()
            .unwrap(),
        "--out",
        file_out.to_str().unwrap(),
    ]);
}

#[test]
fn a_result_without_findings_writes_nothing_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = fixture_doc("kvm-guest-remedies-doctor.json");
    doc["findings"] = serde_json::json!([]);
    let result = tmp.path().join("clean.json");
    std::fs::write(&result, doc.to_string()).unwrap();
    let out = tmp.path().join("out");
    let o = cpulab()
        .arg("remedy")
        .arg(&result)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    common::assert_success(&o);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "The result has no finding: no remedy to write, no file written."
    );
    assert!(!out.exists());
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let result = common::fixture("results").join("kvm-guest-remedies-doctor.json");
    let r = result.to_str().unwrap();
    let missing = tmp.path().join("missing.json");
    let corrupt = tmp.path().join("corrupt.json");
    std::fs::write(&corrupt, "{\"cpulab_schema\": 1, \"kind\": \"doc").unwrap();
    let probe = common::fixture("results").join("probe-kvm-guest.json");
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep"), "x").unwrap();
    let file_out = tmp.path().join("a-file");
    std::fs::write(&file_out, "x").unwrap();
    let out = tmp.path().join("o");
    let o = out.to_str().unwrap();
    common::bad_input(&["remedy", missing.to_str().unwrap(), "--out", o]);
    common::bad_input(&["remedy", corrupt.to_str().unwrap(), "--out", o]);
    common::bad_input(&["remedy", probe.to_str().unwrap(), "--out", o]);
    common::bad_input(&["remedy", r, "--out", o, "--format", "helm"]);
    common::bad_input(&["remedy", r, "--out", full.to_str().unwrap()]);
    common::bad_input(&["remedy", r, "--out", file_out.to_str().unwrap()]);
    common::bad_input(&[
        "doctor",
        "--replay",
        r,
        "--expect-absent",
        "no-such-finding",
    ]);
    // --force writes into the directory that is not empty, and keeps what was there.
    let o = cpulab()
        .args(["remedy", r, "--force", "--out"])
        .arg(&full)
        .output()
        .unwrap();
    common::assert_success(&o);
    assert!(full.join("keep").exists() && full.join("README.md").exists());
}

#[test]
fn expect_absent_exits_1_while_the_finding_is_there_and_0_when_it_is_not() {
    let r = common::fixture("results").join("kvm-guest-remedies-doctor.json");
    let run = |ids: &str| {
        cpulab()
            .args(["doctor", "--replay"])
            .arg(&r)
            .args(["--expect-absent", ids])
            .output()
            .unwrap()
    };
    let o = run("cross-cpu-wakeup");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("still present: cross-cpu-wakeup"), "{err}");
    // The report is printed as usual.
    assert!(!o.stdout.is_empty());
    assert_eq!(
        run("frequency-ramp,cpu-quota-throttling").status.code(),
        Some(0)
    );
    assert_eq!(
        run("frequency-ramp,cross-cpu-wakeup").status.code(),
        Some(1)
    );
    // Ids as typed in quotes with a space after the comma: the same check (` cross-cpu-wakeup`
    // was refused as no rule's id).
    assert_eq!(
        run("frequency-ramp, cross-cpu-wakeup").status.code(),
        Some(1)
    );
    let o = run("frequency-ramp,,cross-cpu-wakeup");
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--expect-absent has an empty id"), "{err}");
    assert!(o.stdout.is_empty());
}

/// systemd reads the drop-in: `systemd-analyze verify` on a real unit file with the drop-in in
/// its `.d` directory reports nothing about it, while a broken copy is reported (so the drop-in
/// was read).
#[test]
fn systemd_analyze_verify_accepts_the_drop_in_on_a_real_unit() {
    if !common::installed(test_name!(), &[("systemd-analyze", "systemd")]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let result = with_unit(tmp.path(), UNIT);
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "systemd"]);
    let pin = deployment(&plan, "pin");
    let file = &form(pin, "systemd")["files"][0];
    let units = tmp.path().join("units");
    let dropins = units.join(format!("{UNIT}.d"));
    std::fs::create_dir_all(&dropins).unwrap();
    std::fs::write(
        units.join(UNIT),
        "[Unit]\nDescription=cpulab remedy test\n[Service]\nExecStart=/bin/true\n",
    )
    .unwrap();
    let name = Path::new(file["install_to"].as_str().unwrap())
        .file_name()
        .unwrap()
        .to_owned();
    std::fs::copy(
        out.join(file["path"].as_str().unwrap()),
        dropins.join(&name),
    )
    .unwrap();
    let verify = || {
        std::process::Command::new("systemd-analyze")
            .arg("verify")
            .arg(units.join(UNIT))
            .env("SYSTEMD_UNIT_PATH", format!("{}:", units.display()))
            .output()
            .unwrap()
    };
    let o = verify();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains(name.to_str().unwrap()), "{err}");
    // The control: the same drop-in with a value systemd refuses is reported.
    let text = std::fs::read_to_string(dropins.join(&name)).unwrap();
    std::fs::write(
        dropins.join(&name),
        format!("{text}CPUAffinity=not-a-cpu\n"),
    )
    .unwrap();
    let err = String::from_utf8_lossy(&verify().stderr).to_string();
    assert!(
        err.contains(name.to_str().unwrap()),
        "the drop-in is read: {err}"
    );
}

/// modprobe reads the generated `modprobe.d` file: `modprobe --showconfig -C DIR` lists its
/// option, and only with the file in DIR.
#[test]
fn modprobe_showconfig_shows_the_option_of_the_generated_file() {
    if !common::installed(test_name!(), &[("modprobe", "kmod")]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let result = common::fixture("results").join("kvm-guest-remedies-doctor.json");
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "modprobe"]);
    let d = plan["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["site"] == "this-machine" && d["forms"].as_array().is_some_and(|f| !f.is_empty())
        })
        .expect("a modprobe remedy for this guest");
    let file = &form(d, "modprobe")["files"][0];
    let conf = tmp.path().join("modprobe.d");
    std::fs::create_dir(&conf).unwrap();
    let show = || {
        let o = std::process::Command::new("modprobe")
            .arg("--showconfig")
            .arg("-C")
            .arg(&conf)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let want = "options haltpoll guest_halt_poll_ns=200000";
    assert!(!show().lines().any(|l| l == want));
    std::fs::copy(
        out.join(file["path"].as_str().unwrap()),
        conf.join("cpulab-haltpoll.conf"),
    )
    .unwrap();
    assert!(show().lines().any(|l| l == want), "{}", show());
}

/// The fixture with the watched unit, a tuned profile active when the doctor ran, and a
/// remedy for the host that pins the guest's two vCPUs (as `parallel-contention` offers in a
/// VM), saved in `dir`.
fn with_everything(dir: &Path) -> PathBuf {
    let path = with_unit(dir, UNIT);
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    doc["facts"]["tuned_profile"] = Value::from("virtual-guest");
    doc["findings"][0]["remedies"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "command": "for a VM: pin vCPUs one per physical core or module on the host",
            "effect": "The guest's CPUs stop sharing cores behind its back.",
            "cost_caveat": "Fewer vCPUs fit on the host.",
            "site": "host",
            "changes": [{"kind": "vcpu-pin", "vcpus": 2}]
        }));
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

fn file_of<'a>(form: &'a Value, suffix: &str) -> &'a Value {
    form["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("a file ending {suffix}: {form}"))
}

/// tuned's own profile loader (its Python modules, as the daemon uses them) reads the child
/// profile, resolves its include, and holds the remedy's settings.
#[test]
fn tuned_loads_the_child_profile_with_its_include() {
    if !common::installed(test_name!(), &[("tuned-adm", "tuned")]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&with_everything(tmp.path()), &out, &["--format", "tuned"]);
    let d = deployment(&plan, "module-param");
    let file = &form(d, "tuned")["files"][0];
    let conf = out.join(file["path"].as_str().unwrap());
    let profiles = conf.parent().unwrap().parent().unwrap();
    let name = conf
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let script = "import json, sys\n\
         from tuned.profiles.loader import Loader\n\
         from tuned.profiles.locator import Locator\n\
         from tuned.profiles.factory import Factory\n\
         from tuned.profiles.merger import Merger\n\
         from tuned.profiles.variables import Variables\n\
         l = Loader(Locator(['/usr/lib/tuned', sys.argv[1]]), Factory(), Merger(), None, Variables())\n\
         p = l.load([sys.argv[2]])\n\
         print(json.dumps({u: dict(p.units[u].options) for u in p.units}))\n";
    // Debian's python3, which the tuned package's modules are installed for.
    let o = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(profiles)
        .arg(name)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let units: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        units["sysfs"]["/sys/module/haltpoll/parameters/guest_halt_poll_ns"], "200000",
        "{units}"
    );
    assert!(
        units["bootloader"]["cmdline_cpulab"]
            .as_str()
            .unwrap()
            .contains("cpuidle_haltpoll.force=1"),
        "{units}"
    );
    // The included virtual-guest profile's own settings came along (it sets vm.dirty_ratio).
    assert!(units["sysctl"].get("vm.dirty_ratio").is_some(), "{units}");
}

fn ansible(playbook: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new("ansible-playbook")
        .args(["-i", "localhost,", "-c", "local"])
        .arg(playbook)
        .args(extra)
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_LOCALHOST_WARNING", "0")
        .output()
        .unwrap()
}

/// The count in PLAY RECAP's `changed=N` for localhost.
fn changed(o: &std::process::Output) -> u64 {
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text.lines()
        .find(|l| l.starts_with("localhost"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("changed="))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no recap: {text}"))
}

/// The playbook passes `--syntax-check`; `--check --diff` against localhost applies cleanly and
/// changes nothing; staged below a scratch root (`cpulab_root`) it deploys the module
/// parameter's files, a second run changes nothing, and the undo tag takes them away again.
#[test]
fn the_ansible_playbook_is_idempotent_and_its_undo_tag_brings_the_host_back() {
    if !common::installed(test_name!(), &[("ansible-playbook", "ansible-core")]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&with_everything(tmp.path()), &out, &[]);
    let book = out.join("playbook.yml");
    let o = ansible(&book, &["--syntax-check"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let id = deployment(&plan, "module-param")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let undo = format!("{id}-undo");
    // A scratch root holding the parameter's file as the kernel shows it, halt polling off.
    let root = tmp.path().join("root");
    let param = root.join("sys/module/haltpoll/parameters/guest_halt_poll_ns");
    std::fs::create_dir_all(param.parent().unwrap()).unwrap();
    std::fs::write(&param, "0\n").unwrap();
    let staged = format!("cpulab_root={}", root.display());
    // Check mode changes nothing, on the scratch root or the live system.
    let o = ansible(&book, &["--check", "--diff", "--tags", &id, "-e", &staged]);
    changed(&o);
    assert_eq!(std::fs::read_to_string(&param).unwrap(), "0\n");
    let o = ansible(
        &book,
        &["--check", "--diff", "--tags", "01-pin", "-e", &staged],
    );
    changed(&o);
    assert!(!Path::new(&format!("/etc/systemd/system/{UNIT}.d")).exists());
    // Deployed for real below the scratch root, then again: the second run changes nothing.
    let first = changed(&ansible(&book, &["--tags", &id, "-e", &staged]));
    assert!(first >= 2, "files and the parameter: {first}");
    assert_eq!(std::fs::read_to_string(&param).unwrap().trim(), "200000");
    let modprobe = root.join("etc/modprobe.d/cpulab-haltpoll.conf");
    assert!(modprobe.exists());
    assert_eq!(changed(&ansible(&book, &["--tags", &id, "-e", &staged])), 0);
    // The undo tag removes what was deployed.
    let kept = root.join("etc/modprobe.d/cpulab-haltpoll.conf.guest_halt_poll_ns.before");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "0\n");
    let o = ansible(&book, &["--tags", &undo, "-e", &staged]);
    assert!(changed(&o) >= 1);
    assert!(!modprobe.exists());
    // The value kept before the first deploy is back, and the kept copy gone.
    assert_eq!(std::fs::read_to_string(&param).unwrap(), "0\n");
    assert!(!kept.exists());
    assert!(
        !root
            .join("etc/default/grub.d")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some())
    );
}

/// Kubernetes YAML parses, its kubelet configuration uses only KubeletConfiguration's real
/// fields (the upstream list kept as test data), and the pod is Guaranteed with integer CPUs.
#[test]
fn the_kubelet_configuration_uses_real_fields_and_the_pod_gets_exclusive_cpus() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(
        &with_unit(tmp.path(), UNIT),
        &out,
        &["--format", "kubernetes"],
    );
    let k8s = form(deployment(&plan, "pin"), "kubernetes");
    assert_eq!(k8s["needs"], "node-drain");
    let fields = std::fs::read_to_string(common::fixture(
        "kubernetes/kubelet-config-v1beta1-fields.txt",
    ))
    .unwrap();
    let fields: Vec<&str> = fields
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    assert!(fields.len() > 100, "the whole upstream list");
    let read = |f: &Value| -> Value {
        let text = std::fs::read_to_string(out.join(f["path"].as_str().unwrap())).unwrap();
        serde_yaml_ng::from_str(&text).unwrap()
    };
    let kubelet = read(file_of(k8s, "kubelet-config.yaml"));
    for key in kubelet.as_object().unwrap().keys() {
        assert!(
            fields.contains(&key.as_str()),
            "{key} is not a KubeletConfiguration field"
        );
    }
    assert_eq!(kubelet["kind"], "KubeletConfiguration");
    assert_eq!(kubelet["cpuManagerPolicy"], "static");
    let pod = read(file_of(k8s, "pod.yaml"));
    let r = &pod["spec"]["containers"][0]["resources"];
    assert_eq!(r["requests"], r["limits"], "Guaranteed QoS");
    let cpu = r["limits"]["cpu"].as_str().unwrap();
    assert!(
        cpu.parse::<u32>().is_ok_and(|n| n >= 1),
        "integer CPUs: {cpu}"
    );
    let apply = k8s["apply"].as_array().unwrap();
    // Applying the pod file waits for its IMAGE and MEMORY: a placeholder, with no line.
    let (pod, known) = apply.split_last().unwrap();
    assert!(pod.get("line").is_none(), "{pod}");
    assert_eq!(
        pod["argv"].as_array().unwrap()[..3],
        ["kubectl", "apply", "-f"]
    );
    let known: Vec<String> = known.iter().map(line).collect();
    assert!(known[0].starts_with("kubectl drain "), "{known:?}");
    assert!(known.contains(&"rm -f /var/lib/kubelet/cpu_manager_state".to_string()));
}

/// `virt-xml-validate` accepts the `<cputune>` fragment inside a whole domain document once the
/// host's CPUs are filled in for its placeholders (which it rightly refuses before).
#[test]
fn virt_xml_validate_accepts_the_cputune_in_a_domain() {
    if !common::installed(test_name!(), &[("virt-xml-validate", "libvirt-clients")]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&with_everything(tmp.path()), &out, &["--format", "libvirt"]);
    let d = deployment(&plan, "vcpu-pin");
    assert_eq!(d["site"], "host");
    let file = &form(d, "libvirt")["files"][0];
    assert!(file["placeholder"].is_string());
    let fragment = std::fs::read_to_string(out.join(file["path"].as_str().unwrap())).unwrap();
    let domain = |cputune: &str| {
        format!(
            "<domain type='kvm'>\n<name>guest</name>\n<memory unit='MiB'>512</memory>\n\
             <vcpu placement='static'>2</vcpu>\n{cputune}<os><type arch='x86_64'>hvm</type></os>\n</domain>\n"
        )
    };
    let validate = |xml: &str| {
        let path = tmp.path().join("domain.xml");
        std::fs::write(&path, xml).unwrap();
        std::process::Command::new("virt-xml-validate")
            .arg(&path)
            .arg("domain")
            .output()
            .unwrap()
    };
    assert!(
        !validate(&domain(&fragment)).status.success(),
        "placeholders are not CPUs"
    );
    let filled = fragment
        .replace("HOST_CPU_0", "2")
        .replace("HOST_CPU_1", "3")
        .replace("HOST_CPUS_EMULATOR", "0-1");
    let o = validate(&domain(&filled));
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A guest's cross-socket wakeup gets the host's one-node placement: the fixture's crossing
/// (vCPUs 0:1, shared LLC) relabelled as between the guest's NUMA nodes and replayed through
/// the rules, `remedy --format libvirt`, and `virt-xml-validate` on a domain holding both the
/// `<cputune>` and the `<numatune>`: refused with the placeholders, accepted once a host node and
/// its CPUs replace them.
#[test]
fn virt_xml_validate_accepts_the_numatune_of_a_cross_node_finding() {
    if !common::installed(test_name!(), &[("virt-xml-validate", "libvirt-clients")]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = fixture_doc("kvm-guest-remedies-doctor.json");
    let mut relabelled = 0;
    for w in doc["measurements"]["wakeup"].as_array_mut().unwrap() {
        if w["class"] == "shared-llc" {
            w["class"] = Value::from("cross-node");
            relabelled += 1;
        }
    }
    assert!(relabelled > 0, "the fixture measured a crossing");
    let saved = tmp.path().join("measured.json");
    std::fs::write(&saved, doc.to_string()).unwrap();
    let replayed = json_of(
        &cpulab()
            .args(["doctor", "--json", "--no-history", "--replay"])
            .arg(&saved)
            .output()
            .unwrap(),
    );
    let result = tmp.path().join("doctor.json");
    std::fs::write(&result, replayed.to_string()).unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "libvirt"]);
    let d = plan["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["changes"][0]["one_node"] == true)
        .unwrap_or_else(|| panic!("a one-node deployment: {plan}"));
    assert_eq!(d["site"], "host");
    assert_eq!(d["findings"][0], "cross-cpu-wakeup");
    let f = form(d, "libvirt");
    assert_eq!(f["needs"], "guest-restart");
    let read = |suffix: &str| {
        let file = file_of(f, suffix);
        assert!(file["placeholder"].is_string(), "{file}");
        std::fs::read_to_string(out.join(file["path"].as_str().unwrap())).unwrap()
    };
    let both = format!("{}{}", read("cputune.xml"), read("numatune.xml"));
    let validate = |tune: &str| {
        let path = tmp.path().join("domain.xml");
        std::fs::write(
            &path,
            format!(
                "<domain type='kvm'>\n<name>guest</name>\n<memory unit='MiB'>512</memory>\n\
                 <vcpu placement='static'>2</vcpu>\n{tune}<os><type arch='x86_64'>hvm</type></os>\n</domain>\n"
            ),
        )
        .unwrap();
        std::process::Command::new("virt-xml-validate")
            .arg(&path)
            .arg("domain")
            .output()
            .unwrap()
    };
    let cpus_only = both
        .replace("HOST_CPU_0", "2")
        .replace("HOST_CPU_1", "3")
        .replace("HOST_CPUS_EMULATOR", "0-1");
    assert!(
        !validate(&cpus_only).status.success(),
        "HOST_NODE is not a node"
    );
    let o = validate(&cpus_only.replace("HOST_NODE", "0"));
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

const HALT_POLL: &str = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";
const MODPROBE_FILE: &str = "/etc/modprobe.d/cpulab-haltpoll.conf";

const MODPROBE_SAVED: &str = "/etc/modprobe.d/cpulab-haltpoll.conf.guest_halt_poll_ns.before";

/// Puts guest_halt_poll_ns back and removes the modprobe.d file and the value apply kept,
/// however the test ends.
struct Restore(String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(HALT_POLL, &self.0);
        let _ = std::fs::remove_file(MODPROBE_FILE);
        let _ = std::fs::remove_file(MODPROBE_SAVED);
    }
}

/// The line of a command from the JSON, which it has only when no placeholder stands.
fn line(c: &Value) -> String {
    c["line"]
        .as_str()
        .unwrap_or_else(|| panic!("a command with a placeholder: {c}"))
        .to_string()
}

/// Runs each command's argument vector (no shell) in `dir`; the exit status of each. A command
/// with a placeholder cannot run, and fails the test.
fn run_lines(commands: &Value, dir: &Path) -> Vec<bool> {
    let commands = commands.as_array().unwrap();
    assert!(!commands.is_empty(), "no commands to run");
    commands
        .iter()
        .map(|c| {
            let argv: Vec<&str> = c["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap_or_else(|| panic!("a placeholder in {c}")))
                .collect();
            // The line is the same vector, quoted once.
            assert_eq!(shell_words::split(&line(c)).unwrap(), argv, "{c}");
            std::process::Command::new(argv[0])
                .args(&argv[1..])
                .current_dir(dir)
                .status()
                .unwrap()
                .success()
        })
        .collect()
}

/// End to end on this machine: `remedy` written while guest_halt_poll_ns is 5000, then halt
/// polling off (0) before the apply, as an operator who applies later would find it; the
/// modprobe.d/sysfs part applied for real, verify exits 1 before and 0 after, undo, verify
/// exits 1 again, and the value is the one in force when apply ran (0, not 5000) and the files
/// are gone. The finding's own check is run too: on a guest whose cpuidle driver is not
/// haltpoll the parameter is read by nobody, so the finding stays (docs/remedy.md).
#[test]
fn the_halt_polling_remedy_applies_verifies_and_undoes_on_this_machine() {
    let test = test_name!();
    if !nix::unistd::geteuid().is_root() {
        common::skipped(test, "writing /sys/module needs root; CI runs as root");
        return;
    }
    if !common::installed(test, &[("modprobe", "kmod")]) {
        return;
    }
    let Ok(original) = std::fs::read_to_string(HALT_POLL) else {
        common::skipped(
            test,
            "no haltpoll governor here (CONFIG_CPU_IDLE_GOV_HALTPOLL)",
        );
        return;
    };
    for f in [MODPROBE_FILE, MODPROBE_SAVED] {
        if Path::new(f).exists() {
            common::skipped(test, &format!("{f} exists already: not ours to replace"));
            return;
        }
    }
    let _restore = Restore(original.clone());
    if std::fs::write(HALT_POLL, "5000").is_err() {
        common::skipped(test, &format!("{HALT_POLL} is read-only on this kernel"));
        return;
    }
    // The saved result as this host's.
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = fixture_doc("kvm-guest-remedies-doctor.json");
    doc["conditions"]["hostname"] = Value::from(this_host());
    let result = tmp.path().join("doctor.json");
    std::fs::write(&result, doc.to_string()).unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "modprobe"]);
    std::fs::write(HALT_POLL, "0").unwrap();
    let d = plan["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["site"] == "this-machine"
                && d["changes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["module"] == "haltpoll")
        })
        .expect("the guest halt polling remedy");
    let f = form(d, "modprobe");
    let verify = || run_lines(&f["verify"], &out);
    assert_eq!(verify(), [false], "halt polling is off before");
    assert_eq!(run_lines(&f["apply"], &out), [true, true, true]);
    assert_eq!(verify(), [true]);
    assert_eq!(std::fs::read_to_string(MODPROBE_SAVED).unwrap(), "0\n");
    // Applied twice: the value kept is still the one from before the first.
    assert_eq!(run_lines(&f["apply"], &out), [true, true, true]);
    assert_eq!(std::fs::read_to_string(MODPROBE_SAVED).unwrap(), "0\n");
    let shown = std::process::Command::new("modprobe")
        .arg("--showconfig")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.lines()
            .any(|l| l == "options haltpoll guest_halt_poll_ns=200000"),
        "{text}"
    );
    assert_eq!(run_lines(&f["undo"], &out), [true, true]);
    assert_eq!(verify(), [false], "undone");
    assert_eq!(
        std::fs::read_to_string(HALT_POLL).unwrap().trim(),
        "0",
        "the value in force when apply ran, not the one when the files were written"
    );
    assert!(!Path::new(MODPROBE_FILE).exists());
    assert!(!Path::new(MODPROBE_SAVED).exists());
    // The finding's check on the same result: exit 1 while cross-cpu-wakeup is found.
    let o = cpulab()
        .args(["doctor", "--replay"])
        .arg(&result)
        .args(["--expect-absent", "cross-cpu-wakeup"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    drop(_restore);
    assert_eq!(std::fs::read_to_string(HALT_POLL).unwrap(), original);
}

/// A cgroup named like a systemd service, `cpulab-test.slice/cpulab-pgtest-PID.service`, made
/// in every hierarchy systemd would manage here (the v1 `name=systemd` one of a hybrid layout
/// and the unified one), below this process's own group. This machine has no systemd as PID 1,
/// so `systemd-run --scope` cannot make one. Dropped, it moves whatever still runs in it back
/// to this process's group and removes the directories, however the test ends.
struct UnitCgroup {
    /// (the service's directory, the group its processes go back to) per hierarchy.
    dirs: Vec<(PathBuf, PathBuf)>,
    unit: String,
}

impl UnitCgroup {
    /// The hierarchies systemd manages here, or why there is none to use.
    fn make() -> Result<Self, String> {
        use cpulab::probe::cgroup::{parse_mountinfo, parse_proc_cgroup};
        let mounts = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap());
        let own = parse_proc_cgroup(&std::fs::read_to_string("/proc/self/cgroup").unwrap());
        let unit = format!("cpulab-pgtest-{}.service", std::process::id());
        let mut g = Self {
            dirs: vec![],
            unit: unit.clone(),
        };
        for m in mounts.iter().filter(|m| m.root == "/") {
            let named = m.options.iter().any(|o| o == "name=systemd");
            let mine = own.iter().find(|l| {
                if m.v2 {
                    l.hierarchy == 0 && l.controllers.is_empty()
                } else {
                    named && l.controllers.iter().any(|c| c == "name=systemd")
                }
            });
            let Some(mine) = mine else { continue };
            let home = Path::new(&m.point).join(mine.path.trim_start_matches('/'));
            let dir = home.join("cpulab-test.slice").join(&unit);
            std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            g.dirs.push((dir, home));
        }
        if g.dirs.is_empty() {
            return Err("no name=systemd or cgroup2 hierarchy is mounted".into());
        }
        Ok(g)
    }

    /// The `cgroup.procs` files a process writes its pid into to join the unit.
    fn procs(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|(d, _)| d.join("cgroup.procs"))
            .collect()
    }
}

impl Drop for UnitCgroup {
    fn drop(&mut self) {
        for (dir, home) in &self.dirs {
            // A process that is still exiting may hold the group a moment: try for 5 s.
            for _ in 0..50 {
                let pids = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in pids.lines() {
                    let _ = std::fs::write(home.join("cgroup.procs"), pid);
                }
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            if let Some(slice) = dir.parent() {
                let _ = std::fs::remove_dir(slice); // another test's unit may still be in it
            }
        }
    }
}

/// A live PostgreSQL + pgbench pair running in a unit's cgroup, watched by the doctor: the
/// doctor reads the unit from the pair's `/proc/PID/cgroup`, and `remedy --format systemd`
/// writes the drop-in for that unit (never `UNIT-NOT-NAMED`), with the watched pids in its
/// changes. The cross-CPU remedies are checked on the live run replayed with a known penalty,
/// so a quiet crossing (physics beside a busy pair) cannot skip the check.
#[test]
fn a_live_pair_in_a_named_unit_gets_its_drop_in_for_that_unit() {
    let test = test_name!();
    if !common::postgres_installed(test) {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        common::skipped(
            test,
            "making cgroups and the doctor's watch need root; CI runs as root",
        );
        return;
    }
    let group = match UnitCgroup::make() {
        Ok(g) => g,
        Err(why) => return common::skipped(test, &why),
    };
    // The shell joins the unit's groups, then becomes the pair: every server and client it
    // starts is born in the unit, as a service's processes are.
    let mut join = String::new();
    for p in group.procs() {
        join.push_str(&format!("echo $$ > '{}' || exit 97; ", p.display()));
    }
    let mut sh = std::process::Command::new("sh");
    sh.env("CPULAB_HISTORY", "off")
        .args(["-c", &format!("{join}exec \"$@\""), "sh"])
        .arg(common::cpulab_path())
        .args(pgpair::PAIR_ARGS);
    let pair = pgpair::start(sh);
    let seen = pgpair::pgbench_seen();
    let live = pgpair::doctor_watching_the_pair();
    drop(pair);
    assert!(seen, "pgbench never started");
    let watched = pgpair::watched_pids(&live);
    let units: Vec<&Value> = live["measurements"]["app_watch"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["unit"])
        .collect();
    assert!(
        units
            .iter()
            .any(|u| u.as_str() == Some(group.unit.as_str())),
        "the doctor read the unit from the pair's cgroup: {units:?}"
    );
    let replayed = pgpair::replay_with_penalty(&live);
    let tmp = tempfile::tempdir().unwrap();
    let result = tmp.path().join("doctor.json");
    std::fs::write(&result, replayed.to_string()).unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "systemd"]);
    let d = deployment(&plan, "pin");
    let pin = d["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "pin")
        .unwrap();
    let pids = pin["workload"]["pids"].as_array().unwrap();
    assert!(!pids.is_empty(), "the pin names the watched pids: {pin}");
    for p in pids {
        assert!(
            watched.contains(&p.as_i64().unwrap()),
            "{p} not watched: {watched:?}"
        );
    }
    let files = form(d, "systemd")["files"].as_array().unwrap();
    let ours = files
        .iter()
        .find(|f| {
            f["install_to"].as_str().is_some_and(|t| {
                t.starts_with(&format!("/etc/systemd/system/{}.d/50-cpulab-", group.unit))
            })
        })
        .unwrap_or_else(|| panic!("a drop-in for {}: {files:?}", group.unit));
    assert!(ours["placeholder"].is_null(), "{ours}");
    let text = std::fs::read_to_string(out.join(ours["path"].as_str().unwrap())).unwrap();
    assert!(
        text.contains("[Service]\nCPUAffinity=") && !text.contains("PLACEHOLDER"),
        "{text}"
    );
    for f in files {
        assert!(
            !f["path"].as_str().unwrap().contains("UNIT-NOT-NAMED"),
            "every watched process ran in the unit: {f}"
        );
    }
}

/// This machine's host name, as the doctor and `try` record it.
fn this_host() -> String {
    nix::sys::utsname::uname()
        .unwrap()
        .nodename()
        .to_string_lossy()
        .to_string()
}

const HALT_POLL_TRY: &str = "cpulab try haltpoll.guest_halt_poll_ns=200000";

/// `tests/fixtures/try-rate.json` (a `cpulab try haltpoll.guest_halt_poll_ns=200000`) imported
/// into the history `history` as run on `host` at Unix time `t`.
fn import_trial(dir: &Path, history: &Path, host: &str, t: i64) {
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("try-rate.json")).unwrap())
            .unwrap();
    doc["conditions"]["hostname"] = Value::from(host);
    doc["conditions"]["started_unix_s"] = Value::from(t);
    let file = dir.join(format!("try-{t}.json"));
    std::fs::write(&file, doc.to_string()).unwrap();
    cpulab()
        .arg("--history")
        .arg(history)
        .args(["history", "import", "-q"])
        .arg(&file)
        .assert()
        .success();
}

/// The haltpoll remedy of `remedy --history HISTORY` on the fixture as this host's, with the
/// `cpulab try` line the rule writes where the cpuidle driver is haltpoll; the plan and the
/// text output.
fn remedy_with_history(dir: &Path, history: &Path) -> (Value, String) {
    let mut doc = fixture_doc("kvm-guest-remedies-doctor.json");
    doc["conditions"]["hostname"] = Value::from(this_host());
    // The remedy the rule adds where the cpuidle driver is haltpoll: the sysfs value now, with
    // its try line (the fixture's guest has no such driver, so it has the boot options only).
    let wakeup = doc["findings"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["id"] == "cross-cpu-wakeup")
        .unwrap();
    let remedies = wakeup["remedies"].as_array_mut().unwrap();
    let mut now = remedies
        .iter()
        .find(|r| {
            r["command"]
                .as_str()
                .unwrap()
                .contains("guest_halt_poll_ns=200000")
        })
        .expect("the fixture's guest halt polling remedy")
        .clone();
    now["command"] =
        Value::from("echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns");
    now["try_command"] = Value::from(HALT_POLL_TRY);
    now["changes"] = serde_json::json!([{"kind": "module-param", "module": "haltpoll",
        "param": "guest_halt_poll_ns", "value": "200000"}]);
    remedies.insert(0, now);
    let result = dir.join("doctor.json");
    std::fs::write(&result, doc.to_string()).unwrap();
    let run = |json: bool| {
        let out = dir.join(if json { "out-json" } else { "out-text" });
        let mut c = cpulab();
        c.arg("--history").arg(history).arg("remedy").arg(&result);
        c.arg("--out").arg(&out).args(["--format", "modprobe"]);
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        common::assert_success(&o);
        o.stdout
    };
    let plan: Value = serde_json::from_slice(&run(true)).unwrap();
    let text = String::from_utf8(run(false)).unwrap();
    (plan, text)
}

fn halt_poll_deployment(plan: &Value) -> &Value {
    plan["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["changes"].as_array().unwrap().len() == 1 && d["changes"][0]["module"] == "haltpoll"
        })
        .unwrap_or_else(|| panic!("the guest halt polling remedy: {plan}"))
}

/// A remedy shows the newest `cpulab try` of its settings on this host from the history, with
/// its interval and date, in the JSON, the text and the README; a trial of another host is not
/// this host's, and without one the remedy names the line that measures it.
#[test]
fn a_trial_in_the_history_is_what_the_remedy_buys_measured_here() {
    let tmp = tempfile::tempdir().unwrap();
    let history = tmp.path().join("history.sqlite");
    let (t_old, t_new) = (1_700_000_000, 1_800_000_000);
    import_trial(tmp.path(), &history, &this_host(), t_old);
    import_trial(tmp.path(), &history, &this_host(), t_new);
    import_trial(tmp.path(), &history, "some-other-host", t_new + 100);
    let (plan, text) = remedy_with_history(tmp.path(), &history);
    let t = &halt_poll_deployment(&plan)["tried_here"];
    assert_eq!(t["time_unix_s"], t_new, "the newest of this host's: {t}");
    let run = t["run"].as_i64().expect("the history run");
    let words = t["text"].as_str().unwrap();
    assert!(words.contains(&format!("history @{run}")), "{words}");
    assert!(
        words.contains("2027-01-15 08:00 UTC") && words.contains(HALT_POLL_TRY),
        "{words}"
    );
    // The headline figure with its interval, as the trial file recorded it (the command's wall
    // time, its second comparison: 0.9506x [0.7413, 1.1599]), not as this code recomputes it.
    let trial: Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixture("try-rate.json")).unwrap())
            .unwrap();
    assert_eq!(
        t["figures"][0]["ratio"], trial["trial"]["comparisons"][1]["ratio"],
        "{t}"
    );
    assert!(words.contains("0.95x [0.74, 1.16]"), "{words}");
    assert!(text.contains(&format!("tried here: {words}")), "{text}");
    let readme = std::fs::read_to_string(tmp.path().join("out-text/README.md")).unwrap();
    assert!(readme.contains(words), "{readme}");

    // Only another host's trial: none recorded here, and the line that measures it.
    let other = tempfile::tempdir().unwrap();
    let history = other.path().join("history.sqlite");
    import_trial(other.path(), &history, "some-other-host", t_new);
    let (plan, _) = remedy_with_history(other.path(), &history);
    let t = &halt_poll_deployment(&plan)["tried_here"];
    assert!(t.get("run").is_none(), "{t}");
    assert_eq!(
        t["text"],
        format!("no trial recorded on this host; run: {HALT_POLL_TRY}")
    );
}

const SWAPPINESS: &str = "/proc/sys/vm/swappiness";

/// Writes vm.swappiness back and removes what apply installed and kept, however the test ends.
struct RestoreSysctl {
    before: String,
    files: Vec<PathBuf>,
}

impl Drop for RestoreSysctl {
    fn drop(&mut self) {
        if std::fs::read_to_string(SWAPPINESS).ok().as_deref() != Some(self.before.as_str()) {
            let _ = std::fs::write(SWAPPINESS, self.before.trim());
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The sysctl form both ways, for real (root). No rule proposes a sysctl yet, so the result
/// gets a synthetic remedy setting `vm.swappiness` to a value it does not have: verify exits 1
/// before, apply (keep the value, install the `sysctl.d` file, `sysctl -p` it) makes it hold,
/// verify exits 0, undo removes the file and writes the kept value back, verify exits 1 again
/// and the value is what it was. `sysctl -p` prints the setting, so the file was read; as a
/// control, a copy naming a key the kernel lacks is refused. A guard writes the value back and
/// removes the files should anything fail.
#[test]
fn the_sysctl_form_applies_verifies_and_undoes_on_this_machine() {
    let test = test_name!();
    if !common::installed(test, &[("sysctl", "procps")]) {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        common::skipped(
            test,
            "sysctl -p writes /proc/sys, which needs root; CI runs as root",
        );
        return;
    }
    let Ok(before) = std::fs::read_to_string(SWAPPINESS) else {
        return common::skipped(test, "no /proc/sys/vm/swappiness here");
    };
    let current = before.trim().to_string();
    let want = if current == "10" { "11" } else { "10" };
    let tmp = tempfile::tempdir().unwrap();
    let mut doc = fixture_doc("kvm-guest-remedies-doctor.json");
    doc["findings"][0]["remedies"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "command": format!("sysctl -w vm.swappiness={want}"),
            "effect": "A synthetic remedy that changes a harmless setting.",
            "cost_caveat": "None.",
            "site": "this-machine",
            "changes": [{"kind": "sysctl", "key": "vm.swappiness", "value": want}]
        }));
    let result = tmp.path().join("doctor.json");
    std::fs::write(&result, doc.to_string()).unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "sysctl"]);
    let f = form(deployment(&plan, "sysctl"), "sysctl");
    let installed = PathBuf::from(f["files"][0]["install_to"].as_str().unwrap());
    let kept = PathBuf::from(format!("{}.vm.swappiness.before", installed.display()));
    for p in [&installed, &kept] {
        if p.exists() {
            return common::skipped(test, &format!("{} exists already: not ours", p.display()));
        }
    }
    let _restore = RestoreSysctl {
        before: before.clone(),
        files: vec![installed.clone(), kept.clone()],
    };
    let verify = || run_lines(&f["verify"], &out);
    assert_eq!(verify(), [false], "vm.swappiness is {current} before");
    assert_eq!(run_lines(&f["apply"], &out), [true, true, true]);
    assert_eq!(std::fs::read_to_string(SWAPPINESS).unwrap().trim(), want);
    assert_eq!(verify(), [true]);
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), before);
    assert_eq!(run_lines(&f["undo"], &out), [true, true]);
    assert_eq!(std::fs::read_to_string(SWAPPINESS).unwrap(), before);
    assert_eq!(verify(), [false], "undone");
    assert!(!installed.exists() && !kept.exists());
    // sysctl reads the generated file (from the output directory, nothing installed).
    let file = out.join(f["files"][0]["path"].as_str().unwrap());
    let o = std::process::Command::new("sysctl")
        .arg("-p")
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("vm.swappiness = {want}")
    );
    std::fs::write(SWAPPINESS, &current).unwrap();
    // The control: a key this kernel lacks is refused.
    let bad = tmp.path().join("bad.conf");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&bad, text.replace("vm.swappiness", "vm.cpulab_no_such_key")).unwrap();
    let o = std::process::Command::new("sysctl")
        .arg("-p")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success(), "sysctl read the file");
    assert_eq!(std::fs::read_to_string(SWAPPINESS).unwrap(), before);
}

/// A doctor run of the history is taken as `@ID`, as `report` and `compare` take it: the same
/// files as from the saved result (it was read as a file name, "cannot read @1"), and a run of
/// another kind is refused in one line.
#[test]
fn a_history_run_is_taken_as_at_id() {
    let tmp = tempfile::tempdir().unwrap();
    let result = with_unit(tmp.path(), UNIT);
    let h = tmp.path().join("h.sqlite");
    let hs = h.to_str().unwrap();
    let pingpong = common::fixture("results").join("pingpong.json");
    cpulab()
        .args(["--history", hs, "history", "import", "-q"])
        .arg(&result)
        .arg(&pingpong)
        .assert()
        .success();
    let from_file = remedy_json(&result, &tmp.path().join("a"), &[]);
    let from_history = remedy_json(Path::new("@1"), &tmp.path().join("b"), &["--history", hs]);
    // The same remedies, forms, files and commands; only the words naming the source differ.
    assert!(!from_file["deployments"].as_array().unwrap().is_empty());
    assert_eq!(from_file["deployments"], from_history["deployments"]);
    assert_eq!(from_file["undeployable"], from_history["undeployable"]);
    assert_eq!(
        from_history["context"]["source"]
            .as_str()
            .map(|s| s.starts_with("@1 ")),
        Some(true)
    );
    let o = tmp.path().join("c");
    common::bad_input(&[
        "--history",
        hs,
        "remedy",
        "@2",
        "--out",
        o.to_str().unwrap(),
    ]);
    assert!(!o.exists(), "nothing written for a pingpong run");
}

/// Kills and reaps the process the affinity test starts, however the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The systemd form's check of the main process's affinity, proven both ways on a bare process
/// the test starts, with no systemd (tests/systemd_container.rs runs the form under one): a
/// stand-in `systemctl` (first on the verify's PATH) answers `show -P MainPID` with the
/// process's pid, and `taskset` moves it as the service's restart with `CPUAffinity=` would.
/// Verify exits 1 while the process may run on every CPU, 0 once it is pinned to the
/// remedy's CPUs, 1 again once it is given every CPU back.
#[test]
fn the_main_process_affinity_verify_fails_before_the_pin_and_passes_after() {
    let test = test_name!();
    if !common::installed(test, &[("taskset", "util-linux")]) {
        return;
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = online.trim();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&with_unit(tmp.path(), UNIT), &out, &["--format", "systemd"]);
    let pin = deployment(&plan, "pin");
    let cpus = pin["changes"][0]["cpus"].as_str().unwrap().to_string();
    if cpus == online {
        return common::skipped(
            test,
            &format!("the pin's CPUs {cpus} are every online CPU here: nothing to move"),
        );
    }
    let verify = form(pin, "systemd")["verify"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| line(c).contains("Cpus_allowed_list"))
        .expect("the main process's affinity check")
        .clone();
    let child = Child(
        std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id().to_string();
    let shim = tmp.path().join("bin");
    std::fs::create_dir(&shim).unwrap();
    let systemctl = shim.join("systemctl");
    std::fs::write(
        &systemctl,
        format!(
            "#!/bin/sh\n[ \"$1 $2 $3 $4\" = 'show -P MainPID {UNIT}' ] && echo {pid} && exit 0\nexit 1\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        shim.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let argv: Vec<String> = shell_words::split(&line(&verify)).unwrap();
    let holds = || {
        std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env("PATH", &path)
            .status()
            .unwrap()
            .success()
    };
    let taskset = |list: &str| {
        let o = std::process::Command::new("taskset")
            .args(["-pc", list, &pid])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    taskset(online);
    assert!(!holds(), "fails while {pid} may run on {online}");
    taskset(&cpus);
    assert!(holds(), "passes once {pid} is pinned to {cpus}");
    taskset(online);
    assert!(!holds(), "fails again once {pid} has {online} back");
}

/// `cpulab host` on fixture `name` (its stacked VM kept busy through the window), saved in
/// `dir` as `host.json`.
fn host_result(dir: &Path, name: &str) -> (PathBuf, Value) {
    let (_copy, v) = common::hostfixture::watch(name);
    let path = dir.join("host.json");
    std::fs::write(&path, v.to_string()).unwrap();
    (path, v)
}

fn shown(commands: &Value) -> Vec<String> {
    commands.as_array().unwrap().iter().map(line).collect()
}

/// A `cpulab host` result's stacked vCPUs as files: for the 2-socket Intel's libvirt domain the
/// `<cputune>` with the host's own CPUs (valid libvirt XML in a domain), `virsh vcpupin ...
/// --live --config` per vCPU and `virsh emulatorpin`, undone to each thread's affinity before;
/// for the Opteron's and the EPYC's bare QEMU a taskset script per vCPU thread instead. Each
/// README names the VM and the finding, and its check is `cpulab host --expect-absent`.
#[test]
fn a_host_result_is_written_as_virsh_for_a_domain_and_taskset_for_a_bare_qemu() {
    let tmp = tempfile::tempdir().unwrap();
    let (result, host) = host_result(tmp.path(), "intel-2s");
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &[]);
    let ds = plan["deployments"].as_array().unwrap();
    assert_eq!(ds.len(), 1, "{plan}");
    let d = &ds[0];
    assert_eq!(d["findings"], serde_json::json!(["stacked-vcpus"]));
    assert_eq!(
        d["verify_finding"],
        "cpulab host --pid 4242 --expect-absent stacked-vcpus"
    );
    assert_eq!(d["site"], "this-machine");
    let f = host["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["pid"] == 4242)
        .unwrap();
    let pins: Vec<(u64, u64, String)> = f["pins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["vcpu"].as_u64().unwrap(),
                p["cpu"].as_u64().unwrap(),
                p["before"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let emulator = f["emulator"].as_str().unwrap();
    let libvirt = form(d, "libvirt");
    let file = &libvirt["files"][0];
    assert!(file["placeholder"].is_null(), "{file}");
    let xml = std::fs::read_to_string(out.join(file["path"].as_str().unwrap())).unwrap();
    let apply = shown(&libvirt["apply"]);
    let undo = shown(&libvirt["undo"]);
    for (vcpu, cpu, before) in &pins {
        assert!(
            xml.contains(&format!("<vcpupin vcpu='{vcpu}' cpuset='{cpu}'/>")),
            "{xml}"
        );
        let pin = format!("virsh vcpupin db1 {vcpu} {cpu} --live --config");
        assert!(apply.contains(&pin), "{apply:?}");
        let back = format!("virsh vcpupin db1 {vcpu} {before} --live --config");
        assert!(undo.contains(&back), "{undo:?}");
    }
    assert!(xml.contains(&format!("<emulatorpin cpuset='{emulator}'/>")));
    assert!(apply.contains(&format!("virsh emulatorpin db1 {emulator} --live --config")));
    // Through virsh and the threads' own affinity: two checks per vCPU, one for the emulator.
    assert_eq!(
        libvirt["verify"].as_array().unwrap().len(),
        2 * pins.len() + 1
    );
    let skipped = d["skipped"].as_array().unwrap();
    assert!(
        skipped.iter().any(|s| s["format"] == "taskset"
            && s["reason"]
                .as_str()
                .unwrap()
                .contains("libvirt runs this VM")),
        "{skipped:?}"
    );
    let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
    for words in ["db1 (4242)", "stacked-vcpus", "SMT siblings of one core"] {
        assert!(readme.contains(words), "{words}: {readme}");
    }
    if common::installed(test_name!(), &[("virt-xml-validate", "libvirt-clients")]) {
        let domain = tmp.path().join("domain.xml");
        std::fs::write(
            &domain,
            format!(
                "<domain type='kvm'>\n<name>db1</name>\n<memory unit='MiB'>512</memory>\n\
                 <vcpu placement='static'>{}</vcpu>\n{xml}<os><type arch='x86_64'>hvm</type></os>\n</domain>\n",
                pins.len()
            ),
        )
        .unwrap();
        let o = std::process::Command::new("virt-xml-validate")
            .arg(&domain)
            .arg("domain")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for (name, pid, vcpus) in [("opteron-6376", 6161, 2), ("epyc-4ccx", 5151, 4)] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let (result, host) = host_result(&dir, name);
        let out = dir.join("out");
        let plan = remedy_json(&result, &out, &[]);
        let d = &plan["deployments"][0];
        let f = host["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["pid"] == pid)
            .unwrap();
        let t = form(d, "taskset");
        let apply = shown(&t["apply"]);
        let script =
            std::fs::read_to_string(out.join(d["id"].as_str().unwrap()).join("taskset/apply.sh"))
                .unwrap();
        for p in f["pins"].as_array().unwrap() {
            let l = format!("taskset -p -c {} {}", p["cpu"], p["tid"]);
            assert!(apply.contains(&l), "{name}: {apply:?}");
            assert!(script.contains(&l), "{name}: {script}");
        }
        assert_eq!(f["pins"].as_array().unwrap().len(), vcpus);
        // Per vCPU thread its affinity and where it ran; the main thread's affinity.
        assert_eq!(
            t["verify"].as_array().unwrap().len(),
            2 * vcpus + 1,
            "{name}"
        );
        assert!(
            d["skipped"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["format"] == "libvirt"
                    && s["reason"]
                        .as_str()
                        .unwrap()
                        .contains("libvirt does not run this VM")),
            "{name}: {d}"
        );
        let readme = std::fs::read_to_string(out.join("README.md")).unwrap();
        assert!(readme.contains(&format!("({pid})")), "{name}: {readme}");
    }
}

/// The taskset form run for real on a process of two threads the test starts (a sleeping main
/// thread standing for the emulator, a busy one for a vCPU), its result a host finding pinning
/// that thread: verify exits 1 before, the apply script pins it, verify exits 0 (the thread's
/// affinity and the CPU it ran on), the undo script gives both threads their affinity back,
/// and verify exits 1 again.
#[test]
fn the_taskset_form_pins_a_running_thread_and_its_undo_puts_the_affinity_back() {
    if !common::installed(
        test_name!(),
        &[("python3", "python3"), ("taskset", "util-linux")],
    ) {
        return;
    }
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online < 2 {
        common::skipped(test_name!(), "one CPU here: no pin to move a thread to");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_, mut host) = host_result(tmp.path(), "opteron-6376");
    let child = std::process::Command::new("python3")
        .args([
            "-c",
            "import threading, time\n\
             def spin():\n    while True: pass\n\
             threading.Thread(target=spin, daemon=True).start()\ntime.sleep(60)\n",
        ])
        .spawn()
        .unwrap();
    let child = Child(child);
    let pid = child.0.id() as i64;
    let tid = loop {
        let tids: Vec<i64> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|t| *t != pid)
            .collect();
        if let Some(t) = tids.first() {
            break *t;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let status = |t: i64| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{t}/status"))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("Cpus_allowed_list:")
                    .map(|v| v.trim().to_string())
            })
            .unwrap()
    };
    let before = status(tid);
    let cpus: Vec<u32> = before
        .split(',')
        .flat_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()
        })
        .collect();
    if cpus.len() < 2 {
        common::skipped(test_name!(), "this test may use one CPU only");
        return;
    }
    let (vcpu_cpu, emulator) = (cpus[1], cpus[0]);
    let f = &mut host["findings"][0];
    f["vm"] = Value::from(format!("python3 ({pid})"));
    f["pid"] = Value::from(pid);
    f["pins"] = serde_json::json!([{"vcpu": 0, "tid": tid, "cpu": vcpu_cpu, "before": before}]);
    f["emulator"] = Value::from(emulator.to_string());
    host["findings"] = Value::from(vec![f.clone()]);
    let result = tmp.path().join("pins.json");
    std::fs::write(&result, host.to_string()).unwrap();
    let out = tmp.path().join("out");
    let plan = remedy_json(&result, &out, &["--format", "taskset"]);
    let id = plan["deployments"][0]["id"].as_str().unwrap().to_string();
    let sh = |script: &str| {
        std::process::Command::new("sh")
            .arg(format!("{id}/taskset/{script}"))
            .current_dir(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    assert!(!sh("verify.sh"), "verify passes before the apply");
    assert!(sh("apply.sh"));
    assert!(sh("verify.sh"), "verify fails after the apply");
    assert_eq!(status(tid), vcpu_cpu.to_string());
    assert_eq!(status(pid), emulator.to_string());
    assert!(sh("undo.sh"));
    assert!(!sh("verify.sh"), "verify passes after the undo");
    assert_eq!(status(tid), before);
    assert_eq!(status(pid), before);
    assert!(
        !out.join(&id).join("taskset/main-thread.before").exists(),
        "undo removes the kept affinity"
    );
}

/// Without a RESULT and no doctor run in the history, the newest `cpulab host` run of this
/// host is taken.
#[test]
fn without_a_result_the_newest_host_run_is_taken_when_no_doctor_run_is_there() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, mut host) = host_result(tmp.path(), "opteron-6376");
    host["conditions"]["hostname"] = Value::from(this_host());
    let result = tmp.path().join("mine.json");
    std::fs::write(&result, host.to_string()).unwrap();
    let h = tmp.path().join("h.sqlite");
    let hs = h.to_str().unwrap();
    cpulab()
        .args(["--history", hs, "history", "import", "-q"])
        .arg(&result)
        .assert()
        .success();
    let o = cpulab()
        .args(["--history", hs, "remedy", "--json", "--out"])
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let plan = json_of(&o);
    assert!(
        plan["context"]["source"]
            .as_str()
            .unwrap()
            .starts_with("history run @1 (`cpulab host` run on "),
        "{}",
        plan["context"]["source"]
    );
    assert_eq!(plan["deployments"][0]["findings"][0], "stacked-vcpus");
}
