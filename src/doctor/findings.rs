//! A finding: a measured effect, the evidence for its mechanism, and what to do about it.
//!
//! The shape follows how the field notes' authors reported their conclusions once they had them:
//! *what* is slow and by how much (the magnitude, measured, with its interval), *why* (the
//! counters and probe facts that point to the mechanism, each named with where it came from),
//! *what to do* (exact commands, each with what it buys and what it costs), and *how sure* we
//! are. A finding never rests on a configuration fact alone: the magnitude is always a measured
//! difference that is larger than its noise.

pub use super::change::{Change, Workload};
use super::figures;
pub use super::figures::{Quantity, Side, Versus};
use serde::{Deserialize, Serialize};

/// How much the effect matters, from its measured size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Under 1.5x, or a cost that a tuned workload may never notice.
    Low,
    /// 1.5x to 3x.
    Medium,
    /// 3x or more: the kind of effect the field notes were about.
    High,
}

impl Severity {
    /// Severity of a slowdown ratio (>= 1).
    pub fn of_ratio(ratio: f64) -> Self {
        if ratio >= 3.0 {
            Self::High
        } else if ratio >= 1.5 {
            Self::Medium
        } else {
            Self::Low
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// How sure the doctor is of the mechanism (the effect itself is always beyond noise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Confidence {
    /// The effect is measured but the counters do not single out a mechanism.
    Low,
    /// One independent piece of evidence points to the mechanism.
    Medium,
    /// Two or more independent pieces of evidence agree.
    High,
}

impl Confidence {
    /// From the number of independent pieces of mechanism evidence that agree.
    pub fn from_agreeing(n: usize) -> Self {
        match n {
            0 => Self::Low,
            1 => Self::Medium,
            _ => Self::High,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

/// The measured size of the effect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Magnitude {
    /// In words: "cross-vCPU wakeups cost 8.4x a same-vCPU one (42.1 us vs 5.0 us)".
    pub text: String,
    /// The worse figure over the better one (>= 1), when the effect is a ratio.
    pub ratio: Option<f64>,
    /// The worse and the better figure, in `unit`.
    pub worse: Option<f64>,
    pub better: Option<f64>,
    /// Unit of `worse` and `better` (`ns`, `per_s`, `pct`, `share`).
    pub unit: String,
}

/// Largest and smallest change a finding asks its trial to be able to see: above half, a trial
/// that could only see ±90% would pass a remedy that did half what was predicted; below 2%, the
/// rounds it takes outgrow any time limit on a shared machine.
pub const TRIAL_TARGET: (f64, f64) = (0.02, 0.5);

impl Magnitude {
    /// The change the effect predicts of the worse figure if a remedy removes it: brought down
    /// to the better one, it changes by 1 - 1/ratio of itself. `None` without a ratio above 1.
    pub fn predicted_change(&self) -> Option<f64> {
        self.ratio
            .filter(|r| r.is_finite() && *r > 1.0)
            .map(|r| 1.0 - 1.0 / r)
    }

    /// The smallest change a trial of this finding's remedy should be able to see
    /// (`cpulab try --detect`), as a fraction: the predicted change held to [`TRIAL_TARGET`].
    pub fn trial_target(&self) -> Option<f64> {
        self.predicted_change()
            .map(|p| p.clamp(TRIAL_TARGET.0, TRIAL_TARGET.1))
    }
}

/// What a piece of evidence rests on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceKind {
    /// Measured by this run.
    Measured,
    /// Read from the machine's configuration.
    #[default]
    Probe,
    /// Quoted from a publication (docs/field-notes.md); never measured here.
    Published,
    /// Computed from a stated model.
    Model,
}

impl SourceKind {
    /// From the `measured:` / `probe:` / `published:` / `model:` prefix of a source text.
    pub fn of(source: &str) -> Self {
        if source.starts_with("measured") {
            Self::Measured
        } else if source.starts_with("published") {
            Self::Published
        } else if source.starts_with("model") {
            Self::Model
        } else {
            Self::Probe
        }
    }
}

/// A value for evidence: a figure as data (a quantity or a versus), or text for what is not a
/// figure (a CPU list, a driver's name). Rules build these; only the reporters
/// ([`super::figures`]) turn a figure into words.
#[derive(Clone, Debug, PartialEq)]
pub struct Datum {
    pub text: String,
    pub quantity: Option<Quantity>,
    pub versus: Option<Versus>,
    pub note: Option<String>,
}

impl std::fmt::Display for Datum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.quantity, &self.versus) {
            (Some(q), _) => f.write_str(&figures::quantity(q)),
            (None, Some(v)) => f.write_str(&figures::versus(v)),
            (None, None) => f.write_str(&self.text),
        }
    }
}

impl From<String> for Datum {
    fn from(text: String) -> Self {
        Self {
            text,
            quantity: None,
            versus: None,
            note: None,
        }
    }
}

impl From<&str> for Datum {
    fn from(text: &str) -> Self {
        text.to_string().into()
    }
}

impl From<&String> for Datum {
    fn from(text: &String) -> Self {
        text.clone().into()
    }
}

