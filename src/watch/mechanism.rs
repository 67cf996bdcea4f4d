//! How the tracepoints are opened: the BPF programs (BTF-typed raw tracepoints, untyped raw
//! tracepoints, tracepoint programs) or perf's per-CPU rings, and the one [`Feed`] of decoded
//! events (or counts) a [`super::Session`] reads either way. Which of them is used is chosen in
//! one place, [`super::open`]; this file only opens what it is told to.

use super::events::{self, Decoder, Timed};
use super::{
    EVENT_NAMES, Mechanism, PERF_PERMISSION_LINE, PERMISSION_LINE, WatchSettings, bpf, btf,
    is_denied, kernel_filters, ring,
};
use crate::bpf::{format, tracefs};
use crate::error::bad_input;
use crate::machine::Machine;
use anyhow::Result;

/// The scheduler tracepoints' record layouts (and ids) from tracefs, mounted for the moment in a
/// private mount namespace if it is not (root only: [`tracefs`]); a user who may not read them
/// gets `denied_line`.
pub(super) fn read_formats(root_user: bool, denied_line: &str) -> Result<[format::Format; 4]> {
    let read = |dir: &std::path::Path| -> Result<[format::Format; 4], String> {
        let fmt = |n: &str| {
            tracefs::sched_format(dir, n)
                .map_err(|e| format!("reading the layout of sched:{n}: {e}"))
        };
        Ok([
            fmt("sched_waking")?,
            fmt("sched_wakeup")?,
            fmt("sched_switch")?,
            fmt("sched_migrate_task")?,
        ])
    };
    tracefs::with_tracefs(read).map_err(|e| {
        if root_user {
            anyhow::anyhow!(e)
        } else {
            bad_input(denied_line)
        }
    })
}

/// Why the raw-tracepoint programs were not loaded.
pub(super) enum RawRefusal {
    /// Not allowed to load BPF programs at all.
    Denied(String),
    /// Not usable on this kernel (no BTF, other arguments, refused by the verifier).
    Unusable(String),
}

/// Loads the raw-tracepoint programs for the four tracepoints (in [`EVENT_NAMES`] order):
/// BTF-typed ones where the kernel takes them, else untyped ones (the second value says why
/// the typed ones were not used). Needs the kernel's BTF for the task fields, not tracefs.
pub(super) fn open_raw(
    root: &std::path::Path,
) -> Result<(bpf::Programs, Option<String>), RawRefusal> {
    let possible = bpf::possible_cpus(root).ok_or_else(|| {
        RawRefusal::Unusable("cannot read /sys/devices/system/cpu/possible".into())
    })?;
    let (offsets, typed) = raw_offsets(root).map_err(RawRefusal::Unusable)?;
    let typed_refused = match &typed {
        // Any refusal of the typed programs (a verifier's EACCES included) leaves the untyped
        // ones to try: their refusal is the one that says whether BPF is allowed here.
        Some(ids) => match bpf::Programs::load_raw(&offsets, Some(ids), possible) {
            Ok(p) => return Ok((p, None)),
            Err(e) => format!("they did not load: {e}"),
        },
        None => "the kernel's BTF has no btf_trace typedefs for them".to_string(),
    };
    match bpf::Programs::load_raw(&offsets, None, possible) {
        Ok(p) => Ok((p, Some(typed_refused))),
        Err(e) if is_denied(&e) => Err(RawRefusal::Denied(e.to_string())),
        Err(e) => Err(RawRefusal::Unusable(format!(
            "raw tracepoints did not load: {e}"
        ))),
    }
}

/// Loads tracepoint programs for the four tracepoints, copying each tracefs record.
pub(super) fn open_tracepoint_bpf(
    formats: &[format::Format; 4],
    root: &std::path::Path,
) -> std::io::Result<bpf::Programs> {
    let possible = bpf::possible_cpus(root)
        .ok_or_else(|| std::io::Error::other("cannot read /sys/devices/system/cpu/possible"))?;
    // EVENT_NAMES order: waking, switch, migrate, wakeup.
    let events: Vec<(u64, usize)> = [0, 2, 3, 1]
        .iter()
        .map(|&i| (formats[i].id, bpf::record_size(&formats[i])))
        .collect();
    bpf::Programs::load(&events, possible)
}

