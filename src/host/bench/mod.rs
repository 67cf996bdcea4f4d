//! `cpulab host bench`: the hypervisor layer measured with guests cpulab brings.
//!
//! Three parts, each a case of the field notes one level down, on VMs of cpulab's own
//! (`crate::vmm`):
//! - **exchange**: the halt ping-pong (case A's cross-vCPU wakeup: two halts, two IPIs, two
//!   host wakeups of a vCPU thread per round trip) with the two vCPU threads on one host CPU,
//!   on each placement class the host's topology offers, and unpinned; beside it the spin
//!   ping-pong (the floor: no IPI, no halt) and the polling ping-pong (the waiting vCPU polls
//!   for a window before it halts, as the guest `haltpoll` driver does);
//! - **halt-poll**: the halt ping-pong with the VM's own halt-poll limit set to each value in
//!   turn (`KVM_CAP_HALT_POLL`: nothing on the host changes), the round trip it saves against
//!   the CPU it burns polling, and where the curve bends;
//! - **share**: two VMs of burners on the same host CPUs (case C), each VM's rate beside the
//!   other over its rate alone, against the model (CPUs shared evenly by running vCPUs);
//! - **timer**: a vCPU that arms its TSC-deadline timer and halts until it fires (`bursty`'s
//!   duty cycle one level down): how late each wake comes, with halt polling and without.
//!
//! Every round trip is counted over the host clock and timed inside the guest (`rdtsc`
//! stamps), and KVM's own statistics are read per vCPU (`KVM_GET_STATS_FD`) before and after
//! each window. On a KVM that emulates guest instructions (kvm_pvm) the absolute times are the
//! emulator's; the differences (halt minus spin, polling off minus on) are KVM's own.

pub mod measure;
pub mod render;
pub mod report;
pub mod settings;

use crate::cpulist::CpuSet;
use crate::experiment::Progress;
use crate::machine::{Conditions, Machine};
use crate::probe::kvm::KvmFacts;
use crate::stats::MeanCi;
use crate::topology::PlacementClass;
use crate::vmm::{Access, Program, Vm};
use anyhow::Result;
use measure::Spec;
use report::{Difference, Exchange, HostBenchReport, KvmHost, Point, ShareRow, Sweep, SweepRow};
use settings::{BenchSettings, Part};

/// The CPUs the bench may use.
pub fn cpus(machine: &Machine, s: &BenchSettings) -> CpuSet {
    s.cpus.clone().unwrap_or_else(|| machine.allowed.clone())
}

/// The placements of the two vCPU threads: one pair per placement class among `cpus`, nearest
/// first, then unpinned.
fn placements(machine: &Machine, cpus: &CpuSet) -> Vec<(PlacementClass, [CpuSet; 2], String)> {
    let one = |c: u32| CpuSet::from_iter_u32([c]);
    let mut out: Vec<_> = machine
        .topology
        .representative_pairs(cpus)
        .into_iter()
        .map(|p| (p.class, [one(p.a), one(p.b)], format!("{}:{}", p.a, p.b)))
        .collect();
    if cpus.len() > 1 {
        out.push((
            PlacementClass::Unpinned,
            [cpus.clone(), cpus.clone()],
            format!("unpinned on {cpus}"),
        ));
    }
    out
}

fn spec(p: &(PlacementClass, [CpuSet; 2], String), exchange: Exchange) -> Spec {
    Spec {
        exchange,
        placement: p.0,
        cpus: p.1.clone(),
        cpus_label: p.2.clone(),
        halt_poll_ns: None,
        poll_window_ns: None,
    }
}

/// The TSC frequency a guest counts at, read from a VM that never runs.
fn tsc_khz(access: &Access) -> Result<u32> {
    Vm::new(access, &[(Program::Burner, 0)])?.tsc_khz()
}

