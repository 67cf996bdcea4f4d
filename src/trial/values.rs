//! Helpers the settings share, below every setting's own file: the machine's online CPUs, a
//! `VALUE@CPUS` split, and the systemd unit that repeats writes at boot (the permanent form of
//! settings with no boot parameter or sysctl).

use super::ops::{Op, read_file_value};
use super::setting::{Permanent, Roots};
use crate::cpulist::CpuSet;
use crate::error::bad_input;
use anyhow::Result;

/// A systemd oneshot unit repeating `ops` at boot: the permanent form of settings the kernel has
/// no boot parameter or sysctl for.
pub fn unit(name: &str, value: &str, ops: &[Op]) -> Permanent {
    let mut text = format!(
        "[Unit]\nDescription=Set {name}={value} (tried with cpulab try)\n\n[Service]\nType=oneshot\n"
    );
    for op in ops {
        text += &format!(
            "ExecStart=/bin/sh -c '{}'\n",
            op.shell().replace('\'', "\"")
        );
    }
    text += "\n[Install]\nWantedBy=multi-user.target\n";
    Permanent {
        form: "systemd unit".into(),
        file: Some("/etc/systemd/system/cpulab-setting.service".into()),
        text,
    }
}

/// Parses `LIST` in `VALUE@LIST` against the CPUs the machine has (`None`: all of them).
pub fn split_cpus(value: &str, online: &CpuSet) -> Result<(String, CpuSet)> {
    match value.split_once('@') {
        None => Ok((value.to_string(), online.clone())),
        Some((v, list)) => {
            let cpus = CpuSet::parse_list(list, false)
                .map_err(|e| bad_input(format!("CPU list `{list}` after @: {e}")))?;
            if !cpus.is_subset(online) {
                return Err(bad_input(format!(
                    "CPU list `{list}` names CPUs that are not online here (online: {online})"
                )));
            }
            Ok((v.to_string(), cpus))
        }
    }
}

/// The online CPUs under `root`.
pub fn online(roots: &Roots) -> CpuSet {
    read_file_value(&roots.path("sys/devices/system/cpu/online"))
        .ok()
        .and_then(|t| CpuSet::parse_list(&t, false).ok())
        .unwrap_or_default()
}
