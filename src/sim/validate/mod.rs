//! `cpulab sim validate`: published against simulated, cell by cell, with the error.
//!
//! A model earns trust only by reproducing what was measured on systems we cannot run. Each
//! table of the field notes is simulated with its host's one parameter set (stated beside it),
//! compared cell by cell, and judged against the target: shares within 3 percentage
//! points (C), ratios within 15% (A, B, this machine) or 10% (E). A cell whose published figure
//! set a parameter is still shown but marked as an input, since matching it proves nothing. Where
//! the model misses, the table says so and why; nothing is tuned per cell to hide it.

use super::params::{Calibration, Costs};
use super::published::{Section, get};
use super::{SIMULATED, SimReport};

mod host;
mod tables;
use crate::sim::hostcal::HostCalibration;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use tables::{check_a, check_b, check_c, check_e, check_m};

/// The result of `cpulab sim validate`; with its envelope, the JSON schema.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Validation {
    /// Always `"SIMULATED"`: the simulated column was computed, not measured.
    pub label: String,
    pub seed: u64,
    /// Where this machine's wakeup costs came from.
    pub calibration: Calibration,
    /// The host bench result table H was calibrated from and checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_calibration: Option<HostCalibration>,
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
    /// What the cells' `published` column holds: `published` figures (tables A to M), or
    /// figures `measured` by cpulab (table H, from the result in `measured_by`).
    #[serde(default = "published")]
    pub reference: String,
    /// The result the measured figures come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_by: Option<String>,
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
    /// Largest |simulated - published| in points over the checked cells (shares); none when no
    /// cell was checked.
    pub max_abs_error_pp: Option<f64>,
    /// Largest |simulated / published - 1| over the checked cells (ratios); none when no cell
    /// was checked.
    pub max_rel_error: Option<f64>,
    /// Every checked cell met the target, and at least one was checked.
    pub pass: bool,
    pub cells: Vec<Cell>,
    /// Simulated curves that have no published counterpart (E), for reading only.
    pub curves: Vec<Curve>,
    /// What the model lacks where it misses, and what the table cannot check.
    pub notes: Vec<String>,
    /// Why the table's checks were not made: its published figures describe another host state
    /// than the calibration's. Such a table does not pass (its target was not shown met).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_checked: Option<String>,
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
    /// The measured figure's 95% interval (table H): a cell beyond the target passes only
    /// inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<[f64; 2]>,
    /// Why an unchecked cell that is neither an input nor outside the target was not checked
    /// (`another host state`); none for inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_checked: Option<String>,
}

/// A simulated curve (label SIMULATED), one value per x.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Curve {
    pub name: String,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
}

fn published() -> String {
    "published".into()
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
        interval: None,
        not_checked: None,
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
    // A table with no cell checked has no largest error, and has not shown its target met.
    let max = checked.iter().map(|c| c.error.abs()).reduce(f64::max);
    let pass = !checked.is_empty() && checked.iter().all(|c| c.pass);
    let first = report.configs.first();
    TableCheck {
        id: id.into(),
        title: title.into(),
        source,
        reference: published(),
        measured_by: None,
        host: report.host.clone(),
        hypervisor: first.map(|c| c.hypervisor.clone()).unwrap_or_default(),
        params: first.map(|c| c.params.clone()).unwrap_or_default(),
        params_from: params_from.into(),
        measure: measure.into(),
        target,
        max_abs_error_pp: max.filter(|_| measure == "share"),
        max_rel_error: max.filter(|_| measure == "ratio"),
        pass,
        cells,
        curves: Vec::new(),
        notes: Vec::new(),
        not_checked: None,
    }
}

/// Simulates every table and judges it; table H against `host`, a host bench result (the
/// bundled one of this project's machine when the user gave none).
pub fn validate(cal: &Calibration, host: &HostCalibration, seed: u64) -> Result<Validation> {
    let tables = vec![
        check_a(seed)?,
        check_b(seed)?,
        check_c(seed)?,
        check_e(seed)?,
        check_m(cal, seed)?,
        host::check_h(host, seed)?,
    ];
    Ok(Validation {
        label: SIMULATED.into(),
        seed,
        calibration: cal.clone(),
        host_calibration: Some(host.clone()),
        all_pass: tables.iter().all(|t| t.pass),
        tables,
    })
}

#[cfg(test)]
mod tests;
