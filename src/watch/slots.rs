//! Which processes are watched targets, under which label, in which slot.
//!
//! Targets are named the ways operators name them (command names, process ids, cgroups and
//! cgroup globs such as `system.slice/*.service`); labels are names, never pids: a pid target is
//! labelled by its command name, a cgroup by its path under the cgroup root. A label keeps its
//! slot for the life of the source, so a restarted service (new pids, same cgroup) keeps its
//! series. At most `max_targets` labels get a slot; the rest share the `other` slot and are
//! counted once each in `targets_dropped`. [`Resolver::members`] is re-read as processes and
//! cgroups come and go.
//!
//! With no target named, the targets follow the host instead (`crate::watch::follow`): the
//! most active process groups hold the slots ([`Slots::ranked`]) and give them up when the
//! ranking drops them or they end.

use super::follow::Follow;
use crate::wakeups::SourceOptions;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The label of targets beyond the cap (and, watching the whole machine, of processes not yet
/// resolved).
pub const OTHER: &str = "other";
/// Distinct dropped labels remembered (so each counts once); beyond this every drop counts.
const DROPPED_REMEMBERED: usize = 4096;

/// Labels and their slots: slot `i` is held by `labels[i]`, slot `capacity` is [`OTHER`].
///
/// Named targets (`Slots::new`) take slots first come and keep them. Targets that follow the
/// host (`Slots::ranked`) give theirs up when the ranking drops them; a slot given up is
/// settled (`Slots::settle`, once its last counts are carried to the label that left it, see
/// `crate::watch::ledger`) before another label takes it, so it has twice as many slots as
/// labels: the spares hold the slots given up since the last settling.
#[derive(Clone, Debug, Default)]
pub struct Slots {
    max: usize,
    capacity: usize,
    labels: Vec<Option<String>>,
    index: HashMap<String, u32>,
    /// Given up, not yet settled: slot -> the label that left it.
    leaving: BTreeMap<u32, String>,
    ranked: bool,
    dropped: HashSet<String>,
    dropped_count: u64,
}

impl Slots {
    /// At most `max_targets` labels, first come, each keeping its slot.
    pub fn new(max_targets: usize) -> Self {
        Self {
            max: max_targets,
            capacity: max_targets,
            ..Self::default()
        }
    }

    /// At most `max_targets` labels at once, chosen by a ranking that changes them.
    pub fn ranked(max_targets: usize) -> Self {
        Self {
            max: max_targets,
            capacity: 2 * max_targets,
            ranked: true,
            ..Self::default()
        }
    }

    /// Whether labels give their slots up (targets that follow the host).
    pub fn is_ranked(&self) -> bool {
        self.ranked
    }

    /// The `other` slot.
    pub fn other(&self) -> u32 {
        self.capacity as u32
    }

    /// Slots in all, `other` included.
    pub fn count(&self) -> u32 {
        self.capacity as u32 + 1
    }

    /// The slot of `label`: its own (given on first sight while there is room), else `other`
    /// (a label first dropped here counts in [`Slots::dropped`], unless ranked: there the
    /// ranking keeps the rest in `other` on purpose).
    pub fn slot(&mut self, label: &str) -> u32 {
        if label == OTHER {
            return self.other();
        }
        if let Some(s) = self.index.get(label) {
            return *s;
        }
        // A label back before its old slot was settled takes it back: its counts go on there.
        let back = self
            .leaving
            .iter()
            .find(|(_, l)| *l == label)
            .map(|(s, _)| *s);
        let free = (0..self.capacity as u32).find(|s| {
            self.labels.get(*s as usize).is_none_or(Option::is_none)
                && !self.leaving.contains_key(s)
        });
        if let Some(s) = back.or(free).filter(|_| self.index.len() < self.max) {
            self.leaving.remove(&s);
            if self.labels.len() <= s as usize {
                self.labels.resize(s as usize + 1, None);
            }
            self.labels[s as usize] = Some(label.to_string());
            self.index.insert(label.to_string(), s);
            return s;
        }
        if self.ranked {
            return self.other();
        }
        if self.dropped.len() < DROPPED_REMEMBERED {
            if self.dropped.insert(label.to_string()) {
                self.dropped_count += 1;
            }
        } else if !self.dropped.contains(label) {
            self.dropped_count += 1;
        }
        self.other()
    }

    /// Ranked: the labels not in `keep` give their slots up (to be settled).
    pub fn release_all_but(&mut self, keep: &HashSet<&str>) {
        if !self.ranked {
            return;
        }
        for (s, l) in self.labels.iter_mut().enumerate() {
            if let Some(label) = l.take_if(|l| !keep.contains(l.as_str())) {
                self.index.remove(&label);
                self.leaving.insert(s as u32, label);
            }
        }
    }

    /// Slots given up and not yet settled, with the label that left each.
    pub fn leaving(&self) -> Vec<(u32, String)> {
        self.leaving.iter().map(|(s, l)| (*s, l.clone())).collect()
    }

    /// `slot`'s last counts are carried to the label that left it: another may take it.
    pub fn settle(&mut self, slot: u32) {
        self.leaving.remove(&slot);
    }

    /// The labels with their own slot, each with its slot, in slot order.
    pub fn held(&self) -> Vec<(String, u32)> {
        (self.labels.iter().enumerate())
            .filter_map(|(s, l)| Some((l.clone()?, s as u32)))
            .collect()
    }

    /// Labels that found no slot because the cap was reached.
    pub fn dropped(&self) -> u64 {
        self.dropped_count
    }
}

/// Whether `name` matches `pattern` (`*` any run of characters, `?` one character).
pub fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        // A `*` is tried first: taken as a literal where the name has a `*` too, it would never
        // be backtracked to (`b?*?` would not match `b**a?`).
        if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The cgroup v2 hierarchy under `root`: `sys/fs/cgroup` on a unified host, its `unified`
/// directory on a hybrid one (cgroup v1 controllers beside a v2 tree).
pub fn cgroup_root(root: &Path) -> PathBuf {
    let unified = root.join("sys/fs/cgroup");
    let hybrid = unified.join("unified");
    if !unified.join("cgroup.procs").is_file() && hybrid.join("cgroup.procs").is_file() {
        hybrid
    } else {
        unified
    }
}

/// A cgroup pattern as given (`system.slice/*.service`, or under `/sys/fs/cgroup/`), relative
/// to the cgroup root, without leading or trailing slashes.
pub fn relative_cgroup(pattern: &str) -> String {
    pattern
        .trim()
        .trim_start_matches("/sys/fs/cgroup/unified")
        .trim_start_matches("/sys/fs/cgroup")
        .trim_matches('/')
        .to_string()
}

/// Checks a cgroup pattern against the cgroup tree under `cgroup_root` before anything is
/// attached: a path without wildcards must exist, and a glob's directory before its first
/// wildcard must (its matches may come and go). The error is the one line to show.
pub fn check_cgroup(cgroup_root: &Path, pattern: &str) -> Result<(), String> {
    let rel = relative_cgroup(pattern);
    let fixed: Vec<&str> = rel
        .split('/')
        .take_while(|s| !s.contains(['*', '?']))
        .collect();
    let dir = cgroup_root.join(fixed.join("/"));
    let literal = fixed.len() == rel.split('/').count();
    if !dir.join("cgroup.procs").is_file() {
        return Err(format!(
            "--cgroup {pattern}: {} is not a cgroup{}; give a path under {} (see `systemd-cgls`)",
            dir.display(),
            if literal {
                ""
            } else {
                " (the glob's fixed part)"
            },
            cgroup_root.display()
        ));
    }
    Ok(())
}

/// The cgroups under `cgroup_root` matching `pattern` (relative, segment by segment), each with
/// its relative path.
pub fn expand_cgroup(cgroup_root: &Path, pattern: &str) -> Vec<(String, PathBuf)> {
    let rel = relative_cgroup(pattern);
    let mut found = vec![(String::new(), cgroup_root.to_path_buf())];
    for seg in rel.split('/').filter(|s| !s.is_empty()) {
        let mut next = Vec::new();
        for (label, dir) in found {
            let join = |name: &str| {
                if label.is_empty() {
                    name.to_string()
                } else {
                    format!("{label}/{name}")
                }
            };
            if !seg.contains(['*', '?']) {
                let d = dir.join(seg);
                if d.is_dir() {
                    next.push((join(seg), d));
                }
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if e.path().is_dir() && wildcard(seg, &name) {
                    next.push((join(&name), e.path()));
                }
            }
        }
        found = next;
    }
    found.retain(|(l, d)| !l.is_empty() && d.join("cgroup.procs").is_file());
    found.sort();
    found
}

/// Process ids in a cgroup and every cgroup below it (a container's slice holds its processes
/// in sub-cgroups), at most 64 levels down.
fn procs_below(dir: &Path, depth: usize, out: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(super::targets::parse_procs(&text));
    }
    if depth >= 64 {
        return;
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                procs_below(&e.path(), depth + 1, out);
            }
        }
    }
}

