//! `cpulab doctor`: the investigation of the field notes in one command.
//!
//! The doctor probes the machine, chooses a battery of experiments from what the machine has,
//! condenses each result into [`measurements`], and hands those to the [`rules`], which name
//! causes as [`findings`]. Measuring and judging are kept apart so every rule is a pure function
//! that can be tested on hand-built inputs, and so a saved doctor result can be judged again.

pub mod findings;
pub mod measurements;
pub mod rules;
