//! When `scale` has run enough: its question answered, or a plain decline with what it would
//! take.
//!
//! `scale`'s question is whether placement matters: does `compact` (doubling up SMT cores and
//! shared-L2 modules) run slower than `scatter` (one thread per core and module)? Issue 30 saw
//! 16 threads at 14.54x ±6.72: intervals that wide cannot tell the policies apart. So after
//! the `--repeats` minimum, `scale` runs the whole sweep again until one of:
//!
//! - **separated**: at the thread count where compact doubles up the most groups more than
//!   scatter (the *question count*), the two speedup intervals do not overlap;
//! - **precise**: every policy's speedup interval, at the question count and at the largest
//!   count, is within the target (±10% by default) of its mean: whatever the policies do,
//!   they do not differ by more than that;
//!
//! or until one more sweep would pass `--max-time`; then it declines, saying how many runs per
//! point would answer, estimated from the spread so far.
//!
//! Two 95% intervals that do not overlap is a stricter test than a 5% t-test (it corresponds
//! to p of about 0.006 for equal widths), which leaves room for the repeated looks: the few
//! sweeps `scale` adds cannot turn a 5%-level chance into a likely false separation.

use super::contention;
use super::policy::{self, Policy};
use crate::cpulist::CpuSet;
use crate::stats::MeanCi;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};

/// Relative half-width of the speedup intervals `scale` aims for by default (±10%).
pub const DEFAULT_TARGET: f64 = 0.10;
/// Estimates beyond this many runs per point are "more than".
pub const MAX_RUNS: usize = 10_000;

/// What the runs so far say, at the counts that matter.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Compact's and scatter's speedups at the question count, when the two placed threads
    /// differently somewhere.
    pub pair: Option<(MeanCi, MeanCi)>,
    /// Every policy's speedup at the question count and at the largest count.
    pub speedups: Vec<MeanCi>,
    /// Runs per point so far.
    pub runs: usize,
}

/// One thread count as the question sees it: whether compact and scatter pin different CPUs
/// there, and how many more SMT cores and shared-L2 modules compact doubles up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub threads: usize,
    pub differ: bool,
    pub extra_contended: i64,
}

/// The question count among `rows`: where compact doubles up the most groups more than
/// scatter, among the counts where they differ (ties to the larger count); with whether they
/// differ anywhere. When they never differ, the largest count (pure).
pub fn pick(rows: &[Row]) -> (usize, bool) {
    match rows
        .iter()
        .filter(|r| r.differ)
        .max_by_key(|r| (r.extra_contended, r.threads))
    {
        Some(r) => (r.threads, true),
        None => (rows.iter().map(|r| r.threads).max().unwrap_or(1), false),
    }
}

/// The question count of a machine among `counts`: [`pick`] on the placements compact and
/// scatter plan on `allowed`.
pub fn question_threads(topo: &Topology, allowed: &CpuSet, counts: &[usize]) -> (usize, bool) {
    let contended = |cpus: &Option<Vec<u32>>| -> i64 {
        cpus.as_ref().map_or(0, |c| {
            let k = contention::count(topo, allowed, &CpuSet::from_iter_u32(c.iter().copied()));
            (k.smt_cores_contended + k.l2_modules_contended) as i64
        })
    };
    let rows: Vec<Row> = counts
        .iter()
        .map(|&n| {
            let c = policy::select(topo, allowed, n, &Policy::Compact);
            let s = policy::select(topo, allowed, n, &Policy::Scatter);
            let set = |x: &Option<Vec<u32>>| x.as_ref().map(|v| CpuSet::from_iter_u32(v.clone()));
            Row {
                threads: n,
                differ: set(&c) != set(&s),
                extra_contended: contended(&c) - contended(&s),
            }
        })
        .collect();
    pick(&rows)
}

/// How the question stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Compact and scatter differ beyond both intervals.
    Separated,
    /// Every interval is within the target.
    Precise,
    /// Neither yet; when `scale` stops here, it declines.
    Open,
}

/// Whether two intervals do not overlap.
pub fn apart(a: &MeanCi, b: &MeanCi) -> bool {
    a.ci95_high < b.ci95_low || b.ci95_high < a.ci95_low
}

/// The widest relative half-width among `s`'s speedups (0 when there are none).
pub fn widest(s: &Snapshot) -> f64 {
    s.speedups
        .iter()
        .map(MeanCi::rel_half_width)
        .fold(0.0, f64::max)
}

/// How the question stands after the runs of `s`, for a target relative half-width (pure).
pub fn status(s: &Snapshot, target: f64) -> Status {
    if s.pair.as_ref().is_some_and(|(c, sc)| apart(c, sc)) {
        Status::Separated
    } else if widest(s) <= target {
        Status::Precise
    } else {
        Status::Open
    }
}

/// Whether to run another sweep: only while the question is open and one more sweep, at
/// `sweep_s`, ends within `max_time_s` (pure).
pub fn another(status: Status, elapsed_s: f64, sweep_s: f64, max_time_s: f64) -> bool {
    status == Status::Open && elapsed_s + sweep_s <= max_time_s
}

