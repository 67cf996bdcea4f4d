//! For a VM on this KVM host that libvirt does not run: each vCPU thread pinned with
//! `taskset -p -c CPU TID` to the host CPU `cpulab host` chose for it, and the VMM's main
//! thread (its emulator) on the CPUs the vCPUs leave free, as three shell scripts (apply,
//! verify, undo) holding the same commands as the JSON.
//!
//! Verify checks each thread's affinity (`Cpus_allowed_list`) and where it ran (its `stat`'s
//! field 39, given a second to get there: a halted vCPU moves when it next wakes). Undo gives
//! each vCPU thread the affinity it had at the end of `cpulab host`'s window, and the main
//! thread the affinity the first apply kept.

use super::{Command, Context, File, Form, Format, Needs};
use crate::doctor::findings::Change;
use crate::host::watch::findings::{Pin, affinity_is};

pub fn form(dir: &str, changes: &[&Change], _ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Taskset, Needs::Nothing);
    for c in changes {
        if let Change::HostVcpuPin {
            vm,
            pid,
            domain: None,
            pins,
            emulator,
        } = c
        {
            pin(&mut form, dir, vm, *pid, pins, emulator);
        }
    }
    form
}

/// Exits 0 once thread `tid` of `pid` last ran on `cpu`, trying for a second.
fn ran_on(pid: i32, tid: i32, cpu: u32) -> Command {
    Command::sh(
        r#"for i in 1 2 3 4 5 6 7 8 9 10; do test "$(sed 's/.*) //' "/proc/$1/task/$2/stat" | cut -d' ' -f37)" = "$3" && exit 0; sleep 0.1; done; exit 1"#,
        [pid.to_string(), tid.to_string(), cpu.to_string()],
    )
}

fn taskset(cpus: &str, tid: i32) -> Command {
    Command::new(["taskset", "-p", "-c", cpus, &tid.to_string()])
}