/// Reads who the targets are now, under a root (`/` live, a fixture tree in tests).
#[derive(Clone, Debug)]
pub struct Resolver {
    root: PathBuf,
    opts: SourceOptions,
    /// With no target named: the ranking of the host's process groups.
    follow: Option<Follow>,
}

impl Resolver {
    pub fn new(root: &Path, opts: &SourceOptions) -> Self {
        let mut r = Self {
            root: root.to_path_buf(),
            opts: opts.clone(),
            follow: None,
        };
        if r.whole_machine() {
            let max = opts.max_targets.clamp(1, 1024);
            r.follow = Some(Follow::new(root, max, opts.group_by));
        }
        r
    }

    /// True when no target is named: every process is watched, the most active groups under
    /// their own label (`crate::watch::follow`), the rest as `other`.
    pub fn whole_machine(&self) -> bool {
        self.opts.comms.is_empty() && self.opts.pids.is_empty() && self.opts.cgroups.is_empty()
    }

    /// The labels known before any process is seen: each command name, and each cgroup path
    /// without wildcards, in the order given. A source gives them their slots at once, so their
    /// series exist (at zero) from the first scrape and Prometheus' `increase` sees a target's
    /// first wakeups instead of taking them for the series' starting value.
    pub fn named_labels(&self) -> Vec<String> {
        let cgroups = self
            .opts
            .cgroups
            .iter()
            .filter(|p| !p.contains(['*', '?']))
            .map(|p| relative_cgroup(p))
            .filter(|l| !l.is_empty());
        let mut out: Vec<String> = Vec::new();
        for l in cgroups.chain(self.opts.comms.iter().cloned()) {
            if !out.contains(&l) {
                out.push(l);
            }
        }
        out
    }

