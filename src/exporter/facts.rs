//! The machine facts behind `cpulab_machine_info`, re-read every `--facts-interval`, so the
//! series follows a change of halt polling, the governor or a boot option (configuration drift
//! is what cpulab is for). After a change only the new label set is published, and each fact
//! that changed is logged, old -> new.
//!
//! A fact the machine does not have (no cpuidle driver, no cpufreq in a guest) is a fact
//! (`none`); a file that exists and cannot be read is a read error, counted by kind.

use super::process::{ErrorKind, ReadError};
use crate::machine::Machine;
use crate::probe::reading::{Reading, Reason};
use std::time::{Duration, Instant};

/// `--facts-interval` by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// One fact that changed between two readings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub fact: String,
    pub old: String,
    pub new: String,
}

impl Change {
    /// The log line's words.
    pub fn text(&self) -> String {
        format!(
            "machine fact {} changed: {} -> {}",
            self.fact, self.old, self.new
        )
    }
}

/// The facts that differ between two label sets, in the newer set's order (pure). A label only
/// one side has is `none` on the other.
pub fn changes(old: &[(String, String)], new: &[(String, String)]) -> Vec<Change> {
    let get = |set: &[(String, String)], k: &str| {
        set.iter()
            .find(|(n, _)| n == k)
            .map_or_else(|| "none".to_string(), |(_, v)| v.clone())
    };
    let mut names: Vec<&String> = new.iter().map(|(k, _)| k).collect();
    names.extend(
        old.iter()
            .map(|(k, _)| k)
            .filter(|k| !new.iter().any(|(n, _)| n == *k)),
    );
    names
        .into_iter()
        .filter_map(|k| {
            let (o, n) = (get(old, k), get(new, k));
            (o != n).then(|| Change {
                fact: k.clone(),
                old: o,
                new: n,
            })
        })
        .collect()
}

/// The read errors among the readings the labels come from: an absent file is a fact, one that
/// exists and cannot be read is an error.
pub fn read_errors(p: &crate::probe::Probe) -> Vec<ReadError> {
    fn kind<T>(r: &Reading<T>) -> Option<ReadError> {
        let Reading::Unavailable { unavailable } = r else {
            return None;
        };
        let kind = match unavailable.reason {
            Reason::PermissionDenied => ErrorKind::Permission,
            Reason::Unreadable => ErrorKind::Parse,
            Reason::Absent | Reason::NotExposed | Reason::NotApplicable => return None,
        };
        Some(ReadError {
            kind,
            detail: unavailable.detail.clone(),
        })
    }
    [
        kind(&p.cmdline),
        kind(&p.idle.driver),
        kind(&p.idle.governor),
        kind(&p.idle.haltpoll),
        kind(&p.topology.smt_control),
        kind(&p.sched.kernel),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// What one look at the facts gave.
#[derive(Debug, Default)]
pub struct Look {
    /// True when they were read again now (not only when due).
    pub reread: bool,
    pub changes: Vec<Change>,
    pub errors: Vec<ReadError>,
}

/// The facts and when to read them again.
pub struct Facts {
    machine: Machine,
    every: Duration,
    next: Instant,
    labels: Vec<(String, String)>,
}

impl Facts {
    /// Facts read at `now` as `labels`, to be read again every `every`.
    pub fn new(
        machine: Machine,
        labels: Vec<(String, String)>,
        every: Duration,
        now: Instant,
    ) -> Self {
        Self {
            machine,
            every,
            next: now + every,
            labels,
        }
    }

    /// The labels published now.
    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// Reads the facts again when due at `now`, keeping the new labels.
    pub fn look(&mut self, now: Instant) -> Look {
        if now < self.next {
            return Look::default();
        }
        self.next = now + self.every;
        let p = crate::probe::probe(&self.machine);
        let labels = super::machine_labels(&p);
        let look = Look {
            reread: true,
            changes: changes(&self.labels, &labels),
            errors: read_errors(&p),
        };
        self.labels = labels;
        look
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn changes_name_each_fact_old_and_new() {
        let old = set(&[
            ("kernel", "6.1"),
            ("guest_halt_poll_ns", "200000"),
            ("smt", "on"),
        ]);
        let new = set(&[
            ("kernel", "6.1"),
            ("guest_halt_poll_ns", "0"),
            ("smt", "off"),
        ]);
        let c = changes(&old, &new);
        assert_eq!(
            c.iter().map(Change::text).collect::<Vec<_>>(),
            [
                "machine fact guest_halt_poll_ns changed: 200000 -> 0",
                "machine fact smt changed: on -> off"
            ]
        );
        assert!(changes(&old, &old).is_empty());
        // A fact that appears or goes is a change from or to none.
        let c = changes(&set(&[("a", "1")]), &set(&[("b", "2")]));
        assert_eq!(
            c,
            [
                Change {
                    fact: "b".into(),
                    old: "none".into(),
                    new: "2".into()
                },
                Change {
                    fact: "a".into(),
                    old: "1".into(),
                    new: "none".into()
                },
            ]
        );
    }

    #[test]
    fn a_rewritten_parameter_is_seen_at_the_next_look_only_when_due() {
        let d = crate::trial::testing::copy_fixture("kvm-guest");
        let machine = Machine::detect(d.path()).unwrap();
        let p = crate::probe::probe(&machine);
        let t0 = Instant::now();
        let mut f = Facts::new(
            machine,
            super::super::machine_labels(&p),
            Duration::from_secs(60),
            t0,
        );
        let param = d
            .path()
            .join("sys/module/haltpoll/parameters/guest_halt_poll_ns");
        let before = std::fs::read_to_string(&param).unwrap().trim().to_string();
        let value = |f: &Facts| {
            f.labels()
                .iter()
                .find(|(k, _)| k == "guest_halt_poll_ns")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(value(&f), Some(before.clone()));
        std::fs::write(&param, "123456\n").unwrap();
        // Not due yet: nothing read, the old value kept.
        let early = f.look(t0 + Duration::from_secs(59));
        assert!(!early.reread && early.changes.is_empty());
        assert_eq!(value(&f), Some(before.clone()));
        let due = f.look(t0 + Duration::from_secs(60));
        assert!(due.reread);
        assert!(due.errors.is_empty(), "{:?}", due.errors);
        assert_eq!(
            due.changes,
            [Change {
                fact: "guest_halt_poll_ns".into(),
                old: before,
                new: "123456".into()
            }]
        );
        assert_eq!(value(&f), Some("123456".into()));
        // The next due look finds nothing new.
        assert!(f.look(t0 + Duration::from_secs(120)).changes.is_empty());
    }
}
