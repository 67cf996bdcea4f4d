//! `cpulab pingpong` end to end: the real binary, briefly (a fraction of a second per pair).
//! Assertions are on structure and physics, never on how long anything took.

#[macro_use]
mod common;

use common::{cpulab, cpulab_on, fixture_copy, installed};
use serde_json::Value;

const BRIEF: &[&str] = &["--max-time", "0.2", "--warmup", "0.02", "--no-load-check"];

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `cpulab pingpong <args> --json`, expects success, returns the document.
fn pingpong_json(args: &[&str]) -> Value {
    let out = cpulab()
        .arg("pingpong")
        .args(BRIEF)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("exactly one JSON document on stdout")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `a` is `b` to rounding.
fn close(what: &str, a: f64, b: f64) {
    assert!(
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12),
        "{what}: {a} vs {b}"
    );
}

/// Every per-round-trip and per-second figure of a run is its raw count divided by the run's
/// round trips (or window), summed over the CPUs in use, and where it ran adds up to its
/// samples: checked against the counts the document also carries, not just for being >= 0.
fn assert_counters(run: &Value) {
    let c = &run["counters"];
    let rts = c["round_trips"].as_u64().unwrap() as f64;
    assert!(rts > 0.0, "{c}");
    for side in ["initiator", "responder"] {
        let e = &c[side];
        if let Some(task) = e["task"].as_object() {
            for k in ["voluntary_switches", "involuntary_switches"] {
                let want = task[k].as_u64().unwrap() as f64 / rts;
                close(&format!("{side} {k}"), f(&e[format!("{k}_per_rt")]), want);
            }
        } else {
            assert!(e["task_unavailable"].is_string(), "{side}: {e}");
        }
        for (k, v) in e["perf"].as_object().unwrap() {
            let want = v.as_u64().unwrap() as f64 / rts;
            close(&format!("{side} perf {k}"), f(&e["perf_per_rt"][k]), want);
        }
    }
    let system = &c["system"];
    let interval = f(&system["interval_s"]);
    let per_rt = c["per_rt"].as_object().unwrap();
    for (k, v) in per_rt {
        let total: u64 = if k == "idle_entries" {
            system["idle_entries"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum()
        } else {
            let name = k.strip_prefix("irq_").unwrap_or_else(|| panic!("{k}"));
            system["interrupts"][name]
                .as_object()
                .unwrap_or_else(|| panic!("{k}: no raw counts: {system}"))
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum()
        };
        close(&format!("{k} per round trip"), f(v), total as f64 / rts);
        if interval > 0.0 {
            close(
                &format!("{k} per second"),
                f(&c["per_s"][k]),
                total as f64 / interval,
            );
        }
    }
    if !c["ipis_per_rt"].is_null() {
        let part = |k: &str| per_rt.get(k).map_or(0.0, f);
        close(
            "IPIs per round trip",
            f(&c["ipis_per_rt"]),
            part("irq_RES") + part("irq_CAL"),
        );
    }
    let w = &run["where_ran"];
    if !w.is_null() {
        let samples = w["samples"].as_u64().unwrap();
        for side in ["initiator_cpus", "responder_cpus"] {
            let seen: u64 = w[side]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum();
            assert_eq!(seen, samples, "{side}: {w}");
        }
        let same = w["same_cpu_samples"].as_u64().unwrap();
        assert!(same <= samples, "{w}");
        if samples > 0 {
            close(
                "same-CPU share",
                f(&w["same_cpu_share"]),
                same as f64 / samples as f64,
            );
        }
    }
}

/// Latency physics that hold for every run, whatever the machine.
fn assert_physics(run: &Value) {
    let rtt = &run["rtt"];
    let (min, p50, p90, p99, p999, max) = (
        f(&rtt["min_ns"]),
        f(&rtt["p50_ns"]),
        f(&rtt["p90_ns"]),
        f(&rtt["p99_ns"]),
        f(&rtt["p999_ns"]),
        f(&rtt["max_ns"]),
    );
    assert!(
        min <= p50 && p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max,
        "{rtt}"
    );
    let m = &run["mean_rtt_ns"];
    let mean = f(&m["mean"]);
    assert!(
        min <= mean && mean <= max,
        "mean {mean} outside [{min}, {max}]"
    );
    // The mean and its interval are those of the batch means, by the t table.
    let batches = run["batch_means_ns"].as_array().unwrap();
    assert!(!batches.is_empty());
    let samples: Vec<f64> = batches.iter().map(f).collect();
    common::assert_mean_ci_of("mean_rtt_ns", m, &samples);
    let rts = run["round_trips"].as_u64().unwrap();
    assert_eq!(
        rts,
        run["batch_round_trips"].as_u64().unwrap() * batches.len() as u64
    );
    assert_eq!(rtt["count"].as_u64().unwrap(), rts);
    assert_eq!(run["counters"]["round_trips"].as_u64().unwrap(), rts);
    assert!(f(&run["round_trips_per_s"]) > 0.0);
    assert!(["converged", "max-time"].contains(&run["ended_by"].as_str().unwrap()));
    assert_counters(run);
    let system = &run["counters"]["system"];
    for (cpu, t) in system["cpu_time"].as_object().unwrap() {
        common::assert_cpu_time_shares(&format!("cpu{cpu}"), t, system["interval_s"].as_f64());
    }
}

/// Each run's `p50_ratio_to_fastest` is its p50 over the lowest p50 of its method's runs: the
/// fastest has exactly 1, and no run of the method has a lower p50 than the one called fastest.
fn assert_ratios_to_fastest(runs: &[Value]) {
    for r in runs {
        let fastest = runs
            .iter()
            .filter(|o| o["method"] == r["method"])
            .map(|o| o["rtt"]["p50_ns"].as_u64().unwrap())
            .min()
            .unwrap();
        let p50 = r["rtt"]["p50_ns"].as_u64().unwrap();
        let ratio = f(&r["p50_ratio_to_fastest"]);
        if fastest > 0 {
            let want = p50 as f64 / fastest as f64;
            assert!(
                (ratio - want).abs() <= 1e-9 * want,
                "{ratio} vs {want}: {r}"
            );
        }
    }
}

#[test]
fn json_has_the_documented_structure_and_physics() {
    let doc = pingpong_json(&["--method", "pipe,spin"]);
    assert_eq!(doc["cpulab_schema"], 1);
    assert_eq!(doc["kind"], "pingpong");
    for key in ["conditions", "settings", "cpus", "timer", "runs", "skipped"] {
        assert!(doc.get(key).is_some(), "missing {key}");
    }
    assert!(doc["conditions"]["kernel"].is_string());
    let runs = doc["runs"].as_array().unwrap();
    assert!(!runs.is_empty());
    for run in runs {
        assert_physics(run);
    }
    assert_ratios_to_fastest(runs);
    // Auto ends with an unpinned run per method, which says where its ends ran.
    let unpinned: Vec<_> = runs
        .iter()
        .filter(|r| r["placement"] == "unpinned")
        .collect();
    assert!(!unpinned.is_empty());
    for r in unpinned {
        let w = &r["where_ran"];
        assert!(w["samples"].as_u64().unwrap() >= 1, "{w}");
        let share = f(&w["same_cpu_share"]);
        assert!((0.0..=1.0).contains(&share));
        assert!(r["cpu_a"].is_null() && r["cpu_b"].is_null());
    }
    // The result deserialises into the library's types (what `report` and `compare` read).
    let back: cpulab::pingpong::PingpongReport = serde_json::from_value(doc).unwrap();
    assert!(!back.runs.is_empty());
}

#[test]
fn load_check_is_recorded_in_the_conditions() {
    let out = cpulab()
        .args([
            "pingpong",
            "--max-time",
            "0.1",
            "--warmup",
            "0.01",
            "--pairs",
            "0:0",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let load = &doc["conditions"]["load_before"];
    assert!(f(&load["window_s"]) > 0.0, "{load}");
    assert_eq!(load["noisy"], doc["conditions"]["noisy"]);
}

/// On one CPU every round trip switches each endpoint out at least once: voluntarily when it
/// blocks, or involuntarily when the woken peer preempts it. Both kinds are counted.
#[test]
fn blocking_same_cpu_round_trip_costs_a_switch_per_endpoint() {
    for endpoints in [&[][..], &["--processes"][..]] {
        let mut args = vec!["--pairs", "0:0", "--method", "pipe,unix,tcp,futex,eventfd"];
        args.extend_from_slice(endpoints);
        let doc = pingpong_json(&args);
        let runs = doc["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 5, "{endpoints:?}");
        for run in runs {
            assert_physics(run);
            for side in ["initiator", "responder"] {
                let c = &run["counters"][side];
                let per_rt =
                    f(&c["voluntary_switches_per_rt"]) + f(&c["involuntary_switches_per_rt"]);
                assert!(
                    per_rt >= 0.9,
                    "{} {side} {endpoints:?}: {per_rt} switches per round trip",
                    run["method"]
                );
            }
        }
    }
}

/// `--touch`: the initiator's work after each wakeup is timed apart from the round trip, batch
/// by batch, and is in the document only when asked for; the text shows it against the
/// same-CPU run.
#[test]
fn work_after_each_wakeup_is_timed_apart_and_only_when_asked() {
    let doc = pingpong_json(&["--pairs", "0:0", "--touch", "64K", "--processes"]);
    assert_eq!(doc["settings"]["touch_bytes"], 65536);
    let run = &doc["runs"][0];
    assert_physics(run);
    let t = &run["touch"];
    assert_eq!(t["bytes"], 65536, "{t}");
    let batches = t["batch_means_ns"].as_array().unwrap();
    assert_eq!(
        batches.len(),
        run["batch_means_ns"].as_array().unwrap().len()
    );
    assert!(batches.iter().all(|b| f(b) > 0.0), "{t}");
    assert_eq!(t["mean_ns"]["n"], batches.len(), "{t}");
    let plain = pingpong_json(&["--pairs", "0:0"]);
    assert!(
        plain["runs"][0].get("touch").is_none(),
        "{}",
        plain["runs"][0]
    );
    assert_eq!(plain["settings"]["touch_bytes"], 0);
    let out = cpulab()
        .args(["pingpong", "--pairs", "0:0", "--touch", "16K"])
        .args(BRIEF)
        .output()
        .unwrap();
    common::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Work after each wakeup"), "{text}");
    assert!(text.contains("writes 16 KiB"), "{text}");
    for bad in ["0", "2G", "12 parsecs", "-4K"] {
        let out = cpulab()
            .args(["pingpong", &format!("--touch={bad}")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--touch {bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{bad}: {err}");
        assert!(err.contains("--touch"), "{err}");
    }
}

/// A `--touch` buffer more than half the memory this process may still take is refused before
/// any run, naming the size, the room and where it was read: the tighter of a container's
/// cgroup limit and MemAvailable, whichever it is.
#[test]
fn a_touch_buffer_that_does_not_fit_is_refused_before_any_run() {
    let m = fixture_copy("kvm-emr-16"); // cgroup v2, this process in /container/app
    let group = m.path().join("sys/fs/cgroup/container/app");
    std::fs::create_dir_all(&group).unwrap();
    let write = |rel: &str, text: &str| std::fs::write(m.path().join(rel), text).unwrap();
    write(
        "proc/meminfo",
        "MemTotal: 67108864 kB\nMemAvailable: 62914560 kB\n",
    );
    write("sys/fs/cgroup/container/app/memory.max", "536870912\n");
    write("sys/fs/cgroup/container/app/memory.current", "402653184\n");
    let refused = |size: &str| {
        let out = cpulab_on(m.path())
            .args(["pingpong", "--pairs", "0:0", "--touch", size])
            .args(BRIEF)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--touch {size}");
        assert!(
            out.stdout.is_empty(),
            "no run: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        err
    };
    // 128 MiB left under the group's 512 MiB limit, of 60 GiB available.
    let err = refused("100M");
    assert!(err.contains("--touch 100 MiB"), "{err}");
    assert!(err.contains("the 128 MiB"), "{err}");
    assert!(err.contains("container/app/memory.max"), "{err}");
    assert!(err.contains("`--touch 64M`"), "{err}");
    // No limit on the group: MemAvailable binds.
    write("sys/fs/cgroup/container/app/memory.max", "max\n");
    write("proc/meminfo", "MemAvailable: 102400 kB\n");
    let err = refused("64M");
    assert!(err.contains("the 100 MiB"), "{err}");
    assert!(err.contains("MemAvailable in"), "{err}");
}

/// `N:unpinned`: the initiator pinned, the responder left to the scheduler within the allowed
/// CPUs, in both endpoint modes. The pinned end is seen only on its CPU, the free end only on
/// allowed ones, and the two shared a CPU exactly when the free end was seen on the pinned one.
#[test]
fn a_half_pinned_pair_tracks_where_the_free_end_ran() {
    let allowed = cpulab::affinity::get(0).unwrap().to_vec();
    let Some(&pinned) = allowed.get(1) else {
        common::skipped(test_name!(), "a half-pinned pair needs two allowed CPUs");
        return;
    };
    let pair = format!("{pinned}:unpinned");
    for endpoints in [&[][..], &["--processes"][..]] {
        let mut args = vec!["--pairs", &pair, "--method", "pipe"];
        args.extend_from_slice(endpoints);
        let doc = pingpong_json(&args);
        let runs = doc["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{endpoints:?}: {doc}");
        let run = &runs[0];
        assert_physics(run);
        assert_eq!(run["placement"], "unpinned");
        assert_eq!(run["cpu_a"], pinned, "{endpoints:?}");
        assert!(run["cpu_b"].is_null(), "{endpoints:?}");
        let w = &run["where_ran"];
        let samples = w["samples"].as_u64().unwrap();
        assert!(samples >= 1, "{w}");
        let cpus = |side: &str| -> Vec<(u32, u64)> {
            w[side]
                .as_object()
                .unwrap()
                .iter()
                .map(|(c, n)| (c.parse().unwrap(), n.as_u64().unwrap()))
                .collect()
        };
        assert_eq!(cpus("initiator_cpus"), [(pinned, samples)], "{w}");
        let free = cpus("responder_cpus");
        assert!(free.iter().all(|(c, _)| allowed.contains(c)), "{w}");
        let on_pinned = free.iter().find(|(c, _)| *c == pinned).map_or(0, |x| x.1);
        assert_eq!(w["same_cpu_samples"], on_pinned, "{w}");
        // A task pinned to one CPU cannot migrate (null: the counter was unreadable).
        assert!(
            matches!(w["initiator_migrations"].as_u64(), Some(0) | None),
            "{w}"
        );
        // Each end blocks on its pipe once per round trip, or is preempted by the woken peer.
        for side in ["initiator", "responder"] {
            let c = &run["counters"][side];
            let per_rt = f(&c["voluntary_switches_per_rt"]) + f(&c["involuntary_switches_per_rt"]);
            assert!(
                per_rt >= 0.9,
                "{side} {endpoints:?}: {per_rt} per round trip"
            );
        }
        let back: cpulab::pingpong::PingpongReport = serde_json::from_value(doc).unwrap();
        assert_eq!(back.runs[0].cpus_label(), format!("{pinned}:*"));
    }
    let out = cpulab()
        .args(["pingpong", "--pairs", &format!("unpinned:{pinned}")])
        .args(BRIEF)
        .output()
        .unwrap();
    common::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = format!("unpinned pipe (*:{pinned}): initiator on ");
    assert!(text.contains(&line), "{text}");
    assert!(
        text.contains(&format!("responder on cpu{pinned} 100%")),
        "{text}"
    );
}

#[test]
fn two_processes_report_counters_of_each() {
    let doc = pingpong_json(&["--processes", "--pairs", "0:0", "--method", "pipe"]);
    let c = &doc["runs"][0]["counters"];
    assert_eq!(doc["runs"][0]["endpoints"], "processes");
    assert_ne!(c["initiator"]["task_id"], c["responder"]["task_id"]);
    assert!(c["responder"]["task"]["voluntary_switches"].is_u64(), "{c}");
}

#[test]
fn spin_on_one_cpu_is_skipped_with_the_reason() {
    let doc = pingpong_json(&["--method", "spin", "--pairs", "0:0"]);
    assert!(doc["runs"].as_array().unwrap().is_empty());
    let s = &doc["skipped"][0];
    assert_eq!(s["placement"], "same-cpu");
    assert!(s["reason"].as_str().unwrap().contains("meaningless"), "{s}");
    // The text view says so too.
    let out = cpulab()
        .args(["pingpong", "--method", "spin", "--pairs", "0:0"])
        .args(BRIEF)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("skipped spin same-cpu"));
}

#[test]
fn bad_cpu_lists_exit_2_with_one_line() {
    let cases: &[&[&str]] = &[
        &["--cpus", "1-0"],
        &["--cpus", "a"],
        &["--cpus", "0-"],
        &["--cpus", "4096"],
        &["--pairs", "0:4096"],
        &["--pairs", "0-1"],
        &["--pairs", "x:0"],
        &["--pairs", "4096:unpinned"],
        &["--pairs", "unpinned:4096"],
        &["--pairs", "0:unpinnned"],
        &["--pairs", "any"],
        &["--method", "carrier-pigeon"],
        &["--max-time", "0"],
        &["--warmup", "soon"],
        &["--target-ci", "lots"],
    ];
    for args in cases {
        let out = cpulab().arg("pingpong").args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        // The line starts with the flag it is about.
        assert!(err.contains(args[0]), "{args:?}: {err}");
    }
}

fn taskset_cpu0(args: &[&str]) -> std::process::Output {
    common::cpulab_under_taskset("0", &[&["pingpong"][..], args].concat())
}

#[test]
fn under_taskset_one_cpu_it_measures_what_it_can_and_says_so() {
    if !installed(test_name!(), &[("taskset", "util-linux")]) {
        return;
    }
    let out = taskset_cpu0(&[BRIEF, &["--json"]].concat());
    let doc = common::json_of(&out);
    let classes: Vec<&str> = doc["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["placement"].as_str().unwrap())
        .collect();
    assert_eq!(classes, ["same-cpu", "unpinned"]);
    assert_eq!(doc["cpus"], "0");
    let notes = doc["conditions"]["notes"].to_string();
    assert!(notes.contains("only one CPU"), "{notes}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("only one CPU"));
    for r in doc["runs"].as_array().unwrap() {
        assert_physics(r);
    }
    if online_cpus() > 1 {
        // A CPU outside the allowed set is bad input.
        for pairs in ["0:1", "1:unpinned", "*:1"] {
            let out = taskset_cpu0(&["--pairs", pairs]);
            assert_eq!(out.status.code(), Some(2), "{pairs}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("outside"), "{pairs}: {err}");
        }
    } else {
        common::skipped(
            test_name!(),
            "a CPU outside the allowed set needs a second online CPU",
        );
    }
}

#[test]
fn pairs_all_adds_a_matrix() {
    let out = cpulab()
        .args([
            "pingpong",
            "--pairs",
            "all",
            "--max-time",
            "0.05",
            "--warmup",
            "0.01",
        ])
        .arg("--no-load-check")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("p50 round trip in us"), "{text}");
    assert!(text.contains("same-cpu"));
}
