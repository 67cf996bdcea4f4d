//! Which clock a cycle count may use.
//!
//! A number is only a cycle count if it came from a cycle. The first version timed a chain of
//! dependent `add reg, 1` and took adds per nanosecond for GHz: that holds on the AMD host, but
//! an Intel Xeon of the Golden Cove generation folds dependent add-immediates in its renamer
//! and retired about five per cycle, so the loop said 11.7 "GHz" on a 2.3 GHz vCPU and the
//! doctor called every syscall five times too expensive.
//!
//! The clock now comes from a chain whose iterations cannot overlap and whose latency no
//! renamer removes: dependent 64-bit integer multiplies (`imul r64, r64`), 3 cycles each on
//! every x86-64 core from Nehalem and Zen on (Agner Fog's instruction tables; uops.info). The
//! add chain is still timed beside it: when the two agree (one add per cycle, three per
//! multiply) two mechanisms confirm the clock; when the adds run faster, the report says the
//! CPU overlaps them. The figure is then checked against what the CPU can run at: the highest
//! frequency the kernel (cpufreq `cpuinfo_max_freq`) or CPUID leaf 0x16 reports, else 6.5 GHz,
//! above any x86 CPU shipped. A figure outside that range is refused, with the reason, and
//! anything converting time to cycles falls back to the frequency the kernel reports (`cpu MHz`
//! of /proc/cpuinfo, which in a VM is the TSC rate the kernel calibrated), naming it.
//!
//! Parsing is pure ([`ClockRefs::parse_cpuinfo`], [`judge`]); the reader takes a root so a
//! fixture stands in for another CPU.

use crate::probe::cpuid;
use crate::probe::freq::Freq;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Latency of a dependent `imul r64, r64`, in cycles (every x86-64 core from Nehalem and
/// Zen on).
pub const IMUL_LATENCY_CYCLES: f64 = 3.0;
/// With no maximum reported, no x86 CPU has shipped above ~6.2 GHz.
pub const ABSOLUTE_CEILING_MHZ: f64 = 6500.0;
/// Margin above a reported maximum (rounding, a little extra boost).
pub const CEILING_MARGIN: f64 = 1.05;
/// Below this the measurement was preempted, not clocked: no x86 server core runs this slow.
pub const FLOOR_MHZ: f64 = 400.0;
/// The add chain agrees with the multiply chain within this factor.
const AGREEMENT: f64 = 1.2;

/// What the kernel and the CPU say about the clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockRefs {
    /// `vendor_id` of /proc/cpuinfo.
    pub vendor: Option<String>,
    /// `model name` of /proc/cpuinfo.
    pub model_name: Option<String>,
    /// `cpu MHz` of /proc/cpuinfo: in a VM without cpufreq, the TSC rate the kernel calibrated.
    pub cpuinfo_mhz: Option<f64>,
    /// The `@ 2.80GHz` of the model name: the nominal (base) clock.
    pub brand_mhz: Option<f64>,
    /// cpufreq `cpuinfo_max_freq`, the highest over the policies.
    pub cpufreq_max_mhz: Option<f64>,
    /// CPUID leaf 0x16 base frequency.
    pub cpuid_base_mhz: Option<f64>,
    /// CPUID leaf 0x16 maximum frequency.
    pub cpuid_max_mhz: Option<f64>,
}

impl ClockRefs {
    /// Reads /proc/cpuinfo, cpufreq and CPUID below `root` (`/` when live).
    pub fn read(root: &Path) -> Self {
        let live = root == Path::new("/");
        let text = std::fs::read_to_string(root.join("proc/cpuinfo")).unwrap_or_default();
        let mut r = Self::parse_cpuinfo(&text);
        r.cpufreq_max_mhz = Freq::read(root, false)
            .policies
            .value()
            .and_then(|ps| ps.iter().filter_map(|p| p.cpuinfo_max_khz).max())
            .map(|k| k as f64 / 1000.0);
        (r.cpuid_base_mhz, r.cpuid_max_mhz) = cpuid::read_frequency(root, live);
        r
    }

