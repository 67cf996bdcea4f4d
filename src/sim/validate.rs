//! `cpulab sim validate`: published against simulated, cell by cell, with the error.
//!
//! A model earns trust only by reproducing what was measured on systems we cannot run. Each
//! table of the field notes is simulated with its host's one parameter set (stated beside it),
//! compared cell by cell, and judged against the target: shares within 3 percentage
//! points (C), ratios within 15% (A, B, this machine) or 10% (E). A cell whose published figure
//! set a parameter is still shown but marked as an input, since matching it proves nothing. Where
//! the model misses, the table says so and why; nothing is tuned per cell to hide it.

use super::builtin::{self, E_PLACEMENTS, E_THREADS};
use super::params::{Calibration, Costs};
use super::published::{Section, get};
use super::{SIMULATED, SimReport, run_scenario};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// The result of `cpulab sim validate`; with its envelope, the JSON schema.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Validation {
    /// Always `"SIMULATED"`: the simulated column was computed, not measured.
    pub label: String,
    pub seed: u64,
    /// Where this machine's wakeup costs came from.
    pub calibration: Calibration,
    pub tables: Vec<TableCheck>,
    /// Every table met its target.
    pub all_pass: bool,
}

/// One published table against the model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableCheck {
    pub id: String,
    pub title: String,
    /// The field-notes section its published figures come from.
    pub source: Section,
    pub host: String,
    pub hypervisor: String,
    /// The one parameter set every cell ran with.
    pub params: Costs,
    /// Which published figure set which parameter.
    pub params_from: String,
    /// `share` (errors in percentage points) or `ratio` (relative errors).
    pub measure: String,
    /// The target: points for shares, a fraction for ratios.
    pub target: f64,
    /// Largest |simulated - published| in points over the checked cells (shares).
    pub max_abs_error_pp: Option<f64>,
    /// Largest |simulated / published - 1| over the checked cells (ratios).
    pub max_rel_error: Option<f64>,
    pub pass: bool,
    pub cells: Vec<Cell>,
    /// Simulated curves that have no published counterpart (E), for reading only.
    pub curves: Vec<Curve>,
    /// What the model lacks where it misses, and what the table cannot check.
    pub notes: Vec<String>,
}

/// One cell: a published figure (derived from the quoted ones) and the simulated one.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    pub cell: String,
    pub published: f64,
    /// How `published` is computed from the quoted figures.
    pub published_from: String,
    pub simulated: f64,
    /// Points (shares) or relative error (ratios).
    pub error: f64,
    /// False for a cell that set a parameter or is outside the target.
    pub checked: bool,
    pub pass: bool,
}

/// A simulated curve (label SIMULATED), one value per x.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Curve {
    pub name: String,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
}

fn per_s(r: &SimReport, config: &str, kind: &str) -> f64 {
    r.configs
        .iter()
        .find(|c| c.name == config)
        .and_then(|c| c.workloads.iter().find(|w| w.kind == kind))
        .map_or(0.0, |w| w.per_s)
}

fn speedup(r: &SimReport, config: &str) -> f64 {
    r.configs
        .iter()
        .find(|c| c.name == config)
        .and_then(|c| c.workloads.first())
        .and_then(|w| w.speedup)
        .unwrap_or(0.0)
}

fn ratio_cell(
    cell: &str,
    published: f64,
    from: String,
    simulated: f64,
    checked: bool,
    target: f64,
) -> Cell {
    let error = simulated / published - 1.0;
    Cell {
        cell: cell.into(),
        published,
        published_from: from,
        simulated,
        error,
        checked,
        pass: error.abs() <= target,
    }
}

fn quoted(id: &str) -> (f64, String) {
    let f = get(id);
    (f.value, id.to_string())
}

/// Pub ratio of two quoted figures, with how it was made.
fn pub_ratio(num: &str, den: &str) -> (f64, String) {
    let (a, _) = quoted(num);
    let (b, _) = quoted(den);
    (a / b, format!("{num} / {den}"))
}

#[allow(clippy::too_many_arguments)]
fn table(
    id: &str,
    title: &str,
    source: Section,
    report: &SimReport,
    params_from: &str,
    measure: &str,
    target: f64,
    cells: Vec<Cell>,
) -> TableCheck {
    let checked: Vec<&Cell> = cells.iter().filter(|c| c.checked).collect();
    let max = checked.iter().map(|c| c.error.abs()).fold(0.0, f64::max);
    let pass = checked.iter().all(|c| c.pass);
    let first = report.configs.first();
    TableCheck {
        id: id.into(),
        title: title.into(),
        source,
        host: report.host.clone(),
        hypervisor: first.map(|c| c.hypervisor.clone()).unwrap_or_default(),
        params: first.map(|c| c.params.clone()).unwrap_or_default(),
        params_from: params_from.into(),
        measure: measure.into(),
        target,
        max_abs_error_pp: (measure == "share").then_some(max),
        max_rel_error: (measure == "ratio").then_some(max),
        pass,
        cells,
        curves: Vec::new(),
        notes: Vec::new(),
    }
}

