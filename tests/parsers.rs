//! Property tests of the parsers users feed: CPU lists, durations, tuned profiles, sim scenarios
//! and saved results. Where a printer exists the text it prints reads back to the same value;
//! whatever the text, a parser returns a value or an error and never panics.

mod common;

use cpulab::cpulist::CpuSet;
use cpulab::units::{fmt_ns, parse_duration};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

fn config() -> ProptestConfig {
    // The machine is small and shared: a modest number of cases per property.
    ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    }
}

/// Text that looks like what users type into these flags, plus anything at all.
fn listish() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9,:\\- ]{0,24}",
        "[0-9a-fx,:\\-µ. ]{0,24}",
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The kernel's compact form printed by `Display` reads back to the same set.
    #[test]
    fn a_printed_cpu_list_reads_back(cpus in proptest::collection::btree_set(0u32..4096, 0..64)) {
        let set = CpuSet::from_iter_u32(cpus.iter().copied());
        let text = set.to_string();
        let back = CpuSet::parse_list(&text, true).unwrap();
        prop_assert_eq!(back.to_vec(), cpus.into_iter().collect::<Vec<_>>(), "{}", text);
    }

    /// A range with a stride is the numbers counted by hand.
    #[test]
    fn a_strided_range_is_every_nth(lo in 0u32..2000, len in 0u32..500, stride in 1u32..9) {
        let hi = lo + len;
        let set = CpuSet::parse_list(&format!("{lo}-{hi}:{stride}"), false).unwrap();
        let want: Vec<u32> = (lo..=hi).step_by(stride as usize).collect();
        prop_assert_eq!(set.to_vec(), want);
    }

    /// A hexadecimal mask (`Cpus_allowed`, with its comma every 32 bits) is the set of its bits.
    #[test]
    fn a_mask_is_the_set_of_its_bits(cpus in proptest::collection::btree_set(0u32..256, 0..40)) {
        let mut words = [0u32; 8];
        for &c in &cpus {
            words[(c / 32) as usize] |= 1 << (c % 32);
        }
        let text: Vec<String> = words.iter().rev().map(|w| format!("{w:08x}")).collect();
        let set = CpuSet::parse_mask(&text.join(",")).unwrap();
        prop_assert_eq!(set.to_vec(), cpus.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn no_cpu_list_or_mask_panics(text in listish(), empty in any::<bool>()) {
        if let Ok(set) = CpuSet::parse_list(&text, empty) {
            // Whatever parsed prints in a form that parses to the same set.
            let back = CpuSet::parse_list(&set.to_string(), true).unwrap();
            prop_assert_eq!(back, set);
        }
        let _ = CpuSet::parse_mask(&text);
    }

    /// A whole number of any unit is that many of the unit.
    #[test]
    fn a_duration_with_a_unit_is_that_many_units(n in 0u64..100_000, unit in 0usize..7) {
        let (suffix, ns_per) = [
            ("ns", 1u64),
            ("us", 1_000),
            ("µs", 1_000),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
            ("", 1_000_000_000),
            ("m", 60_000_000_000),
        ][unit];
        let want = Duration::from_nanos(n * ns_per);
        let text = format!("{n}{suffix}");
        match parse_duration(&text) {
            Ok(d) => {
                let err = d.as_nanos().abs_diff(want.as_nanos());
                // Through an f64 of seconds: exact to a nanosecond per part in 10^15.
                prop_assert!(err <= 1 + want.as_nanos() / 1_000_000_000_000_000, "{} -> {:?}", text, d);
            }
            Err(e) => prop_assert!(want > Duration::from_secs(86_400), "{}: {}", text, e),
        }
    }

    /// What `fmt_ns` prints reads back as a duration, to the precision printed.
    #[test]
    fn a_printed_time_reads_back(ns in 0.0f64..5e12) {
        let text = fmt_ns(ns);
        let d = parse_duration(&text).unwrap();
        let back = d.as_nanos() as f64;
        // Two decimals of the unit printed (us, ms, s), or a whole nanosecond.
        let unit = if ns < 1e3 { 1.0 } else if ns < 1e6 { 1e3 } else if ns < 1e9 { 1e6 } else { 1e9 };
        prop_assert!((back - ns).abs() <= 0.005 * unit + 1.0, "{} -> {}", text, back);
    }

    #[test]
    fn no_duration_panics(text in prop_oneof!["[0-9.eE+\\- ]{0,12}[a-zµ]{0,4}", any::<String>()]) {
        if let Ok(d) = parse_duration(&text) {
            prop_assert!(d <= Duration::from_secs(86_400));
        }
    }

    /// A tuned.conf printed from sections reads back to them (the last value of a key wins).
    #[test]
    fn a_printed_tuned_profile_reads_back(
        sections in proptest::collection::btree_map(
            "[a-z_]{1,10}",
            proptest::collection::vec(("[a-z_.]{1,12}", "[a-z0-9_ ,.%-]{0,16}"), 0..6),
            0..5,
        )
    ) {
        let mut text = String::from("# a profile\n");
        let mut want: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (name, items) in &sections {
            text.push_str(&format!("[{name}]\n"));
            let entry = want.entry(name.clone()).or_default();
            for (k, v) in items {
                text.push_str(&format!("{k} = {v}\n"));
                entry.retain(|(old, _)| old != k);
                entry.push((k.clone(), v.trim().to_string()));
            }
        }
        prop_assert_eq!(cpulab::trial::tuned::parse(&text), want);
    }

    /// Any tuned.conf, expanded into changes on a fixture machine: changes or one error, no
    /// panic.
    #[test]
    fn no_tuned_profile_panics(
        body in proptest::collection::vec(
            prop_oneof![
                "\\[(main|sysctl|cpu|vm|bootloader|scheduler|disk)\\]",
                "(include|governor|energy_perf_bias|min_perf_pct|force_latency|kernel\\.[a-z_]{1,12}|[a-z_]{1,8}) ?= ?[a-z0-9_|,.%-]{0,12}",
                any::<String>(),
            ],
            0..8,
        )
    ) {
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("p");
        std::fs::create_dir_all(&profile).unwrap();
        std::fs::write(profile.join("tuned.conf"), body.join("\n")).unwrap();
        let roots = cpulab::trial::setting::Roots::new(&common::fixture("kvm-guest"), Some(dir.path()));
        let _ = cpulab::trial::tuned::expand(&roots, "p");
    }
}

/// A number out of every range a scenario checks, and some inside them.
fn odd_number() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(-1.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(1e300),
        -1e6f64..1e6,
        0.0f64..1.0,
    ]
}