    /// The first CPU's block of /proc/cpuinfo (pure).
    pub fn parse_cpuinfo(text: &str) -> Self {
        let block = text.split("\n\n").next().unwrap_or("");
        let field = |k: &str| {
            block
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(key, _)| key.trim() == k)
                .map(|(_, v)| v.trim().to_string())
        };
        let model_name = field("model name");
        Self {
            vendor: field("vendor_id"),
            cpuinfo_mhz: field("cpu MHz")
                .and_then(|v| v.parse().ok())
                .filter(|m: &f64| *m > 0.0),
            brand_mhz: model_name.as_deref().and_then(brand_mhz),
            model_name,
            ..Default::default()
        }
    }

    /// The highest frequency this CPU reports it can run at, and where that came from.
    pub fn ceiling(&self) -> (f64, String) {
        let reported = [
            (self.cpufreq_max_mhz, "cpufreq cpuinfo_max_freq"),
            (self.cpuid_max_mhz, "CPUID leaf 0x16 maximum"),
        ]
        .into_iter()
        .filter_map(|(v, s)| v.map(|v| (v, s)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
        match reported {
            Some((v, s)) => (
                v * CEILING_MARGIN,
                format!("{s} {v:.0} MHz + {:.0}%", (CEILING_MARGIN - 1.0) * 100.0),
            ),
            None => (
                ABSOLUTE_CEILING_MHZ,
                "no maximum reported; no x86 CPU has shipped above ~6.2 GHz".into(),
            ),
        }
    }

    /// The frequency the kernel or CPU reports, for when the measured one is refused.
    pub fn reported(&self) -> Option<(f64, String)> {
        if let Some(v) = self.cpuinfo_mhz {
            return Some((v, "kernel: /proc/cpuinfo cpu MHz".into()));
        }
        if let Some(v) = self.cpuid_base_mhz {
            return Some((v, "CPUID leaf 0x16 base frequency".into()));
        }
        self.brand_mhz
            .map(|v| (v, "nominal frequency from the model name".into()))
    }
}

/// `Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz` -> 2100 (pure).
pub fn brand_mhz(model: &str) -> Option<f64> {
    let (_, tail) = model.rsplit_once('@')?;
    let ghz: f64 = tail.trim().trim_end_matches("GHz").trim().parse().ok()?;
    (ghz > 0.0).then_some(ghz * 1000.0)
}

/// The rates of the calibration chains, each the fastest of several short rounds (preemption
/// only slows a round).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChainRates {
    /// Dependent `add reg, 1` per ns.
    pub add_per_ns: f64,
    /// Dependent `imul r64, r64` per ns.
    pub imul_per_ns: f64,
    /// TSC ticks per ns over the multiply rounds, when there is a TSC.
    pub tsc_per_ns: Option<f64>,
}

/// The clock check: what was measured, what it was checked against, and what a cycle count
/// may use.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClockCheck {
    /// The chain the clock comes from.
    pub method: String,
    /// The calibration chains' rates, raw.
    pub rates: ChainRates,
    /// Multiply chain rate x its latency: the measured clock, in MHz.
    pub measured_mhz: f64,
    /// Add chain rate / measured clock: 1 when one dependent add retires per cycle.
    pub adds_per_cycle: f64,
    /// The TSC rate, in MHz (constant on modern CPUs: the nominal clock, not the current one).
    pub tsc_mhz: Option<f64>,
    /// What the kernel and CPUID report.
    pub refs: ClockRefs,
    /// The most this CPU can run at, in MHz, and its source.
    pub ceiling_mhz: f64,
    pub ceiling_source: String,
    /// The measured clock lies within what the CPU can run at.
    pub accepted: bool,
    /// Why the measured clock was accepted or refused, in words.
    pub verdict: String,
    /// The frequency a cycle count uses, in MHz: the measured one when accepted, else the one
    /// the kernel reports.
    pub used_mhz: Option<f64>,
    /// Where `used_mhz` came from.
    pub used_source: String,
}

