//! The terminal view of a [`PingpongReport`]: one table row per run, a matrix for
//! `--pairs all`, where unpinned runs ran, what was skipped, and the conditions. Returns text
//! and does no I/O.

use super::measure::EndedBy;
use super::report::{PingpongReport, PingpongRun};
use super::settings::{Method, PairSpec};
use crate::output::{Style, fmt_ns};
use comfy_table::{Cell, CellAlignment, LineStyle, Table, TableStyle};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Columns without rules, one line under the header: dense rows read best.
const STYLE: TableStyle =
    TableStyle::new().header_separator(LineStyle::none().fill('─').junction(' '));

/// The whole report as text.
pub fn render(report: &PingpongReport, style: &Style) -> String {
    let mut out = String::new();
    let s = &report.settings;
    let _ = writeln!(
        out,
        "{} between {} on CPUs {}",
        style.bold("Round trips"),
        match s.endpoints {
            super::Endpoints::Threads => "two threads",
            super::Endpoints::Processes => "two processes",
        },
        report.cpus
    );
    if !report.runs.is_empty() {
        let _ = writeln!(out, "{}", table(&report.runs, s.target_ci_rel));
    }
    if report.runs.iter().any(|r| cut_short(r, s.target_ci_rel)) {
        let _ = writeln!(
            out,
            "{}",
            style.dim(&format!(
                "* reached --max-time ({} s) before the CI was within ±{}% of the mean",
                s.max_time_s,
                100.0 * s.target_ci_rel
            ))
        );
    }
    for r in report.runs.iter().filter(|r| r.where_ran.is_some()) {
        out.push_str(&where_ran(r));
    }
    out.push_str(&touch_table(&report.runs, style));
    if s.pairs == PairSpec::All {
        for m in &s.methods {
            out.push_str(&matrix(report, *m));
        }
    }
    for k in &report.skipped {
        let cpus = super::report::cpus_label(k.cpu_a, k.cpu_b);
        let _ = writeln!(
            out,
            "{} {} {} ({cpus}): {}",
            style.yellow("skipped"),
            k.method,
            k.placement,
            k.reason
        );
    }
    if report.conditions.noisy {
        let _ = writeln!(
            out,
            "{}",
            style.red("noisy: other load was running; treat these figures with caution")
        );
    }
    for n in &report.conditions.notes {
        let _ = writeln!(out, "{}", style.dim(&format!("note: {n}")));
    }
    out.push_str(&style.dim(
        "cs/rt: context switches per round trip (initiator/responder); idle/rt: idle entries \
         (halts) per round trip; IPI/rt: RES+CAL interrupts per round trip, over the CPUs in use\n",
    ));
    out
}

fn per_rt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// A run that reached `--max-time` before its interval met a target; with no target
/// (`--target-ci 0`) every run is meant to last `--max-time`, and none is cut short.
fn cut_short(r: &PingpongRun, target_ci_rel: f64) -> bool {
    target_ci_rel > 0.0 && r.ended_by == EndedBy::MaxTime
}

fn table(runs: &[PingpongRun], target_ci_rel: f64) -> Table {
    let mut t = Table::new();
    t.load_style(STYLE);
    t.set_header([
        "method",
        "placement",
        "cpus",
        "p50",
        "mean ± 95% CI",
        "p99",
        "rt/s",
        "× fastest",
        "cs/rt",
        "idle/rt",
        "IPI/rt",
    ]);
    for r in runs {
        let c = &r.counters;
        let cs = format!(
            "{}/{}",
            per_rt(c.initiator.switches_per_rt()),
            per_rt(c.responder.switches_per_rt())
        );
        let row = [
            r.method.to_string(),
            r.placement.to_string(),
            r.cpus_label(),
            fmt_ns(r.rtt.p50_ns as f64),
            format!(
                "{} ± {:.1}%{}",
                fmt_ns(r.mean_rtt_ns.mean),
                100.0 * r.mean_rtt_ns.rel_half_width(),
                if cut_short(r, target_ci_rel) {
                    "*"
                } else {
                    " "
                }
            ),
            fmt_ns(r.rtt.p99_ns as f64),
            format!("{:.0}", r.round_trips_per_s),
            format!("{:.2}", r.p50_ratio_to_fastest),
            cs,
            per_rt(c.idle_entries_per_rt),
            per_rt(c.ipis_per_rt),
        ];
        t.add_row(row.into_iter().enumerate().map(|(i, v)| {
            let cell = Cell::new(v);
            if i >= 3 {
                cell.set_alignment(CellAlignment::Right)
            } else {
                cell
            }
        }));
    }
    t
}

