//! Rejected requests kept (issue 27, `quarantine_keep`), on the real server: a forged request
//! is answered 401 as ever, is kept with its reason and its credentials redacted, is listed
//! by `events rejected`, explained by `verify --rejected`, never an event and never
//! forwarded; a signed one without a dedup key (400) and a body too large (413, kept
//! truncated) are kept too; an endpoint keeps its newest `quarantine_keep`.

use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

fn forged_headers() -> Vec<(String, String)> {
    vec![
        h("content-type", "application/json"),
        h("x-hub-signature", format!("sha256={}", "0".repeat(64))),
        h("authorization", "Bearer do-not-keep-me"),
    ]
}

fn rejected(server: &TestServer, endpoint: &str) -> Vec<serde_json::Value> {
    let out = run_cli(
        &["events", "rejected", "--endpoint", endpoint, "--json"],
        &server.config_path(),
    );
    ok_stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_forged_request_is_answered_as_ever_kept_listed_explained_and_never_an_event() {
    let target = Target::start(vec![200]).await;
    let forward = format!(
        "dedup = \"json:/id\"\nforward = {{ url = \"http://{}/in\" }}",
        target.addr
    );
    let server = TestServer::start("", &forward).await;

    let reply = post(
        server.addr,
        "/webhooks/pagarme",
        &forged_headers(),
        &payment_body(1),
    )
    .await;
    assert_eq!(reply.status, 401);
    assert!(reply.body.contains("invalid signature"), "{}", reply.body);
    eventually(WAIT, "the forged request kept", || {
        server.one::<i64>("SELECT count(*) FROM rejected") == 1
    })
    .await;
    let listed = rejected(&server, "pagarme");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["reason"], "bad_signature");
    assert_eq!(listed[0]["endpoint"], "pagarme");
    assert_eq!(listed[0]["truncated"], false);
    let id = listed[0]["id"].as_i64().unwrap();
    // Its headers as an event's are stored: the credential redacted; its body whole.
    let (headers, body): (Vec<u8>, Vec<u8>) = server
        .db()
        .query_row("SELECT headers, body FROM rejected", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let headers = String::from_utf8(headers).unwrap();
    assert!(headers.contains("authorization: [redacted]"), "{headers}");
    assert!(!headers.contains("do-not-keep-me"));
    assert_eq!(body, payment_body(1));
    // Never an event, never forwarded; the table lists it, the other endpoints have none.
    assert_eq!(server.events_of("pagarme"), 0);
    let events = ok_stdout(&run_cli(&["events", "list"], &server.config_path()));
    assert!(!events.contains("hook_1"), "{events}");
    assert!(rejected(&server, "github").is_empty());
    let table = ok_stdout(&run_cli(&["events", "rejected"], &server.config_path()));
    assert!(table.contains("bad_signature"), "{table}");

    // `verify --rejected` explains it as `verify` explains a file: exit 1, why.
    let out = run_cli(
        &["verify", "--rejected", &id.to_string()],
        &server.config_path(),
    );
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("rejected request {id}: endpoint pagarme")),
        "{said}"
    );
    assert!(said.contains("failed:"), "{said}");
    let out = run_cli(&["verify", "--rejected", "999999"], &server.config_path());
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no rejected request 999999"));
    // An unknown endpoint is an error naming the closest, not an empty list.
    let out = run_cli(
        &["events", "rejected", "--endpoint", "pagarm"],
        &server.config_path(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("pagarme"));

    // Signed, but no dedup key: 400, kept, and `verify` says the same.
    let keyless = br#"{"type":"charge.paid"}"#;
    let reply = post_pagarme(server.addr, keyless).await;
    assert_eq!(reply.status, 400);
    // Too large: 413, kept truncated (its headers; the body was never read).
    let big = vec![b'x'; 5000];
    let reply = post(server.addr, "/webhooks/pagarme", &forged_headers(), &big).await;
    assert_eq!(reply.status, 413);
    eventually(WAIT, "the 400 and the 413 kept", || {
        server.one::<i64>("SELECT count(*) FROM rejected") == 3
    })
    .await;
    let listed = rejected(&server, "pagarme");
    assert_eq!(listed[0]["reason"], "too_large");
    assert_eq!(listed[0]["truncated"], true);
    assert_eq!(listed[1]["reason"], "bad_request");
    let out = run_cli(
        &["verify", "--rejected", &listed[1]["id"].to_string()],
        &server.config_path(),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("ok: verified with secret 1"), "{said}");
    assert!(said.contains("no dedup key"), "{said}");
    assert_eq!(out.status.code(), Some(1));

    assert_eq!(server.events_of("pagarme"), 0);
    // A genuine event still goes, and is the only thing forwarded.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(2)).await.status,
        200
    );
    eventually(WAIT, "the genuine event delivered", || target.count() == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(target.count(), 1, "nothing rejected was forwarded");
    server.stop().await;
}

