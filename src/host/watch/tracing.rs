//! The KVM programs of [`super::kvm`] loaded and attached for a window, and their tables read at
//! its end. Everything is a descriptor of this process: the programs stop when the links close
//! (at [`KvmTracing::finish`], or however cpulab ends), and nothing is pinned or left mounted
//! (tracefs, where it is not mounted, is read in a private mount namespace of one thread).

use super::kvm::{self, KvmEvents, Maps, ThreadCounts};
use crate::bpf::format::Format;
use crate::bpf::sys;
use crate::bpf::tracefs;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};

/// The programs attached, until [`KvmTracing::finish`].
pub struct KvmTracing {
    threads: OwnedFd,
    exits: OwnedFd,
    stats: OwnedFd,
    links: Vec<OwnedFd>,
    _progs: Vec<OwnedFd>,
    possible_cpus: usize,
    /// Why exits are not counted: `kvm_exit` missing, or refused (none when it attached).
    exit_refused: Option<String>,
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
    pub fn start(root: &std::path::Path) -> Result<Self, String> {
        let possible_cpus = crate::bpf::possible_cpus(root)
            .ok_or("the number of possible CPUs is unknown (/sys/devices/system/cpu/possible)")?;
        let [wakeup, ipi, poll, exit] = tracefs::with_tracefs(formats).map_err(|e| {
            format!("KVM's tracepoints cannot be read from tracefs (root reads them): {e}")
        })?;
        let wakeup = wakeup.ok_or(
            "this kernel has no kvm:kvm_vcpu_wakeup tracepoint (the kvm module is not loaded)",
        )?;
        let ipi = ipi.ok_or("this kernel has no kvm:kvm_apic_ipi tracepoint")?;
        let poll = poll.ok_or("this kernel has no kvm:kvm_halt_poll_ns tracepoint")?;
        let map = |kind, value: usize, entries, name| {
            sys::map_create(kind, 4, value as u32, entries, name)
                .map_err(|e| refusal("cannot create a BPF map", &e))
        };
        let threads = map(
            sys::BPF_MAP_TYPE_ARRAY,
            kvm::THREAD_BUCKET_BYTES,
            kvm::THREAD_BUCKETS,
            "cpulab_kvm_thr",
        )?;
        let exits = map(
            sys::BPF_MAP_TYPE_ARRAY,
            kvm::EXIT_BUCKET_BYTES,
            kvm::EXIT_BUCKETS,
            "cpulab_kvm_exit",
        )?;
        let stats = map(
            sys::BPF_MAP_TYPE_PERCPU_ARRAY,
            8,
            kvm::STATS,
            "cpulab_kvm_stat",
        )?;
        let m = Maps {
            threads: threads.as_raw_fd(),
            exits: exits.as_raw_fd(),
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
        };
        t.attach("kvm_vcpu_wakeup", wakeup.id, &kvm::wakeup(&m, &wakeup)?)?;
        t.attach("kvm_apic_ipi", ipi.id, &kvm::ipi(&m))?;
        t.attach("kvm_halt_poll_ns", poll.id, &kvm::halt_poll(&m, &poll)?)?;
        t.exit_refused = match exit {
            None => {
                Some("not available, because this kernel has no kvm:kvm_exit tracepoint".into())
            }
            Some(f) => match kvm::exit(&m, &f).and_then(|p| t.attach("kvm_exit", f.id, &p)) {
                Ok(()) => None,
                Err(e) => Some(format!(
                    "not available, because kvm:kvm_exit did not attach: {e}"
                )),
            },
        };
        Ok(t)
    }

    fn attach(
        &mut self,
        name: &str,
        id: u64,
        insns: &[crate::bpf::insn::Insn],
    ) -> Result<(), String> {
        let prog = sys::prog_load(insns, "cpulab_kvm", sys::BPF_PROG_TYPE_TRACEPOINT, None)
            .map_err(|e| refusal(&format!("cannot load the program for kvm:{name}"), &e))?;
        let link = sys::attach(id, &prog)
            .map_err(|e| refusal(&format!("cannot attach to kvm:{name}"), &e))?;
        self._progs.push(prog);
        self.links.push(link);
        Ok(())
    }

    /// Detaches the programs (nothing is counted after this returns) and reads the tables.
    pub fn finish(mut self) -> Result<KvmReading, String> {
        self.links.clear();
        let read = |e: std::io::Error| format!("cannot read KVM's counts back: {e}");
        let mut r = KvmReading::default();
        let mut bucket = vec![0u8; kvm::THREAD_BUCKET_BYTES];
        for b in 0..kvm::THREAD_BUCKETS {
            sys::map_lookup(&self.threads, &b.to_ne_bytes(), &mut bucket).map_err(read)?;
            r.threads.extend(kvm::decode_threads(&bucket));
        }
        let mut bucket = vec![0u8; kvm::EXIT_BUCKET_BYTES];
        for b in 0..kvm::EXIT_BUCKETS {
            sys::map_lookup(&self.exits, &b.to_ne_bytes(), &mut bucket).map_err(read)?;
            for (tid, reason, n) in kvm::decode_exits(&bucket) {
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
        r.lost_threads = stats[kvm::LOST_THREAD as usize];
        r.lost_exits = stats[kvm::LOST_EXIT as usize];
        r.exits_unavailable = match self.exit_refused.take() {
            Some(why) => Some(why),
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