/// The task field offsets from the kernel's BTF, once its scheduler tracepoints are checked to
/// pass the arguments the raw-tracepoint programs read (see [`bpf::raw_program`]); with them,
/// the ids of the tracepoints' `btf_trace_<name>` typedefs (in [`EVENT_NAMES`] order) where the
/// BTF has all four, for BTF-typed programs.
pub(super) fn raw_offsets(
    root: &std::path::Path,
) -> Result<(btf::TaskOffsets, Option<[u32; 4]>), String> {
    let path = root.join("sys/kernel/btf/vmlinux");
    // Mapped, not parsed whole: a handful of look-ups need no cache of every kernel type (which
    // took 22 MB and 0.16 CPU-s here).
    let kernel = btf_rs::Btf::from_file_with_backend(&path, btf_rs::Backend::Mmap)
        .map_err(|e| format!("no kernel BTF ({}: {e})", path.display()))?;
    // (tracepoint, arguments, which of them are task pointers)
    let expected: [(&str, usize, &[usize]); 4] = [
        ("sched_waking", 1, &[0]),
        ("sched_switch", 4, &[1, 2]),
        ("sched_migrate_task", 2, &[0]),
        ("sched_wakeup", 1, &[0]),
    ];
    for (name, n, tasks) in expected {
        let got = btf::tracepoint_args(&kernel, name)?;
        if got != n
            || !tasks
                .iter()
                .all(|&i| btf::tracepoint_arg_is_pointer(&kernel, name, i))
        {
            return Err(format!(
                "{name} passes {got} arguments here, not the {n} the raw-tracepoint program reads"
            ));
        }
    }
    let offsets = btf::task_offsets(&kernel)?;
    let ids: Option<Vec<u32>> = EVENT_NAMES
        .iter()
        .map(|n| btf::tracepoint_typedef_id(&kernel, n))
        .collect();
    Ok((offsets, ids.and_then(|v| v.try_into().ok())))
}

/// Opens the perf tracepoint events, with in-kernel filters where the target allows them.
#[allow(clippy::type_complexity)]
pub(super) fn open_perf(
    machine: &Machine,
    s: &WatchSettings,
    decoder: &Decoder,
    cpus: &[u32],
) -> Result<(
    ring::Tracer,
    Option<([String; 4], String)>,
    Vec<ring::EventSpec>,
)> {
    // 4 MiB per CPU, but at most ~64 MiB in all on large machines (a power of two per ring).
    let budget = (16384 / cpus.len().max(1)).max(16);
    let pages = s.ring_pages.min(1 << budget.ilog2());
    let mut filters = if s.kernel_filter && s.command.is_none() {
        kernel_filters(&s.target, &machine.root)
    } else {
        None
    };
    let ids = [
        decoder.ids[0],
        decoder.ids[2],
        decoder.ids[3],
        decoder.ids[1],
    ];
    let spec_list = |filters: &Option<([String; 4], String)>| -> Vec<ring::EventSpec> {
        (0..4)
            .map(|i| ring::EventSpec {
                id: ids[i],
                sampled: i < 3 || s.sample_wakeups,
                filter: filters.as_ref().map(|(f, _)| f[i].clone()),
            })
            .collect()
    };
    let mut specs = spec_list(&filters);
    let mut opened = ring::Tracer::open(&specs, cpus, pages);
    if let Err(e) = &opened
        && filters.is_some()
        && !is_denied(e)
    {
        // A kernel that refuses the filter (an older filter grammar) is watched unfiltered.
        filters = None;
        specs = spec_list(&filters);
        opened = ring::Tracer::open(&specs, cpus, pages);
    }
    let tracer = opened.map_err(|e| {
        if is_denied(&e) {
            bad_input(if s.mechanism == Mechanism::Perf {
                PERF_PERMISSION_LINE
            } else {
                PERMISSION_LINE
            })
        } else {
            anyhow::anyhow!("perf_event_open of the scheduler tracepoints: {e}")
        }
    })?;
    Ok((tracer, filters, specs))
}

/// Where the records come from: perf's per-CPU rings, or the BPF programs' ring; with the
/// decoder of tracefs record layouts where the records are those (raw-tracepoint programs
/// write their own fixed records, and need no tracefs).
pub enum Feed {
    Perf(ring::Tracer, Decoder),
    Bpf(bpf::Programs, Option<Decoder>),
    /// Cumulative counts (the in-kernel aggregation, perf aggregated in user space, the test
    /// double): nothing to drain.
    Counts(Box<dyn crate::wakeups::Source>),
}

impl Feed {
    pub(super) fn enable(&self) -> std::io::Result<()> {
        match self {
            Feed::Perf(t, _) => t.enable(),
            Feed::Bpf(p, _) => p.enable(),
            Feed::Counts(_) => Ok(()),
        }
    }

