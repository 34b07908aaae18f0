//! The command line, as an operator uses it: `check`, config lookup, `events`, signals.

use std::time::Duration;

use crate::support::*;

#[test]
fn check_says_ok_for_a_valid_file_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", "")).unwrap();
    let out = portaria()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    ok_stdout(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ok: {}", config.display()),
        "ok, and which file"
    );
    assert!(
        !dir.path().join("p.db").exists(),
        "check serves nothing and creates nothing"
    );
}

#[test]
fn a_rust_log_that_is_not_a_filter_is_named_not_silently_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", "")).unwrap();
    let out = portaria()
        .env("RUST_LOG", "portaria=lots")
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    ok_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"RUST_LOG="portaria=lots" is not a log filter"#),
        "{stderr}"
    );
}

#[test]
fn check_lists_every_problem_with_file_and_key_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(
        &config,
        "[[endpoint]]\npath = \"/a\"\nprovider = \"paypal\"\nsecret = \"x\"\n\n[[endpoint]]\npath = \"/b\"\nprovider = \"github\"\nsecret_env = \"PORTARIA_IT_UNSET\"\n",
    )
    .unwrap();
    let out = portaria()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .env_remove("PORTARIA_IT_UNSET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml: endpoint[0] (line 1)") && err.contains("paypal"),
        "{err}"
    );
    assert!(
        err.contains("endpoint[1] (line 6).secret_env") && err.contains("PORTARIA_IT_UNSET"),
        "{err}"
    );
}

#[test]
fn serve_refuses_to_start_on_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[server]\nlisten = \"nowhere\"\n").unwrap();
    let out = portaria()
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("server.listen") && err.contains("nowhere"),
        "{err}"
    );
}

#[test]
fn check_and_serve_refuse_a_dedup_rule_on_unsigned_parts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let endpoint = |extra: &str| {
        format!(
            "[storage]\npath = \"{}\"\n\n[[endpoint]]\npath = \"/webhooks/github\"\n\
             provider = \"github\"\nsecret = \"s3cret\"\ndedup = \"header:X-GitHub-Delivery\"\n{extra}",
            db.display()
        )
    };
    let config = dir.path().join("unsigned.toml");
    std::fs::write(&config, endpoint("")).unwrap();
    for command in ["check", "serve"] {
        let out = portaria()
            .arg(command)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{command}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("endpoint[0] (line 4).dedup: `header:x-github-delivery` reads the header")
                && err.contains("which the github signature does not cover")
                && err.contains("dedup_unsigned = true"),
            "{command}: {err}"
        );
    }
    assert!(!db.exists(), "serve stopped before opening the store");
    // Asked for by name, it is accepted.
    std::fs::write(&config, endpoint("dedup_unsigned = true\n")).unwrap();
    let out = portaria()
        .arg("check")
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(ok_stdout(&out).trim(), format!("ok: {}", config.display()));
}

#[test]
fn config_lookup_prefers_the_flag_then_the_env_then_here_then_the_user_file() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let user_dir = home.join(".config/portaria");
    std::fs::create_dir_all(&user_dir).unwrap();
    let here = dir.path().join("here");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    // Each candidate file is broken in its own way, so the error says which one was read.
    std::fs::write(here.join("portaria.toml"), "here_file_marker = 1\n").unwrap();
    std::fs::write(user_dir.join("portaria.toml"), "user_file_marker = 1\n").unwrap();
    let env_file = dir.path().join("env.toml");
    std::fs::write(&env_file, "env_file_marker = 1\n").unwrap();
    let flag_file = dir.path().join("flag.toml");
    std::fs::write(&flag_file, "flag_file_marker = 1\n").unwrap();
    let run_in =
        |cwd: &std::path::Path, args: &[&std::ffi::OsStr], env: Option<&std::path::Path>| {
            let mut cmd = portaria();
            cmd.arg("check")
                .args(args)
                .current_dir(cwd)
                .env("HOME", &home)
                .env_remove("XDG_CONFIG_HOME");
            if let Some(env) = env {
                cmd.env("PORTARIA_CONFIG", env);
            }
            String::from_utf8_lossy(&cmd.output().unwrap().stderr).into_owned()
        };
    let run = |args: &[&std::ffi::OsStr], env: Option<&std::path::Path>| run_in(&here, args, env);
    assert!(
        run(
            &["--config".as_ref(), flag_file.as_os_str()],
            Some(&env_file)
        )
        .contains("flag_file_marker")
    );
    assert!(run(&[], Some(&env_file)).contains("env_file_marker"));
    assert!(run(&[], None).contains("here_file_marker"));
    assert!(run_in(&elsewhere, &[], None).contains("user_file_marker"));
}

