//! Text, HTML and the finding-style summary of a trial.

use super::compare::{Comparison, Verdict};
use super::{TrialReport, TrialRun};
use crate::experiment::Unit;
use crate::output::{Style, fmt_ns};
use crate::units::grouped;
use maud::html;

/// Decimals that show an interval's half-width to two significant digits (at most 4), so a
/// mean is printed no finer than its noise allows.
fn decimals_for(half_width: f64) -> usize {
    if !(half_width.is_finite() && half_width > 0.0) {
        return 1;
    }
    (1 - half_width.log10().floor() as i64).clamp(0, 4) as usize
}

/// A value in its unit with `decimals`, the whole part grouped in thousands: `518,946.8/s`.
fn fmt_with(unit: Unit, v: f64, decimals: usize) -> String {
    match unit {
        Unit::Nanoseconds => fmt_ns(v),
        Unit::Share => format!("{}%", grouped(v * 100.0, decimals)),
        Unit::PerSecond | Unit::PerOperation | Unit::CpuSecondsPerSecond | Unit::Seconds => {
            let sep = if unit == Unit::PerSecond || unit == Unit::PerOperation {
                ""
            } else {
                " "
            };
            format!("{}{sep}{}", grouped(v, decimals), unit.suffix())
        }
        Unit::Ratio => format!("{}x", grouped(v, decimals)),
        u if u.suffix().is_empty() => grouped(v, decimals),
        u => format!("{} {}", grouped(v, decimals), u.suffix()),
    }
}

/// Decimals a lone value of `unit` is read at; without a unit's habit, four significant
/// digits (`519,680`, `12.35`, `0.0031`).
fn default_decimals(unit: Unit, v: f64) -> usize {
    match unit {
        Unit::CpuSecondsPerSecond | Unit::Seconds | Unit::Ratio => 3,
        Unit::Megahertz | Unit::Cycles | Unit::Bytes => 0,
        Unit::PerSecond | Unit::Share | Unit::Count if v.abs() < 100.0 => 1,
        Unit::PerSecond | Unit::Count => 0,
        Unit::Share => 1,
        _ if v == 0.0 || !v.is_finite() => 1,
        _ => (3 - v.abs().log10().floor() as i64).clamp(0, 4) as usize,
    }
}

/// A value in its unit, for people, at the precision its unit is usually read in.
pub fn fmt(unit: Unit, v: f64) -> String {
    fmt_with(unit, v, default_decimals(unit, v))
}

/// A mean with its interval, both at the precision the interval allows: `518,947/s ±3,210/s`.
fn ci(c: &Comparison, m: &crate::stats::MeanCi) -> String {
    if m.n >= 2 {
        let scale = if c.unit == Unit::Share { 100.0 } else { 1.0 };
        let d = if m.ci95_half_width > 0.0 {
            decimals_for(m.ci95_half_width * scale)
        } else {
            default_decimals(c.unit, m.mean)
        };
        format!(
            "{} ±{}",
            fmt_with(c.unit, m.mean, d),
            fmt_with(c.unit, m.ci95_half_width, d)
        )
    } else {
        fmt(c.unit, m.mean)
    }
}

fn ratio_text(c: &Comparison) -> String {
    match &c.ratio {
        Some(r) => format!("{:.3}x [{:.3}, {:.3}]", r.mean, r.ci95_low, r.ci95_high),
        None => "n/a".into(),
    }
}

/// A relative size for people: `±58%`, `±4.2%`.
fn pct(d: f64) -> String {
    grouped(d * 100.0, if d < 0.1 { 1 } else { 0 })
}

/// What the run could have seen, against its target when it had one.
fn could_have_seen(c: &Comparison) -> String {
    match (c.detectable_rel, c.detectable, c.target_rel) {
        (Some(d), _, Some(t)) => format!("could have seen ±{}%, target ±{}%", pct(d), pct(t)),
        (Some(d), _, None) => format!("could have seen ±{}%", pct(d)),
        (None, Some(d), _) => format!("could have seen ±{}", fmt(c.unit, d)),
        _ => String::new(),
    }
}

