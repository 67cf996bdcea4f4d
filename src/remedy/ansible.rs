//! One Ansible playbook for every remedy, each under its own tag, with its undo under
//! `ID-undo`. Every task also carries the `never` tag, so a run without `--tags` deploys
//! nothing: a finding's remedies are alternatives and the operator names the one to deploy.
//!
//! It deploys each remedy's native files (the systemd drop-ins, `modprobe.d`, `sysctl.d` and
//! GRUB snippets, not the tuned, container or libvirt forms), sets a module parameter now only
//! when it differs (so a second run changes nothing), and reloads through handlers. It is built
//! from the same forms and commands as the files: the boot loader is the one the cmdline form
//! chose for the host (grubby's own command, or the snippet and `update-grub` or
//! `grub2-mkconfig`), and a value it replaces is kept beside the file it installs (once) for
//! the undo to put back. Every deploy task has its undo; a file with a placeholder fails its
//! deploy and its undo says there is nothing to undo. The
//! variable `cpulab_root` (default empty) puts every path below another root, for staging an
//! image; the handlers then do nothing, since they would act on the running system.
//!
//! Written as data with serde_yaml_ng, so the YAML is well-formed by construction.

use super::kernel::{Bootloader, saved_path, sysctl_path};
use super::{Command, Context, Deployment, File, Format, Plan};
use crate::doctor::findings::{Change, Site};
use serde_json::{Value, json};

const LIVE: &str = "cpulab_root | default('') == ''";

/// The handler that writes GRUB's configuration again, with the host's tool.
const GRUB_HANDLER: &str = "cpulab grub configuration";

fn tags(id: &str) -> Value {
    json!(["never", id])
}

fn root(path: &str) -> String {
    format!("{{{{ cpulab_root | default('') }}}}{path}")
}

/// Copies a file to where it installs, notifying `handlers`.
fn copy(name: &str, file: &File, to: &str, handlers: &[String], tag: &str) -> Value {
    let mut t = json!({
        "name": name,
        "ansible.builtin.copy": {
            "dest": root(to),
            "content": file.contents,
            "mode": "0644",
        },
        "tags": tags(tag),
    });
    if !handlers.is_empty() {
        t["notify"] = json!(handlers);
    }
    t
}

fn remove(name: &str, to: &str, handlers: &[String], tag: &str) -> Value {
    let mut t = json!({
        "name": name,
        "ansible.builtin.file": { "path": root(to), "state": "absent" },
        "tags": tags(tag),
    });
    if !handlers.is_empty() {
        t["notify"] = json!(handlers);
    }
    t
}

/// A task that runs `c` (no shell between), for every host the play reaches.
fn command(name: &str, c: &Command, tag: &str) -> Value {
    let argv: Vec<String> = c.argv.iter().map(word).collect();
    json!({
        "name": name,
        "ansible.builtin.command": { "argv": argv },
        "tags": tags(tag),
    })
}

/// A word of a command as the playbook passes it: text as it is (a command built here has no
/// placeholder; those are `fail` tasks).
fn word(w: &super::Word) -> String {
    match w {
        super::Word::Text(t) => t.clone(),
        super::Word::Placeholder { placeholder } => format!("<{placeholder}>"),
    }
}

/// Keeps the value `path` holds beside the file the remedy installs, once: the first run's
/// value is the one undo puts back.
fn save(name: &str, path: &str, saved: &str, tag: &str) -> Value {
    let mut t = command(name, &Command::save(&root(path), &root(saved)), tag);
    t["ansible.builtin.command"]["creates"] = json!(root(saved));
    t
}

/// Puts the value [`save`] kept back, and removes it.
fn restore(name: &str, saved: &str, path: &str, tag: &str) -> Value {
    let mut t = command(name, &Command::restore(&root(saved), &root(path)), tag);
    t["ansible.builtin.command"]["removes"] = json!(root(saved));
    t
}

