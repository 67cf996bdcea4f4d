//! `cpulab exporter`: what wakeups cost, per placement, as Prometheus metrics, for every host
//! of a fleet.
//!
//! `doctor` and `watch` answer "why is it slow here, now". The field notes' problems appear over
//! days and across machines (a neighbour VM gets busy, an upgrade changes costs), and the people
//! who run fleets keep such signals in Prometheus. The exporter publishes cpulab's measurement
//! there: wakeups of the watched targets by placement class and destination idle, their
//! wakeup-to-run latency as exp2 histograms, halts and IPIs from the system counters (so halts
//! per wakeup is one PromQL ratio), the machine facts that decide those costs as an `_info`
//! metric, this host's newest doctor findings from the history, an optional bounded active
//! probe, and its own health.
//!
//! The counting is the kernel's (the wakeup aggregation `watch` shares, opened in
//! `crate::watch::open_source`, the front door `cpulab watch` uses too); this module only sums
//! when scraped. Its flags and their
//! validation are the command layer's (`commands::exporter`), so nothing here sees a clap type
//! or imports upward. Its parts: [`settings`] (the validated settings and the parsers the flags
//! are checked with before anything is bound or attached), [`collect`] (one scrape's readings),
//! [`metrics`] (encoding with `prometheus-client`), [`server`] and [`http`] (hyper on a
//! current-thread tokio runtime, every resource bounded), [`webconfig`], [`tls`] and [`auth`]
//! (TLS, client certificates and basic auth in the exporter-toolkit format), [`doctor`]
//! (the doctor's findings, read from the history read-only and cached), [`probe`], and the
//! self-health: [`facts`] (the machine facts re-read on an interval), [`process`]
//! (`process_*`) and [`logging`] (`--log.level`, `--log.format`).

pub mod auth;
pub mod collect;
pub mod doctor;
pub mod facts;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod probe;
pub mod process;
pub mod server;
pub mod settings;
pub mod tls;
pub mod vms;
pub mod webconfig;

use crate::error::bad_input;
use crate::machine::Machine;
use crate::wakeups::SourceOptions;
use anyhow::Result;
use http::{Request, Response};
use metrics::{Format, Frame, ProbeFigures};
use settings::{Mechanism, Settings};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The placement classes that exist among the allowed CPUs, nearest first.
pub fn host_classes(machine: &Machine) -> Vec<String> {
    let cpus = machine.allowed.to_vec();
    machine
        .topology
        .classes_among(&cpus)
        .into_iter()
        .map(|c| c.as_str().to_string())
        .collect()
}

/// The fingerprint facts published as `cpulab_machine_info` labels.
pub fn machine_labels(p: &crate::probe::Probe) -> Vec<(String, String)> {
    let or_none = |v: Option<&String>| v.cloned().unwrap_or_else(|| "none".into());
    let governors = p.freq.governors();
    vec![
        ("kernel".into(), p.kernel().to_string()),
        (
            "virtualization".into(),
            p.virt.hypervisor.clone().unwrap_or_else(|| "none".into()),
        ),
        ("idle_driver".into(), or_none(p.idle.driver.value())),
        ("idle_governor".into(), or_none(p.idle.governor.value())),
        (
            "guest_halt_poll_ns".into(),
            p.halt_poll_ns()
                .map_or_else(|| "none".into(), |n| n.to_string()),
        ),
        (
            "cpufreq_governor".into(),
            if governors.is_empty() {
                "none".into()
            } else {
                governors.join(",")
            },
        ),
        ("smt".into(), or_none(p.topology.smt_control.value())),
        (
            "mitigations".into(),
            p.mitigations.summary().unwrap_or_else(|| "unknown".into()),
        ),
        ("boot_options".into(), boot_options(p)),
    ]
}

/// The boot options the probe reads as deciding idle and mitigations (`idle=`, `haltpoll.*`,
/// `mitigations=`, `nosmt`, `isolcpus`...), `name` or `name=value` in name order; `none`.
fn boot_options(p: &crate::probe::Probe) -> String {
    let mut all: std::collections::BTreeMap<&String, &String> = p.idle.cmdline.iter().collect();
    all.extend(p.mitigations.cmdline.iter());
    crate::probe::cmdline::options_line(all)
}

/// Targets with their own label that fit in the budget, `other` aside; bad input when not even
/// `other` fits.
pub fn named_targets(base_series: usize, classes: usize, s: &Settings) -> Result<usize> {
    let per = metrics::series_per_target(classes);
    let slots = s.series_budget.saturating_sub(base_series) / per;
    if slots == 0 {
        return Err(bad_input(format!(
            "--series-budget {} is too small: this host publishes {base_series} series of its own \
             and {per} per target ({classes} placement classes); give at least {}",
            s.series_budget,
            base_series + 2 * per
        )));
    }
    Ok(s.max_targets.min(slots.saturating_sub(1)))
}