    pub(super) fn disable(&mut self) {
        match self {
            Feed::Perf(t, _) => t.disable(),
            Feed::Bpf(p, _) => p.disable(),
            // Detached when the session drops it, after its last snapshot.
            Feed::Counts(_) => {}
        }
    }

    /// Decodes every record read now into `out`; returns the bytes that did not form a record.
    pub(super) fn drain(&mut self, out: &mut Vec<Timed>, tally: &mut Tally) -> u64 {
        match self {
            Feed::Perf(t, d) => t.drain(|cpu, r| collect(d, cpu, r, out, tally)) as u64,
            Feed::Counts(_) => 0,
            Feed::Bpf(p, d) => {
                p.drain(|r| {
                    let event = match d {
                        None => bpf::decode_raw(&r),
                        Some(d) => d.decode_slot(r.slot, r.tid, r.cpu, r.raw, false),
                    };
                    if let Some(event) = event {
                        tally.record(r.cpu, r.time_ns, event, out);
                    }
                });
                0
            }
        }
    }

    pub(super) fn last_fill(&self) -> f64 {
        match self {
            Feed::Perf(t, _) => t.last_fill,
            Feed::Bpf(p, _) => p.last_fill,
            Feed::Counts(_) => 0.0,
        }
    }

    /// Per CPU, how many times each event fired (in [`EVENT_NAMES`] order); the BPF ring's
    /// drops go into the tally's losses.
    pub(super) fn counts(&self, cpus: &[u32], tally: &mut Tally) -> Vec<(u32, Vec<Option<u64>>)> {
        match self {
            Feed::Perf(t, _) => t.counts(),
            Feed::Counts(_) => cpus.iter().map(|&c| (c, vec![None; 4])).collect(),
            Feed::Bpf(p, _) => match p.counts() {
                Ok(per_cpu) => cpus
                    .iter()
                    .map(|&cpu| {
                        let c = per_cpu.get(cpu as usize).copied().unwrap_or_default();
                        if c[bpf::DROPPED_SLOT as usize] > 0 {
                            *tally.lost.entry(cpu).or_default() += c[bpf::DROPPED_SLOT as usize];
                        }
                        (cpu, c[..4].iter().map(|v| Some(*v)).collect())
                    })
                    .collect(),
                Err(_) => cpus.iter().map(|&c| (c, vec![None; 4])).collect(),
            },
        }
    }
}

/// Records delivered, per ring CPU and event (in [`EVENT_NAMES`] order), and losses the
/// kernel reported per ring.
#[derive(Debug, Default)]
pub struct Tally {
    pub delivered: std::collections::BTreeMap<u32, [u64; 4]>,
    /// Per CPU: switches delivered into the idle task and out of it (they alternate, so the two
    /// differ by at most one when every switch is delivered).
    pub idle: std::collections::BTreeMap<u32, (u64, u64)>,
    pub lost: std::collections::BTreeMap<u32, u64>,
    /// Thread to process, from the samples drained since the last [`Tally::take_threads`]
    /// (perf records carry both of the task that ran).
    pub threads: std::collections::HashMap<i32, i32>,
}

impl Tally {
    /// Counts one decoded event delivered from `cpu` and queues it for the analysis.
    pub(super) fn record(
        &mut self,
        cpu: u32,
        time_ns: u64,
        event: events::Event,
        out: &mut Vec<Timed>,
    ) {
        let i = match event {
            events::Event::Waking { .. } => 0,
            events::Event::Switch { .. } => 1,
            events::Event::Migrate { .. } => 2,
            events::Event::Wakeup { .. } => 3,
        };
        self.delivered.entry(cpu).or_default()[i] += 1;
        if let events::Event::Switch {
            prev_tid, next_tid, ..
        } = event
        {
            let e = self.idle.entry(cpu).or_default();
            e.0 += u64::from(next_tid == 0);
            e.1 += u64::from(prev_tid == 0);
        }
        out.push(Timed { time_ns, event });
    }
}

pub(super) fn collect(
    d: &Decoder,
    ring_cpu: u32,
    r: ring::RawRecord<'_>,
    out: &mut Vec<Timed>,
    tally: &mut Tally,
) {
    match r {
        ring::RawRecord::Sample {
            pid,
            tid,
            time_ns,
            cpu,
            raw,
        } => {
            if tid > 0 && pid > 0 {
                tally.threads.insert(tid, pid);
            }
            if let Some(event) = d.decode(tid, cpu, raw) {
                tally.record(ring_cpu, time_ns, event, out);
            }
        }
        ring::RawRecord::Lost(n) => *tally.lost.entry(ring_cpu).or_default() += n,
    }
}
