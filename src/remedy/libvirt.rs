//! For the hypervisor host's operator: libvirt `<cputune>` pinning each of the guest's vCPUs to
//! a physical CPU of its own (`<vcpupin>`) and the emulator threads apart (`<emulatorpin>`).
//!
//! The host's CPU numbers and the domain's name cannot be seen from inside the guest, so they
//! are placeholders (`HOST_CPU_0`, `DOMAIN`) with the reason; the guest's vCPU count is the
//! doctor's. Replace them before `virsh` reads the fragment.
//!
//! Where the finding points at the guest's socket or NUMA layout (`one_node`), a `<numatune>`
//! keeps the guest's memory on the host node its vCPUs are pinned to.

use super::{Command, Context, File, Form, Format, Needs, Word};
use crate::doctor::findings::Change;

/// The `<cputune>` fragment for `vcpus` vCPUs, with placeholder host CPUs.
pub fn cputune(vcpus: u32) -> String {
    let mut s = String::from("<cputune>\n");
    for v in 0..vcpus {
        s.push_str(&format!(
            "  <vcpupin vcpu=\"{v}\" cpuset=\"HOST_CPU_{v}\"/>\n"
        ));
    }
    s.push_str("  <emulatorpin cpuset=\"HOST_CPUS_EMULATOR\"/>\n</cputune>\n");
    s
}

/// The `<numatune>` fragment: the guest's memory strictly from one host node, a placeholder.
pub fn numatune() -> String {
    "<numatune>\n  <memory mode=\"strict\" nodeset=\"HOST_NODE\"/>\n</numatune>\n".into()
}

const CPUS_WHY: &str = "the host's CPU numbers and the domain's name are not visible from the \
    guest: the host's administrator chooses one physical core per vCPU (not shared with other \
    guests) and CPUs for the emulator threads";

const NODE_WHY: &str = "the host's NUMA nodes are not visible from the guest: the host's \
    administrator chooses one node with cores for every vCPU and room for the guest's memory \
    (`virsh capabilities`, `numactl -H` on the host), and takes HOST_CPU_n from that \
    node's CPUs";

pub fn form(dir: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Libvirt, Needs::Nothing);
    for c in changes {
        if let Change::HostVcpuPin {
            vm,
            pid,
            domain: Some(domain),
            pins,
            emulator,
        } = c
        {
            host_pin(&mut form, dir, vm, *pid, domain, pins, emulator, ctx);
            continue;
        }
        let Change::VcpuPin { vcpus, one_node } = c else {
            continue;
        };
        pin(&mut form, dir, *vcpus, *one_node, ctx);
        if *one_node {
            node(&mut form, dir);
        }
    }
    form
}

/// The `<cputune>` file and the `virsh vcpupin`/`emulatorpin` commands.
fn pin(form: &mut Form, dir: &str, vcpus: u32, one_node: bool, ctx: &Context) {
    let why = if one_node {
        format!("{CPUS_WHY}, all of the node HOST_NODE")
    } else {
        CPUS_WHY.to_string()
    };
    form.files.push(File {
        contents: format!(
            "<!-- Written by `cpulab remedy` for the hypervisor host, not this guest \
             ({vcpus} vCPUs). PLACEHOLDER: HOST_CPU_n, HOST_CPUS_EMULATOR: {why}. \
             Paste into the domain with `virsh edit DOMAIN`. -->\n{}",
            cputune(vcpus)
        ),
        path: format!("{dir}/cputune.xml"),
        install_to: None,
        placeholder: Some(why),
    });
    let domain = domain();
    let before = Word::placeholder(
        "the host CPUs this vCPU ran on before (`virsh vcpupin DOMAIN` shows them)",
    );
    for v in 0..vcpus {
        let cpu = Word::placeholder(format!("HOST_CPU_{v}: the host CPU for vCPU {v}"));
        let vcpu = Word::from(v.to_string());
        form.apply.push(virsh_pin(&domain, &vcpu, &cpu));
        form.verify.push(Command::sh(
            r#"virsh dumpxml --inactive "$1" | grep -Fq "<vcpupin vcpu='$2' cpuset='$3'/>""#,
            [domain.clone(), vcpu.clone(), cpu],
        ));
        form.undo.push(virsh_pin(&domain, &vcpu, &before));
    }
    let emulator = |cpus: Word| {
        Command::new([
            Word::from("virsh"),
            "emulatorpin".into(),
            domain.clone(),
            cpus,
            "--live".into(),
            "--config".into(),
        ])
    };
    form.apply.push(emulator(Word::placeholder(
        "HOST_CPUS_EMULATOR: the host CPUs for the emulator threads",
    )));
    form.undo.push(emulator(Word::placeholder(
        "the host CPUs the emulator threads ran on before (`virsh emulatorpin DOMAIN` shows them)",
    )));
    form.notes.push(format!(
        "the domain is a placeholder: the libvirt domain of this guest (its host name here is \
         `{}`; a domain is often, not always, named so); so are the host's CPUs, before and \
         after",
        if ctx.hostname.is_empty() {
            "not recorded"
        } else {
            &ctx.hostname
        }
    ));
}

