//! Running one point: a fresh VM, its vCPU threads placed, a warm-up, then `repeats` windows,
//! each closed by a snapshot of the guest's counts, KVM's statistics and the threads' schedstat;
//! the guest's stamps are read from its ring every few milliseconds while it runs.

use super::report::{Exchange, Point, VcpuCounts};
use super::settings::BenchSettings;
use crate::cpulist::CpuSet;
use crate::stats::{MeanCi, Percentiles};
use crate::topology::PlacementClass;
use crate::vmm::guest::{RING, RING_BYTES};
use crate::vmm::{Access, Program, Running, Snapshot, Vm};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Stamps one ring holds.
const RING_ENTRIES: u32 = (RING_BYTES / 4) as u32;
/// How often the host reads the ring: far sooner than the fastest exchange fills it.
const DRAIN_EVERY: Duration = Duration::from_millis(5);

/// What to run at one point.
#[derive(Clone, Debug)]
pub struct Spec {
    pub exchange: Exchange,
    pub placement: PlacementClass,
    /// The CPUs each of the two vCPU threads may use.
    pub cpus: [CpuSet; 2],
    pub cpus_label: String,
    pub halt_poll_ns: Option<u64>,
    pub poll_window_ns: Option<u64>,
}

/// Reads one vCPU's ring of stamps as the guest writes it: consecutive stamps differ by one
/// round trip.
pub struct RingReader {
    vcpu: u32,
    last: u32,
    prev: Option<u32>,
    hist: hdrhistogram::Histogram<u64>,
    sum_cycles: u128,
    n: u64,
    lost: u64,
}

impl RingReader {
    pub fn new(r: &Running, vcpu: u32) -> Result<Self> {
        Ok(Self {
            vcpu,
            last: r.count(vcpu),
            prev: None,
            hist: hdrhistogram::Histogram::new(3).context("a histogram")?,
            sum_cycles: 0,
            n: 0,
            lost: 0,
        })
    }

    fn drain(&mut self, r: &Running) {
        let c = r.count(self.vcpu);
        let new = c.wrapping_sub(self.last);
        // The guest may be writing the entry after the last counted one; keep well clear.
        if new > RING_ENTRIES - 1024 {
            self.lost += u64::from(new);
            self.prev = None;
            self.last = c;
            return;
        }
        let base = RING + u64::from(self.vcpu) * RING_BYTES;
        for k in 0..new {
            let idx = self.last.wrapping_add(k) % RING_ENTRIES;
            let stamp = r.memory().read_u32(base + u64::from(idx) * 4);
            if let Some(p) = self.prev {
                let d = stamp.wrapping_sub(p);
                let _ = self.hist.record(u64::from(d));
                self.sum_cycles += u128::from(d);
                self.n += 1;
            }
            self.prev = Some(stamp);
        }
        self.last = c;
    }

    /// Forgets what was read so far (the warm-up), keeping its place in the ring.
    fn forget(&mut self) {
        self.hist.reset();
        self.sum_cycles = 0;
        self.n = 0;
        self.lost = 0;
    }
}

/// The two programs of an exchange.
fn programs(spec: &Spec, tsc_khz: u32) -> [(Program, u32); 2] {
    let cycles =
        |ns: u64| (ns as u128 * u128::from(tsc_khz) / 1_000_000).min(u32::MAX as u128 / 2) as u32;
    match spec.exchange {
        Exchange::Halt => [(Program::HaltPing, 1), (Program::HaltPong, 0)],
        Exchange::Spin => [(Program::SpinPing, 1), (Program::SpinPong, 0)],
        Exchange::Poll => {
            let w = cycles(spec.poll_window_ns.unwrap_or(0));
            [
                (Program::PollPing { window_cycles: w }, 1),
                (Program::PollPong { window_cycles: w }, 0),
            ]
        }
    }
}

/// Sleeps for `d` while reading the rings; stops early with an error when a vCPU ended.
fn run_for(r: &Running, d: Duration, rings: &mut [RingReader]) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::thread::sleep(DRAIN_EVERY.min(end.saturating_duration_since(Instant::now())));
        for ring in rings.iter_mut() {
            ring.drain(r);
        }
        anyhow::ensure!(r.alive(), "a vCPU stopped before the window ended");
    }
    Ok(())
}

/// The windows of a started VM: `repeats` pairs of snapshots after a warm-up.
pub fn windows(
    r: &Running,
    s: &BenchSettings,
    rings: &mut [RingReader],
) -> Result<Vec<(Snapshot, Snapshot)>> {
    run_for(r, s.warmup, rings)?;
    rings.iter_mut().for_each(RingReader::forget);
    let mut out = Vec::new();
    let mut a = r.snapshot()?;
    for _ in 0..s.repeats {
        run_for(r, s.duration, rings)?;
        let b = r.snapshot()?;
        out.push((a, b.clone()));
        a = b;
    }
    Ok(out)
}

/// One exchange point, measured.
pub fn point(access: &Access, spec: &Spec, s: &BenchSettings, tsc_khz: u32) -> Result<Point> {
    let mut vm = Vm::new(access, &programs(spec, tsc_khz))?;
    if let Some(ns) = spec.halt_poll_ns {
        vm.set_halt_poll_ns(ns)?;
    }
    let mut r = Running::start(vm, &spec.cpus)?;
    let mut rings = [RingReader::new(&r, 0)?];
    let w = windows(&r, s, &mut rings);
    let stopped = r.stop_all();
    let w = w?;
    stopped?;
    Ok(summarise(spec, &w, &rings[0], r.tsc_khz))
}

