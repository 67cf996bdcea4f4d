//! docs/architecture.md as a test: the layer table is written once below (as data, checked
//! against the document's own table), every file of `src/` is read, and each import is placed:
//! a module imports only modules in layers below its own (or its own folder), and no two
//! top-level modules import each other. It also lists the functions longer than 100 and 150
//! lines.
//!
//! What the rules forbid but holds today is in the allow-lists, each entry with its reason, so
//! the test fails on any new violation; an entry that no longer matches anything is printed as
//! stale, to be removed. The counts are printed (`cargo test --test architecture --
//! --nocapture`) so a reader sees where things stand.
//!
//! Imports counted: `crate::X` paths anywhere in code (`use crate::X`, `use crate::{X, Y}`,
//! `crate::X::f()`), `cpulab::X` in `main.rs`, and `super::` paths resolved from the file's
//! module. `#[cfg(test)]` items, comments, strings and char literals are left out (tests may
//! reach anywhere). The reading is a small lexer, not a compiler: a function's length counts its
//! lines from the `fn` line to its closing brace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// docs/architecture.md's table, top to bottom: each layer's name and its top-level modules
/// (files and folders directly under `src/`).
const LAYERS: &[(&str, &[&str])] = &[
    ("entry", &["main"]),
    ("dispatch", &["cli"]),
    ("commands", &["commands"]),
    ("fleet view", &["fleet"]),
    ("long-running services", &["exporter", "history"]),
    ("registry", &["registry"]),
    ("trial, remedy", &["trial", "remedy"]),
    ("doctor, sim", &["doctor", "sim"]),
    ("compare", &["compare"]),
    (
        "experiments",
        &[
            "pingpong",
            "pair",
            "share",
            "scale",
            "oscost",
            "messaging",
            "bursty",
            "watch",
            "host",
        ],
    ),
    ("probe", &["probe"]),
    ("experiment interface", &["experiment"]),
    ("output path", &["emit"]),
    ("result format, machine", &["report", "machine"]),
    ("virtual machines", &["vmm"]),
    (
        "observation",
        &[
            "counters",
            "bpf",
            "topology",
            "affinity",
            "wakeups",
            "perf_event",
            "load",
        ],
    ),
    (
        "bottom",
        &["output", "units", "stats", "cpulist", "error", "signals"],
    ),
];

/// Imports within one layer that the document allows ("`output` may use `units`").
const SAME_LAYER_ALLOWED: &[(&str, &str)] = &[("output", "units")];

/// Modules that exist only under `#[cfg(test)]`, outside the layers.
const TEST_ONLY: &[&str] = &["testing"];

/// Known imports of a module in the importer's own layer or above it: (importing file, imported
/// file, why it stands). Remove an entry when its import goes. At 2376ac9 none is upward; all
/// are between two modules of one layer, which the table's "may import" column does not list.
const IMPORTS_ALLOWED: &[(&str, &str, &str)] = &[
    (
        "src/affinity.rs",
        "src/topology.rs",
        "observation: the allowed-CPU mask is read as a set of the topology's CPUs",
    ),
    (
        "src/counters/perf.rs",
        "src/perf_event.rs",
        "observation: the perf counters open their events through the crate's one \
         perf_event_open wrapper",
    ),
    (
        "src/bpf/sys.rs",
        "src/perf_event.rs",
        "observation: a tracepoint's BPF program is attached through the crate's one \
         perf_event_open wrapper",
    ),
    (
        "src/load.rs",
        "src/affinity.rs",
        "observation: the load generator pins its threads with affinity::pin_self",
    ),
    (
        "src/load.rs",
        "src/counters/mod.rs",
        "observation: other load is judged from counters::SystemDelta",
    ),
    (
        "src/report/html.rs",
        "src/machine.rs",
        "result format, machine: every page renders the run's machine::Conditions",
    ),
    (
        "src/units.rs",
        "src/error.rs",
        "bottom: a flag's unit parse error is error::bad_input (exit 2)",
    ),
    (
        "src/exporter/doctor.rs",
        "src/history/mod.rs",
        "services: the exporter serves the newest doctor findings from the history, read-only",
    ),
    (
        "src/exporter/doctor.rs",
        "src/history/store.rs",
        "services: the newest doctor findings are read with history::store::Store",
    ),
    (
        "src/exporter/mod.rs",
        "src/history/fingerprint.rs",
        "services: the host key of the findings is the history's fingerprint of the probe",
    ),
    (
        "src/exporter/mod.rs",
        "src/history/mod.rs",
        "services: --history's history::Location decides whether findings are served",
    ),
    (
        "src/exporter/settings.rs",
        "src/history/mod.rs",
        "services: the settings hold --history as a history::Location",
    ),
];

