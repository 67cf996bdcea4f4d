//! `cpulab compare A.json B.json`: every figure the two results share, side by side, with a
//! significance test on the raw samples. See [`crate::compare`] for the method.

use super::Global;
use crate::compare::{self, text};
use crate::emit::{Emitted, Emitter, Sink};
use crate::error::bad_input;
use crate::registry;
use crate::report::envelope::{self, Envelope, Kind};
use anyhow::Result;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab compare before.json after.json\n  \
    cpulab compare before.json after.json --fail-on-regression 5\n  \
    cpulab compare before.json after.json --json > comparison.json")]
pub struct Args {
    /// The earlier (or reference) result, written by a cpulab command's --json, or a run of
    /// the history as `@ID` (`cpulab history list`).
    pub a: PathBuf,
    /// The later (or candidate) result, of the same kind (a file or `@ID`).
    pub b: PathBuf,
    /// Exit with code 1 when a figure got worse by more than PCT percent beyond noise (0 to
    /// 1000; 0: any figure worse beyond noise).
    #[arg(long, value_name = "PCT")]
    pub fail_on_regression: Option<f64>,
    /// Also list the plain numbers that have no samples and are not judged.
    #[arg(long)]
    pub all: bool,
    /// `--json`.
    #[command(flatten)]
    pub output: crate::emit::JsonArg,
}

pub fn run(args: Args, g: &Global, also: &[&dyn Sink]) -> Result<()> {
    if let Some(p) = args.fail_on_regression {
        crate::units::flag_percent("fail-on-regression", p)?;
    }
    let (an, bn) = (args.a.display().to_string(), args.b.display().to_string());
    let a = super::report::load(&args.a)?;
    let b = super::report::load(&args.b)?;
    check_shape(&a, &args.a)?;
    check_shape(&b, &args.b)?;
    if a.kind != b.kind {
        return Err(bad_input(format!(
            "{} is a `cpulab {}` result but {} is a `cpulab {}` result; compare two results of the same kind",
            args.a.display(),
            a.kind,
            args.b.display(),
            b.kind
        )));
    }
    // Every registered kind (the experiments, doctor and probe) is compared on its typed
    // figures, each with its own direction; a document of the right schema but the wrong shape
    // is bad input here (one line, exit 2). The one exception: a doctor or probe result written
    // before their figures were typed may lack fields the typed result now has (`check_shape`
    // has already refused wrong types); such old files are still compared, by the walk.
    let typed = match registry::lookup(a.kind) {
        Some(entry) => match ((entry.figures)(&a.value), (entry.figures)(&b.value)) {
            (Ok(fa), Ok(fb)) => Some(compare::Typed { a: fa, b: fb }),
            _ if matches!(a.kind, Kind::Doctor | Kind::Probe) => None,
            (Err(e), _) => return Err(bad_input(format!("{an}: {e:#}"))),
            (_, Err(e)) => return Err(bad_input(format!("{bn}: {e:#}"))),
        },
        None => None,
    };
    let c = compare::comparison(
        (&an, &a.value),
        (&bn, &b.value),
        a.kind.as_str(),
        typed,
        args.fail_on_regression,
    );
    // The text depends on flags (`--all`), so it is rendered here; a comparison has no page.
    let result = Emitted::rendered(
        Kind::Compare,
        serde_json::to_value(Envelope::new(Kind::Compare, &c))?,
        text::render(&c, args.all, args.fail_on_regression),
        None,
    );
    Emitter::stdout(args.output.json, g.quiet, also).emit(&result)?;
    match (args.fail_on_regression, c.regressions.len()) {
        (Some(pct), n) if n > 0 => anyhow::bail!(
            "{n} figure(s) got worse by more than {pct}% beyond noise: {}",
            c.regressions.join(", ")
        ),
        _ => Ok(()),
    }
}

/// Reads a loaded document into its kind's typed result, so a field of the wrong type (a string
/// where a number belongs, an object for a list) is one line and exit 2 instead of a comparison
/// of whatever the walk finds. The registry's kinds are checked when their figures are read; for
/// doctor and probe, missing
/// fields are tolerated: compare reads the figures that are present, and results of older cpulab
/// versions lack newer fields.
fn check_shape(doc: &envelope::Loaded, path: &std::path::Path) -> Result<()> {
    fn typed<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Result<(), String> {
        match serde_json::from_value::<T>(v.clone()) {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().starts_with("missing field") => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }
    let v = &doc.value;
    let r = match doc.kind {
        Kind::Doctor => typed::<crate::doctor::DoctorReport>(v),
        Kind::Probe => typed::<crate::probe::Probe>(v),
        // Every other kind is the registry's, read into its typed result for its figures once
        // the two kinds are known to match; a comparison is output only, and comparing two of
        // them compares their figures.
        _ => Ok(()),
    };
    r.map_err(|e| {
        bad_input(format!(
            "{} is a `cpulab {}` result of the right schema but the wrong shape ({e}); write it again with `cpulab {} --json`",
            path.display(),
            doc.kind,
            doc.kind
        ))
    })
}
