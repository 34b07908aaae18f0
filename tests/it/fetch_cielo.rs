//! Verify by fetching for Cielo (issue 26), and the route's timeout over any fetch, with the
//! real server, a real command target and a local HTTPS server with a test CA that speaks
//! Cielo's query call: `GET /1/sales/{PaymentId}` with the `MerchantId` and `MerchantKey`
//! headers (shapes as /work/shared/reference/reconcile.md §7 cites Cielo's API reference; an
//! unknown sale is HTTP 404, "Resource Not Found" in Cielo's table of statuses). Cielo's
//! notification is only `{"PaymentId", "ChangeType"}` behind static headers: the sale fetched
//! is what the target can trust. Cielo has no list a run could read: a run asks again for
//! the sales whose last state portaria fetched is still open, on both store engines.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::engine::{Engine, Reader};
use crate::support::gateway::{answer, reconcile, report};
use crate::support::tunnel::{Ca, HttpsServer, Seen, ca, server_tls, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const MERCHANT_ID: &str = "e4db3e1b-985f-4e33-80cf-a19d559f0f60";
const MERCHANT_KEY: &str = "0123456789MerchantKeyF3tch0123456789ABCD";
const SHOP_HEADER: &str = "cielo-shop-header-F3tch";
const SALE: &str = "24bc8366-fc31-4d6c-8555-17049a836a07";
const UNKNOWN: &str = "99999999-0000-4000-8000-000000000000";

/// A sale as `GET /1/sales/{PaymentId}` gives it (Cielo's fields, reconcile.md §7).
fn sale(id: &str, status: u8) -> Value {
    json!({"MerchantOrderId": "order-123", "Customer": {"Name": "Comprador"},
        "Payment": {"PaymentId": id, "Type": "CreditCard", "Amount": 15700,
            "Status": status, "ReturnCode": "6", "ReceivedDate": "2026-11-30 10:00:00"}})
}

/// The sales the fake API knows, by path; a test changes one to change its state.
type Sales = Arc<Mutex<HashMap<String, Value>>>;

/// The fake query API: 401 without both credentials, the sales it knows, 404 for others.
async fn fake_cielo(tls: Arc<rustls::ServerConfig>, sales: Sales) -> HttpsServer {
    HttpsServer::start(tls, move |seen: &Seen| {
        let header = |name: &str| seen.headers.get(name).and_then(|v| v.to_str().ok());
        if header("merchantid") != Some(MERCHANT_ID) || header("merchantkey") != Some(MERCHANT_KEY)
        {
            return answer(401, json!([{"Code": 0, "Message": "Unauthorized"}]), None);
        }
        match sales.lock().unwrap().get(&seen.target) {
            Some(sale) => answer(200, sale.clone(), None),
            None => answer(404, json!({}), None),
        }
    })
    .await
}

/// The endpoint's lines: the header Cielo sends, the key in `dir/cielo.key`, `api_base`.
fn cielo_keys(dir: &std::path::Path, route: &str, api_base: &str, ca: Option<&str>) -> String {
    std::fs::write(dir.join("cielo.key"), format!("{MERCHANT_KEY}\n")).unwrap();
    let ca_file = ca
        .map(|f| format!("ca_file = \"{f}\"\n"))
        .unwrap_or_default();
    format!(
        "credential_headers = [\"X-Shop-Key\"]\nsecret = \"{SHOP_HEADER}\"\n{route}\
         [endpoint.reconcile]\napi_key_file = \"cielo.key\"\nmerchant_id = \"{MERCHANT_ID}\"\n\
         api_base = \"{api_base}\"\n{ca_file}fetch = true\n"
    )
}

async fn notify(server: &TestServer, payment_id: &str, change: u8) {
    let body = json!({"PaymentId": payment_id, "ChangeType": change}).to_string();
    let headers = [
        h("content-type", "application/json"),
        h("x-shop-key", SHOP_HEADER),
    ];
    let reply = post(server.addr, "/webhooks/cielo", &headers, body.as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// A server on `engine` whose Cielo endpoint fetches from `api` (trusting `ca`) and forwards
/// to a command that records `<event id> <origin>` and keeps each sale it gets as
/// `fetched-<id>`, in the directory returned; None where the engine is not here.
async fn cielo_server(engine: Engine, api: &HttpsServer, ca: &Ca) -> Option<(TestServer, PathBuf)> {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = engine.config(dir.path()).await?;
    let work = dir.path().to_path_buf();
    let ca_file = write_ca(ca, dir.path(), "api-ca.pem");
    let erp = record_calls(
        &work,
        "erp",
        "cat > /dev/null\ncp \"$PORTARIA_FETCHED_FILE\" \"$D/fetched-$PORTARIA_EVENT_ID\"",
        "$PORTARIA_EVENT_ID $PORTARIA_ORIGIN",
        "",
    );
    let route = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 5 }}\nretry = [\"300ms\"]\n",
        erp.display()
    );
    let api_base = format!("https://localhost:{}", api.addr.port());
    let ca_file = ca_file.display().to_string();
    let keys = cielo_keys(dir.path(), &route, &api_base, Some(&ca_file));
    let text = config.endpoint("/webhooks/cielo", "cielo", &keys).text();
    Some((TestServer::start_with(dir, db, &text).await, work))
}

/// The last error of each delivery of `event`.
fn last_errors(server: &TestServer, event: i64) -> Vec<(String, Option<String>)> {
    let conn = server.db();
    let mut stmt = conn
        .prepare("SELECT status, last_error FROM deliveries WHERE event_id = ?1")
        .unwrap();
    stmt.query_map([event], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cielo_sales_are_fetched_with_merchant_id_and_key_before_they_are_forwarded() {
    let ca = ca("fake Cielo CA");
    let sales = HashMap::from([(format!("/1/sales/{SALE}"), sale(SALE, 2))]);
    let api = fake_cielo(server_tls(&ca), Arc::new(Mutex::new(sales))).await;
    let (server, work) = cielo_server(Engine::Sqlite, &api, &ca).await.unwrap();
    notify(&server, SALE, 1).await;
    notify(&server, UNKNOWN, 1).await;
    eventually(WAIT, "the sale forwarded, the unknown one dead", || {
        calls(&work).len() == 1 && last_errors(&server, 2).iter().all(|(s, _)| s == "dead")
    })
    .await;
    assert_eq!(calls(&work), ["1 webhook"]);
    let fetched = std::fs::read_to_string(work.join("fetched-1")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&fetched).unwrap(),
        sale(SALE, 2)
    );
    let rejected = format!(
        "rejected_by_fetch: the gateway has no such payment (GET /1/sales/{UNKNOWN}: HTTP 404)"
    );
    assert_eq!(
        last_errors(&server, 2),
        [("dead".to_string(), Some(rejected))]
    );
    let asked: Vec<String> = api.targets();
    assert_eq!(
        asked,
        [format!("/1/sales/{SALE}"), format!("/1/sales/{UNKNOWN}")]
    );
    // The key is in no stored row and reached no target.
    let row: String = server.one("SELECT detail FROM fetches WHERE event_id = 1");
    assert!(!row.contains(MERCHANT_KEY) && !fetched.contains(MERCHANT_KEY));

    server.stop().await;
}

/// A gateway that takes the connection and never answers: each fetch gives up at the route's
/// `timeout_secs` (1 s here), not at the outbound client's 30 s, and the attempt is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_that_gets_no_answer_fails_within_the_route_s_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let work = dir.path().to_path_buf();
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_base = format!("http://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let held = Arc::new(Mutex::new(Vec::new()));
    let holder = held.clone();
    let quiet = tokio::spawn(async move {
        while let Ok((tcp, _)) = silent.accept().await {
            holder.lock().unwrap().push(tcp);
        }
    });
    let erp = record_calls(&work, "erp", "cat > /dev/null", "$PORTARIA_EVENT_ID", "");
    let route = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 1 }}\nretry = [\"100ms\"]\n",
        erp.display()
    );
    let keys = cielo_keys(dir.path(), &route, &api_base, None);
    let text = sqlite_config(&db)
        .endpoint("/webhooks/cielo", "cielo", &keys)
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    notify(&server, SALE, 1).await;
    eventually(WAIT, "two attempts timed out, the delivery dead", || {
        last_errors(&server, 1).iter().all(|(s, _)| s == "dead")
    })
    .await;
    let error = format!("fetch: GET /1/sales/{SALE}: no answer within the route's 1s timeout");
    assert_eq!(last_errors(&server, 1), [("dead".to_string(), Some(error))]);
    let attempts: i64 = server.one("SELECT COUNT(*) FROM attempts WHERE event_id = 1");
    assert_eq!(attempts, 2);
    assert!(calls(&work).is_empty(), "nothing forwarded unfetched");
    assert_eq!(held.lock().unwrap().len(), 2, "one connection per attempt");
    quiet.abort();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cielo_run_asks_again_for_the_open_sales_and_stores_a_state_never_heard_of() {
    a_run_recovers_an_open_sale_s_change(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_cielo_run_asks_again_for_the_open_sales_and_stores_a_state_never_heard_of() {
    a_run_recovers_an_open_sale_s_change(Engine::Postgres).await;
}

/// Sale A is authorised (1, open) and sale B confirmed (2) when their notifications are
/// fetched. A is then captured (2) and B refunded (11); Cielo's notification of A's capture is
/// byte-identical to the first, so within the dedup window it is a repeat, and nothing tells
/// the target. One run asks for A only (B's last known state is final), stores the capture as
/// the notification Cielo would have sent, and the target gets it with the sale fetched; a
/// second run has nothing open to ask for.
async fn a_run_recovers_an_open_sale_s_change(engine: Engine) {
    const B: &str = "5a1e0000-0000-4000-8000-00000000000b";
    let ca = ca("fake Cielo CA");
    let sales: Sales = Arc::new(Mutex::new(HashMap::from([
        (format!("/1/sales/{SALE}"), sale(SALE, 1)),
        (format!("/1/sales/{B}"), sale(B, 2)),
    ])));
    let api = fake_cielo(server_tls(&ca), sales.clone()).await;
    let Some((server, work)) = cielo_server(engine, &api, &ca).await else {
        return;
    };
    notify(&server, SALE, 1).await;
    notify(&server, B, 1).await;
    eventually(WAIT, "both sales forwarded", || calls(&work).len() == 2).await;

    // A captured, B refunded; A's notification is a repeat of the first: not stored.
    sales
        .lock()
        .unwrap()
        .insert(format!("/1/sales/{SALE}"), sale(SALE, 2));
    sales
        .lock()
        .unwrap()
        .insert(format!("/1/sales/{B}"), sale(B, 11));
    notify(&server, SALE, 1).await;
    let reader = Reader::of(&server).await;
    assert_eq!(
        reader.events().await.len(),
        2,
        "the capture's notification is a repeat"
    );

    let out = reconcile(&server, &["--json"]).await;
    let (first, code) = report(&out);
    assert_eq!(code, Some(0), "{first}");
    assert_eq!(first["checked"], 1, "only the open sale: {first}");
    assert_eq!(first["missing"], json!([format!("{SALE} 2")]));
    assert_eq!(first["recovered"], json!([format!("{SALE} 2")]));
    eventually(WAIT, "the capture forwarded", || calls(&work).len() == 3).await;
    let calls = calls(&work);
    assert_eq!(calls[..2], ["1 webhook", "2 webhook"]);
    // Its id: the next one on SQLite; PostgreSQL's sequence also spent one on the repeat.
    let (id, origin) = calls[2].split_once(' ').unwrap();
    assert_eq!(origin, "reconcile");
    let fetched = std::fs::read_to_string(work.join(format!("fetched-{id}"))).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&fetched).unwrap(),
        sale(SALE, 2)
    );
    let stored = reader.event(id.parse().unwrap()).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&stored.body).unwrap(),
        json!({"PaymentId": SALE, "ChangeType": 1}),
        "the notification Cielo would have sent"
    );
    assert_eq!(stored.summary.dedup_key, format!("cielo:sale:{SALE}:2"));

    // Nothing open any more: a second run asks for nothing and finds nothing missing.
    let asked = api.seen.lock().unwrap().len();
    let out = reconcile(&server, &["--json"]).await;
    let (again, code) = report(&out);
    assert_eq!(
        (again["checked"].as_u64(), code),
        (Some(0), Some(0)),
        "{again}"
    );
    assert_eq!(api.seen.lock().unwrap().len(), asked);
    let paths: Vec<String> = api.targets();
    let b_asked = paths.iter().filter(|p| p.ends_with(B)).count();
    assert_eq!(
        b_asked, 1,
        "B, final, was fetched once and never asked again: {paths:?}"
    );
    server.stop().await;
}

