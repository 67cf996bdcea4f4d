//! Under a real systemd (a container booted by `common::container`, this machine having no
//! systemd as PID 1): the harness itself (systemd is PID 1 inside, nothing of the container
//! outlives it, even when the process that started it is SIGKILLed), and `cpulab remedy`'s
//! systemd lines run on a running service: the `CPUAffinity=` drop-in applied moves every
//! process of the service to its CPUs and its verify lines pass, its undo brings the old
//! affinity back and verify fails again; the `systemctl set-property --runtime` trial is
//! accepted and undone; a pair in a real unit, watched by `cpulab doctor --comm`, gets its
//! drop-in for that unit.

mod common;

use common::container::{Container, leader_of};
use common::{cpulab, json_of};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const UNIT: &str = "cpulab-remedy-live.service";

fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie has ended; only its parent's wait is left.
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
    }
}

fn wait_gone(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    gone(pid)
}

#[test]
fn the_container_runs_systemd_as_pid_1_and_leaves_nothing_when_dropped() {
    let Some(c) = Container::boot(test_name!(), &[]) else {
        return;
    };
    eprintln!("container booted in {:.1} s", c.boot_time.as_secs_f64());
    assert_eq!(c.ok(&["cat", "/proc/1/comm"]).trim(), "systemd");
    let state = c.run(&["systemctl", "is-system-running"]);
    let state = String::from_utf8_lossy(&state.stdout).trim().to_string();
    assert!(state == "running" || state == "degraded", "{state}");
    // Its overlay is mounted in its own mount namespace only.
    let inside = c.ok(&["cat", "/proc/self/mountinfo"]);
    assert!(
        inside
            .lines()
            .any(|l| l.contains(" / ") && l.contains("overlay")),
        "{inside}"
    );
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!host.contains("cpulab-container"), "{host}");
    let (nspawn, leader) = (c.nspawn_pid(), c.leader());
    drop(c);
    assert!(gone(nspawn), "systemd-nspawn {nspawn} outlived the drop");
    assert!(
        wait_gone(leader, Duration::from_secs(5)),
        "the container's systemd {leader} outlived the drop"
    );
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!host.contains("cpulab-container"), "{host}");
}

