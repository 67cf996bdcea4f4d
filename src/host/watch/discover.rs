//! Finding the VMs on this host and their vCPU threads without any VMM's help, from /proc.
//!
//! - A VM is a process holding an `anon_inode:kvm-vm` fd; its vCPUs are its
//!   `anon_inode:kvm-vcpu:N` fds (a VMM may hold several fds of one vCPU).
//! - The thread running a vCPU shows `16 <fd> 0xae80 ...` (ioctl `KVM_RUN` on that fd) in
//!   `/proc/PID/task/TID/syscall` while it halts or is in the kernel, and `running` while it is
//!   in guest mode: so the syscall file is sampled again during the window until every vCPU has
//!   its thread. The kernel's `kvm-nx-lpage-re` worker is listed among the VM's tasks and shows
//!   another thread's syscall line: it is never a vCPU.
//! - Names: QEMU's `-name` (`guest=NAME,...` or `NAME,...`) from the command line; otherwise the
//!   process's comm. Thread names as VMMs set them (`CPU 0/KVM`, `fc_vcpu 0`, `vcpu0`,
//!   `crosvm_vcpu0`) are kept; `stat` is read after its last `)`, since they hold spaces.
//!
//! Every parser here is pure and tested on literal text; [`scan`] reads a root path.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// `KVM_RUN`.
const KVM_RUN: u64 = 0xae80;
/// `ioctl` on x86-64.
const SYS_IOCTL: u64 = 16;
/// The kernel worker KVM adds to a VM's process (`kvm-nx-lpage-recovery`, cut to 15 bytes).
const NX_WORKER: &str = "kvm-nx-lpage-re";

/// What one fd of a process is, for KVM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvmFd {
    Vm,
    Vcpu(u32),
}

/// Reads the target of a `/proc/PID/fd/N` link.
pub fn parse_fd_link(target: &str) -> Option<KvmFd> {
    if target == "anon_inode:kvm-vm" {
        return Some(KvmFd::Vm);
    }
    target
        .strip_prefix("anon_inode:kvm-vcpu:")
        .and_then(|n| n.parse().ok())
        .map(KvmFd::Vcpu)
}

/// The fd of a `KVM_RUN` the thread is in, from its `syscall` file (`16 0xb 0xae80 ...`:
/// numbers in decimal or hex); `None` for `running`, another call, or no call.
pub fn parse_kvm_run(syscall: &str) -> Option<u32> {
    let mut w = syscall.split_whitespace();
    let num = |s: &str| match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    };
    if num(w.next()?)? != SYS_IOCTL {
        return None;
    }
    let fd = num(w.next()?)?;
    (num(w.next()?)? == KVM_RUN).then_some(fd as u32)
}

/// A thread's state and last CPU from its `stat`: the fields after the last `)` (its name may
/// hold spaces and parentheses), state first, CPU the 37th after it (field 39).
pub fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.first()?.chars().next()?, f.get(36)?.parse().ok()?))
}

/// The guest's name from QEMU's `-name` (`-name guest=T,debug-threads=on`, `-name T,...`,
/// `-name=T`), from the NUL-separated command line.
pub fn qemu_name(cmdline: &[String]) -> Option<String> {
    let mut it = cmdline.iter();
    while let Some(a) = it.next() {
        let v = match a.as_str() {
            "-name" | "--name" => it.next().cloned(),
            s => s
                .strip_prefix("-name=")
                .or_else(|| s.strip_prefix("--name="))
                .map(String::from),
        };
        if let Some(v) = v {
            let first = v.split(',').next().unwrap_or_default();
            let name = first.strip_prefix("guest=").unwrap_or(first);
            if !name.is_empty() {
                return Some(name.to_string());
            }
        }
    }
    None
}

/// A vCPU's index from its thread's name as common VMMs set it, when they do.
pub fn vcpu_of_thread_name(name: &str) -> Option<u32> {
    let n = name.trim();
    if let Some(rest) = n.strip_prefix("CPU ") {
        return rest.strip_suffix("/KVM")?.parse().ok();
    }
    for p in ["fc_vcpu ", "crosvm_vcpu", "vcpu"] {
        if let Some(rest) = n.strip_prefix(p) {
            return rest.trim().parse().ok();
        }
    }
    None
}

