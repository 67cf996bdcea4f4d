//! Per-label counters over slots that change hands.
//!
//! The kernel counts per slot, and a slot's counts only grow. When the targets follow the host
//! (`crate::watch::follow`) a slot passes from one label to another, so a label's published
//! counter is what it counted in every slot it held: the counts its earlier tenures left
//! (`carried`), plus what its slot counted since it took it (the slot's reading then, `base`).
//! A slot a label left is settled (its last counts carried to that label) before anyone else
//! takes it (`crate::watch::slots::Slots::settle`). So no published series goes backwards, and
//! none carries another label's counts.
//!
//! Pure: readings in, counts out.

use crate::wakeups::ClassCounts;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Counts by placement class, as one slot's rows read.
pub type Classes = BTreeMap<String, ClassCounts>;

/// Labels whose carried counts are kept at most; beyond it, those of labels without a slot are
/// forgotten (such a label named again starts from zero: a counter reset, which `rate()` reads
/// as one).
pub const CARRIED_REMEMBERED: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct Ledger {
    carried: HashMap<String, Classes>,
    base: HashMap<u32, Classes>,
}

fn minus(now: &ClassCounts, was: &ClassCounts) -> ClassCounts {
    ClassCounts {
        to_idle: now.to_idle.saturating_sub(was.to_idle),
        to_busy: now.to_busy.saturating_sub(was.to_busy),
        buckets: (now.buckets.iter().enumerate())
            .map(|(i, b)| b.saturating_sub(was.buckets.get(i).copied().unwrap_or(0)))
            .collect(),
        count: now.count.saturating_sub(was.count),
        sum_ns: now.sum_ns.saturating_sub(was.sum_ns),
    }
}

fn plus(a: &mut ClassCounts, b: &ClassCounts) {
    a.to_idle += b.to_idle;
    a.to_busy += b.to_busy;
    a.count += b.count;
    a.sum_ns += b.sum_ns;
    if a.buckets.len() < b.buckets.len() {
        a.buckets.resize(b.buckets.len(), 0);
    }
    for (x, y) in a.buckets.iter_mut().zip(&b.buckets) {
        *x += y;
    }
}

impl Ledger {
    /// The counts of `label`, holding `slot` whose rows read `now`.
    pub fn counts(&self, label: &str, slot: u32, now: &Classes) -> Classes {
        let mut out = self.carried.get(label).cloned().unwrap_or_default();
        let base = self.base.get(&slot);
        for (class, c) in now {
            let since = match base.and_then(|b| b.get(class)) {
                Some(was) => minus(c, was),
                None => c.clone(),
            };
            plus(out.entry(class.clone()).or_default(), &since);
        }
        out
    }

    /// `label` left `slot`, whose rows read `now`: what it counted there is carried to it, and
    /// the slot's next holder counts from `now`. `held` are the labels holding a slot now.
    pub fn settle(&mut self, label: &str, slot: u32, now: &Classes, held: &HashSet<&str>) {
        let total = self.counts(label, slot, now);
        self.carried.insert(label.to_string(), total);
        self.base.insert(slot, now.clone());
        if self.carried.len() > CARRIED_REMEMBERED {
            self.carried
                .retain(|l, _| l == label || held.contains(l.as_str()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(wakeups: u64) -> Classes {
        let c = ClassCounts {
            to_idle: wakeups / 2,
            to_busy: wakeups - wakeups / 2,
            buckets: vec![wakeups, 0],
            count: wakeups,
            sum_ns: wakeups * 1_000,
        };
        [("same-cpu".to_string(), c)].into_iter().collect()
    }

    fn wakeups(c: &Classes) -> u64 {
        c.values().map(|c| c.to_idle + c.to_busy).sum()
    }

    #[test]
    fn a_slot_passed_on_carries_nothing_to_its_next_label_and_nothing_goes_back() {
        let mut l = Ledger::default();
        let none = HashSet::new();
        // postgres holds slot 0 from the start and counts 100.
        assert_eq!(wakeups(&l.counts("postgres", 0, &row(100))), 100);
        // It leaves at 120; nginx takes slot 0 and counts 30 more.
        l.settle("postgres", 0, &row(120), &none);
        let nginx = l.counts("nginx", 0, &row(150));
        assert_eq!(wakeups(&nginx), 30, "only its own");
        assert_eq!(nginx["same-cpu"].buckets, vec![30, 0]);
        assert_eq!(nginx["same-cpu"].sum_ns, 30_000);
        // postgres comes back in slot 3 (read 500 there, of which 480 before it came) ...
        l.settle("someone", 3, &row(480), &none);
        let pg = l.counts("postgres", 3, &row(500));
        assert_eq!(wakeups(&pg), 140, "120 carried and 20 new: never below 120");
        // ... and leaves again: carried grows.
        l.settle("postgres", 3, &row(510), &none);
        assert_eq!(wakeups(&l.counts("postgres", 9, &Classes::new())), 150);
    }
}
