//! The history: every measured result kept with the machine's fingerprint, so a regression is
//! found and the configuration change that came with it is named.
//!
//! Field notes D: after an OS upgrade the same job ran 13% slower, and finding why (the
//! governor, tuned's defaults, the mitigations) took days of A/B work. Regression trackers
//! (Perfherder, Hunter, Conbench, bencher) find the change in a series but do not know the
//! machine's configuration; cpulab probes it anyway. So every measuring command records its
//! result here, with its typed figures (unit, direction, samples) and its fingerprint facts
//! (kernel, mitigations, governors, halt polling, scheduler sysctls, ...), and `cpulab history
//! check` tests the newest run of each kind against the earlier runs on the same hardware and
//! names the facts that changed where the figures did.
//!
//! - [`store`]: the SQLite file (WAL, busy timeout, versioned schema, refuses what is not its own).
//! - [`fingerprint`]: host key, hardware key and facts, from a probe.
//! - [`redact`]: passwords and connection strings never reach the file.
//! - [`check`]: the regression test and the attribution to changed facts.
//! - [`changes`]: change points over a long series (deterministic).
//! - [`html`]: `history report --html`.
//! - [`actions`]: what each `cpulab history` subcommand does, its output emitted as every result is.
//!
//! Recording never fails a command: the result is printed first, and a history that cannot be
//! written (a full disk, a read-only directory, a corrupt or foreign file, a newer schema) costs
//! one line on stderr, nothing more.

pub mod actions;
pub mod changes;
pub mod check;
pub mod fingerprint;
pub mod html;
pub mod redact;
pub mod store;
pub mod when;

use crate::report::envelope::Kind;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where runs are recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `--no-history` or `CPULAB_HISTORY=off`.
    Off,
    At(PathBuf),
}

/// The environment variable that names the history file (`off`: none).
pub const ENV: &str = "CPULAB_HISTORY";

/// The default file: `/var/lib/cpulab/history.sqlite` for root, else
/// `$XDG_STATE_HOME/cpulab/history.sqlite` (`~/.local/state/cpulab/history.sqlite`).
pub fn default_path(is_root: bool, xdg_state: Option<PathBuf>, home: Option<PathBuf>) -> PathBuf {
    if is_root {
        return PathBuf::from("/var/lib/cpulab/history.sqlite");
    }
    let state = xdg_state
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".local/state")))
        .unwrap_or_else(|| PathBuf::from(".local/state"));
    state.join("cpulab/history.sqlite")
}

/// Decides the location (pure): `--no-history` wins, then `--history PATH`, then
/// `CPULAB_HISTORY` (`off` or a path), then the default.
pub fn resolve(
    flag: Option<&Path>,
    no_history: bool,
    env: Option<String>,
    default: impl FnOnce() -> PathBuf,
) -> Location {
    if no_history {
        return Location::Off;
    }
    if let Some(p) = flag {
        return Location::At(p.to_path_buf());
    }
    match env.as_deref() {
        Some("off") => Location::Off,
        Some(p) if !p.is_empty() => Location::At(PathBuf::from(p)),
        _ => Location::At(default()),
    }
}

static CONFIGURED: OnceLock<(Location, bool)> = OnceLock::new();

/// Sets where this process records (from the global flags), once, at start.
pub fn configure(flag: Option<&Path>, no_history: bool, quiet: bool) {
    let loc = resolve(flag, no_history, std::env::var(ENV).ok(), || {
        default_path(
            nix::unistd::geteuid().is_root(),
            std::env::var_os("XDG_STATE_HOME").map(PathBuf::from),
            std::env::var_os("HOME").map(PathBuf::from),
        )
    });
    if let Location::At(path) = &loc {
        crate::emit::protect(path, "the history cpulab records in");
    }
    let _ = CONFIGURED.set((loc, quiet));
}

/// The configured location (the default one when [`configure`] was not called).
pub fn location() -> Location {
    match CONFIGURED.get() {
        Some((l, _)) => l.clone(),
        None => {
            configure(None, false, false);
            CONFIGURED.get().map_or(Location::Off, |(l, _)| l.clone())
        }
    }
}

