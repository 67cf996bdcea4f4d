//! Property tests of the parsers users feed: CPU lists, durations, tuned profiles, sim scenarios
//! and saved results; of those that face the network (the exporter's HTTP request head, its web
//! config) and the kernel (perf and BPF ring records, tracepoint formats, cgroup files, the
//! command line); and of `--pairs`, cgroup globs and dates. Where a printer exists the text it
//! prints reads back to the same value; where a law has an independent answer (a head over the
//! limit, a record past the end of its buffer, a glob matched by trying every split, a date
//! counted by hand) the parser agrees with it; whatever the input, a parser returns a value or
//! an error and never panics.

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

// ---------------------------------------------------------------------------------------------
// The parsers that face the network (the exporter's HTTP and web config) or the kernel (BPF and
// perf records, tracepoint formats, cgroup files, the command line), and the user-typed
// `--pairs`, cgroup globs and dates.

// The request head itself is hyper's to parse (src/exporter/server.rs); what the exporter reads
// of it is here.
use cpulab::exporter::http;

proptest! {
    #![proptest_config(config())]

    /// `Basic` credentials encoded as a client does decode to the same user and password.
    #[test]
    fn basic_credentials_read_back(user in "[^:]{0,12}", password in ".{0,16}", scheme in "(Basic|basic|BASIC)") {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        prop_assert_eq!(
            http::basic_credentials(&format!("{scheme} {token}")),
            Some((user, password))
        );
    }

    #[test]
    fn no_authorization_or_accept_value_panics(value in prop_oneof![
        "(Basic|Bearer)? ?[A-Za-z0-9+/=]{0,24}",
        "[a-z/*+-]{0,20}(;q=[0-9.e-]{0,5})?(, ?[a-z/*+-]{0,20}(;q=[0-9.e-]{0,5})?){0,3}",
        any::<String>(),
    ]) {
        let _ = http::basic_credentials(&value);
        let _ = http::wants_openmetrics(Some(&value));
    }

    /// OpenMetrics is chosen exactly when it is offered with a weight above zero and no less
    /// than the text format's (worked out here from the numbers, not the header).
    #[test]
    fn openmetrics_follows_the_weights(
        om in proptest::option::of(0u32..=1000),
        text in proptest::option::of(0u32..=1000),
        tie in any::<bool>(),
        om_first in any::<bool>(),
    ) {
        // Half the time the two weigh the same: a tie goes to OpenMetrics.
        let text = if tie { text.map(|t| om.unwrap_or(t)) } else { text };
        let q = |n: u32| format!("{}.{:03}", n / 1000, n % 1000);
        let mut items = Vec::new();
        if let Some(n) = om {
            items.push(format!("application/openmetrics-text;version=1.0.0;q={}", q(n)));
        }
        if let Some(n) = text {
            items.push(format!("text/plain;version=0.0.4;q={}", q(n)));
        }
        if !om_first {
            items.reverse();
        }
        let want = om.is_some_and(|o| o > 0 && o >= text.unwrap_or(0));
        prop_assert_eq!(http::wants_openmetrics(Some(&items.join(","))), want, "{:?}", items);
    }
}

use cpulab::exporter::webconfig;

/// A few real bcrypt hashes (cost 4, so they are quick to make).
fn bcrypt_hashes() -> &'static [String] {
    static HASHES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    HASHES.get_or_init(|| {
        ["a", "secret", "hunter2"]
            .iter()
            .map(|p| bcrypt::hash(p, 4).unwrap())
            .collect()
    })
}

/// What a fleet's web config holds, to be printed as YAML by serde (a printer cpulab does not
/// use) and read back.
#[derive(serde::Serialize)]
struct WebFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    tls_server_config: Option<WebTls>,
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(serde::Serialize)]
struct WebTls {
    cert_file: String,
    key_file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_version: Option<String>,
}

