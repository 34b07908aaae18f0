//! `portaria reconcile` against a fake Pagar.me (issue 26): an HTTPS server with a test CA
//! that speaks the documented hooks API (`GET /core/v5/hooks` with `created_since`, `page`,
//! `size`; `POST /core/v5/hooks/{id}/retry`; HTTP Basic with the secret key as the user; shapes
//! from docs.pagar.me's "Listar webhooks" and the PHP SDK's paging model, as
//! /work/shared/reference/reconcile.md §1 cites them). Asked to retry, it really posts the
//! delivery to portaria, signed RS256 with a test key whose JWKS the endpoint reads, so the
//! copy goes through intake like any webhook. The real server in-process, the real binary
//! for the command. Each test runs on each store engine (SQLite, and PostgreSQL as
//! `on_postgres_...`), reading what was stored through the store API.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use portaria::store::Origin;
use serde_json::{Value, json};

use crate::support::engine::{Engine, Reader};
use crate::support::gateway::{answer, query, reconcile, report};
use crate::support::tunnel::{HttpsServer, Seen, ca, server_tls, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);
const API_KEY: &str = "sk_test_R3concile-9f2a";
const PATH: &str = "/webhooks/pagarme-v5";

/// A 2048-bit RSA key made for these tests (`openssl genpkey`), standing in for Pagar.me's.
const TEST_KEY: &str = r"-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDJM1mdlgsCvOq3
L2mdrdh/osaUrKsBgZGc/IwGP8ux/dqu5fVFNLpdGq+uFNuokZaEjtb8QCgYxYl/
jWBlCpATU84yCm0oLAP4D2E2aLzZLwY9EbCyvCRtrZHlZVANRZXFkdcmJXbavm8U
HoMpa+jB9rTxcZJA0xNsU2CIagSX+v9H560kNC9n40dzmwUoG3XE/cZGbQJ/VL17
NWZG64ntAsR+p5Ov4y0S5MSiVsvbmWzTgHmAyZzh7veygrolxOFkPNL7o6i8w1eo
CzA+1PY5DuwHi0S4HrwX3+/TnvUtYRdE7sfbzrwmBvKMFlisHuf2U39mKsPj/qHH
9HgBiPPdAgMBAAECggEAGvpXLFGnlUzmffyOAVYDnw2g6eODJHcOosmcLuRT+EBN
F8F+0zJAQOaoosNqNp6a25hZjEY/+h5WkvNOdw3lBqpojf4m58mLGLJbOxPtKoPr
JroeAsFGcyxgUS11/+mSLQUin5tLZgY916lFtgKhmYxuc6diUG3c/1voqDHq/sOs
k5sbJkrGWKTsz4n0MCjczPyOmpG93JB/IrKb/My+GP86Eb6B8IuEY4WE7ewZgwtM
SBlkHneiumsoZbKAJUy6fNnyTsEpRRcKn/I9ELBez914wjbUDlPrM9iqcUde+y6C
aMqnfOEYLl3RQsEH0SQT+28NR5p1pzByzq8krrbvUQKBgQDuCjPAbvNVfrgYG2AY
FevRzFZN6+1Pj1F2eqFAy9Zl0lZDGb0n5qpoLdNdpn/t7tjdmSHdHy1+hL5yxk+q
BihsI0+z6Tjcn8Opo4jh7gWFCedwCcaQjCwrelJHsbdstr4R6s2HRNVj/ZFNhEA6
8hcF36gQR9ou9cxEOYQNOsGyJQKBgQDYYZanYEqMWTQdhEj5zG1m8YzPu20sQAOi
u/NQ8uWhFtzVf/3vL4keLyO2nlpbfs/9d7PcMx8xkz9wuUAEUO+QZw/1formf/O6
sMWwRm0xhfXPZ/tvfNz6HD0rn2Wu0IZWZ2XWDU6VbKTKo2ituPwu1lR7hjVG/0tg
KO3ZnUphWQKBgQDmmemStal0HKO5buPD0ZC3mQ3OxQ0L8xqG/buzqwTTdVXuAURX
IEXbUPGfmwn59VYQLyY4Mdj/5Rce13EblIWaZQb0kq5sRTXm5C9aOB0Oyg50YnQD
Wlf78q89FzRL1CkD8IUVUyCqkl4uSz1yHU8ieI4233TF44b0XQfJTS+SJQKBgQCZ
elbWr6kQ9bDOgucUL9klnI2JRuL/8QPjKLdEIpWX9lR7J0bhofD7NOp6/MUQgtla
as5rkOM+Ubg851kt9o6F+WRLeA9jwTwKnpoKF1oaN2+MRrAEeyduTBtjVrNUFNpE
bSDBfDzSJfaZOODl4AEX47SWzTH7AtffBAj5QuTgOQKBgGIzUb1xAp+4RmrdQSRQ
H+7ZoIOUFZP0mG3Fz1XjGouIcFAG/eJ5uTiYrmLo7PzoiRWSztFKbHTUSfWUrJ77
SV8q24Tez+r5eN5M38pUY6SvC47tHKyO5+w3oxfPd6YdVQBv9G+x+3g5VgpaSWJB
R4kDVyS3UpYHmgMvse8bZadv
-----END PRIVATE KEY-----";

