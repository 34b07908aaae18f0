//! `portaria events list/replay/export` by time window, type glob, status, route and endpoint,
//! on the real binary over a SQLite file seeded through the store (so each event's received
//! time is set, not waited for): what each filter picks, the names it refuses with a
//! suggestion, a bulk replay's confirmation, and the export in CSV and JSON lines read back.
//! Promises: docs/operations.md, "Looking at events".

use std::path::{Path, PathBuf};

use crate::store_suite::{Engine, HOUR, MINUTE, Subject, Webhook, dead};
use crate::support::*;

/// The seeded store and a config naming its endpoints: `pagarme` (routes `erp`, `ledger` and
/// `mail`, export fields `amount` and `customer`) and `asaas` (stores only).
struct Seeded {
    s: Subject,
    _dir: tempfile::TempDir,
    config: PathBuf,
    /// The events' ids: 3 days ago and 2 hours ago (to `ledger` and `mail`), 30 minutes ago
    /// (to `erp`, dead there), 10 minutes ago (asaas).
    ids: [i64; 4],
}

fn config(db: &Path) -> String {
    let routes = "export_fields = { amount = \"json:/data/amount\", customer = \"json:/data/customer/name\" }\n\
         [[endpoint.route]]\nname = \"erp\"\nforward = { command = [\"/bin/true\"] }\n\
         [[endpoint.route]]\nname = \"mail\"\nevents = [\"charge.*\"]\nforward = { command = [\"/bin/true\"] }\n\
         [[endpoint.route]]\nname = \"ledger\"\nforward = { command = [\"/bin/true\"] }\n";
    sqlite_config(db)
        .without_admin()
        .pagarme(routes)
        .endpoint("/webhooks/asaas", "asaas", "secret = \"t\"")
        .text()
}

fn webhook(endpoint: &str, key: &str, at: i64, event_type: &str, body: &str) -> Webhook {
    let mut w = Webhook::new(endpoint, key, at);
    w.event_type = Some(event_type.into());
    w.body = body.as_bytes().to_vec();
    w
}