/// The start-up line of an exporter whose wakeup programs are attached one second in every `n`
/// from `from`: when its windows fall (so a benchmark, or a user comparing with another tool,
/// can line figures up with them) and that its counts are estimates.
pub fn windows_text(n: u32, from: std::time::SystemTime) -> String {
    let unix = from
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    format!(
        "wakeup programs attached one second in every {n}, from Unix time {unix:.6} (the \
         seconds [from + k*{n}, from + k*{n} + 1)); the published counts are {n} times what \
         they see: estimates"
    )
}

/// Refuses to start without the capabilities that counting wakeups needs (the test double
/// needs none).
fn check_capabilities(s: &Settings) -> Result<()> {
    if s.mechanism == Mechanism::Fake {
        return Ok(());
    }
    let status = std::fs::read_to_string(settings::own_status()).unwrap_or_default();
    if settings::cap_eff(&status).is_some_and(settings::caps_allow_bpf) {
        return Ok(());
    }
    Err(bad_input(
        "cpulab exporter needs CAP_BPF and CAP_PERFMON to count wakeups: run it as root or from \
         its systemd unit (packaging/cpulab-exporter.service), or grant them: setcap \
         cap_bpf,cap_perfmon+ep $(which cpulab)",
    ))
}

/// The warning for a listener beyond loopback without TLS or basic auth, if it is one (pure).
fn exposure_warning(listen: std::net::SocketAddr, tls: bool, users: bool) -> Option<String> {
    if listen.ip().is_loopback() || (tls && users) {
        return None;
    }
    Some(format!(
        "listening on {} without {}: anyone who reaches this port can read the \
         metrics; give --web.config.file with tls_server_config and basic_auth_users",
        listen,
        match (tls, users) {
            (false, false) => "TLS or basic auth",
            (false, true) => "TLS",
            _ => "basic auth",
        }
    ))
}

/// Opens the wakeup source through the one front door (`crate::watch::open_source`), saying
/// at start-up why a fallback was taken and when the attached windows fall.
fn open_wakeups(
    machine: &Machine,
    s: &Settings,
    named: usize,
) -> Result<Box<dyn crate::wakeups::Source>> {
    let opts = SourceOptions {
        comms: s.comms.clone(),
        pids: s.pids.clone(),
        cgroups: s.cgroups.clone(),
        max_targets: named,
        mechanism: s.mechanism,
        program_costs: s.program_costs,
        latency_sample: s.latency_sample,
        attach_every: s.attach_every,
        group_by: s.group_by,
        fake_weights: s.fake_weights.clone(),
    };
    let source = crate::watch::open_source(machine, &opts)?;
    if let Some(why) = source.fallback_reason() {
        log::warn!(
            "counting wakeups with perf in user space, at a higher cost per event: the \
             in-kernel aggregation did not load ({why}; published as \
             cpulab_exporter_mechanism_info{{fallback=\"{}\"}})",
            collect::fallback_kind(why)
        );
    }
    if let Some((n, from)) = source.attach_windows() {
        log::info!("{}", windows_text(n, from));
    }
    Ok(source)
}

/// The pages: the landing page and the metrics (Prometheus text or OpenMetrics as the scraper
/// accepts). The server has checked the method, the path and basic auth.
fn routes(landing: String, c2: Arc<collect::Collector>) -> server::Handler {
    Arc::new(move |req: &Request| match req.path.as_str() {
        "/" => Response {
            status: (200, "OK"),
            content_type: "text/html; charset=utf-8",
            body: landing.clone().into_bytes(),
            extra_headers: Vec::new(),
        },
        "/metrics" => {
            let format = if http::wants_openmetrics(req.accept.as_deref()) {
                Format::OpenMetrics
            } else {
                Format::Prometheus
            };
            Response {
                status: (200, "OK"),
                content_type: format.content_type(),
                body: c2.scrape(format).into_bytes(),
                extra_headers: Vec::new(),
            }
        }
        _ => Response::not_found(),
    })
}