pub fn measure(
    machine: &Machine,
    s: &BenchSettings,
    mut conditions: Conditions,
    progress: &Progress,
) -> Result<HostBenchReport> {
    let access = Access::open()?;
    let facts = KvmFacts::read(&machine.root);
    let tsc_khz = tsc_khz(&access)?;
    let cpus = cpus(machine, s);
    let places = placements(machine, &cpus);
    // The pair the sweep and the polling exchange run on: two host CPUs when there are two.
    let cross = places
        .iter()
        .find(|p| !matches!(p.0, PlacementClass::SameCpu | PlacementClass::Unpinned))
        .or_else(|| places.first())
        .cloned();
    let mut points = Vec::new();
    if s.parts.contains(&Part::Exchange) {
        for p in &places {
            progress.step(&format!("halt ping-pong, vCPU threads {}", p.2));
            points.push(measure::point(
                &access,
                &spec(p, Exchange::Halt),
                s,
                tsc_khz,
            )?);
            if p.0 == PlacementClass::SameCpu {
                continue;
            }
            progress.step(&format!("spin ping-pong, vCPU threads {}", p.2));
            points.push(measure::point(
                &access,
                &spec(p, Exchange::Spin),
                s,
                tsc_khz,
            )?);
        }
        if places.iter().all(|p| p.0 == PlacementClass::SameCpu) {
            conditions.notes.push(
                "one host CPU only: no spin ping-pong (two spinning vCPUs on one CPU take turns \
                 by the scheduler's slice, not the floor) and no polling ping-pong"
                    .into(),
            );
        } else if let Some(p) = &cross {
            for &w in &s.poll_window_ns {
                progress.step(&format!(
                    "polling ping-pong, window {}, vCPU threads {}",
                    crate::units::fmt_ns(w as f64),
                    p.2
                ));
                let mut sp = spec(p, Exchange::Poll);
                sp.poll_window_ns = Some(w);
                points.push(measure::point(&access, &sp, s, tsc_khz)?);
            }
        }
    }
    let sweep = match (&cross, s.parts.contains(&Part::HaltPoll)) {
        (Some(p), true) => Some(sweep(&access, p, s, tsc_khz, &facts, progress)?),
        _ => None,
    };
    let share = if s.parts.contains(&Part::Share) {
        share(&access, &cpus, s, progress)?
    } else {
        Vec::new()
    };
    let timer = if s.parts.contains(&Part::Timer) {
        timer(&access, &cpus, s, tsc_khz, progress)?
    } else {
        Vec::new()
    };
    if facts.guest_code_emulated() {
        conditions.notes.push(
            "kvm_pvm runs guests without VMX/SVM by emulating their instructions: KVM's own work \
             (halts, the APIC, halt polling, waking vCPU threads) is real, the absolute times \
             include the emulator's; the differences are KVM's own"
                .into(),
        );
    }
    let differences = differences(&points, sweep.as_ref());
    Ok(HostBenchReport {
        settings: s.clone(),
        conditions,
        kvm: KvmHost {
            module: facts.module.clone(),
            guest_code_emulated: facts.guest_code_emulated(),
            module_halt_poll_ns: facts.halt_poll_ns,
            halt_poll_ns_writable: facts.halt_poll_ns_writable,
            tsc_khz,
        },
        points,
        sweep,
        share,
        differences,
        timer,
    })
}