#[test]
fn with_no_config_anywhere_check_reports_the_embedded_demo() {
    let home = tempfile::tempdir().unwrap();
    let out = portaria()
        .arg("check")
        .current_dir(home.path())
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap();
    if std::path::Path::new(portaria::config::SYSTEM_PATH).exists() {
        return; // this machine has a system config; the order test above covers the rest
    }
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("embedded demo"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_stores_lists_shows_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    let mut server = Process::spawn(&config).await;

    let body = payment_body(5);
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 200);
    let relya = br#"{"event":"messages_update"}"#;
    let headers = relya_headers(RELYA_SECRET, "dlv_cli", now_secs(), relya);
    assert_eq!(
        post(server.addr, "/webhooks/relya", &headers, relya)
            .await
            .status,
        200
    );

    // The CLI reads while the server runs (WAL).
    let out = run_cli(&["events", "list", "--json"], &config);
    ok_stdout(&out);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["endpoint"], "relya", "newest first");
    assert_eq!(lines[0]["dedup_key"], "dlv_cli");
    assert_eq!(lines[0]["event_type"], "messages_update");
    assert_eq!(lines[0]["status"], "stored");
    assert!(lines[0]["received_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lines[1]["endpoint"], "pagarme");
    for key in [
        "id",
        "endpoint",
        "dedup_key",
        "event_type",
        "received_at",
        "status",
    ] {
        assert!(lines[1].get(key).is_some(), "missing {key}");
    }

    let out = run_cli(&["events", "list", "--endpoint", "pagarme"], &config);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("pagarme") && !table.contains("relya"),
        "{table}"
    );
    let out = run_cli(&["events", "list", "--json", "--limit", "1"], &config);
    let newest = String::from_utf8_lossy(&out.stdout);
    assert_eq!(newest.lines().count(), 1, "{newest}");
    assert!(
        newest.contains("\"endpoint\":\"relya\""),
        "the newest one: {newest}"
    );

    let id = lines[1]["id"].as_i64().unwrap().to_string();
    let out = portaria()
        .args(["events", "show", &id, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("x-hub-signature: sha256="), "{shown}");
    assert!(
        shown.contains(std::str::from_utf8(&body).unwrap()),
        "{shown}"
    );

    let out = run_cli(&["events", "show", "999"], &config);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no event 999"));

    server.signal(libc::SIGTERM);
    let status = server.wait(Duration::from_secs(15)).await;
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean exit");
    assert!(server.log.lock().unwrap().contains("SIGTERM"));
    // Closed cleanly: the WAL was checkpointed into the main file.
    let wal = dir.path().join("p.db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0);
}

/// A config with one endpoint per provider preset, for `send`.
fn every_provider(db: &std::path::Path) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
[storage]
path = "{}"
[[endpoint]]
path = "/w/plowf"
provider = "plowf"
secret = "plowf-secret"
[[endpoint]]
path = "/w/pagarme"
provider = "pagarme"
secret = "pagarme-secret"
[[endpoint]]
path = "/w/relya"
provider = "relya"
secret = "relya-secret"
[[endpoint]]
path = "/w/stripe"
provider = "stripe"
secret = "whsec_stripe"
[[endpoint]]
path = "/w/standard"
provider = "standard-webhooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
[[endpoint]]
path = "/w/svix"
provider = "svix"
secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
[[endpoint]]
path = "/w/github"
provider = "github"
secret = "github-secret"
[[endpoint]]
path = "/w/acme"
provider = "hmac"
secret = "acme-secret"
signature = {{ header = "x-acme-signature", encoding = "base64", prefix = "v1=", timestamp_header = "x-acme-timestamp", template = "{{header:x-acme-timestamp}}.{{body}}" }}
"#,
        db.display()
    )
}

