//! `cpulab host` on a fixture machine's fake QEMU process (tests/fixtures/NAME/proc/PID,
//! written by generate.py's `write_qemu`): the fixture is one moment's files, so while the
//! watch runs on a copy of it a thread advances each vCPU thread's `schedstat` as a busy vCPU's
//! grows (on a CPU nine tenths of the time, waiting for one a twentieth), each file replaced
//! whole (a rename) so no look reads half of one. Where each vCPU is (its `stat`) stays, so the
//! window sees the fixture's placement.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Every `proc/PID/task/TID/schedstat` of a thread named as QEMU names vCPU threads.
fn vcpu_schedstats(root: &Path) -> Vec<(PathBuf, u64, u64)> {
    let mut out = Vec::new();
    for p in std::fs::read_dir(root.join("proc")).unwrap().flatten() {
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if !(comm.starts_with("CPU ") && comm.trim_end().ends_with("/KVM")) {
                continue;
            }
            let path = t.path().join("schedstat");
            let text = std::fs::read_to_string(&path).unwrap();
            let mut w = text.split_whitespace().map(|x| x.parse::<u64>().unwrap());
            out.push((path, w.next().unwrap(), w.next().unwrap()));
        }
    }
    out
}

/// `cpulab --root COPY host --json --duration 1s` on a copy of fixture `name` whose vCPU
/// threads run busy through the window; the copy (kept for the caller) and the result.
pub fn watch(name: &str) -> (tempfile::TempDir, Value) {
    let (copy, out) = run(name, &[]);
    super::assert_success(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "host");
    (copy, v)
}

/// The same watch with `args` added, as it ended.
pub fn run(name: &str, args: &[&str]) -> (tempfile::TempDir, std::process::Output) {
    let copy = super::fixture_copy(name);
    let stats = vcpu_schedstats(copy.path());
    assert!(!stats.is_empty(), "{name} has no vCPU thread under proc/");
    let stop = AtomicBool::new(false);
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let ns = start.elapsed().as_nanos() as u64;
                for (path, run, wait) in &stats {
                    let tmp = path.with_extension("new");
                    let text = format!("{} {} 1000\n", run + ns / 10 * 9, wait + ns / 20);
                    std::fs::write(&tmp, text).unwrap();
                    std::fs::rename(&tmp, path).unwrap();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let out = super::cpulab_on(copy.path())
            .args(["--quiet", "host", "--json", "--duration", "1s"])
            .args(args)
            .output()
            .unwrap();
        stop.store(true, Ordering::Relaxed);
        out
    });
    (copy, out)
}
