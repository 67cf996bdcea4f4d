//! The KVM programs of [`super::kvm`] loaded and attached for a window, and their tables read at
//! its end. Everything is a descriptor of this process: the programs stop when the links close
//! (at [`KvmTracing::finish`], or however cpulab ends), and nothing is pinned or left mounted
//! (tracefs, where it is not mounted, is read in a private mount namespace of one thread).

use super::kvm::{self, KvmEvents, Maps, ThreadCounts};
use crate::bpf::btf;
use crate::bpf::format::Format;
use crate::bpf::mapped::MappedArray;
use crate::bpf::sys;
use crate::bpf::tracefs;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};

/// The programs attached, until [`KvmTracing::finish`].
pub struct KvmTracing {
    /// Mapped: read at once, and a dead thread's entry freed in place ([`Self::forget_dead`]).
    threads: MappedArray,
    exits: MappedArray,
    stats: OwnedFd,
    links: Vec<OwnedFd>,
    _progs: Vec<OwnedFd>,
    possible_cpus: usize,
    /// Why exits are not counted: `kvm_exit` missing, or refused (none when it attached).
    exit_refused: Option<String>,
    /// How the programs are attached, for the report's conditions.
    source: String,
    /// Open while the kernel times the programs (`--bpf-program-costs`).
    timing: Option<OwnedFd>,
    /// Each program's tracepoint, in `_progs` order.
    prog_names: Vec<&'static str>,
}

/// What the window counted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KvmReading {
    pub threads: BTreeMap<u32, ThreadCounts>,
    pub exit_reasons: BTreeMap<u32, BTreeMap<u32, u64>>,
    /// Each program's runs over every CPU ([`kvm::TRACEPOINTS`] order).
    pub runs: [u64; 4],
    /// Events not counted: a thread whose bucket was full, an exit whose reason bucket was.
    pub lost_threads: u64,
    pub lost_exits: u64,
    /// Why exits are not counted, where they are not.
    pub exits_unavailable: Option<String>,
    /// How the programs were attached: raw tracepoints, or perf tracepoint events and why.
    pub source: String,
    /// Each program's runs and run time, as the kernel timed them; empty when not asked.
    pub program_costs: Vec<crate::wakeups::ProgramCost>,
}

impl KvmReading {
    /// The events of thread `tid`: all zero when it fired none while the programs ran (a
    /// measured zero), `exits` with why where they are not counted.
    pub fn events(&self, tid: u32) -> KvmEvents {
        let c = self.threads.get(&tid).cloned().unwrap_or_default();
        let reasons = self.exit_reasons.get(&tid).cloned().unwrap_or_default();
        KvmEvents::of(
            &c,
            reasons,
            self.exits_unavailable.as_deref().map_or(Ok(()), Err),
        )
    }
}

fn formats(dir: &std::path::Path) -> Result<[Option<Format>; 4], String> {
    let mut out: [Option<Format>; 4] = Default::default();
    for (slot, name) in kvm::TRACEPOINTS.iter().enumerate() {
        out[slot] = tracefs::find_format(dir, "kvm", name)?;
    }
    Ok(out)
}

/// Whether the kernel's BTF passes each raw tracepoint the arguments the raw programs read
/// ([`kvm::RAW_ARGS`]: their number, and each an integer of its width); the error says where
/// it does not.
fn raw_checked(root: &std::path::Path) -> Result<(), String> {
    let path = root.join("sys/kernel/btf/vmlinux");
    let kernel = btf_rs::Btf::from_file_with_backend(&path, btf_rs::Backend::Mmap)
        .map_err(|e| format!("no kernel BTF ({}: {e})", path.display()))?;
    for (tp, args) in kvm::RAW_ARGS {
        let n = btf::tracepoint_args(&kernel, tp)?;
        if n != args.len() {
            return Err(format!(
                "{tp} passes {n} arguments here, not the {} the raw program reads",
                args.len()
            ));
        }
        for (i, (name, size)) in args.iter().enumerate() {
            if btf::tracepoint_arg_int_size(&kernel, tp, i) != Some(*size) {
                return Err(format!(
                    "{tp}'s argument {} (`{name}`) is not an integer of {size} bytes in the BTF",
                    i + 1
                ));
            }
        }
    }
    Ok(())
}

/// One line for why the programs could not load, naming the fix where there is one.
fn refusal(what: &str, e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => format!(
            "{what}: {e}: run as root, or grant CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon+ep $(which cpulab))"
        ),
        _ => format!("{what}: {e}"),
    }
}

