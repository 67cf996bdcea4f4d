//! The targets, asserted against the computed errors.

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

/// Table E's gap set `module_contention`, so the gap itself is an input; what the model must
/// predict is where it appears and what the placements do that nobody tuned: the curves below
/// are outputs, each checked against a statement of field notes E.
#[test]
fn e_the_model_predicts_where_the_gap_appears_and_module_aware_scaling() {
    let t = tables();
    let e = by_id(&t, "E");
    let (c88, c016, aware) = (&e.curves[0].y, &e.curves[1].y, &e.curves[2].y);
    let threads = &e.curves[0].x;
    assert_eq!(threads.first(), Some(&1.0));
    assert_eq!(threads.last(), Some(&16.0));
    let last = threads.len() - 1;
    // One thread shares no module, whatever the placement: no gap.
    for c in [c88, c016, aware] {
        assert!((c[0] - 1.0).abs() <= 0.05, "1 thread: speedup {}", c[0]);
    }
    // At 16 threads 8-8 (pCPUs 0-7 and 16-23) and 0-16 (16-31) both fill 8 modules with two
    // busy cores each: the gap closes.
    assert!(
        (c88[last] / c016[last] - 1.0).abs() <= 0.05,
        "16 threads: 8-8 {} vs 0-16 {}",
        c88[last],
        c016[last]
    );
    // In between, where 0-16 doubles modules that 8-8 does not, 8-8 is ahead by up to the
    // published 38% (within the table's 10%).
    let gap = (0..c88.len()).map(|i| c88[i] / c016[i]).fold(0.0, f64::max);
    assert!(gap > 1.1 && (gap / 1.38 - 1.0).abs() <= 0.10, "gap {gap}");
    // One core per module: near-ideal scaling (published), so speedup / threads near 1 at 16,
    // and more threads never slow it down.
    assert!(
        (aware[last] / 16.0 - 1.0).abs() <= 0.10,
        "16 threads: {}",
        aware[last]
    );
    assert!(aware.windows(2).all(|w| w[1] >= w[0] - 1e-9), "{aware:?}");
    // 8-8 never loses to 0-16, and module-aware never loses to either.
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