/// Replaces the `k`th number of a TOML value with `v`; returns how many numbers it passed.
fn replace_number(t: &mut toml::Value, k: &mut usize, v: f64) {
    match t {
        toml::Value::Float(x) => {
            if *k == 0 {
                *x = v;
            }
            *k = k.wrapping_sub(1);
        }
        toml::Value::Integer(x) => {
            if *k == 0 {
                *x = v as i64;
            }
            *k = k.wrapping_sub(1);
        }
        toml::Value::Array(a) => a.iter_mut().for_each(|x| replace_number(x, k, v)),
        toml::Value::Table(tb) => tb.iter_mut().for_each(|(_, x)| replace_number(x, k, v)),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A built-in scenario printed as TOML reads back to the same scenario; with one number
    /// changed to anything (negative, NaN, huge) it reads and resolves or is one error, never a
    /// panic.
    #[test]
    fn a_scenario_with_any_number_changed_is_read_or_refused(
        which in 0usize..5,
        k in 0usize..400,
        v in odd_number(),
    ) {
        let all = cpulab::sim::builtin::all(&cpulab::sim::params::Calibration::field_notes());
        let s = &all[which % all.len()];
        let text = toml::to_string(s).unwrap();
        let back = cpulab::sim::scenario::parse(&text, "builtin").unwrap();
        prop_assert_eq!(&back, s);
        let mut value: toml::Value = toml::from_str(&text).unwrap();
        let mut k = k;
        replace_number(&mut value, &mut k, v);
        let Ok(changed) = toml::to_string(&value) else {
            return Ok(());
        };
        if let Ok(s) = cpulab::sim::scenario::parse(&changed, "changed") {
            let _ = s.resolve(&cpulab::sim::params::Costs::default());
        }
    }

    #[test]
    fn no_scenario_text_panics(text in prop_oneof![
        "(name|hypervisor|seed|duration_ms|\\[\\[configs\\]\\]|\\[host\\]) ?= ?\"?[a-z0-9.]{0,8}\"?\n{0,2}",
        any::<String>(),
    ]) {
        if let Ok(s) = cpulab::sim::scenario::parse(&text, "any") {
            let _ = s.resolve(&cpulab::sim::params::Costs::default());
        }
    }
}

/// A saved result as `report` and `compare` read it: the envelope checked, then the typed
/// figures of its kind.
fn load(text: &str) {
    let kinds = cpulab::registry::kinds();
    if let Ok(l) = cpulab::report::envelope::parse(text, "x.json", &kinds)
        && let Some(e) = cpulab::registry::lookup(l.kind)
    {
        let _ = (e.figures)(&l.value);
    }
}

/// Saved results this binary wrote (the fixtures of `tests/old_results.rs` and friends).
fn saved_results() -> Vec<String> {
    let mut out = Vec::new();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json")
                && let Ok(t) = std::fs::read_to_string(&p)
                && t.contains("cpulab_schema")
            {
                out.push(t);
            }
        }
    }
    out
}