fn key_pair() -> ring::signature::RsaKeyPair {
    let b64: String = TEST_KEY
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = STANDARD.decode(b64).unwrap();
    ring::signature::RsaKeyPair::from_pkcs8(&der).unwrap()
}

/// The JWKS of [`TEST_KEY`], as Pagar.me publishes its own.
fn jwks() -> Value {
    let key = key_pair();
    let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(key.public());
    let (n, e) = (public.n, public.e);
    json!({"keys": [{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
        "n": URL_SAFE_NO_PAD.encode(n), "e": URL_SAFE_NO_PAD.encode(e)}]})
}

/// `X-Webhook-Asymmetric-Signature` for `body`.
fn signature(body: &[u8]) -> String {
    let key = key_pair();
    let mut sig = vec![0; key.public().modulus_len()];
    let rng = ring::rand::SystemRandom::new();
    key.sign(&ring::signature::RSA_PKCS1_SHA256, &rng, body, &mut sig)
        .unwrap();
    format!(
        "alg=RS256; kid=k1; signature={}",
        URL_SAFE_NO_PAD.encode(sig)
    )
}

/// The body Pagar.me posts for `hook` (a delivery as the list shows it).
fn delivery_body(hook: &Value) -> Vec<u8> {
    json!({"id": hook["id"], "account": hook["account"], "type": hook["event"],
        "created_at": hook["created_at"], "data": hook["data"]})
    .to_string()
    .into_bytes()
}

/// Posts `hook`'s delivery to portaria at `addr`, signed.
async fn deliver(addr: SocketAddr, hook: &Value) -> Reply {
    let body = delivery_body(hook);
    let headers = [
        h("content-type", "application/json"),
        h("x-webhook-asymmetric-signature", signature(&body)),
    ];
    post(addr, PATH, &headers, &body).await
}

fn hook(id: &str, status: &str, url: &str) -> Value {
    json!({"id": id, "url": url, "event": "charge.paid", "status": status,
        "attempts": "3/3", "created_at": "2026-12-01T04:15:39Z",
        "account": {"id": "acc_1", "name": "Loja"},
        "data": {"id": format!("ch_{id}"), "status": "paid"}})
}

