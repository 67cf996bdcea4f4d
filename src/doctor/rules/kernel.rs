//! Kernel entry cost: syscalls and context switches expensive for the CPU.
//!
//! Mitigations for speculative-execution attacks (page-table isolation, retpolines, IBRS,
//! buffer clearing), kernel versions and virtualisation all change what entering the kernel
//! costs (field notes D: a CentOS upgrade made every primitive slower). "Expensive" needs a
//! yardstick that works across CPUs, so costs are converted to cycles of the effective
//! frequency the doctor measured (or the model name's nominal one) and set against reference
//! ceilings for an unmitigated x86-64 kernel on bare metal: about 250 cycles for a trivial
//! syscall (getppid) and 3,000 for a switch between two threads on one CPU (lmbench-style
//! figures). Interference (preemption, interrupts) only adds time, so the figure judged is the
//! fastest batch, and it must exceed the ceiling 2.5 times: a cost that high cannot be noise,
//! and a borderline one is not worth a finding. The mitigation list is evidence for the
//! mechanism, never the finding.

use super::{Inputs, Rule, ns_ci};
use crate::doctor::findings::{Confidence, Evidence, Finding, Magnitude, Remedy, Severity};
use crate::doctor::measurements::PrimitiveCost;

/// Reference ceilings, in cycles, for an unmitigated kernel on bare metal.
pub const SYSCALL_REF_CYCLES: f64 = 250.0;
pub const SWITCH_REF_CYCLES: f64 = 3000.0;
/// A cost counts as high above this multiple of its ceiling.
pub const HIGH_FACTOR: f64 = 2.5;

pub struct KernelEntryCost;

/// Effective MHz: measured warm frequency, else the model name's `@ 2.80GHz`.
fn mhz(i: &Inputs<'_>) -> Option<(f64, &'static str)> {
    if let Some(f) =
        i.m.oscost
            .as_ref()
            .and_then(|o| o.frequency.as_ref())
            .filter(|f| f.clock_mhz)
    {
        return Some((f.warm_mhz.mean, "measured effective frequency under load"));
    }
    let model = i.facts.cpu_model.as_deref()?;
    let ghz: f64 = model
        .rsplit('@')
        .next()?
        .trim()
        .trim_end_matches("GHz")
        .trim()
        .parse()
        .ok()?;
    Some((ghz * 1000.0, "nominal frequency from the model name"))
}

/// The cost in cycles when even its least-disturbed figure is high.
fn high(p: &PrimitiveCost, mhz: f64, reference: f64) -> Option<f64> {
    let floor_ns = p
        .min_ns
        .unwrap_or(p.cost_ns.ci95_low)
        .min(p.cost_ns.ci95_low);
    (p.cost_ns.n >= 2 && floor_ns * mhz / 1000.0 > HIGH_FACTOR * reference)
        .then(|| p.cost_ns.mean * mhz / 1000.0)
}