const PROVIDERS: [&str; 8] = [
    "plowf", "pagarme", "relya", "stripe", "standard", "svix", "github", "acme",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_signs_as_every_provider_and_repeats_the_identical_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let text = every_provider(&db);
    let server = TestServer::start_with(dir, db, &text).await;
    for name in PROVIDERS {
        let out = portaria()
            .args(["send", "--endpoint", name, "--repeat", "3", "--data"])
            .arg(format!(r#"{{"id":"evt_{name}","type":"charge.paid"}}"#))
            .arg("--url")
            .arg(server.url(&format!("/w/{name}")))
            .arg("--config")
            .arg(server.config_path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for n in 1..=3 {
            assert!(
                stdout.contains(&format!("{n}/3: 200 {{\"received\":true}}")),
                "{name}: {stdout}"
            );
        }
    }
    let per_endpoint: i64 = server.one("SELECT count(DISTINCT endpoint) FROM events");
    assert_eq!(per_endpoint, 8);
    assert_eq!(
        server.count_rows(),
        8,
        "each repeated delivery is stored once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_send_signs_is_rejected_after_tampering_with_one_byte() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let text = every_provider(&db);
    let server = TestServer::start_with(dir, db, &text).await;
    let config =
        portaria::config::Config::parse(&text, portaria::config::Source::Embedded).unwrap();
    for name in PROVIDERS {
        let endpoint = config.endpoint(name).unwrap();
        let body = format!(r#"{{"id":"evt_t_{name}","type":"x"}}"#).into_bytes();
        let url = server.url(&format!("/w/{name}"));
        let signed = portaria::cli::send::prepare(&config, endpoint, body, Some(&url)).unwrap();
        let mut tampered = signed.body.to_vec();
        tampered[2] ^= 0x01; // "id" becomes "hd": still JSON-ish, but not what was signed
        let reply = post(
            server.addr,
            &format!("/w/{name}"),
            &signed.headers,
            &tampered,
        )
        .await;
        assert_eq!(reply.status, 401, "{name}");
        let reply = post(
            server.addr,
            &format!("/w/{name}"),
            &signed.headers,
            &signed.body,
        )
        .await;
        assert_eq!(reply.status, 200, "{name}: the untampered copy passes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_with_the_webhook_fields() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", "")).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_portaria"))
        .args(["serve", "--log-format", "json", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a log line within 20 s")
            .unwrap()
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        if v["message"] == "listening" {
            break v["addr"]
                .as_str()
                .unwrap()
                .parse::<std::net::SocketAddr>()
                .unwrap();
        }
    };
    let body = payment_body(11);
    assert_eq!(post_pagarme(addr, &body).await.status, 200);
    loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the webhook's log line")
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["message"] == "webhook" {
            assert_eq!(v["endpoint"], "pagarme");
            assert_eq!(v["event_type"], "charge.paid");
            assert_eq!(v["object_id"], "ch_11");
            assert_eq!(v["status"], 200);
            assert_eq!(v["duplicate"], false);
            assert!(v["latency_ms"].as_f64().is_some());
            assert!(!line.contains(PAGARME_SECRET));
            break;
        }
    }
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_commands_need_no_gateway_secret() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    let text = base_config(&db, "", "")
        + "\n[[endpoint]]\npath = \"/webhooks/from-env\"\nprovider = \"github\"\nsecret_env = \"PORTARIA_IT_SECRET_FOR_SERVE\"\n";
    std::fs::write(&config, &text).unwrap();
    // The server gets the secret; the operator's shell does not have it.
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("PORTARIA_IT_SECRET_FOR_SERVE", "s3");
    let server = Process::spawn_command(serve).await;
    let body = payment_body(1);
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);

    for args in [
        &["events", "list"][..],
        &["events", "show", "1"],
        &["prune", "--dry-run"],
    ] {
        let out = portaria()
            .args(args)
            .arg("--config")
            .arg(&config)
            .env_remove("PORTARIA_IT_SECRET_FOR_SERVE")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A command that signs does need it, and says which.
    let out = portaria()
        .args(["send", "--endpoint", "from-env", "--data", "{}", "--config"])
        .arg(&config)
        .env_remove("PORTARIA_IT_SECRET_FOR_SERVE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("PORTARIA_IT_SECRET_FOR_SERVE is not set")
    );
}

#[test]
fn database_commands_refuse_a_database_that_does_not_exist_yet() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("never-served.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    let archive = dir.path().join("2026-11-30.jsonl.gz");
    let archive = archive.to_str().unwrap();
    for args in [
        &["events", "list"][..],
        &["prune", "--dry-run"],
        &["archive", "replay", archive],
    ] {
        let out = run_cli(args, &config);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no database at"),
            "{args:?}"
        );
    }
    assert!(!db.exists(), "looking creates nothing");
}

/// `portaria events list | head -1`: a reader that goes away is not an error for a listing.
/// The output is far larger than a pipe buffer, so the binary is still writing when the
/// reader closes its end, and sees EPIPE.
#[test]
fn a_listing_piped_into_a_reader_that_closes_early_exits_0_quietly() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    portaria::store::Store::open(&db).unwrap().close();
    let mut conn = open_db(&db);
    let tx = conn.transaction().unwrap();
    let now = portaria::time::now_ms();
    let big_body = vec![b'x'; 256 * 1024];
    for n in 0..3000_i64 {
        let key = format!("evt_{n:05}");
        let body: &[u8] = if n == 0 { &big_body } else { b"{}" };
        tx.execute(
            "INSERT INTO events (endpoint, dedup_key, event_type, content_type, payload_bytes, \
             received_at, status, dedup_hash) \
             VALUES ('pagarme', ?1, 'charge.paid', 'application/json', ?2, ?3, 'stored', ?4)",
            rusqlite::params![
                key,
                body.len() as i64,
                now - n,
                portaria::store::dedup_hash("pagarme", &key)
            ],
        )
        .unwrap();
        tx.execute(
            "INSERT INTO payloads (event_id, headers, body) VALUES (?1, ?2, ?3)",
            rusqlite::params![
                tx.last_insert_rowid(),
                b"content-type: application/json\r\n".as_slice(),
                body
            ],
        )
        .unwrap();
    }
    tx.commit().unwrap();
    drop(conn);

    for args in [
        &["events", "list", "--limit", "3000"][..],
        &["events", "list", "--limit", "3000", "--json"],
        &["events", "show", "1"],
    ] {
        let mut child = portaria()
            .args(args)
            .arg("--config")
            .arg(&config)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        // The reader is dropped here: the pipe's read end is closed.
        assert!(!first.is_empty(), "{args:?}: a first line");
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

/// The commands that only look open the store read-only: beside another process holding the
/// write lock (a running server in the middle of a commit, a long `prune`), each answers at
/// once, where one that went through a writer thread would wait out the busy timeout and fail
/// with "database is locked".
#[test]
fn the_commands_that_only_look_never_wait_for_the_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(&config, base_config(&db, "", "")).unwrap();
    portaria::store::Store::open(&db).unwrap().close();
    let conn = open_db(&db);
    conn.execute(
        "INSERT INTO events (endpoint, dedup_key, dedup_hash, payload_bytes, received_at, \
         status) VALUES ('pagarme', 'k', ?1, 2, 0, 'stored')",
        [portaria::store::dedup_hash("pagarme", "k")],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO payloads (event_id, headers, body) VALUES (last_insert_rowid(), x'', x'7b7d')",
        [],
    )
    .unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let backup = dir.path().join("copy.db");
    for args in [
        &["events", "list"][..],
        &["events", "show", "1"],
        &["events", "show", "--json", "1"],
        &["prune", "--dry-run"],
        &["backup", backup.to_str().unwrap()],
    ] {
        ok_stdout(&run_cli(args, &config));
    }
    // A command that writes waits for the lock, and says so when it does not come.
    let replay = run_cli(&["events", "replay", "1"], &config);
    assert_eq!(replay.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&replay.stderr).contains("locked"),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    conn.execute_batch("ROLLBACK").unwrap();
}

/// Runs `portaria verify ARGS --config CONFIG`, with `stdin` on its standard input; returns
/// the exit code and stdout and stderr together.
fn verify_cli(config: &std::path::Path, args: &[&str], stdin: &[u8]) -> (Option<i32>, String) {
    use std::io::Write;
    let mut child = portaria()
        .arg("verify")
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A raw HTTP/1.1 request, LF line ends, as a capture tool or an editor would save it.
fn capture(path: &str, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut raw = format!("POST {path} HTTP/1.1\nhost: example.test\n").into_bytes();
    for (name, value) in headers {
        raw.extend_from_slice(format!("{name}: {value}\n").as_bytes());
    }
    raw.extend_from_slice(format!("content-length: {}\n\n", body.len()).as_bytes());
    raw.extend_from_slice(body);
    raw
}

const OLD_STRIPE_SECRET: &str = "whsec_old_rotated_out";

#[test]
fn verify_accepts_a_good_capture_and_says_why_a_bad_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\npath = \"{}\"\n\n[[endpoint]]\npath = \"/webhooks/stripe\"\n\
             provider = \"stripe\"\nsecrets = [\"{OLD_STRIPE_SECRET}\", \"{STRIPE_SECRET}\"]\n",
            db.display()
        ),
    )
    .unwrap();
    let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let now = now_secs();
    let good = capture("/webhooks/stripe", &stripe_headers(now, body), body);
    let good_file = dir.path().join("good.http");
    std::fs::write(&good_file, &good).unwrap();
    let file = good_file.to_str().unwrap();
    let mut said = String::new();

    let (code, out) = verify_cli(&config, &["--endpoint", "stripe", "--request", file], b"");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("ok: verified with secret 2 of 2 (provider stripe)"),
        "{out}"
    );
    assert!(
        out.contains("handshake: no, an event: portaria stores it"),
        "{out}"
    );
    assert!(out.contains("dedup key: evt_1"), "{out}");
    said += &out;

    // One changed byte of the body.
    let mut tampered = good.clone();
    let at = tampered.len() - 3;
    tampered[at] ^= 0x01;
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-"],
        &tampered,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("failed: the signature does not match: tried 2 secrets"),
        "{out}"
    );
    said += &out;

    // No signature header at all.
    let headers = [h("content-type", "application/json")];
    let unsigned = capture("/webhooks/stripe", &headers, body);
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-"],
        &unsigned,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("failed: no `stripe-signature` header"),
        "{out}"
    );
    said += &out;

    // A malformed one says what is wrong with it.
    let headers = [h("stripe-signature", "t=12x,v1=00")];
    let malformed = capture("/webhooks/stripe", &headers, body);
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-"],
        &malformed,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("failed: malformed signature: `t` is not a unix timestamp"),
        "{out}"
    );

    // An old capture: the skew and the window, and the `--at` that replays it.
    let then = 1_700_000_000;
    let stale = capture("/webhooks/stripe", &stripe_headers(then, body), body);
    let at = (then + 3600).to_string();
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-", "--at", &at],
        &stale,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("3600 s (about 60 min) in the past, outside the 300 s window")
            && out.contains("pass `--at 1700000000`"),
        "{out}"
    );
    said += &out;
    let (code, out) = verify_cli(
        &config,
        &[
            "--endpoint",
            "stripe",
            "--request",
            "-",
            "--at",
            "1700000000",
        ],
        &stale,
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("ok: verified with secret 2 of 2"), "{out}");
    let early = (then - 400).to_string();
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-", "--at", &early],
        &stale,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("400 s (about 6 min) in the future"), "{out}");
    said += &out;

    // Verified, but with no dedup key the server answers 400.
    let no_id = br#"{"type":"charge.succeeded"}"#;
    let keyless = capture("/webhooks/stripe", &stripe_headers(now, no_id), no_id);
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-"],
        &keyless,
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("ok: verified with secret 2 of 2")
            && out.contains("failed: verified, but portaria answers 400: no dedup key (json:/id)"),
        "{out}"
    );

    // A wrong endpoint name lists the configured ones.
    let (code, out) = verify_cli(&config, &["--endpoint", "strip", "--request", file], b"");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("no endpoint named `strip` in ")
            && out.contains("(configured: stripe); did you mean `stripe`?"),
        "{out}"
    );

    for secret in [STRIPE_SECRET, OLD_STRIPE_SECRET] {
        assert!(!said.contains(secret), "a secret in the output: {said}");
    }
    assert!(!db.exists(), "verify opens no database");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_show_raw_piped_into_verify_round_trips_a_stored_event() {
    let server = TestServer::start("", "").await;
    let config = server.config_path();
    let body = br#"{"ref":"refs/heads/main"}"#;
    let mut headers = github_headers(Some("dlv-raw-1"), body);
    headers.push(h("authorization", "Bearer tok-never-shown"));
    assert_eq!(
        post(server.addr, "/webhooks/github", &headers, body)
            .await
            .status,
        200
    );
    let stripe = br#"{"id":"evt_raw_2","type":"charge.succeeded"}"#;
    let headers = stripe_headers(now_secs(), stripe);
    assert_eq!(
        post(server.addr, "/webhooks/stripe", &headers, stripe)
            .await
            .status,
        200
    );

    let raw = ok_stdout(&run_cli(&["events", "show", "--raw", "1"], &config));
    assert!(
        raw.starts_with("POST /webhooks/github HTTP/1.1\r\n"),
        "{raw}"
    );
    assert!(raw.contains("authorization: [redacted]\r\n"), "{raw}");
    assert!(!raw.contains("tok-never-shown"), "{raw}");
    assert!(
        raw.ends_with(&format!("\r\n\r\n{}", std::str::from_utf8(body).unwrap())),
        "{raw}"
    );
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "github", "--request", "-"],
        raw.as_bytes(),
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("ok: verified with secret 1 of 1 (provider github)"),
        "{out}"
    );
    // GitHub's key is the signed body's SHA-256, not the unsigned delivery header.
    let key = hex::encode(portaria::digest::sha256(&[body]));
    assert!(
        out.contains(&format!("dedup key: {key} (body-sha256)")),
        "{out}"
    );

    // Checked against the wrong endpoint: which header is missing, that the path differs,
    // and that a redacted credential cannot be checked again.
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-"],
        raw.as_bytes(),
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("failed: no `stripe-signature` header"),
        "{out}"
    );
    assert!(
        out.contains("not to this endpoint's path `/webhooks/stripe`"),
        "{out}"
    );
    assert!(out.contains("`authorization` holds `[redacted]`"), "{out}");

    let raw = ok_stdout(&run_cli(&["events", "show", "--raw", "2"], &config));
    let (code, out) = verify_cli(
        &config,
        &["--endpoint", "stripe", "--request", "-"],
        raw.as_bytes(),
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("ok: verified with secret 1 of 1 (provider stripe)"),
        "{out}"
    );
    assert!(!out.contains(STRIPE_SECRET) && !out.contains(GITHUB_SECRET));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_needs_only_its_endpoints_secret_and_a_stored_mercado_pago_event_says_why_it_cannot_be_checked()
 {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    let config = dir.path().join("p.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[storage]
path = "{}"
[[endpoint]]
path = "/webhooks/mp"
provider = "mercadopago"
secret_env = "PORTARIA_IT_MP_SECRET"
[[endpoint]]
path = "/webhooks/pagarme"
provider = "pagarme"
secret_env = "PORTARIA_IT_PAGARME_SECRET"
"#,
            db.display()
        ),
    )
    .unwrap();
    let mp_secret = "a-mercado-pago-secret-signature";
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("PORTARIA_IT_MP_SECRET", mp_secret)
        .env("PORTARIA_IT_PAGARME_SECRET", PAGARME_SECRET);
    let server = Process::spawn_command(serve).await;
    let url = format!("http://{}/webhooks/mp", server.addr);
    // Only Mercado Pago's secret is in this environment: Pagar.me's is not needed to send.
    let send = |url: &str, body: &str| {
        let out = portaria()
            .args([
                "send",
                "--endpoint",
                "mp",
                "--data",
                body,
                "--url",
                url,
                "--config",
            ])
            .arg(&config)
            .env("PORTARIA_IT_MP_SECRET", mp_secret)
            .env_remove("PORTARIA_IT_PAGARME_SECRET")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), said)
    };
    let (code, said) = send(&url, r#"{"id":1,"type":"payment","data":{"id":"42"}}"#);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("1/1: 200"), "{said}");
    // A URL that already carries the signed parameter is not given it twice.
    let (code, said) = send(
        &format!("{url}?data.id=43"),
        r#"{"id":2,"type":"payment","data":{"id":"43"}}"#,
    );
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("POST http://")
            && said.contains("/webhooks/mp?data.id=43 (")
            && said.contains("1/1: 200"),
        "{said}"
    );

    // A stored Mercado Pago event: its signed `data.id` was in the query string, which is not
    // stored; `verify` says so instead of blaming a changed byte.
    let raw = ok_stdout(&run_cli(&["events", "show", "--raw", "1"], &config));
    let mut verify = portaria()
        .args(["verify", "--endpoint", "mp", "--request", "-", "--config"])
        .arg(&config)
        .env("PORTARIA_IT_MP_SECRET", mp_secret)
        .env_remove("PORTARIA_IT_PAGARME_SECRET")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut verify.stdin.take().unwrap(), raw.as_bytes()).unwrap();
    let out = verify.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("failed: cannot be checked from this capture: mercadopago signs `data.id` from the query string"),
        "{said}"
    );
    assert!(!said.contains("a byte changed"), "{said}");
}
