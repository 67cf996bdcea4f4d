//! systemd drop-ins for the unit that runs the workload: `CPUAffinity=` (every process the
//! service starts inherits it, at its next start), `AllowedCPUs=` (the cgroup v2 cpuset, which
//! also holds for processes that set their own affinity), `CPUWeight=` and `CPUQuota=`.
//!
//! The unit is the one the doctor read from the watched process's cgroup. Where none was read,
//! the drop-in is written for `UNIT-NOT-NAMED.service` with the reason at its top: a wrong unit
//! would pin some other service, so no unit is ever guessed.

use super::{Command, Context, File, Form, Needs, Word};
use crate::doctor::findings::{Change, Workload};

/// The stand-in for a unit the doctor could not name.
pub const UNNAMED: &str = "UNIT-NOT-NAMED.service";

/// The drop-in section of a unit, from its type.
fn section(unit: &str) -> &'static str {
    match unit.rsplit_once('.').map(|(_, t)| t) {
        Some("scope") => "Scope",
        Some("slice") => "Slice",
        Some("socket") => "Socket",
        _ => "Service",
    }
}

/// The units to write for, with the placeholder reason when there are none.
fn units(w: &Workload) -> Vec<(String, Option<String>)> {
    if w.units.is_empty() {
        let why = w
            .unnamed
            .clone()
            .unwrap_or_else(|| "the doctor named no unit for this workload".into());
        vec![(UNNAMED.to_string(), Some(why))]
    } else {
        w.units.iter().map(|u| (u.clone(), None)).collect()
    }
}

/// The settings of one change for `unit`: (key, value) lines and how to check each is in force.
fn settings(change: &Change, unit: &str, ctx: &Context) -> Vec<(String, String)> {
    let v2 = ctx.cgroup_version != Some(1);
    let scope_like = section(unit) != "Service";
    match change {
        Change::Pin { cpus, .. } => {
            let mut s = Vec::new();
            // CPUAffinity= is an exec setting: services only.
            if !scope_like {
                s.push(("CPUAffinity".to_string(), cpus.clone()));
            }
            if v2 || scope_like {
                s.push(("AllowedCPUs".to_string(), cpus.clone()));
            }
            s
        }
        Change::CpuWeight { weight, .. } => vec![("CPUWeight".into(), weight.to_string())],
        Change::CpuQuota { percent, .. } => vec![("CPUQuota".into(), format!("{percent}%"))],
        _ => vec![],
    }
}

fn workload(change: &Change) -> Option<&Workload> {
    match change {
        Change::Pin { workload, .. }
        | Change::CpuWeight { workload, .. }
        | Change::CpuQuota { workload, .. } => Some(workload),
        _ => None,
    }
}

/// The drop-ins for `changes` (placement, weight, quota), one per unit.
pub fn form(dir: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form {
        format: super::Format::Systemd,
        files: vec![],
        trial: vec![],
        apply: vec![],
        verify: vec![],
        undo: vec![],
        needs: Needs::Restart,
        notes: vec![],
    };
    for change in changes {
        let Some(w) = workload(change) else { continue };
        for (unit, placeholder) in units(w) {
            one_unit(&mut form, dir, change, &unit, placeholder, ctx);
        }
    }
    form.apply.dedup();
    form.undo.dedup();
    form.notes.push(
        "`systemctl set-property --runtime` is the reversible trial of the cgroup settings \
         (AllowedCPUs=, CPUWeight=, CPUQuota=): it lasts until the next boot (or until undone); \
         the drop-in keeps the change. CPUAffinity= has no trial (systemctl set-property refuses \
         it): a service's processes take it when it starts again."
            .into(),
    );
    form
}

