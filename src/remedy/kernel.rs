//! Kernel settings as the files that keep them: `modprobe.d` for a module's parameters (with
//! the value set now through `/sys/module`), `sysctl.d` for `/proc/sys`, and the kernel command
//! line through an `/etc/default/grub.d/` snippet or `grubby`.
//!
//! A module's parameter has two permanent homes: `modprobe.d` is read when a loadable module
//! loads; a module built into the kernel (its `/sys/module/NAME` has no `initstate`) reads it
//! from the command line as `NAME.PARAM=VALUE`. Both forms are written and each says which it
//! is for.

use super::{Command, Context, File, Form, Format, Needs};
use crate::doctor::findings::Change;

/// `/sys/module/M/parameters/P`.
pub fn param_path(module: &str, param: &str) -> String {
    format!("/sys/module/{module}/parameters/{param}")
}

/// `/proc/sys/vm/swappiness` for `vm.swappiness`.
pub fn sysctl_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

/// Where apply keeps the value it replaces: beside the file it installs, under a name its
/// reader skips (`modprobe.d` and `sysctl.d` read only `*.conf`).
pub fn saved_path(install: &str, name: &str) -> String {
    format!("{install}.{name}.before")
}

/// `modprobe.d` files for module parameters, and the value now through sysfs.
pub fn modprobe(dir: &str, changes: &[&Change], _ctx: &Context) -> Form {
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
        let saved = saved_path(&install, param);
        form.apply.push(install_file(&path, &install));
        form.apply.push(Command::save(&sys, &saved));
        form.apply.push(Command::write_value(value, &sys));
        form.verify.push(Command::file_is(&sys, value));
        form.undo.push(Command::new(["rm", "-f", "--", &install]));
        form.undo.push(Command::restore(&saved, &sys));
    }
    form.notes.push(
        "apply keeps the value it replaces beside the file it installs (`.before`), and undo \
         writes that value back; the sysfs write sets the value now, until reboot; the file \
         keeps it for the next load of a loadable module"
            .into(),
    );
    form
}

/// `install -D -m 0644 FROM TO`.
pub fn install_file(from: &str, to: &str) -> Command {
    Command::new(["install", "-D", "-m", "0644", from, to])
}

/// `sysctl.d` files for `/proc/sys` settings.
pub fn sysctl(dir: &str, changes: &[&Change], _ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Sysctl, Needs::Nothing);
    let name = dir.split('/').next().unwrap_or("cpulab");
    let install = format!("/etc/sysctl.d/90-cpulab-{name}.conf");
    let path = format!("{dir}/90-cpulab-{name}.conf");
    let mut text = format!("# Written by `cpulab remedy`; install as {install}\n");
    let mut restore = Vec::new();
    // Installed first (it takes effect only at `sysctl -p` or the next boot), so the values
    // are kept in a directory that exists.
    form.apply.push(install_file(&path, &install));
    for c in changes {
        let Change::Sysctl { key, value } = c else {
            continue;
        };
        text.push_str(&format!("{key} = {value}\n"));
        let proc = sysctl_path(key);
        let saved = saved_path(&install, key);
        form.apply.push(Command::save(&proc, &saved));
        form.verify
            .push(Command::output_is(value, ["sysctl", "-n", key]));
        restore.push(Command::restore(&saved, &proc));
    }
    form.files.push(File {
        contents: text,
        path: path.clone(),
        install_to: Some(install.clone()),
        placeholder: None,
    });
    form.apply
        .push(Command::new(["sysctl", "-p", install.as_str()]));
    form.undo.push(Command::new(["rm", "-f", "--", &install]));
    form.undo.extend(restore);
    form.notes.push(
        "apply keeps each value it replaces beside the file it installs (`.before`), and undo \
         writes those values back"
            .into(),
    );
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

/// Exits 0 when `option` is one whole word of /proc/cmdline (a fixed string).
fn on_cmdline(option: &str) -> Command {
    Command::sh(
        r#"tr ' ' '\n' < /proc/cmdline | grep -Fxq -- "$1""#,
        [option],
    )
}

