//! The one front door to the scheduler's wakeups: `cpulab watch`, `doctor --comm/--pid` and the
//! exporter all open their source here, with one [`Mechanism`] and one selector.
//!
//! A consumer says what it needs ([`Request`]: every event of a watch, or the cumulative counts
//! the exporter publishes) and how it wants them read ([`Mechanism`]); [`crate::wakeups::plan`]
//! turns the two into the ways to try, in order, and [`open`] tries them: the first that opens
//! is used, and why each earlier one was refused is kept ([`Refusals`], the notes) so that the
//! report, the progress lines and the exporter's start-up can say it. A refusal the user can fix
//! (no permission, a mechanism that cannot serve the request) is one line, exit 2, before
//! anything is attached.
//!
//! The sources themselves live beside this file, one per way: [`super::mechanism`] (per-event
//! records from BPF rings or perf rings), [`super::source`] (the in-kernel aggregation),
//! [`super::perf_source`] (perf aggregated in user space) and [`super::fake`] (the test double).
//! None of them imports this file or another source's opener.

use super::mechanism::{self, Feed, RawRefusal};
use super::perf_source::PerfSource;
use super::source::BpfSource;
use super::{
    BPF_PERMISSION_LINE, BPF_TRACEPOINT_PERMISSION_LINE, PERF_PERMISSION_LINE, PERMISSION_LINE,
    Target, WatchSettings, is_denied, ring,
};
use crate::error::bad_input;
use crate::machine::Machine;
use crate::wakeups::{Mechanism, Shape, Source, SourceOptions, Way, plan};
use anyhow::Result;

/// What a consumer needs of the wakeups.
pub enum Request<'a> {
    /// Every event of a watch (its target, filters and ring size), or, with
    /// `--mechanism bpf-counts`, the in-kernel counts of its target.
    Events(&'a WatchSettings),
    /// Cumulative counts per target (the exporter).
    Counts(&'a SourceOptions),
}

impl Request<'_> {
    fn mechanism(&self) -> Mechanism {
        match self {
            Request::Events(s) => s.mechanism,
            Request::Counts(o) => o.mechanism,
        }
    }

    fn shape(&self) -> Shape {
        match self {
            Request::Events(_) => Shape::Events,
            Request::Counts(_) => Shape::Counts,
        }
    }
}

/// Why the ways tried before the one used were not used (for the report's mechanism line).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// BPF may not be loaded here at all (then no other BPF way is tried).
    pub bpf: Option<String>,
    /// The raw-tracepoint programs could not be used.
    pub raw: Option<String>,
    /// The BTF-typed raw-tracepoint programs could not be used (the untyped ones were).
    pub typed: Option<String>,
}

/// An opened source, with what was refused on the way and the lines to tell the user.
pub struct Opened {
    pub feed: Feed,
    pub refusals: Refusals,
    /// perf's in-kernel filters and what they keep, where perf was used with them.
    pub filters: Option<([String; 4], String)>,
    /// What each event costs a record, in [`super::EVENT_NAMES`] order.
    pub specs: Vec<ring::EventSpec>,
    /// A fallback taken and why, for the user (progress lines, the exporter's log).
    pub notes: Vec<String>,
}

/// Opens the wakeups `req` needs, as its mechanism asks: the one selector of watch, doctor and
/// the exporter.
pub fn open(machine: &Machine, req: &Request<'_>) -> Result<Opened> {
    let mechanism = req.mechanism();
    let perf_only = matches!(req, Request::Events(s) if s.dump_records.is_some());
    let ways = plan(mechanism, req.shape(), perf_only).map_err(bad_input)?;
    check(machine, req)?;
    let mut o = Opening {
        machine,
        req,
        mechanism,
        refusals: Refusals::default(),
        notes: Vec::new(),
        formats: None,
        filters: None,
        specs: None,
    };
    let last = ways.len().saturating_sub(1);
    for (i, &way) in ways.iter().enumerate() {
        if way.is_bpf() && o.refusals.bpf.is_some() {
            if i == last {
                // Asked for BPF and not allowed to load it: the permission line.
                return Err(bad_input(BPF_PERMISSION_LINE));
            }
            continue;
        }
        if let Some(feed) = o.try_way(way, i == last)? {
            return Ok(Opened {
                feed,
                refusals: o.refusals,
                filters: o.filters,
                specs: o.specs.unwrap_or_else(record_specs),
                notes: o.notes,
            });
        }
    }
    // invariant: `plan` never returns no way, and the last one opens or returns its error.
    anyhow::bail!("no way to read the wakeups with --mechanism {mechanism}")
}

