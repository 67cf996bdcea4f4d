//! Placement for containers and pods: `docker update --cpuset-cpus` now and a compose file's
//! `cpuset` for the next start; for Kubernetes, the kubelet's static CPU manager (with the node
//! drain a policy change needs) and a pod spec that gets exclusive CPUs (Guaranteed QoS,
//! integer CPUs).
//!
//! The container is the one the doctor read from the watched process's cgroup
//! (`docker-<id>.scope`, `/docker/<id>`); a compose service name or a pod's image are never in
//! a cgroup, so they are placeholders with the reason. A pod cannot choose its CPU numbers: the
//! static policy hands out whole CPUs that are not reserved.

use super::{Context, File, Form, Format, Needs, sh_quote};
use crate::doctor::findings::{Change, Workload};
use crate::wakeups::GroupBy;

/// The container id of the workload's first cgroup that is a container's.
fn container(w: &Workload) -> Option<String> {
    w.cgroups.iter().find_map(|g| {
        let name = crate::watch::groups::group_name(g, "", GroupBy::Container);
        name.split_once('/')
            .map(|(_, id)| id.rsplit('/').next().unwrap_or(id).to_string())
    })
}

/// How many CPUs a CPU list names (`0-3,8` is 5).
fn count(cpus: &str) -> usize {
    crate::cpulist::CpuSet::parse_list(cpus, false).map_or(1, |s| s.len().max(1))
}

fn yaml(value: &serde_json::Value) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_default()
}

/// `docker update` now, a compose override for the next start.
pub fn docker(dir: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Containers, Needs::Nothing);
    for c in changes {
        let (w, run_flag, compose_key, value, undo_value) = match c {
            Change::Pin { cpus, workload } => (
                workload,
                "--cpuset-cpus",
                "cpuset",
                cpus.clone(),
                ctx.online_cpus.clone(),
            ),
            Change::CpuQuota { percent, workload } => (
                workload,
                "--cpus",
                "cpus",
                format!("{:.2}", f64::from(*percent) / 100.0),
                Some("0".to_string()),
            ),
            _ => continue,
        };
        let (name, why) = match container(w) {
            Some(id) => (id, None),
            None => (
                "CONTAINER".to_string(),
                Some("the doctor saw no container in the workload's cgroups: name the container"),
            ),
        };
        let path = format!("{dir}/compose.override.yaml");
        let doc = serde_json::json!({ "services": { "SERVICE": { compose_key: value } } });
        form.files.push(File {
            contents: format!(
                "# Written by `cpulab remedy`. PLACEHOLDER: SERVICE is the compose service that \
                 runs the workload (a service name is in no cgroup); use with\n\
                 # docker compose -f compose.yaml -f compose.override.yaml up -d\n{}",
                yaml(&doc)
            ),
            path,
            install_to: None,
            placeholder: Some("SERVICE: the compose service's name is not in any cgroup".into()),
        });
        let n = sh_quote(&name);
        form.apply
            .push(format!("docker update {run_flag} {} {n}", sh_quote(&value)));
        let field = if compose_key == "cpuset" {
            "{{.HostConfig.CpusetCpus}}"
        } else {
            "{{.HostConfig.NanoCpus}}"
        };
        let want = if compose_key == "cpuset" {
            value.clone()
        } else {
            format!(
                "{}",
                (f64::from(value.parse::<f32>().unwrap_or(1.0)) * 1e9).round()
            )
        };
        form.verify.push(format!(
            "test \"$(docker inspect -f '{field}' {n})\" = {}",
            sh_quote(&want)
        ));
        match undo_value {
            Some(u) => form
                .undo
                .push(format!("docker update {run_flag} {} {n}", sh_quote(&u))),
            None => form.undo.push(format!(
                "docker update {run_flag} '<the CPUs before>' {n}   # the online CPUs were not recorded"
            )),
        }
        if let Some(why) = why {
            form.notes
                .push(format!("CONTAINER is a placeholder: {why}"));
        }
        form.notes.push(format!(
            "for a new container: docker run {run_flag} {} ...",
            sh_quote(&value)
        ));
    }
    form
}

/// The kubelet's static CPU manager and a Guaranteed pod with integer CPUs.
pub fn kubernetes(dir: &str, changes: &[&Change], ctx: &Context) -> Form {
    let mut form = Form::empty(Format::Kubernetes, Needs::NodeDrain);
    let Some(cpus) = changes.iter().find_map(|c| match c {
        Change::Pin { cpus, .. } => Some(cpus.clone()),
        _ => None,
    }) else {
        return form;
    };
    let reserved = ctx
        .online_cpus
        .as_deref()
        .and_then(|o| crate::cpulist::CpuSet::parse_list(o, false).ok())
        .and_then(|s| s.iter().next())
        .unwrap_or(0)
        .to_string();
    let mut kubelet = serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": reserved,
    });
    if ctx.smt == Some(true) {
        // Whole cores only, so no other container shares the pod's cores' siblings.
        kubelet["cpuManagerPolicyOptions"] = serde_json::json!({ "full-pcpus-only": "true" });
    }
    let n = count(&cpus).to_string();
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "cpulab-exclusive" },
        "spec": { "containers": [ {
            "name": "app",
            "image": "IMAGE",
            "resources": {
                "requests": { "cpu": n, "memory": "MEMORY" },
                "limits": { "cpu": n, "memory": "MEMORY" }
            }
        } ] }
    });
    let name = dir.split('/').next().unwrap_or("cpulab");
    let install = format!("/etc/kubernetes/kubelet.conf.d/50-cpulab-{name}.conf");
    form.files.push(File {
        contents: format!(
            "# Written by `cpulab remedy`: the static CPU manager. A drop-in for the kubelet's \
             --config-dir ({install}),\n# or merge these fields into /var/lib/kubelet/config.yaml.\n{}",
            yaml(&kubelet)
        ),
        path: format!("{dir}/kubelet-config.yaml"),
        install_to: Some(install.clone()),
        placeholder: None,
    });
    form.files.push(File {
        contents: format!(
            "# Written by `cpulab remedy`: exclusive CPUs need Guaranteed QoS (requests equal to \
             limits)\n# and an integer CPU count. PLACEHOLDER: IMAGE and MEMORY are the workload's.\n{}",
            yaml(&pod)
        ),
        path: format!("{dir}/pod.yaml"),
        install_to: None,
        placeholder: Some("IMAGE and MEMORY: the workload's image and memory are not in a doctor result".into()),
    });
    kubernetes_commands(&mut form, dir, &install, ctx);
    form.notes.push(format!(
        "a pod cannot name its CPUs: the static policy gives it {n} whole CPU(s) from those not \
         reserved (reservedSystemCPUs {reserved} keeps the first for system daemons); changing \
         the policy needs the node drained and cpu_manager_state removed"
    ));
    if ctx.hostname.is_empty() {
        form.notes
            .push("NODE is a placeholder: the result names no host".into());
    }
    form
}

