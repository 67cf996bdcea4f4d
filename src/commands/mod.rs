//! One file per subcommand: its clap flags, their validation into settings, and `run`.
//!
//! Each `run` takes its flags and the [`Global`] options; nothing here imports `cli.rs`, which
//! stands above and dispatches to these.

pub mod compare;
pub mod completions;
pub mod doctor;
pub mod exporter;
pub mod fleet;
pub mod history;
pub mod host;
pub mod manpages;
pub mod probe;
pub mod remedy;
pub mod report;
pub mod sim;
pub mod try_;

use std::path::PathBuf;

/// Options every subcommand understands.
#[derive(Debug, Clone, clap::Args)]
pub struct Global {
    /// No progress or status lines on stderr.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    /// Read /sys and /proc below this directory instead of `/` (for fixture trees; measuring
    /// commands always run on the live machine).
    #[arg(
        long,
        global = true,
        hide = true,
        value_name = "DIR",
        default_value = "/"
    )]
    pub root: PathBuf,
    /// Record measured results in this history file instead of the default
    /// (`~/.local/state/cpulab/history.sqlite`; as root `/var/lib/cpulab/history.sqlite`;
    /// or `CPULAB_HISTORY`, `off` for none).
    #[arg(long, global = true, value_name = "PATH")]
    pub history: Option<PathBuf>,
    /// Record nothing in the history.
    #[arg(long, global = true)]
    pub no_history: bool,
}

impl Global {
    /// Checks that `--root` is a machine tree before its facts are read: not a directory, or one
    /// without `sys/devices/system/cpu/online`, is one line and exit 2 (it was exit 1 with the
    /// path of the first file that could not be read).
    pub fn machine_root(&self) -> anyhow::Result<()> {
        if !self.root.is_dir() {
            return Err(crate::error::bad_input(format!(
                "--root {}: no such directory; give a directory laid out like / (with sys/ and proc/)",
                self.root.display()
            )));
        }
        let online = self.root.join("sys/devices/system/cpu/online");
        if !online.is_file() {
            return Err(crate::error::bad_input(format!(
                "--root {}: not a machine root, {} is missing; give a directory laid out like / \
                 (see tests/fixtures/)",
                self.root.display(),
                online.display()
            )));
        }
        Ok(())
    }
}
