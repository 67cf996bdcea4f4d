//! `cpulab exporter`: its flags and their validation into [`Settings`]; the serving is
//! `crate::exporter`'s, which sees no clap type and imports nothing of the command layer.

use super::Global;
use crate::error::bad_input;
use crate::exporter::logging::{FORMATS, LEVELS};
use crate::exporter::settings::parse_facts_interval;
use crate::exporter::settings::{
    DEFAULT_LISTEN, Mechanism, Settings, check_cgroup_glob, matching_cgroups, parse_interval,
    parse_listen,
};
use crate::exporter::webconfig::WebConfig;
use crate::machine::Machine;
use crate::wakeups::{GroupBy, Shape};
use crate::watch::targets::{parse_comms, parse_pids};
use anyhow::Result;
use std::path::PathBuf;

/// Flags of `cpulab exporter`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    cpulab exporter --comm postgres\n  \
    cpulab exporter --cgroup 'system.slice/*.service' --probe-interval 5m\n  \
    cpulab exporter --web.listen-address 0.0.0.0:10039 --web.config.file /etc/cpulab/web.yml\n\n\
    Then scrape http://127.0.0.1:10039/metrics; docs/exporter.md lists every metric.")]
pub struct Args {
    /// Address and port to serve /metrics on (beyond loopback, give --web.config.file);
    /// --listen is another name for it.
    #[arg(long = "web.listen-address", visible_alias = "listen", value_name = "ADDR:PORT",
          default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Watch processes with this command name (repeat, or separate with commas).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub comm: Vec<String>,
    /// Watch these processes, labelled by command name, never by pid.
    #[arg(long, value_name = "PID", value_delimiter = ',')]
    pub pid: Vec<String>,
    /// Watch cgroups (relative to /sys/fs/cgroup; globs like 'system.slice/*.service'),
    /// re-read as services and containers come and go.
    #[arg(long, value_name = "GLOB", value_delimiter = ',')]
    pub cgroup: Vec<String>,
    /// At most this many targets get their own label; the rest count as target="other".
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub max_targets: usize,
    /// Without --comm/--pid/--cgroup: how the most active process groups are named. auto: the
    /// container or systemd unit innermost in the cgroup path, else the command name.
    #[arg(long, value_enum, value_name = "HOW")]
    pub group_by: Option<GroupBy>,
    /// Most series published; fewer targets get their own label when the host's classes need
    /// it.
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub series_budget: usize,
    /// Run a short same-CPU and cross-CPU pingpong (about 25 ms of work) this often, e.g. 5m;
    /// off by default.
    #[arg(long, value_name = "DURATION")]
    pub probe_interval: Option<String>,
    /// TLS, client certificates and basic auth in the node_exporter format (exporter-toolkit);
    /// re-read when it or a file it names changes.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// How wakeups are counted: bpf in the kernel (root, or CAP_BPF and CAP_PERFMON), perf in
    /// user space at a higher cost per event; auto is bpf when it loads, else perf (the reason
    /// is logged).
    #[arg(long, default_value = "auto", value_name = "HOW",
          value_parser = Mechanism::value_parser(Shape::Counts))]
    pub mechanism: Mechanism,
    /// Most HTTP connections open at once; beyond it the oldest still sending its request is
    /// closed.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_connections: usize,
    /// Have the kernel time the in-kernel programs and publish each one's runs and run time
    /// (cpulab_exporter_bpf_program_*): what the exporter costs the scheduler, measured. The
    /// timing itself adds to that cost, so it is off by default; needs CAP_SYS_ADMIN.
    #[arg(long)]
    pub bpf_program_costs: bool,
    /// Time every wakeup's latency while the waking CPU has made at most 8 watched wakeups this
    /// tick, and one in N at random beyond them, each counted N times in the latency histogram
    /// (an unbiased estimate). Reading the clock is most of what the programs cost; 1 times every
    /// wakeup. It samples no wakeup count (those are estimates only through --attach-every). A
    /// power of two, 1 to 1024.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub latency_sample: u32,
    /// Attach the wakeup programs one second in every N, and count what they see N times: the
    /// wakeup counts and latencies are estimates, at about 1/N of the cost to the scheduler
    /// (each program's dispatch on every scheduler event included). Always attached, they cost
    /// pgbench -c 1 about 1.5% on one CPU and 2.5% to 3.4% across two on the reference guest;
    /// at the default 4, under 1% (docs/exporter.md, Cost). 1 keeps them attached and the
    /// counts exact. 1 to 60.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_ATTACH_EVERY)]
    pub attach_every: u32,
    /// Read the machine facts of cpulab_machine_info again this often (idle driver, halt
    /// polling, governors, boot options...), so the series follows a change; each change is
    /// logged, old -> new. At least 1s.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub facts_interval: String,
    /// Least severe log lines written to stderr: debug, info, warn or error (default info;
    /// --quiet means --log.level error).
    #[arg(long = "log.level", value_name = "LEVEL",
          value_parser = clap::builder::PossibleValuesParser::new(LEVELS))]
    pub log_level: Option<String>,
    /// Log line format on stderr: logfmt (key=value, as Prometheus exporters write it) or json.
    #[arg(long = "log.format", value_name = "FORMAT", default_value = "logfmt",
          value_parser = clap::builder::PossibleValuesParser::new(FORMATS))]
    pub log_format: String,
    /// Seconds a client has to send its whole request head (TLS handshake included).
    #[arg(long, hide = true, value_name = "S", default_value_t = 10)]
    pub request_timeout_s: u64,
    /// On a KVM host: at most this many VMs get their own label in cpulab_vm_*; the rest are
    /// summed as vm="other".
    #[arg(long, value_name = "N", default_value_t = crate::exporter::vms::DEFAULT_MAX_VMS)]
    pub max_vms: usize,
    /// On a KVM host: also publish each vCPU of this VM (its label in cpulab_vm_*: the QEMU
    /// -name, else `COMM (PID)`); repeat for up to 4 VMs, 32 vCPUs each.
    #[arg(long = "vm", value_name = "NAME")]
    pub vm: Vec<String>,
    /// On a KVM host: KVM's halts, polls won and their seconds, IPIs and exits per VM, counted
    /// by BPF programs attached for the exporter's life. auto: on KVM's raw tracepoints only;
    /// on: also on perf tracepoint events where raw ones cannot be used; off: none.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub kvm_events: String,
    /// With the test double only (`--mechanism fake`): each placement class's weight in the
    /// made-up wakeups, nearest class first (`3,1,0`); classes beyond the list weigh 1.
    #[arg(long, hide = true, value_name = "W,W,...", value_delimiter = ',')]
    pub fake_weights: Vec<u64>,
}

