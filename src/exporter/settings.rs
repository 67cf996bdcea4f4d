//! Flags -> validated settings. Every bad value is one line naming the fix and exit 2, here,
//! before a port is bound or anything is attached.

use super::webconfig::WebConfig;
use anyhow::Result;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the exporter listens unless told otherwise. The Prometheus wiki's default-port
/// allocations fill 9100-9999 completely, so cpulab takes a port above that range which no
/// service in `/etc/services` uses (docs/exporter.md).
pub const DEFAULT_PORT: u16 = 10039;
pub const DEFAULT_LISTEN: &str = "127.0.0.1:10039";

pub use crate::wakeups::Mechanism;

/// Validated settings.
#[derive(Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub comms: Vec<String>,
    pub pids: Vec<i32>,
    pub cgroups: Vec<String>,
    pub max_targets: usize,
    /// Without named targets: how the most active groups are named (`--group-by`).
    pub group_by: crate::wakeups::GroupBy,
    pub series_budget: usize,
    pub probe_interval: Option<Duration>,
    pub web: Option<WebConfig>,
    pub mechanism: Mechanism,
    pub max_connections: usize,
    pub request_timeout_s: u64,
    /// The test double's class weights (`--fake-weights`; empty: alike).
    pub fake_weights: Vec<u64>,
    /// Publish what each in-kernel program costs (`--bpf-program-costs`).
    pub program_costs: bool,
    /// Time one in this many wakeups beyond the first of each tick per CPU (`--latency-sample`;
    /// 1: every wakeup).
    pub latency_sample: u32,
    /// Attach the wakeup programs one second in every this many (`--attach-every`; 1: always).
    pub attach_every: u32,
    /// The history the newest doctor findings are read from (`--history`, `CPULAB_HISTORY`,
    /// `--no-history`), read-only.
    pub history: crate::history::Location,
    /// How often the machine facts are read again (`--facts-interval`).
    pub facts_interval: Duration,
    /// `--log.level` when given (else info, or error under `--quiet`), and `--log.format`.
    pub log_level: Option<super::logging::Level>,
    pub log_format: super::logging::LogFormat,
    /// KVM VMs with their own label (`--max-vms`); the rest are `vm="other"`.
    pub max_vms: usize,
    /// VMs whose vCPUs are published one by one (`--vm`, at most `vms::MAX_LISTED`).
    pub listed_vms: Vec<String>,
    /// KVM's events by BPF (`--kvm-events`): `auto`, `on` or `off`, as `cpulab host`'s.
    pub kvm_events: String,
}

/// `--facts-interval`: a duration (`60s`, `5m`; a bare number is seconds) of at least 1 s.
pub fn parse_facts_interval(text: &str) -> Result<Duration, String> {
    match crate::units::parse_duration(text) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(d),
        Ok(_) => Err(format!(
            "--facts-interval `{text}` is shorter than 1s; the facts are read at most once a \
             second, so give 1s or more (60s by default)"
        )),
        Err(_) => Err(format!(
            "--facts-interval `{text}` is not a duration; write it like 60s, 5m or 1h"
        )),
    }
}

/// `--web.listen-address` (or `--listen`): `ADDR:PORT` (`[::1]:PORT` for IPv6).
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.trim().parse::<SocketAddr>().map_err(|_| {
        format!(
            "--web.listen-address `{text}` is not ADDR:PORT; write it like {DEFAULT_LISTEN}, \
             0.0.0.0:{DEFAULT_PORT} or [::1]:{DEFAULT_PORT}"
        )
    })
}

/// `--probe-interval`: a duration as every duration flag takes it ([`crate::units::parse_duration`]:
/// `60s`, `5m`, a bare number is seconds, at most a day), of at least the minimum. It had its own
/// parser, which took 99999999999 (three thousand years) as an interval.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let min = super::probe::MIN_INTERVAL_S;
    match crate::units::parse_duration(text) {
        Ok(d) if d >= Duration::from_secs(min) => Ok(d),
        Ok(_) => Err(format!(
            "--probe-interval `{text}` is shorter than {min}s; the probe is bounded to at most \
             a quarter of a percent of one CPU, so give {min}s or more"
        )),
        Err(e) => Err(format!("--probe-interval {e}")),
    }
}