/// A domain's vCPUs pinned where `cpulab host` chose, on the host it ran on: the `<cputune>`
/// with the host's own numbers, `virsh vcpupin`/`emulatorpin` live and in the definition
/// (`virsh edit` is interactive), verified through virsh and each thread's affinity, undone to
/// the affinity each vCPU thread had and the emulator's kept by the apply.
#[allow(clippy::too_many_arguments)]
fn host_pin(
    form: &mut Form,
    dir: &str,
    vm: &str,
    pid: i32,
    domain: &str,
    pins: &[crate::host::watch::findings::Pin],
    emulator: &str,
    ctx: &Context,
) {
    use crate::host::watch::findings::{affinity_is, cputune};
    let host = if ctx.hostname.is_empty() {
        "the host".to_string()
    } else {
        ctx.hostname.clone()
    };
    form.files.push(File {
        contents: format!(
            "<!-- Written by `cpulab remedy` from `cpulab host` on {host}: the domain {domain}, \
             VM {vm}, one host CPU per vCPU and the emulator threads on {emulator}. Paste into \
             the domain with `virsh edit {domain}`; the apply commands set the same live and in \
             the definition. -->\n{}",
            cputune(pins, emulator)
        ),
        path: format!("{dir}/cputune.xml"),
        install_to: None,
        placeholder: None,
    });
    let saved = format!("{dir}/emulatorpin.before");
    form.apply.push(Command::sh(
        r#"test -e "$2" || { v=$(virsh emulatorpin "$1" --live | awk '$1 == "*:" { print $2 }') && test -n "$v" && printf '%s\n' "$v" > "$2"; }"#,
        [domain, saved.as_str()],
    ));
    for p in pins {
        let (vcpu, cpu) = (p.vcpu.to_string(), p.cpu.to_string());
        form.apply.push(Command::new([
            "virsh", "vcpupin", domain, &vcpu, &cpu, "--live", "--config",
        ]));
        form.verify.push(Command::sh(
            r#"for m in --live --config; do virsh vcpupin "$1" --vcpu "$2" $m | awk -v v="$2" -v c="$3" '{ k = $1; sub(/:$/, "", k) } k == v && $2 == c { ok = 1 } END { exit !ok }' || exit 1; done"#,
            [domain, vcpu.as_str(), cpu.as_str()],
        ));
        form.verify
            .push(Command::new(affinity_is(pid, p.tid, &cpu)));
        form.undo.push(Command::new([
            "virsh", "vcpupin", domain, &vcpu, &p.before, "--live", "--config",
        ]));
    }
    form.apply.push(Command::new([
        "virsh",
        "emulatorpin",
        domain,
        emulator,
        "--live",
        "--config",
    ]));
    form.verify.push(Command::sh(
        r#"for m in --live --config; do virsh emulatorpin "$1" $m | awk -v c="$2" '$1 == "*:" && $2 == c { ok = 1 } END { exit !ok }' || exit 1; done"#,
        [domain, emulator],
    ));
    form.undo.push(Command::sh(
        r#"v=$(cat -- "$2") && virsh emulatorpin "$1" "$v" --live --config && rm -f -- "$2""#,
        [domain, saved.as_str()],
    ));
    form.notes.push(format!(
        "the CPUs are the host's own, chosen by `cpulab host` from its topology; undo gives each \
         vCPU the affinity its thread had at the end of the window, live and in the definition \
         (a <vcpupin> the definition did not hold before stays, with that affinity), and the \
         emulator threads the affinity the first apply kept in {saved}; the affinity checks of \
         the vCPU threads hold while the VM's process {pid} runs"
    ));
}

/// The libvirt domain, which the guest cannot see.
fn domain() -> Word {
    Word::placeholder("DOMAIN: the libvirt domain of this guest")
}

/// `virsh vcpupin DOMAIN VCPU CPUS --live --config`.
fn virsh_pin(domain: &Word, vcpu: &Word, cpus: &Word) -> Command {
    Command::new([
        Word::from("virsh"),
        "vcpupin".into(),
        domain.clone(),
        vcpu.clone(),
        cpus.clone(),
        "--live".into(),
        "--config".into(),
    ])
}

