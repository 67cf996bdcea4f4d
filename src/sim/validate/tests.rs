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
