//! What each `cpulab history` subcommand does with the store, given validated settings
//! (`commands/history.rs` turns the flags into them): list, show, diff, check, report, export,
//! import, prune.
//!
//! Every output is a typed value handed to the command's [`Emitter`] once, like every other
//! result ([`crate::emit`]): its JSON shape (no envelope: these are listings of the history,
//! not result documents; docs/json.md), its text and, for `report`, its page. The choices that
//! decide what is shown (which runs a prune deletes, the series a report charts, the runs a file
//! holds) are pure functions over literal data, tested below.

use super::check::{self, Settings};
use super::fingerprint::{self, Changed, Facts};
use super::store::{Filter, NewRun, Run, Store};
use super::{Location, changes, html, when};
use crate::compare::{self, Comparison};
use crate::emit::{Emitted, Emitter};
use crate::error::bad_input;
use crate::experiment::Figure;
use crate::report::envelope::Kind;
use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The history file the global flags chose; off is bad input for a history command.
pub fn path() -> Result<PathBuf> {
    match super::location() {
        Location::At(p) => Ok(p),
        Location::Off => Err(bad_input(
            "the history is off (--no-history or CPULAB_HISTORY=off); give --history PATH",
        )),
    }
}

/// The history file, which must exist and be cpulab's (else one line, exit 2).
pub fn open() -> Result<Store> {
    Store::open_existing(&path()?).map_err(|e| bad_input(format!("{e:#}")))
}

/// A run id as given: `12` or `@12`.
pub fn parse_id(s: &str) -> Result<i64> {
    s.trim_start_matches('@')
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            bad_input(format!(
                "`{s}` is not a history run id; give one like 12 or @12 (see `cpulab history list`)"
            ))
        })
}

fn existing(store: &Store, id: i64) -> Result<Run> {
    store.run(id)?.ok_or_else(|| {
        bad_input(format!(
            "no run @{id} in {}; see `cpulab history list`",
            store.path.display()
        ))
    })
}

/// Loads a history run's document as `compare` and `report` read a file: `@12` is run 12 of the
/// history.
pub fn load_ref(reference: &str) -> Result<crate::report::envelope::Loaded> {
    let id = parse_id(reference)?;
    let store = open()?;
    existing(&store, id)?;
    let doc = store.document(id)?.unwrap_or(Value::Null);
    crate::report::envelope::parse(
        &doc.to_string(),
        &format!("@{id}"),
        &crate::registry::kinds(),
    )
}

/// `history list`: the runs, oldest first, and the file they are in.
#[derive(Debug, Serialize)]
pub struct Listing {
    pub history: PathBuf,
    pub runs: Vec<Run>,
}

pub fn list_text(l: &Listing) -> String {
    let mut s = String::new();
    for r in &l.runs {
        s += &format!(
            "@{:<5} {}  {:<10} {:<16} {}{}\n",
            r.id,
            when::utc(r.time_unix_s),
            r.kind,
            r.host_key,
            r.command_line,
            if r.noisy { "  (noisy)" } else { "" }
        );
    }
    s += &format!("{} run(s) in {}\n", l.runs.len(), l.history.display());
    s
}

pub fn list(filter: &Filter, out: &Emitter) -> Result<()> {
    let store = open()?;
    let listing = Listing {
        runs: store.list(filter)?,
        history: store.path.clone(),
    };
    out.emit(&Emitted::bare(Kind::History, &listing, list_text, None)?)
}

/// `history show`: one run with its facts, figures and document.
#[derive(Debug, Serialize)]
pub struct Shown {
    pub run: Run,
    pub facts: Facts,
    pub figures: Vec<Figure>,
    pub document: Option<Value>,
}