/// A counter's increase over a window; `None` when it went backwards (it never should) or is
/// not reported.
fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>, k: &str) -> Option<u64> {
    b.get(k)?.checked_sub(*a.get(k)?)
}

fn summarise(spec: &Spec, w: &[(Snapshot, Snapshot)], ring: &RingReader, tsc_khz: u32) -> Point {
    let trips_of = |(a, b): &(Snapshot, Snapshot)| u64::from(b.counts[0].wrapping_sub(a.counts[0]));
    let wall_of = |(a, b): &(Snapshot, Snapshot)| b.at.duration_since(a.at).as_nanos() as f64;
    let rtt: Vec<f64> = w
        .iter()
        .filter(|x| trips_of(x) > 0)
        .map(|x| wall_of(x) / trips_of(x) as f64)
        .collect();
    let trips: u64 = w.iter().map(trips_of).sum();
    let wall: f64 = w.iter().map(wall_of).sum();
    let vcpus = (0..w.first().map_or(0, |x| x.0.kvm.len()))
        .map(|v| vcpu_counts(v, w, trips, wall))
        .collect();
    let ns_per_cycle = 1e6 / f64::from(tsc_khz.max(1));
    let rtt_ci = MeanCi::of(&rtt);
    let guest_mean = (ring.n > 0).then(|| ring.sum_cycles as f64 / ring.n as f64 * ns_per_cycle);
    Point {
        exchange: spec.exchange,
        placement: spec.placement,
        cpus: spec.cpus_label.clone(),
        halt_poll_limit_ns: spec.halt_poll_ns,
        poll_window_ns: spec.poll_window_ns,
        guest_rtt: (ring.n > 0)
            .then(|| Percentiles::from_histogram_scaled(&ring.hist, ns_per_cycle)),
        // Both pooled over the windows: the guest's stamps weigh each round trip alike, and so
        // does the host's total time over its total count.
        guest_over_host: match guest_mean {
            Some(g) if trips > 0 && wall > 0.0 => Some(g / (wall / trips as f64)),
            _ => None,
        },
        guest_rtt_mean_ns: guest_mean,
        rtt_ns_per_window: rtt,
        rtt_ns: rtt_ci,
        stamps_lost: ring.lost,
        round_trips: trips,
        vcpus,
    }
}

fn vcpu_counts(v: usize, w: &[(Snapshot, Snapshot)], trips: u64, wall: f64) -> VcpuCounts {
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    let mut missing = std::collections::BTreeSet::new();
    for (a, b) in w {
        for k in b.kvm[v].keys() {
            match delta(&a.kvm[v], &b.kvm[v], k) {
                Some(d) => *sums.entry(k.clone()).or_default() += d,
                None => {
                    missing.insert(k.clone());
                }
            }
        }
    }
    for k in &missing {
        sums.remove(k);
    }
    let went_backwards: Vec<String> = missing
        .into_iter()
        .filter(|k| {
            w.iter()
                .all(|(a, b)| a.kvm[v].contains_key(k) && b.kvm[v].contains_key(k))
        })
        .collect();
    let share = |x: u64| (wall > 0.0).then(|| x as f64 / wall);
    let sched = |f: fn((u64, u64)) -> u64| -> Option<u64> {
        w.iter()
            .map(|(a, b)| f(b.sched[v]?).checked_sub(f(a.sched[v]?)))
            .sum()
    };
    let polling = match (
        sums.get("halt_poll_success_ns"),
        sums.get("halt_poll_fail_ns"),
    ) {
        (Some(s), Some(f)) => share(s + f),
        _ => None,
    };
    VcpuCounts {
        vcpu: v as u32,
        per_round_trip: if trips == 0 {
            BTreeMap::new()
        } else {
            sums.iter()
                .filter(|(k, _)| !k.ends_with("_ns") && !k.contains("hist"))
                .map(|(k, &d)| (k.clone(), d as f64 / trips as f64))
                .collect()
        },
        on_cpu_share: sched(|x| x.0).and_then(share),
        run_queue_share: sched(|x| x.1).and_then(share),
        polling_share: polling,
        went_backwards,
    }
}

/// Loop iterations per second of every vCPU of a burner VM, summed, one per window.
pub fn rates(w: &[(Snapshot, Snapshot)]) -> Vec<f64> {
    w.iter()
        .map(|(a, b)| {
            let n: u64 = a
                .counts
                .iter()
                .zip(&b.counts)
                .map(|(x, y)| u64::from(y.wrapping_sub(*x)))
                .sum();
            n as f64 / b.at.duration_since(a.at).as_secs_f64()
        })
        .collect()
}

/// A VM of `n` burners, every vCPU free on `cpus`.
pub fn burners(access: &Access, n: u32, cpus: &CpuSet) -> Result<Running> {
    let programs: Vec<(Program, u32)> = (0..n).map(|i| (Program::Burner, i)).collect();
    let vm = Vm::new(access, &programs)?;
    Running::start(vm, &vec![cpus.clone(); n as usize])
}
