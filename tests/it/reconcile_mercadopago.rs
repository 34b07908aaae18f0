//! `portaria reconcile` against a fake Mercado Pago (issue 26): an HTTPS server with a test
//! CA that speaks the documented payment search (`GET /v1/payments/search` with `range`,
//! `begin_date`, `end_date`, `sort`, `criteria`, `limit`, `offset`; `paging.total`; a Bearer
//! access token; shapes from Mercado Pago's API reference as
//! /work/shared/reference/reconcile.md §6 cites them). Mercado Pago cannot resend, and its
//! notifications carry no state: a payment whose last update portaria never heard of is
//! stored by the run as a state event and forwarded, marked `origin = reconcile`. On each
//! store engine (SQLite, and PostgreSQL as `on_postgres_...`): the cursor is kept in the store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portaria::store::Origin;
use serde_json::{Value, json};

use crate::support::engine::{Engine, Reader};
use crate::support::gateway::{answer, query, reconcile, report};
use crate::support::tunnel::{HttpsServer, Seen, ca, server_tls, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const API_KEY: &str = "APP_USR-4815-R3concile";
const PATH: &str = "/webhooks/mercadopago";

/// Mercado Pago's time format: milliseconds and an offset (São Paulo's, -03:00).
fn mp_date(ms: i64) -> String {
    let local = portaria::time::rfc3339(ms - 3 * 3_600_000);
    format!("{}-03:00", local.trim_end_matches('Z'))
}

/// A payment as the search lists it.
fn payment(id: u64, status: &str, updated_ms: i64) -> Value {
    json!({"id": id, "status": status, "status_detail": "accredited",
        "date_created": mp_date(updated_ms - 60_000), "date_last_updated": mp_date(updated_ms),
        "external_reference": format!("order-{id}"), "payment_type_id": "pix",
        "transaction_amount": 10.5})
}

/// The fake's payments, oldest update first, 50 a page at most, by offset.
async fn fake_mercadopago(
    tls: Arc<rustls::ServerConfig>,
    payments: Arc<Mutex<Vec<Value>>>,
) -> HttpsServer {
    let bearer = format!("Bearer {API_KEY}");
    HttpsServer::start(tls, move |seen: &Seen| {
        if seen
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            != Some(bearer.as_str())
        {
            return answer(
                401,
                json!({"message": "invalid_token", "status": 401}),
                None,
            );
        }
        if seen.method != "GET" || !seen.target.starts_with("/v1/payments/search?") {
            return answer(404, json!({"message": "not_found", "status": 404}), None);
        }
        assert_eq!(query(&seen.target, "range"), Some("date_last_updated"));
        assert_eq!(query(&seen.target, "criteria"), Some("asc"));
        let begin = query(&seen.target, "begin_date").unwrap();
        let begin = portaria::time::parse_rfc3339(begin).unwrap();
        let limit: usize = query(&seen.target, "limit").unwrap().parse().unwrap();
        let offset: usize = query(&seen.target, "offset").unwrap().parse().unwrap();
        let all = payments.lock().unwrap();
        let updated = |p: &Value| {
            portaria::time::parse_rfc3339(p["date_last_updated"].as_str().unwrap()).unwrap()
        };
        let mut within: Vec<&Value> = all.iter().filter(|p| updated(p) >= begin).collect();
        within.sort_by_key(|p| updated(p));
        let results: Vec<Value> = within
            .iter()
            .skip(offset)
            .take(limit.min(50))
            .map(|p| (*p).clone())
            .collect();
        answer(
            200,
            json!({"paging": {"total": within.len(), "limit": limit, "offset": offset},
                "results": results}),
            None,
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payment_states_portaria_never_heard_of_are_stored_and_forwarded() {
    payment_states_stored_and_forwarded(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_payment_states_portaria_never_heard_of_are_stored_and_forwarded() {
    payment_states_stored_and_forwarded(Engine::Postgres).await;
}

async fn payment_states_stored_and_forwarded(engine: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let Some((config, db)) = engine.config(dir.path()).await else {
        return;
    };
    let ca = ca("fake Mercado Pago CA");
    let ca_file = write_ca(&ca, dir.path(), "api-ca.pem");
    let ten_minutes_ago = portaria::time::now_ms() - 600_000;
    // 60 payments (two pages), updated ten minutes ago; a payment updated a week ago is
    // outside the window.
    let mut all: Vec<Value> = vec![payment(7, "approved", ten_minutes_ago - 7 * 86_400_000)];
    all.extend((1..=60).map(|id| payment(id, "approved", ten_minutes_ago)));
    let payments = Arc::new(Mutex::new(all));
    let fake = fake_mercadopago(server_tls(&ca), payments.clone()).await;
    let target = Target::start(vec![200]).await;
    std::fs::write(dir.path().join("mp.key"), format!("{API_KEY}\n")).unwrap();
    let keys = format!(
        "secret = \"{MP_SECRET}\"\nforward = {{ url = \"http://{}/in\", timeout_secs = 2 }}",
        target.addr
    );
    let text = config
        .endpoint(PATH, "mercadopago", &keys)
        .then(&format!(
            "[endpoint.reconcile]\napi_key_file = \"mp.key\"\napi_base = \"https://localhost:{}\"\n\
             ca_file = \"{}\"\n",
            fake.addr.port(),
            ca_file.display()
        ))
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    // Portaria heard of payments 1 to 59, after their update; 60's notification was lost.
    for id in 1..=59 {
        let (path, headers, body) = mercadopago(PATH, &id.to_string(), &format!("req-{id}"));
        let reply = post(server.addr, &path, &headers, &body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    eventually(WAIT, "59 notifications forwarded", || target.count() == 59).await;
    // Then 59 was refunded, and that notification was lost too.
    tokio::time::sleep(Duration::from_millis(20)).await;
    payments.lock().unwrap()[59] = payment(59, "refunded", portaria::time::now_ms());

    let out = reconcile(&server, &["--json", "--dry-run"]).await;
    let (dry, code) = report(&out);
    assert_eq!(code, Some(1), "{dry}");
    assert_eq!(
        dry["missing"],
        json!(["60 approved", "59 refunded"]),
        "{dry}"
    );
    assert_eq!(target.count(), 59, "a dry run stores nothing");

    let out = reconcile(&server, &["--json"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stdout.contains(API_KEY) && !stderr.contains(API_KEY));
    let (run, code) = report(&out);
    assert_eq!(code, Some(0), "{run}");
    assert_eq!(
        run["checked"], 60,
        "the week-old payment is outside the window: {run}"
    );
    assert_eq!(run["missing"], json!(["60 approved", "59 refunded"]));
    assert_eq!(run["recovered"], run["missing"]);
    assert_eq!(run["recovered_by"], "stored from the API");
    let searches: Vec<String> = fake.targets();
    assert_eq!(searches.len(), 4, "two pages per run: {searches:?}");
    assert_eq!(query(&searches[3], "offset"), Some("50"));

    // Each state is forwarded as a notification Mercado Pago would send, its payment inline,
    // with its id as the signed id a handler fetches by.
    eventually(WAIT, "the two states forwarded", || target.count() == 61).await;
    let seen = target.seen.lock().unwrap().clone();
    let states: Vec<(Value, String, String)> = seen
        .iter()
        .filter(|r| r.headers["portaria-origin"] == "reconcile")
        .map(|r| {
            let header = |name: &str| r.headers[name].to_str().unwrap().to_string();
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            (
                body,
                header("portaria-signed-id"),
                header("idempotency-key"),
            )
        })
        .collect();
    assert_eq!(states.len(), 2);
    let (refund, signed, key) = states
        .iter()
        .find(|(b, ..)| b["data"]["id"] == "59")
        .unwrap();
    assert_eq!(refund["action"], "payment.updated");
    assert_eq!(refund["type"], "payment");
    assert_eq!(refund["payment"]["status"], "refunded");
    assert_eq!(refund["payment"]["external_reference"], "order-59");
    assert_eq!(signed, "59");
    assert_eq!(key, "mercadopago:payment:59:refunded");

    // A second run has heard of everything: nothing stored twice. It resumes where the last
    // run got to (its cursor, kept in the store), less an hour, not three days back.
    let reader = Reader::of(&server).await;
    let kept = reader.reconcile_run("mercadopago").await;
    let cursor = kept["cursor_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("{kept}"));
    let out = reconcile(&server, &["--endpoint", "mercadopago"]).await;
    let text = ok_stdout(&out);
    assert!(
        text.contains("60 checked, 0 failed at the gateway, 0 never stored"),
        "{text}"
    );
    let resumed = fake.seen.lock().unwrap()[4].target.clone();
    let begin = portaria::time::parse_rfc3339(query(&resumed, "begin_date").unwrap()).unwrap();
    let hour_ago = portaria::time::now_ms() - 3_600_000;
    assert!(
        (hour_ago - begin).abs() < 60_000,
        "resumed at {begin}, not {hour_ago}"
    );
    assert_eq!(begin, cursor - 3_600_000, "the kept cursor, less an hour");
    let events = reader.events().await;
    let reconciled = events.iter().filter(|e| e.origin == Origin::Reconcile);
    assert_eq!(reconciled.count(), 2, "{events:?}");
}
