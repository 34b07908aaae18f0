//! No secret leaks, anywhere: the real binary at `RUST_LOG=trace` through a realistic session
//! (valid, invalid, duplicate and stale webhooks for several providers, static tokens in a
//! header, in HTTP Basic and in the query string, a forward signed with a Standard Webhooks
//! key, a forward to a dead target, `/metrics`, `events list/show`, an archive written by
//! `portaria prune`, `portaria check` with bad secret files and a bad TOML line). Every
//! configured secret, static token and forward signing key (and its base64 part, and the key
//! bytes it decodes to) is then looked for in every log line, CLI output, metrics page, stored
//! row and archive file: none may appear. A secret file that others can read is warned about
//! at start-up. Promises: docs/guarantees/input.md.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);
const PAGARME: &str = "pagarme-S3cr3t-a81f";
const GITHUB: &str = "github-S3cr3t-b92e";
const STRIPE: &str = "whsec_stripeS3cr3tc03d";
const RELYA: &str = "relya-S3cr3t-d14c";
const ASAAS_TOKEN: &str = "asaas-T0ken-e25b";
const VINDI_BASIC: &str = "vindi:b4sic-f36a";
const VINDI_TOKEN: &str = "vindi-T0ken-g47b";
/// The forward's signing key: `whsec_` and the base64 of these bytes.
const FORWARD_KEY_BYTES: &[u8] = b"forward-signing-key-h58c";

fn forward_secret() -> String {
    format!("whsec_{}", STANDARD.encode(FORWARD_KEY_BYTES))
}

/// Every string that must never be seen, with a name for the failure message.
fn needles() -> Vec<(String, String)> {
    let forward = forward_secret();
    let mut out = vec![
        ("pagarme secret".to_string(), PAGARME.to_string()),
        ("github secret (file)".to_string(), GITHUB.to_string()),
        ("stripe secret".to_string(), STRIPE.to_string()),
        (
            "stripe secret's body".to_string(),
            STRIPE.trim_start_matches("whsec_").to_string(),
        ),
        ("relya secret (env)".to_string(), RELYA.to_string()),
        ("asaas token".to_string(), ASAAS_TOKEN.to_string()),
        ("vindi basic".to_string(), VINDI_BASIC.to_string()),
        ("vindi basic password".to_string(), "b4sic-f36a".to_string()),
        (
            "vindi basic, base64".to_string(),
            STANDARD.encode(VINDI_BASIC),
        ),
        ("vindi token".to_string(), VINDI_TOKEN.to_string()),
        ("forward key".to_string(), forward.clone()),
        (
            "forward key's base64".to_string(),
            forward.trim_start_matches("whsec_").to_string(),
        ),
        (
            "forward key bytes".to_string(),
            String::from_utf8(FORWARD_KEY_BYTES.to_vec()).unwrap(),
        ),
        (
            "forward key, hex".to_string(),
            hex::encode(FORWARD_KEY_BYTES),
        ),
    ];
    out.push((
        "bad secret file's content".to_string(),
        "not-base64-S3cr3t-i69d".to_string(),
    ));
    out.push((
        "toml line's secret".to_string(),
        "toml-S3cr3t-j70e".to_string(),
    ));
    out
}

/// Panics naming every needle found in `haystack` (which came from `place`).
fn assert_clean(place: &str, haystack: &str, found: &mut Vec<String>) {
    let lower = haystack.to_ascii_lowercase();
    for (name, needle) in needles() {
        if lower.contains(&needle.to_ascii_lowercase()) {
            let at = lower.find(&needle.to_ascii_lowercase()).unwrap();
            let from = at.saturating_sub(80);
            let to = (at + needle.len() + 40).min(haystack.len());
            let context = String::from_utf8_lossy(&haystack.as_bytes()[from..to]);
            found.push(format!("{name} in {place}: …{context}…"));
        }
    }
}

