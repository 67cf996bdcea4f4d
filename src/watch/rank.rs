//! Which process groups get their own label when the whole machine is watched: the most
//! active, re-ranked every interval, with hysteresis so that labels do not flap.
//!
//! Each interval the ranking is handed every live group's activity over that interval
//! (voluntary context switches: see `crate::watch::follow`). The rules, in order:
//! - a named group that ended (no live process) gives its slot up at once;
//! - a free slot goes at once to the most active unnamed group (any activity above zero);
//! - with every slot taken, an unnamed group takes the slot of the least active named one only
//!   when it was [`MARGIN`] times as active (and [`MIN_LEAD`] more) in each of [`HOLD`]
//!   intervals in a row. One interval's spike never evicts; a new busy service is named at its
//!   first interval when a slot is free, at its second when it must evict.
//!
//! Pure: the sequence of snapshots is the whole input, so tests replay one.

use std::collections::{BTreeMap, HashMap};

/// How many times the least active named group's activity a challenger must show.
pub const MARGIN: u64 = 2;
/// And by how many switches per interval at least (so 3 against 1 evicts nothing).
pub const MIN_LEAD: u64 = 10;
/// Intervals in a row a challenger must lead before it takes the slot.
pub const HOLD: u32 = 2;

/// The named groups and the challengers' leads.
#[derive(Clone, Debug, Default)]
pub struct Ranking {
    max: usize,
    named: Vec<String>,
    leads: HashMap<String, u32>,
}

impl Ranking {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            ..Self::default()
        }
    }

    /// The groups named now, in the order they were named.
    pub fn named(&self) -> &[String] {
        &self.named
    }

    /// One interval: `activity` is every live group with its activity over the interval.
    /// Returns the groups named after it.
    pub fn step(&mut self, activity: &BTreeMap<String, u64>) -> &[String] {
        self.named.retain(|g| activity.contains_key(g));
        let mut unnamed: Vec<(&String, u64)> = activity
            .iter()
            .filter(|(g, a)| **a > 0 && !self.named.contains(g))
            .map(|(g, a)| (g, *a))
            .collect();
        // Most active first; equal activity by name, so the order is the input's alone.
        unnamed.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let free = self.max.saturating_sub(self.named.len());
        let (take, rest) = unnamed.split_at(free.min(unnamed.len()));
        self.named.extend(take.iter().map(|(g, _)| (*g).clone()));
        // The least active named first, each facing one challenger, the strongest first.
        let mut weakest: Vec<(String, u64)> = self
            .named
            .iter()
            .map(|g| (g.clone(), activity.get(g).copied().unwrap_or(0)))
            .collect();
        weakest.sort_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
        let mut leads = HashMap::new();
        for ((challenger, a), (holder, h)) in rest.iter().zip(&weakest) {
            if *a < h.saturating_mul(MARGIN) || *a < h + MIN_LEAD {
                continue;
            }
            let lead = self.leads.get(*challenger).copied().unwrap_or(0) + 1;
            if lead >= HOLD {
                if let Some(slot) = self.named.iter_mut().find(|g| *g == holder) {
                    *slot = (*challenger).clone();
                }
            } else {
                leads.insert((*challenger).clone(), lead);
            }
        }
        // A lead that lapses for one interval starts again.
        self.leads = leads;
        &self.named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(groups: &[(&str, u64)]) -> BTreeMap<String, u64> {
        groups.iter().map(|(g, a)| (g.to_string(), *a)).collect()
    }

    fn names(r: &Ranking) -> Vec<&str> {
        let mut v: Vec<&str> = r.named().iter().map(String::as_str).collect();
        v.sort();
        v
    }

    #[test]
    fn free_slots_go_to_the_most_active_at_once_and_idle_groups_get_none() {
        let mut r = Ranking::new(2);
        r.step(&snap(&[("a", 5), ("b", 50), ("c", 20), ("idle", 0)]));
        assert_eq!(names(&r), ["b", "c"]);
        let mut r = Ranking::new(3);
        r.step(&snap(&[("a", 5), ("idle", 0)]));
        assert_eq!(names(&r), ["a"], "no activity, no name");
    }

    #[test]
    fn a_new_busy_group_is_named_within_two_intervals_when_every_slot_is_taken() {
        let mut r = Ranking::new(2);
        let calm = [("a", 30), ("b", 40)];
        r.step(&snap(&calm));
        assert_eq!(names(&r), ["a", "b"]);
        let busy = [("a", 30), ("b", 40), ("pg", 9_000)];
        r.step(&snap(&busy));
        assert_eq!(names(&r), ["a", "b"], "one interval is not yet clear");
        r.step(&snap(&busy));
        assert_eq!(
            names(&r),
            ["b", "pg"],
            "the second interval evicts the least active"
        );
    }

    #[test]
    fn a_brief_spike_does_not_evict() {
        let mut r = Ranking::new(2);
        r.step(&snap(&[("a", 30), ("b", 40)]));
        for spike in [0, 9_000, 0, 9_000, 1, 9_000] {
            r.step(&snap(&[("a", 30), ("b", 40), ("cron", spike)]));
            assert_eq!(names(&r), ["a", "b"], "spike {spike}");
        }
    }

    #[test]
    fn a_challenger_must_lead_clearly() {
        let mut r = Ranking::new(1);
        r.step(&snap(&[("a", 100)]));
        for _ in 0..5 {
            // Busier, but not twice as busy: no flapping between near equals.
            r.step(&snap(&[("a", 100), ("b", 199)]));
        }
        assert_eq!(names(&r), ["a"]);
        let mut r = Ranking::new(1);
        r.step(&snap(&[("a", 1)]));
        for _ in 0..5 {
            r.step(&snap(&[("a", 1), ("b", 5)]));
        }
        assert_eq!(names(&r), ["a"], "5 against 1 is not a lead of {MIN_LEAD}");
        r.step(&snap(&[("a", 0), ("b", 10)]));
        r.step(&snap(&[("a", 0), ("b", 10)]));
        assert_eq!(
            names(&r),
            ["b"],
            "an idle holder goes to a steady challenger"
        );
    }

    #[test]
    fn an_ended_group_frees_its_slot_for_the_next() {
        let mut r = Ranking::new(2);
        r.step(&snap(&[("a", 30), ("b", 40), ("c", 5)]));
        assert_eq!(names(&r), ["a", "b"]);
        r.step(&snap(&[("b", 40), ("c", 5)]));
        assert_eq!(names(&r), ["b", "c"], "a ended: c takes its slot at once");
        r.step(&snap(&[]));
        assert!(r.named().is_empty());
    }

    #[test]
    fn a_named_group_keeps_its_place_in_the_order() {
        let mut r = Ranking::new(3);
        r.step(&snap(&[("a", 1), ("b", 2), ("c", 3)]));
        let first = r.named().to_vec();
        r.step(&snap(&[("a", 300), ("b", 2), ("c", 1)]));
        assert_eq!(r.named(), first, "re-ranking alone moves nothing");
    }

    #[test]
    fn two_challengers_each_face_one_holder() {
        let mut r = Ranking::new(3);
        r.step(&snap(&[("a", 10), ("b", 20), ("c", 1_000)]));
        let busy = [("a", 10), ("b", 20), ("c", 1_000), ("x", 500), ("y", 400)];
        r.step(&snap(&busy));
        r.step(&snap(&busy));
        assert_eq!(names(&r), ["c", "x", "y"]);
    }
}
