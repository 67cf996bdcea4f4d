//! `cpulab exporter` against a real Prometheus (Debian's `prometheus` package): a private
//! server on a free loopback port in a temporary directory, scraping every second, queried
//! through its HTTP API. Also `promtool check metrics` on a live scrape, and `promtool check
//! rules` and `promtool test rules` on the rules in contrib/prometheus.

mod common;

use common::prom::{
    Prometheus, contrib, exporter, free_port, label, prometheus_installed, spawn, value,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn curl(url: &str, query: Option<&str>) -> String {
    let mut c = Command::new("curl");
    c.args(["-s", "--max-time", "10", "-G", url]);
    if let Some(q) = query {
        c.args(["--data-urlencode", &format!("query={q}")]);
    }
    String::from_utf8_lossy(&c.output().unwrap().stdout).to_string()
}

/// A private Prometheus scraping `target` every second, with the recording rules loaded and
/// the console templates served.
fn start_prometheus(target_port: u16) -> Prometheus {
    Prometheus::start_with_consoles(
        &format!(
            "rule_files:\n  - {}\nscrape_configs:\n  - job_name: cpulab\n    static_configs:\n      \
             - targets: ['127.0.0.1:{target_port}']\n",
            contrib().join("cpulab.rules.yml").display()
        ),
        &contrib().join("consoles"),
    )
}

/// Waits until Prometheus has stored a scrape of the exporter taken after `t` (seconds since
/// the epoch) and returns that scrape's time: each scrape reads the source afresh, so
/// everything counted before `t` is in what Prometheus holds up to then.
fn scraped_after(prom: &Prometheus, t: f64) -> f64 {
    let r = prom.wait_for(&format!("timestamp(up{{job=\"cpulab\"}}) > {t:.3}"));
    value(&r[0])
}

/// Wall-clock seconds since the epoch, as Prometheus stamps its samples.
fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn promtool_checks_and_tests_the_rules() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    let check = Command::new("promtool")
        .current_dir(contrib())
        .args(["check", "rules", "cpulab.rules.yml", "cpulab.alerts.yml"])
        .output()
        .unwrap();
    common::assert_success(&check);
    let test = Command::new("promtool")
        .current_dir(contrib())
        .args(["test", "rules", "cpulab.rules.test.yml"])
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
}

/// Every alert can be routed and read: a `severity` of `warning` or `info`, a `runbook_url` to
/// its own section of docs/runbooks.md (a renamed heading would break the link silently), and
/// in cpulab.rules.test.yml a case where it fires and one where it must not. No promtool needed.
#[test]
fn every_alert_has_a_severity_a_runbook_and_both_cases() {
    let read = |p: PathBuf| std::fs::read_to_string(&p).unwrap();
    let yaml = |p: PathBuf| serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&read(p)).unwrap();
    let rules = yaml(contrib().join("cpulab.alerts.yml"));
    let tests = yaml(contrib().join("cpulab.rules.test.yml"));
    let runbooks = read(contrib().join("../../docs/runbooks.md"));
    let sections: std::collections::BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(str::to_lowercase)
        .collect();
    // (alert, expected alerts) of every alert_rule_test case.
    let cases: Vec<(&str, usize)> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|t| t["alert_rule_test"].as_sequence())
        .flatten()
        .map(|c| {
            let n = c["exp_alerts"].as_sequence().map_or(0, Vec::len);
            (c["alertname"].as_str().unwrap(), n)
        })
        .collect();
    let alerts: Vec<&serde_yaml_ng::Value> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter(|r| r["alert"].as_str().is_some())
        .collect();
    assert!(alerts.len() >= 9, "{} alerts", alerts.len());
    for rule in alerts {
        let name = rule["alert"].as_str().unwrap();
        let severity = rule["labels"]["severity"].as_str().unwrap_or("");
        assert!(
            ["warning", "info"].contains(&severity),
            "{name}: {severity}"
        );
        let url = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
        let anchor = url.rsplit_once("/docs/runbooks.md#").map(|(_, a)| a);
        assert_eq!(anchor, Some(name.to_lowercase().as_str()), "{name}: {url}");
        assert!(
            sections.contains(&name.to_lowercase()),
            "{name}: no ## {name} in runbooks.md"
        );
        assert!(
            cases.iter().any(|&(a, n)| a == name && n > 0),
            "{name}: no case where it fires"
        );
        assert!(
            cases.iter().any(|&(a, n)| a == name && n == 0),
            "{name}: no case where it does not fire"
        );
    }
}