fn write_config(dir: &Path, target: std::net::SocketAddr, dead: std::net::SocketAddr) {
    let secret_file = dir.join("github.secret");
    std::fs::write(&secret_file, format!("{GITHUB}\n")).unwrap();
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let forward = forward_secret();
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[storage]
path = "portaria.db"
retention_days = 1
dead_retention_days = 1
archive_dir = "archive"

[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret = "{PAGARME}"
forward = {{ url = "http://{target}/in", timeout_secs = 5, secret = "{forward}" }}

[[endpoint]]
path = "/webhooks/github"
provider = "github"
secret_file = "github.secret"

[[endpoint]]
path = "/webhooks/stripe"
provider = "stripe"
secret = "{STRIPE}"
forward = {{ url = "http://{dead}/in", timeout_secs = 2, secret = "{forward}" }}
retry = ["100ms"]

[[endpoint]]
path = "/webhooks/relya"
provider = "relya"
secret_env = "PORTARIA_TEST_RELYA_SECRET"

[[endpoint]]
path = "/webhooks/asaas"
provider = "asaas"
secret = "{ASAAS_TOKEN}"

[[endpoint]]
path = "/webhooks/vindi"
provider = "vindi"
secrets = ["{VINDI_BASIC}", "{VINDI_TOKEN}"]
"#
    );
    std::fs::write(dir.join("portaria.toml"), text).unwrap();
}

fn hmac_with(secret: &str, parts: &[&[u8]]) -> String {
    hmac_hex(secret, parts)
}