impl Datum {
    fn of_quantity(q: Quantity) -> Self {
        Self {
            text: String::new(),
            quantity: Some(q),
            versus: None,
            note: None,
        }
    }

    /// A plain figure with its unit.
    pub fn number(value: f64, unit: &str) -> Self {
        Self::of_quantity(Quantity {
            value,
            unit: unit.to_string(),
            ci95: None,
            n: None,
            of: None,
            range: None,
        })
    }

    /// A share (0..1) as a percentage, `unit` `pct`: "37%".
    pub fn share(share: f64) -> Self {
        Self::number(share * 100.0, "pct")
    }

    /// Two values of one figure: `(label, value)` for each side.
    pub fn versus(unit: &str, a: (&str, f64), b: (&str, f64)) -> Self {
        Self {
            text: String::new(),
            quantity: None,
            versus: Some(Versus {
                unit: unit.to_string(),
                a: Side {
                    label: a.0.to_string(),
                    value: a.1,
                },
                b: Side {
                    label: b.0.to_string(),
                    value: b.1,
                },
            }),
            note: None,
        }
    }

    /// A mean with its interval.
    pub fn mean_ci(m: &crate::stats::MeanCi, unit: &str) -> Self {
        Self::of_quantity(Quantity {
            value: m.mean,
            unit: unit.to_string(),
            ci95: Some([m.ci95_low, m.ci95_high]),
            n: Some(m.n),
            of: None,
            range: None,
        })
    }

    /// The figure is a part of `total` (same unit).
    pub fn of(mut self, total: f64) -> Self {
        if let Some(q) = &mut self.quantity {
            q.of = Some(total);
        }
        self
    }

    /// The lowest and highest run behind the mean.
    pub fn range(mut self, lo: f64, hi: f64) -> Self {
        if let Some(q) = &mut self.quantity {
            q.range = Some([lo, hi]);
        }
        self
    }

    /// Words that qualify the figure without being one ("off", "the model agrees").
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// One fact that supports the finding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What it is: "idle entries per round trip (cross-CPU)".
    pub label: String,
    /// Its value in words. For a figure this is derived from `quantity` or `versus` (the
    /// reporters render those, scripts should read them); for evidence that is not a figure
    /// (a CPU list, a driver's name) it is the value itself.
    pub value: String,
    /// The same value as data, when it is a figure: scripts read this, not the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<Quantity>,
    /// Two values side by side as data, when the evidence compares two conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus: Option<Versus>,
    /// Words that qualify the figure without being one ("off", "the measurement agrees").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Where it came from: `measured: pingpong pipe 0:1`, `probe: /sys/module/haltpoll/...`.
    pub source: String,
    /// What kind of source: measured here, probed, published, or a model.
    #[serde(default)]
    pub source_kind: SourceKind,
}

/// Where a remedy must be applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Site {
    /// On this machine (inside the guest, when it is one).
    #[default]
    ThisMachine,
    /// On the hypervisor host: out of the guest's reach.
    Host,
}

/// One thing to do about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Remedy {
    /// The exact command or setting.
    pub command: String,
    /// What it changes, and by how much where cpulab measured it.
    pub effect: String,
    /// What it costs, and when not to do it.
    pub cost_caveat: String,
    /// Where it must be done.
    #[serde(default)]
    pub site: Site,
    /// Who can do it (`root in this guest`, `the host's administrator; not a cloud customer`);
    /// empty when anyone who runs the workload can.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub who: String,
    /// When the remedy is a setting: the `cpulab try ...` line that measures it here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub try_command: Option<String>,
    /// What `cpulab doctor --try` measured of it ("measured here: 48.2 us -> 5.9 us, ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    /// The figures behind `measured`, as numbers: the headline comparison first, then each cost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measured_figures: Vec<TriedFigure>,
    /// What it changes, as data `cpulab remedy` deploys: empty when it is not a setting a file
    /// can carry (measure again, resize the VM); absent (`None`) in results written before
    /// cpulab recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<Change>>,
}

/// One figure a `doctor --try` trial compared, as data: baseline and changed rounds' means with
/// their intervals, the ratio changed / baseline, and the verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TriedFigure {
    /// What was measured ("pipe round trip, shared-llc (0:1)").
    pub label: String,
    /// Its unit, as `try --json` names it.
    pub unit: crate::experiment::Unit,
    /// Mean and 95% CI over the baseline rounds.
    pub baseline: crate::stats::MeanCi,
    /// Mean and 95% CI over the changed rounds.
    pub changed: crate::stats::MeanCi,
    /// Changed / baseline with its 95% CI, where the baseline is not zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<crate::stats::MeanCi>,
    /// `better`, `worse`, `different` or `no-difference`.
    pub verdict: String,
    /// The cost side of the setting (CPU time spent polling), not its effect.
    #[serde(default)]
    pub cost: bool,
}

