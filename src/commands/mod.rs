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