/// A fake query API whose answer for SALE is the `n`th of `states` (the last one
/// after), or 401 from ask number `refuse_from` on; every other sale is open (1).
async fn stepping_cielo(
    tls: Arc<rustls::ServerConfig>,
    states: &'static [u8],
    refuse_from: usize,
) -> HttpsServer {
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    HttpsServer::start(tls, move |seen: &Seen| {
        let n = asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if n >= refuse_from {
            return answer(401, json!([{"Code": 0, "Message": "Unauthorized"}]), None);
        }
        let id = seen.target.trim_start_matches("/1/sales/").to_string();
        let status = if id == SALE {
            states[n.min(states.len() - 1)]
        } else {
            1
        };
        answer(200, sale(&id, status), None)
    })
    .await
}

/// The sale is 0 when its notification is fetched, 1 when run R1 asks (R1 stores
/// `cielo:sale:SALE:1`), and 2 when that stored state is forwarded and fetched: the target
/// has state 2 already. R2 takes the sale fetched (2, settled), not the key (1, open), and
/// stores nothing: the target never gets state 2 twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_takes_the_sale_fetched_since_over_its_own_key() {
    let ca = ca("fake Cielo CA");
    let api = stepping_cielo(server_tls(&ca), &[0, 1, 2], usize::MAX).await;
    let (server, work) = cielo_server(Engine::Sqlite, &api, &ca).await.unwrap();
    notify(&server, SALE, 1).await;
    eventually(WAIT, "the sale forwarded", || calls(&work).len() == 1).await;
    let (first, _) = report(&reconcile(&server, &["--json"]).await);
    assert_eq!(first["recovered"], json!([format!("{SALE} 1")]), "{first}");
    eventually(WAIT, "the stored state forwarded", || {
        calls(&work).len() == 2
    })
    .await;
    let id = calls(&work)[1].split_once(' ').unwrap().0.to_string();
    let fetched = std::fs::read_to_string(work.join(format!("fetched-{id}"))).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&fetched).unwrap()["Payment"]["Status"],
        2,
        "the target has state 2 with the stored state's event"
    );
    let (second, _) = report(&reconcile(&server, &["--json"]).await);
    assert_eq!(
        second["missing"],
        json!([]),
        "state 2 reached the target already: {second}"
    );
    server.stop().await;
}

/// Three open sales; the key is then refused. The run stops at the first refusal, which
/// says all there is, instead of one 401 per sale (or, for a dead host, tries and waits each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_stops_the_run_at_the_first_sale() {
    const B: &str = "5a1e0000-0000-4000-8000-00000000000b";
    const C: &str = "5a1e0000-0000-4000-8000-00000000000c";
    let ca = ca("fake Cielo CA");
    let api = stepping_cielo(server_tls(&ca), &[1], 3).await;
    let (server, work) = cielo_server(Engine::Sqlite, &api, &ca).await.unwrap();
    for id in [SALE, B, C] {
        notify(&server, id, 1).await;
    }
    eventually(WAIT, "three sales forwarded", || calls(&work).len() == 3).await;
    let before = api.seen.lock().unwrap().len();
    let (run, _) = report(&reconcile(&server, &["--json"]).await);
    let asked = api.seen.lock().unwrap().len() - before;
    assert_eq!(asked, 1, "asked {asked} times with a refused key: {run}");
    server.stop().await;
}