/// A realistic session against the running binary: every kind of answer at least once.
async fn session(addr: std::net::SocketAddr) {
    let ts = now_secs();
    let sig = |secret: &str, body: &[u8]| format!("sha256={}", hmac_with(secret, &[body]));
    for n in 0..3 {
        let body = payment_body(n);
        let headers = vec![
            h("content-type", "application/json"),
            h("x-hub-signature", sig(PAGARME, &body)),
        ];
        assert_eq!(
            post(addr, "/webhooks/pagarme", &headers, &body)
                .await
                .status,
            200
        );
        // A gateway redelivery: a duplicate.
        assert_eq!(
            post(addr, "/webhooks/pagarme", &headers, &body)
                .await
                .status,
            200
        );
    }
    let body = payment_body(10);
    let wrong = vec![h("x-hub-signature", sig("not-the-secret", &body))];
    assert_eq!(
        post(addr, "/webhooks/pagarme", &wrong, &body).await.status,
        401
    );

    let body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let gh = vec![
        h("x-github-event", "push"),
        h("x-github-delivery", "gh-1"),
        h("x-hub-signature-256", sig(GITHUB, &body)),
    ];
    assert_eq!(post(addr, "/webhooks/github", &gh, &body).await.status, 200);
    assert_eq!(post(addr, "/webhooks/github", &gh, &body).await.status, 200);
    let mut forged = gh.clone();
    forged[2] = h("x-hub-signature-256", sig("guess", &body));
    assert_eq!(
        post(addr, "/webhooks/github", &forged, &body).await.status,
        401
    );

    let body = payment_body(20);
    let stripe = |t: i64| {
        let mac = hmac_with(STRIPE, &[t.to_string().as_bytes(), b".", &body]);
        vec![h("stripe-signature", format!("t={t},v1={mac}"))]
    };
    assert_eq!(
        post(addr, "/webhooks/stripe", &stripe(ts), &body)
            .await
            .status,
        200
    );
    assert_eq!(
        post(addr, "/webhooks/stripe", &stripe(ts - 3600), &body)
            .await
            .status,
        401
    );

    let body = payment_body(30);
    let relya = relya_headers(RELYA, "dlv-1", ts, &body);
    assert_eq!(
        post(addr, "/webhooks/relya", &relya, &body).await.status,
        200
    );
    let bad = relya_headers("old-guess", "dlv-2", ts, &body);
    assert_eq!(post(addr, "/webhooks/relya", &bad, &body).await.status, 401);

    let body = br#"{"id":"evt_1","event":"PAYMENT_RECEIVED","payment":{"id":"pay_1"}}"#;
    let asaas = vec![h("asaas-access-token", ASAAS_TOKEN)];
    assert_eq!(
        post(addr, "/webhooks/asaas", &asaas, body).await.status,
        200
    );
    let near = vec![h("asaas-access-token", format!("{ASAAS_TOKEN}x"))];
    assert_eq!(post(addr, "/webhooks/asaas", &near, body).await.status, 401);

    let body = br#"{"event":{"type":"bill_paid","data":{"bill":{"id":7}}}}"#;
    let basic = vec![h(
        "authorization",
        format!("Basic {}", STANDARD.encode(VINDI_BASIC)),
    )];
    assert_eq!(
        post(addr, "/webhooks/vindi", &basic, body).await.status,
        200
    );
    let body = br#"{"event":{"type":"bill_created","data":{"bill":{"id":8}}}}"#;
    let path = format!("/webhooks/vindi?token={VINDI_TOKEN}");
    assert_eq!(post(addr, &path, &[], body).await.status, 200);
    let path = format!("/webhooks/vindi?token={VINDI_TOKEN}0");
    assert_eq!(post(addr, &path, &[], body).await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_log_line_the_cli_metrics_the_database_or_an_archive() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let target = Target::start(vec![200]).await;
    // A port with nothing listening: the stripe forward fails with a connection error.
    let closed = ClosedPort::new();
    let dead = closed.addr;
    write_config(dir, target.addr, dead);
    let config = dir.join("portaria.toml");
    let mut found = Vec::new();

    let mut serve = portaria();
    serve
        .env("RUST_LOG", "trace")
        .env("PORTARIA_TEST_RELYA_SECRET", RELYA)
        .args(["serve", "--config"])
        .arg(&config);
    let mut server = Process::spawn_command(serve).await;
    session(server.addr).await;
    eventually(WAIT, "the pagarme events forwarded", || target.count() == 3).await;
    let db = open_db(&dir.join("portaria.db"));
    eventually(WAIT, "the stripe event dead", || {
        db.query_row(
            "SELECT count(*) FROM events WHERE status = 'dead'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    })
    .await;
    // The forwarded requests carry a signature made with the key, never the key.
    for seen in target.seen.lock().unwrap().iter() {
        let headers: String = seen
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())))
            .collect();
        assert!(headers.contains("webhook-signature"), "{headers}");
        assert_clean("a forwarded request", &headers, &mut found);
        assert_clean(
            "a forwarded body",
            &String::from_utf8_lossy(&seen.body),
            &mut found,
        );
    }
    let metrics = send(server.admin.unwrap(), "GET", "/metrics", &[], b"").await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.body.contains("portaria_"), "{}", metrics.body);
    assert_clean("/metrics", &metrics.body, &mut found);

    // Every event, as the operator sees it.
    let ids: Vec<i64> = db
        .prepare("SELECT id FROM events ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let endpoints: Vec<String> = db
        .prepare("SELECT endpoint || ' ' || status FROM events ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        ids.len(),
        9,
        "3 pagarme, github, stripe, relya, asaas, 2 vindi: {endpoints:?}"
    );
    let cli = |args: &[&str]| {
        let out = portaria()
            .env("RUST_LOG", "trace")
            .args(args)
            .arg("--config")
            .arg(&config)
            .env("PORTARIA_TEST_RELYA_SECRET", RELYA)
            .output()
            .unwrap();
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    for args in [vec!["events", "list"], vec!["events", "list", "--json"]] {
        assert_clean(&args.join(" "), &cli(&args), &mut found);
    }
    for id in &ids {
        let id = id.to_string();
        assert_clean("events show", &cli(&["events", "show", &id]), &mut found);
        assert_clean(
            "events show --raw",
            &cli(&["events", "show", &id, "--raw"]),
            &mut found,
        );
    }
    let shown = cli(&["events", "show", &ids[8].to_string()]);
    assert!(shown.contains("bill_created"), "{shown}");

    // Everything the database holds.
    let mut rows = String::new();
    for table in ["events", "payloads", "attempts", "meta"] {
        let mut stmt = db.prepare(&format!("SELECT * FROM {table}")).unwrap();
        let columns = stmt.column_count();
        let mut q = stmt.query([]).unwrap();
        while let Some(row) = q.next().unwrap() {
            for c in 0..columns {
                let value: rusqlite::types::Value = row.get(c).unwrap();
                rows.push_str(&format!("{value:?} "));
                if let rusqlite::types::Value::Blob(b) = value {
                    rows.push_str(&String::from_utf8_lossy(&b));
                }
            }
            rows.push('\n');
        }
    }
    assert!(
        rows.contains("[redacted]"),
        "credential headers are stored redacted"
    );
    assert_clean("the database", &rows, &mut found);

    server.signal(libc::SIGTERM);
    server.wait(Duration::from_secs(20)).await;
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("TRACE"), "the log is at trace level");
    assert!(
        log.contains("webhook rejected"),
        "the error paths were logged"
    );
    assert!(
        log.contains("connection refused")
            || log.contains("Connection refused")
            || log.contains("refused"),
        "the dead target's error was logged"
    );
    assert_clean("the server's log", &log, &mut found);

    // Age every finished event past its window; `portaria prune` archives and deletes them.
    db.execute(
        "UPDATE events SET received_at = received_at - 3 * 86400000",
        [],
    )
    .unwrap();
    drop(db);
    let pruned = cli(&["prune"]);
    assert_clean("portaria prune", &pruned, &mut found);
    let mut archived = String::new();
    for file in std::fs::read_dir(dir.join("archive")).unwrap() {
        let path = file.unwrap().path();
        let mut text = String::new();
        flate2::read::MultiGzDecoder::new(std::fs::File::open(&path).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        archived.push_str(&text);
    }
    assert_eq!(archived.lines().count(), 9, "{pruned}");
    assert_clean("an archive file", &archived, &mut found);

    // `portaria check`: a good file, then bad secret files and a bad TOML line.
    assert_clean("portaria check", &cli(&["check"]), &mut found);
    let loose = dir.join("loose.secret");
    std::fs::write(&loose, format!("{PAGARME}\n")).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bad = dir.join("bad.secret");
    std::fs::write(&bad, "whsec_not-base64-S3cr3t-i69d!\n").unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    let bad_config = dir.join("bad.toml");
    let storage = "[storage]\npath = \"x.db\"\n\n";
    std::fs::write(
        &bad_config,
        format!(
            "{storage}[[endpoint]]\npath = \"/a\"\nprovider = \"pagarme\"\nsecret_file = \"loose.secret\"\n"
        ),
    )
    .unwrap();
    let out = run_cli(&["check"], &bad_config);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("chmod 600"), "{text}");
    assert_clean("portaria check (a loose secret file)", &text, &mut found);
    std::fs::write(
        &bad_config,
        format!(
            "{storage}[[endpoint]]\npath = \"/b\"\nprovider = \"standard-webhooks\"\nsecret_file = \"bad.secret\"\n"
        ),
    )
    .unwrap();
    let out = run_cli(&["check"], &bad_config);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("base64"), "{text}");
    assert_clean("portaria check (a bad secret file)", &text, &mut found);
    std::fs::write(
        &bad_config,
        "[[endpoint]]\npath = \"/a\"\nprovider = \"pagarme\"\nsecret = \"toml-S3cr3t-j70e\" oops\n",
    )
    .unwrap();
    let out = run_cli(&["check"], &bad_config);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert_clean("portaria check (bad TOML)", &text, &mut found);
    let out = run_cli(&["serve"], &bad_config);
    assert_clean(
        "portaria serve (bad TOML)",
        &String::from_utf8_lossy(&out.stderr),
        &mut found,
    );

    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_file_others_can_read_is_warned_about_at_start_up() {
    // Also `config::secrets`' unit test `a_secret_file_others_can_read_is_a_warning_not_an_error`.
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let target = Target::start(vec![200]).await;
    write_config(dir, target.addr, target.addr);
    let secret_file = dir.join("github.secret");
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut serve = portaria();
    serve
        .env("PORTARIA_TEST_RELYA_SECRET", RELYA)
        .args(["serve", "--config"])
        .arg(dir.join("portaria.toml"));
    let server = Process::spawn_command(serve).await;
    let log = server.log.lock().unwrap().clone();
    assert!(
        log.contains("github.secret is readable by group or others; chmod 600 it"),
        "{log}"
    );
    assert!(!log.contains(GITHUB), "{log}");
}