/// Serves the metrics of `machine` with validated settings until SIGTERM or Ctrl-C (the flags
/// and their validation are the command layer's, `commands::exporter`).
pub fn serve(machine: &Machine, mut s: Settings, quiet: bool) -> Result<()> {
    let level = s.log_level.unwrap_or(if quiet {
        logging::Level::Error
    } else {
        logging::Level::Info
    });
    logging::init(level, s.log_format);
    check_capabilities(&s)?;
    let listener = bind(&s)?;
    let web = s.web.take().map(Arc::new);
    let tls = web.as_ref().is_some_and(|w| w.has_tls());
    let users = web.as_ref().is_some_and(|w| w.has_users());
    if let Some(w) = exposure_warning(s.listen, tls, users) {
        log::warn!("{w}");
    }
    let classes = host_classes(machine);
    let probed = crate::probe::probe(machine);
    let machine_info = machine_labels(&probed);
    let host_key = crate::history::fingerprint::of_probe(&probed).host_key;
    let probe_slot: Arc<Mutex<Option<ProbeFigures>>> = Arc::new(Mutex::new(None));
    let status = std::fs::read_to_string(settings::own_status()).unwrap_or_default();
    let may_inspect = settings::cap_eff(&status).is_some_and(settings::caps_allow_ptrace);
    let looking = vms::looking(&machine.root, may_inspect);
    let mut vm_watch = vms::VmWatch::new(
        &machine.root,
        looking.clone(),
        s.max_vms,
        s.listed_vms.clone(),
        Err("not attached yet".into()),
    );
    let base = base_series(machine, &classes, &machine_info, &s, vm_watch.looking());
    let named = named_targets(base, classes.len(), &s)?;
    // Attached only once the settings are known good: bad input changes nothing.
    let kvm = match (&looking, s.kvm_events.as_str()) {
        (vms::Looking::On, "off") => Err("--kvm-events off was given".to_string()),
        (vms::Looking::On, when) => {
            crate::host::watch::tracing::KvmTracing::start(&machine.root, false, when == "on")
        }
        _ => Err("no VM is looked for".to_string()),
    };
    match (&looking, &kvm) {
        (vms::Looking::On, Ok(_)) => log::info!(
            "counting KVM's events per VM by BPF for as long as the exporter runs \
             (cpulab_vm_halts_total and the rest; --kvm-events off stops it)"
        ),
        (vms::Looking::On, Err(why)) => {
            log::warn!("KVM's events are not published (cpulab_vm_kvm_events_available 0): {why}")
        }
        _ => {}
    }
    vm_watch.set_kvm(kvm);
    match vm_watch.looking() {
        vms::Looking::On => log::info!(
            "publishing the KVM VMs of this host read from /proc: at most {} with their own \
             label, the rest as vm=\"other\"{}",
            s.max_vms,
            if s.listed_vms.is_empty() {
                String::new()
            } else {
                format!("; per vCPU for {}", s.listed_vms.join(", "))
            }
        ),
        vms::Looking::MayNotInspect(why) => {
            log::warn!("this host has KVM, but no VM is published (cpulab_vms is absent): {why}")
        }
        vms::Looking::NoKvm(why) if !s.listed_vms.is_empty() => {
            log::warn!(
                "--vm {}: {why}, so no VM is published",
                s.listed_vms.join(", ")
            )
        }
        vms::Looking::NoKvm(_) => {}
    }
    if named < s.max_targets {
        log::info!(
            "{named} targets get their own label (not {}): the series budget {} holds {base} \
             series for the host and {} per target here",
            s.max_targets,
            s.series_budget,
            metrics::series_per_target(classes.len())
        );
    }
    let source = open_wakeups(machine, &s, named)?;
    let facts = facts::Facts::new(
        machine.clone(),
        machine_info,
        s.facts_interval,
        std::time::Instant::now(),
    );
    let stats = Arc::new(server::Stats::default());
    let collector = Arc::new(collect::Collector::new(
        machine.root.clone(),
        classes.clone(),
        facts,
        Some(source),
        named,
        s.series_budget,
        probe_slot.clone(),
        stats.clone(),
        doctor::Reader::new(s.history.clone(), host_key, doctor::REREAD),
        vm_watch,
    ));
    let stop_probe = Arc::new(AtomicBool::new(false));
    let probe_thread = match s.probe_interval {
        Some(every) => Some(probe::start(
            machine.clone(),
            every,
            probe_slot,
            stop_probe.clone(),
        )?),
        None => None,
    };
    let landing = landing_page(&s, &collector.mechanism, &classes);
    let handler = routes(landing, collector.clone());
    log::info!(
        "serving http{}://{}/metrics (mechanism {})",
        if tls { "s" } else { "" },
        s.listen,
        collector.mechanism
    );
    let served = server::serve(
        listener,
        web,
        handler,
        server::Limits {
            max_connections: s.max_connections,
            head_timeout: std::time::Duration::from_secs(s.request_timeout_s),
            ..server::Limits::default()
        },
        stats,
        &|| crate::signals::pending().is_some(),
    );
    stop_probe.store(true, Ordering::SeqCst);
    if let Some(t) = probe_thread {
        let _ = t.join();
    }
    collector.close();
    served.map_err(|e| anyhow::anyhow!("serving {}: {e}", s.listen))
}

