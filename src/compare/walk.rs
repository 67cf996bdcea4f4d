//! Turning any cpulab result into a flat list of named figures.
//!
//! `compare` must work on results it does not know the shape of (a pingpong run, a doctor report,
//! a future experiment), so it does not deserialise them into their structs. It walks the JSON and
//! names every figure by its path. Two things make paths stable between two runs:
//!
//! - elements of an array of objects are named by their identifying fields (`method`, `class`,
//!   `cpus`, `threads`, `policy`, ...) rather than by their index, so a run that measured one
//!   placement more, or in another order, still pairs up figure by figure;
//! - raw samples are recognised by their key (`samples`, `values`, `batch_means_ns`, anything
//!   with `samples` in it) and turn their parent into a figure that can be tested for
//!   significance. A mean-with-interval object (`mean`, `ci95_low`, `ci95_high`, `n`) is one
//!   figure, not four numbers; when it sits beside exactly one sample array, the two are merged.
//!
//! The subtrees that describe the run rather than measure it (`conditions`, `probe`, `facts`) are
//! not figures: their differing leaves are collected as context (kernel 5.10 vs 6.1).

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Fields that identify an element of an array of runs, in the order they appear in its name.
pub const IDENTITY_FIELDS: &[&str] = &[
    "id",
    "kind",
    "name",
    "preset",
    "workload",
    "method",
    "placement",
    "class",
    "policy",
    "variant",
    "cpus",
    "pair",
    "a",
    "b",
    "server_cpus",
    "client_cpus",
    "threads",
    "workers",
    "burners",
    "clients",
    "pairs",
    "tasks",
    "label",
];

/// Subtrees that are context, not measurement.
pub const CONTEXT_KEYS: &[&str] = &["conditions", "probe", "facts"];

/// Context leaves that differ between any two runs and say nothing (when, for how long).
const CONTEXT_NOISE: &[&str] = &["started_unix_s", "window_s"];

/// Keys that are bookkeeping, not figures.
const SKIP_KEYS: &[&str] = &["cpulab_schema", "started_unix_s", "n", "count"];

/// One figure of a result.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Where it sits, e.g. `wakeup[method=pipe,class=same-cpu].rtt_ns`.
    pub path: String,
    /// Its value: the mean of its samples, the mean of its interval, or the number itself.
    pub value: f64,
    /// Raw samples, when the result kept them.
    pub samples: Option<Vec<f64>>,
    /// A 95% interval stated by the result (when it had no raw samples).
    pub ci95: Option<(f64, f64)>,
}

/// Everything found in one document.
#[derive(Clone, Debug, Default)]
pub struct Flat {
    pub figures: BTreeMap<String, Figure>,
    /// Context leaves (`conditions.kernel` -> "6.1.0-18-amd64"), as display text.
    pub context: BTreeMap<String, String>,
}

/// Whether `key` holds raw samples.
pub fn is_sample_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k == "values" || k == "raw" || k.contains("samples") || k.starts_with("batch_means")
}

fn numbers(v: &Value) -> Option<Vec<f64>> {
    let a = v.as_array()?;
    let out: Vec<f64> = a.iter().filter_map(Value::as_f64).collect();
    (out.len() == a.len() && !out.is_empty()).then_some(out)
}