async fn seeded() -> Seeded {
    let s = Subject::open(Engine::Sqlite).await.unwrap();
    let now = s.now;
    let both = [("ledger", None), ("mail", None)];
    let body = |amount: &str, name: &str| {
        format!(r#"{{"data":{{"amount":{amount},"customer":{{"name":{name}}}}}}}"#)
    };
    let a = s
        .new_event(
            webhook(
                "pagarme",
                "a1",
                now - 72 * HOUR,
                "charge.paid",
                &body("1990", r#""João Ninguém""#),
            )
            .to(&both),
        )
        .await;
    let tricky = serde_json::to_string("Silva, \"Zé\"\nFilho").unwrap();
    let b = s
        .new_event(
            webhook(
                "pagarme",
                "a2",
                now - 2 * HOUR,
                "charge.refunded",
                &body("-500", &tricky),
            )
            .to(&both),
        )
        .await;
    let c = s
        .new_event(
            webhook("pagarme", "a3", now - 30 * MINUTE, "order.paid", "{}").to(&[("erp", None)]),
        )
        .await;
    s.attempt("pagarme", "erp", now - 29 * MINUTE, dead()).await;
    let d = s
        .new_event(webhook("asaas", "b1", now - 10 * MINUTE, "PAYMENT_RECEIVED", "{}").to(&[]))
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("portaria.toml");
    std::fs::write(&config_path, config(s.sqlite_path().unwrap())).unwrap();
    Seeded {
        s,
        _dir: dir,
        config: config_path,
        ids: [a, b, c, d],
    }
}

impl Seeded {
    /// The ids `events list ARGS --json` lists.
    fn listed(&self, args: &[&str]) -> Vec<i64> {
        let mut all = vec!["events", "list", "--json"];
        all.extend_from_slice(args);
        ok_stdout(&run_cli(&all, &self.config))
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect()
    }

    fn at(&self, ms: i64) -> String {
        portaria::time::rfc3339(ms)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_window_type_status_route_and_endpoint() {
    let seeded = seeded().await;
    let [a, b, c, d] = seeded.ids;
    let now = seeded.s.now;
    let list = |args: &[&str]| seeded.listed(args);
    assert_eq!(list(&[]), [d, c, b, a]);
    // Durations are that long ago; RFC 3339 is an instant; --until is before it.
    assert_eq!(list(&["--since", "1h"]), [d, c]);
    assert_eq!(list(&["--until", "1h"]), [b, a]);
    let (since, until) = (seeded.at(now - 24 * HOUR), seeded.at(now - HOUR));
    assert_eq!(list(&["--since", &since, "--until", &until]), [b]);
    assert_eq!(
        list(&["--since", "2026-01-01", "--until", "2026-01-02"]),
        Vec::<i64>::new()
    );
    // A glob on the type: `*` any run, `?` one character, the rest itself.
    assert_eq!(list(&["--type", "charge.*"]), [b, a]);
    assert_eq!(list(&["--type", "charge.?aid"]), [a]);
    assert_eq!(list(&["--type", "*paid"]), [c, a]);
    assert_eq!(list(&["--type", "PAYMENT_*"]), [d]);
    assert_eq!(list(&["--type", "charge"]), Vec::<i64>::new());
    // A route: the events with a delivery to it; with a status, that delivery's.
    assert_eq!(list(&["--route", "mail"]), [b, a]);
    assert_eq!(list(&["--route", "erp", "--status", "dead"]), [c]);
    assert_eq!(
        list(&["--route", "mail", "--status", "dead"]),
        Vec::<i64>::new()
    );
    assert_eq!(list(&["--status", "stored"]), [d]);
    assert_eq!(list(&["--endpoint", "asaas"]), [d]);
    assert_eq!(
        list(&["--endpoint", "pagarme", "--since", "3h", "--type", "*.*"]),
        [c, b]
    );

    // A mistyped endpoint or route is refused with the closest name, never an empty list.
    let out = run_cli(&["events", "list", "--endpoint", "pagarm"], &seeded.config);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("did you mean `pagarme`"), "{said}");
    let out = run_cli(&["events", "list", "--route", "eprr"], &seeded.config);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("no route named `eprr`") && said.contains("`erp`"),
        "{said}"
    );
    // A time that is neither: a usage error naming both forms.
    let out = run_cli(&["events", "list", "--since", "yesterday"], &seeded.config);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("RFC 3339") && said.contains("2h"), "{said}");
    seeded.s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_json_says_which_deliveries_wait_for_a_paused_route() {
    let seeded = seeded().await;
    let [a, ..] = seeded.ids;
    let pause = ["route", "pause", "--endpoint", "pagarme", "--route", "mail"];
    ok_stdout(&run_cli(&pause, &seeded.config));
    let out = ok_stdout(&run_cli(
        &[
            "events",
            "list",
            "--json",
            "--endpoint",
            "pagarme",
            "--until",
            "1d",
        ],
        &seeded.config,
    ));
    let event: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(event["id"], a);
    let paused: Vec<(&str, bool)> = event["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["route"].as_str().unwrap(), r["paused"].as_bool().unwrap()))
        .collect();
    assert_eq!(paused, [("ledger", false), ("mail", true)]);
    seeded.s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_replay_says_how_many_and_above_ten_needs_yes() {
    let seeded = seeded().await;
    let (s, config) = (&seeded.s, &seeded.config);
    // Eleven more dead on `erp`: twelve with the seeded one.
    for n in 0..11 {
        let w = webhook(
            "pagarme",
            &format!("d{n}"),
            s.now - 20 * MINUTE,
            "order.paid",
            "{}",
        );
        s.new_event(w.to(&[("erp", None)])).await;
        s.attempt("pagarme", "erp", s.now - 19 * MINUTE, dead())
            .await;
    }
    let dead_ones = || seeded.listed(&["--status", "dead"]).len();
    assert_eq!(dead_ones(), 12);
    // Not a terminal, no --yes: refused, exit 1, nothing replayed.
    let args = ["events", "replay", "--type", "order.*", "--since", "1h"];
    let out = run_cli(&args, config);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "12 event(s) to replay"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("add --yes"), "{said}");
    assert_eq!(dead_ones(), 12, "nothing replayed");
    // --dead alone is a bulk replay too.
    let out = run_cli(&["events", "replay", "--dead"], config);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(dead_ones(), 12, "nothing replayed");

    // Ten or fewer go at once: the filters pick the two of 30 minutes ago or older.
    let until = seeded.at(s.now - 25 * MINUTE);
    let out = run_cli(&["events", "replay", "--dead", "--until", &until], config);
    assert_eq!(ok_stdout(&out).trim(), "1 dead event(s) pending again");
    assert_eq!(dead_ones(), 11);
    // With --yes: the count, then the replay.
    let mut yes = args.to_vec();
    yes.push("--yes");
    let out = ok_stdout(&run_cli(&yes, config));
    assert_eq!(out, "12 event(s) to replay\n12 event(s) pending again\n");
    assert_eq!(dead_ones(), 0);
    assert_eq!(
        seeded
            .listed(&["--status", "pending", "--route", "erp"])
            .len(),
        12
    );
    seeded.s.close().await;
}

/// On a terminal, typing `yes` is the confirmation; anything else refuses. `script` gives
/// the command a pseudo-terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_a_bulk_replay_asks_for_a_typed_yes() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` (util-linux) for a pseudo-terminal");
        return;
    }
    let seeded = seeded().await;
    let s = &seeded.s;
    for n in 0..11 {
        let w = webhook(
            "pagarme",
            &format!("t{n}"),
            s.now - 20 * MINUTE,
            "order.paid",
            "{}",
        );
        s.new_event(w.to(&[("mail", None)])).await;
    }
    let bin = env!("CARGO_BIN_EXE_portaria");
    let replay = |answer: &str| {
        let command = format!(
            "{bin} events replay --route mail --since 1h --config {}",
            seeded.config.display()
        );
        let mut child = std::process::Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(answer.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, said) = replay("no\n");
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("Type yes to go on") && said.contains("not `yes`"),
        "{said}"
    );
    let (code, said) = replay("yes\n");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("11 event(s) pending again"), "{said}");
    seeded.s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_writes_csv_a_spreadsheet_reads_back_and_json_lines() {
    let seeded = seeded().await;
    let [a, b, c, d] = seeded.ids;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.csv");
    let export = |args: &[&str]| {
        let mut all = vec!["events", "export"];
        all.extend_from_slice(args);
        portaria()
            .args(&all)
            .arg("--config")
            .arg(&seeded.config)
            .env("TZ", "America/Sao_Paulo")
            .output()
            .unwrap()
    };
    let out = export(&[
        "--format",
        "csv",
        "--bom",
        "--output",
        file.to_str().unwrap(),
    ]);
    assert!(ok_stdout(&out).is_empty());
    let bytes = std::fs::read(&file).unwrap();
    assert!(
        bytes.starts_with("\u{feff}".as_bytes()),
        "a byte order mark"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let rows = parse_csv(std::str::from_utf8(&bytes[3..]).unwrap());
    assert_eq!(
        rows[0],
        [
            "id",
            "received_at",
            "received_at_local",
            "endpoint",
            "event_type",
            "object_id",
            "status",
            "dedup_key",
            "amount",
            "customer"
        ]
    );
    let ids: Vec<String> = rows[1..].iter().map(|r| r[0].clone()).collect();
    assert_eq!(ids, [a, b, c, d].map(|i| i.to_string()), "oldest first");
    let first = &rows[1];
    assert_eq!(first[1], seeded.at(seeded.s.now - 72 * HOUR));
    assert!(
        first[2].ends_with("-03:00"),
        "São Paulo's time: {}",
        first[2]
    );
    assert_eq!(
        portaria::time::parse_rfc3339(&first[2]),
        portaria::time::parse_rfc3339(&first[1])
    );
    assert_eq!(
        &first[3..],
        [
            "pagarme",
            "charge.paid",
            "",
            "pending",
            "a1",
            "1990",
            "João Ninguém"
        ]
    );
    // A comma, quotes and a line break, read back whole; a negative amount is a number.
    assert_eq!(rows[2][8], "-500");
    assert_eq!(rows[2][9], "Silva, \"Zé\"\nFilho");
    // asaas names no fields: empty columns.
    assert_eq!(
        &rows[4][3..],
        ["asaas", "PAYMENT_RECEIVED", "", "stored", "b1", "", ""]
    );

    // JSON lines, filtered like the list: pagarme's of the last day.
    let out = export(&[
        "--format",
        "jsonl",
        "--endpoint",
        "pagarme",
        "--since",
        "1d",
    ]);
    let lines: Vec<serde_json::Value> = ok_stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["id"], b);
    assert_eq!(lines[0]["customer"], "Silva, \"Zé\"\nFilho");
    assert_eq!(lines[0]["amount"], "-500");
    assert_eq!(lines[1]["id"], c);
    assert_eq!(lines[1]["amount"], serde_json::Value::Null);
    assert_eq!(lines[1]["status"], "dead");
    assert!(
        lines[1]["received_at_local"]
            .as_str()
            .unwrap()
            .ends_with("-03:00")
    );

    // An unknown endpoint is refused like the list's.
    let out = export(&["--format", "csv", "--endpoint", "asas"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("did you mean `asaas`"));
    seeded.s.close().await;
}

/// RFC 4180 read back: quoted fields may hold commas, doubled quotes and line breaks.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
    let (mut quoted, mut chars) = (false, text.chars().peekable());
    while let Some(ch) = chars.next() {
        match (quoted, ch) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, ch) => field.push(ch),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => assert_eq!(chars.next(), Some('\n'), "CRLF"),
            (false, '\n') => panic!("a bare LF ends no line"),
            (false, ch) => field.push(ch),
        }
        if !quoted && ch == '\r' {
            row.push(std::mem::take(&mut field));
            rows.push(std::mem::take(&mut row));
        }
    }
    assert!(
        row.is_empty() && field.is_empty(),
        "the last line ends in CRLF"
    );
    rows
}
