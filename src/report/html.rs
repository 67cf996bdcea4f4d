//! The HTML primitives every result page is built from: the page frame, a chart section, the
//! conditions a result was taken under.
//!
//! Pages are written with [`maud`], which escapes every interpolated string unless it is marked
//! pre-escaped, so a hostname, a note or a program's name with `<` or `&` in it cannot break a
//! page. The only pre-escaped inserts are the stylesheet (compiled in with `include_str!`) and
//! the SVG charts from [`super::svg`], which escape their own text. Nothing is fetched from the
//! network, so the file can be attached to a ticket and opened anywhere, years later.
//!
//! Each experiment (and the doctor) composes its own page from these beside its own code; this
//! module knows no experiment.

use crate::machine::Conditions;
use maud::{Markup, PreEscaped, html};

const STYLE: &str = include_str!("style.css");

/// The whole page: header (title and the facts line), body, footer.
pub fn page(title: &str, header: Markup, body: Markup) -> String {
    page_with_provenance(
        title,
        header,
        body,
        "Every figure is a measurement from the run described above, with its 95% confidence \
         interval where one was computed; whiskers on bars show that interval.",
    )
}

/// [`page`] whose footer says where its figures come from in the caller's words (a model's page
/// must not claim its figures were measured).
pub fn page_with_provenance(title: &str, header: Markup, body: Markup, provenance: &str) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let doc = html! {
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content={ "cpulab " (version) };
                title { (title) }
                style { "\n" (PreEscaped(STYLE)) }
            }
            body {
                header {
                    h1 { (title) }
                    (header)
                }
                main { (body) }
                footer {
                    p {
                        "Written by cpulab " (version) ". " (provenance) " Nothing in this file \
                         loads anything from the network."
                    }
                }
            }
        }
    };
    format!("<!doctype html>\n{}\n", doc.into_string())
}

/// An SVG chart from [`super::svg`] (which escapes its own text) as markup.
pub fn chart(svg: String) -> Markup {
    PreEscaped(svg)
}

/// A section of charts: a heading, one line of how to read them, the charts. Empty charts give
/// an empty section (nothing is drawn for a measurement that is absent).
pub fn section(title: &str, note: &str, charts: Markup) -> Markup {
    if charts.0.is_empty() {
        return html! {};
    }
    html! {
        section {
            h2 { (title) }
            p.note { (note) }
            (charts)
        }
    }
}

/// The facts line under a page's title: host, kernel, CPUs.
pub fn facts_line(c: &Conditions) -> Markup {
    html! {
        p.facts {
            b { (c.hostname) } " · kernel " (c.kernel) " · CPUs " (c.allowed_cpus.to_string()) " usable"
        }
    }
}

/// The conditions a result was taken under, and what was not measured (`(what, why)`).
pub fn conditions(c: &Conditions, skipped: &[(String, String)]) -> Markup {
    html! {
        section {
            h2 { "Conditions" }
            ul.plain {
                li {
                    "cpulab " (c.cpulab_version)
                    @if let Some(r) = &c.cpulab_revision { " (" (r) ")" }
                    ", kernel " (c.kernel) ", host " (c.hostname)
                    ", started at Unix time " (c.started_unix_s)
                }
                @if c.noisy {
                    li { b { "Other load was seen during the run: figures may be spoiled." } }
                }
                @for n in &c.notes {
                    li { (n) }
                }
            }
            @if !skipped.is_empty() {
                h3 { "Not measured" }
                ul.plain {
                    @for (what, why) in skipped {
                        li { (what) ": " (why) }
                    }
                }
            }
        }
    }
}

/// A table of rows of cells, the first row the header; numbers right-aligned by the caller's
/// choice of `num` columns.
pub fn table(header: &[&str], rows: &[Vec<String>], num_from: usize) -> Markup {
    table_between(header, rows, num_from..header.len())
}

/// [`table`] whose numbers are the columns in `numeric` only: the text columns after them
/// (a list of findings) wrap instead of stretching the page.
pub fn table_between(
    header: &[&str],
    rows: &[Vec<String>],
    numeric: std::ops::Range<usize>,
) -> Markup {
    html! {
        table {
            tr { @for h in header { th { (h) } } }
            @for r in rows {
                tr {
                    @for (i, cell) in r.iter().enumerate() {
                        @if numeric.contains(&i) { td.num { (cell) } } @else { td { (cell) } }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_the_page_is_whole() {
        let p = page("a <b> & c", html! { p { "x < y" } }, html! {});
        assert!(p.starts_with("<!doctype html>"));
        assert!(p.contains("<title>a &lt;b&gt; &amp; c</title>"));
        assert!(p.contains("x &lt; y"));
        assert!(p.trim_end().ends_with("</html>"));
    }

    /// Only the numeric columns keep to one line; a text column after them wraps.
    #[test]
    fn only_the_numeric_columns_are_numbers() {
        let rows = vec![vec!["h".to_string(), "1.0".into(), "a, b, c".into()]];
        let t = table_between(&["host", "cost", "findings"], &rows, 1..2).into_string();
        assert!(
            t.contains(r#"<td>h</td><td class="num">1.0</td><td>a, b, c</td>"#),
            "{t}"
        );
        let t = table(&["host", "cost", "findings"], &rows, 1).into_string();
        assert!(t.contains(r#"<td class="num">a, b, c</td>"#), "{t}");
    }
}
