//! The host side of KVM on this machine, when it runs one: which KVM module is loaded, its
//! halt-polling parameters and whether they can be changed, `nx_huge_pages`, and whether
//! `/dev/kvm` opens for this process (and if not, why).

use serde::{Deserialize, Serialize};
use std::path::Path;

/// The vendor modules that make a KVM, in the order they are looked for.
const MODULES: [&str; 3] = ["kvm_intel", "kvm_amd", "kvm_pvm"];

/// What this machine's KVM is, as /sys shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KvmFacts {
    /// `kvm_intel`, `kvm_amd` or `kvm_pvm` (a KVM that runs guests without VMX/SVM by
    /// emulating their instructions); `None` when none is loaded.
    pub module: Option<String>,
    /// `/sys/module/kvm/parameters/halt_poll_ns` and its grow/shrink parameters.
    pub halt_poll_ns: Option<u64>,
    pub halt_poll_ns_grow: Option<u64>,
    pub halt_poll_ns_grow_start: Option<u64>,
    pub halt_poll_ns_shrink: Option<u64>,
    /// Whether `halt_poll_ns` has a write bit (mode 0444 means no one, root included, can
    /// change it at run time; only the module's load options can).
    pub halt_poll_ns_writable: Option<bool>,
    /// `nx_huge_pages` (`Y`, `N`, `force`, `off`, `auto`).
    pub nx_huge_pages: Option<String>,
    /// Whether this process can run VMs on `/dev/kvm`, and if not why. `None` for a fixture
    /// tree (not checked: it is not this machine).
    #[serde(default)]
    pub dev_kvm: Option<DevKvm>,
}

/// What opening `/dev/kvm` here gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DevKvm {
    /// It opens, with the in-kernel irqchip, x2APIC and binary statistics cpulab's guests need.
    Usable,
    /// It does not, for this reason (absent, permission, no irqchip...), with the fix.
    Unusable { why: String },
}

impl KvmFacts {
    /// Whether guest instructions are emulated rather than run natively.
    pub fn guest_code_emulated(&self) -> bool {
        self.module.as_deref() == Some("kvm_pvm")
    }

    /// Reads the facts below `root`.
    pub fn read(root: &Path) -> Self {
        let sys = root.join("sys/module");
        let module = MODULES
            .iter()
            .find(|m| sys.join(m).is_dir())
            .map(|m| m.to_string());
        let params = sys.join("kvm/parameters");
        let text = |name: &str| {
            std::fs::read_to_string(params.join(name))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let num = |name: &str| text(name).and_then(|s| s.parse::<u64>().ok());
        let writable = std::fs::metadata(params.join("halt_poll_ns"))
            .ok()
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o222 != 0);
        Self {
            module,
            halt_poll_ns: num("halt_poll_ns"),
            halt_poll_ns_grow: num("halt_poll_ns_grow"),
            halt_poll_ns_grow_start: num("halt_poll_ns_grow_start"),
            halt_poll_ns_shrink: num("halt_poll_ns_shrink"),
            halt_poll_ns_writable: writable,
            nx_huge_pages: text("nx_huge_pages"),
            dev_kvm: None,
        }
    }

    /// [`KvmFacts::read`], and on the live machine whether `/dev/kvm` is usable here.
    pub fn read_live(root: &Path, live: bool) -> Self {
        let mut k = Self::read(root);
        if live {
            k.dev_kvm = Some(match crate::vmm::Access::open() {
                Ok(_) => DevKvm::Usable,
                Err(e) => DevKvm::Unusable {
                    why: format!("{e:#}"),
                },
            });
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_tree_with_kvm_pvm_and_read_only_parameters_reads_so() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sys/module/kvm/parameters");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::create_dir_all(d.path().join("sys/module/kvm_pvm")).unwrap();
        for (f, v) in [
            ("halt_poll_ns", "200000\n"),
            ("halt_poll_ns_grow", "2\n"),
            ("halt_poll_ns_grow_start", "10000\n"),
            ("halt_poll_ns_shrink", "2\n"),
            ("nx_huge_pages", "N\n"),
        ] {
            std::fs::write(p.join(f), v).unwrap();
        }
        std::fs::set_permissions(
            p.join("halt_poll_ns"),
            std::fs::Permissions::from_mode(0o444),
        )
        .unwrap();
        let k = KvmFacts::read(d.path());
        assert_eq!(k.module.as_deref(), Some("kvm_pvm"));
        assert!(k.guest_code_emulated());
        assert_eq!(k.halt_poll_ns, Some(200_000));
        assert_eq!(k.halt_poll_ns_grow_start, Some(10_000));
        assert_eq!(k.halt_poll_ns_writable, Some(false));
        assert_eq!(k.nx_huge_pages.as_deref(), Some("N"));
        std::fs::set_permissions(
            p.join("halt_poll_ns"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert_eq!(KvmFacts::read(d.path()).halt_poll_ns_writable, Some(true));
    }

    #[test]
    fn a_machine_without_kvm_has_no_module_and_no_parameters() {
        let d = tempfile::tempdir().unwrap();
        let k = KvmFacts::read(d.path());
        assert_eq!(k, KvmFacts::default());
        assert!(!k.guest_code_emulated());
    }
}