/// The harness's parent-death signal (SIGTERM, as `setpriv --pdeathsig` sets it) halts the
/// container when the process that booted it is SIGKILLed.
#[test]
fn a_sigkilled_parent_takes_its_container_with_it() {
    let test = test_name!();
    // The same checks as the harness's, through a boot that only establishes them.
    let Some(probe) = Container::boot(test, &[]) else {
        return;
    };
    drop(probe);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/systemd-container.sh");
    let mut parent = Command::new("sh")
        .args([
            "-c",
            "setpriv --pdeathsig TERM -- \"$0\" boot >/dev/null 2>&1 & wait",
        ])
        .arg(&script)
        .spawn()
        .unwrap();
    let sh = parent.id();
    let start = Instant::now();
    let mut found = None;
    while start.elapsed() < Duration::from_secs(120) && found.is_none() {
        let children =
            std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children")).unwrap_or_default();
        found = children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
            .find_map(|n| leader_of(n).map(|l| (n, l)));
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some((nspawn, leader)) = found else {
        let _ = parent.kill();
        let _ = parent.wait();
        panic!("no container under the shell after 120 s");
    };
    parent.kill().unwrap();
    parent.wait().unwrap();
    assert!(
        wait_gone(nspawn, Duration::from_secs(30)),
        "systemd-nspawn {nspawn} outlived its SIGKILLed parent"
    );
    assert!(
        wait_gone(leader, Duration::from_secs(5)),
        "the container's systemd {leader} outlived its SIGKILLed parent"
    );
}

/// The remedy fixture with every pinning change naming `UNIT`, for a host of cgroup `version`.
fn result_for(dir: &Path, version: u64) -> std::path::PathBuf {
    let path = common::fixture("results").join("kvm-guest-remedies-doctor.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut pins = 0;
    for f in doc["findings"].as_array_mut().unwrap() {
        for r in f["remedies"].as_array_mut().unwrap() {
            for c in r["changes"].as_array_mut().into_iter().flatten() {
                if c["kind"] == "pin" {
                    c["workload"] = serde_json::json!({
                        "pids": [4242],
                        "units": [UNIT],
                        "cgroups": [format!("/system.slice/{UNIT}")]
                    });
                    pins += 1;
                }
            }
        }
    }
    assert!(pins > 0, "the fixture has pinning remedies");
    doc["facts"]["cgroup_version"] = Value::from(version);
    let out = dir.join(format!("doctor-v{version}.json"));
    std::fs::write(&out, doc.to_string()).unwrap();
    out
}

/// The systemd form of the pinning deployment `cpulab remedy` writes into `out`.
fn pin_form(result: &Path, out: &Path) -> Value {
    let plan = json_of(
        &cpulab()
            .arg("remedy")
            .arg(result)
            .arg("--out")
            .arg(out)
            .args(["--json", "--format", "systemd"])
            .output()
            .unwrap(),
    );
    let d = plan["deployments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["changes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["kind"] == "pin")
        })
        .unwrap_or_else(|| panic!("a pinning deployment: {plan}"))
        .clone();
    d["forms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["format"] == "systemd")
        .unwrap_or_else(|| panic!("a systemd form: {d}"))
        .clone()
}

/// The shell lines of a form's commands (`line`, the argument vector quoted once); a command
/// with a placeholder has none, and fails the test.
fn lines(form: &Value, key: &str) -> Vec<String> {
    form[key]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    c["line"]
                        .as_str()
                        .unwrap_or_else(|| panic!("a command with a placeholder: {c}"))
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs each line as the remedy's reader would (`sh -c`, in the remedy's directory) inside.
fn run_lines(c: &Container, dir: &Path, lines: &[String]) -> Vec<Output> {
    lines
        .iter()
        .map(|l| c.run_in(dir, &["sh", "-c", l]))
        .collect()
}

fn all_ok(c: &Container, dir: &Path, what: &str, lines: &[String]) {
    for (l, o) in lines.iter().zip(run_lines(c, dir, lines)) {
        assert!(
            o.status.success(),
            "{what} line `{l}` under systemd: {}\n{}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Whether every verify line exits 0.
fn verified(c: &Container, dir: &Path, verify: &[String]) -> bool {
    run_lines(c, dir, verify).iter().all(|o| o.status.success())
}

/// `Cpus_allowed_list` of every process of the unit, once its processes are the current main
/// process and its child: after a restart the old generation's second process may still be
/// ending for a moment (SIGTERM sent, the stop job done with the main process; cgroup v1 gives
/// systemd no reliable word of an empty group). Waits up to 10 s.
fn affinities(c: &Container, v2: bool) -> Vec<String> {
    let start = Instant::now();
    loop {
        let main = c.ok(&["systemctl", "show", "-P", "MainPID", UNIT]);
        let main = main.trim();
        let found = processes(c, v2);
        let current = found.len() == 2
            && found.iter().any(|(pid, _, _)| pid == main)
            && found
                .iter()
                .all(|(pid, ppid, _)| pid == main || ppid == main);
        if current {
            return found.into_iter().map(|(_, _, cpus)| cpus).collect();
        }
        if start.elapsed() > Duration::from_secs(10) {
            let journal = c.run(&[
                "journalctl",
                "-u",
                UNIT,
                "--no-pager",
                "-o",
                "short-monotonic",
            ]);
            let ps = c.run(&[
                "sh",
                "-c",
                "for p in /proc/[0-9]*; do echo \"$p $(tr '\\0' ' ' < $p/cmdline)\"; done",
            ]);
            panic!(
                "the unit's processes are not its main process {main} and its child: {found:?}\n{}\n{}",
                String::from_utf8_lossy(&journal.stdout),
                String::from_utf8_lossy(&ps.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (pid, parent pid, `Cpus_allowed_list`) of every process in the unit's cgroup now, read
/// inside the container.
fn processes(c: &Container, v2: bool) -> Vec<(String, String, String)> {
    let group = c.ok(&["systemctl", "show", "-P", "ControlGroup", UNIT]);
    let procs = if v2 {
        format!("/sys/fs/cgroup{}/cgroup.procs", group.trim())
    } else {
        format!("/sys/fs/cgroup/systemd{}/cgroup.procs", group.trim())
    };
    let pids = c.ok(&["cat", &procs]);
    let mut found = Vec::new();
    for pid in pids.split_whitespace() {
        // A process that ended since the list was read is not one of the unit's.
        let status = c.run(&["cat", &format!("/proc/{pid}/status")]);
        let status = String::from_utf8_lossy(&status.stdout);
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        if let (Some(ppid), Some(cpus)) = (field("PPid:"), field("Cpus_allowed_list:")) {
            found.push((pid.to_string(), ppid, cpus));
        }
    }
    found
}

/// The cgroup hierarchy inside: (unified, with the cpuset controller).
fn hierarchy(c: &Container) -> (bool, bool) {
    let o = c.run(&["cat", "/sys/fs/cgroup/cgroup.controllers"]);
    let controllers = String::from_utf8_lossy(&o.stdout).to_string();
    (
        o.status.success(),
        controllers.split_whitespace().any(|w| w == "cpuset"),
    )
}

fn start_unit(c: &Container) {
    // Two processes, so that "the service's processes" is more than its main one. The child
    // ends with its parent (the parent-death signal): in this container, on a host with cgroup
    // v1, systemd cannot kill a unit's control group ("Failed to kill control group ...:
    // Input/output error") and stops only the main process, so a child would outlive its
    // restart and hold the old affinity.
    let unit = "[Unit]\nDescription=a long-running service for cpulab remedy\n[Service]\n\
                ExecStart=/bin/sh -c 'setpriv --pdeathsig TERM sleep infinity & exec sleep infinity'\n";
    c.ok(&[
        "sh",
        "-c",
        "printf '%s' \"$1\" > /etc/systemd/system/$2",
        "sh",
        unit,
        UNIT,
    ]);
    c.ok(&["systemctl", "daemon-reload"]);
    c.ok(&["systemctl", "start", UNIT]);
}

#[test]
fn the_cpuaffinity_drop_in_pins_a_running_service_and_its_undo_unpins_it() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = Container::boot(test_name!(), &[tmp.path()]) else {
        return;
    };
    let (v2, _) = hierarchy(&c);
    let result = result_for(tmp.path(), if v2 { 2 } else { 1 });
    let out = tmp.path().join("out");
    let form = pin_form(&result, &out);
    let (apply, verify, undo) = (
        lines(&form, "apply"),
        lines(&form, "verify"),
        lines(&form, "undo"),
    );
    assert!(
        !apply.is_empty() && !verify.is_empty() && !undo.is_empty(),
        "{form}"
    );
    let drop_in = std::fs::read_to_string(out.join(form["files"][0]["path"].as_str().unwrap()))
        .unwrap_or_else(|e| panic!("the drop-in {form}: {e}"));
    let cpus = drop_in
        .lines()
        .find_map(|l| l.strip_prefix("CPUAffinity="))
        .unwrap_or_else(|| panic!("a CPUAffinity= drop-in: {form}"))
        .to_string();
    start_unit(&c);
    let before = affinities(&c, v2);
    assert!(
        before.iter().all(|a| *a != cpus),
        "already on {cpus}: {before:?}"
    );
    assert!(
        !verified(&c, &out, &verify),
        "verify passes before the apply: {verify:?}"
    );

    all_ok(&c, &out, "apply", &apply);
    let after = affinities(&c, v2);
    assert!(
        after.iter().all(|a| *a == cpus),
        "after the apply: {after:?}, not {cpus}"
    );
    for (l, o) in verify.iter().zip(run_lines(&c, &out, &verify)) {
        assert!(
            o.status.success(),
            "verify `{l}` after the apply: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let install = form["files"][0]["install_to"].as_str().unwrap();
    assert!(
        c.run(&["test", "-f", install]).status.success(),
        "{install} installed"
    );

    all_ok(&c, &out, "undo", &undo);
    assert_eq!(
        affinities(&c, v2),
        before,
        "undo brings the old affinity back"
    );
    assert!(
        !verified(&c, &out, &verify),
        "verify still passes after the undo: {verify:?}"
    );
    assert!(
        !c.run(&["test", "-e", install]).status.success(),
        "{install} left after undo"
    );
}

/// The trial of a cgroup v2 host's remedy (`AllowedCPUs=`, the setting `systemctl set-property`
/// takes at run time) applied to the running service, and its undo; on a cgroup v1 host's
/// remedy there is no trial to run, since `CPUAffinity=` is refused at run time.
#[test]
fn the_runtime_trial_is_accepted_by_systemd_and_undone() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(c) = Container::boot(test_name!(), &[tmp.path()]) else {
        return;
    };
    let (v2, cpuset) = hierarchy(&c);
    // The v1 remedy: no trial, nothing to reset at undo.
    let v1_form = pin_form(&result_for(tmp.path(), 1), &tmp.path().join("out-v1"));
    assert!(lines(&v1_form, "trial").is_empty(), "{v1_form}");
    assert!(
        !lines(&v1_form, "undo")
            .iter()
            .any(|l| l.contains("set-property")),
        "{v1_form}"
    );
    // What the trial would have been: refused by systemd, whole.
    start_unit(&c);
    let refused = c.run(&[
        "systemctl",
        "set-property",
        "--runtime",
        UNIT,
        "CPUAffinity=0",
    ]);
    assert!(
        !refused.status.success(),
        "systemctl set-property took CPUAffinity="
    );

    let out = tmp.path().join("out-v2");
    let form = pin_form(&result_for(tmp.path(), 2), &out);
    let trial = lines(&form, "trial");
    assert_eq!(trial.len(), 1, "{form}");
    let cpus = shell_words::split(&trial[0])
        .unwrap()
        .iter()
        .find_map(|w| w.strip_prefix("AllowedCPUs=").map(str::to_string))
        .unwrap_or_else(|| panic!("an AllowedCPUs= trial: {trial:?}"));
    let check: Vec<String> = lines(&form, "verify")
        .into_iter()
        .filter(|l| l.contains("-P AllowedCPUs "))
        .collect();
    assert_eq!(check.len(), 1, "{form}");
    let before = affinities(&c, v2);
    assert!(
        !verified(&c, &out, &check),
        "the AllowedCPUs check passes before the trial"
    );

    all_ok(&c, &out, "trial", &trial);
    assert!(
        verified(&c, &out, &check),
        "the AllowedCPUs check fails after the trial"
    );
    let during = affinities(&c, v2);
    if v2 && cpuset {
        assert!(
            during.iter().all(|a| *a == cpus),
            "during the trial: {during:?}, not {cpus}"
        );
    } else {
        // systemd records AllowedCPUs= without the cgroup v2 cpuset controller but cannot act on
        // it (which is why a cgroup v1 host's remedy leaves it out): nothing moved.
        assert_eq!(
            during, before,
            "AllowedCPUs= moved processes without a v2 cpuset"
        );
    }

    let reset: Vec<String> = lines(&form, "undo")
        .into_iter()
        .filter(|l| l.contains("set-property --runtime"))
        .collect();
    assert_eq!(reset.len(), 1, "{form}");
    // The trial's own undo: the rest of the undo lines take back the drop-in, never installed
    // here (and restarting with AllowedCPUs= recorded fails at random on a cgroup v1 host:
    // status 219/CGROUP).
    all_ok(&c, &out, "undo", &reset);
    assert!(
        !verified(&c, &out, &check),
        "the AllowedCPUs check passes after the undo"
    );
    assert_eq!(
        c.ok(&["systemctl", "show", "-P", "AllowedCPUs", UNIT])
            .trim(),
        ""
    );
    assert_eq!(
        affinities(&c, v2),
        before,
        "undo brings the old affinity back"
    );
}

const PAIR_UNIT: &str = "cpulab-pair-live.service";

/// A pair of processes in a real unit, started by the container's systemd, watched by
/// `cpulab doctor --comm`: the doctor reads the unit from their cgroup, and the pinning
/// remedy's drop-in is for that unit, with no `UNIT-NOT-NAMED` placeholder.
#[test]
fn a_pair_in_a_unit_is_named_by_the_doctor_and_gets_that_units_drop_in() {
    let test = test_name!();
    let bin = common::cpulab_path();
    let Some(c) = Container::boot(test, &[bin.parent().unwrap()]) else {
        return;
    };
    // The binary under test under a name of its own, so --comm watches the pair alone: one
    // unpinned pair of processes, each run long enough (up to 300 s) that the doctor's watch
    // sees the same two processes throughout.
    c.ok(&["cp", bin.to_str().unwrap(), "/usr/local/bin/pingpair"]);
    let unit = "[Unit]\nDescription=a wakeup pair for cpulab doctor --comm\n[Service]\n\
                Environment=CPULAB_HISTORY=off\n\
                ExecStart=/bin/sh -c 'while :; do pingpair pingpong --processes --pairs unpinned \
                --max-time 300s --target-ci 0.001 --quiet --no-load-check >/dev/null || exit 1; done'\n";
    c.ok(&[
        "sh",
        "-c",
        "printf '%s' \"$1\" > /etc/systemd/system/$2",
        "sh",
        unit,
        PAIR_UNIT,
    ]);
    c.ok(&["systemctl", "daemon-reload"]);
    c.ok(&["systemctl", "start", PAIR_UNIT]);
    let start = Instant::now();
    loop {
        let comms = c.run(&["sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null"]);
        if String::from_utf8_lossy(&comms.stdout)
            .lines()
            .filter(|l| *l == "pingpair")
            .count()
            >= 2
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pair did not start: {}",
            String::from_utf8_lossy(&c.run(&["journalctl", "-u", PAIR_UNIT, "--no-pager"]).stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The doctor runs on this machine, as on a host whose services include a container's: its
    // watch names processes by the kernel's pids, which are this machine's, and reads their
    // cgroup from this machine's /proc.
    let o = cpulab()
        .args(["doctor", "--quick", "--json", "--comm", "pingpair"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let live = json_of(&o);
    let units: Vec<&Value> = live["measurements"]["app_watch"]["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("the watch ran: {}", live["measurements"]["app_watch"]))
        .iter()
        .map(|p| &p["unit"])
        .collect();
    assert!(
        units.iter().all(|u| u.as_str() == Some(PAIR_UNIT)) && !units.is_empty(),
        "the doctor read the unit from the pair's cgroup: {units:?}: {}",
        live["measurements"]["app_watch"]
    );
    let watched = common::pgpair::watched_pids(&live);
    let replayed = common::pgpair::replay_with_penalty(&live);
    let tmp = tempfile::tempdir().unwrap();
    let result = tmp.path().join("doctor.json");
    std::fs::write(&result, replayed.to_string()).unwrap();
    let form = pin_form(&result, &tmp.path().join("out"));
    let files = form["files"].as_array().unwrap();
    assert!(!files.is_empty(), "{form}");
    for f in files {
        assert_eq!(
            f["install_to"]
                .as_str()
                .and_then(|t| t.strip_prefix("/etc/systemd/system/"))
                .and_then(|t| t.split_once(".d/"))
                .map(|(u, _)| u),
            Some(PAIR_UNIT),
            "every drop-in is for the pair's unit: {f}"
        );
        assert!(f["placeholder"].is_null(), "{f}");
    }
    assert!(!watched.is_empty());
}
