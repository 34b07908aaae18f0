//! The status page on the admin listener, against the real server: the auth rule (an open
//! page only on loopback, said so on the page; a non-loopback admin listener without a token
//! refused at start; login, wrong token, bearer), CSRF (a POST without the form token or from
//! another origin is refused and changes nothing; a GET never replays), escaping of
//! attacker-controlled bodies and headers, the JSON API's shapes, and replay.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);
const TOKEN: &str = "correct-horse-battery-staple";

/// The status of `GET /api/events` sent with exactly this `Host`.
async fn raw_status(admin: SocketAddr, host: &str) -> u16 {
    raw_get(admin, "/api/events", host, "").await
}

/// The status of `GET path` sent with exactly this `Host` and `extra` header lines.
async fn raw_get(admin: SocketAddr, path: &str, host: &str, extra: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer.split(' ').nth(1).unwrap().parse().unwrap()
}

/// The `cookie` header that sends back what `reply` set (a login's session, or the open
/// page's visitor cookie).
fn cookie_of(reply: &Reply) -> (String, String) {
    let set = reply
        .headers
        .get("set-cookie")
        .unwrap_or_else(|| panic!("no cookie set: {:?}", reply.headers))
        .to_str()
        .unwrap();
    h("cookie", set.split(';').next().unwrap())
}

/// The CSRF token of a page's forms.
fn csrf(html: &str) -> String {
    html.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a form with a csrf field")
        .to_string()
}

#[tokio::test]
async fn without_a_token_the_page_is_open_on_loopback_only_and_says_so() {
    let server = TestServer::start("", "").await;
    let admin = server.admin.unwrap();
    let page = get(admin, "/", &[]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains("asks for no password because it listens on loopback only")
    );
    assert!(
        page.body.contains("Nothing needs you"),
        "no red banner on an empty database"
    );
    for path in ["/pagarme", "/relya", "/github", "/stripe"] {
        let name = &path[1..];
        assert!(
            page.body.contains(&format!("Endpoint {name}")),
            "{name} listed"
        );
    }
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let css = get(admin, "/style.css", &[]).await;
    assert_eq!(css.status, 200);
    assert!(
        css.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
    // A web page that points its own name at 127.0.0.1 (DNS rebinding) gets nothing.
    assert_eq!(raw_status(admin, "evil.example:9464").await, 403);
    assert_eq!(raw_status(admin, &admin.to_string()).await, 200);
    let two_hosts = get(admin, "/api/events", &[h("host", "evil.example:9464")]).await;
    assert_eq!(two_hosts.status, 403, "{}", two_hosts.body);
    // The admin endpoints are untouched.
    assert_eq!(get(admin, "/healthz", &[]).await.status, 200);
    assert_eq!(get(admin, "/nope", &[]).await.status, 404);
    server.stop().await;
}

#[tokio::test]
async fn a_non_loopback_admin_listener_without_a_token_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("portaria.toml");
    let db = dir.path().join("p.db");
    std::fs::write(
        &config,
        base_config(&db, "admin_listen = \"0.0.0.0:0\"", ""),
    )
    .unwrap();
    let out = portaria()
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not loopback, and no status page token is set"),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing opened before the refusal");

    // With a token it starts, and the page asks for it.
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let text = base_config(
        &db,
        &format!(
            "admin_listen = \"0.0.0.0:0\"\n\n[status]\ntoken_file = \"{}\"",
            token.display()
        ),
        "",
    );
    std::fs::write(&config, text).unwrap();
    let process = Process::spawn(&config).await;
    let port = process.admin.expect("an admin listener").port();
    let admin: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let page = get(admin, "/", &[]).await;
    assert_eq!(page.status, 303);
    assert_eq!(page.headers["location"], "/login");
    // Off loopback, whatever name the network gives it is answered: Prometheus on another
    // machine scrapes `pi.lan:9464`; the page still needs its token.
    for path in ["/metrics", "/readyz", "/healthz"] {
        assert_eq!(raw_get(admin, path, "pi.lan:9464", "").await, 200, "{path}");
    }
    assert_eq!(raw_get(admin, "/api/stats", "pi.lan:9464", "").await, 401);
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    assert_eq!(
        raw_get(admin, "/api/stats", "pi.lan:9464", &bearer).await,
        200
    );
    assert!(
        !process.log.lock().unwrap().contains(TOKEN),
        "the token never reaches the log"
    );
}