#[tokio::test]
async fn an_endpoint_keeps_its_newest_quarantine_keep_and_zero_keeps_none() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = base_config(&db, "", "").replace(
        "provider = \"github\"\n",
        "provider = \"github\"\nquarantine_keep = 0\n",
    );
    assert!(text.contains("quarantine_keep = 0"));
    let server = TestServer::start_with(dir, db, &text).await;
    for n in 0..101 {
        let reply = post(
            server.addr,
            "/webhooks/pagarme",
            &forged_headers(),
            &payment_body(n),
        )
        .await;
        assert_eq!(reply.status, 401);
        // Each kept before the next: the count this test asserts is the store's rule, not a
        // race with the bound on how many wait (`ingest/quarantine.rs`).
        let want = (n + 1).min(100) as i64;
        eventually(WAIT, "kept", || {
            server.one::<i64>("SELECT count(*) FROM rejected") == want
                && server.one::<i64>("SELECT max(id) FROM rejected") == n as i64 + 1
        })
        .await;
    }
    let kept = rejected(&server, "pagarme");
    assert_eq!(kept.len(), 100);
    let oldest: Vec<u8> = server.one("SELECT body FROM rejected ORDER BY id LIMIT 1");
    assert_eq!(oldest, payment_body(1), "the first one went");
    // `quarantine_keep = 0`: answered as ever, nothing kept.
    let reply = post(server.addr, "/webhooks/github", &[], b"{}").await;
    assert_eq!(reply.status, 401);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rejected(&server, "github").is_empty());
    server.stop().await;
}

#[tokio::test]
async fn the_pruner_drops_rejected_requests_older_than_quarantine_for() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = base_config(&db, "", "").replace(
        "provider = \"github\"\n",
        "provider = \"github\"\nquarantine_for = \"5s\"\n",
    );
    assert!(text.contains("quarantine_for = \"5s\""));
    let config = dir.path().join("portaria.toml");
    std::fs::write(&config, &text).unwrap();
    // The real binary, pruning every 100 ms.
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("PORTARIA_TEST_PRUNE_EVERY_MS", "100");
    let process = Process::spawn_command(serve).await;
    for path in ["/webhooks/pagarme", "/webhooks/github"] {
        let reply = post(process.addr, path, &forged_headers(), &payment_body(1)).await;
        assert_eq!(reply.status, 401);
    }
    let count = |endpoint: &str| -> i64 {
        open_db(&db)
            .query_row(
                "SELECT count(*) FROM rejected WHERE endpoint = ?1",
                [endpoint],
                |r| r.get(0),
            )
            .unwrap()
    };
    eventually(WAIT, "both kept", || {
        count("pagarme") == 1 && count("github") == 1
    })
    .await;
    // No other rejection comes: only the pruner can drop github's, past its 5 s (long enough
    // for a loaded CI machine's writer to keep both first); pagarme's 48 h stay.
    eventually(WAIT, "github's pruned", || count("github") == 0).await;
    assert_eq!(count("pagarme"), 1);
    // The pruner logs after its delete commits, and the log reaches the test through a reader
    // task of its own: wait for the line rather than read the log at once.
    eventually(WAIT, "the pruner's log line", || {
        process
            .log
            .lock()
            .unwrap()
            .contains("pruned old rejected requests")
    })
    .await;
    drop(process);
}
