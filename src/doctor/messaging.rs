//! The doctor's throughput stage: the registry's `messaging` experiment (hackbench-like) run in
//! three placements.
//!
//! The wakeup figures answer "how fast is one request"; this answers "how much gets through when
//! many tasks talk at once", and the two can disagree: on the field notes' VM a pair is 8x faster
//! on one vCPU, yet hackbench runs faster spread over both (field notes, reproduced). Each run is
//! one run of [`crate::messaging::Messaging`] (threads over pipes) with its tasks placed
//! `packed` (all on one CPU), `spread` (pinned round-robin over the allowed CPUs) or `os` (placed
//! by the scheduler). Runs of the placements are interleaved, repetition by repetition, so drift
//! falls on all of them alike; the system counters around each run give halts and IPIs per
//! message. The experiment sends a fixed number of messages; one short calibration run sizes it so
//! a run lasts about the budget's run time.

use crate::counters::SystemSnapshot;
use crate::cpulist::CpuSet;
use crate::doctor::measurements::ThroughputRun;
use crate::experiment::{Experiment, Progress};
use crate::machine::Machine;
use crate::messaging::{Channel, Messaging, MessagingSettings, Tasks};
use crate::stats::MeanCi;
use anyhow::Result;
use std::collections::BTreeMap;
use std::time::Duration;

/// How the doctor runs the messaging test.
#[derive(Clone, Debug)]
pub struct Plan {
    pub groups: usize,
    /// Senders per group; each group has as many receivers.
    pub senders: usize,
    /// About how long one run should last.
    pub run_time: Duration,
    /// Runs per placement.
    pub repetitions: usize,
}

/// Where the threads run.
#[derive(Clone, Debug, PartialEq)]
pub enum Placement {
    /// Every thread on this one CPU.
    Packed(u32),
    /// Thread k on CPU k mod n of this set.
    Spread(CpuSet),
    /// Not pinned: anywhere in this set.
    Os(CpuSet),
}

impl Placement {
    pub fn label(&self) -> &'static str {
        match self {
            Self::Packed(_) => "packed",
            Self::Spread(_) => "spread",
            Self::Os(_) => "os",
        }
    }

    pub fn cpus(&self) -> CpuSet {
        match self {
            Self::Packed(c) => CpuSet::from_iter_u32([*c]),
            Self::Spread(s) | Self::Os(s) => s.clone(),
        }
    }

    /// The experiment's settings for one run of `messages` per sender and receiver.
    fn settings(&self, plan: &Plan, messages: usize) -> MessagingSettings {
        MessagingSettings {
            groups: plan.groups,
            senders: plan.senders,
            messages,
            tasks: Tasks::Threads,
            channel: Channel::Pipe,
            repeats: 1,
            cpus: Some(self.cpus()),
            spread: matches!(self, Self::Spread(_)),
            check_load: false,
        }
    }
}

/// Messages per sender and receiver so a run lasts about `plan.run_time`: one short run (that
/// also warms the pipes and threads up) measures the rate.
fn calibrate(machine: &Machine, p: &Placement, plan: &Plan, progress: &Progress) -> Result<usize> {
    const PROBE: usize = 200;
    let r = Messaging::run(machine, &p.settings(plan, PROBE), progress)?;
    let rate = r.runs.first().map_or(0.0, |x| x.messages_per_s);
    let per_message = (plan.groups * plan.senders * plan.senders) as f64;
    let m = rate * plan.run_time.as_secs_f64() / per_message;
    // At most a million messages per receiver, as the experiment allows.
    Ok((m as usize).clamp(PROBE, 1_000_000 / plan.senders.max(1)))
}

/// Runs every placement `repetitions` times, interleaved, and condenses each.
pub fn run(
    machine: &Machine,
    placements: &[Placement],
    plan: &Plan,
    mut tick: impl FnMut(),
) -> Result<Vec<ThroughputRun>> {
    let quiet = |_: crate::experiment::Level, _: &str| {};
    let progress = Progress::new(&quiet);
    let Some(first) = placements.first() else {
        return Ok(Vec::new());
    };
    let messages = calibrate(machine, first, plan, &progress)?;
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); placements.len()];
    let mut per_message: Vec<BTreeMap<String, f64>> = vec![BTreeMap::new(); placements.len()];
    let mut received = vec![0u64; placements.len()];
    for _ in 0..plan.repetitions {
        for (i, p) in placements.iter().enumerate() {
            crate::signals::check()?;
            let before = SystemSnapshot::take(&machine.root);
            let r = Messaging::run(machine, &p.settings(plan, messages), &progress)?;
            let d = before.delta(&SystemSnapshot::take(&machine.root), &p.cpus());
            let Some(one) = r.runs.first() else {
                anyhow::bail!("the messaging experiment returned no run");
            };
            // Sum the counts over repetitions; divided by all messages below.
            for (k, v) in d.per_op(1) {
                *per_message[i].entry(k).or_insert(0.0) += v;
            }
            received[i] += one.messages_received;
            rates[i].push(one.messages_per_s);
            tick();
        }
    }
    Ok(placements
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let per = per_message[i]
                .iter()
                .map(|(k, v)| (k.clone(), v / received[i].max(1) as f64))
                .collect();
            Some(ThroughputRun {
                test: "messaging".into(),
                placement: p.label().into(),
                cpus: p.cpus(),
                messages_per_s: MeanCi::of(&rates[i])?,
                samples_per_s: rates[i].clone(),
                per_message: per,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_flow_in_every_placement_and_counters_are_per_message() {
        let plan = Plan {
            groups: 1,
            senders: 2,
            run_time: Duration::from_millis(30),
            repetitions: 2,
        };
        let machine = Machine::detect(std::path::Path::new("/")).unwrap();
        let cpu = crate::affinity::current_cpu().unwrap_or(0);
        let allowed = crate::affinity::get(0).unwrap();
        let placements = [
            Placement::Packed(cpu),
            Placement::Spread(allowed.clone()),
            Placement::Os(allowed),
        ];
        let r = run(&machine, &placements, &plan, || {}).unwrap();
        assert_eq!(r.len(), 3);
        for t in &r {
            assert_eq!(t.samples_per_s.len(), 2);
            assert!(t.samples_per_s.iter().all(|v| *v > 0.0));
            assert!(t.per_message.values().all(|v| *v >= 0.0));
            let m = &t.messages_per_s;
            assert!(m.ci95_low <= m.mean && m.mean <= m.ci95_high);
        }
    }
}
