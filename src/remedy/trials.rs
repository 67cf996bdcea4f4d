//! What `cpulab try` measured of a remedy on this host, from the history.
//!
//! A remedy carries what `cpulab doctor --try` measured in that doctor run; a `cpulab try` run
//! on its own is recorded in the history instead (kind `try`). The command finds, for each
//! remedy's `cpulab try` line, the newest trial on this host of the same settings
//! (`trial::recorded`, matched on the settings, never on words) and hands the result in as
//! [`Trials`]; each deployment then shows it, or that none was recorded with the line that
//! measures it, or why the history was not read. Pure.

use crate::doctor::findings::TriedFigure;
use serde::Serialize;

/// What a trial on this host measured of one remedy, or why nothing is shown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TriedHere {
    /// The history run of the newest matching trial (`cpulab history show ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_unix_s: Option<i64>,
    /// Its headline figure then each cost, as `doctor --try` records them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<TriedFigure>,
    /// In words: the gain with its interval and date, or why there is none.
    pub text: String,
}

impl TriedHere {
    pub fn none(text: String) -> Self {
        Self {
            run: None,
            time_unix_s: None,
            figures: vec![],
            text,
        }
    }
}

/// This host's trials of the remedies' try lines, or why the history was not read.
#[derive(Clone, Debug, PartialEq)]
pub enum Trials {
    NotRead(String),
    /// The try lines a trial was found for, each with what it measured.
    Read(Vec<(String, TriedHere)>),
}

impl Default for Trials {
    fn default() -> Self {
        Self::NotRead("the history was not read".into())
    }
}

/// What `trials` holds for a remedy's try line.
pub fn tried(try_command: Option<&str>, trials: &Trials) -> TriedHere {
    let Some(line) = try_command else {
        return TriedHere::none(
            "not available, because this remedy has no `cpulab try` line (advice or a \
             measurement, not a setting to try)"
                .into(),
        );
    };
    if line.contains('<') {
        return TriedHere::none(format!(
            "not available, because its try line holds a placeholder to fill in first: {line}"
        ));
    }
    match trials {
        Trials::NotRead(why) => {
            TriedHere::none(format!("not read from the history, because {why}"))
        }
        Trials::Read(found) => found
            .iter()
            .find(|(l, _)| l == line)
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| {
                TriedHere::none(format!("no trial recorded on this host; run: {line}"))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remedy_shows_its_lines_trial_or_says_why_there_is_none() {
        let line = "cpulab try cpufreq.governor=performance";
        let mut found = TriedHere::none("measured here: ...".into());
        found.run = Some(4);
        let read = Trials::Read(vec![(line.to_string(), found.clone())]);
        assert_eq!(tried(Some(line), &read), found);
        let other = "cpulab try cpufreq.epp=performance";
        assert_eq!(
            tried(Some(other), &read).text,
            format!("no trial recorded on this host; run: {other}")
        );
        let off = tried(Some(line), &Trials::NotRead("the history is off".into()));
        assert_eq!(
            off.text,
            "not read from the history, because the history is off"
        );
        assert!(tried(None, &read).text.starts_with("not available"));
        let placeholder = tried(Some("cpulab try pid:<pid>.affinity=0"), &read);
        assert!(placeholder.text.contains("placeholder") && placeholder.run.is_none());
    }
}