fn mean_ci(v: &Value) -> Option<(f64, Option<(f64, f64)>)> {
    let o = v.as_object()?;
    let mean = o.get("mean")?.as_f64()?;
    let lo = o.get("ci95_low").and_then(Value::as_f64);
    let hi = o.get("ci95_high").and_then(Value::as_f64);
    let n = o.get("n").and_then(Value::as_u64).unwrap_or(2);
    let ci = match (lo, hi) {
        (Some(l), Some(h)) if n >= 2 => Some((l, h)),
        _ => None,
    };
    Some((mean, ci))
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The name of one element of an array of objects: its identifying fields, or its index.
pub fn element_name(o: &Map<String, Value>, index: usize) -> String {
    let parts: Vec<String> = IDENTITY_FIELDS
        .iter()
        .filter_map(|f| Some(format!("{f}={}", scalar_text(o.get(*f)?)?)))
        .collect();
    if parts.is_empty() {
        index.to_string()
    } else {
        parts.join(",")
    }
}

/// Flattens a result document.
pub fn flatten(doc: &Value) -> Flat {
    let mut flat = Flat::default();
    walk(doc, "", &mut flat, false);
    flat
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(v: &Value, path: &str, flat: &mut Flat, context: bool) {
    match v {
        Value::Object(o) if context => {
            for (k, child) in o {
                walk(child, &join(path, k), flat, true);
            }
        }
        Value::Object(o) => walk_object(o, path, flat),
        Value::Array(a) => walk_array(a, path, flat, context),
        leaf if context => {
            let key = path.rsplit('.').next().unwrap_or(path);
            if CONTEXT_NOISE.contains(&key) {
                return;
            }
            if let Some(t) = scalar_text(leaf) {
                flat.context.insert(path.to_string(), t);
            }
        }
        Value::Number(n) => {
            let key = path.rsplit('.').next().unwrap_or(path);
            if let Some(x) = n.as_f64().filter(|_| !SKIP_KEYS.contains(&key)) {
                flat.figures.insert(path.to_string(), plain(path, x));
            }
        }
        _ => {}
    }
}

fn plain(path: &str, value: f64) -> Figure {
    Figure {
        path: path.to_string(),
        value,
        samples: None,
        ci95: None,
    }
}

fn walk_object(o: &Map<String, Value>, path: &str, flat: &mut Flat) {
    let sample_keys: Vec<&String> = o
        .iter()
        .filter(|(k, v)| is_sample_key(k) && numbers(v).is_some())
        .map(|(k, _)| k)
        .collect();
    let ci_keys: Vec<&String> = o
        .iter()
        .filter(|(_, v)| mean_ci(v).is_some())
        .map(|(k, _)| k)
        .collect();
    // One interval beside one sample array: they describe the same figure.
    let merged =
        (sample_keys.len() == 1 && ci_keys.len() == 1).then(|| (sample_keys[0], ci_keys[0]));
    for (k, child) in o {
        let p = join(path, k);
        if CONTEXT_KEYS.contains(&k.as_str()) {
            walk(child, &p, flat, true);
        } else if let Some(samples) = is_sample_key(k).then(|| numbers(child)).flatten() {
            if merged.is_some() {
                continue;
            }
            // `{"samples": [...]}` alone in an object names the object; otherwise the key does.
            let fig_path = if o.len() == 1 && !path.is_empty() {
                path.to_string()
            } else {
                p
            };
            let value = samples.iter().sum::<f64>() / samples.len() as f64;
            flat.figures.insert(
                fig_path.clone(),
                Figure {
                    path: fig_path,
                    value,
                    samples: Some(samples),
                    ci95: None,
                },
            );
        } else if let Some((mean, ci)) = mean_ci(child) {
            let samples = merged
                .filter(|(_, c)| *c == k)
                .and_then(|(s, _)| numbers(&o[s.as_str()]));
            flat.figures.insert(
                p.clone(),
                Figure {
                    path: p,
                    value: mean,
                    samples,
                    ci95: ci,
                },
            );
        } else {
            walk(child, &p, flat, false);
        }
    }
}

fn walk_array(a: &[Value], path: &str, flat: &mut Flat, context: bool) {
    // A bare list of numbers that is not a sample array (a histogram, a CPU list) has no
    // identity per element and no noise estimate: it is not compared.
    if !context && numbers(&Value::Array(a.to_vec())).is_some() {
        return;
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, el) in a.iter().enumerate() {
        let name = match el {
            Value::Object(o) => element_name(o, i),
            _ => i.to_string(),
        };
        let n = seen.entry(name.clone()).or_insert(0);
        *n += 1;
        // Two elements with the same identity: the second is `#2`, and so on.
        let name = if *n > 1 { format!("{name}#{n}") } else { name };
        walk(el, &format!("{path}[{name}]"), flat, context);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn runs_are_named_by_identity_not_index() {
        let a = json!({"runs": [
            {"method": "pipe", "class": "same-cpu", "rtt_ns": 5000.0},
            {"method": "pipe", "class": "unpinned", "rtt_ns": 9000.0}
        ]});
        let b = json!({"runs": [
            {"method": "pipe", "class": "unpinned", "rtt_ns": 9100.0},
            {"method": "pipe", "class": "same-cpu", "rtt_ns": 5100.0}
        ]});
        let (fa, fb) = (flatten(&a), flatten(&b));
        let k = "runs[method=pipe,class=same-cpu].rtt_ns";
        assert_eq!(fa.figures[k].value, 5000.0);
        assert_eq!(fb.figures[k].value, 5100.0);
    }

    #[test]
    fn samples_and_interval_merge_into_one_figure() {
        let d = json!({"run": {
            "rtt_ns": {"mean": 2.0, "ci95_low": 1.0, "ci95_high": 3.0, "n": 3},
            "batch_means_ns": [1.0, 2.0, 3.0],
            "p99_ns": 7
        }});
        let f = flatten(&d);
        let rtt = &f.figures["run.rtt_ns"];
        assert_eq!(rtt.samples.as_deref(), Some(&[1.0, 2.0, 3.0][..]));
        assert_eq!(rtt.ci95, Some((1.0, 3.0)));
        assert!(!f.figures.contains_key("run.batch_means_ns"));
        assert_eq!(f.figures["run.p99_ns"].value, 7.0);
    }

    #[test]
    fn lone_samples_name_their_parent_and_context_is_kept_apart() {
        let d = json!({
            "cpulab_schema": 1,
            "conditions": {"kernel": "6.1", "online_cpus": "0-1"},
            "tps": {"samples": [10.0, 12.0]}
        });
        let f = flatten(&d);
        assert_eq!(f.figures["tps"].value, 11.0);
        assert_eq!(f.context["conditions.kernel"], "6.1");
        assert!(!f.figures.contains_key("cpulab_schema"));
    }

    #[test]
    fn duplicate_identities_are_numbered() {
        let d = json!({"r": [{"name": "x", "v": 1}, {"name": "x", "v": 2}]});
        let f = flatten(&d);
        assert!(f.figures.contains_key("r[name=x].v"));
        assert!(f.figures.contains_key("r[name=x#2].v"));
    }
}

#[cfg(test)]
mod walk_tests {
    use super::*;
    use serde_json::json;

    fn keys(f: &Flat) -> Vec<&str> {
        f.figures.keys().map(String::as_str).collect()
    }

    #[test]
    fn sample_keys_by_their_name() {
        for k in [
            "values",
            "Values",
            "raw",
            "samples",
            "tps_samples",
            "batch_means_ns",
            "Batch_Means_us",
        ] {
            assert!(is_sample_key(k), "{k}");
        }
        for k in ["value", "rawness", "rtt_ns", "means_batch", "sample"] {
            assert!(!is_sample_key(k), "{k}");
        }
    }

    #[test]
    fn only_whole_non_empty_lists_of_numbers_are_samples() {
        let f = flatten(&json!({
            "x": {"samples": [1.0, "a"]},
            "y": {"samples": []},
            "z": 4
        }));
        assert_eq!(keys(&f), ["x.samples[0]", "z"]);
        assert_eq!(f.figures["x.samples[0]"].value, 1.0);
        assert_eq!(f.figures["x.samples[0]"].samples, None);
    }

    #[test]
    fn a_stated_interval_needs_two_runs_and_both_ends() {
        let f = flatten(&json!({
            "one": {"mean": 5.0, "ci95_low": 4.0, "ci95_high": 6.0, "n": 1},
            "two": {"mean": 5.0, "ci95_low": 4.0, "ci95_high": 6.0, "n": 2},
            "unsaid": {"mean": 5.0, "ci95_low": 4.0, "ci95_high": 6.0},
            "low_only": {"mean": 5.0, "ci95_low": 4.0, "n": 9}
        }));
        assert_eq!(f.figures["one"].ci95, None);
        assert_eq!(f.figures["two"].ci95, Some((4.0, 6.0)));
        assert_eq!(f.figures["unsaid"].ci95, Some((4.0, 6.0)));
        assert_eq!(f.figures["low_only"].ci95, None);
        assert_eq!(f.figures["low_only"].value, 5.0);
        assert_eq!(keys(&f), ["low_only", "one", "two", "unsaid"]);
    }

    #[test]
    fn element_names_use_every_scalar_identity_in_order() {
        let o = json!({"label": "l", "threads": 4, "a": true, "method": "pipe", "cpus": [0, 1], "v": 2});
        assert_eq!(
            element_name(o.as_object().unwrap(), 7),
            "method=pipe,a=true,threads=4,label=l"
        );
        let none = json!({"v": 1, "cpus": null});
        assert_eq!(element_name(none.as_object().unwrap(), 7), "7");
        let f = flatten(
            &json!({"r": [{"v": 1}, {"v": 2}, 3, {"name": "x", "v": 4}, {"name": "x", "v": 5}, {"name": "x", "v": 6}]}),
        );
        assert_eq!(
            keys(&f),
            [
                "r[0].v",
                "r[1].v",
                "r[2]",
                "r[name=x#2].v",
                "r[name=x#3].v",
                "r[name=x].v"
            ]
        );
        assert_eq!(f.figures["r[name=x#3].v"].value, 6.0);
    }

    #[test]
    fn context_keeps_its_lists_and_drops_its_noise() {
        let f = flatten(&json!({
            "conditions": {
                "started_unix_s": 1700000000,
                "window_s": 5,
                "cpus": [0, 1],
                "smt": true,
                "none": null,
                "nested": {"kernel": "6.1"}
            },
            "probe": {"runs": [{"name": "a", "x": 1.5}]},
            "n": 5,
            "count": 3,
            "run": {"count": 2, "n": 4, "rtt_ns": 10},
            "histogram": [1, 2, 3]
        }));
        let ctx: Vec<(&str, &str)> = f
            .context
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            ctx,
            [
                ("conditions.cpus[0]", "0"),
                ("conditions.cpus[1]", "1"),
                ("conditions.nested.kernel", "6.1"),
                ("conditions.smt", "true"),
                ("probe.runs[name=a].name", "a"),
                ("probe.runs[name=a].x", "1.5"),
            ]
        );
        assert_eq!(keys(&f), ["run.rtt_ns"]);
    }

    #[test]
    fn samples_name_their_parent_only_when_alone_under_a_name() {
        let f = flatten(&json!({"samples": [1.0, 3.0]}));
        assert_eq!(keys(&f), ["samples"]);
        assert_eq!(f.figures["samples"].value, 2.0);
        let f = flatten(&json!({"tps": {"samples": [10.0, 12.0, 17.0], "unit": "tx/s"}}));
        assert_eq!(keys(&f), ["tps.samples"]);
        assert_eq!(f.figures["tps.samples"].value, 13.0);
        assert_eq!(
            f.figures["tps.samples"].samples.as_deref(),
            Some(&[10.0, 12.0, 17.0][..])
        );
        assert_eq!(f.figures["tps.samples"].ci95, None);
    }

    #[test]
    fn samples_merge_only_with_a_single_interval() {
        // Two intervals beside one sample array: nothing is merged.
        let f = flatten(&json!({"run": {
            "rtt_ns": {"mean": 2.0, "ci95_low": 1.0, "ci95_high": 3.0},
            "p99_ns": {"mean": 9.0, "ci95_low": 8.0, "ci95_high": 10.0},
            "samples": [1.0, 2.0, 6.0]
        }}));
        assert_eq!(keys(&f), ["run.p99_ns", "run.rtt_ns", "run.samples"]);
        assert_eq!(f.figures["run.rtt_ns"].samples, None);
        assert_eq!(f.figures["run.samples"].value, 3.0);
        // A bare list of numbers whose key is not a sample key does not count as samples.
        let f = flatten(&json!({"run": {
            "rtt_ns": {"mean": 2.0, "ci95_low": 1.0, "ci95_high": 3.0},
            "samples": [1.0, 2.0, 3.0],
            "histogram": [5, 6]
        }}));
        assert_eq!(keys(&f), ["run.rtt_ns"]);
        assert_eq!(
            f.figures["run.rtt_ns"].samples.as_deref(),
            Some(&[1.0, 2.0, 3.0][..])
        );
        assert_eq!(f.figures["run.rtt_ns"].value, 2.0);
        // One sample array and no interval: the samples are the figure.
        let f = flatten(&json!({"run": {"samples": [4.0, 6.0], "rtt_ns": 3}}));
        assert_eq!(keys(&f), ["run.rtt_ns", "run.samples"]);
        assert_eq!(f.figures["run.samples"].value, 5.0);
    }
}
