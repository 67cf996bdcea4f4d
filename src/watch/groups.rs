//! Process groups: what a process is called when the whole machine is watched.
//!
//! An operator knows a host's work by its systemd units (`postgresql.service`), its containers
//! (a docker, podman, containerd or cri-o id, a Kubernetes pod) and, for the rest, its command
//! names. All but the last are written in the process's cgroup v2 path (`/proc/PID/cgroup`,
//! the `0::` line), so naming a group is a pure function of that path and the command name
//! ([`group_name`]), tested on paths copied from real systems.
//!
//! The path is read from its innermost component outwards, and the first component that names
//! a container or a unit wins (`--group-by auto`). Innermost first, because a container lives
//! inside units (rootless podman under `user@1000.service`) and a container's own cgroup is a
//! systemd scope (`docker-<id>.scope`) that means nothing to an operator as a unit name.
//! A process in no unit and no container (the root cgroup, a plain slice) is named by its
//! command. Ids are cut to 12 characters, as `docker ps` shows them.
//!
//! The same module parses the two /proc files the ranking reads per process and thread: `stat`
//! (the `PF_KTHREAD` flag that keeps kernel threads unnamed, and the command) and `status`
//! (voluntary context switches: each is a sleep, so a wakeup to come).

use crate::wakeups::GroupBy;

/// `task_struct.flags` bit of a kernel thread (include/linux/sched.h).
pub const PF_KTHREAD: u64 = 0x0020_0000;
/// Characters of a container id kept in a label.
const ID_CHARS: usize = 12;

/// The name of the group of a process whose cgroup v2 path is `path` (as `/proc/PID/cgroup`
/// gives it, leading slash or not) and whose command is `comm`, grouped `by`.
pub fn group_name(path: &str, comm: &str, by: GroupBy) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let found = match by {
        GroupBy::Comm => None,
        GroupBy::Cgroup => return format!("/{}", parts.join("/")),
        GroupBy::Container => container(&parts),
        GroupBy::Unit => innermost_unit(&parts).map(str::to_string),
        GroupBy::Auto => (0..parts.len())
            .rev()
            .find_map(|i| container(&parts[..=i]).or_else(|| unit(parts[i]).map(str::to_string))),
    };
    found.unwrap_or_else(|| comm.to_string())
}

use crate::probe::cgroup::unit_component as unit;

fn innermost_unit<'a>(parts: &[&'a str]) -> Option<&'a str> {
    parts.iter().rev().find_map(|p| unit(p))
}

/// The container whose cgroup is the last of `parts` (the ones before it are its ancestors),
/// if it is one: `runtime/id`, or `k8s/pod-uid/id` inside a Kubernetes pod.
fn container(parts: &[&str]) -> Option<String> {
    let (last, above) = parts.split_last()?;
    let id = container_id(last, above.last().copied())?;
    let short: String = id.1.chars().take(ID_CHARS).collect();
    Some(match above.iter().rev().find_map(|p| pod_uid(p)) {
        Some(pod) => format!("k8s/{pod}/{short}"),
        None => format!("{}/{short}", id.0),
    })
}

/// (runtime, id) of a container's cgroup component, given its parent component.
fn container_id<'a>(part: &'a str, parent: Option<&str>) -> Option<(&'static str, &'a str)> {
    const SCOPES: [(&str, &str); 6] = [
        ("docker-", "docker"),
        ("libpod-conmon-", "podman"),
        ("libpod-", "podman"),
        ("cri-containerd-", "containerd"),
        ("crio-conmon-", "crio"),
        ("crio-", "crio"),
    ];
    let bare = part.strip_suffix(".scope").unwrap_or(part);
    for (prefix, runtime) in SCOPES {
        if let Some(id) = bare.strip_prefix(prefix).filter(|id| is_id(id)) {
            return Some((runtime, id));
        }
    }
    // cgroupfs drivers: the bare id under `docker/` or a pod's directory.
    if is_id(part) {
        let runtime = match parent {
            Some("docker") => "docker",
            Some(p) if pod_uid(p).is_some() => "container",
            _ => return None,
        };
        return Some((runtime, part));
    }
    None
}

