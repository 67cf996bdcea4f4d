//! `cpulab try` on copies of fixture trees: the plan, bad input, a whole trial with its journal
//! and restore, a leftover journal found at start, and the result through `report` and `compare`.
//! Nothing here touches the live machine's settings (see tests/try_live.rs for that).

mod common;

use common::{cpulab, cpulab_as_nobody, fixture_copy as copy};
use std::path::{Path, PathBuf};

fn poll_ns(root: &Path) -> PathBuf {
    root.join("sys/module/haltpoll/parameters/guest_halt_poll_ns")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

/// A measurement that needs nothing from the machine: the trial's mechanics are under test.
const MEASURE: [&str; 4] = [
    "--measure",
    "cmd:echo v 5",
    "--metric",
    r"v (?P<value>[0-9]+)",
];

#[test]
fn dry_run_prints_the_writes_and_writes_nothing() {
    let d = copy("kvm-guest");
    let out = common::cpulab_on(d.path())
        .args(["try", "haltpoll.guest_halt_poll_ns=200000", "--dry-run"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("echo 200000 > {}", poll_ns(d.path()).display())),
        "{text}"
    );
    assert!(
        text.contains("haltpoll.guest_halt_poll_ns=200000"),
        "kernel command line form"
    );
    assert_eq!(read(&poll_ns(d.path())), "0");
    assert!(!d.path().join("run/cpulab/try.journal").exists());
}

#[test]
fn bad_input_is_one_line_exit_2_and_writes_nothing() {
    let d = copy("kvm-guest");
    for (arg, want) in [
        ("haltpoll.nonsense=1", "unknown setting"),
        ("haltpoll.guest_halt_poll_ns=-5", "not a whole number"),
        ("haltpoll.guest_halt_poll_ns=99999999999", "out of range"),
        ("cpufreq.governor=performance", "not exposed"),
        ("pid:999999999.affinity=0", "no process"),
        ("cpuidle_haltpoll.force=1", "kernel command line"),
        ("smt.control=off", "cannot be tried here"),
        ("cpuidle.disable=C6", "no idle state"),
        ("kernel.sched_nonexistent=1", "no sysctl"),
        ("haltpoll.guest_halt_poll_ns", "not SETTING=VALUE"),
    ] {
        let out = common::cpulab_on(d.path())
            .args(["try", arg])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{arg}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{arg}: {err}");
        assert!(err.contains(want), "{arg}: {err}");
    }
    assert_eq!(read(&poll_ns(d.path())), "0");
    assert!(!d.path().join("run/cpulab/try.journal").exists());
}

#[test]
fn list_shows_current_values_and_why_not() {
    let d = copy("kvm-guest");
    let out = common::cpulab_on(d.path())
        .args(["try", "--list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.starts_with("SETTING "),
        "a header names the columns: {text}"
    );
    let row = |n: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(n))
            .unwrap_or_else(|| panic!("{n} listed: {text}"))
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        row("haltpoll.guest_halt_poll_ns").starts_with("0 yes"),
        "{text}"
    );
    assert!(row("cpuidle_haltpoll.force").contains("boot-time only"));
    assert!(row("cpufreq.governor").starts_with("- no:"), "{text}");
    // A listing is not a result: no envelope, so no --json.
    let out = common::cpulab_on(d.path())
        .args(["try", "--list", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_trial_on_a_copy_restores_and_report_and_compare_read_it() {
    let d = copy("kvm-guest");
    let out = common::cpulab_on(d.path())
        .args([
            "try",
            "haltpoll.guest_halt_poll_ns=200000",
            "cpuidle.disable=state1@1",
        ])
        .args(MEASURE)
        .args(["--json", "--quiet"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let v = common::json_of(&out);
    assert_eq!(v["kind"], "try");
    assert_eq!(v["cpulab_schema"], 1);
    let rounds = v["trial"]["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 6);
    // ABAB...: sides alternate, baseline first.
    for (i, r) in rounds.iter().enumerate() {
        let want = if i % 2 == 0 { "baseline" } else { "changed" };
        assert_eq!(r["side"], want);
    }
    let c = &v["trial"]["comparisons"][0];
    assert_eq!(c["baseline_rounds"].as_array().unwrap().len(), 3);
    assert_eq!(c["verdict"], "no-difference", "the same echo on both sides");
    assert_eq!(v["restore"]["restored"], true);
    assert_eq!(read(&poll_ns(d.path())), "0");
    let dis = d
        .path()
        .join("sys/devices/system/cpu/cpu1/cpuidle/state1/disable");
    assert_eq!(read(&dis), "0");
    assert!(!d.path().join("run/cpulab/try.journal").exists());

    let f = d.path().join("t.json");
    std::fs::write(&f, &out.stdout).unwrap();
    let html = d.path().join("t.html");
    let r = cpulab().arg("report").arg(&f).output().unwrap();
    assert!(r.status.success());
    assert!(String::from_utf8_lossy(&r.stdout).contains("Summary"));
    let r = cpulab()
        .arg("report")
        .arg(&f)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert!(r.status.success());
    assert!(std::fs::read_to_string(&html).unwrap().contains("<table>"));
    let r = cpulab()
        .args(["compare", "--json"])
        .arg(&f)
        .arg(&f)
        .output()
        .unwrap();
    common::assert_same_as_itself(&common::json_of(&r));
}

#[test]
fn keep_leaves_the_value_and_says_how_to_undo() {
    let d = copy("kvm-guest");
    let out = common::cpulab_on(d.path())
        .args([
            "try",
            "haltpoll.guest_halt_poll_ns=150000",
            "--keep",
            "--quiet",
        ])
        .args(MEASURE)
        .output()
        .unwrap();
    common::assert_success(&out);
    assert_eq!(read(&poll_ns(d.path())), "150000");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("echo 0 > {}", poll_ns(d.path()).display())),
        "{text}"
    );
    assert!(!d.path().join("run/cpulab/try.journal").exists());
}

#[test]
fn a_leftover_journal_is_restored_by_the_next_start() {
    let d = copy("kvm-guest");
    let p = poll_ns(d.path());
    std::fs::write(&p, "200000\n").unwrap();
    let dir = d.path().join("run/cpulab");
    std::fs::create_dir_all(&dir).unwrap();
    let journal = serde_json::json!({
        "pid": 4242, "started_unix_s": 0, "command": "cpulab try haltpoll.guest_halt_poll_ns=200000",
        "entries": [{"setting": "haltpoll.guest_halt_poll_ns",
                     "target": {"type": "file", "path": p},
                     "original": "0", "changed": "200000"}]
    });
    std::fs::write(dir.join("try.journal"), journal.to_string()).unwrap();
    // Any command restores it (one stat when there is nothing).
    let out = common::cpulab_on(d.path())
        .args(["try", "--list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("restored haltpoll.guest_halt_poll_ns") && err.contains("4242"),
        "{err}"
    );
    assert_eq!(read(&p), "0");
    assert!(!dir.join("try.journal").exists());
    // And `--restore` then finds nothing.
    let out = common::cpulab_on(d.path())
        .args(["try", "--restore"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to restore"));
}

#[test]
fn a_tuned_profile_is_expanded_on_a_server_copy() {
    let d = copy("intel-2s");
    let prof = d.path().join("profiles/latency-performance");
    std::fs::create_dir_all(&prof).unwrap();
    std::fs::create_dir_all(d.path().join("profiles/throughput-performance")).unwrap();
    std::fs::write(
        d.path().join("profiles/throughput-performance/tuned.conf"),
        "[main]\nsummary=x\n[cpu]\ngovernor=performance\n[sysctl]\nkernel.sched_autogroup_enabled=1\nvm.swappiness=10\n",
    )
    .unwrap();
    std::fs::write(
        prof.join("tuned.conf"),
        "[main]\ninclude=throughput-performance\n[cpu]\nforce_latency=1\n",
    )
    .unwrap();
    let out = common::cpulab_on(d.path())
        .args([
            "try",
            "tuned:latency-performance",
            "--dry-run",
            "--profile-dir",
        ])
        .arg(d.path().join("profiles"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    common::assert_success(&out);
    assert!(text.contains("cpufreq.governor = performance"), "{text}");
    assert!(text.contains("cpuidle.max_latency_us = 1"), "{text}");
    assert!(
        text.contains("kernel.sched_autogroup_enabled = 1"),
        "{text}"
    );
    assert!(text.contains("not tried: [sysctl] vm.swappiness"), "{text}");
    // And tried, on the copy, with each item alone too.
    let out = common::cpulab_on(d.path())
        .args([
            "try",
            "tuned:latency-performance",
            "--each",
            "--json",
            "--quiet",
            "--profile-dir",
        ])
        .arg(d.path().join("profiles"))
        .args(MEASURE)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let v = common::json_of(&out);
    assert_eq!(v["items"].as_array().unwrap().len(), 3);
    let gov = d
        .path()
        .join("sys/devices/system/cpu/cpufreq/policy5/scaling_governor");
    assert_eq!(read(&gov), "powersave");
}

#[test]
fn smt_on_a_copy_of_a_server() {
    let d = copy("intel-2s");
    let ctl = d.path().join("sys/devices/system/cpu/smt/control");
    let out = common::cpulab_on(d.path())
        .args(["try", "smt.control=off", "--quiet", "--json"])
        .args(MEASURE)
        .output()
        .unwrap();
    common::assert_success(&out);
    assert_eq!(read(&ctl), "on");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["changes"][0]["permanent"]["text"], "nosmt");
}

#[test]
fn not_root_is_one_line_naming_the_setting() {
    if !nix::unistd::geteuid().is_root() {
        // Already not root: the plain command shows it.
        let out = cpulab()
            .args(["try", "haltpoll.guest_halt_poll_ns=1"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        return;
    }
    for args in [
        &["try", "haltpoll.guest_halt_poll_ns=1"][..],
        &["try", "--restore"],
        &["doctor", "--quick", "--try"],
    ] {
        let Some(out) = cpulab_as_nobody(test_name!(), args) else {
            return;
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("root"), "{err}");
    }
    let out = cpulab_as_nobody(test_name!(), &["try", "haltpoll.guest_halt_poll_ns=1"]).unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("haltpoll.guest_halt_poll_ns needs root")
    );
}

/// `cmd:`'s output is read for its figure and never reaches stdout, which holds exactly one
/// document with `--json` whatever the command prints on either stream.
#[test]
fn a_measured_commands_output_is_read_and_stdout_is_one_document() {
    let d = copy("kvm-guest");
    let out = common::cpulab_on(d.path())
        .args(["try", "haltpoll.guest_halt_poll_ns=200000", "--measure"])
        .arg("cmd:sh -c 'echo try-stdout-marker; echo v 7; echo try-stderr-marker >&2'")
        .args(["--metric", r"v (?P<value>[0-9]+)", "--json", "--quiet"])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let v = common::json_of(&out);
    assert_eq!(v["kind"], "try");
    let rounds = v["trial"]["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 6);
    for r in rounds {
        let metric = r["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "metric[value]")
            .unwrap_or_else(|| panic!("the command's figure in {r}"));
        assert_eq!(metric["value"], 7.0, "read from the command's output: {r}");
    }
    assert_eq!(read(&poll_ns(d.path())), "0");
}

/// A measured command that fails, or prints no figure, shows what it printed on stderr (the
/// last lines of both its streams), and stdout carries no text.
#[test]
fn a_measured_command_that_fails_or_has_no_figure_shows_its_output_on_stderr() {
    for (cmd, want) in [
        (
            "cmd:sh -c 'echo try-stdout-marker; echo try-stderr-marker >&2; exit 3'",
            "status: 3",
        ),
        (
            "cmd:sh -c 'echo try-stdout-marker; echo try-stderr-marker >&2'",
            "no match for the metric",
        ),
    ] {
        let d = copy("kvm-guest");
        let out = common::cpulab_on(d.path())
            .args([
                "try",
                "haltpoll.guest_halt_poll_ns=200000",
                "--measure",
                cmd,
            ])
            .args(["--metric", r"v (?P<value>[0-9]+)", "--json", "--quiet"])
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(out.stdout.is_empty(), "{cmd}: stdout {:?}", out.stdout);
        assert!(err.contains(want), "{cmd}: {err}");
        assert!(err.contains("try-stdout-marker"), "{cmd}: {err}");
        assert!(err.contains("try-stderr-marker"), "{cmd}: {err}");
        assert_eq!(read(&poll_ns(d.path())), "0", "{cmd}: restored");
    }
}

/// The measured command ends with cpulab, even when cpulab is killed with SIGKILL mid-round.
#[test]
fn a_measured_command_ends_when_cpulab_is_killed() {
    use std::time::{Duration, Instant};
    let d = copy("kvm-guest");
    let pidfile = d.path().join("measured.pid");
    let wait_for = |ok: &dyn Fn() -> bool| {
        let until = Instant::now() + Duration::from_secs(30);
        while !ok() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        ok()
    };
    let mut trial = common::cpulab_process()
        .arg("--root")
        .arg(d.path())
        .args(["try", "haltpoll.guest_halt_poll_ns=200000", "--quiet"])
        .arg("--measure")
        .arg(format!(
            "cmd:sh -c 'echo $$ > {}.tmp && mv {0}.tmp {0} && exec sleep 600'",
            pidfile.display()
        ))
        .args(["--metric", r"v (?P<value>[0-9]+)"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for(&|| pidfile.exists()),
        "the measured command never started"
    );
    let pid: i32 = read(&pidfile).parse().unwrap();
    let ended = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    assert!(!ended(), "the measured command runs");
    trial.kill().unwrap();
    trial.wait().unwrap();
    if !wait_for(&ended) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        panic!("the measured command (pid {pid}) outlived cpulab by 30 s");
    }
}

/// A command printing the next value of `values` (cycled) at each call, counted in `state`:
/// rounds with a known, repeatable spread.
fn cycling(state: &Path, values: &[i64]) -> String {
    let list = values
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "cmd:sh -c 'n=$(cat {s} 2>/dev/null || echo 0); echo $((n+1)) > {s}; set -- {list}; \
         shift $((n % $#)); echo v $1'",
        s = state.display()
    )
}

fn trial_json(d: &Path, measure: &str, extra: &[&str]) -> serde_json::Value {
    let out = common::cpulab_on(d)
        .args([
            "try",
            "haltpoll.guest_halt_poll_ns=200000",
            "--measure",
            measure,
        ])
        .args(["--metric", r"v (?P<value>[0-9]+)", "--json", "--quiet"])
        .args(extra)
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap();
    common::json_of(&out)
}

/// The stop rule of issue 30: rounds are added until the minimum detectable difference is
/// within the target, and not one pair more. The rounds' values are fixed, so the count is
/// physics, not timing: at the count it stopped the net was fine enough, one pair earlier it
/// was not.
#[test]
fn rounds_are_added_until_the_target_could_be_seen_and_no_further() {
    let d = copy("kvm-guest");
    // Round i prints the (i mod 5)-th value: both sides spread about 100 by about ±7.
    let m = cycling(&d.path().join("n"), &[90, 100, 110, 95, 105]);
    let v = trial_json(d.path(), &m, &["--detect", "10", "--max-time", "10m"]);
    let run = &v["trial"];
    let p = &run["precision"];
    assert_eq!(p["stopped"], "reached", "{p}");
    assert_eq!(p["goal"]["target_rel"], 0.10);
    assert_eq!(p["goal"]["min_rounds"], 3);
    let n = p["rounds_per_side"].as_u64().unwrap() as usize;
    assert_eq!(v["rounds_per_side"].as_u64(), Some(n as u64));
    assert!(
        n > 3,
        "three rounds a side could only see about ±20% here: {p}"
    );
    let rounds = run["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2 * n);
    let side = |s: &str, k: usize| -> Vec<f64> {
        rounds[..2 * k]
            .iter()
            .filter(|r| r["side"] == s)
            .map(|r| r["figures"][0]["value"].as_f64().unwrap())
            .collect()
    };
    let rel = |k: usize| {
        let (a, b) = (side("baseline", k), side("changed", k));
        let mean = a.iter().sum::<f64>() / a.len() as f64;
        cpulab::trial::compare::detectable(&a, &b).unwrap() / mean
    };
    assert!(rel(n) <= 0.10, "stopped when the net was fine enough");
    assert!(rel(n - 1) > 0.10, "not a pair later than needed");
    let c = &run["comparisons"][0];
    assert_eq!(c["target_rel"], 0.10);
    assert_eq!(c["verdict"], "no-difference");
    assert!(c["rounds_needed"].is_null());
}

/// With no time for more, a trial that could not have seen its target says so, with the
/// rounds it would take, in the JSON and the text; it is not a "no difference".
#[test]
fn a_trial_out_of_time_is_inconclusive_and_says_what_it_would_take() {
    let d = copy("kvm-guest");
    let m = cycling(&d.path().join("n"), &[60, 140, 100, 80, 120, 100]);
    let v = trial_json(d.path(), &m, &["--detect", "5", "--max-time", "0"]);
    let p = &v["trial"]["precision"];
    assert_eq!(p["stopped"], "time-limit", "{p}");
    assert_eq!(
        p["rounds_per_side"], 3,
        "the minimum is measured whatever the limit"
    );
    assert_eq!(p["inconclusive"], 1);
    let c = &v["trial"]["comparisons"][0];
    assert_eq!(c["verdict"], "inconclusive");
    assert!(c["detectable_rel"].as_f64().unwrap() > 0.05);
    let need = c["rounds_needed"].as_u64().unwrap();
    assert!(need > 3, "{c}");
    assert!(c["more_time_s"].as_f64().unwrap() > 0.0);
    let text = v["summary"].as_array().unwrap();
    assert!(
        text.iter().any(|l| l
            .as_str()
            .unwrap()
            .contains(&format!("about {need} rounds a side"))),
        "{text:?}"
    );
    assert_eq!(read(&poll_ns(d.path())), "0");
}

/// A constant figure is seen exactly at once: the minimum, and a real "no difference".
#[test]
fn a_figure_without_spread_needs_only_the_minimum() {
    let d = copy("kvm-guest");
    let v = trial_json(d.path(), "cmd:echo v 5", &["--rounds", "4"]);
    let p = &v["trial"]["precision"];
    assert_eq!(
        (p["stopped"].as_str(), p["rounds_per_side"].as_u64()),
        (Some("reached"), Some(4))
    );
    assert_eq!(p["goal"]["target_from"], "default");
    assert_eq!(v["trial"]["comparisons"][0]["verdict"], "no-difference");
}

#[test]
fn bad_detect_and_max_time_are_one_line_exit_2() {
    let d = copy("kvm-guest");
    for (flag, value, want) in [
        ("--detect", "0", "--detect 0"),
        ("--detect", "-5", "--detect -5"),
        ("--detect", "100", "below 100"),
        ("--detect", "ten", "--detect ten"),
        ("--max-time", "-5", "--max-time"),
        ("--max-time", "soon", "--max-time"),
    ] {
        let out = common::cpulab_on(d.path())
            .args(["try", "haltpoll.guest_halt_poll_ns=200000"])
            .arg(format!("{flag}={value}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{flag} {value}: {err}");
        assert!(err.contains(want), "{flag} {value}: {err}");
    }
    // Each once accepted: a minimum of 1e11 rounds, a --metric or --lower-is-better that no
    // measurement read (the trial ran without them), a regex error in three lines.
    for (extra, want) in [
        (
            &["--rounds", "99999999999"][..],
            "--rounds 99999999999: give 3 to 100",
        ),
        (
            &["--metric", "tps = (?P<value>.*)"],
            "`--measure cmd:COMMAND`",
        ),
        (&["--lower-is-better"], "`--measure cmd:COMMAND`"),
        (
            &["--measure", "pingpong:--pairs 0:0", "--metric", "x"],
            "`--measure cmd:COMMAND`",
        ),
        (
            &["--measure", "cmd:true", "--metric", "tps = ("],
            "(unclosed group)",
        ),
    ] {
        let out = common::cpulab_on(d.path())
            .args(["try", "haltpoll.guest_halt_poll_ns=200000"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(out.stdout.is_empty(), "{extra:?}");
    }
    assert_eq!(read(&poll_ns(d.path())), "0");
}
