//! `cpulab history`: the store under real processes (two writers, a corrupt file, a newer
//! schema, a full disk), and field notes D end to end: a fixture history whose later runs are
//! 13% worse on another kernel, governor and mitigations setting, found and named by
//! `history check`.

mod common;

use common::{cpulab, json_of};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

fn fixture_doctor() -> Value {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/results/doctor-quick.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Deterministic noise of about +-2%.
fn noise(i: usize) -> f64 {
    [1.0, 1.018, 0.985, 1.007, 0.992, 1.013, 0.981, 1.004][i % 8]
}

/// The fixture doctor run made into run `i` of a series: its wakeup and OS-cost samples scaled
/// by `factor`, on `kernel` with `governor` and `mitigations`.
fn doctor_run(
    i: usize,
    factor: f64,
    kernel: &str,
    governor: &str,
    mitigations: Option<&str>,
) -> Value {
    let mut d = fixture_doctor();
    d["conditions"]["started_unix_s"] = json!(1_700_000_000 + i as u64 * 86_400);
    let scale = |v: &mut Value| {
        for x in v.as_array_mut().unwrap() {
            *x = json!(x.as_f64().unwrap() * factor * noise(i));
        }
    };
    for w in d["measurements"]["wakeup"].as_array_mut().unwrap() {
        scale(&mut w["batch_means_ns"]);
    }
    for p in d["measurements"]["oscost"]["primitives"]
        .as_array_mut()
        .unwrap()
    {
        scale(&mut p["samples_ns"]);
    }
    let p = &mut d["probe"];
    p["sched"]["kernel"] = json!(kernel);
    p["freq"]["policies"] =
        json!([{"name": "policy0", "driver": "acpi-cpufreq", "governor": governor}]);
    p["mitigations"]["cmdline"] = match mitigations {
        Some(m) => json!({ "mitigations": m }),
        None => json!({}),
    };
    d
}

fn import(history: &Path, docs: &[Value]) {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let p = dir.path().join(format!("run{i:02}.json"));
            std::fs::write(&p, d.to_string()).unwrap();
            p
        })
        .collect();
    cpulab()
        .arg("--history")
        .arg(history)
        .args(["history", "import", "-q"])
        .args(&files)
        .assert()
        .success();
}

fn check(history: &Path) -> (Option<i32>, Value) {
    let out = cpulab()
        .arg("--history")
        .arg(history)
        .args(["history", "check", "--json"])
        .output()
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout).unwrap(),
    )
}

/// Field notes D: CentOS 6 -> 7, the same job 13% slower; the kernel, the governor and the
/// mitigations changed with it.
#[test]
fn field_notes_d_regression_is_found_and_its_three_facts_named() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let mut docs: Vec<Value> = (0..6)
        .map(|i| doctor_run(i, 1.0, "2.6.32-754.el6.x86_64", "performance", Some("off")))
        .collect();
    docs.extend((6..9).map(|i| doctor_run(i, 1.13, "3.10.0-1160.el7.x86_64", "powersave", None)));
    import(&h, &docs);
    let (code, r) = check(&h);
    assert_eq!(code, Some(1), "a regression fails the check: {r:#}");
    let doctor = &r["kinds"][0];
    assert_eq!(doctor["kind"], "doctor");
    assert_eq!(doctor["runs"], 9);
    let changes = doctor["changes"].as_array().unwrap();
    assert!(!changes.is_empty());
    for c in changes {
        assert_eq!(c["verdict"], "worse", "{c}");
        let pct = c["change_pct"].as_f64().unwrap();
        assert!((pct - 13.0).abs() < 3.0, "{c}");
        let named: Vec<&str> = c["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["fact"].as_str().unwrap())
            .collect();
        for f in ["kernel", "cpufreq.governor", "mitigations"] {
            assert!(named.contains(&f), "{f} not in {named:?}");
        }
    }
    assert!(!r["regressions"].as_array().unwrap().is_empty());
    // The text names the change as a reader would write it.
    let out = cpulab()
        .arg("--history")
        .arg(&h)
        .args(["history", "check"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cpufreq.governor performance -> powersave"),
        "{text}"
    );
    assert!(text.contains("mitigations off -> auto"), "{text}");
    assert!(
        text.contains("confirm: cpulab try cpufreq.governor=performance"),
        "{text}"
    );
    // The page: one chart per figure, the change point with the facts beside it.
    let page = dir.path().join("history.html");
    cpulab()
        .arg("--history")
        .arg(&h)
        .args(["history", "report", "-q", "--html"])
        .arg(&page)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.matches("<svg").count() >= 2);
    assert!(
        html.contains("at run 7 (@7"),
        "the change point sits between runs 6 and 7"
    );
    assert!(html.contains("cpufreq.governor performance -&gt; powersave"));
}

