//! Kernel settings as the files that keep them: `modprobe.d` for a module's parameters (with
//! the value set now through `/sys/module`), `sysctl.d` for `/proc/sys`, and the kernel command
//! line through an `/etc/default/grub.d/` snippet or `grubby`.
//!
//! A module's parameter has two permanent homes: `modprobe.d` is read when a loadable module
//! loads; a module built into the kernel (its `/sys/module/NAME` has no `initstate`) reads it
//! from the command line as `NAME.PARAM=VALUE`. Both forms are written and each says which it
//! is for.

use super::{Context, File, Form, Format, Needs, sh_quote};
use crate::doctor::findings::Change;

/// `/sys/module/M/parameters/P`.
pub fn param_path(module: &str, param: &str) -> String {
    format!("/sys/module/{module}/parameters/{param}")
}

/// `modprobe.d` files for module parameters, and the value now through sysfs.
pub fn modprobe(dir: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Modprobe, Needs::Nothing);
    for c in changes {
        let Change::ModuleParam {
            module,
            param,
            value,
        } = c
        else {
            continue;
        };
        let install = format!("/etc/modprobe.d/cpulab-{module}.conf");
        let path = format!("{dir}/cpulab-{module}.conf");
        form.files.push(File {
            contents: format!(
                "# Written by `cpulab remedy`; install as {install}.\n\
                 # Read when the module loads; a module built into the kernel takes\n\
                 # {module}.{param}={value} on the kernel command line instead (the cmdline form).\n\
                 options {module} {param}={value}\n"
            ),
            path: path.clone(),
            install_to: Some(install.clone()),
            placeholder: None,
        });
        let sys = param_path(module, param);
        form.apply.push(format!(
            "install -D -m 0644 {} {}",
            sh_quote(&path),
            sh_quote(&install)
        ));
        form.apply.push(format!("echo {} > {sys}", sh_quote(value)));
        form.verify
            .push(format!("grep -qx -- {} {sys}", sh_quote(value)));
        form.undo.push(format!("rm -f {}", sh_quote(&install)));
        match ctx.current_param(module, param) {
            Some(prev) => form.undo.push(format!("echo {} > {sys}", sh_quote(prev))),
            None => {
                form.undo.push(format!("echo '<value before>' > {sys}"));
                form.notes.push(format!(
                    "the value of {sys} before the change is not available, because this \
                     result is not this host's (or the file could not be read): note it \
                     before applying (`cat {sys}`) and put it in the undo line"
                ));
            }
        }
    }
    form.notes.push(
        "the `echo` line sets the value now, until reboot; the file keeps it for the next load \
         of a loadable module"
            .into(),
    );
    form
}

/// `sysctl.d` files for `/proc/sys` settings.
pub fn sysctl(dir: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Sysctl, Needs::Nothing);
    let name = dir.split('/').next().unwrap_or("cpulab");
    let install = format!("/etc/sysctl.d/90-cpulab-{name}.conf");
    let path = format!("{dir}/90-cpulab-{name}.conf");
    let mut text = format!("# Written by `cpulab remedy`; install as {install}\n");
    for c in changes {
        let Change::Sysctl { key, value } = c else {
            continue;
        };
        text.push_str(&format!("{key} = {value}\n"));
        form.verify.push(format!(
            "test \"$(sysctl -n {})\" = {}",
            sh_quote(key),
            sh_quote(value)
        ));
        match ctx.current_sysctl(key) {
            Some(prev) => form
                .undo
                .push(format!("sysctl -w {}={}", sh_quote(key), sh_quote(prev))),
            None => {
                form.undo
                    .push(format!("sysctl -w {}='<value before>'", sh_quote(key)));
                form.notes.push(format!(
                    "the value of {key} before the change is not available, because this result \
                     is not this host's (or /proc/sys could not be read): note it before \
                     applying (`sysctl -n {key}`) and put it in the undo line"
                ));
            }
        }
    }
    form.files.push(File {
        contents: text,
        path: path.clone(),
        install_to: Some(install.clone()),
        placeholder: None,
    });
    form.apply = vec![
        format!(
            "install -D -m 0644 {} {}",
            sh_quote(&path),
            sh_quote(&install)
        ),
        format!("sysctl -p {}", sh_quote(&install)),
    ];
    form.undo.insert(0, format!("rm -f {}", sh_quote(&install)));
    form
}