/// The VMM's pid and its VM's fd from the name of a VM's directory under debugfs `kvm/`
/// (`PID-FD`).
pub fn parse_debugfs_vm_dir(name: &str) -> Option<(i32, u32)> {
    let (pid, fd) = name.split_once('-')?;
    Some((pid.parse().ok()?, fd.parse().ok()?))
}

/// The vCPU index of a `vcpuN` directory under a VM's debugfs directory.
pub fn parse_debugfs_vcpu_dir(name: &str) -> Option<u32> {
    name.strip_prefix("vcpu")?.parse().ok()
}

/// Each vCPU thread of the VMs process `pid` runs, as KVM's debugfs names it: `kvm/PID-FD/vcpuN/pid`
/// holds the thread running vCPU N (0 before it first ran). `dir` is a debugfs root.
pub fn debugfs_vcpu_threads(dir: &Path, pid: i32) -> BTreeMap<i32, u32> {
    let mut out = BTreeMap::new();
    let Ok(vms) = std::fs::read_dir(dir.join("kvm")) else {
        return out;
    };
    for vm in vms.flatten() {
        let name = vm.file_name();
        if parse_debugfs_vm_dir(&name.to_string_lossy()).is_none_or(|(p, _)| p != pid) {
            continue;
        }
        let Ok(vcpus) = std::fs::read_dir(vm.path()) else {
            continue;
        };
        for v in vcpus.flatten() {
            let Some(n) = parse_debugfs_vcpu_dir(&v.file_name().to_string_lossy()) else {
                continue;
            };
            if let Some(tid) = read(&v.path().join("pid"))
                .and_then(|s| s.trim().parse::<i32>().ok())
                .filter(|&t| t > 0)
            {
                out.insert(tid, n);
            }
        }
    }
    out
}

/// One VMM process as found: its VMs (usually one) and their vCPUs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FoundVm {
    pub pid: i32,
    /// QEMU's `-name`, or the process's comm.
    pub name: String,
    pub comm: String,
    /// How many `anon_inode:kvm-vm` fds the process holds: its VMs.
    pub vm_fds: u32,
    /// Each vCPU fd and the vCPU index it names (a VMM may hold several fds of one vCPU).
    pub vcpu_fds: BTreeMap<u32, u32>,
    /// Each vCPU thread found so far, by thread id.
    pub threads: BTreeMap<i32, FoundThread>,
}

/// A thread tied to a vCPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FoundThread {
    pub vcpu: u32,
    /// `kvm_run` (seen in the ioctl on one of this vCPU's fds), `debugfs` (KVM's
    /// `kvm/PID-FD/vcpuN/pid`) or `thread name`.
    pub found_by: String,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn cmdline(root: &Path, pid: i32) -> Vec<String> {
    std::fs::read(root.join(format!("proc/{pid}/cmdline")))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every process under `root/proc` holding a VM fd, and how many processes' fds could not be
/// read (not this user's to inspect).
pub fn scan(root: &Path) -> (Vec<FoundVm>, usize) {
    let mut out = Vec::new();
    let mut refused = 0;
    let Ok(procs) = std::fs::read_dir(root.join("proc")) else {
        return (out, refused);
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let fds = match std::fs::read_dir(p.path().join("fd")) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                refused += 1;
                continue;
            }
            Err(_) => continue,
        };
        let (mut vm_fds, mut vcpu_fds) = (0, BTreeMap::new());
        for f in fds.flatten() {
            let Ok(t) = std::fs::read_link(f.path()) else {
                continue;
            };
            let fd = f.file_name().to_str().and_then(|s| s.parse::<u32>().ok());
            match (parse_fd_link(&t.to_string_lossy()), fd) {
                (Some(KvmFd::Vm), _) => vm_fds += 1,
                (Some(KvmFd::Vcpu(n)), Some(fd)) => {
                    vcpu_fds.insert(fd, n);
                }
                _ => {}
            }
        }
        if vm_fds == 0 {
            continue;
        }
        let comm = read(&p.path().join("comm")).map_or_else(String::new, |s| s.trim().into());
        let name = qemu_name(&cmdline(root, pid)).unwrap_or_else(|| comm.clone());
        let mut found = FoundVm {
            pid,
            name,
            comm,
            vm_fds,
            vcpu_fds,
            threads: BTreeMap::new(),
        };
        found.tie_threads(root);
        out.push(found);
    }
    out.sort_by_key(|v| v.pid);
    (out, refused)
}