fn check_a(seed: u64) -> Result<TableCheck> {
    let s = builtin::a();
    let r = run_scenario(&s, &Costs::default(), None, seed)?;
    let t = 0.15;
    let p = |c: &str| per_s(&r, c, "pair");
    let (v, f) = pub_ratio("a.select1.diff", "a.select1.same");
    let mut cells = vec![ratio_cell(
        "SELECT 1: different / same vCPU",
        v,
        f,
        p("SELECT 1, different vCPU") / p("SELECT 1, same vCPU"),
        false,
        t,
    )];
    let (v, f) = pub_ratio("a.s.stress", "a.s.idle");
    cells.push(ratio_cell(
        "-S: with stress-ng -c 3 / idle (load makes it faster)",
        v,
        f,
        p("-S, stress-ng -c 3") / p("-S, guest idle"),
        true,
        t,
    ));
    for n in 2..=4 {
        let (v, f) = pub_ratio(&format!("a.s.vcpus{n}"), "a.s.vcpus1");
        cells.push(ratio_cell(
            &format!("-S: {n} vCPUs / 1 vCPU"),
            v,
            f,
            p(&format!("-S, {n} vCPU")) / p("-S, 1 vCPU"),
            true,
            t,
        ));
    }
    let h = builtin::host_a();
    let mut tc = table(
        "A",
        "Load makes it faster; 1 vCPU against 2-4 (Hyper-V root, pgbench -c 1)",
        Section::A,
        &r,
        h.derived_from,
        "ratio",
        t,
        cells,
    );
    tc.notes.push(
        "The SELECT 1 row set context_flush_ns and is shown as an input, not a check.".into(),
    );
    Ok(tc)
}

fn check_b(seed: u64) -> Result<TableCheck> {
    let s = builtin::b();
    let r = run_scenario(&s, &Costs::default(), None, seed)?;
    let t = 0.15;
    let mut cells = Vec::new();
    for (app, id) in [("Apache ab -c 1", "httpd"), ("pgbench SELECT 1", "pg")] {
        for hv in ["classic", "root"] {
            let (v, f) = pub_ratio(&format!("b.{id}.{hv}.diff"), &format!("b.{id}.{hv}.same"));
            let sim = per_s(&r, &format!("{app}, {hv}, different vCPU"), "pair")
                / per_s(&r, &format!("{app}, {hv}, same vCPU"), "pair");
            // The pgbench rows set the wakeup and flush costs.
            cells.push(ratio_cell(
                &format!("{app}, {hv}: different / same vCPU"),
                v,
                f,
                sim,
                id == "httpd",
                t,
            ));
        }
    }
    let h = builtin::host_b();
    let mut tc = table(
        "B",
        "Same vs different vCPU, classic vs root scheduler",
        Section::B,
        &r,
        h.derived_from,
        "ratio",
        t,
        cells,
    );
    tc.notes.push("The pgbench rows set this host's wakeup and flush costs and are inputs; the Apache rows are the check.".into());
    Ok(tc)
}

fn check_c(seed: u64) -> Result<TableCheck> {
    let s = builtin::c();
    let r = run_scenario(&s, &Costs::default(), None, seed)?;
    let t = 3.0;
    let mut cells = Vec::new();
    for n in [1, 4] {
        let alone = per_s(&r, &format!("{n} thread(s), alone"), "cpu");
        for (col, key) in [
            ("VM2 idle", "idle"),
            ("VM2 3 busy", "busy3"),
            ("VM2 4 busy", "busy4"),
        ] {
            let (a, _) = quoted(&format!("c.{n}.alone"));
            let (b, _) = quoted(&format!("c.{n}.{key}"));
            let published = 100.0 * b / a;
            let sim = 100.0 * per_s(&r, &format!("{n} thread(s), {col}"), "cpu") / alone;
            let error = sim - published;
            cells.push(Cell {
                cell: format!("{n} thread(s), {col}: share of alone, %"),
                published,
                published_from: format!("c.{n}.{key} / c.{n}.alone"),
                simulated: sim,
                error,
                checked: true,
                pass: error.abs() <= t,
            });
        }
    }
    let mut tc = table(
        "C",
        "Fair share of time slices between VMs",
        Section::C,
        &r,
        builtin::host_a().derived_from,
        "share",
        t,
        cells,
    );
    tc.notes.push(
        "Shares are relative to VM1 alone with the same thread count. The 1-thread cells lose \
         more than the slice model says because the package's turbo frequency falls as more \
         cores are busy (turbo_drop, from Intel's turbo bins, not from this table)."
            .into(),
    );
    Ok(tc)
}