/// `--attach-every` by default: the least that keeps the programs' measured cost to pgbench
/// `-c 1` under 1% at both placements on the reference guest (2.5% to 3.4% always attached
/// across two CPUs, a quarter of it at 4; `scripts/bench-exporter-interleaved.sh`).
pub const DEFAULT_ATTACH_EVERY: u32 = 4;

/// `--attach-every N`: 1 to 60 (a window in every minute at least).
pub fn check_attach_every(n: u32) -> Result<u32, String> {
    if (1..=60).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "--attach-every {n} is not from 1 to 60; use 1 (always attached, exact counts) or \
             the seconds of which one is attached, such as 4"
        ))
    }
}

/// `--latency-sample N`: a power of two from 1 to 1024 (the programs draw it with a mask).
pub fn check_latency_sample(n: u32) -> Result<u32, String> {
    if n.is_power_of_two() && n <= 1024 {
        Ok(n)
    } else {
        Err(format!(
            "--latency-sample {n} is not a power of two from 1 to 1024; use 1 (time every \
             wakeup), 8 (the default) or another power of two"
        ))
    }
}

/// Flags -> settings, checked against this machine.
pub fn settings(args: &Args, machine: &Machine) -> Result<Settings> {
    let listen = parse_listen(&args.listen).map_err(bad_input)?;
    let pids: Vec<i32> = parse_pids(&args.pid, &machine.root, "--pid")
        .map_err(bad_input)?
        .into_iter()
        .collect();
    let comms: Vec<String> = parse_comms(&args.comm, "--comm")
        .map_err(bad_input)?
        .into_iter()
        .collect();
    let cgroup_root = machine.root.join("sys/fs/cgroup");
    let mut cgroups = Vec::new();
    for g in &args.cgroup {
        check_cgroup_glob(g).map_err(bad_input)?;
        let g = g.trim_matches('/').to_string();
        if matching_cgroups(&cgroup_root, &g).is_empty() {
            return Err(bad_input(format!(
                "--cgroup `{g}` matches no cgroup under {}; list them with `systemd-cgls` or \
                 `ls {}`",
                cgroup_root.display(),
                cgroup_root.display()
            )));
        }
        cgroups.push(g);
    }
    let named = !(args.comm.is_empty() && args.pid.is_empty() && args.cgroup.is_empty());
    if let (true, Some(by)) = (named, args.group_by) {
        let by = clap::ValueEnum::to_possible_value(&by)
            .map_or_else(String::new, |v| v.get_name().to_string());
        return Err(bad_input(format!(
            "--group-by {by} names the busiest groups when no target is given; drop it, or drop \
             --comm/--pid/--cgroup"
        )));
    }
    if args.max_targets == 0 {
        return Err(bad_input(
            "--max-targets 0 leaves no target; give 1 or more (the rest count as `other`)",
        ));
    }
    if args.max_connections == 0 || args.request_timeout_s == 0 {
        return Err(bad_input(
            "--max-connections and the request timeout must be at least 1",
        ));
    }
    check_vms(args).map_err(bad_input)?;
    let probe_interval = args
        .probe_interval
        .as_deref()
        .map(parse_interval)
        .transpose()
        .map_err(bad_input)?;
    let web = args
        .web_config_file
        .as_deref()
        .map(WebConfig::load)
        .transpose()?;
    Ok(Settings {
        listen,
        comms,
        pids,
        cgroups,
        max_targets: args.max_targets,
        group_by: args.group_by.unwrap_or_default(),
        series_budget: args.series_budget,
        probe_interval,
        web,
        mechanism: args.mechanism,
        max_connections: args.max_connections,
        request_timeout_s: args.request_timeout_s,
        fake_weights: fake_weights(args)?,
        program_costs: args.bpf_program_costs,
        latency_sample: check_latency_sample(args.latency_sample).map_err(bad_input)?,
        attach_every: check_attach_every(args.attach_every).map_err(bad_input)?,
        history: crate::history::location(),
        facts_interval: parse_facts_interval(&args.facts_interval).map_err(bad_input)?,
        log_level: args
            .log_level
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(bad_input)?,
        log_format: args.log_format.parse().map_err(bad_input)?,
        max_vms: args.max_vms,
        listed_vms: args.vm.clone(),
        kvm_events: args.kvm_events.clone(),
    })
}