/// The boot-loader tooling a host's kernel command line is changed with: one choice per host,
/// which the cmdline form and the playbook share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bootloader {
    /// Fedora, RHEL: `grubby --update-kernel=ALL --args=...`, no file.
    Grubby,
    /// Debian, Ubuntu: the `/etc/default/grub.d/` snippet and `update-grub`.
    UpdateGrub,
    /// GRUB without Debian's wrapper: the snippet and `grub2-mkconfig`.
    Grub2Mkconfig,
}

impl Bootloader {
    /// The host's, from the tooling found on it; GRUB's `update-grub` when none is known.
    pub fn of(ctx: &Context) -> Self {
        let has = |tool: &str| ctx.bootloaders.iter().any(|b| b == tool);
        if has("grubby") {
            Self::Grubby
        } else if has("grub2-mkconfig") && !has("update-grub") {
            Self::Grub2Mkconfig
        } else {
            Self::UpdateGrub
        }
    }

    /// The command that writes GRUB's configuration again (grubby needs none).
    pub fn update(self) -> Command {
        match self {
            Self::Grub2Mkconfig => Command::new(["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]),
            Self::UpdateGrub | Self::Grubby => Command::new(["update-grub"]),
        }
    }
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
    let boot = Bootloader::of(ctx);
    let args = format!("--args={options}");
    let remove = format!("--remove-args={options}");
    match boot {
        Bootloader::Grubby => {
            form.apply
                .push(Command::new(["grubby", "--update-kernel=ALL", &args]));
            form.undo
                .push(Command::new(["grubby", "--update-kernel=ALL", &remove]));
        }
        Bootloader::UpdateGrub | Bootloader::Grub2Mkconfig => {
            form.apply.push(install_file(&path, &install));
            form.apply.push(boot.update());
            form.undo.push(Command::new(["rm", "-f", "--", &install]));
            form.undo.push(boot.update());
        }
    }
    form.apply.push(Command::new(["reboot"]));
    form.undo.push(Command::new(["reboot"]));
    for o in boot_options(changes) {
        form.verify.push(on_cmdline(&o));
    }
    form.notes.push(if ctx.bootloaders.is_empty() {
        format!(
            "the bootloader tooling of the host is not known here: with GRUB use the snippet and \
             `update-grub` (or grub2-mkconfig); with grubby (Fedora, RHEL) `{}` instead",
            Command::new(["grubby", "--update-kernel=ALL", &args]).shown()
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

    fn lines(cs: &[Command]) -> Vec<String> {
        cs.iter().map(Command::shown).collect()
    }

    #[test]
    fn a_module_parameter_is_a_modprobe_option_set_now_and_restored_from_what_apply_saved() {
        let f = modprobe("01-x/modprobe", &[&halt()], &Context::default());
        assert!(
            f.files[0]
                .contents
                .ends_with("options haltpoll guest_halt_poll_ns=200000\n")
        );
        assert_eq!(
            f.files[0].install_to.as_deref(),
            Some("/etc/modprobe.d/cpulab-haltpoll.conf")
        );
        let sys = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";
        let saved = "/etc/modprobe.d/cpulab-haltpoll.conf.guest_halt_poll_ns.before";
        assert_eq!(f.verify, [Command::file_is(sys, "200000")]);
        assert_eq!(
            f.apply,
            [
                install_file(
                    "01-x/modprobe/cpulab-haltpoll.conf",
                    "/etc/modprobe.d/cpulab-haltpoll.conf"
                ),
                Command::save(sys, saved),
                Command::write_value("200000", sys),
            ]
        );
        assert_eq!(
            f.undo,
            [
                Command::new(["rm", "-f", "--", "/etc/modprobe.d/cpulab-haltpoll.conf"]),
                Command::restore(saved, sys),
            ]
        );
        assert!(
            f.commands().all(|c| c.line().is_some()),
            "{:?}",
            lines(&f.undo)
        );
        assert!(!f.has_placeholder());
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
        assert_eq!(f.apply.last(), Some(&Command::new(["reboot"])));
        assert_eq!(f.verify.len(), 2);
        assert_eq!(f.verify[0], on_cmdline("cpuidle_haltpoll.force=1"));
        let grubby = Context {
            bootloaders: vec!["grubby".into()],
            ..Context::default()
        };
        let f = cmdline("01-x/cmdline", "01-x", &[&force], &grubby);
        assert_eq!(
            f.apply[0].line().unwrap(),
            "grubby '--update-kernel=ALL' '--args=cpuidle_haltpoll.force=1'"
        );
        assert_eq!(
            f.undo[0].line().unwrap(),
            "grubby '--update-kernel=ALL' '--remove-args=cpuidle_haltpoll.force=1'"
        );
        let rhel = Context {
            bootloaders: vec!["grub2-mkconfig".into()],
            ..Context::default()
        };
        let f = cmdline("01-x/cmdline", "01-x", &[&force], &rhel);
        assert_eq!(
            f.apply[1].line().unwrap(),
            "grub2-mkconfig -o /boot/grub2/grub.cfg"
        );
    }

    /// The verify of a boot option, run against a stand-in for /proc/cmdline.
    #[test]
    fn a_boot_option_is_found_only_as_a_whole_word() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("cmdline");
        let check = |text: &str, option: &str| {
            std::fs::write(&file, text).unwrap();
            let c = on_cmdline(option);
            let mut argv: Vec<String> = c
                .runnable()
                .unwrap()
                .iter()
                .map(|s| s.to_string())
                .collect();
            argv[2] = argv[2].replace("/proc/cmdline", file.to_str().unwrap());
            std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .status()
                .unwrap()
                .success()
        };
        assert!(check(
            "ro quiet cpuidle_haltpoll.force=1\n",
            "cpuidle_haltpoll.force=1"
        ));
        assert!(check(
            "cpuidle_haltpoll.force=1 ro\n",
            "cpuidle_haltpoll.force=1"
        ));
        assert!(!check("ro quiet\n", "cpuidle_haltpoll.force=1"));
        assert!(!check(
            "cpuidle_haltpoll.force=10\n",
            "cpuidle_haltpoll.force=1"
        ));
        assert!(!check(
            "cpuidle_haltpollxforce=1\n",
            "cpuidle_haltpoll.force=1"
        ));
    }

    #[test]
    fn sysctl_files_list_each_key_and_undo_restores_what_apply_saved() {
        let c = Change::Sysctl {
            key: "kernel.sched_autogroup_enabled".into(),
            value: "0".into(),
        };
        let f = sysctl("02-sysctl/sysctl", &[&c], &Context::default());
        let proc = "/proc/sys/kernel/sched_autogroup_enabled";
        let saved = "/etc/sysctl.d/90-cpulab-02-sysctl.conf.kernel.sched_autogroup_enabled.before";
        assert_eq!(
            f.apply[0],
            install_file(
                "02-sysctl/sysctl/90-cpulab-02-sysctl.conf",
                "/etc/sysctl.d/90-cpulab-02-sysctl.conf"
            )
        );
        assert_eq!(f.apply[1], Command::save(proc, saved));
        assert_eq!(
            f.undo,
            [
                Command::new(["rm", "-f", "--", "/etc/sysctl.d/90-cpulab-02-sysctl.conf"]),
                Command::restore(saved, proc),
            ]
        );
        assert!(!f.has_placeholder());
        assert!(
            f.files[0]
                .contents
                .ends_with("kernel.sched_autogroup_enabled = 0\n")
        );
        assert_eq!(
            f.apply[2].line().unwrap(),
            "sysctl -p /etc/sysctl.d/90-cpulab-02-sysctl.conf"
        );
    }
}