/// The node drain, the kubelet's restart with the static policy, the pod, and their undo.
fn kubernetes_commands(form: &mut Form, dir: &str, install: &str, ctx: &Context) {
    let node = sh_quote(if ctx.hostname.is_empty() {
        "NODE"
    } else {
        &ctx.hostname
    });
    let drain = format!("kubectl drain {node} --ignore-daemonsets --delete-emptydir-data");
    let restart = [
        "systemctl stop kubelet".to_string(),
        "rm -f /var/lib/kubelet/cpu_manager_state".to_string(),
    ];
    form.apply.push(drain.clone());
    form.apply.extend(restart.iter().cloned());
    form.apply.push(format!(
        "install -D -m 0644 {dir}/kubelet-config.yaml {}",
        sh_quote(install)
    ));
    form.apply.push("systemctl start kubelet".into());
    form.apply.push(format!("kubectl uncordon {node}"));
    form.apply.push(format!("kubectl apply -f {dir}/pod.yaml"));
    form.verify
        .push("grep -q '\"policyName\":\"static\"' /var/lib/kubelet/cpu_manager_state".into());
    form.verify.push(
        "test \"$(kubectl get pod cpulab-exclusive -o jsonpath='{.status.qosClass}')\" = Guaranteed"
            .into(),
    );
    form.undo.push(format!("kubectl delete -f {dir}/pod.yaml"));
    form.undo.push(drain);
    form.undo.extend(restart);
    form.undo.push(format!("rm -f {}", sh_quote(install)));
    form.undo.push("systemctl start kubelet".into());
    form.undo.push(format!("kubectl uncordon {node}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(cgroups: &[&str]) -> Change {
        Change::Pin {
            cpus: "0".into(),
            workload: Workload {
                cgroups: cgroups.iter().map(|g| g.to_string()).collect(),
                ..Workload::default()
            },
        }
    }

    #[test]
    fn a_docker_container_is_named_from_its_cgroup_and_restored_to_the_online_cpus() {
        let ctx = Context {
            online_cpus: Some("0-15".into()),
            ..Context::default()
        };
        let c = pin(&["/system.slice/docker-0123456789abcdef0123.scope"]);
        let f = docker("01-pin/containers", &[&c], &ctx);
        assert_eq!(f.apply, ["docker update --cpuset-cpus 0 0123456789ab"]);
        assert_eq!(f.undo, ["docker update --cpuset-cpus 0-15 0123456789ab"]);
        assert!(
            f.files[0].contents.contains("cpuset: '0'")
                || f.files[0].contents.contains("cpuset: \"0\""),
            "{}",
            f.files[0].contents
        );
        let f = docker(
            "01-pin/containers",
            &[&pin(&["/system.slice/db.service"])],
            &ctx,
        );
        assert!(f.apply[0].ends_with(" CONTAINER"));
        assert!(f.notes[0].starts_with("CONTAINER is a placeholder"));
    }

    #[test]
    fn the_kubelet_gets_the_static_policy_and_the_pod_integer_guaranteed_cpus() {
        let ctx = Context {
            online_cpus: Some("0-3".into()),
            smt: Some(true),
            hostname: "node1".into(),
            ..Context::default()
        };
        let f = kubernetes("01-pin/kubernetes", &[&pin(&[])], &ctx);
        let kubelet: serde_json::Value = serde_yaml_ng::from_str(&f.files[0].contents).unwrap();
        assert_eq!(kubelet["cpuManagerPolicy"], "static");
        assert_eq!(kubelet["reservedSystemCPUs"], "0");
        assert_eq!(
            kubelet["cpuManagerPolicyOptions"]["full-pcpus-only"],
            "true"
        );
        let pod: serde_json::Value = serde_yaml_ng::from_str(&f.files[1].contents).unwrap();
        let r = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(r["requests"], r["limits"]);
        assert_eq!(r["limits"]["cpu"], "1");
        assert_eq!(f.needs, Needs::NodeDrain);
        assert!(f.apply[0].starts_with("kubectl drain node1 "));
        assert!(
            f.apply
                .contains(&"rm -f /var/lib/kubelet/cpu_manager_state".to_string())
        );
    }
}
