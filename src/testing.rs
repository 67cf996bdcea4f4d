//! Helpers for the unit tests beside the code.

/// Writes `files` (path relative to the root, content) under a fresh temporary root: a machine
/// tree for a reader that takes a root path.
pub fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    for (rel, text) in files {
        let p = t.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    t
}

/// Says that a unit test (or part of one) cannot run on this machine, and why: a visible
/// `SKIPPED:` line past the harness's capture, and under `CI=true` a failure, since CI runs as
/// root on a machine with every facility the tests use.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("SKIPPED: {test}: {why}");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{line}; under CI=true a test that cannot run fails");
    }
    let _ = writeln!(std::io::stderr(), "{line}");
}
