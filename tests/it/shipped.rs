//! What ships beside the code agrees with it: the packaged config passes the real `check`, its
//! commented-out keys exist, the environment file names every variable the config and the
//! alert scripts read, the guides name only outcome labels the metrics have, the Raspberry Pi
//! guide (and its Portuguese translation) quotes the latest benchmark, the forwarding guide's
//! runnable example waits for what it reads, and the Portuguese guides keep the commands of the
//! English ones.

use std::path::{Path, PathBuf};

use portaria::config::{Config, Secrets, Source};

use crate::support::*;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap()
}

const PACKAGED: &str = "packaging/portaria.toml";

/// The packaged config with its database moved into `dir` (the package's /var/lib/portaria
/// is not this machine's to write); every other line as installed.
fn packaged_in(dir: &Path) -> PathBuf {
    let text = read(PACKAGED);
    let line = "path = \"/var/lib/portaria/portaria.db\"";
    assert!(
        text.contains(line),
        "the packaged storage path moved: {text}"
    );
    let moved = text.replace(
        line,
        &format!("path = \"{}\"", dir.join("portaria.db").display()),
    );
    let config = dir.join("portaria.toml");
    std::fs::write(&config, moved).unwrap();
    config
}

#[test]
fn the_packaged_config_passes_the_real_check_once_its_secret_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let config = packaged_in(dir.path());
    let out = portaria()
        .args(["check", "--config"])
        .arg(&config)
        .env("PAGARME_WEBHOOK_SECRET", "a-pagarme-secret-of-some-length")
        .output()
        .unwrap();
    assert_eq!(ok_stdout(&out).trim(), format!("ok: {}", config.display()));
    assert!(
        String::from_utf8_lossy(&out.stderr).is_empty(),
        "no warning either: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = portaria()
        .args(["check", "--config"])
        .arg(&config)
        .env_remove("PAGARME_WEBHOOK_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("environment variable PAGARME_WEBHOOK_SECRET is not set")
    );
}

/// `# key = value` lines, with the commented table they sit under (`# [status]`), if any.
fn commented_keys(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut table = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix('#').map(str::trim_start) else {
            table = None;
            continue;
        };
        if rest.starts_with('[') {
            table = rest.split_whitespace().next().map(str::to_string);
            continue;
        }
        let Some((key, value)) = rest.split_once(" = ") else {
            continue;
        };
        let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_');
        if plain && !value.trim().is_empty() {
            // The value, without a trailing comment (none of them holds a `#` of its own).
            let value = value.split("   #").next().unwrap().trim();
            out.push((table.clone(), format!("{key} = {value}")));
        }
    }
    out
}

#[test]
fn every_commented_key_of_the_packaged_config_is_one_portaria_reads() {
    let text = read(PACKAGED);
    let keys = commented_keys(&text);
    assert!(keys.len() >= 15, "{keys:?}");
    for (table, line) in keys {
        // The key in its place: under its commented table, appended; else uncommented where
        // it is (under the table above it).
        let trial = match &table {
            Some(table) => format!("{text}\n{table}\n{line}\n"),
            None => text.replacen(&format!("# {line}"), &line, 1),
        };
        let result = Config::parse_with(
            &trial,
            Source::File("/etc/portaria/portaria.toml".into()),
            Secrets::Skip,
        );
        if let Err(e) = result {
            let e = e.to_string();
            assert!(!e.contains("unknown key"), "`{line}` ({table:?}): {e}");
            assert!(!e.contains("invalid type"), "`{line}` ({table:?}): {e}");
        }
    }
}