/// True when the cgroup path (relative to the cgroup root) matches the glob; `*` never
/// crosses a `/`. Each component matches as `watch --cgroup` matches it (`*` any run, `?` one
/// character, not one byte: `user-?` matches `user-é`), in time linear in its length.
pub fn glob_matches(glob: &str, path: &str) -> bool {
    let g: Vec<&str> = glob.split('/').filter(|c| !c.is_empty()).collect();
    let p: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    g.len() == p.len()
        && g.iter()
            .zip(&p)
            .all(|(g, p)| crate::watch::slots::wildcard(g, p))
}

/// cgroup directories under `cgroup_root` (at the glob's depth) that match the glob.
pub fn matching_cgroups(cgroup_root: &Path, glob: &str) -> Vec<String> {
    let depth = glob.split('/').filter(|c| !c.is_empty()).count();
    let mut level: Vec<String> = vec![String::new()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for rel in &level {
            let Ok(rd) = std::fs::read_dir(cgroup_root.join(rel)) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().to_string();
                    let path = if rel.is_empty() {
                        name
                    } else {
                        format!("{rel}/{name}")
                    };
                    next.push(path);
                }
            }
        }
        // Keep only prefixes that can still match, so a deep tree is not walked whole.
        let n = level_len(&next);
        let g: Vec<&str> = glob.split('/').filter(|c| !c.is_empty()).take(n).collect();
        next.retain(|p| glob_matches(&g.join("/"), p));
        level = next;
    }
    level.sort();
    level
}

fn level_len(paths: &[String]) -> usize {
    paths
        .first()
        .map_or(0, |p| p.split('/').filter(|c| !c.is_empty()).count())
}

/// Checks a `--cgroup` value's shape.
pub fn check_cgroup_glob(glob: &str) -> Result<(), String> {
    let g = glob.trim_matches('/');
    if g.is_empty() || g.split('/').any(|c| c == ".." || c == "." || c.is_empty()) {
        return Err(format!(
            "--cgroup `{glob}` is not a cgroup path; give one relative to /sys/fs/cgroup, like \
             system.slice/postgresql.service or system.slice/*.service"
        ));
    }
    Ok(())
}

/// True when the effective capability mask (`CapEff` of /proc/self/status, hex) holds what the
/// BPF programs need: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN on older kernels.
pub fn caps_allow_bpf(cap_eff_hex: &str) -> bool {
    let Ok(mask) = u64::from_str_radix(cap_eff_hex.trim(), 16) else {
        return false;
    };
    let has = |bit: u32| mask & (1u64 << bit) != 0;
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    const CAP_BPF: u32 = 39;
    (has(CAP_BPF) && has(CAP_PERFMON)) || has(CAP_SYS_ADMIN)
}

/// Whether an effective capability set (hex, as `CapEff:` shows it) may read other users'
/// processes' fds: `CAP_SYS_PTRACE` (root has it).
pub fn caps_allow_ptrace(cap_eff_hex: &str) -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    u64::from_str_radix(cap_eff_hex.trim(), 16).is_ok_and(|m| m & (1u64 << CAP_SYS_PTRACE) != 0)
}

/// The `CapEff:` value of a /proc/PID/status text.
pub fn cap_eff(status: &str) -> Option<&str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(str::trim)
}

