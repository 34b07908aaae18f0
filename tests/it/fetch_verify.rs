//! Verify by fetching (`fetch = true`, issue 26) with the real server, real targets and local
//! HTTPS servers with a test CA that speak the gateways' documented calls for one payment:
//! Mercado Pago's `GET /v1/payments/{id}` with the access token as a Bearer token, Asaas's
//! `GET /v3/payments/{id}` with the key in the `access_token` header (shapes as
//! /work/shared/reference/reconcile.md §5 and §6 cite the providers' references). Before a
//! target gets an event, the payment it names is fetched: 200 reaches the targets beside the
//! body (a command's `PORTARIA_FETCHED_FILE`, a URL's JSON envelope, a pipe line's `fetched`),
//! 404 is `rejected_by_fetch` and never forwarded, a 503 is retried on the route's schedule.
//! The API key reaches no target, no stored row and no command's output.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::gateway::answer;
use crate::support::tunnel::{HttpsServer, Seen, ca, server_tls, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const MP_KEY: &str = "APP_USR-4815-F3tchK3y";
const ASAAS_KEY: &str = "$aact_F3tchTestKey0001";
const ASAAS_TOKEN: &str = "asaas-webhook-token-F3tch";

/// Per API path, the answers still to give (the last one repeats).
type Answers = Arc<Mutex<HashMap<String, Vec<(u16, Value)>>>>;

/// The fake Mercado Pago API: [`fake_api`] taking its access token as a Bearer token.
async fn fake_mercadopago(tls: Arc<rustls::ServerConfig>, answers: Answers) -> HttpsServer {
    fake_api(tls, "authorization", format!("Bearer {MP_KEY}"), answers).await
}

/// A fake gateway API answering `GET path` from `answers` (404 for a path it does not know),
/// and 401 without `header: value`.
async fn fake_api(
    tls: Arc<rustls::ServerConfig>,
    header: &'static str,
    value: String,
    answers: Answers,
) -> HttpsServer {
    HttpsServer::start(tls, move |seen: &Seen| {
        let key = seen.headers.get(header).and_then(|v| v.to_str().ok());
        if key != Some(value.as_str()) {
            return answer(401, json!({"message": "invalid_token"}), None);
        }
        let mut all = answers.lock().unwrap();
        let (status, body) = match all.get_mut(&seen.target) {
            Some(queue) if queue.len() > 1 => queue.remove(0),
            Some(queue) => queue[0].clone(),
            None => (404, json!({"message": "not_found", "status": 404})),
        };
        answer(status, body, None)
    })
    .await
}

/// A payment as `GET /v1/payments/{id}` gives it (Mercado Pago's payment fields).
fn mp_payment(id: u64, status: &str) -> Value {
    json!({"id": id, "status": status, "status_detail": "accredited",
        "external_reference": format!("order-{id}"), "payment_type_id": "pix",
        "transaction_amount": 10.5, "currency_id": "BRL"})
}

/// The `[endpoint.reconcile]` table fetching from `api` with the key in `dir/name`.
fn fetch_table(dir: &std::path::Path, name: &str, key: &str, api: &HttpsServer) -> String {
    let ca_file = dir.join("api-ca.pem");
    std::fs::write(dir.join(name), format!("{key}\n")).unwrap();
    format!(
        "[endpoint.reconcile]\napi_key_file = \"{name}\"\napi_base = \"https://localhost:{}\"\n\
         ca_file = \"{}\"\nfetch = true\n",
        api.addr.port(),
        ca_file.display()
    )
}

/// The deliveries of an event, as (route, status, last error).
fn deliveries(server: &TestServer, id: i64) -> Vec<(String, String, Option<String>)> {
    let conn = server.db();
    let mut stmt = conn
        .prepare(
            "SELECT route, status, last_error FROM deliveries WHERE event_id = ?1 ORDER BY route",
        )
        .unwrap();
    stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercado_pago_payments_are_fetched_before_they_are_forwarded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let work = dir.path().to_path_buf();
    let ca = ca("fake Mercado Pago CA");
    write_ca(&ca, dir.path(), "api-ca.pem");
    // 59 exists (pretty-printed, as an API may answer); 66 does not; 77 fails once (503).
    let answers: Answers = Arc::new(Mutex::new(HashMap::from([
        (
            "/v1/payments/59".to_string(),
            vec![(200, mp_payment(59, "approved"))],
        ),
        (
            "/v1/payments/77".to_string(),
            vec![
                (503, json!({"message": "try later"})),
                (200, mp_payment(77, "approved")),
            ],
        ),
    ])));
    let api = fake_api(
        server_tls(&ca),
        "authorization",
        format!("Bearer {MP_KEY}"),
        answers.clone(),
    )
    .await;
    let target = Target::start(vec![200]).await;
    // The command keeps its stdin and the fetched object's file, by event.
    let erp = record_calls(
        &work,
        "erp",
        "cat > \"$D/body-$PORTARIA_EVENT_ID\"\n\
         cp \"$PORTARIA_FETCHED_FILE\" \"$D/fetched-$PORTARIA_EVENT_ID\"",
        "$PORTARIA_EVENT_ID $PORTARIA_FETCHED_FILE",
        "",
    );
    let routes = format!(
        "secret = \"{MP_SECRET}\"\n\
         [[endpoint.route]]\nname = \"erp\"\nforward = {{ command = [\"{}\"], timeout_secs = 5 }}\n\
         retry = [\"300ms\", \"300ms\"]\n\
         [[endpoint.route]]\nname = \"audit\"\nforward = {{ url = \"http://{}/in\", timeout_secs = 2 }}\n\
         retry = [\"300ms\", \"300ms\"]\n{}",
        erp.display(),
        target.addr,
        fetch_table(dir.path(), "mp.key", MP_KEY, &api)
    );
    let text = sqlite_config(&db)
        .endpoint("/webhooks/mercadopago", "mercadopago", &routes)
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    let mut bodies = Vec::new();
    for (n, id) in ["59", "66", "77"].iter().enumerate() {
        let (path, headers, body) = mercadopago("/webhooks/mercadopago", id, &format!("req-{n}"));
        let reply = post(server.addr, &path, &headers, &body).await;
        // Intake answers as soon as the notification is stored, whatever the API says later.
        assert_eq!(reply.status, 200, "{}", reply.body);
        bodies.push(body);
    }
    eventually(WAIT, "59 and 77 at both targets", || {
        target.count() == 2 && calls(&work).len() == 2
    })
    .await;
    eventually(WAIT, "66 dead on both routes", || {
        deliveries(&server, 2).iter().all(|(_, s, _)| s == "dead")
    })
    .await;

    // The URL target: one JSON envelope, the notification as it came and the payment fetched.
    let seen = target.seen.lock().unwrap().clone();
    for (r, (event, id)) in seen.iter().zip([(1, 59), (3, 77)]) {
        assert_eq!(r.headers["portaria-fetched"], "1");
        assert_eq!(r.headers["content-type"], "application/json");
        assert_eq!(r.headers["portaria-event-id"], event.to_string().as_str());
        let envelope: Value = serde_json::from_slice(&r.body).unwrap();
        let original: Value = serde_json::from_slice(&bodies[event as usize - 1]).unwrap();
        assert_eq!(envelope["event"], original);
        assert_eq!(envelope["fetched"], mp_payment(id, "approved"));
    }
    // The command: the body on stdin as ever, the payment in PORTARIA_FETCHED_FILE.
    assert_eq!(calls_sorted(&work), ["1 /dev/fd/3", "3 /dev/fd/3"]);
    for (event, id) in [(1, 59), (3, 77)] {
        let fetched = std::fs::read_to_string(work.join(format!("fetched-{event}"))).unwrap();
        let fetched: Value = serde_json::from_str(&fetched).unwrap();
        assert_eq!(fetched, mp_payment(id, "approved"));
        let body = std::fs::read(work.join(format!("body-{event}"))).unwrap();
        assert_eq!(body, bodies[event - 1]);
    }

    // 66: rejected, never forwarded, and said so.
    let rejected = "rejected_by_fetch: the gateway has no such payment \
                    (GET /v1/payments/66: HTTP 404)";
    for (_, status, error) in deliveries(&server, 2) {
        assert_eq!(
            (status.as_str(), error.as_deref()),
            ("dead", Some(rejected))
        );
    }
    let state: String = server.one("SELECT state FROM fetches WHERE event_id = 2");
    assert_eq!(state, "rejected_by_fetch");
    let shown = ok_stdout(&run_cli(&["events", "show", "2"], &server.config_path()));
    assert!(
        shown.contains("fetch:       rejected_by_fetch: the gateway has no such payment"),
        "{shown}"
    );
    let shown = ok_stdout(&run_cli(&["events", "show", "1"], &server.config_path()));
    assert!(shown.contains("fetched:     {\""), "{shown}");
    let admin = server.admin.unwrap();
    let page = get(admin, "/events/2", &[]).await;
    assert!(page.body.contains("rejected_by_fetch"), "{}", page.body);
    let api_json = json(&get(admin, "/api/events/1", &[]).await);
    assert_eq!(api_json["fetch"], "fetched");
    assert_eq!(api_json["fetched"], mp_payment(59, "approved"));

    // 77: the 503 was an attempt of its own, retried on the schedule; stored once.
    let errors: Vec<String> = {
        let conn = server.db();
        let mut stmt = conn
            .prepare("SELECT error FROM attempts WHERE event_id = 3 AND error IS NOT NULL")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(errors, ["fetch: GET /v1/payments/77: HTTP 503"]);
    assert!(
        deliveries(&server, 3)
            .iter()
            .all(|(_, s, _)| s == "delivered")
    );
    let kept: i64 = server.one("SELECT COUNT(*) FROM fetches WHERE event_id = 3");
    assert_eq!(kept, 1);
    // Every fetch carried the token; nothing else knows it.
    let asked = api.seen.lock().unwrap().clone();
    assert!(asked.iter().all(|s| s.method == "GET"), "{asked:?}");
    assert!(asked.iter().any(|s| s.target == "/v1/payments/66"));
    assert!(
        !seen
            .iter()
            .any(|r| format!("{:?}{:?}", r.headers, r.body).contains(MP_KEY))
    );
    let dump: Vec<u8> = ["portaria.db", "portaria.db-wal"]
        .iter()
        .flat_map(|f| std::fs::read(server.dir.path().join(f)).unwrap_or_default())
        .collect();
    assert!(!dump.windows(MP_KEY.len()).any(|w| w == MP_KEY.as_bytes()));
    assert!(!shown.contains(MP_KEY));

    // The payment shows up after all (or the owner fixed api_base): a replay asks again, and
    // the object it gets replaces the rejection and reaches both targets.
    answers.lock().unwrap().insert(
        "/v1/payments/66".to_string(),
        vec![(200, mp_payment(66, "approved"))],
    );
    ok_stdout(&run_cli(&["events", "replay", "2"], &server.config_path()));
    eventually(WAIT, "66 at both targets after the replay", || {
        target.count() == 3 && calls(&work).len() == 3
    })
    .await;
    let state: String = server.one("SELECT state FROM fetches WHERE event_id = 2");
    assert_eq!(state, "fetched");
    let replayed: Value = serde_json::from_slice(&target.seen.lock().unwrap()[2].body).unwrap();
    assert_eq!(replayed["fetched"], mp_payment(66, "approved"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asaas_payments_reach_a_pipe_handler_with_the_payment_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let work = dir.path().to_path_buf();
    let ca = ca("fake Asaas CA");
    write_ca(&ca, dir.path(), "api-ca.pem");
    let payment = json!({"object": "payment", "id": "pay_080225913252", "status": "RECEIVED",
        "value": 100.0, "billingType": "PIX", "customer": "cus_000005219613"});
    let answers: Answers = Arc::new(Mutex::new(HashMap::from([(
        "/v3/payments/pay_080225913252".to_string(),
        vec![(200, payment.clone())],
    )])));
    let api = fake_api(server_tls(&ca), "access_token", ASAAS_KEY.into(), answers).await;
    // A pipe handler that keeps every line and says each was delivered.
    let handler = work.join("handler.py");
    std::fs::write(
        &handler,
        format!(
            "import json, sys\nfor line in sys.stdin:\n    \
             open({:?}, 'a').write(line)\n    \
             sys.stdout.write(json.dumps({{'id': json.loads(line)['id'], 'ok': True}}) + '\\n')\n    \
             sys.stdout.flush()\n",
            work.join("lines").display().to_string()
        ),
    )
    .unwrap();
    let keys = format!(
        "secret = \"{ASAAS_TOKEN}\"\nforward = {{ pipe = [\"python3\", \"{}\"], timeout_secs = 10 }}\n{}",
        handler.display(),
        fetch_table(dir.path(), "asaas.key", ASAAS_KEY, &api)
    );
    let text = sqlite_config(&db)
        .endpoint("/webhooks/asaas", "asaas", &keys)
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    let events = [
        json!({"id": "evt_1", "event": "PAYMENT_RECEIVED",
            "payment": {"object": "payment", "id": "pay_080225913252", "status": "RECEIVED"}}),
        // Not a payment: nothing to fetch, forwarded as it is.
        json!({"id": "evt_2", "event": "TRANSFER_DONE", "transfer": {"id": "tra_1"}}),
    ];
    for e in &events {
        let headers = [
            h("content-type", "application/json"),
            h("asaas-access-token", ASAAS_TOKEN),
        ];
        let reply = post(
            server.addr,
            "/webhooks/asaas",
            &headers,
            e.to_string().as_bytes(),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    eventually(WAIT, "both lines at the handler", || {
        lines(&work, "lines").len() == 2
    })
    .await;
    let got: Vec<Value> = lines(&work, "lines")
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got[0]["fetched"], payment);
    assert_eq!(
        serde_json::from_str::<Value>(got[0]["body"].as_str().unwrap()).unwrap(),
        events[0]
    );
    assert!(got[1].get("fetched").is_none(), "{}", got[1]);
    let asked = api.seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "only the payment is fetched: {asked:?}");
    assert!(
        !std::fs::read_to_string(work.join("lines"))
            .unwrap()
            .contains(ASAAS_KEY)
    );
    server.stop().await;
}

/// The same on PostgreSQL: the object kept in its `fetches`, a 404 rejected, both read back
/// by the status page's JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgresql_a_fetched_payment_is_kept_and_a_missing_one_rejected() {
    let Some(pg) = crate::support::pg_cluster::shared() else {
        return;
    };
    let database = pg.database().await;
    let client = pg.connect(&database).await;
    let dir = tempfile::tempdir().unwrap();
    let unused = dir.path().join("unused.db");
    let ca = ca("fake Mercado Pago CA");
    write_ca(&ca, dir.path(), "api-ca.pem");
    let answers: Answers = Arc::new(Mutex::new(HashMap::from([(
        "/v1/payments/59".to_string(),
        vec![(503, json!({})), (200, mp_payment(59, "approved"))],
    )])));
    let api = fake_mercadopago(server_tls(&ca), answers).await;
    let target = Target::start(vec![200]).await;
    let keys = format!(
        "secret = \"{MP_SECRET}\"\nforward = {{ url = \"http://{}/in\", timeout_secs = 2 }}\n\
         retry = [\"300ms\"]\n{}",
        target.addr,
        fetch_table(dir.path(), "mp.key", MP_KEY, &api)
    );
    let text = storage_config(&format!("url = \"{}\"", pg.url(&database)))
        .endpoint("/webhooks/mercadopago", "mercadopago", &keys)
        .text();
    let server = TestServer::start_with(dir, unused, &text).await;
    for (n, id) in ["59", "66"].iter().enumerate() {
        let (path, headers, body) = mercadopago("/webhooks/mercadopago", id, &format!("req-{n}"));
        assert_eq!(post(server.addr, &path, &headers, &body).await.status, 200);
    }
    eventually(WAIT, "59 forwarded", || target.count() == 1).await;
    crate::support::postgres::until_count(
        &client,
        "SELECT COUNT(*) FROM deliveries WHERE status = 'dead'",
        1,
    )
    .await;
    let body: Value = serde_json::from_slice(&target.seen.lock().unwrap()[0].body).unwrap();
    assert_eq!(body["fetched"], mp_payment(59, "approved"));
    let rows = client
        .query("SELECT event_id, state FROM fetches ORDER BY event_id", &[])
        .await
        .unwrap();
    let rows: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        rows,
        [
            (1, "fetched".to_string()),
            (2, "rejected_by_fetch".to_string())
        ]
    );
    let admin = server.admin.unwrap();
    let one = json(&get(admin, "/api/events/1", &[]).await);
    assert_eq!(one["fetched"], mp_payment(59, "approved"));
    let two = json(&get(admin, "/api/events/2", &[]).await);
    assert_eq!(two["fetch"], "rejected_by_fetch");
    assert_eq!(target.count(), 1, "66 never forwarded");
    let failed = crate::support::postgres::count(
        &client,
        "SELECT COUNT(*) FROM attempts WHERE event_id = 1 AND error LIKE 'fetch:%503'",
    )
    .await;
    assert_eq!(failed, 1, "the 503 was an attempt, retried");
    server.stop().await;
}

/// The real binary at `RUST_LOG=trace`, its key in a variable: a payment fetched, one the API
/// does not have, one it fails on until the event is dead; no log line holds the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_reaches_no_log_line_even_at_trace() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let ca = ca("fake Mercado Pago CA");
    let ca_file = write_ca(&ca, dir, "api-ca.pem");
    let answers: Answers = Arc::new(Mutex::new(HashMap::from([
        (
            "/v1/payments/59".to_string(),
            vec![(200, mp_payment(59, "approved"))],
        ),
        (
            "/v1/payments/88".to_string(),
            vec![(500, json!({"message": "internal_error"}))],
        ),
    ])));
    let api = fake_mercadopago(server_tls(&ca), answers).await;
    let target = Target::start(vec![200]).await;
    let keys = format!(
        "secret = \"{MP_SECRET}\"\nforward = {{ url = \"http://{}/in\", timeout_secs = 2 }}\n\
         retry = [\"100ms\"]\n[endpoint.reconcile]\napi_key_env = \"PORTARIA_TEST_MP_TOKEN\"\n\
         api_base = \"https://localhost:{}\"\nca_file = \"{}\"\nfetch = true\n",
        target.addr,
        api.addr.port(),
        ca_file.display()
    );
    let db = dir.join("portaria.db");
    let config = dir.join("portaria.toml");
    let text = sqlite_config(&db)
        .endpoint("/webhooks/mercadopago", "mercadopago", &keys)
        .text();
    std::fs::write(&config, text).unwrap();
    let mut serve = portaria();
    serve
        .env("RUST_LOG", "trace")
        .env("PORTARIA_TEST_MP_TOKEN", MP_KEY)
        .args(["serve", "--config"])
        .arg(&config);
    let server = Process::spawn_command(serve).await;
    for (n, id) in ["59", "66", "88"].iter().enumerate() {
        let (path, headers, body) = mercadopago("/webhooks/mercadopago", id, &format!("req-{n}"));
        assert_eq!(post(server.addr, &path, &headers, &body).await.status, 200);
    }
    eventually(WAIT, "59 forwarded, 66 and 88 dead", || {
        target.count() == 1
            && count(
                &open_db(&db),
                "SELECT COUNT(*) FROM deliveries WHERE status = 'dead'",
            ) == 2
    })
    .await;
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("rejected_by_fetch"), "{log}");
    assert!(
        log.contains("fetch: GET /v1/payments/88: HTTP 500"),
        "{log}"
    );
    assert!(!log.contains(MP_KEY), "the key in the log");
    assert_eq!(api.seen.lock().unwrap().len(), 4, "59, 66, 88 twice");
}

