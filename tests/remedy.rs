//! `cpulab remedy`: the files it writes from a saved doctor result, checked by the tools that
//! read them (systemd-analyze, modprobe), its bad input, and `doctor --expect-absent`.
//!
//! The result is `tests/fixtures/results/kvm-guest-remedies-doctor.json` (kvm-emr-16's run
//! replayed on this project's 2-vCPU KVM guest, so its remedies carry their changes as data),
//! edited structurally where a test needs the watched application's unit.

mod common;

use common::{cpulab, json_of};
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
    assert!(
        systemd["trial"][0]
            .as_str()
            .unwrap()
            .starts_with(&format!("systemctl set-property --runtime {UNIT} "))
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
        .find(|d| d["site"] == "host");
    if let Some(h) = host {
        assert!(
            form(h, "modprobe")["notes"][0]
                .as_str()
                .unwrap()
                .contains("for the hypervisor host, not this guest")
        );
    }
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
    assert!(!out.exists());
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
        "The doctor result has no finding: no remedy to write, no file written."
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