/// What the fake API answers with besides its documented behaviour, one answer per request
/// until the list runs out.
type Script = Arc<Mutex<Vec<(u16, Option<&'static str>)>>>;

/// The fake Pagar.me: its hooks, where it delivers, its requests.
struct FakePagarme {
    server: HttpsServer,
    hooks: Arc<Mutex<Vec<Value>>>,
    script: Script,
    portaria: Arc<Mutex<Option<SocketAddr>>>,
}

impl FakePagarme {
    /// The fake with `hooks`; it delivers to [`FakePagarme::portaria`] once that is set.
    async fn start(tls: Arc<rustls::ServerConfig>, hooks: Vec<Value>) -> FakePagarme {
        let hooks = Arc::new(Mutex::new(hooks));
        let portaria: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let target = portaria.clone();
        let script: Script = Arc::default();
        let (listed, scripted) = (hooks.clone(), script.clone());
        let basic = format!("Basic {}", STANDARD.encode(format!("{API_KEY}:")));
        let server = HttpsServer::start(tls, move |seen: &Seen| {
            let next = {
                let mut s = scripted.lock().unwrap();
                (!s.is_empty()).then(|| s.remove(0))
            };
            if let Some((status, wait)) = next {
                return answer(status, json!({"message": "scripted"}), wait);
            }
            if seen
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                != Some(basic.as_str())
            {
                return answer(
                    401,
                    json!({"message": "Authorization has been denied for this request."}),
                    None,
                );
            }
            let path = seen.target.split('?').next().unwrap_or("");
            if seen.method == "GET" && path == "/core/v5/hooks" {
                let page: usize = query(&seen.target, "page").unwrap_or("1").parse().unwrap();
                let size: usize = query(&seen.target, "size").unwrap_or("10").parse().unwrap();
                let all = listed.lock().unwrap();
                let data: Vec<Value> = all
                    .iter()
                    .skip((page - 1) * size)
                    .take(size)
                    .cloned()
                    .collect();
                let total = all.len().div_ceil(size);
                return answer(200, json!({"data": data, "paging": {"total": total}}), None);
            }
            let retry = path
                .strip_prefix("/core/v5/hooks/")
                .and_then(|p| p.strip_suffix("/retry"));
            if let (Some(id), "POST") = (retry, seen.method.as_str()) {
                let found = listed
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|h| h["id"] == id)
                    .cloned();
                let Some(hook) = found else {
                    return answer(404, json!({"message": "Hook not found"}), None);
                };
                // Pagar.me sends the delivery again on its own time, signed.
                let (sent, to) = (
                    hook.clone(),
                    target.lock().unwrap().expect("portaria's address"),
                );
                tokio::spawn(async move { deliver(to, &sent).await });
                return answer(200, hook, None);
            }
            answer(404, json!({"message": "not found"}), None)
        })
        .await;
        FakePagarme {
            server,
            hooks,
            script,
            portaria,
        }
    }

    fn base(&self) -> String {
        format!("https://localhost:{}", self.server.addr.port())
    }

    fn seen(&self) -> Vec<Seen> {
        self.server.seen.lock().unwrap().clone()
    }

    fn retries(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "POST")
            .map(|s| s.target)
            .collect()
    }
}

/// The fake Pagar.me with `hooks`, and portaria on `engine` with a pagarme-v5 endpoint
/// reconciling against it (its key in a file, the fake's CA as `ca_file`, `extra` more
/// reconcile keys); None where PostgreSQL is missing (skipped).
async fn start_on(
    engine: Engine,
    hooks: Vec<Value>,
    extra: &str,
) -> Option<(TestServer, FakePagarme)> {
    let dir = tempfile::tempdir().unwrap();
    let (config, db) = engine.config(dir.path()).await?;
    let ca = ca("fake Pagar.me CA");
    let ca_file = write_ca(&ca, dir.path(), "api-ca.pem");
    let fake = FakePagarme::start(server_tls(&ca), hooks).await;
    std::fs::write(dir.path().join("pagarme-jwks.json"), jwks().to_string()).unwrap();
    std::fs::write(dir.path().join("pagarme.key"), format!("{API_KEY}\n")).unwrap();
    let text = config
        .endpoint(PATH, "pagarme-v5", "jwks_file = \"pagarme-jwks.json\"")
        .then(&format!(
            "[endpoint.reconcile]\napi_key_file = \"pagarme.key\"\napi_base = \"{}\"\n\
             ca_file = \"{}\"\n{extra}",
            fake.base(),
            ca_file.display()
        ))
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    *fake.portaria.lock().unwrap() = Some(server.addr);
    Some((server, fake))
}

