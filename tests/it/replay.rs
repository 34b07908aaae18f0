//! Replay attacks: a captured delivery sent again. Timestamped schemes (Stripe, Relya,
//! Standard Webhooks) refuse it with 401 once its timestamp is outside the window; an
//! untimestamped one (GitHub, Pagar.me) is answered as a duplicate and never forwarded again
//! while its row is retained. A recording URL target counts the forwards. Promises:
//! docs/guarantees/input.md.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};

use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Every endpoint forwards to `target`; the timestamped ones accept a skew of 2 s.
fn config(db: &Path, target: std::net::SocketAddr) -> String {
    let forward = format!("forward = {{ url = \"http://{target}/in\", timeout_secs = 5 }}");
    sqlite_config(db)
        .without_admin()
        .pagarme(&forward)
        .endpoint(
            "/webhooks/github",
            "github",
            &format!("secret = \"{GITHUB_SECRET}\"\n{forward}"),
        )
        .endpoint(
            "/webhooks/stripe",
            "stripe",
            &format!("secret = \"{STRIPE_SECRET}\"\ntolerance_secs = 2\n{forward}"),
        )
        .endpoint(
            "/webhooks/relya",
            "relya",
            &format!("secret = \"{RELYA_SECRET}\"\ntolerance_secs = 2\n{forward}"),
        )
        .endpoint(
            "/webhooks/sw",
            "standard-webhooks",
            &format!("secret = \"{SW_SECRET}\"\ntolerance_secs = 2\n{forward}"),
        )
        .text()
}

async fn start(target: &Target) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = config(&db, target.addr);
    TestServer::start_with(dir, db, &text).await
}

/// Standard Webhooks headers, signed here from the spec.
fn standard_webhooks_headers(id: &str, ts: i64, body: &[u8]) -> Vec<(String, String)> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(SW_SECRET.trim_start_matches("whsec_")).unwrap();
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    vec![
        h("content-type", "application/json"),
        h("webhook-id", id),
        h("webhook-timestamp", ts.to_string()),
        h(
            "webhook-signature",
            format!("v1,{}", b64.encode(mac.finalize().into_bytes())),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamped_delivery_sent_again_after_the_window_gets_401_and_is_not_forwarded() {
    let target = Target::start(vec![200]).await;
    let server = start(&target).await;
    let ts = now_secs();
    let body = payment_body(1);
    // Each delivery as it was captured off the wire: the same bytes will be sent again.
    let captured = [
        ("/webhooks/stripe", stripe_headers(ts, &body)),
        (
            "/webhooks/relya",
            relya_headers(RELYA_SECRET, "dlv_1", ts, &body),
        ),
        (
            "/webhooks/sw",
            standard_webhooks_headers("msg_1", ts, &body),
        ),
    ];
    for (path, headers) in &captured {
        assert_eq!(
            post(server.addr, path, headers, &body).await.status,
            200,
            "{path}"
        );
    }
    eventually(WAIT, "three forwards", || target.count() == 3).await;

    // Past the 2 s window (the check is on whole seconds: 3.5 s is safely outside it).
    tokio::time::sleep(Duration::from_millis(3500)).await;
    for (path, headers) in &captured {
        let reply = post(server.addr, path, headers, &body).await;
        assert_eq!(reply.status, 401, "{path}: {}", reply.body);
        assert!(reply.body.contains("timestamp"), "{path}: {}", reply.body);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.count_rows(), 3, "no row for a replay");
    assert_eq!(target.count(), 3, "nothing forwarded again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untimestamped_delivery_sent_again_is_a_duplicate_and_forwarded_once() {
    let target = Target::start(vec![200]).await;
    let server = start(&target).await;
    let body = payment_body(2);
    let captured = [
        ("/webhooks/pagarme", pagarme_headers(&body)),
        (
            "/webhooks/github",
            github_headers(Some("gh-delivery-1"), &body),
        ),
    ];
    for (path, headers) in &captured {
        assert_eq!(
            post(server.addr, path, headers, &body).await.status,
            200,
            "{path}"
        );
    }
    eventually(WAIT, "two forwards", || target.count() == 2).await;
    eventually(WAIT, "both delivered", || {
        server.one::<i64>("SELECT count(*) FROM events WHERE status = 'delivered'") == 2
    })
    .await;

    // Sent again later, after the first went out: still the same 200, but no new event, and
    // the target hears nothing more while the rows are retained.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..3 {
        for (path, headers) in &captured {
            let reply = post(server.addr, path, headers, &body).await;
            assert_eq!(reply.status, 200, "{path}");
            assert_eq!(reply.body, r#"{"received":true}"#);
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(server.count_rows(), 2);
    assert_eq!(target.count(), 2, "a duplicate is never forwarded again");
    // One delivered attempt each, recorded on the delivery row (schema 4), and no other.
    let attempts: i64 = server.one("SELECT count(*) FROM attempts");
    assert_eq!(attempts, 0);
    let delivered: i64 = server.one(
        "SELECT count(*) FROM deliveries WHERE status = 'delivered' AND attempts = 1 \
         AND delivered_ms IS NOT NULL",
    );
    assert_eq!(delivered, 2);
}