proptest! {
    #![proptest_config(config())]

    /// A web config printed as YAML reads back: every user with their hash, the TLS files and
    /// version, whatever characters the names and paths hold.
    #[test]
    fn a_printed_web_config_reads_back(
        users in proptest::collection::btree_map(".{1,12}", any::<prop::sample::Index>(), 0..4),
        tls in proptest::option::of((".{1,16}", ".{1,16}", proptest::option::of(prop_oneof![Just("TLS12"), Just("TLS13")]))),
    ) {
        let users: BTreeMap<String, String> =
            users.into_iter().map(|(u, i)| (u, i.get(bcrypt_hashes()).clone())).collect();
        let file = WebFile {
            tls_server_config: tls.clone().map(|(c, k, v)| WebTls {
                cert_file: c,
                key_file: k,
                min_version: v.map(str::to_string),
            }),
            basic_auth_users: users.clone(),
        };
        let text = serde_yaml_ng::to_string(&file).unwrap();
        let f = webconfig::parse(&text, "t").map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&f.basic_auth_users, &users);
        match (f.tls_server_config, tls) {
            (Some(t), Some((c, k, v))) => {
                prop_assert_eq!(t.cert_file, std::path::PathBuf::from(c));
                prop_assert_eq!(t.key_file, std::path::PathBuf::from(k));
                prop_assert_eq!(t.min_version.as_deref(), v);
            }
            (None, None) => {}
            (got, want) => prop_assert!(false, "tls {:?} for {:?}", got, want),
        }
    }

    /// A key cpulab does not implement is refused by its name, at the top or under TLS; a
    /// password that is not a bcrypt hash, or a TLS version other than 1.2 and 1.3, is refused.
    #[test]
    fn what_is_not_implemented_is_refused_by_name(
        key in "[a-z][a-z_]{2,20}",
        under_tls in any::<bool>(),
        password in "[ -~&&[^'\\\\]]{0,70}",
        version in "[A-Za-z0-9.]{1,8}",
    ) {
        let known = ["tls_server_config", "basic_auth_users", "cert_file", "key_file", "min_version", "client_ca_file", "client_auth_type"];
        prop_assume!(!known.contains(&key.as_str()));
        let text = if under_tls {
            format!("tls_server_config:\n  cert_file: a\n  key_file: b\n  {key}: x\n")
        } else {
            format!("{key}: x\n")
        };
        let e = webconfig::parse(&text, "t").unwrap_err();
        prop_assert!(e.contains(&key), "{}", e);
        if password.parse::<bcrypt::HashParts>().is_err() {
            let text = format!("basic_auth_users:\n  u: '{password}'\n");
            prop_assert!(webconfig::parse(&text, "t").is_err(), "{}", text);
        }
        prop_assume!(version != "TLS12" && version != "TLS13");
        let text = format!("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: '{version}'\n");
        let e = webconfig::parse(&text, "t").unwrap_err();
        prop_assert!(e.contains(&version), "{}", e);
    }

    #[test]
    fn no_web_config_text_panics(text in prop_oneof![
        "(tls_server_config|basic_auth_users|cert_file|key_file|min_version|[a-z]{1,4})?:? ?[\\[\\]{}'\"&*!|>: a-z$0-9\n-]{0,40}",
        "([ ]{0,4}[a-z_]{1,10}:( [a-zA-Z0-9$./]{0,12})?\n){0,6}",
        any::<String>(),
    ]) {
        let _ = webconfig::parse(&text, "t");
    }
}

use cpulab::bpf::format::{Field, Format};
use cpulab::watch::bpf::{self, HEADER};
use cpulab::watch::events::Decoder;
use cpulab::watch::ring::{PERF_RECORD_LOST, PERF_RECORD_SAMPLE, RawRecord, parse_records};

/// One perf record as the kernel lays it out: a sample (pid, tid, time, cpu, raw) or a loss.
#[derive(Clone, Debug, PartialEq)]
enum PerfRecord {
    Sample {
        pid: i32,
        tid: i32,
        time_ns: u64,
        cpu: u32,
        raw: Vec<u8>,
    },
    Lost(u64),
    /// Some other record type, which the reader skips.
    Other(u32, Vec<u8>),
}

impl PerfRecord {
    fn bytes(&self) -> Vec<u8> {
        let (kind, body) = match self {
            PerfRecord::Sample {
                pid,
                tid,
                time_ns,
                cpu,
                raw,
            } => {
                let mut b = Vec::new();
                b.extend_from_slice(&pid.to_ne_bytes());
                b.extend_from_slice(&tid.to_ne_bytes());
                b.extend_from_slice(&time_ns.to_ne_bytes());
                b.extend_from_slice(&cpu.to_ne_bytes());
                b.extend_from_slice(&0u32.to_ne_bytes());
                b.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
                b.extend_from_slice(raw);
                (PERF_RECORD_SAMPLE, b)
            }
            PerfRecord::Lost(n) => {
                let mut b = 7u64.to_ne_bytes().to_vec();
                b.extend_from_slice(&n.to_ne_bytes());
                (PERF_RECORD_LOST, b)
            }
            PerfRecord::Other(k, b) => (*k, b.clone()),
        };
        let size = (8 + body.len()).div_ceil(8) * 8;
        let mut v = kind.to_ne_bytes().to_vec();
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&(size as u16).to_ne_bytes());
        v.extend_from_slice(&body);
        v.resize(size, 0);
        v
    }

    fn read(r: RawRecord<'_>) -> Self {
        match r {
            RawRecord::Sample {
                pid,
                tid,
                time_ns,
                cpu,
                raw,
            } => PerfRecord::Sample {
                pid,
                tid,
                time_ns,
                cpu,
                raw: raw.to_vec(),
            },
            RawRecord::Lost(n) => PerfRecord::Lost(n),
        }
    }
}

fn perf_record() -> impl Strategy<Value = PerfRecord> {
    prop_oneof![
        (
            any::<i32>(),
            any::<i32>(),
            any::<u64>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..48)
        )
            .prop_map(|(pid, tid, time_ns, cpu, raw)| PerfRecord::Sample {
                pid,
                tid,
                time_ns,
                cpu,
                raw
            }),
        any::<u64>().prop_map(PerfRecord::Lost),
        (
            prop_oneof![Just(1u32), 3u32..9, 10u32..20],
            proptest::collection::vec(any::<u8>(), 0..24)
        )
            .prop_map(|(k, b)| PerfRecord::Other(k, b)),
    ]
}