/// The `<numatune>` file and the `virsh numatune` commands: the memory's node is part of the
/// definition (`--config`), so it takes effect when the guest starts again.
fn node(form: &mut Form, dir: &str) {
    form.files.push(File {
        contents: format!(
            "<!-- Written by `cpulab remedy` for the hypervisor host, not this guest. \
             PLACEHOLDER: HOST_NODE: {NODE_WHY}. Paste into the domain beside <cputune> with \
             `virsh edit DOMAIN`. -->\n{}",
            numatune()
        ),
        path: format!("{dir}/numatune.xml"),
        install_to: None,
        placeholder: Some(NODE_WHY.to_string()),
    });
    let domain = domain();
    let node = Word::placeholder("HOST_NODE: the host NUMA node the guest keeps to");
    let numatune = |mode: Word, nodes: Word| {
        Command::new([
            Word::from("virsh"),
            "numatune".into(),
            domain.clone(),
            "--mode".into(),
            mode,
            "--nodeset".into(),
            nodes,
            "--config".into(),
        ])
    };
    form.apply.push(numatune("strict".into(), node.clone()));
    form.verify.push(Command::sh(
        r#"virsh numatune "$1" --config | grep -Eq "^numa_nodeset[[:space:]]*:[[:space:]]*$2\$""#,
        [domain.clone(), node],
    ));
    form.undo.push(numatune(
        Word::placeholder("the memory mode before (`virsh numatune DOMAIN --config`)"),
        Word::placeholder("the node set before (`virsh numatune DOMAIN --config`)"),
    ));
    form.needs = Needs::GuestRestart;
    form.notes.push(
        "HOST_NODE is a placeholder (the host node the guest keeps to); so are the memory mode \
         and node set before, which `virsh numatune DOMAIN --config` shows (with no \
         <numatune> before, undo removes the element with `virsh edit DOMAIN` instead). The \
         vCPU pinning takes effect at once, the memory's node when the guest is shut down and \
         started again."
            .into(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vcpu_is_pinned_once_and_the_emulator_apart() {
        let x = cputune(2);
        assert_eq!(
            x,
            "<cputune>\n  <vcpupin vcpu=\"0\" cpuset=\"HOST_CPU_0\"/>\n  <vcpupin vcpu=\"1\" \
             cpuset=\"HOST_CPU_1\"/>\n  <emulatorpin cpuset=\"HOST_CPUS_EMULATOR\"/>\n</cputune>\n"
        );
        let f = form(
            "05-vcpu-pin/libvirt",
            &[&Change::VcpuPin {
                vcpus: 2,
                one_node: false,
            }],
            &Context::default(),
        );
        assert_eq!(f.apply.len(), 3);
        // Nothing the host must supply is runnable text.
        assert!(f.commands().all(|c| c.line().is_none()));
        assert!(
            f.apply[0]
                .shown()
                .starts_with("# PLACEHOLDER, replace each <...>: virsh vcpupin <DOMAIN: "),
            "{}",
            f.apply[0].shown()
        );
        assert_eq!(f.files.len(), 1, "no <numatune> without one_node");
        assert_eq!(f.needs, Needs::Nothing);
        assert!(f.files[0].placeholder.is_some());
        assert!(
            f.files[0]
                .contents
                .contains("for the hypervisor host, not this guest")
        );
    }

    #[test]
    fn one_node_adds_the_memorys_node_and_waits_for_a_restart() {
        assert_eq!(
            numatune(),
            "<numatune>\n  <memory mode=\"strict\" nodeset=\"HOST_NODE\"/>\n</numatune>\n"
        );
        let f = form(
            "05-vcpu-pin/libvirt",
            &[&Change::VcpuPin {
                vcpus: 2,
                one_node: true,
            }],
            &Context::default(),
        );
        let names: Vec<&str> = f.files.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "05-vcpu-pin/libvirt/cputune.xml",
                "05-vcpu-pin/libvirt/numatune.xml"
            ]
        );
        assert!(f.files.iter().all(|x| x.placeholder.is_some()));
        for x in &f.files {
            // XML forbids `--` inside a comment: virsh would refuse the fragment.
            let body = x
                .contents
                .split_once("<!--")
                .unwrap()
                .1
                .split_once("-->")
                .unwrap()
                .0;
            assert!(!body.contains("--"), "{}", x.contents);
        }
        assert!(
            f.files[0]
                .placeholder
                .as_deref()
                .unwrap()
                .contains("HOST_NODE")
        );
        assert!(f.apply.iter().any(|a| {
            a.shown()
                .contains("numatune <DOMAIN: the libvirt domain of this guest> --mode strict")
        }));
        assert_eq!(f.apply.len(), f.undo.len());
        assert_eq!(f.needs, Needs::GuestRestart);
    }
}
