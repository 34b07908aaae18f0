//! `portaria reconcile` against a fake Asaas (issue 26): an HTTPS server with a test CA that
//! speaks the documented webhooks API (`GET /v3/webhooks` with `offset`/`limit` and the list
//! envelope's `hasMore`; `PUT /v3/webhooks/{id}` with `{"interrupted": false}`; `POST
//! /v3/webhooks/{id}/removeBackoff`; the key in the `access_token` header; shapes from Asaas's
//! reference as /work/shared/reference/reconcile.md §5 cites them). A paused queue holds
//! events; resumed, the fake really posts them to portaria in order with the webhook's token
//! (`asaas-access-token`), so they go through intake like any webhook. Each test runs on each
//! store engine (SQLite, and PostgreSQL as `on_postgres_...`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::engine::{Engine, Reader};
use crate::support::gateway::{answer, query, reconcile, report};
use crate::support::tunnel::{HttpsServer, Seen, ca, server_tls, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const API_KEY: &str = "$aact_R3concileTestKey0001";
const TOKEN: &str = "asaas-webhook-token-7Yq2";
const PATH: &str = "/webhooks/asaas";
/// The fake gives at most this many webhooks a page, whatever `limit` asks.
const FAKE_PAGE: usize = 1;

/// A payment event as Asaas posts it.
fn event(n: usize) -> Value {
    json!({"id": format!("evt_asaas_{n}"), "event": "PAYMENT_RECEIVED",
        "dateCreated": "2026-12-01 12:00:00",
        "payment": {"object": "payment", "id": format!("pay_{n}"), "status": "RECEIVED"}})
}

fn webhook(id: &str, url: &str, interrupted: bool, penalized: u64) -> Value {
    json!({"id": id, "name": "portaria", "url": url, "email": "ops@shop.example",
        "enabled": true, "interrupted": interrupted, "apiVersion": 3, "hasAuthToken": true,
        "sendType": "SEQUENTIALLY", "penalizedRequestsCount": penalized,
        "events": ["PAYMENT_RECEIVED"]})
}

/// The fake Asaas: its webhooks, the events a paused queue holds, where it delivers.
struct FakeAsaas {
    server: HttpsServer,
    portaria: Arc<Mutex<Option<SocketAddr>>>,
}

impl FakeAsaas {
    async fn start(
        tls: Arc<rustls::ServerConfig>,
        webhooks: Vec<Value>,
        held: Vec<Value>,
    ) -> FakeAsaas {
        let webhooks = Arc::new(Mutex::new(webhooks));
        let held = Arc::new(Mutex::new(held));
        let portaria: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let target = portaria.clone();
        let server = HttpsServer::start(tls, move |seen: &Seen| {
            if seen
                .headers
                .get("access_token")
                .and_then(|v| v.to_str().ok())
                != Some(API_KEY)
            {
                let error = json!({"errors": [{"code": "invalid_access_token",
                    "description": "A chave de API fornecida é inválida"}]});
                return answer(401, error, None);
            }
            let path = seen.target.split('?').next().unwrap_or("");
            let id = path
                .strip_prefix("/v3/webhooks/")
                .map(|rest| rest.trim_end_matches("/removeBackoff"));
            let mut all = webhooks.lock().unwrap();
            match (seen.method.as_str(), path, id) {
                ("GET", "/v3/webhooks", _) => {
                    let offset: usize = query(&seen.target, "offset")
                        .unwrap_or("0")
                        .parse()
                        .unwrap();
                    let limit: usize = query(&seen.target, "limit")
                        .unwrap_or("10")
                        .parse()
                        .unwrap();
                    let data: Vec<Value> = all
                        .iter()
                        .skip(offset)
                        .take(limit.min(FAKE_PAGE))
                        .cloned()
                        .collect();
                    let more = offset + data.len() < all.len();
                    answer(
                        200,
                        json!({"object": "list", "hasMore": more, "totalCount": all.len(),
                        "limit": limit, "offset": offset, "data": data}),
                        None,
                    )
                }
                ("PUT", _, Some(id)) => {
                    let Some(found) = all.iter_mut().find(|w| w["id"] == id) else {
                        return answer(404, json!({"errors": []}), None);
                    };
                    let body: Value = serde_json::from_slice(&seen.body).unwrap_or_default();
                    if body != json!({"interrupted": false}) {
                        return answer(400, json!({"errors": [{"code": "invalid_body"}]}), None);
                    }
                    found["interrupted"] = json!(false);
                    // The queue resumes: what it held is sent, in order.
                    let queue: Vec<Value> = std::mem::take(&mut *held.lock().unwrap());
                    let to = target.lock().unwrap().expect("portaria's address");
                    tokio::spawn(async move {
                        for e in queue {
                            let headers = [
                                h("content-type", "application/json"),
                                h("asaas-access-token", TOKEN),
                            ];
                            post(to, PATH, &headers, e.to_string().as_bytes()).await;
                        }
                    });
                    answer(200, found.clone(), None)
                }
                ("POST", _, Some(id)) if path.ends_with("/removeBackoff") => {
                    let Some(found) = all.iter_mut().find(|w| w["id"] == id) else {
                        return answer(404, json!({"errors": []}), None);
                    };
                    found["penalizedRequestsCount"] = json!(0);
                    answer(200, found.clone(), None)
                }
                _ => answer(404, json!({"errors": []}), None),
            }
        })
        .await;
        FakeAsaas { server, portaria }
    }

    /// What the runs asked besides listing: `PUT /v3/webhooks/wh_1 {"interrupted":false}`.
    fn changes(&self) -> Vec<String> {
        let seen = self.server.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.method != "GET")
            .map(|s| {
                format!(
                    "{} {} {}",
                    s.method,
                    s.target,
                    String::from_utf8_lossy(&s.body)
                )
            })
            .map(|s| s.trim_end().to_string())
            .collect()
    }
}