impl Rule for KernelEntryCost {
    fn id(&self) -> &'static str {
        "kernel-entry-cost"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let (Some(os), Some((mhz, mhz_src))) = (i.m.oscost.as_ref(), mhz(&i)) else {
            return vec![];
        };
        let sys = os
            .get("syscall_getppid")
            .and_then(|p| Some((p, high(p, mhz, SYSCALL_REF_CYCLES)?)));
        let sw = os
            .get("context_switch_yield")
            .and_then(|p| Some((p, high(p, mhz, SWITCH_REF_CYCLES)?)));
        if sys.is_none() && sw.is_none() {
            return vec![];
        }
        let mut ev = vec![Evidence::new(
            "frequency used for cycles",
            format!("{mhz:.0} MHz"),
            mhz_src,
        )];
        let mut parts = Vec::new();
        let mut ratio: f64 = 1.0;
        for (name, hit, reference) in [
            ("syscall (getppid)", sys, SYSCALL_REF_CYCLES),
            ("thread switch (sched_yield)", sw, SWITCH_REF_CYCLES),
        ] {
            if let Some((p, cycles)) = hit {
                ev.push(Evidence::new(
                    name,
                    format!("{} = {cycles:.0} cycles", ns_ci(&p.cost_ns)),
                    "measured: oscost",
                ));
                parts.push(format!("a {name} costs {cycles:.0} cycles against ~{reference:.0} on an unmitigated kernel"));
                ratio = ratio.max(cycles / reference);
            }
        }
        let active: Vec<String> = i
            .facts
            .mitigations
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        for m in &active {
            ev.push(Evidence::new(
                "active mitigation",
                m.clone(),
                "probe: /sys/devices/system/cpu/vulnerabilities",
            ));
        }
        if let Some(h) = &i.facts.hypervisor {
            ev.push(Evidence::new("hypervisor", h.clone(), "probe"));
        }
        vec![Finding {
            id: self.id().into(),
            title: format!(
                "Entering the kernel is expensive here: {ratio:.1}x an unmitigated kernel"
            ),
            severity: Severity::of_ratio(ratio),
            magnitude: Magnitude {
                text: parts.join("; "),
                ratio: Some(ratio),
                worse: sys.map(|s| s.1).or(sw.map(|s| s.1)),
                better: Some(if sys.is_some() {
                    SYSCALL_REF_CYCLES
                } else {
                    SWITCH_REF_CYCLES
                }),
                unit: "cycles".into(),
            },
            evidence: ev,
            mechanism: format!(
                "Every system call and context switch crosses the user/kernel boundary, and the \
                 active mitigations add work to each crossing (flushing buffers, switching page \
                 tables, avoiding indirect branch prediction){}. Workloads that make many small \
                 syscalls or switch often pay it on every one.",
                if active.is_empty() {
                    "; no mitigation is listed active, so look at the kernel version and the hypervisor".to_string()
                } else {
                    format!(": {} active here", active.len())
                }
            ),
            remedies: vec![
                Remedy::new(
                    "cpulab oscost --json > before.json; (upgrade the kernel); cpulab oscost --json > after.json; cpulab compare before.json after.json",
                    "Newer kernels cut the cost of several mitigations; the comparison shows what changed, figure by figure.",
                    "Compare under identical conditions (field notes D).",
                ),
                Remedy::new(
                    "kernel command line: mitigations=off   (or single ones: spectre_v2=off, retbleed=off, nopti)",
                    "Removes the mitigation work from every kernel entry.",
                    "Removes protection against Spectre-class attacks: only on machines that run nothing but trusted code.",
                ),
                Remedy::new(
                    "make fewer, larger system calls (bigger buffers, batching, io_uring)",
                    "Pays the entry cost less often.",
                    "Application changes.",
                ),
            ],
            confidence: if active.is_empty() {
                Confidence::Low
            } else {
                Confidence::Medium
            },
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn cheap_entries_are_no_finding_even_with_mitigations() {
        let (facts, m) = quiet_machine();
        assert!(!facts.mitigations.is_empty());
        assert!(
            KernelEntryCost
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
        let (facts, m) = everything_wrong();
        let f = KernelEntryCost.check(Inputs {
            facts: &facts,
            m: &m,
        });
        // 600 ns at 3000 MHz = 1800 cycles = 7.2x the syscall ceiling.
        assert!((f[0].magnitude.ratio.unwrap() - 7.2).abs() < 0.01);
    }

    #[test]
    fn nominal_frequency_from_the_model_name() {
        let (mut facts, mut m) = everything_wrong();
        m.oscost.as_mut().unwrap().frequency = None;
        facts.cpu_model = Some("Intel(R) Xeon(R) Processor @ 2.80GHz".into());
        let f = KernelEntryCost.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!((f[0].magnitude.ratio.unwrap() - 600.0 * 2.8 / 250.0).abs() < 0.01);
    }
}
