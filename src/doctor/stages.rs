//! Calling the experiment modules with the doctor's budget, and condensing what they return
//! (through [`super::adapt`]). One function per experiment; each is the single place that
//! knows how to drive its module.

use super::battery::Budget;
use super::measurements::{OsCosts, PresetRun, ScalePoint, ShareCheck, WakeupRun};
use super::progress::Progress;
use crate::machine::Machine;
use anyhow::{Result, bail};

const NOT_BUILT: &str = "this experiment is not built into this cpulab yet";

/// Wakeup round trips for every placement class, blocking and spinning, plus unpinned.
pub fn wakeup(_machine: &Machine, _b: &Budget, _p: &Progress) -> Result<Vec<WakeupRun>> {
    bail!("pingpong: {NOT_BUILT}")
}

/// The essential OS primitive costs and the frequency ramp.
pub fn oscost(_machine: &Machine, _b: &Budget, _p: &Progress) -> Result<OsCosts> {
    bail!("oscost: {NOT_BUILT}")
}

/// One CPU-bound worker alone, then one per allowed CPU.
pub fn share(_machine: &Machine, _b: &Budget, _p: &Progress) -> Result<ShareCheck> {
    bail!("share: {NOT_BUILT}")
}

/// Parallel scaling, compact against scatter.
pub fn scale(_machine: &Machine, _b: &Budget, _p: &Progress) -> Result<Vec<ScalePoint>> {
    bail!("scale: {NOT_BUILT}")
}

/// A real application preset under each placement.
pub fn preset(
    _machine: &Machine,
    name: &str,
    _b: &Budget,
    _p: &Progress,
) -> Result<Vec<PresetRun>> {
    bail!("pair --preset {name}: {NOT_BUILT}")
}
