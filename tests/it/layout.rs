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
        "public_path",
        "outbound",
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
    only(
        "status",
        &["store", "time", "verify", "digest", "public_path"],
    );
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
        &[
            "config",
            "store",
            "metrics",
            "time",
            "shutdown",
            "panics",
            "public_path",
        ],
    );
    // The canary calls out and records; only the server starts it, and intake answers its
    // probes with its key.
    only(
        "canary",
        &[
            "config",
            "outbound",
            "metrics",
            "public_path",
            "shutdown",
            "panics",
            "time",
            "digest",
        ],
    );
    for (m, d) in &graph {
        if d.contains("canary") {
            assert!(
                ["server", "ingest"].contains(&m.as_str()),
                "{m} imports canary: only server starts it, and ingest answers its probes"
            );
        }
    }
    // A reconcile run asks a gateway's API (`outbound`) and the store; the command starts it.
    only(
        "reconcile",
        &[
            "config", "store", "outbound", "time", "dedup", "shutdown", "panics",
        ],
    );
    for (m, d) in &graph {
        if d.contains("reconcile") {
            assert!(
                ["server", "cli"].contains(&m.as_str()),
                "{m} imports reconcile: only the command (and the server's schedule) runs it"
            );
        }
    }
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

/// The store's two engines are peers behind one handle (ARCHITECTURE.md, "Dependency
/// rules"): the files at `store/` are what both share (row types, shared SQL, pure rules) and
/// name neither engine nor `Store`; an engine names the other nowhere but in `store copy` (a
/// SQLite file into PostgreSQL); and `Store`'s methods live only in `store/handle/`, the
/// layer above both, each one `match` over the engine, so an engine that lacks one is a
/// compile error.
#[test]
fn the_store_engines_are_peers_behind_one_handle() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    sources(&store, &mut files);
    let mut shared = 0;
    for file in files {
        let rel = file
            .strip_prefix(&store)
            .unwrap()
            .to_string_lossy()
            .to_string();
        if rel.ends_with("fixtures.rs") {
            continue; // a test-only module (`#[cfg(test)] mod fixtures`)
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = production(&text);
        let names = |what: &str| {
            code.lines()
                .any(|l| !l.trim_start().starts_with("//") && l.contains(what))
        };
        let engine = rel.split('/').next().filter(|_| rel.contains('/'));
        match engine {
            None => {
                shared += 1;
                assert!(
                    !names("rusqlite") && !names("deadpool"),
                    "store/{rel} names an engine's client"
                );
                // Opening PostgreSQL takes its connection settings; nothing else names them.
                assert!(!names("tokio_postgres"), "store/{rel} names tokio_postgres");
                // `mod.rs` is the door: it re-exports `Store` from `handle/`.
                assert!(
                    !names("impl Store {")
                        && (rel == "mod.rs" || !names("Store;") && !names("Store,")),
                    "store/{rel}: Store and its methods live in store/handle/"
                );
                assert!(
                    !names("postgres()"),
                    "store/{rel}: a run-time test of the engine"
                );
            }
            Some("sqlite") => {
                assert!(
                    !names("postgres::") && !names("tokio_postgres"),
                    "store/{rel} names PostgreSQL"
                );
                assert!(
                    !names("impl Store {"),
                    "store/{rel}: Store's methods live in store/handle/"
                );
            }
            Some("postgres") => {
                assert!(
                    rel == "postgres/copy.rs" || !names("sqlite::") && !names("rusqlite"),
                    "store/{rel} names SQLite"
                );
                assert!(
                    !names("impl Store {"),
                    "store/{rel}: Store's methods live in store/handle/"
                );
            }
            Some("handle") => {
                // The layer above both engines: it opens them (PostgreSQL by its connection
                // settings) and hands each call to one, never speaking SQL itself.
                assert!(
                    !names("rusqlite") && !names("deadpool"),
                    "store/{rel} names an engine's client"
                );
                assert!(
                    rel == "handle/mod.rs" || !names("tokio_postgres"),
                    "store/{rel} names tokio_postgres"
                );
                assert!(
                    !names("postgres()"),
                    "store/{rel}: a run-time test of the engine"
                );
            }
            Some(other) => panic!("store/{other}/: a third engine? add its rules here"),
        }
    }
    assert!(shared > 10, "found {shared} shared files");
}

