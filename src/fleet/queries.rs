//! Every PromQL expression `cpulab fleet` sends, in one place: what the docs cost out for
//! 10,000 hosts (docs/fleet.md) and what the Grafana dashboard's panels are built from.
//!
//! They read the recording rules of `contrib/prometheus/cpulab.rules.yml` (one series per host
//! or per host and target, every rule interval), never the exporters' histograms, and each
//! returns at most `--limit` series: `topk` picks the ranked targets once per query, and every
//! other figure is asked only for them (`and on (instance, job, target) <the topk>`). Figures
//! over the window are taken from a subquery at the report's step (`[W:S]`), so a 7-day window
//! reads 168 points per series at a step of an hour, whatever the rule interval.

/// The recording rules the ranking reads (all in the group `cpulab.rules`).
pub const COST: &str = "target:cpulab_placement_cost_seconds:mean_rate5m";
pub const HOST_COST: &str = "instance:cpulab_placement_cost_seconds:mean_rate5m";
pub const SHARE: &str = "target:cpulab_cross_cpu_wakeups:ratio_rate5m";
pub const CROSS_MEAN: &str = "target:cpulab_wakeup_latency_cross_cpu_seconds:mean_rate5m";
pub const SAME_MEAN: &str = "target:cpulab_wakeup_latency_same_cpu_seconds:mean_rate5m";
pub const WAKEUPS: &str = "target:cpulab_wakeups:rate5m";
pub const HALTS: &str = "instance:cpulab_halts_per_wakeup:ratio_rate5m";
pub const IPIS: &str = "instance:cpulab_ipis_per_wakeup:ratio_rate5m";
pub const PROBE: &str = "instance:cpulab_probe_cross_over_same:ratio";

/// Every rule the report needs: a Prometheus without one of them is refused with the fix.
pub const RULES: &[&str] = &[
    COST, HOST_COST, SHARE, CROSS_MEAN, SAME_MEAN, WAKEUPS, HALTS, IPIS, PROBE,
];

/// The recording rules of what guests wait, on KVM hosts (`cpulab_vm_*`): per VM and per host,
/// the vCPUs' run-queue wait and run time per vCPU measured, and the vCPUs measured.
pub const VM_WAIT: &str = "vm:cpulab_vm_vcpu_wait_seconds_per_vcpu:rate5m";
pub const VM_RUN: &str = "vm:cpulab_vm_vcpu_run_seconds_per_vcpu:rate5m";
pub const VM_VCPUS: &str = "vm:cpulab_vm_vcpus_measured:sum";
pub const HOST_VM_WAIT: &str = "instance:cpulab_vm_vcpu_wait_seconds_per_vcpu:rate5m";
pub const HOST_VCPUS: &str = "instance:cpulab_vm_vcpus_measured:sum";

/// The rules of the VM ranking: a Prometheus without one of them gets the rest of the report,
/// and this section says which rule is missing.
pub const VM_RULES: &[&str] = &[VM_WAIT, VM_RUN, VM_VCPUS, HOST_VM_WAIT, HOST_VCPUS];

/// The range of the rules' rates: a point within this after a fact changed mixes both sides.
pub const RULE_RANGE_S: f64 = 300.0;

/// The machine facts `cpulab_machine_info` carries as labels (docs/exporter.md).
pub const FACTS: &[&str] = &[
    "kernel",
    "virtualization",
    "idle_driver",
    "idle_governor",
    "guest_halt_poll_ns",
    "cpufreq_governor",
    "smt",
    "mitigations",
    "boot_options",
];

/// A window and step as PromQL writes a subquery range: `[604800s:3600s]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    pub seconds: u64,
    pub step_s: u64,
}

impl Window {
    fn sub(&self) -> String {
        format!("[{}s:{}s]", self.seconds, self.step_s)
    }

    /// `rule` over the window, its NaN points (a ratio of two rates at zero: an idle target)
    /// left out: a figure's mean is over the steps where it had a value.
    fn over(&self, rule: &str) -> String {
        format!("({rule} > -Inf){}", self.sub())
    }
}

/// Instances that published cpulab series in the window (one number).
pub fn hosts_seen(w: Window) -> String {
    format!(
        "count(count by (instance, job) (last_over_time(cpulab_exporter_build_info{})))",
        w.sub()
    )
}

/// Instances whose exporter answers now (one number).
pub fn hosts_now() -> String {
    "count(count by (instance, job) (cpulab_exporter_build_info))".to_string()
}

/// The ranked targets: the `limit` highest mean costs over the window. The one query that
/// reads every host's cost; the others read only the hosts it names.
pub fn top(w: Window, limit: usize) -> String {
    format!("topk({limit}, avg_over_time({}))", w.over(COST))
}

/// The `limit` highest means of `rule` over the window (one query over every host).
pub fn top_of(w: Window, rule: &str, limit: usize) -> String {
    format!("topk({limit}, avg_over_time({}))", w.over(rule))
}

/// A selector of these instances (`{instance=~"^(?:a|b)$"}`), their names matched literally.
pub fn instances(hosts: &[String]) -> String {
    let alternatives: Vec<String> = hosts.iter().map(|h| regex::escape(h)).collect();
    format!(
        "{{instance=~\"^(?:{})$\"}}",
        quoted(&alternatives.join("|"))
    )
}