/// The cumulative counts `opts` asks for: [`open`] for the exporter (and the live tests).
pub fn open_source(machine: &Machine, opts: &SourceOptions) -> Result<Box<dyn Source>> {
    match open(machine, &Request::Counts(opts))?.feed {
        Feed::Counts(source) => Ok(source),
        // invariant: `plan` gives a counts request only counts ways.
        _ => anyhow::bail!("--mechanism {} gave no counts", opts.mechanism),
    }
}

/// Bad requests the user can fix, before anything is attached.
fn check(machine: &Machine, req: &Request<'_>) -> Result<()> {
    match req {
        Request::Events(s) => {
            if s.mechanism == Mechanism::BpfCounts && s.command.is_some() {
                return Err(bad_input(
                    "--mechanism bpf-counts watches named targets, not -- COMMAND; give --comm, --pid or --cgroup, or another mechanism",
                ));
            }
        }
        Request::Counts(opts) => {
            let cgroup_root = super::slots::cgroup_root(&machine.root);
            for c in &opts.cgroups {
                super::slots::check_cgroup(&cgroup_root, c).map_err(bad_input)?;
            }
            for &pid in &opts.pids {
                if !machine.root.join("proc").join(pid.to_string()).is_dir() {
                    return Err(bad_input(format!(
                        "no process with pid {pid} (it may have exited); see `ps -e`"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// With BPF every event costs a record (the ids are perf's concern).
fn record_specs() -> Vec<ring::EventSpec> {
    (0..4)
        .map(|_| ring::EventSpec {
            id: 0,
            sampled: true,
            filter: None,
        })
        .collect()
}

/// The aggregation's targets for a watch's target (a command's descendants are not followed:
/// its own process only).
fn counts_options(target: &Target) -> SourceOptions {
    let mut o = SourceOptions {
        max_targets: 64,
        mechanism: Mechanism::Bpf,
        // The whole machine: the busiest process groups, named by command as watch's report
        // names processes.
        group_by: crate::wakeups::GroupBy::Comm,
        ..Default::default()
    };
    match target {
        Target::Comms(c) => o.comms = c.iter().cloned().collect(),
        Target::Pids(p) => o.pids = p.iter().copied().collect(),
        Target::Cgroup(d) => o.cgroups = vec![d.to_string_lossy().to_string()],
        Target::Command(pid) => o.pids = vec![*pid],
        Target::All => {}
    }
    o
}

/// The state of one [`open`]: what was refused so far.
struct Opening<'a> {
    machine: &'a Machine,
    req: &'a Request<'a>,
    mechanism: Mechanism,
    refusals: Refusals,
    notes: Vec<String>,
    /// The tracefs record layouts, read once for the ways that need them.
    formats: Option<[crate::bpf::format::Format; 4]>,
    /// What perf was opened with (its filters and what each event costs).
    filters: Option<([String; 4], String)>,
    specs: Option<Vec<ring::EventSpec>>,
}

impl Opening<'_> {
    /// The line for a user who may not open what `mechanism` needs.
    fn denied_line(&self) -> &'static str {
        match self.mechanism {
            Mechanism::Bpf => BPF_PERMISSION_LINE,
            Mechanism::BpfTracepoint => BPF_TRACEPOINT_PERMISSION_LINE,
            Mechanism::Perf => PERF_PERMISSION_LINE,
            _ => PERMISSION_LINE,
        }
    }

    /// The tracefs record layouts (root, or a one-line refusal), and their decoder.
    fn formats(&mut self) -> Result<([crate::bpf::format::Format; 4], super::events::Decoder)> {
        let formats = match &self.formats {
            Some(f) => f.clone(),
            None => {
                let root_user = nix::unistd::geteuid().is_root();
                mechanism::read_formats(root_user, self.denied_line())?
            }
        };
        let d = super::events::Decoder::new(&formats[0], &formats[1], &formats[2], &formats[3])
            .map_err(|e| anyhow::anyhow!(e))?;
        self.formats = Some(formats.clone());
        Ok((formats, d))
    }

    /// Tries one way: `Some` when it opened, `None` when it was refused and a later way may
    /// serve (the reason kept), an error when it is the last or the refusal is final.
    fn try_way(&mut self, way: Way, last: bool) -> Result<Option<Feed>> {
        match way {
            Way::EventsRaw => Ok(self.events_raw()),
            Way::EventsTracepoint => self.events_tracepoint(last),
            Way::EventsPerf => self.events_perf().map(Some),
            Way::CountsBpf => self.counts_bpf(last),
            Way::CountsPerf => {
                let Request::Counts(opts) = self.req else {
                    anyhow::bail!("perf counts serve the exporter's requests only");
                };
                let mut source = PerfSource::open(self.machine, opts)?;
                source.fell_back_because(self.refusals.bpf.clone());
                Ok(Some(Feed::Counts(Box::new(source))))
            }
            Way::CountsFake => {
                let Request::Counts(opts) = self.req else {
                    anyhow::bail!("the test double serves the exporter's requests only");
                };
                let cpus = self.machine.allowed.to_vec();
                let classes: Vec<String> = self
                    .machine
                    .topology
                    .classes_among(&cpus)
                    .into_iter()
                    .map(|c| c.as_str().to_string())
                    .collect();
                Ok(Some(Feed::Counts(Box::new(super::fake::FakeSource::new(
                    opts, &classes,
                )))))
            }
        }
    }

    /// BPF on the raw tracepoints: needs the kernel's BTF, not tracefs.
    fn events_raw(&mut self) -> Option<Feed> {
        match mechanism::open_raw(&self.machine.root) {
            Ok((p, why)) => {
                self.refusals.typed = why;
                Some(Feed::Bpf(p, None))
            }
            Err(RawRefusal::Denied(e)) => {
                self.refusals.bpf = Some(e);
                None
            }
            Err(RawRefusal::Unusable(why)) => {
                self.refusals.raw = Some(why);
                None
            }
        }
    }

    /// BPF programs on the tracepoints, copying tracefs records.
    fn events_tracepoint(&mut self, last: bool) -> Result<Option<Feed>> {
        if self.mechanism == Mechanism::BpfTracepoint {
            self.refusals.raw = Some("--mechanism bpf-tracepoint".into());
        }
        let (formats, decoder) = self.formats()?;
        match mechanism::open_tracepoint_bpf(&formats, &self.machine.root) {
            Ok(p) => {
                if let Some(why) = self
                    .refusals
                    .raw
                    .as_ref()
                    .filter(|_| self.mechanism != Mechanism::BpfTracepoint)
                {
                    self.notes.push(format!(
                        "BPF tracepoint programs instead of raw tracepoints: {why}"
                    ));
                }
                Ok(Some(Feed::Bpf(p, Some(decoder))))
            }
            Err(e) if last => Err(if is_denied(&e) {
                bad_input(self.denied_line())
            } else {
                bad_input(format!(
                    "--mechanism {}: the BPF programs did not load here ({e}); use --mechanism perf",
                    self.mechanism
                ))
            }),
            Err(e) => {
                self.refusals.bpf = Some(e.to_string());
                Ok(None)
            }
        }
    }

    /// perf's per-CPU sample rings, with in-kernel filters where the target allows them.
    fn events_perf(&mut self) -> Result<Feed> {
        let Request::Events(s) = self.req else {
            anyhow::bail!("perf's rings serve a watch's requests only");
        };
        let (_, decoder) = self.formats()?;
        if let Some(why) = &self.refusals.bpf {
            self.notes.push(format!(
                "reading the tracepoints with perf: BPF did not load ({why})"
            ));
        }
        let cpus = self.machine.topology.online.to_vec();
        let (tracer, filters, specs) = mechanism::open_perf(self.machine, s, &decoder, &cpus)?;
        self.filters = filters;
        self.specs = Some(specs);
        Ok(Feed::Perf(tracer, decoder))
    }

    /// The in-kernel aggregation: the exporter's counts, or a watch's `--mechanism bpf-counts`.
    fn counts_bpf(&mut self, last: bool) -> Result<Option<Feed>> {
        let watch_opts;
        let opts = match self.req {
            Request::Counts(o) => *o,
            Request::Events(s) => {
                watch_opts = counts_options(&s.target);
                &watch_opts
            }
        };
        match BpfSource::open(self.machine, opts) {
            Ok(s) => Ok(Some(Feed::Counts(Box::new(s)))),
            Err(e) if !last => {
                self.refusals.bpf = Some(e.to_string());
                Ok(None)
            }
            Err(e) if is_denied(&e) => Err(bad_input(BPF_PERMISSION_LINE)),
            Err(e) => Err(bad_input(format!(
                "--mechanism {}: the BPF programs did not load here ({e}); use --mechanism perf",
                self.mechanism
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counts_request_refuses_a_mechanism_without_counts_in_one_line() {
        let machine = Machine::detect(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/kvm-guest"
        )))
        .unwrap();
        let opts = SourceOptions {
            mechanism: Mechanism::BpfTracepoint,
            ..Default::default()
        };
        let e = open_source(&machine, &opts).err().unwrap();
        assert_eq!(crate::error::exit_code(&e), 2, "{e:#}");
        let line = format!("{e:#}");
        assert!(
            line.contains("bpf-tracepoint") && !line.contains('\n'),
            "{line}"
        );
    }

    #[test]
    fn the_test_double_counts_the_hosts_classes_through_the_front_door() {
        let machine = Machine::detect(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/kvm-guest"
        )))
        .unwrap();
        let opts = SourceOptions {
            comms: vec!["postgres".into()],
            max_targets: 4,
            mechanism: Mechanism::Fake,
            ..Default::default()
        };
        let mut s = open_source(&machine, &opts).unwrap();
        assert_eq!(s.mechanism(), "fake");
        assert_eq!(s.fallback_reason(), None);
        let snap = s.snapshot().unwrap();
        let classes: Vec<&str> = snap.targets[0].classes.keys().map(|c| c.as_str()).collect();
        let cpus = machine.allowed.to_vec();
        let want: Vec<&str> = machine
            .topology
            .classes_among(&cpus)
            .into_iter()
            .map(|c| c.as_str())
            .collect();
        let mut want_sorted = want.clone();
        want_sorted.sort_unstable();
        assert_eq!(classes, want_sorted);
        assert!(
            want.len() >= 2,
            "a 2-vCPU guest has same-cpu and one class away"
        );
    }

    #[test]
    fn counts_options_follow_the_watch_target() {
        let o = counts_options(&Target::Command(42));
        assert_eq!(o.pids, [42]);
        assert_eq!(o.mechanism, Mechanism::Bpf);
        let o = counts_options(&Target::Comms(["a".to_string()].into_iter().collect()));
        assert_eq!(o.comms, ["a"]);
        assert!(counts_options(&Target::All).comms.is_empty());
    }
}