#[test]
fn promtool_check_metrics_passes_on_a_live_scrape() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    let port = free_port();
    // With the doctor's findings from a history, so their series are checked too.
    let dir = tempfile::tempdir().unwrap();
    let (history, _) = common::doctor_history(dir.path());
    let _e = exporter(
        port,
        &[
            "--mechanism",
            "fake",
            "--comm",
            "postgres",
            "--probe-interval",
            "10s",
            "--history",
            history.to_str().unwrap(),
        ],
    );
    let text = curl(&format!("http://127.0.0.1:{port}/metrics"), None);
    assert!(text.contains("cpulab_wakeups_total"), "{text}");
    assert!(text.contains("cpulab_doctor_finding{"), "{text}");
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_real_prometheus_scrapes_well_formed_metrics() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    let port = free_port();
    let _e = exporter(port, &["--mechanism", "fake", "--comm", "postgres,nginx"]);
    let prom = start_prometheus(port);
    let up = prom.wait_for("up{job=\"cpulab\"} == 1");
    assert_eq!(up.len(), 1);
    // Two scrapes at least, so rates exist.
    let rates = prom.wait_for("rate(cpulab_wakeups_total[10s]) > 0");
    let targets: std::collections::BTreeSet<&str> =
        rates.iter().map(|s| label(s, "target")).collect();
    assert_eq!(targets, ["nginx", "postgres"].into_iter().collect());
    let classes: std::collections::BTreeSet<&str> =
        rates.iter().map(|s| label(s, "class")).collect();
    assert!(classes.contains("same-cpu"), "{classes:?}");
    assert!(
        rates
            .iter()
            .all(|s| ["idle", "busy"].contains(&label(s, "dest")))
    );
    // Every histogram's _count equals its +Inf bucket, scrape after scrape.
    let diff = prom.query(
        "max_over_time((cpulab_wakeup_latency_seconds_count - on (instance, job, target, class) \
         cpulab_wakeup_latency_seconds_bucket{le=\"+Inf\"})[30s:1s])",
    );
    assert!(!diff.is_empty());
    assert!(diff.iter().all(|s| value(s) == 0.0), "{diff:?}");
    // Buckets are cumulative: every class's p50 is at most its p99.
    let q = |p: f64| {
        prom.wait_for(&format!(
            "histogram_quantile({p}, sum by (class, le) (rate(cpulab_wakeup_latency_seconds_bucket[10s])))"
        ))
    };
    let (p50, p99) = (q(0.5), q(0.99));
    for s in &p50 {
        let hi = p99
            .iter()
            .find(|x| label(x, "class") == label(s, "class"))
            .unwrap();
        assert!(value(s) <= value(hi), "{s} {hi}");
        assert!(value(s) > 0.0);
    }
    // The recording rules evaluate on live data.
    // The fake source grows every class of every target by the same 10 wakeups a snapshot
    // (7 to an idle CPU, 3 to a busy one), so of K classes all but same-cpu cross CPUs: the
    // share is exactly (K - 1) / K, and 0.7 of the wakeups go to an idle CPU.
    let share = prom.wait_for("instance:cpulab_cross_cpu_wakeups:ratio_rate5m");
    let k = classes.len() as f64;
    assert!(
        (value(&share[0]) - (k - 1.0) / k).abs() < 1e-9,
        "cross share {} of {k} classes {classes:?}",
        share[0]
    );
    let idle = prom.wait_for(
        "sum(rate(cpulab_wakeups_total{dest=\"idle\"}[10s])) / sum(rate(cpulab_wakeups_total[10s]))",
    );
    assert!((value(&idle[0]) - 0.7).abs() < 1e-9, "{}", idle[0]);
    // The machine facts carry this kernel.
    let info = prom.wait_for("cpulab_machine_info");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(label(&info[0], "kernel"), release.trim());
    assert_eq!(value(&info[0]), 1.0);
    let exporter = prom.wait_for("cpulab_exporter_info");
    assert_eq!(label(&exporter[0], "mechanism"), "fake");
    // The console page renders against this Prometheus.
    let page = curl(
        &format!(
            "http://127.0.0.1:{}/consoles/cpulab.html?instance=127.0.0.1:{port}",
            prom.port
        ),
        None,
    );
    assert!(page.contains("cpulab: wakeup placement"), "{page}");
    // The machine facts, from this Prometheus's own query of this exporter.
    assert!(
        page.contains(&format!("<td>Kernel</td><td>{}</td>", release.trim())),
        "{page}"
    );
}