/// About how many runs per point would answer: the fewer of what brings every interval within
/// the target and what would part compact and scatter at the gap seen so far. Half-widths
/// shrink as 1/sqrt(runs) (the t quantile's shrinking is left out, so this errs high).
/// `None` beyond [`MAX_RUNS`].
pub fn runs_needed(s: &Snapshot, target: f64) -> Option<usize> {
    let n = s.runs.max(2) as f64;
    let grow = |ratio: f64| (n * ratio * ratio).ceil();
    let precise = if target > 0.0 {
        grow(widest(s) / target)
    } else {
        f64::INFINITY
    };
    let part = s.pair.as_ref().map_or(f64::INFINITY, |(c, sc)| {
        let gap = (c.mean - sc.mean).abs();
        if gap > 0.0 {
            grow((c.ci95_half_width + sc.ci95_half_width) / gap)
        } else {
            f64::INFINITY
        }
    });
    let need = precise.min(part).max(n);
    (need.is_finite() && need <= MAX_RUNS as f64).then_some(need as usize)
}

/// The answer `scale` gives, in its report and `--json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub status: Status,
    /// The count where compact doubles up the most groups more than scatter (the largest
    /// count when they never differ).
    pub question_threads: usize,
    pub largest_threads: usize,
    /// Whether compact and scatter placed threads differently at any count measured.
    pub policies_differ: bool,
    /// The widest relative half-width of a speedup at those counts (0.08 = ±8%).
    pub widest_rel: f64,
    /// The target relative half-width.
    pub target_rel: f64,
    /// Runs per point made.
    pub runs: usize,
    /// Seconds the runs took.
    pub elapsed_s: f64,
    pub max_time_s: f64,
    /// When it declined: about how many runs per point would answer (`None`: more than
    /// 10,000), and the seconds more at the pace so far.
    pub runs_needed: Option<usize>,
    pub more_time_s: Option<f64>,
    /// The answer in one line.
    pub line: String,
}