/// Per period, the timer wake with the module's halt-poll limit and, where a VM may set its
/// own, with polling off, on the first allowed CPU.
fn timer(
    access: &Access,
    cpus: &CpuSet,
    s: &BenchSettings,
    tsc_khz: u32,
    progress: &Progress,
) -> Result<Vec<report::TimerPoint>> {
    anyhow::ensure!(
        access.tsc_deadline,
        "this KVM gives its guests no TSC-deadline timer (CPUID 1 ECX bit 24); run without \
         --parts timer"
    );
    let Some(first) = cpus.iter().next() else {
        return Ok(Vec::new());
    };
    let cpu = CpuSet::from_iter_u32([first]);
    let mut limits = vec![None];
    if access.halt_poll_cap {
        limits.push(Some(0));
    }
    let mut out = Vec::new();
    for &p in &s.timer_period_ns {
        for &l in &limits {
            progress.step(&format!(
                "timer wake every {}, halt polling {}, CPU {first}",
                crate::units::fmt_ns(p as f64),
                if l == Some(0) {
                    "off"
                } else {
                    "as the module sets it"
                }
            ));
            out.push(measure::timer_point(access, p, l, &cpu, s, tsc_khz)?);
        }
    }
    Ok(out)
}

fn sweep(
    access: &Access,
    p: &(PlacementClass, [CpuSet; 2], String),
    s: &BenchSettings,
    tsc_khz: u32,
    facts: &KvmFacts,
    progress: &Progress,
) -> Result<Sweep> {
    anyhow::ensure!(
        access.halt_poll_cap,
        "this KVM lets no VM set its own halt-poll limit (KVM_CAP_HALT_POLL); run without \
         --parts halt-poll"
    );
    let mut limits: Vec<Option<u64>> = vec![None];
    limits.extend(s.halt_poll_ns.iter().map(|&v| Some(v)));
    let mut points = Vec::new();
    for l in limits {
        let name = l.map_or_else(
            || {
                format!(
                    "the module's {}",
                    facts
                        .halt_poll_ns
                        .map_or("default".into(), |v| crate::units::fmt_ns(v as f64))
                )
            },
            |v| crate::units::fmt_ns(v as f64),
        );
        progress.step(&format!(
            "halt ping-pong, halt-poll limit {name}, vCPU threads {}",
            p.2
        ));
        let mut sp = spec(p, Exchange::Halt);
        sp.halt_poll_ns = l;
        points.push(measure::point(access, &sp, s, tsc_khz)?);
    }
    Ok(sweep_of(points))
}

/// The sweep's rows from its points: polls won, the saving against limit 0, the polling CPU,
/// and the bend.
pub fn sweep_of(points: Vec<Point>) -> Sweep {
    let off = points
        .iter()
        .find(|p| p.halt_poll_limit_ns == Some(0))
        .and_then(|p| p.rtt_ns.clone());
    let sum = |p: &Point, k: &str| -> Option<f64> {
        p.vcpus
            .iter()
            .map(|v| v.per_round_trip.get(k).copied())
            .sum()
    };
    let rows: Vec<SweepRow> = points
        .into_iter()
        .map(|p| SweepRow {
            polls_won_share: match (sum(&p, "halt_successful_poll"), sum(&p, "halt_exits")) {
                (Some(w), Some(h)) if h > 0.0 => Some(w / h),
                _ => None,
            },
            saved_ns: match (&off, &p.rtt_ns) {
                (Some(o), Some(r)) => Some(difference(o, r)),
                _ => None,
            },
            polling_cpu: p.vcpus.iter().map(|v| v.polling_share).sum(),
            point: p,
        })
        .collect();
    let best = rows
        .iter()
        .filter_map(|r| r.point.rtt_ns.as_ref().map(|m| m.mean))
        .fold(f64::INFINITY, f64::min);
    let bend_ns = rows
        .iter()
        .filter(|r| {
            r.point
                .rtt_ns
                .as_ref()
                .is_some_and(|m| m.mean <= best * 1.10)
        })
        .filter_map(|r| r.point.halt_poll_limit_ns)
        .min();
    Sweep { rows, bend_ns }
}

/// `a - b` with the two intervals combined in quadrature.
pub fn difference(a: &MeanCi, b: &MeanCi) -> MeanCi {
    let half = (a.ci95_half_width.powi(2) + b.ci95_half_width.powi(2)).sqrt();
    let mean = a.mean - b.mean;
    MeanCi {
        mean,
        ci95_low: mean - half,
        ci95_high: mean + half,
        ci95_half_width: half,
        stddev: (a.stddev.powi(2) + b.stddev.powi(2)).sqrt(),
        n: a.n.min(b.n),
    }
}