/// A container id: at least 12 hexadecimal digits.
fn is_id(s: &str) -> bool {
    s.len() >= ID_CHARS && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The pod uid of a Kubernetes pod's cgroup component: `pod<uid>` (cgroupfs driver) or
/// `kubepods[-qos]-pod<uid>.slice` (systemd driver, which writes the uid's dashes as `_`).
fn pod_uid(part: &str) -> Option<String> {
    let bare = part.strip_suffix(".slice").unwrap_or(part);
    let uid = match bare.rfind("-pod") {
        Some(i) if bare.starts_with("kubepods") => &bare[i + 4..],
        _ => bare.strip_prefix("pod")?,
    };
    let ok = uid.len() >= 32
        && uid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    ok.then(|| uid.replace('_', "-"))
}

/// The cgroup v2 path in a `/proc/PID/cgroup` file (read by the probe's one parser of it):
/// the unified hierarchy's line, `0::PATH`.
pub fn cgroup_path(text: &str) -> Option<String> {
    crate::probe::cgroup::parse_proc_cgroup(text)
        .into_iter()
        .find(|m| m.hierarchy == 0 && m.controllers.is_empty())
        .map(|m| m.path)
}

/// What the ranking reads of `/proc/PID/stat`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    pub ppid: i32,
    pub flags: u64,
}

impl Stat {
    /// A kernel thread (its flag, or a child of kthreadd, pid 2): never named.
    pub fn kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.ppid == 2
    }
}

/// `/proc/PID/stat`: the command sits in parentheses and may hold spaces and parentheses
/// itself, so the fields after it are counted from the last `)`: state (3), ppid (4), ... flags
/// (9).
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    Some(Stat {
        comm,
        ppid: rest.get(1)?.parse().ok()?,
        flags: rest.get(6)?.parse().ok()?,
    })
}

