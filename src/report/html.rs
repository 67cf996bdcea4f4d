//! One self-contained HTML file per result: the page template and stylesheet are compiled in
//! (`include_str!`), charts are inline SVG from [`super::svg`], and nothing is fetched from the
//! network, so the file can be attached to a ticket and opened anywhere, years later.

use super::charts;
use super::svg::esc;
use crate::doctor::DoctorReport;
use crate::doctor::findings::Finding;
use crate::doctor::measurements::Measurements;
use crate::machine::Conditions;

const TEMPLATE: &str = include_str!("template.html");
const STYLE: &str = include_str!("style.css");

/// Fills the template.
pub fn page(title: &str, header: &str, body: &str) -> String {
    TEMPLATE
        .replace("{{style}}", STYLE)
        .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        .replace("{{title}}", &esc(title))
        .replace("{{header}}", header)
        .replace("{{body}}", body)
}

fn finding_html(n: usize, f: &Finding) -> String {
    let sev = f.severity.as_str();
    let mut s = format!(
        "<article class=\"finding {sev}\"><div class=\"head\"><span class=\"sev {sev}\">{sev}</span><h3>{n}. {}</h3><span class=\"conf\">confidence: {}</span></div>\n<p class=\"magnitude\">{}</p>\n<h4>Evidence</h4><table><tr><th>what</th><th>value</th><th>source</th></tr>",
        esc(&f.title),
        f.confidence.as_str(),
        esc(&capitalise(&f.magnitude.text))
    );
    for e in &f.evidence {
        s += &format!(
            "<tr><td>{}</td><td>{}</td><td class=\"src\">{}</td></tr>",
            esc(&e.label),
            esc(&e.value),
            esc(&e.source)
        );
    }
    s += &format!(
        "</table>\n<h4>Mechanism</h4><p>{}</p>\n<h4>What to do</h4>",
        esc(&f.mechanism)
    );
    for r in &f.remedies {
        s += &format!(
            "<div class=\"remedy\"><code>{}</code><p>{}</p><p class=\"cost\">Cost: {}</p></div>",
            esc(&r.command),
            esc(&r.effect),
            esc(&r.cost_caveat)
        );
    }
    s + "</article>\n"
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn conditions_html(c: &Conditions, m: Option<&Measurements>) -> String {
    let mut s = String::from("<section><h2>Conditions</h2><ul class=\"plain\">");
    s += &format!(
        "<li>cpulab {}, kernel {}, host {}, started at Unix time {}</li>",
        esc(&c.cpulab_version),
        esc(&c.kernel),
        esc(&c.hostname),
        c.started_unix_s
    );
    if c.noisy {
        s += "<li><b>Other load was seen during the run: figures may be spoiled.</b></li>";
    }
    for n in &c.notes {
        s += &format!("<li>{}</li>", esc(n));
    }
    s += "</ul>";
    if let Some(m) = m.filter(|m| !m.skipped.is_empty()) {
        s += "<h3>Not measured</h3><ul class=\"plain\">";
        for k in &m.skipped {
            s += &format!("<li>{}: {}</li>", esc(&k.what), esc(&k.reason));
        }
        s += "</ul>";
    }
    s + "</section>"
}

/// The doctor's report: verdict, findings, charts, conditions.
pub fn doctor_page(r: &DoctorReport) -> String {
    let f = &r.facts;
    let host = f
        .hypervisor
        .as_ref()
        .map_or("bare metal (no hypervisor seen)".to_string(), |h| {
            format!("{h} guest")
        });
    let header = format!(
        "<p class=\"facts\"><b>{}</b> &middot; {} &middot; kernel {} &middot; CPUs <b>{}</b> usable of {} online &middot; {} &middot; {} run, {:.0} s</p>",
        esc(&r.conditions.hostname),
        esc(&host),
        esc(&r.conditions.kernel),
        esc(&f.allowed_cpus.to_string()),
        esc(&f.online_cpus.to_string()),
        esc(f.cpu_model.as_deref().unwrap_or("CPU model unknown")),
        r.mode.as_str(),
        r.duration_s
    );
    let mut body = String::new();
    if r.findings.is_empty() {
        body += "<p class=\"verdict ok\">No finding: every effect the doctor measured is within its noise or below the size worth acting on.</p>";
    } else {
        body += &format!(
            "<p class=\"verdict bad\">{} finding{}, most important first.</p>",
            r.findings.len(),
            if r.findings.len() == 1 { "" } else { "s" }
        );
        body += "<section><h2>Findings</h2>";
        for (i, x) in r.findings.iter().enumerate() {
            body += &finding_html(i + 1, x);
        }
        body += "</section>";
    }
    body += &charts::all(&r.measurements);
    body += &conditions_html(&r.conditions, Some(&r.measurements));
    page("cpulab doctor", &header, &body)
}

/// A wakeup-only page (for a saved `pingpong` result).
pub fn wakeup_page(c: &Conditions, m: &Measurements) -> String {
    let header = format!(
        "<p class=\"facts\"><b>{}</b> &middot; kernel {} &middot; CPUs {} usable</p>",
        esc(&c.hostname),
        esc(&c.kernel),
        esc(&c.allowed_cpus.to_string())
    );
    let body = charts::all(m) + &conditions_html(c, Some(m));
    page("cpulab pingpong", &header, &body)
}

/// Any other result: its figures as a table (what `compare` would compare).
pub fn generic_page(kind: &str, doc: &serde_json::Value) -> String {
    let flat = crate::compare::walk::flatten(doc);
    let mut body = String::from(
        "<section><h2>Figures</h2><table><tr><th>figure</th><th>value</th><th>95% CI</th><th>samples</th></tr>",
    );
    for f in flat.figures.values() {
        let ci = f
            .samples
            .as_deref()
            .and_then(crate::stats::MeanCi::of)
            .map(|m| (m.ci95_low, m.ci95_high))
            .or(f.ci95)
            .map_or(String::new(), |(a, b)| {
                format!(
                    "{} to {}",
                    crate::compare::text::fmt_value(&f.path, a),
                    crate::compare::text::fmt_value(&f.path, b)
                )
            });
        body += &format!(
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&f.path),
            esc(&crate::compare::text::fmt_value(&f.path, f.value)),
            esc(&ci),
            f.samples.as_ref().map_or(0, Vec::len)
        );
    }
    body += "</table></section>";
    if let Some(c) = doc
        .get("conditions")
        .and_then(|c| serde_json::from_value::<Conditions>(c.clone()).ok())
    {
        body += &conditions_html(&c, None);
    }
    page(&format!("cpulab {kind}"), "", &body)
}
