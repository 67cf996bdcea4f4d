//! The terminal view of a scale result: one table per policy, then how to read it.

use super::{Contention, ScaleReport};
use crate::output::Style;
use crate::stats::MeanCi;
use comfy_table::{Table, presets};

fn ci(m: &Option<MeanCi>, digits: usize) -> String {
    match m {
        Some(m) => format!("{:.*} ± {:.*}", digits, m.mean, digits, m.ci95_half_width),
        None => "-".into(),
    }
}

fn contended(c: &Option<Contention>) -> String {
    match c {
        None => "-".into(),
        Some(c) if c.smt_cores + c.l2_modules == 0 => "none shared".into(),
        Some(c) => {
            let mut parts = Vec::new();
            if c.smt_cores > 0 {
                parts.push(format!("{}/{} cores", c.smt_cores_contended, c.smt_cores));
            }
            if c.l2_modules > 0 {
                parts.push(format!(
                    "{}/{} modules",
                    c.l2_modules_contended, c.l2_modules
                ));
            }
            parts.join(", ")
        }
    }
}

/// The human report: one table per policy, then how to read it.
pub fn render(r: &ScaleReport, st: &Style) -> String {
    let mut out = format!("{} {}\n", st.bold("cpulab scale:"), r.work);
    if let Some(l) = r.llc_total_kib {
        out.push_str(&format!("last-level caches: {} MiB in all\n", l / 1024));
    }
    for p in &r.policies {
        out.push_str(&format!("\n{}\n", st.bold(&format!("policy {}", p.policy))));
        let mut t = Table::new();
        t.load_style(presets::NOTHING);
        t.set_header(vec![
            "threads".to_string(),
            "CPUs".into(),
            "time s".into(),
            r.throughput_unit.clone(),
            "speedup ±95%".into(),
            "efficiency".into(),
            "doubled up (planned)".into(),
            "both busy (observed)".into(),
            "other load".into(),
        ]);
        for x in &p.points {
            t.add_row(vec![
                x.threads.to_string(),
                x.cpus
                    .as_ref()
                    .map(|c| {
                        c.iter()
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_else(|| "any".into()),
                format!("{:.3}", x.time_s.mean),
                format!("{:.2}", x.throughput.mean),
                ci(&x.speedup, 2),
                x.efficiency
                    .as_ref()
                    .map(|e| format!("{:.0}%", 100.0 * e.mean))
                    .unwrap_or_else(|| "-".into()),
                contended(&x.planned),
                contended(&x.observed),
                x.other_load_cpus
                    .map(|o| format!("{o:.2} CPU"))
                    .unwrap_or_else(|| "n/a".into()),
            ]);
        }
        out.push_str(&t.to_string());
        out.push('\n');
        for f in &p.pin_failures {
            out.push_str(&format!("{} could not pin {f}\n", st.yellow("warning:")));
        }
    }
    out.push_str(&format!(
        "\n{}\n",
        st.dim(
            "speedup = work done per second against one thread's, same policy (95% CI from the \
             runs; fib's work grows with the thread count, so the single-thread time over the \
             time is scaled by the work); \
             efficiency = speedup / threads; doubled up = SMT cores or shared-L2 modules with \
             two threads pinned to them; both busy = the same counted from per-CPU \
             utilisation (>= 50% busy) during the runs; other load = CPU time other processes took \
             on the allowed CPUs meanwhile."
        )
    ));
    if let Some(a) = &r.answer {
        out.push_str(&format!("{} {}\n", st.bold("answer:"), a.line));
    }
    for n in &r.conditions.notes {
        out.push_str(&format!("{} {n}\n", st.yellow("note:")));
    }
    out
}