/// Known pairs of top-level modules that import each other (in either order). Remove an entry
/// when the loop is broken. None at 2376ac9.
const LOOPS_ALLOWED: &[(&str, &str, &str)] = &[];

/// Known functions longer than [`LONG`] lines: (file, function, why). Remove an entry when the
/// function is split.
const LONG_ALLOWED: &[(&str, &str, &str)] = &[];

/// Lines above which a function is reported, and above which it fails the test.
const NOTED: usize = 100;
const LONG: usize = 150;

// ---------------------------------------------------------------------------------------------
// Reading the source.

/// Blanks a quoted literal starting at `i` (escapes included, line breaks kept); returns the
/// index after its closing quote.
fn blank_quoted(c: &[char], mut i: usize, quote: char, out: &mut String) -> usize {
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    out.push(' ');
    i += 1;
    while i < c.len() && c[i] != quote {
        if c[i] == '\\' {
            blank(out, c[i]);
            i += 1;
        }
        if i < c.len() {
            blank(out, c[i]);
            i += 1;
        }
    }
    out.push(' ');
    i + 1
}

/// The source with comments, strings and char literals blanked (newlines kept, so lines still
/// count), so that braces and paths are only the code's.
fn strip(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let (ch, next) = (c[i], c.get(i + 1).copied());
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if ch == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && matches!(next, Some('"' | '#'))
            && {
                let h = c[i + 1..].iter().take_while(|&&x| x == '#').count();
                c.get(i + 1 + h) == Some(&'"')
            }
        {
            // A raw string: r"..." or r#"..."#, as many hashes to close as to open.
            let h = c[i + 1..].iter().take_while(|&&x| x == '#').count();
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', h))
                .collect();
            for _ in 0..(h + 2) {
                out.push(' ');
            }
            i += h + 2;
            while i < c.len() && !c[i..].starts_with(&close) {
                blank(&mut out, c[i]);
                i += 1;
            }
            for _ in 0..close.len().min(c.len() - i) {
                out.push(' ');
            }
            i += close.len();
        } else if ch == '"' {
            i = blank_quoted(&c, i, '"', &mut out);
        } else if ch == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // A char literal (a lifetime has no closing quote two characters on).
            i = blank_quoted(&c, i, '\'', &mut out);
        } else {
            out.push(ch);
            i += 1;
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// Tokens of stripped source, each with its line (1-based).
fn tokens(code: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let mut word: String = c[start..i].iter().collect();
            // A raw identifier, r#type, is the identifier.
            if word == "r" && c.get(i) == Some(&'#') {
                let s = i + 1;
                i = s;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                word = c[s..i].iter().collect();
            }
            out.push((Tok::Ident(word), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// For each `{`, `(` or `[`, the index of the token that closes it.
fn matching(toks: &[(Tok, usize)]) -> BTreeMap<usize, usize> {
    let mut stack = Vec::new();
    let mut out = BTreeMap::new();
    for (i, (t, _)) in toks.iter().enumerate() {
        match t {
            Tok::Punct('{' | '(' | '[') => stack.push(i),
            Tok::Punct('}' | ')' | ']') => {
                if let Some(o) = stack.pop() {
                    out.insert(o, i);
                }
            }
            _ => {}
        }
    }
    out
}

/// The stripped source with every `#[cfg(test)]` item blanked: up to its `;`, or through its
/// braces.
fn without_test_items(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= out.len() {
        if out[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i + marker.len();
        let (mut depth, mut braces) = (0i32, 0i32);
        while j < out.len() {
            match out[j] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 && braces == 0 => break,
                '{' if depth == 0 => braces += 1,
                '}' if depth == 0 => {
                    braces -= 1;
                    if braces == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        let end = (j + 1).min(out.len());
        for ch in &mut out[start..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = j + 1;
    }
    out.into_iter().collect()
}

/// One file of `src/`: its path (`src/watch/bpf/ring.rs`), module path (`watch::bpf::ring`)
/// and code without comments, strings or test items.
struct Source {
    file: String,
    module: Vec<String>,
    code: String,
}

/// Files of modules declared under `#[cfg(test)]` (`#[cfg(test)] mod interp;`): test code,
/// which the function-length rule leaves alone as it leaves `#[cfg(test)]` items alone.
fn test_only_files(root: &Path, srcs: &[Source]) -> BTreeSet<String> {
    let decl =
        regex::Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;").unwrap();
    let mut out = BTreeSet::new();
    for s in srcs {
        let raw = std::fs::read_to_string(root.join(&s.file)).unwrap();
        let dir = if s.file.ends_with("/mod.rs") || s.file == "src/lib.rs" {
            s.file.rsplit_once('/').unwrap().0.to_string()
        } else {
            s.file.trim_end_matches(".rs").to_string()
        };
        for c in decl.captures_iter(&raw) {
            out.insert(format!("{dir}/{}.rs", &c[1]));
            out.insert(format!("{dir}/{}/mod.rs", &c[1]));
        }
    }
    out
}

fn sources(root: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    let mut stack = vec![root.join("src")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let inner = rel.trim_start_matches("src/").trim_end_matches(".rs");
            let mut module: Vec<String> = inner.split('/').map(str::to_string).collect();
            if module.last().is_some_and(|m| m == "mod") || module == ["lib"] {
                module.pop();
            }
            let text = std::fs::read_to_string(&p).unwrap();
            Source {
                file: rel,
                module,
                code: without_test_items(&strip(&text)),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Imports.

/// The module paths a `use` tree or a path names, from token `i` (just after a `::`), each
/// prefixed with `prefix`. Stops at the path's end.
fn path_tree(
    toks: &[(Tok, usize)],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) {
    let mut path = prefix;
    loop {
        match toks.get(*i).map(|t| &t.0) {
            Some(Tok::Ident(w)) if w == "self" => {
                *i += 1;
                break;
            }
            Some(Tok::Ident(w)) => {
                path.push(w.clone());
                *i += 1;
                if toks.get(*i).map(|t| &t.0) == Some(&Tok::Path) {
                    *i += 1;
                    continue;
                }
                break;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                break;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                loop {
                    match toks.get(*i).map(|t| &t.0) {
                        None => return,
                        Some(Tok::Punct('}')) => {
                            *i += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *i += 1,
                        Some(Tok::Ident(w)) if w == "as" => *i += 2,
                        _ => {
                            let before = *i;
                            path_tree(toks, i, path.clone(), out);
                            if *i == before {
                                *i += 1;
                            }
                        }
                    }
                }
            }
            _ => break,
        }
    }
    out.push(path);
}

/// Every module path `s`'s code names through `crate::`, `super::` (or `cpulab::` in
/// `main.rs`), as absolute paths from the crate root.
fn imported_paths(s: &Source) -> Vec<Vec<String>> {
    let toks = tokens(&s.code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let starts = i == 0 || toks[i - 1].0 != Tok::Path;
        let followed = toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path);
        match &toks[i].0 {
            Tok::Ident(w)
                if starts
                    && followed
                    && (w == "crate" || (w == "cpulab" && s.file == "src/main.rs")) =>
            {
                i += 2;
                path_tree(&toks, &mut i, Vec::new(), &mut out);
            }
            Tok::Ident(w) if starts && followed && w == "super" => {
                let mut base = s.module.clone();
                while toks.get(i).map(|t| &t.0) == Some(&Tok::Ident("super".into()))
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path)
                {
                    base.pop();
                    i += 2;
                }
                path_tree(&toks, &mut i, base, &mut out);
            }
            _ => i += 1,
        }
    }
    out
}

/// The file a module path lands in (`watch::bpf::HEADER` -> `src/watch/bpf/mod.rs`), and the
/// top-level module it is under (`None` for the crate root).
fn resolve(root: &Path, path: &[String]) -> (String, Option<String>) {
    let mut dir = root.join("src");
    let mut file = PathBuf::from("src/lib.rs");
    let mut rel = PathBuf::from("src");
    let mut top = None;
    for seg in path {
        if dir.join(seg).is_dir() {
            dir = dir.join(seg);
            rel = rel.join(seg);
            file = rel.join("mod.rs");
        } else if dir.join(format!("{seg}.rs")).is_file() {
            file = rel.join(format!("{seg}.rs"));
            top.get_or_insert_with(|| seg.clone());
            break;
        } else {
            break;
        }
        top.get_or_insert_with(|| seg.clone());
    }
    (file.to_string_lossy().replace('\\', "/"), top)
}

/// One import between two files, with the top-level modules they are under.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from_top: String,
    to_top: String,
    from: String,
    to: String,
}

fn edges(root: &Path, srcs: &[Source]) -> BTreeSet<Edge> {
    let mut out = BTreeSet::new();
    for s in srcs {
        let Some(from_top) = s.module.first() else {
            continue; // lib.rs: the list of modules
        };
        let from_top = if s.file == "src/main.rs" {
            "main".to_string()
        } else {
            from_top.clone()
        };
        for p in imported_paths(s) {
            let (to, to_top) = resolve(root, &p);
            if let Some(to_top) = to_top
                && to != s.file
            {
                out.insert(Edge {
                    from_top: from_top.clone(),
                    to_top,
                    from: s.file.clone(),
                    to,
                });
            }
        }
    }
    out
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

// ---------------------------------------------------------------------------------------------
// Functions.

/// Every function with a body: (file, `Type::name` or `name`, lines from `fn` to its `}`).
fn functions(s: &Source) -> Vec<(String, String, usize)> {
    let toks = tokens(&s.code);
    let close = matching(&toks);
    // The bodies of `impl` and `trait` blocks, with the type they are for.
    let mut blocks: Vec<(usize, usize, String)> = Vec::new();
    for (i, (t, _)) in toks.iter().enumerate() {
        let Tok::Ident(w) = t else { continue };
        // An item, not `-> impl Trait` or `x: impl Trait`: after a `}`, `;`, `{`, an
        // attribute's `]`, `unsafe`, `pub` or `pub(crate)`.
        let item = i == 0
            || matches!(&toks[i - 1].0, Tok::Punct('}' | ';' | '{' | ']' | ')'))
            || matches!(&toks[i - 1].0, Tok::Ident(p) if p == "unsafe" || p == "pub");
        if !item || (w != "impl" && w != "trait") {
            continue;
        }
        let Some(open) = (i + 1..toks.len()).find(|&j| {
            matches!(toks[j].0, Tok::Punct('{') | Tok::Punct(';'))
                || toks[j].0 == Tok::Ident("where".into())
        }) else {
            continue;
        };
        let head = &toks[i + 1..open];
        let after_for = head
            .iter()
            .position(|t| t.0 == Tok::Ident("for".into()))
            .map_or(head, |p| &head[p + 1..]);
        // The type's name: the trait's own, or the last plain identifier before its generics.
        let mut name = match (w.as_str(), head.first()) {
            ("trait", Some((Tok::Ident(n), _))) => Some(n.clone()),
            _ => None,
        };
        let after_for = if w == "trait" { &[][..] } else { after_for };
        let mut angle = 0;
        for (t, _) in after_for {
            match t {
                Tok::Punct('<') => angle += 1,
                Tok::Punct('>') => angle -= 1,
                Tok::Ident(x) if angle == 0 && x != "dyn" && x != "mut" => name = Some(x.clone()),
                _ => {}
            }
        }
        let Some(body) = (open..toks.len()).find(|&j| toks[j].0 == Tok::Punct('{')) else {
            continue;
        };
        if let (Some(name), Some(&end)) = (name, close.get(&body)) {
            blocks.push((body, end, name));
        }
    }
    let mut out = Vec::new();
    for (i, (t, line)) in toks.iter().enumerate() {
        if *t != Tok::Ident("fn".into()) {
            continue;
        }
        let Some((Tok::Ident(name), _)) = toks.get(i + 1) else {
            continue; // a fn pointer type, `fn(u32) -> u32`
        };
        let mut depth = 0;
        let mut body = None;
        for (j, (t, _)) in toks.iter().enumerate().skip(i + 2) {
            match t {
                Tok::Punct('(' | '[') => depth += 1,
                Tok::Punct(')' | ']') => depth -= 1,
                Tok::Punct(';') if depth == 0 => break,
                Tok::Punct('{') if depth == 0 => {
                    body = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = body.and_then(|b| close.get(&b)) else {
            continue;
        };
        let owner = blocks
            .iter()
            .filter(|(o, e, _)| *o < i && i < *e)
            .max_by_key(|(o, _, _)| *o)
            .map(|(_, _, n)| format!("{n}::"))
            .unwrap_or_default();
        out.push((
            s.file.clone(),
            format!("{owner}{name}"),
            toks[*end].1 - line + 1,
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The checks.

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The layer table above is the document's: the same layers, in the same order, with the same
/// modules; and every top-level module of `src/` is in it.
#[test]
fn the_layer_table_is_the_documents() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let mut rows: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in doc.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(layer), Some(modules)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        if *layer == "layer (top to bottom)" || layer.starts_with("---") {
            continue;
        }
        // Backquoted `name/` or `name.rs` outside parentheses.
        let mut plain = String::new();
        let mut paren = 0;
        for ch in modules.chars() {
            match ch {
                '(' => paren += 1,
                ')' => paren -= 1,
                _ if paren == 0 => plain.push(ch),
                _ => {}
            }
        }
        let names = plain
            .split('`')
            .skip(1)
            .step_by(2)
            .filter_map(|n| n.strip_suffix('/').or_else(|| n.strip_suffix(".rs")))
            .filter(|n| !n.contains('/'))
            .map(str::to_string)
            .collect();
        rows.push((layer.to_string(), names));
    }
    let ours: Vec<(String, BTreeSet<String>)> = LAYERS
        .iter()
        .map(|(l, ms)| (l.to_string(), ms.iter().map(|m| m.to_string()).collect()))
        .collect();
    assert_eq!(
        ours, rows,
        "LAYERS differs from docs/architecture.md's table"
    );

    let mut on_disk = BTreeSet::new();
    for e in std::fs::read_dir(root().join("src")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let name = name.trim_end_matches(".rs").to_string();
        if name != "lib" && !TEST_ONLY.contains(&name.as_str()) {
            on_disk.insert(name);
        }
    }
    let listed: BTreeSet<String> = LAYERS
        .iter()
        .flat_map(|(_, ms)| ms.iter().map(|m| m.to_string()))
        .collect();
    assert_eq!(
        on_disk, listed,
        "every top-level module of src/ has its layer in docs/architecture.md and LAYERS"
    );
}

/// The lexer reads what the checks rely on: strings, chars and comments blanked, lifetimes
/// kept, test items gone, grouped and `super::` imports resolved, functions measured.
#[test]
fn the_reader_reads_rust() {
    let code = strip(
        "let a = \"crate::x {\"; let b = '{'; let c = '\\''; /* crate::y /* } */ */ // crate::z\n\
         fn f<'a>(x: &'a str) -> &'a str { let r = r#\"crate::w \"# ; x }\n",
    );
    assert!(!code.contains("crate"), "{code}");
    assert_eq!(code.lines().count(), 2);
    let s = Source {
        file: "src/watch/bpf/ring.rs".into(),
        module: vec!["watch".into(), "bpf".into(), "ring".into()],
        code: without_test_items(&strip(
            "use crate::{stats, watch::{slots, self}};\nuse super::super::format::Field;\n\
             pub(crate) fn g() { crate::units::fmt_ns(1.0); }\n\
             #[cfg(test)]\nmod tests { use crate::probe; }\n#[cfg(test)]\nuse crate::doctor;\n",
        )),
    };
    let paths: BTreeSet<String> = imported_paths(&s).iter().map(|p| p.join("::")).collect();
    let want: BTreeSet<String> = [
        "stats",
        "watch::slots",
        "watch",
        "watch::format::Field",
        "units::fmt_ns",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    assert_eq!(paths, want);
    let s = Source {
        file: "src/x.rs".into(),
        module: vec!["x".into()],
        code: strip(
            "impl<T: Copy> Shape for Grid<T> where T: Eq {\n    fn area(&self) -> [u8; 2] {\n        \
             [0; 2]\n    }\n}\nfn free(f: fn(u32) -> u32) {\n}\ntrait Q { fn q(&self); }\n",
        ),
    };
    assert_eq!(
        functions(&s),
        [
            ("src/x.rs".to_string(), "Grid::area".to_string(), 3),
            ("src/x.rs".to_string(), "free".to_string(), 2)
        ]
    );
}

#[test]
fn modules_import_only_layers_below_and_functions_stay_short() {
    let root = root();
    let srcs = sources(&root);
    let edges = edges(&root, &srcs);

    // Imports of a module above the importer's layer (upward) or in it (sideways).
    let (mut upward, mut sideways) = (Vec::new(), Vec::new());
    let mut unplaced = BTreeSet::new();
    for e in &edges {
        // A test-only module (declared under `#[cfg(test)]` in lib.rs) may reach anywhere.
        if e.from_top == e.to_top || TEST_ONLY.contains(&e.from_top.as_str()) {
            continue;
        }
        let (Some(a), Some(b)) = (layer_of(&e.from_top), layer_of(&e.to_top)) else {
            unplaced.insert(format!("{} -> {}", e.from_top, e.to_top));
            continue;
        };
        let allowed_same = SAME_LAYER_ALLOWED.contains(&(e.from_top.as_str(), e.to_top.as_str()));
        if b < a {
            upward.push(e.clone());
        } else if b == a && !allowed_same {
            sideways.push(e.clone());
        }
    }
    assert!(unplaced.is_empty(), "modules outside LAYERS: {unplaced:?}");

    // Top-level modules that import each other.
    let pairs: BTreeSet<(String, String)> = edges
        .iter()
        .filter(|e| e.from_top != e.to_top)
        .map(|e| (e.from_top.clone(), e.to_top.clone()))
        .collect();
    let loops: BTreeSet<(String, String)> = pairs
        .iter()
        .filter(|(a, b)| a < b && pairs.contains(&(b.clone(), a.clone())))
        .cloned()
        .collect();

    // Files inside one folder that import each other (a folder's mod.rs aside): none, since a
    // pair that needs each other is one module split in two, or wants a third beneath both.
    let file_pairs: BTreeSet<(String, String)> = edges
        .iter()
        .filter(|e| e.from_top == e.to_top)
        .map(|e| (e.from.clone(), e.to.clone()))
        .collect();
    let inner_loops: Vec<String> = file_pairs
        .iter()
        .filter(|(a, b)| a < b && file_pairs.contains(&(b.clone(), a.clone())))
        .filter(|(a, b)| !a.ends_with("mod.rs") && !b.ends_with("mod.rs"))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();

    let test_files = test_only_files(&root, &srcs);
    let funcs: Vec<(String, String, usize)> = srcs
        .iter()
        .filter(|s| !test_files.contains(&s.file))
        .flat_map(functions)
        .collect();
    let mut noted: Vec<&(String, String, usize)> = funcs.iter().filter(|f| f.2 > NOTED).collect();
    noted.sort_by_key(|f| std::cmp::Reverse(f.2));

    eprintln!(
        "architecture: {} files, {} imports between files",
        srcs.len(),
        edges.len()
    );
    for (what, list) in [
        ("upward imports (a layer above)", &upward),
        ("sideways imports (the same layer)", &sideways),
    ] {
        eprintln!("  {what}: {}", list.len());
        for e in list {
            eprintln!("    {} ({}) -> {} ({})", e.from, e.from_top, e.to, e.to_top);
        }
    }
    eprintln!("  top-level modules importing each other: {}", loops.len());
    for (a, b) in &loops {
        eprintln!("    {a} <-> {b}");
    }
    eprintln!(
        "  files importing each other inside one folder: {}",
        inner_loops.len()
    );
    for l in &inner_loops {
        eprintln!("    {l}");
    }
    eprintln!(
        "  functions over {NOTED} lines: {}, over {LONG}: {}",
        noted.len(),
        noted.iter().filter(|f| f.2 > LONG).count()
    );
    for (file, name, n) in &noted {
        eprintln!("    {n:4} {file} {name}");
    }

    // What is new fails; what is allowed but gone is stale.
    let mut new = Vec::new();
    let against_layers: Vec<&Edge> = upward.iter().chain(&sideways).collect();
    for e in &against_layers {
        if !IMPORTS_ALLOWED
            .iter()
            .any(|(f, t, _)| *f == e.from && *t == e.to)
        {
            new.push(format!(
                "{} imports {} ({} is not below {})",
                e.from, e.to, e.to_top, e.from_top
            ));
        }
    }
    for (a, b) in &loops {
        if !LOOPS_ALLOWED.iter().any(|(x, y, _)| {
            (x, y) == (&a.as_str(), &b.as_str()) || (y, x) == (&a.as_str(), &b.as_str())
        }) {
            new.push(format!("{a} and {b} import each other"));
        }
    }
    for l in &inner_loops {
        new.push(format!("{l} import each other inside one folder"));
    }
    for (file, name, n) in noted.iter().filter(|f| f.2 > LONG) {
        if !LONG_ALLOWED.iter().any(|(f, g, _)| f == file && g == name) {
            new.push(format!("{file} {name} is {n} lines (over {LONG})"));
        }
    }
    for (f, t, _) in IMPORTS_ALLOWED {
        if !against_layers.iter().any(|e| e.from == *f && e.to == *t) {
            eprintln!("  STALE allow-list entry, remove it from IMPORTS_ALLOWED: {f} -> {t}");
        }
    }
    for (a, b, _) in LOOPS_ALLOWED {
        if !loops
            .iter()
            .any(|(x, y)| (x == a && y == b) || (x == b && y == a))
        {
            eprintln!("  STALE allow-list entry, remove it from LOOPS_ALLOWED: {a} <-> {b}");
        }
    }
    for (f, g, _) in LONG_ALLOWED {
        if !noted.iter().any(|x| x.0 == *f && x.1 == *g && x.2 > LONG) {
            eprintln!("  STALE allow-list entry, remove it from LONG_ALLOWED: {f} {g}");
        }
    }
    assert!(
        new.is_empty(),
        "new violations of docs/architecture.md:\n  {}",
        new.join("\n  ")
    );
}

/// Every experiment starts the same way: `Experiment::run` (the prologue, then `measure`) is
/// written once, in the trait, and no implementation overrides it (issue 31: the prologue was
/// called by hand in seven run files).
#[test]
fn no_experiment_writes_its_own_start() {
    let root = root();
    let mut implementations = Vec::new();
    let mut overrides = Vec::new();
    for s in sources(&root) {
        let toks = tokens(&s.code);
        let close = matching(&toks);
        for (i, (t, _)) in toks.iter().enumerate() {
            if *t != Tok::Ident("impl".into()) {
                continue;
            }
            // `impl [path::]Experiment for Type {`
            let Some(open) = (i + 1..toks.len()).find(|&j| toks[j].0 == Tok::Punct('{')) else {
                continue;
            };
            let head = &toks[i + 1..open];
            let Some(f) = head.iter().position(|t| t.0 == Tok::Ident("for".into())) else {
                continue;
            };
            if f == 0 || head[f - 1].0 != Tok::Ident("Experiment".into()) {
                continue;
            }
            let Some(&end) = close.get(&open) else {
                continue;
            };
            implementations.push(s.file.clone());
            let body = &toks[open..end];
            if body
                .windows(2)
                .any(|w| w[0].0 == Tok::Ident("fn".into()) && w[1].0 == Tok::Ident("run".into()))
            {
                overrides.push(s.file.clone());
            }
        }
    }
    assert!(
        implementations.len() >= 9,
        "the reader finds the experiments: {implementations:?}"
    );
    assert!(
        overrides.is_empty(),
        "these experiments write their own run instead of load_watch + measure: {overrides:?}"
    );
}