fn pin(form: &mut Form, dir: &str, vm: &str, pid: i32, pins: &[Pin], emulator: &str) {
    let saved = format!("{dir}/main-thread.before");
    for p in pins {
        // A thread id of another process after the VM restarted is never pinned.
        form.apply.push(Command::new([
            "test".to_string(),
            "-d".into(),
            format!("/proc/{pid}/task/{}", p.tid),
        ]));
        form.apply.push(taskset(&p.cpu.to_string(), p.tid));
        form.verify
            .push(Command::new(affinity_is(pid, p.tid, &p.cpu.to_string())));
        form.verify.push(ran_on(pid, p.tid, p.cpu));
        form.undo.push(taskset(&p.before, p.tid));
    }
    form.apply.push(Command::sh(
        r#"test -e "$2" || awk '$1 == "Cpus_allowed_list:" { print $2 }' "/proc/$1/status" > "$2""#,
        [pid.to_string(), saved.clone()],
    ));
    form.apply.push(taskset(emulator, pid));
    form.verify
        .push(Command::new(affinity_is(pid, pid, emulator)));
    form.undo.push(Command::sh(
        r#"v=$(cat -- "$2") && taskset -p -c "$v" "$1" && rm -f -- "$2""#,
        [pid.to_string(), saved.clone()],
    ));
    let script = |what: &str, lines: &[Command], strict: bool| {
        let mut text = format!(
            "#!/bin/sh\n# Written by `cpulab remedy` from `cpulab host`: {what} of the VM {vm}\n\
             # (process {pid}); run as root from the directory cpulab remedy wrote.\n"
        );
        if strict {
            text.push_str("set -e\n");
            for l in lines {
                text.push_str(&l.shown());
                text.push('\n');
            }
        } else {
            text.push_str("status=0\n");
            for l in lines {
                text.push_str(&format!("{} || status=1\n", l.shown()));
            }
            text.push_str("exit $status\n");
        }
        text
    };
    for (name, what, lines, strict) in [
        ("apply.sh", "each vCPU thread pinned", &form.apply, true),
        (
            "verify.sh",
            "exits 0 when every thread is pinned and ran there",
            &form.verify,
            false,
        ),
        ("undo.sh", "the affinity before put back", &form.undo, true),
    ] {
        let contents = script(what, lines, strict);
        form.files.push(File {
            path: format!("{dir}/{name}"),
            install_to: None,
            placeholder: None,
            contents,
        });
    }
    form.notes.push(format!(
        "taskset acts on the running threads of process {pid}: when the VM restarts its new \
         threads float again and these thread ids are no longer its (apply then stops at its \
         `test -d`); run `cpulab host` again for new pins, and make them permanent in the \
         VMM's configuration (QEMU's thread ids through QMP query-cpus-fast, or CPUAffinity= \
         for the VMM's systemd unit)"
    ));
    form.notes.push(
        "the main thread stands for the emulator: its other threads (I/O, QEMU's workers) keep \
         their affinity, and threads it starts later inherit the new one"
            .into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change() -> Change {
        Change::HostVcpuPin {
            vm: "web (77)".into(),
            pid: 77,
            domain: None,
            pins: vec![
                Pin {
                    vcpu: 0,
                    tid: 78,
                    cpu: 2,
                    before: "0-7".into(),
                },
                Pin {
                    vcpu: 1,
                    tid: 79,
                    cpu: 4,
                    before: "0-7".into(),
                },
            ],
            emulator: "0-1,3,5-7".into(),
        }
    }

    #[test]
    fn each_thread_is_pinned_checked_where_it_ran_and_given_its_affinity_back() {
        let f = form(
            "01-host-vcpu-pin/taskset",
            &[&change()],
            &Context::default(),
        );
        let lines: Vec<String> = f.apply.iter().map(Command::shown).collect();
        assert!(
            lines.contains(&"taskset -p -c 2 78".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"taskset -p -c 4 79".to_string()),
            "{lines:?}"
        );
        assert!(lines.contains(&"taskset -p -c 0-1,3,5-7 77".to_string()));
        let undo: Vec<String> = f.undo.iter().map(Command::shown).collect();
        assert_eq!(undo[0], "taskset -p -c 0-7 78");
        assert_eq!(undo[1], "taskset -p -c 0-7 79");
        // Per vCPU thread its affinity and where it ran, and the main thread's affinity.
        assert_eq!(f.verify.len(), 2 * 2 + 1);
        assert!(!f.has_placeholder());
        let names: Vec<&str> = f.files.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "01-host-vcpu-pin/taskset/apply.sh",
                "01-host-vcpu-pin/taskset/verify.sh",
                "01-host-vcpu-pin/taskset/undo.sh"
            ]
        );
        // The scripts hold the same commands as the form.
        for l in &lines {
            assert!(f.files[0].contents.contains(l.as_str()), "{l}");
        }
        // A libvirt domain's pins are not taskset's.
        let Change::HostVcpuPin {
            vm,
            pid,
            pins,
            emulator,
            ..
        } = change()
        else {
            unreachable!()
        };
        let libvirt = Change::HostVcpuPin {
            vm,
            pid,
            domain: Some("web".into()),
            pins,
            emulator,
        };
        assert!(form("d", &[&libvirt], &Context::default()).files.is_empty());
    }

    /// The where-it-ran check, on a `sleep` started on one CPU: it passes on that CPU, fails on
    /// a CPU it cannot have run on.
    #[test]
    fn the_where_it_ran_check_reads_field_39() {
        let cpu = crate::affinity::get(0).unwrap().iter().next().unwrap();
        let mut child = std::process::Command::new("taskset")
            .args(["-c", &cpu.to_string(), "sleep", "30"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let run = |c: &Command| {
            let argv = c.runnable().unwrap();
            std::process::Command::new(argv[0])
                .args(&argv[1..])
                .status()
                .unwrap()
                .success()
        };
        let on = run(&ran_on(pid, pid, cpu));
        let elsewhere = run(&ran_on(pid, pid, 100_000));
        let _ = child.kill();
        let _ = child.wait();
        assert!(on, "CPU {cpu}");
        assert!(!elsewhere);
    }
}