/// One unit's drop-in and its commands.
fn one_unit(
    form: &mut Form,
    dir: &str,
    change: &Change,
    unit: &str,
    placeholder: Option<String>,
    ctx: &Context,
) {
    let set = settings(change, unit, ctx);
    if set.is_empty() {
        return;
    }
    let name = dir.split('/').next().unwrap_or("cpulab");
    let install = format!("/etc/systemd/system/{unit}.d/50-cpulab-{name}.conf");
    let path = format!("{dir}/{unit}.d/50-cpulab-{name}.conf");
    form.files.push(File {
        contents: drop_in(unit, &set, placeholder.as_deref(), &install),
        path: path.clone(),
        install_to: Some(install.clone()),
        placeholder: placeholder.clone(),
    });
    // An unnamed unit is a placeholder in every command, so none of them runs as written.
    let (u, to) = match &placeholder {
        Some(_) => (
            Word::placeholder("the unit that runs the workload"),
            Word::placeholder(format!(
                "/etc/systemd/system/UNIT.d/50-cpulab-{name}.conf, UNIT the unit that runs the \
                 workload"
            )),
        ),
        None => (Word::from(unit), Word::from(&install)),
    };
    let systemctl = |args: &[&str], tail: &[String]| {
        let mut argv: Vec<Word> = vec!["systemctl".into()];
        argv.extend(args.iter().map(|a| Word::from(*a)));
        argv.push(u.clone());
        argv.extend(tail.iter().map(Word::from));
        Command::new(argv)
    };
    // `systemctl set-property` takes only the cgroup settings: it refuses CPUAffinity= (an exec
    // setting, read when a process starts), and refuses the whole line with it.
    let runtime: Vec<&(String, String)> = set.iter().filter(|(k, _)| k != "CPUAffinity").collect();
    if !runtime.is_empty() {
        let props: Vec<String> = runtime.iter().map(|(k, v)| format!("{k}={v}")).collect();
        form.trial
            .push(systemctl(&["set-property", "--runtime"], &props));
    }
    form.apply.push(Command::new([
        Word::from("install"),
        "-D".into(),
        "-m".into(),
        "0644".into(),
        Word::from(&path),
        to.clone(),
    ]));
    form.apply
        .push(Command::new(["systemctl", "daemon-reload"]));
    form.apply.push(systemctl(&["try-restart"], &[]));
    for (k, v) in &set {
        form.verify.push(Command::output_is(
            v,
            [
                Word::from("systemctl"),
                "show".into(),
                "-P".into(),
                k.into(),
                u.clone(),
            ],
        ));
    }
    if let Change::Pin { cpus, .. } = change
        && section(unit) == "Service"
    {
        form.verify.push(affinity_is(cpus, u.clone()));
    }
    form.undo.push(Command::new([
        Word::from("rm"),
        "-f".into(),
        "--".into(),
        to,
    ]));
    if !runtime.is_empty() {
        let cleared: Vec<String> = runtime.iter().map(|(k, _)| format!("{k}=")).collect();
        form.undo
            .push(systemctl(&["set-property", "--runtime"], &cleared));
    }
    form.undo.push(Command::new(["systemctl", "daemon-reload"]));
    form.undo.push(systemctl(&["try-restart"], &[]));
    if let Some(why) = placeholder {
        form.notes.push(format!(
            "{UNNAMED} is a placeholder ({why}): rename the directory to the unit that runs the \
             workload, and name it in the commands, before applying"
        ));
    }
}

/// Exits 0 when the unit's main process may run on exactly `cpus` (its `Cpus_allowed_list`,
/// compared as a fixed string).
pub fn affinity_is(cpus: &str, unit: Word) -> Command {
    Command::new([
        Word::from("sh"),
        "-c".into(),
        r#"grep -Fxq "$(printf 'Cpus_allowed_list:\t%s' "$1")" "/proc/$(systemctl show -P MainPID "$2")/status""#.into(),
        "sh".into(),
        cpus.into(),
        unit,
    ])
}

