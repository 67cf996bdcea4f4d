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
    /// Whether the ring holds stamps (each entry minus the one before is a round trip) or
    /// values to take as they are (a timer's lateness).
    deltas: bool,
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
            deltas: true,
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
            if !self.deltas {
                let _ = self.hist.record(u64::from(stamp));
                self.sum_cycles += u128::from(stamp);
                self.n += 1;
                continue;
            }
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

    /// A reader of a ring of values, each taken as it is.
    pub fn values(r: &Running, vcpu: u32) -> Result<Self> {
        Ok(Self {
            deltas: false,
            ..Self::new(r, vcpu)?
        })
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
/// Without rings to read (the bare exchange) it sleeps the whole stretch: waking every few
/// milliseconds would put a runnable task beside the vCPU threads, which ends KVM's halt polls.
fn run_for(r: &Running, d: Duration, rings: &mut [RingReader]) -> Result<()> {
    if rings.is_empty() {
        std::thread::sleep(d);
        anyhow::ensure!(r.alive(), "a vCPU stopped before the window ended");
        return Ok(());
    }
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
    // The stamps kept start and end where the snapshots do (a drain beside each), so the
    // guest's time and the host's cover the same round trips.
    for ring in rings.iter_mut() {
        ring.drain(r);
        ring.forget();
    }
    let mut out = Vec::new();
    let mut a = r.snapshot()?;
    for _ in 0..s.repeats {
        run_for(r, s.duration, rings)?;
        let b = r.snapshot()?;
        for ring in rings.iter_mut() {
            ring.drain(r);
        }
        out.push((a, b.clone()));
        a = b;
    }
    Ok(out)
}

/// A VM of `spec`'s exchange started on its placement, its round trips stamped or not.
fn start(access: &Access, spec: &Spec, tsc_khz: u32, stamped: bool) -> Result<Running> {
    let mut vm = Vm::new_with(access, &programs(spec, tsc_khz), stamped)?;
    if let Some(ns) = spec.halt_poll_ns {
        vm.set_halt_poll_ns(ns)?;
    }
    Running::start(vm, &spec.cpus)
}

/// One exchange point, measured twice: the bare hot path (the starting side only counts, the
/// host reads nothing while it runs) over `repeats` windows for the round trip and KVM's counts;
/// then one window of the same exchange with each round trip stamped, for the guest-timed
/// percentiles, the guest clock against the host's, and what stamping costs.
pub fn point(access: &Access, spec: &Spec, s: &BenchSettings, tsc_khz: u32) -> Result<Point> {
    let mut r = start(access, spec, tsc_khz, false)?;
    let w = windows(&r, s, &mut []);
    let stopped = r.stop_all();
    let w = w?;
    stopped?;
    let one = BenchSettings {
        repeats: 1,
        ..s.clone()
    };
    let mut r = start(access, spec, tsc_khz, true)?;
    let mut rings = [RingReader::new(&r, 0)?];
    let ws = windows(&r, &one, &mut rings);
    let stopped = r.stop_all();
    let ws = ws?;
    stopped?;
    Ok(summarise(spec, &w, &ws, &rings[0], r.tsc_khz))
}

/// A counter's increase over a window; `None` when it went backwards (it never should) or is
/// not reported.
fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>, k: &str) -> Option<u64> {
    b.get(k)?.checked_sub(*a.get(k)?)
}

