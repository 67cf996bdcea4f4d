//! For the hypervisor host's operator: libvirt `<cputune>` pinning each of the guest's vCPUs to
//! a physical CPU of its own (`<vcpupin>`) and the emulator threads apart (`<emulatorpin>`).
//!
//! The host's CPU numbers and the domain's name cannot be seen from inside the guest, so they
//! are placeholders (`HOST_CPU_0`, `DOMAIN`) with the reason; the guest's vCPU count is the
//! doctor's. Replace them before `virsh` reads the fragment.
//!
//! Where the finding points at the guest's socket or NUMA layout (`one_node`), a `<numatune>`
//! keeps the guest's memory on the host node its vCPUs are pinned to.

use super::{Context, File, Form, Format, Needs};
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
    for v in 0..vcpus {
        form.apply.push(format!(
            "virsh vcpupin DOMAIN {v} HOST_CPU_{v} --live --config"
        ));
        form.verify.push(format!(
            "virsh dumpxml DOMAIN | grep -q \"<vcpupin vcpu='{v}' cpuset='HOST_CPU_{v}'/>\""
        ));
        form.undo.push(format!(
            "virsh vcpupin DOMAIN {v} HOST_CPUS_BEFORE --live --config"
        ));
    }
    form.apply
        .push("virsh emulatorpin DOMAIN HOST_CPUS_EMULATOR --live --config".into());
    form.undo
        .push("virsh emulatorpin DOMAIN HOST_CPUS_BEFORE --live --config".into());
    form.notes.push(format!(
        "DOMAIN is a placeholder: the libvirt domain of this guest (its host name here is \
         `{}`; a domain is often, not always, named so); HOST_CPUS_BEFORE is the host's \
         CPU list the vCPUs ran on before (`virsh vcpupin DOMAIN` shows it)",
        if ctx.hostname.is_empty() {
            "not recorded"
        } else {
            &ctx.hostname
        }
    ));
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
    form.apply
        .push("virsh numatune DOMAIN --mode strict --nodeset HOST_NODE --config".into());
    form.verify.push(
        "virsh numatune DOMAIN --config | grep -Eq '^numa_nodeset[[:space:]]*:[[:space:]]*HOST_NODE$'"
            .into(),
    );
    form.undo.push(
        "virsh numatune DOMAIN --mode MODE_BEFORE --nodeset HOST_NODES_BEFORE --config".into(),
    );
    form.needs = Needs::GuestRestart;
    form.notes.push(
        "HOST_NODE is a placeholder (the host node the guest keeps to); MODE_BEFORE and \
         HOST_NODES_BEFORE are what `virsh numatune DOMAIN --config` shows before (with no \
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
        assert!(
            f.apply
                .iter()
                .any(|a| a.contains("numatune DOMAIN --mode strict"))
        );
        assert_eq!(f.apply.len(), f.undo.len());
        assert_eq!(f.needs, Needs::GuestRestart);
    }
}
