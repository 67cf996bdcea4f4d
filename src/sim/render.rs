//! Text and HTML for simulations and validations.
//!
//! A simulated figure must never pass for a measured one, so every figure the simulator made
//! sits under a heading or column that says SIMULATED, in text, JSON (`label`) and HTML alike,
//! and every published figure is labelled published with its field-notes section. Renderers
//! return strings and do no I/O; the command decides where they go.

use super::SimReport;
use super::validate::{TableCheck, Validation};
use crate::report::html::{page_with_provenance, table};
use comfy_table::{Table, presets};
use maud::{Markup, html};

/// The footer of every simulated page.
const SIMULATED: &str = "Every figure marked SIMULATED is a model's prediction, not a measurement; \
     published figures are quoted with their field-notes section, measured ones with the cpulab result they come from.";

/// A page whose footer says its figures are simulated, never measured.
fn page(title: &str, header: Markup, body: Markup) -> String {
    page_with_provenance(title, header, body, SIMULATED)
}

fn fmt_rate(v: f64) -> String {
    crate::units::fmt_fixed(v, if v >= 100.0 { 0 } else { 2 })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| crate::units::fmt_fixed(x, digits))
}

/// `cpulab sim SCENARIO` as text.
pub fn report_text(r: &SimReport) -> String {
    let mut out = format!(
        "cpulab sim: {} (SIMULATED: a model's prediction, not a measurement)\n{}\nhost: {}; \
         seed {}; {:.0} ms simulated per configuration\n",
        r.scenario, r.description, r.host, r.seed, r.duration_ms
    );
    if let Some(c) = &r.calibration {
        out += &format!(
            "calibrated from {} ({}: same {:.1} us, cross {:.1} us round trip)\n",
            c.source,
            c.method,
            c.same_rtt_ns / 1e3,
            c.cross_rtt_ns / 1e3
        );
    }
    if let Some(h) = &r.host_calibration {
        out += &format!("KVM costs calibrated from {h}\n");
    }
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    t.set_header(vec![
        "configuration",
        "hypervisor",
        "VM",
        "workload",
        "SIMULATED /s",
        "latency us",
        "speedup",
    ]);
    for c in &r.configs {
        for w in &c.workloads {
            t.add_row(vec![
                c.name.clone(),
                c.hypervisor.clone(),
                w.vm.clone(),
                format!("{} ({})", w.kind, w.unit),
                fmt_rate(w.per_s),
                opt(w.mean_latency_us, 1),
                opt(w.speedup, 2),
            ]);
        }
    }
    out += &format!("\n{t}\n\nparameters:\n");
    let mut last = None;
    for c in &r.configs {
        if last != Some(&c.params) {
            out += &format!("  from {:?}: {}\n", c.name, c.params.describe());
            last = Some(&c.params);
        }
    }
    out
}

fn table_text(t: &TableCheck) -> String {
    let pp = t.measure == "share";
    let mut out = format!(
        "{} {} ({}: {})\n  host {}, {} scheduler; one parameter set: {}\n  \
         parameters set from: {}\n",
        t.id,
        t.title,
        t.reference,
        t.measured_by.as_deref().unwrap_or(t.source.cite()),
        t.host,
        t.hypervisor,
        t.params.describe(),
        t.params_from
    );
    let mut tab = Table::new();
    tab.load_style(presets::NOTHING);
    tab.set_header(vec![
        "cell",
        t.reference.as_str(),
        "SIMULATED",
        "error",
        "result",
    ]);
    for c in &t.cells {
        let err = if pp {
            format!("{:+.1} pp", c.error)
        } else {
            format!("{:+.1}%", 100.0 * c.error)
        };
        let res = match (c.checked, c.pass) {
            (false, _) if c.not_checked.is_some() => "not checked",
            (false, _) => "input / not a target",
            (true, true) if c.error.abs() > t.target => "ok: inside the measured 95% interval",
            (true, true) => "ok",
            (true, false) => "MISS",
        };
        tab.add_row(vec![
            c.cell.clone(),
            format!("{:.3}", c.published),
            format!("{:.3}", c.simulated),
            err,
            res.into(),
        ]);
    }
    out += &format!("{tab}\n");
    let (max, target) = if pp {
        (
            t.max_abs_error_pp.map(|m| format!("{m:.1} pp")),
            format!("{:.0} pp", t.target),
        )
    } else {
        (
            t.max_rel_error.map(|m| format!("{:.1}%", 100.0 * m)),
            format!("{:.0}%", 100.0 * t.target),
        )
    };
    out += &match (&t.not_checked, max) {
        (Some(_), _) => format!("  target {target}: NOT CHECKED (the reason is the last note)\n"),
        (None, None) => format!("  target {target}: no cell checked, NOT MET\n"),
        (None, Some(max)) => format!(
            "  largest checked error {max}, target {target}: {}\n",
            if t.pass { "MET" } else { "NOT MET" }
        ),
    };
    for c in &t.curves {
        let pts: Vec<String> =
            c.x.iter()
                .zip(&c.y)
                .map(|(x, y)| format!("{x:.0}:{y:.2}"))
                .collect();
        out += &format!("  SIMULATED {} by threads: {}\n", c.name, pts.join(" "));
    }
    for n in &t.notes {
        out += &format!("  note: {n}\n");
    }
    out
}