fn bind(s: &Settings) -> Result<TcpListener> {
    TcpListener::bind(s.listen).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::AddrInUse => "is in use (another exporter?); stop it or choose \
                 another port with --web.listen-address ADDR:PORT"
                .to_string(),
            std::io::ErrorKind::PermissionDenied => "may not be bound by this user (a port below \
                 1024 needs CAP_NET_BIND_SERVICE); choose a port above 1024 with --web.listen-address"
                .to_string(),
            std::io::ErrorKind::AddrNotAvailable => "is not an address of this machine; give one \
                 of its addresses (or 0.0.0.0) with --web.listen-address"
                .to_string(),
            _ => format!("cannot be bound: {e}; choose another with --web.listen-address ADDR:PORT"),
        };
        bad_input(format!("--web.listen-address {} {why}", s.listen))
    })
}

/// The VM figures at their most: `--max-vms` VMs and the `--vm` ones with their own label,
/// `other`, every counter, and every `--vm` VM with its most vCPUs; on a host without KVM, the
/// count alone; nothing where other processes may not be inspected.
fn vms_at_most(s: &Settings, looking: &vms::Looking) -> Option<vms::VmFigures> {
    match looking {
        vms::Looking::On => {}
        vms::Looking::NoKvm(_) => {
            return Some(vms::VmFigures {
                off: Some(String::new()),
                count: Some(0),
                ..vms::VmFigures::default()
            });
        }
        vms::Looking::MayNotInspect(_) => return None,
    }
    let counts = Some(vms::Counts::default());
    let one = |vm: String, per_vcpu: Option<std::collections::BTreeMap<u32, vms::Counts>>| {
        vms::VmSeries {
            vm,
            counts,
            per_vcpu,
            ..vms::VmSeries::default()
        }
    };
    let mut all: Vec<vms::VmSeries> = (0..=s.max_vms).map(|i| one(i.to_string(), None)).collect();
    let vcpus = (0..vms::MAX_LISTED_VCPUS).map(|i| (i, vms::Counts::default()));
    for name in &s.listed_vms {
        all.push(one(name.clone(), Some(vcpus.clone().collect())));
    }
    Some(vms::VmFigures {
        off: None,
        count: Some(0),
        not_inspected: 0,
        migrations_available: Some(true),
        kvm_available: Some(true),
        vms: all,
    })
}

/// Series of everything but the targets, measured by encoding a frame without targets.
fn base_series(
    machine: &Machine,
    classes: &[String],
    machine_info: &[(String, String)],
    s: &Settings,
    looking: &vms::Looking,
) -> usize {
    let (idle_entries, _) = collect::read_idle_totals(&machine.root);
    let (interrupts, _) = collect::read_interrupt_totals(&machine.root);
    let probe = s.probe_interval.map(|_| ProbeFigures {
        round_trips: probe::pairs(machine)
            .iter()
            .map(|_| (String::new(), 0.0, 0.0))
            .collect(),
        ..ProbeFigures::default()
    });
    // The doctor's series at their cap, so findings never push the targets over the budget.
    let doctor = match s.history {
        crate::history::Location::Off => doctor::DoctorFigures::default(),
        crate::history::Location::At(_) => doctor::DoctorFigures {
            state: doctor::State::Ok,
            run: Some(doctor::DoctorRun {
                history_id: 0,
                started_unix_s: 0,
                mode: String::new(),
                findings: (0..doctor::MAX_FINDINGS)
                    .map(|i| doctor::FindingFigure {
                        id: i.to_string(),
                        severity: crate::doctor::findings::Severity::Low,
                        ratio: Some(1.0),
                    })
                    .collect(),
                dropped: 0,
            }),
        },
    };
    let frame = Frame {
        classes: classes.to_vec(),
        wakeups: Some(crate::wakeups::Snapshot::default()),
        mechanism: String::new(),
        idle_entries,
        interrupts,
        machine: machine_info.to_vec(),
        probe,
        doctor,
        health: self_health_at_most(s.probe_interval.is_some()),
        process: process::ProcessFigures {
            cpu_seconds: Some(0.0),
            resident_bytes: Some(0),
            virtual_bytes: Some(0),
            open_fds: Some(0),
            max_fds: Some(0),
            start_time_s: Some(0.0),
        },
        vms: vms_at_most(s, looking),
        preferred: String::new(),
        fallback: String::new(),
    };
    metrics::count_samples(&metrics::encode(&frame, Format::Prometheus))
}