/// The tracepoint formats captured from a real kernel, and their decoder.
fn decoder() -> Decoder {
    let f = |n: &str| {
        let p = format!(
            "{}/tests/fixtures/watch/{n}.format",
            env!("CARGO_MANIFEST_DIR")
        );
        Format::parse(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    Decoder::new(
        &f("sched_waking"),
        &f("sched_wakeup"),
        &f("sched_switch"),
        &f("sched_migrate_task"),
    )
    .unwrap()
}

proptest! {
    #![proptest_config(config())]

    /// Records laid out as the kernel writes them read back the same, in order, with nothing
    /// left over; other record types are skipped.
    #[test]
    fn perf_records_read_back(records in proptest::collection::vec(perf_record(), 0..8)) {
        let bytes: Vec<u8> = records.iter().flat_map(PerfRecord::bytes).collect();
        let mut seen = Vec::new();
        let torn = parse_records(&bytes, |r| seen.push(PerfRecord::read(r)));
        let want: Vec<PerfRecord> =
            records.into_iter().filter(|r| !matches!(r, PerfRecord::Other(..))).collect();
        prop_assert_eq!(torn, 0);
        prop_assert_eq!(seen, want);
    }

    /// A copy cut anywhere gives exactly the records wholly before the cut; the record whose
    /// declared size runs past the end is never decoded, and its bytes are counted as torn.
    #[test]
    fn a_record_past_the_end_is_never_decoded(
        records in proptest::collection::vec(perf_record(), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let encoded: Vec<Vec<u8>> = records.iter().map(PerfRecord::bytes).collect();
        let bytes: Vec<u8> = encoded.concat();
        let cut = cut.index(bytes.len());
        let (mut whole, mut end) = (Vec::new(), 0);
        for (r, e) in records.iter().zip(&encoded) {
            if end + e.len() > cut {
                break;
            }
            end += e.len();
            if !matches!(r, PerfRecord::Other(..)) {
                whole.push(r.clone());
            }
        }
        let mut seen = Vec::new();
        let torn = parse_records(&bytes[..cut], |r| seen.push(PerfRecord::read(r)));
        prop_assert_eq!(seen, whole);
        prop_assert_eq!(torn, cut - end);
    }

    /// Whatever the bytes, the walk ends, decodes only samples whose raw record lies inside the
    /// copy, and leaves over at most the whole copy.
    #[test]
    fn no_perf_bytes_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let range = bytes.as_ptr_range();
        let torn = parse_records(&bytes, |r| {
            if let RawRecord::Sample { raw, .. } = r {
                assert!(range.contains(&raw.as_ptr()) || raw.is_empty());
                assert!(raw.as_ptr_range().end <= range.end);
            }
        });
        prop_assert!(torn <= bytes.len());
    }

    /// A BPF ring entry is read only once committed, never when discarded, and never past the
    /// data whatever length its word declares; the next entry is the header and the record
    /// further on, rounded up to 8 bytes.
    #[test]
    fn a_bpf_ring_entry_is_read_only_inside_the_data(
        len_word in prop_oneof![any::<u32>(), 0u32..256, (0u32..256).prop_map(|l| l | 1 << 30)],
        at in prop_oneof![0usize..4096, any::<usize>()],
        data_len in prop_oneof![0usize..8192, any::<usize>()],
    ) {
        let e = bpf::ring::entry(len_word, at, data_len);
        prop_assert_eq!(e.is_none(), len_word & (1 << 31) != 0);
        let Some((body, step)) = e else { return Ok(()) };
        let len = (len_word & 0x3fff_ffff) as u64;
        prop_assert!(step % 8 == 0 && step >= 8 + len && step < 16 + len, "{} for {}", step, len);
        let fits = (at as u128) + 8 + u128::from(len) <= data_len as u128;
        let discarded = len_word & (1 << 30) != 0;
        prop_assert_eq!(body.clone(), (fits && !discarded).then(|| at + 8..at + 8 + len as usize));
    }

    /// A BPF ring record's header reads back; anything shorter than the header is no record.
    #[test]
    fn a_bpf_record_reads_back(
        time_ns in any::<u64>(), tid in any::<i32>(), tgid in any::<i32>(), cpu in any::<u32>(),
        slot in any::<u32>(), raw in proptest::collection::vec(any::<u8>(), 0..40),
        cut in 0usize..HEADER,
    ) {
        let mut rec = time_ns.to_ne_bytes().to_vec();
        rec.extend_from_slice(&(((tgid as u32 as u64) << 32) | tid as u32 as u64).to_ne_bytes());
        rec.extend_from_slice(&cpu.to_ne_bytes());
        rec.extend_from_slice(&slot.to_ne_bytes());
        rec.extend_from_slice(&raw);
        let r = bpf::parse_record(&rec).unwrap();
        prop_assert_eq!((r.time_ns, r.tid, r.tgid, r.cpu, r.slot), (time_ns, tid, tgid, cpu, slot));
        prop_assert_eq!(r.raw, &raw[..]);
        prop_assert_eq!(bpf::parse_record(&rec[..cut]), None);
    }

    /// Whatever a ring record holds, decoding it gives an event or nothing: by the raw
    /// programs' layout (an event only for slots 0-3 with the words it needs) and by the
    /// tracepoint formats.
    #[test]
    fn no_bpf_record_panics(
        rec in proptest::collection::vec(any::<u8>(), 0..64),
        slot in prop_oneof![0u32..5, any::<u32>()],
        in_irq in any::<bool>(),
    ) {
        let d = decoder();
        if let Some(mut r) = bpf::parse_record(&rec) {
            r.slot = slot;
            // The words each slot's event is made of: waking 1, switch 4, migrate 2, wakeup 2.
            let words = [1usize, 4, 2, 2];
            let decodable = words.get(slot as usize).is_some_and(|w| r.raw.len() >= 4 * w);
            prop_assert_eq!(bpf::decode_raw(&r).is_some(), decodable);
            let _ = d.decode_slot(slot, r.tid, r.cpu, r.raw, in_irq);
            let _ = d.decode(r.tid, r.cpu, r.raw);
        }
        let _ = d.decode(0, 0, &rec);
        let _ = d.decode_slot(slot, 0, 0, &rec, in_irq);
    }

    /// A tracepoint format printed as tracefs does reads back to its fields.
    #[test]
    fn a_printed_tracepoint_format_reads_back(
        name in "[a-z_]{1,20}",
        id in any::<u64>(),
        fields in proptest::collection::btree_map(
            "[a-z_][a-z0-9_]{0,12}",
            (0usize..4096, prop_oneof![Just(1usize), Just(2), Just(4), Just(8), 0usize..64], any::<bool>(), proptest::option::of(1u32..32)),
            0..8,
        ),
    ) {
        let mut text = format!("name: {name}\nID: {id}\nformat:\n");
        for (f, (offset, size, signed, array)) in &fields {
            let decl = match array {
                Some(n) => format!("char {f}[{n}]"),
                None => format!("unsigned int {f}"),
            };
            text.push_str(&format!(
                "\tfield:{decl};\toffset:{offset};\tsize:{size};\tsigned:{};\n",
                u8::from(*signed)
            ));
        }
        text.push_str("\nprint fmt: \"x=%d\", REC->x\n");
        let f = Format::parse(&text).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&f.name, &name);
        prop_assert_eq!(f.id, id);
        let want: BTreeMap<String, Field> = fields
            .into_iter()
            .map(|(k, (offset, size, signed, _))| (k, Field { offset, size, signed }))
            .collect();
        prop_assert_eq!(f.fields, want);
    }

    /// A field reads an integer only when it lies inside the record and has an integer's width,
    /// and then the value its bytes hold, sign-extended as declared; a field declared past the
    /// record (by one byte, or at the largest offset) reads nothing.
    #[test]
    fn a_field_past_the_record_reads_nothing(
        offset in prop_oneof![0usize..64, Just(usize::MAX), (usize::MAX - 16)..=usize::MAX],
        size in prop_oneof![0usize..10, Just(usize::MAX)],
        signed in any::<bool>(),
        mut raw in proptest::collection::vec(any::<u8>(), 0..48),
        // Half the time the record ends one byte before, at, or one byte after the field.
        edge in proptest::option::of(0usize..3),
    ) {
        if let (Some(e), Some(end)) = (edge, offset.checked_add(size).filter(|e| *e < 80)) {
            raw.resize((end + e).saturating_sub(1), 0x5a);
        }
        let f = Field { offset, size, signed };
        let inside = offset.checked_add(size).is_some_and(|end| end <= raw.len());
        let int = f.int(&raw);
        prop_assert_eq!(int.is_some(), inside && matches!(size, 1 | 2 | 4 | 8));
        prop_assert_eq!(f.text(&raw).is_some(), inside);
        if let Some(v) = int {
            // The value by hand: the bytes in native order, then the sign bit of the width.
            let bytes = &raw[offset..offset + size];
            let mut u: u64 = 0;
            for (i, b) in bytes.iter().enumerate() {
                let shift = if cfg!(target_endian = "little") { i } else { size - 1 - i };
                u |= u64::from(*b) << (8 * shift);
            }
            let bits = 8 * size as u32;
            let want = if signed && bits < 64 && u >> (bits - 1) & 1 == 1 {
                (u | !0u64 << bits) as i64
            } else {
                u as i64
            };
            prop_assert_eq!(v, want);
        }
    }

    #[test]
    fn no_tracepoint_format_panics(text in prop_oneof![
        "(name: [a-z]{0,6}\n)?(ID: [0-9]{0,21}\n)?(\tfield:[a-z ]{0,10}(\\[[0-9]{0,3}\\])?;\toffset:[0-9]{0,21};\tsize:[0-9]{0,21};\tsigned:[01];\n){0,3}",
        any::<String>(),
    ]) {
        if let Ok(f) = Format::parse(&text) {
            let raw = [0xa5u8; 64];
            for field in f.fields.values() {
                let _ = field.int(&raw);
                let _ = field.text(&raw);
            }
        }
    }
}

use cpulab::probe::cgroup::{self, Membership};
use cpulab::probe::cmdline::parse_cmdline;

/// A path component of a cgroup: what systemd and container runtimes name them, plus any
/// character but `/` and the line end.
fn component() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9@._-]{1,12}", "[^/\n\r]{1,8}"]
}