/// `cpulab sim validate` as text.
pub fn validation_text(v: &Validation) -> String {
    let mut out = format!(
        "cpulab sim validate: published (field notes) and measured (host bench) against SIMULATED, seed {}\n\n",
        v.seed
    );
    for t in &v.tables {
        out += &table_text(t);
        out.push('\n');
    }
    let met: Vec<&str> = v
        .tables
        .iter()
        .filter(|t| t.pass)
        .map(|t| t.id.as_str())
        .collect();
    let missed: Vec<&str> = v
        .tables
        .iter()
        .filter(|t| !t.pass && t.not_checked.is_none())
        .map(|t| t.id.as_str())
        .collect();
    let unchecked: Vec<&str> = v
        .tables
        .iter()
        .filter(|t| t.not_checked.is_some())
        .map(|t| t.id.as_str())
        .collect();
    let list = |ids: &[&str]| {
        if ids.is_empty() {
            "none".to_string()
        } else {
            ids.join(", ")
        }
    };
    out += &format!("targets met: {}; not met: {}", list(&met), list(&missed));
    if !unchecked.is_empty() {
        out += &format!("; not checked: {}", list(&unchecked));
    }
    out.push('\n');
    out
}

/// `cpulab sim validate --html`.
pub fn validation_html(v: &Validation) -> String {
    let body = html! {
        p {
            strong { "SIMULATED" } " columns come from a model; " strong { "published" }
            " columns are quoted from the field notes, section named per table; "
            strong { "measured" } " columns are a cpulab host bench result, named per table."
        }
        @for t in &v.tables {
            h2 { (t.id) " " (t.title) }
            p {
                (t.reference) ": " (t.measured_by.as_deref().unwrap_or(t.source.cite())) "; host " (t.host) ", " (t.hypervisor)
                " scheduler; " (match (&t.not_checked, t.pass) {
                    (Some(_), _) => "target NOT CHECKED",
                    (None, true) => "target met",
                    (None, false) => "target NOT met",
                })
            }
            p { "parameters: " (t.params.describe()) "; set from: " (t.params_from) }
            (table(
                &["cell", &format!("{} ({})", t.reference, t.source.cite()), "SIMULATED", "error", "result"],
                &t.cells.iter().map(|c| vec![
                    c.cell.clone(),
                    format!("{:.3}", c.published),
                    format!("{:.3}", c.simulated),
                    format!("{:+.3}", c.error),
                    match (c.checked, c.pass, &c.not_checked) {
                        (true, true, _) if c.error.abs() > t.target => "ok: inside the measured 95% interval",
                        (true, true, _) => "ok",
                        (true, false, _) => "MISS",
                        (false, _, Some(_)) => "not checked",
                        (false, _, None) => "input",
                    }.into(),
                ]).collect::<Vec<_>>(),
                1,
            ))
            @for c in &t.curves {
                h3 { "SIMULATED " (c.name) }
                (table(
                    &["threads", "SIMULATED speedup"],
                    &c.x.iter().zip(&c.y)
                        .map(|(x, y)| vec![format!("{x:.0}"), format!("{y:.2}")])
                        .collect::<Vec<_>>(),
                    0,
                ))
            }
            @for n in &t.notes {
                p.note { (n) }
            }
        }
    };
    page(
        "cpulab sim validate (SIMULATED)",
        html! { p.facts { "published and measured against SIMULATED" } },
        body,
    )
}