fn check_e(seed: u64) -> Result<TableCheck> {
    let s = builtin::e();
    let r = run_scenario(&s, &Costs::default(), None, seed)?;
    let t = 0.10;
    let x: Vec<f64> = E_THREADS.iter().map(|&t| f64::from(t)).collect();
    let curves: Vec<Curve> = E_PLACEMENTS
        .iter()
        .map(|(place, _)| Curve {
            name: format!("{place}: speedup"),
            x: x.clone(),
            y: E_THREADS
                .iter()
                .map(|t| speedup(&r, &format!("{place}, {t} threads")))
                .collect(),
        })
        .collect();
    let best_gap = curves[0]
        .y
        .iter()
        .zip(&curves[1].y)
        .map(|(a, b)| a / b)
        .fold(0.0, f64::max);
    let (gap, _) = quoted("e.gap");
    let aware16 = curves[2].y.last().copied().unwrap_or(0.0) / 16.0;
    let (near, _) = quoted("e.module_aware");
    let (over, _) = quoted("e.overhead");
    let cells = vec![
        ratio_cell(
            "8-8 over 0-16, best thread count (1 + gap)",
            1.0 + gap,
            "1 + e.gap".into(),
            best_gap,
            false,
            t,
        ),
        ratio_cell(
            "one core per module: speedup / threads at 16",
            near,
            "e.module_aware".into(),
            aware16,
            true,
            t,
        ),
        ratio_cell(
            "VM / bare-metal speed (1 - overhead)",
            1.0 - over,
            "1 - e.overhead".into(),
            1.0,
            false,
            t,
        ),
    ];
    let h = builtin::host_e();
    let mut tc = table(
        "E",
        "Parallel Fibonacci by vCPU placement, 1 to 16 threads",
        Section::E,
        &r,
        h.derived_from,
        "ratio",
        t,
        cells,
    );
    tc.curves = curves;
    tc.notes.push("The 38% gap set module_contention, so its row is an input: what the model adds is where the gap appears (thread counts at which 0-16 doubles more modules than 8-8) and that it closes when both double the same number.".into());
    tc.notes.push("Field notes E publish no per-thread-count table, so \"each point within 10%\" cannot be checked; the curves are predictions.".into());
    tc.notes.push("The 24% virtualisation overhead is not modelled (no memory-virtualisation or timer cost in the model), so the simulated VM runs at bare-metal speed; outside the target.".into());
    Ok(tc)
}

fn check_m(cal: &Calibration, seed: u64) -> Result<TableCheck> {
    let s = builtin::m(cal);
    let r = run_scenario(&s, &Costs::default(), Some(cal.clone()), seed)?;
    let t = 0.15;
    let lat = |c: &str| {
        r.configs
            .iter()
            .find(|x| x.name == c)
            .and_then(|x| x.workloads[0].mean_latency_us)
            .unwrap_or(0.0)
    };
    let p = |c: &str| per_s(&r, c, "pair");
    let same = p("pgbench, same vCPU");
    let mut cells = vec![
        ratio_cell(
            "pipe round trip, same vCPU, us",
            cal.same_rtt_ns / 1e3,
            format!("calibration ({})", cal.source),
            lat("pipe, same vCPU"),
            false,
            t,
        ),
        ratio_cell(
            "pipe round trip, cross vCPU, us",
            cal.cross_rtt_ns / 1e3,
            format!("calibration ({})", cal.source),
            lat("pipe, cross vCPU"),
            false,
            t,
        ),
    ];
    for (cell, id, cfg) in [
        (
            "pgbench: different / same vCPU",
            "m.pg.diff",
            "pgbench, different vCPU",
        ),
        (
            "pgbench: server unpinned / same vCPU",
            "m.pg.unpinned",
            "pgbench, server unpinned",
        ),
        (
            "pgbench: busy loop on the other vCPU / same",
            "m.pg.busy",
            "pgbench, busy loop on the other vCPU",
        ),
        (
            "pgbench: different vCPU, halt polling on / same",
            "m.pg.poll",
            "pgbench, different vCPU, guest halt polling 100 us",
        ),
    ] {
        let (v, f) = pub_ratio(id, "m.pg.same");
        cells.push(ratio_cell(cell, v, f, p(cfg) / same, true, t));
    }
    let h = builtin::host_m(cal);
    let mut tc = table(
        "M",
        "This machine: same vs cross round trip, halt polling off and on",
        Section::ThisMachine,
        &r,
        h.derived_from,
        "ratio",
        t,
        cells,
    );
    tc.notes.push(format!(
        "Calibrated from {} ({} round trips).",
        cal.source, cal.method
    ));
    let pg_extra_us = 1e6 / get("m.pg.diff").value - 1e6 / get("m.pg.same").value;
    let pipe_extra_us = (cal.cross_rtt_ns - cal.same_rtt_ns) / 1e3;
    if !tc.pass {
        tc.notes.push(format!(
            "Published pgbench pays {pg_extra_us:.1} us more per transaction on different vCPUs, \
             the pipe round trip {pipe_extra_us:.1} us more: PostgreSQL's protocol costs more \
             than one blocking wakeup each way (extra wakeups, cache lines moving between CPUs), \
             and the model charges exactly one. Not tuned in: the pgbench rows would need a \
             second, pgbench-only wakeup cost."
        ));
    }
    Ok(tc)
}