/// Neither the key nor its Basic form in what the command said.
fn assert_no_key(out: &std::process::Output) {
    let basic = STANDARD.encode(format!("{API_KEY}:"));
    for text in [&out.stdout, &out.stderr] {
        let text = String::from_utf8_lossy(text);
        assert!(
            !text.contains(API_KEY) && !text.contains(&basic),
            "the key leaked: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_delivery_portaria_never_stored_is_resent_once_and_found_by_the_next_run() {
    resent_once_and_found_by_the_next_run(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_failed_delivery_portaria_never_stored_is_resent_once_and_found_by_the_next_run()
 {
    resent_once_and_found_by_the_next_run(Engine::Postgres).await;
}

async fn resent_once_and_found_by_the_next_run(engine: Engine) {
    let ours = "https://hooks.shop.example/webhooks/pagarme-v5";
    // Page 1: 100 deliveries that reached portaria (`sent`); page 2: one that did and failed
    // at Pagar.me anyway (its answer lost), one that never did, one still pending, and a
    // failed one to another URL of the account (not this endpoint's).
    let mut hooks: Vec<Value> = (0..100)
        .map(|n| hook(&format!("hook_sent{n}"), "sent", ours))
        .collect();
    hooks.push(hook("hook_answerlost", "failed", ours));
    hooks.push(hook("hook_missing", "failed", ours));
    hooks.push(hook("hook_pending", "pending", ours));
    hooks.push(hook(
        "hook_elsewhere",
        "failed",
        "https://other.example/pagarme",
    ));
    let Some((server, fake)) = start_on(engine, hooks.clone(), "").await else {
        return;
    };
    let reader = Reader::of(&server).await;
    for h in hooks
        .iter()
        .filter(|h| h["status"] == "sent" || h["id"] == "hook_answerlost")
    {
        assert_eq!(deliver(server.addr, h).await.status, 200);
    }
    let admin = server.admin.expect("the admin listener");
    let gauge = |name: &'static str| async move {
        let scraped = scrape(admin).await;
        find(&scraped, name, &[("endpoint", "pagarme-v5")]).unwrap_or_else(|| panic!("no {name}"))
    };
    assert_eq!(
        gauge("portaria_reconcile_last_run_timestamp_seconds").await,
        0.0
    );
    assert_eq!(gauge("portaria_reconcile_ok").await, 0.0, "no run yet");

    let out = reconcile(&server, &["--json"]).await;
    assert_no_key(&out);
    let (report, code) = report(&out);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["endpoint"], "pagarme-v5");
    assert_eq!(
        report["checked"], 103,
        "both pages, this endpoint's deliveries: {report}"
    );
    assert_eq!(report["failed_at_gateway"], 2);
    assert_eq!(report["missing"], json!(["hook_missing"]));
    assert_eq!(report["recovered"], json!(["hook_missing"]));
    assert_eq!(fake.retries(), ["/core/v5/hooks/hook_missing/retry"]);
    // `/metrics` shows the run the command kept, read from the store.
    assert!(gauge("portaria_reconcile_last_run_timestamp_seconds").await > 1.7e9);
    assert_eq!(gauge("portaria_reconcile_missing").await, 1.0);
    assert_eq!(gauge("portaria_reconcile_recovered").await, 1.0);
    assert_eq!(gauge("portaria_reconcile_ok").await, 1.0);
    // The listing asked for the window, page by page.
    let lists: Vec<String> = fake
        .seen()
        .into_iter()
        .filter(|s| s.method == "GET")
        .map(|s| s.target)
        .collect();
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert!(
        lists.iter().all(|t| query(t, "created_since").is_some()),
        "{lists:?}"
    );
    assert_eq!(query(&lists[1], "page"), Some("2"));

    // Resent by Pagar.me, signed: it arrives through intake.
    reader.until_stored_once("hook_missing", WAIT).await;

    // The next run finds nothing missing, and asks for nothing.
    let out = reconcile(&server, &[]).await;
    let text = ok_stdout(&out);
    assert!(
        text.contains("103 checked, 2 failed at the gateway, 0 never stored by portaria"),
        "{text}"
    );
    assert_eq!(fake.retries().len(), 1);
    assert_eq!(reader.with_key("hook_missing").await.len(), 1);
    // A late genuine delivery is a duplicate.
    assert_eq!(deliver(server.addr, &hooks[101]).await.status, 200);
    assert_eq!(reader.with_key("hook_missing").await.len(), 1);
    drop(fake.hooks);
}

/// One run at a time per store: a command that finds the store held (by `serve`'s schedule,
/// another instance's or another command; here a handle the test holds as one would) asks
/// the gateway nothing, keeps nothing, says why and exits 1; once the hold is let go, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_while_another_holds_the_store_does_nothing_and_says_so() {
    a_run_while_held(Engine::Sqlite).await;
}

/// On PostgreSQL the hold is another instance's: a handle of its own on the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_run_while_another_instance_holds_the_store_does_nothing_and_says_so() {
    a_run_while_held(Engine::Postgres).await;
}

