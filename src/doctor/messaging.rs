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
//! message. The experiment sends a fixed number of messages, so each placement is calibrated by
//! one short run of its own (packed can be 8x faster than spread on a VM: one calibration of
//! packed made every spread run 8x too long, and the stage once took 51 s), and every run is
//! sized from its placement's latest rate and the time left before the stage's deadline.
//! Repetitions stop at the deadline with the ones done (at least one of each placement).

use super::mode::Deadline;
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

/// Messages per sender and receiver in the calibration run.
const PROBE: usize = 200;

/// A placement's rate in messages per second, from one short run (that also warms the pipes
/// and threads up).
fn calibrate(machine: &Machine, p: &Placement, plan: &Plan, progress: &Progress) -> Result<f64> {
    let r = Messaging::run(machine, &p.settings(plan, PROBE), progress)?;
    Ok(r.runs.first().map_or(0.0, |x| x.messages_per_s))
}

/// Messages per sender and receiver so a run at `rate` lasts `secs` (pure): at least the
/// calibration's count, at most a million messages per receiver, as the experiment allows.
pub fn messages_for(rate: f64, secs: f64, plan: &Plan) -> usize {
    let per_message = (plan.groups * plan.senders * plan.senders) as f64;
    let m = rate * secs / per_message;
    (m.max(0.0) as usize).clamp(PROBE, 1_000_000 / plan.senders.max(1))
}

/// Runs every placement up to `repetitions` times, interleaved, each run sized to fit before
/// the deadline, and condenses each; the second value says what the deadline cut.
pub fn run(
    machine: &Machine,
    placements: &[Placement],
    plan: &Plan,
    deadline: Deadline,
    mut tick: impl FnMut(),
) -> Result<(Vec<ThroughputRun>, Option<String>)> {
    let quiet = |_: crate::experiment::Level, _: &str| {};
    let progress = Progress::new(&quiet);
    let mut rate = Vec::with_capacity(placements.len());
    for p in placements {
        rate.push(calibrate(machine, p, plan, &progress)?);
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); placements.len()];
    let mut per_message: Vec<BTreeMap<String, f64>> = vec![BTreeMap::new(); placements.len()];
    let mut received = vec![0u64; placements.len()];
    let mut done = 0;
    'reps: for rep in 0..plan.repetitions {
        for (i, p) in placements.iter().enumerate() {
            crate::signals::check()?;
            let runs_left = (plan.repetitions - rep) * placements.len() - i;
            let secs = plan
                .run_time
                .as_secs_f64()
                .min(deadline.left_s() / runs_left as f64);
            // Past the deadline after the first full round: stop with what was measured.
            if rep > 0 && deadline.passed() {
                break 'reps;
            }
            let messages = messages_for(rate[i], secs, plan);
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
            // The next run of this placement is sized from what it just did.
            if one.messages_per_s > 0.0 {
                rate[i] = one.messages_per_s;
            }
            tick();
        }
        done = rep + 1;
    }
    let cut = (done < plan.repetitions)
        .then(|| format!("{done} of {} repetitions per placement", plan.repetitions));
    let runs = placements
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
        .collect();
    Ok((runs, cut))
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
        let (r, cut) = run(&machine, &placements, &plan, Deadline::after(60.0), || {}).unwrap();
        assert!(cut.is_none(), "a minute is enough for 2 x 3 runs of 30 ms");
        assert_eq!(r.len(), 3);
        for t in &r {
            assert_eq!(t.samples_per_s.len(), 2);
            assert!(t.samples_per_s.iter().all(|v| *v > 0.0));
            assert!(t.per_message.values().all(|v| *v >= 0.0));
            // The rate and its interval are those of the two runs' own rates.
            crate::testing::assert_mean_ci_of("messages/s", &t.messages_per_s, &t.samples_per_s);
        }
    }

    /// Regression (issue 22): the stage sized every run from one calibration and nothing
    /// stopped it. With its deadline already passed it runs one round and says what it cut.
    #[test]
    fn a_passed_deadline_stops_after_one_round_and_says_so() {
        let plan = Plan {
            groups: 1,
            senders: 2,
            run_time: Duration::from_millis(30),
            repetitions: 4,
        };
        let machine = Machine::detect(std::path::Path::new("/")).unwrap();
        let cpu = crate::affinity::current_cpu().unwrap_or(0);
        let (r, cut) = run(
            &machine,
            &[Placement::Packed(cpu)],
            &plan,
            Deadline::after(0.0),
            || {},
        )
        .unwrap();
        assert_eq!(r[0].samples_per_s.len(), 1);
        assert_eq!(cut.as_deref(), Some("1 of 4 repetitions per placement"));
    }

    #[test]
    fn runs_are_sized_by_rate_and_time() {
        let plan = Plan {
            groups: 2,
            senders: 4,
            run_time: Duration::from_millis(500),
            repetitions: 5,
        };
        // 32 messages per message count; 320k/s for 0.5 s = 5000 each.
        assert_eq!(messages_for(320_000.0, 0.5, &plan), 5000);
        assert_eq!(
            messages_for(320_000.0, 0.0, &plan),
            PROBE,
            "never below the calibration"
        );
        assert_eq!(
            messages_for(1e12, 10.0, &plan),
            250_000,
            "the experiment's cap"
        );
    }
}
