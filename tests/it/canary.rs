//! The canary through the tunnel (issue 26), with real parts: the real server in-process, a
//! TLS-terminating proxy in front of it as the tunnel (`tunnel::Tunnel`, its certificate from a
//! test CA that `canary_ca_file` names), a recording alert command, `/metrics` read by a
//! Prometheus parser, the status page's JSON and HTML. Probes every 200 ms, alerts at most
//! every second.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::tunnel::{Mode, Tunnel, ca, write_ca};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

/// Polls an async `check` until it holds, or fails the test after `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `[server]` keys for a canary through `tunnel` every 200 ms, and `[alerts]` recording into `dir`.
fn canary_config(dir: &Path, public_url: &str, ca_file: &Path) -> String {
    format!(
        "public_url = \"{public_url}\"\ncanary_every = \"200ms\"\ncanary_ca_file = \"{}\"\n\n\
         [alerts]\ncommand = [\"{}\"]\nalert_every = \"1s\"\n",
        ca_file.display(),
        alert_command(dir).display()
    )
}

/// A server behind a tunnel (forwarding to it once it listens), with the canary and alerts.
async fn behind_tunnel(dir: &Path) -> (TestServer, Tunnel) {
    let ca = ca("tunnel test CA");
    let ca_file = write_ca(&ca, dir, "tunnel-ca.pem");
    let tunnel = Tunnel::start(&ca).await;
    let server = TestServer::start(&canary_config(dir, &tunnel.url(), &ca_file), "").await;
    *tunnel.backend.lock().unwrap() = Some(server.addr);
    (server, tunnel)
}

async fn stats(admin: SocketAddr) -> Value {
    json(&get(admin, "/api/stats", &[]).await)
}

async fn metric(admin: SocketAddr, name: &str, labels: &[(&str, &str)]) -> f64 {
    find(&scrape(admin).await, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}"))
}

#[tokio::test]
async fn the_canary_goes_through_the_tunnel_and_its_loss_and_return_are_announced() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (server, mut tunnel) = behind_tunnel(w).await;
    let admin = server.admin.unwrap();

    until(WAIT, "a probe back through the tunnel", || async {
        stats(admin).await["public_path"]["reachable"] == true
    })
    .await;
    let s = stats(admin).await;
    assert_eq!(s["public_path"]["url"], tunnel.url());
    assert!(s["public_path"]["round_trip_ms"].is_u64(), "{s}");
    assert!(s["public_path"]["failing"].is_null(), "{s}");
    assert_eq!(s["alert"]["red"], false, "{s}");
    assert_eq!(metric(admin, "portaria_canary_up", &[]).await, 1.0);
    assert!(metric(admin, "portaria_canary_probes_total", &[("outcome", "ok")]).await >= 1.0);
    assert!(metric(admin, "portaria_canary_last_success_timestamp_seconds", &[]).await > 1.7e9);
    assert!(metric(admin, "portaria_canary_round_trip_seconds", &[]).await > 0.0);
    // A probe is no endpoint's event, and no request to an unknown path.
    assert_eq!(server.count_rows(), 0);
    let scraped = scrape(admin).await;
    let not_found = [("endpoint", "-"), ("outcome", "not_found")];
    assert_eq!(
        find(&scraped, "portaria_requests_total", &not_found),
        Some(0.0)
    );
    assert!(alerts(w).is_empty(), "nothing to say while it works");

    // The tunnel goes down: connections to the public URL are refused.
    tunnel.stop();
    until(WAIT, "the unreachable alert", || async {
        !of_kind(w, "unreachable").is_empty()
    })
    .await;
    let alert = &of_kind(w, "unreachable")[0];
    assert_eq!(alert["endpoint"], tunnel.url(), "{alert}");
    assert_eq!(alert["cause"], "connect", "{alert}");
    let message = alert["message"].as_str().unwrap();
    for said in [
        "does not reach portaria",
        "Last cause (connect): cannot connect to localhost",
        "Endpoint stripe: Stripe stops retrying about 3d after the first failure: in about 2d 23h",
        "Endpoint github: GitHub does not retry",
        "Endpoint pagarme: How long pagarme keeps retrying is not documented.",
    ] {
        assert!(message.contains(said), "{said:?} not in {message}");
    }
    let s = stats(admin).await;
    assert_eq!(
        (&s["alert"]["red"], &s["alert"]["unreachable"]),
        (&Value::Bool(true), &Value::Bool(true)),
        "{s}"
    );
    let failing = &s["public_path"]["failing"];
    assert_eq!(failing["cause"], "connect", "{s}");
    assert_eq!(failing["gateways"].as_array().unwrap().len(), 4, "{s}");
    assert_eq!(failing["gateways"][3]["endpoint"], "stripe");
    let page = get(admin, "/", &[]).await;
    assert!(
        page.body.contains("does not reach portaria"),
        "{}",
        page.body
    );
    assert!(page.body.contains("Stripe stops retrying"), "{}", page.body);
    assert_eq!(metric(admin, "portaria_canary_up", &[]).await, 0.0);
    assert!(
        metric(
            admin,
            "portaria_canary_probes_total",
            &[("outcome", "connect")]
        )
        .await
            >= 1.0
    );

    // It comes back: the recovery is announced, and the banner is green again.
    tunnel.restart().await;
    until(WAIT, "the reachable alert", || async {
        !of_kind(w, "reachable").is_empty()
    })
    .await;
    let back = &of_kind(w, "reachable")[0];
    assert_eq!(back["endpoint"], tunnel.url());
    assert!(
        back["message"]
            .as_str()
            .unwrap()
            .contains("reaches portaria again"),
        "{back}"
    );
    let s = stats(admin).await;
    assert_eq!(s["alert"]["red"], false, "{s}");
    assert_eq!(s["public_path"]["reachable"], true, "{s}");
    // Nothing more: the outage's pending summary went with it.
    let sent = alerts(w).len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(alerts(w).len(), sent, "{:?}", alerts(w));
    server.stop().await;
}