/// The work after each wakeup (`--touch`), per run, against the same method's same-CPU run:
/// how much slower the same work runs right after a wakeup in each placement.
fn touch_table(runs: &[PingpongRun], style: &Style) -> String {
    let Some(bytes) = runs.iter().find_map(|r| r.touch.as_ref().map(|t| t.bytes)) else {
        return String::new();
    };
    // The same method's same-CPU run, on the initiator's CPU when there is one.
    let same = |of: &PingpongRun| {
        let same_cpu = runs.iter().filter(|r| {
            r.method == of.method && r.placement == crate::topology::PlacementClass::SameCpu
        });
        same_cpu
            .clone()
            .find(|r| r.cpu_a == of.cpu_a)
            .or_else(|| same_cpu.clone().next())
            .and_then(|r| r.touch.as_ref())
    };
    let mut t = Table::new();
    t.load_style(STYLE);
    t.set_header(["method", "placement", "cpus", "mean ± 95% CI", "× same CPU"]);
    for r in runs {
        let Some(w) = &r.touch else { continue };
        let ratio = same(r).map_or("-".into(), |s| {
            format!("{:.2}", w.mean_ns.mean / s.mean_ns.mean)
        });
        t.add_row([
            Cell::new(r.method),
            Cell::new(r.placement),
            Cell::new(r.cpus_label()),
            Cell::new(format!(
                "{} ± {:.1}%",
                fmt_ns(w.mean_ns.mean),
                100.0 * w.mean_ns.rel_half_width()
            ))
            .set_alignment(CellAlignment::Right),
            Cell::new(ratio).set_alignment(CellAlignment::Right),
        ]);
    }
    format!(
        "\n{} (the initiator writes {} of its own, one word per 64-byte line, as soon as each \
         pong wakes it; timed apart from the round trip)\n{t}\n",
        style.bold("Work after each wakeup"),
        crate::units::fmt_bytes(bytes)
    )
}

