//! Placement for containers and pods: `docker update --cpuset-cpus` now and a compose file's
//! `cpuset` for the next start; for Kubernetes, the kubelet's static CPU manager (with the node
//! drain a policy change needs) and a pod spec that gets exclusive CPUs (Guaranteed QoS,
//! integer CPUs).
//!
//! The container is the one the doctor read from the watched process's cgroup
//! (`docker-<id>.scope`, `/docker/<id>`); a compose service name or a pod's image are never in
//! a cgroup, so they are placeholders with the reason. A pod cannot choose its CPU numbers: the
//! static policy hands out whole CPUs that are not reserved.

use super::{Command, Context, File, Form, Format, Needs, Word};
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

/// How many CPUs a CPU list names (`0-3,8` is 5); a list that names none is an error, never
/// a stand-in count.
fn count(cpus: &str) -> Result<usize, String> {
    crate::cpulist::CpuSet::parse_list(cpus, false)
        .ok()
        .map(|s| s.len())
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("the pin's CPU list `{cpus}` names no CPU, so no pod size follows"))
}

fn yaml(value: &serde_json::Value) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_default()
}

/// Docker's `NanoCpus` for a `--cpus` value, exactly from its decimal text (`0.70` is
/// 700000000, as docker stores it): no float round trip, and text that is not a decimal
/// number of CPUs with at most nine places is an error, never a stand-in value.
pub fn nanocpus(cpus: &str) -> Result<u64, String> {
    let bad = || format!("`{cpus}` is not a CPU count docker takes (a decimal such as 0.70)");
    let (whole, frac) = cpus.split_once('.').unwrap_or((cpus, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) || frac.len() > 9 {
        return Err(bad());
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let frac: u64 = format!("{frac:0<9}").parse().map_err(|_| bad())?;
    whole
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(frac))
        .ok_or_else(bad)
}

/// The `--cpus` value of a quota in percent of one CPU: `70` is `0.70`.
fn cpus_of_percent(percent: u32) -> String {
    format!("{}.{:02}", percent / 100, percent % 100)
}

/// `docker update` now, a compose override for the next start.
pub fn docker(dir: &str, changes: &[&Change], ctx: &Context) -> Result<Form, String> {
    let mut form = Form::empty(Format::Containers, Needs::Nothing);
    for c in changes {
        let (w, run_flag, compose_key, value, want, undo_value) = match c {
            Change::Pin { cpus, workload } => (
                workload,
                "--cpuset-cpus",
                "cpuset",
                cpus.clone(),
                cpus.clone(),
                match &ctx.online_cpus {
                    Some(o) => Word::from(o),
                    None => Word::placeholder(
                        "the host's online CPUs (`cat /sys/devices/system/cpu/online`), which \
                         the result does not record",
                    ),
                },
            ),
            Change::CpuQuota { percent, workload } => {
                let cpus = cpus_of_percent(*percent);
                let nano = nanocpus(&cpus)?;
                // 0 is docker's "no limit".
                (
                    workload,
                    "--cpus",
                    "cpus",
                    cpus,
                    nano.to_string(),
                    Word::from("0"),
                )
            }
            _ => continue,
        };
        let container = match container(w) {
            Some(id) => Word::from(id),
            None => {
                form.notes.push(
                    "the container is a placeholder: the doctor saw no container in the \
                     workload's cgroups"
                        .into(),
                );
                Word::placeholder("the container that runs the workload")
            }
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
        let field = if compose_key == "cpuset" {
            "{{.HostConfig.CpusetCpus}}"
        } else {
            "{{.HostConfig.NanoCpus}}"
        };
        form.apply.push(Command::new([
            Word::from("docker"),
            "update".into(),
            run_flag.into(),
            Word::from(&value),
            container.clone(),
        ]));
        form.verify.push(Command::output_is(
            want,
            [
                Word::from("docker"),
                "inspect".into(),
                "-f".into(),
                field.into(),
                container.clone(),
            ],
        ));
        form.undo.push(Command::new([
            Word::from("docker"),
            "update".into(),
            run_flag.into(),
            undo_value,
            container,
        ]));
        form.notes.push(format!(
            "for a new container: {} ...",
            Command::new(["docker", "run", run_flag, &value]).shown()
        ));
    }
    Ok(form)
}

/// The kubelet's static CPU manager and a Guaranteed pod with integer CPUs.
pub fn kubernetes(dir: &str, changes: &[&Change], ctx: &Context) -> Result<Form, String> {
    let mut form = Form::empty(Format::Kubernetes, Needs::NodeDrain);
    let Some(cpus) = changes.iter().find_map(|c| match c {
        Change::Pin { cpus, .. } => Some(cpus.clone()),
        _ => None,
    }) else {
        return Ok(form);
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
    let n = count(&cpus)?.to_string();
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
            .push("the node is a placeholder: the result names no host".into());
    }
    Ok(form)
}

/// The node drain, the kubelet's restart with the static policy, the pod, and their undo.
fn kubernetes_commands(form: &mut Form, dir: &str, install: &str, ctx: &Context) {
    let node = if ctx.hostname.is_empty() {
        Word::placeholder("the Kubernetes node's name (the result names no host)")
    } else {
        Word::from(&ctx.hostname)
    };
    let kubectl = |args: &[&str], node: &Word| {
        let mut argv: Vec<Word> = vec!["kubectl".into()];
        argv.extend(args.iter().take(1).map(|a| Word::from(*a)));
        argv.push(node.clone());
        argv.extend(args.iter().skip(1).map(|a| Word::from(*a)));
        Command::new(argv)
    };
    let drain = kubectl(
        &["drain", "--ignore-daemonsets", "--delete-emptydir-data"],
        &node,
    );
    let restart = [
        Command::new(["systemctl", "stop", "kubelet"]),
        Command::new(["rm", "-f", "/var/lib/kubelet/cpu_manager_state"]),
    ];
    let pod = format!("{dir}/pod.yaml");
    form.apply.push(drain.clone());
    form.apply.extend(restart.iter().cloned());
    form.apply.push(super::kernel::install_file(
        &format!("{dir}/kubelet-config.yaml"),
        install,
    ));
    form.apply
        .push(Command::new(["systemctl", "start", "kubelet"]));
    form.apply.push(kubectl(&["uncordon"], &node));
    form.apply.push(Command::new([
        Word::from("kubectl"),
        "apply".into(),
        "-f".into(),
        // The file holds IMAGE and MEMORY: applied as written, it would ask for an image
        // called IMAGE.
        Word::placeholder(format!(
            "{pod}, once its IMAGE and MEMORY are the workload's"
        )),
    ]));
    form.verify.push(Command::new([
        "grep",
        "-Fq",
        "\"policyName\":\"static\"",
        "/var/lib/kubelet/cpu_manager_state",
    ]));
    form.verify.push(Command::output_is(
        "Guaranteed",
        [
            "kubectl",
            "get",
            "pod",
            "cpulab-exclusive",
            "-o",
            "jsonpath={.status.qosClass}",
        ],
    ));
    form.undo
        .push(Command::new(["kubectl", "delete", "-f", pod.as_str()]));
    form.undo.push(drain);
    form.undo.extend(restart);
    form.undo.push(Command::new(["rm", "-f", "--", install]));
    form.undo
        .push(Command::new(["systemctl", "start", "kubelet"]));
    form.undo.push(kubectl(&["uncordon"], &node));
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
        let f = docker("01-pin/containers", &[&c], &ctx).unwrap();
        assert_eq!(
            f.apply[0].line().unwrap(),
            "docker update --cpuset-cpus 0 0123456789ab"
        );
        assert_eq!(
            f.undo[0].line().unwrap(),
            "docker update --cpuset-cpus 0-15 0123456789ab"
        );
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
        )
        .unwrap();
        assert_eq!(f.apply[0].line(), None, "no container: nothing to run");
        assert_eq!(
            f.apply[0].placeholders().collect::<Vec<_>>(),
            ["the container that runs the workload"]
        );
        assert!(f.notes[0].starts_with("the container is a placeholder"));
        // Online CPUs not recorded: undo has a placeholder, not a runnable guess.
        let f = docker("01-pin/containers", &[&c], &Context::default()).unwrap();
        assert_eq!(f.undo[0].line(), None);
    }

    #[test]
    fn a_quota_is_docker_nanocpus_exactly() {
        assert_eq!(nanocpus("0.70"), Ok(700_000_000));
        assert_eq!(nanocpus("1.5"), Ok(1_500_000_000));
        assert_eq!(nanocpus("2"), Ok(2_000_000_000));
        assert_eq!(nanocpus(".25"), Ok(250_000_000));
        assert_eq!(nanocpus("0.000000001"), Ok(1));
        for bad in ["", ".", "abc", "1.2.3", "-1", "0.0000000001", "1e3", " 1"] {
            assert!(nanocpus(bad).is_err(), "{bad}");
        }
        // Every percent docker's verify compares: the --cpus text and the NanoCpus agree.
        for p in [1, 7, 70, 99, 100, 150, 333] {
            assert_eq!(
                nanocpus(&cpus_of_percent(p)),
                Ok(u64::from(p) * 10_000_000),
                "{p}"
            );
        }
        let c = Change::CpuQuota {
            percent: 70,
            workload: Workload {
                cgroups: vec!["/docker/0123456789abcdef0123".into()],
                ..Workload::default()
            },
        };
        let f = docker("01-quota/containers", &[&c], &Context::default()).unwrap();
        assert_eq!(
            f.apply[0].line().unwrap(),
            "docker update --cpus 0.70 0123456789ab"
        );
        assert_eq!(
            f.verify[0].runnable().unwrap()[4],
            "700000000",
            "the NanoCpus docker stores for 0.70"
        );
        assert_eq!(
            f.undo[0].line().unwrap(),
            "docker update --cpus 0 0123456789ab"
        );
    }

    #[test]
    fn the_kubelet_gets_the_static_policy_and_the_pod_integer_guaranteed_cpus() {
        let ctx = Context {
            online_cpus: Some("0-3".into()),
            smt: Some(true),
            hostname: "node1".into(),
            ..Context::default()
        };
        let f = kubernetes("01-pin/kubernetes", &[&pin(&[])], &ctx).unwrap();
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
        assert!(
            f.apply[0]
                .line()
                .unwrap()
                .starts_with("kubectl drain node1 ")
        );
        assert!(f.apply.contains(&Command::new([
            "rm",
            "-f",
            "/var/lib/kubelet/cpu_manager_state"
        ])));
        // The pod file holds placeholders, so applying it is not runnable as written.
        let apply_pod = f.apply.last().unwrap();
        assert_eq!(apply_pod.line(), None);
        assert!(
            apply_pod
                .placeholders()
                .any(|p| p.starts_with("01-pin/kubernetes/pod.yaml, once")),
            "{apply_pod:?}"
        );
    }

    #[test]
    fn a_pin_that_names_no_cpu_is_no_pod_size() {
        let c = Change::Pin {
            cpus: "x".into(),
            workload: Workload::default(),
        };
        let e = kubernetes("01-pin/kubernetes", &[&c], &Context::default()).unwrap_err();
        assert!(e.contains("`x` names no CPU"), "{e}");
        assert_eq!(count("0-3,8"), Ok(5));
    }
}
