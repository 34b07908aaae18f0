//! Failures retrying cannot fix, and targets that say when to come back, with the real server:
//! a command's exit code after sysexits(3), a real HTTP listener's 4xx and `Retry-After`.
//! Promises: docs/forwarding.md, "When retrying cannot help".

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A delivery's `(status, attempts, next_attempt_at, last_error)`.
fn delivery(server: &TestServer, id: i64) -> (String, u32, Option<i64>, Option<String>) {
    server
        .db()
        .query_row(
            "SELECT status, attempts, next_attempt_at, last_error FROM deliveries \
             WHERE event_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap()
}

async fn accept(server: &TestServer, n: usize) {
    assert_eq!(
        post_pagarme(server.addr, &payment_body(n)).await.status,
        200
    );
}

/// A real HTTP listener answering its n-th request with the n-th `(status, headers)` of
/// `script` (the last repeats); returns its address and how many requests it has had.
async fn answering(
    script: Vec<(u16, Vec<(&'static str, String)>)>,
) -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<usize>> = Arc::default();
    let (count, script) = (seen.clone(), Arc::new(script));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (count, script) = (count.clone(), script.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (count, script) = (count.clone(), script.clone());
                        async move {
                            req.into_body().collect().await?;
                            let n = {
                                let mut count = count.lock().unwrap();
                                *count += 1;
                                *count
                            };
                            let (status, headers) =
                                script.get(n - 1).or(script.last()).cloned().unwrap();
                            let mut res =
                                hyper::Response::new(Full::new(Bytes::from_static(b"no thanks")));
                            *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            for (name, value) in headers {
                                res.headers_mut().insert(name, value.parse().unwrap());
                            }
                            Ok::<_, hyper::Error>(res)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

async fn forwarding_to(target: SocketAddr, retry: &str) -> TestServer {
    let extra = format!(
        "forward = {{ url = \"http://{target}/in\", timeout_secs = 2 }}\nretry = {retry}\n"
    );
    TestServer::start("", &extra).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_exiting_65_is_dead_at_once_and_75_is_retried() {
    let work = tempfile::tempdir().unwrap();
    // Event 1 is data the handler cannot take; event 2 meets a handler that is busy.
    let program = work.path().join("on-event.sh");
    write_executable(
        &program,
        "#!/bin/sh\ncat >/dev/null\necho \"cannot parse\" >&2\n\
         if [ \"$PORTARIA_EVENT_ID\" = 1 ]; then exit 65; fi\nexit 75\n",
    );
    let extra = format!(
        "forward = {{ command = [\"{}\"], timeout_secs = 10 }}\nretry = [\"100ms\", \"100ms\"]\n",
        program.display()
    );
    let server = TestServer::start("", &extra).await;
    accept(&server, 1).await;
    accept(&server, 2).await;
    eventually(WAIT, "both dead", || {
        delivery(&server, 1).0 == "dead" && delivery(&server, 2).0 == "dead"
    })
    .await;
    let (_, attempts, _, error) = delivery(&server, 1);
    assert_eq!(attempts, 1, "65 is not retried");
    let error = error.unwrap();
    assert!(
        error.starts_with("exit status 65 (EX_DATAERR") && error.contains("cannot parse"),
        "{error}"
    );
    let (_, attempts, _, error) = delivery(&server, 2);
    assert_eq!(attempts, 3, "75 goes the whole schedule");
    assert!(error.unwrap().starts_with("exit status 75 (EX_TEMPFAIL)"));
    assert_eq!(server.one::<i64>("SELECT count(*) FROM attempts"), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_is_dead_after_one_attempt() {
    let (target, requests) = answering(vec![(400, vec![])]).await;
    let server = forwarding_to(target, "[\"100ms\", \"100ms\"]").await;
    accept(&server, 1).await;
    eventually(WAIT, "dead", || delivery(&server, 1).0 == "dead").await;
    let (_, attempts, _, error) = delivery(&server, 1);
    assert_eq!(attempts, 1);
    let error = error.unwrap();
    assert!(
        error.starts_with("HTTP 400: ") && error.contains("not retried"),
        "{error}"
    );
    assert!(error.ends_with("no thanks"), "{error}");
    // A 409 in the same place would have been tried three times: see the next test's retry.
    assert_eq!(*requests.lock().unwrap(), 1);
}

/// Waits for event 1's first attempt to be recorded with a retry, and returns when it is due
/// next and the clock just before and after.
async fn first_retry(server: &TestServer, before_ms: i64) -> (i64, String, i64) {
    eventually(WAIT, "first attempt recorded", || {
        delivery(server, 1).1 == 1 && delivery(server, 1).0 == "pending"
    })
    .await;
    let after_ms = now_ms();
    let (_, _, next, error) = delivery(server, 1);
    let next = next.unwrap();
    assert!(next > before_ms, "{next} {before_ms}");
    (next, error.unwrap(), after_ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_seconds_is_retried_then_and_not_at_the_schedule_s_gap() {
    let (target, requests) = answering(vec![
        (429, vec![("retry-after", "1".into())]),
        (200, vec![]),
    ])
    .await;
    // The schedule alone would wait an hour.
    let server = forwarding_to(target, "[\"1h\"]").await;
    let before = now_ms();
    accept(&server, 1).await;
    let (next, error, after) = first_retry(&server, before).await;
    assert!(
        (before + 1_000..=after + 1_000).contains(&next),
        "due {} ms after the post, {} ms before the check",
        next - before,
        after - next
    );
    assert!(error.starts_with("HTTP 429 (Retry-After 1s)"), "{error}");
    eventually(WAIT, "delivered on the second attempt", || {
        delivery(&server, 1).0 == "delivered"
    })
    .await;
    assert_eq!(delivery(&server, 1).1, 2);
    assert_eq!(*requests.lock().unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_with_an_http_date_is_retried_at_that_date_within_the_longest_step() {
    let date = |secs| httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(secs));
    // 40 s from now, on a schedule whose longest step is 60 s: the date is kept.
    let (target, _) = answering(vec![(503, vec![("retry-after", date(40))])]).await;
    let server = forwarding_to(target, "[\"10s\", \"60s\"]").await;
    let before = now_ms();
    accept(&server, 1).await;
    let (next, error, after) = first_retry(&server, before).await;
    // The date has whole seconds: up to one less than asked.
    assert!(
        (before + 38_000..=after + 40_000).contains(&next),
        "due {} ms after the post",
        next - before
    );
    assert!(error.starts_with("HTTP 503 (Retry-After "), "{error}");

    // A day from now is bounded by the longest step.
    let (target, _) = answering(vec![(503, vec![("retry-after", date(86_400))])]).await;
    let server = forwarding_to(target, "[\"10s\", \"60s\"]").await;
    let before = now_ms();
    accept(&server, 1).await;
    let (next, _, after) = first_retry(&server, before).await;
    assert!(
        (before + 60_000..=after + 60_000).contains(&next),
        "due {} ms after the post",
        next - before
    );
}
