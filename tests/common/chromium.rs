//! Headless Chromium for the tests that check a page renders (tests/report.rs, tests/fleet.rs):
//! find the browser, run it on a file with a deadline.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The Chromium binary installed here, if any.
pub fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// Runs headless Chromium on `html` with `extra` arguments, killed after 90 s.
pub fn headless(bin: &str, html: &Path, extra: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = pipe.read_to_end(&mut b);
            b
        })
    };
    let stdout = reader(Box::new(child.stdout.take().unwrap()));
    let stderr = reader(Box::new(child.stderr.take().unwrap()));
    // Never hang the test suite on a wedged browser: wait with a deadline, and on it kill the
    // child through its handle. Until this handle reaps it, its pid stays its own (a zombie
    // keeps it), so the kill cannot reach a process that reused the pid.
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{bin} did not finish in 90 s: killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}