proptest! {
    #![proptest_config(config())]

    /// `/proc/PID/cgroup` printed from memberships reads back, colons in the path included.
    #[test]
    fn a_printed_proc_cgroup_reads_back(
        ms in proptest::collection::vec(
            (any::<u32>(), proptest::collection::vec("[a-z_=]{1,10}", 0..3), "/[^\n\r]{0,30}"),
            0..5,
        ),
    ) {
        let text: String = ms
            .iter()
            .map(|(h, c, p)| format!("{h}:{}:{p}\n", c.join(",")))
            .collect();
        let want: Vec<Membership> = ms
            .into_iter()
            .map(|(hierarchy, controllers, path)| Membership { hierarchy, controllers, path })
            .collect();
        prop_assert_eq!(cgroup::parse_proc_cgroup(&text), want);
    }

    /// A cgroup mount line of `mountinfo` (and `mounts`) reads back its root, mount point and
    /// options, spaces escaped as the kernel escapes them.
    #[test]
    fn a_printed_mountinfo_line_reads_back(
        root in proptest::collection::vec("[a-z0-9 .@-]{1,8}", 0..3),
        point in proptest::collection::vec("[a-z0-9 .@-]{1,8}", 1..4),
        v2 in any::<bool>(),
        options in proptest::collection::vec("[a-z_=0-9]{1,8}", 1..4),
    ) {
        let root = format!("/{}", root.join("/"));
        let point = format!("/{}", point.join("/"));
        let esc = |s: &str| s.replace(' ', "\\040");
        let fs = if v2 { "cgroup2" } else { "cgroup" };
        let opts = options.join(",");
        let info = format!(
            "30 23 0:26 {} {} rw,nosuid shared:4 - {fs} {fs} {opts}\n",
            esc(&root),
            esc(&point)
        );
        let m = cgroup::parse_mountinfo(&info);
        prop_assert_eq!(m.len(), 1);
        prop_assert_eq!((m[0].v2, &m[0].root, &m[0].point, &m[0].options), (v2, &root, &point, &options));
        let mounts = format!("{fs} {} {fs} {opts} 0 0\n", esc(&point));
        let m = cgroup::parse_mounts(&mounts);
        prop_assert_eq!(m.len(), 1);
        prop_assert_eq!((m[0].v2, m[0].root.as_str(), &m[0].point, &m[0].options), (v2, "/", &point, &options));
    }

    /// `cpu.max`, `cpu.cfs_quota_us` and flat keyed files read back what was written.
    #[test]
    fn cgroup_cpu_files_read_back(
        quota in proptest::option::of(any::<u64>()),
        period in any::<u64>(),
        v1 in any::<i64>(),
        keyed in proptest::collection::btree_map("[a-z_]{1,16}", any::<u64>(), 0..6),
    ) {
        let max = format!("{} {period}\n", quota.map_or("max".to_string(), |q| q.to_string()));
        prop_assert_eq!(cgroup::parse_cpu_max(&max), Some((quota, period)));
        prop_assert_eq!(cgroup::parse_v1_quota(&format!("{v1}\n")), Some((v1 > 0).then_some(v1 as u64)));
        let text: String = keyed.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        prop_assert_eq!(cgroup::parse_flat_keyed(&text), keyed);
    }

    #[test]
    fn no_cgroup_file_panics(text in prop_oneof![
        "([0-9]{0,3}:[a-z,]{0,8}:[/a-z:]{0,8}\n){0,3}",
        "([0-9 ]{0,8}[/a-z\\\\040 ]{0,12} - (cgroup2?|tmpfs)? ?[a-z ]{0,8}[a-z,=]{0,10}\n){0,3}",
        "(max|[0-9-]{0,21})? ?[0-9]{0,21}",
        any::<String>(),
    ]) {
        let _ = cgroup::parse_proc_cgroup(&text);
        let _ = cgroup::parse_mounts(&text);
        let _ = cgroup::parse_mountinfo(&text);
        let _ = cgroup::parse_cpu_max(&text);
        let _ = cgroup::parse_v1_quota(&text);
        let _ = cgroup::parse_cpu_stat(&text);
    }

    /// A kernel command line printed from parameters reads back to them, a value with white
    /// space in double quotes; what follows a bare `--` is init's; the last of a key wins.
    #[test]
    fn a_printed_command_line_reads_back(
        params in proptest::collection::vec(
            ("[a-z_.][a-z0-9_.-]{0,12}", proptest::option::of("[a-z0-9,=. :/_-]{0,12}")),
            0..8,
        ),
        init in proptest::option::of("[a-z =-]{0,12}"),
        sep in "[ \t]{1,3}",
    ) {
        prop_assume!(params.iter().all(|(k, _)| k != "--"));
        let word = |(k, v): &(String, Option<String>)| match v {
            Some(v) if v.contains([' ', '\t']) || v.is_empty() => format!("{k}=\"{v}\""),
            Some(v) => format!("{k}={v}"),
            None => k.clone(),
        };
        let mut text: Vec<String> = params.iter().map(word).collect();
        if let Some(i) = &init {
            text.push(format!("-- {i}"));
        }
        let line = format!("{}\n", text.join(&sep));
        let c = parse_cmdline(&line);
        prop_assert_eq!(&c.params, &params, "{:?}", line);
        for (k, _) in &params {
            let last = params.iter().rev().find(|(k2, _)| k2 == k).and_then(|(_, v)| v.as_deref());
            prop_assert_eq!(c.get(k), Some(last.unwrap_or("")));
        }
    }

    #[test]
    fn no_command_line_panics(text in prop_oneof!["[a-z=\" \t.-]{0,40}", any::<String>()]) {
        let c = parse_cmdline(&text);
        // Only a bare `--` ends the kernel's part (`--=` is a parameter, as the kernel reads it).
        prop_assert!(c.params.iter().all(|p| *p != ("--".to_string(), None)));
        let _ = c.select(&["nosmt"], &["haltpoll."]);
    }
}

