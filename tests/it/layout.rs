//! The layout rules of ARCHITECTURE.md ("Dependency rules"), checked on the source itself: no
//! import cycle between top-level modules, the leaves and the sink import what they may, and
//! no production file grows past the size a reader can hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Production code (a file up to its `#[cfg(test)]` module) past this is a file doing too much.
const MAX_PRODUCTION_LINES: usize = 600;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each file's production part: everything before its test module.
fn production(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at])
}

/// Top-level module -> the top-level modules its production code names as `crate::x`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let deps = graph.entry(module.clone()).or_default();
        for (at, _) in production(&text).match_indices("crate::") {
            let name: String = text[at + 7..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                deps.insert(name);
            }
        }
    }
    graph
}

#[test]
fn no_import_cycle_between_modules() {
    let graph = imports();
    assert!(graph.len() > 10, "found the modules: {graph:?}");
    // Depth-first, reporting the first cycle with its path.
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == n) {
            panic!("import cycle: {} -> {n}", path[at..].join(" -> "));
        }
        if done.contains(n) {
            return;
        }
        path.push(n.to_string());
        for d in graph.get(n).into_iter().flatten() {
            visit(d, graph, path, done);
        }
        path.pop();
        done.insert(n.to_string());
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        visit(n, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_dependency_rules_hold() {
    let graph = imports();
    let deps = |m: &str| graph.get(m).cloned().unwrap_or_default();
    let only = |m: &str, allowed: &[&str]| {
        let extra: Vec<String> = deps(m)
            .into_iter()
            .filter(|d| !allowed.contains(&d.as_str()))
            .collect();
        assert!(extra.is_empty(), "{m} may not import {extra:?}");
    };
    for leaf in [
        "time",
        "shutdown",
        "logwriter",
        "digest",
        "der",
        "notify",
        "fault",
        "panics",
        "logescape",
        "hardening",
        "suggest",
    ] {
        only(leaf, &[]);
    }
    // The log line's format takes only the calendar maths of `time`, and the escaping visitor.
    only("logline", &["time", "logescape"]);
    // Hashing is a leaf that the dedup rules, the verifiers and the store share.
    only("dedup", &["digest"]);
    // `der`: the SubjectPublicKeyInfo of a PEM key (Woovi's), for `ring`.
    only("verify", &["dedup", "digest", "der"]);
    // The store takes nothing of the pipeline but the verifier's proof.
    only("store", &["verify", "fault", "digest", "time", "der"]);
    // Metrics is a sink of label strings: the reserved endpoint label, the queue figures.
    only("metrics", &["config", "store"]);
    only("config", &["dedup", "verify", "suggest"]);
    // The status page reads and replays through the store's handle, nothing of the pipeline.
    only("status", &["store", "time", "verify", "digest"]);
    assert!(
        !deps("ingest").contains("forward"),
        "ingest imports forward"
    );
    assert!(
        !deps("forward").contains("ingest"),
        "forward imports ingest"
    );
    // The alerts task reads facts (metrics, store) and tells the owner; it starts nothing else.
    only(
        "alerts",
        &["config", "store", "metrics", "time", "shutdown", "panics"],
    );
    for (m, d) in &graph {
        if d.contains("alerts") {
            assert_eq!(m, "server", "{m} imports alerts: only server starts it");
        }
    }
    // `server` is the one composition root (and `cli`, which starts it).
    for part in ["ingest", "forward", "admin", "prune"] {
        for (m, d) in &graph {
            if d.contains(part) {
                assert!(
                    ["server", "cli"].contains(&m.as_str()),
                    "{m} imports {part}"
                );
            }
        }
    }
}

#[test]
fn no_production_file_is_over_the_size_a_reader_can_hold() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = production(&text).lines().count();
        assert!(
            lines <= MAX_PRODUCTION_LINES,
            "{}: {lines} lines of production code (split it by concern)",
            file.display()
        );
    }
}
