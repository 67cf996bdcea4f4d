//! For the hypervisor host's operator: libvirt `<cputune>` pinning each of the guest's vCPUs to
//! a physical CPU of its own (`<vcpupin>`) and the emulator threads apart (`<emulatorpin>`).
//!
//! The host's CPU numbers and the domain's name cannot be seen from inside the guest, so they
//! are placeholders (`HOST_CPU_0`, `DOMAIN`) with the reason; the guest's vCPU count is the
//! doctor's. Replace them before `virsh` reads the fragment.

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

pub fn form(dir: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form {
        format: Format::Libvirt,
        files: vec![],
        trial: vec![],
        apply: vec![],
        verify: vec![],
        undo: vec![],
        needs: Needs::Nothing,
        notes: vec![],
    };
    for c in changes {
        let Change::VcpuPin { vcpus } = c else {
            continue;
        };
        let why = "the host's CPU numbers and the domain's name are not visible from the guest: \
                   the host's administrator chooses one physical core per vCPU (not shared with \
                   other guests) and CPUs for the emulator threads";
        form.files.push(File {
            contents: format!(
                "<!-- Written by `cpulab remedy` for the hypervisor host, not this guest \
                 ({} vCPUs). PLACEHOLDER: HOST_CPU_n, HOST_CPUS_EMULATOR: {why}. \
                 Paste into the domain with `virsh edit DOMAIN`. -->\n{}",
                vcpus,
                cputune(*vcpus)
            ),
            path: format!("{dir}/cputune.xml"),
            install_to: None,
            placeholder: Some(why.to_string()),
        });
        for v in 0..*vcpus {
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
    form
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
            &[&Change::VcpuPin { vcpus: 2 }],
            &Context::default(),
        );
        assert_eq!(f.apply.len(), 3);
        assert!(f.files[0].placeholder.is_some());
        assert!(
            f.files[0]
                .contents
                .contains("for the hypervisor host, not this guest")
        );
    }
}
