//! The kernel command line, parsed once and consulted by several sections.
//!
//! Boot options decide much of what placement costs: `idle=poll` or `haltpoll.*` change what an
//! idle vCPU does, `mitigations=off` and `pti=off` change every system call, `isolcpus` and
//! `nohz_full` take CPUs away from the scheduler, `nosmt` removes hardware threads. The parser
//! follows the kernel's own rules: words split on white space, double quotes group, and
//! everything after a bare `--` belongs to init, not the kernel.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The kernel's parameters: `key` or `key=value`, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cmdline {
    /// Each parameter as (name, value); a bare flag like `nosmt` has no value.
    pub params: Vec<(String, Option<String>)>,
}

/// Splits a kernel command line into parameters (pure).
pub fn parse_cmdline(text: &str) -> Cmdline {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut started = false;
    for ch in text.chars() {
        match ch {
            '"' => {
                in_quotes = !in_quotes;
                started = true;
            }
            c if c.is_whitespace() && !in_quotes => {
                if started {
                    words.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            c => {
                cur.push(c);
                started = true;
            }
        }
    }
    if started {
        words.push(cur);
    }
    let params = words
        .into_iter()
        .take_while(|w| w != "--")
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (w, None),
        })
        .collect();
    Cmdline { params }
}

impl Cmdline {
    /// The value of the last occurrence of `key` (the kernel lets later ones win). A flag
    /// without a value gives `Some("")`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_deref().unwrap_or(""))
    }

    pub fn has(&self, key: &str) -> bool {
        self.params.iter().any(|(k, _)| k == key)
    }

    /// Every parameter whose name is in `names` or starts with one of `prefixes` (a prefix ends
    /// in `.` or `_`, e.g. `haltpoll.`), as a map for the JSON.
    pub fn select(&self, names: &[&str], prefixes: &[&str]) -> BTreeMap<String, String> {
        self.params
            .iter()
            .filter(|(k, _)| {
                names.contains(&k.as_str()) || prefixes.iter().any(|p| k.starts_with(p))
            })
            .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
            .collect()
    }
}

/// Boot options as one line: `name` or `name=value`, in name order; `none` when there are none.
pub fn options_line<'a>(m: impl IntoIterator<Item = (&'a String, &'a String)>) -> String {
    let words: Vec<String> = m
        .into_iter()
        .map(|(k, v)| {
            if v.is_empty() {
                k.clone()
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    if words.is_empty() {
        "none".into()
    } else {
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_flags_values_quotes_and_stops_at_init_args() {
        let c = parse_cmdline(
            "mitigations=auto,nosmt nosmt  dyndbg=\"file x.c +p\" haltpoll.guest_halt_poll_ns=0 -- --init-flag=1\n",
        );
        assert_eq!(c.get("mitigations"), Some("auto,nosmt"));
        assert_eq!(c.get("nosmt"), Some(""));
        assert_eq!(c.get("dyndbg"), Some("file x.c +p"));
        assert_eq!(c.get("--init-flag"), None);
        let hp = c.select(&[], &["haltpoll."]);
        assert_eq!(
            hp.get("haltpoll.guest_halt_poll_ns").map(String::as_str),
            Some("0")
        );
    }

    #[test]
    fn later_occurrence_wins() {
        let c = parse_cmdline("idle=halt idle=poll");
        assert_eq!(c.get("idle"), Some("poll"));
        assert!(parse_cmdline("").params.is_empty());
    }
}
