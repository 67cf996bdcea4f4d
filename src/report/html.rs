//! The self-contained HTML report (placeholder until the charts land).

use crate::doctor::DoctorReport;

pub fn doctor_page(r: &DoctorReport) -> String {
    format!(
        "<!doctype html><title>cpulab doctor</title><p>{} findings</p>",
        r.findings.len()
    )
}