#[test]
fn the_same_shift_without_a_changed_fact_says_no_configuration_change() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let docs: Vec<Value> = (0..9)
        .map(|i| doctor_run(i, if i < 6 { 1.0 } else { 1.13 }, "3.10", "powersave", None))
        .collect();
    import(&h, &docs);
    let (code, r) = check(&h);
    assert_eq!(code, Some(1));
    for c in r["kinds"][0]["changes"].as_array().unwrap() {
        assert!(c["causes"].as_array().unwrap().is_empty(), "{c}");
        assert!(
            c["no_configuration_change"]
                .as_str()
                .unwrap()
                .contains("neighbours"),
            "{c}"
        );
    }
}

/// A build change is a fact like any other: the same shift where only cpulab's git revision
/// changed names `cpulab.revision`, in `check` and in `diff`.
#[test]
fn a_cpulab_revision_change_is_named_like_any_other_fact() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let docs: Vec<Value> = (0..9)
        .map(|i| {
            let mut d = doctor_run(i, if i < 6 { 1.0 } else { 1.13 }, "3.10", "powersave", None);
            let rev = if i < 6 { "1111111" } else { "2222222" };
            d["conditions"]["cpulab_revision"] = json!(rev);
            d["probe"]["conditions"]["cpulab_revision"] = json!(rev);
            d
        })
        .collect();
    import(&h, &docs);
    let (code, r) = check(&h);
    assert_eq!(code, Some(1), "{r:#}");
    let changes = r["kinds"][0]["changes"].as_array().unwrap();
    assert!(!changes.is_empty());
    for c in changes {
        let causes = c["causes"].as_array().unwrap();
        assert_eq!(causes.len(), 1, "{c}");
        assert_eq!(causes[0]["fact"], "cpulab.revision");
        assert_eq!(causes[0]["before"], "1111111");
        assert_eq!(causes[0]["after"], "2222222");
        assert!(c["no_configuration_change"].is_null(), "{c}");
    }
    let diff = cpulab()
        .arg("--history")
        .arg(&h)
        .args(["history", "diff", "6", "7", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        json_of(&diff)["changed_facts"],
        json!([{"fact": "cpulab.revision", "before": "1111111", "after": "2222222"}])
    );
}

#[test]
fn noise_alone_raises_no_alarm() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let docs: Vec<Value> = (0..12)
        .map(|i| doctor_run(i, 1.0, "3.10", "powersave", None))
        .collect();
    import(&h, &docs);
    let (code, r) = check(&h);
    assert_eq!(code, Some(0), "{r:#}");
    assert!(r["kinds"][0]["changes"].as_array().unwrap().is_empty());
}

/// A measuring command that records: quick and needing no program beyond cpulab.
fn measure(history: &Path) -> std::process::Output {
    measure_under(history, Path::new("/"))
}

/// `measure` with the machine read under `root`.
fn measure_under(history: &Path, root: &Path) -> std::process::Output {
    cpulab()
        .arg("--history")
        .arg(history)
        .arg("--root")
        .arg(root)
        .args([
            "oscost",
            "--quick",
            "--no-freq",
            "--batches",
            "3",
            "--no-load-check",
            "--json",
        ])
        .output()
        .unwrap()
}

/// A run read under another root (a fixture tree) mixes that tree's facts with this machine's
/// figures: it is printed, and not recorded.
#[test]
fn a_run_under_a_fixture_root_is_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/epyc-kvm");
    let out = measure_under(&h, &fixture);
    assert_eq!(json_of(&out)["kind"], "oscost");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not recorded in the history: --root"), "{err}");
    assert!(!h.exists(), "no history file for a fixture run");
    // The same run on this machine is recorded.
    json_of(&measure(&h));
    assert!(h.exists());
}