/// ARCHITECTURE.md is a map that fits on a page or two, and both maps (its code map, one row
/// per module, and `lib.rs`'s module list, one line each) name every top-level module and
/// nothing else: a module added or removed without its line fails here. What a module owns in
/// detail is its own `//!` doc's.
#[test]
fn the_maps_name_every_module_and_fit_on_a_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let lines = map.lines().count();
    assert!(
        lines < 150,
        "ARCHITECTURE.md has {lines} lines: the detail belongs in the module docs"
    );
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    assert!(modules.len() > 20, "{modules:?}");
    // `x/` for a module that is a folder with its `mod.rs`, `x` for a file (with or without a
    // folder of submodules beside it).
    let spelled = |m: &str| {
        if root.join("src").join(m).join("mod.rs").is_file() {
            format!("`{m}/`")
        } else {
            format!("`{m}`")
        }
    };
    let rows: Vec<&str> = map
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once(" |").map(|(name, _)| name))
        .collect();
    let mut expected: Vec<String> = modules.iter().map(|m| spelled(m)).collect();
    expected.push("`main.rs`".to_string());
    for name in &expected {
        assert!(
            rows.iter().any(|r| format!("`{r}") == *name),
            "ARCHITECTURE.md's code map has no row for {name}"
        );
    }
    for row in &rows {
        assert!(
            expected.contains(&format!("`{row}")),
            "ARCHITECTURE.md's code map has a row for `{row}, which is no module"
        );
    }
    for m in &modules {
        assert!(
            lib.contains(&format!("//! - [`{m}`]: ")),
            "lib.rs's module list has no line for `{m}`"
        );
    }
}

/// A folder's children: each `.rs` file beside its `mod.rs` (or beside the folder's own
/// `name.rs`), and each subfolder (with its `name.rs`, if any) as one child.
fn children(dir: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.is_dir() {
            let mut files = Vec::new();
            sources(&path, &mut files);
            out.entry(name).or_default().extend(files);
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            out.entry(name).or_default().push(path);
        }
    }
    out
}

