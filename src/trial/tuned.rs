//! tuned profiles, read from their `tuned.conf` (following `include=`) and expanded into the
//! settings cpulab knows. tuned itself need not be installed or running: cpulab only reads the
//! files (from `--profile-dir`, /etc/tuned, /usr/lib/tuned). Items cpulab cannot try here (a
//! cpufreq option inside a VM, a disk or VM plugin) are listed as skipped with the reason, so
//! the user knows what the trial did not cover.

use super::changes::change;
use super::setting::{Change, Roots};
use crate::error::bad_input;
use anyhow::Result;
use std::collections::BTreeMap;

/// A profile's sections, `include=` already followed (the including profile wins).
pub type Sections = BTreeMap<String, Vec<(String, String)>>;

/// Parses the INI text of one tuned.conf. Pure.
pub fn parse(text: &str) -> Sections {
    let mut out: Sections = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.trim().to_string();
            out.entry(section.clone()).or_default();
        } else if let Some((k, v)) = l.split_once('=') {
            let items = out.entry(section.clone()).or_default();
            let k = k.trim().to_string();
            items.retain(|(old, _)| *old != k);
            items.push((k, v.trim().to_string()));
        }
    }
    out
}

/// Reads `profile` and everything it includes.
pub fn load(roots: &Roots, profile: &str) -> Result<Sections> {
    load_depth(roots, profile, 0)
}

fn load_depth(roots: &Roots, profile: &str, depth: usize) -> Result<Sections> {
    if depth > 8 {
        return Err(bad_input(format!(
            "tuned profile {profile}: includes nest more than 8 deep (a cycle?)"
        )));
    }
    let file = roots
        .profile_dirs
        .iter()
        .map(|d| d.join(profile).join("tuned.conf"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            let dirs: Vec<String> = roots
                .profile_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            bad_input(format!(
                "no tuned profile `{profile}` (looked for {profile}/tuned.conf in {}); give the directory with --profile-dir",
                dirs.join(", ")
            ))
        })?;
    let text = std::fs::read_to_string(&file)
        .map_err(|e| bad_input(format!("cannot read {}: {e}", file.display())))?;
    let own = parse(&text);
    let mut merged: Sections = BTreeMap::new();
    if let Some(inc) = own
        .get("main")
        .and_then(|m| m.iter().find(|(k, _)| k == "include"))
    {
        for p in inc.1.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            merge(&mut merged, load_depth(roots, p, depth + 1)?);
        }
    }
    merge(&mut merged, own);
    Ok(merged)
}

fn merge(into: &mut Sections, from: Sections) {
    for (sec, items) in from {
        let dst = into.entry(sec).or_default();
        for (k, v) in items {
            dst.retain(|(old, _)| *old != k);
            dst.push((k, v));
        }
    }
}

/// The cpulab setting a tuned item maps to, as `(name, value)`; `Err(why)` when it has none.
pub fn map_item(
    section: &str,
    key: &str,
    value: &str,
) -> std::result::Result<(String, String), String> {
    if value.contains("${") {
        return Err("uses a tuned variable cpulab does not expand".into());
    }
    let first = value.split('|').next().unwrap_or(value).trim().to_string();
    match (section, key) {
        ("cpu", "governor") => Ok(("cpufreq.governor".into(), first)),
        ("cpu", "energy_performance_preference") => Ok(("cpufreq.epp".into(), first)),
        ("cpu", "min_perf_pct") => Ok(("intel_pstate.min_perf_pct".into(), first)),
        ("cpu", "no_turbo") => Ok(("intel_pstate.no_turbo".into(), first)),
        ("cpu", "boost") => Ok(("cpufreq.boost".into(), first)),
        ("cpu", "force_latency") if first.parse::<u64>().is_ok() => {
            Ok(("cpuidle.max_latency_us".into(), first))
        }
        ("sysctl", k) if k.starts_with("kernel.sched_") => Ok((k.into(), first)),
        ("scheduler", k) | ("sysctl", k)
            if k.strip_prefix("kernel.")
                .unwrap_or(k)
                .strip_prefix("sched_")
                .is_some_and(|r| super::knobs::SCHED_KNOBS.contains(&r)) =>
        {
            let r = k.strip_prefix("kernel.").unwrap_or(k);
            Ok((format!("sched.{}", &r["sched_".len()..]), first))
        }
        ("main", _) => Err("profile metadata".into()),
        (s, k) => Err(format!("[{s}] {k} is not a setting cpulab tries")),
    }
}