/// An event fetched, pruned into the archive and replayed from it: its line carries the object
/// (as JSON), and the restored event reaches its target with that object without asking the
/// gateway again (which would now answer otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archived_payment_comes_back_with_its_object_and_is_not_fetched_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let ca = ca("fake Mercado Pago CA");
    write_ca(&ca, dir.path(), "api-ca.pem");
    let answers: Answers = Arc::new(Mutex::new(HashMap::from([(
        "/v1/payments/59".to_string(),
        vec![(200, mp_payment(59, "approved"))],
    )])));
    let api = fake_mercadopago(server_tls(&ca), answers.clone()).await;
    let target = Target::start(vec![200]).await;
    let keys = format!(
        "secret = \"{MP_SECRET}\"\nforward = {{ url = \"http://{}/in\", timeout_secs = 2 }}\n{}",
        target.addr,
        fetch_table(dir.path(), "mp.key", MP_KEY, &api)
    );
    let text = sqlite_config(&db)
        .storage("archive_dir = \"archive\"")
        .endpoint("/webhooks/mercadopago", "mercadopago", &keys)
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    let (path, headers, body) = mercadopago("/webhooks/mercadopago", "59", "req-0");
    assert_eq!(post(server.addr, &path, &headers, &body).await.status, 200);
    eventually(WAIT, "59 forwarded and recorded", || {
        target.count() == 1
            && server.one::<i64>("SELECT COUNT(*) FROM events WHERE status = 'delivered'") == 1
    })
    .await;
    // Forty days pass; the payment has been refunded since.
    let forty_days = 40 * 86_400_000_i64;
    server
        .db()
        .execute(
            "UPDATE events SET received_at = received_at - ?1",
            [forty_days],
        )
        .unwrap();
    answers.lock().unwrap().insert(
        "/v1/payments/59".to_string(),
        vec![(200, mp_payment(59, "refunded"))],
    );
    let config = server.config_path();
    ok_stdout(&run_cli(&["prune"], &config));
    assert_eq!(server.count_rows(), 0);
    let file = crate::retention::archive_file(&server.dir.path().join("archive"));
    let line = &crate::retention::archived_lines(&file)[0];
    assert_eq!(line["fetch"], "fetched");
    assert_eq!(
        line["fetched"],
        mp_payment(59, "approved"),
        "the object, as JSON"
    );

    let out = ok_stdout(&run_cli(
        &["archive", "replay", file.to_str().unwrap()],
        &config,
    ));
    assert!(out.contains("1 event(s) pending again (1 new"), "{out}");
    eventually(WAIT, "59 forwarded again", || target.count() == 2).await;
    let again: Value = serde_json::from_slice(&target.seen.lock().unwrap()[1].body).unwrap();
    assert_eq!(
        again["fetched"],
        mp_payment(59, "approved"),
        "the archived object"
    );
    assert_eq!(
        api.seen.lock().unwrap().len(),
        1,
        "asked once, before the archive"
    );
    server.stop().await;
}