    fn comm(&self, pid: i32) -> Option<String> {
        let c = std::fs::read_to_string(self.root.join("proc").join(pid.to_string()).join("comm"));
        c.ok().map(|c| c.trim().to_string())
    }

    fn all_pids(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir(self.root.join("proc")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect()
    }

    /// Every watched process now, with its label (a process named by two targets takes the
    /// first: cgroups, then pids, then command names). With no target named, the processes of
    /// the groups the ranking names now (one refresh of it: call once per interval).
    pub fn members(&mut self) -> BTreeMap<i32, String> {
        if let Some(f) = &mut self.follow {
            return f.refresh();
        }
        let mut out = BTreeMap::new();
        let cgroup_root = cgroup_root(&self.root);
        for pattern in &self.opts.cgroups {
            for (label, dir) in expand_cgroup(&cgroup_root, pattern) {
                let mut pids = Vec::new();
                procs_below(&dir, 0, &mut pids);
                for pid in pids {
                    out.entry(pid).or_insert_with(|| label.clone());
                }
            }
        }
        for &pid in &self.opts.pids {
            if let Some(c) = self.comm(pid) {
                out.entry(pid).or_insert(c);
            }
        }
        if !self.opts.comms.is_empty() {
            for pid in self.all_pids() {
                if out.contains_key(&pid) {
                    continue;
                }
                if let Some(c) = self.comm(pid)
                    && self.opts.comms.contains(&c)
                {
                    out.insert(pid, c);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_labels_are_comms_and_plain_cgroups() {
        let opts = SourceOptions {
            comms: vec!["postgres".into(), "pgbench".into(), "postgres".into()],
            cgroups: vec![
                "/sys/fs/cgroup/system.slice/nginx.service/".into(),
                "system.slice/*.service".into(),
            ],
            ..Default::default()
        };
        let r = Resolver::new(Path::new("/nonexistent"), &opts);
        assert_eq!(
            r.named_labels(),
            ["system.slice/nginx.service", "postgres", "pgbench"]
        );
        let all = Resolver::new(Path::new("/nonexistent"), &SourceOptions::default());
        assert!(all.named_labels().is_empty());
    }

    #[test]
    fn slots_are_kept_and_capped() {
        let mut s = Slots::new(2);
        assert_eq!(s.slot("postgres"), 0);
        assert_eq!(s.slot("pgbench"), 1);
        assert_eq!(s.slot("postgres"), 0, "a label keeps its slot");
        assert_eq!(s.slot("nginx"), 2, "beyond the cap: other");
        assert_eq!(s.slot("nginx"), 2);
        assert_eq!(s.slot("redis"), 2);
        assert_eq!(s.dropped(), 2, "each dropped label counts once");
        assert_eq!(s.slot(OTHER), s.other());
        let held: Vec<String> = s.held().into_iter().map(|(l, _)| l).collect();
        assert_eq!(held, ["postgres", "pgbench"]);
        assert_eq!(s.count(), 3);
    }

    #[test]
    fn ranked_slots_are_given_up_and_taken_again_only_once_settled() {
        let mut s = Slots::ranked(2);
        assert_eq!(
            (s.count(), s.other()),
            (5, 4),
            "twice the labels, and other"
        );
        assert_eq!(s.slot("a"), 0);
        assert_eq!(s.slot("b"), 1);
        assert_eq!(s.slot("c"), s.other(), "two labels at most");
        assert_eq!(s.dropped(), 0, "the rest is other on purpose, not dropped");
        s.release_all_but(&HashSet::from(["b"]));
        assert_eq!(s.leaving(), [(0, "a".to_string())]);
        assert_eq!(s.slot("c"), 2, "a spare, not a's unsettled slot");
        s.release_all_but(&HashSet::from(["b"]));
        assert_eq!(s.slot("d"), 3);
        s.release_all_but(&HashSet::from(["d"]));
        assert_eq!(s.slot("e"), s.other(), "every spare is unsettled");
        assert_eq!(s.slot("b"), 1, "back before settling: its own slot again");
        s.settle(0);
        assert_eq!(s.held(), [("b".to_string(), 1), ("d".to_string(), 3)]);
        s.release_all_but(&HashSet::from(["d"]));
        assert_eq!(s.slot("e"), 0, "settled: free again");
        let mut named = Slots::new(1);
        named.slot("a");
        named.release_all_but(&HashSet::new());
        assert_eq!(named.held().len(), 1, "named targets keep their slots");
    }

    #[test]
    fn wildcards_match_like_a_shell() {
        assert!(wildcard("*.service", "postgresql.service"));
        assert!(wildcard("*.service", ".service"));
        assert!(!wildcard("*.service", "postgresql.socket"));
        assert!(wildcard("docker-*.scope", "docker-3f2a.scope"));
        assert!(wildcard("a?c", "abc"));
        assert!(!wildcard("a?c", "ac"));
        assert!(wildcard("*", ""));
        assert!(wildcard("exact", "exact"));
        assert!(!wildcard("exact", "exact2"));
        // Found by tests/parsers.rs: a `*` facing a `*` in the name was taken literally and
        // never backtracked to.
        assert!(wildcard("b?*?", "b**a?"));
        assert!(wildcard("*x", "*ax"));
    }

    fn cgroup_tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("sys/fs/cgroup");
        for (dir, procs) in [
            ("", "1\n"),
            ("system.slice", ""),
            ("system.slice/postgresql.service", "100\n101\n"),
            ("system.slice/postgresql.service/sub", "102\n"),
            ("system.slice/nginx.service", "200\n"),
            ("system.slice/cron.socket", "300\n"),
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            std::fs::write(root.join(dir).join("cgroup.procs"), procs).unwrap();
        }
        for (pid, comm) in [
            (100, "postgres"),
            (101, "postgres"),
            (200, "nginx"),
            (7, "x"),
        ] {
            let d = t.path().join("proc").join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
        }
        t
    }

    #[test]
    fn cgroup_globs_expand_and_label_by_path() {
        let t = cgroup_tree();
        let root = t.path().join("sys/fs/cgroup");
        let got: Vec<String> = expand_cgroup(&root, "system.slice/*.service")
            .into_iter()
            .map(|(l, _)| l)
            .collect();
        assert_eq!(
            got,
            [
                "system.slice/nginx.service",
                "system.slice/postgresql.service"
            ]
        );
        assert_eq!(
            expand_cgroup(&root, "/sys/fs/cgroup/system.slice/nginx.service/").len(),
            1
        );
        assert!(check_cgroup(&root, "system.slice/*.service").is_ok());
        assert!(check_cgroup(&root, "nope.slice/*.service").is_err());
        assert!(check_cgroup(&root, "system.slice/missing.service").is_err());
        let mut r = Resolver::new(
            t.path(),
            &SourceOptions {
                cgroups: vec!["system.slice/*.service".into()],
                pids: vec![7],
                ..Default::default()
            },
        );
        let m = r.members();
        assert_eq!(m[&100], "system.slice/postgresql.service");
        assert_eq!(
            m[&102], "system.slice/postgresql.service",
            "sub-cgroups count"
        );
        assert_eq!(m[&200], "system.slice/nginx.service");
        assert_eq!(m[&7], "x", "a pid is labelled by its name");
        assert!(!m.contains_key(&300));
    }

    #[test]
    fn comms_and_the_whole_machine_label_by_name() {
        let t = cgroup_tree();
        let mut r = Resolver::new(
            t.path(),
            &SourceOptions {
                comms: vec!["postgres".into()],
                ..Default::default()
            },
        );
        assert_eq!(r.members().keys().copied().collect::<Vec<_>>(), [100, 101]);
        let mut all = Resolver::new(t.path(), &SourceOptions::default());
        assert!(all.whole_machine());
        assert!(
            all.members().is_empty(),
            "the ranking's first refresh is a baseline"
        );
    }
}
