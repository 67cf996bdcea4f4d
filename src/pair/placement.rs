//! Where the server and the client run, and in what order the runs happen.
//!
//! The automatic set asks the questions of the field notes in one go: both on one CPU (every
//! wakeup is a local context switch), one pair of each placement class the machine has (the
//! wakeup crosses to another CPU: on a VM, an IPI and a halt exit), the server pinned with the
//! client left to the scheduler, and both left to the scheduler (what production does).
//!
//! Runs are interleaved: round r runs every placement once, starting at placement r, so slow
//! drift (frequency, host load, caches filling) spreads over all placements instead of landing
//! on whichever ran last, and no placement always follows a server restart.

use crate::cpulist::CpuSet;
use crate::machine::Machine;
use crate::pair::settings::Placements;
use crate::topology::PlacementClass;
use serde::{Deserialize, Serialize};

/// One placement of server and client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Short name: `same-cpu 0:0`, `shared-llc 0:1`, `client-unpinned 0:*`, `unpinned *:*`.
    pub label: String,
    /// Placement class of the two CPUs; `unpinned` when either side is free.
    pub class: PlacementClass,
    /// CPUs of the whole server tree; `None` when unpinned.
    pub server_cpus: Option<CpuSet>,
    /// CPUs of the client; `None` when unpinned.
    pub client_cpus: Option<CpuSet>,
}

fn side(c: &Option<CpuSet>) -> String {
    c.as_ref()
        .map(|s| s.to_string())
        .unwrap_or_else(|| "*".to_string())
}

impl Placement {
    pub fn new(machine: &Machine, server: Option<CpuSet>, client: Option<CpuSet>) -> Self {
        let single =
            |c: &Option<CpuSet>| c.as_ref().filter(|s| s.len() == 1).and_then(|s| s.first());
        let (class, name) = match (single(&server), single(&client)) {
            (Some(a), Some(b)) => {
                let class = machine.topology.class(a, b);
                (class, class.as_str())
            }
            _ if server.is_some() && client.is_none() => {
                (PlacementClass::Unpinned, "client-unpinned")
            }
            _ if server.is_none() && client.is_some() => {
                (PlacementClass::Unpinned, "server-unpinned")
            }
            _ if server.is_none() && client.is_none() => (PlacementClass::Unpinned, "unpinned"),
            _ => (PlacementClass::Unpinned, "pinned-sets"),
        };
        Self {
            label: format!("{name} {}:{}", side(&server), side(&client)),
            class,
            server_cpus: server,
            client_cpus: client,
        }
    }

    /// The CPUs whose system counters matter for this placement.
    pub fn cpus_in_use(&self, allowed: &CpuSet) -> CpuSet {
        match (&self.server_cpus, &self.client_cpus) {
            (Some(s), Some(c)) => s.iter().chain(c.iter()).collect(),
            _ => allowed.clone(),
        }
    }
}

/// The placements to measure, nearest first, then the unpinned ones.
pub fn plan(machine: &Machine, choice: &Placements) -> Vec<Placement> {
    match choice {
        Placements::Explicit(list) => list
            .iter()
            .map(|(s, c)| Placement::new(machine, s.clone(), c.clone()))
            .collect(),
        Placements::Auto => {
            let pairs = machine.topology.representative_pairs(&machine.allowed);
            let one = |c: u32| Some(CpuSet::from_iter_u32([c]));
            let mut v: Vec<Placement> = pairs
                .iter()
                .map(|p| Placement::new(machine, one(p.a), one(p.b)))
                .collect();
            if let Some(first) = machine
                .allowed
                .first()
                .filter(|_| machine.allowed.len() > 1)
            {
                v.push(Placement::new(machine, one(first), None));
            }
            v.push(Placement::new(machine, None, None));
            v
        }
    }
}

/// The order of runs: `repeat` rounds, round r starting at placement r (mod n), moved on by one
/// when that would run the same placement twice in a row across the rounds' boundary.
pub fn schedule(placements: usize, repeat: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(placements * repeat);
    if placements == 0 {
        return out;
    }
    for r in 0..repeat {
        let mut start = r % placements;
        if placements > 1 && out.last() == Some(&start) {
            start = (start + 1) % placements;
        }
        out.extend((0..placements).map(|i| (i + start) % placements));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_interleaves_and_rotates() {
        assert_eq!(schedule(3, 2), vec![0, 1, 2, 1, 2, 0]);
        for n in 2..7 {
            let s = schedule(n, 5);
            for p in 0..n {
                assert_eq!(s.iter().filter(|&&x| x == p).count(), 5);
            }
            // Never the same placement twice in a row.
            assert!(s.windows(2).all(|w| w[0] != w[1]), "{n}: {s:?}");
        }
        assert_eq!(schedule(1, 3), vec![0, 0, 0]);
        assert!(schedule(0, 3).is_empty());
    }

    #[test]
    fn auto_plan_on_this_machine() {
        let m = Machine::detect(std::path::Path::new("/")).unwrap();
        let p = plan(&m, &Placements::Auto);
        assert_eq!(p[0].class, PlacementClass::SameCpu);
        assert_eq!(p.last().unwrap().label, "unpinned *:*");
        if m.allowed.len() > 1 {
            assert!(p.iter().any(|x| x.label.starts_with("client-unpinned")));
            assert!(
                p.iter()
                    .filter(|x| x.class != PlacementClass::Unpinned)
                    .count()
                    >= 2
            );
        }
    }
}
