//! A setting found by its name and a value checked against it: what `cpulab try` and the
//! tuned expansion make changes of. Above the settings' own files and below the parsing of a
//! command line's `NAME=VALUE` list (`parse`), which also expands tuned profiles.

use super::setting::{Availability, Change, Roots, Setting};
use crate::error::bad_input;
use anyhow::Result;

/// Looks a setting up by name. Unknown names are bad input naming `--list`.
pub fn lookup(roots: &Roots, name: &str) -> Result<Box<dyn Setting>> {
    super::knobs::lookup(roots, name)?.ok_or_else(|| {
        bad_input(format!(
            "unknown setting `{name}`; `cpulab try --list` shows the settings and their names"
        ))
    })
}

/// One validated change.
pub fn change(roots: &Roots, name: &str, value: &str, from: Option<String>) -> Result<Change> {
    let setting = lookup(roots, name)?;
    match setting.availability() {
        Availability::Changeable | Availability::Inert(_) => {}
        Availability::NotHere(why) => {
            return Err(bad_input(format!("{name} cannot be tried here: {why}")));
        }
        Availability::BootOnly(line) => {
            return Err(bad_input(format!(
                "{name} is fixed at boot and is never tried live; set it with `{line}` on the kernel command line and reboot"
            )));
        }
    }
    let value = setting.validate(value)?;
    Ok(Change {
        setting,
        value,
        from,
    })
}

/// Every setting `--list` shows.
pub fn catalogue_all(roots: &Roots) -> Vec<Box<dyn Setting>> {
    super::knobs::catalogue(roots)
}