/// A drop-in's text: where it goes, why, and its settings.
fn drop_in(
    unit: &str,
    set: &[(String, String)],
    placeholder: Option<&str>,
    install: &str,
) -> String {
    let mut s = String::new();
    if let Some(why) = placeholder {
        s.push_str(&format!(
            "# PLACEHOLDER: {why}.\n# Replace {UNNAMED} in this file's path with the unit that runs the workload.\n"
        ));
    }
    s.push_str(&format!(
        "# Written by `cpulab remedy`; install as {install}\n[{}]\n",
        section(unit)
    ));
    for (k, v) in set {
        s.push_str(&format!("{k}={v}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(units: &[&str]) -> Change {
        Change::Pin {
            cpus: "0".into(),
            workload: Workload {
                pids: vec![812],
                units: units.iter().map(|u| u.to_string()).collect(),
                cgroups: vec![],
                unnamed: units.is_empty().then(|| "no unit seen".to_string()),
            },
        }
    }

    #[test]
    fn a_named_service_gets_affinity_and_allowed_cpus_under_cgroup_v2() {
        let ctx = Context {
            cgroup_version: Some(2),
            ..Context::default()
        };
        let c = pin(&["postgresql@15-main.service"]);
        let f = form("01-pin/systemd", &[&c], &ctx);
        assert_eq!(f.files.len(), 1);
        assert_eq!(
            f.files[0].install_to.as_deref(),
            Some("/etc/systemd/system/postgresql@15-main.service.d/50-cpulab-01-pin.conf")
        );
        assert!(
            f.files[0]
                .contents
                .ends_with("[Service]\nCPUAffinity=0\nAllowedCPUs=0\n")
        );
        assert_eq!(f.files[0].placeholder, None);
        assert_eq!(
            f.trial[0].line().unwrap(),
            "systemctl set-property --runtime postgresql@15-main.service 'AllowedCPUs=0'"
        );
        assert!(
            f.verify[0]
                .line()
                .unwrap()
                .ends_with("sh 0 systemctl show -P CPUAffinity postgresql@15-main.service"),
            "{:?}",
            f.verify[0].line()
        );
        assert!(f.undo.iter().any(|u| {
            u.line()
                .unwrap()
                .starts_with("rm -f -- /etc/systemd/system/postgresql@15-main")
        }));
        assert!(!f.has_placeholder());
        assert_eq!(f.needs, Needs::Restart);
    }

    #[test]
    fn cgroup_v1_has_no_allowed_cpus_and_a_scope_no_affinity() {
        let v1 = Context {
            cgroup_version: Some(1),
            ..Context::default()
        };
        let f = form("01-pin/systemd", &[&pin(&["db.service"])], &v1);
        assert!(f.files[0].contents.ends_with("[Service]\nCPUAffinity=0\n"));
        // CPUAffinity= is not a runtime property: no trial, and nothing to reset at undo.
        assert!(f.trial.is_empty(), "{:?}", f.trial);
        assert!(
            !f.undo.iter().any(|u| u.shown().contains("set-property")),
            "{:?}",
            f.undo
        );
        let f = form(
            "01-pin/systemd",
            &[&pin(&["run-r1.scope"])],
            &Context::default(),
        );
        assert!(
            f.files[0].contents.ends_with("[Scope]\nAllowedCPUs=0\n"),
            "{}",
            f.files[0].contents
        );
    }

    #[test]
    fn an_unnamed_unit_is_a_placeholder_with_its_reason_never_a_guess() {
        let f = form("01-pin/systemd", &[&pin(&[])], &Context::default());
        assert_eq!(f.files[0].placeholder.as_deref(), Some("no unit seen"));
        assert!(f.files[0].path.contains(UNNAMED));
        assert!(
            f.files[0]
                .contents
                .starts_with("# PLACEHOLDER: no unit seen.\n")
        );
        assert!(f.notes[0].contains("placeholder"));
        // No command names the stand-in unit as if it were one.
        assert!(!f.apply.is_empty());
        for c in f.commands() {
            if c.argv
                .iter()
                .any(|w| matches!(w, Word::Text(t) if t == UNNAMED))
            {
                panic!("{c:?}");
            }
        }
        assert!(f.apply.iter().any(|c| c.line().is_none()));
        assert!(f.has_placeholder());
    }
}