/// The kernel command line options of `changes`.
pub fn boot_options(changes: &[&Change]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in changes {
        match c {
            Change::BootOptions { options } => out.extend(options.iter().cloned()),
            Change::ModuleParam {
                module,
                param,
                value,
            } => out.push(format!("{module}.{param}={value}")),
            Change::Governor { governor } => {
                out.push(format!("cpufreq.default_governor={governor}"))
            }
            _ => {}
        }
    }
    out.dedup();
    out
}

/// A `grep -E` pattern that matches `option` as a whole word of /proc/cmdline.
fn cmdline_pattern(option: &str) -> String {
    let escaped: String = option
        .chars()
        .flat_map(|c| {
            if ".[]()*+?{}|^$\\".contains(c) {
                vec!['\\', c]
            } else {
                vec![c]
            }
        })
        .collect();
    format!("(^| ){escaped}( |$)")
}

/// The kernel command line: a GRUB snippet and the grubby line, with the reboot they need.
pub fn cmdline(dir: &str, id: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Cmdline, Needs::Reboot);
    let options = boot_options(changes).join(" ");
    let install = format!("/etc/default/grub.d/cpulab-{id}.cfg");
    let path = format!("{dir}/cpulab-{id}.cfg");
    form.files.push(File {
        contents: format!(
            "# Written by `cpulab remedy`; install as {install},\n\
             # then update-grub (Debian, Ubuntu) or grub2-mkconfig -o /boot/grub2/grub.cfg, and reboot.\n\
             GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX {options}\"\n"
        ),
        path: path.clone(),
        install_to: Some(install.clone()),
        placeholder: None,
    });
    let has = |tool: &str| ctx.bootloaders.iter().any(|b| b == tool);
    let grubby = has("grubby");
    let grub_update = if has("grub2-mkconfig") && !has("update-grub") {
        "grub2-mkconfig -o /boot/grub2/grub.cfg"
    } else {
        "update-grub"
    };
    let quoted = sh_quote(&options);
    if grubby {
        form.apply
            .push(format!("grubby --update-kernel=ALL --args={quoted}"));
        form.undo
            .push(format!("grubby --update-kernel=ALL --remove-args={quoted}"));
    } else {
        form.apply.push(format!(
            "install -D -m 0644 {} {}",
            sh_quote(&path),
            sh_quote(&install)
        ));
        form.apply.push(grub_update.to_string());
        form.undo.push(format!("rm -f {}", sh_quote(&install)));
        form.undo.push(grub_update.to_string());
    }
    form.apply.push("reboot".into());
    form.undo.push("reboot".into());
    for o in boot_options(changes) {
        form.verify.push(format!(
            "grep -Eq -- {} /proc/cmdline",
            sh_quote(&cmdline_pattern(&o))
        ));
    }
    form.notes.push(if ctx.bootloaders.is_empty() {
        format!(
            "the bootloader tooling of the host is not known here: with GRUB use the snippet and \
             `update-grub` (or grub2-mkconfig); with grubby (Fedora, RHEL) `grubby \
             --update-kernel=ALL --args={quoted}` instead"
        )
    } else {
        format!("this host has {}", ctx.bootloaders.join(", "))
    });
    if changes
        .iter()
        .any(|c| matches!(c, Change::ModuleParam { .. }))
    {
        form.notes.push(
            "a module parameter on the command line is for a module built into the kernel; a \
             loadable one reads the modprobe.d form"
                .into(),
        );
    }
    form
}

#[cfg(test)]
mod tests {
    use super::*;