use cpulab::exporter::settings::{check_cgroup_glob, glob_matches};
use cpulab::watch::slots::{relative_cgroup, wildcard};

/// Text for a glob or a name: a few letters (so that matches happen), wildcards, anything.
fn globish() -> impl Strategy<Value = String> {
    prop_oneof!["[ab*?]{0,8}", "[ab.é*?-]{0,8}", "[^/]{0,6}"]
}

/// Whether `name` matches `pattern`, by trying every split: `*` any run of characters, `?`
/// exactly one character (not one byte).
fn matches_by_hand(p: &[char], n: &[char]) -> bool {
    match p.split_first() {
        None => n.is_empty(),
        Some(('*', rest)) => (0..=n.len()).any(|i| matches_by_hand(rest, &n[i..])),
        Some(('?', rest)) => !n.is_empty() && matches_by_hand(rest, &n[1..]),
        Some((c, rest)) => n.first() == Some(c) && matches_by_hand(rest, &n[1..]),
    }
}

proptest! {
    #![proptest_config(config())]

    /// `--comm` and `--cgroup` wildcards match as found by trying every split.
    #[test]
    fn a_wildcard_matches_as_worked_by_hand(pattern in globish(), name in globish()) {
        let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
        let by_hand = matches_by_hand(&p, &n);
        prop_assert_eq!(wildcard(&pattern, &name), by_hand);
        // One component of an exporter's cgroup glob matches the same way.
        if !pattern.is_empty() && !name.is_empty() {
            prop_assert_eq!(glob_matches(&pattern, &name), by_hand);
        }
    }

    /// The exporter's cgroup globs match component by component as worked by hand, a `*`
    /// never crossing a `/`; a glob without wildcards matches exactly itself.
    #[test]
    fn a_cgroup_glob_matches_as_worked_by_hand(
        glob in proptest::collection::vec(globish(), 1..4),
        path in proptest::collection::vec(globish(), 1..4),
    ) {
        let by_hand = glob.len() == path.len()
            && glob.iter().zip(&path).all(|(g, p)| {
                matches_by_hand(&g.chars().collect::<Vec<_>>(), &p.chars().collect::<Vec<_>>())
            });
        prop_assume!(glob.iter().chain(&path).all(|c| !c.is_empty()));
        prop_assert_eq!(glob_matches(&glob.join("/"), &path.join("/")), by_hand);
        let literal = path.join("/");
        if !literal.contains(['*', '?']) {
            prop_assert!(glob_matches(&literal, &literal));
            let slashed = format!("/{literal}/");
            prop_assert!(glob_matches(&slashed, &literal));
            prop_assert_eq!(glob_matches(&literal, &glob.join("/")), literal == glob.join("/"));
        }
    }

    /// A `--cgroup` value under `/sys/fs/cgroup/` is taken relative to it, slashes trimmed.
    #[test]
    fn a_cgroup_under_the_mount_is_taken_relative(path in proptest::collection::vec(component(), 1..4)) {
        let rel = path.join("/");
        prop_assume!(!rel.starts_with("unified") && !rel.starts_with("sys/fs/cgroup"));
        prop_assert_eq!(relative_cgroup(&format!("/sys/fs/cgroup/{rel}/")), rel.clone());
        // Around the whole value, white space is the shell's, not the path's.
        prop_assume!(rel.trim() == rel);
        prop_assert_eq!(relative_cgroup(&format!(" /sys/fs/cgroup/unified/{rel}\n")), rel.clone());
    }

    /// A glob with a `.` or `..` component, or an empty one inside, is refused; one made of
    /// plain names is taken.
    #[test]
    fn a_cgroup_glob_climbing_out_is_refused(
        path in proptest::collection::vec(component(), 1..4),
        at in any::<prop::sample::Index>(),
        bad in prop_oneof![Just(".."), Just("."), Just("")],
    ) {
        let ok = path.iter().all(|c| c != "." && c != "..");
        prop_assert_eq!(check_cgroup_glob(&path.join("/")).is_ok(), ok);
        let mut worse = path.clone();
        worse.insert(at.index(path.len()) + 1, bad.to_string());
        worse.push("x".into());
        prop_assert!(check_cgroup_glob(&worse.join("/")).is_err(), "{:?}", worse);
    }

    #[test]
    fn no_glob_panics(glob in "[a*?/é.]{0,16}", path in "[a/é.]{0,16}") {
        let _ = glob_matches(&glob, &path);
        let _ = wildcard(&glob, &path);
        let _ = check_cgroup_glob(&glob);
        let _ = relative_cgroup(&glob);
    }
}