impl FoundVm {
    /// The distinct vCPU indexes its fds name.
    pub fn indexes(&self) -> std::collections::BTreeSet<u32> {
        self.vcpu_fds.values().copied().collect()
    }

    /// How many vCPU threads to expect: each index once per VM, at most one per vCPU fd.
    pub fn expected(&self) -> usize {
        (self.indexes().len() * self.vm_fds as usize).min(self.vcpu_fds.len())
    }

    /// Looks at each thread not yet tied: one in `KVM_RUN` on one of this process's vCPU fds
    /// runs that vCPU; one named as VMMs name vCPU threads is taken by its name.
    pub fn tie_threads(&mut self, root: &Path) {
        let Ok(tasks) = std::fs::read_dir(root.join(format!("proc/{}/task", self.pid))) else {
            return;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if self
                .threads
                .get(&tid)
                .is_some_and(|f| f.found_by != "thread name")
            {
                continue;
            }
            let comm = read(&t.path().join("comm")).unwrap_or_default();
            if comm.trim() == NX_WORKER {
                continue;
            }
            let by_run = read(&t.path().join("syscall"))
                .and_then(|s| parse_kvm_run(&s))
                .and_then(|fd| self.vcpu_fds.get(&fd).copied());
            let found = match (by_run, vcpu_of_thread_name(&comm)) {
                (Some(v), _) => Some((v, "kvm_run")),
                (None, Some(v)) if self.indexes().contains(&v) => Some((v, "thread name")),
                _ => None,
            };
            if let Some((vcpu, by)) = found {
                self.threads.insert(
                    tid,
                    FoundThread {
                        vcpu,
                        found_by: by.into(),
                    },
                );
            }
        }
    }

    /// Whether every vCPU expected has its thread.
    pub fn complete(&self) -> bool {
        self.threads.len() >= self.expected()
    }

