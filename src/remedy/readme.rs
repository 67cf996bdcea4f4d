//! The README.md at the top of the output: the order to apply the remedies in, what each needs
//! (nothing, a restart, a reboot, the host), and how to verify and undo each.

use super::{Check, Command, Deployment, File, Form, Needs, Plan};
use crate::doctor::findings::Site;

/// Remedies in the order to apply them: this machine's before the host's, then those that take
/// effect at once before those that need a restart, then a reboot (so each is verified before
/// the next is stacked on it).
pub fn order(p: &Plan) -> Vec<&Deployment> {
    let mut ds: Vec<&Deployment> = p.deployments.iter().collect();
    ds.sort_by_key(|d| {
        (
            d.site == Site::Host,
            d.forms
                .iter()
                .map(|f| f.needs)
                .min()
                .unwrap_or(Needs::Nothing),
        )
    });
    ds
}

fn commands(out: &mut String, title: &str, lines: &[Command]) {
    if lines.is_empty() {
        return;
    }
    out.push_str(&format!("{title}:\n\n```sh\n"));
    for l in lines {
        out.push_str(&l.shown());
        out.push('\n');
    }
    out.push_str("```\n\n");
}

fn form(out: &mut String, f: &Form) {
    out.push_str(&format!(
        "#### {} ({})\n\n",
        f.format.as_str(),
        f.needs.words()
    ));
    for file in &f.files {
        match &file.install_to {
            Some(to) => out.push_str(&format!("- `{}` -> `{to}`\n", file.path)),
            None => out.push_str(&format!("- `{}`\n", file.path)),
        }
        if let Some(why) = &file.placeholder {
            out.push_str(&format!("  PLACEHOLDER: {why}\n"));
        }
    }
    out.push('\n');
    if f.commands().any(|c| c.line().is_none()) {
        out.push_str(
            "A command with a value cpulab cannot know is commented out below as `# PLACEHOLDER`, \
             each such value shown as `<what it is>`: supply them before running it.\n\n",
        );
    }
    for n in &f.notes {
        let end = if n.ends_with('.') { "" } else { "." };
        out.push_str(&format!("Note: {n}{end}\n\n"));
    }
    commands(out, "Trial (reversible)", &f.trial);
    commands(out, "Apply (as root, from this directory)", &f.apply);
    commands(
        out,
        "Verify (each exits 0 when the change holds)",
        &f.verify,
    );
    commands(out, "Undo", &f.undo);
}

fn deployment(out: &mut String, d: &Deployment) {
    out.push_str(&format!("### {}: {}\n\n", d.id, d.remedy));
    out.push_str(&format!("Answers: {}.\n", d.findings.join(", ")));
    if d.site == Site::Host {
        out.push_str(
            "**For the hypervisor host, not this guest**: its administrator applies it there.\n",
        );
    }
    if !d.who.is_empty() {
        out.push_str(&format!("Who: {}.\n", d.who));
    }
    let by = match d.check {
        Check::Doctor => "the doctor",
        Check::Host { .. } => "`cpulab host` over its window",
    };
    out.push_str(&format!(
        "\nWhat it does: {}\n\nWhat it buys, as measured by {by}:\n\n",
        d.effect
    ));
    for b in &d.buys {
        out.push_str(&format!("- {b}\n"));
    }
    if d.check == Check::Doctor {
        out.push_str(&format!(
            "- measured by `cpulab doctor --try` in that run: {}\n",
            d.measured.as_deref().unwrap_or(
                "not available, because that doctor run did not try it (`cpulab doctor --try` \
                 measures it)"
            )
        ));
    }
    out.push_str(&format!(
        "- measured by `cpulab try` on this host (the history): {}\n\nWhat it costs: {}\n\n",
        d.tried_here.text, d.costs
    ));
    for f in &d.forms {
        form(out, f);
    }
    if !d.skipped.is_empty() {
        out.push_str("Not written as:\n\n");
        for s in &d.skipped {
            out.push_str(&format!("- {}: {}\n", s.format.as_str(), s.reason));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "Then check the finding is gone on the host (exit 1 while it is still there):\n\n```sh\n{}\ncpulab history check\n```\n\n",
        d.verify_finding
    ));
}

/// The README of the output.
pub fn render(p: &Plan) -> File {
    let mut out = format!(
        "# Remedies from cpulab\n\nFrom {}.\n\nNothing here has been applied. Each remedy below is \
         an alternative for the findings it answers: choose one per finding, apply it, verify it, \
         and keep the undo. `cpulab try` measures a setting's effect on one host before a fleet \
         deploys it.\n\n## Order\n\n",
        p.context.source
    );
    let ordered = order(p);
    for (i, d) in ordered.iter().enumerate() {
        let needs = d
            .forms
            .iter()
            .map(|f| format!("{} {}", f.format.as_str(), f.needs.words()))
            .collect::<Vec<_>>()
            .join("; ");
        out.push_str(&format!(
            "{}. `{}`{}: {}\n",
            i + 1,
            d.id,
            if d.site == Site::Host {
                " (on the hypervisor host)"
            } else {
                ""
            },
            if needs.is_empty() {
                "no form in the formats asked for".to_string()
            } else {
                needs
            }
        ));
    }
    out.push_str("\n## Remedies\n\n");
    for d in ordered {
        deployment(&mut out, d);
    }
    if !p.undeployable.is_empty() {
        out.push_str("## Not deployable as files\n\n");
        for u in &p.undeployable {
            out.push_str(&format!("- {}: `{}`: {}\n", u.finding, u.remedy, u.reason));
        }
    }
    File {
        path: "README.md".into(),
        install_to: None,
        placeholder: None,
        contents: out,
    }
}