pub fn show_text(s: &Shown) -> String {
    let run = &s.run;
    let mut t = format!(
        "run @{} ({}) at {} on {}\n  hardware: {}\n  command: {}\n\nFingerprint\n",
        run.id,
        run.kind,
        when::utc(run.time_unix_s),
        run.host_key,
        run.hardware_key,
        run.command_line
    );
    for (k, v) in &s.facts {
        t += &format!("  {k:<36} {v}\n");
    }
    t += "\nFigures\n";
    for f in &s.figures {
        let ci = f.ci.as_ref().map_or(String::new(), |c| {
            format!(
                "  95% CI {} to {} (n={})",
                check::fmt_value(f.unit, c.ci95_low),
                check::fmt_value(f.unit, c.ci95_high),
                c.n
            )
        });
        t += &format!(
            "  {:<60} {}{}\n",
            f.name,
            check::fmt_value(f.unit, f.value),
            ci
        );
    }
    t
}

pub fn show(id: i64, out: &Emitter) -> Result<()> {
    let store = open()?;
    let shown = Shown {
        run: existing(&store, id)?,
        facts: store.facts(id)?,
        figures: store.figures(id)?,
        document: store.document(id)?,
    };
    out.emit(&Emitted::bare(Kind::History, &shown, show_text, None)?)
}

/// `history diff`: two runs figure by figure (as `compare`) and the facts that differ.
#[derive(Debug, Serialize)]
pub struct Diff {
    pub comparison: Comparison,
    pub changed_facts: Vec<Changed>,
    /// The hardware keys when they differ (text only).
    #[serde(skip)]
    pub hardware: Option<(String, String)>,
    /// `--all`: the text also lists the plain numbers (text only).
    #[serde(skip)]
    pub all: bool,
}

pub fn diff_text(d: &Diff) -> String {
    let mut s = compare::text::render(&d.comparison, d.all, None);
    s += "\nFingerprint facts that differ\n";
    if d.changed_facts.is_empty() {
        s += "  none\n";
    }
    for f in &d.changed_facts {
        s += &format!("  {f}\n");
    }
    if let Some((a, b)) = &d.hardware {
        s += &format!("  hardware {a} -> {b}\n");
    }
    s
}

pub fn diff(a: i64, b: i64, all: bool, out: &Emitter) -> Result<()> {
    let store = open()?;
    let (ra, rb) = (existing(&store, a)?, existing(&store, b)?);
    if ra.kind != rb.kind {
        return Err(bad_input(format!(
            "@{a} is a `cpulab {}` run but @{b} is a `cpulab {}` run; diff two runs of the same kind",
            ra.kind, rb.kind
        )));
    }
    let (da, db) = (
        store.document(a)?.unwrap_or(Value::Null),
        store.document(b)?.unwrap_or(Value::Null),
    );
    let comparison = compare::comparison(
        (&format!("@{a}"), &da),
        (&format!("@{b}"), &db),
        &ra.kind,
        Some(compare::Typed {
            a: store.figures(a)?,
            b: store.figures(b)?,
        }),
        None,
    );
    let same_hardware = ra.hardware_key == rb.hardware_key;
    let d = Diff {
        comparison,
        changed_facts: fingerprint::changed(&store.facts(a)?, &store.facts(b)?),
        hardware: (!same_hardware).then_some((ra.hardware_key, rb.hardware_key)),
        all,
    };
    out.emit(&Emitted::bare(Kind::History, &d, diff_text, None)?)
}

/// `history check`: the report is emitted, then a regression beyond the threshold is the
/// command's failure (exit 1, one line), as `compare --fail-on-regression`.
pub fn check(kind: Option<&str>, settings: &Settings, out: &Emitter) -> Result<()> {
    let store = open()?;
    let r = check::run(&store, kind, settings)?;
    out.emit(&Emitted::bare(Kind::History, &r, check::render, None)?)?;
    if r.regressions.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} figure(s) got worse by more than {}% beyond noise: {}",
            r.regressions.len(),
            settings.threshold_pct,
            r.regressions.join(", ")
        )
    }
}

/// One stored run with what a report charts of it.
pub struct Charted {
    pub run: Run,
    pub facts: Facts,
    pub figures: Vec<Figure>,
}

/// `history report`: the figure series with their change points, as a page.
#[derive(Serialize)]
pub struct Page {
    #[serde(skip)]
    pub series: Vec<html::Series>,
    pub threshold_pct: f64,
}

fn page_text(p: &Page) -> String {
    format!("history report: {} figure series\n", p.series.len())
}