/// The exporter's own series at their most: every collector, and a read error of every kind
/// for each, so errors never push the targets over the budget.
fn self_health_at_most(probe: bool) -> metrics::Health {
    use process::ErrorKind::*;
    let mut names = vec![
        "wakeups",
        "machine",
        "idle",
        "interrupts",
        "doctor",
        "process",
        "vms",
    ];
    if probe {
        names.push("probe");
    }
    metrics::Health {
        collectors: names
            .iter()
            .map(|&collector| metrics::CollectorRun {
                collector,
                success: true,
                duration_s: 0.0,
            })
            .collect(),
        read_errors: names
            .iter()
            .flat_map(|&c| [NotFound, Permission, Parse, Io].map(|k| ((c, k.as_str()), 1)))
            .collect(),
        ..metrics::Health::default()
    }
}

/// How the landing page says `--attach-every` (pure).
fn attached_text(every: u32) -> String {
    if every <= 1 {
        "always (exact counts)".into()
    } else {
        format!(
            "one second in every {every} (counts and latencies are estimates: {every} times what was seen)"
        )
    }
}

/// How the landing page says what is published of the VMs (pure).
fn vms_text(s: &Settings) -> String {
    let listed = if s.listed_vms.is_empty() {
        String::new()
    } else {
        format!("; each vCPU of {}", s.listed_vms.join(", "))
    };
    format!(
        "vCPU run and run-queue wait (steal) of up to {} VMs, the rest as other{listed}",
        s.max_vms
    )
}

fn landing_page(s: &Settings, mechanism: &str, classes: &[String]) -> String {
    use maud::{DOCTYPE, html};
    let mut targets: Vec<String> = s.comms.iter().map(|c| format!("comm {c}")).collect();
    targets.extend(s.pids.iter().map(|p| format!("pid {p}")));
    targets.extend(s.cgroups.iter().map(|c| format!("cgroup {c}")));
    if targets.is_empty() {
        targets.push("every task, grouped by command name".into());
    }
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "cpulab exporter" } }
            body {
                h1 { "cpulab exporter" }
                p { "Wakeups by placement class (same CPU, or how far away), their wakeup-to-run \
                     latency, halts and IPIs, and the machine facts that decide them." }
                ul {
                    li { "Watching: " (targets.join(", ")) }
                    li { "Counted by: " (mechanism) }
                    li { "Placement classes on this host: " (classes.join(", ")) }
                    li { "Active probe: " (s.probe_interval.map_or("off".to_string(),
                        |d| format!("every {} s", d.as_secs()))) }
                    li { "Wakeup programs attached: " (attached_text(s.attach_every)) }
                    li { "KVM VMs: " (vms_text(s)) }
                }
                p { a href="/metrics" { "Metrics" } }
            }
        }
    }
    .into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_landing_page_says_when_counts_are_estimates() {
        assert_eq!(attached_text(1), "always (exact counts)");
        assert_eq!(attached_text(0), "always (exact counts)");
        let t = attached_text(4);
        assert!(
            t.starts_with("one second in every 4 ") && t.contains("4 times"),
            "{t}"
        );
    }

    #[test]
    fn a_listener_beyond_loopback_is_warned_of_what_it_lacks() {
        let at = |a: &str| a.parse::<std::net::SocketAddr>().unwrap();
        for (tls, users) in [(false, false), (true, false), (false, true), (true, true)] {
            assert_eq!(exposure_warning(at("127.0.0.1:10039"), tls, users), None);
            assert_eq!(exposure_warning(at("[::1]:10039"), tls, users), None);
        }
        assert_eq!(exposure_warning(at("0.0.0.0:10039"), true, true), None);
        let lacks = |tls, users| {
            let w = exposure_warning(at("0.0.0.0:10039"), tls, users).unwrap();
            assert!(w.starts_with("listening on 0.0.0.0:10039 without "), "{w}");
            w["listening on 0.0.0.0:10039 without ".len()..]
                .split(':')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(lacks(false, false), "TLS or basic auth");
        assert_eq!(lacks(false, true), "TLS");
        assert_eq!(lacks(true, false), "basic auth");
    }

    #[test]
    fn the_start_up_line_says_when_the_windows_fall() {
        let from = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_764_145_000_250_000);
        assert_eq!(
            windows_text(4, from),
            "wakeup programs attached one second in every 4, from Unix time 1764145000.250000 \
             (the seconds [from + k*4, from + k*4 + 1)); the published counts are 4 times what \
             they see: estimates"
        );
    }
}