/// The tests with a live wakeup source run one at a time: the busy loop of one would load the
/// CPUs the other's pinned pair is measured on.
static ONE_LIVE_SOURCE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The placement assertions need the in-kernel wakeup source: a known pinned pair (a copy of
/// cpulab renamed, so its command name is its own) runs at the same CPU, then one CPU apart.
#[test]
fn placement_classes_follow_a_pinned_pair() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    if online.trim() == "0" {
        common::skipped(test_name!(), "one CPU: no pair of CPUs to pin apart");
        return;
    }
    let _one = ONE_LIVE_SOURCE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pair = dir.path().join("cpulab-pair");
    std::fs::copy(common::cpulab_path(), &pair).unwrap();
    let port = free_port();
    // Always attached: a pingpong run is often over within a second, which one second in four
    // (the default) may miss or count four times.
    let _e = exporter(port, &["--comm", "cpulab-pair", "--attach-every", "1"]);
    let prom = start_prometheus(port);
    prom.wait_for("up{job=\"cpulab\"} == 1");
    // Each run is read as the difference between two scrapes: one taken after it starts to
    // be possible (after the previous run ended) and the first one after it ends. A range
    // looking back from the end (`increase(...[range])`) reached the first run's last
    // scrape and extrapolated to the window's edges: a CI run saw 21,694 same-CPU wakeups in
    // the second window, all of them the first run's.
    let run = |pairs: &str| {
        let before = scraped_after(&prom, now_s());
        let out = Command::new(&pair)
            .env("CPULAB_HISTORY", "off")
            .args([
                "pingpong", "--quiet", "--json", "--method", "pipe", "--pairs", pairs,
            ])
            .args(["--max-time", "5s"])
            .output()
            .unwrap();
        common::assert_success(&out);
        let after = scraped_after(&prom, now_s());
        (before, after)
    };
    let t1 = run("0:0");
    let t2 = run("0:1");
    // The series of a run not yet seen at `before` counts from zero.
    let by_class = |&(before, after): &(f64, f64)| {
        let at = |t: f64| {
            prom.query(&format!(
                "sum by (class) (cpulab_wakeups_total{{target=\"cpulab-pair\"}} @ {t})"
            ))
            .iter()
            .map(|s| (label(s, "class").to_string(), value(s)))
            .collect::<std::collections::BTreeMap<_, _>>()
        };
        let (b, a) = (at(before), at(after));
        a.iter()
            .map(|(c, v)| (c.clone(), v - b.get(c).copied().unwrap_or(0.0)))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let (w1, w2) = (by_class(&t1), by_class(&t2));
    for w in [&w1, &w2] {
        assert!(w.values().all(|v| *v >= 0.0), "a counter went back: {w:?}");
    }
    let same =
        |w: &std::collections::BTreeMap<String, f64>| w.get("same-cpu").copied().unwrap_or(0.0);
    let cross = |w: &std::collections::BTreeMap<String, f64>| {
        w.iter()
            .filter(|(c, _)| *c != "same-cpu")
            .map(|(_, v)| v)
            .sum::<f64>()
    };
    assert!(same(&w1) > cross(&w1), "first run {w1:?}");
    assert!(cross(&w2) > same(&w2), "second run {w2:?}");
    let median = |class_match: &str, &(before, after): &(f64, f64)| {
        let buckets = |t: f64| {
            format!(
                "sum by (le) (cpulab_wakeup_latency_seconds_bucket{{target=\"cpulab-pair\",class{class_match}}} @ {t})"
            )
        };
        let r = prom.query(&format!(
            "histogram_quantile(0.5, {a} - ({b} or {a} * 0))",
            a = buckets(after),
            b = buckets(before)
        ));
        assert!(!r.is_empty(), "no latency buckets for class{class_match}");
        value(&r[0])
    };
    let (cross2, same1) = (median("!=\"same-cpu\"", &t2), median("=\"same-cpu\"", &t1));
    assert!(
        cross2 > same1,
        "cross-CPU median {cross2} s is not above the same-CPU median {same1} s"
    );
}

/// At the default `--attach-every` (4) the counts Prometheus stores are estimates: every
/// published wakeup count is a multiple of 4, the attached ratio says 1/4, and the share of
/// time actually attached over a run is about a quarter (one second in four: always attached
/// would give 1, never re-attached about 0).
#[test]
fn the_default_estimate_reaches_prometheus() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    let _one = ONE_LIVE_SOURCE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let busy = dir.path().join("cpulab-est");
    std::fs::copy("/bin/sh", &busy).unwrap();
    let port = free_port();
    let _e = exporter(port, &["--comm", "cpulab-est"]);
    let prom = start_prometheus(port);
    prom.wait_for("up{job=\"cpulab\"} == 1");
    // A shell that waits for one short process after another for 12 s: each exit wakes it.
    let out = Command::new(&busy)
        .args([
            "-c",
            "end=$(($(date +%s) + 12)); while [ $(date +%s) -lt $end ]; do /bin/true; done",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    scraped_after(&prom, now_s());
    let ratio = prom.wait_for("cpulab_exporter_attached_ratio");
    assert_eq!(value(&ratio[0]), 0.25);
    let counts = prom.wait_for("cpulab_wakeups_total{target=\"cpulab-est\"} > 0");
    for s in &counts {
        assert_eq!(value(s) % 4.0, 0.0, "not a multiple of 4: {s}");
    }
    let share = prom.wait_for("rate(cpulab_exporter_attached_seconds_total[12s])");
    let share = value(&share[0]);
    assert!(
        (0.1..=0.45).contains(&share),
        "attached {share:.3} of the time, not about a quarter"
    );
}

/// The exporter's own health as Prometheus stores it: `process_*` and, for every collector,
/// its success and duration.
fn assert_self_health_arrives(prom: &Prometheus) {
    let mut at = std::collections::BTreeMap::new();
    for m in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let s = prom.wait_for(&format!("{m}{{job=\"cpulab\"}}"));
        assert_eq!(s.len(), 1, "{m}: {s:?}");
        at.insert(m, value(&s[0]));
    }
    // Physics, on the values scraped (not a query that is waited on until it holds): resident
    // within virtual; started before it was scraped; descriptors within their limit.
    assert!(
        at["process_resident_memory_bytes"] <= at["process_virtual_memory_bytes"],
        "{at:?}"
    );
    assert!(at["process_start_time_seconds"] < now_s(), "{at:?}");
    assert!(at["process_open_fds"] <= at["process_max_fds"], "{at:?}");
    for c in [
        "wakeups",
        "machine",
        "idle",
        "interrupts",
        "doctor",
        "process",
    ] {
        for m in [
            "cpulab_exporter_collector_success",
            "cpulab_exporter_collector_duration_seconds",
        ] {
            let s = prom.wait_for(&format!("{m}{{collector=\"{c}\"}}"));
            assert_eq!(s.len(), 1, "{m} {c}: {s:?}");
            let v = value(&s[0]);
            // Success is 1 or 0, never anything between; a collection that ran took some time
            // (a duration left at its zero would be one never measured).
            if m.ends_with("_success") {
                assert!(v == 0.0 || v == 1.0, "{m} {c}: {s:?}");
            } else {
                assert!(v > 0.0 && v.is_finite(), "{m} {c}: {s:?}");
            }
        }
    }
    let build = prom.wait_for("cpulab_exporter_build_info");
    assert_eq!(label(&build[0], "version"), env!("CARGO_PKG_VERSION"));
    let mech = prom.wait_for("cpulab_exporter_mechanism_info");
    assert_eq!(
        (label(&mech[0], "mechanism"), label(&mech[0], "fallback")),
        ("fake", "none")
    );
}

/// Rewrites the halt-polling window at `param` while the exporter runs (facts re-read every
/// second) and waits until Prometheus holds the new `cpulab_machine_info`, and then only it.
fn assert_a_changed_fact_is_seen(prom: &Prometheus, param: &Path, new: &str) {
    let old = std::fs::read_to_string(param).unwrap().trim().to_string();
    assert_ne!(old, new);
    let first = prom.wait_for(&format!(
        "cpulab_machine_info{{guest_halt_poll_ns=\"{old}\"}}"
    ));
    assert_eq!(first.len(), 1, "{first:?}");
    std::fs::write(param, format!("{new}\n")).unwrap();
    prom.wait_for(&format!(
        "cpulab_machine_info{{guest_halt_poll_ns=\"{new}\"}}"
    ));
    // The scrape after that one no longer has the old series: Prometheus marks it stale, so
    // an instant query sees exactly one info series, the new one.
    scraped_after(prom, now_s());
    let all = prom.query("cpulab_machine_info");
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(label(&all[0], "guest_halt_poll_ns"), new);
    // Every other fact is as it was.
    for l in ["kernel", "idle_driver", "boot_options"] {
        assert_eq!(label(&all[0], l), label(&first[0], l), "{l}");
    }
}

#[test]
fn self_health_arrives_and_a_rewritten_halt_poll_window_changes_machine_info() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    // A copy of a fixture machine whose parameter file the test rewrites: nothing on this
    // machine changes.
    let root = common::fixture_copy("kvm-guest");
    let port = free_port();
    let _e = exporter(
        port,
        &[
            "--mechanism",
            "fake",
            "--facts-interval",
            "1s",
            "--root",
            root.path().to_str().unwrap(),
        ],
    );
    let prom = start_prometheus(port);
    assert_self_health_arrives(&prom);
    // This fixture has no /proc/interrupts: that collector says it failed, and why.
    let failed = prom.wait_for("cpulab_exporter_collector_success{collector=\"interrupts\"} == 0");
    assert_eq!(failed.len(), 1);
    prom.wait_for(
        "cpulab_exporter_read_errors_total{collector=\"interrupts\",kind=\"not_found\"} > 0",
    );
    assert!(prom.query("cpulab_interrupts_total").is_empty());
    let param = root
        .path()
        .join("sys/module/haltpoll/parameters/guest_halt_poll_ns");
    assert_a_changed_fact_is_seen(&prom, &param, "424242");
}