fn page_html(p: &Page) -> String {
    html::page(&p.series, p.threshold_pct)
}

/// One series per kind, hardware key and figure, of three runs or more, each with its change
/// points and the facts that changed at each; series with a change point first.
pub fn series(runs: &[Charted], threshold: f64) -> Vec<html::Series> {
    let mut groups: BTreeMap<(&str, &str, &str), html::Series> = BTreeMap::new();
    let facts_of: BTreeMap<i64, &Facts> = runs.iter().map(|c| (c.run.id, &c.facts)).collect();
    for c in runs {
        let r = &c.run;
        for f in &c.figures {
            let key = (r.kind.as_str(), r.hardware_key.as_str(), f.name.as_str());
            let s = groups.entry(key).or_insert_with(|| html::Series {
                kind: r.kind.clone(),
                hardware_key: r.hardware_key.clone(),
                figure: f.name.clone(),
                label: f.label.clone(),
                unit: match f.unit.suffix() {
                    "" => "value".to_string(),
                    u => u.to_string(),
                },
                points: Vec::new(),
                change_points: Vec::new(),
                changed_facts: Vec::new(),
            });
            let ci = f.ci.as_ref().map(|c| (c.ci95_low, c.ci95_high));
            s.points.push((r.id, r.time_unix_s, f.value, ci));
        }
    }
    let empty = Facts::new();
    let facts = |id: i64| facts_of.get(&id).copied().unwrap_or(&empty);
    let mut series: Vec<html::Series> = groups
        .into_values()
        .filter(|s| s.points.len() >= 3)
        .collect();
    for s in &mut series {
        let values: Vec<f64> = s.points.iter().map(|p| p.2).collect();
        s.change_points = changes::change_points(&values, threshold);
        s.changed_facts = s
            .change_points
            .iter()
            .map(|c| {
                let (before, after) = (s.points[c.at - 1].0, s.points[c.at].0);
                fingerprint::changed(facts(before), facts(after))
            })
            .collect();
    }
    series.sort_by_key(|s| s.change_points.is_empty());
    series
}

/// `out` writes the page (the command gives it only the `--html` file); a status line says how
/// many series it charts.
pub fn report(filter: &Filter, threshold: f64, quiet: bool, out: &Emitter) -> Result<()> {
    let store = open()?;
    let mut runs = Vec::new();
    for run in store.list(filter)? {
        runs.push(Charted {
            facts: store.facts(run.id)?,
            figures: store.figures(run.id)?,
            run,
        });
    }
    let page = Page {
        series: series(&runs, threshold),
        threshold_pct: threshold,
    };
    crate::output::status(quiet, page_text(&page).trim_end());
    out.emit(&Emitted::bare(
        Kind::History,
        &page,
        page_text,
        Some(page_html),
    )?)
}

/// One line of `history export`: a run with its facts and document.
pub fn export_line(r: &Run, facts: &Facts, document: Option<&Value>) -> Value {
    json!({
        "id": r.id,
        "time_unix_s": r.time_unix_s,
        "kind": r.kind,
        "host_key": r.host_key,
        "hardware_key": r.hardware_key,
        "command_line": r.command_line,
        "noisy": r.noisy,
        "facts": facts,
        "document": document,
    })
}

/// `history export`: JSON Lines, one run per line; its document is the array of lines.
#[derive(Serialize)]
#[serde(transparent)]
pub struct Export {
    pub lines: Vec<Value>,
}

fn export_text(e: &Export) -> String {
    e.lines.iter().map(|l| format!("{l}\n")).collect()
}

pub fn export(filter: &Filter, out: &Emitter) -> Result<()> {
    let store = open()?;
    let mut lines = Vec::new();
    for r in store.list(filter)? {
        lines.push(export_line(
            &r,
            &store.facts(r.id)?,
            store.document(r.id)?.as_ref(),
        ));
    }
    out.emit(&Emitted::bare(
        Kind::History,
        &Export { lines },
        export_text,
        None,
    )?)
}