fn differences(points: &[Point], sweep: Option<&Sweep>) -> Vec<Difference> {
    let mut out = Vec::new();
    let find = |e: Exchange, c: PlacementClass| {
        points
            .iter()
            .find(|p| p.exchange == e && p.placement == c && p.halt_poll_limit_ns.is_none())
            .and_then(|p| p.rtt_ns.as_ref())
    };
    for p in points.iter().filter(|p| p.exchange == Exchange::Halt) {
        if let (Some(h), Some(sp)) = (
            find(Exchange::Halt, p.placement),
            find(Exchange::Spin, p.placement),
        ) {
            out.push(Difference {
                name: format!("halt_minus_spin_ns[placement={}]", p.placement),
                label: format!(
                    "halt ping-pong minus spin ping-pong, {} ({})",
                    p.placement, p.cpus
                ),
                ns: difference(h, sp),
            });
        }
    }
    if let Some(sw) = sweep {
        let of = |l: Option<u64>| {
            sw.rows
                .iter()
                .find(|r| r.point.halt_poll_limit_ns == l)
                .and_then(|r| r.point.rtt_ns.as_ref())
        };
        if let (Some(off), Some(on)) = (of(Some(0)), of(None)) {
            out.push(Difference {
                name: "poll_off_minus_default_ns".into(),
                label: "halt ping-pong with halt polling off minus the module's default".into(),
                ns: difference(off, on),
            });
        }
    }
    out
}

/// Per fair-share row, per repeat: VM1 alone, VM2 alone, then both together on the same CPUs,
/// one window each, so load that comes and goes weighs on the three alike; each share is the
/// together rate over the alone rate of the same repeat.
fn share(
    access: &Access,
    cpus: &CpuSet,
    s: &BenchSettings,
    progress: &Progress,
) -> Result<Vec<ShareRow>> {
    let host_cpus = cpus.len() as u32;
    let one = BenchSettings {
        repeats: 1,
        ..s.clone()
    };
    let mut rows = Vec::new();
    for &(k, m) in &s.share {
        progress.step(&format!(
            "VMs of {k} and {m} busy vCPUs, alone and together on CPUs {cpus}"
        ));
        let (mut s1, mut s2) = (Vec::new(), Vec::new());
        let (mut c1, mut c2) = (Vec::new(), Vec::new());
        for _ in 0..s.repeats {
            let (a1, a1_ran) = alone_rate(access, k, cpus, &one)?;
            let (a2, a2_ran) = alone_rate(access, m, cpus, &one)?;
            let mut r1 = measure::burners(access, k, cpus)?;
            let mut r2 = measure::burners(access, m, cpus)?;
            let both = together(&r1, &r2, &one);
            let (e1, e2) = (r1.stop_all(), r2.stop_all());
            let (w1, w2) = both?;
            e1?;
            e2?;
            if let (Some(t1), Some(t2)) = (measure::rates(&w1).first(), measure::rates(&w2).first())
                && a1 > 0.0
                && a2 > 0.0
            {
                s1.push(t1 / a1);
                s2.push(t2 / a2);
            }
            let (t1, t2) = (
                measure::ran_cpus(&w1, r1.tsc_khz),
                measure::ran_cpus(&w2, r2.tsc_khz),
            );
            if let (Some(Some(t1)), Some(Some(t2)), Some(a1), Some(a2)) =
                (t1.first(), t2.first(), a1_ran, a2_ran)
                && a1 > 0.0
                && a2 > 0.0
            {
                c1.push(t1 / a1);
                c2.push(t2 / a2);
            }
        }
        rows.push(ShareRow {
            vm1_vcpus: k,
            vm2_vcpus: m,
            host_cpus,
            vm1_share: MeanCi::of(&s1),
            vm2_share: MeanCi::of(&s2),
            vm1_ran_share: MeanCi::of(&c1),
            vm2_ran_share: MeanCi::of(&c2),
            vm1_share_samples: s1,
            vm1_model: model(k, m, host_cpus),
            vm2_model: model(m, k, host_cpus),
            even: (k + m) % host_cpus.max(1) == 0,
        });
    }
    Ok(rows)
}

