//! How long the doctor measures: a [`Mode`] (quick, default, thorough), the [`Budget`] of
//! time it gives each experiment, and the [`Deadline`] each stage stops at. The battery chooses
//! the stages, the stages run them; both read the budget from here, so neither imports the
//! other for it.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How long and how precisely to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A 15 s budget: the essentials at short intervals.
    Quick,
    /// A 30 s budget.
    Default,
    /// Longer runs for tighter intervals.
    Thorough,
}

/// A stage's deadline: when it must be done by.
#[derive(Clone, Copy, Debug)]
pub struct Deadline(pub Instant);

impl Deadline {
    pub fn after(secs: f64) -> Self {
        Self(Instant::now() + Duration::from_secs_f64(secs.max(0.0)))
    }

    /// Seconds left (0 once passed).
    pub fn left_s(&self) -> f64 {
        self.0
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.0
    }
}

/// Time allowed to each experiment in a mode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Budget {
    /// Longest a wakeup run may last, seconds (it stops earlier once its interval is tight).
    pub wakeup_max_s: f64,
    /// Length of one batch of round trips, seconds.
    pub wakeup_batch_s: f64,
    /// Interval half-width, relative to the mean, at which a wakeup run may stop early.
    pub wakeup_target_ci: f64,
    pub messaging_run_s: f64,
    pub messaging_repetitions: usize,
    /// Time for the OS-cost figures, seconds.
    pub oscost_s: f64,
    pub share_run_s: f64,
    pub share_repetitions: usize,
    pub scale_run_s: f64,
    /// Per placement of a preset, seconds.
    pub preset_run_s: f64,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Quick => "quick",
            Mode::Default => "default",
            Mode::Thorough => "thorough",
        }
    }

    /// The whole run's budget in seconds, probe and judging included.
    pub fn total_s(self) -> f64 {
        match self {
            Mode::Quick => 15.0,
            Mode::Default => 30.0,
            Mode::Thorough => 120.0,
        }
    }

    pub fn budget(self) -> Budget {
        let (wm, wb, ci, mr, mn, os, sr, sn, sc, pr) = match self {
            Mode::Quick => (0.6, 0.03, 0.03, 0.25, 3, 2.2, 0.25, 3, 0.3, 1.0),
            Mode::Default => (2.0, 0.05, 0.02, 0.5, 5, 6.5, 0.5, 4, 0.5, 3.0),
            Mode::Thorough => (6.0, 0.1, 0.01, 1.0, 8, 13.5, 1.0, 6, 1.0, 5.0),
        };
        Budget {
            wakeup_max_s: wm,
            wakeup_batch_s: wb,
            wakeup_target_ci: ci,
            messaging_run_s: mr,
            messaging_repetitions: mn,
            oscost_s: os,
            share_run_s: sr,
            share_repetitions: sn,
            scale_run_s: sc,
            preset_run_s: pr,
        }
    }
}
