//! The client address behind a tunnel: `[server] real_ip_header` believed only from a trusted
//! proxy (loopback by default), the address it names in the log, and an endpoint's `allow_ips`
//! judged on it: 403 before the body is read, nothing stored, counted as `forbidden`. Every
//! request here really comes from 127.0.0.1, as through a tunnel on the same machine.

use std::net::SocketAddr;
use std::time::Duration;

use prometheus_parse::{Scrape, Value};

use crate::support::*;

const CF: &str = "cf-connecting-ip";
const ALLOWED: &str = "203.0.113.7";
const OUTSIDE: &str = "198.51.100.1";

/// The pagarme endpoint's signed request, coming from `client` by the header `name`.
fn pagarme_from(name: &str, client: &str, body: &[u8]) -> Vec<(String, String)> {
    let mut headers = pagarme_headers(body);
    headers.push(h(name, client));
    headers
}

/// `portaria_requests_total` of one endpoint and outcome, read as Prometheus does; the whole
/// scrape too, to look at its labels.
async fn requests(admin: SocketAddr, endpoint: &str, outcome: &str) -> (f64, Scrape) {
    let reply = send(admin, "GET", "/metrics", &[], b"").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let scrape = Scrape::parse(reply.body.lines().map(|l| Ok(l.to_string()))).unwrap();
    let value = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "portaria_requests_total"
                && s.labels.get("endpoint") == Some(endpoint)
                && s.labels.get("outcome") == Some(outcome)
        })
        .map(|s| match s.value {
            Value::Counter(v) | Value::Untyped(v) => v,
            ref other => panic!("not a counter: {other:?}"),
        })
        .unwrap_or_else(|| panic!("no series for {endpoint} {outcome}"));
    (value, scrape)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tunnel_s_header_names_the_client_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portaria.toml");
    let text = base_config(
        &dir.path().join("portaria.db"),
        "real_ip_header = \"CF-Connecting-IP\"",
        "",
    );
    std::fs::write(&config, text).unwrap();
    let mut serve = portaria();
    serve
        .env("RUST_LOG", "info,portaria::client_ip=debug")
        .args(["serve", "--config"])
        .arg(&config);
    let server = Process::spawn_command(serve).await;

    let body = payment_body(1);
    let reply = post(
        server.addr,
        "/webhooks/pagarme",
        &pagarme_from(CF, ALLOWED, &body),
        &body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // Without the header, the client is the peer: the tunnel itself, or a local test.
    let body = payment_body(2);
    assert_eq!(post_pagarme(server.addr, &body).await.status, 200);
    // A value that is not an address: the peer, and a debug line that does not repeat it.
    let body = payment_body(3);
    let garbled = pagarme_from(CF, "203.0.113.7; drop table", &body);
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &garbled, &body)
            .await
            .status,
        200
    );

    let log = server.log.clone();
    eventually(Duration::from_secs(10), "the three webhook lines", || {
        log.lock().unwrap().matches("outcome=\"accepted\"").count() == 3
    })
    .await;
    let text = log.lock().unwrap().clone();
    let line = |n: usize| {
        text.lines()
            .filter(|l| l.contains("outcome=\"accepted\""))
            .nth(n)
            .unwrap()
            .to_string()
    };
    assert!(line(0).contains("client=203.0.113.7 "), "{text}");
    assert!(line(1).contains("client=127.0.0.1 "), "{text}");
    assert!(line(2).contains("client=127.0.0.1 "), "{text}");
    let debug = text
        .lines()
        .find(|l| l.contains("client address header not understood"))
        .unwrap_or_else(|| panic!("no debug line: {text}"));
    assert!(debug.contains("header=\"cf-connecting-ip\""), "{debug}");
    assert!(
        !text.contains("drop table"),
        "the value is never logged: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_ips_admits_its_range_and_refuses_the_rest_before_the_body() {
    let server = TestServer::start(
        "real_ip_header = \"CF-Connecting-IP\"",
        "allow_ips = [\"203.0.113.0/24\"]",
    )
    .await;
    let admin = server.admin.unwrap();
    let (before, _) = requests(admin, "pagarme", "forbidden").await;
    assert_eq!(before, 0.0, "the forbidden series exists from the start");

    let body = payment_body(1);
    let reply = post(
        server.addr,
        "/webhooks/pagarme",
        &pagarme_from(CF, ALLOWED, &body),
        &body,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.count_rows(), 1);

    // From outside the range: 403 with a JSON reason, and nothing stored.
    let body = payment_body(2);
    let reply = post(
        server.addr,
        "/webhooks/pagarme",
        &pagarme_from(CF, OUTSIDE, &body),
        &body,
    )
    .await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert_eq!(reply.headers["content-type"], "application/json");
    assert!(
        reply
            .body
            .contains("does not accept webhooks from this address"),
        "{}",
        reply.body
    );
    // Before verification (a forged signature is 403, not 401) and before the body (one past
    // max_body_bytes is 403, not 413).
    let forged = pagarme_from(CF, OUTSIDE, b"another body");
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &forged, &body)
            .await
            .status,
        403
    );
    let large = vec![b'x'; 5000];
    let reply = post(
        server.addr,
        "/webhooks/pagarme",
        &pagarme_from(CF, OUTSIDE, &large),
        &large,
    )
    .await;
    assert_eq!(reply.status, 403);
    // ...but after the method: a GET is 405 whoever sends it.
    let get = send(
        server.addr,
        "GET",
        "/webhooks/pagarme",
        &[h(CF, OUTSIDE)],
        b"",
    )
    .await;
    assert_eq!(get.status, 405);
    assert_eq!(server.count_rows(), 1, "nothing refused was stored");

    // An endpoint without allow_ips takes any address.
    let ts = now_secs();
    let relya = relya_headers(RELYA_SECRET, "d-1", ts, &body);
    let relya = [relya, vec![h(CF, OUTSIDE)]].concat();
    assert_eq!(
        post(server.addr, "/webhooks/relya", &relya, &body)
            .await
            .status,
        200
    );

    let (after, scrape) = requests(admin, "pagarme", "forbidden").await;
    assert_eq!(after, 3.0);
    assert_eq!(requests(admin, "pagarme", "accepted").await.0, 1.0);
    assert!(
        !scrape.samples.iter().any(|s| s
            .labels
            .values()
            .any(|v| v.contains("198.51") || v.contains("203.0"))),
        "an address never becomes a label"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_from_a_peer_that_is_not_a_trusted_proxy_is_ignored() {
    // The proxies trusted are elsewhere; loopback (where these requests come from) is not.
    let local = format!(
        "\n[[endpoint]]\npath = \"/webhooks/local\"\nprovider = \"github\"\nsecret = \"{GITHUB_SECRET}\"\nallow_ips = [\"127.0.0.1/32\"]\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("portaria.db");
    let text = base_config(
        &db,
        "real_ip_header = \"CF-Connecting-IP\"\ntrusted_proxies = [\"10.0.0.0/8\"]",
        "allow_ips = [\"203.0.113.0/24\"]",
    ) + &local;
    let server = TestServer::start_with(dir, db, &text).await;

    // Claiming an allowed address gets nowhere: the client is 127.0.0.1.
    let body = payment_body(1);
    let spoofed = pagarme_from(CF, ALLOWED, &body);
    let reply = post(server.addr, "/webhooks/pagarme", &spoofed, &body).await;
    assert_eq!(reply.status, 403, "{}", reply.body);
    assert_eq!(server.count_rows(), 0);
    // And claiming an outside address takes nothing away from the real one.
    let mut headers = github_headers(Some("g-1"), &body);
    headers.push(h(CF, OUTSIDE));
    let reply = post(server.addr, "/webhooks/local", &headers, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.count_rows(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_for_believes_only_what_the_proxy_appended() {
    let server = TestServer::start(
        "real_ip_header = \"X-Forwarded-For\"",
        "allow_ips = [\"203.0.113.0/24\"]",
    )
    .await;
    let xff = "x-forwarded-for";
    // The client wrote an allowed address; the proxy appended the one it saw.
    let body = payment_body(1);
    let spoofed = pagarme_from(xff, &format!("{ALLOWED}, {OUTSIDE}"), &body);
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &spoofed, &body)
            .await
            .status,
        403
    );
    let honest = pagarme_from(xff, &format!("{OUTSIDE}, {ALLOWED}"), &body);
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &honest, &body)
            .await
            .status,
        200
    );
    // A garbled list is not believed at all: the client is the peer, outside the range.
    let body = payment_body(2);
    let garbled = pagarme_from(xff, &format!("{ALLOWED}, not-an-address"), &body);
    assert_eq!(
        post(server.addr, "/webhooks/pagarme", &garbled, &body)
            .await
            .status,
        403
    );
    assert_eq!(server.count_rows(), 1);
}

#[test]
fn check_names_a_bad_address_range() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portaria.toml");
    let text = base_config(
        &dir.path().join("portaria.db"),
        "real_ip_header = \"X-Forwarded-For\"\ntrusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/33\"]",
        "allow_ips = [\"34.193.116.226/32\"]",
    );
    std::fs::write(&config, text).unwrap();
    let out = run_cli(&["check"], &config);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("server.trusted_proxies[1]: `10.0.0.0/33` is not an address range"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("is not an address range").count(),
        1,
        "{stderr}"
    );
}
