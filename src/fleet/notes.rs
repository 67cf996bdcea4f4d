//! Why figures are not available, each reason said once: a value that is missing shows as
//! `n/a [k]`, and reason k is printed once below the table, however many hosts and figures
//! share it (a fleet of exporters without the probe would otherwise repeat one sentence per
//! host). The JSON keeps the reason on every value. Pure.

use super::Reading;

/// The reasons referred to so far, numbered from 1 in order of first use.
#[derive(Debug, Default)]
pub struct Footnotes {
    pub reasons: Vec<String>,
}

impl Footnotes {
    /// The number of `why`, added at its first use.
    pub fn number(&mut self, why: &str) -> usize {
        match self.reasons.iter().position(|r| r == why) {
            Some(i) => i + 1,
            None => {
                self.reasons.push(why.to_string());
                self.reasons.len()
            }
        }
    }

    /// `shown` (the value as a cell shows it), or `n/a [k]` for a figure without one.
    pub fn cell(&mut self, r: &Reading, shown: String) -> String {
        match (&r.mean, &r.not_available) {
            (None, Some(why)) => format!("n/a [{}]", self.number(why)),
            _ => shown,
        }
    }

    /// `[k] reason`, one per reason, in number order.
    pub fn lines(&self) -> Vec<String> {
        self.reasons
            .iter()
            .enumerate()
            .map(|(i, why)| format!("[{}] {why}", i + 1))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_reason_gets_one_number_and_a_value_none() {
        let mut f = Footnotes::default();
        let probe = Reading::missing("the probe does not run");
        assert_eq!(f.cell(&probe, "x".into()), "n/a [1]");
        assert_eq!(f.cell(&Reading::missing("no idle"), "x".into()), "n/a [2]");
        assert_eq!(f.cell(&probe, "x".into()), "n/a [1]");
        assert_eq!(
            f.cell(&Reading::of(Some(0.0), "unused"), "0.00".into()),
            "0.00"
        );
        assert_eq!(
            f.lines(),
            ["[1] the probe does not run", "[2] no idle"].map(String::from)
        );
    }

    /// Three hosts without halts, IPIs or the probe, and two targets without a cost for one
    /// reason.
    fn report() -> super::super::Report {
        use super::super::client::Sample;
        use super::super::{Report, WindowInfo, rank};
        let sample = |instance: &str| Sample {
            labels: [("instance", instance), ("job", "cpulab"), ("target", "pg")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value: 3e-6,
        };
        let hosts = ["h1", "h2", "h3"];
        let each = |v: f64| {
            hosts
                .iter()
                .map(|h| ((h.to_string(), "cpulab".to_string(), "pg".to_string()), v))
                .collect()
        };
        let inputs = rank::Inputs {
            cost: hosts.iter().map(|h| sample(h)).collect(),
            share: each(0.5),
            cross: each(10e-6),
            same: each(4e-6),
            wakeups: each(100.0),
            ..Default::default()
        };
        let unranked = |instance: &str| rank::Unranked {
            instance: instance.into(),
            job: "cpulab".into(),
            target: "nginx".into(),
            wakeups_per_s: 10.0,
            not_available: "no same-CPU wakeup timed".into(),
        };
        Report {
            prometheus: "http://p:9090".into(),
            window: WindowInfo {
                since_s: 600,
                start_unix_s: 0.0,
                end_unix_s: 600.0,
                start_utc: "a".into(),
                end_utc: "b".into(),
                step_s: 30,
                rule_interval_s: 30.0,
            },
            hosts_seen: 5,
            hosts_answering: 5,
            limit: 10,
            method: String::new(),
            ranking: rank::build(&inputs),
            cost_series: Vec::new(),
            without_cost: vec![unranked("h4"), unranked("h5")],
            findings: Vec::new(),
            drift: Vec::new(),
            vm_wait: Default::default(),
            queries: Vec::new(),
        }
    }

    #[test]
    fn text_and_page_say_each_reason_once_and_the_json_on_every_value() {
        let r = report();
        let idle = "the exporter published no idle collector status";
        let probe = "the active probe does not run";
        let text = super::super::text::render(&r);
        let page = super::super::html::render(&r);
        for out in [&text, &page] {
            assert_eq!(out.matches(idle).count(), 1, "{out}");
            assert_eq!(out.matches(probe).count(), 1, "{out}");
            assert_eq!(out.matches("no same-CPU wakeup timed").count(), 1, "{out}");
            // Every host's halts, IPIs and probe cells refer to the reasons.
            for n in 1..=3 {
                assert_eq!(out.matches(&format!("n/a [{n}]")).count(), 3, "{out}");
            }
            assert_eq!(out.matches("n/a").count(), 9, "{out}");
            assert_eq!(out.matches("no cost [4]").count(), 2, "{out}");
        }
        assert!(text.contains(&format!("  [1] {idle}")), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        for x in json["ranking"].as_array().unwrap() {
            assert_eq!(x["halts_per_wakeup"]["not_available"], idle);
        }
        assert_eq!(
            json["without_cost"][1]["not_available"],
            "no same-CPU wakeup timed"
        );
    }
}
