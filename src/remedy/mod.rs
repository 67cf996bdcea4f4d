//! `cpulab remedy`: each finding's remedy as the files a fleet deploys.
//!
//! The doctor's remedies are words for a person plus, since this module exists, the changes
//! they make as data ([`crate::doctor::change::Change`]). This module turns those changes into
//! the formats their targets read: systemd drop-ins, `modprobe.d` and `sysctl.d` files, the
//! kernel command line for GRUB or grubby, a tuned child profile, an Ansible playbook, container
//! and Kubernetes settings, and libvirt fragments for the hypervisor's operator. Each comes with
//! the commands that apply it, verify it (an exit status that says whether the fix holds) and
//! undo it, and what needs a restart or a reboot.
//!
//! Everything here is pure: a doctor result and a few facts of the host in ([`Context`]), a
//! [`Plan`] and its files (path and contents) out. The command (`commands/remedy.rs`) writes
//! them into the output directory; nothing is applied, `cpulab try` remains the only command
//! that changes a setting.
//!
//! One remedy is one [`Deployment`]: the remedies of a finding are alternatives (pin the pair,
//! or make the idle vCPU poll), never a set to apply together, so each is written apart and the
//! Ansible playbook runs only the ones named by tag. The same change offered by several
//! findings (pinning answers a cross-CPU wakeup and an unpinned placement alike) is written
//! once, naming every finding it answers.

pub mod ansible;
pub mod command;
pub mod containers;
pub mod formats;
pub mod host;
pub mod kernel;
pub mod libvirt;
pub mod readme;
pub mod systemd;
pub mod taskset;
pub mod text;
pub mod trials;
pub mod tuned;

use crate::doctor::findings::{Change, Finding, Remedy, Site};
use serde::Serialize;

pub use command::{Command, Word};
pub use formats::Format;

/// What the generators know about the host the result came from, besides the result itself.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Context {
    /// The result's source in words (file or history run, host, time).
    pub source: String,
    /// cgroup version of the host (2 allows `AllowedCPUs=`); from the result's facts.
    pub cgroup_version: Option<u8>,
    /// The host is a virtual machine (a hypervisor was seen): host-side remedies are for its host.
    pub guest: bool,
    /// The host's name, as the result records it (a Kubernetes node is usually named so).
    pub hostname: String,
    /// The host's online CPUs (what undo gives a container back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub online_cpus: Option<String>,
    /// Whether SMT is active (whole cores for Kubernetes' static policy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smt: Option<bool>,
    /// The active tuned profile, which a child profile includes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuned_profile: Option<String>,
    /// The bootloader tooling found on this host (`update-grub`, `grub2-mkconfig`, `grubby`),
    /// when the result is this host's; empty when not known.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bootloaders: Vec<String>,
    /// This host's `cpulab try` runs from the history, or why they were not read.
    #[serde(skip)]
    pub trials: trials::Trials,
}

/// What a change needs before it takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Needs {
    /// Nothing: the apply commands make it effective at once.
    Nothing,
    /// The service restarted (its processes inherit affinity at start).
    Restart,
    /// A drained Kubernetes node and a kubelet restart.
    NodeDrain,
    /// A reboot of this machine (kernel command line).
    Reboot,
    /// The guest restarted by the host (a domain's definition changes at its next start).
    GuestRestart,
}

impl Needs {
    pub fn words(self) -> &'static str {
        match self {
            Self::Nothing => "takes effect at once",
            Self::Restart => "takes effect when the service restarts",
            Self::NodeDrain => "needs the node drained and the kubelet restarted",
            Self::Reboot => "takes effect after a reboot",
            Self::GuestRestart => "takes effect when the guest is shut down and started again",
        }
    }
}

/// One file written into the output directory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct File {
    /// Its path below the output directory.
    pub path: String,
    /// Where it goes on the target (`/etc/modprobe.d/cpulab-haltpoll.conf`); absent for a file
    /// that is read where it lies (a playbook, a fragment to paste).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub install_to: Option<String>,
    /// Set when the file holds a placeholder the operator must replace, with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    #[serde(skip)]
    pub contents: String,
}

