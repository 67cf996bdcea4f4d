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
//! `entry::<crate::name::Name>()`. Its kind is then known to `report` and `compare` (which
//! read a document into its typed result, so a wrong shape is bad input), its subcommand, help,
//! completions and man page exist, and `try --measure name:FLAGS` runs it.

use crate::experiment::erased::{Catalogue, Runnable};
pub use crate::experiment::erased::{Entry, Listed, Subcommand, entry};
use crate::machine::Machine;
use crate::report::envelope::{self, Kind, Loaded};
use anyhow::Result;
use std::path::Path;

/// Every kind of result cpulab can load, render and compare, each built the one way,
/// [`entry`]: an experiment that is a [`Command`](crate::experiment::Command) brings its own
/// subcommand; the doctor's, the probe's, sim's and try's results are listed beside their
/// built-in commands.
pub const ENTRIES: &[Entry] = &[
    entry::<crate::pingpong::Pingpong>(),
    entry::<crate::pair::Pair>(),
    entry::<crate::share::Share>(),
    entry::<crate::scale::Scale>(),
    entry::<crate::oscost::Oscost>(),
    entry::<crate::watch::Watch>(),
    // A model, not an experiment: its documents are loaded and rendered like the others, and
    // every figure it gives is labelled SIMULATED.
    entry::<crate::sim::render::SimDocument>(),
    entry::<crate::trial::Trial>(),
    // Not experiments but results all the same: their typed figures (unit, direction,
    // samples) are what `compare` and the history read, never a walk of the JSON.
    entry::<crate::doctor::DoctorReport>(),
    entry::<crate::probe::Probe>(),
    entry::<crate::messaging::Messaging>(),
    entry::<crate::bursty::Bursty>(),
    // `cpulab host bench`, a built-in command's subcommand.
    entry::<crate::host::HostBench>(),
    // `cpulab host`, a built-in command.
    entry::<crate::host::HostWatch>(),
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

    /// Every entry, however it is listed, is reachable three ways: `cpulab NAME` (its own
    /// subcommand or a built-in one), and by the kind a saved document names, which `report`
    /// and `compare` read with [`kinds`] and [`lookup`]; the saved fixtures of each kind that
    /// has one render and give typed figures through their entry.
    #[test]
    fn every_entry_is_a_subcommand_and_is_read_back_by_its_kind() {
        let cli = crate::cli::command();
        for e in ENTRIES {
            let name = e.kind.as_str();
            // A kind named `a-b` may be the subcommand `cpulab a b` (`host-bench`).
            let sub = cli.find_subcommand(name).or_else(|| {
                let (a, b) = name.split_once('-')?;
                cli.find_subcommand(a)?.find_subcommand(b)
            });
            assert!(sub.is_some(), "`cpulab {name}` is not a subcommand");
            if let Some(c) = &e.command {
                assert_eq!((c.clap)().get_name(), name);
            }
            let doc = serde_json::json!({ "cpulab_schema": 1, "kind": name });
            let loaded = envelope::parse(&doc.to_string(), "r.json", &kinds()).unwrap();
            assert_eq!(loaded.kind, e.kind, "{name}");
            assert_eq!(lookup(loaded.kind).map(|l| l.kind), Some(e.kind), "{name}");
        }
        let dir = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/results"
        ));
        let mut seen = 0;
        for f in std::fs::read_dir(dir).unwrap() {
            let path = f.unwrap().path();
            let l = load(&path).unwrap();
            let e = lookup(l.kind).unwrap();
            let style = crate::output::Style { on: false };
            let (text, page) = (e.render)(&l.value, &style).unwrap();
            assert!(
                !text.is_empty() && page.contains("<html"),
                "{}",
                path.display()
            );
            assert!(
                !(e.figures)(&l.value).unwrap().is_empty(),
                "{}",
                path.display()
            );
            seen += 1;
        }
        assert!(seen >= 5);
    }

    /// Only pair, of the registry's subcommands, takes an interrupt in order (the dispatcher
    /// installs the handlers for it); the others end at once on Ctrl-C, as before.
    #[test]
    fn the_dispatcher_installs_signal_handlers_for_pair_only() {
        for e in ENTRIES {
            if let Some(c) = &e.command {
                assert_eq!(
                    c.orderly_interrupt,
                    matches!(e.kind.as_str(), "pair" | "watch"),
                    "{}",
                    e.kind
                );
            }
        }
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
