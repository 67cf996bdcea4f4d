//! A command line's settings, `NAME=VALUE` and `tuned:PROFILE`, parsed into validated
//! changes; nothing is written.

use super::changes::change;
use super::setting::{Change, Roots};
use crate::error::bad_input;
use anyhow::Result;

/// Parses `NAME=VALUE` (or `tuned:PROFILE`) into validated changes, with the profile items
/// that were skipped and why. Nothing is written.
pub fn parse_changes(roots: &Roots, args: &[String]) -> Result<(Vec<Change>, Vec<String>)> {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for arg in args {
        if let Some(profile) = arg.strip_prefix("tuned:") {
            let (c, s) = super::tuned::expand(roots, profile)?;
            out.extend(c);
            skipped.extend(s);
            continue;
        }
        let Some((name, value)) = arg.split_once('=') else {
            return Err(bad_input(format!(
                "`{arg}` is not SETTING=VALUE; write it like `haltpoll.guest_halt_poll_ns=200000`"
            )));
        };
        out.push(change(roots, name.trim(), value.trim(), None)?);
    }
    let mut names: Vec<String> = out.iter().map(|c| c.setting.name()).collect();
    names.sort();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad_input(format!(
            "setting `{}` is given twice; give each setting once",
            w[0]
        )));
    }
    Ok((out, skipped))
}