/// `voluntary_ctxt_switches` of a `/proc/PID/task/TID/status`, as the file's bytes (its
/// `Name:` may be any bytes). Lines are searched from the end, where the kernel writes it.
pub fn voluntary_switches(status: &[u8]) -> Option<u64> {
    let v = status
        .rsplit(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"voluntary_ctxt_switches:"))?;
    std::str::from_utf8(v.trim_ascii()).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOCKER_ID: &str = "3f2a9c1d7e5b8a6f4c2d1e0b9a8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c";

    fn auto(path: &str) -> String {
        group_name(path, "comm", GroupBy::Auto)
    }

    #[test]
    fn systemd_services_and_sessions_are_named_by_their_unit() {
        assert_eq!(
            auto("/system.slice/postgresql.service"),
            "postgresql.service"
        );
        assert_eq!(
            auto("system.slice/postgresql@15-main.service"),
            "postgresql@15-main.service"
        );
        assert_eq!(
            auto("/user.slice/user-1000.slice/session-3.scope"),
            "session-3.scope"
        );
        assert_eq!(
            auto(
                "/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-firefox-4321.scope"
            ),
            "app-gnome-firefox-4321.scope"
        );
        assert_eq!(auto("/init.scope"), "init.scope");
        // A process in a sub-cgroup of a service (nginx's delegated tree) belongs to it.
        assert_eq!(auto("/system.slice/nginx.service/workers"), "nginx.service");
        assert_eq!(
            auto("/system.slice/containerd.service"),
            "containerd.service"
        );
    }

    #[test]
    fn no_unit_and_no_container_is_the_command_name() {
        assert_eq!(auto("/"), "comm");
        assert_eq!(auto(""), "comm");
        assert_eq!(auto("/system.slice"), "comm");
        assert_eq!(
            auto("/process_api/0ff13084b5020c9aaa04f19b0a2775db"),
            "comm"
        );
    }

    #[test]
    fn docker_containers_under_both_drivers() {
        let systemd = format!("/system.slice/docker-{DOCKER_ID}.scope");
        assert_eq!(auto(&systemd), "docker/3f2a9c1d7e5b");
        assert_eq!(auto(&format!("/docker/{DOCKER_ID}")), "docker/3f2a9c1d7e5b");
        // A unit name, asked for: the scope itself.
        assert_eq!(
            group_name(&systemd, "postgres", GroupBy::Unit),
            format!("docker-{DOCKER_ID}.scope")
        );
        assert_eq!(
            group_name(&systemd, "postgres", GroupBy::Container),
            "docker/3f2a9c1d7e5b"
        );
        assert_eq!(group_name(&systemd, "postgres", GroupBy::Comm), "postgres");
        assert_eq!(group_name(&systemd, "postgres", GroupBy::Cgroup), systemd);
    }

    #[test]
    fn podman_root_rootless_and_its_monitor() {
        assert_eq!(
            auto(&format!(
                "/machine.slice/libpod-{DOCKER_ID}.scope/container"
            )),
            "podman/3f2a9c1d7e5b"
        );
        assert_eq!(
            auto(&format!("/machine.slice/libpod-conmon-{DOCKER_ID}.scope")),
            "podman/3f2a9c1d7e5b"
        );
        // Rootless: the container, not the user's manager it runs under.
        assert_eq!(
            auto(&format!(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{DOCKER_ID}.scope"
            )),
            "podman/3f2a9c1d7e5b"
        );
        assert_eq!(
            group_name(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/podman-pause-1a2b3c4d.scope",
                "catatonit",
                GroupBy::Container
            ),
            "catatonit"
        );
    }

    #[test]
    fn kubernetes_pods_under_the_systemd_and_cgroupfs_drivers() {
        let uid = "8d3f1c6e-0b1d-4c1e-9a7e-2d3f4b5c6d7e";
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{DOCKER_ID}.scope",
            uid.replace('-', "_")
        );
        assert_eq!(auto(&systemd), format!("k8s/{uid}/3f2a9c1d7e5b"));
        let guaranteed = format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-{DOCKER_ID}.scope",
            uid.replace('-', "_")
        );
        assert_eq!(auto(&guaranteed), format!("k8s/{uid}/3f2a9c1d7e5b"));
        let cgroupfs = format!("/kubepods/besteffort/pod{uid}/{DOCKER_ID}");
        assert_eq!(auto(&cgroupfs), format!("k8s/{uid}/3f2a9c1d7e5b"));
        // The pod's own cgroup holds no process of its own; if asked, it is no container.
        assert_eq!(auto(&format!("/kubepods/besteffort/pod{uid}")), "comm");
        // Outside Kubernetes, containerd and cri-o name their runtime.
        assert_eq!(
            auto(&format!("/system.slice/cri-containerd-{DOCKER_ID}.scope")),
            "containerd/3f2a9c1d7e5b"
        );
        assert_eq!(
            auto(&format!("/machine.slice/crio-conmon-{DOCKER_ID}.scope")),
            "crio/3f2a9c1d7e5b"
        );
    }

    #[test]
    fn a_short_or_non_hex_suffix_is_not_a_container() {
        assert_eq!(
            auto("/system.slice/docker-compose.scope"),
            "docker-compose.scope"
        );
        assert_eq!(auto("/docker/abc"), "comm");
        assert_eq!(auto("/system.slice/docker.service"), "docker.service");
    }

    #[test]
    fn the_cgroup_file_gives_its_v2_line() {
        let hybrid = "12:cpu,cpuacct:/system.slice/a.service\n0::/system.slice/a.service\n";
        assert_eq!(
            cgroup_path(hybrid).as_deref(),
            Some("/system.slice/a.service")
        );
        assert_eq!(cgroup_path("0::/\n").as_deref(), Some("/"));
        assert_eq!(cgroup_path("4:memory:/x\n"), None);
    }

    #[test]
    fn stat_gives_flags_ppid_and_a_command_with_spaces_and_parentheses() {
        let kworker =
            "2563 (kworker/0:2-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 20 0 1 0 5305 0 0";
        let s = parse_stat(kworker).unwrap();
        assert_eq!(
            (s.comm.as_str(), s.ppid, s.flags),
            ("kworker/0:2-events", 2, 69238880)
        );
        assert!(s.kernel_thread(), "69238880 has bit 0x200000");
        let odd = "812 (a) b (c) S 1 812 812 0 -1 4194560 100 0 0 0";
        let s = parse_stat(odd).unwrap();
        assert_eq!((s.comm.as_str(), s.ppid, s.flags), ("a) b (c", 1, 4194560));
        assert!(!s.kernel_thread(), "4194560 is a user process's flags");
        let kthreadd = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0";
        assert!(parse_stat(kthreadd).unwrap().kernel_thread());
        assert_eq!(parse_stat("812 (x) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn voluntary_switches_are_read_from_status() {
        let status =
            b"Name:\tpostgres\nvoluntary_ctxt_switches:\t1523\nnonvoluntary_ctxt_switches:\t12\n";
        assert_eq!(voluntary_switches(status), Some(1523));
        assert_eq!(voluntary_switches(b"Name:\tx\n"), None);
        // A name that is not UTF-8 does not hide the count.
        let odd = b"Name:\t\xff\xfe\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t1\n";
        assert_eq!(voluntary_switches(odd), Some(7));
        assert_eq!(
            voluntary_switches(b"voluntary_ctxt_switches:\tmany\n"),
            None
        );
    }
}
