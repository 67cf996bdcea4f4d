//! The doctor's progress bar on stderr: one bar over the whole battery, weighted by each
//! stage's expected duration, with the current step as its message. Hidden when stderr is not a
//! terminal or with `--quiet`; warnings are printed either way unless quiet.

use crate::output::Level;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

pub struct Progress {
    bar: ProgressBar,
    quiet: bool,
}

impl Progress {
    /// A bar over `total_s` expected seconds; hidden unless `visible`.
    pub fn new(total_s: f64, visible: bool, quiet: bool) -> Self {
        let bar = ProgressBar::with_draw_target(
            Some((total_s * 10.0).ceil() as u64),
            if visible {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            },
        );
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} doctor [{bar:30}] {elapsed:>3} {wide_msg}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        if visible {
            bar.enable_steady_tick(Duration::from_millis(120));
        }
        Self { bar, quiet }
    }

    /// The step now running.
    pub fn step(&self, msg: &str) {
        self.bar.set_message(msg.to_string());
    }

    /// A stage of `est_s` expected seconds is done.
    pub fn done(&self, est_s: f64) {
        self.bar.inc((est_s * 10.0).round() as u64);
    }

    /// A line that must be seen (unless quiet), printed above the bar.
    pub fn warn(&self, msg: &str) {
        if !self.quiet {
            self.bar.suspend(|| eprintln!("{msg}"));
        }
    }

    /// Forwards an experiment's progress by level: a step becomes the bar's message; notes and
    /// warnings are printed above the bar with their prefix.
    pub fn emit(&self, level: Level, msg: &str) {
        match level {
            Level::Step => self.step(msg),
            Level::Note | Level::Warning => self.warn(&format!("{}{msg}", level.prefix())),
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