#[tokio::test]
async fn on_a_loopback_listener_every_path_refuses_a_foreign_host() {
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let with_token = format!("\n[status]\ntoken_file = \"{}\"", token.display());
    for extra in ["", with_token.as_str()] {
        let server = TestServer::start(extra, "").await;
        let admin = server.admin.unwrap();
        let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
        // A page that points evil.example at 127.0.0.1 (DNS rebinding) reads nothing, not
        // even the metrics, with or without a token.
        for path in ["/metrics", "/readyz", "/healthz", "/api/stats", "/"] {
            assert_eq!(
                raw_get(admin, path, "evil.example:9464", &bearer).await,
                403,
                "{path} {extra}"
            );
            assert_eq!(
                raw_get(admin, path, "localhost:9464", &bearer).await,
                200,
                "{path} {extra}"
            );
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn each_login_is_a_session_of_its_own_and_logging_out_ends_only_that_one() {
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let extra = format!("\n[status]\ntoken_file = \"{}\"", token.display());
    let server = TestServer::start(&extra, "").await;
    let admin = server.admin.unwrap();
    let body = format!("token={TOKEN}");
    let a = cookie_of(&form(admin, "/login", &[], &body).await);
    let b = cookie_of(&form(admin, "/login", &[], &body).await);
    assert_ne!(a, b, "a random session per login");
    let (page_a, page_b) = (
        get(admin, "/", std::slice::from_ref(&a)).await,
        get(admin, "/", std::slice::from_ref(&b)).await,
    );
    assert_eq!((page_a.status, page_b.status), (200, 200));
    let (csrf_a, csrf_b) = (csrf(&page_a.body), csrf(&page_b.body));
    assert_ne!(csrf_a, csrf_b, "a form token per session");

    let crossed = form(
        admin,
        "/logout",
        std::slice::from_ref(&b),
        &format!("csrf={csrf_a}"),
    )
    .await;
    assert_eq!(crossed.status, 403, "a's form token with b's session");
    let out = form(
        admin,
        "/logout",
        std::slice::from_ref(&a),
        &format!("csrf={csrf_a}"),
    )
    .await;
    assert_eq!(
        (out.status, out.headers["location"].to_str().unwrap()),
        (303, "/login")
    );
    assert!(
        out.headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    // The session is over, even for a client that keeps sending its cookie.
    let after = get(admin, "/", std::slice::from_ref(&a)).await;
    assert_eq!(
        (after.status, after.headers["location"].to_str().unwrap()),
        (303, "/login")
    );
    assert_eq!(get(admin, "/api/stats", &[a]).await.status, 401);
    assert_eq!(
        get(admin, "/", &[b]).await.status,
        200,
        "the other one lives"
    );

    // A script's bearer token is no session: its page carries no form token.
    let bearer = h("authorization", format!("Bearer {TOKEN}"));
    let by_bearer = get(admin, "/", &[bearer]).await;
    assert_eq!(by_bearer.status, 200);
    assert!(
        !by_bearer.body.contains("name=\"csrf\"") && !by_bearer.body.contains("Log out"),
        "{}",
        by_bearer.body
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_paced_and_logged_once_then_summed_up() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let config = dir.path().join("portaria.toml");
    let text = base_config(
        &dir.path().join("p.db"),
        &format!("\n[status]\ntoken_file = \"{}\"", token.display()),
        "",
    );
    std::fs::write(&config, text).unwrap();
    let mut process = Process::spawn(&config).await;
    let admin = process.admin.unwrap();
    let session = cookie_of(&form(admin, "/login", &[], &format!("token={TOKEN}")).await);

    let wrong = h("authorization", "Bearer guess-guess-guess");
    for _ in 0..3 {
        assert_eq!(
            get(admin, "/api/stats", std::slice::from_ref(&wrong))
                .await
                .status,
            401
        );
    }
    let login = form(admin, "/login", &[], "token=another-guess").await;
    assert_eq!(login.status, 401);
    // The next token check, even a right one, waits its turn; a session never queues.
    let after_wrong = std::time::Instant::now();
    let right = tokio::spawn(async move {
        let bearer = h("authorization", format!("Bearer {TOKEN}"));
        get(admin, "/api/stats", &[bearer]).await
    });
    assert_eq!(get(admin, "/api/stats", &[session]).await.status, 200);
    assert!(
        !right.is_finished(),
        "the right token still waits its turn when the session (which never queues) is answered"
    );
    assert_eq!(right.await.unwrap().status, 200);
    assert!(
        after_wrong.elapsed() >= Duration::from_millis(900),
        "a right token after a wrong one waits about a second: {:?}",
        after_wrong.elapsed()
    );

    let log = process.log.clone();
    let count = move |what: &str| log.lock().unwrap().matches(what).count();
    assert_eq!(count("a wrong admin token"), 1, "the first, at once");
    assert_eq!(
        count("more wrong admin tokens"),
        0,
        "the rest wait for the minute"
    );
    // The rest in one line, at the latest when portaria stops.
    process.signal(libc::SIGTERM);
    assert!(process.wait(WAIT).await.success());
    eventually(WAIT, "the summary line", || {
        count("3 more wrong admin tokens") == 1
    })
    .await;
    let log = process.log.lock().unwrap().clone();
    let summary = log
        .lines()
        .find(|l| l.contains("more wrong admin tokens"))
        .unwrap();
    assert!(
        summary.contains("logins=1") && summary.contains("bearer=2"),
        "{summary}"
    );
    assert!(
        !log.contains(TOKEN) && !log.contains("guess-guess"),
        "{log}"
    );
}

#[tokio::test]
async fn with_a_token_the_page_needs_a_login_and_a_wrong_token_is_refused() {
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    let extra = format!("\n[status]\ntoken_file = \"{}\"", token.display());
    let server = TestServer::start(&extra, "").await;
    let admin = server.admin.unwrap();

    let page = get(admin, "/", &[]).await;
    assert_eq!(
        (page.status, page.headers["location"].to_str().unwrap()),
        (303, "/login")
    );
    let api = get(admin, "/api/stats", &[]).await;
    assert_eq!(api.status, 401);
    assert!(json(&api)["error"].as_str().unwrap().contains("log in"));
    let replay = form(admin, "/events/1/replay", &[], "csrf=x").await;
    assert_eq!(replay.status, 401, "a POST without a session");

    let login = get(admin, "/login", &[]).await;
    assert_eq!(login.status, 200);
    assert!(login.body.contains("type=\"password\""));
    assert!(!login.body.contains("listens on loopback only"));
    assert!(
        !login.body.contains("name=\"csrf\"") && login.headers.get("set-cookie").is_none(),
        "no session, so no form token: {}",
        login.body
    );

    let wrong = form(admin, "/login", &[], "token=guess-guess-guess").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.headers.get("set-cookie").is_none());
    assert!(wrong.body.contains("not the admin token"));
    let elsewhere = form(
        admin,
        "/login",
        &[h("origin", "http://evil.example")],
        &format!("token={TOKEN}"),
    )
    .await;
    assert_eq!(elsewhere.status, 403, "a login from another site");
    assert!(elsewhere.headers.get("set-cookie").is_none());

    let ok = form(admin, "/login", &[], &format!("token={TOKEN}")).await;
    assert_eq!(
        (ok.status, ok.headers["location"].to_str().unwrap()),
        (303, "/")
    );
    let cookie = ok.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(TOKEN), "the cookie is not the token");
    let session = cookie.split(';').next().unwrap().to_string();

    let page = get(admin, "/", &[h("cookie", &session)]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Log out"));
    assert!(!page.body.contains(TOKEN), "the token is never shown");
    let forged = get(admin, "/", &[h("cookie", "portaria_status=00ff")]).await;
    assert_eq!(forged.status, 303);
    let bearer = get(
        admin,
        "/api/stats",
        &[h("authorization", format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(bearer.status, 200);
    let bad_bearer = get(
        admin,
        "/api/stats",
        &[h("authorization", "Bearer nope-nope-nope")],
    )
    .await;
    assert_eq!(bad_bearer.status, 401);
    server.stop().await;
}

fn status_and_attempts(server: &TestServer, id: i64) -> (String, i64) {
    server
        .db()
        .query_row(
            "SELECT status, attempts FROM deliveries WHERE event_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

#[tokio::test]
async fn a_post_without_the_form_token_or_from_another_origin_changes_nothing_and_replay_works() {
    // Two failures make the event dead; the replay's attempt is the third, and succeeds.
    let target = Target::start(vec![500, 500, 200]).await;
    let server = TestServer::start("", &forward_to(target.addr)).await;
    let admin = server.admin.unwrap();
    let id = a_dead_event(&server).await;
    assert_eq!(status_and_attempts(&server, id), ("dead".into(), 2));

    let page = get(admin, &format!("/events/{id}"), &[]).await;
    assert_eq!(page.status, 200);
    let visitor = cookie_of(&page);
    assert!(page.body.contains("Dead: "), "{}", page.body);
    assert!(
        page.body.contains("500"),
        "the error is shown: {}",
        page.body
    );
    let csrf = csrf(&page.body);
    let overview = get(admin, "/", &[]).await;
    assert!(
        overview.body.contains("class=\"banner alert\""),
        "the red banner"
    );
    assert!(overview.body.contains("1 dead event"));

    let path = format!("/events/{id}/replay");
    let origin = format!("http://{admin}");
    // Another visitor's cookie: the open page gives every visitor one, and binds its forms'
    // token to it.
    let stranger = cookie_of(&get(admin, "/", &[]).await);
    for (headers, body, why) in [
        (vec![visitor.clone()], String::new(), "no form token"),
        (
            vec![visitor.clone()],
            "csrf=0000".to_string(),
            "a wrong form token",
        ),
        (
            vec![],
            format!("csrf={csrf}"),
            "the form token without its cookie",
        ),
        (
            vec![stranger],
            format!("csrf={csrf}"),
            "the form token with another visitor's cookie",
        ),
        (
            vec![visitor.clone(), h("origin", "http://evil.example")],
            format!("csrf={csrf}"),
            "another origin",
        ),
        (
            vec![visitor.clone(), h("origin", "null")],
            format!("csrf={csrf}"),
            "an opaque origin",
        ),
        (
            vec![visitor.clone(), h("sec-fetch-site", "cross-site")],
            format!("csrf={csrf}"),
            "another site",
        ),
    ] {
        let refused = form(admin, &path, &headers, &body).await;
        assert_eq!(refused.status, 403, "{why}: {}", refused.body);
        let dead = form(
            admin,
            "/replay-dead",
            &headers,
            &format!("{body}&endpoint=pagarme"),
        )
        .await;
        assert_eq!(dead.status, 403, "{why}");
    }
    // A GET never changes anything.
    assert_eq!(get(admin, &path, &[]).await.status, 405);
    assert_eq!(
        get(admin, "/replay-dead?endpoint=pagarme", &[])
            .await
            .status,
        405
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        status_and_attempts(&server, id),
        ("dead".into(), 2),
        "nothing changed"
    );
    assert_eq!(target.count(), 2);

    let replayed = form(
        admin,
        &path,
        &[
            visitor,
            h("origin", &origin),
            h("sec-fetch-site", "same-origin"),
        ],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(replayed.status, 303, "{}", replayed.body);
    assert_eq!(
        replayed.headers["location"].to_str().unwrap(),
        path.trim_end_matches("/replay")
    );
    eventually(WAIT, "the replayed event delivered", || {
        status_and_attempts(&server, id).0 == "delivered"
    })
    .await;
    let api = json(&get(admin, &format!("/api/events/{id}"), &[]).await);
    assert_eq!(api["status"], "delivered");
    let attempts = api["delivery_attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        3,
        "every attempt, the two failed ones kept: {api:#}"
    );
    assert_eq!(attempts[2]["outcome"], "delivered");
    server.stop().await;
}

#[tokio::test]
async fn replay_all_dead_of_an_endpoint() {
    let target = Target::start(vec![500, 500, 200]).await;
    let server = TestServer::start("", &forward_to(target.addr)).await;
    let admin = server.admin.unwrap();
    let id = a_dead_event(&server).await;
    let page = get(admin, "/", &[]).await;
    assert!(
        page.body.contains("Replay all 1 dead event of pagarme"),
        "{}",
        page.body
    );
    let replayed = form(
        admin,
        "/replay-dead",
        &[cookie_of(&page)],
        &format!("csrf={}&endpoint=pagarme", csrf(&page.body)),
    )
    .await;
    assert_eq!(replayed.status, 303);
    assert_eq!(replayed.headers["location"], "/events?endpoint=pagarme");
    eventually(WAIT, "delivered", || {
        status_and_attempts(&server, id).0 == "delivered"
    })
    .await;
    server.stop().await;
}

/// The events list takes `events list`'s filters (a window, a type glob, a route) and offers
/// to replay what they pick: "Replay these N", a POST with the form token, as the others.
#[tokio::test]
async fn the_events_list_filters_by_window_and_replays_what_it_shows() {
    let target = Target::start(vec![500, 500, 200]).await;
    let server = TestServer::start("", &forward_to(target.addr)).await;
    let admin = server.admin.unwrap();
    let id = a_dead_event(&server).await;
    let page = get(
        admin,
        "/events?status=dead&since=1h&type=*&route=default",
        &[],
    )
    .await;
    assert!(page.body.contains("Replay these 1 event<"), "{}", page.body);
    assert!(page.body.contains(&format!("href=\"/events/{id}\"")));
    let earlier = get(admin, "/events?status=dead&until=1h", &[]).await;
    assert!(!earlier.body.contains(&format!("href=\"/events/{id}\"")));
    assert!(!earlier.body.contains("Replay these"), "nothing to replay");
    let unfiltered = get(admin, "/events", &[]).await;
    assert!(
        !unfiltered.body.contains("Replay these"),
        "only for a filter"
    );
    let since = page
        .body
        .split("name=\"since\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the button's own since field")
        .to_string();
    assert!(since.ends_with('Z'), "the window as an instant: {since}");
    let fields = format!("status=dead&since={since}&type=*&route=default");
    let forged = form(admin, "/replay-matching", &[cookie_of(&page)], &fields).await;
    assert_eq!(forged.status, 403, "no form token");
    assert_eq!(status_and_attempts(&server, id).0, "dead");
    let replayed = form(
        admin,
        "/replay-matching",
        &[cookie_of(&page)],
        &format!("csrf={}&{fields}", csrf(&page.body)),
    )
    .await;
    assert_eq!(replayed.status, 303);
    assert!(
        replayed.headers["location"]
            .to_str()
            .unwrap()
            .starts_with("/events?status=dead&type=*&route=default&since="),
        "{:?}",
        replayed.headers["location"]
    );
    eventually(WAIT, "delivered", || {
        status_and_attempts(&server, id).0 == "delivered"
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn bodies_and_headers_are_shown_as_text_never_as_markup() {
    let server = TestServer::start("", "").await;
    let admin = server.admin.unwrap();
    let body = br#"{"id":"evt_x","type":"charge.paid","note":"<script>alert(1)</script>"}"#;
    let mut headers = pagarme_headers(body);
    headers.push(h("x-evil", "\"><img src=x onerror=alert(2)>"));
    headers.push(h("authorization", "Bearer gateway-secret-value"));
    let reply = post(server.addr, "/webhooks/pagarme", &headers, body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let id: i64 = server.one("SELECT id FROM events");

    let page = get(admin, &format!("/events/{id}"), &[]).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("<script>"), "{}", page.body);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<img"), "{}", page.body);
    assert!(
        page.body
            .contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"),
        "{}",
        page.body
    );
    assert!(page.body.contains("[redacted]") && !page.body.contains("gateway-secret-value"));
    assert!(
        page.body
            .contains("  &quot;type&quot;: &quot;charge.paid&quot;"),
        "pretty-printed JSON: {}",
        page.body
    );
    for list in ["/events", "/events?q=evt_x", "/"] {
        let listed = get(admin, list, &[]).await;
        assert!(
            !listed.body.contains("<script>") && !listed.body.contains("<img"),
            "{list}"
        );
    }
    let raw = get(admin, &format!("/events/{id}/body"), &[]).await;
    assert_eq!(raw.body.as_bytes(), body);
    assert_eq!(raw.headers["content-type"], "application/octet-stream");
    assert!(
        raw.headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    server.stop().await;
}

#[tokio::test]
async fn the_json_api_lists_filters_pages_and_counts() {
    let server = TestServer::start("", "").await;
    let admin = server.admin.unwrap();
    for n in 1..=3 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200,
        "a duplicate"
    );
    let bad = post(
        server.addr,
        "/webhooks/pagarme",
        &[h("x-hub-signature", "sha256=00")],
        b"{}",
    )
    .await;
    assert_eq!(bad.status, 401);

    let stats = json(&get(admin, "/api/stats", &[]).await);
    let pagarme = stats["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["endpoint"] == "pagarme")
        .unwrap()
        .clone();
    assert_eq!(pagarme["received_last_hour"], 3, "{stats:#}");
    assert_eq!(pagarme["received_last_day"], 3);
    assert_eq!(pagarme["duplicates_last_day"], 1);
    assert_eq!(pagarme["rejected_last_day"]["bad_signature"], 1);
    assert_eq!(pagarme["rejected_last_day"]["total"], 1);
    assert_eq!(pagarme["pending"], 0, "no forward: stored");
    assert!(pagarme["last_received_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(stats["alert"]["red"], false);
    let hours = stats["hours"].as_array().unwrap();
    assert_eq!(hours.len(), 48);
    assert_eq!(hours[47]["received"], 3);
    assert_eq!(hours[47]["duplicate"], 1);
    assert_eq!(hours[47]["rejected"], 1);

    let page1 = json(&get(admin, "/api/events?endpoint=pagarme&limit=2", &[]).await);
    let events = page1["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert!(
        events[0]["id"].as_i64() > events[1]["id"].as_i64(),
        "newest first"
    );
    let ids: Vec<i64> = server
        .db()
        .prepare("SELECT id FROM events ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(events[0]["id"], ids[2]);
    assert_eq!(events[0]["event_type"], "charge.paid");
    assert_eq!(events[0]["status"], "stored");
    let before = page1["next_before"].as_i64().unwrap();
    let page2 = json(
        &get(
            admin,
            &format!("/api/events?endpoint=pagarme&limit=2&before={before}"),
            &[],
        )
        .await,
    );
    assert_eq!(page2["events"].as_array().unwrap().len(), 1);
    assert_eq!(page2["events"][0]["id"], ids[0]);
    assert_eq!(page2["next_before"], serde_json::Value::Null);
    let key = events[1]["dedup_key"].as_str().unwrap();
    let found = json(&get(admin, &format!("/api/events?q={}", &key[3..12]), &[]).await);
    assert_eq!(found["events"].as_array().unwrap().len(), 1);
    assert_eq!(found["events"][0]["id"], ids[1]);
    // The search also finds the object an event is about (the body's `data.id`).
    let by_object = json(&get(admin, "/api/events?q=ch_2", &[]).await);
    assert_eq!(by_object["events"].as_array().unwrap().len(), 1);
    assert_eq!(by_object["events"][0]["object_id"], "ch_2");
    let none = json(&get(admin, "/api/events?type=refund&status=dead", &[]).await);
    assert!(none["events"].as_array().unwrap().is_empty());
    let other = json(&get(admin, "/api/events?endpoint=github", &[]).await);
    assert!(other["events"].as_array().unwrap().is_empty());

    let id = events[0]["id"].as_i64().unwrap();
    let one = json(&get(admin, &format!("/api/events/{id}"), &[]).await);
    assert_eq!(one["id"], id);
    assert_eq!(one["content_type"], "application/json");
    assert!(one["body_text"].as_str().unwrap().contains("hook_3"));
    assert!(
        one["headers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h[0] == "x-hub-signature")
    );
    assert!(one["delivery_attempts"].as_array().unwrap().is_empty());
    // `portaria events show --json` prints the very same object: one shape for one event.
    let shown = ok_stdout(&run_cli(
        &["events", "show", "--json", &id.to_string()],
        &server.dir.path().join("portaria.toml"),
    ));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&shown).unwrap(),
        one
    );
    let missing = get(admin, "/api/events/999999", &[]).await;
    assert_eq!(missing.status, 404);
    assert_eq!(json(&missing)["error"], "no such event");
    assert_eq!(get(admin, "/events/999999", &[]).await.status, 404);
    server.stop().await;
}

#[tokio::test]
async fn rejected_counts_survive_a_restart() {
    let server = TestServer::start("", "").await;
    for _ in 0..2 {
        let bad = post(
            server.addr,
            "/webhooks/pagarme",
            &[h("x-hub-signature", "sha256=00")],
            b"{}",
        )
        .await;
        assert_eq!(bad.status, 401);
    }
    let too_large = post_pagarme(server.addr, &vec![b'x'; 5000]).await;
    assert_eq!(too_large.status, 413);
    // No page was asked for: the counts are only in memory until the clean stop writes them.
    let db = server.db.clone();
    let text = std::fs::read_to_string(server.config_path()).unwrap();
    let dir = server.stop().await;
    let again = TestServer::start_with(dir, db, &text).await;
    let stats = json(&get(again.admin.unwrap(), "/api/stats", &[]).await);
    let pagarme = &stats["endpoints"][0];
    assert_eq!(pagarme["endpoint"], "pagarme");
    assert_eq!(
        pagarme["rejected_last_day"]["bad_signature"], 2,
        "{stats:#}"
    );
    assert_eq!(pagarme["rejected_last_day"]["too_large"], 1);
    assert_eq!(stats["hours"][47]["rejected"], 3);
    again.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_is_paused_and_resumed_from_the_overview() {
    let target = Target::start(vec![200]).await;
    let server = TestServer::start("", &forward_to(target.addr)).await;
    let admin = server.admin.unwrap();
    let page = get(admin, "/", &[]).await;
    assert!(
        page.body.contains("action=\"/routes/pause\""),
        "{}",
        page.body
    );
    let (cookie, token) = (cookie_of(&page), csrf(&page.body));
    let post = |path: &'static str, body: String| {
        let cookie = cookie.clone();
        async move { form(admin, path, &[cookie], &body).await }
    };

    // Without the form token, or naming a route that is not configured: nothing changes.
    let forged = post("/routes/pause", "endpoint=pagarme&route=default".into()).await;
    assert_eq!(forged.status, 403);
    let other = post(
        "/routes/pause",
        format!("csrf={token}&endpoint=pagarme&route=erp"),
    )
    .await;
    assert_eq!(other.status, 400, "{}", other.body);
    assert_eq!(server.one::<i64>("SELECT count(*) FROM route_pauses"), 0);
    assert_eq!(get(admin, "/routes/pause", &[]).await.status, 405);

    let paused = post(
        "/routes/pause",
        format!("csrf={token}&endpoint=pagarme&route=default"),
    )
    .await;
    assert_eq!(paused.status, 303);
    let reason: String = server.one("SELECT reason FROM route_pauses");
    assert_eq!(reason, "paused on the status page");
    let page = get(admin, "/", &[]).await;
    assert!(
        page.body.contains("action=\"/routes/resume\""),
        "{}",
        page.body
    );
    assert!(page.body.contains("paused on the status page"));

    // Paused: stored, not delivered.
    assert_eq!(
        post_pagarme(server.addr, &payment_body(1)).await.status,
        200
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(target.count(), 0, "a paused route delivers nothing");

    let resumed = post(
        "/routes/resume",
        format!("csrf={token}&endpoint=pagarme&route=default"),
    )
    .await;
    assert_eq!(resumed.status, 303);
    eventually(WAIT, "delivered once resumed", || target.count() == 1).await;
    assert_eq!(server.one::<i64>("SELECT count(*) FROM route_pauses"), 0);
    server.stop().await;
}
