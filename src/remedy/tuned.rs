//! A tuned child profile: `include=` the profile active when the doctor ran, plus the remedy's
//! settings in tuned's own plugins (`[sysfs]` for a module parameter, `[bootloader]` for boot
//! options, `[sysctl]`, `[cpu]` for the governor and the idle latency). Written with an INI
//! crate, the format tuned's parser (Python's configparser) reads.

use super::{Command, Context, File, Form, Format, Needs};
use crate::doctor::findings::Change;

/// The profile's sections: (section, key, value), in order.
fn settings(changes: &[&Change]) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    let mut cmdline = Vec::new();
    for c in changes {
        match c {
            Change::ModuleParam {
                module,
                param,
                value,
            } => out.push((
                "sysfs",
                super::kernel::param_path(module, param),
                value.clone(),
            )),
            Change::BootOptions { options } => cmdline.extend(options.iter().cloned()),
            Change::Sysctl { key, value } => out.push(("sysctl", key.clone(), value.clone())),
            Change::Governor { governor } => out.push(("cpu", "governor".into(), governor.clone())),
            Change::IdleLatency { max_us } => {
                out.push(("cpu", "force_latency".into(), max_us.to_string()))
            }
            _ => {}
        }
    }
    if !cmdline.is_empty() {
        out.push(("bootloader", "cmdline_cpulab".into(), cmdline.join(" ")));
    }
    out
}

/// The child profile `cpulab-ID` for `changes`.
pub fn form(dir: &str, id: &str, changes: &[&Change], ctx: &Context) -> Form {
    let profile = format!("cpulab-{id}");
    let set = settings(changes);
    let mut ini = ini::Ini::new();
    let mut main = ini.with_section(Some("main"));
    main.set("summary", format!("cpulab remedy {id}"));
    if let Some(parent) = &ctx.tuned_profile {
        main.set("include", parent.clone());
    }
    for (section, key, value) in &set {
        ini.with_section(Some(*section))
            .set(key.clone(), value.clone());
    }
    let mut text = Vec::new();
    let _ = ini.write_to(&mut text);
    let install = format!("/etc/tuned/{profile}/tuned.conf");
    let path = format!("{dir}/{profile}/tuned.conf");
    let reboot = set.iter().any(|(s, _, _)| *s == "bootloader");
    let mut form = Form {
        format: Format::Tuned,
        files: vec![File {
            contents: format!(
                "# Written by `cpulab remedy`; install as {install}\n{}",
                String::from_utf8_lossy(&text)
            ),
            path: path.clone(),
            install_to: Some(install.clone()),
            placeholder: ctx.tuned_profile.is_none().then(|| {
                "no tuned profile was active when the doctor ran, so this one includes none: \
                 add include=<your base profile> to keep its settings"
                    .to_string()
            }),
        }],
        trial: vec![],
        apply: vec![
            super::kernel::install_file(&path, &install),
            Command::new(["tuned-adm", "profile", profile.as_str()]),
        ],
        verify: vec![
            Command::output_is(
                format!("Current active profile: {profile}"),
                ["tuned-adm", "active"],
            ),
            Command::new(["tuned-adm", "verify"]),
        ],
        undo: vec![
            match &ctx.tuned_profile {
                Some(p) => Command::new(["tuned-adm", "profile", p.as_str()]),
                None => Command::new(["tuned-adm", "off"]),
            },
            Command::new(["rm", "-rf", "--", &format!("/etc/tuned/{profile}")]),
        ],
        needs: if reboot {
            Needs::Reboot
        } else {
            Needs::Nothing
        },
        notes: vec![],
    };
    if reboot {
        form.notes.push(
            "tuned's bootloader plugin adds the boot options at the next boot (and removes them \
             when the profile is switched off, at the boot after)"
                .into(),
        );
    }
    form
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_profile_includes_the_active_one_and_holds_each_setting() {
        let ctx = Context {
            tuned_profile: Some("virtual-guest".into()),
            ..Context::default()
        };
        let changes = [
            Change::BootOptions {
                options: vec!["cpuidle_haltpoll.force=1".into()],
            },
            Change::ModuleParam {
                module: "haltpoll".into(),
                param: "guest_halt_poll_ns".into(),
                value: "200000".into(),
            },
        ];
        let refs: Vec<&Change> = changes.iter().collect();
        let f = form("02-x/tuned", "02-x", &refs, &ctx);
        let text = &f.files[0].contents;
        let ini = ini::Ini::load_from_str(text).unwrap();
        assert_eq!(ini.get_from(Some("main"), "include"), Some("virtual-guest"));
        assert_eq!(
            ini.get_from(
                Some("sysfs"),
                "/sys/module/haltpoll/parameters/guest_halt_poll_ns"
            ),
            Some("200000")
        );
        assert_eq!(
            ini.get_from(Some("bootloader"), "cmdline_cpulab"),
            Some("cpuidle_haltpoll.force=1")
        );
        assert_eq!(f.needs, Needs::Reboot);
        assert_eq!(f.undo[0].line().unwrap(), "tuned-adm profile virtual-guest");
        // No active profile: none included, and the file says so.
        let f = form("02-x/tuned", "02-x", &refs, &Context::default());
        assert!(!f.files[0].contents.contains("include"));
        assert!(f.files[0].placeholder.is_some());
        assert_eq!(f.undo[0].line().unwrap(), "tuned-adm off");
    }
}