/// One remedy in one format: its files and the commands around them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Form {
    pub format: Format,
    pub files: Vec<File>,
    /// A reversible trial first, where the format has one (`systemctl set-property --runtime`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trial: Vec<Command>,
    /// Run in order, as root, from the output directory.
    pub apply: Vec<Command>,
    /// Each exits 0 when the change holds, non-zero when it does not.
    pub verify: Vec<Command>,
    /// Files removed, the values apply saved put back.
    pub undo: Vec<Command>,
    pub needs: Needs,
    /// What the operator should know about this form (which of two forms applies here).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Form {
    /// A form with nothing in it yet.
    pub fn empty(format: Format, needs: Needs) -> Self {
        Self {
            format,
            files: vec![],
            trial: vec![],
            apply: vec![],
            verify: vec![],
            undo: vec![],
            needs,
            notes: vec![],
        }
    }

    /// Whether a file or a command of it holds a value the operator must supply.
    pub fn has_placeholder(&self) -> bool {
        self.files.iter().any(|f| f.placeholder.is_some())
            || self.commands().any(|c| c.placeholders().next().is_some())
    }

    /// Every command: trial, apply, verify, undo.
    pub fn commands(&self) -> impl Iterator<Item = &Command> {
        self.trial
            .iter()
            .chain(&self.apply)
            .chain(&self.verify)
            .chain(&self.undo)
    }
}

/// A format left out for one remedy, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skip {
    pub format: Format,
    pub reason: String,
}

/// One remedy as deployable forms.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Deployment {
    /// `01-pin`: its directory in the output and its Ansible tag.
    pub id: String,
    /// The findings it answers (`cross-cpu-wakeup`), the first one's remedy words below.
    pub findings: Vec<String>,
    /// The remedy as the doctor words it.
    pub remedy: String,
    pub site: Site,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub who: String,
    /// What it buys: each finding's measured magnitude, as the doctor measured it.
    pub buys: Vec<String>,
    /// What the remedy does, in the doctor's words.
    pub effect: String,
    /// What `cpulab doctor --try` or `cpulab try` measured of it here, when a trial ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    /// What the newest `cpulab try` of the same settings on this host measured, from the
    /// history, or that none was recorded (with the line that measures it).
    pub tried_here: trials::TriedHere,
    pub costs: String,
    pub changes: Vec<Change>,
    pub forms: Vec<Form>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skip>,
    /// Exits 0 when the finding is gone on the host: `cpulab doctor --quick --expect-absent ID`
    /// (`cpulab host --pid PID --expect-absent ID` for a host finding).
    pub verify_finding: String,
    /// Which command finds it again.
    #[serde(skip)]
    pub check: Check,
}

/// The command that finds a finding again, so its check can say whether it is gone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Check {
    /// `cpulab doctor --quick`.
    #[default]
    Doctor,
    /// `cpulab host`, on the VM's process when it is known.
    Host { pid: Option<i32> },
}

/// One remedy offered for one finding, as [`plan_offers`] reads it: a doctor finding's remedy,
/// or a `cpulab host` finding's pins and settings ([`host::offers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// The finding's id (`cross-cpu-wakeup`, `stacked-vcpus`).
    pub finding: String,
    /// What it buys: the finding's magnitude or evidence, in words.
    pub buys: String,
    pub remedy: Remedy,
    pub check: Check,
}

/// Each remedy of each doctor finding, as an offer.
pub fn offers_of(findings: &[Finding]) -> Vec<Offer> {
    findings
        .iter()
        .flat_map(|f| {
            f.remedies.iter().map(|r| Offer {
                finding: f.id.clone(),
                buys: format!("{}: {}", f.id, f.magnitude.text),
                remedy: r.clone(),
                check: Check::Doctor,
            })
        })
        .collect()
}

/// A remedy with nothing to deploy, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Undeployable {
    pub finding: String,
    pub remedy: String,
    pub reason: String,
}

/// Everything `cpulab remedy` writes and says.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub context: Context,
    /// The output directory, as given.
    pub out_dir: String,
    /// The formats asked for.
    pub formats: Vec<Format>,
    /// How many findings the result has.
    pub findings: usize,
    pub deployments: Vec<Deployment>,
    /// Remedies with nothing to deploy: advice, measurements, results too old to say.
    pub undeployable: Vec<Undeployable>,
    /// Files at the top of the output (README.md, the playbook).
    pub files: Vec<File>,
}

impl Plan {
    /// Every file of the plan: the top ones and each form's.
    pub fn all_files(&self) -> impl Iterator<Item = &File> {
        self.files.iter().chain(
            self.deployments
                .iter()
                .flat_map(|d| d.forms.iter().flat_map(|f| f.files.iter())),
        )
    }
}

/// Why a result written before cpulab recorded changes has nothing to deploy.
pub const NOT_RECORDED: &str = "no deployable form recorded (this result was written before \
    cpulab recorded what a remedy changes); re-run `cpulab doctor` on the host";

/// The plan for `findings` in `formats` (pure).
pub fn plan(findings: &[Finding], ctx: &Context, formats: &[Format], out_dir: &str) -> Plan {
    plan_offers(&offers_of(findings), findings.len(), ctx, formats, out_dir)
}