/// The runs to import from a file's text: a `--json` result, or lines of `history export`.
pub fn runs_of(text: &str, name: &str) -> Result<Vec<NewRun>> {
    let kinds = crate::registry::kinds();
    let trimmed = text.trim_start();
    let first_line = trimmed.lines().next().unwrap_or("");
    let exported = serde_json::from_str::<Value>(first_line)
        .ok()
        .is_some_and(|v| v.get("document").is_some() && v.get("facts").is_some());
    if !exported {
        let l = crate::report::envelope::parse(text, name, &kinds)?;
        let fp = fingerprint::of_document(&l.value).ok_or_else(|| {
            bad_input(format!(
                "{name} has no conditions to say where it ran; it cannot be placed in the history"
            ))
        })?;
        let words = vec![format!("(imported from {name})")];
        return Ok(vec![super::new_run(l.kind, &l.value, fp, &words)]);
    }
    let mut out = Vec::new();
    for (i, line) in trimmed
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| bad_input(format!("{name} line {}: not JSON ({e})", i + 1)))?;
        let doc = &v["document"];
        let l = crate::report::envelope::parse(&doc.to_string(), name, &kinds)?;
        let facts: Facts = serde_json::from_value(v["facts"].clone())
            .map_err(|e| bad_input(format!("{name} line {}: bad facts ({e})", i + 1)))?;
        let fp = fingerprint::Fingerprint {
            host_key: v["host_key"].as_str().unwrap_or("").to_string(),
            hardware_key: v["hardware_key"].as_str().unwrap_or("").to_string(),
            facts,
        };
        let words = vec![v["command_line"].as_str().unwrap_or("").to_string()];
        let mut run = super::new_run(l.kind, &l.value, fp, &words);
        if let Some(t) = v["time_unix_s"].as_i64() {
            run.time_unix_s = t;
        }
        if let Some(n) = v["noisy"].as_bool() {
            run.noisy = n;
        }
        out.push(run);
    }
    Ok(out)
}

/// `history import`: every file read first (a bad one is refused before anything is written),
/// then recorded; one status line names the new runs.
pub fn import(files: &[PathBuf], quiet: bool) -> Result<()> {
    let mut runs = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(f)
            .map_err(|e| bad_input(format!("cannot read {name}: {e}")))?;
        runs.extend(runs_of(&text, &name)?);
    }
    let mut store = Store::open(&path()?).map_err(|e| bad_input(format!("{e:#}")))?;
    let mut ids = Vec::new();
    for r in &runs {
        ids.push(store.insert(r).context("recording an imported run")?);
    }
    crate::output::status(
        quiet,
        &format!(
            "imported {} run(s) into {}: {}",
            ids.len(),
            store.path.display(),
            at_ids(&ids)
        ),
    );
    Ok(())
}

