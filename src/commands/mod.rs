//! One file per subcommand: its clap flags, their validation into settings, and `run`.

pub mod compare;
pub mod completions;
pub mod doctor;
pub mod history;
pub mod manpages;
pub mod oscost;
pub mod pair;
pub mod pingpong;
pub mod print;
pub mod probe;
pub mod report;
pub mod scale;
pub mod share;
pub mod sim;
pub mod try_;
