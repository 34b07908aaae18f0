//! End to end in a real browser (issue 14's "done when"): portaria with a forward target that
//! fails, a webhook retried until dead, then Debian's Chromium, driven by playwright-core
//! (`tests/browser/status_page.mjs`), sees the red banner and the dead event with its error,
//! the target is fixed, replay is clicked, and the event ends delivered; the rejected request
//! is listed with its reason and its page has no button. Screenshots (desktop
//! and phone width) land in `target/screenshots/`. And the login with a `[status]` token
//! (`tests/browser/login.mjs`): the form, a wrong token, the HttpOnly session cookie, log out.
//! And the language (`tests/browser/language.mjs`): a Chromium whose language is `pt-BR` gets
//! the page in Brazilian Portuguese, one whose language is `en-US` in English. And the controls
//! of issue 27 (`tests/browser/controls.mjs`): a route paused and resumed from the overview's
//! routes panel, what waited then delivered in order to a real command; the events list filtered
//! by type, "Replay these N" pressed, and exactly those N sent again.
//!
//! Skipped, with a note, when Chromium or playwright-core is missing; required when
//! `PORTARIA_REQUIRE_BROWSER` is set (`.ci/run` sets it and installs both).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use hyper_util::rt::TokioIo;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

/// A forward target that answers 500 with an error text until `POST /fix`, then 200.
struct FixableTarget {
    addr: SocketAddr,
    deliveries: Arc<AtomicUsize>,
}

