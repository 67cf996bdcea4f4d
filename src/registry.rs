//! The one list of experiments.
//!
//! Everything that needs "any experiment" by kind or by name reads it from here: `cpulab report`
//! renders a loaded document with its kind's own renderer, `compare` and `try` read a result's
//! typed [`Figure`](crate::experiment::Figure)s, `try --measure` runs an experiment chosen at run
//! time, and an experiment that implements [`crate::experiment::Command`] is also a subcommand
//! built from here.
//!
//! The list imports every experiment, so it stands above them all, beside the commands that use
//! it; nothing below it imports it (`trial` is handed [`Registry`] as a [`Catalogue`], and saved
//! results are read by `report::envelope::load`).
//!
//! Adding an experiment is one new module (its `Experiment` and `Command`, with
//! `const KIND: Kind = Kind::Experiment("name")`) plus one line in [`ENTRIES`]:
//! `command::<crate::name::Name>()`. Its kind is then known to `report` and `compare` (which
//! read a document into its typed result, so a wrong shape is bad input), its subcommand, help,
//! completions and man page exist, and `try --measure name:FLAGS` runs it.

use crate::experiment::erased::{Catalogue, Runnable};
pub use crate::experiment::erased::{Entry, Subcommand, command, entry};
use crate::machine::Machine;
use crate::report::envelope::{self, Kind, Loaded};
use anyhow::Result;
use std::path::Path;

/// Every experiment whose results cpulab can load, render and compare.
pub const ENTRIES: &[Entry] = &[
    command::<crate::pingpong::Pingpong>(),
    command::<crate::pair::Pair>(),
    command::<crate::share::Share>(),
    command::<crate::scale::Scale>(),
    command::<crate::oscost::Oscost>(),
    command::<crate::watch::Watch>(),
    // A model, not an experiment: its documents are loaded and rendered like the others, and
    // every figure it gives is labelled SIMULATED.
    Entry {
        kind: Kind::Sim,
        render: crate::sim::render::render_document,
        figures: crate::sim::render::figures,
        command: None,
    },
    entry::<crate::trial::Trial>(),
    // Not experiments but results all the same: their typed figures (unit, direction,
    // samples) are what `compare` and the history read, never a walk of the JSON.
    Entry {
        kind: Kind::Doctor,
        render: crate::doctor::measured::render_document,
        figures: crate::doctor::measured::figures_of_document,
        command: None,
    },
    Entry {
        kind: Kind::Probe,
        render: crate::probe::render_document,
        figures: crate::probe::figures_of_document,
        command: None,
    },
    command::<crate::messaging::Messaging>(),
    command::<crate::bursty::Bursty>(),
];

/// The entry for a kind, if it is an experiment's.
pub fn lookup(kind: Kind) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.kind == kind)
}

/// The entry whose subcommand is called `name`.
pub fn command_named(name: &str) -> Option<(&'static Entry, &'static Subcommand)> {
    ENTRIES
        .iter()
        .filter_map(|e| e.command.as_ref().map(|c| (e, c)))
        .find(|(e, _)| e.kind.as_str() == name)
}

/// Every registered kind, for reading documents back.
pub fn kinds() -> Vec<Kind> {
    ENTRIES.iter().map(|e| e.kind).collect()
}

/// Reads a saved result whose kind may be any cpulab kind, registered ones included.
pub fn load(path: &Path) -> Result<Loaded> {
    envelope::load(path, &kinds())
}

/// The registry as `try --measure` sees it: the experiments that are subcommands, by name.
pub struct Registry;

impl Catalogue for Registry {
    fn measure(
        &self,
        name: &str,
        flags: &[String],
        machine: &Machine,
    ) -> Option<Result<Box<dyn Runnable>>> {
        command_named(name).map(|(_, c)| (c.measure)(flags, machine))
    }

    fn names(&self) -> Vec<&'static str> {
        ENTRIES
            .iter()
            .filter(|e| e.command.is_some())
            .map(|e| e.kind.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_kind_is_found_by_its_name_and_its_subcommand() {
        for e in ENTRIES {
            let name = e.kind.as_str();
            assert_eq!(Kind::parse(name, &kinds()), Some(e.kind), "{name}");
            if let Some(c) = &e.command {
                assert_eq!((c.clap)().get_name(), name);
                assert!(command_named(name).is_some());
            }
        }
        // Two kinds never share a name.
        let mut names: Vec<_> = ENTRIES.iter().map(|e| e.kind.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ENTRIES.len());
    }

    #[test]
    fn measure_specs_are_parsed_and_validated_by_the_experiment() {
        let machine = Machine::detect(Path::new("/")).unwrap();
        let (_, messaging) = command_named("messaging").unwrap();
        let words = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert!((messaging.measure)(&words("--groups 2 --repeats 2"), &machine).is_ok());
        for bad in ["--groups 0", "--bogus", "--cpus 1-0"] {
            let e = (messaging.measure)(&words(bad), &machine).err().unwrap();
            assert_eq!(crate::error::exit_code(&e), 2, "{bad}");
            assert!(format!("{e:#}").contains("--measure messaging"), "{e:#}");
        }
    }
}