/// Restores a parameter file's value on drop, also when the test panics.
struct Restore(PathBuf, String);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, &self.1);
    }
}

#[test]
fn a_live_halt_poll_window_change_is_seen_through_prometheus() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    let param = PathBuf::from("/sys/module/haltpoll/parameters/guest_halt_poll_ns");
    let Ok(old) = std::fs::read_to_string(&param) else {
        common::skipped(
            test_name!(),
            "no /sys/module/haltpoll here (not a KVM guest with the haltpoll module)",
        );
        return;
    };
    let Ok(old_ns) = old.trim().parse::<u64>() else {
        panic!("guest_halt_poll_ns holds `{old}`");
    };
    // One nanosecond more: a changed fact that changes nothing a neighbour could measure.
    let _restore = Restore(param.clone(), old.clone());
    if std::fs::write(&param, old.as_bytes()).is_err() {
        common::skipped(
            test_name!(),
            "guest_halt_poll_ns is not writable (not root)",
        );
        return;
    }
    let port = free_port();
    let _e = exporter(port, &["--mechanism", "fake", "--facts-interval", "1s"]);
    let prom = start_prometheus(port);
    assert_a_changed_fact_is_seen(&prom, &param, &(old_ns + 1).to_string());
}

/// Command names of the kernel threads alive now (`PF_KTHREAD` in `/proc/PID/stat`'s flags).
fn kernel_thread_names() -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let flags: u64 = stat[close + 1..]
            .split_whitespace()
            .nth(6)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        if flags & 0x0020_0000 != 0 {
            out.insert(stat[open + 1..close].to_string());
        }
    }
    out
}