    fn halt() -> Change {
        Change::ModuleParam {
            module: "haltpoll".into(),
            param: "guest_halt_poll_ns".into(),
            value: "200000".into(),
        }
    }

    #[test]
    fn a_module_parameter_is_a_modprobe_option_set_now_and_restored_by_undo() {
        let ctx = Context {
            current_params: vec![("haltpoll".into(), "guest_halt_poll_ns".into(), "0".into())],
            ..Context::default()
        };
        let f = modprobe("01-x/modprobe", &[&halt()], &ctx);
        assert!(
            f.files[0]
                .contents
                .ends_with("options haltpoll guest_halt_poll_ns=200000\n")
        );
        assert_eq!(
            f.files[0].install_to.as_deref(),
            Some("/etc/modprobe.d/cpulab-haltpoll.conf")
        );
        assert_eq!(
            f.verify,
            ["grep -qx -- 200000 /sys/module/haltpoll/parameters/guest_halt_poll_ns"]
        );
        assert_eq!(
            f.undo,
            [
                "rm -f /etc/modprobe.d/cpulab-haltpoll.conf",
                "echo 0 > /sys/module/haltpoll/parameters/guest_halt_poll_ns"
            ]
        );
        // Another host's result: the previous value is a placeholder with the reason.
        let f = modprobe("01-x/modprobe", &[&halt()], &Context::default());
        assert!(f.undo[1].contains("<value before>"));
        assert!(f.notes[0].contains("not available, because"));
    }

    #[test]
    fn boot_options_take_module_parameters_and_need_a_reboot() {
        let force = Change::BootOptions {
            options: vec!["cpuidle_haltpoll.force=1".into()],
        };
        let f = cmdline(
            "01-x/cmdline",
            "01-x",
            &[&force, &halt()],
            &Context::default(),
        );
        assert!(f.files[0].contents.ends_with(
            "GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX cpuidle_haltpoll.force=1 haltpoll.guest_halt_poll_ns=200000\"\n"
        ));
        assert_eq!(f.needs, Needs::Reboot);
        assert_eq!(f.apply.last().map(String::as_str), Some("reboot"));
        assert_eq!(
            f.verify[0],
            r"grep -Eq -- '(^| )cpuidle_haltpoll\.force=1( |$)' /proc/cmdline"
        );
        let grubby = Context {
            bootloaders: vec!["grubby".into()],
            ..Context::default()
        };
        let f = cmdline("01-x/cmdline", "01-x", &[&force], &grubby);
        assert_eq!(
            f.apply[0],
            "grubby --update-kernel=ALL --args=cpuidle_haltpoll.force=1"
        );
        assert!(f.undo[0].contains("--remove-args=cpuidle_haltpoll.force=1"));
    }

    #[test]
    fn sysctl_files_list_each_key() {
        let c = Change::Sysctl {
            key: "kernel.sched_autogroup_enabled".into(),
            value: "0".into(),
        };
        let here = Context {
            current_sysctls: vec![("kernel.sched_autogroup_enabled".into(), "1".into())],
            ..Context::default()
        };
        let f = sysctl("02-sysctl/sysctl", &[&c], &here);
        // This host's result: undo restores the value read before the change.
        assert_eq!(
            f.undo,
            [
                "rm -f /etc/sysctl.d/90-cpulab-02-sysctl.conf",
                "sysctl -w kernel.sched_autogroup_enabled=1"
            ]
        );
        assert!(f.notes.is_empty(), "{:?}", f.notes);
        // Another host's result: the previous value is a placeholder with the reason.
        let f = sysctl("02-sysctl/sysctl", &[&c], &Context::default());
        assert!(f.undo[1].contains("<value before>"));
        assert!(f.notes[0].contains("not available, because"));
        assert!(
            f.files[0]
                .contents
                .ends_with("kernel.sched_autogroup_enabled = 0\n")
        );
        assert_eq!(
            f.apply[1],
            "sysctl -p /etc/sysctl.d/90-cpulab-02-sysctl.conf"
        );
    }
}