/// Seconds for people: `45 s`, `12 min`, `2.5 h`.
fn fmt_duration(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// The verdict with what backs it: the p-value of a difference, what a "no difference" could
/// have seen, and what an inconclusive figure would need.
pub fn verdict_text(c: &Comparison) -> String {
    match c.verdict {
        Verdict::NoDifference => match could_have_seen(c) {
            w if w.is_empty() => "no difference beyond noise".into(),
            w => format!("no difference beyond noise ({w})"),
        },
        Verdict::Inconclusive => {
            let need = match (c.rounds_needed, c.more_time_s) {
                (Some(n), Some(t)) => {
                    format!("needs about {n} rounds a side (~{} more)", fmt_duration(t))
                }
                _ => format!(
                    "needs more than {} rounds a side",
                    super::precision::MAX_ROUNDS
                ),
            };
            format!(
                "inconclusive: could only have seen ±{}% (target ±{}%); {need}",
                c.detectable_rel.map_or("?".into(), pct),
                c.target_rel.map_or("?".into(), pct)
            )
        }
        v => match c.p_value {
            Some(p) => format!("{} ({})", v.as_str(), crate::compare::text::fmt_p(p)),
            None => v.as_str().into(),
        },
    }
}

fn is_cost(c: &Comparison) -> bool {
    c.is_cost()
}

/// The headline: the comparison that moved most beyond noise among the non-cost figures.
fn headline(run: &TrialRun) -> Option<&Comparison> {
    let moved =
        |c: &&Comparison| !matches!(c.verdict, Verdict::NoDifference | Verdict::Inconclusive);
    let size = |c: &Comparison| c.ratio.as_ref().map_or(0.0, |r| r.mean.ln().abs());
    let p = |c: &Comparison| c.p_value.unwrap_or(1.0);
    run.comparisons
        .iter()
        .filter(|c| !is_cost(c))
        .filter(moved)
        .max_by(|a, b| size(a).total_cmp(&size(b)))
        .or_else(|| {
            run.comparisons
                .iter()
                .filter(|c| !is_cost(c))
                .min_by(|a, b| p(a).total_cmp(&p(b)))
        })
}

/// Whether the rounds reached the target, and if not, what more rounds would take.
pub fn precision_line(run: &TrialRun) -> Option<String> {
    use super::precision::Stopped;
    let o = run.precision.as_ref()?;
    let target = format!("±{}% ({})", pct(o.goal.target_rel), o.goal.target_from);
    let judged = run
        .comparisons
        .iter()
        .filter(|c| c.target_rel.is_some())
        .count();
    let inconclusive: Vec<&Comparison> = run
        .comparisons
        .iter()
        .filter(|c| c.verdict == Verdict::Inconclusive)
        .collect();
    let ran = format!(
        "{} rounds a side in {}",
        o.rounds_per_side,
        fmt_duration(o.elapsed_s)
    );
    Some(match (o.stopped, inconclusive.is_empty()) {
        (Stopped::Reached, _) => format!(
            "Precision: after {ran}, every figure could have seen a change of {target}; a \
             \"no difference\" here is a verdict."
        ),
        (Stopped::TimeLimit, true) => format!(
            "Precision: the time limit ({}) stopped adding rounds after {ran}, short of {target} \
             for some figures; each of them differed beyond noise all the same.",
            fmt_duration(o.goal.max_time_s)
        ),
        (Stopped::TimeLimit, false) => {
            let most = inconclusive.iter().map(|c| c.rounds_needed).max().flatten();
            let more = inconclusive
                .iter()
                .filter_map(|c| c.more_time_s)
                .fold(0.0, f64::max);
            let need = match (most, inconclusive.iter().all(|c| c.rounds_needed.is_some())) {
                (Some(n), true) => format!(
                    "about {n} rounds a side (~{} more) would see it, from the spread so far",
                    fmt_duration(more)
                ),
                _ => format!(
                    "more than {} rounds a side would be needed at this spread",
                    super::precision::MAX_ROUNDS
                ),
            };
            format!(
                "Inconclusive for {} of {judged} figures: the time limit ({}) ended the trial \
                 after {ran}, before they could have seen a change of {target}; {need}. Raise \
                 --max-time, or try again when the machine is quieter.",
                inconclusive.len(),
                fmt_duration(o.goal.max_time_s)
            )
        }
    })
}

/// One finding-style paragraph per line: what changed, by how much, at what cost, how to keep it.
pub fn summary(r: &TrialReport) -> Vec<String> {
    let mut out = Vec::new();
    let what: Vec<String> = r
        .changes
        .iter()
        .map(|c| format!("{} {} -> {}", c.setting, c.before, c.value))
        .collect();
    let n = r.trial.comparisons.iter().filter(|c| !is_cost(c)).count();
    let better = r
        .trial
        .comparisons
        .iter()
        .filter(|c| !is_cost(c) && c.verdict == Verdict::Better)
        .count();
    let worse = r
        .trial
        .comparisons
        .iter()
        .filter(|c| !is_cost(c) && c.verdict == Verdict::Worse)
        .count();
    let mut s = format!(
        "Changing {} ({} rounds each side, interleaved): {better} of {n} figures better, {worse} worse",
        what.join(", "),
        r.rounds_per_side
    );
    if let Some(h) = headline(&r.trial) {
        s += &format!(
            "; {}: {} -> {} ({}, {})",
            h.label,
            ci(h, &h.baseline),
            ci(h, &h.changed),
            ratio_text(h),
            verdict_text(h)
        );
    }
    s += ".";
    out.push(s);
    out.extend(precision_line(&r.trial));
    let costs: Vec<String> = r
        .trial
        .comparisons
        .iter()
        .filter(|c| is_cost(c))
        .map(|c| {
            format!(
                "{}: {} -> {}",
                c.label,
                fmt(c.unit, c.baseline.mean),
                fmt(c.unit, c.changed.mean)
            )
        })
        .collect();
    out.push(if costs.is_empty() {
        "Cost: not measurable for these settings.".into()
    } else {
        format!("Cost: {}.", costs.join("; "))
    });
    if r.conditions.noisy {
        out.push("Other load was seen during some rounds: the figures may be spoiled (interleaving puts it on both sides, but it widens the intervals).".into());
    }
    if r.restore.kept {
        out.push(format!(
            "Kept on purpose (--keep); undo with: {}",
            r.restore.undo.join("; ")
        ));
    } else if r.restore.restored {
        out.push("Restored: every original value written back and read back as journalled.".into());
    }
    for c in &r.changes {
        out.push(format!(
            "To make {}={} permanent ({}{}): {}",
            c.setting,
            c.value,
            c.permanent.form,
            c.permanent
                .file
                .as_ref()
                .map(|f| format!(", {f}"))
                .unwrap_or_default(),
            c.permanent.text.trim_end().replace('\n', " | ")
        ));
    }
    out
}

fn table(run: &TrialRun) -> String {
    let mut s = String::new();
    for c in &run.comparisons {
        s += &format!(
            "  {}\n    baseline {}   changed {}   ratio {}   {}\n",
            c.label,
            ci(c, &c.baseline),
            ci(c, &c.changed),
            ratio_text(c),
            verdict_text(c)
        );
    }
    s
}

pub fn text(r: &TrialReport, style: &Style) -> String {
    let mut s = style.bold("cpulab try") + "\n";
    for c in &r.changes {
        s += &format!(
            "  {} {} -> {}{}\n",
            c.setting,
            c.before,
            c.value,
            c.from
                .as_ref()
                .map(|f| format!("  (from {f})"))
                .unwrap_or_default()
        );
    }
    s += &format!(
        "  measured: {}; {} rounds per side, ABAB...{}\n\n",
        r.measure,
        r.rounds_per_side,
        r.trial
            .precision
            .as_ref()
            .map(|o| format!(
                " (at least {}, then more until a change of ±{}% could be seen, within {})",
                o.goal.min_rounds,
                pct(o.goal.target_rel),
                fmt_duration(o.goal.max_time_s)
            ))
            .unwrap_or_default()
    );
    s += &(style.bold("Figures (95% CI over rounds; ratio = changed / baseline)") + "\n");
    s += &table(&r.trial);
    for item in &r.items {
        s += &format!(
            "\n{}\n",
            style.bold(&format!("{} alone", item.settings.join(", ")))
        );
        s += &table(item);
    }
    if !r.skipped.is_empty() {
        s += &format!("\n{}\n", style.bold("Not tried"));
        for k in &r.skipped {
            s += &format!("  {k}\n");
        }
    }
    s += &format!("\n{}\n", style.bold("Summary"));
    for l in &r.summary {
        s += &format!("  {l}\n");
    }
    for n in r.conditions.notes.iter().chain(&r.restore.notes) {
        s += &format!("  note: {n}\n");
    }
    s
}

pub fn html(r: &TrialReport) -> String {
    let mut runs = vec![("All changes".to_string(), &r.trial)];
    runs.extend(
        r.items
            .iter()
            .map(|i| (format!("{} alone", i.settings.join(", ")), i)),
    );
    let header = html! {
        h1 { "cpulab try" }
        p { (r.measure) }
    };
    let body = html! {
        section {
            h2 { "Settings" }
            table {
                tr { th { "setting" } th { "before" } th { "tried" } th { "exact writes" } }
                @for c in &r.changes {
                    tr {
                        td { (c.setting) }
                        td { (c.before) }
                        td { (c.value) }
                        td { code { (c.writes.join("; ")) } }
                    }
                }
            }
        }
        @for (title, run) in &runs {
            section {
                h2 { (title) }
                p { (r.rounds_per_side) " rounds per side, interleaved; 95% CI over round means." }
                table {
                    tr {
                        th { "figure" } th { "baseline" } th { "changed" } th { "ratio" }
                        th { "verdict" }
                    }
                    @for c in &run.comparisons {
                        tr {
                            td { (c.label) }
                            td.num { (ci(c, &c.baseline)) }
                            td.num { (ci(c, &c.changed)) }
                            td.num { (ratio_text(c)) }
                            td { (verdict_text(c)) }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Summary" }
            @for l in &r.summary {
                p { (l) }
            }
        }
    };
    crate::report::html::page("cpulab try", header, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored try of a command printing a request rate near 518,000/s: the screen shows it
    /// grouped at the precision of its interval, not `519441.7000 ±1026.1827`.
    #[test]
    fn a_stored_trial_prints_its_rate_grouped() {
        let r: TrialReport =
            serde_json::from_str(include_str!("../../tests/fixtures/try-rate.json")).unwrap();
        let t = text(&r, &Style { on: false });
        assert!(t.contains("baseline 519,442 ±1,026"), "{t}");
        assert!(!t.contains("519441.7"), "{t}");
        let page = html(&r);
        assert!(page.contains("519,442 ±1,026"), "{page}");
    }

    #[test]
    fn rates_are_grouped_at_the_precision_of_their_noise() {
        assert_eq!(fmt(Unit::PerSecond, 518_946.8), "518,947/s");
        assert_eq!(fmt(Unit::PerSecond, 12.34), "12.3/s");
        assert_eq!(
            fmt_with(Unit::PerSecond, 518_946.8, decimals_for(3_210.0)),
            "518,947/s"
        );
        assert_eq!(decimals_for(3_210.0), 0);
        assert_eq!(decimals_for(0.042), 3);
        assert_eq!(fmt_with(Unit::Share, 0.4567, decimals_for(1.2)), "45.7%");
        assert_eq!(fmt(Unit::CpuSecondsPerSecond, 0.196), "0.196 CPU-s/s");
        assert_eq!(fmt(Unit::Other, 519_680.2), "519,680");
        assert_eq!(fmt(Unit::Other, 0.00312), "0.0031");
    }
    use crate::experiment::{Direction, Figure};
    use crate::trial::{Round, Side};

    /// Interleaved rounds, baseline first, each with one round-trip figure of these values.
    fn rounds_of(vals: &[f64]) -> Vec<Round> {
        vals.iter()
            .enumerate()
            .map(|(index, v)| Round {
                index,
                side: if index % 2 == 0 {
                    Side::Baseline
                } else {
                    Side::Changed
                },
                started_s: index as f64,
                figures: vec![Figure::single(
                    "rtt_ns",
                    "rtt",
                    Unit::Nanoseconds,
                    Direction::LowerIsBetter,
                    *v,
                )],
                noisy: false,
                load_before: None,
            })
            .collect()
    }

    #[test]
    fn a_tiny_p_value_prints_as_a_bound_not_as_zero() {
        let vals = [42_000.0, 7_100.0, 43_500.0, 7_000.0, 41_800.0, 6_900.0];
        let rounds = rounds_of(&vals);
        let c = &super::super::compare::compare_rounds(&rounds)[0];
        assert!(c.p_value.unwrap() < 0.001, "the JSON keeps the number");
        let v = verdict_text(c);
        assert!(v.contains("p<0.001") && !v.contains("p=0.000"), "{v}");
    }

    #[test]
    fn a_verdict_says_whether_it_could_have_seen_the_target() {
        let vals = [100.0, 101.0, 99.0, 100.5, 100.0, 99.5];
        let rounds = rounds_of(&vals);
        let mut c = super::super::compare::compare_rounds(&rounds).remove(0);
        let goal = crate::trial::precision::Goal::default_with(3);
        let mut fine = vec![c.clone()];
        crate::trial::precision::judge(&mut fine, &goal, 3, 4.0);
        let v = verdict_text(&fine[0]);
        assert!(
            v.starts_with("no difference beyond noise (could have seen ±"),
            "{v}"
        );
        assert!(v.ends_with("target ±10%)"), "{v}");
        // The same figure asked to see 0.1%: inconclusive, with what it would take.
        let tight = crate::trial::precision::Goal {
            target_rel: 0.001,
            ..goal
        };
        c.verdict = Verdict::NoDifference;
        let mut wide = vec![c];
        crate::trial::precision::judge(&mut wide, &tight, 3, 4.0);
        let v = verdict_text(&wide[0]);
        let n = wide[0].rounds_needed.unwrap();
        assert!(v.starts_with("inconclusive: could only have seen ±"), "{v}");
        assert!(v.contains("(target ±0.1%)"), "{v}");
        assert!(v.contains(&format!("needs about {n} rounds a side")), "{v}");
        assert_eq!(fmt_duration(45.0), "45 s");
        assert_eq!(fmt_duration(720.0), "12 min");
        assert_eq!(fmt_duration(9000.0), "2.5 h");
    }
}