impl KvmTracing {
    /// Reads the tracepoints' formats, creates the tables, loads the programs and attaches
    /// them; an error is one line saying why KVM's events cannot be counted here.
    /// With `timed`, the kernel times every run of the programs (`BPF_ENABLE_STATS`, for as
    /// long as this lives) and [`KvmReading::program_costs`] says what they cost.
    /// With `fallback`, perf tracepoint events stand in where raw tracepoints cannot be used;
    /// without, that is an error saying why.
    pub fn start(root: &std::path::Path, timed: bool, fallback: bool) -> Result<Self, String> {
        let possible_cpus = crate::bpf::possible_cpus(root)
            .ok_or("the number of possible CPUs is unknown (/sys/devices/system/cpu/possible)")?;
        let map = |kind, value: usize, entries, name| {
            sys::map_create(kind, 4, value as u32, entries, name)
                .map_err(|e| refusal("cannot create a BPF map", &e))
        };
        let mapped = |value: usize, entries, name| {
            MappedArray::create(name, value as u32, entries)
                .map_err(|e| refusal("cannot create a BPF map", &e))
        };
        let threads = mapped(
            kvm::THREAD_BUCKET_BYTES,
            kvm::THREAD_BUCKETS,
            "cpulab_kvm_thr",
        )?;
        let exits = mapped(kvm::EXIT_BUCKET_BYTES, kvm::EXIT_BUCKETS, "cpulab_kvm_exit")?;
        let stats = map(
            sys::BPF_MAP_TYPE_PERCPU_ARRAY,
            8,
            kvm::STATS,
            "cpulab_kvm_stat",
        )?;
        let m = Maps {
            threads: threads.fd().as_raw_fd(),
            exits: exits.fd().as_raw_fd(),
            stats: stats.as_raw_fd(),
        };
        let mut t = Self {
            threads,
            exits,
            stats,
            links: Vec::new(),
            _progs: Vec::new(),
            possible_cpus,
            exit_refused: None,
            source: String::new(),
            timing: None,
            prog_names: Vec::new(),
        };
        if timed {
            t.timing = Some(sys::enable_stats().map_err(|e| {
                refusal(
                    "cannot have the kernel time the BPF programs (BPF_ENABLE_STATS needs CAP_SYS_ADMIN)",
                    &e,
                )
            })?);
        }
        // Raw tracepoints where the BTF says their arguments are what the programs read: the
        // kernel then builds no perf record per event. Else (or if one will not attach) the
        // perf tracepoint events, read at their `format` offsets.
        // (why not, and whether it is this user's privileges: no fallback helps then)
        let raw = raw_checked(root)
            .map_err(|why| (why, false))
            .and_then(|()| t.attach_raw(&m));
        let exit = match raw {
            Ok(()) => {
                t.source = "raw tracepoints (their arguments checked against the kernel's BTF)"
                    .to_string();
                tracefs::with_tracefs(|dir| tracefs::find_format(dir, "kvm", "kvm_exit"))
            }
            Err((why, true)) => return Err(why),
            Err((why, false)) if !fallback => {
                return Err(format!(
                    "KVM's raw tracepoints cannot be used here ({why}); --kvm-events on counts \
                     the events on perf tracepoint events instead, which slow the VMs more \
                     (docs/host.md)"
                ));
            }
            Err((why, false)) => {
                t.links.clear();
                t._progs.clear();
                t.prog_names.clear();
                let [wakeup, ipi, poll, exit] = tracefs::with_tracefs(formats).map_err(|e| {
                    format!("KVM's tracepoints cannot be read from tracefs (root reads them): {e}")
                })?;
                let wakeup = wakeup.ok_or(
                    "this kernel has no kvm:kvm_vcpu_wakeup tracepoint (the kvm module is not loaded)",
                )?;
                let ipi = ipi.ok_or("this kernel has no kvm:kvm_apic_ipi tracepoint")?;
                let poll = poll.ok_or("this kernel has no kvm:kvm_halt_poll_ns tracepoint")?;
                let rec = kvm::Args::Record;
                t.attach(
                    "kvm_vcpu_wakeup",
                    wakeup.id,
                    &kvm::wakeup(&m, rec(&wakeup))?,
                )?;
                t.attach("kvm_apic_ipi", ipi.id, &kvm::ipi(&m))?;
                t.attach(
                    "kvm_halt_poll_ns",
                    poll.id,
                    &kvm::halt_poll(&m, rec(&poll))?,
                )?;
                t.source = format!("perf tracepoint events (not raw tracepoints: {why})");
                Ok(exit)
            }
        };
        t.exit_refused = match exit {
            Err(e) => Some(format!(
                "not available, because kvm:kvm_exit's format cannot be read from tracefs: {e}"
            )),
            Ok(None) => {
                Some("not available, because this kernel has no kvm:kvm_exit tracepoint".into())
            }
            Ok(Some(f)) => match kvm::exit(&m, &f).and_then(|p| t.attach("kvm_exit", f.id, &p)) {
                Ok(()) => None,
                Err(e) => Some(format!(
                    "not available, because kvm:kvm_exit did not attach: {e}"
                )),
            },
        };
        Ok(t)
    }

    /// Frees the entries of threads for which `alive` says no (their thread ended), so that a
    /// long-lived reader (the exporter) never fills the tables with threads long gone. Only an
    /// entry's own thread writes it, so a dead one's is zeroed in place, its tid last: a new
    /// thread can take it only once it is whole zero. (A live thread's entry is never touched.)
    pub fn forget_dead(&self, alive: impl Fn(u32) -> bool) {
        use std::sync::atomic::Ordering;
        let free = |entry: &[std::sync::atomic::AtomicU64], tid: u32| {
            if tid != 0 && !alive(tid) {
                for w in &entry[1..] {
                    w.store(0, Ordering::Relaxed);
                }
                entry[0].store(0, Ordering::Release);
            }
        };
        for e in self.threads.entries().chunks_exact(kvm::ENTRY_WORDS) {
            free(e, e[kvm::W_TID].load(Ordering::Acquire) as u32);
        }
        for e in self.exits.entries().chunks_exact(kvm::EXIT_ENTRY_BYTES / 8) {
            free(e, e[0].load(Ordering::Acquire) as u32);
        }
    }