/// Where the probe reads this process's capabilities.
pub fn own_status() -> PathBuf {
    PathBuf::from("/proc/self/status")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_other_processes_fds_takes_cap_sys_ptrace() {
        assert!(caps_allow_ptrace("000001ffffffffff"));
        assert!(caps_allow_ptrace("0000000000080000"));
        // CAP_BPF and CAP_PERFMON, the packaged unit's: not enough.
        assert!(!caps_allow_ptrace("000000c000000000"));
        assert!(!caps_allow_ptrace("x"));
    }

    #[test]
    fn listen_takes_addr_port_only() {
        assert_eq!(
            parse_listen("127.0.0.1:10039").unwrap().port(),
            DEFAULT_PORT
        );
        assert!(parse_listen("[::1]:9").is_ok());
        for bad in ["10039", "localhost:10039", "127.0.0.1", "1.2.3.4:99999", ""] {
            let e = parse_listen(bad).unwrap_err();
            assert!(e.contains("ADDR:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn intervals_have_units_and_a_floor() {
        assert_eq!(parse_interval("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_interval("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_interval("30").unwrap(), Duration::from_secs(30));
        assert!(parse_interval("1s").unwrap_err().contains("shorter"));
        assert!(
            parse_interval("soon")
                .unwrap_err()
                .starts_with("--probe-interval `soon`: unknown unit")
        );
        assert!(parse_interval("").is_err());
        assert!(parse_interval("1ns").unwrap_err().contains("shorter"));
        assert_eq!(parse_interval("1.5m").unwrap(), Duration::from_secs(90));
        assert!(
            parse_interval("99999999999")
                .unwrap_err()
                .contains("longer than a day")
        );
    }

    #[test]
    fn the_facts_interval_is_a_duration_of_a_second_or_more() {
        assert_eq!(parse_facts_interval("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_facts_interval("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_facts_interval("1"), Ok(Duration::from_secs(1)));
        assert!(
            parse_facts_interval("500ms")
                .unwrap_err()
                .contains("shorter than 1s")
        );
        assert!(
            parse_facts_interval("often")
                .unwrap_err()
                .contains("not a duration")
        );
    }

    #[test]
    fn globs_match_one_component_per_star() {
        assert!(glob_matches(
            "system.slice/*.service",
            "system.slice/postgresql.service"
        ));
        assert!(!glob_matches(
            "system.slice/*.service",
            "system.slice/a/b.service"
        ));
        assert!(!glob_matches(
            "system.slice/*.service",
            "system.slice/x.scope"
        ));
        assert!(glob_matches(
            "user.slice/user-?.slice",
            "user.slice/user-0.slice"
        ));
        assert!(glob_matches("*", "init.scope"));
        // Found by tests/parsers.rs: `?` matched one byte, so never a character written in two.
        assert!(glob_matches("user.slice/user-?", "user.slice/user-é"));
        assert!(!glob_matches("user.slice/user-??", "user.slice/user-é"));
        assert!(check_cgroup_glob("../etc").is_err());
        assert!(check_cgroup_glob("").is_err());
        assert!(check_cgroup_glob("/system.slice/").is_ok());
    }

    #[test]
    fn matching_cgroups_walks_only_the_globs_depth() {
        let d = tempfile::tempdir().unwrap();
        for p in [
            "system.slice/a.service",
            "system.slice/b.service/inner",
            "system.slice/c.scope",
            "user.slice",
        ] {
            std::fs::create_dir_all(d.path().join(p)).unwrap();
        }
        assert_eq!(
            matching_cgroups(d.path(), "system.slice/*.service"),
            ["system.slice/a.service", "system.slice/b.service"]
        );
        assert!(matching_cgroups(d.path(), "nothing/*").is_empty());
    }

    #[test]
    fn capabilities_need_bpf_and_perfmon_or_sys_admin() {
        assert!(caps_allow_bpf("000001ffffffffff")); // root
        assert!(caps_allow_bpf("000000c000000000")); // bpf + perfmon
        assert!(!caps_allow_bpf("0000008000000000")); // bpf only
        assert!(caps_allow_bpf("0000000000200000")); // sys_admin
        assert!(!caps_allow_bpf("0000000000000000"));
        assert!(!caps_allow_bpf("zz"));
        let status = "Name:\tcpulab\nCapEff:\t000001ffffffffff\n";
        assert_eq!(cap_eff(status), Some("000001ffffffffff"));
    }
}
