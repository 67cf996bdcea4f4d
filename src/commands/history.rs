//! `cpulab history`: the runs every measuring command recorded, and what changed between them.
//! See [`crate::history`] for the store and the method.

use super::Global;
use crate::error::bad_input;
use crate::history::check::{self, Settings};
use crate::history::store::{Filter, NewRun, Store};
use crate::history::{self, Location, fingerprint, when};
use crate::output;
use anyhow::{Context, Result};
use serde_json::{Value, json};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab history list --kind doctor --since 7d\n  \
    cpulab history diff 11 12\n  \
    cpulab history check --threshold 5\n  \
    cpulab history report --html history.html")]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

/// Which runs (list, export, prune, report).
#[derive(Debug, Clone, clap::Args)]
pub struct Which {
    /// Only runs of this kind (`doctor`, `pingpong`, ...).
    #[arg(long)]
    pub kind: Option<String>,
    /// Only runs of this host (its host name).
    #[arg(long)]
    pub host: Option<String>,
    /// Only runs at or after TIME: Unix seconds, `YYYY-MM-DD[THH:MM]` (UTC) or an age (`7d`, `36h`).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only runs at or before TIME (same forms as --since).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// List runs, oldest first.
    List {
        #[command(flatten)]
        which: Which,
        /// One JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// One run: its command line, fingerprint facts and figures (`--json`: with its document).
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Two runs figure by figure (as `compare`), and the fingerprint facts that differ.
    Diff {
        a: String,
        b: String,
        /// Also list the plain numbers that have no samples and are not judged.
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// Test the newest run of each kind against the earlier runs on the same hardware, and name
    /// the facts that changed with each change. Exit 1 on a regression beyond the threshold.
    Check {
        /// Only this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Runs in each series, the newest included.
        #[arg(long, default_value_t = 20, value_name = "N")]
        window: usize,
        /// The minimum effect, in percent: smaller moves are never a change.
        #[arg(long, default_value_t = 5.0, value_name = "PCT")]
        threshold: f64,
        #[arg(long)]
        json: bool,
    },
    /// Every figure over time as a page: change points marked, the facts that changed beside them.
    Report {
        #[command(flatten)]
        which: Which,
        /// Write the page to FILE.
        #[arg(long, value_name = "FILE")]
        html: PathBuf,
        /// The minimum effect of a change point, in percent.
        #[arg(long, default_value_t = 5.0, value_name = "PCT")]
        threshold: f64,
    },
    /// Write runs as JSON Lines on stdout (one object per run, its document inside).
    Export {
        #[command(flatten)]
        which: Which,
    },
    /// Record result files written by `--json` (or lines of `history export`).
    Import {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Delete runs: all but the newest N of each kind and hardware, or those before a time.
    Prune {
        /// Keep the newest N runs of each kind on each hardware key.
        #[arg(long, value_name = "N")]
        keep: Option<usize>,
        /// Delete runs before TIME (same forms as list --since).
        #[arg(long, value_name = "TIME")]
        before: Option<String>,
        /// Say what would go, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn time_flag(flag: &str, v: &Option<String>) -> Result<Option<i64>> {
    v.as_deref()
        .map(|t| {
            when::parse(t, now()).ok_or_else(|| {
                bad_input(format!(
                    "{flag} {t}: not a time; give Unix seconds, 2026-11-25, 2026-11-25T17:30 (UTC) or an age like 7d"
                ))
            })
        })
        .transpose()
}

impl Which {
    fn filter(&self) -> Result<Filter> {
        Ok(Filter {
            kind: self.kind.clone(),
            host: self.host.clone(),
            hardware_key: None,
            since_unix_s: time_flag("--since", &self.since)?,
            until_unix_s: time_flag("--until", &self.until)?,
        })
    }
}

fn path() -> Result<PathBuf> {
    match history::location() {
        Location::At(p) => Ok(p),
        Location::Off => Err(bad_input(
            "the history is off (--no-history or CPULAB_HISTORY=off); give --history PATH",
        )),
    }
}

fn open() -> Result<Store> {
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

fn existing(store: &Store, id: i64) -> Result<history::store::Run> {
    store.run(id)?.ok_or_else(|| {
        bad_input(format!(
            "no run @{id} in {}; see `cpulab history list`",
            store.path.display()
        ))
    })
}

pub fn run(args: Args, g: &Global) -> Result<()> {
    match args.action {
        Action::List { which, json } => list(&which, json),
        Action::Show { id, json } => show(&id, json),
        Action::Diff { a, b, all, json } => diff(&a, &b, all, json),
        Action::Check {
            kind,
            window,
            threshold,
            json,
        } => {
            if window < 3 {
                return Err(bad_input(format!(
                    "--window {window}: a change needs at least 2 earlier runs; give 3 or more"
                )));
            }
            if !(threshold.is_finite() && threshold >= 0.0) {
                return Err(bad_input(format!(
                    "--threshold {threshold} is not a percentage; give a number such as 5"
                )));
            }
            check_cmd(kind.as_deref(), window, threshold, json)
        }
        Action::Report {
            which,
            html,
            threshold,
        } => report(&which, &html, threshold, g.quiet),
        Action::Export { which } => export(&which),
        Action::Import { files } => import(&files, g.quiet),
        Action::Prune {
            keep,
            before,
            dry_run,
        } => prune(keep, before.as_ref(), dry_run, g.quiet),
    }
}

fn list(which: &Which, json: bool) -> Result<()> {
    let store = open()?;
    let runs = store.list(&which.filter()?)?;
    if json {
        return output::print_json(&json!({ "history": store.path, "runs": runs }));
    }
    let mut s = String::new();
    for r in &runs {
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
    s += &format!("{} run(s) in {}\n", runs.len(), store.path.display());
    output::print_text(&s)
}

fn show(id: &str, json: bool) -> Result<()> {
    let store = open()?;
    let id = parse_id(id)?;
    let run = existing(&store, id)?;
    let facts = store.facts(id)?;
    let figures = store.figures(id)?;
    if json {
        return output::print_json(&json!({
            "run": run,
            "facts": facts,
            "figures": figures,
            "document": store.document(id)?,
        }));
    }
    let mut s = format!(
        "run @{} ({}) at {} on {}\n  hardware: {}\n  command: {}\n\nFingerprint\n",
        run.id,
        run.kind,
        when::utc(run.time_unix_s),
        run.host_key,
        run.hardware_key,
        run.command_line
    );
    for (k, v) in &facts {
        s += &format!("  {k:<36} {v}\n");
    }
    s += "\nFigures\n";
    for f in &figures {
        let ci = f.ci.as_ref().map_or(String::new(), |c| {
            format!(
                "  95% CI {} to {} (n={})",
                crate::compare::text::fmt_value(&f.name, c.ci95_low),
                crate::compare::text::fmt_value(&f.name, c.ci95_high),
                c.n
            )
        });
        s += &format!(
            "  {:<60} {}{}{}\n",
            f.name,
            crate::compare::text::fmt_value(&f.name, f.value),
            f.unit.suffix(),
            ci
        );
    }
    output::print_text(&s)
}

fn diff(a: &str, b: &str, all: bool, json: bool) -> Result<()> {
    let store = open()?;
    let (ia, ib) = (parse_id(a)?, parse_id(b)?);
    let (ra, rb) = (existing(&store, ia)?, existing(&store, ib)?);
    if ra.kind != rb.kind {
        return Err(bad_input(format!(
            "@{ia} is a {} run but @{ib} is a {} run; diff two runs of the same kind",
            ra.kind, rb.kind
        )));
    }
    let (da, db) = (
        store.document(ia)?.unwrap_or(Value::Null),
        store.document(ib)?.unwrap_or(Value::Null),
    );
    let c = crate::compare::comparison(
        (&format!("@{ia}"), &da),
        (&format!("@{ib}"), &db),
        &ra.kind,
        Some(crate::compare::Typed {
            a: store.figures(ia)?,
            b: store.figures(ib)?,
        }),
        None,
    );
    let facts = fingerprint::changed(&store.facts(ia)?, &store.facts(ib)?);
    if json {
        return output::print_json(&json!({ "comparison": c, "changed_facts": facts }));
    }
    let mut s = crate::compare::text::render(&c, all, None);
    s += "\nFingerprint facts that differ\n";
    if facts.is_empty() {
        s += "  none\n";
    }
    for f in &facts {
        s += &format!("  {f}\n");
    }
    if ra.hardware_key != rb.hardware_key {
        s += &format!("  hardware {} -> {}\n", ra.hardware_key, rb.hardware_key);
    }
    output::print_text(&s)
}

fn check_cmd(kind: Option<&str>, window: usize, threshold: f64, json: bool) -> Result<()> {
    let store = open()?;
    let settings = Settings {
        window,
        threshold_pct: threshold,
    };
    let r = check::run(&store, kind, &settings)?;
    if json {
        output::print_json(&r)?;
    } else {
        output::print_text(&check::render(&r))?;
    }
    if r.regressions.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} figure(s) got worse by more than {threshold}% beyond noise: {}",
            r.regressions.len(),
            r.regressions.join(", ")
        )
    }
}

fn report(which: &Which, file: &std::path::Path, threshold: f64, quiet: bool) -> Result<()> {
    use crate::history::{changes, html};
    crate::emit::check_writable("--html", file)?;
    let store = open()?;
    let runs = store.list(&which.filter()?)?;
    // One series per kind, hardware key and figure.
    let mut groups: std::collections::BTreeMap<(String, String, String), html::Series> =
        Default::default();
    let mut facts_of = std::collections::BTreeMap::new();
    for r in &runs {
        facts_of.insert(r.id, store.facts(r.id)?);
        for f in store.figures(r.id)? {
            let key = (r.kind.clone(), r.hardware_key.clone(), f.name.clone());
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
                fingerprint::changed(&facts_of[&before], &facts_of[&after])
            })
            .collect();
    }
    // Series with change points first.
    series.sort_by_key(|s| s.change_points.is_empty());
    crate::emit::write_file("--html", file, html::page(&series, threshold).as_bytes())?;
    output::status(
        quiet,
        &format!(
            "history report ({} figure series) written to {}",
            series.len(),
            file.display()
        ),
    );
    Ok(())
}

fn export(which: &Which) -> Result<()> {
    let store = open()?;
    let mut s = String::new();
    for r in store.list(&which.filter()?)? {
        let line = json!({
            "id": r.id,
            "time_unix_s": r.time_unix_s,
            "kind": r.kind,
            "host_key": r.host_key,
            "hardware_key": r.hardware_key,
            "command_line": r.command_line,
            "facts": store.facts(r.id)?,
            "document": store.document(r.id)?,
        });
        s += &line.to_string();
        s.push('\n');
    }
    output::print_text(&s)
}

/// One run to import from a file's text: a `--json` result, or lines of `history export`.
fn runs_of(text: &str, name: &str) -> Result<Vec<NewRun>> {
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
        return Ok(vec![history::new_run(l.kind, &l.value, fp, &words)]);
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
        let facts: fingerprint::Facts = serde_json::from_value(v["facts"].clone())
            .map_err(|e| bad_input(format!("{name} line {}: bad facts ({e})", i + 1)))?;
        let fp = fingerprint::Fingerprint {
            host_key: v["host_key"].as_str().unwrap_or("").to_string(),
            hardware_key: v["hardware_key"].as_str().unwrap_or("").to_string(),
            facts,
        };
        let words = vec![v["command_line"].as_str().unwrap_or("").to_string()];
        let mut run = history::new_run(l.kind, &l.value, fp, &words);
        if let Some(t) = v["time_unix_s"].as_i64() {
            run.time_unix_s = t;
        }
        out.push(run);
    }
    Ok(out)
}

fn import(files: &[PathBuf], quiet: bool) -> Result<()> {
    // Read every file first: a bad one is refused before anything is written.
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
    output::status(
        quiet,
        &format!(
            "imported {} run(s) into {}: {}",
            ids.len(),
            store.path.display(),
            ids.iter()
                .map(|i| format!("@{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    );
    Ok(())
}

fn prune(keep: Option<usize>, before: Option<&String>, dry_run: bool, quiet: bool) -> Result<()> {
    if keep.is_none() && before.is_none() {
        return Err(bad_input(
            "prune needs --keep N or --before TIME; nothing was deleted",
        ));
    }
    let cutoff = time_flag("--before", &before.cloned())?;
    let mut store = open()?;
    let runs = store.list(&Filter::default())?;
    let mut doomed: Vec<i64> = Vec::new();
    if let Some(t) = cutoff {
        doomed.extend(runs.iter().filter(|r| r.time_unix_s < t).map(|r| r.id));
    }
    if let Some(n) = keep {
        let mut groups: std::collections::BTreeMap<(&str, &str), Vec<i64>> = Default::default();
        for r in &runs {
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
    if dry_run {
        return output::print_text(&format!(
            "would delete {} run(s): {}\n",
            doomed.len(),
            doomed
                .iter()
                .map(|i| format!("@{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    let n = store.delete(&doomed)?;
    output::status(quiet, &format!("deleted {n} run(s)"));
    Ok(())
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
