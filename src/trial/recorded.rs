//! A stored trial found again: which `cpulab try` result in a list (the history's `try` runs)
//! tried the settings of a `cpulab try` line, so `cpulab remedy` can show what a remedy measured
//! on this host. Matching is on the settings themselves (`haltpoll.guest_halt_poll_ns=200000`,
//! `tuned:latency-performance`), never on words. Pure.

use super::TrialReport;
use serde_json::Value;

/// The words of a printed `cpulab try` line that name changes: `cpulab try` itself, `--each`
/// and `--detect PCT` (the goal comes from the finding) left out.
pub fn change_words(line: &str) -> (Vec<String>, bool) {
    let words = shell_words::split(line).unwrap_or_default();
    let each = words.iter().any(|w| w == "--each");
    let mut args = Vec::new();
    let mut it = words.into_iter().skip(2);
    while let Some(w) = it.next() {
        match w.as_str() {
            "--each" => {}
            "--detect" => {
                it.next();
            }
            _ if w.starts_with("--detect=") => {}
            _ => args.push(w),
        }
    }
    (args, each)
}

/// The settings a `cpulab try` line asks for, sorted; `None` for a line that is not one or
/// holds a placeholder (`pid:<server pid>`) the user fills in.
pub fn settings_of(try_command: &str) -> Option<Vec<String>> {
    let words = shell_words::split(try_command).ok()?;
    if words.get(..2)? != ["cpulab", "try"] || try_command.contains('<') {
        return None;
    }
    let (mut s, _) = change_words(try_command);
    s.sort();
    s.dedup();
    (!s.is_empty()).then_some(s)
}

/// The settings a trial tried, two ways: as typed (a profile by its name, each setting as
/// `NAME=VALUE`) and as applied (`trial.settings`, a profile's items one by one).
fn tried_settings(r: &TrialReport) -> [Vec<String>; 2] {
    let mut typed: Vec<String> = r
        .changes
        .iter()
        .map(|c| {
            c.from
                .clone()
                .unwrap_or_else(|| format!("{}={}", c.setting, c.value))
        })
        .collect();
    let mut applied = r.trial.settings.clone();
    for s in [&mut typed, &mut applied] {
        s.sort();
        s.dedup();
    }
    [typed, applied]
}

/// One stored `try` result: its run id, when it ran, its document.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub run: i64,
    pub time_unix_s: i64,
    pub document: Value,
}

/// The newest of `stored` that tried exactly the settings of `try_command`, read back as a
/// report; a document that does not read as one (another kind, an older schema) is skipped.
pub fn newest<'a>(try_command: &str, stored: &'a [Stored]) -> Option<(&'a Stored, TrialReport)> {
    let wanted = settings_of(try_command)?;
    let mut by_time: Vec<&Stored> = stored.iter().collect();
    by_time.sort_by_key(|s| std::cmp::Reverse((s.time_unix_s, s.run)));
    by_time.into_iter().find_map(|s| {
        let report = serde_json::from_value::<TrialReport>(s.document.clone()).ok()?;
        tried_settings(&report)
            .contains(&wanted)
            .then_some((s, report))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(run: i64, time: i64) -> Stored {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/try-rate.json");
        Stored {
            run,
            time_unix_s: time,
            document: serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap(),
        }
    }

    #[test]
    fn a_try_line_is_its_sorted_settings_and_a_placeholder_is_none() {
        assert_eq!(
            settings_of("cpulab try b=1 a=2 --each").unwrap(),
            ["a=2", "b=1"]
        );
        assert_eq!(settings_of("cpulab try pid:<server pid>.affinity=0"), None);
        assert_eq!(settings_of("cpulab doctor"), None);
        assert_eq!(settings_of("cpulab try --each"), None);
    }

    #[test]
    fn the_newest_trial_of_exactly_the_same_settings_is_found() {
        let line = "cpulab try haltpoll.guest_halt_poll_ns=200000";
        let mut other = stored(9, 1_900_000_000);
        other.document["changes"][0]["value"] = Value::from("100000");
        other.document["trial"]["settings"][0] = Value::from("haltpoll.guest_halt_poll_ns=100000");
        let mut not_a_trial = stored(10, 1_950_000_000);
        not_a_trial.document = serde_json::json!({"kind": "doctor"});
        let all = [
            stored(3, 1_700_000_000),
            stored(7, 1_800_000_000),
            // Newer, but another value: not this line's trial.
            other,
            not_a_trial,
        ];
        let (s, report) = newest(line, &all).expect("a trial of the line");
        assert_eq!(s.run, 7);
        assert_eq!(report.changes[0].value, "200000");
        assert!(newest("cpulab try cpufreq.governor=performance", &all).is_none());
        assert!(newest(&format!("{line} cpufreq.governor=performance"), &all).is_none());
        // A profile is found by its name as well as by its items.
        let mut profile = stored(11, 1_960_000_000);
        profile.document["changes"][0]["from"] = Value::from("tuned:latency-performance");
        let all = [profile];
        assert_eq!(
            newest("cpulab try tuned:latency-performance --each", &all).map(|(s, _)| s.run),
            Some(11)
        );
        assert_eq!(newest(line, &all).map(|(s, _)| s.run), Some(11));
    }

    /// The line the doctor prints carries `--detect`; its trial under `doctor --try` reads only
    /// the changes from it (the goal is the finding's), and `--each` still counts.
    #[test]
    fn a_printed_try_line_gives_its_changes_without_the_target() {
        let (args, each) =
            change_words("cpulab try pid:12.affinity=0 pid:13.affinity=0 --detect 45 --each");
        assert_eq!(args, ["pid:12.affinity=0", "pid:13.affinity=0"]);
        assert!(each);
        let (args, each) = change_words("cpulab try --detect=8 haltpoll.guest_halt_poll_ns=0");
        assert_eq!(args, ["haltpoll.guest_halt_poll_ns=0"]);
        assert!(!each);
        // A remedy's trial found in the history by its settings, not by its target.
        assert_eq!(
            settings_of("cpulab try b=1 a=2 --detect 45").unwrap(),
            ["a=2", "b=1"]
        );
    }
}