/// The history as one sink of the one output path ([`crate::emit`]): the dispatcher hands it
/// to every command that has a result, after its stdout and files.
pub struct Recorder {
    /// The root the machine is read below when the document carries no probe of its own.
    pub root: PathBuf,
}

impl crate::emit::Sink for Recorder {
    /// Never fails: a history that cannot be written costs one line on stderr, not the result.
    fn write(&self, result: &crate::emit::Emitted) -> Result<()> {
        record(result.kind, &result.document, &self.root);
        Ok(())
    }
}

/// Records a result just printed, wherever the history is configured. Never fails: a history
/// that cannot be written is one line on stderr. Models (`sim`), comparisons and the history's
/// own listings are not runs, and a probe is the fingerprint every run already carries.
fn record(kind: Kind, document: &serde_json::Value, root: &Path) {
    if matches!(
        kind,
        Kind::Sim | Kind::Compare | Kind::Probe | Kind::History
    ) {
        return;
    }
    let Location::At(path) = location() else {
        return;
    };
    let quiet = CONFIGURED.get().is_some_and(|(_, q)| *q);
    // Read under another root (a fixture tree), the facts are that tree's while the figures
    // are this machine's: a run of no real machine, which would mislead every later check.
    if root != Path::new("/") {
        crate::output::status(
            quiet,
            &format!(
                "not recorded in the history: --root {} describes another machine's tree",
                root.display()
            ),
        );
        return;
    }
    let words: Vec<String> = std::env::args().collect();
    match record_at(&path, kind, document, root, &words) {
        Ok(id) => crate::output::status(
            quiet,
            &format!("recorded in the history as @{id} ({})", path.display()),
        ),
        Err(e) => eprintln!(
            "cpulab: history not recorded: {}",
            format!("{e:#}").replace('\n', " ")
        ),
    }
}

/// Builds the stored run of a document: its fingerprint (its own probe, else the machine's now),
/// its typed figures, the redacted command line.
pub fn new_run(
    kind: Kind,
    document: &serde_json::Value,
    fingerprint: fingerprint::Fingerprint,
    command_line: &[String],
) -> store::NewRun {
    let figures = crate::registry::lookup(kind)
        .and_then(|e| (e.figures)(document).ok())
        .unwrap_or_default();
    let c = &document["conditions"];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    store::NewRun {
        time_unix_s: c["started_unix_s"]
            .as_i64()
            .filter(|t| *t > 0)
            .unwrap_or(now),
        kind: kind.as_str().to_string(),
        fingerprint,
        command_line: redact::command_line(command_line),
        noisy: c["noisy"].as_bool().unwrap_or(false),
        figures,
        document: document.clone(),
    }
}

fn record_at(
    path: &Path,
    kind: Kind,
    document: &serde_json::Value,
    root: &Path,
    words: &[String],
) -> Result<i64> {
    let fp = match document.get("probe") {
        Some(_) => fingerprint::of_document(document),
        None => None,
    };
    let fp = match fp {
        Some(f) => f,
        None => {
            let machine = crate::machine::Machine::detect(root)?;
            fingerprint::of_probe(&crate::probe::probe(&machine))
        }
    };
    let run = new_run(kind, document, fp, words);
    store::Store::open(path)?.insert(&run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_location_follows_flag_then_environment_then_default() {
        let d = || PathBuf::from("/d");
        assert_eq!(resolve(Some(Path::new("/f")), true, None, d), Location::Off);
        assert_eq!(
            resolve(Some(Path::new("/f")), false, Some("/e".into()), d),
            Location::At("/f".into())
        );
        assert_eq!(
            resolve(None, false, Some("/e".into()), d),
            Location::At("/e".into())
        );
        assert_eq!(resolve(None, false, Some("off".into()), d), Location::Off);
        assert_eq!(resolve(None, false, None, d), Location::At("/d".into()));
        assert_eq!(
            default_path(true, None, None),
            PathBuf::from("/var/lib/cpulab/history.sqlite")
        );
        assert_eq!(
            default_path(false, None, Some("/home/u".into())),
            PathBuf::from("/home/u/.local/state/cpulab/history.sqlite")
        );
        assert_eq!(
            default_path(false, Some("/s".into()), Some("/home/u".into())),
            PathBuf::from("/s/cpulab/history.sqlite")
        );
    }
}
