//! Command-line conventions shared by every subcommand: help, usage errors, exit codes.

mod common;

use common::cpulab;
use std::collections::BTreeSet;

#[test]
fn help_lists_every_subcommand_and_exits_zero() {
    let out = cpulab().arg("--help").assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    for cmd in [
        "probe", "pingpong", "pair", "share", "scale", "oscost", "doctor", "report", "compare",
    ] {
        assert!(text.contains(cmd), "help mentions {cmd}");
    }
}

#[test]
fn unknown_subcommand_is_bad_usage() {
    cpulab().arg("frobnicate").assert().code(2);
}

#[test]
fn unknown_flag_is_bad_usage() {
    cpulab().args(["probe", "--no-such-flag"]).assert().code(2);
}

/// Every subcommand a user can see (`manpages` is hidden, `help` is clap's own).
fn visible_subcommands() -> Vec<String> {
    cpulab::cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .collect()
}

fn stdout_of(args: &[&str]) -> String {
    let out = cpulab().args(args).assert().success();
    String::from_utf8_lossy(&out.get_output().stdout).to_string()
}

#[test]
fn bash_completions_offer_every_subcommand() {
    let script = stdout_of(&["completions", "bash"]);
    let names = visible_subcommands();
    assert!(names.len() >= 9, "subcommands found: {names:?}");
    for name in names {
        // The case arm that completes `cpulab NAME ...`.
        assert!(
            script.contains(&format!("cpulab,{name})")),
            "bash completions know `cpulab {name}`"
        );
    }
}

#[test]
fn completions_exist_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        assert!(script.contains("doctor"), "{shell} completions name doctor");
    }
    cpulab().args(["completions", "tcsh"]).assert().code(2);
}

#[test]
fn manpages_writes_one_page_per_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man1");
    cpulab()
        .args(["manpages", "--quiet"])
        .arg(&man)
        .assert()
        .success();
    let written: BTreeSet<String> = std::fs::read_dir(&man)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    // One page per visible subcommand, and one per visible subcommand of those (git-style
    // `cpulab-history-check.1`), as clap_mangen writes them.
    let mut expected = BTreeSet::new();
    for c in cpulab::cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
    {
        expected.insert(format!("cpulab-{}.1", c.get_name()));
        for sub in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            expected.insert(format!("cpulab-{}-{}.1", c.get_name(), sub.get_name()));
        }
    }
    expected.insert("cpulab.1".to_string());
    assert_eq!(written, expected);
    let doctor = std::fs::read_to_string(man.join("cpulab-doctor.1")).unwrap();
    assert!(
        doctor.starts_with(".ie") || doctor.contains(".TH"),
        "a roff page"
    );
    assert!(
        doctor.contains("cpulab doctor \\-\\-quick"),
        "examples in the page"
    );
}

#[test]
fn manpages_into_a_file_is_bad_input() {
    let file = tempfile::NamedTempFile::new().unwrap();
    cpulab().arg("manpages").arg(file.path()).assert().code(2);
}

#[test]
fn every_subcommand_help_has_examples() {
    for sub in cpulab::cli::command().get_subcommands() {
        let name = sub.get_name();
        let help = stdout_of(&[name, "--help"]);
        assert!(
            help.contains("Examples:"),
            "`cpulab {name} --help` has examples"
        );
    }
}

/// The examples in each command's help are real invocations: each parses with today's flags,
/// so renaming a flag without updating its examples fails here.
#[test]
fn every_help_example_parses() {
    for sub in cpulab::cli::command().get_subcommands() {
        let name = sub.get_name();
        let text = sub
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default()
            .replace("\\\n", " ");
        let examples: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("cpulab "))
            .collect();
        assert!(
            (2..=4).contains(&examples.len()),
            "`cpulab {name}` has 2 to 4 examples, not {}",
            examples.len()
        );
        for example in examples {
            let words = shell_words::split(example).unwrap();
            // The shell's part (redirection, a pipe) is not cpulab's.
            let argv: Vec<&String> = words
                .iter()
                .take_while(|w| !w.starts_with('>') && *w != "|")
                .collect();
            if let Err(e) = cpulab::cli::try_parse_from(argv) {
                panic!("example `{example}` does not parse: {e}");
            }
        }
    }
}

#[test]
fn version_names_the_release() {
    let text = stdout_of(&["--version"]);
    let re = regex::Regex::new(r"^cpulab \d+\.\d+\.\d+( \([0-9a-f]{4,}\))?\n$").unwrap();
    assert!(re.is_match(&text), "version line: {text:?}");
    assert!(text.contains(env!("CARGO_PKG_VERSION")));
}

/// Two results say which build made them: a fresh result's conditions carry the revision
/// `--version` shows, which is the one git gives for this checkout; outside a git checkout (a
/// source tarball, no git) both leave it out.
#[test]
fn a_fresh_result_names_the_build_that_made_it() {
    let version = stdout_of(&["--version"]);
    let in_version = version
        .trim_end()
        .split_once(" (")
        .map(|(_, r)| r.trim_end_matches(')').to_string());
    let doc = common::json_of(&cpulab().args(["probe", "--json"]).output().unwrap());
    let revision = doc["conditions"]["cpulab_revision"]
        .as_str()
        .map(String::from);
    assert_eq!(revision, in_version, "{version}");
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(manifest)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let checkout = git(&["rev-parse", "--show-toplevel"]).is_some_and(|top| {
        std::path::Path::new(&top).canonicalize().ok() == manifest.canonicalize().ok()
    });
    if checkout {
        assert_eq!(revision, git(&["rev-parse", "--short", "HEAD"]));
    } else {
        assert_eq!(revision, None, "no git checkout, yet a revision");
    }
}
