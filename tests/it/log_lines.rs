//! What a request can do to the log (issue 23): its text stays inside its fields, one line
//! per request, in either format (`src/logescape.rs`); a flood of rejected webhooks is a
//! bounded number of lines (`src/ingest/flood.rs`); and what `check` and `serve` warn of in a
//! config (short or space-padded secrets, PostgreSQL TLS that checks nobody), never quoting
//! a secret. The real binary, its stderr a pipe as under journald.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

/// A signed Pagar.me event whose type and object id hold a terminal's commands (a colour, a
/// window title with its BEL, a C1 CSI, DEL) and line breaks: JSON escapes in the body, raw
/// characters once parsed.
fn hostile_body(n: usize) -> Vec<u8> {
    format!(
        r#"{{"id":"hook_{n}","type":"charge\u001b[31m.paid\u009b2J\u007f\nFORGED  INFO portaria: webhook","data":{{"id":"ch_{n}\u001b]0;pwned\u0007\r\n2","amount":1}}}}"#
    )
    .into_bytes()
}

const EVENT_TYPE: &str = "charge\u{1b}[31m.paid\u{9b}2J\u{7f}\nFORGED  INFO portaria: webhook";

/// The binary logging in `format`, its pagarme endpoint forwarding to contrib's pipe handler,
/// which writes each event's type to its stderr (logged by portaria); the log once both
/// webhooks (one hostile, one not) are answered and the handler's lines are in.
async fn log_of_a_hostile_webhook(format: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let config = dir.path().join("portaria.toml");
    let handler = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/pipe-handler.py");
    let forward = format!(
        "forward = {{ pipe = [\"python3\", {:?}] }}",
        handler.display().to_string()
    );
    std::fs::write(&config, base_config(&db, "", &forward)).unwrap();
    let mut command = portaria();
    command
        .args(["serve", "--log-format", format, "--config"])
        .arg(&config);
    let process = Process::spawn_command(command).await;
    for body in [hostile_body(1), payment_body(2)] {
        assert_eq!(post_pagarme(process.addr, &body).await.status, 200);
    }
    eventually(WAIT, "the handler's stderr lines for both events", || {
        let log = process.log.lock().unwrap();
        log.contains("charge.paid)") && log.contains("FORGED")
    })
    .await;
    process.log.lock().unwrap().clone()
}