/// The plan for `offers`, the remedies of `findings` findings, in `formats` (pure).
pub fn plan_offers(
    offers: &[Offer],
    findings: usize,
    ctx: &Context,
    formats: &[Format],
    out_dir: &str,
) -> Plan {
    let mut deployments: Vec<Deployment> = Vec::new();
    let mut undeployable = Vec::new();
    for o in offers {
        let r = &o.remedy;
        let changes = match &r.changes {
            None => {
                undeployable.push(undeployable_of(o, NOT_RECORDED));
                continue;
            }
            Some(c) if c.is_empty() => {
                undeployable.push(undeployable_of(
                    o,
                    "not a setting a file can carry: advice or a measurement, done by hand",
                ));
                continue;
            }
            Some(c) => c,
        };
        if let Some(d) = deployments
            .iter_mut()
            .find(|d| d.site == r.site && &d.changes == changes && d.check == o.check)
        {
            if !d.findings.contains(&o.finding) {
                d.findings.push(o.finding.clone());
                d.buys.push(o.buys.clone());
                d.verify_finding = verify_finding(&d.findings, &d.check);
            }
            continue;
        }
        let id = format!("{:02}-{}", deployments.len() + 1, slug(changes));
        deployments.push(deployment(id, o, changes, ctx, formats));
    }
    let mut p = Plan {
        context: ctx.clone(),
        out_dir: out_dir.to_string(),
        formats: formats.to_vec(),
        findings,
        deployments,
        undeployable,
        files: Vec::new(),
    };
    if formats.contains(&Format::Ansible) && !p.deployments.is_empty() {
        p.files.push(ansible::playbook(&p));
    }
    if !p.deployments.is_empty() {
        let readme = readme::render(&p);
        p.files.insert(0, readme);
    }
    p
}

fn undeployable_of(o: &Offer, reason: &str) -> Undeployable {
    Undeployable {
        finding: o.finding.clone(),
        remedy: o.remedy.command.clone(),
        reason: reason.to_string(),
    }
}

/// A short name for a set of changes: their kinds, joined.
fn slug(changes: &[Change]) -> String {
    let mut kinds: Vec<&str> = changes.iter().map(Change::kind).collect();
    kinds.dedup();
    kinds.join("-")
}

fn deployment(
    id: String,
    o: &Offer,
    changes: &[Change],
    ctx: &Context,
    formats: &[Format],
) -> Deployment {
    let r = &o.remedy;
    let mut forms = Vec::new();
    let mut skipped = Vec::new();
    for &format in formats {
        if format == Format::Ansible {
            continue; // one playbook for every deployment, at the top
        }
        match formats::form(format, &id, changes, r.site, ctx) {
            Ok(form) => forms.push(form),
            Err(reason) => skipped.push(Skip { format, reason }),
        }
    }
    let tried_here = match o.check {
        Check::Doctor => trials::tried(r.try_command.as_deref(), &ctx.trials),
        Check::Host { .. } => trials::TriedHere::none(
            "not available, because `cpulab try` does not change a VM's vCPU placement; watch \
             the VM again with `cpulab host` after the apply"
                .into(),
        ),
    };
    Deployment {
        findings: vec![o.finding.clone()],
        remedy: r.command.clone(),
        site: r.site,
        who: r.who.clone(),
        buys: vec![o.buys.clone()],
        effect: r.effect.clone(),
        measured: r.measured.clone(),
        tried_here,
        costs: r.cost_caveat.clone(),
        changes: changes.to_vec(),
        forms,
        skipped,
        verify_finding: verify_finding(std::slice::from_ref(&o.finding), &o.check),
        check: o.check.clone(),
        id,
    }
}