impl FixableTarget {
    async fn start() -> FixableTarget {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fixed = Arc::new(AtomicBool::new(false));
        let deliveries = Arc::new(AtomicUsize::new(0));
        let counted = deliveries.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (fixed, counted) = (fixed.clone(), counted.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: Request<_>| {
                        let (fixed, counted) = (fixed.clone(), counted.clone());
                        async move {
                            let _: &hyper::body::Incoming = req.body();
                            let (status, body) = if req.uri().path() == "/fix" {
                                fixed.store(true, Ordering::SeqCst);
                                (200, "fixed")
                            } else {
                                counted.fetch_add(1, Ordering::SeqCst);
                                if fixed.load(Ordering::SeqCst) {
                                    (200, "ok")
                                } else {
                                    (500, "the shop system is down")
                                }
                            };
                            let mut res = hyper::Response::new(Full::new(Bytes::from(body)));
                            *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            Ok::<_, hyper::Error>(res)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FixableTarget { addr, deliveries }
    }
}

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Chromium and playwright-core, or why not.
fn browser() -> Result<PathBuf, String> {
    let chromium = std::env::var_os("PORTARIA_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    if !chromium.exists() {
        return Err(format!(
            "{} not found (apt-get install chromium)",
            chromium.display()
        ));
    }
    if !browser_dir().join("node_modules/playwright-core").exists() {
        return Err("playwright-core not installed (npm install --prefix tests/browser)".into());
    }
    Ok(chromium)
}

/// Chromium, or None (the test is skipped, with a note) where it may be missing.
fn browser_or_skip() -> Option<PathBuf> {
    match browser() {
        Ok(chromium) => Some(chromium),
        Err(why) => {
            assert!(
                std::env::var_os("PORTARIA_REQUIRE_BROWSER").is_none(),
                "the browser test is required here: {why}"
            );
            eprintln!("skipped: the status page's browser test: {why}");
            None
        }
    }
}

fn screenshots() -> PathBuf {
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// Runs `tests/browser/SCRIPT` with `env` (and the screenshots' directory and Chromium), within
/// 120 s; panics with its output if it fails.
async fn run_script(script: &str, chromium: &Path, env: &[(&str, String)]) -> String {
    let mut command = tokio::process::Command::new("node");
    command
        .arg(browser_dir().join(script))
        .env("SCREENSHOTS", screenshots())
        .env("CHROMIUM", chromium)
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the browser test ends within 120 s")
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{script}:\n{stdout}\n{stderr}");
    eprintln!("{stdout}");
    stdout
}

#[tokio::test]
async fn the_owner_logs_in_with_the_token_and_out_again() {
    let Some(chromium) = browser_or_skip() else {
        return;
    };
    let secrets = tempfile::tempdir().unwrap();
    let token = "correct-horse-battery-staple";
    std::fs::write(secrets.path().join("token"), token).unwrap();
    let extra = format!(
        "\n[status]\ntoken_file = \"{}\"",
        secrets.path().join("token").display()
    );
    let server = TestServer::start(&extra, "").await;
    let admin = server.admin.unwrap();
    let env = [
        ("ADMIN_URL", format!("http://{admin}")),
        ("TOKEN", token.to_string()),
    ];
    let out = run_script("login.mjs", &chromium, &env).await;
    assert!(out.contains("ok: logged out"), "{out}");
    server.stop().await;
}

/// portaria forwarding to `target`, with three pagarme events dead (each tried twice) and a
/// request with a bad signature (so the chart and the card show a rejection); and the id of
/// the last event.
async fn three_dead_and_a_rejection(target: &FixableTarget) -> (TestServer, i64) {
    let forward = format!(
        "forward = {{ url = \"http://{}/orders\", timeout_secs = 2 }}\nretry = [\"200ms\"]\n",
        target.addr
    );
    let server = TestServer::start("", &forward).await;
    for n in 1..=3 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    eventually(WAIT, "every event dead", || {
        server.one::<i64>("SELECT count(*) FROM deliveries WHERE status = 'dead'") == 3
    })
    .await;
    // A bad signature too, so the chart and the card show a rejection.
    let bad = post(
        server.addr,
        "/webhooks/pagarme",
        &[h("x-hub-signature", "sha256=00")],
        b"{}",
    )
    .await;
    assert_eq!(bad.status, 401);
    eventually(WAIT, "the rejected request kept", || {
        server.one::<i64>("SELECT count(*) FROM rejected") == 1
    })
    .await;
    let id: i64 = server.one("SELECT max(id) FROM events");
    (server, id)
}

#[tokio::test]
async fn the_owner_sees_the_dead_event_replays_it_and_sees_it_delivered() {
    let Some(chromium) = browser_or_skip() else {
        return;
    };
    let target = FixableTarget::start().await;
    let (server, id) = three_dead_and_a_rejection(&target).await;
    let admin = server.admin.unwrap();
    // One replayed in the browser; the other two stay dead, then are replayed by the card.
    let env = [
        ("ADMIN_URL", format!("http://{admin}")),
        ("TARGET_URL", format!("http://{}", target.addr)),
        ("EVENT_ID", id.to_string()),
        ("EXPECT_DEAD", "3".to_string()),
    ];
    run_script("status_page.mjs", &chromium, &env).await;
    let status: String = server
        .db()
        .query_row(
            "SELECT status FROM deliveries WHERE event_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(status, "delivered");
    assert!(
        target.deliveries.load(Ordering::SeqCst) >= 7,
        "2 attempts x 3, then the replay"
    );
    for shot in [
        "overview-desktop.png",
        "overview-phone.png",
        "event-dead-desktop.png",
        "rejected-desktop.png",
    ] {
        let len = std::fs::metadata(screenshots().join(shot)).map_or(0, |m| m.len());
        assert!(len > 10_000, "{shot}: {len} bytes");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_brazilian_browser_gets_the_page_in_portuguese_and_another_in_english() {
    let Some(chromium) = browser_or_skip() else {
        return;
    };
    let target = FixableTarget::start().await;
    let (server, id) = three_dead_and_a_rejection(&target).await;
    let env = [
        ("ADMIN_URL", format!("http://{}", server.admin.unwrap())),
        ("EVENT_ID", id.to_string()),
        ("EXPECT_DEAD", "3".to_string()),
    ];
    let out = run_script("language.mjs", &chromium, &env).await;
    assert!(out.contains("ok: <html lang=\"pt-BR\">"), "{out}");
    assert!(out.contains("ok: <html lang=\"en\">"), "{out}");
    for shot in ["overview-pt-BR-desktop.png", "overview-en-US-desktop.png"] {
        let len = std::fs::metadata(screenshots().join(shot)).map_or(0, |m| m.len());
        assert!(len > 10_000, "{shot}: {len} bytes");
    }
    server.stop().await;
}

/// portaria forwarding pagarme to a command in `work` that records each call (`event attempt`).
async fn recording_to(work: &Path) -> TestServer {
    let program = record_calls(work, "on-event.sh", "cat >/dev/null", EVENT_ATTEMPT, "");
    let forward = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 10 }}\nretry = [\"200ms\"]\n",
        program.display()
    );
    TestServer::start("", &forward).await
}

/// A pagarme event of type `kind` (payment `n`).
async fn post_typed(server: &TestServer, n: usize, kind: &str) {
    let body = String::from_utf8(payment_body(n))
        .unwrap()
        .replace("charge.paid", kind);
    assert_eq!(post_pagarme(server.addr, body.as_bytes()).await.status, 200);
}

fn shots_taken(names: &[&str]) {
    for shot in names {
        let len = std::fs::metadata(screenshots().join(shot)).map_or(0, |m| m.len());
        assert!(len > 10_000, "{shot}: {len} bytes");
    }
}

#[tokio::test]
async fn the_owner_pauses_a_route_on_the_page_and_resumes_it_and_what_waited_goes_out_in_order() {
    let Some(chromium) = browser_or_skip() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let server = recording_to(work.path()).await;
    let admin = format!("http://{}", server.admin.unwrap());
    let step = |step: &str, expect: usize| {
        [
            ("STEP", step.to_string()),
            ("ADMIN_URL", admin.clone()),
            ("EXPECT", expect.to_string()),
        ]
    };
    run_script("controls.mjs", &chromium, &step("pause", 0)).await;
    let reason: String = server.one("SELECT reason FROM route_pauses");
    assert_eq!(reason, "paused on the status page");

    for n in 1..=3 {
        assert_eq!(
            post_pagarme(server.addr, &payment_body(n)).await.status,
            200
        );
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        calls(work.path()),
        Vec::<String>::new(),
        "nothing goes out while paused"
    );

    let resumed_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    run_script("controls.mjs", &chromium, &step("resume", 3)).await;
    assert_eq!(
        event_attempts(work.path()),
        [(1, 1), (2, 1), (3, 1)],
        "each once, in arrival order"
    );
    assert_eq!(server.one::<i64>("SELECT count(*) FROM route_pauses"), 0);
    let first: i64 = server.one("SELECT min(finished_at) FROM deliveries");
    assert!(
        first >= resumed_at,
        "delivered {} ms before the resume",
        resumed_at - first
    );
    shots_taken(&[
        "route-paused-desktop.png",
        "route-paused-waiting-desktop.png",
        "route-resumed-desktop.png",
    ]);
    server.stop().await;
}

#[tokio::test]
async fn the_owner_filters_the_events_replays_these_n_and_only_those_go_out_again() {
    let Some(chromium) = browser_or_skip() else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let server = recording_to(work.path()).await;
    // Six delivered events, every other one a refund: the owner's handler mishandled those.
    for n in 1..=6 {
        let kind = if n % 2 == 0 {
            "charge.refunded"
        } else {
            "charge.paid"
        };
        post_typed(&server, n, kind).await;
    }
    eventually(WAIT, "all six delivered once", || {
        calls(work.path()).len() == 6
    })
    .await;
    let env = [
        ("STEP", "replay".to_string()),
        ("ADMIN_URL", format!("http://{}", server.admin.unwrap())),
        ("TYPE", "*.refunded".to_string()),
        ("EXPECT", "3".to_string()),
    ];
    run_script("controls.mjs", &chromium, &env).await;
    eventually(WAIT, "the three replayed", || calls(work.path()).len() >= 9).await;
    // Time for any other to go out, if one wrongly would.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let seen = event_attempts(work.path());
    assert_eq!(seen.len(), 9, "{seen:?}");
    let mut replayed: Vec<i64> = seen[6..].iter().map(|(id, _)| *id).collect();
    replayed.sort();
    assert_eq!(replayed, [2, 4, 6], "exactly the refunds: {seen:?}");
    assert_eq!(
        server.one::<i64>("SELECT count(*) FROM deliveries WHERE status = 'delivered'"),
        6
    );
    shots_taken(&["events-filtered-desktop.png", "events-replayed-desktop.png"]);
    server.stop().await;
}
