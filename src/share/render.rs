//! The terminal view of a share result: one row per configuration, then how to read it.

use super::ShareReport;
use crate::output::Style;
use crate::stats::MeanCi;
use comfy_table::{Table, presets};

fn pct(v: f64) -> String {
    format!("{:.1}%", 100.0 * v)
}

fn pct_ci(m: &Option<MeanCi>) -> String {
    match m {
        Some(m) if m.n > 1 => format!("{} ± {:.1}", pct(m.mean), 100.0 * m.ci95_half_width),
        Some(m) => pct(m.mean),
        None => "-".into(),
    }
}

/// The human report: one row per configuration, then how to read it.
pub fn render(r: &ShareReport, st: &Style) -> String {
    let mut out = format!(
        "{} prime check up to {} per work unit; model shares {:.2} CPUs ({})\n",
        st.bold("cpulab share:"),
        r.max_prime,
        r.usable_cpus,
        r.usable_cpus_from
    );
    match &r.cgroup {
        Some(c) => out.push_str(&format!(
            "cgroup v{} {}: {}\n",
            c.version,
            c.path,
            match (c.quota_us, c.period_us) {
                (Some(q), Some(p)) => match c.limit_dir.as_ref().filter(|d| **d != c.dir) {
                    Some(d) => format!("quota {q} us per {p} us period, set by {}", d.display()),
                    None => format!("quota {q} us per {p} us period"),
                },
                _ => "no CPU quota".into(),
            }
        )),
        None => out.push_str("cgroup: unreadable (see notes)\n"),
    }
    out.push_str(&format!(
        "burners at {:.0}% duty{}; {} run(s) of {:.2} s per row\n\n",
        r.duty_pct,
        r.burner_cpus
            .as_ref()
            .map(|c| format!(", pinned to CPUs {c}"))
            .unwrap_or_default(),
        r.repeats,
        r.requested_duration_s
    ));
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(vec![
        "workers",
        "burners",
        "model",
        "measured ±95%",
        "vs model",
        "per worker",
        "worker CPU",
        "burner CPU",
        "other load",
        "steal",
        "throttled",
    ]);
    for c in &r.configs {
        t.add_row(vec![
            c.threads.to_string(),
            c.burners.to_string(),
            pct(c.model_relative),
            pct_ci(&c.relative),
            c.deviation_pp
                .map(|d| format!("{d:+.1} pp"))
                .unwrap_or_else(|| "-".into()),
            match (c.worker_relative_min, c.worker_relative_max) {
                (Some(a), Some(b)) => format!("{:.0}-{:.0}%", 100.0 * a, 100.0 * b),
                _ => "-".into(),
            },
            pct_ci(&c.worker_cpu_share),
            pct_ci(&c.burner_cpu_share),
            c.other_load_cpus
                .as_ref()
                .map(|o| format!("{:.2} CPU", o.mean))
                .unwrap_or_else(|| "n/a".into()),
            c.steal_pct
                .as_ref()
                .map(|s| format!("{:.1}%", s.mean))
                .unwrap_or_else(|| "n/a".into()),
            c.throttle
                .map(|d| format!("{}/{}", d.nr_throttled, d.nr_periods))
                .unwrap_or_else(|| "n/a".into()),
        ]);
    }
    out.push_str(&t.to_string());
    out.push_str(&format!(
        "\n\n{}\n",
        st.dim(
            "measured = each worker's work units/s relative to the same workers alone (mean of \
             runs, 95% CI in points); model = max-min fair share, min(1, usable CPUs / (workers \
             + burners x duty)), relative to alone; per worker = lowest and highest single \
             worker; worker/burner CPU = thread CPU time / interval; other load = CPU time other \
             processes took on the allowed CPUs during the runs; steal = time the \
             hypervisor gave this VM's CPUs to someone else; throttled = CFS periods throttled \
             / periods."
        )
    ));
    for n in &r.conditions.notes {
        out.push_str(&format!("{} {n}\n", st.yellow("note:")));
    }
    out
}
