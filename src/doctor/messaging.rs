//! A throughput test where many tasks communicate at once (in the spirit of hackbench).
//!
//! The wakeup figures answer "how fast is one request"; this answers "how much gets through when
//! many tasks talk at once", and the two can disagree: on the field notes' VM a pair is 8x faster
//! on one vCPU, yet hackbench runs faster spread over both (field notes, reproduced). Groups of
//! sender threads each write 100-byte messages to every receiver of their group through pipes;
//! receivers read them. Threads are pinned by placement (`packed`: all on one CPU; `spread`:
//! round-robin over the allowed CPUs; `os`: not pinned). Each run lasts a fixed time; the rate is
//! the messages received before the stop, divided by the interval actually measured. Runs of the
//! placements are interleaved, repetition by repetition, so drift falls on all of them alike.

use crate::affinity;
use crate::counters::SystemSnapshot;
use crate::cpulist::CpuSet;
use crate::doctor::measurements::ThroughputRun;
use crate::stats::MeanCi;
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Bytes per message, as hackbench.
pub const MESSAGE_BYTES: usize = 100;

/// How the messaging test is run.
#[derive(Clone, Debug)]
pub struct MessagingSettings {
    pub groups: usize,
    /// Senders per group; each group has as many receivers.
    pub senders: usize,
    /// Length of one run.
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

    fn pin(&self, k: usize) -> Result<()> {
        match self {
            Self::Packed(c) => affinity::pin_self(*c),
            Self::Spread(s) => {
                let v = s.to_vec();
                affinity::pin_self(v[k % v.len()])
            }
            Self::Os(s) => affinity::set(0, s),
        }
    }
}

/// Cache-line sized, so receivers counting do not share a line.
#[repr(align(64))]
#[derive(Default)]
struct Counter(AtomicU64);

/// One timed run: messages received per second, and the messages counted.
pub fn run_once(p: &Placement, s: &MessagingSettings) -> Result<(f64, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = s.groups * s.senders * 2;
    let start = Arc::new(Barrier::new(threads + 1));
    let mut counters: Vec<Arc<Counter>> = Vec::new();
    let mut handles = Vec::new();
    let mut writers: Vec<Arc<File>> = Vec::new();
    let mut k = 0;
    for _ in 0..s.groups {
        let mut group_writers = Vec::new();
        for _ in 0..s.senders {
            let (r, w) = nix::unistd::pipe().context("cannot create a pipe")?;
            let (r, w) = (File::from(r), Arc::new(File::from(w)));
            group_writers.push(w);
            let c = Arc::new(Counter::default());
            counters.push(c.clone());
            let (p, b) = (p.clone(), start.clone());
            let kk = k;
            k += 1;
            handles.push(std::thread::spawn(move || -> Result<()> {
                // Wait at the barrier even when pinning failed, or the others would wait forever.
                let pinned = p.pin(kk);
                b.wait();
                pinned?;
                receive(r, &c);
                Ok(())
            }));
        }
        for _ in 0..s.senders {
            let ws = group_writers.clone();
            let (p, b, st) = (p.clone(), start.clone(), stop.clone());
            let kk = k;
            k += 1;
            handles.push(std::thread::spawn(move || -> Result<()> {
                let pinned = p.pin(kk);
                b.wait();
                pinned?;
                send(&ws, &st)
            }));
        }
        writers.extend(group_writers);
    }
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(s.run_time);
    let counted: u64 = counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum();
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    // Receivers see end-of-file once every sender has stopped and the last write end is closed.
    drop(writers);
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_err = first_err.or(Some(e)),
            Err(_) => {
                first_err = first_err.or(Some(anyhow::anyhow!("a messaging thread panicked")))
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok((counted as f64 / elapsed, counted))
}

fn send(receivers: &[Arc<File>], stop: &AtomicBool) -> Result<()> {
    let msg = [0x5a_u8; MESSAGE_BYTES];
    while !stop.load(Ordering::Relaxed) {
        for w in receivers {
            // Writes of at most PIPE_BUF bytes are atomic, so senders never interleave.
            (&**w).write_all(&msg).context("messaging write failed")?;
        }
    }
    Ok(())
}

fn receive(mut r: File, count: &Counter) {
    let mut buf = [0u8; MESSAGE_BYTES];
    while r.read_exact(&mut buf).is_ok() {
        count.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs every placement `repetitions` times, interleaved, and condenses each.
pub fn run(
    root: &Path,
    placements: &[Placement],
    s: &MessagingSettings,
    mut tick: impl FnMut(),
) -> Result<Vec<ThroughputRun>> {
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); placements.len()];
    let mut per_message: Vec<BTreeMap<String, f64>> = vec![BTreeMap::new(); placements.len()];
    let mut messages = vec![0u64; placements.len()];
    for _ in 0..s.repetitions {
        for (i, p) in placements.iter().enumerate() {
            crate::pair::signals::check()?;
            let before = SystemSnapshot::take(root);
            let (rate, n) = run_once(p, s)?;
            let d = before.delta(&SystemSnapshot::take(root), &p.cpus());
            // Sum the counts over repetitions; divided by all messages below.
            for (k, v) in d.per_op(1) {
                *per_message[i].entry(k).or_insert(0.0) += v;
            }
            messages[i] += n;
            rates[i].push(rate);
            tick();
        }
    }
    Ok(placements
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let per = per_message[i]
                .iter()
                .map(|(k, v)| (k.clone(), v / messages[i].max(1) as f64))
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
    fn messages_flow_and_threads_end() {
        let s = MessagingSettings {
            groups: 1,
            senders: 2,
            run_time: Duration::from_millis(50),
            repetitions: 2,
        };
        let cpu = affinity::current_cpu().unwrap_or(0);
        let allowed = affinity::get(0).unwrap();
        let r = run(
            Path::new("/"),
            &[Placement::Packed(cpu), Placement::Os(allowed)],
            &s,
            || {},
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        if std::env::var_os("CPULAB_SHOW").is_some() {
            eprintln!("{r:#?}");
        }
        for t in &r {
            assert_eq!(t.samples_per_s.len(), 2);
            assert!(t.samples_per_s.iter().all(|v| *v > 0.0));
            assert!(t.per_message.values().all(|v| *v >= 0.0));
        }
    }
}