/// No character of the log is a control character but the line ends.
fn assert_inert(log: &str) {
    let raw: Vec<char> = log
        .chars()
        .filter(|&c| c.is_control() && c != '\n')
        .collect();
    assert!(raw.is_empty(), "raw {raw:?} in the log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_event_type_and_object_id_stay_inside_their_fields_in_the_text_log() {
    let log = log_of_a_hostile_webhook("text").await;
    assert_inert(&log);
    let accepted: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("outcome=\"accepted\""))
        .collect();
    assert_eq!(accepted.len(), 2, "one line per request:\n{log}");
    assert!(
        accepted[0].contains(
            r#"event_type="charge\u{1b}[31m.paid\u{9b}2J\u{7f}\nFORGED  INFO portaria: webhook""#
        ),
        "{log}"
    );
    assert!(
        accepted[0].contains(r#"object_id="ch_1\u{1b}]0;pwned\u{7}\r\n2""#),
        "{log}"
    );
    // The handler wrote the type raw, a line break in it: two lines of its stderr, each
    // logged as one line of portaria's, escaped.
    assert!(
        log.contains(r"stderr=event 1 (charge\u{1b}[31m.paid\u{9b}2J\u{7f}"),
        "{log}"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED")),
        "no forged line:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_event_type_and_object_id_stay_inside_their_fields_in_the_json_log() {
    let log = log_of_a_hostile_webhook("json").await;
    assert_inert(&log);
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let accepted: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["outcome"] == "accepted")
        .collect();
    assert_eq!(accepted.len(), 2, "one line per request:\n{log}");
    // Exactly the text, for a reader of the JSON.
    assert_eq!(accepted[0]["event_type"], EVENT_TYPE);
    assert_eq!(accepted[0]["object_id"], "ch_1\u{1b}]0;pwned\u{7}\r\n2");
    let stderr: Vec<&str> = lines.iter().filter_map(|v| v["stderr"].as_str()).collect();
    assert!(
        stderr.contains(&"event 1 (charge\u{1b}[31m.paid\u{9b}2J\u{7f}"),
        "{stderr:?}"
    );
}

/// Writes a config: the base one plus `extra` (endpoints, a `[storage]` replaced by the
/// caller's), in `dir`.
fn config_with(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("portaria.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// An endpoint whose secrets are too short and space-padded: what `check` and `serve` warn
/// of, never quoting them.
const WEAK_ENDPOINT: &str = "\n[[endpoint]]\npath = \"/webhooks/weak\"\nprovider = \"github\"\n\
     secrets = [\"hunter2\", \"correct horse battery staple \"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_signatures_is_a_bounded_number_of_lines_and_every_one_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let text = base_config(&dir.path().join("portaria.db"), "", "") + WEAK_ENDPOINT;
    let config = config_with(dir.path(), &text);
    let every = Duration::from_secs(2);
    let mut command = portaria();
    command.args(["serve", "--config"]).arg(&config).env(
        "PORTARIA_TEST_LOG_SUMMARY_MS",
        every.as_millis().to_string(),
    );
    let process = Process::spawn_command(command).await;
    let started = Instant::now();
    let bad = vec![h("x-hub-signature", format!("sha256={}", "0".repeat(64)))];
    for n in 0..200 {
        let reply = post(process.addr, "/webhooks/pagarme", &bad, &payment_body(n)).await;
        assert_eq!(reply.status, 401);
    }
    let flood = started.elapsed();
    // Every one counted by metrics.
    let metrics = send(process.admin.unwrap(), "GET", "/metrics", &[], b"").await;
    assert!(
        metrics
            .body
            .contains(r#"portaria_requests_total{endpoint="pagarme",outcome="bad_signature"} 200"#),
        "{}",
        metrics.body
    );
    // In the log: the first of each interval in full, then one line saying how many more.
    let told = |log: &str| -> (usize, u64) {
        let full = log.matches("webhook rejected").count();
        let more = log
            .lines()
            .filter(|l| l.contains("more webhooks rejected like this (bad_signature)"))
            .map(|l| {
                l.split("more=")
                    .nth(1)
                    .unwrap()
                    .trim()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        (full, more)
    };
    eventually(WAIT, "the summary lines", || {
        let (full, more) = told(&process.log.lock().unwrap());
        full as u64 + more == 200
    })
    .await;
    let log = process.log.lock().unwrap().clone();
    let (full, _) = told(&log);
    let intervals = (flood.as_millis() / every.as_millis()) as usize + 1;
    assert!(
        full <= intervals,
        "{full} full lines for {intervals} intervals of {every:?} ({flood:?} of flood):\n{log}"
    );
    eprintln!("flood: 200 bad signatures in {flood:?}, {full} full lines");
    // `serve` warned of the weak secrets at start, without them.
    assert!(
        log.contains("endpoint[4] (line 32): secret 1 of 2 is 7 bytes long"),
        "{log}"
    );
    assert!(
        log.contains("secret 2 of 2 starts or ends with whitespace"),
        "{log}"
    );
    assert!(!log.contains("hunter2") && !log.contains("horse"), "{log}");
}

#[test]
fn check_warns_of_weak_secrets_and_unchecked_database_tls_without_quoting_them() {
    let dir = tempfile::tempdir().unwrap();
    let text = base_config(&dir.path().join("portaria.db"), "", "") + WEAK_ENDPOINT;
    let config = config_with(dir.path(), &text);
    let out = run_cli(&["check"], &config);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(ok_stdout(&out).trim(), format!("ok: {}", config.display()));
    assert!(
        stderr.contains("warning: endpoint[4] (line 32): secret 1 of 2 is 7 bytes long; a secret shorter than 16 bytes can be guessed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("secret 2 of 2 starts or ends with whitespace"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("hunter2") && !stderr.contains("horse"),
        "{stderr}"
    );

    // PostgreSQL over TLS that checks nobody, to another host.
    let db = dir.path().join("portaria.db").display().to_string();
    let text = base_config(&dir.path().join("portaria.db"), "", "").replace(
        &format!("path = \"{db}\""),
        "url = \"postgres://portaria@db.example.net/portaria?sslmode=require\"",
    );
    let config = config_with(dir.path(), &text);
    let out = run_cli(&["check"], &config);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(ok_stdout(&out).trim(), format!("ok: {}", config.display()));
    assert!(
        stderr.contains(
            "warning: storage.url: sslmode=require without a CA, to a database that is not on this machine"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("db.example.net"), "{stderr}");
}
