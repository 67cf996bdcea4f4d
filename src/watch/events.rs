//! The four scheduler events cpulab reads, decoded from raw records into plain values.
//!
//! Each tracepoint says something different about a wakeup, and mixing them up is how peers have
//! shipped wrong placement figures:
//! - `sched_waking` is emitted by the waker, on the waker's CPU: the sample's own pid/tid and CPU
//!   are the waker (unless the record's flags say it ran in interrupt context, where the
//!   "current" task is whoever was interrupted). Its `target_cpu` is where the wakee *last ran*,
//!   not where it will run, so cpulab never uses it for placement.
//! - `sched_wakeup` is emitted once the wakee has been put on a run queue: its `target_cpu` is
//!   where it was placed. It may be emitted on that CPU (the wake list), so its sample CPU is not
//!   the waker's either.
//! - `sched_switch` ends one task's run and starts the next: the wakee's switch-in minus its
//!   wakeup is its wakeup-to-run latency; a `prev_state` of running (or the preempted marker)
//!   means the task stays runnable and starts waiting on the run queue.
//! - `sched_migrate_task` moves a task between CPUs.

use crate::bpf::format::{Field, Format};

/// Record flag bits in `common_flags` that mean the event ran in interrupt context (hardirq,
/// softirq, NMI): the interrupted task did not cause it.
const IRQ_CONTEXT_FLAGS: i64 = 0x08 | 0x10 | 0x40;
/// `prev_state` bit for a task switched out by preemption (`TASK_REPORT_MAX`, printed `R+`).
const PREEMPTED: i64 = 0x100;

/// One decoded scheduler event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Waking {
        waker_tid: i32,
        waker_cpu: u32,
        /// The waker ran in interrupt context: `waker_tid` is just whoever was interrupted.
        in_irq: bool,
        wakee_tid: i32,
    },
    Wakeup {
        wakee_tid: i32,
        target_cpu: u32,
    },
    Switch {
        cpu: u32,
        prev_tid: i32,
        /// The previous task stays runnable (preempted or yielded), so it starts waiting.
        prev_runnable: bool,
        next_tid: i32,
    },
    Migrate {
        tid: i32,
        dest_cpu: u32,
    },
}

/// An event and when it happened (`CLOCK_MONOTONIC`, ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timed {
    pub time_ns: u64,
    pub event: Event,
}

/// Field positions of the four tracepoints on this kernel.
#[derive(Clone, Debug)]
pub struct Decoder {
    pub ids: [u64; 4],
    flags: Field,
    waking_pid: Field,
    wakeup_pid: Field,
    wakeup_target: Field,
    prev_pid: Field,
    prev_state: Field,
    next_pid: Field,
    migrate_pid: Field,
    migrate_dest: Field,
    type_field: Field,
}

impl Decoder {
    /// From the formats of `sched_waking`, `sched_wakeup`, `sched_switch`, `sched_migrate_task`.
    pub fn new(
        waking: &Format,
        wakeup: &Format,
        switch: &Format,
        migrate: &Format,
    ) -> Result<Self, String> {
        Ok(Self {
            ids: [waking.id, wakeup.id, switch.id, migrate.id],
            type_field: switch.field("common_type")?,
            flags: switch.field("common_flags")?,
            waking_pid: waking.field("pid")?,
            wakeup_pid: wakeup.field("pid")?,
            wakeup_target: wakeup.field("target_cpu")?,
            prev_pid: switch.field("prev_pid")?,
            prev_state: switch.field("prev_state")?,
            next_pid: switch.field("next_pid")?,
            migrate_pid: migrate.field("pid")?,
            migrate_dest: migrate.field("dest_cpu")?,
        })
    }

    /// Decodes one sample's raw record; `None` for another event or a short record.
    pub fn decode(&self, tid: i32, cpu: u32, raw: &[u8]) -> Option<Event> {
        let id = self.type_field.int(raw)? as u64;
        let slot = match self.ids.iter().position(|i| *i == id)? {
            0 => 0, // waking
            1 => 3, // wakeup
            2 => 1, // switch
            _ => 2, // migrate
        };
        let in_irq = self.flags.int(raw)? & IRQ_CONTEXT_FLAGS != 0;
        self.decode_slot(slot, tid, cpu, raw, in_irq)
    }

