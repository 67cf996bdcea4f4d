//! Command-line conventions shared by every subcommand: help, usage errors, exit codes.

mod common;

use common::cpulab;

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