/// Simulates every table and judges it.
pub fn validate(cal: &Calibration, seed: u64) -> Result<Validation> {
    let tables = vec![
        check_a(seed)?,
        check_b(seed)?,
        check_c(seed)?,
        check_e(seed)?,
        check_m(cal, seed)?,
    ];
    Ok(Validation {
        label: SIMULATED.into(),
        seed,
        calibration: cal.clone(),
        all_pass: tables.iter().all(|t| t.pass),
        tables,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> Vec<TableCheck> {
        validate(&Calibration::field_notes(), 1).unwrap().tables
    }

    fn by_id<'a>(t: &'a [TableCheck], id: &str) -> &'a TableCheck {
        t.iter().find(|t| t.id == id).unwrap()
    }

    fn max_rel(t: &TableCheck) -> f64 {
        t.cells
            .iter()
            .filter(|c| c.checked)
            .map(|c| (c.simulated / c.published - 1.0).abs())
            .fold(0.0, f64::max)
    }

    #[test]
    fn c_every_share_within_3_points() {
        let t = tables();
        let c = by_id(&t, "C");
        assert_eq!(c.cells.len(), 6);
        for cell in &c.cells {
            let err = (cell.simulated - cell.published).abs();
            assert!(err <= 3.0, "{}: {err:.2} pp", cell.cell);
        }
        assert!(c.pass && c.max_abs_error_pp.unwrap() <= 3.0);
    }

    #[test]
    fn b_checked_ratios_within_15_percent_and_root_hurts_more() {
        let t = tables();
        let b = by_id(&t, "B");
        assert!(max_rel(b) <= 0.15, "{}", max_rel(b));
        // Root's dynamic mapping costs more than classic's sticky one, for both applications.
        assert!(b.cells[1].simulated < b.cells[0].simulated);
        assert!(b.cells[3].simulated < b.cells[2].simulated);
    }

    #[test]
    fn a_load_makes_it_faster_and_one_vcpu_wins_within_15_percent() {
        let t = tables();
        let a = by_id(&t, "A");
        assert!(max_rel(a) <= 0.15, "{}", max_rel(a));
        assert!(a.cells[1].simulated > 1.5, "load must make it faster");
        assert!(a.cells[2..].iter().all(|c| c.simulated < 0.6));
    }

    #[test]
    fn e_gap_and_module_aware_scaling_within_10_percent() {
        let t = tables();
        let e = by_id(&t, "E");
        let gap = e.cells[0].simulated;
        assert!((gap / 1.38 - 1.0).abs() <= 0.10, "gap {gap}");
        assert!((e.cells[1].simulated - 1.0).abs() <= 0.10);
        // 8-8 never loses to 0-16, and module-aware never loses to either.
        let (c88, c016, aware) = (&e.curves[0].y, &e.curves[1].y, &e.curves[2].y);
        for i in 0..c88.len() {
            assert!(
                c88[i] >= c016[i] - 1e-9 && aware[i] >= c88[i] - 1e-9,
                "point {i}"
            );
        }
    }

    #[test]
    fn this_machine_halt_polling_recovers_and_misses_are_explained() {
        let t = tables();
        let m = by_id(&t, "M");
        // Inputs reproduce their calibration exactly.
        assert!(m.cells[0].error.abs() < 0.01 && m.cells[1].error.abs() < 0.01);
        // Halt polling on and a busy neighbour: within 15%.
        assert!(m.cells[4].error.abs() <= 0.15 && m.cells[5].error.abs() <= 0.15);
        // The pgbench cross-vCPU rows miss the 15% target: the table must say so and why.
        let miss = m.cells[2..4].iter().any(|c| !c.pass);
        assert_eq!(m.pass, !miss);
        if miss {
            assert!(m.notes.iter().any(|n| n.contains("Not tuned in")));
        }
    }

    #[test]
    fn every_table_states_its_one_parameter_set() {
        for t in tables() {
            assert!(!t.params_from.is_empty(), "{}", t.id);
            assert!(t.max_abs_error_pp.is_some() != t.max_rel_error.is_some());
        }
    }
}