/// Reads a sysfs value and writes `value` only when it differs.
fn set_param(id: &str, n: usize, path: &str, value: &str, tag: &str) -> [Value; 2] {
    let var = format!(
        "cpulab_{}_{n}",
        id.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    let mut write = command(
        &format!("{id}: {path} = {value} now"),
        &Command::write_value(value, &root(path)),
        tag,
    );
    write["when"] = json!(format!("({var}.content | b64decode | trim) != '{value}'"));
    [
        json!({
            "name": format!("{id}: read {path}"),
            "ansible.builtin.slurp": { "src": root(path) },
            "register": var,
            "tags": tags(tag),
        }),
        write,
    ]
}

/// The tasks that deploy `d` (tag `ID`) and undo it (tag `ID-undo`), and the handlers they use.
fn tasks(d: &Deployment, ctx: &Context, handlers: &mut Vec<Value>) -> (Vec<Value>, Vec<Value>) {
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let undo_tag = format!("{}-undo", d.id);
    for form in &d.forms {
        let notify: Vec<String> = match form.format {
            Format::Systemd => vec!["cpulab daemon-reload".into()],
            Format::Sysctl => vec!["cpulab sysctl".into()],
            Format::Cmdline => vec![GRUB_HANDLER.into()],
            Format::Modprobe => vec![],
            _ => continue,
        };
        if form.format == Format::Cmdline && Bootloader::of(ctx) == Bootloader::Grubby {
            // The host's boot loader is grubby: its own command, no GRUB snippet.
            let (Some(args), Some(remove)) = (form.apply.first(), form.undo.first()) else {
                continue;
            };
            for (list, name, c, tag) in [
                (&mut up, "grubby adds the boot options", args, &d.id),
                (
                    &mut down,
                    "undo: grubby removes the boot options",
                    remove,
                    &undo_tag,
                ),
            ] {
                let mut t = command(&format!("{}: {name}", d.id), c, tag);
                t["when"] = json!(LIVE);
                list.push(t);
            }
            continue;
        }
        for file in &form.files {
            let Some(to) = &file.install_to else { continue };
            if let Some(why) = &file.placeholder {
                up.push(json!({
                    "name": format!("{}: {} holds a placeholder", d.id, file.path),
                    "ansible.builtin.fail": { "msg": format!("PLACEHOLDER: {why}; edit the playbook first") },
                    "tags": tags(&d.id),
                }));
                down.push(json!({
                    "name": format!("{} undo: {} was never deployed", d.id, file.path),
                    "ansible.builtin.debug": { "msg": format!("nothing to undo for {}: it holds a placeholder ({why}), so its deploy task fails before it installs anything", file.path) },
                    "tags": tags(&undo_tag),
                }));
                continue;
            }
            if let Some((dir, _)) = to.rsplit_once('/') {
                up.push(json!({
                    "name": format!("{}: {dir}/", d.id),
                    "ansible.builtin.file": { "path": root(dir), "state": "directory", "mode": "0755" },
                    "tags": tags(&d.id),
                }));
            }
            up.push(copy(&format!("{}: {to}", d.id), file, to, &notify, &d.id));
            down.push(remove(
                &format!("{} undo: {to}", d.id),
                to,
                &notify,
                &undo_tag,
            ));
        }
        if form.format == Format::Systemd {
            for unit in units(d) {
                let h = format!("cpulab restart {unit}");
                if !handlers.iter().any(|x| x["name"] == h.as_str()) {
                    handlers.push(json!({
                        "name": h,
                        "ansible.builtin.systemd": { "name": unit, "state": "restarted" },
                        "when": LIVE,
                    }));
                }
                for t in up.iter_mut().chain(down.iter_mut()) {
                    if let Some(n) = t.get_mut("notify").and_then(Value::as_array_mut)
                        && n.iter().any(|x| x == "cpulab daemon-reload")
                        && !n.iter().any(|x| x == h.as_str())
                    {
                        n.push(Value::from(h.clone()));
                    }
                }
            }
        }
    }
    kept_values(d, &undo_tag, &mut up, &mut down);
    if d.forms.iter().any(|f| f.format == Format::Cmdline) {
        for (list, tag) in [(&mut up, &d.id), (&mut down, &undo_tag)] {
            list.push(json!({
                "name": format!("{}: the kernel command line changes at the next boot", d.id),
                "ansible.builtin.debug": { "msg": "reboot the host for the boot options to take effect" },
                "tags": tags(tag),
            }));
        }
    }
    (up, down)
}

/// For each module parameter and sysctl of `d`: the value kept before the change (once) and
/// the module parameter set now, with the undo that puts the kept value back.
fn kept_values(d: &Deployment, undo_tag: &str, up: &mut Vec<Value>, down: &mut Vec<Value>) {
    let installed = |format: Format| {
        d.forms
            .iter()
            .find(|f| f.format == format)
            .and_then(|f| f.files.first())
            .and_then(|f| f.install_to.clone())
    };
    for (n, c) in d.changes.iter().enumerate() {
        match c {
            Change::ModuleParam {
                module,
                param,
                value,
            } => {
                let path = super::kernel::param_path(module, param);
                let saved = saved_path(
                    &installed(Format::Modprobe)
                        .unwrap_or_else(|| format!("/etc/modprobe.d/cpulab-{module}.conf")),
                    param,
                );
                up.push(save(
                    &format!("{}: keep {path} as it is before", d.id),
                    &path,
                    &saved,
                    &d.id,
                ));
                up.extend(set_param(&d.id, n, &path, value, &d.id));
                down.push(restore(
                    &format!("{} undo: {path} as it was before", d.id),
                    &saved,
                    &path,
                    undo_tag,
                ));
            }
            Change::Sysctl { key, .. } => {
                let Some(install) = installed(Format::Sysctl) else {
                    continue;
                };
                let path = sysctl_path(key);
                let saved = saved_path(&install, key);
                // The copied file is applied by its handler, at the end of the play: after this.
                up.push(save(
                    &format!("{}: keep {key} as it is before", d.id),
                    &path,
                    &saved,
                    &d.id,
                ));
                down.push(restore(
                    &format!("{} undo: {key} as it was before", d.id),
                    &saved,
                    &path,
                    undo_tag,
                ));
            }
            _ => {}
        }
    }
}

fn units(d: &Deployment) -> Vec<String> {
    let mut out = Vec::new();
    for c in &d.changes {
        if let Change::Pin { workload, .. }
        | Change::CpuWeight { workload, .. }
        | Change::CpuQuota { workload, .. } = c
        {
            out.extend(workload.units.iter().cloned());
        }
    }
    out
}

/// The handlers; GRUB's configuration is written again with the host's own tool, the one the
/// cmdline form chose.
fn base_handlers(ctx: &Context) -> Vec<Value> {
    let update: Vec<String> = Bootloader::of(ctx).update().argv.iter().map(word).collect();
    let mut handlers = vec![
        json!({ "name": "cpulab daemon-reload", "ansible.builtin.systemd": { "daemon_reload": true }, "when": LIVE }),
        json!({ "name": "cpulab sysctl", "ansible.builtin.command": "sysctl --system", "when": LIVE }),
    ];
    // grubby needs none: its own task changes the boot entries.
    if Bootloader::of(ctx) != Bootloader::Grubby {
        handlers.push(json!({ "name": GRUB_HANDLER, "ansible.builtin.command": { "argv": update }, "when": LIVE }));
    }
    handlers
}

/// The playbook: one play for the machines the doctor ran on, one for their hypervisor hosts.
pub fn playbook(p: &Plan) -> File {
    let mut plays = Vec::new();
    for (site, hosts, what) in [
        (
            Site::ThisMachine,
            "all",
            "the machines like the one the doctor ran on",
        ),
        (
            Site::Host,
            "hypervisors",
            "the hypervisor hosts (not the guests)",
        ),
    ] {
        let mut handlers = base_handlers(&p.context);
        let mut all = Vec::new();
        for d in p.deployments.iter().filter(|d| d.site == site) {
            let (up, down) = tasks(d, &p.context, &mut handlers);
            all.extend(up);
            all.extend(down);
        }
        if all.is_empty() {
            continue;
        }
        plays.push(json!({
            "name": format!("cpulab remedies for {what}"),
            "hosts": hosts,
            "become": true,
            "gather_facts": false,
            "tasks": all,
            "handlers": handlers,
        }));
    }
    let ids: Vec<&str> = p.deployments.iter().map(|d| d.id.as_str()).collect();
    File {
        path: "playbook.yml".into(),
        install_to: None,
        placeholder: None,
        contents: format!(
            "# Written by `cpulab remedy` from {}.\n# Every task is tagged `never`: name the remedy \
             to deploy, e.g.\n#   ansible-playbook -i HOSTS playbook.yml --tags {}\n# and its \
             undo with --tags {}-undo. Remedies: {}.\n{}",
            p.context.source,
            ids.first().copied().unwrap_or("ID"),
            ids.first().copied().unwrap_or("ID"),
            ids.join(", "),
            serde_yaml_ng::to_string(&plays).unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules' fixture machine's playbook, on a host whose tools are `tools`.
    fn plays(tools: &[&str]) -> Vec<Value> {
        let p = super::super::tests::plan_of_everything_wrong_on(tools);
        let book = p.files.iter().find(|f| f.path == "playbook.yml").unwrap();
        serde_yaml_ng::from_str(&book.contents).unwrap()
    }

    fn tasks_of(plays: &[Value]) -> Vec<&Value> {
        plays
            .iter()
            .flat_map(|p| p["tasks"].as_array().unwrap())
            .collect()
    }

    fn tagged<'a>(tasks: &[&'a Value], tag: &str) -> Vec<&'a Value> {
        tasks
            .iter()
            .copied()
            .filter(|t| t["tags"].as_array().unwrap().iter().any(|x| x == tag))
            .collect()
    }

    #[test]
    fn every_remedy_has_its_undo_and_the_boot_loader_is_the_hosts() {
        let grubby = plays(&["grubby"]);
        let tasks = tasks_of(&grubby);
        let ids: Vec<&str> = tasks
            .iter()
            .flat_map(|t| t["tags"].as_array().unwrap())
            .filter_map(Value::as_str)
            .filter(|t| *t != "never" && !t.ends_with("-undo"))
            .collect();
        assert!(!ids.is_empty());
        for id in &ids {
            assert!(
                !tagged(&tasks, &format!("{id}-undo")).is_empty(),
                "{id} has no undo task"
            );
        }
        // grubby's own command, no GRUB snippet, no update-grub.
        let text = serde_json::to_string(&grubby).unwrap();
        assert!(!text.contains("/etc/default/grub.d/"), "{text}");
        assert!(!text.contains("update-grub"), "{text}");
        assert!(text.contains("--update-kernel=ALL"), "{text}");
        // GRUB without update-grub: the snippet, and grub2-mkconfig as the handler.
        let rhel = serde_json::to_string(&plays(&["grub2-mkconfig"])).unwrap();
        assert!(rhel.contains("/etc/default/grub.d/"));
        assert!(rhel.contains("grub2-mkconfig") && !rhel.contains("\"update-grub\""));
        // A module parameter's value is kept once and put back by its undo.
        let creates = tasks
            .iter()
            .filter(|t| t["ansible.builtin.command"]["creates"].is_string())
            .count();
        let removes = tasks
            .iter()
            .filter(|t| t["ansible.builtin.command"]["removes"].is_string())
            .count();
        assert!(
            creates > 0 && creates == removes,
            "{creates} kept, {removes} put back"
        );
    }
}
