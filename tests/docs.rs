//! The documentation stays whole: every command has its page and its row on the front page, and
//! every relative link in the README, CONTRIBUTING and docs/ leads to a file (and heading) that
//! exists. Pages move and commands are added often; a dead link is found here, not by a reader.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md"), repo().join("CONTRIBUTING.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    files
}

/// Text outside fenced code blocks, where links are links.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    prose(&text)
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

fn visible_subcommands() -> Vec<String> {
    cpulab::cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .collect()
}

#[test]
fn anchor_follows_github() {
    assert_eq!(
        anchor(" Example: this project's 2-vCPU KVM guest"),
        "example-this-projects-2-vcpu-kvm-guest"
    );
    assert_eq!(
        anchor("`cpulab doctor`: the investigation"),
        "cpulab-doctor-the-investigation"
    );
}

#[test]
fn every_relative_link_resolves() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut dead = Vec::new();
    for file in markdown_files() {
        let text = prose(&std::fs::read_to_string(&file).unwrap());
        for cap in link.captures_iter(&text) {
            let target = &cap[1];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target, None),
            };
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let name = file.strip_prefix(repo()).unwrap().display().to_string();
            if !resolved.exists() {
                dead.push(format!("{name}: {target} (no such file)"));
            } else if let Some(f) = fragment
                && (resolved.is_dir() || !anchors(&resolved).contains(f))
            {
                dead.push(format!("{name}: {target} (no such heading)"));
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn every_command_has_its_page_and_its_row() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for name in visible_subcommands() {
        let page = format!("docs/{name}.md");
        assert!(
            repo().join(&page).exists(),
            "`cpulab {name}` has no reference page {page}"
        );
        assert!(
            readme.contains(&format!("]({page})")),
            "the README's command table links `cpulab {name}` to {page}"
        );
    }
}