use cpulab::pingpong::{PairSpec, Placement, parse_pairs};

fn placement() -> impl Strategy<Value = Placement> {
    prop_oneof![
        Just(Placement::Unpinned),
        (any::<u32>(), any::<u32>()).prop_map(|(a, b)| Placement::Pinned { a, b }),
        any::<u32>().prop_map(|a| Placement::ResponderUnpinned { a }),
        any::<u32>().prop_map(|b| Placement::InitiatorUnpinned { b }),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// A `--pairs` list printed from placements reads back to them, in order, with any spaces
    /// around its parts.
    #[test]
    fn a_printed_pairs_list_reads_back(list in proptest::collection::vec(placement(), 1..8), space in "[ ]{0,2}") {
        let text: Vec<String> = list
            .iter()
            .map(|p| match p {
                Placement::Pinned { a, b } => format!("{space}{a}{space}:{space}{b}{space}"),
                Placement::ResponderUnpinned { a } => format!("{space}{a}{space}:{space}*{space}"),
                Placement::InitiatorUnpinned { b } => {
                    format!("{space}unpinned{space}:{space}{b}{space}")
                }
                Placement::Unpinned => format!("{space}unpinned{space}"),
            })
            .collect();
        prop_assert_eq!(parse_pairs(&text.join(",")), Ok(PairSpec::List(list)));
    }

    /// Whatever `--pairs` holds for pingpong or pair, it is read or refused in one line.
    #[test]
    fn no_pairs_value_panics(text in prop_oneof![
        "(auto|all|unpinned|any|\\*|[0-9]{0,11}(-[0-9]{0,3})?:[0-9]{0,11}|[0-9,:-]{0,6})(,[0-9:a-z*-]{0,8}){0,3}",
        any::<String>(),
    ]) {
        if let Err(e) = parse_pairs(&text) {
            prop_assert!(!e.contains('\n'));
        }
        let machine = cpulab::machine::Machine::detect(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/intel-2s"
        )))
        .unwrap();
        let _ = cpulab::pair::command::parse_pairs(&machine, &text);
    }
}

