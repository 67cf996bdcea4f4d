//! One method at one placement, measured with its two ends as threads of cpulab
//! (`runner`) or as processes (`child`): the choice, above both.

use super::report::PingpongRun;
use super::runner::{self, RunSpec};
use super::settings::Endpoints;
use super::transport::{self, SharedPage};
use anyhow::{Context, Result};

/// Measures one method at one placement.
pub fn run_one(spec: &RunSpec) -> Result<PingpongRun> {
    let conn = transport::connect(spec.planned.method, spec.endpoints)
        .with_context(|| format!("cannot set up the {} transport", spec.planned.method))?;
    let control = SharedPage::new().context("cannot map the control page")?;
    let out = match spec.endpoints {
        Endpoints::Threads => runner::run_threads(spec, conn, &control)?,
        Endpoints::Processes => super::child::run_processes(spec, conn, &control)?,
    };
    Ok(runner::build_run(spec, out))
}