    /// Loads and attaches the three raw programs (wakeup, IPI, poll window), each to its raw
    /// tracepoint by name.
    /// The error says why, and whether it is this user's privileges.
    fn attach_raw(&mut self, m: &Maps) -> Result<(), (String, bool)> {
        let progs = [
            ("kvm_vcpu_wakeup", kvm::wakeup(m, kvm::Args::Raw)),
            ("kvm_apic_ipi", Ok(kvm::ipi(m))),
            ("kvm_halt_poll_ns", kvm::halt_poll(m, kvm::Args::Raw)),
        ];
        let denied =
            |e: &std::io::Error| matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES));
        for (name, insns) in progs {
            let insns = insns.map_err(|e| (e, false))?;
            let prog = sys::prog_load(
                &insns,
                "cpulab_kvm",
                sys::BPF_PROG_TYPE_RAW_TRACEPOINT,
                None,
            )
            .map_err(|e| {
                let why = refusal(&format!("cannot load the raw program for {name}"), &e);
                (why, denied(&e))
            })?;
            let link = sys::raw_attach(Some(name), &prog).map_err(|e| {
                let why = refusal(&format!("cannot attach to raw tracepoint {name}"), &e);
                (why, denied(&e))
            })?;
            self._progs.push(prog);
            self.links.push(link);
            self.prog_names.push(name);
        }
        Ok(())
    }

    fn attach(
        &mut self,
        name: &'static str,
        id: u64,
        insns: &[crate::bpf::insn::Insn],
    ) -> Result<(), String> {
        let prog = sys::prog_load(insns, "cpulab_kvm", sys::BPF_PROG_TYPE_TRACEPOINT, None)
            .map_err(|e| refusal(&format!("cannot load the program for kvm:{name}"), &e))?;
        let link = sys::attach(id, &prog)
            .map_err(|e| refusal(&format!("cannot attach to kvm:{name}"), &e))?;
        self._progs.push(prog);
        self.links.push(link);
        self.prog_names.push(name);
        Ok(())
    }

    /// Detaches the programs (nothing is counted after this returns) and reads the tables.
    pub fn finish(mut self) -> Result<KvmReading, String> {
        self.links.clear();
        self.read()
    }

    /// What the tables hold now, the programs still attached: every count since they were
    /// (for a thread whose entry [`Self::forget_dead`] freed, since it took one again).
    pub fn read(&self) -> Result<KvmReading, String> {
        let read = |e: std::io::Error| format!("cannot read KVM's counts back: {e}");
        let mut r = KvmReading::default();
        let words = |m: &MappedArray| -> Vec<u8> {
            m.entries()
                .iter()
                .flat_map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_ne_bytes())
                .collect()
        };
        for bucket in words(&self.threads).chunks_exact(kvm::THREAD_BUCKET_BYTES) {
            r.threads.extend(kvm::decode_threads(bucket));
        }
        for bucket in words(&self.exits).chunks_exact(kvm::EXIT_BUCKET_BYTES) {
            for (tid, reason, n) in kvm::decode_exits(bucket) {
                *r.exit_reasons
                    .entry(tid)
                    .or_default()
                    .entry(reason)
                    .or_default() += n;
            }
        }
        let mut stats = [0u64; kvm::STATS as usize];
        let mut values = vec![0u8; 8 * self.possible_cpus];
        for (slot, total) in stats.iter_mut().enumerate() {
            sys::map_lookup(&self.stats, &(slot as u32).to_ne_bytes(), &mut values)
                .map_err(read)?;
            *total = values
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
                .sum();
        }
        r.runs.copy_from_slice(&stats[..4]);
        r.source = self.source.clone();
        if self.timing.is_some() {
            for (p, name) in self._progs.iter().zip(&self.prog_names) {
                let (runs, run_ns) = sys::prog_run_stats(p).map_err(read)?;
                r.program_costs.push(crate::wakeups::ProgramCost {
                    program: name.to_string(),
                    runs,
                    run_ns,
                });
            }
        }
        r.lost_threads = stats[kvm::LOST_THREAD as usize];
        r.lost_exits = stats[kvm::LOST_EXIT as usize];
        r.exits_unavailable = match &self.exit_refused {
            Some(why) => Some(why.clone()),
            None if r.runs[kvm::RUNS_EXIT as usize] == 0 => Some(
                "not available, because kvm:kvm_exit was attached and never fired in the window \
                 (a KVM that runs guests without VMX/SVM, such as kvm_pvm, does not trace exits)"
                    .into(),
            ),
            None => None,
        };
        Ok(r)
    }
}