/// `--max-vms` 1 to 1024; `--vm` at most `MAX_LISTED` names, none empty or repeated.
fn check_vms(args: &Args) -> Result<(), String> {
    use crate::exporter::vms::{MAX_LISTED, MAX_LISTED_VCPUS};
    if !(1..=1024).contains(&args.max_vms) {
        return Err(format!(
            "--max-vms {} is not from 1 to 1024; give how many VMs get their own label (the \
             rest are vm=\"other\")",
            args.max_vms
        ));
    }
    if args.vm.len() > MAX_LISTED {
        return Err(format!(
            "--vm is given {} times: at most {MAX_LISTED} VMs have per-vCPU series (up to \
             {MAX_LISTED_VCPUS} vCPUs each), to bound the series; name fewer",
            args.vm.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for v in &args.vm {
        if v.trim().is_empty() || !seen.insert(v.as_str()) {
            return Err(format!(
                "--vm `{v}` is empty or repeated; give each VM's label once, as cpulab_vm_vcpus \
                 shows it (its QEMU -name, else `COMM (PID)`)"
            ));
        }
    }
    Ok(())
}

/// `--fake-weights`: only beside `--mechanism fake`, and not all zero.
fn fake_weights(args: &Args) -> Result<Vec<u64>> {
    if args.fake_weights.is_empty() {
        return Ok(Vec::new());
    }
    if args.mechanism != Mechanism::Fake {
        return Err(bad_input(
            "--fake-weights sets the test double's mix: give it with --mechanism fake, or leave it out",
        ));
    }
    if args.fake_weights.iter().all(|w| *w == 0) {
        return Err(bad_input(
            "--fake-weights are all 0, so no wakeup would be made; give at least one above 0",
        ));
    }
    Ok(args.fake_weights.clone())
}

/// Runs the exporter until SIGTERM or Ctrl-C.
pub fn run(args: Args, g: &Global) -> Result<()> {
    let machine = Machine::detect(&g.root)?;
    let s = settings(&args, &machine)?;
    crate::exporter::serve(&machine, s, g.quiet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_flags_are_bounded() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: Args,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["x"];
            argv.extend_from_slice(extra);
            Cli::parse_from(argv).a
        };
        assert_eq!(check_vms(&parse(&["--vm", "db", "--vm", "web"])), Ok(()));
        for bad in [
            &["--max-vms", "0"][..],
            &[
                "--vm", "a", "--vm", "b", "--vm", "c", "--vm", "d", "--vm", "e",
            ],
            &["--vm", "db", "--vm", "db"],
            &["--vm", " "],
        ] {
            let e = check_vms(&parse(bad)).unwrap_err();
            assert!(e.starts_with("--"), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn attach_every_is_1_to_60() {
        for n in [1, 2, 4, 60] {
            assert_eq!(check_attach_every(n), Ok(n));
        }
        for n in [0, 61, 3600] {
            let e = check_attach_every(n).unwrap_err();
            assert!(e.starts_with(&format!("--attach-every {n} ")), "{e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn a_latency_sample_is_a_power_of_two_up_to_1024() {
        for n in [1, 2, 8, 1024] {
            assert_eq!(check_latency_sample(n), Ok(n));
        }
        for n in [0, 3, 12, 2048] {
            let e = check_latency_sample(n).unwrap_err();
            assert!(e.contains(&format!("--latency-sample {n} ")), "{e}");
        }
        // The flag's help says 8 wakeups per tick are all timed.
        assert_eq!(crate::wakeups::EXACT_PER_TICK, 8);
    }
}