#[test]
fn the_environment_file_names_every_variable_the_config_and_the_alert_scripts_read() {
    let env = read("packaging/portaria.env.example");
    let named = |var: &str| {
        env.lines()
            .any(|l| l.trim_start_matches("# ").starts_with(&format!("{var}=")))
    };
    let mut vars = Vec::new();
    // `secret_env = "A"`, `secret_env = ["A", "B"]`, `token_env = "T"`, in a table or inline.
    let text = read(PACKAGED);
    for key in ["secret_env = ", "token_env = "] {
        for (at, _) in text.match_indices(key) {
            let value = &text[at + key.len()..];
            let value = match value.strip_prefix('[') {
                Some(list) => &list[..list.find(']').unwrap()],
                None => &value[..value.find(['\n', ',', '}']).unwrap_or(value.len())],
            };
            vars.extend(value.split('"').skip(1).step_by(2).map(str::to_string));
        }
    }
    for script in std::fs::read_dir(repo("contrib/alerts")).unwrap() {
        let text = std::fs::read_to_string(script.unwrap().path()).unwrap();
        for (at, _) in text.match_indices("${") {
            let name: String = text[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            if name.len() > 2 {
                vars.push(name);
            }
        }
    }
    vars.sort();
    vars.dedup();
    assert!(
        vars.contains(&"PAGARME_WEBHOOK_SECRET".to_string()),
        "{vars:?}"
    );
    assert!(vars.contains(&"NTFY_URL".to_string()), "{vars:?}");
    for var in &vars {
        assert!(named(var), "{var} is not in portaria.env.example");
    }
    // What it says of the environment is what the code does.
    assert!(!env.contains("forward commands inherit portaria's environment, these variables"));
    assert!(
        !env.contains("EnvFilter"),
        "RUST_LOG is read as tracing's Targets"
    );
}

#[test]
fn the_guides_name_only_outcome_labels_the_metrics_have() {
    let mut known: Vec<&str> = portaria::metrics::REQUEST_OUTCOMES.to_vec();
    known.extend(portaria::metrics::DELIVERY_OUTCOMES);
    known.push("not_found");
    let mut files = vec![repo("README.md"), repo("packaging/README.md")];
    for dir in ["docs", "docs/pt-BR"] {
        for entry in std::fs::read_dir(repo(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    let mut seen = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines().filter(|l| l.contains("outcome=")) {
            // `outcome="x"`, and any other `snake_case` label named beside it on the line
            // (``(or `missing_signature`)``), metric names aside.
            let labels = line
                .split("outcome=\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next())
                .chain(line.split('`').skip(1).step_by(2).filter(|word| {
                    word.contains('_')
                        && !word.starts_with("portaria_")
                        && word.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                }));
            for label in labels {
                seen += 1;
                assert!(
                    known.contains(&label),
                    "{}: `{label}` is no outcome label ({known:?})",
                    file.display()
                );
            }
        }
    }
    assert!(seen > 10, "{seen}");
}

#[test]
fn the_pi_guide_quotes_the_latest_benchmark() {
    let latest: serde_json::Value =
        serde_json::from_str(&read("bench/results/latest.json")).unwrap();
    let figure = |name: &str| -> String {
        latest["targets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["figure"] == name)
            .unwrap_or_else(|| panic!("no figure {name:?} in latest.json"))["measured"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The Portuguese guide writes the same figures with Brazil's separators: 28.059, 7,6.
    let brazilian = |figure: String| -> String {
        figure
            .chars()
            .map(|c| match c {
                '.' => ',',
                ',' => '.',
                c => c,
            })
            .collect()
    };
    let guide = read("docs/raspberry-pi.md");
    let guia = read("docs/pt-BR/raspberry-pi.md");
    for (row, linha, name, unit) in [
        (
            "memory at idle",
            "memória parado",
            "RSS at idle, MiB",
            "MiB",
        ),
        (
            "memory at peak",
            "memória no pico",
            "Peak RSS under load, MiB",
            "MiB",
        ),
        (
            "accepted webhooks per second",
            "webhooks aceitos por segundo",
            "Durable intake, requests/s",
            "",
        ),
        (
            "at 1,000 req/s",
            "a 1.000 req/s",
            "at 1,000 req/s (about one event per commit), KiB",
            "KiB",
        ),
        (
            "under load",
            "sob carga",
            "Disk written per accepted event, KiB",
            "KiB",
        ),
        (
            "under load",
            "sob carga",
            "disk written per delivered event, KiB",
            "KiB",
        ),
    ] {
        for (guide, row, quoted) in [
            (&guide, row, format!("{} {unit}", figure(name))),
            (&guia, linha, format!("{} {unit}", brazilian(figure(name)))),
        ] {
            let line = guide
                .lines()
                .find(|l| l.starts_with('|') && l.contains(row))
                .unwrap_or_else(|| panic!("no row {row:?} in a Pi guide"));
            assert!(
                line.contains(quoted.trim()),
                "the Pi guide's {row:?} row does not quote {quoted:?} ({name}): {line}"
            );
        }
    }
}

/// The lines of a guide's fenced code blocks that its translation keeps as they are: every
/// block but program output (`text`), each line without its comment (comments are translated),
/// blank lines left out.
fn code_lines(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    // Inside a fence: whether its lines count.
    let mut fence = None;
    for line in markdown.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            fence = match fence {
                None => Some(info.trim() != "text"),
                Some(_) => None,
            };
            continue;
        }
        if fence == Some(true) {
            let code = uncommented(line).trim_end();
            if !code.is_empty() {
                lines.push(code.to_string());
            }
        }
    }
    lines
}

/// `line` up to the `#` that starts a comment (shell, TOML, YAML, systemd): at the start or
/// after a space, outside quotes.
fn uncommented(line: &str) -> &str {
    let (mut single, mut double, mut escaped, mut after_space) = (false, false, false, true);
    for (at, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && after_space => return &line[..at],
            _ => {}
        }
        after_space = c.is_whitespace();
    }
    line
}

#[test]
fn a_comment_is_cut_only_outside_quotes() {
    assert_eq!(uncommented("# a comment"), "");
    assert_eq!(uncommented("uname -m    # the machine"), "uname -m    ");
    assert_eq!(
        uncommented(r#"sh -c 'a; b # not a comment' # a comment"#),
        r#"sh -c 'a; b # not a comment' "#
    );
    assert_eq!(
        uncommented(r#"x = "a \" # inside" # outside"#),
        r#"x = "a \" # inside" "#
    );
    assert_eq!(uncommented("echo a#b ${#v}"), "echo a#b ${#v}");
}

/// The first difference of two lists of code lines, for the message.
fn first_difference(english: &[String], translated: &[String]) -> Option<String> {
    let n = english.len().max(translated.len());
    (0..n).find_map(|i| match (english.get(i), translated.get(i)) {
        (a, b) if a == b => None,
        (a, b) => Some(format!(
            "code line {}: English {a:?}, translation {b:?}",
            i + 1
        )),
    })
}

#[test]
fn the_portuguese_guides_keep_the_english_guides_commands_and_link_both_ways() {
    for name in ["raspberry-pi", "tunnels", "status-page"] {
        let english = read(&format!("docs/{name}.md"));
        let translated = read(&format!("docs/pt-BR/{name}.md"));
        let (en, pt) = (code_lines(&english), code_lines(&translated));
        assert!(en.len() > 20, "docs/{name}.md: {en:?}");
        if let Some(diff) = first_difference(&en, &pt) {
            panic!("docs/pt-BR/{name}.md has drifted from docs/{name}.md: {diff}");
        }
        assert!(english.contains(&format!("(pt-BR/{name}.md)")), "{name}");
        assert!(translated.contains(&format!("(../{name}.md)")), "{name}");
    }
    // The README's owner part: its install path, from the package to the status page.
    let readme = read("README.md");
    let start = readme.find("\n## Install it on a Raspberry Pi\n").unwrap();
    let end = start + readme[start..].find("\n## Providers\n").unwrap();
    let (en, pt) = (
        code_lines(&readme[start..end]),
        code_lines(&read("docs/pt-BR/README.md")),
    );
    assert!(en.len() > 20, "{en:?}");
    if let Some(diff) = first_difference(&en, &pt) {
        panic!("docs/pt-BR/README.md has drifted from the README's install path: {diff}");
    }
    assert!(readme.contains("(docs/pt-BR/README.md)"));
    assert!(read("docs/pt-BR/README.md").contains("(../../README.md)"));
}

#[test]
fn the_forwarding_guides_runnable_example_waits_for_what_it_reads() {
    let guide = read("docs/forwarding.md");
    let start = guide.find("## A runnable example").unwrap();
    let block = &guide[start..];
    let block = &block[..block.find("\n```\n").unwrap()];
    let lines: Vec<&str> = block.lines().collect();
    let at = |text: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(text))
            .unwrap_or_else(|| panic!("no line {text:?} in:\n{block}"))
    };
    let serve = at("portaria serve");
    let ready = at("until curl -sf http://127.0.0.1:9464/readyz");
    let first_post = at("curl -s http://127.0.0.1:8080/");
    assert!(serve < ready && ready < first_post, "{block}");
    let wait = at("until [ -s inbox.jsonl ]");
    let cat = at("cat inbox.jsonl");
    assert!(
        first_post < wait && wait < cat,
        "the delivery comes after the 200:\n{block}"
    );
}