fn at_ids(ids: &[i64]) -> String {
    ids.iter()
        .map(|i| format!("@{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The runs a prune deletes, ascending: those before `before`, and all but the newest `keep` of
/// each kind and hardware key (`runs` oldest first, as the store lists them).
pub fn doomed(runs: &[Run], before: Option<i64>, keep: Option<usize>) -> Vec<i64> {
    let mut doomed: Vec<i64> = Vec::new();
    if let Some(t) = before {
        doomed.extend(runs.iter().filter(|r| r.time_unix_s < t).map(|r| r.id));
    }
    if let Some(n) = keep {
        let mut groups: BTreeMap<(&str, &str), Vec<i64>> = BTreeMap::new();
        for r in runs {
            groups
                .entry((&r.kind, &r.hardware_key))
                .or_default()
                .push(r.id);
        }
        for ids in groups.values() {
            doomed.extend(ids.iter().take(ids.len().saturating_sub(n)));
        }
    }
    doomed.sort_unstable();
    doomed.dedup();
    doomed
}

/// `history prune --dry-run`: the runs that would go.
#[derive(Serialize)]
pub struct WouldDelete {
    pub would_delete: Vec<i64>,
}

fn would_delete_text(w: &WouldDelete) -> String {
    if w.would_delete.is_empty() {
        return "nothing to delete\n".into();
    }
    format!(
        "would delete {} run(s): {}\n",
        w.would_delete.len(),
        at_ids(&w.would_delete)
    )
}

/// The status line after a prune: how many runs went, or that none matched.
fn deleted_text(n: usize) -> String {
    if n == 0 {
        "nothing to delete".into()
    } else {
        format!("deleted {n} run(s)")
    }
}

/// `history prune`: deletes (one status line) or, with `dry_run`, emits what would go.
pub fn prune(
    before: Option<i64>,
    keep: Option<usize>,
    dry_run: bool,
    quiet: bool,
    out: &Emitter,
) -> Result<()> {
    let mut store = open()?;
    let ids = doomed(&store.list(&Filter::default())?, before, keep);
    if dry_run {
        let w = WouldDelete { would_delete: ids };
        return out.emit(&Emitted::bare(Kind::History, &w, would_delete_text, None)?);
    }
    let n = store.delete(&ids)?;
    crate::output::status(quiet, &deleted_text(n));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{Direction, Unit};

    fn run(id: i64, kind: &str, hw: &str) -> Run {
        Run {
            id,
            time_unix_s: 1_700_000_000 + id * 86_400,
            kind: kind.into(),
            host_key: "h".into(),
            hardware_key: hw.into(),
            command_line: format!("cpulab {kind} --json"),
            noisy: id == 2,
        }
    }

    fn rtt(v: f64) -> Figure {
        Figure::from_samples(
            "rtt_ns",
            "round trip",
            Unit::Nanoseconds,
            Direction::LowerIsBetter,
            vec![v * 0.99, v, v * 1.01],
        )
        .unwrap()
    }

    #[test]
    fn a_run_id_is_a_positive_number_with_or_without_its_at() {
        assert_eq!(parse_id("12").unwrap(), 12);
        assert_eq!(parse_id("@12").unwrap(), 12);
        for bad in ["0", "@-1", "x", "@", "1.5"] {
            let e = parse_id(bad).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(!format!("{e:#}").contains('\n'));
        }
    }

    #[test]
    fn the_listing_keeps_its_json_shape_and_says_noisy_runs() {
        let l = Listing {
            history: "/h.sqlite".into(),
            runs: vec![run(1, "oscost", "hw"), run(2, "oscost", "hw")],
        };
        let v = serde_json::to_value(&l).unwrap();
        assert_eq!(v["history"], "/h.sqlite");
        assert_eq!(v["runs"][1]["id"], 2);
        assert_eq!(v["runs"][1]["noisy"], true);
        assert!(v.get("kind").is_none(), "no envelope: {v}");
        let t = list_text(&l);
        assert_eq!(t.lines().count(), 3, "{t}");
        assert!(t.lines().nth(1).unwrap().ends_with("(noisy)"), "{t}");
        assert!(t.ends_with("2 run(s) in /h.sqlite\n"), "{t}");
    }

    #[test]
    fn a_shown_run_lists_its_facts_and_figures() {
        let s = Shown {
            run: run(3, "pingpong", "hw"),
            facts: [("kernel".to_string(), "6.1.0".to_string())].into(),
            figures: vec![rtt(1000.0)],
            document: Some(json!({"kind": "pingpong"})),
        };
        let v = serde_json::to_value(&s).unwrap();
        for k in ["run", "facts", "figures", "document"] {
            assert!(v.get(k).is_some(), "{k}: {v}");
        }
        assert_eq!(v["facts"]["kernel"], "6.1.0");
        let t = show_text(&s);
        assert!(t.starts_with("run @3 (pingpong)"), "{t}");
        assert!(t.contains("kernel"), "{t}");
        assert!(t.contains("rtt_ns"), "{t}");
        assert!(t.contains("95% CI"), "{t}");
        // The figure reads in its unit, as every cpulab text does, not as raw nanoseconds.
        assert!(t.contains(" 1.00 us  95% CI "), "{t}");
        assert!(!t.contains("ns  95% CI"), "{t}");
    }

    #[test]
    fn prune_keeps_the_newest_of_each_kind_and_hardware() {
        let runs = vec![
            run(1, "doctor", "a"),
            run(2, "doctor", "a"),
            run(3, "doctor", "b"),
            run(4, "doctor", "a"),
            run(5, "oscost", "a"),
        ];
        assert_eq!(doomed(&runs, None, Some(1)), vec![1, 2]);
        assert_eq!(doomed(&runs, None, Some(5)), Vec::<i64>::new());
        // Before run 3's time: runs 1 and 2; with --keep 2 as well, the union, once each.
        let t3 = runs[2].time_unix_s;
        assert_eq!(doomed(&runs, Some(t3), None), vec![1, 2]);
        assert_eq!(doomed(&runs, Some(t3), Some(2)), vec![1, 2]);
        assert_eq!(doomed(&runs, None, Some(0)), vec![1, 2, 3, 4, 5]);
        let w = WouldDelete {
            would_delete: vec![1, 2],
        };
        assert_eq!(would_delete_text(&w), "would delete 2 run(s): @1 @2\n");
        // Nothing to go: said in words, not as a list with nothing after its colon.
        let none = WouldDelete {
            would_delete: vec![],
        };
        assert_eq!(would_delete_text(&none), "nothing to delete\n");
        assert_eq!(deleted_text(0), "nothing to delete");
        assert_eq!(deleted_text(3), "deleted 3 run(s)");
    }

    #[test]
    fn a_report_charts_series_of_three_runs_and_names_the_facts_at_a_change() {
        let facts = |k: &str| -> Facts { [("kernel".to_string(), k.to_string())].into() };
        let mut runs: Vec<Charted> = (1..=8)
            .map(|i| Charted {
                run: run(i, "pingpong", "a"),
                facts: facts(if i <= 4 { "5.10" } else { "6.1" }),
                figures: vec![rtt(if i <= 4 { 1000.0 } else { 1500.0 })],
            })
            .collect();
        // Two runs on other hardware: too few for a series.
        runs.extend((9..=10).map(|i| Charted {
            run: run(i, "pingpong", "b"),
            facts: facts("6.1"),
            figures: vec![rtt(900.0)],
        }));
        let s = series(&runs, 5.0);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].hardware_key, "a");
        assert_eq!(s[0].unit, "ns");
        assert_eq!(s[0].points.len(), 8);
        assert_eq!(s[0].change_points.len(), 1, "{:?}", s[0].change_points);
        assert_eq!(s[0].change_points[0].at, 4);
        assert_eq!(
            s[0].changed_facts,
            vec![vec![Changed {
                fact: "kernel".into(),
                before: Some("5.10".into()),
                after: Some("6.1".into()),
            }]]
        );
        let page = Page {
            series: s,
            threshold_pct: 5.0,
        };
        assert_eq!(page_text(&page), "history report: 1 figure series\n");
        assert!(page_html(&page).contains("<svg"));
    }

    #[test]
    fn an_exported_line_is_imported_back_as_the_same_run() {
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/results/doctor-quick.json"
            ))
            .unwrap(),
        )
        .unwrap();
        // A `--json` result: its own facts, the file named as its command line.
        let one = runs_of(&doc.to_string(), "d.json").unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].kind, "doctor");
        assert_eq!(one[0].command_line, "(imported from d.json)");
        // Two exported lines: each keeps its time, keys, facts and command line.
        let r = Run {
            command_line: "cpulab doctor --quick".into(),
            noisy: true,
            ..run(7, "doctor", "hw")
        };
        let facts: Facts = [("kernel".to_string(), "6.1.0".to_string())].into();
        let line = export_line(&r, &facts, Some(&doc));
        // The line says noisy as `history list --json` does.
        assert_eq!(line["noisy"], true);
        let text = export_text(&Export {
            lines: vec![line.clone(), line],
        });
        let back = runs_of(&text, "runs.jsonl").unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].time_unix_s, r.time_unix_s);
        assert_eq!(back[1].fingerprint.hardware_key, "hw");
        assert_eq!(back[1].fingerprint.facts, facts);
        assert_eq!(back[1].command_line, "cpulab doctor --quick");
        assert!(back[1].noisy);
        assert!(!back[1].figures.is_empty());
        // A broken line is one line of bad input naming the file and line.
        let e = runs_of(&format!("{text}{{not json\n"), "runs.jsonl").unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(format!("{e:#}").contains("runs.jsonl line 3"), "{e:#}");
    }
}