/// The loop rate of a VM of `n` burners alone on `cpus`, over one window, and the CPUs its
/// vCPUs counted themselves running.
fn alone_rate(
    access: &Access,
    n: u32,
    cpus: &CpuSet,
    one: &BenchSettings,
) -> Result<(f64, Option<f64>)> {
    let mut r = measure::burners(access, n, cpus)?;
    let w = measure::windows(&r, one, &mut []);
    r.stop_all()?;
    let w = w?;
    let ran = measure::ran_cpus(&w, r.tsc_khz).first().copied().flatten();
    Ok((measure::rates(&w).first().copied().unwrap_or(0.0), ran))
}

type Windows = Vec<(crate::vmm::Snapshot, crate::vmm::Snapshot)>;

/// Both VMs' windows, taken at the same moments.
fn together(
    r1: &crate::vmm::Running,
    r2: &crate::vmm::Running,
    s: &BenchSettings,
) -> Result<(Windows, Windows)> {
    std::thread::sleep(s.warmup);
    let (mut a1, mut a2) = (r1.snapshot()?, r2.snapshot()?);
    let (mut w1, mut w2) = (Vec::new(), Vec::new());
    for _ in 0..s.repeats {
        std::thread::sleep(s.duration);
        anyhow::ensure!(
            r1.alive() && r2.alive(),
            "a vCPU stopped before the window ended"
        );
        let (b1, b2) = (r1.snapshot()?, r2.snapshot()?);
        w1.push((a1, b1.clone()));
        w2.push((a2, b2.clone()));
        (a1, a2) = (b1, b2);
    }
    Ok((w1, w2))
}

/// The fair-share model: each running vCPU gets `min(1, cpus / running)` of a CPU; a VM's
/// share is what its vCPUs get together over what they had alone (`min(k, cpus)` CPUs).
pub fn model(k: u32, m: u32, cpus: u32) -> f64 {
    let (k, m, p) = (f64::from(k), f64::from(m), f64::from(cpus.max(1)));
    let each = (p / (k + m)).min(1.0);
    (k * each / k.min(p)).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_gives_the_published_shares() {
        assert_eq!(model(2, 2, 2), 0.5);
        assert_eq!(model(1, 1, 2), 1.0);
        assert!((model(1, 2, 2) - 2.0 / 3.0).abs() < 1e-12);
        assert!((model(2, 1, 2) - 2.0 / 3.0).abs() < 1e-12);
        // Room for everyone: nobody waits.
        assert_eq!(model(1, 1, 4), 1.0);
    }

    #[test]
    fn a_difference_carries_both_intervals() {
        let a = MeanCi::of(&[10.0, 12.0, 11.0]).unwrap();
        let b = MeanCi::of(&[4.0, 5.0, 6.0]).unwrap();
        let d = difference(&a, &b);
        assert!((d.mean - 6.0).abs() < 1e-12);
        // Worked by hand: each side has sd 1 over 3 samples, so a half-width of
        // 4.303 / sqrt(3) (t at 2 degrees of freedom, from the printed table); combined in
        // quadrature, sqrt(2) times that.
        let half = 4.303 / 3f64.sqrt() * 2f64.sqrt();
        assert!(
            (d.ci95_half_width - half).abs() < 1e-3,
            "{}",
            d.ci95_half_width
        );
        assert!((d.ci95_low - (6.0 - half)).abs() < 1e-3);
        assert_eq!(d.n, 3);
    }
}
