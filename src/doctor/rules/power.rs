//! Power management: the cost of ramping up.
//!
//! A power-saving governor reaches full frequency under sustained load, so long benchmarks do
//! not see it; bursty work does, because each burst starts slow (field notes D: powersave to
//! performance took a batch job from 168 s to 159 s). The effect is measured without cpufreq, so
//! it works inside VMs: a calibrated dependent loop timed cold (after idle) and warm (after
//! sustained load). The governor is context for the mechanism, never the finding.

use super::rule::{Inputs, Rule, rate_effect};
use crate::doctor::findings::{Confidence, Datum, Evidence, Finding, Remedy, Severity};

pub const MIN_RATIO: f64 = 1.1;

pub struct PowerManagement;

impl Rule for PowerManagement {
    fn id(&self) -> &'static str {
        "frequency-ramp"
    }

    fn check(&self, i: Inputs<'_>) -> Vec<Finding> {
        let Some(f) = i.m.oscost.as_ref().and_then(|o| o.frequency.as_ref()) else {
            return vec![];
        };
        let Some(eff) = rate_effect(&f.cold_samples_mhz, &f.warm_samples_mhz, MIN_RATIO) else {
            return vec![];
        };
        let mut ev = vec![
            Evidence::new(
                "effective speed after idle (MHz-equivalent)",
                Datum::mean_ci(&eff.worse, "mhz"),
                "measured: oscost dependent loop, cold",
            ),
            Evidence::new(
                "effective speed under load (MHz-equivalent)",
                Datum::mean_ci(&eff.better, "mhz"),
                "measured: oscost dependent loop, warm",
            ),
        ];
        if let Some(r) = f.ramp_up_ms {
            ev.push(Evidence::new(
                "time to reach 95% of warm speed",
                Datum::number(r, "ms"),
                "measured: oscost ramp",
            ));
        }
        let governor = i.facts.cpufreq_governor.clone();
        match &governor {
            Some(g) => ev.push(Evidence::new(
                "cpufreq governor",
                g.clone(),
                "probe: /sys/devices/system/cpu/cpufreq",
            )),
            None => ev.push(Evidence::new(
                "cpufreq",
                "not exposed (the host decides the frequency)",
                "probe",
            )),
        }
        if let Some(e) = &i.facts.energy_perf_preference {
            ev.push(Evidence::new(
                "energy-performance preference",
                e.clone(),
                "probe: cpufreq",
            ));
        }
        let in_guest = governor.is_none();
        let mut remedies = Vec::new();
        if in_guest {
            remedies.push(Remedy::new(
                "on the host: cpupower frequency-set -g performance (or the BIOS power profile 'maximum performance')",
                "The guest cannot set the frequency; the host's policy decides how fast a vCPU starts after idle.",
                "More power and heat on the host.",
            ));
        } else {
            remedies.push(
                Remedy::new(
                    "cpupower frequency-set -g performance",
                    "Keeps the cores at full speed, so bursts do not start slow.",
                    "More power and heat; on laptops, less battery.",
                )
                .with_try("cpulab try cpufreq.governor=performance")
                .changing(crate::doctor::findings::Change::Governor {
                    governor: "performance".into(),
                }),
            );
            remedies.push(Remedy::new(
                "tuned-adm profile throughput-performance   (or latency-performance)",
                "Sets the governor, energy_perf_bias and minimum performance together (field notes D).",
                "The same power cost; tuned changes scheduler settings too.",
            ).with_try("cpulab try tuned:throughput-performance --each"));
            remedies.push(Remedy::new(
                "echo performance | tee /sys/devices/system/cpu/cpufreq/policy*/energy_performance_preference",
                "With intel_pstate/amd_pstate active: ramps faster without changing the governor.",
                "Less power saving under light load.",
            ).with_try("cpulab try cpufreq.epp=performance"));
        }
        vec![Finding {
            id: self.id().into(),
            title: format!("Bursty work starts {:.1}x slower after idle: the CPU ramps up", eff.ratio),
            severity: Severity::of_ratio(eff.ratio),
            magnitude: eff.magnitude(
                format!(
                    "a dependent loop runs at {:.0} MHz-equivalent right after idle and {:.0} under sustained load",
                    eff.worse.mean, eff.better.mean
                ),
                "mhz",
            ),
            evidence: ev,
            mechanism: "After idle the core runs at a low frequency and the governor raises it only \
                after it sees sustained load; work that comes in short bursts runs much of its time \
                at the low speed."
                .into(),
            remedies,
            confidence: if governor.as_deref().is_some_and(|g| g != "performance") { Confidence::High } else { Confidence::Medium },
            uncertain: None,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn powersave_alone_is_context() {
        let (facts, m) = quiet_machine();
        assert_eq!(facts.cpufreq_governor.as_deref(), Some("powersave"));
        assert!(
            PowerManagement
                .check(Inputs {
                    facts: &facts,
                    m: &m
                })
                .is_empty()
        );
        let (facts, m) = everything_wrong();
        let f = PowerManagement.check(Inputs {
            facts: &facts,
            m: &m,
        });
        assert!((f[0].magnitude.ratio.unwrap() - 2.0).abs() < 0.01);
    }

    // Written for the mutation run (docs/testing.md): literal inputs, answers worked by hand.

    /// The quiet machine with the loop at `cold` MHz-equivalent after idle, 3000 warm, and this
    /// governor (`None`: a guest that does not see cpufreq).
    fn judged(cold: f64, governor: Option<&str>) -> Vec<Finding> {
        let (mut facts, mut m) = quiet_machine();
        facts.cpufreq_governor = governor.map(str::to_string);
        if let Some(o) = m.oscost.as_mut() {
            o.frequency = Some(ramp(cold, 3000.0));
        }
        PowerManagement.check(Inputs {
            facts: &facts,
            m: &m,
        })
    }

    #[test]
    fn a_slow_start_after_idle_is_the_finding_and_the_governor_its_remedy() {
        // Five samples spread symmetrically: means exactly 1500 and 3000, 2.0x.
        let f = judged(1500.0, Some("powersave")).remove(0);
        assert_eq!(f.id, "frequency-ramp");
        assert_eq!(
            f.title,
            "Bursty work starts 2.0x slower after idle: the CPU ramps up"
        );
        assert_eq!(
            f.magnitude.text,
            "a dependent loop runs at 1500 MHz-equivalent right after idle and 3000 under \
             sustained load"
        );
        assert_eq!(f.severity, Severity::Medium);
        assert_eq!(f.confidence, Confidence::High);
        let tries: Vec<_> = f
            .remedies
            .iter()
            .map(|r| r.try_command.as_deref())
            .collect();
        assert_eq!(
            tries,
            [
                Some("cpulab try cpufreq.governor=performance"),
                Some("cpulab try tuned:throughput-performance --each"),
                Some("cpulab try cpufreq.epp=performance"),
            ]
        );
        // Already at performance: the ramp is the host's or the hardware's, less certain.
        assert_eq!(
            judged(1500.0, Some("performance"))[0].confidence,
            Confidence::Medium
        );
        // A guest: the host decides, and nothing here can be tried.
        let g = judged(1500.0, None).remove(0);
        assert_eq!(g.confidence, Confidence::Medium);
        assert_eq!(g.remedies.len(), 1);
        assert!(g.remedies[0].command.starts_with("on the host: "));
        assert!(g.remedies[0].try_command.is_none());
    }

    #[test]
    fn a_ramp_counts_from_a_tenth() {
        // 3000 / 2750 = 1.09x: under the 1.1x minimum; 3000 / 2700 = 1.11x: a finding.
        assert!(judged(2750.0, Some("powersave")).is_empty());
        assert_eq!(judged(2700.0, Some("powersave")).len(), 1);
    }
}