    /// Ties the threads KVM's debugfs names (`tid -> vCPU`, [`debugfs_vcpu_threads`]) that are
    /// among this process's tasks and not yet tied by `KVM_RUN`; a name's tie gives way.
    pub fn tie_from_debugfs(&mut self, root: &Path, named: &BTreeMap<i32, u32>) {
        for (&tid, &vcpu) in named {
            let here = root.join(format!("proc/{}/task/{tid}", self.pid)).is_dir();
            let by_run = self
                .threads
                .get(&tid)
                .is_some_and(|f| f.found_by == "kvm_run");
            if here && !by_run && self.indexes().contains(&vcpu) {
                self.threads.insert(
                    tid,
                    FoundThread {
                        vcpu,
                        found_by: "debugfs".into(),
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debugfs_names_a_vms_directory_and_its_vcpus() {
        assert_eq!(parse_debugfs_vm_dir("4242-11"), Some((4242, 11)));
        assert_eq!(parse_debugfs_vm_dir("4242"), None);
        assert_eq!(parse_debugfs_vm_dir("x-1"), None);
        assert_eq!(parse_debugfs_vcpu_dir("vcpu3"), Some(3));
        assert_eq!(parse_debugfs_vcpu_dir("vcpu"), None);
        assert_eq!(parse_debugfs_vcpu_dir("halt_exits"), None);
    }

    /// A fixture debugfs of two VMs: only the asked process's vCPUs, and a vCPU that never ran
    /// (pid 0) is none.
    #[test]
    fn debugfs_vcpu_threads_are_read_for_one_process() {
        let t = crate::testing::tree(&[
            ("kvm/100-11/vcpu0/pid", "101\n"),
            ("kvm/100-11/vcpu1/pid", "102\n"),
            ("kvm/100-11/vcpu2/pid", "0\n"),
            ("kvm/100-11/halt_exits", "Operation not permitted\n"),
            ("kvm/200-9/vcpu0/pid", "201\n"),
        ]);
        let got = debugfs_vcpu_threads(t.path(), 100);
        assert_eq!(got, BTreeMap::from([(101, 0), (102, 1)]));
        assert!(debugfs_vcpu_threads(t.path(), 300).is_empty());
        let mut vm = FoundVm {
            pid: 100,
            name: "t".into(),
            comm: "qemu".into(),
            vm_fds: 1,
            vcpu_fds: BTreeMap::from([(12, 0), (13, 1)]),
            threads: BTreeMap::new(),
        };
        let root = crate::testing::tree(&[("proc/100/task/101/comm", "x\n")]);
        vm.tie_from_debugfs(root.path(), &got);
        // 102 is not among the process's tasks here: not tied.
        assert_eq!(vm.threads.len(), 1);
        assert_eq!(vm.threads[&101].found_by, "debugfs");
    }

    #[test]
    fn fd_links_name_vms_and_vcpus() {
        assert_eq!(parse_fd_link("anon_inode:kvm-vm"), Some(KvmFd::Vm));
        assert_eq!(parse_fd_link("anon_inode:kvm-vcpu:3"), Some(KvmFd::Vcpu(3)));
        assert_eq!(parse_fd_link("anon_inode:kvm-vcpu-stats:0"), None);
        assert_eq!(parse_fd_link("/dev/kvm"), None);
        assert_eq!(parse_fd_link("socket:[123]"), None);
    }

    #[test]
    fn a_thread_in_kvm_run_names_its_fd() {
        assert_eq!(
            parse_kvm_run("16 0xb 0xae80 0x0 0x0 0x0 0x0 0x7ffd 0x7f12\n"),
            Some(11)
        );
        assert_eq!(parse_kvm_run("16 12 44672 0 0 0 0 0 0"), Some(12));
        assert_eq!(parse_kvm_run("running\n"), None);
        // Another ioctl, another call.
        assert_eq!(parse_kvm_run("16 0xb 0x4020ae46 0x0"), None);
        assert_eq!(parse_kvm_run("7 0x3 0x1 0x0"), None);
        assert_eq!(parse_kvm_run(""), None);
    }

    #[test]
    fn stat_is_read_after_the_last_parenthesis() {
        // Fields 4 to 52 as their own numbers: field 39, the CPU, reads "39".
        let rest: Vec<String> = (4..=52).map(|i| i.to_string()).collect();
        let stat = format!("4242 (CPU 0/KVM) S {}", rest.join(" "));
        assert_eq!(parse_stat(&stat), Some(('S', 39)));
        let odd = format!("7 (a) b) (c) R {}", rest.join(" "));
        assert_eq!(parse_stat(&odd), Some(('R', 39)));
        assert_eq!(parse_stat("7 (x) R 1 2"), None);
    }

    #[test]
    fn qemu_names_come_from_dash_name() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            qemu_name(&v(
                "qemu-system-x86_64 -enable-kvm -name guest=db1,debug-threads=on"
            )),
            Some("db1".into())
        );
        assert_eq!(
            qemu_name(&v("qemu -name T,debug-threads=on -smp 2")),
            Some("T".into())
        );
        assert_eq!(qemu_name(&v("qemu -name=web")), Some("web".into()));
        assert_eq!(qemu_name(&v("firecracker --api-sock /tmp/s")), None);
    }

    #[test]
    fn vcpu_thread_names_of_common_vmms() {
        assert_eq!(vcpu_of_thread_name("CPU 1/KVM"), Some(1));
        assert_eq!(vcpu_of_thread_name("fc_vcpu 2"), Some(2));
        assert_eq!(vcpu_of_thread_name("vcpu3"), Some(3));
        assert_eq!(vcpu_of_thread_name("crosvm_vcpu0\n"), Some(0));
        assert_eq!(vcpu_of_thread_name("IO mon_iothread"), None);
        assert_eq!(vcpu_of_thread_name("kvm-nx-lpage-re"), None);
    }
}
