//! `portaria reconcile` against a fake Paddle Billing (issue 26): an HTTPS server with a test
//! CA that speaks the documented notifications API (`GET /notification-settings`; `GET
//! /notifications` with `status`, `notification_setting_id`, `from`, `per_page`, `after`, and
//! `meta.pagination.next`/`has_more`; `POST /notifications/{id}/replay`, which Paddle takes
//! only for an original, `origin: event`; a Bearer key; shapes from Paddle's API reference as
//! /work/shared/reference/reconcile.md §3 cites them). Asked to replay, it really posts the
//! notification's payload to portaria, signed as Paddle signs (`Paddle-Signature`), so the copy
//! goes through intake like any webhook; the replay is a new notification of the same event.
//! The test runs on each store engine (SQLite, and PostgreSQL as `on_postgres_...`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::engine::{Engine, Reader};
use crate::support::gateway::{answer, query, reconcile, report};
use crate::support::tunnel::{HttpsServer, Seen, ca, server_tls, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const API_KEY: &str = "pdl_live_apikey_R3concile7x";
const SECRET: &str = "pdl_ntfset_01hv8x2test_secret";
const PATH: &str = "/webhooks/paddle";
/// The fake gives at most this many notifications a page, whatever `per_page` asks (an API
/// may give fewer): the run follows `next`.
const FAKE_PAGE: usize = 3;

/// A notification as `GET /notifications` lists it.
fn notification(id: &str, event: &str, status: &str, origin: &str, setting: &str) -> Value {
    json!({"id": id, "type": "transaction.completed", "status": status, "origin": origin,
        "occurred_at": "2026-12-01T12:00:00Z", "times_attempted": 10, "retry_at": null,
        "notification_setting_id": setting,
        "payload": {"event_id": event, "event_type": "transaction.completed",
            "occurred_at": "2026-12-01T12:00:00Z", "notification_id": id,
            "data": {"id": format!("txn_{event}"), "status": "completed"}}})
}

/// Posts `payload` to portaria at `addr`, signed as Paddle signs.
async fn deliver(addr: SocketAddr, payload: &Value) -> Reply {
    let body = payload.to_string().into_bytes();
    let ts = now_secs().to_string();
    let sig = hmac_hex(SECRET, &[ts.as_bytes(), b":", &body]);
    let headers = [
        h("content-type", "application/json"),
        h("paddle-signature", format!("ts={ts};h1={sig}")),
    ];
    post(addr, PATH, &headers, &body).await
}

/// The fake Paddle: its notifications (newest last), where it delivers, its requests.
struct FakePaddle {
    server: HttpsServer,
    notifications: Arc<Mutex<Vec<Value>>>,
    portaria: Arc<Mutex<Option<SocketAddr>>>,
}

impl FakePaddle {
    async fn start(tls: Arc<rustls::ServerConfig>, notifications: Vec<Value>) -> FakePaddle {
        let notifications = Arc::new(Mutex::new(notifications));
        let portaria: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let (listed, target) = (notifications.clone(), portaria.clone());
        let bearer = format!("Bearer {API_KEY}");
        let server = HttpsServer::start(tls, move |seen: &Seen| {
            if seen
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                != Some(bearer.as_str())
            {
                let error = json!({"error": {"type": "request_error", "code": "authentication_missing"}});
                return answer(401, error, None);
            }
            let path = seen.target.split('?').next().unwrap_or("");
            match (seen.method.as_str(), path) {
                ("GET", "/notification-settings") => answer(
                    200,
                    json!({"data": [
                        {"id": "ntfset_other", "destination": "https://other.example/paddle",
                         "active": true, "type": "url"},
                        {"id": "ntfset_ours", "destination": "https://hooks.shop.example/webhooks/paddle",
                         "active": true, "type": "url"}]}),
                    None,
                ),
                ("GET", "/notifications") => {
                    let status = query(&seen.target, "status").unwrap_or("");
                    let settings = query(&seen.target, "notification_setting_id").unwrap_or("");
                    let all = listed.lock().unwrap();
                    let matching: Vec<&Value> = all
                        .iter()
                        .filter(|n| status.split(',').any(|s| n["status"] == s))
                        .filter(|n| {
                            settings
                                .split(',')
                                .any(|s| n["notification_setting_id"] == s)
                        })
                        .collect();
                    let from = match query(&seen.target, "after") {
                        Some(id) => matching.iter().position(|n| n["id"] == id).unwrap() + 1,
                        None => 0,
                    };
                    let data: Vec<Value> =
                        matching.iter().skip(from).take(FAKE_PAGE).map(|n| (*n).clone()).collect();
                    let has_more = from + data.len() < matching.len();
                    let next = data.last().map(|n| {
                        format!(
                            "https://api.paddle.com/notifications?per_page={FAKE_PAGE}&after={}",
                            n["id"].as_str().unwrap()
                        )
                    });
                    let pagination = json!({"per_page": FAKE_PAGE, "next": next,
                        "has_more": has_more, "estimated_total": matching.len()});
                    answer(200, json!({"data": data, "meta": {"pagination": pagination}}), None)
                }
                ("POST", _) => {
                    let id = path
                        .strip_prefix("/notifications/")
                        .and_then(|p| p.strip_suffix("/replay"))
                        .unwrap_or("");
                    let mut all = listed.lock().unwrap();
                    let Some(original) = all.iter().find(|n| n["id"] == id).cloned() else {
                        return answer(404, json!({"error": {"code": "not_found"}}), None);
                    };
                    if original["origin"] != "event" {
                        let error = json!({"error": {"code": "notification_replay_invalid_origin_type"}});
                        return answer(400, error, None);
                    }
                    // A new notification of the same event, delivered on Paddle's own time.
                    let replay = format!("ntf_replay_{}", all.len());
                    let mut copy = original.clone();
                    copy["id"] = json!(replay);
                    copy["origin"] = json!("replay");
                    copy["status"] = json!("delivered");
                    all.push(copy);
                    let (payload, to) = (
                        original["payload"].clone(),
                        target.lock().unwrap().expect("portaria's address"),
                    );
                    tokio::spawn(async move { deliver(to, &payload).await });
                    answer(202, json!({"data": {"notification_id": replay}}), None)
                }
                _ => answer(404, json!({"error": {"code": "not_found"}}), None),
            }
        })
        .await;
        FakePaddle {
            server,
            notifications,
            portaria,
        }
    }

    fn replays(&self) -> Vec<String> {
        let seen = self.server.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.method == "POST")
            .map(|s| s.target.clone())
            .collect()
    }

    fn lists(&self) -> Vec<String> {
        let seen = self.server.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.target.starts_with("/notifications?"))
            .map(|s| s.target.clone())
            .collect()
    }
}