/// `cpulab sim SCENARIO --html`.
pub fn report_html(r: &SimReport) -> String {
    let rows: Vec<Vec<String>> = r
        .configs
        .iter()
        .flat_map(|c| {
            c.workloads.iter().map(move |w| {
                vec![
                    c.name.clone(),
                    c.hypervisor.clone(),
                    w.vm.clone(),
                    format!("{} ({})", w.kind, w.unit),
                    fmt_rate(w.per_s),
                    opt(w.mean_latency_us, 1),
                    opt(w.speedup, 2),
                ]
            })
        })
        .collect();
    let body = html! {
        p { strong { "SIMULATED" } ": a model's prediction, not a measurement. " (r.description) }
        p { "host: " (r.host) "; seed " (r.seed) }
        (table(
            &["configuration", "hypervisor", "VM", "workload", "SIMULATED /s", "latency us", "speedup"],
            &rows,
            4,
        ))
        @for c in &r.configs {
            p.note { (c.name) ": " (c.params.describe()) }
        }
    };
    page(
        &format!("cpulab sim {} (SIMULATED)", r.scenario),
        html! { p.facts { "SIMULATED: a model's prediction, not a measurement" } },
        body,
    )
}

/// A saved `sim` document (a scenario's or a validation's), as the registry lists it: a model,
/// not an experiment, loaded and rendered like the others, every figure labelled SIMULATED. Its
/// command is the built-in `cpulab sim`.
pub struct SimDocument;

impl crate::experiment::erased::Listed for SimDocument {
    const KIND: crate::report::envelope::Kind = crate::report::envelope::Kind::Sim;

    fn render_document(
        doc: &serde_json::Value,
        style: &crate::output::Style,
    ) -> anyhow::Result<(String, String)> {
        render_document(doc, style)
    }

    fn figures_of_document(
        doc: &serde_json::Value,
    ) -> anyhow::Result<Vec<crate::experiment::Figure>> {
        figures(doc)
    }
}

/// Renders a saved `sim` document (a scenario or a validation) with its own renderers, so
/// `cpulab report` never shows a simulated figure without its label.
pub fn render_document(
    doc: &serde_json::Value,
    _style: &crate::output::Style,
) -> anyhow::Result<(String, String)> {
    if doc.get("tables").is_some() {
        let v: Validation = sim_typed(doc)?;
        return Ok((validation_text(&v), validation_html(&v)));
    }
    let r: SimReport = sim_typed(doc)?;
    Ok((report_text(&r), report_html(&r)))
}

/// The figures of a saved scenario: each workload's rate, labelled SIMULATED.
pub fn figures(doc: &serde_json::Value) -> anyhow::Result<Vec<crate::experiment::Figure>> {
    use crate::experiment::{Direction, Figure, Unit};
    if doc.get("tables").is_some() {
        return Ok(Vec::new());
    }
    let r: SimReport = sim_typed(doc)?;
    Ok(r.configs
        .iter()
        .flat_map(|c| {
            c.workloads.iter().enumerate().map(move |(i, w)| {
                Figure::single(
                    format!(
                        "simulated_per_s[config={},vm={},workload={i}]",
                        c.name, w.vm
                    ),
                    format!("SIMULATED {} {} in {} ({})", w.kind, w.unit, w.vm, c.name),
                    Unit::PerSecond,
                    Direction::HigherIsBetter,
                    w.per_s,
                )
            })
        })
        .collect())
}

fn sim_typed<T: serde::de::DeserializeOwned>(doc: &serde_json::Value) -> anyhow::Result<T> {
    serde_json::from_value(doc.clone()).map_err(|e| {
        crate::error::bad_input(format!(
            "this sim result does not match its schema ({e}); write it again with `cpulab sim ... --json`"
        ))
    })
}