/// Issue 28: a default exporter (no target named) started first names a busy pair started
/// after it (a renamed copy of cpulab, so its command name is its own: this host runs no
/// systemd, so its processes sit in no unit and are named by command) while the pair runs,
/// counts its wakeups under that name, never names a kernel thread, and never lets a counter
/// go back as slots change hands.
#[test]
fn default_targets_name_a_busy_pair_started_later_and_never_a_kernel_thread() {
    if !prometheus_installed(test_name!()) {
        return;
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    if online.trim() == "0" {
        common::skipped(test_name!(), "one CPU: no pair of CPUs to pin apart");
        return;
    }
    let kernel_threads = kernel_thread_names();
    if kernel_threads.is_empty() {
        common::skipped(test_name!(), "no kernel thread visible in /proc");
        return;
    }
    let _one = ONE_LIVE_SOURCE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pair = dir.path().join("cpulab-busy");
    std::fs::copy(common::cpulab_path(), &pair).unwrap();
    let port = free_port();
    let _e = exporter(port, &[]);
    let prom = start_prometheus(port);
    prom.wait_for("up{job=\"cpulab\"} == 1");
    let started = now_s();
    let mut c = Command::new(&pair);
    c.env("CPULAB_HISTORY", "off")
        .args(["pingpong", "--quiet", "--no-load-check", "--method", "pipe"])
        .args(["--pairs", "0:1", "--target-ci", "0", "--max-time", "60s"]);
    let mut busy = spawn(c);
    let named = prom.wait_for("cpulab_wakeups_total{target=\"cpulab-busy\"}");
    assert!(
        busy.0.try_wait().unwrap().is_none(),
        "the pair ended before it was named"
    );
    let first = prom.query("min(timestamp(cpulab_wakeups_total{target=\"cpulab-busy\"}))");
    eprintln!(
        "cpulab-busy named in a scrape {:.1} s after it started ({} series)",
        value(&first[0]) - started,
        named.len()
    );
    prom.wait_for("sum(cpulab_wakeups_total{target=\"cpulab-busy\"}) > 0");
    drop(busy);
    let t = scraped_after(&prom, now_s());
    let labels: Vec<String> = prom
        .query(&format!(
            "count by (target) (count_over_time(cpulab_wakeups_total[10m] @ {t:.3}))"
        ))
        .iter()
        .map(|s| label(s, "target").to_string())
        .collect();
    assert!(labels.iter().any(|l| l == "cpulab-busy"), "{labels:?}");
    let kernel: Vec<&String> = labels
        .iter()
        .filter(|l| kernel_threads.contains(*l))
        .collect();
    assert!(
        kernel.is_empty(),
        "kernel threads named: {kernel:?} in {labels:?}"
    );
    let resets = prom.query(&format!("resets(cpulab_wakeups_total[10m] @ {t:.3}) > 0"));
    assert!(resets.is_empty(), "counters went back: {resets:?}");
}

/// One of cpulab's own guests (`cpulab host guest`, hidden) as a VM of this host, killed with
/// the test; returns once its two vCPU threads run (or says why the guest did not start).
fn guest(program: &str, dir: &Path) -> (common::prom::Killed, u32) {
    let log = dir.join(format!("guest-{program}.err"));
    let mut c = common::cpulab_process();
    c.args(["--quiet", "host", "guest", "--program", program])
        .args(["--vcpus", "2", "--duration", "30s"]);
    // Its own --duration ends it if the test process dies before dropping it.
    let err = std::fs::File::create(&log).unwrap();
    let mut g = common::prom::Killed(c.stdout(Stdio::null()).stderr(err).spawn().unwrap());
    let pid = g.0.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let vcpu_threads = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
                    .filter(|c| c.starts_with("CPU ") && c.trim().ends_with("/KVM"))
                    .count()
            })
            .unwrap_or(0)
    };
    while vcpu_threads() < 2 {
        if let Ok(Some(status)) = g.0.try_wait() {
            panic!(
                "the {program} guest ended ({status}) before its vCPU threads ran: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the {program} guest's vCPU threads did not start in 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    (g, pid)
}

/// A value of `q` at the time `t` (an instant query `@ t`), the one series it selects.
fn at(prom: &Prometheus, q: &str, t: f64) -> f64 {
    let r = prom.query(&format!("{q} @ {t:.3}"));
    assert_eq!(r.len(), 1, "{q} @ {t}: {r:?}");
    value(&r[0])
}

/// On this KVM host, two of cpulab's guests are VMs the exporter finds in /proc and a real
/// Prometheus stores: each under its name (`cpulab (PID)`: cpulab's guests have no QEMU
/// `-name`) with its two vCPUs; the busy guest's run seconds grow between two scrapes, by at
/// most what two vCPU threads can run in that time; no run or wait counter ever goes back; and
/// per-vCPU series exist for the VM named by `--vm` only; and KVM's own events per VM obey
/// the guests' physics.
#[test]
fn the_vms_of_a_kvm_host_reach_prometheus_with_cumulative_run_and_wait() {
    if !prometheus_installed(test_name!()) || !common::kvm_usable(test_name!()) {
        return;
    }
    let _one = ONE_LIVE_SOURCE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (_burn, burn_pid) = guest("burn", dir.path());
    let (_halt, halt_pid) = guest("halt", dir.path());
    let (named, unnamed) = (
        format!("cpulab ({burn_pid})"),
        format!("cpulab ({halt_pid})"),
    );
    let port = free_port();
    let _e = exporter(
        port,
        &["--mechanism", "fake", "--no-history", "--vm", &named],
    );
    let prom = start_prometheus(port);
    for vm in [&named, &unnamed] {
        prom.wait_for(&format!("cpulab_vm_vcpus{{vm=\"{vm}\"}} == 2"));
        // Their threads are named as QEMU names them, so both are found at the first scrape.
        prom.wait_for(&format!("cpulab_vm_vcpus_measured{{vm=\"{vm}\"}} == 2"));
    }
    let vms = prom.wait_for("cpulab_vms >= 2");
    assert_eq!(vms.len(), 1, "{vms:?}");
    prom.wait_for("cpulab_exporter_collector_success{collector=\"vms\"} == 1");
    let run = format!("cpulab_vm_vcpu_run_seconds_total{{vm=\"{named}\"}}");
    let wait = format!("cpulab_vm_vcpu_wait_seconds_total{{vm=\"{named}\"}}");
    prom.wait_for(&run);
    let t1 = scraped_after(&prom, now_s());
    let t2 = scraped_after(&prom, t1 + 5.0);
    let (r1, r2) = (at(&prom, &run, t1), at(&prom, &run, t2));
    let (w1, w2) = (at(&prom, &wait, t1), at(&prom, &wait, t2));
    // Two busy vCPU threads ran between the two scrapes; together they cannot have run and
    // waited more than twice the time between them (each read is within its scrape, so a
    // little slack for where in the scrape it fell).
    assert!(r2 > r1, "run seconds did not grow: {r1} -> {r2}");
    assert!(w2 >= w1, "wait seconds went back: {w1} -> {w2}");
    let span = t2 - t1;
    assert!(
        (r2 - r1) + (w2 - w1) <= 2.0 * span * 1.05 + 0.5,
        "two vCPU threads ran {} s and waited {} s in {span} s",
        r2 - r1,
        w2 - w1
    );
    for m in [
        "cpulab_vm_vcpu_run_seconds_total",
        "cpulab_vm_vcpu_wait_seconds_total",
        "cpulab_vcpu_run_seconds_total",
        "cpulab_vcpu_wait_seconds_total",
    ] {
        // Every VM's, not only this test's guests: the exporter's counters never go back.
        let all = prom.query(&format!("count_over_time({m}[1m] @ {t2:.3})"));
        assert!(!all.is_empty(), "{m}: no series");
        let resets = prom.query(&format!("resets({m}[1m] @ {t2:.3}) > 0"));
        assert!(resets.is_empty(), "{m} went back: {resets:?}");
    }
    // Per vCPU: both vCPUs of the named VM, and nothing of any other VM.
    let per_vcpu = prom.query(&format!("cpulab_vcpu_run_seconds_total @ {t2:.3}"));
    let mut vcpus: Vec<&str> = per_vcpu.iter().map(|s| label(s, "vcpu")).collect();
    vcpus.sort();
    assert_eq!(vcpus, ["0", "1"], "{per_vcpu:?}");
    assert!(
        per_vcpu.iter().all(|s| label(s, "vm") == named),
        "{per_vcpu:?}"
    );
    // The vCPUs' sum is the VM's.
    let sum: f64 = per_vcpu.iter().map(value).sum();
    assert!((sum - r2).abs() < 1e-6, "{sum} vs {r2}");
    // Migrations are published where the kernel counts them, and only there.
    let counted = at(&prom, "cpulab_vm_vcpu_migrations_available", t2);
    let migrations = prom.query(&format!(
        "cpulab_vm_vcpu_migrations_total{{vm=\"{named}\"}} @ {t2:.3}"
    ));
    assert_eq!(
        migrations.len(),
        usize::from(counted == 1.0),
        "{migrations:?}"
    );
    // KVM's events per VM, by BPF on KVM's raw tracepoints (the exporter's default): the halt
    // ping-pong halts and sends IPIs between the two scrapes, each halt was won by polling or
    // slept, the polling it won is CPU time its threads ran, and the burner never halts.
    assert_eq!(
        at(&prom, "cpulab_vm_kvm_events_available", t2),
        1.0,
        "the exporter logs why KVM's events are not counted"
    );
    let of = |m: &str, vm: &str, t: f64| at(&prom, &format!("{m}{{vm=\"{vm}\"}}"), t);
    let halts = |t| of("cpulab_vm_halts_total", &unnamed, t);
    assert!(halts(t2) > halts(t1), "{} -> {}", halts(t1), halts(t2));
    let ipis = |t| of("cpulab_vm_ipis_sent_total", &unnamed, t);
    assert!(ipis(t2) > ipis(t1), "{} -> {}", ipis(t1), ipis(t2));
    for t in [t1, t2] {
        assert_eq!(
            of("cpulab_vm_halt_polls_won_total", &unnamed, t)
                + of("cpulab_vm_halts_slept_total", &unnamed, t),
            halts(t),
            "every halt won or slept"
        );
    }
    let polled = of("cpulab_vm_halt_poll_success_seconds_total", &unnamed, t2)
        - of("cpulab_vm_halt_poll_success_seconds_total", &unnamed, t1);
    let ran = of("cpulab_vm_vcpu_run_seconds_total", &unnamed, t2)
        - of("cpulab_vm_vcpu_run_seconds_total", &unnamed, t1);
    // Both read in each scrape, a moment apart: slack for that moment.
    assert!(
        polled >= 0.0 && polled <= ran + 0.05,
        "polled {polled} s, ran {ran} s"
    );
    assert_eq!(
        of("cpulab_vm_halts_total", &named, t2),
        0.0,
        "a burner halts"
    );
    assert_eq!(of("cpulab_vm_ipis_sent_total", &named, t2), 0.0);
    for m in [
        "cpulab_vm_halts_total",
        "cpulab_vm_ipis_sent_total",
        "cpulab_vm_halt_poll_success_seconds_total",
    ] {
        let resets = prom.query(&format!("resets({m}[1m] @ {t2:.3}) > 0"));
        assert!(resets.is_empty(), "{m} went back: {resets:?}");
    }
}
