//! The terminal view of an oscost result: one row per primitive, the frequency probe, the
//! platform, how to read it.

use super::OscostReport;
use crate::output::Style;
use crate::units::fmt_ns;
use comfy_table::{CellAlignment, Table, presets};

/// The human report: one row per primitive, the frequency probe, the platform, how to read it.
pub fn render(r: &OscostReport, st: &Style) -> String {
    let mut out = header(r, st);
    out.push_str(&primitives_table(r));
    out.push('\n');
    if let Some(f) = &r.frequency {
        out.push_str(&frequency(f, st));
    }
    out.push_str(&format!(
        "\n{}\n",
        st.dim(
            "mean ±95% = batch means with the interval's half-width in percent; every batch is \
             kept in --json (batch_samples_ns) so two runs compare with a significance test \
             (cpulab compare). check = a kernel counter per operation that confirms what was \
             timed. context_switch_yield is measured with sched_yield between two threads on \
             one CPU, not derived from the pipe round trip."
        )
    ));
    for n in &r.conditions.notes {
        out.push_str(&format!("{} {n}\n", st.yellow("note:")));
    }
    out
}

/// The kernel, the CPU, and the platform settings that change a primitive's cost.
fn header(r: &OscostReport, st: &Style) -> String {
    let mut out = format!(
        "{} kernel {}, pinned to CPU {}, {} batches per primitive\n",
        st.bold("cpulab oscost:"),
        r.conditions.kernel,
        r.cpu,
        r.batches
    );
    out.push_str(&format!(
        "mitigations: {}{}; clocksource {}; THP {}\n\n",
        r.platform.mitigations_summary,
        if r.platform.cmdline_mitigation_options.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.platform.cmdline_mitigation_options.join(" "))
        },
        r.platform.clocksource.as_deref().unwrap_or("unknown"),
        r.platform.thp_enabled.as_deref().unwrap_or("unknown"),
    ));
    out
}

/// One row per primitive: its batch means, the check counter, or why it was unavailable.
fn primitives_table(r: &OscostReport) -> String {
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(vec![
        "primitive",
        "mean ±95%",
        "median",
        "min",
        "check",
        "ops/batch",
    ]);
    for op in &r.ops {
        let row = match (&op.per_op_ns, &op.unavailable) {
            (Some(m), _) => vec![
                op.name.clone(),
                format!("{} ± {:.1}%", fmt_ns(m.mean), 100.0 * m.rel_half_width()),
                op.median_ns.map(fmt_ns).unwrap_or_default(),
                op.min_ns.map(fmt_ns).unwrap_or_default(),
                op.counted
                    .as_ref()
                    .map(|c| format!("{:.2} {}/op", c.per_op, c.counter))
                    .unwrap_or_default(),
                op.ops_per_batch.to_string(),
            ],
            (None, reason) => vec![
                op.name.clone(),
                format!("unavailable: {}", reason.as_deref().unwrap_or("unknown")),
            ],
        };
        t.add_row(row);
    }
    if let Some(c) = t.column_mut(5) {
        c.set_cell_alignment(CellAlignment::Right);
    }
    t.to_string()
}

/// The dependent loop's rate cold and warm, in MHz only where the clock check accepted it.
fn frequency(f: &super::freq::FreqReport, st: &Style) -> String {
    let mut out = String::new();
    let m = |x: &Option<crate::stats::MeanCi>, d: usize| {
        x.as_ref()
            .map(|m| format!("{:.*} ± {:.*}", d, m.mean, d, m.ci95_half_width))
            .unwrap_or_else(|| "n/a".into())
    };
    // A loop rate is not a frequency: MHz only when the clock check accepted the loop.
    let (cold, warm) = match (&f.cold_mhz, &f.warm_mhz) {
        (Some(c), Some(w)) => (
            format!(
                "{} MHz (loop {} per ns)",
                m(&Some(c.clone()), 0),
                m(&f.cold_per_ns, 3)
            ),
            format!(
                "{} MHz (loop {} per ns)",
                m(&Some(w.clone()), 0),
                m(&f.warm_per_ns, 3)
            ),
        ),
        _ => (
            format!("loop {} per ns (no clock)", m(&f.cold_per_ns, 3)),
            format!("loop {} per ns (no clock)", m(&f.warm_per_ns, 3)),
        ),
    };
    out.push_str(&format!(
        "\n{} ({})\n  cold (median of the first 3 slices of {:.0} us after {:.1} s idle): {cold}\n  warm (after {:.1} s \
         of load): {warm}\n  cold/warm: {}   ramp-up to 95% of warm: {} us\n",
        st.bold("effective frequency"),
        f.method,
        f.slice_us,
        f.idle_s,
        f.load_s,
        m(&f.cold_to_warm_ratio, 2),
        m(&f.ramp_up_us, 0),
    ));
    if let Some(c) = &f.clock {
        out.push_str(&format!(
            "  clock check: add chain {:.3}/ns, multiply chain {:.3}/ns{}\n  {}\n  cycles use {}\n",
            c.rates.add_per_ns,
            c.rates.imul_per_ns,
            c.tsc_mhz
                .map(|t| format!(", TSC {t:.0} MHz"))
                .unwrap_or_default(),
            c.verdict,
            c.used_mhz
                .map(|u| format!("{u:.0} MHz ({})", c.used_source))
                .unwrap_or_else(|| c.used_source.clone()),
        ));
    }
    out
}
