//! The result's self-contained HTML page (`--html FILE`).

use super::Emitted;
use crate::error::bad_input;
use anyhow::Result;

pub fn render(result: &Emitted) -> Result<String> {
    match &result.page {
        Some(page) => Ok(page()),
        None => Err(bad_input(format!(
            "--html: this `cpulab {}` output has no HTML page; leave out --html",
            result.kind
        ))),
    }
}
