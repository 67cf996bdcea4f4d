//! The physical machine under the hypervisor: packages, modules, cores, SMT threads.
//!
//! Only two facts of the structure change the outcomes the field notes report: which physical
//! CPUs share a core's front end and L2 (an Opteron module's two cores, or two SMT threads), so
//! that one slows the other while both are busy (field notes E), and which package a CPU is in,
//! because Xen's credit scheduler fills the first cores of each package first. Physical CPUs are
//! numbered package-major, then module, then core, then thread, as Linux numbers an Opteron.

use crate::error::bad_input;
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// The shape of a host, as a scenario file writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostShape {
    /// A label (`Intel i5-6600`, `2x AMD Opteron 6376`).
    #[serde(default)]
    pub name: String,
    pub packages: u32,
    /// Modules per package (cores sharing an L2 and decoder); plain cores when each has one core.
    pub modules_per_package: u32,
    #[serde(default = "one")]
    pub cores_per_module: u32,
    #[serde(default = "one")]
    pub threads_per_core: u32,
}

fn one() -> u32 {
    1
}

/// One physical CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pcpu {
    pub package: u32,
    /// Global index of the module (or SMT core) whose resources it shares.
    pub group: u32,
}

/// The physical CPUs with their sharing groups.
#[derive(Clone, Debug)]
pub struct Host {
    pub shape: HostShape,
    pub pcpus: Vec<Pcpu>,
    /// For each physical CPU, the others in its group.
    pub siblings: Vec<Vec<u32>>,
    /// The same as masks.
    pub sibling_mask: Vec<u64>,
    /// Physical CPUs of each package.
    pub package_mask: Vec<u64>,
}

/// Physical CPUs are a 64-bit mask in the engine.
pub const MAX_PCPUS: u32 = 64;

impl Host {
    pub fn new(shape: &HostShape) -> Result<Self> {
        // Each count on its own first, so that their product cannot overflow.
        for (name, v) in [
            ("packages", shape.packages),
            ("modules_per_package", shape.modules_per_package),
            ("cores_per_module", shape.cores_per_module),
            ("threads_per_core", shape.threads_per_core),
        ] {
            if !(1..=MAX_PCPUS).contains(&v) {
                return Err(bad_input(format!(
                    "host {name} = {v} is out of range; give 1 to {MAX_PCPUS}"
                )));
            }
        }
        let per_group = shape.cores_per_module * shape.threads_per_core;
        let n = u64::from(shape.packages * shape.modules_per_package) * u64::from(per_group);
        if n > u64::from(MAX_PCPUS) {
            return Err(bad_input(format!(
                "the host has {n} physical CPUs; the simulator models at most {MAX_PCPUS}"
            )));
        }
        let n = n as u32;
        let mut pcpus = Vec::with_capacity(n as usize);
        for i in 0..n {
            pcpus.push(Pcpu {
                package: i / (shape.modules_per_package * per_group),
                group: i / per_group,
            });
        }
        let siblings: Vec<Vec<u32>> = (0..n)
            .map(|i| {
                (0..n)
                    .filter(|&j| j != i && pcpus[j as usize].group == pcpus[i as usize].group)
                    .collect()
            })
            .collect();
        let sibling_mask = siblings
            .iter()
            .map(|s| s.iter().fold(0u64, |m, &j| m | (1 << j)))
            .collect();
        let package_mask = (0..shape.packages)
            .map(|k| {
                pcpus
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.package == k)
                    .fold(0u64, |m, (i, _)| m | (1 << i))
            })
            .collect();
        Ok(Self {
            shape: shape.clone(),
            pcpus,
            siblings,
            sibling_mask,
            package_mask,
        })
    }

    pub fn len(&self) -> usize {
        self.pcpus.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pcpus.is_empty()
    }

    /// Mask of every physical CPU.
    pub fn all_mask(&self) -> u64 {
        if self.len() == 64 {
            u64::MAX
        } else {
            (1u64 << self.len()) - 1
        }
    }

    /// `4 CPUs: 1 package x 4 cores`, for output.
    pub fn describe(&self) -> String {
        let s = &self.shape;
        let mut t = format!(
            "{} physical CPUs: {} package(s) x {} ",
            self.len(),
            s.packages,
            s.modules_per_package
        );
        if s.cores_per_module > 1 {
            t.push_str(&format!("modules of {} cores", s.cores_per_module));
        } else {
            t.push_str("cores");
        }
        if s.threads_per_core > 1 {
            t.push_str(&format!(" x {} SMT threads", s.threads_per_core));
        }
        if !s.name.is_empty() {
            t = format!("{} ({t})", s.name);
        }
        t
    }
}

/// Parses a taskset-style list (`0-3,8`) into a mask below `n` CPUs.
pub fn mask_of(list: &str, n: usize, what: &str) -> Result<u64> {
    let set = crate::cpulist::CpuSet::parse_list(list, false)
        .map_err(|e| bad_input(format!("{what} {list:?}: {e}")))?;
    let mut m = 0u64;
    for c in set.iter() {
        if c as usize >= n {
            return Err(bad_input(format!(
                "{what} {list:?} names CPU {c}, but there are only {n} (0-{})",
                n.saturating_sub(1)
            )));
        }
        m |= 1 << c;
    }
    if m == 0 {
        return Err(bad_input(format!("{what} {list:?} is empty")));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opteron_modules_pair_adjacent_cores_within_a_package() {
        let h = Host::new(&HostShape {
            name: String::new(),
            packages: 2,
            modules_per_package: 8,
            cores_per_module: 2,
            threads_per_core: 1,
        })
        .unwrap();
        assert_eq!(h.len(), 32);
        assert_eq!(h.siblings[0], vec![1]);
        assert_eq!(h.siblings[17], vec![16]);
        assert_eq!(h.pcpus[15].package, 0);
        assert_eq!(h.pcpus[16].package, 1);
    }

    #[test]
    fn plain_cores_have_no_siblings_and_lists_are_checked() {
        let h = Host::new(&HostShape {
            name: String::new(),
            packages: 1,
            modules_per_package: 4,
            cores_per_module: 1,
            threads_per_core: 1,
        })
        .unwrap();
        assert!(h.siblings.iter().all(|s| s.is_empty()));
        assert_eq!(mask_of("0-1,3", 4, "pcpus").unwrap(), 0b1011);
        assert!(mask_of("4", 4, "pcpus").is_err());
    }

    /// Counts whose product overflows a u32 once panicked (`attempt to multiply with
    /// overflow`); each is now checked on its own, one line naming it.
    #[test]
    fn host_counts_out_of_range_are_bad_input_never_an_overflow() {
        let shape = |packages, modules_per_package| HostShape {
            name: String::new(),
            packages,
            modules_per_package,
            cores_per_module: 1,
            threads_per_core: 1,
        };
        for (p, m, want) in [
            (
                u32::MAX,
                65_536,
                "host packages = 4294967295 is out of range; give 1 to 64",
            ),
            (
                1,
                0,
                "host modules_per_package = 0 is out of range; give 1 to 64",
            ),
            (
                64,
                64,
                "the host has 4096 physical CPUs; the simulator models at most 64",
            ),
        ] {
            let e = Host::new(&shape(p, m)).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert_eq!(format!("{e:#}"), want);
        }
        assert_eq!(Host::new(&shape(2, 32)).unwrap().len(), 64);
    }
}
