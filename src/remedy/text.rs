//! `cpulab remedy`'s text on the terminal: what was written where, in the order to apply it.

use super::Plan;
use crate::doctor::findings::Site;

pub fn render(p: &Plan) -> String {
    if p.findings == 0 {
        return "The result has no finding: no remedy to write, no file written.\n".into();
    }
    let files = p.all_files().count();
    let mut out = if files == 0 {
        "No file written: no remedy of these findings has a deployable form.\n".to_string()
    } else {
        format!(
            "Wrote {files} files into {} for {} remedies of {} findings; nothing was applied. \
             {}/README.md says the order, and what needs a restart or a reboot.\n",
            p.out_dir,
            p.deployments.len(),
            p.findings,
            p.out_dir
        )
    };
    for d in super::readme::order(p) {
        out.push_str(&format!(
            "\n{}  {}{}\n  answers: {}\n",
            d.id,
            d.remedy,
            if d.site == Site::Host {
                "   (for the hypervisor host)"
            } else {
                ""
            },
            d.findings.join(", ")
        ));
        out.push_str(&format!("  tried here: {}\n", d.tried_here.text));
        for f in &d.forms {
            out.push_str(&format!(
                "  {:<10} {} file(s), {}{}\n",
                f.format.as_str(),
                f.files.len(),
                f.needs.words(),
                if f.has_placeholder() {
                    "; holds a PLACEHOLDER (see the README)"
                } else {
                    ""
                }
            ));
        }
        for s in &d.skipped {
            out.push_str(&format!("  not as {}: {}\n", s.format.as_str(), s.reason));
        }
    }
    if !p.undeployable.is_empty() {
        let readme = p.files.iter().any(|f| f.path == "README.md");
        out.push_str(&format!(
            "\n{} remedies are not deployable as files{}",
            p.undeployable.len(),
            if readme {
                " (listed in the README)"
            } else {
                ""
            }
        ));
        if p.undeployable
            .iter()
            .any(|u| u.reason == super::NOT_RECORDED)
        {
            out.push_str(&format!(": {}", super::NOT_RECORDED));
        }
        out.push_str(".\n");
        if !readme {
            for u in &p.undeployable {
                out.push_str(&format!("  {}: {}\n", u.finding, u.remedy));
            }
        }
    }
    out
}
