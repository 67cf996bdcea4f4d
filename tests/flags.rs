//! One command-line vocabulary: the same flag means the same thing on every command, old
//! spellings still work, and no flag value reaches a panicking conversion.

mod common;

use common::bad_input as bad;
use common::run_json;

/// `--ready-timeout 1e20` used to panic in `Duration::from_secs_f64`.
#[test]
fn huge_and_negative_durations_are_bad_input_on_every_command() {
    let pair = [
        "pair",
        "--server",
        "s",
        "--client",
        "c",
        "--ready-port",
        "1",
    ];
    bad(&[&pair[..], &["--ready-timeout", "1e20"]].concat());
    bad(&[&pair[..], &["--duration", "1e20"]].concat());
    bad(&[&pair[..], &["--duration=-1s"]].concat());
    bad(&["pingpong", "--max-time", "1e20"]);
    bad(&["pingpong", "--warmup", "1e400"]);
    bad(&["share", "--duration", "1e20"]);
    bad(&["scale", "--duration", "nan"]);
    bad(&["oscost", "--freq-load", "1e20"]);
}

#[test]
fn every_measuring_command_takes_no_load_check_and_duration_units() {
    let v = run_json::<cpulab::share::ShareReport>(
        "share",
        &[
            "--duration",
            "30ms",
            "-t",
            "1",
            "-b",
            "0",
            "--repeats",
            "1",
            "--no-load-check",
        ],
        60,
    );
    assert!((v["requested_duration_s"].as_f64().unwrap() - 0.03).abs() < 1e-9);
    assert!(
        v["conditions"]["load_before"].is_null(),
        "no load check ran"
    );
    let v = run_json::<cpulab::scale::ScaleReport>(
        "scale",
        &[
            "--duration",
            "10ms",
            "--repeats",
            "2",
            "--threads",
            "1",
            "--no-load-check",
        ],
        60,
    );
    assert!(v["conditions"]["load_before"].is_null());
    let v = run_json::<cpulab::oscost::OscostReport>(
        "oscost",
        &["--quick", "--no-freq", "--batches", "2", "--no-load-check"],
        60,
    );
    assert!(v["conditions"]["load_before"].is_null());
    let v = run_json::<cpulab::pingpong::PingpongReport>(
        "pingpong",
        &[
            "--max-time",
            "50ms",
            "--warmup",
            "10ms",
            "--pairs",
            "0:0",
            "--no-load-check",
        ],
        60,
    );
    assert!((v["settings"]["max_time_s"].as_f64().unwrap() - 0.05).abs() < 1e-9);
}

/// `--cpus` is the allowed CPU set everywhere; scale's ordered placement is `--order`.
#[test]
fn cpus_is_the_allowed_set_and_order_the_placement() {
    let v = run_json::<cpulab::scale::ScaleReport>(
        "scale",
        &[
            "--cpus",
            "0",
            "--duration",
            "10ms",
            "--repeats",
            "2",
            "--policy",
            "os,compact",
        ],
        60,
    );
    assert_eq!(v["conditions"]["allowed_cpus"], "0");
    for p in v["policies"].as_array().unwrap() {
        for x in p["points"].as_array().unwrap() {
            assert_eq!(x["threads"], 1, "one CPU allowed: one thread by default");
        }
    }
    let v = run_json::<cpulab::scale::ScaleReport>(
        "scale",
        &["--order", "0", "--duration", "10ms", "--repeats", "2"],
        60,
    );
    assert_eq!(v["policies"][0]["policy"], "explicit");
    // oscost: the old `--cpu` still works and means the same as `--cpus`.
    for flag in ["--cpus", "--cpu"] {
        let v = run_json::<cpulab::oscost::OscostReport>(
            "oscost",
            &["--quick", "--no-freq", "--batches", "2", flag, "0"],
            60,
        );
        assert_eq!(v["cpu"], 0);
    }
}

#[test]
fn share_takes_cpus_as_the_allowed_set() {
    let v = run_json::<cpulab::share::ShareReport>(
        "share",
        &[
            "--cpus",
            "0",
            "--duration",
            "20ms",
            "-b",
            "0",
            "--repeats",
            "1",
            "--no-load-check",
        ],
        60,
    );
    assert_eq!(v["conditions"]["allowed_cpus"], "0");
    assert_eq!(
        v["configs"][0]["threads"], 1,
        "one worker per allowed CPU by default"
    );
    bad(&["share", "--cpus", "1-0"]);
    bad(&["pair", "--preset", "http", "--cpus", "4096"]);
}

/// A bad CPU list names the flag it was given to and the value, on every command that takes
/// one: the message was the list's problem alone (`empty CPU list; ...`), which does not say
/// which of `--cpus`, `--burner-cpus`, `--order` or `--pairs` to fix.
#[test]
fn a_bad_cpu_list_names_its_flag_and_value() {
    for (args, flag) in [
        (&["pingpong", "--cpus", "1-0"][..], "--cpus `1-0`"),
        (&["share", "--burner-cpus", "4096"], "--burner-cpus `4096`"),
        (&["share", "--cpus", ","], "--cpus `,`"),
        (&["scale", "--order", "0,,1"], "--order `0,,1`"),
        (&["oscost", "--cpus", "4096"], "--cpus `4096`"),
        (&["messaging", "--cpus", "0-"], "--cpus `0-`"),
        (&["bursty", "--cpus", ""], "--cpus ``"),
    ] {
        bad(args);
        let out = common::cpulab().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with(&format!("cpulab: {flag}: ")),
            "{args:?}: {err}"
        );
    }
}