async fn a_run_while_held(engine: Engine) {
    let ours = "https://hooks.shop.example/webhooks/pagarme-v5";
    let hooks = vec![hook("hook_gone", "failed", ours)];
    let Some((server, fake)) = start_on(engine, hooks, "").await else {
        return;
    };
    let other = Reader::of(&server).await;
    let hold = other
        .store()
        .reconcile_hold()
        .await
        .unwrap()
        .expect("nobody holds it yet");

    let out = reconcile(&server, &["--json"]).await;
    let (busy, code) = report(&out);
    assert_eq!(code, Some(1), "{busy}");
    assert_eq!(busy["busy"], true, "{busy}");
    let error = busy["errors"][0].as_str().unwrap_or("");
    assert!(
        error.contains("another reconcile run holds this store"),
        "{busy}"
    );
    assert!(fake.seen().is_empty(), "the gateway was asked nothing");
    let runs = other.store().reconcile_runs().await.unwrap();
    assert_eq!(
        runs,
        [],
        "a run that did nothing is not kept as the last run"
    );

    hold.release().await;
    let out = reconcile(&server, &["--json"]).await;
    let (done, code) = report(&out);
    assert_eq!(code, Some(0), "{done}");
    assert_eq!(
        (done["busy"].clone(), done["recovered"].clone()),
        (json!(false), json!(["hook_gone"]))
    );
    let kept = other.reconcile_run("pagarme-v5").await;
    assert_eq!(
        kept["recovered"],
        json!(["hook_gone"]),
        "the run that ran is kept: {kept}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_asks_for_nothing_and_exits_1_when_something_is_missing() {
    a_dry_run(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_dry_run_asks_for_nothing_and_exits_1_when_something_is_missing() {
    a_dry_run(Engine::Postgres).await;
}

async fn a_dry_run(engine: Engine) {
    let ours = "https://hooks.shop.example/webhooks/pagarme-v5";
    let hooks = vec![hook("hook_gone", "failed", ours)];
    let Some((server, fake)) = start_on(engine, hooks, "").await else {
        return;
    };
    let out = reconcile(
        &server,
        &["--dry-run", "--since", "12h", "--endpoint", "pagarme-v5"],
    )
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("last 12h")
            && text.contains("1 never stored by portaria (hook_gone); dry run"),
        "{text}"
    );
    assert!(fake.retries().is_empty());
    assert!(
        Reader::of(&server)
            .await
            .with_key("hook_gone")
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_waited_out_and_errors_said_in_plain_words() {
    rate_limits(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_rate_limits_are_waited_out_and_errors_said_in_plain_words() {
    rate_limits(Engine::Postgres).await;
}

async fn rate_limits(engine: Engine) {
    let ours = "https://hooks.shop.example/webhooks/pagarme-v5";
    let hooks = vec![hook("hook_late", "failed", ours)];
    let Some((server, fake)) = start_on(engine, hooks, "").await else {
        return;
    };
    let reader = Reader::of(&server).await;
    // A 429 with Retry-After, then a 503: waited out, and the run goes on.
    *fake.script.lock().unwrap() = vec![(429, Some("1")), (503, None)];
    let out = reconcile(&server, &["--json"]).await;
    let (report, code) = report(&out);
    assert_eq!(
        (code, &report["recovered"]),
        (Some(0), &json!(["hook_late"])),
        "{report}"
    );
    assert_eq!(fake.seen().iter().filter(|s| s.method == "GET").count(), 3);
    reader.until_stored_once("hook_late", WAIT).await;

    for (script, says) in [
        (vec![(401, None)], "the API key was refused (HTTP 401)"),
        (vec![(403, None)], "the API key may not do this (HTTP 403)"),
        (vec![(503, None); 3], "the API failed (HTTP 503) 3 times"),
        (
            vec![(429, Some("3600"))],
            "rate limited (HTTP 429) and asked to wait 3600s",
        ),
    ] {
        *fake.script.lock().unwrap() = script;
        let out = reconcile(&server, &[]).await;
        assert_no_key(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.contains(&format!("error: {says}")), "{says}: {text}");
    }
}

/// A Stripe event as `GET /v1/events` lists it (docs.stripe.com/api/events/list).
fn stripe_event(n: usize) -> Value {
    json!({"id": format!("evt_{n:04}"), "object": "event", "type": "payment_intent.succeeded",
        "created": now_secs() - 60, "api_version": "2019-02-19", "livemode": false,
        "data": {"object": {"id": format!("pi_{n}"), "object": "payment_intent"}}})
}

/// Stripe's events, newest first, `limit` a page from after `starting_after`, while
/// `has_more`; HTTP Basic with the key as the user, as Stripe takes it.
async fn fake_stripe(tls: Arc<rustls::ServerConfig>, events: Vec<Value>) -> HttpsServer {
    let basic = format!("Basic {}", STANDARD.encode(format!("{API_KEY}:")));
    HttpsServer::start(tls, move |seen: &Seen| {
        if seen
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            != Some(basic.as_str())
        {
            return answer(
                401,
                json!({"error": {"type": "invalid_request_error"}}),
                None,
            );
        }
        if seen.method != "GET" || !seen.target.starts_with("/v1/events?") {
            return answer(
                404,
                json!({"error": {"type": "invalid_request_error"}}),
                None,
            );
        }
        let limit: usize = query(&seen.target, "limit")
            .unwrap_or("10")
            .parse()
            .unwrap();
        let from = match query(&seen.target, "starting_after") {
            Some(id) => events.iter().position(|e| e["id"] == id).unwrap() + 1,
            None => 0,
        };
        let data: Vec<Value> = events.iter().skip(from).take(limit).cloned().collect();
        let has_more = from + data.len() < events.len();
        answer(
            200,
            json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": data}),
            None,
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_events_portaria_never_stored_are_stored_from_the_api_as_reconciled() {
    stripe_events_stored_from_the_api(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_stripe_events_portaria_never_stored_are_stored_from_the_api_as_reconciled() {
    stripe_events_stored_from_the_api(Engine::Postgres).await;
}

async fn stripe_events_stored_from_the_api(engine: Engine) {
    let dir = tempfile::tempdir().unwrap();
    let Some((config, db)) = engine.config(dir.path()).await else {
        return;
    };
    let ca = ca("fake Stripe CA");
    let ca_file = write_ca(&ca, dir.path(), "api-ca.pem");
    // 101 events whose delivery has not succeeded (for some endpoint of the account):
    // portaria has all but the last, which is on the second page.
    let events: Vec<Value> = (0..101).map(stripe_event).collect();
    let fake = fake_stripe(server_tls(&ca), events.clone()).await;
    let target = Target::start(vec![200]).await;
    std::fs::write(dir.path().join("stripe.key"), format!("{API_KEY}\n")).unwrap();
    let keys = format!(
        "secret = \"{STRIPE_SECRET}\"\nforward = {{ url = \"http://{}/in\", timeout_secs = 2 }}",
        target.addr
    );
    let text = config
        .endpoint("/webhooks/stripe", "stripe", &keys)
        .then(&format!(
            "[endpoint.reconcile]\napi_key_file = \"stripe.key\"\napi_base = \"https://localhost:{}\"\n\
             ca_file = \"{}\"\n",
            fake.addr.port(),
            ca_file.display()
        ))
        .text();
    let server = TestServer::start_with(dir, db, &text).await;
    let reader = Reader::of(&server).await;
    for event in &events[..100] {
        let body = event.to_string().into_bytes();
        let reply = post(
            server.addr,
            "/webhooks/stripe",
            &stripe_headers(now_secs(), &body),
            &body,
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    eventually(WAIT, "the 100 webhooks forwarded", || target.count() == 100).await;

    // A dry run names it and stores nothing.
    let out = reconcile(&server, &["--json", "--dry-run"]).await;
    let (dry, code) = report(&out);
    assert_eq!(code, Some(1), "missing and not got back: {dry}");
    assert_eq!(dry["missing"], json!(["evt_0100"]));
    assert_eq!(dry["recovered"], json!([]));
    assert_eq!(reader.with_key("evt_0100").await.len(), 0);

    let out = reconcile(&server, &["--json"]).await;
    assert_no_key(&out);
    let (report, code) = report(&out);
    assert_eq!(code, Some(0), "stored from the API: {report}");
    assert_eq!(report["checked"], 101, "{report}");
    assert_eq!(report["missing"], json!(["evt_0100"]));
    assert_eq!(report["recovered"], json!(["evt_0100"]));
    assert_eq!(report["recovered_by"], "stored from the API", "{report}");
    assert!(report["note"].is_null(), "{report}");
    let lists: Vec<String> = fake.targets();
    assert_eq!(lists.len(), 4, "two pages per run: {lists:?}");
    assert_eq!(query(&lists[2], "delivery_success"), Some("false"));
    let since: i64 = query(&lists[2], "created%5Bgte%5D")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (now_secs() - 3 * 86_400 - since).abs() < 60,
        "the 3-day window: {since}"
    );
    assert_eq!(query(&lists[3], "starting_after"), Some("evt_0099"));

    // Stored once, marked, with the API's copy of the event as its body and its type.
    let stored = reader.with_key("evt_0100").await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let marked = stored.iter().filter(|e| {
        e.origin == Origin::Reconcile
            && e.event_type.as_deref() == Some("payment_intent.succeeded")
            && e.object_id.as_deref() == Some("pi_100")
    });
    assert_eq!(marked.count(), 1, "{stored:?}");
    let events_kept = reader.events().await;
    assert_eq!(events_kept.len(), 101);
    assert_eq!(
        events_kept
            .iter()
            .filter(|e| e.origin != Origin::Webhook)
            .count(),
        1,
        "webhooks keep no origin"
    );
    // The running server's worker sees the command's commit and forwards it, saying where
    // it came from.
    eventually(WAIT, "the stored event forwarded", || target.count() == 101).await;
    let seen = target.seen.lock().unwrap().clone();
    let origins: Vec<&str> = seen
        .iter()
        .map(|r| r.headers["portaria-origin"].to_str().unwrap())
        .collect();
    assert_eq!(origins.iter().filter(|o| **o == "webhook").count(), 100);
    let reconciled = seen
        .iter()
        .find(|r| r.headers["portaria-origin"] == "reconcile")
        .unwrap();
    let body: Value = serde_json::from_slice(&reconciled.body).unwrap();
    assert_eq!(body, events[100]);
    assert_eq!(reconciled.headers["idempotency-key"], "evt_0100");
    assert_eq!(reconciled.headers["portaria-event-type-signed"], "1");

    // The status page shows the run, as the command kept it in the store.
    let page = get(server.admin.unwrap(), "/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("101 checked, 1 never received, 1 got back"),
        "{}",
        page.body
    );

    // `events list` and `events show` say so.
    let list = ok_stdout(&run_cli(&["events", "list"], &server.config_path()));
    let marked: Vec<&str> = list
        .lines()
        .filter(|l| l.ends_with("(reconcile)"))
        .collect();
    assert_eq!(marked.len(), 1, "{list}");
    assert!(marked[0].contains("evt_0100"), "{list}");
    let id = marked[0].split_whitespace().next().unwrap();
    let show = ok_stdout(&run_cli(&["events", "show", id], &server.config_path()));
    assert!(show.contains("origin:      reconcile"), "{show}");
    let json_line = ok_stdout(&run_cli(
        &["events", "show", id, "--json"],
        &server.config_path(),
    ));
    assert_eq!(
        serde_json::from_str::<Value>(&json_line).unwrap()["origin"],
        "reconcile"
    );

    // The late real delivery is a duplicate; the next run has nothing missing.
    let body = events[100].to_string().into_bytes();
    let reply = post(
        server.addr,
        "/webhooks/stripe",
        &stripe_headers(now_secs(), &body),
        &body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reader.with_key("evt_0100").await.len(), 1);
    let out = reconcile(&server, &["--endpoint", "stripe"]).await;
    let text = ok_stdout(&out);
    assert!(
        text.contains("101 checked, 101 failed at the gateway, 0 never stored"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_the_reconcile_on_its_every_and_stops_cleanly() {
    serve_runs_the_schedule(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_serve_runs_the_reconcile_on_its_every_and_stops_cleanly() {
    serve_runs_the_schedule(Engine::Postgres).await;
}

async fn serve_runs_the_schedule(engine: Engine) {
    let ours = "https://hooks.shop.example/webhooks/pagarme-v5";
    let hooks = vec![hook("hook_lost", "failed", ours)];
    let Some((server, fake)) = start_on(engine, hooks, "every = \"200ms\"").await else {
        return;
    };
    let reader = Reader::of(&server).await;
    // No command: the server's own schedule asks Pagar.me, whose resend comes through intake.
    reader.until_stored_once("hook_lost", WAIT).await;
    let lists = || fake.seen().iter().filter(|s| s.method == "GET").count();
    eventually(WAIT, "more runs", || lists() >= 3).await;
    // Later runs find it stored and ask for nothing more: it stays stored once.
    assert_eq!(fake.retries(), ["/core/v5/hooks/hook_lost/retry"]);
    assert_eq!(reader.with_key("hook_lost").await.len(), 1);
    drop(reader);
    tokio::time::timeout(WAIT, server.stop())
        .await
        .expect("serve stops with its schedule");
}