#[test]
fn a_recorded_run_is_0600_and_listed_and_compared_by_id() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("state/h.sqlite");
    json_of(&measure(&h));
    json_of(&measure(&h));
    assert_eq!(
        std::fs::metadata(&h).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let list = json_of(
        &cpulab()
            .arg("--history")
            .arg(&h)
            .args(["history", "list", "--kind", "oscost", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(list["runs"].as_array().unwrap().len(), 2);
    let c = json_of(
        &cpulab()
            .arg("--history")
            .arg(&h)
            .args(["compare", "@1", "@2", "--json"])
            .output()
            .unwrap(),
    );
    let figures = c["figures"].as_array().unwrap();
    assert!(!figures.is_empty(), "{c}");
    assert!(figures.iter().all(|f| f["direction_source"] == "typed"));
    let show = json_of(
        &cpulab()
            .arg("--history")
            .arg(&h)
            .args(["history", "show", "2", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(show["document"]["kind"], "oscost");
    assert!(show["facts"]["kernel"].is_string());
    assert!(show["figures"][0]["samples"].as_array().unwrap().len() >= 2);
    // An id the history does not have is bad input.
    common::bad_input(&["--history", h.to_str().unwrap(), "history", "show", "99"]);
    common::bad_input(&["--history", h.to_str().unwrap(), "compare", "@1", "@x"]);
}

#[test]
fn two_writers_at_once_both_land() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let docs: Vec<Value> = (0..15)
        .map(|i| doctor_run(i, 1.0, "6.1", "performance", None))
        .collect();
    let files: Vec<PathBuf> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let p = dir.path().join(format!("r{i}.json"));
            std::fs::write(&p, d.to_string()).unwrap();
            p
        })
        .collect();
    // Two processes started together on a file neither has created yet.
    let spawn = || {
        common::cpulab_process()
            .arg("--history")
            .arg(&h)
            .args(["history", "import", "-q"])
            .args(&files)
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for mut c in [a, b] {
        assert!(c.wait().unwrap().success());
    }
    let list = json_of(
        &cpulab()
            .arg("--history")
            .arg(&h)
            .args(["history", "list", "--json"])
            .output()
            .unwrap(),
    );
    assert_eq!(list["runs"].as_array().unwrap().len(), 30);
}

/// The result is printed whatever the history's state; the history costs one line.
fn assert_printed_with_one_history_line(out: &std::process::Output, want: &str) {
    let doc = json_of(out);
    assert_eq!(doc["kind"], "oscost");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("history")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(want), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn a_corrupt_foreign_or_newer_history_is_left_untouched_and_the_result_still_printed() {
    let dir = tempfile::tempdir().unwrap();
    let corrupt = dir.path().join("corrupt.sqlite");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0x5a, 8192));
    std::fs::write(&corrupt, &bytes).unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "shopping list\n").unwrap();
    let newer = dir.path().join("newer.sqlite");
    // A history a later cpulab wrote: its own application id, a schema from the future.
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute_batch(
            "PRAGMA application_id = 1668312162; PRAGMA user_version = 99; CREATE TABLE runs (x);",
        )
        .unwrap();
    for (path, want) in [
        (&corrupt, "corrupt"),
        (&text, "not a cpulab history"),
        (&newer, "newer cpulab"),
    ] {
        let before = std::fs::read(path).unwrap();
        assert_printed_with_one_history_line(&measure(path), want);
        assert_eq!(std::fs::read(path).unwrap(), before, "{}", path.display());
        // Reading it is bad input in one line.
        common::bad_input(&["--history", path.to_str().unwrap(), "history", "list"]);
    }
}

/// A full disk: a 512 KiB tmpfs mounted by the test (root), filled once the history exists.
#[test]
fn a_full_disk_still_prints_the_result() {
    let name = "a_full_disk_still_prints_the_result";
    if !nix::unistd::geteuid().is_root() {
        common::skipped(name, "mounting a tmpfs needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs"])
        .arg(&mnt)
        .status();
    if !mounted.is_ok_and(|s| s.success()) {
        common::skipped(name, "cannot mount a tmpfs here");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let h = mnt.join("h.sqlite");
    json_of(&measure(&h));
    // Fill what is left.
    let mut filler = std::fs::File::create(mnt.join("filler")).unwrap();
    for size in [64 * 1024, 4096, 1] {
        let block = vec![0u8; size];
        while std::io::Write::write_all(&mut filler, &block).is_ok() {}
    }
    drop(filler);
    assert_printed_with_one_history_line(&measure(&h), "not recorded");
}

/// Every history output leaves through the one output path: `--json` holds for the
/// subcommands that have it wherever it is written, export's lines import back as the same runs,
/// the report's page is written like every other page, and a flag a subcommand has no output
/// for is one line, exit 2.
#[test]
fn history_outputs_go_through_the_one_output_path() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let hs = h.to_str().unwrap();
    let docs: Vec<Value> = (0..4)
        .map(|i| doctor_run(i, 1.0, "6.1", "performance", None))
        .collect();
    import(&h, &docs);
    let run = |args: &[&str]| {
        cpulab()
            .arg("--history")
            .arg(&h)
            .args(args)
            .output()
            .unwrap()
    };
    // --json before or after the subcommand: the same document, no envelope.
    let after = json_of(&run(&["history", "list", "--json"]));
    let before = json_of(&run(&["history", "--json", "list"]));
    assert_eq!(after, before);
    assert_eq!(after["runs"].as_array().unwrap().len(), 4);
    assert!(after.get("cpulab_schema").is_none(), "{after}");
    // export -> import: the same runs again, with their times and facts.
    let export = run(&["history", "export", "--kind", "doctor"]);
    assert!(export.status.success());
    let lines = String::from_utf8_lossy(&export.stdout).to_string();
    assert_eq!(lines.lines().count(), 4, "{lines}");
    let file = dir.path().join("runs.jsonl");
    std::fs::write(&file, &lines).unwrap();
    let h2 = dir.path().join("h2.sqlite");
    cpulab()
        .arg("--history")
        .arg(&h2)
        .args(["history", "import", "-q"])
        .arg(&file)
        .assert()
        .success();
    let again = json_of(
        &cpulab()
            .arg("--history")
            .arg(&h2)
            .args(["history", "list", "--json"])
            .output()
            .unwrap(),
    );
    let times = |l: &Value| -> Vec<Value> {
        l["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["time_unix_s"].clone())
            .collect()
    };
    assert_eq!(times(&again), times(&after));
    // The page, with the status line every page has.
    let page = dir.path().join("h.html");
    let out = run(&["history", "report", "--html", page.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(std::fs::read_to_string(&page).unwrap().contains("<html"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HTML report written to"), "{err}");
    assert!(out.stdout.is_empty());
    // prune --dry-run lists what would go and deletes nothing.
    let dry = run(&["history", "prune", "--keep", "1", "--dry-run"]);
    assert_eq!(
        String::from_utf8_lossy(&dry.stdout),
        "would delete 3 run(s): @1 @2 @3\n"
    );
    assert_eq!(
        json_of(&run(&["history", "list", "--json"]))["runs"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    // Flags a subcommand has no output for, and a report with no page to write.
    for bad in [
        &["history", "list", "--html", "x.html"][..],
        &["history", "export", "--json"],
        &["history", "prune", "--keep", "1", "--json"],
        &["history", "report"],
    ] {
        let mut args = vec!["--history", hs];
        args.extend_from_slice(bad);
        common::bad_input(&args);
    }
    assert!(!Path::new("x.html").exists());
}

/// Filters that can match no run, and prunes that would empty the history, are one line and
/// exit 2 with nothing on stdout and nothing deleted. Each was once accepted: a misspelt
/// `--kind`, an empty `--host`, a `--since` in the future or after `--until` listed an empty
/// history with exit 0, and `prune --keep 0` or `--before` a future date deleted every run.
#[test]
fn filters_that_match_nothing_and_prunes_that_delete_everything_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h.sqlite");
    let hs = h.to_str().unwrap();
    let docs: Vec<Value> = (0..2)
        .map(|i| doctor_run(i, 1.0, "6.1", "performance", None))
        .collect();
    import(&h, &docs);
    for bad in [
        &["history", "list", "--kind", "doctr"][..],
        &["history", "list", "--kind", ""],
        &["history", "export", "--host", ""],
        &["history", "list", "--since", "2999-01-01"],
        &["history", "list", "--since", "1d", "--until", "7d"],
        &["history", "check", "--kind", "pingpog"],
        &["history", "prune", "--keep", "0"],
        &["history", "prune", "--before", "2999-01-01"],
        // A minimum effect is 0 to 1000 percent: more is almost surely a typo, NaN none.
        &["history", "check", "--threshold", "5000"],
        &["history", "check", "--threshold", "1e300"],
        &["history", "check", "--threshold", "NaN"],
        &["history", "check", "--threshold=-1"],
        &[
            "history",
            "report",
            "--threshold",
            "inf",
            "--html",
            "h.html",
        ],
    ] {
        let mut args = vec!["--history", hs];
        args.extend_from_slice(bad);
        common::bad_input(&args);
        let out = cpulab().args(&args).output().unwrap();
        assert!(out.stdout.is_empty(), "{bad:?}");
        if bad.iter().any(|a| a.starts_with("--threshold")) {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(": give 0 to 1000 percent"), "{bad:?}: {err}");
        }
    }
    // The range's end is accepted.
    let out = cpulab()
        .args(["--history", hs, "history", "check", "--threshold", "1000"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "{out:?}");
    let list = cpulab()
        .args([
            "--history",
            hs,
            "history",
            "list",
            "--json",
            "--kind",
            "doctor",
        ])
        .output()
        .unwrap();
    assert_eq!(json_of(&list)["runs"].as_array().unwrap().len(), 2);
}
