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
            if hi - lo >= 65536 {
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

    #[test]
    fn a_list_names_at_most_65536_cpus() {
        // `0-65535` is 65536 CPUs, the most a list may name; one more is refused.
        assert_eq!(CpuSet::parse_list("0-65535", false).unwrap().len(), 65536);
        assert!(matches!(
            CpuSet::parse_list("0-65536", false),
            Err(CpuListError::TooLarge(_))
        ));
        assert!(matches!(
            CpuSet::parse_list("1-70000", false),
            Err(CpuListError::TooLarge(_))
        ));
        // The limit is on the width of a range, not on how high its CPUs are numbered.
        assert_eq!(
            CpuSet::parse_list("40000-40001", false).unwrap().to_vec(),
            vec![40000, 40001]
        );
    }

    #[test]
    fn each_bad_part_gets_its_own_error() {
        assert_eq!(
            CpuSet::parse_list("0,,1", false),
            Err(CpuListError::NotANumber("0,,1".into()))
        );
        assert_eq!(
            CpuSet::parse_list("0-4:0", false),
            Err(CpuListError::BadStride("0-4:0".into()))
        );
        assert_eq!(
            CpuSet::parse_list("0-4:x", false),
            Err(CpuListError::BadStride("0-4:x".into()))
        );
        assert_eq!(
            CpuSet::parse_list("-1", false),
            Err(CpuListError::Incomplete("-1".into()))
        );
        assert_eq!(
            CpuSet::parse_list("2-x", false),
            Err(CpuListError::NotANumber("x".into()))
        );
        // Spaces around parts and numbers, as users type them, are ignored.
        assert_eq!(
            CpuSet::parse_list(" 0 , 2 - 3 ", false).unwrap().to_vec(),
            vec![0, 2, 3]
        );
        assert_eq!(
            CpuSet::parse_list("1-9:4", false).unwrap().to_vec(),
            vec![1, 5, 9]
        );
    }

    #[test]
    fn masks_read_every_bit_of_every_digit() {
        // 0xa5 = 1010_0101: bits 0, 2, 5 and 7.
        assert_eq!(CpuSet::parse_mask("a5").unwrap().to_vec(), vec![0, 2, 5, 7]);
        assert_eq!(CpuSet::parse_mask("8").unwrap().to_vec(), vec![3]);
        assert!(CpuSet::parse_mask("0").unwrap().is_empty());
        assert_eq!(
            CpuSet::parse_mask("f,g\n"),
            Err(CpuListError::NotANumber("f,g".into()))
        );
    }

    #[test]
    fn prints_runs_as_ranges_and_lone_cpus_alone() {
        let s = CpuSet::from_iter_u32([9, 0, 2, 4, 5, 6]);
        assert_eq!(s.to_string(), "0,2,4-6,9");
        assert_eq!(CpuSet::from_iter_u32([7]).to_string(), "7");
        assert_eq!(CpuSet::from_iter_u32([3, 4]).to_string(), "3-4");
        assert_eq!(CpuSet::new().to_string(), "");
        assert_eq!(String::from(s.clone()), "0,2,4-6,9");
        assert_eq!(CpuSet::try_from("0,2,4-6,9".to_string()), Ok(s));
        assert_eq!(CpuSet::try_from(String::new()), Ok(CpuSet::new()));
    }

    #[test]
    fn set_operations() {
        let s = CpuSet::parse_list("0-3,8", false).unwrap();
        let t = CpuSet::parse_list("2-9", false).unwrap();
        assert!(s.contains(3) && s.contains(8) && !s.contains(4));
        assert_eq!((s.len(), s.is_empty(), s.first()), (5, false, Some(0)));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8]);
        assert_eq!(s.intersection(&t).to_string(), "2-3,8");
        assert_eq!(s.difference(&t).to_string(), "0-1");
        assert!(s.intersection(&t).is_subset(&s));
        assert!(!s.is_subset(&t));
        let mut e = CpuSet::new();
        assert_eq!((e.len(), e.is_empty(), e.first()), (0, true, None));
        e.insert(6);
        e.insert(6);
        assert_eq!(e.to_vec(), vec![6]);
        assert_eq!(
            [5u32, 1, 5].into_iter().collect::<CpuSet>().to_vec(),
            vec![1, 5]
        );
    }
}