fn where_ran(r: &PingpongRun) -> String {
    let Some(w) = &r.where_ran else {
        return String::new();
    };
    let dist = |m: &BTreeMap<u32, u64>| {
        let total: u64 = m.values().sum::<u64>().max(1);
        m.iter()
            .map(|(c, n)| match 100.0 * *n as f64 / total as f64 {
                pct if pct < 0.5 => format!("cpu{c} <1%"),
                pct => format!("cpu{c} {pct:.0}%"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mig = |m: Option<u64>| m.map_or("?".into(), |m| m.to_string());
    // A half-pinned run names its pinned end: `unpinned pipe (1:*)`.
    let which = match (r.cpu_a, r.cpu_b) {
        (None, None) => String::new(),
        _ => format!(" ({})", r.cpus_label()),
    };
    format!(
        "unpinned {}{which}: initiator on {}; responder on {}; same CPU in {:.0}% of {} \
         samples; migrations {}/{}\n",
        r.method,
        dist(&w.initiator_cpus),
        dist(&w.responder_cpus),
        100.0 * w.same_cpu_share,
        w.samples,
        mig(w.initiator_migrations),
        mig(w.responder_migrations),
    )
}

/// Rows = initiator CPU, columns = responder CPU, cells = p50 in microseconds.
fn matrix(report: &PingpongReport, method: Method) -> String {
    let cells: BTreeMap<(u32, u32), u64> = report
        .runs
        .iter()
        .filter(|r| r.method == method)
        .filter_map(|r| Some(((r.cpu_a?, r.cpu_b?), r.rtt.p50_ns)))
        .collect();
    if cells.is_empty() {
        return String::new();
    }
    let cpus = report.cpus.to_vec();
    let mut t = Table::new();
    t.load_style(STYLE);
    t.set_header(std::iter::once("a \\ b".to_string()).chain(cpus.iter().map(|c| c.to_string())));
    for &a in &cpus {
        t.add_row(std::iter::once(Cell::new(a)).chain(cpus.iter().map(|&b| {
            Cell::new(
                cells
                    .get(&(a, b))
                    .map_or("-".into(), |ns| format!("{:.2}", *ns as f64 / 1e3)),
            )
            .set_alignment(CellAlignment::Right)
        })));
    }
    format!(
        "\n{method}: p50 round trip in us, initiator CPU (rows) to responder CPU (columns)\n{t}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pingpong::report::Touch;
    use crate::pingpong::{Endpoints, RunCounters};
    use crate::stats::{MeanCi, Percentiles};
    use crate::topology::PlacementClass;

    /// A run with its work after each wakeup taking `touch_ns`; `None` CPUs: unpinned.
    fn run(
        method: Method,
        placement: PlacementClass,
        cpus: Option<(u32, u32)>,
        touch_ns: f64,
    ) -> PingpongRun {
        PingpongRun {
            method,
            endpoints: Endpoints::Threads,
            placement,
            cpu_a: cpus.map(|c| c.0),
            cpu_b: cpus.map(|c| c.1),
            rtt: Percentiles {
                min_ns: 900,
                p50_ns: 1000,
                p90_ns: 1100,
                p99_ns: 1200,
                p999_ns: 1300,
                max_ns: 1400,
                count: 10,
            },
            mean_rtt_ns: MeanCi::single(1000.0),
            round_trips_per_s: 1e6,
            round_trips: 10,
            measured_s: 1e-5,
            warmup_round_trips: 1,
            batch_round_trips: 10,
            batch_means_ns: vec![1000.0],
            ended_by: EndedBy::MaxTime,
            p50_ratio_to_fastest: 1.0,
            where_ran: None,
            counters: RunCounters::default(),
            touch: Some(Touch {
                bytes: 16 << 10,
                mean_ns: MeanCi::single(touch_ns),
                batch_means_ns: vec![touch_ns],
            }),
        }
    }

    /// The `× same CPU` cell of the touch table's row for `method` on `cpus`.
    fn ratio_of(text: &str, method: &str, cpus: &str) -> String {
        let row = text
            .lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.first() == Some(&method) && w.get(2) == Some(&cpus)
            })
            .unwrap_or_else(|| panic!("no row {method} {cpus} in\n{text}"));
        row.split_whitespace()
            .last()
            .unwrap_or_default()
            .to_string()
    }

    #[test]
    fn work_after_a_wakeup_is_compared_with_the_same_cpu_run_on_the_initiators_cpu() {
        use PlacementClass::{SameCpu, SharedLlc, Unpinned};
        let runs = [
            run(Method::Pipe, SameCpu, Some((0, 0)), 100.0),
            run(Method::Pipe, SameCpu, Some((1, 1)), 200.0),
            run(Method::Pipe, SharedLlc, Some((1, 0)), 300.0),
            run(Method::Pipe, SharedLlc, Some((0, 1)), 300.0),
            run(Method::Pipe, Unpinned, None, 300.0),
            run(Method::Unix, SharedLlc, Some((0, 1)), 250.0),
        ];
        let text = touch_table(&runs, &Style { on: false });
        assert_eq!(ratio_of(&text, "pipe", "1:1"), "1.00", "{text}");
        // The initiator on CPU 1 wakes to the caches CPU 1 had: against 1:1, not 0:0 (3.00).
        assert_eq!(ratio_of(&text, "pipe", "1:0"), "1.50", "{text}");
        assert_eq!(ratio_of(&text, "pipe", "0:1"), "3.00", "{text}");
        // No same-CPU run on an unpinned initiator's CPU: the first same-CPU run.
        assert_eq!(ratio_of(&text, "pipe", "any"), "3.00", "{text}");
        // No same-CPU run of its own method: nothing to divide by, though pipe has two.
        assert_eq!(ratio_of(&text, "unix", "0:1"), "-", "{text}");
    }

    #[test]
    fn a_run_is_marked_cut_short_only_when_there_was_a_ci_target_to_miss() {
        let r = run(Method::Pipe, PlacementClass::SameCpu, Some((0, 0)), 100.0);
        let mean_cell = |target: f64| {
            let text = table(std::slice::from_ref(&r), target).to_string();
            let row = text.lines().find(|l| l.contains("0:0")).unwrap_or_default();
            row.contains("%*")
        };
        assert!(mean_cell(0.02), "reached --max-time before a 2% target");
        assert!(
            !mean_cell(0.0),
            "--target-ci 0 asks for the whole --max-time"
        );
        let converged = PingpongRun {
            ended_by: EndedBy::Converged,
            ..r.clone()
        };
        assert!(!cut_short(&converged, 0.02));
    }
}