    /// Decodes a raw record known to be of event `slot` (in [`super::EVENT_NAMES`] order:
    /// waking, switch, migrate, wakeup) without reading its common fields. The BPF mechanism
    /// needs this: the kernel hands a tracepoint program a record whose first 8 bytes (type,
    /// flags, preempt count, pid) it has overwritten, so `in_irq` comes from the caller.
    pub fn decode_slot(
        &self,
        slot: u32,
        tid: i32,
        cpu: u32,
        raw: &[u8],
        in_irq: bool,
    ) -> Option<Event> {
        let int = |f: &Field| f.int(raw);
        match slot {
            0 => Some(Event::Waking {
                waker_tid: tid,
                waker_cpu: cpu,
                in_irq,
                wakee_tid: int(&self.waking_pid)? as i32,
            }),
            3 => Some(Event::Wakeup {
                wakee_tid: int(&self.wakeup_pid)? as i32,
                target_cpu: int(&self.wakeup_target)? as u32,
            }),
            1 => {
                let state = int(&self.prev_state)?;
                Some(Event::Switch {
                    cpu,
                    prev_tid: int(&self.prev_pid)? as i32,
                    prev_runnable: state & 0xff == 0 || state & PREEMPTED != 0,
                    next_tid: int(&self.next_pid)? as i32,
                })
            }
            2 => Some(Event::Migrate {
                tid: int(&self.migrate_pid)? as i32,
                dest_cpu: int(&self.migrate_dest)? as u32,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::watch::ring::{RawRecord, parse_records};

    pub(crate) fn fixture_decoder() -> Decoder {
        let f = |n: &str| {
            let p = format!(
                "{}/tests/fixtures/watch/{n}.format",
                env!("CARGO_MANIFEST_DIR")
            );
            Format::parse(&std::fs::read_to_string(p).unwrap()).unwrap()
        };
        Decoder::new(
            &f("sched_waking"),
            &f("sched_wakeup"),
            &f("sched_switch"),
            &f("sched_migrate_task"),
        )
        .unwrap()
    }

    #[test]
    fn recorded_bytes_decode_into_consistent_events() {
        let d = fixture_decoder();
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/watch/records.bin"
        ))
        .unwrap();
        let (mut switches, mut wakeups, mut other) = (0, 0, 0);
        parse_records(&bytes, |r| {
            let RawRecord::Sample { tid, cpu, raw, .. } = r else {
                return;
            };
            match d.decode(tid, cpu, raw) {
                Some(Event::Switch {
                    prev_tid, cpu: c, ..
                }) => {
                    // The switching-out task is the one the sample was taken in (the sample
                    // says -1 for a task that has already exited).
                    if tid > 0 {
                        assert_eq!(prev_tid, tid);
                    }
                    assert_eq!(c, cpu);
                    switches += 1;
                }
                Some(Event::Wakeup { target_cpu, .. }) => {
                    assert!(target_cpu < 4096);
                    wakeups += 1;
                }
                Some(Event::Waking { waker_cpu, .. }) => {
                    assert_eq!(waker_cpu, cpu);
                    other += 1;
                }
                Some(Event::Migrate { .. }) => other += 1,
                None => panic!("record of an event not opened"),
            }
        });
        assert!(switches > 0 && wakeups > 0, "{switches} {wakeups} {other}");
    }

    #[test]
    fn preempted_and_running_states_are_runnable() {
        let d = fixture_decoder();
        let mut raw = vec![0u8; 64];
        raw[0..2].copy_from_slice(&(d.ids[2] as u16).to_ne_bytes());
        raw[24..28].copy_from_slice(&7i32.to_ne_bytes());
        raw[56..60].copy_from_slice(&9i32.to_ne_bytes());
        for (state, runnable) in [(0i64, true), (0x100, true), (1, false), (2, false)] {
            raw[32..40].copy_from_slice(&state.to_ne_bytes());
            assert_eq!(
                d.decode(7, 1, &raw),
                Some(Event::Switch {
                    cpu: 1,
                    prev_tid: 7,
                    prev_runnable: runnable,
                    next_tid: 9
                })
            );
        }
    }
}