/// The one-line answer.
pub fn line(a: &Answer, pair: Option<&(MeanCi, MeanCi)>) -> String {
    let pct = |x: f64| format!("±{:.0}%", x * 100.0);
    let q = a.question_threads;
    let runs = format!("{} runs per point, {:.0} s", a.runs, a.elapsed_s);
    match (a.status, pair) {
        (Status::Separated, Some((c, s))) => format!(
            "compact and scatter differ at {q} threads: speedup {:.2} ± {:.2} against {:.2} ± \
             {:.2}, intervals apart ({runs})",
            c.mean, c.ci95_half_width, s.mean, s.ci95_half_width
        ),
        (Status::Precise, _) if a.policies_differ => format!(
            "compact and scatter do not differ at {q} threads beyond intervals of {} \
             (target {}; {runs})",
            pct(a.widest_rel),
            pct(a.target_rel)
        ),
        (Status::Precise, _) => format!(
            "speedups at {} threads within {} (target {}; {runs}); compact and scatter placed \
             threads alike here",
            a.largest_threads,
            pct(a.widest_rel),
            pct(a.target_rel)
        ),
        _ => {
            let would = match (a.runs_needed, a.more_time_s) {
                (Some(n), Some(t)) => format!("about {n} runs per point (~{t:.0} s more) would"),
                _ => format!("more than {MAX_RUNS} runs per point would be needed"),
            };
            let what = if a.policies_differ {
                "cannot tell compact and scatter apart at this size"
            } else {
                "cannot measure the speedups this finely at this size"
            };
            format!(
                "{what}: intervals up to {} at {q} threads (target {}) after {runs} of the \
                 {:.0} s limit; {would}",
                pct(a.widest_rel),
                pct(a.target_rel),
                a.max_time_s
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ci(mean: f64, half: f64) -> MeanCi {
        MeanCi {
            mean,
            ci95_low: mean - half,
            ci95_high: mean + half,
            ci95_half_width: half,
            stddev: half,
            n: 3,
        }
    }

    fn snap(pair: Option<(MeanCi, MeanCi)>, speedups: Vec<MeanCi>) -> Snapshot {
        Snapshot {
            pair,
            speedups,
            runs: 3,
        }
    }

    #[test]
    fn intervals_apart_separate_the_policies_whatever_their_width() {
        let s = snap(
            Some((ci(5.0, 1.0), ci(7.5, 1.0))),
            vec![ci(5.0, 1.0), ci(7.5, 1.0)],
        );
        assert!(widest(&s) > DEFAULT_TARGET);
        assert_eq!(status(&s, DEFAULT_TARGET), Status::Separated);
        // Touching is not apart.
        assert!(!apart(&ci(5.0, 1.0), &ci(7.0, 1.0)));
        assert!(apart(&ci(7.0, 0.9), &ci(5.0, 1.0)));
    }

    #[test]
    fn narrow_overlapping_intervals_are_a_precise_answer_and_wide_ones_stay_open() {
        let narrow = snap(
            Some((ci(7.0, 0.3), ci(7.2, 0.3))),
            vec![ci(7.0, 0.3), ci(7.2, 0.3), ci(14.0, 1.0)],
        );
        assert_eq!(status(&narrow, 0.10), Status::Precise);
        // Issue 30: 14.54x ±6.72 at 16 threads.
        let wide = snap(None, vec![ci(14.54, 6.72), ci(14.0, 1.0)]);
        assert!((widest(&wide) - 6.72 / 14.54).abs() < 1e-12);
        assert_eq!(status(&wide, 0.10), Status::Open);
        assert_eq!(status(&wide, 0.50), Status::Precise);
    }

    #[test]
    fn another_sweep_only_while_open_and_within_the_limit() {
        assert!(another(Status::Open, 10.0, 5.0, 60.0));
        assert!(another(Status::Open, 55.0, 5.0, 60.0));
        assert!(!another(Status::Open, 55.1, 5.0, 60.0));
        assert!(!another(Status::Separated, 0.0, 5.0, 60.0));
        assert!(!another(Status::Precise, 0.0, 5.0, 60.0));
    }

    /// ±46% after 3 runs needs (0.46 / 0.10)^2 x 3 = 63.5, so 64 runs for ±10%; a gap of 2
    /// with half-widths 1 + 1 needs (2 / 2)^2 x 3... already apart at 3 runs x 1.21 = 4.
    #[test]
    fn runs_needed_grow_with_the_square_of_the_shortfall() {
        let wide = snap(None, vec![ci(10.0, 4.6)]);
        assert_eq!(runs_needed(&wide, 0.10), Some(64));
        let parting = snap(
            Some((ci(5.0, 1.1), ci(7.0, 1.1))),
            vec![ci(5.0, 1.1), ci(7.0, 1.1)],
        );
        // Precision alone: (1.1 / 5 / 0.1)^2 x 3 = 14.5 -> 15; parting: (2.2 / 2)^2 x 3 = 3.63 -> 4.
        assert_eq!(runs_needed(&parting, 0.10), Some(4));
        // No gap at all: only precision can answer.
        let level = snap(Some((ci(5.0, 1.1), ci(5.0, 1.1))), vec![ci(5.0, 1.1)]);
        assert_eq!(runs_needed(&level, 0.10), Some(15));
        // Out of reach: none, not a huge number.
        assert_eq!(runs_needed(&snap(None, vec![ci(1.0, 100.0)]), 0.10), None);
    }

    #[test]
    fn the_question_count_is_where_compact_doubles_up_the_most() {
        let row = |threads, differ, extra_contended| Row {
            threads,
            differ,
            extra_contended,
        };
        let rows = [
            row(1, false, 0),
            row(2, true, 1),
            row(4, true, 2),
            row(6, true, 2),
            row(8, false, 0),
        ];
        assert_eq!(pick(&rows), (6, true), "ties go to the larger count");
        // Never differing (this 2-vCPU guest): the largest count, and said so.
        assert_eq!(pick(&[row(1, false, 0), row(2, false, 0)]), (2, false));
        // Differing without contention (separate LLCs only): still a question count.
        assert_eq!(
            pick(&[row(2, true, 0), row(3, true, 0), row(4, false, 0)]),
            (3, true)
        );
    }

    #[test]
    fn on_real_topologies_the_question_is_half_the_machine() {
        use crate::scale::test_topologies::{opteron_modules, two_socket_smt, two_vcpu_guest};
        let all = |t: &Topology| (1..=t.online.len()).collect::<Vec<_>>();
        // 2 x 4 cores x 2 threads: at 8 threads compact fills 4 cores' siblings, scatter none.
        let t = two_socket_smt();
        assert_eq!(question_threads(&t, &t.online, &all(&t)), (8, true));
        // Field notes E's Opteron: 16 threads, one socket doubled up against one per module.
        let t = opteron_modules();
        assert_eq!(question_threads(&t, &t.online, &all(&t)), (16, true));
        let t = two_vcpu_guest();
        assert_eq!(question_threads(&t, &t.online, &all(&t)), (2, false));
    }

    #[test]
    fn a_decline_names_what_it_would_take() {
        let a = Answer {
            status: Status::Open,
            question_threads: 8,
            largest_threads: 16,
            policies_differ: true,
            widest_rel: 0.46,
            target_rel: 0.10,
            runs: 3,
            elapsed_s: 58.0,
            max_time_s: 60.0,
            runs_needed: Some(64),
            more_time_s: Some(1200.0),
            line: String::new(),
        };
        let l = line(&a, None);
        assert!(
            l.starts_with("cannot tell compact and scatter apart at this size"),
            "{l}"
        );
        assert!(l.contains("±46% at 8 threads (target ±10%)"), "{l}");
        assert!(
            l.contains("about 64 runs per point (~1200 s more) would"),
            "{l}"
        );
        let l = line(
            &Answer {
                status: Status::Separated,
                ..a.clone()
            },
            Some(&(ci(5.0, 0.5), ci(7.5, 0.4))),
        );
        assert!(
            l.starts_with("compact and scatter differ at 8 threads"),
            "{l}"
        );
    }
}
