//! The request contract, row by row, against the real server and a real SQLite file.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_new_event_is_stored_once_then_answered_200() {
    let server = TestServer::start("", "").await;
    let body = payment_body(1);
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body, r#"{"received":true}"#);
    assert_eq!(reply.headers["content-type"], "application/json");

    // The row was committed before the answer: it is there the moment the 200 is.
    let (endpoint, key, kind, stored_body, headers, status): (
        String,
        String,
        Option<String>,
        Vec<u8>,
        Vec<u8>,
        String,
    ) = server
        .db()
        .query_row(
            "SELECT endpoint, dedup_key, event_type, body, headers, status FROM events \
             JOIN payloads ON event_id = id",
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(endpoint, "pagarme");
    assert_eq!(
        key,
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body)),
        "pagarme dedups on the body's SHA-256"
    );
    assert_eq!(kind.as_deref(), Some("charge.paid"));
    assert_eq!(stored_body, body, "the raw body is stored exactly");
    let headers = String::from_utf8(headers).unwrap();
    assert!(headers.contains("x-hub-signature: sha256="), "{headers}");
    assert_eq!(status, "stored", "an endpoint without forward only stores");

    // WAL + synchronous=FULL are the settings the durability promise rests on.
    let mode: String = server.one("PRAGMA journal_mode");
    assert_eq!(mode, "wal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_delivery_gets_the_same_200_and_no_second_row() {
    let server = TestServer::start("", "").await;
    let body = br#"{"event":"messages_update","data":{"status":"delivered"}}"#;
    for _ in 0..3 {
        let headers = relya_headers(RELYA_SECRET, "dlv_42", now_secs(), body);
        let reply = post(server.addr, "/webhooks/relya", &headers, body).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (200, r#"{"received":true}"#)
        );
    }
    assert_eq!(server.count_rows(), 1);
    let key: String = server.one("SELECT dedup_key FROM events");
    assert_eq!(key, "dlv_42", "relya dedups on its delivery id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_copies_at_the_same_moment_all_get_200_and_make_one_row() {
    let server = TestServer::start("", "").await;
    let body = payment_body(7);
    let headers = pagarme_headers(&body);
    let copies = (0..40).map(|_| {
        let (headers, body) = (headers.clone(), body.clone());
        let addr = server.addr;
        tokio::spawn(async move { post(addr, "/webhooks/pagarme", &headers, &body).await })
    });
    for copy in copies.collect::<Vec<_>>() {
        let reply = copy.await.unwrap();
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (200, r#"{"received":true}"#)
        );
    }
    assert_eq!(server.count_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_events_each_get_their_row() {
    let server = TestServer::start("", "").await;
    let sends = (0..30).map(|n| {
        let addr = server.addr;
        tokio::spawn(async move {
            let body = payment_body(n);
            post_pagarme(addr, &body).await.status
        })
    });
    for send in sends.collect::<Vec<_>>() {
        assert_eq!(send.await.unwrap(), 200);
    }
    assert_eq!(server.count_rows(), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_still_verifies() {
    let server = TestServer::start("", "").await;
    let body = br#"{"event":"connection_update"}"#;
    let headers = relya_headers("old-relya-secret", "dlv_old", now_secs(), body);
    assert_eq!(
        post(server.addr, "/webhooks/relya", &headers, body)
            .await
            .status,
        200
    );
    assert_eq!(server.count_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_wrong_signatures_get_401_and_store_nothing() {
    let server = TestServer::start("", "").await;
    let body = payment_body(1);

    let unsigned = post(
        server.addr,
        "/webhooks/pagarme",
        &[h("content-type", "application/json")],
        &body,
    )
    .await;
    assert_eq!(unsigned.status, 401);

    let mut tampered = body.clone();
    tampered[10] ^= 1;
    let wrong = post(
        server.addr,
        "/webhooks/pagarme",
        &pagarme_headers(&body),
        &tampered,
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("invalid signature"), "{}", wrong.body);

    let forged = vec![h(
        "x-hub-signature",
        format!("sha256={}", hmac_hex("guessed", &[&body])),
    )];
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &forged, &body)
            .await
            .status,
        401
    );

    let garbage = vec![h("x-hub-signature", "sha256=zz")];
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &garbage, &body)
            .await
            .status,
        401
    );

    assert_eq!(server.count_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_outside_the_window_get_401_and_store_nothing() {
    let server = TestServer::start("", "").await;
    let body = br#"{"event":"messages_update"}"#;
    for skew in [-301, 301, -3600] {
        let headers = relya_headers(
            RELYA_SECRET,
            &format!("dlv_{skew}"),
            now_secs() + skew,
            body,
        );
        let reply = post(server.addr, "/webhooks/relya", &headers, body).await;
        assert_eq!(reply.status, 401, "skew {skew}");
        assert!(reply.body.contains("timestamp"), "{}", reply.body);
    }
    let stripe_body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let old = post(
        server.addr,
        "/webhooks/stripe",
        &stripe_headers(now_secs() - 600, stripe_body),
        stripe_body,
    )
    .await;
    assert_eq!(old.status, 401);
    assert_eq!(server.count_rows(), 0);

    // Inside the window it passes: the window is the only thing that differed.
    let fresh = post(
        server.addr,
        "/webhooks/stripe",
        &stripe_headers(now_secs() - 60, stripe_body),
        stripe_body,
    )
    .await;
    assert_eq!(fresh.status, 200);
    let key: String = server.one("SELECT dedup_key FROM events");
    assert_eq!(key, "evt_1", "stripe dedups on the body's id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_by_content_length_gets_413() {
    let server = TestServer::start("", "").await;
    let body = vec![b'x'; 4097];
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 413);
    assert_eq!(server.count_rows(), 0);
    // At the limit exactly, it is fine.
    let body = vec![b'y'; 4096];
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_over_the_limit_gets_413() {
    let server = TestServer::start("", "").await;
    let body = vec![b'x'; 6000];
    let signature = pagarme_headers(&body)[1].1.clone();
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nx-hub-signature: {signature}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(1000) {
        let _ = stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await;
        let _ = stream.write_all(chunk).await;
        let _ = stream.write_all(b"\r\n").await;
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(server.count_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_type_comes_from_the_providers_header_before_the_body() {
    let server = TestServer::start("", "").await;
    // The body says one type, GitHub's `x-github-event` header another: the header wins.
    let body = br#"{"type":"charge.paid","data":{"id":"ch_1"}}"#;
    let reply = post(
        server.addr,
        "/webhooks/github",
        &github_headers(Some("guid-type"), body),
        body,
    )
    .await;
    assert_eq!(reply.status, 200);
    let kind: String = server.one("SELECT event_type FROM events");
    assert_eq!(kind, "push");
    // Without such a header (Pagar.me), the body's `type` is used.
    assert_eq!(post_pagarme(server.addr, body).await.status, 200);
    let kind: String = server.one("SELECT event_type FROM events WHERE endpoint = 'pagarme'");
    assert_eq!(kind, "charge.paid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unextractable_dedup_key_gets_400_with_a_reason() {
    let server = TestServer::start("", "").await;
    // Stripe dedups on the JSON `/id`: a signed body that is not JSON cannot give one.
    let not_json = b"id=evt_1&type=x";
    let reply = post(
        server.addr,
        "/webhooks/stripe",
        &stripe_headers(now_secs(), not_json),
        not_json,
    )
    .await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.to_lowercase().contains("json"), "{}", reply.body);

    let no_id = br#"{"type":"charge.succeeded"}"#;
    let reply = post(
        server.addr,
        "/webhooks/stripe",
        &stripe_headers(now_secs(), no_id),
        no_id,
    )
    .await;
    assert_eq!(reply.status, 400);
    assert_eq!(server.count_rows(), 0);

    // GitHub's key is its signed body's SHA-256: a delivery without the (unsigned)
    // `X-GitHub-Delivery` header has one all the same.
    let body = br#"{"ref":"refs/heads/main"}"#;
    let ok = post(
        server.addr,
        "/webhooks/github",
        &github_headers(None, body),
        body,
    )
    .await;
    assert_eq!(ok.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_path_gets_404() {
    let server = TestServer::start("", "").await;
    let body = payment_body(1);
    let reply = post(
        server.addr,
        "/webhooks/nope",
        &pagarme_headers(&body),
        &body,
    )
    .await;
    assert_eq!(reply.status, 404);
    assert_eq!(post(server.addr, "/", &[], b"").await.status, 404);
    assert_eq!(server.count_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_get_405_with_allow_post() {
    let server = TestServer::start("", "").await;
    for method in ["GET", "PUT", "DELETE"] {
        let reply = send(server.addr, method, "/webhooks/pagarme", &[], b"").await;
        assert_eq!(reply.status, 405, "{method}");
        assert_eq!(reply.headers["allow"], "POST");
    }
    assert_eq!(server.count_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_gets_503_within_about_5_s_and_nothing_is_kept() {
    let server = TestServer::start("", "").await;
    // Warm up: the schema exists and the writer is idle.
    let body = payment_body(1);
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);

    // Another process holds the write lock past portaria's busy timeout.
    let blocker = server.db();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let body = payment_body(2);
    let started = Instant::now();
    let reply = post_pagarme(server.addr, &body).await;
    let waited = started.elapsed();
    assert_eq!(reply.status, 503);
    assert_eq!(reply.headers["retry-after"], "5");
    assert!(
        !reply.body.contains("database"),
        "5xx bodies stay generic: {}",
        reply.body
    );
    assert!(waited < Duration::from_secs(6), "answered in {waited:?}");
    blocker.execute_batch("ROLLBACK").unwrap();
    assert_eq!(
        server.count_rows(),
        1,
        "nothing of the refused event was kept"
    );

    // The gateway retries once the lock is gone, and this time it is stored.
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(server.count_rows(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_head_is_disconnected() {
    let server = TestServer::start("header_timeout_secs = 1", "").await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    assert!(closed.is_ok(), "the connection is closed by the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_arrives_gets_408() {
    let server = TestServer::start("body_timeout_secs = 1", "").await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"partial\":")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("answered within 5 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(server.count_rows(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_finishes_the_request_in_flight() {
    let mut server = TestServer::start("", "").await;
    let body = payment_body(3);
    let signature = pagarme_headers(&body)[1].1.clone();
    // Send the head and half the body, then ask the server to stop.
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "POST /webhooks/pagarme HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\nx-hub-signature: {signature}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..10]).await.unwrap();
    // Let the server take the connection and read the head (nothing signals that): a
    // connection still in the listen queue when the listener closes is reset, not served.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let addr = server.addr;
    let stopping = tokio::spawn(async move {
        server.shutdown().await;
        server // keeps the temp dir alive
    });
    // Shutdown has begun once the listener is gone: only then send the rest.
    eventually(Duration::from_secs(10), "the listener closes", || {
        std::net::TcpStream::connect(addr).is_err()
    })
    .await;
    stream.write_all(&body[10..]).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    let server = stopping.await.unwrap();
    assert_eq!(server.count_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_header_is_stored_redacted() {
    let server = TestServer::start("", "").await;
    let body = payment_body(7);
    let mut headers = pagarme_headers(&body);
    headers.push(h("Authorization", "Basic dXNlcjpzM2NyZXQtcGFzcw=="));
    headers.push(h("X-Harmless", "kept"));
    let reply = post(server.addr, "/webhooks/pagarme", &headers, &body).await;
    assert_eq!(reply.status, 200);
    let stored: Vec<u8> = server.one("SELECT headers FROM payloads");
    let stored = String::from_utf8(stored).unwrap();
    assert!(stored.contains("authorization: [redacted]\r\n"), "{stored}");
    assert!(stored.contains("x-harmless: kept\r\n"), "{stored}");
    assert!(!stored.contains("dXNlcjpzM2NyZXQtcGFzcw"), "{stored}");
    // Nowhere in the files either: the database and its WAL (where the commit is now).
    let wal = server.db.with_extension("db-wal");
    for file in [&server.db, &wal] {
        let bytes = std::fs::read(file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("dXNlcjpzM2NyZXQtcGFzcw"),
            "{}",
            file.display()
        );
    }
    assert!(wal.exists() || server.db.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_dedup_window_the_same_body_is_a_new_event_once_the_window_has_passed() {
    // Pagar.me dedups on the body's SHA-256: the same bytes are the same key.
    let window = Duration::from_secs(2);
    let server = TestServer::start("", "dedup_window = \"2s\"").await;
    let body = payment_body(11);
    // Stripe's endpoint has no window: its copy after two seconds is still a duplicate.
    let stripe = br#"{"id":"evt_window","type":"charge.succeeded"}"#;
    let post_stripe = || async {
        let headers = stripe_headers(now_secs(), stripe);
        post(server.addr, "/webhooks/stripe", &headers, stripe)
            .await
            .status
    };
    let first_sent = Instant::now();
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    let reply = post_pagarme(server.addr, &body).await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, r#"{"received":true}"#)
    );
    // Received at the server within the window of the first: a duplicate.
    let within = first_sent.elapsed();
    assert!(within < window, "the copy took {within:?} to send");
    assert_eq!(server.count_rows(), 1, "a copy inside the window");
    assert_eq!(post_stripe().await, 200);

    // Once the window has passed since the first, the same body is a new event.
    let past = window + Duration::from_millis(200);
    tokio::time::sleep(past.saturating_sub(first_sent.elapsed())).await;
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    let pagarme_rows =
        || -> i64 { server.one("SELECT count(*) FROM events WHERE endpoint = 'pagarme'") };
    assert_eq!(pagarme_rows(), 2, "a new event after the window");
    let gap: i64 = server
        .one("SELECT max(received_at) - min(received_at) FROM events WHERE endpoint = 'pagarme'");
    assert!(gap > 2000, "received {gap} ms apart");
    // ...and a copy of it is its duplicate.
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    assert_eq!(pagarme_rows(), 2);

    assert_eq!(post_stripe().await, 200);
    let stripe_rows: i64 = server.one("SELECT count(*) FROM events WHERE endpoint = 'stripe'");
    assert_eq!(stripe_rows, 1, "no window: a duplicate however late");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_says_which_rotated_secret_matched_never_its_value() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portaria.toml");
    std::fs::write(&config, base_config(&dir.path().join("p.db"), "", "")).unwrap();
    let mut serve = portaria();
    serve
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "debug");
    let server = Process::spawn_command(serve).await;
    let body = br#"{"event":"connection_update"}"#;
    for (secret, id) in [(RELYA_SECRET, "dlv_new"), ("old-relya-secret", "dlv_old")] {
        let headers = relya_headers(secret, id, now_secs(), body);
        let reply = post(server.addr, "/webhooks/relya", &headers, body).await;
        assert_eq!(reply.status, 200);
    }
    let verified = |n: usize| {
        let log = server.log.lock().unwrap().clone();
        log.lines()
            .filter(|l| l.contains("signature verified") && l.contains("endpoint=relya"))
            .any(|l| l.contains(&format!("secret={n}")))
    };
    eventually(Duration::from_secs(5), "both verifications logged", || {
        verified(1) && verified(2)
    })
    .await;
    let log = server.log.lock().unwrap().clone();
    for secret in [RELYA_SECRET, "old-relya-secret"] {
        assert!(!log.contains(secret), "the log holds a secret");
    }
}