/// Neither the key nor its Bearer form in what the command said.
fn assert_no_key(out: &std::process::Output) {
    for text in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(text);
        assert!(!text.contains(API_KEY), "the key leaked: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_paddle_gave_up_on_is_replayed_once_and_a_replay_of_a_replay_never_asked() {
    replayed_once(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_notification_paddle_gave_up_on_is_replayed_once_and_a_replay_of_a_replay_never_asked()
 {
    replayed_once(Engine::Postgres).await;
}

async fn replayed_once(engine: Engine) {
    // Five failed notifications whose events reached portaria (their answers lost), one that
    // never did, one delivered, and a failed one to the account's other destination.
    let mut list: Vec<Value> = (1..=5)
        .map(|n| {
            let (id, event) = (format!("ntf_lost{n}"), format!("evt_lost{n}"));
            notification(&id, &event, "failed", "event", "ntfset_ours")
        })
        .collect();
    list.push(notification(
        "ntf_missing",
        "evt_missing",
        "failed",
        "event",
        "ntfset_ours",
    ));
    list.push(notification(
        "ntf_fine",
        "evt_fine",
        "delivered",
        "event",
        "ntfset_ours",
    ));
    list.push(notification(
        "ntf_theirs",
        "evt_theirs",
        "failed",
        "event",
        "ntfset_other",
    ));

    let dir = tempfile::tempdir().unwrap();
    let Some((config, db)) = engine.config(dir.path()).await else {
        return;
    };
    let ca = ca("fake Paddle CA");
    let ca_file = write_ca(&ca, dir.path(), "api-ca.pem");
    let fake = FakePaddle::start(server_tls(&ca), list.clone()).await;
    std::fs::write(dir.path().join("paddle.key"), format!("{API_KEY}\n")).unwrap();
    let text = config
        .endpoint(PATH, "paddle", &format!("secret = \"{SECRET}\""))
        .then(&format!(
            "[endpoint.reconcile]\napi_key_file = \"paddle.key\"\napi_base = \"https://localhost:{}\"\n\
             ca_file = \"{}\"",
            fake.server.addr.port(),
            ca_file.display()
        ))
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    *fake.portaria.lock().unwrap() = Some(server.addr);
    let reader = Reader::of(&server).await;
    for n in list
        .iter()
        .filter(|n| n["id"].as_str().unwrap().starts_with("ntf_lost"))
    {
        assert_eq!(deliver(server.addr, &n["payload"]).await.status, 200);
    }

    let out = reconcile(&server, &["--json"]).await;
    assert_no_key(&out);
    let (run, code) = report(&out);
    assert_eq!(code, Some(0), "{run}");
    assert_eq!(run["provider"], "paddle");
    assert_eq!(run["checked"], 6, "{run}");
    assert_eq!(run["missing"], json!(["ntf_missing"]), "{run}");
    assert_eq!(run["recovered"], json!(["ntf_missing"]), "{run}");
    assert_eq!(fake.replays(), ["/notifications/ntf_missing/replay"]);
    // Only this endpoint's destination, only what Paddle gave up on, page after page.
    let lists = fake.lists();
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert_eq!(
        query(&lists[0], "notification_setting_id"),
        Some("ntfset_ours")
    );
    assert_eq!(query(&lists[0], "status"), Some("failed"));
    assert!(query(&lists[0], "from").is_some(), "{}", lists[0]);
    assert_eq!(query(&lists[1], "after"), Some("ntf_lost3"));

    // Replayed by Paddle, signed: it arrives through intake.
    reader.until_stored_once("evt_missing", WAIT).await;

    // The next run finds nothing missing (the original stays `failed` at Paddle; its event is
    // stored now), and asks for nothing.
    let (run, code) = report(&reconcile(&server, &["--json"]).await);
    assert_eq!(code, Some(0), "{run}");
    assert_eq!(run["missing"], json!([]), "{run}");
    assert_eq!(fake.replays().len(), 1);
    // A late genuine delivery is a duplicate.
    let late = deliver(server.addr, &list[5]["payload"]).await;
    assert_eq!(late.status, 200);
    assert_eq!(reader.with_key("evt_missing").await.len(), 1);

    // A failed replay whose original is not listed: Paddle would refuse to replay it, so the
    // run names it, asks for nothing and exits 1.
    let orphan = notification("ntf_orphan", "evt_gone", "failed", "replay", "ntfset_ours");
    fake.notifications.lock().unwrap().push(orphan);
    let out = reconcile(&server, &["--json"]).await;
    let (run, code) = report(&out);
    assert_eq!(code, Some(1), "{run}");
    assert_eq!(run["missing"], json!(["ntf_orphan"]), "{run}");
    let errors = run["errors"].to_string();
    assert!(errors.contains("Paddle replays only"), "{errors}");
    assert_eq!(fake.replays().len(), 1);
    assert!(reader.with_key("evt_gone").await.is_empty());
}