/// Code without its comment lines (a doc link names a file without importing it).
fn code(text: &str) -> String {
    production(text)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of each path named right after `prefix`: `prefix::name` gives `name`,
/// and `prefix::{a, b::C, d::{E, F}}` gives `a`, `b` and `d`.
fn named_after(text: &str, prefix: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        // `x::super::` is not `super::`, nor is `crate::a::b::` a `crate::b::`.
        if text[..at].ends_with("::") || text[..at].ends_with(|c: char| c.is_alphanumeric()) {
            continue;
        }
        let rest = &text[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start => {
                        out.push(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// Inside one folder, child -> the siblings its code names: `super::sibling`, a name the
/// folder's own file re-exports from a sibling (`pub use sibling::Name`), or the same through
/// `crate::path::to::folder::`. The folder's own file (`mod.rs` or `name.rs`) is the room's
/// door, not a room: its children name it freely.
fn folder_imports(src: &Path, dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let kids = children(dir);
    let own = [dir.join("mod.rs"), dir.with_extension("rs")]
        .into_iter()
        .find(|p| p.exists());
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    if let Some(own) = &own {
        let text = code(&std::fs::read_to_string(own).unwrap());
        for line in text.split(';') {
            let line = line.trim();
            let Some(at) = line.find("use ") else {
                continue;
            };
            let path = line[at + 4..].trim_start_matches("self::");
            let Some((kid, rest)) = path.split_once("::") else {
                continue;
            };
            if !kids.contains_key(kid) {
                continue;
            }
            for name in named_after(&format!("::{rest}"), "::") {
                reexported.insert(name, kid.to_string());
            }
        }
    }
    let module_path = dir
        .strip_prefix(src)
        .unwrap()
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect::<Vec<_>>()
        .join("::");
    let mut graph = BTreeMap::new();
    for (kid, files) in &kids {
        let mut deps = BTreeSet::new();
        for file in files {
            if file.ends_with("fixtures.rs") {
                continue; // a test-only module (`#[cfg(test)] mod fixtures`), as above
            }
            // How many `super::` from this file reach the folder.
            let depth = file
                .parent()
                .unwrap()
                .strip_prefix(dir)
                .map_or(0, |p| p.components().count());
            let up = if file.parent() == Some(dir) {
                1
            } else {
                depth + 1
            };
            let text = code(&std::fs::read_to_string(file).unwrap());
            let prefixes = ["super::".repeat(up), format!("crate::{module_path}::")];
            for prefix in &prefixes {
                for name in named_after(&text, prefix) {
                    let target = if kids.contains_key(&name) {
                        Some(name)
                    } else {
                        reexported.get(&name).cloned()
                    };
                    if let Some(target) = target.filter(|t| t != kid) {
                        deps.insert(target);
                    }
                }
            }
        }
        graph.insert(kid.clone(), deps);
    }
    graph
}

/// The cycles of `graph`, each reported once with its path.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == n) {
            found.push(format!("{} -> {n}", path[at..].join(" -> ")));
            return;
        }
        if done.contains(n) {
            return;
        }
        path.push(n.to_string());
        for d in graph.get(n).into_iter().flatten() {
            visit(d, graph, path, done, found);
        }
        path.pop();
        done.insert(n.to_string());
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        visit(n, graph, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

/// The rule between modules holds between the files of a folder too: a file that names a
/// sibling never is named back by it, directly or around a longer circle, so each folder
/// reads bottom to top.
#[test]
fn no_import_circle_between_the_files_of_a_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut dirs = Vec::new();
    fn folders(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.push(path.clone());
                folders(&path, out);
            }
        }
    }
    folders(&src, &mut dirs);
    assert!(dirs.len() > 8, "found the folders: {dirs:?}");
    let mut found = Vec::new();
    for dir in &dirs {
        let graph = folder_imports(&src, dir);
        for cycle in cycles(&graph) {
            found.push(format!(
                "{}: {cycle}",
                dir.strip_prefix(&src).unwrap().display()
            ));
        }
    }
    assert!(
        found.is_empty(),
        "import circles inside folders:\n{found:#?}"
    );
}

/// The checker finds what it is for: a circle through `super::`, through a name the folder's
/// own file re-exports, and through a `crate::` path, and nothing in a folder without one.
#[test]
fn the_folder_circle_check_sees_each_kind_of_import() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    let dir = src.join("room");
    std::fs::create_dir_all(dir.join("inner")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write(
        "mod.rs",
        "mod a;\nmod b;\nmod c;\nmod inner;\npub use c::{Gamma, other::Thing};\n",
    );
    write(
        "a.rs",
        "use super::b::Beta;\n// super::c in a comment is not an import\n",
    );
    write("b.rs", "use super::{Gamma, x};\n");
    write("c.rs", "use crate::room::inner::Deep;\n");
    write("inner/mod.rs", "use super::super::a::Alpha;\n");
    let graph = folder_imports(&src, &dir);
    let names = |k: &str| graph[k].iter().cloned().collect::<Vec<_>>();
    assert_eq!(names("a"), ["b"]);
    assert_eq!(names("b"), ["c"], "through the re-export");
    assert_eq!(names("c"), ["inner"]);
    assert_eq!(names("inner"), ["a"]);
    assert_eq!(cycles(&graph), ["a -> b -> c -> inner -> a"]);
    write("inner/mod.rs", "pub struct Deep;\n");
    assert!(cycles(&folder_imports(&src, &dir)).is_empty());
}