/// Judges the measured clock against what the CPU can run at (pure).
pub fn judge(rates: ChainRates, refs: ClockRefs, cycles_known: bool) -> ClockCheck {
    let measured_mhz = rates.imul_per_ns * IMUL_LATENCY_CYCLES * 1000.0;
    let adds_per_cycle = if measured_mhz > 0.0 {
        rates.add_per_ns * 1000.0 / measured_mhz
    } else {
        0.0
    };
    let tsc_mhz = rates.tsc_per_ns.map(|t| t * 1000.0);
    let (ceiling_mhz, ceiling_source) = refs.ceiling();
    let refused = if !cycles_known {
        Some(
            "no chain of known latency on this architecture, so the loop rate is not a clock"
                .to_string(),
        )
    } else if measured_mhz > ceiling_mhz {
        Some(format!(
            "the multiply chain gives {measured_mhz:.0} MHz, above the most this CPU runs at \
             ({ceiling_mhz:.0} MHz: {ceiling_source}), so its multiply latency is not {IMUL_LATENCY_CYCLES:.0} cycles here"
        ))
    } else if measured_mhz < FLOOR_MHZ {
        Some(format!(
            "the multiply chain gives {measured_mhz:.0} MHz, below {FLOOR_MHZ:.0} MHz: the \
             calibration was preempted, not clocked"
        ))
    } else {
        None
    };
    let adds = if adds_per_cycle > AGREEMENT {
        format!(
            "; the dependent add chain ran {adds_per_cycle:.1} adds per cycle (this CPU overlaps \
             dependent add-immediates, so an add loop is not a cycle counter here)"
        )
    } else if adds_per_cycle < 1.0 / AGREEMENT {
        format!("; the dependent add chain ran only {adds_per_cycle:.2} adds per cycle")
    } else {
        "; the dependent add chain agrees (one add per cycle)".into()
    };
    let against = [
        tsc_mhz.map(|t| format!("TSC {t:.0} MHz")),
        refs.cpuinfo_mhz.map(|t| format!("kernel cpu MHz {t:.0}")),
        refs.brand_mhz.map(|t| format!("model name {t:.0} MHz")),
        refs.cpuid_base_mhz
            .map(|t| format!("CPUID base {t:.0} MHz")),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ");
    let against = if against.is_empty() {
        String::new()
    } else {
        format!("; reported: {against}")
    };
    let (accepted, verdict, used) = match refused {
        Some(why) => (
            false,
            format!("refused: {why}{adds}{against}"),
            refs.reported(),
        ),
        None => (
            true,
            format!(
                "accepted: {measured_mhz:.0} MHz is within {FLOOR_MHZ:.0}..{ceiling_mhz:.0} MHz ({ceiling_source}){adds}{against}"
            ),
            Some((
                measured_mhz,
                format!(
                    "measured: dependent multiply chain, {IMUL_LATENCY_CYCLES:.0} cycles each, within what the CPU reports it can run at"
                ),
            )),
        ),
    };
    ClockCheck {
        method: format!(
            "dependent `imul r64, r64` chain ({IMUL_LATENCY_CYCLES:.0}-cycle latency) and dependent `add reg, 1` chain, the fastest of several rounds each"
        ),
        rates,
        measured_mhz,
        adds_per_cycle,
        tsc_mhz,
        ceiling_mhz,
        ceiling_source,
        accepted,
        verdict,
        used_mhz: used.as_ref().map(|u| u.0),
        used_source: used
            .map(|u| u.1)
            .unwrap_or_else(|| "none: the kernel reports no frequency".into()),
        refs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    #[test]
    fn brand_strings() {
        assert_eq!(
            brand_mhz("Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz"),
            Some(2100.0)
        );
        assert_eq!(brand_mhz("AMD EPYC 7313P 16-Core Processor"), None);
        assert_eq!(brand_mhz("Weird @ fast"), None);
    }

    #[test]
    fn cpuinfo_is_parsed_from_the_first_block() {
        let r = ClockRefs::parse_cpuinfo(
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor @ 2.80GHz\ncpu MHz\t\t: 2793.436\n\nprocessor\t: 1\ncpu MHz\t\t: 1.0\n",
        );
        assert_eq!(r.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(r.cpuinfo_mhz, Some(2793.436));
        assert_eq!(r.brand_mhz, Some(2800.0));
    }

    /// Regression: on the Intel Xeon host the add loop ran 11.68 adds per ns and was taken
    /// for 11678 MHz. The multiply chain gives the clock; the add chain is named as overlapping.
    #[test]
    fn the_intel_xeon_host_gets_its_real_clock() {
        let refs = ClockRefs::read(&fixture("xeon-kvm"));
        assert_eq!(refs.cpuinfo_mhz, Some(2300.0));
        let rates = ChainRates {
            add_per_ns: 11.678,
            imul_per_ns: 2.3 / 3.0,
            tsc_per_ns: Some(2.3),
        };
        let c = judge(rates, refs.clone(), true);
        assert!(c.accepted, "{}", c.verdict);
        assert!((c.used_mhz.unwrap() - 2300.0).abs() < 1.0);
        assert!(
            c.adds_per_cycle > 5.0 && c.verdict.contains("overlaps"),
            "{}",
            c.verdict
        );
        // Today's figure, the add rate taken for a clock, is refused on this CPU.
        let old = judge(
            ChainRates {
                imul_per_ns: 11.678 / 3.0,
                ..rates
            },
            refs,
            true,
        );
        assert!(
            !old.accepted && old.verdict.contains("above the most"),
            "{}",
            old.verdict
        );
        assert_eq!(old.used_mhz, Some(2300.0));
        assert!(old.used_source.contains("cpu MHz"));
    }

    #[test]
    fn the_amd_epyc_host_agrees_both_ways() {
        let refs = ClockRefs::read(&fixture("epyc-kvm"));
        assert_eq!(refs.vendor.as_deref(), Some("AuthenticAMD"));
        let c = judge(
            ChainRates {
                add_per_ns: 1.99,
                imul_per_ns: 2.0 / 3.0,
                tsc_per_ns: Some(1.996),
            },
            refs,
            true,
        );
        assert!(c.accepted && c.verdict.contains("agrees"), "{}", c.verdict);
        assert!((c.adds_per_cycle - 0.995).abs() < 0.01);
    }

    #[test]
    fn a_reported_maximum_is_the_ceiling_and_preemption_the_floor() {
        let refs = ClockRefs::read(&fixture("intel-baremetal"));
        assert_eq!(refs.cpufreq_max_mhz, Some(3700.0));
        let (ceiling, src) = refs.ceiling();
        assert!((ceiling - 3885.0).abs() < 0.1 && src.contains("cpufreq"));
        let at = |ghz: f64| {
            judge(
                ChainRates {
                    add_per_ns: ghz,
                    imul_per_ns: ghz / 3.0,
                    tsc_per_ns: None,
                },
                refs.clone(),
                true,
            )
        };
        assert!(at(3.7).accepted);
        assert!(!at(4.2).accepted);
        assert!(!at(0.1).accepted && at(0.1).verdict.contains("preempted"));
        assert_eq!(
            at(0.1).used_mhz,
            Some(2100.0),
            "the model name's nominal clock"
        );
        assert!(!judge(at(3.0).rates, refs, false).accepted);
    }
}
