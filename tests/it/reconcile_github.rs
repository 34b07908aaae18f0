//! `portaria reconcile` against a fake GitHub (issue 26): an HTTPS server with a test CA that
//! speaks the documented hook deliveries API (`GET /repos/{o}/{r}/hooks/{id}/deliveries` with
//! `per_page` and the `Link` header's `cursor`, newest first; `POST .../deliveries/{id}/
//! attempts` answered 202; a Bearer token; shapes from GitHub's REST reference as
//! /work/shared/reference/reconcile.md §4 cites them). Asked to redeliver, it really posts the
//! event's body to portaria, signed (`X-Hub-Signature-256`) with the same `X-GitHub-Delivery`,
//! and lists the redelivery (`OK`) first. The test runs on each store engine (SQLite, and
//! PostgreSQL as `on_postgres_...`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::support::engine::{Engine, Reader};
use crate::support::gateway::{query, reconcile, report};
use crate::support::tunnel::{HttpsServer, Seen, ca, server_tls, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "github_pat_R3concileTest0001";
const PATH: &str = "/webhooks/github";
const HOOK: &str = "/repos/shop/site/hooks/42";
/// The fake gives at most this many deliveries a page, whatever `per_page` asks.
const FAKE_PAGE: usize = 2;

/// The body GitHub sends for the event `guid`.
fn body(guid: &str) -> Vec<u8> {
    json!({"action": "opened", "issue": {"id": guid, "title": "order"}})
        .to_string()
        .into_bytes()
}

fn delivery(id: u64, guid: &str, status: &str, ago_secs: i64) -> Value {
    let at = now_secs() - ago_secs;
    json!({"id": id, "guid": guid, "delivered_at": portaria::time::rfc3339(at * 1000), "redelivery": false,
        "duration": 0.27, "status": status, "status_code": if status == "OK" { 200 } else { 502 },
        "event": "issues", "action": "opened", "installation_id": null, "repository_id": 456,
        "throttled_at": null})
}

fn reply(status: u16, body: Value, link: Option<String>) -> ::http::Response<Full<Bytes>> {
    let mut r = ::http::Response::builder()
        .status(status)
        .header("content-type", "application/json");
    if let Some(link) = link {
        r = r.header("link", link);
    }
    r.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// The fake GitHub: the hook's deliveries (newest first), where it delivers, its requests.
struct FakeGitHub {
    server: HttpsServer,
    portaria: Arc<Mutex<Option<SocketAddr>>>,
    /// portaria's answers to the redeliveries.
    answered: Arc<Mutex<Vec<u16>>>,
}

impl FakeGitHub {
    async fn start(tls: Arc<rustls::ServerConfig>, deliveries: Vec<Value>) -> FakeGitHub {
        let deliveries = Arc::new(Mutex::new(deliveries));
        let portaria: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let target = portaria.clone();
        let answered: Arc<Mutex<Vec<u16>>> = Arc::default();
        let answers = answered.clone();
        let bearer = format!("Bearer {TOKEN}");
        let list = format!("{HOOK}/deliveries");
        let server = HttpsServer::start(tls, move |seen: &Seen| {
            if seen
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                != Some(bearer.as_str())
            {
                return reply(401, json!({"message": "Bad credentials"}), None);
            }
            let path = seen.target.split('?').next().unwrap_or("");
            let mut all = deliveries.lock().unwrap();
            if seen.method == "GET" && path == list {
                let from: usize = query(&seen.target, "cursor")
                    .and_then(|c| c.strip_prefix("v1_"))
                    .map_or(0, |n| n.parse().unwrap());
                let data: Vec<Value> = all.iter().skip(from).take(FAKE_PAGE).cloned().collect();
                let next = from + data.len();
                let link = (next < all.len()).then(|| {
                    format!(
                        "<https://api.github.com{list}?per_page=100&cursor=v1_{next}>; rel=\"next\""
                    )
                });
                return reply(200, Value::Array(data), link);
            }
            let attempt = path
                .strip_prefix(&format!("{list}/"))
                .and_then(|p| p.strip_suffix("/attempts"));
            if let (Some(id), "POST") = (attempt, seen.method.as_str()) {
                let found = all
                    .iter()
                    .find(|d| d["id"].as_u64().map(|n| n.to_string()).as_deref() == Some(id))
                    .cloned();
                let Some(old) = found else {
                    return reply(404, json!({"message": "Not Found"}), None);
                };
                let guid = old["guid"].as_str().unwrap().to_string();
                let mut again = delivery(9000 + all.len() as u64, &guid, "OK", 0);
                again["redelivery"] = json!(true);
                all.insert(0, again);
                let to = target.lock().unwrap().expect("portaria's address");
                let answers = answers.clone();
                tokio::spawn(async move {
                    let body = body(&guid);
                    let reply = post(to, PATH, &github_headers(Some(&guid), &body), &body).await;
                    answers.lock().unwrap().push(reply.status);
                });
                return reply(202, json!({}), None);
            }
            reply(404, json!({"message": "Not Found"}), None)
        })
        .await;
        FakeGitHub {
            server,
            portaria,
            answered,
        }
    }

    fn attempts(&self) -> Vec<String> {
        let seen = self.server.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.method == "POST")
            .map(|s| s.target.clone())
            .collect()
    }
}

/// How many stored events came with the delivery id `guid` (their headers as kept).
async fn stored(reader: &Reader, guid: &str) -> usize {
    let header = format!("x-github-delivery: {guid}");
    let mut n = 0;
    for event in reader.events().await {
        let headers = reader.event(event.id).await.headers;
        n += usize::from(String::from_utf8_lossy(&headers).contains(&header));
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_events_never_delivered_are_redelivered_once_and_a_stored_one_is_a_duplicate() {
    redelivered_once(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_github_events_never_delivered_are_redelivered_once_and_a_stored_one_is_a_duplicate()
 {
    redelivered_once(Engine::Postgres).await;
}

async fn redelivered_once(engine: Engine) {
    // Newest first: C failed twice (portaria stored its first try; the answer was lost), B
    // failed, A went through, D failed five days ago (past the window).
    let deliveries = vec![
        delivery(104, "guid-c", "failed to connect", 60),
        delivery(103, "guid-b", "Invalid HTTP Response: 502", 120),
        delivery(102, "guid-c", "timed out", 180),
        delivery(101, "guid-a", "OK", 240),
        delivery(100, "guid-d", "failed to connect", 5 * 86_400),
    ];
    let dir = tempfile::tempdir().unwrap();
    let Some((config, db)) = engine.config(dir.path()).await else {
        return;
    };
    let ca = ca("fake GitHub CA");
    let ca_file = write_ca(&ca, dir.path(), "api-ca.pem");
    let fake = FakeGitHub::start(server_tls(&ca), deliveries).await;
    std::fs::write(dir.path().join("github.token"), format!("{TOKEN}\n")).unwrap();
    let text = config
        .endpoint(PATH, "github", &format!("secret = \"{GITHUB_SECRET}\""))
        .then(&format!(
            "[endpoint.reconcile]\napi_key_file = \"github.token\"\nhook = \"{HOOK}\"\n\
             api_base = \"https://localhost:{}\"\nca_file = \"{}\"",
            fake.server.addr.port(),
            ca_file.display()
        ))
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    *fake.portaria.lock().unwrap() = Some(server.addr);
    let reader = Reader::of(&server).await;
    for guid in ["guid-a", "guid-c"] {
        let body = body(guid);
        let sent = post(server.addr, PATH, &github_headers(Some(guid), &body), &body).await;
        assert_eq!(sent.status, 200);
    }

    let out = reconcile(&server, &["--json"]).await;
    for text in [&out.stdout, &out.stderr] {
        assert!(
            !String::from_utf8_lossy(text).contains(TOKEN),
            "the token leaked"
        );
    }
    let (run, code) = report(&out);
    assert_eq!(code, Some(0), "{run}");
    assert_eq!(run["checked"], 3, "{run}");
    assert_eq!(run["missing"], json!(["104", "103"]), "{run}");
    assert_eq!(run["recovered"], json!(["104", "103"]), "{run}");
    assert_eq!(
        fake.attempts(),
        [
            format!("{HOOK}/deliveries/104/attempts"),
            format!("{HOOK}/deliveries/103/attempts"),
        ]
    );
    eventually(WAIT, "both redeliveries answered", || {
        fake.answered.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(*fake.answered.lock().unwrap(), [200, 200]);
    // B is stored; C came back as a duplicate (the same body), not stored again.
    assert_eq!(stored(&reader, "guid-b").await, 1);
    assert_eq!(stored(&reader, "guid-c").await, 1);
    assert_eq!(reader.events().await.len(), 3);

    // The redeliveries are OK now: the next run asks nothing.
    let (run, code) = report(&reconcile(&server, &["--json"]).await);
    assert_eq!((code, &run["missing"]), (Some(0), &json!([])), "{run}");
    assert_eq!(fake.attempts().len(), 2);
}