#[tokio::test]
async fn a_tunnel_answering_its_own_502_page_is_not_portaria() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (server, tunnel) = behind_tunnel(w).await;
    tunnel.set_mode(Mode::BadGateway);
    until(WAIT, "the unreachable alert", || async {
        !of_kind(w, "unreachable").is_empty()
    })
    .await;
    let alert = &of_kind(w, "unreachable")[0];
    assert_eq!(alert["cause"], "not_portaria", "{alert}");
    let message = alert["message"].as_str().unwrap();
    assert!(
        message.contains("HTTP 502 without portaria's proof"),
        "{message}"
    );
    assert!(message.contains("502 Bad Gateway"), "{message}");
    let admin = server.admin.unwrap();
    assert!(
        metric(
            admin,
            "portaria_canary_probes_total",
            &[("outcome", "not_portaria")]
        )
        .await
            >= 1.0
    );
    assert_eq!(
        metric(admin, "portaria_canary_probes_total", &[("outcome", "ok")]).await,
        0.0
    );
    server.stop().await;
}

#[tokio::test]
async fn another_portaria_behind_the_public_url_is_not_this_one() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (server, tunnel) = behind_tunnel(w).await;
    // The tunnel leads to another instance, with a canary (and so a key) of its own.
    let other_dir = tempfile::tempdir().unwrap();
    let other = TestServer::start(
        &format!("public_url = \"{}\"\ncanary_every = \"1h\"\n", tunnel.url()),
        "",
    )
    .await;
    *tunnel.backend.lock().unwrap() = Some(other.addr);
    until(WAIT, "the unreachable alert", || async {
        !of_kind(w, "unreachable").is_empty()
    })
    .await;
    let alert = &of_kind(w, "unreachable")[0];
    assert_eq!(alert["cause"], "not_portaria", "{alert}");
    assert!(
        alert["message"]
            .as_str()
            .unwrap()
            .contains("another portaria answers at public_url"),
        "{alert}"
    );
    assert_eq!(other.count_rows(), 0, "the other stored nothing");
    drop(other_dir);
    other.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_forged_probe_is_refused_like_any_forgery_and_stores_nothing() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (server, _tunnel) = behind_tunnel(w).await;
    let path = "/webhooks/_canary";
    let now = now_secs() * 1000;
    for headers in [
        vec![],
        vec![h(
            "portaria-canary",
            format!(
                "t={now},n=00112233445566778899aabbccddeeff,v1={}",
                "ab".repeat(32)
            ),
        )],
        vec![h("portaria-canary", "t=1,n=2,v1=zz")],
    ] {
        let reply = post(server.addr, path, &headers, b"{}").await;
        assert_eq!(reply.status, 401, "{headers:?}: {}", reply.body);
        assert_eq!(reply.body, r#"{"error":"invalid signature"}"#);
        assert!(
            reply.headers.get("portaria-canary").is_none(),
            "no proof for a forgery"
        );
    }
    let reply = send(server.addr, "GET", path, &[], b"").await;
    assert_eq!(reply.status, 405);
    assert_eq!(server.count_rows(), 0);
    let admin = server.admin.unwrap();
    let scraped = scrape(admin).await;
    for endpoint in ["-", "pagarme", "relya", "github", "stripe"] {
        let bad = [("endpoint", endpoint), ("outcome", "bad_signature")];
        assert_ne!(
            find(&scraped, "portaria_requests_total", &bad).map(|v| v > 0.0),
            Some(true),
            "{endpoint}"
        );
    }
    server.stop().await;

    // Without a canary the path is no endpoint's either: 404 like any unknown path.
    let plain = TestServer::start("", "").await;
    assert_eq!(post(plain.addr, path, &[], b"{}").await.status, 404);
    plain.stop().await;
}