fn summarise(
    spec: &Spec,
    w: &[(Snapshot, Snapshot)],
    stamped: &[(Snapshot, Snapshot)],
    ring: &RingReader,
    tsc_khz: u32,
) -> Point {
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
    let (s_trips, s_wall) = (
        stamped.iter().map(trips_of).sum::<u64>(),
        stamped.iter().map(wall_of).sum::<f64>(),
    );
    let stamped_rtt = (s_trips > 0).then(|| s_wall / s_trips as f64);
    Point {
        exchange: spec.exchange,
        placement: spec.placement,
        cpus: spec.cpus_label.clone(),
        halt_poll_limit_ns: spec.halt_poll_ns,
        poll_window_ns: spec.poll_window_ns,
        guest_rtt: (ring.n > 0)
            .then(|| Percentiles::from_histogram_scaled(&ring.hist, ns_per_cycle)),
        // The stamped run's two clocks, both pooled: the guest's stamps weigh each round trip
        // alike, and so does the host's total time over its total count.
        guest_over_host: match (guest_mean, stamped_rtt) {
            (Some(g), Some(h)) if h > 0.0 => Some(g / h),
            _ => None,
        },
        stamped_rtt_ns: stamped_rtt,
        stamping_cost: match (stamped_rtt, &rtt_ci) {
            (Some(st), Some(b)) if b.mean > 0.0 => Some(st / b.mean),
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

/// The CPUs a burner VM's vCPUs counted themselves running, summed, one per window: each
/// vCPU's own run time (TSC cycles at `tsc_khz`) over the window's. Unlike the loop rate it
/// does not move with how fast the host runs guest code. `None` for a window where a vCPU's
/// run time could not be read.
pub fn ran_cpus(w: &[(Snapshot, Snapshot)], tsc_khz: u32) -> Vec<Option<f64>> {
    w.iter()
        .map(|(a, b)| {
            let wall = b.at.duration_since(a.at).as_secs_f64() * f64::from(tsc_khz) * 1e3;
            let cycles: Option<u64> = a
                .ran
                .iter()
                .zip(&b.ran)
                .map(|(x, y)| y.zip(*x).and_then(|(y, x)| y.checked_sub(x)))
                .sum();
            cycles.filter(|_| wall > 0.0).map(|c| c as f64 / wall)
        })
        .collect()
}

/// A VM of `n` burners, every vCPU free on `cpus`.
pub fn burners(access: &Access, n: u32, cpus: &CpuSet) -> Result<Running> {
    let programs: Vec<(Program, u32)> = (0..n).map(|i| (Program::Burner, i)).collect();
    let vm = Vm::new(access, &programs)?;
    Running::start(vm, &vec![cpus.clone(); n as usize])
}

/// One timer-wake point: a vCPU arming its TSC-deadline timer `period_ns` ahead and halting,
/// on `cpu`, with the VM's halt-poll limit `halt_poll_ns` (`None`: the module's).
pub fn timer_point(
    access: &Access,
    period_ns: u64,
    halt_poll_ns: Option<u64>,
    cpu: &CpuSet,
    s: &BenchSettings,
    tsc_khz: u32,
) -> Result<super::report::TimerPoint> {
    let cycles =
        (period_ns as u128 * u128::from(tsc_khz) / 1_000_000).min(u32::MAX as u128 / 2) as u32;
    let mut vm = Vm::new(
        access,
        &[(
            Program::TimerWake {
                period_cycles: cycles,
            },
            0,
        )],
    )?;
    if let Some(ns) = halt_poll_ns {
        vm.set_halt_poll_ns(ns)?;
    }
    let mut r = Running::start(vm, std::slice::from_ref(cpu))?;
    let mut rings = [RingReader::values(&r, 0)?];
    let w = windows(&r, s, &mut rings);
    let stopped = r.stop_all();
    let w = w?;
    stopped?;
    let ring = &rings[0];
    let wakes: u64 = w
        .iter()
        .map(|(a, b)| u64::from(b.counts[0].wrapping_sub(a.counts[0])))
        .sum();
    let wall: f64 = w
        .iter()
        .map(|(a, b)| b.at.duration_since(a.at).as_nanos() as f64)
        .sum();
    let ns_per_cycle = 1e6 / f64::from(tsc_khz.max(1));
    let periods: Vec<f64> = w
        .iter()
        .filter_map(|(a, b)| {
            let n = b.counts[0].wrapping_sub(a.counts[0]);
            (n > 0).then(|| b.at.duration_since(a.at).as_nanos() as f64 / f64::from(n))
        })
        .collect();
    Ok(super::report::TimerPoint {
        period_ns,
        halt_poll_limit_ns: halt_poll_ns,
        cpu: cpu.to_string(),
        wakes,
        achieved_period_ns: MeanCi::of(&periods),
        achieved_period_ns_per_window: periods,
        lateness: (ring.n > 0)
            .then(|| Percentiles::from_histogram_scaled(&ring.hist, ns_per_cycle)),
        lateness_mean_ns: (ring.n > 0)
            .then(|| ring.sum_cycles as f64 / ring.n as f64 * ns_per_cycle),
        stamps_lost: ring.lost,
        vcpu: vcpu_counts(0, &w, wakes, wall),
    })
}