/// A measured effect, its cause and its remedies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable identifier (`cross-cpu-wakeup`), for scripts and for `compare`.
    pub id: String,
    pub title: String,
    pub severity: Severity,
    pub magnitude: Magnitude,
    pub evidence: Vec<Evidence>,
    /// How the effect arises, in two or three sentences.
    pub mechanism: String,
    pub remedies: Vec<Remedy>,
    pub confidence: Confidence,
    /// Set, with the reason, when the finding may not come out the same in the next run: its
    /// evidence is within noise of the rule's threshold, or the unpinned pair it rests on
    /// changed placement while it was measured (the text says `MAY NOT RECUR`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertain: Option<String>,
}

impl Evidence {
    /// What a reporter shows as the value: the typed figure in words when there is one (through
    /// [`figures`], the one formatter), else the text; a note qualifies either.
    pub fn in_words(&self) -> String {
        let base = match (&self.quantity, &self.versus) {
            (Some(q), _) => figures::quantity(q),
            (None, Some(v)) => figures::versus(v),
            (None, None) => return self.value.clone(),
        };
        match &self.note {
            Some(n) => format!("{base} ({n})"),
            None => base,
        }
    }

    pub fn new(
        label: impl Into<String>,
        value: impl Into<Datum>,
        source: impl Into<String>,
    ) -> Self {
        let d: Datum = value.into();
        let source = source.into();
        let mut e = Self {
            label: label.into(),
            value: d.text,
            quantity: d.quantity,
            versus: d.versus,
            note: d.note,
            source_kind: SourceKind::of(&source),
            source,
        };
        if e.quantity.is_some() || e.versus.is_some() {
            e.value = e.in_words();
        }
        e
    }
}

impl Remedy {
    pub fn new(
        command: impl Into<String>,
        effect: impl Into<String>,
        cost_caveat: impl Into<String>,
    ) -> Self {
        Self {
            command: command.into(),
            effect: effect.into(),
            cost_caveat: cost_caveat.into(),
            site: Site::ThisMachine,
            who: String::new(),
            try_command: None,
            measured: None,
            measured_figures: Vec::new(),
            changes: Some(Vec::new()),
        }
    }

    /// What the remedy changes, as data (see [`Change`]).
    pub fn changing(mut self, change: Change) -> Self {
        self.changes.get_or_insert_with(Vec::new).push(change);
        self
    }

    /// Done on this machine by `who`.
    pub fn by(mut self, who: impl Into<String>) -> Self {
        self.who = who.into();
        self
    }

    /// Done on the hypervisor host by `who`.
    pub fn on_host(mut self, who: impl Into<String>) -> Self {
        self.site = Site::Host;
        self.who = who.into();
        self
    }

    /// "on the host, by X" / "in this guest, by Y", for reporters.
    pub fn where_who(&self, guest: bool) -> String {
        let place = match (self.site, guest) {
            (Site::Host, _) => "on the hypervisor host",
            (Site::ThisMachine, true) => "in this guest",
            (Site::ThisMachine, false) => "on this machine",
        };
        if self.who.is_empty() {
            place.to_string()
        } else {
            format!("{place}, by {}", self.who)
        }
    }

    /// The remedy is a setting `cpulab try` can measure: `line` is the exact command.
    pub fn with_try(mut self, line: impl Into<String>) -> Self {
        self.try_command = Some(line.into());
        self
    }
}

/// Most important first: severity, then the size of the effect.
/// Every `cpulab try` line of a finding's remedies asks for the change the finding predicts
/// (`--detect PCT`), so a trial run from the printed line can see what the finding promises or
/// says it could not; a line that already names a target keeps it.
pub fn aim_trials(findings: &mut [Finding]) {
    for f in findings.iter_mut() {
        let Some(t) = f.magnitude.trial_target() else {
            continue;
        };
        for line in f.remedies.iter_mut().filter_map(|r| r.try_command.as_mut()) {
            if !line.split_whitespace().any(|w| w == "--detect") {
                *line = format!("{line} --detect {:.0}", t * 100.0);
            }
        }
    }
}

pub fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        b.severity.cmp(&a.severity).then(
            b.magnitude
                .ratio
                .unwrap_or(1.0)
                .total_cmp(&a.magnitude.ratio.unwrap_or(1.0)),
        )
    });
}

#[cfg(test)]
mod versus_tests {
    use super::*;

    #[test]
    fn a_comparison_keeps_both_numbers_as_data() {
        let e = Evidence::new(
            "idle entries per round trip",
            Datum::versus("per_round_trip", ("idle", 1.94), ("busy", 0.0)),
            "measured: pingpong",
        );
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["versus"]["a"]["value"], 1.94);
        assert_eq!(v["versus"]["b"]["label"], "busy");
        assert_eq!(v["versus"]["unit"], "per_round_trip");
        assert_eq!(v["source_kind"], "measured");
        assert!(v.get("quantity").is_none());
        // The words are derived from the numbers, never written beside them.
        assert_eq!(v["value"], "1.94 (idle) vs 0.00 (busy)");
        let back: Evidence = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
        // Older documents without the field still read.
        let old = serde_json::json!({"label": "x", "value": "1", "source": "probe: y"});
        assert!(
            serde_json::from_value::<Evidence>(old)
                .unwrap()
                .versus
                .is_none()
        );
        assert_eq!(Datum::share(0.37).quantity.unwrap().value, 37.0);
    }
}