/// `f` over the window of `rule` (by target or by host), for the hosts of the ranking only.
/// `f` is `avg_over_time`, `stddev_over_time` or `count_over_time`.
pub fn of_hosts(f: &str, rule: &str, w: Window, hosts: &[String]) -> String {
    format!("{f}({})", w.over(&format!("{rule}{}", instances(hosts))))
}

/// The cost of every target of these hosts (a range query at the report's step: the charts).
pub fn cost_of(hosts: &[String]) -> String {
    format!("{COST}{}", instances(hosts))
}

/// The worst success of the collectors behind the host figures (`idle`, `interrupts`) over the
/// window, for the hosts of the ranking: why a figure is missing.
pub fn collectors_of(w: Window, hosts: &[String]) -> String {
    let sel = instances(hosts);
    let sel = sel.trim_end_matches('}');
    format!(
        "min by (instance, job, collector) (min_over_time(cpulab_exporter_collector_success\
         {sel}, collector=~\"idle|interrupts\"}}{}))",
        w.sub()
    )
}

/// Targets that woke in the window but have no cost: up to `limit`, by their wakeups.
pub fn without_cost(w: Window, limit: usize) -> String {
    format!(
        "topk({limit}, avg_over_time({}) unless on (instance, job, target) \
         count_over_time({}))",
        w.over(WAKEUPS),
        w.over(COST)
    )
}

/// Doctor findings across the fleet, by id and severity: one series per kind of finding.
pub fn finding_counts() -> String {
    "count by (id, severity) (max by (instance, job, id, severity) (cpulab_doctor_finding))"
        .to_string()
}

/// The findings of the hosts of the ranking.
pub fn findings_of(hosts: &[String]) -> String {
    format!(
        "max by (instance, job, id, severity) (cpulab_doctor_finding{})",
        instances(hosts)
    )
}

fn fact_list() -> String {
    FACTS.join(", ")
}

/// Hosts with each finding, by their machine facts: the fact values every host with a
/// finding shares.
pub fn findings_by_facts() -> String {
    let f = fact_list();
    format!(
        "count by (id, {f}) (max by (instance, job, id) (cpulab_doctor_finding) * on (instance, \
         job) group_left ({f}) max by (instance, job, {f}) (cpulab_machine_info))"
    )
}

/// Hosts of the fleet by their machine facts.
pub fn fleet_by_facts() -> String {
    let f = fact_list();
    format!("count by ({f}) (max by (instance, job, {f}) (cpulab_machine_info))")
}

/// Hosts with more than one set of machine facts at the steps of the window: up to `limit`.
/// (A set that lived between two steps is not seen.)
pub fn drifted(w: Window, limit: usize) -> String {
    format!(
        "topk({limit}, count by (instance, job) (present_over_time(cpulab_machine_info{})) > 1)",
        w.sub()
    )
}

fn quoted(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"")
}

/// One host's selector.
pub fn host(instance: &str, job: &str) -> String {
    format!(
        "{{instance=\"{}\", job=\"{}\"}}",
        quoted(instance),
        quoted(job)
    )
}

/// One host's machine facts (a range query: each label set with the points it was seen at).
pub fn facts_of(instance: &str, job: &str) -> String {
    format!("cpulab_machine_info{}", host(instance, job))
}

/// One host's placement cost (a range query).
pub fn host_cost_of(instance: &str, job: &str) -> String {
    format!("{HOST_COST}{}", host(instance, job))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_is_bounded_by_the_ranking_and_reads_rules_only() {
        let w = Window {
            seconds: 604_800,
            step_s: 3_600,
        };
        assert_eq!(
            top(w, 10),
            "topk(10, avg_over_time((target:cpulab_placement_cost_seconds:mean_rate5m > -Inf)[604800s:3600s]))"
        );
        let hosts = ["db-1.example:10039".to_string(), "a|b".to_string()];
        assert_eq!(
            instances(&hosts),
            "{instance=~\"^(?:db\\\\-1\\\\.example:10039|a\\\\|b)$\"}"
        );
        assert!(of_hosts("avg_over_time", SHARE, w, &hosts).contains("instance=~"));
        assert!(collectors_of(w, &hosts).contains("collector=~\"idle|interrupts\"}[604800s"));
        // Nothing reads raw samples over the whole window: every range is a subquery.
        for q in [hosts_seen(w), drifted(w, 5), without_cost(w, 5), top(w, 5)] {
            assert!(!q.contains("[604800s]"), "{q}");
        }
        assert!(drifted(w, 5).starts_with("topk(5, "));
        // A label value with a quote stays one string.
        assert_eq!(host("a\"b", "j"), "{instance=\"a\\\"b\", job=\"j\"}");
        // Every rule named is one the shipped rules file records.
        let rules = include_str!("../../contrib/prometheus/cpulab.rules.yml");
        for r in RULES.iter().chain(VM_RULES) {
            assert!(rules.contains(&format!("record: {r}\n")), "{r}");
        }
        assert_eq!(
            top_of(w, VM_WAIT, 3),
            "topk(3, avg_over_time((vm:cpulab_vm_vcpu_wait_seconds_per_vcpu:rate5m > -Inf)[604800s:3600s]))"
        );
        assert!(rules.contains("[5m]") && RULE_RANGE_S == 300.0);
    }
}