/// Expands `tuned:PROFILE` into validated changes; also returns the items skipped and why.
pub fn expand(roots: &Roots, profile: &str) -> Result<(Vec<Change>, Vec<String>)> {
    let sections = load(roots, profile)?;
    let mut changes = Vec::new();
    let mut skipped = Vec::new();
    let from = Some(format!("tuned:{profile}"));
    for (sec, items) in &sections {
        for (k, v) in items {
            if sec == "main" {
                continue;
            }
            match map_item(sec, k, v) {
                Ok((name, value)) => match change(roots, &name, &value, from.clone()) {
                    Ok(c) => changes.push(c),
                    Err(e) => skipped.push(format!("[{sec}] {k}={v}: {e:#}")),
                },
                Err(why) => skipped.push(format!("[{sec}] {k}={v}: {why}")),
            }
        }
    }
    if changes.is_empty() {
        return Err(bad_input(format!(
            "tuned profile {profile} has nothing cpulab can try here ({})",
            skipped.join("; ")
        )));
    }
    Ok((changes, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles(root: &std::path::Path) {
        let w = |p: &str, t: &str| {
            let f = root.join("etc/tuned").join(p).join("tuned.conf");
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, t).unwrap();
        };
        w(
            "throughput-performance",
            "[main]\nsummary=Broadly applicable tuning\n\n[cpu]\ngovernor=performance\nenergy_perf_bias=performance\nmin_perf_pct=100\n\n[sysctl]\nkernel.sched_autogroup_enabled=0\nvm.dirty_ratio=40\n\n[disk]\nreadahead=>4096\n",
        );
        w(
            "latency-performance",
            "[main]\ninclude=throughput-performance\n\n[cpu]\nforce_latency=1\ngovernor=schedutil|performance\n\n[scheduler]\nsched_migration_cost_ns=5000000\n",
        );
        w("loop-a", "[main]\ninclude=loop-b\n");
        w("loop-b", "[main]\ninclude=loop-a\n");
    }

    #[test]
    fn parse_keeps_the_last_value_of_a_key() {
        let s = parse("[cpu]\ngovernor=powersave\n# c\ngovernor = performance\n");
        assert_eq!(
            s["cpu"],
            vec![("governor".to_string(), "performance".to_string())]
        );
    }

    #[test]
    fn include_is_followed_and_the_includer_wins() {
        let d = crate::trial::testing::copy_fixture("intel-2s");
        profiles(d.path());
        let r = Roots::new(d.path(), None);
        let s = load(&r, "latency-performance").unwrap();
        let cpu = &s["cpu"];
        assert!(cpu.contains(&("governor".into(), "schedutil|performance".into())));
        assert!(cpu.contains(&("min_perf_pct".into(), "100".into())));
        assert!(cpu.contains(&("force_latency".into(), "1".into())));
        let e = load(&r, "loop-a").unwrap_err();
        assert!(format!("{e:#}").contains("nest"), "{e:#}");
    }

    #[test]
    fn expands_into_settings_and_names_what_it_skips() {
        let d = crate::trial::testing::copy_fixture("intel-2s");
        profiles(d.path());
        std::fs::write(
            d.path()
                .join("sys/devices/system/cpu/intel_pstate/min_perf_pct"),
            "20\n",
        )
        .unwrap();
        let r = Roots::new(d.path(), None);
        let (changes, skipped) = expand(&r, "latency-performance").unwrap();
        let names: Vec<String> = changes.iter().map(|c| c.setting.name()).collect();
        for want in [
            "cpufreq.governor",
            "intel_pstate.min_perf_pct",
            "cpuidle.max_latency_us",
            "kernel.sched_autogroup_enabled",
            "sched.migration_cost_ns",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        assert!(skipped.iter().any(|s| s.contains("vm.dirty_ratio")));
        assert!(skipped.iter().any(|s| s.contains("readahead")));
        // In the guest, cpufreq items are skipped, not fatal.
        let g = crate::trial::testing::copy_fixture("kvm-guest");
        profiles(g.path());
        let (_, skipped) = expand(&Roots::new(g.path(), None), "latency-performance").unwrap();
        assert!(
            skipped.iter().any(|s| s.contains("governor")),
            "{skipped:?}"
        );
    }
}
