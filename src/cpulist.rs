//! CPU lists in taskset syntax (`0-3,8`, `0-15:2`) and the set type used everywhere.
//!
//! Users type CPU lists; the kernel prints them in the same syntax in /sys (`online`,
//! `shared_cpu_list`, `cpuset.cpus`). One parser serves both, so a list copied from /sys can be
//! pasted into a flag. Parsing is pure; checking a list against the machine (does the CPU exist,
//! is it allowed) happens in the settings stage, where the machine is known.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// A set of logical CPU numbers, kept sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct CpuSet(BTreeSet<u32>);

/// Why a CPU list could not be parsed. Each message names the offending part and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("empty CPU list; give CPUs like `0-3,8`")]
    Empty,
    #[error("`{0}` is not a CPU number; give CPUs like `0-3,8`")]
    NotANumber(String),
    #[error("range `{0}` is incomplete; write both ends, like `0-3`")]
    Incomplete(String),
    #[error("range `{text}` is reversed; write `{hi}-{lo}`")]
    Reversed { text: String, lo: u32, hi: u32 },
    #[error("stride in `{0}` must be a number of at least 1, like `0-15:2`")]
    BadStride(String),
    #[error("CPU list `{0}` names more than 65536 CPUs")]
    TooLarge(String),
}

impl CpuSet {
    pub fn new() -> Self {
        Self(BTreeSet::new())
    }

    /// Parses taskset/sysfs syntax: comma-separated numbers and ranges `a-b`, with an optional
    /// stride `a-b:s`. Surrounding white space (a trailing newline from /sys) is ignored. An empty
    /// string is an empty set only when `allow_empty` (sysfs prints empty lists, users may not).
    pub fn parse_list(text: &str, allow_empty: bool) -> Result<Self, CpuListError> {
        let text = text.trim();
        let mut set = BTreeSet::new();
        if text.is_empty() {
            return if allow_empty {
                Ok(Self(set))
            } else {
                Err(CpuListError::Empty)
            };
        }
        for part in text.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(CpuListError::NotANumber(text.to_string()));
            }
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => {
                    let stride: u32 = s
                        .parse()
                        .ok()
                        .filter(|&s| s >= 1)
                        .ok_or_else(|| CpuListError::BadStride(part.to_string()))?;
                    (r, stride)
                }
                None => (part, 1),
            };
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => {
                    if a.is_empty() || b.is_empty() {
                        return Err(CpuListError::Incomplete(part.to_string()));
                    }
                    (num(a)?, num(b)?)
                }
                None => {
                    let n = num(range)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(CpuListError::Reversed {
                    text: part.to_string(),
                    lo,
                    hi,
                });
            }
            if hi - lo > 65536 {
                return Err(CpuListError::TooLarge(part.to_string()));
            }
            set.extend((lo..=hi).step_by(stride as usize));
        }
        Ok(Self(set))
    }

    /// Parses a hexadecimal mask as in `/proc/<pid>/status` `Cpus_allowed` (`ff,ffffffff`).
    pub fn parse_mask(text: &str) -> Result<Self, CpuListError> {
        let digits: String = text.trim().chars().filter(|c| *c != ',').collect();
        let mut set = BTreeSet::new();
        for (i, c) in digits.chars().rev().enumerate() {
            let v = c
                .to_digit(16)
                .ok_or_else(|| CpuListError::NotANumber(text.trim().to_string()))?;
            for bit in 0..4 {
                if v & (1 << bit) != 0 {
                    set.insert((i * 4 + bit) as u32);
                }
            }
        }
        Ok(Self(set))
    }

    pub fn from_iter_u32<I: IntoIterator<Item = u32>>(it: I) -> Self {
        Self(it.into_iter().collect())
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }
    pub fn insert(&mut self, cpu: u32) {
        self.0.insert(cpu);
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }
    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.intersection(&other.0).copied().collect())
    }
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        Self(self.0.difference(&other.0).copied().collect())
    }
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }
    pub fn to_vec(&self) -> Vec<u32> {
        self.0.iter().copied().collect()
    }
}

fn num(s: &str) -> Result<u32, CpuListError> {
    s.trim()
        .parse()
        .map_err(|_| CpuListError::NotANumber(s.trim().to_string()))
}

/// Formats in the kernel's compact form: `0-3,8`.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.to_vec();
        let mut i = 0;
        let mut first = true;
        while i < v.len() {
            let mut j = i;
            while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j == i {
                write!(f, "{}", v[i])?;
            } else {
                write!(f, "{}-{}", v[i], v[j])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

impl From<CpuSet> for String {
    fn from(s: CpuSet) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for CpuSet {
    type Error = CpuListError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        CpuSet::parse_list(&s, true)
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_taskset_syntax() {
        let s = CpuSet::parse_list("0-3,8", false).unwrap();
        assert_eq!(s.to_vec(), vec![0, 1, 2, 3, 8]);
        assert_eq!(s.to_string(), "0-3,8");
        assert_eq!(
            CpuSet::parse_list("0-7:2", false).unwrap().to_vec(),
            vec![0, 2, 4, 6]
        );
        assert_eq!(CpuSet::parse_list("5\n", false).unwrap().to_vec(), vec![5]);
        assert!(CpuSet::parse_list("\n", true).unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_lists_with_the_fix() {
        let e = CpuSet::parse_list("1-0", false).unwrap_err();
        assert_eq!(e.to_string(), "range `1-0` is reversed; write `0-1`");
        assert!(matches!(
            CpuSet::parse_list("a", false),
            Err(CpuListError::NotANumber(_))
        ));
        assert!(matches!(
            CpuSet::parse_list("0-", false),
            Err(CpuListError::Incomplete(_))
        ));
        assert!(matches!(
            CpuSet::parse_list("", false),
            Err(CpuListError::Empty)
        ));
        assert!(CpuSet::parse_list("0,,1", false).is_err());
        assert!(CpuSet::parse_list("0-4:0", false).is_err());
        assert!(CpuSet::parse_list("-1", false).is_err());
    }

    #[test]
    fn parses_status_masks() {
        assert_eq!(CpuSet::parse_mask("3\n").unwrap().to_vec(), vec![0, 1]);
        assert_eq!(CpuSet::parse_mask("1,00000000").unwrap().to_vec(), vec![32]);
    }

    #[test]
    fn round_trips_through_json() {
        let s = CpuSet::parse_list("0-2,5", false).unwrap();
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(j, "\"0-2,5\"");
        let back: CpuSet = serde_json::from_str(&j).unwrap();
        assert_eq!(back, s);
    }
}