use cpulab::history::when;

/// Days in a month of the proleptic Gregorian calendar, by the leap-year rule.
fn days_in_month(y: i64, m: i64) -> i64 {
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ][m as usize - 1]
}

proptest! {
    #![proptest_config(config())]

    /// A time the history prints reads back to that minute, the ` UTC` it prints included.
    #[test]
    fn a_printed_time_reads_back_to_its_minute(t in -62_135_596_800i64..253_402_300_799) {
        let text = when::utc(t);
        prop_assert_eq!(when::parse(&text, 0), Some(t - t.rem_euclid(60)), "{}", text);
        prop_assert_eq!(when::parse(text.trim_end_matches(" UTC"), 0), Some(t - t.rem_euclid(60)), "{}", text);
    }

    /// A date is read only when it exists, and then prints as itself; counted from the
    /// epoch by hand, month by month.
    #[test]
    fn a_date_reads_only_when_it_exists(y in 1970i64..2400, m in 1i64..=12, d in 1i64..=31, h in 0i64..24, mi in 0i64..60) {
        let text = format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}");
        let days: i64 = (1970..y).map(|y| (1..=12).map(|m| days_in_month(y, m)).sum::<i64>()).sum::<i64>()
            + (1..m).map(|m| days_in_month(y, m)).sum::<i64>()
            + d - 1;
        let want = (d <= days_in_month(y, m)).then_some(days * 86_400 + h * 3600 + mi * 60);
        prop_assert_eq!(when::parse(&text, 0), want, "{}", text);
        if let Some(t) = want {
            prop_assert_eq!(when::utc(t), format!("{y:04}-{m:02}-{d:02} {h:02}:{mi:02} UTC"));
        }
    }

    /// An age is that many minutes, hours or days before now.
    #[test]
    fn an_age_counts_back_from_now(n in 0i64..1_000_000, unit in 0usize..3, now in -1i64 << 40..1i64 << 40) {
        let (suffix, secs) = [("m", 60), ("h", 3600), ("d", 86_400)][unit];
        prop_assert_eq!(when::parse(&format!("{n}{suffix}"), now), Some(now - n * secs));
    }

    /// A time of day out of range (a negative hour or minute included) is refused.
    #[test]
    fn an_hour_out_of_range_is_refused(h in prop_oneof![-100i64..0, 24i64..100], mi in prop_oneof![-100i64..0, 60i64..100, 0i64..60]) {
        prop_assert_eq!(when::parse(&format!("2025-01-01T{h}:00"), 0), None);
        prop_assert_eq!(when::parse(&format!("2025-01-01T00:{mi}"), 0).is_some(), (0..60).contains(&mi));
    }

    #[test]
    fn no_date_panics(text in prop_oneof![
        "-?[0-9]{1,20}[mhd]?",
        "-?[0-9]{1,20}-[0-9-]{1,20}-[0-9-]{1,20}([T ][0-9-]{1,20}(:[0-9-]{1,20}){0,2})?( UTC)?",
        any::<String>(),
    ], now in any::<i64>(), t in any::<i64>()) {
        let _ = when::parse(&text, now);
        let _ = when::utc(t);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever group path `/proc/self/cgroup` gives (inside a cgroup namespace the kernel
    /// writes `/..` for a group outside it), and whatever subtree the mount is, the group
    /// directory read is inside the mount: never above it, never a `..` in it.
    #[test]
    fn a_group_directory_stays_inside_its_mount(
        path in proptest::collection::vec(prop_oneof![Just("..".to_string()), Just(".".to_string()), "[a-z]{1,6}"], 0..5),
        mount_root in proptest::collection::vec("[a-z]{1,6}", 0..2),
        v2 in any::<bool>(),
    ) {
        use cpulab::probe::cgroup::{Layout, Mount};
        use cpulab::probe::reading::Reading;
        let d = tempfile::tempdir().unwrap();
        let point = "/sys/fs/cgroup";
        for dir in ["a/b", "b"] {
            std::fs::create_dir_all(d.path().join("sys/fs/cgroup").join(dir)).unwrap();
        }
        let layout = Layout {
            root: d.path().to_path_buf(),
            membership: Reading::Value(vec![Membership {
                hierarchy: if v2 { 0 } else { 3 },
                controllers: if v2 { vec![] } else { vec!["cpu".into()] },
                path: format!("/{}", path.join("/")),
            }]),
            mounts: vec![Mount {
                v2,
                root: format!("/{}", mount_root.join("/")),
                point: point.into(),
                options: vec!["rw".into(), "cpu".into()],
            }],
        };
        let Reading::Value(g) = layout.dir_for("cpu") else {
            return Err(TestCaseError::fail("no group directory"));
        };
        prop_assert!(g.dir.starts_with(&g.mount), "{:?} outside {:?}", g.dir, g.mount);
        prop_assert!(
            g.dir.components().all(|c| c != std::path::Component::ParentDir),
            "{:?} from {:?}", g.dir, path
        );
        // By hand: the path below the mount's subtree, whole components (the whole path when
        // it is not below it), if that directory exists; else the mount.
        let comps: Vec<&String> = path.iter().filter(|c| *c != ".").collect();
        let want = if comps.iter().any(|c| *c == "..") {
            g.mount.clone()
        } else {
            let below = comps.len() >= mount_root.len()
                && comps.iter().zip(&mount_root).all(|(a, b)| *a == b);
            let rel = if below { &comps[mount_root.len()..] } else { &comps[..] };
            let d = rel.iter().fold(g.mount.clone(), |d, c| d.join(c));
            if d.is_dir() { d } else { g.mount.clone() }
        };
        prop_assert_eq!(g.dir, want);
    }
}

proptest! {
    #![proptest_config(config())]

    /// A `cgroup.procs` file printed from pids, one a line, reads back to them.
    #[test]
    fn a_printed_cgroup_procs_reads_back(pids in proptest::collection::btree_set(1i32..i32::MAX, 0..20)) {
        let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
        prop_assert_eq!(cpulab::watch::targets::parse_procs(&text), pids);
    }

    /// The BPF targets table's entry word for a process and slot reads back to them; a free
    /// word (tgid 0) holds nothing; every id has a bucket inside the table.
    #[test]
    fn a_targets_entry_reads_back(tgid in any::<u32>(), slot in any::<u32>()) {
        use cpulab::watch::bpf::table::{TARGET_BUCKETS, bucket, decode, entry};
        let want = (tgid != 0).then_some((tgid, slot));
        prop_assert_eq!(decode(entry(tgid, slot)), want);
        prop_assert!(bucket(tgid, TARGET_BUCKETS) < TARGET_BUCKETS);
    }

    /// Any set of live processes up to `PID_MAX_LIMIT`, fewer than a bucket's ways for each
    /// bucket they fall in, is placed whole: each process reads back its own slot, whatever
    /// its pid modulo 32,768 (the size of the array the table replaced).
    #[test]
    fn live_processes_are_placed_apart(pids in proptest::collection::btree_set(1u32..=4_194_304, 0..300)) {
        use cpulab::watch::bpf::table::{TARGET_BUCKETS, TARGET_ENTRIES, WAYS, bucket, set, slot_of};
        use std::sync::atomic::AtomicU64;
        let t: Vec<AtomicU64> = (0..TARGET_ENTRIES).map(|_| AtomicU64::new(0)).collect();
        let mut per_bucket = std::collections::HashMap::new();
        for &p in &pids {
            let n = per_bucket.entry(bucket(p, TARGET_BUCKETS)).or_insert(0u32);
            *n += 1;
            prop_assert_eq!(set(&t, p, p % 7), *n <= WAYS);
        }
        for &p in &pids {
            let fits = per_bucket[&bucket(p, TARGET_BUCKETS)] <= WAYS;
            if fits {
                prop_assert_eq!(slot_of(&t, p), Some(p % 7));
            }
        }
    }
}

use cpulab::wakeups::GroupBy;
use cpulab::watch::groups::group_name;

proptest! {
    #![proptest_config(config())]

    /// Any cgroup path names its group without panicking; a docker container's scope is its
    /// short id under whatever slices hold it, and a path with no unit and no container is the
    /// command name, under every way of grouping but the path itself.
    #[test]
    fn cgroup_paths_name_their_group(
        above in proptest::collection::vec(component(), 0..5),
        id in "[0-9a-f]{64}",
        comm in "[a-z]{1,15}",
    ) {
        let path = format!("/{}", above.join("/"));
        for by in [GroupBy::Auto, GroupBy::Unit, GroupBy::Container, GroupBy::Cgroup, GroupBy::Comm] {
            prop_assert!(!group_name(&path, &comm, by).is_empty());
        }
        let plain = above.iter().all(|c| {
            !c.ends_with(".service") && !c.ends_with(".scope") && !c.contains("pod")
                && !c.contains("docker") && c.len() < 12
        });
        if plain {
            prop_assert_eq!(group_name(&path, &comm, GroupBy::Auto), comm.clone());
        }
        let docker = format!("{path}/docker-{id}.scope");
        let outside_pods = above.iter().all(|c| !c.contains("pod"));
        if outside_pods {
            prop_assert_eq!(group_name(&docker, &comm, GroupBy::Auto), format!("docker/{}", &id[..12]));
        }
        prop_assert_eq!(group_name(&docker, &comm, GroupBy::Comm), comm);
    }
}