/// Every leaf of a JSON value, by path, so a property can change one.
fn leaves(v: &serde_json::Value, path: &mut Vec<String>, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(o) => o.iter().for_each(|(k, x)| {
            path.push(k.clone());
            leaves(x, path, out);
            path.pop();
        }),
        serde_json::Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| {
            path.push(i.to_string());
            leaves(x, path, out);
            path.pop();
        }),
        _ => out.push(format!("/{}", path.join("/"))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// A saved result with one leaf replaced by anything (another type, a negative, an empty
    /// list), or cut short anywhere, loads or is refused; never a panic.
    #[test]
    fn a_damaged_saved_result_loads_or_is_refused(
        which in any::<prop::sample::Index>(),
        leaf in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        replacement in prop_oneof![
            Just(serde_json::json!(null)),
            Just(serde_json::json!(-1)),
            Just(serde_json::json!(-1e308)),
            Just(serde_json::json!("x")),
            Just(serde_json::json!([])),
            Just(serde_json::json!({})),
            Just(serde_json::json!(0)),
            Just(serde_json::json!(u64::MAX)),
        ],
    ) {
        let docs = saved_results();
        prop_assume!(!docs.is_empty());
        let text = which.get(&docs);
        load(text);
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        let mut all = Vec::new();
        leaves(&v, &mut Vec::new(), &mut all);
        if !all.is_empty()
            && let Some(x) = v.pointer_mut(leaf.get(&all).as_str())
        {
            *x = replacement;
            load(&v.to_string());
        }
        let at = cut.index(text.len());
        if text.is_char_boundary(at) {
            load(&text[..at]);
        }
    }

    #[test]
    fn no_saved_result_text_panics(text in prop_oneof![
        "\\{\"cpulab_schema\": ?[0-9], ?\"kind\": ?\"(pingpong|pair|share|scale|oscost|doctor|probe|watch|messaging|bursty|sim|try)\"[,}a-z\" :0-9\\[\\]]{0,40}",
        any::<String>(),
    ]) {
        load(&text);
    }
}

/// The known answers behind the round trips, literally, so a printer and parser that agree on a
/// wrong form still fail.
#[test]
fn literal_forms() {
    let set = |s: &str| CpuSet::parse_list(s, false).unwrap().to_vec();
    assert_eq!(set("0-3,8"), [0, 1, 2, 3, 8]);
    assert_eq!(set("0-7:2"), [0, 2, 4, 6]);
    assert_eq!(set(" 5 \n"), [5]);
    assert_eq!(
        CpuSet::from_iter_u32([0, 1, 2, 3, 8, 10, 11]).to_string(),
        "0-3,8,10-11"
    );
    assert_eq!(
        CpuSet::parse_mask("1,00000003").unwrap().to_vec(),
        [0, 1, 32]
    );
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
    assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
    assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
    assert_eq!(fmt_ns(5030.0), "5.03 us");
}