/// The run that exits 0 only when none of `ids` is found.
fn verify_finding(ids: &[String], check: &Check) -> String {
    let ids = ids.join(",");
    match check {
        Check::Doctor => format!("cpulab doctor --quick --expect-absent {ids}"),
        Check::Host { pid: Some(p) } => format!("cpulab host --pid {p} --expect-absent {ids}"),
        Check::Host { pid: None } => format!("cpulab host --expect-absent {ids}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::rules::{Inputs, evaluate, fixtures::everything_wrong};

    /// The rules' fixture machine (a KVM guest with a watched PostgreSQL in
    /// `postgresql@15-main.service`, every problem at once) through every format.
    fn plan_of_everything_wrong() -> Plan {
        plan_of_everything_wrong_on(&[])
    }

    /// The same, on a host whose boot-loader tools are `bootloaders`.
    pub(super) fn plan_of_everything_wrong_on(bootloaders: &[&str]) -> Plan {
        let (facts, m) = everything_wrong();
        let findings = evaluate(Inputs {
            facts: &facts,
            m: &m,
        });
        let ctx = Context {
            source: "fixture".into(),
            cgroup_version: Some(2),
            guest: true,
            bootloaders: bootloaders.iter().map(|t| t.to_string()).collect(),
            ..Context::default()
        };
        plan(&findings, &ctx, &Format::ALL, "out")
    }

    #[test]
    fn one_change_offered_by_several_findings_is_one_deployment_naming_each() {
        let p = plan_of_everything_wrong();
        let on = |cpus: &str| -> Vec<&Deployment> {
            p.deployments
                .iter()
                .filter(|d| {
                    d.changes
                        .iter()
                        .any(|c| matches!(c, Change::Pin { cpus: x, .. } if x == cpus))
                })
                .collect()
        };
        // The same CPU and workload: one deployment, every finding that offers it (the
        // trade-off's co-location among them); spreading is another placement, apart.
        let pins = on("0");
        assert_eq!(
            pins.len(),
            1,
            "{:?}",
            pins.iter().map(|d| &d.id).collect::<Vec<_>>()
        );
        assert!(pins[0].findings.len() >= 2, "{:?}", pins[0].findings);
        assert!(
            pins[0]
                .findings
                .contains(&"latency-throughput-tradeoff".to_string()),
            "{:?}",
            pins[0].findings
        );
        let spread = on("0-1");
        assert_eq!(spread.len(), 1);
        assert_eq!(spread[0].findings, ["latency-throughput-tradeoff"]);
        assert_eq!(
            pins[0].verify_finding,
            format!(
                "cpulab doctor --quick --expect-absent {}",
                pins[0].findings.join(",")
            )
        );
        // The watched application's unit, read from its cgroup, is the drop-in's.
        let systemd = pins[0]
            .forms
            .iter()
            .find(|f| f.format == Format::Systemd)
            .unwrap();
        assert_eq!(
            systemd.files[0].install_to.as_deref(),
            Some(
                format!(
                    "/etc/systemd/system/postgresql@15-main.service.d/50-cpulab-{}.conf",
                    pins[0].id
                )
                .as_str()
            )
        );
        assert_eq!(systemd.files[0].placeholder, None);
        // Ids are numbered in order, and every file has a distinct path.
        for (i, d) in p.deployments.iter().enumerate() {
            assert!(d.id.starts_with(&format!("{:02}-", i + 1)), "{}", d.id);
        }
        let mut paths: Vec<&str> = p.all_files().map(|f| f.path.as_str()).collect();
        let n = paths.len();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), n);
        assert_eq!(p.files[0].path, "README.md");
    }

    #[test]
    fn advice_is_listed_as_not_deployable_and_host_remedies_say_so() {
        let p = plan_of_everything_wrong();
        assert!(!p.undeployable.is_empty(), "the fixture has advice");
        assert!(
            p.undeployable
                .iter()
                .all(|u| u.reason.starts_with("not a setting a file can carry"))
        );
        let host_forms: Vec<&Form> = p
            .deployments
            .iter()
            .filter(|d| d.site == Site::Host)
            .flat_map(|d| &d.forms)
            .collect();
        assert!(!host_forms.is_empty(), "the fixture has host remedies");
        for f in host_forms {
            assert!(f.notes[0].starts_with("for the hypervisor host, not this guest"));
        }
        let readme = &p.files[0].contents;
        assert!(readme.contains("## Order\n\n1. `"), "{readme}");
    }

    #[test]
    fn no_command_that_holds_a_placeholder_has_a_line_to_run() {
        let p = plan_of_everything_wrong();
        let (mut with, mut without) = (0, 0);
        for c in p
            .deployments
            .iter()
            .flat_map(|d| &d.forms)
            .flat_map(Form::commands)
        {
            let json = serde_json::to_value(c).unwrap();
            if c.placeholders().next().is_some() {
                with += 1;
                assert!(json.get("line").is_none(), "{json}");
                assert!(c.shown().starts_with("# PLACEHOLDER"), "{}", c.shown());
            } else {
                without += 1;
                assert_eq!(json["line"], c.line().unwrap());
            }
        }
        // Both kinds are in the fixture's plan, so neither branch above went unchecked.
        assert!(with > 0 && without > 0, "{with} with, {without} without");
        let text = serde_json::to_string(&p).unwrap();
        for stale in [
            "<value before>",
            "HOST_CPUS_BEFORE",
            "<the CPUs before>",
            "MODE_BEFORE",
        ] {
            assert!(!text.contains(stale), "{stale}");
        }
    }
}