/// portaria on `engine` with an asaas endpoint reconciling against `fake` (`extra` more
/// reconcile keys); None where PostgreSQL is missing (skipped).
async fn start(
    engine: Engine,
    fake: &FakeAsaas,
    ca_file: &std::path::Path,
    extra: &str,
) -> Option<TestServer> {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = engine.config(dir.path()).await?;
    std::fs::write(dir.path().join("asaas.key"), format!("{API_KEY}\n")).unwrap();
    let text = config
        .endpoint(PATH, "asaas", &format!("secret = \"{TOKEN}\""))
        .then(&format!(
            "[endpoint.reconcile]\napi_key_file = \"asaas.key\"\n\
             api_base = \"https://localhost:{}\"\nca_file = \"{}\"\n{extra}",
            fake.server.addr.port(),
            ca_file.display()
        ))
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    *fake.portaria.lock().unwrap() = Some(server.addr);
    Some(server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_asaas_queue_is_named_then_resumed_with_reactivate_and_its_events_arrive_once() {
    named_then_resumed(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_paused_asaas_queue_is_named_then_resumed_with_reactivate_and_its_events_arrive_once()
 {
    named_then_resumed(Engine::Postgres).await;
}

async fn named_then_resumed(engine: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let ca = ca("fake Asaas CA");
    let ca_file = write_ca(&ca, dir.path(), "api-ca.pem");
    // The account's other webhook comes first and is paused too: not this endpoint's.
    let webhooks = vec![
        webhook("wh_theirs", "https://other.example/asaas", true, 15),
        webhook(
            "wh_ours",
            "https://hooks.shop.example/webhooks/asaas",
            true,
            15,
        ),
    ];
    let fake = FakeAsaas::start(server_tls(&ca), webhooks, vec![event(1), event(2)]).await;

    // Without `reactivate`: named, with what to do before the 14 days run out; nothing asked.
    let Some(plain) = start(engine, &fake, &ca_file, "").await else {
        return;
    };
    let out = reconcile(&plain, &["--json"]).await;
    let (run, code) = report(&out);
    assert_eq!(code, Some(1), "{run}");
    assert_eq!(
        (run["checked"].as_u64(), run["failed_at_gateway"].as_u64()),
        (Some(1), Some(1)),
        "{run}"
    );
    assert_eq!(run["missing"], json!(["wh_ours"]), "{run}");
    assert_eq!(run["recovered"], json!([]), "{run}");
    assert!(
        run["note"].as_str().unwrap_or("").contains("14 days"),
        "{run}"
    );
    assert_eq!(fake.changes(), Vec::<String>::new());
    for text in [&out.stdout, &out.stderr] {
        assert!(
            !String::from_utf8_lossy(text).contains(API_KEY),
            "the key leaked"
        );
    }
    drop(plain);

    // With it: a dry run still asks nothing; a run resumes this endpoint's queue only and
    // drops its penalty, and what the queue held arrives, once each.
    let Some(server) = start(engine, &fake, &ca_file, "reactivate = true").await else {
        return;
    };
    let reader = Reader::of(&server).await;
    let (run, code) = report(&reconcile(&server, &["--json", "--dry-run"]).await);
    assert_eq!(
        (code, &run["missing"]),
        (Some(1), &json!(["wh_ours"])),
        "{run}"
    );
    assert_eq!(fake.changes(), Vec::<String>::new());
    let (run, code) = report(&reconcile(&server, &["--json"]).await);
    assert_eq!(code, Some(0), "{run}");
    assert_eq!(run["recovered"], json!(["wh_ours"]), "{run}");
    assert_eq!(
        fake.changes(),
        [
            r#"PUT /v3/webhooks/wh_ours {"interrupted":false}"#,
            "POST /v3/webhooks/wh_ours/removeBackoff",
        ]
    );
    reader.until_stored_once("evt_asaas_1", WAIT).await;
    reader.until_stored_once("evt_asaas_2", WAIT).await;

    // The next run finds the queue running and asks nothing more.
    let (run, code) = report(&reconcile(&server, &["--json"]).await);
    assert_eq!((code, &run["missing"]), (Some(0), &json!([])), "{run}");
    assert_eq!(fake.changes().len(), 2);
}

/// A queue a run leaves paused is a `reconciled` alert with Asaas's deadline: its events are
/// deleted 14 days after the pause, counted from when runs first saw it paused, a date the
/// next run keeps (it does not move the deadline later). A command's runs, announced by the
/// server's alerts task from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_left_paused_is_an_alert_with_asaas_s_deadline_kept_across_runs() {
    left_paused(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_queue_left_paused_is_an_alert_with_asaas_s_deadline_kept_across_runs() {
    left_paused(Engine::Postgres).await;
}

async fn left_paused(engine: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let ca = ca("fake Asaas CA");
    let ca_file = write_ca(&ca, dir.path(), "api-ca.pem");
    let ours = "https://hooks.shop.example/webhooks/asaas";
    let fake = FakeAsaas::start(
        server_tls(&ca),
        vec![webhook("wh_ours", ours, true, 15)],
        vec![],
    )
    .await;
    let alerts = dir.path();
    let extra = format!(
        "\n[alerts]\ncommand = [\"{}\"]\nalert_every = \"1s\"\n",
        alert_command(alerts).display()
    );
    let Some(server) = start(engine, &fake, &ca_file, &extra).await else {
        return;
    };

    let (first, code) = report(&reconcile(&server, &["--json"]).await);
    assert_eq!(code, Some(1), "{first}");
    let since = first["paused_since_ms"]
        .as_i64()
        .expect("a paused queue's since");
    assert_eq!(
        Some(since),
        first["at_ms"].as_i64(),
        "first seen paused now"
    );
    let deadline = portaria::time::rfc3339(since + 14 * 86_400_000);
    eventually(WAIT, "the reconciled alert", || {
        !of_kind(alerts, "reconciled").is_empty()
    })
    .await;
    let alert = &of_kind(alerts, "reconciled")[0];
    assert_eq!(
        (&alert["endpoint"], &alert["count"]),
        (&json!("asaas"), &json!(1)),
        "{alert}"
    );
    let message = alert["message"].as_str().unwrap_or("");
    for says in [
        "never received (wh_ours)",
        "got none back",
        "Asaas deletes the events of a paused queue 14 days after the pause",
        &format!("by {deadline} at the latest"),
    ] {
        assert!(message.contains(says), "{says:?} not in {message}");
    }

    let (second, _) = report(&reconcile(&server, &["--json"]).await);
    assert!(second["at_ms"].as_i64() > Some(since), "{second}");
    assert_eq!(second["paused_since_ms"].as_i64(), Some(since), "{second}");
    eventually(WAIT, "the second run's alert", || {
        of_kind(alerts, "reconciled").len() == 2
    })
    .await;
    let message = of_kind(alerts, "reconciled")[1]["message"].to_string();
    assert!(message.contains(&deadline), "the same deadline: {message}");
    assert_eq!(
        fake.changes(),
        Vec::<String>::new(),
        "nothing asked without reactivate"
    );
}
